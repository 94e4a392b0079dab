"""Exceptions raised by autodiff-ast.

Every error we raise about a user's program derives from :class:`AutodiffError` and, where it is
about a place in the user's source, names the file, the line, the offending code and what to do.

>>> from autodiff_ast.errors import UnsupportedSyntaxError
>>> err = UnsupportedSyntaxError("try/except is not supported", filename="model.py", lineno=3,
...                              code="try:", hint="move error handling outside the function")
>>> print(err)
model.py:3: try/except is not supported
    try:
  hint: move error handling outside the function
"""

from __future__ import annotations


class AutodiffError(Exception):
    """Base class of every error autodiff-ast raises about a user's program.

    >>> isinstance(AutodiffError("x"), Exception)
    True
    """

    def __init__(self, message, *, filename=None, lineno=None, code=None, hint=None):
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.code = code
        self.hint = hint
        super().__init__(self._format())

    def _format(self):
        where = ""
        if self.filename is not None:
            where = f"{self.filename}:{self.lineno}: " if self.lineno else f"{self.filename}: "
        text = where + self.message
        if self.code:
            text += "\n    " + self.code.strip().splitlines()[0]
        if self.hint:
            text += "\n  hint: " + self.hint
        return text

    def one_line(self):
        """The error as one line, as the command line prints it.

        >>> AutodiffError("no rule", filename="m.py", lineno=2, hint="add one").one_line()
        'm.py:2: no rule (hint: add one)'
        """
        where = ""
        if self.filename is not None:
            where = f"{self.filename}:{self.lineno}: " if self.lineno else f"{self.filename}: "
        text = where + self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text


class UnsupportedSyntaxError(AutodiffError):
    """The function uses Python we cannot differentiate (try/except, generators, classes...)."""


class MissingRuleError(AutodiffError):
    """A call to something with no derivative rule and no Python source to differentiate."""


class NonScalarOutputError(AutodiffError, TypeError):
    """`grad` was asked for a function whose output is not a real scalar."""


class ArgnumsError(AutodiffError, ValueError):
    """`argnums` names an argument the function does not have."""


class NonFloatInputError(AutodiffError, TypeError):
    """A differentiated argument is an integer, boolean or complex value."""


class SourceUnavailableError(AutodiffError):
    """The function's source text cannot be found (built-ins, C extensions, the REPL)."""


class NonFloatOutputError(AutodiffError, TypeError):
    """jacfwd/jacrev of a function whose output is not real floating-point numbers."""


class UnsupportedError(AutodiffError, NotImplementedError):
    """A combination of transformations or arguments that is not supported (yet)."""


class ShapeMismatchError(AutodiffError, ValueError):
    """A tangent or cotangent whose shape does not match its primal."""


class TypeInferenceError(AutodiffError):
    """Static inference found values whose type changes in a way Numba cannot follow."""


class CompileError(AutodiffError):
    """A compile target (Numba) cannot compile the generated code; names the user's line."""


class ArgumentError(AutodiffError, TypeError):
    """A transformed function was called with arguments that do not fit its parameters (one
    missing, one too many, an unknown keyword): the message names the function and its
    parameters, as Python's own TypeError would.

    >>> issubclass(ArgumentError, TypeError)
    True
    """


class StaticArgumentError(AutodiffError, ValueError):
    """A static argument of ``jit`` (``static_argnums``/``static_argnames``) that cannot key the
    cache of compiled versions: it is not hashable (JAX raises ValueError here too).

    >>> issubclass(StaticArgumentError, ValueError)
    True
    """
