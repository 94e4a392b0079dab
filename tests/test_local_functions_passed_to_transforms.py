"""A lambda or nested def passed to a transform inside transformed code.

``jit(hvp)`` with ``hvp = lambda ...: jvp(lambda q: grad(loss)(q, x), (p,), (v,))[1]`` (JAX's
Hessian-vector product idiom), ``grad(lambda q: loss(q, x))(p)``, ``vmap(lambda q: ...)(ps)``
and jacrev of one were refused ("a lambda is supported when it is bound to a name", "the
function passed to jvp must be known", or SourceUnavailableError "<nested function ...> is
not a Python function"). The function is now lifted to the module with its free variables as
parameters after its own (normalize.Normalizer.lifted), passed at each call as constants of
the transform. References: central differences of the plain functions, and the functions run
without jit (their transforms then see a Python lambda).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def _loss(p, x):
    return np.sum(np.tanh(p * x) ** 2)


def _hvp_inline(p, x, v):
    return ad.jvp(lambda q: ad.grad(_loss)(q, x), (p,), (v,))[1]


def _hvp_nested_def(p, x, v):
    def doubled_gradient(q):
        return ad.grad(_loss)(q, x) * 2.0
    return ad.jvp(doubled_gradient, (p,), (v,))


def _grad_of_lambda(p, x):
    return ad.grad(lambda q: _loss(q, x))(p)


def _jacrev_of_lambda(p, x):
    return ad.jacrev(lambda q, s: np.sin(q * x) * s, argnums=-1)(p, 2.0)


def _vmap_of_lambda(ps, x):
    return np.sum(ad.vmap(lambda q: np.sum(np.tanh(q * x)))(ps))


def _called_where_it_stands(x):
    return np.sum((lambda t: t * t * 2.0)(x))


P = np.array([0.3, -0.2, 0.8])
X = np.array([1.0, 2.0, -0.5])
V = np.array([1.0, 0.5, -2.0])


def _fd(f, x, eps=1e-6):
    cols = [(np.asarray(f(x + eps * e)) - np.asarray(f(x - eps * e))) / (2 * eps)
            for e in np.eye(x.size)]
    return np.stack(cols, axis=-1)


def _hessian_of_loss():
    return _fd(lambda q: ad.grad(_loss)(q, X), P)


@pytest.mark.numba
def test_hessian_vector_product_idiom_under_jit():
    expected = _hessian_of_loss() @ V
    np.testing.assert_allclose(_hvp_inline(P, X, V), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(_hvp_inline)(P, X, V), expected, rtol=1e-6, atol=1e-8)
    out, out_dot = jit(_hvp_nested_def)(P, X, V)
    np.testing.assert_allclose(out, 2.0 * ad.grad(_loss)(P, X), rtol=1e-12)
    np.testing.assert_allclose(out_dot, 2.0 * expected, rtol=1e-6, atol=1e-8)


def test_grad_of_a_lambda_inside_transformed_code():
    np.testing.assert_allclose(jit(_grad_of_lambda)(P, X), ad.grad(_loss)(P, X), rtol=1e-12)
    # differentiated again: the Hessian
    np.testing.assert_allclose(ad.jacfwd(_grad_of_lambda)(P, X), _hessian_of_loss(),
                               rtol=1e-6, atol=1e-8)


def test_jacrev_of_a_lambda_with_a_negative_argnum():
    # argnums=-1 is the lambda's last parameter (s), not a free variable lifted after it
    np.testing.assert_allclose(jit(_jacrev_of_lambda)(P, X), np.sin(P * X), rtol=1e-12)
    np.testing.assert_allclose(ad.jacfwd(_jacrev_of_lambda)(P, X),
                               _fd(lambda q: _jacrev_of_lambda(q, X), P), rtol=1e-6,
                               atol=1e-8)


def test_vmap_of_a_lambda_maps_its_own_parameter_only():
    ps = np.stack([P, 2.0 * P, -P])
    expected = sum(np.sum(np.tanh(q * X)) for q in ps)
    assert jit(_vmap_of_lambda)(ps, X) == pytest.approx(expected, rel=1e-12)
    g = ad.grad(_vmap_of_lambda)(ps, X)
    fd = _fd(lambda flat: _vmap_of_lambda(flat.reshape(ps.shape), X), ps.ravel())
    np.testing.assert_allclose(g.ravel(), fd, rtol=1e-6, atol=1e-8)


def test_a_lambda_called_where_it_stands():
    np.testing.assert_allclose(ad.grad(_called_where_it_stands)(X), 4.0 * X, rtol=1e-12)
