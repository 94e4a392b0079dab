"""The command line: write a function's derivative as a Python module you can keep.

::

    autodiff-ast grad model.py:loss [--argnums 0,1] [--signature "w=float64[N], b=float64"]
                                    [--has-aux] [-o grad_loss.py]
    autodiff-ast value-and-grad pkg.module:loss ...
    autodiff-ast vjp model.py:predict ...

The target is ``FILE.py:FUNC`` (the file is imported as the module named after it, with its
directory on ``sys.path``) or ``package.module:FUNC`` (imported from the current directory or
the installed packages). ``grad`` writes a module defining ``grad_FUNC`` with FUNC's parameters;
``value-and-grad`` writes ``value_and_grad_FUNC``; ``vjp`` writes ``FUNC_fwd``/``FUNC_bwd`` and
``vjp_FUNC(params..., out_bar) -> (out, cotangents)``. The module imports numpy (and the data
FUNC reads, from FUNC's module by name) and nothing of ours.

Argument types come from ``--signature``, else from FUNC's annotations (``x: float``,
``x: "float64[N]"``), else from a number default, else every parameter is taken to be a float64
array of any rank (the generated code then sums broadcast adjoints with an emitted
``unbroadcast`` helper). Without ``-o`` the module is printed; with it, it is written
atomically (never over the input file). Problems are reported as one line naming the file and
line, with a non-zero exit status (1: the code cannot be differentiated or loaded; 2: bad
options).

>>> import contextlib, io
>>> with contextlib.redirect_stderr(io.StringIO()) as err:
...     status = main(["grad", "no_such_file.py:f"])
>>> status, err.getvalue().strip()
(1, 'autodiff-ast: error: no_such_file.py: no such file')
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
import traceback
from pathlib import Path

from . import types as T
from .errors import AutodiffError
from .signatures import DEFAULT, SignatureError, signature_of


class CliError(Exception):
    """A problem reported as one line; `status` is the exit status."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------- loading the target
def _user_frame(tb, path):
    """(filename, line) of the innermost traceback frame in the user's file."""
    where = None
    for frame in traceback.extract_tb(tb):
        if os.path.abspath(frame.filename) == os.path.abspath(path):
            where = (frame.filename, frame.lineno)
    return where


def _import_file(path):
    path = Path(path)
    if not path.is_file():
        raise CliError(f"{path}: no such file")
    name = path.stem
    if not name.isidentifier():
        raise CliError(f"{path}: the file name is not a module name (the generated module "
                       "imports its data by that name); rename it")
    existing = sys.modules.get(name)
    if existing is not None:
        if os.path.abspath(getattr(existing, "__file__", "") or "") == str(path.resolve()):
            return existing
        raise CliError(f"{path}: a module named {name!r} is already imported from elsewhere "
                       "(the file name shadows it); rename the file")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, str(path.resolve()))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout may carry the generated module
            spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise CliError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except BaseException as exc:  # noqa: BLE001 - anything the user's module raises
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        where = _user_frame(exc.__traceback__, path)
        loc = f"{path}:{where[1]}" if where else str(path)
        raise CliError(f"{loc}: importing it raised {type(exc).__name__}: {exc}") from None
    return module


def _import_module(name):
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current directory first
    try:
        with contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(name)
    except SyntaxError as exc:
        raise CliError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ModuleNotFoundError as exc:
        raise CliError(f"cannot import {name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything the user's module raises
        frames = traceback.extract_tb(exc.__traceback__)
        loc = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
        raise CliError(f"{loc}importing {name} raised {type(exc).__name__}: {exc}") from None


def load_target(target):
    """(function, module, where) for ``FILE.py:FUNC`` or ``package.module:FUNC``.

    >>> fn, module, where = load_target("autodiff_ast.checks:scalarized")
    >>> fn.__name__, module.__name__
    ('scalarized', 'autodiff_ast.checks')
    """
    left, sep, func = target.rpartition(":")
    if not sep or not left or not func:
        raise CliError(f"{target}: expected FILE.py:FUNC or package.module:FUNC", status=2)
    if left.endswith(".py") or os.sep in left or "/" in left:
        module = _import_file(left)
        where = left
    else:
        module = _import_module(left)
        where = getattr(module, "__file__", None) or left
    value = module
    for part in func.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            names = sorted(k for k, v in vars(module).items()
                           if inspect.isfunction(v) and v.__module__ == module.__name__)
            defined = f"; it defines {', '.join(names)}" if names else ""
            raise CliError(f"{where}: no function named {func!r}{defined}") from None
    if not (inspect.isfunction(value) or inspect.ismethod(value)):
        raise CliError(f"{where}: {func} is a {type(value).__name__}, not a Python function")
    return value, module, where


# ---------------------------------------------------------------- options
def parse_argnums(text, params):
    """``"0,1"`` (or parameter names, ``"w,b"``) as an int or a tuple of ints.

    >>> parse_argnums("0", ["x", "y"]), parse_argnums("1,x", ["x", "y"])
    (0, (1, 0))
    """
    if text is None:
        return 0
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise CliError("--argnums: give argument positions, e.g. --argnums 0,1", status=2)
    nums = []
    for part in parts:
        if part.lstrip("-").isdigit():
            nums.append(int(part))
        elif part in params:
            nums.append(params.index(part))
        else:
            raise CliError(f"--argnums: {part!r} is neither a position nor a parameter "
                           f"({', '.join(params)})", status=2)
    return nums[0] if len(nums) == 1 and "," not in text else tuple(nums)


def _specs(fn, text):
    """Abstract types of fn's parameters (signature, annotations, number defaults, default)."""
    try:
        specs = signature_of(fn, text)
    except SignatureError as exc:
        raise CliError(f"--signature: {exc}" if text else f"{fn.__code__.co_filename}:"
                       f"{fn.__code__.co_firstlineno}: {exc}", status=2) from None
    given = set()
    if text:
        given = {part.partition("=")[0].strip() for part in text.split(",") if "=" in part}
    for p in inspect.signature(fn).parameters.values():
        default = p.default
        if p.name in given or specs.get(p.name) is not DEFAULT or default is p.empty:
            continue
        if isinstance(default, (int, float)):  # a number default says what the value is
            typ = T.abstract_of(default)
            specs[p.name] = T.AType(typ.kind, typ.dtype)
    return specs


# ---------------------------------------------------------------- generating
def _literal(value):
    return isinstance(value, (int, float, bool, str)) or value is None


def _parameter_list(fn):
    """FUNC's parameters as written in a def line, with literal defaults kept."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    keep_defaults = all(_literal(p.default) for p in params if p.default is not p.empty)
    parts, star_done = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        text = p.name
        if keep_defaults and p.default is not p.empty:
            text += f"={p.default!r}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (
                p is params[-1] or params[params.index(p) + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    return ", ".join(parts)


def _with_parameters(source, entry, flat_params, fn):
    """Give the entry function FUNC's own parameter list (defaults, keyword-only markers)."""
    names = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if names != list(flat_params):
        return source
    old = f"def {entry}({', '.join(flat_params)}):"
    new = f"def {entry}({_parameter_list(fn)}):"
    return source.replace(old, new, 1) if source.count(old) == 1 else source


def _check_standalone(generated, fn):
    if generated.injected:
        names = ", ".join(sorted(generated.injected))
        code = fn.__code__
        raise CliError(f"{code.co_filename}:{code.co_firstlineno}: {fn.__name__} reads "
                       f"{names}, which the generated module cannot import (not a module-level "
                       "name of an importable module); make it a module-level name or pass it "
                       "as an argument")


def _vjp_wrapper(generated, fn):
    """``vjp_FUNC(params..., out_bar)`` calling the generated forward and backward functions."""
    tree = ast.parse(generated.source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    fwd, bwd = functions[generated.entry], functions[generated.extra["bwd"]]
    params = generated.layout["params"]
    returned = fwd.body[-1].value
    n_res = generated.layout["residuals"]
    if n_res:
        residuals = [ast.unparse(e) for e in returned.elts[1:]] if isinstance(
            returned, ast.Tuple) else []
    else:
        residuals = []
    taken = set(params) | set(residuals)

    def free(base):
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name
    out = free("out")
    n_seeds = generated.layout["n_seeds"]
    seeds = [free("out_bar")] if n_seeds == 1 else [free(f"out{i}_bar") for i in range(n_seeds)]
    bwd_args = [a.arg for a in bwd.args.args]
    n_bwd_params = len(generated.layout["bwd_params"])
    call_args = bwd_args[:n_bwd_params] + residuals + seeds
    lhs = ", ".join([out] + residuals)
    name = f"vjp_{fn.__name__}"
    lines = [
        f"def {name}({', '.join(params + seeds)}):",
        f'    """{fn.__name__}(...) and the cotangents of its inputs for {", ".join(seeds)}."""',
        f"    {lhs} = {generated.entry}({', '.join(params)})",
        f"    return {out}, {generated.extra['bwd']}({', '.join(call_args)})",
    ]
    return generated.source + "\n\n" + "\n".join(lines) + "\n"


def _jax_layout(source, entry, with_value, has_aux, single):
    """Rewrite the entry's flat ``return value, aux, g0, g1`` as JAX lays it out:
    ``((value, aux), (g0, g1))``, ``(value, g)``, ``(g, aux)``..."""
    if not (with_value or has_aux or not single):
        return source
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)
    ret = fn.body[-1]
    elts = list(ret.value.elts) if isinstance(ret.value, ast.Tuple) else [ret.value]
    n_extra = int(with_value) + int(has_aux)
    extra, grads = elts[:n_extra], elts[n_extra:]
    grads = grads[0] if single else ast.Tuple(elts=grads, ctx=ast.Load())
    if with_value and has_aux:
        value = ast.Tuple(elts=[ast.Tuple(elts=extra, ctx=ast.Load()), grads], ctx=ast.Load())
    elif with_value:
        value = ast.Tuple(elts=[extra[0], grads], ctx=ast.Load())
    elif has_aux:
        value = ast.Tuple(elts=[grads, extra[0]], ctx=ast.Load())
    else:
        value = grads
    lines = source.split("\n")
    indent = lines[ret.lineno - 1][:ret.col_offset]
    lines[ret.lineno - 1:ret.end_lineno] = [indent + "return " + ast.unparse(value)]
    return "\n".join(lines)


def generate(command, fn, module, argnums=None, signature=None, has_aux=False):
    """The source of the module `command` (grad, value-and-grad, vjp) writes for `fn`."""
    from .build import build_reverse, build_vjp
    specs = _specs(fn, signature)
    params = list(specs)
    module_name = module.__name__
    if command == "vjp":
        generated = build_vjp(fn, specs, standalone_module=module_name)
        _check_standalone(generated, fn)
        return _vjp_wrapper(generated, fn)
    nums = parse_argnums(argnums, params)
    single = isinstance(nums, int)
    resolved = tuple(i % len(params) if -len(params) <= i < 0 else i
                     for i in ((nums,) if single else nums))
    with_value = command == "value-and-grad"
    generated = build_reverse(fn, specs, argnums=resolved, has_aux=has_aux,
                              with_value=with_value, standalone_module=module_name,
                              argnums_text=nums)
    _check_standalone(generated, fn)
    source = _jax_layout(generated.source, generated.entry, with_value, has_aux, single)
    flat = generated.layout.get("params") or params
    return _with_parameters(source, generated.entry, flat, fn)


# ---------------------------------------------------------------- writing
def write_atomically(path, text, protect=()):
    """Write `text` to `path` through a temporary file and os.replace; never over `protect`.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = pathlib.Path(tmp) / "m.py"
    ...     write_atomically(out, "x = 1\\n")
    ...     out.read_text()
    'x = 1\\n'
    """
    path = Path(path)
    for other in protect:
        if path.resolve() == Path(other).resolve() or (
                path.exists() and Path(other).exists() and os.path.samefile(path, other)):
            raise CliError(f"{path}: refusing to overwrite the input file")
    if not path.parent.is_dir():
        raise CliError(f"{path}: the directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


# ---------------------------------------------------------------- entry point
def build_parser():
    parser = argparse.ArgumentParser(
        prog="autodiff-ast",
        description="Write the derivative of a Python/NumPy function as a standalone module.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {"grad": "write grad_FUNC, the gradient of a scalar-output function",
             "value-and-grad": "write value_and_grad_FUNC, returning (value, gradient)",
             "vjp": "write FUNC_fwd, FUNC_bwd and vjp_FUNC (vector-Jacobian product)"}
    for name, text in helps.items():
        sub = commands.add_parser(name, help=text, description=text)
        sub.add_argument("target", metavar="FILE.py:FUNC | package.module:FUNC")
        if name != "vjp":
            sub.add_argument("--argnums", metavar="0,1",
                             help="positions (or names) of the differentiated arguments "
                                  "(default 0)")
            sub.add_argument("--has-aux", action="store_true",
                             help="FUNC returns (output, aux); aux is passed through")
        sub.add_argument("--signature", metavar='"x=float64[N], y=float64"',
                         help="argument types: dtype[axes], each axis N (any size) or 1; "
                              "float64 alone is a scalar; float64[...] any rank")
        sub.add_argument("-o", "--output", metavar="OUT.py",
                         help="write the module here (atomically) instead of printing it")
        sub.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS)
    return parser


def run(args):
    fn, module, where = load_target(args.target)
    source = generate(args.command, fn, module, argnums=getattr(args, "argnums", None),
                      signature=args.signature, has_aux=getattr(args, "has_aux", False))
    if args.output:
        protect = [p for p in (getattr(module, "__file__", None), where) if p]
        write_atomically(args.output, source, protect)
    else:
        sys.stdout.write(source)


def main(argv=None):
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except CliError as exc:
        print(f"autodiff-ast: error: {exc}", file=sys.stderr)
        return exc.status
    except AutodiffError as exc:
        print(f"autodiff-ast: error: {exc.one_line()}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug of ours: still one line unless asked
        if args.traceback:
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        print(f"autodiff-ast: internal error: {type(exc).__name__}: {exc}{at} (please report "
              "it; --traceback shows the details)", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
