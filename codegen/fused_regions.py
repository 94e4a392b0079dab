"""Consecutive whole-vector statements and the sums that read them, in one loop over elements.

A gradient written as whole-array NumPy makes one pass over memory per statement, and each
pass writes a new array. Linear regression's gradient is four such passes over a million
points:

    r = w * x + b - y
    r_bar = 2.0 * (r / x.shape[0])
    b_bar = reassociated_sum(r_bar)
    w_bar = sum_of_products(r_bar, x)

Under Numba the four statements took 0.80 ms against 0.66 ms for NumPy (whose sum and dot run
on SIMD lanes and BLAS threads). :func:`fuse_regions` replaces such a run by one call,
``b_bar, w_bar = fused(w, b, x, y, x_shape_0)``, and writes the helper ``fused`` into the
module: its plain form runs the statements as they were (``fused_statements``); its Numba form
(an overload) is one loop over elements, the sums as running totals, when every array among
its arguments is a float64 vector (0.20 ms for the run above):

    n = joined_length(joined_length(joined_length(joined_length(-1, w), b), x), y)
    if n < 0:  # vectors of different lengths: NumPy broadcasts or raises
        return fused_statements(w, b, x, y, x_shape_0)
    b_bar = 0.0
    w_bar = 0.0
    for i in range(n):
        r = element(w, i) * element(x, i) + element(b, i) - element(y, i)
        r_bar = 2.0 * (r / x_shape_0)
        b_bar += r_bar
        w_bar += r_bar * element(x, i)
    return (b_bar, w_bar)

(``element(v, i)`` is ``v[i]`` for a vector and ``v`` for a number.) The loop is compiled with
reassociation allowed, as ``reassociated_sum`` is: the sums run in SIMD lanes (no less accurate
than one running total), and an element's own arithmetic may be regrouped by the compiler
(a difference in the last bits, as between NumPy and any compiled loop).

Which statements: at the top level of a function (a statement in a loop runs on the small
vectors :mod:`autodiff_ast.vector_loops` already writes as loops), ``name = expression`` where
the expression is arithmetic (``+ - * / **``, unary minus), elementwise math calls of the
table below, names, number constants and ``v.shape[k]`` (passed in as a number); and sums
``name = np.sum(e)``, ``np.mean(e)`` (the sum divided by the length after the loop),
``reassociated_sum(e)``, ``sum_of_products(e1, e2)`` of such expressions, each reading at
least one name. A run ends at any other statement, at a name bound twice, at a name read
before the run binds it, and where an expression reads a sum the run made (that needs a
second pass), and a copy (``a = b``) is no part of one. A run is
rewritten when it has two or more statements, one of them a sum: a sum reads an array (a
run of numbers alone, ``mul = 0.25 * p``, would only add a helper to compile), and an
elementwise chain without one is one loop already (Numba fuses a statement's array
expression; NumPy's own passes are fast). A value read later is made whole
(``np.empty(n)``, filled in the loop) and returned. A sum the run's values feed inside the
statement that ends the run (``return np.sum(r * r) / n``, an assignment or a return whose
calls are all elementwise math or sums) is first bound to a name of its own (``total``), so
the run takes it.

When an argument is not a number or a float64 vector (a matrix, an integer array, a tuple),
or a sum or returned value would read no vector (all numbers: a sum of one number), the
Numba form is the statements themselves, so the result never differs from the unfused code
beyond rounding.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(w, x, y):
...     r = w * x - y
...     total = reassociated_sum(r * r)
...     return total
... ''').body[0]
>>> sources = {}
>>> fuse_regions(fn, {"w", "x", "y", "r", "total", "f"}, sources)
['fused']
>>> print(unparse(fn))
def f(w, x, y):
    total = fused(w, x, y)
    return total
>>> print(sources["fused"].split("def fused_loop")[1].split("return fused_loop")[0].strip())
(w, x, y):
        n = joined_length(joined_length(joined_length(-1, w), x), y)
        if n < 0:
            return fused_statements(w, x, y)
        total = 0.0
        for i in range(n):
            r = element(w, i) * element(x, i) - element(y, i)
            total += r * r
        return total
"""

from __future__ import annotations

import ast
import copy

import gast

from .emit import fresh_name, is_marker, name_node, to_ast
from .param_writes import dotted_name

__all__ = ["fuse_regions", "FUSED_HELPERS", "FUSED_UNCOMPILED"]

#: Elementwise calls a fused loop evaluates per element (each has a number form under Numba).
ELEMENTWISE_CALLS = frozenset({
    "np.exp", "np.log", "np.log1p", "np.expm1", "np.sqrt", "np.sin", "np.cos", "np.tan",
    "np.tanh", "np.sinh", "np.cosh", "np.arctan", "np.abs", "np.absolute", "np.square",
    "np.negative", "np.maximum", "np.minimum", "np.logaddexp", "np.exp2", "np.log2",
    "np.log10", "tanh_fast"})

#: Sums a fused loop keeps as running totals: the name of the call and its operand count.
SUMS = {"np.sum": 1, "reassociated_sum": 1, "sum_of_products": 2, "np.mean": 1}

_ARITHMETIC = (gast.Add, gast.Sub, gast.Mult, gast.Div, gast.Pow)


def _shape_read(node):
    """`v.shape[k]` with a name v and an integer constant k."""
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Attribute) and \
        node.value.attr == "shape" and isinstance(node.value.value, gast.Name) and \
        isinstance(node.slice, gast.Constant) and type(node.slice.value) is int


def _elementwise(node):
    """Whether `node` is an expression a fused loop computes one element at a time."""
    if isinstance(node, gast.Name) or _shape_read(node):
        return True
    if isinstance(node, gast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, gast.BinOp):
        return isinstance(node.op, _ARITHMETIC) and _elementwise(node.left) and \
            _elementwise(node.right)
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, (gast.USub, gast.UAdd)) and _elementwise(node.operand)
    if isinstance(node, gast.Call):
        return dotted_name(node.func) in ELEMENTWISE_CALLS and not node.keywords and \
            all(_elementwise(a) for a in node.args)
    return False


def _sum_operands(value):
    """The operands of a sum the loop can keep as a running total, or None."""
    if isinstance(value, gast.Call) and dotted_name(value.func) in SUMS and \
            not value.keywords and len(value.args) == SUMS[dotted_name(value.func)] and \
            all(_elementwise(a) for a in value.args):
        return list(value.args)
    return None


def _names_read(node):
    """Names an expression reads as values: not a called function's name, and not the v of a
    `v.shape[k]` read (a length, passed in as a number)."""
    found = []

    def visit(n):
        if _shape_read(n):
            return
        if isinstance(n, gast.Name):
            if isinstance(n.ctx, gast.Load) and n.id not in found:
                found.append(n.id)
            return
        if isinstance(n, gast.Call):
            for a in n.args:
                visit(a)
            return
        for child in gast.iter_child_nodes(n):
            visit(child)
    visit(node)
    return found


def _shape_reads(node):
    """The `v.shape[k]` reads of an expression."""
    return [n for n in gast.walk(node) if _shape_read(n)]


#: Names a fused helper's code relies on: a run binding or reading one is left alone.
_RESERVED = frozenset({"np", "numba", "element", "joined_length", "one_loop_types"})


class _Run:
    """A run of statements being collected: what each binds and reads."""

    def __init__(self):
        self.stmts = []  # (target, kind, operands, value): kind "value" or "sum"
        self.markers = []
        self.bound = set()
        self.sums = set()
        self.read_before_bound = set()

    def accepts(self, stmt):
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
                isinstance(stmt.targets[0], gast.Name)):
            return None
        target = stmt.targets[0].id
        operands = _sum_operands(stmt.value)
        kind = "sum" if operands is not None else "value"
        if operands is None:
            if not _elementwise(stmt.value) or isinstance(stmt.value, (gast.Constant, gast.Name)):
                return None
            operands = [stmt.value]
        reads = {n for op in operands for n in _names_read(op)}
        if not reads:  # a number made of constants and lengths: nothing per element
            return None
        if target in self.bound | self.read_before_bound | reads or reads & self.sums or \
                (reads | {target}) & _RESERVED or target.startswith("fused"):
            return None
        return target, kind, operands, stmt.value, reads

    def add(self, accepted):
        target, kind, operands, value, reads = accepted
        self.read_before_bound |= reads - self.bound
        self.bound.add(target)
        if kind == "sum":
            self.sums.add(target)
        self.stmts.append((target, kind, operands, value))


def fuse_regions(fn, taken, sources):
    """Replace each run of fusable top-level statements of `fn` by a call of a helper written
    into `sources` (name -> source); `taken` holds the module's names. Returns the names of
    the helpers written (each with its ``_statements`` and ``_numba`` functions)."""
    body, written, i = [], [], 0
    stmts = fn.body
    while i < len(stmts):
        run, j = _Run(), i
        while j < len(stmts):
            if is_marker(stmts[j]):
                run.markers.append(stmts[j])
                j += 1
                continue
            accepted = run.accepts(stmts[j])
            if accepted is None and run.stmts and _hoist_sums(stmts, j, run, taken):
                continue  # the sums of the run's values that stmts[j] took are now before it
            if accepted is None:
                break
            run.add(accepted)
            j += 1
        while j > i and is_marker(stmts[j - 1]):  # trailing comments stay where they are
            j -= 1
            run.markers.pop()
        outputs = []
        if len(run.stmts) >= 2 and run.sums:  # (what later statements read: only then)
            later = {n.id for s in stmts[j:] for n in gast.walk(s)
                     if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load)}
            outputs = [t for t, _, _, _ in run.stmts if t in later]
        if outputs:
            body += run.markers
            body.append(_replace(run, outputs, taken, sources))
            written.append(body[-1].value.func.id)
            i = j
        else:
            body.append(stmts[i])
            i += 1
    fn.body = body
    return written


class _SumsOfRun(gast.NodeTransformer):
    """Replaces each sum of the run's values in an expression by a new name (collected in
    `hoisted`); a branch of an ``if`` expression or ``and``/``or`` may not run: left alone."""

    def __init__(self, run, taken):
        self.run, self.taken, self.hoisted = run, taken, []

    def visit_Call(self, node):
        operands = _sum_operands(node)
        reads = {n for op in operands or () for n in _names_read(op)}
        if operands is not None and reads & self.run.bound and not reads & self.run.sums:
            name = fresh_name("total", self.taken)
            self.hoisted.append(gast.Assign(targets=[name_node(name, gast.Store())],
                                            value=node, type_comment=None))
            return name_node(name)
        return self.generic_visit(node)

    def visit_IfExp(self, node):
        return node

    def visit_BoolOp(self, node):
        return node

    def visit_Lambda(self, node):
        return node


def _hoist_sums(stmts, j, run, taken):
    """When stmts[j] (an assignment or a return whose calls are all elementwise math or sums)
    sums values the run made (``return np.sum(r * r) / n``), bind each such sum to a new
    name in statements inserted before it (``total = np.sum(r * r)``): the run then takes
    them. Returns whether any was."""
    stmt = stmts[j]
    if not isinstance(stmt, (gast.Assign, gast.Return)) or stmt.value is None:
        return False
    calls = [dotted_name(c.func) for c in gast.walk(stmt.value) if isinstance(c, gast.Call)]
    if not calls or any(c not in ELEMENTWISE_CALLS and c not in SUMS for c in calls):
        return False
    hoister = _SumsOfRun(run, taken)
    value = hoister.visit(stmt.value)
    if not hoister.hoisted:
        return False
    stmt.value = value
    stmts[j:j] = hoister.hoisted
    return True


def _replace(run, outputs, taken, sources):
    """The call that stands for `run`, its helper's source added to `sources`."""
    vectors, lengths = [], {}  # lengths: text of a `v.shape[k]` read -> (parameter, node)
    local = set(run.bound) | _RESERVED
    for _, _, operands, _ in run.stmts:
        for op in operands:
            for n in _names_read(op):
                if n not in run.bound and n not in vectors:
                    vectors.append(n)
    local |= set(vectors)
    for _, _, operands, _ in run.stmts:
        for op in operands:
            for node in _shape_reads(op):
                key = _text(node)
                if key not in lengths:
                    base = f"{node.value.value.id}_shape_{node.slice.value}"
                    lengths[key] = (fresh_name(base, local), node)
    name = fresh_name("fused", taken)
    taken.add(f"{name}_statements")
    params = vectors + [p for p, _ in lengths.values()]
    arguments = [name_node(v) for v in vectors] + [copy.deepcopy(n) for _, n in lengths.values()]
    sources[name] = _helper_source(name, run, outputs, vectors, params, lengths, local)
    call = gast.Call(func=name_node(name), args=arguments, keywords=[])
    if len(outputs) == 1:
        target = name_node(outputs[0], gast.Store())
    else:
        target = gast.Tuple(elts=[name_node(o, gast.Store()) for o in outputs], ctx=gast.Store())
    return gast.Assign(targets=[target], value=call, type_comment=None)


class _Lengths(gast.NodeTransformer):
    """Each `v.shape[k]` read becomes its parameter."""

    def __init__(self, lengths):
        self.lengths = lengths

    def visit_Subscript(self, node):
        if _shape_read(node):
            return name_node(self.lengths[_text(node)][0])
        return self.generic_visit(node)


class _Elements(gast.NodeTransformer):
    """A vector parameter v read in an expression becomes ``element(v, i)``."""

    def __init__(self, vectors, index):
        self.vectors = vectors
        self.index = index

    def visit_Call(self, node):
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_Name(self, node):
        if node.id in self.vectors and isinstance(node.ctx, gast.Load):
            return gast.Call(func=name_node("element"), args=[node, name_node(self.index)],
                             keywords=[])
        return node


def _text(node):
    return ast.unparse(to_ast(node))


def _depends(run, vectors):
    """For each name the run binds, the positions of the vector parameters its value reads."""
    deps = {}
    for target, _, operands, _ in run.stmts:
        found = set()
        for op in operands:
            for n in _names_read(op):
                found |= deps[n] if n in deps else {vectors.index(n)}
        deps[target] = found
    return deps


def _helper_source(name, run, outputs, vectors, params, lengths, local):
    signature = ", ".join(params)
    as_lengths = _Lengths(lengths)
    plain = [f"{t} = {_text(as_lengths.visit(copy.deepcopy(v)))}" for t, _, _, v in run.stmts]
    returned = outputs[0] if len(outputs) == 1 else "(" + ", ".join(outputs) + ")"
    deps = _depends(run, vectors)
    groups = tuple(tuple(sorted(deps[t])) for t in outputs)
    count, index = fresh_name("n", local), fresh_name("i", local)
    stored = {t: fresh_name(f"{t}_values", local) for t, kind, _, _ in run.stmts
              if kind == "value" and t in outputs}
    to_elements = _Elements(set(vectors), index)
    loop = []
    for target, kind, operands, _ in run.stmts:
        operands = [to_elements.visit(as_lengths.visit(copy.deepcopy(op))) for op in operands]
        if kind == "sum":
            value = operands[0] if len(operands) == 1 else \
                gast.BinOp(left=operands[0], op=gast.Mult(), right=operands[1])
            loop.append(_text(gast.AugAssign(target=name_node(target, gast.Store()),
                                             op=gast.Add(), value=value)))
        else:
            loop.append(f"{target} = {_text(operands[0])}")
            if target in stored:
                loop.append(f"{stored[target]}[{index}] = {target}")
    length = "-1"
    for v in vectors:
        length = f"joined_length({length}, {v})"
    made = [f"{stored[t]} = np.empty({count})" for t in outputs if t in stored]
    made += [f"{t} = 0.0" for t, kind, _, _ in run.stmts if kind == "sum"]
    after = [f"{t} = {t} / {count}" for t, kind, _, v in run.stmts  # (a mean's division)
             if kind == "sum" and dotted_name(v.func) == "np.mean"]
    loop_returned = [stored.get(t, t) for t in outputs]
    loop_returned = loop_returned[0] if len(loop_returned) == 1 else \
        "(" + ", ".join(loop_returned) + ")"
    statement_text = "\n    ".join(plain)
    loop_text = "\n            ".join(loop)
    made_text = "\n        ".join(made)
    after_text = "".join("\n        " + line for line in after)
    return f'''\
def {name}({signature}):
    """The statements of {name}_statements: under Numba in one loop over elements when every
    array argument is a float64 vector (see {name}_numba)."""
    return {name}_statements({signature})


def {name}_statements({signature}):
    """What {name} computes, statement by statement."""
    {statement_text}
    return {returned}


@numba.extending.overload({name}, jit_options={{'error_model': 'numpy', 'fastmath': {{'reassoc'}}}})
def {name}_numba({signature}):
    """How Numba compiles {name}: one loop over elements, sums as running totals, when each
    argument is a number or a float64 vector and each result reads a vector; otherwise the
    statements as written."""
    if not one_loop_types(({signature},), {groups!r}, {len(vectors)}):
        return lambda {signature}: {name}_statements({signature})

    def {name}_loop({signature}):
        {count} = {length}
        if {count} < 0:
            return {name}_statements({signature})
        {made_text}
        for {index} in range({count}):
            {loop_text}{after_text}
        return {loop_returned}
    return {name}_loop
'''


#: Helpers every fused loop calls: ``one_loop_types`` runs when Numba types a call (plain
#: Python), ``element`` and ``joined_length`` are overloads written into the loop.
FUSED_HELPERS = {}
FUSED_HELPERS["one_loop_types"] = '''\
def one_loop_types(types, groups, vector_count):
    """Whether a fused loop can take arguments of these Numba types: each of the first
    `vector_count` a number or a float64 vector (the rest are lengths), and every group of
    argument positions (the vectors a result reads) holding at least one vector."""
    vectors = []
    for position, kind in enumerate(types):
        if isinstance(kind, numba.types.Array):
            if position >= vector_count or kind.ndim != 1 or kind.dtype != numba.types.float64:
                return False
            vectors.append(True)
        elif isinstance(kind, (numba.types.Float, numba.types.Integer)) and \\
                not isinstance(kind, numba.types.Boolean):
            vectors.append(False)
        else:
            return False
    return all(any(vectors[p] for p in group) for group in groups)
'''

FUSED_HELPERS["element"] = '''\
def element(v, i):
    """`v[i]` of a vector, `v` itself of a number."""
    return v[i] if isinstance(v, np.ndarray) else v


@numba.extending.overload(element, inline='always', jit_options={'error_model': 'numpy'})
def element_numba(v, i):
    """How Numba compiles element: written into the loop, an index or nothing."""
    if isinstance(v, numba.types.Array):
        return lambda v, i: v[i]
    return lambda v, i: v
'''

FUSED_HELPERS["joined_length"] = '''\
def joined_length(n, v):
    """The length a fused loop runs over, joined with `v`'s: `n` when v is a number, v's
    length when n is -1 (none yet) or equal to it, and -2 when the lengths differ."""
    if not isinstance(v, np.ndarray):
        return n
    return len(v) if n in (-1, len(v)) else -2


@numba.extending.overload(joined_length, inline='always', jit_options={'error_model': 'numpy'})
def joined_length_numba(n, v):
    """How Numba compiles joined_length: written into the caller."""
    if isinstance(v, numba.types.Array):
        def vector_length(n, v):
            if n == -1 or n == v.shape[0]:
                return v.shape[0]
            return -2
        return vector_length
    return lambda n, v: n
'''

#: The functions of FUSED_HELPERS Numba never compiles as they stand (plain Python run while
#: typing, and overloads with their stubs).
FUSED_UNCOMPILED = frozenset({"one_loop_types", "element", "element_numba", "joined_length",
                              "joined_length_numba"})
