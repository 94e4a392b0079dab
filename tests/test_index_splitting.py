"""Loops whose branches test the index against the ends: head, branch-free interior, tail
(codegen/index_splitting.py).

Three kinds of check. At the loop level, a loop and its split run in plain Python on the same
random arrays for every short length (empty ranges, head and tail meeting or overlapping the
interior's ends) and must fill the same arrays to the last bit. At the gradient level, stencils
other than the heat equation (other offsets, two arrays, a coefficient array, fixed boundary
values, a descending loop) are differentiated under jit and compared with the plain NumPy
gradient and with central differences, at lengths where the split's parts are empty. And the
generated source is read: the heat gradient's gathering loop has a branch-free interior.
"""

from __future__ import annotations

import ast

import gast
import numpy as np
import pytest
from test_loop_adjoints import heat  # the benchmark's heat equation
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.index_splitting import MAX_STATEMENTS, split_index_ranges

pytestmark = [pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- loop level: same bits
LOOPS = {
    "gathering loop": """
for j in range(0, n):
    t = 0.0
    if j >= 2:
        t += x[j - 1] * c
    if j >= 1 and j < n - 1:
        g = x[j]
        t += -(g * c) * 2.0 + g
    if j < n - 2:
        t += x[j + 1] * c
    y[j] = t
""",
    "flipped and strict tests, else branches": """
for j in range(1, n + 1):
    if 3 < j:
        y[j - 1] = x[j - 4]
    else:
        y[j - 1] = -1.0
    if j <= n - 2 and w[j] > 0.0:
        y[j - 1] += x[j + 1]
    elif n - 1 > j:
        y[j - 1] -= 2.0
""",
    "lower bounds only, one argument range": """
for j in range(n):
    t = x[j]
    if j > 0:
        t = t + x[j - 1]
        if j >= 3:
            t = t * x[j - 3]
    y[j] = t
""",
    "bounds from shapes": """
for j in range(1, x.shape[0]):
    s = x[j]
    if j < x.shape[0] - 2:
        s += x[j + 2]
    if j >= 2:
        s += w[j - 2]
    y[j] = s
""",
    "tests the split cannot decide": """
for j in range(0, n):
    y[j] = x[j]
    if j >= m:
        y[j] += 1.0
    if j >= 1:
        y[j] += x[j - 1]
""",
}


def _run(source, n, m=2):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n + 2)
    w = rng.standard_normal(n + 2)
    y = np.zeros(n + 2)
    space = {"x": x, "w": w, "y": y, "n": n, "m": m, "c": 0.3, "np": np}
    exec(source, space)
    return y


def _split_source(source):
    fn = gast.parse("def f():\n" + "\n".join("    " + line for line in source.splitlines()))
    fn = fn.body[0]
    assert split_index_ranges(fn)
    return "\n".join(unparse(s) for s in fn.body)


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_the_split_runs_the_same_iterations(name):
    split = _split_source(LOOPS[name])
    assert split.count("for j in range(") >= 2, split
    for n in range(0, 9):
        np.testing.assert_array_equal(_run(split, n), _run(LOOPS[name], n), err_msg=split)


def test_the_interior_of_a_gathering_loop_has_no_branch():
    split = _split_source(LOOPS["gathering loop"])
    head, interior, tail = split.split("for j in range(")[1:]
    assert head.startswith("0, min(2, n)):") and "if j >= 2" not in head, split
    assert interior.startswith("2, n - 2):") and "if " not in interior, split
    assert tail.startswith("max(2, n - 2), n):") and "if j < n - 2" not in tail, split
    assert "if j < n - 1:" in tail, split  # (undecided there: n - 2 <= j)


def test_a_test_against_another_value_stays_in_every_part():
    split = _split_source(LOOPS["tests the split cannot decide"])
    assert split.count("if j >= m:") == 2, split  # head and interior (there is no tail)


@pytest.mark.parametrize("loop", [
    "for j in range(n):\n    if j >= m:\n        y[j] = 1.0",             # not an end's offset
    "for j in range(n - 1, 0, -1):\n    if j >= 2:\n        y[j] = 1.0",  # descending
    "for j in range(n):\n    if j >= 2:\n        n = n - 1",              # a bound changes
    "for j in range(n):\n    if j >= 2:\n        j = 0",                  # the index changes
    "for j in range(n):\n    for k in range(2):\n        if j >= 2:\n            y[j] = 1.0",
    "for j in range(n):\n    if j >= 2:\n        break",
    "for j in range(n):\n    if x[j] >= 2:\n        y[j] = 1.0",          # not the index
    "for j in range(n):\n    if j >= 2:\n        y[j] = 1.0\nelse:\n    pass",
    "for j in range(n):\n    if j >= 1:\n" + "        y[j] = 1.0\n" * MAX_STATEMENTS,
])
def test_loops_the_split_leaves_alone(loop):
    fn = gast.parse("def f():\n" + "\n".join("    " + line for line in loop.splitlines()))
    before = unparse(fn)
    assert not split_index_ranges(fn.body[0])
    assert unparse(fn) == before


# ---------------------------------------------------------------- gradients
def wide_stencil(u0, c, steps):
    """Offsets -2 and +1: the gathering loop's guards are not symmetric."""
    u = u0.copy()
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(2, n - 1):
            un[i] = u[i] + c * (u[i - 2] - 3.0 * u[i] + 2.0 * u[i + 1])
        u = un
    return np.sum(np.sin(u))


def two_arrays(a0, b0, c):
    """Two states, each step reading both at several offsets."""
    a = a0.copy()
    b = b0.copy()
    n = len(a)
    for _step in range(3):
        an = a.copy()
        bn = b.copy()
        for i in range(1, n - 1):
            an[i] = a[i] + c * (b[i - 1] - b[i + 1])
            bn[i] = b[i] * (1.0 - c) + c * a[i + 1] * a[i - 1]
        a = an
        b = bn
    return np.sum(a * a) + np.sum(b)


def variable_coefficient(u0, k):
    """A diffusion coefficient per point instead of one number."""
    u = u0.copy()
    n = len(u)
    for _step in range(4):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + k[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u * u)


def fixed_ends(u0, c, left, right):
    """Boundary values set in every step, the interior updated from them."""
    u = u0.copy()
    n = len(u)
    for _step in range(3):
        un = np.zeros(n)
        un[0] = left
        un[n - 1] = right * u[n - 2]
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(np.cos(u))


def _line(n, lo=-1.0, hi=1.0):
    return np.sin(np.linspace(lo, hi, n)) + 0.2


PROGRAMS = {
    "heat": (heat, lambda n: (_line(n), 0.2, 3), (0, 1)),
    "wide_stencil": (wide_stencil, lambda n: (_line(n), 0.15, 3), (0, 1)),
    "two_arrays": (two_arrays, lambda n: (_line(n), _line(n, 0.5, 2.0), 0.3), (0, 1, 2)),
    "variable_coefficient": (variable_coefficient,
                             lambda n: (_line(n), np.linspace(0.05, 0.25, n)), (0, 1)),
    "fixed_ends": (fixed_ends, lambda n: (_line(n), 0.2, 0.7, 1.3), (0, 1, 2, 3)),
}


@pytest.mark.numba
@pytest.mark.parametrize("n", [2, 3, 4, 5, 12])  # (n = 1: a size-one axis, its own signature)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_split_stencil_gradients(name, n):
    f, make, argnums = PROGRAMS[name]
    _grads_agree(f, make(n), argnums)


@pytest.mark.numba
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_gathering_loops_are_split(name):
    """Under jit, each stencil's gathering loop has a branch-free interior: a loop over j with
    no `if` in it, beside a head or a tail that keeps the tests it cannot decide."""
    import autodiff_ast as ad
    f, make, argnums = PROGRAMS[name]
    compiled = ad.jit(ad.grad(f, argnums=argnums))
    compiled(*make(9))
    loops = [node for node in ast.walk(ast.parse(compiled.source))
             if isinstance(node, ast.For) and not any(isinstance(n, ast.For) for s in node.body
                                                      for n in ast.walk(s))]
    ranges = [ast.unparse(loop.iter) for loop in loops]
    branch_free = [r for r, loop in zip(ranges, loops)
                   if not any(isinstance(n, ast.If) for s in loop.body for n in ast.walk(s))]
    assert any("min(" in r or "max(" in r for r in ranges), compiled.source
    assert any("min(" not in r and "max(" not in r for r in branch_free), compiled.source


@pytest.mark.numba
def test_the_heat_gradient_reads_as_head_interior_tail():
    import autodiff_ast as ad
    compiled = ad.jit(ad.grad(heat, argnums=(0, 1)))
    compiled(_line(12), 0.2, 2)
    source = compiled.source
    assert "for j in range(0, min(2, n)):" in source, source
    assert "for j in range(max(2, n - 2), n):" in source, source
    # (the interior sums c_bar's terms too: outlined, codegen/loop_fusion.py)
    assert "c_bar = c_bar + sum_loop(" in source, source
    interior = source.split("for j in range(2, n - 2):\n", 1)[1].split("\n\n", 1)[0]
    assert "return total" in interior, source
    assert "j = index_at_least(j, 2)" in interior, source  # so that LLVM vectorizes it
    assert "if " not in interior, source
