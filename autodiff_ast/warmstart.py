"""Warm start: a new process finds the compiled module of ``jit(grad(f))`` without generating it.

The first process to compile a module records it in the loader's index
(:func:`codegen.loader.write_index`) under a key made of everything the module text depends
on: the user's source text (the file from the function's first line on, so editing a later
function of the same file also makes a new key) and that of every function it reaches through
globals and closures, the values of the constants it reads (numbers, strings, small arrays by
content, large arrays by dtype and shape), the transformation and its options (argnums,
has_aux, value), the abstract signature and static argument values, the jit options, the
versions of Python, NumPy, Numba and llvmlite, the files of autodiff_ast itself (size and
modification time) and ``__debug__`` (``python -O`` drops asserts from the generated code).
A later process computes the same key, reads the module text back (checked against its
sha256) and loads it: no parsing, normalization, reverse sweep, tidying or
lowering, and none of those passes is even imported.

Anything the key cannot describe exactly (a method, a closure over an object, a global that
is neither a constant, an array, a module nor a function, a function with a custom rule)
means no key: the module is generated as before. ``$AUTODIFF_AST_WARMSTART_LOG`` names a file
to which every lookup appends one line (``hit``, ``miss``, ``stored``, ``nokey``, and
``refused`` when jit records that Numba refused a rewritten program, :func:`mark_refused`): how
tests see that a second process did not generate.

>>> import numpy as np
>>> def f(x):
...     return np.sum(x * x)
>>> len(function_fingerprint(f)) == 64 and function_fingerprint(f) == function_fingerprint(f)
True
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import inspect
import linecache
import os
import sys
import types
from dataclasses import dataclass, field

import numpy as np

__all__ = ["function_fingerprint", "key_for", "load", "mark_refused", "refused", "store"]

#: Bumped when what a record holds, or how keys are made, changes.
FORMAT = 1
_LOG_VAR = "AUTODIFF_AST_WARMSTART_LOG"
_ARRAY_CONTENT_LIMIT = 1 << 20  # arrays up to 1 MiB are keyed by content, larger by shape
_LIBRARIES = ("numpy", "math", "cmath", "builtins", "scipy")


class _NoKey(Exception):
    """A value the key cannot describe exactly."""


@dataclass
class CachedModule:
    """What the jit keeps of a module (like build.Generated, which a warm start never imports)."""

    source: str
    entry: str
    injected: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- fingerprints
def _code_names(code):
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _library_object(value):
    module = getattr(value, "__module__", None) or ""
    return module.split(".")[0] in _LIBRARIES


def _custom_rule(value):
    custom = sys.modules.get(f"{__package__}.custom")
    if custom is None:
        return False
    try:
        return isinstance(value, (custom.custom_jvp, custom.custom_vjp)) or \
            value in custom._REGISTERED
    except TypeError:
        return False


def _value(value, seen):
    """A text describing `value` as far as generated code can depend on it."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, frozenset) else value
        return f"{type(value).__name__}[" + ",".join(_value(v, seen) for v in items) + "]"
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "dict{" + ",".join(f"{k!r}:{_value(value[k], seen)}" for k in sorted(value)) + "}"
    if isinstance(value, np.ndarray):
        text = f"ndarray:{value.dtype.str}:{value.shape}"
        if value.nbytes <= _ARRAY_CONTENT_LIMIT and value.dtype != object:
            text += ":" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return text
    if isinstance(value, np.generic):
        return f"{value.dtype.str}:{value!r}"
    if isinstance(value, types.ModuleType):
        return f"module:{value.__name__}"
    if _custom_rule(value):
        raise _NoKey("a function with a custom rule")
    if inspect.isfunction(value) and not _library_object(value):
        return "function:" + _function(value, seen)
    if callable(value) and _library_object(value):
        return f"callable:{value.__module__}.{getattr(value, '__qualname__', repr(value))}"
    raise _NoKey(f"a global or closure value of type {type(value).__name__}")


def _function(fn, seen):
    if fn in seen:
        return f"seen:{fn.__module__}.{fn.__qualname__}"
    seen.add(fn)
    code = fn.__code__
    # The file from the function's first line on: a superset of the lines parse_function
    # reads (inspect.getsource would cost a new process tens of milliseconds: it maps every
    # loaded module to its file and compiles tokenize's expressions).
    lines = linecache.getlines(code.co_filename, fn.__globals__)
    if not lines or code.co_firstlineno > len(lines):
        raise _NoKey("no source")
    text = "".join(lines[code.co_firstlineno - 1:])
    parts = [fn.__module__ or "", fn.__qualname__, text,
             _value(fn.__defaults__, seen), _value(fn.__kwdefaults__, seen)]
    scope = fn.__globals__
    names = sorted(_code_names(code))
    for name in names:
        if name in scope:
            parts.append(f"{name}={_value(scope[name], seen)}")
            parts += _module_reads(name, scope[name], names, seen)
        elif hasattr(builtins, name):
            parts.append(f"{name}=builtin")
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            contents = cell.cell_contents
        except ValueError:
            parts.append(f"{name}=<empty cell>")
            continue
        parts.append(f"{name}={_value(contents, seen)}")
    return hashlib.sha256("\n\0".join(parts).encode("utf-8")).hexdigest()


def _module_reads(path, module, names, seen, depth=3):
    """``cfg.SCALE=float:2.0``...: the attributes of a user's module (not a library's) that
    the code may read through it, by the names it uses (``cfg.SCALE`` folds the constant into
    the generated code; ``layers.act(x)`` differentiates act's source). Without them a new
    process reused a gradient written for the old value or the old helper."""
    if not isinstance(module, types.ModuleType) or depth == 0 or \
            module.__name__.split(".")[0] in _LIBRARIES + ("autodiff_ast", "codegen", "numba"):
        return []
    out = []
    attributes = vars(module)
    for name in names:
        if name in attributes:
            value = attributes[name]
            out.append(f"{path}.{name}={_value(value, seen)}")
            out += _module_reads(f"{path}.{name}", value, names, seen, depth - 1)
    return out


def function_fingerprint(fn):
    """sha256 of `fn`'s source, the functions it reaches and the values it reads; None when
    one of them cannot be described exactly.

    >>> import numpy as np
    >>> scale = 2.0
    >>> def g(x):
    ...     return np.sum(scale * x)
    >>> before = function_fingerprint(g)
    >>> scale = 3.0
    >>> function_fingerprint(g) != before
    True
    """
    try:
        return _function(fn, set())
    except _NoKey:
        return None


_PACKAGES = None


def _package_files():
    """Size and modification time of every source file of autodiff_ast and codegen (once)."""
    global _PACKAGES
    if _PACKAGES is None:
        import codegen
        rows = []
        for package in (os.path.dirname(__file__), os.path.dirname(codegen.__file__)):
            for root, dirs, files in os.walk(package):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
                for name in sorted(files):
                    if name.endswith(".py"):
                        st = os.stat(os.path.join(root, name))
                        rows.append(f"{os.path.relpath(os.path.join(root, name), package)}:"
                                    f"{st.st_size}:{st.st_mtime_ns}")
        _PACKAGES = hashlib.sha256("\n".join(rows).encode()).hexdigest()
    return _PACKAGES


# ---------------------------------------------------------------- keys
def _spec(spec, statics, name):
    if isinstance(spec, tuple) and spec[:1] == ("static",):
        return "static=" + _value(statics[name], set())
    text = repr(spec)
    if " at 0x" in text:
        raise _NoKey("an argument type that names an object")
    return text


def key_for(jitted, key):
    """The index key of the module `jitted` (a jit of grad/value_and_grad, or of a plain
    function) compiles for cache key `key`; None when it cannot be made exactly."""
    from .api import _ReverseTransform
    from .jit import _Primal
    plain = jitted.jit_plain
    options = jitted.jit_options
    if options.target != "cpu" or type(plain) not in (_ReverseTransform, _Primal):
        return _log("nokey", "transformation")
    fn = plain.py_fun
    if not inspect.isfunction(fn) or plain.fun is not fn:
        return _log("nokey", "not a plain function")
    if type(plain) is _ReverseTransform:
        specs, argnums = key
        what = ["grad", repr(argnums), repr(plain.has_aux), repr(plain.with_value)]
    else:
        specs, what = key, ["primal"]
    custom = sys.modules.get(f"{__package__}.custom")
    if custom is not None and custom._REGISTERED:  # register_rule may change any call's rule
        return _log("nokey", "registered rules")
    statics = getattr(jitted, "_statics", {})
    try:
        parts = what + [f"{n}:{_spec(s, statics, n)}" for n, s in specs]
        parts.append(_function(fn, set()))
    except (_NoKey, KeyError) as exc:
        return _log("nokey", str(exc))
    from codegen.numba_cpu import versions
    parts += [repr(options), repr(sorted(versions().items())), _package_files(),
              f"format={FORMAT}", f"scalarize={os.environ.get('AUTODIFF_AST_SCALARIZE', '')}",
              f"contract={os.environ.get('AUTODIFF_AST_FP_CONTRACT', '')}",
              f"debug={__debug__}"]  # python -O drops asserts, so their checks too
    return hashlib.sha256("\n\0".join(parts).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- records
def _log(event, detail=""):
    path = os.environ.get(_LOG_VAR)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{event} {detail}\n")
    return None


def store(key, generated, out, compiled, name, note):
    """Index the module `compiled` (a codegen.numba_cpu.CompiledModule written for `generated`)
    under `key`. Modules that carry values injected at load time are not indexed."""
    if generated.injected or not hasattr(compiled, "compiled_names"):
        return _log("nokey", "injected values")
    from codegen.loader import write_index
    record = {"format": FORMAT, "generated": generated.source, "entry": out.entry,
              "layout": out.layout, "extra": out.extra, "entries": compiled._build.entries,
              "compiled": compiled.compiled_names(), "data_args": compiled.data_args(),
              "dict_outputs": compiled.dict_outputs(),
              "note": note, "options": dataclasses.asdict(compiled._options)}
    try:
        write_index(key, compiled.source, name, record)
    except (OSError, TypeError, ValueError) as exc:  # not JSON, or the disk refused
        return _log("nokey", f"not stored: {exc}")
    _log("stored", key)
    return None


def _refused_key(key):
    return hashlib.sha256(f"{key} refused by Numba".encode()).hexdigest()


def mark_refused(key):
    """Record that Numba refused the module indexed under `key` (jit's compiled-code rewrite
    of the program): a later process builds from the original program at once instead of
    loading the refused module and failing again."""
    from codegen.loader import write_index
    try:
        write_index(_refused_key(key), "", "refused_module", {"format": FORMAT,
                                                              "refused": True})
    except (OSError, TypeError, ValueError) as exc:
        return _log("nokey", f"refusal not stored: {exc}")
    return _log("refused", key)


def refused(key):
    """Whether :func:`mark_refused` recorded `key`."""
    from codegen.loader import read_index
    entry = read_index(_refused_key(key))
    record = entry.get("record") if entry else None
    return isinstance(record, dict) and record.get("format") == FORMAT and \
        record.get("refused") is True


def load(key):
    """``(CachedModule, CompiledModule)`` indexed under `key`, or None (a miss: build it)."""
    from codegen.loader import read_indexed
    found = read_indexed(key)
    if found is None:
        return _log("miss", key)
    text, name, record = found
    try:
        if record["format"] != FORMAT:
            return _log("miss", key)
        from codegen.numba_cpu import NumbaOptions, load_compiled
        options = NumbaOptions(**{k: tuple(v) if isinstance(v, list) else v
                                  for k, v in record["options"].items()})
        compiled = load_compiled(
            text, name, record["generated"], record["entries"], record["compiled"],
            record["data_args"], options, record["note"], record.get("dict_outputs"))
        out = CachedModule(compiled.source, record["entry"], {}, record["layout"],
                           record["extra"])
    except Exception as exc:  # noqa: BLE001 (any failure: generate the module as before)
        return _log("miss", f"{key} unusable record: {type(exc).__name__}: {exc}")
    _log("hit", key)
    return out, compiled
