"""Math-library results saved on a loop's stack (autodiff_ast/reverse.py,
``_stack_plan``): loops whose bounds change from one run to the next (an inner loop over a
length an outer step computes, a loop inside a ``range(0, n, 2)``), compiled with jit.

Each gradient is compared with the plain NumPy gradient (list tapes, no stack) and with
central differences, and the generated source is read: the compiled module keeps the exps
on a stack (``reserve_steps``) and reads them back instead of computing them again; the plain
module does not use one.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_vector_loops import _grads_agree, damped  # jit(grad) == grad == differences

import autodiff_ast as ad

pytestmark = [pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def ragged(x, w):
    """An inner loop whose length each outer step computes."""
    total = 0.0
    for i in range(x.shape[0]):
        m = i % 3 + 2
        for j in range(m):
            total = total + w[j] * np.exp(x[i, j] * 0.5) + np.tanh(x[i, j] * w[j])
    return total


def strided(x, w):
    """An inner loop inside a loop over every second row; a branch in the inner loop (whose
    exp is computed again: a step may skip it)."""
    total = 0.0
    for i in range(0, x.shape[0], 2):
        for j in range(x.shape[1]):
            e = np.exp(-x[i, j] * w[j])
            if x[i, j] > 0.0:
                total = total + e * np.exp(x[i, j])
            else:
                total = total + x[i, j] * np.cos(w[j]) * e
    return total


def cells(x, w):
    """An LSTM-like recurrence: a state vector through steps of an inner loop over units whose
    count is the state's length (it changes binding every step)."""
    h = np.zeros(w.shape[0])
    total = 0.0
    for t in range(x.shape[0]):
        new = np.zeros(h.shape[0])
        for j in range(h.shape[0]):
            gate = 1.0 / (1.0 + np.exp(-(x[t, j] * w[j] + h[j])))
            new[j] = gate * np.tanh(h[j] + x[t, j])
        h = new
        total = total + np.sum(h * h)
    return total


def carried(x, w):
    """An exp read by the step after the one that computed it: the backward step needs the
    value before its step, so it stays on a list (a stack row holds the step's own value)."""
    total = 0.0
    e = 0.0
    for i in range(x.shape[0]):
        m = i % 3 + 2
        for j in range(m):
            total = total + w[j] * e
            e = np.exp(x[i, j] * 0.5)
    return total


def triangle(x, w):
    """An inner loop from past the outer index (``range(i + 1, n)``, a pair potential's): its
    start, an integer temporary the backward step computes again, is in the stack's offsets
    (the backward sweep read the forward's last value of it, so every saved sin but the
    last run's came from the wrong slots)."""
    n = w.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            total = total + np.sin(w[j]) * w[i] * x[i, j]
    return total


STARTS = np.array([3, 0, 4, 1, 2])


def from_table(x, w):
    """An inner loop starting where an integer table says: its start is read at the top of
    each backward step (a value of the step), the stack's offsets read it too."""
    n = w.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(STARTS[i], n):
            total = total + np.exp(w[j] * 0.3) * x[i, j] * w[i]
    return total


CASES = {"ragged": ragged, "strided": strided, "cells": cells, "triangle": triangle,
         "from_table": from_table}


def test_a_value_the_next_step_reads_is_not_stacked():
    compiled = _grads_agree(carried, _args(), (0, 1))
    assert "reserve_steps(" not in compiled.source, compiled.source


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((7, 5)), rng.standard_normal(5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_stacked_math_results_give_the_gradient(case):
    fn = CASES[case]
    compiled = _grads_agree(fn, _args(), (0, 1))
    assert "reserve_steps(" in compiled.source, compiled.source
    plain = ad.grad(fn, argnums=(0, 1))
    plain(*_args())
    assert "reserve_steps(" not in plain.source


def test_a_second_call_with_other_lengths_reads_its_own_rows():
    jg = ad.jit(ad.grad(cells, argnums=(0, 1)))
    for seed, shape in ((1, (3, 4)), (2, (9, 4)), (3, (1, 4))):
        rng = np.random.default_rng(seed)
        x, w = rng.standard_normal(shape), rng.standard_normal(shape[1])
        for got, want in zip(jg(x, w), ad.grad(cells, argnums=(0, 1))(x, w)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_the_backward_step_reads_the_exp_instead_of_computing_it():
    compiled = ad.jit(ad.grad(cells, argnums=(0, 1)))
    compiled(*_args())
    backward = compiled.source.split("# for t in range", 1)[-1]
    assert "exp_fast(" not in backward and "np.exp(" not in backward, backward


def test_jit_lstm_matches_adbench_and_keeps_no_lists_of_slice_starts():
    """ADBench's LSTM under jit: its gates' exps and tanhs on the unit loop's stack, and the
    slice starts of each layer computed again in the backward step (from the state's shape)
    instead of pushed on lists."""
    from test_adbench import close, data, lstm
    with open(data.data_path("expected_from_adbench_tests.json")) as f:
        import json
        want = json.load(f)["lstm_l2_c1024.txt"]
    args = data.read_lstm(data.data_path("lstm", "lstm_l2_c1024.txt"))
    compiled = ad.jit(ad.value_and_grad(lstm.lstm_objective, argnums=(0, 1)))
    value, (main_bar, extra_bar) = compiled(*args)
    close(value, want["objective"])
    close(np.concatenate([main_bar.ravel(), extra_bar.ravel()]),
          want["gradient_main_then_extra_rowmajor"])
    source = compiled.source
    assert "reserve_steps(" in source
    # a row per value, a column per step, the index known to be >= 0: the loop vectorizes
    assert "j_2_stack = np.empty((5, 0))" in source, source
    assert "j_2_stack[4, index_at_least(j_2_row + j_2, 0)] = tanh_2_2_j" in source, source
    assert "start_3_tape" not in source and "start_8_tape" not in source, source


def cells_from(x, w, start):
    """cells, its outer loop over range(start, n): the step's number is t - start."""
    h = np.zeros(w.shape[0])
    total = 0.0
    for t in range(start, x.shape[0]):
        for j in range(h.shape[0]):
            total = total + np.exp(-x[t, j] * w[j] * h[j])
        h = h + x[t, : h.shape[0]]
    return total


@pytest.mark.parametrize("case", ["cells", "ragged"])
def test_the_outermost_loop_reserves_its_stacks_after_its_first_step(case):
    compiled = ad.jit(ad.grad(CASES[case], argnums=(0, 1)))
    compiled(*_args())
    source = compiled.source[compiled.source.index("def grad_"):]  # (not the helpers)
    found = re.search(r"\n    for (\w+) in range\((\w+)\):\n", source)
    assert found, source
    index, stop = found.groups()
    # the last statement of the outer loop's step, after the inner run reserved its columns
    forward = source[found.end():].split("\n\n", 1)[0].split("\n")
    assert forward[-2:] == [
        f"        if {index} == 0:",
        f"            j_stack = reserve_steps(j_stack, min(j_stack_top * max({stop}, 0), "
        "j_stack_top + 4194304))"], source
    assert source.count("j_stack_top + 4194304") == 1, source


def test_a_loop_from_a_start_reserves_after_its_first_step():
    x, w = _args(4)
    compiled = _grads_agree(cells_from, (x, w[:3], 2), (0, 1))
    assert re.search(r"if t == start:\n +j_stack = reserve_steps\(j_stack, min\(j_stack_top \* "
                     r"max\(\w+ - start, 0\), j_stack_top \+ 4194304\)\)", compiled.source), \
        compiled.source


def test_an_outer_loop_with_a_step_of_two_leaves_the_doubling():
    """range(0, n, 2): no count of the steps to come."""
    compiled = _grads_agree(strided, _args(5), (0, 1))
    assert "reserve_steps(" in compiled.source, compiled.source
    assert "4194304" not in compiled.source, compiled.source


def test_a_while_loop_reserves_nothing_ahead():
    """test_vector_loops' damped: a stack in a while loop (its vector statements become
    loops); its runs are not steps of a range, so the stack keeps the doubling."""
    rng = np.random.default_rng(7)
    compiled = _grads_agree(damped, (rng.standard_normal((6, 11)), rng.standard_normal(11)),
                            (0, 1))
    assert "reserve_steps(" in compiled.source, compiled.source
    assert "4194304" not in compiled.source, compiled.source
