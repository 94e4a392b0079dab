"""jit of the maps vjp and linearize return (autodiff_ast/bound_maps.py): the compiled map
gives the values of the map itself, for several primals, tuple outputs, has_aux and dict
primals; maps it cannot write are refused with what to do. (jit(pullback) said "cannot
differentiate <_Pullback object>".)"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import StaticArgumentError, UnsupportedError

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")

X = np.array([0.3, -0.7, 1.1])
Y = np.array([0.5, 2.0, -1.0])


def one(x):
    return np.sin(x) * x


def two_in_two_out(x, y):
    return np.tanh(x * y), np.sum(x ** 2) * y


def with_aux(x):
    return np.exp(x) * 2.0, np.sum(x)


def on_a_dict(p):
    return np.sin(p["w"]) * p["b"]


def _assert_same(got, want):
    assert type(got) is type(want) and len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(a, dict):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-15)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("target", ["python", pytest.param("cpu", marks=pytest.mark.numba)])
def test_jit_of_pullbacks_matches_the_pullbacks(target, quick_llvm):
    _, pullback = ad.vjp(one, X)
    _assert_same(ad.jit(pullback, target=target)(Y), pullback(Y))
    _, pullback = ad.vjp(two_in_two_out, X, Y)
    ct = (np.array([1.0, -1.0, 0.5]), np.array([0.2, 0.1, 3.0]))
    _assert_same(ad.jit(pullback, target=target)(ct), pullback(ct))
    _, pullback, aux = ad.vjp(with_aux, X, has_aux=True)
    _assert_same(ad.jit(pullback, target=target)(Y), pullback(Y))


def test_jit_of_a_pullback_at_dict_primals():
    params = {"w": X, "b": 1.5}
    _, pullback = ad.vjp(on_a_dict, params)
    _assert_same(ad.jit(pullback, target="python")(Y), pullback(Y))


def test_the_pullback_against_finite_differences():
    _, pullback = ad.vjp(one, X)
    eps = 1e-6
    fd = np.array([(one(X + eps * e) - one(X - eps * e)) @ Y / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(ad.jit(pullback, target="python")(Y)[0], fd, rtol=1e-7)


@pytest.mark.parametrize("target", ["python", pytest.param("cpu", marks=pytest.mark.numba)])
def test_jit_of_linearized_maps_matches_the_maps(target, quick_llvm):
    _, lin = ad.linearize(one, X)
    np.testing.assert_allclose(ad.jit(lin, target=target)(Y), lin(Y), rtol=1e-12)
    _, lin = ad.linearize(two_in_two_out, X, Y)
    dx, dy = np.array([1.0, 0.0, -2.0]), np.array([0.3, 0.3, 0.3])
    _assert_same(ad.jit(lin, target=target)(dx, dy), lin(dx, dy))


def test_what_cannot_be_compiled_is_refused_with_the_way_out():
    _, pullback = ad.vjp(one, X)
    with pytest.raises(StaticArgumentError, match="takes no static arguments"):
        ad.jit(pullback, static_argnums=0)
    _, pullback = ad.vjp(lambda x: (x, (x * 2.0, x)), X)
    with pytest.raises(UnsupportedError, match="pytree") as info:
        ad.jit(pullback)
    assert "def g(x, ct)" in info.value.hint
