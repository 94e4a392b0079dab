"""A maximum's adjoint added in place under jit (codegen/tie_shares.py).

Compiled gradients are compared with the plain-NumPy gradient (the same rule, so ties and NaN
give the same numbers) and, away from ties, with central differences
(test_vector_loops._grads_agree); the generated source is checked to show the rewrite.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.tie_shares import share_ties_in_place

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]

_LOOP = '''
def f(x, n):
    x_bar = np.zeros_like(x)
    {extra}
    for i in range(n):
        m = np.max(x)
        x_bar = x_bar + {cotangent} * (x == m) / np.sum({counted} == m)
    return x_bar
'''


@pytest.mark.parametrize("extra, cotangent, counted", [
    ("keep = x_bar", "2.0", "x"),  # another name holds x_bar's array
    ("pass", "np.sum(x_bar)", "x"),  # the cotangent reads x_bar
    ("pass", "2.0", "y"),  # the count is of another mask
])
def test_left_alone(extra, cotangent, counted):
    text = _LOOP.format(extra=extra, cotangent=cotangent, counted=counted)
    fn = gast.parse(text).body[0]
    assert not share_ties_in_place(fn)
    assert "add_tie_share" not in unparse(fn)


def peaks(x, w):
    """A maximum of a vector made in each step (longer than scalarize keeps as scalars)."""
    total = 0.0
    for i in range(x.shape[0]):
        v = np.tanh(x[i] * w)
        top = np.max(v)
        total = total + top + np.log(np.sum(np.exp(v - top)))
    return total


def test_a_maximum_in_a_loop_is_added_in_place_and_right():
    rng = np.random.default_rng(11)
    args = (rng.standard_normal((5, 12)), rng.standard_normal(12))
    compiled = _grads_agree(peaks, args, (0, 1))
    assert "add_tie_share(" in compiled.source, compiled.source


@pytest.mark.parametrize("case", ["ties", "nan"])
def test_ties_and_nan_give_numpy_s_numbers(case):
    x = np.tile(np.linspace(-1.0, 1.0, 12), (4, 1))
    x[:, 3] = x[:, 11]  # every row's maximum twice
    if case == "nan":
        x[2, 5] = np.nan
    w = np.ones(12)
    compiled = ad.jit(ad.grad(peaks, argnums=(0, 1)))
    with np.errstate(invalid="ignore"):
        got = compiled(x, w)
        want = ad.grad(peaks, argnums=(0, 1))(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15, equal_nan=True)
    assert "add_tie_share(" in compiled.source


@pytest.mark.numba
def test_the_helper_broadcasts_a_length_one_x_and_refuses_other_lengths():
    """add_tie_share's Numba form: shares among ties, an x of one element broadcast over a as
    NumPy's `a += g * (x == m) / np.sum(x == m)` does, other lengths NumPy's ValueError."""
    import numba

    from codegen.tie_shares import TIE_HELPERS
    ns = {"np": np, "numba": numba}
    exec(TIE_HELPERS["add_tie_share"], ns)
    plain = ns["add_tie_share"]
    compiled = numba.njit(lambda a, x, m, g: plain(a, x, m, g))
    for run in (plain, compiled):
        a = np.zeros(3)
        run(a, np.array([2.0, 5.0, 5.0]), 5.0, 1.0)
        np.testing.assert_array_equal(a, [0.0, 0.5, 0.5])
        a = np.zeros(3)
        run(a, np.array([5.0]), 5.0, 2.0)
        np.testing.assert_array_equal(a, [2.0, 2.0, 2.0])
        with pytest.raises(ValueError, match="could not be broadcast"):
            run(np.zeros(3), np.array([5.0, 1.0]), 5.0, 2.0)
