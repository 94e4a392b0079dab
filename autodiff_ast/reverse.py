"""Reverse mode: a core function becomes a forward sweep and a backward (adjoint) sweep.

The forward sweep is the primal code, keeping what the backward sweep reads; the backward sweep
walks the statements in reverse and applies each primitive's reverse rule, accumulating adjoints
``x_bar`` of every active value. Activity analysis (varied: depends on a differentiated input;
useful: reaches the output) decides which statements get derivative code at all. Calls to the
user's own functions become calls to that function's own forward/backward pair (``f_fwd``,
``f_bwd``), never inlined.

>>> import numpy as np
>>> from autodiff_ast.frontend import parse_function
>>> from autodiff_ast.normalize import normalize
>>> from autodiff_ast import types as T
>>> def f(x):
...     return np.sum(np.sin(x))
>>> sweep = reverse(normalize(parse_function(f), {"x": T.array((T.N,))}), ["x"])
>>> [unparse(s) for s in sweep.backward]
['x_bar = np.cos(x)']
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gast

from codegen.emit import statement_blocks

from . import types as T
from .derivative_table import DerivativeTable
from .errors import (
    MissingRuleError,
    NonFloatOutputError,
    NonScalarOutputError,
    UnsupportedError,
    UnsupportedSyntaxError,
)
from .loop_shapes import varying_shapes
from .nesting import writing_code_to_transform
from .normalize import CoreFunction, atom_type
from .rules import PrimCall, runtime_option_message
from .templates import append_loop, assign, fill, name, to_expr, unparse

# Calls whose result is a new array (safe to update in place afterwards).
_ALLOCATING = {"np.zeros_like", "np.zeros", "np.ones_like", "np.full_like", "np.outer", "np.dot",
               "np.matmul", "np.where", "np.einsum", "np.diag", "np.sum", "np.cumsum", "np.full",
               "np.eye"}


def _elementwise_names():
    from .rules.elementwise import PARTIALS
    names = set(PARTIALS) | {"power", "where", "clip", "copy", "asarray", "float", "astype"}
    from .rules import all_rules
    return names | {n for n in all_rules() if n.split("@")[0] in names}


_ELEMENTWISE_OK = _elementwise_names()


@dataclass
class Sweep:
    """The derivative code of one core function for one choice of active inputs."""

    core: CoreFunction
    active_params: list
    forward: list  # primal statements (with calls to helpers' forward functions)
    backward: list  # adjoint statements
    param_bars: list  # expression of each active parameter's adjoint (None: zero)
    seeds: list  # the output adjoint name(s) for split use (vjp / helpers)
    helpers: set = field(default_factory=set)


CONTROL = (gast.If, gast.For, gast.While)


def _stmt_targets(stmt):
    """Names a simple core statement binds or updates (the base of an in-place write)."""
    prim = getattr(stmt, "prim", None)
    if prim is not None and prim.kind in ("setitem", "append", "add_at"):
        return [prim.base]
    if isinstance(stmt, gast.Assign):
        target = stmt.targets[0]
        if isinstance(target, gast.Name):
            return [target.id]
        if isinstance(target, gast.Tuple):
            return [e.id for e in target.elts if isinstance(e, gast.Name)]
    return []


def _atoms_read(prim):
    out = []
    for atom in prim.args:
        for node in gast.walk(atom):
            if isinstance(node, gast.Name):
                out.append(node.id)
    return out


def walk_statements(stmts):
    """Every core statement, nested ones included, in source order."""
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, CONTROL):
            yield from walk_statements(stmt.body)
            yield from walk_statements(stmt.orelse)


def activity(core, active_params, outputs):
    """(varied, useful) name sets, iterated to a fixed point through loops and branches."""
    varied = {p for p in active_params if core.types.get(p, T.UNKNOWN).is_float or
              core.types.get(p, T.UNKNOWN).kind in ("list", "tuple")}

    def forward(stmts):
        changed = False
        for stmt in stmts:
            if isinstance(stmt, CONTROL):
                changed |= forward(stmt.body) | forward(stmt.orelse)
                continue
            prim = stmt.prim
            if prim.kind in ("nondiff", "counter", "list_new"):
                continue
            if any(n in varied for n in _atoms_read(prim)):
                for target in _stmt_targets(stmt):
                    t = core.types.get(target, T.UNKNOWN)
                    if (t.is_float or t.kind in ("tuple", "list")) and target not in varied:
                        varied.add(target)
                        changed = True
        return changed

    while forward(core.body):
        pass
    useful = set(outputs)

    def backward(stmts):
        changed = False
        for stmt in reversed(stmts):
            if isinstance(stmt, CONTROL):
                changed |= backward(stmt.body) | backward(stmt.orelse)
                continue
            if stmt.prim.kind in ("nondiff", "counter", "list_new"):
                continue
            if any(t in useful for t in _stmt_targets(stmt)):
                new = set(_atoms_read(stmt.prim)) - useful
                if new:
                    useful.update(new)
                    changed = True
        return changed

    while backward(core.body):
        pass
    return varied, useful


class Adjoints(DerivativeTable):
    """Accumulates the adjoint of each active value into `name_bar` variables.

    An adjoint may be held lazily with fewer or size-one axes than its value (the cotangent of
    a sum is one number): elementwise rules broadcast it for free, and it is materialized to the
    value's full shape only where a rule or a return needs that.
    """

    def __init__(self, core, out):
        self.core = core
        self.namer = core.namer
        self.out = out  # list of emitted statements
        self.exprs = {}  # value name -> gast expr of its adjoint
        self.atypes = {}  # value name -> abstract type of that expression
        self.owned = set()  # adjoint names holding an array nobody else references
        self.tuples = {}  # tuple-valued name -> list of element adjoint exprs (None: zero)
        self.tuple_vars = {}  # tuple-valued name -> its element adjoints' variables (in loops)
        self.helpers = set()
        self.array_lists = set()  # lists stacked into arrays: their adjoint is an array
        # Names whose adjoint is a variable initialised before a loop or branch: every
        # contribution adds to it (in straight-line code the first one may assign).
        self.accumulate = set()
        self.in_place = []  # ``x_bar += c`` statements (see can_add_in_place)
        # Lists whose adjoint is still the empty stack made before a loop or branch: the
        # one adjoint a helper's backward function returns for the list may replace it.
        self.empty_lists = set()

    def get(self, value):
        return self.exprs.get(value)

    def seed(self, value, expr, typ=None):
        self.exprs[value] = to_expr(expr)
        self.atypes[value] = typ or self.type_of(value)
        if isinstance(expr, float):
            self.atypes[value] = T.FLOAT

    def derivative_types(self):
        return self.atypes

    def add(self, value, contrib, ctype=None, view=False):
        """Accumulate `contrib` (of abstract type `ctype`) into the adjoint of `value`.
        view=True: contrib reads memory about to change (a row of an adjoint the caller
        zeroes next): it is copied where the adjoint would hold it, not where it is added
        into an array at once (``v_bar += y_bar[i]`` needs no copy)."""
        if view and (self.type_of(value).kind == "list" or T.nested_tuple(self.type_of(value))):
            contrib, view = fill("p.copy()", p=contrib), False
        if self.type_of(value).kind == "list":
            # A list's adjoint has an entry per element (see init_list_zeros); a second one
            # (the list read whole twice, say copied and indexed) is added entry by entry.
            bar = self.namer.adjoint(value)
            if self.exprs.get(value) is None or value in self.empty_lists:
                self.empty_lists.discard(value)
                self.out.append(assign(bar, contrib))
                self.exprs[value] = name(bar)
                self.owned.discard(bar)
                return
            current = self.exprs[value]
            part = self.namer.temp(f"{bar}_part")
            self.out.append(assign(part, contrib))
            if not (isinstance(current, gast.Name) and current.id == bar and bar in self.owned):
                self.own_list(value, current)
            k = self.namer.temp("k")
            entry = gast.Subscript(value=name(bar), slice=name(k), ctx=gast.Store())
            self.out.append(gast.For(
                target=name(k, store=True), iter=fill("range(len(p))", p=part),
                body=[gast.Assign(targets=[entry], value=fill("b[k] + p[k]", b=bar, p=part,
                                                              k=k), type_comment=None)],
                orelse=[], type_comment=None))
            return
        t = self.type_of(value)
        if T.nested_tuple(t):  # (a tuple popped from a tape, say)
            if isinstance(contrib, gast.Tuple) and len(contrib.elts) == len(t.elts):
                for k, part in enumerate(contrib.elts):  # written out: element by element
                    self.add_to_tuple(value, k, part)
                return
            whole = self.namer.temp(f"{self.namer.adjoint(value)}_part")
            self.out.append(assign(whole, contrib))
            for k in range(len(t.elts)):
                self.add_to_tuple(value, k, fill("w[k]", w=whole, k=k))
            return
        if ctype is None:
            ctype = self.expr_type(contrib)
        contrib, fitted = self.fit(contrib, ctype, self.type_of(value), value)
        if t.is_float and (_integral(contrib, self.core.types) or _integral_type(ctype)):
            # (the seed 1.0 of `np.sum(y * mask)` simplified away: y_bar = mask, a bool or int
            # array that later float adds into would truncate; or np.sum(W, axis=0), the
            # unbroadcast adjoint of `y * W` with W an integer matrix)
            contrib = fill("float(c)", c=contrib) if _integral_scalar(
                contrib, self.core.types) else fill("c.astype(np.float64)", c=contrib)
            fitted = T.array(fitted.dims) if fitted.kind == "array" else T.FLOAT
        bar = self.namer.adjoint(value)
        current = self.exprs.get(value)
        if value in self.accumulate and current is None:
            self.init_zero(value)
            current = self.exprs[value]
        if current is None:
            if view and not _allocates(contrib):
                contrib = fill("p.copy()", p=contrib)
            if self.smaller(fitted, value) and _simple(contrib):
                self.exprs[value] = contrib
                self.atypes[value] = fitted
                return
            self.out.append(assign(bar, contrib))
            if _allocates(contrib):
                self.owned.add(bar)
            self.exprs[value] = name(bar)
            self.atypes[value] = fitted
        elif self.can_add_in_place(value, bar, current, fitted):
            # In a loop: add into the array the adjoint already owns, no new array per step.
            stmt = gast.AugAssign(target=name(bar, store=True), op=gast.Add(),
                                  value=to_expr(contrib))
            self._mark_same_shape(stmt, value, fitted)
            self.out.append(stmt)
            self.in_place.append(stmt)
        else:
            stmt = assign(bar, fill("a + c", a=current, c=contrib))
            if isinstance(current, gast.Name) and current.id == bar:
                self._mark_same_shape(stmt, value, fitted)
            self.out.append(stmt)
            self.owned.add(bar)
            self.exprs[value] = name(bar)
            self.atypes[value] = T.broadcast(self.atypes.get(value, fitted), fitted)

    def _mark_same_shape(self, stmt, value, fitted):
        """Mark ``x_bar = x_bar + c`` / ``x_bar += c`` whose c is a float64 array of exactly
        x's type: where x_bar is known to hold zeros of x's shape, it may become ``x_bar = c``
        (autodiff_ast/known_zeros.py; only once c is an expression making a new array)."""
        t = self.type_of(value)
        if t.kind == "array" and t.dims is not None and fitted.kind == "array" and \
                fitted.dims == t.dims and (t.dtype or "float64") == "float64" and \
                (fitted.dtype or "float64") == "float64":
            stmt.same_shape_as = value

    def can_add_in_place(self, value, bar, current, fitted):
        """Whether ``bar += c`` may replace ``bar = bar + c``: an accumulating adjoint (a loop
        or branch adds into it) holding an array of value's full shape that it owns and no
        pending adjoint expression reads, with a contribution that does not broadcast it up
        (see also _undo_aliased_in_place, which checks the finished sweep)."""
        t = self.type_of(value)
        if value not in self.accumulate or bar not in self.owned or not (
                isinstance(current, gast.Name) and current.id == bar):
            return False
        if t.kind != "array" or t.dims is None or (t.dtype or "float64") != "float64":
            return False
        if self.atypes.get(value) != t or not (
                fitted.kind == "float" or (fitted.kind == "array" and fitted.dims is not None and
                                           len(fitted.dims) <= len(t.dims) and
                                           (fitted.dtype or "float64") == "float64")):
            return False
        if fitted.kind == "array" and any(
                d == T.N and t.dims[len(t.dims) - len(fitted.dims) + k] != T.N
                for k, d in enumerate(fitted.dims)):
            return False
        return not any(
            other != value and expr is not None and bar in {
                n.id for n in gast.walk(expr) if isinstance(n, gast.Name)}
            for other, expr in self.exprs.items())

    def zero_expr(self, value):
        t = self.type_of(value)
        if t.kind == "float" or (t.kind in ("int", "bool")):
            return fill("0.0")
        if t.kind == "tuple" and t.elts is not None:
            return _zero_of(name(value), t)
        return fill("np.zeros_like(x)", x=value)

    def tuple_variables(self, value):
        """Before a loop or branch: the adjoint of the tuple-valued `value` held in one
        variable per element (``state_bar_0``, ...), so it flows from one step to the next:
        what a step's reads add and what its write takes must be runtime values, not the
        expressions code generation holds for straight-line code."""
        elts = self.type_of(value).elts
        bars = self.tuple_vars.get(value)
        if bars is None:
            base = self.namer.adjoint(value)
            bars = [self.namer.temp(f"{base}_{k}") for k in range(len(elts))]
        parts = self.tuples.get(value) or [None] * len(elts)
        for k, (bar, part, elt) in enumerate(zip(bars, parts, elts)):
            if isinstance(part, gast.Name) and part.id == bar:
                continue
            self.pin_readers(bar)
            self.out.append(assign(bar, to_expr(part) if part is not None else
                                   _zero_of(fill("t[k]", t=value, k=k), elt)))
        self.tuple_vars[value] = bars
        self.tuples[value] = [name(b) for b in bars]

    def add_to_tuple(self, value, k, g):
        """Add `g` into element k of the tuple-valued `value`'s adjoint."""
        bars = self.tuple_vars.get(value)
        elts = self.type_of(value).elts or ()
        elt = elts[k] if k < len(elts) else T.UNKNOWN
        if bars is None:
            parts = self.tuples.setdefault(value, [None] * len(elts))
            parts[k] = g if parts[k] is None else _sum_adjoints(parts[k], g, elt)
            return
        self.pin_readers(bars[k])
        self.out.append(assign(bars[k], _sum_adjoints(name(bars[k]), g, elt)))

    def init_zero(self, value):
        """``x_bar = 0`` of x's type (before a loop, or after x is overwritten in one)."""
        if value in self.tuple_vars:
            elts = self.type_of(value).elts
            for k, (bar, elt) in enumerate(zip(self.tuple_vars[value], elts)):
                self.pin_readers(bar)
                self.out.append(assign(bar, _zero_of(fill("t[k]", t=value, k=k), elt)))
            self.tuples[value] = [name(b) for b in self.tuple_vars[value]]
            return
        bar = self.namer.adjoint(value)
        self.pin_readers(bar)
        self.out.append(assign(bar, self.zero_expr(value)))
        self.owned.add(bar)
        self.exprs[value] = name(bar)
        self.atypes[value] = self.type_of(value)

    def pin_readers(self, bar):
        """Before `bar` is reassigned: adjoints still held as expressions that read it (say
        ``np.full_like(y, t_bar)``, not yet written out) get their own variables now, so they
        keep the value `bar` has here."""
        for other, expr in list(self.exprs.items()):
            own = self.namer.adjoint(other)
            if expr is None or own == bar or bar not in {
                    n.id for n in gast.walk(expr) if isinstance(n, gast.Name)}:
                continue
            if self.smaller(self.atypes.get(other, self.type_of(other)), other):
                self.materialized(other)  # written out at its full shape
                continue
            self.out.append(assign(own, expr))
            if not isinstance(expr, gast.Name):
                self.owned.add(own)
            else:
                self.owned.discard(own)
            self.exprs[other] = name(own)

    def prepare_accumulation(self, values, written):
        """Before a loop or branch in the backward sweep: give each adjoint a variable."""
        for value in values:
            t = self.type_of(value)
            if t.kind == "list" and value not in self.array_lists:
                if self.exprs.get(value) is None:  # one zero per element
                    self.init_list_zeros(value)
                    self.empty_lists.add(value)
                continue
            if T.flat_tuple(t):
                self.tuple_variables(value)
                self.accumulate.add(value)
                continue
            if t.kind in ("tuple", "list", "object"):
                continue
            if self.exprs.get(value) is None:
                self.init_zero(value)
            else:
                current = self.materialized(value)
                bar = self.namer.adjoint(value)
                if not (isinstance(current, gast.Name) and current.id == bar) or (
                        value in written and bar not in self.owned):
                    copy = fill("c.copy()", c=current) if t.kind == "array" else current
                    self.out.append(assign(bar, copy))
                    self.owned.add(bar)
                    self.exprs[value] = name(bar)
            self.accumulate.add(value)

    def materialized(self, value):
        """The adjoint of `value` with exactly value's shape (emitting a broadcast if lazy)."""
        current = self.exprs.get(value)
        if current is None:
            return None
        typ = self.atypes.get(value, self.type_of(value))
        if not self.smaller(typ, value):
            return current
        bar = self.namer.adjoint(value)
        if typ.kind == "float":
            full = fill("np.ones_like(x)", x=value) if _is_const(current, 1.0) else \
                fill("np.full_like(x, c)", x=value, c=current)
        else:
            full = fill("np.broadcast_to(c, x.shape).copy()", c=current, x=value)
        self.out.append(assign(bar, full))
        self.owned.add(bar)
        self.exprs[value] = name(bar)
        self.atypes[value] = self.type_of(value)
        return self.exprs[value]

    def fit(self, contrib, ctype, target, value):
        """Sum `contrib` down to the shape of `value` where it was broadcast.

        Returns (expression, its type): the type may still have fewer or size-one axes than
        `value` (it broadcasts up when added).
        """
        if target.kind == "float":
            if ctype.kind == "array":
                return fill("np.sum(c)", c=contrib), T.FLOAT
            return contrib, T.FLOAT
        if ctype.kind == "float":
            return contrib, T.FLOAT
        if target.kind != "array" or target.dims is None or ctype.kind != "array" or \
                ctype.dims is None:
            if ctype == target and ctype.kind == "array" and ctype.dims is not None:
                return contrib, target
            self.helpers.add("unbroadcast")
            # np.shape also works for a Python float passed where any rank was allowed
            shape = fill("np.shape(x)", x=value) if target.kind != "array" or \
                target.dims is None else fill("x.shape", x=value)
            return fill("unbroadcast(c, s)", c=contrib, s=shape), target
        fd, td = list(ctype.dims), list(target.dims)
        expr = contrib
        while len(fd) > len(td):
            expr = fill("np.sum(c, axis=0)", c=expr)
            fd.pop(0)
        offset = len(td) - len(fd)
        for i in range(len(fd)):
            if td[i + offset] == 1 and fd[i] == T.N:
                # axis i of the contribution (it may have fewer axes than the target)
                expr = fill("np.sum(c, axis=a, keepdims=True)", c=expr, a=i)
                fd[i] = 1
        return expr, T.array(tuple(fd), target.dtype or "float64")

    def init_list_zeros(self, value):
        """Write a zero adjoint of the list `value` as it is at this point of the backward
        sweep: one entry per element, in the element's place. A list's adjoint keeps that
        shape throughout: an element read adds into its entry, the adjoint of
        ``xs.append(v)`` pops v's entry, that of ``v = xs.pop()`` appends v's adjoint. (A
        loop, not a comprehension: generated code is differentiated again.)"""
        t = self.type_of(value)
        self.list_from(value, name(value), _element_zero(t.elts[0] if t.elts else T.UNKNOWN))

    def add_rows(self, value, g):
        """Add row k of the array `g` into entry k of the list `value`'s adjoint, for every
        entry (the adjoint of ``np.stack(value)`` when the list is stacked more than once)."""
        bar = self.own_list_adjoint(value)
        k = self.namer.temp("k")
        row = gast.Subscript(value=to_expr(g), slice=name(k), ctx=gast.Load())
        self.out.append(gast.For(target=name(k, store=True), iter=fill("range(len(v))", v=value),
                                 body=[self.entry_sum(value, bar, name(k), row)], orelse=[],
                                 type_comment=None))

    def own_list_adjoint(self, value):
        """Make the adjoint of the list `value` a list of this code's own, one entry per
        element (zeros where there was none, a copy of another's entries), and return its
        name: entries are then added into it."""
        bar = self.namer.adjoint(value)
        if self.exprs.get(value) is None:
            self.init_list_zeros(value)
        elif not (isinstance(self.exprs[value], gast.Name) and
                  self.exprs[value].id == bar) or bar not in self.owned:
            self.own_list(value, self.exprs[value])  # another's list: entries into ours
        self.owned.add(bar)
        self.exprs[value] = name(bar)
        self.empty_lists.discard(value)
        return bar

    def entry_sum(self, value, bar, index, g):
        """``bar[index] = bar[index] + g``: `g` added into an entry of the list adjoint
        `bar` of `value`, as a new value (the entry may be an array another adjoint holds);
        element by element for an entry that is a tuple (`+` would join the tuples)."""
        entry = gast.Subscript(value=name(bar), slice=to_expr(index), ctx=gast.Load())
        target = gast.Subscript(value=name(bar), slice=to_expr(index), ctx=gast.Store())
        total = fill("e + g", e=entry, g=g)
        elts = self.type_of(value).elts
        if elts and elts[0].kind == "tuple" and elts[0].elts is not None:
            parts = g.elts if isinstance(g, gast.Tuple) else [
                fill("g[k]", g=g, k=k) for k in range(len(elts[0].elts))]
            total = gast.Tuple(elts=[fill("e[k]", e=entry, k=k) if _zero_expr(p) else
                                     fill("e[k] + p", e=entry, k=k, p=p)
                                     for k, p in enumerate(parts)], ctx=gast.Load())
        return gast.Assign(targets=[target], value=total, type_comment=None)

    def own_list(self, value, current):
        """Make the list adjoint of `value` a list of its own holding `current`'s entries
        (they are rebound later, never written into: a shallow copy)."""
        held = self.namer.temp(f"{self.namer.adjoint(value)}_held")
        self.out.append(assign(held, current))
        self.list_from(value, name(held), "e")

    def list_from(self, value, source, entry):
        """``value_bar = []`` and a loop appending `entry` (a template of ``e``) for each
        element ``e`` of the list `source`; value_bar becomes value's adjoint, owned."""
        bar = self.namer.adjoint(value)
        self.out.extend(append_loop(bar, source, entry, self.namer.temp("element")))
        self.owned.add(bar)
        self.exprs[value] = name(bar)

    def scatter(self, value, index, g, advanced):
        """Adjoint of ``y = value[index]``: add g into the indexed part of value's adjoint."""
        bar = self.namer.adjoint(value)
        if self.type_of(value).kind == "list" and value not in self.array_lists:
            # An element of a list (``xs[j]``, ``for v in xs``): into its entry.
            self.out.append(self.entry_sum(value, self.own_list_adjoint(value), index, g))
            return
        current = self.exprs.get(value)
        if current is not None:
            current = self.materialized(value)
        if current is None:
            self.out.append(assign(bar, fill("np.zeros_like(x)", x=value)))
            self.owned.add(bar)
            self.exprs[value] = name(bar)
            self.atypes[value] = self.type_of(value)
        elif bar not in self.owned or not (isinstance(current, gast.Name) and current.id == bar):
            self.out.append(assign(bar, fill("c.copy()", c=current)))
            self.owned.add(bar)
            self.exprs[value] = name(bar)
        if advanced:
            call = fill("np.add.at(b, i, g)", b=bar, g=g)
            call.args[1] = _index_value(index)
            self.out.append(gast.Expr(value=call))
        else:
            target = gast.Subscript(value=name(bar), slice=to_expr(index), ctx=gast.Store())
            self.out.append(gast.AugAssign(target=target, op=gast.Add(), value=to_expr(g)))


def _simple(expr):
    return isinstance(expr, (gast.Name, gast.Constant)) or (
        isinstance(expr, gast.UnaryOp) and isinstance(expr.operand, (gast.Name, gast.Constant)))


def _is_const(expr, value):
    return isinstance(expr, gast.Constant) and expr.value == value


def _index_value(index):
    """An index usable as a value (for np.add.at): slices become slice(...) calls."""
    if isinstance(index, gast.Slice):
        parts = [index.lower, index.upper, index.step]
        if parts[2] is None:  # slice(a, b); slice(a) alone would be a stop, not a start
            parts.pop()
            if parts == [None, None]:
                parts = [None]
        return gast.Call(func=name("slice"), args=[to_expr(p) if p is not None else
                                                   gast.Constant(value=None, kind=None)
                                                   for p in parts], keywords=[])
    if isinstance(index, gast.Tuple):
        return gast.Tuple(elts=[_index_value(e) for e in index.elts], ctx=gast.Load())
    return to_expr(index)


def _allocates(expr):
    if isinstance(expr, (gast.BinOp, gast.UnaryOp)):
        return True
    if isinstance(expr, gast.Call):
        text = unparse(expr.func)
        return text in _ALLOCATING or text.endswith((".copy", ".astype"))
    return False


def _advanced(index, types):
    parts = index.elts if isinstance(index, gast.Tuple) else [index]
    for p in parts:
        if isinstance(p, (gast.Slice, gast.Constant)):
            continue
        t = atom_type(p, types)
        if t.kind == "array" and t.dtype == "bool":
            continue  # a mask selects each element at most once: `b[mask] += g` is exact
        if t.kind not in ("int", "bool"):
            return True
    return False


class SplitRegistry:
    """Forward/backward function pairs generated for the user's helper functions."""

    def __init__(self, program):
        self.program = program
        self.pairs = {}  # (core name, active flat params) -> Split
        self.in_progress = {}
        self.recursive = set()

    def split(self, core, active, recompute=False):
        """The forward/backward pair of `core` for these active parameters.

        A recursive function, or one marked with `checkpoint`, gets a recomputing pair: its
        forward function is the primal itself and its backward function recomputes what it
        needs (no residuals stored), which is also what keeps recursion finite. So does a
        call made inside a loop (recompute=True): its residuals would otherwise be pushed on
        one tape each per step, and that tape traffic (lists of small arrays, reference
        counts) costs more than running the helper's forward sweep once more.
        """
        key = (core.name, tuple(active)) + (("recompute",) if recompute else ())
        if key in self.in_progress:  # a recursive call: the pair being built recomputes
            self.recursive.add(key)
            return self.in_progress[key]
        if key not in self.pairs:
            bwd_name = self.program.module_names.fresh(f"{core.name}_bwd")
            placeholder = Split(None, core.name, bwd_name, [], list(core.params))
            self.in_progress[key] = placeholder
            try:
                sweep = reverse(core, active, registry=self, seed="split")
            finally:
                del self.in_progress[key]
            recompute = recompute or key in self.recursive or getattr(core, "checkpointed",
                                                                       False)
            self.pairs[key] = make_split(sweep, self.program, bwd_name=bwd_name,
                                         recompute=recompute)
        return self.pairs[key]


@dataclass
class Split:
    sweep: Sweep
    fwd_name: str
    bwd_name: str
    residuals: list  # names the forward function returns after the output
    bwd_params: list  # primal parameters the backward function reads (before residuals)


def make_split(sweep, program, bwd_name=None, recompute=False):
    """Decide the residuals a forward function hands its backward function.

    With recompute=True the forward function is the primal and the backward function runs
    the forward sweep again before its adjoint code (checkpointing, recursion).
    """
    from .tidy import drop_unread_tapes, free_names, tidy_block
    core = sweep.core
    bar_names = {n.id for e in sweep.param_bars if e is not None for n in gast.walk(e)
                 if isinstance(n, gast.Name)}
    if recompute:
        for stmt in sweep.backward:
            stmt.backward = True
        block = tidy_block(list(sweep.forward) + list(sweep.backward), keep=bar_names,
                           temps=core.namer)
        needed = free_names(block) + _zero_bar_params(sweep)
        # A value set only in a branch not taken (or a loop that did not run) that the
        # backward code still reads after it (``x_bar_bar = np.zeros_like(x_bar)``): give it a
        # value of its type first, as residuals get one (see below).
        primal_of = {bar: v for (v, suffix), bar in core.namer._derived.items()
                     if suffix == "bar"}  # an adjoint has its value's type
        block = [assign(n, _placeholder(core.types.get(n, core.types.get(
            primal_of.get(n), T.UNKNOWN)))) for n in _maybe_unbound(
                block, list(core.params) + list(sweep.seeds or ()))] + block
        body = without_prints([s for s in block if not getattr(s, "backward", False)])
        if body:
            body = [_comment_stmt(f"{core.info.name}: recomputed here, nothing was stored "
                                  "(checkpointed, recursive or called in a loop)")] + body
        sweep.backward = body + [s for s in block if getattr(s, "backward", False)]
        sweep.forward = []
        bwd_params = [p for p in core.params if p in needed]
        return Split(sweep, core.name, bwd_name or program.module_names.fresh(
            f"{core.name}_bwd"), [], bwd_params)
    backward = tidy_block(sweep.backward, keep=bar_names, temps=core.namer, gather=True)
    sweep.forward = list(sweep.forward)
    drop_unread_tapes(sweep.forward, backward)  # saved for reads that tidying removed
    sweep.backward = backward
    forward = tidy_block(sweep.forward, keep=set(_returned_names(core)) | set(
        free_names(backward)), temps=core.namer)
    zeros_at_entry = _zeros_at_entry(sweep, forward)
    needed = free_names(backward, maybe_unbound=True) + _zero_bar_params(sweep) + zeros_at_entry
    defined_fwd = set()
    for stmt in forward:
        defined_fwd.update(_stmt_targets(stmt))
    # Parameters the function rebinds (inside loops or branches) reach the backward function
    # with their final values, as residuals; the others are passed again by the caller.
    rebound = {t for stmt in walk_statements(core.body) if not isinstance(stmt, CONTROL)
               for t in _stmt_targets(stmt)} & set(core.params)
    bwd_params = [p for p in core.params if p in needed and p not in rebound]
    returned = set(_returned_names(core))
    residuals = [n for n in _ordered_defs(forward) if n in needed and (
        n not in core.params or n in rebound) and n not in returned]
    # (a parameter the function rebinds and returns, `u = new` in a loop then `return s, u`,
    # is a residual too: its final value is not the one the caller passed)
    residuals += [n for n in _returned_names(core) if n in needed and (
        n not in core.params or n in rebound)]
    # A residual set only in a branch not taken, or in a loop that did not run, is still
    # returned: give it a value of its type first (the backward function never reads it then).
    from .tidy import stmt_defs
    top = {d for stmt in forward if not isinstance(stmt, CONTROL) for d in stmt_defs(stmt)}
    forward = [assign(r, _placeholder(core.types.get(r, T.UNKNOWN))) for r in residuals
               if r not in top and r not in core.params] + forward
    residuals = _start_backward_only_tapes(forward, sweep, residuals)
    # A list the function returns and its backward function pops (a list built in the
    # helper): the caller holds it as the output too, so the backward function pops a copy.
    for r in residuals:
        if r in returned and core.types.get(r, T.UNKNOWN).kind == "list":
            kept = core.namer.temp(f"{r}_kept")
            sweep.backward = append_loop(kept, name(r), "e", core.namer.temp("element")) + [
                assign(r, name(kept))] + list(sweep.backward)
    sweep.forward = forward
    base = core.name
    fwd_name = program.module_names.fresh(f"{base}_fwd") if residuals else core.name
    bwd_name = bwd_name or program.module_names.fresh(f"{base}_bwd")
    return Split(sweep, fwd_name, bwd_name, residuals, bwd_params)


def _start_backward_only_tapes(forward, sweep, residuals):
    """A tape the forward function only creates (``acc_tape = []``) and the backward function
    fills (a checkpointed loop's tapes are filled while its segments are recomputed) is created
    by the backward function instead of being handed over empty: Numba cannot type a list
    nothing appends to. `forward` and ``sweep.backward`` change; returns the residuals left."""
    def is_empty_list(stmt):
        return isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.List) and \
            not stmt.value.elts
    moved = []
    for stmt in list(forward):
        if not is_empty_list(stmt) or stmt.targets[0].id not in residuals:
            continue
        tape = stmt.targets[0].id
        if any(isinstance(n, gast.Name) and n.id == tape for other in forward
               if other is not stmt for n in gast.walk(other)):
            continue
        forward.remove(stmt)
        moved.append(tape)
    if moved:
        sweep.backward = [assign(t, gast.List(elts=[], ctx=gast.Load())) for t in moved] + \
            list(sweep.backward)
    return [r for r in residuals if r not in moved]


def _zeros_at_entry(sweep, forward):
    """Zero adjoints of parameters the function rebinds or pops from, made at the start of
    `forward` (which changes) from their values there: the backward function sees only their
    last values (another shape, say a tape's zero-size placeholder, or an emptied list).
    Returns their names (residuals), which become those parameters' adjoints."""
    core = sweep.core
    changed = set()
    for stmt in walk_statements(core.body):
        if not isinstance(stmt, CONTROL):
            changed.update(_stmt_targets(stmt))
            if stmt.prim.kind in ("pop", "append"):
                changed.add(stmt.prim.base)
    names = []
    at = 0  # (where the next zero goes: after the ones made so far, in order)
    for k, (p, bar) in enumerate(zip(sweep.active_params, sweep.param_bars)):
        t = core.types.get(p, T.UNKNOWN)
        if bar is not None or p not in changed or t.kind == "float":
            continue
        zero = core.namer.fresh(f"{p}_bar_zero")
        if t.kind == "list":  # one zero per element, of the element's type
            made = append_loop(zero, name(p), _element_zero(t.elts[0] if t.elts else T.UNKNOWN),
                               core.namer.temp("element"))
        else:
            made = [assign(zero, fill("np.zeros_like(p)", p=p))]
        forward[at:at] = made
        at += len(made)
        sweep.param_bars[k] = name(zero)
        names.append(zero)
    return names


def _zero_bar_params(sweep):
    """Active array parameters without an adjoint: the backward function returns
    ``np.zeros_like(p)`` for them, so it needs p itself."""
    return [p for p, e in zip(sweep.active_params, sweep.param_bars) if e is None and
            sweep.core.types.get(p, T.UNKNOWN).kind != "float"]


def _comment_stmt(text):
    from codegen.emit import comment
    return comment(text)


def _ordered_defs(stmts):
    from .tidy import stmt_defs
    out = []
    for stmt in walk_statements(stmts):
        targets = stmt_defs(stmt) if not isinstance(stmt, CONTROL) else (
            [stmt.target.id] if isinstance(stmt, gast.For) else [])
        for t in targets:
            if t not in out:
                out.append(t)
    return out


def _returned_names(core):
    ret = core.returns
    atoms = ret.elts if isinstance(ret, gast.Tuple) else [ret]
    # Nested tuples (`return a, (b, c)`) return every name inside them too (each once).
    names = [n.id for a in atoms for n in gast.walk(a) if isinstance(n, gast.Name)]
    return list(dict.fromkeys(names))


def reverse(core, active_params, registry=None, seed="grad", output_index=None):
    """Build the forward and backward sweeps of `core` with respect to `active_params`.

    seed='grad' seeds the (scalar) output's adjoint with 1.0; seed='split' makes the output
    adjoint(s) parameters named after the output (``out_bar``) for vjp and helper calls.
    output_index picks one element of a tuple output (grad with has_aux).
    """
    from .normalize import Program
    registry = registry or SplitRegistry(Program())
    ret = core.returns
    outputs = ret.elts if isinstance(ret, gast.Tuple) else [ret]
    if output_index is not None:
        outputs = [outputs[output_index]]
    # names inside nested tuple outputs are outputs too (see _seed_output)
    out_names = list(dict.fromkeys(n.id for a in outputs for n in gast.walk(a)
                                   if isinstance(n, gast.Name)))
    varied, useful = activity(core, active_params, out_names)
    active = varied & useful
    _refuse_merged_axes(core, active)
    _refuse_calls_without_rules(core, active)
    backward = []
    adj = Adjoints(core, backward)
    seeds = []
    if seed == "grad":
        if len(outputs) != 1 or (isinstance(outputs[0], gast.Constant) and
                                 outputs[0].value is None):
            what = f"a tuple of {len(outputs)} values" if len(outputs) != 1 else "None"
            raise core.info.error(
                NonScalarOutputError, f"grad requires a real scalar output, but "
                f"{core.info.name} returns {what}", core.return_node,
                "return one value, or return (output, aux) and pass has_aux=True")
        for a in outputs:
            if isinstance(a, gast.Constant) and not isinstance(a.value, float):
                raise core.info.error(
                    NonScalarOutputError, f"grad requires a real scalar output, but "
                    f"{core.info.name} returns the constant {a.value!r}", core.return_node,
                    "return a float")
            if isinstance(a, gast.Name):
                t = core.types.get(a.id, T.UNKNOWN)
                if t == T.DICT:
                    raise core.info.error(
                        NonScalarOutputError, f"grad requires a real scalar output, but "
                        f"{core.info.name} returns a dict", core.return_node,
                        "return the loss, with the dict as aux: return loss, {...} and pass "
                        "has_aux=True")
                if t.kind in ("int", "bool"):
                    raise core.info.error(
                        NonFloatOutputError, f"grad requires a real floating-point output, "
                        f"but {core.info.name} returns {T.describe(t)}", core.return_node,
                        "an integer or boolean value has no derivative: return a float "
                        "(float(value), or compute it from the float inputs)")
                if t.kind == "array" or not t.is_float and t.kind != "unknown":
                    raise core.info.error(
                        NonScalarOutputError, f"grad requires a real scalar output, but "
                        f"{a.id} is {T.describe(t)}", core.return_node,
                        "reduce it (np.sum, np.mean), or use jacrev/vjp for non-scalar outputs")
                adj.seed(a.id, 1.0)
    else:
        for i, a in enumerate(outputs):
            refuse_dict_output(core, a)
            if isinstance(a, gast.Name) and a.id not in core.namer.temps and \
                    core.namer.adjoint(a.id) not in seeds:
                seed_name = core.namer.adjoint(a.id)
            else:  # (a name returned twice gets one seed per position, summed)
                seed_name = core.namer.fresh("out_bar" if len(outputs) == 1 else f"out{i}_bar")
            seeds.append(seed_name)
            _seed_output(adj, a, seed_name, varied, core)
    adj.array_lists = _stacked_once(core)
    builder = _Builder(core, adj, active, registry)
    builder.backward_block(core.body)
    forward = builder.forward_sweep()
    param_bars = [_tuple_adjoint(adj, p, snapshot=False)
                  if core.types.get(p, T.UNKNOWN).kind == "tuple" else adj.materialized(p)
                  for p in active_params]
    _undo_aliased_in_place(backward, adj.in_place, seeds)
    _run_forward_where_order_free(backward, seeds)
    _rebind_dead_adjoints(backward, core, set(seeds) | set(active_params))
    _merge_scalar_sums(backward, core)
    _pass_adjoints_through(backward, core)
    backward[:] = without_prints(backward)  # (a checkpointed loop's forward, run again)
    sweep = Sweep(core, list(active_params), forward, backward, param_bars, seeds,
                  adj.helpers)
    return sweep


def without_prints(stmts):
    """`stmts` without their prints, at any depth: forward code the backward sweep runs again
    (a checkpointed loop's segment, a helper recomputed for its adjoint) must not print what the
    forward sweep printed already."""
    from .unread_arrays import drop_statements
    return drop_statements(stmts, lambda stmt: isinstance(stmt, gast.Expr) and isinstance(
        stmt.value, gast.Call) and isinstance(stmt.value.func, gast.Name) and
        stmt.value.func.id == "print")


def _seed_output(adj, atom, seed, varied, core):
    """Make `seed` (a name or an expression) the adjoint of the output `atom`; a nested tuple
    (``return (a, b), c``, as our own f_fwd functions return) or a tuple-valued name gets
    ``seed[k]`` for its k-th element, so no inner output's cotangent is dropped."""
    if isinstance(atom, gast.Tuple):
        for k, elt in enumerate(atom.elts):
            _seed_output(adj, elt, fill("s[k]", s=seed, k=k), varied, core)
        return
    if not isinstance(atom, gast.Name) or atom.id not in varied:
        return
    t = core.types.get(atom.id, T.UNKNOWN)
    if t.kind == "tuple" and t.elts is not None:
        parts = adj.tuples.setdefault(atom.id, [None] * len(t.elts))
        for k, part in enumerate(parts):
            g = fill("s[k]", s=seed, k=k)
            parts[k] = g if part is None else fill("a + b", a=part, b=g)
        return
    current = adj.get(atom.id)
    if current is not None and t.kind == "list":  # entry by entry, not a concatenation
        adj.add(atom.id, seed, t)
        return
    adj.seed(atom.id, seed if current is None else fill("a + b", a=current, b=seed))


def refuse_dict_output(core, atom):
    """Raise when the output `atom` of `core` is a dict display: it has no derivative (a
    dict is passed back only as has_aux's aux output, which is not differentiated)."""
    if isinstance(atom, gast.Name) and core.types.get(atom.id) == T.DICT:
        raise core.info.error(
            UnsupportedSyntaxError, f"{core.info.name} returns a dict where a differentiated "
            "value is expected: a dict output is supported by jacrev, jacfwd, jvp and vjp "
            "without has_aux, and as has_aux's aux output, not yet as the main output beside "
            "an aux", core.return_node, "return the dict's values as a tuple")


def _element_zero(elt):
    """Template text of a zero adjoint for a list element ``e`` of type `elt` (a tuple of
    numbers and arrays gets a tuple of zeros)."""
    if elt.kind in ("float", "int", "bool"):
        return "0.0"
    if T.flat_tuple(elt):
        parts = ["0.0" if t.kind in ("float", "int", "bool") else f"np.zeros_like(e[{k}])"
                 for k, t in enumerate(elt.elts)]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return "np.zeros_like(e)"


def _sum_adjoints(a, b, typ):
    """``a + b`` of two adjoints of a value of type `typ`; element by element for a tuple
    (the adjoint of a tuple inside a tuple, read twice), where `+` would join them."""
    if typ.kind != "tuple" or typ.elts is None:
        return fill("a + b", a=a, b=b)

    def items(p):
        if isinstance(p, gast.Tuple):
            return p.elts
        return [fill("p[k]", p=p, k=k) for k in range(len(typ.elts))]
    return gast.Tuple(elts=[_sum_adjoints(x, y, e) for x, y, e in
                            zip(items(a), items(b), typ.elts)], ctx=gast.Load())


def _tuple_adjoint(adj, value, snapshot=True):
    """The adjoint of the tuple-valued `value` as a tuple expression (zeros for elements with
    none), or None when no element has one. Elements held in variables (a tuple's adjoint in a
    loop, see Adjoints.tuple_variables) are read into names of their own first: the variables
    are zeroed once the value is overwritten, and the expression may be read after that."""
    parts = adj.tuples.get(value)
    if not parts or all(p is None for p in parts):
        return None
    if snapshot and value in adj.tuple_vars:
        parts = [_snapshot(adj, p) if p is not None else None for p in parts]
    elts = adj.type_of(value).elts or ()
    return gast.Tuple(elts=[to_expr(p) if p is not None else _zero_of(
        fill("t[k]", t=value, k=k), elts[k] if k < len(elts) else T.UNKNOWN)
        for k, p in enumerate(parts)], ctx=gast.Load())


def _refuse_calls_without_rules(core, active):
    """Raise the missing-rule error of the first call with no rule that a derivative must go
    through, before the output is checked: such a call's type is only guessed (the broadcast
    of its arguments), so `grad` of `np.percentile(x, 50)` would otherwise say its output is
    no scalar."""
    for stmt in walk_statements(core.body):
        prim = getattr(stmt, "prim", None)
        if prim is not None and prim.kind == "opaque" and set(_stmt_targets(stmt)) & active:
            raise prim.error


def _refuse_merged_axes(core, active):
    """Refuse a differentiated name that holds values of two shapes, one with a size-one axis
    where the other has a longer one (``t = np.sum(a, axis=0, keepdims=True)`` before a loop
    or branch, ``t = t + x`` in it): its adjoint is typed with the longer axis, so the sum
    over the size-one axis would be skipped and the gradient silently wrong.

    >>> import numpy as np, autodiff_ast as ad
    >>> def f(x):
    ...     t = np.sum(x, keepdims=True)
    ...     for _ in range(2):
    ...         t = t + x
    ...     return np.sum(t)
    >>> try:
    ...     ad.grad(f)(np.ones(3))
    ... except ad.UnsupportedError as e:
    ...     print("refused")
    refused
    """
    merged = getattr(core, "merged_axes", None) or {}
    for value in sorted(set(merged) & active):
        node, user = merged[value]
        raise core.info.error(
            UnsupportedError, f"{user} holds arrays of different shapes here (a size-one axis "
            "in one value, a longer axis in another): reverse mode cannot tell which "
            "adjoint axes to sum", node,
            f"give it its final shape before the loop or branch (np.broadcast_to({user}, "
            "shape).copy()), or use a new name for the value of the other shape")


def _run_forward_where_order_free(backward, seeds=()):
    """Backward loops whose steps do not depend on each other's order run in the primal's
    order (``for j in range(d)`` rather than ``range(d - 1, -1, -1)``: Numba compiles the
    ascending loop better). A step's order does not matter when its body is straight-line
    code without tapes in which every name it assigns is a temporary of the step (set before
    it is read, not read after the loop), a sum (``c_bar = c_bar + e``, ``x_bar[j] += e``)
    nobody else in the body reads, or a per-step adjoint the step resets to 0.0 and nothing
    outside the loop changes; and every array it writes otherwise is touched at ``[j]`` only."""
    events = _control_events(backward)
    for stmt in walk_statements(backward):
        if not (isinstance(stmt, gast.For) and getattr(stmt, "reversed_range", False)):
            continue
        args = stmt.iter.args
        if len(args) != 3:
            continue
        stop, start = (_plus_one(a) for a in args[:2])
        if stop is not None and start is not None and _order_free(stmt, events, seeds):
            stmt.iter = fill("range(b)", b=stop) if _is_const(start, 0) else \
                fill("range(a, b)", a=start, b=stop)


def _plus_one(expr):
    """`expr + 1` for the bounds of a reversed range (``n - 1`` -> ``n``, ``-1`` -> ``0``)."""
    if isinstance(expr, gast.BinOp) and isinstance(expr.op, gast.Sub) and _is_const(expr.right, 1):
        return expr.left
    if isinstance(expr, gast.UnaryOp) and isinstance(expr.op, gast.USub) and \
            isinstance(expr.operand, gast.Constant) and type(expr.operand.value) is int:
        return to_expr(1 - expr.operand.value)
    if isinstance(expr, gast.Constant) and type(expr.value) is int:
        return to_expr(expr.value + 1)
    return None


def _order_free(loop, events, seeds=()):
    index = loop.target.id
    body = loop.body
    if any(not isinstance(s, (gast.Assign, gast.AugAssign)) for s in body):
        return False
    for s in body:
        for n in gast.walk(s):
            if isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and \
                    n.func.attr in ("pop", "append"):
                return False
    inside = {id(s) for s in body}
    outside_reads, outside_writes = set(), {}
    for node, reads, _controls in events:
        if id(node) in inside or node is loop:
            continue
        outside_reads |= reads
        if isinstance(node, gast.Assign):
            for t in node.targets:
                for n in gast.walk(t):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        outside_writes.setdefault(n.id, []).append(node.value)
        elif isinstance(node, gast.AugAssign) and isinstance(node.target, gast.Name):
            outside_writes.setdefault(node.target.id, []).append(node.value)
    if index in outside_reads and not _index_rebound(events, loop, index):
        return False

    def target_name(s):
        target = s.target if isinstance(s, gast.AugAssign) else s.targets[0]
        return target

    names = {}
    for k, s in enumerate(body):
        target = target_name(s)
        if isinstance(target, gast.Name):
            names.setdefault(target.id, []).append(k)
        elif isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name):
            names.setdefault(target.value.id, []).append(k)
        else:
            return False
    if index in names:
        return False
    in_stmt = [_all_names(s) for s in body]
    for x in names:
        touching = [k for k, found in enumerate(in_stmt) if x in found]
        if not (_step_temporary(body, x, touching, outside_reads) or
                _sum_only(body, x, touching) or
                (x not in seeds and _reset_each_step(body, x, touching, outside_writes)) or
                _passed_through(body, x, touching) or
                _own_element(body, x, touching, index)):
            return False
    return True


def _index_rebound(events, loop, index):
    """Whether every read of `index` outside `loop` is inside another loop binding it."""
    for node, reads, controls in events:
        if index not in reads or node is loop:
            continue
        if not any(isinstance(c, gast.For) and c.target.id == index
                   for c in _enclosing(events, controls)):
            return False
    return True


def _enclosing(events, controls):
    ids = {c[0] for c in controls}
    return [node for node, _, _ in events if id(node) in ids]


def _all_names(stmt):
    return {n.id for n in gast.walk(stmt) if isinstance(n, gast.Name)}


def _step_temporary(body, x, touching, outside_reads):
    first = body[touching[0]]
    return x not in outside_reads and isinstance(first, gast.Assign) and \
        isinstance(first.targets[0], gast.Name) and x not in _all_names(first.value)


def _sum_only(body, x, touching):
    """Every statement touching x adds to it: ``x = x + e``, ``x = x - e``, ``x[...] += e``."""
    for k in touching:
        s = body[k]
        if isinstance(s, gast.AugAssign) and isinstance(s.op, gast.Add):
            base = s.target.value if isinstance(s.target, gast.Subscript) else s.target
            if isinstance(base, gast.Name) and base.id == x and x not in _all_names(s.value) \
                    and (not isinstance(s.target, gast.Subscript) or
                         x not in _all_names(s.target.slice)):
                continue
            return False
        if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name) and \
                s.targets[0].id == x and isinstance(s.value, gast.BinOp) and \
                isinstance(s.value.op, (gast.Add, gast.Sub)) and \
                isinstance(s.value.left, gast.Name) and s.value.left.id == x and \
                x not in _all_names(s.value.right):
            continue
        return False
    return True


def _reset_each_step(body, x, touching, outside_writes):
    """x is 0.0 when each step starts: the step ends by setting it to 0.0, and outside the
    loop it is only ever set to 0.0."""
    last = body[touching[-1]]
    if not (isinstance(last, gast.Assign) and isinstance(last.targets[0], gast.Name) and
            last.targets[0].id == x and _is_const(last.value, 0.0)):
        return False
    return bool(outside_writes.get(x)) and all(_is_const(v, 0.0) for v in outside_writes[x])


def _passed_through(body, x, touching):
    """The step gives x back unchanged: ``t = x`` ... ``x = 0.0`` then ``x = x + t`` (the
    adjoint of an accumulation ``s = s + e``), x only read otherwise."""
    writes = [k for k in touching if isinstance(body[k], gast.AugAssign) or any(
        isinstance(n, gast.Name) and n.id == x and isinstance(n.ctx, gast.Store)
        for t in body[k].targets for n in gast.walk(t))]
    if len(writes) != 2 or writes[1] != writes[0] + 1:
        return False
    zero, add = body[writes[0]], body[writes[1]]
    if not (isinstance(zero, gast.Assign) and isinstance(zero.targets[0], gast.Name) and
            _is_const(zero.value, 0.0) and isinstance(add, gast.Assign) and
            isinstance(add.targets[0], gast.Name) and isinstance(add.value, gast.BinOp) and
            isinstance(add.value.op, gast.Add) and isinstance(add.value.left, gast.Name) and
            add.value.left.id == x and isinstance(add.value.right, gast.Name)):
        return False
    t = add.value.right.id
    copies = [k for k, s in enumerate(body) if t in _all_names(s) and isinstance(s, gast.Assign)
              and any(isinstance(n, gast.Name) and n.id == t and isinstance(n.ctx, gast.Store)
                      for n in gast.walk(s.targets[0]))]
    return len(copies) == 1 and copies[0] < writes[0] and \
        isinstance(body[copies[0]].value, gast.Name) and body[copies[0]].value.id == x


def _own_element(body, x, touching, index):
    """Every access to the array x in the body is ``x[index]``: each step has its own."""
    for k in touching:
        subs = [n for n in gast.walk(body[k]) if isinstance(n, gast.Subscript) and
                isinstance(n.value, gast.Name) and n.value.id == x]
        bare = sum(1 for n in gast.walk(body[k]) if isinstance(n, gast.Name) and n.id == x)
        if bare != len(subs) or not all(isinstance(n.slice, gast.Name) and
                                        n.slice.id == index for n in subs):
            return False
    return True


def _not_surely_new(backward, updated, in_place):
    """Names of `updated` that some ``x_bar += c`` of `in_place` may find holding an array
    that is not its own: in the order of the top-level statements, the last assignment
    before it must be a new array (``np.zeros_like``, arithmetic, a copy), and inside loops
    and branches every assignment must be."""
    ids = {id(s) for s in in_place}
    fresh = dict.fromkeys(updated, False)
    out = set()

    def bound(stmt):
        """(name, whether the value is a new array) for each name `stmt` assigns."""
        if not isinstance(stmt, gast.Assign):
            return []
        pairs = []
        for target in stmt.targets:
            if isinstance(target, gast.Name):
                pairs.append((target.id, _allocates(stmt.value)))
            elif isinstance(target, gast.Tuple):
                pairs += [(e.id, False) for e in target.elts if isinstance(e, gast.Name)]
        return pairs

    for stmt in backward:
        inner = list(walk_statements([stmt])) if isinstance(stmt, CONTROL) else [stmt]
        for s in inner:
            if id(s) in ids and not fresh[s.target.id]:
                out.add(s.target.id)
            for n, new in bound(s):
                if n in fresh and not new and isinstance(stmt, CONTROL):
                    out.add(n)
        if not isinstance(stmt, CONTROL):
            for n, new in bound(stmt):
                if n in fresh:
                    fresh[n] = new
    return out


def _undo_aliased_in_place(backward, in_place, seeds=()):
    """``x_bar += c`` goes back to ``x_bar = x_bar + c`` where another name may share x_bar's
    array there: x_bar handed on as it is (``y_bar = x_bar``, appended to a list, put in a
    tuple) inside a loop or branch, or before that update; x_bar a parameter (a seed) or
    ever assigned something other than a new array."""
    if not in_place:
        return
    events = []

    def scan(stmts, depth):
        for stmt in stmts:
            if isinstance(stmt, CONTROL):
                events.append((stmt, depth))
                scan(stmt.body, depth + 1)
                scan(stmt.orelse, depth + 1)
            else:
                events.append((stmt, depth))
    scan(backward, 0)
    position = {id(s): k for k, (s, _) in enumerate(events)}
    updated = {s.target.id for s in in_place}
    last = {}
    for s in in_place:
        last[s.target.id] = max(last.get(s.target.id, -1), position.get(id(s), -1))
    escaping = updated & set(seeds) | _not_surely_new(backward, updated, in_place)
    for k, (stmt, depth) in enumerate(events):
        if isinstance(stmt, CONTROL):
            continue
        for sub in gast.walk(stmt):
            handed = []
            if isinstance(sub, gast.Assign) and isinstance(sub.value, gast.Name):
                handed.append(sub.value.id)
            elif isinstance(sub, (gast.Tuple, gast.List)):
                handed += [e.id for e in sub.elts if isinstance(e, gast.Name) and
                           isinstance(e.ctx, gast.Load)]
            elif isinstance(sub, gast.Call):
                handed += [a.id for a in sub.args if isinstance(a, gast.Name)] if isinstance(
                    sub.func, gast.Attribute) and sub.func.attr in ("append", "extend") else []
            for n in handed:
                if n in updated and (depth > 0 or k < last[n]):
                    escaping.add(n)
    if not escaping:
        return
    undo = {id(s) for s in in_place if s.target.id in escaping}

    def rewrite(stmts):
        for i, stmt in enumerate(stmts):
            if id(stmt) in undo:
                stmts[i] = assign(stmt.target.id, fill("a + c", a=stmt.target.id, c=stmt.value))
                if hasattr(stmt, "same_shape_as"):  # (see _mark_same_shape)
                    stmts[i].same_shape_as = stmt.same_shape_as
            elif isinstance(stmt, CONTROL):
                rewrite(stmt.body)
                rewrite(stmt.orelse)
    rewrite(backward)


def _mentions(stmt, x):
    return any(isinstance(n, gast.Name) and n.id == x for n in gast.walk(stmt))


def _handed_on(stmt, x):
    """Whether `stmt` lets another name hold x's array (``y = x``, a tuple, an append)."""
    for sub in gast.walk(stmt):
        if isinstance(sub, gast.Assign) and isinstance(sub.value, gast.Name) and \
                sub.value.id == x:
            return True
        if isinstance(sub, (gast.Tuple, gast.List, gast.Return)) and _mentions(sub, x) and \
                any(isinstance(e, gast.Name) and e.id == x for e in getattr(sub, "elts", [
                    getattr(sub, "value", None)])):
            return True
        if isinstance(sub, gast.Call) and isinstance(sub.func, gast.Attribute) and \
                any(isinstance(a, gast.Name) and a.id == x for a in sub.args):
            return True
    return False


def _shares(stmt, x):
    """Whether `stmt` may leave another name holding (part of) x's array: handed on, or an
    assignment reading x that is not a new array (``w = x[1:]``)."""
    return _handed_on(stmt, x) or any(
        isinstance(sub, gast.Assign) and _mentions(sub.value, x) and not _allocates(sub.value)
        for sub in gast.walk(stmt))


def _zeros_of(stmt, x):
    """The argument name of ``x = np.zeros_like(a)``, else None."""
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == x and \
            isinstance(stmt.value, gast.Call) and unparse(stmt.value.func) == "np.zeros_like" \
            and len(stmt.value.args) == 1 and isinstance(stmt.value.args[0], gast.Name):
        return stmt.value.args[0].id
    return None


def _pass_adjoints_through(backward, core):
    """``x_bar = np.zeros_like(a)`` directly followed by ``x_bar = x_bar + y_bar`` becomes
    ``x_bar = y_bar`` when a and y_bar's value have one array type: zeros plus y_bar is
    y_bar, without a new array and two passes over it. That is the adjoint of an
    accumulation ``out = out + t`` in a loop, whose adjoint passes through each step. The
    two names then share one array: only when nothing in the backward sweep changes
    either in place."""
    primal = {bar: v for (v, suffix), bar in core.namer._derived.items() if suffix == "bar"}
    changed_in_place = set()
    for stmt in walk_statements(backward):
        if isinstance(stmt, CONTROL):
            continue
        for sub in gast.walk(stmt):
            target = sub.target if isinstance(sub, gast.AugAssign) else None
            if isinstance(sub, gast.Assign):
                target = next((t for t in sub.targets if isinstance(t, gast.Subscript)), None)
            while isinstance(target, gast.Subscript):
                target = target.value
            if isinstance(target, gast.Name):
                changed_in_place.add(target.id)
            if isinstance(sub, gast.Call) and sub.args and isinstance(sub.args[0], gast.Name) \
                    and not (isinstance(sub.func, gast.Attribute) and
                             sub.func.attr in ("append", "pop")):
                changed_in_place.add(sub.args[0].id)  # (a helper may write into it)

    group = {}  # names one plain ``a = b`` makes share an array: one group

    def find(n):
        while group.get(n, n) != n:
            n = group[n]
        return n
    for stmt in walk_statements(backward):
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Name):
            group[find(stmt.targets[0].id)] = find(stmt.value.id)
    changed_in_place = {find(n) for n in changed_in_place}

    def array_type(n):
        t = core.types.get(n)
        return t if t is not None and t.kind == "array" and t.dims is not None else None

    def rewrite(stmts):
        for stmt in stmts:
            if isinstance(stmt, CONTROL):
                rewrite(stmt.body)
                rewrite(stmt.orelse)
        for k in range(len(stmts) - 1):
            first, second = stmts[k], stmts[k + 1]
            x = _zeros_of(first, getattr(first.targets[0], "id", None)) if isinstance(
                first, gast.Assign) and len(first.targets) == 1 else None
            if x is None:
                continue
            bar = first.targets[0].id
            value = getattr(second, "value", None)
            if not (isinstance(second, gast.Assign) and len(second.targets) == 1 and
                    isinstance(second.targets[0], gast.Name) and second.targets[0].id == bar
                    and isinstance(value, gast.BinOp) and isinstance(value.op, gast.Add) and
                    isinstance(value.left, gast.Name) and value.left.id == bar and
                    isinstance(value.right, gast.Name) and value.right.id != bar):
                continue
            y = value.right.id
            tx, ty = array_type(x), array_type(primal.get(y, y))
            if tx is None or tx != ty or {find(bar), find(y)} & changed_in_place:
                continue
            second.value = name(y)
            stmts[k] = None
        if None in stmts:
            stmts[:] = [s for s in stmts if s is not None] or [gast.Pass()]
    rewrite(backward)


def _merge_scalar_sums(backward, core):
    """Sums into the same number in one block of the backward sweep become one update
    (``u_bar[i] += a`` ... ``u_bar[i] += b``: see tidy.merge_updates); sums of arrays stay
    apart (merged, they would make a new array)."""
    from .tidy import merge_updates
    primal = {bar: v for (v, suffix), bar in core.namer._derived.items() if suffix == "bar"}

    def scalar(x, index):
        t = core.types.get(primal.get(x, x))
        if t is None:
            return False
        if index is None:
            return t.kind == "float"
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        return t.kind == "array" and t.dims is not None and len(parts) == len(t.dims)
    merge_updates(backward, scalar)


def _rebind_dead_adjoints(backward, core, unshareable=()):
    """``x_bar += y_bar`` in a loop step where x_bar holds zeros (``np.zeros_like`` before the
    loop and as its last write in the step) and y_bar is dead afterwards (set to a new array
    before it is read again) becomes ``x_bar = y_bar``: the array moves instead of being added
    into zeros. That is the adjoint of ``y = x`` in a loop (``u = un``); the zeroing at the end
    of the step is then a dead store, which tidy drops. y_bar's array must be its own: a new
    array each time it is set, never handed on, not a seed."""
    primal = {bar: v for (v, suffix), bar in core.namer._derived.items() if suffix == "bar"}

    def float_array(n, of_primal=False):
        t = core.types.get(n if of_primal else primal.get(n)) if of_primal or n in primal \
            else None
        return t if t is not None and t.kind == "array" and t.dims is not None and \
            (t.dtype or "float64") == "float64" else None

    def own_array(stmts, j, loop, y):
        if y in unshareable:
            return False
        before = [k for k in range(j) if _mentions(stmts[k], y)]
        sets = [k for k in before if isinstance(stmts[k], gast.Assign) and
                any(isinstance(t, gast.Name) and t.id == y for t in stmts[k].targets)]
        if not sets or not _allocates(stmts[sets[-1]].value) or \
                any(_shares(stmts[k], y) for k in before if k > sets[-1]):
            return False
        for s in walk_statements([loop]):
            if isinstance(s, CONTROL):
                continue
            if _shares(s, y):
                return False
            for sub in gast.walk(s):
                if isinstance(sub, gast.Assign) and any(
                        isinstance(n, gast.Name) and n.id == y
                        for t in sub.targets for n in gast.walk(t)) and not (
                        len(sub.targets) == 1 and isinstance(sub.targets[0], gast.Name) and
                        _allocates(sub.value)):
                    return False
        return True

    def rewrite(stmts):
        for j, loop in enumerate(stmts):
            if not isinstance(loop, CONTROL):
                continue
            rewrite(loop.body)
            rewrite(loop.orelse)
            if not isinstance(loop, gast.For) or loop.orelse or any(
                    isinstance(n, (gast.Break, gast.Continue)) for n in gast.walk(loop)):
                continue
            body = loop.body
            for k, s in enumerate(body):
                if not (isinstance(s, gast.AugAssign) and isinstance(s.op, gast.Add) and
                        isinstance(s.target, gast.Name) and isinstance(s.value, gast.Name)):
                    continue
                x, y = s.target.id, s.value.id
                tx = float_array(x)
                if x == y or tx is None or tx != float_array(y) or \
                        any(_mentions(b, x) for b in body[:k]):
                    continue
                last = [m for m in range(len(body)) if _mentions(body[m], x)][-1]
                first = [m for m in range(j) if _mentions(stmts[m], x)]
                zeros = [_zeros_of(body[last], x), _zeros_of(stmts[first[-1]], x) if first
                         else None]
                if last <= k or any(z is None or float_array(z, True) != tx for z in zeros):
                    continue
                later = [m for m in range(k + 1, len(body)) if _mentions(body[m], y)]
                if not later:
                    continue
                r = body[later[0]]
                if not (isinstance(r, gast.Assign) and len(r.targets) == 1 and
                        isinstance(r.targets[0], gast.Name) and r.targets[0].id == y and
                        _allocates(r.value) and not _mentions(r.value, y)):
                    continue
                if not own_array(stmts, j, loop, y):
                    continue
                body[k] = assign(x, name(y))
    rewrite(backward)


class _Builder:
    """Walks a core function backwards, writing the backward sweep into ``adj.out``, then
    writes the forward sweep with the values the backward sweep needs saved on tapes.

    Straight-line code at the top level is in SSA form (each value has its own name), so
    nothing is saved there. Inside loops and branches names are overwritten: an overwritten
    value the backward sweep reads is pushed on a per-variable tape (a list) just before it
    is lost, and popped back right after the adjoint of the statement that overwrote it, so
    the backward sweep always sees the values as they were (Tapenade's PUSH/POP).
    """

    def __init__(self, core, adj, active, registry):
        self.core = core
        self.adj = adj
        self.active = active
        self.registry = registry
        self.replacements = {}  # id(core stmt) -> forward statement replacing it
        self.saves = {}  # id(core stmt) -> tape name (the statement's target is saved)
        self.pops = []  # (marker statement, name) to resolve once reads are known
        self.row_bindings = {}  # id(x = np.empty(k)) -> (tape, plan): the tape's rows
        self.depth = 0
        self.checkpoint_plans = {}  # id(checkpointed loop) -> how it is saved and recomputed
        self.defined_before = _defined_before(core)
        self.first_bindings = _first_bindings(core)
        self.top = None  # the top-level statement the backward sweep is in
        self.placeholder_resets = []  # (restore, `t_bar = np.zeros_like(t)` right after it)
        self._body_reads = None  # see body_reads
        self._indexed_lists = None  # see indexed_lists
        self.loops = 0  # enclosing loops: residuals of helper calls there go on tapes
        self.unsaved = set()  # (id(core stmt), name): that save's restore was dropped
        self.stacks = []  # the loop stacks of numbers saved per step (see _stack_plan)
        self.stacks_reserved = set()  # their arrays an outer loop reserves ahead for
        self.stacked = {}  # id(statement) -> its loop, where it has a stack (_stacked_steps)

    def body_reads(self):
        """How many times the primal function reads each name (counted once: the core
        program does not change while it is reversed)."""
        if self._body_reads is None:
            self._body_reads = _read_counts(self.core.body)
        return self._body_reads

    def indexed_lists(self):
        """Lists the primal function reads an element of (``xs[k]``, ``for v in xs``): their
        adjoints gain entries by index, so a list made anew in a loop step needs a new
        adjoint of zeros when the step before gets its list back."""
        if self._indexed_lists is None:
            self._indexed_lists = {
                s.prim.call.args["x"].id for s in walk_statements(self.core.body)
                if not isinstance(s, CONTROL) and s.prim.kind == "rule" and
                s.prim.rule.name == "getitem" and
                isinstance(s.prim.call.args.get("x"), gast.Name)}
        return self._indexed_lists

    # -- backward sweep
    def backward_block(self, stmts):
        locals_ = _local_temps(stmts, self.core.namer.temps, self.body_reads()) \
            if self.depth else set()
        for stmt in reversed(stmts):
            if not self.depth:
                self.top = stmt  # the top-level statement being reversed
            if isinstance(stmt, gast.If):
                self.backward_if(stmt)
            elif isinstance(stmt, gast.For):
                self.backward_for(stmt)
            elif isinstance(stmt, gast.While):
                self.backward_while(stmt)
            else:
                self.backward_simple(stmt, locals_)

    def backward_simple(self, stmt, locals_):
        adj, core = self.adj, self.core
        targets = _stmt_targets(stmt)
        kind = stmt.prim.kind
        # (a while loop's step counter is read by its backward loop, so inside another loop
        # the count each run left is saved when the counter is reset to 0; its increments
        # need no saving)
        overwrites = (self.depth > 0 and (kind not in ("counter", "append") or (
            kind == "counter" and isinstance(stmt.value, gast.Constant)))) or \
            kind in ("setitem", "add_at")
        marker = len(adj.out)
        # (a pop from a differentiated list gives its adjoint an entry back even when the
        # popped value has no derivative: the entries stay in their elements' places)
        if any(t in self.active for t in targets) or (kind == "pop" and
                                                     stmt.prim.base in self.active):
            replacement = _reverse_stmt(stmt, adj, self.active, core, self.registry,
                                        in_loop=self.loops > 0)
            if replacement is not None:
                self.replacements[id(stmt)] = replacement
            zero = [t for t in targets if self.depth > 0 and kind not in (
                "setitem", "append", "add_at") and t in adj.accumulate and t not in locals_
                and (id(stmt), t) not in self.first_bindings]
        else:
            zero = []
        if kind == "append":
            adj.out.append(gast.Expr(value=fill("b.pop()", b=stmt.prim.base)))
        if kind == "pop":  # put the value back on the list it came from
            adj.out.append(gast.Expr(value=fill("b.append(v)", b=stmt.prim.base,
                                                v=targets[0])))
        restores = {}
        if overwrites and targets:
            for t in targets:
                # A list made anew in a loop step (`row = []`) or popped from a list of
                # lists (`row = rows.pop()`) gets the list of the step before back (its
                # elements are popped in that step's backward code); other list values are
                # passed on whole, never overwritten in place.
                if (core.types.get(t, T.UNKNOWN).kind == "list" and
                        kind not in ("list_new", "pop")) or (id(stmt), t) in self.first_bindings:
                    continue
                restore = self.restore_stmt(stmt, t)
                if restore is not None:
                    restores[t] = restore
                    adj.out.append(restore)
                    self.pops.append((restore, t))
                    restore.saved_by = (id(stmt), t)
        if kind in ("list_new", "pop") and self.depth > 0:
            for t in targets:
                if t in restores and adj.get(t) is not None and t not in adj.array_lists and \
                        core.types.get(t, T.UNKNOWN).kind == "list" and \
                        t in self.indexed_lists():
                    # `xs = []` (or `xs = lists.pop()`) in a loop step: the list of the step
                    # before is back; its adjoint is a new list (the old one may be on a
                    # tape), one zero per element (its reads come before this statement)
                    adj.init_list_zeros(t)
        for t in zero:
            # The value t had before this statement gets its own adjoint, of its own shape
            # (so after t is restored).
            adj.init_zero(t)
            if self.loops and t in restores and core.types.get(t, T.UNKNOWN).kind == \
                    "array" and t not in self.defined_before.get(id(self.top), (t,)):
                # t is first bound in this loop: the restore may pop the forward sweep's
                # zero-size placeholder (see forward_sweep)
                self.placeholder_resets.append((restores[t], adj.out[-1]))
        for s in adj.out[marker:]:
            s.origin = stmt.origin

    def restore_stmt(self, stmt, target):
        """`x = x_tape.pop()` (or the overwritten elements, for an in-place write)."""
        if stmt.prim.kind in ("setitem", "add_at"):
            tape = self.core.namer.derived(target, "slice_tape")
            self.saves[id(stmt)] = (tape, target, stmt.prim.rule)
            store = gast.Subscript(value=name(target), slice=to_expr(stmt.prim.rule),
                                   ctx=gast.Store())
            return gast.Assign(targets=[store], value=fill("t.pop()", t=tape), type_comment=None)
        if isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Tuple):
            tape = self.core.namer.derived(target, "tape")
        else:
            tape = self.core.namer.derived(target, "tape")
        self.saves.setdefault(id(stmt), [])
        if isinstance(self.saves[id(stmt)], list):
            self.saves[id(stmt)].append((tape, target))
        return assign(target, fill("t.pop()", t=tape))

    def _control_values(self, stmt):
        """Active names a loop or branch reads or writes, but not its body's local temporaries."""
        names, written = set(), set()
        for inner in walk_statements([stmt]):
            if isinstance(inner, CONTROL):
                continue
            for t in _stmt_targets(inner):
                names.add(t)
                if inner.prim.kind in ("setitem", "add_at"):
                    written.add(t)
            if inner.prim.kind == "pop":
                names.add(inner.prim.base)
            names.update(_atoms_read(inner.prim))
            if inner.prim.kind == "rule" and inner.prim.rule.name == "getitem":
                written.update(a.id for a in inner.prim.args if isinstance(a, gast.Name))
        local = set()
        for block in _blocks(stmt):
            local |= _local_temps(block, self.core.namer.temps, self.body_reads())
        return sorted(n for n in names - local if n in self.active), written

    def enter_control(self, stmt):
        values, written = self._control_values(stmt)
        self.adj.prepare_accumulation(values, written)

    def nested(self, stmts, loop=False):
        """The backward code of a loop body or branch arm. An adjoint owns its array after
        the block only if it did before too: a loop may run zero times and an arm may not
        run, so ``x_bar = x_bar + c`` in the block does not make ``x_bar = out_bar`` before it
        safe to write in place."""
        saved = self.adj.out
        owned_before = set(self.adj.owned)
        self.adj.out = []
        self.depth += 1
        self.loops += loop
        try:
            self.backward_block(stmts)
        finally:
            self.depth -= 1
            self.loops -= loop
            out, self.adj.out = self.adj.out, saved
        self.adj.owned &= owned_before
        return out

    def backward_if(self, stmt):
        if not self._touches_active(stmt) and not (self.loops and self._rebinds(stmt)):
            # (inside a loop a branch with nothing active still gets its restores: a name it
            # rebinds, such as an index, may be read by the backward code of an earlier step;
            # restores nobody reads are dropped with the rest by the forward sweep)
            return
        self.enter_control(stmt)
        body = self.nested(stmt.body)
        orelse = self.nested(stmt.orelse)
        if not body and not orelse:
            return
        if not body:
            node = gast.If(test=fill("not c", c=stmt.test), body=orelse, orelse=[])
        else:
            node = gast.If(test=to_expr(stmt.test), body=body, orelse=orelse)
        node.origin = stmt.origin
        self.adj.out.append(node)

    def backward_for(self, stmt):
        if not self._touches_active(stmt):
            return
        self.enter_control(stmt)
        body = self.nested(stmt.body, loop=True)
        if not body:
            return
        if getattr(stmt, "checkpointed", False):
            self.backward_checkpointed(stmt, body)
            return
        index = stmt.target.id
        args = stmt.iter.args
        if len(args) == 1:
            start, stop, step = 0, args[0], 1
        else:
            start, stop = args[0], args[1]
            step = args[2] if len(args) > 2 else 1
        step_value = step if isinstance(step, int) else (
            step.value if isinstance(step, gast.Constant) else None)
        if step_value in (1, -1):
            header = fill("range(b - 1, a - 1, -1)" if step_value == 1 else "range(b + 1, a + 1)",
                          a=start, b=stop)
            node = gast.For(target=name(index, store=True), iter=header, body=body, orelse=[],
                            type_comment=None)
            node.reversed_range = step_value == 1  # (see _run_forward_where_order_free)
        else:
            trips = fill("len(range(a, b, s))", a=start, b=stop, s=step)
            k = self.core.namer.temp(f"{index}_k")
            first = assign(index, fill("a + k * s", a=start, k=k, s=step))
            node = gast.For(target=name(k, store=True),
                            iter=fill("range(n - 1, -1, -1)", n=trips),
                            body=[first] + body, orelse=[], type_comment=None)
            node.header_lines = 1
        node.origin = stmt.origin
        node.primal_loop = stmt  # (its loop-local values may be recomputed in its body)
        self.adj.out.append(node)

    def backward_checkpointed(self, stmt, body):
        """A `for t in checkpoint(range(...))` loop: the forward sweep keeps the loop's state
        every `stride` steps only; here each segment is recomputed (with its tapes) from its
        saved state and then walked backwards, so tapes hold one segment at a time."""
        namer = self.core.namer
        index = stmt.target.id
        args = stmt.iter.args
        start, stop = (0, args[0]) if len(args) == 1 else (args[0], args[1])
        state = self.loop_state(stmt)
        plan = {"state": state, "stride": namer.temp("stride"), "count": namer.temp("n_segments"),
                "saves": {v: namer.derived(v, "checkpoints") for v in state},
                "counter": namer.temp("steps_done"), "recompute": []}
        self.checkpoint_plans[id(stmt)] = plan
        segment = namer.temp("segment")
        seg_start = namer.temp("segment_start")
        seg_stop = namer.temp("segment_stop")
        inner = [comment_line("last segment first: back to its saved state, recompute its "
                              "steps keeping their tapes, then walk them backwards")]
        for v in state:
            inner.append(assign(v, fill("t.pop()", t=plan["saves"][v])))
        inner.append(assign(seg_start, fill("a + k * s", a=start, k=segment, s=plan["stride"])))
        inner.append(assign(seg_stop, fill("min(a + s, b)", a=seg_start, s=plan["stride"],
                                           b=stop)))
        recompute = gast.For(target=name(index, store=True),
                             iter=fill("range(a, b)", a=seg_start, b=seg_stop),
                             body=plan["recompute"], orelse=[], type_comment=None)
        recompute.filled_later = True  # by the forward sweep, once tapes are known
        reverse_loop = gast.For(target=name(index, store=True),
                                iter=fill("range(b - 1, a - 1, -1)", a=seg_start, b=seg_stop),
                                body=body, orelse=[], type_comment=None)
        inner += [recompute, reverse_loop]
        node = gast.For(target=name(segment, store=True),
                        iter=fill("range(n - 1, -1, -1)", n=plan["count"]), body=inner,
                        orelse=[], type_comment=None)
        node.origin = stmt.origin
        self.adj.out.append(node)

    def loop_state(self, stmt):
        """Names a loop carries from one step to the next: restored at each segment start."""
        assigned, read_first = [], set()
        seen = set()
        for inner in walk_statements(stmt.body):
            if isinstance(inner, CONTROL):
                continue
            for n in _atoms_read(inner.prim):
                if n not in seen:
                    read_first.add(n)
            for t in _stmt_targets(inner):
                seen.add(t)
                if t not in assigned:
                    assigned.append(t)
        defined_before = set(self.core.params) | self.defined_before.get(id(stmt), set())
        def saved(t):  # (lists are not saved; tuples of numbers and arrays are)
            typ = self.core.types.get(t, T.UNKNOWN)
            return typ.kind not in ("list", "tuple") or T.flat_tuple(typ)
        return [t for t in assigned if (t in defined_before or t in read_first) and saved(t)]

    def _checkpointed_forward(self, stmt, plan, needed, tapes, depth, defined):
        """Forward sweep of a checkpointed loop: no tapes, the state saved every `stride`
        steps; the same body with its tapes goes into the backward sweep's recomputation."""
        args = stmt.iter.args
        start, stop = (0, args[0]) if len(args) == 1 else (args[0], args[1])
        trips = fill("max(b - a, 0)", a=start, b=stop)
        stride, count, counter = plan["stride"], plan["count"], plan["counter"]
        out = [comment_line(f"checkpointed loop: its state is saved every {stride} steps "
                            "(about the square root of the step count) instead of every step"),
               assign(stride, fill("int(np.sqrt(t)) + 1", t=trips)),
               assign(count, fill("(t + s - 1) // s", t=trips, s=stride)),
               assign(counter, 0)]
        saves = []
        for v in plan["state"]:
            out.append(assign(plan["saves"][v], gast.List(elts=[], ctx=gast.Load())))
            value = fill("v.copy()", v=v) if self.core.types.get(v, T.UNKNOWN).kind == \
                "array" else name(v)
            saves.append(gast.Expr(value=fill("t.append(v)", t=plan["saves"][v], v=value)))
        guard = gast.If(test=fill("c % s == 0", c=counter, s=stride), body=saves or
                        [gast.Pass()], orelse=[])
        bump = assign(counter, fill("c + 1", c=counter))
        loop = _shallow_copy(stmt)
        loop.body = [guard, bump] + self._forward_block(stmt.body, needed, tapes, depth + 1,
                                                        defined, record=False)
        out.append(loop)
        plan["recompute"][:] = self._forward_block(stmt.body, needed, tapes, depth + 1,
                                                   set(defined), record=True)
        defined |= {t for inner in walk_statements([stmt]) if not isinstance(inner, CONTROL)
                    for t in _stmt_targets(inner)}
        return out

    def backward_while(self, stmt):
        if not self._touches_active(stmt):
            return
        self.enter_control(stmt)
        body = self.nested(stmt.body, loop=True)
        if not body:
            return
        counter = stmt.prim.args[0].id
        node = gast.For(target=name(self.core.namer.temp("_"), store=True),
                        iter=fill("range(n)", n=counter), body=body, orelse=[],
                        type_comment=None)
        node.origin = stmt.origin
        self.adj.out.append(node)

    def _rebinds(self, stmt):
        """Whether a block binds a name other than a list (whose value a restore brings back)."""
        return any(self.core.types.get(t, T.UNKNOWN).kind != "list"
                   for inner in walk_statements([stmt]) if not isinstance(inner, CONTROL)
                   and inner.prim.kind not in ("setitem", "add_at", "append", "counter")
                   for t in _stmt_targets(inner))

    def _touches_active(self, stmt):
        """Whether the block's backward sweep has work: an active target, or a pop from (or
        append to) a list the caller handed in, which the backward sweep must undo even when
        nothing is active (the caller's own backward sweep reads that list again)."""
        params = set(self.core.params)
        return any(t in self.active or (inner.prim.kind in ("pop", "append") and
                                        inner.prim.base in params)
                   for inner in walk_statements([stmt])
                   if not isinstance(inner, CONTROL) for t in _stmt_targets(inner))

    # -- forward sweep
    def forward_sweep(self):
        """The primal code, with helper calls replaced and needed values pushed on tapes."""
        slotted = _slotted_steps(self.core.body)
        self.stacked = _stacked_steps(self.core.body, slotted,
                                      getattr(self.core, "for_compiled_code", False))
        recomputed, self.recomputable = _recompute_index_arithmetic(
            self.core, self.adj.out, slotted, self.stacked)
        # A value put back whole is needed by later reads of its shape too when that shape may
        # change from step to step; elements put back after an in-place write only by reads
        # of the values.
        shapes_vary = frozenset(varying_shapes(self.core))
        reads = {}
        for counted in {frozenset(), shapes_vary}:  # (once when nothing varies)
            events = []
            _linearize(self.adj.out, (), events, counted)
            reads[counted] = events, _control_events(self.adj.out, shapes_vary=counted)
        # (both readings hold the same statements in the same order)
        position = {id(e[1]): k for k, e in enumerate(reads[shapes_vary][0]) if e[0] == "stmt"}
        step_of = {id(e[0]): k for k, e in enumerate(reads[shapes_vary][1])}
        needed, dead = set(), set()
        for restore, target in self.pops:
            if target in recomputed:  # computed again in the backward step instead
                dead.add(id(restore))
                self.unsaved.add(getattr(restore, "saved_by", None))
                continue
            whole = isinstance(restore, gast.Assign) and isinstance(restore.targets[0], gast.Name)
            events, steps = reads[shapes_vary if whole else frozenset()]
            k = position.get(id(restore))
            loops = events[k][3] if k is not None else ()
            read_later = any(target in e[2] and (j > k or set(e[3]) & set(loops))
                             for j, e in enumerate(events)) if k is not None else True
            if read_later and _overwritten_unread(steps, step_of.get(id(restore)), target):
                # e.g. the partial sums of an accumulation loop: only the last is read
                read_later = False
                self.unsaved.add(getattr(restore, "saved_by", None))
            if read_later:
                needed.add(target)
            else:
                dead.add(id(restore))
        # A tape is a stack: a restore nobody reads still pops when its push stays (another
        # restore of the same name needs the tape), or the pops after it (and, at second
        # order, the adjoint tape's pushes and pops) get out of step.
        for restore, target in self.pops:
            if id(restore) in dead and target in needed and target not in recomputed and \
                    getattr(restore, "saved_by", None) not in self.unsaved:
                dead.discard(id(restore))
        # Drop the restores nobody needs.
        self.adj.out[:] = _without(self.adj.out, dead)
        for restore, reset in self.placeholder_resets:
            if id(restore) not in dead:
                # The loop's last backward step pops the zero-size placeholder t had before
                # its first forward step: t_bar, reset to that shape, would give a sweep over
                # this backward pass (which reads shapes from last values) a wrong shape.
                t, bar = restore.targets[0].id, reset.targets[0].id
                # (np.size when t is also bound to a number: `a[i] if i > 0 else 0.0`)
                test = "np.size(t)" if _bound_to_number(self.core, t) else "t.size"
                reset.value = fill(f"np.zeros_like(t) if {test} else np.zeros_like(b)",
                                   t=t, b=bar)
        self.stale_views = _stale_views(self.core, self.adj.out)
        self.written_through_others = _written_through_other_names(self.core)
        self.preallocated = self._plan_preallocated_tapes(needed)
        tapes = []
        forward = self._forward_block(self.core.body, needed, tapes, depth=0,
                                      defined=set(self.core.params))
        inits = [assign(tape, gast.List(elts=[], ctx=gast.Load())) for tape in tapes]
        inits += self._stack_starts()
        self._stack_returns(self.adj.out)
        for tape in tapes:  # typed, so a caller's placeholder for it is a list too
            self.core.types.setdefault(tape, T.AType("list", elts=()))
        return inits + forward

    def _plan_preallocated_tapes(self, needed):
        """Tapes written once per step of a top-level ``for`` over a range become arrays sized
        by the trip count, indexed by the step (``y_tape[i] = y`` ... ``y = y_tape[i]``);
        the others stay lists used as stacks."""
        uses = {}
        for sid, saves in self.saves.items():
            if isinstance(saves, list):
                for tape, target in saves:
                    if (sid, target) not in self.unsaved:  # (a dropped save pushes nothing)
                        uses[tape] = uses.get(tape, 0) + 1
        plan = {}
        for loop in self.core.body:
            if not isinstance(loop, gast.For) or id(loop) in self.checkpoint_plans or \
                    len(loop.iter.args) > 2:
                continue
            args = loop.iter.args
            start, stop = (None, args[0]) if len(args) == 1 else (args[0], args[1])
            trips = fill("max(b - a, 0)", a=start, b=stop) if start is not None else to_expr(stop)
            step = name(loop.target.id) if start is None else fill("i - a", i=loop.target.id,
                                                                   a=start)
            branched = {id(inner) for b in walk_statements(loop.body) if isinstance(b, gast.If)
                        for inner in walk_statements(b.body + b.orelse)}
            once = {id(inner) for inner in walk_statements(loop.body)} - branched
            for stmt, slot, size in _steps_of_nest(loop, step, trips):
                saves = self.saves.get(id(stmt))
                if isinstance(stmt, CONTROL) or not isinstance(saves, list):
                    continue
                for tape, target in saves:
                    t = self.core.types.get(target, T.UNKNOWN)
                    if target not in needed or uses.get(tape) != 1 or \
                            (id(stmt), target) in self.unsaved:
                        continue
                    if t.kind in ("float", "int", "bool"):
                        dtype = {"float": t.dtype or "float64", "int": "int64",
                                 "bool": "bool_"}[t.kind]
                        plan[tape] = {"loop": id(loop), "step": slot, "shape": size,
                                      "dtype": dtype}
                        continue
                    if writing_code_to_transform():
                        continue
                    binding, bound = stmt, target
                    length = _fresh_vector_length(stmt, target, t, loop, once)
                    if length is None:  # u = un, un made fresh earlier in the step
                        found = _fresh_alias(stmt, target, t, loop, once, self.core)
                        if found is not None:
                            length, binding, bound = found
                    if length is not None:  # other arrays stay on lists (no shape to know)
                        value = binding.value
                        plan[tape] = {"loop": id(loop), "step": slot, "shape": size,
                                      "dtype": "float64", "row": length, "target": target,
                                      "binding": id(binding), "bound": bound,
                                      "zero": _called(value) == "np.zeros",
                                      "copy": value.args[0].id if _called(value) ==
                                      "np.copy" else None,
                                      "before": self.core.namer.derived(target, "before_loop")}
        self.row_bindings = {}
        for tape, info in sorted(plan.items()):
            if "row" in info and info["binding"] in self.row_bindings:
                del plan[tape]  # (one statement's array is one tape's row; the other tape
                # stays a list)
            elif "row" in info:
                self.row_bindings[info["binding"]] = (tape, info)
        plan.update(self._stack_plan(needed, uses))
        for restore, _ in self.pops:
            tape = _popped_tape(restore)
            if tape in plan and "stack" in plan[tape]:
                plan[tape]["restore"] = restore  # (moved to the top of the step: see
                # _stack_returns)
            elif tape in plan and "row" in plan[tape]:
                # the value before this step's binding: the row the step before bound, or
                # (at the first step) the value the name had before the loop
                step = plan[tape]["step"]
                restore.value = fill("t[s - 1] if s > 0 else b", t=tape, s=step,
                                     b=plan[tape]["before"])
            elif tape in plan:
                restore.value = gast.Subscript(value=name(tape), slice=to_expr(
                    plan[tape]["step"]), ctx=gast.Load())
        return plan

    def _stack_plan(self, needed, uses):
        """tape -> its row of a loop's stack (see _stacked_steps), for the math-library
        results (np.exp, np.tanh) that steps of loops without slots save: a store and a load
        cost less than computing them again in the backward step (ADBench's LSTM: three
        exps and two tanhs per unit of its cell). The loop's stack is a float64 matrix with
        a row per such value (the "column" of the plan) and a column per step; a run of the
        loop takes one column per step above ``top`` (``row`` is where its columns start),
        and the backward run of the loop gives them back."""
        stacked = self.stacked  # (worked out in forward_sweep)
        present = {id(node.primal_loop) for node in gast.walk(gast.Module(
            body=self.adj.out, type_ignores=[])) if hasattr(node, "primal_loop")}
        plan, stacks, local = {}, {}, {}
        for stmt in walk_statements(self.core.body):
            loop = stacked.get(id(stmt))
            saves = self.saves.get(id(stmt))
            if loop is None or id(loop) not in present or isinstance(stmt, CONTROL) or \
                    not isinstance(saves, list) or not _libm_call(stmt):
                continue  # (no backward run of the loop: nothing would hand them back)
            if id(loop) not in local:  # (the backward step reads the step's own value)
                local[id(loop)] = {t for t, _, _ in _loop_locals(loop, self.core)}
            for tape, target in saves:
                t = self.core.types.get(target, T.UNKNOWN)
                if target not in needed or target not in local[id(loop)] or \
                        uses.get(tape) != 1 or \
                        (id(stmt), target) in self.unsaved or t.kind != "float" or \
                        (t.dtype or "float64") != "float64":
                    continue
                stack = stacks.get(id(loop))
                if stack is None:
                    index = loop.target.id
                    args = loop.iter.args
                    fresh = self.core.namer.fresh
                    stack = stacks[id(loop)] = {
                        "loop": loop, "columns": [], "array": fresh(f"{index}_stack"),
                        "top": fresh(f"{index}_stack_top"), "row": fresh(f"{index}_row"),
                        "trips": _range_trips(args),
                        "offset": name(index) if len(args) == 1 else
                        fill("i - a", i=index, a=args[0])}
                    self.core.types[stack["array"]] = T.AType("array", "float64", (T.N, T.N))
                    self.core.types[stack["top"]] = T.INT
                    self.core.types[stack["row"]] = T.INT
                plan[tape] = {"loop": id(loop), "stack": stack,
                              "column": len(stack["columns"]), "dtype": "float64"}
                stack["columns"].append(tape)
        self.stacks = list(stacks.values())
        return plan

    def _stack_starts(self):
        """The statements that make each loop stack empty, before the forward sweep."""
        return [s for stack in self.stacks for s in (
            assign(stack["array"], fill(f"np.empty(({len(stack['columns'])}, 0))")),
            assign(stack["top"], to_expr(0)))]

    def _stack_returns(self, backward):
        """Before each backward run of a loop with a stack, its columns handed back: ``top``
        goes down by the loop's trip count, and the run reads from there (``row``). The
        backward step reads the values its forward step saved at its top (``e =
        j_stack[0, index_at_least(j_row + j, 0)]``), where the value of the step is what
        the adjoint code reads (a value of the step's own, read only later in the step and
        nowhere after the loop: see _loop_locals), instead of putting back the value before
        the step where the statement's adjoint is: no backward step then waits for a value
        the one before it put back, and the loop can be vectorized."""
        by_loop = {id(stack["loop"]): stack for stack in self.stacks}
        if not by_loop:
            return
        moved = {}
        for info in self.preallocated.values():
            if "stack" in info and "restore" in info:
                moved.setdefault(id(info["stack"]["loop"]), []).append(info)
        dropped = {id(info["restore"]) for infos in moved.values() for info in infos}
        backward[:] = _without(backward, dropped)

        def visit(stmts):
            k = 0
            while k < len(stmts):
                stmt = stmts[k]
                if isinstance(stmt, CONTROL):
                    visit(stmt.body)
                    visit(stmt.orelse)
                stack = by_loop.get(id(getattr(stmt, "primal_loop", None)))
                if stack is not None:
                    # (the bounds' integer temporaries as the backward sweep reads them:
                    # computed again from the loop indices, never saved)
                    reads = [_recomputed(assign(info["restore"].targets[0].id, _stack_slot(
                        info, gast.Load())), self.recomputable) for info in sorted(
                            moved.get(id(stack["loop"]), ()), key=lambda i: i["column"])]
                    stmt.body[:0] = reads
                    stmts[k:k] = [_recomputed(assign(stack["top"], fill(
                        "t - n", t=stack["top"], n=stack["trips"])), self.recomputable),
                                  assign(stack["row"], name(stack["top"]))]
                    k += 2
                k += 1
        visit(backward)

    def _tape_allocations(self, loop):
        """The preallocated tapes of one loop, made before it. The tapes of numbers of one
        dtype and length are the columns of one matrix (``float_tapes = np.empty((n, 3),
        dtype=np.float64)``, ``t_tape = float_tapes[:, 0]``): a step writes its numbers
        side by side, into one or two cache lines. Separate tapes of one length start at
        the same offset within a page, and past eight or so of them each step's stores
        evict each other from the cache (ADBench BA's 27 tapes: the forward sweep 10.5 ms
        instead of 3)."""
        out, columns = [], {}
        for stack in self.stacks:
            if id(stack["loop"]) == loop:
                out += [assign(stack["row"], name(stack["top"])),
                        assign(stack["top"], fill("t + n", t=stack["top"], n=stack["trips"])),
                        assign(stack["array"], fill("reserve_steps(s, t)", s=stack["array"],
                                                    t=stack["top"]))]
        for tape, info in sorted(self.preallocated.items()):
            if info["loop"] != loop or "stack" in info:
                continue
            if "row" in info:
                shape = fill("(s, r)", s=info["shape"], r=info["row"])
                out.append(assign(tape, fill(f"np.empty(s, dtype=np.{info['dtype']})",
                                             s=shape)))
                continue
            key = (info["dtype"], unparse(to_expr(info["shape"])))
            columns.setdefault(key, []).append((tape, info))
        for (dtype, _), group in columns.items():
            if len(group) == 1 or writing_code_to_transform():  # (views of one array would
                # be shared memory to the next transformation)
                out += [assign(tape, fill(f"np.empty(s, dtype=np.{dtype})", s=info["shape"]))
                        for tape, info in group]
                continue
            matrix = self.core.namer.fresh(_TAPE_MATRICES.get(dtype, f"{dtype}_tapes"))
            out.append(assign(matrix, fill(f"np.empty((s, {len(group)}), dtype=np.{dtype})",
                                           s=group[0][1]["shape"])))
            out += [assign(tape, fill(f"m[:, {j}]", m=matrix))
                    for j, (tape, _) in enumerate(group)]
        return out

    def _reserve_ahead(self, loop):
        """For the outermost loop around loops with stacks, at the end of its first step: each
        stack grown once to as many columns per step for all its steps (``if t == 0: j_stack
        = reserve_steps(j_stack, min(j_stack_top * max(n, 0), j_stack_top + 4194304))``),
        instead of doubled again and again as the inner runs reserve their columns (ADBench's
        LSTM: eleven copies, 1.1 MB in all); steps that take more grow it by doubling again.
        Only a loop over ``range(n)`` or ``range(a, b)`` whose index and bounds its body does
        not rebind (its first step is then ``t == a``); a stack whose outermost loop is
        another kind keeps the doubling. (reserve_steps, already compiled for the inner runs,
        is not compiled again: a helper of its own cost GMM's cold start 0.13 s.)"""
        if not isinstance(loop, (gast.For, gast.While)):
            return []
        inside = {id(s) for s in walk_statements(loop.body)}
        stacks = [stack for stack in self.stacks if id(stack["loop"]) in inside and
                  stack["array"] not in self.stacks_reserved]
        self.stacks_reserved.update(stack["array"] for stack in stacks)
        it = getattr(loop, "iter", None)
        if not stacks or isinstance(loop, gast.While) or not (
                isinstance(loop.target, gast.Name) and isinstance(it, gast.Call) and
                unparse(it.func) == "range" and 1 <= len(it.args) <= 2 and not it.keywords):
            return []
        rebound = {t for s in walk_statements(loop.body) if not isinstance(s, CONTROL)
                   for t in _stmt_targets(s)}
        rebound |= {s.target.id for s in walk_statements(loop.body)
                    if isinstance(s, gast.For) and isinstance(s.target, gast.Name)}
        if loop.target.id in rebound or not all(_invariant_int(a, rebound) for a in it.args):
            return []
        first = to_expr(0) if len(it.args) == 1 else it.args[0]
        grow = [assign(stack["array"], fill(
            f"reserve_steps(s, min(t * n, t + {_AHEAD_LIMIT}))", s=stack["array"],
            t=stack["top"], n=_range_trips(it.args))) for stack in stacks]
        return [gast.If(test=fill("i == a", i=loop.target.id, a=first), body=grow, orelse=[])]

    def _forward_block(self, stmts, needed, tapes, depth, defined, record=True):
        out = []
        for stmt in stmts:
            plan = self.checkpoint_plans.get(id(stmt))
            if plan is not None and record:
                out += self._checkpointed_forward(stmt, plan, needed, tapes, depth, defined)
                continue
            if record:
                out += self._tape_allocations(id(stmt))
            if isinstance(stmt, CONTROL):
                assigned = {t for inner in walk_statements([stmt]) if not isinstance(
                    inner, CONTROL) for t in _stmt_targets(inner)}
                if depth == 0:
                    for t in sorted(assigned - defined):
                        if t in needed:
                            placeholder = _row_placeholder(stmt, t, defined,
                                                           self.core.types) or \
                                _placeholder(self.core.types.get(t, T.UNKNOWN))
                            out.append(assign(t, placeholder))
                    for _, info in sorted(self.preallocated.items()):
                        if info["loop"] == id(stmt) and "row" in info and record:
                            out.append(assign(info["before"], name(info["target"])))
                copy = _shallow_copy(stmt)
                ahead = self._reserve_ahead(stmt) if record else []
                copy.body = self._forward_block(stmt.body, needed, tapes, depth + 1, defined,
                                                record) + ahead
                copy.orelse = self._forward_block(stmt.orelse, needed, tapes, depth + 1,
                                                  defined, record)
                out.append(copy)
                defined |= assigned
                continue
            save = self.saves.get(id(stmt)) if record else None
            after = []
            if isinstance(save, tuple):  # an in-place write: save what it overwrites
                tape, base, index = save
                if base in needed and (id(stmt), base) not in self.unsaved:
                    current = gast.Subscript(value=name(base), slice=to_expr(index),
                                             ctx=gast.Load())
                    t = self.core.types.get(base, T.UNKNOWN)
                    value = fill("v.copy()", v=current) if _indexes_array(t, index,
                                                                           self.core.types) \
                        else current
                    out.append(gast.Expr(value=fill("t.append(v)", t=tape, v=value)))
                    if tape not in tapes:
                        tapes.append(tape)
            elif save:
                for tape, target in save:
                    if tape in self.preallocated and (id(stmt), target) in self.unsaved:
                        continue  # another statement fills this tape
                    if tape in self.preallocated and "row" in self.preallocated[tape]:
                        continue  # the binding itself takes the tape's row (below)
                    if tape in self.preallocated and "stack" in self.preallocated[tape]:
                        after.append(gast.Assign(targets=[_stack_slot(  # (the new value)
                            self.preallocated[tape], gast.Store())], value=name(target),
                            type_comment=None))
                    elif tape in self.preallocated:
                        row = gast.Subscript(value=name(tape), slice=to_expr(
                            self.preallocated[tape]["step"]), ctx=gast.Store())
                        out.append(gast.Assign(targets=[row], value=name(target),
                                               type_comment=None))
                    elif target in needed and (id(stmt), target) not in self.unsaved:
                        # (a copy when another name for the array writes into it later:
                        # `u_held = u` then `un = u_held` in `u, un = un, u`)
                        value = fill("v.copy()", v=target) if \
                            target in self.written_through_others else name(target)
                        out.append(gast.Expr(value=fill("t.append(v)", t=tape, v=value)))
                        if tape not in tapes:
                            tapes.append(tape)
            replacement = self.replacements.get(id(stmt), stmt)
            if id(stmt) in self.stale_views:  # the backward sweep reads it after a write
                replacement = _shallow_copy(stmt)
                replacement.value = fill("v.copy()", v=stmt.value)
            if id(stmt) in self.row_bindings and record:  # x = np.empty(k): the tape's row
                tape, info = self.row_bindings[id(stmt)]
                replacement = assign(info["bound"], gast.Subscript(
                    value=name(tape), slice=to_expr(info["step"]), ctx=gast.Load()))
                if info["zero"] or info["copy"]:  # x[:] = 0.0, or x[:] = y for np.copy(y)
                    out.append(replacement)
                    replacement = gast.Assign(targets=[gast.Subscript(
                        value=name(info["bound"]), slice=gast.Slice(None, None, None),
                        ctx=gast.Store())], value=name(info["copy"]) if info["copy"] else
                        gast.Constant(0.0, None), type_comment=None)
            out.append(replacement)
            out += after
            for tape, local in getattr(replacement, "tapes", ()) if record else ():
                out.append(gast.Expr(value=fill("t.append(v)", t=tape, v=local)))
                if tape not in tapes:
                    tapes.append(tape)
            defined.update(_stmt_targets(stmt))
        return out


# The most columns a loop stack is grown by at once on the strength of its outer loop's first
# step (2**22: 32 MB a row, reserved, not touched, until steps take them).
_AHEAD_LIMIT = 4194304


def _steps_of_nest(loop, step, trips):
    """(statement, its step number, the trip count) for the statements of a top-level loop's
    body and of the ``for`` loops over ranges nested in it whose bounds the outer loop does
    not change (``for c in range(k)`` inside ``for i in range(n)``: step ``i * k + c`` of
    ``n * k``): a value saved once per step there gets one slot of a preallocated tape.
    Statements in branches count too (a slot of a branch not taken is never read)."""
    assigned = _loop_assigned(loop)

    def bound(expr):
        """`expr` with the loop's own shape reads (``item = shape[0]``, ``shape = x.shape``)
        put back, when that makes it invariant; else None."""
        return _invariant_length(expr, loop.body, assigned, through_checks=False, limit=4)

    def visit(stmts, step, trips):
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                yield from visit(stmt.body, step, trips)
                yield from visit(stmt.orelse, step, trips)
                continue
            if not isinstance(stmt, gast.For):
                if not isinstance(stmt, CONTROL):
                    yield stmt, step, trips
                continue
            it = stmt.iter
            if stmt.orelse or getattr(stmt, "checkpointed", False) or \
                    not isinstance(it, gast.Call) or unparse(it.func) != "range" or \
                    not 1 <= len(it.args) <= 2 or it.keywords or \
                    not isinstance(stmt.target, gast.Name) or \
                    any(bound(a) is None for a in it.args):
                continue
            start, stop = (to_expr(0), bound(it.args[0])) if len(it.args) == 1 else \
                (bound(it.args[0]), bound(it.args[1]))
            shape_read = isinstance(stop, gast.Subscript) and \
                isinstance(stop.value, gast.Attribute) and stop.value.attr == "shape"
            inner = stop if len(it.args) == 1 and shape_read else \
                fill("max(b - a, 0)", a=start, b=stop)  # (a length is never negative)
            offset = fill("i - a", i=stmt.target.id, a=start) if len(it.args) == 2 else \
                name(stmt.target.id)
            if step is None:  # (only which statements have slots is asked)
                yield from visit(stmt.body, None, None)
            else:
                yield from visit(stmt.body, fill("s * t + o", s=step, t=inner, o=offset),
                                 fill("n * t", n=trips, t=inner))
    yield from visit(loop.body, step, trips)


def _bound_to_number(core, t):
    """Whether some statement of `core` binds `t` to a number (a constant, or a name typed as
    one): t is then an array on some paths and a number on others."""
    numbers = ("float", "int", "bool")
    for node in (n for stmt in core.body for n in gast.walk(stmt)):
        if isinstance(node, gast.Assign) and any(isinstance(e, gast.Name) and e.id == t
                                                 for e in node.targets):
            value = node.value
            if isinstance(value, gast.Constant) and type(value.value) in (int, float, bool):
                return True
            if isinstance(value, gast.Name) and \
                    core.types.get(value.id, T.UNKNOWN).kind in numbers:
                return True
    return False


def _slotted_steps(body):
    """The ids of the statements that have a slot of a preallocated tape (_steps_of_nest)."""
    return {id(s) for loop in body if isinstance(loop, gast.For) and
            not getattr(loop, "checkpointed", False) and len(loop.iter.args) <= 2
            for s, _, _ in _steps_of_nest(loop, None, None)}


def _stack_slot(info, ctx):
    """``stack[value, index_at_least(row + offset, 0)]``: the slot of a loop's stack a
    step's value takes. A stack has a row per value and a column per step, so the steps of
    one run write each value side by side; the index is never negative (``index_at_least``
    tells LLVM, which then drops Numba's negative-index wraparound): the unit loop of
    ADBench's LSTM, storing five values per step, vectorizes only with both."""
    stack = info["stack"]
    return gast.Subscript(value=name(stack["array"]), slice=gast.Tuple(elts=[
        to_expr(info["column"]), fill("index_at_least(r + o, 0)", r=stack["row"],
                                      o=stack["offset"])], ctx=gast.Load()), ctx=ctx)


def _stacked_steps(body, slotted, for_compiled_code):
    """id(statement) -> its loop, for the statements of ``for`` loops over ``range(n)`` or
    ``range(a, b)`` that are not in a top-level nest with slots (`slotted`, see
    _steps_of_nest): their bounds may change from step to step of an outer loop (ADBench's
    LSTM: a loop over a cell's units in a loop over layers in a loop over characters). A
    number such a step saves gets a row of the loop's own stack: each run of the loop takes
    as many columns as it has steps, above the ones runs before it took, and its backward
    run hands them back (``_stack_plan``). Statements of the loop's body only, not of
    branches in it (the backward step reads its values at its top). Only in code for jit on
    the CPU (in
    plain Python a list's append is cheaper than an element store into an array; a device
    kernel cannot grow an array), not in loops that may stop early (``break``), nothing inside
    a checkpointed loop (whose segments run forward again in the backward sweep), and nothing
    in code that is to be differentiated again (the stack's growth has no derivative rule)."""
    if writing_code_to_transform() or not for_compiled_code:
        return {}
    out = {}

    def visit(stmts, loop, blocked):
        for stmt in stmts:
            if isinstance(stmt, gast.For):
                checkpointed = getattr(stmt, "checkpointed", False)
                it = stmt.iter
                plain = not blocked and not checkpointed and not stmt.orelse and \
                    isinstance(stmt.target, gast.Name) and isinstance(it, gast.Call) and \
                    unparse(it.func) == "range" and 1 <= len(it.args) <= 2 and \
                    not it.keywords and not _exits_early(stmt)
                visit(stmt.body, stmt if plain else None, blocked or checkpointed)
            elif isinstance(stmt, gast.While):
                visit(stmt.body, None, blocked)
            elif isinstance(stmt, gast.If):  # (a step may skip it: no row to read back)
                visit(stmt.body, None, blocked)
                visit(stmt.orelse, None, blocked)
            elif loop is not None and id(stmt) not in slotted:
                out[id(stmt)] = loop
    visit(body, None, False)
    return out


def _fresh_vector_length(stmt, target, t, loop, once):
    """The length k when `stmt` binds the float64 vector `target` to a new ``np.empty(k)`` or
    ``np.zeros(k)``, k does not change in the top-level `loop`, and `stmt` is the one binding
    of `target` in the loop, run once in every step (not in a branch); else None. Each step's
    new vector can then be a row of a tape preallocated before the loop (no allocation per
    step), and the value a step's binding replaced is the row of the step before."""
    if _exits_early(loop):
        return None  # (a step that skips the binding would leave its row unwritten)
    if not (_float_vector(t) and id(stmt) in once and isinstance(stmt, gast.Assign) and
            _called(stmt.value) in ("np.empty", "np.zeros") and len(stmt.value.args) == 1 and
            not stmt.value.keywords and _stmt_targets(stmt) == [target]):
        return None
    if _binders(loop, target) != [stmt]:
        return None
    return _invariant_length(stmt.value.args[0], loop.body, _loop_assigned(loop))


def _range_trips(args):
    """The trip count of ``range(n)`` or ``range(a, b)`` from its arguments: ``max(n, 0)``,
    ``max(b - a, 0)``."""
    if len(args) == 1:
        return fill("max(n, 0)", n=args[0])
    return fill("max(b - a, 0)", a=args[0], b=args[1])


def _exits_early(loop):
    """Whether `loop` has a ``break``, ``continue`` or ``return`` anywhere in it."""
    return any(isinstance(n, (gast.Break, gast.Continue, gast.Return)) for n in gast.walk(loop))


def _float_vector(t):
    """Whether the type `t` is a float64 array of one axis."""
    return t.kind == "array" and t.dtype == "float64" and t.dims is not None and \
        len(t.dims) == 1


def _binders(loop, target):
    """The statements of `loop` that bind `target` (in-place writes to it aside)."""
    return [inner for inner in walk_statements(loop.body)
            if not isinstance(inner, CONTROL) and target in _stmt_targets(inner) and
            getattr(getattr(inner, "prim", None), "kind", None) not in ("setitem", "add_at")]


def _fresh_alias(stmt, target, t, loop, once, core):
    """(length, binding, y) when `stmt` is ``target = y``, the one binding of the float64
    vector `target` in the top-level `loop`, run in every step, and `binding` binds y
    earlier in the same block, once per step and nowhere else in the loop, to a new vector:
    ``np.empty(k)``/``np.zeros(k)`` (k the same in every step) or ``np.copy(target)`` with
    `target` bound before the loop (every step's copy then has the length it had there). Each
    step's new vector can then be a row of a tape (an explicit stencil step's ``un =
    np.copy(u)`` ... ``u = un``): the value `target` had before a step is the row of the step
    before. None otherwise."""
    if not (isinstance(stmt, gast.Assign) and isinstance(stmt.value, gast.Name) and
            _stmt_targets(stmt) == [target] and id(stmt) in once and
            stmt.value.id != target and _float_vector(t)) or _exits_early(loop):
        return None
    y = stmt.value.id
    found = _binders(loop, y)
    if _binders(loop, target) != [stmt] or len(found) != 1 or id(found[0]) not in once:
        return None
    binding = found[0]
    block = next((b for b in statement_blocks(loop) if any(s is stmt for s in b)), [])
    at = {id(s): k for k, s in enumerate(block)}
    if at.get(id(binding), len(block)) >= at[id(stmt)]:
        return None
    ty = core.types.get(y, T.UNKNOWN)
    if _called(binding.value) in ("np.empty", "np.zeros"):
        length = _fresh_vector_length(binding, y, ty, loop, once)
        return None if length is None else (length, binding, y)
    value = binding.value
    before = core.body[:next(k for k, s in enumerate(core.body) if s is loop)]
    if _called(value) == "np.copy" and len(value.args) == 1 and not value.keywords and \
            isinstance(value.args[0], gast.Name) and value.args[0].id == target and \
            _stmt_targets(binding) == [y] and _float_vector(ty) and \
            any(not isinstance(s, CONTROL) and target in _stmt_targets(s) for s in before):
        return fill("v.shape[0]", v=target), binding, y
    return None


def _loop_assigned(loop):
    """The names a loop's statements bind or write, and the indices of it and its inner loops."""
    assigned = {t for inner in walk_statements(loop.body) if not isinstance(inner, CONTROL)
                for t in _stmt_targets(inner)}
    return assigned | {inner.target.id for inner in walk_statements([loop])
                       if isinstance(inner, gast.For) and isinstance(inner.target, gast.Name)}


def _invariant_length(expr, body, assigned, through_checks=True, limit=16, depth=0,
                      defs=None):
    """`expr` (an integer) as an expression with the same value before the loop whose `body`
    binds `assigned`, putting back the loop's own shape reads (``item = shape[1]``, ``shape =
    x.shape``) and, with `through_checks`, reading ``same_length(m, n)`` as m (its value when
    it does not raise); None when it changes in the loop (or after `limit` put-backs)."""
    if _invariant_int(expr, assigned):
        return to_expr(expr)
    if depth > limit:
        return None
    if defs is None:
        defs = {}
        for inner in walk_statements(body):
            if not isinstance(inner, CONTROL):
                for t in _stmt_targets(inner):
                    defs.setdefault(t, []).append(inner)
    again = {"through_checks": through_checks, "limit": limit, "depth": depth + 1, "defs": defs}
    if through_checks and isinstance(expr, gast.Call) and \
            unparse(expr.func) == "same_length" and len(expr.args) == 2:
        return _invariant_length(expr.args[0], body, assigned, **again)
    names = {n.id for n in gast.walk(expr) if isinstance(n, gast.Name)} & assigned
    values = {}
    kinds = (gast.Attribute, gast.Subscript, gast.Call) if through_checks else \
        (gast.Attribute, gast.Subscript)
    for n in names:
        found = defs.get(n, [])
        if len(found) != 1 or not isinstance(found[0], gast.Assign) or not isinstance(
                found[0].value, kinds):
            return None
        values[n] = found[0].value
    from .templates import copy_tree
    if through_checks and isinstance(expr, gast.Name) and expr.id in values:
        return _invariant_length(copy_tree(values[expr.id]), body, assigned, **again)
    if any(isinstance(v, gast.Call) for v in values.values()):
        return None
    return _invariant_length(fill(unparse(expr), **{n: copy_tree(v) for n, v in values.items()}),
                             body, assigned, **again)


def _called(value):
    return unparse(value.func) if isinstance(value, gast.Call) else None


def _invariant_int(expr, assigned):
    """Whether the range bound `expr` (``k``, ``x.shape[1]``, ``n - 1``) reads no name in
    `assigned` and calls nothing: its value before the loop nest is its value in it."""
    allowed = (gast.Name, gast.Constant, gast.Attribute, gast.Subscript, gast.BinOp,
               gast.UnaryOp, gast.operator, gast.unaryop, gast.expr_context)
    return all(isinstance(n, allowed) and not (isinstance(n, gast.Name) and n.id in assigned)
               and not (isinstance(n, gast.Constant) and type(n.value) not in (int, str))
               for n in gast.walk(expr))


def _checkpointed_forward_doc():
    """(documentation anchor; see _Builder._checkpointed_forward)"""


def _popped_tape(restore):
    """The tape a restore statement (``x = x_tape.pop()``) reads from."""
    value = restore.value
    if isinstance(value, gast.Call) and isinstance(value.func, gast.Attribute) and \
            value.func.attr == "pop" and isinstance(value.func.value, gast.Name):
        return value.func.value.id
    return None


def _maybe_unbound(stmts, params):
    """Names `stmts` bind somewhere but may read where they are unbound: set only in one arm
    of a branch, or only in a loop that may not run, and read after it."""
    from .tidy import _loads, stmt_defs, stmt_uses
    bound, out = set(), []

    def read(names, defined):
        out.extend(n for n in names if n not in defined and n not in out)

    def scan(stmts, defined):
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                read(_loads(stmt.test), defined)
                body, orelse = scan(stmt.body, set(defined)), scan(stmt.orelse, set(defined))
                defined |= body & orelse
            elif isinstance(stmt, gast.For):
                read(_loads(stmt.iter), defined)
                scan(stmt.body, defined | {n.id for n in gast.walk(stmt.target)
                                           if isinstance(n, gast.Name)})
            elif isinstance(stmt, gast.While):
                read(_loads(stmt.test), defined)
                scan(stmt.body, set(defined))
            else:
                read(stmt_uses(stmt), defined)
                defined |= set(stmt_defs(stmt))
                bound.update(stmt_defs(stmt))
        return defined
    scan(stmts, set(params))
    return [n for n in out if n in bound]


def _first_bindings(core):
    """{(id(stmt), name)}: statements outside every loop that give a name its first value on
    their path through the branches (``if c: t = a`` ``else: t = b`` with t unbound before).
    The value such a statement overwrites is only the forward sweep's placeholder: nothing
    saves or restores it, and it gets no adjoint (a zero-size ``t_bar = np.zeros_like(t)``
    would hand a sweep over the backward pass a wrong shape for t_bar)."""
    out = set()

    def scan(stmts, defined):
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                body, orelse = scan(stmt.body, set(defined)), scan(stmt.orelse, set(defined))
                defined |= body | orelse
            elif isinstance(stmt, CONTROL):
                defined |= {t for inner in walk_statements([stmt]) if not isinstance(
                    inner, CONTROL) for t in _stmt_targets(inner)}
                defined |= {n.id for inner in walk_statements([stmt]) if isinstance(
                    inner, gast.For) for n in gast.walk(inner.target)
                    if isinstance(n, gast.Name)}
            elif getattr(stmt, "prim", None) is not None:
                if stmt.prim.kind not in ("setitem", "add_at", "append", "pop", "counter",
                                          "list_new"):
                    out.update((id(stmt), t) for t in _stmt_targets(stmt) if t not in defined)
                defined |= set(_stmt_targets(stmt))
        return defined
    scan(core.body, set(core.params))
    return out


def _defined_before(core):
    """id(top-level loop or branch) -> names that have a value when it starts."""
    from .tidy import stmt_defs
    out, defined = {}, set(core.params)
    for stmt in core.body:
        if isinstance(stmt, CONTROL):
            out[id(stmt)] = set(defined)
            defined |= {t for inner in walk_statements([stmt]) if not isinstance(inner, CONTROL)
                        for t in _stmt_targets(inner)}
        else:
            defined |= set(stmt_defs(stmt))
    return out


def comment_line(text):
    """A comment statement in generated code."""
    from codegen.emit import comment
    return comment(text)


def _stale_views(core, backward):
    """Ids of view statements (``v = y[:, j]``) whose value the backward sweep reads while the
    array they view is written in place: the forward sweep keeps a copy instead. (Reading the
    view again in the primal after such a write is refused by the normalizer.)"""
    simple = [s for s in walk_statements(core.body) if not isinstance(s, CONTROL)]
    written = {s.prim.base for s in simple if s.prim.kind in ("setitem", "add_at")}
    views = {t: s.view_of for s in simple if getattr(s, "view_of", None) for t in
             _stmt_targets(s)}

    def writes_into(n):
        seen = set()
        while n not in written and n in views and n not in seen:
            seen.add(n)
            n = views[n]
        return n in written
    reads = set()
    for stmt in backward:
        reads |= value_reads(stmt)
    return {id(s) for s in simple if getattr(s, "view_of", None) and
            any(t in reads for t in _stmt_targets(s)) and writes_into(s.view_of) and
            not _written_only_before_view(core, s, simple, views) and
            not _views_retired_arrays(core, s.view_of, simple, views, written)}


def _written_through_other_names(core):
    """Array names whose array another name, bound to it as a view (``b = a``, through any
    chain of such bindings), writes into in place somewhere: a tape keeping the array's value
    for the backward sweep keeps a copy. (The normalizer's shared-memory check lets this
    through only where the first name no longer holds the array when the write comes: two
    buffers exchanged each step, ``u, un = un, u``.)"""
    simple = [s for s in walk_statements(core.body) if not isinstance(s, CONTROL)]
    written = {s.prim.base for s in simple if s.prim.kind in ("setitem", "add_at")}
    viewers = {}
    for s in simple:
        if getattr(s, "view_of", None):
            for t in _stmt_targets(s):
                viewers.setdefault(s.view_of, set()).add(t)
    out = set()
    for start in viewers:
        seen, todo = set(), list(viewers[start])
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo.extend(viewers.get(n, ()))
        if (seen - {start}) & written and core.types.get(start, T.UNKNOWN).kind == "array":
            out.add(start)
    return out


_FRESH_RULES = {"copy", "zeros", "zeros_like", "empty", "empty_like", "ones", "ones_like",
                "full", "full_like"}


def _parent_list(stmts, target):
    for k, stmt in enumerate(stmts):
        if stmt is target:
            return stmts, k
        if isinstance(stmt, CONTROL):
            found = _parent_list(stmt.body, target) or _parent_list(stmt.orelse, target)
            if found:
                return found
    return None


def _written_only_before_view(core, view, simple, views):
    """Whether ``v = y`` can never see a later write into y's array: in v's statement list
    (a loop body, say), y is first set to a new array (``y = np.copy(u)``), every in-place
    write into y anywhere comes after that and before the view, y is set nowhere else in the
    list, and nothing else views y. So the next write follows a new array for y (``u = un`` in
    ``un = u.copy(); un[i] = ...; u = un`` keeps no copy)."""
    y = view.view_of
    if y in views or any(b == y and t not in _stmt_targets(view) for t, b in views.items()):
        return False
    return _made_then_written_before(core, simple, y, view)


def _made_then_written_before(core, simple, name, stmt):
    """Whether, in the statement list holding `stmt`, `name` is set to a new array once before
    it, every in-place write into name anywhere comes between the two, and name is set
    nowhere else in that list."""
    found = _parent_list(core.body, stmt)
    if not found:
        return False
    block, p = found

    def top(inner):
        for k, b in enumerate(block):
            if b is inner or isinstance(b, CONTROL) and any(
                    s is inner for s in walk_statements([b])):
                return k
        return None
    fresh = [k for k, b in enumerate(block[:p]) if _fresh_binding(b, name)]
    if len(fresh) != 1:
        return False
    a = fresh[0]
    for s in simple:
        if name not in _stmt_targets(s) or s is block[a]:
            continue
        k = top(s)
        if s.prim.kind in ("setitem", "add_at"):
            if k is None or not a < k < p:
                return False
        elif k is not None:
            return False
    return True


def _fresh_binding(stmt, name):
    """Whether `stmt` binds `name` to a new array (np.copy, np.zeros, np.empty, ...)."""
    return not isinstance(stmt, CONTROL) and name in _stmt_targets(stmt) and \
        stmt.prim.kind in ("rule", "nondiff") and not getattr(stmt, "view_of", None) and \
        getattr(stmt.prim, "rule", None) is not None and \
        stmt.prim.rule.name.split("@")[0] in _FRESH_RULES


def _views_retired_arrays(core, y, simple, views, written):
    """Whether every array `y` ever holds is written no more once y holds it: y takes over
    z's array once per pass of a block (``s = s2`` at the end of a loop step), z is made new
    earlier in that block (``s2 = np.copy(s)``) and written in place only between the two,
    nothing else views z, and y's other bindings hold arrays nothing writes. A view of y
    (``h = s[i]``, anywhere) then never sees a write, so the backward sweep needs no copy
    of it (ADBench's LSTM: two copies of a state row per layer and step)."""
    if y in written or any(t in written for t, b in views.items() if b == y):
        return False
    takeovers = [b for b in simple if y in _stmt_targets(b) and getattr(b, "view_of", None)
                 and b.view_of in written]
    if len(takeovers) != 1:
        return False
    takeover = takeovers[0]
    z = takeover.view_of
    if z in views or any(b == z and t != y for t, b in views.items()):
        return False
    for b in simple:  # y's other bindings: new arrays, or views of arrays nothing writes
        if b is not takeover and y in _stmt_targets(b) and getattr(b, "view_of", None):
            base, seen = b.view_of, set()
            while base in views and base not in seen:
                seen.add(base)
                base = views[base]
            if base in written or base in seen:
                return False
    return _made_then_written_before(core, simple, z, takeover)


_SHAPE_ONLY = {"np.zeros_like", "np.ones_like", "np.empty_like", "np.full_like", "len",
               "np.shape"}


def value_reads(node, shapes_vary=frozenset()):
    """Names whose values `node` reads: not those it only takes the shape of (x.shape,
    np.zeros_like(x), len(x)) nor the arrays it writes into. A shape read of a name in
    `shapes_vary` (one whose shape may change between loop steps, see
    autodiff_ast/loop_shapes.py) counts as a read: the backward step needs that step's value."""
    skip = set()
    for sub in gast.walk(node):
        if isinstance(sub, gast.Call) and sub.args and isinstance(sub.args[0], gast.Name):
            if unparse(sub.func) in _SHAPE_ONLY:
                skip.add(id(sub.args[0]))
        if isinstance(sub, gast.Attribute) and sub.attr in ("shape", "ndim", "size", "dtype") \
                and isinstance(sub.value, gast.Name):
            skip.add(id(sub.value))
        if isinstance(sub, gast.Subscript) and isinstance(sub.ctx, gast.Store) and \
                isinstance(sub.value, gast.Name):
            skip.add(id(sub.value))
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load) and (id(n) not in skip or n.id in shapes_vary)}


def _control_events(stmts, controls=(), out=None, shapes_vary=frozenset()):
    """Backward statements in execution order as (node, value reads, enclosing controls), a
    control being (id, is_loop, which block) of each enclosing ``for``/``while``/``if``."""
    out = [] if out is None else out
    for stmt in stmts:
        if isinstance(stmt, CONTROL):
            header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
            out.append((stmt, value_reads(header, shapes_vary), controls))
            loop = not isinstance(stmt, gast.If)
            for which in ("body", "orelse"):
                _control_events(getattr(stmt, which), controls + ((id(stmt), loop, which),),
                                out, shapes_vary)
        else:
            out.append((stmt, value_reads(stmt, shapes_vary), controls))
    return out


def _overwritten_unread(steps, k, target):
    """Whether the value a restore at ``steps[k]`` gives `target` is surely replaced before
    anything reads it: going on from k, a statement that always runs at the restore's level
    assigns `target` again before any read (leaving a loop, a read anywhere in that loop
    counts: its next step may read it)."""
    if k is None:
        return False
    level = steps[k][2]
    for node, reads, controls in steps[k + 1:]:
        while controls[:len(level)] != level:  # left the innermost control of `level`
            if level[-1][1] and any(target in r for _, r, c in steps if level[-1] in c):
                return False
            level = level[:-1]
        if target in reads:
            return False
        if controls == level and isinstance(node, gast.Assign) and any(
                isinstance(t, gast.Name) and t.id == target for t in node.targets):
            return True
    return False


def _linearize(stmts, loops, out, shapes_vary=frozenset()):
    """Backward statements in execution order: ('stmt', node, value reads, enclosing loops)."""
    for stmt in stmts:
        if isinstance(stmt, (gast.For, gast.While)):
            header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
            out.append(("head", stmt, value_reads(header, shapes_vary), loops))
            _linearize(stmt.body, loops + (id(stmt),), out, shapes_vary)
        elif isinstance(stmt, gast.If):
            out.append(("head", stmt, value_reads(stmt.test, shapes_vary), loops))
            _linearize(stmt.body, loops, out, shapes_vary)
            _linearize(stmt.orelse, loops, out, shapes_vary)
        else:
            out.append(("stmt", stmt, value_reads(stmt, shapes_vary), loops))


def _recompute_index_arithmetic(core, backward, slotted, stacked):
    """Integer temporaries such as ``i + 1`` are recomputed where the backward sweep reads
    them instead of being saved on a tape: their operands are loop indices (which the
    backward loops bind again) or values that are never overwritten. A loop's own scalars
    (see _loop_locals) are computed again at the top of its backward step when the step does
    not change what they read; math-library values of the statements in `slotted`
    (_slotted_steps) and `stacked` (_stacked_steps) are saved instead. Returns the names so
    recomputed (their tapes are dropped)."""
    defs = {}
    overwritten = set()
    indices = set()
    loop_local = {}  # name -> (its loop, what its body writes, rebinds): see _loop_locals
    reads = {}  # id(core statement) -> the names it reads (shared by the _loop_locals calls)

    def scan(stmts, depth):
        for stmt in stmts:
            if isinstance(stmt, gast.For):
                indices.add(stmt.target.id)
                loop_local.update({t: (stmt, w, r) for t, w, r in
                                   _loop_locals(stmt, core, reads)})
                scan(stmt.body, depth + 1)
                continue
            if isinstance(stmt, CONTROL):
                scan(stmt.body, depth + 1)
                scan(stmt.orelse, depth + 1)
                continue
            for t in _stmt_targets(stmt):
                if t in defs or depth > 0:
                    overwritten.add(t)
                defs.setdefault(t, []).append(stmt)
    scan(core.body, 0)
    recomputable = {}
    in_loop = {}  # loop-local value -> its loop: recomputed at the top of the backward step
    changed = True
    while changed:
        changed = False
        for t, stmts in defs.items():
            if t in recomputable or len(stmts) != 1 or t not in core.namer.temps:
                continue
            stmt = stmts[0]
            typ = core.types.get(t, T.UNKNOWN)
            if not isinstance(stmt, gast.Assign):
                continue
            value = stmt.value
            # x[i] of an array nobody writes, at loop indices: read again, not saved.
            gather = isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name) \
                and value.value.id not in overwritten and typ.kind in ("float", "int", "bool") \
                and stmt.prim.kind == "rule"
            if typ.kind not in ("int", "bool") and not gather:
                continue
            if not isinstance(value, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.Subscript)):
                continue
            if isinstance(value, gast.Subscript) and t in loop_local:
                continue  # a load: read once at the top of the backward step (below)
            operands = [n.id for n in gast.walk(value) if isinstance(n, gast.Name)]
            if all(o in indices or o in recomputable or (o not in overwritten)
                   for o in operands):
                recomputable[t] = value
                changed = True
    # A value computed in a loop body from values the body does not change: computed again
    # at the top of the backward step, not pushed on a tape. A math-library call (np.exp)
    # where the step has a slot of a preallocated tape is saved there instead: a store and
    # a load cost less than computing it again.
    saved = {t: loop for t, (loop, _, _) in loop_local.items()
             if (id(defs[t][0]) in slotted or id(defs[t][0]) in stacked) and
             _libm_call(defs[t][0])}
    changed = True
    while changed:
        changed = False
        for t, (loop, written, rebound) in loop_local.items():
            stmt = defs[t][0]
            if t in recomputable or t in in_loop or t in saved or not _cheap(stmt):
                continue
            value = stmt.value
            operands = [n.id for n in gast.walk(value) if isinstance(n, gast.Name) and
                        not (isinstance(value, gast.Call) and n is value.func)]
            # (a saved value of the step holds the step's value at the top of its backward;
            # the shape of an array the step only writes into in place is the same there)
            shapes = _shape_only_operands(value) - rebound
            if all(o in indices or o in recomputable or o not in written or o in shapes or
                   in_loop.get(o) is loop or saved.get(o) is loop for o in operands):
                in_loop[t] = loop
                changed = True
    inserted = _insert_recomputation(backward, in_loop, core.namer)
    for i, stmt in enumerate(backward):
        backward[i] = _recomputed(stmt, recomputable)
    # What code added to the backward sweep later (a loop stack's bounds, _stack_returns)
    # reads as expressions: the recomputed integers, and the loop-local values whose
    # operands the step never changes (``counts[i]``), good anywhere in the backward step.
    expressions = dict(recomputable)
    changed = True
    while changed:
        changed = False
        for t in in_loop:
            if t in expressions or saved.get(t) is not None:
                continue
            value = defs[t][0].value
            written = loop_local[t][1]
            operands = [n.id for n in gast.walk(value) if isinstance(n, gast.Name) and
                        not (isinstance(value, gast.Call) and n is value.func)]
            if all(o in indices or o in expressions or o not in written for o in operands):
                expressions[t] = value
                changed = True
    return inserted, expressions


def _recomputed(node, recomputable):
    """`node` reading each name of `recomputable` (name -> its expression) as its expression
    (in place where it can be; returns the node to use)."""
    if not recomputable:
        return node

    class Substitute(gast.NodeTransformer):
        def visit_Name(self, node):
            if isinstance(node.ctx, gast.Load) and node.id in recomputable:
                return self.visit(to_expr(recomputable[node.id]))
            return node
    return Substitute().visit(node)


def _shape_only_operands(value):
    """The names `value` reads only through their shape (``x.shape``, ``x.shape[1]``)."""
    through_shape, other = set(), set()
    shape_reads = {id(n.value) for n in gast.walk(value)
                   if isinstance(n, gast.Attribute) and n.attr == "shape"}
    for n in gast.walk(value):
        if isinstance(n, gast.Name):
            (through_shape if id(n) in shape_reads else other).add(n.id)
    return through_shape - other


def _insert_recomputation(backward, in_loop, namer):
    """Put ``t = <t's primal expression>`` at the top of each backward step that reads t, for
    the loop-local values of `in_loop` (in the primal's order, with the ones they read).
    Temporaries get new names there (so tidy may inline them in both sweeps). Returns the
    names recomputed (their tapes are not needed)."""
    by_loop = {}
    for t, loop in in_loop.items():
        by_loop.setdefault(id(loop), (loop, set()))[1].add(t)
    inserted = set()

    def visit(stmts):
        for stmt in stmts:
            if not isinstance(stmt, CONTROL):
                continue
            visit(stmt.body)
            visit(stmt.orelse)
            entry = by_loop.get(id(getattr(stmt, "primal_loop", None)))
            if entry is None:
                continue
            loop, names = entry
            reads = set()
            for inner in stmt.body:
                reads |= value_reads(inner)
            wanted = names & reads
            body = [s for s in loop.body if not isinstance(s, CONTROL)]
            for s in reversed(body):  # and what they read, in the same step
                targets = _stmt_targets(s)
                if targets and targets[0] in wanted:
                    wanted |= names & value_reads(s.value)
            if not wanted:
                continue
            lines = [assign(s.targets[0].id, to_expr(s.value)) for s in body
                     if _stmt_targets(s) and _stmt_targets(s)[0] in wanted]
            skip = getattr(stmt, "header_lines", 0)
            stmt.body[skip:skip] = lines
            inserted.update(wanted)
            renames = {t: namer.temp(t) for t in (x.targets[0].id for x in lines)
                       if t in namer.temps}
            for inner in stmt.body[skip:]:
                for n in gast.walk(inner):
                    if isinstance(n, gast.Name) and n.id in renames and (
                            isinstance(n.ctx, gast.Load) or inner in lines):
                        n.id = renames[n.id]
    visit(backward)
    return inserted


def _basic_view(stmt, types):
    """Whether `stmt` binds an array to a view of another by integers and slices (``row =
    w[i]``, ``block = q[c, :d]``): taking it again costs nothing, saving it costs a tape.

    >>> stmt = gast.parse("row = w[i + 1, :n]").body[0]
    >>> _basic_view(stmt, {"row": T.AType("array"), "w": T.AType("array"),
    ...                    "i": T.AType("int"), "n": T.AType("int")})
    True
    """
    value = stmt.value
    if types.get(_stmt_targets(stmt)[0], T.UNKNOWN).kind != "array" or not (
            isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name)):
        return False
    return all(types.get(n.id, T.UNKNOWN).kind == "int" for n in gast.walk(value.slice)
               if isinstance(n, gast.Name))


def _array_arithmetic(stmt, types):
    """Whether `stmt` binds an array to one arithmetic operation on names and constants
    (``xc = row - mu``): computing it again costs about what its tape would (an array made,
    the same elementwise loop), without holding every step's value.

    >>> stmt = gast.parse("xc = row - mu").body[0]
    >>> _array_arithmetic(stmt, {"xc": T.AType("array")})
    True
    """
    value = stmt.value
    if types.get(_stmt_targets(stmt)[0], T.UNKNOWN).kind != "array":
        return False
    if isinstance(value, gast.BinOp):
        operands = (value.left, value.right)
    elif isinstance(value, gast.UnaryOp):
        operands = (value.operand,)
    else:
        return False
    return all(isinstance(o, (gast.Name, gast.Constant)) for o in operands)


def _cheap(stmt):
    """A statement worth computing again rather than saving: arithmetic, a comparison, a
    read of one element or of a shape, or one elementwise NumPy function of such values."""
    value = stmt.value
    if isinstance(value, (gast.BinOp, gast.UnaryOp, gast.Subscript, gast.Compare)):
        return True
    if isinstance(value, gast.Attribute) and value.attr == "shape":
        return True
    if isinstance(value, gast.Tuple) and value.elts and all(
            _name_or_length(e) for e in value.elts):
        return True  # (a shape written out: ``(x.shape[1],)``)
    prim = getattr(stmt, "prim", None)
    if not isinstance(value, gast.Call) or prim is None or value.keywords:
        return False
    if prim.kind in ("rule", "nondiff") and getattr(prim.rule, "name", None) in _INDEX_HELPERS:
        return all(_name_or_length(a) for a in value.args)  # a few integer compares
    return prim.kind == "rule" and prim.rule.name in _ELEMENTWISE_OK and all(
        isinstance(a, (gast.Name, gast.Constant)) for a in value.args)


# What the matrix holding a nest's tapes of numbers of one dtype is called.
_TAPE_MATRICES = {"float64": "float_tapes", "int64": "int_tapes", "bool_": "bool_tapes"}


# The index helpers of scalarized code and of vector arithmetic written as loops
# (rules/structural.py): an integer from lengths and constants, or a ValueError.
_INDEX_HELPERS = frozenset({"broadcast_index", "slice_index", "store_index", "same_length",
                            "slice_start", "slice_length"})


def _name_or_length(node):
    """A name, a constant, or an element of a tuple or a shape at a constant index
    (``shape[1]``, ``x.shape[1]``)."""
    if isinstance(node, (gast.Name, gast.Constant)):
        return True
    inner = node.value if isinstance(node, gast.Subscript) else None
    if isinstance(inner, gast.Attribute) and inner.attr == "shape":
        inner = inner.value
    return isinstance(inner, gast.Name) and isinstance(node.slice, gast.Constant)


_LIBM = {"exp", "exp2", "expm1", "log", "log10", "log1p", "log2", "sin", "cos", "tan",
         "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh",
         "arctanh", "erf", "power", "cbrt", "hypot", "logaddexp", "logaddexp2", "sinc"}


def _libm_call(stmt):
    """Whether `stmt` calls a math-library function (tens of cycles: np.exp, np.tanh)."""
    prim = getattr(stmt, "prim", None)
    return isinstance(stmt.value, gast.Call) and prim is not None and prim.kind == "rule" and \
        prim.rule.name.split("@")[0] in _LIBM


def _loop_locals(loop, core, reads=None):
    """Scalars (and shape tuples) a ``for`` body assigns once, directly, and reads only later
    in the same step and nowhere outside the loop (its own temporaries: ``lap = u[i - 1] -
    2.0 * u[i] + u[i + 1]``, ``m = x.shape[1]``), each with the names the body writes and
    the names it binds anew (not only writes into in place: such a write keeps the array
    and its shape; an append or pop changes a list's length). Such a value can be recomputed
    at the top of the backward step from operands the body does not write: there they hold
    the values they had during the step."""
    inside = list(walk_statements(loop.body))
    simple = [s for s in inside if not isinstance(s, CONTROL)]
    rebound = {t for s in simple if s.prim.kind not in ("setitem", "add_at")
               for t in _stmt_targets(s)}
    rebound |= {s.prim.base for s in simple if s.prim.kind == "pop"}
    written = rebound | {t for s in simple for t in _stmt_targets(s)}
    count = {}
    for s in simple:
        for t in _stmt_targets(s):
            count[t] = count.get(t, 0) + 1
    reads = {} if reads is None else reads

    def reads_of(s):
        if id(s) not in reads:
            reads[id(s)] = _reads_of(s)
        return reads[id(s)]
    ids = {id(s) for s in inside}
    outside = set()
    for s in walk_statements(core.body):
        if id(s) not in ids:
            outside |= reads_of(s)
    out, seen = [], set()
    for s in loop.body:
        if isinstance(s, CONTROL):
            for inner in walk_statements([s]):
                seen |= reads_of(inner)
            continue
        targets = _stmt_targets(s)
        if len(targets) == 1 and isinstance(s, gast.Assign) and \
                isinstance(s.targets[0], gast.Name) and s.prim.kind not in (
                    "setitem", "append", "add_at", "pop", "user") and \
                count.get(targets[0]) == 1 and targets[0] not in seen | outside and (
                    core.types.get(targets[0], T.UNKNOWN).kind in ("float", "int", "bool",
                                                                   "tuple") or
                    _basic_view(s, core.types) or _array_arithmetic(s, core.types)):
            out.append((targets[0], written, rebound))
        seen |= reads_of(s)
    return out


def _reads_of(stmt):
    """Names a core statement reads (for a loop or branch: its header)."""
    if isinstance(stmt, gast.For):
        return value_reads(stmt.iter)
    if isinstance(stmt, (gast.If, gast.While)):
        return value_reads(stmt.test)
    return value_reads(stmt)


def _blocks(stmt):
    """The statement lists nested in a control statement."""
    for inner in walk_statements([stmt]):
        if isinstance(inner, CONTROL):
            yield inner.body
            if inner.orelse:
                yield inner.orelse


def _read_counts(stmts):
    counts = {}
    for stmt in stmts:
        for n in gast.walk(stmt):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
                counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def _local_temps(stmts, temps, everywhere):
    """Temporaries assigned once in `stmts` and read only later in the same list, not after
    it: `everywhere` counts the function's reads of each name (a pass such as scalarize may
    name a value a later statement reads ``h_0``, a temporary's name)."""
    out = set()
    inside = _read_counts(stmts)
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, CONTROL):
            continue
        for t in _stmt_targets(stmt):
            if t not in temps or stmt.prim.kind in ("setitem", "append") or \
                    everywhere.get(t, 0) > inside.get(t, 0):
                continue
            ok = True
            for j, other in enumerate(stmts):
                if other is stmt:
                    continue
                reads = {n.id for n in gast.walk(other) if isinstance(n, gast.Name)}
                if t in reads and (j < i or isinstance(other, CONTROL)):
                    ok = False
                if not isinstance(other, CONTROL) and t in _stmt_targets(other):
                    ok = False
            if ok:
                out.add(t)
    return out


def _without(stmts, dead):
    """`stmts` without the statements in `dead`; loops and branches left empty go too."""
    out = []
    for stmt in stmts:
        if id(stmt) in dead:
            continue
        if isinstance(stmt, CONTROL):
            if getattr(stmt, "filled_later", False):
                out.append(stmt)
                continue
            stmt.body = _without(stmt.body, dead)
            stmt.orelse = _without(stmt.orelse, dead)
            if not stmt.body and not stmt.orelse:
                continue
            if not stmt.body:
                if not isinstance(stmt, gast.If):
                    continue
                stmt.test = fill("not c", c=stmt.test)
                stmt.body, stmt.orelse = stmt.orelse, []
        out.append(stmt)
    return out


def _shallow_copy(stmt):
    import copy
    new = copy.copy(stmt)
    return new


def _placeholder(t):
    """A value of t's type that is never read: it lets the first save before a loop run."""
    if t.kind == "array" and t.dims is not None:
        # Size-one axes stay size one and the dtype is kept: a function that receives the
        # placeholder (a helper's backward function) must infer the same type from it.
        shape = tuple(1 if d == 1 else 0 for d in t.dims)
        if t.dtype in (None, "float64"):
            return fill("np.zeros(s)", s=shape)
        return fill(f"np.zeros(s, np.{t.dtype})", s=shape)
    if t.kind == "list" and not writing_code_to_transform() and t.elts and \
            t.elts[0].kind in ("float", "int"):
        # a list of numbers made anew in each step: Numba types an empty list only from
        # what is appended to it, so the placeholder says its element type
        return fill("[0.0][:0]" if t.elts[0].kind == "float" else "[0][:0]")
    if t.kind == "list":  # a tape (a sweep over this code pairs it with a list of tangents)
        return gast.List(elts=[], ctx=gast.Load())
    if t.kind == "tuple" and t.elts:  # (a helper's results, saved in a loop: one type)
        return gast.Tuple(elts=[_placeholder(e) for e in t.elts], ctx=gast.Load())
    if t.kind == "int":
        return fill("0")
    if t.kind == "bool":
        return fill("False")
    return fill("0.0")


def _row_placeholder(loop, t, defined, types):
    """``np.zeros((a.shape[1],))`` when a loop's body first binds t to a row ``a[k]`` of an array
    bound before the loop (perhaps through copies): a placeholder of the rows' shape. The
    backward pass ends with ``t_bar = np.zeros_like(t)`` of the placeholder, and a sweep over
    that backward pass takes t_bar's shape from its last value (a zero-size placeholder there
    would not match the rows' adjoints). None when the shape is not known so."""
    if not isinstance(loop, gast.For):
        return None
    source = t
    for stmt in reversed(loop.body):
        prim = getattr(stmt, "prim", None)
        if isinstance(stmt, CONTROL) or prim is None:
            continue
        if _stmt_targets(stmt) != [source]:
            continue
        value = stmt.value
        if prim.kind == "copy" and isinstance(value, gast.Name):
            source = value.id
            continue
        break
    else:
        return None
    first = next((s for s in loop.body if not isinstance(s, CONTROL) and
                  source in _stmt_targets(s)), None)
    if first is not stmt or prim.kind != "rule" or getattr(prim.rule, "name", "") != "getitem":
        return None
    if not (isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name)):
        return None
    base, index = value.value.id, value.slice
    base_t = types.get(base, T.UNKNOWN)
    row_t = types.get(t, T.UNKNOWN)
    rebound = {n for s in walk_statements([loop]) if not isinstance(s, CONTROL) and getattr(
        s, "prim", None) is not None and s.prim.kind not in ("setitem", "add_at")
        for n in _stmt_targets(s)}
    if base not in defined or base in rebound or base_t.kind != "array" or \
            row_t.kind != "array" or not base_t.dims or len(base_t.dims) < 2:
        return None
    if not (isinstance(index, gast.Name) and types.get(index.id, T.UNKNOWN).kind == "int"):
        return None
    # Each size written out (a size-one axis as 1): the placeholder keeps the rows' type.
    sizes = ", ".join("1" if d == 1 else f"a.shape[{axis}]"
                      for axis, d in enumerate(base_t.dims) if axis > 0)
    dtype = "" if row_t.dtype in (None, "float64") else f", np.{row_t.dtype}"
    return fill(f"np.zeros(({sizes},){dtype})", a=base)


def _indexes_array(t, index, types):
    from .normalize import index_type
    if t.kind != "array":
        return True
    return index_type(t, index, types).kind == "array"


def _reverse_stmt(stmt, adj, active, core, registry, in_loop=False):
    """Emit the adjoint code of one statement; returns a replacement forward statement."""
    prim = stmt.prim
    targets = _stmt_targets(stmt)
    if prim.kind == "copy":
        g = adj.get(targets[0])
        src = prim.args[0]
        if adj.type_of(targets[0]).kind == "tuple" and adj.tuples.get(targets[0]) and \
                isinstance(src, gast.Name) and src.id in active:
            # `state = out` of tuples: the elements' adjoints (read out of the variables a
            # loop keeps them in: those are zeroed when `state` is overwritten)
            parts = adj.tuples[targets[0]]
            if targets[0] in adj.tuple_vars:
                parts = [_snapshot(adj, p) if p is not None else None for p in parts]
            for k, part in enumerate(parts):
                if part is not None:
                    adj.add_to_tuple(src.id, k, part)
            return None
        if g is not None and isinstance(src, gast.Name) and src.id in active:
            adj.add(src.id, g, adj.atypes.get(targets[0], adj.type_of(targets[0])))
        return None
    if prim.kind == "unpack":
        src = prim.args[0]
        if isinstance(src, gast.Name) and src.id in active:
            adj.tuples.setdefault(src.id, [None] * len(targets))
            for i, t in enumerate(targets):
                g = _tuple_part(adj, t)
                if g is not None:
                    adj.add_to_tuple(src.id, i, g)
        return None
    if prim.kind == "tuple":
        parts = adj.tuples.get(targets[0], [])
        for atom, g in zip(stmt.value.elts, parts):
            if g is not None and isinstance(atom, gast.Name) and atom.id in active:
                adj.add(atom.id, g, atom_type(atom, core.types))
        return None
    if prim.kind == "tuple_get":
        g = _tuple_part(adj, targets[0])
        src = prim.args[0]
        if g is not None and isinstance(src, gast.Name) and src.id in active:
            adj.add_to_tuple(src.id, stmt.value.slice.value, g)
        return None
    if prim.kind == "opaque":  # a call with no rule, reached by a derivative after all
        raise prim.error
    if prim.kind == "user":
        return _reverse_user_call(stmt, adj, active, core, registry, in_loop)
    if prim.kind == "rule":
        _reverse_rule(stmt, adj, active, core)
        return None
    if prim.kind == "setitem":
        _reverse_setitem(stmt, adj, active, core)
        return None
    if prim.kind == "append":
        g = adj.get(prim.base)
        value = prim.args[0]
        value_active = isinstance(value, gast.Name) and value.id in active
        elem = adj.type_of(prim.base).elts
        if g is None:
            return None
        if prim.base in adj.array_lists:  # the list was stacked: its adjoint is an array
            if value_active:
                part = fill("g[len(b) - 1]", g=g, b=prim.base)
                adj.add(value.id, part, elem[0] if elem else T.UNKNOWN)
        elif value_active:  # a stack: its adjoint is a stack of the popped values' adjoints
            adj.add(value.id, fill("g.pop()", g=g), elem[0] if elem else T.UNKNOWN)
        elif isinstance(value, gast.Tuple) and any(
                isinstance(e, gast.Name) and e.id in active for e in value.elts):
            # a tuple written out (`pairs.append((a, b))`): its adjoint's elements go to the
            # elements' values
            popped = adj.namer.temp(f"{adj.namer.adjoint(prim.base)}_element")
            adj.out.append(assign(popped, fill("g.pop()", g=g)))
            _hand_to_elements(adj, value, popped, elem[0] if elem else T.UNKNOWN, active)
        else:
            adj.out.append(gast.Expr(value=fill("g.pop()", g=g)))
        return None
    if prim.kind == "pop":
        base, target = prim.base, targets[0]
        g = adj.get(target) if target in active else None
        if base not in active:
            return None
        if base in adj.array_lists:
            if g is not None:
                adj.scatter(base, fill("len(b)", b=base), g, advanced=False)
            return None
        if adj.get(base) is None:  # the elements left in the list get zeros first
            adj.init_list_zeros(base)
        if adj.type_of(target).kind == "tuple":  # (a checkpointed loop's saved tuple)
            value = (_tuple_adjoint(adj, target) if target in active else None) or \
                _zero_of(name(target), adj.type_of(target))
        else:
            value = adj.materialized(target) if g is not None else adj.zero_expr(target)
        adj.out.append(gast.Expr(value=fill("b.append(v)", b=adj.exprs[base], v=value)))
        adj.empty_lists.discard(base)
        return None
    if prim.kind == "add_at":
        base, value = prim.base, prim.args[0]
        if adj.get(base) is not None and isinstance(value, gast.Name) and value.id in active:
            current = adj.materialized(base)
            part = gast.Subscript(value=to_expr(current), slice=to_expr(prim.rule),
                                  ctx=gast.Load())
            vtype = adj.type_of(value.id)
            ptype = _scattered_type(adj.type_of(base), atom_type(prim.rule, core.types))
            if ptype == vtype and vtype.kind == "array":  # the values fill the selection
                adj.add(value.id, fill("p.copy()", p=part), vtype)
            else:  # the values were broadcast over the selection: add sums them down
                adj.add(value.id, part, ptype)
        return None
    return None


_INTEGRAL_OPS = (gast.Add, gast.Sub, gast.Mult, gast.FloorDiv, gast.Mod)


def _integral(expr, types):
    """Whether `expr` surely computes integers or booleans: a name of such a type, an integer
    constant, and arithmetic other than division on them (the seed ``1.0`` of a product with
    an integer mask, simplified away, leaves such an adjoint)."""
    if isinstance(expr, gast.Name):
        t = types.get(expr.id)
        return t is not None and t.kind in ("int", "bool", "array") and not t.is_float and \
            t.dtype is not None and t.dtype.startswith(("int", "uint", "bool"))
    if isinstance(expr, gast.Constant):
        return type(expr.value) in (int, bool)
    if isinstance(expr, gast.BinOp) and isinstance(expr.op, _INTEGRAL_OPS):
        return _integral(expr.left, types) and _integral(expr.right, types)
    if isinstance(expr, gast.UnaryOp) and isinstance(expr.op, (gast.USub, gast.UAdd)):
        return _integral(expr.operand, types)
    if isinstance(expr, gast.Subscript):
        return _integral(expr.value, types)
    return False


def _integral_type(typ):
    """Whether `typ` is an array of integers or booleans (``np.sum(W, axis=0)`` of an integer
    W, the unbroadcast adjoint of ``y * W``). Numbers are left to :func:`_integral`, which
    reads the expression (a number's inferred kind may be int where the value is a float:
    ``1.0 / x.shape[0]``)."""
    return typ is not None and typ.kind == "array" and not typ.is_float and \
        typ.dtype is not None and typ.dtype.startswith(("int", "uint", "bool"))


def _integral_scalar(expr, types):
    """Whether the integral `expr` reads no array (then float(expr) makes it a float)."""
    return not any(isinstance(n, gast.Name) and types.get(n.id, T.UNKNOWN).kind == "array"
                   for n in gast.walk(expr))


def _scattered_type(base, index):
    """The type of ``base[index]`` for np.add.at's index: one integer or an integer array
    selects along the first axis; other indexes give an array of unknown rank."""
    if base.kind != "array" or base.dims is None:
        return T.array(None)
    if index.kind == "int":
        return T.array(base.dims[1:])
    if index.kind == "array" and index.dims is not None:
        return T.array(index.dims + base.dims[1:])
    return T.array(None)


def _hand_to_elements(adj, value, held, typ, active):
    """The adjoint of the tuple `value` (of type `typ`), held in the name `held`, handed on
    element by element: to each active name of a tuple written out (``(a, b)``), or into the
    tuple adjoint of a tuple-valued name."""
    kinds = typ.elts if typ.kind == "tuple" and typ.elts else ()
    if isinstance(value, gast.Name):
        if value.id in active:
            for k in range(len(kinds)):
                adj.add_to_tuple(value.id, k, fill("h[k]", h=held, k=k))
        return
    for k, e in enumerate(value.elts):
        if isinstance(e, gast.Name) and e.id in active:
            adj.add(e.id, fill("h[k]", h=held, k=k),
                    kinds[k] if k < len(kinds) else adj.type_of(e.id))


def _stacked_once(core):
    """Lists whose adjoint can be one array: stacked (np.stack/np.array) by exactly one
    statement, not appended to, popped from nor written into after it in its block, and
    either at the top level of the function or made anew (`xs = []`) earlier in the same block
    (a list per loop step, stacked once). A list stacked in the loop that grows it, or by
    several statements, keeps a list adjoint (one entry per element), each stack adding its
    rows into the entries."""
    stacks = {}
    for stmt in walk_statements(core.body):
        if not isinstance(stmt, CONTROL) and stmt.prim.kind == "rule" and \
                stmt.prim.rule.name in ("stack", "array") and \
                isinstance(stmt.prim.call.args.get("arrays"), gast.Name):
            stacks.setdefault(stmt.prim.call.args["arrays"].id, []).append(stmt)
    out = set()
    for lst, found in stacks.items():
        if len(found) != 1:
            continue
        block, k = _block_of(core.body, found[0])
        if block is None:
            continue
        if any(not isinstance(s, CONTROL) and s.prim.kind in ("append", "pop", "setitem") and
               s.prim.base == lst for s in walk_statements(block[k + 1:])):
            continue
        if block is not core.body and not any(
                not isinstance(s, CONTROL) and s.prim.kind == "list_new" and
                lst in _stmt_targets(s) for s in block[:k]):
            continue
        out.add(lst)
    return out


def _block_of(stmts, target):
    """(the statement list holding `target`, its index there), or (None, None)."""
    for k, stmt in enumerate(stmts):
        if stmt is target:
            return stmts, k
        if isinstance(stmt, CONTROL):
            for inner in (stmt.body, stmt.orelse):
                found = _block_of(inner, target)
                if found[0] is not None:
                    return found
    return None, None


def _zero_expr(expr):
    """Whether `expr` is a zero written by :func:`_zero_of` (0.0 or np.zeros_like(...))."""
    if isinstance(expr, gast.Constant):
        return expr.value == 0
    return isinstance(expr, gast.Call) and unparse(expr.func) == "np.zeros_like"


def _zero_of(expr, typ):
    """A zero adjoint for the value `expr` of type `typ`."""
    if typ.kind == "array" or typ.kind == "unknown":
        return fill("np.zeros_like(v)", v=expr)
    if typ.kind == "list":
        return fill("[0.0] * len(v)", v=expr)
    if typ.kind == "tuple" and typ.elts is not None:
        return gast.Tuple(elts=[_zero_of(fill("v[k]", v=expr, k=k), e)
                                for k, e in enumerate(typ.elts)], ctx=gast.Load())
    return fill("0.0")


def _tuple_part(adj, t):
    """The adjoint of `t`, an element taken out of a tuple (unpacked or indexed), as the
    tuple's part: at the element's full shape (a helper's backward function gets the parts
    as its outputs' cotangents; a part held as one number would be added in later as if it
    had that shape), under a name of its own, or the adjoints of a nested tuple's elements."""
    if adj.get(t) is not None and adj.smaller(adj.atypes.get(t, adj.type_of(t)), t):
        adj.materialized(t)
    g = _snapshot(adj, adj.get(t))
    if g is None and adj.type_of(t).kind == "tuple":
        g = _tuple_adjoint(adj, t)
    return g


def _snapshot(adj, g):
    """An adjoint variable's current value under its own name: a tuple keeps its elements'
    adjoints until the tuple's producer is reached, and inside a loop the variable itself is
    reset before that (the overwritten value gets a fresh adjoint). Tidying inlines it back
    where nothing intervenes."""
    if not isinstance(g, gast.Name):
        return g
    snap = adj.namer.temp(g.id)
    adj.out.append(assign(snap, g))
    return name(snap)


def _reverse_setitem(stmt, adj, active, core):
    """``y[i] = v``: v's adjoint gets ``y_bar[i]``, then ``y_bar[i]`` is zeroed (overwritten)."""
    from .normalize import index_type
    prim = stmt.prim
    base, index, value = prim.base, prim.rule, prim.args[0]
    if adj.get(base) is None:
        return
    current = adj.materialized(base)
    bar = adj.namer.adjoint(base)
    if bar not in adj.owned or not (isinstance(current, gast.Name) and current.id == bar):
        adj.out.append(assign(bar, fill("c.copy()", c=current)))
        adj.owned.add(bar)
        adj.exprs[base] = name(bar)
    base_type = adj.type_of(base)
    part_type = base_type.elts[0] if base_type.kind == "list" and base_type.elts else \
        index_type(base_type, index, core.types)
    part = gast.Subscript(value=name(bar), slice=to_expr(index), ctx=gast.Load())
    zero = gast.Subscript(value=name(bar), slice=to_expr(index), ctx=gast.Store())
    if part_type.kind == "tuple" and part_type.elts is not None:
        # an entry of a list of tuples: each element's adjoint to the element's value, then
        # the entry back to a tuple of zeros
        names = value.elts if isinstance(value, gast.Tuple) else [value]
        if any(isinstance(e, gast.Name) and e.id in active for e in names):
            held = adj.namer.temp(f"{bar}_entry")
            adj.out.append(assign(held, part))
            _hand_to_elements(adj, value, held, part_type, active)
        entry = gast.Subscript(value=name(base), slice=to_expr(index), ctx=gast.Load())
        adj.out.append(gast.Assign(targets=[zero], value=_zero_of(entry, part_type),
                                   type_comment=None))
        return
    if isinstance(value, gast.Name) and value.id in active:
        if base_type.kind == "array":
            keep = _last_write_mask(index, base_type, bar, core.types)
            if keep is not None:
                # integer arrays may repeat a position: only its last write reaches y
                part = keep(part)
                adj.helpers.add("last_writes")
                if "along_axes" in unparse(part):
                    adj.helpers.add("along_axes")
        adj.add(value.id, part, part_type, view=part_type.kind == "array")
    adj.out.append(gast.Assign(targets=[zero], value=fill("0.0"), type_comment=None))


def _last_write_mask(index, base_type, bar, types):
    """For ``y[index] = v`` whose index holds integer arrays: a function taking the written
    values' cotangent ``y_bar[index]`` to that cotangent with zeros where a later write names
    the same element, or None when the index holds no integer array (no position repeats).

    Of repeated writes NumPy keeps the last (``y[r, c] = v`` and the buffered ``y[r, c] += v``
    alike), so only that write reaches y. The integer arrays (a list of integers, a boolean
    mask's ``np.nonzero``) are combined into one number per write, its position in the axes
    they index (``r % n0 * n1 + c % n1``: negative indices wrapped), and ``last_writes``
    marks the last write of each number. Integers and slices in the index pick the same
    elements for every write, so they take no part; the mask gets a new axis for each axis of
    ``y_bar[index]`` after the block of written positions (counted where the code runs,
    by ``along_axes``, when y's rank is unknown). None too for an index not understood."""
    parts = index.elts if isinstance(index, gast.Tuple) else [index]
    rank = base_type.ndim if base_type.dims is not None else None
    kinds = []  # (kind, the axes of y it takes, the integer arrays it stands for)
    for p in parts:
        if isinstance(p, gast.Slice):
            kinds.append(("slice", 1, []))
        elif isinstance(p, gast.Constant) and p.value is None:
            kinds.append(("new", 0, []))
        elif isinstance(p, gast.Constant) and p.value is Ellipsis:
            kinds.append(("ellipsis", None, []))
        elif isinstance(p, gast.List) and p.elts and all(
                isinstance(e, gast.Constant) and type(e.value) is int for e in p.elts):
            kinds.append(("array", 1, [fill("np.array(i)", i=p)]))
        else:
            t = atom_type(p, types)
            if t.kind == "int":
                kinds.append(("int", 1, []))
            elif t.kind == "array" and t.dtype is not None and \
                    t.dtype.startswith(("int", "uint")):
                kinds.append(("array", 1, [p]))
            elif t.kind == "array" and t.dtype == "bool" and t.dims is not None:
                kinds.append(("mask", t.ndim,
                              [fill(f"np.nonzero(m)[{k}]", m=p) for k in range(t.ndim)]))
            else:
                return None
    if not any(k == "array" for k, _, _ in kinds):
        return None
    ellipsis = any(k == "ellipsis" for k, _, _ in kinds)
    consumed = sum(w for k, w, _ in kinds if k != "ellipsis")
    skipped = rank - consumed if rank is not None else None
    if ellipsis and skipped is None:
        return None
    # NumPy puts the block of written positions where its indices stand when they are
    # adjacent, first otherwise: the mask needs a new axis for each output axis after it
    advanced = [j for j, (k, _, _) in enumerate(kinds) if k in ("array", "int", "mask")]
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1))
    arrays, axis, after = [], 0, 0
    for j, (k, width, indices) in enumerate(kinds):
        width = skipped if k == "ellipsis" else width
        arrays.extend((i, axis + d) for d, i in enumerate(indices))
        if k in ("slice", "new", "ellipsis") and (not adjacent or j > advanced[-1]):
            after += 1 if k == "new" else width
        axis += width
    trailing = after if ellipsis else after + skipped if skipped is not None else None
    length = "b.shape[{}]".format
    positions = None
    for i, ax in arrays:
        wrapped = fill(f"i % {length(ax)}", i=i, b=name(bar))
        positions = wrapped if positions is None else \
            fill(f"q * {length(ax)} + w", q=positions, w=wrapped, b=name(bar))
    keep = fill("last_writes(q)", q=positions)
    if trailing is None:
        # y's rank is unknown (code written for any rank): its axes the index leaves are
        # counted where the code runs
        keep = fill(f"along_axes(k, b.ndim - {consumed - after})", k=keep, b=name(bar))
        return lambda part: fill("p * k", p=part, k=keep)
    if trailing:
        keep = gast.Subscript(value=keep, slice=gast.Tuple(
            elts=[gast.Constant(value=Ellipsis, kind=None)] +
            [gast.Constant(value=None, kind=None)] * trailing, ctx=gast.Load()),
            ctx=gast.Load())
    return lambda part: fill("p * k", p=part, k=keep)


def _reverse_rule(stmt, adj, active, core):
    prim = stmt.prim
    rule = prim.rule
    target = _stmt_targets(stmt)
    call = prim.call
    call = PrimCall(rule, call.args, call.types, name(target[0]) if len(target) == 1 else
                    None, call.out_type, call.keywords)
    out_t = core.types.get(target[0]) if target else T.UNKNOWN
    if out_t is not None and out_t.kind == "tuple" and len(target) == 1:
        g = adj.tuples.get(target[0])
        if g is None:
            return
        if rule.name == "getitem" and call.types.get("x", T.UNKNOWN).kind == "list":
            g = _tuple_adjoint(adj, target[0])  # an entry of a list of tuples: added into
            if g is None:                       # the list's adjoint as one tuple
                return
        if rule.name == "add" and all(call.types.get(p, T.UNKNOWN).kind == "tuple" and
                                      call.types[p].elts is not None for p in ("a", "b")):
            # `c = a + b` joins two tuples: c's element adjoints go back to their halves
            offset = len(call.types["a"].elts)
            for k, part in enumerate(g):
                p, j = ("a", k) if k < offset else ("b", k - offset)
                atom = call.args[p]
                if part is None:
                    continue
                if isinstance(atom, gast.Name) and atom.id in active:
                    adj.add_to_tuple(atom.id, j, part)
                elif isinstance(atom, gast.Tuple) and isinstance(atom.elts[j], gast.Name) \
                        and atom.elts[j].id in active:
                    adj.add(atom.elts[j].id, part, call.types[p].elts[j])
            return
    else:
        g = adj.get(target[0]) if rule.name in _ELEMENTWISE_OK else adj.materialized(target[0])
        if g is None:
            return
    arrays = call.args.get("arrays")
    if rule.name in ("stack", "array") and isinstance(arrays, gast.Name) and \
            call.types["arrays"].kind == "list":
        if arrays.id in active and arrays.id in adj.array_lists:
            # np.stack(items) of a list built with append: the list's adjoint is g itself;
            # each append takes its row back in the backward sweep.
            adj.exprs[arrays.id] = to_expr(g)
        elif arrays.id in active:  # stacked more than once: each row into its entry
            adj.add_rows(arrays.id, g)
        return
    if rule.vjp is None:
        raise _missing(stmt, core, rule)
    result = rule.vjp(call, g)
    if call.unknown_option() is not None:
        raise runtime_option_error(stmt, core, rule, call.unknown_option())
    if result is None:
        raise _missing(stmt, core, rule, "for these argument ranks or options", call.refusal)
    if rule.name in _ELEMENTWISE_OK and _lazy_undercounts(adj, call, target[0], result, active):
        result = rule.vjp(call, adj.materialized(target[0]))
    result, renames = _lets_apart(rule, call, g, result, core)
    lets = result.pop("__let__", [])
    _merge_twin_contributions(result, call)
    adj.helpers |= _helpers_called([e for _, e in lets] + [c[0] for c in result.values()])
    for local, expr in lets:  # (a let may read the lets before it)
        if renames:
            expr = fill(unparse(expr), **renames)
        fresh = core.namer.temp(local)
        renames[local] = fresh
        adj.out.append(assign(fresh, expr))
    for param, contribution in result.items():
        if isinstance(param, tuple):
            atom = call.args[param[0]].elts[param[1]]
        else:
            atom = call.args.get(param)
        if not isinstance(atom, gast.Name) or atom.id not in active:
            continue
        expr, ctype = contribution
        if expr == "scatter":
            index = fill(unparse(ctype), **renames) if renames else ctype
            adj.scatter(atom.id, index, g, _advanced(index, core.types))
            continue
        if renames:
            expr = fill(unparse(expr), **{k: v for k, v in renames.items()})
        adj.add(atom.id, expr, ctype)


def _lets_apart(rule, call, g, result, core):
    """(result, renames): a rule's temporaries (``__let__``) kept apart from the names its
    call reads. A rule names a temporary after what it holds, so in a gradient differentiated
    again the call may read a name the first sweep's temporary got (np.convolve's `convolve_g`
    is then convolve's argument): renaming the temporary would rename that argument too,
    silently. The rule is then asked again with those names read under aliases, which
    `renames` (given to every expression after the lets are bound) turns back."""
    lets = result.get("__let__")
    if not lets:
        return result, {}

    def names(value):  # (g is a list, None where a tuple output has no cotangent)
        if isinstance(value, (list, tuple)):
            return {n for v in value for n in names(v)}
        if isinstance(value, str):
            return {value} if value.isidentifier() else set()
        if isinstance(value, gast.AST):
            return {n.id for n in gast.walk(value) if isinstance(n, gast.Name)}
        return set()
    read = names(list(call.args.values()) + [g, call.out])
    clash = {local for local, _ in lets} & read
    if not clash:
        return result, {}
    from .rules.batching import replace_names
    aliases = {n: core.namer.temp(f"{n}_read") for n in sorted(clash)}
    subs = {n: name(a) for n, a in aliases.items()}

    def aliased(value):
        if isinstance(value, list):
            return [aliased(v) for v in value]
        if isinstance(value, str):
            return aliases.get(value, value)
        return replace_names(value, subs) if isinstance(value, gast.AST) else value
    apart = PrimCall(rule, {p: aliased(e) for p, e in call.args.items()}, call.types,
                     aliased(call.out), call.out_type, call.keywords)
    return rule.vjp(apart, aliased(g)), {a: name(n) for n, a in aliases.items()}


def _merge_twin_contributions(result, call):
    """Two parameters given the same name (``x * x``) with equal contributions (``g * x``
    twice) get one, doubled: ``x_bar += 2.0 * (g * x)`` is one pass and no temporary array,
    where two updates are two of each. `result` changes in place.

    >>> from autodiff_ast.templates import unparse
    >>> x, g = gast.parse("x", mode="eval").body, fill("g * x", g="g", x="x")
    >>> call = PrimCall(None, {"x1": x, "x2": x}, {}, None, None)
    >>> result = {"x1": (g, None), "x2": (fill("g * x", g="g", x="x"), None)}
    >>> _merge_twin_contributions(result, call)
    >>> [(p, unparse(e)) for p, (e, _) in result.items()]
    [('x1', '2.0 * (g * x)')]
    """
    seen = {}
    for param in [p for p in result if isinstance(p, str)]:
        atom = call.args.get(param)
        expr, ctype = result[param]
        if not isinstance(atom, gast.Name) or isinstance(expr, str):
            continue
        first = seen.get(atom.id)
        if first is None:
            seen[atom.id] = param
            continue
        expr_1, ctype_1 = result[first]
        if ctype_1 == ctype and unparse(expr_1) == unparse(expr):
            result[first] = (fill("2.0 * e", e=expr_1), ctype_1)
            del result[param]


def _lazy_undercounts(adj, call, out, result, active):
    """Whether a cotangent held lazily (with fewer axes than `out`) would give a wrong sum.

    A parameter broadcast along an axis of the output must receive the sum of the cotangent
    over that axis; when neither the lazy cotangent nor the rest of the contribution varies
    along it (``np.sum(x + y)``, x of shape (1, n), y of shape (m, 1)), only the full-shape
    cotangent counts the m repeats.
    """
    out_t = adj.type_of(out)
    if out_t.kind != "array" or not adj.smaller(adj.atypes.get(out, out_t), out):
        return False  # not lazy (smaller() is False for unknown ranks: see below)
    for param, contribution in result.items():
        atom = call.args.get(param) if isinstance(param, str) else None
        if not isinstance(atom, gast.Name) or atom.id not in active:
            continue
        expr, ctype = contribution
        ctype = ctype or adj.expr_type(expr)
        ptype = adj.type_of(atom.id)
        dims = [t.dims if t.kind == "array" else () for t in (out_t, ptype, ctype)]
        if any(d is None for d in dims):
            return True
        odims, pdims, cdims = dims
        for i, size in enumerate(odims):
            k, j = i - len(odims) + len(pdims), i - len(odims) + len(cdims)
            if size == T.N and (k < 0 or pdims[k] == 1) and (j < 0 or cdims[j] == 1):
                return True
    return False


def _helpers_called(exprs):
    """Names of emitted helpers (codegen.helpers) that rule expressions call."""
    from codegen.helpers import HELPERS
    return {node.func.id for e in exprs if isinstance(e, gast.AST) for node in gast.walk(e)
            if isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id in HELPERS}


def runtime_option_error(stmt, core, rule, param):
    """The error for a template that needs `param` (an axis, a count) where the code is
    generated, given a value only known at run time."""
    message, hint = runtime_option_message(rule, param)
    return core.info.error(MissingRuleError, message, stmt.origin, hint)


def _missing(stmt, core, rule, detail="", refusal=None):
    what = rule.emit or rule.name
    if refusal is not None:  # (the rule's own words: PrimCall.refuse)
        return core.info.error(MissingRuleError, refusal[0], stmt.origin, refusal[1])
    call = stmt.prim.call
    types_ = [] if call is None else [e for t in call.types.values()
                                      for e in (t.elts if t.kind == "tuple" and t.elts else [t])]
    if detail and any(t.kind == "array" and t.dims is None for t in types_):
        # rank-generic code (the command line without a signature) cannot pick the template
        return core.info.error(
            MissingRuleError, f"{what} needs the rank of its arguments to be differentiated",
            stmt.origin, "give the argument types: autodiff-ast --signature "
            "\"x=float64[N,N], ...\" or annotations such as x: \"float64[N]\"")
    return core.info.error(MissingRuleError, f"{what} has no reverse-mode rule {detail}".strip(),
                           stmt.origin, "rewrite it with supported functions, or register a "
                           "rule (see docs/adding-a-rule.md)")


def _defining(expr, stmts):
    """The value last assigned to `expr` in `stmts` when it is a name assigned there."""
    if isinstance(expr, gast.Name):
        for stmt in reversed(stmts):
            targets = getattr(stmt, "targets", None)
            if targets and len(targets) == 1 and isinstance(targets[0], gast.Name) and \
                    targets[0].id == expr.id:
                return stmt.value
    return expr


def _int_factor(expr, types):
    """True when `expr` is a product (or negation) with an integer factor: tidying may fold
    its float factors away (``-1.0 * n`` is written ``-n``), leaving an int."""
    if isinstance(expr, gast.Constant):
        return type(expr.value) is int
    if isinstance(expr, gast.Name):
        return types.get(expr.id, T.UNKNOWN).kind == "int"
    if isinstance(expr, gast.UnaryOp):
        return isinstance(expr.op, gast.USub) and _int_factor(expr.operand, types)
    if isinstance(expr, gast.BinOp) and isinstance(expr.op, gast.Mult):
        return _int_factor(expr.left, types) or _int_factor(expr.right, types)
    return False


def _reverse_user_call(stmt, adj, active, core, registry, in_loop=False):
    prim = stmt.prim
    callee = prim.callee
    target = _stmt_targets(stmt)[0]
    flat_args = prim.args
    def carries(a):  # a name with an adjoint, or a tuple written out holding one
        if isinstance(a, gast.Tuple):
            return any(isinstance(e, gast.Name) and e.id in active for e in a.elts)
        return isinstance(a, gast.Name) and a.id in active
    active_callee = [p for p, a in zip(callee.params, flat_args) if carries(a)]
    if not active_callee:
        return None
    split = registry.split(callee, active_callee, recompute=in_loop)
    out_t = core.types.get(target, T.UNKNOWN)
    if out_t.kind == "tuple":
        parts = adj.tuples.get(target)
        if parts is None:
            return None
        elts = out_t.elts or ()
        gs = [p if p is not None else _zero_of(fill("t[k]", t=target, k=k),
                                               elts[k] if k < len(elts) else T.UNKNOWN)
              for k, p in enumerate(parts)]
    else:
        # the helper's backward function expects a cotangent of its output's full shape
        g = adj.materialized(target)
        if g is None:
            return None
        gs = [g]
        if out_t.kind == "float" and _int_factor(_defining(g, adj.out), core.types):
            # `n * f(x)` gives f's cotangent `n`: a float keeps f_bwd to one compiled
            # signature when it is also called with a float cotangent
            gs = [fill("float(g)", g=g)]
    # Forward: call the helper's forward function, keeping its residuals under local names.
    replacement = None
    residual_locals = []
    if split.residuals:
        residual_locals = [core.namer.fresh(r) for r in split.residuals]
        for r, local in zip(split.residuals, residual_locals):
            if r in callee.types:
                core.types.setdefault(local, callee.types[r])
        call = gast.Call(func=name(split.fwd_name), args=list(stmt.value.args), keywords=[])
        replacement = assign([target] + residual_locals, call)
        replacement.prim = stmt.prim
        replacement.origin = stmt.origin
        replacement.info = stmt.info
        gast.copy_location(replacement, stmt)
    param_to_arg = dict(zip(callee.params, flat_args))
    args = [to_expr(param_to_arg[p]) for p in split.bwd_params]
    args += [name(r) for r in residual_locals] + [to_expr(x) for x in gs]
    outs = []
    for p in active_callee:
        atom = param_to_arg[p]
        outs.append(core.namer.temp(f"{atom.id if isinstance(atom, gast.Name) else p}_bar_part"))
    if in_loop and residual_locals:
        # Each iteration's residuals are pushed after the call and popped before its
        # backward call (the names are fresh: nothing else reads or overwrites them).
        replacement.tapes = [(core.namer.derived(r, "tape"), r) for r in residual_locals]
        for tape, r in replacement.tapes:
            adj.out.append(assign(r, fill("t.pop()", t=tape)))
    call = gast.Call(func=name(split.bwd_name), args=args, keywords=[])
    adj.out.append(assign(outs if len(outs) > 1 else outs[0], call))
    for p, local in zip(active_callee, outs):
        atom = param_to_arg[p]
        t = callee.types.get(p, T.UNKNOWN)
        if isinstance(atom, gast.Tuple):  # `f((a, b))`: each element's part to its name
            for k, e in enumerate(atom.elts):
                if isinstance(e, gast.Name) and e.id in active:
                    adj.add(e.id, fill("b[k]", b=local, k=k), atom_type(e, core.types))
            continue
        if T.flat_tuple(t):  # a tuple's adjoint, element by element
            for k in range(len(t.elts)):
                adj.add_to_tuple(atom.id, k, fill("b[k]", b=local, k=k))
            continue
        adj.add(atom.id, name(local), t)
    return replacement
