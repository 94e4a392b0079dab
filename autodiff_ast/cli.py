"""The command line: write derivatives and batched variants as Python modules you can keep.

::

    autodiff-ast grad model.py:loss [--argnums 0,1] [--signature "w=float64[N], b=float64"]
    autodiff-ast jacrev model.py:predict,loss -o jacobians.py     # several functions
    autodiff-ast hessian model.py -o hessians.py                  # every public function
    autodiff-ast vmap model.py:predict --in-axes 0,None --jit numba -o batched.py
    autodiff-ast show grad model.py:loss --side-by-side
    autodiff-ast check jacobians.py

The target is ``FILE.py:FUNC`` (the file is imported as the module named after it, with its
directory on ``sys.path``), ``package.module:FUNC``, several functions ``FILE.py:f,g``, or a
whole file ``FILE.py`` (its public functions; those that cannot be transformed are skipped with
a note). The written module imports numpy (numba with ``--jit numba``) and the data FUNC reads,
from FUNC's module by name, and nothing of ours. The transforms themselves live in
:mod:`autodiff_ast.cli_transforms`, the assembly of the module in :mod:`autodiff_ast.cli_module`
and ``check`` in :mod:`autodiff_ast.cli_check`.

Problems are reported as one line naming the file and line. Exit status: 0 success, 1 the code
cannot be loaded or transformed, 2 bad options, 3 an internal error (a bug: please report it),
4 ``check`` found a mismatch.

>>> import contextlib, io
>>> with contextlib.redirect_stderr(io.StringIO()) as err:
...     status = main(["grad", "no_such_file.py:f"])
>>> status, err.getvalue().strip()
(1, 'autodiff-ast: error: no_such_file.py: no such file')
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

from .cli_module import COMMAND_PREFIX, _after_docstring
from .cli_transforms import COMMANDS, TransformError, generate, options_for, parse_argnums
from .errors import AutodiffError

__all__ = ["main", "build_parser", "load_target", "load_targets", "write_atomically",
           "parse_argnums", "CliError", "EXIT_CODES"]

#: Exit statuses, as documented in ``--help`` and docs/cli.md.
EXIT_CODES = {0: "success", 1: "the code cannot be loaded, transformed or written",
              2: "bad options or usage", 3: "internal error (a bug: please report it)",
              4: "check: a generated function disagrees with its reference"}


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


def _is_file(text):
    return text.endswith(".py") or os.sep in text or "/" in text


def _public_functions(module):
    found = [v for k, v in vars(module).items() if not k.startswith("_") and
             inspect.isfunction(v) and v.__module__ == module.__name__]
    return sorted(found, key=lambda f: f.__code__.co_firstlineno)


def _lookup(module, where, func):
    value = module
    for part in func.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            names = sorted(f.__name__ for f in _public_functions(module))
            defined = f"; it defines {', '.join(names)}" if names else ""
            raise CliError(f"{where}: no function named {func!r}{defined}") from None
    if not (inspect.isfunction(value) or inspect.ismethod(value)):
        raise CliError(f"{where}: {func} is a {type(value).__name__}, not a Python function")
    return value


def load_targets(target):
    """(functions, module, where, whole_file) for ``FILE.py:f,g``, ``FILE.py`` (its public
    functions) or ``package.module:f``.

    >>> fns, module, where, whole = load_targets("autodiff_ast.checks:scalarized")
    >>> [f.__name__ for f in fns], module.__name__, whole
    (['scalarized'], 'autodiff_ast.checks', False)
    """
    left, sep, funcs = target.rpartition(":")
    if not sep and target.endswith(".py"):
        module = _import_file(target)
        functions = _public_functions(module)
        if not functions:
            raise CliError(f"{target}: defines no public function")
        return functions, module, target, True
    if not sep or not left or not funcs:
        raise CliError(f"{target}: expected FILE.py:FUNC, FILE.py:FUNC,FUNC, FILE.py or "
                       "package.module:FUNC", status=2)
    if _is_file(left):
        module, where = _import_file(left), left
    else:
        module = _import_module(left)
        where = getattr(module, "__file__", None) or left
    names = [n.strip() for n in funcs.split(",") if n.strip()]
    return [_lookup(module, where, n) for n in names], module, where, False


def load_target(target):
    """(function, module, where) for ``FILE.py:FUNC`` or ``package.module:FUNC``.

    >>> fn, module, where = load_target("autodiff_ast.checks:scalarized")
    >>> fn.__name__, module.__name__
    ('scalarized', 'autodiff_ast.checks')
    """
    functions, module, where, _ = load_targets(target)
    if len(functions) != 1:
        raise CliError(f"{target}: name one function", status=2)
    return functions[0], module, where


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


# ---------------------------------------------------------------- the parser
_EXAMPLES = """\
examples:
  autodiff-ast grad model.py:loss --argnums 0,1 -o grad_loss.py
  autodiff-ast grad model.py:loss --signature "w=float64[N], b=float64"
  autodiff-ast value-and-grad model.py:loss --has-aux
  autodiff-ast jvp model.py:predict --signature "w=float64[N]"
  autodiff-ast vjp pkg.model:predict -o vjp_predict.py
  autodiff-ast jacfwd model.py:predict,residual -o jacobians.py
  autodiff-ast hessian model.py -o hessians.py        (every public function of the file)
  autodiff-ast vmap model.py:predict --in-axes 0,None --out-axes 0
  autodiff-ast grad model.py:simulate --static steps=100 --jit numba -o grad_simulate.py
  autodiff-ast show grad model.py:loss --side-by-side
  autodiff-ast check grad_loss.py

targets: FILE.py:FUNC, FILE.py:FUNC,FUNC, FILE.py (its public functions), package.module:FUNC
types:   --signature gives each argument a dtype and axes: float64 (a scalar), float64[N]
         (N: any size), float64[N,1] (1: size one), float64[...] (any rank), int, bool;
         else annotations (x: "float64[N]", x: float), else number defaults, else float64
         arrays of any rank.

exit status:
""" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())

_HELP = {
    "grad": "write grad_FUNC, the gradient of a scalar-output function",
    "value-and-grad": "write value_and_grad_FUNC, returning (value, gradient)",
    "jvp": "write jvp_FUNC(params..., tangents...) -> (out, out_dot)",
    "vjp": "write FUNC_fwd, FUNC_bwd and vjp_FUNC(params..., out_bar) -> (out, cotangents)",
    "jacfwd": "write jacfwd_FUNC, the Jacobian by forward mode (JAX's layout)",
    "jacrev": "write jacrev_FUNC, the Jacobian by reverse mode (JAX's layout)",
    "hessian": "write hessian_FUNC, the Hessian of a scalar-output function",
    "vmap": "write vmap_FUNC, FUNC mapped over an axis of its arguments",
}


def _transform_arguments(sub, name):
    sub.add_argument("target", metavar="TARGET",
                     help="FILE.py:FUNC, FILE.py:FUNC,FUNC, FILE.py or package.module:FUNC")
    if name in ("grad", "value-and-grad", "jacfwd", "jacrev", "hessian"):
        sub.add_argument("--argnums", metavar="0,1",
                         help="positions (or names) of the differentiated arguments "
                              "(default 0)")
    if name in ("grad", "value-and-grad", "jvp", "jacfwd", "jacrev"):
        sub.add_argument("--has-aux", action="store_true",
                         help="FUNC returns (output, aux); aux is passed through")
    if name == "vmap":
        sub.add_argument("--in-axes", metavar="0,None", default=None,
                         help="the mapped axis of each argument (int or None; one value for "
                              "all; default 0)")
        sub.add_argument("--out-axes", metavar="0", default=None,
                         help="where the batch axis goes in each output (default 0)")
    sub.add_argument("--signature", metavar='"x=float64[N], y=float64"',
                     help="argument types (for vmap: of one example): dtype[axes], each axis "
                          "N (any size) or 1; float64 alone is a scalar")
    sub.add_argument("--static", metavar="NAME=VALUE", action="append", default=[],
                     help="fix an argument to a Python literal when writing (repeatable); "
                          "the written function no longer takes it")


def _add_transforms(commands, with_output=True):
    for name in COMMANDS:
        sub = commands.add_parser(name, help=_HELP[name], description=_HELP[name],
                                  epilog=_EXAMPLES,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        _transform_arguments(sub, name)
        if not with_output:  # under show: its options may follow the transform too
            _show_arguments(sub, default=argparse.SUPPRESS)
        if with_output:
            sub.add_argument("--jit", choices=("numba", "cuda"),
                             help="write compiled code: numba puts @numba.njit(cache=True) on "
                                  "every function; cuda writes a kernel with one thread per "
                                  "example (vmap, or grad for per-example gradients; needs "
                                  "per-example sizes in --signature)")
            sub.add_argument("-o", "--output", metavar="OUT.py",
                             help="write the module here (atomically) instead of printing it")
        sub.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS)


def _show_arguments(parser, default=None):
    def given(value):
        return value if default is None else default
    parser.add_argument("--side-by-side", action="store_true", default=given(False),
                        help="FUNC beside the generated code, each generated line numbered "
                             "with the line of FUNC it comes from")
    parser.add_argument("--color", choices=("auto", "always", "never"), default=given("auto"),
                        help="colours: auto (a terminal with Pygments), always or never")
    parser.add_argument("--html", metavar="PAGE.html", default=given(None),
                        help="write FUNC and the generated code side by side as an HTML page")
    parser.add_argument("--width", type=int, default=given(None),
                        help="columns for --side-by-side")


def build_parser():
    """The ``autodiff-ast`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="autodiff-ast",
        description="Write derivatives and batched variants of Python/NumPy functions as "
                    "standalone modules.",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_transforms(commands)
    show = commands.add_parser(
        "show", help="print the generated source with syntax highlighting",
        description="Print what a transform would write, highlighted in a terminal (Pygments "
                    "when installed). Example: autodiff-ast show grad model.py:loss",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _show_arguments(show)
    inner = show.add_subparsers(dest="transform", required=True, metavar="TRANSFORM")
    _add_transforms(inner, with_output=False)
    check = commands.add_parser(
        "check", help="verify a written module against finite differences at random inputs",
        description="Read the command recorded in a module written by autodiff-ast, draw "
                    "random inputs and compare each function with a reference computed from "
                    "FUNC itself (central differences; a loop over examples for vmap). "
                    "Exit status 4 when one disagrees.",
        epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("module", metavar="MODULE.py", help="a module written with -o")
    check.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    check.add_argument("--size", type=int, default=3,
                       help="size of each N axis and of arrays of unknown rank (default 3)")
    check.add_argument("--sizes", metavar="n=4,d=3", default="",
                       help="sizes of named axes in the signature (float64[n,d])")
    check.add_argument("--positive", action="store_true",
                       help="draw inputs from [0.5, 1.5] (default: normal, falling back to "
                            "[0.5, 1.5] where FUNC is not finite)")
    check.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance")
    check.add_argument("--atol", type=float, default=1e-6,
                       help="absolute tolerance (scaled by the largest reference value)")
    check.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS)
    return parser


# ---------------------------------------------------------------- running
def _command_text(command, args):
    """The canonical command line of a transform (recorded in the module it writes)."""
    parts = [command, args.target]
    if getattr(args, "argnums", None) is not None:
        parts += ["--argnums", args.argnums]
    if getattr(args, "has_aux", False):
        parts.append("--has-aux")
    for flag in ("in_axes", "out_axes"):
        if getattr(args, flag, None) is not None:
            parts += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    if args.signature:
        parts += ["--signature", args.signature]
    for item in args.static:
        parts += ["--static", item]
    if getattr(args, "jit", None):
        parts += ["--jit", args.jit]
    return "autodiff-ast " + shlex.join(parts)


def _options(args):
    from .cli_check import options_from
    try:
        return options_from(args)
    except TransformError as exc:
        raise CliError(str(exc), exc.status) from None


def _check_names(functions, options):
    from .signatures import _split_top_level
    taken = set()
    for fn in functions:
        taken |= set(inspect.signature(fn).parameters)
    named = [p.partition("=")[0].strip() for p in _split_top_level(options.signature or "")]
    unknown = sorted((set(named) | set(options.static)) - taken)
    if unknown:
        raise CliError(f"--signature/--static name {', '.join(unknown)}, which none of "
                       f"{', '.join(f.__name__ for f in functions)} takes", status=2)


def _transform(command, args):
    """(module text, functions, module) that a transform command writes."""
    from .cli_module import lower_for_numba, merge
    functions, module, where, whole = load_targets(args.target)
    options = _options(args)
    if getattr(args, "jit", None) == "cuda":
        return _cuda_kernel(command, functions, options, args), functions, module, where
    pieces, skipped = [], []
    if len(functions) > 1:
        _check_names(functions, options)
    for fn in functions:
        try:
            own = options_for(fn, options) if len(functions) > 1 else options
            pieces.append(generate(command, fn, module, own))
        except (TransformError, AutodiffError, NotImplementedError, TypeError) as exc:
            if not whole:
                raise
            text = exc.one_line() if isinstance(exc, AutodiffError) else str(exc)
            skipped.append(f"autodiff-ast: skipped {fn.__name__}: {text}")
    for line in skipped:
        print(line.splitlines()[0], file=sys.stderr)
    if not pieces:
        raise CliError(f"{where}: no function could be transformed by {command}")
    entries = [p.entry for p in pieces]
    source = merge([p.source for p in pieces], _command_text(command, args), entries)
    if getattr(args, "jit", None) == "numba":
        source = lower_for_numba(source, entries)
    return source, [fn for fn in functions if fn.__name__ in {p.function for p in pieces}], \
        module, where


def _cuda_kernel(command, functions, options, args):
    """The CUDA kernel module of ``vmap`` (one thread per example) or of ``grad`` (per-example
    gradients: every argument mapped along axis 0), for the per-example sizes the signature
    gives (device code needs constant sizes)."""
    from .cli_check import axis_sizes
    from .cli_transforms import specs_of
    if command not in ("vmap", "grad"):
        raise CliError(f"--jit cuda writes a kernel with one thread per example: use it with "
                       f"vmap (or grad, for per-example gradients), not {command}", status=2)
    if len(functions) != 1:
        raise CliError("--jit cuda writes one kernel: name one function", status=2)
    fn = functions[0]
    axes = re.findall(r"\[([^\]]*)\]", options.signature or "")
    if not options.signature or not all(t.strip().isdigit() for a in axes for t in a.split(",")):
        raise CliError(f"--jit cuda: a CUDA kernel is specialised on the per-example sizes: "
                       f"give them, e.g. --signature \"x=float64[8]\" (for {fn.__name__})",
                       status=2)
    import numpy as np

    from .batching import vmap
    from .cuda import kernel_source
    from .normalize import Static
    sizes = axis_sizes(fn, options, 1, {})
    specs = specs_of(fn, options)
    names = [n for n in specs if not isinstance(specs[n], Static)]
    if command == "grad":
        from .api import grad
        nums = parse_argnums(options.argnums, list(specs))
        transform, axes = vmap(grad(fn, nums)), (0,) * len(names)
    else:
        axes = options.in_axes if isinstance(options.in_axes, tuple) else \
            (options.in_axes,) * len(names)
        transform = vmap(fn, in_axes=options.in_axes, out_axes=options.out_axes)
    examples = []
    for n, axis in zip(names, axes):
        one = np.ones(sizes[n]) if sizes[n] is not None else 1.0
        examples.append(one if axis is None else np.stack([one, one], axis=axis))
    try:
        text = kernel_source(transform, *examples)
    except (ImportError, ModuleNotFoundError) as exc:
        raise CliError(f"--jit cuda needs numba's CUDA support: {exc}", status=2) from None
    return _after_docstring(text, COMMAND_PREFIX + _command_text(command, args)[
        len("autodiff-ast "):])


def _run_transform(args):
    source, _, module, where = _transform(args.command, args)
    if args.output:
        protect = [p for p in (getattr(module, "__file__", None), where) if p]
        write_atomically(args.output, source, protect)
    else:
        sys.stdout.write(source)


def _run_show(args):
    from .display import highlight, html_page, side_by_side
    from .linemap import line_map
    source, functions, _, _ = _transform(args.transform, args)
    color = {"always": True, "never": False, "auto": None}[args.color]
    if not (args.side_by_side or args.html):
        sys.stdout.write(highlight(source, color))
        return
    if len(functions) != 1:
        raise CliError("--side-by-side and --html show one function: name one", status=2)
    fn = functions[0]
    lines, first = inspect.getsourcelines(fn)
    filename = fn.__code__.co_filename
    last = first + len(lines) - 1
    mapping = line_map(source, filename, (first, last))
    user = [(first + k, line.rstrip("\n")) for k, line in enumerate(lines)]
    text = source.rstrip("\n").split("\n")
    start = next((k for k, line in enumerate(text) if line.startswith(("def ", "@"))), 0)
    generated = [(k + 1, text[k]) for k in range(start, len(text))]
    title = (f"{fn.__name__} ({os.path.basename(filename)})", f"autodiff-ast {args.transform}")
    if args.html:
        write_atomically(args.html, html_page(user, generated, mapping, title,
                                              heading=f"{args.transform}({fn.__name__})"))
        return
    from .display import _use_color
    sys.stdout.write(side_by_side(user, generated, mapping, title, args.width,
                                  _use_color(color)))


def _run_check(args):
    from .cli_check import check_module
    fixed = {}
    for item in [s for s in args.sizes.split(",") if s.strip()]:
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise CliError(f"--sizes: write NAME=SIZE, e.g. --sizes n=4,d=3 (got {item!r})",
                           status=2)
        fixed[name.strip()] = int(value)
    if not Path(args.module).is_file():
        raise CliError(f"{args.module}: no such file")

    def parse(argv):
        try:
            return build_parser().parse_args(argv)
        except SystemExit:
            raise CliError(f"{args.module}: the recorded command is not valid") from None

    def load(target):
        functions, module, where, _ = load_targets(target)
        return functions, module, where
    results = check_module(args.module, parse, load, seed=args.seed, size=args.size,
                           fixed=fixed, positive=args.positive, tol=(args.rtol, args.atol))
    for result in results:
        print(result.line())
    if not all(r.ok for r in results):
        return 4
    return 0


def run(args):
    """Run parsed arguments; returns the exit status."""
    if args.command == "show":
        _run_show(args)
        return 0
    if args.command == "check":
        return _run_check(args)
    _run_transform(args)
    return 0


def main(argv=None):
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (CliError, TransformError) as exc:
        print(f"autodiff-ast: error: {exc}", file=sys.stderr)
        return exc.status
    except AutodiffError as exc:
        print(f"autodiff-ast: error: {exc.one_line()}", file=sys.stderr)
        return 1
    except NotImplementedError as exc:
        print(f"autodiff-ast: error: not supported yet: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug of ours: still one line unless asked
        if args.traceback:
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        print(f"autodiff-ast: internal error: {type(exc).__name__}: {exc}{at} (please report "
              "it; --traceback shows the details)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
