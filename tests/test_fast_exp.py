"""np.exp and math.exp under jit take ``exp_fast`` (codegen/fast_exp.py, codegen/helpers.py):
arithmetic without a libm call, so the loops it sits in vectorize. What is checked here: its
values against NumPy's exp (within 1 ulp, special values exact), what it does with other
types, that a compiled loop of it holds SIMD vectors, which calls the dialect rewrites, and
gradients through it against the generated NumPy code and finite differences."""

from __future__ import annotations

import doctest
import math

import gast
import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit
from autodiff_ast.templates import unparse
from codegen import fast_exp
from codegen.helpers import DIALECT_HELPERS

SPECIAL = np.array([0.0, -0.0, 5e-324, -5e-324, 1e-300, -1e-300, 1.0, -1.0, 709.78,
                    709.79, 710.0, 1e300, -708.39, -708.4, -720.0, -745.13, -745.14, -746.0,
                    -1e300, np.inf, -np.inf, np.nan])


@pytest.fixture(scope="module")
def exp_fast():
    """exp_fast as a lowered module holds it (the overload registered) and a compiled loop
    calling it on each float64 number of a vector."""
    import numba
    ns = {"np": np, "numba": numba}
    exec(DIALECT_HELPERS["exp_fast"], ns)
    exp = ns["exp_fast"]

    def each(xs):
        out = np.empty_like(xs)
        for i in range(xs.shape[0]):
            out[i] = exp(xs[i])
        return out
    return exp, numba.njit(lambda x: exp(x)), numba.njit(each)


def _ulps(got, expected):
    """The largest distance in units of the last place (subnormals: in units of 5e-324)."""
    spacing = np.spacing(np.abs(expected))
    return np.max(np.abs(got - expected) / np.maximum(spacing, 5e-324))


@pytest.mark.numba
@pytest.mark.parametrize("form", ["array", "numbers"])
def test_exp_fast_is_np_exp_within_one_ulp(exp_fast, form):
    """Every magnitude from the subnormal results to the overflow threshold, both forms: the
    array loop and a loop calling it on numbers."""
    _, whole, each = exp_fast
    compiled = whole if form == "array" else each
    rng = np.random.default_rng(11)
    for low, high in ((-1e-12, 1e-12), (-0.35, 0.35), (-1.0, 1.0), (-30.0, 30.0),
                      (-708.0, 709.7), (-745.0, -708.0)):
        x = rng.uniform(low, high, 20000)
        assert _ulps(compiled(x), np.exp(x)) <= 1.0, (low, high)
    with np.errstate(over="ignore"):
        got, expected = compiled(SPECIAL), np.exp(SPECIAL)
    exact = ~np.isfinite(expected) | (expected == 0.0) | (expected == 1.0)
    np.testing.assert_array_equal(got[exact], expected[exact])
    assert _ulps(got[~exact], expected[~exact]) <= 1.0


@pytest.mark.numba
def test_exp_fast_of_other_types_is_np_exp(exp_fast):
    """float32 stays float32 (np.exp itself), integers and 0-d arrays go to np.exp, strided
    and transposed views and empty arrays keep their shapes."""
    plain, compiled, _ = exp_fast
    rng = np.random.default_rng(12)
    x32 = rng.standard_normal(50).astype(np.float32)
    assert compiled(x32).dtype == np.float32
    np.testing.assert_allclose(compiled(x32), np.exp(x32), rtol=2e-7)
    grid = rng.standard_normal((30, 8))
    for view in (grid[::3, 1::2], grid.T, grid[:, 2]):
        got = compiled(view)
        assert got.shape == view.shape
        assert _ulps(got, np.exp(view)) <= 1.0
    np.testing.assert_allclose(compiled(np.arange(4)), np.exp(np.arange(4)), rtol=1e-15)
    assert compiled(np.zeros((0, 3))).shape == (0, 3)
    np.testing.assert_allclose(compiled(np.array(0.25)), np.exp(0.25), rtol=1e-15)
    np.testing.assert_array_equal(plain(grid), np.exp(grid))


@pytest.mark.numba
def test_a_loop_of_exp_fast_holds_simd_vectors(exp_fast):
    """The reason for exp_fast: Numba's np.exp is a call per element and keeps the loop
    scalar; the arithmetic form lets LLVM vectorize it (vector types in the loop's IR)."""
    _, _, each = exp_fast
    each(np.zeros(4))
    ir = "\n".join(each.inspect_llvm().values())
    assert " x double>" in ir
    assert "@exp(" not in ir and "@llvm.exp" not in ir


def test_the_dialect_rewrites_exp_calls():
    fn = gast.parse("def f(x, t):\n    a = np.exp(x, out=x)\n"
                    "    return np.exp(x * t) + math.exp(t) + np.exp(*x)\n").body[0]
    assert fast_exp.use_fast_exp(fn)
    text = unparse(fn)
    assert "np.exp(x, out=x)" in text and "np.exp(*x)" in text
    assert "exp_fast(x * t) + exp_fast(float(t))" in text
    assert not fast_exp.use_fast_exp(gast.parse("def g(x):\n    return np.log(x)\n"))
    unchanged = "def g(x):\n    return x\n"
    assert fast_exp.fast_exp_in_source(unchanged) == (unchanged, False)
    assert doctest.testmod(fast_exp).failed == 0


def log_sum_exp_rows(x, w):
    """A log-sum-exp per row in loops, a sigmoid with math.exp: exp on numbers in loops."""
    total = 0.0
    for i in range(x.shape[0]):
        top = np.max(x[i])
        s = 0.0
        for j in range(x.shape[1]):
            s = s + np.exp(x[i, j] * w[j] - top)
        total = total + np.log(s) + top + 1.0 / (1.0 + math.exp(-x[i, 0] * w[0]))
    return total


def softmax_weighted(x, w):
    """np.exp of whole arrays of two axes."""
    e = np.exp(x * w - np.max(x))
    return np.sum(e / np.sum(e, axis=1, keepdims=True) * x)


@pytest.mark.numba
@pytest.mark.parametrize("fn", [log_sum_exp_rows, softmax_weighted])
def test_jit_gradients_through_exp_fast(fn):
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal(5)
    compiled = jit(ad.grad(fn, argnums=(0, 1)))
    got = compiled(x, w)
    expected = ad.grad(fn, argnums=(0, 1))(x, w)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-15)
    assert "exp_fast(" in compiled.source
    step = 1e-6
    direction = rng.standard_normal(w.shape)
    numeric = (fn(x, w + step * direction) - fn(x, w - step * direction)) / (2 * step)
    assert float(got[1] @ direction) == pytest.approx(numeric, rel=1e-6)
    assert jit(fn)(x, w) == pytest.approx(fn(x, w), rel=1e-14)
