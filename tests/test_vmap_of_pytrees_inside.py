"""vmap with pytree arguments, called inside transformed code (session 43).

``grad`` of ``np.mean(vmap(loss, in_axes=(None, 0))(params, X))`` with ``params`` a dict was
refused ("a pytree argument ... cannot be used as one value here"): the per-example loss
written with vmap, then averaged, is the everyday JAX idiom. The vmap now takes the pytree's
flat leaves, as grad(f) called inside transformed code does; in_axes written as a display
with a dict (``({"w": None, "b": None}, 0)``) is read as written. References: central
differences of a Python loop over the examples.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

RNG = np.random.default_rng(43)
X = RNG.standard_normal((5, 3))
PARAMS = {"w": RNG.standard_normal(3), "b": 0.3}


def _loss(p, x):
    return np.tanh(np.dot(p["w"], x) + p["b"]) ** 2


def _mean_loss(p, X):
    return np.mean(ad.vmap(_loss, in_axes=(None, 0))(p, X))


def _squares_with_dict_axes(p, X):
    out = ad.vmap(_loss, in_axes=({"w": None, "b": None}, 0))(p, X)
    return np.sum(out * out)


def _mean_loss_of_a_display(w, b, X):
    return np.mean(ad.vmap(_loss, in_axes=(None, 0))({"w": w, "b": b}, X))


def _pair(p, x):
    return np.dot(p[0], x), np.sum(p[1] * x)


def _tuple_params(p, X):
    a, b = ad.vmap(_pair, in_axes=(None, 0))(p, X)
    return np.sum(a * b)


def _per_example(p, X):
    return ad.vmap(_loss, in_axes=(None, 0))(p, X)


def _looped(per_example, reduce):
    return lambda p: reduce(np.array([per_example(p, x) for x in X]))


def _dict_fd(f, p, eps=1e-6):
    out = {}
    for key, value in p.items():
        value = np.asarray(value, dtype=float)
        grad = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            step = np.zeros_like(value)
            step[idx] = eps
            up = dict(p, **{key: value + step if value.ndim else float(value + step)})
            down = dict(p, **{key: value - step if value.ndim else float(value - step)})
            grad[idx] = (f(up) - f(down)) / (2 * eps)
        out[key] = grad
    return out


@pytest.mark.parametrize("f, reduce", [(_mean_loss, np.mean),
                                       (_squares_with_dict_axes, lambda v: np.sum(v * v))])
@pytest.mark.parametrize("wrap", [lambda g: g, jit], ids=["plain", "jit"])
def test_grad_through_vmap_of_a_dict_argument(f, reduce, wrap):
    got = wrap(ad.grad(f))(PARAMS, X)
    want = _dict_fd(_looped(_loss, reduce), PARAMS)
    assert sorted(got) == ["b", "w"]
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-9)


def test_grad_through_vmap_of_a_dict_display():
    gw, gb = ad.grad(_mean_loss_of_a_display, argnums=(0, 1))(PARAMS["w"], PARAMS["b"], X)
    want = _dict_fd(_looped(_loss, np.mean), PARAMS)
    np.testing.assert_allclose(gw, want["w"], rtol=1e-6)
    np.testing.assert_allclose(gb, want["b"], rtol=1e-6)


def test_grad_through_vmap_of_a_tuple_argument():
    p = (RNG.standard_normal(3), RNG.standard_normal(3))
    got = ad.grad(_tuple_params)(p, X)
    assert isinstance(got, tuple) and len(got) == 2

    def total(p):
        return sum(np.dot(p[0], x) * np.sum(p[1] * x) for x in X)
    eps = 1e-6
    for k in range(2):
        want = np.array([(total(tuple(q + eps * e if j == k else q for j, q in enumerate(p))) -
                          total(tuple(q - eps * e if j == k else q for j, q in enumerate(p))))
                         / (2 * eps) for e in np.eye(3)])
        np.testing.assert_allclose(got[k], want, rtol=1e-6)


def test_jacobians_through_vmap_of_a_dict_argument():
    rev, fwd = ad.jacrev(_per_example)(PARAMS, X), ad.jacfwd(_per_example)(PARAMS, X)
    assert rev["w"].shape == (5, 3) and rev["b"].shape == (5,)
    for key in ("w", "b"):
        np.testing.assert_allclose(rev[key], fwd[key], rtol=1e-10)
    # row i: the gradient of example i's loss
    for i, x in enumerate(X):
        want = _dict_fd(lambda p, x=x: _loss(p, x), PARAMS)
        np.testing.assert_allclose(rev["w"][i], want["w"], rtol=1e-6, atol=1e-9)


def _axes_computed_inside(p, X):
    axes = (None, 0) if X.ndim == 2 else (None, None)
    return np.mean(ad.vmap(_loss, in_axes=axes)(p, X))


def test_options_not_known_when_generating_are_refused_on_the_users_line():
    with pytest.raises(ad.UnsupportedSyntaxError) as info:
        ad.grad(_axes_computed_inside)(PARAMS, X)
    text = str(info.value)
    assert "test_vmap_of_pytrees_inside.py" in text and "must be known" in text
