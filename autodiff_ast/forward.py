"""Forward mode: a core function becomes primal code interleaved with tangent code.

For each core statement that reads an active (varied) value, the primitive's forward rule
(``rule.jvp(call, dots)``) writes the tangent of its output, ``y_dot``, from the tangents of its
inputs. Tangents that are structurally zero stay symbolic: no code is written for them. Calls to
the user's own functions become calls to that function's own tangent function (``f_jvp``, one
per pattern of active arguments, never inlined), which returns ``(out, out_dot)``.

A tangent may be held lazily with fewer or size-one axes than its value (the tangent of
``x + b`` for a scalar ``x`` and an array ``b`` is ``x_dot``): elementwise rules broadcast it
for free, and it is materialized to the value's shape only where a rule, a call or a return
needs that (the same idea as :class:`autodiff_ast.reverse.Adjoints`).

>>> import numpy as np
>>> from autodiff_ast.frontend import parse_function
>>> from autodiff_ast.normalize import normalize
>>> from autodiff_ast import types as T
>>> def f(x):
...     return np.sum(np.sin(x))
>>> sweep = forward(normalize(parse_function(f), {"x": T.array((T.N,))}), ["x"])
>>> [unparse(s) for s in sweep.body if getattr(s, "tangent", False)]
['sin_dot = np.cos(x) * x_dot', 'sum_dot = np.sum(sin_dot)']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import gast

from . import types as T
from .errors import MissingRuleError, UnsupportedSyntaxError
from .normalize import CoreFunction, atom_type
from .reverse import CONTROL, _ELEMENTWISE_OK, _returned_names, _stmt_targets, activity
from .rules import PrimCall
from .templates import assign, const_value, fill, name, to_expr, unparse


_KINDS = ("copy", "unpack", "tuple", "tuple_get", "user", "rule", "nondiff")


@dataclass
class TangentSweep:
    """Primal code interleaved with tangent code for one choice of active inputs."""

    core: CoreFunction
    active_params: list  # the parameters that have tangents (in order)
    dot_params: list  # the names of their tangents (``x_dot``)
    body: list  # primal and tangent statements (tangent ones have ``.tangent = True``)
    out_dots: list  # tangent expression of each output (None: structurally zero)
    helpers: set = field(default_factory=set)


@dataclass
class JvpFunction:
    """A generated tangent function of one user helper for one pattern of active arguments."""

    name: str
    sweep: TangentSweep


class JvpRegistry:
    """Tangent functions generated for the user's helper functions (``f_jvp``)."""

    def __init__(self, program):
        self.program = program
        self.functions = {}  # (core name, active params) -> JvpFunction | None (zero output)

    def get(self, core, active):
        """The tangent function of `core` for these active parameters (None: zero output)."""
        key = (core.name, tuple(active))
        if key not in self.functions:
            self.functions[key] = "pending"  # recursion guard
            sweep = forward(core, active, registry=self)
            if all(d is None for d in sweep.out_dots):
                self.functions[key] = None
            else:
                fname = self.program.module_names.fresh(f"{core.name}_jvp")
                self.functions[key] = JvpFunction(fname, sweep)
        if self.functions[key] == "pending":
            raise core.info.error(MissingRuleError, "recursive functions cannot be "
                                  "differentiated yet", core.info.node)
        return self.functions[key]

    def generated(self):
        """Every tangent function generated so far, in creation order."""
        return [f for f in self.functions.values() if isinstance(f, JvpFunction)]


# ---------------------------------------------------------------- tangents of values
class Tangents:
    """The tangent of each active value: an expression, its abstract type, tuple parts."""

    def __init__(self, core, out):
        self.core = core
        self.namer = core.namer
        self.out = out  # list the tangent statements are appended to
        self.exprs = {}  # value name -> gast expr of its tangent
        self.ttypes = {}  # value name -> abstract type of that expression
        self.tuples = {}  # tuple-valued name -> list of element tangents (None: zero) | str

    def __contains__(self, value):
        return value in self.exprs or value in self.tuples

    def type_of(self, value):
        return self.core.types.get(value, T.UNKNOWN)

    def get(self, value):
        return self.exprs.get(value)

    def bind(self, value, expr, typ=None):
        """Make `expr` the tangent of `value`: names are aliased, expressions get a name."""
        if expr is None or _is_zero(expr):
            return
        expr = to_expr(expr)
        typ = typ or self.expr_type(expr)
        if not isinstance(expr, (gast.Name, gast.Constant)):
            dot = self.namer.tangent(value)
            self.emit(assign(dot, expr))
            expr = name(dot)
        self.exprs[value] = expr
        self.ttypes[value] = typ

    def emit(self, stmt):
        stmt.tangent = True
        self.out.append(stmt)

    def expr_type(self, expr):
        """Type of an elementwise expression: the broadcast of the names it reads."""
        found = []
        for node in gast.walk(expr):
            if isinstance(node, gast.Name):
                for value, dot in self.exprs.items():
                    if isinstance(dot, gast.Name) and dot.id == node.id:
                        found.append(self.ttypes.get(value, T.UNKNOWN))
                        break
                else:
                    if node.id in self.core.types:
                        found.append(self.core.types[node.id])
        return T.broadcast(*found) if found else T.FLOAT

    def smaller(self, typ, value):
        """Whether a tangent of type `typ` has fewer or size-one axes than `value`."""
        target = self.type_of(value)
        if target.kind != "array":
            return False
        if typ.kind == "float":
            return True
        if typ.kind != "array" or typ.dims is None or target.dims is None:
            return False
        if len(typ.dims) < len(target.dims):
            return True
        offset = len(typ.dims) - len(target.dims)
        return any(t == T.N and typ.dims[i + offset] == 1 for i, t in enumerate(target.dims))

    def materialized(self, value):
        """The tangent of `value` with exactly value's shape (writing a broadcast if lazy)."""
        current = self.exprs.get(value)
        if current is None:
            return None
        typ = self.ttypes.get(value, self.type_of(value))
        if not self.smaller(typ, value):
            return current
        dot = self.namer.tangent(value)
        if typ.kind == "float":
            full = fill("np.full_like(x, d)", x=value, d=current)
        else:
            full = fill("d + np.zeros_like(x)", d=current, x=value)
        self.emit(assign(dot, full))
        self.exprs[value] = name(dot)
        self.ttypes[value] = self.type_of(value)
        return self.exprs[value]

    def of_atom(self, atom, full=False):
        """The tangent of an atom (None when it is structurally zero)."""
        if isinstance(atom, gast.Name) and atom.id in self.exprs:
            return self.materialized(atom.id) if full else self.exprs[atom.id]
        return None

    def parts(self, value, size):
        """The element tangents of a tuple value: a list (None: zero) or a tuple's name."""
        parts = self.tuples.get(value)
        if parts is None:
            return [None] * size
        return parts

    def zero(self, value_expr, typ):
        """A materialized zero tangent for a value of type `typ`."""
        if typ.kind == "tuple" and typ.elts is not None:
            elts = value_expr.elts if isinstance(value_expr, gast.Tuple) else [
                gast.Subscript(value=to_expr(value_expr), slice=to_expr(i), ctx=gast.Load())
                for i in range(len(typ.elts))]
            return gast.Tuple(elts=[self.zero(e, t) for e, t in zip(elts, typ.elts)],
                              ctx=gast.Load())
        if typ.kind == "array":
            return fill("np.zeros_like(x)", x=value_expr)
        return fill("0.0")

    def output(self, atom):
        """The full-shape tangent of a returned atom (zeros where structurally zero)."""
        typ = atom_type(atom, self.core.types)
        if isinstance(atom, gast.Name) and typ.kind == "tuple":
            parts = self.tuples.get(atom.id)
            if isinstance(parts, str):
                return name(parts)
            if parts is None:
                return self.zero(atom, typ)
            elts = []
            for i, (part, t) in enumerate(zip(parts, typ.elts or ())):
                item = gast.Subscript(value=to_expr(atom), slice=to_expr(i), ctx=gast.Load())
                elts.append(to_expr(part) if part is not None else self.zero(item, t))
            return gast.Tuple(elts=elts, ctx=gast.Load())
        dot = self.of_atom(atom, full=True)
        return dot if dot is not None else self.zero(atom, typ)


def _is_zero(expr):
    value = const_value(expr) if isinstance(expr, gast.AST) else expr
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


# ---------------------------------------------------------------- the sweep
def forward(core, active_params, registry=None):
    """Primal code of `core` interleaved with the tangent code of `active_params`.

    Tangent parameters are named after the primal ones (``x_dot``); statements that compute
    tangents carry ``.tangent = True`` and the ``.origin`` of the user's statement.
    """
    from .normalize import Program
    registry = registry or JvpRegistry(Program())
    ret = core.returns
    outputs = ret.elts if isinstance(ret, gast.Tuple) else [ret]
    out_names = [a.id for a in outputs if isinstance(a, gast.Name)]
    active_params = [p for p in active_params if core.types.get(p, T.UNKNOWN).is_float]
    varied, useful = activity(core, active_params, out_names)
    live = varied & useful
    body = []
    tan = Tangents(core, body)
    dot_params = []
    for p in active_params:
        dot = core.namer.tangent(p)
        dot_params.append(dot)
        tan.exprs[p] = name(dot)
        tan.ttypes[p] = core.types.get(p, T.UNKNOWN)
    for stmt in core.body:
        if isinstance(stmt, CONTROL) or getattr(stmt, "prim", None) is None or \
                stmt.prim.kind not in _KINDS:
            raise core.info.error(UnsupportedSyntaxError, "forward mode does not handle loops, "
                                  "branches or in-place writes yet", getattr(
                                      stmt, "origin", stmt), "use grad/vjp for this function")
        stmt = _fresh(stmt)
        targets = _stmt_targets(stmt)
        if not any(t in live for t in targets):
            body.append(stmt)
            continue
        marker = len(body)
        replacement = _forward_stmt(stmt, tan, core, registry)
        if replacement is None:
            body.insert(marker, stmt)
        for s in body[marker:]:
            if s is not stmt:
                s.origin = stmt.origin
                s.info = getattr(stmt, "info", core.info)
    out_dots = []
    for atom in outputs:
        in_tan = isinstance(atom, gast.Name) and atom.id in tan
        out_dots.append(tan.output(atom) if in_tan else None)
    return TangentSweep(core, active_params, dot_params, body, out_dots)


def _fresh(stmt):
    """A copy of a core statement that later passes may rewrite in place (tidy does), keeping
    its annotations (prim, origin, info) shared."""
    out = copy.copy(stmt)
    out.targets = copy.deepcopy(stmt.targets)
    out.value = copy.deepcopy(stmt.value)
    return out


def _forward_stmt(stmt, tan, core, registry):
    """Append the tangent code of one statement; returns a replacement primal statement."""
    prim = stmt.prim
    targets = _stmt_targets(stmt)
    if prim.kind == "copy":
        src = prim.args[0]
        if isinstance(src, gast.Name) and src.id in tan.tuples:
            tan.tuples[targets[0]] = tan.tuples[src.id]
        elif isinstance(src, gast.Name) and src.id in tan.exprs:
            tan.exprs[targets[0]] = tan.exprs[src.id]
            tan.ttypes[targets[0]] = tan.ttypes[src.id]
        return None
    if prim.kind == "unpack":
        _unpack(stmt, tan, targets, prim.args[0])
        return None
    if prim.kind == "tuple":
        parts = [tan.of_atom(atom, full=True) for atom in stmt.value.elts]
        if any(p is not None for p in parts):
            tan.tuples[targets[0]] = parts
        return None
    if prim.kind == "tuple_get":
        src = prim.args[0]
        k = stmt.value.slice.value
        if isinstance(src, gast.Name) and src.id in tan.tuples:
            parts = tan.tuples[src.id]
            if isinstance(parts, str):
                tan.bind(targets[0], gast.Subscript(value=name(parts), slice=to_expr(k),
                                                    ctx=gast.Load()), tan.type_of(targets[0]))
            elif parts[k] is not None:
                tan.bind(targets[0], parts[k], tan.type_of(targets[0]))
        return None
    if prim.kind == "user":
        return _forward_user_call(stmt, tan, core, registry)
    if prim.kind == "rule":
        joint = getattr(prim.rule, "joint_jvp", None)
        if joint is not None:
            return joint(stmt, tan, core, registry)
        _forward_rule(stmt, tan, core)
    return None


def _unpack(stmt, tan, targets, src):
    if not (isinstance(src, gast.Name) and src.id in tan.tuples):
        return
    parts = tan.tuples[src.id]
    if isinstance(parts, str):
        dots = [tan.namer.tangent(t) for t in targets]
        tan.emit(assign(dots, name(parts)))
        for t, d in zip(targets, dots):
            tan.exprs[t] = name(d)
            tan.ttypes[t] = tan.type_of(t)
        return
    for t, part in zip(targets, parts):
        if part is not None:
            tan.bind(t, part, tan.type_of(t))


def rule_dots(call, tan, elementwise):
    """The tangents of a rule's differentiable arguments: param (or (param, i)) -> expr."""
    dots = {}
    for param, atom in call.args.items():
        if param not in call.rule.diff:
            continue
        if isinstance(atom, (gast.Tuple, gast.List)):
            for i, elt in enumerate(atom.elts):
                dot = tan.of_atom(elt, full=True)
                if dot is not None:
                    dots[(param, i)] = dot
            continue
        dot = tan.of_atom(atom, full=not elementwise)
        if dot is not None:
            dots[param] = dot
    return dots


def _forward_rule(stmt, tan, core):
    prim = stmt.prim
    rule = prim.rule
    targets = _stmt_targets(stmt)
    base = prim.call
    call = PrimCall(rule, base.args, base.types, name(targets[0]) if len(targets) == 1 else
                    None, base.out_type, base.keywords)
    elementwise = rule.name in _ELEMENTWISE_OK
    dots = rule_dots(call, tan, elementwise)
    if not dots:
        return
    if rule.jvp is None:
        raise missing_rule(stmt, core, rule)
    expr = rule.jvp(call, dots)
    if expr is None:
        raise missing_rule(stmt, core, rule, "for these argument ranks or options")
    out_t = tan.type_of(targets[0])
    if out_t.kind == "tuple" and len(targets) == 1:
        parts = [to_expr(e) if e is not None and not _is_zero(e) else None for e in expr]
        if any(p is not None for p in parts):
            tan.tuples[targets[0]] = parts
        return
    typ = tan.expr_type(expr) if elementwise else out_t
    tan.bind(targets[0], expr, typ)


def missing_rule(stmt, core, rule, detail=""):
    """The error for a primitive with no forward-mode rule, naming the user's line."""
    what = rule.emit or rule.name
    info = getattr(stmt, "info", None) or core.info
    return info.error(MissingRuleError, f"{what} has no forward-mode rule {detail}".strip(),
                      stmt.origin, "rewrite it with supported functions, or register a rule "
                      "(autodiff_ast.register_rule, or custom_jvp)")


def _forward_user_call(stmt, tan, core, registry):
    prim = stmt.prim
    callee = prim.callee
    target = _stmt_targets(stmt)[0]
    flat_args = prim.args
    active = [p for p, a in zip(callee.params, flat_args)
              if isinstance(a, gast.Name) and a.id in tan.exprs]
    if not active:
        return None
    jf = registry.get(callee, active)
    if jf is None:
        return None
    param_to_arg = dict(zip(callee.params, flat_args))
    dots = [tan.of_atom(param_to_arg[p], full=True) for p in active]
    call = gast.Call(func=name(jf.name), args=list(stmt.value.args) + dots, keywords=[])
    dot = tan.namer.tangent(target)
    replacement = assign([target, dot], call)
    for attr in ("prim", "origin", "info"):
        setattr(replacement, attr, getattr(stmt, attr, None))
    gast.copy_location(replacement, stmt)
    replacement.primal = stmt  # the primal call it stands for (linearize splits them again)
    tan.emit(replacement)
    if tan.type_of(target).kind == "tuple":
        tan.tuples[target] = dot
    else:
        tan.exprs[target] = name(dot)
        tan.ttypes[target] = tan.type_of(target)
    return replacement


def tangent_returns(sweep):
    """The expressions a tangent function returns: ``out`` then ``out_dot`` (tuples nested)."""
    core = sweep.core
    ret = core.returns
    outputs = ret.elts if isinstance(ret, gast.Tuple) else [ret]
    tan = Tangents(core, [])
    dots = []
    for atom, dot in zip(outputs, sweep.out_dots):
        dots.append(dot if dot is not None else tan.zero(atom, atom_type(atom, core.types)))
    if isinstance(ret, gast.Tuple):
        return [to_expr(ret), gast.Tuple(elts=dots, ctx=gast.Load())]
    return [to_expr(ret), dots[0]]


def returned_names(exprs):
    """Every name read by the returned expressions."""
    return {n.id for e in exprs for n in gast.walk(e) if isinstance(n, gast.Name)}


__all__ = ["forward", "TangentSweep", "JvpRegistry", "JvpFunction", "Tangents",
           "tangent_returns", "missing_rule", "rule_dots", "returned_names",
           "_returned_names", "unparse"]
