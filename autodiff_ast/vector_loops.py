"""Arithmetic on vectors of a length known only at run time, written as loops over elements,
for compiled code (``jit``).

In a loop, code written for one item at a time works on whole rows: ADBench's GMM computes
``xcentered = x[i] - means[c]``, ``qxcentered = np.dot(qs[c], xcentered)`` and
``np.sum(qxcentered * qxcentered)`` for each of 25,000 (point, component) pairs, on vectors of
ten. Under Numba every such vector is a heap array and every row a view that counts
references: the gradient spent 42% of its time in atomic reference counts and a fifth in
malloc and free. :mod:`autodiff_ast.scalarize` turns vectors of a length known when the code
is written into scalars; this pass does the same for a length known only at run time, by
writing a run of consecutive vector statements as loops over their elements:

    length = same_length(x.shape[1], means.shape[1])
    length_2 = same_length(length, qs.shape[2])
    xcentered = np.empty(length_2)
    for j in range(length_2):
        xcentered_j = x[i, j] - means[c, j]
        xcentered[j] = xcentered_j
    sum_ = 0.0
    for j_2 in range(qs.shape[1]):
        total = 0.0
        for k in range(length_2):
            total = total + qs[c, j_2, k] * xcentered[k]
        qxcentered_j = total
        mul_j = qxcentered_j * qxcentered_j
        sum_ = sum_ + mul_j

(the lengths NumPy requires equal are checked once, before the loops; ``xcentered`` is made
whole because the product reads all of it; ``qxcentered`` never is).

Statement forms (core form, one operation each, types from the front end): a row ``v = a[i]``
of a float64 matrix or 3-D array with an integer index (read in place, ``a[i, j]``, never
made; a row bound before the run, while v, a and i keep their values, too, and a slice of a
row as ``a[i, start + j]``: ADBench's LSTM slices each gate's weights out of a row);
elementwise arithmetic and ufuncs whose result is a float64 vector of unknown length (``N``:
not one, so NumPy requires equal lengths, which ``same_length`` checks, raising
ValueError where NumPy would); ``np.sum(v)``; ``np.dot(m, v)`` of a row ``m = a[i]`` of a 3-D
array made in the same run and a vector (a small matrix: a larger one is BLAS's job); and
``np.dot(u, v)`` of two vectors. Consecutive statements over one length share one loop;
a vector is made as an array only when something outside its loop reads it (a later loop, a
``np.dot``, any other statement); otherwise its element is a scalar of the loop body. Reverse
mode then differentiates the loops (each step's new vector is a row of a preallocated tape).

Only runs inside loops are rewritten (and the whole body of a helper called in a loop): a
vector statement run once outside any loop may be long, and NumPy's whole-array form (with
its reassociated sums) is then as good or better. Only ``jit`` on the CPU asks for the
rewrite, after :mod:`autodiff_ast.scalarize` (:func:`autodiff_ast.build.prepare`);
``AUTODIFF_AST_SCALARIZE=0`` turns both off, and jit
builds from the original program if anything fails on the rewritten one.

>>> import numpy as np
>>> from autodiff_ast.build import prepare
>>> from autodiff_ast.normalize import spec_of
>>> def f(x, w):
...     total = 0.0
...     for i in range(x.shape[0]):
...         total = total + np.sum(np.tanh(x[i] * w))
...     return total
>>> info, program, core = prepare(f, {"x": spec_of(np.ones((4, 3))), "w": spec_of(np.ones(3))})
>>> print(vector_loops(program, core).split("\\n\\n\\n")[-1].strip())
def f(x, w):
    total = 0.0
    shape = x.shape
    item = shape[0]
    for i in range(item):
        length = same_length(x.shape[1], w.shape[0])
        sum__2 = 0.0
        for j in range(length):
            mul_2_j = x[i, j] * w[j]
            tanh_2_j = np.tanh(mul_2_j)
            sum__2 = sum__2 + tanh_2_j
        add_2 = total + sum__2
        total = add_2
    return total
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import gast

from codegen.emit import fresh_name, to_ast
from codegen.invariant_tables import stored_names

from .reverse import walk_statements
from .scalarize import ELEMENTWISE, header_text, rule_name, scalar_atom
from .templates import replace_names, unparse

__all__ = ["vector_loops"]

# ---------------------------------------------------------------- what a statement is
@dataclass
class _Form:
    kind: str  # row, slice, elementwise, call (an elementwise helper), sum, dot (a row of a
    # 3-D array times a vector), vdot (two vectors)
    target: str
    args: tuple = ()
    stmt: object = None


class _Function:
    """The types and names of one core function, and what its statements read."""

    def __init__(self, core, taken):
        self.core = core
        self.types = core.types
        body = gast.Module(body=core.body, type_ignores=[])
        self.names = {n.id for n in gast.walk(body) if isinstance(n, gast.Name)}
        self.names |= set(core.params)
        self.taken = taken | self.names
        self.written = set()  # bases of in-place writes: their rows are not views we can skip
        for stmt in walk_statements(core.body):
            prim = getattr(stmt, "prim", None)
            if prim is not None and prim.kind in ("setitem", "add_at", "append"):
                self.written.add(prim.base)

    def vector(self, name):
        """Whether `name` is a float64 vector whose length is not known to be one."""
        t = self.types.get(name)
        return t is not None and t.kind == "array" and t.dtype == "float64" and \
            t.dims == ("N",)

    def scalar(self, atom):
        return scalar_atom(atom, self.types)

    def integer(self, atom):
        if isinstance(atom, gast.Constant):
            return type(atom.value) is int
        t = self.types.get(atom.id) if isinstance(atom, gast.Name) else None
        return t is not None and t.kind == "int"

    def elemental(self, callee):
        """The user's helper `callee` (a core function) as a _Function when its body is only
        elementwise arithmetic on its vectors and numbers, returning one vector it makes
        (``1.0 / (1.0 + np.exp(-x))``): a call of it is elementwise too. Else None."""
        if callee is None or callee.recursive_calls or callee.checkpointed or \
                not callee.body or not isinstance(callee.returns, gast.Name):
            return None
        fn = _Function(callee, set())
        made = set()
        for stmt in callee.body:
            form = fn.classify(stmt)
            if form is None or form.kind != "elementwise" or form.target in made or \
                    form.target in callee.params or \
                    any(v not in made and v not in callee.params for v in form.args):
                return None
            made.add(form.target)
        return fn if callee.returns.id in made else None

    def independent_scalar(self, stmt, names, made):
        """Whether `stmt` binds a number no statement of a run mentions (`names`), from
        values none of them makes (`made`), with no effect besides: it can be computed before
        the run (``item = alphas[c]`` between the vector statements of one expression)."""
        prim = getattr(stmt, "prim", None)
        if not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or prim is None or \
                not isinstance(stmt.targets[0], gast.Name) or \
                prim.kind not in ("rule", "nondiff", "copy"):
            return False
        target = stmt.targets[0].id
        t = self.types.get(target)
        return t is not None and t.kind in ("float", "int", "bool") and target not in names \
            and not (_loads(stmt) & made)

    def classify(self, stmt):
        """The vector form of `stmt`, or None."""
        prim = getattr(stmt, "prim", None)
        if not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or prim is None or \
                not isinstance(stmt.targets[0], gast.Name):
            return None
        out = stmt.targets[0].id
        if prim.kind == "user" and self.vector(out) and isinstance(stmt.value, gast.Call) and \
                not stmt.value.keywords and all(isinstance(a, (gast.Name, gast.Constant))
                                                for a in stmt.value.args):
            callee = self.elemental(prim.callee)
            args = stmt.value.args
            if callee is not None and len(args) == len(callee.core.params):
                vectors = tuple(isinstance(a, gast.Name) and self.vector(a.id) for a in args)
                if all(v == callee.vector(p) for v, p in zip(vectors, callee.core.params)) and \
                        all(v or self.scalar(a) for v, a in zip(vectors, args)) and any(vectors):
                    return _Form("call", out, (callee, tuple(unparse(a) for a in args),
                                               vectors), stmt)
            return None
        if prim.kind not in ("rule", "nondiff") or prim.call is None:
            return None
        rule, call = rule_name(prim), prim.call
        args = {p: a for p, a in call.args.items() if a is not None}
        if isinstance(stmt.value, gast.Call) and stmt.value.keywords:
            return None
        if rule == "getitem" and set(args) == {"x", "index"} and \
                isinstance(args["x"], gast.Name) and isinstance(args["index"], gast.Slice) and \
                self.vector(args["x"].id) and self.vector(out) and \
                out not in self.written and args["x"].id not in self.written:
            index = args["index"]
            bounds = [None if b is None or isinstance(b, gast.Constant) and b.value is None
                      else b for b in (index.lower, index.upper, index.step)]
            if bounds[2] is None and all(b is None or self.integer(b) for b in bounds[:2]):
                lo = "0" if bounds[0] is None else unparse(bounds[0])
                hi = f"{args['x'].id}.shape[0]" if bounds[1] is None else unparse(bounds[1])
                return _Form("slice", out, (args["x"].id, lo, hi), stmt)
            return None
        if rule == "getitem" and set(args) == {"x", "index"} and \
                isinstance(args["x"], gast.Name) and self.integer(args["index"]):
            t = self.types.get(args["x"].id)
            if t is not None and t.kind == "array" and t.dtype == "float64" and \
                    t.dims is not None and len(t.dims) in (2, 3) and \
                    all(d == "N" for d in t.dims[1:]) and out not in self.written:
                return _Form("row", out, (args["x"].id, args["index"], len(t.dims) - 1), stmt)
            return None
        if rule in ELEMENTWISE and self.vector(out):
            atoms = list(args.values())
            if all(isinstance(a, gast.Constant) and self.scalar(a) or isinstance(a, gast.Name)
                   and (self.vector(a.id) or self.scalar(a)) for a in atoms):
                vectors = tuple(dict.fromkeys(a.id for a in atoms if isinstance(a, gast.Name)
                                              and self.vector(a.id)))
                if vectors:
                    return _Form("elementwise", out, vectors, stmt)
            return None
        if rule == "sum" and set(args) == {"x"} and isinstance(args["x"], gast.Name) and \
                self.vector(args["x"].id) and self.scalar(gast.Name(out, gast.Load(), None,
                                                                    None)):
            return _Form("sum", out, (args["x"].id,), stmt)
        if rule == "dot" and set(args) == {"a", "b"} and \
                all(isinstance(args[p], gast.Name) for p in ("a", "b")):
            a, b = args["a"].id, args["b"].id
            if self.vector(a) and self.vector(b):
                return _Form("vdot", out, (a, b), stmt)
            t = self.types.get(a)
            if self.vector(out) and self.vector(b) and t is not None and \
                    t.kind == "array" and t.dims == ("N", "N") and t.dtype == "float64":
                return _Form("dot", out, (a, b), stmt)
        return None


# ---------------------------------------------------------------- one run of statements
@dataclass
class _Loop:
    key: str  # the class of its length
    index: str
    length: str  # what its range reads
    before: list = field(default_factory=list)  # lines before the loop
    body: list = field(default_factory=list)  # lines of its body (not indented)
    sums: set = field(default_factory=set)  # the sums it accumulates


class _Run:
    """Consecutive vector statements of one block, written as loops over elements.

    Every vector the run reads or makes has a length; elementwise arithmetic (and the vector
    of ``np.dot``) says two lengths are equal. The lengths that must be equal form one class,
    checked once before the run's loops (``same_length``); statements of one class in a row
    share a loop."""

    def __init__(self, forms, later_reads, rows_before=None):
        self.forms = forms
        self.later_reads = later_reads  # names other statements read
        # row name -> (matrix, index text, rank of the row); rows bound before the run too
        self.rows = dict(rows_before or {})
        self.slices = {}  # slice name -> (vector, name of its start)
        self.texts = {v: f"{matrix}.shape[1]" for v, (matrix, _, rank) in self.rows.items()
                      if rank == 1}  # vector (or a product's inner length) -> its length's text
        self.parent = {}  # union-find over the names in texts and the vectors made here
        self.length_of = {}  # class root -> what a loop's range reads
        self.loop_of = {}  # vector made in the run -> the loop making it
        self.scalars = {}  # vector made in the run -> its element's scalar name in its loop

    def worthwhile(self):
        return any(f.kind not in ("row", "slice") for f in self.forms)

    # lengths
    def find(self, v):
        self.parent.setdefault(v, v)
        while self.parent[v] != v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)

    def made(self, v):
        return v in self.loop_of or any(
            f.target == v for f in self.forms if f.kind in ("elementwise", "call", "dot"))

    def read(self, v):
        """Note vector v read by the run: a vector from before it gets its own length."""
        if v not in self.rows and v not in self.slices and not self.made(v):
            self.texts.setdefault(v, f"{v}.shape[0]")
        self.find(v)

    def lengths(self, taken):
        """Lines binding each class's length (checked equal), before the run's loops."""
        lines = []
        members = {}
        for v, text in self.texts.items():
            members.setdefault(self.find(v), [])
            if text not in members[self.find(v)]:
                members[self.find(v)].append(text)
        for root, texts in members.items():
            if len(texts) == 1:
                self.length_of[root] = texts[0]
                continue
            name = texts[0]
            for other in texts[1:]:  # (one name per check: each bound once)
                check = f"same_length({name}, {other})"
                name = fresh_name("length", taken)
                lines.append(f"{name} = {check}")
            self.length_of[root] = name
        return lines

    def length(self, v):
        return self.length_of[self.find(v)]

    # elements
    def element(self, v, index, loop):
        """Element `index` of vector v, read in `loop`."""
        if v in self.rows:
            matrix, at, _ = self.rows[v]
            return f"{matrix}[{at}, {index}]"
        if v in self.slices:
            vector, start = self.slices[v]
            if vector in self.rows:  # a slice of a row: read in the matrix, no view made
                matrix, at, _ = self.rows[vector]
                return f"{matrix}[{at}, {start} + {index}]"
            return f"{vector}[{start} + {index}]"
        if self.loop_of.get(v) is loop and v in self.scalars:
            return self.scalars[v]
        return f"{v}[{index}]"

    def write(self, taken):
        """The run's statements as source lines (not indented)."""
        lines = []
        for form in self.forms:  # what each vector is, and which lengths must be equal
            if form.kind == "row":
                matrix, index, rank = form.args
                self.rows[form.target] = (matrix, unparse(index), rank)
                if rank == 1:
                    self.texts[form.target] = f"{matrix}.shape[1]"
                continue
            if form.kind == "slice":
                vector, lo, hi = form.args
                self.read(vector)
                start, length = fresh_name("start", taken), fresh_name("length", taken)
                n = f"{self.rows[vector][0]}.shape[1]" if vector in self.rows and \
                    self.rows[vector][2] == 1 else f"{vector}.shape[0]"
                if hi == f"{vector}.shape[0]":  # (v[a:], v a row: up to the row's length)
                    hi = n
                lines += [f"{start} = slice_start({n}, {lo})",
                          f"{length} = slice_length({n}, {lo}, {hi})"]
                self.slices[form.target] = (vector, start)
                self.texts[form.target] = length
                continue
            if form.kind == "dot":
                matrix, vector = form.args
                base = self.rows[matrix][0]
                self.read(vector)
                self.texts[form.target] = f"{base}.shape[1]"
                self.texts[f"{base}.shape[2]"] = f"{base}.shape[2]"
                self.union(f"{base}.shape[2]", vector)
                self.find(form.target)
                continue
            vectors = self.vectors_read(form)
            for v in vectors:
                self.read(v)
            if form.kind in ("elementwise", "call"):
                for v in vectors:
                    self.union(form.target, v)
            elif form.kind == "vdot":
                self.union(vectors[0], vectors[1])
        lines += self.lengths(taken)
        loops, forms_loop, current = [], [], None
        for form in self.forms:
            if form.kind in ("row", "slice"):
                continue
            cls = self.find(form.target if form.kind in ("elementwise", "call", "dot")
                            else self.vectors_read(form)[0])
            if form.kind == "dot" or current is None or current.key != cls or \
                    _loads(form.stmt) & current.sums:  # (a sum is read once it is whole)
                current = _Loop(cls, fresh_name("j", taken), length=self.length_of[cls])
                loops.append(current)
            if form.kind in ("sum", "vdot"):
                current.sums.add(form.target)
            if form.kind in ("elementwise", "call", "dot"):
                self.loop_of[form.target] = current
            forms_loop.append((form, current))
        kept = self.kept(forms_loop)
        for form, loop in forms_loop:
            self._statement(form, loop, form.target in kept, taken)
        kept_views = [f.stmt for f in self.forms
                      if f.kind in ("row", "slice") and f.target in self.later_reads]
        lines = [unparse(stmt) for stmt in kept_views] + lines
        for loop in loops:
            lines += loop.before
            lines.append(f"for {loop.index} in range({loop.length}):")
            lines += ["    " + line for line in loop.body]
        return lines

    def vectors_read(self, form):
        if form.kind == "call":
            return [a for a, vector in zip(form.args[1], form.args[2]) if vector]
        if form.kind == "dot":
            return [form.args[1]]
        return list(form.args)

    def kept(self, forms_loop):
        """Vectors made in the run that must be arrays: read by other statements, by another
        loop of the run, or as the vector of a matrix product."""
        kept = {v for v in self.loop_of if v in self.later_reads}
        for form, loop in forms_loop:
            for v in self.vectors_read(form):
                if v in self.loop_of and (self.loop_of[v] is not loop or form.kind == "dot"):
                    kept.add(v)
        return kept

    def _statement(self, form, loop, kept, taken):
        j = loop.index
        if form.kind in ("sum", "vdot"):
            terms = " * ".join(self.element(v, j, loop) for v in form.args)
            loop.before.append(f"{form.target} = 0.0")
            loop.body.append(f"{form.target} = {form.target} + {terms}")
            return
        scalar = fresh_name(f"{form.target}_j", taken)
        if form.kind == "elementwise":
            value = replace_names(to_ast(form.stmt.value),
                                   {v: self.element(v, j, loop) for v in form.args})
            loop.body.append(f"{scalar} = {ast.unparse(value)}")
        elif form.kind == "call":  # an elementwise helper's body, element by element
            callee, args, vectors = form.args
            texts = {}
            for param, arg, vector in zip(callee.core.params, args, vectors):
                texts[param] = self.element(arg, j, loop) if vector else arg
            for inner in callee.core.body:
                out = inner.targets[0].id
                value = replace_names(to_ast(inner.value), dict(texts))
                texts[out] = fresh_name(f"{out}_j", taken)
                loop.body.append(f"{texts[out]} = {ast.unparse(value)}")
            loop.body.append(f"{scalar} = {texts[callee.core.returns.id]}")
        else:  # dot: row j of the matrix times the vector
            matrix, vector = form.args
            base, at, _ = self.rows[matrix]
            k, total = fresh_name("k", taken), fresh_name("total", taken)
            loop.body += [f"{total} = 0.0",
                          f"for {k} in range({self.length(vector)}):",
                          f"    {total} = {total} + {base}[{at}, {j}, {k}] * "
                          f"{self.element(vector, k, None)}", f"{scalar} = {total}"]
        self.scalars[form.target] = scalar  # (later statements of the loop read it)
        if kept:
            loop.before.append(f"{form.target} = np.empty({loop.length})")
            loop.body.append(f"{form.target}[{j}] = {scalar}")


# ---------------------------------------------------------------- blocks and functions
def _names_in(text):
    """Names in an expression's text (an index: ``i``, ``c + 1``)."""
    return {n.id for n in gast.walk(gast.parse(text, mode="eval")) if isinstance(n, gast.Name)}


def _loads(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load)}


class _Rewriter:
    def __init__(self, fn, taken):
        self.fn = fn
        self.taken = taken
        self.changed = False
        self.rows_before = {}  # rows the block's earlier runs left: name -> (matrix, index, rank)
        returns = fn.core.returns
        self.returned = _loads(returns) if returns is not None else set()
        # what each statement reads (a loop's or branch's header apart from its body)
        self.reads = []
        for stmt in walk_statements(fn.core.body):
            if isinstance(stmt, (gast.For, gast.While, gast.If)):
                header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
                self.reads.append((stmt, _loads(header)))
            else:
                self.reads.append((stmt, _loads(stmt)))

    def block(self, stmts, in_loop):
        """`stmts` with their runs of vector statements written as loops (a list of lines
        and statements). A row ``v = a[i]`` a run did not take (a run of rows alone) stays
        a row for the runs after it while v, a and i keep their values: their element loops
        read ``a[i, j]`` (and slices of it ``a[i, start + j]``), no view of the row needed
        (ADBench's LSTM: the gate weights' rows, sliced per gate)."""
        out, run, names, made = [], [], set(), set()
        outer_rows, self.rows_before = self.rows_before, {}
        for stmt in stmts:
            self._forget_rows(stmt)
            form = self.fn.classify(stmt) if in_loop else None
            if form is not None and form.kind == "dot" and not any(
                    f.kind == "row" and f.target == form.args[0] and f.args[2] == 2
                    for f in run):
                form = None  # (a matrix product: only a row of a 3-D array, made here)
            if form is not None and form.target in _loads(form.stmt):
                form = None  # (v = v * 2: the new array would be made before v is read)
            if form is not None and form.target in names:
                out += self.flush(run)
                self._forget_rows(stmt)
                run, names, made = [], set(), set()
            if form is not None:
                run.append(form)
                names |= _loads(form.stmt) | {form.target}
                made.add(form.target)
                continue
            if run and self.fn.independent_scalar(stmt, names, made):
                out.append(stmt)  # computed before the run's loops: the run goes on
                continue
            out += self.flush(run)
            self._forget_rows(stmt)  # (the rows the flushed run left, if stmt changes them)
            run, names, made = [], set(), set()
            shape = self._row_shape(stmt)
            if shape is not None:  # v.shape of a row: the matrix's (the row need not be made)
                out.append([shape])
                continue
            if isinstance(stmt, (gast.For, gast.While, gast.If)):
                loop = in_loop or isinstance(stmt, (gast.For, gast.While))
                out.append((stmt, self.block(stmt.body, loop), self.block(stmt.orelse, loop)))
            else:
                out.append(stmt)
        out += self.flush(run)
        self.rows_before = outer_rows
        return out

    def flush(self, run):
        if not run:
            return []
        # names any other statement reads (before or after: a loop runs its body again)
        mine = {id(f.stmt) for f in run}
        later = set(self.returned)
        for stmt, reads in self.reads:
            if id(stmt) not in mine:
                later |= reads
        r = _Run(run, later, {v: row for v, row in self.rows_before.items()
                              if v not in {f.target for f in run}})
        if not r.worthwhile():
            for f in run:
                if f.kind == "row":
                    matrix, index, rank = f.args
                    self.rows_before[f.target] = (matrix, unparse(index), rank)
            return [f.stmt for f in run]
        self.changed = True
        return [r.write(self.taken)]

    def _row_shape(self, stmt):
        """``t = a.shape[1:]`` written out for ``t = v.shape`` when v is a row ``a[i]`` the
        runs remember, else None."""
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
                isinstance(stmt.targets[0], gast.Name) and
                isinstance(stmt.value, gast.Attribute) and stmt.value.attr == "shape" and
                isinstance(stmt.value.value, gast.Name) and
                stmt.value.value.id in self.rows_before):
            return None
        matrix, _, rank = self.rows_before[stmt.value.value.id]
        axes = ", ".join(f"{matrix}.shape[{k}]" for k in range(1, rank + 1))
        return f"{stmt.targets[0].id} = ({axes},)"

    def _forget_rows(self, stmt):
        """Rows remembered for later runs that `stmt` may change: it binds the row's name,
        its matrix or a name of its index (a loop or branch: anything bound inside it)."""
        if not self.rows_before:
            return
        bound = stored_names([stmt])
        for v, (matrix, at, _) in list(self.rows_before.items()):
            if {v, matrix} & bound or any(n in bound for n in _names_in(at)):
                del self.rows_before[v]

    def text(self, items, indent):
        lines = []
        pad = "    " * indent
        for item in items:
            if isinstance(item, list):  # lines of a run
                lines += [pad + line for line in item]
            elif isinstance(item, tuple):
                stmt, body, orelse = item
                lines.append(pad + header_text(stmt))
                lines += self.text(body, indent + 1) or [pad + "    pass"]
                if stmt.orelse:
                    lines.append(pad + "else:")
                    lines += self.text(orelse, indent + 1) or [pad + "    pass"]
            else:
                lines += [pad + line for line in unparse(item).rstrip("\n").split("\n")]
        return lines


def _function_text(fn, rewriter, items):
    core = fn.core
    lines = [f"def {core.name}({', '.join(core.params)}):"]
    lines += rewriter.text(items, 1) or ["    pass"]
    if core.returns is not None:
        lines.append(f"    return {unparse(core.returns)}")
    return "\n".join(lines)


def _called_in_loops(functions):
    """ids of the core functions called inside a loop, or by a function that is."""
    calls = {}  # id(caller) -> [(id(callee), called in a loop)]

    def visit(cf, stmts, in_loop):
        for stmt in stmts:
            if isinstance(stmt, (gast.For, gast.While, gast.If)):
                loop = in_loop or not isinstance(stmt, gast.If)
                visit(cf, stmt.body, loop)
                visit(cf, stmt.orelse, loop)
                continue
            prim = getattr(stmt, "prim", None)
            if prim is not None and prim.kind == "user" and prim.callee is not None:
                calls.setdefault(id(cf), []).append((id(prim.callee), in_loop))

    for cf in functions:
        visit(cf, cf.body, False)
    hot = {callee for pairs in calls.values() for callee, in_loop in pairs if in_loop}
    grown = True
    while grown:
        grown = False
        for caller in list(hot):
            for callee, _ in calls.get(caller, ()):
                if callee not in hot:
                    hot.add(callee)
                    grown = True
    return hot


# ---------------------------------------------------------------- entry point
def vector_loops(program, core):
    """The program with its runs of vector statements in loops written as element loops (the
    module's source, for :func:`autodiff_ast.scalarize.rebuild`), or None when nothing
    changes."""
    functions = list(program.functions.values())
    if any(cf.recursive_calls or cf.checkpointed for cf in functions):
        return None
    taken = {cf.name for cf in functions} | set(program.data) | {
        "np", "math", "same_length", "slice_start", "slice_length"}
    hot = _called_in_loops(functions)
    sources, changed = [], False
    for cf in functions:
        fn = _Function(cf, taken)
        rewriter = _Rewriter(fn, set(fn.taken))
        items = rewriter.block(cf.body, id(cf) in hot)
        changed |= rewriter.changed
        sources.append(_function_text(fn, rewriter, items))
    if not changed:
        return None
    from codegen.helpers import helper_source
    doc = (f"{core.info.name} with its vector arithmetic in loops as element loops, generated "
           "by autodiff-ast for compiled code (autodiff_ast/vector_loops.py). Regenerate "
           "instead of editing.")
    used = {h for h in ("same_length", "slice_start", "slice_length")
            if any(f"{h}(" in s for s in sources)}
    return '"""' + doc + '"""\nimport math\n\nimport numpy as np\n\n\n' + "\n\n\n".join(
        [h.rstrip("\n") for h in helper_source(used)] + sources) + "\n"
