"""Per-step allocations in loops written into the array the name held before:
``terms = np.zeros(k)`` in a loop becomes ``if terms.shape[0] == k: terms[:] = 0`` (else the
allocation), ``x_bar = np.zeros_like(x)`` the same when x_bar is known to be a vector, or
``x_bar = zeros_like_reusing(x_bar, x)`` when its rank is not known, and ``t = np.empty(k)``
(a tape of one step, whatever its dtype) becomes ``if t.shape[0] != k: t = np.empty(k)``.

A loop that starts each step with a new small array (the user's ``terms = np.zeros(k)``; the
backward sweep's reset of an adjoint after each step, ``x_bar = np.zeros_like(x) if x.size else
np.zeros_like(x_bar)`` after a tape's pop) pays an allocation and a free per step (~45 ns each
under Numba: 2,000 of them were a tenth of a mixture gradient's time). The statements written
out zero the old array when it has the length asked for and allocate otherwise; they are
written out rather than a helper's call because a call that takes and returns the array pays
atomic reference counts too (a loop-form ADBench GMM gradient, 25,000 resets of a 10-vector:
5.0 -> 4.1 ms). ``zeros_like_reusing`` (:data:`codegen.helpers.DIALECT_HELPERS`) is for an
array of unknown rank: Numba's overload reuses only a vector of the very type asked for.

That is only right when nothing else can see the old array: the name is *private*. It is not
a parameter; every value it is bound to is a new array (an allocation, a copy, arithmetic);
and wherever it is read, the read cannot keep the array: an operand of arithmetic or a
comparison, its shape, size, ndim or dtype, an argument of a NumPy function or dialect helper
that returns a new array or a number, the array the add helpers write into, a subscript
that gives a number (an integer index into a vector: the name is known to be one) or is
written to, or what the function returns. Anything else (``y = x``, a tape's ``append``, a
call of a generated function, a view) keeps the name out. A name is known to be a vector when
every value bound to it is ``np.zeros(k)`` and the like with one integer length, the
``zeros_like`` of a vector, a choice of two vectors, or a ``pop`` of a tape every value
appended to which is a vector.

``np.zeros(k)`` needs a value of the name before the loop to compare with; one is bound
(``terms = np.empty(0)``) before the outermost loop when the function does not mention the
name before that loop. ``np.zeros_like(y)`` is rewritten only where the name already has a
value bound before the outermost loop, at the function's top level.

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
>>> reuse_buffers(fn)
set()
>>> print(unparse(fn.body[3]))
terms = np.empty(0)
>>> print(unparse(fn.body[4].body[0]))
if terms.shape[0] == k:
    terms[:] = 0
else:
    terms = np.zeros(k)
"""

from __future__ import annotations

import copy

import gast

from .emit import call_node, dotted_node, mentions, name_node, parent_map
from .fused_updates import ADD_HELPERS
from .param_writes import dotted_name

__all__ = ["reuse_buffers", "holds_alone", "SHAPE_ATTRS"]

_ALLOCATING = {"np.zeros", "np.zeros_like", "np.empty", "np.empty_like", "np.ones",
               "np.ones_like", "np.full", "np.full_like", "np.copy", "zeros_like_reusing",
               "full_like_any"}
#: Calls that read their arguments and return a new array or a number, never a view.
_READING = _ALLOCATING | {
    "len", "float", "int", "np.sum", "np.max", "np.min", "np.mean", "np.prod", "np.dot",
    "np.vdot", "np.inner", "np.outer", "np.exp", "np.log", "np.sqrt", "np.abs", "np.tanh",
    "np.sin", "np.cos", "np.square", "np.log1p", "np.expm1", "np.maximum", "np.minimum",
    "np.where", "np.argmax", "np.argmin", "np.any", "np.all", "np.isnan", "np.isfinite",
    "np.divide", "np.multiply", "np.add", "np.subtract", "np.negative", "np.sign",
    "sum_of_products", "small_dot", "sum_axis", "max_axis", "min_axis", "mean_axis",
    "outer_product", "tanh_fast", "exp_fast",
    "columns_of", "add_columns"} | ADD_HELPERS  # (codegen/column_layout.py)
#: Calls that read their arguments and write into none of them.
READ_ONLY_CALLS = frozenset(_READING - ADD_HELPERS - {"zeros_like_reusing"})
_READING_METHODS = {"copy", "sum", "max", "min", "mean", "any", "all"}
SHAPE_ATTRS = {"shape", "size", "ndim", "dtype"}
_EMPTY_LIST = "[]"  # what _bindings records for ``x = []``
_RANGE_STEP = "range"  # ... and for the target of ``for x in range(...)``
_INT_HELPERS = {"same_length", "slice_start", "slice_length"}


def reuse_buffers(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns the names of the helpers the
    rewritten statements call (empty when it calls none, changed or not)."""
    if has_inner_functions(fn):
        return set()
    params, bindings, parents = privacy_context(fn)
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
                private[x] = holds_alone(fn, x, params, bindings, parents)
            if not private[x]:
                continue
            bound_before = any(isinstance(s, gast.Assign) and any(
                isinstance(t, gast.Name) and t.id == x for t in s.targets) for s in before)
            mentioned_before = any(mentions(s, x) for s in before)
            call = stmt.value
            if kind in ("zeros", "empty"):
                if not bound_before:
                    if mentioned_before:
                        continue
                    placeholders.setdefault(id(top), (top, {}))
                    placeholders[id(top)][1].setdefault(x, call.keywords)
                length = call.args[0]
                if isinstance(length, gast.Tuple):
                    length = length.elts[0]
                if kind == "zeros":
                    _zero_in_place(stmt, parents, x, length, call)
                else:
                    _allocate_when_shorter(stmt, parents, x, length)
                continue
            if not bound_before:
                continue
            if _vector(x, bindings, params):
                like = _like(call)
                _zero_in_place(stmt, parents, x, _shape0(like), call)
                continue
            stmt.value = call_node("zeros_like_reusing", [name_node(x), _like(call)])
            used.add(stmt.value.func.id)
    for top, names in placeholders.values():
        at = next(k for k, s in enumerate(fn.body) if s is top)
        fn.body[at:at] = [gast.Assign(targets=[name_node(x, gast.Store())], value=gast.Call(
            func=dotted_node("np.empty"), args=[gast.Constant(0, None)],
            keywords=copy.deepcopy(keywords)), type_comment=None)
            for x, keywords in names.items()]
    return used


def _zero_in_place(stmt, parents, x, length, allocation):
    """Replace `stmt` (``x = <allocation>``, x a vector) by ``if x.shape[0] == length: x[:] = 0
    else: x = <allocation>``: written out, not a helper call, because a call that takes and
    returns the array pays two atomic reference counts (a third of a loop-form mixture
    gradient's time, 25,000 steps of 10-vectors)."""
    test = gast.Compare(left=_shape0(name_node(x)), ops=[gast.Eq()], comparators=[length])
    zero = gast.Assign(targets=[gast.Subscript(value=name_node(x), slice=gast.Slice(
        lower=None, upper=None, step=None), ctx=gast.Store())],
        value=gast.Constant(0, None), type_comment=None)
    _replace_statement(stmt, parents, gast.If(test=test, body=[zero], orelse=[stmt]))


def _allocate_when_shorter(stmt, parents, x, length):
    """Replace `stmt` (``x = np.empty(k)``, x a vector) by ``if x.shape[0] != k: x =
    np.empty(k)``: the old array serves as it is (its values were never to be read)."""
    test = gast.Compare(left=_shape0(name_node(x)), ops=[gast.NotEq()], comparators=[length])
    _replace_statement(stmt, parents, gast.If(test=test, body=[stmt], orelse=[]))


def _replace_statement(stmt, parents, new):
    parent = parents[id(stmt)]
    for field in ("body", "orelse"):
        block = getattr(parent, field, None) or []
        for at, sibling in enumerate(block):
            if sibling is stmt:
                block[at] = new
                parents[id(stmt)] = new
                return
    raise AssertionError("statement not found in its parent")


def _shape0(array):
    """``array.shape[0]`` (for ``y if c else z``, the choice of the two lengths)."""
    if isinstance(array, gast.IfExp):
        return gast.IfExp(test=array.test, body=_shape0(array.body), orelse=_shape0(array.orelse))
    shape = gast.Attribute(value=array, attr="shape", ctx=gast.Load())
    return gast.Subscript(value=shape, slice=gast.Constant(0, None), ctx=gast.Load())


def _simple_statements(loop):
    for node in gast.walk(loop):
        if isinstance(node, gast.Assign):
            yield node


def _allocation(stmt, bindings, params):
    """'empty' for ``x = np.empty(k)`` (k a number; a dtype keyword allowed: a tape of one
    step), 'zeros' for ``x = np.zeros(k)`` (k a number, float64), 'zeros_like' for
    ``x = np.zeros_like(y)`` and for the backward sweep's reset after a tape pop,
    ``x = np.zeros_like(y) if y.size else np.zeros_like(x)``; else None."""
    if len(stmt.targets) == 1 and isinstance(stmt.targets[0], gast.Name) and \
            isinstance(stmt.value, gast.IfExp) and \
            all(_zeros_like_of_name(arm) for arm in (stmt.value.body, stmt.value.orelse)):
        return "zeros_like"
    if not (len(stmt.targets) == 1 and isinstance(stmt.targets[0], gast.Name) and
            isinstance(stmt.value, gast.Call) and len(stmt.value.args) == 1):
        return None
    func = dotted_name(stmt.value.func)
    arg = stmt.value.args[0]
    if func == "np.empty" and _dtype_only(stmt.value.keywords) and \
            _scalar_int(arg, bindings, params):
        return "empty"
    if stmt.value.keywords:
        return None
    if func == "np.zeros" and _scalar_int(arg, bindings, params):
        return "zeros"
    if func == "np.zeros_like" and isinstance(arg, gast.Name):
        return "zeros_like"  # (the helper reuses vectors and allocates anything else)
    return None


def _dtype_only(keywords):
    return all(kw.arg == "dtype" and isinstance(kw.value, gast.Attribute) for kw in keywords)


def _zeros_like_of_name(expr):
    return isinstance(expr, gast.Call) and dotted_name(expr.func) == "np.zeros_like" and \
        len(expr.args) == 1 and isinstance(expr.args[0], gast.Name) and not expr.keywords


def _like(value):
    """What ``zeros_like_reusing`` copies the shape of: y of ``np.zeros_like(y)``, and
    ``y if c else z`` of ``np.zeros_like(y) if c else np.zeros_like(z)``."""
    if isinstance(value, gast.IfExp):
        return gast.IfExp(test=value.test, body=value.body.args[0], orelse=value.orelse.args[0])
    return value.args[0]


def _bindings(fn):
    """name -> the expressions it is bound to (None for a binding that is not ``x = e``;
    ``_EMPTY_LIST`` for ``x = []``, ``_RANGE_STEP`` for the target of ``for x in range(...)``),
    and ``("appended", t)`` -> the values of ``t.append(v)``."""
    out = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
                node.func.attr == "append" and isinstance(node.func.value, gast.Name):
            value = node.args[0] if len(node.args) == 1 and not node.keywords else None
            out.setdefault(("appended", node.func.value.id), []).append(value)
        if isinstance(node, gast.Assign):
            for target in node.targets:
                if isinstance(target, gast.Name):
                    empty = isinstance(node.value, gast.List) and not node.value.elts
                    out.setdefault(target.id, []).append(_EMPTY_LIST if empty else node.value)
                else:
                    for n in gast.walk(target):
                        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                            out.setdefault(n.id, []).append(None)
        elif isinstance(node, (gast.For, gast.With, gast.AugAssign, gast.AnnAssign,
                               gast.comprehension)):
            if isinstance(node, gast.AugAssign):
                continue  # (in place: the same array)
            if isinstance(node, gast.For) and isinstance(node.target, gast.Name) and \
                    isinstance(node.iter, gast.Call) and dotted_name(node.iter.func) == "range":
                out.setdefault(node.target.id, []).append(_RANGE_STEP)
                continue
            for field in ("target", "items"):
                for n in gast.walk(getattr(node, field, None) or gast.Pass()):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        out.setdefault(n.id, []).append(None)
    return out


def _scalar_int(expr, bindings, params, depth=0, seen=frozenset()):
    """Whether `expr` is surely one integer (not a shape tuple): constants, ``a.shape[i]``,
    ``len``, arithmetic of those, the slots of integer tapes, names bound only to those (a
    name met again while it is being decided counts as one: a value pushed on a tape and
    popped back into the same name)."""
    if depth > 6:
        return False
    if isinstance(expr, gast.Constant):
        return type(expr.value) is int
    if isinstance(expr, gast.Subscript) and isinstance(expr.value, gast.Name) and \
            _int_vector(expr.value.id, bindings, params):
        return not isinstance(expr.slice, (gast.Slice, gast.Tuple))  # an int tape's slot
    if isinstance(expr, gast.Subscript):
        shape = expr.value
        if isinstance(shape, gast.Name):  # shape = x.shape; n = shape[0]
            values = bindings.get(shape.id)
            if shape.id not in params and values and all(
                    isinstance(v, gast.Attribute) and v.attr == "shape" for v in values):
                shape = values[0]
        return isinstance(shape, gast.Attribute) and shape.attr == "shape" and \
            not isinstance(expr.slice, gast.Slice)
    if isinstance(expr, gast.Call) and dotted_name(expr.func) in _INT_HELPERS:
        return True  # (integer helpers of code written as element loops)
    tape = _popped_list(expr)
    if tape is not None:  # a tape's pop, every value pushed on it an integer
        pushed = _pushed(tape, bindings)
        return pushed is not None and all(_scalar_int(p, bindings, params, depth + 1, seen)
                                          for p in pushed)
    if isinstance(expr, gast.Call):
        return dotted_name(expr.func) in ("len", "int", "max", "min") and not expr.keywords \
            and all(_scalar_int(a, bindings, params, depth + 1, seen) or dotted_name(expr.func) ==
                    "len" for a in expr.args)
    if isinstance(expr, gast.BinOp):
        return not isinstance(expr.op, gast.Div) and \
            _scalar_int(expr.left, bindings, params, depth + 1, seen) and \
            _scalar_int(expr.right, bindings, params, depth + 1, seen)
    if isinstance(expr, gast.UnaryOp):
        return _scalar_int(expr.operand, bindings, params, depth + 1, seen)
    if isinstance(expr, gast.Name):
        if expr.id in seen:
            return True
        values = bindings.get(expr.id)
        seen = seen | {expr.id}
        return expr.id not in params and bool(values) and all(
            v is _RANGE_STEP or v is not None and _scalar_int(v, bindings, params, depth + 1, seen)
            for v in values)
    return False


def _vector(x, bindings, params, seen=frozenset()):
    """Whether name `x` surely holds a vector: bound only to ``np.zeros(k)`` and the like
    with one integer length, to ``np.zeros_like(v)`` of such a vector, to a choice between
    such values, or to what a tape's ``pop`` gives back when every value appended to the tape
    is such a vector. (A name met again while it is being decided is assumed to be one: the
    first value bound in a run is then one that is not circular.)"""
    values = bindings.get(x)
    if x in seen:
        return True
    if len(seen) > 8 or x in params or not values:
        return False
    seen = seen | {x}
    return all(v is not None and _vector_value(v, bindings, params, seen) for v in values)


def _vector_value(v, bindings, params, seen):
    if isinstance(v, gast.IfExp):
        return _vector_value(v.body, bindings, params, seen) and \
            _vector_value(v.orelse, bindings, params, seen)
    if isinstance(v, gast.Name):
        return _vector(v.id, bindings, params, seen)
    if isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name):
        # a row t[s] of a matrix t = np.empty((m, k)) (reverse mode's tape of vectors)
        return _scalar_int(v.slice, bindings, params) and _matrix(v.value.id, bindings, params)
    if not isinstance(v, gast.Call) or v.keywords and dotted_name(v.func) != "np.full" and \
            not _dtype_only(v.keywords):
        return False
    func = dotted_name(v.func)
    if func in ("np.zeros", "np.empty", "np.ones", "np.full"):
        size = v.args[0] if v.args else None
        if isinstance(size, gast.Tuple) and len(size.elts) == 1:
            size = size.elts[0]
        return size is not None and _scalar_int(size, bindings, params)
    if func in ("np.zeros_like", "np.empty_like", "np.ones_like"):
        return len(v.args) == 1 and _vector_value(v.args[0], bindings, params, seen)
    if func == "zeros_like_reusing":
        return len(v.args) == 2 and _vector_value(v.args[1], bindings, params, seen)
    tape = _popped_list(v)
    if tape is not None:
        pushed = _pushed(tape, bindings)
        return pushed is not None and all(_vector_value(p, bindings, params, seen)
                                          for p in pushed)
    return False


def _int_vector(x, bindings, params):
    """Whether name `x` is bound only to ``np.empty(n, dtype=np.int64)`` or to a column
    ``m[:, j]`` of ``m = np.empty((n, k), dtype=np.int64)`` (reverse mode's integer tapes)."""
    values = bindings.get(x)
    return x not in params and bool(values) and all(
        _int_allocation(v, 1) or _int_column(v, bindings, params) for v in values)


def _int_column(v, bindings, params):
    """Whether `v` is ``m[:, j]`` (j a constant), m bound only to ``np.empty((n, k),
    dtype=np.int64)``."""
    if not (isinstance(v, gast.Subscript) and isinstance(v.value, gast.Name) and
            v.value.id not in params and isinstance(v.slice, gast.Tuple) and
            len(v.slice.elts) == 2):
        return False
    rows, column = v.slice.elts
    matrices = bindings.get(v.value.id)
    return isinstance(rows, gast.Slice) and rows.lower is None and rows.upper is None and \
        rows.step is None and isinstance(column, gast.Constant) and bool(matrices) and \
        all(_int_allocation(m, 2) for m in matrices)


def _int_allocation(v, ndim):
    """Whether `v` is ``np.empty(shape, dtype=np.int64)`` with a shape of `ndim` axes."""
    if not (isinstance(v, gast.Call) and dotted_name(v.func) == "np.empty" and
            len(v.args) == 1 and len(v.keywords) == 1 and v.keywords[0].arg == "dtype" and
            dotted_name(v.keywords[0].value) == "np.int64"):
        return False
    shape = v.args[0]
    axes = len(shape.elts) if isinstance(shape, gast.Tuple) else 1
    return axes == ndim


def _pushed(tape, bindings):
    """The values pushed on `tape` (``tape.append(v)``) when it is only ever bound to a new
    empty list and every push is of one value; else None."""
    lists, pushed = bindings.get(tape), bindings.get(("appended", tape))
    if lists and all(b == _EMPTY_LIST for b in lists) and pushed and \
            all(p is not None for p in pushed):
        return pushed
    return None


def _popped_list(expr):
    """t of ``t.pop()`` (a tape used as a stack), else None."""
    if isinstance(expr, gast.Call) and isinstance(expr.func, gast.Attribute) and \
            expr.func.attr == "pop" and not expr.args and not expr.keywords and \
            isinstance(expr.func.value, gast.Name):
        return expr.func.value.id
    return None


def _matrix(x, bindings, params):
    """Whether name `x` is bound only to ``np.empty((m, k))`` and the like, m and k integers."""
    values = bindings.get(x)
    return x not in params and bool(values) and all(
        isinstance(v, gast.Call) and dotted_name(v.func) in ("np.zeros", "np.empty", "np.ones")
        and len(v.args) == 1 and isinstance(v.args[0], gast.Tuple) and
        len(v.args[0].elts) == 2 and all(_scalar_int(e, bindings, params) for e in v.args[0].elts)
        for v in values)


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


def holds_alone(fn, x, params, bindings, parents):
    """Whether no name or container but `x` can ever hold the arrays `x` holds (`params`,
    `bindings`, `parents`: :func:`privacy_context` of `fn`).

    >>> fn = gast.parse("def f(n):\\n    a = np.zeros(n)\\n    b = a\\n    c = np.ones(n)\\n"
    ...                 "    return c + 1.0").body[0]
    >>> holds_alone(fn, "a", *privacy_context(fn)), holds_alone(fn, "c", *privacy_context(fn))
    (False, True)
    """
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
        if parent.attr in SHAPE_ATTRS:
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


def has_inner_functions(fn):
    """Whether `fn` defines a function or lambda inside it (which could hold any array: the
    privacy checks refuse such functions)."""
    return any(isinstance(n, (gast.FunctionDef, gast.Lambda)) and n is not fn
               for n in gast.walk(fn))


def privacy_context(fn):
    """(parameters, bindings, parents) of `fn`: what :func:`holds_alone` reads."""
    params = {a.id for a in fn.args.args if isinstance(a, gast.Name)}
    return params, _bindings(fn), parent_map([fn])

