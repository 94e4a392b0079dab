"""`(e).size` of an elementwise expression, found from its operands' shapes.

np.mean's gradient divides by the size of the mean's operand, and tidying writes that operand
in place of its name: `r_bar = 2.0 * (r / (r * r).size)`. Evaluated as written, `(r * r).size`
computes `r * r`, a whole array, for one number. Inside a fused run
(:mod:`codegen.fused_regions`) such a size is the loop's element count; elsewhere
:func:`sizes_from_shapes` writes it as ``broadcast_size(np.shape(r), np.shape(r))``: the size
of the operands' broadcast shape (np.broadcast_shapes), no array made. An expression qualifies
when it is arithmetic and elementwise math calls (fused_regions' table) over names, numbers,
lengths and slices of names (`x[1:]`, passed whole: a view).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse("def f(r, y):\\n    return 2.0 * (r / ((r - y) ** 2).size)").body[0]
>>> sizes_from_shapes(fn)
True
>>> print(unparse(fn).splitlines()[1].strip())
return 2.0 * (r / broadcast_size(np.shape(r), np.shape(y)))
"""

from __future__ import annotations

import gast

from .emit import name_node, text_of

__all__ = ["sizes_from_shapes", "SIZE_HELPERS", "SIZE_UNCOMPILED"]


def _operands(node):
    """The names and slices of an elementwise expression (in order, each once), or None when
    `node` is not one."""
    from .fused_regions import _elementwise, _reads
    if not _elementwise(node) or isinstance(node, gast.Name):
        return None
    found = {}
    for operand in _reads(node):
        found.setdefault(text_of(operand), operand)
    return list(found.values()) or None


class _Sizes(gast.NodeTransformer):
    def __init__(self):
        self.changed = False

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr != "size" or not isinstance(node.ctx, gast.Load):
            return node
        operands = _operands(node.value)
        if operands is None:
            return node
        self.changed = True
        shapes = [gast.Call(func=gast.Attribute(value=name_node("np"), attr="shape",
                                                ctx=gast.Load()),
                            args=[operand], keywords=[]) for operand in operands]
        return gast.Call(func=name_node("broadcast_size"), args=shapes, keywords=[])


def sizes_from_shapes(fn):
    """Rewrite each `(e).size` of an elementwise expression in `fn` as broadcast_size of its
    operands' shapes; returns whether any was (the module then needs SIZE_HELPERS)."""
    rewriter = _Sizes()
    rewriter.visit(fn)
    return rewriter.changed


#: The helper the rewritten sizes call: plain Python, and its Numba form.
SIZE_HELPERS = {"broadcast_size": '''\
def broadcast_size(*shapes):
    """The number of elements of an elementwise expression whose operands have these shapes
    (`(a * b).size` without computing a * b)."""
    size = 1
    for n in np.broadcast_shapes(*shapes):
        size *= n
    return size


@numba.extending.overload(broadcast_size, jit_options={'error_model': 'numpy'})
def broadcast_size_numba(*shapes):
    """How Numba compiles broadcast_size: 1 when every operand is a number (no axes: a
    constant of the types), else the product of np.broadcast_shapes."""
    if all(len(shape) == 0 for shape in shapes):
        return lambda *shapes: 1

    def size_of(*shapes):
        size = 1
        for n in np.broadcast_shapes(*shapes):
            size *= n
        return size
    return size_of
'''}

#: SIZE_HELPERS' functions Numba does not compile as they stand.
SIZE_UNCOMPILED = frozenset({"broadcast_size", "broadcast_size_numba"})
