"""Tuples inside tuples, and loops over a display or a tuple bound to a name.

Before these were handled, `t = (a, (b, c))` gave the inner tuple no derivative (zero in both
modes, silently); reading `t[1][0]` twice joined two adjoint tuples with `+`; a loop over a
list display of numbers failed with a KeyError and one over a tuple bound to a name had a zero
forward derivative. Each program is checked with check_grads at order 2 in both modes and
jit(grad) against central differences. Inside loops and branches a tuple holding a tuple is
refused with the user's line (its derivative is not carried there).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError


def unpacked_twice(x):
    t = (np.sin(x), (x[0], x[1] * 2.0))
    p, q = t
    r, s = q
    return np.sum(p) + r * s


def indexed_twice(x):
    t = (np.sin(x), (x[0] * x[1], np.cos(x)))
    return np.sum(t[1][1] * t[0]) + t[1][0] * np.sum(t[1][1])


def constant_inside(x):  # its gradient reads `(nb_bar, nc_bar)[1]`: once no derivative
    t = (x[0], (0.5, np.hypot(x[2], 1.5)))
    a, q = t
    b, c = q
    return a * c + b


def nested_list(x):
    t = [x[0], [x[1] * x[2], np.exp(x)]]
    return t[0] * t[1][0] + np.sum(t[1][1])


def helper(x):
    return x[0] * 2.0, (np.sin(x), x[1] ** 2)


def from_helper(x):
    a, rest = helper(x)
    s, q = rest
    return a * np.sum(s) + q


def pairs_display(x):
    total = 0.0
    for a, b in [(x[0], x[1]), (x[2], x[0])]:
        total = total + a * b
    return total


def nested_pairs(x):
    pairs = [(x[0], (x[1], x[2])), (x[2], (x[0], x[1]))]
    total = 0.0
    for a, inner in pairs:
        total = total + a * inner[0] - inner[1]
    return total


def numbers_display(x):
    total = 0.0
    for v in [x[0], x[1] * 2.0, np.sin(x[2])]:
        total = total + v * v
    return total


def named_tuple_loop(x):
    values = (x[0], np.sin(x))
    total = 0.0
    for v in values:
        total = total + np.sum(v * v)
    return total


def copied_then_rebound(x):  # b keeps the old a; forward mode read the new a's tangent
    a = np.sin(x)
    b = a
    for _ in range(2):
        a = a * 1.5 + 0.1 * np.sin(a)
    return np.sum(b) * 0.5 + np.sum(a)


def held_then_rebound(x):  # the same through a tuple (found by make fuzz)
    hv = np.sin(x)
    ht = (hv, 0.5)
    for _ in range(2):
        hv = hv * 1.5 + 0.1 * np.sin(hv)
    return np.sum(ht[0]) * ht[1] + np.sum(hv)


PROGRAMS = [copied_then_rebound, held_then_rebound, unpacked_twice, indexed_twice,
            constant_inside, nested_list, from_helper, pairs_display, nested_pairs,
            numbers_display, named_tuple_loop]
X = np.array([0.3, 0.7, 1.1])


def numeric_grad(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_derivatives_agree_with_differences(f):
    ad.check_grads(f, (X,), order=2, modes=("rev", "fwd"))
    np.testing.assert_allclose(ad.grad(f)(X), numeric_grad(f, X), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [indexed_twice, nested_pairs, named_tuple_loop],
                         ids=lambda f: f.__name__)
def test_jit_of_the_gradient(f):
    np.testing.assert_allclose(ad.jit(ad.grad(f))(X), numeric_grad(f, X), rtol=1e-6,
                               atol=1e-8)


def carried_in_loop(x):
    state = (x[0], (x[1], x[2]))
    for _ in range(3):
        a, inner = state
        b, c = inner
        state = (b * c, (a + c, np.sin(b)))
    return state[0]


def set_in_branch(x):
    t = (x[2], (x[0], x[1]))
    if x[0] > 0:
        t = (x[0], (x[1], x[2] * 3.0))
    return t[0] * t[1][0]


def appended_nested(x):
    items = []
    for i in range(2):
        items.append((x[i], (x[i + 1], x[0])))
    return items[0][0]


@pytest.mark.parametrize("f, line", [
    (carried_in_loop, "state = (b * c, (a + c, np.sin(b)))"),
    (set_in_branch, "t = (x[0], (x[1], x[2] * 3.0))"),
    (appended_nested, "items.append((x[i], (x[i + 1], x[0])))"),
], ids=["loop", "branch", "list"])
def test_nested_tuples_in_blocks_are_refused_with_the_line(f, line):
    with pytest.raises(UnsupportedSyntaxError, match="tuples? holding") as info:
        ad.grad(f)(X)
    assert "test_nested_tuples.py" in str(info.value) and line in str(info.value)
