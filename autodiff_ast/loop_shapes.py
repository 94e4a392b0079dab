"""Which values may change shape from one step of a loop to the next.

The backward sweep reads some values only for their shape (``np.zeros_like(t)``, ``t.shape``):
such reads keep no tape when the value has the same shape in every step, the common case. An
array that shrinks or grows in a loop (``y = y[1:] * 0.9``, ``np.array(vals)`` of a list the
loop appends to) needs its shape at each step, so reverse mode counts the shape-only reads of
the names found here as reads of their values (autodiff_ast/reverse.py: ``value_reads``).

The function is read once in order, giving each name a symbolic shape: an expression of the
parameters' shapes that two values share only if their shapes are equal (``("index", S,
parts)`` for a slice of an array of shape S, ``("dim", S, k, rank)`` for an integer that is
axis k of S, ``("list", length, element)``...). Integers are tracked by value, since shapes are
made from them; numbers read out of arrays, loop indices and anything else that may differ
from step to step are VARY. Each name a loop assigns starts a step with a head shape of its
own; a name whose shape at the end of a step, with the shapes on entry put for the head
shapes, is not its shape on entry is VARY in the loop, and the body is read again until
nothing changes. After a top-level loop such a name has one (unknown) shape.

Elementwise arithmetic and products in a loop keep the shape of the operand carried from step
to step (in a program that runs, ``h = np.tanh(W @ h)`` keeps h's shape): this is the one
guess the analysis makes, and it misses an array that a loop grows by broadcasting
(``y = y * W`` with W of more axes), which changes shape once.

>>> import numpy as np
>>> from autodiff_ast.frontend import parse_function
>>> from autodiff_ast.normalize import normalize
>>> from autodiff_ast import types as T
>>> def f(x, w):
...     y = x * 1.0
...     h = x * 2.0
...     while y.shape[0] > 1:
...         h = np.tanh(w * h)
...         y = y[1:] * 0.9
...     return y[0] + h[0]
>>> core = normalize(parse_function(f), {"x": T.array((T.N,)), "w": T.array((T.N,))})
>>> sorted(varying_shapes(core))
['item_2', 'shape_2', 'y']
"""

from __future__ import annotations

import gast

from .templates import unparse

VARY = ("vary",)
FLOAT = ("float",)
_CONTROL = (gast.If, gast.For, gast.While)

# Calls whose result has the broadcast shape of their array operands.
_KEEPS_SHAPE = {"copy", "asarray", "astype", "where", "clip", "power", "maximum", "minimum",
                "matmul", "dot", "fmax", "fmin", "float", "ascontiguousarray"}
_LIKE = {"zeros_like", "ones_like", "empty_like", "full_like"}
_MAKERS = {"zeros", "ones", "empty", "full"}
# Calls whose result's shape depends on the values of an array argument.
_VALUE_SHAPED = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress",
                 "trim_zeros"}
_SHAPE_READS = {"len", "shape", "size", "ndim"}
_MAX_PASSES = 8
_MAX_DEPTH = 4


def varying_shapes(core):
    """Names of `core` whose shape (or, for integers, value) may differ between two steps of
    a loop they are assigned or read in (numbers left out: only reads of a shape matter)."""
    from .reverse import walk_statements
    if not any(isinstance(s, (gast.For, gast.While)) for s in walk_statements(core.body)):
        return set()
    reader = _Shapes(core)
    reader.block(core.body, {p: ("same", p) for p in core.params})
    return {n for n in reader.found if reader.kind(n) not in ("int", "bool", "float")}


def _elementwise_rules():
    from .rules.elementwise import PARTIALS, PIECEWISE_CONSTANT
    return set(PARTIALS) | set(PIECEWISE_CONSTANT) | _KEEPS_SHAPE


def _join(a, b):
    """The shape of a value that has shape `a` or `b` (None: not bound yet)."""
    if a is None or (a[0] == "element" and b is not None and b != VARY):
        return b  # (the elements of a list are taken to have one shape)
    if b is None or a == b or (b[0] == "element" and a != VARY):
        return a
    if a[0] == b[0] == "list":  # a list: its length and its elements joined apart
        return ("list", _join(a[1], b[1]), _join(a[2], b[2]))
    # a broadcast has the shape of each of its leaves (in a program that runs)
    left = a[1] if a[0] == "broadcast" else (a,)
    right = b[1] if b[0] == "broadcast" else (b,)
    common = [leaf for leaf in left if leaf in right and leaf != VARY]
    return common[0] if common else VARY


def _substitute(sym, mapping):
    """`sym` with the shapes of `mapping` replaced."""
    if sym in mapping:
        return mapping[sym]
    if isinstance(sym, tuple):
        return tuple(_substitute(c, mapping) for c in sym)
    return sym


def _mentions(sym, part):
    return sym == part or (isinstance(sym, tuple) and any(_mentions(c, part) for c in sym))


def _part(sym, k):
    if sym[0] == "tuple" and k < len(sym[1]):
        return sym[1][k]
    return ("part", sym, k)


def _keeps(end, head, before, entry):
    """Whether a name whose shape is `head` at the start of a step and `end` at its end (and
    `before` on entry to the loop) has one shape in every step (`entry` maps the head shapes
    to the shapes on entry)."""
    if end == head:
        return True
    if end == VARY or head == VARY:
        return False
    if end[0] == "broadcast" and head in end[1]:
        return True  # (in a program that runs, ``h = np.tanh(W @ h)`` keeps h's shape)
    if end[0] == "tuple":
        return all(_keeps(e, _part(head, k), _part(before, k), entry)
                   for k, e in enumerate(end[1]))
    if end[0] == "list" and head[0] == "list":
        return end[1] == head[1]  # its length (its elements are joined apart)
    return _substitute(end, entry) == before


def _as_list(sym):
    """A list's shape as ("list", length, element shape)."""
    if sym == VARY:
        return ("list", VARY, VARY)
    if sym[0] == "list":
        return sym
    return ("list", ("len", sym), ("element", sym))


def _join_envs(a, b):
    return {k: _join(a.get(k), b.get(k)) for k in set(a) | set(b)}


class _Shapes:
    """The symbolic reading of one core function (see the module docstring)."""

    def __init__(self, core, depth=0):
        self.core = core
        self.depth = depth
        self.in_loop = 0
        self.found = set()
        self.elementwise = _elementwise_rules()

    def kind(self, n):
        t = self.core.types.get(n)
        return t.kind if t is not None else "unknown"

    def rank(self, n):
        t = self.core.types.get(n)
        return t.ndim if t is not None else None

    # -- reading atoms
    def sym(self, atom, env):
        if atom is None:
            return ("none",)
        if isinstance(atom, gast.Name):
            got = env.get(atom.id, ("same", atom.id))
            if got == VARY and self.in_loop:
                self.found.add(atom.id)
            if self.kind(atom.id) == "float":
                return FLOAT
            return got
        if isinstance(atom, gast.Constant):
            return FLOAT if isinstance(atom.value, float) else ("const", atom.value)
        if isinstance(atom, (gast.Tuple, gast.List)):
            elts = tuple(self.sym(e, env) for e in atom.elts)
            return VARY if VARY in elts else ("tuple", elts)
        return self.value_of(atom, env, atom, "unknown")  # a nested expression

    def by_value(self, stmt):
        """A number computed from values in arrays: the same every time only outside loops."""
        return VARY if self.in_loop else ("value", id(stmt))

    def _is_array(self, atom):
        """Whether `atom` may be an array (anything but a number)."""
        return isinstance(atom, gast.Name) and self.kind(atom.id) not in ("float", "int", "bool")

    def operand(self, node, env, stmt):
        """(shape, may be an array) of one operand of an elementwise operation."""
        if isinstance(node, gast.Name):
            return self.sym(node, env), self._is_array(node)
        if isinstance(node, gast.Constant):
            return self.sym(node, env), False
        got = self.value_of(node, env, stmt, "unknown")  # (a nested expression)
        return got, got[0] not in ("float", "const", "arith", "value", "dim")

    def broadcast(self, operands, env, stmt, rname):
        """The shape of an elementwise result (or a product) of `operands`."""
        pairs = [self.operand(a, env, stmt) for a in operands]
        arrays = [s for s, is_array in pairs if is_array]
        if VARY in arrays:
            return VARY
        if not arrays:  # numbers: an integer's value may make a shape
            syms = tuple(s for s, _ in pairs)
            return VARY if VARY in syms else ("arith", rname, syms)
        leaves = []
        for s in arrays:  # (nested broadcasts flattened: a broadcast is of its leaves)
            for leaf in (s[1] if s[0] == "broadcast" else (s,)):
                if leaf not in leaves:
                    leaves.append(leaf)
        return leaves[0] if len(leaves) == 1 else ("broadcast", tuple(leaves))

    # -- statements
    def block(self, stmts, env):
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                self.sym(stmt.test, env)
                left, right = dict(env), dict(env)
                self.block(stmt.body, left)
                self.block(stmt.orelse, right)
                env.clear()
                env.update(_join_envs(left, right))
            elif isinstance(stmt, (gast.For, gast.While)):
                self.loop(stmt, env)
            else:
                self.simple(stmt, env)

    def loop(self, stmt, env):
        """Read a loop's body until the shapes at its head settle. Each name the loop assigns
        starts a step with ``("head", name)``, its shape at that point. If every name starts
        each step with one shape, a step ends with the same shapes each time: those of the
        first step. So a name keeps its shape when its shape at the end of a step, with the
        shapes on entry put for the head shapes, is its shape on entry (or a broadcast with
        its own head shape); otherwise it is VARY from then on."""
        from .reverse import _stmt_targets, walk_statements
        simple = [s for s in walk_statements(stmt.body) if not isinstance(s, _CONTROL)]
        assigned = {t for s in simple for t in _stmt_targets(s)}
        assigned |= {s.prim.base for s in simple if s.prim.kind == "pop"}
        header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
        before = dict(env)  # the shapes on entry (and, for names the loop makes, a step's)
        varying = set()
        for attempt in range(_MAX_PASSES + 1):
            if attempt == _MAX_PASSES:  # (not settled: give up on what the loop assigns)
                varying |= assigned
            heads = {t: self.head(t, before[t], stmt, t in varying)
                     for t in assigned if t in before}
            entry = {}
            for t, h in heads.items():
                if h != VARY and h[0] == "list":
                    entry[h[1]] = _as_list(before[t])[1]
                elif h != VARY:
                    entry[h] = before[t]
            env.clear()
            env.update(before)
            env.update(heads)
            self.in_loop += 1
            over = self.sym(header, env)
            if isinstance(stmt, gast.For):
                listed = over[0] == "list" or (isinstance(header, gast.Name) and
                                               self.kind(header.id) == "list")
                for n in gast.walk(stmt.target):
                    if isinstance(n, gast.Name):  # an index varies; an element keeps its shape
                        env[n.id] = VARY if self.kind(n.id) == "int" else \
                            self.element(over) if listed else ("element", over)
            self.block(stmt.body, env)
            self.in_loop -= 1
            changed = set()
            for t in assigned:
                end = env.get(t)
                if end is not None and self.kind(t) == "list" and t in before:
                    # a list: its length kept or not, and the shapes of all its elements
                    old = _as_list(before[t])
                    elements = _join(old[2], _substitute(_as_list(end)[2], entry))
                    if elements != old[2]:
                        before[t] = ("list", old[1], elements)
                        changed.add(t)
                    if t not in varying and _as_list(end)[1] != heads[t][1]:
                        varying.add(t)
                        changed.add(t)
                    continue
                if t in varying or end is None or end == heads.get(t):
                    continue
                if t not in before:  # first made in the loop: its shape after a step
                    before[t] = _substitute(end, entry)
                    changed.add(t)
                elif not _keeps(end, heads[t], before[t], entry):
                    varying.add(t)
                    changed.add(t)
            if not changed:
                break
        for t in assigned:  # after the loop: the shape it kept, or what it ended with
            # (a shape that changed from step to step is one shape after the loop, unless
            # that loop runs again in a step of another)
            after = VARY if self.in_loop else ("after", t, id(stmt))
            if t in varying and self.kind(t) == "list" and t in before:
                env[t] = ("list", after, _as_list(before[t])[2])
            elif t in varying:
                env[t] = after
            elif t in before:
                env[t] = before[t]

    def head(self, t, entry, loop, varying):
        """The shape `t` has at the start of a step (a list keeps what is known of its
        elements)."""
        if self.kind(t) == "list":
            return ("list", VARY if varying else ("head", t, id(loop)), _as_list(entry)[2])
        return VARY if varying else ("head", t, id(loop))

    def element(self, lst):
        """The shape of an element of a list: one of the shapes put in it; the elements of a
        list handed in are known only outside loops (a tape's elements may differ)."""
        element = _as_list(lst)[2]
        if element is None or (element[0] == "element" and self.in_loop):
            return VARY
        return element

    def simple(self, stmt, env):
        from .reverse import _stmt_targets
        prim = stmt.prim
        if prim.kind in ("setitem", "add_at", "append"):
            reads = [n for n in gast.walk(stmt) if isinstance(n, gast.Name) and
                     n.id != prim.base and isinstance(n.ctx, gast.Load)]
            for n in reads:
                self.sym(n, env)
            if self.kind(prim.base) == "list":
                value = stmt.value.args[0] if prim.kind == "append" else stmt.value
                old = _as_list(env.get(prim.base, ("same", prim.base)))
                length = old[1] if prim.kind != "append" else \
                    (VARY if old[1] == VARY else ("append", old[1]))
                env[prim.base] = ("list", length, _join(old[2], self.sym(value, env)))
            return
        if not isinstance(stmt, gast.Assign):
            for n in gast.walk(stmt):
                if isinstance(n, gast.Name):
                    self.sym(n, env)
            return
        targets = _stmt_targets(stmt)
        if prim.kind == "pop":
            old = _as_list(env.get(prim.base, ("same", prim.base)))
            got = self.element(old)
            env[prim.base] = ("list", VARY if old[1] == VARY else ("pop", old[1]), old[2])
        elif prim.kind == "list_new":
            got = ("list", ("const", 0), None)
        else:
            got = self.value(stmt.value, env, stmt, targets)
        if isinstance(stmt.targets[0], gast.Tuple):
            for k, t in enumerate(targets):
                env[t] = self.part(got, k)
        else:
            env[targets[0]] = got
        for t in targets:
            if env[t] == VARY and self.in_loop:
                self.found.add(t)

    def part(self, sym, k):
        return VARY if sym == VARY else _part(sym, k)

    def value(self, value, env, stmt, targets):
        kind = self.kind(targets[0]) if len(targets) == 1 else "tuple"
        return self.value_of(value, env, stmt, kind)

    def value_of(self, value, env, stmt, kind):
        if isinstance(value, (gast.Name, gast.Constant, gast.Tuple, gast.List)):
            return self.sym(value, env)
        if isinstance(value, gast.Attribute):
            return self.attribute(value, env)
        if isinstance(value, gast.Subscript):
            return self.subscript(value, env, stmt, kind)
        if isinstance(value, gast.Call):
            return self.call(value, env, stmt, kind)
        if isinstance(value, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.BoolOp)):
            operands = [value.left, value.right] if isinstance(value, gast.BinOp) else \
                [value.operand] if isinstance(value, gast.UnaryOp) else \
                [value.left] + list(value.comparators) if isinstance(value, gast.Compare) \
                else list(value.values)
            if kind == "float":
                for a in operands:
                    self.operand(a, env, stmt)
                return FLOAT
            if kind in ("array", "unknown"):
                return self.broadcast(operands, env, stmt,
                                      type(getattr(value, "op", value)).__name__)
            atoms = [n for n in gast.walk(value) if isinstance(n, (gast.Name, gast.Constant))]
            syms = tuple(self.sym(a, env) for a in atoms)
            if VARY in syms:
                return VARY
            if any(s == FLOAT or self._is_array(a) for a, s in zip(atoms, syms)):
                return self.by_value(stmt)  # a number compared or made from data
            return ("arith", unparse(value), syms)
        reads = tuple(self.sym(n, env) for n in gast.walk(value) if isinstance(n, gast.Name))
        return VARY if VARY in reads else ("expr", unparse(value), reads)  # (a dict display)

    def attribute(self, value, env):
        base = self.sym(value.value, env)
        if base == VARY:
            return VARY
        rank = self.rank(value.value.id) if isinstance(value.value, gast.Name) else None
        if value.attr == "shape":
            return ("shape", base, rank)
        if value.attr in ("real", "imag"):
            return base
        return (value.attr, base)

    def subscript(self, value, env, stmt, kind):
        base = self.sym(value.value, env) if isinstance(value.value, gast.Name) else \
            self.value_of(value.value, env, stmt, "unknown")
        base_kind = self.kind(value.value.id) if isinstance(value.value, gast.Name) else None
        index = value.slice
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        if base_kind == "list":
            for p in parts:
                self.sym(p, env)
            if base == VARY:
                return VARY
            return self.element(base)
        if base_kind == "tuple" or base[0] in ("shape", "tuple"):
            syms = [self.sym(p, env) for p in parts]
            if base == VARY or VARY in syms:
                return VARY
            k = parts[0].value if len(parts) == 1 and isinstance(parts[0], gast.Constant) \
                else None
            if base[0] == "shape" and isinstance(k, int):
                return ("dim", base[1], k, base[2])
            if base[0] == "tuple" and isinstance(k, int) and -len(base[1]) <= k < len(base[1]):
                return base[1][k]
            return ("part", base, tuple(syms))
        keys = []
        for p in parts:
            key = self.index_part(p, env, stmt)
            if key == VARY:
                return VARY
            keys.append(key)
        if kind in ("float", "int", "bool"):
            return FLOAT if kind == "float" else self.by_value(stmt)  # an element
        if base == VARY:
            return VARY
        if all(k == "all" for k in keys):
            return base  # x[:] or x[::-1]
        return ("index", base, tuple(keys))

    def index_part(self, p, env, stmt):
        if isinstance(p, gast.Slice):
            bounds = [self.sym(b, env) for b in (p.lower, p.upper)]
            step = self.sym(p.step, env)
            if p.lower is None and p.upper is None and step in (("none",), ("const", 1),
                                                                ("const", -1)):
                return "all"
            if VARY in bounds or step == VARY:
                width = self.width(p, env)
                return VARY if width is None or step == VARY else ("width", width, step)
            return ("slice", tuple(bounds), step)
        if isinstance(p, gast.Name) and self.kind(p.id) in ("array", "list", "unknown"):
            t = self.core.types.get(p.id)
            if t is not None and t.dtype in ("bool", "bool_"):  # a mask: counts its values
                self.sym(p, env)
                return self.by_value(stmt)
            return ("take", self.sym(p, env))
        if isinstance(p, gast.Constant) and p.value is None:
            return "newaxis"
        self.sym(p, env)
        return "one"  # an integer picks one row whatever its value

    def width(self, part, env):
        """The width of ``x[i:i + 3]`` or ``x[i:i + n]`` (both bounds one integer plus or
        minus numbers that are the same every step), else None."""
        return self.width_of(part.lower, part.upper, env)

    def width_of(self, lower, upper, env):
        if lower is None or upper is None:
            return None
        (a, da), (b, db) = self.linear(lower), self.linear(upper)
        if a is None or a != b:
            return None
        offsets = tuple((sign, self.sym(n, env)) for sign, n in da + db)
        if any(o == VARY for _, o in offsets):
            return None
        return (tuple(offsets[:len(da)]), tuple(offsets[len(da):]))

    def linear(self, bound):
        """A bound as (integer name, ((sign, offset atom), ...)), or (None, ())."""
        name, offsets = (bound.id, ()) if isinstance(bound, gast.Name) else (None, ())
        for _ in range(8):  # (``a + n - 2``: a chain of such temporaries)
            if name not in self.int_defs():
                break
            name, more = self.int_defs()[name]
            offsets = more + offsets
        return name, offsets

    def int_defs(self):
        """Integer temporaries written ``t = i + n`` (or ``i - n``) once in the function."""
        if not hasattr(self, "_defs"):
            from .reverse import walk_statements
            count, defs = {}, {}
            for s in walk_statements(self.core.body):
                if isinstance(s, gast.Assign) and isinstance(s.targets[0], gast.Name):
                    t = s.targets[0].id
                    count[t] = count.get(t, 0) + 1
                    v = s.value
                    if isinstance(v, gast.BinOp) and isinstance(v.op, (gast.Add, gast.Sub)) \
                            and isinstance(v.left, gast.Name) and \
                            isinstance(v.right, (gast.Name, gast.Constant)):
                        sign = 1 if isinstance(v.op, gast.Add) else -1
                        defs[t] = (v.left.id, ((sign, v.right),))
            self._defs = {t: d for t, d in defs.items() if count[t] == 1}
        return self._defs

    def call(self, value, env, stmt, kind):
        prim = getattr(stmt, "prim", None)  # (None: a call nested in an expression)
        rule = getattr(prim, "rule", None) if value is getattr(stmt, "value", None) else None
        rname = rule.name.split("@")[0] if rule is not None and hasattr(rule, "name") else \
            unparse(value.func).split(".")[-1]
        args = list(value.args) + [k.value for k in value.keywords]
        if isinstance(value.func, gast.Attribute) and not unparse(value.func).startswith("np."):
            args = [value.func.value] + args  # a method: its receiver is an operand
        callee = self.callees().get(unparse(value.func))
        if rule is None and callee is not None:
            return self.user_call(callee, value.args, env, stmt)
        if rname in _SHAPE_READS and args:
            base = self.sym(args[0], env)
            return VARY if base == VARY else (rname, base)
        if rname in _LIKE and args:
            syms = [self.sym(a, env) for a in args]
            return syms[0]
        if rname in _MAKERS and args:
            syms = [self.sym(a, env) for a in args]
            return VARY if VARY in syms else self.made(syms[0])
        if rname in self.elementwise and kind == "array":
            return self.broadcast(args, env, stmt, rname)
        syms = tuple(self.sym(a, env) for a in args)
        if rname == "slice_length" and len(args) == 3:  # (the scalarizer's x[k:k + 2])
            width = self.width_of(args[1], args[2], env)
            if width is not None and syms[0] != VARY:
                return ("slice_length", syms[0], width)
        if rname == "same_length" and VARY not in syms:  # (lengths checked equal)
            return ("equal", tuple(leaf for d in syms
                                   for leaf in (d[1] if d[0] == "equal" else (d,))))
        if _mentions(syms, VARY):  # (a list whose length or elements vary, say)
            return VARY
        if rname in _VALUE_SHAPED:
            return self.by_value(stmt)
        if kind == "float":
            return FLOAT
        if kind in ("int", "bool") and any(s == FLOAT or self._is_array(a)
                                           for a, s in zip(args, syms)):
            return self.by_value(stmt)
        return ("call", rname, syms)

    def callees(self):
        """The helpers the function calls, by the name it calls them by."""
        if not hasattr(self, "_callees"):
            from .reverse import walk_statements
            self._callees = {unparse(s.value.func): s.prim.callee
                             for s in walk_statements(self.core.body)
                             if getattr(getattr(s, "prim", None), "kind", None) == "user" and
                             getattr(s.prim, "callee", None) is not None and
                             isinstance(getattr(s, "value", None), gast.Call)}
        return self._callees

    def made(self, dims):
        """np.zeros(n) / np.empty((a, b)): the shape of the arrays whose axes it is given
        (a broadcast of them when an axis is checked equal to several, ``same_length``)."""
        if dims[0] == "shape":
            return dims[1]  # np.zeros(x.shape)
        axes = dims[1] if dims[0] == "tuple" else (dims,)
        shapes = None
        for k, axis in enumerate(axes):
            equal = axis[1] if axis[0] == "equal" else (axis,)
            those = {d[1] for d in equal if d[0] == "dim" and d[2] == k and d[3] == len(axes)}
            shapes = those if shapes is None else shapes & those
        if shapes:
            leaves = sorted(shapes, key=repr)
            return leaves[0] if len(leaves) == 1 else ("broadcast", tuple(leaves))
        return ("made", dims)

    def user_call(self, callee, args, env, stmt):
        """The shapes a helper returns, read through its body with the caller's shapes."""
        syms = [self.sym(a, env) for a in args]
        if self.depth >= _MAX_DEPTH or len(syms) != len(callee.params) or \
                callee.returns is None:
            return VARY if VARY in syms else ("call", callee.name, tuple(syms))
        reader = _Shapes(callee, self.depth + 1)
        reader.in_loop = self.in_loop  # (numbers read from data vary if the call is in a loop)
        inner = dict(zip(callee.params, syms))
        reader.block(callee.body, inner)
        return reader.sym(callee.returns, inner)
