"""Elementwise primitives, all driven by one table of scalar partial derivatives.

Each entry gives, for every differentiable parameter, the partial derivative of the output
``y`` as a Python expression in the parameters' names and ``y``. From that one line we derive
the reverse rule (``x_bar += g * partial``, summed down to ``x``'s shape where ``x`` was
broadcast) and the forward rule (``y_dot = sum(partial * x_dot)``).

>>> from autodiff_ast.rules import by_name
>>> PARTIALS["tanh"]
(('x',), ('1.0 - y * y',))
"""

from __future__ import annotations

import math

import numpy as np

from .. import types as T
from ..templates import fill
from . import PrimCall, Rule, register

# name: (parameters, partial derivative of y with respect to each parameter)
PARTIALS = {
    "sin": (("x",), ("np.cos(x)",)),
    "cos": (("x",), ("-np.sin(x)",)),
    "tan": (("x",), ("1.0 + y * y",)),
    "arcsin": (("x",), ("1.0 / np.sqrt(1.0 - x * x)",)),
    "arccos": (("x",), ("-1.0 / np.sqrt(1.0 - x * x)",)),
    "arctan": (("x",), ("1.0 / (1.0 + x * x)",)),
    "sinh": (("x",), ("np.cosh(x)",)),
    "cosh": (("x",), ("np.sinh(x)",)),
    "tanh": (("x",), ("1.0 - y * y",)),
    "arcsinh": (("x",), ("1.0 / np.sqrt(x * x + 1.0)",)),
    "arccosh": (("x",), ("1.0 / np.sqrt(x * x - 1.0)",)),
    "arctanh": (("x",), ("1.0 / (1.0 - x * x)",)),
    "exp": (("x",), ("y",)),
    "exp2": (("x",), ("y * 0.6931471805599453",)),
    "expm1": (("x",), ("y + 1.0",)),
    "log": (("x",), ("1.0 / x",)),
    "log2": (("x",), ("1.0 / (x * 0.6931471805599453)",)),
    "log10": (("x",), ("1.0 / (x * 2.302585092994046)",)),
    "log1p": (("x",), ("1.0 / (1.0 + x)",)),
    "sqrt": (("x",), ("0.5 / y",)),
    "cbrt": (("x",), ("1.0 / (3.0 * y * y)",)),
    "square": (("x",), ("2.0 * x",)),
    "reciprocal": (("x",), ("-(y * y)",)),
    "negative": (("x",), ("-1.0",)),
    "positive": (("x",), ("1.0",)),
    "absolute": (("x",), ("np.sign(x)",)),
    "fabs": (("x",), ("np.sign(x)",)),
    "deg2rad": (("x",), ("0.017453292519943295",)),
    "rad2deg": (("x",), ("57.29577951308232",)),
    "erf": (("x",), ("1.1283791670955126 * np.exp(-(x * x))",)),
    # sinc(x) = sin(pi x) / (pi x); its derivative is 0 at x = 0, where cos(0) - y is 0 too
    "sinc": (("x",), ("(np.cos(3.141592653589793 * x) - y) / np.where(x == 0.0, 1.0, x)",)),
    "add": (("a", "b"), ("1.0", "1.0")),
    "subtract": (("a", "b"), ("1.0", "-1.0")),
    "multiply": (("a", "b"), ("b", "a")),
    "divide": (("a", "b"), ("1.0 / b", "-y / b")),
    "maximum": (("a", "b"), ("(a > b) + 0.5 * (a == b)", "(b > a) + 0.5 * (a == b)")),
    "minimum": (("a", "b"), ("(a < b) + 0.5 * (a == b)", "(b < a) + 0.5 * (a == b)")),
    "fmax": (("a", "b"), ("(a > b) + 0.5 * (a == b)", "(b > a) + 0.5 * (a == b)")),
    "fmin": (("a", "b"), ("(a < b) + 0.5 * (a == b)", "(b < a) + 0.5 * (a == b)")),
    "arctan2": (("a", "b"), ("b / (a * a + b * b)", "-a / (a * a + b * b)")),
    "hypot": (("a", "b"), ("a / y", "b / y")),
    "logaddexp": (("a", "b"), ("np.exp(a - y)", "np.exp(b - y)")),
    "logaddexp2": (("a", "b"), ("np.exp2(a - y)", "np.exp2(b - y)")),
    "remainder": (("a", "b"), ("1.0", "-np.floor(a / b)")),
    "fmod": (("a", "b"), ("1.0", "-np.trunc(a / b)")),
}

# Elementwise functions whose derivative is zero almost everywhere: outputs carry no derivative.
PIECEWISE_CONSTANT = ("sign", "floor", "ceil", "rint", "trunc", "round", "around", "fix",
                      "floor_divide", "isnan", "isinf", "isfinite", "heaviside")

# Extra callables that share a rule (aliases and the `math` module's scalar functions).
ALIASES = {
    "absolute": [np.abs, abs],
    "divide": [np.true_divide],
    "deg2rad": [np.radians],
    "rad2deg": [np.degrees],
    "remainder": [np.mod],
    "round": [np.round],
    "arcsin": [math.asin], "arccos": [math.acos], "arctan": [math.atan],
    "arcsinh": [math.asinh], "arccosh": [math.acosh], "arctanh": [math.atanh],
    "arctan2": [math.atan2], "fabs": [math.fabs], "hypot": [math.hypot],
    "floor": [math.floor], "ceil": [math.ceil], "trunc": [math.trunc],
}
for _name in ("sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "log", "log2", "log10",
              "log1p", "sqrt", "expm1", "erf", "exp2", "cbrt"):
    if hasattr(math, _name):
        ALIASES.setdefault(_name, []).append(getattr(math, _name))
ALIASES.setdefault("maximum", []).append(max)
ALIASES.setdefault("minimum", []).append(min)


def infer_elementwise(call):
    """Type of an elementwise result: the broadcast of the operands; int stays int for +-*."""
    operands = [call.types[p] for p in call.rule.params if p in call.types]
    base = call.rule.name.split("@")[0]  # max(a, b) is maximum@max, abs(x) absolute@abs...
    if call.rule.name == "add" and len(operands) == 2 and all(
            t.kind == "tuple" and t.elts is not None for t in operands):
        # `(n,) + x.shape`: tuple concatenation, as in shapes built for np.empty
        a, b = operands
        value = a.value + b.value if a.value is not None and b.value is not None else None
        return T.AType("tuple", elts=a.elts + b.elts, value=value)
    out = T.broadcast(*operands)
    if base in ("add", "subtract", "multiply", "negative", "positive", "absolute", "maximum",
                "minimum", "remainder", "floor_divide", "square", "sign", "fmax", "fmin"):
        if all(t.kind in ("int", "bool") or (t.kind == "array" and t.dtype and
                                              t.dtype.startswith(("int", "bool")))
               for t in operands):
            if out.kind == "array":
                return T.AType("array", "int64", out.dims)
            return T.INT
    if base in ("floor", "ceil", "trunc") and out.kind == "float" and \
            call.rule.emit.startswith("math."):
        return T.INT
    if base in ("isnan", "isinf", "isfinite"):
        return T.array(out.dims, "bool") if out.kind == "array" else T.BOOL
    if out.dtype and out.dtype.startswith(("int", "bool")) and base not in (
            "floor_divide", "sign", "round", "around"):
        # true division and every transcendental function of integers give floats
        return T.array(out.dims, "float64") if out.kind == "array" else T.FLOAT
    return out


def _partial_subs(call):
    subs = {p: call.args[p] for p in call.rule.params if p in call.args}
    subs["y"] = call.out
    return subs


def _make_vjp(partials):
    def vjp(call, g):
        subs = _partial_subs(call)
        result = {}
        for param, partial in zip(call.rule.params, partials):
            if param in call.rule.diff:
                # None: the reverse pass infers the type from the names the expression reads.
                result[param] = (fill(f"g * ({partial})", g=g, **subs), None)
        return result
    return vjp


def _make_jvp(partials):
    def jvp(call, dots):
        subs = _partial_subs(call)
        terms = [fill(f"({partial}) * d", d=dots[p], **subs)
                 for p, partial in zip(call.rule.params, partials) if p in dots]
        total = terms[0]
        for term in terms[1:]:
            total = fill("a + b", a=total, b=term)
        return total
    return jvp


def _emit_name(fn):
    if getattr(fn, "__module__", None) == "math" or fn in vars(math).values():
        return f"math.{fn.__name__}"
    if fn in (abs, max, min):
        return fn.__name__
    return f"np.{fn.__name__}"


for _name, (_params, _partials) in PARTIALS.items():
    _np_fn = getattr(np, _name, None)
    _linear = _name in ("add", "subtract", "negative", "positive", "deg2rad", "rad2deg")
    _rule = register(Rule(_name, f"np.{_name}" if _np_fn is not None else None, _params,
                          diff=_params, infer=infer_elementwise, vjp=_make_vjp(_partials),
                          jvp=_make_jvp(_partials), linear=_linear),
                     *([_np_fn] if _np_fn is not None else []))
    for _fn in ALIASES.get(_name, []):
        register(Rule(f"{_name}@{_emit_name(_fn)}", _emit_name(_fn), _params, diff=_params,
                      infer=infer_elementwise, vjp=_make_vjp(_partials),
                      jvp=_make_jvp(_partials), linear=_linear), _fn)

for _name in PIECEWISE_CONSTANT:
    _np_fn = getattr(np, _name, None)
    _params = ("a", "b") if _name in ("floor_divide", "heaviside") else ("x",)
    if _np_fn is not None:
        register(Rule(_name, f"np.{_name}", _params, defaults={"decimals": 0},
                      infer=infer_elementwise, nondiff_output=True), _np_fn)
    for _fn in ALIASES.get(_name, []):
        register(Rule(f"{_name}@{_emit_name(_fn)}", _emit_name(_fn), _params,
                      defaults={"decimals": 0}, infer=infer_elementwise, nondiff_output=True),
                 _fn)


# power: the exponent is usually a constant, which gives a much simpler partial.
def _power_partials(call):
    a, b, y = call.args["a"], call.args["b"], call.out
    p = call.const("b") if call.types["b"].kind in ("int", "float") else None
    if isinstance(p, (int, float)) and not isinstance(p, bool):
        if p == 0:
            da = None
        elif p == 1:
            da = fill("1.0")
        elif p == 2:
            da = fill("2.0 * a", a=a)
        else:
            da = fill("p * a ** q", a=a, p=float(p), q=float(p - 1))
    else:
        da = fill("np.where(b == 0.0, 0.0, b * a ** (b - 1.0))", a=a, b=b)
    base = call.const("a") if call.types["a"].kind in ("int", "float") else None
    if isinstance(base, (int, float)) and not isinstance(base, bool) and base > 0:
        db = fill("y * c", y=y, c=math.log(base))
    else:
        db = fill("y * np.log(np.where(a == 0.0, 1.0, a))", y=y, a=a)
    return {"a": da, "b": db}


def _power_vjp(call, g):
    partials = _power_partials(call)
    return {p: (fill("g * d", g=g, d=partials[p]), None)
            for p in ("a", "b") if partials[p] is not None}


def _power_jvp(call, dots):
    partials = _power_partials(call)
    terms = [fill("d * t", d=partials[p], t=dots[p]) for p in ("a", "b")
             if p in dots and partials[p] is not None]
    if not terms:  # x ** 0: a constant; its tangent is zero (of the tangent's shape)
        return fill("0.0 * t", t=next(iter(dots.values())))
    return terms[0] if len(terms) == 1 else fill("a + b", a=terms[0], b=terms[1])


def _infer_power(call):
    a, b = call.types["a"], call.types["b"]
    if a.kind == "int" and b.kind == "int":
        return T.INT
    return T.broadcast(a, b)


register(Rule("power", "np.power", ("a", "b"), diff=("a", "b"), infer=_infer_power,
              vjp=_power_vjp, jvp=_power_jvp), np.power, np.float_power)
register(Rule("power@math.pow", "math.pow", ("a", "b"), diff=("a", "b"), infer=_infer_power,
              vjp=_power_vjp, jvp=_power_jvp), math.pow, pow)


# where(c, a, b): the condition carries no derivative; a and b get the cotangent where chosen.
def _where_vjp(call, g):
    c = call.args["condition"]
    return {
        "a": (fill("np.where(c, g, 0.0)", c=c, g=g), None),
        "b": (fill("np.where(c, 0.0, g)", c=c, g=g), None),
    }


def _where_jvp(call, dots):
    c = call.args["condition"]
    return fill("np.where(c, da, db)", c=c, da=dots.get("a", 0.0), db=dots.get("b", 0.0))


def _infer_where(call):
    return T.broadcast(call.types["condition"], call.types["a"], call.types["b"])


register(Rule("where", "np.where", ("condition", "a", "b"), diff=("a", "b"), infer=_infer_where,
              vjp=_where_vjp, jvp=_where_jvp), np.where)


# clip(x, lo, hi): JAX's convention: the cotangent flows to x strictly inside the interval,
# to a bound where x is beyond it.
def _clip_masks(call):
    x, lo, hi = call.args["a"], call.args.get("a_min"), call.args.get("a_max")
    lo_none = call.types.get("a_min", T.NONE).kind == "none"
    hi_none = call.types.get("a_max", T.NONE).kind == "none"
    if lo_none:
        inside = fill("x < hi", x=x, hi=hi)
    elif hi_none:
        inside = fill("x > lo", x=x, lo=lo)
    else:
        inside = fill("(x > lo) & (x < hi)", x=x, lo=lo, hi=hi)
    below = None if lo_none else fill("lo > x", lo=lo, x=x)
    above = None if hi_none else fill("hi < x", hi=hi, x=x)
    return inside, below, above


def _clip_vjp(call, g):
    inside, below, above = _clip_masks(call)
    out = {"a": (fill("np.where(m, g, 0.0)", m=inside, g=g), None)}
    if below is not None:
        out["a_min"] = (fill("np.where(m, g, 0.0)", m=below, g=g), None)
    if above is not None:
        out["a_max"] = (fill("np.where(m, g, 0.0)", m=above, g=g), None)
    return out


def _clip_jvp(call, dots):
    inside, below, above = _clip_masks(call)
    total = fill("np.where(m, d, 0.0)", m=inside, d=dots["a"]) if "a" in dots else None
    for param, mask in (("a_min", below), ("a_max", above)):
        if param in dots and mask is not None:
            term = fill("np.where(m, d, 0.0)", m=mask, d=dots[param])
            total = term if total is None else fill("a + b", a=total, b=term)
    return total


def _infer_clip(call):
    return T.broadcast(*(call.types[p] for p in ("a", "a_min", "a_max") if p in call.types
                         and call.types[p].kind != "none"))


register(Rule("clip", "np.clip", ("a", "a_min", "a_max"), defaults={"a_min": None, "a_max": None},
              diff=("a", "a_min", "a_max"), infer=_infer_clip, vjp=_clip_vjp, jvp=_clip_jvp),
         np.clip)


def vjp_of(name):
    """The reverse rule of an elementwise primitive (used by tests and other rules)."""
    from . import by_name
    return by_name(name).vjp


__all__ = ["PARTIALS", "PIECEWISE_CONSTANT", "PrimCall"]
