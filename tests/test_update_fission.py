"""Loops of independent in-place updates split into one loop per update
(codegen/update_fission.py).

At the loop level a loop and its split run in plain Python on the same arrays and must fill
them to the same bits; loops whose updates could see each other, or would read one array
twice, stay whole. At the gradient level a matrix-vector product in a loop (the GMM pattern)
is differentiated under jit, compared with the plain NumPy gradient and central differences,
and its generated source is read for the split loops.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.update_fission import split_independent_updates

pytestmark = [pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def add_at(a, i, v):
    a[i] += v


def subtract_at(a, i, v):
    a[i] -= v


SPLIT = '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    q_bar = np.zeros_like(q)
    w_bar = np.zeros(n)
    for r in range(rows):
        for k in range(n):
            add_at(x_bar, k, g * q[r, k])
            q_bar[r, k] += g * x[k]
            subtract_at(w_bar, k, g * g)
    return x_bar, q_bar, w_bar
'''

KEPT = {
    "an update reads another's array": '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    q_bar = np.zeros_like(q)
    for k in range(n):
        x_bar[k] += g * q[0, k]
        q_bar[0, k] += g * x_bar[k]
    return x_bar, q_bar
''',
    "two updates read one array": '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    q_bar = np.zeros_like(q)
    for k in range(n):
        x_bar[k] += g * q[0, k]
        q_bar[0, k] += q[1, k]
    return x_bar, q_bar
''',
    "one array updated twice": '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    for k in range(n):
        x_bar[k] += g * q[0, k]
        x_bar[k] -= q[1, k]
    return x_bar
''',
    "the written array is the caller's": '''
def f(q, x, g, n, rows):
    q_bar = np.zeros_like(q)
    for k in range(n):
        x[k] += g * q[0, k]
        q_bar[0, k] += g
    return x, q_bar
''',
    "the written array has a second name": '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    view = x_bar
    q_bar = np.zeros_like(q)
    for k in range(n):
        x_bar[k] += g * q[0, k]
        q_bar[0, k] += g * view[k]
    return x_bar, q_bar
''',
    "a statement that is no update": '''
def f(q, x, g, n, rows):
    x_bar = np.zeros_like(x)
    q_bar = np.zeros_like(q)
    for k in range(n):
        t = g * q[0, k]
        x_bar[k] += t
        q_bar[0, k] += g
    return x_bar, q_bar
''',
}


def _run(source, split):
    fn = gast.parse(source).body[0]
    count = split_independent_updates(fn) if split else 0
    space = {"np": np, "add_at": add_at, "subtract_at": subtract_at}
    exec(compile(gast.gast_to_ast(gast.Module(body=[fn], type_ignores=[])), "<f>", "exec"),
         space)
    rng = np.random.default_rng(3)
    q, x = rng.standard_normal((3, 7)), rng.standard_normal(7)
    out = space["f"](q, x, 0.7, 7, 3)
    return count, unparse(fn), [np.array(o, copy=True) for o in
                                (out if isinstance(out, tuple) else (out,))]


def test_independent_updates_are_split_and_fill_the_same_bits():
    count, text, got = _run(SPLIT, True)
    _, _, want = _run(SPLIT, False)
    assert count == 1
    assert text.count("for k in range(n):") == 3, text
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("case", sorted(KEPT))
def test_updates_that_may_see_each_other_stay_in_one_loop(case):
    count, text, got = _run(KEPT[case], True)
    _, _, want = _run(KEPT[case], False)
    assert count == 0, text
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def matvec_energy(qs, x):
    """A matrix-vector product per row and block, as ADBench's GMM writes it."""
    total = 0.0
    for i in range(x.shape[0]):
        for c in range(qs.shape[0]):
            v = np.dot(qs[c], x[i])
            total = total + np.sum(v * v)
    return total


def test_the_matvec_adjoint_is_split_and_agrees():
    rng = np.random.default_rng(0)
    qs, x = rng.standard_normal((3, 10, 10)) * 0.3, rng.standard_normal((4, 10))
    compiled = _grads_agree(matvec_energy, (qs, x), (0, 1))
    source = compiled.source
    loops = [node for node in gast.walk(gast.parse(source)) if isinstance(node, gast.For)]
    single = [unparse(loop.body[0]).strip() for loop in loops if len(loop.body) == 1]
    assert any(line.startswith("x_bar[") and "+=" in line for line in single), source
    assert any(line.startswith("qs_bar[") and "+=" in line for line in single), source
