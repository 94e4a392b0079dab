"""A loop's index read after the loop, or rebound inside it, keeps Python's value in every
derivative (autodiff_ast/hidden_indices.py).

The reverse sweep used to run such loops backwards with the user's index as its counter: a
read after the loop saw the first value instead of the last, and a rebinding inside the loop
moved the tapes' counter, both silently wrong (found by a bug hunt). Every gradient here is
compared with central differences, jit(grad) with grad, and jit(f) with Python.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

X = np.array([0.3, 0.9, 0.2, 1.4])


def read_after_inner(x):
    """k is x.shape[0] - 1 after the inner loop, at every step of the outer one."""
    tot = 0.0
    for _i in range(3):
        for k in range(x.shape[0]):
            tot = tot + x[k]
        tot = tot + x[k] ** 2
    return tot


def may_run_zero_times(x):
    """The inner loop runs zero times at i == 0: k keeps its last value (3, then i - 1)."""
    tot = 0.0
    k = 3
    for i in range(4):
        for k in range(i):
            tot = tot + x[k]
        tot = tot + x[k] ** 2
    return tot


def enumerated(x):
    tot = 0.0
    for _i in range(2):
        for j, v in enumerate(x):
            tot = tot + v * x[0]
        tot = tot + x[j] ** 2 * v
    return tot


def shadowed(x):
    """The inner loop reuses the outer loop's name: i is 1 after it."""
    tot = 0.0
    for i in range(3):
        tot = tot + x[i] ** 2
        for i in range(2):
            tot = tot + x[i] * x[3]
        tot = tot + x[i] ** 3
    return tot


def rebound(x):
    """The index rebound inside its loop: the rest of the step reads the new value."""
    tot = 0.0
    for i in range(3):
        tot = tot + x[i] ** 2
        i = i + 1
        tot = tot + x[i] ** 3
    return tot


def in_arithmetic(x):
    tot = 0.0
    for _i in range(2):
        for k in range(1, x.shape[0]):
            tot = tot + x[k] * x[k - 1]
        tot = tot + np.sin(x[k - 1]) * (k * 1.0)
    return tot


FUNCTIONS = [read_after_inner, may_run_zero_times, enumerated, shadowed, rebound,
             in_arithmetic]


def _differences(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_gradient_matches_differences(f):
    np.testing.assert_allclose(ad.grad(f)(X), _differences(f, X), rtol=1e-6, atol=1e-8)


def test_explicit_values():
    # d/dx of 3 * (x0 + x1) + 3 * x1**2 at x = (1, 2): (3, 3 + 12)
    np.testing.assert_allclose(ad.grad(read_after_inner)(np.array([1.0, 2.0])), [3.0, 15.0])
    # shadowed is x0**2 + x1**2 + x2**2 + 3 * (x0 + x1) * x3 + 3 * x1**3 (i is 1 after the
    # inner loop): at (1, 2, 4, 0) its gradient is (2, 4 + 36, 8, 9)
    np.testing.assert_allclose(ad.grad(shadowed)(np.array([1.0, 2.0, 4.0, 0.0])),
                               [2.0, 40.0, 8.0, 9.0])


@pytest.mark.parametrize("f", [read_after_inner, shadowed, rebound],
                         ids=lambda f: f.__name__)
def test_second_derivatives_and_reverse_of_vectors(f):
    h = ad.hessian(f)(X)
    columns = np.array([_differences(lambda y, j=j: ad.grad(f)(y)[j], X) for j in range(4)])
    np.testing.assert_allclose(h, columns, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ad.jacrev(f)(X), ad.jacfwd(f)(X), rtol=1e-12)


@pytest.mark.numba
@pytest.mark.parametrize("f", [read_after_inner, may_run_zero_times, shadowed, rebound],
                         ids=lambda f: f.__name__)
def test_jit_agrees(f, quick_llvm):
    assert jit(f)(X) == pytest.approx(f(X), rel=1e-12)
    np.testing.assert_allclose(jit(ad.grad(f))(X), ad.grad(f)(X), rtol=1e-12)


def test_only_those_loops_get_a_hidden_index():
    """A loop whose index is not read afterwards keeps its index as written (readable)."""
    def plain(x):
        tot = 0.0
        for j in range(x.shape[0]):
            tot = tot + x[j]
        for j in range(x.shape[0]):
            tot = tot * x[j]
        return tot
    g = ad.grad(plain)
    g(X)
    source = g.source
    assert "for j in range(" in source and "_index" not in source, source
    g = ad.grad(read_after_inner)
    g(X)
    assert "k_index" in g.source, g.source
