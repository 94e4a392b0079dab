"""Calls of the user's functions made in loops, written into their callers before jit
differentiates them (autodiff_ast/inline_calls.py).

Every compiled gradient is compared with the plain-NumPy gradient of the same function (which
keeps its calls and their recomputing pairs) and with central differences; every compiled
value with the function's own. The generated source is checked to show that the calls were
written in (a test cannot pass through jit's fallback to the original program), or kept where
they must be.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast import inline_calls as inline_module
from autodiff_ast.build import prepare
from autodiff_ast.inline_calls import inline_calls
from autodiff_ast.normalize import spec_of

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]

RECOMPUTED = "recomputed here"  # reverse.py's comment above a recomputing pair's forward sweep


# ---------------------------------------------------------------- programs
def gate(v):
    return 1.0 / (1.0 + np.exp(-v))


def layer(weight, hidden, state, inp):
    """A cell: an elementwise helper, two results."""
    h = hidden.shape[0]
    state = state * gate(inp * weight[:h]) + gate(hidden * weight[h:]) * np.tanh(inp)
    return np.tanh(state) * hidden, state


def stack(weight, s, inp):
    """Layers in a loop of their own (a helper calling a helper in its loop)."""
    s2 = s.copy()
    x = inp
    for i in range(0, s.shape[0], 2):
        hidden, state = layer(weight[i], s[i], s[i + 1], x)
        s2[i] = hidden
        s2[i + 1] = state
        x = hidden
    return x, s2


def sequence_loss(weight, s, xs):
    """ADBench's LSTM in small: stack called in the loop over the sequence."""
    total = 0.0
    for t in range(xs.shape[0]):
        y, s = stack(weight, s, xs[t])
        total = total + np.sum(y * xs[t])
    return total


def bump(v, a):
    """Writes into its argument (the caller's array, as a call would)."""
    v[0] = v[0] + a
    return np.sum(v * v)


def in_place(x, a):
    total = 0.0
    w = x.copy()
    for i in range(3):
        total = total + bump(w, a * (i + 1.0))
    return total + np.sum(w)


def branchy(v, a):
    """Returns from two branches."""
    if np.sum(v) > 0.0:
        return np.sum(np.sin(v)) * a
    return np.sum(v * v) + a


def reduce_twice(v, c):
    """A loop of its own that accumulates a number."""
    acc = 0.0
    for k in range(v.shape[0]):
        acc = acc + np.tanh(v[k] * c)
    return acc


def many_calls(x, a):
    """The same helpers twice in one step, results fed back in (x = f(x))."""
    total = 0.0
    v = x[0]
    for i in range(x.shape[0]):
        total = total + branchy(x[i], a) + branchy(-x[i], a)
        total = total + reduce_twice(v, a)
        v = np.tanh(v + x[i])
    return total


def params_helper(params, v):
    return np.tanh(v * params["w"] + params["b"])


def with_dict(params, x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.sum(params_helper(params, x[i]))
    return total


@ad.checkpoint
def kept_step(v):
    return np.tanh(v * 1.5)


def checkpointed(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.sum(kept_step(x[i]))
    return total


def fact(n, v):
    if n <= 0:
        return v
    return fact(n - 1, v * 0.9)


def recursive_in_loop(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + np.sum(fact(x.shape[0] - i, x[i]))  # (a depth known at run time)
    return total


def turn(px, py, a):
    """Numbers only: keeps its recomputing pair."""
    return px * np.cos(a) - py * np.sin(a)


def turned(x, a):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + turn(x[i, 0], x[i, 1], a) ** 2
    return total


# ---------------------------------------------------------------- helpers
def _rewritten(fn, *args):
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    _, program, core = prepare(fn, {n: spec_of(a) for n, a in zip(names, args)})
    return inline_calls(program, core)


def _entry(text, name):
    return [part for part in text.split("\n\n\n") if part.startswith(f"def {name}(")][0]


def sequence_args(t=5, h=9, layers=2, seed=0):  # h > scalarize.MAX_LENGTH: run-time length
    rng = np.random.default_rng(seed)
    return (0.5 * rng.standard_normal((2 * layers, 2 * h)),
            0.5 * rng.standard_normal((2 * layers, h)), rng.random((t, h)))


# ---------------------------------------------------------------- the rewrite itself
def test_calls_in_loops_are_written_in_through_two_levels():
    text = _rewritten(sequence_loss, *sequence_args())
    ast.parse(text)
    entry = _entry(text, "sequence_loss")
    assert "stack(" not in entry and "layer(" not in entry and "gate(" not in entry, text
    assert "np.exp(" in entry and "np.tanh(" in entry, text
    # the cell's two results take the names the caller unpacks them into: no tuple between
    assert "layer_out" not in entry and "stack_out" not in entry, text


def test_rewrite_is_deterministic():
    args = sequence_args()
    assert _rewritten(sequence_loss, *args) == _rewritten(sequence_loss, *args)


def test_calls_outside_loops_are_kept():
    assert _rewritten(lambda v: np.sum(gate(v)), np.ones(12)) is None


def test_checkpointed_recursive_long_and_scalar_callees_keep_their_calls(monkeypatch):
    x = np.ones((3, 12))
    assert _rewritten(turned, x, 0.5) is None
    assert _rewritten(checkpointed, x) is None
    assert _rewritten(recursive_in_loop, x) is None
    monkeypatch.setattr(inline_module, "MAX_STATEMENTS", 3)
    text = _rewritten(sequence_loss, *sequence_args())
    assert text is None or "stack(" in _entry(text, "sequence_loss"), text


# ---------------------------------------------------------------- compiled results
def test_sequence_gradient_stores_instead_of_recomputing(quick_llvm):
    compiled = _grads_agree(sequence_loss, sequence_args(), (0, 1, 2))
    assert RECOMPUTED not in compiled.source, compiled.source
    plain = ad.grad(sequence_loss, argnums=(0, 1, 2))
    plain(*sequence_args())
    assert RECOMPUTED in plain.source  # (what the rewrite saves jit from)


def test_sequence_gradient_with_one_layer_and_no_steps(quick_llvm):
    _grads_agree(sequence_loss, sequence_args(layers=1), (0, 1))
    weight, s, xs = sequence_args()
    got = ad.jit(ad.grad(sequence_loss, argnums=(0, 1)))(weight, s, xs[:0])
    for g, w in zip(got, ad.grad(sequence_loss, argnums=(0, 1))(weight, s, xs[:0])):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_a_callee_writing_into_an_argument_read_after_the_call_is_refused():
    """The callee writes into a copy, so the caller's later read would not see the write:
    refused with or without jit (it was silently different from Python before)."""
    x = np.random.default_rng(1).standard_normal(12)
    for transform in (ad.grad, lambda f: ad.jit(ad.grad(f))):
        with pytest.raises(ad.errors.UnsupportedSyntaxError, match="bump writes into its "
                           "parameter v in place"):
            transform(in_place)(x.copy(), 0.3)


def bumped(v, a):
    v[0] = v[0] + a
    return v


def rebinds(x, a):
    """The written array returned and bound again: what the error asks for."""
    total = 0.0
    w = x.copy()
    for i in range(3):
        w = bumped(w, a * (i + 1.0))
        total = total + np.sum(w * w)
    return total + np.sum(w)


def test_a_callee_writing_into_its_argument_returned_and_bound_again(quick_llvm):
    rng = np.random.default_rng(1)
    _grads_agree(rebinds, (rng.standard_normal(12), 0.3), (0, 1))


def test_branches_own_loops_repeated_calls_and_rebinding(quick_llvm):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 11)) * 0.7
    compiled = _grads_agree(many_calls, (x, 0.8), (0, 1))
    assert RECOMPUTED not in compiled.source, compiled.source


def test_pytree_arguments(quick_llvm):
    rng = np.random.default_rng(3)
    params = {"w": rng.standard_normal(10), "b": rng.standard_normal(10)}
    x = rng.standard_normal((4, 10))
    compiled = ad.jit(ad.grad(with_dict))
    got = compiled(params, x)
    want = ad.grad(with_dict)(params, x)
    for key in params:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-9, atol=1e-12)
    step = 1e-6
    for key in params:
        bumped = {k: v.copy() for k, v in params.items()}
        bumped[key][2] += step
        lower = {k: v.copy() for k, v in params.items()}
        lower[key][2] -= step
        diff = (with_dict(bumped, x) - with_dict(lower, x)) / (2 * step)
        assert got[key][2] == pytest.approx(diff, rel=1e-6, abs=1e-8)


def test_a_callee_of_numbers_kept_as_a_call(quick_llvm):
    rng = np.random.default_rng(5)
    _grads_agree(turned, (rng.standard_normal((6, 2)), 0.4), (0, 1))


def test_checkpointed_callee_still_recomputes_under_jit(quick_llvm):
    rng = np.random.default_rng(4)
    compiled = _grads_agree(checkpointed, (rng.standard_normal((3, 12)),), (0,))
    assert RECOMPUTED in compiled.source


def test_turned_off_by_environment(quick_llvm, monkeypatch):
    monkeypatch.setenv("AUTODIFF_AST_SCALARIZE", "0")
    compiled = ad.jit(ad.grad(sequence_loss))
    compiled(*sequence_args())
    assert RECOMPUTED in compiled.source
