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

import gast
import numpy as np

from .. import types as T
from ..templates import const_value, fill, summed
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
    # JAX: d|x|/dx is 1 for x >= 0, including x = 0 (jax/_src/lax/lax.py, _abs_jvp_rule:
    # select(ge(x, 0), g, neg(g))), so abs at 0 passes the derivative through unchanged.
    "absolute": (("x",), ("2.0 * (x >= 0.0) - 1.0",)),
    "fabs": (("x",), ("2.0 * (x >= 0.0) - 1.0",)),
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
    # sigmoid(a - b) written 1 / (1 + exp(min(b - a, 700))): one exp, no overflow (the clamp
    # keeps exp finite; past it the partial is ~1e-304 either way), and its own derivative
    # has no cancelling terms (exp(a - y) differentiated in reverse mode adds and subtracts
    # terms as large as y, which lost all digits of a Hessian on values ~1e12). The form
    # exp(-logaddexp(0, b - a)) is as accurate but costs three transcendental calls.
    "logaddexp": (("a", "b"), ("1.0 / (1.0 + np.exp(np.minimum(b - a, 700.0)))",
                               "1.0 / (1.0 + np.exp(np.minimum(a - b, 700.0)))")),
    "logaddexp2": (("a", "b"), ("1.0 / (1.0 + np.exp2(np.minimum(b - a, 1000.0)))",
                                "1.0 / (1.0 + np.exp2(np.minimum(a - b, 1000.0)))")),
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


class _NumpyDivision(gast.NodeTransformer):
    """``a / b`` as ``np.divide(a, b)`` and ``a ** q`` (q not a non-negative constant) as
    ``np.power(a, q)``: NumPy's float64 arithmetic gives inf or nan at a pole, as JAX does, where
    Python floats raise ZeroDivisionError (``math.sqrt(0.0)`` is a Python float)."""

    def visit_BinOp(self, node):
        self.generic_visit(node)
        right = const_value(node.right)
        constant = isinstance(right, (int, float)) and not isinstance(right, bool)
        if isinstance(node.op, gast.Div) and not (constant and right != 0):
            return fill("np.divide(a, b)", a=node.left, b=node.right)
        if isinstance(node.op, gast.Pow) and not (constant and right >= 0):
            return fill("np.power(a, b)", a=node.left, b=node.right)
        return node


def scalar_safe(call, expr):
    """`expr` (a partial derivative) with divisions and negative powers done by NumPy when
    every operand of the call is a number: the partial then gives inf/nan at a pole instead of
    raising. Array operands already divide with NumPy's rules; so does the primal `a / b` of
    Python floats, which raises first at b = 0 (its partials are left as they are).

    >>> from autodiff_ast.rules import PrimCall, by_name
    >>> from autodiff_ast.templates import unparse
    >>> call = PrimCall(by_name("sqrt@math.sqrt"), {"x": fill("x")}, {"x": T.FLOAT}, "y",
    ...                 T.FLOAT)
    >>> unparse(scalar_safe(call, fill("0.5 / y")))
    'np.divide(0.5, y)'
    """
    if call.rule.name.split("@")[0] == "divide" or any(
            t.kind == "array" or t.kind not in ("float", "int", "bool")
            for p, t in call.types.items() if p in call.rule.diff):
        return expr
    return _NumpyDivision().visit(expr)


def _make_vjp(partials):
    def vjp(call, g):
        subs = _partial_subs(call)
        result = {}
        for param, partial in zip(call.rule.params, partials):
            if param in call.rule.diff:
                # None: the reverse pass infers the type from the names the expression reads.
                d = scalar_safe(call, fill(partial, **subs))
                result[param] = (fill("g * d", g=g, d=d), None)
        return result
    return vjp


def _make_jvp(partials):
    def jvp(call, dots):
        subs = _partial_subs(call)
        terms = [fill("d * t", t=dots[p], d=scalar_safe(call, fill(partial, **subs)))
                 for p, partial in zip(call.rule.params, partials) if p in dots]
        return summed(terms)
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
    return {"a": da if da is None else scalar_safe(call, da), "b": db}


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


# clip(x, lo, hi) follows jnp.clip, which is maximum(lo, x) then minimum(hi, .)
# (jax/_src/numpy/lax_numpy.py): each of the two chooses with maximum's rule, so a tie at a bound
# splits the cotangent equally between x and the bound (x = lo gives 0.5 to each). Written
# directly on x where the maximum's share is zero unless x >= lo (then maximum(x, lo) is x).
def _share(kind, u, v):
    """u's share of maximum(u, v) (kind '>') or minimum(u, v) (kind '<'): 1, 0.5 at a tie, 0."""
    return fill(f"(u {kind} v) + 0.5 * (u == v)", u=u, v=v)


def _clip_partials(call):
    x, lo, hi = call.args["a"], call.args.get("a_min"), call.args.get("a_max")
    has_lo = call.types.get("a_min", T.NONE).kind != "none"
    has_hi = call.types.get("a_max", T.NONE).kind != "none"

    def product(*factors):
        factors = [f for f in factors if f is not None] or [fill("1.0")]  # no bound at all
        return factors[0] if len(factors) == 1 else fill("a * b", a=factors[0], b=factors[1])
    partials = {"a": product(_share(">", x, lo) if has_lo else None,
                             _share("<", x, hi) if has_hi else None)}
    if has_lo:
        partials["a_min"] = product(_share(">", lo, x), _share("<", lo, hi) if has_hi else None)
    if has_hi:
        chosen = fill("np.maximum(x, lo)", x=x, lo=lo) if has_lo else x
        partials["a_max"] = _share("<", hi, chosen)
    return partials


def _clip_vjp(call, g):
    return {p: (fill("g * (d)", g=g, d=d), None) for p, d in _clip_partials(call).items()}


def _clip_jvp(call, dots):
    terms = [fill("(d) * t", d=d, t=dots[p]) for p, d in _clip_partials(call).items()
             if p in dots]
    return summed(terms)


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
