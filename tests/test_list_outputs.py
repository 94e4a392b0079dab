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


# ---------------------------------------------------------------- the container comes back
# Generated code returns tuples (Numba returns no lists of arrays); each transformation puts
# back the lists the function returns (autodiff_ast/output_lists.py), as JAX keeps a list a
# list: tree_map over a transformed result and the function's own result then works.

def helper_list(x):
    return [np.cos(x), x[0] * x[2]]


def through_a_helper(x):
    return helper_list(x)


def branches(x):
    if x[0] > 0.0:
        return [np.sin(x), x[1] * 2.0]
    return [np.cos(x), x[1] * 3.0]


def loss_and_list(x):
    return np.sum(x * x), [np.sin(x), x[0] * x[1]]


LIST_OUTPUTS = [list_display, list_by_name, through_a_helper, branches]


def _same_tree(got, want, **tolerances):
    assert ad.tree_structure(got) == ad.tree_structure(want), (got, want)
    for g, w in zip(ad.tree_leaves(got), ad.tree_leaves(want)):
        np.testing.assert_allclose(g, w, **tolerances)


@pytest.mark.parametrize("f", LIST_OUTPUTS, ids=lambda f: f.__name__)
def test_jit_vmap_jvp_vjp_and_linearize_return_the_function_s_lists(f):
    _same_tree(ad.jit(f)(X), f(X))
    jitted = ad.jit(f)
    jitted(X)
    _same_tree(jitted(X), f(X))  # the second call takes jit's fast path
    xs = np.stack([X, 2 * X])
    want = [np.stack([f(xs[0])[k], f(xs[1])[k]]) for k in range(2)]
    _same_tree(ad.vmap(f)(xs), want)
    _same_tree(ad.jit(ad.vmap(f))(xs), want)
    direction = np.array([0.5, -1.0, 2.0])
    jac = numeric_jacobians(f, X)
    out, tangent = ad.jvp(f, (X,), (direction,))
    _same_tree(out, f(X))
    _same_tree(tangent, [j @ direction for j in jac], rtol=1e-6, atol=1e-8)
    out, _ = ad.vjp(f, X)
    _same_tree(out, f(X))
    out, f_jvp = ad.linearize(f, X)
    _same_tree(out, f(X))
    _same_tree(f_jvp(direction), [j @ direction for j in jac], rtol=1e-6, atol=1e-8)
    # the user's reason to care: combining a transformed result with the function's own
    differences = ad.tree_map(lambda a, b: a - b, ad.jit(f)(X), f(X))
    assert isinstance(differences, list)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
@pytest.mark.parametrize("f", LIST_OUTPUTS, ids=lambda f: f.__name__)
def test_jacobians_of_a_list_output_are_a_list(f, jac):
    _same_tree(jac(f)(X), numeric_jacobians(f, X), rtol=1e-6, atol=1e-8)
    _same_tree(ad.jit(jac(f))(X), numeric_jacobians(f, X), rtol=1e-6, atol=1e-8)


def test_a_list_inside_a_nested_output_stays_a_list():
    y = 1.3
    want = nested_output(X, y)
    _same_tree(ad.jit(nested_output)(X, y), want)
    _same_tree(ad.jvp(nested_output, (X, y), (np.ones(3), 0.0))[0], want)
    jac = ad.jacfwd(nested_output, argnums=1)(X, y)
    assert isinstance(jac[1][1], list)
    numeric = numeric_jacobians(lambda x: ad.tree_leaves(nested_output(X, x[0])),
                                np.array([y]))
    for got, w in zip(ad.tree_leaves(jac), numeric):
        np.testing.assert_allclose(got, w[..., 0], rtol=1e-6, atol=1e-8)


def test_an_aux_list_stays_a_list():
    grad_x = 2 * X
    aux = loss_and_list(X)[1]
    for g in (ad.grad(loss_and_list, has_aux=True), ad.jit(ad.grad(loss_and_list,
                                                                    has_aux=True))):
        for _ in range(2):  # (jit: the first call and the fast path)
            got_grad, got_aux = g(X)
            np.testing.assert_allclose(got_grad, grad_x)
            _same_tree(got_aux, aux)
    for g in (ad.value_and_grad(loss_and_list, has_aux=True),
              ad.jit(ad.value_and_grad(loss_and_list, has_aux=True))):
        (value, got_aux), got_grad = g(X)
        np.testing.assert_allclose(value, np.sum(X * X))
        _same_tree(got_aux, aux)
        np.testing.assert_allclose(got_grad, grad_x)
    value, pullback, got_aux = ad.vjp(loss_and_list, X, has_aux=True)
    _same_tree(got_aux, aux)
    np.testing.assert_allclose(pullback(1.0)[0], grad_x)
    value, tangent, got_aux = ad.jvp(loss_and_list, (X,), (np.ones(3),), has_aux=True)
    _same_tree(got_aux, aux)
    np.testing.assert_allclose(tangent, np.sum(grad_x))
    jac, got_aux = ad.jacfwd(loss_and_list, has_aux=True)(X)
    _same_tree(got_aux, aux)
    np.testing.assert_allclose(jac, grad_x)


def test_hessian_of_a_list_output_is_a_list():
    def pair(x):
        return [np.sum(x ** 3), x[0] * x[1]]
    got = ad.hessian(pair)(X)
    assert isinstance(got, list)
    np.testing.assert_allclose(got[0], np.diag(6 * X), rtol=1e-12)
    np.testing.assert_allclose(got[1], [[0, 1, 0], [1, 0, 0], [0, 0, 0]], atol=1e-15)


def test_pmap_returns_the_function_s_list():
    xs = np.stack([X, 2 * X])
    want = [np.stack([list_display(xs[0])[k], list_display(xs[1])[k]]) for k in range(2)]
    _same_tree(ad.pmap(list_display)(xs), want)


def test_returned_lists_reads_displays_names_helpers_and_branches():
    from autodiff_ast.output_lists import returned_lists
    two = ("list", (None, None))
    assert returned_lists(list_display) == two
    assert returned_lists(list_by_name) == two
    assert returned_lists(through_a_helper) == two
    assert returned_lists(branches) == two
    assert returned_lists(tuple_by_name) is None
    assert returned_lists(nested_output) == ("tuple", (None, ("tuple", (None, two))))
    assert returned_lists(loss_and_list) == ("tuple", (None, two))


def _mixed(x):
    if x[0] > 0.0:
        return [x, x]
    return (x, x)


def _starred(x):
    rest = [x, x]
    return [*rest, x]


def _grown(x):
    out = [x]
    out.append(2.0 * x)
    return out


def _rebound(x):
    out = [x, x]
    out = (x, x)
    return out


def _recursive(x, n):
    if n == 0:
        return [x, x]
    return _recursive(x, n - 1)


def _dict_aux(x):
    return np.sum(x), {"parts": [x, 2.0 * x], "scale": 2.0}


@pytest.mark.parametrize("f, spec", [
    (_mixed, None),  # returns that disagree: the generated tuple is kept
    (_starred, None),
    (_grown, None),  # a list grown at run time is returned as a list already
    (_rebound, None),
    (_recursive, None),  # the recursive call reads None while the spec is worked out
    (_dict_aux, ("tuple", (None, ("dict", (("parts", ("list", (None, None))),
                                           ("scale", None)))))),
    (lambda x: [x, (x, [x])], ("list", (None, ("tuple", (None, ("list", (None,)))))))],
    ids=["mixed", "starred", "grown", "rebound", "recursive", "dict", "lambda"])
def test_returned_lists_declines_what_it_cannot_read(f, spec):
    from autodiff_ast.output_lists import returned_lists
    assert returned_lists(f) == spec


def test_restore_lists_leaves_what_does_not_match_the_spec():
    from autodiff_ast.output_lists import restore_lists
    spec = ("list", (None, None))
    assert restore_lists((1, 2), spec) == [1, 2]
    assert restore_lists((1, 2, 3), spec) == (1, 2, 3)  # another length
    point = __import__("collections").namedtuple("point", "a b")(1, 2)
    assert restore_lists(point, spec) is point  # a NamedTuple is the user's type
    assert restore_lists(np.array([1.0, 2.0]), spec).shape == (2,)


def made_by_list(x):
    return list((np.sin(x), x[0] * x[1]))


def made_by_tuple(x):
    t = tuple([np.cos(x), x[2]])
    u = tuple(t)  # a tuple of a tuple: the same tuple
    return t[0] * u[1]


def test_list_and_tuple_of_a_display_are_that_display():
    """`tuple([a, b])` and `list((a, b))` are the display they make, and `tuple(t)` of a tuple
    is t (tuple() of either had no derivative rule before)."""
    _same_tree(ad.jit(made_by_list)(X), made_by_list(X))
    _same_tree(ad.jacrev(made_by_list)(X), numeric_jacobians(made_by_list, X), rtol=1e-6,
               atol=1e-8)
    got = ad.jacfwd(made_by_tuple)(X)
    want = numeric_jacobians(lambda x: [made_by_tuple(x)], X)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ad.jit(made_by_tuple)(X), made_by_tuple(X))
