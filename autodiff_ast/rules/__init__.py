"""Derivative rules: one entry per primitive, with its type rule, reverse and forward rules.

A rule is data: how the primal call is written (``emit``), its parameters, which of them carry
derivatives, a type rule, and derivative templates (see :mod:`autodiff_ast.templates`).
Everything about one primitive sits together. Rules are found by the callable object itself, so
``np.tanh``, ``numpy.tanh`` and ``from numpy import tanh`` all reach the same rule.

>>> import numpy as np
>>> lookup(np.tanh).name
'tanh'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import types as T

_BY_CALLABLE = {}
_BY_NAME = {}


@dataclass
class Rule:
    """Everything about one primitive.

    vjp(call, g) returns {param: (expression, contribution type)} for the active parameters;
    the contribution may have the output's broadcast shape: the caller sums it down to the
    parameter's shape. jvp(call, dots) returns the output tangent expression from the tangents
    of the active parameters (dots maps parameter name to tangent expression).
    """

    name: str
    emit: str | None
    params: tuple
    defaults: dict = field(default_factory=dict)
    diff: tuple = ()
    infer: object = None
    vjp: object = None
    jvp: object = None
    linear: bool = False
    varargs: str | None = None  # a parameter that takes the remaining positional arguments
    nondiff_output: bool = False

    @property
    def differentiable(self):
        return bool(self.diff) and not self.nondiff_output


class PrimCall:
    """One call site of a primitive as a rule sees it: arguments bound to parameter names."""

    def __init__(self, rule, args, types, out, out_type, keywords=()):
        self.rule = rule
        self.keywords = tuple(keywords)  # parameters the user passed by keyword
        self.args = args  # param -> gast expr (atom, or list/tuple display of atoms)
        self.types = types  # param -> AType
        self.out = out  # the output's name (str), or an expression
        self.out_type = out_type

    def const(self, param, default=None):
        """The compile-time value of a parameter (a constant or a constant tuple)."""
        t = self.types.get(param)
        if t is None:
            return self.rule.defaults.get(param, default)
        if t.value is not None or t.kind in ("none", "bool", "int", "str", "tuple"):
            return t.value
        return default

    def ndim(self, param):
        t = self.types.get(param)
        return None if t is None else t.ndim

    def axis(self, param="axis", rank_of="x"):
        """The `axis` argument made non-negative (int, tuple of ints or None)."""
        axis = self.const(param)
        rank = self.ndim(rank_of)
        if axis is None:
            return None
        if rank is None:
            return axis
        if isinstance(axis, tuple):
            return tuple(a % rank for a in axis)
        return axis % rank


def register(rule, *callables):
    """Add `rule` and attach it to the given callables (functions, ufuncs, methods)."""
    _BY_NAME[rule.name] = rule
    for fn in callables:
        try:
            _BY_CALLABLE[fn] = rule
        except TypeError:  # unhashable callables cannot be looked up by identity
            continue
    return rule


def lookup(fn):
    """The rule for a callable, or None."""
    try:
        return _BY_CALLABLE.get(fn)
    except TypeError:
        return None


def by_name(name):
    """The rule registered under `name` (KeyError if none)."""
    return _BY_NAME[name]


def all_rules():
    """Every registered rule, by name."""
    return dict(_BY_NAME)


def covered_callables():
    """Every callable that has a rule."""
    return list(_BY_CALLABLE)


# Importing the rule modules fills the registry.
from . import elementwise, linalg, structural  # noqa: E402,F401

__all__ = ["Rule", "PrimCall", "register", "lookup", "by_name", "all_rules", "T"]
