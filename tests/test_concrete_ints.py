"""An argument a transform neither differentiates nor maps, holding a Python int, is run as
the int itself once code for a run-time int cannot be written (``np.sum(x, axis=axis)``), as
JAX runs it: grad, value_and_grad, vmap (in_axes None), jacfwd, jacrev, and jit of them.
References: explicit derivatives, central differences, and Python loops over examples."""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import MissingRuleError
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


@pytest.mark.xfail(strict=True, raises=MissingRuleError,
                   reason="hessian (jacfwd of jacrev) cannot take a static argument yet: "
                          "the inner jacrev's entry is transformed with flat arrays only")
def test_hessian_with_an_int_axis():
    h = ad.hessian(loss)(X, 1)
    assert h.shape == (3, 4, 3, 4)
