"""Structural primitives: reductions, shape functions, indexing, creators, and functions
whose outputs carry no derivative. Each is a short hand-written template.

>>> from autodiff_ast.rules import by_name
>>> by_name("sum").linear
True
"""

from __future__ import annotations

import copy

import numpy as np

from .. import types as T
from ..templates import fill, summed, to_expr
from . import Rule, all_rules, register, register_helper


def _dims_without(dims, axis, keepdims):
    if dims is None:
        return None
    axes = set(range(len(dims))) if axis is None else (
        set(axis) if isinstance(axis, tuple) else {axis})
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(dims))
    return tuple(d for i, d in enumerate(dims) if i not in axes)


def _infer_reduction(call):
    x = call.types["x"]
    dtype = "float64" if x.dtype in (None, "float64") else x.dtype
    if call.rule.name in ("sum", "prod", "cumsum", "max", "min", "ptp") and x.dtype and \
            x.dtype.startswith(("int", "bool")):
        dtype = "int64"
    if x.kind == "float" or x.kind == "int":
        return T.array((), dtype)
    if x.kind != "array" or x.dims is None:
        return T.AType("array", dtype, None) if call.const("axis") is not None else T.FLOAT
    dims = _dims_without(x.dims, call.axis(), bool(call.const("keepdims", False)))
    return T.array(dims, dtype)


def expand_like_input(call, value):
    """`value`, a reduced result or its cotangent, with the reduced axes put back as size 1.

    Returns the expression and its abstract type (broadcastable against the input).
    """
    x = call.types["x"]
    axis = call.axis()
    keepdims = bool(call.const("keepdims", False))
    if x.kind == "array" and x.dims is None and axis is not None and not keepdims:
        # any rank: np.expand_dims counts negative axes from the end, as the reduction did
        expr = fill("np.expand_dims(v, a)", v=value, a=axis)
        return expr, T.AType("array", call.out_type.dtype, None)
    if x.kind != "array" or x.dims is None:
        return to_expr(value), call.out_type
    if axis is None:
        return to_expr(value), call.out_type if keepdims else T.FLOAT
    axes = sorted(axis) if isinstance(axis, tuple) else [axis]
    expr = to_expr(value)
    if not keepdims:
        for a in axes:
            expr = fill("np.expand_dims(v, a)", v=expr, a=a)
    dims = tuple(1 if i in axes else d for i, d in enumerate(x.dims))
    return expr, T.array(dims, call.out_type.dtype)


def _unreduced(call, value):
    """`value`, reduced over the call's axes WITHOUT keepdims (whatever the call says), with
    those axes put back as size 1."""
    axis = call.axis()
    if call.ndim("x") is None:  # any rank: one call, negative axes counted from the end
        return fill("np.expand_dims(v, a)", v=value, a=axis)
    for a in sorted(axis) if isinstance(axis, tuple) else [axis]:
        value = fill("np.expand_dims(v, a)", v=value, a=a)
    return value


def _reduced_like_x(call, func, value):
    """`func(value)` (np.sum, np.max...) over the call's axes, those axes put back as size 1
    so that it broadcasts against x (a number when the call reduces the whole array)."""
    axis = call.axis()
    if axis is None:
        return fill(f"{func}(v)", v=value)
    return _unreduced(call, fill(f"{func}(v, axis=a)", v=value, a=axis))


def _count(call):
    x = call.args["x"]
    axis = call.axis()
    if axis is None:
        typ = call.types["x"]
        if typ.kind != "array":
            return to_expr(1)  # the mean of a number is that number
        # np.size also takes a Python float passed where any rank was allowed
        return fill("np.size(x)" if typ.dims is None else "x.size", x=x)
    axes = axis if isinstance(axis, tuple) else (axis,)
    total = fill("x.shape[a]", x=x, a=axes[0])
    for a in axes[1:]:
        total = fill("t * x.shape[a]", t=total, x=x, a=a)
    return total


def _relinear(call, dots, param="x"):
    """Forward rule of a function linear in `param`: the same call on the tangent."""
    args = dict(call.args)
    args[param] = dots[param]
    return emit_call(call.rule, args, call.keywords)


def emit_call(rule, args, keywords=()):
    """The primal call written with `args` (param -> expr): positionals, then keywords."""
    import gast
    positional, kw = [], []
    for p in rule.params:
        if p not in args:
            continue
        if p in keywords or (kw and p not in keywords):
            kw.append(gast.keyword(arg=p, value=to_expr(args[p])))
        else:
            positional.append(to_expr(args[p]))
    func = fill(rule.emit)
    return gast.Call(func=func, args=positional, keywords=kw)


def _sum_vjp(call, g):
    expr, typ = expand_like_input(call, g)
    return {"x": (expr, typ)}


def _mean_vjp(call, g):
    expr, typ = expand_like_input(call, g)
    return {"x": (fill("e / n", e=expr, n=_count(call)), typ)}


def _prod_others(call):
    """For each entry of x, the product of the other entries the call multiplies
    (np.prod's derivative), right where x has zeros (``y / x`` was 0 / 0 there): the
    helper prod_others along the call's axis, flattened first for axis=None; None for a
    tuple of axes (``y / x`` then)."""
    x, axis, rank = call.args["x"], call.axis(), call.ndim("x")
    if isinstance(axis, tuple) or (axis is not None and rank is None):
        return None
    if axis is None:
        flat = fill("prod_others(np.ravel(x))", x=x)
        return flat if rank == 1 else fill("e.reshape(np.shape(x))", e=flat, x=x)
    if axis == rank - 1:
        return fill("prod_others(x)", x=x)
    return fill("np.moveaxis(prod_others(np.moveaxis(x, a, -1)), -1, a)", x=x, a=axis)


def _prod_vjp(call, g):
    ge, typ = expand_like_input(call, g)
    others = _prod_others(call)
    if others is None:
        ye, _ = expand_like_input(call, call.out)
        return {"x": (fill("ge * ye / x", ge=ge, ye=ye, x=call.args["x"]), call.types["x"])}
    return {"x": (fill("ge * o", ge=ge, o=others), call.types["x"])}


def _prod_jvp(call, dots):
    others = _prod_others(call)
    if others is None:
        others = fill("ye / x", ye=expand_like_input(call, call.out)[0], x=call.args["x"])
    return reduce_sum(call, fill("d * o", d=dots["x"], o=others))


def _ties(call, ye):
    """(where x equals the chosen value `ye`, expanded like x; the number of such ties)."""
    mask = fill("x == ye", x=call.args["x"], ye=ye)
    return mask, _reduced_like_x(call, "np.sum", mask)


def _tie_shares(call, ye):
    """Where x equals the chosen value `ye` (expanded like x), 1 / the number of such ties."""
    mask, count = _ties(call, ye)
    return fill("m / c", m=mask, c=count)


def _chooser_vjp(call, g):
    """max/min: the cotangent is shared equally between the tied winners (JAX's rule).
    Written `g * m / c`, the form codegen/tie_shares.py adds in place."""
    ge, _ = expand_like_input(call, g)
    ye, _ = expand_like_input(call, call.out)
    mask, count = _ties(call, ye)
    return {"x": (fill("ge * m / c", ge=ge, m=mask, c=count), call.types["x"])}


def reduce_sum(call, expr):
    """``np.sum(expr)`` over the axes `call` reduces, keeping them when it keeps them."""
    axis = call.axis()
    keep = bool(call.const("keepdims", False))
    if axis is None:
        return fill("np.sum(e, keepdims=True)" if keep else "np.sum(e)", e=expr)
    return fill("np.sum(e, axis=a, keepdims=True)" if keep else "np.sum(e, axis=a)", e=expr,
                a=axis)


def _chooser_jvp(call, dots):
    ye, _ = expand_like_input(call, call.out)
    mask = fill("x == ye", x=call.args["x"], ye=ye)
    return fill("s / c", s=reduce_sum(call, fill("d * m", d=dots["x"], m=mask)),
                c=reduce_sum(call, mask))


def _centered(call):
    x = call.args["x"]
    return fill("x - m", x=x, m=_reduced_like_x(call, "np.mean", x))


def _var_vjp(call, g):
    ge, _ = expand_like_input(call, g)
    ddof = call.const("ddof", 0) or 0
    n = _count(call) if not ddof else fill("n - d", n=_count(call), d=ddof)
    return {"x": (fill("ge * 2.0 * c / n", ge=ge, c=_centered(call), n=n), call.types["x"])}


def _var_jvp(call, dots):
    ddof = call.const("ddof", 0) or 0
    n = _count(call) if not ddof else fill("n - d", n=_count(call), d=ddof)
    prod = fill("2.0 * c * d", c=_centered(call), d=dots["x"])
    return fill("t / n", t=reduce_sum(call, prod), n=n)


def _std_vjp(call, g):
    ge, _ = expand_like_input(call, g)
    ye, _ = expand_like_input(call, call.out)
    ddof = call.const("ddof", 0) or 0
    n = _count(call) if not ddof else fill("n - d", n=_count(call), d=ddof)
    return {"x": (fill("ge * c / (n * ye)", ge=ge, c=_centered(call), n=n, ye=ye),
                  call.types["x"])}


def _std_jvp(call, dots):
    return fill("v / (2.0 * y)", v=_var_jvp(call, dots), y=call.out)


def _cumsum_vjp(call, g):
    axis = call.axis()
    x = call.types["x"]
    if axis is None:
        expr = fill("np.cumsum(g[::-1])[::-1]", g=g)
        if x.ndim != 1:
            expr = fill("e.reshape(x.shape)", e=expr, x=call.args["x"])
        return {"x": (expr, x)}
    return {"x": (fill("np.flip(np.cumsum(np.flip(g, a), axis=a), a)", g=g, a=axis), x)}


_REDUCTION = ("x", "axis", "dtype", "out", "keepdims")
register(Rule("sum", "np.sum", _REDUCTION, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _sum_vjp, _relinear, linear=True), np.sum)
register(Rule("mean", "np.mean", _REDUCTION, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _mean_vjp, _relinear, linear=True), np.mean)
register(Rule("prod", "np.prod", _REDUCTION, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _prod_vjp, _prod_jvp), np.prod)
# prod_others(x) (the helper the rule above emits) differentiated again, for hessian(np.prod):
# d o_j / d x_k is the product of the entries other than j and k, symmetric in j and k, so one
# helper (prod_others_tangent, no division by x: right where x has zeros) gives both the
# tangent and the cotangent. Its own derivative in x (third derivatives of np.prod, fully
# symmetric too) is prod_others_second, whose loops are differentiated as written beyond that.
register_helper(Rule(
    "prod_others", "prod_others", ("x",), {}, ("x",), lambda call: call.types["x"],
    lambda call, g: {"x": (fill("prod_others_tangent(x, g)", g=g, x=call.args["x"]),
                           call.types["x"])},
    lambda call, dots: fill("prod_others_tangent(x, d)", d=dots["x"], x=call.args["x"])),
    "prod_others")


def _prod_others_tangent_vjp(call, g):
    x, d = call.args["x"], call.args["d"]
    return {"x": (fill("prod_others_second(x, g, d)", x=x, g=g, d=d), call.types["x"]),
            "d": (fill("prod_others_tangent(x, g)", x=x, g=g), call.types["d"])}


def _prod_others_tangent_jvp(call, dots):
    x, d = call.args["x"], call.args["d"]
    terms = []
    if "d" in dots:
        terms.append(fill("prod_others_tangent(x, t)", x=x, t=dots["d"]))
    if "x" in dots:
        terms.append(fill("prod_others_second(x, d, t)", x=x, d=d, t=dots["x"]))
    return summed(terms)


register_helper(Rule(
    "prod_others_tangent", "prod_others_tangent", ("x", "d"), {}, ("x", "d"),
    lambda call: call.types["x"], _prod_others_tangent_vjp, _prod_others_tangent_jvp),
    "prod_others_tangent")
_CHOOSER = ("x", "axis", "out", "keepdims")
register(Rule("max", "np.max", _CHOOSER, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _chooser_vjp, _chooser_jvp), np.max, np.amax)
register(Rule("min", "np.min", _CHOOSER, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _chooser_vjp, _chooser_jvp), np.min, np.amin)


# ptp(x) = max(x) - min(x): each end shares its part of the cotangent between its ties, as
# np.max and np.min do (jnp.ptp is max - min).
def _ptp_weights(call):
    x = call.args["x"]
    return fill("h - l", h=_tie_shares(call, _reduced_like_x(call, "np.max", x)),
                l=_tie_shares(call, _reduced_like_x(call, "np.min", x)))


def _ptp_vjp(call, g):
    ge, _ = expand_like_input(call, g)
    return {"x": (fill("ge * w", ge=ge, w=_ptp_weights(call)), call.types["x"])}


def _ptp_jvp(call, dots):
    return reduce_sum(call, fill("d * w", d=dots["x"], w=_ptp_weights(call)))


register(Rule("ptp", "np.ptp", _CHOOSER, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _ptp_vjp, _ptp_jvp), np.ptp)
# average(x, axis, weights) = sum(x * w) / sum(w) over the axes; w has x's shape, or is a
# vector laid along the one axis (NumPy's two forms). Without weights it is the mean.
def _weights_along_axis(call):
    """The weights shaped to broadcast against x, and the axes of x they do not span (None
    when they have x's shape), or (None, None) for a form with no template."""
    w = call.args["weights"]
    rank, w_rank, axis = call.ndim("x"), call.ndim("weights"), call.axis()
    if axis is None or (rank is not None and w_rank == rank):
        return w, None  # (over the whole array NumPy wants weights shaped like it)
    if w_rank == 1 and isinstance(axis, int) and rank is not None:
        others = tuple(a for a in range(rank) if a != axis)
        return fill("np.expand_dims(w, o)", w=w, o=others), others
    return None, None


def _weight_totals(call, others):
    """sum(w) over the call's axes: (reduced as the output is, expanded like x)."""
    w = call.args["weights"]
    if others is not None:
        total = fill("np.sum(w)", w=w)
        return total, total
    return reduce_sum(call, w), _reduced_like_x(call, "np.sum", w)


def _average_form(call):
    if call.const("returned", False) or isinstance(call.axis(), tuple):
        return None  # the (average, sum of weights) pair, and several axes: no template yet
    if "weights" not in call.args or call.types["weights"].kind == "none":
        return "mean"
    wb, others = _weights_along_axis(call)
    return None if wb is None and others is None else "weighted"


def _average_vjp(call, g):
    form = _average_form(call)
    if form == "mean":
        return _mean_vjp(call, g)
    if form is None:
        return None
    wb, others = _weights_along_axis(call)
    _, total = _weight_totals(call, others)
    ge, _ = expand_like_input(call, g)
    ye, _ = expand_like_input(call, call.out)
    x_bar = fill("ge * wb / t", ge=ge, wb=wb, t=total)
    w_bar = fill("ge * (x - ye) / t", ge=ge, x=call.args["x"], ye=ye, t=total)
    if others is not None:
        w_bar = fill("np.sum(e, axis=o)", e=w_bar, o=others)
    return {"x": (x_bar, call.types["x"]), "weights": (w_bar, call.types["weights"])}


def _average_jvp(call, dots):
    form = _average_form(call)
    if form == "mean":
        return _relinear(call, dots)
    if form is None:
        return None
    wb, others = _weights_along_axis(call)
    reduced_total, _ = _weight_totals(call, others)
    terms = []
    if "x" in dots:
        terms.append(fill("d * wb", d=dots["x"], wb=wb))
    if "weights" in dots:
        ye, _ = expand_like_input(call, call.out)
        wd = dots["weights"] if others is None else fill("np.expand_dims(d, o)",
                                                           d=dots["weights"], o=others)
        terms.append(fill("wd * (x - ye)", wd=wd, x=call.args["x"], ye=ye))
    total = terms[0] if len(terms) == 1 else fill("p + q", p=terms[0], q=terms[1])
    return fill("s / t", s=reduce_sum(call, total), t=reduced_total)


register(Rule("average", "np.average", ("x", "axis", "weights", "returned", "keepdims"),
              {"axis": None, "weights": None, "returned": False, "keepdims": False},
              ("x", "weights"), _infer_reduction, _average_vjp, _average_jvp), np.average)


# nansum and nanmean: NaN entries count for nothing, so they get a zero cotangent and tangent
# (JAX's jnp.nansum is a sum of where(isnan(x), 0, x)).
def _without_nans(call, value):
    return fill("np.where(np.isnan(x), 0.0, v)", x=call.args["x"], v=value)


def _present_count(call, reduced):
    """How many entries are not NaN, over the call's axes (reduced as the output, or
    expanded like x)."""
    present = fill("~np.isnan(x)", x=call.args["x"])
    if reduced:
        return reduce_sum(call, present)
    return _reduced_like_x(call, "np.sum", present)


def _nansum_vjp(call, g):
    ge, _ = expand_like_input(call, g)
    return {"x": (_without_nans(call, ge), call.types["x"])}


def _nanmean_vjp(call, g):
    ge, _ = expand_like_input(call, g)
    share = fill("ge / n", ge=ge, n=_present_count(call, False))
    return {"x": (_without_nans(call, share), call.types["x"])}


register(Rule("nansum", "np.nansum", _REDUCTION, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _nansum_vjp,
              lambda call, dots: reduce_sum(call, _without_nans(call, dots["x"]))), np.nansum)
register(Rule("nanmean", "np.nanmean", _REDUCTION, {"axis": None, "keepdims": False}, ("x",),
              _infer_reduction, _nanmean_vjp,
              lambda call, dots: fill("s / n", s=reduce_sum(call, _without_nans(call, dots["x"])),
                                      n=_present_count(call, True))), np.nanmean)


_VAR = ("x", "axis", "dtype", "out", "ddof", "keepdims")
register(Rule("var", "np.var", _VAR, {"axis": None, "ddof": 0, "keepdims": False}, ("x",),
              _infer_reduction, _var_vjp, _var_jvp), np.var)
register(Rule("std", "np.std", _VAR, {"axis": None, "ddof": 0, "keepdims": False}, ("x",),
              _infer_reduction, _std_vjp, _std_jvp), np.std)


def _infer_cumsum(call):
    x = call.types["x"]
    if call.const("axis") is None:
        return T.array((T.N,), x.dtype or "float64")
    return x


register(Rule("cumsum", "np.cumsum", ("x", "axis", "dtype", "out"), {"axis": None}, ("x",),
              _infer_cumsum, _cumsum_vjp, _relinear, linear=True), np.cumsum)


# cumprod: both derivatives are loops along the axis in emitted helpers (cumprod_adjoint,
# cumprod_tangent), exact where x has zeros (no division by x), as JAX's scan-based rule is.
def _along_last_axis(call, helper, x, other):
    """`helper(x, other)` applied along the call's axis, flattened first for axis=None."""
    axis, rank = call.axis(), call.ndim("x")
    if axis is None:
        flat = fill(f"{helper}(np.ravel(x), np.ravel(o))", x=x, o=other)
        return flat, rank == 1
    if axis == -1 or (rank is not None and axis == rank - 1):
        return fill(f"{helper}(x, o)", x=x, o=other), True
    moved = fill(f"{helper}(np.moveaxis(x, a, -1), np.moveaxis(o, a, -1))", x=x, o=other,
                 a=axis)
    return fill("np.moveaxis(m, -1, a)", m=moved, a=axis), True


def _cumprod_vjp(call, g):
    """x_bar[j] = prod(x[:j]) * sum over i >= j of g[i] * prod(x[j + 1:i + 1]): right where
    x has zeros too (no division by x)."""
    x = call.args["x"]
    expr, same_shape = _along_last_axis(call, "cumprod_adjoint", x, g)
    if not same_shape:
        expr = fill("e.reshape(np.shape(x))", e=expr, x=x)
    return {"x": (expr, call.types["x"])}


def _cumprod_jvp(call, dots):
    return _along_last_axis(call, "cumprod_tangent", call.args["x"], dots["x"])[0]


register(Rule("cumprod", "np.cumprod", ("x", "axis", "dtype", "out"), {"axis": None}, ("x",),
              _infer_cumsum, _cumprod_vjp, _cumprod_jvp), np.cumprod)


# median (JAX's jnp.median is quantile(method="midpoint") over a stable sort): the cotangent
# goes to the middle entry of the sorted values, or half to each of the two middle entries of
# an even count; with ties, to the entries a stable sort puts there. median_weights (an
# emitted helper) says where.
def _median_weights(call):
    x, axis = call.args["x"], call.axis()
    if axis is None:
        return fill("median_weights(np.ravel(x), 0).reshape(np.shape(x))", x=x)
    return fill("median_weights(x, a)", x=x, a=axis)


def _median_vjp(call, g):
    if isinstance(call.axis(), tuple):
        return None  # several axes: no template yet
    ge, _ = expand_like_input(call, g)
    return {"x": (fill("ge * w", ge=ge, w=_median_weights(call)), call.types["x"])}


def _median_jvp(call, dots):
    if isinstance(call.axis(), tuple):
        return None
    return reduce_sum(call, fill("d * w", d=dots["x"], w=_median_weights(call)))


register(Rule("median", "np.median", ("x", "axis", "out", "overwrite_input", "keepdims"),
              {"axis": None, "keepdims": False}, ("x",), _infer_reduction, _median_vjp,
              _median_jvp), np.median)


# ---------------------------------------------------------------- shape functions
def _shape_dims(call, param):
    """Axes of an array whose shape is given by argument `param` (an int or a tuple)."""
    t = call.types.get(param)
    if t is None:
        return None
    if t.kind == "int":
        return (1,) if t.value == 1 else (T.N,)
    if t.kind == "tuple" and t.elts is not None:
        return tuple(1 if e.value == 1 else T.N for e in t.elts)
    return None


def _back_to_shape(call, g):
    return {"x": (fill("g.reshape(x.shape)", g=g, x=call.args["x"]), call.types["x"])}


def _infer_reshape(call):
    x = call.types["x"]
    dims = _shape_dims(call, "shape")
    return T.array(dims, x.dtype or "float64") if dims is not None else T.AType(
        "array", x.dtype, None)


register(Rule("reshape", "np.reshape", ("x", "shape"), {}, ("x",), _infer_reshape,
              _back_to_shape, _relinear, linear=True), np.reshape)


def _infer_ravel(call):
    return T.array((T.N,), call.types["x"].dtype or "float64")


register(Rule("ravel", "np.ravel", ("x",), {}, ("x",), _infer_ravel, _back_to_shape,
              _relinear, linear=True), np.ravel)


def _infer_squeeze(call):
    x = call.types["x"]
    if x.dims is None:
        return x
    axis = call.axis()
    if axis is None:
        return T.array(tuple(d for d in x.dims if d != 1), x.dtype)
    axes = set(axis) if isinstance(axis, tuple) else {axis}
    return T.array(tuple(d for i, d in enumerate(x.dims) if i not in axes), x.dtype)


register(Rule("squeeze", "np.squeeze", ("x", "axis"), {"axis": None}, ("x",), _infer_squeeze,
              _back_to_shape, _relinear, linear=True), np.squeeze)


def _infer_expand_dims(call):
    x = call.types["x"]
    if x.ndim is None:
        return T.AType("array", x.dtype, None)
    axis = call.const("axis")
    rank = x.ndim + (len(axis) if isinstance(axis, tuple) else 1)
    axes = {a % rank for a in (axis if isinstance(axis, tuple) else (axis,))}
    dims, rest = [], list(x.dims or ())
    for i in range(rank):
        dims.append(1 if i in axes else rest.pop(0))
    return T.array(tuple(dims), x.dtype or "float64")


register(Rule("expand_dims", "np.expand_dims", ("x", "axis"), {}, ("x",), _infer_expand_dims,
              _back_to_shape, _relinear, linear=True), np.expand_dims)


def _perm(call):
    x = call.types["x"]
    axes = call.const("axes")
    if axes is None:
        return None if x.ndim is None else tuple(reversed(range(x.ndim)))
    rank = x.ndim if x.ndim is not None else len(axes)  # the axes name every axis
    return tuple(a % rank for a in axes)


def _infer_transpose(call):
    x = call.types["x"]
    if x.kind != "array" or x.dims is None:
        return x
    perm = _perm(call)
    return T.array(tuple(x.dims[p] for p in perm), x.dtype)


def _transpose_vjp(call, g):
    axes = call.const("axes")
    x = call.types["x"]
    if x.kind != "array":
        return {"x": (to_expr(g), x)}
    if axes is None:
        return {"x": (fill("g.T", g=g), x)}
    inverse = tuple(int(i) for i in np.argsort(_perm(call)))
    return {"x": (fill("np.transpose(g, p)", g=g, p=inverse), x)}


register(Rule("transpose", "np.transpose", ("x", "axes"), {"axes": None}, ("x",),
              _infer_transpose, _transpose_vjp, _relinear, linear=True), np.transpose)
# `x.T` is kept as written; its rule differs only in how the primal is emitted.
register(Rule("T", None, ("x",), {}, ("x",), _infer_transpose, _transpose_vjp,
              lambda call, dots: fill("d.T", d=dots["x"]), linear=True))


def _infer_swapaxes(call):
    x = call.types["x"]
    if x.dims is None:
        return x
    dims = list(x.dims)
    a, b = call.const("axis1") % len(dims), call.const("axis2") % len(dims)
    dims[a], dims[b] = dims[b], dims[a]
    return T.array(tuple(dims), x.dtype)


register(Rule("swapaxes", "np.swapaxes", ("x", "axis1", "axis2"), {}, ("x",), _infer_swapaxes,
              lambda call, g: {"x": (fill("np.swapaxes(g, a, b)", g=g, a=call.args["axis1"],
                                          b=call.args["axis2"]), call.types["x"])},
              _relinear, linear=True), np.swapaxes)


def _infer_moveaxis(call):
    x = call.types["x"]
    if x.dims is None:
        return x
    order = [i for i in range(len(x.dims))]
    s, d = call.const("source") % len(order), call.const("destination") % len(order)
    order.insert(d, order.pop(s))
    return T.array(tuple(x.dims[i] for i in order), x.dtype)


register(Rule("moveaxis", "np.moveaxis", ("x", "source", "destination"), {}, ("x",),
              _infer_moveaxis,
              lambda call, g: {"x": (fill("np.moveaxis(g, d, s)", g=g,
                                          s=call.args["source"], d=call.args["destination"]),
                                     call.types["x"])},
              _relinear, linear=True), np.moveaxis)


def _infer_flip(call):
    return call.types["x"]


register(Rule("flip", "np.flip", ("x", "axis"), {"axis": None}, ("x",), _infer_flip,
              lambda call, g: {"x": ((fill("np.flip(g)", g=g) if "axis" not in call.args
                                      else fill("np.flip(g, a)", g=g, a=call.args["axis"])),
                                     call.types["x"])},
              _relinear, linear=True), np.flip)

register(Rule("roll", "np.roll", ("x", "shift", "axis"), {"axis": None}, ("x",), _infer_flip,
              lambda call, g: {"x": ((fill("np.roll(g, -s)", g=g, s=call.args["shift"])
                                      if "axis" not in call.args else
                                      fill("np.roll(g, -s, a)", g=g, s=call.args["shift"],
                                           a=call.args["axis"])), call.types["x"])},
              _relinear, linear=True), np.roll)



# fliplr/flipud reverse one axis (1 and 0): each is its own adjoint.
def _flip_one_axis_vjp(call, g):
    return {"x": (_relinear(call, {"x": g}), call.types["x"])}


for _fn in (np.fliplr, np.flipud):
    register(Rule(_fn.__name__, f"np.{_fn.__name__}", ("x",), {}, ("x",), _infer_flip,
                  _flip_one_axis_vjp, _relinear, linear=True), _fn)


# rot90(x, k, axes) turns the plane of two axes by k quarter turns; the adjoint turns back.
def _rot90_plane(call):
    """(quarter turns in 0..3, the two axes), or None unless both are constants."""
    k, axes = call.const("k", 1), call.const("axes", (0, 1))
    if not isinstance(k, int) or isinstance(k, bool) or not isinstance(axes, tuple) or \
            not all(isinstance(a, int) for a in axes):
        return None
    return k % 4, axes


def _infer_rot90(call):
    x, plane = call.types["x"], _rot90_plane(call)
    if x.dims is None:
        return x
    if plane is None:  # which axes trade places is not known: neither is known to be one
        return T.array((T.N,) * len(x.dims), x.dtype)
    turns, axes = plane
    dims = list(x.dims)
    if turns % 2:
        a, b = (axis % len(dims) for axis in axes)
        dims[a], dims[b] = dims[b], dims[a]
    return T.array(tuple(dims), x.dtype)


def _rot90_vjp(call, g):
    plane = _rot90_plane(call)
    if plane is None:
        return None
    turns, axes = plane
    return {"x": (fill("np.rot90(g, k, a)", g=g, k=(4 - turns) % 4, a=axes), call.types["x"])}


register(Rule("rot90", "np.rot90", ("x", "k", "axes"), {"k": 1, "axes": (0, 1)}, ("x",),
              _infer_rot90, _rot90_vjp, lambda call, dots: _relinear(call, dots)
              if _rot90_plane(call) is not None else None, linear=True), np.rot90)

# tril/triu keep a triangle of a matrix and zero the rest: their adjoint keeps the same
# triangle of the cotangent (summed over the rows for a vector, which they repeat as rows).
def _infer_triangle(call):
    x = call.types["x"]
    return x if x.ndim is None or x.ndim >= 2 else T.array((T.N, T.N), x.dtype or "float64")


def _triangle_vjp(call, g):
    kept = _relinear(call, {"x": g})
    if call.types["x"].ndim == 1:
        kept = fill("np.sum(t, axis=0)", t=kept)
    return {"x": (kept, call.types["x"])}


for _fn in (np.tril, np.triu):
    register(Rule(_fn.__name__, f"np.{_fn.__name__}", ("x", "k"), {"k": 0}, ("x",),
                  _infer_triangle, _triangle_vjp, _relinear, linear=True), _fn)



# diagflat(v, k) puts v, flattened, on the k-th diagonal of a square matrix of size n + |k|;
# the cotangent is that diagonal of g (the main diagonal of the square block g[:-k, k:], or
# g[-k:, :k] for k < 0), shaped like v (summed to a number for a number). The diagonal is
# read as a masked row sum, not np.diag: vmap batches np.diag of a matrix into np.diagonal
# with axes, which has no derivative rule, so a Hessian would stop there.
def _diagflat_vjp(call, g):
    k = call.const("k", 0)
    if not isinstance(k, int):
        return None
    block = g if k == 0 else fill("g[:-k, k:]" if k > 0 else "g[-k:, :k]", g=g, k=k)
    diagonal = fill("np.sum(b * np.eye(b.shape[0]), axis=1)", b=block)
    v = call.types["x"]
    if v.kind in ("float", "int", "bool"):
        return {"x": (fill("np.sum(d)", d=diagonal), v)}
    return {"x": (fill("np.reshape(d, np.shape(x))", d=diagonal, x=call.args["x"]), v)}


register(Rule("diagflat", "np.diagflat", ("x", "k"), {"k": 0}, ("x",),
              lambda call: T.array((T.N, T.N), call.types["x"].dtype or "float64"),
              _diagflat_vjp, _relinear, linear=True), np.diagflat)

# diff(x) along the last axis: y[i] = x[i + 1] - x[i], so x[j] receives g[j - 1] - g[j]
# (only the first term at the end, only the second at the start).
def _infer_diff(call):
    x, axis = call.types["x"], call.const("axis", -1)
    if x.dims is None or not isinstance(axis, int) or not -len(x.dims) <= axis < len(x.dims):
        return T.AType("array", x.dtype, None)
    dims = list(x.dims)
    dims[axis] = T.N  # (the differenced axis is shorter; the others keep their sizes)
    return T.array(tuple(dims), x.dtype or "float64")


def _diff_vjp(call, g):
    axis, rank, n = call.const("axis", -1), call.ndim("x"), call.const("n", 1)
    if not isinstance(n, int) or not 0 <= n <= 3 or not isinstance(axis, int):
        return None  # (n given at run time, or a difference of a high order)
    if axis == -1 or (rank is not None and axis == rank - 1):
        before, at = "..., ", ""  # the last axis, for any rank (np.diff's own default)
    elif rank is not None and -rank <= axis < rank:
        before, at = ":, " * (axis % rank), f", axis={axis % rank}"
    else:
        return None
    if n == 0:
        return {"x": (to_expr(g), call.types["x"])}
    # The first difference's transpose is minus the difference of g padded with a zero at
    # both ends (x[j] gets g[j - 1] - g[j]); n of them, of g padded with n zeros.
    zeros = f"np.zeros_like(g[{before}:{n}])"
    padded = f"np.concatenate(({zeros}, g, {zeros}){at or ', axis=-1'})"
    text = f"{'-' if n % 2 else ''}np.diff({padded}, {n}{at})"
    return {"x": (fill(text, g=g), call.types["x"])}


register(Rule("diff", "np.diff", ("x", "n", "axis"), {"n": 1, "axis": -1}, ("x",), _infer_diff,
              _diff_vjp, _relinear, linear=True), np.diff)


def _infer_broadcast_to(call):
    dims = _shape_dims(call, "shape")
    x = call.types["x"]
    return T.array(dims, x.dtype or "float64") if dims is not None else T.AType(
        "array", x.dtype, None)


register(Rule("broadcast_to", "np.broadcast_to", ("x", "shape"), {}, ("x",),
              _infer_broadcast_to, lambda call, g: {"x": (to_expr(g), call.out_type)},
              _relinear, linear=True), np.broadcast_to)


def _infer_tile(call):
    x = call.types["x"]
    reps = call.const("reps")
    if x.dims is None or reps is None:
        return T.AType("array", x.dtype, None)
    reps = reps if isinstance(reps, tuple) else (reps,)
    rank = max(len(reps), len(x.dims))
    dims = (1,) * (rank - len(x.dims)) + tuple(x.dims)
    reps = (1,) * (rank - len(reps)) + reps
    return T.array(tuple(1 if d == 1 and r == 1 else T.N for d, r in zip(dims, reps)),
                   x.dtype)


def _tile_vjp(call, g):
    x = call.types["x"]
    reps = call.const("reps")
    reps = reps if isinstance(reps, tuple) else (reps,)
    if x.ndim is None:
        return None  # the reshape below needs the rank
    rank = max(len(reps), x.ndim)
    reps = (1,) * (rank - len(reps)) + tuple(reps)
    pieces = []
    xe = call.args["x"]
    for i in range(rank):
        j = i - (rank - x.ndim)
        pieces += [reps[i], 1 if j < 0 else fill("x.shape[j]", x=xe, j=j)]
    expr = fill("g.reshape(s)", g=g, s=tuple(0 for _ in pieces))
    expr.args[0].elts = [to_expr(p) for p in pieces]
    for axis in reversed(range(0, 2 * rank, 2)):
        expr = fill("np.sum(e, axis=a)", e=expr, a=axis)
    if x.ndim == 0:  # (a number: its one entry, as a number, which has no reshape)
        expr = fill("np.sum(e)", e=expr)
    elif rank != x.ndim:
        expr = fill("e.reshape(x.shape)", e=expr, x=xe)
    return {"x": (expr, x)}


register(Rule("tile", "np.tile", ("x", "reps"), {}, ("x",), _infer_tile, _tile_vjp, _relinear,
              linear=True), np.tile)



# atleast_1d/2d/3d(x): x with size-one axes added up to the rank (a number becomes
# (1,)/(1, 1)/(1, 1, 1), a vector a row (1, n) or (1, n, 1), a matrix (m, n, 1)); the cotangent
# is reshaped back (summed to a number for a number).
_ATLEAST_DIMS = {
    1: {0: lambda d: (1,)},
    2: {0: lambda d: (1, 1), 1: lambda d: (1,) + d},
    3: {0: lambda d: (1, 1, 1), 1: lambda d: (1,) + d + (1,), 2: lambda d: d + (1,)},
}


def _atleast_rank(rule):
    return int(rule.name[len("atleast_")])


def _infer_atleast(call):
    x = call.types["x"]
    dtype = x.dtype or "float64"
    grows = _ATLEAST_DIMS[_atleast_rank(call.rule)]
    if x.kind in ("float", "int", "bool"):
        return T.array(grows[0](()), dtype)
    if x.dims is None:
        return T.AType("array", dtype, None)
    grow = grows.get(len(x.dims))
    return T.array(grow(tuple(x.dims)) if grow else tuple(x.dims), dtype)


def _atleast_vjp(call, g):
    x = call.types["x"]
    if x.kind in ("float", "int", "bool"):
        return {"x": (fill("np.sum(g)", g=g), x)}
    return {"x": (fill("np.reshape(g, np.shape(x))", g=g, x=call.args["x"]), x)}


for _fn in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    register(Rule(_fn.__name__, f"np.{_fn.__name__}", ("x",), {}, ("x",), _infer_atleast,
                  _atleast_vjp, _relinear, linear=True), _fn)


def _identity_vjp(call, g):
    return {"x": (to_expr(g), None)}  # None: the cotangent's own type (it may be lazy)


def _infer_same(call):
    x = call.types.get("x", call.types.get("arrays"))
    dtype = call.const("dtype")
    if dtype is None:
        dtype = _written_dtype(call.args.get("dtype"))
    if dtype is not None and x.kind == "array":
        return T.array(x.dims, np.dtype(dtype).name)
    return x


def _written_dtype(node):
    """The dtype a call's dtype argument names as written: ``bool``, ``float`` or ``int``
    (Python's types), or ``np.float32`` (normalize writes a dtype so); None otherwise. (Typed
    as the argument's dtype, ``.astype(bool)`` made an int mask of an int array, which then
    indexed as positions.)"""
    import gast
    if isinstance(node, gast.Name) and node.id in ("bool", "float", "int"):
        return {"bool": "bool", "float": "float64", "int": "int64"}[node.id]
    if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
            node.value.id == "np":
        try:
            return np.dtype(getattr(np, node.attr)).name
        except (AttributeError, TypeError):
            return None
    return None


register(Rule("copy", "np.copy", ("x",), {}, ("x",), _infer_same, _identity_vjp, _relinear,
              linear=True), np.copy)
register(Rule("asarray", "np.asarray", ("x", "dtype"), {}, ("x",), _infer_same, _identity_vjp,
              _relinear, linear=True), np.asarray, np.ascontiguousarray, np.asanyarray,
         np.asfortranarray)
register(Rule("float", "float", ("x",), {}, ("x",), lambda call: T.FLOAT, _identity_vjp,
              _relinear, linear=True), float)


def _infer_scalar_type(call):
    """np.float64(x), np.float32(x): a number of that dtype, or an array of it."""
    x, dtype = call.types["x"], call.rule.name
    if x.kind == "array":
        return T.array(x.dims, dtype) if x.dims is not None else T.AType("array", dtype, None)
    return T.AType("float", dtype)


for _scalar in (np.float64, np.float32):
    register(Rule(_scalar.__name__, f"np.{_scalar.__name__}", ("x",), {}, ("x",),
                  _infer_scalar_type, _identity_vjp, _relinear, linear=True), _scalar)
# Methods with no function twin are written as methods: `x.astype(dtype)`, `x.copy()`.
register(Rule("astype", None, ("x", "dtype"), {}, ("x",), _infer_same, _identity_vjp,
              lambda call, dots: fill("d.astype(t)", d=dots["x"], t=call.args["dtype"]),
              linear=True))


# ---------------------------------------------------------------- joining arrays
def _join_axis(call):
    """(axis, stacked): the axis of the result the pieces are laid along."""
    name = call.rule.name
    first = T.as_operand(call.types["arrays"].elts[0]) if call.types["arrays"].elts else \
        T.UNKNOWN
    if name == "array":
        return 0, True
    if name == "hstack":
        return (0 if first.ndim == 1 else 1), False
    axis = call.const("axis", 0)
    if name == "stack":
        return axis % ((first.ndim or 0) + 1), True
    return axis % (first.ndim or 1), False


def _infer_join(call):
    elts = tuple(T.as_operand(e) for e in call.types["arrays"].elts or ())
    if not elts or any(e.ndim is None for e in elts):
        return T.AType("array", "float64", None)
    axis, stacked = _join_axis(call)
    dims = list(T.broadcast(*elts).dims or ())
    if stacked:
        dims.insert(axis, T.N)
    else:
        dims[axis] = T.N
    # booleans joined stay booleans (a mask np.array([True, False])), not arithmetic's int64
    dtype = "bool" if all(e.dtype == "bool" for e in elts) else T.result_dtype(*elts)
    return T.array(tuple(dims), dtype)


def _index_at(axis, key):
    import gast
    parts = [gast.Slice(lower=None, upper=None, step=None) for _ in range(axis)] + [key]
    return parts[0] if len(parts) == 1 else gast.Tuple(elts=parts, ctx=gast.Load())


def _join_vjp(call, g):
    import gast
    axis, stacked = _join_axis(call)
    if any(T.as_operand(t).ndim is None for t in call.types["arrays"].elts or ()) and \
            call.rule.name != "array":
        # pieces of any rank: only an explicit, non-negative axis says where they lie
        axis = call.const("axis", 0)
        if call.rule.name not in ("concatenate", "stack") or not isinstance(axis, int) or \
                axis < 0:
            return None
        stacked = call.rule.name == "stack"
    pieces = call.args["arrays"].elts
    out = {}
    offset = None
    for i, piece in enumerate(pieces):
        if stacked:
            key = to_expr(i)
        else:
            size = fill("p.shape[a]", p=piece, a=axis)
            upper = size if offset is None else fill("o + s", o=offset, s=size)
            key = gast.Slice(lower=offset, upper=upper, step=None)
            offset = upper
        contrib = gast.Subscript(value=to_expr(g), slice=_index_at(axis, key), ctx=gast.Load())
        out[("arrays", i)] = (contrib, call.types["arrays"].elts[i])
    return out


def _join_jvp(call, dots):
    import gast
    pieces = []
    for i, piece in enumerate(call.args["arrays"].elts):
        pieces.append(dots.get(("arrays", i), fill("np.zeros_like(p)", p=piece)))
    args = dict(call.args)
    args["arrays"] = gast.List(elts=pieces, ctx=gast.Load())
    return emit_call(call.rule, args, call.keywords)


for _name, _fn in (("concatenate", np.concatenate), ("stack", np.stack), ("hstack", np.hstack)):
    register(Rule(_name, f"np.{_name}", ("arrays", "axis"), {"axis": 0}, ("arrays",),
                  _infer_join, _join_vjp, _join_jvp, linear=True), _fn)


# vstack lays its pieces one above the other along axis 0 (vectors as rows), column_stack side
# by side along axis 1 (vectors as columns), dstack along axis 2 (vectors as (1, n, 1),
# matrices as (m, n, 1)). A piece without that axis of its own takes one position of it (its
# cotangent is the result's cotangent there), any other piece a slice as wide as its own axis.
_SIDE_BY_SIDE = {"vstack": 0, "column_stack": 1, "dstack": 2}
#: the cotangent of a piece of each rank that takes one position `o` of the axis
_ONE_POSITION = {"vstack": {0: "g[o, 0]", 1: "g[o]"},
                 "column_stack": {0: "g[0, o]", 1: "g[:, o]"},
                 "dstack": {0: "g[0, 0, o]", 1: "g[0, :, o]", 2: "g[:, :, o]"}}


def _laid_dims(name, dims):
    """The axes of a piece as its join lays it out."""
    if name == "dstack":
        grow = _ATLEAST_DIMS[3].get(len(dims))
        return grow(dims) if grow else dims
    if name == "vstack":
        return {0: (1, 1), 1: (1,) + dims}.get(len(dims), dims)
    return {0: (1, 1), 1: dims + (1,)}.get(len(dims), dims)


def _infer_side_by_side(call):
    elts = call.types["arrays"].elts or ()
    if not elts or any(e.ndim is None for e in elts):
        return T.AType("array", "float64", None)
    name = call.rule.name
    laid = [T.array(_laid_dims(name, tuple(e.dims or ())), e.dtype or "float64")
            for e in elts]
    dims = list(T.broadcast(*laid).dims)
    dims[_SIDE_BY_SIDE[name]] = T.N
    return T.array(tuple(dims), T.result_dtype(*elts))


def _side_by_side_vjp(call, g):
    import gast
    name = call.rule.name
    axis = _SIDE_BY_SIDE[name]
    types = call.types["arrays"].elts or ()
    if any(t.ndim is None for t in types):
        return None  # where a piece lies depends on its rank
    out, offset = {}, to_expr(0)
    for i, (piece, typ) in enumerate(zip(call.args["arrays"].elts, types)):
        if typ.ndim <= axis or (name == "vstack" and typ.ndim == 1):
            part = fill(_ONE_POSITION[name][typ.ndim], g=g, o=offset)
            offset = fill("o + 1", o=offset)
        else:
            upper = fill("o + p.shape[a]", o=offset, p=piece, a=axis)
            key = gast.Slice(lower=offset, upper=upper, step=None)
            part = gast.Subscript(value=to_expr(g), slice=_index_at(axis, key),
                                  ctx=gast.Load())
            offset = upper
        out[("arrays", i)] = (part, typ)
    return out


for _name in _SIDE_BY_SIDE:
    register(Rule(_name, f"np.{_name}", ("arrays",), {}, ("arrays",), _infer_side_by_side,
                  _side_by_side_vjp, _join_jvp, linear=True), getattr(np, _name))
if hasattr(np, "row_stack"):  # vstack's old name: the same rule, emitted as np.vstack
    register(all_rules()["vstack"], np.row_stack)

def _copies(call):
    """np.array(x) of an array or a number (a 0-d array, typed as the number): a copy."""
    return call.types["arrays"].kind in ("array", "float", "int", "bool")


def _infer_array(call):
    if _copies(call):
        return _infer_same(call)
    out = _infer_join(call)
    dtype = call.const("dtype")
    if dtype is not None and out.kind == "array":
        return T.array(out.dims, np.dtype(dtype).name)
    return out


def _array_vjp(call, g):
    if _copies(call):
        return {"arrays": (to_expr(g), None)}
    return _join_vjp(call, g)


# np.array([a, b, c]) of same-shaped values stacks them along a new first axis.
register(Rule("array", "np.array", ("arrays", "dtype"), {"axis": 0}, ("arrays",), _infer_array,
              _array_vjp, lambda call, dots: _relinear(call, dots, "arrays")
              if _copies(call) else _join_jvp(call, dots), linear=True),
         np.array)


# ---------------------------------------------------------------- splitting arrays
# np.split(ary, indices_or_sections, axis) cuts an array along one axis into equal sections or
# at the given indices; np.array_split allows unequal sections; vsplit, hsplit and dsplit are
# np.split along the axis they imply (None: the axis is an argument). The pieces are a tuple
# whose length is known where the code is generated (NumPy gives a list), so the count or the
# indices must be constants there. Linear: the array's cotangent is the pieces' cotangents
# joined along the axis (zeros shaped like a piece that got none), its tangent is the tangent
# split the same way.
_SPLITS = {"split": None, "array_split": None, "vsplit": 0, "hsplit": 1, "dsplit": 2}
#: the fewest axes an array split by each takes (NumPy raises below)
_SPLIT_MIN_RANK = {"vsplit": 2, "dsplit": 3}


def split_axis(call):
    """The axis a split cuts along: non-negative where the array's rank is known, as written
    where it is not; None where the code is generated cannot say (an axis held in a name, one
    the array does not have, hsplit of unknown rank)."""
    rank = call.ndim("ary")
    implied = _SPLITS[call.rule.name]
    if call.rule.name == "hsplit":
        implied = None if rank is None else (0 if rank == 1 else 1)
    elif implied is None:
        implied = call.const("axis", 0)
        if not isinstance(implied, int):
            return None
    if rank is None:
        return implied
    return implied % rank if -rank <= implied < rank else None


def split_cuts(call):
    """("sections", n) for a count of pieces, ("indices", (i, j, ...)) for the indices cut at,
    or None. A count or indices only known at run time are recorded on `call`, which is then
    refused at the user's line."""
    param = "indices_or_sections"
    value, given = call.const(param), call.types.get(param, T.AType("none"))
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return ("sections", int(value)) if value > 0 else None
    if isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) and
                                        not isinstance(v, bool) for v in value):
        return "indices", tuple(int(v) for v in value)
    if value is None and given.kind != "none":
        call.known_at_run_time(param)  # an array of indices, say
    return None


def _one_apart(lower, upper):
    """Whether ``a[lower:upper]`` takes one element whatever the length of a (as a slice's
    type says: 0:1, k:k + 1, -1:); None bounds are the ends."""
    if upper is None:
        return lower == -1
    lower = 0 if lower is None else lower
    return upper - lower == 1 and (lower >= 0) == (upper > 0) and upper != 0


def _pieces_along(cuts, size):
    """The size (1 or N) of each piece along the cut axis, whose own size is `size`."""
    kind, value = cuts
    if kind == "sections":
        return [size if value == 1 else T.N] * value
    bounds = (None,) + value + (None,)
    return [1 if _one_apart(lo, hi) else T.N for lo, hi in zip(bounds, bounds[1:])]


def _infer_split(call):
    ary, least = call.types["ary"], _SPLIT_MIN_RANK.get(call.rule.name, 1)
    if ary.ndim is not None and ary.ndim < least:
        raise ValueError(f"{call.rule.emit} needs an array of rank {least} or more")
    cuts = split_cuts(call)
    if cuts is None:
        return T.AType("tuple")  # as many pieces as a run-time value says
    axis = split_axis(call)
    dtype = ary.dtype or "float64"
    count = cuts[1] if cuts[0] == "sections" else len(cuts[1]) + 1
    if ary.kind != "array" or ary.dims is None or axis is None or axis < 0:
        return T.AType("tuple", elts=(T.AType("array", dtype, None),) * count)
    dims = ary.dims
    return T.AType("tuple", elts=tuple(
        T.array(dims[:axis] + (along,) + dims[axis + 1:], dtype)
        for along in _pieces_along(cuts, dims[axis])))


def _split_handled(call):
    """Whether the templates below apply: an array, cut into a known number of pieces along
    an axis known where the code is generated."""
    cuts, axis = split_cuts(call), split_axis(call)
    return cuts is not None and axis is not None and call.types["ary"].kind == "array"


def _split_vjp(call, g):
    import gast
    if not _split_handled(call):
        return None
    parts = [to_expr(part) if part is not None else fill("np.zeros_like(y[k])", y=call.out, k=k)
             for k, part in enumerate(g)]
    if len(parts) == 1:
        return {"ary": (parts[0], call.types["ary"])}
    joined = fill("np.concatenate(p, axis=a)", p=gast.Tuple(elts=parts, ctx=gast.Load()),
                  a=split_axis(call))
    return {"ary": (joined, call.types["ary"])}


def _split_jvp(call, dots):
    return _relinear(call, dots, "ary") if _split_handled(call) else None


for _name, _implied in _SPLITS.items():
    register(Rule(_name, f"np.{_name}", ("ary", "indices_or_sections") +
                  (("axis",) if _implied is None else ()), {"axis": 0} if _implied is None
                  else {}, ("ary",), _infer_split, _split_vjp, _split_jvp, linear=True),
             getattr(np, _name))


# ---------------------------------------------------------------- creators and non-differentiable
def _dtype_of(call, default="float64"):
    dtype = call.const("dtype")
    if dtype is None:
        return default
    try:
        return np.dtype(dtype).name
    except TypeError:
        return default


def _infer_creator(call):
    return T.array(_shape_dims(call, "shape"), _dtype_of(call))


def _infer_like(call):
    x = T.as_operand(call.types["x"])  # (np.zeros_like([1.0, 2.0]) is a vector)
    if x.kind == "tuple":
        return T.AType("array", _dtype_of(call), None)
    return T.array(x.dims, _dtype_of(call, x.dtype or "float64")) if x.kind == "array" \
        else T.FLOAT


for _name in ("zeros", "ones", "empty"):
    register(Rule(_name, f"np.{_name}", ("shape", "dtype"), {}, (), _infer_creator,
                  nondiff_output=True), getattr(np, _name))
for _name in ("zeros_like", "ones_like", "empty_like"):
    register(Rule(_name, f"np.{_name}", ("x", "dtype"), {}, (), _infer_like,
                  nondiff_output=True), getattr(np, _name))


def _infer_full(call):
    dtype = _dtype_of(call, "float64")
    return T.array(_shape_dims(call, "shape"), dtype)


def _full_vjp(call, g):
    return {"fill_value": (to_expr(g), call.out_type)}


register(Rule("full", "np.full", ("shape", "fill_value", "dtype"), {}, ("fill_value",),
              _infer_full, _full_vjp, lambda call, dots: fill(
                  "np.full(s, d)", s=call.args["shape"], d=dots["fill_value"])), np.full)
register(Rule("full_like", "np.full_like", ("x", "fill_value", "dtype"), {}, ("fill_value",),
              _infer_like, _full_vjp, lambda call, dots: fill(
                  "np.full_like(x, d)", x=call.args["x"], d=dots["fill_value"])), np.full_like)


def _infer_arange(call):
    kinds = [call.types[p].kind for p in ("start", "stop", "step") if p in call.types]
    floaty = "float" in kinds or call.const("dtype") is not None
    return T.array((T.N,), _dtype_of(call, "float64") if floaty else "int64")


register(Rule("arange", "np.arange", ("start", "stop", "step", "dtype"), {}, (), _infer_arange,
              nondiff_output=True), np.arange)
register(Rule("linspace", "np.linspace", ("start", "stop", "num"), {}, (),
              lambda call: T.array((T.N,)), nondiff_output=True), np.linspace)
register(Rule("eye", "np.eye", ("N", "M", "k", "dtype"), {}, (),
              lambda call: T.array((T.N, T.N), _dtype_of(call)), nondiff_output=True), np.eye)
register(Rule("identity", "np.identity", ("n", "dtype"), {}, (),
              lambda call: T.array((T.N, T.N), _dtype_of(call)), nondiff_output=True),
         np.identity)


def _infer_index_of(call):
    x = call.types["x"]
    if call.const("axis") is None:
        return T.INT
    return T.array(_dims_without(x.dims, call.axis(), False), "int64")


for _name in ("argmax", "argmin"):
    register(Rule(_name, f"np.{_name}", ("x", "axis"), {"axis": None}, (), _infer_index_of,
                  nondiff_output=True), getattr(np, _name))


def _infer_argsort(call):
    x = call.types["x"]
    if "axis" in call.types and call.const("axis") is None:
        return T.array((T.N,), "int64")  # axis=None sorts the flattened array
    return T.array(x.dims, "int64")


register(Rule("argsort", "np.argsort", ("x", "axis", "kind", "order"), {"axis": -1}, (),
              _infer_argsort, nondiff_output=True), np.argsort)
register(Rule("argpartition", "np.argpartition", ("x", "kth", "axis", "kind", "order"),
              {"axis": -1}, (), _infer_argsort, nondiff_output=True), np.argpartition)


# ---------------------------------------------------------------- sort (JAX's convention)
# y = np.sort(x) is a gather of x by the sorting permutation `order`; the permutation comes from
# a stable argsort, so tied entries keep their original order (JAX sorts with is_stable=True and
# differentiates through the permutation: jax/_src/lax/lax.py, _sort_jvp). The tangent is x_dot
# gathered by `order`; the cotangent is g gathered by the inverse permutation argsort(order).
def _infer_sort(call):
    x = call.types["x"]
    if "axis" in call.types and call.const("axis") is None:
        return T.array((T.N,), x.dtype or "float64")
    return x


def _sort_form(call):
    """'flat' (axis=None), 'vector' (a 1-D array) or 'axis' (take_along_axis along an axis)."""
    axis = call.const("axis", -1)
    if "axis" in call.types and axis is None:
        return "flat", None
    if not isinstance(axis, int):
        return None, None
    if call.ndim("x") == 1:
        return "vector", axis
    return "axis", axis


def _sort_vjp(call, g):
    form, axis = _sort_form(call)
    x = call.args["x"]
    if form == "vector":
        order = fill('np.argsort(x, kind="stable")', x=x)
        bar = fill("g[np.argsort(order)]", g=g, order="order")
    elif form == "flat":
        order = fill('np.argsort(np.ravel(x), kind="stable")', x=x)
        bar = fill("g[np.argsort(order)].reshape(np.shape(x))", g=g, order="order", x=x)
    elif form == "axis":
        order = fill('np.argsort(x, axis=a, kind="stable")', x=x, a=axis)
        bar = fill("np.take_along_axis(g, np.argsort(order, axis=a), axis=a)", g=g,
                   order="order", a=axis)
    else:
        return None
    return {"__let__": [("order", order)], "x": (bar, call.types["x"])}


def _sort_jvp(call, dots):
    form, axis = _sort_form(call)
    x, d = call.args["x"], dots["x"]
    if form == "vector":
        return fill('d[np.argsort(x, kind="stable")]', d=d, x=x)
    if form == "flat":
        return fill('np.ravel(d)[np.argsort(np.ravel(x), kind="stable")]', d=d, x=x)
    if form == "axis":
        return fill('np.take_along_axis(d, np.argsort(x, axis=a, kind="stable"), axis=a)',
                    d=d, x=x, a=axis)
    return None


register(Rule("sort", "np.sort", ("x", "axis", "kind", "order"), {"axis": -1}, ("x",),
              _infer_sort, _sort_vjp, _sort_jvp), np.sort)


# take_along_axis(arr, indices, axis): linear in arr (the sort rule's gathers). Its reverse rule
# is a scatter-add along the axis, the add_along_axis helper (codegen/helpers.py).
def _infer_take_along_axis(call):
    arr, idx = call.types["arr"], call.types["indices"]
    return T.array(idx.dims, arr.dtype or "float64") if arr.kind == "array" else arr


def _take_along_axis_vjp(call, g):
    axis = call.const("axis")
    if not isinstance(axis, int):
        return None
    bar = fill("add_along_axis(arr, indices, g, a)", arr=call.args["arr"],
               indices=call.args["indices"], g=g, a=axis)
    return {"arr": (bar, call.types["arr"])}


register(Rule("take_along_axis", "np.take_along_axis", ("arr", "indices", "axis"), {}, ("arr",),
              _infer_take_along_axis, _take_along_axis_vjp,
              lambda call, dots: _relinear(call, dots, "arr"), linear=True),
         np.take_along_axis)
# add_along_axis(like, indices, values, axis): the helper the rule above emits, linear in
# values; its transpose is take_along_axis again (used when a gradient is differentiated).
register_helper(Rule("add_along_axis", "add_along_axis", ("like", "indices", "values", "axis"),
                     {}, ("values",),
                     lambda call: T.array(call.types["like"].dims,
                                          call.types["values"].dtype or "float64"),
                     lambda call, g: {"values": (fill(
                         "np.take_along_axis(g, indices, axis=a)", g=g,
                         indices=call.args["indices"], a=call.const("axis")),
                         call.types["values"])} if isinstance(call.const("axis"), int)
                     else None,
                     lambda call, dots: _relinear(call, dots, "values"), linear=True),
                "add_along_axis")


def constant_axis(call):
    """Whether the call's axis is absent, None or a constant integer (not a value held in a
    name, which call.const reads as None)."""
    t = call.types.get("axis")
    return t is None or t.kind == "none" or (t.kind == "int" and t.value is not None)


# take(a, indices, axis): a gather, linear in `a`. Its adjoint adds the cotangent back at the
# indices (the add_taken helper; repeated indices add up), along the flattened array for
# axis=None. Only NumPy's default mode ("raise") is handled.
def _infer_take(call):
    a, indices = call.types["a"], T.as_operand(call.types["indices"])
    dtype = a.dtype or "float64"
    picked = () if indices.kind == "int" else indices.dims
    axis = call.const("axis")
    if picked is None or not constant_axis(call) or (axis is not None and a.dims is None):
        return T.AType("array", dtype, None)
    if axis is None:
        return T.array(picked, dtype) if picked else T.FLOAT
    at = axis % len(a.dims)
    dims = tuple(a.dims[:at]) + tuple(picked) + tuple(a.dims[at + 1:])
    return T.array(dims, dtype) if dims else T.FLOAT


def _take_handled(call):
    return "mode" not in call.args and "out" not in call.args and constant_axis(call)


def _take_vjp(call, g):
    if not _take_handled(call):
        return None
    bar = fill("add_taken(a, indices, g, axis)", a=call.args["a"],
               indices=call.args["indices"], g=g, axis=call.const("axis"))
    return {"a": (bar, call.types["a"])}


def _take_jvp(call, dots):
    return _relinear(call, dots, "a") if _take_handled(call) else None


register(Rule("take", "np.take", ("a", "indices", "axis", "out", "mode"), {"axis": None},
              ("a",), _infer_take, _take_vjp, _take_jvp, linear=True), np.take)


def _added_back(name, params, gather, index):
    """The rule of helper `name` (add_taken, add_repeated), which adds values back where the
    NumPy call `gather` took them: linear in `values`, its transpose is `gather` again (used
    when a gradient is differentiated); `index` names the indices or counts parameter."""
    def transpose(call, g):
        return {"values": (fill(f"{gather}(g, i, axis=a)", g=g, i=call.args[index],
                                a=call.const("axis")), call.types["values"])}
    register_helper(Rule(name, name, params, {}, ("values",),
                         lambda call: T.array(call.types["like"].dims,
                                              call.types["values"].dtype or "float64"),
                         transpose, lambda call, dots: _relinear(call, dots, "values"),
                         linear=True), name)


# add_taken(like, indices, values, axis): the helper the rule above emits
_added_back("add_taken", ("like", "indices", "values", "axis"), "np.take", "indices")



# repeat(a, repeats, axis): each entry copied `repeats` times (one count, or a count per entry
# along the axis), linear in `a`; its adjoint sums each entry's copies (the add_repeated
# helper), along the flattened array for axis=None.
def _infer_repeat(call):
    a = call.types["a"]
    dtype = a.dtype or "float64"
    axis = call.const("axis")
    if not constant_axis(call) or (axis is not None and a.dims is None):
        return T.AType("array", dtype, None)
    if axis is None:
        return T.array((T.N,), dtype)
    dims = list(a.dims)
    dims[axis % len(dims)] = T.N
    return T.array(tuple(dims), dtype)


def _repeat_vjp(call, g):
    if not constant_axis(call):
        return None
    bar = fill("add_repeated(a, g, repeats, axis)", a=call.args["a"], g=g,
               repeats=call.args["repeats"], axis=call.const("axis"))
    return {"a": (bar, call.types["a"])}


register(Rule("repeat", "np.repeat", ("a", "repeats", "axis"), {"axis": None}, ("a",),
              _infer_repeat, _repeat_vjp, lambda call, dots: _relinear(call, dots, "a"),
              linear=True), np.repeat)
# add_repeated(like, values, repeats, axis): the helper the rule above emits
_added_back("add_repeated", ("like", "values", "repeats", "axis"), "np.repeat", "repeats")

# The index helpers of code whose small vectors are scalars (autodiff_ast/scalarize.py), and the
# length check of vector arithmetic written as loops (autodiff_ast/vector_loops.py): integer
# results, no derivative; the element they pick is an ordinary read x[index].
for _name, _params in (("broadcast_index", ("m", "j", "n")), ("slice_index", ("m", "i", "stop")),
                       ("store_index", ("m", "j", "n")), ("same_length", ("m", "n")),
                       ("slice_start", ("n", "lo")), ("slice_length", ("n", "lo", "hi"))):
    register_helper(Rule(_name, _name, _params, {}, (), lambda call: T.INT, nondiff_output=True),
                    _name)
register(Rule("shape", "np.shape", ("x",), {}, (),
          lambda call: T.AType("tuple", elts=tuple(T.INT for _ in range(call.ndim("x") or 0)))
          if call.ndim("x") is not None else T.AType("tuple"), nondiff_output=True), np.shape)
register(Rule("size", "np.size", ("x",), {}, (), lambda call: T.INT, nondiff_output=True),
         np.size)
register(Rule("ndim", "np.ndim", ("x",), {}, (), lambda call: T.AType(
    "int", "int64", value=call.ndim("x")), nondiff_output=True), np.ndim)
register(Rule("len", "len", ("x",), {}, (), lambda call: T.INT, nondiff_output=True), len)
# (what a vmap loop over examples gives each example: its own copy of the tapes it pops)
register(Rule("deepcopy", "copy.deepcopy", ("x",), {}, (), lambda call: call.types["x"],
              nondiff_output=True), copy.deepcopy)
register(Rule("int", "int", ("x",), {}, (), lambda call: T.INT, nondiff_output=True), int)
for _name in ("isclose", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
              "logical_and", "logical_or", "logical_xor"):
    register(Rule(_name, f"np.{_name}", ("a", "b"), {}, (),
                  lambda call: T.array(T.broadcast(call.types["a"], call.types["b"]).dims,
                                       "bool") if T.broadcast(call.types["a"], call.types["b"])
                  .kind == "array" else T.BOOL, nondiff_output=True), getattr(np, _name))
register(Rule("logical_not", "np.logical_not", ("x",), {}, (),
              lambda call: T.array(call.types["x"].dims, "bool") if call.types["x"].kind ==
              "array" else T.BOOL, nondiff_output=True), np.logical_not)
for _name in ("allclose", "any", "all", "array_equal"):
    register(Rule(_name, f"np.{_name}", ("a", "b"), {}, (), lambda call: T.BOOL,
                  nondiff_output=True), getattr(np, _name))
register(Rule("count_nonzero", "np.count_nonzero", ("x",), {}, (), lambda call: T.INT,
              nondiff_output=True), np.count_nonzero)


# Python's range() and slice() as values (generated backward loops and scatter indices use them).
register(Rule("range", "range", ("start", "stop", "step"), {}, (),
              lambda call: T.AType("object"), nondiff_output=True), range)
register(Rule("slice", "slice", ("start", "stop", "step"), {}, (),
              lambda call: T.AType("object"), nondiff_output=True), slice)
