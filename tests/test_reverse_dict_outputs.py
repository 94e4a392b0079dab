"""vjp and jacrev of a function returning a dict (JAX's output pytrees).

The generated module returns a dict output as the tuple of its values (codegen/dict_outputs.py);
vjp gives the output back as the dict, and its pullback takes the cotangent as a dict with the
output's keys (flattened in the spec's key order, whatever order the user's dict has); jacrev
gives a dict of Jacobian blocks. Before, both were refused ("f returns a dict, which has no
derivative here"). References: central differences of the user's function, and the dot-product
test against jvp (which gave dicts already).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

RNG = np.random.default_rng(7)


def _display(x, y):
    a = np.sin(x) * y
    return {"a": a, "b": np.sum(x * x) * y}


def _built_entry_by_entry(x, y):
    out = {}
    out["u"] = x * y
    out["v"] = np.cos(x) + y * y
    return out


def _tuple_holding_a_dict(x, y):
    return np.sum(x) * y, {"s": np.exp(x) * y, "t": np.tanh(y * x[0])}


FUNCTIONS = [_display, _built_entry_by_entry, _tuple_holding_a_dict]


def _leaves(tree):
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in _leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for part in tree for leaf in _leaves(part)]
    return [np.asarray(tree, dtype=float)]


def _flat(tree):
    return np.concatenate([leaf.ravel() for leaf in _leaves(tree)])


def _fd_jacobian(f, x, y, argnum):
    """The Jacobian of f's flattened output in argument `argnum`, by central differences."""
    args = [x, y]
    base = np.atleast_1d(np.asarray(args[argnum], dtype=float))
    cols = []
    for k in range(base.size):
        e = np.zeros(base.size)
        e[k] = 1e-6
        plus, minus = list(args), list(args)
        plus[argnum] = (base + e).reshape(np.shape(args[argnum]))
        minus[argnum] = (base - e).reshape(np.shape(args[argnum]))
        plus[argnum] = plus[argnum] if np.ndim(args[argnum]) else float(plus[argnum])
        minus[argnum] = minus[argnum] if np.ndim(args[argnum]) else float(minus[argnum])
        cols.append((_flat(f(*plus)) - _flat(f(*minus))) / 2e-6)
    return np.stack(cols, axis=1)


def _random_like(tree):
    if isinstance(tree, dict):
        return {key: _random_like(value) for key, value in reversed(list(tree.items()))}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_random_like(part) for part in tree)
    return RNG.standard_normal(np.shape(tree)) if np.ndim(tree) else float(RNG.standard_normal())


X = np.array([0.3, -0.7, 1.1])
Y = 1.3


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_vjp_of_a_dict_output_against_differences_and_jvp(f):
    out, pullback = ad.vjp(f, X, Y)
    expected = f(X, Y)
    assert type(_random_like(out)) is type(expected)
    np.testing.assert_allclose(_flat(out), _flat(expected), rtol=1e-12)
    cotangent = _random_like(expected)  # (its dicts' keys in reversed order: read by key)
    x_bar, y_bar = pullback(cotangent)
    jac_x, jac_y = _fd_jacobian(f, X, Y, 0), _fd_jacobian(f, X, Y, 1)
    np.testing.assert_allclose(x_bar, _flat(cotangent) @ jac_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(y_bar, (_flat(cotangent) @ jac_y)[0], rtol=1e-6, atol=1e-8)
    # the dot-product test against forward mode: <ct, J v> = <J^T ct, v>
    v, w = RNG.standard_normal(3), 0.4
    _, out_dot = ad.jvp(f, (X, Y), (v, w))
    assert np.dot(_flat(cotangent), _flat(out_dot)) == pytest.approx(
        np.dot(x_bar, v) + y_bar * w, rel=1e-10)
    # the pullback can be called again, with another cotangent
    again = _random_like(expected)
    np.testing.assert_allclose(pullback(again)[0], _flat(again) @ jac_x, rtol=1e-6, atol=1e-8)


def _per_argnum(jac, like, k):
    """The blocks of argument k in jac(f, argnums=(0, 1)): JAX's nesting puts the output's
    structure (`like`) outside and the argnums tuple at each leaf."""
    if isinstance(like, dict):
        return {key: _per_argnum(jac[key], like[key], k) for key in like}
    if isinstance(like, (tuple, list)):
        return type(like)(_per_argnum(j, part, k) for j, part in zip(jac, like))
    return jac[k]


@pytest.mark.parametrize("f", FUNCTIONS, ids=lambda f: f.__name__)
def test_jacrev_of_a_dict_output_is_a_dict_of_blocks(f):
    jac = ad.jacrev(f, argnums=(0, 1))(X, Y)
    forward = ad.jacfwd(f, argnums=(0, 1))(X, Y)
    expected = f(X, Y)
    for k in (0, 1):
        got = _per_argnum(jac, expected, k)
        assert type(got) is type(expected)
        if isinstance(expected, tuple):
            assert type(got[1]) is dict and list(got[1]) == ["s", "t"]
        rows = np.concatenate([np.reshape(leaf, (-1, 1 if k else 3)) for leaf in _leaves(got)])
        np.testing.assert_allclose(rows, _fd_jacobian(f, X, Y, k), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(_flat(got), _flat(_per_argnum(forward, expected, k)),
                                   rtol=1e-12)


@pytest.mark.numba
@pytest.mark.parametrize("f", [_display, _tuple_holding_a_dict], ids=lambda f: f.__name__)
def test_jit_of_jacrev_of_a_dict_output(f):
    got = jit(ad.jacrev(f))(X, Y)
    plain = ad.jacrev(f)(X, Y)
    assert type(got) is type(plain)
    np.testing.assert_allclose(_flat(got), _flat(plain), rtol=1e-12)
    np.testing.assert_allclose(_flat(plain).reshape(-1, 3), _fd_jacobian(f, X, Y, 0),
                               rtol=1e-6, atol=1e-8)


def test_a_cotangent_not_shaped_like_the_dict_output_is_refused():
    _, pullback = ad.vjp(_display, X, Y)
    with pytest.raises(ad.ShapeMismatchError, match=r"keys \['a', 'b'\], not \['a'\]"):
        pullback({"a": X})
    with pytest.raises(ad.ShapeMismatchError, match="must be a dict"):
        pullback((X, 1.0))
    _, pullback = ad.vjp(_tuple_holding_a_dict, X, Y)
    with pytest.raises(ad.ShapeMismatchError, match="tuple of 2"):
        pullback({"s": X, "t": 1.0})


def test_jacrev_of_a_dict_output_inside_transformed_code_names_the_line():
    def outer(x):
        return np.sum(ad.jacrev(_display)(x, Y)["a"])
    with pytest.raises(ad.UnsupportedSyntaxError, match="returning a dict"):
        ad.grad(outer)(X)


# ---------------------------------------------------------------- dicts deeper in the output
# (session 44): `return a, [b, {"k": c}]` gave the dict a tangent of 0.0 in jvp and linearize
# and dropped its cotangent in vjp, silently; jacrev and vmap refused it.
def _dict_in_a_list(x, y):
    return np.sum(x) * y, [x[0] * y, {"k": np.cos(x) * y, "m": y * y}]


def _built_dict_in_a_tuple(x, y):
    d = {}
    d["k"] = np.sin(x) * y
    return x[1] * y, (d, x ** 2)


def _passes_a_helpers_output(x, y):
    return _dict_in_a_list(x, y)


NESTED = [_dict_in_a_list, _built_dict_in_a_tuple, _passes_a_helpers_output]


def _structure(tree):
    if isinstance(tree, dict):
        return {key: _structure(value) for key, value in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_structure(part) for part in tree)
    return np.shape(tree)


@pytest.mark.parametrize("f", NESTED, ids=lambda f: f.__name__)
def test_dicts_inside_lists_and_tuples_of_the_output(f):
    expected = f(X, Y)
    v, w = RNG.standard_normal(3), 0.4
    out, out_dot = ad.jvp(f, (X, Y), (v, w))
    assert _structure(out) == _structure(expected) == _structure(out_dot)
    jac_x, jac_y = _fd_jacobian(f, X, Y, 0), _fd_jacobian(f, X, Y, 1)
    np.testing.assert_allclose(_flat(out_dot), jac_x @ v + jac_y[:, 0] * w, rtol=1e-6,
                               atol=1e-8)
    _, linear = ad.linearize(f, X, Y)
    np.testing.assert_allclose(_flat(linear(v, w)), _flat(out_dot), rtol=1e-12)
    out, pullback = ad.vjp(f, X, Y)
    cotangent = _random_like(expected)
    x_bar, y_bar = pullback(cotangent)
    np.testing.assert_allclose(x_bar, _flat(cotangent) @ jac_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(y_bar, (_flat(cotangent) @ jac_y)[0], rtol=1e-6, atol=1e-8)
    jac = ad.jacrev(f, argnums=(0, 1))(X, Y)
    for k in (0, 1):
        got = _per_argnum(jac, expected, k)
        rows = np.concatenate([np.reshape(leaf, (-1, 1 if k else 3)) for leaf in _leaves(got)])
        np.testing.assert_allclose(rows, _fd_jacobian(f, X, Y, k), rtol=1e-6, atol=1e-8)
    forward = ad.jacfwd(f)(X, Y)
    assert _structure(forward) == _structure(ad.jacrev(f)(X, Y))
    np.testing.assert_allclose(_flat(forward).reshape(-1, 3), jac_x, rtol=1e-6, atol=1e-8)


def test_vmap_of_a_dict_inside_a_list_of_the_output():
    xs = RNG.standard_normal((4, 3))
    got = ad.vmap(_dict_in_a_list, in_axes=(0, None))(xs, Y)
    for i in range(4):
        one = _dict_in_a_list(xs[i], Y)
        assert isinstance(got[1], list) and list(got[1][1]) == ["k", "m"]
        np.testing.assert_allclose(got[1][1]["k"][i], one[1][1]["k"])
        np.testing.assert_allclose(got[0][i], one[0])


def _reads_a_helpers_nested_dict(x, y):
    a, b = _dict_in_a_list(x, y)
    return a + b[0] + np.sum(b[1]["k"] ** 2) * b[1]["m"]


def test_grad_reading_a_dict_a_helper_returns_inside_a_list():
    expected = _fd_jacobian(_reads_a_helpers_nested_dict, X, Y, 0)[0]
    np.testing.assert_allclose(ad.grad(_reads_a_helpers_nested_dict)(X, Y), expected,
                               rtol=1e-6)
