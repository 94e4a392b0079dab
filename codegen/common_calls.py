"""A math call computed again where its value is already in a name: the name is used instead.

The reverse rule of ``s = np.sin(t)`` writes ``g * np.cos(t)``; when the function being
differentiated also computed ``c = np.cos(t)`` (a rotation does both), the backward code calls
``cos`` a second time. In compiled code a recomputing backward step (a helper called in a
loop, inlined by :mod:`codegen.inlining`) sits next to the forward statements it repeats, so
such repeats are common: ADBench's bundle adjustment spent 29% of its gradient in ``sincos``,
one of its three calls per observation a repeat.

:func:`reuse_math_calls` works on one function: walking its statements in order, a statement
``name = np.cos(t)`` (a math function of the table below, arguments that are names or
constants) makes ``np.cos(t)`` available as ``name``; a later identical call is replaced by
``name`` while neither ``name`` nor ``t`` has been bound, written into (``t[i] = ...``,
``t += ...``) or passed to a call made for its effect (``add_at(t, ...)``) since. Copies
count: after ``u = t`` (or ``a, u = b, t``, what inlining writes for a returned tuple),
``np.cos(u)`` is ``np.cos(t)`` while both hold. A branch
inherits what is available before it and kills, after it, what either arm changes; a loop
first kills everything its body changes (the next step would see it changed). What the end
of an arm made available comes back in a later ``if`` on the same test, while the names the
test reads and those names are unchanged: a recomputed forward step and its backward step
both branch on ``sqtheta != 0.0``, the backward one on copies of the forward's names, so a
test is compared as written with each name read as the one it was copied from (a test that
calls a function is never the same).

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(t, g):
...     c = np.cos(t)
...     s = np.sin(t)
...     t_bar = g * np.cos(t) - g * np.sin(t)
...     t = t + 1.0
...     return t_bar + np.cos(t)
... ''').body[0]
>>> reuse_math_calls(fn)
2
>>> print(unparse(fn))
def f(t, g):
    c = np.cos(t)
    s = np.sin(t)
    t_bar = g * c - g * s
    t = t + 1.0
    return t_bar + np.cos(t)
"""

from __future__ import annotations

import gast

from autodiff_ast.templates import copy_tree

from .emit import name_node
from .invariant_tables import stored_names, written_names
from .param_writes import dotted_name

__all__ = ["reuse_math_calls"]

_PURE = {f"{module}.{fn}" for module in ("np", "math") for fn in (
    "sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "arctan", "arcsin",
    "arccos", "atan", "asin", "acos", "log1p", "expm1", "exp2", "log2", "log10", "cbrt")}


def _key(call, aliases):
    """The text identifying a pure math call of names and constants (each name by the one it
    was copied from), else None."""
    if not (isinstance(call, gast.Call) and dotted_name(call.func) in _PURE and
            not call.keywords and call.args and
            all(isinstance(a, (gast.Name, gast.Constant)) for a in call.args)):
        return None
    parts = [aliases.get(a.id, a.id) if isinstance(a, gast.Name) else repr(a.value)
             for a in call.args]
    return f"{dotted_name(call.func)}({', '.join(parts)})"


class _State:
    """What is known at one point: available calls (key -> (holder, names the key reads))
    and copies (name -> the name it holds the value of)."""

    def __init__(self, available=None, aliases=None, arms=None):
        self.available = dict(available or {})
        self.aliases = dict(aliases or {})
        # (condition, taken?) -> what the end of an earlier arm on that condition made
        # available: a later ``if`` on the same unchanged condition starts with it
        self.arms = {k: dict(v) for k, v in (arms or {}).items()}

    def copy(self):
        return _State(self.available, self.aliases, self.arms)

    def kill(self, names):
        for table in [self.available] + list(self.arms.values()):
            for key, (holder, args) in list(table.items()):
                if holder in names or args & names:
                    del table[key]
        for arm in list(self.arms):
            if arm[0][1] & names:  # (a name the condition reads)
                del self.arms[arm]
        for name, source in list(self.aliases.items()):
            if name in names or source in names:
                del self.aliases[name]

    def condition(self, test):
        """A branch's test as (text, names it reads), each name read as the one it was
        copied from (``sqtheta != 0.0`` after ``sqtheta = sqtheta_3`` is ``sqtheta_3 !=
        0.0``); None for a test that calls or binds anything."""
        nodes = list(gast.walk(test))
        if any(isinstance(n, (gast.Call, gast.NamedExpr, gast.Lambda, gast.Await,
                              gast.Yield, gast.YieldFrom)) for n in nodes):
            return None
        names = frozenset(self.aliases.get(n.id, n.id) for n in nodes
                          if isinstance(n, gast.Name))
        text = gast.dump(_Renamed(self.aliases).visit(copy_tree(test)))
        return text, names

    def learn(self, stmt):
        """After `stmt` ran: the copies and the call value it binds."""
        if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1):
            return
        target, value = stmt.targets[0], stmt.value
        pairs = []
        if isinstance(target, gast.Name):
            pairs = [(target, value)]
        elif isinstance(target, gast.Tuple) and isinstance(value, gast.Tuple) and \
                len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))
        names = [t.id for t, _ in pairs if isinstance(t, gast.Name)]
        if len(set(names)) != len(names):
            return
        for t, v in pairs:
            if not isinstance(t, gast.Name):
                continue
            if isinstance(v, gast.Name) and v.id != t.id and v.id not in names:
                self.aliases[t.id] = self.aliases.get(v.id, v.id)
            key = _key(v, self.aliases)
            if key is not None and len(pairs) == 1:
                args = {self.aliases.get(a.id, a.id) for a in v.args
                        if isinstance(a, gast.Name)}
                if t.id not in args and key not in self.available:
                    self.available[key] = (t.id, args)


def _changed(stmts):
    """Names the statements may bind, or write into (invariant_tables' account of writes:
    subscript and augmented targets, the add helpers' arrays, receivers of methods other than
    reads, whatever is handed to a call that is not a NumPy/math function or a builtin)."""
    return stored_names(stmts) | written_names(stmts)


class _Renamed(gast.NodeTransformer):
    def __init__(self, aliases):
        self.aliases = aliases

    def visit_Name(self, node):
        node.id = self.aliases.get(node.id, node.id)
        return node


class _Replace(gast.NodeTransformer):
    def __init__(self, state):
        self.state = state
        self.count = 0

    def visit_Call(self, node):
        self.generic_visit(node)
        key = _key(node, self.state.aliases)
        if key is not None and key in self.state.available:
            self.count += 1
            return name_node(self.state.available[key][0])
        return node


def _block(stmts, state):
    count = 0
    for stmt in stmts:
        if isinstance(stmt, gast.If):
            replace = _Replace(state)
            stmt.test = replace.visit(stmt.test)
            count += replace.count
            cond = state.condition(stmt.test)
            ends = []
            for arm, body in ((True, stmt.body), (False, stmt.orelse)):
                inner = state.copy()
                if cond is not None:
                    inner.available.update(state.arms.get((cond, arm), {}))
                count += _block(body, inner)
                ends.append((arm, inner.available))
            state.kill(_changed(stmt.body + stmt.orelse))
            if cond is not None:  # valid again under the same condition, until killed
                for arm, available in ends:
                    state.arms[(cond, arm)] = available
            continue
        if isinstance(stmt, (gast.For, gast.While)):
            state.kill(_changed(stmt.body + stmt.orelse + ([stmt.target] if isinstance(
                stmt, gast.For) else [])))
            replace = _Replace(state)
            if isinstance(stmt, gast.For):
                stmt.iter = replace.visit(stmt.iter)
            count += replace.count
            count += _block(stmt.body, state.copy()) + _block(stmt.orelse, state.copy())
            continue
        if isinstance(stmt, (gast.FunctionDef, gast.Lambda)):
            continue
        replace = _Replace(state)
        if isinstance(stmt, (gast.Assign, gast.AugAssign, gast.Return, gast.Expr)) and \
                stmt.value is not None:
            stmt.value = replace.visit(stmt.value)
        count += replace.count
        state.kill(_changed([stmt]))
        state.learn(stmt)
    return count


def reuse_math_calls(fn):
    """Replace repeated pure math calls in `fn` (a gast FunctionDef, changed in place) by the
    name that holds their value; returns how many were replaced."""
    return _block(fn.body, _State())
