"""The batching transformation on the core form: one core function for one choice of batched
parameters becomes a function that processes the whole batch at once.

Two passes. *Analysis* finds, to a fixed point through loops and branches, which names hold a
batch (flow-insensitively: a name written anywhere with a batched value is batched everywhere,
so a loop-carried ``s = 0.0`` becomes one zero per example). *Emission* rewrites each statement
with its primitive's batching rule (:mod:`autodiff_ast.rules.batching`), batch axis first:

- loops whose trip count is the same for every example stay loops (over positions);
- a branch whose test differs between examples becomes a *select*: both branches run on the
  whole batch and ``np.where`` keeps each example's result (only when the branches are
  straight-line code without in-place writes, so running both is harmless);
- an in-place write ``y[i] = v`` becomes a write into every example's row (a scatter when ``i``
  differs per example);
- a primitive with no vectorized form runs once per example for that one statement;
- anything else that depends on a batched value (a loop whose trip count differs per example,
  a statement kind we do not know) makes the whole function a *per-example loop variant*, a
  ``for i in range(n_batch)`` loop calling the per-example function. The generated source
  says which variant it chose and why.

>>> import numpy as np
>>> from autodiff_ast.frontend import parse_function
>>> from autodiff_ast.normalize import Program, normalize_into, spec_of
>>> from autodiff_ast.templates import unparse
>>> def relu(x):
...     if x > 0.0:
...         y = x
...     else:
...         y = 0.0
...     return y
>>> program = Program(reserved={"np"})
>>> core = normalize_into(program, parse_function(relu), {"x": spec_of(1.0)})
>>> result = FunctionBatcher(ModuleBatcher(program), core, (True,)).run()
>>> result.variant, [unparse(s) for s in result.body][-1]
('vectorized', 'y = np.where(x > 0.0, y_then, y_else)')
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import gast

from codegen.emit import comment, function, is_marker

from . import types as T
from .debug import is_generated_file
from .naming import Namer
from .normalize import atom_type, index_type
from .rules import PrimCall, Rule, by_name
from .rules import batching as R
from .templates import assign, fill, name, to_expr, unparse
from .tidy import calls_effects, tidy_block

CONTROL = (gast.If, gast.For, gast.While)
_PURE_KINDS = ("rule", "copy", "nondiff", "unpack", "tuple", "tuple_get", "user")


class PerExampleLoop(Exception):
    """Raised while batching a function that needs the per-example loop variant."""

    def __init__(self, reason, node=None):
        super().__init__(reason)
        self.reason = reason
        self.node = node


# ---------------------------------------------------------------- batch flags
# A name's flag is True (batched: batch axis first), False (the same for every example) or,
# for tuples, a tuple of flags, one per element.
def flag_any(flag):
    """Whether a flag (or any element of a tuple flag) is batched."""
    if isinstance(flag, tuple):
        return any(flag_any(f) for f in flag)
    return bool(flag)


def _merge(old, new):
    """The flag of a name given both flags: a plain False (unbatched, from a pass that saw
    no batched input yet: a call's output, say) takes the other as it is, a tuple's
    elements merge one by one, and anything else is batched if either is.

    >>> _merge(False, (False, True)), _merge((True, False), (False, False))
    ((False, True), (True, False))
    """
    if old is None or old is False:
        return new
    if new is False:
        return old
    if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new):
        return tuple(_merge(a, b) for a, b in zip(old, new))
    return flag_any(old) or flag_any(new)


#: Batchings of a recursive function, each with the output flags the last one found, before
#: it gives up on the vectorized form.
_MAX_ASSUMPTIONS = 8


def _grown(old, new):
    """Flags `old` turned True wherever `new`'s are, in `new`'s structure (a flag stands for
    every flag of a tuple in its place).

    >>> _grown((False, False), ((False, True), False))
    ((False, True), False)
    >>> _grown((True, False), ((False, False), False))
    ((True, True), False)
    """
    if isinstance(new, tuple):
        olds = old if isinstance(old, tuple) and len(old) == len(new) else (old,) * len(new)
        return tuple(_grown(o, n) for o, n in zip(olds, new))
    return flag_any(old) or flag_any(new)


def loads(node):
    """Names a node reads."""
    return [n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load)]


_ALLOCATIONS = {"zeros", "ones", "empty", "full"}


def _zero_size_names(body):
    """Names assigned an array of a constant zero-size shape (``np.zeros((0, 1))``) anywhere
    in `body`: reverse mode's placeholder for a value saved in one branch only, or a user's
    empty start."""
    found = set()
    for node in gast.walk(gast.Module(body=list(body), type_ignores=[])):
        if not (isinstance(node, gast.Assign) and len(node.targets) == 1 and
                isinstance(node.targets[0], gast.Name) and isinstance(node.value, gast.Call)):
            continue
        func = node.value.func
        if not (isinstance(func, gast.Attribute) and func.attr in _ALLOCATIONS and
                isinstance(func.value, gast.Name) and func.value.id == "np" and
                node.value.args):
            continue
        shape = node.value.args[0]
        sizes = shape.elts if isinstance(shape, gast.Tuple) else [shape]
        if any(isinstance(d, gast.Constant) and d.value == 0 for d in sizes):
            found.add(node.targets[0].id)
    return found


def _saved_placeholder(core, n, branch, other_block):
    """Whether `n`, set in one branch of `branch` over a zero-size placeholder, is in code
    reverse mode wrote a value saved for the backward function only: returned after the
    primal output (``return (out, n, ...)``), and read nowhere outside the branch that sets
    it."""
    from .reverse import walk_statements
    returns = core.returns
    if not (is_generated_file(core.info.filename) and isinstance(returns, gast.Tuple) and
            n not in loads(returns.elts[0]) and n in loads(returns)):
        return False
    inside = {id(s) for s in walk_statements([branch])} - {id(branch)}
    others = {id(s) for s in walk_statements(other_block)}
    for stmt in walk_statements(core.body):
        if id(stmt) in inside and id(stmt) not in others:
            continue
        read = stmt.test if isinstance(stmt, (gast.If, gast.While)) else \
            stmt.iter if isinstance(stmt, gast.For) else stmt
        if n in loads(read):
            return False
    return True


def _stores(node):
    return [n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Store)]


def clone(node):
    """A copy of a gast tree without the attributes the passes hang on it (prim, info)."""
    if isinstance(node, list):
        return [clone(n) for n in node]
    if not isinstance(node, gast.AST):
        return node
    new = type(node)(**{f: clone(getattr(node, f, None)) for f in node._fields})
    return gast.copy_location(new, node)


def _effect(stmt):
    """A raise or a print: a statement run for what it does, binding nothing."""
    return isinstance(stmt, gast.Raise) or (
        isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and
        isinstance(stmt.value.func, gast.Name) and stmt.value.func.id == "print")


def _tag(new, old):
    new.origin = getattr(old, "origin", None)
    if calls_effects(old):
        new.calls_effects = True  # (tidying must not drop a call that may raise or print)
    return gast.copy_location(new, old) if hasattr(old, "lineno") else new


_DTYPES = {"float64": "np.float64", "float32": "np.float32", "int64": "np.int64",
           "int32": "np.int32", "bool": "np.bool_"}


def batch_size_of(batched, types):
    """The batch size, read off the first batched parameter that is an array (a batched list,
    such as a tape of batched values, or a tuple, holds it in each element)."""
    arrays = [p for p in batched if types.get(p, T.UNKNOWN).kind not in ("list", "tuple")]
    if arrays:
        return fill("x.shape[0]", x=arrays[0])
    return fill("x[0].shape[0]", x=batched[0])


def empty_for(first, typ, n_batch):
    """``np.empty`` holding one value per example, shaped like `first` (the first example's).
    """
    dtype = _DTYPES.get(typ.dtype or "float64", "np.float64")
    if typ.ndim == 0:
        return fill(f"np.empty(n, dtype={dtype})", n=n_batch)
    return fill(f"np.empty((n,) + f.shape, dtype={dtype})", n=n_batch, f=first)


def wrap(text, width=84):
    """`text` as lines of at most `width` characters (for generated comments)."""
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return lines


def line_of(core, node):
    """``line 12: `code``` for a node of the user's source."""
    info = core.info
    line = info.file_line(node) if node is not None else None
    text = info.source_line(node) if node is not None else ""
    where = f"line {line}" if line else "a generated line"
    return f"{where}: `{text}`" if text else where


# ---------------------------------------------------------------- one function
@dataclass
class BatchedBody:
    """A core function's batched body, before it becomes a FunctionDef."""

    body: list
    returns: list  # return expressions
    out_flags: tuple  # per returned value: whether it is batched
    variant: str  # 'vectorized' or 'loop'
    reason: str = ""
    uses_n_batch: bool = False
    types: dict = field(default_factory=dict)  # of names the variant binds for its outputs


class FunctionBatcher:
    """Batches one core function for one choice of batched parameters (`pattern`)."""

    def __init__(self, module, core, pattern):
        self.module = module
        self.core = core
        self.types = core.types
        self.params = dict(zip(core.params, pattern))
        self.n_batch, self.index = module.names_for(core)
        self.flags = {}
        self.loop_reasons = []
        # (reason, user node) of a value whose shape differs between examples: the function
        # runs per example, and its outputs' shapes are checked as they are stacked
        self.dynamic_shape = None

    # -- analysis
    def analyze(self):
        """Which names hold a batch, to a fixed point; records why a loop variant is needed."""
        flags = {p: bool(b) for p, b in self.params.items()}
        while True:
            before = dict(flags)
            self.loop_reasons = []
            self._analyze_block(self.core.body, flags, False)
            if flags == before:
                break
        self.flags = flags
        return flags

    def batch_message(self, stmt):
        """A raise or print shows the batch's values: ``format(v, '.3f')`` of a batched v
        (an array here, which takes no such spec) becomes ``str(v)``."""
        for node in gast.walk(stmt):
            if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
                    node.func.id == "format" and len(node.args) == 2 and \
                    flag_any(self.flag(node.args[0])):
                node.func.id = "str"
                node.args = node.args[:1]
        return stmt

    def flag(self, expr, flags=None):
        flags = self.flags if flags is None else flags
        if isinstance(expr, gast.Name):
            return flags.get(expr.id, False)
        if isinstance(expr, (gast.Tuple, gast.List)):
            return tuple(self.flag(e, flags) for e in expr.elts)
        return any(flag_any(flags.get(n, False)) for n in loads(expr))

    def _set(self, flags, target, flag):
        if isinstance(target, gast.Name):
            flags[target.id] = _merge(flags.get(target.id), flag)
        elif isinstance(target, (gast.Tuple, gast.List)):
            parts = flag if isinstance(flag, tuple) and len(flag) == len(target.elts) else \
                (flag_any(flag),) * len(target.elts)
            for t, f in zip(target.elts, parts):
                self._set(flags, t, f)

    def _analyze_block(self, stmts, flags, control):
        for stmt in stmts:
            prim = getattr(stmt, "prim", None)
            kind = prim.kind if prim is not None else None
            if isinstance(stmt, CONTROL):
                self._analyze_control(stmt, flags, control)
            elif kind == "setitem":
                varies = flag_any(self.flag(stmt.value, flags)) or \
                    flag_any(self.flag(stmt.targets[0].slice, flags)) or control
                if varies:
                    flags[prim.base] = True
            elif kind == "append":
                if flag_any(self.flag(stmt.value.args[0], flags)) or control:
                    flags[prim.base] = True
            elif kind == "add_at":  # np.add.at(base, index, value) writes into base
                if flag_any(self.flag(prim.args[0], flags)) or \
                        flag_any(self.flag(prim.rule, flags)) or control:
                    flags[prim.base] = True
            elif kind in ("raise", "print"):
                continue  # binds and writes nothing (under a batched test: for any example)
            elif isinstance(stmt, gast.Assign) and prim is not None:
                value = self._value_flag(stmt, prim, flags)
                for target in stmt.targets:
                    self._set(flags, target, True if control else value)
            elif not (is_marker(stmt) or isinstance(stmt, gast.Pass)):
                self.loop_reasons.append((f"{type(stmt).__name__} statements have no "
                                          "batching rule", stmt))
                varies = control or any(flag_any(flags.get(n, False)) for n in loads(stmt))
                written = set(_stores(stmt))
                if isinstance(stmt, gast.Expr):  # a call may write into what it is given
                    written |= {n for n in loads(stmt)
                                if self.types.get(n, T.UNKNOWN).kind in ("array", "list")}
                for n in written:
                    flags[n] = _merge(flags.get(n), varies)

    def _analyze_control(self, stmt, flags, control):
        if isinstance(stmt, gast.If):
            varies = flag_any(self.flag(stmt.test, flags))
            if varies and not self._selectable(stmt):
                self.loop_reasons.append(("the if statement tests a value that differs between "
                                          "examples and its branches write in place, loop or "
                                          "branch again", stmt))
        elif isinstance(stmt, gast.For):
            varies = flag_any(self.flag(stmt.iter, flags))
            if varies:
                self.loop_reasons.append(("the for loop's trip count differs between examples",
                                          stmt))
        else:
            varies = flag_any(self.flag(stmt.test, flags))
            if varies:
                self.loop_reasons.append(("the while loop's condition differs between "
                                          "examples", stmt))
        for block in (stmt.body, stmt.orelse):
            self._analyze_block(block, flags, control or varies)

    @staticmethod
    def _selectable(stmt):
        """Whether both branches may run for every example (straight-line, no writes)."""
        for block in (stmt.body, stmt.orelse):
            for inner in block:
                if is_marker(inner) or isinstance(inner, gast.Pass) or _effect(inner):
                    continue  # (select raises or prints where any example's branch would)
                prim = getattr(inner, "prim", None)
                if not isinstance(inner, gast.Assign) or prim is None or \
                        prim.kind not in _PURE_KINDS:
                    return False
        return True

    def _value_flag(self, stmt, prim, flags):
        value = stmt.value
        kind = prim.kind
        if kind == "list_new":
            return False
        if kind == "unpack":
            return self.flag(prim.args[0], flags) if prim.args else self.flag(value, flags)
        if isinstance(value, (gast.Tuple, gast.List)):
            return self.flag(value, flags)
        if isinstance(value, gast.Subscript) and \
                atom_type(value.value, self.types).kind == "tuple":
            base = self.flag(value.value, flags)
            key = value.slice
            if isinstance(base, tuple) and isinstance(key, gast.Constant) and \
                    isinstance(key.value, int) and -len(base) <= key.value < len(base):
                return base[key.value]
            return flag_any(base)
        if kind == "user":
            pattern = tuple(flag_any(self.flag(a, flags)) for a in prim.args)
            if not any(pattern):
                return False
            try:
                return self.module.batch(prim.callee, pattern).out_flags_value
            except PerExampleLoop as exc:
                self.loop_reasons.append((exc.reason, stmt))
                return True
        if isinstance(value, gast.Attribute) and value.attr in ("shape", "size", "ndim",
                                                                 "dtype"):
            return False
        rule = prim.rule if isinstance(prim.rule, Rule) else None
        if rule is not None and rule.name in R.SHAPE_QUERIES:
            return False
        if rule is not None and rule.name in R.SAME_FOR_EVERY_EXAMPLE:  # psum, pmean, ...
            return False
        if rule is not None and rule.name == "axis_index":  # each example's own position
            return True
        varies = any(flag_any(flags.get(n, False)) for n in loads(value))
        target = stmt.targets[0]
        out = self.types.get(target.id) if isinstance(target, gast.Name) else None
        if out is not None and out.kind == "tuple" and out.elts is not None:
            return (varies,) * len(out.elts)
        return varies

    # -- emission
    def run(self):
        """The batched body: vectorized, or the per-example loop variant when needed."""
        self.analyze()
        returns = self.core.returns
        elts = returns.elts if isinstance(returns, gast.Tuple) else [returns]
        out_flags = tuple(self.flag(e) for e in elts)
        if self.loop_reasons:
            reason, node = self.loop_reasons[0]
            return self.loop_variant(out_flags, reason, node)
        try:
            body = self.params_made_batched() + self.emit_block(self.core.body,
                                                                 set(self.core.params))
        except PerExampleLoop as exc:
            return self.loop_variant(out_flags, exc.reason, exc.node)
        keep = {n for e in elts for n in loads(e)}
        body = [_DoubleTranspose().visit(s) for s in tidy_block(body, keep=keep,
                                                                  temps=self.core.namer)]
        if self.module.quote_lines:
            body = self._with_comments(body)
        uses = any(self.n_batch in loads(s) for s in body)
        return BatchedBody(body, [to_expr(e) for e in elts], out_flags, "vectorized",
                           uses_n_batch=uses)

    def params_made_batched(self):
        """``p = <p repeated per example>`` for each parameter passed unbatched that the body
        makes batched (a loop-carried ``g_bar = g_bar + v_bar`` with v_bar batched): the
        body treats the name as batched from its first line."""
        out = []
        for p, batched in self.params.items():
            typ = self.types.get(p, T.UNKNOWN)
            if batched or not flag_any(self.flags.get(p, False)) or \
                    typ.kind not in ("array", "float", "int", "bool") or typ.ndim is None:
                continue  # (a list keeps its entries: the batched ones are appended)
            out.append(assign(p, R.broadcast_batch(name(p), typ, self.n(), writable=True)))
        return out

    def _with_comments(self, stmts):
        out, last = [], None
        for stmt in stmts:
            origin = getattr(stmt, "origin", None)
            if origin is not None and origin is not last:
                text = self.core.info.source_line(origin)
                if text:
                    out.append(comment(text))
                last = origin
            if isinstance(stmt, CONTROL):
                stmt.body = self._with_comments(stmt.body)
                stmt.orelse = self._with_comments(stmt.orelse)
            out.append(stmt)
        return out

    def batched_names(self):
        return {n for n, f in self.flags.items() if flag_any(f)}

    def n(self):
        return name(self.n_batch)

    def emit_block(self, stmts, defined):
        out = []
        for stmt in stmts:
            out.extend(self.emit_stmt(stmt, defined))
            defined.update(_stores(stmt))
            prim = getattr(stmt, "prim", None)
            if prim is not None and prim.kind in ("setitem", "append"):
                defined.add(prim.base)
        return out

    def emit_stmt(self, stmt, defined):
        prim = getattr(stmt, "prim", None)
        if isinstance(stmt, gast.If):
            if flag_any(self.flag(stmt.test)):
                return self.select(stmt, defined)
            new = gast.If(test=clone(stmt.test), body=self.emit_block(stmt.body, defined),
                          orelse=self.emit_block(stmt.orelse, defined))
            new.body = new.body or [gast.Pass()]
            return [_tag(new, stmt)]
        if isinstance(stmt, gast.For):
            new = gast.For(target=clone(stmt.target), iter=clone(stmt.iter),
                           body=self.emit_block(stmt.body, defined) or [gast.Pass()],
                           orelse=[], type_comment=None)
            return [_tag(new, stmt)]
        if isinstance(stmt, gast.While):
            new = gast.While(test=clone(stmt.test),
                             body=self.emit_block(stmt.body, defined) or [gast.Pass()],
                             orelse=[])
            return [_tag(new, stmt)]
        if is_marker(stmt) or isinstance(stmt, gast.Pass):
            return [stmt]  # (normalize's empty block is a pass marked nondiff)
        if prim is None:
            raise PerExampleLoop(f"{type(stmt).__name__} statements have no batching rule",
                                 stmt)
        if prim.kind == "setitem":
            if not flag_any(self.flags.get(prim.base, False)):  # a write into an unbatched
                return [_tag(clone(stmt), stmt)]                # array stays as it is
            return [_tag(s, stmt) for s in self.setitem(stmt)]
        if prim.kind == "append":
            return [_tag(self.append(stmt), stmt)]
        if prim.kind == "add_at":
            if not flag_any(self.flags.get(prim.base, False)):
                return [_tag(clone(stmt), stmt)]
            return [_tag(s, stmt) for s in self.add_at(stmt)]
        if prim.kind in ("raise", "print"):
            return [_tag(self.batch_message(clone(stmt)), stmt)]
        target = stmt.targets[0]
        target_flag = self.flag(target)
        reads_batched = any(flag_any(self.flags.get(n, False)) for n in loads(stmt.value))
        collective = isinstance(prim.rule, Rule) and \
            prim.rule.name in R.SAME_FOR_EVERY_EXAMPLE  # psum of a constant: n times it
        if prim.kind == "list_new" or (not flag_any(target_flag) and not reads_batched and
                                       not collective):
            return [_tag(clone(stmt), stmt)]
        if not isinstance(target, gast.Name):
            return [_tag(clone(stmt), stmt)]  # unpacking: each element keeps its flag
        value = self.forced(stmt) if not (reads_batched or collective) else self.value(stmt)
        if isinstance(value, list):  # statements: run once per example, or computed then copied
            return [_tag(s, stmt) for s in value]
        return [_tag(assign(target.id, value), stmt)]

    # -- simple statements
    def forced(self, stmt):
        """An unbatched value for a batched name (written in place, or loop-carried, later)."""
        prim = stmt.prim
        target = stmt.targets[0].id
        typ = self.types.get(target, T.UNKNOWN)
        if isinstance(prim.rule, Rule) and prim.call is not None:
            try:
                return R.creator_with_batch(self.batch_call(stmt))
            except R.NoBatchingRule:
                pass
        if isinstance(stmt.value, (gast.Name, gast.Constant)) or typ.ndim == 0:
            return R.broadcast_batch(stmt.value, typ, self.n(), writable=True)
        # Computed once, then one (writable) copy per example (through a temporary: the name
        # keeps one rank, as a module read again must type it)
        once = self.core.namer.fresh(f"{target}_one")
        self.core.namer.temps.add(once)
        return [assign(once, clone(stmt.value)),
                assign(target, R.broadcast_batch(name(once), typ, self.n(), writable=True))]

    def batch_call(self, stmt, call=None, value=None, flags=None, store=False):
        call = call or stmt.prim.call
        if flags is None:
            flags = {}
            for param, atom in call.args.items():
                flag = self.flag(atom)
                if isinstance(flag, tuple) and not isinstance(atom, (gast.Tuple, gast.List)):
                    flag = flag_any(flag)
                flags[param] = flag
        return R.BatchCall(call, value if value is not None else stmt.value, flags, self.n(),
                           self.batched_names(), self.types, store)

    def value(self, stmt):
        prim, value = stmt.prim, stmt.value
        if prim.kind in ("copy", "unpack", "tuple", "tuple_get", "counter") or isinstance(
                value, (gast.Tuple, gast.List, gast.Name, gast.Constant)):
            return clone(value)
        if prim.kind == "pop":  # a batched list holds batched elements (see append)
            return clone(value)
        if isinstance(value, gast.Subscript) and atom_type(value.value, self.types).kind in (
                "tuple", "list"):
            return clone(value)
        if prim.kind == "user":
            pattern = tuple(flag_any(self.flag(a)) for a in prim.args)
            batched = self.module.batch(prim.callee, pattern)
            # (a tuple some of whose entries are batched is passed with all of them batched:
            # the batched helper takes each parameter batched or not as a whole, as a has_aux
            # helper's output cotangents `(np.zeros_like(pred), 0.0)`)
            return gast.Call(func=name(batched.name), args=[
                to_expr(self.all_batched(a, atom_type(a, self.types), self.flag(a)))
                if isinstance(self.flag(a), tuple) and flag_any(self.flag(a)) else to_expr(a)
                for a in prim.args], keywords=[])
        if isinstance(prim.rule, Rule) and prim.call is not None:
            if prim.rule.name in ("array", "stack") and \
                    prim.call.types["arrays"].kind == "list":
                return self.stack_list(stmt)
            return self.rule_value(stmt)
        return self.nondiff_value(stmt)

    def stack_list(self, stmt):
        """np.array/np.stack of a list of batched values (built with append): rows copied into
        one array, in a loop over the list (Numba cannot stack a list of arrays)."""
        call = stmt.prim.call
        target = stmt.targets[0].id
        lst = call.args["arrays"]
        elt = (call.types["arrays"].elts or (T.UNKNOWN,))[0]
        axis = 0 if stmt.prim.rule.name == "array" else call.const("axis", 0)
        rank = elt.ndim
        if rank is None or not isinstance(axis, int) or stmt.prim.call.const("dtype"):
            return self.rule_value(stmt)
        axis %= rank + 1
        dims = [fill("e[0].shape[a]", e=lst, a=a) for a in range(1, rank + 1)]
        shape = [self.n()] + dims[:axis] + [fill("len(e)", e=lst)] + dims[axis:]
        dtype = _DTYPES.get(elt.dtype or "float64", "np.float64")
        k = self.index
        row = gast.Subscript(value=name(target), slice=gast.Tuple(
            elts=[R._slice() for _ in range(axis + 1)] + [name(k)], ctx=gast.Load()),
            ctx=gast.Store())
        loop = gast.For(target=name(k, store=True), iter=fill("range(len(e))", e=lst),
                        body=[gast.Assign(targets=[row], value=R.subscript(lst, [name(k)]),
                                          type_comment=None)], orelse=[], type_comment=None)
        alloc = fill(f"np.empty(s, dtype={dtype})", s=gast.Tuple(elts=shape, ctx=gast.Load()))
        return [assign(target, alloc), loop]

    def rule_value(self, stmt, call=None, value=None):
        bc = self.batch_call(stmt, call, value)
        try:
            batched = R.batch(bc)
        except R.ValueDependentShape as exc:
            # (an intermediate of a shape of its own per example, `x[x > 0]` summed: each
            # example runs on its own; an output of such a shape is refused as it is stacked)
            self.dynamic_shape = (str(exc), stmt.origin)
            raise PerExampleLoop(f"{exc}, a shape that differs between examples",
                                 stmt.origin) from None
        except R.NoBatchingRule as exc:
            return self.statement_loop(stmt, str(exc))
        option = bc.call.unknown_option() if bc.call is not None else None
        if option is not None:
            # the rule (and the type rule before it) read an option, an axis say, that is
            # only known at run time as its default: refused, as the sweeps refuse it
            from .reverse import runtime_option_error
            raise runtime_option_error(stmt, self.core, stmt.prim.rule, option)
        return batched

    def nondiff_value(self, stmt):
        value = stmt.value
        names = self.batched_names()
        if isinstance(value, gast.Attribute) and value.attr in ("shape", "size", "ndim",
                                                                 "dtype"):
            return self.attribute(value)
        if isinstance(value, gast.Compare):
            rank = self.types.get(stmt.targets[0].id, T.UNKNOWN).ndim
            if rank is None:
                return self.statement_loop(stmt, "a comparison of unknown rank")
            subs = {}
            for operand in [value.left] + list(value.comparators):
                if isinstance(operand, gast.Name) and operand.id in names:
                    own = atom_type(operand, self.types).ndim or 0
                    subs[operand.id] = R.expand_after_batch(operand, rank - own)
            return R.replace_names(value, subs)
        if isinstance(value, gast.BoolOp):
            func = "np.logical_and" if isinstance(value.op, gast.And) else "np.logical_or"
            total = to_expr(value.values[0])
            for v in value.values[1:]:
                total = fill(f"{func}(a, b)", a=total, b=v)
            return total
        if isinstance(value, gast.UnaryOp):
            if isinstance(value.op, gast.Not):
                return fill("np.logical_not(a)", a=value.operand)
            return clone(value)
        return self.statement_loop(stmt, f"`{unparse(value)}` has no batching rule")

    def attribute(self, value):
        """x.shape/.size/.ndim of a batched x: the per-example answer (the same for all)."""
        rank = atom_type(value.value, self.types).ndim
        if value.attr == "dtype":
            return clone(value)
        if rank is None:
            raise PerExampleLoop(f"`{unparse(value)}` of an array of unknown rank", value)
        axes = [fill("x.shape[a]", x=value.value, a=a) for a in range(1, rank + 1)]
        if value.attr == "shape":
            return gast.Tuple(elts=axes, ctx=gast.Load())
        if value.attr == "ndim":
            return to_expr(rank)
        total = to_expr(1)
        for axis in axes:
            total = fill("t * a", t=total, a=axis)
        return total

    # -- in-place writes and lists
    def setitem(self, stmt):
        """``y[index] = v`` on a batched y: every example's row (a scatter for a batched index)."""
        store = stmt.targets[0]
        base = stmt.prim.base
        index = store.slice
        base_type = self.types.get(base, T.UNKNOWN)
        if base_type.kind == "list":  # an entry rebound: a batched list holds batched entries
            if flag_any(self.flag(index)):
                raise PerExampleLoop("a list entry chosen by an index that differs between "
                                     "examples", stmt.origin)
            value = stmt.value
            if flag_any(self.flags.get(base, False)):
                value = self.all_batched(value, atom_type(value, self.types), self.flag(value))
            target = gast.Subscript(value=name(base), slice=clone(index), ctx=gast.Store())
            return [gast.Assign(targets=[target], value=to_expr(value), type_comment=None)]
        region = index_type(base_type, index, self.types)
        call = PrimCall(by_name("getitem"), {"x": name(base), "index": index},
                        {"x": base_type, "index": atom_type(index, self.types)}, None, region)
        load = gast.Subscript(value=name(base), slice=clone(index), ctx=gast.Load())
        bc = self.batch_call(stmt, call, load, {"x": True, "index": self.flag(index)},
                             store=True)
        value = stmt.value
        value_type = atom_type(value, self.types)
        try:
            target = R.batch(bc)
            if not isinstance(target, gast.Subscript) or region.ndim is None or \
                    value_type.ndim is None:
                raise R.NoBatchingRule("an in-place write of unknown shape")
        except (R.ValueDependentShape, R.NoBatchingRule) as exc:
            # (a write keeps its array's shape, even through a mask that differs per
            # example: done once per example)
            return self.write_loop(stmt, str(exc))
        target.ctx = gast.Store()
        if flag_any(self.flag(value)):
            value = R.expand_after_batch(value, region.ndim - value_type.ndim)
        return [gast.Assign(targets=[target], value=to_expr(value), type_comment=None)]

    def add_at(self, stmt):
        """``np.add.at(b, idx, v)`` on a batched b: ``np.add.at(b, (slice(None), idx), v)``
        for an index shared by every example, once per example for a batched index."""
        base, index, value = stmt.prim.base, stmt.prim.rule, stmt.prim.args[0]
        index_kind = atom_type(index, self.types)
        if flag_any(self.flag(index)) or index_kind.kind not in ("int", "array") or \
                (index_kind.kind == "array" and index_kind.dtype not in ("int64", "int32")):
            return self.add_at_loop(stmt)
        value_type = atom_type(value, self.types)
        region = index_type(self.types.get(base, T.UNKNOWN), index, self.types)
        if flag_any(self.flag(value)):
            if region.ndim is None or value_type.ndim is None:
                return self.add_at_loop(stmt)
            value = R.expand_after_batch(value, region.ndim - value_type.ndim)
        rows = gast.Tuple(elts=[fill("slice(None)"), clone(index)], ctx=gast.Load())
        return [gast.Expr(value=gast.Call(func=fill("np.add.at"),
                                          args=[name(base), rows, to_expr(value)],
                                          keywords=[]))]

    def add_at_loop(self, stmt):
        """``np.add.at`` into each example's row in turn: ``np.add.at(b, (i, idx...), v[i])``
        (a named array, so the module reads back as source another transform accepts:
        hessian's vmap of this), with v[i]'s axes reordered where NumPy lays that region out
        otherwise than ``b[i][idx]`` (:meth:`example_value_order`); ``np.add.at(b[i], idx,
        v[i])`` when the order cannot be told."""
        base, index, value = stmt.prim.base, stmt.prim.rule, stmt.prim.args[0]
        names = self.batched_names()
        i = self.index
        at_i = {n: R.subscript(n, [name(i)]) for n in names
                if n in loads(index) or n in loads(value)}
        order = self.example_value_order(index, value, base)
        index = R.replace_names(index, at_i)
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        value = R.replace_names(value, at_i)
        if order is None:
            target = R.subscript(base, [name(i)])
        else:
            target, index = name(base), gast.Tuple(elts=[name(i)] + list(parts),
                                                   ctx=gast.Load())
            if order != tuple(range(len(order))):
                value = gast.Call(func=fill("np.transpose"),
                                  args=[to_expr(value), to_expr(order)], keywords=[])
        call = gast.Call(func=fill("np.add.at"), args=[target, index, value], keywords=[])
        return [comment("np.add.at with an index that differs between examples: once per "
                        "example"),
                gast.For(target=name(i, store=True), iter=fill("range(n)", n=self.n()),
                         body=[gast.Expr(value=call)], orelse=[], type_comment=None)]

    def example_value_order(self, index, value, base):
        """How to write ``np.add.at(b[i], index, v[i])`` on the named array, as
        ``np.add.at(b, (i, *index), np.transpose(v[i], order))``: the axis order (``()`` or
        ``(0, 1, ...)`` when v[i] is written as it is), or None when it cannot be told (an
        ellipsis, a boolean mask among indices that need the reordering, a rank unknown).

        NumPy puts the broadcast shape of the integer and array indices first when they are
        not side by side, in their place otherwise. With ``i`` in front, ``b[i, *index]`` lays
        its entries out as ``b[i][*index]`` does (the order is the identity) when the indices
        start the index or are apart (``(0, :, C)``); when they sit together after slices
        (``(:, 0, C)``) their axes come first in ``b[i, :, 0, C]`` and after the slices' in
        ``b[i][:, 0, C]``, so a value with every axis of the region has them moved to the
        front (a value that spans only the trailing slices' axes, or a number, broadcasts the
        same way in both)."""
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        slices = {t.id for node in self.core.body for stmt in gast.walk(node)
                  if isinstance(stmt, gast.Assign) and isinstance(stmt.value, gast.Call) and
                  isinstance(stmt.value.func, gast.Name) and stmt.value.func.id == "slice"
                  for t in stmt.targets if isinstance(t, gast.Name)}  # (slice_2 = slice(None))
        advanced, ranks = [], []
        for position, part in enumerate(parts):
            if isinstance(part, gast.Slice) or (isinstance(part, gast.Constant) and
                                                part.value is None) or \
                    (isinstance(part, gast.Name) and part.id in slices):
                continue
            if isinstance(part, gast.Constant) and part.value is Ellipsis:
                return None
            typ = atom_type(part, self.types)
            listed = typ.kind in ("tuple", "list") and bool(typ.elts) and all(
                e.kind == "int" for e in typ.elts)  # (`[0, 2]` bound to a name)
            if listed:
                typ = T.array((T.N,), "int64")
            if typ.kind not in ("int", "array", "bool") and not isinstance(part, gast.List):
                return None
            advanced.append(position)
            integers = typ.kind == "int" or (typ.kind == "array" and
                                             typ.dtype in ("int64", "int32"))
            ranks.append(typ.ndim if integers else None)  # (a mask's axes: not known here)
        together = advanced == list(range(advanced[0], advanced[-1] + 1)) if advanced else True
        if not advanced or advanced[0] == 0 or not together:
            return ()  # (the identity, whatever the region's rank)
        base_rank = self.types.get(base, T.UNKNOWN).ndim
        if None in ranks or base_rank is None:
            return None
        before, count = advanced[0], max(ranks)  # (each slice or None makes one axis)
        news = sum(1 for p in parts if isinstance(p, gast.Constant) and p.value is None)
        region = base_rank - (len(parts) - news) + (len(parts) - len(advanced)) + count
        rank = atom_type(value, self.types).ndim
        if rank is not None and rank <= region - before - count:
            return tuple(range(region))
        if rank != region:
            return None
        return tuple(range(before, before + count)) + tuple(range(before)) + \
            tuple(range(before + count, region))

    def write_loop(self, stmt, why):
        """An in-place write done once per example."""
        names = self.batched_names()
        i = self.index
        at_i = {n: R.subscript(n, [name(i)]) for n in names
                if n in loads(stmt.value) or n in loads(stmt.targets[0].slice)}
        store = stmt.targets[0]
        row = R.subscript(store.value, [name(i)])
        target = gast.Subscript(value=row, slice=R.replace_names(store.slice, at_i),
                                ctx=gast.Store())
        body = [gast.Assign(targets=[target], value=R.replace_names(stmt.value, at_i),
                            type_comment=None)]
        return [comment(f"{why}: this write runs once per example"),
                gast.For(target=name(i, store=True), iter=fill("range(n)", n=self.n()),
                         body=body, orelse=[], type_comment=None)]

    def append(self, stmt):
        call = stmt.value
        value = call.args[0]
        if flag_any(self.flags.get(stmt.prim.base, False)):
            value = self.all_batched(value, atom_type(value, self.types), self.flag(value))
        return gast.Expr(value=gast.Call(func=clone(call.func), args=[to_expr(value)],
                                         keywords=[]))

    def all_batched(self, value, typ, flag):
        """`value` for a batched list: every part of it batched, since a list holds one
        element type (an unbatched part becomes an array of its own: a broadcast view's type
        is another under Numba). A tuple's elements are batched one by one."""
        if typ.kind == "tuple" and typ.elts is not None and flag is not True:
            flags = flag if isinstance(flag, tuple) and len(flag) == len(typ.elts) else \
                (flag_any(flag),) * len(typ.elts)
            elts = value.elts if isinstance(value, gast.Tuple) else [
                R.subscript(value, [to_expr(k)]) for k in range(len(typ.elts))]
            return gast.Tuple(elts=[self.all_batched(e, t, f)
                                    for e, t, f in zip(elts, typ.elts, flags)], ctx=gast.Load())
        if flag_any(flag):
            return value
        return R.broadcast_batch(value, typ, self.n(), writable=True)

    def statement_loop(self, stmt, why):
        """One statement run once per example; the rest of the function stays vectorized."""
        target = stmt.targets[0].id
        typ = self.types.get(target, T.UNKNOWN)
        if typ.kind not in ("float", "int", "bool", "array") or typ.ndim is None:
            raise PerExampleLoop(f"`{unparse(stmt.value)}` has no batching rule ({why})",
                                 stmt.origin)
        names = self.batched_names()
        first = self.core.namer.fresh(f"{target}_first")
        i = self.index
        used = [n for n in names if n in loads(stmt.value)]
        at_0 = {n: R.subscript(n, [to_expr(0)]) for n in used}
        at_i = {n: R.subscript(n, [name(i)]) for n in used}
        out_i = gast.Subscript(value=name(target), slice=name(i), ctx=gast.Store())
        out_0 = gast.Subscript(value=name(target), slice=to_expr(0), ctx=gast.Store())
        loop = gast.For(target=name(i, store=True), iter=fill("range(1, n)", n=self.n()),
                        body=[gast.Assign(targets=[out_i], value=R.replace_names(
                            stmt.value, at_i), type_comment=None)],
                        orelse=[], type_comment=None)
        return [comment(f"{why}: this line runs once per example"),
                assign(first, R.replace_names(stmt.value, at_0)),
                assign(target, empty_for(name(first), typ, self.n())),
                gast.Assign(targets=[out_0], value=name(first), type_comment=None),
                loop]

    # -- branches on batched values
    def select(self, stmt, defined):
        """Both branches on the whole batch, then np.where keeps each example's result."""
        test = stmt.test
        outside = self._read_outside(stmt)
        stored = {}
        blocks = {}
        for label, block in (("then", stmt.body), ("else", stmt.orelse)):
            emitted = self._raising_where_any(self._emit_branch(block, defined), test,
                                              label == "then")
            names = [n for inner in block for n in _stores(inner)]
            merged = [n for n in dict.fromkeys(names) if n in outside]
            blocks[label], stored[label] = self._rename(emitted, merged, label)
        merged = list(dict.fromkeys(list(stored["then"]) + list(stored["else"])))
        out = [comment(line) for line in wrap(
            f"vmap: `{self.core.info.source_line(stmt)}` tests a value that differs between "
            "examples: both branches run on the whole batch, np.where keeps each example's "
            "result")]
        out += blocks["then"] + blocks["else"]
        test_type = atom_type(test, self.types)
        if test_type.ndim not in (0, None):
            raise PerExampleLoop("the if statement tests an array that differs between "
                                 "examples", stmt)
        zero_size = None  # (names with a zero-size start: found once, when first needed)
        for n in merged:
            picks = []
            for label in ("then", "else"):
                if n in stored[label]:
                    picks.append(name(stored[label][n]))
                elif n in defined:
                    picks.append(name(n))
                else:
                    raise PerExampleLoop(f"{n} is set in only one branch of an if statement "
                                         "that tests a value differing between examples", stmt)
            typ = self.types.get(n, T.UNKNOWN)
            if typ.kind not in ("float", "int", "bool", "array") or typ.ndim is None:
                raise PerExampleLoop(f"{n} (a {typ.kind}) cannot be selected per example",
                                     stmt)
            keeps_prior = n not in stored["then"] or n not in stored["else"]
            if typ.kind == "array" and keeps_prior and zero_size is None:
                zero_size = _zero_size_names(self.core.body)
            if typ.kind == "array" and keeps_prior and n in zero_size:
                # `t = np.zeros((0,))`, then `t = np.tanh(x)` in one branch: the examples'
                # t may have different shapes, which no one batched array holds (the type
                # analysis gives both sizes the one symbol N)
                other = stmt.orelse if n in stored["then"] else stmt.body
                if not _saved_placeholder(self.core, n, stmt, other):
                    raise PerExampleLoop(f"{n} is a zero-size array on one path through the "
                                         "if statement and may have another size on the "
                                         "other", stmt)
                # reverse mode's placeholder for a value saved in one branch only, which the
                # backward function reads only where that branch ran: every example takes
                # the branch's value
                out.append(assign(n, picks[0] if n in stored["then"] else picks[1]))
                continue
            cond = R.expand_after_batch(test, typ.ndim) if flag_any(self.flag(test)) else test
            out.append(assign(n, fill("np.where(c, a, b)", c=cond, a=picks[0], b=picks[1])))
        return out

    @staticmethod
    def _raising_where_any(emitted, test, holds):
        """A branch's raise or print, run on the whole batch: it runs when the branch is any
        example's (the other statements run for every example and np.where picks)."""
        which = "np.any(c)" if holds else "not np.all(c)"
        return [_tag(gast.If(test=fill(which, c=clone(test)), body=[s], orelse=[]), s)
                if _effect(s) else s for s in emitted]

    def _emit_branch(self, block, defined):
        """A branch of a select, with the flags its own new names have inside it (a value the
        branch computes from unbatched values stays unbatched until np.where merges it)."""
        outer = self.flags
        local = dict(outer)
        for n in {n for inner in block for n in _stores(inner)} - set(defined):
            local.pop(n, None)
        self._analyze_block(block, local, False)
        self.flags = local
        try:
            return self.emit_block(block, set(defined))
        finally:
            self.flags = outer

    def _read_outside(self, stmt):
        """Names read anywhere in the function except inside `stmt`'s branches."""
        found = set(loads(self.core.returns))

        def walk(stmts):
            for inner in stmts:
                if inner is stmt:
                    continue
                if isinstance(inner, CONTROL):
                    found.update(loads(inner.test if not isinstance(inner, gast.For)
                                       else inner.iter))
                    walk(inner.body)
                    walk(inner.orelse)
                else:
                    found.update(loads(inner))
        walk(self.core.body)
        return found

    def _rename(self, stmts, merged, label):
        """Stores to the merged names in one branch go to `<name>_<label>` names instead."""
        current = {}
        out = []
        for stmt in stmts:
            subs = {n: name(current[n]) for n in current}
            stmt = _Rename(subs).visit(stmt)
            for n in _stores(stmt):
                if n in merged:
                    current[n] = self.core.namer.derived(n, label)
                    _RenameStores({n: current[n]}).visit(stmt)
            out.append(stmt)
        return out, current

    # -- the per-example loop variant
    def same_shape_check(self, one, first):
        """`if one.shape != first.shape: raise ValueError(...)`, naming the user's line."""
        message = _same_shape_message(self.core, self.dynamic_shape)
        test = fill("a.shape != b.shape", a=one, b=first)
        error = gast.Raise(exc=gast.Call(func=name("ValueError"), args=[
            gast.Constant(value=message, kind=None)], keywords=[]), cause=None)
        return gast.If(test=test, body=[error], orelse=[])

    def loop_variant(self, out_flags, reason, node):
        """``for i in range(n_batch)``: the per-example function on each example."""
        core = self.core
        namer = Namer(set(core.params) | {self.n_batch, self.index, core.name})
        i = self.index

        shared = [p for p in _written_params(core) if not self.params.get(p)]  # (unmapped)
        own = {p: namer.fresh(f"{p}_own") for p in shared}

        def call_at(k):
            args = [R.subscript(p, [to_expr(k)]) if self.params.get(p) else
                    name(own.get(p, p)) for p in core.params]
            return gast.Call(func=name(core.name), args=args, keywords=[])

        def copies():
            # each example gets its own copy of what the function changes in place (the
            # tapes a backward function pops, ...): one deep copy of them all keeps the lists
            # that share elements sharing them
            if not shared:
                return []
            targets = gast.Tuple(elts=[name(own[p], store=True) for p in shared],
                                 ctx=gast.Store())
            values = gast.Tuple(elts=[name(p) for p in shared], ctx=gast.Load())
            return [gast.Assign(targets=[targets if len(shared) > 1 else targets.elts[0]],
                                value=fill("copy.deepcopy(v)", v=values if len(shared) > 1
                                           else values.elts[0]), type_comment=None)]
        returns = core.returns
        elts = returns.elts if isinstance(returns, gast.Tuple) else [returns]
        types = [atom_type(e, core.types) for e in elts]
        bases = [e.id if isinstance(e, gast.Name) else "out" for e in elts]
        outs = [namer.fresh(b) for b in bases]
        firsts = [namer.fresh(f"{b}_first") for b in bases]
        each = [namer.fresh(f"{b}_i") for b in bases]
        tuple_out = isinstance(returns, gast.Tuple)
        why = f"vmap: per-example loop variant: {reason} ({line_of(core, node)}), so each " \
              f"example runs {core.info.name} on its own."
        body = [comment(part) for part in wrap(why)]
        body += copies()
        body.append(assign(firsts if tuple_out else firsts[0], call_at(0)))
        loop_body = copies() + [assign(each if tuple_out else each[0], call_at(name(i)))]
        out_types = {}

        def output(out, first, one, flag, typ):
            """The batched value of one output (`first`, `one`: its value for the first
            example and for example i), a tuple of them for a tuple (has_aux's ``(pred,
            acc)``), each entry batched on its own."""
            if typ.kind == "tuple":
                if not typ.elts:
                    raise PerExampleLoop("a loop over examples cannot return a tuple of "
                                         "unknown length", node)
                return gast.Tuple(elts=[output(
                    namer.fresh(f"{out}_{m}"), R.subscript(first, [to_expr(m)]),
                    R.subscript(one, [to_expr(m)]), flag[m] if isinstance(flag, tuple)
                    else flag, elt) for m, elt in enumerate(typ.elts)], ctx=gast.Load())
            if typ.kind == "list" and flag_any(flag):
                # (each example's list, a tape, has a length of its own: no batched list
                # holds them; the caller runs per example instead)
                raise PerExampleLoop("a loop over examples cannot return a list that differs "
                                     "between examples", node)
            if not flag_any(flag):
                if isinstance(first, gast.Name):
                    return first
                body.append(assign(out, first))  # (an entry of a tuple: named, typed)
                out_types[out] = typ
                return name(out)
            body.append(assign(out, empty_for(first, typ, self.n())))
            body.append(gast.Assign(targets=[gast.Subscript(value=name(out), slice=to_expr(0),
                                                            ctx=gast.Store())],
                                    value=first, type_comment=None))
            if self.dynamic_shape is not None and typ.kind == "array":
                loop_body.append(self.same_shape_check(one, first))
            loop_body.append(gast.Assign(targets=[gast.Subscript(
                value=name(out), slice=name(i), ctx=gast.Store())], value=one,
                type_comment=None))
            out_types[out] = typ
            return name(out)
        result = [output(out, name(first), name(one), flag, typ)
                  for out, first, one, flag, typ in zip(outs, firsts, each, out_flags, types)]
        body.append(gast.For(target=name(i, store=True), iter=fill("range(1, n)", n=self.n()),
                             body=loop_body, orelse=[], type_comment=None))
        return BatchedBody(body, result, tuple(_any_in(f) for f in out_flags), "loop",
                           reason, uses_n_batch=True, types=out_types)


def _any_in(flag):
    """A flag with each entry's elements merged: bools, in a tuple for a tuple value."""
    if isinstance(flag, tuple):
        return tuple(_any_in(f) for f in flag)
    return bool(flag_any(flag))


def _same_shape_message(core, dynamic_shape):
    reason, node = dynamic_shape
    where = f"{os.path.basename(core.info.filename)}:{core.info.file_line(node)}"
    return (f"vmap: an output of {core.info.name} has a different shape for different examples "
            f"({reason} at {where}: `{core.info.source_line(node)}`); keep shapes "
            "independent of the mapped values (use masks, np.where, or pad to a fixed size)")


def _written_params(core):
    """The unmapped parameters a function may change in place, in parameter order: the lists
    (when it appends to or pops from any list: a list may hold another) and the arrays it
    writes into by name."""
    from .reverse import walk_statements
    written, lists_change = set(), False
    for stmt in walk_statements(core.body):
        prim = getattr(stmt, "prim", None)
        if prim is None:
            continue
        if prim.kind in ("append", "pop"):
            lists_change = True
        if prim.kind in ("setitem", "add_at", "append", "pop") and prim.base is not None:
            written.add(prim.base)
    kinds = {p: core.types.get(p, T.UNKNOWN).kind for p in core.params}
    return [p for p in core.params if (kinds[p] == "list" and lists_change) or
            (p in written and kinds[p] in ("array", "list"))]


class _DoubleTranspose(gast.NodeTransformer):
    """``a.T.T`` is ``a`` (left when a batching rule transposes an inlined transpose)."""

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr == "T" and isinstance(node.value, gast.Attribute) and \
                node.value.attr == "T":
            return node.value.value
        return node


class _Rename(gast.NodeTransformer):
    def __init__(self, subs):
        self.subs = subs

    def visit_Name(self, node):
        if isinstance(node.ctx, gast.Load) and node.id in self.subs:
            return copy.deepcopy(self.subs[node.id])
        return node


class _RenameStores(gast.NodeTransformer):
    def __init__(self, subs):
        self.subs = subs

    def visit_Name(self, node):
        if isinstance(node.ctx, gast.Store) and node.id in self.subs:
            node.id = self.subs[node.id]
        return node


# ---------------------------------------------------------------- one module
@dataclass
class BatchedFunction:
    """A batched helper function written into the module."""

    name: str
    out_flags: tuple
    tuple_out: bool
    variant: str

    @property
    def out_flags_value(self):
        return self.out_flags if self.tuple_out else self.out_flags[0]


class ModuleBatcher:
    """The batched functions of one generated module, memoized per (function, pattern)."""

    def __init__(self, program, quote_lines=True):
        self.program = program
        self.quote_lines = quote_lines  # comments quoting the source line of each block
        self.done = {}
        self.in_progress = set()  # (function, pattern) keys being batched
        self.recursive = set()  # those of them reached again while being batched
        self.functions = []
        self._names = {}

    def names_for(self, core):
        """(batch size name, example index name) of a core function, fixed per function."""
        if core.name not in self._names:
            self._names[core.name] = (core.namer.fresh("n_batch"), core.namer.fresh("i"))
        return self._names[core.name]

    def batch(self, core, pattern):
        """The batched variant of helper `core` for this pattern of batched parameters."""
        key = (core.name, tuple(pattern))
        if key in self.done:
            if self.done[key] is None:  # its batching failed (the caller runs per example)
                raise PerExampleLoop(f"{core.info.name} cannot be batched")
            if key in self.in_progress:
                self.recursive.add(key)
            return self.done[key]
        # A call of itself (recursion) reads an assumption of which outputs vary between
        # examples: none at first, then what the last batching found, until the two agree
        # (flags only turn from False to True, so this stops). The name is the one the
        # function gets.
        fname = self.program.module_names.fresh(f"vmap_{core.name}")
        tuple_out = isinstance(core.returns, gast.Tuple)
        assumed = (False,) * (len(core.returns.elts) if tuple_out else 1)
        self.in_progress.add(key)
        try:
            for _ in range(_MAX_ASSUMPTIONS):
                self.done[key] = BatchedFunction(fname, assumed, tuple_out, "vectorized")
                fb = FunctionBatcher(self, core, pattern)
                result = fb.run()
                grown = _grown(assumed, result.out_flags)
                if key not in self.recursive or result.variant != "vectorized" or \
                        grown == assumed:
                    break
                assumed = grown
            else:
                raise PerExampleLoop(f"{core.info.name} calls itself")
        except BaseException:
            self.done[key] = None
            raise
        finally:
            self.in_progress.discard(key)
        body, returns = inline_returns(list(result.body), result.returns, core.namer.temps)
        if result.uses_n_batch:
            batched = [p for p, b in zip(core.params, pattern) if b]
            at = after_comments(body) if result.variant == "loop" else 0
            body.insert(at, assign(fb.n_batch, batch_size_of(batched, core.types)))
        if tuple_out and len(returns) == 1:  # (a 1-tuple stays one: callers index it)
            returns = gast.Tuple(elts=returns, ctx=gast.Load())
        self.functions.append(function(fname, list(core.params), body, returns))
        done = BatchedFunction(fname, result.out_flags, isinstance(core.returns, gast.Tuple),
                               result.variant)
        self.done[key] = done
        return done


def inline_returns(body, returns, temps):
    """``t = expr`` then ``return t`` (t a temporary read nowhere else) becomes ``return expr``.
    """
    from .tidy import stmt_uses
    returns = list(returns)
    while body and isinstance(body[-1], gast.Assign) and len(body[-1].targets) == 1 and \
            isinstance(body[-1].targets[0], gast.Name):
        tmp = body[-1].targets[0].id
        uses = [k for k, r in enumerate(returns) if tmp in loads(r)]
        if tmp not in temps or len(uses) != 1 or sum(loads(r).count(tmp) for r in returns) != 1:
            break
        if any(tmp in stmt_uses(s) for s in body[:-1]):
            break
        value = body.pop().value
        returns[uses[0]] = R.replace_names(returns[uses[0]], {tmp: value})
    return body, returns


def after_comments(body):
    """The position right after the comment lines that open a body."""
    k = 0
    while k < len(body) and is_marker(body[k]):
        k += 1
    return k


__all__ = ["FunctionBatcher", "ModuleBatcher", "BatchedBody", "PerExampleLoop",
           "flag_any", "inline_returns", "after_comments", "wrap",
           "clone", "loads"]
