"""Loop-invariant work hoisted out of loop nests as tables: ``np.exp(a[c])`` inside
``for c in range(k)`` inside ``for i in range(n)`` reads nothing the ``i`` loop changes, so
its k values are computed once, before the ``i`` loop, into ``exp_a = np.exp(a[:k])``, and
the statement reads ``exp_a[c]``.

LLVM hoists a call that does not depend on any loop out of the loops itself; it cannot hoist
one that depends on an inner loop's index. A mixture's log-likelihood written with loops
computes ``np.exp(log_prec[c])`` once per point and component (25,000 calls for 1,000
points and 25 components, where 25 are enough: 464 -> 404 us for its gradient, measured by
hand on the generated code before this pass was written).

The call may be a statement's whole value (``e = np.exp(log_prec[c])``, as reverse mode
writes it) or an operand of arithmetic anywhere in a simple statement (``terms[c] = ... - 0.5
* np.exp(log_prec[c]) * sq``, as a primal is written: the mixture's primal 250-261 -> 130-141
us); handed to a function or subscripted, it is left alone (an entry read there could be a
row of the table, written through).

The rewrite is made only when it cannot change a value: the call is elementwise (so
``f(a[:k])[c]`` is ``f(a[c])`` for every ``c`` the loop takes, whatever a's rank), ``c`` is
the index of a ``for c in range(k)`` loop that does not rebind it, and the loop the table is
hoisted out of neither rebinds ``a`` nor anything in ``k``, nor writes into ``a`` or any name
ever bound from it, nor hands any of them to a call that could write into them (a generated
function, a method, an ``out=`` argument). The table is read, never written, and the
statement's target is never written in place either (an array row read from the table would
otherwise be written through). A table of a loop that does not run is computed and unused:
the functions tabulated cannot fail (NumPy's error model: inf and nan, no exceptions).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, log_prec):
...     total = 0.0
...     for i in range(x.shape[0]):
...         for c in range(log_prec.shape[0]):
...             e = np.exp(log_prec[c])
...             total = total + e * x[i]
...     return total
... ''').body[0]
>>> tabulate_invariant_calls(fn, {"x", "log_prec", "total", "i", "c", "e"})
True
>>> print(unparse(fn.body[1]))
exp_log_prec = np.exp(log_prec[:log_prec.shape[0]])
>>> print(unparse(fn.body[2].body[0].body[0]))
e = exp_log_prec[c]
"""

from __future__ import annotations

import copy

import gast

from .emit import dotted_node, fresh_name, name_node
from .fused_updates import ADD_HELPERS
from .param_writes import dotted_name, numpy_writes_first_argument

__all__ = ["tabulate_invariant_calls", "stored_names", "written_names"]

#: Elementwise functions worth a table (a libm call each), and the NumPy function that
#: computes the table (math.exp of a float64 and np.exp call the same routine under Numba).
_TABULATED = {f"{module}.{fn}": f"np.{fn}" for module in ("np", "math")
              for fn in ("exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh",
                         "log1p", "expm1", "log10", "log2")}
_TABULATED.update({"np.arctan": "np.arctan", "math.atan": "np.arctan",
                   "np.arcsinh": "np.arcsinh", "math.asinh": "np.arcsinh"})
#: Calls that write into none of their arguments.
_PURE_MODULES = ("np.", "math.")
_PURE_BUILTINS = {"range", "len", "min", "max", "abs", "float", "int", "bool"}
_PURE_METHODS = {"copy", "sum", "max", "min", "mean", "any", "all", "astype", "pop", "append"}


def tabulate_invariant_calls(fn, taken):
    """Rewrite `fn` (a gast FunctionDef, in place): each tabulated call becomes a read of a
    table made before the outermost loop it is invariant in. `taken` holds the names in use
    (the tables' names are added). Returns whether anything changed."""
    if any(isinstance(n, (gast.FunctionDef, gast.Lambda)) and n is not fn for n in gast.walk(fn)):
        return False
    aliases = _bound_from(fn)
    written = written_names(fn.body)  # (the rewrite adds reads only: computed once)
    effects = {}  # id(loop) -> (names it binds, names it may write into)
    tables = {}  # (function, array, bound, id(loop)) -> table name
    inserts = {}  # id(loop) -> (block, loop, [statements])
    changed = False
    for stmt, loops, blocks, call, put in _calls_in_loops(fn.body):
        found = _candidate(call, loops)
        if found is None:
            continue
        func, array, index, k, inner = found
        whole = stmt.value is call  # (`t = f(a[c])`: t holds the table's row)
        if whole and (aliases.get(stmt.targets[0].id, set()) | {stmt.targets[0].id}) & written:
            continue  # (an array row read from the table must not be written through)
        at = loops.index(inner)
        hoist = None
        for j in range(at):  # the outermost loop the call is invariant in
            loop = loops[j]
            if id(loop) not in effects:
                effects[id(loop)] = (stored_names([loop]), written_names([loop]))
            if _invariant(array, k, aliases, *effects[id(loop)]):
                hoist = j
                break
        if hoist is None:
            continue
        loop = loops[hoist]
        key = (func, array, gast.dump(k), id(loop))
        if key not in tables:
            table = fresh_name(f"{func[3:]}_{array}", taken)
            tables[key] = table
            rows = gast.Slice(lower=None, upper=copy.deepcopy(k), step=None)
            value = gast.Call(func=dotted_node(func), args=[gast.Subscript(
                value=name_node(array), slice=rows, ctx=gast.Load())], keywords=[])
            made = gast.Assign(targets=[name_node(table, gast.Store())], value=value,
                               type_comment=None)
            inserts.setdefault(id(loop), (blocks[hoist], loop, []))[2].append(made)
        put(gast.Subscript(value=name_node(tables[key]), slice=name_node(index),
                           ctx=gast.Load()))
        changed = True
    for block, loop, made in inserts.values():
        at = next(k for k, s in enumerate(block) if s is loop)
        block[at:at] = made
    return changed


def _statements_in_loops(block, loops=(), blocks=()):
    """(statement, enclosing loops outermost first, the block holding each loop) for every
    simple statement inside at least one loop."""
    for stmt in block:
        if isinstance(stmt, (gast.For, gast.While)):
            for inner in (stmt.body, stmt.orelse):
                yield from _statements_in_loops(inner, loops + (stmt,), blocks + (block,))
        elif isinstance(stmt, (gast.If, gast.Try, gast.With)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements_in_loops(getattr(stmt, field, None) or [], loops, blocks)
            for handler in getattr(stmt, "handlers", None) or []:
                yield from _statements_in_loops(handler.body, loops, blocks)
        elif loops:
            yield stmt, list(loops), list(blocks)


def _calls_in_loops(block):
    """(statement, loops, blocks, call, put) for each call of a statement inside a loop
    that may be replaced by a table's entry: the whole value of ``t = f(...)`` (one name
    target), or an operand of arithmetic anywhere in a simple statement (whose result is a
    new value: the entry is never written through). ``put(node)`` makes the replacement."""
    for stmt, loops, blocks in _statements_in_loops(block):
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Call):
            yield stmt, loops, blocks, stmt.value, \
                lambda node, stmt=stmt: setattr(stmt, "value", node)
            continue
        if any(isinstance(n, gast.Lambda) for n in gast.walk(stmt)):
            continue
        for parent in gast.walk(stmt):
            if isinstance(parent, gast.BinOp):
                fields = ("left", "right")
            elif isinstance(parent, gast.UnaryOp):
                fields = ("operand",)
            else:
                continue
            for field in fields:
                child = getattr(parent, field)
                if isinstance(child, gast.Call):
                    yield stmt, loops, blocks, child, \
                        lambda node, parent=parent, field=field: setattr(parent, field, node)


def _candidate(call, loops):
    """(table function, array, index, loop bound, index loop) when `call` is ``f(a[c])``
    with ``c`` the index of an enclosing ``for c in range(k)``; else None."""
    func = _TABULATED.get(dotted_name(call.func) or "")
    if func is None or len(call.args) != 1 or call.keywords:
        return None
    arg = call.args[0]
    if not (isinstance(arg, gast.Subscript) and isinstance(arg.value, gast.Name) and
            isinstance(arg.slice, gast.Name)):
        return None
    array, index = arg.value.id, arg.slice.id
    if array == index:
        return None
    for loop in reversed(loops):
        if isinstance(loop, gast.For) and isinstance(loop.target, gast.Name) and \
                loop.target.id == index:
            it = loop.iter
            if loop.orelse or not (isinstance(it, gast.Call) and dotted_name(it.func) == "range"
                                   and len(it.args) == 1 and not it.keywords):
                return None
            if index in stored_names(loop.body) or array in stored_names([loop]):
                return None
            return func, array, index, it.args[0], loop
    return None


def _invariant(array, bound, aliases, stored, written):
    """Whether a loop that binds the names `stored` and may write into `written` leaves
    `array` (and every name bound from it) and the names in `bound` as they were: not
    rebound, not written into, not handed to a call that could write."""
    if not _int_expr(bound):
        return False
    if array in stored or {n.id for n in gast.walk(bound) if isinstance(n, gast.Name)} & stored:
        return False
    return not ((aliases.get(array, set()) | {array}) & written)


def stored_names(stmts):
    """Names bound anywhere in `stmts` (assignments, loop targets, augmented assignments)."""
    out = set()
    for stmt in stmts:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)):
                out.add(node.id)
    return out


def written_names(stmts):
    """Names whose memory `stmts` may write: subscript and augmented assignment targets,
    the first argument of the add helpers, receivers of methods other than reads, and every
    name handed to a call that is not a NumPy/math function or a builtin."""
    out = set()
    for stmt in stmts:
        for node in gast.walk(stmt):
            if isinstance(node, (gast.Assign, gast.AugAssign)):
                targets = node.targets if isinstance(node, gast.Assign) else [node.target]
                for t in targets:
                    if isinstance(node, gast.AugAssign) or not isinstance(t, gast.Name):
                        out |= _bases(t)
            elif isinstance(node, gast.Call):
                func = dotted_name(node.func) or ""
                if func in ADD_HELPERS and node.args:
                    out |= _bases(node.args[0])
                elif isinstance(node.func, gast.Attribute) and not func.startswith(
                        _PURE_MODULES):
                    if node.func.attr not in _PURE_METHODS:
                        out |= _roots(node.func.value)
                elif numpy_writes_first_argument(func) or func.startswith("np.random.") or not (
                        func.startswith(_PURE_MODULES) or func in _PURE_BUILTINS):
                    for arg in node.args:
                        out |= _roots(arg)
                for kw in node.keywords:
                    if kw.arg == "out" or not (func.startswith(_PURE_MODULES) or
                                               func in _PURE_BUILTINS):
                        out |= _roots(kw.value)
    return out


def _roots(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _bases(target):
    """The names a write into `target` writes through (``a`` of ``a[i, j]``; every name of a
    tuple target)."""
    if isinstance(target, (gast.Tuple, gast.List)):
        return set().union(*(_bases(e) for e in target.elts)) if target.elts else set()
    while isinstance(target, (gast.Subscript, gast.Attribute, gast.Starred)):
        target = target.value
    return {target.id} if isinstance(target, gast.Name) else _roots(target)


def _bound_from(fn):
    """name -> every name whose value may share its memory (bound from an expression that
    mentions it, directly or through other names), over the whole function."""
    edges = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            sources = _roots(node.value)
            for target in node.targets:
                for n in gast.walk(target):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        for s in sources:
                            edges.setdefault(s, set()).add(n.id)
        elif isinstance(node, gast.For):
            for s in _roots(node.iter):
                edges.setdefault(s, set()).update(_roots(node.target))
        elif isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
                node.func.attr in ("append", "insert", "extend"):  # a list holds it now
            for arg in node.args:
                for s in _roots(arg):
                    edges.setdefault(s, set()).update(_bases(node.func.value))
    closure = {}
    for start in edges:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        closure[start] = seen
    return closure


def _int_expr(expr):
    """A loop bound the table can be sized with before the loop: names, attributes,
    subscripts, constants and arithmetic, ``len``/``min``/``max`` of those."""
    for node in gast.walk(expr):
        if isinstance(node, gast.Call):
            if dotted_name(node.func) not in ("len", "min", "max") or node.keywords:
                return False
        elif not isinstance(node, (gast.Name, gast.Constant, gast.Attribute, gast.Subscript,
                                   gast.BinOp, gast.UnaryOp, gast.operator, gast.unaryop,
                                   gast.expr_context, gast.Tuple)):
            return False
    return True
