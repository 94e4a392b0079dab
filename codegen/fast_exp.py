"""exp under Numba as arithmetic LLVM can vectorize.

Numba compiles ``np.exp(v)`` and ``math.exp(t)`` into one call of libm's ``exp`` per number,
and a loop that makes a call runs one element at a time. The dialect helper ``exp_fast``
(codegen/helpers.py) computes exp without a call or a branch, within 1 ulp of NumPy's, so a
loop of log-sum-exp or a sigmoid in a row loop vectorizes, and an array's exp runs on SIMD
lanes (25,000 elements: 26 us against 106 us).

:func:`use_fast_exp` is the dialect's last rewrite of a module's functions: it runs after
the passes that know ``np.exp`` by name (common calls, invariant tables, fused loops), so
they still see it, and it also rewrites the helpers those passes wrote (a fused loop's
``np.exp(element(x, i))``). ``np.exp(e)`` becomes ``exp_fast(e)``; ``math.exp(e)`` becomes
``exp_fast(float(e))`` (math.exp takes an int and returns a float64, as this does).
A call with keywords (``out=``, ``where=``) or other than one argument is left alone.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(x, t):
...     return np.sum(np.exp(x - t)) + math.exp(t)
... ''').body[0]
>>> use_fast_exp(fn)
True
>>> print(unparse(fn).strip())
def f(x, t):
    return np.sum(exp_fast(x - t)) + exp_fast(float(t))
"""

from __future__ import annotations

import gast

from autodiff_ast.templates import name, unparse

from .param_writes import dotted_name

__all__ = ["use_fast_exp", "fast_exp_in_source"]


class _FastExp(gast.NodeTransformer):
    def __init__(self):
        self.changed = False

    def visit_Call(self, node):
        self.generic_visit(node)
        func = dotted_name(node.func)
        if func not in ("np.exp", "math.exp") or node.keywords or len(node.args) != 1 or \
                isinstance(node.args[0], gast.Starred):
            return node
        self.changed = True
        arg = node.args[0]
        if func == "math.exp":
            arg = gast.Call(func=name("float"), args=[arg], keywords=[])
        return gast.copy_location(gast.Call(func=name("exp_fast"), args=[arg], keywords=[]),
                                  node)


def use_fast_exp(tree):
    """Rewrite the exp calls of `tree` (a gast node, in place) as ``exp_fast``; True when
    some call was rewritten."""
    rewrite = _FastExp()
    rewrite.visit(tree)
    return rewrite.changed


def fast_exp_in_source(source):
    """`source` (a helper's text) with its exp calls as ``exp_fast``, and whether any was
    rewritten (the text is returned unchanged when none was)."""
    if "exp(" not in source:
        return source, False
    tree = gast.parse(source)
    if not use_fast_exp(tree):
        return source, False
    return unparse(tree), True
