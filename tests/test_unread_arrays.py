"""Writes into arrays whose entries nothing reads are dropped from generated code
(autodiff_ast/unread_arrays.py): the gradient of a loop filling an array that only a sum reads
does not fill it. Every gradient is checked against finite differences; the sources are
checked for the work that went (or stayed)."""

from __future__ import annotations

import numpy as np
import pytest
from test_loop_indices import from_two

import autodiff_ast as ad
from autodiff_ast.jit import jit

X = np.array([0.3, -1.2, 0.8, 2.1, -0.4])
Y = np.array([1.5, 0.2, -0.7, 0.9, 1.1])


def filled(x, y):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * y[i] + x[i] * x[i]
    return np.sum(out)


def filled_and_read(x, y):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * y[i]
    return np.sum(out) * out[0]


def squares(v):
    return np.sum(v * v)


def filled_and_passed_on(x, y):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * y[i]
    return squares(out)


def filled_and_printed(x, y):
    n = x.shape[0]
    out = np.empty_like(x)
    for i in range(n):
        out[i] = np.exp(x[i]) * y[i]
        print("step", i)
    return np.sum(out)


def test_grad_does_not_fill_an_array_only_a_sum_reads():
    g = ad.grad(filled)
    ad.check_grads(filled, (X, Y), modes=("rev",))
    np.testing.assert_allclose(g(X, Y), np.cos(X) * Y + 2 * X, rtol=1e-14)
    assert "np.sin(" not in g.source, g.source  # the forward loop's values: not computed
    assert "np.cos(" in g.source


def test_jit_grad_matches_and_does_not_fill_it():
    g = jit(ad.grad(filled))
    np.testing.assert_allclose(g(X, Y), np.cos(X) * Y + 2 * X, rtol=1e-14)
    assert "np.sin(" not in g.source, g.source


def test_value_and_grad_still_fills_it():
    g = ad.value_and_grad(filled)
    value, grad = g(X, Y)
    assert value == pytest.approx(filled(X, Y), rel=1e-15)
    np.testing.assert_allclose(grad, np.cos(X) * Y + 2 * X, rtol=1e-14)
    assert "np.sin(" in g.source


@pytest.mark.parametrize("fn", [filled_and_read, filled_and_passed_on],
                         ids=["entry read", "passed to a helper"])
def test_an_array_read_is_kept(fn):
    g = ad.grad(fn, argnums=(0, 1))
    ad.check_grads(fn, (X, Y), modes=("rev",))
    gx, gy = g(X, Y)
    assert "np.sin(" in g.source, g.source
    h = 1e-6
    for k in range(len(X)):
        e = np.zeros_like(X)
        e[k] = h
        assert gx[k] == pytest.approx((fn(X + e, Y) - fn(X - e, Y)) / (2 * h), rel=1e-6,
                                      abs=1e-8)


def test_prints_next_to_dropped_writes_stay(capfd):
    g = ad.grad(filled_and_printed)
    np.testing.assert_allclose(g(X, Y), np.exp(X) * Y, rtol=1e-14)
    assert capfd.readouterr().out == "".join(f"step {i}\n" for i in range(len(X)))


def test_an_adjoint_zeroed_after_its_last_read_is_not_zeroed():
    g = ad.grad(from_two)
    ad.check_grads(from_two, (X,), modes=("rev",))
    g(X)
    assert "y_bar[j] = 0.0" not in g.source, g.source


def _after(text, keep):
    import gast

    from autodiff_ast.templates import unparse
    from autodiff_ast.unread_arrays import drop_unread_arrays
    block, _ = drop_unread_arrays(gast.parse(text).body, keep=keep)
    return "\n".join(unparse(s) for s in block)


def test_a_zeroing_loop_read_afterwards_stays():
    text = "a = 2.0 * y\nfor j in range(n):\n    a[j] = 0.0\n"
    assert "a[j] = 0.0" in _after(text + "b = a[0]\n", keep={"b"})
    assert "a[j] = 0.0" in _after(text, keep={"a"})
    assert "a[j] = 0.0" not in _after(text + "b = a.shape\n", keep={"b"})
    assert "for j in range(n)" in _after(text + "b = j\n", keep={"b"})  # (its last index)


def test_a_zeroing_loop_of_an_alias_stays():
    text = ("a = y\nfor j in range(n):\n    a[j] = 0.0\n")
    assert "a[j] = 0.0" in _after(text, keep={"y"})


def noisy_square(v):
    print("square of", v)
    return v * v


def filled_by_a_printing_helper(x):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = noisy_square(x[i])
    return np.sum(out)


def test_a_write_of_a_helper_that_prints_keeps_the_call(capfd):
    """The writes into out go, but not the helper's calls: they print."""
    x = X[:3]
    filled_by_a_printing_helper(x)
    by_function = capfd.readouterr().out
    np.testing.assert_allclose(ad.grad(filled_by_a_printing_helper)(x), 2.0 * x, rtol=1e-14)
    assert capfd.readouterr().out == by_function


# ---------------------------------------------------------------- zeroing of taken adjoints
def pairs_then_weights(x, w):
    """Rows written from a helper's pair, then a vector, joined: the adjoint of the join is
    two views of the output's cotangent that the backward loop takes row by row (the
    structure of ADBench's bundle adjustment objective)."""
    n = x.shape[0]
    rows = np.zeros((n, 2))
    extra = np.zeros(n)
    for i in range(n):
        rows[i] = np.array([np.sin(x[i]) * w[i], x[i] * x[i]])
        extra[i] = 1.0 - w[i] * w[i]
    r = np.concatenate((np.ravel(rows), extra))
    return 0.5 * np.sum(r * r)


def test_taken_adjoints_are_neither_zeroed_nor_copied():
    from autodiff_ast.checks import check_grads
    g = ad.grad(pairs_then_weights, argnums=(0, 1))
    check_grads(pairs_then_weights, (X, Y), modes=("rev",))
    jg = jit(ad.grad(pairs_then_weights, argnums=(0, 1)))
    for got, want in zip(jg(X, Y), g(X, Y)):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    for source in (g.source, jg.source):
        assert "] = 0.0" not in source, source
    assert ".copy()" not in jg.source, jg.source  # (the rows read in place: no copy either)


def test_dead_zeroing_keeps_what_a_later_read_may_see():
    import gast

    from autodiff_ast.templates import unparse
    from autodiff_ast.unread_arrays import drop_dead_zeroing
    text = '''
a_bar = out_bar[:n]
b_bar = out_bar[n:]
c_bar = np.zeros((n, 2))
for i in range(n):
    s = store_index(m, 0, 2)
    g = a_bar[i, k]
    a_bar[i, k] = 0.0
    h = a_bar[i, s]
    b_bar[i] = 0.0
    c_bar[i, 0] = 0.0
    c_bar[i - 1, 1] = g
total = np.sum(b_bar)
'''
    block, changed = drop_dead_zeroing(gast.parse(text).body, keep={"total"})
    kept = "\n".join(unparse(s) for s in block)
    assert not changed
    assert "a_bar[i, k] = 0.0" in kept  # k may be s: the later read could see the zero
    assert "b_bar[i] = 0.0" in kept  # read after the loop
    assert "c_bar[i, 0] = 0.0" in kept  # another step writes c_bar[i - 1]


def _run_block(stmts, n=3):
    """Run a block of generated statements on fixed arrays; the cotangent's final values."""
    import ast as std_ast

    from autodiff_ast.templates import unparse
    text = "\n".join(unparse(s) for s in stmts)
    space = {"np": np, "n": n, "m": 2, "out_bar": np.arange(4.0 * n).reshape(2 * n, 2) + 1.0,
             "x_bar": np.zeros(n), "store_index": lambda m, c, k: c}
    exec(compile(std_ast.parse(text), "<block>", "exec"), space)
    return space["x_bar"]


DEAD_ZEROING_VIEWS = '''
a_bar = out_bar[:n]
b_bar = {other}
for i in range(n):
    s1 = store_index(m, 1, 2)
    g = a_bar[i, s1]
    a_bar[i, s1] = 0.0
    h = b_bar[i, s1]
    x_bar[i] += g + 10.0 * h
'''


@pytest.mark.parametrize("other", ["out_bar[:n]", "out_bar[0:]", "a_bar.reshape((n, 2))",
                                   "out_bar[:n].T.T", "out_bar[:n] if n > 0 else out_bar"])
def test_dead_zeroing_keeps_a_zero_another_view_reads(other):
    import gast

    from autodiff_ast.unread_arrays import drop_dead_zeroing
    stmts = gast.parse(DEAD_ZEROING_VIEWS.format(other=other)).body
    want = _run_block(stmts)
    block, changed = drop_dead_zeroing(stmts, keep={"x_bar"})
    assert not changed
    np.testing.assert_array_equal(_run_block(block), want)


def test_dead_zeroing_goes_beside_other_rows_of_the_same_array():
    import gast

    from autodiff_ast.unread_arrays import drop_dead_zeroing
    stmts = gast.parse(DEAD_ZEROING_VIEWS.format(other="out_bar[n:2 * n]")).body
    want = _run_block(stmts)
    block, changed = drop_dead_zeroing(stmts, keep={"x_bar"})
    assert changed
    np.testing.assert_array_equal(_run_block(block), want)


def test_dead_zeroing_sees_a_view_bound_in_an_earlier_loop():
    import gast

    from autodiff_ast.unread_arrays import drop_dead_zeroing
    text = DEAD_ZEROING_VIEWS.format(other="out_bar[:1]").replace(
        "b_bar = out_bar[:1]\n", "for r in range(1):\n    b_bar = out_bar[:n]\n")
    stmts = gast.parse(text).body
    want = _run_block(stmts)
    block, changed = drop_dead_zeroing(stmts, keep={"x_bar"})
    assert not changed
    np.testing.assert_array_equal(_run_block(block), want)
