"""Reduction loops outlined into functions compiled with reassociation
(codegen/reduction_loops.py).

The rewrite rules are checked on small functions, including the loops the pass must leave
alone; compiled gradients are checked against the plain-NumPy gradient and central
differences (test_vector_loops._grads_agree), and the generated source is checked to show the
rewrite happened.
"""

from __future__ import annotations

import gast
import numba
import numpy as np
import pytest
from test_loop_adjoints import heat  # per-element in-place stencil steps
from test_loop_adjoints import pair_energy as pairs_2d  # a pair potential in 2-D
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.reduction_loops import outline_reductions

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def _outlined(text):
    fn = gast.parse(text).body[0]
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    sources, options = {}, {}
    names = outline_reductions(fn, taken, sources, options)
    return unparse(fn), names, sources, options


# ---------------------------------------------------------------- reduction loops
def test_two_accumulators_and_a_difference():
    text, names, sources, options = _outlined('''
def f(x, y):
    a = 0.0
    b = 0.0
    for i in range(x.shape[0]):
        t = x[i] * y[i]
        a = a + t * t
        b -= t
    return (a, b)
''')
    assert names == ["sum_loop"] and options == {"sum_loop": "fastmath={'reassoc'}"}
    assert "a_part, b_part = sum_loop(x, y)" in text
    assert "a = a + a_part" in text and "b = b + b_part" in text
    assert "total_2 = total_2 - t" in sources["sum_loop"]


def test_two_accumulators_in_a_function_that_has_a_total_already():
    """Regression (jit fuzzer): both sums were named total_2 when `total` was taken."""
    _, names, sources, _ = _outlined('''
def f(x, y):
    total = np.sum(x)
    a = 0.0
    b = 0.0
    for i in range(x.shape[0]):
        a = a + x[i]
        b = b + y[i] * total
    return (a, b)
''')
    assert names == ["sum_loop"]
    text = sources["sum_loop"]
    assert "total_2 = total_2 + x[i]" in text and "total_3 = total_3 + y[i] * total" in text
    namespace = {"np": np}
    exec(compile(text, "<sum_loop>", "exec"), namespace)
    x, y = np.arange(4.0), np.ones(4)
    assert "def sum_loop(x, total, y):" in text
    assert namespace["sum_loop"](x, 2.0, y) == (6.0, 8.0)


@pytest.mark.parametrize("text", [
    # an integer count, an array: they stay as written (the helper sums floats from 0.0)
    "def f(x):\n    c = 0\n    for i in range(3):\n        c = c + 1\n    return c\n",
    "def f(x):\n    s = np.zeros(3)\n    for i in range(4):\n        s = s + x[i]\n    return s\n",
    # the accumulator read in the body, a value carried from the step before
    "def f(x):\n    s = 0.0\n    for i in range(4):\n        y = s * 2.0\n        s = s + x[i]\n"
    "    return s\n",
    "def f(x):\n    s = 0.0\n    t = 1.0\n    for i in range(4):\n        s = s + t\n"
    "        t = x[i]\n    return s\n",
    # a temporary or the index read after the loop
    "def f(x):\n    s = 0.0\n    for i in range(4):\n        t = x[i]\n        s = s + t\n"
    "    return s + t\n",
    "def f(x):\n    s = 0.0\n    for i in range(4):\n        s = s + x[i]\n    return s + i\n",
    # a branch inside
    "def f(x):\n    s = 0.0\n    for i in range(4):\n        if x[i] > 0:\n"
    "            s = s + x[i]\n    return s\n",
])
def test_reduction_loops_left_alone(text):
    rewritten, names, _, _ = _outlined(text)
    assert names == [] and rewritten.strip() == text.strip()


def test_a_temporary_bound_again_before_its_next_read_and_a_restored_accumulator():
    """The backward sweep's shape: the step temporary recomputed in another loop before it
    is read there, the accumulator restored from a float tape."""
    text, names, _, _ = _outlined('''
def f(x, n):
    sq_tape = np.empty(n, dtype=np.float64)
    sq = 0.0
    for i in range(n):
        sq_tape[i] = sq
        sq = 0.0
        for j in range(3):
            diff = x[i, j] - 1.0
            sq = sq + diff * diff
    g = 0.0
    for i in range(n - 1, -1, -1):
        for j in range(3):
            diff = x[i, j] - 1.0
            g = g + diff * sq
        sq = sq_tape[i]
    return g
''')
    assert names == ["sum_loop", "sum_loop_2"], text


@pytest.mark.parametrize("read", [
    # read in a later step of a loop holding the outlined one, before it is bound again
    "    for i in range(n):\n        y = diff * 2.0\n        for j in range(3):\n"
    "            diff = x[i, j]\n            s = s + diff\n",
    # bound before the outlined loop, read after it
    "    diff = 0.0\n    for j in range(3):\n        diff = x[0, j]\n        s = s + diff\n"
    "    y = diff * 2.0\n",
])
def test_a_temporary_whose_last_value_may_be_read_stays(read):
    text = "def f(x, n):\n    s = 0.0\n    y = 0.0\n" + read + "    return s + y\n"
    _, names, _, _ = _outlined(text)
    assert names == []


def test_an_integer_tape_is_no_float():
    _, names, _, _ = _outlined('''
def f(x, n):
    c_tape = np.empty(n, dtype=np.int64)
    c = 0.0
    for j in range(3):
        c = c + x[j]
    c = c_tape[0]
    return c
''')
    assert names == []


def test_only_the_inner_loop_of_a_nest_is_outlined():
    text, names, sources, _ = _outlined(
        "def f(x):\n    s = 0.0\n    for i in range(4):\n        for j in range(2):\n"
        "            s = s + x[i] * j\n    return s\n")
    assert names == ["sum_loop"] and "for i in range(4):\n        s = s + sum_loop(x, i)" in text
    assert "for j in range(2):" in sources["sum_loop"]


# ---------------------------------------------------------------- compiled gradients
def test_heat_gradient_sums_its_coefficient_outlined_and_right():
    u0 = np.sin(np.linspace(0.0, np.pi, 40)) + 0.1 * np.cos(np.linspace(0.0, 9.0, 40))
    compiled = _grads_agree(heat, (u0, 0.2, 12), (0, 1))
    assert "c_bar = c_bar + sum_loop(" in compiled.source, compiled.source
    assert "'reassoc'}" in compiled.source  # (with 'contract' unless turned off)


def pair_energy(pos, eps):
    """A double loop over pairs summing an energy (Lennard-Jones' shape)."""
    n = pos.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d = pos[i] - pos[j]
            r2 = d * d + 0.5
            total = total + eps / (r2 * r2) - eps / r2
    return total


def test_a_double_loop_of_pairs():
    rng = np.random.default_rng(9)
    compiled = _grads_agree(pair_energy, (rng.standard_normal(9), 0.7), (0, 1))
    primal = ad.jit(pair_energy)
    args = (rng.standard_normal(9), 0.7)
    assert primal(*args) == pytest.approx(pair_energy(*args), rel=1e-12)
    assert compiled is not None


# ---------------------------------------------------------------- sums into locals of a row
PAIR_SUMS = '''
def f(pos, g, n):
    for i in {outer}:
        g_i_1 = zero_entry(g, (i, 1))
        g_i_0 = zero_entry(g, (i, 0))
        {between}
        for j in range({start}, n):
            d0 = pos[i, 0] - pos[j, 0]
            d1 = pos[i, 1] - pos[j, 1]
            g[j, 0] += -d0
            g_i_0 += d0
            g[j, 1] += -d1
            g_i_1 += d1
        g[i, 0] += g_i_0
        g[i, 1] += g_i_1
    return g
'''


def test_sums_into_zero_entry_locals_are_outlined():
    """sum_invariant_updates' locals (``g_i_0 = zero_entry(g, (i, 0))``) start the outlined
    sums; the index is known to be at least 1; rows of two entries get a branch of their own."""
    text, names, sources, _ = _outlined(PAIR_SUMS.format(
        outer="range(n - 1, -1, -1)", between="pass", start="i + 1"))
    assert names == ["sum_loop"]
    assert "g_i_0_part, g_i_1_part = sum_loop(n, i, pos, g)" in text
    assert "g_i_0 = g_i_0 + g_i_0_part" in text
    source = sources["sum_loop"]
    assert "total = zero_entry(g, (i, 0))" in source and "total_2 = zero_entry(g, (i, 1))" in source
    assert "total += d0" in source and "g[j, 0] += -d0" in source
    assert source.count("j = index_at_least(j, 1)") == 2
    assert "if g.shape[1] == 2 and pos.shape[1] == 2:" in source and "else:" in source


@pytest.mark.parametrize("between,outer", [
    ("i = i + 1", "range(n)"),            # the start's name bound again after the local
    ("g = g.copy()", "range(n)"),         # the array too
])
def test_a_zero_entry_whose_names_change_before_the_loop_stays(between, outer):
    _, names, _, _ = _outlined(PAIR_SUMS.format(outer=outer, between=between, start="i + 1"))
    assert names == []


@pytest.mark.parametrize("outer,start,hint", [
    ("range(n)", "i + 1", 1), ("range(n - 1, -1, -1)", "i", 0), ("range(2, n)", "i - 1", 1),
    ("range(n)", "i - 1", None),          # may be -1
    ("range(n)", "1", None),              # LLVM sees a start of 0 or 1 itself
    ("range(n)", "3", 3),
    ("range(m, n)", "i + 1", None),       # the outer start is not known
    ("range(*bounds)", "i + 1", None),    # nor here (range(-3, n), say)
])
def test_the_index_hint_of_an_outlined_loop(outer, start, hint):
    _, names, sources, _ = _outlined(PAIR_SUMS.format(outer=outer, between="pass",
                                                      start=start))
    assert names == ["sum_loop"]
    if hint is None:
        assert "index_at_least" not in sources["sum_loop"]
    else:
        assert f"j = index_at_least(j, {hint})" in sources["sum_loop"]


def test_an_outer_index_bound_in_its_loop_gives_no_hint():
    text = PAIR_SUMS.format(outer="range(n)", between="pass", start="i + 1").replace(
        "        g[i, 0] += g_i_0", "        g[i, 0] += g_i_0\n        i = n - 3")
    _, names, sources, _ = _outlined(text)
    assert names == ["sum_loop"] and "index_at_least" not in sources["sum_loop"]


def pairs_and_anchor(pos, sigma):
    """pairs_2d plus a small term of the first column: pos is read by slices too, so the inner
    loop reads its rows as written (not from a column copy: codegen/column_layout.py)."""
    n = pos.shape[0]
    energy = 0.001 * np.sum(pos[:, 0] ** 2)
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            s6 = (sigma * sigma / r2) ** 3
            energy = energy + (s6 * s6 - s6)
    return energy


@pytest.mark.parametrize("columns", [2, 3])  # rows of 2 take the vectorized branch, 3 the other
def test_a_pair_potential_on_rows_of_either_length(columns):
    rng = np.random.default_rng(11)
    grid = np.array([[a, b] for a in range(5) for b in range(4)], float)
    pos = np.hstack([1.3 * grid[:17], np.ones((17, columns - 2))])
    pos[:, :2] += 0.05 * rng.standard_normal((17, 2))
    compiled = _grads_agree(pairs_and_anchor, (pos, 1.0), (0, 1))
    assert "pos.shape[1] == 2" in compiled.source
    assert "index_at_least(j, 1)" in compiled.source
    compiled = _grads_agree(pairs_2d, (pos, 1.0), (0, 1))  # (the entry's own: by columns)
    assert "columns_of(pos, (0, 1))" in compiled.source
    assert "index_at_least(j, 1)" in compiled.source


ROW_SUM = '''
def f(x, g, n):
    for i in range(n):
        g_i = zero_entry(g, i)
        for j in range(i + 1, n):
            g_i += x[j] * 2.0
        g[i] += g_i
    return g
'''


def test_a_row_summed_in_a_local_is_summed_in_place():
    """A local that zero_entry makes a row (g a matrix) is summed with ``+=`` in the outlined
    function, in place, and the function runs under Numba for rows and for numbers."""
    from codegen.invariant_accumulators import ACCUMULATOR_HELPERS
    from codegen.loop_indices import INDEX_HELPERS
    text, names, sources, _ = _outlined(ROW_SUM)
    assert names == ["sum_loop"] and "total += x[j] * 2.0" in sources["sum_loop"]
    namespace = {"np": np, "numba": numba}
    for source in [*ACCUMULATOR_HELPERS.values(), *INDEX_HELPERS.values(), text,
                   sources["sum_loop"]]:
        exec(compile(source, "<outlined>", "exec"), namespace)
    namespace["sum_loop"] = numba.njit(namespace["sum_loop"])
    compiled = numba.njit(namespace["f"])
    rng = np.random.default_rng(12)
    for x in (rng.standard_normal((6, 4)), rng.standard_normal(6)):
        g0 = rng.standard_normal(x.shape)
        want = g0 + 2.0 * np.array([x[i + 1:].sum(axis=0) for i in range(6)])
        np.testing.assert_allclose(compiled(x, g0.copy(), 6), want, rtol=1e-12)


def test_a_difference_subtracted_keeps_its_parentheses():
    """Regression (jit fuzzer, a wrong gradient): ``s = s - (a - b)`` was written into the
    outlined loop as text, ``total = total - a - b``."""
    _, _, sources, _ = _outlined('''
def f(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s = s - (x[i] - y[i] * 2.0)
    return s
''')
    assert "total = total - (x[i] - y[i] * 2.0)" in sources["sum_loop"], sources["sum_loop"]

