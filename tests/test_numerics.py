"""Numerics that follow JAX's conventions at kinks, ties, poles and for dtypes.

Each expected value is JAX's answer, read from JAX's own rules (jax/_src/lax/lax.py and
jax/_src/numpy/lax_numpy.py), checked in reverse mode (grad), forward mode (jvp) and, for a
shared set of functions, compiled by Numba (jit):

- ``abs``: ``_abs_jvp_rule`` is ``select(x >= 0, g, -g)``, so the derivative at 0 is 1.
- ``maximum``/``minimum`` (and ``max``/``min`` of two numbers): ``_balanced_eq`` gives each of
  two tied operands half.
- ``max``/``min`` reductions: ``_reduce_chooser_jvp_rule`` shares the cotangent equally among
  the tied entries (the tangent is the mean of the tied tangents).
- ``clip``: ``jnp.clip`` is ``minimum(hi, maximum(lo, x))``, so at a bound x and the bound
  share (x = lo gives 0.5 to each).
- ``where``: a select; only the chosen branch receives the cotangent.
- ``sort``: ``_sort_jvp`` gathers the tangent by the permutation of a stable sort (ties keep
  their original order).
- poles: ``sqrt``/``log``/``cbrt`` at 0 give inf (``0.5 / sqrt(x)``, ``1 / x``), ``atan2`` at
  (0, 0) gives nan; never a ZeroDivisionError, also for ``math`` functions of Python floats.
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


def _forward_gradient(fn, x):
    """The gradient of a scalar function of a vector, one forward-mode pass per entry."""
    return np.array([_quiet(lambda e=e: ad.jvp(fn, (x,), (e,))[1]) for e in np.eye(x.size)])


# ---------------------------------------------------------------- kinks and ties
@pytest.mark.parametrize("fn", [np.abs, np.absolute, np.fabs, abs, math.fabs])
def test_abs_at_zero_is_one(fn):
    """JAX's _abs_jvp_rule: select(ge(x, 0), g, neg(g)); 1 at 0 and at -0.0."""
    assert _both(lambda x: fn(x), 0.0) == (1.0, 1.0)
    assert _both(lambda x: fn(x), -0.0) == (1.0, 1.0)
    assert _both(lambda x: fn(x), -2.0) == (-1.0, -1.0)


def test_abs_of_an_array_at_zero():
    x = np.array([0.0, -2.0, 3.0, -0.0])
    f = lambda v: np.sum(np.abs(v))  # noqa: E731
    assert np.array_equal(ad.grad(f)(x), [1.0, -1.0, 1.0, 1.0])
    assert np.array_equal(_forward_gradient(f, x), [1.0, -1.0, 1.0, 1.0])


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
    (np.amin, [0.0, -1.0, 5.0, -1.0, -1.0], [0.0, 1 / 3, 0.0, 1 / 3, 1 / 3]),
])
def test_max_min_share_ties_equally(reduction, x, expected):
    x = np.array(x)
    assert np.allclose(ad.grad(lambda v: reduction(v))(x), expected)
    assert np.allclose(_forward_gradient(lambda v: reduction(v), x), expected)
    _, t = ad.jvp(lambda v: reduction(v), (x,), (np.ones_like(x),))
    assert np.isclose(t, 1.0)  # the mean of the tied tangents


def test_max_with_axis_ties():
    x = np.array([[1.0, 2.0], [1.0, 0.0]])
    g = ad.grad(lambda v: np.sum(np.max(v, axis=0)))(x)
    assert np.allclose(g, [[0.5, 1.0], [0.5, 0.0]])
    _, t = ad.jvp(lambda v: np.max(v, axis=1), (x,), (np.array([[1.0, 3.0], [5.0, 7.0]]),))
    assert np.allclose(t, [3.0, 5.0])


def test_where_at_the_boundary_takes_the_chosen_branch():
    assert _both(lambda x: np.where(x > 0.0, x, 0.0), 0.0) == (0.0, 0.0)
    assert _both(lambda x: np.where(x >= 0.0, x, 0.0), 0.0) == (1.0, 1.0)
    g = ad.grad(lambda x: np.sum(np.where(x > 0.0, x * x, -x)))(np.array([0.0, 1.0]))
    assert np.array_equal(g, [-1.0, 2.0])


# x, lo, hi -> d/dx, d/dlo, d/dhi of jnp.clip(x, lo, hi) = minimum(hi, maximum(lo, x))
CLIP = [
    ((0.5, 0.0, 1.0), (1.0, 0.0, 0.0)),    # inside
    ((-1.0, 0.0, 1.0), (0.0, 1.0, 0.0)),   # below: the lower bound is the value
    ((2.0, 0.0, 1.0), (0.0, 0.0, 1.0)),    # above
    ((0.0, 0.0, 1.0), (0.5, 0.5, 0.0)),    # at lo: maximum's tie
    ((1.0, 0.0, 1.0), (0.5, 0.0, 0.5)),    # at hi: minimum's tie
    ((0.0, 0.0, 0.0), (0.25, 0.25, 0.5)),  # lo = hi = x: both ties
    ((0.5, 1.0, 0.0), (0.0, 0.0, 1.0)),    # lo > hi: NumPy and JAX both give hi
]


@pytest.mark.parametrize("args, expected", CLIP, ids=[str(c[0]) for c in CLIP])
def test_clip_at_the_bounds(args, expected):
    f = lambda x, lo, hi: np.clip(x, lo, hi)  # noqa: E731
    assert ad.grad(f, argnums=(0, 1, 2))(*args) == expected
    tangents = [ad.jvp(f, args, tuple(float(i == k) for i in range(3)))[1] for k in range(3)]
    assert tuple(tangents) == expected


def test_clip_with_one_bound_and_as_a_method():
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    assert np.array_equal(ad.grad(lambda v: np.sum(np.clip(v, 0.0, 1.0)))(x),
                          [0.0, 0.5, 1.0, 0.5, 0.0])
    assert np.array_equal(ad.grad(lambda v: np.sum(np.clip(v, None, 1.0)))(x),
                          [1.0, 1.0, 1.0, 0.5, 0.0])
    assert np.array_equal(ad.grad(lambda v: np.sum(v.clip(0.0, None)))(x),
                          [0.0, 0.5, 1.0, 1.0, 1.0])


# ---------------------------------------------------------------- sort
W3 = np.array([1.0, 2.0, 3.0])
W23 = np.arange(6.0).reshape(2, 3)
X23 = np.array([[3.0, 1.0, 1.0], [0.0, 2.0, -1.0]])


def weighted_sort(x):
    return np.sum(np.sort(x) * W3)


@pytest.mark.parametrize("x, expected", [
    ([3.0, 1.0, 2.0], [3.0, 1.0, 2.0]),
    ([1.0, 1.0, 0.0], [2.0, 3.0, 1.0]),   # the tie keeps its order: x[0] first, then x[1]
    ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]),
])
def test_sort_gradient_follows_the_stable_permutation(x, expected):
    x = np.array(x)
    assert np.array_equal(ad.grad(weighted_sort)(x), expected)
    assert np.array_equal(_forward_gradient(weighted_sort, x), expected)


@pytest.mark.parametrize("fn, expected", [
    (lambda x: np.sum(np.sort(x) * W23), [[2.0, 0.0, 1.0], [4.0, 5.0, 3.0]]),
    (lambda x: np.sum(np.sort(x, axis=-1) * W23), [[2.0, 0.0, 1.0], [4.0, 5.0, 3.0]]),
    (lambda x: np.sum(np.sort(x, axis=0) * W23), [[3.0, 1.0, 5.0], [0.0, 4.0, 2.0]]),
    (lambda x: np.sum(np.sort(x, axis=None) * np.arange(6.0)), [[5.0, 2.0, 3.0],
                                                                [1.0, 4.0, 0.0]]),
], ids=["last-axis", "axis=-1", "axis=0", "axis=None"])
def test_sort_along_an_axis(fn, expected):
    assert np.array_equal(ad.grad(fn)(X23), expected)
    tangent = np.arange(6.0).reshape(2, 3) + 1.0
    _, t = ad.jvp(fn, (X23,), (tangent,))
    assert t == pytest.approx(np.sum(np.array(expected) * tangent))
    ad.check_grads(fn, (X23 + np.array([[0.0, 0.01, 0.02], [0.0, 0.01, 0.02]]),),
                   modes=("fwd", "rev"))


def test_sort_second_order_and_its_source():
    x = np.array([0.3, -1.2, 0.8, 0.1])
    f = lambda v: np.sum(np.sort(v) ** 3 * np.arange(1.0, 5.0))  # noqa: E731
    ad.check_grads(f, (x,), order=2, modes=("fwd", "rev"))
    h = ad.hessian(f)(x)
    assert np.allclose(h, np.diag(6.0 * x * np.array([3.0, 1.0, 4.0, 2.0])))
    text = ad.source(ad.grad(weighted_sort), x[:3])
    assert "np.argsort(x, kind='stable')" in text


def test_sort_hessian_along_an_axis():
    f = lambda v: np.sum(np.sort(v) ** 3 * W23)  # noqa: E731
    x = X23 + np.array([[0.0, 0.01, 0.02], [0.0, 0.01, 0.02]])
    h = ad.hessian(f)(x)
    order = np.argsort(x, axis=-1, kind="stable")
    weight = np.zeros_like(x)
    np.put_along_axis(weight, order, W23, axis=-1)
    assert np.allclose(h.reshape(6, 6), np.diag((6.0 * x * weight).ravel()))


def test_sort_reverse_over_reverse_along_an_axis():
    """take_along_axis's reverse rule is the add_along_axis helper (a scatter-add along the
    axis), which has a rule of its own when a gradient is differentiated again."""
    f = lambda v: np.sum(np.sort(v) ** 3 * W23)  # noqa: E731
    outer = lambda v: np.sum(ad.grad(f)(v) * W23)  # noqa: E731
    x = np.array([[0.3, -0.1, 0.2], [1.0, 0.5, -0.7]])  # no ties: sort is smooth here
    eps, fd = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        fd[i] = (outer(x + step) - outer(x - step)) / (2 * eps)
    np.testing.assert_allclose(ad.grad(outer)(x), fd, atol=1e-5)


@pytest.mark.numba
def test_jit_gradient_of_take_along_axis():
    x = np.array([[0.3, -0.1, 0.2], [1.0, 0.5, -0.7]])
    f = lambda v: np.sum(np.take_along_axis(v, np.argsort(v, axis=1), axis=1) * W23)  # noqa: E731
    np.testing.assert_allclose(ad.jit(ad.grad(f))(x), [[2.0, 0.0, 1.0], [5.0, 4.0, 3.0]])


@pytest.mark.parametrize("axis,indices", [(1, [[0, 0, 2], [1, 2, 1]]), (0, [[0, 1, 0]])])
def test_take_along_axis_with_repeated_indices_to_order_two(axis, indices):
    idx = np.array(indices)
    ad.check_grads(lambda v: np.sum(np.take_along_axis(v, idx, axis=axis) ** 2), (X23,),
                   order=2)


def test_hessian_through_an_integer_gather():
    idx = np.array([2, 0, 3, 1])
    f = lambda v: np.sum(v[idx] ** 3 * np.arange(1.0, 5.0))  # noqa: E731
    x = np.array([0.3, -1.2, 0.8, 0.1])
    assert np.allclose(ad.hessian(f)(x), np.diag(6.0 * x * np.array([2.0, 4.0, 1.0, 3.0])))


def test_vmap_of_sort_and_its_gradient():
    xs = np.random.default_rng(0).normal(size=(4, 2, 3))
    for fn in (lambda x: np.sum(np.sort(x) * W23), lambda x: np.sum(np.sort(x, axis=0) * W23),
               lambda x: np.sum(np.sort(x, axis=None) * W23.ravel())):
        assert np.allclose(ad.vmap(ad.grad(fn))(xs), [ad.grad(fn)(x) for x in xs])
    assert np.array_equal(ad.vmap(np.sort)(xs), np.sort(xs))
    assert np.array_equal(ad.vmap(lambda x: np.sort(x, axis=0))(xs), np.sort(xs, axis=1))
    rows = np.array([[3.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    assert np.array_equal(ad.vmap(ad.grad(weighted_sort))(rows), [[3.0, 1.0, 2.0],
                                                                  [2.0, 3.0, 1.0]])


@pytest.mark.parametrize("x, expected", [
    ([2.0, 0.0, 3.0], [1.0, 8.0, 0.0]),  # d/dx1 = x0 + x0 * x2
    ([0.0, 0.0, 3.0], [1.0, 0.0, 0.0]),
    ([2.0, 3.0, 0.0], [4.0, 2.0, 6.0]),  # [1 + x1 + x1 * x2, x0 + x0 * x2, x0 * x1]
])
def test_cumprod_at_zeros_is_exact(x, expected):
    """np.cumprod's derivatives never divide by x (JAX differentiates its scan): the gradient
    of sum(cumprod(x)) at zeros, in reverse mode, forward mode and compiled."""
    from autodiff_ast.jit import jit

    def fn(x):
        return np.sum(np.cumprod(x))
    x = np.array(x)
    np.testing.assert_array_equal(ad.grad(fn)(x), expected)
    np.testing.assert_array_equal(_forward_gradient(fn, x), expected)
    np.testing.assert_array_equal(jit(ad.grad(fn))(x), expected)


def _prod_of_rows(a):
    return np.sum(np.prod(a, axis=1) ** 2) + np.sum(np.prod(a, axis=0, keepdims=True) * a)


@pytest.mark.parametrize("x, expected", [
    ([1.5, 0.0, -0.7, 2.0], [0.0, -2.1, 0.0, 0.0]),  # the product of the other entries
    ([0.0, 0.0, 3.0], [0.0, 0.0, 0.0]),
    ([2.0, 3.0, 4.0], [12.0, 8.0, 6.0]),
])
def test_prod_at_zeros_is_exact(x, expected):
    """np.prod's derivative is the product of the other entries (it was y / x: nan at a
    zero), in reverse mode, forward mode, compiled and batched."""
    from autodiff_ast.jit import jit
    x = np.array(x)
    np.testing.assert_allclose(ad.grad(np.prod)(x), expected, rtol=1e-15)
    np.testing.assert_allclose(_forward_gradient(np.prod, x), expected, rtol=1e-15)
    np.testing.assert_allclose(jit(ad.grad(np.prod))(x), expected, rtol=1e-15)
    np.testing.assert_allclose(ad.vmap(ad.grad(np.prod))(np.stack([x, x[::-1]])),
                               [expected, expected[::-1]], rtol=1e-15)


def test_prod_along_axes_at_zeros_and_its_hessian():
    """Along an axis (kept or not) with a zero in a row: finite differences (exact here,
    the function is polynomial); hessian of np.prod away from zeros still works."""
    from autodiff_ast.jit import jit
    a = np.array([[1.5, 0.0, -0.7], [0.3, 0.4, 0.5]])
    step = 1e-6
    expected = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = step
        expected[i] = (_prod_of_rows(a + e) - _prod_of_rows(a - e)) / (2 * step)
    np.testing.assert_allclose(ad.grad(_prod_of_rows)(a), expected, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(jit(ad.grad(_prod_of_rows))(a), expected, rtol=1e-8,
                               atol=1e-10)
    x = np.array([1.5, 0.3, -0.7, 2.0])
    p = np.prod(x)
    want = p / np.outer(x, x) * (1.0 - np.eye(4))
    np.testing.assert_allclose(ad.hessian(np.prod)(x), want, rtol=1e-13)


def _products_of_the_others(x, order):
    """d^order prod(x) / dx_i dx_j ...: the product of the entries other than those indices
    (all distinct), 0 where an index repeats."""
    from itertools import product
    out = np.zeros((len(x),) * order)
    for index in product(range(len(x)), repeat=order):
        if len(set(index)) == order:
            out[index] = np.prod([v for i, v in enumerate(x) if i not in index])
    return out


def _prod(x):
    return np.prod(x)


@pytest.mark.parametrize("x", [[1.5, 0.0, -0.7, 2.0], [0.0, 0.0, 3.0, 0.5], [0.3, 1.2, 0.7]])
def test_higher_derivatives_of_prod_at_zeros_are_exact(x):
    """Second and third derivatives of np.prod with zeros in x: no division by x (they were
    nan), in forward, reverse and mixed modes, batched and compiled."""
    from autodiff_ast.jit import jit
    x = np.array(x)
    second, third = _products_of_the_others(x, 2), _products_of_the_others(x, 3)
    for hess in (ad.hessian(_prod), ad.jacrev(ad.jacrev(_prod)), ad.jacfwd(ad.jacfwd(_prod))):
        np.testing.assert_allclose(hess(x), second, rtol=1e-14, atol=0)
    for third_order in (ad.jacfwd(ad.hessian(_prod)), ad.jacrev(ad.jacrev(ad.jacrev(_prod))),
                        ad.jacrev(ad.jacfwd(ad.jacrev(_prod)))):
        np.testing.assert_allclose(third_order(x), third, rtol=1e-14, atol=0)
    np.testing.assert_allclose(ad.vmap(ad.hessian(_prod))(np.stack([x, x[::-1]])),
                               [second, _products_of_the_others(x[::-1], 2)], rtol=1e-14)
    if len(x) == 4:
        np.testing.assert_allclose(jit(ad.hessian(_prod))(x), second, rtol=1e-14)


@pytest.mark.parametrize("x, expected", [
    ([2.0, 1.0, 2.0], [1.0, 0.0, 0.0]),  # the first 2 is the middle of a stable sort
    ([1.0, 2.0, 2.0, 3.0], [0.0, 0.5, 0.5, 0.0]),
    ([2.0, 2.0, 2.0, 2.0], [0.0, 0.5, 0.5, 0.0]),
    ([3.0, 0.0, 1.0, 5.0], [0.5, 0.0, 0.5, 0.0]),
])
def test_median_follows_the_stable_sort(x, expected):
    """jnp.median is quantile(method="midpoint") over a stable sort: the middle entry (or half
    to each of the two middle ones) gets the cotangent; ties go by the sorted position, in
    reverse mode, forward mode and compiled."""
    from autodiff_ast.jit import jit

    def fn(x):
        return np.median(x)
    x = np.array(x)
    np.testing.assert_array_equal(ad.grad(fn)(x), expected)
    np.testing.assert_array_equal(_forward_gradient(fn, x), expected)
    np.testing.assert_array_equal(jit(ad.grad(fn))(x), expected)


def test_median_ties_along_an_axis():
    x = np.array([[1.0, 1.0, 1.0], [4.0, 2.0, 4.0]])
    g = ad.grad(lambda x: np.sum(np.median(x, axis=1) * np.array([1.0, 2.0])))(x)
    np.testing.assert_array_equal(g, [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]])


@pytest.mark.parametrize("x, expected", [
    ([1.0, 3.0, 3.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.5, -1.0 / 3.0, -1.0 / 3.0, -1.0 / 3.0]),
    ([2.0, 2.0], [0.0, 0.0]),  # the maximum and the minimum are the same entries
])
def test_ptp_shares_ties_as_max_and_min(x, expected):
    """jnp.ptp is max - min: each end's tied entries share it equally, in reverse mode,
    forward mode and compiled."""
    from autodiff_ast.jit import jit

    def fn(x):
        return np.ptp(x)
    x = np.array(x)
    np.testing.assert_allclose(ad.grad(fn)(x), expected, rtol=1e-15)
    np.testing.assert_allclose(_forward_gradient(fn, x), expected, rtol=1e-15)
    np.testing.assert_allclose(jit(ad.grad(fn))(x), expected, rtol=1e-15)


@pytest.mark.parametrize("order, x, expected", [
    (None, [0.0, 0.0], [np.nan, np.nan]),  # x / norm(x) is 0/0 (jax-ml/jax#21723)
    (1, [0.0, -2.0, 3.0], [1.0, -1.0, 1.0]),  # the abs rule: 1 at 0
    (np.inf, [3.0, -3.0, 1.0], [0.5, -0.5, 0.0]),  # ties share, as np.max
    (-np.inf, [0.0, 0.0, 2.0], [0.5, 0.5, 0.0]),
])
def test_norm_at_kinks(order, x, expected):
    """jnp.linalg.norm is sqrt(sum(x * x)), sum(abs(x)), max(abs(x)), min(abs(x)): JAX's
    values at 0 and at ties, in reverse mode, forward mode and compiled."""
    from autodiff_ast.jit import jit

    def fn(x):
        return np.linalg.norm(x, order)
    x = np.array(x)
    np.testing.assert_array_equal(_quiet(lambda: ad.grad(fn)(x)), expected)
    np.testing.assert_array_equal(_forward_gradient(fn, x), expected)
    np.testing.assert_array_equal(_quiet(lambda: jit(ad.grad(fn))(x)), expected)


def _with_nans():
    return np.array([[1.0, np.nan, 2.0], [np.nan, np.nan, 3.0]])


@pytest.mark.parametrize("fn, expected", [
    (lambda x: np.nansum(x * 2.0), [[2.0, 0.0, 2.0], [0.0, 0.0, 2.0]]),
    (lambda x: np.nanmean(x), [[1 / 3, 0.0, 1 / 3], [0.0, 0.0, 1 / 3]]),
    (lambda x: np.sum(np.nanmean(x, axis=1)), [[0.5, 0.0, 0.5], [0.0, 0.0, 1.0]]),
    (lambda x: np.sum(np.nansum(x, axis=0, keepdims=True)), [[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]),
], ids=["nansum", "nanmean", "nanmean-axis", "nansum-axis-keepdims"])
def test_nan_entries_get_no_derivative(fn, expected):
    """np.nansum and np.nanmean: NaN entries count for nothing, so their cotangent and their
    tangent's contribution are 0 (jnp.nansum sums where(isnan(x), 0, x)), in reverse mode,
    forward mode and compiled."""
    from autodiff_ast.jit import jit
    x = _with_nans()
    np.testing.assert_allclose(ad.grad(fn)(x), expected, rtol=1e-15)
    tangents = [ad.jvp(fn, (x,), (e.reshape(x.shape),))[1] for e in np.eye(x.size)]
    np.testing.assert_allclose(np.reshape(tangents, x.shape), expected, rtol=1e-15)
    np.testing.assert_allclose(jit(ad.grad(fn))(x), expected, rtol=1e-15)


def test_argsort_and_argpartition_carry_no_derivative():
    """x[np.argsort(x)] is a gather: the gradient is the sort's (no ties here)."""
    x = np.array([0.4, -1.0, 2.5])
    g = ad.grad(lambda v: np.sum(v[np.argsort(v)] * W3))(x)
    assert np.array_equal(g, ad.grad(weighted_sort)(x))
    assert np.array_equal(ad.grad(lambda v: np.sum(v * np.argsort(v)))(x), [1.0, 0.0, 2.0])
    # the two smallest, in partition order (position 1 holds the second smallest)
    smallest = lambda v: np.sum(v[np.argpartition(v, 1)[:2]] * W3[:2])  # noqa: E731
    x4 = np.array([0.4, -1.0, 2.5, 0.1])
    assert np.array_equal(ad.grad(smallest)(x4), [0.0, 1.0, 0.0, 2.0])
    assert np.array_equal(ad.vmap(ad.grad(smallest))(np.stack([x4, -x4])),
                          [[0.0, 1.0, 0.0, 2.0], [2.0, 0.0, 1.0, 0.0]])


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


def _sqrt_of_sin(x):
    z = math.sin(x)  # a Python float
    return z ** 0.5


@pytest.mark.parametrize("fn, expected", [
    (lambda x: math.sqrt(x), np.inf),
    (lambda x: math.cbrt(x), np.inf),
    (lambda x: np.sqrt(math.sin(x)), np.inf),
    (_sqrt_of_sin, np.inf),
    (lambda x: math.sqrt(math.sin(x)) * 2.0, np.inf),
    (lambda x: math.acos(x + 1.0), -np.inf),
])
def test_math_functions_at_a_pole_give_inf_not_zero_division(fn, expected):
    """math.sqrt(0.0) is the Python float 0.0: its partial 0.5 / y is computed with NumPy."""
    assert _both(fn, 0.0) == (expected, expected)


def test_math_log_at_zero():
    # the primal math.log(0.0) raises ValueError in Python (the user's own code does too);
    # the gradient alone does not need it
    assert _quiet(lambda: ad.grad(lambda x: math.log(x))(0.0)) == np.inf
    assert _quiet(lambda: ad.grad(lambda x: math.log(math.sin(x) + 1.0))(-math.pi / 2)) > 1e15


def test_atan2_at_the_origin_is_nan():
    ga, gb = _quiet(lambda: ad.grad(lambda a, b: math.atan2(a, b), argnums=(0, 1))(0.0, 0.0))
    assert math.isnan(ga) and math.isnan(gb)


def test_scalar_partials_stay_readable():
    text = ad.source(ad.grad(lambda x: math.sqrt(x)), 1.0)
    assert "x_bar = np.divide(0.5, math.sqrt(x))" in text
    array_text = ad.source(ad.grad(lambda x: np.sum(np.sqrt(x))), np.ones(2))
    assert "0.5 / np.sqrt(x)" in array_text  # arrays keep the plain operator


def test_math_sqrt_second_order_at_zero():
    assert _quiet(lambda: ad.grad(ad.grad(lambda x: math.sqrt(x)))(0.0)) == -np.inf
    assert ad.grad(ad.grad(lambda x: math.sqrt(x)))(4.0) == pytest.approx(-1.0 / 32.0)


def _logaddexp_cubic(x):
    return np.logaddexp(3.0, x * x) * x  # x ** 3 to every digit once x * x >> 3


@pytest.mark.parametrize("second", ["rev-over-rev", "fwd-over-rev"])
def test_logaddexp_second_derivative_keeps_its_digits_on_large_values(second):
    """At x = 1e6 the Hessian is 6x = 6e6 exactly in floating point. Reverse over reverse used
    to add and subtract terms of size x ** 3 (1e18) and kept only 5 digits."""
    g = ad.grad(_logaddexp_cubic)
    if second == "rev-over-rev":
        value = ad.vjp(g, 1e6)[1](1.0)[0]
    else:
        value = ad.jvp(g, (1e6,), (1.0,))[1]
    assert value == pytest.approx(6e6, rel=1e-13)


def test_logaddexp_tiny_partials_stay_relatively_accurate():
    ga, gb = ad.grad(lambda a, b: np.logaddexp(a, b), argnums=(0, 1))(-50.0, 0.0)
    assert ga == pytest.approx(math.exp(-50.0) / (1.0 + math.exp(-50.0)), rel=1e-14)
    assert gb == pytest.approx(1.0 / (1.0 + math.exp(-50.0)), rel=1e-15)
    ga2, gb2 = ad.grad(lambda a, b: np.logaddexp2(a, b), argnums=(0, 1))(-50.0, 0.0)
    assert ga2 == pytest.approx(2.0 ** -50 / (1.0 + 2.0 ** -50), rel=1e-14)
    assert gb2 == pytest.approx(1.0 / (1.0 + 2.0 ** -50), rel=1e-15)


def _logaddexp_pair(v):
    return np.logaddexp(v[0], v[1])


@pytest.mark.parametrize("a, b", [(0.3, 0.3), (1000.0, 0.0), (0.0, 1000.0), (-800.0, 5.0)])
def test_logaddexp_gradient_and_hessian_at_ties_and_far_tails(a, b):
    """The partial is sigmoid(a - b) (one exp, clamped so it never overflows): finite and
    right at a tie and where exp(b - a) would overflow, to second order both ways."""
    v = np.array([a, b])
    s = 0.5 * (1.0 + math.tanh(0.5 * (a - b)))  # sigmoid(a - b)
    np.testing.assert_allclose(ad.grad(_logaddexp_pair)(v), [s, 1.0 - s], rtol=1e-15,
                               atol=1e-303)  # the clamp: ~1e-304 where the partial is ~0
    expected = s * (1.0 - s) * np.array([[1.0, -1.0], [-1.0, 1.0]])
    for hessian in (ad.jacfwd(ad.grad(_logaddexp_pair)), ad.jacrev(ad.grad(_logaddexp_pair))):
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            np.testing.assert_allclose(hessian(v), expected, rtol=1e-14, atol=1e-300)


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


@pytest.mark.parametrize("p, expected", [(2, 0.0), (1.5, 0.0), (1, 1.0), (3, 0.0), (0.5, np.inf),
                                         (-1, -np.inf)])
def test_integer_and_fractional_powers_at_zero(p, expected):
    assert _quiet(lambda: ad.grad(lambda x: x ** p)(0.0)) == expected


# ---------------------------------------------------------------- compiled (Numba)
def kinks(v):
    """Every kink and tie above in one function, for one compile of each mode."""
    return (np.abs(v[0]) + np.maximum(v[1], v[2]) + np.minimum(v[3], v[4])
            + np.max(v[5:8]) + np.sum(np.clip(v[8:11], 0.0, 1.0))
            + np.where(v[11] > 0.0, v[11], 0.0) + np.min(v[12:15])
            + np.sum(np.sort(v[15:18]) * W3) + abs(v[18]))


KINK_POINT = np.array([0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 0.0, 1.0, 0.5, 0.0,
                       1.0, 1.0, 3.0, 1.0, 1.0, 0.0, -0.0])
KINK_GRAD = np.array([1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0, 0.5, 0.5, 1.0, 0.0,
                      0.5, 0.5, 0.0, 2.0, 3.0, 1.0, 1.0])


def sorts(x):
    """Sorts along every axis form of a 2-D array, for one compile."""
    return (np.sum(np.sort(x) * W23) + np.sum(np.sort(x, axis=0) * W23)
            + np.sum(np.sort(x, axis=None) * np.arange(6.0)) + np.sum(np.sort(x[0]) * W3))


def poles(a, b, c, d):
    return math.sqrt(a) + math.cbrt(b) + _sqrt_of_sin(c) + np.sqrt(d)


@pytest.fixture(scope="module")
def compiled():
    """The jitted functions the compiled tests share (compiled once, at -O0)."""
    import numba
    saved = numba.config.OPT
    numba.config.OPT = numba.core.config._OptLevel(0)
    try:
        out = {
            "kinks_grad": ad.jit(ad.grad(kinks))(KINK_POINT),
            "kinks_jvp": ad.jit(ad.jvp_transform(kinks))((KINK_POINT,),
                                                        (np.ones_like(KINK_POINT),)),
            "sorts_grad": ad.jit(ad.grad(sorts))(X23),
            "sorts": ad.jit(sorts)(X23),
            "poles_grad": _quiet(lambda: ad.jit(ad.grad(poles, argnums=(0, 1, 2, 3)))(
                0.0, 0.0, 0.0, 0.0)),
        }
    finally:
        numba.config.OPT = saved
    return out


def test_kinks_reference_values():
    assert np.array_equal(ad.grad(kinks)(KINK_POINT), KINK_GRAD)
    assert np.array_equal(_forward_gradient(kinks, KINK_POINT), KINK_GRAD)


@pytest.mark.numba
def test_jit_kinks_and_ties_match_jax(compiled):
    assert np.array_equal(compiled["kinks_grad"], KINK_GRAD)
    value, tangent = compiled["kinks_jvp"]
    assert value == pytest.approx(kinks(KINK_POINT))
    # the reduction's tangent is the mean of the tied tangents (1 here), not their sum
    assert tangent == pytest.approx(np.sum(KINK_GRAD[:5]) + 1.0 + 2.0 + 0.0 + 1.0 + 6.0 + 1.0)


@pytest.mark.numba
def test_jit_sorts_match_plain_python(compiled):
    assert np.array_equal(compiled["sorts_grad"], ad.grad(sorts)(X23))
    assert compiled["sorts"] == pytest.approx(sorts(X23))


@pytest.mark.numba
def test_jit_poles_give_inf(compiled):
    assert compiled["poles_grad"] == (np.inf, np.inf, np.inf, np.inf)
    assert _quiet(lambda: ad.grad(poles, argnums=(0, 1, 2, 3))(0.0, 0.0, 0.0, 0.0)) == (
        np.inf, np.inf, np.inf, np.inf)


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
    assert ad.grad(lambda x: np.sum(np.sort(x) * x))(F32).dtype == np.float32


def _max_times_three(w):
    return np.max(w) * 3.0


def _mean_of_exp(w):
    return np.mean(np.exp(w) * 0.5 + np.log1p(w * w))


@pytest.mark.parametrize("f", [_max_times_three, _mean_of_exp])
def test_float32_through_vmap_and_in_the_written_source(f):
    # vmap(grad(f)) of float32 rows gave float64 (`3.0 * (w == m)`, and the mean's
    # np.divide(1.0, n), a float64 scalar NumPy 2 does not weaken); grad(f) gave float32
    W = np.array([[0.5, 1.5, -0.2], [1.0, 0.3, 0.7]], dtype=np.float32)
    per_example = np.stack([ad.grad(f)(w) for w in W])
    batched = ad.vmap(ad.grad(f))(W)
    assert per_example.dtype == batched.dtype == np.float32
    np.testing.assert_allclose(batched, per_example, rtol=1e-6)
    assert ad.vmap(ad.jacfwd(f))(W).dtype == np.float32
    assert ad.vmap(lambda x, t: ad.jvp(f, (x,), (t,)))(W, W)[1].dtype == np.float32
    if f is _mean_of_exp:  # the written module alone (no wrapper casting) keeps float32
        source = ad.source(ad.grad(f), W[0])
        namespace = {}
        exec(compile(source, "<grad>", "exec"), namespace)
        assert namespace["grad__mean_of_exp"](W[0]).dtype == np.float32


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


@pytest.mark.parametrize("transform", [ad.jacfwd, ad.jacrev, ad.hessian])
def test_jacobians_refuse_integer_inputs(transform):
    with pytest.raises(ad.NonFloatInputError, match="requires real floating-point inputs, but "
                                                    "argument 'x' is int64"):
        transform(lambda x: np.sum(x ** 3))(np.array([1, 2]))


def test_integer_argument_outside_argnums_is_fine():
    """Like JAX: only the differentiated arguments must be floats."""
    g = ad.grad(lambda x, n: x * n)(2.0, 3)
    assert g == 3.0
    assert np.allclose(ad.jacfwd(lambda x, n: x * n)(np.ones(2), 3), 3.0 * np.eye(2))


def _minus_a_minimum(b, a):
    return b ** 2.0 - np.min(a[0])


def test_a_negated_tie_mask_stays_a_float_array():
    """The adjoint of ``-np.min(x)`` is ``-1.0 * (x == m) / count``: simplifying the product
    to ``-(x == m)`` negated a boolean array, which NumPy refuses."""
    a = np.array([[0.5, -1.0, 2.0], [1.0, 1.0, 1.0]])
    db, da = ad.grad(_minus_a_minimum, argnums=(0, 1))(0.5, a)
    assert db == 1.0
    np.testing.assert_array_equal(da, [[0.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
