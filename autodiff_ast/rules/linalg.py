"""Linear algebra primitives: products (dot, matmul, outer, inner, kron, einsum), trace, diag,
and ``np.linalg`` (norm, solve, inv, det, slogdet, cholesky, eigh, matrix_power, svd, pinv).

Products are bilinear: the forward rule is ``f(a_dot, b) + f(a, b_dot)``; the reverse rules
depend on the operands' ranks, which static inference knows.

>>> from autodiff_ast.rules import by_name
>>> by_name("dot").params
('a', 'b')
"""

from __future__ import annotations

import string

import numpy as np

from codegen.dialect import parse_subscripts

from .. import types as T
from ..templates import fill, summed, to_expr
from . import Rule, register
from .structural import emit_call


def _infer_dot(call):
    a, b = call.types["a"], call.types["b"]
    dtype = T.result_dtype(a, b)
    if a.ndim is None or b.ndim is None:
        return T.AType("array", dtype, None)
    if a.ndim == 0 or b.ndim == 0:
        return T.broadcast(a, b)
    if call.rule.name in ("matmul",) and (a.ndim > 2 or b.ndim > 2):
        batch = T.broadcast(T.array(a.dims[:-2] or (1,)), T.array(b.dims[:-2] or (1,)))
        lead = batch.dims if (a.ndim > 2 or b.ndim > 2) else ()
        tail = (a.dims[-2] if a.ndim >= 2 else None, b.dims[-1] if b.ndim >= 2 else None)
        return T.array(tuple(lead) + tuple(d for d in tail if d is not None), dtype)
    dims = tuple(a.dims[:-1]) + tuple(b.dims[:-2] + b.dims[-1:] if b.ndim >= 2 else ())
    return T.array(dims, dtype)


#: (a's adjoint, b's adjoint) of np.dot / np.matmul and of np.inner, by (rank of a, rank of
#: b). inner contracts the last axes of both: inner(A, B) = A B^T, inner(a, B) = B a.
_DOT_ADJOINTS = {
    (1, 1): ("g * b", "g * a"),
    (2, 1): ("np.outer(g, b)", "np.dot(a.T, g)"),
    (1, 2): ("np.dot(b, g)", "np.outer(a, g)"),
    (2, 2): ("np.dot(g, b.T)", "np.dot(a.T, g)"),
}
_INNER_ADJOINTS = {
    (1, 1): ("g * b", "g * a"),
    (2, 1): ("np.outer(g, b)", "np.dot(a.T, g)"),
    (1, 2): ("np.dot(g, b)", "np.outer(g, a)"),
    (2, 2): ("np.dot(g, b)", "np.dot(g.T, a)"),
}


def _dot_vjp(call, g):
    a, b = call.args["a"], call.args["b"]
    ta, tb = call.types["a"], call.types["b"]
    ra, rb = ta.ndim, tb.ndim
    if ra is None or rb is None:  # rank-generic code: an emitted helper decides at run time
        if call.rule.name == "matmul":
            helper = "matmul_adjoints"
        elif call.rule.name == "dot" and (ra or 0) <= 2 and (rb or 0) <= 2:
            helper = "dot_adjoints"
        else:
            return None
        return {"__let__": [("dot_bars", fill(f"{helper}(g, a, b)", g=g, a=a, b=b))],
                "a": (fill("dot_bars[0]"), T.AType("array", ta.dtype, None)),
                "b": (fill("dot_bars[1]"), T.AType("array", tb.dtype, None))}
    if ra == 0 or rb == 0:
        return {"a": (fill("g * b", g=g, b=b), call.out_type),
                "b": (fill("g * a", g=g, a=a), call.out_type)}
    if call.rule.name == "matmul" and (ra > 2 or rb > 2) or \
            call.rule.name == "dot" and ra > 2 and rb in (1, 2):  # (then dot is matmul)
        # (contributions may keep batch axes their operand lacks: accumulation sums them)
        # (the batch axes of g's type, out.dims[:-2] or [:-1], tell accumulation what to sum)
        out = call.out_type.dims
        if ra == 1:  # a row vector against a stack of matrices: g is (..., m)
            ga = fill("np.matmul(b, np.expand_dims(g, -1))[..., 0]", g=g, b=b)
            gb = fill("np.expand_dims(a, -1) * np.expand_dims(g, -2)", g=g, a=a)
            da, db = out[:-1] + ta.dims[-1:], out[:-1] + ta.dims[-1:] + out[-1:]
        elif rb == 1:  # a stack of matrices against a column vector: g is (..., n)
            ga = fill("np.expand_dims(g, -1) * b", g=g, b=b)
            gb = fill(f"np.sum(a * np.expand_dims(g, -1), axis={tuple(range(ra - 1))})",
                      g=g, a=a)
            da, db = out + tb.dims, tb.dims
        else:
            ga = fill("np.matmul(g, np.swapaxes(b, -1, -2))", g=g, b=b)
            gb = fill("np.matmul(np.swapaxes(a, -1, -2), g)", g=g, a=a)
            da, db = out[:-1] + ta.dims[-1:], out[:-2] + ta.dims[-1:] + out[-1:]
        return {"a": (ga, T.array(tuple(da), ta.dtype or "float64")),
                "b": (gb, T.array(tuple(db), tb.dtype or "float64"))}
    table = _INNER_ADJOINTS if call.rule.name == "inner" else _DOT_ADJOINTS
    if (ra, rb) not in table:
        return None
    ta_expr, tb_expr = table[(ra, rb)]
    return {"a": (fill(ta_expr, g=g, a=a, b=b), ta), "b": (fill(tb_expr, g=g, a=a, b=b), tb)}


def _bilinear_jvp(call, dots):
    terms = []
    for param in call.rule.diff:
        if param in dots:
            args = dict(call.args)
            args[param] = dots[param]
            terms.append(emit_call(call.rule, args, call.keywords))
    return summed(terms) if terms else None


register(Rule("dot", "np.dot", ("a", "b"), {}, ("a", "b"), _infer_dot, _dot_vjp, _bilinear_jvp),
         np.dot)
register(Rule("matmul", "np.matmul", ("a", "b"), {}, ("a", "b"), _infer_dot, _dot_vjp,
              _bilinear_jvp), np.matmul)
register(Rule("inner", "np.inner", ("a", "b"), {}, ("a", "b"), _infer_dot, _dot_vjp,
              _bilinear_jvp), np.inner)
register(Rule("vdot", "np.vdot", ("a", "b"), {}, ("a", "b"), lambda call: T.FLOAT,
              lambda call, g: {"a": (fill("g * b", g=g, b=call.args["b"]), call.types["a"]),
                               "b": (fill("g * a", g=g, a=call.args["a"]), call.types["b"])},
              _bilinear_jvp), np.vdot)


def _outer_vjp(call, g):
    """outer(a, b) = a_i b_j of the flattened operands (NumPy ravels them): g b and a g,
    reshaped back when an operand is not a vector."""
    a, b = call.args["a"], call.args["b"]
    flat = {p: fill("v.ravel()", v=v) if call.ndim(p) != 1 else v
            for p, v in (("a", a), ("b", b))}
    out = {"a": fill("np.dot(g, b)", g=g, b=flat["b"]), "b": fill("np.dot(a, g)", g=g,
                                                                  a=flat["a"])}
    for p, v in (("a", a), ("b", b)):
        if call.ndim(p) != 1:
            out[p] = fill("w.reshape(np.shape(v))", w=out[p], v=v)
    return {p: (out[p], call.types[p]) for p in ("a", "b")}


register(Rule("outer", "np.outer", ("a", "b"), {}, ("a", "b"),
              lambda call: T.array((T.N, T.N), T.result_dtype(call.types["a"], call.types["b"])),
              _outer_vjp, _bilinear_jvp), np.outer)



# kron(a, b) of vectors is the outer product laid flat; of matrices, block (i, j) is
# a[i, j] * b, so g reshaped to (rows of a, rows of b, columns of a, columns of b) pairs each
# entry of a with the block it scales. A vector beside a matrix is a row (NumPy's rule).
def _infer_kron(call):
    a, b = call.types["a"], call.types["b"]
    dtype = T.result_dtype(a, b)
    if a.ndim is None or b.ndim is None:
        return T.AType("array", dtype, None)
    return T.array((T.N,) * max(a.ndim, b.ndim, 1), dtype)


def _as_matrix(expr, rank):
    return expr if rank == 2 else fill("np.reshape(v, (1, -1))", v=expr)


def _kron_vjp(call, g):
    a, b = call.args["a"], call.args["b"]
    ra, rb = call.ndim("a"), call.ndim("b")
    if ra not in (1, 2) or rb not in (1, 2):
        return None  # numbers and stacks of matrices: no template
    ta, tb = call.types["a"], call.types["b"]
    if ra == rb == 1:
        blocks = fill("np.reshape(g, (a.shape[0], b.shape[0]))", g=g, a=a, b=b)
        return {"a": (fill("np.dot(q, b)", q=blocks, b=b), ta),
                "b": (fill("np.dot(a, q)", q=blocks, a=a), tb)}
    a2, b2 = _as_matrix(a, ra), _as_matrix(b, rb)
    blocks = fill("np.reshape(g, (a.shape[0], b.shape[0], a.shape[1], b.shape[1]))", g=g,
                  a=a2, b=b2)
    a_bar = fill("np.sum(q * b[None, :, None, :], axis=(1, 3))", q=blocks, b=b2)
    b_bar = fill("np.sum(q * a[:, None, :, None], axis=(0, 2))", q=blocks, a=a2)
    return {"a": (a_bar if ra == 2 else fill("v[0]", v=a_bar), ta),
            "b": (b_bar if rb == 2 else fill("v[0]", v=b_bar), tb)}


register(Rule("kron", "np.kron", ("a", "b"), {}, ("a", "b"), _infer_kron, _kron_vjp,
              _bilinear_jvp), np.kron)

# ---------------------------------------------------------------- einsum
def _expand_ellipsis(spec, types):
    """`spec` with each ``...`` written as letters, from the operands' ranks (NumPy aligns the
    ellipsis axes on the right), so the adjoint's einsums can name them; None when a rank is
    unknown.

    >>> _expand_ellipsis("...ij,...j->...i", (T.array((T.N, T.N, T.N)), T.array((T.N, T.N))))
    'Aij,Aj->Ai'
    """
    spec = spec.replace(" ", "")
    if "." not in spec:
        return spec
    ins, out = spec.split("->") if "->" in spec else (spec, None)
    parts = ins.split(",")
    if len(parts) != len(types) or 3 * ins.count("...") != ins.count("."):
        return None
    counts = []
    for part, t in zip(parts, types):
        rank = 0 if t.kind == "float" else len(t.dims) if t.kind == "array" and \
            t.dims is not None else None
        if rank is None or rank < len(part.replace("...", "")):
            return None
        counts.append(rank - len(part.replace("...", "")) if "..." in part else 0)
    used = set(spec)
    letters = "".join(c for c in string.ascii_uppercase + string.ascii_lowercase
                      if c not in used)[:max(counts, default=0)]
    parts = [p.replace("...", letters[len(letters) - n:]) for p, n in zip(parts, counts)]
    if out is None:  # NumPy's implicit output: the ellipsis axes, then the letters used once
        named = "".join(ins.split(",")).replace("...", "")
        out = letters + "".join(sorted(c for c in set(named) if named.count(c) == 1))
    else:
        out = out.replace("...", letters)
    return ",".join(parts) + "->" + out


def _infer_einsum(call):
    operands = call.types["operands"].elts or ()
    spec = _expand_ellipsis(call.const("subscripts"), operands)
    if spec is None:
        return T.AType("array", "float64", None)
    try:
        ins, out = parse_subscripts(spec, len(operands))
    except (ValueError, AttributeError):
        return T.AType("array", "float64", None)
    sizes = _letter_sizes(ins, operands)
    return T.array(tuple(sizes.get(c, T.N) for c in out), T.result_dtype(*operands))


def _letter_sizes(ins, types):
    """Each subscript letter's size as far as the operands' types tell: an axis of size one
    takes another operand's size along the same letter (it broadcasts, as in NumPy)."""
    sizes = {}
    for sub, t in zip(ins, types):
        for letter, d in zip(sub, getattr(t, "dims", None) or ()):
            known = sizes.get(letter)
            sizes[letter] = d if known in (None, 1) else known if d == 1 else \
                T.N if T.N in (known, d) else d
    return sizes


def _einsum_call(spec, operands):
    import gast
    return gast.Call(func=fill("np.einsum"), args=[gast.Constant(value=spec, kind=None)] +
                     [to_expr(o) for o in operands], keywords=[])


def _einsum_vjp(call, g):
    pieces = call.args["operands"].elts
    types = call.types["operands"].elts
    spec = _expand_ellipsis(call.const("subscripts"), types)
    if spec is None:
        return None  # (an operand of unknown rank under an ellipsis: no template)
    ins, out = parse_subscripts(spec, len(pieces))
    sizes = _letter_sizes(ins, types)
    result = {}
    for k, sub in enumerate(ins):
        diagonal = len(sub) == 2 and sub[0] == sub[1]  # `ii`: a matrix's diagonal is read
        if len(set(sub)) != len(sub) and not diagonal:
            return None  # another repeated index inside one operand: no template
        others = [(ins[j], pieces[j]) for j in range(len(pieces)) if j != k]
        subs = [out] + [s for s, _ in others]
        ops = [g] + [p for _, p in others]
        wanted = sub[0] if diagonal else sub
        if not set(wanted) <= set("".join(subs)):
            subs.append(wanted)
            ops.append(fill("np.ones(x.shape[0])", x=pieces[k]) if diagonal else
                       fill("np.ones_like(x)", x=pieces[k]))
        contribution = _einsum_call(",".join(subs) + "->" + wanted, ops)
        if diagonal:  # the diagonal's adjoint, placed on the diagonal of a zero matrix
            contribution = fill("np.diag(v)", v=contribution)
        ctype = types[k]
        if not diagonal and getattr(ctype, "dims", None) is not None:
            # an operand's axis of size one was broadcast: its cotangent has the letter's
            # full size there, and is summed back down to the operand's shape
            ctype = T.array(tuple(sizes.get(c, T.N) for c in sub), ctype.dtype)
        result[("operands", k)] = (contribution, ctype)
    return result


def _einsum_jvp(call, dots):
    spec = call.const("subscripts")
    pieces = call.args["operands"].elts
    total = None
    for k in range(len(pieces)):
        if ("operands", k) in dots:
            ops = list(pieces)
            ops[k] = dots[("operands", k)]
            term = _einsum_call(spec, ops)
            total = term if total is None else fill("p + q", p=total, q=term)
    return total


register(Rule("einsum", "np.einsum", ("subscripts", "operands"), {}, ("operands",),
              _infer_einsum, _einsum_vjp, _einsum_jvp, varargs="operands"), np.einsum)


# ---------------------------------------------------------------- products as einsums
# multi_dot and tensordot are einsums whose subscripts follow from the operands' ranks: their
# rules are the einsum rules on a call written that way (as_einsum), results renamed back.
def as_einsum(call, spec, operands):
    """The einsum call computing `call` (a PrimCall of the einsum rule); `operands` is the
    pair (expressions, types) of its operands."""
    import gast

    from . import PrimCall, by_name
    types = {"subscripts": T.AType("str", value=spec),
             "operands": T.AType("tuple", elts=tuple(operands[1]))}
    args = {"subscripts": gast.Constant(value=spec, kind=None),
            "operands": gast.List(elts=list(operands[0]), ctx=gast.Load())}
    return PrimCall(by_name("einsum"), args, types, call.out, call.out_type)


def _multi_dot_spec(call):
    """'ab,bc,cd->ad' for np.linalg.multi_dot of matrices (a vector first or last drops
    its letter), or None when a rank is unknown or not 1 or 2 where it may be."""
    ranks = [t.ndim for t in call.types["arrays"].elts or ()]
    if len(ranks) < 2 or any(r not in (1, 2) for r in ranks) or 1 in ranks[1:-1]:
        return None
    letters = "abcdefghijklmnopqrstuvwxyz"[:len(ranks) + 1]
    subs = [letters[k:k + 2] for k in range(len(ranks))]
    if ranks[0] == 1:
        subs[0] = subs[0][1]
    if ranks[-1] == 1:
        subs[-1] = subs[-1][0]
    out = (subs[0][0] if ranks[0] == 2 else "") + (subs[-1][-1] if ranks[-1] == 2 else "")
    return ",".join(subs) + "->" + out


def _multi_dot_einsum(call):
    spec = _multi_dot_spec(call)
    if spec is None:
        return None
    return as_einsum(call, spec, (call.args["arrays"].elts, call.types["arrays"].elts))


def _infer_multi_dot(call):
    elts = call.types["arrays"].elts or ()
    spec = _multi_dot_spec(call)
    if spec is None:
        return T.AType("array", "float64", None)
    return T.array(tuple(T.N for _ in spec.split("->")[1]), T.result_dtype(*elts))


def _multi_dot_vjp(call, g):
    einsum = _multi_dot_einsum(call)
    if einsum is None:
        return None
    return {("arrays", k): value for (_, k), value in _einsum_vjp(einsum, g).items()}


def _multi_dot_jvp(call, dots):
    einsum = _multi_dot_einsum(call)
    if einsum is None:
        return None
    return _einsum_jvp(einsum, {("operands", k): d for (_, k), d in dots.items()})


register(Rule("multi_dot", "np.linalg.multi_dot", ("arrays",), {}, ("arrays",),
              _infer_multi_dot, _multi_dot_vjp, _multi_dot_jvp), np.linalg.multi_dot)


def tensordot_axes(call):
    """(axes of a, axes of b) that np.tensordot contracts, non-negative, or None."""
    ra, rb, axes = call.ndim("a"), call.ndim("b"), call.const("axes", 2)
    if ra is None or rb is None:
        return None
    if isinstance(axes, int):
        return tuple(range(ra - axes, ra)), tuple(range(axes))
    if not isinstance(axes, tuple) or len(axes) != 2:
        return None
    pair = [a if isinstance(a, tuple) else (a,) for a in axes]
    if len(pair[0]) != len(pair[1]) or not all(isinstance(i, int) for p in pair for i in p):
        return None
    return tuple(i % ra for i in pair[0]), tuple(i % rb for i in pair[1])


def _tensordot_einsum(call):
    axes = tensordot_axes(call)
    if axes is None:
        return None
    ra, rb = call.ndim("a"), call.ndim("b")
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sub_a = [next(letters) for _ in range(ra)]
    sub_b = [sub_a[axes[0][axes[1].index(i)]] if i in axes[1] else next(letters)
             for i in range(rb)]
    out = [c for i, c in enumerate(sub_a) if i not in axes[0]] + \
        [c for i, c in enumerate(sub_b) if i not in axes[1]]
    spec = "".join(sub_a) + "," + "".join(sub_b) + "->" + "".join(out)
    return as_einsum(call, spec, ((call.args["a"], call.args["b"]),
                                  (call.types["a"], call.types["b"])))


def _infer_tensordot(call):
    axes = tensordot_axes(call)
    a, b = call.types["a"], call.types["b"]
    if axes is None or a.dims is None or b.dims is None:
        return T.AType("array", T.result_dtype(a, b), None)
    dims = [d for i, d in enumerate(a.dims) if i not in axes[0]] + \
        [d for i, d in enumerate(b.dims) if i not in axes[1]]
    return T.array(tuple(dims), T.result_dtype(a, b)) if dims else T.FLOAT


def _tensordot_vjp(call, g):
    einsum = _tensordot_einsum(call)
    if einsum is None:
        return None
    bars = _einsum_vjp(einsum, g)
    return {"a": bars[("operands", 0)], "b": bars[("operands", 1)]}


def _tensordot_jvp(call, dots):
    einsum = _tensordot_einsum(call)
    if einsum is None:
        return None
    keys = {"a": ("operands", 0), "b": ("operands", 1)}
    return _einsum_jvp(einsum, {keys[p]: d for p, d in dots.items()})


register(Rule("tensordot", "np.tensordot", ("a", "b", "axes"), {"axes": 2}, ("a", "b"),
              _infer_tensordot, _tensordot_vjp, _tensordot_jvp), np.tensordot)


# cross(a, b) of 3-vectors along the last axis (stacks broadcast): bilinear, with
# <g, a x b> = <a, b x g> = <b, g x a>.
def _cross_vjp(call, g):
    if any(p in call.args for p in ("axisa", "axisb", "axisc", "axis")):
        return None  # vectors along another axis: no template yet
    a, b = call.args["a"], call.args["b"]
    return {"a": (fill("np.cross(b, g)", b=b, g=g), call.out_type),
            "b": (fill("np.cross(g, a)", a=a, g=g), call.out_type)}


def _cross_jvp(call, dots):
    if any(p in call.args for p in ("axisa", "axisb", "axisc", "axis")):
        return None
    return _bilinear_jvp(call, dots)


register(Rule("cross", "np.cross", ("a", "b", "axisa", "axisb", "axisc", "axis"), {},
              ("a", "b"), lambda call: T.broadcast(call.types["a"], call.types["b"]),
              _cross_vjp, _cross_jvp), np.cross)


# ---------------------------------------------------------------- trace and diagonals
def _infer_trace(call):
    """A number for a matrix; for more axes, the sums over the first two, an array of the
    remaining axes (NumPy's np.trace)."""
    x = call.types["x"]
    if x.ndim is None:
        return T.AType("array", x.dtype or "float64", None)
    return T.FLOAT if x.ndim <= 2 else T.array(tuple(x.dims[2:]), x.dtype or "float64")


def _trace_vjp(call, g):
    """g on the diagonal of the first two axes (each entry of g along the others)."""
    rank, x = call.ndim("x"), call.args["x"]
    eye = fill("np.eye(x.shape[0], x.shape[1])", x=x)
    if rank is None:  # (rank-generic code: the axes past the first two, counted at run time)
        eye = fill("np.expand_dims(e, tuple(range(2, np.ndim(x))))", e=eye, x=x)
    elif rank > 2:
        eye = fill("np.expand_dims(e, k)", e=eye, k=tuple(range(2, rank)))
    return {"x": (fill("g * e", g=g, e=eye), call.types["x"])}


register(Rule("trace", "np.trace", ("x",), {}, ("x",), _infer_trace, _trace_vjp,
              lambda call, dots: fill("np.trace(d)", d=dots["x"]), linear=True), np.trace)


def _infer_diag(call):
    x = call.types["x"]
    return T.array((T.N, T.N) if x.ndim == 1 else (T.N,), x.dtype or "float64")


def _diag_vjp(call, g):
    x = call.args["x"]
    if call.ndim("x") == 1:
        return {"x": (fill("np.diag(g)", g=g), call.types["x"])}
    # a matrix's diagonal: back on the diagonal of zeros of the matrix's shape (np.diag(g)
    # would be square: wrong for a rectangular matrix); of unknown rank, the helper decides
    return {"x": (fill("diagonal_adjoint(g, x)", g=g, x=x), call.types["x"])}


register(Rule("diag", "np.diag", ("x",), {}, ("x",), _infer_diag, _diag_vjp,
              lambda call, dots: fill("np.diag(d)", d=dots["x"]), linear=True), np.diag)


def diagonal_axes(call):
    """np.diagonal's (axis1, axis2) made non-negative; None unless its templates cover the
    call: offset 0, the last two axes in order (as np.diag of a matrix, and vmap's batched
    form of it, read them)."""
    rank = call.ndim("x")
    axis1, axis2 = call.const("axis1", 0), call.const("axis2", 1)
    if rank is None or rank < 2 or call.const("offset", 0) != 0 or \
            not isinstance(axis1, int) or not isinstance(axis2, int):
        return None
    axes = (axis1 % rank, axis2 % rank)
    return axes if axes == (rank - 2, rank - 1) else None


def _infer_diagonal(call):
    x = call.types["x"]
    axes = diagonal_axes(call)
    if x.dims is None or axes is None:
        return T.array(None if x.dims is None else (T.N,) * (len(x.dims) - 1),
                       x.dtype or "float64")
    return T.array(tuple(x.dims[:-2]) + (T.N,), x.dtype or "float64")


def _diagonal_vjp(call, g):
    if diagonal_axes(call) is None:
        return None
    return {"x": (fill("diagonal_adjoint(g, x)", g=g, x=call.args["x"]), call.types["x"])}


def _diagonal_jvp(call, dots):
    if diagonal_axes(call) is None:
        return None
    return emit_call(call.rule, {**call.args, "x": dots["x"]}, call.keywords)


register(Rule("diagonal", "np.diagonal", ("x", "offset", "axis1", "axis2"),
              {"offset": 0, "axis1": 0, "axis2": 1}, ("x",), _infer_diagonal, _diagonal_vjp,
              _diagonal_jvp, linear=True), np.diagonal)


# ---------------------------------------------------------------- np.linalg
def _infer_norm(call):
    from .structural import _dims_without
    x = call.types["x"]
    keep = bool(call.const("keepdims", False))
    if call.const("axis") is None and not keep:
        return T.FLOAT
    if x.kind != "array" or x.dims is None:
        return T.AType("array", x.dtype, None)
    return T.array(_dims_without(x.dims, call.axis(), keep), x.dtype)


def _kept(call, value):
    """`value` (the norm, or its cotangent) with the reduced axes as size one, broadcasting
    against x: as it is with keepdims=True, put back along the axis without."""
    from .structural import _unreduced
    if call.axis() is None or call.const("keepdims", False):
        return value
    return _unreduced(call, value)


#: The matrix norms of np.linalg.norm(x, ord) of one matrix (no axis), by ord.
MATRIX_NORMS = {"nuc": "nuclear", 2: "largest", -2: "smallest", 1: "max_column",
                -1: "min_column", np.inf: "max_row", -np.inf: "min_row"}


def norm_kind(call):
    """Which norm a call computes: of vectors, or along one axis, "two" (the 2-norm, also the
    Frobenius norm of a matrix), "one", "max", "min" (ord=1, inf, -inf), "power" (any other
    number p: the p-norm) or "zero" (ord=0, a count: no derivative); of one matrix (no axis),
    a value of MATRIX_NORMS; or None: no template (a pair of axes, a matrix norm of a stack,
    an order NumPy refuses)."""
    order, rank, axis = call.const("ord"), call.ndim("x"), call.axis()
    if isinstance(axis, tuple):
        return None
    if order is None or (order == "fro" and rank == 2 and axis is None):
        return "two"
    number = isinstance(order, (int, float)) and not isinstance(order, bool)
    if axis is None and rank != 1:
        # a matrix (or unknown rank): ord= picks a matrix norm
        return MATRIX_NORMS.get(order) if rank == 2 and (number or order == "nuc") else None
    if not number or order != order:
        return None
    return {2: "two", 1: "one", np.inf: "max", -np.inf: "min", 0: "zero"}.get(order, "power")


def _signs(x):
    """d|x|/dx, 1 at 0 as JAX's abs rule gives."""
    return fill("np.where(x >= 0.0, 1.0, -1.0)", x=x)


def _abs_sums_slope(call, lets=None):
    """d norm / dx of the matrix norms ord=1, -1 (the largest or smallest sum of |x| down a
    column), inf, -inf (along a row): |x|'s slope times an equal share of the tied sums (as
    np.max and np.min share). With `lets` (a list), the sums and ties are bound there."""
    kind, x = norm_kind(call), call.args["x"]
    rows = kind.endswith("row")
    sums = fill(f"np.sum(np.abs(x), axis={1 if rows else 0})", x=x)
    pick = "np.max" if kind.startswith("max") else "np.min"
    if lets is not None:
        lets.append(("norm_sums", sums))
        sums = fill("norm_sums")
    ties = fill(f"1.0 * (c == {pick}(c))", c=sums)
    if lets is not None:
        lets.append(("norm_ties", ties))
        ties = fill("norm_ties")
    shares = fill("t / np.sum(t)", t=ties)
    return fill("s * w[:, None]" if rows else "s * w", s=_signs(x), w=shares)


def _norm_slope(call, lets=None):
    """d norm / dx, shaped like x (the reduced norm put back along its axis)."""
    from .structural import _unreduced
    x, kind, axis = call.args["x"], norm_kind(call), call.axis()
    y = _kept(call, call.out)
    if kind == "two":
        return fill("x / y", x=x, y=y)
    if kind == "one":
        return _signs(x)
    if kind == "power":  # |x|^(p-1) y^(1-p), as a ratio: no overflow for a large p
        power = float(call.const("ord")) - 1.0
        return fill(f"s * (np.abs(x) / y) ** {power!r}", s=_signs(x), x=x, y=y)
    if kind in ("nuclear", "largest", "smallest"):
        order = {"nuclear": 0, "largest": 2, "smallest": -2}[kind]
        return fill(f"singular_norm_slope(x, {order})", x=x)
    if kind in ("max_column", "min_column", "max_row", "min_row"):
        return _abs_sums_slope(call, lets)
    mask = fill("np.abs(x) == y", x=x, y=y)
    count = fill("np.sum(m)", m=mask) if axis is None else \
        _unreduced(call, fill("np.sum(m, axis=a)", m=mask, a=axis))
    return fill("s * m / c", s=_signs(x), m=mask, c=count)


def _norm_refused(call):
    """None (what a vjp or jvp returns for a call it has no template for) when the norm has
    none: ord=0, refused in words of its own, a pair of axes, a matrix norm of a stack."""
    kind = norm_kind(call)
    if kind == "zero":
        return call.refuse(
            "np.linalg.norm with ord=0 counts the nonzero entries: a piecewise constant "
            "function, with no derivative to give", "count them with np.count_nonzero "
            "(no derivative), or pick another ord")
    return kind


def _norm_vjp(call, g):
    if _norm_refused(call) is None:
        return None
    lets = []
    result = {"x": (fill("g * s", g=_kept(call, g), s=_norm_slope(call, lets)),
                    call.types["x"])}
    if lets:
        result["__let__"] = lets
    return result


def _norm_jvp(call, dots):
    from .structural import reduce_sum
    if _norm_refused(call) is None:
        return None  # no template (as in reverse mode)
    return reduce_sum(call, fill("d * s", d=dots["x"], s=_norm_slope(call)))


register(Rule("norm", "np.linalg.norm", ("x", "ord", "axis", "keepdims"),
              {"ord": None, "axis": None, "keepdims": False}, ("x",), _infer_norm, _norm_vjp,
              _norm_jvp), np.linalg.norm)


def _one_matrix(call):
    """Whether np.linalg's `a` is one matrix (the readable ``x.T`` / ``np.dot`` forms, which
    Numba compiles); a stack of matrices (or an unknown rank) takes ``np.swapaxes(x, -1, -2)``
    and ``np.matmul``, which map over the leading axes."""
    return call.ndim("a") == 2


def _mT(call, x):
    """x with its last two axes swapped."""
    return fill("x.T", x=x) if _one_matrix(call) else fill("np.swapaxes(x, -1, -2)", x=x)


def _mm(call, p, q):
    """The matrix product p q (of each matrix of a stack)."""
    return fill("np.dot(p, q)" if _one_matrix(call) else "np.matmul(p, q)", p=p, q=q)


def _traces(call, m):
    """The trace of m, or of each matrix of a stack."""
    if _one_matrix(call):
        return fill("np.trace(m)", m=m)
    return fill("np.sum(np.diagonal(m, axis1=-2, axis2=-1), axis=-1)", m=m)


def _per_matrix(call, v):
    """A number per matrix (det, logdet) put against its matrix: v[..., None, None]."""
    return v if _one_matrix(call) else fill("np.expand_dims(v, (-2, -1))", v=v)


def _solve_vjp(call, g):
    a, x = call.args["a"], call.out
    ra, rb = call.ndim("a"), call.ndim("b")
    if ra in (2, None) and rb in (1, 2, None):  # one matrix (or ranks the code leaves open)
        # `solve_bar` is a local the reverse pass binds once and both contributions read.
        a_bar = "-np.outer(solve_bar, x)" if rb == 1 else "-np.dot(solve_bar, x.T)"
        if rb is None:  # vector or matrix right-hand side: one formula for both
            a_bar = "-np.dot(solve_bar.reshape((x.shape[0], -1)), " \
                    "x.reshape((x.shape[0], -1)).T)"
        return {"__let__": [("solve_bar", fill("np.linalg.solve(a.T, g)", a=a, g=g))],
                "a": (fill(a_bar, x=x), call.types["a"]),
                "b": (fill("solve_bar"), call.types["b"])}
    if ra is None or rb is None:
        return None
    # Stacks: NumPy 2 reads b as a vector only when it has one axis. Contributions keep the
    # output's stack axes; accumulation sums those their operand lacks.
    out = call.out_type.dims
    n = (call.types["a"].dims or (T.N,))[-1:]
    if rb == 1:
        let = fill("np.linalg.solve(np.swapaxes(a, -1, -2), g[..., None])[..., 0]", a=a, g=g)
        a_bar = fill("-np.expand_dims(solve_bar, -1) * np.expand_dims(x, -2)", x=x)
        a_dims = tuple(out) + tuple(n)
    else:
        let = fill("np.linalg.solve(np.swapaxes(a, -1, -2), g)", a=a, g=g)
        a_bar = fill("-np.matmul(solve_bar, np.swapaxes(x, -1, -2))", x=x)
        a_dims = tuple(out[:-1]) + tuple(n)
    dtype = call.types["a"].dtype or "float64"
    return {"__let__": [("solve_bar", let)],
            "a": (a_bar, T.array(a_dims, dtype)),
            "b": (fill("solve_bar"), T.array(tuple(out), dtype))}


def _solve_jvp(call, dots):
    a, x = call.args["a"], call.out
    rhs = dots.get("b")
    column = call.ndim("b") == 1 and not _one_matrix(call)  # a vector against a stack
    if "a" in dots:
        # (np.dot for one matrix against a vector or a matrix; a stack of right-hand sides,
        # b of rank 3 and more, takes np.matmul: np.dot would contract another axis)
        dot = _one_matrix(call) and call.ndim("b") in (1, 2)
        term = fill("np.matmul(da, x[..., None])[..., 0]" if column else
                    "np.dot(da, x)" if dot else "np.matmul(da, x)", da=dots["a"], x=x)
        rhs = fill("-t", t=term) if rhs is None else fill("r - t", r=rhs, t=term)
    if column:
        return fill("np.linalg.solve(a, r[..., None])[..., 0]", a=a, r=rhs)
    return fill("np.linalg.solve(a, r)", a=a, r=rhs)


def _infer_per_matrix(call):
    """A number per matrix: one for a matrix, an array of the stack's axes otherwise."""
    a = call.types["a"]
    if a.ndim is None:
        return T.AType("array", "float64", None)
    return T.FLOAT if a.ndim <= 2 else T.array(tuple(a.dims[:-2]), "float64")


def _inv_vjp(call, g):
    y_t = _mT(call, call.out)
    return {"a": (fill("-m", m=_mm(call, _mm(call, y_t, g), y_t)), call.types["a"])}


def _det_vjp(call, g):
    scale = _per_matrix(call, fill("g * y", g=g, y=call.out))
    inverse_t = _mT(call, fill("np.linalg.inv(a)", a=call.args["a"]))
    return {"a": (fill("s * i", s=scale, i=inverse_t), call.types["a"])}


def _infer_solve(call):
    """b's type for one matrix; for a stack, the stack's axes, then b's vector (NumPy 2:
    when b has one axis) or matrix axes."""
    a, b = call.types["a"], call.types["b"]
    if a.ndim in (2, None) or b.ndim is None or a.dims is None or b.dims is None:
        return b
    dtype = T.result_dtype(a, b)
    if b.ndim == 1:
        return T.array(tuple(a.dims[:-1]), dtype)
    return T.broadcast(T.array(tuple(a.dims[:-1]) + tuple(b.dims[-1:]), dtype), b)


register(Rule("solve", "np.linalg.solve", ("a", "b"), {}, ("a", "b"), _infer_solve,
              _solve_vjp, _solve_jvp), np.linalg.solve)
register(Rule("inv", "np.linalg.inv", ("a",), {}, ("a",), lambda call: call.types["a"],
              _inv_vjp,
              lambda call, dots: fill("-m", m=_mm(call, _mm(call, call.out, dots["a"]),
                                                  call.out))),
         np.linalg.inv)
register(Rule("det", "np.linalg.det", ("a",), {}, ("a",), _infer_per_matrix, _det_vjp,
              lambda call, dots: fill("y * t", y=call.out, t=_traces(call, fill(
                  "np.linalg.solve(a, d)", a=call.args["a"], d=dots["a"])))), np.linalg.det)


# cholesky: a = l l^T with l lower triangular. The tangent is l phi(l^-1 sym(da) l^-T), phi
# keeping the lower triangle with the diagonal halved (sym(da) = (da + da^T) / 2: only
# symmetric perturbations keep a valid input, as in JAX); the cotangent of a is
# l^-T sym_lower(l^T g) l^-1 / 2 with sym_lower(x) = tril(x) + tril(x, -1)^T, which is
# symmetric (Murray 2016, "Differentiation of the Cholesky decomposition"). np.tril and
# np.linalg.solve act on the last two axes, so a stack of matrices takes the same forms.
def _cholesky_vjp(call, g):
    y = call.out
    x = _mm(call, _mT(call, y), g)
    lower = fill("np.tril(x) + t", x=x, t=_mT(call, fill("np.tril(x, -1)", x=x)))
    left = fill("np.linalg.solve(yt, q)", yt=_mT(call, y), q=lower)  # l^-T q
    return {"a": (fill("0.5 * m", m=_mT(call, fill("np.linalg.solve(yt, wt)", yt=_mT(call, y),
                                                     wt=_mT(call, left)))),
                  call.types["a"])}


def _cholesky_jvp(call, dots):
    y, d = call.out, dots["a"]
    sym = fill("0.5 * (d + dt)", d=d, dt=_mT(call, d))
    inner = _mT(call, fill("np.linalg.solve(y, m)", y=y, m=_mT(call, fill(
        "np.linalg.solve(y, s)", y=y, s=sym))))
    size = fill("y.shape[0]" if _one_matrix(call) else "y.shape[-1]", y=y)
    return _mm(call, y, fill("np.tril(z) * (1.0 - 0.5 * np.eye(n))", z=inner, n=size))


register(Rule("cholesky", "np.linalg.cholesky", ("a",), {}, ("a",),
              lambda call: call.types["a"], _cholesky_vjp, _cholesky_jvp), np.linalg.cholesky)


def _slogdet_vjp(call, g):
    # g is (sign cotangent, logdet cotangent); the sign carries no derivative.
    g_logdet = g[1]
    if g_logdet is None:
        return {}
    inverse_t = _mT(call, fill("np.linalg.inv(a)", a=call.args["a"]))
    return {"a": (fill("g * i", g=_per_matrix(call, g_logdet), i=inverse_t), call.types["a"])}


def _slogdet_jvp(call, dots):
    return (None, _traces(call, fill("np.linalg.solve(a, d)", a=call.args["a"], d=dots["a"])))


register(Rule("slogdet", "np.linalg.slogdet", ("a",), {}, ("a",),
              lambda call: T.AType("tuple", elts=(_infer_per_matrix(call),) * 2), _slogdet_vjp,
              _slogdet_jvp), np.linalg.slogdet)


# eigh(a) = (w, v) of a symmetric a (eigenvalues ascending, unit eigenvectors as columns).
# NumPy reads one triangle; as in JAX, the tangent taken is that of a symmetric perturbation,
# sym(da) = (da + da^T) / 2, so cotangents are symmetric. With p = v^T sym(da) v:
# dw = diag(p), dv = v (f * p), f[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it
# (distinct eigenvalues). Transposed: a_bar = sym(v (diag(gw) + f * (v^T gv)) v^T).
def _eigen_rank_ok(call):
    """One matrix: stacks of matrices and unknown ranks have no template."""
    return call.ndim("a") == 2


def _infer_eigvalsh(call):
    """The eigenvalues: a's type without its last axis."""
    a = call.types["a"]
    return T.array(None if a.dims is None else tuple(a.dims[:-1]), "float64")


def _gaps(w):
    """f[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (no division by zero)."""
    return fill("1.0 / (w - w[:, None] + np.eye(w.shape[0])) - np.eye(w.shape[0])", w=w)


def _eigvalsh_vjp(call, g):
    """a_bar = v diag(g) v^T, the eigenvectors computed again."""
    if not _eigen_rank_ok(call):
        return None
    return {"__let__": [("eigh_vectors", fill("np.linalg.eigh(a)[1]", a=call.args["a"]))],
            "a": (fill("np.dot(v * g, v.T)", v="eigh_vectors", g=g), call.types["a"])}


def _eigvalsh_jvp(call, dots):
    """w_dot[k] = v_k . d v_k (an emitted helper computes v)."""
    if not _eigen_rank_ok(call):
        return None
    return fill("eigvalsh_tangent(a, d)", a=call.args["a"], d=dots["a"])


register(Rule("eigvalsh", "np.linalg.eigvalsh", ("a", "UPLO"), {}, ("a",), _infer_eigvalsh,
              _eigvalsh_vjp, _eigvalsh_jvp), np.linalg.eigvalsh)


def _eigh_vjp(call, g):
    """a_bar = sym(v (diag(gw) + f * (v^T gv)) v^T), either term absent without its cotangent."""
    if not _eigen_rank_ok(call):
        return None
    w, v = fill("y[0]", y=call.out), fill("y[1]", y=call.out)
    inner = None
    if g[0] is not None:
        inner = fill("np.diag(gw)", gw=g[0])
    if g[1] is not None:
        term = fill("f * np.dot(v.T, gv)", f=_gaps(w), v=v, gv=g[1])
        inner = term if inner is None else fill("a + b", a=inner, b=term)
    if inner is None:
        return {}
    return {"__let__": [("eigh_bar", fill("np.dot(v, np.dot(m, v.T))", v=v, m=inner))],
            "a": (fill("0.5 * (b + b.T)", b="eigh_bar"), call.types["a"])}


def _eigh_jvp(call, dots):
    """(diag(v^T d v), v (f * (v^T sym(d) v)))."""
    if not _eigen_rank_ok(call):
        return None
    w, v = fill("y[0]", y=call.out), fill("y[1]", y=call.out)
    d = dots["a"]
    w_dot = fill("np.sum(v * np.dot(d, v), axis=0)", v=v, d=d)
    p = fill("np.dot(v.T, np.dot(0.5 * (d + d.T), v))", v=v, d=d)
    return (w_dot, fill("np.dot(v, f * p)", v=v, f=_gaps(w), p=p))


register(Rule("eigh", "np.linalg.eigh", ("a", "UPLO"), {}, ("a",),
              lambda call: T.AType("tuple", elts=(_infer_eigvalsh(call), call.types["a"])),
              _eigh_vjp, _eigh_jvp), np.linalg.eigh)


# matrix_power(a, n) = a^n for an int n written in the code. Its tangent is the sum over
# k < n of a^k da a^(n-1-k) (the emitted matrix_power_tangent, a loop of products, for n > 2),
# and a's adjoint is the same sum of a^T and g. For n = -m < 0, y = inv(a^m): dy = -y d(a^m) y.
# The products map over a stack's leading axes, as NumPy's matrix_power does.
def _power_tangent(call, a, d, m):
    """The sum over k < m of a^k d a^(m-1-k), m >= 1."""
    if m == 1:
        return to_expr(d)
    if m == 2:
        return fill("p + q", p=_mm(call, a, d), q=_mm(call, d, a))
    return fill(f"matrix_power_tangent(a, d, {m})", a=a, d=d)


def _matrix_power_n(call):
    n = call.const("n")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _matrix_power_vjp(call, g):
    n = _matrix_power_n(call)
    if n is None:
        return None
    if n == 0:
        return {}  # the identity: no derivative
    lets = []
    if n < 0:  # the adjoint of a^m, m = -n: -y^T g y^T
        y_t = _mT(call, call.out)
        lets.append(("power_bar", fill("-m", m=_mm(call, _mm(call, y_t, g), y_t))))
        g = "power_bar"
    result = {"a": (_power_tangent(call, _mT(call, call.args["a"]), g, abs(n)),
                    call.types["a"])}
    if lets:
        result["__let__"] = lets
    return result


def _matrix_power_jvp(call, dots):
    n = _matrix_power_n(call)
    if n is None:
        return None
    y = call.out
    if n == 0:
        return fill("np.zeros_like(y)", y=y)
    tangent = _power_tangent(call, call.args["a"], dots["a"], abs(n))
    if n < 0:
        tangent = fill("-m", m=_mm(call, _mm(call, y, tangent), y))
    return tangent


register(Rule("matrix_power", "np.linalg.matrix_power", ("a", "n"), {}, ("a",),
              lambda call: call.types["a"], _matrix_power_vjp, _matrix_power_jvp),
         np.linalg.matrix_power)


# svd(a) = (u, s, vh) of one matrix, a = u diag(s) vh, singular values descending. With
# compute_uv=False only s: s_dot[k] = u_k . da v_k, so a_bar = u diag(g) vh. The reduced
# decomposition (full_matrices=False): with p = u^T da v and f[i, j] = 1 / (s[j]^2 - s[i]^2)
# (0 where two singular values are equal, as JAX's F), u_dot = u (f * (p s + s p^T)) +
# (1 - u u^T) da v / s and v_dot = v (f * (s p + p^T s)) + (1 - v v^T) da^T u / s (the emitted
# svd_tangents); transposed, a_bar = u (diag(gs) + (f * (j - j^T)) s + s (f * (k - k^T))) vh
# + (gu - u j) / s vh + u / s (gvh - k^T vh) with j = u^T gu, k = vh gvh^T (Townsend 2016,
# "Differentiating the singular value decomposition"). full_matrices=True (NumPy's default)
# only for s: the extra columns of u or rows of vh of a non-square matrix are not unique.
def _infer_svd(call):
    a = call.types["a"]
    uv, full = call.const("compute_uv", True), call.const("full_matrices", True)
    if uv is None:
        return T.AType("tuple")  # (compute_uv known at run time: refused where normalized)
    if a.dims is None or len(a.dims) < 2:
        s_t = T.AType("array", "float64", None)
        return T.AType("tuple", elts=(s_t, s_t, s_t)) if uv else s_t
    lead, m, n = tuple(a.dims[:-2]), a.dims[-2], a.dims[-1]
    k = 1 if 1 in (m, n) else T.N
    s_t = T.array(lead + (k,), "float64")
    if not uv:
        return s_t
    u_t = T.array(lead + ((m, m) if full else (m, k)), "float64")
    return T.AType("tuple", elts=(u_t, s_t, T.array(lead + ((n, n) if full else (k, n)),
                                                    "float64")))


def _svd_refused(call, cotangents=True):
    """None (with the reason, PrimCall.refuse) unless the call has a template: one matrix,
    hermitian=False, and full_matrices=False when u or vh have `cotangents`."""
    if call.ndim("a") is None:
        return None
    if call.ndim("a") != 2:
        return call.refuse("np.linalg.svd has derivative rules for one matrix, not for a "
                           "stack of matrices", "take the SVD of each matrix in a loop")
    if call.const("hermitian", False):
        return call.refuse("np.linalg.svd with hermitian=True has no derivative rule",
                           "leave hermitian=False (the same singular values)")
    if call.const("compute_uv", True) and call.const("full_matrices", True) and cotangents:
        return call.refuse(
            "np.linalg.svd with full_matrices=True (NumPy's default) has no derivative for u "
            "and vh: their extra singular vectors of a non-square matrix are not unique",
            "write np.linalg.svd(a, full_matrices=False) (the same for a square matrix), or "
            "compute_uv=False for the singular values alone")
    return True


def _svd_vjp(call, g):
    a = call.args["a"]
    if not call.const("compute_uv", True):
        if _svd_refused(call) is None:
            return None
        return {"__let__": [("svd_a", fill("np.linalg.svd(a, full_matrices=False)", a=a))],
                "a": (fill("np.dot(svd_a[0] * g, svd_a[2])", g=g), call.types["a"])}
    gu, gs, gvh = g
    if _svd_refused(call, gu is not None or gvh is not None) is None:
        return None
    u, s, vh = (fill(f"y[{k}]", y=call.out) for k in range(3))
    if gu is None and gvh is None:
        if gs is None:
            return {}
        # (full matrices: the first len(s) columns of u and rows of vh are the reduced ones)
        if call.const("full_matrices", True):
            u, vh = fill("u[:, :s.shape[0]]", u=u, s=s), fill("v[:s.shape[0]]", v=vh, s=s)
        return {"a": (fill("np.dot(u * g, vh)", u=u, g=gs, vh=vh), call.types["a"])}
    # (the squares bound apart: compiled with multiply-adds, s * s - (s * s)[:, None] leaves
    # the rounding error of s * s on the diagonal, where f must be 0)
    lets = [("svd_squares", fill("s * s", s=s)),
            ("svd_gaps", fill("svd_squares - svd_squares[:, None]")),
            ("svd_same", fill("1.0 * (svd_gaps == 0.0)")),
            ("svd_f", fill("1.0 / (svd_gaps + svd_same) - svd_same")),
            ("svd_zero", fill("1.0 * (s == 0.0)", s=s)),
            ("svd_s_inv", fill("1.0 / (s + svd_zero) - svd_zero", s=s))]
    core = [fill("np.diag(g)", g=gs)] if gs is not None else []
    rest = []
    if gu is not None:
        lets.append(("svd_j", fill("np.dot(u.T, g)", u=u, g=gu)))
        core.append(fill("(svd_f * (svd_j - svd_j.T)) * s", s=s))
        rest.append(fill("np.dot((g - np.dot(u, svd_j)) * svd_s_inv, vh)", g=gu, u=u, vh=vh))
    if gvh is not None:
        lets.append(("svd_k", fill("np.dot(vh, g.T)", vh=vh, g=gvh)))
        core.append(fill("s[:, None] * (svd_f * (svd_k - svd_k.T))", s=s))
        rest.append(fill("np.dot(u * svd_s_inv, g - np.dot(svd_k.T, vh))", g=gvh, u=u, vh=vh))
    total = summed([fill("np.dot(u, np.dot(c, vh))", u=u, c=summed(core), vh=vh)] + rest)
    return {"__let__": lets, "a": (total, call.types["a"])}


def _svd_jvp(call, dots):
    a, d = call.args["a"], dots["a"]
    if _svd_refused(call) is None:
        return None
    if not call.const("compute_uv", True):
        return fill("singular_value_tangents(a, d)", a=a, d=d)
    return fill("svd_tangents(y[0], y[1], y[2], d)", y=call.out, d=d)


register(Rule("svd", "np.linalg.svd", ("a", "full_matrices", "compute_uv", "hermitian"),
              {"full_matrices": True, "compute_uv": True, "hermitian": False}, ("a",),
              _infer_svd, _svd_vjp, _svd_jvp), np.linalg.svd)


# pinv(a) of a matrix of full rank (or a stack of them), y = a^+. Golub & Pereyra (1973):
# dy = -y da y + y y^T da^T (1 - a y) + (1 - y a) da^T y^T y, so
# a_bar = -y^T g y^T + (1 - a y) g^T y y^T + y^T y g^T (1 - y a). Where the rank drops, the
# pseudo-inverse jumps: no derivative there (JAX's rule is this one too).
def _infer_pinv(call):
    a = call.types["a"]
    if a.dims is None or len(a.dims) < 2:
        return T.AType("array", "float64", None)
    return T.array(tuple(a.dims[:-2]) + (a.dims[-1], a.dims[-2]), "float64")


def _pinv_refused(call):
    if call.const("hermitian", False):
        return call.refuse("np.linalg.pinv with hermitian=True has no derivative rule",
                           "leave hermitian=False")
    return True


def _pinv_vjp(call, g):
    if _pinv_refused(call) is None:
        return None
    a, y = call.args["a"], call.out
    y_t, g_t = _mT(call, y), _mT(call, g)
    lets = [("pinv_h", _mm(call, _mm(call, g_t, y), y_t)),   # g^T y y^T
            ("pinv_k", _mm(call, _mm(call, y_t, y), g_t))]   # y^T y g^T
    total = fill("-m + h - ayh + k - kya", m=_mm(call, _mm(call, y_t, g), y_t), h="pinv_h",
                 ayh=_mm(call, a, _mm(call, y, "pinv_h")), k="pinv_k",
                 kya=_mm(call, _mm(call, "pinv_k", y), a))
    return {"__let__": lets, "a": (total, call.types["a"])}


def _pinv_jvp(call, dots):
    if _pinv_refused(call) is None:
        return None
    a, y, d = call.args["a"], call.out, dots["a"]
    d_t, y_t = _mT(call, d), _mT(call, y)
    rows, cols = (fill(f"a.shape[{k}]", a=a) for k in (-2, -1))
    left = fill("np.eye(m) - ay", m=rows, ay=_mm(call, a, y))     # 1 - a y
    right = fill("np.eye(n) - ya", n=cols, ya=_mm(call, y, a))    # 1 - y a
    return fill("-p + q + r", p=_mm(call, _mm(call, y, d), y),
                q=_mm(call, _mm(call, y, y_t), _mm(call, d_t, left)),
                r=_mm(call, _mm(call, right, d_t), _mm(call, y_t, y)))


register(Rule("pinv", "np.linalg.pinv", ("a", "rcond", "hermitian", "rtol"), {}, ("a",),
              _infer_pinv, _pinv_vjp, _pinv_jvp), np.linalg.pinv)
