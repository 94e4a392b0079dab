"""Tidying: make generated code small and readable without changing what it computes.

Two passes over a straight block of statements, repeated until nothing changes:
inline a temporary that is used exactly once back into its use (undoing the one-primitive-per-
statement form where nothing else needs the intermediate value), and drop assignments whose
value nobody reads (dead stores).

>>> import gast
>>> from autodiff_ast.naming import Namer
>>> from autodiff_ast.templates import unparse
>>> namer = Namer()
>>> t = namer.temp("div")
>>> block = gast.parse(f"{t} = x / 2.0\\ny = np.tanh({t})\\nz = y + 1").body
>>> [unparse(s) for s in tidy_block(block, keep={"y"}, temps=namer)]
['y = np.tanh(x / 2.0)']
"""

from __future__ import annotations

import gast

from .templates import simplify


def _names(node, ctx=None):
    return [n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            (ctx is None or isinstance(n.ctx, ctx))]


def stmt_defs(stmt):
    """Names a statement (re)binds or updates in place."""
    if isinstance(stmt, gast.Assign):
        out = []
        for target in stmt.targets:
            if isinstance(target, gast.Name):
                out.append(target.id)
            elif isinstance(target, gast.Tuple):
                out += [e.id for e in target.elts if isinstance(e, gast.Name)]
            elif isinstance(target, gast.Subscript):
                out += _names(target.value)[:1]
        for n in gast.walk(stmt.value):  # `v = t.pop()` changes t too
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and \
                    n.func.attr == "pop" and isinstance(n.func.value, gast.Name):
                out.append(n.func.value.id)
        return out
    if isinstance(stmt, gast.AugAssign):
        base = stmt.target
        while isinstance(base, (gast.Subscript, gast.Attribute)):
            base = base.value
        return [base.id] if isinstance(base, gast.Name) else []
    if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call):
        func = stmt.value.func
        if isinstance(func, gast.Attribute) and func.attr == "at" and stmt.value.args:
            return _names(stmt.value.args[0])[:1]
        if isinstance(func, gast.Attribute) and func.attr in ("pop", "append") and \
                isinstance(func.value, gast.Name):
            return [func.value.id]  # changes the list (and what len() of it gives)
    if isinstance(stmt, (gast.For, gast.While, gast.If, gast.With)):
        return _names(stmt, gast.Store)
    return []


def stmt_uses(stmt):
    """Names a statement reads (for in-place updates, the updated array too)."""
    if isinstance(stmt, gast.Assign):
        uses = _names(stmt.value)
        for target in stmt.targets:
            if isinstance(target, gast.Subscript):
                uses += _names(target)
        return uses
    if isinstance(stmt, gast.AugAssign):
        return _names(stmt.target) + _names(stmt.value)
    return _names(stmt, gast.Load)


def _mutates(node):
    """Whether evaluating `node` changes a list (pop/append): never moved nor dropped."""
    return any(isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and
               n.func.attr in ("pop", "append") for n in gast.walk(node))


def _pure(stmt):
    return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
        not _mutates(stmt.value) and \
        isinstance(stmt.targets[0], (gast.Name, gast.Tuple)) and \
        all(isinstance(e, gast.Name) for e in (
            stmt.targets[0].elts if isinstance(stmt.targets[0], gast.Tuple) else []))


def free_names(stmts, maybe_unbound=False):
    """Names read by `stmts` before any of them binds them (what the block needs from outside).

    With maybe_unbound=True a name bound only inside a loop or a branch is not taken as bound
    after it: the loop may run zero times (a backward sweep's ``x = x_tape.pop()`` then never
    runs), so a later read still needs the value from outside.
    """
    defined, free = set(), []
    for stmt in stmts:
        for n in stmt_uses(stmt):
            if n not in defined and n not in free:
                free.append(n)
        if not (maybe_unbound and isinstance(stmt, (gast.For, gast.While, gast.If))):
            defined.update(stmt_defs(stmt))
    return free


def eliminate_dead(stmts, keep):
    """Drop pure assignments whose targets are never read later nor kept."""
    live = set(keep)
    out = []
    for stmt in reversed(stmts):
        defs = stmt_defs(stmt)
        if _pure(stmt) and not any(d in live for d in defs):
            continue
        if _pure(stmt):
            live.difference_update(defs)
        live.update(stmt_uses(stmt))
        out.append(stmt)
    out.reverse()
    return out


class _Replace(gast.NodeTransformer):
    def __init__(self, target, value):
        self.target, self.value, self.done = target, value, False

    def visit_Name(self, node):
        if node.id == self.target and isinstance(node.ctx, gast.Load) and not self.done:
            self.done = True
            return self.value
        return node


def _copy_back(stmt, tmp, value):
    """``x = tmp`` where tmp was set by ``tmp = x``: x keeps its value, nothing changes."""
    return isinstance(stmt, gast.Assign) and isinstance(stmt.value, gast.Name) and \
        stmt.value.id == tmp and isinstance(stmt.targets[0], gast.Name) and \
        isinstance(value, gast.Name) and value.id == stmt.targets[0].id


def _drop_self_copies(stmts):
    return [s for s in stmts if not (isinstance(s, gast.Assign) and
                                     isinstance(s.targets[0], gast.Name) and
                                     isinstance(s.value, gast.Name) and
                                     s.value.id == s.targets[0].id)]


def _cheap(expr):
    """One arithmetic operation on names and constants (worth repeating, not storing)."""
    atoms = (gast.Name, gast.Constant)
    if isinstance(expr, gast.Constant):
        return True
    if isinstance(expr, gast.BinOp) and not isinstance(expr.op, gast.MatMult):
        return isinstance(expr.left, atoms) and isinstance(expr.right, atoms)
    if isinstance(expr, gast.UnaryOp):
        return isinstance(expr.operand, atoms)
    if isinstance(expr, gast.Attribute):
        return isinstance(expr.value, gast.Name)
    return False


_MAX_INLINE_DEPTH = 24


def _depth(node):
    """How deeply expressions nest in `node` (iteratively: the tree may be very deep)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in gast.iter_child_nodes(current))
    return deepest


def _inline_once(stmts, keep, temps):
    # Each statement's reads and writes, computed once per call: nothing changes `stmts`
    # until an inlining is done, and then the function returns.
    all_uses = [stmt_uses(s) for s in stmts]
    all_defs = [None] * len(stmts)

    def defs_of(k):
        if all_defs[k] is None:
            all_defs[k] = stmt_defs(stmts[k])
        return all_defs[k]
    for i, stmt in enumerate(stmts):
        if not (isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name)):
            continue
        tmp = stmt.targets[0].id
        if tmp not in temps or tmp in keep or _mutates(stmt.value):
            continue
        reads = set(_names(stmt.value))
        if tmp in reads:  # `v = f(v)` updates v: inlining it would substitute forever
            continue
        if _depth(stmt.value) > _MAX_INLINE_DEPTH:
            continue  # long chains stay statements: readable, and no recursion limits hit
        uses = [j for j in range(i + 1, len(stmts)) if tmp in all_uses[j]]
        count = sum(all_uses[j].count(tmp) for j in uses)
        if count != 1:
            if count == 0:
                continue
            # A copy of a name can replace every use; one cheap operation may be repeated.
            if not (isinstance(stmt.value, gast.Name) or (count <= 3 and _cheap(stmt.value))):
                continue
        if not uses:
            continue
        last = uses[-1]
        redefined = any(d in reads or d == tmp for k in range(i + 1, last)
                        for d in defs_of(k)
                        if not _copy_back(stmts[k], tmp, stmt.value))
        if redefined:
            continue
        if len(uses) > 1 and any(isinstance(stmts[j], (*_CONTROL, gast.With)) for j in uses):
            continue  # a repeated cheap value is never pushed into loops or branches
        target_stmt = stmts[uses[0]]
        if isinstance(target_stmt, (gast.While, gast.With)):
            continue
        if isinstance(target_stmt, (gast.For, gast.If)):
            # Only into the header, which runs once: never into the body.
            header = target_stmt.iter if isinstance(target_stmt, gast.For) else target_stmt.test
            inner = target_stmt.body + target_stmt.orelse
            if count != 1 or tmp in _names(gast.Module(body=inner, type_ignores=[])) or \
                    tmp not in _names(header):
                continue
        # A call to a generated or user function keeps its own line, unless its one use is a
        # plain copy into another name.
        if isinstance(stmt.value, gast.Call) and isinstance(stmt.value.func, gast.Name) and not (
                isinstance(target_stmt, gast.Assign) and isinstance(target_stmt.value, gast.Name)):
            continue
        if isinstance(target_stmt, (gast.AugAssign,)) and tmp in _names(target_stmt.target):
            continue
        if isinstance(target_stmt, gast.Assign) and any(
                tmp in _names(t) for t in target_stmt.targets):
            continue
        if isinstance(target_stmt, (gast.For, gast.If)):
            replacer = _Replace(tmp, _copy(stmt.value))
            if isinstance(target_stmt, gast.For):
                target_stmt.iter = replacer.visit(target_stmt.iter)
            else:
                target_stmt.test = simplify(replacer.visit(target_stmt.test))
            del stmts[i]
            return True
        for j in uses:
            replacer = _Replace(tmp, stmt.value)
            while True:
                replacer.done = False
                replacer.value = _copy(stmt.value)
                stmts[j] = replacer.visit(stmts[j])
                if not replacer.done:
                    break
            if isinstance(stmts[j], (gast.Assign, gast.AugAssign)):
                stmts[j].value = simplify(stmts[j].value)
        del stmts[i]
        return True
    return False


def _copy(node):
    import copy
    return copy.deepcopy(node)


def _fuse_accumulation(stmts):
    """``v = a`` directly followed by ``v = v + b`` becomes ``v = a + b``."""
    for i in range(len(stmts) - 1):
        first, second = stmts[i], stmts[i + 1]
        if not (isinstance(first, gast.Assign) and isinstance(second, gast.Assign)):
            continue
        t1, t2 = first.targets[0], second.targets[0]
        if not (isinstance(t1, gast.Name) and isinstance(t2, gast.Name) and t1.id == t2.id):
            continue
        value = second.value
        if not (isinstance(value, gast.BinOp) and isinstance(value.op, gast.Add) and
                isinstance(value.left, gast.Name) and value.left.id == t1.id and
                t1.id not in _names(value.right) and t1.id not in _names(first.value)):
            continue
        if _depth(first.value) > _MAX_INLINE_DEPTH:
            continue  # a long sum stays several statements
        second.value = simplify(gast.BinOp(left=first.value, op=gast.Add(), right=value.right))
        del stmts[i]
        return True
    return False


def _all_reads(stmts):
    out = []
    for stmt in stmts:
        out += stmt_uses(stmt) if not isinstance(stmt, _CONTROL) else _names(stmt, gast.Load)
    return out


_CONTROL = (gast.For, gast.While, gast.If)


def _tidy_nested(stmts, keep, temps):
    """Tidy the bodies of loops and branches: inside them only names nobody outside reads,
    and nobody inside reads before they are set (loop-carried values), may disappear."""
    for stmt in stmts:
        if not isinstance(stmt, _CONTROL):
            continue
        for field in ("body", "orelse"):
            body = getattr(stmt, field)
            if not body:
                continue
            outside = set(keep)
            for other in stmts:
                if other is not stmt:
                    outside.update(_all_reads([other]))
            if isinstance(stmt, (gast.For, gast.While)):
                outside.update(_names(stmt.iter if isinstance(stmt, gast.For) else stmt.test))
                # Values read in the body may come from the previous iteration: those read
                # before they are set (in the body's order) must stay.
                outside.update(_carried(body))
            else:
                outside.update(_names(stmt.test))
            other_field = stmt.orelse if field == "body" else stmt.body
            outside.update(_all_reads(other_field or []))
            new = tidy_block(body, keep=outside, temps=temps)
            setattr(stmt, field, new or [gast.Pass()])


def _carried(body):
    """Names a loop body reads before it sets them: they carry a value between iterations."""
    seen_def, carried = set(), set()

    def walk(stmts):
        for stmt in stmts:
            if isinstance(stmt, _CONTROL):
                header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
                for n in _names(header):
                    if n not in seen_def:
                        carried.add(n)
                walk(stmt.body)
                walk(stmt.orelse)
                seen_def.update(_names(stmt, gast.Store))
                continue
            for n in stmt_uses(stmt):
                if n not in seen_def:
                    carried.add(n)
            seen_def.update(stmt_defs(stmt))
    walk(body)
    return carried


def _single_list_temps(body, temps):
    """Temporaries defined in `body` and read only after their definition, in `body`."""
    out = set()
    defined = {}
    for i, stmt in enumerate(body):
        if isinstance(stmt, _CONTROL):
            continue
        for d in stmt_defs(stmt):
            defined.setdefault(d, []).append(i)
    for name, positions in defined.items():
        if name not in temps or len(positions) != 1:
            continue
        first = positions[0]
        ok = True
        for j, stmt in enumerate(body):
            reads = _all_reads([stmt])
            if name in reads and (j <= first or isinstance(stmt, _CONTROL)):
                ok = False
        if ok:
            out.add(name)
    return out


def _tidy_branches(stmts):
    """``if c: pass else: B`` becomes ``if not c: B``; an if with nothing in it goes."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, gast.If):
            empty_body = all(isinstance(x, gast.Pass) for x in stmt.body)
            empty_else = all(isinstance(x, gast.Pass) for x in stmt.orelse)
            if empty_body and empty_else:
                continue
            if empty_body:
                stmt.test = simplify(gast.UnaryOp(op=gast.Not(), operand=stmt.test))
                stmt.body, stmt.orelse = stmt.orelse, []
            elif empty_else:
                stmt.orelse = []
        out.append(stmt)
    return out


def tidy_block(stmts, keep=(), temps=None):
    """Inline single-use temporaries and drop dead stores in a straight block.

    `keep` names values needed after the block; `temps` is the Namer (or set) of temporaries
    that may disappear.
    """
    temps = getattr(temps, "temps", temps) or set()
    stmts = list(stmts)
    keep = set(keep)
    while True:
        stmts = _drop_self_copies(eliminate_dead(stmts, keep))
        if not (_inline_once(stmts, keep, temps) or _fuse_accumulation(stmts)):
            _tidy_nested(stmts, keep, temps)
            return _tidy_branches(stmts)
