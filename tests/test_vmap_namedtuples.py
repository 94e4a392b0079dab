"""vmap with NamedTuple in_axes / out_axes entries (``in_axes=(Params(0, None), 0)``).

The in_axes/out_axes prefix trees are rebuilt in the kind of sequence the value has in their
place; a NamedTuple takes its fields as separate arguments. Every expected value is computed
independently with a plain NumPy loop over the examples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from autodiff_ast import grad, jit, vmap

N = 3  # examples per batch


class Params(NamedTuple):
    """Per-example parameters of an affine map: a weight vector and a bias."""

    w: np.ndarray
    b: float


def affine(p, x):
    """The per-example function: elementwise weight and shared bias."""
    return p.w * x + p.b


def affine_in_dict(d, x):
    """`affine` with its parameters one level deeper, in a dict."""
    return d["p"].w * x + d["p"].b


def affine_loss(p, x):
    """A scalar per-example loss whose gradient is a Params."""
    return np.sum((p.w * x + p.b) ** 2)


_SHARED_PARAMS = (Params(None, None), 0)


def total_loss(p, xs):
    """A vmap with NamedTuple in_axes, built and called inside a function grad transforms."""
    return np.sum(vmap(affine_loss, in_axes=_SHARED_PARAMS)(p, xs) ** 2)


def _data():
    rng = np.random.default_rng(7)
    return rng.normal(size=(N, 2)), rng.normal(size=N), rng.normal(size=(N, 2))


def _loss_gradient(w, b, x):
    """d affine_loss / d (w, b) for one example, written out by hand."""
    r = w * x + b
    return 2.0 * r * x, 2.0 * np.sum(r)


def test_in_axes_namedtuple_maps_one_field_and_shares_the_other():
    ws, _, xs = _data()
    expected = np.stack([ws[i] * xs[i] + 0.5 for i in range(N)])
    got = vmap(affine, in_axes=(Params(0, None), 0))(Params(ws, 0.5), xs)
    np.testing.assert_allclose(got, expected)


def test_in_axes_namedtuple_maps_every_field():
    ws, bs, xs = _data()
    expected = np.stack([ws[i] * xs[i] + bs[i] for i in range(N)])
    got = vmap(affine, in_axes=(Params(0, 0), 0))(Params(ws, bs), xs)
    np.testing.assert_allclose(got, expected)


def test_in_axes_namedtuple_with_nonzero_and_negative_axes():
    ws, _, xs = _data()
    expected = np.stack([ws[i] * xs[i] - 1.5 for i in range(N)])
    got = vmap(affine, in_axes=(Params(1, None), -1))(Params(ws.T.copy(), -1.5), xs.T.copy())
    np.testing.assert_allclose(got, expected)


def test_in_axes_plain_tuple_prefix_for_a_namedtuple_argument():
    ws, _, xs = _data()
    expected = np.stack([ws[i] * xs[i] + 2.0 for i in range(N)])
    got = vmap(affine, in_axes=((0, None), 0))(Params(ws, 2.0), xs)
    np.testing.assert_allclose(got, expected)


def test_in_axes_namedtuple_nested_in_a_dict():
    ws, _, xs = _data()
    expected = np.stack([ws[i] * xs[i] + 0.25 for i in range(N)])
    got = vmap(affine_in_dict, in_axes=({"p": Params(0, None)}, 0))({"p": Params(ws, 0.25)}, xs)
    np.testing.assert_allclose(got, expected)


def test_jit_of_vmap_with_namedtuple_in_axes():
    ws, _, xs = _data()
    expected = np.stack([ws[i] * xs[i] + 0.5 for i in range(N)])
    fast = jit(vmap(affine, in_axes=(Params(0, None), 0)))
    for _ in range(2):  # the first call generates, the second takes jit's fast path
        np.testing.assert_allclose(fast(Params(ws, 0.5), xs), expected)


def test_out_axes_namedtuple_for_a_namedtuple_gradient():
    ws, _, xs = _data()
    w, b = ws[0], 0.5
    per_example = [_loss_gradient(w, b, xs[i]) for i in range(N)]
    batched = vmap(grad(affine_loss), in_axes=(Params(None, None), 0), out_axes=Params(1, 0))
    got = batched(Params(w, b), xs)
    assert isinstance(got, Params)
    np.testing.assert_allclose(got.w, np.stack([g for g, _ in per_example], axis=1))
    np.testing.assert_allclose(got.b, np.array([g for _, g in per_example]))


def test_grad_through_a_vmap_with_namedtuple_in_axes():
    ws, _, xs = _data()
    w, b = ws[0], 0.5
    gw, gb = np.zeros(2), 0.0
    for i in range(N):  # d/dp of sum_i loss_i**2 = sum_i 2 loss_i d loss_i/dp
        loss = np.sum((w * xs[i] + b) ** 2)
        dw, db = _loss_gradient(w, b, xs[i])
        gw, gb = gw + 2.0 * loss * dw, gb + 2.0 * loss * db
    got = grad(total_loss)(Params(w, b), xs)
    assert isinstance(got, Params)
    np.testing.assert_allclose(got.w, gw)
    np.testing.assert_allclose(got.b, gb)
