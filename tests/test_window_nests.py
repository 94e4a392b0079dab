"""A correlation's tap nests in one pass over the data under jit (codegen/window_nests.py).

Compiled gradients are compared with the plain-NumPy gradient, a hand-written gradient and
central differences; the forward pass, which keeps each element's sum in the nest's order, with
NumPy bit for bit. The generated source is checked to show the nests were rewritten, and
arguments the one pass cannot take (windows that do not fit, strided arrays) to run the
loops as written.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_vector_loops import central

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.window_nests import rewrite_window_nests

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def conv_batch(w, x, y):
    """Mean squared error of 'valid' correlations of a batch of images (as benchmarked)."""
    kh = w.shape[0]
    kw = w.shape[1]
    ho = x.shape[1] - kh + 1
    wo = x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo))
    for a in range(kh):
        for b in range(kw):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
    r = out - y
    return np.sum(r * r) / (x.shape[0] * ho * wo)


def conv_image(w, x):
    """One image, the product written tap second, a nonlinear loss."""
    ho = x.shape[0] - w.shape[0] + 1
    wo = x.shape[1] - w.shape[1] + 1
    out = np.ones((ho, wo))
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            out = out + x[a:a + ho, b:b + wo] * w[a, b]
    return np.sum(np.tanh(out))


def correlation(w, x):
    """The forward pass alone (an array result)."""
    ho = x.shape[1] - w.shape[0] + 1
    wo = x.shape[2] - w.shape[1] + 1
    out = np.zeros((x.shape[0], ho, wo))
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
    return out


def conv_grad_by_hand(w, x, y):
    kh, kw = w.shape
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    r = correlation(w, x) - y
    scale = 2.0 / (x.shape[0] * ho * wo)
    return np.array([[scale * np.sum(r * x[:, a:a + ho, b:b + wo]) for b in range(kw)]
                     for a in range(kh)])


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 9, 8))
    w = rng.standard_normal((3, 2)) / 3
    return w, x, rng.standard_normal((3, 7, 7))


def test_batched_convolution_gradient(batch):
    compiled = ad.jit(ad.grad(conv_batch))
    got = compiled(*batch)
    assert "window_accumulate(" in compiled.source and "window_products(" in compiled.source
    np.testing.assert_allclose(got, ad.grad(conv_batch)(*batch), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(got, conv_grad_by_hand(*batch), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(got, central(conv_batch, list(batch), 0), rtol=1e-6, atol=1e-9)


def test_one_image_with_the_tap_second():
    rng = np.random.default_rng(6)
    w, x = rng.standard_normal((2, 3)) / 3, rng.standard_normal((6, 7))
    compiled = ad.jit(ad.grad(conv_image, argnums=(0, 1)))
    got = compiled(w, x)
    for helper in ("window_accumulate(", "window_products(", "window_scatter("):
        assert helper in compiled.source
    for g, want, k in zip(got, ad.grad(conv_image, argnums=(0, 1))(w, x), (0, 1)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(g, central(conv_image, [w, x], k), rtol=1e-6, atol=1e-9)


def test_forward_pass_is_bit_for_bit_the_nest(batch, monkeypatch):
    w, x, _ = batch
    # without multiply-adds (they round once where NumPy rounds twice) the one pass adds the
    # same products in the same order as the loops
    monkeypatch.setenv("AUTODIFF_AST_FP_CONTRACT", "0")
    compiled = ad.jit(correlation)
    got = compiled(w, x)
    assert "window_accumulate(" in compiled.source and "contract" not in compiled.source
    assert np.array_equal(got, correlation(w, x))
    monkeypatch.delenv("AUTODIFF_AST_FP_CONTRACT")
    fused = ad.jit(correlation)
    np.testing.assert_allclose(fused(w, x), correlation(w, x), rtol=1e-14, atol=1e-15)
    assert "fastmath={'contract'}" in fused.source


@pytest.mark.parametrize("case", ["strided", "empty-kernel"])
def test_arguments_the_one_pass_cannot_take(case, batch):
    w, x, y = batch
    if case == "strided":  # a transposed batch: not C-contiguous
        x = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
        y = np.ascontiguousarray(y.transpose(0, 2, 1)).transpose(0, 2, 1)
    compiled = ad.jit(ad.grad(conv_batch))
    if case == "empty-kernel":
        w = np.zeros((0, 2))
        y = np.zeros((3, 10, 7))
    with np.errstate(invalid="ignore", divide="ignore"):
        got = compiled(w, x, y)
        want = ad.grad(conv_batch)(w, x, y)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_input_gradient_of_strided_images_takes_the_loops():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((2, 2)) / 2
    x = np.ascontiguousarray(rng.standard_normal((7, 6)).T)[:, ::1].T  # (6, 7), F order
    compiled = ad.jit(ad.grad(conv_image, argnums=(0, 1)))
    got = compiled(w, x)
    for g, want in zip(got, ad.grad(conv_image, argnums=(0, 1))(w, x)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-13)


def test_windows_that_do_not_fit_raise_as_numpy_does(batch):
    """A window length larger than what is left of x: NumPy clips the slice and the shapes
    then disagree; the compiled helper runs the loops as written and raises too."""
    w, x, _ = batch

    def too_long(w, x):
        out = np.zeros((x.shape[0], x.shape[1], x.shape[2]))
        for a in range(w.shape[0]):
            for b in range(w.shape[1]):
                out = out + w[a, b] * x[:, a:a + x.shape[1], b:b + x.shape[2]]
        return np.sum(out)
    with pytest.raises(ValueError):
        too_long(w, x)
    compiled = ad.jit(too_long)
    with pytest.raises(ValueError):
        compiled(w, x)
    assert "window_accumulate(" in compiled.source


# ---------------------------------------------------------------- the rewrite itself
def _rewrite(text):
    fn = gast.parse(text).body[0]
    used = rewrite_window_nests(fn, {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)})
    return unparse(fn), used


def test_sums_in_either_order_and_written_with_np_sum():
    text, used = _rewrite('''
def f(g, x, h, l, w_bar):
    for a in range(3 - 1, -1, -1):
        for b in range(0, 2):
            w_bar[a, b] += np.sum(x[a:a + h, b:b + l] * g)
    return w_bar
''')
    assert used == {"window_products"}
    assert "taps = window_products(g, x, h, l, 3, 2)" in text
    assert "w_bar[a, b] += taps[a, b]" in text


@pytest.mark.parametrize("text", [
    # a descending accumulation would sum in another order
    "def f(o, w, x, h, l):\n    for a in range(2 - 1, -1, -1):\n        for b in range(2):\n"
    "            o = o + w[a, b] * x[a:a + h, b:b + l]\n    return o\n",
    # the window's length depends on the counter
    "def f(o, w, x, h, l):\n    for a in range(2):\n        for b in range(2):\n"
    "            o = o + w[a, b] * x[a:a + a, b:b + l]\n    return o\n",
    # the tap is not w[a, b]
    "def f(o, w, x, h, l):\n    for a in range(2):\n        for b in range(2):\n"
    "            o = o + w[b, a] * x[a:a + h, b:b + l]\n    return o\n",
    # a second statement in the nest
    "def f(o, w, x, h, l):\n    for a in range(2):\n        for b in range(2):\n"
    "            o = o + w[a, b] * x[a:a + h, b:b + l]\n            h = h + 0\n    return o\n",
    # the array written is the one read
    "def f(o, w, h, l):\n    for a in range(2):\n        for b in range(2):\n"
    "            o = o + w[a, b] * o[a:a + h, b:b + l]\n    return o\n",
])
def test_nests_left_alone(text):
    rewritten, used = _rewrite(text)
    assert used == set() and rewritten.strip() == text.strip()


def test_a_module_compiled_by_hand_takes_the_loops_for_strided_arrays():
    """jit hands compiled code C-contiguous arrays; a module compiled by hand (as the command
    line writes it) may get any layout: the nests then run as written."""
    from codegen.dialect import lower_source, render
    source = '''\
import numpy as np


def f(w, x, g, ho, wo):
    out = np.zeros((x.shape[0], ho, wo))
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
    w_bar = np.zeros_like(w)
    x_bar = np.zeros_like(x)
    for a in range(w.shape[0] - 1, -1, -1):
        for b in range(w.shape[1] - 1, -1, -1):
            w_bar[a, b] += np.sum(g * x[:, a:a + ho, b:b + wo])
            x_bar[:, a:a + ho, b:b + wo] += g * w[a, b]
    return (out, w_bar, x_bar)
'''
    lowered = lower_source(source, entries=("f",), numba_overloads=True)
    text = render(lowered, decorator="numba.njit(error_model='numpy')")
    for helper in ("window_accumulate(", "window_products(", "window_scatter("):
        assert helper in text
    namespace = {}
    exec(compile("import numba\n" + text, "<windows>", "exec"), namespace)
    rng = np.random.default_rng(8)
    w = rng.standard_normal((3, 2))
    x = rng.standard_normal((4, 7, 6)).transpose(0, 2, 1)  # (4, 6, 7), not C-contiguous
    g = rng.standard_normal((4, 4, 6))
    for xs in (x, np.ascontiguousarray(x)):
        out, w_bar, x_bar = namespace["f"](w, xs, g, 4, 6)
        np.testing.assert_allclose(out, correlation(w, xs), rtol=1e-12)
        np.testing.assert_allclose(w_bar, [[np.sum(g * xs[:, a:a + 4, b:b + 6]) for b in range(2)]
                                           for a in range(3)], rtol=1e-12)
        want = np.zeros_like(xs)
        for a in range(3):
            for b in range(2):
                want[:, a:a + 4, b:b + 6] += g * w[a, b]
        np.testing.assert_allclose(x_bar, want, rtol=1e-12)
