"""Find the ``for`` loops whose index must be a hidden name: the function reads the index
after the loop has ended, or rebinds it inside the loop.

In Python a loop's index keeps its last value once the loop ends, and rebinding it inside the
loop changes what the rest of that step reads (the next step takes the next value anyway)::

    for k in range(n):
        total = total + x[k]
    total = total + x[k] ** 2      # k is n - 1 here
    for i in range(3):
        i = i + 1                  # x[i] below reads x[1], x[2], x[3]
        total = total + x[i]

The reverse sweep runs each loop backwards with the loop's index as its step counter: that
leaves the index at its first value after the loop, and a rebinding inside the loop would
change the counter the tapes are indexed by, so either read would see the wrong value. The
normalizer gives such a loop a hidden index and binds the user's name from it at the top of
each step (``k = k_index``): an ordinary value the loop overwrites, which the reverse sweep
restores as it restores any other (autodiff_ast/normalize.py, ``range_loop``). Other loops
keep their index as written, the readable common case.

A read counts when it comes after the loop in the source, or anywhere in a loop around it
(the next step reads it), unless it is inside a later loop that binds the same name (the
usual ``for j in ...`` written twice).

>>> import gast
>>> tree = gast.parse('''
... for k in range(3):
...     t = k
... u = k
... for j in range(3):
...     t = j
... for j in range(2):
...     t = j
... ''')
>>> hidden = loops_with_hidden_index(tree.body)
>>> [tree.body[i].target.id for i in (0, 2, 3) if id(tree.body[i]) in hidden]
['k']
"""
from __future__ import annotations

import gast

__all__ = ["loops_with_hidden_index"]


def _loop_names(loop):
    return {n.id for n in gast.walk(loop.target) if isinstance(n, gast.Name)}


def loops_with_hidden_index(body):
    """ids of the ``for`` statements in `body` (statements, nested blocks included; not
    nested function definitions) one of whose loop names may be read after the loop or is
    bound again inside it."""
    order = {}  # id of a node -> (first, last) positions of it and its descendants
    parents = {}
    loads = []  # (position, node) of every Load of a name
    stores = []  # (position, name) of every other use of a name (bindings and del)
    loops = []

    def visit(node, parent, position):
        start = position
        parents[id(node)] = parent
        if isinstance(node, gast.Name):
            if isinstance(node.ctx, gast.Load):
                loads.append((position, node))
            else:
                stores.append((position, node.id))
        if isinstance(node, gast.For):
            loops.append(node)
        position += 1
        if not isinstance(node, (gast.FunctionDef, gast.Lambda)):
            for child in gast.iter_child_nodes(node):
                position = visit(child, node, position)
        order[id(node)] = (start, position - 1)
        return position

    root = gast.Module(body=list(body), type_ignores=[])
    visit(root, None, 0)

    def ancestors(node):
        out = []
        parent = parents.get(id(node))
        while parent is not None:
            out.append(parent)
            parent = parents.get(id(parent))
        return out

    found = set()
    for loop in loops:
        names = _loop_names(loop)
        body_first = order[id(loop.body[0])][0] if loop.body else 0
        body_last = order[id(loop.body[-1])][1] if loop.body else -1
        if any(body_first <= position <= body_last and n in names for position, n in stores):
            found.add(id(loop))  # bound again inside the loop
            continue
        first, last = order[id(loop)]
        around = [a for a in ancestors(loop) if isinstance(a, (gast.For, gast.While))]
        for position, load in loads:
            if load.id not in names or first <= position <= last:
                continue
            if position < first and not any(
                    order[id(a)][0] <= position <= order[id(a)][1] for a in around):
                continue  # before the loop, and not in a loop around it
            if _rebound_by_another_loop(load, loop, ancestors(load), order):
                continue
            found.add(id(loop))
            break
    return found


def _rebound_by_another_loop(load, loop, load_ancestors, order):
    """Whether `load` sits in the body of another loop (not one around `loop`) binding the
    same name: that loop's own index is read there."""
    for other in load_ancestors:
        if not isinstance(other, gast.For) or other is loop or load.id not in _loop_names(other):
            continue
        start, end = order[id(other)]
        if start <= order[id(loop)][0] <= end:
            continue  # a loop around `loop`: its index is `loop`'s after `loop` ends
        in_iter = order[id(other.iter)][0] <= order[id(load)][0] <= order[id(other.iter)][1]
        if not in_iter:
            return True
    return False

