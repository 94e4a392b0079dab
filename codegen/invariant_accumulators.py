"""An element a loop adds into at every step, at an index the loop does not change, summed in a
local first.

The gradient of a pair potential adds into both particles of each pair: in the inner loop
``for j in range(i + 1, n)`` of the Lennard-Jones energy's gradient,

    pos_bar[j, 0] += -dx_bar
    pos_bar[i, 0] += dx_bar

``pos_bar[i, 0]`` is the same element at every step, but the compiler cannot keep it in a
register: it cannot tell that the stores into ``pos_bar[j, 0]`` never reach it, so every step
loads it, adds and stores it again, each step waiting for the store of the one before.
:func:`sum_invariant_updates` adds into a local instead and into the element once, after the
loop::

    pos_bar_i_0 = zero_entry(pos_bar, (i, 0))
    for j in range(i + 1, n):
        ...
        pos_bar[j, 0] += -dx_bar
        pos_bar_i_0 += dx_bar
    if i + 1 < n:
        pos_bar[i, 0] += pos_bar_i_0

``zero_entry`` is ``0.0`` when the index takes every axis of the array and a zero row shaped
like ``pos_bar[i, 0]`` otherwise (the rank is not known where this runs; Numba decides from the
types). The add is skipped when the loop ran no step, as the loop's own adds were: the element
may not exist then. The element receives the same terms, summed in another order: its last
bits may differ, as a reordered sum's do. A vector's updates, ``add_at(x_bar, i, e)`` and
``subtract_at(x_bar, j, e)``, are taken the same way (the local is added with ``add_at``).
Measured on the Lennard-Jones gradient, 500 particles (jit(grad), interleaved runs,
2026-11-28): 681 -> 620 us.

When: a ``for j in range(...)`` loop (step 1, no ``return`` inside) whose body has, as a
statement of its own (not inside a branch or an inner loop), ``A[P] += e``, ``A[P] -= e``,
``A[P] = A[P] + e`` (or ``- e``), ``add_at(A, P, e)`` or ``subtract_at(A, P, e)``
with every name of the index P bound neither in the loop nor its index, P made of names,
integers and arithmetic; A a name that no other name, list or call can hold
(:mod:`codegen.buffer_reuse`'s check: every binding a new array, every read keeping nothing);
and every other mention of A in the loop either another such update of the same P, its
shape, or an element ``A[Q]`` (or ``add_at(A, Q, ...)``) that cannot be ``A[P]``: at some
position both are different
integers, or Q has the loop's index where P has ``E`` and the range starts at ``E + k``
(k >= 1) or ends at ``E`` or ``E - k``.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, n):
...     g = np.zeros_like(x)
...     for i in range(n):
...         for j in range(i + 1, n):
...             d = x[i] - x[j]
...             g[j] += -d
...             g[i] += d
...     return g
... ''').body[0]
>>> sum_invariant_updates(fn, {"f", "x", "n", "g", "i", "j", "d"})
{'zero_entry'}
>>> print(unparse(fn.body[1]))
for i in range(n):
    g_i = zero_entry(g, i)
    for j in range(i + 1, n):
        d = x[i] - x[j]
        g[j] += -d
        g_i += d
    if i + 1 < n:
        g[i] += g_i
"""

from __future__ import annotations

import copy

import gast

from .buffer_reuse import SHAPE_ATTRS, has_inner_functions, holds_alone, privacy_context
from .emit import (
    fresh_name,
    is_marker,
    name_node,
    names_bound,
    parent_map,
    range_bounds,
    statement_blocks,
)

__all__ = ["ACCUMULATOR_HELPERS", "ACCUMULATOR_UNCOMPILED", "sum_invariant_updates"]

def sum_invariant_updates(fn, taken):
    """Rewrite `fn` (a gast FunctionDef, in place); returns the names of the helpers the new
    statements call (``zero_entry``, :data:`ACCUMULATOR_HELPERS`, and ``add_at`` when the
    loop added with it), empty when no loop was rewritten. `taken` (a set of names, updated)
    keeps the new locals' names apart."""
    if has_inner_functions(fn):
        return set()
    params, bindings, parents = privacy_context(fn)
    private = {}
    used = set()
    for block in statement_blocks(fn):
        k = 0
        while k < len(block):
            loop = block[k]
            plan = _plan(loop, fn, params, bindings, parents, private) \
                if isinstance(loop, gast.For) else None
            if plan:
                before, after, helpers = _rewrite(loop, plan, taken)
                at = k  # (before the loop's comment, which stays on the loop)
                while at > 0 and is_marker(block[at - 1]):
                    at -= 1
                block[k + 1:k + 1] = after
                block[at:at] = before
                k += len(before) + len(after)
                used |= helpers
            k += 1
    return used


def _positions(index):
    return list(index.elts) if isinstance(index, gast.Tuple) else [index]


def _plain_index(index):
    """Whether the index is made of names, integers and arithmetic only."""
    return all(isinstance(n, (gast.Name, gast.Constant, gast.BinOp, gast.UnaryOp, gast.Tuple,
                              gast.Load, gast.operator, gast.unaryop)) and
               (not isinstance(n, gast.Constant) or type(n.value) is int)
               for n in gast.walk(index))


_ADDING_CALLS = {"add_at": gast.Add, "subtract_at": gast.Sub}


def _update(stmt):
    """(array, index, op, term, names) of ``A[P] += e``, ``A[P] -= e``, ``A[P] = A[P] + e``
    (or ``- e``), ``add_at(A, P, e)`` or ``subtract_at(A, P, e)``, `names` the update's own
    Name nodes of A; or None."""
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, (gast.Add, gast.Sub)) and \
            isinstance(stmt.target, gast.Subscript) and \
            isinstance(stmt.target.value, gast.Name):
        return (stmt.target.value.id, stmt.target.slice, stmt.op, stmt.value,
                [stmt.target.value])
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Subscript) and \
            isinstance(stmt.targets[0].value, gast.Name) and \
            isinstance(stmt.value, gast.BinOp) and isinstance(stmt.value.op, (gast.Add, gast.Sub)) \
            and isinstance(stmt.value.left, gast.Subscript) and \
            gast.dump(stmt.value.left) == gast.dump(gast.Subscript(
                value=stmt.targets[0].value, slice=stmt.targets[0].slice, ctx=gast.Load())):
        return (stmt.targets[0].value.id, stmt.targets[0].slice, stmt.value.op,
                stmt.value.right, [stmt.targets[0].value, stmt.value.left.value])
    call = _adding_call(stmt.value) if isinstance(stmt, gast.Expr) else None
    if call is not None:
        return (call.args[0].id, call.args[1], _ADDING_CALLS[call.func.id](), call.args[2],
                [call.args[0]])
    return None


def _adding_call(node):
    """`node` when it is ``add_at(A, P, e)`` or ``subtract_at(A, P, e)`` (A a name)."""
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
            node.func.id in _ADDING_CALLS and len(node.args) == 3 and not node.keywords and \
            isinstance(node.args[0], gast.Name):
        return node
    return None


def _plan(loop, fn, params, bindings, parents, private):
    """{(array, index text): [index, [statements]]} for the updates of `loop` to sum in
    locals (empty when none may be)."""
    bounds = range_bounds(loop)
    if bounds is None or loop.orelse or not isinstance(loop.target, gast.Name) or \
            any(isinstance(n, gast.Return) for stmt in loop.body for n in gast.walk(stmt)):
        return {}
    index_name = loop.target.id
    varying = names_bound(loop.body) | {index_name}
    if any(isinstance(n, gast.Name) and n.id in varying for b in bounds for n in gast.walk(b)):
        return {}  # (the test after the loop reads the bounds again)
    found = {}
    for stmt in loop.body:
        update = _update(stmt)
        if update is None:
            continue
        array, index = update[:2]
        if not _plain_index(index) or any(isinstance(n, gast.Name) and n.id in varying
                                           for n in gast.walk(index)):
            continue
        key = (array, gast.dump(index))
        found.setdefault(key, [index, []])[1].append(stmt)
    plan = {}
    for key, (index, statements) in found.items():
        array = key[0]
        if array in varying or array in params:
            continue
        if array not in private:
            private[array] = holds_alone(fn, array, params, bindings, parents)
        if private[array] and _only_other_elements(loop, array, index, statements, bounds):
            plan[key] = [index, statements]
    return plan


def _only_other_elements(loop, array, index, statements, bounds):
    """Whether every mention of `array` in the loop but `statements` is its shape or an element
    that cannot be ``array[index]``."""
    own = {id(name) for stmt in statements for name in _update(stmt)[4]}
    parents = parent_map(loop.body)
    for stmt in loop.body:
        for node in gast.walk(stmt):
            if not (isinstance(node, gast.Name) and node.id == array) or id(node) in own:
                continue
            parent = parents.get(id(node))
            if isinstance(parent, gast.Attribute) and parent.attr in SHAPE_ATTRS:
                continue
            call = _adding_call(parent)
            if call is not None and call.args[0] is node:
                if _distinct(index, call.args[1], loop.target.id, bounds):
                    continue
                return False
            if not (isinstance(parent, gast.Subscript) and parent.value is node and
                    _distinct(index, parent.slice, loop.target.id, bounds)):
                return False
    return True


def _distinct(p, q, index_name, bounds):
    """Whether the element indices `p` (loop-invariant) and `q` can never be equal."""
    ps, qs = _positions(p), _positions(q)
    if len(ps) != len(qs):
        return False
    lo, hi = bounds
    for a, b in zip(ps, qs):
        if isinstance(a, gast.Constant) and isinstance(b, gast.Constant) and \
                type(a.value) is int and type(b.value) is int and a.value != b.value:
            return True
        if isinstance(b, gast.Name) and b.id == index_name and _outside_range(a, lo, hi):
            return True
    return False


def _outside_range(e, lo, hi):
    """Whether ``range(lo, hi)`` cannot hold the value of `e`: lo is ``e + k`` (k >= 1), or hi
    is ``e`` or ``e - k`` (k >= 0), written so."""
    text = gast.dump(e)
    if isinstance(lo, gast.BinOp) and isinstance(lo.op, gast.Add) and \
            gast.dump(lo.left) == text and _positive_int(lo.right, 1):
        return True
    if gast.dump(hi) == text:
        return True
    return isinstance(hi, gast.BinOp) and isinstance(hi.op, gast.Sub) and \
        gast.dump(hi.left) == text and _positive_int(hi.right, 0)


def _positive_int(node, least):
    return isinstance(node, gast.Constant) and type(node.value) is int and node.value >= least


def _local_name(array, index, taken):
    parts = []
    for position in _positions(index):
        if isinstance(position, gast.Name):
            parts.append(position.id)
        elif isinstance(position, gast.Constant):
            parts.append(str(position.value))
        else:
            parts = []
            break
    base = "_".join([array] + parts) if parts else f"{array}_total"
    name = fresh_name(base, taken)
    taken.add(name)
    return name


def _rewrite(loop, plan, taken):
    """The statements before and after `loop` (its body rewritten in place), and the names of
    the helpers they call."""
    before, adds, helpers = [], [], {"zero_entry"}
    for (array, _), (index, statements) in plan.items():
        local = _local_name(array, index, taken)
        before.append(gast.Assign(targets=[name_node(local, gast.Store())], value=gast.Call(
            func=name_node("zero_entry"), args=[name_node(array), copy.deepcopy(index)],
            keywords=[]), type_comment=None))
        calls = any(isinstance(stmt, gast.Expr) for stmt in statements)
        for stmt in statements:
            _, _, op, term, _ = _update(stmt)
            at = next(k for k, s in enumerate(loop.body) if s is stmt)
            loop.body[at] = gast.AugAssign(target=name_node(local, gast.Store()), op=op,
                                           value=term)
        element = copy.deepcopy(index)
        if calls:  # add_at adds a row into a matrix, as the loop's calls did
            helpers.add("add_at")
            adds.append(gast.Expr(value=gast.Call(func=name_node("add_at"), args=[
                name_node(array), element, name_node(local)], keywords=[])))
        else:
            adds.append(gast.AugAssign(
                target=gast.Subscript(value=name_node(array), slice=element, ctx=gast.Store()),
                op=gast.Add(), value=name_node(local)))
    lo, hi = range_bounds(loop)
    ran = gast.Compare(left=copy.deepcopy(lo), ops=[gast.Lt()], comparators=[copy.deepcopy(hi)])
    return before, [gast.If(test=ran, body=adds, orelse=[])], helpers


#: The helper (its plain form and its Numba overload), written into a module that calls it.
ACCUMULATOR_HELPERS = {"zero_entry": '''\
def zero_entry(a, index):
    """What adding into `a[index]` starts from: 0.0 for an element, a zero array shaped like
    `a[index]` for a row or for an array index (integers or a mask: a[index] is a copy of
    the entries it picks, so its values are not read)."""
    if isinstance(index, np.ndarray):
        return np.zeros_like(a[index])
    taken = len(index) if isinstance(index, tuple) else 1
    return 0.0 if a.ndim == taken else np.zeros(a.shape[taken:], a.dtype)


@numba.extending.overload(zero_entry, inline='always', jit_options={'error_model': 'numpy'})
def zero_entry_numba(a, index):
    """How Numba compiles zero_entry: the number 0.0 when the index takes every axis."""
    if isinstance(index, numba.types.Array):
        return lambda a, index: np.zeros_like(a[index])
    taken = len(index) if isinstance(index, numba.types.BaseTuple) else 1
    if a.ndim == taken:
        return lambda a, index: 0.0
    return lambda a, index: np.zeros(a.shape[taken:], a.dtype)
'''}
ACCUMULATOR_UNCOMPILED = frozenset({"zero_entry", "zero_entry_numba"})
