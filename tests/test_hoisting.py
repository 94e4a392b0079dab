"""Loop-invariant tables and reused per-step buffers in the compiled dialect
(codegen/invariant_tables.py, codegen/buffer_reuse.py): where each rewrite is made, every
case it must refuse, the helpers' values, and jit gradients against the NumPy source and
finite differences."""

import os
import sys

import gast
import numpy as np
import pytest
from test_loop_tapes import lse_mixture as mixture  # exp(log_prec[c]), a terms vector per point

import autodiff_ast as ad
from autodiff_ast.jit import jit
from autodiff_ast.templates import unparse
from codegen.buffer_reuse import reuse_buffers
from codegen.common_calls import reuse_math_calls
from codegen.helpers import dialect_helper_source
from codegen.invariant_tables import tabulate_invariant_calls


def _function(body, params="x, a"):
    return gast.parse(f"def f({params}):\n" + "\n".join("    " + line for line in body)).body[0]


def _tabulated(body, params="x, a"):
    fn = _function(body, params)
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    changed = tabulate_invariant_calls(fn, taken)
    return changed, unparse(fn)


NEST = ["total = 0.0", "for i in range(x.shape[0]):", "    for c in range(k):",
        "        e = np.exp(a[c])", "        total = total + e * x[i]", "return total"]


def test_an_elementwise_call_of_the_inner_index_becomes_a_table_before_the_nest():
    changed, text = _tabulated(["k = a.shape[0]"] + NEST)
    assert changed
    assert "exp_a = np.exp(a[:k])\n    for i in range(x.shape[0]):" in text, text
    assert "e = exp_a[c]" in text, text
    changed, text = _tabulated(["k = a.shape[0]"] + [line.replace("np.exp", "math.log")
                                                     for line in NEST])
    assert changed and "log_a = np.log(a[:k])" in text, text  # math.* tabulated by np.*


@pytest.mark.parametrize("inside, why", [
    ("a[0] = 1.0", "the array is written in the loop"),
    ("a = a * 2.0", "the array is rebound in the loop"),
    ("add_at(a, 0, 1.0)", "an add helper writes into it"),
    ("helper(a)", "a generated function could write into it"),
    ("a.fill(0.0)", "a method writes into it"),
    ("np.copyto(a, x[:3])", "np.copyto writes into it"),
    ("np.add.at(a, x, 1.0)", "a ufunc's .at writes into it (np.* calls were all pure before)"),
    ("np.add(a, 1.0, out=a)", "an out= argument"),
    ("np.random.shuffle(a)", "np.random writes into it"),
    ("v = a[1:]\nv[0] = 2.0", "a view of it is written"),
    ("k = k - 1", "the loop bound changes"),
])
def test_no_table_when_the_loop_could_change_what_the_call_reads(inside, why):
    body = ["k = a.shape[0]", "total = 0.0", "for i in range(x.shape[0]):",
            "    for c in range(k):", "        e = np.exp(a[c])",
            "        total = total + e * x[i]"] + ["    " + line for line in inside.split("\n")] \
        + ["return total"]
    changed, text = _tabulated(body)
    assert not changed, (why, text)


@pytest.mark.parametrize("body, why", [
    (["for c in range(k):", "    e = np.exp(a[c])"], "no loop around the index loop"),
    (["for i in range(3):", "    for c in range(1, k):", "        e = np.exp(a[c])"],
     "a range with a start"),
    (["for i in range(3):", "    for c in range(k):", "        c = c + 1",
      "        e = np.exp(a[c])"], "the index is rebound"),
    (["for i in range(3):", "    for c in range(k):", "        e = np.exp(a[i])"],
     "the subscript is the outer index"),
    (["for i in range(3):", "    for c in range(k):", "        e = np.exp(a[c])",
      "        e[0] = 0.0"], "the target is written in place"),
    (["for i in range(3):", "    for c in range(k):", "        e = np.abs(a[c])"],
     "not a tabulated function"),
    (["for i in range(3):", "    for c in range(k):", "        e = np.exp(a[c], out=y)"],
     "keywords"),
    (["for i in range(3):", "    for c in range(f(k)):", "        e = np.exp(a[c])"],
     "a call in the bound"),
])
def test_no_table_outside_the_pattern(body, why):
    changed, text = _tabulated(["k = 3"] + body)
    assert not changed, (why, text)


@pytest.mark.parametrize("line, read", [
    ("y[i, c] = x[i] - 0.5 * np.exp(a[c]) * x[i]", "y[i, c] = x[i] - 0.5 * exp_a[c] * x[i]"),
    ("total += -np.exp(a[c])", "total += -exp_a[c]"),
])
def test_a_call_inside_arithmetic_reads_the_table(line, read):
    """The primal as written (``terms[c] = ... - 0.5 * np.exp(log_prec[c]) * sq``): an
    operand of arithmetic, whose result is a new value, reads the table's entry (the mixture
    log-likelihood's primal, 1,000 x 25 components: 250-261 -> 130-141 us)."""
    changed, text = _tabulated(["k = a.shape[0]", "total = 0.0", "for i in range(x.shape[0]):",
                                "    for c in range(k):"] +
                               ["        " + part for part in line.split("\n")],
                               params="x, a, y")
    assert changed and "exp_a = np.exp(a[:k])" in text and read in text, text


@pytest.mark.parametrize("line", ["y[i] = g(np.exp(a[c]))", "y[i] = np.exp(a[c])[0]",
                                  "h(np.exp(a[c]) * 2.0)", "f = lambda: np.exp(a[c]) * 2.0"])
def test_a_call_not_in_arithmetic_keeps_calling(line):
    """Handed to a function (which could write into a row of the table), subscripted, or in
    a lambda: left alone (and an unknown function handed anything made from ``a`` may write
    into it: no table at all)."""
    changed, text = _tabulated(["k = a.shape[0]", "for i in range(x.shape[0]):",
                                "    for c in range(k):", "        " + line], params="x, a, y")
    assert not changed and "np.exp(a[c])" in text, text


def test_the_table_goes_before_the_outermost_loop_that_leaves_the_array_alone():
    changed, text = _tabulated([
        "k = a.shape[0]", "for t in range(3):", "    a = a * 0.5", "    for i in range(4):",
        "        for c in range(k):", "            e = np.exp(a[c])"])
    assert changed
    assert "a = a * 0.5\n        exp_a = np.exp(a[:k])\n        for i in range(4):" in text, text


def test_one_table_per_call_and_loop_and_fresh_names():
    changed, text = _tabulated([
        "k = a.shape[0]", "exp_a = 1.0", "for i in range(4):", "    for c in range(k):",
        "        e = np.exp(a[c])", "        g = np.exp(a[c])", "    for c in range(k):",
        "        h = np.exp(a[c])"])
    assert changed
    assert text.count("np.exp(a[:k])") == 1, text
    assert "exp_a_2 = np.exp(a[:k])" in text and text.count("exp_a_2[c]") == 3, text


# ---------------------------------------------------------------- buffer reuse
def _reused(body, params="x, w"):
    """(whether reuse_buffers changed the function, the helpers it calls, the text)."""
    fn = _function(body, params)
    before = unparse(fn)
    used = reuse_buffers(fn)
    text = unparse(fn)
    return text != before, used, text


LOOP = ["n = x.shape[0]", "k = w.shape[0]", "total = 0.0", "for i in range(n):",
        "    terms = np.zeros(k)", "    for c in range(k):",
        "        terms[c] = w[c] * x[i]"]


def test_a_private_vector_allocated_each_step_reuses_its_old_array():
    changed, used, text = _reused(LOOP + ["    total = total + np.sum(terms) + terms[0]",
                                          "    bar = np.zeros_like(terms)", "return total"])
    assert changed and not used, text  # (bar is first bound in the loop: left alone)
    assert "terms = np.empty(0)\n    for i in range(n):\n        if terms.shape[0] == k:\n" \
        "            terms[:] = 0\n        else:\n            terms = np.zeros(k)\n" in text, text
    assert "    bar = np.zeros_like(terms)" in text, text
    changed, used, text = _reused(LOOP[:4] + ["    terms = np.zeros(k)"] + LOOP[4:] + [
        "bar = np.zeros_like(terms)", "for i in range(n):", "    bar[0] = bar[0] + 1.0",
        "    total = total + bar[0]", "    bar = np.zeros_like(terms)", "return total"])
    assert "        if bar.shape[0] == terms.shape[0]:\n            bar[:] = 0\n        else:\n" \
        "            bar = np.zeros_like(terms)" in text, text


def test_a_per_step_empty_vector_keeps_its_old_array():
    """``t = np.empty(k, dtype=...)`` in a loop (a tape of one step): the old array serves
    when it has k entries (its values were never to be read); a placeholder of the dtype is
    bound before the loop."""
    changed, used, text = _reused([
        "n = x.shape[0]", "k = w.shape[0]", "total = 0.0", "for i in range(n):",
        "    t = np.empty(k, dtype=np.float64)", "    for c in range(k):",
        "        t[c] = w[c] * x[i]", "    for c in range(k):",
        "        total = total + t[c] * t[c]", "return total"])
    assert changed and not used, text
    assert "t = np.empty(0, dtype=np.float64)\n    for i in range(n):\n" \
        "        if t.shape[0] != k:\n            t = np.empty(k, dtype=np.float64)" in text, text
    changed, used, text = _reused([
        "rows = []", "for i in range(3):", "    t = np.empty(4)", "    t[0] = x[i]",
        "    rows.append(t)", "return rows"])
    assert not changed, text  # a list holds each step's array


def test_a_tape_pops_reset_of_an_adjoint_vector_is_zeroed_in_place():
    """The backward sweep's reset after a pop, ``x_bar = np.zeros_like(x) if x.size else
    np.zeros_like(x_bar)``, where the tape holds only vectors: zeroed in place."""
    changed, used, text = _reused([
        "tape = []", "v = np.zeros((0,))", "for i in range(3):", "    tape.append(v)",
        "    v = np.empty(4)", "    v[0] = x[i]", "v_bar = np.zeros_like(v)",
        "for i in range(2, -1, -1):", "    w[0] += v_bar[0] * v[0]", "    v = tape.pop()",
        "    v_bar = np.zeros_like(v) if v.size else np.zeros_like(v_bar)", "return w"])
    assert changed and not used, text
    assert "if v_bar.shape[0] == (v.shape[0] if v.size else v_bar.shape[0]):\n" \
        "            v_bar[:] = 0\n        else:\n            v_bar = np.zeros_like(v) if " \
        "v.size else np.zeros_like(v_bar)" in text, text
    # a tape that also holds something of unknown rank: the helper, which checks
    changed, used, text = _reused([
        "tape = []", "v = np.zeros((0,))", "for i in range(3):", "    tape.append(v)",
        "    v = x.copy()", "v_bar = np.zeros_like(v)", "for i in range(2, -1, -1):",
        "    w[0] += v_bar[0] * v[0]", "    v = tape.pop()",
        "    v_bar = np.zeros_like(v) if v.size else np.zeros_like(v_bar)", "return w"])
    assert used == {"zeros_like_reusing"} and \
        "v_bar = zeros_like_reusing(v_bar, v if v.size else v_bar)" in text, text


@pytest.mark.parametrize("restore, tapes", [
    ("k = k_tape.pop()", ["k_tape = []"]),  # a list of integers used as a stack
    ("k = k_tape[i]", ["k_tape = np.empty(3, dtype=np.int64)"]),  # an integer tape
    ("k = k_tape[i]", ["int_tapes = np.empty((3, 2), dtype=np.int64)",
                       "k_tape = int_tapes[:, 1]"]),  # a column of a matrix of them
])
def test_a_length_restored_from_a_tape_is_still_one_integer(restore, tapes):
    """The backward sweep restores a loop's length from a tape (ADBench's LSTM, whose unit
    count is pushed per layer): the vector allocated with it and its adjoint are still
    vectors, so both are made in their old arrays (the LSTM's hidden_3_bar, ypred_bar)."""
    push = "    k_tape.append(k)" if restore.endswith("pop()") else "    k_tape[i] = k"
    changed, used, text = _reused(tapes + [
        "k = 0", "v = np.zeros((0,))", "for i in range(3):", push, "    k = w.shape[0]",
        "    v = np.empty(k)", "    v[0] = x[i]", "v_bar = np.zeros_like(v)",
        "for i in range(2, -1, -1):", "    w[0] += v_bar[0] * v[0]", "    " + restore,
        "    v = np.empty(k)", "    v_bar = np.zeros_like(v)", "return w"])
    assert changed and not used, text
    assert "        if v_bar.shape[0] == v.shape[0]:\n            v_bar[:] = 0\n" in text, text
    assert "        if v.shape[0] != k:\n            v = np.empty(k)\n" in text, text


@pytest.mark.parametrize("restore, tapes", [
    ("k = k_tape.pop()", ["k_tape = []", "k_tape.append(x)"]),  # an array on the stack
    ("k = k_tape[i]", ["k_tape = np.empty(3)"]),  # a float tape
    ("k = k_tape[i]", ["k_tape = np.empty((3, 2), dtype=np.int64)"]),  # a row, not a slot
])
def test_a_length_from_a_tape_that_may_not_hold_integers_keeps_the_allocation(restore,
                                                                                 tapes):
    push = "    k_tape.append(k)" if restore.endswith("pop()") else "    k_tape[i] = k"
    changed, used, text = _reused(tapes + [
        "k = 0", "v = np.zeros((0,))", "for i in range(3):", push, "    k = w.shape[0]",
        "    v = np.empty(k)", "    v[0] = x[i]", "for i in range(2, -1, -1):",
        "    w[0] += v[0]", "    " + restore, "    v = np.empty(k)", "return w"])
    assert "v = np.empty(k)" in text and "if v.shape[0] != k" not in text, text


def test_zeros_like_of_a_parameter_of_any_rank_reuses_or_allocates():
    """The like may be a parameter of unknown rank: the helper reuses a vector's buffer and
    allocates for anything else (a bundle adjustment's camera row adjoint, reset per step)."""
    changed, used, text = _reused(["terms = x.copy()", "for i in range(3):",
                          "    terms = np.zeros_like(x)", "    terms[0] = 1.0",
                          "return terms"])
    assert used == {"zeros_like_reusing"} and \
        "terms = zeros_like_reusing(terms, x)" in text, text
    import numba
    namespace = {"np": np, "numba": numba}
    for source in dialect_helper_source({"zeros_like_reusing"}):
        exec(source, namespace)
    reuse = namespace["zeros_like_reusing"]
    vector, matrix = np.ones(3), np.ones((2, 2))
    assert reuse(vector, np.arange(3.0)) is vector and not vector.any()
    fresh = reuse(matrix, np.ones((2, 2)))
    assert fresh is not matrix and fresh.shape == (2, 2) and not fresh.any()


@pytest.mark.parametrize("line, why", [
    ("kept = terms", "another name holds it"),
    ("tape.append(terms)", "a list holds it"),
    ("total = total + helper(terms)", "a generated function could keep it"),
    ("v = terms[1:]", "a view of it"),
    ("pair = (terms, 1.0)", "a tuple holds it"),
    ("t2 = np.asarray(terms)", "np.asarray returns it"),
])
def test_no_reuse_when_anything_else_can_hold_the_array(line, why):
    changed, used, text = _reused(["tape = []"] + LOOP + ["    " + line, "return total"])
    assert not changed, (why, text)


@pytest.mark.parametrize("body, why", [
    (["for i in range(3):", "    w = np.zeros(4)"], "a parameter"),
    (["terms = x[0]", "for i in range(3):", "    terms = np.zeros(4)"],
     "bound to a view of a parameter"),
    (["for i in range(3):", "    terms = np.zeros(x.shape)"], "a shape tuple"),
    (["s = x.shape", "for i in range(3):", "    terms = np.zeros(s)"],
     "a name holding a shape tuple"),
    (["for i in range(3):", "    terms = np.zeros((3, 3))"], "two axes"),
    (["for i in range(3):", "    terms = np.zeros(3, dtype=np.int64)"], "another dtype"),
    (["y = terms", "for i in range(3):", "    terms = np.zeros(4)"],
     "mentioned before the loop"),
    (["for i in range(3):", "    terms = np.zeros_like(x)"], "no array bound before the loop"),
    (["for i in range(3):", "    terms = np.zeros(4)", "    g = lambda: terms"], "a closure"),
])
def test_no_reuse_outside_the_pattern(body, why):
    changed, used, text = _reused(body + ["return 0.0"])
    assert not changed, (why, text)


@pytest.mark.numba
@pytest.mark.parametrize("compiled", [False, True])
def test_the_reusing_helper_zeroes_the_buffer_or_allocates(compiled):
    import numba
    from test_dialect_helpers import _helper_namespace
    zeros_like = _helper_namespace("zeros_like_reusing")["zeros_like_reusing"]
    if compiled:
        plain_like = zeros_like
        zeros_like = numba.njit(lambda b, like: plain_like(b, like))
    like = np.ones(5)
    buffer = np.arange(5.0)
    out = zeros_like(buffer, like)
    assert np.shares_memory(out, buffer) and np.array_equal(out, np.zeros(5))
    ints = np.arange(5)
    out = zeros_like(np.arange(5.0), ints)  # another dtype: a new array of like's dtype
    assert out.dtype == ints.dtype and np.array_equal(out, np.zeros(5, dtype=ints.dtype))
    other = np.arange(3.0)
    out = zeros_like(other, like)
    assert out.shape == (5,) and np.array_equal(out, np.zeros(5))
    assert np.array_equal(other, np.arange(3.0))  # a buffer of another size is left as it was
    strided = np.arange(10.0)[::2]
    out = zeros_like(strided, like)
    assert np.array_equal(out, np.zeros(5))
    if compiled:  # Numba reuses only C-contiguous buffers: the strided one is left alone
        assert np.array_equal(strided, np.arange(10.0)[::2])


# ---------------------------------------------------------------- end to end
def drifting(scale, x):
    """The array the exp reads changes every step: no table may be made."""
    total = 0.0
    s = scale.copy()
    for i in range(x.shape[0]):
        for c in range(s.shape[0]):
            total = total + np.exp(s[c]) * x[i]
        s[0] = s[0] + 0.25 * x[i]
    return total


def kept_terms(w, x):
    """Each step's vector is kept in a list: its array must not be reused."""
    rows = []
    k = w.shape[0]
    for i in range(x.shape[0]):
        terms = np.zeros(k)
        for c in range(k):
            terms[c] = np.tanh(w[c] * x[i])
        rows.append(terms)
    total = 0.0
    for r in rows:
        total = total + np.sum(r * r)
    return total


def _finite_difference(f, args, argnum, eps=1e-6):
    base = [np.array(a, dtype=float) for a in args]
    out = np.zeros_like(base[argnum])
    for idx in np.ndindex(out.shape):
        up = [a.copy() for a in base]
        down = [a.copy() for a in base]
        up[argnum][idx] += eps
        down[argnum][idx] -= eps
        out[idx] = (f(*up) - f(*down)) / (2 * eps)
    return out


@pytest.mark.numba
def test_jit_mixture_gradient_with_tables_and_reused_buffers():
    rng = np.random.default_rng(21)
    args = (rng.standard_normal((3, 2)), rng.uniform(-0.5, 0.5, 3), rng.standard_normal((5, 2)))
    compiled = jit(ad.grad(mixture, argnums=(0, 1)))
    got = compiled(*args)
    expected = ad.grad(mixture, argnums=(0, 1))(*args)
    for a, b, k in zip(got, expected, (0, 1)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a, _finite_difference(mixture, args, k), rtol=1e-6,
                                   atol=1e-8)
    source = compiled.source
    assert "exp_log_prec = exp_fast(log_prec[:k])" in source, source  # (one table, fast_exp.py)
    assert "if terms.shape[0] == k:\n            terms[:] = 0" in source, source
    assert "if terms_bar.shape[0] == terms.shape[0]:\n            terms_bar[:] = 0" in source, \
        source
    np.testing.assert_allclose(jit(mixture)(*args), mixture(*args), rtol=1e-13)
    empty = (args[0], args[1], np.zeros((0, 2)))  # no step: the tables and buffers unused
    np.testing.assert_array_equal(compiled(*empty)[0], np.zeros((3, 2)))


@pytest.mark.numba
@pytest.mark.parametrize("f, argnums", [(drifting, (0, 1)), (kept_terms, (0, 1))])
def test_jit_leaves_changing_arrays_and_kept_buffers_alone(f, argnums):
    rng = np.random.default_rng(22)
    args = (rng.standard_normal(4), rng.standard_normal(6))
    compiled = jit(ad.grad(f, argnums=argnums))
    got = compiled(*args)
    for a, b, k in zip(got, ad.grad(f, argnums=argnums)(*args), argnums):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a, _finite_difference(f, args, k), rtol=1e-6, atol=1e-8)
    assert "exp_s = " not in compiled.source
    assert "terms[:] = 0" not in compiled.source
    np.testing.assert_allclose(jit(f)(*args), f(*args), rtol=1e-13)


# ---------------------------------------------------------------- math calls reused
def _reused_calls(body, params="t, g"):
    fn = _function(body, params)
    count = reuse_math_calls(fn)
    return count, unparse(fn)


def test_a_repeated_math_call_reads_the_name_holding_it():
    count, text = _reused_calls(["c = np.cos(t)", "u = t", "a, v = g, u", "cond = t > 0.0",
                                 "if cond:", "    s = np.sin(t)", "b = g * np.cos(v)",
                                 "cond_2 = cond", "if cond_2:", "    b = b * np.sin(u)",
                                 "return b"])
    assert count == 2, text
    assert "b = g * c" in text and "b = b * s" in text, text


@pytest.mark.parametrize("line, why", [
    ("t = t + 1.0", "t rebound"),
    ("c = 2.0", "the holder rebound"),
    ("t[0] = 1.0", "t written into"),
    ("t += 1.0", "t added to in place"),
    ("add_at(t, 0, 1.0)", "t passed to a call made for its effect"),
])
def test_a_math_call_is_not_reused_after_a_change(line, why):
    count, text = _reused_calls(["c = np.cos(t)", line, "return np.cos(t)"])
    assert count == 0, (why, text)


def test_math_calls_in_loops_and_one_armed_branches():
    # changed later in the loop: the next step's call must be made again
    count, text = _reused_calls(["c = np.cos(t)", "for i in range(3):", "    b = np.cos(t)",
                                 "    t = t + b", "return c"])
    assert count == 0, text
    # computed in one arm only: not after the branch
    count, text = _reused_calls(["if g > 0.0:", "    c = np.cos(t)", "return np.cos(t)"])
    assert count == 0, text
    # the same condition again, changed in between: not reused
    count, text = _reused_calls(["cond = g > 0.0", "if cond:", "    c = np.cos(t)",
                                 "cond = g < 0.0", "if cond:", "    return np.cos(t)",
                                 "return 0.0"])
    assert count == 0, text


def test_a_later_branch_on_the_same_comparison_reuses_the_call():
    """A recomputed forward step and its backward step branch on comparisons written out
    (`if sqtheta != 0.0:`), the backward one on copies of the forward's names (bundle
    adjustment's rotation: the sine's adjoint called cos again, 3.38 -> 2.84 ms)."""
    count, text = _reused_calls(["if g != 0.0:", "    c = np.cos(t)", "    s = np.sin(t)",
                                 "h, u = g, t", "if h != 0.0:",
                                 "    b = np.sin(u) * np.cos(u)", "    return b",
                                 "return 0.0"])
    assert count == 2 and "b = s * c" in text, text
    # the other arm of that comparison has nothing from the first arm
    count, text = _reused_calls(["if g != 0.0:", "    c = np.cos(t)", "else:", "    c = 1.0",
                                 "if g != 0.0:", "    return c", "return np.cos(t)"])
    assert count == 0, text


@pytest.mark.parametrize("change", ["g = g + 1.0", "t = t * 2.0", "c = 0.5"],
                         ids=["the test's name", "the argument", "the holder"])
def test_a_comparison_changed_in_between_is_not_the_same(change):
    count, text = _reused_calls(["if g > 0.0:", "    c = np.cos(t)", change, "if g > 0.0:",
                                 "    return np.cos(t)", "return 0.0"])
    assert count == 0, text


def test_a_test_that_calls_a_function_is_never_the_same():
    count, text = _reused_calls(["if np.sum(g) > 0.0:", "    c = np.cos(t)",
                                 "if np.sum(g) > 0.0:", "    return np.cos(t)", "return 0.0"])
    assert count == 0, text


def test_bundle_adjustment_s_backward_step_calls_cos_and_sin_once():
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "adbench", "ba.py")
    spec = importlib.util.spec_from_file_location("hoisting_ba", path)
    ba = sys.modules["hoisting_ba"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ba)
    rng = np.random.default_rng(0)
    cams = rng.uniform(-0.5, 0.5, (2, 11))
    cams[:, 6] = 1.0
    x = rng.uniform(-1.0, 1.0, (3, 3)) + np.array([0.0, 0.0, 5.0])
    w = rng.uniform(0.5, 1.0, 4)
    obs = np.array([[0, 0], [1, 1], [0, 2], [1, 0]])
    feats = rng.uniform(-1.0, 1.0, (4, 2))

    def loss(cams, x, w):
        r = ba.ba_objective(cams, x, w, obs, feats)
        return 0.5 * np.sum(r * r)
    compiled = jit(ad.grad(loss, argnums=(0, 1, 2)))
    got = compiled(cams, x, w)
    args = (cams, x, w)
    for a, b, k in zip(got, ad.grad(loss, argnums=(0, 1, 2))(*args), range(3)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(a, _finite_difference(loss, args, k), rtol=1e-6, atol=1e-8)
    # forward, recomputed forward step: one cos and one sin each; the adjoint reuses them
    assert compiled.source.count("np.cos(") == 2 and compiled.source.count("np.sin(") == 2
