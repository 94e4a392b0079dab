"""Small branches of a loop as selects under jit (codegen/branch_selects.py).

The rewrite is checked on source (which branches and loops it takes, which it leaves), its two
helpers against brute force in plain Python and compiled, and compiled gradients against the
plain-NumPy gradient and central differences (test_vector_loops._grads_agree), including a
loop whose indices leave the array where the condition is false (the check sends it to the
loop as written).
"""

from __future__ import annotations

import gast
import numba
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.branch_selects import SELECT_HELPERS, select_small_branches

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def _rewrite(text):
    fn = gast.parse(text).body[0]
    return select_small_branches(fn), unparse(fn)


_LOOP = '''
def f(a, b, cond_tape, k, j):
    s = 0.0
    t = 0.0
    cond = False
    for c in range(k):
        cond = cond_tape[c]
{branch}
    return s
'''


def _loop(*lines):
    return _LOOP.format(branch="\n".join("        " + line for line in lines))


@pytest.mark.parametrize("lines, why", [
    (["if cond:", "    s = s + a[c]"], "the value indexes an array"),
    (["if cond:", "    u = 1.0"], "u is not bound before the loop"),
    (["if cond:", "    cond = False"], "the branch binds its own condition"),
    (["if cond:", "    add_at(a, 2 * c, s)"], "the index is not the loop's index plus a number"),
    (["if cond:", "    add_at(a, c, s)", "a = b"], "the loop binds the array"),
    (["if cond:", "    s = s + np.sin(t)"], "a call"),
    (["if cond:", "    s = s + b"], "b is not known to be a number (array arithmetic)"),
    (["if cond:", "    a[c, 0] += s"], "two indices"),
    (["if cond and s > 0.0:", "    s = 0.0"], "the test is not a name"),
    (["if cond:"] + ["    s = 0.0"] * 7, "too many statements"),
])
def test_left_alone(lines, why):
    changed, text = _rewrite(_loop(*lines))
    assert not changed, why
    assert "add_at_where" not in text and " if cond else " not in text, text


def test_a_branch_of_names_only_needs_no_check():
    changed, text = _rewrite(_loop("if cond:", "    s = s + 2.0 * t", "else:", "    t = s"))
    assert changed
    assert "indices_valid" not in text, text
    assert "s = s + 2.0 * t if cond else s" in text, text
    assert "t = t if cond else s" in text, text


def test_adds_get_a_check_per_array_and_offset():
    changed, text = _rewrite(_loop("if not cond:", "    add_at(a, c + j, s)",
                                   "    subtract_at(b, c, t)", "    a[c + j] -= t"))
    assert changed
    assert "indices_valid(a.shape[0], 0, k, 1, j) and indices_valid(b.shape[0], 0, k, 1, 0)" \
        in text, text
    assert "add_at_where(a, c + j, s, not cond)" in text, text
    assert "add_at_where(b, c, -t, not cond)" in text, text
    assert "add_at_where(a, c + j, -t, not cond)" in text, text


def test_a_loop_with_a_step_that_is_not_a_constant_is_left_alone():
    text = _LOOP.replace("range(k)", "range(0, k, j)").format(
        branch="        if cond:\n            add_at(a, c, s)")
    changed, _ = _rewrite(text)
    assert not changed


# ---------------------------------------------------------------- the helpers
def _helpers():
    namespace = {"numba": numba, "np": np}
    for source in SELECT_HELPERS.values():
        exec(source, namespace)  # noqa: S102 (our own helper source)
    return namespace


def test_indices_valid_against_brute_force():
    plain = _helpers()["indices_valid"]
    compiled = numba.njit(plain)
    for n in (0, 1, 4):
        for start in range(-6, 7):
            for stop in range(-6, 7):
                for step in (-3, -1, 1, 2):
                    for offset in (-2, 0, 1):
                        want = all(-n <= i + offset < n for i in range(start, stop, step))
                        assert plain(n, start, stop, step, offset) == want
                        assert compiled(n, start, stop, step, offset) == want


def test_add_at_where_adds_only_where_the_condition_holds():
    helpers = _helpers()
    plain = helpers["add_at_where"]
    exec("def call(a, i, v, cond):\n    add_at_where(a, i, v, cond)\n", helpers)  # noqa: S102
    compiled = numba.njit(helpers["call"])
    for add in (plain, compiled):
        a = np.array([1.0, -0.0, 3.0])
        add(a, 0, 2.0, True)
        add(a, 2, 5.0, False)
        add(a, -1, 1.0, True)
        np.testing.assert_array_equal(a, [3.0, 0.0, 4.0])
        rows = np.zeros((2, 3))
        add(rows, 1, np.ones(3), True)
        add(rows, 0, np.ones(3), False)
        np.testing.assert_array_equal(rows, [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
        counts = np.zeros(3, dtype=np.int64)
        add(counts, 1, 2, True)
        add(counts, 2, 5, False)
        np.testing.assert_array_equal(counts, [0, 2, 0])


# ---------------------------------------------------------------- compiled gradients
def running_max_lse(x, w):
    """A running maximum per row (a branch in a loop), then a log-sum-exp: the GMM kernel's
    shape; its backward sweep's branch becomes selects."""
    total = 0.0
    for i in range(x.shape[0]):
        terms = np.zeros(x.shape[1])
        for c in range(x.shape[1]):
            terms[c] = w[c] * x[i, c] - 0.5 * x[i, c] * x[i, c]
        top = terms[0]
        for c in range(1, x.shape[1]):
            if terms[c] > top:
                top = terms[c]
        s = 0.0
        for c in range(x.shape[1]):
            s = s + np.exp(terms[c] - top)
        total = total + np.log(s) + top
    return total


def leader_next(x, w):
    """The element after the last leader: the backward branch adds at i + 1, one past the end
    in the last step, where the condition is false. The check sends the loop to its form as
    written."""
    n = x.shape[0]
    top = -10.0
    total = 0.0
    for i in range(n):
        if x[i] * w > top and i < n - 1:
            top = x[i + 1]
        total = total + top
    return total * w


def leader_before(x, w):
    """The element before the last leader: every index in range, the branch-free copy runs."""
    n = x.shape[0]
    top = -10.0
    total = 0.0
    for i in range(1, n):
        if x[i] * w > top:
            top = x[i - 1]
        total = total + top
    return total * w


@pytest.mark.parametrize("fn, args, argnums, rewritten", [
    (running_max_lse, lambda r: (r.standard_normal((6, 12)), r.standard_normal(12)), (0, 1),
     True),
    (leader_next, lambda r: (r.standard_normal(11), 0.9), (0, 1),
     "indices_valid(x_bar.shape[0], n - 1, -1, -1, 1)"),
    (leader_before, lambda r: (r.standard_normal(11), 0.9), (0, 1),
     "indices_valid(x_bar.shape[0], n - 1, 0, -1, -1)"),
])
def test_compiled_gradients_agree(fn, args, argnums, rewritten):
    compiled = _grads_agree(fn, args(np.random.default_rng(5)), argnums)
    assert "add_at_where(" in compiled.source, compiled.source
    assert (rewritten if isinstance(rewritten, str) else "indices_valid(") in \
        compiled.source, compiled.source


def test_the_check_refuses_the_copy_that_would_add_past_the_end():
    """leader_next's backward loop, range(n - 1, -1, -1) plus one: index n in its first step."""
    valid = _helpers()["indices_valid"]
    assert not valid(11, 10, -1, -1, 1)
    assert valid(11, 10, 0, -1, -1)


def test_running_max_with_ties_gives_numpy_s_numbers():
    x = np.tile(np.linspace(-1.0, 1.0, 12), (3, 1))
    x[:, 4] = x[:, 11]
    w = np.zeros(12)
    got = ad.jit(ad.grad(running_max_lse, argnums=(0, 1)))(x, w)
    want = ad.grad(running_max_lse, argnums=(0, 1))(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
