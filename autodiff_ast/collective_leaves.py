"""A collective of a pytree, one leaf at a time (``psum((a, b), 'i')``, ``pmean(grads, 'i')``).

JAX's collectives take a pytree and reduce each leaf over the mapped axis. Our rules reduce
one array, so the normalizer rewrites the call on a tuple, list or dict into the display of
the calls on its entries before anything else sees it::

    psum((x, 10 * x), 'i')        ->  (psum(x, 'i'), psum(10 * x, 'i'))
    pmean(grads, 'i')             ->  {'w': pmean(grads['w'], 'i'), 'b': pmean(grads['b'], 'i')}

where ``grads`` is a dict argument (a pytree) or a dict built in the function. Each leaf's
call then has its own rule, adjoint and batching rule. An operand of unknown structure (a list
grown at run time) is left alone, and the rule's type check refuses it at the user's line.
"""

from __future__ import annotations

import gast

from . import types as T

__all__ = ["PER_LEAF", "spread_collective"]

#: collectives that JAX applies leaf by leaf to a pytree operand
PER_LEAF = ("psum", "pmean", "pmax", "pmin", "all_gather")


def spread_collective(norm, node):
    """The display of the collective call `node` applied to each leaf of its operand, or None
    when the operand is one array (the call stays as it is). `norm` is the normalizer, whose
    environment says what a name holds (a pytree argument, a dict or tuple built here)."""
    if node.args:
        operand, rest_args = node.args[0], list(node.args[1:])
        keywords = list(node.keywords)
    else:
        found = [kw for kw in node.keywords if kw.arg == "x"]
        if not found:
            return None
        operand, rest_args = found[0].value, []
        keywords = [kw for kw in node.keywords if kw.arg != "x"]

    def on_leaf(leaf):
        return gast.copy_location(gast.Call(func=node.func, args=[leaf] + rest_args,
                                            keywords=keywords), node)

    def entry(expr, key):
        return gast.copy_location(gast.Subscript(
            value=expr, slice=gast.Constant(value=key, kind=None), ctx=gast.Load()), node)

    def spread(expr, structure):
        if structure is None:
            return on_leaf(expr)
        kind, keys, inner = structure
        values = [spread(entry(expr, key), sub) for key, sub in zip(keys, inner)]
        if kind == "dict":
            return gast.Dict(keys=[gast.Constant(value=k, kind=None) for k in keys],
                             values=values)
        made = gast.List if kind == "list" else gast.Tuple
        return made(elts=values, ctx=gast.Load())

    def display(expr):
        """A display's own entries spread, with a name's structure found below them."""
        if isinstance(expr, (gast.Tuple, gast.List)):
            made = type(expr)
            return made(elts=[display(e) for e in expr.elts], ctx=gast.Load())
        if isinstance(expr, gast.Dict) and expr.keys and all(
                isinstance(k, gast.Constant) and isinstance(k.value, str) for k in expr.keys):
            return gast.Dict(keys=list(expr.keys), values=[display(v) for v in expr.values])
        return spread(expr, _structure(norm, expr))

    if not isinstance(operand, (gast.Tuple, gast.List, gast.Dict)) and \
            _structure(norm, operand) is None:
        return None
    return gast.copy_location(display(operand), node)


def _structure(norm, expr):
    """(kind, keys, inner structures) of the pytree a name holds, or None for a leaf."""
    from .normalize import HeldTuple, LocalDict, TreeRef
    if not isinstance(expr, gast.Name):
        return None
    bound = norm.env.get(expr.id)
    if isinstance(bound, TreeRef):
        return _spec_structure(bound.spec)
    if isinstance(bound, LocalDict):
        keys = list(bound.entries)
        return "dict", keys, [None] * len(keys)
    if isinstance(bound, HeldTuple):
        return None  # (a tuple holding dicts: refused by the rule's type check)
    if isinstance(bound, str):
        return _type_structure(norm.types.get(bound, T.UNKNOWN))
    return None


def _type_structure(typ):
    """A tuple of known length's structure (nested tuples too); None for anything else."""
    if typ.kind == "tuple" and typ.elts is not None:
        return "tuple", list(range(len(typ.elts))), [_type_structure(t) for t in typ.elts]
    return None


def _spec_structure(spec):
    """A dict, list or tuple argument's structure; None for NamedTuples, dataclasses and
    registered classes (whose rebuilt value would lose its class: the rule refuses them)."""
    from .specs import TreeSpec
    if spec.kind not in ("dict", "list", "tuple"):
        return None
    keys = [key if spec.kind == "dict" else k for k, (key, _) in enumerate(spec.children)]
    inner = []
    for _, child in spec.children:
        sub = _spec_structure(child) if isinstance(child, TreeSpec) else None
        if isinstance(child, TreeSpec) and sub is None:
            return None
        inner.append(sub)
    return spec.kind, keys, inner
