"""Tests for autodiff_ast.pytrees."""

from __future__ import annotations

import collections
import dataclasses
import doctest
import keyword
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autodiff_ast as ad
from autodiff_ast import pytrees
from autodiff_ast.pytrees import (
    PyTreeDef,
    path_to_name,
    register_pytree_node,
    tree_flatten,
    tree_flatten_with_path,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)


class Point(NamedTuple):
    x: float
    y: float


@dataclasses.dataclass
class Layer:
    W: np.ndarray
    b: np.ndarray


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: float
    b: tuple

    def __post_init__(self):
        if not isinstance(self.a, float):
            raise TypeError("a must be a float")


class Box:
    """A class registered by the tests below."""

    def __init__(self, items, label):
        self.items = items
        self.label = label


register_pytree_node(Box, lambda box: (box.items, box.label), lambda label, c: Box(c, label))


def _same(a, b):
    """Structural equality that also compares arrays and rebuilt custom nodes."""
    la, ta = tree_flatten(a)
    lb, tb = tree_flatten(b)
    if ta != tb or len(la) != len(lb):
        return False
    return all(type(x) is type(y) and np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


ROUND_TRIP_CASES = [
    1.0,
    3,
    np.float32(2.5),
    np.arange(6.0).reshape(2, 3),
    None,
    [],
    (),
    {},
    [1, 2.0, np.ones(3)],
    (1,),
    {"b": 1, "a": [2, (3, None)], "c": {}},
    Point(1.0, np.zeros(2)),
    Layer(np.eye(2), np.zeros(2)),
    Frozen(1.0, (2, 3)),
    collections.OrderedDict([("z", 1), ("a", 2)]),
    collections.defaultdict(list, {"k": 1, "j": [2, 3]}),
    {"layers": [Layer(np.ones((2, 2)), np.ones(2)), None], "scale": Point(1.0, 2.0)},
    Box([1.0, {"u": 2.0}], "lbl"),
]


@pytest.mark.parametrize("tree", ROUND_TRIP_CASES, ids=lambda t: type(t).__name__)
def test_round_trip(tree):
    leaves, treedef = tree_flatten(tree)
    assert treedef.num_leaves == len(leaves)
    rebuilt = tree_unflatten(treedef, leaves)
    assert type(rebuilt) is type(tree)
    assert _same(rebuilt, tree)
    assert tree_structure(rebuilt) == treedef
    again = tree_leaves(tree)
    assert len(again) == len(leaves)
    assert all(a is b for a, b in zip(again, leaves, strict=True))


def test_dict_keys_are_sorted_and_unflatten_gives_plain_dict():
    leaves, treedef = tree_flatten({"b": 1, "a": 2, "c": 3})
    assert leaves == [2, 1, 3]
    rebuilt = tree_unflatten(treedef, leaves)
    assert list(rebuilt) == ["a", "b", "c"]
    assert rebuilt == {"a": 2, "b": 1, "c": 3}


def test_insertion_order_does_not_change_structure():
    assert tree_structure({"a": 1, "b": 2}) == tree_structure({"b": 2, "a": 1})


def test_mixed_key_types_have_a_deterministic_order():
    one = {1: "int", "1": "str", (0,): "tuple"}
    other = {(0,): "tuple", "1": "str", 1: "int"}
    assert tree_leaves(one) == tree_leaves(other)
    assert tree_structure(one) == tree_structure(other)


def test_ordered_dict_keeps_its_order():
    tree = collections.OrderedDict([("z", 1), ("a", 2)])
    assert tree_leaves(tree) == [1, 2]
    assert tree_structure(tree) != tree_structure(collections.OrderedDict([("a", 2), ("z", 1)]))


def test_defaultdict_keeps_its_factory():
    tree = collections.defaultdict(list, {"b": 1, "a": 2})
    rebuilt = tree_map(lambda x: x * 10, tree)
    assert isinstance(rebuilt, collections.defaultdict)
    assert rebuilt.default_factory is list
    assert dict(rebuilt) == {"a": 20, "b": 10}


def test_none_is_a_node_without_leaves():
    assert tree_leaves(None) == []
    assert tree_structure(None).num_leaves == 0
    assert tree_map(lambda x: x + 1, {"a": None, "b": 1}) == {"a": None, "b": 2}
    assert tree_structure(None) != tree_structure(0)


def test_unregistered_subclasses_are_leaves():
    class MyList(list):
        pass

    class MyDict(dict):
        pass

    class MyTuple(tuple):
        __slots__ = ()

    for value in (MyList([1, 2]), MyDict(a=1), MyTuple((1, 2))):
        assert tree_leaves(value) == [value]


def test_namedtuple_and_dataclass_rebuild_their_types():
    out = tree_map(lambda v: v * 2, {"p": Point(1.0, 2.0), "l": Layer(np.ones(2), np.zeros(2))})
    assert out["p"] == Point(2.0, 4.0)
    assert isinstance(out["l"], Layer)
    np.testing.assert_array_equal(out["l"].W, [2.0, 2.0])


def test_dataclass_rebuild_skips_init_and_post_init():
    # Leaves put back are not always what __post_init__ accepts (here ints, not floats).
    rebuilt = tree_map(lambda _: 0, Frozen(1.0, (2.0,)))
    assert isinstance(rebuilt, Frozen)
    assert rebuilt.a == 0 and rebuilt.b == (0,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rebuilt.a = 1


def test_dataclass_fields_in_declaration_order():
    @dataclasses.dataclass
    class Ordered:
        zeta: int
        alpha: int

    assert tree_leaves(Ordered(1, 2)) == [1, 2]
    pairs, _ = tree_flatten_with_path(Ordered(1, 2))
    assert [path for path, _ in pairs] == [("zeta",), ("alpha",)]


def test_paths():
    tree = {
        "params": {"W": 1, "b": 2},
        "layers": [Layer(3, 4), (5, None, 6)],
        "pt": Point(7, 8),
        "box": Box([9], "x"),
    }
    pairs, treedef = tree_flatten_with_path(tree)
    assert pairs == [
        (("box", 0), 9),
        (("layers", 0, "W"), 3),
        (("layers", 0, "b"), 4),
        (("layers", 1, 0), 5),
        (("layers", 1, 2), 6),
        (("params", "W"), 1),
        (("params", "b"), 2),
        (("pt", "x"), 7),
        (("pt", "y"), 8),
    ]
    assert treedef == tree_structure(tree)
    assert [leaf for _, leaf in pairs] == tree_leaves(tree)


def test_path_of_a_bare_leaf_is_empty():
    assert tree_flatten_with_path(np.ones(2))[0][0][0] == ()


def test_treedef_is_hashable_and_comparable():
    a = tree_structure({"w": [1.0, 2.0], "b": Point(0, 0)})
    b = tree_structure({"b": Point(np.ones(3), 5), "w": [np.ones(2), 7]})
    assert a == b and hash(a) == hash(b)
    cache = {a: "compiled"}
    assert cache[b] == "compiled"
    different = [
        tree_structure({"w": (1.0, 2.0), "b": Point(0, 0)}),  # tuple, not list
        tree_structure({"w": [1.0, 2.0], "c": Point(0, 0)}),  # other key
        tree_structure({"w": [1.0, 2.0, 3.0], "b": Point(0, 0)}),  # more leaves
        tree_structure({"w": [1.0, 2.0], "b": (0, 0)}),  # plain tuple, not NamedTuple
        tree_structure({"w": [1.0, None], "b": Point(0, 0)}),  # None is not a leaf
    ]
    for other in different:
        assert a != other
    assert len({a, *different}) == 1 + len(different)
    assert a != "not a treedef"


def test_custom_aux_data_is_part_of_the_structure():
    assert tree_structure(Box([1], "a")) == tree_structure(Box([2], "a"))
    assert tree_structure(Box([1], "a")) != tree_structure(Box([1], "b"))


def test_treedef_repr():
    assert repr(tree_structure(1.0)) == "PyTreeDef(*)"
    assert repr(tree_structure((1,))) == "PyTreeDef((*,))"
    tree = {"a": [1, None], "b": Point(1, 2), "c": Layer(1, 2), "d": Box([1, 2], "lbl")}
    assert repr(tree_structure(tree)) == (
        "PyTreeDef({'a': [*, None], 'b': Point(x=*, y=*), 'c': Layer(W=*, b=*), "
        "'d': CustomNode(Box['lbl'], [*, *])})"
    )
    assert repr(tree_structure(collections.defaultdict(list, {"k": 1}))) == (
        "PyTreeDef(defaultdict(list, {'k': *}))"
    )


def test_treedef_counts_and_children():
    treedef = tree_structure({"a": [1, 2], "b": None})
    assert treedef.num_leaves == 2
    assert treedef.num_nodes == 5
    assert treedef.children() == [tree_structure([0, 0]), tree_structure(None)]


@pytest.mark.parametrize("count", [0, 1, 3])
def test_unflatten_with_wrong_number_of_leaves(count):
    treedef = tree_structure({"a": 1, "b": 2})
    with pytest.raises(ValueError, match=f"has 2 leaves, but {count} were given"):
        tree_unflatten(treedef, list(range(count)))


def test_unflatten_accepts_any_iterable():
    treedef = tree_structure([0, 0, 0])
    assert tree_unflatten(treedef, iter("abc")) == ["a", "b", "c"]
    assert tree_unflatten(treedef, (x for x in range(3))) == [0, 1, 2]


def test_unflatten_rejects_a_non_treedef():
    with pytest.raises(TypeError, match="PyTreeDef"):
        tree_unflatten([1, 2], [1, 2])


def test_tree_map_with_several_trees():
    a = {"x": np.ones(2), "y": (1.0, 2.0)}
    b = {"x": np.full(2, 3.0), "y": (10.0, 20.0)}
    out = tree_map(lambda p, q: p + q, a, b)
    np.testing.assert_array_equal(out["x"], [4.0, 4.0])
    assert out["y"] == (11.0, 22.0)


def test_tree_map_passes_deeper_subtrees_whole():
    out = tree_map(lambda x, sub: (x, sub), [1, 2], [{"a": 3}, (4, 5)])
    assert out == [(1, {"a": 3}), (2, (4, 5))]


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"a": 1}, r"path \(\): expected \{'a': \*, 'b': \[\*, \*\]\}, got dict with keys"),
        ({"a": 1, "b": [1]}, r"path \('b',\): expected \[\*, \*\], got list of length 1"),
        ({"a": 1, "b": (1, 2)}, r"path \('b',\): expected \[\*, \*\], got tuple of length 2"),
        ({"a": 1, "b": 5}, r"path \('b',\): expected \[\*, \*\], got leaf of type int"),
    ],
)
def test_tree_map_structure_mismatch_names_the_path(other, message):
    with pytest.raises(ValueError, match=message):
        tree_map(lambda x, y: x, {"a": 1, "b": [1, 2]}, other)


def test_is_leaf_stops_the_descent():
    tree = {"pair": (1, 2), "list": [3, (4, 5)]}
    leaves, treedef = tree_flatten(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [3, (4, 5), (1, 2)]
    assert tree_unflatten(treedef, leaves) == tree
    counted = tree_map(
        lambda x: len(x) if isinstance(x, tuple) else x,
        tree,
        is_leaf=lambda x: isinstance(x, tuple),
    )
    assert counted == {"pair": 2, "list": [3, 2]}
    assert tree_leaves(None, is_leaf=lambda x: x is None) == [None]


def test_registry_errors():
    class Fresh:
        pass

    register_pytree_node(Fresh, lambda f: ((), None), lambda aux, children: Fresh())
    with pytest.raises(ValueError, match="already registered"):
        register_pytree_node(Fresh, lambda f: ((), None), lambda aux, children: Fresh())
    for builtin in (dict, list, tuple, type(None), collections.OrderedDict):
        with pytest.raises(ValueError, match="built-in"):
            register_pytree_node(builtin, lambda f: ((), None), lambda aux, children: None)
    with pytest.raises(TypeError, match="expects a class"):
        register_pytree_node(Fresh(), lambda f: ((), None), lambda aux, children: None)
    with pytest.raises(TypeError, match="callable"):
        register_pytree_node(type("Other", (), {}), None, None)


def test_bad_flatten_function_is_reported():
    class Bad:
        pass

    register_pytree_node(Bad, lambda obj: [1, 2, 3], lambda aux, children: Bad())
    with pytest.raises(TypeError, match=r"must return \(children, aux_data\)"):
        tree_flatten(Bad())


def test_registration_overrides_dataclass_handling():
    @dataclasses.dataclass
    class Params:
        w: float
        static_name: str

    register_pytree_node(
        Params, lambda p: ((p.w,), p.static_name), lambda name, c: Params(c[0], name)
    )
    leaves, treedef = tree_flatten(Params(1.5, "dense"))
    assert leaves == [1.5]
    assert tree_unflatten(treedef, [2.5]) == Params(2.5, "dense")


def test_registered_children_may_be_any_iterable():
    class Gen:
        def __init__(self, values):
            self.values = values

    register_pytree_node(
        Gen, lambda g: ((v for v in g.values), len(g.values)), lambda n, c: Gen(list(c))
    )
    assert tree_map(lambda x: -x, Gen([1, 2])).values == [-1, -2]


# --- path_to_name -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("params", ("W",), "params_W"),
        ("params", (0,), "params_0"),
        ("params", ("layers", 1, "b"), "params_layers_1_b"),
        ("x", (), "x"),
        ("p", ("a-b", "c.d", "e f"), "p_a_b_c_d_e_f"),
        ("p", (-1, 2.5), "p__1_2_5"),
        ("p", ("α",), "p__"),
        ("1st", (), "_1st"),
        ("class", (), "class_"),
        ("", (), "_"),
        ("", (3,), "_3"),
    ],
)
def test_path_to_name(base, path, expected):
    assert path_to_name(base, path) == expected


def test_path_to_name_rejects_a_string_path():
    with pytest.raises(TypeError, match="tuple of keys"):
        path_to_name("params", "W")


def test_path_to_name_names_every_leaf():
    pairs, _ = tree_flatten_with_path({"params": {"W": 1, "b": 2}, "xs": [3, 4]})
    names = [path_to_name("args", path) for path, _ in pairs]
    assert names == ["args_params_W", "args_params_b", "args_xs_0", "args_xs_1"]


keys = st.one_of(st.text(max_size=8), st.integers(-1000, 1000))


# The machine is shared by two test workers and compiles: generation may be slow, never wrong.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.text(max_size=8), path=st.lists(keys, max_size=4).map(tuple))
def test_path_to_name_is_an_identifier(base, path):
    name = path_to_name(base, path)
    assert name.isidentifier()
    assert name.isascii()
    assert not keyword.iskeyword(name)
    assert name == path_to_name(base, path)


# --- properties ---------------------------------------------------------------------------

leaf_values = st.one_of(st.integers(), st.text(max_size=3), st.booleans())
trees = st.recursive(
    st.one_of(leaf_values, st.none()),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4), children, max_size=4),
        st.tuples(children, children).map(lambda xy: Point(*xy)),
    ),
    max_leaves=20,
)


@given(trees)
def test_round_trip_property(tree):
    leaves, treedef = tree_flatten(tree)
    assert tree_unflatten(treedef, leaves) == tree
    assert treedef.num_leaves == len(leaves)
    pairs, treedef2 = tree_flatten_with_path(tree)
    assert treedef2 == treedef
    assert [leaf for _, leaf in pairs] == leaves
    assert tree_map(lambda x: x, tree) == tree
    assert isinstance(treedef, PyTreeDef) and hash(treedef) == hash(tree_structure(tree))


def test_docstring_examples():
    result = doctest.testmod(pytrees, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def _mlp_over_layers(params, x):
    h = x
    for layer in params["layers"]:  # a loop over a pytree list: unrolled, one layer each
        h = np.tanh(h @ layer["W"] + layer["b"])
    return np.sum(h * h)


def _over_weight_pairs(params, x):
    h = x
    for W, b in params:  # entries of a list of (W, b) tuples, unpacked
        h = np.tanh(W @ h + b)
    return np.sum(h)


def _loss_with_stats(w):
    terms = []
    for i in range(3):
        terms.append(w[i] * w[(i + 1) % 3])
    loss = terms[0] + terms[1] * terms[2]
    return loss, {"first": terms[0], "count": len(terms)}


def test_loops_over_the_entries_of_a_pytree_argument():
    rng = np.random.default_rng(31)
    layers = {"layers": [{"W": 0.5 * rng.standard_normal((3, 3)), "b": rng.standard_normal(3)}
                         for _ in range(2)]}
    pairs = [(rng.standard_normal((3, 3)), rng.standard_normal(3)) for _ in range(2)]
    x = rng.standard_normal(3)
    for f, params in ((_mlp_over_layers, layers), (_over_weight_pairs, pairs)):
        ad.check_grads(f, (params, x), order=1, modes=("fwd", "rev"))
        expected = ad.tree_leaves(ad.grad(f)(params, x))
        got = ad.tree_leaves(ad.jit(ad.grad(f))(params, x))
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_has_aux_returns_a_dict():
    """``return loss, {"name": value}`` (JAX's has_aux habit): the dict comes back as it is
    (compiled, a plain dict too; Numba gives its values one type)."""
    w = np.array([0.3, -0.7, 1.1])
    (value, aux), grad = ad.value_and_grad(_loss_with_stats, has_aux=True)(w)
    assert aux == {"first": w[0] * w[1], "count": 3}
    assert value == _loss_with_stats(w)[0]
    eps = 1e-6
    differences = [(_loss_with_stats(w + eps * e)[0] - _loss_with_stats(w - eps * e)[0])
                   / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(grad, differences, rtol=1e-7)
    (value2, aux2), grad2 = ad.jit(ad.value_and_grad(_loss_with_stats, has_aux=True))(w)
    assert type(aux2) is dict and aux2 == {"first": w[0] * w[1], "count": 3.0}
    np.testing.assert_allclose(grad2, grad, rtol=1e-14)


def _reads_its_dict(w):
    d = {"a": w * 2.0}
    return np.sum(d["a"])


def _returns_a_dict(w):
    return {"a": w * 2.0}


def _returns_its_dict(w):
    d = {"a": w * 2.0}
    return d


def test_a_returned_dict_has_derivatives_of_both_modes():
    """A dict made in the function is read entry by entry (test_local_dicts.py). As the
    output, jvp, jacfwd and jacrev give dicts of tangents and Jacobians (JAX's output pytrees;
    tests/test_reverse_dict_outputs.py for vjp), and grad needs a scalar."""
    w = np.array([0.3, -0.7, 1.1])
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(ad.grad(_reads_its_dict)(w), [2.0, 2.0, 2.0])
    for f in (_returns_a_dict, _returns_its_dict):
        out, out_dot = ad.jvp(f, (w,), (v,))
        assert type(out) is dict and type(out_dot) is dict and list(out_dot) == ["a"]
        np.testing.assert_allclose(out["a"], 2.0 * w)
        np.testing.assert_allclose(out_dot["a"], 2.0 * v)
        jac = ad.jacfwd(f)(w)
        assert type(jac) is dict
        np.testing.assert_allclose(jac["a"], 2.0 * np.eye(3))
        jac = ad.jacrev(f)(w)
        assert type(jac) is dict
        np.testing.assert_allclose(jac["a"], 2.0 * np.eye(3))
        with pytest.raises(ad.NonScalarOutputError, match="returns a dict"):
            ad.grad(f)(w)


def _weighted_layers(ws, x):
    acc = 0.0
    for i, w in enumerate(ws):
        acc = acc + (i + 1) * np.sum(np.tanh(w) * x)
    return acc


def test_enumerate_over_a_list_argument_unrolls():
    # (refused as "returning a whole pytree argument is not supported", at the for line;
    # `for w in ws` unrolled already)
    ws = [np.array([0.1, 0.2, 0.3]), np.array([-0.4, 0.5, 0.6])]
    x = np.array([1.0, 2.0, 3.0])
    gw = ad.grad(_weighted_layers)(ws, x)
    for k in range(2):
        np.testing.assert_allclose(gw[k], (k + 1) * x * (1.0 - np.tanh(ws[k]) ** 2),
                                   rtol=1e-12)
    np.testing.assert_allclose(ad.grad(_weighted_layers, argnums=1)(ws, x),
                               np.tanh(ws[0]) + 2.0 * np.tanh(ws[1]), rtol=1e-12)


def _product_of_lists(x, y):
    return np.sum(x * y)


def test_arithmetic_on_a_whole_pytree_argument_says_what_to_do():
    # (the message was "returning a whole pytree argument is not supported", at a line that
    # returns no pytree)
    with pytest.raises(ad.errors.UnsupportedSyntaxError,
                       match=r"a pytree argument \(a list of arrays and numbers\) cannot be "
                             "used as one value here") as info:
        ad.grad(_product_of_lists)([1.0, 2.0], [3.0, 4.0])
    assert "np.asarray(x)" in info.value.hint


def _weights_penalty(params):
    r = 0.0
    for k in params:
        if k.startswith("W") and not k.endswith("x"):
            r = r + np.sum(params[k] ** 2) * len(k.upper())
    return r


def test_string_methods_of_dict_keys_are_decided_where_the_code_is_written():
    """`k.startswith("W")` of a key (a constant) is evaluated while generating the code (it
    said "str.startswith has no derivative rule")."""
    params = {"W1": np.array([1.0, -2.0]), "b1": np.array([3.0]), "Wx": np.array([5.0])}
    g = ad.grad(_weights_penalty)(params)
    np.testing.assert_allclose(g["W1"], 4.0 * params["W1"], rtol=1e-12)
    np.testing.assert_allclose(g["b1"], [0.0])
    np.testing.assert_allclose(g["Wx"], [0.0])
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_weights_penalty))(params)["W1"], g["W1"],
                               rtol=1e-12)


def _builds_a_point(x):
    return Point(x=x * 2.0, y=np.sum(x))


def test_building_a_namedtuple_in_transformed_code_gives_back_the_namedtuple():
    """It said "Point has no derivative rule", under vmap too (which takes no derivative),
    then was refused by name; now built (tests/test_namedtuple_inside.py), and returned as a
    Point."""
    xs = np.ones((2, 3))
    batched = ad.vmap(_builds_a_point)(xs)
    assert type(batched) is Point
    np.testing.assert_allclose(batched.x, 2.0 * xs)
    np.testing.assert_allclose(batched.y, [3.0, 3.0])
    jac = ad.jacrev(_builds_a_point)(xs[0])
    assert type(jac) is Point
    np.testing.assert_allclose(jac.x, 2.0 * np.eye(3))
    np.testing.assert_allclose(jac.y, np.ones(3))


# ---------------------------------------------------------------- session 43: a list of axes
# for a list argument
def _affine_of_list(p, x):
    return p[0] * x + p[1]


def test_vmap_takes_a_list_of_axes_for_a_list_argument():
    # in_axes=([0, None], 0): the inner list was read as a tuple, which a list argument never
    # matches (BatchingError whatever the spelling).
    P = [np.arange(12.0).reshape(4, 3), np.array([0.5, -1.0, 2.0])]
    x = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    want = np.stack([_affine_of_list([P[0][i], P[1]], x[i]) for i in range(4)])
    got = ad.vmap(_affine_of_list, in_axes=([0, None], 0))(P, x)
    np.testing.assert_allclose(got, want)
