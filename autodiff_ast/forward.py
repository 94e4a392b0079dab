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
['sin_dot = np.cos(x) * x_dot', 'sum__dot = np.sum(sin_dot)']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import gast

from . import types as T
from .derivative_table import DerivativeTable
from .errors import MissingRuleError, UnsupportedSyntaxError
from .normalize import CoreFunction, Prim, atom_type
from .reverse import (
    _ELEMENTWISE_OK,
    CONTROL,
    _element_zero,
    _helpers_called,
    _stmt_targets,
    activity,
    refuse_dict_output,
    runtime_option_error,
    walk_statements,
)
from .rules import PrimCall
from .templates import append_loop, assign, const_value, fill, name, to_expr, unparse

_KINDS = ("copy", "unpack", "tuple", "tuple_get", "user", "rule", "nondiff", "setitem",
          "append", "list_new", "counter", "add_at", "pop", "opaque", "raise", "print")


@dataclass
class TangentSweep:
    """Primal code interleaved with tangent code for one choice of active inputs."""

    core: CoreFunction
    active_params: list  # the parameters that have tangents (in order)
    dot_params: list  # the names of their tangents (``x_dot``)
    body: list  # primal and tangent statements (tangent ones have ``.tangent = True``)
    out_dots: list  # tangent expression of each output (None: structurally zero)
    helpers: set = field(default_factory=set)
    is_pending: bool = False  # a placeholder while the function is still being built
    used: bool = False  # a recursive call reached the placeholder

    @classmethod
    def pending(cls, core):
        """Stands for a tangent function under construction (for recursive calls)."""
        n = len(core.returns.elts) if isinstance(core.returns, gast.Tuple) else 1
        return cls(core, [], [], [], [gast.Constant(value=0.0, kind=None)] * n,
                   is_pending=True)


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

    def get(self, core, active, needed=None):
        """The tangent function of `core` for these active parameters (None: zero output);
        `needed` lists the outputs (of a tuple return) whose tangents the caller reads."""
        key = (core.name, tuple(active), needed)
        if key not in self.functions:
            # Reserved first: a recursive call inside finds this function by its name (its
            # output tangents are taken as non-zero there).
            fname = self.program.module_names.fresh(f"{core.name}_jvp")
            placeholder = JvpFunction(fname, TangentSweep.pending(core))
            self.functions[key] = placeholder
            sweep = forward(core, active, registry=self, needed=needed)
            if all(d is None for d in sweep.out_dots) and not placeholder.sweep.used:
                self.functions[key] = None
            else:
                placeholder.sweep = sweep
        found = self.functions[key]
        if found is not None and found.sweep.is_pending:
            found.sweep.used = True
        return found

    def generated(self):
        """Every tangent function generated so far, in creation order."""
        return [f for f in self.functions.values() if isinstance(f, JvpFunction)]


# ---------------------------------------------------------------- tangents of values
class Tangents(DerivativeTable):
    """The tangent of each active value: an expression, its abstract type, tuple parts."""

    def __init__(self, core, out):
        self.core = core
        self.namer = core.namer
        self.out = out  # list the tangent statements are appended to
        self.exprs = {}  # value name -> gast expr of its tangent
        self.ttypes = {}  # value name -> abstract type of that expression
        self.tuples = {}  # tuple-valued name -> list of element tangents (None: zero) | str
        self.depth = 0  # inside loops and branches every tangent is a variable of full shape
        self.owned = set()  # values whose tangent variable holds an array nobody else holds
        self.bound = set()  # values whose tangent the current statement (re)bound
        self.helpers = set()  # emitted helpers (codegen.helpers) the tangent rules call

    def __contains__(self, value):
        return value in self.exprs or value in self.tuples

    def get(self, value):
        return self.exprs.get(value)

    def bind(self, value, expr, typ=None):
        """Make `expr` the tangent of `value`: names are aliased, expressions get a name.

        Inside loops and branches the tangent is always the variable ``value_dot`` with the
        value's full shape (it must hold the same thing on every path and iteration)."""
        if expr is None or _is_zero(expr):
            if self.depth and value in self.exprs:
                self.set_zero(value)
            return
        expr = to_expr(expr)
        typ = typ or self.expr_type(expr)
        self.bound.add(value)
        if self.depth:
            dot = self.namer.tangent(value)
            if self.smaller(typ, value):
                expr = self.full(expr, typ, value)
            self.emit(assign(dot, expr))
            self.exprs[value] = name(dot)
            self.ttypes[value] = self.type_of(value)
            self.owned.discard(value)
            if _fresh_array(expr):
                self.owned.add(value)
            return
        if isinstance(expr, gast.Name):
            # `b = a` or `b = a + 0.0`: b's tangent is the name a_dot. Whatever binds a_dot
            # again first gives b a variable of its own (keep_aside); a write into either
            # array in place must copy it first (Tangents.own).
            self.owned -= {v for v, e in self.exprs.items()
                           if isinstance(e, gast.Name) and e.id == expr.id}
            self.owned.discard(value)
        elif not isinstance(expr, gast.Constant):
            dot = self.namer.tangent(value)
            self.emit(assign(dot, expr))
            if _fresh_array(expr):
                self.owned.add(value)
            expr = name(dot)
        self.exprs[value] = expr
        self.ttypes[value] = typ

    def set_zero(self, value):
        """``value_dot = 0`` (of value's shape) as a variable."""
        dot = self.namer.tangent(value)
        t = self.type_of(value)
        if t.kind == "list":  # one zero per element, of the element's type
            for stmt in append_loop(dot, name(value), _element_zero(t.elts[0] if t.elts
                                                                     else T.UNKNOWN),
                                    self.namer.temp("element")):
                self.emit(stmt)
        else:
            self.emit(assign(dot, self.zero(name(value), t)))
        self.exprs[value] = name(dot)
        self.ttypes[value] = self.type_of(value)
        self.owned.add(value)
        self.bound.add(value)

    def full(self, expr, typ, value):
        """`expr` (a tangent of type `typ`) broadcast to the full shape of `value`."""
        if typ.kind == "float":
            return fill("np.full_like(x, d)", x=value, d=expr)
        return fill("d + np.zeros_like(x)", d=expr, x=value)

    def own(self, value):
        """Make value's tangent a variable holding an array of its own (before an in-place
        write into it); zeros when it has none."""
        dot = self.namer.tangent(value)
        current = self.exprs.get(value)
        if current is None:
            self.set_zero(value)
            return dot
        current = self.materialized(value)
        if value in self.owned and isinstance(current, gast.Name) and current.id == dot:
            return dot
        self.keep_aside({dot}, skip={value})
        if self.type_of(value).kind == "list":
            # Written in place, as the list itself is (a name sharing the list sees the write
            # in Python, and its tangent list sees it too); entries are rebound, never
            # written into, so no copy is needed.
            if isinstance(current, gast.Name):
                return current.id
            self.emit(assign(dot, current))
            self.exprs[value] = name(dot)
            return dot
        self.emit(assign(dot, fill("np.copy(d)", d=current)))
        self.exprs[value] = name(dot)
        self.owned.add(value)
        return dot

    def keep_aside(self, dots, skip=()):
        """Before code binds the tangent variables `dots` again: a value not in `skip` whose
        tangent is one of them (``b = +a``, or ``t = (a, 1.0)``, makes b's tangent the name
        ``a_dot``) gets a variable of its own holding the current one, as b keeps its value
        while a changes. Tidying inlines the copy where nothing intervenes."""
        kept = {}

        def held(expr, value):
            if not (isinstance(expr, gast.Name) and expr.id in dots):
                return expr
            if expr.id not in kept:
                keep = self.namer.temp(f"{value}_dot_kept")
                self.emit(assign(keep, expr))
                kept[expr.id] = name(keep)
            return kept[expr.id]

        def held_parts(part, value):
            if isinstance(part, list):
                return [held_parts(p, value) for p in part]
            return held(part, value) if isinstance(part, gast.AST) else part
        for v in sorted(self.exprs):
            if v not in skip:
                current = self.exprs[v]
                self.exprs[v] = held(current, v)
                if self.exprs[v] is not current:
                    self.owned.discard(v)
        for v in sorted(self.tuples):
            if v not in skip:
                self.tuples[v] = held_parts(self.tuples[v], v)

    def emit(self, stmt):
        stmt.tangent = True
        self.out.append(stmt)

    def derivative_types(self):
        return self.ttypes

    def materialized(self, value):
        """The tangent of `value` with exactly value's shape (writing a broadcast if lazy)."""
        current = self.exprs.get(value)
        if current is None:
            return None
        typ = self.ttypes.get(value, self.type_of(value))
        if not self.smaller(typ, value):
            return current
        dot = self.namer.tangent(value)
        self.emit(assign(dot, self.full(current, typ, value)))
        self.exprs[value] = name(dot)
        self.ttypes[value] = self.type_of(value)
        self.owned.add(value)
        return self.exprs[value]

    def of_atom(self, atom, full=False):
        """The tangent of an atom (None when it is structurally zero)."""
        if isinstance(atom, gast.Name) and atom.id in self.exprs:
            return self.materialized(atom.id) if full else self.exprs[atom.id]
        return None

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

    def part(self, atom, full=True):
        """The tangent of an atom as a *part*: None (zero), an expression, a list of parts
        (a tuple whose elements' tangents are known one by one) or a str (the name of a
        variable holding a tuple of tangents)."""
        if isinstance(atom, (gast.Tuple, gast.List)):
            parts = [self.part(e, full) for e in atom.elts]
            return parts if any(p is not None for p in parts) else None
        if isinstance(atom, gast.Name) and atom.id in self.tuples:
            return self.tuples[atom.id]
        return self.of_atom(atom, full=full)

    def set_part(self, value, part):
        """Make `part` the tangent of `value` (a tuple-valued or an array/float value)."""
        if part is None:
            return
        self.bound.add(value)
        if isinstance(part, (list, str)):
            self.tuples[value] = part
        elif self.type_of(value).kind == "tuple":  # an element of a tuple of tangents
            dot = self.namer.tangent(value)
            self.emit(assign(dot, part))
            self.tuples[value] = dot
        else:
            self.bind(value, part, self.type_of(value))

    def element(self, part, k):
        """The part of element `k` of a tuple's part."""
        if part is None:
            return None
        if isinstance(part, str):
            return gast.Subscript(value=name(part), slice=to_expr(k), ctx=gast.Load())
        return part[k]

    def output(self, atom):
        """The full-shape tangent of a returned atom (zeros where structurally zero)."""
        return self.materialize_part(self.part(atom), atom, atom_type(atom, self.core.types))

    def materialize_part(self, part, value_expr, typ):
        if part is None:
            return self.zero(value_expr, typ)
        if isinstance(part, str):
            return name(part)
        if isinstance(part, list):
            elts = []
            for i, (p, t) in enumerate(zip(part, typ.elts or ())):
                item = value_expr.elts[i] if isinstance(value_expr, gast.Tuple) else \
                    gast.Subscript(value=to_expr(value_expr), slice=to_expr(i), ctx=gast.Load())
                elts.append(self.materialize_part(p, item, t))
            return gast.Tuple(elts=elts, ctx=gast.Load())
        return to_expr(part)


_VIEWS = ("reshape", "ravel", "transpose", "squeeze", "expand_dims", "swapaxes", "moveaxis",
          "broadcast_to", "asarray", "ascontiguousarray", "asanyarray", "asfortranarray",
          "diagonal", "flip", "fliplr", "flipud", "rot90", "atleast_1d", "atleast_2d",
          "atleast_3d")


def _fresh_array(expr):
    """Whether `expr` certainly makes a new array (not a view or another name's array)."""
    if isinstance(expr, (gast.BinOp, gast.UnaryOp)):
        return True
    if isinstance(expr, gast.Call):
        func = expr.func
        attr = func.attr if isinstance(func, gast.Attribute) else getattr(func, "id", "")
        return attr not in _VIEWS
    return False


def _is_zero(expr):
    value = const_value(expr) if isinstance(expr, gast.AST) else expr
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


# ---------------------------------------------------------------- the sweep
def forward(core, active_params, registry=None, needed=None):
    """Primal code of `core` interleaved with the tangent code of `active_params`.

    Tangent parameters are named after the primal ones (``x_dot``); statements that compute
    tangents carry ``.tangent = True`` and the ``.origin`` of the user's statement. `needed`
    (indices into a tuple return) limits the outputs whose tangents are computed.
    """
    from .normalize import Program
    registry = registry or JvpRegistry(Program())
    ret = core.returns
    outputs = ret.elts if isinstance(ret, gast.Tuple) else [ret]
    wanted = [a for i, a in enumerate(outputs) if needed is None or i in needed]
    out_names = [n.id for a in wanted for n in gast.walk(a) if isinstance(n, gast.Name)]
    # Lists (the tapes generated code passes between functions) carry lists of tangents.
    # Tuples of numbers and arrays (a residual handed to a backward function) carry tuples.
    active_params = [p for p in active_params if core.types.get(p, T.UNKNOWN).is_float or
                     core.types.get(p, T.UNKNOWN).kind == "list" or
                     T.flat_tuple(core.types.get(p, T.UNKNOWN))]
    varied, useful = activity(core, active_params, out_names)
    live = varied & useful
    body = []
    tan = Tangents(core, body)
    dot_params = []
    for p in active_params:
        dot = core.namer.tangent(p)
        dot_params.append(dot)
        if core.types.get(p, T.UNKNOWN).kind == "tuple":
            tan.tuples[p] = dot  # (a variable holding a tuple of tangents)
            continue
        tan.exprs[p] = name(dot)
        tan.ttypes[p] = core.types.get(p, T.UNKNOWN)
    for p in _lists_given_tangents_here(core, active_params, varied):
        dot = core.namer.tangent(p)
        body.append(assign(dot, gast.List(elts=[], ctx=gast.Load())))
        tan.exprs[p] = name(dot)
        tan.ttypes[p] = core.types[p]
    tan.live = live
    _Walker(tan, core, registry, live, set(core.params)).block(core.body)
    for atom in wanted:
        refuse_dict_output(core, atom)
    out_dots = [tan.output(atom) if tan.part(atom) is not None and (
        needed is None or i in needed) else None for i, atom in enumerate(outputs)]
    return TangentSweep(core, active_params, dot_params, body, out_dots, helpers=tan.helpers)


def _lists_given_tangents_here(core, active_params, varied):
    """List parameters that come in without tangents but get varied values appended here (the
    tapes a checkpointed loop refills in a backward function): their tangent lists start
    empty at entry, so what is appended is popped with its tangent; popping past that point
    raises IndexError instead of handing out a zero tangent."""
    lists = [p for p in core.params if p not in active_params and
             core.types.get(p, T.UNKNOWN).kind == "list"]
    filled = {stmt.prim.base for stmt in walk_statements(core.body)
              if not isinstance(stmt, CONTROL) and getattr(stmt, "prim", None) is not None and
              stmt.prim.kind == "append" and any(
                  isinstance(n, gast.Name) and n.id in varied for n in stmt.prim.args)}
    return [p for p in lists if p in filled]


class _Walker:
    """Walks a core body (loops and branches included), writing primal and tangent code."""

    def __init__(self, tan, core, registry, live, defined):
        self.tan = tan
        self.core = core
        self.registry = registry
        self.live = live
        self.defined = defined  # names bound so far (their primal exists on this path)

    def block(self, stmts):
        for stmt in stmts:
            if isinstance(stmt, (gast.For, gast.While)):
                self.loop(stmt)
            elif isinstance(stmt, gast.If):
                self.branch(stmt)
            elif isinstance(stmt, gast.Pass):
                continue  # an empty block's placeholder: nothing to differentiate
            else:
                self.simple(stmt)

    def simple(self, stmt):
        tan, core = self.tan, self.core
        if getattr(stmt, "prim", None) is None or stmt.prim.kind not in _KINDS:
            raise core.info.error(UnsupportedSyntaxError, "forward mode cannot differentiate "
                                  "this statement", getattr(stmt, "origin", stmt),
                                  "use grad/vjp for this function")
        stmt = _fresh(stmt)
        targets = _stmt_targets(stmt)
        if stmt.prim.kind == "pop" and stmt.prim.base in tan.exprs:
            self.pop(stmt, targets[0])
            return
        if not any(t in self.live for t in targets):
            tan.out.append(stmt)
            if stmt.prim.kind == "append" and stmt.prim.base in tan.exprs:
                self.append_zero(stmt)
            self.defined.update(targets)
            return
        if tan.depth and stmt.prim.kind in ("rule", "user") and len(targets) == 1 and \
                targets[0] in _reads(stmt):
            self.self_update(stmt, targets[0])
            return
        marker = len(tan.out)
        tan.bound = set()
        replacement = _forward_stmt(stmt, tan, core, self.registry)
        if replacement is None:
            if stmt.prim.kind in ("setitem", "add_at"):
                # Tangent first: the write changes the base, and every view of it the tangent
                # code may still read (`item = q[:, j]` ... `q[:, j] = item * s`).
                tan.out.append(stmt)
            else:
                tan.out.insert(marker, stmt)
        if tan.depth and stmt.prim.kind not in ("setitem", "append", "add_at"):
            for t in targets:  # overwritten with no derivative: its tangent is zero now
                if t in self.live and t not in tan.bound and t in tan.exprs:
                    tan.set_zero(t)
        for s in tan.out[marker:]:
            if s is not stmt:
                s.origin = stmt.origin
                s.info = getattr(stmt, "info", core.info)
        self.defined.update(targets)

    def append_zero(self, stmt):
        """``tape.append(v)`` whose value no output needs, on a list that has a tangent list:
        append a zero tangent all the same, so the pops that mirror every pop of the list
        (:meth:`pop`) find one (a checkpointed loop's recomputation refills tapes whose values
        the backward code reads only for shapes)."""
        tan, value = self.tan, stmt.prim.args[0]
        _append_tangent(tan, stmt.prim.base, tan.zero(value, atom_type(value, self.core.types)))
        tan.out[-1].origin = stmt.origin
        tan.out[-1].info = getattr(stmt, "info", self.core.info)

    def pop(self, stmt, target):
        """``v = tape.pop()`` on a list that has a tangent list: pop both, always (the two
        lists must stay the same length)."""
        tan = self.tan
        tan.out.append(stmt)
        dot = tan.namer.tangent(target)
        pop = gast.Call(func=gast.Attribute(value=to_expr(tan.exprs[stmt.prim.base]),
                                            attr="pop", ctx=gast.Load()), args=[], keywords=[])
        tan.emit(assign(dot, pop))
        if tan.type_of(target).kind == "tuple":  # a tuple of tangents, read element by element
            tan.tuples[target] = dot
            tan.exprs.pop(target, None)
        else:
            tan.exprs[target] = name(dot)
            tan.ttypes[target] = tan.type_of(target)
        tan.owned.discard(target)
        for s in tan.out[-1:]:
            s.origin = stmt.origin
            s.info = getattr(stmt, "info", self.core.info)
        self.defined.add(target)

    def self_update(self, stmt, target):
        """``y = f(y, ...)`` in a loop: ``y_new = f(y, ...)``, its tangent (which reads the old
        y and the new value), then ``y = y_new``."""
        core = self.core
        fresh = core.namer.temp(f"{target}_new")
        core.types[fresh] = core.types.get(target, T.UNKNOWN)
        renamed = copy.copy(stmt)
        renamed.targets = [name(fresh, store=True)]
        renamed.prim = copy.copy(stmt.prim)
        if stmt.prim.call is not None:
            renamed.prim.call = copy.copy(stmt.prim.call)
            renamed.prim.call.out = fresh
        self.live.add(fresh)
        self.simple(renamed)
        back = assign(target, name(fresh))
        back.prim = Prim("copy", args=[name(fresh)])
        back.origin = stmt.origin
        back.info = getattr(stmt, "info", core.info)
        gast.copy_location(back, stmt)
        self.simple(back)

    def assigned(self, stmt):
        names = set()
        for inner in walk_statements([stmt]):
            if not isinstance(inner, CONTROL):
                names.update(_stmt_targets(inner))
        return sorted(n for n in names if n in self.live)

    def unalias(self, names):
        """Before a loop or branch that reassigns `names`: values kept unchanged whose
        tangent is one of their tangent variables get variables of their own."""
        self.tan.keep_aside({self.tan.namer.tangent(t) for t in names}, skip=set(names))

    def carry(self, names):
        """Before a loop: each value the loop reassigns gets a tangent variable of its own."""
        tan = self.tan
        for t in names:
            if t not in self.defined or tan.type_of(t).kind not in ("float", "array"):
                continue
            dot = tan.namer.tangent(t)
            current = tan.exprs.get(t)
            if current is None:
                tan.set_zero(t)
                continue
            full = tan.materialized(t)
            if not (isinstance(full, gast.Name) and full.id == dot):
                tan.emit(assign(dot, full))
                tan.exprs[t] = name(dot)
                tan.owned.discard(t)

    def hoist_broadcasts(self, stmt, names):
        """Before a loop: the full-shape tangent of each value the loop reads but does not
        reassign whose tangent is still a smaller broadcastable expression. Written inside the
        body, ``t_dot = d + np.zeros_like(t)`` would run on every step and be bound only when
        the loop runs (code after a zero-trip loop would read an unbound t_dot)."""
        tan = self.tan
        reads = {n.id for inner in walk_statements([stmt]) for n in gast.walk(inner)
                 if isinstance(n, gast.Name)}
        for t in sorted(reads - set(names)):
            if t in tan.exprs and t in self.defined:
                tan.materialized(t)

    def nested(self, stmts):
        tan = self.tan
        saved, tan.out = tan.out, []
        tan.depth += 1
        try:
            self.block(stmts)
        finally:
            tan.depth -= 1
            out, tan.out = tan.out, saved
        return out or [gast.Pass()]

    def carry_tuples(self, names):
        """Before a loop: each tuple of numbers or arrays the loop reassigns gets one tangent
        variable per element (``state_dot_0``, ...), so a step reads the tangent the step
        before wrote, not the expressions code generation held before the loop."""
        tan = self.tan
        carried = {}
        for t in names:
            typ = tan.type_of(t)
            if t not in self.defined or not T.flat_tuple(typ):
                continue
            base = tan.namer.tangent(t)
            dots = [tan.namer.temp(f"{base}_{k}") for k in range(len(typ.elts))]
            self.settle_tuple(t, dots, tan.out)
            carried[t] = dots
        return carried

    def settle_tuple(self, t, dots, out):
        """Write the tangent of tuple `t` into the variables `dots` (appended to `out`) and
        make them its tangent."""
        tan = self.tan
        part = tan.tuples.get(t)
        elts = tan.type_of(t).elts
        for k, (dot, elt) in enumerate(zip(dots, elts)):
            current = tan.element(part, k)
            if isinstance(current, gast.Name) and current.id == dot:
                continue
            value = tan.zero(fill("t[k]", t=t, k=k), elt) if current is None else current
            fix = assign(dot, value)
            fix.tangent = True
            out.append(fix)
        tan.tuples[t] = [name(d) for d in dots]
        tan.bound.add(t)

    def loop(self, stmt):
        names = self.assigned(stmt)
        self.unalias(names)
        self.carry(names)
        carried = self.carry_tuples(names)
        self.hoist_broadcasts(stmt, names)
        node = copy.copy(stmt)
        node.body = self.nested(stmt.body)
        if carried:  # the step's last tangents into the variables the next step reads
            if node.body == [gast.Pass()] or (len(node.body) == 1 and
                                              isinstance(node.body[0], gast.Pass)):
                node.body = []
            for t, dots in carried.items():
                self.settle_tuple(t, dots, node.body)
            node.body = node.body or [gast.Pass()]
        node.orelse = []
        self.tan.out.append(node)

    def branch(self, stmt):
        tan = self.tan
        names = self.assigned(stmt)
        self.unalias(names)
        before = (dict(tan.exprs), dict(tan.ttypes), dict(tan.tuples), set(tan.owned))
        defined = set(self.defined)
        arms, arm_tuples = [], []
        for stmts in (stmt.body, stmt.orelse):
            tan.exprs, tan.ttypes = dict(before[0]), dict(before[1])
            tan.tuples, tan.owned = dict(before[2]), set(before[3])
            self.defined = set(defined)
            out = self.nested(stmts) if stmts else []
            arms.append((out, dict(tan.exprs), dict(tan.ttypes), set(self.defined)))
            arm_tuples.append(dict(tan.tuples))
        tan.exprs, tan.ttypes = dict(before[0]), dict(before[1])
        tan.tuples, tan.owned = dict(before[2]), set(before[3])
        for t in names:  # a tuple of numbers or arrays: one tangent variable per element
            typ = tan.type_of(t)
            if not T.flat_tuple(typ) or \
                    not all(t in seen for _, _, _, seen in arms):
                continue
            base = tan.namer.tangent(t)
            dots = [tan.namer.temp(f"{base}_{k}") for k in range(len(typ.elts))]
            for (out, _, _, _), tuples in zip(arms, arm_tuples):
                tan.tuples = dict(tuples)
                if out == [gast.Pass()]:
                    out.clear()
                self.settle_tuple(t, dots, out)
            tan.tuples = dict(before[2])
            tan.tuples[t] = [name(d) for d in dots]
            before[2][t] = tan.tuples[t]
        merged = []
        for t in names:
            kind = tan.type_of(t).kind
            if kind not in ("float", "array", "list"):
                continue
            dot = tan.namer.tangent(t)
            if all(exprs.get(t) is None for _, exprs, _, _ in arms):
                continue
            if kind == "list" and any(t in seen and exprs.get(t) is None
                                      for _, exprs, _, seen in arms):
                continue  # (no list of zero tangents to write on the other path)
            for out, exprs, ttypes, seen in arms:
                current = exprs.get(t)
                if isinstance(current, gast.Name) and current.id == dot and not tan.smaller(
                        ttypes.get(t, T.UNKNOWN), t):
                    continue
                if t not in seen:
                    continue  # t does not exist on this path
                if current is None:
                    value = tan.zero(name(t), tan.type_of(t))
                elif tan.smaller(ttypes.get(t, T.UNKNOWN), t):
                    value = tan.full(current, ttypes[t], t)
                else:
                    value = current
                fix = assign(dot, value)
                fix.tangent = True
                if out == [gast.Pass()]:
                    out.clear()
                out.append(fix)
            merged.append((t, dot))
        for t, dot in merged:
            tan.exprs[t] = name(dot)
            tan.ttypes[t] = tan.type_of(t)
            tan.owned.discard(t)
        self.defined = defined | arms[0][3] | arms[1][3]
        node = copy.copy(stmt)
        node.body = arms[0][0] or [gast.Pass()]
        node.orelse = arms[1][0]
        tan.out.append(node)


def _reads(stmt):
    return {n.id for n in gast.walk(stmt.value) if isinstance(n, gast.Name)}


def _fresh(stmt):
    """A copy of a core statement that later passes may rewrite in place (tidy does), keeping
    its annotations (prim, origin, info) shared."""
    out = copy.copy(stmt)
    if isinstance(stmt, gast.Assign):
        out.targets = copy.deepcopy(stmt.targets)
    if isinstance(stmt, gast.Raise):
        out.exc = copy.deepcopy(stmt.exc)
    else:
        out.value = copy.deepcopy(stmt.value)
    return out


def _forward_stmt(stmt, tan, core, registry):
    """Append the tangent code of one statement; returns a replacement primal statement."""
    prim = stmt.prim
    targets = _stmt_targets(stmt)
    if prim.kind == "opaque":  # a call with no rule: an error only if a tangent reaches it
        if any(isinstance(a, gast.Name) and a.id in tan for a in prim.args):
            raise prim.error
        return None
    if prim.kind == "copy":
        src = prim.args[0]
        if isinstance(src, gast.Name) and src.id in tan.tuples:
            tan.tuples[targets[0]] = tan.tuples[src.id]
        elif isinstance(src, gast.Name) and src.id in tan.exprs:
            tan.bind(targets[0], tan.exprs[src.id], tan.ttypes[src.id])
        return None
    if prim.kind == "setitem":
        _setitem(stmt, tan)
        return None
    if prim.kind == "add_at":
        _add_at(stmt, tan)
        return None
    if prim.kind == "list_new":
        dot = tan.namer.tangent(targets[0])
        tan.emit(assign(dot, gast.List(elts=[], ctx=gast.Load())))
        tan.exprs[targets[0]] = name(dot)
        tan.ttypes[targets[0]] = tan.type_of(targets[0])
        tan.bound.add(targets[0])
        return None
    if prim.kind == "append":
        base = prim.base
        if base in tan.exprs:
            value = prim.args[0]
            typ = atom_type(value, core.types)
            if typ.kind == "tuple":  # its elements' tangents, as one tuple
                dot = tan.materialize_part(tan.part(value), value, typ)
            else:
                dot = tan.of_atom(value, full=True)
            _append_tangent(tan, base, dot if dot is not None else tan.zero(value, typ))
        return None
    if prim.kind in ("nondiff", "counter"):
        return None
    if prim.kind == "unpack":
        _unpack(tan, targets, tan.part(prim.args[0]))
        return None
    if prim.kind == "tuple":
        tan.set_part(targets[0], tan.part(stmt.value))
        return None
    if prim.kind == "tuple_get":
        k = stmt.value.slice.value
        tan.set_part(targets[0], tan.element(tan.part(prim.args[0]), k))
        return None
    if prim.kind == "user":
        return _forward_user_call(stmt, tan, core, registry)
    if prim.kind == "rule":
        joint = getattr(prim.rule, "joint_jvp", None)
        if joint is not None:
            return joint(stmt, tan, core, registry)
        _forward_rule(stmt, tan, core)
    return None


def _append_tangent(tan, base, dot):
    """``base_dot.append(dot)``: the tangent list of `base` grows with its list."""
    call = gast.Call(func=gast.Attribute(value=to_expr(tan.exprs[base]), attr="append",
                                         ctx=gast.Load()), args=[dot], keywords=[])
    tan.emit(gast.Expr(value=call))


def _setitem(stmt, tan):
    """``y[i] = v``: ``y_dot[i] = v_dot`` (0 where v has no derivative), in y's own tangent
    array (created as zeros when y had none)."""
    prim = stmt.prim
    base, index, value = prim.base, prim.rule, prim.args[0]
    typ = atom_type(value, tan.core.types)
    if typ.kind == "tuple":  # an entry of a list of tuples: the elements' tangents
        part = tan.part(value)
        dot = tan.materialize_part(part, value, typ) if part is not None else None
        zero = tan.zero(value, typ)
    else:
        dot, zero = tan.of_atom(value, full=False), fill("0.0")
    if dot is None and base not in tan.exprs:
        return
    bdot = tan.own(base)
    store = gast.Subscript(value=name(bdot), slice=to_expr(index), ctx=gast.Store())
    tan.emit(gast.Assign(targets=[store], value=to_expr(dot) if dot is not None else zero,
                         type_comment=None))
    tan.bound.add(base)


def _add_at(stmt, tan):
    """``np.add.at(y, i, v)``: ``np.add.at(y_dot, i, v_dot)`` (it is linear in y and v)."""
    prim = stmt.prim
    base, index, value = prim.base, prim.rule, prim.args[0]
    dot = tan.of_atom(value, full=False)
    if dot is None:
        return  # adds nothing to y's tangent (which exists or stays zero)
    bdot = tan.own(base)
    call = fill("np.add.at(b, i, d)", b=bdot, d=dot)
    call.args[1] = to_expr(index)
    tan.emit(gast.Expr(value=call))
    tan.bound.add(base)


def _unpack(tan, targets, part):
    if part is None:
        return
    whole = _elements_of(part, len(targets))
    if whole is not None:  # a tuple of tangents some of which are zero: unpack it at once
        unused = tan.namer.discard() if any(p is None for p in part) else None
        dots = [tan.namer.tangent(t) if p is not None else unused for t, p in zip(targets, part)]
        tan.emit(assign(dots, name(whole)))
        for t, d, p in zip(targets, dots, part):
            if p is not None:
                tan.set_part(t, d if tan.type_of(t).kind == "tuple" else name(d))
        return
    if isinstance(part, str):
        dots = [tan.namer.tangent(t) for t in targets]
        tan.emit(assign(dots, name(part)))
        tan.bound.update(targets)
        for t, d in zip(targets, dots):
            if tan.type_of(t).kind == "tuple":
                tan.tuples[t] = d
            else:
                tan.exprs[t] = name(d)
                tan.ttypes[t] = tan.type_of(t)
        return
    for t, p in zip(targets, part):
        tan.set_part(t, p)


def _elements_of(part, size):
    """The name v when `part` is [v[0], None, v[2], ...] (every element of v, by index)."""
    if not isinstance(part, list) or len(part) != size:
        return None
    bases = set()
    for i, p in enumerate(part):
        if p is None:
            continue
        if not (isinstance(p, gast.Subscript) and isinstance(p.value, gast.Name) and
                const_value(p.slice) == i):
            return None
        bases.add(p.value.id)
    return bases.pop() if len(bases) == 1 else None


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
    if rule.name == "add" and all(call.types.get(p, T.UNKNOWN).kind == "tuple" and
                                  call.types[p].elts is not None for p in ("a", "b")):
        # `c = a + b` joins two tuples: c's element tangents are a's, then b's
        halves = [(tan.part(call.args[p]), len(call.types[p].elts)) for p in ("a", "b")]
        parts = [tan.element(part, k) for part, n in halves for k in range(n)]
        if any(p is not None for p in parts):
            tan.set_part(targets[0], parts)
        return
    dots = rule_dots(call, tan, elementwise)
    if not dots:
        return
    listed = [p for p in dots if not isinstance(p, tuple) and
              call.types.get(p, T.UNKNOWN).kind == "list"]
    if listed and rule.name != "getitem":
        # np.stack(items) of a list built with append: the same call on the tangents
        from .rules.structural import emit_call
        args = dict(call.args)
        args.update({p: dots[p] for p in listed})
        tan.bind(targets[0], emit_call(rule, args, call.keywords), tan.type_of(targets[0]))
        return
    if rule.jvp is None:
        raise missing_rule(stmt, core, rule)
    expr = rule.jvp(call, dots)
    if call.unknown_option() is not None:
        raise runtime_option_error(stmt, core, rule, call.unknown_option())
    if expr is None:
        raise missing_rule(stmt, core, rule, "for these argument ranks or options",
                           call.refusal)
    tan.helpers |= _helpers_called(expr if isinstance(expr, (list, tuple)) else [expr])
    out_t = tan.type_of(targets[0])
    if out_t.kind == "tuple" and len(targets) == 1:
        if not isinstance(expr, (list, tuple)):  # one expression: a tuple of tangents
            tan.set_part(targets[0], to_expr(expr))  # (`pairs_dot[k]` of a list of tuples)
            return
        parts = [to_expr(e) if e is not None and not _is_zero(e) else None for e in expr]
        if any(p is not None for p in parts):
            tan.tuples[targets[0]] = parts
        return
    expr = _like_terms(to_expr(expr))
    typ = tan.expr_type(expr) if elementwise else out_t
    tan.bind(targets[0], expr, typ)


class _LikeTerms(gast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, gast.Add) and gast.dump(node.left) == gast.dump(node.right):
            return fill("2.0 * a", a=node.left)  # x * x_dot + x * x_dot (the tangent of x * x)
        return node


def _like_terms(expr):
    """``a + a`` written once, as ``2.0 * a``."""
    return _LikeTerms().visit(expr)


def missing_rule(stmt, core, rule, detail="", refusal=None):
    """The error for a primitive with no forward-mode rule, naming the user's line (in the
    rule's own words when it gave them: PrimCall.refuse)."""
    info = getattr(stmt, "info", None) or core.info
    if refusal is not None:
        return info.error(MissingRuleError, refusal[0], stmt.origin, refusal[1])
    if rule.name.endswith("@custom_vjp"):  # (as in JAX: a custom_vjp has no forward rule)
        fn = rule.name[:-len("@custom_vjp")]
        return info.error(
            MissingRuleError, f"{fn} is a custom_vjp function: it has a reverse-mode rule "
            "only, so forward mode (jvp, jacfwd, linearize) cannot differentiate it",
            stmt.origin, f"use grad, vjp or jacrev, or define {fn} with custom_jvp (which "
            "reverse mode can use too)")
    what = rule.emit or rule.name
    return info.error(MissingRuleError, f"{what} has no forward-mode rule {detail}".strip(),
                      stmt.origin, "rewrite it with supported functions, or register a rule "
                      "(autodiff_ast.register_rule, or custom_jvp)")


def _forward_user_call(stmt, tan, core, registry):
    prim = stmt.prim
    callee = prim.callee
    target = _stmt_targets(stmt)[0]
    flat_args = prim.args
    def carries(a):  # an argument with a tangent (a tuple's: its elements')
        if isinstance(a, gast.Tuple):  # a tuple written out: `f((a_dot, b_dot), ...)`
            return T.flat_tuple(atom_type(a, core.types)) and tan.part(a) is not None
        if not isinstance(a, gast.Name):
            return False
        if a.id in tan.tuples:
            t = tan.type_of(a.id)
            return T.flat_tuple(t) and tan.part(a) is not None
        return a.id in tan.exprs
    active = [p for p, a in zip(callee.params, flat_args) if carries(a)]
    if not active:
        return None
    needed = _needed_elements(core, target, tan.live) \
        if isinstance(callee.returns, gast.Tuple) else None
    jf = registry.get(callee, active, needed)
    if jf is None:
        return None
    param_to_arg = dict(zip(callee.params, flat_args))
    dots = [tan.output(param_to_arg[p]) if isinstance(param_to_arg[p], gast.Tuple) or
            param_to_arg[p].id in tan.tuples else
            tan.of_atom(param_to_arg[p], full=True) for p in active]
    call = gast.Call(func=name(jf.name), args=list(stmt.value.args) + dots, keywords=[])
    dot = tan.namer.tangent(target)
    replacement = assign([target, dot], call)
    for attr in ("prim", "origin", "info"):
        setattr(replacement, attr, getattr(stmt, attr, None))
    gast.copy_location(replacement, stmt)
    replacement.primal = stmt  # the primal call it stands for (linearize splits them again)
    tan.emit(replacement)
    tan.bound.add(target)
    if tan.type_of(target).kind == "tuple":
        zeros = [d is None for d in jf.sweep.out_dots] \
            if isinstance(callee.returns, gast.Tuple) else [False]
        if any(zeros):  # elements whose tangent is zero in the callee stay symbolic zeros
            tan.tuples[target] = [None if z else gast.Subscript(
                value=name(dot), slice=to_expr(i), ctx=gast.Load()) for i, z in enumerate(zeros)]
        else:
            tan.tuples[target] = dot
    else:
        tan.exprs[target] = name(dot)
        tan.ttypes[target] = tan.type_of(target)
    return replacement


def _needed_elements(core, value, live):
    """Indices of the elements of tuple `value` whose tangents the rest of `core` reads
    (None: all of them, when the tuple is used whole)."""
    needed = set()
    for stmt in walk_statements(core.body):
        prim = getattr(stmt, "prim", None)
        if prim is None or isinstance(stmt, CONTROL):
            continue
        reads = [a for a in prim.args if isinstance(a, gast.Name) and a.id == value]
        if not reads:
            continue
        if prim.kind == "unpack":
            needed |= {i for i, t in enumerate(_stmt_targets(stmt)) if t in live}
        elif prim.kind == "tuple_get":
            if any(t in live for t in _stmt_targets(stmt)):
                needed.add(stmt.value.slice.value)
        else:
            return None
    for atom in (core.returns.elts if isinstance(core.returns, gast.Tuple) else
                 [core.returns]):
        if any(isinstance(n, gast.Name) and n.id == value for n in gast.walk(atom)):
            return None
    return tuple(sorted(needed))


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
           "tangent_returns", "missing_rule", "rule_dots", "returned_names", "unparse"]
