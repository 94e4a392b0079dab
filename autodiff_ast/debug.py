"""Debugging generated code: errors that name your line, and ``debug_nans``.

Generated modules are real files on disk, so a traceback through one shows the generated line
and pdb steps through it. This module adds the other half, the line of *your* function that the
generated line comes from (:mod:`autodiff_ast.linemap` keeps the map):

- transformed functions add a note to any exception raised inside generated code, so the
  traceback ends with the generated line and your line (:func:`annotate`); for modules written by
  the command line and imported without autodiff-ast in the call path, call :func:`explain` or
  :func:`install_excepthook`;
- ``debug_nans=True`` on ``grad``/``value_and_grad``/``vjp``/``jvp`` (or
  ``autodiff_ast.config.update("debug_nans", True)``, JAX's flag, which jacfwd, jacrev, hessian
  and vmap follow too) runs a variant of the module that checks every assignment and raises
  ``FloatingPointError`` at the first NaN or inf, naming the generated statement and your line
  (:func:`nan_variant`); under jit, a call whose output holds one runs again uncompiled
  (autodiff_ast/jit.py).

>>> import numpy as np
>>> import autodiff_ast as ad
>>> def f(x):
...     y = np.log(x)
...     return np.sum(y)
>>> try:
...     with np.errstate(invalid="ignore"):
...         ad.value_and_grad(f, debug_nans=True)(np.array([1.0, -1.0]))
... except FloatingPointError as exc:
...     print(str(exc).replace(", from", ",\\nfrom"))
debug_nans: NaN or inf in y, computed by the generated line `y = np.log(x)`,
from your line <doctest autodiff_ast.debug[2]>:2: y = np.log(x)
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import sys
import threading
import traceback

from .linemap import Origin, function_range, generated_header, line_map, user_file_of

__all__ = ["explain", "annotate", "install_excepthook", "origin_of", "register",
           "nan_variant", "user_function_of", "is_generated_file"]

_lock = threading.Lock()
_REGISTRY = {}  # generated file -> (user file, (first, last) line range of the function)
_MAPS = {}  # generated file -> {generated line: Origin}
_NOTE = "autodiff-ast:"


# ---------------------------------------------------------------- where a function lives
def user_function_of(transformed):
    """The user's Python function under a (possibly nested) transformation, or None.

    >>> import autodiff_ast as ad
    >>> def f(x):
    ...     return x * x
    >>> user_function_of(ad.grad(ad.grad(f))) is f
    True
    """
    fun = transformed
    for _ in range(32):
        py_fun = getattr(fun, "py_fun", None)
        if py_fun is not None:
            return py_fun
        inner = getattr(fun, "fun", None)
        if inner is None:
            break
        fun = inner
    return fun if inspect.isfunction(fun) or inspect.ismethod(fun) else None


def _location(fn):
    """(file, (first, last)) of a function's source, or None."""
    code = getattr(fn, "__code__", None) or getattr(getattr(fn, "__func__", None), "__code__",
                                                     None)
    if code is None:
        return None
    try:
        lines, start = inspect.getsourcelines(fn)
        return code.co_filename, (max(start, 1), max(start, 1) + len(lines) - 1)
    except (OSError, TypeError):
        return code.co_filename, (code.co_firstlineno, code.co_firstlineno)


def register(generated_file, user_fn):
    """Remember which user function a loaded generated file was written from."""
    where = _location(user_fn) if user_fn is not None else None
    if where is None:
        return
    with _lock:
        if _REGISTRY.get(generated_file) != where:
            _REGISTRY[generated_file] = where
            _MAPS.pop(generated_file, None)


def is_generated_file(filename):
    """Whether `filename` holds a module written by autodiff-ast (its first line says so)."""
    if filename in _REGISTRY:
        return True
    first = linecache.getline(filename, 1)
    return generated_header(first) is not None


def _map_for(filename):
    with _lock:
        if filename in _MAPS:
            return _MAPS[filename]
    source = "".join(linecache.getlines(filename))
    where = _REGISTRY.get(filename)
    if where is None:
        header = generated_header(source)
        user = user_file_of(filename, header[1]) if header else None
        if user is None:
            return {}
        name = header[0].split("(")[-1].split(",")[0].split(")")[0].strip()
        where = (user, function_range(linecache.getlines(user), name))
    mapping = line_map(source, where[0], where[1])
    with _lock:
        _MAPS[filename] = mapping
    return mapping


def origin_of(filename, lineno):
    """The user's :class:`Origin` of line `lineno` of generated file `filename`, or None."""
    if not is_generated_file(filename):
        return None
    return _map_for(filename).get(lineno)


# ---------------------------------------------------------------- exceptions
def _generated_frames(tb):
    return [f for f in traceback.extract_tb(tb) if is_generated_file(f.filename)]


def explain(exc):
    """Where in generated code `exc` was raised and which of your lines that code comes from
    (text; empty when it was not raised inside a generated module).

    >>> explain(ValueError("not from generated code"))
    ''
    """
    frames = _generated_frames(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    origin = origin_of(frame.filename, frame.lineno)
    text = (f"{_NOTE} raised in generated code, {os.path.basename(frame.filename)}:"
            f"{frame.lineno} (in {frame.name})\n    {(frame.line or '').strip()}")
    if origin is not None:
        text += (f"\n  which comes from your line {origin.filename}:{origin.lineno}\n"
                 f"    {origin.code}")
    return text


def annotate(exc):
    """Add :func:`explain`'s text to `exc` as a note (once); returns `exc`."""
    if getattr(exc, "__notes__", None) and any(n.startswith(_NOTE) for n in exc.__notes__):
        return exc
    text = explain(exc)
    if text and hasattr(exc, "add_note"):
        exc.add_note(text)
    return exc


def install_excepthook():
    """Make uncaught exceptions from generated modules name your line too (for modules the
    command line wrote, imported without going through autodiff-ast's API)."""
    previous = sys.excepthook
    if getattr(previous, "autodiff_ast", False):
        return

    def hook(kind, exc, tb):
        annotate(exc)
        previous(kind, exc, tb)
    hook.autodiff_ast = True
    sys.excepthook = hook


# ---------------------------------------------------------------- debug_nans
_CHECK = '''\
def check_finite(value, message):
    """debug_nans: raise FloatingPointError when `value` holds a NaN or an inf."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return
    if not np.all(np.isfinite(array)):
        raise FloatingPointError(message)
'''


def _targets(stmt):
    if isinstance(stmt, ast.Assign):
        nodes = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        nodes = [stmt.target]
    else:
        return []
    out = []
    for node in nodes:
        if isinstance(node, (ast.Tuple, ast.List)):
            out += [e for e in node.elts if isinstance(e, (ast.Name, ast.Subscript))]
        elif isinstance(node, (ast.Name, ast.Subscript)):
            out.append(node)
    return out


def nan_variant(source, user_fn):
    """`source` with a ``check_finite(...)`` call after every assignment of every generated
    function: the first NaN or inf raises, naming the generated statement and the user's line.
    """
    where = _location(user_fn) if user_fn is not None else None
    mapping = line_map(source, where[0], where[1]) if where else {}
    tree = ast.parse(source)
    lines = source.split("\n")
    inserts = {}  # line index after which to insert -> lines
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name == "check_finite":
            continue
        for stmt in ast.walk(fn):
            targets = _targets(stmt)
            if not targets:
                continue
            origin = mapping.get(stmt.lineno)
            generated = lines[stmt.lineno - 1].strip()
            indent = " " * stmt.col_offset
            for target in targets:
                what = ast.unparse(target)
                message = f"debug_nans: NaN or inf in {what}, computed by the generated line " \
                          f"`{generated}`"
                if origin is not None:
                    message += (f", from your line {os.path.basename(origin.filename)}:"
                                f"{origin.lineno}: {origin.code}")
                inserts.setdefault(stmt.end_lineno, []).append(
                    f"{indent}check_finite({what}, {message!r})")
    if not inserts:
        return source
    out = []
    for row, line in enumerate(lines, start=1):
        out.append(line)
        out += inserts.get(row, [])
    text = "\n".join(out)
    first_def = next(k for k, line in enumerate(out) if line.startswith(("def ", "@")))
    helper = _CHECK.rstrip("\n").split("\n")
    out = out[:first_def] + helper + ["", ""] + out[first_def:]
    text = "\n".join(out)
    if "import numpy as np" not in text:
        text = "import numpy as np\n" + text
    return text


def nans_enabled(flag):
    """Whether debug_nans applies: the transformation's own flag, else the global config."""
    if flag is not None:
        return bool(flag)
    from .config import config
    return bool(config.debug_nans)


def origin_line(origin: Origin | None) -> str:
    """``file:line: code`` of an origin ('' for None)."""
    return str(origin) if origin is not None else ""
