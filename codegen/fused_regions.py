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
    if several and n < 0:  # vectors of different lengths: NumPy broadcasts or raises
        return fused_statements(w, b, x, y, x_shape_0)
    b_bar = 0.0
    w_bar = 0.0
    for i in range(n):
        r = element(w, i) * element(x, i) + element(b, i) - element(y, i)
        r_bar = 2.0 * (r / x_shape_0)
        b_bar += r_bar
        w_bar += r_bar * element(x, i)
    return (b_bar, w_bar)

(``element(v, i)`` is ``v[i]`` for a vector and ``v`` for a number; ``several``, a constant
of the argument types, says whether two or more arguments are vectors: with one, the lengths
cannot differ, Numba drops the branch and never compiles the statements beside the loop:
ADBench GMM's cold start compiled its two loops' statements in 0.34 and 0.10 s.) The loop
is compiled with reassociation allowed, as ``reassociated_sum`` is: the sums run in SIMD
lanes (no less accurate than one running total), and an element's own arithmetic may be
regrouped by the compiler (a difference in the last bits, as between NumPy and any compiled
loop).

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

Slices of a name without a step (`x[1:]`, `x[:-1]`, `x[a:b]`: shifted views, as a stencil or
the Rosenbrock function reads) are vectors too: the call passes the view in. A slice can be
written in place (`g[:-1] = g[:-1] + e`, `g[:-1] += e`, the dialect's `add_into(g[:-1], e)`)
when the run reads and writes that array only through that one slice: each step of the loop
then touches one element of it, as the statements did. `g[1:]` after `g[:-1]` starts a second
run. Such a loop reads each element into a local once and stores each written slice's
element once, at the end of the step; before the loop, `overlapping` checks that no written
vector shares memory with another argument (two names for one array, or overlapping views
take the statements). Rosenbrock's Hessian-vector product under jit: 645 -> 147 us at
n = 100,000 (JAX 130 us); its gradient 131 -> 48 us. One sum alone is a run when its
operand computes something (`return np.sum((1.0 - x[:-1]) ** 2)`: Numba would write the
operand into a temporary array first; Rosenbrock's jit primal 57 -> 9 us).

In a function that may hold matrices (:func:`handles_matrices`: it slices along two axes, as
vmap's batched code does with `x_dot[:, 1:]`, or makes arrays of two axes) the helper is a
loop nest instead (:func:`_nest_source`): over the rows of its float64 matrix arguments (one
row when there are none) and the elements of a row, `element_at(v, r, i)` reading `v[r, i]`
of a matrix and `v[i]` of a vector. Slices `v[:, a:b]` are views passed in, as `x[1:]` is.
What a statement keeps (a value read later, a sum, a slice's new elements) it keeps on every
row when it reads a matrix (`every_row`, a constant of the argument types), else from the
first row only: a vector's sum is not counted once per row, and a vector written in place is
written once. From the second row on, a written vector holds its new elements, so a run with
a statement reading both a matrix and a vector it writes takes the statements
(`nest_types`). jit(hessian) of Rosenbrock at n = 100: 106 -> 51 us for the module (the
statements as written made a temporary matrix per operation); the cold compile about
doubles, each nest being compiled beside its statements.

When an argument is not a number or a float64 vector (a matrix outside a nest, an integer
array, a tuple), or a sum or returned value would read no vector (all numbers: a sum of one
number), the Numba form is the statements themselves, so the result never differs from the
unfused code beyond rounding.

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
        if several and n < 0:
            return fused_statements(w, x, y)
        total = 0.0
        for i in range(n):
            r = element(w, i) * element(x, i) - element(y, i)
            total += r * r
        return total
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, is_marker, name_node, text_of
from .param_writes import dotted_name

__all__ = ["fuse_regions", "handles_matrices", "FUSED_HELPERS", "FUSED_UNCOMPILED",
           "NEST_HELPERS", "NEST_UNCOMPILED"]

#: Elementwise calls a fused loop evaluates per element (each has a number form under Numba).
ELEMENTWISE_CALLS = frozenset({
    "np.exp", "np.log", "np.log1p", "np.expm1", "np.sqrt", "np.sin", "np.cos", "np.tan",
    "np.tanh", "np.sinh", "np.cosh", "np.arctan", "np.abs", "np.absolute", "np.square",
    "np.negative", "np.maximum", "np.minimum", "np.logaddexp", "np.exp2", "np.log2",
    "np.log10", "tanh_fast", "exp_fast"})

#: Sums a fused loop keeps as running totals: the name of the call and its operand count.
SUMS = {"np.sum": 1, "reassociated_sum": 1, "sum_of_products": 2, "np.mean": 1}

_ARITHMETIC = (gast.Add, gast.Sub, gast.Mult, gast.Div, gast.Pow)


def _shape_read(node):
    """`v.shape[k]` with a name v and an integer constant k."""
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Attribute) and \
        node.value.attr == "shape" and isinstance(node.value.value, gast.Name) and \
        isinstance(node.slice, gast.Constant) and type(node.slice.value) is int


def _slice_bound(node):
    """A bound a fused call can evaluate before its loop: none, an integer constant (or its
    negation) or a name."""
    if node is None or isinstance(node, gast.Name):
        return True
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        node = node.operand
    return isinstance(node, gast.Constant) and type(node.value) is int


def _columns(node):
    """The slice of `v[start:stop]`, or of `v[:, start:stop]` (every row, some columns: a
    batched function's shifted view), when its bounds are ones a call can evaluate; else
    None."""
    if not (isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name)):
        return None
    part = node.slice
    if isinstance(part, gast.Tuple) and len(part.elts) == 2 and \
            isinstance(part.elts[0], gast.Slice) and \
            part.elts[0].lower is part.elts[0].upper is part.elts[0].step is None:
        part = part.elts[1]
    if isinstance(part, gast.Slice) and part.step is None and _slice_bound(part.lower) and \
            _slice_bound(part.upper):
        return part
    return None


def _vector_slice(node):
    """`v[start:stop]` or `v[:, start:stop]` of a name v, without a step: a view the call
    passes in (`x[1:]`, `x_dot[:, :-1]`)."""
    return _columns(node) is not None


def _slice_names(node):
    """The names a vector slice is made of: its array and the names among its bounds."""
    part = _columns(node)
    bounds = [b for b in (part.lower, part.upper) if isinstance(b, gast.Name)]
    return [node.value.id] + [b.id for b in bounds]


def _elementwise(node):
    """Whether `node` is an expression a fused loop computes one element at a time."""
    if isinstance(node, gast.Name) or _shape_read(node) or _vector_slice(node):
        return True
    if isinstance(node, gast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, gast.BinOp):
        return isinstance(node.op, _ARITHMETIC) and _elementwise(node.left) and \
            _elementwise(node.right)
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, (gast.USub, gast.UAdd)) and _elementwise(node.operand)
    if isinstance(node, gast.Call):
        if _size_call(node):
            return _elementwise(node.args[0])
        return dotted_name(node.func) in ELEMENTWISE_CALLS and not node.keywords and \
            all(_elementwise(a) for a in node.args)
    return False


#: The function name standing for `(e).size` inside a run (`np.mean`'s gradient divides by
#: its operand's size): a name no program can call. The helper's loop reads it as the number
#: of elements when e reads a vector, and 1 when e is a number (_SizesAsCount).
_SIZE = "size of"


def _size_call(node):
    """Whether `node` is a run's `(e).size`, rewritten as a call of _SIZE."""
    return isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
        node.func.id == _SIZE


def _without_sizes(node):
    """`node` with each size call replaced by 1: what its value (not its length) reads."""
    node = copy.deepcopy(node)

    class Drop(gast.NodeTransformer):
        def visit_Call(self, call):
            if _size_call(call):
                return gast.Constant(value=1, kind=None)
            return self.generic_visit(call)
    return Drop().visit(node)


def _sum_operands(value):
    """The operands of a sum the loop can keep as a running total, or None."""
    if isinstance(value, gast.Call) and dotted_name(value.func) in SUMS and \
            not value.keywords and len(value.args) == SUMS[dotted_name(value.func)] and \
            all(_elementwise(a) for a in value.args):
        return list(value.args)
    return None


def _reads(node):
    """The names and vector slices an expression reads, in order: not a `v.shape[k]` read (a
    length, passed in as a number) and not a called function's name."""
    found = []

    def visit(n):
        if _shape_read(n):
            return
        if _vector_slice(n) or isinstance(n, gast.Name):
            if not isinstance(n, gast.Name) or isinstance(n.ctx, gast.Load):
                found.append(n)
            return
        if isinstance(n, gast.Call):
            for a in n.args:
                visit(a)
            return
        for child in gast.iter_child_nodes(n):
            visit(child)
    visit(node)
    return found


def _names_read(node):
    """What an expression reads as values, in order and once each: names, and the text of
    each vector slice (`x[1:]`, passed in as a view)."""
    found = []
    for n in _reads(node):
        key = n.id if isinstance(n, gast.Name) else text_of(n)
        if key not in found:
            found.append(key)
    return found


def _arrays_touched(node):
    """(array name, how) for each name and vector slice an expression reads: how is the
    slice's text, or the name itself when the expression reads the whole value (a name in a
    slice's bounds is read whole)."""
    touched = []
    for n in _reads(node):
        if isinstance(n, gast.Name):
            touched.append((n.id, n.id))
        else:
            touched.append((n.value.id, text_of(n)))
            touched.extend((b, b) for b in _slice_names(n)[1:])
    return touched


def _shape_reads(node):
    """The `v.shape[k]` reads of an expression."""
    return [n for n in gast.walk(node) if _shape_read(n)]


#: Names a fused helper's code relies on: a run binding or reading one is left alone.
_RESERVED = frozenset({"np", "numba", "element", "joined_length", "one_loop_types",
                       "several_vectors"})


class _Run:
    """A run of statements being collected: what each binds, writes and reads."""

    def __init__(self, taken=None):
        # (target, kind, operands, value): kind "value", "sum", "write" or "rowsum"
        self.stmts = []
        self.markers = []
        self.bound = set()
        self.sums = set()
        self.read_before_bound = set()
        self.writes = []  # the slices written in place (`x_bar[:-1] = ...`), by their text
        self.written_arrays = set()  # the arrays those slices are of
        self.touched = {}  # array name -> how the run reads or writes it (its slices' texts)
        self.targets = {}  # text of a slice written -> its node
        self.hoisted = set()  # ids of the sums _hoist_sums bound to names of their own
        # Row products and row sums (codegen/row_products.py), when `taken` (the module's
        # names, for the products' placeholders) is given: placeholder -> (matrix, vector),
        # a row sum's target -> its matrix, and the matrices the run multiplies.
        self.taken = taken
        self.products = {}
        self.rowsums = {}
        self.matrices = set()
        self.deferred = set()  # names bound by statements moved after the run
        self.addends = {}  # a row sum's target -> the name it is added to (`g = a + ...`)

    def accepts(self, stmt):
        """(target, kind, operands, value, reads) when `stmt` can join the run, else None.

        A slice written in place (`x_bar[:-1] = x_bar[:-1] - g`, or `+=`) joins when every
        way the run reads or writes that array is that same slice: the loop then touches
        one element of it per step, as the statements did (`x_bar[1:]` beside `x_bar[:-1]`
        would read an element another step wrote: the run ends there). Arrays that are
        different names but share memory are checked when the loop runs."""
        if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
                dotted_name(stmt.value.func) == "add_into" and len(stmt.value.args) == 2 and \
                not stmt.value.keywords:  # the dialect's `view += v` (codegen/helpers.py)
            stmt = gast.AugAssign(target=stmt.value.args[0], op=gast.Add(),
                                  value=stmt.value.args[1])
        if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, _ARITHMETIC):
            target_node = stmt.target
            value = gast.BinOp(left=_as_load(stmt.target), op=stmt.op, right=stmt.value)
        elif isinstance(stmt, gast.Assign) and len(stmt.targets) == 1:
            target_node, value = stmt.targets[0], stmt.value
        else:
            return None
        if isinstance(target_node, gast.Name):
            target, written = target_node.id, None
            if isinstance(stmt, gast.AugAssign):
                return None
            found = self._row_sum(target, value) if self.taken is not None else None
            if found is not None:
                return found
        elif _vector_slice(target_node):
            target, written = text_of(target_node), target_node
            if self.products or self.rowsums:
                return None  # (a run with row products writes no slices)
        else:
            return None
        original, products = value, {}
        if self.taken is not None and not self.writes and written is None:
            value, products = self._with_placeholders(value)
        operands = None if written is not None else _sum_operands(value)
        kind = "sum" if operands is not None else "value" if written is None else "write"
        if operands is None:
            if not _elementwise(value) or written is None and (
                    isinstance(value, gast.Constant) or _vector_slice(value) or
                    isinstance(value, gast.Name) and value.id not in products):
                return None  # a copy, or a view (`a = x[1:]`) another statement may write
            operands = [value]
        reads = {n for op in operands for n in _names_read(op)}
        if not reads:  # a number made of constants and lengths: nothing per element
            return None
        reads |= {name for pair in products.values() for name in pair}
        touched = [t for op in operands for t in _arrays_touched(op)]
        slices = [n for op in operands for n in gast.walk(op) if _vector_slice(n)]
        if written is not None:
            touched.append((written.value.id, target))
            slices.append(written)
        parts = {name for n in slices for name in _slice_names(n)}
        if parts & (self.bound | _RESERVED) or {name for name, _ in touched} & _RESERVED:
            return None  # a slice of (or with a bound made of) a value the run makes
        arrays = self.written_arrays | ({written.value.id} if written is not None else set())
        for name in arrays:
            ways = self.touched.get(name, set()) | {how for n, how in touched if n == name}
            if len(ways) > 1:
                return None
        if written is None and target in self.bound | self.read_before_bound | reads:
            return None
        if reads & (self.sums | self.deferred) or target.startswith("fused") or \
                target in _RESERVED:
            return None
        multiplied = self.matrices | {name for pair in self.products.values() for name in pair}
        multiplied |= {name for pair in products.values() for name in pair}
        if {name for name, _ in touched} & multiplied:
            return None  # (a product's matrix or vector read as a vector of the run's length)
        return target, kind, operands, original, reads | parts, touched, written, products

    def _with_placeholders(self, value):
        """`value` with each row product of names from outside the run (`np.dot(X, w)`)
        replaced by a new name standing for its element (codegen/row_products.py), and
        {placeholder: (matrix, vector)}; each `(e).size` of an elementwise e becomes a size
        call (_SIZE)."""
        from .row_products import row_product
        products = {}

        def visit(node):
            if isinstance(node, gast.Attribute) and node.attr == "size" and \
                    isinstance(node.ctx, gast.Load) and _elementwise(node.value):
                return gast.Call(func=name_node(_SIZE), args=[visit(node.value)], keywords=[])
            pair = row_product(node)
            if pair is not None and not set(pair) & (self.bound | _RESERVED | set(self.touched)) \
                    and pair[0] not in self.written_arrays:
                name = fresh_name("row_product", self.taken)
                self.taken.add(name)
                products[name] = pair
                return name_node(name)
            for field, old in gast.iter_fields(node):
                if isinstance(old, gast.AST):
                    setattr(node, field, visit(old))
                elif isinstance(old, list):
                    setattr(node, field, [visit(v) if isinstance(v, gast.AST) else v
                                          for v in old])
            return node
        if not any(row_product(n) or isinstance(n, gast.Attribute) and n.attr == "size"
                   for n in gast.walk(value)):
            return value, products
        return visit(copy.deepcopy(value)), products

    def _row_sum(self, target, value):
        """The accepted form of `target = np.dot(X.T, e)` (or `X.T @ e`, `np.dot(e, X)`,
        `e @ X`) where e is elementwise and reads a value the run made: a row sum, each step
        adding e's element times row i of X into target (codegen/row_products.py)."""
        from .row_products import row_sum
        found = row_sum(value)
        if found is None or self.writes:
            return None
        matrix, operand, addend = found
        if matrix in self.touched or addend is not None and (
                addend in self.bound | self.read_before_bound | set(self.touched) |
                _RESERVED | {matrix}):
            return None  # (X read as a vector too; an addend the run makes or reads)
        reads = set(_names_read(operand)) if _elementwise(operand) else set()
        if not reads & self.bound or matrix in self.bound | _RESERVED or addend in reads or \
                target in self.bound | self.read_before_bound | reads | {matrix} or \
                reads & (self.sums | self.deferred) or target in _RESERVED or \
                target.startswith("fused"):
            return None
        touched = _arrays_touched(operand)
        if matrix in {name for name, _ in touched}:
            return None
        extra = (matrix, addend)
        return target, "rowsum", [operand], value, reads | {matrix} | {addend} - {None}, \
            touched, None, extra

    def add(self, accepted):
        target, kind, operands, value, reads, touched, written, extra = accepted
        if kind == "rowsum":
            matrix, addend = extra
            self.rowsums[target] = matrix
            self.matrices.add(matrix)
            self.sums.add(target)
            if addend is not None:
                self.addends[target] = addend
        else:
            self.products.update(extra)
            self.matrices |= {matrix for matrix, _ in extra.values()}
        self.read_before_bound |= reads - self.bound
        for name, how in touched:
            self.touched.setdefault(name, set()).add(how)
        if kind == "write":
            if target not in self.writes:
                self.writes.append(target)
                self.targets[target] = written
            self.written_arrays.add(written.value.id)
        else:
            self.bound.add(target)
        if kind == "sum":
            self.sums.add(target)
        self.stmts.append((target, kind, operands, value))


def fuse_regions(fn, taken, sources, threads=False):
    """Replace each run of fusable top-level statements of `fn` by a call of a helper written
    into `sources` (name -> source); `taken` holds the module's names. Returns the names of
    the helpers written (each with its ``_statements`` and ``_numba`` functions). `threads`:
    a run with row products splits large matrices' rows between Numba's threads
    (:mod:`codegen.row_products`)."""
    body, written, i = [], [], 0
    stmts = fn.body
    matrices = handles_matrices(fn)
    while i < len(stmts):
        run, j = _Run(None if matrices else taken), i
        order, moved, deferred = list(stmts), 0, []
        while j < len(stmts):
            if is_marker(stmts[j]):
                run.markers.append(stmts[j])
                j += 1
                continue
            accepted = run.accepts(stmts[j])
            if accepted is None and _hoist_sums(stmts, j, run, taken):
                order = list(stmts)
                continue  # the sums of the run's values that stmts[j] took are now before it
            if accepted is None and (run.products or run.rowsums) and \
                    _apart_from_run(stmts[j], run):
                stmts.insert(i + moved, stmts.pop(j))  # (`scale = 1.0 / X.shape[0]`)
                moved += 1
                j += 1
                continue
            if accepted is None and (run.products or run.rowsums) and \
                    _number_of_sums(stmts[j], run):
                deferred.append(stmts.pop(j))  # (`mean = total / n`: after the run)
                run.deferred.add(deferred[-1].targets[0].id)
                run.read_before_bound |= set(_names_read(deferred[-1].value)) - run.bound
                continue
            if accepted is None:
                break
            run.add(accepted)
            j += 1
        while j > i and is_marker(stmts[j - 1]):  # trailing comments stay where they are
            j -= 1
            run.markers.pop()
        outputs = []
        if len(run.stmts) >= 2 and (run.sums or run.writes) or \
                not matrices and _one_sum_of_arithmetic(run):
            later = {n.id for s in deferred + stmts[j:] for n in gast.walk(s)
                     if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load)}
            outputs = [t for t, kind, _, _ in run.stmts if kind != "write" and t in later]
        if outputs or len(run.stmts) >= 2 and run.writes:
            body += stmts[i:i + moved] + run.markers
            body.append(_replace(run, outputs, taken, sources, matrices, threads))
            written.append(body[-1].value.func.id)
            body += deferred
            i = j
        else:
            stmts[:] = order  # (numbers moved before a run that is not one go back)
            body.append(stmts[i])
            i += 1
    fn.body = body
    return written


def _assigned_name(stmt):
    """The name `stmt` binds when it is `name = value`, else None."""
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name):
        return stmt.targets[0].id
    return None


def _apart_from_run(stmt, run):
    """Whether `stmt` binds a name the run has not used to arithmetic (or a sum of it) on
    values the run does not make (`sum__bar = 1.0 / X.shape[0]`, a penalty's gradient `w_bar
    = 2.0 * lam * w`): it may then run before the run, which a run with row products takes
    it out of the way for (its own statements write nothing in place)."""
    target = _assigned_name(stmt)
    if target is None:  # (an `if`, a loop, a write: none moves)
        return False
    value = stmt.value
    length = isinstance(value, gast.Call) and dotted_name(value.func) == "len" and \
        len(value.args) == 1 and isinstance(value.args[0], gast.Name) and not value.keywords
    if not (length or _elementwise(value) or _sum_operands(value) is not None) or \
            target in _RESERVED:
        return False
    used = run.bound | run.read_before_bound | set(run.touched) | run.deferred | run.matrices
    used |= {name for pair in run.products.values() for name in pair}
    reads = set(_names_read(value)) | {n.value.value.id for n in _shape_reads(value)}
    return target not in used and not reads & (run.bound | run.deferred)


def _number_of_sums(stmt, run):
    """Whether `stmt` binds a new name to arithmetic on the run's sums, numbers and lengths
    (`div = total / X.shape[0]`) that nothing in the run has used: a run with row products
    moves it after itself (a later statement of the run reading it ends the run), so the
    statements after it can join."""
    target = _assigned_name(stmt)
    if target is None:
        return False
    reads = set(_names_read(stmt.value))
    if not _elementwise(stmt.value) or not reads & run.sums or target in _RESERVED or \
            target in run.bound | run.read_before_bound | set(run.touched) | run.deferred:
        return False
    shapes = {n.value.value.id for n in _shape_reads(stmt.value)}
    return not (reads | shapes) & (run.bound - run.sums)


def handles_matrices(fn):
    """Whether `fn` slices along two axes (`x_dot[:, 1:]`) or makes arrays of two or more
    axes: batched code (vmap's) and matrix code, whose arrays may be matrices. There a run's
    helper is a loop nest over rows and elements (vectors read alike by every row), and a
    sum alone is no run."""
    for node in gast.walk(fn):
        if isinstance(node, gast.Subscript) and isinstance(node.slice, gast.Tuple) and \
                any(isinstance(e, gast.Slice) for e in node.slice.elts):
            return True
        if isinstance(node, gast.Call) and node.args and \
                isinstance(node.args[0], gast.Tuple) and len(node.args[0].elts) >= 2 and \
                dotted_name(node.func) in ("np.zeros", "np.empty", "np.ones", "np.full"):
            return True
    return False


def _one_sum_of_arithmetic(run):
    """A run of one sum whose operand computes something (`np.sum((1.0 - x[:-1]) ** 2)`):
    Numba's array expression would write the operand into an array before summing it."""
    if len(run.stmts) != 1 or run.stmts[0][1] != "sum":
        return False
    return any(not isinstance(op, gast.Name) and not _vector_slice(op) for op in run.stmts[0][2])


class _SumsOfRun(gast.NodeTransformer):
    """Replaces each sum of the run's values in an expression by a new name (collected in
    `hoisted`); a branch of an ``if`` expression or ``and``/``or`` may not run: left alone."""

    def __init__(self, run, taken):
        self.run, self.taken, self.hoisted = run, taken, []

    def visit_Call(self, node):
        operands = _sum_operands(node)
        reads = {n for op in operands or () for n in _names_read(op)}
        feeds = reads & self.run.bound if self.run.stmts else \
            reads and not all(isinstance(op, gast.Name) for op in operands)
        if operands is not None and feeds and not reads & self.run.sums:
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
    if not isinstance(stmt, (gast.Assign, gast.Return)) or stmt.value is None or \
            id(stmt) in run.hoisted:  # (one it bound itself and could not take: left alone)
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
    run.hoisted |= {id(h) for h in hoister.hoisted}
    return True


def _slice_parameter(node, local):
    """A parameter's name for the view `node` (`x_bar[:-1]` -> `x_bar_to_m1`)."""
    part = _columns(node)
    words = [node.value.id] + (["cols"] if part is not node.slice else [])
    for word, bound in (("from", part.lower), ("to", part.upper)):
        if bound is not None:
            words.append(f"{word}_{text_of(bound).replace('-', 'm').replace(' ', '')}")
    return fresh_name("_".join(words), local)


def _replace(run, outputs, taken, sources, nest=False, threads=False):
    """The call that stands for `run`, its helper's source added to `sources`."""
    vectors, lengths = [], {}  # lengths: text of a `v.shape[k]` read -> (parameter, node)
    views = {}  # text of a vector slice -> (parameter, node)
    local = set(run.bound) | _RESERVED
    for target, kind, operands, _ in run.stmts:
        for op in operands:
            for n in _names_read(op):
                if n not in run.bound and n not in vectors and n not in run.products:
                    vectors.append(n)
            for node in gast.walk(op):
                if _vector_slice(node):
                    views.setdefault(text_of(node), node)
        if kind == "write" and target not in vectors:
            vectors.append(target)
            views.setdefault(target, _as_load(run.targets[target]))
    local |= {v for v in vectors if v not in views} | {n.value.id for n in views.values()}
    parameters = {}
    for v in vectors:
        parameters[v] = _slice_parameter(views[v], local) if v in views else v
        local.add(parameters[v])
    for _, _, operands, _ in run.stmts:
        for op in operands:
            for node in _shape_reads(op):
                key = text_of(node)
                if key not in lengths:
                    base = f"{node.value.value.id}_shape_{node.slice.value}"
                    lengths[key] = (fresh_name(base, local), node)
    name = fresh_name("fused", taken)
    taken.add(f"{name}_statements")
    # the matrices of row products and row sums, then the vectors they multiply
    parts = [m for m in sorted(run.matrices) if m not in vectors]
    parts += sorted({v for _, v in run.products.values()} - set(vectors) - set(parts))
    addends = sorted(set(run.addends.values()))  # (`g = a + np.dot(X.T, e)`: a, renamed)
    for a in addends:
        parameters[a] = fresh_name(f"{a}_before", local)
        local.add(parameters[a])
    params = [parameters[v] for v in vectors] + parts + [parameters[a] for a in addends] + \
        [p for p, _ in lengths.values()]
    arguments = [copy.deepcopy(views[v]) if v in views else name_node(v) for v in vectors] + \
        [name_node(p) for p in parts + addends] + [copy.deepcopy(n) for _, n in lengths.values()]
    if run.products or run.rowsums:
        from .row_products import rows_source
        sources[name] = rows_source(name, run, outputs, vectors, parameters, params, lengths,
                                    local | set(parts), parts, threads)
    else:
        helper = _nest_source if nest else _helper_source
        sources[name] = helper(name, run, outputs, vectors, parameters, params, lengths, local)
    call = gast.Call(func=name_node(name), args=arguments, keywords=[])
    if not outputs:  # slices written in place, nothing else read later
        return gast.Expr(value=call)
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
            return name_node(self.lengths[text_of(node)][0])
        return self.generic_visit(node)


class _Parameters(gast.NodeTransformer):
    """Each vector the run reads (a name, or a slice such as `x[1:]`: its key is its text)
    becomes the name `names` gives it: its parameter in the statements, the local holding its
    element in the loop."""

    def __init__(self, names):
        self.names = names

    def visit_Call(self, node):
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_Subscript(self, node):
        if _vector_slice(node) and text_of(node) in self.names:
            return name_node(self.names[text_of(node)])
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.names and isinstance(node.ctx, gast.Load):
            return name_node(self.names[node.id])
        return node


class _Elements(_Parameters):
    """Each vector the run reads becomes ``element(p, i)`` of its parameter p (in a nest,
    ``element_at(p, r, i)``: `index` is then the names of the row and the element)."""

    def __init__(self, parameters, index):
        super().__init__(parameters)
        self.index = (index,) if isinstance(index, str) else tuple(index)

    def visit_Subscript(self, node):
        named = super().visit_Subscript(node)
        return self._element(named) if named is not node else node

    def visit_Name(self, node):
        named = super().visit_Name(node)
        return self._element(named) if named is not node else node

    def _element(self, parameter):
        return gast.Call(func=name_node("element" if len(self.index) == 1 else "element_at"),
                         args=[parameter] + [name_node(i) for i in self.index], keywords=[])


def _as_load(node):
    loaded = copy.deepcopy(node)
    loaded.ctx = gast.Load()
    return loaded


def _statement_reads(run, vectors, writes_read=True):
    """For each statement of the run, the positions of the parameters it reads, directly or
    through the values it reads. With `writes_read` (the loop nest's use), a written slice
    counts as read by the statement writing it, and so by every later reader of the slice:
    nest_types must see who reads a vector's new elements. The vector loop's groups leave it
    out."""
    deps, reads = {}, []
    for target, kind, operands, _ in run.stmts:
        found = set()
        for op in operands:
            for n in _names_read(_without_sizes(op)):
                found |= deps[n] if n in deps else {vectors.index(n)}
        if kind == "write" and writes_read:
            found.add(vectors.index(target))
        deps[target] = found
        reads.append(tuple(sorted(found)))
    return reads


class _SizesAsCount(gast.NodeTransformer):
    """Each size call of a run (_SIZE) becomes ``(n if flag else 1)``: the loop's element
    count when its operand reads a vector (`flag_of(operand)`: the flag's text, a name the
    overload sets from the argument types, or True/False), else 1."""

    def __init__(self, count, flag_of, inner):
        self.count, self.flag_of, self.inner = count, flag_of, inner

    def visit(self, node):  # (sizes first, over the whole tree; then the inner transformer)
        return self.inner.visit(self.sizes(node))

    def sizes(self, node):
        return gast.NodeTransformer.visit(self, node)

    def generic_visit(self, node):
        for field, old in gast.iter_fields(node):
            if isinstance(old, list):
                setattr(node, field, [self.sizes(v) if isinstance(v, gast.AST) else v
                                      for v in old])
            elif isinstance(old, gast.AST):
                setattr(node, field, self.sizes(old))
        return node

    def visit_Call(self, node):
        if not _size_call(node):
            return self.generic_visit(node)
        flag = self.flag_of(node.args[0])
        if flag in ("True", "False"):
            return name_node(self.count) if flag == "True" else gast.Constant(value=1, kind=None)
        return gast.IfExp(test=name_node(flag), body=name_node(self.count),
                          orelse=gast.Constant(value=1, kind=None))


def size_flags(run, vectors, parameters, local):
    """For the run's size calls: (a function giving an operand's flag text, the overload's
    lines setting the flags that depend on the argument types). A flag says whether the
    operand reads a vector, directly or through the values it reads (a row product always
    does); flags are kept by the vectors they depend on (an operand's lengths, `x.shape[0]`
    made a parameter, are no vectors: the same flag before and after)."""
    positions, _ = vector_positions(run, vectors)
    flags, lines = {}, []

    def flag_of(node):
        found = positions(node)
        if found not in flags:
            if -1 in found or not found:
                flags[found] = str(bool(found))
            else:
                flags[found] = fresh_name("sized", local)
                local.add(flags[found])
                arrays = ", ".join(parameters[vectors[p]] for p in found)
                lines.append(f"{flags[found]} = any_vector(({arrays},))")
        return flags[found]
    for _, _, operands, _ in run.stmts:
        for op in operands:
            for call in (c for c in gast.walk(op) if _size_call(c)):
                flag_of(call.args[0])
    return flag_of, lines


def vector_positions(run, vectors):
    """(a function giving the positions in `vectors` of the vectors an expression of the run
    reads, directly or through the values it reads (not through sizes), sorted; {value the
    run binds: the positions it depends on}); -1 stands for a row product or a row sum (a
    vector whatever the types)."""
    deps = {}

    def positions(node):
        found = set()
        for n in _names_read(_without_sizes(node)):
            if n in run.products:
                found.add(-1)
            elif n in deps:
                found |= deps[n]
            elif n in vectors:
                found.add(vectors.index(n))
        return tuple(sorted(found))
    for target, _, operands, _ in run.stmts:
        deps[target] = set().union(*(positions(op) for op in operands))
        if target in run.rowsums:
            deps[target].add(-1)
    return positions, deps


def _plain_statements(run, outputs, parameters, as_lengths):
    """The run's statements as written, over the helper's parameters, and its return."""
    as_parameters = _Parameters(parameters)
    plain = []
    for target, kind, _, value in run.stmts:
        value = as_parameters.visit(as_lengths.visit(copy.deepcopy(value)))
        if kind == "write":
            plain.append(_written_in_place(parameters[target], value))
        else:
            plain.append(f"{target} = {text_of(value)}")
    if outputs:
        plain.append("return " + (outputs[0] if len(outputs) == 1 else
                                  "(" + ", ".join(outputs) + ")"))
    return plain


def _written_in_place(target, value):
    """The plain statement writing `value` into the slice parameter `target`: ``t += e``
    when the value is ``t + e`` (or ``t - e``) with e a new array (an operator's result),
    ``t[:] = value`` otherwise. Numba compiles an array assigned into a slice slowly (its
    shape error's message alone: ADBench GMM's vectorized gradient spent 3.4 s of its 21 s
    compile on one such fallback; 1.0 s in place); e being new, adding it in place reads
    no element the statement has already written."""
    if isinstance(value, gast.BinOp) and isinstance(value.op, (gast.Add, gast.Sub)) and \
            isinstance(value.left, gast.Name) and value.left.id == target and \
            isinstance(value.right, (gast.BinOp, gast.UnaryOp)):
        sign = "+" if isinstance(value.op, gast.Add) else "-"
        return f"{target} {sign}= {text_of(value.right)}"
    return f"{target}[:] = {text_of(value)}"


def _element_locals(run, vectors, parameters, local, read_element):
    """For a run writing slices: a local per vector for its element, and the loop's first
    lines reading each vector the run reads into its local (`read_element(p)` is the text
    reading parameter p's element)."""
    read = [v for v in vectors if any(v in _names_read(op) for _, _, ops, _ in run.stmts
                                      for op in ops)]
    elements = {}
    for v in vectors:
        elements[v] = fresh_name(f"{parameters[v]}_i", local)
        local.add(elements[v])
    return elements, [f"{elements[v]} = {read_element(parameters[v])}" for v in read]


def _apart(run, vectors, parameters):
    """The run-time test that a written vector shares memory with another argument."""
    return " or ".join(f"overlapping({parameters[w]}, {parameters[v]})" for w in run.writes
                       for v in vectors if v != w and (v not in run.writes or
                                                       vectors.index(v) > vectors.index(w)))


def _return_text(outputs, stored):
    """The loop's return line (after a newline and its indent), or nothing."""
    names = [stored.get(t, t) for t in outputs]
    if not names:
        return ""
    return "\n        return " + (names[0] if len(names) == 1 else "(" + ", ".join(names) + ")")


def _step_lines(run, to_elements, as_lengths, elements, keep, store, stored):
    """A step's lines for the run's statements, each operand's vectors read as `to_elements`
    makes them: `keep(target, line)` gives the lines for what a statement keeps (a sum's
    addition, a value stored for later), `store(array, value)` a store's text."""
    lines = []
    for target, kind, operands, _ in run.stmts:
        operands = [to_elements.visit(as_lengths.visit(copy.deepcopy(op))) for op in operands]
        if kind == "sum":
            value = operands[0] if len(operands) == 1 else \
                gast.BinOp(left=operands[0], op=gast.Mult(), right=operands[1])
            lines += keep(target, text_of(gast.AugAssign(
                target=name_node(target, gast.Store()), op=gast.Add(), value=value)))
        elif kind == "write":
            lines.append(f"{elements[target]} = {text_of(operands[0])}")
        else:
            lines.append(f"{target} = {text_of(operands[0])}")
            if target in stored:
                lines += keep(target, store(stored[target], target))
    return lines


def _helper_source(name, run, outputs, vectors, parameters, params, lengths, local):
    signature = ", ".join(params)
    as_lengths = _Lengths(lengths)
    plain = _plain_statements(run, outputs, parameters, as_lengths)
    deps = dict(zip((t for t, _, _, _ in run.stmts),
                    _statement_reads(run, vectors, writes_read=False)))
    groups = tuple(deps[t] for t in outputs)
    written = tuple(vectors.index(w) for w in run.writes)
    count, index = fresh_name("n", local), fresh_name("i", local)
    several = fresh_name("several", local)
    stored = {t: fresh_name(f"{t}_values", local) for t, kind, _, _ in run.stmts
              if kind == "value" and t in outputs}
    # A run writing slices reads each element once, into a local, and stores each slice's
    # element once, at the end of the step: the loop touches no other element of a written
    # vector, and (checked before the loop) no written vector shares memory with another
    # argument, so the compiler need not reload a value after every store.
    elements, loop = {}, []
    if run.writes:
        elements, loop = _element_locals(run, vectors, parameters, local,
                                         lambda p: f"element({p}, {index})")
    to_elements = _Parameters(elements) if run.writes else _Elements(parameters, index)
    flag_of, flag_lines = size_flags(run, vectors, parameters, local)
    to_elements = _SizesAsCount(count, flag_of, to_elements)
    loop += _step_lines(run, to_elements, as_lengths, elements,
                        lambda t, line: [line], lambda a, v: f"{a}[{index}] = {v}", stored)
    loop += [f"{parameters[w]}[{index}] = {elements[w]}" for w in run.writes]
    length = "-1"
    for v in vectors:
        length = f"joined_length({length}, {parameters[v]})"
    apart = _apart(run, vectors, parameters)
    guard = f"{several} and ({count} < 0 or {apart})" if apart else f"{several} and {count} < 0"
    made = [f"{stored[t]} = np.empty({count})" for t in outputs if t in stored]
    made += [f"{t} = 0.0" for t, kind, _, _ in run.stmts if kind == "sum"]
    after = [f"{t} = {t} / {count}" for t, kind, _, v in run.stmts  # (a mean's division)
             if kind == "sum" and dotted_name(v.func) == "np.mean"]
    statement_text = "\n    ".join(plain)
    loop_text = "\n            ".join(loop)
    made_text = "".join("\n        " + line for line in made)
    returned_text = _return_text(outputs, stored)
    after_text = "".join("\n        " + line for line in after)
    written_text = f", {written!r}" if written else ""
    flag_text = "".join("\n    " + line for line in flag_lines)
    return f'''\
def {name}({signature}):
    """The statements of {name}_statements: under Numba in one loop over elements when every
    array argument is a float64 vector (see {name}_numba)."""
    return {name}_statements({signature})


def {name}_statements({signature}):
    """What {name} computes, statement by statement."""
    {statement_text}


@numba.extending.overload({name}, jit_options={{'error_model': 'numpy', 'fastmath': {_flags()}}})
def {name}_numba({signature}):
    """How Numba compiles {name}: one loop over elements, sums as running totals, when each
    argument is a number or a float64 vector and each result reads a vector; otherwise the
    statements as written."""
    if not one_loop_types(({signature},), {groups!r}, {len(vectors)}{written_text}):
        return lambda {signature}: {name}_statements({signature})
    {several} = several_vectors(({signature},), {len(vectors)}){flag_text}

    def {name}_loop({signature}):
        {count} = {length}
        if {guard}:
            return {name}_statements({signature}){made_text}
        for {index} in range({count}):
            {loop_text}{after_text}{returned_text}
    return {name}_loop
'''



def _flags():
    """A fused loop's fastmath flags: sums in SIMD lanes, and multiply-adds as the module's
    functions have them (:func:`codegen.numba_cpu.contracts_by_default`)."""
    from .numba_cpu import contracts_by_default
    return "{'contract', 'reassoc'}" if contracts_by_default() else "{'reassoc'}"


def _nest_source(name, run, outputs, vectors, parameters, params, lengths, local):
    """The helper of a run in a function that may hold matrices (see handles_matrices): under
    Numba a loop over the rows of its matrix arguments (one row when there are none) and the
    elements of a row. A vector is read alike by every row, and what reads no matrix (a
    vector's new elements, a sum or value of vectors alone) is kept from the first row."""
    signature = ", ".join(params)
    as_lengths = _Lengths(lengths)
    plain = _plain_statements(run, outputs, parameters, as_lengths)
    reads = _statement_reads(run, vectors)
    deps = dict(zip((t for t, _, _, _ in run.stmts), reads))
    groups = tuple(deps[t] for t in outputs)
    written = tuple(vectors.index(w) for w in run.writes)
    rows, count = fresh_name("rows", local), fresh_name("n", local)
    row, index = fresh_name("r", local), fresh_name("i", local)
    local |= {rows, count, row, index}

    def arguments(positions):
        names = [parameters[vectors[p]] for p in positions]
        return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"

    stored = {t: fresh_name(f"{t}_values", local) for t, kind, _, _ in run.stmts
              if kind == "value" and t in outputs}
    kept = {}  # what a statement keeps (a stored value, a sum, a written element) -> its gate
    for target, kind, _, _ in run.stmts:
        if target in stored or kind == "sum" or kind == "write" and target not in kept:
            kept[target] = fresh_name(f"{parameters[target]}_every_row" if kind == "write"
                                      else f"{target}_every_row", local)
            local.add(kept[target])
    before = [f"{gate} = every_row("
              f"{arguments((vectors.index(t),) if t in run.writes else deps[t])})"
              for t, gate in kept.items()]
    elements, loop = {}, []
    if run.writes:  # each element read once into a local, each written one stored once
        elements, loop = _element_locals(run, vectors, parameters, local,
                                         lambda p: f"element_at({p}, {row}, {index})")
    to_elements = _Parameters(elements) if run.writes else _Elements(parameters, (row, index))
    def gated(target, line):  # what a statement keeps: on every row, or from the first
        return [f"if {kept[target]} or {row} == 0:", "    " + line]

    def store(array, value):
        return f"store_at({array}, {row}, {index}, {value})"
    loop += _step_lines(run, to_elements, as_lengths, elements, gated, store, stored)
    for w in run.writes:
        loop += gated(w, store(parameters[w], elements[w]))
    rows_joined, length = "-1", "-1"
    for v in vectors:
        rows_joined = f"joined_rows({rows_joined}, {parameters[v]})"
        length = f"joined_columns({length}, {parameters[v]})"
    apart = _apart(run, vectors, parameters)
    guard = f"{count} < 0 or {rows} == -2 or {rows} == 0" + (f" or {apart}" if apart else "")
    made = [f"{stored[t]} = empty_values({rows}, {count}, {arguments(deps[t])})"
            for t in outputs if t in stored]
    made += [f"{t} = 0.0" for t, kind, _, _ in run.stmts if kind == "sum"]
    after = [f"{t} = {t} / ({count} * ({rows} if {kept[t]} else 1))"  # (a mean's division)
             for t, kind, _, v in run.stmts if kind == "sum" and dotted_name(v.func) == "np.mean"]
    statement_text = "\n    ".join(plain)
    loop_text = "\n                ".join(loop)
    made_text = "".join("\n        " + line for line in before + made)
    returned_text = _return_text(outputs, stored)
    after_text = "".join("\n        " + line for line in after)
    return f'''\
def {name}({signature}):
    """The statements of {name}_statements: under Numba in one loop nest over rows and
    elements when every array argument is a float64 vector or matrix (see {name}_numba)."""
    return {name}_statements({signature})


def {name}_statements({signature}):
    """What {name} computes, statement by statement."""
    {statement_text}


@numba.extending.overload({name}, jit_options={{'error_model': 'numpy', 'fastmath': {_flags()}}})
def {name}_numba({signature}):
    """How Numba compiles {name}: a loop over the rows of its matrix arguments (one row when
    there are none) and the elements of a row, vectors read alike by every row, sums as
    running totals; otherwise the statements as written."""
    if not nest_types(({signature},), {tuple(reads)!r}, {groups!r}, {len(vectors)}, {written!r}):
        return lambda {signature}: {name}_statements({signature})

    def {name}_loop({signature}):
        {rows} = {rows_joined}
        {count} = {length}
        if {guard}:
            return {name}_statements({signature})
        if {rows} == -1:
            {rows} = 1{made_text}
        for {row} in range({rows}):
            for {index} in range({count}):
                {loop_text}{after_text}{returned_text}
    return {name}_loop
'''


#: Helpers every fused loop calls: ``one_loop_types`` runs when Numba types a call (plain
#: Python), ``element`` and ``joined_length`` are overloads written into the loop.
FUSED_HELPERS = {}
FUSED_HELPERS["one_loop_types"] = '''\
def one_loop_types(types, groups, vector_count, written=()):
    """Whether a fused loop can take arguments of these Numba types: each of the first
    `vector_count` a number or a float64 vector (the rest are lengths), every group of
    argument positions (the vectors a result reads) holding at least one vector, and each
    position in `written` (a slice the run writes in place) a vector that can be written."""
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
    if any(not vectors[p] or not types[p].mutable for p in written):
        return False
    return all(any(vectors[p] for p in group) for group in groups)
'''

FUSED_HELPERS["any_vector"] = '''\
def any_vector(types):
    """Whether one of these Numba types is an array: whether a fused loop's `(e).size` of an
    expression reading them is its element count (else the expression is a number, of size
    1)."""
    return any(isinstance(kind, numba.types.Array) for kind in types)
'''

FUSED_HELPERS["several_vectors"] = '''\
def several_vectors(types, vector_count):
    """Whether two or more of the first `vector_count` Numba types are arrays: only then can
    a fused loop's vectors differ in length or share memory. Otherwise its loop needs no
    way back to the statements, and (the test being a constant of the loop, a branch Numba
    removes before typing) the statements are not compiled beside it."""
    return sum(isinstance(kind, numba.types.Array) for kind in types[:vector_count]) > 1
'''

FUSED_HELPERS["overlapping"] = '''\
def overlapping(a, b):
    """Whether vectors `a` and `b` may share memory (their spans of addresses meet); False
    when either is a number. A fused loop writing `a` while reading `b` runs the statements
    as written instead."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return False
    return bool(np.shares_memory(a, b))


@numba.extending.overload(overlapping, jit_options={'error_model': 'numpy'})
def overlapping_numba(a, b):
    """How Numba compiles overlapping: the first and last addresses each array touches."""
    if not (isinstance(a, numba.types.Array) and isinstance(b, numba.types.Array)):
        return lambda a, b: False

    def spans_meet(a, b):
        if a.size == 0 or b.size == 0:
            return False
        a_low = a_high = a.ctypes.data
        for k in range(a.ndim):
            a_step = a.strides[k] * (a.shape[k] - 1)
            a_low += min(0, a_step)
            a_high += max(0, a_step)
        b_low = b_high = b.ctypes.data
        for k in range(b.ndim):
            b_step = b.strides[k] * (b.shape[k] - 1)
            b_low += min(0, b_step)
            b_high += max(0, b_step)
        return a_low < b_high + b.itemsize and b_low < a_high + a.itemsize
    return spans_meet
'''

#: Helpers of the loop nests written for functions that may hold matrices (vmap's batched
#: code): the arguments' types choose, when Numba compiles a call, which statements keep
#: their results on every row.
NEST_HELPERS = {}
NEST_HELPERS["nest_types"] = '''\
def nest_types(types, reads, groups, vector_count, written=()):
    """Whether a fused loop nest can take arguments of these Numba types: each of the first
    `vector_count` a number, or a float64 vector or matrix (the rest are lengths); every
    group of positions (the arguments a result reads) holding an array; each position in
    `written` an array that can be written; and no statement reading both a matrix and a
    vector the run writes (`reads`: the positions each statement reads, through the values
    it reads): from the second row on, that vector holds its new elements."""
    ndims = []
    for position, kind in enumerate(types):
        if isinstance(kind, numba.types.Array):
            if position >= vector_count or kind.ndim not in (1, 2) or \\
                    kind.dtype != numba.types.float64:
                return False
            ndims.append(kind.ndim)
        elif isinstance(kind, (numba.types.Float, numba.types.Integer)) and \\
                not isinstance(kind, numba.types.Boolean):
            ndims.append(0)
        else:
            return False
    if any(ndims[p] == 0 or not types[p].mutable for p in written):
        return False
    if not all(any(ndims[p] for p in group) for group in groups):
        return False
    vectors_written = {p for p in written if ndims[p] == 1}
    return not any(vectors_written & set(read) and any(ndims[p] == 2 for p in read)
                   for read in reads)
'''

NEST_HELPERS["element_at"] = '''\
def element_at(v, r, i):
    """`v[r, i]` of a matrix, `v[i]` of a vector (alike on every row), `v` of a number."""
    if not isinstance(v, np.ndarray):
        return v
    return v[r, i] if v.ndim == 2 else v[i]


@numba.extending.overload(element_at, inline='always', jit_options={'error_model': 'numpy'})
def element_at_numba(v, r, i):
    """How Numba compiles element_at: written into the loop, an index or nothing."""
    if isinstance(v, numba.types.Array) and v.ndim == 2:
        return lambda v, r, i: v[r, i]
    if isinstance(v, numba.types.Array):
        return lambda v, r, i: v[i]
    return lambda v, r, i: v
'''

NEST_HELPERS["store_at"] = '''\
def store_at(a, r, i, value):
    """`a[r, i] = value` of a matrix, `a[i] = value` of a vector."""
    if a.ndim == 2:
        a[r, i] = value
    else:
        a[i] = value


@numba.extending.overload(store_at, inline='always', jit_options={'error_model': 'numpy'})
def store_at_numba(a, r, i, value):
    """How Numba compiles store_at: written into the loop, one store."""
    if a.ndim == 2:
        def matrix_store(a, r, i, value):
            a[r, i] = value
        return matrix_store

    def vector_store(a, r, i, value):
        a[i] = value
    return vector_store
'''

NEST_HELPERS["every_row"] = '''\
def every_row(arrays):
    """Whether a statement reading `arrays` (a tuple) differs from row to row: whether one
    of them is a matrix."""
    return any(isinstance(a, np.ndarray) and a.ndim == 2 for a in arrays)


@numba.extending.overload(every_row, inline='always', jit_options={'error_model': 'numpy'})
def every_row_numba(arrays):
    """How Numba compiles every_row: a constant of the argument types."""
    answer = any(isinstance(a, numba.types.Array) and a.ndim == 2 for a in arrays.types)
    return lambda arrays: answer
'''

NEST_HELPERS["empty_values"] = '''\
def empty_values(rows, n, arrays):
    """Room for a value of each element: a matrix of `rows` rows when one of `arrays` (what
    the value reads) is a matrix, a vector of n elements otherwise."""
    return np.empty((rows, n)) if every_row(arrays) else np.empty(n)


@numba.extending.overload(empty_values, inline='always', jit_options={'error_model': 'numpy'})
def empty_values_numba(rows, n, arrays):
    """How Numba compiles empty_values: the array of the shape the argument types give."""
    if any(isinstance(a, numba.types.Array) and a.ndim == 2 for a in arrays.types):
        return lambda rows, n, arrays: np.empty((rows, n))
    return lambda rows, n, arrays: np.empty(n)
'''

NEST_HELPERS["joined_rows"] = '''\
def joined_rows(rows, v):
    """The rows a loop nest runs over, joined with `v`'s: `rows` when v is a number or a
    vector, v's row count when rows is -1 (none yet) or equal to it, and -2 when they
    differ."""
    if not (isinstance(v, np.ndarray) and v.ndim == 2):
        return rows
    return v.shape[0] if rows in (-1, v.shape[0]) else -2


@numba.extending.overload(joined_rows, inline='always', jit_options={'error_model': 'numpy'})
def joined_rows_numba(rows, v):
    """How Numba compiles joined_rows: written into the caller."""
    if isinstance(v, numba.types.Array) and v.ndim == 2:
        def matrix_rows(rows, v):
            if rows == -1 or rows == v.shape[0]:
                return v.shape[0]
            return -2
        return matrix_rows
    return lambda rows, v: rows
'''

NEST_HELPERS["joined_columns"] = '''\
def joined_columns(n, v):
    """The elements of a row a loop nest runs over, joined with `v`'s last axis: `n` when v is
    a number, its length when n is -1 (none yet) or equal to it, and -2 when they differ."""
    if not isinstance(v, np.ndarray):
        return n
    return v.shape[-1] if n in (-1, v.shape[-1]) else -2


@numba.extending.overload(joined_columns, inline='always', jit_options={'error_model': 'numpy'})
def joined_columns_numba(n, v):
    """How Numba compiles joined_columns: written into the caller."""
    if isinstance(v, numba.types.Array):
        last = v.ndim - 1

        def array_columns(n, v):
            if n == -1 or n == v.shape[last]:
                return v.shape[last]
            return -2
        return array_columns
    return lambda n, v: n
'''

NEST_HELPERS["overlapping"] = FUSED_HELPERS["overlapping"]

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
FUSED_UNCOMPILED = frozenset({"one_loop_types", "several_vectors", "any_vector", "element",
                              "element_numba",
                              "joined_length", "joined_length_numba", "overlapping",
                              "overlapping_numba"})

#: The same for NEST_HELPERS.
NEST_UNCOMPILED = frozenset(NEST_HELPERS) | {f"{n}_numba" for n in NEST_HELPERS
                                             if n != "nest_types"}
