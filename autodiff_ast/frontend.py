"""Front end: from a Python function object to its parsed source and the names it can see.

Handles module functions, nested functions and closures (cell values resolved), lambdas (also
one of several on a line), functions defined through ``exec`` whose source is registered in
``linecache``, and bound methods (``self`` becomes a value the function closes over).

>>> def cube(x):
...     return x * x * x
>>> info = parse_function(cube)
>>> info.name, [a.id for a in info.node.args.args]
('cube', ['x'])
"""

from __future__ import annotations

import builtins
import inspect
import linecache
import re
import textwrap
import weakref
from dataclasses import dataclass, field

import gast

from .errors import SourceUnavailableError, UnsupportedSyntaxError
from .templates import mark_user_constants, unparse


@dataclass
class FunctionInfo:
    """A parsed user function and the environment its free names resolve in."""

    fn: object
    name: str
    node: gast.FunctionDef
    filename: str
    line_offset: int  # add to a node's lineno to get the line in `filename`
    globals: dict
    closure: dict = field(default_factory=dict)
    module_name: str | None = None

    def file_line(self, node):
        """The line in the user's file where `node` starts (None when unknown)."""
        lineno = getattr(node, "lineno", None)
        return None if lineno is None else lineno + self.line_offset

    def source_line(self, node):
        """The text of the user's line where `node` starts, stripped."""
        lineno = self.file_line(node)
        if lineno is None:
            return ""
        return linecache.getline(self.filename, lineno).strip()

    def lookup(self, name):
        """The value a free name refers to: closure cell, then module global, then builtin.

        Raises KeyError when the name is not bound anywhere.
        """
        if name in self.closure:
            return self.closure[name]
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise KeyError(name)

    def error(self, cls, message, node, hint=None):
        """Build an error of class `cls` located at `node` in the user's source."""
        return cls(message, filename=self.filename, lineno=self.file_line(node),
                   code=self.source_line(node) or None, hint=hint)


def _closure_values(fn):
    values = {}
    code = fn.__code__
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell: the variable is assigned after the function
            continue
    return values


def _lambda_candidates(snippet):
    """Every lambda expression in `snippet`, parsed on its own (longest prefix that parses)."""
    found = []
    for match in re.finditer(r"\blambda\b", snippet):
        rest = snippet[match.start():]
        for end in range(len(rest), 6, -1):
            try:
                node = gast.parse(rest[:end].strip(), mode="eval").body
            except SyntaxError:
                continue
            if isinstance(node, gast.Lambda):
                found.append((node, rest[:end].strip()))
                break
    return found


def _same_code(text, code):
    """Whether compiling the lambda `text` gives code reading the same names and constants.

    Raw bytecode is not compared: the same lambda compiles to different instructions in
    different contexts (e.g. LOAD_METHOD or LOAD_ATTR for ``np.sin`` on Python 3.11).
    """
    try:
        outer = compile(text, "<lambda>", "eval")
    except SyntaxError:
        return False
    inner = [c for c in outer.co_consts if isinstance(c, type(code))]

    def consts(c):
        return tuple(repr(k) for k in c.co_consts if not isinstance(k, type(code)))
    return bool(inner) and inner[0].co_names == code.co_names and \
        inner[0].co_varnames == code.co_varnames and consts(inner[0]) == consts(code)


# How a name is read depends on where the lambda sits (a global, a closure cell), not on
# what the lambda computes.
_NAME_READS = {"LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME", "LOAD_CLASSDEREF", "LOAD_CLOSURE"}


def _same_instructions(text, code):
    """Whether compiling the lambda `text` gives the instructions of `code`, up to how names
    are read and the method-call forms of a call (``LOAD_METHOD``/``LOAD_ATTR``)."""
    import dis
    outer = compile(text, "<lambda>", "eval")
    inner = [c for c in outer.co_consts if isinstance(c, type(code))]

    def ops(c):
        out = []
        for ins in dis.get_instructions(c):
            name = "LOAD_NAME" if ins.opname in _NAME_READS else ins.opname
            if name in ("PRECALL", "PUSH_NULL", "COPY_FREE_VARS",
                        "MAKE_CELL", "RESUME"):
                continue
            out.append("LOAD_ATTR" if name == "LOAD_METHOD" else name)
        return out
    return bool(inner) and ops(inner[0]) == ops(code)


def parse_function(fn):
    """Parse `fn` into a :class:`FunctionInfo` whose node is a ``gast.FunctionDef``.

    >>> info = parse_function(lambda x, y: x * y + 1.0)
    >>> info.name
    'lambda_fn'
    """
    bound_self = None
    if inspect.ismethod(fn):
        bound_self, fn = fn.__self__, fn.__func__
    if not inspect.isfunction(fn):
        raise SourceUnavailableError(
            f"cannot read the source of {fn!r}: it is not a Python function",
            hint="pass a function defined with def or lambda, or register a derivative rule")
    try:
        lines, first_line = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise SourceUnavailableError(
            f"cannot read the source of {fn.__qualname__}: {exc}",
            filename=fn.__code__.co_filename, lineno=fn.__code__.co_firstlineno,
            hint="define the function in a file, or in exec() with its source registered in "
                 "linecache") from None
    filename = fn.__code__.co_filename
    snippet = textwrap.dedent("".join(lines))
    offset = first_line - 1
    if fn.__name__ == "<lambda>":
        candidates = _lambda_candidates(snippet)
        matches = [n for n, text in candidates if _same_code(text, fn.__code__)]
        if not matches:
            params = fn.__code__.co_varnames[:fn.__code__.co_argcount]
            matches = [n for n, _ in candidates if tuple(a.id for a in n.args.args) == params]
        if len({unparse(n) for n in matches}) > 1:
            # lambdas on one line reading the same names and constants (`-np.inf` and
            # `np.inf` differ only in an instruction), or taking the same parameters: their
            # instructions decide
            matches = [n for n in matches if _same_instructions(unparse(n), fn.__code__)]
            if len({unparse(n) for n in matches}) != 1:
                raise SourceUnavailableError(
                    f"cannot tell which lambda on this line is {fn!r}: several could be it",
                    filename=filename, lineno=first_line,
                    hint="define it with def, or put each lambda on its own line")
        if not matches:
            raise SourceUnavailableError(f"cannot find the source of {fn!r}", filename=filename,
                                         lineno=first_line)
        for node in gast.walk(matches[0]):
            if hasattr(node, "lineno"):
                node.lineno = 1
        offset = fn.__code__.co_firstlineno - 1
        lam = matches[0]
        node = gast.FunctionDef(
            name="lambda_fn", args=lam.args, body=[gast.Return(value=lam.body)],
            decorator_list=[], returns=None, type_comment=None, type_params=[])
        for stmt in node.body:
            gast.copy_location(stmt, lam)
        gast.copy_location(node, lam)
        name = "lambda_fn"
    else:
        tree = gast.parse(snippet)
        defs = [n for n in tree.body if isinstance(n, (gast.FunctionDef, gast.AsyncFunctionDef))]
        if not defs:
            raise SourceUnavailableError(f"cannot find the definition of {fn.__qualname__}",
                                         filename=filename, lineno=first_line)
        node = defs[0]
        if isinstance(node, gast.AsyncFunctionDef):
            raise UnsupportedSyntaxError(
                "async functions cannot be differentiated", filename=filename,
                lineno=first_line, code=lines[0], hint="differentiate a plain def")
        node.decorator_list = []
        name = fn.__name__
    mark_user_constants(node)
    closure = _closure_values(fn)
    if bound_self is not None:
        first = node.args.args.pop(0)
        closure[first.id] = bound_self
    return FunctionInfo(fn=fn, name=name, node=node, filename=filename, line_offset=offset,
                        globals=fn.__globals__, closure=closure,
                        module_name=fn.__module__)


# ---------------------------------------------------------------- parsed once per function
_PARSED = weakref.WeakKeyDictionary()  # function -> (code object, FunctionInfo)


def cached_parse(fn):
    """:func:`parse_function` of `fn`, parsed once per function and code object.

    The result is shared: callers read it and must not change its tree. Assigning a new
    ``fn.__code__`` parses again. Bound methods and other callables are parsed on every call.

    >>> def square(x):
    ...     return x * x
    >>> cached_parse(square) is cached_parse(square)
    True
    """
    if not inspect.isfunction(fn):
        return parse_function(fn)
    code = fn.__code__
    hit = _PARSED.get(fn)
    if hit is not None and hit[0] is code:
        return hit[1]
    info = parse_function(fn)
    _PARSED[fn] = (code, info)
    return info
