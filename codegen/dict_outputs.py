"""Dicts an entry function returns, flattened at the compiled boundary.

Numba boxes a dict with values of one type (its typed dict), but not ``{"acc": acc, "pred":
pred}`` with a number and an array: the call fails with a SystemError. An entry function that
returns dict displays (``return loss, {"acc": acc}``: has_aux's aux output, or a primal that
returns a dict) returns the displays' values as tuples instead, and the caller rebuilds the
dicts from a *spec* of the returned structure: ``None`` for a value passed as it is,
``["tuple", [specs]]`` and ``["dict", [keys], [specs]]``. Specs are plain lists, so a new
process reads them back from the module's cache record (autodiff_ast/warmstart.py).

>>> import gast
>>> fn = gast.parse('''
... def h(x):
...     loss = x * 2.0
...     aux = {'a': x, 'b': loss}
...     return (loss, aux)
... ''').body[0]
>>> spec = flatten_returned_dicts(fn, [fn])
>>> spec
['tuple', [None, ['dict', ['a', 'b'], [None, None]]]]
>>> rebuild_dicts((2.0, (1.0, 2.0)), spec)
(2.0, {'a': 1.0, 'b': 2.0})
"""

from __future__ import annotations

import gast

__all__ = ["flatten_returned_dicts", "flatten_dicts", "rebuild_dicts", "rebuilding_expression"]


def flatten_returned_dicts(fn, functions):
    """Rewrite entry `fn` (in place) to return the dict displays it returns as tuples of their
    values; the spec to rebuild them, or None when it returns no dict display (or another
    function of the module calls it, and reads its result as the dicts)."""
    if any(isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and
           node.func.id == fn.name for other in functions if other is not fn
           for node in gast.walk(other)):
        return None
    returns = [s for s in gast.walk(fn) if isinstance(s, gast.Return) and s.value is not None]
    if len(returns) != 1 or returns[0] is not fn.body[-1]:
        return None
    displays = _dict_names(fn)
    spec = _spec(returns[0].value, displays)
    if not _has_dict(spec):
        return None
    _flatten(returns[0], displays)
    return spec


def rebuild_dicts(value, spec):
    """`value` (what the compiled entry returned) with the dicts of `spec` rebuilt."""
    if spec is None:
        return value
    if spec[0] == "tuple":
        return tuple(rebuild_dicts(v, s) for v, s in zip(value, spec[1]))
    return {k: rebuild_dicts(v, s) for k, v, s in zip(spec[1], value, spec[2])}


def flatten_dicts(value, spec, what="the cotangent"):
    """`value`, shaped like the output `spec` rebuilds (a dict where the output has one), with
    each dict made the tuple of its values in the spec's key order: what the generated entry
    returned, and so what its backward function takes (vjp's cotangent of a dict output).

    >>> flatten_dicts((2.0, {"b": 1.0, "a": 3.0}), ["tuple", [None, ["dict", ["a", "b"],
    ...                                                          [None, None]]]])
    (2.0, (3.0, 1.0))
    """
    if spec is None:
        return value
    if spec[0] == "tuple":
        if not isinstance(value, (tuple, list)) or len(value) != len(spec[1]):
            raise TypeError(f"{what} must be a tuple of {len(spec[1])} like the output, "
                            f"not {type(value).__name__}")
        return tuple(flatten_dicts(v, s, what) for v, s in zip(value, spec[1]))
    keys = spec[1]
    if not isinstance(value, dict) or set(value) != set(keys):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise TypeError(f"{what} must be a dict with the output's keys {sorted(keys)}, "
                        f"not {got}")
    return tuple(flatten_dicts(value[k], s, what) for k, s in zip(keys, spec[2]))


def rebuilding_expression(value, spec):
    """Python source rebuilding the dicts of `spec` from the expression `value` (for the
    plain wrapper written beside the compiled entry).

    >>> rebuilding_expression("out", ["tuple", [None, ["dict", ["a"], [None]]]])
    "(out[0], {'a': out[1][0]})"
    """
    if spec is None:
        return value
    if spec[0] == "tuple":
        parts = [rebuilding_expression(f"{value}[{i}]", s) for i, s in enumerate(spec[1])]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return "{" + ", ".join(f"{k!r}: {rebuilding_expression(f'{value}[{i}]', s)}"
                           for i, (k, s) in enumerate(zip(spec[1], spec[2]))) + "}"


def _dict_names(fn):
    """name -> its Assign, for names bound once, at the top of `fn`, to a dict display with
    string keys, and read only where a return value or another such display reads them."""
    stores, loads = {}, {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name):
            table = stores if isinstance(node.ctx, gast.Store) else loads
            table[node.id] = table.get(node.id, 0) + 1
    found = {}
    for stmt in fn.body:
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and _string_keyed(stmt.value) and \
                stores.get(stmt.targets[0].id) == 1:
            found[stmt.targets[0].id] = stmt
    # reads allowed: the return statement's and the displays' own
    allowed = {}
    for node in [fn.body[-1]] + [found[n].value for n in found]:
        for inner in gast.walk(node):
            if isinstance(inner, gast.Name) and isinstance(inner.ctx, gast.Load):
                allowed[inner.id] = allowed.get(inner.id, 0) + 1
    return {n: s for n, s in found.items() if loads.get(n, 0) == allowed.get(n, 0)}


def _string_keyed(node):
    return isinstance(node, gast.Dict) and node.keys and all(
        isinstance(k, gast.Constant) and isinstance(k.value, str) for k in node.keys)


def _spec(node, displays):
    if isinstance(node, (gast.Tuple, gast.List)):  # (a list is returned as a tuple)
        return ["tuple", [_spec(e, displays) for e in node.elts]]
    if _string_keyed(node):
        return ["dict", [k.value for k in node.keys], [_spec(v, displays) for v in node.values]]
    if isinstance(node, gast.Name) and node.id in displays:
        return _spec(displays[node.id].value, displays)
    return None


def _has_dict(spec):
    if spec is None:
        return False
    return spec[0] == "dict" or any(_has_dict(s) for s in spec[1])


def _flatten(ret, displays):
    """Every dict display the return reaches becomes the tuple of its values."""
    def tuple_of(node):
        return gast.Tuple(elts=list(node.values), ctx=gast.Load())

    def visit(node):
        if isinstance(node, (gast.Tuple, gast.List)):
            node.elts = [visit(e) for e in node.elts]
            return node
        if _string_keyed(node):
            node.values = [visit(v) for v in node.values]
            return tuple_of(node)
        if isinstance(node, gast.Name) and node.id in displays:
            stmt = displays[node.id]
            if isinstance(stmt.value, gast.Dict):
                stmt.value.values = [visit(v) for v in stmt.value.values]
                stmt.value = tuple_of(stmt.value)
        return node
    ret.value = visit(ret.value)
