"""Local lists in differentiated code: built with ``append``, read back by ``pop``, by index
(``xs[j]``), by iteration (``for v in xs``, ``enumerate``) or stacked. A list's adjoint (and
tangent) holds one entry per element, in the element's place (reverse.py,
``Adjoints.init_list_zeros``; forward.py, ``Tangents.set_zero``); every gradient is checked
against central differences, in NumPy and compiled, and every Hessian (which differentiates
the gradient's list code again, and batches it) against differences of the gradient."""

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def pop_one_of_two(w):
    xs = []
    xs.append(w * 2.0)
    xs.append(w * 3.0)
    y = xs.pop()  # xs still holds w * 2.0, which reaches nothing
    return np.sum(y * y)


def pop_all(w):
    xs = []
    for i in range(3):
        xs.append(w * (i + 1.0))
    total = 0.0
    while len(xs) > 0:
        total = total + np.sum(xs.pop() ** 2)
    return total


def stacked(w):
    xs = []
    for i in range(3):
        xs.append(w * (i + 1.0))
    return np.sum(np.stack(xs) ** 2)


def indexed(w):
    xs = []
    for i in range(3):
        xs.append(w * (i + 1.0))
    return np.sum(xs[1] ** 2) + np.sum(xs[2]) + np.sum(xs[1] * xs[-1])


def literal(w):
    xs = [w * 2.0, w * 3.0]
    return np.sum(xs[0] * xs[1])


def iterated(w):
    xs = []
    for i in range(3):
        xs.append(np.sin(w * (i + 1.0)))
    t = 0.0
    for v in xs:
        t = t + np.sum(v * v)
    return t


def enumerated_scalars(w):
    xs = []
    for i in range(3):
        xs.append(np.sum(w) * (i + 1.0))
    t = 0.0
    for k, v in enumerate(xs):
        t = t + v * v * k
    return t


def indexed_in_a_loop(w):
    rows = []
    for i in range(4):
        rows.append(np.tanh(w * (0.5 + i)))
    total = 0.0
    for j in range(len(rows)):
        total = total + np.sum(rows[j] * rows[len(rows) - 1 - j])
    return total


def read_then_popped(w):
    xs = []
    for i in range(3):
        xs.append(np.cos(w + i))
    first = np.sum(xs[0] * w)
    last = xs.pop()
    return first + np.sum(last * last) + np.sum(xs[1])


def display_written_in_a_loop(w):
    xs = [w[0], w[1], w[2]]  # indexed by a variable and written: built as a list
    for i in range(3):
        xs[i] = xs[i] * xs[(i + 1) % 3]
    return xs[0] + xs[1] * xs[2]


def rows_of_a_grid(w):
    grid = []
    for i in range(2):
        row = []  # a new list each step: the backward step gets that step's list back
        for j in range(2):
            row.append(w[i] * w[j])
        grid.append(np.array(row))
    return np.sum(np.stack(grid) ** 2)


def build(v):
    out = []
    for k in range(2):
        out.append(v * (k + 1.0))
    return out


def from_a_helper(w):
    rows = build(w)  # (the helper's backward pops a copy: rows is the caller's too)
    return np.sum(rows[0] * rows[1])


def pairs_indexed(w):
    pairs = []  # a list of tuples, read back by index and unpacked
    for k in range(3):
        pairs.append((w[k] * w[0], np.sin(w[k])))
    total = 0.0
    for k in range(3):
        a, b = pairs[k]
        total = total + a * b
    return total


def pairs_popped(w):
    pairs = []  # tuples written out in the append: each element's adjoint to its value
    for k in range(3):
        pairs.append((w[k] * 2.0, w[k] ** 2))
    total = 0.0
    while len(pairs) > 0:
        a, b = pairs.pop()
        total = total + a * b * w[1]
    return total


def pairs_overwritten(w):
    pairs = []  # zeros first, then each entry replaced by a tuple of values
    for k in range(3):
        pairs.append((0.0, 0.0))
    for k in range(3):
        pairs[k] = (w[k] * 2.0, np.exp(w[k]))
    total = 0.0
    for k in range(2, -1, -1):  # read back last entry first
        a, b = pairs[k]
        total = total * 0.5 + a * np.cos(b)
    return total


def pairs_iterated(w):
    pairs = []  # `for a, b in pairs`: each entry unpacked by the loop
    for k in range(3):
        pairs.append((w[k] * 2.0, np.sin(w * w[k])))
    total = 0.0
    for a, b in pairs:
        total = total + a * np.sum(np.sin(b))
    return total


def pairs_enumerated(w):
    pairs = []
    for k in range(3):
        pairs.append((w[k], w[k] ** 2))
    total = 0.0
    for j, (a, b) in enumerate(pairs):
        total = total + a * b * (j + 1.0)
    return total


def vector_pairs(w):
    pairs = []  # a number and a vector per entry: popped, indexed twice, one replaced
    for k in range(3):
        pairs.append((np.tanh(w[k]) * (k + 1.0), w * w[k]))
    r = np.sum(w)
    a, b = pairs.pop()
    r = r + a * np.sum(b) + pairs[0][0] * np.sum(pairs[0][1])
    pairs[1] = (np.sin(w[2]), np.cos(w))
    c, d = pairs[1]
    return r + c * np.sum(d * d)


def stacked_twice(w):
    xs = []  # one list stacked by two calls: both stacks' adjoints reach its entries
    for k in range(4 if w.size > 3 else w.size):
        xs.append(w[k % w.size] * w[0])
    a = np.array(xs)
    b = np.stack(xs)
    return np.sum(a * a) + np.sum(np.sin(b))


def stacked_then_grown(w):
    xs = []  # stacked, appended to, stacked again
    for k in range(2):
        xs.append(w[k] ** 2)
    a = np.array(xs)
    xs.append(w[2] * 3.0)
    b = np.array(xs)
    return np.sum(a * w[:2]) + np.sum(b ** 2)


def restacked_while_growing(w):
    vals = []  # stacked in every step of the loop that grows it
    mean = 0.0
    for k in range(3):
        vals.append(w[k] * mean + w[k])
        mean = np.mean(np.array(vals))
    return mean * np.sum(np.array(vals) ** 2)


PROGRAMS = [pop_one_of_two, pop_all, stacked, indexed, literal, iterated, enumerated_scalars,
            indexed_in_a_loop, read_then_popped, display_written_in_a_loop, rows_of_a_grid,
            from_a_helper, pairs_indexed, pairs_popped, pairs_overwritten, pairs_iterated,
            pairs_enumerated, vector_pairs, stacked_twice, stacked_then_grown]
SECOND_ORDER_GAPS = {}  # programs whose second derivatives are known wrong
W = np.array([0.3, -0.7, 1.1])


def _fd_grad(f, w, eps=1e-6):
    return np.array([(f(w + eps * e) - f(w - eps * e)) / (2 * eps) for e in np.eye(w.size)])


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_gradient_through_a_list_matches_finite_differences(f):
    np.testing.assert_allclose(ad.grad(f)(W), _fd_grad(f, W), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_tangent_through_a_list_matches_finite_differences(f):
    v = np.array([0.2, 0.5, -0.4])
    _, tangent = ad.jvp(f, (W,), (v,))
    np.testing.assert_allclose(tangent, _fd_grad(f, W) @ v, rtol=1e-6, atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("f", [f for f in PROGRAMS if f is not rows_of_a_grid],
                         ids=lambda f: f.__name__)
def test_jit_gradient_through_a_list(f):
    np.testing.assert_allclose(jit(ad.grad(f))(W), ad.grad(f)(W), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_hessian_through_a_list_matches_differences_of_the_gradient(f):
    eps = 1e-5
    grad = ad.grad(f)
    expected = np.array([(grad(W + eps * e) - grad(W - eps * e)) / (2 * eps)
                         for e in np.eye(W.size)])
    np.testing.assert_allclose(ad.hessian(f)(W), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_batched_gradient_through_a_list_is_the_per_example_gradient(f):
    batch = np.random.default_rng(3).standard_normal((4, 3))
    expected = np.stack([ad.grad(f)(w) for w in batch])
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(batch), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.numba
@pytest.mark.parametrize("f", [pop_all, iterated, read_then_popped],
                         ids=lambda f: f.__name__)
def test_jit_of_batched_and_second_derivatives_through_a_list(f):
    """The batched list code compiles: an unbatched value appended to (or written into) a
    batched list is a batched array of its own, not a broadcast view (a list holds one array
    type under Numba)."""
    batch = np.random.default_rng(4).standard_normal((3, 3))
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(f)))(batch), ad.vmap(ad.grad(f))(batch),
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jit(ad.hessian(f))(W), ad.hessian(f)(W), rtol=1e-12,
                               atol=1e-13)


@pytest.mark.parametrize("f", [
    pytest.param(f, marks=pytest.mark.xfail(strict=True, reason=SECOND_ORDER_GAPS[f]))
    if f in SECOND_ORDER_GAPS else f for f in PROGRAMS], ids=lambda f: f.__name__)
def test_second_order_check_grads_through_a_list(f):
    """Gradients of gradients and directional derivatives in both modes (check_grads order 2:
    a helper returning a list, its second output summed entry by entry, not concatenated)."""
    ad.check_grads(f, (W,), order=2, modes=("fwd", "rev"))


@pytest.mark.numba
def test_jit_gradient_through_rows_made_in_each_step():
    """Each step's row list is saved; the typed placeholder before the loop ([0.0][:0]) lets
    Numba compile it (it refused 'list(undefined)' before)."""
    np.testing.assert_allclose(jit(ad.grad(rows_of_a_grid))(W), _fd_grad(rows_of_a_grid, W),
                               rtol=1e-6, atol=1e-8)


def test_gradient_of_the_gradient_through_rows_popped_from_a_list_of_lists():
    """The backward code rebinds `row = row_tape.pop()` in a loop: differentiated again, each
    step gets its row list back (it was never taped, so the second backward indexed past a
    row's end), and each example of jacrev's loop over cotangents gets its own copy of the
    tapes it pops (the second example found them emptied)."""
    g = ad.grad(rows_of_a_grid)
    expected = np.array([(g(W + 1e-6 * e) - g(W - 1e-6 * e)) / 2e-6 for e in np.eye(W.size)])
    jacobian = ad.jacrev(g)
    np.testing.assert_allclose(jacobian(W), expected, rtol=1e-6, atol=1e-8)
    assert "copy.deepcopy(" in jacobian.source
    _, pullback = ad.vjp(g, W)
    for e, row in zip(np.eye(W.size), expected):
        np.testing.assert_allclose(pullback(e)[0], row, rtol=1e-6, atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("f", [pairs_indexed, pairs_popped], ids=lambda f: f.__name__)
def test_jit_gradient_through_a_list_of_tuples(f):
    """A list of tuples of floats compiles (Numba's typed list of a homogeneous tuple)."""
    expected = _fd_grad(f, W)
    np.testing.assert_allclose(jit(ad.grad(f))(W), expected, rtol=1e-6, atol=1e-8)


def test_a_list_restacked_in_every_step_of_the_loop_that_grows_it():
    """np.array(vals) has one more row each step: the backward step reads its size, so each
    step's array is kept (autodiff_ast/loop_shapes.py)."""
    np.testing.assert_allclose(ad.grad(restacked_while_growing)(W),
                               _fd_grad(restacked_while_growing, W), rtol=1e-6, atol=1e-8)


def test_a_list_restacked_in_every_step_second_order():
    ad.check_grads(restacked_while_growing, (W,), order=2, modes=("rev", "fwd"))


@pytest.mark.numba
def test_a_list_restacked_in_every_step_under_jit():
    np.testing.assert_allclose(jit(ad.grad(restacked_while_growing))(W),
                               _fd_grad(restacked_while_growing, W), rtol=1e-6, atol=1e-8)


def rows_made_in_each_step(x):
    s = 0.0
    for i in range(3):
        row = []  # a list of numbers made anew in every step
        for j in range(2):
            row.append(x[i + j] * x[j])
        s = s + np.sum(np.exp(np.array(row)))
    return s


@pytest.mark.numba
def test_jit_list_made_anew_in_each_step():
    """The forward sweep saves the list of each step; its placeholder before the loop says
    the element type (``[0.0][:0]``), which Numba needs to type an empty list."""
    x = np.array([0.3, -0.7, 1.1, 0.5])
    np.testing.assert_allclose(jit(ad.grad(rows_made_in_each_step))(x),
                               _fd_grad(rows_made_in_each_step, x), rtol=1e-6, atol=1e-8)
    ad.check_grads(rows_made_in_each_step, (x,), order=2, modes=("rev", "fwd"))


@pytest.mark.numba
def test_jit_stacks_a_list_of_numbers():
    """np.stack of a list of floats compiles (the stack helper takes numbers as 0-d rows)."""
    np.testing.assert_allclose(jit(ad.grad(stacked_twice))(W), _fd_grad(stacked_twice, W),
                               rtol=1e-6, atol=1e-8)
