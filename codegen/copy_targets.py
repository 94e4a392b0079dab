"""A copy whose middle a loop overwrites at once: only the entries outside it are copied.

An explicit stencil step, as users write it and as reverse mode keeps it in its forward
sweep, copies the state and then overwrites every inner entry::

    un = np.copy(u)
    for i in range(1, n - 1):
        un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])

The copy of the entries 1..n-2 is never read. :func:`copy_only_outside` writes::

    un = copy_outside(u, 1, n - 1)
    for i in range(1, n - 1):
        un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])

In plain Python ``copy_outside`` is ``np.copy``. Under Numba, for a vector, it makes a new
C-order vector of the same dtype and copies only the entries before ``lo`` and from ``hi``
on (all of them when ``0 <= lo <= hi <= len`` does not hold); any other array is copied
whole. The gradient's forward sweep keeps each step's state in a row of a tape (``un =
u_tape[_step]`` then ``un[:] = u``, reverse.py's ``_fresh_alias``); that copy becomes
``copy_outside_into(un, u, 1, n - 1)``, which under Numba copies the same entries when the two
vectors have one length and their memory does not overlap (or is the same), and does
``un[:] = u`` otherwise. Measured on the 1-D heat equation, 1,000 points x 500 steps (CPU
time, generated modules timed in one process): the primal 135 -> 115 us; the gradient 669-686
-> 575-585 us with the rows of a tape.

When: ``X = np.copy(Y)``, ``X = Y.copy()`` or ``X[:] = Y`` (Y a name other than X); then
statements that do not mention X and bind no name the loop's bounds read; then ``for i in
range(lo, hi)`` (step 1, ``lo`` a non-negative integer written out, the bounds mentioning
neither X nor Y) whose body has ``X[i] = value`` as a statement of its own (not in a branch),
X nowhere else in the body (so nothing reads an entry before the loop writes it), ``i`` not
bound in it, and no ``break``, ``continue`` or ``return``. Every entry ``lo..hi-1`` is then
written before anything can read it.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(u, c, n):
...     un = u.copy()
...     for i in range(1, n - 1):
...         left = u[i - 1]
...         un[i] = u[i] + c * (left - 2.0 * u[i] + u[i + 1])
...     return un
... ''').body[0]
>>> copy_only_outside(fn)
True
>>> print(unparse(fn.body[0]))
un = copy_outside(u, 1, n - 1)
"""

from __future__ import annotations

import copy

import gast

from .emit import (
    call_node,
    is_entry,
    mentions,
    name_node,
    names_bound,
    range_bounds,
    statement_blocks,
)
from .param_writes import dotted_name

__all__ = ["copy_only_outside", "COPY_HELPERS", "COPY_UNCOMPILED"]


def copy_only_outside(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns whether any copy was rewritten."""
    changed = False
    for block in statement_blocks(fn):
        for k, stmt in enumerate(block):
            found = _copied(stmt) or _copied_into(stmt)
            if found is None:
                continue
            target, source = found
            bounds = _overwriting_loop_after(block, k, target, source)
            if bounds is None:
                continue
            bounds = [copy.deepcopy(b) for b in bounds]
            if isinstance(stmt.targets[0], gast.Name):
                stmt.value = call_node("copy_outside", [name_node(source)] + bounds)
            else:
                block[k] = gast.Expr(value=call_node("copy_outside_into", [
                    name_node(target), name_node(source)] + bounds))
            changed = True
    return changed


def _copied(stmt):
    """(X, Y) of ``X = np.copy(Y)`` or ``X = Y.copy()`` (two different names), or None."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.Call) and
            not stmt.value.keywords):
        return None
    call = stmt.value
    if dotted_name(call.func) == "np.copy" and len(call.args) == 1:
        source = call.args[0]
    elif isinstance(call.func, gast.Attribute) and call.func.attr == "copy" and not call.args:
        source = call.func.value
    else:
        return None
    target = stmt.targets[0].id
    if not isinstance(source, gast.Name) or source.id == target:
        return None
    return target, source.id


def _copied_into(stmt):
    """(X, Y) of ``X[:] = Y`` (two different names), or None."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Subscript) and
            isinstance(stmt.targets[0].value, gast.Name) and
            isinstance(stmt.value, gast.Name)):
        return None
    whole = stmt.targets[0].slice
    if not (isinstance(whole, gast.Slice) and whole.lower is None and whole.upper is None and
            whole.step is None) or stmt.targets[0].value.id == stmt.value.id:
        return None
    return stmt.targets[0].value.id, stmt.value.id



def _overwriting_loop_after(block, k, target, source):
    """[lo, hi] of the loop after block[k] that writes every entry of `target` in its range
    before anything reads one, or None."""
    for m in range(k + 1, len(block)):
        stmt = block[m]
        if isinstance(stmt, gast.For) and mentions(stmt, target):
            bounds = _overwritten_range(stmt, target)
            if bounds is None:
                return None
            names = {n.id for b in bounds for n in gast.walk(b) if isinstance(n, gast.Name)}
            if names & (names_bound(block[k:m]) | {target, source}):
                return None  # (the bounds must mean at the copy what they mean at the loop)
            return bounds
        if mentions(stmt, target):
            return None
    return None


def _overwritten_range(loop, target):
    """[lo, hi] when `loop` is ``for i in range(lo, hi)`` (lo a non-negative integer written
    out) with ``target[i] = value`` directly in its body and `target` nowhere else in it."""
    bounds = range_bounds(loop)
    if bounds is None or loop.orelse or not isinstance(loop.target, gast.Name):
        return None
    lo, hi = bounds
    if not (isinstance(lo, gast.Constant) and type(lo.value) is int and lo.value >= 0):
        return None
    i = loop.target.id
    if i in names_bound(loop.body) or any(
            isinstance(n, (gast.Break, gast.Continue, gast.Return, gast.FunctionDef,
                           gast.Lambda)) for stmt in loop.body for n in gast.walk(stmt)):
        return None
    writes = [stmt for stmt in loop.body if isinstance(stmt, gast.Assign) and
              len(stmt.targets) == 1 and is_entry(stmt.targets[0], target, i) and
              not mentions(stmt.value, target)]
    mentioning = [stmt for stmt in loop.body if mentions(stmt, target)]
    if len(writes) != 1 or mentioning != writes:
        return None
    return [lo, hi]



#: The helper (plain form and Numba overload), written into a module that calls it.
COPY_HELPERS = {"copy_outside": '''\
def copy_outside(a, lo, hi):
    """np.copy(a), whose entries lo..hi-1 the caller writes before reading them."""
    return np.copy(a)


@numba.extending.overload(copy_outside, jit_options={'error_model': 'numpy'})
def copy_outside_numba(a, lo, hi):
    """How Numba compiles copy_outside: for a vector, a new C-order vector filled by
    copy_outside_into (entries lo..hi-1 left unset); np.copy otherwise."""
    if not (isinstance(a, numba.types.Array) and a.ndim == 1):
        return lambda a, lo, hi: np.copy(a)

    def around(a, lo, hi):
        out = np.empty(a.shape[0], dtype=a.dtype)
        copy_outside_into(out, a, lo, hi)
        return out
    return around
''', "copy_outside_into": '''\
def copy_outside_into(a, b, lo, hi):
    """a[:] = b, where the caller writes a's entries lo..hi-1 before reading them."""
    a[:] = b


@numba.extending.overload(copy_outside_into, jit_options={'error_model': 'numpy'})
def copy_outside_into_numba(a, b, lo, hi):
    """How Numba compiles copy_outside_into, for two vectors: b's entries before lo and
    from hi on copied one by one and the others left (the caller's loop writes each first);
    every entry when the bounds are odd, when b has one entry (broadcast) or when the two
    overlap in memory without being the same entries (then from a copy of b, as NumPy
    does). Element loops, not a slice assignment, whose broadcast checks took Numba 3 s to
    compile. a[:] = b for anything but two vectors."""
    if not (isinstance(a, numba.types.Array) and a.ndim == 1 and
            isinstance(b, numba.types.Array) and b.ndim == 1):
        def whole(a, b, lo, hi):
            a[:] = b
        return whole

    def around(a, b, lo, hi):
        n, m = a.shape[0], b.shape[0]
        if m != n and m != 1:
            raise ValueError("could not broadcast input array into the copy's shape")
        if n == 0:
            return
        a_low = a.ctypes.data + min(0, (n - 1) * a.strides[0])
        a_high = a.ctypes.data + max(0, (n - 1) * a.strides[0]) + a.itemsize
        b_low = b.ctypes.data + min(0, (m - 1) * b.strides[0])
        b_high = b.ctypes.data + max(0, (m - 1) * b.strides[0]) + b.itemsize
        same = a.ctypes.data == b.ctypes.data and a.strides[0] == b.strides[0] and m == n
        if not (a_high <= b_low or b_high <= a_low or same):
            kept = b.copy()
            for k in range(n):
                a[k] = kept[k if m == n else 0]
            return
        if m != n:
            first = b[0]
            for k in range(n):
                a[k] = first
            return
        if not 0 <= lo <= hi <= n:
            lo, hi = n, n
        for k in range(lo):
            a[k] = b[k]
        for k in range(hi, n):
            a[k] = b[k]
    return around
'''}
COPY_UNCOMPILED = frozenset({"copy_outside", "copy_outside_numba", "copy_outside_into",
                             "copy_outside_into_numba"})
