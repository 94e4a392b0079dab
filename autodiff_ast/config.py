"""Global options, set like JAX's: ``autodiff_ast.config.update("debug_nans", True)``.

>>> from autodiff_ast import config
>>> config.update("debug_nans", True)
>>> config.debug_nans
True
>>> config.update("jax_debug_nans", False)  # JAX's spelling works too
>>> config.debug_nans
False
"""

from __future__ import annotations

__all__ = ["config", "Config"]


class Config:
    """The options every transformation reads when it has no option of its own.

    debug_nans: run generated code with a check after every assignment, raising
    ``FloatingPointError`` at the first NaN or inf (naming your line).
    """

    _DEFAULTS = {"debug_nans": False}

    def __init__(self):
        self.__dict__["_values"] = dict(self._DEFAULTS)
        self.__dict__.update(self._DEFAULTS)  # (read as plain attributes: jit checks per call)

    def update(self, name, value):
        """Set option `name` (``debug_nans``, or JAX's ``jax_debug_nans``)."""
        key = name[len("jax_"):] if name.startswith("jax_") else name
        if key not in self._values:
            raise KeyError(f"unknown option {name!r}; options: {', '.join(sorted(self._values))}")
        self._values[key] = self.__dict__[key] = type(self._DEFAULTS[key])(value)

    def __getattr__(self, name):
        values = self.__dict__["_values"]
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        self.update(name, value)

    def __repr__(self):
        return f"Config({self._values})"


#: The global options.
config = Config()
