"""``jit``: the primal or any transformed function, compiled by Numba in nopython mode.

``jit(f)`` compiles `f` itself; ``jit(grad(f))``, ``jit(value_and_grad(f))``, ``jit(vmap(...))``,
``jit(hessian(f))`` compile the module the transformation generates. Either way the module is
lowered into the compiled dialect (:mod:`codegen.dialect`), every function gets
``@numba.njit(cache=True)`` (:mod:`codegen.numba_cpu`) and the module is written to a
content-hashed file, so a new process reuses the compiled code from disk.

At the boundary, pytrees are flattened into their leaves, non-contiguous and read-only arrays
are copied, so one call signature (dtype, rank, which axes have size one, pytree structure)
compiles exactly once. Static arguments (``static_argnums``/``static_argnames``) are compile-time
constants: the generated source is specialised on their values (``if normal:`` keeps one branch)
and they are part of every cache key. If Numba cannot compile the result, :class:`CompileError`
names the user's line and Numba's reason; there is no object-mode fallback.

>>> import numpy as np
>>> from autodiff_ast import grad
>>> df = jit(grad(lambda x: np.sum(np.tanh(x) ** 2)))
>>> x = np.array([0.5, -1.0])
>>> bool(np.allclose(df(x), 2 * np.tanh(x) * (1 - np.tanh(x) ** 2)))
True
>>> "@numba.njit(cache=True" in df.source
True
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import inspect
import linecache
import os
import re
import sys
import traceback
from dataclasses import dataclass

import numpy as np

from . import pytrees
from .api import (
    FlatView,
    _flat_values,
    _match_leaf,
    _plain_dict,
    _rebuild,
    _ReverseTransform,
    _spec_key,
    _Transformed,
)
from .config import config
from .errors import ArgnumsError, AutodiffError, CompileError, StaticArgumentError
from .naming import sanitize
from .output_lists import lists_of
from .specs import Static

# build and normalize (the passes) are imported where they are used: a warm start loads
# compiled modules without them (autodiff_ast/warmstart.py).

__all__ = ["jit", "JitOptions", "TARGETS"]


@dataclass(frozen=True)
class JitOptions:
    """What `jit` was asked for (part of the compiled module's identity)."""

    target: str = "cpu"
    parallel: bool = False
    cache: bool = True
    static_argnums: tuple = ()
    static_argnames: tuple = ()
    batching: str = "auto"  # jit(vmap(...)): 'auto', 'vectorized' or 'loop' (batch_loop.py)


# ---------------------------------------------------------------- targets
class _NumbaCpu:
    """``target='cpu'``: numba.njit in nopython mode (codegen/numba_cpu.py)."""

    def compile(self, generated, options, name, note):
        from codegen.numba_cpu import NumbaOptions, compile_module
        # batch_loop.py drivers: only they are parallel (never the per-example functions
        # they call in their prange loop: no nested parallelism)
        prange = tuple((generated.layout or {}).get("prange", ()))
        compiled = compile_module(
            generated.source, name, _entries(generated), generated.injected,
            NumbaOptions(cache=options.cache, parallel=options.parallel and not prange,
                         prange=prange), note=note)
        out = dataclasses.replace(generated, source=compiled.source, injected={})
        return out, compiled


class _Python:
    """``target='python'``: the lowered dialect run as plain Python (for debugging the
    dialect: the same module text Numba compiles, without the decorators)."""

    def compile(self, generated, options, name, note):
        from codegen.dialect import lower_source, render
        from codegen.loader import load_source
        lowered = lower_source(generated.source, entries=_entries(generated),
                               injected=list(generated.injected))
        text = render(lowered, doc_note="Lowered into the compiled dialect; runs as plain "
                      "Python." + (f"\n{note}" if note else ""))
        module = load_source(text, name)
        for key, value in generated.injected.items():
            setattr(module, key, value)
        out = dataclasses.replace(generated, source=text, injected={})
        return out, _PlainModule(module, lowered, dict(generated.injected))


class _Cuda:
    """``target='cuda'``: a kernel with one thread per example (autodiff_ast/cuda.py). It
    works from the per-example function, not from a generated module: jit() hands the whole
    transformation to :func:`autodiff_ast.cuda.cuda_jit`."""

    def compile(self, generated, options, name, note):
        raise NotImplementedError("the CUDA target is built by autodiff_ast.cuda.cuda_jit")


#: jit targets by name; a new target is an object with ``compile(generated, options, name,
#: note) -> (Generated, module)`` whose module gives each entry function by attribute.
TARGETS = {"cpu": _NumbaCpu(), "python": _Python(), "cuda": _Cuda()}


class _PlainModule:
    """The lowered module's functions, each passed the module data it reads (this
    compilation's values: the module object is shared by every compilation of its text)."""

    def __init__(self, module, lowered, data):
        self.module = module
        self.lowered = lowered
        self.data = data

    def __getattr__(self, name):
        function = getattr(self.module, name)
        needs = self.lowered.data_args.get(name)
        dicts = self.lowered.dict_outputs.get(name)
        if not needs and dicts is None:
            return function
        values = [self.data[d] if d in self.data else getattr(self.module, d)
                  for d in needs or ()]
        if dicts is None:
            return lambda *args: function(*args, *values)
        from codegen.dict_outputs import rebuild_dicts
        return lambda *args: rebuild_dicts(function(*args, *values), dicts)


def _entries(generated):
    return [generated.entry] + [v for v in generated.extra.values() if isinstance(v, str)]


# ---------------------------------------------------------------- the jitted transformations
class _Jitted:
    """Mixed into a transformation's class: the same call logic, with compiled modules.

    Calls whose arguments are arrays and scalars (no pytrees, no keywords) take a fast path
    after the first: a cheap key of the arguments (type, dtype, size-one axes, static values)
    finds a plan that calls the compiled entry directly, skipping signature inference.
    """

    kind = "jit"

    def __call__(self, *args, **kwargs):
        result = _numpy_floats(self._dispatch(args, kwargs))
        flag = self.jit_plain.debug_nans
        if (config.debug_nans if flag is None else flag) and not _all_finite(result):
            self._locate_nans(args, kwargs)
        return result

    def _locate_nans(self, args, kwargs):
        """debug_nans under jit, as JAX does it: compiled code carries no checks, so a call
        whose output holds a NaN or inf runs again uncompiled, where the first one made raises
        FloatingPointError at its line (a transform's generated code with its checks; for
        ``jit(f)``, f itself with NumPy raising on invalid operations)."""
        plain = self.jit_plain
        fn = _user_function(self)
        name = f"jit({getattr(fn, '__name__', 'f')})"
        if not isinstance(plain, _Primal):
            plain(*args, **kwargs)
        else:
            try:
                with np.errstate(invalid="raise", divide="raise", over="raise"):
                    plain.fun(*args, **kwargs)
            except FloatingPointError as exc:
                code = getattr(fn, "__code__", None)
                frames = [f for f in traceback.extract_tb(exc.__traceback__)
                          if code is not None and f.filename == code.co_filename]
                where = f", at your line {os.path.basename(frames[-1].filename)}:" \
                    f"{frames[-1].lineno}: {frames[-1].line}" if frames else ""
                raise FloatingPointError(f"debug_nans: {name} made a NaN or inf ({exc}){where}") \
                    from exc
        raise FloatingPointError(
            f"debug_nans: {name} returned a NaN or inf, and running it uncompiled found none "
            "made along the way: an argument may hold one")

    def _dispatch(self, args, kwargs):
        self._forget_if_redefined()
        key = None if kwargs else self._quick_key(args)
        plan = None if key is None else self.jit_plans.get(key)
        if plan is not None and plan is not _NO_PLAN:  # (a float32 leaf's key has no plan)
            return self.with_output_lists(plan(args))
        if not (_any_float32(args) or (kwargs and _any_float32(kwargs.values()))):
            return self._keyed_call(key, args, kwargs)
        static = {i % len(args) for i in self.jit_options.static_argnums} if args else set()
        names = set(self.jit_options.static_argnames)
        dtypes = set(_float_dtypes([a for i, a in enumerate(args) if i not in static] +
                                   [v for k, v in kwargs.items() if k not in names]))
        if np.dtype(np.float32) not in dtypes:  # (only static arguments were float32)
            return self._call(*args, **kwargs)
        # Compiled code mixes float64 constants and seeds with the arguments, and Numba
        # refuses some mixed-precision operations (np.dot of float32 and float64): float32
        # arguments run as float64; a call whose floats are all float32 answers in float32
        # (JAX's rule); one that mixes them gives each gradient its argument's dtype.
        wide = tuple(a if i in static else _widened(a) for i, a in enumerate(args))
        wide_kwargs = {k: v if k in names else _widened(v) for k, v in kwargs.items()}
        result = self._call(*wide, **wide_kwargs)
        if dtypes == {np.dtype(np.float32)}:
            return _narrowed(result)
        return result if kwargs else _grads_like(self, args, result)

    def _call(self, *args, **kwargs):
        self._forget_if_redefined()
        key = None if kwargs else self._quick_key(args)
        if key is not None:
            plan = self.jit_plans.get(key)
            if plan is not None and plan is not _NO_PLAN:
                return self.with_output_lists(plan(args))
        return self._keyed_call(key, args, kwargs)

    def _keyed_call(self, key, args, kwargs):
        """The general path of a call whose quick key (None: none) found no plan; works out
        the key's plan after it."""
        try:
            result = super().__call__(*args, **kwargs)
        except CompileError:
            if self._another_variant():  # jit(vmap) under batching='auto': the loop instead
                self._modules.pop(self._last_key, None)
                return self._keyed_call(key, args, kwargs)
            if not getattr(self, "_last_rewritten", False):
                raise
            # Numba refused the program the compiled-code rewrites made (autodiff_ast/
            # scalarize.py, vector_loops.py): build from the original program, whose
            # failure, if it fails too, names the user's line.
            self._modules.pop(self._last_key, None)
            self._rewrite_failed = True
            if getattr(self, "_last_index", None):  # a new process goes to the original
                from . import warmstart
                warmstart.mark_refused(self._last_index)
            result = super().__call__(*args, **kwargs)
        if key is not None and key not in self.jit_plans:
            plan = _make_plan(self, args)  # (worked out once per key, found or not)
            self.jit_plans[key] = _NO_PLAN if plan is None else plan
        return result

    def _quick_key(self, args):
        static = self.jit_options.static_argnums
        parts = []
        for i, a in enumerate(args):
            if i in static or (i - len(args)) in static:
                try:
                    hash(a)
                except TypeError:
                    return None
                parts.append(("static", type(a), a))
                continue
            part = _leaf_key(a)
            if part is None and type(a) is tuple:  # (primals, tangents): arrays, no pytree walk
                part = ("tuple",) + tuple(_leaf_key(leaf) for leaf in a)
                if None not in part:
                    parts.append(part)
                    continue
            if part is None and type(a) is dict:  # a dict of arrays: no pytree walk
                found = _dict_of_leaves(a)
                if found is not None:
                    parts.append(("dict",) + found)
                    continue
            if part is None:
                if type(a) not in (dict, list, tuple):
                    return None
                leaves, treedef = pytrees.tree_flatten(a)
                part = ("tree", treedef) + tuple(_leaf_key(leaf) for leaf in leaves)
                if None in part:
                    return None
            parts.append(part)
        return tuple(parts)

    def _another_variant(self):
        """After Numba refused the last module: whether another variant of the function is
        set up to be tried (JittedBatching's loop after a vectorized module)."""
        return False

    def _module_for(self, key, build):
        scalarize = _scalarizes(self)
        hints = getattr(self, "_hints", {}) if scalarize else {}
        sizes = tuple(sorted(hints.items()))
        index_key = key
        if sizes:  # the module is written for these small axes (autodiff_ast/scalarize.py)
            key = (key, "sizes", sizes)
        self._last_index = None
        if key not in self._modules:
            from . import warmstart
            index = warmstart.key_for(self, index_key) if self.jit_options.cache else None
            if index and sizes:
                index = hashlib.sha256(f"{index} {sizes!r}".encode()).hexdigest()
            if index and scalarize and warmstart.refused(index):
                # Numba refused this rewrite in an earlier process: the original at once
                self._rewrite_failed = True
                return self._module_for(index_key, build)
            if index and getattr(self, "_rewrite_failed", False):  # (not the refused module)
                index = hashlib.sha256(f"{index} original".encode()).hexdigest()
            self._last_index = index if scalarize else None
            found = warmstart.load(index) if index else None
            if found is not None:  # compiled by an earlier process: nothing to generate
                out, module = found
            else:
                generated = _build(build, scalarize, hints)
                name = sanitize(f"jit_{generated.entry}")
                out, module = TARGETS[self.jit_options.target].compile(
                    generated, self.jit_options, name, self._static_note())
                if index:
                    warmstart.store(index, generated, out, module, name, self._static_note())
            if hasattr(module, "failure"):  # a target that reports compile failures
                module.failure_hook = self._compile_error
                module.generated = out  # .source follows the module if it is written again
            self._modules[key] = (out, module)
            if self.verbose:
                print(out.source)
        self._last = self._modules[key]
        self._last_key, self._last_rewritten = key, scalarize
        return self._last

    def function_for(self, specs):
        # Differentiating or batching a jitted function works on the plain source.
        return self.jit_plain.function_for(specs)

    def _specs(self, args, kwargs):
        names, values, specs = super()._specs(args, kwargs)
        where = self._where()
        static = set(self.jit_options.static_argnames)
        unknown = sorted(static - set(names))
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            raise StaticArgumentError(
                f"{where['name']}: static_argnames names {', '.join(map(repr, unknown))}, but "
                f"the function's arguments are {', '.join(names)}",
                filename=where["filename"], lineno=where["lineno"],
                hint=f"did you mean {close[0]!r}?" if close else
                "give the names of the function's own parameters")
        for i in self.jit_options.static_argnums:
            if not -len(names) <= i < len(names):
                raise ArgnumsError(
                    f"{where['name']}: static_argnums {self.jit_options.static_argnums!r} "
                    f"names argument {i}, but the function takes {len(names)}",
                    filename=where["filename"], lineno=where["lineno"],
                    hint=f"use positions between 0 and {len(names) - 1}, or static_argnames")
            static.add(names[i])
        self._statics = {}
        for n, v in zip(names, values):
            if n in static:
                specs[n] = Static(self._intern(n, v, where))
                self._statics[n] = v
        self._hints = {}
        for n, v in zip(names, values):
            length = None if n in static else _small_axis(v)
            if length is not None:
                self._hints[n] = length
        return names, values, specs

    def _where(self):
        """``jit(f)`` and the file and line of the user's function, for errors about how jit
        was called."""
        fn = _user_function(self)
        code = getattr(fn, "__code__", None)
        return {"name": f"jit({getattr(fn, '__name__', 'the function')})",
                "filename": code.co_filename if code else None,
                "lineno": code.co_firstlineno if code else None}

    def _intern(self, name, value, where):
        try:
            key = (type(value), value)
            return self.jit_interned.setdefault(key, value)
        except TypeError:
            raise StaticArgumentError(
                f"{where['name']}: static argument {name!r} must be hashable (jit compiles one "
                f"version per value), got {type(value).__name__}",
                filename=where["filename"], lineno=where["lineno"],
                hint=f"pass {name} as a tuple instead of a list or array, or leave it out of "
                     "static_argnums/static_argnames") from None

    def _static_note(self):
        statics = getattr(self, "_statics", {})
        if not statics:
            return None
        return "Static arguments: " + ", ".join(f"{k}={v!r}" for k, v in statics.items()) + "."

    def _compile_error(self, failure):
        return compile_error(failure, _user_function(self))


#: Arrays whose last axis has at most this many entries (2-D: rows; 1-D: the vector) are
#: compiled for that length: their rows are small vectors kept as scalars. Equal to
#: autodiff_ast.scalarize.MAX_LENGTH (not imported: a warm start does not load the passes).
SMALL_AXIS = 8
_FLOAT64 = np.dtype(np.float64)


def _small_axis(a):
    """The length jit specialises `a` for (a float64 vector or matrix whose last axis has 2 to
    SMALL_AXIS entries), else None."""
    return _small_length(a.shape, a.dtype) if type(a) is np.ndarray else None


def _small_length(shape, dtype):
    """_small_axis of an array of this shape (non-empty) and dtype."""
    last = shape[-1] if shape else 0
    return last if 2 <= last <= SMALL_AXIS and len(shape) <= 2 and dtype == _FLOAT64 else None


def _scalarizes(jitted):
    """Whether jit builds `jitted` with its small vectors as scalars (autodiff_ast/scalarize.py)
    and its vector arithmetic in loops as element loops (autodiff_ast/vector_loops.py): the CPU
    target, for the primal or grad/value_and_grad of a plain Python function (the rewrite is
    made for the outermost function only; AUTODIFF_AST_SCALARIZE=0 turns it off, and so does
    a rewritten program Numba could not compile)."""
    if jitted.jit_options.target != "cpu" or os.environ.get("AUTODIFF_AST_SCALARIZE") == "0" or \
            getattr(jitted, "_rewrite_failed", False):
        return False
    if isinstance(jitted, _Primal):
        return True
    return isinstance(jitted, _ReverseTransform) and getattr(jitted, "py_fun", None) is not None


_HOLDERS = (float, tuple, list, dict)


def _numpy_floats(result):
    """`result` with its Python floats (how Numba returns a float64) as np.float64, as the
    NumPy code the transformation writes gives them: a value or aux scalar keeps ``.dtype``
    and ``.item()`` under jit. Tuples, lists and dicts are walked; other objects are kept.

    >>> _numpy_floats((1.5, [2.0, {"a": 3.0}], np.ones(1)))
    (np.float64(1.5), [np.float64(2.0), {'a': np.float64(3.0)}], array([1.]))
    """
    kind = type(result)
    if kind is float:
        return np.float64(result)
    if kind is tuple or kind is list:
        for item in result:
            if type(item) in _HOLDERS:
                return kind([_numpy_floats(item) for item in result])
        return result
    if kind is dict:
        for item in result.values():
            if type(item) in _HOLDERS:
                return {k: _numpy_floats(v) for k, v in result.items()}
    return result


def _build(build, scalarize, hints):
    """build(), with small vectors as scalars when `scalarize` (`hints`: the lengths of the
    small last axes of the arguments); on any failure of the rewritten program, the
    original's build (whose errors name the user's lines).

    A failure the plain build does not share is lost speed, not a wrong result, so it is not
    raised, unless ``$AUTODIFF_AST_STRICT_REWRITE`` is 1 (the test suite and the fuzzer set
    it): then a failure other than the rewrite's own refusals (``RuntimeError('scalarize:
    ...')``, this package's errors) is raised, so a bug in the rewrite fails a test instead
    of slowing it."""
    if not scalarize:
        return build()
    from .build import scalarizing
    try:
        with scalarizing(hints):
            return build()
    except Exception as exc:  # noqa: BLE001 - the plain build below reports the user's error
        result = build()
        if os.environ.get("AUTODIFF_AST_STRICT_REWRITE") == "1" and not _refusal(exc):
            raise RuntimeError("jit: the scalarizing rewrite failed where the plain build "
                               f"works ({type(exc).__name__}: {exc})") from exc
        return result


def _refusal(exc):
    """Whether `exc` is a rewrite declining a program (not a bug in it)."""
    return isinstance(exc, AutodiffError) or \
        (isinstance(exc, RuntimeError) and str(exc).startswith("scalarize:"))


def _any_float32(values):
    """Whether a float32 array or number is among `values` or their pytrees' leaves (a quick
    scan for every call: static arguments count here)."""
    for a in values:
        kind = type(a)
        if kind is np.ndarray or isinstance(a, np.floating):
            if a.dtype.char == "f":
                return True
        elif kind in (list, tuple) and _any_float32(a):  # (nested: the same scan)
            return True
        elif kind not in _LEAVES and kind is not dict and not isinstance(a, np.floating):
            leaves = pytrees.tree_leaves(a)  # (a NamedTuple or a registered dataclass)
            if not (len(leaves) == 1 and leaves[0] is a) and _any_float32(leaves):
                return True
        elif kind is dict and any(
                _any_float32((v,) if type(v) in _LEAVES or isinstance(v, np.floating)
                             else pytrees.tree_leaves(v)) for v in a.values()):
            return True  # (the leaves of each value: arrays and numbers without a walk)
    return False


_LEAVES = (np.ndarray, float, int, bool)


def _float_dtypes(values):
    """The dtypes of the float arrays and NumPy float numbers among `values` and their
    pytrees' leaves."""
    for a in values:
        if isinstance(a, (np.ndarray, np.floating)):
            if a.dtype.kind == "f":
                yield a.dtype
        elif type(a) not in _LEAVES:  # (dicts, lists, tuples, NamedTuples, dataclasses)
            leaves = pytrees.tree_leaves(a)
            if not (len(leaves) == 1 and leaves[0] is a):
                yield from _float_dtypes(leaves)


def _widened(value):
    """`value` with its float32 arrays and numbers as float64 (pytrees kept)."""
    def widen(a):
        if isinstance(a, (np.ndarray, np.floating)) and a.dtype == np.float32:
            return a.astype(np.float64)
        return a
    if isinstance(value, (np.ndarray, np.floating)):
        return widen(value)
    return pytrees.tree_map(widen, value)  # (a NamedTuple or registered dataclass too)


def _grads_like(jitted, args, result):
    """A mixed-precision call's gradients in the dtypes of the arguments they belong to, as
    the plain transformation gives them (a float32 argument's gradient is float32)."""
    if not isinstance(jitted, _ReverseTransform) or not args:
        return result
    single = isinstance(jitted.argnums, int)
    nums = [n % len(args) for n in ((jitted.argnums,) if single else jitted.argnums)]

    def like(g, a):
        if isinstance(a, np.ndarray) and isinstance(g, np.ndarray) and a.dtype == np.float32:
            return g.astype(np.float32)
        if isinstance(a, np.float32):
            return np.float32(g)
        return g

    def restore(grads):
        parts = [grads] if single else list(grads)
        for k, i in enumerate(nums):
            a = args[i]
            try:
                parts[k] = pytrees.tree_map(like, parts[k], a) if type(a) in (
                    dict, list, tuple) else like(parts[k], a)
            except (TypeError, ValueError):  # (a structure the gradient does not mirror)
                pass
        return parts[0] if single else tuple(parts)
    if jitted.with_value and jitted.has_aux:
        (value, aux), grads = result
        return (value, aux), restore(grads)
    if jitted.with_value:
        value, grads = result
        return value, restore(grads)
    if jitted.has_aux:
        grads, aux = result
        return restore(grads), aux
    return restore(result)


def _narrowed(tree):
    """float64 arrays and numbers of a result as float32 (JAX: float32 in, float32 out)."""
    def narrow(a):
        if isinstance(a, np.ndarray) and a.dtype == np.float64:
            return a.astype(np.float32)
        if isinstance(a, (float, np.float64)):
            return np.float32(a)
        return a
    return pytrees.tree_map(narrow, tree)


#: A key whose calls take the general path (no plan fits them): not worked out again.
_NO_PLAN = object()


def _leaf_key(a):
    """What decides the compiled signature for one array or scalar; None for anything else."""
    kind = type(a)
    if kind is np.ndarray:  # (every call's hot path)
        flags = a.flags
        shape = a.shape
        if not (flags.c_contiguous and flags.writeable and shape):
            return None
        dtype = a.dtype
        # which axes have size one; their number alone when none has (the common case)
        return (dtype, tuple([n == 1 for n in shape]) if 1 in shape else len(shape),
                _small_length(shape, dtype))
    if kind in (float, int, bool) or isinstance(a, np.generic):
        return kind
    return None


def _dict_of_leaves(a):
    """(keys, their values' _leaf_keys) of a dict of str keys whose values are arrays or
    numbers `_leaf_key` accepts, the keys sorted (the order pytrees flattens a dict in), else
    None."""
    keys = tuple(sorted(a)) if all([type(k) is str for k in a]) else None
    if keys is None:
        return None
    leaves = tuple([_leaf_key(a[k]) for k in keys])
    return None if None in leaves else (keys, leaves)


def _flat_dict_keys(a):
    """The sorted keys of `a` when it is a dict of arrays and numbers (_dict_of_leaves), else
    None."""
    found = _dict_of_leaves(a) if type(a) is dict else None
    return None if found is None else found[0]


def _make_plan(jitted, args):
    """A function of the call's arguments doing what the last (slow) call did, or None."""
    if jitted.jit_options.static_argnames or jitted._last is None or \
            getattr(jitted, "_needs_concrete", False):
        return None  # (ints written into the code as their values: the key has no value)
    generated, module = jitted._last
    jacobians = sys.modules.get(f"{__package__}.jacobians")  # (a warm start imports none)
    if jacobians is not None and isinstance(jitted, jacobians._JvpTransform):
        return _jvp_plan(jitted, args, getattr(module, generated.entry), jacobians)
    try:
        nparams = len(inspect.signature(jitted._signature_function()).parameters)
    except (TypeError, ValueError):
        return None
    if nparams != len(args):
        return None  # defaults filled in: keep the general path
    static = {i % len(args) for i in jitted.jit_options.static_argnums}
    # (i, a pytree?, its keys when a dict of arrays: the plan's key fixes both per call)
    dynamic = [(i, _leaf_key(args[i]) is None, _flat_dict_keys(args[i]))
               for i in range(len(args)) if i not in static]
    entry = getattr(module, generated.entry)
    # (the plan's key says every array is writeable: no read-only copies to look for)
    entry = getattr(entry, "call_writeable", entry)

    def flat(args):
        out = []
        for i, tree, keys in dynamic:
            if keys is not None:
                a = args[i]
                out.extend([a[k] for k in keys])
            elif tree:
                out.extend(pytrees.tree_leaves(args[i]))
            else:
                out.append(args[i])
        return out

    batched_plan = getattr(jitted, "_batched_plan", None)
    if batched_plan is not None:
        return batched_plan()
    if isinstance(jitted, _Primal):
        def primal_plan(args):
            return entry(*flat(args))
        return primal_plan
    if jacobians is not None and isinstance(jitted, jacobians._JacobianTransform):
        if jitted.has_aux or any(tree for _, tree, _ in dynamic) or static:
            return None
        _, _, specs = jitted._specs(args, {})
        if jitted.assembles_as_is(specs) and not jacobians.all_single_precision(args):
            def matrix_plan(args):  # (the plan's key fixes the dtypes: no float32 to narrow)
                return entry(*args)
            return matrix_plan
        like = jacobians.single_precision_like

        def jacobian_plan(args):  # (array and scalar arguments: the module's layout as is)
            return like(args, jitted.assemble(args, specs, entry(*args)))
        return jacobian_plan
    if not isinstance(jitted, _ReverseTransform):
        return None
    layout = generated.layout
    sizes = [len(g) for g in layout["groups"]]
    single = isinstance(jitted.argnums, int)
    nums = (jitted.argnums,) if single else tuple(jitted.argnums)
    argnums = [i % len(args) for i in nums]
    if any(n != 1 and _leaf_key(args[i]) is not None for n, i in zip(sizes, argnums)):
        return None
    n_extra = int(layout["value"]) + int(layout["aux"])
    one = n_extra + sum(sizes) == 1
    with_value, has_aux = jitted.with_value, jitted.has_aux
    # (the plan's key tells a leaf from a pytree: the same for every call it serves)
    kinds = {i: (tree, keys) for i, tree, keys in dynamic}
    trees = [kinds[i][0] for i in argnums]
    dict_keys = [kinds[i][1] for i in argnums]

    def reverse_plan(args):
        result = entry(*flat(args))
        if one:
            result = (result,)
        grads, at = [], n_extra
        for i, n, tree, keys in zip(argnums, sizes, trees, dict_keys):
            like = args[i]
            if keys is not None:  # (a dict of arrays: rebuilt without a pytree walk)
                grads.append({k: _match_leaf(g, like[k])
                              for k, g in zip(keys, result[at:at + n])})
            elif tree:
                grads.append(_rebuild(like, list(result[at:at + n])))
            else:
                grads.append(_match_leaf(result[at], like))
            at += n
        grads = grads[0] if single else tuple(grads)
        if not n_extra:
            return grads
        value = result[0]
        aux = _plain_dict(result[n_extra - 1])
        if with_value and has_aux:
            return (value, aux), grads
        return (value, grads) if with_value else (grads, aux)
    return reverse_plan


def _jvp_plan(jitted, args, entry, jacobians):
    """jit(jvp_transform(f)) called with tuples of float64 arrays, primals and tangents (the
    form a Hessian-vector product takes): the entry on the arrays as they are, or None.
    Tangent shapes are checked at every call (the plan's key fixes dtypes, not shapes)."""
    if jitted.has_aux or len(args) != 2:
        return None
    primals, tangents = args
    if type(primals) is not tuple or type(tangents) is not tuple or \
            len(primals) != len(tangents) or not primals:
        return None
    if not all(type(a) is np.ndarray and a.dtype == np.float64
               for a in primals + tangents):
        return None
    if FlatView.applies(jitted.fun, primals):
        return None
    match_tree = jacobians._match_tree

    def jvp_plan(args):
        primals, tangents = args
        for p, t in zip(primals, tangents):
            if p.shape != t.shape:  # the general path's error
                jacobians._tangent_leaves(primals, tangents)
        result = entry(*primals, *tangents)
        return result[0], match_tree(result[1], result[0])
    return jvp_plan


class _Primal(_Transformed):
    """``jit(f)`` of a plain function: the primal module, from the core form."""

    kind = "jit"

    def function_for(self, specs):
        return self._python_function(specs)

    def output_lists(self):
        return lists_of(self.fun)

    def __call__(self, *args, **kwargs):
        names, values, specs = self._specs(args, kwargs)
        fn = self._python_function(specs)

        def build():
            from .primal import build_primal  # not imported when the module is indexed
            return build_primal(fn, specs)
        generated, module = self._module_for(_spec_key(specs), build)
        flat = _flat_values(specs, names, values)
        return getattr(module, generated.entry)(*flat)


_CLASSES = {}


def _jitted_class(cls):
    if cls not in _CLASSES:
        batching = sys.modules.get(f"{__package__}.batching")  # no vmap before it is imported
        mixins = (_Jitted,)
        if batching is not None and issubclass(cls, batching._Vmapped):
            from .batch_loop import JittedBatching
            mixins = (JittedBatching, _Jitted)
        _CLASSES[cls] = type(f"Jitted{cls.__name__}", mixins + (cls,), {})
    return _CLASSES[cls]


def jit(fun, static_argnums=(), static_argnames=(), target="cpu", parallel=False, cache=True,
        batching="auto", **target_options):
    """Compile `fun` (a function, or one transformed by grad/value_and_grad/vmap/...) with Numba.

    static_argnums / static_argnames: arguments whose values are compile-time constants (they
    must be hashable; each value compiles its own version). target: 'cpu' (numba.njit) or
    'python' (the compiled dialect as plain Python, for debugging). parallel: passed to
    numba.njit (a fused pass over a large matrix's rows runs on Numba's threads either way, as
    BLAS would: docs/numba.md, "Large matrices in one pass"). cache: keep compiled code on disk
    for the next process. target='cuda' writes a CUDA kernel with one thread per example
    (autodiff_ast/cuda.py) and takes the options tape_size, threads_per_block and reduce
    ('sum': results added with cuda.atomic.add).
    batching (for ``jit(vmap(...))``): 'vectorized' compiles vmap's batched module, 'loop' a
    ``numba.prange`` loop calling the compiled per-example function, 'auto' picks the loop when
    the per-example code has a loop or no matrix product (autodiff_ast/batch_loop.py).

    >>> import numpy as np
    >>> from autodiff_ast import grad
    >>> def f(x, normal=True):
    ...     if normal:
    ...         return np.sum(x * x)
    ...     return np.sum(np.abs(x))
    >>> g = jit(grad(f), static_argnums=1)
    >>> g(np.array([1.0, -2.0]), True), g(np.array([1.0, -2.0]), False)
    (array([ 2., -4.]), array([ 1., -1.]))
    """
    if target not in TARGETS:
        raise ValueError(f"unknown jit target {target!r}; choose one of {sorted(TARGETS)}")
    if target == "cuda":  # options: tape_size, threads_per_block, reduce (autodiff_ast/cuda.py)
        from .cuda import cuda_jit
        if static_argnums or static_argnames:
            raise ValueError("jit(target='cuda') takes no static arguments yet")
        return cuda_jit(fun.jit_plain if isinstance(fun, _Jitted) else fun, **target_options)
    if target_options:
        raise TypeError(f"jit(target={target!r}) got unexpected options "
                        f"{sorted(target_options)}")
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if batching != "auto":  # batch_loop imports the passes: not for a warm start's jit(grad)
        from .batch_loop import STRATEGIES
        if batching not in STRATEGIES:
            raise ValueError(f"unknown batching {batching!r}; choose one of {STRATEGIES}")
    if not isinstance(fun, _Transformed) and not inspect.isfunction(fun):
        from .bound_maps import jit_of_bound_map  # a pullback or a linearized map
        bound = jit_of_bound_map(fun, {"target": target, "parallel": parallel,
                                       "cache": cache}, static=nums + names)
        if bound is not None:
            return bound
    options = JitOptions(target, bool(parallel), bool(cache), nums, names, batching)
    if isinstance(fun, _Jitted):
        fun = fun.jit_plain
    plain = fun if isinstance(fun, _Transformed) else _Primal(fun)
    jitted = object.__new__(_jitted_class(type(plain)))
    jitted.__dict__.update(plain.__dict__)
    jitted._modules = {}
    jitted._last = None
    jitted.jit_plain = plain
    jitted.jit_options = options
    jitted.jit_interned = {}
    jitted.jit_plans = {}
    return jitted


def _all_finite(result):
    """Whether every number in `result` (arrays, numbers, and tuples, lists and dicts of them)
    is finite."""
    if isinstance(result, (tuple, list)):
        return all(_all_finite(r) for r in result)
    if isinstance(result, dict):
        return all(_all_finite(r) for r in result.values())
    array = np.asarray(result)
    return array.dtype.kind not in "fc" or bool(np.all(np.isfinite(array)))


# ---------------------------------------------------------------- errors on the user's line
def _user_function(transformed):
    fun = transformed
    while isinstance(fun, _Transformed):
        if fun.py_fun is not None:
            return fun.py_fun
        fun = fun.fun
    return fun


def compile_error(failure, user_fn):
    """A :class:`CompileError` for a Numba failure, located on the user's line.

    The generated line is traced back through the ``# <user line>`` comment above it (or, in
    the forward sweep, its own text) to a line of the user's function or of a function it calls.
    """
    from codegen.numba_cpu import comment_above
    text = "".join(linecache.getlines(failure.filename))
    candidates = []
    if failure.lineno:
        above = comment_above(text, failure.lineno)
        candidates += [above] if above else []
        candidates += [failure.code] if failure.code else []
    filename, lineno, code = _find_user_line(user_fn, candidates)
    where = f"line {failure.lineno} of {os.path.basename(failure.filename)}" if \
        failure.lineno else os.path.basename(failure.filename)
    if failure.function:
        where = f"{failure.function}, {where}"
    generated = f" (`{failure.code}`)" if failure.code else ""
    what = "this line" if failure.lineno else "this function"
    message = (f"Numba cannot compile the generated code for {what} ({where}"
               f"{generated}): {failure.reason}")
    hint = ("rewrite the line with NumPy functions Numba supports (docs/numba.md lists what "
            "the lowering rewrites for it), or call the function without jit")
    mixed = re.search(r"Cannot unify (.+?) and (.+?) for '([A-Za-z_]\w*)", failure.reason or "")
    if mixed:  # one name an array on one path, a number on another (`a[i] if i else 0.0`)
        first, second, var = mixed.groups()
        hint = (f"`{var}` is {first} on one path and {second} on another, and Numba gives a "
                "variable one type: make the paths agree (an array on both, e.g. "
                "np.zeros_like(...) for 0.0), or call the function without jit")
    return CompileError(message, filename=filename, lineno=lineno, code=code, hint=hint)


def _related_functions(fn, limit=50):
    """`fn` and the Python functions it reaches through its globals and closure."""
    seen, order, queue = set(), [], [fn]
    while queue and len(order) < limit:
        f = queue.pop(0)
        if not inspect.isfunction(f) or id(f) in seen:
            continue
        seen.add(id(f))
        order.append(f)
        code = f.__code__
        names = [f.__globals__.get(n) for n in code.co_names]
        cells = [c.cell_contents for c in (f.__closure__ or ()) if _has_contents(c)]
        queue += [v for v in names + cells if inspect.isfunction(v)]
    return order


def _has_contents(cell):
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _find_user_line(user_fn, candidates):
    """(file, line, text) of the first candidate text found in the user's functions; the
    user function's def line when none is found."""
    spans = []
    for f in _related_functions(user_fn):
        try:
            lines, first = inspect.getsourcelines(f)
        except (OSError, TypeError):
            continue
        spans.append((f.__code__.co_filename, first, first + len(lines) - 1))
    # Exact lines first; then a user line holding the generated statement's right-hand side
    # (a forward statement is often a piece of the user's line).
    tries = [(" ".join(c.split()), False) for c in candidates]
    if candidates and "=" in candidates[-1]:
        rhs = " ".join(candidates[-1].split("=", 1)[1].split())
        if len(rhs) > 6:
            tries.append((rhs, True))
    for wanted, inside in tries:
        for filename, first, last in spans:
            lines = linecache.getlines(filename)
            for row in range(first, min(last, len(lines)) + 1):
                text = " ".join(lines[row - 1].split())
                if text == wanted or (inside and wanted in text):
                    return filename, row, lines[row - 1].strip()
    if not spans:
        return None, None, None
    filename, first, _ = spans[0]
    lines = linecache.getlines(filename)
    return filename, first, (lines[first - 1].strip() if 0 < first <= len(lines) else None)
