"""List comprehensions and Python's folding builtins (``sum``, ``max``, ``min``), lowered
into the loops and appends the normalizer already differentiates.

A comprehension becomes the list it stands for, built by a for loop (its ``if`` clauses
become an ``if`` around the append); its loop variables stay local to it, as in Python.
``sum(xs)`` of a list becomes a loop that adds the items, ``sum(a)`` of an array
``np.sum(a, axis=0)`` (Python iterates an array along its first axis), ``sum([a, b, c])`` of
a display ``a + b + c``; ``max``/``min`` of one iterable fold with the two-argument
``max``/``min``, and three or more arguments nest it. A generator expression is accepted
where its items are folded at once (``sum(x * x for x in xs)``, ``any(...)``, ``all(...)``)
or made a list (``list(...)``, ``tuple(...)``); elsewhere it stays an error (build a list).
The rows of ``np.array([[...] for ...])`` and of a display of displays are made arrays first
(:func:`rows_made_arrays`).

>>> import numpy as np
>>> from autodiff_ast import grad
>>> def f(x):
...     return sum(v * v for v in x) + max([x[0], x[1], 0.5])
>>> print(grad(f)(np.array([1.0, 2.0])))
[2. 5.]
"""

from __future__ import annotations

import builtins

import gast

from . import types as T
from .templates import copy_tree

FOLDS = (builtins.sum, builtins.max, builtins.min)
MAKERS = (builtins.list, builtins.tuple)  # list(v for v in xs): the list it builds
ROWS = (gast.List, gast.Tuple, gast.ListComp)  # rows of a matrix written as lists


def _located(nodes, origin):
    """Give every node in `nodes` the user's line of `origin` (errors name that line)."""
    for stmt in nodes:
        for node in gast.walk(stmt):
            if "lineno" in node._attributes and getattr(node, "lineno", None) is None:
                gast.copy_location(node, origin)
    return nodes


class _Fill(gast.NodeTransformer):
    """Replace placeholder names by expressions (each use gets its own copy), or rename
    names (a str value: a comprehension's variables that shadow a binding)."""

    def __init__(self, subs):
        self.subs = subs

    def visit_Name(self, node):
        if node.id in self.subs:
            value = self.subs[node.id]
            if isinstance(value, str):
                return gast.Name(id=value, ctx=node.ctx, annotation=None, type_comment=None)
            return copy_tree(value)
        return node


def _statements(code, origin, **subs):
    """The statements of `code`, its placeholder names replaced by `subs`, on origin's line."""
    body = gast.parse(code).body
    return _located([_Fill(subs).visit(stmt) for stmt in body], origin)


def _target_names(target):
    return [n.id for n in gast.walk(target) if isinstance(n, gast.Name)]


def comprehension_of(norm, seq):
    """``[v for v in seq]`` with fresh names, a tuple of them for ``zip`` and ``enumerate``:
    what ``list(seq)`` stands for."""
    from .normalize import Static
    count = 1
    if isinstance(seq, gast.Call) and isinstance(seq.func, (gast.Name, gast.Attribute)):
        callee = norm.expr(seq.func)
        if isinstance(callee, Static) and callee.value is zip:
            count = len(seq.args)
        elif isinstance(callee, Static) and callee.value is enumerate:
            count = 2
    names = [norm.namer.temp("entry") for _ in range(count)]

    def names_in(ctx):
        named = [gast.Name(id=n, ctx=ctx(), annotation=None, type_comment=None) for n in names]
        return named[0] if count == 1 else gast.Tuple(elts=named, ctx=ctx())
    loop = gast.comprehension(target=names_in(gast.Store), iter=seq, ifs=[], is_async=0)
    return gast.copy_location(gast.ListComp(elt=names_in(gast.Load), generators=[loop]), seq)


def lower_comprehension(norm, node, target=None):
    """The list a list comprehension (or a folded generator expression) builds: normalized
    as ``items = []``, then nested for loops whose innermost body appends the element."""
    if any(g.is_async for g in node.generators):
        raise norm.unsupported("async comprehensions are not supported", node)
    outer_names = set(norm.env)
    local = [n for g in node.generators for n in _target_names(g.target)]
    # a comprehension's variables are its own: rename those that would overwrite a binding
    renames = {n: norm.namer.fresh(n) for n in local if n in outer_names}
    node = copy_tree(node)
    rest = _Fill(renames)
    for k, gen in enumerate(node.generators):
        gen.target = rest.visit(gen.target)
        if k > 0:  # (the first iterable is read outside the comprehension's scope)
            gen.iter = rest.visit(gen.iter)
        gen.ifs = [rest.visit(c) for c in gen.ifs]
    elt = rest.visit(node.elt)
    used = {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}
    items = target if target is not None and target not in used else norm.namer.fresh("items")
    body = _statements("ITEMS.append(ELT)", node, ITEMS=items, ELT=elt)
    for gen in reversed(node.generators):
        for cond in reversed(gen.ifs):
            body = _located([gast.If(test=cond, body=body, orelse=[])], node)
        body = _located([gast.For(target=gen.target, iter=gen.iter, body=body, orelse=[],
                                  type_comment=None)], node)
    for stmt in _statements("ITEMS = []", node, ITEMS=items) + body:
        norm.visit_stmt(stmt)
    for n in local:  # not visible after the comprehension
        norm.env.pop(renames.get(n, n), None)
    return norm.expr(_load(items), None)


def fold_builtin(norm, fn, node, target):
    """``sum``/``max``/``min`` of an iterable (or max/min of three or more values), lowered;
    None when the call is an ordinary two-argument max/min."""
    args, keywords = list(node.args), {k.arg: k.value for k in node.keywords}
    if fn is builtins.sum:
        if not 1 <= len(args) <= 2 or set(keywords) - {"start"} or (
                len(args) == 2 and "start" in keywords):
            raise norm.unsupported("sum() takes an iterable and an optional start", node)
        start = args[1] if len(args) == 2 else keywords.get("start")
        return _Fold(norm, node, "add").run(args[0], start, target)
    op = fn.__name__
    if len(args) == 2 and not keywords:
        return None
    if keywords:
        raise norm.unsupported(f"{op}() with keywords (key=, default=) is not supported",
                               node, "write the loop")
    if not args:
        raise norm.unsupported(f"{op}() needs arguments", node)
    seq = args[0] if len(args) == 1 else gast.Tuple(elts=args, ctx=gast.Load())
    return _Fold(norm, node, op).run(seq, None, target)  # max(a, b, c): max(max(a, b), c)


class _Fold:
    """One folding call: ``op`` is "add" (sum), "max" or "min"."""

    def __init__(self, norm, node, op):
        self.norm, self.node, self.op = norm, node, op
        self.names = {}

    def builtin(self, name):
        """A name for the builtin `name` in lowered code, whatever the user's module
        shadows (bound once per fold)."""
        from .normalize import Static
        if name not in self.names:
            self.names[name] = _bound(self.norm, Static(getattr(builtins, name)), name)
        return self.names[name]

    def combine(self, left, right):
        if self.op == "add":
            return gast.BinOp(left=left, op=gast.Add(), right=right)
        return gast.Call(func=_load(self.builtin(self.op)), args=[left, right], keywords=[])

    def expr(self, value, target):
        return self.norm.expr(_located([gast.Expr(value=value)], self.node)[0].value, target)

    def run(self, seq, start, target):
        norm, node = self.norm, self.node
        what = "sum" if self.op == "add" else self.op
        if isinstance(seq, (gast.List, gast.Tuple)):  # a display: a + b + c
            if not seq.elts:
                if self.op != "add":
                    raise norm.unsupported(f"{what}() of an empty sequence", node)
                return self.expr(start or gast.Constant(value=0, kind=None), target)
            total = start
            for item in seq.elts:
                total = item if total is None else self.combine(total, item)
            return self.expr(total, target)
        if isinstance(seq, gast.GeneratorExp):
            seq = lower_comprehension(norm, seq)
        else:
            seq = norm.atom(seq)
        typ = _type_of(norm, seq) if isinstance(seq, gast.Name) else T.AType("unknown")
        if typ.kind == "array" and self.op == "add":  # Python adds an array's rows: axis 0
            import numpy as np

            from . import rules
            total = norm.call_rule(rules.lookup(np.sum), [], [gast.keyword(
                arg="axis", value=gast.Constant(value=0, kind=None))], node,
                target if start is None else None, first=seq)
            if start is None:
                return total
            return self.expr(self.combine(start, _load(_bound(norm, total, "total"))), target)
        if typ.kind == "tuple" and typ.elts is not None:  # a tuple of known length: unrolled
            items = _bound(norm, seq, "items")
            parts = [gast.parse(f"{items}[{k}]").body[0].value for k in range(len(typ.elts))]
            return self.run(gast.Tuple(elts=parts, ctx=gast.Load()), start, target)
        if typ.kind not in ("list", "array"):
            value = f"a {typ.kind}" if typ.kind != "unknown" else "this value"
            raise norm.unsupported(f"{what}() of {value} is not supported", node,
                                   "pass a list, a list or tuple display, or an array")
        return self.loop(_bound(norm, seq, "items"), typ, start, target)

    def loop(self, items, typ, start, target):
        """``total = first`` then ``for k in range(...): total = total + items[k]``."""
        norm, node = self.norm, self.node
        element = typ.elts[0] if typ.kind == "list" and typ.elts else T.AType("unknown")
        used = {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}
        total = target if target is not None and target not in used else norm.namer.fresh(
            "total")
        k = norm.namer.fresh("k")
        if self.op == "add" and element.kind in ("float", "int"):
            # numbers start from zero: an empty list sums to 0, as in Python
            first = gast.Constant(value=0.0 if element.kind == "float" else 0, kind=None)
            lower = 0
        else:  # arrays, max and min start from the first item
            first, lower = gast.parse(f"{items}[0]").body[0].value, 1
        if start is not None:
            first = gast.BinOp(left=start, op=gast.Add(), right=first)
        step = self.combine(_load(total), gast.parse(f"{items}[{k}]").body[0].value)
        length = f"{self.builtin('len')}(ITEMS)"
        bounds = f"{lower}, {length}" if lower else length
        code = f"TOTAL = FIRST\nfor K in {self.builtin('range')}({bounds}):\n    TOTAL = STEP\n"
        for stmt in _statements(code, node, TOTAL=total, ITEMS=items, K=k, FIRST=first,
                                STEP=step):
            norm.visit_stmt(stmt)
        norm.env.pop(k, None)
        return norm.expr(_load(total), None)


def _type_of(norm, atom):
    from .normalize import atom_type
    return atom_type(atom, norm.types)


def _bound(norm, value, base):
    """A fresh user-level name bound to `value` (a normalized name, or a Static such as the
    builtin ``range``), so lowered code can name it whatever the user's module shadows."""
    user = norm.namer.fresh(base)
    norm.env[user] = value.id if isinstance(value, gast.Name) else value
    return user


def _load(identifier):
    return gast.Name(id=identifier, ctx=gast.Load(), annotation=None, type_comment=None)



def rows_made_arrays(norm, node):
    """``np.array([[f(i, j) for j in ...] for i in ...])``, ``np.array([[a, b], [c, d]])``:
    the comprehension or display with each row that is itself a list comprehension or
    display (list or tuple) wrapped in ``np.array(...)`` (the same matrix: a list of lists
    has no adjoint of its own, and a display of displays carried no derivative). The call
    names NumPy's array function through a name of its own, whatever the user's module
    calls numpy."""
    import numpy as np

    from .normalize import Static
    array = _bound(norm, Static(np.array), "array")

    def made_arrays(node):
        if isinstance(node, gast.ListComp):
            node = copy_tree(node)
            node.elt = wrapped(node.elt)
        elif isinstance(node, (gast.List, gast.Tuple)):
            node = copy_tree(node)
            node.elts = [wrapped(e) for e in node.elts]
        return node

    def wrapped(elt):
        if not isinstance(elt, ROWS):
            return elt
        call = gast.Call(func=_load(array), args=[made_arrays(elt)], keywords=[])
        return _located([gast.Expr(value=call)], elt)[0].value
    return made_arrays(node)


def has_rows(node):
    """Whether a list display or comprehension has rows that are lists themselves."""
    elts = [node.elt] if isinstance(node, gast.ListComp) else getattr(node, "elts", [])
    return any(isinstance(e, ROWS) for e in elts)
