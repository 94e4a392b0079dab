"""Row updates without a temporary: ``add_at(a, i, outer_product(u, v))``, or
``t = outer_product(u, v)`` ... ``add_at(a, i, t)``, becomes ``add_outer_at(a, i, u, v)``;
``add_at(a, i, -v)`` becomes ``subtract_at(a, i, v)``.

The adjoint of a matrix-vector product ``q = np.dot(m[c], x)`` in a loop adds the outer
product of q's adjoint and x into row c of m's adjoint: the dialect writes it as a new
``outer_product`` array, added into the row later (ADBench's GMM: a 10 x 10 temporary 25,000
times per gradient). :func:`fuse_outer_adds` writes the add where the product was made, into
the row directly, when nothing in between can tell the difference: the temporary is read only
by that add, the statements in between do not mention the array or rebind the index, and no
other name can see the array's memory (it is a new array of this function, handed only to
``add_at``/``add_into``, indexed, rebound or returned, and no name read in between was ever
bound to an expression that mentions it).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(m, x, g):
...     m_bar = np.zeros_like(m)
...     for c in range(3):
...         t = outer_product(g, x)
...         y = g * 2.0
...         add_at(m_bar, c, t)
...     return m_bar
... ''').body[0]
>>> fuse_outer_adds(fn)
{'add_outer_at'}
>>> print(unparse(fn.body[1]))
for c in range(3):
    add_outer_at(m_bar, c, g, x)
    y = g * 2.0
"""

from __future__ import annotations

import gast

from .emit import mentions, name_node
from .param_writes import dotted_name

__all__ = ["ADD_HELPERS", "fuse_outer_adds", "fresh_and_unshared", "call_name"]

_FRESH = {"np.zeros_like", "np.zeros", "np.empty", "np.empty_like", "np.ones_like", "np.ones"}
#: Dialect helpers that add into their first argument (and keep none of their arguments).
ADD_HELPERS = frozenset({"add_at", "add_into", "add_outer_at", "subtract_at", "add_tie_share",
                         "add_at_where"})
#: add_columns(a, rows, columns) adds into a and reads rows (codegen/column_layout.py).
_READS_SECOND = frozenset({"add_columns"})


def fuse_outer_adds(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns the names of the helpers the
    rewritten statements call (``add_outer_at``, ``subtract_at``; empty: nothing changed)."""
    loads = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Load):
            loads[node.id] = loads.get(node.id, 0) + 1
    bound_from = _bound_from(fn)
    used = set()
    for block in _blocks(fn):
        k = 0
        while k < len(block):
            helper = _fuse_in_place(block[k]) or _fuse_at(block, k, fn, loads, bound_from)
            if helper:
                used.add(helper)
            k += 1
    return used


def _fuse_in_place(stmt):
    """``add_at(a, i, outer_product(u, v))`` as ``add_outer_at(a, i, u, v)``, and
    ``add_at(a, i, -v)`` as ``subtract_at(a, i, v)`` (no negated copy of v); returns the
    helper written, else None."""
    if not (isinstance(stmt, gast.Expr) and call_name(stmt.value) == "add_at" and
            len(stmt.value.args) == 3 and not stmt.value.keywords):
        return None
    product = stmt.value.args[2]
    if isinstance(product, gast.UnaryOp) and isinstance(product.op, gast.USub):
        stmt.value.func = name_node("subtract_at")
        stmt.value.args[2] = product.operand
        return "subtract_at"
    if not (call_name(product) == "outer_product" and len(product.args) == 2 and
            not product.keywords):
        return None
    stmt.value.func = name_node("add_outer_at")
    stmt.value.args = stmt.value.args[:2] + list(product.args)
    return "add_outer_at"


def _fuse_at(block, k, fn, loads, bound_from):
    """The named-product form (see the module docstring); returns the helper written, else
    None."""
    stmt = block[k]
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name) and call_name(stmt.value) == "outer_product"
            and len(stmt.value.args) == 2 and not stmt.value.keywords):
        return None
    temp = stmt.targets[0].id
    if loads.get(temp) != 1:
        return None
    for m in range(k + 1, len(block)):
        use = block[m]
        if not mentions(use, temp):
            continue
        if not (isinstance(use, gast.Expr) and call_name(use.value) == "add_at" and
                len(use.value.args) == 3 and isinstance(use.value.args[0], gast.Name) and
                isinstance(use.value.args[2], gast.Name) and use.value.args[2].id == temp):
            return None
        array, index = use.value.args[0].id, use.value.args[1]
        between = block[k + 1:m]
        if any(mentions(s, array) for s in between):
            return None
        index_names = {n.id for n in gast.walk(index) if isinstance(n, gast.Name)}
        if any(isinstance(n, gast.Name) and not isinstance(n.ctx, gast.Load) and
               n.id in index_names for s in between for n in gast.walk(s)):
            return None
        if not fresh_and_unshared(fn, array) or any(
                array in bound_from.get(n.id, ()) for s in between for n in gast.walk(s)
                if isinstance(n, gast.Name)):
            return None
        u, v = stmt.value.args
        block[k] = gast.Expr(value=gast.Call(func=name_node("add_outer_at"),
                                             args=[use.value.args[0], index, u, v],
                                             keywords=[]))
        del block[m]
        return "add_outer_at"
    return None


def fresh_and_unshared(fn, array):
    """Whether `array` is a new array of `fn` that no other name can hold: bound only to
    fresh allocations, and otherwise only indexed, handed to the add helpers, or returned.

    >>> fn = gast.parse("def f(n, x):\\n    a = np.zeros(n)\\n    a[0] = x\\n    b = a\\n"
    ...                 "    return a").body[0]
    >>> fresh_and_unshared(fn, "a"), fresh_and_unshared(fn, "x")
    (False, False)
    >>> fn.body.pop(2)  # (without `b = a`)
    <gast.gast.Assign object at ...>
    >>> fresh_and_unshared(fn, "a")
    True
    """
    args = {a.id for a in fn.args.args if isinstance(a, gast.Name)}
    if array in args or any(isinstance(n, (gast.FunctionDef, gast.Lambda)) and n is not fn
                            for n in gast.walk(fn)):
        return False  # (a closure could read the array between the two statements)
    allowed = set()
    bound = False
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            for target in node.targets:
                if isinstance(target, gast.Name) and target.id == array:
                    if call_name(node.value) not in _FRESH:
                        return False
                    allowed.add(id(target))
                    bound = True
        elif isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name):
            allowed.add(id(node.value))
        elif isinstance(node, gast.Call) and call_name(node) in ADD_HELPERS | _READS_SECOND \
                and node.args and isinstance(node.args[0], gast.Name):
            allowed.add(id(node.args[0]))
            if call_name(node) in _READS_SECOND and len(node.args) > 1 and \
                    isinstance(node.args[1], gast.Name):
                allowed.add(id(node.args[1]))
        elif isinstance(node, gast.Return):
            allowed.update(id(n) for n in gast.walk(node) if isinstance(n, gast.Name))
    if not bound:
        return False
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and node.id == array and id(node) not in allowed:
            return False
    return True


def _bound_from(fn):
    """name -> names in the expressions it is ever bound to (in `fn`)."""
    out = {}
    for node in gast.walk(fn):
        if isinstance(node, (gast.Assign, gast.AugAssign)):
            targets = node.targets if isinstance(node, gast.Assign) else [node.target]
            sources = {n.id for n in gast.walk(node.value) if isinstance(n, gast.Name)}
            for target in targets:
                for n in gast.walk(target):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        out.setdefault(n.id, set()).update(sources)
        elif isinstance(node, gast.For):
            sources = {n.id for n in gast.walk(node.iter) if isinstance(n, gast.Name)}
            for n in gast.walk(node.target):
                if isinstance(n, gast.Name):
                    out.setdefault(n.id, set()).update(sources)
    return out


def _blocks(fn):
    for node in gast.walk(fn):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], gast.stmt):
                yield block


def call_name(node):
    """'np.zeros' for a call of np.zeros (None for anything but a call of a dotted name).

    >>> call_name(gast.parse("np.zeros(3)").body[0].value), call_name(gast.parse("x").body[0])
    ('np.zeros', None)
    """
    return dotted_name(node.func) if isinstance(node, gast.Call) else None
