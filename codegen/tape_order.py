"""A number a loop tapes for the backward sweep: stored after it is computed, not before it
is overwritten, so that the forward loop has no value carried from one step to the next.

Reverse mode keeps a number a loop rebinds by pushing its old value before the new one is
computed, and restoring it after the backward step has used the new one; the log-sum-exp of
a mixture's log-likelihood, as generated::

    for c in range(k):                      # forward
        exp_6_tape[i * k + c] = exp_6       # the value of the step before
        exp_6 = np.exp(terms[c] - top)
        s = s + exp_6
    ...
    for c in range(k - 1, -1, -1):          # backward
        sub_6_bar = s_bar * exp_6           # this step's value
        exp_6 = exp_6_tape[i * k + c]       # the step before's, for the next backward step
        ...

Each forward step then reads the value the step before computed: a recurrence, which kept
the loop one exponential at a time (and kept :mod:`codegen.reduction_loops` from outlining
it). :func:`store_values_after` writes the same tape slot with this step's value instead,
after it is computed, and the backward step reads it back before its first use::

    for c in range(k):
        exp_6 = np.exp(terms[c] - top)
        exp_6_tape[i * k + c] = exp_6
        s = s + exp_6
    ...
    for c in range(k - 1, -1, -1):
        exp_6 = exp_6_tape[i * k + c]
        sub_6_bar = s_bar * exp_6
        ...

Both forms give every backward step the value its forward step computed; they differ in the
value the name holds after the backward loop (the first step's, not the one before the
forward loop), which is why the name must be read nowhere else. A tape that is a column of a
matrix of tapes (``float_tapes[:, 1]``) becomes a vector of its own: a loop storing into a
strided column is not vectorized. Measured on the mixture log-likelihood's gradient (1,000
points, 10 dimensions, 25 components; jit, the modules called in turn in one process, three
processes, AMD EPYC, 2 vCPUs, 2026-11-30): 415-427 us -> 349-375 us (the sum outlined and
vectorized; storing after into the strided column alone: no change).

Which tapes: a name T bound once, to ``np.empty(m, dtype=np.float64)`` or to a column
``G[:, j]`` of a matrix bound once to ``np.empty((m, w), dtype=np.float64)`` and read only by
such column bindings, and mentioned
exactly twice besides: ``T[idx] = v`` in the body of a ``for`` loop F and ``v = T[idx]`` in
the body of another loop R (the same index text), both statements of the loops' own bodies,
neither loop with an ``else``, ``break`` or ``continue``. In F, v is bound once, after the
store, by ``v = e`` in F's own body (e not reading v), and read only by the store and after
that binding; the index's names are not bound in between. In R, v is bound only by the
restore and read only before it; the load goes before R's first statement that mentions v,
the index's names not bound from there to the restore. Everywhere else in the function v is
only bound to a constant (its start).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(terms, k):
...     tape = np.empty(k, dtype=np.float64)
...     e = 0.0
...     s = 0.0
...     for c in range(k):
...         tape[c] = e
...         e = np.exp(terms[c])
...         s = s + e
...     g = np.zeros(k)
...     for c in range(k - 1, -1, -1):
...         g[c] = e / s
...         e = tape[c]
...     return g
... ''').body[0]
>>> store_values_after(fn)
True
>>> print(unparse(fn.body[3]))
for c in range(k):
    e = np.exp(terms[c])
    tape[c] = e
    s = s + e
>>> print(unparse(fn.body[5]))
for c in range(k - 1, -1, -1):
    e = tape[c]
    g[c] = e / s
"""

from __future__ import annotations

import gast

from .emit import names_bound, parent_map, text_of
from .reduction_loops import float_tapes

__all__ = ["store_values_after"]


def store_values_after(fn):
    """Rewrite `fn` (a gast FunctionDef, in place) as above; returns whether any tape
    changed."""
    changed = False
    for tape, binding in _tape_bindings(fn).items():
        found = _store_and_restore(fn, tape)
        if found is None:
            continue
        forward, store, backward, restore, value = found
        plan = _plan(fn, forward, store, backward, restore, value)
        if plan is None:
            continue
        bound_at, first_use = plan
        forward.body.remove(store)
        forward.body.insert(forward.body.index(bound_at) + 1, store)
        if first_use is not restore:  # (no reader before it: it stays where it is)
            backward.body.remove(restore)
            backward.body.insert(backward.body.index(first_use), restore)
        if isinstance(binding.value, gast.Subscript):  # a column of a matrix: a vector
            matrix = binding.value.value.id
            binding.value = gast.parse(
                f"np.empty({matrix}.shape[0], dtype=np.float64)", mode="eval").body
        changed = True
    return changed


def _tape_bindings(fn):
    """{T: its binding} for reverse mode's float tapes (:func:`codegen.reduction_loops.
    float_tapes`), a column only when its matrix is read by nothing but tapes' column
    bindings (the column is then the tape alone)."""
    tapes = float_tapes(fn)
    columns = {}  # matrix -> how many tapes are its columns
    for binding in tapes.values():
        if isinstance(binding.value, gast.Subscript):
            matrix = binding.value.value.id
            columns[matrix] = columns.get(matrix, 0) + 1
    loads = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Load):
            loads[node.id] = loads.get(node.id, 0) + 1
    return {t: b for t, b in tapes.items() if not isinstance(b.value, gast.Subscript) or
            loads.get(b.value.value.id) == columns[b.value.value.id]}


def _store_and_restore(fn, tape):
    """(F, ``T[idx] = v``, R, ``v = T[idx]``, v) when `tape` is mentioned (besides its
    binding) by exactly those two statements, each in its own loop's body; else None."""
    parents = parent_map([fn])
    mentions = [n for n in gast.walk(fn) if isinstance(n, gast.Name) and n.id == tape and
                isinstance(n.ctx, gast.Load)]
    if len(mentions) != 2:
        return None
    store = restore = None
    for name in mentions:
        sub = parents.get(id(name))
        stmt = parents.get(id(sub))
        if not (isinstance(sub, gast.Subscript) and sub.value is name and
                isinstance(stmt, gast.Assign) and len(stmt.targets) == 1):
            return None
        if stmt.targets[0] is sub and isinstance(stmt.value, gast.Name):
            store = stmt
        elif stmt.value is sub and isinstance(stmt.targets[0], gast.Name):
            restore = stmt
    if store is None or restore is None or store.value.id != restore.targets[0].id or \
            text_of(store.targets[0].slice) != text_of(restore.value.slice):
        return None
    forward, backward = parents.get(id(store)), parents.get(id(restore))
    for loop, stmt in ((forward, store), (backward, restore)):
        if not (isinstance(loop, gast.For) and any(s is stmt for s in loop.body)) or \
                loop.orelse or any(isinstance(n, (gast.Break, gast.Continue))
                                   for s in loop.body for n in gast.walk(s)):
            return None
    if forward is backward:
        return None
    return forward, store, backward, restore, store.value.id


def _reads(node, name):
    return any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Load)
               for n in gast.walk(node))


def _plan(fn, forward, store, backward, restore, value):
    """(the binding of `value` in F, R's first statement mentioning it) when the rules in
    the module's docstring hold; else None."""
    index_names = {n.id for n in gast.walk(store.targets[0].slice) if isinstance(n, gast.Name)}
    body = forward.body
    at = next(k for k, s in enumerate(body) if s is store)
    bindings = [k for k, s in enumerate(body) if value in names_bound([s])]
    if len(bindings) != 1 or bindings[0] <= at:
        return None
    q = bindings[0]
    bound_at = body[q]
    if not (isinstance(bound_at, gast.Assign) and len(bound_at.targets) == 1 and
            isinstance(bound_at.targets[0], gast.Name) and not _reads(bound_at.value, value)):
        return None
    if any(_reads(s, value) for s in body[:at] + body[at + 1:q]) or \
            names_bound(body[at + 1:q + 1]) & index_names or value in index_names:
        return None
    body = backward.body
    r = next(k for k, s in enumerate(body) if s is restore)
    if any(value in names_bound([s]) for s in body if s is not restore) or \
            any(_reads(s, value) for s in body[r + 1:]):
        return None
    first = next((k for k, s in enumerate(body[:r]) if _reads(s, value)), r)
    if names_bound(body[first:r]) & index_names:
        return None
    inside = {id(n) for loop in (forward, backward) for n in gast.walk(loop)}
    starts = {id(node.targets[0]) for node in gast.walk(fn)
              if isinstance(node, gast.Assign) and len(node.targets) == 1 and
              isinstance(node.targets[0], gast.Name) and node.targets[0].id == value and
              isinstance(node.value, gast.Constant)}
    if any(isinstance(n, gast.Name) and n.id == value and id(n) not in inside and
           id(n) not in starts for n in gast.walk(fn)):
        return None  # (elsewhere: only bound to a constant, its start)
    return bound_at, body[first]
