"""The reverse step of an in-place stencil under jit: the adjoint a gathering loop fills is not
zeroed first, and the copy's adjoint skips the entries the step zeroed
(codegen/gather_targets.py).

Each compiled gradient is compared with the plain-NumPy gradient of the same function and
with central differences (test_vector_loops._grads_agree), at lengths where the loops' ranges
are empty or cover one entry; the helpers' Numba forms are compared with their plain forms on
bounds outside the array; statements the rewrite must leave alone are checked to stay.
"""

from __future__ import annotations

import gast
import numba
import numpy as np
import pytest
from test_loop_adjoints import heat  # the benchmark's heat equation
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.gather_targets import (
    GATHER_HELPERS,
    fill_gather_targets,
    reuse_previous_steps,
    skip_reset_entries,
)

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- programs
def one_sided(u0, c, steps):
    """A stencil reading only entries to its left: the gathering loop does not cover the
    entries next to the right end that the step overwrote."""
    u = u0.copy()
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(2, n):
            un[i] = u[i - 1] * c + u[i - 2] * (1.0 - c)
        u = un
    return np.sum(np.sin(u))


def _step_source(fn, *args):
    import autodiff_ast as ad
    compiled = ad.jit(ad.grad(fn, argnums=(0, 1)))
    compiled(*args)
    return compiled.source


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("n", [1, 2, 3, 4, 9])
def test_heat_gradient_at_short_lengths(n):
    u0 = np.cos(np.linspace(0.0, 2.0, n)) + 0.3
    _grads_agree(heat, (u0, 0.2, 3), (0, 1))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_a_one_sided_stencil(n):
    u0 = np.sin(np.linspace(0.0, 3.0, n)) + 0.5
    _grads_agree(one_sided, (u0, 0.3, 4), (0, 1))


def test_the_heat_step_is_rewritten():
    """The benchmark's gradient calls the helpers (1,000 points x 500 steps: 560 -> 445-470
    us): no zeros read back, no add of the zeroed interior, the array of the step before last
    filled again."""
    source = _step_source(heat, np.linspace(0.0, 1.0, 12), 0.2, 2)
    assert "zeros_outside(u, 0, n, u_bar_spare, u_bar_reusable)" in source
    assert "gather_start(u_bar, j)" in source
    assert "add_outside(u_bar, un_bar, 1, n - 1)" in source
    assert "u_bar += un_bar" not in source


def test_a_float32_state():
    """A float32 adjoint: the gathering loop's local starts at 0.0 under Numba, as the zeros
    read back did; the gradient matches the plain one to float32 precision."""
    import autodiff_ast as ad
    u0 = (np.cos(np.linspace(0.0, 2.0, 10)) + 0.3).astype(np.float32)
    got = ad.jit(ad.grad(heat))(u0, np.float32(0.2), 3)
    want = ad.grad(heat)(u0, np.float32(0.2), 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


# ---------------------------------------------------------------- helpers: plain == Numba
def _helpers():
    namespace = {"np": np, "numba": numba}
    for source in GATHER_HELPERS.values():
        exec(compile(source, "<gather helpers>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def helpers():
    return _helpers()


@pytest.mark.parametrize("lo,hi", [(0, 6), (2, 4), (0, 0), (4, 2), (3, 9), (6, 6)])
def test_zeros_outside_zeroes_what_the_loop_does_not_write(helpers, lo, hi):
    zeros_outside, gather_start = helpers["zeros_outside"], helpers["gather_start"]

    def fill(like, lo, hi):
        out = zeros_outside(like, lo, hi)
        for j in range(lo, min(hi, out.shape[0])):
            value = gather_start(out, j)
            out[j] = value + 1.0
        return out

    like = np.full(6, 7.0)
    want = fill(like, lo, hi)
    np.testing.assert_array_equal(numba.njit(fill)(like, lo, hi), want)
    assert want.sum() == max(0, min(hi, 6) - lo)


def test_zeros_outside_of_a_matrix(helpers):
    @numba.njit
    def first_rows(like):
        out = helpers_zeros(like, 0, 1)
        out[0] = gather(out, 0) + 1.0
        return out

    helpers_zeros, gather = helpers["zeros_outside"], helpers["gather_start"]
    got = first_rows(np.ones((3, 2)))
    np.testing.assert_array_equal(got, [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])


@pytest.mark.parametrize("reusable,length,dtype", [(True, 6, np.float64), (False, 6, np.float64),
                                                  (True, 4, np.float64), (True, 6, np.float32)])
def test_zeros_outside_fills_the_spare_only_when_it_may(helpers, reusable, length, dtype):
    zeros_outside = helpers["zeros_outside"]

    def fill(spare, reusable, like):
        out = zeros_outside(like, 1, 5, spare, reusable)
        for j in range(1, 5):
            out[j] = 2.0
        return out

    like = np.ones(6, dtype=dtype)
    want = fill(np.full(length, 9.0), reusable, like)
    np.testing.assert_array_equal(want, [0, 2, 2, 2, 2, 0])
    spare = np.full(length, 9.0)
    got = numba.njit(fill)(spare, reusable, like)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype
    reused = reusable and length == 6 and dtype == np.float64
    assert np.shares_memory(got, spare) == reused


@pytest.fixture(scope="module")
def compiled_add(helpers):
    """add_outside called from compiled code: Numba's form (add_outside_numba)."""
    add_outside = helpers["add_outside"]

    @numba.njit
    def run(a, b, lo, hi):
        add_outside(a, b, lo, hi)
    return run


@pytest.mark.parametrize("lo,hi", [(1, 4), (0, 5), (3, 2), (-1, 2), (2, 9), (0, 0), (5, 5)])
def test_add_outside_adds_all_but_the_zeroed_entries(helpers, compiled_add, lo, hi):
    add_outside = helpers["add_outside"]
    b = np.arange(1.0, 6.0)
    b[max(lo, 0):max(hi, 0)] = 0.0  # what the reset loop left
    want = np.full(5, 0.5) + b
    for run in (add_outside, numba.njit(add_outside), compiled_add):
        a = np.full(5, 0.5)
        run(a, b.copy(), lo, hi)
        np.testing.assert_array_equal(a, want)


def test_add_outside_leaves_the_entries_inside_alone(helpers, compiled_add):
    """Numba's element loops read none of b's entries lo..hi-1, as the slices do not."""
    b = np.array([1.0, np.nan, np.nan, 4.0])
    for run in (helpers["add_outside"], compiled_add):
        a = np.zeros(4)
        run(a, b, 1, 3)
        np.testing.assert_array_equal(a, [1.0, 0.0, 0.0, 4.0])


@pytest.mark.parametrize("shift", [1, -1, 0])
def test_add_outside_of_overlapping_vectors_as_numpy_does(helpers, compiled_add, shift):
    """a and b views of one buffer, the same entries or shifted by one: Numba's form adds
    from a copy of b when they partly overlap, as NumPy does."""
    def views(buffer):
        a = buffer[1:6]
        return a, buffer[1 + shift:6 + shift]

    want_buffer = np.arange(1.0, 8.0)
    helpers["add_outside"](*views(want_buffer), 2, 3)
    got_buffer = np.arange(1.0, 8.0)
    compiled_add(*views(got_buffer), 2, 3)
    np.testing.assert_array_equal(got_buffer, want_buffer)


def test_add_outside_of_strided_vectors(helpers, compiled_add):
    want, got = np.zeros(10), np.zeros(10)
    b = np.arange(1.0, 21.0)[::4]
    helpers["add_outside"](want[::2], b, 1, 3)
    compiled_add(got[::2], b, 1, 3)
    np.testing.assert_array_equal(got, want)
    assert got[2] == 0.0 and got[0] == 1.0


def test_add_outside_broadcasts_as_numpy_does(helpers, compiled_add):
    a = np.zeros((2, 3))
    helpers["add_outside"](a, np.array([1.0, 2.0, 3.0]), 0, 1)
    np.testing.assert_array_equal(a, [[1.0, 2.0, 3.0]] * 2)
    for run in (helpers["add_outside"], compiled_add):
        a = np.zeros(3)
        run(a, np.array([2.0]), 0, 1)  # a one-entry vector is added to every entry
        np.testing.assert_array_equal(a, [2.0, 2.0, 2.0])
        with pytest.raises(ValueError):
            run(np.zeros(3), np.ones(2), 0, 1)


def test_add_outside_of_matrices_as_written(helpers, compiled_add):
    b = np.arange(1.0, 7.0).reshape(3, 2)
    b[1] = 0.0
    a = np.ones((3, 2))
    compiled_add(a, b, 1, 2)
    np.testing.assert_array_equal(a, np.ones((3, 2)) + b)


# ---------------------------------------------------------------- what stays as written
def _rewrite(text):
    fn = gast.parse(text).body[0]
    used = fill_gather_targets(fn)
    skipped = skip_reset_entries(fn)
    return unparse(fn), used, skipped


STEP = '''
def f(y_bar, w, n):
    x_bar = np.zeros_like(w)
    for j in range({start}, n):
        x_bar_j = x_bar[j]
        {extra}
        x_bar_j += y_bar[j - 1]
        x_bar[j] = x_bar_j
    for i in range({reset}, n):
        t = y_bar[i]
        y_bar[i] = {zero}
    {between}
    x_bar += y_bar
    return x_bar
'''


def _step(start="1", extra="pass", reset="1", zero="0.0", between="pass"):
    return STEP.format(start=start, extra=extra, reset=reset, zero=zero, between=between)


def test_the_plain_step_is_rewritten():
    text, used, skipped = _rewrite(_step())
    assert used == {"zeros_outside", "gather_start"} and skipped
    assert "add_outside(x_bar, y_bar, 1, n)" in text


@pytest.mark.parametrize("start", ["k", "-1"])
def test_a_start_not_written_out_keeps_the_zeros(start):
    text, used, _ = _rewrite(_step(start=start))
    assert not used and "np.zeros_like(w)" in text


def test_a_loop_reading_its_target_elsewhere_keeps_the_zeros():
    text, used, _ = _rewrite(_step(extra="x_bar_j += x_bar[0]"))
    assert not used and "x_bar_j = x_bar[j]" in text


@pytest.mark.parametrize("kwargs", [dict(zero="1.0"), dict(reset="-1"), dict(reset="k"),
                                    dict(between="y_bar[0] = 2.0"),
                                    dict(between="g(y_bar)")])
def test_the_add_stays_whole_unless_the_skipped_entries_are_zero(kwargs):
    text, _, skipped = _rewrite(_step(**kwargs))
    assert not skipped and "x_bar += y_bar" in text


def test_a_range_end_assigned_in_between_keeps_the_add():
    text, _, skipped = _rewrite(_step(between="n = n - 1"))
    assert not skipped and "x_bar += y_bar" in text


LOOP = '''
def f(u, steps, n, keep):
    x_bar = 2.0 * u
    for t in range(steps):
        y_bar = x_bar
        {middle}
        x_bar = zeros_outside(u, 0, n)
        for j in range(0, n):
            x_bar_j = gather_start(x_bar, j)
            x_bar_j += y_bar[j] * 0.5
            x_bar[j] = x_bar_j
        add_outside(x_bar, y_bar, 0, n)
    return x_bar
'''


def _reuse(middle="pass"):
    fn = gast.parse(LOOP.format(middle=middle)).body[0]
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    return reuse_previous_steps(fn, taken), unparse(fn)


def test_the_step_before_last_is_reused():
    changed, text = _reuse()
    assert changed
    assert "x_bar = zeros_outside(u, 0, n, x_bar_spare, x_bar_reusable)" in text
    assert text.index("x_bar_spare = x_bar\n") < text.index("for t in range(steps)")
    assert text.rstrip().endswith(
        "x_bar_spare = y_bar\n        x_bar_reusable = x_bar_started\n"
        "        x_bar_started = True\n    return x_bar")


@pytest.mark.parametrize("middle", ["keep.append(y_bar)", "z = x_bar", "g(y_bar)",
                                    "h = lambda: y_bar",
                                    "if t == 1:\n            continue",
                                    "y_bar = x_bar + 1.0", "r = y_bar[1:]"])
def test_an_array_that_may_be_kept_is_not_reused(middle):
    changed, text = _reuse(middle)
    assert not changed and "_spare" not in text


def test_an_adjoint_not_bound_before_the_loop_is_not_reused():
    fn = gast.parse(LOOP.format(middle="pass").replace("    x_bar = 2.0 * u\n", "")).body[0]
    assert not reuse_previous_steps(fn, set())


RESETS = '''
def f(u, w_bar, steps, n, keep):
    x_bar = {start}
    {after_start}
    c_bar = 0.0
    for t in range(steps):
        y_bar = x_bar
        x_bar = zeros_outside(u, 0, n)
        for j in range(0, n):
            x_bar_j = gather_start(x_bar, j)
            x_bar_j += y_bar[j] * 0.5
            x_bar[j] = x_bar_j
        for i in range(1, n - 1):
            t_bar = y_bar[i]
            y_bar[i] = 0.0
            {in_reset}
            c_bar = c_bar + t_bar * u[i]
        {between}
        add_outside(x_bar, y_bar, {bounds})
        {after}
    {after_loop}
    return x_bar, c_bar
'''


def _resets(start="2.0 * u", after_start="pass", in_reset="pass", between="pass",
            bounds="1, n - 1", after="pass", after_loop="pass"):
    fn = gast.parse(RESETS.format(start=start, after_start=after_start, in_reset=in_reset,
                                  between=between, bounds=bounds, after=after,
                                  after_loop=after_loop)).body[0]
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    assert reuse_previous_steps(fn, taken)
    return unparse(fn)


@pytest.mark.parametrize("start", ["2.0 * u", "np.zeros_like(u)", "u.copy()", "-w_bar"])
def test_resets_nothing_reads_are_dropped(start):
    """The first step's array is new, every later one is filled again before it is read, and
    add_outside skips the reset entries: the resets go, the reads stay."""
    text = _resets(start=start)
    assert "y_bar[i] = 0.0" not in text and "t_bar = y_bar[i]" in text


@pytest.mark.parametrize("kwargs", [
    dict(start="w_bar"),                        # the caller's array: it would see the resets
    dict(after_start="keep.append(x_bar)"),     # held by a list before the loop
    dict(after_start="z = x_bar"),              # held by another name
    dict(in_reset="s = y_bar[i]"),              # an entry read after its reset
    dict(between="s = y_bar[1]"),               # read between the resets and the add
    dict(after="s = y_bar[1]"),                 # read after the add
    dict(bounds="0, n"),                        # the add reads entries the loop reset
    dict(after_loop="keep.append(y_bar)"),      # the last step's array read after the loop
])
def test_resets_something_may_read_stay(kwargs):
    assert "y_bar[i] = 0.0" in _resets(**kwargs)


def test_the_heat_step_resets_nothing():
    """The benchmark's reverse step: no `un_bar[i] = 0.0` (1,000 x 500: -7 us)."""
    source = _step_source(heat, np.linspace(0.0, 1.0, 12), 0.2, 2)
    assert "un_bar[i] = 0.0" not in source and "un_bar[j] = 0.0" not in source
