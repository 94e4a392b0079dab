"""Loop adjoint forms for speed (issue #6): scalars saved in nested range loops get slots of
tapes allocated before the loop nest (``sq_tape[i * k + c] = sq``) instead of list pushes;
math-library values (np.exp) computed in such a nest are saved there rather than computed
again in the backward sweep; two sums into the same element in one backward step are one
update (``u_bar[i] += a + b``, checked on the heat equation in test_loop_adjoints.py).

Every gradient is checked against central finite differences (check_grads) or a hand-written
gradient; the source checks pin the generated form.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import check_grads


def lse_mixture(means, log_prec, x):
    """A log-sum-exp over components for each point, in loops (the GMM kernel's shape)."""
    n = x.shape[0]
    k = means.shape[0]
    total = 0.0
    for i in range(n):
        terms = np.zeros(k)
        for c in range(k):
            sq = 0.0
            for j in range(x.shape[1]):
                diff = x[i, j] - means[c, j]
                sq = sq + diff * diff
            terms[c] = log_prec[c] - 0.5 * np.exp(log_prec[c]) * sq
        top = terms[0]
        for c in range(1, k):
            if terms[c] > top:
                top = terms[c]
        s = 0.0
        for c in range(k):
            s = s + np.exp(terms[c] - top)
        total = total + np.log(s) + top
    return -total


def triangle(x, a):
    """Inner bounds that change with the outer index: no slots, lists (or recomputation)."""
    n = x.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            e = np.exp(a * (x[i] - x[j]))
            total = total + e * x[j]
    return total


def bounds_set_in_the_loop(x, a):
    """The inner trip count is computed in the outer step: it cannot size a tape up front."""
    total = 0.0
    for i in range(x.shape[0]):
        m = i % 3 + 1
        for j in range(m):
            t = np.tanh(a * x[i] + j)
            total = total + t * t
    return total


def early_exit(x, a):
    """A nested loop left early: the slots of the steps not run are never read."""
    total = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            if x[j] > 0.8:
                break
            e = np.exp(a * x[i] * x[j])
            total = total + e
    return total


def branches_in_a_nest(x, a):
    """Saves in both branches of an if inside a slotted nest (the inner range starts at 2)."""
    t = 0.0
    for i in range(x.shape[0]):
        for j in range(2, x.shape[0]):
            if x[j] > 0.0:
                e = np.tanh(a * x[i] - x[j])
            else:
                e = np.sin(a * x[j])
            t = t + e * x[i]
    return t


def while_and_continue_in_a_nest(x, a):
    t = 0.0
    for i in range(x.shape[0]):
        k = 0
        while k < 2:
            e = np.exp(a * x[i] + k)
            t = t + e
            k = k + 1
        for j in range(3):
            if j == 1:
                continue
            t = t + np.log(1.0 + x[j] * x[j] * a * a) * x[i]
    return t


def stepped_outer_loop(x, a):
    t = 0.0
    for i in range(1, x.shape[0], 2):
        for j in range(x.shape[0]):
            e = np.exp(a * x[j] * x[i])
            t = t + e * e
    return t


def _backward(source):
    return source.split("_bar = ", 1)[1]


@pytest.fixture(scope="module")
def mixture_args():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((3, 2)), rng.uniform(-0.5, 0.5, 3), rng.standard_normal((5, 2)))


def test_nested_scalar_saves_use_slots_and_match_finite_differences(mixture_args):
    check_grads(lse_mixture, mixture_args, modes=("rev",))
    g = ad.grad(lse_mixture, argnums=(0, 1))
    g(*mixture_args)
    source = g.source
    assert ".append(" not in source.split("terms = np.zeros(k)")[0], source  # scalars: slots
    # (a column of the nest's float tapes, which are of one length)
    assert "float_tapes = np.empty((n * max(k, 0), 3), dtype=np.float64)" in source, source
    assert re.search(r"sq_tape = float_tapes\[:, \d\]", source), source
    assert "sq_tape[i * max(k, 0) + c] = sq" in source, source
    assert "sq = sq_tape[i * max(k, 0) + c]" in source, source
    # the comparisons of the max loop, one per (i, c) with c from 1
    assert "[i * max(k - 1, 0) + (c - 1)]" in source, source


def test_exp_in_a_nest_is_saved_not_computed_again(mixture_args):
    g = ad.grad(lse_mixture, argnums=(0, 1))
    g(*mixture_args)
    backward = _backward(g.source)
    assert "np.exp(" not in backward, g.source
    assert g.source.count("np.exp(") == 2, g.source  # the forward sweep's two
    # 0.5 * exp(log_prec[c]) is cheap arithmetic on a saved value: computed again, not saved
    assert "mul_" not in g.source.split("for i in range(n):")[0], g.source


def test_hand_written_gradient_agrees(mixture_args):
    means, log_prec, x = mixture_args
    g_means, g_prec = ad.grad(lse_mixture, argnums=(0, 1))(*mixture_args)
    prec = np.exp(log_prec)
    diff = x[:, None, :] - means[None, :, :]
    sq = np.sum(diff * diff, axis=2)
    terms = log_prec - 0.5 * prec * sq
    resp = np.exp(terms - terms.max(axis=1, keepdims=True))
    resp /= resp.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(g_means, -np.einsum("nk,nkd->kd", resp, diff) * prec[:, None],
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_prec, -np.sum(resp * (1.0 - 0.5 * prec * sq), axis=0),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [triangle, bounds_set_in_the_loop, early_exit,
                                branches_in_a_nest, while_and_continue_in_a_nest,
                                stepped_outer_loop])
def test_nests_without_fixed_bounds_stay_right(fn):
    x = np.array([0.3, -0.7, 0.5, 0.9, 0.1])
    check_grads(fn, (x, 0.6), modes=("rev",))


def test_second_order_with_branches_in_a_nest():
    check_grads(branches_in_a_nest, (np.array([0.3, -0.7, 0.5, 0.9]), 0.6), order=2,
                modes=("rev",))


def test_triangle_has_no_slot_tape():
    g = ad.grad(triangle, argnums=(0, 1))
    g(np.array([0.3, -0.7, 0.5]), 0.6)
    assert "np.empty(" not in g.source, g.source


def test_second_order_through_slot_tapes(mixture_args):
    means, log_prec, x = mixture_args
    check_grads(lambda m, lp: lse_mixture(m, lp, x), (means, log_prec), order=2,
                modes=("rev",))


def test_sums_stay_apart_across_a_read():
    """``g[i] += a`` then a read of g then ``g[i] += b``: not merged (the read sees a)."""
    import gast

    from autodiff_ast.templates import unparse
    from autodiff_ast.tidy import merge_updates
    block = gast.parse("g[i] += a\ny = g[i]\ng[i] += b\nh[i] += a\nh[j] += b\nh[i] += y").body
    merge_updates(block)
    assert [unparse(s) for s in block] == ["g[i] += a", "y = g[i]", "g[i] += b", "h[j] += b",
                                           "h[i] += a + y"]


def taps(w, x):
    """A sum of shifted slices accumulated across a loop (the convolution benchmark)."""
    out = np.zeros((x.shape[0], x.shape[1] - 2))
    for a in range(3):
        out = out + w[a] * x[:, a:a + x.shape[1] - 2]
    return np.sum(out * out)


def taps_written(w, x):
    """The same with the accumulator also written in place: its adjoint must stay apart."""
    out = np.zeros((x.shape[0], x.shape[1] - 2))
    for a in range(3):
        out = out + w[a] * x[:, a:a + x.shape[1] - 2]
        out[0] = out[0] * w[a]
    return np.sum(out * out)


@pytest.fixture(scope="module")
def taps_args():
    rng = np.random.default_rng(1)
    return rng.standard_normal(3), rng.standard_normal((2, 6))


def test_accumulated_array_adjoint_passes_through_each_step(taps_args):
    check_grads(taps, taps_args, modes=("rev",))
    g = ad.grad(taps, argnums=(0, 1))
    g(*taps_args)
    backward = _backward(g.source)
    assert "np.zeros_like(out)" not in backward, g.source  # no new zeros per step


def test_accumulator_written_in_place_stays_right(taps_args):
    check_grads(taps_written, taps_args, modes=("rev",))
    g = ad.grad(taps_written, argnums=(0, 1))
    g(*taps_args)
    assert "np.zeros_like(out)" in _backward(g.source), g.source


# ---------------------------------------------------------------- vectors made each step
def centered_quadratics(means, q, x):
    """Each (point, component) step fills a new vector, read again by a second loop (the
    loop form of ADBench GMM's inner step): the tape keeps one row per step."""
    n, d = x.shape
    k = means.shape[0]
    total = 0.0
    for i in range(n):
        terms = np.zeros(k)
        for c in range(k):
            xc = np.empty(d)
            for j in range(d):
                xc[j] = x[i, j] - means[c, j]
            ss = 0.0
            for r in range(d):
                t = 0.0
                for j in range(d):
                    t = t + q[c, r, j] * xc[j]
                ss = ss + t * t
            terms[c] = -0.5 * ss
        total = total + np.log(np.sum(np.exp(terms)))
    return total


def vector_in_a_branch(w, x):
    total = 0.0
    v = np.zeros(3)
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            v = np.empty(3)
            for j in range(3):
                v[j] = w[j] * x[i]
        total = total + np.sum(v * v) * x[i]
    return total


def vector_then_break(w, x):
    total = 0.0
    for i in range(x.shape[0]):
        v = np.empty(3)
        for j in range(3):
            v[j] = np.sin(w[j] * x[i])
        total = total + np.sum(v * v)
        if total > 2.0:
            break
    return total


def growing_vectors(w, x):
    total = 0.0
    for i in range(x.shape[0]):
        v = np.zeros(i + 1)
        for j in range(i + 1):
            v[j] = w[j] * x[i]
        total = total + np.sum(v * v * v)
    return total


@pytest.fixture(scope="module")
def quadratic_args():
    rng = np.random.default_rng(3)
    return (rng.standard_normal((3, 2)), rng.standard_normal((3, 2, 2)),
            rng.standard_normal((4, 2)))


def test_a_vector_made_each_step_is_a_row_of_a_tape(quadratic_args):
    check_grads(centered_quadratics, quadratic_args, modes=("rev",))
    g = ad.grad(centered_quadratics, argnums=(0, 1))
    g(*quadratic_args)
    source = g.source
    assert "xc_tape = np.empty((n * max(k, 0), d), dtype=np.float64)" in source, source
    assert "xc = xc_tape[i * max(k, 0) + c]" in source, source
    assert "xc = xc_tape[i * max(k, 0) + c - 1] if i * max(k, 0) + c > 0 else " \
        "xc_before_loop" in source, source
    assert "xc_tape = []" not in source and "xc_tape.append(" not in source, source


def test_second_order_through_row_tapes(quadratic_args):
    means, q, x = quadratic_args
    check_grads(lambda m: centered_quadratics(m, q, x), (means,), order=2, modes=("rev",))


@pytest.mark.numba
def test_jit_gradient_through_row_tapes(quadratic_args):
    g = ad.jit(ad.grad(centered_quadratics, argnums=(0, 1, 2)))
    for got, want in zip(g(*quadratic_args),
                         ad.grad(centered_quadratics, argnums=(0, 1, 2))(*quadratic_args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    no_points = (quadratic_args[0], quadratic_args[1], np.zeros((0, 2)))
    np.testing.assert_array_equal(g(*no_points)[0], np.zeros((3, 2)))


def filled_each_step_and_read_after(x, w):
    """A vector made and filled element by element in each step, its maximum and a
    log-sum-exp taken, and the last step's vector read after the loop."""
    total = 0.0
    for i in range(3):
        v = np.zeros(x.shape[0])
        for c in range(x.shape[0]):
            v[c] = x[c] * (i + 0.5) - w * x[c] ** 2
        top = np.max(v)
        total = total + np.log(np.sum(np.exp(v - top))) + top
    return total + np.sum(np.sin(v))


@pytest.fixture(scope="module")
def filled_args():
    return (np.linspace(-1.0, 1.2, 9), 0.3)


def test_first_order_keeps_the_row_tape(filled_args):
    g = ad.grad(filled_each_step_and_read_after, argnums=(0, 1))
    check_grads(filled_each_step_and_read_after, filled_args, modes=("rev",))
    g(*filled_args)
    assert "v = v_tape[i]" in g.source, g.source


@pytest.mark.parametrize("modes", [("rev",), ("fwd",)])
def test_second_order_of_a_vector_filled_each_step(filled_args, modes):
    """Regression (found by the fuzzer once it drew vectors of 9 elements): the gradient's
    forward sweep wrote each step's vector through a view of its tape row, and transforming
    that gradient again (order 2, hessian, jvp of grad) was refused as shared memory. Code
    written for another transformation now keeps such vectors on list tapes."""
    check_grads(filled_each_step_and_read_after, filled_args, order=2, modes=modes)


def test_hessian_and_hvp_of_a_vector_filled_each_step(filled_args):
    x, w = filled_args
    h = ad.hessian(filled_each_step_and_read_after)(x, w)
    g = ad.grad(filled_each_step_and_read_after)
    eps = 1e-6
    columns = [(g(x + eps * e, w) - g(x - eps * e, w)) / (2 * eps) for e in np.eye(x.size)]
    np.testing.assert_allclose(h, np.array(columns).T, rtol=1e-6, atol=1e-7)
    u = np.cos(np.arange(x.size))
    _, hvp = ad.jvp(g, (x, w), (u, 0.0))
    np.testing.assert_allclose(hvp, h @ u, rtol=1e-9, atol=1e-10)


def test_vmap_of_the_gradient_of_a_vector_filled_each_step(filled_args):
    x, w = filled_args
    xs = np.stack([x, 0.5 * x, x[::-1]])
    g = ad.grad(filled_each_step_and_read_after)
    batched = ad.vmap(g, in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(batched, np.stack([g(row, w) for row in xs]), rtol=1e-12,
                               atol=1e-13)


@pytest.mark.parametrize("fn, why", [
    (vector_in_a_branch, "bound in a branch: a step may keep the vector before"),
    (vector_then_break, "a break: the steps after it bind nothing"),
    (growing_vectors, "a length that changes with the step"),
])
def test_vectors_not_bound_once_per_step_stay_on_lists(fn, why):
    w, x = np.array([0.4, -0.3, 0.8, 0.5]), np.array([0.7, -0.2, 0.9, 0.3])
    check_grads(fn, (w, x), modes=("rev",))
    g = ad.grad(fn, argnums=(0, 1))
    g(w, x)
    assert "v_tape = []" in g.source, (why, g.source)


def three_numbers_per_step(x, a):
    """Three floats saved in a slot of each step (two math-library values and a product the
    sine reads); the running total, overwritten in a branch, goes on a list."""
    total = 1.0
    for i in range(x.shape[0]):
        e = np.exp(a * x[i])
        s = np.sin(e * total)
        if s > 0.0:
            total = total * s + e
        else:
            total = total - s * e
    return total


def test_numbers_saved_in_a_step_are_columns_of_one_tape():
    """Tapes of numbers of one dtype and length are columns of one matrix: a step writes its
    numbers side by side (separate tapes evict each other from the cache: ADBench BA)."""
    x = np.array([0.3, -0.7, 0.5, 0.9, 0.1, -0.2])
    check_grads(three_numbers_per_step, (x, 0.6), modes=("rev",))
    g = ad.grad(three_numbers_per_step, argnums=(0, 1))
    g(x, 0.6)
    source = g.source
    match = re.search(r"(float_tapes\w*) = np\.empty\(\(\w+, 3\), dtype=np\.float64\)", source)
    assert match, source
    for column in range(3):
        assert f"_tape = {match.group(1)}[:, {column}]" in source, source


def test_second_order_through_column_tapes():
    """Code written to be differentiated again keeps separate tapes (columns of one matrix
    would be shared memory to the next pass); the Hessian matches differences."""
    check_grads(three_numbers_per_step, (np.array([0.3, -0.7, 0.5, 0.9]), 0.6), order=2,
                modes=("rev",))


@pytest.mark.numba
def test_jit_gradient_through_column_tapes():
    x = np.array([0.3, -0.7, 0.5, 0.9, 0.1, -0.2])
    got = ad.jit(ad.grad(three_numbers_per_step, argnums=(0, 1)))(x, 0.6)
    want = ad.grad(three_numbers_per_step, argnums=(0, 1))(x, 0.6)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
    empty = ad.jit(ad.grad(three_numbers_per_step, argnums=(0, 1)))(np.zeros(0), 0.6)
    np.testing.assert_array_equal(empty[0], np.zeros(0))
    assert empty[1] == 0.0


def shape_of_an_array_written_in_place(x, a):
    """`m` reads the shape of an array the step writes only in place: computed again in the
    backward step, not saved."""
    buf = np.zeros(3)
    total = 0.0
    for i in range(x.shape[0]):
        m = buf.shape[0]
        buf[i % m] = x[i] * a
        total = total + np.sum(buf * buf) / m
    return total


def shape_of_an_array_made_each_step(x, a):
    """The array is new in each step (the name is bound again): not the in-place case."""
    total = 0.0
    buf = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        m = buf.shape[0]
        buf = np.zeros(x.shape[0]) + buf[i] * a
        buf[i] = x[i] * a * m
        total = total + np.sum(buf * buf) * m
    return total


@pytest.mark.parametrize("fn", [shape_of_an_array_written_in_place,
                                shape_of_an_array_made_each_step])
def test_shapes_read_in_a_step_match_finite_differences(fn):
    x = np.array([0.3, -0.7, 0.5, 0.9, 0.1])
    check_grads(fn, (x, 0.6), modes=("rev",))


def test_the_shape_of_an_array_written_in_place_is_not_taped():
    g = ad.grad(shape_of_an_array_written_in_place, argnums=(0, 1))
    g(np.array([0.3, -0.7, 0.5]), 0.6)
    source = g.source
    assert "m_tape" not in source, source
    assert "m = buf.shape[0]" in source.split("for i in range(shape[0] - 1, -1, -1):")[1], source
