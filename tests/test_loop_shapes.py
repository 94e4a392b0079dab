"""Arrays whose shape changes from one loop step to the next (autodiff_ast/loop_shapes.py).

The backward code reads some values only for their shapes (np.zeros_like, .shape); those reads
keep a tape only for values whose shape may change between steps. Each program here changes a
shape in a loop; every derivative is checked against central differences (check_grads, and
jit against differences). The analysis must also leave fixed shapes alone: the benchmark
programs below get no such tapes.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from test_vmap import numeric_grad  # central differences

import autodiff_ast as ad
from autodiff_ast.build import prepare
from autodiff_ast.loop_shapes import varying_shapes
from autodiff_ast.normalize import spec_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "benchmarks"), os.path.join(ROOT, "examples", "adbench")]


def halving(x):
    y = x * 1.0
    s = 0.0
    while y.shape[0] > 1:
        s = s + np.sum(np.tanh(y))
        y = y[::2] * 1.1  # every other element
    return s + np.sum(y)


def prefix_sums(x):
    s = 0.0
    for i in range(1, x.shape[0]):
        s = s + np.sum(np.sin(x[:i]) * x[:i])  # a slice as long as the loop index
    return s


def schur(a):
    b = a * 1.0
    s = 0.0
    for k in range(2):
        s = s + b[0, 0] ** 2
        b = b[1:, 1:] - np.outer(b[1:, 0], b[0, 1:]) * 0.1  # one row and column fewer
    return s + np.sum(b * b)


def shrink_two(x):
    a = x * 1.0
    b = x * 2.0
    s = 0.0
    for k in range(3):
        s = s + np.sum(a * b)
        a = a[1:] * 0.5
        b = np.sin(b[:-1])
    return s


def grow_stack(x):
    vals = [x[0]]
    s = 0.0
    for k in range(1, x.shape[0]):
        vals.append(vals[-1] * x[k])
        v = np.array(vals)  # one more row each step
        s = s + np.sum(v * v) / v.shape[0]
    return s


def sized_by_the_index(x):
    s = 0.0
    for k in range(1, 4):
        z = np.zeros(k)
        z[0] = x[k]
        z = z + x[:k]
        s = s + np.sum(z ** 3)
    return s


def nested_shrink(x):
    s = 0.0
    for k in range(2):
        y = x * (k + 1.0)
        while y.shape[0] > 1:  # shrinks again in every step of the outer loop
            s = s + np.sum(y * y)
            y = y[1:]
        s = s + y[0]
    return s


def shrink_then_use(x):
    y = x * 1.0
    while y.shape[0] > 2:
        y = y[1:] * 0.9
    s = 0.0
    for i in range(3):  # y has one shape in this loop
        s = s + np.sum(np.sin(y) * y)
        y = y * 0.5
    return s


def window(x):
    s = 0.0
    for i in range(x.shape[0] - 2):
        w = x[i:i + 3]  # as wide in every step
        s = s + np.sum(w * w) * np.sum(w)
    return s


PROGRAMS = [halving, prefix_sums, schur, shrink_two, grow_stack, sized_by_the_index,
            nested_shrink, shrink_then_use]


def _args(f):
    rng = np.random.default_rng(3)
    return (rng.normal(size=(4, 4)) * 0.5,) if f is schur else (rng.normal(size=6) * 0.5,)


@pytest.mark.parametrize("f", PROGRAMS + [window], ids=lambda f: f.__name__)
def test_second_derivatives_of_a_shape_changing_loop(f):
    ad.check_grads(f, _args(f), order=2, modes=("rev", "fwd"))


@pytest.mark.numba
@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_jit_gradient_of_a_shape_changing_loop(f):
    from autodiff_ast.jit import jit
    (x,) = _args(f)
    np.testing.assert_allclose(jit(ad.grad(f))(x), numeric_grad(f, x), rtol=1e-5, atol=1e-8)


def _varying(f, *args):
    names = f.__code__.co_varnames[:f.__code__.co_argcount]
    _, _, core = prepare(f, {n: spec_of(a) for n, a in zip(names, args)})
    return varying_shapes(core)


def test_the_shrinking_array_and_its_slices_are_found():
    assert {"y"} <= _varying(halving, np.ones(6))
    assert _varying(window, np.ones(6)) == set()


def _benchmark_programs():
    import ba
    import gmm
    import kernels
    import lstm
    import seed_workloads as sw
    rng = np.random.default_rng(0)
    # (GMM stacks lists made in a loop and reads the stacks in another: one shape after it)
    yield gmm.gmm_objective, (rng.normal(size=4), rng.normal(size=(4, 3)),
                              rng.normal(size=(4, 6)), rng.normal(size=(10, 3)), 1.0, 0)
    yield ba.ba_objective, (rng.normal(size=(3, 11)), rng.normal(size=(5, 3)),
                            rng.normal(size=6), rng.integers(0, 3, size=(6, 2)),
                            rng.normal(size=(6, 2)))
    yield kernels.conv2d_loss, (rng.normal(size=(3, 3)), rng.normal(size=(2, 8, 8)),
                                rng.normal(size=(2, 6, 6)))
    yield kernels.mixture_nll, (rng.normal(size=(3, 2)), rng.normal(size=3),
                                rng.normal(size=3), rng.normal(size=(5, 2)))
    yield sw.heat, (rng.normal(size=20), 0.1, 5)
    yield lstm.lstm_objective, (rng.normal(size=(4, 8)), rng.normal(size=(3, 2)),
                                rng.normal(size=(4, 2)), rng.normal(size=(5, 2)))
    yield lstm.lstm_predict, (rng.normal(size=(4, 8)), rng.normal(size=(3, 2)),
                              rng.normal(size=(4, 2)), rng.normal(size=2))


@pytest.mark.parametrize("f, args", list(_benchmark_programs()),
                         ids=lambda v: getattr(v, "__name__", ""))
def test_fixed_shapes_in_loops_get_no_shape_tapes(f, args):
    """A loop that keeps its arrays' shapes (an RNN state carried through a helper, a heat
    step, a convolution's windows) has nothing whose shape varies."""
    assert _varying(f, *args) == set()
