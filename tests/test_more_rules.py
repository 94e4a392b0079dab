"""Rules for np.polyval, np.cov, np.corrcoef, np.interp, np.linalg.eigvalsh and np.linalg.eigh.

Each function: check_grads in both modes at order 2 (finite differences), the compiled gradient
against the plain one, vmap(grad) against the gradient per example, and at least one gradient
against a value worked out by hand. The op table (tests/test_ops.py) has rows for them too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hessian_check import assert_hessian_matches_gradient_differences

import autodiff_ast as ad
from autodiff_ast.jit import jit

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")

KNOTS = np.array([-1.0, -0.2, 0.5, 1.5])
SPREAD = np.diag(np.array([0.0, 3.0, 6.0]))  # distinct eigenvalues for small symmetric a + a.T
WEIGHTS = np.array([[0.3, -1.2, 0.7], [1.1, 0.4, -0.5], [-0.8, 0.9, 0.2]])


def _polyval_loss(p, x):
    return np.sum(np.polyval(p, x) ** 2) + np.polyval(p, x[0, 0]) * p[0]


def _cov_loss(m):
    return np.sum(np.cov(m) * WEIGHTS) + np.sum(np.cov(m.T, rowvar=False, bias=True) ** 2) + \
        np.cov(m[0], ddof=0) * np.sum(np.cov(m, ddof=2))


def _corrcoef_loss(m):
    return np.sum(np.corrcoef(m) * WEIGHTS) + np.sum(np.corrcoef(m.T, rowvar=False) ** 3)


def _interp_loss(x, fp):
    return np.sum(np.interp(x, KNOTS, fp) ** 2) + np.interp(x[1, 2], KNOTS, fp) * fp[1]


def _eigvalsh_loss(a):
    return np.sum(np.linalg.eigvalsh(a + a.T + SPREAD) ** 3)


def _eigh_loss(a):
    w, v = np.linalg.eigh(a + a.T + SPREAD)
    return np.sum(w * v * v[0] * WEIGHTS) + np.sum(v ** 4 * WEIGHTS)


def _args(name, rng):
    if name == "polyval":
        return rng.standard_normal(4), rng.uniform(-1.5, 1.5, (2, 3))
    if name == "interp":  # points on both sides of the knots and outside them
        return rng.uniform(-1.8, 2.0, (2, 3)), rng.standard_normal(4)
    if name in ("eigvalsh", "eigh"):
        return (0.3 * rng.standard_normal((3, 3)),)
    return (rng.standard_normal((3, 5)),)


LOSSES = {"polyval": _polyval_loss, "cov": _cov_loss, "corrcoef": _corrcoef_loss,
          "interp": _interp_loss, "eigvalsh": _eigvalsh_loss, "eigh": _eigh_loss}
CASES = [pytest.param(name, id=name) for name in LOSSES]


@pytest.mark.parametrize("name", CASES)
def test_both_modes_at_order_2(name, rng):
    f = LOSSES[name]
    ad.check_grads(f, _args(name, rng), order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("name", CASES)
def test_hessian_matches_differences_of_the_gradient(name, rng):
    """ad.hessian (the batching rules, differentiated) against central differences."""
    assert_hessian_matches_gradient_differences(LOSSES[name], _args(name, rng), rng)


@pytest.mark.numba
@pytest.mark.parametrize("name", CASES)
def test_compiled_gradient_equals_the_plain_one(name, rng):
    f, args = LOSSES[name], _args(name, rng)
    argnums = tuple(range(len(args)))
    want = ad.grad(f, argnums=argnums)(*args)
    got = jit(ad.grad(f, argnums=argnums))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_batched_gradient_and_value(name, rng):
    """vmap(grad) and vmap(f) against the plain ones per example (every argument batched)."""
    f, args = LOSSES[name], _args(name, rng)
    argnums = tuple(range(len(args)))
    batch = [np.stack([a, 0.5 * a - 0.1, 1.2 * a]) for a in args]
    examples = [[b[i] for b in batch] for i in range(3)]
    want = [ad.grad(f, argnums=argnums)(*e) for e in examples]
    got = ad.vmap(ad.grad(f, argnums=argnums))(*batch)
    for k in range(len(args)):
        np.testing.assert_allclose(got[k], np.stack([w[k] for w in want]), rtol=1e-10,
                                   atol=1e-12)
    np.testing.assert_allclose(ad.vmap(f)(*batch), [f(*e) for e in examples], rtol=1e-10)


def test_batched_coefficients_of_one_polynomial_per_example(rng):
    """polyval with a batched p and an unbatched x (the powers form of the batching rule)."""
    ps, x = rng.standard_normal((3, 4)), rng.standard_normal(5)
    got = ad.vmap(lambda p: np.polyval(p, x))(ps)
    np.testing.assert_allclose(got, [np.polyval(p, x) for p in ps], rtol=1e-12)
    grads = ad.vmap(ad.grad(lambda p: np.sum(np.polyval(p, x) ** 2)))(ps)
    for p, g in zip(ps, grads):
        ad.check_grads(lambda p: np.sum(np.polyval(p, x) ** 2), (p,), modes=("rev",))
        np.testing.assert_allclose(g, ad.grad(lambda p: np.sum(np.polyval(p, x) ** 2))(p),
                                   rtol=1e-12)


# ---------------------------------------------------------------- values worked out by hand
def test_polyval_values():
    """2 x^2 - 3 x + 1 at x = 0.5: d/dx = 4 x - 3 = -1, d/dp = (x^2, x, 1)."""
    p, x = np.array([2.0, -3.0, 1.0]), 0.5
    p_bar, x_bar = ad.grad(lambda p, x: np.polyval(p, x), (0, 1))(p, x)
    np.testing.assert_allclose(p_bar, [0.25, 0.5, 1.0], rtol=1e-14)
    assert x_bar == pytest.approx(-1.0, rel=1e-14)
    xs = np.array([[0.5, 2.0]])
    np.testing.assert_allclose(ad.grad(lambda x: np.sum(np.polyval(p, x)))(xs), [[-1.0, 5.0]])
    by_list = ad.grad(lambda x: np.sum(np.polyval([2.0, -3.0, 1.0], x)))  # coefficients listed
    np.testing.assert_allclose(by_list(xs), [[-1.0, 5.0]])
    np.testing.assert_allclose(jit(by_list)(xs), [[-1.0, 5.0]])


def test_cov_values():
    """cov[0, 1] = c0 . c1 / (N - 1): its gradient is c1 / 2 on row 0 and c0 / 2 on row 1."""
    m = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 9.0]])  # centered: (-1, 0, 1), (-3, -1, 4)
    want = [[-1.5, -0.5, 2.0], [-0.5, 0.0, 0.5]]
    np.testing.assert_allclose(ad.grad(lambda m: np.cov(m)[0, 1])(m), want, atol=1e-14)
    np.testing.assert_allclose(ad.grad(lambda m: np.cov(m, rowvar=False)[1, 0])(m.T),
                               np.transpose(want), atol=1e-14)
    # bias=True divides by N: the variance of (1, 2, 3) is 2/3, its gradient 2 c / 3
    np.testing.assert_allclose(ad.grad(lambda v: np.cov(v, bias=True))(m[0]),
                               [-2.0 / 3.0, 0.0, 2.0 / 3.0], atol=1e-14)


def test_corrcoef_values():
    """Orthogonal centered rows c0 = (-1, 0, 1), c1 = (1, -2, 1): R[0, 1] = 0 and its gradient
    is c1 / (|c0| |c1|) on row 0, c0 / (|c0| |c1|) on row 1."""
    m = np.array([[-1.0, 0.0, 1.0], [1.0, -2.0, 1.0]]) + 5.0
    scale = 1.0 / np.sqrt(12.0)
    want = [[scale, -2.0 * scale, scale], [-scale, 0.0, scale]]
    np.testing.assert_allclose(ad.grad(lambda m: np.corrcoef(m)[0, 1])(m), want, atol=1e-14)
    np.testing.assert_allclose(ad.grad(lambda m: np.corrcoef(m, rowvar=False)[0, 1])(m.T),
                               np.transpose(want), atol=1e-14)


def test_interp_values():
    """Knots (0, 1, 3) with values (0, 2, 3): slopes 2 and 0.5 inside, 0 outside; each point
    weighs its segment's two ends (fp[0] below the knots, fp[-1] above)."""
    xp, fp = np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0, 3.0])
    x = np.array([0.5, 2.0, 4.0, -1.0])
    x_bar, fp_bar = ad.grad(lambda x, fp: np.sum(np.interp(x, xp, fp)), (0, 1))(x, fp)
    np.testing.assert_allclose(x_bar, [2.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(fp_bar, [1.5, 1.0, 1.5])
    # at a knot, the segment to the right (JAX's convention); at the last knot, the last one
    knots = ad.grad(lambda x: np.sum(np.interp(x, xp, fp)))(np.array([1.0, 3.0, 0.0]))
    np.testing.assert_allclose(knots, [0.5, 0.5, 2.0])
    listed = ad.grad(lambda x: np.sum(np.interp(x, [0.0, 1.0, 3.0], fp)))  # knots listed
    np.testing.assert_allclose(listed(x), [2.0, 0.5, 0.0, 0.0])
    _, tangent = ad.jvp(lambda fp: np.interp(0.25, xp, fp), (fp,), (np.array([1.0, 0.0, 0.0]),))
    assert tangent == pytest.approx(0.75)


def test_eigvalsh_values():
    """Eigenvalues of q diag(1, 2, 4) q^T: d w_k / d a = v_k v_k^T, so the gradient of
    sum(c * w) is q diag(c) q^T."""
    angle = 0.3
    q = np.array([[np.cos(angle), -np.sin(angle), 0.0], [np.sin(angle), np.cos(angle), 0.0],
                  [0.0, 0.0, 1.0]])
    a = q @ np.diag([1.0, 2.0, 4.0]) @ q.T
    c = np.array([1.0, 10.0, 100.0])
    np.testing.assert_allclose(ad.grad(lambda a: np.sum(np.linalg.eigvalsh(a) * c))(a),
                               q @ np.diag(c) @ q.T, atol=1e-12)
    np.testing.assert_allclose(ad.grad(lambda a: np.sum(np.linalg.eigh(a)[0] * c))(a),
                               q @ np.diag(c) @ q.T, atol=1e-12)


def test_eigh_vector_tangent_value():
    """a = diag(1, 3) moved along [[0, 1], [1, 0]]: dv_0 = v_1 (v_1 . da v_0) / (1 - 3) and
    dv_1 = v_0 (v_0 . da v_1) / (3 - 1), i.e. (0, -1/2) and (1/2, 0) times each column's
    sign (NumPy may return -e_k)."""
    a, da = np.diag([1.0, 3.0]), np.array([[0.0, 1.0], [1.0, 0.0]])
    (w, v), (w_dot, v_dot) = ad.jvp(lambda a: np.linalg.eigh(a), (a,), (da,))
    signs = np.sign(np.diag(v))
    np.testing.assert_allclose(w_dot, [0.0, 0.0], atol=1e-14)
    np.testing.assert_allclose(v_dot, np.array([[0.0, 0.5], [-0.5, 0.0]]) * signs[::-1],
                               atol=1e-14)


# ---------------------------------------------------------------- refused forms
def _interp_with_left(x, fp):
    return np.sum(np.interp(x, KNOTS, fp, left=0.0))


def _cov_of_two(m):
    return np.sum(np.cov(m, m * 2.0))


def _corrcoef_of_a_vector(m):
    return np.corrcoef(m)


@pytest.mark.parametrize("fn,args", [
    (_interp_with_left, (np.zeros(3), np.ones(4))),
    (_cov_of_two, (np.ones((2, 3)),)),
    (_corrcoef_of_a_vector, (np.arange(3.0),)),
], ids=["interp-left", "cov-y", "corrcoef-vector"])
def test_forms_without_a_template_are_refused_at_the_users_line(fn, args):
    with pytest.raises(ad.MissingRuleError, match="these argument ranks or options"):
        ad.grad(fn, tuple(range(len(args))))(*args)


def test_rowvar_known_only_at_run_time_is_refused():
    def f(m, flag):
        return np.sum(np.cov(m, rowvar=flag))
    with pytest.raises(ad.MissingRuleError, match="rowvar is only known at run time"):
        ad.grad(f)(np.ones((2, 3)) + np.eye(2, 3), np.array(True))
