"""Pytrees: nested containers of arrays, split into a flat list of leaves and a structure.

A *pytree* is a value built from containers the library knows how to open (dicts, lists,
tuples, NamedTuples, dataclasses, ``None`` and any registered class) with *leaves* at the
bottom: arrays, Python and NumPy scalars, anything else. Transformations flatten the user's
arguments where a function is entered, work on named flat arrays, and rebuild the containers
where results leave (the same contract as JAX's pytrees).

Conventions, chosen to match JAX:

* dict keys are visited in sorted order (mixed key types that cannot be compared fall back
  to a deterministic order by type name and ``repr``); ``OrderedDict`` keeps its own order;
* ``None`` is a node with no children, so it contributes no leaves;
* NamedTuples and dataclasses are visited field by field, in declaration order;
* other subclasses of ``dict``, ``list`` and ``tuple`` are leaves unless registered.

A :class:`PyTreeDef` is immutable, hashable and comparable, so it can be part of a cache key.

>>> leaves, treedef = tree_flatten({"b": [1, 2], "a": (3.0, None)})
>>> leaves
[3.0, 1, 2]
>>> treedef
PyTreeDef({'a': (*, None), 'b': [*, *]})
>>> tree_unflatten(treedef, [30.0, 10, 20])
{'a': (30.0, None), 'b': [10, 20]}
"""

from __future__ import annotations

import collections
import dataclasses
import keyword
import re
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NamedTuple

__all__ = [
    "PyTreeDef",
    "path_to_name",
    "register_pytree_node",
    "tree_flatten",
    "tree_flatten_with_path",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]

Path = tuple[Hashable, ...]
IsLeaf = Callable[[Any], bool] | None

# Kinds of node. A treedef stores its kind, the Python type of the node and the data needed
# to rebuild it (dict keys, dataclass field names, a registered class's aux_data).
_LEAF = "leaf"
_NONE = "none"
_DICT = "dict"
_ORDERED_DICT = "ordered_dict"
_DEFAULT_DICT = "default_dict"
_LIST = "list"
_TUPLE = "tuple"
_NAMED_TUPLE = "named_tuple"
_DATACLASS = "dataclass"
_CUSTOM = "custom"

_BUILTIN_NODE_TYPES = (
    type(None),
    dict,
    collections.OrderedDict,
    collections.defaultdict,
    list,
    tuple,
)


class _Registration(NamedTuple):
    flatten: Callable[[Any], tuple[Iterable[Any], Hashable]]
    unflatten: Callable[[Hashable, list[Any]], Any]


_REGISTRY: dict[type, _Registration] = {}


class _Node(NamedTuple):
    kind: str
    type: type
    data: Hashable
    keys: tuple[Hashable, ...]
    children: list[Any]


def is_namedtuple_class(value: Any) -> bool:
    """Whether `value` is a NamedTuple class (typing.NamedTuple or collections.namedtuple).

    >>> is_namedtuple_class(_Node), is_namedtuple_class(tuple)
    (True, False)
    """
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")


def bind_namedtuple_fields(cls: type, args: list, keywords: list) -> tuple[dict, str | None]:
    """The fields a call ``cls(*args, **keywords)`` gives, by name, in the order Python
    evaluates them (`keywords`: (name, value) pairs), and what is wrong with the call, or None:
    too many values, an unknown or a repeated field (fields left to their defaults, or
    missing, are not in the dict).

    >>> bind_namedtuple_fields(_Registration, [1], [("unflatten", 2)])
    ({'flatten': 1, 'unflatten': 2}, None)
    >>> bind_namedtuple_fields(_Registration, [1], [("flatten", 2)])[1]
    "_Registration(...) got field 'flatten' twice"
    """
    fields, name = cls._fields, cls.__name__
    if len(args) > len(fields):
        return {}, f"{name} takes {len(fields)} fields ({', '.join(fields)}), not {len(args)}"
    given = dict(zip(fields, args))
    for key, value in keywords:
        if key not in fields:
            return given, f"{name} has no field {key!r} (its fields: {', '.join(fields)})"
        if key in given:
            return given, f"{name}(...) got field {key!r} twice"
        given[key] = value
    return given, None


def _sorted_keys(mapping: dict) -> tuple:
    try:
        return tuple(sorted(mapping))
    except TypeError:
        # Keys of mixed types: still deterministic, never dependent on insertion order.
        return tuple(
            sorted(mapping, key=lambda k: (type(k).__module__, type(k).__qualname__, repr(k)))
        )


def _open_node(obj: Any) -> _Node | None:
    """Split a container into its parts; ``None`` when ``obj`` is a leaf."""
    cls = type(obj)
    registration = _REGISTRY.get(cls)
    if registration is not None:
        result = registration.flatten(obj)
        try:
            children, aux_data = result
        except (TypeError, ValueError):
            raise TypeError(
                f"the flatten function registered for {cls.__qualname__} must return "
                f"(children, aux_data), got {result!r}"
            ) from None
        children = list(children)
        return _Node(_CUSTOM, cls, aux_data, tuple(range(len(children))), children)
    if obj is None:
        return _Node(_NONE, cls, None, (), [])
    if cls is dict or cls is collections.defaultdict:
        keys = _sorted_keys(obj)
        children = [obj[k] for k in keys]
        if cls is dict:
            return _Node(_DICT, cls, keys, keys, children)
        return _Node(_DEFAULT_DICT, cls, (obj.default_factory, keys), keys, children)
    if cls is collections.OrderedDict:
        keys = tuple(obj)
        return _Node(_ORDERED_DICT, cls, keys, keys, [obj[k] for k in keys])
    if cls is list:
        return _Node(_LIST, cls, None, tuple(range(len(obj))), list(obj))
    if cls is tuple:
        return _Node(_TUPLE, cls, None, tuple(range(len(obj))), list(obj))
    if is_namedtuple_class(cls):
        return _Node(_NAMED_TUPLE, cls, None, tuple(cls._fields), list(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = tuple(field.name for field in dataclasses.fields(obj))
        return _Node(_DATACLASS, cls, names, names, [getattr(obj, n) for n in names])
    return None


def _close_node(kind: str, cls: type, data: Any, children: list[Any]) -> Any:
    """Rebuild a container from the parts :func:`_open_node` produced."""
    if kind == _DICT:
        return dict(zip(data, children, strict=True))
    if kind == _NONE:
        return None
    if kind == _LIST:
        return list(children)
    if kind == _TUPLE:
        return tuple(children)
    if kind == _NAMED_TUPLE:
        return cls(*children)
    if kind == _DATACLASS:
        # Set the fields directly: __init__/__post_init__ may validate or derive values, and
        # the leaves we put back are often not what the user passed (tangents, shapes, ...).
        obj = object.__new__(cls)
        for name, value in zip(data, children, strict=True):
            object.__setattr__(obj, name, value)
        return obj
    if kind == _ORDERED_DICT:
        return collections.OrderedDict(zip(data, children, strict=True))
    if kind == _DEFAULT_DICT:
        factory, keys = data
        return collections.defaultdict(factory, zip(keys, children, strict=True))
    if kind == _CUSTOM:
        return _REGISTRY[cls].unflatten(data, children)
    raise AssertionError(f"unknown node kind {kind!r}")


class PyTreeDef:
    """The structure of a pytree: every container, none of the leaves.

    Immutable, hashable and comparable: two treedefs are equal when the containers, their
    types, their keys or field names and any registered aux_data are equal.

    >>> treedef = tree_structure({"w": [1.0, 2.0], "b": 0.5})
    >>> treedef.num_leaves, treedef.num_nodes
    (3, 5)
    >>> treedef == tree_structure({"b": 9, "w": [7, 8]})
    True
    >>> treedef.unflatten([10, 20, 30])
    {'b': 10, 'w': [20, 30]}
    """

    __slots__ = ("_kind", "_type", "_data", "_children", "_num_leaves", "_num_nodes", "_hash")

    def __init__(self, kind: str, cls: type | None, data: Any, children: tuple[PyTreeDef, ...]):
        self._kind = kind
        self._type = cls
        self._data = data
        self._children = children
        if kind == _LEAF:
            self._num_leaves = 1
        else:
            self._num_leaves = sum(child._num_leaves for child in children)
        self._num_nodes = 1 + sum(child._num_nodes for child in children)
        self._hash: int | None = None

    @property
    def num_leaves(self) -> int:
        """Number of leaves in a tree of this structure.

        >>> tree_structure([1, (2, 3), None]).num_leaves
        3
        """
        return self._num_leaves

    @property
    def num_nodes(self) -> int:
        """Number of nodes, counting leaves, containers and ``None``.

        >>> tree_structure([1, (2, 3), None]).num_nodes
        6
        """
        return self._num_nodes

    def children(self) -> list[PyTreeDef]:
        """The treedefs of the direct children of the root node.

        >>> tree_structure({"a": 1, "b": [2, 3]}).children()
        [PyTreeDef(*), PyTreeDef([*, *])]
        """
        return list(self._children)

    def unflatten(self, leaves: Iterable[Any]) -> Any:
        """Rebuild a tree of this structure from ``leaves`` (same as :func:`tree_unflatten`).

        >>> tree_structure((1, [2])).unflatten(["x", "y"])
        ('x', ['y'])
        """
        leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            raise ValueError(
                f"{self!r} has {self._num_leaves} leaves, but {len(leaves)} were given"
            )
        it = iter(leaves)
        return self._build(it)

    def _build(self, it) -> Any:
        if self._kind == _LEAF:
            return next(it)
        children = [child._build(it) for child in self._children]
        return _close_node(self._kind, self._type, self._data, children)

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """Flatten ``tree`` only as deep as this structure; subtrees at leaf positions stay whole.

        ``tree`` must have this structure as a prefix; otherwise ``ValueError`` names the path
        where the two differ.

        >>> tree_structure([0, 0]).flatten_up_to([(1, 2), {"a": 3}])
        [(1, 2), {'a': 3}]
        >>> tree_structure({"a": 0}).flatten_up_to({"b": 1})
        Traceback (most recent call last):
        ...
        ValueError: tree structure mismatch at path (): expected {'a': *}, got dict with keys ('b',)
        """
        out: list[Any] = []
        self._flatten_up_to(tree, out, ())
        return out

    def _flatten_up_to(self, tree: Any, out: list[Any], path: Path) -> None:
        if self._kind == _LEAF:
            out.append(tree)
            return
        node = _open_node(tree)
        if (
            node is None
            or node.kind != self._kind
            or node.type is not self._type
            or len(node.children) != len(self._children)
            or node.data != self._data
        ):
            raise ValueError(
                f"tree structure mismatch at path {path!r}: expected {self._node_repr()}, "
                f"got {_describe(tree, node)}"
            )
        for key, child_def, child in zip(node.keys, self._children, node.children, strict=True):
            child_def._flatten_up_to(child, out, (*path, key))

    def _key(self) -> tuple:
        return (self._kind, self._type, self._data, self._children)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, PyTreeDef):
            return NotImplemented
        return self._num_nodes == other._num_nodes and self._key() == other._key()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._key())
        return self._hash

    def __repr__(self) -> str:
        return f"PyTreeDef({self._node_repr()})"

    def _node_repr(self) -> str:
        kind = self._kind
        inner = [child._node_repr() for child in self._children]
        if kind == _LEAF:
            return "*"
        if kind == _NONE:
            return "None"
        if kind == _LIST:
            return "[" + ", ".join(inner) + "]"
        if kind == _TUPLE:
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        if kind == _DICT:
            return _dict_repr(self._data, inner)
        if kind == _ORDERED_DICT:
            return f"OrderedDict({_dict_repr(self._data, inner)})"
        if kind == _DEFAULT_DICT:
            factory, keys = self._data
            name = getattr(factory, "__qualname__", repr(factory))
            return f"defaultdict({name}, {_dict_repr(keys, inner)})"
        if kind == _NAMED_TUPLE:
            fields = self._type._fields
            body = ", ".join(f"{f}={c}" for f, c in zip(fields, inner, strict=True))
            return f"{self._type.__qualname__}({body})"
        if kind == _DATACLASS:
            body = ", ".join(f"{f}={c}" for f, c in zip(self._data, inner, strict=True))
            return f"{self._type.__qualname__}({body})"
        return f"CustomNode({self._type.__qualname__}[{self._data!r}], [{', '.join(inner)}])"


def _dict_repr(keys: tuple, inner: list[str]) -> str:
    return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, inner, strict=True)) + "}"


def _describe(tree: Any, node: _Node | None) -> str:
    if node is None:
        return f"leaf of type {type(tree).__qualname__}"
    if node.kind in (_DICT, _ORDERED_DICT, _DEFAULT_DICT):
        return f"{type(tree).__qualname__} with keys {node.keys!r}"
    if node.kind in (_LIST, _TUPLE):
        return f"{type(tree).__qualname__} of length {len(node.children)}"
    if node.kind == _NONE:
        return "None"
    return repr(PyTreeDef(node.kind, node.type, node.data, (_LEAF_DEF,) * len(node.children)))


_LEAF_DEF = PyTreeDef(_LEAF, None, None, ())


def _flatten(
    tree: Any, is_leaf: IsLeaf, leaves: list[Any], paths: list[Path] | None, path: Path
) -> PyTreeDef:
    node = None if is_leaf is not None and is_leaf(tree) else _open_node(tree)
    if node is None:
        leaves.append(tree)
        if paths is not None:
            paths.append(path)
        return _LEAF_DEF
    children = tuple(
        _flatten(child, is_leaf, leaves, paths, (*path, key))
        for key, child in zip(node.keys, node.children, strict=True)
    )
    return PyTreeDef(node.kind, node.type, node.data, children)


def tree_flatten(tree: Any, is_leaf: IsLeaf = None) -> tuple[list[Any], PyTreeDef]:
    """Split ``tree`` into its leaves, in a deterministic order, and its structure.

    ``is_leaf(x)``, when given, can stop the descent: a subtree for which it returns true is
    kept whole as one leaf.

    >>> import numpy as np
    >>> leaves, treedef = tree_flatten({"W": np.ones((2, 2)), "b": np.zeros(2), "n": None})
    >>> [leaf.shape for leaf in leaves]
    [(2, 2), (2,)]
    >>> treedef
    PyTreeDef({'W': *, 'b': *, 'n': None})
    >>> tree_flatten([(1, 2), 3], is_leaf=lambda x: isinstance(x, tuple))[0]
    [(1, 2), 3]
    """
    leaves: list[Any] = []
    treedef = _flatten(tree, is_leaf, leaves, None, ())
    return leaves, treedef


def tree_unflatten(treedef: PyTreeDef, leaves: Iterable[Any]) -> Any:
    """Rebuild a tree with the structure ``treedef`` from ``leaves``, in flattening order.

    Raises ``ValueError`` unless exactly ``treedef.num_leaves`` leaves are given.

    >>> leaves, treedef = tree_flatten([1, {"x": 2}])
    >>> tree_unflatten(treedef, [10, 20])
    [10, {'x': 20}]
    >>> tree_unflatten(treedef, [10])
    Traceback (most recent call last):
    ...
    ValueError: PyTreeDef([*, {'x': *}]) has 2 leaves, but 1 were given
    """
    if not isinstance(treedef, PyTreeDef):
        raise TypeError(f"tree_unflatten expects a PyTreeDef, got {type(treedef).__qualname__}")
    return treedef.unflatten(leaves)


def tree_leaves(tree: Any, is_leaf: IsLeaf = None) -> list[Any]:
    """The leaves of ``tree``, in flattening order.

    >>> tree_leaves({"b": 2, "a": [1, None, 3]})
    [1, 3, 2]
    """
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: IsLeaf = None) -> PyTreeDef:
    """The structure of ``tree`` (its treedef), without the leaves.

    >>> tree_structure((1.0, [2.0, 3.0]))
    PyTreeDef((*, [*, *]))
    >>> tree_structure(5.0)
    PyTreeDef(*)
    """
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf = None) -> Any:
    """Apply ``f`` to every leaf of ``tree`` and return a tree of the same structure.

    With several trees, ``f`` gets the corresponding leaves of all of them; each tree in
    ``rest`` must have the structure of ``tree`` (or a deeper one: a subtree standing where
    ``tree`` has a leaf is passed to ``f`` whole). A mismatch raises ``ValueError``.

    >>> tree_map(lambda x: x * 2, {"a": 1, "b": (2, None)})
    {'a': 2, 'b': (4, None)}
    >>> params = {"W": 1.0, "b": 2.0}
    >>> grads = {"W": 0.5, "b": -1.0}
    >>> tree_map(lambda p, g: p - 0.1 * g, params, grads)
    {'W': 0.95, 'b': 2.1}
    """
    leaves, treedef = tree_flatten(tree, is_leaf)
    columns = [leaves] + [treedef.flatten_up_to(other) for other in rest]
    return treedef.unflatten(f(*args) for args in zip(*columns, strict=True))


def tree_flatten_with_path(
    tree: Any, is_leaf: IsLeaf = None
) -> tuple[list[tuple[Path, Any]], PyTreeDef]:
    """Like :func:`tree_flatten`, but each leaf comes with its path from the root.

    A path is a tuple of keys: the dict key, the list or tuple index, the NamedTuple or
    dataclass field name, or the child's position for a registered class.

    >>> pairs, treedef = tree_flatten_with_path({"params": {"W": 1.0, "b": 2.0}, "xs": [3, 4]})
    >>> [path for path, _ in pairs]
    [('params', 'W'), ('params', 'b'), ('xs', 0), ('xs', 1)]
    >>> tree_flatten_with_path(7)[0]
    [((), 7)]
    """
    leaves: list[Any] = []
    paths: list[Path] = []
    treedef = _flatten(tree, is_leaf, leaves, paths, ())
    return list(zip(paths, leaves, strict=True)), treedef


def register_pytree_node(
    cls: type,
    flatten_fn: Callable[[Any], tuple[Iterable[Any], Hashable]],
    unflatten_fn: Callable[[Hashable, list[Any]], Any],
) -> None:
    """Teach the pytree functions to open instances of ``cls`` (exactly that type).

    ``flatten_fn(obj)`` returns ``(children, aux_data)``: an iterable of child subtrees and
    hashable, comparable data needed to rebuild ``obj`` (it becomes part of the treedef).
    ``unflatten_fn(aux_data, children)`` builds the object back from a list of children.
    A class can be registered once; the built-in node types cannot be registered.
    Registration takes precedence over the NamedTuple and dataclass handling.

    >>> class Affine:
    ...     def __init__(self, W, b, name):
    ...         self.W, self.b, self.name = W, b, name
    >>> register_pytree_node(
    ...     Affine,
    ...     lambda a: ((a.W, a.b), a.name),
    ...     lambda name, children: Affine(*children, name),
    ... )
    >>> leaves, treedef = tree_flatten(Affine(1.0, 2.0, "layer1"))
    >>> leaves
    [1.0, 2.0]
    >>> treedef
    PyTreeDef(CustomNode(Affine['layer1'], [*, *]))
    >>> tree_unflatten(treedef, [3.0, 4.0]).b
    4.0
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node expects a class, got {cls!r}")
    if cls in _BUILTIN_NODE_TYPES:
        raise ValueError(f"{cls.__qualname__} is a built-in pytree node and cannot be registered")
    if cls in _REGISTRY:
        raise ValueError(f"{cls.__qualname__} is already registered as a pytree node")
    if not callable(flatten_fn) or not callable(unflatten_fn):
        raise TypeError("flatten_fn and unflatten_fn must be callable")
    _REGISTRY[cls] = _Registration(flatten_fn, unflatten_fn)


_NOT_IDENTIFIER_CHAR = re.compile(r"[^0-9A-Za-z_]")


def path_to_name(base: str, path: Iterable[Hashable]) -> str:
    """A Python identifier for the leaf at ``path`` under an argument called ``base``.

    The parts are joined with ``_``; every character outside ``[A-Za-z0-9_]`` becomes ``_``;
    a leading digit gets a ``_`` prefix and a keyword a ``_`` suffix. The result depends only
    on the arguments. Different paths can map to the same name (``'a-b'`` and ``'a_b'``):
    callers that need unique names must disambiguate.

    >>> path_to_name("params", ("W",))
    'params_W'
    >>> path_to_name("params", (0, "layer-1", "b"))
    'params_0_layer_1_b'
    >>> path_to_name("x", ())
    'x'
    >>> path_to_name("2d", ("lambda",))
    '_2d_lambda'
    """
    if isinstance(path, (str, bytes)):
        raise TypeError(f"path must be a tuple of keys, not {type(path).__qualname__} {path!r}")
    parts = [str(base), *(str(key) for key in path)]
    name = "_".join(_NOT_IDENTIFIER_CHAR.sub("_", part) for part in parts)
    if not name or name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name):
        name += "_"
    return name
