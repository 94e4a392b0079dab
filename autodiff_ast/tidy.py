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


def _pure(stmt):
    return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
        isinstance(stmt.targets[0], (gast.Name, gast.Tuple)) and \
        all(isinstance(e, gast.Name) for e in (
            stmt.targets[0].elts if isinstance(stmt.targets[0], gast.Tuple) else []))


def free_names(stmts):
    """Names read by `stmts` before any of them binds them (what the block needs from outside)."""
    defined, free = set(), []
    for stmt in stmts:
        for n in stmt_uses(stmt):
            if n not in defined and n not in free:
                free.append(n)
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


def _inline_once(stmts, keep, temps):
    for i, stmt in enumerate(stmts):
        if not (isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name)):
            continue
        tmp = stmt.targets[0].id
        if tmp not in temps or tmp in keep:
            continue
        reads = set(_names(stmt.value))
        uses = [j for j in range(i + 1, len(stmts)) if tmp in stmt_uses(stmts[j])]
        count = sum(stmt_uses(stmts[j]).count(tmp) for j in uses)
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
                        for d in stmt_defs(stmts[k]))
        if redefined:
            continue
        target_stmt = stmts[uses[0]]
        if isinstance(target_stmt, (gast.For, gast.While, gast.If, gast.With)):
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
        second.value = simplify(gast.BinOp(left=first.value, op=gast.Add(), right=value.right))
        del stmts[i]
        return True
    return False


def tidy_block(stmts, keep=(), temps=None):
    """Inline single-use temporaries and drop dead stores in a straight block.

    `keep` names values needed after the block; `temps` is the Namer (or set) of temporaries
    that may disappear.
    """
    temps = getattr(temps, "temps", temps) or set()
    stmts = list(stmts)
    keep = set(keep)
    while True:
        stmts = eliminate_dead(stmts, keep)
        if not (_inline_once(stmts, keep, temps) or _fuse_accumulation(stmts)):
            return stmts
