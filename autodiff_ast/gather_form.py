"""Stencil adjoints in gather form: scatter-adds at several offsets become one gathering loop.

The adjoint of a stencil loop such as ``un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])``
is, statement by statement, a *scatter*: iteration ``i`` adds into ``u_bar[i - 1]``,
``u_bar[i]`` and ``u_bar[i + 1]``. Each entry is written by three iterations, a memory
dependence from one iteration to the next that keeps LLVM from vectorizing the loop and makes
every add a load and a store (numba-notes.md: scatter-form stencil adjoints ran at 9-11x the
primal, the gather form at ~2x). In *gather* form, the loop runs over the entries written and
each entry collects what the iterations that touch it would have added::

    for j in range(0, n):
        u_bar_j = u_bar[j]
        if j >= 2:
            u_bar_j += un_bar[j - 1] * c
        if j >= 1 and j < n - 1:
            add_3_bar_3 = un_bar[j]
            u_bar_j += -(add_3_bar_3 * c) * 2.0 + add_3_bar_3
        if j < n - 2:
            u_bar_j += un_bar[j + 1] * c
        u_bar[j] = u_bar_j

The guards keep exactly the iterations the original loop ran (``j - k`` is the iteration that
wrote ``u_bar[j]`` at offset ``k``), and each entry receives its terms in the order the original
loop added them, into a local read from the entry once and written back once, so the result is
the same to the last bit (for a float32 adjoint the local may hold float64 sums, rounded once
at the store instead of at each term). The rest of the loop body (the other
adjoints, resets like ``un_bar[i] = 0.0``) stays in the original loop, which now runs after the
gathering one: that one reads the values before any of those writes, as every original
iteration did at its own index. Under Numba, ``codegen/index_splitting.py`` then runs the
gathering loop as a head, a branch-free interior and a tail (the guards decided per part).

When the rewrite holds (:func:`gather_loop` checks each condition and leaves the loop alone
otherwise): a ``for i in range(...)`` loop of step 1 or -1 whose body is straight-line; the
scatters are ``A[i + k] += e`` (the loop index, plus or minus a constant, at one position of
the index; the other positions loop-invariant) with at least two different offsets; ``A`` is
neither read nor otherwise written in the loop; ``e`` and the local values it needs are
recomputable (assigned once, before their use, from expressions without side effects); and an
array those values read which the loop also writes is written and read only at index ``i``,
each read before the write. The rewrite runs on backward code only, where an array written in
place has no other name (the reverse sweep copies an adjoint before it writes into it, and the
front end refuses in-place writes to shared memory), so two names never alias one memory.

>>> import gast
>>> from autodiff_ast.naming import Namer
>>> from autodiff_ast.templates import unparse
>>> loop = gast.parse('''
... for i in range(1, n - 1):
...     g = y_bar[i]
...     y_bar[i] = 0.0
...     x_bar[i - 1] += g
...     x_bar[i + 1] += g * w[i]
... ''').body[0]
>>> for stmt in gather_loop(loop, Namer({"i", "g", "n", "x_bar", "y_bar", "w"})):
...     print(unparse(stmt))
for j in range(0, n):
    x_bar_j = x_bar[j]
    if j >= 2:
        g_2 = y_bar[j - 1]
        x_bar_j += g_2 * w[j - 1]
    if j < n - 2:
        g_3 = y_bar[j + 1]
        x_bar_j += g_3
    x_bar[j] = x_bar_j
for i in range(1, n - 1):
    g = y_bar[i]
    y_bar[i] = 0.0
"""

from __future__ import annotations

import gast

from .templates import const_value, copy_marks, copy_tree, name, to_expr, unparse
from .tidy import _names

__all__ = ["gather_loop", "gather_loops"]

_PURE_CALLS = {"abs", "float", "int", "min", "max", "len"}
_PURE_MODULES = ("np", "math")
_EXPR_NODES = (gast.Name, gast.Constant, gast.BinOp, gast.UnaryOp, gast.Compare, gast.BoolOp,
               gast.IfExp, gast.Subscript, gast.Attribute, gast.Tuple, gast.Slice,
               gast.operator, gast.unaryop, gast.cmpop, gast.boolop, gast.expr_context,
               gast.Call, gast.keyword)


def gather_loops(stmts, namer, marked_only=False):
    """Rewrite, in the list `stmts` (it changes in place), every loop :func:`gather_loop`
    can turn into gather form (with marked_only=True, only loops marked ``backward``); nested
    blocks are the caller's to visit. Returns whether anything changed."""
    changed = False
    k = 0
    while k < len(stmts):
        stmt = stmts[k]
        new = gather_loop(stmt, namer) if isinstance(stmt, gast.For) and (
            not marked_only or getattr(stmt, "backward", False)) else None
        if new:
            stmts[k:k + 1] = new
            changed = True
            k += len(new)
        else:
            k += 1
    return changed


def gather_loop(loop, namer):
    """``[gathering loop, rest of the loop]`` for a stencil scatter loop, else None."""
    shape = _range_shape(loop)
    if shape is None:
        return None
    index, lo, hi, step = shape
    body = loop.body
    if not all(_is_marker(s) or isinstance(s, (gast.Assign, gast.AugAssign)) and
               _calls_ok(s) for s in body):
        return None
    stored = _stored_names(body)
    if index in stored or any(n in stored for e in (lo.base, hi.base) if e is not None
                              for n in _load_names(e)):
        return None
    scatters = []  # (position, statement, target array, offset, index position)
    for pos, stmt in enumerate(body):
        found = _scatter(stmt, index, stored)
        if found is not None:
            scatters.append((pos,) + found)
    targets = {s[2] for s in scatters}
    if not any(len({s[3] for s in scatters if s[2] == a}) >= 2 for a in targets):
        return None
    scatter_stmts = {id(s[1]) for s in scatters}
    for stmt in body:  # the targets appear nowhere but as the scatters' targets
        names = _all_names(stmt.value) if id(stmt) in scatter_stmts else _all_names(stmt)
        if id(stmt) in scatter_stmts:
            names |= _all_names(stmt.target.slice)
        if names & targets:
            return None
    if targets & (_all_names(loop.iter) | {index}):
        return None
    defs = _single_defs(body)
    needed = {}  # position of a scatter -> positions of the definitions it needs
    for pos, stmt, *_ in scatters:
        positions = _closure(stmt.value, pos, defs, stored, body)
        if positions is None or not _pure(stmt.value):
            return None
        needed[pos] = positions
    if not _reads_before_writes(body, needed, index):
        return None
    return _rewrite(loop, index, lo, hi, step, scatters, needed, namer)


# ---------------------------------------------------------------- the loop and its scatters
class _Bound:
    """An integer expression as ``base + offset`` (base None: the constant `offset`)."""

    def __init__(self, base, offset):
        self.base, self.offset = base, offset

    @classmethod
    def of(cls, node):
        value = _int_const(node)
        if value is not None:
            return cls(None, value)
        if isinstance(node, gast.BinOp) and isinstance(node.op, (gast.Add, gast.Sub)):
            right = _int_const(node.right)
            if right is not None:
                inner = cls.of(node.left)
                sign = 1 if isinstance(node.op, gast.Add) else -1
                return cls(inner.base, inner.offset + sign * right)
        return cls(node, 0)

    def plus(self, k):
        return _Bound(self.base, self.offset + k)

    def expr(self):
        if self.base is None:
            return to_expr(self.offset)
        if self.offset == 0:
            return copy_tree(self.base)
        op = gast.Add() if self.offset > 0 else gast.Sub()
        return gast.BinOp(left=copy_tree(self.base), op=op, right=to_expr(abs(self.offset)))


def _range_shape(loop):
    """(index, lo, hi, step) of ``for index in range(...)`` (the iterations are lo..hi-1 as
    _Bounds; step 1 or -1), else None."""
    if loop.orelse or not isinstance(loop.target, gast.Name):
        return None
    call = loop.iter
    if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Name) and
            call.func.id == "range" and not call.keywords and 1 <= len(call.args) <= 3):
        return None
    if not all(_pure(a) for a in call.args):
        return None
    args = list(call.args)
    if len(args) == 1:
        args.insert(0, to_expr(0))
    step = _int_const(args[2]) if len(args) == 3 else 1
    start, stop = _Bound.of(args[0]), _Bound.of(args[1])
    if step == 1:
        return loop.target.id, start, stop, 1
    if step == -1:  # start, start - 1, ..., stop + 1
        return loop.target.id, stop.plus(1), start.plus(1), -1
    return None


def _offset(node, index):
    """k when `node` is ``index``, ``index + k``, ``index - k`` or ``k + index``."""
    if isinstance(node, gast.Name) and node.id == index:
        return 0
    if isinstance(node, gast.BinOp) and isinstance(node.op, (gast.Add, gast.Sub)):
        if isinstance(node.left, gast.Name) and node.left.id == index:
            k = _int_const(node.right)
            if k is not None:
                return k if isinstance(node.op, gast.Add) else -k
        if isinstance(node.op, gast.Add) and isinstance(node.right, gast.Name) and \
                node.right.id == index:
            return _int_const(node.left)
    return None


def _scatter(stmt, index, stored):
    """(statement, array, offset, position in the index) for ``A[..., index + k, ...] += e``
    with the other positions loop-invariant, else None."""
    if not (isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, gast.Add) and
            isinstance(stmt.target, gast.Subscript) and
            isinstance(stmt.target.value, gast.Name)):
        return None
    parts = stmt.target.slice.elts if isinstance(stmt.target.slice, gast.Tuple) else \
        [stmt.target.slice]
    found = None
    for pos, part in enumerate(parts):
        k = _offset(part, index)
        if k is not None and found is None:
            found = (k, pos)
        elif index in _all_names(part) or _all_names(part) & stored or not _pure(part):
            return None
    if found is None:
        return None
    return stmt, stmt.target.value.id, found[0], found[1]


# ---------------------------------------------------------------- what the scatters need
def _single_defs(body):
    """name -> position of its ``name = expr`` in `body`, for the names bound exactly once
    and only that way (a name bound twice, by unpacking or by ``+=`` is absent)."""
    count = {}
    for pos, stmt in enumerate(body):
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name):
            count.setdefault(stmt.targets[0].id, []).append(pos)
        else:
            for n in _stored_names([stmt]):
                count.setdefault(n, []).extend([-1, -1])  # never a single definition
    return {n: p[0] for n, p in count.items() if len(p) == 1}


def _closure(expr, before, defs, stored, body):
    """Positions of the definitions `expr` (at position `before`) needs, each assigned once
    before its use from a pure expression; None when one is not."""
    out, todo = set(), [(expr, before)]
    while todo:
        node, at = todo.pop()
        for n in _load_names(node):
            if n not in stored:
                continue
            pos = defs.get(n)
            if pos is None or pos >= at:
                return None
            if pos not in out:
                value = body[pos].value
                if not _pure(value):
                    return None
                out.add(pos)
                todo.append((value, pos))
    return out


def _reads_before_writes(body, needed, index):
    """Arrays the recomputed expressions read that the loop also writes: written and read
    only at ``[index]`` (the same index everywhere), every read before every write."""
    writes = {}  # array -> [(position, index text)]
    for pos, stmt in enumerate(body):
        targets = stmt.targets if isinstance(stmt, gast.Assign) else [getattr(stmt, "target",
                                                                              None)]
        for target in targets:
            for node in _walk_targets(target):
                if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name):
                    writes.setdefault(node.value.id, []).append((pos, node.slice))
    for pos, positions in needed.items():
        exprs = [(pos, body[pos].value)] + [(p, body[p].value) for p in positions]
        for at, expr in exprs:
            for node in gast.walk(expr):
                if not (isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name)
                        and node.value.id in writes):
                    continue
                if not _plain_index(node.slice, index):
                    return False
                for wpos, wslice in writes[node.value.id]:
                    if wpos <= at or not _plain_index(wslice, index) or \
                            unparse(wslice) != unparse(node.slice):
                        return False
    return True


def _plain_index(node, index):
    parts = node.elts if isinstance(node, gast.Tuple) else [node]
    hits = [p for p in parts if isinstance(p, gast.Name) and p.id == index]
    return len(hits) == 1 and all(index not in _all_names(p) for p in parts if p not in hits)


# ---------------------------------------------------------------- the rewrite
def _rewrite(loop, index, lo, hi, step, scatters, needed, namer):
    body = loop.body
    offsets = [s[3] for s in scatters]
    kmin, kmax = min(offsets), max(offsets)
    j = namer.fresh("j")
    # Each entry gets its terms in the order the original loop added them: by iteration
    # (ascending for step 1, descending for step -1), then in statement order.
    order = sorted(set(offsets), reverse=(step == 1))
    gather_body = []
    for k in order:
        group = [s for s in scatters if s[3] == k]
        positions = sorted(set().union(*(needed[s[0]] for s in group)))
        renames = {}
        stmts = []
        for pos in positions:
            stmt = body[pos]
            old = stmt.targets[0].id
            renames[old] = namer.temp(old)
            stmts.append(_shifted(stmt, index, j, k, renames, new_target=renames[old]))
        for _pos, stmt, _array, _k, where in group:
            new = _shifted(stmt, index, j, k, renames)
            parts = new.target.slice.elts if isinstance(new.target.slice, gast.Tuple) else None
            if parts is None:
                new.target.slice = name(j)
            else:
                parts[where] = name(j)
            stmts.append(new)
        tests = []  # iteration j - k ran: lo <= j - k < hi (the range of j covers the rest)
        if k != kmin:
            tests.append(_compare(j, gast.GtE(), lo.plus(k)))
        if k != kmax:
            tests.append(_compare(j, gast.Lt(), hi.plus(k)))
        if tests:
            test = tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)
            gather_body.append(gast.If(test=test, body=stmts, orelse=[]))
        else:
            gather_body.extend(stmts)
    gather_body = _accumulated(gather_body, namer)
    iter_ = gast.Call(func=name("range"), args=[lo.plus(kmin).expr(), hi.plus(kmax).expr()],
                      keywords=[])
    gathering = gast.For(target=gast.Name(id=j, ctx=gast.Store(), annotation=None,
                                          type_comment=None),
                         iter=iter_, body=gather_body, orelse=[], type_comment=None)
    scattered = {id(s[1]) for s in scatters}
    rest = [s for s in body if id(s) not in scattered]
    remaining = gast.For(target=loop.target, iter=loop.iter, body=rest or [gast.Pass()],
                         orelse=[], type_comment=None)
    return [copy_marks(loop, gathering), copy_marks(loop, remaining)]


def _accumulated(gather_body, namer):
    """The gathering loop's body with each entry's terms added into a local, read from the
    entry once before them and written back once after (``u_bar_j = u_bar[j]`` ...
    ``u_bar_j += t`` ... ``u_bar[j] = u_bar_j``) instead of a load and a store per term:
    the same additions in the same order. The 1-D heat equation's gradient, 1000 points x
    500 steps: 1.36-1.45 ms with three updates of ``u_bar[j]`` per entry, 1.28-1.32 ms with
    the local (a Numba micro-benchmark of the generated loop). An entry that is a row (``A[j]``
    of a matrix) is a view: ``+=`` on it writes the row in place as before, and the final
    store copies the row onto itself."""
    updates = {}  # (array, index text) -> the local its terms go into
    order = []

    def visit(stmts):
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                visit(stmt.body)
            elif isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Subscript) \
                    and isinstance(stmt.target.value, gast.Name):
                key = (stmt.target.value.id, unparse(stmt.target.slice))
                if key not in updates:
                    updates[key] = (namer.fresh(f"{key[0]}_j"), stmt.target)
                    order.append(key)
                local = updates[key][0]
                stmt.target = gast.Name(id=local, ctx=gast.Store(), annotation=None,
                                        type_comment=None)
    visit(gather_body)
    head, tail = [], []
    for key in order:
        local, target = updates[key]
        entry = copy_tree(target)
        entry.ctx = gast.Load()
        head.append(gast.Assign(targets=[gast.Name(id=local, ctx=gast.Store(), annotation=None,
                                                   type_comment=None)],
                                value=entry, type_comment=None))
        store = copy_tree(target)
        store.ctx = gast.Store()
        tail.append(gast.Assign(targets=[store], value=name(local), type_comment=None))
    return head + gather_body + tail


def _shifted(stmt, index, j, k, renames, new_target=None):
    """A copy of `stmt` at iteration ``j - k``: `index` + c becomes j + (c - k), names in
    `renames` their new names."""
    new = copy_tree(stmt)

    class Shift(gast.NodeTransformer):
        def visit_BinOp(self, node):
            c = _offset(node, index)
            if c is not None:
                return _at(j, c - k)
            return self.generic_visit(node)

        def visit_Name(self, node):
            if node.id == index and isinstance(node.ctx, gast.Load):
                return _at(j, -k)
            if node.id in renames and isinstance(node.ctx, gast.Load):
                return name(renames[node.id])
            return node

    if isinstance(new, gast.Assign):
        new.value = Shift().visit(new.value)
        if new_target is not None:
            new.targets = [gast.Name(id=new_target, ctx=gast.Store(), annotation=None,
                                     type_comment=None)]
    else:
        new.value = Shift().visit(new.value)
        new.target = Shift().visit(new.target)
    return new


# ---------------------------------------------------------------- small helpers
def _is_marker(stmt):
    from codegen.emit import is_marker
    return is_marker(stmt)


def _pure(expr):
    """No side effects: arithmetic, comparisons, subscripts, attribute reads, ``.copy()`` and
    calls of NumPy/math functions or a few builtins."""
    for node in gast.walk(expr):
        if not isinstance(node, _EXPR_NODES):
            return False
        if isinstance(node, gast.Call):
            func = node.func
            if isinstance(func, gast.Name):
                if func.id not in _PURE_CALLS:
                    return False
            elif not (isinstance(func, gast.Attribute) and (
                    isinstance(func.value, gast.Name) and func.value.id in _PURE_MODULES or
                    func.attr == "copy" and not node.args and not node.keywords)):
                return False
    return True


def _calls_ok(stmt):
    """Calls without side effects on arrays: pure ones and a list's ``pop()`` (a tape)."""
    for node in gast.walk(stmt):
        if isinstance(node, gast.Call) and not _pure(node):
            func = node.func
            if not (isinstance(func, gast.Attribute) and func.attr == "pop" and
                    isinstance(func.value, gast.Name) and not node.args and
                    not node.keywords):
                return False
    return True


def _stored_names(stmts):
    out = set()
    for stmt in stmts:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
                out.add(node.id)
        if isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Name):
            out.add(stmt.target.id)
    return out


def _load_names(node):
    return set(_names(node, gast.Load))


def _all_names(node):
    return set(_names(node))


def _int_const(node):
    value = const_value(node)
    return value if type(value) is int else None


def _walk_targets(target):
    if target is None:
        return []
    if isinstance(target, (gast.Tuple, gast.List)):
        return [n for elt in target.elts for n in _walk_targets(elt)]
    return [target]


def _at(j, c):
    return _Bound(name(j), c).expr()


def _compare(j, op, bound):
    return gast.Compare(left=name(j), ops=[op], comparators=[bound.expr()])

