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

from collections import deque

import gast

from codegen.fused_updates import ADD_HELPERS

from .templates import copy_tree, simplify

_AST = gast.AST


def _walk(node):
    """Every node under `node`, breadth first: the order of ``gast.walk``, without its
    per-node generator overhead (the passes below walk statements many thousand times)."""
    todo = deque((node,))
    pop, push = todo.popleft, todo.append
    while todo:
        current = pop()
        yield current
        for field in current._fields:
            value = getattr(current, field, None)
            if isinstance(value, _AST):
                push(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, _AST):
                        push(item)


def _children(node):
    """The direct child nodes of `node` (as ``gast.iter_child_nodes``)."""
    out = []
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, _AST):
            out.append(value)
        elif isinstance(value, list):
            out.extend(item for item in value if isinstance(item, _AST))
    return out


def _names(node, ctx=None):
    """Identifiers of the Name nodes under `node` (load or store: `ctx`), breadth first."""
    name = gast.Name
    if ctx is None:
        return [n.id for n in _walk(node) if type(n) is name]
    return [n.id for n in _walk(node) if type(n) is name and isinstance(n.ctx, ctx)]


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
        return out + _popped(stmt.value)  # `v = t.pop()` changes t too
    if isinstance(stmt, gast.AugAssign):
        base = stmt.target
        while isinstance(base, (gast.Subscript, gast.Attribute)):
            base = base.value
        return ([base.id] if isinstance(base, gast.Name) else []) + _popped(stmt.value)
    if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call):
        func = stmt.value.func
        if isinstance(func, gast.Attribute) and func.attr == "at" and stmt.value.args:
            return _names(stmt.value.args[0])[:1]
        if isinstance(func, gast.Attribute) and func.attr in ("pop", "append") and \
                isinstance(func.value, gast.Name):
            return [func.value.id]  # changes the list (and what len() of it gives)
    if isinstance(stmt, gast.Expr):  # `g.pop() if g else 0.0`
        return _popped(stmt.value)
    if isinstance(stmt, (gast.For, gast.While, gast.If, gast.With)):
        return _names(stmt, gast.Store)
    return []


def _popped(node):
    """Lists that evaluating `node` pops from (``t.pop()``)."""
    return [n.func.value.id for n in _walk(node)
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and
            n.func.attr == "pop" and isinstance(n.func.value, gast.Name)]


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
    return _loads(stmt)


def _loads(node):
    """Names read anywhere under `node`: the loads, and the names ``x += ...`` updates
    (their Name is a store, but the statement reads the old value: a loop's ``x_bar += c``
    reads the ``x_bar`` set before the loop)."""
    names = _names(node, gast.Load)
    seen = set(names)
    for inner in _walk(node):
        if type(inner) is gast.AugAssign and type(inner.target) is gast.Name and \
                inner.target.id not in seen:
            seen.add(inner.target.id)
            names.append(inner.target.id)
    return names


def _mutates(node):
    """Whether evaluating `node` changes a list (pop/append): never moved nor dropped."""
    return any(isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and
               n.func.attr in ("pop", "append") for n in _walk(node))


def has_effects(core, seen=None):
    """Whether calling the user's function `core` (a CoreFunction) may raise or print: its
    body, or a function of the user's it calls, holds a raise or a print."""
    known = getattr(core, "effects", None)
    if known is not None:
        return known
    seen = set() if seen is None else seen
    if id(core) in seen:
        return False  # (a recursive call: the other statements decide)
    seen.add(id(core))
    stack, found = list(core.body), False
    while stack and not found:
        stmt = stack.pop()
        if isinstance(stmt, (gast.If, gast.For, gast.While)):
            stack.extend(stmt.body + stmt.orelse)
            continue
        prim = getattr(stmt, "prim", None)
        found = prim is not None and (prim.kind in ("raise", "print") or (
            prim.kind == "user" and prim.callee is not None and
            has_effects(prim.callee, seen)))
    core.effects = found
    return found


def calls_effects(stmt):
    """Whether `stmt` calls a function of the user's that may raise or print: never dropped,
    even when nothing reads what it returns (a check in a helper still runs). A pass that
    rewrites such a statement marks the new one (``calls_effects = True``)."""
    if getattr(stmt, "calls_effects", False):
        return True
    prim = getattr(stmt, "prim", None)
    return prim is not None and prim.kind == "user" and prim.callee is not None and \
        has_effects(prim.callee)


def _pure(stmt):
    return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
        not _mutates(stmt.value) and not calls_effects(stmt) and \
        isinstance(stmt.targets[0], (gast.Name, gast.Tuple)) and \
        all(isinstance(e, gast.Name) for e in (
            stmt.targets[0].elts if isinstance(stmt.targets[0], gast.Tuple) else []))


def _exposed_uses(stmt):
    """Names a loop or branch may read before it sets them on the same path: the header's
    reads, then each body's reads not preceded by an assignment at the body's own level (one
    inside a nested branch or loop may not happen)."""
    header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
    exposed = set(_names(header))
    for body in (stmt.body, stmt.orelse):
        defined = set(_names(stmt.target)) if isinstance(stmt, gast.For) else set()
        for inner in body:
            if isinstance(inner, _CONTROL):
                exposed.update(n for n in _exposed_uses(inner) if n not in defined)
                continue
            exposed.update(n for n in stmt_uses(inner) if n not in defined)
            if isinstance(inner, gast.Assign):  # (not the list a `t.pop()` changes)
                defined.update(n for t in inner.targets if isinstance(t, (gast.Name, gast.Tuple))
                               for n in _names(t))
    return sorted(exposed)


def _pure_control(stmt):
    """A for loop or branch that only binds names (no in-place writes, no list changes, no
    while loops, which might not end): dropped whole when nothing reads what it binds."""
    if isinstance(stmt, gast.For):
        header = stmt.iter
    elif isinstance(stmt, gast.If):
        header = stmt.test
    else:
        return False
    return not _mutates(header) and all(
        isinstance(s, gast.Pass) or _pure(s) or _pure_control(s)
        for s in stmt.body + stmt.orelse)


def _scan(node):
    """In one breadth-first walk of an expression: its Name identifiers (as :func:`_names`),
    the lists it pops from (as :func:`_popped`), whether it changes a list (as
    :func:`_mutates`) and its nesting depth (as :func:`_depth`)."""
    names, popped, mutates, deepest = [], [], False, 0
    todo = deque(((node, 1),))
    pop, push = todo.popleft, todo.append
    name_type, call_type, attribute_type = gast.Name, gast.Call, gast.Attribute
    while todo:
        current, depth = pop()
        if depth > deepest:
            deepest = depth
        kind = type(current)
        if kind is name_type:
            names.append(current.id)
        elif kind is call_type:
            func = current.func
            if isinstance(func, attribute_type) and func.attr in ("pop", "append"):
                mutates = True
                if func.attr == "pop" and isinstance(func.value, name_type):
                    popped.append(func.value.id)
        depth += 1
        for field in current._fields:
            value = getattr(current, field, None)
            if isinstance(value, _AST):
                push((value, depth))
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, _AST):
                        push((item, depth))
    return names, popped, mutates, deepest


class _Facts:
    """What the passes need to know about each statement, computed once per statement.

    The passes of :func:`tidy_block` repeat until nothing changes, and each repetition used
    to walk every statement again. The facts are kept per statement object (the object itself
    is held, so its id is never reused) and a pass that changes a statement calls
    :meth:`forget` on it.
    """

    def __init__(self):
        self.memo = {}

    def _entry(self, stmt):
        entry = self.memo.get(id(stmt))
        if entry is None:
            entry = self.memo[id(stmt)] = [stmt, None, None, None, None, None, None, None]
        return entry

    def _value_scan(self, entry):
        """:func:`_scan` of an assignment's value, done once."""
        if entry[6] is None:
            entry[6] = _scan(entry[0].value)
        return entry[6]

    def forget(self, stmt):
        self.memo.pop(id(stmt), None)

    def uses(self, stmt):
        entry = self._entry(stmt)
        if entry[1] is None:
            if type(stmt) is gast.Assign:  # as stmt_uses, from the one walk of the value
                uses = list(self._value_scan(entry)[0])
                for target in stmt.targets:
                    if isinstance(target, gast.Subscript):
                        uses += _names(target)
                entry[1] = uses
            else:
                entry[1] = stmt_uses(stmt)
        return entry[1]

    def defs(self, stmt):
        entry = self._entry(stmt)
        if entry[2] is None:
            if type(stmt) is gast.Assign:  # as stmt_defs
                out = []
                for target in stmt.targets:
                    if isinstance(target, gast.Name):
                        out.append(target.id)
                    elif isinstance(target, gast.Tuple):
                        out += [e.id for e in target.elts if isinstance(e, gast.Name)]
                    elif isinstance(target, gast.Subscript):
                        out += _names(target.value)[:1]
                entry[2] = out + self._value_scan(entry)[1]
            else:
                entry[2] = stmt_defs(stmt)
        return entry[2]

    def pure(self, stmt):
        entry = self._entry(stmt)
        if entry[3] is None:
            if type(stmt) is gast.Assign:  # as _pure
                target = stmt.targets[0]
                entry[3] = len(stmt.targets) == 1 and not self._value_scan(entry)[2] and \
                    not calls_effects(stmt) and \
                    isinstance(target, (gast.Name, gast.Tuple)) and \
                    all(isinstance(e, gast.Name) for e in (
                        target.elts if isinstance(target, gast.Tuple) else []))
            else:
                entry[3] = _pure(stmt) or _pure_control(stmt)
        return entry[3]

    def exposed(self, stmt):
        """The names a statement may read before setting them (for liveness): a loop body
        that sets `dx` before reading it does not need the `dx` computed before the loop."""
        if not isinstance(stmt, _CONTROL):
            return self.uses(stmt)
        entry = self._entry(stmt)
        if entry[7] is None:
            entry[7] = _exposed_uses(stmt)
        return entry[7]

    def reads(self, stmt):
        """As :func:`_all_reads` of the one statement."""
        entry = self._entry(stmt)
        if entry[4] is None:
            entry[4] = _all_reads([stmt])
        return entry[4]

    def value(self, stmt):
        """For an assignment: (names its value reads, the value's nesting depth, whether the
        value changes a list)."""
        entry = self._entry(stmt)
        if entry[5] is None:
            names, _, mutates, depth = self._value_scan(entry)
            entry[5] = (set(names), depth, mutates)
        return entry[5]


def free_names(stmts, maybe_unbound=False):
    """Names read by `stmts` before any of them binds them (what the block needs from outside).

    With maybe_unbound=True a name bound only inside a loop or a branch is not taken as bound
    after it: the loop may run zero times (a backward sweep's ``x = x_tape.pop()`` then never
    runs), so a later read still needs the value from outside.
    """
    defined, free = set(), []
    for stmt in stmts:
        # A for loop's own variable, read in its body, is bound there by the loop header (a
        # residual of it would be unbound when the forward loop ran zero times).
        own = {stmt.target.id} if isinstance(stmt, gast.For) and isinstance(
            stmt.target, gast.Name) and stmt.target.id not in _loads(stmt.iter) else set()
        for n in stmt_uses(stmt):
            if n not in defined and n not in free and n not in own:
                free.append(n)
        if not (maybe_unbound and isinstance(stmt, (gast.For, gast.While, gast.If))):
            defined.update(stmt_defs(stmt))
    return free


def eliminate_dead(stmts, keep, facts=None):
    """Drop pure assignments whose targets are never read later nor kept."""
    facts = facts or _Facts()
    live = set(keep)
    out = []
    for stmt in reversed(stmts):
        defs = facts.defs(stmt)
        pure = facts.pure(stmt)
        if pure and not any(d in live for d in defs):
            continue
        if pure and type(stmt) is gast.Assign:  # (a loop or branch may not bind them)
            live.difference_update(defs)
        live.update(facts.exposed(stmt))
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
        stack.extend((child, depth + 1) for child in _children(current))
    return deepest


def _inline_once(stmts, keep, temps, facts=None):
    # Each statement's reads and writes come from `facts`; where each name is read is
    # indexed once per call: nothing changes `stmts` until an inlining is done, and then the
    # function returns.
    facts = facts or _Facts()
    all_uses = [facts.uses(s) for s in stmts]
    readers = {}  # name -> [(statement index, how many times it reads the name)]
    for j, names in enumerate(all_uses):
        counts = {}
        for n in names:
            counts[n] = counts.get(n, 0) + 1
        for n, k in counts.items():
            readers.setdefault(n, []).append((j, k))

    def defs_of(k):
        return facts.defs(stmts[k])
    for i, stmt in enumerate(stmts):
        if not (isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name)):
            continue
        tmp = stmt.targets[0].id
        if tmp not in temps or tmp in keep:
            continue
        reads, depth, mutates = facts.value(stmt)
        if mutates:
            continue
        if tmp in reads:  # `v = f(v)` updates v: inlining it would substitute forever
            continue
        if depth > _MAX_INLINE_DEPTH:
            continue  # long chains stay statements: readable, and no recursion limits hit
        later = [(j, k) for j, k in readers.get(tmp, ()) if j > i]
        uses = [j for j, _ in later]
        count = sum(k for _, k in later)
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
            facts.forget(target_stmt)
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
                simpler = simplify(stmts[j].value)
                if not _makes_alias(stmts[j], simpler, stmts[j + 1:]):
                    stmts[j].value = simpler
            facts.forget(stmts[j])
        del stmts[i]
        return True
    return False


def _makes_alias(stmt, simpler, later):
    """Whether simplifying `stmt`'s value to `simpler` would turn a new value into another
    name for an array written in place later (``x_bar = 1.0 * y1`` -> ``x_bar = y1``, then
    ``x_bar[0] += g`` would change y1 too)."""
    if not (isinstance(simpler, gast.Name) and not isinstance(stmt.value, gast.Name) and
            isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Name)):
        return False
    names = {stmt.targets[0].id, simpler.id}
    for node in gast.walk(gast.Module(body=list(later), type_ignores=[])):
        if isinstance(node, gast.AugAssign) and isinstance(node.target, gast.Name) and \
                node.target.id in names:
            return True
        if isinstance(node, (gast.Subscript, gast.Attribute)) and \
                isinstance(node.ctx, gast.Store) and isinstance(node.value, gast.Name) and \
                node.value.id in names:
            return True
        if isinstance(node, gast.Call) and node.args and isinstance(node.args[0], gast.Name) \
                and node.args[0].id in names and isinstance(node.func, gast.Name) and \
                node.func.id in ADD_HELPERS:
            return True
    return False


def _copy(node):
    return copy_tree(node)


def _fuse_accumulation(stmts, facts=None):
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
        if facts is not None:
            facts.forget(second)
        del stmts[i]
        return True
    return False


def _sum_update(stmt):
    """(accumulated name, its element index or None, sign, added expression) of ``x[i] += e``,
    ``x += e`` (x a name) or ``x = x + e`` / ``x = x - e`` where e does not read x; else
    None."""
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, (gast.Add, gast.Sub)):
        target, sign = stmt.target, 1 if isinstance(stmt.op, gast.Add) else -1
        index = None
        if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name):
            target, index = target.value, target.slice
        if not isinstance(target, gast.Name) or (index is not None and any(
                isinstance(n, (gast.Slice, gast.List, gast.Tuple)) and not (
                    isinstance(n, gast.Tuple) and n is index) for n in _walk(index))):
            return None  # (slices may overlap partly: only whole elements merge)
        name, value = target.id, stmt.value
    elif isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.BinOp) and \
            isinstance(stmt.value.op, (gast.Add, gast.Sub)) and \
            isinstance(stmt.value.left, gast.Name) and stmt.value.left.id == stmt.targets[0].id:
        name, index, value = stmt.targets[0].id, None, stmt.value.right
        sign = 1 if isinstance(stmt.value.op, gast.Add) else -1
    else:
        return None
    if name in _names(value) or (index is not None and name in _names(index)) or \
            _mutates(value):
        return None
    return name, index, sign, value


def merge_updates(stmts, scalar=None):
    """Two sums into the same place in one block become one: ``x[i] += a`` ... ``x[i] += b``
    becomes ``x[i] += a + b`` where the second was (and ``v = v + a`` ... ``v = v + b``
    becomes ``v = v + (a + b)``), when nothing between them reads or rebinds x and every
    write to x between them is a sum too (``x[i - 1] += c``: even where i - 1 and i name the
    same element, sums commute), and nothing between them rebinds what a or i read. Arrays
    may share memory under other names, so what runs between them reads no element of any
    array nor calls anything, and a reads no element when anything is written between. The
    adjoint of a stencil adds to ``u_bar[i]`` twice per step; one update is one load and
    one store. `scalar(x, index)` says whether ``x[index]`` (x when index is None) is one
    number: sums of arrays stay apart (``a + b`` would be a new array). Nested blocks too;
    returns how many sums were merged.

    >>> block = gast.parse("g[i] += a * c\\ng[i - 1] += c\\ng[i] += a").body
    >>> from autodiff_ast.templates import unparse
    >>> merge_updates(block), [unparse(s) for s in block]
    (1, ['g[i - 1] += c', 'g[i] += a * c + a'])
    """
    count = 0
    for stmt in stmts:
        if isinstance(stmt, _CONTROL):
            count += merge_updates(stmt.body, scalar) + merge_updates(stmt.orelse, scalar)
    while _merge_once(stmts, scalar):
        count += 1
    return count


def _merge_once(stmts, scalar, facts=None):
    for i, first in enumerate(stmts):
        found = _sum_update(first)
        if found is None or (scalar is not None and not scalar(found[0], found[1])):
            continue
        x, index, sign, a = found
        key = None if index is None else _unparse(index)
        held = set(_names(a)) | (set(_names(index)) if index is not None else set())
        reads_elements = not _elementwise_free(a)
        for j in range(i + 1, len(stmts)):
            second = stmts[j]
            if isinstance(second, _CONTROL):
                break
            other = _sum_update(second)
            if other is not None and other[0] == x:
                if (other[1] is None) != (index is None) or (
                        index is not None and _unparse(other[1]) != key):
                    if isinstance(second, gast.AugAssign) and other[1] is not None:
                        # a sum into another element of x: order-free, when it reads no
                        # element (one of x's, under another name) and a reads none
                        if held & set(facts.defs(second) if facts else stmt_defs(second)) - {x} \
                                or reads_elements or not _elementwise_free(other[3]) or \
                                not _elementwise_free(other[1]):
                            break
                        continue
                    break
                b, op = other[3], gast.Add() if sign == other[2] else gast.Sub()
                total = simplify(gast.BinOp(left=_copy(a), op=op, right=b))
                if _depth(total) > _MAX_INLINE_DEPTH:
                    break
                if isinstance(second, gast.AugAssign):
                    second.op = gast.Add() if sign == 1 else gast.Sub()
                    second.value = total
                else:
                    second.value = gast.BinOp(left=gast.Name(id=x, ctx=gast.Load(),
                                                             annotation=None,
                                                             type_comment=None),
                                              op=gast.Add() if sign == 1 else gast.Sub(),
                                              right=total)
                if facts is not None:
                    facts.forget(second)
                del stmts[i]
                return True
            reads = facts.uses(second) if facts else stmt_uses(second)
            defs = facts.defs(second) if facts else stmt_defs(second)
            if x in reads or x in defs or held & set(defs) or _mutates(second) or not (
                    isinstance(second, gast.Assign) and len(second.targets) == 1 and
                    isinstance(second.targets[0], gast.Name) and
                    _elementwise_free(second.value)):
                break
    return False


def _elementwise_free(expr):
    """Whether `expr` reads no array element and calls nothing (arithmetic on names)."""
    return not any(isinstance(n, (gast.Subscript, gast.Call, gast.Attribute))
                   for n in _walk(expr))


def _unparse(node):
    from .templates import unparse
    return unparse(node)


def _all_reads(stmts):
    out = []
    for stmt in stmts:
        out += stmt_uses(stmt) if not isinstance(stmt, _CONTROL) else _loads(stmt)
    return out


_CONTROL = (gast.For, gast.While, gast.If)


def _tidy_nested(stmts, keep, temps, facts=None, gather=False):
    """Tidy the bodies of loops and branches: inside them only names nobody outside reads,
    and nobody inside reads before they are set (loop-carried values), may disappear."""
    facts = facts or _Facts()
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
                    outside.update(facts.reads(other))
            if isinstance(stmt, (gast.For, gast.While)):
                outside.update(_names(stmt.iter if isinstance(stmt, gast.For) else stmt.test))
                # Values read in the body may come from the previous iteration: those read
                # before they are set (in the body's order) must stay.
                outside.update(_carried(body))
            else:
                outside.update(_names(stmt.test))
            other_field = stmt.orelse if field == "body" else stmt.body
            outside.update(_all_reads(other_field or []))
            new = tidy_block(body, keep=outside, temps=temps,
                             gather=gather or getattr(stmt, "backward", False))
            setattr(stmt, field, new or [gast.Pass()])
            facts.forget(stmt)


def _carried(body):
    """Names a loop body reads before it sets them: they carry a value between iterations."""
    carried = set()

    def walk(stmts, seen_def):
        """Record the reads of names not surely set before; returns the names surely set
        after `stmts` (an arm of a branch is one path: the other arm's writes do not count,
        and a nested loop may not run)."""
        seen_def = set(seen_def)
        for stmt in stmts:
            if isinstance(stmt, _CONTROL):
                header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
                for n in _names(header):
                    if n not in seen_def:
                        carried.add(n)
                if isinstance(stmt, gast.If):
                    seen_def = walk(stmt.body, seen_def) & walk(stmt.orelse, seen_def)
                else:
                    inner = set(seen_def)
                    if isinstance(stmt, gast.For):
                        inner |= set(_names(stmt.target, gast.Store))
                    walk(stmt.body, inner)
                    walk(stmt.orelse, seen_def)
                continue
            for n in stmt_uses(stmt):
                if n not in seen_def:
                    carried.add(n)
            seen_def.update(stmt_defs(stmt))
        return seen_def
    walk(body, set())
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


def tidy_block(stmts, keep=(), temps=None, gather=False):
    """Inline single-use temporaries and drop dead stores in a straight block.

    `keep` names values needed after the block; `temps` is the Namer (or set) of temporaries
    that may disappear. gather=True marks backward code: stencil scatter loops in it (and in
    statements marked ``backward``, at any depth) are written in gather form
    (:mod:`autodiff_ast.gather_form`; it needs the Namer).
    """
    from .gather_form import gather_loops
    from .known_zeros import forward_known_zeros, rewrite_known_zeros  # (they read this module)
    from .unread_arrays import drop_dead_zeroing, drop_unread_arrays

    namer = temps if hasattr(temps, "temp") else None
    temps = getattr(temps, "temps", temps) or set()
    stmts = forward_known_zeros(list(stmts))
    keep = set(keep)
    facts = _Facts()
    while True:
        stmts, unread = drop_unread_arrays(stmts, keep)
        if unread:
            facts = _Facts()
        stmts = _drop_self_copies(eliminate_dead(stmts, keep, facts))
        if not (_inline_once(stmts, keep, temps, facts) or _fuse_accumulation(stmts, facts)):
            _tidy_nested(stmts, keep, namer or temps, facts, gather)
            if namer is not None and gather_loops(stmts, namer, marked_only=not gather):
                facts = _Facts()
                continue
            if rewrite_known_zeros(stmts):  # (inlining may have made a term an expression)
                facts = _Facts()
                continue
            stmts, unread = drop_unread_arrays(stmts, keep)  # (nested reads may have gone)
            if unread:
                facts = _Facts()
                continue
            stmts, dropped = drop_dead_zeroing(stmts, keep)
            if dropped:
                facts = _Facts()
                continue
            if gather:  # (backward code: a where's masked cotangent stays masked)
                from .masked_cotangents import mask_products
                mask_products(stmts)
            return _tidy_branches(stmts)


def drop_unread_tapes(forward, backward):
    """Tapes whose popped values the backward code never reads: drop their pushes from
    `forward` and their pops from `backward` (both lists change in place); returns the
    tapes dropped.

    A value can be saved for a read that tidying later removed (say ``np.cos(t)`` in an
    adjoint that turned out zero, as for ``t ** 0``). Its tape would be pushed and popped for
    nothing, and a second derivative would have to keep the emptied tape in step too.

    >>> fwd = gast.parse("t_tape = []\\nt_tape.append(t)\\nt = x * 2.0").body
    >>> bwd = gast.parse("t = t_tape.pop()\\nx_bar = 2.0 * t_bar").body
    >>> drop_unread_tapes(fwd, bwd)
    ['t_tape']
    >>> from autodiff_ast.templates import unparse
    >>> [unparse(s) for s in fwd + bwd]
    ['t = x * 2.0', 'x_bar = 2.0 * t_bar']
    """
    def pop_target(stmt):  # `x = tape.pop()` -> (tape, x)
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Call) and \
                not stmt.value.args and isinstance(stmt.value.func, gast.Attribute) and \
                stmt.value.func.attr == "pop" and isinstance(stmt.value.func.value, gast.Name):
            return stmt.value.func.value.id, stmt.targets[0].id
        return None

    def push_tape(stmt):  # `tape.append(v)` or `tape = []` -> tape
        if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
                isinstance(stmt.value.func, gast.Attribute) and \
                stmt.value.func.attr == "append" and isinstance(stmt.value.func.value, gast.Name):
            return stmt.value.func.value.id
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.List) and \
                not stmt.value.elts:
            return stmt.targets[0].id
        return None

    def simple(stmts):
        for stmt in stmts:
            if isinstance(stmt, _CONTROL):
                yield from simple(stmt.body)
                yield from simple(stmt.orelse)
            yield stmt

    candidates = {}  # tape -> names its pops bind
    for stmt in simple(backward):
        popped = pop_target(stmt)
        if popped is not None:
            candidates.setdefault(popped[0], set()).add(popped[1])
    if not candidates:
        return []
    def reads_of(stmt):
        if isinstance(stmt, (gast.If, gast.While)):
            return _loads(stmt.test)
        if isinstance(stmt, gast.For):
            return _loads(stmt.iter)
        return stmt_uses(stmt)
    # What the backward code reads besides the pops, and what the forward code reads besides
    # the pushes (a tape read anywhere else, say handed to a helper, stays).
    read_back, read_fwd = set(), set()
    for stmt in simple(backward):
        if pop_target(stmt) is None:
            read_back.update(reads_of(stmt))
    for stmt in simple(forward):
        if push_tape(stmt) not in candidates:
            read_fwd.update(reads_of(stmt))
    dropped = sorted(tape for tape, targets in candidates.items()
                     if tape not in read_back and tape not in read_fwd and
                     not any(t in read_back for t in targets))
    if not dropped:
        return []
    gone = set(dropped)

    def prune(stmts, is_dropped):
        out = []
        for stmt in stmts:
            if isinstance(stmt, _CONTROL):
                stmt.body = prune(stmt.body, is_dropped) or [gast.Pass()]
                if stmt.orelse:
                    stmt.orelse = prune(stmt.orelse, is_dropped)
            elif is_dropped(stmt):
                continue
            out.append(stmt)
        return out
    backward[:] = prune(backward, lambda s: (pop_target(s) or (None,))[0] in gone)
    forward[:] = prune(forward, lambda s: push_tape(s) in gone)
    return dropped
