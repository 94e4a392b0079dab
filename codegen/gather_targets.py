"""The reverse step of an in-place stencil: the adjoint its gathering loop fills is not zeroed
first, and the copy's adjoint adds only the entries the step did not overwrite.

A stencil's adjoint in gather form (:mod:`autodiff_ast.gather_form`) fills an adjoint the
reverse sweep has just made, one entry per iteration; in the heat equation's reverse step::

    u_bar = np.zeros_like(u)
    for j in range(0, n):
        u_bar_j = u_bar[j]
        ...                        # the terms of the entries around j
        u_bar[j] = u_bar_j
    for i in range(1, n - 1):      # the rest of the stencil's adjoint
        add_3_bar = un_bar[i]
        un_bar[i] = 0.0            # un[i] was overwritten: the copy gets nothing there
        c_bar = c_bar + add_3_bar * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    u_bar += un_bar                # the adjoint of un = u.copy()

Each step makes a new array, zeroes it and reads the zeros back one by one, then passes
over both arrays again to add zeros but at the two ends. :func:`fill_gather_targets`,
:func:`skip_reset_entries` and :func:`reuse_previous_steps` write it::

    u_bar = zeros_outside(u, 0, n, u_bar_spare, u_bar_reusable)
    for j in range(0, n):
        u_bar_j = gather_start(u_bar, j)
        ...
        u_bar[j] = u_bar_j
    for i in range(1, n - 1):
        add_3_bar = un_bar[i]          # (the reset: gone, nothing reads it)
        c_bar = c_bar + add_3_bar * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    add_outside(u_bar, un_bar, 1, n - 1)
    u_bar_spare = un_bar               # dead from the next step's `un_bar = u_bar` on
    u_bar_reusable = u_bar_started     # (from the third step: an array made in the loop)
    u_bar_started = True

In plain Python the helpers are what they replace (``np.zeros_like``, ``a[j]``, the add, less
the entries known to be zero). Under Numba, for a vector, ``zeros_outside`` leaves the entries
``lo..hi-1`` unset (the loop writes each before anything reads it), ``gather_start`` is
``0.0``, and ``zeros_outside`` given a spare that may be reused fills the array of the step
before last instead of a new one. Measured on the 1-D heat equation, 1,000 points x 500 steps
(jit(grad), interleaved runs, medians of 50 calls, 2026-11-28): 557-570 us before, 475-485 us
without the zeroing and the add, 442-471 us (best of several rounds) with the reuse as well;
the primal 139-142 us.

:func:`fill_gather_targets` applies to ``X = np.zeros_like(Y)``; then statements that do not
mention ``X`` nor assign a name of the loop's end; then ``for j in range(lo, hi)`` (step 1,
``lo`` a non-negative integer written out) whose first statement is ``X_j = X[j]`` and last
``X[j] = X_j``, with ``X`` nowhere else in the loop, ``j`` not assigned in it and no
``break``/``continue``/``return``. Numba's form checks ``lo <= hi <= len(X)`` and zeroes the
whole array otherwise. :func:`skip_reset_entries` applies to ``X += Z`` (two names) after a
loop ``for i in range(a, b)`` (``a`` a non-negative integer written out) that mentions ``Z``
only as ``Z[i]``, read or set to zero, when nothing between them mentions ``Z`` or assigns a
name of ``a`` or ``b``; ``add_outside`` adds all of ``Z`` when the shapes differ (NumPy's
broadcast, or its error). :func:`reuse_previous_steps` applies to a loop whose body binds
``A = X`` and later ``X = zeros_outside(...)``, each name nowhere else in the loop, when X is
bound before the loop, the loop has no ``break``/``continue``/``return``, and every other read
of A or X in it keeps nothing (an element, arithmetic, the helpers above: the checks of
:mod:`codegen.buffer_reuse`). The array made in step t is then held by A alone from step t + 1
on and by nothing from step t + 2's ``A = X``: that step fills it again. The array X held
before the loop is never reused (something else may hold it); Numba's form reuses only a
C-order vector of like's dtype and length.

With the reuse, the resets ``A[i] = 0.0`` of the loop before ``add_outside(X, A, a, b)`` (the
same a, b) are read by nothing: add_outside skips those entries, A is not read after it in
the step nor anywhere outside the loop, and the array A holds is filled again (every entry
written before it is read) when it is next used. They are dropped when, besides, the array
X holds before the loop is new (bound to an allocation, arithmetic or a copy, read after
that only in ways that keep nothing: the first step's A is that array, which nothing else
may then see), and nothing in the reset loop reads an entry after resetting it. Heat
equation, 1,000 x 500: -7 us (and :mod:`codegen.loop_fusion` may then merge the loop into
the gathering one).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(y_bar, w, n):
...     x_bar = np.zeros_like(w)
...     for j in range(0, n):
...         x_bar_j = x_bar[j]
...         if j >= 1:
...             x_bar_j += y_bar[j - 1]
...         x_bar[j] = x_bar_j
...     for i in range(1, n):
...         y_bar[i] = 0.0
...     x_bar += y_bar
...     return x_bar
... ''').body[0]
>>> sorted(fill_gather_targets(fn)), skip_reset_entries(fn)
(['gather_start', 'zeros_outside'], True)
>>> print(unparse(fn))
def f(y_bar, w, n):
    x_bar = zeros_outside(w, 0, n)
    for j in range(0, n):
        x_bar_j = gather_start(x_bar, j)
        if j >= 1:
            x_bar_j += y_bar[j - 1]
        x_bar[j] = x_bar_j
    for i in range(1, n):
        y_bar[i] = 0.0
    add_outside(x_bar, y_bar, 1, n)
    return x_bar
"""

from __future__ import annotations

import copy

import gast

from .buffer_reuse import _read_keeps_nothing
from .emit import (
    call_node,
    fresh_name,
    is_entry,
    is_marker,
    mentions,
    name_node,
    names_bound,
    parent_map,
    range_bounds,
    statement_blocks,
    text_of,
)
from .param_writes import dotted_name

__all__ = ["fill_gather_targets", "reuse_previous_steps", "skip_reset_entries",
           "GATHER_HELPERS", "GATHER_UNCOMPILED"]


def fill_gather_targets(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns the names of the helpers it
    now calls (empty when nothing was rewritten)."""
    used = set()
    for block in statement_blocks(fn):
        used |= _rewrite_block(block)
    return used


def _rewrite_block(block):
    used = set()
    for k in range(len(block)):
        target = _zeros_like_target(block[k])
        if target is None:
            continue
        loop_at = _gathering_loop_after(block, k, target)
        if loop_at is None:
            continue
        loop = block[loop_at]
        lo, hi = range_bounds(loop)
        block[k].value = call_node("zeros_outside", [copy.deepcopy(block[k].value.args[0]),
                                                 copy.deepcopy(lo), copy.deepcopy(hi)])
        loop.body[0].value = call_node("gather_start", [name_node(target),
                                                    name_node(loop.target.id)])
        used |= {"zeros_outside", "gather_start"}
    return used


def _zeros_like_target(stmt):
    """X of ``X = np.zeros_like(Y)`` (one positional argument), or None."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name)):
        return None
    value = stmt.value
    if isinstance(value, gast.Call) and dotted_name(value.func) == "np.zeros_like" and \
            len(value.args) == 1 and not value.keywords:
        return stmt.targets[0].id
    return None


def _names_of(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _gathering_loop_after(block, k, target):
    """The index of the gathering loop into `target` after block[k], or None."""
    for m in range(k + 1, len(block)):
        stmt = block[m]
        if isinstance(stmt, gast.For) and _gathers_into(stmt, target):
            lo, hi = range_bounds(stmt)
            if names_bound(block[k + 1:m]) & _names_of(hi):
                return None
            return m
        if mentions(stmt, target):
            return None
    return None


def _gathers_into(loop, target):
    """Whether `loop` is ``for j in range(...)`` whose first statement is ``X_j = X[j]``, last
    ``X[j] = X_j``, with X = `target` nowhere else and j never assigned in it."""
    if loop.orelse or not isinstance(loop.target, gast.Name) or range_bounds(loop) is None or \
            len(loop.body) < 2:
        return False
    lo = range_bounds(loop)[0]
    if not (isinstance(lo, gast.Constant) and type(lo.value) is int and lo.value >= 0):
        return False
    j = loop.target.id
    first, last = loop.body[0], loop.body[-1]
    if not (isinstance(first, gast.Assign) and len(first.targets) == 1 and
            isinstance(first.targets[0], gast.Name) and is_entry(first.value, target, j)):
        return False
    local = first.targets[0].id
    if not (isinstance(last, gast.Assign) and len(last.targets) == 1 and
            is_entry(last.targets[0], target, j) and isinstance(last.value, gast.Name) and
            last.value.id == local):
        return False
    if any(mentions(stmt, target) for stmt in loop.body[1:-1]) or j in names_bound(loop.body):
        return False
    return not any(isinstance(n, (gast.Break, gast.Continue, gast.Return))
                   for stmt in loop.body for n in gast.walk(stmt))



def skip_reset_entries(fn):
    """Rewrite `fn` in place: ``X += Z`` after a loop that set ``Z[i] = 0.0`` for every i of
    its range(a, b), with nothing mentioning Z in between, becomes ``add_outside(X, Z, a, b)``;
    returns whether any statement was rewritten."""
    changed = False
    for block in statement_blocks(fn):
        for m, stmt in enumerate(block):
            added = _added_name(stmt)
            if added is None:
                continue
            bounds = _reset_before(block, m, added)
            if bounds is not None:
                block[m] = gast.Expr(value=call_node("add_outside", [
                    name_node(stmt.target.id), name_node(added)] + bounds))
                changed = True
    return changed


def _reset_before(block, m, array):
    """[a, b] (copies) of the loop ``for i in range(a, b)`` before block[m] that zeroes
    `array[i]` (:func:`_reset_bounds`), when the statements between do not mention `array`
    nor assign a name of a or b; None otherwise."""
    for r in range(m - 1, -1, -1):
        if mentions(block[r], array):
            break
    else:
        return None
    bounds = _reset_bounds(block[r], array)
    if bounds is None:
        return None
    a, b = bounds
    if not (isinstance(a, gast.Constant) and type(a.value) is int and a.value >= 0):
        return None  # (a negative start zeroes entries at the far end)
    changed = names_bound(block[r].body) | names_bound(block[r + 1:m]) | {block[r].target.id}
    if (_names_of(a) | _names_of(b)) & changed:
        return None
    return [copy.deepcopy(a), copy.deepcopy(b)]


def reuse_previous_steps(fn, taken):
    """Rewrite `fn` in place: in a loop whose body binds ``A = X`` and later ``X =
    zeros_outside(...)``, the array A held in the step before last (dead by then) is passed to
    ``zeros_outside`` to be filled again, and resets of A's entries nothing reads are
    dropped; returns whether any loop was rewritten.
    `taken` (a set of names, updated) keeps the three new names apart."""
    changed = False
    for block in statement_blocks(fn):
        k = 0
        while k < len(block):
            found = _step_pair(block, k) if isinstance(block[k], gast.For) else None
            if found is not None:
                at = k  # (before the loop's comment, which stays on the loop)
                while at > 0 and is_marker(block[at - 1]):
                    at -= 1
                _drop_consumed_resets(fn, block, k, *found[:2])
                before = _reuse_step(block[k], *found, taken)
                block[at:at] = before
                k += len(before)
                changed = True
            k += 1
    return changed


def _step_pair(block, k):
    """(A, X, q) when the loop block[k] has ``A = X`` at the top of its body and, after it,
    ``X = zeros_outside(...)`` at body[q], each name bound there only, X bound unconditionally
    before the loop, no break/continue/return in the loop, and every other read of A or X in
    it keeping nothing (:func:`codegen.buffer_reuse._read_keeps_nothing`, for a vector:
    the helper reuses vectors only); None otherwise."""
    loop = block[k]
    body = loop.body
    if loop.orelse or any(isinstance(n, (gast.Break, gast.Continue, gast.Return,
                                         gast.FunctionDef, gast.Lambda))
                          for stmt in body for n in gast.walk(stmt)):
        return None  # (a function defined in the loop could hold either array)
    stores = {}
    for stmt in [loop.target] + body:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)):
                stores[node.id] = stores.get(node.id, 0) + 1
    for p, stmt in enumerate(body):
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Name)):
            continue
        alias, array = stmt.targets[0].id, stmt.value.id
        if alias == array or stores.get(alias) != 1 or stores.get(array) != 1:
            continue
        q = next((q for q in range(p + 1, len(body)) if _zeros_outside_of(body[q], array)),
                 None)
        if q is None or not _bound_before(block[:k], array):
            continue
        if _reads_keep_nothing(body, {alias, array}, skip=stmt.value):
            return alias, array, q
    return None


def _drop_consumed_resets(fn, block, k, alias, array):
    """Drop the ``alias[i] = 0.0`` writes of a loop in block[k]'s body that only
    ``add_outside(array, alias, a, b)`` reads after (the entries it skips), when alias is read
    nowhere after that in the body and the array `array` held before the loop is new and held
    by nothing else (then no read ever sees those zeros: from the next step on, `alias`'s
    array is held by the spare alone, and zeros_outside fills it again before any read)."""
    body = block[k].body
    inside = {id(n) for n in gast.walk(block[k])}
    if any(isinstance(n, gast.Name) and n.id == alias and id(n) not in inside
           for n in gast.walk(fn)):
        return  # (read after the loop, the last step's array would show the resets)
    p = next(p for p, stmt in enumerate(body) if isinstance(stmt, gast.Assign) and
             any(isinstance(t, gast.Name) and t.id == alias for t in stmt.targets))
    added = [m for m, stmt in enumerate(body) if _adds_outside(stmt, array, alias)]
    if len(added) != 1 or not _fresh_before(block[:k], array):
        return
    m = added[0]
    if any(mentions(stmt, alias) for stmt in body[m + 1:]):
        return
    r = next((r for r in range(m - 1, p, -1) if mentions(body[r], alias)), None)
    bounds = _reset_bounds(body[r], alias) if r is not None else None
    if bounds is None or [text_of(b) for b in bounds] != \
            [text_of(b) for b in body[m].value.args[2:]]:
        return
    loop = body[r]
    resets = [s for s, stmt in enumerate(loop.body) if _resets(stmt, alias)]
    if not resets or any(mentions(stmt, alias) and s not in resets
                         for s, stmt in enumerate(loop.body) if s > resets[0]):
        return  # (an entry read after its reset would read the zero)
    loop.body = [stmt for s, stmt in enumerate(loop.body) if s not in resets] or [gast.Pass()]


def _adds_outside(stmt, array, alias):
    """Whether `stmt` is ``add_outside(array, alias, a, b)``."""
    call = stmt.value if isinstance(stmt, gast.Expr) else None
    return isinstance(call, gast.Call) and isinstance(call.func, gast.Name) and \
        call.func.id == "add_outside" and len(call.args) == 4 and \
        all(isinstance(a, gast.Name) for a in call.args[:2]) and \
        [a.id for a in call.args[:2]] == [array, alias]


def _resets(stmt, array):
    """Whether `stmt` is ``array[i] = 0`` (a number zero)."""
    return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], gast.Subscript) and \
        isinstance(stmt.targets[0].value, gast.Name) and stmt.targets[0].value.id == array and \
        isinstance(stmt.value, gast.Constant) and stmt.value.value == 0 and \
        not isinstance(stmt.value.value, bool)


_ALLOCATING = {"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like",
               "full_like", "copy", "array"}


def _fresh_before(statements, array):
    """Whether the last of `statements` (a block's, before a loop) that mentions `array` binds
    it to a new array (an allocation, arithmetic, a copy), and the ones after it read it only
    in ways that keep nothing (so no other name holds that array when the loop starts)."""
    parents = parent_map(statements)
    for stmt in reversed(statements):
        if not mentions(stmt, array):
            continue
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == array:
            return _new_array(stmt.value)
        if any(isinstance(n, gast.Name) and n.id == array and
               (not isinstance(n.ctx, gast.Load) or not _read_keeps_nothing(n, parents, False))
               for n in gast.walk(stmt)):
            return False
    return False


def _new_array(value):
    if isinstance(value, (gast.BinOp, gast.UnaryOp)):
        return True
    if not isinstance(value, gast.Call):
        return False
    name = dotted_name(value.func)
    return name in {f"np.{f}" for f in _ALLOCATING} or name in ("zeros_outside",
                                                                 "full_like_any") or \
        (isinstance(value.func, gast.Attribute) and value.func.attr == "copy" and
         not value.args and not value.keywords)


def _zeros_outside_of(stmt, array):
    return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == array and \
        isinstance(stmt.value, gast.Call) and isinstance(stmt.value.func, gast.Name) and \
        stmt.value.func.id == "zeros_outside"


def _bound_before(statements, array):
    """Whether a top-level statement of `statements` binds `array` (every path passes it)."""
    return any(isinstance(s, gast.Assign) and any(isinstance(t, gast.Name) and t.id == array
                                                  for t in s.targets) for s in statements)


def _reads_keep_nothing(body, names, skip):
    parents = parent_map(body)
    for stmt in body:
        for node in gast.walk(stmt):
            if not (isinstance(node, gast.Name) and node.id in names and
                    isinstance(node.ctx, gast.Load)) or node is skip:
                continue
            parent = parents.get(id(node))
            if isinstance(parent, gast.Call) and isinstance(parent.func, gast.Name) and \
                    parent.func.id in _NOT_KEEPING and node is not parent.func:
                continue
            if not _read_keeps_nothing(node, parents, True):
                return False
    return True


_NOT_KEEPING = {"gather_start", "add_outside", "zeros_outside"}


def _reuse_step(loop, alias, array, q, taken):
    """The statements to put before `loop`; rewrites its body in place."""
    spare, reusable, started = (fresh_name(f"{array}_{end}", taken)
                                for end in ("spare", "reusable", "started"))
    taken |= {spare, reusable, started}
    call = loop.body[q].value
    loop.body[q].value = call_node("zeros_outside", call.args[:3] + [name_node(spare),
                                                                 name_node(reusable)])

    def assign(target, value):
        return gast.Assign(targets=[name_node(target, gast.Store())], value=value,
                           type_comment=None)
    loop.body += [assign(spare, name_node(alias)), assign(reusable, name_node(started)),
                  assign(started, gast.Constant(value=True, kind=None))]
    false = gast.Constant(value=False, kind=None)
    return [assign(spare, name_node(array)), assign(reusable, false),
            assign(started, copy.deepcopy(false))]


def _added_name(stmt):
    """Z of ``X += Z`` (two different names), or None."""
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, gast.Add) and \
            isinstance(stmt.target, gast.Name) and isinstance(stmt.value, gast.Name) and \
            stmt.value.id != stmt.target.id:
        return stmt.value.id
    return None


def _reset_bounds(loop, array):
    """(a, b) of a loop ``for i in range(a, b)`` that mentions `array` only as ``array[i]``,
    read or set to zero (``array[i] = 0.0``), or None."""
    if not isinstance(loop, gast.For) or loop.orelse or not isinstance(loop.target, gast.Name):
        return None
    bounds = range_bounds(loop)
    i = loop.target.id
    if bounds is None or i in names_bound(loop.body) or array in names_bound(loop.body):
        return None
    if any(isinstance(n, (gast.Break, gast.Continue, gast.Return))
           for stmt in loop.body for n in gast.walk(stmt)):
        return None
    entries = set()
    for stmt in loop.body:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Subscript) and is_entry(node, array, i):
                entries.add(id(node))
            elif isinstance(node, gast.AugAssign) and mentions(node.target, array):
                return None
            elif isinstance(node, gast.Assign) and any(mentions(t, array)
                                                       for t in node.targets):
                if not (len(node.targets) == 1 and is_entry(node.targets[0], array, i) and
                        isinstance(node.value, gast.Constant) and node.value.value == 0 and
                        not isinstance(node.value.value, bool)):
                    return None
    used = sum(1 for stmt in loop.body for node in gast.walk(stmt)
               if isinstance(node, gast.Name) and node.id == array)
    return bounds if used == len(entries) else None



#: The helpers (plain forms and Numba overloads), written into a module that calls them.
GATHER_HELPERS = {"zeros_outside": '''\
def zeros_outside(like, lo, hi, spare=None, reusable=False):
    """np.zeros_like(like), whose entries lo..hi-1 the caller writes before reading them;
    made in the array `spare` when `reusable` says nothing can read it any more (plain
    Python: always a new array)."""
    return np.zeros_like(like)


@numba.extending.overload(zeros_outside, jit_options={'error_model': 'numpy'})
def zeros_outside_numba(like, lo, hi, spare=None, reusable=False):
    """How Numba compiles zeros_outside: for a vector, entries lo..hi-1 are left unset (the
    caller's loop writes each first), the rest zeroed, in `spare` when it is reusable, a
    C-order vector of like's dtype and of like's length (else a new array); np.zeros_like
    otherwise."""
    if not (isinstance(like, numba.types.Array) and like.ndim == 1):
        return lambda like, lo, hi, spare=None, reusable=False: np.zeros_like(like)
    can_reuse = isinstance(spare, numba.types.Array) and spare.ndim == 1 and \\
        spare.layout == "C" and spare.dtype == like.dtype

    def around(like, lo, hi, spare=None, reusable=False):
        if can_reuse and reusable and spare.shape[0] == like.shape[0]:
            out = spare
        else:
            out = np.empty_like(like)
        if 0 <= lo <= hi <= out.shape[0]:
            out[:lo] = 0
            out[hi:] = 0
        else:
            out[:] = 0
        return out
    return around
''', "gather_start": '''\
def gather_start(a, j):
    """`a[j]` of an array made by zeros_outside: the value a gathering loop starts from."""
    return a[j]


@numba.extending.overload(gather_start, inline='always', jit_options={'error_model': 'numpy'})
def gather_start_numba(a, j):
    """How Numba compiles gather_start: 0.0 for a vector (zeros_outside left the entry
    unset), the row a[j] otherwise."""
    if isinstance(a, numba.types.Array) and a.ndim == 1:
        return lambda a, j: 0.0
    return lambda a, j: a[j]
''', "add_outside": '''\
def add_outside(a, b, lo, hi):
    """`a += b` where b's entries lo..hi-1 (along its first axis) are known to be zero: only
    the others are added (all of b when the shapes differ, broadcast as NumPy does)."""
    if np.shape(a) != np.shape(b):
        a += b
        return
    start = min(max(lo, 0), a.shape[0])
    stop = min(max(hi, start), a.shape[0])
    a[:start] += b[:start]
    a[stop:] += b[stop:]


@numba.extending.overload(add_outside, jit_options={'error_model': 'numpy'})
def add_outside_numba(a, b, lo, hi):
    """How Numba compiles add_outside: for two vectors of one length, element loops over
    the entries outside lo..hi-1 (the two slice additions cost each step of the heat
    equation's reverse sweep ~30 ns), from a copy of b when the two partly overlap in memory
    (as NumPy does; Numba's slices do not); a one-entry b added to every entry and other
    lengths refused with NumPy's ValueError (Numba's ``a += b`` reads past b's end); as
    written for anything but two vectors."""
    def as_written(a, b, lo, hi):
        if np.shape(a) != np.shape(b):
            a += b
            return
        start = min(max(lo, 0), a.shape[0])
        stop = min(max(hi, start), a.shape[0])
        a[:start] += b[:start]
        a[stop:] += b[stop:]
    if not (isinstance(a, numba.types.Array) and a.ndim == 1 and
            isinstance(b, numba.types.Array) and b.ndim == 1):
        return as_written

    def entries(a, b, lo, hi):
        n = a.shape[0]
        if b.shape[0] != n:
            if b.shape[0] != 1:  # (Numba's a += b reads past b's end here)
                raise ValueError("operands could not be broadcast together")
            first = b[0]
            for k in range(n):
                a[k] += first
            return
        if n == 0:
            return
        start = min(max(lo, 0), n)
        stop = min(max(hi, start), n)
        a_low = a.ctypes.data + min(0, (n - 1) * a.strides[0])
        a_high = a.ctypes.data + max(0, (n - 1) * a.strides[0]) + a.itemsize
        b_low = b.ctypes.data + min(0, (n - 1) * b.strides[0])
        b_high = b.ctypes.data + max(0, (n - 1) * b.strides[0]) + b.itemsize
        same = a.ctypes.data == b.ctypes.data and a.strides[0] == b.strides[0]
        if not (a_high <= b_low or b_high <= a_low or same):
            b = b.copy()  # (NumPy's slices add from a copy too)
        for k in range(start):
            a[k] += b[k]
        for k in range(stop, n):
            a[k] += b[k]
    return entries
'''}
GATHER_UNCOMPILED = frozenset({"zeros_outside", "zeros_outside_numba", "gather_start",
                               "gather_start_numba", "add_outside", "add_outside_numba"})
