"""A loop that only sums into numbers, merged into the gathering loop before it.

The heat equation's reverse step, once :mod:`codegen.gather_targets` has dropped the resets
nothing reads, passes over the step's adjoint twice::

    for j in range(0, n):               # the stencil's adjoint, gathered
        u_bar_j = gather_start(u_bar, j)
        ...                             # reads un_bar[j - 1], un_bar[j], un_bar[j + 1]
        u_bar[j] = u_bar_j
    for i in range(1, n - 1):           # the coefficient's adjoint
        add_3_bar = un_bar[i]
        c_bar = c_bar + add_3_bar * (u[i - 1] - 2.0 * u[i] + u[i + 1])

:func:`fuse_sum_loops` writes the second loop's body into the first's, before its last
statement (the gathered entry's store), under the condition that keeps its range (``if j >= 1
and j < n - 1``; a bound the two loops share is not tested)::

    for j in range(0, n):
        u_bar_j = gather_start(u_bar, j)
        ...
        if j >= 1 and j < n - 1:
            add_3_bar = un_bar[j]
            c_bar = c_bar + add_3_bar * (u[j - 1] - 2.0 * u[j] + u[j + 1])
        u_bar[j] = u_bar_j

:mod:`codegen.index_splitting` then gives the merged loop a branch-free interior, which
:mod:`codegen.reduction_loops` outlines into a function compiled with reassociation: one pass
over ``un_bar`` and the tape's row a step instead of two. Before the store, not after it: a
read of ``un_bar[j]`` after a store into ``u_bar[j]`` (which might be the same memory, for
all LLVM knows) is a second load each step, and the loop ran twice as slow as the two loops.
Measured on the 1-D heat equation, 1,000 points x 500 steps (jit(grad), the modules called in
turn in one process, three processes, AMD EPYC, 2 vCPUs, 2026-11-30): 347-433 us before,
326-395 us merged (the store last: 672-692 us); the primal 106-156 us in the same runs.

Which loops: two ``for`` loops over ``range`` (step 1, no ``else``, no ``break``, ``continue``,
``return``, nested function) standing next to each other in a block (comments between them
allowed). The first gathers (its first statement ``X_j = gather_start(X, j)``) and writes
entries of X alone, bound just before it (nothing in between mentioning X) to a new array
(``zeros_outside``, ``np.zeros_like``, ...) that no other name holds yet; the second does not
mention the spare array ``zeros_outside`` may fill instead. The second holds only assignments
to names (no entry written, no nested block) and calls nothing but functions that change no
argument (``np.<f>``, ``math.<f>``, ``len``, ``min``, ...); its range lies within the first's
(``lo1 <= lo2`` and ``hi2 <= hi1``, each pair constants or one expression plus constants). No
name the first binds, writes into or passes to a call that may change it is mentioned by the
second (its range included), and no name the second binds is mentioned by the first; the
second's index is mentioned elsewhere in the function only by loops over it. Each number the
second sums is then added in the same order as before, and every value either loop reads is the
one it read before.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(y_bar, u, c, n):
...     x_bar = zeros_outside(u, 0, n)
...     for j in range(0, n):
...         x_bar_j = gather_start(x_bar, j)
...         if j >= 1:
...             x_bar_j += y_bar[j - 1] * c
...         x_bar[j] = x_bar_j
...     for i in range(1, n - 1):
...         t = y_bar[i]
...         c_bar = c_bar + t * u[i]
...     return x_bar, c_bar
... ''').body[0]
>>> fuse_sum_loops(fn)
True
>>> print(unparse(fn.body[1]))
for j in range(0, n):
    x_bar_j = gather_start(x_bar, j)
    if j >= 1:
        x_bar_j += y_bar[j - 1] * c
    if j >= 1 and j < n - 1:
        t = y_bar[j]
        c_bar = c_bar + t * u[j]
    x_bar[j] = x_bar_j
"""

from __future__ import annotations

import copy

import gast

from .emit import is_marker, name_node, names_bound, range_bounds, statement_blocks, text_of
from .invariant_tables import written_names
from .param_writes import dotted_name
from .reduction_loops import index_only_in_own_loops

__all__ = ["fuse_sum_loops"]

#: numpy functions that write into an argument: never in a merged loop.
_WRITING = {"copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis"}


def fuse_sum_loops(fn):
    """Merge, in `fn` (a gast FunctionDef, rewritten in place), each loop that only sums into
    numbers into the gathering loop before it when the rules above allow; returns whether any
    loop was merged."""
    changed = False
    for block in statement_blocks(fn):
        k = 0
        while k < len(block):
            later = _next_statement(block, k)
            if later is not None and _can_fuse(fn, block[:k], block[k], block[later]):
                _fuse(block[k], block[later])
                del block[later]
                changed = True
                continue  # (the merged loop may take the next one as well)
            k += 1
    return changed


def _next_statement(block, k):
    """The index of the first statement after block[k] that is not a comment, or None."""
    for m in range(k + 1, len(block)):
        if not is_marker(block[m]):
            return m
    return None


def _plain_loop(stmt):
    """Whether `stmt` is ``for <name> in range(...)`` (step 1) with no else and nothing in
    it that leaves the loop or defines a function."""
    return isinstance(stmt, gast.For) and isinstance(stmt.target, gast.Name) and \
        not stmt.orelse and range_bounds(stmt) is not None and \
        not any(isinstance(n, (gast.Break, gast.Continue, gast.Return, gast.Yield,
                               gast.FunctionDef, gast.Lambda))
                for s in stmt.body for n in gast.walk(s))


def _gathers(loop):
    first = loop.body[0] if loop.body else None
    return isinstance(first, gast.Assign) and len(first.targets) == 1 and \
        isinstance(first.targets[0], gast.Name) and isinstance(first.value, gast.Call) and \
        isinstance(first.value.func, gast.Name) and first.value.func.id == "gather_start" and \
        len(first.value.args) == 2 and isinstance(first.value.args[1], gast.Name) and \
        first.value.args[1].id == loop.target.id


#: Calls that change none of their arguments.
_READING = {"range", "len", "min", "max", "abs", "int", "float", "gather_start",
            "index_at_least"}


def _reads_only(call):
    """Whether `call` changes none of its arguments: a builtin of :data:`_READING` or a
    ``np.<f>``/``math.<f>`` function that writes nowhere."""
    name = dotted_name(call.func) or ""
    if name in _READING:
        return True
    module, _, attr = name.partition(".")
    return module in ("np", "math") and "." not in attr and attr not in _WRITING and \
        not any(k.arg == "out" for k in call.keywords)


def _only_sums(loop):
    """Whether the loop's body assigns names only and calls only np/math functions."""
    for stmt in loop.body:
        if is_marker(stmt):
            continue
        targets = stmt.targets if isinstance(stmt, gast.Assign) else \
            [stmt.target] if isinstance(stmt, gast.AugAssign) else None
        if targets is None or not all(isinstance(t, gast.Name) for t in targets):
            return False
        for node in gast.walk(stmt.value):
            if isinstance(node, gast.Call) and not _reads_only(node):
                return False
            elif isinstance(node, (gast.NamedExpr, gast.Lambda)):
                return False
    return True


def _mentioned(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _offset(bound):
    """(text of the base, constant offset) of a loop bound: ``n - 1`` -> ('n', -1)."""
    if isinstance(bound, gast.Constant) and type(bound.value) is int:
        return "", bound.value
    if isinstance(bound, gast.BinOp) and isinstance(bound.op, (gast.Add, gast.Sub)) and \
            isinstance(bound.right, gast.Constant) and type(bound.right.value) is int:
        sign = 1 if isinstance(bound.op, gast.Add) else -1
        return text_of(bound.left), sign * bound.right.value
    return text_of(bound), 0


def _at_most(low, high):
    """Whether the bound `low` is never above `high` (same base, smaller offset)."""
    (base_low, off_low), (base_high, off_high) = _offset(low), _offset(high)
    return base_low == base_high and off_low <= off_high


def _written_arrays(loop):
    """The names whose entries `loop` writes (``a[...] = e``, ``a[...] += e``)."""
    return {n.value.id for n in gast.walk(loop)
            if isinstance(n, gast.Subscript) and isinstance(n.ctx, (gast.Store, gast.Del)) and
            isinstance(n.value, gast.Name)}


#: Calls that make a new array (what a gathering loop fills).
_NEW_ARRAYS = {"zeros_outside", "np.zeros_like", "np.zeros", "np.empty_like", "np.empty"}


def _private_target(before, target, second):
    """Whether the last of `before` (the statements before the first loop in its block) that
    mentions `target` binds it to a new array, so that no other name holds it when the loop
    starts, and the second loop does not mention the spare array zeros_outside may fill
    instead (its fourth argument)."""
    for stmt in reversed(before):
        if not any(isinstance(n, gast.Name) and n.id == target for n in gast.walk(stmt)):
            continue
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
                isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == target and
                isinstance(stmt.value, gast.Call) and
                dotted_name(stmt.value.func) in _NEW_ARRAYS):
            return False
        spare = stmt.value.args[3:4]
        return not (spare and _mentioned(spare[0]) & _mentioned(second))
    return False


def _can_fuse(fn, before, first, second):
    if not (_plain_loop(first) and _plain_loop(second) and _gathers(first) and
            _only_sums(second)):
        return False
    target = first.body[0].value.args[0]
    written = _written_arrays(first)
    if not (isinstance(target, gast.Name) and written == {target.id} and
            _private_target(before, target.id, second)):
        return False
    (lo1, hi1), (lo2, hi2) = range_bounds(first), range_bounds(second)
    if not (_at_most(lo1, lo2) and _at_most(hi2, hi1)):
        return False
    if (names_bound([first]) | written_names([first])) & _mentioned(second):
        return False
    if names_bound([second]) & _mentioned(first):
        return False
    return index_only_in_own_loops(fn, second, second.target.id)


def _fuse(first, second):
    """Put `second`'s body (its index renamed), under its range's test, in `first`'s before its
    last statement."""
    j, i = first.target.id, second.target.id
    (lo1, hi1), (lo2, hi2) = range_bounds(first), range_bounds(second)
    body = copy.deepcopy(second.body)
    for stmt in body:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Name) and node.id == i:
                node.id = j
    tests = []
    if text_of(lo1) != text_of(lo2):
        tests.append(gast.Compare(left=name_node(j), ops=[gast.GtE()],
                                  comparators=[copy.deepcopy(lo2)]))
    if text_of(hi1) != text_of(hi2):
        tests.append(gast.Compare(left=name_node(j), ops=[gast.Lt()],
                                  comparators=[copy.deepcopy(hi2)]))
    if tests:
        test = tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)
        body = [gast.If(test=test, body=body, orelse=[])]
    first.body[-1:-1] = body  # (before the gathered entry's store: see the module's note)
