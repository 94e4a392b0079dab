"""NamedTuples built inside the transformed function (`p = P(x * 2, 3.0)`).

Generated code holds such a value as a plain tuple; the normalizer reads `p.a` as the entry
of field `a`, and transformed functions give back an instance of the class where the function
returns one (as JAX returns the pytree type). Derivatives are checked against central finite
differences (autodiff_ast.checks.check_grads: forward and reverse mode).
"""

import collections
from typing import NamedTuple

import numpy as np
import pytest

import autodiff_ast as ad


class P(NamedTuple):
    a: np.ndarray
    b: float


class WithDefault(NamedTuple):
    w: np.ndarray
    scale: float = 3.0


Pair = collections.namedtuple("Pair", "left right")


def _x():
    return np.array([0.3, -1.2, 0.7])


def _positional(x):
    p = P(x * 2, 3.0)
    return np.sum(p.a) * p.b


def _keywords(x):
    p = P(b=np.sum(x * x), a=np.sin(x))
    return np.sum(p.a) * p.b


def _default(x):
    p = WithDefault(np.tanh(x))
    return np.sum(p.w) * p.scale


def _indexed_and_unpacked(x):
    p = P(np.exp(x), np.sum(x))
    a, b = p
    return np.sum(p[0]) * p[1] + np.sum(a * b)


def _norm_of(p):
    return np.sum(p.a ** 2) * p.b


def _scaled(p, s):
    return P(p.a * s, p.b * s)


def _passed_to_helpers(x):
    p = _scaled(P(x, np.sum(np.cos(x))), 2.0)
    q = Pair(x * x, 0.5)
    return _norm_of(p) + q.right * np.sum(q.left)


def _in_control_flow(x):
    if np.sum(x) > 0:
        p = P(x * 2.0, 1.5)
    else:
        p = P(x * 3.0, 2.5)
    for _ in range(2):
        p = P(np.sin(p.a) * p.b, p.b)
    q = P(x, 1.0) if x[0] > 0 else P(x * x, 2.0)
    return np.sum(p.a) + np.sum(q.a) * q.b


def _returns(x):
    return P(b=np.sum(x), a=x * x)


def _with_aux(x):
    p = P(np.sin(x), np.sum(x * x))
    return np.sum(p.a) * p.b, p


@pytest.mark.parametrize("f", [_positional, _keywords, _default, _indexed_and_unpacked,
                               _passed_to_helpers, _in_control_flow, _returns])
def test_namedtuple_built_inside_matches_finite_differences(f):
    for x in (_x(), -_x()):
        ad.check_grads(f, (x,), modes=("rev", "fwd"))


def test_grad_of_namedtuple_built_inside():
    x = _x()
    np.testing.assert_allclose(ad.grad(_positional)(x), np.full(3, 6.0))
    # a field given by keyword, the other by position, and one left to its default
    np.testing.assert_allclose(ad.grad(_default)(x), 3.0 * (1.0 - np.tanh(x) ** 2))


def test_returned_namedtuple_comes_back_as_its_class():
    x = _x()
    out, out_dot = ad.jvp(_returns, (x,), (np.ones(3),))
    assert type(out) is P and type(out_dot) is P
    np.testing.assert_allclose(out.a, x * x)
    np.testing.assert_allclose(out_dot.a, 2 * x)
    np.testing.assert_allclose(out_dot.b, 3.0)
    out, pullback = ad.vjp(_returns, x)
    assert type(out) is P
    np.testing.assert_allclose(out.b, np.sum(x))
    (x_bar,) = pullback(P(np.ones(3), 2.0))
    np.testing.assert_allclose(x_bar, 2 * x + 2.0)


def test_has_aux_namedtuple_comes_back_as_its_class():
    x = _x()
    g, aux = ad.grad(_with_aux, has_aux=True)(x)
    assert type(aux) is P
    np.testing.assert_allclose(aux.a, np.sin(x))
    np.testing.assert_allclose(aux.b, np.sum(x * x))
    want = np.cos(x) * np.sum(x * x) + np.sum(np.sin(x)) * 2 * x
    np.testing.assert_allclose(g, want)


def test_vmap_and_jacrev_of_a_returned_namedtuple():
    xs = np.arange(6.0).reshape(2, 3)
    out = ad.vmap(_returns)(xs)
    assert type(out) is P
    np.testing.assert_allclose(out.a, xs * xs)
    np.testing.assert_allclose(out.b, xs.sum(axis=1))
    jac = ad.jacrev(_returns)(_x())
    assert type(jac) is P
    np.testing.assert_allclose(jac.a, np.diag(2 * _x()))


def test_jit_of_grad_with_a_namedtuple_built_inside(quick_llvm):
    from autodiff_ast.jit import jit
    x = _x()
    np.testing.assert_allclose(jit(ad.grad(_positional))(x), ad.grad(_positional)(x))
    g, aux = jit(ad.grad(_with_aux, has_aux=True))(x)
    assert type(aux) is P
    np.testing.assert_allclose(g, ad.grad(_with_aux, has_aux=True)(x)[0], rtol=1e-12)
    np.testing.assert_allclose(aux.a, np.sin(x))


# ---------------------------------------------------------------- what stays refused
def _replaces(x):
    p = P(x, 1.0)
    p = p._replace(a=x * 2)
    return np.sum(p.a)


def _as_dict(x):
    return P(x, 1.0)._asdict()["a"].sum()


def _class_inside(x):
    class Local(NamedTuple):
        a: np.ndarray
    return np.sum(Local(x).a)


def _namedtuple_call_inside(x):
    Local = collections.namedtuple("Local", "a")
    return np.sum(Local(x).a)


def _made(x):
    return np.sum(P._make((x, 1.0)).a)


def _unknown_field(x):
    return np.sum(P(x, c=1.0).a)


def _missing_field(x):
    return np.sum(P(b=1.0).b * x)


def _wrong_attribute(x):
    return np.sum(P(x, 1.0).c)


@pytest.mark.parametrize("f, message, hint", [
    (_replaces, r"p\._replace\(\.\.\.\): the methods of a NamedTuple \(P\)", "P(v, p.b)"),
    (_as_dict, r"the methods of a NamedTuple \(P\)", '{"a": p.a, "b": p.b}'),
    (_class_inside, r"a NamedTuple class defined inside the function \(Local\)",
     "define Local at module level"),
    (_namedtuple_call_inside, "defining a NamedTuple class inside transformed code",
     "define the class at module level"),
    (_made, r"P\._make\(\.\.\.\) is not supported", "call P(...)"),
    (_unknown_field, r"P has no field 'c' \(its fields: a, b\)", None),
    (_missing_field, r"P\(\.\.\.\) is missing the field 'a'", "P(a, b)"),
    (_wrong_attribute, r"P has no field 'c'", None),
])
def test_what_stays_refused_says_what_to_do(f, message, hint):
    with pytest.raises(ad.UnsupportedSyntaxError, match=message) as info:
        ad.grad(f)(_x())
    if hint is not None:
        assert hint in info.value.hint


def _plain_tuple_by_condition(x):
    t = (x, 1.0) if x[0] > 0 else (x * 2, 2.0)
    return np.sum(t[0] ** 2) * t[1]


def _list_by_condition(x):
    t = [x, x * 3] if x[0] > 0 else [x * 2, x]
    return np.sum(t[0] ** 2 + t[1])


def test_list_chosen_by_a_condition_keeps_its_derivative():
    for x in (_x(), -_x()):
        ad.check_grads(_list_by_condition, (x,), modes=("rev", "fwd"))


def test_plain_tuple_chosen_by_a_condition_keeps_its_derivative():
    # a tuple chosen by a conditional expression was typed unknown, and grad was silently 0
    x = _x()
    assert np.allclose(ad.grad(_plain_tuple_by_condition)(x), 2 * x)
    assert np.allclose(ad.grad(_plain_tuple_by_condition)(-x), 2 * 2 * 4 * -x)
    ad.check_grads(_plain_tuple_by_condition, (x,), order=2)
