"""Vector arithmetic in loops written as element loops under jit (autodiff_ast/vector_loops.py),
and the tape rows reverse mode keeps for a vector made in each step.

Every compiled gradient is compared with the plain-NumPy gradient of the same function and
with central differences; every compiled value with NumPy's. The generated source is checked
to show that the rewrite happened (a test cannot pass through jit's fallback to the original
program), and the errors NumPy raises (lengths that do not broadcast) are raised too.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from test_scalarize import central  # central differences of one argument

import autodiff_ast as ad
from autodiff_ast.build import prepare
from autodiff_ast.normalize import spec_of
from autodiff_ast.vector_loops import vector_loops

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- programs
def mixture(alphas, means, qs, x):
    """ADBench GMM's inner step: rows, a product with a row of a 3-D array, a sum of squares,
    a log-sum-exp (a helper) over the components."""
    n, k = x.shape[0], alphas.shape[0]
    total = 0.0
    for i in range(n):
        terms = np.zeros(k)
        for c in range(k):
            centered = x[i] - means[c]
            q = np.dot(qs[c], centered)
            terms[c] = alphas[c] - 0.5 * np.sum(q * q)
        total = total + logsumexp(terms)
    return total


def logsumexp(v):
    top = np.max(v)
    return np.log(np.sum(np.exp(v - top))) + top


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def cell(weight, bias, hidden, state, inp):
    """An LSTM layer's step: slices with bounds known at run time, an elementwise helper."""
    h = hidden.shape[0]
    forget = sigmoid(inp * weight[0:h] + bias[0:h])
    ingate = sigmoid(hidden * weight[h:2 * h] + bias[h:2 * h])
    change = np.tanh(hidden * weight[2 * h:] + bias[2 * h:])
    state = state * forget + ingate * change
    return np.tanh(state) * ingate, state


def recurrent(weight, bias, xs):
    h = xs.shape[1]
    hidden, state = np.zeros(h), np.zeros(h)
    total = 0.0
    for t in range(xs.shape[0]):
        hidden, state = cell(weight, bias, hidden, state, xs[t])
        total = total + np.sum(hidden * xs[t])
    return total


def slices(v, x, lo, hi):
    """Slices of a run-time vector with negative, past-the-end and crossing bounds."""
    total = 0.0
    for i in range(x.shape[0]):
        a = v[-3:] * x[i, 0]
        b = v[lo:hi] * x[i, 1]
        c = v[2:100] * x[i, 2]
        total = total + np.sum(a * a) + np.sum(np.sin(b)) + np.dot(c, c)
    return total


def kept_after(x, w):
    """A vector made in the loop and read after it, and a row kept whole (passed on)."""
    last = np.zeros(x.shape[1])
    total = 0.0
    for i in range(x.shape[0]):
        row = x[i]
        last = np.exp(row * w) - 1.0
        total = total + np.sum(last) + logsumexp(row)
    return total + np.sum(last * last)


def scaled_by_sums(x, w):
    """A sum read by the next statements (found by the fuzzer: it was read in the loop that
    was still accumulating it), directly and as a helper's argument."""
    total = 0.0
    for i in range(x.shape[0]):
        s = np.sum(x[i] * w)
        v = np.tanh(x[i] * s) / (1.0 + s * s)
        total = total + np.sum(scaled(v, np.sum(v)))
    return total


def rebound(x, w):
    """A vector computed from itself, and read after the loop."""
    v = w.copy()
    total = 0.0
    for i in range(x.shape[0]):
        v = v * x[i] + 0.5
        v = np.tanh(v)
        total = total + np.sum(v * w)
    return total + np.sum(v)


def damped(x, w):
    """A while loop and a branch around vector statements, np.dot of two vectors."""
    v = w * 0.5
    total = 0.0
    steps = 0
    while total < 3.0 and steps < 5:
        if steps % 2 == 0:
            v = np.sin(v) + x[steps] * 0.25
        else:
            v = v * np.cos(x[steps])
        total = total + np.dot(v, w) * 0.1 + 1.0
        steps += 1
    return total + np.sum(v * v)


def scaled(a, b):
    return a * b + np.cbrt(a * a + 1.0)


def broadcast_row(x, w):
    """Rows of an N x 1 matrix broadcast against w: left as NumPy arithmetic."""
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.sum(np.tanh(x[i] * w))
    return total


def _grads_agree(fn, args, argnums):
    compiled = ad.jit(ad.grad(fn, argnums=argnums))
    got, want = compiled(*args), ad.grad(fn, argnums=argnums)(*args)
    for g, w, k in zip(got, want, argnums):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, central(fn, list(args), k), rtol=1e-5, atol=1e-7 * scale)
    primal = ad.jit(fn)
    assert primal(*args) == pytest.approx(fn(*args), rel=1e-12, abs=1e-12)
    return compiled


def _rewritten(fn, *args):
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    _, program, core = prepare(fn, {n: spec_of(a) for n, a in zip(names, args)})
    return vector_loops(program, core)


def mixture_args(n=5, k=3, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(k), rng.standard_normal((k, d)),
            rng.standard_normal((k, d, d)) * 0.5, rng.standard_normal((n, d)))


def recurrent_args(t=4, h=9, seed=1):  # h > scalarize.MAX_LENGTH: a run-time length
    rng = np.random.default_rng(seed)
    return rng.standard_normal(3 * h) * 0.5, rng.standard_normal(3 * h) * 0.1, \
        rng.standard_normal((t, h))


# ---------------------------------------------------------------- the rewrite itself
def test_the_mixture_step_is_element_loops():
    text = _rewritten(mixture, *mixture_args(d=10))
    ast.parse(text)
    loop = text.split("def mixture")[1]
    assert "x[i] - means[c]" not in loop and "np.dot(" not in loop, text
    assert "same_length(x.shape[1], means.shape[1])" in loop, text
    assert "qs[c, j_" in loop and "np.empty(" in loop, text  # the centred row is made whole
    assert "centered[" in loop, text


def test_a_cell_is_one_loop_and_its_helper_is_inlined():
    text = _rewritten(recurrent, *recurrent_args())
    body = text.split("def cell")[1].split("\ndef ")[0]
    assert body.count("for j") == 1, text  # slices, helper calls, tanh: one loop
    assert "sigmoid(" not in body and "slice_start(weight.shape[0], h)" in body, text


def test_rewrite_is_deterministic():
    assert _rewritten(mixture, *mixture_args()) == _rewritten(mixture, *mixture_args())


def test_nothing_to_rewrite_returns_none():
    assert _rewritten(lambda x: np.sum(np.tanh(x) * x), np.ones(12)) is None  # no loop


def test_size_one_rows_stay_numpy_arithmetic():
    text = _rewritten(broadcast_row, np.ones((4, 1)), np.ones(12))
    assert "mul_2 = item_3 * w" in text, text  # the broadcast, as written
    assert "np.tanh(mul_2[j])" in text, text  # what follows it, on its result


# ---------------------------------------------------------------- compiled results
def test_mixture_gradient(quick_llvm):
    compiled = _grads_agree(mixture, mixture_args(), (0, 1, 2, 3))
    assert "same_length(" in compiled.source
    # the adjoints of the rows each step makes are zeroed in place after the step
    # (codegen/tape_rows.py): no choice rebinding them in the loop
    assert "centered_bar[:] = 0" in compiled.source and "terms_bar[:] = 0" in compiled.source
    assert "if centered_bar.shape" not in compiled.source, compiled.source
    assert "if terms_bar.shape" not in compiled.source, compiled.source


def test_mixture_tape_keeps_a_row_per_step(quick_llvm):
    compiled = ad.jit(ad.grad(mixture, argnums=(1, 2)))  # (qs's adjoint reads each row)
    compiled(*mixture_args())
    assert "centered_tape = np.empty((" in compiled.source, compiled.source
    assert "centered_tape.append" not in compiled.source


def test_recurrent_gradient(quick_llvm):
    compiled = _grads_agree(recurrent, recurrent_args(), (0, 1, 2))
    assert "slice_start(" in compiled.source


def test_slice_bounds_follow_numpy(quick_llvm):
    rng = np.random.default_rng(2)
    v, x = rng.standard_normal(11), rng.standard_normal((3, 3))
    for lo, hi in ((2, 7), (-5, -1), (6, 2), (0, 40), (-40, 3)):
        _grads_agree(slices, (v, x, lo, hi), (0, 1))


def test_vectors_read_after_the_loop_and_rows_passed_on(quick_llvm):
    rng = np.random.default_rng(3)
    _grads_agree(kept_after, (rng.standard_normal((4, 10)) * 0.3, rng.standard_normal(10)),
                 (0, 1))


def gated(W, b, x):
    """Rows sliced per gate after a shape read that ends the rows' run, and the row's own
    length read (ADBench's LSTM)."""
    total = 0.0
    for i in range(W.shape[0]):
        w = W[i]
        h = x.shape[0]
        gate = 1.0 / (1.0 + np.exp(-(x * w[0:h] + b[i])))
        change = np.tanh(x * w[h:2 * h])
        total = total + np.sum(gate * change) + np.sum(w[2 * h:w.shape[0] - 1])
    return total


def moved_row(W, x):
    """A row whose index is rebound before its slice is read: the old row must be read."""
    total = 0.0
    for i in range(W.shape[0] - 1):
        k = i
        w = W[k]
        n = x.shape[0]
        k = k + 1
        total = total + np.sum(w[0:n] * x) * W[k, 0]
    return total


def test_rows_from_before_a_run_are_read_in_their_matrix(quick_llvm):
    rng = np.random.default_rng(13)
    args = (rng.standard_normal((3, 28)) * 0.5, rng.standard_normal(3) * 0.1,
            rng.standard_normal(9) * 0.5)
    text = _rewritten(gated, *args)
    assert "W[i, start + j" in text and "= (W.shape[1],)" in text, text
    compiled = _grads_agree(gated, args, (0, 1, 2))
    assert "w = W[i]" not in compiled.source, compiled.source  # (no view left to make)


def test_a_row_whose_index_is_rebound_is_read_as_it_was(quick_llvm):
    rng = np.random.default_rng(14)
    args = (rng.standard_normal((4, 9)) * 0.5, rng.standard_normal(9) * 0.5)
    text = _rewritten(moved_row, *args)
    assert "W[k, start" not in text, text
    _grads_agree(moved_row, args, (0, 1))


def test_a_sum_is_read_only_once_it_is_whole(quick_llvm):
    rng = np.random.default_rng(5)
    compiled = _grads_agree(scaled_by_sums, (rng.standard_normal((3, 10)) * 0.3,
                                             rng.standard_normal(10)), (0, 1))
    assert "same_length(" in compiled.source


def test_a_vector_computed_from_itself(quick_llvm):
    rng = np.random.default_rng(6)
    _grads_agree(rebound, (rng.standard_normal((3, 10)) * 0.5, rng.standard_normal(10)),
                 (0, 1))


def test_while_loops_branches_and_dots_of_vectors(quick_llvm):
    rng = np.random.default_rng(7)
    compiled = _grads_agree(damped, (rng.standard_normal((6, 11)), rng.standard_normal(11)),
                            (0, 1))
    assert "same_length(" in compiled.source


def test_size_one_rows_broadcast(quick_llvm):
    rng = np.random.default_rng(4)
    _grads_agree(broadcast_row, (rng.standard_normal((4, 1)), rng.standard_normal(10)), (0, 1))


def test_empty_vectors_and_no_steps(quick_llvm):
    alphas, means, qs, x = mixture_args()
    for args in ((alphas, means[:, :0], qs[:, :0, :0], x[:, :0]),
                 (alphas, means, qs, x[:0])):
        got = ad.jit(ad.grad(mixture, argnums=(0, 1)))(*args)
        for g, w in zip(got, ad.grad(mixture, argnums=(0, 1))(*args)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_lengths_that_do_not_broadcast_raise_as_numpy_does(quick_llvm):
    alphas, means, qs, x = mixture_args()
    wrong = (alphas, means[:, :3], qs, x)  # rows of 4 minus rows of 3
    with pytest.raises(ValueError):
        mixture(*wrong)
    with pytest.raises(ValueError):
        ad.jit(mixture)(*wrong)
    with pytest.raises(ValueError):
        ad.jit(ad.grad(mixture))(*wrong)
    weight, bias, xs = recurrent_args()
    with pytest.raises(ValueError):
        recurrent(weight[:-1], bias, xs)
    with pytest.raises(ValueError):
        ad.jit(ad.grad(recurrent))(weight[:-1], bias, xs)


def test_turned_off_by_environment(quick_llvm, monkeypatch):
    monkeypatch.setenv("AUTODIFF_AST_SCALARIZE", "0")
    compiled = ad.jit(ad.grad(mixture))
    compiled(*mixture_args())
    assert "same_length(" not in compiled.source


def refused(x, w):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.sum(np.tanh(x[i] * w))
    return total


def _refused_rewrite(monkeypatch):
    """Make vector_loops add an integer np.dot, which NumPy computes and Numba refuses;
    returns the list of the core functions it is asked to rewrite, call by call."""
    import autodiff_ast.vector_loops as vl
    rewrite = vl.vector_loops
    calls = []

    def with_an_integer_product(program, core):
        calls.append(core.name)
        text = rewrite(program, core)
        # (w scaled by it: the gradient reads w, so the product cannot be left out)
        return text.replace("    total = 0.0\n", "    total = 0.0\n    w = w * float(np.dot("
                            "np.arange(3), np.arange(3)))\n", 1)

    monkeypatch.setattr(vl, "vector_loops", with_an_integer_product)
    return calls


def test_a_rewrite_numba_refuses_falls_back_to_the_original(quick_llvm, monkeypatch):
    """If Numba cannot compile the rewritten program, jit compiles the original."""
    _refused_rewrite(monkeypatch)
    rng = np.random.default_rng(8)
    args = (rng.standard_normal((4, 10)), rng.standard_normal(10))
    compiled = _grads_agree(refused, args, (0, 1))
    assert "same_length(" not in compiled.source and "np.arange(3)" not in compiled.source


def test_a_refused_rewrite_is_remembered_for_the_next_process(quick_llvm, monkeypatch,
                                                              tmp_path):
    """After a fallback, the warm-start index records the refusal: a new jit of the same
    function (as in a new process) builds from the original program at once, without
    writing or compiling the refused rewrite again."""
    calls = _refused_rewrite(monkeypatch)
    from autodiff_ast import custom  # (a rule another test registered means no index key)
    monkeypatch.setattr(custom, "_REGISTERED", {})
    monkeypatch.setenv("AUTODIFF_AST_CACHE", str(tmp_path / "modules"))
    log = tmp_path / "warmstart.log"
    monkeypatch.setenv("AUTODIFF_AST_WARMSTART_LOG", str(log))
    rng = np.random.default_rng(9)
    args = (rng.standard_normal((4, 10)), rng.standard_normal(10))
    want = ad.grad(refused)(*args)
    first = ad.jit(ad.grad(refused))(*args)
    assert calls and log.read_text().count("refused ") == 1
    calls.clear()
    again = ad.jit(ad.grad(refused))
    second = again(*args)
    assert calls == [], "the refused rewrite was made again"
    # neither loaded from the index and refused again by Numba
    assert log.read_text().count("refused ") == 1, log.read_text()
    assert "same_length(" not in again.source
    for got in (first, second):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
