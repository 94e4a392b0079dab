"""Numerics that follow JAX's conventions at kinks, ties, poles and for dtypes.

Each expected value is JAX's documented answer (e.g. ``jax.grad(jnp.abs)(0.) == 0``,
``jax.grad(jnp.maximum, (0, 1))(1., 1.) == (0.5, 0.5)``, ``jax.grad(jnp.sqrt)(0.) == inf``),
checked in reverse mode (grad) and forward mode (jvp).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import autodiff_ast as ad


def _quiet(thunk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1/0 in NumPy: inf, like JAX
        return thunk()


def _both(fn, x):
    """(reverse-mode gradient, forward-mode tangent along 1) of a scalar function at x."""
    g = _quiet(lambda: ad.grad(fn)(x))
    _, t = _quiet(lambda: ad.jvp(fn, (x,), (1.0,)))
    return g, t


# ---------------------------------------------------------------- kinks and ties
def test_abs_at_zero_is_zero():
    assert _both(lambda x: np.abs(x), 0.0) == (0.0, 0.0)
    assert _both(lambda x: abs(x), 0.0) == (0.0, 0.0)
    g = ad.grad(lambda x: np.sum(np.abs(x)))(np.array([0.0, -2.0, 3.0]))
    assert np.array_equal(g, [0.0, -1.0, 1.0])


@pytest.mark.parametrize("fn", [np.maximum, np.minimum, np.fmax, np.fmin, max, min])
def test_pairwise_ties_split_equally(fn):
    ga, gb = ad.grad(lambda a, b: fn(a, b), argnums=(0, 1))(1.0, 1.0)
    assert (ga, gb) == (0.5, 0.5)
    _, t = ad.jvp(lambda a, b: fn(a, b), (1.0, 1.0), (1.0, 0.0))
    assert t == 0.5


def test_relu_at_zero_is_half():
    """jax.nn.relu is special-cased to 0 at 0; jnp.maximum(x, 0.) gives 0.5, as we do."""
    assert _both(lambda x: np.maximum(x, 0.0), 0.0) == (0.5, 0.5)


@pytest.mark.parametrize("reduction, x, expected", [
    (np.max, [1.0, 3.0, 3.0], [0.0, 0.5, 0.5]),
    (np.min, [1.0, 1.0, 3.0], [0.5, 0.5, 0.0]),
    (np.max, [2.0, 2.0, 2.0, 2.0], [0.25] * 4),
])
def test_max_min_share_ties_equally(reduction, x, expected):
    x = np.array(x)
    assert np.allclose(ad.grad(lambda v: reduction(v))(x), expected)
    _, t = ad.jvp(lambda v: reduction(v), (x,), (np.ones_like(x),))
    assert np.isclose(t, 1.0)  # the mean of the tied tangents


def test_max_with_axis_ties():
    x = np.array([[1.0, 2.0], [1.0, 0.0]])
    g = ad.grad(lambda v: np.sum(np.max(v, axis=0)))(x)
    assert np.allclose(g, [[0.5, 1.0], [0.5, 0.0]])


def test_where_at_the_boundary_takes_the_chosen_branch():
    assert _both(lambda x: np.where(x > 0.0, x, 0.0), 0.0) == (0.0, 0.0)
    g = ad.grad(lambda x: np.sum(np.where(x > 0.0, x * x, -x)))(np.array([0.0, 1.0]))
    assert np.array_equal(g, [-1.0, 2.0])


@pytest.mark.xfail(strict=True, raises=ad.MissingRuleError,
                   reason="np.sort has no derivative rule yet (JAX: the permutation's gather)")
def test_sort():
    w = np.array([1.0, 2.0, 3.0])
    g = ad.grad(lambda x: np.sum(np.sort(x) * w))(np.array([3.0, 1.0, 2.0]))
    assert np.array_equal(g, [3.0, 1.0, 2.0])


# ---------------------------------------------------------------- poles
def test_sqrt_at_zero_is_inf():
    g, t = _both(lambda x: np.sqrt(x), 0.0)
    assert g == np.inf and t == np.inf
    assert np.array_equal(_quiet(lambda: ad.grad(lambda x: np.sum(np.sqrt(x)))(
        np.array([0.0, 1.0]))), [np.inf, 0.5])


def test_log_at_zero_is_inf_and_value_minus_inf():
    g, t = _both(lambda x: np.log(x), 0.0)
    assert g == np.inf and t == np.inf
    value, _ = _quiet(lambda: ad.jvp(lambda x: np.log(x), (0.0,), (1.0,)))
    assert value == -np.inf
    assert np.array_equal(_quiet(lambda: ad.grad(lambda x: np.sum(np.log(x)))(
        np.array([0.0, 1.0]))), [np.inf, 1.0])


@pytest.mark.xfail(strict=True, raises=ZeroDivisionError, reason=(
    "math.sqrt/math.log return Python floats: their partials (0.5 / y, 1.0 / x) divide Python "
    "floats by zero and raise instead of giving inf"))
def test_math_sqrt_at_zero_is_inf():
    assert ad.grad(lambda x: math.sqrt(x))(0.0) == np.inf


# ---------------------------------------------------------------- powers
@pytest.mark.parametrize("fn", [lambda x: x ** 0, lambda x: x ** 0.0, lambda x: np.power(x, 0),
                                lambda x: np.sum(x ** 0)])
def test_power_zero_has_zero_gradient_at_zero(fn):
    assert ad.grad(fn)(0.0) == 0.0
    _, t = ad.jvp(fn, (0.0,), (1.0,))
    assert t == 0.0


def test_power_with_variable_exponent_at_zero():
    """d/dx x**p and d/dp x**p at x = p = 0 are 0 (JAX's where-guarded rule)."""
    assert _quiet(lambda: ad.grad(lambda x, p: x ** p, argnums=(0, 1))(0.0, 0.0)) == (0.0, 0.0)


@pytest.mark.parametrize("p, expected", [(2, 0.0), (1.5, 0.0), (1, 1.0), (3, 0.0)])
def test_integer_and_fractional_powers_at_zero(p, expected):
    assert ad.grad(lambda x: x ** p)(0.0) == expected


# ---------------------------------------------------------------- dtypes
F32 = np.array([0.5, 1.5], dtype=np.float32)


def test_float32_in_float32_out_everywhere():
    assert ad.grad(lambda x: np.sum(np.sin(x)))(F32).dtype == np.float32
    assert isinstance(ad.grad(lambda x: np.sin(x))(np.float32(0.5)), np.float32)
    value, grad = ad.value_and_grad(lambda x: np.sum(x * x))(F32)
    assert np.asarray(value).dtype == np.float32 and grad.dtype == np.float32
    out, pullback = ad.vjp(np.sin, F32)
    assert out.dtype == np.float32
    assert pullback(np.ones(2, np.float32))[0].dtype == np.float32
    out, tangent = ad.jvp(np.sin, (F32,), (np.ones(2, np.float32),))
    assert out.dtype == np.float32 and tangent.dtype == np.float32
    assert ad.jacfwd(np.sin)(F32).dtype == np.float32
    assert ad.jacrev(np.sin)(F32).dtype == np.float32
    assert ad.hessian(lambda x: np.sum(x ** 3))(F32).dtype == np.float32
    assert ad.vmap(ad.grad(lambda x: np.sum(np.tanh(x))))(
        np.ones((3, 2), np.float32)).dtype == np.float32


def test_float32_gradient_values_match_float64():
    g32 = ad.grad(lambda x: np.sum(np.tanh(x) * x))(F32)
    g64 = ad.grad(lambda x: np.sum(np.tanh(x) * x))(F32.astype(np.float64))
    assert np.allclose(g32, g64, rtol=1e-6)


@pytest.mark.parametrize("value, what", [
    (3, "int64"), (np.array([1, 2]), "int64"), (True, "bool"), (np.array([True]), "bool"),
    (np.int32(2), "int32"), (1.0 + 1.0j, "complex"), (np.array([1.0j]), "complex"),
])
def test_integer_boolean_complex_inputs_refused(value, what):
    with pytest.raises(ad.NonFloatInputError, match=f"is {what}"):
        ad.grad(lambda x: np.sum(x * x))(value)


def test_integer_argument_outside_argnums_is_fine():
    """Like JAX: only the differentiated arguments must be floats."""
    g = ad.grad(lambda x, n: x * n)(2.0, 3)
    assert g == 3.0
