"""Per-step allocations in loops written into the array the name held before:
``terms = np.zeros(k)`` in a loop becomes ``terms = zeros_reusing(terms, k)``, and
``x_bar = np.zeros_like(x)`` becomes ``x_bar = zeros_like_reusing(x_bar, x)``.

A loop that starts each step with a new small array (the user's ``terms = np.zeros(k)``; the
backward sweep's reset of an adjoint after each step) pays an allocation and a free per step
(~45 ns each under Numba: 2,000 of them were a tenth of a mixture gradient's time). The helpers
zero the old array and return it when it has the shape and dtype asked for, and allocate
otherwise (:data:`codegen.helpers.DIALECT_HELPERS`).

That is only right when nothing else can see the old array: the name is *private*. It is not
a parameter; every value it is bound to is a new array (an allocation, a copy, arithmetic);
and wherever it is read, the read cannot keep the array: an operand of arithmetic or a
comparison, its shape, size, ndim or dtype, an argument of a NumPy function or dialect helper
that returns a new array or a number, the array the add helpers write into, a subscript
that gives a number (an integer index into a vector: the name is known to be one) or is
written to, or what the function returns. Anything else (``y = x``, a tape's ``append``, a
call of a generated function, a view) keeps the name out.

``np.zeros(k)`` needs a value of the name before the loop for the helper to take; one is
bound (``terms = np.empty(0)``) before the outermost loop when the function does not mention
the name before that loop. ``np.zeros_like(y)`` is rewritten only where the name already has
a value bound before the outermost loop, at the function's top level.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, w):
...     n = x.shape[0]
...     k = w.shape[0]
...     total = 0.0
...     for i in range(n):
...         terms = np.zeros(k)
...         for c in range(k):
...             terms[c] = w[c] * x[i]
...         total = total + np.sum(terms)
...     return total
... ''').body[0]
>>> sorted(reuse_buffers(fn))
['zeros_reusing']
>>> print(unparse(fn.body[3]))
terms = np.empty(0)
>>> print(unparse(fn.body[4].body[0]))
terms = zeros_reusing(terms, k)
"""

from __future__ import annotations

import gast

from .emit import dotted_node, mentions, name_node
from .fused_updates import ADD_HELPERS
from .param_writes import dotted_name

__all__ = ["reuse_buffers"]

_ALLOCATING = {"np.zeros", "np.zeros_like", "np.empty", "np.empty_like", "np.ones",
               "np.ones_like", "np.full", "np.full_like", "np.copy", "zeros_reusing",
               "zeros_like_reusing"}
#: Calls that read their arguments and return a new array or a number, never a view.
_READING = _ALLOCATING | {
    "len", "float", "int", "np.sum", "np.max", "np.min", "np.mean", "np.prod", "np.dot",
    "np.vdot", "np.inner", "np.outer", "np.exp", "np.log", "np.sqrt", "np.abs", "np.tanh",
    "np.sin", "np.cos", "np.square", "np.log1p", "np.expm1", "np.maximum", "np.minimum",
    "np.where", "np.argmax", "np.argmin", "np.any", "np.all", "np.isnan", "np.isfinite",
    "np.divide", "np.multiply", "np.add", "np.subtract", "np.negative", "np.sign",
    "sum_of_products", "small_dot", "sum_axis", "max_axis", "min_axis", "mean_axis",
    "outer_product", "tanh_fast"} | ADD_HELPERS
_READING_METHODS = {"copy", "sum", "max", "min", "mean", "any", "all"}
_SHAPE_ATTRS = {"shape", "size", "ndim", "dtype"}


def reuse_buffers(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns the names of the helpers the
    rewritten statements call (empty: nothing changed)."""
    if any(isinstance(n, (gast.FunctionDef, gast.Lambda)) and n is not fn for n in gast.walk(fn)):
        return set()
    params = {a.id for a in fn.args.args if isinstance(a, gast.Name)}
    bindings = _bindings(fn)
    parents = {}
    for node in gast.walk(fn):
        for child in gast.iter_child_nodes(node):
            parents[id(child)] = node
    used = set()
    placeholders = {}  # id(top-level loop) -> names bound before it
    private = {}
    for top_index, top in enumerate(fn.body):
        if not isinstance(top, (gast.For, gast.While)):
            continue
        before = fn.body[:top_index]
        for stmt in _simple_statements(top):
            kind = _allocation(stmt, bindings, params)
            if kind is None:
                continue
            x = stmt.targets[0].id
            if x not in private:
                private[x] = _private(fn, x, params, bindings, parents)
            if not private[x]:
                continue
            bound_before = any(isinstance(s, gast.Assign) and any(
                isinstance(t, gast.Name) and t.id == x for t in s.targets) for s in before)
            mentioned_before = any(mentions(s, x) for s in before)
            call = stmt.value
            if kind == "zeros":
                if not bound_before:
                    if mentioned_before:
                        continue
                    placeholders.setdefault(id(top), (top, []))
                    if x not in placeholders[id(top)][1]:
                        placeholders[id(top)][1].append(x)
                stmt.value = _call("zeros_reusing", [name_node(x), call.args[0]])
            else:
                if not bound_before:
                    continue
                stmt.value = _call("zeros_like_reusing", [name_node(x), call.args[0]])
            used.add(stmt.value.func.id)
    for top, names in placeholders.values():
        at = next(k for k, s in enumerate(fn.body) if s is top)
        fn.body[at:at] = [gast.Assign(targets=[name_node(x, gast.Store())],
                                      value=_call("np.empty", [gast.Constant(0, None)]),
                                      type_comment=None) for x in names]
    return used


def _simple_statements(loop):
    for node in gast.walk(loop):
        if isinstance(node, gast.Assign):
            yield node


def _allocation(stmt, bindings, params):
    """'zeros' for ``x = np.zeros(k)`` (k a number, float64), 'zeros_like' for
    ``x = np.zeros_like(y)``; else None."""
    if not (len(stmt.targets) == 1 and isinstance(stmt.targets[0], gast.Name) and
            isinstance(stmt.value, gast.Call) and len(stmt.value.args) == 1 and
            not stmt.value.keywords):
        return None
    func = dotted_name(stmt.value.func)
    arg = stmt.value.args[0]
    if func == "np.zeros" and _scalar_int(arg, bindings, params):
        return "zeros"
    if func == "np.zeros_like" and isinstance(arg, gast.Name):
        return "zeros_like"  # (the helper reuses vectors and allocates anything else)
    return None


def _bindings(fn):
    """name -> the expressions it is bound to (None for a binding that is not ``x = e``)."""
    out = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            for target in node.targets:
                if isinstance(target, gast.Name):
                    out.setdefault(target.id, []).append(node.value)
                else:
                    for n in gast.walk(target):
                        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                            out.setdefault(n.id, []).append(None)
        elif isinstance(node, (gast.For, gast.With, gast.AugAssign, gast.AnnAssign,
                               gast.comprehension)):
            if isinstance(node, gast.AugAssign):
                continue  # (in place: the same array)
            for field in ("target", "items"):
                for n in gast.walk(getattr(node, field, None) or gast.Pass()):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        out.setdefault(n.id, []).append(None)
    return out


def _scalar_int(expr, bindings, params, depth=0):
    """Whether `expr` is surely one integer (not a shape tuple): constants, ``a.shape[i]``,
    ``len``, arithmetic of those, names bound only to those."""
    if depth > 6:
        return False
    if isinstance(expr, gast.Constant):
        return type(expr.value) is int
    if isinstance(expr, gast.Subscript):
        return isinstance(expr.value, gast.Attribute) and expr.value.attr == "shape" and \
            not isinstance(expr.slice, gast.Slice)
    if isinstance(expr, gast.Call):
        return dotted_name(expr.func) in ("len", "int", "max", "min") and not expr.keywords \
            and all(_scalar_int(a, bindings, params, depth + 1) or dotted_name(expr.func) ==
                    "len" for a in expr.args)
    if isinstance(expr, gast.BinOp):
        return not isinstance(expr.op, gast.Div) and \
            _scalar_int(expr.left, bindings, params, depth + 1) and \
            _scalar_int(expr.right, bindings, params, depth + 1)
    if isinstance(expr, gast.UnaryOp):
        return _scalar_int(expr.operand, bindings, params, depth + 1)
    if isinstance(expr, gast.Name):
        values = bindings.get(expr.id)
        return expr.id not in params and bool(values) and all(
            v is not None and _scalar_int(v, bindings, params, depth + 1) for v in values)
    return False


def _vector(x, bindings, params, depth=0):
    """Whether name `x` surely holds a vector: bound only to ``np.zeros(k)`` and the like
    with one integer length, or to ``np.zeros_like(v)`` of such a vector."""
    values = bindings.get(x)
    if depth > 4 or x in params or not values:
        return False
    for v in values:
        if not isinstance(v, gast.Call) or v.keywords and dotted_name(v.func) != "np.full":
            return False
        func = dotted_name(v.func)
        if func in ("np.zeros", "np.empty", "np.ones", "np.full"):
            size = v.args[0] if v.args else None
            if isinstance(size, gast.Tuple) and len(size.elts) == 1:
                size = size.elts[0]
            if size is None or not _scalar_int(size, bindings, params):
                return False
        elif func in ("np.zeros_like", "np.empty_like", "np.ones_like"):
            if not (v.args and isinstance(v.args[0], gast.Name) and
                    _vector(v.args[0].id, bindings, params, depth + 1)):
                return False
        elif func == "zeros_reusing":
            if len(v.args) != 2 or not _scalar_int(v.args[1], bindings, params):
                return False
        elif func == "zeros_like_reusing":
            if not (len(v.args) == 2 and isinstance(v.args[1], gast.Name) and
                    _vector(v.args[1].id, bindings, params, depth + 1)):
                return False
        else:
            return False
    return True


def _fresh_value(expr):
    """Whether `expr` makes a new array (or number): nothing else refers to its result."""
    if isinstance(expr, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.Constant)):
        return True
    if isinstance(expr, gast.IfExp):
        return _fresh_value(expr.body) and _fresh_value(expr.orelse)
    if isinstance(expr, gast.Call):
        func = dotted_name(expr.func)
        if func in _ALLOCATING:
            return True
        return isinstance(expr.func, gast.Attribute) and expr.func.attr == "copy" and \
            not expr.args
    return False


def _private(fn, x, params, bindings, parents):
    """Whether no name or container but `x` can ever hold the arrays `x` holds."""
    if x in params or not all(v is not None and _fresh_value(v) for v in bindings.get(x, [None])):
        return False
    vector = _vector(x, bindings, params)
    for node in gast.walk(fn):
        if not (isinstance(node, gast.Name) and node.id == x and isinstance(node.ctx, gast.Load)):
            continue
        if not _read_keeps_nothing(node, parents, vector):
            return False
    return True


def _read_keeps_nothing(node, parents, vector):
    parent = parents.get(id(node))
    if isinstance(parent, (gast.BinOp, gast.UnaryOp, gast.Compare)):
        return True
    if isinstance(parent, gast.Attribute):
        if parent.attr in _SHAPE_ATTRS:
            return True
        grand = parents.get(id(parent))
        return parent.attr in _READING_METHODS and isinstance(grand, gast.Call) and \
            grand.func is parent
    if isinstance(parent, gast.Subscript) and parent.value is node:
        if isinstance(parent.ctx, gast.Store):
            return True
        if vector and not any(isinstance(n, gast.Slice) for n in gast.walk(parent.slice)):
            return True  # a number (or, for an index array, a copy)
        grand = parents.get(id(parent))
        if isinstance(grand, gast.AugAssign) and grand.target is parent:
            return True
        return isinstance(grand, (gast.BinOp, gast.UnaryOp, gast.Compare))
    if isinstance(parent, gast.Call) and node is not parent.func:
        return dotted_name(parent.func) in _READING and \
            not any(kw.value is node for kw in parent.keywords if kw.arg == "out")
    if isinstance(parent, gast.Return):
        return True
    if isinstance(parent, gast.Tuple) and isinstance(parents.get(id(parent)), gast.Return):
        return True
    if isinstance(parent, gast.AugAssign) and parent.value is node:
        return True
    if isinstance(parent, gast.Assign) and parent.value is node:
        return all(isinstance(t, gast.Subscript) for t in parent.targets)
    return False


def _call(func, args):
    return gast.Call(func=dotted_node(func), args=args, keywords=[])
