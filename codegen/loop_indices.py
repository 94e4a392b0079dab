"""Tell LLVM how low a loop's index goes, so that the loop vectorizes.

Numba reads ``x[j]`` with a signed ``j`` as ``x[j + len(x)]`` when ``j`` is negative. LLVM
drops that wraparound, and then vectorizes the loop, only when it can prove ``j >= 0``; it
proves it for ``range(n)`` and ``range(1, n)`` but not for ``range(2, n)`` nor for a loop
running backwards (``range(n - 1, -1, -1)``, every backward sweep's order), and those loops run
one element at a time: ``y[j] = x[j] + x[j - 1]`` over 1000 elements, 500 times: 350 us from
``range(2, n)``, 44 us with the bound known; backwards 306 -> 57 us (numba-notes.md).

The dialect writes ``j = index_at_least(j, lo)`` at the top of such a loop's body, ``lo`` the
smallest index the range can produce (a constant): plain Python returns ``j``; under Numba
the helper is ``j`` with an ``llvm.assume(j >= lo)`` beside it. Only innermost loops with a
constant lowest index get it (2 or more going forwards, 0 or more going backwards): where the
start is a run-time value, telling LLVM more changed how it vectorized the Lennard-Jones double
loop's gathers, for the worse (138 -> 160 us), so those are left alone here. A loop outlined
into a function of its own (:mod:`codegen.reduction_loops`) gets the line for a start ``i + 1``
as well, ``i`` an enclosing loop's index: there, with the rows' stride known, it was one of the
three changes that vectorized Lennard-Jones' pair loop.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, y):
...     for j in range(x.shape[0] - 1, -1, -1):
...         y[j] = x[j] * 2.0
... ''').body[0]
>>> assume_loop_starts(fn)
True
>>> print(unparse(fn).strip())
def f(x, y):
    for j in range(x.shape[0] - 1, -1, -1):
        j = index_at_least(j, 0)
        y[j] = x[j] * 2.0
"""

from __future__ import annotations

import gast

from autodiff_ast.templates import assign, fill, name

INDEX_HELPERS = {"index_at_least": '''\
def index_at_least(j, lo):
    """`j`, an index its loop never takes below `lo` (plain Python: j itself)."""
    return j


@numba.extending.intrinsic
def assume_at_least(typingctx, j, lo):
    """`j`, with LLVM told that j >= lo (llvm.assume): it may then drop the negative-index
    wraparound of the array reads j indexes, and vectorize their loop."""
    def codegen(context, builder, signature, args):
        from llvmlite import ir
        bound = context.cast(builder, args[1], signature.args[1], signature.args[0])
        assume = builder.module.declare_intrinsic(
            "llvm.assume", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(1)]))
        builder.call(assume, [builder.icmp_signed(">=", args[0], bound)])
        return args[0]
    return j(j, lo), codegen


@numba.extending.overload(index_at_least, inline='always')
def index_at_least_numba(j, lo):
    """How Numba compiles index_at_least: j and the assumption for signed integers, j alone
    otherwise."""
    if isinstance(j, numba.types.Integer) and j.signed and \\
            isinstance(lo, numba.types.Integer) and lo.signed:
        return lambda j, lo: assume_at_least(j, lo)
    return lambda j, lo: j
'''}
INDEX_UNCOMPILED = frozenset({"index_at_least", "index_at_least_numba", "assume_at_least"})


def constant_int(node):
    """The value of an integer constant (``3``, ``-1``), else None."""
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        inner = constant_int(node.operand)
        return None if inner is None else -inner
    return None


def range_parts(loop):
    """(start, stop, step) of ``for j in range(...)``: the start and stop nodes (a 0 constant
    for ``range(n)``'s start) and the step, a nonzero integer constant; None for any other
    loop (a step written as a name, a starred argument, ...).

    >>> start, stop, step = range_parts(gast.parse("for j in range(n, 0, -1): pass").body[0])
    >>> (start.id, stop.value, step)
    ('n', 0, -1)
    """
    call = loop.iter
    if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Name) and
            call.func.id == "range" and not call.keywords and 1 <= len(call.args) <= 3 and
            not any(isinstance(a, gast.Starred) for a in call.args)):
        return None
    if len(call.args) == 1:
        return gast.Constant(value=0, kind=None), call.args[0], 1
    step = constant_int(call.args[2]) if len(call.args) == 3 else 1
    return (call.args[0], call.args[1], step) if step else None


def smallest_index(loop):
    """A lower bound of the indices a ``range`` loop takes, when a constant gives it: its
    start going up (``range(n)``: 0, ``range(2, n)``: 2), one above its stop going down
    (``range(n - 1, -1, -1)``: 0); else None.

    >>> [smallest_index(gast.parse(f"for j in {r}: pass").body[0])
    ...  for r in ("range(n)", "range(2, n)", "range(n - 1, -1, -1)", "range(i, n)")]
    [0, 2, 0, None]
    """
    parts = range_parts(loop)
    if parts is None:
        return None
    start, stop, step = parts
    bound = constant_int(start if step > 0 else stop)
    return None if bound is None else bound if step > 0 else bound + 1


def unseen_lowest_index(loop):
    """The smallest index `loop` (a ``for`` over ``range``) takes, when it is a constant that
    LLVM would not otherwise know (2 or more going up: LLVM sees a start of 0 or 1) and that
    proves the index non-negative; else None."""
    parts, lowest = range_parts(loop), smallest_index(loop)
    if lowest is None:
        return None
    return lowest if lowest >= (2 if parts[2] > 0 else 0) else None


def _innermost(loop):
    return not any(isinstance(node, (gast.For, gast.While))
                   for stmt in loop.body for node in gast.walk(stmt))


def assume_loop_starts(fn):
    """Give each innermost ``range`` loop of `fn` whose lowest index is a constant LLVM cannot
    see its ``index_at_least`` line; whether any loop got one."""
    changed = False
    for node in gast.walk(fn):
        if not (isinstance(node, gast.For) and isinstance(node.target, gast.Name) and
                _innermost(node)):
            continue
        lo = unseen_lowest_index(node)
        if lo is None:
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, gast.Assign) and isinstance(first.value, gast.Call) and \
                isinstance(first.value.func, gast.Name) and \
                first.value.func.id == "index_at_least":
            continue
        index = node.target.id
        line = assign(index, fill("index_at_least(j, lo)", j=name(index), lo=lo))
        node.body.insert(0, line)
        changed = True
    return changed
