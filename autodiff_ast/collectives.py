"""Collectives over a mapped axis: psum, pmean, pmax, pmin, all_gather, axis_index (JAX's).

Inside a function mapped by :func:`autodiff_ast.pmap` or by ``vmap(..., axis_name=...)``,
``psum(x, 'i')`` is the sum of `x` over every example (shard) of the axis named ``'i'``, the
same value in each; ``axis_index('i')`` is the example's own position. They are primitives
with rules, so the normalizer, the reverse sweep and forward mode treat them like ``np.sum``:

- reverse: the adjoint of ``psum`` is ``psum`` (every shard's output depends on every input),
  of ``pmean`` is ``pmean``; ``pmax``/``pmin`` send the summed cotangent to the shards that
  hold the extreme value; ``all_gather``'s adjoint is this shard's row of the summed cotangent;
- forward: the tangent of a collective is the collective of the tangents;
- vmap: ``psum`` is ``np.sum`` over the batch axis (a value the same for every example), and
  ``axis_index`` is ``np.arange`` of the batch size;
- pmap: the function is cut at each collective; the pieces between run on every shard, the
  collective itself runs between them (a reduction across threads, or an MPI reduction).

Generated code calls them as ``collectives.psum(x, 'i')`` with
``from autodiff_ast import collectives``. Called outside a mapped function they raise
``NameError``, as in JAX:

>>> import numpy as np
>>> from autodiff_ast import vmap
>>> vmap(lambda x: x / psum(x, 'i'), axis_name='i')(np.arange(4.0))
array([0.        , 0.16666667, 0.33333333, 0.5       ])
>>> psum(1.0, 'i')
Traceback (most recent call last):
    ...
NameError: unbound axis name: i (psum must be called inside pmap or vmap with axis_name='i')
"""

from __future__ import annotations

from . import types as T
from .rules import Rule, register
from .templates import fill

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "axis_index", "COLLECTIVES",
           "REDUCING", "reduce_shards"]


def _unbound(fname, axis_name):
    raise NameError(f"unbound axis name: {axis_name} ({fname} must be called inside pmap or "
                    f"vmap with axis_name={axis_name!r})")


def psum(x, axis_name):
    """The sum of `x` over the mapped axis `axis_name` (the same in every example)."""
    _unbound("psum", axis_name)


def pmean(x, axis_name):
    """The mean of `x` over the mapped axis `axis_name`."""
    _unbound("pmean", axis_name)


def pmax(x, axis_name):
    """The elementwise maximum of `x` over the mapped axis `axis_name`."""
    _unbound("pmax", axis_name)


def pmin(x, axis_name):
    """The elementwise minimum of `x` over the mapped axis `axis_name`."""
    _unbound("pmin", axis_name)


def all_gather(x, axis_name, axis=0, tiled=False):
    """Every example's `x`, stacked along a new leading axis (axis=0, tiled=False only)."""
    _unbound("all_gather", axis_name)


def axis_index(axis_name):
    """This example's position along the mapped axis `axis_name` (an int)."""
    _unbound("axis_index", axis_name)


# ---------------------------------------------------------------- rules
def _one_array(call):
    x = call.types["x"]
    if x.kind in ("tuple", "list", "dict"):
        raise ValueError(f"{call.rule.name} takes arrays, or a tuple, list or dict of them "
                         f"written in the function or passed in; this operand is a {x.kind} "
                         "whose entries are known only at run time: reduce each array")
    return x


def _same(call):
    x = _one_array(call)
    if x.kind == "int":
        return T.FLOAT
    return x


def _gathered(call):
    x = _one_array(call)
    dims = x.dims if x.kind == "array" else ()
    if dims is None:
        return T.AType("array", x.dtype or "float64", None)
    return T.array((T.N,) + tuple(dims), x.dtype or "float64")


def _name_arg(call):
    return call.args["axis_name"]


def _linear(fname):
    def vjp(call, g):
        return {"x": (fill(f"collectives.{fname}(g, a)", g=g, a=_name_arg(call)),
                      call.types["x"])}

    def jvp(call, dots):
        return fill(f"collectives.{fname}(d, a)", d=dots["x"], a=_name_arg(call))
    return vjp, jvp


def _extreme_vjp(call, g):
    """pmax/pmin: the summed cotangent, shared equally by the shards holding the extreme."""
    a = _name_arg(call)
    expr = fill("collectives.psum(g, a) * (x == y) / collectives.psum((x == y) * 1.0, a)",
                g=g, a=a, x=call.args["x"], y=call.out)
    return {"x": (expr, call.types["x"])}


def _extreme_jvp(call, dots):
    a = _name_arg(call)
    return fill("collectives.psum(d * (x == y), a) / collectives.psum((x == y) * 1.0, a)",
                d=dots["x"], a=a, x=call.args["x"], y=call.out)


def _gather_vjp(call, g):
    a = _name_arg(call)
    return {"x": (fill("collectives.psum(g, a)[collectives.axis_index(a)]", g=g, a=a),
                  call.types["x"])}


def _gather_jvp(call, dots):
    return fill("collectives.all_gather(d, a)", d=dots["x"], a=_name_arg(call))


_PARAMS = ("x", "axis_name")
for _fn, _name in ((psum, "psum"), (pmean, "pmean")):
    _vjp, _jvp = _linear(_name)
    register(Rule(_name, f"collectives.{_name}", _PARAMS, {}, ("x",), _same, _vjp, _jvp,
                  linear=True), _fn)
for _fn, _name in ((pmax, "pmax"), (pmin, "pmin")):
    register(Rule(_name, f"collectives.{_name}", _PARAMS, {}, ("x",), _same, _extreme_vjp,
                  _extreme_jvp), _fn)
register(Rule("all_gather", "collectives.all_gather", ("x", "axis_name", "axis", "tiled"),
              {"axis": 0, "tiled": False}, ("x",), _gathered, _gather_vjp, _gather_jvp,
              linear=True), all_gather)
register(Rule("axis_index", "collectives.axis_index", ("axis_name",), {}, (),
              lambda call: T.INT, nondiff_output=True), axis_index)

#: the collectives, by rule name
COLLECTIVES = ("psum", "pmean", "pmax", "pmin", "all_gather", "axis_index")
#: collectives whose result is the same for every example of the axis
REDUCING = ("psum", "pmean", "pmax", "pmin", "all_gather")


def reduce_shards(kind, values):
    """The result of collective `kind` for every shard, given each shard's operand (a list in
    shard order). Used by pmap between the pieces of a cut function.

    >>> reduce_shards("psum", [1.0, 2.0, 3.0])
    [6.0, 6.0, 6.0]
    """
    import numpy as np
    n = len(values)
    if kind == "axis_index":
        return list(range(n))
    stacked = np.stack([np.asarray(v, dtype=float) for v in values])
    if kind == "all_gather":
        return [stacked.copy() for _ in range(n)]
    if kind == "psum":
        out = stacked.sum(axis=0)
    elif kind == "pmean":
        out = stacked.mean(axis=0)
    elif kind == "pmax":
        out = stacked.max(axis=0)
    elif kind == "pmin":
        out = stacked.min(axis=0)
    else:
        raise ValueError(f"unknown collective {kind!r}")
    value = float(out) if out.ndim == 0 else out
    return [value if out.ndim == 0 else value.copy() for _ in range(n)]


# ---------------------------------------------------------------- batching rules (vmap)
def _batched_reduction(np_name):
    def rule(bc):
        if not bc.is_batched("x"):
            if np_name == "np.sum":
                return fill("x * n", x=bc.arg("x"), n=bc.n_batch)
            return bc.arg("x")
        return fill(f"{np_name}(x, axis=0)", x=bc.arg("x"))
    return rule


def _batched_gather(bc):
    return bc.full("x")


def _register_batching():
    from .rules import batching as R
    R._register(("psum",), _batched_reduction("np.sum"))
    R._register(("pmean",), _batched_reduction("np.mean"))
    R._register(("pmax",), _batched_reduction("np.max"))
    R._register(("pmin",), _batched_reduction("np.min"))
    R._register(("all_gather",), _batched_gather)
    R._register(("axis_index",), lambda bc: fill("np.arange(n)", n=bc.n_batch))


_register_batching()
