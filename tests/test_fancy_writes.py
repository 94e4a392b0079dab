"""Writes through an integer-array index that repeats a position (`y[idx] = v`,
`y[idx] += v`): NumPy keeps the last of the repeated writes, so only that entry of v reaches
y. The adjoint gave every entry the position's cotangent (reverse mode disagreed with finite
differences, 0.538 against 0.269); codegen/helpers.py's written_last keeps the last one.
Checked against central differences (check_grads, order 2) and explicit values."""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def repeated_add(x):
    y = np.zeros(3)
    y[np.array([0, 0, 2])] += x[:3]
    return np.sum(y ** 2)


def repeated_rows(x):
    y = np.zeros((3, 2))
    y[np.array([1, -2, 0])] = x[:3, None] * np.ones((1, 2))
    return np.sum(y ** 2)


def repeated_in_a_loop(x):
    y = np.zeros(4)
    idx = np.array([3, 1, 3])
    for t in range(2):
        y[idx] = y[idx] + x[:3] * (t + 1)
    return np.sum(y ** 2)


def repeated_scalar(x):
    y = x * 1.0
    y[np.array([1, 1, 3])] = x[0] * 2.0
    return np.sum(y ** 2)


X = np.array([0.3, 0.5, 0.7, 0.1])
CASES = [repeated_add, repeated_rows, repeated_in_a_loop, repeated_scalar]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_repeated_positions_match_finite_differences(fn):
    ad.check_grads(fn, (X,), modes=("rev", "fwd"), order=2)


def test_explicit_values():
    # y = [x1, 0, x2]: x0's write is overwritten by x1's
    np.testing.assert_allclose(ad.grad(repeated_add)(X), [0.0, 2 * X[1], 2 * X[2], 0.0])
    # rows 1 and -2 are the same row: x1's write wins; row 0 gets x2
    np.testing.assert_allclose(ad.grad(repeated_rows)(X), [0.0, 4 * X[1], 4 * X[2], 0.0])
    # y[3] = 3 x2 and y[1] = 3 x1 after two steps (weights 1 and 2)
    np.testing.assert_allclose(ad.grad(repeated_in_a_loop)(X), [0.0, 18 * X[1], 18 * X[2], 0])


@pytest.mark.numba
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_jit_and_vmap_agree(fn):
    expected = ad.grad(fn)(X)
    np.testing.assert_allclose(jit(ad.grad(fn))(X), expected, rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(ad.grad(fn))(np.stack([X, 2 * X]))[0], expected,
                               rtol=1e-12)
