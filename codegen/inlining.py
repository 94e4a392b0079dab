"""Calls made inside loops, replaced by the called function's body (compiled modules only).

A generated module calls its helpers (the user's helper functions, their ``_fwd``/``_bwd``
pairs) once per loop step. Under Numba each call is a call LLVM rarely inlines: arrays passed
in are reference-counted with atomic instructions on the way in and out, results come back
as tuples, and nothing is optimised across the boundary. ADBench's bundle adjustment, with its
small vectors held as scalars (autodiff_ast/scalarize.py), spent 61% of its gradient's time in
those atomic counts; its compiled primal ran 3.4 -> 1.5 ms with its helpers inlined.

:func:`inline_loop_calls` works on the functions of one module: a statement
``target = f(args)``, ``f(args)`` or ``return f(args)`` inside a loop, where ``f`` is a
function of the module, becomes f's body with f's names renamed apart (``x`` -> ``x_2``), its
parameters bound to the arguments (a name or constant argument of a parameter f never rebinds
is used as it is), and its final ``return e`` written as ``target = e``. Inlined bodies are
inside the loop too, so their own calls are inlined in turn. Left alone: entry functions' own
calls outside loops, recursive functions, functions with a ``return`` anywhere but at their
end (or none needed), ``yield``, nested functions, calls with keywords or ``*args``, and any
call that would make the calling function longer than :data:`MAX_STATEMENTS`. Functions no
longer called from anywhere are dropped (entries are kept).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> tree = gast.parse('''
... def sq(x):
...     y = x * x
...     return y
... def f(a):
...     t = 0.0
...     for i in range(3):
...         s = sq(a[i])
...         t = t + s
...     return t
... ''')
>>> fns = inline_loop_calls(tree.body, entries=["f"])
>>> [fn.name for fn in fns]
['f']
>>> print(unparse(fns[0]))
def f(a):
    t = 0.0
    for i in range(3):
        x = a[i]
        y = x * x
        s = y
        t = t + s
    return t
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, is_marker, name_node
from .invariant_tables import stored_names

__all__ = ["inline_loop_calls", "MAX_STATEMENTS"]

#: A function grows to at most this many statements by inlining: Numba's compile time grows
#: with it, fast for scalar statements, slowly for array ones (docs/numba.md). The largest
#: function ADBench's bundle adjustment gradient makes has 473.
MAX_STATEMENTS = 1000


def _size(stmts):
    return sum(1 for s in stmts for n in gast.walk(s) if isinstance(n, gast.stmt))


def _inlinable(fn):
    """Whether `fn`'s body can replace a call: one return, at its end (or none)."""
    body = fn.body
    returns = [n for n in gast.walk(fn) if isinstance(n, gast.Return)]
    if any(isinstance(n, (gast.Yield, gast.YieldFrom, gast.Lambda, gast.Global,
                          gast.Nonlocal, gast.ClassDef, gast.Try, gast.With))
           or (isinstance(n, gast.FunctionDef) and n is not fn) for n in gast.walk(fn)):
        return False
    if fn.args.vararg or fn.args.kwarg or fn.args.kwonlyargs or fn.args.defaults or \
            fn.args.posonlyargs:
        return False
    if not returns:
        return True
    return len(returns) == 1 and body and body[-1] is returns[0]


def _calls(fn, names):
    return {n.func.id for n in gast.walk(fn) if isinstance(n, gast.Call) and
            isinstance(n.func, gast.Name) and n.func.id in names}


def _recursive(by_name):
    """Names of functions that can reach themselves through calls."""
    graph = {name: _calls(fn, by_name) for name, fn in by_name.items()}
    out = set()
    for start in graph:
        seen, stack = set(), list(graph[start])
        while stack:
            n = stack.pop()
            if n == start:
                out.add(start)
                break
            if n not in seen:
                seen.add(n)
                stack.extend(graph.get(n, ()))
    return out


def _site(stmt, inlinable):
    """(call, kind) when `stmt` is a call statement we can inline, else None."""
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1:
        call, kind = stmt.value, "assign"
    elif isinstance(stmt, gast.Expr) and not is_marker(stmt):
        call, kind = stmt.value, "expr"
    elif isinstance(stmt, gast.Return):
        call, kind = stmt.value, "return"
    else:
        return None
    if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Name) and
            call.func.id in inlinable and not call.keywords and
            not any(isinstance(a, gast.Starred) for a in call.args)):
        return None
    if len(call.args) != len(inlinable[call.func.id].args.args):
        return None
    return call, kind


def _names(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _free(fn):
    """Names `fn` reads that it does not bind (module globals)."""
    bound = stored_names([fn]) | {a.id for a in fn.args.args}
    return {n.id for n in gast.walk(fn) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load) and n.id not in bound}


class _Renamer(gast.NodeTransformer):
    def __init__(self, mapping):
        self.mapping = mapping  # name -> replacement expression (a gast node to copy)

    def visit_Name(self, node):
        new = self.mapping.get(node.id)
        if new is None:
            return node
        if isinstance(new, str):
            return gast.Name(id=new, ctx=node.ctx, annotation=None, type_comment=None)
        return copy.deepcopy(new)


def _body_for(callee, call, kind, stmt, taken):
    """The statements replacing `stmt` (a call of `callee`)."""
    params = [a.id for a in callee.args.args]
    stored = stored_names([callee]) - {callee.name}
    mapping, prologue = {}, []
    for p, arg in zip(params, call.args):
        if p not in stored and isinstance(arg, (gast.Name, gast.Constant)):
            mapping[p] = arg
        else:
            fresh = fresh_name(p, taken)
            mapping[p] = fresh
            prologue.append(gast.Assign(targets=[name_node(fresh, gast.Store())],
                                        value=copy.deepcopy(arg), type_comment=None))
    for local in sorted(stored - set(params)):
        mapping[local] = fresh_name(local, taken)
    body = [s for s in callee.body if not (isinstance(s, gast.Expr) and
                                           isinstance(s.value, gast.Constant) and
                                           isinstance(s.value.value, str))]
    body = [_Renamer(mapping).visit(copy.deepcopy(s)) for s in body]
    result = None
    if body and isinstance(body[-1], gast.Return):
        result = body.pop().value
    out = prologue + body
    if kind == "assign":
        value = result if result is not None else gast.Constant(value=None, kind=None)
        out.append(gast.Assign(targets=[copy.deepcopy(stmt.targets[0])], value=value,
                               type_comment=None))
    elif kind == "return":
        out.append(gast.Return(value=result))
    return out


def _parallel(loop):
    """A ``numba.prange`` loop (its body runs as a parallel region: left as it is)."""
    it = loop.iter if isinstance(loop, gast.For) else None
    return isinstance(it, gast.Call) and (
        (isinstance(it.func, gast.Attribute) and it.func.attr == "prange") or
        (isinstance(it.func, gast.Name) and it.func.id == "prange"))


def _in_loop_sites(stmts, in_loop, found):
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, (gast.For, gast.While)):
            if _parallel(stmt):
                continue
            _in_loop_sites(stmt.body, True, found)
            _in_loop_sites(stmt.orelse, True, found)
        elif isinstance(stmt, gast.If):
            _in_loop_sites(stmt.body, in_loop, found)
            _in_loop_sites(stmt.orelse, in_loop, found)
        elif in_loop:
            found.append((stmts, i))


def inline_loop_calls(functions, entries=()):
    """`functions` (gast FunctionDefs of one module) with calls inside loops inlined; the
    list returned drops functions nothing calls any more (entries stay)."""
    by_name = {fn.name: fn for fn in functions}
    recursive = _recursive(by_name)
    inlinable = {name: fn for name, fn in by_name.items()
                 if name not in recursive and name not in entries and _inlinable(fn)}
    module_names = set(by_name)
    free = {}  # callee name -> the globals it reads (asked at each call site, kept until
    # the callee's own body changes)
    changed_any = False
    for fn in functions:
        taken = _names(fn) | module_names | {a.id for a in fn.args.args}
        bound = stored_names([fn]) | {a.id for a in fn.args.args}  # grows with each inlined body
        size = _size(fn.body)
        for _ in range(64):  # rounds: an inlined body's calls are inlined in the next
            sites = []
            _in_loop_sites(fn.body, False, sites)
            changed = False
            for stmts, i in reversed(sites):
                site = _site(stmts[i], inlinable)
                if site is None or site[0].func.id == fn.name:
                    continue
                callee = inlinable[site[0].func.id]
                grow = _size(callee.body)
                if size + grow > MAX_STATEMENTS:
                    continue
                if callee.name not in free:
                    free[callee.name] = _free(callee)
                if free[callee.name] & bound:
                    continue  # a global the callee reads is a local name here
                taken |= free[callee.name]
                body = _body_for(callee, site[0], site[1], stmts[i], taken)
                bound |= stored_names(body)
                stmts[i:i + 1] = body
                size += grow
                changed = True
            if not changed:
                break
            changed_any = True
            free.pop(fn.name, None)  # its body changed: what it reads may have too
    if not changed_any:
        return list(functions)
    keep = list(functions)
    while True:  # drop functions no kept function mentions (an entry is always kept)
        live = set(entries)
        for fn in keep:
            live |= _names(fn) - {fn.name}
        nxt = [fn for fn in keep if fn.name in live]
        if len(nxt) == len(keep):
            return nxt
        keep = nxt
