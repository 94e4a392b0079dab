"""Counters that start at an int constant and reach a compiled helper: ``top = int(0)``.

Numba types a function's names by propagating types until nothing changes, and it compiles a
called function as soon as the call's argument types are known in that propagation. A counter
written ``top = 0`` and rebound later (``top = top + n``) is first known as ``Literal[int](0)``
alone; a helper called with it (directly, or through a copy such as ``row = top``) is compiled
for that literal type, then again for ``int64`` once the rebinding is seen. The first compile
is thrown away: for ADBench GMM's gradient, one outlined sum loop (``sum_loop_3``, called with
the row its loop stack starts at) was compiled twice, ~0.05-0.1 s of a cold start near 10 s.

:func:`widen_int_starts` writes such a start as ``int(0)``: the same number in Python, and an
``int64`` (no literal) under Numba from the start, so the helper is compiled once. Only names
bound more than once, one binding not an int constant, whose value reaches an argument of a
call to one of ``callees``, are rewritten.

>>> import gast
>>> fn = gast.parse('''
... def f(a, n):
...     top = 0
...     out = 0.0
...     for i in range(n):
...         row = top
...         top = top + 1
...         out = out + h(a, row)
...     return out
... ''').body[0]
>>> widen_int_starts(fn, {"h"})
['top']
>>> import ast
>>> print(ast.unparse(gast.gast_to_ast(fn.body[0])))
top = int(0)
"""

from __future__ import annotations

import gast

__all__ = ["widen_int_starts"]


def _int_constant(node):
    return isinstance(node, gast.Constant) and type(node.value) is int


def _bindings(fn):
    """{name: [value node, or None for a binding that is not a plain assignment]}."""
    out = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            for target in node.targets:
                for leaf in gast.walk(target):
                    if isinstance(leaf, gast.Name) and isinstance(leaf.ctx, gast.Store):
                        value = node.value if isinstance(target, gast.Name) else None
                        out.setdefault(leaf.id, []).append(value)
        elif isinstance(node, (gast.AugAssign, gast.AnnAssign, gast.For, gast.comprehension)):
            target = node.target
            for leaf in gast.walk(target):
                if isinstance(leaf, gast.Name) and isinstance(leaf.ctx, gast.Store):
                    out.setdefault(leaf.id, []).append(None)
    return out


def _reaching_calls(fn, callees, bindings):
    """Names whose value reaches an argument of a call to one of ``callees``: passed as
    arguments, or copied (``row = top``) into a name that does."""
    reached = set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
                node.func.id in callees:
            for arg in list(node.args) + [k.value for k in node.keywords]:
                if isinstance(arg, gast.Name):
                    reached.add(arg.id)
    changed = True
    while changed:
        changed = False
        for target, values in bindings.items():
            if target not in reached:
                continue
            for value in values:
                if isinstance(value, gast.Name) and value.id not in reached:
                    reached.add(value.id)
                    changed = True
    return reached


def widen_int_starts(fn, callees):
    """Rewrite ``name = <int>`` as ``name = int(<int>)`` in ``fn`` (in place) where ``name`` is
    rebound to something else and its value reaches a call of one of ``callees``; returns
    the names rewritten, sorted."""
    bindings = _bindings(fn)
    candidates = {name for name, values in bindings.items()
                  if len(values) > 1 and any(_int_constant(v) for v in values) and
                  not all(_int_constant(v) for v in values)}
    if not candidates:
        return []
    widened = candidates & _reaching_calls(fn, callees, bindings)
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name) and node.targets[0].id in widened \
                and _int_constant(node.value):
            node.value = gast.Call(func=gast.Name(id="int", ctx=gast.Load(), annotation=None,
                                                  type_comment=None),
                                   args=[node.value], keywords=[])
    return sorted(widened)
