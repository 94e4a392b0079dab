"""A loop that sums into a number, outlined into a function compiled with reassociation.

The backward sweep of the heat equation adds into the adjoint of its coefficient once per
point and step:

    for i in range(1, n - 1):
        add_3_bar = un_bar[i]
        un_bar[i] = 0.0
        c_bar = c_bar + add_3_bar * (u[i - 1] - 2.0 * u[i] + u[i + 1])

Compiled as written, each addition waits for the one before (floating-point addition is not
associative, so the compiler may not reorder it): a chain of 998 additions per step.
:func:`outline_reductions` moves such a loop into a function of its own, compiled with
``fastmath={'reassoc'}`` (as ``reassociated_sum`` is), which sums into ``total`` from 0.0; the
loop's place holds ``c_bar = c_bar + sum_loop(n, un_bar, u)``. The compiler then keeps partial
sums in SIMD lanes. The result differs from the loop's in the last bits, as any reordered sum
does.

Which loops: a ``for`` over a ``range`` with no loop, branch, ``break`` or ``continue`` inside;
its body assignments and expression statements; one or more *accumulators* ``s = s + e``,
``s = s - e`` or ``s += e`` (each the only statement of the body that mentions s, s not in e),
where every binding of s elsewhere in the function is a float constant (``s = 0.0``), an
element of a float tape (``s = s_tape[k]``) or another such accumulation (so s is a float:
an integer count or an array stays as written), or, once, ``s = zero_entry(a, index)``
before the loop in its block with nothing in between binding a name it reads
(:mod:`codegen.invariant_accumulators`' local of ``a[i, 2]``, which the dialect outlines in a
second pass after that rewrite: the sum then starts from the same call and adds with ``+=``,
in place should ``a[index]`` be a row); every other name the body binds is a temporary of
the step (bound before it is read) that the function reads nowhere else without binding it
again first (the backward sweep recomputes ``diff = x[i, j] - means[c, j]`` before reading
it); the loop's index is mentioned elsewhere only by loops of its own. The names the body
reads become the function's parameters (arrays it writes into are written through them).

Two more things make the outlined loop vectorize. Its index gets ``j = index_at_least(j,
lo)`` (:mod:`codegen.loop_indices`) when its start is ``i + c`` or ``i - c`` for ``i`` the
index of an enclosing loop whose smallest value a constant gives, or a constant of 2 or more,
and ``lo`` is 0 or more: as a parameter, ``i`` tells LLVM nothing. And when the body reads or
writes a parameter as ``a[<expr of j>, c]`` with constant columns c, the loop stands twice,
under ``if a.shape[1] == m`` (m the largest c plus one, for each such array) and in the
``else``: in the first, LLVM knows the rows' stride, sees that one step's entries are not the
next step's and vectorizes the loop with interleaved loads and stores. Lennard-Jones' gradient
(500 particles in 3-D, a pair loop adding into ``pos_bar[j, 0..2]`` and into three locals of
``pos_bar[i, ...]``): 624 -> 218 us, its primal 167 -> 71 us (this machine: AMD EPYC, 2 vCPUs;
all three changes were needed: each alone left the loop scalar).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(g, u, n):
...     c_bar = 0.0
...     for i in range(1, n - 1):
...         t = g[i]
...         g[i] = 0.0
...         c_bar = c_bar + t * u[i]
...     return c_bar
... ''').body[0]
>>> sources, options = {}, {}
>>> outline_reductions(fn, {"f", "g", "u", "n", "c_bar", "i", "t"}, sources, options)
['sum_loop']
>>> print(unparse(fn.body[1]))
c_bar = c_bar + sum_loop(n, g, u)
>>> print(sources["sum_loop"].strip())
def sum_loop(n, g, u):
    total = 0.0
    for i in range(1, n - 1):
        t = g[i]
        g[i] = 0.0
        total = total + t * u[i]
    return total
>>> options
{'sum_loop': "fastmath={'reassoc'}"}
"""

from __future__ import annotations

import gast

from .emit import fresh_name, name_node, text_of
from .loop_indices import constant_int, range_parts, smallest_index, unseen_lowest_index

__all__ = ["float_tapes", "index_only_in_own_loops", "outline_reductions"]

REASSOCIATED = "fastmath={'reassoc'}"


def _named(node, context):
    """The names `node` uses in `context` (gast.Load: read, gast.Store: bound), in order."""
    return [n.id for n in gast.walk(node) if isinstance(n, gast.Name) and
            isinstance(n.ctx, context)]


def _loads(node):
    return _named(node, gast.Load)


def _stores(node):
    return _named(node, gast.Store)


def _accumulation(stmt):
    """(s, op, e) of ``s = s + e``, ``s = s - e`` or ``s += e``, or None."""
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Name) and \
            isinstance(stmt.op, (gast.Add, gast.Sub)):
        return stmt.target.id, stmt.op, stmt.value
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.BinOp) and \
            isinstance(stmt.value.op, (gast.Add, gast.Sub)) and \
            isinstance(stmt.value.left, gast.Name) and \
            stmt.value.left.id == stmt.targets[0].id:
        return stmt.targets[0].id, stmt.value.op, stmt.value.right
    return None


def float_tapes(fn):
    """{name: its binding} for names bound once, to ``np.empty(n, dtype=np.float64)`` or to a
    column ``m[:, j]`` of a matrix bound once to ``np.empty((n, k), dtype=np.float64)``
    (reverse mode's tapes of floats): an element of one is a float."""
    counts, vectors, matrices, columns = {}, {}, set(), {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
            counts[node.id] = counts.get(node.id, 0) + 1
    for node in gast.walk(fn):
        if not (isinstance(node, gast.Assign) and len(node.targets) == 1 and
                isinstance(node.targets[0], gast.Name)):
            continue
        target, value = node.targets[0].id, node.value
        if isinstance(value, gast.Call) and text_of(value.func) == "np.empty" and \
                len(value.args) == 1 and \
                [(k.arg, text_of(k.value)) for k in value.keywords] == \
                [("dtype", "np.float64")]:
            shape = value.args[0]
            if not isinstance(shape, gast.Tuple):
                vectors[target] = node
            elif len(shape.elts) == 2:
                matrices.add(target)
        elif isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name) and \
                isinstance(value.slice, gast.Tuple) and len(value.slice.elts) == 2 and \
                text_of(value.slice.elts[0]) == ":" and \
                isinstance(value.slice.elts[1], gast.Constant):
            columns[target] = node
    tapes = dict(vectors)
    tapes.update({t: node for t, node in columns.items()
                  if node.value.value.id in matrices and counts[node.value.value.id] == 1})
    return {t: node for t, node in tapes.items() if counts[t] == 1}


def _start_value(fn, s, loop, before):
    """The expression the outlined function's sum of `s` starts from: ``0.0`` when every
    binding of s outside `loop` is a float constant, an element of a float tape (the backward
    sweep's restore, `s = s_tape[k]`) or an accumulation; the ``zero_entry(a, index)`` when
    one such binding stands among `before` (the statements before the loop in its block) with
    nothing after it binding a name it reads (sum_invariant_updates' local of ``a[i, 2]``:
    0.0 for an element, a zero row otherwise); None for anything else."""
    inside = {id(n) for n in gast.walk(loop)}
    assigned = set()  # the names that are whole targets of an assignment
    found_constant = False
    zero_entries = []
    tapes = None
    for node in gast.walk(fn):
        if id(node) in inside or not isinstance(node, (gast.Assign, gast.AugAssign)):
            continue
        targets = node.targets if isinstance(node, gast.Assign) else [node.target]
        assigned |= {id(t) for t in targets}
        if not any(s in _stores(t) for t in targets):
            continue
        if isinstance(node, gast.Assign) and len(targets) == 1 and \
                isinstance(targets[0], gast.Name) and \
                isinstance(node.value, gast.Constant) and type(node.value.value) is float:
            found_constant = True
            continue
        if isinstance(node, gast.Assign) and len(targets) == 1 and \
                isinstance(targets[0], gast.Name) and _is_zero_entry(node.value):
            zero_entries.append(node)
            continue
        if isinstance(node, gast.Assign) and isinstance(node.value, gast.Subscript) and \
                isinstance(node.value.value, gast.Name) and \
                not isinstance(node.value.slice, (gast.Slice, gast.Tuple)):
            tapes = float_tapes(fn) if tapes is None else tapes
            if node.value.value.id in tapes:
                continue
        if _accumulation(node) is None:
            return None
    if any(isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store) and n.id == s and
           id(n) not in inside and id(n) not in assigned for n in gast.walk(fn)):
        return None  # a loop target, a tuple element, ...
    if not zero_entries:
        return gast.Constant(value=0.0, kind=None) if found_constant else None
    if len(zero_entries) != 1 or not any(stmt is zero_entries[0] for stmt in before):
        return None
    at = next(k for k, stmt in enumerate(before) if stmt is zero_entries[0])
    reads = set(_loads(zero_entries[0].value))
    if any(set(_stores(stmt)) & reads for stmt in before[at + 1:] + loop.body):
        return None
    return zero_entries[0].value


def _is_zero_entry(value):
    return isinstance(value, gast.Call) and isinstance(value.func, gast.Name) and \
        value.func.id == "zero_entry" and len(value.args) == 2 and not value.keywords


def _read_outside(fn, loop, names):
    """The names of `names` that `fn` reads outside `loop` where the value the loop left
    could be seen: a read preceded, in its own block or an enclosing one, by a binding of the
    name at that block's level with `loop` not in between sees that binding instead (the
    backward sweep recomputes ``diff = x[i, j] - means[c, j]`` before reading it)."""
    parents, positions = {}, {}
    for node in gast.walk(fn):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                for k, stmt in enumerate(block):
                    parents[id(stmt)] = node
                    positions[id(stmt)] = (block, k)
    inside = {id(n) for n in gast.walk(loop)}
    seen = set()
    for stmt_id, (block, k) in positions.items():
        stmt = block[k]
        if stmt_id in inside:
            continue
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            reads = _header_names(stmt)  # (its body's statements are positions of their own)
        else:
            reads = [n for n in gast.walk(stmt) if isinstance(n, gast.Name) and
                     isinstance(n.ctx, gast.Load)]
        for n in reads:
            if n.id in names and not _shadowed(n.id, stmt, positions, parents, inside):
                seen.add(n.id)
    return seen


def _header_names(stmt):
    """The names read by a compound statement's own header (its test or iterable)."""
    header = stmt.iter if isinstance(stmt, gast.For) else \
        stmt.test if isinstance(stmt, (gast.While, gast.If)) else None
    return [n for n in gast.walk(header) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load)] if header is not None else []


def _shadowed(name, stmt, positions, parents, inside):
    """Whether a binding ``name = ...`` precedes `stmt` at its level or an enclosing one,
    with no statement holding the outlined loop in between."""
    current = stmt
    while id(current) in positions:
        block, k = positions[id(current)]
        for earlier in reversed(block[:k]):
            if any(id(n) in inside for n in gast.walk(earlier)):
                return False  # the loop runs in between
            if isinstance(earlier, gast.Assign) and len(earlier.targets) == 1 and \
                    isinstance(earlier.targets[0], gast.Name) and earlier.targets[0].id == name:
                return True
        current = parents[id(current)]
        if isinstance(current, (gast.For, gast.While)) and \
                any(id(n) in inside for n in gast.walk(current)):
            return False  # a later step of a loop holding both sees the loop's last value
    return False


def index_only_in_own_loops(fn, loop, index):
    """Whether every mention of `index` outside `loop` is inside another loop over it."""
    inside = {id(n) for n in gast.walk(loop)}
    own = set()
    for node in gast.walk(fn):
        if isinstance(node, gast.For) and node is not loop and \
                isinstance(node.target, gast.Name) and node.target.id == index:
            own |= {id(n) for n in gast.walk(node)}
    return all(id(n) in inside or id(n) in own for n in gast.walk(fn)
               if isinstance(n, gast.Name) and n.id == index)


def _plan(fn, loop, locals_, before=()):
    """(accumulators [(s, op, e)], their start values (expressions), parameters) for an
    outlinable `loop` (`before`: the statements before it in its block), or None."""
    if not (isinstance(loop.target, gast.Name) and isinstance(loop.iter, gast.Call) and
            isinstance(loop.iter.func, gast.Name) and loop.iter.func.id == "range" and
            not loop.iter.keywords and not loop.orelse):
        return None
    body = loop.body
    if not all(isinstance(s, (gast.Assign, gast.AugAssign, gast.Expr)) for s in body):
        return None
    index = loop.target.id
    accumulators, temporaries, seen, read = [], set(), set(), set()
    for stmt in body:
        found = _accumulation(stmt)
        if found is not None and found[0] not in seen and \
                sum(found[0] in _loads(s) + _stores(s) for s in body) == 1 and \
                found[0] not in _loads(found[2]):
            accumulators.append(found)
            seen.add(found[0])
            read |= set(_loads(found[2]))
            continue
        reads = set(_loads(stmt))
        if reads & seen:
            return None
        read |= reads
        for t in _stores(stmt):
            if t in seen or t == index or (t not in temporaries and t in read):
                return None  # read before this step binds it: carried from the step before
            temporaries.add(t)
    if not accumulators:
        return None
    before = list(before)
    starts = [_start_value(fn, s, loop, before) for s, _, _ in accumulators]
    if None in starts:
        return None
    if _read_outside(fn, loop, temporaries) or \
            not index_only_in_own_loops(fn, loop, index):
        return None
    reads_before_bound = []
    for node in [loop.iter] + body:
        for n in _loads(node):
            if n in locals_ and n not in temporaries and n not in seen and n != index and \
                    n not in reads_before_bound:
                reads_before_bound.append(n)
    for start in starts:  # (the names a zero_entry start reads)
        for n in _loads(start):
            if n in locals_ and n not in reads_before_bound:
                reads_before_bound.append(n)
    return accumulators, starts, reads_before_bound


def _locals(fn):
    names = {a.id for a in fn.args.args}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)):
            names.add(node.id)
    return names


def _outline(loop, accumulators, starts, params, name, local, lowest=None):
    """The outlined function's text: the sums start from `starts`; the loop's index gets
    ``index_at_least`` when `lowest` (its smallest value, known from enclosing loops) is one
    LLVM cannot see; rows of a known length are a branch of their own (:func:`_row_lengths`)."""
    taken = set(local) | {s for s, _, _ in accumulators}
    totals = []
    for _ in accumulators:  # one new name each (a name taken already gets a suffix)
        totals.append(fresh_name("total", taken))
        taken.add(totals[-1])
    renamed = {s: t for (s, _, _), t in zip(accumulators, totals)}
    in_place = {s for (s, _, _), start in zip(accumulators, starts) if _is_zero_entry(start)}
    body = []
    if lowest is not None:
        body.append(f"{loop.target.id} = index_at_least({loop.target.id}, {lowest})")
    for stmt in loop.body:
        found = _accumulation(stmt)
        if found is not None and found[0] in renamed:
            t = renamed[found[0]]
            op = "+" if isinstance(found[1], gast.Add) else "-"
            if isinstance(stmt, gast.AugAssign) and found[0] in in_place:  # (a row's too)
                body.append(f"{t} {op}= {text_of(found[2])}")
            else:  # (built as a node: `t - (a - b)` keeps its parentheses)
                total = gast.BinOp(left=name_node(t), op=found[1], right=found[2])
                body.append(f"{t} = {text_of(total)}")
        else:
            body.append(text_of(stmt))
    header = [f"def {name}({', '.join(params)}):"]
    header += [f"    {t} = {text_of(start)}" for t, start in zip(totals, starts)]
    loop_lines = [f"for {loop.target.id} in {text_of(loop.iter)}:"] + \
        ["    " + line for line in body]
    lengths = _row_lengths(loop, params)
    if lengths:
        test = " and ".join(f"{a}.shape[1] == {m}" for a, m in lengths)
        loop_lines = [f"if {test}:"] + ["    " + line for line in loop_lines] + \
            ["else:"] + ["    " + line for line in loop_lines]
    returned = totals[0] if len(totals) == 1 else "(" + ", ".join(totals) + ")"
    return "\n".join(header + ["    " + line for line in loop_lines] +
                     [f"    return {returned}"]) + "\n"


def _row_lengths(loop, params):
    """[(a, m)]: the parameters `a` the loop reads or writes as ``a[<index expr>, c]``, ``c`` a
    constant column, with m the largest such c plus one (the row length the code suggests:
    ``pos[j, 0]``, ``pos[j, 1]``, ``pos[j, 2]`` -> 3). Under ``a.shape[1] == m`` LLVM knows the
    stride between rows, tells the rows of one step from the next and vectorizes the loop
    (Lennard-Jones' gradient: 624 -> 218 us); the loop for other shapes is the same code."""
    index = loop.target.id
    lengths = {}
    for stmt in loop.body:
        for node in gast.walk(stmt):
            if not (isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and
                    node.value.id in params and isinstance(node.slice, gast.Tuple) and
                    len(node.slice.elts) == 2):
                continue
            first, column = node.slice.elts
            if isinstance(column, gast.Constant) and type(column.value) is int and \
                    column.value >= 0 and index in _loads(first):
                a = node.value.id
                lengths[a] = max(lengths.get(a, 0), column.value + 1)
    return sorted(lengths.items())


def _call_site(accumulators, name, params, local):
    call = gast.Call(func=name_node(name), args=[name_node(p) for p in params], keywords=[])
    if len(accumulators) == 1:
        s = accumulators[0][0]
        return [gast.Assign(targets=[name_node(s, gast.Store())], value=gast.BinOp(
            left=name_node(s), op=gast.Add(), right=call), type_comment=None)]
    parts = [fresh_name(f"{s}_part", local) for s, _, _ in accumulators]
    for p in parts:
        local.add(p)
    out = [gast.Assign(targets=[gast.Tuple(elts=[name_node(p, gast.Store()) for p in parts],
                                            ctx=gast.Store())], value=call, type_comment=None)]
    for (s, _, _), p in zip(accumulators, parts):
        out.append(gast.Assign(targets=[name_node(s, gast.Store())], value=gast.BinOp(
            left=name_node(s), op=gast.Add(), right=name_node(p)), type_comment=None))
    return out


class _Outliner(gast.NodeTransformer):
    def __init__(self, fn, taken, sources, options):
        self.fn, self.taken, self.sources, self.options = fn, taken, sources, options
        self.locals = _locals(fn)
        self.written = []
        self.lowest = {}  # the index of each enclosing loop -> its smallest value, if known

    def _block(self, stmts):
        out = []
        for stmt in stmts:
            if isinstance(stmt, gast.For) and not any(
                    isinstance(n, (gast.For, gast.While, gast.If, gast.Break, gast.Continue,
                                   gast.Return, gast.Lambda, gast.FunctionDef))
                    for s in stmt.body for n in gast.walk(s)):
                plan = _plan(self.fn, stmt, self.locals, out)
                if plan is not None:
                    accumulators, starts, params = plan
                    name = fresh_name("sum_loop", self.taken)
                    self.taken.add(name)
                    self.sources[name] = _outline(
                        stmt, accumulators, starts, params, name, set(self.locals),
                        _hidden_lowest(stmt, self.lowest))
                    self.options[name] = REASSOCIATED
                    self.written.append(name)
                    out += _call_site(accumulators, name, params, self.locals)
                    continue
            out.append(self.visit(stmt))
        return out

    def visit_For(self, node):
        index = node.target.id if isinstance(node.target, gast.Name) else None
        saved = dict(self.lowest)
        lowest = smallest_index(node)
        if index is not None:
            self.lowest.pop(index, None)
            if lowest is not None and _bound_only_as_index(node, index):
                self.lowest[index] = lowest
        self.generic_visit(node)
        self.lowest = saved
        return node

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], gast.stmt):
                setattr(node, field, self._block(block))
        return node


def _bound_only_as_index(loop, index):
    """Whether the loop binds `index` only as its target and as ``index =
    index_at_least(index, ...)`` at the top of its body."""
    hints = {id(stmt.targets[0]) for stmt in loop.body[:1]
             if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
             isinstance(stmt.value, gast.Call) and isinstance(stmt.value.func, gast.Name) and
             stmt.value.func.id == "index_at_least"}
    return all(node is loop.target or id(node) in hints for node in gast.walk(loop)
               if isinstance(node, gast.Name) and node.id == index and
               isinstance(node.ctx, (gast.Store, gast.Del)))


def _hidden_lowest(loop, lowest):
    """The smallest index of a loop going up from ``i + c`` or ``i - c`` (i an enclosing
    loop's index of known smallest value, c a constant) or from a constant of 2 or more, when
    it is 0 or more (LLVM sees ``range(n)`` and ``range(1, n)`` itself, not these, and reads
    each ``x[j]`` with Numba's negative-index wraparound); else None."""
    parts = range_parts(loop)
    if parts is None or parts[2] != 1:
        return None
    start, value = parts[0], None
    if constant_int(start) is not None:
        return unseen_lowest_index(loop)
    if isinstance(start, gast.Name):
        value = lowest.get(start.id)
    elif isinstance(start, gast.BinOp) and isinstance(start.op, (gast.Add, gast.Sub)):
        left, right = start.left, start.right
        if isinstance(right, gast.Name) and isinstance(start.op, gast.Add):
            left, right = right, left  # (c + i)
        shift = constant_int(right)
        if isinstance(left, gast.Name) and shift is not None and left.id in lowest:
            value = lowest[left.id] + (shift if isinstance(start.op, gast.Add) else -shift)
    return value if value is not None and value >= 0 else None


def outline_reductions(fn, taken, sources, options):
    """Outline each qualifying reduction loop of `fn` (a gast FunctionDef, in place) into a
    function whose source goes into `sources` (name -> text) and whose extra jit options go
    into `options`; `taken` holds the module's names. Returns the new functions' names."""
    outliner = _Outliner(fn, taken, sources, options)
    fn.body = outliner._block(fn.body)
    return outliner.written

