"""Batching rules: how each primitive runs on a whole batch at once (vmap's vectorized variant).

Inside a batched function every batched value carries its batch axis first (axis 0); an
unbatched value is exactly what the per-example code would hold. A rule receives one call site
(:class:`BatchCall`, the per-example call plus which operands are batched) and returns the
batched right-hand side: one NumPy expression computing every example's result at once.

Rules come in families, as in JAX: elementwise (size-one axes are inserted after the batch axis
so ranks line up), reductions (axes shift by one), shape functions, joins, creators, products
(a batched ``dot`` becomes a matmul or an ``np.sum`` of a product, never ``np.einsum`` unless
the user wrote one) and indexing (batched indices become gathers). A rule that cannot batch a
call site raises :class:`NoBatchingRule`; the caller then runs that one statement once per
example.

>>> import gast
>>> from autodiff_ast import types as T
>>> from autodiff_ast.rules import PrimCall, by_name
>>> from autodiff_ast.templates import fill, unparse
>>> call = PrimCall(by_name("add"), {"a": fill("x"), "b": fill("w")},
...                 {"a": T.array(()), "b": T.array((T.N,))}, "y", T.array((T.N,)))
>>> bc = BatchCall(call, fill("x + w"), {"a": True, "b": False}, fill("n_batch"))
>>> unparse(batch(bc))
'x[:, None] + w'
"""

from __future__ import annotations

import string

import gast
import numpy as np

from .. import types as T
from ..templates import fill, to_expr
from . import PrimCall  # noqa: F401  (the per-example call a BatchCall wraps)
from .elementwise import PARTIALS, PIECEWISE_CONSTANT
from .structural import (
    _join_axis,
    _rot90_plane,
    _shape_dims,
    constant_axis,
    emit_call,
    split_axis,
    split_cuts,
)


class NoBatchingRule(Exception):
    """This call site has no vectorized form: run it once per example."""


class ValueDependentShape(Exception):
    """The per-example shape of a result depends on a batched value (it differs per example)."""


# ---------------------------------------------------------------- small expression helpers
def _slice():
    return gast.Slice(lower=None, upper=None, step=None)


def _none():
    return gast.Constant(value=None, kind=None)


def subscript(value, parts):
    """``value[parts]`` (one part, or a tuple of them)."""
    index = parts[0] if len(parts) == 1 else gast.Tuple(elts=list(parts), ctx=gast.Load())
    return gast.Subscript(value=to_expr(value), slice=index, ctx=gast.Load())


def expand_after_batch(expr, count):
    """``expr[:, None, ...]``: `count` size-one axes right after the batch axis.

    >>> from autodiff_ast.templates import unparse
    >>> unparse(expand_after_batch(fill("x"), 2))
    'x[:, None, None]'
    """
    if count <= 0:
        return to_expr(expr)
    return subscript(expr, [_slice()] + [_none() for _ in range(count)])


def batch_shape(n_batch, shape, shape_type):
    """The shape ``(n_batch,) + shape`` as an expression, for a per-example shape argument."""
    if isinstance(shape, gast.Tuple):
        return gast.Tuple(elts=[to_expr(n_batch)] + [to_expr(e) for e in shape.elts],
                          ctx=gast.Load())
    if shape_type.kind == "int":
        return gast.Tuple(elts=[to_expr(n_batch), to_expr(shape)], ctx=gast.Load())
    if shape_type.kind == "tuple" and shape_type.value is not None:
        return gast.Tuple(elts=[to_expr(n_batch)] + [to_expr(v) for v in shape_type.value],
                          ctx=gast.Load())
    return fill("(n,) + s", n=n_batch, s=shape)


def broadcast_batch(expr, typ, n_batch, writable=False):
    """An unbatched value repeated along a new leading batch axis.

    >>> from autodiff_ast.templates import unparse
    >>> unparse(broadcast_batch(fill("b"), T.array((T.N,)), fill("n_batch")))
    'np.broadcast_to(b, (n_batch, b.shape[0]))'
    """
    if typ.kind == "tuple" and typ.elts is not None:  # (a tape's placeholder tuple, say)
        parts = expr.elts if isinstance(expr, gast.Tuple) and len(expr.elts) == len(
            typ.elts) else [fill("e[k]", e=expr, k=k) for k in range(len(typ.elts))]
        return gast.Tuple(elts=[broadcast_batch(p, t, n_batch, writable)
                                for p, t in zip(parts, typ.elts)], ctx=gast.Load())
    if typ.ndim == 0:
        return fill("np.full(n, v)", n=n_batch, v=expr)
    if typ.ndim is None:
        out = fill("np.broadcast_to(e, (n,) + np.shape(e))", e=expr, n=n_batch)
    else:
        shape = gast.Tuple(elts=[to_expr(n_batch)] + [fill("e.shape[a]", e=expr, a=a)
                                                       for a in range(typ.ndim)],
                           ctx=gast.Load())
        out = fill("np.broadcast_to(e, s)", e=expr, s=shape)
    return fill("np.copy(e)", e=out) if writable else out


def replace_names(expr, subs):
    """`expr` with each Name whose id is in `subs` replaced by that expression."""
    class _Sub(gast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in subs and isinstance(node.ctx, gast.Load):
                return to_expr(subs[node.id])
            return node
    return _Sub().visit(to_expr(expr))


def _names(expr):
    return [n.id for n in gast.walk(expr) if isinstance(n, gast.Name)]


# ---------------------------------------------------------------- one call site
class BatchCall:
    """A primitive's call site under vmap.

    ``call`` is the per-example :class:`PrimCall` (its argument types are per example),
    ``value`` the per-example right-hand side as written in the core form, ``batched`` maps
    each parameter to whether its argument is batched (for list displays: a tuple with one
    flag per element), ``n_batch`` is the batch size expression, ``names`` the set of batched
    names in scope and ``types`` the per-example types of every name (for rules that look
    inside an argument, such as an index).
    """

    def __init__(self, call, value, batched, n_batch, names=None, types=None, store=False):
        self.store = store  # the call site is the target of an in-place write (getitem only)
        self.call = call
        self.rule = call.rule
        self.value = value
        self.batched = batched
        self.n_batch = n_batch
        self.names = set(names or ())
        self.types = types or {}

    def is_batched(self, param):
        flag = self.batched.get(param, False)
        return any(flag) if isinstance(flag, tuple) else bool(flag)

    def expr_batched(self, expr):
        """Whether an expression reads a batched name."""
        return any(n in self.names for n in _names(expr))

    def arg(self, param):
        return to_expr(self.call.args[param])

    def type(self, param):
        return self.call.types.get(param, T.UNKNOWN)

    def rank(self, param):
        return self.type(param).ndim

    @property
    def out_rank(self):
        return self.call.out_type.ndim if self.call.out_type is not None else None

    def aligned(self, param, rank):
        """The argument with its batch axis first and per-example rank raised to `rank`."""
        expr = self.arg(param)
        if not self.is_batched(param):
            return expr
        own = self.rank(param)
        if own is None or rank is None:
            raise NoBatchingRule(f"the rank of {param} is unknown")
        return expand_after_batch(expr, rank - own)

    def full(self, param):
        """The argument batched: broadcast along a new batch axis when it is not."""
        if self.is_batched(param):
            return self.arg(param)
        return broadcast_batch(self.arg(param), self.type(param), self.n_batch)

    def emit(self, keywords=(), **args):
        """The primal call written with some arguments replaced (param -> expression)."""
        merged = {p: a for p, a in self.call.args.items()}
        merged.update(args)
        return emit_call(self.rule, merged, tuple(self.call.keywords) + tuple(keywords))

    def axis(self, param="axis", rank_of="x"):
        return self.call.axis(param, rank_of)


def _rank_or_fail(bc, param):
    rank = bc.rank(param)
    if rank is None:
        raise NoBatchingRule(f"the rank of {param} is not known statically")
    return rank


def _shift(axis):
    if isinstance(axis, tuple):
        return tuple(a + 1 for a in axis)
    return axis + 1


def _single(axes):
    axes = tuple(axes)
    return axes[0] if len(axes) == 1 else axes


# ---------------------------------------------------------------- elementwise family
_BUILTIN_TO_NUMPY = {"abs": "np.abs", "max": "np.maximum", "min": "np.minimum",
                     "round": "np.round", "pow": "np.power"}


def _numpy_func(rule):
    """The NumPy function replacing a scalar-only callee (``math.exp``, ``max``) on arrays."""
    emit = rule.emit or ""
    if emit in _BUILTIN_TO_NUMPY:
        return _BUILTIN_TO_NUMPY[emit]
    if emit.startswith("math."):
        base = rule.name.split("@")[0]
        if hasattr(np, base):
            return f"np.{base}"
        raise NoBatchingRule(f"{emit} has no NumPy counterpart")
    return None


def elementwise(bc):
    """Operands aligned to the output's per-example rank, then the same expression.

    A per-example scalar operand becomes a vector over the batch; lower-rank batched operands
    get size-one axes after the batch axis so NumPy broadcasting lines up as per example.
    """
    rank = bc.out_rank
    if rank is None:
        raise NoBatchingRule("the result's rank is not known statically")
    subs = {}
    for param in bc.rule.params:
        if param in bc.call.args and bc.is_batched(param):
            atom = bc.call.args[param]
            if isinstance(atom, gast.Name):
                subs[atom.id] = bc.aligned(param, rank)
    expr = replace_names(bc.value, subs)
    func = _numpy_func(bc.rule)
    if func is not None and isinstance(expr, gast.Call):
        expr.func = fill(func)
    return expr


def _conversion(dtype):
    def rule(bc):
        return fill(f"x.astype(np.{dtype})", x=bc.arg("x"))
    return rule


# ---------------------------------------------------------------- reductions
def reduction(bc):
    """A reduction over per-example axes: the same axes shifted past the batch axis."""
    rank = _rank_or_fail(bc, "x")
    if rank == 0:
        if bc.rule.name in ("sum", "mean", "max", "min", "prod", "copy"):
            return bc.arg("x")
        raise NoBatchingRule("a reduction of a per-example scalar")
    axis = bc.axis()
    axes = tuple(range(rank)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    return bc.emit(keywords=("axis",), axis=to_expr(_single(_shift(axes))))


def _index_reduction(bc):
    """argmax/argmin/argsort: axis None means the flattened example."""
    rank = _rank_or_fail(bc, "x")
    x = bc.arg("x")
    if bc.call.const("axis") is None:
        flat = x if rank == 1 else fill("np.reshape(x, (n, -1))", x=x, n=bc.n_batch)
        return bc.emit(keywords=("axis",), x=flat, axis=to_expr(1))
    return bc.emit(keywords=("axis",), axis=to_expr(_shift(bc.axis())))


def _take_along_axis(bc):
    """np.take_along_axis: both operands carry the batch axis; the axis moves past it."""
    axis = bc.call.const("axis")
    if not isinstance(axis, int):
        raise NoBatchingRule("an axis that is not a constant integer")
    return bc.emit(keywords=("axis",), arr=bc.full("arr"), indices=bc.full("indices"),
                   axis=to_expr(axis if axis < 0 else axis + 1))


def _add_along_axis(bc):
    """The add_along_axis helper (take_along_axis's adjoint): every operand with the batch
    axis, the axis moved past it."""
    axis = bc.call.const("axis")
    if not isinstance(axis, int):
        raise NoBatchingRule("an axis that is not a constant integer")
    return bc.emit(keywords=("axis",), like=bc.full("like"), indices=bc.full("indices"),
                   values=bc.full("values"), axis=to_expr(axis if axis < 0 else axis + 1))


def _moved_axis(axis):
    """The axis of a batched gather or repeat: past the batch axis, or along the flattened
    examples (axis=None)."""
    if axis is None:
        return 1
    return axis if axis < 0 else axis + 1


def _flat_or_int_axis(bc, param):
    """The call's axis (None or a constant integer), with `param` the same for every example."""
    if bc.is_batched(param):
        raise NoBatchingRule(f"{param} that differ per example")
    if not constant_axis(bc.call):
        raise NoBatchingRule("an axis that is not a constant integer")
    return bc.call.const("axis")


def _gather_like(param):
    """np.take/np.repeat with the same `param` (indices, repeats) for every example: along
    the shifted axis, or along each example flattened for axis=None."""
    def rule(bc):
        axis = _flat_or_int_axis(bc, param)
        a = bc.arg("a")
        if axis is None:
            a = fill("np.reshape(a, (n, -1))", a=a, n=bc.n_batch)
        return bc.emit(keywords=("axis",), a=a, axis=to_expr(_moved_axis(axis)))
    return rule


def _added_back(param):
    """The adjoint helpers add_taken/add_repeated: `like` and `values` with the batch axis;
    for axis=None each example's values go back into that example's flattened array."""
    def rule(bc):
        axis = _flat_or_int_axis(bc, param)
        like, values = bc.full("like"), bc.full("values")
        if axis is not None:
            return bc.emit(like=like, values=values, axis=to_expr(_moved_axis(axis)))
        flat = fill("np.reshape(v, (n, -1))", v=like, n=bc.n_batch)
        spread = fill("np.reshape(v, (n, -1))", v=values, n=bc.n_batch)
        summed = bc.emit(like=flat, values=spread, axis=to_expr(1))
        return fill("np.reshape(s, np.shape(v))", s=summed, v=like)
    return rule


def _along_axis(bc):
    """A function working along one axis (np.diff): a negative axis counts from the end in
    both worlds; a non-negative one moves past the batch axis."""
    axis = bc.call.const("axis")
    if not isinstance(axis, int):
        raise NoBatchingRule("an axis that is not a constant integer")
    return bc.emit(keywords=("axis",), axis=to_expr(axis if axis < 0 else axis + 1))


def _cumsum(bc):
    rank = _rank_or_fail(bc, "x")
    axis = bc.axis()
    if axis is None:
        flat = bc.arg("x") if rank == 1 else fill("np.reshape(x, (n, -1))", x=bc.arg("x"),
                                                   n=bc.n_batch)
        return bc.emit(keywords=("axis",), x=flat, axis=to_expr(1))
    return bc.emit(keywords=("axis",), axis=to_expr(_shift(axis)))


def _average(bc):
    """np.average: the mean's batching without weights; with weights shaped like the
    example, the weighted sums' quotient over the shifted axes (vector weights along an axis
    of a matrix: once per example)."""
    if "weights" not in bc.call.args or bc.type("weights").kind == "none":
        return reduction(bc)
    rank = _rank_or_fail(bc, "x")
    if bc.call.const("returned", False) or bc.rank("weights") != rank or rank == 0:
        raise NoBatchingRule("np.average with weights that are not shaped like the array")
    axis = bc.axis()
    axes = tuple(range(rank)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    keep = ", keepdims=True" if bc.call.const("keepdims", False) else ""
    x, w = bc.full("x"), bc.full("weights")
    return fill(f"np.sum(x * w, axis=a{keep}) / np.sum(w, axis=a{keep})", x=x, w=w,
                a=_single(_shift(axes)))


def _example_axes(bc, param):
    rank = _rank_or_fail(bc, param)
    return _single(range(1, rank + 1)) if rank else None


def _whole_reduction(func):
    """Functions that reduce a whole example to one value (np.all, np.count_nonzero...)."""
    def rule(bc):
        params = [p for p in bc.rule.params if p in bc.call.args]
        if len(params) == 1:
            operand, rank = bc.arg(params[0]), _rank_or_fail(bc, params[0])
        else:  # two operands compared elementwise first
            rank = max(_rank_or_fail(bc, p) for p in params)
            a, b = (bc.aligned(p, rank) for p in params)
            operand = fill(func[1], a=a, b=b)
        if rank == 0:
            return fill(func[2], x=operand) if func[2] else operand
        axes = _single(range(1, rank + 1))
        return fill(func[0], x=operand, axes=axes)
    return rule


# ---------------------------------------------------------------- shape functions
def _reshape(bc):
    if bc.is_batched("shape"):
        raise ValueDependentShape("the new shape depends on a batched value")
    new = batch_shape(bc.n_batch, bc.arg("shape"), bc.type("shape"))
    return fill("np.reshape(x, s)", x=bc.full("x"), s=new)


def _ravel(bc):
    return fill("np.reshape(x, (n, -1))", x=bc.arg("x"), n=bc.n_batch)


def _squeeze(bc):
    x = bc.type("x")
    if x.dims is None:
        raise NoBatchingRule("squeeze of an array of unknown rank")
    axis = bc.axis()
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.dims) if d == 1)
    else:
        axes = axis if isinstance(axis, tuple) else (axis,)
    if not axes:
        return bc.arg("x")
    return fill("np.squeeze(x, axis=a)", x=bc.arg("x"), a=_single(_shift(axes)))


def _expand_dims(bc):
    rank = _rank_or_fail(bc, "x")
    axis = bc.call.const("axis")
    count = len(axis) if isinstance(axis, tuple) else 1
    axes = tuple(a % (rank + count) for a in (axis if isinstance(axis, tuple) else (axis,)))
    return fill("np.expand_dims(x, a)", x=bc.arg("x"), a=_single(_shift(axes)))


def _transpose(bc):
    rank = _rank_or_fail(bc, "x")
    if rank <= 1:
        return bc.arg("x")
    axes = bc.call.const("axes") if bc.rule.name == "transpose" else None
    perm = tuple(reversed(range(rank))) if axes is None else tuple(a % rank for a in axes)
    if rank == 2 and perm == (1, 0):
        return fill("np.swapaxes(x, 1, 2)", x=bc.arg("x"))
    return fill("np.transpose(x, p)", x=bc.arg("x"), p=(0,) + _shift(perm))


def _swapaxes(bc):
    rank = _rank_or_fail(bc, "x")
    a, b = bc.call.const("axis1"), bc.call.const("axis2")
    if not isinstance(a, int) or not isinstance(b, int):
        raise NoBatchingRule("swapaxes with axes that are not constants")
    return fill("np.swapaxes(x, a, b)", x=bc.arg("x"), a=a % rank + 1, b=b % rank + 1)


def _moveaxis(bc):
    rank = _rank_or_fail(bc, "x")
    s, d = bc.call.const("source"), bc.call.const("destination")
    if not isinstance(s, int) or not isinstance(d, int):
        raise NoBatchingRule("moveaxis with axes that are not constant integers")
    return fill("np.moveaxis(x, s, d)", x=bc.arg("x"), s=s % rank + 1, d=d % rank + 1)


def _flip(bc):
    rank = _rank_or_fail(bc, "x")
    axis = bc.axis() if "axis" in bc.call.args else None
    axes = tuple(range(rank)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    return fill("np.flip(x, a)", x=bc.arg("x"), a=_single(_shift(axes)))


def _flip_one_axis(bc):
    """np.fliplr/np.flipud: the example's axis 1 or 0, past the batch axis."""
    axis = 2 if bc.rule.name == "fliplr" else 1
    return fill("np.flip(x, a)", x=bc.arg("x"), a=axis)


def _rot90(bc):
    rank = _rank_or_fail(bc, "x")
    if _rot90_plane(bc.call) is None:
        raise NoBatchingRule("rot90 with turns or axes that are not constants")
    return fill("np.rot90(x, k, a)", x=bc.arg("x"), k=bc.call.const("k", 1),
                a=tuple(axis % rank + 1 for axis in bc.call.const("axes", (0, 1))))


def _triangle(bc):
    if bc.is_batched("k"):
        raise NoBatchingRule("a diagonal offset that differs per example")
    if _rank_or_fail(bc, "x") < 2:
        raise NoBatchingRule(f"np.{bc.call.rule.name} of a vector (it makes a matrix)")
    args = dict(bc.call.args)
    args["x"] = bc.arg("x")  # np.tril/np.triu work on the last two axes: each example's
    return emit_call(bc.call.rule, args, bc.call.keywords)


def _roll(bc):
    if bc.is_batched("shift"):
        raise NoBatchingRule("a shift that differs per example")
    rank = _rank_or_fail(bc, "x")
    x, shift = bc.arg("x"), bc.arg("shift")
    if "axis" not in bc.call.args or bc.call.const("axis") is None:
        if rank == 1:
            return fill("np.roll(x, s, 1)", x=x, s=shift)
        flat = fill("np.reshape(x, (n, -1))", x=x, n=bc.n_batch)
        return fill("np.reshape(np.roll(f, s, 1), x.shape)", f=flat, s=shift, x=x)
    return fill("np.roll(x, s, a)", x=x, s=shift, a=_shift(bc.axis()))


def _broadcast_to(bc):
    if bc.is_batched("shape"):
        raise ValueDependentShape("the target shape depends on a batched value")
    dims = _shape_dims(bc.call, "shape")
    if dims is None:
        raise NoBatchingRule("broadcast_to a shape of unknown rank")
    new = batch_shape(bc.n_batch, bc.arg("shape"), bc.type("shape"))
    return fill("np.broadcast_to(x, s)", x=bc.aligned("x", len(dims)), s=new)


def _tile(bc):
    rank = _rank_or_fail(bc, "x")
    reps = bc.call.const("reps")
    if reps is None or bc.is_batched("reps"):
        raise NoBatchingRule("tile with repetitions that are not constants")
    reps = reps if isinstance(reps, tuple) else (reps,)
    out = max(len(reps), rank)
    full = (1,) * (out - len(reps)) + tuple(reps)
    return fill("np.tile(x, r)", x=bc.aligned("x", out), r=(1,) + full)


#: np.atleast_Nd as an index of a batch, by N and the per-example rank: ":" keeps an axis,
#: "None" adds one (the batch axis is the first ":").
_ATLEAST_INDEX = {(1, 0): "x[:, None]", (2, 0): "x[:, None, None]", (2, 1): "x[:, None, :]",
                  (3, 0): "x[:, None, None, None]", (3, 1): "x[:, None, :, None]",
                  (3, 2): "x[:, :, :, None]"}


def _atleast(bc):
    rank = _rank_or_fail(bc, "x")
    template = _ATLEAST_INDEX.get((int(bc.rule.name[len("atleast_")]), rank), "x")
    return fill(template, x=bc.arg("x"))


def _identity(bc):
    return elementwise(bc) if bc.out_rank is not None else bc.value


# ---------------------------------------------------------------- joining arrays
def _pieces(bc):
    display = bc.call.args["arrays"]
    if not isinstance(display, (gast.List, gast.Tuple)):
        raise NoBatchingRule("joining a sequence that is not written out")
    types = bc.type("arrays").elts or ()
    flags = bc.batched.get("arrays", ())
    flags = flags if isinstance(flags, tuple) else (bool(flags),) * len(display.elts)
    out = []
    for elt, typ, flag in zip(display.elts, types, flags):
        out.append(to_expr(elt) if flag else broadcast_batch(elt, typ, bc.n_batch))
    return out


def join(bc):
    """concatenate/stack/hstack/np.array of a display: along the shifted axis."""
    if bc.type("arrays").kind in ("array", "float", "int", "bool"):
        return _identity(bc)  # np.array(x) of an array or a number: a copy
    axis, stacked = _join_axis(bc.call)
    if bc.type("arrays").kind == "list":  # a list of batched values (built with append)
        func = "np.stack" if stacked else "np.concatenate"
        return fill(f"{func}(p, axis=a)", p=bc.arg("arrays"), a=axis + 1)
    first = (bc.type("arrays").elts or (T.UNKNOWN,))[0]
    if bc.rule.name == "hstack" and first.ndim == 0:
        axis, stacked = 0, True  # scalars are laid side by side
    if bc.rule.name == "array" and bc.call.const("dtype") is not None:
        raise NoBatchingRule("np.array with a dtype")
    pieces = gast.Tuple(elts=_pieces(bc), ctx=gast.Load())
    func = "np.stack" if stacked else "np.concatenate"
    return fill(f"{func}(p, axis=a)", p=pieces, a=axis + 1)


#: column_stack/dstack: a batched piece of each per-example rank laid as the join lays it
_LAID_AS = {"vstack": {0: "x[:, None, None]", 1: "x[:, None, :]"},
            "column_stack": {0: "x[:, None, None]", 1: "x[:, :, None]"},
            "dstack": {k: v for (n, k), v in _ATLEAST_INDEX.items() if n == 3}}


def side_by_side(bc):
    """vstack/column_stack/dstack of a display: every piece with the batch axis and laid out
    as the join lays it, then joined along the shifted axis."""
    name = bc.rule.name
    if bc.type("arrays").kind == "list":
        raise NoBatchingRule(f"np.{name} of a list built at run time")
    types = bc.type("arrays").elts or ()
    if any(t.ndim is None for t in types):
        raise NoBatchingRule(f"np.{name} of pieces of unknown rank")
    laid = [fill(_LAID_AS[name].get(t.ndim, "x"), x=p) for p, t in zip(_pieces(bc), types)]
    axis = {"vstack": 1, "column_stack": 2, "dstack": 3}[name]
    return fill("np.concatenate(p, axis=a)", p=gast.Tuple(elts=laid, ctx=gast.Load()), a=axis)


def split(bc):
    """np.split/array_split and hsplit/vsplit/dsplit: each example cut along the same axis,
    moved past the batch axis (a negative axis counts from the end in both worlds); the
    implied axis of hsplit/vsplit/dsplit is written out, as np.split takes it."""
    if bc.is_batched("indices_or_sections"):
        raise ValueDependentShape("the pieces' sizes depend on a batched value")
    axis = split_axis(bc.call)
    if axis is None or split_cuts(bc.call) is None:
        raise NoBatchingRule("a split whose axis or cuts are not known statically")
    func = "np.array_split" if bc.rule.name == "array_split" else "np.split"
    return fill(f"{func}(x, s, axis=a)", x=bc.arg("ary"), s=bc.arg("indices_or_sections"),
                a=axis if axis < 0 else axis + 1)


# ---------------------------------------------------------------- creators
def _no_batched_shape(bc):
    for param in ("shape", "start", "stop", "step", "num", "N", "M", "k", "n"):
        if param in bc.call.args and bc.is_batched(param):
            raise ValueDependentShape(f"the {param} argument depends on a batched value")


def creator(bc):
    """np.zeros(shape)...: a batched shape cannot be batched (one shape per example); a batched
    fill value (np.full) gives one filled array per example."""
    _no_batched_shape(bc)
    return creator_with_batch(bc)


def creator_with_batch(bc):
    """A creator whose result must hold one array per example (it is written in place with
    batched values later): the same call with a leading batch axis."""
    name = bc.rule.name
    if name in ("zeros", "ones", "empty"):
        new = batch_shape(bc.n_batch, bc.arg("shape"), bc.type("shape"))
        return bc.emit(shape=new)
    if name in ("zeros_like", "ones_like", "empty_like", "full_like"):
        rank = _rank_or_fail(bc, "x")
        if bc.is_batched("x"):
            if name == "full_like":
                return bc.emit(fill_value=bc.aligned("fill_value", rank))
            return bc.value
        x = bc.arg("x")
        shape = gast.Tuple(elts=[to_expr(bc.n_batch)] + [fill("x.shape[a]", x=x, a=a)
                                                          for a in range(rank)],
                           ctx=gast.Load())
        dt = np.dtype(bc.call.out_type.dtype or "float64").name
        kw = "" if dt == "float64" else f", dtype=np.{dt}"
        if name == "full_like":
            return fill(f"np.full(s, v{kw})", s=shape, v=bc.arg("fill_value"))
        return fill(f"np.{name[:-5]}(s{kw})", s=shape)
    if name == "full":
        new = batch_shape(bc.n_batch, bc.arg("shape"), bc.type("shape"))
        dims = _shape_dims(bc.call, "shape")
        if dims is None:
            raise NoBatchingRule("np.full of a shape of unknown rank")
        dt = np.dtype(bc.call.out_type.dtype or "float64").name
        kw = "" if dt == "float64" else f", dtype=np.{dt}"
        return fill(f"np.zeros(s{kw}) + v", s=new, v=bc.aligned("fill_value", len(dims)))
    if name == "axis_index":  # collectives: the example's position along the mapped axis
        return fill("np.arange(n)", n=bc.n_batch)
    raise NoBatchingRule(f"{name} cannot hold a batch")


def _full_like(bc):
    x_rank = _rank_or_fail(bc, "x")
    return fill("np.zeros_like(x) + v", x=bc.full("x"), v=bc.aligned("fill_value", x_rank))


def _shape_query(bc):
    """np.shape/np.size/np.ndim/len of a batched array: the per-example answer (unbatched)."""
    name = bc.rule.name
    if bc.type("x").kind == "list":  # a list of batched values: as long as per example
        return bc.value
    rank = _rank_or_fail(bc, "x")
    x = bc.arg("x")
    if name == "shape":
        return gast.Tuple(elts=[fill("x.shape[a]", x=x, a=a) for a in range(1, rank + 1)],
                          ctx=gast.Load())
    if name == "len":
        return fill("x.shape[1]", x=x)
    if name == "ndim":
        return to_expr(rank)
    if rank == 0:
        return to_expr(1)
    total = fill("x.shape[1]", x=x)
    for axis in range(2, rank + 1):
        total = fill("t * x.shape[a]", t=total, x=x, a=axis)
    return total


#: Rules whose result is the same for every example even when their argument is batched.
SHAPE_QUERIES = ("shape", "size", "ndim", "len")


# ---------------------------------------------------------------- products
def _product_2d(bc, a, b, ra, rb, ba, bb, kind):
    """dot/matmul/inner of per-example ranks <= 2, some operand batched."""
    if kind == "inner" and rb == 2:  # inner(x, B) contracts B's last axis: B's transpose
        b = fill("np.swapaxes(b, 1, 2)", b=b) if bb else fill("b.T", b=b)
    if ra == 1 and rb == 1:
        if ba and bb:
            return fill("np.sum(a * b, axis=1)", a=a, b=b)
        return fill("np.dot(a, b)", a=a, b=b) if ba else fill("np.dot(b, a)", a=a, b=b)
    if ra == 2 and rb == 1:
        if ba and bb:
            return fill("np.matmul(a, b[:, :, None])[:, :, 0]", a=a, b=b)
        return fill("np.dot(a, b)", a=a, b=b) if ba else fill("np.dot(b, a.T)", a=a, b=b)
    if ra == 1 and rb == 2:
        if ba and bb:
            return fill("np.matmul(a[:, None, :], b)[:, 0, :]", a=a, b=b)
        return fill("np.dot(a, b)", a=a, b=b) if ba else fill("np.matmul(a, b)", a=a, b=b)
    if ra == 2 and rb == 2:
        return fill("np.dot(a, b)", a=a, b=b) if ba and not bb else \
            fill("np.matmul(a, b)", a=a, b=b)
    raise NoBatchingRule(f"a product of ranks {ra} and {rb}")


def product(bc):
    """dot/matmul/inner: a batched matmul or a sum of products (einsum-free, as Numba needs)."""
    ra, rb = _rank_or_fail(bc, "a"), _rank_or_fail(bc, "b")
    ba, bb = bc.is_batched("a"), bc.is_batched("b")
    if ra == 0 or rb == 0:
        rank = max(ra, rb)
        return fill("a * b", a=bc.aligned("a", rank), b=bc.aligned("b", rank))
    a, b = bc.arg("a"), bc.arg("b")
    if ra <= 2 and rb <= 2:
        return _product_2d(bc, a, b, ra, rb, ba, bb, bc.rule.name)
    if bc.rule.name == "matmul" and ra >= 2 and rb >= 2:
        rank = max(ra, rb)  # stacks of matrices: line the stack axes up behind the batch axis
        return fill("np.matmul(a, b)", a=bc.aligned("a", rank), b=bc.aligned("b", rank))
    raise NoBatchingRule(f"{bc.rule.name} of ranks {ra} and {rb}")


def _vdot(bc):
    ra, rb = _rank_or_fail(bc, "a"), _rank_or_fail(bc, "b")
    if ra != 1 or rb != 1:
        raise NoBatchingRule("vdot of arrays that are not vectors")
    return _product_2d(bc, bc.arg("a"), bc.arg("b"), 1, 1, bc.is_batched("a"),
                       bc.is_batched("b"), "dot")


def _outer(bc):
    if _rank_or_fail(bc, "a") != 1 or _rank_or_fail(bc, "b") != 1:
        raise NoBatchingRule("outer of arrays that are not vectors")
    a, b = bc.arg("a"), bc.arg("b")
    a = fill("a[:, :, None]", a=a) if bc.is_batched("a") else fill("a[:, None]", a=a)
    b = fill("b[:, None, :]", b=b) if bc.is_batched("b") else b
    return fill("a * b", a=a, b=b)


def _kron(bc):
    """kron of vectors or of matrices per example: each pair of entries multiplied with the
    batch axis shared, then laid out as the example's kron lays them."""
    ra, rb = _rank_or_fail(bc, "a"), _rank_or_fail(bc, "b")
    a, b = bc.full("a"), bc.full("b")
    if ra == rb == 1:
        return fill("np.reshape(a[:, :, None] * b[:, None, :], (n, -1))", a=a, b=b,
                    n=bc.n_batch)
    if ra == rb == 2:
        pairs = fill("a[:, :, None, :, None] * b[:, None, :, None, :]", a=a, b=b)
        return fill("np.reshape(p, (n, a.shape[1] * b.shape[1], -1))", p=pairs, a=a, b=b,
                    n=bc.n_batch)
    raise NoBatchingRule(f"kron of ranks {ra} and {rb}")


def _einsum(bc):
    from .linalg import parse_subscripts
    spec = bc.call.const("subscripts")
    display = bc.call.args["operands"]
    flags = bc.batched.get("operands", ())
    try:
        ins, out = parse_subscripts(spec, len(display.elts))
    except (ValueError, AttributeError):
        raise NoBatchingRule("einsum subscripts that are not constant") from None
    free = [c for c in reversed(string.ascii_letters) if c not in spec]
    letter = free[0]
    ins = [letter + s if f else s for s, f in zip(ins, flags)]
    spec2 = ",".join(ins) + "->" + letter + out
    return gast.Call(func=fill("np.einsum"), args=[gast.Constant(value=spec2, kind=None)] +
                     [to_expr(e) for e in display.elts], keywords=[])


def _as_einsum(bc, einsum_call, param):
    """Batch a product through the einsum it computes (multi_dot, tensordot)."""
    if einsum_call is None:
        raise NoBatchingRule(f"{bc.rule.name} of operands of unknown rank")
    if param is None:  # two operands, a and b
        flags = (bc.is_batched("a"), bc.is_batched("b"))
    else:
        flags = bc.batched.get(param, ())
        flags = flags if isinstance(flags, tuple) else (bool(flags),) * len(
            bc.call.args[param].elts)
    inner = BatchCall(einsum_call, bc.value, {"operands": flags}, bc.n_batch, bc.names,
                      bc.types)
    return _einsum(inner)


def _multi_dot(bc):
    from .linalg import _multi_dot_einsum
    return _as_einsum(bc, _multi_dot_einsum(bc.call), "arrays")


def _tensordot(bc):
    from .linalg import _tensordot_einsum
    return _as_einsum(bc, _tensordot_einsum(bc.call), None)


def _cross(bc):
    """np.cross works on the last axis and broadcasts the others: operands lined up."""
    rank = bc.out_rank
    if rank is None:
        raise NoBatchingRule("the result's rank is not known statically")
    return fill("np.cross(a, b)", a=bc.aligned("a", rank), b=bc.aligned("b", rank))


def _trace(bc):
    if _rank_or_fail(bc, "x") != 2:
        raise NoBatchingRule("trace of an array that is not a matrix")
    return fill("np.sum(x * np.eye(x.shape[1], x.shape[2]), axis=(1, 2))", x=bc.arg("x"))


def _diag(bc):
    rank = _rank_or_fail(bc, "x")
    x = bc.arg("x")
    if bc.call.rule.name == "diagonal":
        from .linalg import diagonal_axes
        if diagonal_axes(bc.call) is None:
            raise NoBatchingRule("np.diagonal with an offset, or of axes other than the last "
                                 "two")
        return fill(f"np.diagonal(x, axis1={rank - 1}, axis2={rank})", x=x)
    if rank == 1:
        return fill("x[:, :, None] * np.eye(x.shape[1])", x=x)
    return fill("np.diagonal(x, axis1=1, axis2=2)", x=x)


def _diagflat(bc):
    """Each example flattened onto the k-th diagonal: the vector padded with |k| zeros (after
    it for k > 0, before it for k < 0) times np.eye(m, m, k) puts entry i at column i + k."""
    k = bc.call.const("k", 0)
    if bc.is_batched("k") or not isinstance(k, int):
        raise NoBatchingRule("a diagonal offset that is not a constant")
    flat = fill("np.reshape(v, (n, -1))", v=bc.arg("x"), n=bc.n_batch)
    if k > 0:
        flat = fill("np.concatenate((f, np.zeros((n, k))), axis=1)", f=flat, n=bc.n_batch, k=k)
    elif k < 0:
        flat = fill("np.concatenate((np.zeros((n, k)), f), axis=1)", f=flat, n=bc.n_batch,
                    k=-k)
    return fill("f[:, :, None] * np.eye(f.shape[1], f.shape[1], k)", f=flat, k=k)


def _norm(bc):
    from .linalg import MATRIX_NORMS, norm_kind
    kind = norm_kind(bc.call)
    if kind is None:
        raise NoBatchingRule("norm with this ord and axis (a pair of axes, a stack)")
    rank = _rank_or_fail(bc, "x")
    axis = bc.axis()
    if kind in MATRIX_NORMS.values():  # each example's matrix: the two axes after the batch's
        return bc.emit(keywords=("axis",), axis=to_expr((1, 2)))
    if axis is None and rank > 1:  # the Frobenius norm of the whole example
        axes = tuple(range(rank))
        keep = ", keepdims=True" if bc.call.const("keepdims", False) else ""
        return fill(f"np.sqrt(np.sum(x * x, axis=a{keep}))", x=bc.arg("x"), a=_shift(axes))
    return bc.emit(keywords=("axis",), axis=to_expr(_shift(0 if axis is None else axis)))


def _solve(bc):
    """Each example's solve, the batch axis kept outermost: NumPy lines up the stack axes
    of a and b from the right, so the one with fewer gets size-one axes after the batch
    axis; a batched vector b becomes a column (NumPy 2 reads a 1-D b only as a vector)."""
    ra, rb = _rank_or_fail(bc, "a"), _rank_or_fail(bc, "b")
    a, b = bc.arg("a"), bc.arg("b")
    if rb == 1:
        if not bc.is_batched("b"):
            return fill("np.linalg.solve(a, b)", a=a, b=b)
        if ra == 2 and not bc.is_batched("a"):
            # one matrix, a vector per example: one solve with a column per example (one
            # factorization; Numba's solve takes a matrix and a matrix, not a stack)
            return fill("np.linalg.solve(a, b.T).T", a=a, b=b)
        return fill("np.linalg.solve(a, b[..., None])[..., 0]", a=a,
                    b=expand_after_batch(b, ra - 2))
    if bc.is_batched("a") and rb > ra:
        a = expand_after_batch(a, rb - ra)
    if bc.is_batched("b") and ra > rb:
        b = expand_after_batch(b, ra - rb)
    return fill("np.linalg.solve(a, b)", a=a, b=b)


def _stacked(bc):
    """inv/det/slogdet/cholesky/svd/pinv/matrix_power...: NumPy's linalg already maps over
    leading axes."""
    return bc.value


def _polyval(bc):
    """np.polyval is elementwise in x; batched coefficients (one polynomial per example) sum
    p[b, k] * x ** (n - 1 - k) along a last axis of powers."""
    if not bc.is_batched("p"):
        return bc.value
    rank = bc.out_rank
    if rank is None or bc.type("p").kind != "array":
        raise NoBatchingRule("batched coefficients of a polyval of unknown rank")
    x = bc.arg("x")
    points = fill("x[..., None]", x=x) if bc.is_batched("x") or bc.type("x").kind == "array" \
        else x
    return fill("np.sum(p * x ** np.arange(p.shape[-1] - 1, -1, -1), axis=-1)",
                p=expand_after_batch(bc.arg("p"), rank), x=points)


def _rows_of_examples(bc, param):
    """A batched cov/corrcoef argument with each example's variables as rows."""
    if bc.call.const("rowvar", True) is False:
        return fill("np.swapaxes(m, 1, 2)", m=bc.arg(param))
    return bc.arg(param)


def _cov(bc):
    """np.cov of each example: centered rows times their transpose, or a number per example
    for one variable (NumPy squeezes)."""
    from .numerical import _centered, _count, _cov_form, _one_variable
    form = _cov_form(bc.call)
    if form is None:
        raise NoBatchingRule("np.cov with a second array, weights or a dtype")
    rows = _rows_of_examples(bc, "m")
    c = _centered(rows)
    n = _count(rows, form[1])
    if _one_variable(bc.call):
        axes = (1,) if bc.rank("m") == 1 else (1, 2)
        return fill("np.sum(c * c, axis=k) / n", c=c, k=axes, n=n)
    return fill("np.matmul(c, np.swapaxes(c, 1, 2)) / n", c=c, n=n)


def _corrcoef(bc):
    """np.corrcoef of each example: unit-length centered rows times their transpose, clipped
    to [-1, 1] as NumPy does."""
    from .numerical import _centered, _corrcoef_handled
    if not _corrcoef_handled(bc.call):
        raise NoBatchingRule("np.corrcoef of a vector, or with a second array")
    c = _centered(_rows_of_examples(bc, "x"))
    z = fill("c / np.sqrt(np.sum(c * c, axis=-1, keepdims=True))", c=c)
    return fill("np.clip(np.matmul(z, np.swapaxes(z, 1, 2)), -1.0, 1.0)", z=z)


def _along_points(*tables):
    """Functions elementwise in one argument and reading whole tables from the others
    (np.interp's x, np.searchsorted's v): batched points alone keep the call as written."""
    def rule(bc):
        if any(bc.is_batched(p) for p in tables):
            raise NoBatchingRule(f"batched {'/'.join(tables)}: run per example")
        return bc.value
    return rule


def _trapezoid(bc):
    """np.trapezoid of batched y along its axis shifted by one; x a vector (or dx) shared by
    the examples. Batched x or dx run per example."""
    if bc.is_batched("x") or bc.is_batched("dx"):
        raise NoBatchingRule("np.trapezoid with batched x or dx: run per example")
    rank = _rank_or_fail(bc, "y")
    axis = bc.call.const("axis", -1)
    if not isinstance(axis, int):
        raise NoBatchingRule("np.trapezoid's axis is not a constant")
    return bc.emit(keywords=("axis",), axis=to_expr(axis % rank + 1))


def _convolve(bc):
    """np.convolve takes vectors only: each example runs its own."""
    raise NoBatchingRule("np.convolve of batched vectors: one convolve per example")


def _bincount(bc):
    """np.bincount with batched weights and unbatched bins: every example has the same length
    L = max(max(x) + 1, minlength), so example b counts into bins b * L + x of one long
    bincount. Batched bins (lengths that may differ per example) run per example."""
    if bc.is_batched("x") or bc.is_batched("minlength") or bc.rank("x") != 1:
        raise NoBatchingRule("np.bincount with batched bins: run per example")
    x, n = bc.arg("x"), bc.n_batch
    length = fill("np.max(x) + 1", x=x)
    if "minlength" in bc.call.args:
        length = fill("np.maximum(l, m)", l=length, m=bc.arg("minlength"))
    bins = fill("np.ravel(x + l * np.arange(n)[:, None])", x=x, l=length, n=n)
    counted = fill("np.bincount(b, weights=np.ravel(w), minlength=n * l)", b=bins,
                   w=bc.full("weights"), n=n, l=length)
    return fill("np.reshape(c, (n, l))", c=counted, n=n, l=length)


# ---------------------------------------------------------------- indexing
def _is_array_index(typ):
    return typ.kind == "array"


def _index_parts(index):
    return list(index.elts) if isinstance(index, gast.Tuple) else [index]


def _is_marker(part):
    return isinstance(part, gast.Constant) and (part.value is None or part.value is Ellipsis)


def getitem(bc):
    """x[index] with a batched array, a batched index, or both (a gather)."""
    from ..normalize import atom_type
    index = bc.call.args["index"]
    parts = _index_parts(index)
    types = [T.AType("object") if isinstance(p, gast.Slice) else atom_type(p, bc.types)
             for p in parts]
    batched = [bc.expr_batched(p) for p in parts]
    x = bc.arg("x")
    if bc.type("x").kind == "tuple":
        return bc.value
    advanced = [k for k, (p, t) in enumerate(zip(parts, types))
                if not isinstance(p, gast.Slice) and not _is_marker(p) and
                (_is_array_index(t) or batched[k])]
    if not any(batched):
        if advanced:
            advanced = sorted(set(advanced) | {k for k, t in enumerate(types)
                                               if t.kind in ("int", "bool")})
        if len(advanced) > 1 and advanced != list(range(advanced[0], advanced[-1] + 1)):
            raise NoBatchingRule("advanced indices separated by a slice")
        gathered = subscript(x, [_slice()] + [to_expr(p) for p in parts])
        out_type = getattr(bc.call, "out_type", None)
        if not advanced and not bc.store and out_type is not None and \
                out_type.kind in ("float", "int", "bool"):
            # One number per example was a copy; the batched column x[:, i] would be a view
            # of x, which later in-place writes to x must not change.
            return fill("g.copy()", g=gathered)
        return gathered
    if any(batched[k] for k, p in enumerate(parts) if isinstance(p, gast.Slice)):
        # x[i:i + 2] with i per example: a window whose place (or x[i:] whose length)
        # differs per example
        raise ValueDependentShape("a slice whose bounds differ per example")
    for k in advanced:
        if batched[k] and types[k].kind == "array" and types[k].dtype == "bool":
            raise ValueDependentShape("a boolean mask that differs per example")
    # Integer scalars count as advanced indices once an array index is present.
    ints = [k for k, t in enumerate(types) if t.kind in ("int", "bool") and
            not isinstance(parts[k], gast.Slice)]
    advanced = sorted(set(advanced) | set(ints))
    ranks = [types[k].ndim or 0 for k in advanced]
    if any(types[k].ndim is None for k in advanced):
        raise NoBatchingRule("an index of unknown rank")
    s = max(ranks) if ranks else 0
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    before = sum(1 for p in parts[:advanced[0]]
                 if isinstance(p, gast.Slice) or (isinstance(p, gast.Constant) and p.value is None))
    lands_first = not adjacent or before == 0
    if s > 0 and not lands_first and (s > 1 or not bc.is_batched("x") or bc.store):
        raise NoBatchingRule("a batched index array in the middle of the index")
    new_parts = []
    for k, p in enumerate(parts):
        if batched[k]:
            new_parts.append(expand_after_batch(p, s - (types[k].ndim or 0)))
        else:
            new_parts.append(to_expr(p))
    if not bc.is_batched("x") and advanced == [0] and batched[0]:
        return subscript(x, new_parts)  # x[i]: the batched index alone picks the rows
    if not bc.is_batched("x"):
        if s == 0 and adjacent and before > 0:
            # x[:, i] with a batched i: the gathered axis lands where i stood; move it first.
            return fill("np.moveaxis(e, b, 0)", e=subscript(x, new_parts), b=before)
        if not lands_first:
            raise NoBatchingRule("a gather whose batch axis would not come first")
        x = broadcast_batch(x, bc.type("x"), bc.n_batch)
    rows = expand_after_batch(fill("np.arange(n)", n=bc.n_batch), s)
    gathered = subscript(x, [rows] + new_parts)
    if s > 0 and not lands_first:
        # x[:, idx]: the gathered axis comes first after the batch axis; put it back in place.
        return fill("np.moveaxis(e, 1, b)", e=gathered, b=before + 1)
    return gathered


# ---------------------------------------------------------------- the table
BATCHING = {}
#: rules whose result is the same for every example (collectives: psum, pmean, ...)
SAME_FOR_EVERY_EXAMPLE = ("psum", "pmean", "pmax", "pmin", "all_gather")


def _register(names, fn):
    for name in names:
        BATCHING[name] = fn


_ELEMENTWISE = tuple(PARTIALS) + tuple(PIECEWISE_CONSTANT) + (
    "power", "where", "clip", "copy", "asarray", "astype", "isclose", "equal", "not_equal",
    "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "logical_xor", "logical_not", "zeros_like", "ones_like", "empty_like")
_register(_ELEMENTWISE, elementwise)
_register(("float",), _conversion("float64"))
_register(("float64",), _conversion("float64"))
_register(("float32",), _conversion("float32"))
_register(("int",), _conversion("int64"))
_register(("sum", "mean", "prod", "max", "min", "var", "std", "median", "ptp", "nansum",
           "nanmean"), reduction)
_register(("argmax", "argmin", "argsort", "argpartition", "sort"), _index_reduction)
_register(("take_along_axis",), _take_along_axis)
_register(("add_along_axis",), _add_along_axis)
_register(("cumsum", "cumprod"), _cumsum)


def _along_last_axis(bc):
    """A helper that works along the last axis of each example (prod_others): the batch
    axis in front changes nothing."""
    _rank_or_fail(bc, "x")
    return bc.emit()


_register(("prod_others",), _along_last_axis)


def _along_last_axis_together(bc):
    """A helper of x and tangents shaped like x, along the last axis (prod_others_tangent):
    every argument given the batch axis, so their rows pair up."""
    _rank_or_fail(bc, "x")
    return bc.emit(**{param: bc.full(param) for param in bc.call.args})


_register(("prod_others_tangent",), _along_last_axis_together)
_register(("average",), _average)
_register(("take",), _gather_like("indices"))
_register(("add_taken",), _added_back("indices"))
_register(("repeat",), _gather_like("repeats"))
_register(("add_repeated",), _added_back("repeats"))
_register(("diff",), _along_axis)
_register(("all",), _whole_reduction(("np.all(x, axis=axes)", "a == b", None)))
_register(("any",), _whole_reduction(("np.any(x, axis=axes)", "a == b", None)))
_register(("allclose",), _whole_reduction(("np.all(x, axis=axes)", "np.isclose(a, b)", None)))
_register(("array_equal",), _whole_reduction(("np.all(x, axis=axes)", "a == b", None)))
_register(("count_nonzero",), _whole_reduction(("np.sum(x != 0, axis=axes)", "a == b",
                                                 "(x != 0) * 1")))
_register(("reshape",), _reshape)
_register(("ravel",), _ravel)
_register(("squeeze",), _squeeze)
_register(("expand_dims",), _expand_dims)
_register(("transpose", "T"), _transpose)
_register(("swapaxes",), _swapaxes)
_register(("moveaxis",), _moveaxis)
_register(("flip",), _flip)
_register(("fliplr", "flipud"), _flip_one_axis)
_register(("rot90",), _rot90)
_register(("roll",), _roll)
_register(("tril", "triu"), _triangle)
_register(("broadcast_to",), _broadcast_to)
_register(("tile",), _tile)
_register(("atleast_1d", "atleast_2d", "atleast_3d"), _atleast)
_register(("concatenate", "stack", "hstack", "array"), join)
_register(("vstack", "column_stack", "dstack"), side_by_side)
_register(("split", "array_split", "hsplit", "vsplit", "dsplit"), split)
_register(("zeros", "ones", "empty", "full", "arange", "linspace", "eye", "identity"), creator)
_register(("full_like",), _full_like)
_register(SHAPE_QUERIES, _shape_query)
_register(("deepcopy",), lambda bc: bc.value)  # a copy of the batched value, as it is
_register(("dot", "matmul", "inner"), product)
_register(("vdot",), _vdot)
_register(("outer",), _outer)
_register(("kron",), _kron)
_register(("einsum",), _einsum)
_register(("multi_dot",), _multi_dot)
_register(("tensordot",), _tensordot)
_register(("cross",), _cross)
_register(("trace",), _trace)
_register(("diag", "diagonal"), _diag)
_register(("diagflat",), _diagflat)
_register(("norm",), _norm)
_register(("solve",), _solve)
_register(("inv", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "svd", "pinv",
           "matrix_power"), _stacked)
_register(("polyval",), _polyval)
_register(("cov",), _cov)
_register(("corrcoef",), _corrcoef)
_register(("interp",), _along_points("xp", "fp"))
_register(("searchsorted",), _along_points("a", "sorter"))
_register(("bincount",), _bincount)
_register(("trapezoid",), _trapezoid)
_register(("convolve",), _convolve)
_register(("getitem",), getitem)


def _per_example_index(bc):
    """The index helpers of code with small vectors as scalars (lengths in, an index out):
    the same for every example while the lengths are."""
    if any(bc.is_batched(p) for p in bc.call.args):
        raise NoBatchingRule(f"{bc.rule.name} of a batched length")
    return bc.value


_register(("broadcast_index", "slice_index", "store_index", "same_length", "slice_start",
           "slice_length"), _per_example_index)


def rule_for(name):
    """The batching rule of a primitive (aliases such as ``exp@math.exp`` share their base's).

    >>> rule_for("exp@math.exp") is elementwise
    True
    """
    if name in BATCHING:
        return BATCHING[name]
    return BATCHING.get(name.split("@")[0])


def batch(bc):
    """The batched right-hand side of one call site; raises NoBatchingRule/ValueDependentShape.
    """
    rule = rule_for(bc.rule.name)
    if rule is None:
        raise NoBatchingRule(f"{bc.rule.emit or bc.rule.name} has no batching rule")
    return rule(bc)


__all__ = ["BATCHING", "BatchCall", "NoBatchingRule", "ValueDependentShape", "batch",
           "broadcast_batch", "creator_with_batch", "expand_after_batch", "rule_for",
           "SHAPE_QUERIES", "batch_shape", "replace_names", "subscript"]


def _python_object(bc):
    """range()/slice() built from batched bounds: a different object per example."""
    raise ValueDependentShape(f"{bc.rule.name}() of a batched value differs per example")


_register(("range", "slice"), _python_object)
