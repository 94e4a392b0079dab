"""A loop of independent in-place updates, split into one loop per update.

The adjoint of a dot product ``total = sum_k q[c, j, k] * x[k]`` inside loops (ADBench's GMM:
``np.dot(qs[c], xcentered)`` for each point and component) adds into two adjoints at once::

    for k_2 in range(length_2):
        add_at(x_bar, k_2, total_bar * qs[c, j, k_2])
        qs_bar[c, j, k_2] += total_bar * x_tape[row, k_2]

LLVM vectorizes such a loop only behind run-time checks that no array it stores into overlaps
one it reads, one check per pair, each paid at every entry of a loop that here runs ten steps;
with two stores and four arrays the checks and the scalar remainder cost more than the work.
:func:`split_independent_updates` writes one loop per update when the updates cannot see each
other::

    for k_2 in range(length_2):
        add_at(x_bar, k_2, total_bar * qs[c, j, k_2])
    for k_2 in range(length_2):
        qs_bar[c, j, k_2] += total_bar * x_tape[row, k_2]

Which loops: a ``for`` over a ``range`` whose body is two or more updates and nothing else: ``a[i]
+= e`` / ``a[i] -= e`` with a name's subscript as target, or ``add_at(a, i, e)`` /
``subtract_at(a, i, e)``. Each update adds into its own array, which is a new array of the
function that no other name can hold (bound only to fresh allocations, otherwise indexed,
handed to the add helpers or returned: codegen/fused_updates.py's test), so no update's reads
can see another's writes; no update reads an array another one writes or reads (each split
loop streams through arrays of its own, and memory traffic stays what it was); the loop's
variable is not rebound. Running all of one update's steps before the next one's then gives
the same values in every array, bit for bit.

Measured on the GMM gradient as written (d=10, K=25, N=1000; CPU time, one process, the
generated module before and after this change alone): 3.23-3.51 -> 3.03-3.12 ms.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(q, x, g, n):
...     x_bar = np.zeros_like(x)
...     q_bar = np.zeros_like(q)
...     for k in range(n):
...         add_at(x_bar, k, g * q[k])
...         q_bar[k] += g * x[k]
...     return x_bar, q_bar
... ''').body[0]
>>> split_independent_updates(fn)
1
>>> print(unparse(fn.body[2]))
for k in range(n):
    add_at(x_bar, k, g * q[k])
>>> print(unparse(fn.body[3]))
for k in range(n):
    q_bar[k] += g * x[k]
"""

from __future__ import annotations

import copy

import gast

from .fused_updates import call_name, fresh_and_unshared

__all__ = ["split_independent_updates"]

_UPDATE_HELPERS = frozenset({"add_at", "subtract_at"})


def split_independent_updates(fn):
    """Split the loops of `fn` (a gast FunctionDef, in place) described in the module
    docstring; returns how many loops were split."""
    split = 0
    for node in list(gast.walk(fn)):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            k = 0
            while k < len(block):
                pieces = _pieces(block[k], fn)
                if pieces is None:
                    k += 1
                    continue
                block[k:k + 1] = pieces
                k += len(pieces)
                split += 1
    return split


def _pieces(loop, fn):
    """The loops `loop` splits into, else None."""
    if not (isinstance(loop, gast.For) and not loop.orelse and len(loop.body) >= 2 and
            isinstance(loop.target, gast.Name) and call_name(loop.iter) == "range"):
        return None
    index = loop.target.id
    updates = [_update(stmt) for stmt in loop.body]
    if any(u is None for u in updates):
        return None
    written = [array for array, _ in updates]
    if len(set(written)) != len(written) or \
            {n.id for n in gast.walk(loop.iter) if isinstance(n, gast.Name)} & set(written):
        return None
    read_by = []
    for array, stmt in updates:
        names = [n for n in gast.walk(stmt) if isinstance(n, gast.Name)]
        if any(n.id == index and not isinstance(n.ctx, gast.Load) for n in names):
            return None
        if {n.id for n in names} & (set(written) - {array}):
            return None  # an update reads (or passes on) an array another one writes
        read_by.append(_subscripted(stmt) - {array})
    for a in range(len(read_by)):
        for b in range(a + 1, len(read_by)):
            if read_by[a] & read_by[b]:
                return None  # (split, the array would be read twice from memory)
    if not all(fresh_and_unshared(fn, array) for array in written):
        return None
    pieces = []
    for stmt in loop.body:
        piece = copy.copy(loop)
        piece.target = copy.deepcopy(loop.target)
        piece.iter = copy.deepcopy(loop.iter)
        piece.body = [stmt]
        piece.orelse = []
        pieces.append(piece)
    return pieces


def _update(stmt):
    """(array, stmt) when `stmt` is ``a[i] += e``, ``a[i] -= e``, ``add_at(a, i, e)`` or
    ``subtract_at(a, i, e)``; else None."""
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, (gast.Add, gast.Sub)) and \
            isinstance(stmt.target, gast.Subscript) and \
            isinstance(stmt.target.value, gast.Name):
        return stmt.target.value.id, stmt
    if isinstance(stmt, gast.Expr) and call_name(stmt.value) in _UPDATE_HELPERS and \
            len(stmt.value.args) == 3 and not stmt.value.keywords and \
            isinstance(stmt.value.args[0], gast.Name):
        return stmt.value.args[0].id, stmt
    return None


def _subscripted(stmt):
    """The names `stmt` indexes (the arrays it reads or writes elements of)."""
    return {n.value.id for n in gast.walk(stmt)
            if isinstance(n, gast.Subscript) and isinstance(n.value, gast.Name)}
