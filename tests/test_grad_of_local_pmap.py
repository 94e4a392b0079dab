"""grad of a function that calls pmap on a nested def or a lambda.

``grad(outer)`` with ``pmap(inner, axis_name='i')(x)`` inside `outer`, `inner` a local
function, raised ``TypeError: pmap() got an unexpected keyword argument 'argnums'``: the
transform of a local function (normalize.Normalizer.transform_of_local) was re-made with
``argnums`` for every transform but vmap, and read a positional option as vmap's in_axes
(pmap's second parameter is axis_name). pmap now gets in_axes, one entry per parameter, None
for the free variables the lifted function takes after its own. References: central finite
differences of the plain functions, and the same function written with vmap(axis_name=...).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from autodiff_ast import grad, jit, pmap, pmean, psum, value_and_grad, vmap

sys.path.insert(0, str(Path(__file__).parent))
from test_pmap import central  # noqa: E402  (central differences)

X = np.array([[1.0, 2.0], [0.5, 3.0], [2.0, -1.0]])


def _cubed_shares(x):
    def inner(z):
        return z / psum(z, 'i')
    return np.sum(pmap(inner, axis_name='i')(x) ** 3)


def _cubed_shares_vmap(x):
    def inner(z):
        return z / psum(z, 'i')
    return np.sum(vmap(inner, axis_name='i')(x) ** 3)


def _scaled_by_a_closure(x):
    w = np.tanh(x[0])
    def inner(z):
        return z * w / pmean(z, 'i')
    return np.sum(pmap(inner, axis_name='i')(x) ** 2)


def _positional_axis_name_and_closure(x):
    w = np.sum(x[:, 0])
    def inner(z):
        return np.sin(z) * w / psum(z, 'i')
    return np.sum(pmap(inner, 'i')(x) ** 2)


def _mapped_and_shared_arguments(x):
    s = np.cos(x[0])
    def inner(z, t):
        return z * t / psum(z * z, 'i')
    return np.sum(pmap(inner, axis_name='i', in_axes=(0, None))(x, s) ** 2)


def _lambda_mapped(x):
    inner = lambda z: z / psum(z, 'i')  # noqa: E731
    return np.sum(pmap(inner, axis_name='i')(x) ** 3)


CASES = [_cubed_shares, _scaled_by_a_closure, _positional_axis_name_and_closure,
         _mapped_and_shared_arguments, _lambda_mapped]


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__.strip("_"))
def test_grad_of_pmap_of_a_local_function(f):
    np.testing.assert_allclose(grad(f)(X), central(f, X), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("f", [_scaled_by_a_closure, _mapped_and_shared_arguments],
                         ids=lambda f: f.__name__.strip("_"))
def test_value_and_grad_of_pmap_of_a_local_function(f):
    value, gradient = value_and_grad(f)(X)
    np.testing.assert_allclose(value, f(X), rtol=1e-12)
    np.testing.assert_allclose(gradient, central(f, X), rtol=1e-6, atol=1e-9)


def test_pmap_and_vmap_of_a_local_function_have_one_gradient():
    """On one process pmap computes what vmap with the same axis name computes."""
    np.testing.assert_allclose(grad(_cubed_shares)(X), grad(_cubed_shares_vmap)(X),
                               rtol=1e-12)


@pytest.mark.numba
@pytest.mark.parametrize("f", [_cubed_shares, _positional_axis_name_and_closure],
                         ids=lambda f: f.__name__.strip("_"))
def test_jit_of_grad_of_pmap_of_a_local_function(f):
    np.testing.assert_allclose(jit(grad(f))(X), central(f, X), rtol=1e-6, atol=1e-9)


@pytest.mark.numba
@pytest.mark.parametrize("f", [_scaled_by_a_closure, _mapped_and_shared_arguments],
                         ids=lambda f: f.__name__.strip("_"))
def test_jit_of_a_function_calling_pmap_of_a_local_function(f):
    """jit(f) transforms f's code too: the same transform of the local function."""
    np.testing.assert_allclose(jit(f)(X), f(X), rtol=1e-12)
