"""Writes into arrays whose entries nothing reads: dropped from generated code.

The gradient of ::

    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sin(x[i]) * y[i] + x[i] * x[i]
    return np.sum(out)

needs ``out``'s shape (the adjoint of ``np.sum(out)`` is ``np.ones_like(out)``) but none of
its entries: the forward loop that fills it is work the gradient throws away (half the time
of ``jit(grad(f))`` here: the sines are as dear as the cosines the adjoint needs). A person
writing the gradient by hand would not compute them; neither do we. The same goes for an
adjoint zeroed entry by entry after its last use (``y_bar[j] = 0.0`` in a loop after the
last read of ``y_bar``).

An array qualifies when, in the block tidied (a whole generated function, or a block whose
later readers are named in ``keep``):

- every binding of its name is a fresh allocation (``np.zeros(...)``, ``np.empty_like(x)``,
  ``np.copy(x)``, ``x.copy()``, arithmetic such as ``2.0 * y``), so no other name sees the
  same memory;
- every other appearance is an element or slice write (``a[i] = e``, ``a[i] += e``) or a
  question about its shape (``a.shape``, ``a.ndim``, ``a.size``, ``a.dtype``, ``len(a)``,
  ``np.zeros_like(a)`` and the other ``*_like`` allocations);
- the writes change no list (no tape is pushed or popped in them).

Its writes are then dropped; :func:`autodiff_ast.tidy.tidy_block` drops what they alone read
(and the allocation itself when not even its shape is asked for). One consequence: a write
the function would have failed on (an index out of range) no longer raises in the derivative
code, as the value is never computed there.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> block = gast.parse('''
... out = np.zeros(n)
... for i in range(n):
...     out[i] = np.sin(x[i])
... out_bar = np.ones_like(out)
... ''').body
>>> block, dropped = drop_unread_arrays(block, keep={"out_bar"})
>>> dropped
['out']
>>> print("\\n".join(unparse(s) for s in block))
out = np.zeros(n)
for i in range(n):
    pass
out_bar = np.ones_like(out)
"""

from __future__ import annotations

import gast

from .tidy import _names

_ALLOCATING = {"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like",
               "full_like", "copy", "array", "arange", "linspace", "eye", "identity"}
_SHAPE_OF = {"zeros_like", "empty_like", "ones_like", "full_like"}
_SHAPE_ATTRS = {"shape", "ndim", "size", "dtype"}
_CONTROL = (gast.For, gast.While, gast.If)


def _numpy_call(node, names):
    """Whether `node` is ``np.<name>(...)`` for one of `names`."""
    return isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
        isinstance(node.func.value, gast.Name) and node.func.value.id in ("np", "numpy") and \
        node.func.attr in names


def _allocation(value):
    """Whether `value` makes a new array no other name refers to (arithmetic always does)."""
    if _numpy_call(value, _ALLOCATING) or isinstance(value, (gast.BinOp, gast.UnaryOp)):
        return True
    return isinstance(value, gast.Call) and isinstance(value.func, gast.Attribute) and \
        value.func.attr == "copy" and not value.args and not value.keywords


def _changes_a_list(node):
    return any(isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and
               n.func.attr in ("pop", "append", "extend", "insert") for n in gast.walk(node))


def _written_array(stmt):
    """``a`` for ``a[...] = e`` or ``a[...] op= e`` (one target, a name's subscript)."""
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
    elif isinstance(stmt, gast.AugAssign):
        target = stmt.target
    else:
        return None
    if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name):
        return target.value.id
    return None


class _Survey:
    """What each name's appearances in a block say about it."""

    def __init__(self):
        self.allocated = set()   # bound by a fresh allocation somewhere
        self.rebound = set()     # bound some other way (alias, unpacking, loop variable...)
        self.read = set()        # an entry or the array itself read or passed on
        self.written = {}        # name -> [(statements list, statement)] of its writes
        self.impure = set()      # a write that pushes or pops a tape

    def block(self, stmts):
        for stmt in stmts:
            self.statement(stmts, stmt)

    def statement(self, owner, stmt):
        if isinstance(stmt, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
            self.expression(stmt)  # (whatever a nested definition names counts as read)
            return
        array = _written_array(stmt)
        if array is not None:
            self.written.setdefault(array, []).append((owner, stmt))
            if _changes_a_list(stmt):
                self.impure.add(array)
            target = stmt.targets[0] if isinstance(stmt, gast.Assign) else stmt.target
            self.expression(target.slice)
            self.expression(stmt.value)
            return
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and _allocation(stmt.value):
            self.allocated.add(stmt.targets[0].id)
            self.expression(stmt.value)
            return
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and isinstance(stmt, (_CONTROL, gast.Try, gast.With)):
                self.block(inner)
        for handler in getattr(stmt, "handlers", None) or []:
            self.block(handler.body)
        for field in stmt._fields:
            if field in ("body", "orelse", "finalbody", "handlers"):
                continue
            value = getattr(stmt, field, None)
            for node in value if isinstance(value, list) else [value]:
                if isinstance(node, gast.AST):
                    self.expression(node)

    def expression(self, node):
        shape_only = set()
        for inner in gast.walk(node):
            if isinstance(inner, gast.Attribute) and inner.attr in _SHAPE_ATTRS and \
                    isinstance(inner.value, gast.Name):
                shape_only.add(id(inner.value))
            elif _numpy_call(inner, _SHAPE_OF) and inner.args and \
                    isinstance(inner.args[0], gast.Name):
                shape_only.add(id(inner.args[0]))
            elif isinstance(inner, gast.Call) and isinstance(inner.func, gast.Name) and \
                    inner.func.id == "len" and len(inner.args) == 1 and \
                    isinstance(inner.args[0], gast.Name):
                shape_only.add(id(inner.args[0]))
        for inner in gast.walk(node):
            if not isinstance(inner, gast.Name) or id(inner) in shape_only:
                continue
            if isinstance(inner.ctx, gast.Load):
                self.read.add(inner.id)
            else:
                self.rebound.add(inner.id)


def drop_statements(stmts, unwanted):
    """`stmts` without the statements `unwanted(stmt)` picks, at any depth of loops and
    branches; an emptied body keeps a ``pass``. Bodies are changed in place."""
    out = []
    for stmt in stmts:
        if unwanted(stmt):
            continue
        for field in ("body", "orelse"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(stmt, _CONTROL):
                kept = drop_statements(inner, unwanted)
                setattr(stmt, field, kept or ([gast.Pass()] if field == "body" else []))
        out.append(stmt)
    return out


def _loads(node):
    return set(_names(node, gast.Load))


def _only_writes(stmt, arrays):
    """Whether `stmt` (a loop or branch) does nothing but write entries of `arrays` from
    values that read none of them and change no list."""
    header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
    if _changes_a_list(header) or _loads(header) & arrays:
        return False
    for inner in stmt.body + stmt.orelse:
        if isinstance(inner, (gast.For, gast.If)):
            if not _only_writes(inner, arrays):
                return False
            continue
        if isinstance(inner, gast.Pass):
            continue
        array = _written_array(inner)
        if array not in arrays or _changes_a_list(inner) or _loads(inner) - {array} & arrays \
                or isinstance(inner, gast.AugAssign):
            return False
        target = inner.targets[0]
        if array in _loads(target.slice) | _loads(inner.value):
            return False
    return True


def drop_unread_arrays(stmts, keep=()):
    """`stmts` without the writes into arrays whose entries nothing reads, and the names of
    those arrays (see the module docstring for when an array qualifies). Statements holding
    the writes are changed in place.

    Besides arrays never read at all, a loop of `stmts` that only writes entries of arrays
    that no later statement reads goes whole (an adjoint zeroed after its last use)."""
    survey = _Survey()
    survey.block(stmts)
    fresh = {name for name in survey.written
             if name in survey.allocated and name not in survey.rebound and
             name not in survey.impure and name not in keep}
    unread = sorted(name for name in fresh if name not in survey.read)
    doomed = {id(stmt) for name in unread for _, stmt in survey.written[name]}
    later = set(keep)
    for stmt in reversed(stmts):
        targets = {n.id for n in gast.walk(stmt) if isinstance(n, gast.Name) and
                   isinstance(n.ctx, gast.Store)}  # (a loop's index, read after it, stays)
        if isinstance(stmt, gast.For) and id(stmt) not in doomed and \
                not targets & later and _only_writes(stmt, fresh - later):
            doomed.add(id(stmt))
            unread += sorted({_written_array(s) for s in gast.walk(stmt)
                              if isinstance(s, gast.Assign)} - set(unread))
            continue
        later |= _loads(stmt)
    if not doomed:
        return stmts, []
    return drop_statements(stmts, lambda stmt: id(stmt) in doomed), unread


# Index helpers of scalarized code whose value, when they return, is their second argument
# (rules/structural.py): ``store_index(m, 1, 2)`` is 1 or raises.
_CONSTANT_INDEX_HELPERS = {"store_index", "slice_index"}


def _zero(node):
    return isinstance(node, gast.Constant) and type(node.value) in (int, float) and \
        node.value == 0 and not isinstance(node.value, bool)


def _index_parts(target):
    index = target.slice
    return list(index.elts) if isinstance(index, gast.Tuple) else [index]


def _constant_of(node, constants):
    """The integer `node` is known to hold, else None."""
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, gast.Name):
        return constants.get(node.id)
    return None


def _distinct(parts, other, constants):
    """Whether two indices of one array provably name different elements: at some position
    both are known integers that differ."""
    if len(parts) != len(other):
        return False
    for a, b in zip(parts, other):
        x, y = _constant_of(a, constants), _constant_of(b, constants)
        if x is not None and y is not None and x != y:
            return True
    return False


def _bindings(stmts):
    """name -> the values assigned to it anywhere in `stmts` (None for a binding that is no
    plain ``name = value``: a loop variable, an unpacking, an augmented assignment)."""
    out, plain = {}, set()
    for node in (n for s in stmts for n in gast.walk(s)):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name):
            out.setdefault(node.targets[0].id, []).append(node.value)
            plain.add(id(node.targets[0]))
            continue
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store) and \
                id(node) not in plain:
            out.setdefault(node.id, []).append(None)
    return out


def _known_constants(bindings):
    """Names bound only to ``store_index(m, c, n)`` / ``slice_index(m, c, stop)`` with the same
    integer c (the value they hold whenever the code after them runs)."""
    out = {}
    for name, values in bindings.items():
        found = set()
        for value in values:
            if isinstance(value, gast.Call) and isinstance(value.func, gast.Name) and \
                    value.func.id in _CONSTANT_INDEX_HELPERS and len(value.args) >= 2 and \
                    isinstance(value.args[1], gast.Constant) and type(value.args[1].value) is int:
                found.add(value.args[1].value)
            else:
                found.add(None)
        if len(found) == 1 and None not in found:
            out[name] = found.pop()
    return out


def _mentions(node, array):
    """Every appearance of name `array` in `node`: (its Subscript parent or None, the Name)."""
    parents = {}
    for inner in gast.walk(node):
        if isinstance(inner, gast.Subscript) and isinstance(inner.value, gast.Name):
            parents[id(inner.value)] = inner
    return [(parents.get(id(n)), n) for n in gast.walk(node)
            if isinstance(n, gast.Name) and n.id == array]


def _row_private(loop, array):
    """Whether every appearance of `array` in `loop`'s body is an element access whose first
    index is the loop's variable, which the body never rebinds: steps touch disjoint rows."""
    index = loop.target.id
    if any(isinstance(n, gast.Name) and n.id == index and isinstance(n.ctx, gast.Store)
           for s in loop.body for n in gast.walk(s)):
        return False
    for stmt in loop.body:
        for parent, _ in _mentions(stmt, array):
            if parent is None:
                return False
            first = _index_parts(parent)[0]
            if not (isinstance(first, gast.Name) and first.id == index):
                return False
    return True


def _aliases(before, array, sources):
    """(name, its bindings) for each name other than `array` bound in `before` to a value
    that reads `array`, one of `sources`, or another such name: what may share memory."""
    watched, found = set(sources) | {array}, {}
    assigns = [n for s in before for n in gast.walk(s) if isinstance(n, gast.Assign)]
    changed = True
    while changed:  # (bindings inside earlier loops and branches count too)
        changed = False
        for stmt in assigns:
            if _allocation(stmt.value):
                continue  # (a fresh array shares no memory)
            targets = [n.id for t in stmt.targets for n in gast.walk(t)
                       if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store)]
            survey = _Survey()
            survey.expression(stmt.value)
            if not survey.read & watched:
                continue
            for name in targets:
                if name == array:
                    continue
                found.setdefault(name, [])
                if stmt not in found[name]:
                    found[name].append(stmt)
                if name not in watched:
                    watched.add(name)
                    changed = True
    return sorted(found.items())


def _base_rows(value):
    """(base name, lower, upper) when `value` is ``base[lower:upper]``, perhaps inside
    ``np.ascontiguousarray(...)`` and ``.reshape(...)`` (a missing bound is None)."""
    while True:
        if isinstance(value, gast.Call) and isinstance(value.func, gast.Attribute) and \
                value.func.attr == "reshape":
            value = value.func.value
        elif _numpy_call(value, {"ascontiguousarray"}) and len(value.args) == 1:
            value = value.args[0]
        else:
            break
    if isinstance(value, gast.Subscript) and isinstance(value.value, gast.Name) and \
            isinstance(value.slice, gast.Slice) and value.slice.step is None:
        return value.value.id, value.slice.lower, value.slice.upper
    return None


def _self_copy(stmt):
    """Whether `stmt` (an assignment) is ``a = a.copy()`` (a private copy: it can only
    separate memory)."""
    value = stmt.value
    return len(stmt.targets) == 1 and isinstance(stmt.targets[0], gast.Name) and \
        isinstance(value, gast.Call) and isinstance(value.func, gast.Attribute) and \
        value.func.attr == "copy" and not value.args and not value.keywords and \
        isinstance(value.func.value, gast.Name) and value.func.value.id == stmt.targets[0].id


def _disjoint_views(binders, other_binders, bindings):
    """Whether the array bound by `binders` and the name bound by `other_binders` (each bound
    once, to rows of one base name) are rows ``base[:a]`` and ``base[a:...]`` (or the other way
    round), which share no element whatever `a` holds."""
    binders = [b for b in binders if not _self_copy(b)]
    other_binders = [b for b in other_binders if not _self_copy(b)]
    if len(binders) != 1 or len(other_binders) != 1:
        return False
    one, two = _base_rows(binders[0].value), _base_rows(other_binders[0].value)
    if one is None or two is None or one[0] != two[0] or len(bindings.get(one[0], [])) > 1:
        return False
    if any(len(bindings.get(n.id, [])) > 1 for bound in (one, two) for part in bound[1:]
           if part is not None for n in gast.walk(part) if isinstance(n, gast.Name)):
        return False

    def same(a, b):
        return a is not None and b is not None and gast.dump(a) == gast.dump(b)
    return same(one[2], two[1]) or same(two[2], one[1])


def drop_dead_zeroing(stmts, keep=()):
    """`stmts` without the zeroing writes ``a[i, c] = 0.0`` that nothing can read, and
    whether any went.

    Reverse mode zeroes each entry of an adjoint it has taken (``g = a_bar[i, 1];
    a_bar[i, 1] = 0.0``) so that an earlier write of the same entry gets nothing. In a loop
    over ``i`` of `stmts` (a block at the top of a function) the zeroing is dead when:

    - the loop's body names the array only as ``a[i, ...]`` with the loop's own variable
      first (never rebound in it), so no other step touches the entry;
    - no later read of the array in the same step may be of that entry (each later read
      differs in a known integer index: a constant, or ``store_index(m, c, n)`` /
      ``slice_index(m, c, stop)``, whose value is c);
    - the array is bound once, before the loop, and neither it nor an array its binding
      reads (``a_bar = out_bar[k:]`` reads ``out_bar``; shapes aside) is read after the loop
      or named in `keep`;
    - no other name that may share its memory (bound from it, from those arrays, or from
      such a name) is read in the loop, after it or kept, unless it is provably other rows
      of the same array (``out_bar[:k]`` beside ``out_bar[k:...]``).

    Without its writes, a view of a caller's array needs no private copy
    (codegen/param_writes.py) either: the bundle adjustment gradient zeroed two adjoints
    taken from the output's cotangent, copied for that, in its loop over observations.

    >>> from autodiff_ast.templates import unparse
    >>> block = gast.parse('''
    ... g_bar = out_bar[:n]
    ... for i in range(n):
    ...     s1 = store_index(m, 1, 2)
    ...     s0 = store_index(m, 0, 2)
    ...     b = g_bar[i, s1]
    ...     g_bar[i, s1] = 0.0
    ...     a = g_bar[i, s0]
    ...     g_bar[i, s0] = 0.0
    ...     x_bar[i] += a * b
    ... ''').body
    >>> block, changed = drop_dead_zeroing(block, keep={"x_bar"})
    >>> print("\\n".join(unparse(s) for s in block[1].body[2:]))
    b = g_bar[i, s1]
    a = g_bar[i, s0]
    x_bar[i] += a * b
    """
    keep = set(keep)
    bindings = None
    doomed = set()
    for position, loop in enumerate(stmts):
        if not (isinstance(loop, gast.For) and isinstance(loop.target, gast.Name) and
                isinstance(loop.iter, gast.Call) and isinstance(loop.iter.func, gast.Name) and
                loop.iter.func.id == "range"):
            continue
        zeroing = {}
        for k, stmt in enumerate(loop.body):
            array = _written_array(stmt)
            if array is not None and isinstance(stmt, gast.Assign) and _zero(stmt.value):
                zeroing.setdefault(array, []).append(k)
        if not zeroing:
            continue
        if bindings is None:
            bindings = _bindings(stmts)
            constants = _known_constants(bindings)
        later = set()
        for stmt in stmts[position + 1:]:
            later |= _loads(stmt)
        for array, places in zeroing.items():
            values = bindings.get(array, [])
            binders = [s for s in stmts[:position] if isinstance(s, gast.Assign) and
                       len(s.targets) == 1 and isinstance(s.targets[0], gast.Name) and
                       s.targets[0].id == array]
            if not binders or len(values) != len(binders) or array in keep or array in later:
                continue
            survey = _Survey()
            for binder in binders:
                survey.expression(binder.value)
            sources = survey.read - {array}
            if sources & (keep | later) or any(_loads(s) & sources for s in loop.body) or \
                    not _row_private(loop, array):
                continue
            seen = keep | later | set().union(*(_loads(s) for s in loop.body))
            if any(name in seen and not _disjoint_views(binders, values_of, bindings)
                   for name, values_of in _aliases(stmts[:position], array, sources)):
                continue
            for k in places:
                parts = _index_parts(loop.body[k].targets[0])
                reads = [parent for s in loop.body[k + 1:] for parent, n in _mentions(s, array)
                         if isinstance(n.ctx, gast.Load) and not _is_store_target(s, parent)]
                if all(_distinct(parts, _index_parts(r), constants) for r in reads):
                    doomed.add(id(loop.body[k]))
    if not doomed:
        return stmts, False
    stmts = drop_statements(stmts, lambda stmt: id(stmt) in doomed)
    return _drop_unneeded_copies(stmts, keep), True


def _drop_unneeded_copies(stmts, keep):
    """`stmts` without the private copies ``a = a.copy()`` (at the top of the block) after
    which nothing writes into `a` or the arrays it was taken from, nor passes them whole to
    a call, nor keeps them (`keep`): reading the copy is reading the original."""
    doomed = set()
    for position, stmt in enumerate(stmts):
        if not (isinstance(stmt, gast.Assign) and _self_copy(stmt)):
            continue
        array = stmt.targets[0].id
        survey = _Survey()
        for binder in stmts[:position]:
            if isinstance(binder, gast.Assign) and any(
                    isinstance(t, gast.Name) and t.id == array for t in binder.targets):
                survey.expression(binder.value)
        watched = (survey.read - {array}) | {array}
        if watched & set(keep) or not all(_only_read(s, watched) for s in stmts[position + 1:]):
            continue
        doomed.add(id(stmt))
    return [s for s in stmts if id(s) not in doomed]


def _only_read(stmt, arrays):
    """Whether `stmt` mentions `arrays` only to read their entries or shapes: no write into
    them, no rebinding, no passing one whole (to a call, a tuple, another name)."""
    shape_reads = {id(n.value) for n in gast.walk(stmt)
                   if isinstance(n, gast.Attribute) and n.attr in _SHAPE_ATTRS}
    loads = {}
    for node in gast.walk(stmt):
        if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name):
            loads[id(node.value)] = node
    for node in gast.walk(stmt):
        if not (isinstance(node, gast.Name) and node.id in arrays):
            continue
        if id(node) in shape_reads:
            continue
        subscript = loads.get(id(node))
        if subscript is None or not isinstance(subscript.ctx, gast.Load):
            return False
    return not any(isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Subscript) and
                   isinstance(n.target.value, gast.Name) and n.target.value.id in arrays
                   for n in gast.walk(stmt))


def _is_store_target(stmt, subscript):
    """Whether `subscript` is what plain assignment `stmt` stores into (not a read)."""
    return isinstance(stmt, gast.Assign) and any(t is subscript for t in stmt.targets)
