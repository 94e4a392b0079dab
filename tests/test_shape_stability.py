"""Reverse mode needs one shape per core name: regressions for silently wrong gradients.

Each name's abstract type says which axes have size one; the reverse sweep sums an adjoint
over exactly those axes. A name typed with a longer axis while holding a size-one one (a
`.shape` tuple or a `0:1` slice typed as long, a name rebound to another shape inside a loop
or branch) skipped that sum or broadcast a term up and counted it n times. These programs are
checked against finite differences, or must be refused loudly.
"""
import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import check_grads

RNG = np.random.default_rng(3)
X = RNG.uniform(-1.0, 1.0, 5)
C = RNG.uniform(-1.0, 1.0, (3, 1))
A = RNG.uniform(-1.0, 1.0, (2, 4))


def times(a, b):
    return a * b


def helper_column(a):
    """`t_bar = np.broadcast_to(t_bar, t.shape)` in the first-order code typed t.shape as
    (m, n) for an (m, 1) t: rev-over-rev broadcast an (m, 1) term to (m, n) and summed it."""
    t = times(np.sum(a, axis=1, keepdims=True), np.mean(a) + a[0][2])
    s = np.sum(a, axis=0)
    s = 0.7 * s + 0.3 * np.sum(t * s, axis=0)
    return np.mean(t * s)


def column_slice(a):
    """`a[:, 0:1]` is (m, 1): its adjoint is summed over the columns, not broadcast."""
    return np.mean(a[:, 0:1] * a[0])


def last_slice(a):
    return np.sum(np.sin(a[-1:, :] * a[:, 1:2]))


def rebound_in_branch(x, c):
    """t is first bound in the branch, then rebound to another shape there: it gets a new
    version (one shape per core name)."""
    if np.sum(x) > -10.0:
        t = np.sum(c * 2.0, axis=0)
        t = np.broadcast_to(t, x.shape).copy()
    else:
        t = x * 1.0
    return np.sum(np.sin(t * x))


@pytest.mark.parametrize("fn,args", [
    (helper_column, (A,)),
    (column_slice, (A,)),
    (last_slice, (A,)),
    (rebound_in_branch, (X, C)),
], ids=["helper_column", "column_slice", "last_slice", "rebound_in_branch"])
@pytest.mark.parametrize("order", [1, 2])
def test_reverse_matches_finite_differences(fn, args, order):
    check_grads(fn, args, order=order, modes=("rev",))


def carried_in_loop(x):
    t = np.sum(x, keepdims=True)
    for _ in range(1):
        t = t + x
    return np.sum(t)


def carried_in_branch(x):
    t = np.sum(x, keepdims=True)
    if x[0] > -10.0:
        t = t + x
    return np.sum(np.sin(t))


@pytest.mark.parametrize("fn", [carried_in_loop, carried_in_branch])
def test_name_holding_two_shapes_is_refused(fn):
    """t holds a (1,) value before the loop or branch and an (n,) one in it: the gradient
    was silently wrong (2 instead of n + 1 per element); now reverse mode refuses it."""
    with pytest.raises(ad.UnsupportedError, match="different shapes"):
        ad.grad(fn)(X)


def test_forward_mode_still_handles_a_name_holding_two_shapes():
    check_grads(carried_in_loop, (X,), order=1, modes=("fwd",))


def nested_outputs(x):
    return np.sum(x), (np.sin(x), x * x)


def test_vjp_of_nested_tuple_output():
    """Adjoints inside an inner output tuple were dropped (only top-level outputs seeded)."""
    out, pullback = ad.vjp(nested_outputs, X)
    ct = (0.7, (np.cos(X), X + 1.0))
    (got,) = pullback(ct)
    expected = 0.7 + np.cos(X) * np.cos(X) + 2.0 * X * (X + 1.0)
    assert np.allclose(got, expected)
