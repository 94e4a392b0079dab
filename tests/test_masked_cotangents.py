"""A cotangent masked by np.where stays masked through the partials after it.

vmap writes a branch on per-example values as ``np.where(c, then_value, else_value)``; reverse
mode gives the then-side ``np.where(c, g, 0.0)`` and multiplied it by the branch's partial:
where the branch was not taken that partial may be infinite or nan (sqrt or log of a
negative number or of 0), and 0 * inf gave nan: ``grad(lambda xs: np.sum(vmap(f)(xs)))``
of ``f = sqrt(x) if x > 0 else 3 * x`` was [nan, 0.25] for [-1, 4] (session 42's bug hunt).
templates.simplify now writes ``np.where(c, g, 0.0) * e`` as ``np.where(c, g * e, 0.0)``,
which is the same number wherever e is finite. The user's own np.where gets the same care
(JAX gives nan there: its documented "double where" gotcha).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def _sqrt_or_linear(x):
    if x > 0:
        return np.sqrt(x)
    else:
        return 3.0 * x


def _log_or_linear(x):
    if x > 0.0:
        y = np.log(x) * 2.0
    else:
        y = 3.0 * x
    return y


def _batch_loss(xs):
    return np.sum(ad.vmap(_sqrt_or_linear)(xs))


def _batch_log_loss(xs):
    return np.sum(ad.vmap(_log_or_linear)(xs) ** 2)


def _safe_sqrt_where(x):
    return np.sum(np.where(x > 0.0, np.sqrt(x), 0.0))


def _expected_sqrt(xs):
    return np.where(xs > 0, 0.5 / np.sqrt(np.abs(xs) + (xs <= 0)), 3.0)


XS = np.array([-1.0, 0.0, 4.0, 0.25])


def test_grad_of_a_vmapped_branch_is_finite():
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(ad.grad(_batch_loss)(XS), _expected_sqrt(XS), rtol=1e-12)
        y = np.array([_log_or_linear(x) for x in XS])
        dy = np.where(XS > 0, 2.0 / np.where(XS > 0, XS, 1.0), 3.0)
        np.testing.assert_allclose(ad.grad(_batch_log_loss)(XS), 2.0 * y * dy, rtol=1e-12)
        jac = ad.jacrev(ad.vmap(_log_or_linear))(XS)
        np.testing.assert_allclose(np.diag(jac), dy, rtol=1e-12)


@pytest.mark.numba
def test_grad_of_a_vmapped_branch_under_jit():
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(jit(ad.grad(_batch_loss))(XS), _expected_sqrt(XS),
                                   rtol=1e-12)


def test_the_users_where_with_a_singular_untaken_side():
    with np.errstate(invalid="ignore", divide="ignore"):
        g = ad.grad(_safe_sqrt_where)(XS)
    np.testing.assert_allclose(g, np.where(XS > 0, 0.5 / np.sqrt(np.maximum(XS, 1e-300)), 0.0),
                               rtol=1e-12)
    assert np.all(np.isfinite(g))
