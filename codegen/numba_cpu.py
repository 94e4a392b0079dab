"""The Numba CPU target: a generated module, lowered into the compiled dialect, with every
function compiled by ``numba.njit`` in nopython mode (never object mode).

:func:`compile_module` lowers the source (:mod:`codegen.dialect`), puts a decorator such as
``@numba.njit(cache=True, fastmath={'contract'}, error_model='numpy')`` on each function
(multiply-adds: see :meth:`NumbaOptions.decorator`), notes the library versions in the module
docstring (so they are part of the content hash that names the file), writes it with
:func:`codegen.loader.load_source` and returns a :class:`CompiledModule`, whose entry points
compile on their first call.

Numba's on-disk cache sits beside the module (or in ``$NUMBA_CACHE_DIR``) and is keyed by the
file's path and modification time, which content-hashed files keep stable. We add a manifest:
after a successful compile the hashes of each function's cache files are written next to the
module (``<module>.numba.json``); before a module is used in a new process every cache file is
checked against it, and files that do not match (corrupt, truncated, written by a process that
crashed) are deleted so Numba rebuilds them instead of loading them.

When Numba cannot compile, the entry point raises :class:`CompileFailure` naming the generated
function, line and Numba's reason; :mod:`autodiff_ast.jit` maps it back to the user's line.

Not done yet (notes for whoever continues):

- very long generated functions are not split; Numba's compile time grows faster than linearly
  with function length (numba-notes.md: 800 statements ~150 s, ~55 s split in 50s). A pass
  here could cut a long straight-line body into helper functions passing live names. For
  ADBench GMM's gradient (an entry of ~245 lines with loops) a hand split into three
  functions compiled slower (7.7-8.0 s against 4.7-6.9 s) and ran no faster;
- ``parallel=True`` is passed through as is: size-one broadcasting under it (numba#3729) is not
  lowered (``jit(vmap(f), batching='loop')`` avoids it: only its prange driver is parallel,
  see :mod:`autodiff_ast.batch_loop`);
- loop adjoints are rewritten before and after differentiation (gather-form stencils in
  :mod:`autodiff_ast.gather_form`, fused elementwise runs in :mod:`codegen.fused_regions`,
  tables of loop-invariant calls in :mod:`codegen.invariant_tables`), but a loop nest is not
  reordered: ADBench GMM's backward sweep spends most of its time in 10-element inner loops
  that a points-innermost order would run over 1000 points;
- Numba here has no SVML, so transcendental-heavy array expressions (tanh, exp, log) run slower
  than NumPy's vectorized versions; installing ``icc_rt`` does not change that with the PyPI
  llvmlite wheels, whose LLVM is not patched for SVML (``numba -s``).
"""

from __future__ import annotations

import ast
import contextlib
import glob
import hashlib
import json
import os
import platform
import re
import tempfile
from dataclasses import dataclass, field

import numpy as np

from .allocator import keep_large_blocks
from .blas_threads import calm_blas_threads
from .helpers import DIALECT_JIT_OPTIONS
from .llvm_options import allow_more_memory_checks
from .loader import load_source
from .overload_sharing import share_overload_implementations
from .threading_layer import configure_threading

# gast and codegen.dialect are imported when a module is lowered: a module loaded again from
# its text (load_compiled, the warm start) needs neither.

__all__ = ["CompileFailure", "CompiledModule", "NumbaOptions", "compile_module", "load_compiled",
           "versions"]


def contracts_by_default():
    """Whether generated functions let LLVM fuse `a * b + c` into one multiply-add: yes,
    unless the environment says ``AUTODIFF_AST_FP_CONTRACT=0``.

    >>> isinstance(contracts_by_default(), bool)
    True
    """
    return os.environ.get("AUTODIFF_AST_FP_CONTRACT", "") != "0"


@dataclass(frozen=True)
class NumbaOptions:
    """How the functions of one module are compiled."""

    cache: bool = True
    parallel: bool = False
    error_model: str = "numpy"  # x / 0.0 gives inf as in NumPy, and no division checks
    fastmath: bool = False
    # a * b + c as one fused multiply-add (fastmath={'contract'}), unless the environment says no
    contract: bool = field(default_factory=contracts_by_default)
    nogil: bool = False  # release the GIL while compiled code runs (pmap's worker threads)
    prange: tuple = ()  # functions compiled with parallel=True alone (prange drivers)

    def decorator(self, function=None, internal=False, extra=None):
        """The decorator written above each compiled function (above `function`, when given:
        the names in `prange` get parallel=True). An `internal` function is only ever called
        from compiled code: it gets neither the CPython nor the C-callback wrapper (each costs
        LLVM time on the first compile and is never used). `extra` is one more option a
        dialect helper asks for (:data:`codegen.helpers.DIALECT_JIT_OPTIONS`); its fastmath
        flags join ``contract``.

        ``contract`` lets LLVM fuse a multiplication and the addition reading it into one
        multiply-add instruction (rounded once: results differ from NumPy's in the last bits,
        as a C compiler's ``-ffp-contract`` makes them). Measured in one process, the same
        gradients compiled both ways and timed in turns: ADBench GMM 12.61 -> 11.06 ms, LSTM
        10.13 -> 8.55 ms, BA 5.42 -> 5.03 ms, the heat equation 3.05 -> 2.87 ms, the mixture
        kernel 2.14 -> 2.01 ms (medians of 7 rounds, in a slow phase of a noisy machine).

        >>> NumbaOptions(contract=True).decorator()
        "numba.njit(cache=True, fastmath={'contract'}, error_model='numpy')"
        >>> NumbaOptions(prange=("vmap_f",), contract=False).decorator("vmap_f")
        "numba.njit(cache=True, parallel=True, error_model='numpy')"
        >>> NumbaOptions(contract=True).decorator("sum_loop", extra="fastmath={'reassoc'}")
        "numba.njit(cache=True, fastmath={'contract', 'reassoc'}, error_model='numpy')"
        """
        parts = [f"cache={self.cache}"]
        if self.parallel or (function is not None and function in self.prange):
            parts.append("parallel=True")
        flags = set()
        if extra and not extra.startswith("fastmath="):
            parts.append(extra)
        elif extra and not self.fastmath:  # (fastmath=True has every flag)
            flags = set(ast.literal_eval(extra.split("=", 1)[1]))
        if self.contract:
            flags.add("contract")
        if self.fastmath:
            parts.append("fastmath=True")
        elif flags:
            parts.append("fastmath={" + ", ".join(repr(f) for f in sorted(flags)) + "}")
        if self.nogil:
            parts.append("nogil=True")
        parts.append(f"error_model={self.error_model!r}")
        if internal:
            parts += ["no_cpython_wrapper=True", "no_cfunc_wrapper=True"]
        return f"numba.njit({', '.join(parts)})"


def versions():
    """Versions (and a non-default LLVM optimization level) that decide whether compiled code
    can be reused: part of the module text, so of the content hash that names its file.

    >>> sorted(versions())[:5]
    ['autodiff-ast', 'llvmlite', 'numba', 'numpy', 'python']
    """
    import llvmlite
    import numba
    import numpy
    out = {"python": platform.python_version(), "numpy": numpy.__version__,
           "numba": numba.__version__, "llvmlite": llvmlite.__version__,
           "autodiff-ast": _our_version()}
    if int(numba.config.OPT) != 3 or numba.config.OPT.is_opt_max:
        out["NUMBA_OPT"] = "max" if numba.config.OPT.is_opt_max else str(int(numba.config.OPT))
    return out


def _our_version():
    """This package's version (the code that wrote the module is part of its key; its files'
    sizes and times are too, autodiff_ast/warmstart.py). Read from the package itself:
    importlib.metadata took ~55 ms on the first call, a tenth of a warm start."""
    from autodiff_ast import __version__
    return __version__


class CompileFailure(Exception):
    """Numba could not compile a generated module."""

    def __init__(self, reason, filename, lineno, function, code):
        self.reason = reason
        self.filename = filename  # the generated module's file
        self.lineno = lineno  # line in that file (None when Numba did not say)
        self.function = function  # the generated function holding that line
        self.code = code  # the text of that line
        where = f"{filename}:{lineno}" if lineno else filename
        super().__init__(f"{where}: {reason}")


# ---------------------------------------------------------------- compiling a module
def compile_module(source, name, entries, injected=None, options=None, note=None):
    """Lower, decorate, write and import `source`; returns a :class:`CompiledModule`.

    `entries` are the functions callers use; `injected` maps module data names the loader sets
    to their values; `note` is added to the module docstring. Functions compile on their first
    call; if Numba then refuses the module and it holds ``np.dot`` or ``@`` (which Numba takes
    for 1-D and 2-D arrays only: batched code needs more), it is lowered again with both written
    for any rank and compiled once more.
    """
    _prepare_process()
    import numba  # noqa: F401  (imported here: the module text imports it too)
    build = _Build(source, name, list(entries), dict(injected or {}),
                   options or NumbaOptions(), note)
    compiled = CompiledModule(build, *build.make(general_dot=False))
    if os.path.exists(_general_marker(compiled.module.__file__)):
        compiled.generalize()  # an earlier process found Numba refuses the first form
    return compiled


@dataclass
class _Lowered:
    """What a CompiledModule reads of a LoweredModule, kept from an earlier process."""

    compiled: set
    data_args: dict = field(default_factory=dict)
    dict_outputs: dict = field(default_factory=dict)  # entry -> spec (codegen/dict_outputs.py)


def load_compiled(text, name, source, entries, compiled, data_args, options=None, note=None,
                  dict_outputs=None):
    """The :class:`CompiledModule` of module `text` that :func:`compile_module` wrote for
    `source` in an earlier process, without lowering `source` again.

    `compiled` names the functions Numba compiles and `data_args` maps an entry to the module
    data appended to its calls (from the :class:`CompiledModule` of the first process:
    ``compiled_names()``, ``data_args()``); `source`, `entries`, `options` and `note` are what
    compile_module was given (used only if the module must be lowered again with the
    any-rank np.dot); `dict_outputs` maps an entry to the spec of the dicts it returns as
    tuples (``dict_outputs()``). The caller checks that `text` is what compile_module wrote.
    """
    _prepare_process()
    import numba  # noqa: F401  (the module text imports it too)
    options = options or NumbaOptions()
    build = _Build(source, name, list(entries), {}, options, note)
    _choose_threads(text)
    module = load_source(text, name)
    functions = {fn: getattr(module, fn) for fn in sorted(compiled)}
    rebuilt = verify_cache(module.__file__, functions.values()) if options.cache else []
    out = CompiledModule(build, module, _Lowered(set(compiled), dict(data_args),
                                                 dict(dict_outputs or {})), functions, text,
                         rebuilt)
    if os.path.exists(_general_marker(module.__file__)):
        out.generalize()
    return out


def _prepare_process():
    """What a process does before its first compiled module (each step runs once): SciPy's
    BLAS loaded without scipy.linalg, its threads set to sleep when idle
    (codegen/blas_threads.py), glibc's allocator told to keep large blocks
    (codegen/allocator.py), LLVM's vectorizer allowed more overlap checks
    (codegen/llvm_options.py), Numba's overload implementations shared by callers that differ
    only in wrappers (codegen/overload_sharing.py)."""
    preload_blas()
    calm_blas_threads()
    keep_large_blocks()
    allow_more_memory_checks()
    share_overload_implementations()


def preload_blas():
    """Load SciPy's ``cython_blas`` and ``cython_lapack`` without the ``scipy.linalg`` package.

    Numba checks for them when its CPU target starts (``import scipy.linalg.cython_blas``) and
    its compiled ``np.dot`` calls BLAS through them; importing them the usual way first runs
    ``scipy/linalg/__init__.py``, which imports most of SciPy (and, through its array API
    layer, ``numpy.f2py`` and ``numpy.testing``): about 150 ms of a 0.5 s warm start. The two
    extension modules are loaded on their own under their usual names instead, so both imports
    find them; ``import scipy.linalg`` later works as usual (``scipy.linalg.cython_blas`` is
    then reached with an import, not as an attribute). Does nothing when ``scipy.linalg`` is
    already imported, when SciPy's files are not where expected, or when
    ``$AUTODIFF_AST_PRELOAD_BLAS`` is ``0``.

    >>> preload_blas()
    >>> import scipy.linalg.cython_blas  # found at once
    """
    import sys
    if os.environ.get("AUTODIFF_AST_PRELOAD_BLAS", "1") == "0" or "scipy.linalg" in sys.modules:
        return
    import importlib.machinery
    import importlib.util
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.origin:
        return
    directory = os.path.join(os.path.dirname(spec.origin), "linalg")
    for module in ("cython_blas", "cython_lapack"):
        name = f"scipy.linalg.{module}"
        if name in sys.modules:
            continue
        paths = [os.path.join(directory, module + suffix)
                 for suffix in importlib.machinery.EXTENSION_SUFFIXES]
        path = next((p for p in paths if os.path.isfile(p)), None)
        if path is None:
            return
        loader = importlib.machinery.ExtensionFileLoader(name, path)
        module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
        try:
            loaded = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = loaded
            loader.exec_module(loaded)
        except Exception:  # noqa: BLE001 (numba then imports them the usual way)
            sys.modules.pop(name, None)
            return


def _choose_threads(text):
    """Numba's threading layer chosen before a module with parallel loops first runs one
    (codegen/threading_layer.py)."""
    if "numba.prange(" in text or "from numba import prange" in text:
        configure_threading()


def _general_marker(module_file):
    return os.path.splitext(module_file)[0] + ".needs-nd"


class _Build:
    """Everything needed to (re)write one compiled module."""

    def __init__(self, source, name, entries, injected, options, note):
        self.source, self.name, self.entries = source, name, entries
        self.injected, self.options, self.note = injected, options, note

    def make(self, general_dot):
        from .dialect import lower_source, render
        options = self.options
        lowered = lower_source(self.source, entries=self.entries,
                               injected=list(self.injected), general_dot=general_dot,
                               numba_overloads=True,
                               threads=not (options.nogil or options.prange))
        _import_numba(lowered)
        stamp = ", ".join(f"{k} {v}" for k, v in versions().items())
        lines = [f"Compiled with @{options.decorator()} ({stamp})."]
        if options.prange:
            lines.append("With parallel=True (a numba.prange loop): "
                         + ", ".join(options.prange) + ".")
        if lowered.data:
            lines.append("Module arrays are passed as arguments, not frozen into the compiled "
                         "code: " + ", ".join(lowered.data) + ".")
        if general_dot:
            lines.append("np.dot and @ are written as dot_nd and matmul_nd: this module "
                         "multiplies arrays of rank above 2, which Numba's refuse.")
        if self.note:
            lines.append(self.note)
        entries = set(self.entries)

        def decorator(function):  # functions Python never calls go without wrappers
            extra = DIALECT_JIT_OPTIONS.get(function) if function in lowered.helper_functions \
                else None
            extra = lowered.jit_options.get(function, extra)
            return options.decorator(function, internal=function not in entries, extra=extra)
        text = render(lowered, decorator=decorator, doc_note="\n".join(lines))
        _choose_threads(text)
        module = load_source(text, self.name)
        for key, value in self.injected.items():
            setattr(module, key, value)
        compiled = {fn: getattr(module, fn) for fn in sorted(lowered.compiled)}
        rebuilt = verify_cache(module.__file__, compiled.values()) if options.cache else []
        return module, lowered, compiled, text, rebuilt


def _import_numba(lowered):
    import gast
    stmt = gast.parse("import numba").body[0]
    at = 1 if lowered.header and isinstance(lowered.header[0], gast.Expr) else 0
    lowered.header.insert(at, stmt)


class CompiledModule:
    """A loaded compiled module: attribute access gives its functions; entry points compile on
    their first call and report Numba failures as :class:`CompileFailure`."""

    def __init__(self, build, module, lowered, compiled, source, rebuilt):
        self._build = build
        self._data = build.injected  # this compilation's module data (the module is shared)
        self._options = build.options
        self._entries = {}
        self._general = False
        self.generated = None  # a Generated whose .source follows this module's text
        self._set(module, lowered, compiled, source, rebuilt)

    def _set(self, module, lowered, compiled, source, rebuilt):
        self.module = module
        self.source = source
        self.rebuilt = rebuilt  # functions whose cache files failed the manifest check
        self._lowered = lowered
        self._compiled = compiled
        if self.generated is not None:
            self.generated.source = source
        for name, entry in self._entries.items():
            entry.bind(*self._target(name))

    def _target(self, name):
        data = [self._data[d] if d in self._data else getattr(self.module, d)
                for d in self._lowered.data_args.get(name, ())]
        return getattr(self.module, name), self._compiled.get(name), data, \
            self._lowered.dict_outputs.get(name)

    def generalize(self):
        """Lower the module again with np.dot for any rank; False when that was done already
        or cannot help."""
        if self._general or ("np.dot(" not in self.source and " @ " not in self.source):
            return False
        self._general = True
        marker = _general_marker(self.module.__file__)
        with contextlib.suppress(OSError):
            with open(marker, "w", encoding="utf-8") as handle:
                handle.write("Numba refused this module: use the any-rank np.dot and @.\n")
        self._set(*self._build.make(general_dot=True))
        return True

    def entry(self, name):
        """The callable for generated function `name`, passing it the module data it reads."""
        if name not in self._entries:
            self._entries[name] = _Entry(self, name, *self._target(name))
        return self._entries[name]

    def __getattr__(self, name):
        attrs = self.__dict__
        if name.startswith("__") or "module" not in attrs:
            raise AttributeError(name)
        if name in attrs["_compiled"]:
            return self.entry(name)
        return getattr(attrs["module"], name)

    def compiled_names(self):
        """Names of the functions Numba compiles (for :func:`load_compiled`)."""
        return sorted(self._lowered.compiled)

    def data_args(self):
        """Entry name -> module data names appended to its calls (for :func:`load_compiled`)."""
        return {k: list(v) for k, v in self._lowered.data_args.items()}

    def dict_outputs(self):
        """Entry name -> spec of the dicts it returns as tuples (for :func:`load_compiled`)."""
        return dict(getattr(self._lowered, "dict_outputs", {}))

    def signatures(self):
        """Number of compiled signatures over all functions of the module."""
        return sum(len(d.signatures) for d in self._compiled.values())

    def record_cache(self):
        if self._options.cache:
            record_cache(self.module.__file__, self._compiled.values())

    def failure(self, exc):
        """The exception to raise for a Numba exception raised while compiling: a
        :class:`CompileFailure`, or what ``failure_hook`` (set by the caller) makes of it."""
        failure = _failure(exc, self.module.__file__, self.source)
        hook = self.__dict__.get("failure_hook")
        return hook(failure) if hook is not None else failure


class _Entry:
    def __init__(self, owner, name, target, dispatcher, data, dicts=None):
        from numba.core.errors import NumbaError
        self.owner = owner
        self.name = name
        self.error = NumbaError
        self.bind(target, dispatcher, data, dicts)

    def bind(self, target, dispatcher, data, dicts=None):
        self.target = target
        self.data = data
        self.dicts = dicts  # spec of the dicts the entry returns as tuples, or None
        if dicts is not None:
            from .dict_outputs import rebuild_dicts  # (once per binding, not per call)
            self.rebuild = rebuild_dicts
        self.signatures = dispatcher.overloads if dispatcher is not None else ()
        self.seen = 0

    def __call__(self, *args):
        return self.call_writeable(*[_writeable(a) for a in args])

    def call_writeable(self, *args):
        """The call, for arguments that are writeable arrays and numbers (read-only arrays are
        a separate Numba type: __call__ copies them first; jit's fast path has checked)."""
        try:
            result = self.target(*args, *self.data)
        except self.error as exc:
            if not self.owner.generalize():
                raise self.owner.failure(exc) from None
            try:  # the module was lowered again (and this entry rebound): one more try
                result = self.target(*args, *self.data)
            except self.error as again:
                raise self.owner.failure(again) from None
        except Exception as exc:
            if not _inside_numba_compiler(exc):
                raise  # raised by the compiled code itself (an IndexError, say)
            raise self.owner.failure(_InternalError(exc)) from None
        if len(self.signatures) != self.seen:  # newly compiled (and cached): record it
            self.seen = len(self.signatures)
            self.owner.record_cache()
        if self.dicts is not None:
            return self.rebuild(result, self.dicts)
        return result

    def __repr__(self):
        return f"<compiled {self.name}>"


class _InternalError(Exception):
    """An exception Numba's compiler raised without making it a NumbaError (an assertion in
    its lowering, say): reported as a compile failure, with what it said."""

    def __init__(self, exc):
        detail = str(exc).strip()
        super().__init__(f"Numba's compiler failed inside ({type(exc).__name__}"
                         f"{': ' + detail if detail else ''}); this is a Numba limitation "
                         "or bug: call the function without jit")


def _inside_numba_compiler(exc):
    """Whether `exc` was raised while Numba compiled (not by compiled code running)."""
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/numba/core/" in path and path.rsplit("/", 1)[-1] in (
                "compiler.py", "compiler_machinery.py", "typed_passes.py", "lowering.py",
                "typeinfer.py", "base.py"):
            return True
        tb = tb.tb_next
    return False


def _writeable(value):
    # A 0-d array is a number to the generated code (its spec is a number's): passed as one,
    # since Numba's np.sqrt of a 0-d array is a float, and a loop carrying both cannot unify.
    if type(value) is np.ndarray and value.ndim == 0 and value.dtype.kind in "biuf":
        return value[()]
    # Read-only arrays are a separate Numba type: copy them rather than compile again.
    flags = getattr(value, "flags", None)
    if flags is not None and not flags.writeable and hasattr(value, "copy"):
        return value.copy()
    return value


# ---------------------------------------------------------------- errors
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')
_NOISE = ("Failed in nopython mode pipeline", "During:", "File \"", "<source elided>",
          "For further information", "Enable logging", "This error may have been caused",
          "^")


def _failure(exc, filename, source):
    text = str(exc)
    lineno = None
    for path, line in _FILE_LINE.findall(text):
        if os.path.basename(path) == os.path.basename(filename):
            lineno = int(line)
            break
    if lineno is None:
        match = re.search(re.escape(os.path.basename(filename)) + r" \((\d+)\)", text)
        lineno = int(match.group(1)) if match else None
    lines = source.split("\n")
    code = lines[lineno - 1].strip() if lineno and lineno <= len(lines) else None
    function = None
    if lineno:
        for row in range(lineno - 1, -1, -1):
            found = re.match(r"def (\w+)\(", lines[row])
            if found:
                function = found.group(1)
                break
    return CompileFailure(_reason(text), filename, lineno, function, code)


def _reason(text):
    """Numba's first lines of explanation in `text`, without its file references, the source
    lines it quotes under them or its advice.

    >>> _reason("Use of unsupported NumPy function 'numpy.tile'.\\n\\nFile \\"m.py\\", "
    ...         "line 9:\\ndef f(x):\\n    <source elided>\\n    t = np.tile(x, 2)\\n    ^\\n")
    "Use of unsupported NumPy function 'numpy.tile'."
    """
    kept = []
    quoting = False  # in the source lines Numba quotes below a file reference
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith('File "'):
            quoting = True
            continue
        if quoting:
            quoting = stripped not in ("^", "") and not stripped.startswith("During:")
            continue
        if not stripped or stripped.startswith(_NOISE) or stripped.startswith("- Of which"):
            continue
        if stripped.startswith(("There are", "Known signatures", "* (", "- argument")):
            continue
        kept.append(re.sub(r"\x1b\[[0-9;]*m", "", stripped))
        if len(kept) == 3:
            break
    reason = " ".join(kept)
    return reason if len(reason) < 400 else reason[:397] + "..."


def comment_above(source, lineno):
    """The nearest ``# ...`` comment line above generated line `lineno` in its function.

    >>> comment_above("def f(x):\\n    # y = g(x)\\n    y = x\\n", 3)
    'y = g(x)'
    """
    lines = source.split("\n")
    for row in range(min(lineno, len(lines)) - 1, -1, -1):
        text = lines[row].strip()
        if text.startswith("# "):
            return text[2:]
        if lines[row].startswith("def ") or lines[row].startswith("@"):
            return None
    return None


# ---------------------------------------------------------------- the cache manifest
def _manifest_path(module_file):
    return os.path.splitext(module_file)[0] + ".numba.json"


def cache_files(dispatcher):
    """The on-disk cache files (index and data) Numba keeps for one compiled function."""
    cache = getattr(dispatcher, "_cache", None)
    files = getattr(cache, "_cache_file", None)
    if files is None:
        return []
    index = files._index_path
    base = files._index_name[:-len(".nbi")]
    data = glob.glob(os.path.join(glob.escape(files._cache_path), glob.escape(base) + ".*.nbc"))
    return [p for p in [index] + sorted(data) if os.path.exists(p)]


def _digest(path):
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _read_manifest(module_file):
    try:
        with open(_manifest_path(module_file), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def verify_cache(module_file, dispatchers):
    """Delete the cache files of every function whose files do not match the manifest.

    Returns the names of the functions whose cache was dropped (they compile again).
    """
    manifest = _read_manifest(module_file)
    dropped = []
    for dispatcher in dispatchers:
        files = cache_files(dispatcher)
        if all(manifest.get(p) == _digest(p) for p in files):
            continue
        for path in files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        dropped.append(dispatcher.py_func.__name__)
    return dropped


def record_cache(module_file, dispatchers):
    """Write the hashes of the functions' cache files next to the module (atomically)."""
    manifest = {}
    for dispatcher in dispatchers:
        for path in cache_files(dispatcher):
            digest = _digest(path)
            if digest is not None:
                manifest[path] = digest
    path = _manifest_path(module_file)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".manifest.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
