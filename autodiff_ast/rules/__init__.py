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

import sys
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


# Parameters that choose a template (an axis, a count of turns, an order) rather than carry a
# value into it: a template reading one needs its value where the code is generated. (A
# template may ask for other parameters' values and fall back on the expression: the
# exponent of `x ** n`.)
OPTIONS = frozenset({"axis", "axes", "axis1", "axis2", "source", "destination", "keepdims",
                     "k", "ord", "ddof", "n", "reps", "returned", "subscripts", "offset",
                     "indices_or_sections", "rowvar", "bias", "mode", "full_matrices",
                     "compute_uv", "hermitian"})


def runtime_option_message(rule, param):
    """(message, hint) refusing a call whose template needs `param` (an axis, a count) where
    the code is generated, given a value only known at run time."""
    return (f"{rule.emit or rule.name}'s {param} is only known at run time: the generated code "
            "is written for one value of it",
            "write the value in the code (axis=1), or make the argument static: "
            "jit(grad(f), static_argnums=...)")


class PrimCall:
    """One call site of a primitive as a rule sees it: arguments bound to parameter names."""

    def __init__(self, rule, args, types, out, out_type, keywords=()):
        self.rule = rule
        self.keywords = tuple(keywords)  # parameters the user passed by keyword
        self.args = args  # param -> gast expr (atom, or list/tuple display of atoms)
        self.types = types  # param -> AType
        self.out = out  # the output's name (str), or an expression
        self.out_type = out_type
        # parameters a template asked the value of that are only known at run time (an int
        # argument passed as axis=k): const gives None, which the template would read as the
        # default; whoever applies the template refuses instead (see unknown_option)
        self.runtime_consts = []
        # (message, hint) of a rule that refuses this call with its own words (ord=0 of a
        # norm: no derivative to give) rather than "no rule for these ranks or options"
        self.refusal = None

    def refuse(self, message, hint=None):
        """Refuse the call with `message` (and `hint`) at the user's line; returns None, what
        a vjp or jvp returns for a call it has no template for."""
        self.refusal = (message, hint)
        return None

    def const(self, param, default=None):
        """The compile-time value of a parameter (a constant or a constant tuple)."""
        t = self.types.get(param)
        if t is None:
            return self.rule.defaults.get(param, default)
        if t.value is None and t.kind in ("bool", "int", "str", "tuple") and param in OPTIONS:
            self.known_at_run_time(param)
        if t.value is not None or t.kind in ("none", "bool", "int", "str", "tuple"):
            return t.value
        return default

    def known_at_run_time(self, param):
        """Record that a template needs the value of `param`, which is only known at run time
        (an int held in a name, an array of indices): whoever applies it refuses the call."""
        if param not in self.runtime_consts:
            self.runtime_consts.append(param)

    def unknown_option(self):
        """The first parameter a template read that is only known at run time, or None."""
        return self.runtime_consts[0] if self.runtime_consts else None

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


#: Rules for helper functions that generated modules carry (codegen/helpers.py), by name:
#: differentiating a generated module again meets them as plain functions of that module.
_BY_HELPER_NAME = {}


def register_helper(rule, helper_name):
    """Make `rule` the derivative of the emitted helper called `helper_name`."""
    _BY_NAME[rule.name] = rule
    _BY_HELPER_NAME[helper_name] = rule
    return rule


def helper_rule(fn):
    """The rule of an emitted helper function (one defined in a module we generated), or
    None: its name must be a registered helper's and its module's docstring ours."""
    rule = _BY_HELPER_NAME.get(getattr(fn, "__name__", None))
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if rule is None or module is None or "generated by autodiff-ast" not in (
            module.__doc__ or ""):
        return None
    return rule


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
from . import elementwise, linalg, numerical, structural  # noqa: E402,F401

__all__ = ["Rule", "PrimCall", "runtime_option_message", "register", "lookup", "by_name",
           "all_rules", "T"]
