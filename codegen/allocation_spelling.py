"""One spelling for each float64 allocation: ``np.empty(n)``, ``np.zeros((a, b))``.

Numba builds the implementation of ``np.empty`` and ``np.zeros`` once for every set of argument
types, and the types record how a call was spelled, not what it makes: ``np.empty(n)``,
``np.empty(n, dtype=np.float64)`` and ``np.empty((n,))`` are three implementations of one
allocation (an omitted dtype, ``class(float64)``; an ``int64`` shape, ``UniTuple(int64, 1)``),
each typed, lowered and compiled on its own, ~0.05 s apiece. ADBench GMM's gradient module
built eleven ``np.empty`` implementations where eight differ.

:func:`one_allocation_spelling` writes a generated function's float64 allocations the way
NumPy's defaults already read them: no ``dtype`` when it is ``np.float64`` or ``float`` (the
default of both functions), and a one-element shape tuple as its element. NumPy and Numba
both make the same array from either spelling.

>>> import ast, gast
>>> fn = gast.parse('''
... def f(n, k):
...     a = np.empty(n, dtype=np.float64)
...     b = np.zeros((0,))
...     c = np.empty((n, k), np.float64)
...     d = np.empty(n, dtype=np.int64)
...     return a, b, c, d
... ''').body[0]
>>> one_allocation_spelling(fn)
3
>>> print(ast.unparse(gast.gast_to_ast(fn)).split("return")[0].strip())
def f(n, k):
    a = np.empty(n)
    b = np.zeros(0)
    c = np.empty((n, k))
    d = np.empty(n, dtype=np.int64)
"""

from __future__ import annotations

import gast

__all__ = ["one_allocation_spelling"]

_ALLOCATIONS = ("empty", "zeros")


def _is_numpy(node, names):
    return (isinstance(node, gast.Attribute) and node.attr in names and
            isinstance(node.value, gast.Name) and node.value.id == "np")


def _is_float64(node):
    return _is_numpy(node, ("float64",)) or (isinstance(node, gast.Name) and node.id == "float")


def _respell(call):
    """Rewrite one allocation call in place; whether anything changed."""
    changed = False
    if len(call.args) == 2 and not call.keywords and _is_float64(call.args[1]):
        call.args = call.args[:1]
        changed = True
    if len(call.keywords) == 1 and call.keywords[0].arg == "dtype" and \
            _is_float64(call.keywords[0].value):
        call.keywords = []
        changed = True
    if len(call.args) == 1 and isinstance(call.args[0], gast.Tuple) and \
            len(call.args[0].elts) == 1 and not isinstance(call.args[0].elts[0], gast.Starred):
        call.args = [call.args[0].elts[0]]
        changed = True
    return changed


def one_allocation_spelling(fn):
    """Respell `fn`'s (a gast FunctionDef, changed in place) float64 ``np.empty`` and
    ``np.zeros`` calls in one form; returns how many calls changed."""
    changed = 0
    for node in gast.walk(fn):
        if isinstance(node, gast.Call) and _is_numpy(node.func, _ALLOCATIONS) and \
                len(node.args) >= 1 and not any(k.arg is None for k in node.keywords) and \
                len(node.args) + len(node.keywords) <= 2:
            changed += _respell(node)
    return changed
