"""Reverse mode of indexing, views and integer weights: four silently wrong gradients found by
session 42's bug hunt, each checked against central differences, plain and under jit.

1. ``A[-2:, [0, 2]]``: a slice with a start only, beside an index list, went into the
   backward ``np.add.at`` as ``slice(-2)`` (a stop): the gradient landed in the first rows.
2. ``z = np.flip(y)`` (fliplr, flipud, rot90, atleast_*d, split's pieces, asanyarray) then
   ``z[0] = ...``: not known to share y's memory, so the write was missed (now refused, as
   for reshape or .T).
3. ``np.sum(y * W)`` with W an integer matrix: y's adjoint ``np.sum(W, axis=0)`` stayed an
   integer array, and float updates written into it later truncated.
4. ``np.array([True, True, True])`` and ``.astype(bool)`` were typed as int64 arrays: a mask
   of them was taken for indices (True and False as positions 1 and 0).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

W_INT = np.arange(6).reshape(2, 3)


def _start_only_read(A):
    return np.sum(A[-2:, [0, 2]] ** 2)


def _start_only_write(A):
    B = A.copy()
    B[2:, [0, 2]] += 1.0
    return np.sum(B ** 2)


def _start_only_scaled(A):
    B = A.copy()
    B[-3:, [1, 1]] *= 2.0
    return np.sum(B * B * A)


def _integer_weights(x):
    y = x.copy()
    y[0] = y[0] * 2.5
    return np.sum(y * W_INT)


def _integer_weights_loop(x):
    y = x.copy()
    for i in range(1, 3):
        y[i] = y[i] * 0.5 + y[i - 1]
    return np.sum(y * W_INT)


def _integer_weights_mask(x):
    B = x.copy()
    B[x > 0.25] *= 3.0
    return np.sum(B * W_INT)


def _mask_display(x):
    m = np.array([True, False, True])
    y = x.copy()
    y[m] = x[0] * 3.0
    return np.sum(y ** 2)


def _mask_astype(x):
    m = np.array([1, 0, 1]).astype(bool)
    y = x.copy()
    y[m] *= 3.0
    return np.sum(y ** 2)


def _fd(f, x, eps=1e-6):
    flat = x.ravel()
    out = np.zeros_like(flat)
    for k in range(flat.size):
        e = np.zeros_like(flat)
        e[k] = eps
        out[k] = (f((flat + e).reshape(x.shape)) - f((flat - e).reshape(x.shape))) / (2 * eps)
    return out.reshape(x.shape)


A = np.arange(1.0, 13.0).reshape(4, 3) * 0.1
X = np.array([0.3, -0.7, 1.2])
CASES = [(_start_only_read, A), (_start_only_write, A), (_start_only_scaled, A),
         (_integer_weights, X), (_integer_weights_loop, X), (_integer_weights_mask, X),
         (_mask_display, X), (_mask_astype, X)]


@pytest.mark.parametrize("f, x", CASES, ids=[f.__name__ for f, _ in CASES])
def test_gradient_against_differences(f, x):
    g = ad.grad(f)(x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, _fd(f, x), rtol=1e-6, atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("f, x", CASES, ids=[f.__name__ for f, _ in CASES])
def test_gradient_under_jit(f, x):
    np.testing.assert_allclose(jit(ad.grad(f))(x), _fd(f, x), rtol=1e-6, atol=1e-8)


VIEWS = ["np.flip(y)", "np.flipud(y)", "np.atleast_1d(y)", "np.atleast_2d(y)[0]",
         "np.split(y, 2)[0]", "np.hsplit(y, 2)[1]", "np.array_split(y, 2)[0]",
         "np.asanyarray(y)", "np.rot90(y.reshape(2, 2))[0]", "np.fliplr(y.reshape(2, 2))[0]"]


@pytest.mark.parametrize("view", VIEWS)
def test_a_write_through_a_view_is_refused(tmp_path, monkeypatch, view):
    (tmp_path / "viewed.py").write_text(
        "import numpy as np\n\n\n"
        "def f(x):\n"
        "    y = x.copy()\n"
        f"    z = {view}\n"
        "    z[0] = x[1] ** 2\n"
        "    return np.sum(y * np.arange(4.0))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    module = importlib.import_module("viewed")
    try:
        with pytest.raises(ad.UnsupportedSyntaxError, match="shares memory with z"):
            ad.grad(module.f)(np.array([0.3, -0.7, 1.2, 0.4]))
    finally:
        import sys
        sys.modules.pop("viewed", None)


# ---------------------------------------------------------------- session 43: jacrev of an
# index list beside a slice (the pullback's np.add.at batched over cotangent rows)
def _listed_columns(A):
    return A[:, [0, 2]] * 2.0


@pytest.mark.parametrize("transform", [ad.jacrev, ad.jacfwd, lambda f: jit(ad.jacrev(f))])
def test_jacobian_of_an_index_list_beside_a_slice(transform):
    # vmap of the pullback wrote np.add.at(A_bar[i], (slice, cols), v[i]), which the front
    # end refused on the generated file: the list bound to a name was not taken for an
    # integer index when ordering the example's axes.
    A = np.arange(6.0).reshape(2, 3)
    want = np.zeros((2, 2, 2, 3))
    for r in range(2):
        for s, b in enumerate([0, 2]):
            want[r, s, r, b] = 2.0
    np.testing.assert_array_equal(transform(_listed_columns)(A), want)


def _scatter_beside_a_slice(x):
    a = np.zeros((3, 4))
    np.add.at(a, (slice(None), [0, 0, 2]), x)
    return np.sum(a ** 2)


def test_add_at_with_a_slice_and_an_index_list_under_jit():
    # The backward read a_bar[slice_2, tup] with tup a Python list: Numba has no getitem
    # for a list index (CompileError); the dialect indexes with np.array(tup).
    x = np.arange(9.0).reshape(3, 3)
    col = x[:, 0] + x[:, 1]
    want = np.stack([2.0 * col, 2.0 * col, 2.0 * x[:, 2]], axis=1)
    np.testing.assert_allclose(ad.grad(_scatter_beside_a_slice)(x), want)
    np.testing.assert_allclose(jit(ad.grad(_scatter_beside_a_slice))(x), want)
