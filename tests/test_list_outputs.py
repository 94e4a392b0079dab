"""Functions whose output is a list or a tuple bound to a name: every entry is its own output.

``return [a, b]`` and ``t = (a, b); return t`` used to be taken as one output: vjp gave a zero
cotangent for them (silently) and jacrev failed. Each program's Jacobian from jacfwd and
jacrev, its vjp and its jvp are compared with central differences of the function itself.
A list built at run time (appends in a loop) gets its cotangent as a list.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad


def list_display(x):
    return [x[0] * x[1], np.sin(x)]


def tuple_by_name(x):
    t = (np.sin(x), x[0] * x[1])
    return t


def list_by_name(x):
    out = [np.sin(x) * x[2], np.cos(x)]
    return out


def scalars_list(x):
    return [x[0] * x[1], x[2]]


PROGRAMS = [list_display, tuple_by_name, list_by_name, scalars_list]
X = np.array([0.3, 0.7, 1.1])
EPS = 1e-6


def numeric_jacobians(f, x):
    """Per output entry: its Jacobian (entry shape + x shape) by central differences."""
    cols = []
    for e in np.eye(x.size):
        hi, lo = f(x + EPS * e), f(x - EPS * e)
        cols.append([(np.asarray(a) - np.asarray(b)) / (2 * EPS) for a, b in zip(hi, lo)])
    return [np.stack([c[k] for c in cols], axis=-1) for k in range(len(cols[0]))]


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobian_per_entry(f, jac):
    got = jac(f)(X)
    want = numeric_jacobians(f, X)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_vjp_and_jvp_agree_with_differences(f):
    rng = np.random.default_rng(0)
    want = numeric_jacobians(f, X)
    cts = [rng.normal(size=np.shape(f(X)[k])) for k in range(len(want))]
    cts = [float(c) if np.ndim(c) == 0 else c for c in cts]
    out, pullback = ad.vjp(f, X)
    for a, b in zip(out, f(X)):
        np.testing.assert_allclose(a, b)
    (x_bar,) = pullback(list(cts) if isinstance(f(X), list) else tuple(cts))
    expected = sum(np.tensordot(c, j, axes=np.ndim(c)) for c, j in zip(cts, want))
    np.testing.assert_allclose(x_bar, expected, rtol=1e-6, atol=1e-8)
    direction = rng.normal(size=X.shape)
    _, tangent = ad.jvp(f, (X,), (direction,))
    for t, j in zip(tangent, want):
        np.testing.assert_allclose(t, j @ direction, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [list_display, scalars_list], ids=lambda f: f.__name__)
def test_jit_and_vmap_of_a_list_output(f):
    for a, b in zip(ad.jit(f)(X), f(X)):
        np.testing.assert_allclose(a, b)
    xs = np.stack([X, 2 * X])
    batched = ad.vmap(f)(xs)
    for k, column in enumerate(batched):
        np.testing.assert_allclose(column, np.stack([f(xs[0])[k], f(xs[1])[k]]))


def appended(x):
    out = []
    for i in range(x.shape[0] - 1):
        out.append(np.sin(x) * x[i])
    return out


def test_vjp_of_a_list_built_at_run_time():
    rng = np.random.default_rng(1)
    out, pullback = ad.vjp(appended, X)
    assert isinstance(out, list) and len(out) == 2
    cts = [rng.normal(size=3) for _ in out]
    (x_bar,) = pullback(cts)

    def inner(x):
        return sum(np.dot(o, c) for o, c in zip(appended(x), cts))
    expected = [(inner(X + EPS * e) - inner(X - EPS * e)) / (2 * EPS) for e in np.eye(3)]
    np.testing.assert_allclose(x_bar, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobian_of_a_list_built_at_run_time_is_refused_with_a_hint(jac):
    with pytest.raises(ad.NonFloatOutputError, match="list built at run time") as info:
        jac(appended)(X)
    assert "test_list_outputs.py" in str(info.value) and "np.array" in str(info.value)


def test_vmap_of_a_list_built_at_run_time_is_refused_with_a_hint():
    with pytest.raises(ad.BatchingError, match="list built at run time") as info:
        ad.vmap(appended)(np.stack([X, X]))
    assert "test_list_outputs.py" in str(info.value) and "np.array" in str(info.value)


def nested_output(x, y):
    return x[0] * y, (np.sin(x) * y, [x[1] ** 2, np.sum(x) * y])


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=str)
def test_jacrev_of_a_nested_output_is_jacfwd_s_and_the_differences(argnums):
    """jacrev differentiates a nested output as the tuple of its leaves and nests the blocks
    back (it refused nested tuples before)."""
    y = 1.3
    rev = ad.jacrev(nested_output, argnums=argnums)(X, y)
    fwd = ad.jacfwd(nested_output, argnums=argnums)(X, y)
    assert ad.tree_structure(rev) == ad.tree_structure(fwd)
    for a, b in zip(ad.tree_leaves(rev), ad.tree_leaves(fwd)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    if argnums == 0:
        want = numeric_jacobians(lambda x: ad.tree_leaves(nested_output(x, y)), X)
        for got, w in zip(ad.tree_leaves(rev), want):
            np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-8)


def rebound_after(x):  # t keeps the arrays it was made of; the loop binds new ones
    a = np.sin(x)
    b = x[0] * 2.0
    t = (a, b)
    for _ in range(2):
        a = a * 2.0
        b = b + a[0]
    return t


def test_a_tuple_returned_after_its_parts_are_rebound_keeps_their_old_values():
    want = rebound_after(X)
    for got in (ad.jit(rebound_after)(X), ad.jvp(rebound_after, (X,), (np.ones(3),))[0],
                ad.vjp(rebound_after, X)[0]):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w)
    jac = numeric_jacobians(rebound_after, X)
    for rows in (ad.jacfwd(rebound_after)(X), ad.jacrev(rebound_after)(X)):
        for g, w in zip(rows, jac):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)
