"""An argument a transform neither differentiates nor maps, holding a Python int, is run as
the int itself once code for a run-time int cannot be written (``np.sum(x, axis=axis)``), as
JAX runs it: grad, value_and_grad, vmap (in_axes None), jacfwd, jacrev, their compositions
(hessian, jacfwd(grad), grad(grad)), and jit of them.
References: explicit derivatives, central differences, and Python loops over examples."""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

X = np.array([[0.3, -1.2, 0.8, 0.1], [2.1, -0.4, 1.5, 0.7], [0.9, 0.2, -0.6, 1.3]])
BATCH = np.stack([X, 0.5 * X, -X])


def row_or_column_sums(x, axis):
    return np.sum(np.sin(x), axis=axis)


def loss(x, axis):
    return np.sum(row_or_column_sums(x, axis) ** 2)


def loss_grad(x, axis):
    """By hand: d/dx sum_j (sum_axis sin x)_j^2 = 2 (sums, broadcast back) cos x."""
    sums = np.sum(np.sin(x), axis=axis, keepdims=True)
    return 2.0 * sums * np.cos(x)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_grad_with_an_int_axis(axis):
    np.testing.assert_allclose(ad.grad(loss)(X, axis), loss_grad(X, axis), rtol=1e-13)
    value, g = ad.value_and_grad(loss)(X, axis)
    assert value == pytest.approx(loss(X, axis), rel=1e-14)
    h = 1e-6
    e = np.zeros_like(X)
    e[1, 2] = h
    assert g[1, 2] == pytest.approx((loss(X + e, axis) - loss(X - e, axis)) / (2 * h),
                                    rel=1e-6)


def test_each_int_value_gets_its_own_code():
    g = ad.grad(loss)
    g(X, 0)
    assert "axis=0" in g.source
    g(X, 1)
    assert "axis=1" in g.source
    np.testing.assert_allclose(g(X, 0), loss_grad(X, 0), rtol=1e-13)  # (the first again)


@pytest.mark.parametrize("axis", [0, 1])
def test_vmap_with_an_unmapped_int_axis(axis):
    batched = ad.vmap(row_or_column_sums, in_axes=(0, None))
    expected = np.stack([row_or_column_sums(x, axis) for x in BATCH])
    np.testing.assert_allclose(batched(BATCH, axis), expected, rtol=1e-14)
    per_example = ad.vmap(ad.grad(loss), in_axes=(0, None))
    expected = np.stack([loss_grad(x, axis) for x in BATCH])
    np.testing.assert_allclose(per_example(BATCH, axis), expected, rtol=1e-13)
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(loss), in_axes=(0, None)))(BATCH, axis),
                               expected, rtol=1e-13)


def test_jit_grad_with_an_int_axis():
    np.testing.assert_allclose(jit(ad.grad(loss))(X, 1), loss_grad(X, 1), rtol=1e-13)


@pytest.mark.parametrize("make", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobians_with_an_int_axis(make):
    jac = make(row_or_column_sums)(X, 1)
    expected = np.zeros((3, 3, 4))
    for i in range(3):
        expected[i, i] = np.cos(X[i])
    np.testing.assert_allclose(jac, expected, rtol=1e-14)


def scaled_sums(x, scale, axis):
    return np.sum(np.sum(np.sin(x), axis=axis) * scale)


def test_only_the_int_is_taken_for_its_value():
    """scale stays an argument of the generated code (not written as 2.5), axis does not."""
    g = ad.grad(scaled_sums)
    np.testing.assert_allclose(g(X, 2.5, 1), 2.5 * np.cos(X), rtol=1e-14)
    assert "2.5" not in g.source and "axis=1" in g.source, g.source


def _loss_hessian(x, axis, eps=1e-6):
    """Central differences of the explicit gradient (loss_grad)."""
    out = np.zeros(x.shape + x.shape)
    for index in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[index] = eps
        out[(...,) + index] = (loss_grad(x + e, axis) - loss_grad(x - e, axis)) / (2 * eps)
    return out


def loss_axis_first(axis, x):
    return loss(x, axis)


def scalar_loss(t, axis):
    return np.sum(np.sum(np.sin(t * X), axis=axis) ** 2)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("make", [ad.hessian, lambda f: ad.jacfwd(ad.grad(f)),
                                  lambda f: ad.jacrev(ad.grad(f)),
                                  lambda f: ad.jacrev(ad.jacrev(f))],
                         ids=["hessian", "jacfwd_grad", "jacrev_grad", "jacrev_jacrev"])
def test_second_derivatives_with_an_int_axis(make, axis):
    """The inner transform writes the int into its code (and takes no parameter for it);
    the outer one transforms that code with the other arguments."""
    h = make(loss)(X, axis)
    assert h.shape == (3, 4, 3, 4)
    np.testing.assert_allclose(h, _loss_hessian(X, axis), rtol=1e-6, atol=1e-7)


def test_hessian_with_the_int_before_the_array():
    """argnums=1 of (axis, x): the outer transform's argnums moves down past the int."""
    h = ad.hessian(loss_axis_first, argnums=1)(1, X)
    np.testing.assert_allclose(h, _loss_hessian(X, 1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("axis", [0, 1])
def test_grad_of_grad_with_an_int_axis(axis):
    t, h = 0.7, 1e-4
    expected = (scalar_loss(t + h, axis) - 2 * scalar_loss(t, axis) +
                scalar_loss(t - h, axis)) / h ** 2
    assert ad.grad(ad.grad(scalar_loss))(t, axis) == pytest.approx(expected, rel=1e-6)
    value, second = ad.value_and_grad(ad.grad(scalar_loss))(t, axis)
    assert second == pytest.approx(expected, rel=1e-6)
    assert value == pytest.approx(ad.grad(scalar_loss)(t, axis), rel=1e-14)


@pytest.mark.numba
@pytest.mark.parametrize("make", [ad.grad, ad.hessian], ids=["grad", "hessian"])
def test_jit_called_again_with_another_int(make):
    """Each call's int picks its own code: the quick path a second call takes (a plan that
    passes the arguments straight to the compiled entry) is not used for such a function,
    whose entry takes no parameter for the int."""
    compiled, plain = jit(make(loss)), make(loss)
    for axis in (1, 1, 0, 0, 1):
        np.testing.assert_allclose(compiled(X, axis), plain(X, axis), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(compiled(X, 0), _loss_hessian(X, 0) if make is ad.hessian
                               else loss_grad(X, 0), rtol=1e-6, atol=1e-7)
