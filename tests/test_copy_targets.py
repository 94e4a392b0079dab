"""A copy whose middle a loop then overwrites copies only the rest under jit
(codegen/copy_targets.py), and a stencil's state made each step is a row of a tape in the
gradient's forward sweep (reverse.py, _fresh_alias).

Compiled primals and gradients are compared with plain NumPy and with central differences
(test_vector_loops._grads_agree) at lengths where the overwritten range is empty or covers
everything; the helpers' Numba forms are compared with their plain forms on bounds outside
the array and on overlapping memory; statements the rewrite must leave alone stay.
"""

from __future__ import annotations

import gast
import numba
import numpy as np
import pytest
from test_loop_adjoints import heat  # the benchmark's heat equation
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast import check_grads
from autodiff_ast.templates import unparse
from codegen.copy_targets import COPY_HELPERS, copy_only_outside

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")


# ---------------------------------------------------------------- programs
def nonlinear_steps(u0, c):
    """A stencil step with a nonlinear term and the state read after the loop."""
    u = u0.copy()
    n = u.shape[0]
    for _step in range(4):
        un = np.copy(u)
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1]) - 0.1 * u[i] ** 2
        u = un
    return np.sum(u * u * u)


def state_from_zeros(u0, c):
    """Each step's state is a new vector of zeros filled by the loop."""
    u = u0.copy()
    n = u.shape[0]
    for _step in range(3):
        un = np.zeros(n)
        for i in range(n):
            un[i] = np.sin(c * u[i]) + u[(i + 1) % n]
        u = un
    return np.sum(u ** 2)


def state_also_rebound(u0, c):
    """The state is rebound in a branch too: a step may keep the value before."""
    u = u0.copy()
    n = u.shape[0]
    for step in range(3):
        un = np.copy(u)
        for i in range(1, n - 1):
            un[i] = u[i] * c + u[i + 1]
        u = un
        if step == 1:
            u = u * 0.5
    return np.sum(u * u)


def state_moved_before_the_copy(u0, c):
    """The state takes the vector before the step makes the next one: its value before the
    step is not the row the step before made."""
    un = u0.copy()
    n = un.shape[0]
    for _step in range(3):
        u = un
        un = np.copy(u)
        for i in range(1, n - 1):
            un[i] = u[i] * c + u[i - 1] * u[i]
    return np.sum(un * un)


def copy_of_another_array(u0, c):
    u = u0.copy()
    w = u0 * 0.5
    n = u.shape[0]
    for _step in range(3):
        un = np.copy(w)
        for i in range(1, n - 1):
            un[i] = u[i] * c + u[i + 1] * u[i]
        u = un
    return np.sum(u * u)


def new_state_read_next_step(u0, c):
    """The new vector is saved too (the next step reads it before making another): two tapes
    could take the one statement's array as their row; one does, the other stays a list."""
    u = u0.copy()
    n = u.shape[0]
    un = np.zeros(n)
    total = 0.0
    for _step in range(3):
        total = total + np.sum(np.sin(un) * u)
        un = np.zeros(n)
        for i in range(n):
            un[i] = np.sin(c * u[i])
        u = un
    return total + np.sum(u * u)


def _jit_grad_source(fn, *args):
    compiled = ad.jit(ad.grad(fn, argnums=(0, 1)))
    compiled(*args)
    return compiled.source


# ---------------------------------------------------------------- gradients
@pytest.mark.numba
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_heat_primal_and_gradient_at_short_lengths(n):
    u0 = np.cos(np.linspace(0.0, 2.0, n)) + 0.3
    _grads_agree(heat, (u0, 0.2, 3), (0, 1))


@pytest.mark.numba
@pytest.mark.parametrize("fn", [nonlinear_steps, state_from_zeros, state_also_rebound,
                                state_moved_before_the_copy, copy_of_another_array,
                                new_state_read_next_step])
def test_compiled_gradients_agree(fn):
    _grads_agree(fn, (np.sin(np.linspace(0.0, 2.5, 7)) + 0.4, 0.3), (0, 1))


@pytest.mark.numba
def test_the_heat_steps_are_rows_of_a_tape_filled_around_the_loop():
    """The benchmark's forward sweep: the state of each step is a row of one tape, copied
    only outside the entries the step writes (1,000 points x 500 steps: 669-686 -> 575-585 us;
    the primal 135 -> 115 us)."""
    source = _jit_grad_source(heat, np.linspace(0.0, 1.0, 12), 0.2, 2)
    # The compiled dialect spells float64 allocations without dtype= (allocation_spelling.py).
    assert "u_tape = np.empty((max(steps, 0), u.shape[0]))" in source \
        or "u_tape = np.empty((steps, u.shape[0]))" in source, source
    assert "un = u_tape[_step]" in source and \
        "copy_outside_into(un, u, 1, n - 1)" in source, source
    assert "u = u_tape[_step - 1] if _step > 0 else u_before_loop" in source, source
    assert "u_tape.append" not in source, source
    primal = ad.jit(heat)
    primal(np.linspace(0.0, 1.0, 12), 0.2, 2)
    assert "un = copy_outside(u, 1, n - 1)" in primal.source, primal.source


def test_plain_gradients_keep_rows_only_where_the_state_is_made_each_step():
    args = (np.sin(np.linspace(0.0, 2.5, 7)) + 0.4, 0.3)
    for fn, rows in [(nonlinear_steps, True), (state_from_zeros, True),
                     (state_also_rebound, False), (state_moved_before_the_copy, False),
                     (copy_of_another_array, False)]:
        check_grads(fn, args, modes=("rev",))
        g = ad.grad(fn, argnums=(0, 1))
        g(*args)
        assert ("un = u_tape[_step]" in g.source) is rows, (fn.__name__, g.source)
        assert ("u_tape.append(u)" in g.source) is not rows, (fn.__name__, g.source)
    g = ad.grad(nonlinear_steps)
    g(*args)
    assert "un[:] = u\n" in g.source, g.source


def test_one_statement_is_the_row_of_one_tape():
    """Regression: u = un and un's own save both planned un = np.zeros(n) as their row; the
    tape dropped afterwards had its pops already rewritten to rows (a name error)."""
    args = (np.linspace(0.1, 1.0, 5), 0.7)
    check_grads(new_state_read_next_step, args, modes=("rev",))
    g = ad.grad(new_state_read_next_step, argnums=(0, 1))
    g(*args)
    assert "un = u_tape[_step]" in g.source and "un_tape = []" in g.source, g.source


def test_second_order_through_a_stencil_state():
    """Code for another transformation keeps list tapes (rows would be shared memory)."""
    check_grads(nonlinear_steps, (np.sin(np.linspace(0.0, 2.5, 6)) + 0.4, 0.3), order=2,
                modes=("rev",))


# ---------------------------------------------------------------- helpers: plain == Numba
@pytest.fixture(scope="module")
def helpers():
    namespace = {"np": np, "numba": numba}
    for source in COPY_HELPERS.values():
        exec(compile(source, "<copy helpers>", "exec"), namespace)
    return namespace


def _overwrite(out, lo, hi):
    for i in range(lo, min(hi, out.shape[0])):
        out[i] = -1.0
    return out


@pytest.mark.numba
@pytest.mark.parametrize("lo,hi", [(0, 6), (1, 5), (0, 0), (4, 2), (3, 9), (6, 6), (-1, 3)])
def test_copy_outside_copies_what_the_loop_does_not_write(helpers, lo, hi):
    copy_outside = helpers["copy_outside"]

    def step(a, lo, hi):
        return _overwrite_numba(copy_outside(a, lo, hi), max(lo, 0), hi)

    _overwrite_numba = numba.njit(_overwrite)
    a = np.arange(6.0) + 1.0
    want = _overwrite(np.copy(a), max(lo, 0), hi)
    np.testing.assert_array_equal(numba.njit(step)(a, lo, hi), want)
    np.testing.assert_array_equal(numba.njit(step)(a.astype(np.float32), lo, hi), want)
    matrix = np.arange(6.0).reshape(3, 2)
    got = numba.njit(lambda m: copy_outside(m, 0, 1))(matrix)
    np.testing.assert_array_equal(got, matrix)
    assert got is not matrix


@pytest.mark.numba
@pytest.mark.parametrize("lo,hi", [(1, 5), (0, 6), (4, 2), (3, 9)])
def test_copy_outside_into_copies_what_the_loop_does_not_write(helpers, lo, hi):
    into = helpers["copy_outside_into"]

    @numba.njit
    def step(a, b, lo, hi):
        into(a, b, lo, hi)
        for i in range(max(lo, 0), min(hi, a.shape[0])):
            a[i] = -1.0
        return a

    b = np.arange(6.0) + 1.0
    want = _overwrite(b.copy(), max(lo, 0), hi)
    np.testing.assert_array_equal(step(np.zeros(6), b, lo, hi), want)
    np.testing.assert_array_equal(step(np.zeros(6), b[::-1].copy()[::-1], lo, hi), want)


@pytest.mark.numba
def test_copy_outside_into_overlapping_memory_copies_everything(helpers):
    """A view that overlaps its source (not the same entries): the whole copy, as a[:] = b
    does, so the loop reads what NumPy's copy left."""
    into = helpers["copy_outside_into"]

    def shifted(buffer, lo, hi):
        a, b = buffer[1:7], buffer[0:6]
        into(a, b, lo, hi)
        return buffer

    buffer = np.arange(8.0)
    want = shifted(buffer.copy(), 2, 4)  # plain form: a[:] = b
    np.testing.assert_array_equal(numba.njit(shifted)(buffer.copy(), 2, 4), want)
    same = np.arange(5.0)
    np.testing.assert_array_equal(numba.njit(lambda a: (into(a, a, 1, 3), a)[1])(same.copy()),
                                  same)
    # a broadcast source and a matrix: a[:] = b
    np.testing.assert_array_equal(numba.njit(lambda a, b: (into(a, b, 0, 1), a)[1])(
        np.zeros((2, 3)), np.ones((2, 3))), np.ones((2, 3)))


@pytest.mark.numba
def test_copy_outside_into_broadcasts_and_refuses_as_numpy_does(helpers):
    into = helpers["copy_outside_into"]

    def step(a, b):
        into(a, b, 1, 2)
        return a

    compiled = numba.njit(step)
    np.testing.assert_array_equal(compiled(np.zeros(4), np.array([2.5])), np.full(4, 2.5))
    np.testing.assert_array_equal(step(np.zeros(4), np.array([2.5])), np.full(4, 2.5))
    for fn in (step, compiled):
        with pytest.raises(ValueError):
            fn(np.zeros(4), np.ones(3))
    np.testing.assert_array_equal(compiled(np.zeros(0), np.zeros(0)), np.zeros(0))


def test_the_vector_forms_assign_no_slices():
    """Element loops: a slice assignment in the vector form made Numba compile NumPy's
    broadcast checks and their message (3 s of a cold start, as reserve_steps once did;
    Numba compiles such internals once per process, so their compile events cannot be
    counted here reliably: the source is read instead)."""
    import ast
    for source in COPY_HELPERS.values():
        tree = ast.parse(source)
        vector_forms = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and
                        n.name == "around"]
        assert vector_forms, source
        for form in vector_forms:
            sliced = [n for n in ast.walk(form) if isinstance(n, ast.Subscript) and
                      isinstance(n.ctx, ast.Store) and isinstance(n.slice, ast.Slice)]
            assert not sliced, ast.unparse(form)


# ---------------------------------------------------------------- what the rewrite leaves alone
def _rewrite(body):
    fn = gast.parse("def f(u, w, c, n, k):\n" + "\n".join("    " + line for line in body)
                    ).body[0]
    changed = copy_only_outside(fn)
    return changed, unparse(fn)


LOOP = ["for i in range(1, n - 1):", "    un[i] = u[i - 1] * c + u[i + 1]"]


def test_both_forms_are_rewritten():
    changed, text = _rewrite(["un = np.copy(u)"] + LOOP + ["return un"])
    assert changed and "un = copy_outside(u, 1, n - 1)" in text, text
    changed, text = _rewrite(["un = w[0]", "un[:] = u"] + LOOP + ["return un"])
    assert changed and "copy_outside_into(un, u, 1, n - 1)" in text, text
    changed, text = _rewrite(["un = u.copy()", "t = c * 2.0", "for i in range(n):",
                              "    s = u[i] * t", "    un[i] = s", "return un"])
    assert changed and "un = copy_outside(u, 0, n)" in text, text


@pytest.mark.parametrize("body, why", [
    (["un = np.copy(u)", "for i in range(1, n - 1):", "    un[i] = un[i - 1] + u[i]"],
     "the loop reads the copy"),
    (["un = np.copy(u)", "for i in range(1, n - 1):", "    if u[i] > 0:",
      "        un[i] = 0.0"], "a write in a branch"),
    (["un = np.copy(u)", "for i in range(k, n):", "    un[i] = u[i]"],
     "a start not written out"),
    (["un = np.copy(u)", "for i in range(-1, n):", "    un[i] = u[i]"], "a negative start"),
    (["un = np.copy(u)", "n = k + 1", "for i in range(1, n):", "    un[i] = u[i]"],
     "a bound rebound in between"),
    (["un = np.copy(u)", "v = un", "for i in range(1, n):", "    un[i] = u[i]"],
     "the copy read in between"),
    (["un = np.copy(u)", "for i in range(1, n):", "    un[i] = u[i]", "    if c > 1:",
      "        break"], "a break"),
    (["un = np.copy(u)", "for i in range(1, n):", "    un[i - 1] = u[i]"],
     "another entry than the index"),
    (["un = np.copy(u)", "for i in range(1, n, 2):", "    un[i] = u[i]"], "a step of 2"),
    (["un = np.copy(u)", "for i in range(1, len(un)):", "    un[i] = u[i]"],
     "a bound that reads the copy"),
    (["un = np.copy(u)", "for i in range(1, n):", "    un[i] = u[i]", "    i = 0"],
     "the index rebound"),
    (["un[1:] = u", "for i in range(1, n):", "    un[i] = u[i]"], "a part of the array"),
])
def test_no_rewrite_outside_the_pattern(body, why):
    changed, text = _rewrite(body + ["return un"])
    assert not changed, (why, text)
