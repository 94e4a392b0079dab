"""Loop adjoints written the way a person would: values recomputed instead of taped, partial
sums of accumulation loops not saved, array adjoints accumulated in place inside loops.

Every gradient is checked against central finite differences (check_grads); the source
checks say what the backward sweep must not contain (tapes inside the loops, new arrays).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import check_grads


def heat(u0, c, steps):
    u = u0.copy()
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def pair_energy(pos, sigma):
    n = pos.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            s6 = (sigma * sigma / r2) ** 3
            energy = energy + (s6 * s6 - s6)
    return energy


def mixture(means, x):
    total = 0.0
    for i in range(x.shape[0]):
        s = 0.0
        for c in range(means.shape[0]):
            sq = 0.0
            for j in range(x.shape[1]):
                diff = x[i, j] - means[c, j]
                sq = sq + diff * diff
            s = s + np.exp(-0.5 * sq)
        total = total + np.log(s)
    return total


def partial_sums_read(x):
    """The running sum's intermediate values are read: they must stay on the tape."""
    s = 0.0
    out = 0.0
    for i in range(len(x)):
        s = s + x[i]
        out = out + s * s
    return out


def branch_rebinds(x):
    s = 0.0
    for v in x:
        s = s + (v if v > 0.0 else 0.1 * v) * v
    return s


def operand_written_later(x):
    """`a` reads x[i], which the same step overwrites: `a` must be saved, not recomputed."""
    y = x.copy()
    total = 0.0
    for i in range(len(y)):
        a = y[i] * 2.0
        y[i] = a * a
        total = total + a * y[i]
    return total


def two_states(u0, c, steps):
    """Two swapped states; the old one (v) is read after the swap, so its adjoint is not dead
    where the adjoint of ``u = un`` is added (no moving of arrays there)."""
    u = u0.copy()
    v = u0 * 0.5
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * (v[i - 1] - u[i + 1]) * u[i]
        v = u
        u = un
        u = u + 0.1 * np.sin(v)
    return np.sum(u * u) + np.sum(v)


def alias_in_loop(x):
    u = x * 1.0
    for _k in range(3):
        v = u
        u = u * 1.5 + v
    return np.sum(u * u)


RNG = np.random.default_rng(7)
CASES = {
    "heat": (heat, (RNG.standard_normal(7), 0.2, 3), (0, 1)),
    "pair_energy": (pair_energy, (np.array([[0.0, 0.0], [1.1, 0.2], [0.3, 1.2], [1.4, 1.3]]),
                                  0.9), (0, 1)),
    "mixture": (mixture, (RNG.standard_normal((3, 2)), RNG.standard_normal((4, 2))), (0, 1)),
    "partial_sums_read": (partial_sums_read, (RNG.standard_normal(5),), (0,)),
    "branch_rebinds": (branch_rebinds, (np.array([0.3, -0.6, 0.2, 1.5, -0.4]),), (0,)),
    "operand_written_later": (operand_written_later, (RNG.standard_normal(4),), (0,)),
    "alias_in_loop": (alias_in_loop, (RNG.standard_normal(4),), (0,)),
    "two_states": (two_states, (RNG.standard_normal(6), 0.3, 3), (0, 1)),
}


def _finite_differences(f, args, k, eps=1e-6):
    x = np.asarray(args[k], dtype=float)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        moved = []
        for sign in (1.0, -1.0):
            y = x.copy()
            y[idx] += sign * eps
            moved.append(f(*args[:k], y if x.ndim else float(y), *args[k + 1:]))
        out[idx] = (moved[0] - moved[1]) / (2 * eps)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences(name):
    f, args, argnums = CASES[name]
    grads = ad.grad(f, argnums=argnums)(*args)
    grads = grads if isinstance(grads, tuple) else (grads,)
    for got, k in zip(grads, argnums):
        np.testing.assert_allclose(got, _finite_differences(f, args, k), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["partial_sums_read", "operand_written_later", "alias_in_loop"])
def test_check_grads(name):
    f, args, _ = CASES[name]
    check_grads(f, args, modes=("rev",))


def _backward(source):
    return source.split("_bar = ", 1)[1]


def test_heat_backward_recomputes_the_stencil_and_adds_in_place():
    g = ad.grad(heat, argnums=(0, 1))
    g(np.ones(5), 0.1, 2)
    source = g.source
    # the state of each step is a row of one tape (test_copy_targets), nothing per element
    assert source.count(".append(") == 0, source
    assert "un = u_tape[_step]" in source and "un[:] = u" in source, source
    assert "(u[i - 1] - 2.0 * u[i] + u[i + 1])" in _backward(source), source
    assert "u_bar += un_bar" in source, source
    # the adjoint of `u = un` moves u_bar's array (u_bar is set anew right after) instead of
    # adding it into zeros, and un_bar is then not zeroed at the end of each step
    assert "un_bar = u_bar" in source and "un_bar += u_bar" not in source, source
    assert _backward(source).count("np.zeros_like(un)") <= 1, source
    # `u = un` needs no copy: un is a new array (u.copy()) before each step writes into it
    assert "u = un\n" in source and "un.copy()" not in source, source


def test_heat_gathers_each_element_from_its_three_neighbours():
    u0 = np.sin(np.linspace(0.0, 3.0, 7))
    check_grads(heat, (u0, 0.2, 3), modes=("rev",))
    g = ad.grad(heat, argnums=(0, 1))
    g(u0, 0.2, 3)
    backward = _backward(g.source)
    # gather form (autodiff_ast/gather_form.py): one add per neighbour, none into u_bar[i +- 1],
    # into a local read from u_bar[j] once and written back once
    assert backward.count("u_bar_j += ") == 3, g.source
    assert "u_bar_j += un_bar[j - 1] * c" in backward, g.source
    assert "u_bar_j += un_bar[j + 1] * c" in backward, g.source
    assert backward.count("u_bar_j = u_bar[j]") == 1, g.source
    assert backward.count("u_bar[j] = u_bar_j") == 1, g.source
    assert "u_bar[i" not in backward, g.source


def test_pair_loop_needs_no_tape():
    g = ad.grad(pair_energy)
    g(CASES["pair_energy"][1][0], 0.9)
    assert "_tape" not in g.source, g.source
    assert "dx = pos[i, 0] - pos[j, 0]" in _backward(g.source), g.source


def test_accumulation_loop_saves_its_result_not_its_partial_sums():
    g = ad.grad(mixture)
    g(*CASES["mixture"][1])
    # the partial sums of sq are never read backwards, nor the shapes saved
    assert "sq_tape" not in g.source and "shape_tape" not in g.source, g.source
    # s once per point, exp once per pair: slots of arrays allocated before the loop nest
    assert ".append(" not in g.source, g.source
    assert "s_tape = np.empty(item, dtype=np.float64)" in g.source, g.source
    assert "exp_4_tape[i * means.shape[0] + c] = exp_4" in g.source, g.source
    # the backward steps of the innermost loop are independent: they run in ascending order
    assert g.source.count("for j in range(x.shape[1]):") == 2, g.source


def test_partial_sums_that_are_read_stay_saved():
    g = ad.grad(partial_sums_read)
    g(CASES["partial_sums_read"][1][0])
    assert "s_tape" in g.source, g.source
    assert "for i in range(n - 1, -1, -1):" in g.source, g.source  # s_bar flows between steps


# ---------------------------------------------------------------- helpers and views in loops
def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _cell(weight, hidden, inp):
    gate = _sigmoid(inp * weight[0] + hidden * weight[1])
    return gate * np.tanh(hidden + inp)


def rnn(weights, h0, xs):
    h = h0
    for t in range(xs.shape[0]):
        w = weights[t]
        h = _cell(w, h, xs[t])
    return np.sum(h * h)


def centered_energy(x, means):
    total = 0.0
    for i in range(x.shape[0]):
        for c in range(means.shape[0]):
            xc = x[i] - means[c]
            total = total + np.sum(xc * xc) * (c + 1.0)
    return total


RNN_ARGS = (np.linspace(-0.8, 0.9, 24).reshape(4, 2, 3), np.array([0.1, -0.2, 0.3]),
            np.linspace(-1.0, 1.0, 12).reshape(4, 3))
CENTERED_ARGS = (np.linspace(-1.0, 1.0, 6).reshape(3, 2), np.array([[0.2, -0.1], [0.5, 0.4]]))


def test_helper_called_in_a_loop_recomputes_instead_of_taping_its_residuals():
    check_grads(rnn, RNN_ARGS, order=2, modes=("rev",))
    g = ad.grad(rnn, argnums=(0, 1))
    g(*RNN_ARGS)
    source = g.source
    # the loop calls the helper's primal; its backward function runs it again: no residuals
    # handed over, so only the loop-carried state goes on a tape
    assert "_cell_fwd" not in source and "h = _cell(w, h, xs[t])" in source, source
    assert "def _cell_bwd(weight, hidden, inp, out_bar):" in source, source
    assert source.count(".append(") == 1 and "h_tape.append(h)" in source, source
    # the row view `w = weights[t]` is taken again, not saved
    assert "w_tape" not in source, source


def test_helper_forward_keeps_its_temporaries_when_its_primal_is_emitted_too():
    g = ad.grad(rnn)
    g(*RNN_ARGS)
    # _sigmoid's forward function and its primal copy (called by _cell) share statements:
    # tidying the primal copy must not inline exp into the forward function (3 exps then)
    fwd = g.source.split("def _sigmoid_fwd(", 1)[1].split("\n\n", 1)[0]
    assert fwd.count("np.exp(") == 1, g.source
    assert "def _sigmoid(v):" in g.source, g.source


def test_views_and_array_arithmetic_in_a_loop_are_recomputed():
    check_grads(centered_energy, CENTERED_ARGS, order=2, modes=("rev",))
    g = ad.grad(centered_energy, argnums=(0, 1))
    g(*CENTERED_ARGS)
    assert "_tape" not in g.source, g.source
    assert "xc = x[i] - means[c]" in _backward(g.source), g.source
    # the two equal contributions of `xc * xc` to xc_bar are one, doubled (one pass)
    assert _backward(g.source).count("* xc)") == 1 and "2.0 * (" in g.source, g.source


def layered_state(w, s, steps):
    """A state of rows, each step's new rows written into a copy (ADBench's LSTM state)."""
    total = 0.0
    for _ in range(steps):
        s2 = s.copy()
        for i in range(s.shape[0]):
            row = s[i]  # a view of the array s holds: never written once s holds it
            s2[i] = np.tanh(row * w + 0.1 * i)
        s = s2
        total = total + np.sum(s * s)
    return total


def rewritten_after_the_takeover(w, s, steps):
    """s takes s2's array, then s2 (the same array) is written: a view taken of s in
    between sees the write, so the backward sweep must read a copy of it."""
    total = 0.0
    for _ in range(steps):
        s2 = s.copy()
        s = s2
        row = s[0]
        y = np.sum(row * w)
        s2[0] = np.tanh(row)
        total = total + y * y + np.sum(s)
    return total


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "jit"])
def test_views_of_a_state_that_only_takes_over_new_arrays_are_not_copied(compiled):
    rng = np.random.default_rng(11)
    args = (rng.standard_normal(4) * 0.5, rng.standard_normal((3, 4)) * 0.5, 3)
    check_grads(layered_state, args, modes=("rev",))
    g = ad.grad(layered_state, argnums=(0, 1))
    if compiled:
        jitted = ad.jit(g)
        for got, want in zip(jitted(*args), g(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
        return
    g(*args)
    assert "row = s[i]\n" in g.source and "s[i].copy()" not in g.source, g.source


def test_a_write_after_the_takeover_is_refused_before_any_copy_is_needed():
    """The one case where a view of such a state would go stale (the array written after s
    took it over) is refused by the front end's shared-memory check, so dropping the copies
    never hands the backward sweep a changed view."""
    rng = np.random.default_rng(12)
    args = (rng.standard_normal(4) * 0.5, rng.standard_normal((3, 4)) * 0.5, 3)
    with pytest.raises(ad.UnsupportedSyntaxError, match="shares memory"):
        ad.grad(rewritten_after_the_takeover, argnums=(0, 1))(*args)


def heat_exchanging_buffers(u0, c):
    u = u0.copy()
    un = np.zeros_like(u0)
    for _ in range(3):
        for i in range(1, u.shape[0] - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, un = un, u
    return np.sum(u ** 2)


def heat_copying_the_new_buffer(u0, c):
    u = u0.copy()
    un = np.zeros_like(u0)
    for _ in range(3):
        for i in range(1, u.shape[0] - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un.copy()
    return np.sum(u ** 2)


def heat_exchanging_buffers_in_a_branch(u0, c):
    u = u0.copy()
    un = np.zeros_like(u0)
    for step in range(4):
        un[1:-1] = u[1:-1] + c * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        if step % 2 == 0:
            u, un = un, u
        else:
            u = un.copy()
    return np.sum(u ** 2)


def heat_exchanging_in_slices(u0, c):
    u = u0.copy()
    un = np.empty_like(u0)
    for _ in range(3):
        un[1:-1] = u[1:-1] + c * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        un[0] = u[0]
        un[-1] = u[-1] * c
        u, un = un, u
    return np.sum(u ** 2) + np.sum(un)


def heat_reading_the_old_buffer_after_the_write(u0, c):
    u = u0.copy()
    un = u
    for _ in range(2):
        un[1:-1] = u[1:-1] * c
        u, un = un, u
    return np.sum(u ** 2)


@pytest.mark.parametrize("f", [heat_exchanging_buffers, heat_copying_the_new_buffer,
                               heat_exchanging_in_slices], ids=lambda f: f.__name__)
def test_exchanged_buffers_are_differentiated(f):
    """Two buffers exchanged each step (``u, un = un, u``) never hold the same array: the
    shared-memory check keeps one allocation map per path (it merged them and refused this
    as sharing), and a tape keeping u's array copies it, as un writes into it next step."""
    from autodiff_ast.jit import jit
    args = (np.linspace(0.0, 1.0, 6) ** 2, 0.1)
    check_grads(f, args, modes=("fwd", "rev"))
    np.testing.assert_allclose(jit(ad.grad(f, argnums=(0, 1)))(*args)[1],
                               ad.grad(f, argnums=(0, 1))(*args)[1], rtol=1e-12)


def test_exchanged_buffers_batched_and_at_second_order():
    # the generated gradient, differentiated again or batched, exchanges a copy made each
    # step with the other buffer: two generations of that copy are told apart
    u0, c = np.linspace(0.0, 1.0, 6) ** 2, 0.1
    f = heat_exchanging_in_slices
    hessian = ad.hessian(f)(u0, c)
    step = 1e-5
    by_differences = np.stack([(ad.grad(f)(u0 + step * e, c) - ad.grad(f)(u0 - step * e, c))
                               / (2 * step) for e in np.eye(6)])
    np.testing.assert_allclose(hessian, by_differences, rtol=1e-6, atol=1e-8)
    rows = np.stack([u0, 2.0 * u0, u0 ** 2])
    np.testing.assert_allclose(ad.vmap(ad.grad(f), in_axes=(0, None))(rows, c),
                               np.stack([ad.grad(f)(r, c) for r in rows]), rtol=1e-12)


@pytest.mark.xfail(strict=True, raises=ad.UnsupportedSyntaxError,
                   reason="the check names an array by the statement that made it: copies "
                          "made by one statement on two trips look like one array")
def test_exchanged_buffers_with_a_copy_on_another_branch():
    check_grads(heat_exchanging_buffers_in_a_branch, (np.linspace(0.0, 1.0, 6) ** 2, 0.1),
                modes=("rev",))


def test_buffers_that_are_one_array_are_still_refused():
    args = (np.linspace(0.0, 1.0, 6) ** 2, 0.1)
    with pytest.raises(ad.UnsupportedSyntaxError, match="shares memory"):
        ad.grad(heat_reading_the_old_buffer_after_the_write)(*args)


# ---------------------------------------------------------------- index reads in a loop
def _residual(cam, pt):
    return np.sin(cam[0]) * pt[0] + cam[1] * pt[1] * pt[1]


def gathered(cams, pts, pairs):
    total = 0.0
    for i in range(pairs.shape[0]):
        r = _residual(cams[pairs[i, 0]], pts[pairs[i, 1]])
        total = total + r * r
    return total


def test_an_index_read_in_a_loop_is_read_once_per_backward_step():
    """``pairs[i, 0]``, an integer a step reads from an array nobody writes, is read again at
    the top of the backward step rather than taped: once, into a name, not at every use
    (each use was a load the compiler could not share across the adjoint's stores)."""
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(3)
    cams, pts = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    pairs = np.array([[i % 3, i % 4] for i in range(7)], dtype=np.int64)
    g = jit(ad.grad(gathered, argnums=(0, 1)))
    plain = ad.grad(gathered, argnums=(0, 1))
    for got, want in zip(g(cams, pts, pairs), plain(cams, pts, pairs)):
        np.testing.assert_allclose(got, want, rtol=1e-13)
    check_grads(lambda c, p: gathered(c, p, pairs), (cams, pts), modes=("rev",))
    entry = g.source[g.source.index("def grad_gathered("):]
    backward = entry[entry.rindex("for i in range("):]  # (the forward loop may be outlined)
    assert backward.count("pairs[i, 0]") == 1, g.source
