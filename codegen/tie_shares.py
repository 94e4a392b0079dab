"""The cotangent of a maximum, shared between the tied winners, added in place.

Reverse mode gives ``m = np.max(x)`` the adjoint ``x_bar = x_bar + m_bar * (x == m) /
np.sum(x == m)`` (JAX's rule: ties share equally). In a loop (ADBench GMM's log-sum-exp over
the components of each point) that is four new arrays per step: the two masks, their product
and the sum. :func:`share_ties_in_place` writes it ``add_tie_share(x_bar, x, m, m_bar)``: in
plain Python the same NumPy expression, added into ``x_bar``; under Numba, for float64
vectors of one length, two loops (count the winners, add ``g * (x[j] == m) / count`` to each
element: the same arithmetic per element as NumPy's, so the same bits, NaN included when
nothing ties because x holds a NaN).

Only where adding in place cannot be seen: ``x_bar`` is private in the sense of
:mod:`codegen.buffer_reuse` once the statement is rewritten (no other name, list or call can
hold its array), x and m are names and the cotangent does not read ``x_bar``. Under Numba,
arrays of other shapes (a matrix, lengths that broadcast) add ``x_bar + share`` and keep the
result in ``x_bar`` when the shapes agree, as the statement did.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, n):
...     x_bar = np.zeros_like(x)
...     for i in range(n):
...         m = np.max(x)
...         g = 2.0 * m
...         x_bar = x_bar + g * (x == m) / np.sum(x == m)
...     return x_bar
... ''').body[0]
>>> share_ties_in_place(fn)
True
>>> print(unparse(fn.body[1]))
for i in range(n):
    m = np.max(x)
    g = 2.0 * m
    add_tie_share(x_bar, x, m, g)
"""

from __future__ import annotations

import copy

import gast

from .buffer_reuse import holds_alone, privacy_context
from .emit import name_node
from .param_writes import dotted_name

__all__ = ["share_ties_in_place", "TIE_HELPERS", "TIE_UNCOMPILED"]


def _mask(node):
    """(x, m) of ``x == m`` with two names, or None."""
    if isinstance(node, gast.Compare) and len(node.ops) == 1 and \
            isinstance(node.ops[0], gast.Eq) and isinstance(node.left, gast.Name) and \
            isinstance(node.comparators[0], gast.Name):
        return node.left.id, node.comparators[0].id
    return None


def _match(stmt):
    """(target, x, m, cotangent) of ``t = t + g * (x == m) / np.sum(x == m)``, or None."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name)):
        return None
    target, value = stmt.targets[0].id, stmt.value
    if not (isinstance(value, gast.BinOp) and isinstance(value.op, gast.Add) and
            isinstance(value.left, gast.Name) and value.left.id == target):
        return None
    share = value.right
    if not (isinstance(share, gast.BinOp) and isinstance(share.op, gast.Div) and
            isinstance(share.left, gast.BinOp) and isinstance(share.left.op, gast.Mult)):
        return None
    count = share.right
    if not (isinstance(count, gast.Call) and dotted_name(count.func) == "np.sum" and
            len(count.args) == 1 and not count.keywords):
        return None
    mask, counted = _mask(share.left.right), _mask(count.args[0])
    cotangent = share.left.left
    if mask is None or mask != counted or any(
            isinstance(n, gast.Name) and n.id == target for n in gast.walk(cotangent)):
        return None
    return target, mask[0], mask[1], cotangent


def _call(target, x, m, cotangent):
    return gast.Expr(value=gast.Call(func=name_node("add_tie_share"), args=[
        name_node(target), name_node(x), name_node(m), copy.deepcopy(cotangent)], keywords=[]))


def share_ties_in_place(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns whether any statement was."""
    changed = False
    for block_owner in [fn] + [n for n in gast.walk(fn) if isinstance(n, (gast.For, gast.While,
                                                                          gast.If))]:
        for field in ("body", "orelse"):
            block = getattr(block_owner, field, None)
            if not isinstance(block, list):
                continue
            for k, stmt in enumerate(block):
                found = _match(stmt)
                if found is None:
                    continue
                block[k] = _call(*found)
                if _still_private(fn, found[0]):
                    changed = True
                else:
                    block[k] = stmt
    return changed


def _still_private(fn, target):
    params, bindings, parents = privacy_context(fn)
    return holds_alone(fn, target, params, bindings, parents)


#: The helper (its plain form and its Numba overload), written into a module that calls it.
TIE_HELPERS = {"add_tie_share": '''\
def add_tie_share(a, x, m, g):
    """`a += g * (x == m) / np.sum(x == m)`: the cotangent g of m = max(x) (or min) shared
    between the elements equal to it, added into a."""
    a += g * (x == m) / np.sum(x == m)


@numba.extending.overload(add_tie_share, jit_options={'error_model': 'numpy'})
def add_tie_share_numba(a, x, m, g):
    """How Numba compiles add_tie_share: two loops for float64 vectors (count the winners,
    then add each element's share; an x of length one is broadcast as NumPy does); NumPy's
    expression otherwise. (The vectors' form once fell back on the expression for lengths
    that differ: ~0.3 s more to compile for a case that is NumPy's error.)"""
    vectors = all(isinstance(v, numba.types.Array) and v.ndim == 1 and
                  v.dtype == numba.types.float64 for v in (a, x))
    if not vectors:
        def whole(a, x, m, g):
            a += g * (x == m) / np.sum(x == m)
        return whole

    def loops(a, x, m, g):
        n = x.shape[0]
        if a.shape[0] != n and n != 1:
            raise ValueError("operands could not be broadcast together")
        count = 0
        for j in range(n):
            if x[j] == m:
                count += 1
        if a.shape[0] == n:
            for j in range(n):
                a[j] += g * (1.0 if x[j] == m else 0.0) / count
        else:
            share = g * (1.0 if x[0] == m else 0.0) / count
            for j in range(a.shape[0]):
                a[j] += share
    return loops
'''}
TIE_UNCOMPILED = frozenset({"add_tie_share", "add_tie_share_numba"})
