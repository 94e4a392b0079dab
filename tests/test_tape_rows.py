"""A tape's rows read in place under jit (codegen/tape_rows.py).

Each compiled gradient is checked against the plain-NumPy gradient and central differences
(test_vector_loops._grads_agree); the generated source is checked to show the rows became
row numbers (a test cannot pass through code that was never rewritten). The rewrite rules are
checked on small functions, including the ones it must leave alone.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_loop_tapes import centered_quadratics  # a vector made in each step
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.tape_rows import read_rows_in_place

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def _rewrite(text):
    fn = gast.parse(text).body[0]
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    names = read_rows_in_place(fn, taken)
    return unparse(fn), names


_FORM = '''
def f(x, n):
    t_tape = np.empty((n, 3), dtype=np.float64)
    t = {placeholder}
    t_before_loop = t
    for i in range(n):
        t = t_tape[i]
        t[0] = x[i]
        {extra}
    for i in range(n - 1, -1, -1):
        y = t[0]
        t = t_tape[i - 1] if i > 0 else t_before_loop
    return y
'''


def test_rows_become_row_numbers_and_views_only_where_needed():
    text, names = _rewrite(_FORM.format(placeholder="np.zeros((0,))",
                                        extra="s = np.max(t) + t.size\n        t[:] = 0.0"))
    assert names == ["t"]
    assert "t_row = i\n" in text and "t_row = i - 1\n" in text
    assert "t_tape[t_row, 0] = x[i]" in text and "y = t_tape[t_row, 0]" in text
    # after the step's binding the row is bound: no choice
    assert "s = np.max(t_tape[t_row]) + t_tape.shape[1]" in text
    assert "t_tape[t_row, :] = 0.0" in text
    # after each loop (it may not have run) the name is the row or the placeholder
    assert text.count("t = t_tape[t_row] if t_row >= 0 else t_before_loop") == 2


_UNBOUND = '''
def f(x, n, k):
    t_tape = np.empty((n * k, 3), dtype=np.float64)
    t = np.zeros((0,))
    t_before_loop = t
    for i in range(n):
        a = np.max(t)
        for c in range(k):
            b = np.max(t)
            t = t_tape[i * k + c]
            t[0] = x[i]
            if x[i] > 0:
                e = np.max(t)
            for j in range(3):
                g = t.size
        h = np.max(t)
    for i in range(n - 1, -1, -1):
        p = np.max(t)
        for c in range(k - 1, -1, -1):
            q = np.max(t)
            t = t_tape[i * k + c - 1] if i * k + c > 0 else t_before_loop
            r = np.max(t)
        u = np.max(t)
    return t
'''


def test_the_row_keeps_its_choice_where_it_may_be_unbound():
    text, names = _rewrite(_UNBOUND)
    assert names == ["t"]
    choice = "np.max(t_tape[t_row] if t_row >= 0 else t_before_loop)"
    for use in "abhpru":  # before the first binding, around an inner loop that may not
        assert f"{use} = {choice}" in text, (use, text)  # run, after the restore
    for use in "eq":  # after the binding (in a branch too); a backward step before its restore
        assert f"{use} = np.max(t_tape[t_row])" in text, (use, text)
    assert "g = t_tape.shape[1]\n" in text, text  # a loop inside the step


@pytest.mark.parametrize("placeholder, extra", [
    ("x[:3]", "pass"),  # the value before the loop may be read: not a zero-size placeholder
    ("np.zeros((0,))", "t = x[:3]"),  # bound to something else in the loop
    ("np.zeros((0,))", "g = lambda: t"),  # a nested scope
    ("np.zeros((0,))", "for t in x:\n            pass"),  # a loop's target
])
def test_names_left_alone(placeholder, extra):
    text, names = _rewrite(_FORM.format(placeholder=placeholder, extra=extra))
    assert names == [] and "t_row" not in text


_RESET = """if t_bar.shape[0] == (t.shape[0] if t.size else t_bar.shape[0]):
            t_bar[:] = 0
        else:
            t_bar = np.zeros_like(t) if t.size else np.zeros_like(t_bar)"""


def test_the_reset_of_a_rows_adjoint_zeroes_it_in_place():
    # buffer_reuse's reset after a step: with every row of the tape's length, the test always
    # holds, and the rebinding it guarded is gone (no second array value in the loop)
    form = _FORM.replace("        y = t[0]\n", "        y = t[0]\n        " + _RESET + "\n")
    text, names = _rewrite(form.format(placeholder="np.zeros((0,))", extra="pass"))
    assert names == ["t"]
    assert "        t_bar[:] = 0\n" in text and "np.zeros_like" not in text, text
    assert "if t_bar" not in text, text
    # the same statement for another name, or changed, stays as written
    other = form.replace("np.zeros_like(t) if", "np.zeros_like(t) + 1 if")
    text, _ = _rewrite(other.format(placeholder="np.zeros((0,))", extra="pass"))
    assert "if t_bar.shape[0] == (" in text and "else:" in text, text


def test_a_tape_of_three_axes_is_left_alone():
    text, names = _rewrite(_FORM.format(placeholder="np.zeros((0,))", extra="pass").replace(
        "np.empty((n, 3), dtype=np.float64)", "np.empty((n, 3, 2), dtype=np.float64)"))
    assert names == []


def test_a_mixture_gradient_reads_its_tape_rows_in_place():
    rng = np.random.default_rng(7)
    n, k, d = 6, 3, 4
    args = (rng.standard_normal((k, d)), rng.standard_normal((k, d, d)) * 0.5,
            rng.standard_normal((n, d)))
    compiled = _grads_agree(centered_quadratics, args, (0, 1, 2))
    source = compiled.source
    assert "xc_row = " in source, source
    body = source.split("def grad_centered_quadratics")[1]
    assert "xc = xc_tape[xc_row] if xc_row >= 0 else xc_before_loop" in body  # after loops
    assert "xc = xc_tape[i" not in body  # no view per step


def stepped_rows(w, x):
    """A row made in each step, read after the loop and through a helper in the loop."""
    n = x.shape[0]
    acc = 0.0
    for i in range(n):
        h = np.tanh(x[i] * w)
        acc = acc + np.max(h) + np.sum(h * h)
    return acc + np.sum(h)


def test_rows_read_after_the_loop_and_through_calls():
    rng = np.random.default_rng(8)
    args = (rng.standard_normal(5), rng.standard_normal((4, 5)))
    compiled = _grads_agree(stepped_rows, args, (0, 1))
    assert compiled is not None
