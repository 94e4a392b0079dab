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
