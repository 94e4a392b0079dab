"""np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit in differentiated code.

The pieces are a tuple whose length is known where the code is generated, so they can be
unpacked, indexed with a constant and looped over. The cotangent of the array is the pieces'
cotangents joined along the axis (zeros for a piece that got none); the tangent is the tangent
split the same way. Every derivative here is checked against central differences
(check_grads, or differences of the gradient for Hessians) or an explicit value.
"""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import MissingRuleError
from autodiff_ast.jit import jit

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")
THIS_FILE = os.path.basename(__file__)


def line_of(fn, text):
    """The line number in this file of the first line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------- the functions
def halves(x):
    a, b = np.split(x, 2)
    return np.sum(np.sin(a) * b ** 2)


def columns_at_indices(x):
    left, middle, right = np.split(x, [1, 3], axis=1)
    return np.sum(left * right) + np.sum(np.tanh(middle) ** 2)


def unequal_pieces(x):
    a, b, c = np.array_split(x, 3)  # 7 entries: 3, 2 and 2
    return np.sum(a ** 3) + np.sum(b * c)


def last_axis(x):
    a, b = np.split(x, 2, axis=-1)
    return np.sum(np.exp(a) * b)


def indexed_piece(x):
    parts = np.array_split(x, 3, axis=1)  # 4 columns: 2, 1 and 1
    return np.sum(parts[0] ** 2) * np.sum(parts[2])


def loop_over_pieces(x):
    total = 0.0
    for piece in np.split(x, 3):
        total = total + np.sum(piece) ** 2
    return total


def implied_axes(x):
    left, right = np.hsplit(x, [1])
    top, bottom = np.vsplit(x, 2)
    return np.sum(left * right) + np.sum(np.sin(top) * bottom ** 2)


def depth_halves(x):
    front, back = np.dsplit(x, 2)
    return np.sum(front * np.cos(back))


CASES = [
    ("halves", halves, (6,)),
    ("columns-at-indices", columns_at_indices, (2, 5)),
    ("unequal-pieces", unequal_pieces, (7,)),
    ("last-axis", last_axis, (2, 3, 4)),
    ("indexed-piece", indexed_piece, (3, 4)),
    ("loop-over-pieces", loop_over_pieces, (6,)),
    ("hsplit-vsplit", implied_axes, (4, 3)),
    ("dsplit", depth_halves, (2, 2, 4)),
]
IDS = [c[0] for c in CASES]


def draw(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.5, 1.5, shape)


# ---------------------------------------------------------------- derivatives
@pytest.mark.parametrize("name,f,shape", CASES, ids=IDS)
def test_gradients_in_both_modes_at_order_2(name, f, shape):
    ad.check_grads(f, (draw(shape),), order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("name,f,shape", CASES, ids=IDS)
def test_hessian_matches_differences_of_the_gradient(name, f, shape):
    x = draw(shape, 1)
    step = np.random.default_rng(2).standard_normal(shape)
    eps = 1e-6
    want = (ad.grad(f)(x + eps * step) - ad.grad(f)(x - eps * step)) / (2 * eps)
    got = np.tensordot(ad.hessian(f)(x), step, axes=len(shape))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,f,shape", CASES, ids=IDS)
def test_vmap_of_the_gradient_is_the_gradient_of_each_example(name, f, shape):
    xs = np.stack([draw(shape, 3), draw(shape, 4), draw(shape, 5)])
    want = np.stack([ad.grad(f)(x) for x in xs])
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(xs), want, rtol=1e-12)


def test_unequal_pieces_have_the_gradient_of_their_own_entries():
    """array_split of 7 entries into 3, 2 and 2: d/da of sum(a**3) is 3 a**2, b gets c, c
    gets b."""
    x = draw((7,), 6)
    want = np.concatenate((3.0 * x[:3] ** 2, x[5:], x[3:5]))
    np.testing.assert_allclose(ad.grad(unequal_pieces)(x), want, rtol=1e-12)


def middle_piece_only(x):
    a, b, c = np.split(x, [2, 3], axis=1)
    return np.sum(b ** 2)


def test_pieces_not_used_get_a_zero_cotangent():
    x = draw((2, 5), 7)
    want = np.zeros_like(x)
    want[:, 2] = 2.0 * x[:, 2]
    np.testing.assert_allclose(ad.grad(middle_piece_only)(x), want, rtol=1e-12)
    ad.check_grads(middle_piece_only, (x,), order=2, modes=("rev", "fwd"))


def test_tangent_is_the_tangent_split_the_same_way():
    x, t = draw((3, 4), 8), draw((3, 4), 9)
    out, out_dot = ad.jvp(lambda v: np.array_split(v, [1, 3], axis=1), (x,), (t,))
    for got, want in zip(out_dot, np.array_split(t, [1, 3], axis=1)):
        np.testing.assert_array_equal(got, want)
    assert len(out) == 3


def test_vjp_of_the_pieces_joins_their_cotangents():
    x = draw((6,), 10)
    pieces, pullback = ad.vjp(lambda v: np.split(v, 3), x)
    assert [p.shape for p in pieces] == [(2,), (2,), (2,)]
    (x_bar,) = pullback((np.full(2, 1.0), np.full(2, 2.0), np.full(2, 3.0)))
    np.testing.assert_array_equal(x_bar, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0])


# ---------------------------------------------------------------- compiled
@pytest.mark.numba
@pytest.mark.parametrize("name,f,shape", CASES, ids=IDS)
def test_jit_of_the_gradient_is_the_gradient(name, f, shape, quick_llvm):
    x = draw(shape, 11)
    np.testing.assert_allclose(jit(ad.grad(f))(x), ad.grad(f)(x), rtol=1e-12)


def pieces_in_a_loop(x):
    """The pieces' tuple is taped by the loop (one piece gets no cotangent: the backward step
    zeroes it from the tuple): Numba's split gives a list, which the tape's placeholder, a
    tuple, must match."""
    total = 0.0
    y = x
    for step in range(3):
        a, b, c = np.split(y, 3)
        y = np.concatenate((np.sin(b), a, b))
        total = total + np.sum(b ** 2)
    return total


@pytest.mark.numba
def test_jit_of_pieces_taped_in_a_loop(quick_llvm):
    x = draw((6,), 12)
    ad.check_grads(pieces_in_a_loop, (x,), modes=("rev", "fwd"))
    np.testing.assert_allclose(jit(ad.grad(pieces_in_a_loop))(x),
                               ad.grad(pieces_in_a_loop)(x), rtol=1e-12)
    np.testing.assert_allclose(jit(pieces_in_a_loop)(x), pieces_in_a_loop(x), rtol=1e-12)


@pytest.mark.numba
def test_jit_of_hessian_and_of_vmap(quick_llvm):
    x = draw((2, 5), 13)
    np.testing.assert_allclose(jit(ad.hessian(columns_at_indices))(x),
                               ad.hessian(columns_at_indices)(x), rtol=1e-10)
    xs = np.stack([x, 0.5 * x])
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(columns_at_indices)))(xs),
                               ad.vmap(ad.grad(columns_at_indices))(xs), rtol=1e-12)


# ---------------------------------------------------------------- counts known at run time
def split_in_k(x, k):
    a, b = np.split(x, k)
    return np.sum(a * b)


def split_along(x, axis):
    a, b = np.split(x, 2, axis=axis)
    return np.sum(a * b)


def split_at(x, cuts):
    parts = np.array_split(x, cuts)
    return np.sum(parts[0])


def assert_refused_here(info, fn, text, option):
    err = info.value
    assert err.filename == __file__
    assert err.lineno == line_of(fn, text)
    assert f"{THIS_FILE}:{err.lineno}:" in str(err)
    assert f"{option} is only known at run time" in err.message


TRANSFORMS = {"grad": ad.grad, "jvp": lambda f: lambda x, k: ad.jvp(f, (x, k), (x, 0)),
              "vmap": lambda f: ad.vmap(f, in_axes=(0, None)), "jit": jit}


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_a_count_known_only_at_run_time_is_refused_at_the_users_line(transform):
    """The number of pieces decides how many values the line gives: written for one count,
    so a count known only at run time (here a 0-d array argument) is refused by every
    transformation, naming the line. (A Python int argument is taken for its value by grad
    and vmap: tests/test_concrete_ints.py.)"""
    with pytest.raises(MissingRuleError) as info:
        transform(split_in_k)(draw((2, 6), 14), np.array(2))
    assert_refused_here(info, split_in_k, "np.split", "np.split's indices_or_sections")


def test_indices_known_only_at_run_time_are_refused_at_the_users_line():
    with pytest.raises(MissingRuleError) as info:
        ad.grad(split_at)(draw((6,), 15), np.array([2, 4]))
    assert_refused_here(info, split_at, "np.array_split", "np.array_split's indices_or_sections")


def test_an_axis_known_only_at_run_time_is_refused_in_derivatives():
    x = draw((2, 4), 16)
    with pytest.raises(MissingRuleError) as info:
        ad.grad(split_along)(x, np.array(1))
    assert_refused_here(info, split_along, "np.split", "np.split's axis")
    assert split_along(x, 1) == pytest.approx(jit(split_along)(x, 1))  # no derivative: fine
    a, b = np.split(x, 2, axis=1)  # a Python int axis is taken for its value
    np.testing.assert_allclose(ad.grad(split_along)(x, 1), np.concatenate([b, a], axis=1))


@pytest.mark.numba
def test_static_arguments_under_jit_are_constants(quick_llvm):
    x = draw((2, 4), 17)
    a, b = np.split(x, 2)
    np.testing.assert_allclose(jit(ad.grad(split_in_k), static_argnums=1)(x, 2),
                               np.concatenate((b, a)), rtol=1e-12)
    a, b = np.split(x, 2, axis=1)
    np.testing.assert_allclose(jit(ad.grad(split_along), static_argnums=1)(x, 1),
                               np.concatenate((b, a), axis=1), rtol=1e-12)
