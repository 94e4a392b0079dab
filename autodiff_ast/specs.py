"""What a runtime argument looks like to the transformations: its *spec*.

An array or a number is described by its abstract type (:mod:`autodiff_ast.types`), a pytree
(dict, list, tuple, NamedTuple, dataclass, registered class) by a :class:`TreeSpec` of its
children's specs, and a compile-time object (a module, a callable, a static argument's value)
by :class:`Static`. Every call of a transformed function computes its arguments' specs to find
the module generated for them, so this module imports no pass: a warm start
(:mod:`autodiff_ast.warmstart`) builds specs and keys without importing the front end, the
normalizer or the rules (:mod:`autodiff_ast.normalize` re-exports these names).

>>> import numpy as np
>>> spec_of({"b": 1.0, "W": np.ones(2)}).children[0][0]
'W'
>>> spec_of(None)
Static(value=None)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import pytrees
from . import types as T
from .naming import sanitize


@dataclass(frozen=True)
class TreeSpec:
    """The structure of a pytree argument: its kind and children (key -> TreeSpec | AType)."""

    kind: str
    children: tuple  # ((key, spec), ...) in flattening order
    fields: tuple = ()  # NamedTuple/dataclass field names, for attribute access

    def child(self, key):
        for k, spec in self.children:
            if k == key:
                return spec
        if self.fields and isinstance(key, int) and key < len(self.children):
            return self.children[key][1]
        raise KeyError(key)

    def leaves(self, base):
        """[(flat name, AType)] in flattening order."""
        out = []
        for key, spec in self.children:
            flat = sanitize(f"{base}_{key}")
            if isinstance(spec, TreeSpec):
                out.extend(spec.leaves(flat))
            elif not isinstance(spec, Static):
                out.append((flat, spec))
        return out


def spec_of(value):
    """The TreeSpec (containers) or AType (leaves) describing a runtime argument.

    Containers are the pytree nodes of :mod:`autodiff_ast.pytrees` (dicts, lists, tuples,
    NamedTuples, dataclasses, registered classes), in the same leaf order.
    """
    node = pytrees._open_node(value)
    if node is None:
        return T.abstract_of(value)
    if value is None:
        return Static(None)
    kind = str(node.kind)
    fields = tuple(node.keys) if kind in ("namedtuple", "dataclass") or hasattr(
        value, "_fields") or dataclasses.is_dataclass(value) else ()
    keys = tuple(node.keys)
    if kind == "custom":
        # A registered class's children are numbered; name them after the attributes that
        # hold them, so that `p.W` in the user's code finds its leaf.
        named = _attribute_keys(value, node.children)
        keys, fields = (named, named) if named else (keys, fields)
    elif hasattr(value, "_fields"):
        kind = "namedtuple"
    elif dataclasses.is_dataclass(value):
        kind = "dataclass"
    return TreeSpec(kind, tuple((k, spec_of(c)) for k, c in zip(keys, node.children)),
                    fields)


def _attribute_keys(value, children):
    """The attribute of `value` holding each child (by identity), or None if ambiguous."""
    attrs = getattr(value, "__dict__", None) or {}
    keys = []
    for child in children:
        found = [k for k, v in attrs.items() if v is child]
        if len(found) != 1:
            return None
        keys.append(found[0])
    return tuple(keys) if len(set(keys)) == len(keys) else None


@dataclass(frozen=True)
class Static:
    """A compile-time Python object: a module, a callable, a container of constants."""

    value: object
