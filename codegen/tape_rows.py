"""Rows of a tape read in place: a step's vector is a row number, not a view.

Reverse mode keeps a vector made in each step of a loop as a row of a preallocated tape
(:meth:`autodiff_ast.reverse.ReverseBuilder._plan_preallocated_tapes`). The forward sweep
binds the name to its row and the backward sweep binds it back to the row before:

    xcentered = np.zeros((0,))
    xcentered_before_loop = xcentered
    for i in range(n):
        for c in range(k):
            xcentered = xcentered_tape[i * k + c]
            for j in range(d):
                xcentered[j] = x[i, j] - means[c, j]
            ...
    ...
    for i in range(n - 1, -1, -1):
        for c in range(k - 1, -1, -1):
            ... xcentered[j] ...
            xcentered = xcentered_tape[i * k + c - 1] if i * k + c > 0 else xcentered_before_loop

Under Numba each of those bindings makes a view that counts references to the tape with
atomic instructions (ADBench GMM's gradient: 28% of its samples in the two atomic functions).
:func:`read_rows_in_place` keeps the row's number instead (``xcentered_row = i * k + c``,
``xcentered_row = i * k + c - 1``) and reads the tape where the loop read the view:

- ``v[j]`` (an element, read or written) becomes ``tape[v_row, j]`` (and ``v[a:b]``
  ``tape[v_row, a:b]`` where the row is bound, see below);
- ``v.shape[0]`` and ``v.size`` become ``tape.shape[1]`` (or the placeholder's, before the
  first row);
- any other use becomes ``(tape[v_row] if v_row >= 0 else v_before_loop)``: a view where
  one is needed (``np.max(v)``, ``v[:] = 0.0``);
- where the row is known to be bound, in a step after its binding and in a backward step
  before its restore, the choices go: ``tape[v_row]``, ``tape.shape[1]`` (ADBench GMM's
  gradient, three fresh processes each way in turns: best runs 7.49, 7.62, 8.31 ms against
  8.30, 7.78, 7.90 ms; first calls 13.4-14.2 s both ways);

and, after each loop that binds it, binds ``v`` to that same expression once, for the code
after the loop.

When: ``v`` is bound only by its zero-size placeholder at the top level (``np.zeros((0,))``,
``np.empty(0)``), the copy ``v_before_loop = v`` right after it, rows of one tape made at the
top level as ``np.empty((rows, length), dtype=np.float64)`` (``v = tape[s]``), and the
restores ``v = tape[s - 1] if s > 0 else v_before_loop``. Before the first row ``v`` is the
zero-size placeholder, so no element of it is ever read: ``tape[-1, j]`` never runs.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, n):
...     t_tape = np.empty((n, 3), dtype=np.float64)
...     t = np.zeros((0,))
...     t_before_loop = t
...     for i in range(n):
...         t = t_tape[i]
...         t[0] = x[i]
...         m = np.max(t)
...     s = np.sum(t)
...     for i in range(n - 1, -1, -1):
...         y = t[0] + t.shape[0]
...         t = t_tape[i - 1] if i > 0 else t_before_loop
...         z = t.size
...     return (s, y, z)
... ''').body[0]
>>> read_rows_in_place(fn, {"f", "x", "n", "t_tape", "t", "t_before_loop", "i", "m", "s",
...                           "y", "z"})
['t']
>>> print(unparse(fn))
def f(x, n):
    t_tape = np.empty((n, 3), dtype=np.float64)
    t = np.zeros((0,))
    t_before_loop = t
    t_row = -1
    for i in range(n):
        t_row = i
        t_tape[t_row, 0] = x[i]
        m = np.max(t_tape[t_row])
    t = t_tape[t_row] if t_row >= 0 else t_before_loop
    s = np.sum(t)
    for i in range(n - 1, -1, -1):
        y = t_tape[t_row, 0] + t_tape.shape[1]
        t_row = i - 1
        z = t_tape.shape[1] if t_row >= 0 else t_before_loop.size
    t = t_tape[t_row] if t_row >= 0 else t_before_loop
    return (s, y, z)
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, name_node, text_of
from .param_writes import dotted_name

__all__ = ["read_rows_in_place"]

_EMPTY = frozenset({"np.zeros", "np.empty"})


def _parse(text):
    return gast.parse(text, mode="eval").body


def _zero_size(node):
    """`np.zeros((0,))`, `np.zeros(0)`, `np.empty((0,))` or `np.empty(0)`."""
    if not (isinstance(node, gast.Call) and dotted_name(node.func) in _EMPTY and
            len(node.args) == 1 and not node.keywords):
        return False
    shape = node.args[0]
    if isinstance(shape, gast.Tuple) and len(shape.elts) == 1:
        shape = shape.elts[0]
    return isinstance(shape, gast.Constant) and shape.value == 0


def _row_tape(node):
    """`np.empty((rows, length), dtype=np.float64)`."""
    return isinstance(node, gast.Call) and dotted_name(node.func) == "np.empty" and \
        len(node.args) == 1 and isinstance(node.args[0], gast.Tuple) and \
        len(node.args[0].elts) == 2 and [k.arg for k in node.keywords] == ["dtype"] and \
        dotted_name(node.keywords[0].value) == "np.float64"


def _has_slice(index):
    elts = index.elts if isinstance(index, gast.Tuple) else [index]
    return any(isinstance(e, gast.Slice) for e in elts)


def _row_binding(value):
    """(tape, step) of `tape[step]` with a name tape and an index without a slice."""
    if isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name) and \
            not _has_slice(value.slice) and not isinstance(value.slice, gast.Tuple):
        return value.value.id, value.slice
    return None


def _restore(value):
    """(tape, step before, placeholder) of `tape[s - 1] if s > 0 else before`."""
    if not (isinstance(value, gast.IfExp) and isinstance(value.orelse, gast.Name)):
        return None
    found = _row_binding(value.body)
    test = value.test
    if found is None or not (isinstance(test, gast.Compare) and len(test.ops) == 1 and
                             isinstance(test.ops[0], gast.Gt) and
                             text_of(test.comparators[0]) == "0"):
        return None
    tape, before = found
    if text_of(before) != f"{text_of(test.left)} - 1":
        return None
    return tape, before, value.orelse.id


class _Candidate:
    """What one name's bindings show: its placeholder, copy, tape and the top-level
    statements that bind its rows."""

    def __init__(self, name):
        self.name = name
        self.placeholder = None  # index of `v = np.zeros((0,))` in the body
        self.copy = None  # (index, name) of `v_before_loop = v`
        self.tape = None
        self.loops = set()  # indices of top-level statements binding rows or restoring
        self.bad = False


def _assignments(stmt):
    """(target name, value, node) of every binding of a name in `stmt`: value is the assigned
    expression of ``name = value``, None for any other binding (a loop's target, a tuple's
    element, an augmented assignment); a nested scope is the name ""."""
    found, simple = [], set()
    for node in gast.walk(stmt):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name):
            found.append((node.targets[0].id, node.value, node))
            simple.add(id(node.targets[0]))
        elif isinstance(node, (gast.FunctionDef, gast.Lambda, gast.Global, gast.Nonlocal)):
            found.append(("", None, node))
    for node in gast.walk(stmt):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)) and \
                id(node) not in simple:
            found.append((node.id, None, node))
    return found


def _candidates(fn):
    tapes = {}
    counts = {}
    for stmt in fn.body:
        for target, _, _ in _assignments(stmt):
            counts[target] = counts.get(target, 0) + 1
    if "" in counts:
        return []
    for stmt in fn.body:
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and _row_tape(stmt.value) and \
                counts[stmt.targets[0].id] == 1:
            tapes[stmt.targets[0].id] = stmt
    params = {a.id for a in fn.args.args}
    found = {}
    for index, stmt in enumerate(fn.body):
        for target, value, node in _assignments(stmt):
            if target in params or target in tapes:
                continue
            cand = found.setdefault(target, _Candidate(target))
            top = node is stmt
            if top and value is not None and _zero_size(value) and cand.placeholder is None:
                cand.placeholder = index
                continue
            row = _row_binding(value) if value is not None and not top else None
            restore = _restore(value) if value is not None and not top else None
            tape = row[0] if row else restore[0] if restore else None
            if tape is None or tape not in tapes or cand.tape not in (None, tape):
                cand.bad = True
                continue
            if restore and (cand.copy is None or restore[2] != cand.copy[1]):
                cand.bad = True
                continue
            cand.tape = tape
            cand.loops.add(index)
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Name):
            cand = found.get(stmt.value.id)
            if cand is not None and cand.placeholder is not None and cand.copy is None and \
                    not cand.loops and counts[stmt.targets[0].id] == 1:
                cand.copy = (index, stmt.targets[0].id)
    return [c for c in found.values() if not c.bad and c.tape and c.copy and c.loops and
            c.placeholder is not None and min(c.loops) > c.copy[0]]


def _is_reset_of(node, v):
    """Whether `node` is buffer_reuse's reset of v's adjoint (see :meth:`_InPlace.visit_If`)."""
    if not (len(node.body) == 1 and len(node.orelse) == 1 and
            isinstance(node.body[0], gast.Assign) and len(node.body[0].targets) == 1 and
            isinstance(node.body[0].targets[0], gast.Subscript) and
            isinstance(node.body[0].targets[0].value, gast.Name)):
        return False
    bar = node.body[0].targets[0].value.id
    expected = (f"{bar}.shape[0] == ({v}.shape[0] if {v}.size else {bar}.shape[0])",
                f"{bar}[:] = 0",
                f"{bar} = np.zeros_like({v}) if {v}.size else np.zeros_like({bar})")
    found = (text_of(node.test), text_of(node.body[0]), text_of(node.orelse[0]))
    return tuple(t.strip() for t in found) == expected


class _InPlace(gast.NodeTransformer):
    """Inside one top-level statement: v's bindings become row numbers, its uses reads of
    the tape."""

    def __init__(self, cand, row):
        self.v, self.tape, self.row, self.before = cand.name, cand.tape, row, cand.copy[1]
        self.bound = False  # whether v_row >= 0 where the statement being visited runs

    def view(self):
        """`tape[v_row] if v_row >= 0 else v_before_loop`: what v is (`tape[v_row]` where
        the row is known to be bound)."""
        if self.bound:
            return _parse(f"{self.tape}[{self.row}]")
        return _parse(f"{self.tape}[{self.row}] if {self.row} >= 0 else {self.before}")

    def rewrite(self, stmt):
        """`stmt`, a top-level statement, rewritten (before it the row may be -1)."""
        self.bound = False
        return self.visit(stmt)

    def _kind(self, stmt):
        """"bind" for `v = tape[s]`, "restore" for `v = tape[s - 1] if s > 0 else before`."""
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and stmt.targets[0].id == self.v:
            return "restore" if _restore(stmt.value) else "bind"
        return None

    def _restores_in(self, node):
        return any(self._kind(inner) == "restore" for inner in gast.walk(node))

    def _block(self, stmts, bound):
        """Statements in order, knowing whether the row is bound at their start. A step's
        binding (`v_row = s`, s a step number, never negative) binds it for the statements
        after it; a restore (`v_row = s - 1`) may unbind it. A step of the backward sweep
        starts with the row its forward step bound (the last forward step's, then the one the
        step after restored), so the body of a loop holding the restore starts bound."""
        out = []
        for stmt in stmts:
            self.bound = bound
            kind = self._kind(stmt)
            kept = bound and not self._restores_in(stmt)  # bound through it and after it
            if isinstance(stmt, gast.If):
                reset = self._reset(stmt)
                stmt.test = self.visit(stmt.test)
                stmt.body = self._block(stmt.body, bound)
                stmt.orelse = self._block(stmt.orelse, bound)
                new = stmt.body[0] if reset else stmt
            elif isinstance(stmt, gast.For):
                stmt.target, stmt.iter = self.visit(stmt.target), self.visit(stmt.iter)
                starts = any(self._kind(s) == "restore" for s in stmt.body) or kept
                stmt.body = self._block(stmt.body, starts)
                stmt.orelse = self._block(stmt.orelse, kept)
                new = stmt
            elif isinstance(stmt, gast.While):
                self.bound = kept
                stmt.test = self.visit(stmt.test)
                stmt.body = self._block(stmt.body, kept)
                stmt.orelse = self._block(stmt.orelse, kept)
                new = stmt
            else:
                if not isinstance(stmt, (gast.Assign, gast.AugAssign, gast.AnnAssign,
                                         gast.Expr, gast.Return, gast.Pass)):
                    self.bound = False  # (a with, a try: not followed)
                new = self.visit(stmt)
            bound = kind == "bind" or kept  # (a restore is never kept)
            out.append(new)
        return out

    def visit_If(self, node):
        return self._block([node], self.bound)[0]

    def visit_For(self, node):
        return self._block([node], self.bound)[0]

    def visit_While(self, node):
        return self._block([node], self.bound)[0]

    def _reset(self, node):
        """The reset of v's adjoint after a step (codegen/buffer_reuse.py)::

            if v_bar.shape[0] == (v.shape[0] if v.size else v_bar.shape[0]):
                v_bar[:] = 0
            else:
                v_bar = np.zeros_like(v) if v.size else np.zeros_like(v_bar)

        is ``v_bar[:] = 0``. Every row has the tape's length, and v_bar, made as zeros of the
        last row before the backward sweep and given v's shape by every adjoint update, has it
        too whenever a step runs; when v is the zero-size placeholder (the row before the
        first) the test holds as well. Written out, the choice rebound v_bar in the loop: a
        second array value Numba carries through every step (ADBench GMM's gradient: its
        entry compiled in 5.96-6.19 s with it, 5.45-5.47 s without, and ran in 7.94 ms
        against 7.53 ms). Returns the statement `node` becomes, or None."""
        return node.body[0] if _is_reset_of(node, self.v) else None

    def visit_Assign(self, node):
        if len(node.targets) == 1 and isinstance(node.targets[0], gast.Name) and \
                node.targets[0].id == self.v:
            restore = _restore(node.value)
            step = restore[1] if restore else _row_binding(node.value)[1]
            return gast.Assign(targets=[name_node(self.row, gast.Store())],
                               value=self.visit(copy.deepcopy(step)), type_comment=None)
        return self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.value, gast.Name) and node.value.id == self.v and \
                (self.bound or not _has_slice(node.slice)):
            index = self.visit(node.slice)
            elts = list(index.elts) if isinstance(index, gast.Tuple) else [index]
            return gast.Subscript(value=name_node(self.tape), slice=gast.Tuple(
                elts=[name_node(self.row)] + elts, ctx=gast.Load()), ctx=node.ctx)
        if isinstance(node.value, gast.Attribute) and node.value.attr == "shape" and \
                isinstance(node.value.value, gast.Name) and node.value.value.id == self.v \
                and isinstance(node.slice, gast.Constant) and node.slice.value in (0, -1):
            return self._length("shape[0]")
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr == "size" and isinstance(node.value, gast.Name) and \
                node.value.id == self.v:
            return self._length("size")
        return self.generic_visit(node)

    def _length(self, attribute):
        if self.bound:
            return _parse(f"{self.tape}.shape[1]")
        return _parse(f"({self.tape}.shape[1] if {self.row} >= 0 else "
                      f"{self.before}.{attribute})")

    def visit_Name(self, node):
        if node.id == self.v and isinstance(node.ctx, gast.Load):
            return self.view()
        return node


def read_rows_in_place(fn, taken):
    """Rewrite `fn` (a gast FunctionDef, in place) so the rows of its row tapes are read in
    place; `taken` holds the module's names (new ones are added). Returns the names whose
    rows are now row numbers."""
    done = []
    while True:  # one name at a time: each rewrite moves the statements after it
        found = sorted(_candidates(fn), key=lambda c: c.name)
        if not found:
            return done
        cand = found[0]
        row = fresh_name(f"{cand.name}_row", taken)
        taken.add(row)
        rewrite = _InPlace(cand, row)
        body = []
        for index, stmt in enumerate(fn.body):
            if index in cand.loops:
                body.append(rewrite.rewrite(stmt))
                rewrite.bound = False  # (after a loop that may not have run)
                body.append(gast.Assign(targets=[name_node(cand.name, gast.Store())],
                                        value=rewrite.view(), type_comment=None))
            else:
                body.append(stmt)
            if index == cand.copy[0]:
                body.append(gast.Assign(targets=[name_node(row, gast.Store())],
                                        value=gast.Constant(value=-1, kind=None),
                                        type_comment=None))
        fn.body = body
        done.append(cand.name)
