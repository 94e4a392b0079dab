"""An element a loop adds into at every step, at an index the loop does not change, summed in a
local under jit (codegen/invariant_accumulators.py).

Compiled gradients of pair loops are compared with the plain-NumPy gradient and with central
differences (test_vector_loops._grads_agree); the generated source is checked to show the
locals; loops where another mention of the array might reach the element stay as written.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_loop_adjoints import pair_energy  # a pair potential in 2-D
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.invariant_accumulators import sum_invariant_updates

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- programs
def pairs_below(x):
    """Pairs j < i: the inner range ends at the outer index."""
    n = x.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(0, i):
            total = total + 0.7 * np.tanh(x[i] - x[j]) ** 2
    return total


def subtracting(x):
    """A user's own loop that subtracts into the element: `g[i] -= ...` summed in a local."""
    n = x.shape[0]
    g = np.zeros(n)
    for i in range(n):
        for j in range(i + 1, n):
            g[j] += x[i] * x[j]
            g[i] -= np.sin(x[j])
    return np.sum(g * g)


def _positions(n, seed=0):
    rng = np.random.default_rng(seed)
    grid = np.array([[a, b] for a in range(3) for b in range(3)], float)
    return 1.3 * grid[:n] + 0.1 * rng.standard_normal((n, 2))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("n", [1, 2, 6])
def test_a_pair_potential(n):
    _grads_agree(pair_energy, (_positions(n), 1.0), (0, 1))


def test_a_pair_potential_sums_in_locals():
    compiled = ad.jit(ad.grad(pair_energy))
    compiled(_positions(4), 1.0)
    source = compiled.source
    for axis, d in enumerate("xy"):  # (the inner loop sums them in a function of its own:
        assert f"pos_bar_i_{axis} = zero_entry(pos_bar, (i, {axis}))" in source  # reduction_loops)
        assert f"pos_bar_i_{axis} = pos_bar_i_{axis} + pos_bar_i_{axis}_part" in source
        assert f"+= d{d}_bar" in source
        assert f"pos_bar[i, {axis}] += pos_bar_i_{axis}" in source
    assert "if i + 1 < n:" in source


@pytest.mark.parametrize("n", [1, 3, 7])
def test_pairs_below_the_outer_index(n):
    x = np.linspace(-1.0, 1.2, n)
    compiled = _grads_agree(pairs_below, (x,), (0,))
    assert "x_bar_i" in compiled.source


def test_a_users_loop_that_subtracts():
    x = np.linspace(0.2, 1.4, 6)
    _grads_agree(subtracting, (x,), (0,))
    primal = ad.jit(subtracting)
    primal(x)
    assert "g_i = zero_entry(g, i)" in primal.source
    assert "-= np.sin(x[j])" in primal.source


# ---------------------------------------------------------------- the rewrite itself
PAIRS = '''
def f(x, n, h):
    g = np.zeros_like(x)
    for i in range(n):
        for j in {range}:
            d = x[i] - x[j]
            g[j] += -d
            g[{index}] += d
            {extra}
    return g
'''


def _rewrite(range_="range(i + 1, n)", index="i", extra="pass"):
    fn = gast.parse(PAIRS.format(range=range_, index=index, extra=extra)).body[0]
    changed = sum_invariant_updates(fn, {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)})
    return changed, unparse(fn)


def test_the_element_is_added_once_after_the_loop():
    changed, text = _rewrite()
    assert changed
    assert "g_i = zero_entry(g, i)\n        for j in range(i + 1, n):" in text
    assert "        if i + 1 < n:\n            g[i] += g_i" in text


def test_an_index_that_may_be_empty_is_guarded():
    changed, text = _rewrite(index="i + 1", range_="range(i + 2, n)")
    assert not changed  # (g[j] might be g[i + 1]: the range starts at i + 2, not i + 1 + k)
    changed, text = _rewrite(index="i", range_="range(i + 2, n)")
    assert changed and "if i + 2 < n:" in text


@pytest.mark.parametrize("kwargs", [
    dict(index="j"),                              # the index changes with the loop
    dict(range_="range(i, n)"),                   # g[j] is g[i] at the first step
    dict(range_="range(n)"),
    dict(extra="t = g[i]"),                       # the element read in the loop
    dict(extra="h = g"),                          # another name for the array
    dict(extra="g[j - 1] += d"),                  # g[j - 1] is g[i] at the first step
    dict(extra="n = n - 1"),                      # the range's end bound in the loop
    dict(extra="i = i + 1"),                      # the index bound in the loop
    dict(extra="return g"),
    dict(extra="k = lambda: g"),                  # a function that could hold the array
])
def test_loops_where_the_element_may_be_reached_stay(kwargs):
    changed, text = _rewrite(**kwargs)
    assert not changed and "g_i" not in text


def test_a_parameter_is_left_alone():
    fn = gast.parse(PAIRS.format(range="range(i + 1, n)", index="i", extra="pass")
                    .replace("    g = np.zeros_like(x)\n", "").replace("(x, n, h)", "(x, n, g)")
                    ).body[0]
    assert not sum_invariant_updates(fn, set())


def test_distinct_integer_positions():
    fn = gast.parse('''
def f(x, n):
    g = np.zeros((n, 2))
    for i in range(n):
        for j in range(n):
            g[i, 0] += x[j]
            g[j, 1] += x[i]
    return g
''').body[0]
    assert sum_invariant_updates(fn, set())
    assert "g_i_0 += x[j]" in unparse(fn)
