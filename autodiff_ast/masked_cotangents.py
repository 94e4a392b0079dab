"""Keep a cotangent masked by ``np.where`` masked through the products that read it.

The reverse rule of ``np.where(c, a, b)`` gives ``a_bar = np.where(c, g, 0.0)``: zero where
the other side was chosen. A product after it, ``a_bar * (0.5 / sqrt)``, multiplies that zero
by a partial computed where the branch was not taken, which may be infinite or nan (``sqrt``
or ``log`` of a negative number or of 0): 0 * inf is nan. vmap writes a branch on per-example
values (``if x > 0: y = np.sqrt(x) else: y = 3 * x``) as such a ``np.where``, so the gradient
of a vmapped loss came out nan for the examples that took the safe branch.

:func:`mask_products` rewrites, in backward code, each product that reads a name bound to
such a masked cotangent as ``np.where(c, a_bar * e, 0.0)``: the same number wherever ``e``
is finite, and 0 (the branch's own derivative, as the user's ``if`` means) where it is not.
:func:`autodiff_ast.templates.simplify` does the same for a ``np.where`` written inside the
product itself. A name is followed only through straight-line statements where neither it
nor its condition is written again.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> stmts = gast.parse("a_bar = np.where(c, g, 0.0)\\nx_bar = a_bar * 2.0 / x").body
>>> print(unparse(mask_products(stmts)[1].value))
np.where(c, a_bar * 2.0 / x, 0.0)
"""

from __future__ import annotations

import gast

from .templates import simplify
from .tidy import _names, stmt_defs

__all__ = ["mask_products"]


def mask_products(stmts):
    """`stmts` (a straight block of backward code, changed in place and returned) with every
    product reading a masked cotangent written as a masked product."""
    masks = {}  # name -> (the condition, the position of the zero among where's arguments)
    for stmt in stmts:
        if masks and isinstance(stmt, (gast.Assign, gast.AugAssign)):
            wrapped = _Wrap(masks)
            value = wrapped.visit(stmt.value)
            if wrapped.done:
                stmt.value = simplify(value)
        if isinstance(stmt, (gast.Assign, gast.AugAssign, gast.Expr)):
            written = set(stmt_defs(stmt))
        else:  # (a loop or branch: nothing is followed past it)
            masks.clear()
            continue
        for n in list(masks):
            if n in written or written & set(_names(masks[n][0])):
                del masks[n]
        mask = _masked_where(stmt)
        if mask is not None:
            masks[stmt.targets[0].id] = mask
    return stmts


def _masked_where(stmt):
    """(condition, zero's position) of ``n = np.where(c, g, 0.0)`` or ``np.where(c, 0.0, g)``
    whose condition reads names only; None for any other statement."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name)):
        return None
    call = stmt.value
    if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) and
            call.func.attr == "where" and isinstance(call.func.value, gast.Name) and
            call.func.value.id == "np" and len(call.args) == 3 and not call.keywords):
        return None
    cond = call.args[0]
    if any(isinstance(n, gast.Call) for n in gast.walk(cond)):
        return None
    for position in (2, 1):
        zero = call.args[position]
        if isinstance(zero, gast.Constant) and zero.value == 0.0 and \
                not isinstance(zero.value, bool):
            return cond, position
    return None


class _Wrap(gast.NodeTransformer):
    """``n * e`` (or ``e * n``), n a masked cotangent, as ``np.where(c, n * e, 0.0)``."""

    def __init__(self, masks):
        self.masks = masks
        self.done = False

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, gast.Mult):
            return node
        for side in (node.left, node.right):
            if isinstance(side, gast.Name) and side.id in self.masks:
                cond, position = self.masks[side.id]
                zero = gast.Constant(value=0.0, kind=None)
                args = [_copy(cond), node, zero] if position == 2 else [_copy(cond), zero, node]
                self.done = True
                return gast.Call(func=gast.Attribute(value=gast.Name(
                    id="np", ctx=gast.Load(), annotation=None, type_comment=None),
                    attr="where", ctx=gast.Load()), args=args, keywords=[])
        return node


def _copy(node):
    import copy
    return copy.deepcopy(node)
