"""A matrix's products with vectors inside a fused run: one pass over the matrix's rows.

A generalized linear model's gradient reads its data matrix twice, once forward and once
back, with elementwise work on the rows' values between (logistic regression, as
:mod:`autodiff_ast.reverse` writes it):

    z = np.dot(X, w)
    sum__bar = 1.0 / X.shape[0]
    z_bar = -sum__bar * y + sum__bar / (1.0 + np.exp(np.minimum(0.0 - z, 700.0)))
    w_bar = np.dot(X.T, z_bar)

As three passes (two BLAS products and a loop) X of 100,000 x 100 is read from memory twice:
10.4 ms under Numba, 10.0 ms for the same gradient in NumPy. Row i of X is all that row i of
``z`` and ``z_bar`` needs, so one loop over the rows can take the dot product of the row with
``w``, the elementwise work, and add the row, scaled, into ``w_bar``, while the row is still in
the cache: 4.4 ms on one thread of the same machine (/tmp-style A/B, 2026-11-28).

:mod:`codegen.fused_regions` collects the run (``np.dot(X, w)`` and ``X @ w`` of two names are
a *row product*, element i being ``row_dot(X, i, w)``; ``g = np.dot(X.T, e)``, ``X.T @ e``,
``np.dot(e, X)`` and ``e @ X`` of a value ``e`` the run makes are a *row sum*, each step adding
``e[i] * X[i]`` into ``g``) and :func:`rows_source` writes its helper. Under Numba the helper is
the loop when X is a float64 matrix in C order and w a float64 vector of X's columns, and the
run's vectors have X's rows; otherwise (other types, other lengths: NumPy raises its error
then) the statements as written.

BLAS multiplies on every core, and so does the loop over a large matrix. When the matrices
hold 2**:data:`THREADED_FROM` elements or more and Numba has more than one thread,
``{name}_threads`` splits the rows into ``row_chunks()`` parts (four per thread, at least 32:
Numba hands each thread a run of parts) and runs ``{name}_rows``, the loop over a range of
rows, on every part in a ``numba.prange`` loop. Each part adds its row sums into a vector of
its own (allocated in the part: the compiler knows it overlaps nothing) and then into its row
of a parts matrix, its sums into its entry of a parts vector; kept values go to their own
elements. The parts are added in order afterwards, so a given thread count gives the same
result every call. Logistic regression at N=100,000, D=100 on 2 cores: 3.0-3.2 ms against
7.1-8.7 ms on one thread and 4.1-4.8 ms for NumPy's two BLAS products (2026-11-29). Below the
threshold the one-thread loop runs: waking Numba's threads took 0.1-0.3 ms on that machine,
more than half a pass over a matrix of 2**20 elements. The threaded form costs Numba compile
time whether or not it runs (the logistic gradient's module from empty caches: 3.8-4.3 ->
5.6-5.9 s). A module whose functions may run on several threads at once (the per-example
functions a ``prange`` loop calls, pmap's ``nogil`` shards) is written without it
(``lower_source(threads=False)``): Numba's workqueue layer stops the process on a parallel
region inside another. Below the threshold, or in those modules, a matrix of more than 2**18
elements takes the statements when Numba has more than :data:`ONE_PASS_THREADS` threads:
their BLAS threads may read memory faster than one core reading half as much (a precaution:
only a 2-core machine was measured).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> from codegen.fused_regions import fuse_regions
>>> fn = gast.parse('''
... def g(w, X, y):
...     z = np.dot(X, w)
...     z_bar = z - y
...     w_bar = np.dot(X.T, z_bar)
...     return w_bar
... ''').body[0]
>>> sources = {}
>>> fuse_regions(fn, {"w", "X", "y", "z", "z_bar", "w_bar", "g"}, sources)
['fused']
>>> print(unparse(fn))
def g(w, X, y):
    w_bar = fused(y, X, w)
    return w_bar
>>> print(sources["fused"].split("for i in range(n):")[1].split("return")[0].strip())
z = row_dot(X, i, w)
            z_bar = z - element(y, i)
            add_row(w_bar, X, i, z_bar)
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, name_node, text_of
from .param_writes import dotted_name

__all__ = ["row_product", "row_sum", "rows_source", "ROW_HELPERS", "ROW_UNCOMPILED",
           "ONE_PASS_THREADS", "THREADED_FROM"]

#: Up to this many Numba threads the one-pass loop runs whatever the matrix's size.
ONE_PASS_THREADS = 4

#: log2 of the elements from which a row loop's matrices are split between threads.
THREADED_FROM = 21


def _product_operands(node):
    """The two operands of `np.dot(a, b)` or `a @ b`, else None."""
    if isinstance(node, gast.Call) and dotted_name(node.func) == "np.dot" and \
            len(node.args) == 2 and not node.keywords:
        return node.args
    if isinstance(node, gast.BinOp) and isinstance(node.op, gast.MatMult):
        return [node.left, node.right]
    return None


def row_product(node):
    """(matrix, vector) names of `np.dot(X, w)` or `X @ w` with names X and w, else None.

    >>> row_product(gast.parse("np.dot(X, w)").body[0].value)
    ('X', 'w')
    """
    operands = _product_operands(node)
    if operands is None or not all(isinstance(a, gast.Name) for a in operands):
        return None
    return operands[0].id, operands[1].id


def row_sum(node):
    """(matrix name, the other operand, addend name or None) of `np.dot(X.T, e)`, `X.T @ e`,
    `np.dot(e, X)` or `e @ X` with a name X, alone or added to a name (`g = g + np.dot(X.T,
    e)`, the gradient of a weight read twice), else None (the caller checks that e is a
    value of the run).

    >>> matrix, operand, addend = row_sum(gast.parse("a + np.dot(X.T, e)").body[0].value)
    >>> matrix, operand.id, addend
    ('X', 'e', 'a')
    """
    addend = None
    if isinstance(node, gast.BinOp) and isinstance(node.op, gast.Add):
        for name, product in ((node.left, node.right), (node.right, node.left)):
            if isinstance(name, gast.Name) and _product_operands(product) is not None:
                addend, node = name.id, product
                break
        else:
            return None
    operands = _product_operands(node)
    if operands is None:
        return None
    first, second = operands
    if isinstance(first, gast.Attribute) and first.attr == "T" and \
            isinstance(first.value, gast.Name):
        return first.value.id, second, addend
    if isinstance(second, gast.Name):
        return second.id, first, addend
    return None


def rows_source(name, run, outputs, vectors, parameters, params, lengths, local, parts,
                threads=False):
    """The helper of a run holding row products or row sums (see the module's docstring):
    `parts` are the matrices and the vectors they multiply, in the order of the signature's
    parameters after the run's vectors; the rest as fused_regions' _helper_source takes them.
    `threads`: large matrices' rows are split between Numba's threads (`{name}_threads`)."""
    from .fused_regions import (
        _flags,
        _Lengths,
        _plain_statements,
        _SizesAsCount,
        _step_lines,
        size_flags,
    )

    signature = ", ".join(params)
    as_lengths = _Lengths(lengths)
    plain = _plain_statements(run, outputs, parameters, as_lengths)
    count, index = _fresh("n", local), _fresh("i", local)
    limit = _fresh("limit", local)
    matrices = [m for m in parts if m in run.matrices]
    stored = {t: _fresh(f"{t}_values", local) for t, kind, _, _ in run.stmts
              if kind == "value" and t in outputs}
    flag_of, flag_lines = size_flags(run, vectors, parameters, local)
    to_elements = _SizesAsCount(count, flag_of, _RowElements(parameters, index, run.products))
    loop = []
    for stmt in run.stmts:
        target, kind, operands, _ = stmt
        if kind == "rowsum":
            value = to_elements.visit(as_lengths.visit(copy.deepcopy(operands[0])))
            loop.append(f"add_row({target}, {run.rowsums[target]}, {index}, {text_of(value)})")
            continue
        loop += _step_lines(_OneStatement(stmt), to_elements, as_lengths, {},
                            lambda t, line: [line], lambda a, v: f"{a}[{index}] = {v}", stored)
    length = "-1"
    for v in vectors:
        length = f"joined_length({length}, {parameters[v]})"
    shapes = [f"{m}.shape[1] != {w}.shape[0]" for m, w in sorted(set(run.products.values()))]
    if threads:
        checks = [f"{count} != {m}.shape[0]" for m in matrices] + shapes
    else:
        checks = [f"{count} != {m}.shape[0] or {m}.size > {limit}" for m in matrices] + shapes
    made = [f"{stored[t]} = np.empty({count})" for t in outputs if t in stored]
    made += [f"{t} = 0.0" for t, kind, _, _ in run.stmts if kind == "sum"]
    made += [f"{t} = np.zeros({m}.shape[1])" for t, m in run.rowsums.items()]
    after = [f"{t} = {t} / {count}" for t, kind, _, v in run.stmts  # (a mean's division)
             if kind == "sum" and dotted_name(v.func) == "np.mean"]
    after += [f"{t} = {parameters[a]} + {t}" for t, a in run.addends.items()]
    groups = tuple(_groups(run, vectors, outputs))
    returned = [stored.get(t, t) for t in outputs]
    returned_text = returned[0] if len(returned) == 1 else "(" + ", ".join(returned) + ")"
    chunks = _fresh("chunks", local)
    steps = made + [f"for {index} in range({count}):"] + ["    " + line for line in loop]
    threads_text = ""
    if threads:  # (the one-thread loop stays written in place: through {name}_rows it
        # measured ~5% slower at 10**6 elements)
        threaded, threads_text = _threaded(name, run, outputs, params, count, index, chunks,
                                           matrices, limit, stored, loop, after,
                                           returned_text, local)
        threads_text = threads_text.replace("FLAGS", "".join("\n    " + line
                                                              for line in flag_lines))
        steps = threaded + steps
    body = "\n        ".join(
        [f"{count} = {length}", f"if {count} == -1:", f"    {count} = {matrices[0]}.shape[0]",
         f"if {' or '.join(checks)}:", f"    return {name}_statements({signature})"] +
        steps + after + [f"return {returned_text}"])
    statement_text = "\n    ".join(plain)
    flag_text = "".join("\n    " + line for line in flag_lines)
    vector_text = "".join(f"{parameters[v]}, " for v in vectors)
    types = f"({vector_text}), {groups!r}, ({', '.join(parts)},), {len(matrices)}"
    chunks_text = f"\n    {chunks} = row_chunks()" if threads else ""
    return f'''\
def {name}({signature}):
    """The statements of {name}_statements: under Numba in one pass over the rows of its
    matrices when their types and shapes allow (see {name}_numba)."""
    return {name}_statements({signature})


def {name}_statements({signature}):
    """What {name} computes, statement by statement."""
    {statement_text}


@numba.extending.overload({name}, jit_options={{'error_model': 'numpy', 'fastmath': {_flags()}}})
def {name}_numba({signature}):
    """How Numba compiles {name}: one loop over the rows of {', '.join(matrices)} when the types
    allow, each row's products, values and sums in one step; otherwise the statements."""
    if not rows_loop_types({types}):
        return lambda {signature}: {name}_statements({signature})
    {limit} = one_pass_limit(){chunks_text}{flag_text}

    def {name}_loop({signature}):
        {body}
    return {name}_loop
{threads_text}'''


def _threaded(name, run, outputs, params, count, index, chunks, matrices, limit, stored, loop,
              after, returned_text, local):
    """(the lines a row loop's Numba form runs first when its matrices hold at least
    2**:data:`THREADED_FROM` elements, the source of `{name}_threads` and `{name}_rows`).
    `{name}_rows` is the loop over a range of rows;
    `{name}_threads` runs it on parts of the rows on Numba's threads at once. Names the
    overload sets first: `chunks` from row_chunks() (0 on one thread), the size flags (at
    FLAGS in the text returned)."""
    signature = ", ".join(params)
    sums = [t for t, kind, _, _ in run.stmts if kind == "sum"]
    rowsums = list(run.rowsums)
    parts = {t: _fresh(f"{t}_parts", local) for t in rowsums + sums}
    kept = [stored[t] for t in outputs if t in stored]
    part = _fresh("part", local)
    arguments = ", ".join(params + [count, chunks] + [parts[t] for t in rowsums + sums] + kept)
    size = " + ".join(f"{m}.size" for m in matrices)
    lines = [f"if {chunks} and {size} >= 2 ** {THREADED_FROM}:"]
    lines += [f"    {stored[t]} = np.empty({count})" for t in outputs if t in stored]
    lines += [f"    {parts[t]} = np.zeros(({chunks}, {m}.shape[1]))"
              for t, m in run.rowsums.items()]
    lines += [f"    {parts[t]} = np.zeros({chunks})" for t in sums]
    lines.append(f"    {name}_threads({arguments})")
    lines += [f"    {t} = np.zeros({m}.shape[1])" for t, m in run.rowsums.items()]
    lines += [f"    {t} = 0.0" for t in sums]  # (the parts added in order: no axis sums to compile)
    lines += [f"    for {part} in range({chunks}):"]
    lines += [f"        add_row({t}, {parts[t]}, {part}, 1.0)" for t in rowsums]
    lines += [f"        {t} += {parts[t]}[{part}]" for t in sums]
    lines += ["    " + line for line in after] + [f"    return {returned_text}"]
    lines += [f"if {' or '.join(f'{m}.size > {limit}' for m in matrices)}:",
              f"    return {name}_statements({signature})"]
    start, stop, totals = _fresh("start", local), _fresh("stop", local), _fresh("totals", local)
    into = {t: _fresh(f"{t}_into", local) for t in rowsums}
    rows_arguments = ", ".join(params + [count, start, stop] + [into[t] for t in rowsums] + kept)
    call = ", ".join(params + [count, f"{part} * {count} // {chunks}",
                               f"({part} + 1) * {count} // {chunks}"] +
                     [f"{parts[t]}[{part}]" for t in rowsums] + kept)
    if sums:
        call = f"{totals} = {name}_rows({call})" + "".join(
            f"\n            {parts[t]}[{part}] = {totals}[{k}]" for k, t in enumerate(sums))
        returned = "(" + ", ".join(sums) + ("," if len(sums) == 1 else "") + ")"
    else:
        call, returned = f"{name}_rows({call})", "0.0"
    step = "\n            ".join(loop)
    starts = "".join(f"\n        {t} = np.zeros({into[t]}.shape[0])" for t in rowsums)
    starts += "".join(f"\n        {t} = 0.0" for t in sums)
    ends = "".join(f"\n        for {index} in range({t}.shape[0]):\n"
                   f"            {into[t]}[{index}] += {t}[{index}]" for t in rowsums)
    from .fused_regions import _flags
    text = f'''

def {name}_threads({arguments}):
    """The rows of {name}'s loop in `{chunks}` parts that Numba's threads run at once, each
    part's sums and row sums in its own entry of the `_parts` arrays, each kept value in its
    own elements (see {name}_threads_numba). Only compiled code calls it: as plain Python
    {name} runs its statements."""
    raise NotImplementedError("{name}_threads runs compiled, from {name}'s Numba form")


@numba.extending.overload({name}_threads, jit_options={{'error_model': 'numpy', 'parallel': True}})
def {name}_threads_numba({arguments}):
    """How Numba compiles {name}_threads: a numba.prange loop over the parts, {name}_rows
    running each part's rows (a loop of its own: the parallel region stays small)."""

    def {name}_threads_loop({arguments}):
        for {part} in numba.prange({chunks}):
            {call}
    return {name}_threads_loop


def {name}_rows({rows_arguments}):
    """Rows `{start}` to `{stop}` of {name}'s loop, row sums added into the vectors given (each
    summed in a vector of its own first: the compiler knows it overlaps no argument), kept
    values written to their elements; returns the sums (see {name}_rows_numba). Only
    compiled code calls it."""
    raise NotImplementedError("{name}_rows runs compiled, from {name}'s Numba form")


@numba.extending.overload({name}_rows, jit_options={{'error_model': 'numpy',
                                                      'fastmath': {_flags()}}})
def {name}_rows_numba({rows_arguments}):
    """How Numba compiles {name}_rows: {name}'s loop over rows `{start}` to `{stop}`."""FLAGS

    def {name}_rows_loop({rows_arguments}):{starts}
        for {index} in range({start}, {stop}):
            {step}{ends}
        return {returned}
    return {name}_rows_loop
'''
    return lines, text


def _fresh(base, local):
    name = fresh_name(base, local)
    local.add(name)
    return name


class _OneStatement:
    """A run of one statement (fused_regions' _step_lines takes runs)."""

    def __init__(self, stmt):
        self.stmts = [stmt]


def _groups(run, vectors, outputs):
    """For each output, the positions of the vectors it reads (directly or through the values
    it reads), -1 standing for a row product (a vector whatever the types)."""
    from .fused_regions import vector_positions
    _, deps = vector_positions(run, vectors)
    for t in outputs:
        yield tuple(sorted(deps[t]))


class _RowElements(gast.NodeTransformer):
    """fused_regions' element reads, with each row product's placeholder read as
    ``row_dot(X, i, w)``."""

    def __init__(self, parameters, index, products):
        from .fused_regions import _Elements
        self.elements = _Elements(parameters, index)
        self.index, self.products = index, products

    def visit(self, node):
        node = _Placeholders(self.products, self.index).visit(node)
        return self.elements.visit(node)


class _Placeholders(gast.NodeTransformer):
    def __init__(self, products, index):
        self.products, self.index = products, index

    def visit_Name(self, node):
        if node.id in self.products and isinstance(node.ctx, gast.Load):
            matrix, vector = self.products[node.id]
            return gast.Call(func=name_node("row_dot"),
                             args=[name_node(matrix), name_node(self.index), name_node(vector)],
                             keywords=[])
        return node


#: Helpers a run with row products needs beside fused_regions' FUSED_HELPERS.
ROW_HELPERS = {}
ROW_HELPERS["rows_loop_types"] = '''\
def rows_loop_types(vector_types, groups, part_types, matrix_count):
    """Whether a loop over rows can take arguments of these Numba types: the vectors as
    one_loop_types takes them (numbers or float64 vectors, every group of vector positions,
    what a result reads, holding a vector; -1 in a group is a row product, always one), the
    first `matrix_count` of `part_types` float64 matrices in C order and the rest float64
    vectors."""
    for position, kind in enumerate(part_types):
        if not (isinstance(kind, numba.types.Array) and kind.dtype == numba.types.float64):
            return False
        if position < matrix_count and (kind.ndim != 2 or kind.layout != 'C') or \\
                position >= matrix_count and kind.ndim != 1:
            return False
    groups = tuple(group for group in groups if -1 not in group)
    return one_loop_types(vector_types, groups, len(vector_types))
'''

ROW_HELPERS["one_pass_limit"] = f'''\
def one_pass_limit():
    """The most elements a matrix may have for its rows to be read in one pass on one
    thread: any number with up to {ONE_PASS_THREADS} Numba threads, else 2**18 (larger matrices
    take the statements, whose BLAS products run on every thread)."""
    return 2 ** 62 if numba.config.NUMBA_NUM_THREADS <= {ONE_PASS_THREADS} else 2 ** 18
'''

ROW_HELPERS["row_dot"] = '''\
def row_dot(a, i, v):
    """The dot product of row i of matrix `a` with vector `v`."""
    return np.dot(a[i], v)


@numba.extending.overload(row_dot, jit_options={'error_model': 'numpy',
                                                'fastmath': {'contract', 'reassoc'}})
def row_dot_numba(a, i, v):
    """How Numba compiles row_dot: a loop whose partial sums run in SIMD lanes."""
    def row_dot_loop(a, i, v):
        total = 0.0
        for j in range(v.shape[0]):
            total += a[i, j] * v[j]
        return total
    return row_dot_loop
'''

ROW_HELPERS["add_row"] = '''\
def add_row(g, a, i, s):
    """g += s * a[i]: row i of matrix `a`, scaled by the number `s`, added into vector `g`."""
    g += s * a[i]


@numba.extending.overload(add_row, inline='always', jit_options={'error_model': 'numpy'})
def add_row_numba(g, a, i, s):
    """How Numba compiles add_row: a loop over the row, written into the caller."""
    def add_row_loop(g, a, i, s):
        for j in range(g.shape[0]):
            g[j] += s * a[i, j]
    return add_row_loop
'''

ROW_HELPERS["row_chunks"] = '''\
def row_chunks():
    """How many parts a threaded row loop splits its rows into: 0 with one Numba thread (no
    threaded loop), else four per thread and at least 32 (Numba's threads each take a run of
    parts; a fixed count on up to 8 threads adds the same partial sums in the same order)."""
    threads = numba.config.NUMBA_NUM_THREADS
    return 0 if threads <= 1 else max(32, 4 * threads)
'''

#: The functions of ROW_HELPERS Numba never compiles as they stand.
ROW_UNCOMPILED = frozenset({"rows_loop_types", "one_pass_limit", "row_dot", "row_dot_numba",
                            "add_row", "add_row_numba", "row_chunks"})
