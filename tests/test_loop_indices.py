"""Loops whose lowest index LLVM cannot see get ``j = index_at_least(j, lo)`` under jit
(codegen/loop_indices.py), so that they vectorize. What is checked here: which loops get it,
that the compiled functions compute what NumPy computes (negative indices still wrap around),
and that gradients through such loops match finite differences."""

from __future__ import annotations

import gast
import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit
from autodiff_ast.templates import unparse
from codegen.loop_indices import assume_loop_starts

X = np.linspace(-1.0, 2.0, 11) ** 2 + 0.5


def from_two(x):
    n = x.shape[0]
    y = np.zeros(n)
    for j in range(2, n):
        y[j] = x[j] * x[j - 1] + x[j - 2]
    return np.sum(y * y)


def backwards(x):
    n = x.shape[0]
    y = np.zeros(n)
    for j in range(n - 1, 0, -1):
        y[j] = np.sin(x[j]) * x[j - 1]
    return np.sum(y * y)


def wraps_around(x):
    """x[j - 3] at j = 2 is x[-1]: the assumption j >= 2 must not drop the wraparound."""
    n = x.shape[0]
    y = np.zeros(n)
    for j in range(2, n, 2):
        y[j] = x[j] * x[j - 3]
    return np.sum(y)


def run_time_start(x, k):
    n = x.shape[0]
    total = 0.0
    for j in range(k, n):
        total = total + x[j] * x[j - k]
    return total


@pytest.mark.parametrize("fn", [from_two, backwards, wraps_around])
def test_compiled_loops_compute_what_numpy_computes(fn):
    compiled = jit(fn)
    assert compiled(X) == pytest.approx(fn(X), rel=1e-14)
    assert "index_at_least(j, " in compiled.source, compiled.source


@pytest.mark.parametrize("fn", [from_two, backwards, wraps_around])
def test_gradients_through_them_match_finite_differences(fn):
    ad.check_grads(fn, (X,), modes=("rev",))
    np.testing.assert_allclose(jit(ad.grad(fn))(X), ad.grad(fn)(X), rtol=1e-13)


def test_a_run_time_start_is_left_alone():
    compiled = jit(run_time_start)
    assert compiled(X, 3) == pytest.approx(run_time_start(X, 3), rel=1e-14)
    assert "index_at_least" not in compiled.source


def _marked(text):
    fn = gast.parse(text).body[0]
    assume_loop_starts(fn)
    return unparse(fn)


@pytest.mark.parametrize("header, lo", [
    ("range(2, n)", 2), ("range(5, n, 3)", 5), ("range(n - 1, -1, -1)", 0),
    ("range(n - 1, 3, -2)", 4)])
def test_which_loops_get_the_line(header, lo):
    text = _marked(f"def f(x, n):\n    for j in {header}:\n        x[j] = 0.0\n")
    assert f"j = index_at_least(j, {lo})" in text


@pytest.mark.parametrize("header", [
    "range(n)", "range(1, n)", "range(k, n)", "range(n - 1, k, -1)", "range(-3, n)",
    "range(n - 1, -2, -1)", "range(2, n, s)"])
def test_which_loops_do_not(header):
    text = _marked(f"def f(x, n, k, s):\n    for j in {header}:\n        x[j] = 0.0\n")
    assert "index_at_least" not in text


def test_only_the_innermost_loop_gets_it():
    text = _marked("def f(x, n):\n    for i in range(2, n):\n        for j in range(2, n):\n"
                   "            x[i, j] = 0.0\n")
    assert text.count("index_at_least") == 1
    assert "j = index_at_least(j, 2)" in text
