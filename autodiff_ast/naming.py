"""Deterministic, readable names for generated variables and functions.

Names come from the user's names (``x_bar`` for the adjoint of ``x``, ``x_dot`` for its
tangent) or from what a temporary holds (``tanh``, ``dot_inputs``); a counter suffix is added
only on a clash. No random or global state: the same input always gives the same names.

>>> namer = Namer(taken={"x", "np"})
>>> namer.fresh("x"), namer.fresh("x"), namer.fresh("tanh")
('x_2', 'x_3', 'tanh')
>>> namer.adjoint("x"), namer.adjoint("x")
('x_bar', 'x_bar')
"""

from __future__ import annotations

import keyword
import re

_RESERVED = {"np", "numpy", "math", "numba", "len", "range", "float", "int", "abs", "min", "max",
             "sum", "print", "None", "True", "False", "sorted", "list", "tuple", "dict", "zip",
             "enumerate", "map", "round", "pow", "divmod", "isinstance", "type", "object",
             "bool", "str", "slice", "iter", "next", "reversed", "all", "any", "id"}


def sanitize(text):
    """Turn any text into a valid, lower-case-friendly identifier.

    >>> sanitize("W-1"), sanitize("0"), sanitize("lambda")
    ('W_1', '_0', 'lambda_')
    """
    name = re.sub(r"\W", "_", str(text))
    if not name or name[0].isdigit():
        name = "_" + name
    if keyword.iskeyword(name):
        name += "_"
    return name


class Namer:
    """Hands out names unique within one scope, derived from a readable base."""

    def __init__(self, taken=()):
        self.taken = set(taken) | _RESERVED
        self._derived = {}
        self.temps = set()  # names of temporaries that tidying may inline away
        # names of other scopes this one must not hand out either, as they grow (a
        # function's locals avoid its module's names: a local named like a module function
        # hides it)
        self.avoided = []

    def reserve(self, name):
        """Mark `name` as used without handing it out."""
        self.taken.add(name)

    def fresh(self, base):
        """A new name from `base`: `base` itself if free, else `base_2`, `base_3`..."""
        base = sanitize(base)
        if not self._used(base):
            self.taken.add(base)
            return base
        stem = re.sub(r"_\d+$", "", base) or base
        k = 2
        while self._used(f"{stem}_{k}"):
            k += 1
        name = f"{stem}_{k}"
        self.taken.add(name)
        return name

    def _used(self, name):
        return name in self.taken or any(name in other for other in self.avoided)

    def discard(self):
        """A name for a value unpacked and never read: ``_``, unless the function itself
        uses ``_`` (say as a loop index), then a fresh one."""
        return "_" if "_" not in self.taken else self.fresh("unused")

    def temp(self, base):
        """A fresh name for a temporary (the tidy pass may inline it into its one use)."""
        name = self.fresh(base)
        self.temps.add(name)
        return name

    def derived(self, name, suffix):
        """The one name derived from `name` with `suffix` (same answer every time)."""
        key = (name, suffix)
        if key not in self._derived:
            self._derived[key] = self.fresh(f"{name}_{suffix}")
            if name in self.temps:
                self.temps.add(self._derived[key])
        return self._derived[key]

    def adjoint(self, name):
        """The adjoint (cotangent) of `name`: ``name_bar``."""
        return self.derived(name, "bar")

    def tangent(self, name):
        """The tangent of `name`: ``name_dot``."""
        return self.derived(name, "dot")
