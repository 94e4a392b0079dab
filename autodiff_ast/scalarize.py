"""Small vectors of a known length kept as scalars, for compiled code (``jit``).

Code written for one item at a time often works on 2- and 3-vectors: a camera's rotation
``cam[0:3]``, a cross product built with ``np.array([...])``, a projected point ``x[0:2] / x[2]``.
Under Numba each such vector is a heap array, and so is each intermediate of arithmetic on it:
ADBench's bundle adjustment made about forty per observation, and its compiled primal ran 19x
slower than the same mathematics written with scalars. This pass rewrites the core form so that
a 1-D float64 array whose length is known when the code is generated lives in one scalar
variable per element (``rot`` becomes ``rot_0, rot_1, rot_2``), then hands the rewritten
functions back to the front end: reverse mode then differentiates scalar code, whose adjoints
are scalars too.

Where lengths come from: a slice with constant bounds (``cam[0:3]``, ``xcam[0:2]``), a display of
scalars (``np.array([a, b, c])``), ``np.zeros(3)``, and the arguments jit compiles for their
short last axis (``hints``: a 3-vector, the rows ``pos[i]`` of an N x 3 array); they flow
through elementwise arithmetic and ufuncs, copies, constant-index reads and writes, slices,
and into and out of the user's helper functions (a helper whose every call passes a vector
of one length takes its elements as parameters; one that returns such a vector returns its
elements). ``np.sum`` and ``np.dot`` of such vectors become sums of products. A vector of
unknown length used beside one of length ``n`` is read element by element through
``broadcast_index`` (NumPy's broadcasting: length ``n`` or one, otherwise ValueError), and a
constant slice of one through ``slice_index`` (ValueError if the array is shorter than the
slice's end, where NumPy would give a shorter slice: the one behaviour that differs, and it
raises rather than computes). Any other use of a scalarized vector gets the array back
(``np.array([rot_0, rot_1, rot_2])``) just there, and a vector every use of which would do
that stays an array.

The result is a module of plain Python functions (``scalarized``), loaded and normalized again;
:func:`scalarize` returns its program and entry core function, or None when nothing has a
known length (the original core form is then used unchanged). Only ``jit`` on the CPU asks
for it (:mod:`autodiff_ast.jit`), for the primal and for ``grad``/``value_and_grad`` of a
plain function; if anything fails on the rewritten program, jit builds from the original.

>>> import numpy as np
>>> from autodiff_ast.build import prepare
>>> from autodiff_ast.normalize import spec_of
>>> def f(x):
...     v = np.array([x[0] * x[1], x[1], 2.0])
...     return np.sum(v * v)
>>> info, program, core = prepare(f, {"x": spec_of(np.ones(2))})
>>> print(scalarize(program, core).split("\\n\\n\\n")[-1].strip())
def f(x):
    item = x[0]
    item_2 = x[1]
    mul = item * item_2
    item_3 = x[1]
    v_0 = mul
    v_1 = item_3
    v_2 = 2.0
    mul_2_0 = v_0 * v_0
    mul_2_1 = v_1 * v_1
    mul_2_2 = v_2 * v_2
    sum_ = mul_2_0 + mul_2_1 + mul_2_2
    return sum_
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass

import gast

from codegen.emit import fresh_name, mentions, to_ast

from .rules.elementwise import PARTIALS, PIECEWISE_CONSTANT
from .templates import replace_names, unparse

__all__ = ["scalarize", "rebuild", "MAX_LENGTH", "ELEMENTWISE", "rule_name", "scalar_atom",
           "header_text"]

#: Vectors longer than this stay arrays (one name per element stops paying off).
MAX_LENGTH = 8

TOP = "unknown"  # a vector whose length is not known statically

#: Rules applied element by element (what both compiled-code rewrites write per element).
ELEMENTWISE = set(PARTIALS) | set(PIECEWISE_CONSTANT) | {"power"}
_FILLS = {"zeros": "0.0", "ones": "1.0", "zeros_like": "0.0", "ones_like": "1.0"}


# ---------------------------------------------------------------- statement forms
@dataclass
class _Form:
    kind: str  # elementwise, sum, dot, item, slice, display, fill, row, copy, setitem,
    # store_row, call, other (and skip: the unpacking half of a call)
    target: str | None = None
    args: tuple = ()


def rule_name(prim):
    """The name of the rule a core statement's primitive applies (``maximum`` of
    ``maximum@max``), or None."""
    name = getattr(prim.rule, "name", None)
    return name.split("@")[0] if isinstance(name, str) else None


def scalar_atom(node, types):
    """Whether `node` (an atom of core form) is one int or float number."""
    if isinstance(node, gast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, gast.Name):
        t = types.get(node.id)
        return t is not None and t.kind in ("float", "int")
    return False


def header_text(stmt):
    """The first line of a loop or branch of core form (``for i in range(n):``)."""
    if isinstance(stmt, gast.For):
        return f"for {unparse(stmt.target)} in {unparse(stmt.iter)}:"
    return f"{'if' if isinstance(stmt, gast.If) else 'while'} {unparse(stmt.test)}:"


class _Function:
    """One core function: its vectors, their lengths, and how each statement uses them."""

    def __init__(self, core, entry):
        self.core = core
        self.lengths = {}  # vector name -> int | TOP (absent: nothing known yet)
        body = gast.Module(body=core.body, type_ignores=[])
        # how often each name is bound (Store) and read (Load) in the body: one walk
        self.stores, self.loads = Counter(), Counter()
        for n in gast.walk(body):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                self.stores[n.id] += 1
            elif isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
                self.loads[n.id] += 1
        self.consts = _int_constants(core.body, self.stores)
        self.forms = {}  # id(stmt) -> _Form
        self.pinned = set()  # vectors that must stay arrays (loop targets, read by headers)
        self.owned = set()  # names this function binds (its parameters too, unless frozen)
        self.frozen = entry  # parameters and returns keep their form
        self.names = set(self.stores) | set(self.loads) | set(core.params)
        # `a, b = f(...)` in core form: the call statement -> its unpacking, and those skipped
        self.unpacked, self.skipped = {}, set()
        # read element by element (see _Analysis.element_reads): name -> [read keys], local
        # rows -> (matrix, index text), and the candidates while that is being decided
        self.reads, self.rows = {}, {}
        self.candidates, self.row_candidates = set(), {}
        self.row_lengths = {}  # a matrix argument jit specialised -> the length of its rows
        self.row_defs = set()  # ids of `v = a[i]` statements whose row is read in place

    def is_vector(self, name):
        t = self.core.types.get(name)
        return t is not None and t.kind == "array" and t.dims is not None and \
            len(t.dims) == 1 and t.dtype == "float64"

    def is_scalar_atom(self, node):
        return scalar_atom(node, self.core.types)

    def const_int(self, node):
        if isinstance(node, gast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, gast.Name):
            return self.consts.get(node.id)
        if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
            inner = self.const_int(node.operand)
            return None if inner is None else -inner
        return None

    def length(self, name):
        return self.lengths.get(name)

    def elements_known(self, name):
        """Whether every element of `name` can be named: scalarized, or an array of a length
        fixed for this compilation (an argument jit specialised: read as ``x[j]``)."""
        n = self.lengths.get(name)
        return self.static(name) is not None or (
            isinstance(n, int) and name not in self.owned and 1 <= n <= MAX_LENGTH)

    def static(self, name):
        """The number of scalars `name` is kept in, or None when it stays an array."""
        n = self.lengths.get(name)
        if isinstance(n, int) and 1 <= n <= MAX_LENGTH and name not in self.pinned and \
                name in self.owned:
            return n
        return None


def _int_constants(body, stores):
    """Names bound exactly once (`stores`: bindings per name), to an integer computed from
    integer constants (``add = 0 + 3``, the core form of ``cam[ROT_IDX:ROT_IDX + 3]``)."""
    values = {}
    for node in gast.walk(gast.Module(body=body, type_ignores=[])):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name) and stores[node.targets[0].id] == 1:
            try:
                value = _fold(node.value, values)
            except (ValueError, ZeroDivisionError, OverflowError):
                continue
            if type(value) is int:
                values[node.targets[0].id] = value
    return values


def _fold(node, values):
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, gast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, gast.BinOp):
        a, b = _fold(node.left, values), _fold(node.right, values)
        ops = {gast.Add: a + b, gast.Sub: a - b, gast.Mult: a * b}
        for op, v in ops.items():
            if isinstance(node.op, op):
                return v
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        return -_fold(node.operand, values)
    raise ValueError("not a constant")


def _classify(stmt, fn):
    """How one core statement reads and writes vectors."""
    prim = getattr(stmt, "prim", None)
    if not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or prim is None:
        return _Form("other")
    target = stmt.targets[0]
    value = stmt.value
    if isinstance(target, gast.Subscript):
        base = target.value.id if isinstance(target.value, gast.Name) else None
        if base is None or prim.kind != "setitem":
            return _Form("other")
        if fn.is_vector(base) and fn.const_int(target.slice) is not None and \
                fn.is_scalar_atom(value):
            return _Form("setitem", base, (fn.const_int(target.slice), value))
        t = fn.core.types.get(base)
        if t is not None and t.kind == "array" and t.dims is not None and len(t.dims) == 2 and \
                isinstance(value, gast.Name) and fn.is_vector(value.id) and \
                isinstance(target.slice, (gast.Name, gast.Constant)) and \
                fn.is_scalar_atom(target.slice) and not isinstance(
                    getattr(target.slice, "value", 0), float):
            return _Form("store_row", None, (base, target.slice, value.id))
        return _Form("other")
    if prim.kind == "user" and isinstance(value, gast.Call) and not value.keywords and \
            all(isinstance(a, (gast.Name, gast.Constant)) for a in value.args) and \
            isinstance(target, (gast.Name, gast.Tuple)) and \
            (isinstance(target, gast.Name) or all(isinstance(e, gast.Name)
                                                   for e in target.elts)):
        return _Form("call", None, (prim.callee, value.args, target))
    if not isinstance(target, gast.Name):
        return _Form("other")
    out = target.id
    if prim.kind == "copy" and isinstance(value, gast.Name):
        return _Form("copy", out, (value.id,))
    rule = rule_name(prim) if prim.kind in ("rule", "nondiff") else None
    if rule is None or prim.call is None:
        return _Form("other")
    call = prim.call
    given = {p for p, a in call.args.items() if a is not None}
    if rule in ELEMENTWISE and fn.is_vector(out):
        if isinstance(value, gast.Call) and value.keywords:
            return _Form("other")
        atoms = [a for a in call.args.values() if a is not None]
        if all(isinstance(a, gast.Constant) or (isinstance(a, gast.Name) and (
                fn.is_vector(a.id) or fn.is_scalar_atom(a))) for a in atoms):
            return _Form("elementwise", out, tuple(a.id for a in atoms
                                                   if isinstance(a, gast.Name) and
                                                   fn.is_vector(a.id)))
        return _Form("other")
    if rule == "sum" and given == {"x"} and isinstance(call.args["x"], gast.Name) and \
            fn.is_vector(call.args["x"].id):
        return _Form("sum", out, (call.args["x"].id,))
    if rule in ("dot", "matmul") and all(isinstance(call.args[p], gast.Name) and
                                          fn.is_vector(call.args[p].id) for p in ("a", "b")):
        return _Form("dot", out, (call.args["a"].id, call.args["b"].id))
    if rule == "getitem" and isinstance(call.args["x"], gast.Name) and \
            call.args["x"].id in fn.row_lengths and fn.is_vector(out) and \
            fn.is_scalar_atom(call.args["index"]) and \
            not isinstance(getattr(call.args["index"], "value", 0), float):
        return _Form("row", out, (call.args["x"].id, call.args["index"]))
    if rule == "getitem" and isinstance(call.args["x"], gast.Name) and \
            fn.is_vector(call.args["x"].id):
        x, index = call.args["x"].id, call.args["index"]
        if fn.const_int(index) is not None:
            return _Form("item", out, (x, fn.const_int(index)))
        if isinstance(index, gast.Slice) and fn.is_vector(out):
            bounds = [None if b is None or (isinstance(b, gast.Constant) and b.value is None)
                      else fn.const_int(b) for b in (index.lower, index.upper, index.step)]
            given_bounds = [b for b in (index.lower, index.upper, index.step)
                            if b is not None and not (isinstance(b, gast.Constant) and
                                                      b.value is None)]
            if len([b for b in bounds if b is not None]) == len(given_bounds):
                return _Form("slice", out, (x, *bounds))
        return _Form("other")
    if rule == "array" and given == {"arrays"} and fn.is_vector(out) and \
            isinstance(call.args["arrays"], (gast.List, gast.Tuple)) and \
            call.args["arrays"].elts and \
            all(fn.is_scalar_atom(e) for e in call.args["arrays"].elts):
        return _Form("display", out, tuple(call.args["arrays"].elts))
    if rule in ("zeros", "ones") and given == {"shape"} and fn.is_vector(out):
        shape = call.args["shape"]
        if isinstance(shape, (gast.Tuple, gast.List)) and len(shape.elts) == 1:
            shape = shape.elts[0]
        n = fn.const_int(shape)
        if n is not None:
            return _Form("fill", out, (n, _FILLS[rule], None))
        return _Form("other")
    if rule in ("zeros_like", "ones_like") and given == {"x"} and fn.is_vector(out) and \
            isinstance(call.args["x"], gast.Name) and fn.is_vector(call.args["x"].id):
        return _Form("fill", out, (None, _FILLS[rule], call.args["x"].id))
    return _Form("other")


def _written_names(stmt):
    targets = stmt.targets if isinstance(stmt, gast.Assign) else \
        [stmt.target] if isinstance(stmt, (gast.AugAssign, gast.AnnAssign, gast.For)) else []
    out = set()
    for t in targets:
        for n in gast.walk(t):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                out.add(n.id)
    return out


def _statements(body):
    for stmt in body:
        if isinstance(stmt, (gast.If, gast.For, gast.While)):
            yield stmt
            yield from _statements(stmt.body)
            yield from _statements(stmt.orelse)
        else:
            yield stmt


def _header_nodes(stmt):
    if isinstance(stmt, gast.For):
        return [stmt.iter, stmt.target]
    return [stmt.test]


# ---------------------------------------------------------------- lengths (a fixed point)
def _join(a, b):
    if a is None:
        return b
    if b is None or a == b:
        return a
    return TOP


def _elementwise_length(fn, operands):
    lengths = [fn.length(n) for n in operands]
    if any(n is None for n in lengths):
        return None
    static = {n for n in lengths if n != TOP}
    unknown = TOP in lengths
    if not static:
        return TOP
    if len(static) > 1:
        static.discard(1)
        if len(static) > 1:
            return TOP  # NumPy raises: leave it to NumPy
    n = max(static)
    if unknown and n == 1:
        return TOP  # the unknown one sets the length
    return n


def _slice_length(fn, x, lo, hi, step):
    n = fn.length(x)
    if n is None:
        return None
    if n == TOP:
        if step not in (None, 1) or lo is None or hi is None or not 0 <= lo < hi:
            return TOP
        return hi - lo
    picked = range(*slice(lo, hi, step).indices(n))
    return len(picked) if len(picked) else TOP


class _Analysis:
    def __init__(self, program, entry, hints=None):
        self.functions = {}
        hints = hints or {}
        for cf in program.functions.values():
            fn = self.functions[id(cf)] = _Function(cf, cf is entry)
            if cf is entry:  # arguments jit compiles for their small last axis
                for p in cf.params:
                    t = cf.types.get(p)
                    if p in hints and p not in fn.stores and t is not None and \
                            t.kind == "array" and t.dims is not None and len(t.dims) == 2:
                        fn.row_lengths[p] = hints[p]
        self.sites = {}  # id(callee core) -> [(caller _Function, form)]
        for fn in self.functions.values():
            fn.unpacked, fn.skipped = _unpacked_calls(fn)
            other_reads, written = set(), set()
            for stmt in _statements(fn.core.body):
                if isinstance(stmt, (gast.If, gast.For, gast.While)):
                    for node in _header_nodes(stmt):
                        for n in gast.walk(node):
                            if isinstance(n, gast.Name) and fn.is_vector(n.id):
                                fn.pinned.add(n.id)
                    fn.owned |= _written_names(stmt)
                    continue
                if id(stmt) in fn.skipped:  # `a, b = t` of `t = f(...)`: part of the call
                    fn.forms[id(stmt)] = _Form("skip")
                    fn.owned |= _written_names(stmt)
                    continue
                form = _classify(stmt, fn)
                if form.kind == "call" and id(stmt) in fn.unpacked:
                    form = _Form("call", None, (form.args[0], form.args[1],
                                                fn.unpacked[id(stmt)].targets[0]))
                fn.forms[id(stmt)] = form
                fn.owned |= _written_names(stmt)
                if form.kind == "other":
                    fn.pinned |= _mutated_or_viewed(stmt, fn)
                    other_reads |= {n.id for n in gast.walk(stmt) if isinstance(n, gast.Name)
                                    and fn.is_vector(n.id)}
                elif form.kind == "setitem":
                    written.add(form.target)
                prim = getattr(stmt, "prim", None)
                if prim is not None and prim.kind == "user":
                    callee = self.functions.get(id(prim.callee))
                    if callee is None:
                        continue
                    target = form.args[2] if form.kind == "call" else None
                    if target is not None and len(self.returned(callee)) == (
                            1 if isinstance(target, gast.Name) else len(target.elts)):
                        self.sites.setdefault(id(prim.callee), []).append((fn, form))
                    else:
                        callee.frozen = True
            # a vector written in place and held by some other statement (a tuple, a list, a
            # call): the holder would keep a copy made for it, and miss the writes
            fn.pinned |= other_reads & written
        for fn in self.functions.values():
            if fn.core.recursive_calls or fn.core.checkpointed:
                fn.frozen = True
            if not fn.frozen:
                fn.owned |= set(fn.core.params)
            for p in fn.core.params:
                if fn.frozen and fn.is_vector(p):
                    fn.lengths[p] = hints.get(p, TOP) if fn.core is entry else TOP
            for name in fn.names - fn.owned:  # module data: read through broadcast_index
                if fn.is_vector(name) and name not in fn.lengths:
                    fn.lengths[name] = TOP

    def returned(self, fn):
        r = fn.core.returns
        return list(r.elts) if isinstance(r, gast.Tuple) else [r]

    def return_lengths(self, fn):
        """Per returned atom: its length when the helper returns its elements (else None), or
        None when the helper returns its values as they are."""
        if fn.frozen:
            return None
        out = [n if isinstance(n, int) else None for n in self.return_state(fn)]
        return out if any(n is not None for n in out) else None

    def return_state(self, fn):
        """Per returned atom, as known so far: a static length, TOP (an array), None (not
        known yet) or "scalar"."""
        out = []
        for a in self.returned(fn):
            if not (isinstance(a, gast.Name) and fn.is_vector(a.id)):
                out.append("scalar")
            elif fn.frozen or fn.static(a.id) is not None:
                out.append(TOP if fn.frozen else fn.static(a.id))
            else:
                out.append(None if fn.length(a.id) is None else TOP)
        return out

    # ------------------------------------------------------------ reads element by element
    def element_reads(self):
        """Vectors of unknown length read only element by element (a parameter, or a local row
        ``v = a[i]`` of a matrix): `fn.reads[v]` lists the reads, as keys ("bcast", j, n)
        (element j broadcast to length n), ("slice", i, stop) (index i of a slice ending at
        stop), ("const", c, None) (v[c]); a parameter becomes one parameter per read (its callers
        read the elements), a row is read in place (``a[i, 5]``): no array between them."""
        for fn in self.functions.values():
            fn.reads, fn.rows = {}, {}
            fn.candidates = set()
            if not fn.frozen:
                fn.candidates |= {p for p in fn.core.params if fn.is_vector(p) and
                                  fn.length(p) == TOP and p not in fn.pinned}
            rows = {v: r for v, r in _row_definitions(fn).items() if fn.length(v) == TOP}
            fn.candidates |= set(rows)
            fn.row_candidates = rows
        changed = True
        while changed:
            changed = False
            for fn in self.functions.values():
                for v in sorted(fn.candidates):
                    if self._reads_of(fn, v) is None:
                        fn.candidates.discard(v)
                        changed = True
        changed = True
        while changed:
            changed = False
            for fn in self.functions.values():
                for v in sorted(fn.candidates):
                    reads = self._reads_of(fn, v)
                    if reads != fn.reads.get(v):
                        fn.reads[v] = reads
                        changed = True
        for fn in self.functions.values():
            for v, (stmt, matrix, index) in fn.row_candidates.items():
                if v in fn.reads:
                    fn.rows[v] = (matrix, index)
                    fn.row_defs.add(id(stmt))

    def _reads_of(self, fn, v):
        """The element reads of candidate `v`, or None when some use needs the array."""
        reads = {}
        row = fn.row_candidates.get(v)
        for stmt in _statements(fn.core.body):
            if not mentions(stmt, v):
                continue
            if isinstance(stmt, (gast.If, gast.For, gast.While)):
                if any(mentions(n, v) for n in _header_nodes(stmt)):
                    return None
                continue
            if row is not None and stmt is row[0]:
                continue
            form = fn.forms.get(id(stmt), _Form("other"))
            kind = _effective(fn, form)
            if kind == "elementwise" and form.target != v:
                n = fn.static(form.target)
                reads.update((("bcast", j, n), None) for j in range(n))
            elif kind == "slice" and form.args[0] == v and form.target != v:
                lo, hi = form.args[1], form.args[2]
                reads.update((("slice", lo + j, hi), None)
                             for j in range(fn.static(form.target)))
            elif kind == "item_read" and form.args[0] == v:
                reads[("const", form.args[1], None)] = None
            elif kind == "call":
                callee_core, args, target = form.args
                callee = self.functions[id(callee_core)]
                if callee.frozen or mentions(target, v):
                    return None
                for p, a in zip(callee_core.params, args):
                    if isinstance(a, gast.Name) and a.id == v:
                        if p not in callee.candidates:
                            return None
                        reads.update((key, None) for key in callee.reads.get(p, ()))
            else:
                return None
        for a in self.returned(fn):
            if mentions(a, v):
                return None
        if v in fn.core.params and not fn.frozen:
            index = fn.core.params.index(v)
            for caller, form in self.sites.get(id(fn.core), ()):
                arg = form.args[1][index]
                if not (isinstance(arg, gast.Name) and caller.is_vector(arg.id) and
                        caller.static(arg.id) is None and caller.length(arg.id) is not None):
                    return None
        return list(reads)

    def settle(self):
        """The lengths, with vectors that no statement would use as scalars kept as arrays
        (each use would make the array again: ``np.tile(v, 2)``, a helper that keeps its
        parameter an array), repeated until no more are kept."""
        initial = {id(fn): dict(fn.lengths) for fn in self.functions.values()}
        for _ in range(20):
            self.run()
            kept = False
            for fn in self.functions.values():
                for name in [n for n in fn.lengths if fn.static(n) is not None]:
                    if self._only_materialized(fn, name):
                        fn.pinned.add(name)
                        kept = True
            if not kept:
                return
            for fn in self.functions.values():
                fn.lengths = dict(initial[id(fn)])
        raise RuntimeError("scalarize: vectors kept as arrays did not settle")

    def _only_materialized(self, fn, v):
        """Whether every read of scalarized `v` needs it as an array again."""
        reads = scalar = 0
        for stmt in _statements(fn.core.body):
            if isinstance(stmt, (gast.If, gast.For, gast.While)) or not any(
                    isinstance(n, gast.Name) and n.id == v and isinstance(n.ctx, gast.Load)
                    for n in gast.walk(stmt)):
                continue
            form = fn.forms.get(id(stmt), _Form("other"))
            kind = _effective(fn, form)
            if kind == "setitem" and form.target == v:
                continue  # a write of one element
            reads += 1
            if kind in ("elementwise", "sum", "dot", "item", "slice", "copy", "store_row"):
                scalar += 1
            elif kind == "call":
                callee = self.functions[id(form.args[0])]
                if not callee.frozen and all(
                        callee.static(p) is not None for p, a in zip(callee.core.params,
                                                                     form.args[1])
                        if isinstance(a, gast.Name) and a.id == v):
                    scalar += 1
        if any(isinstance(a, gast.Name) and a.id == v for a in self.returned(fn)):
            reads += 1
            scalar += self.return_lengths(fn) is not None
        return reads > 0 and scalar == 0

    def run(self):
        for _ in range(100):
            changed = False
            for fn in self.functions.values():
                changed |= self._step(fn)
            if not changed:
                return
        raise RuntimeError("scalarize: lengths did not settle")

    def _set(self, fn, name, n):
        if not fn.is_vector(name) or n is None:
            return False
        new = _join(fn.lengths.get(name), n)
        if new != fn.lengths.get(name):
            fn.lengths[name] = new
            return True
        return False

    def _step(self, fn):
        changed = False
        for stmt in _statements(fn.core.body):
            if isinstance(stmt, (gast.If, gast.For, gast.While)):
                if isinstance(stmt, gast.For):
                    for n in _written_names(stmt):
                        changed |= self._set(fn, n, TOP)
                continue
            form = fn.forms[id(stmt)]
            k, out, args = form.kind, form.target, form.args
            if k == "elementwise":
                changed |= self._set(fn, out, _elementwise_length(fn, args))
            elif k == "slice":
                changed |= self._set(fn, out, _slice_length(fn, *args))
            elif k == "display":
                changed |= self._set(fn, out, len(args))
            elif k == "row":
                changed |= self._set(fn, out, fn.row_lengths[args[0]])
            elif k == "fill":
                n = args[0] if args[2] is None else fn.length(args[2])
                changed |= self._set(fn, out, TOP if n == 0 else n)
            elif k == "copy":
                changed |= self._set(fn, out, fn.length(args[0]) if fn.is_vector(args[0])
                                     else TOP)
            elif k == "call":
                changed |= self._call(fn, form)
            elif k == "other":
                for n in _written_names(stmt):
                    changed |= self._set(fn, n, TOP)
        if not fn.frozen:
            for index, p in enumerate(fn.core.params):
                if not fn.is_vector(p):
                    continue
                n = None
                for caller, form in self.sites.get(id(fn.core), ()):
                    arg = form.args[1][index]
                    if isinstance(arg, gast.Name) and caller.is_vector(arg.id):
                        m = caller.length(arg.id)
                        if m is not None and m != TOP and not caller.elements_known(arg.id):
                            m = TOP  # the caller keeps it as an array
                    else:
                        m = TOP
                    n = _join(n, m) if m is not None else n
                changed |= self._set(fn, p, n)
        return changed

    def _call(self, fn, form):
        callee = self.functions[id(form.args[0])]
        target = form.args[2]
        targets = [target] if isinstance(target, gast.Name) else list(target.elts)
        changed = False
        for t, n in zip(targets, self.return_state(callee)):
            if n is not None and n != "scalar":
                changed |= self._set(fn, t.id, n)
        return changed


def _unpacked_calls(fn):
    """``t = f(...)`` then ``a, b = t`` (the core form of ``a, b = f(...)``) with t read nowhere
    else: (id of the call -> the unpacking statement, ids of the unpacking statements, to be
    skipped): the pair is one call with targets (a, b)."""
    unpacked, skipped = {}, set()
    for block, _ in _blocks(fn.core.body):
        for first, second in zip(block, block[1:]):
            prim = getattr(first, "prim", None)
            if not (prim is not None and prim.kind == "user" and
                    isinstance(first, gast.Assign) and len(first.targets) == 1 and
                    isinstance(first.targets[0], gast.Name)):
                continue
            t = first.targets[0].id
            if isinstance(second, gast.Assign) and len(second.targets) == 1 and \
                    isinstance(second.targets[0], gast.Tuple) and \
                    all(isinstance(e, gast.Name) for e in second.targets[0].elts) and \
                    isinstance(second.value, gast.Name) and second.value.id == t and \
                    fn.loads[t] == 1:
                unpacked[id(first)] = second
                skipped.add(id(second))
    return unpacked, skipped


def _blocks(body, owner=None):
    """Every statement list with the statement that owns it (None at the top)."""
    yield body, owner
    for stmt in body:
        if isinstance(stmt, (gast.If, gast.For, gast.While)):
            yield from _blocks(stmt.body, stmt)
            yield from _blocks(stmt.orelse, stmt)


def _row_definitions(fn):
    """Local rows ``v = a[i]`` (a a float64 matrix the function never rebinds, i an integer
    fixed for as long as v is used): v -> (statement, a, i as text). A row qualifies when it
    is bound once, i is a constant or bound once (earlier in the same block, or as the
    target of the loop whose body the block is), and every use of v follows its binding in
    that block."""
    stores = fn.stores
    out = {}
    for block, owner in _blocks(fn.core.body):
        for k, stmt in enumerate(block):
            prim = getattr(stmt, "prim", None)
            if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
                    isinstance(stmt.targets[0], gast.Name) and prim is not None and
                    rule_name(prim) == "getitem" and isinstance(stmt.value, gast.Subscript)):
                continue
            v = stmt.targets[0].id
            matrix, index = stmt.value.value, stmt.value.slice
            if not (fn.is_vector(v) and stores.get(v) == 1 and isinstance(matrix, gast.Name)):
                continue
            t = fn.core.types.get(matrix.id)
            if t is None or t.kind != "array" or t.dtype != "float64" or t.dims is None or \
                    len(t.dims) != 2 or matrix.id in stores:
                continue
            if isinstance(index, gast.Constant):
                if type(index.value) is not int:
                    continue
            elif isinstance(index, gast.Name):
                it = fn.core.types.get(index.id)
                if it is None or it.kind != "int" or stores.get(index.id) != 1:
                    continue
                earlier = any(_stores(s, index.id) for s in block[:k]
                              if not isinstance(s, (gast.If, gast.For, gast.While)))
                loop = isinstance(owner, gast.For) and owner.body is block and \
                    mentions(owner.target, index.id)
                if not (earlier or loop):
                    continue
            else:
                continue
            uses = [s for s in _statements(fn.core.body) if mentions(s, v) and
                    not isinstance(s, (gast.If, gast.For, gast.While))]
            after = {id(s) for s in _statements(block[k + 1:])} | {id(stmt)}
            if any(id(s) not in after for s in uses):
                continue
            out[v] = (stmt, matrix.id, unparse(index))
    return out


def _stores(stmt, name):
    return any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Store)
               for n in gast.walk(stmt))


def _mutated_or_viewed(stmt, fn):
    """Vectors an unsupported statement may write through or keep a view of: they stay arrays
    (a copy made for the statement would take the write)."""
    out = set()
    if not isinstance(stmt, gast.Assign) or not all(
            isinstance(t, (gast.Name, gast.Tuple)) for t in stmt.targets):
        return {n.id for n in gast.walk(stmt) if isinstance(n, gast.Name) and
                fn.is_vector(n.id)}
    for node in gast.walk(stmt.value):
        if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                fn.is_vector(node.value.id) and node.attr not in ("shape", "ndim", "size",
                                                                  "dtype"):
            out.add(node.value.id)
    return out


def _effective(fn, form):
    """Which rewrite applies to a statement, now that lengths are known ("other": as is)."""
    k = form.kind
    if form.target is not None and k not in ("sum", "dot", "item") and \
            fn.static(form.target) is None:
        return "other"  # the result stays an array
    if k == "slice" and not fn.elements_known(form.args[0]) and \
            fn.length(form.args[0]) != TOP:
        return "other"
    if k in ("sum", "dot") and not all(fn.elements_known(a) for a in form.args):
        return "other"
    if k == "item":
        n = fn.static(form.args[0])
        if n is None:
            return "item_read" if fn.length(form.args[0]) == TOP else "other"
        return "item" if -n <= form.args[1] < n else "other"
    if k == "setitem" and (fn.static(form.target) is None or
                           not -fn.static(form.target) <= form.args[0] < fn.static(form.target)):
        return "other"
    return k


def _index_text(key, length):
    """The index expression of one element read (see _Analysis.element_reads)."""
    kind, a, b = key
    if kind == "const":
        return str(a)
    if kind == "slice":
        return f"slice_index({length}, {a}, {b})"
    return f"broadcast_index({length}, {a}, {b})"


# ---------------------------------------------------------------- writing the module
class _Writer:
    def __init__(self, analysis, fn):
        self.analysis = analysis
        self.fn = fn
        self.taken = set(fn.names)
        self.elements = {}  # scalarized name -> [element names]
        self.params_read = {}  # parameter read element by element -> {read key: name}
        self.lines = []

    def element_names(self, name):
        if name not in self.elements:
            self.elements[name] = [fresh_name(f"{name}_{j}", self.taken)
                                   for j in range(self.fn.static(name))]
        return self.elements[name]

    def fresh(self, base):
        return fresh_name(base, self.taken)

    def elements_of(self, name):
        """The elements of a vector whose elements can be named (texts)."""
        if self.fn.static(name) is not None:
            return self.element_names(name)
        return [f"{name}[{j}]" for j in range(self.fn.length(name))]

    def element(self, name, j, n):
        """Element j of vector `name` in a statement over n elements (text)."""
        if self.fn.elements_known(name):
            elements = self.elements_of(name)
            if len(elements) in (1, n):
                return elements[0 if len(elements) == 1 else j]
        return self.read(name, ("bcast", j, n))

    def read(self, name, key):
        """One element of a vector of unknown length (text): a parameter that was given its
        elements, a row of a matrix read in place, or the array indexed."""
        reads = self.fn.reads.get(name)
        if reads is not None and name in self.fn.core.params:
            return self.read_names(name)[key]
        row = self.fn.rows.get(name) if reads is not None else None
        if row is not None:
            matrix, index = row
            return f"{matrix}[{index}, {_index_text(key, f'{matrix}.shape[1]')}]"
        return f"{name}[{_index_text(key, f'{name}.shape[0]')}]"

    def read_names(self, param):
        """Parameter `param`'s element reads -> the names of the parameters carrying them."""
        if param not in self.params_read:
            out = {}
            for key in self.fn.reads[param]:
                # (p[-1]: p_m1, a name)
                negative = isinstance(key[1], int) and key[1] < 0
                position = f"m{-key[1]}" if negative else key[1]
                out[key] = self.fresh(f"{param}_{position}")
            self.params_read[param] = out
        return self.params_read[param]

    def materialized(self, name):
        return "np.array([" + ", ".join(self.element_names(name)) + "])"

    # -------------------------------------------------------------- statements
    def emit(self, text, indent):
        self.lines.append("    " * indent + text)

    def body(self, stmts, indent):
        if not stmts:
            self.emit("pass", indent)
        for stmt in stmts:
            self.statement(stmt, indent)

    def statement(self, stmt, indent):
        fn = self.fn
        if isinstance(stmt, (gast.If, gast.While, gast.For)):
            self.emit(header_text(stmt), indent)
            self.body(stmt.body, indent + 1)
            if stmt.orelse:
                self.emit("else:", indent)
                self.body(stmt.orelse, indent + 1)
            return
        if id(stmt) in fn.row_defs or id(stmt) in fn.skipped:
            return  # a row read element by element where it is used; an unpacked call
        form = fn.forms.get(id(stmt), _Form("other"))
        getattr(self, f"_{_effective(fn, form)}")(stmt, form, indent)

    def _other(self, stmt, form, indent):
        """Any other statement: scalarized vectors it reads become arrays again just here."""
        stmt = to_ast(stmt)  # a fresh copy (ast nodes)
        swaps = {}
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                    self.fn.static(node.id) is not None:
                if node.id not in swaps:
                    swaps[node.id] = self.fresh(f"{node.id}_array")
                    self.emit(f"{swaps[node.id]} = {self.materialized(node.id)}", indent)
                node.id = swaps[node.id]
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and \
                    self.fn.static(node.id) is not None:
                raise RuntimeError(f"scalarize: {node.id} is written by an unsupported form")
        self.emit(ast.unparse(stmt), indent)

    def _elementwise(self, stmt, form, indent):
        n = self.fn.static(form.target)
        names = self.element_names(form.target)
        for j in range(n):
            value = replace_names(to_ast(stmt.value),
                                   {v: self.element(v, j, n) for v in form.args})
            self.emit(f"{names[j]} = {ast.unparse(value)}", indent)

    def _store_row(self, stmt, form, indent):
        a, index, v = form.args
        n = self.fn.static(v)
        if n is None:
            return self._other(stmt, form, indent)
        row = unparse(index)
        if n == 1:
            self.emit(f"{a}[{row}] = {self.element_names(v)[0]}", indent)
            return
        for j, name in enumerate(self.element_names(v)):
            self.emit(f"{a}[{row}, store_index({a}.shape[1], {j}, {n})] = {name}", indent)

    def _sum(self, stmt, form, indent):
        self.emit(f"{form.target} = " + " + ".join(self.elements_of(form.args[0])), indent)

    def _dot(self, stmt, form, indent):
        a, b = (self.elements_of(x) for x in form.args)
        if len(a) != len(b):
            return self._other(stmt, form, indent)
        self.emit(f"{form.target} = " + " + ".join(f"{u} * {v}" for u, v in zip(a, b)),
                  indent)

    def _item_read(self, stmt, form, indent):
        x, c = form.args
        if x not in self.fn.reads:
            return self._other(stmt, form, indent)
        value = self.read(x, ("const", c, None))
        self.emit(f"{form.target} = {value}", indent)

    def _item(self, stmt, form, indent):
        self.emit(f"{form.target} = {self.element_names(form.args[0])[form.args[1]]}", indent)

    def _setitem(self, stmt, form, indent):
        self.emit(f"{self.element_names(form.target)[form.args[0]]} = "
                  f"{unparse(form.args[1])}", indent)

    def _slice(self, stmt, form, indent):
        x, lo, hi, step = form.args
        names = self.element_names(form.target)
        if self.fn.elements_known(x):
            elements = self.elements_of(x)
            source = [elements[i] for i in range(*slice(lo, hi, step).indices(len(elements)))]
        else:
            source = [self.read(x, ("slice", lo + j, hi)) for j in range(len(names))]
        for name, value in zip(names, source):
            self.emit(f"{name} = {value}", indent)

    def _row(self, stmt, form, indent):
        matrix, index = form.args
        for j, name in enumerate(self.element_names(form.target)):
            self.emit(f"{name} = {matrix}[{unparse(index)}, {j}]", indent)

    def _display(self, stmt, form, indent):
        for name, elt in zip(self.element_names(form.target), form.args):
            self.emit(f"{name} = {unparse(elt)}", indent)

    def _fill(self, stmt, form, indent):
        for name in self.element_names(form.target):
            self.emit(f"{name} = {form.args[1]}", indent)

    def _copy(self, stmt, form, indent):
        n = self.fn.static(form.target)
        for j, name in enumerate(self.element_names(form.target)):
            self.emit(f"{name} = {self.element(form.args[0], j, n)}", indent)

    def _call(self, stmt, form, indent):
        callee_core, args, target = form.args
        callee = self.analysis.functions[id(callee_core)]
        texts = []
        for p, a in zip(callee_core.params, args):
            if not callee.frozen and callee.static(p) is not None:
                texts += self.elements_of(a.id)
            elif not callee.frozen and p in callee.reads:
                texts += [self.read(a.id, key) for key in callee.reads[p]]
            elif isinstance(a, gast.Name) and self.fn.static(a.id) is not None:
                texts.append(self.materialized(a.id))
            else:
                texts.append(unparse(a))
        lengths = self.analysis.return_lengths(callee)
        targets = [target] if isinstance(target, gast.Name) else list(target.elts)
        outs, after = [], []
        for i, t in enumerate(targets):
            n = lengths[i] if lengths is not None else None
            if n is None:
                outs.append(t.id)
            elif self.fn.static(t.id) == n:
                outs += self.element_names(t.id)
            else:  # the result must be an array here: receive its elements, then stack them
                parts = [self.fresh(f"{t.id}_{j}") for j in range(n)]
                outs += parts
                after.append(f"{t.id} = np.array([{', '.join(parts)}])")
        lhs = ", ".join(outs) if len(outs) > 1 or lengths is not None or \
            isinstance(target, gast.Tuple) else outs[0]
        if len(outs) == 1 and (lengths is not None or isinstance(target, gast.Tuple)):
            lhs += ","
        self.emit(f"{lhs} = {callee_core.name}({', '.join(texts)})", indent)
        for line in after:
            self.emit(line, indent)

    # -------------------------------------------------------------- the function
    def function(self):
        fn = self.fn
        params = []
        for p in fn.core.params:
            if not fn.frozen and fn.static(p) is not None:
                params += self.element_names(p)
            elif p in fn.reads:
                params += list(self.read_names(p).values())
            else:
                params.append(p)
        self.lines = [f"def {fn.core.name}({', '.join(params)}):"]
        self.body(fn.core.body, 1)
        parts = []
        lengths = self.analysis.return_lengths(fn)
        for a in self.analysis.returned(fn):
            if isinstance(a, gast.Name) and fn.static(a.id) is not None:
                if lengths is not None:
                    parts += self.element_names(a.id)
                else:
                    parts.append(self.materialized(a.id))
            else:
                parts.append(unparse(a))
        if isinstance(fn.core.returns, gast.Tuple) or lengths is not None:
            self.emit("return (" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")",
                      1)
        else:
            self.emit(f"return {parts[0]}", 1)
        return "\n".join(self.lines)


# ---------------------------------------------------------------- entry point
def calls_custom_rules(program):
    """Whether a function of the program calls one with a rule of the user's (custom_jvp,
    custom_vjp, register_rule). jit's rewrites (this module, inline_calls, vector_loops)
    write plain Python that is normalized again, in which such a call is the function's
    body, differentiated as written: jit(grad) ignored the rule."""
    for cf in program.functions.values():
        for stmt in _statements(cf.body):
            rule = getattr(getattr(stmt, "prim", None), "rule", None)
            if "@custom" in getattr(rule, "name", ""):
                return True
    return False


def scalarize(program, core, hints=None):
    """The program rewritten with small vectors as scalars, or None when nothing changes.

    `hints` maps parameters of the entry to the length of their small last axis, for a module
    compiled for those lengths (jit specialises on them): a vector argument then has that
    length, and a row ``a[i]`` of a matrix argument is a vector of it.
    Returns the module's source (not yet loaded); :func:`rebuild` makes the program and
    core form of it.
    """
    analysis = _Analysis(program, core, hints)
    analysis.settle()
    analysis.element_reads()
    if not any(fn.static(n) is not None for fn in analysis.functions.values()
               for n in fn.lengths) and not any(fn.reads for fn in analysis.functions.values()):
        return None
    sources = []
    for fn in analysis.functions.values():
        sources.append(_Writer(analysis, fn).function())
    doc = (f"{core.info.name} with its small vectors as scalars, generated by autodiff-ast for "
           "compiled code (autodiff_ast/scalarize.py). Regenerate instead of editing.")
    from codegen.helpers import helper_source
    used = {h for h in ("broadcast_index", "slice_index", "store_index")
            if any(f"{h}(" in s for s in sources)}
    return '"""' + doc + '"""\nimport math\n\nimport numpy as np\n\n\n' + "\n\n\n".join(
        [h.rstrip("\n") for h in helper_source(used)] + sources) + "\n"


def rebuild(program, core, text, made_up_temporaries=False):
    """Load `text` (what :func:`scalarize` wrote) as a module and normalize its entry for
    `core`'s flat signature: a new (program, core) in which the data the original reached
    keeps its names, or None when the signature is not one of arrays and numbers."""
    from codegen.loader import load_source

    from .frontend import parse_function
    from .naming import sanitize
    from .normalize import Program, normalize_into

    specs = {}
    for p in core.params:
        t = core.types.get(p)
        if t is None or t.kind not in ("array", "float", "int", "bool"):
            return None
        specs[p] = t
    module = load_source(text, sanitize(f"scalarized_{core.name}"))
    for emitted, (_, _, value) in program.data.items():
        setattr(module, emitted, value)
    info = parse_function(getattr(module, core.name))
    new = Program(reserved={"np", "math", "unbroadcast"} | set(program.data))
    new.data.update(program.data)
    if made_up_temporaries:
        # the names the rewrite made up (d_0, d_1, d_2) are temporaries, and so are the
        # temporaries of the core form it was written from (`add_5 = energy + mul_15`, then
        # `energy = add_5`: as a named value, its adjoint is carried round the loop)
        before = set()
        for cf in program.functions.values():
            before |= set(cf.params) | (set(cf.types) - cf.namer.temps)
        written = frozenset(n.id for n in ast.walk(ast.parse(text))
                            if isinstance(n, ast.Name))
        new.synthetic_names = frozenset(n for n in written if n not in before)
    return new, normalize_into(new, info, specs, core_name=core.name)

