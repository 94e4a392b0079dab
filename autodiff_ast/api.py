"""The public transformations: JAX's names and semantics, with generated source you can read.

Each transformation returns a callable object. On a call it takes the abstract signature of the
arguments (dtype, rank, which axes have size one, pytree structure; never sizes), generates one
module per signature, loads it from a content-hashed file (so tracebacks, ``inspect`` and pdb see
the generated lines) and calls it. ``.source`` is the text of the last generated module.

>>> import numpy as np
>>> df = grad(lambda x: np.sum(np.sin(x)))
>>> np.allclose(df(np.array([0.0, 1.0])), np.cos([0.0, 1.0]))
True
>>> "np.cos(x)" in df.source
True
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import itertools
import linecache
import os
import re
import sys
import threading
from types import FunctionType

import numpy as np

from codegen.loader import load_source

from . import debug, pytrees
from . import types as T
from .errors import (
    ArgnumsError,
    ArgumentError,
    AutodiffError,
    ShapeMismatchError,
    SourceUnavailableError,
    UnsupportedError,
)
from .naming import sanitize
from .nesting import code_to_transform, writing_code_to_transform
from .output_lists import lists_of, restore_lists, result_lists, tuple_spec
from .specs import Static, spec_of

# The front end and the passes (frontend, build, normalize, rules) are imported where they are
# used: a process whose compiled modules are all cached (autodiff_ast.jit) never needs them.

# ---------------------------------------------------------------- functions without source
_PRIMITIVE_WRAPPERS = {}


def _as_python_function(fun):
    """A Python function we can read: `fun` itself, or a one-line wrapper of a primitive."""
    # A function with a custom rule: a call that routes to it. Custom rules live in
    # autodiff_ast.custom: until it is imported, no function has one.
    custom = sys.modules.get(f"{__package__}.custom")
    wrapped = custom.wrapper_for(fun) if custom is not None else None
    if wrapped is not None:
        return wrapped
    if inspect.isfunction(fun) or inspect.ismethod(fun):
        return fun
    from .rules import lookup
    rule = lookup(fun)
    if rule is None:
        raise SourceUnavailableError(
            f"cannot differentiate {fun!r}: it is not a Python function and has no rule",
            hint="pass a function defined with def or lambda")
    if fun in _PRIMITIVE_WRAPPERS:
        return _PRIMITIVE_WRAPPERS[fun]
    nargs = max(1, len(rule.diff))
    params = ", ".join(rule.params[:nargs])
    fname = sanitize(rule.name.split("@")[0])
    module = "math" if (rule.emit or "").startswith("math.") else "np"
    call = rule.emit or f"{module}.{fname}"
    source = f"def {fname}({params}):\n    return {call}({params})\n"
    filename = f"<autodiff-ast primitive {rule.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np, "math": __import__("math")}
    exec(compile(source, filename, "exec"), namespace)
    # (taken out of its namespace: `def len(x): return len(x)` must call the builtin, not
    # itself, which made grad(len) a recursive helper and a RecursionError)
    wrapper = namespace.pop(fname)
    _PRIMITIVE_WRAPPERS[fun] = wrapper
    return wrapper


# ---------------------------------------------------------------- argument handling
_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def _bind(fun, args, kwargs, transform=None):
    """Positional values of every parameter (keyword arguments placed by name). Arguments that
    do not fit raise ArgumentError naming `transform` (``"grad"``) and the function."""
    code = getattr(fun, "__code__", None)
    if not kwargs and type(fun) is FunctionType and len(args) == code.co_argcount and \
            not code.co_kwonlyargcount and not code.co_flags & _VARIADIC and not fun.__dict__:
        # Every parameter passed by position (the common call): what sig.bind would give
        # (a function with attributes may carry __wrapped__ or __signature__: bound below).
        return list(code.co_varnames[:len(args)]), list(args)
    target = fun.__func__ if inspect.ismethod(fun) else fun
    sig = inspect.signature(target)
    try:
        if inspect.ismethod(fun):
            bound = sig.bind(fun.__self__, *args, **kwargs)
        else:
            bound = sig.bind(*args, **kwargs)
    except TypeError as exc:  # a missing argument, one too many, an unknown keyword
        name = getattr(target, "__name__", "the function")
        shown = ", ".join([type(a).__name__ for a in args] +
                          [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
        called = f"{transform}({name})" if transform else f"the transformed {name}{sig}"
        raise ArgumentError(
            f"{called} was called as {name}({shown}): {exc}",
            hint=f"pass the arguments of {name}{sig}: a transformed function takes the "
                 "arguments of the function it transforms") from None
    bound.apply_defaults()
    names, values = list(bound.arguments), list(bound.arguments.values())
    if inspect.ismethod(fun):
        names, values = names[1:], values[1:]
    return names, values


#: Argument types whose spec is their abstract value (never a pytree container).
_LEAF_TYPES = (np.ndarray, float, int, bool, np.float64, np.float32, np.int64, np.int32,
               np.bool_)


_ARRAY_SPECS = {}  # (dtype, which axes have size one) -> AType (immutable, so shared)


def _spec_of(value):
    """``specs.spec_of(value)``, the spec of an array or a number kept per dtype."""
    if type(value) is np.ndarray and value.ndim:
        key = (value.dtype, tuple(s == 1 for s in value.shape))
        spec = _ARRAY_SPECS.get(key)
        if spec is None:
            spec = _ARRAY_SPECS[key] = T.abstract_of(value)
        return spec
    if type(value) in _LEAF_TYPES:
        return T.abstract_of(value)
    return spec_of(value)


def _spec_kind(spec):
    """'leaf', 'static' or 'tree' (autodiff_ast/specs.py)."""
    if isinstance(spec, T.AType):
        return "leaf"
    return "static" if isinstance(spec, Static) else "tree"


def _spec_key(specs):
    items = []
    for k, v in specs.items():
        items.append((k, ("static", id(v.value)) if _spec_kind(v) == "static" else v))
    return tuple(items)


def _flat_values(specs, names, values):
    flat = []
    for pname, value in zip(names, values):
        kind = _spec_kind(specs[pname])
        if kind == "tree":
            flat.extend(pytrees.tree_leaves(value))
        elif kind == "leaf":
            flat.append(_prepare_leaf(value))
    return flat


def _prepare_leaf(value):
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        return np.ascontiguousarray(value)
    if type(value) is float:
        # NumPy's scalar, like JAX: log'(0) and sqrt'(0) are inf (with a RuntimeWarning)
        # where a Python float would raise ZeroDivisionError in the generated code.
        return np.float64(value)
    return value


def _match_leaf(grad_value, like):
    """Give a gradient the dtype (and scalar-ness) of the input it belongs to."""
    if type(grad_value) is np.ndarray and type(like) is np.ndarray and \
            grad_value.dtype == like.dtype and grad_value.shape == like.shape:
        return grad_value  # (the common case, first: jit's fast path calls this per leaf)
    if isinstance(like, np.ndarray):
        out = np.asarray(grad_value)
        if out.shape != like.shape:
            out = np.broadcast_to(out, like.shape).copy()
        return out.astype(like.dtype, copy=False) if out.dtype != like.dtype else out
    if isinstance(like, np.floating):
        return like.dtype.type(grad_value)
    return np.float64(grad_value) if np.ndim(grad_value) == 0 else grad_value


def _rebuild(value, leaves):
    """`leaves` arranged like the pytree `value`."""
    if type(value) in _LEAF_TYPES and type(value) not in pytrees._REGISTRY:
        return _match_leaf(leaves[0], value)
    treedef = pytrees.tree_structure(value)
    like = pytrees.tree_leaves(value)
    return pytrees.tree_unflatten(treedef, [_match_leaf(g, v) for g, v in zip(leaves, like)])


def _normalize_argnums(argnums, nparams, info):
    """(single, argnums resolved to non-negative ints). `info` (the user function's
    FunctionInfo, or a function returning it) places the error when argnums is malformed."""
    single = isinstance(argnums, int)
    try:
        nums = (argnums,) if single else tuple(argnums)
    except TypeError:  # a float or another non-iterable
        nums = (argnums,)
    for i in nums:
        if not isinstance(i, int) or isinstance(i, bool):
            info = info() if callable(info) else info
            raise ArgnumsError(f"argnums must be an int or a tuple of ints, got {argnums!r}",
                               filename=info.filename, lineno=info.file_line(info.node),
                               hint="write argnums=0 or argnums=(0, 2)")
    resolved = tuple(i % nparams if -nparams <= i < 0 else i for i in nums)
    return single, resolved


def _annotating(call):
    """`call` (a transformed function's __call__), adding to any exception raised inside
    generated code a note naming the user's line (autodiff_ast.debug)."""
    @functools.wraps(call)
    def wrapper(self, *args, **kwargs):
        self._in_call = getattr(self, "_in_call", 0) + 1
        depth = getattr(_CALLS, "depth", 0)
        _CALLS.depth = depth + 1
        try:
            result = call(self, *args, **kwargs)
        except Exception as exc:
            debug.annotate(exc)
            raise
        finally:
            self._in_call -= 1
            _CALLS.depth = depth
        return self.with_output_lists(result)
    wrapper.annotates = True
    return wrapper


#: How many transformed calls this thread is inside: only the outermost puts back the lists
#: the user's function returns (inner calls, made by the library, get the generated tuples).
_CALLS = threading.local()


#: Transformations that take debug_nans (the global config applies to these).
_NAN_KINDS = ("grad", "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "vmap")


_IMPORT_LINE = re.compile(r"^from ([\w.]+) import (\w+)(?: as (\w+))?$", re.MULTILINE)


def _rebound_imports(module, source):
    """Whether a value `source` imports from a module of the user's (``from modw import W``)
    is no longer what that module holds: the loaded module (shared by every transform of
    the same source) bound the old one."""
    for home, attr, alias in _IMPORT_LINE.findall(source):
        held = sys.modules.get(home)
        if held is not None and home not in ("numpy", "math", "autodiff_ast") and \
                getattr(module, alias or attr, None) is not getattr(held, attr, None):
            return True
    return False


def _private_copy(module):
    """A second module object executing the same file (tracebacks still show its lines)."""
    import sys
    import types as pytypes
    # Registered under its own name: code generated from this module's functions imports
    # their data by module name (`from <module> import cotangent`) and must find this copy.
    count = _PRIVATE_COPIES[module.__name__] = _PRIVATE_COPIES.get(module.__name__, 0) + 1
    copy = pytypes.ModuleType(f"{module.__name__}_data{count}", module.__doc__)
    copy.__file__ = module.__file__
    with open(module.__file__, "rb") as handle:
        code = compile(handle.read(), module.__file__, "exec", dont_inherit=True)
    sys.modules[copy.__name__] = copy
    exec(code, copy.__dict__)
    return copy


_PRIVATE_COPIES = {}


class _Transformed:
    """A transformed function: call it like the original; `.source` shows the generated code."""

    kind = "transform"
    debug_nans = None  # None: follow autodiff_ast.config
    # whether a transform of this one takes a parameter left to its default as a static
    # argument (its value written into the code) rather than as an argument of its own
    defaults_static = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "annotates", False):
            cls.__call__ = _annotating(call)

    def __init__(self, fun, verbose=False):
        self.fun = fun
        # A transformed function is differentiated through the source it generates, which
        # exists only once the argument types are known: resolved per call (DESIGN.md, 1).
        self.py_fun = None if isinstance(fun, _Transformed) else _as_python_function(fun)
        self.verbose = verbose
        self._modules = {}
        self._last = None
        functools.update_wrapper(self, self.py_fun or fun, updated=())

    def function_for(self, specs):
        """The generated entry function for argument specs (flat leaves only)."""
        raise NotImplementedError

    def output_lists(self):
        """Which parts of a call's result are lists (a spec of autodiff_ast/output_lists.py):
        the generated code returns them as tuples, and the call rebuilds them."""
        return None

    def with_output_lists(self, result):
        """A call's `result` with the lists the function returns put back, when no other
        transformed call is running in this thread (the library's own inner calls get the
        generated tuples). Only a tuple can stand for a list: the source is not read for
        anything else."""
        if type(result) is not tuple or getattr(_CALLS, "depth", 0):
            return result
        lists = self.output_lists()
        return result if lists is None else restore_lists(result, lists)

    def _python_function(self, specs):
        if self.py_fun is not None:
            return self.py_fun
        with code_to_transform():  # this transformation reads the code the inner one writes
            return self.fun.function_for(specs)

    def _code_to_transform(self, specs, argnums=()):
        """(function, specs, argnums) to generate from. For the user's function, `specs` and
        `argnums` as they are; for an inner transform's generated code, which takes no
        parameter for a static argument (the inner transform wrote its value in, as
        ``axis=1``), the specs without those and each argnum moved down past them (a static
        argument is never differentiated). The module's cache key stays the full specs'."""
        py_fun = self._python_function(specs)
        static = [k for k, s in enumerate(specs.values()) if _spec_kind(s) == "static"]
        if self.py_fun is not None or not static:
            return py_fun, specs, argnums
        kept = {n: s for n, s in specs.items() if _spec_kind(s) != "static"}
        moved = tuple(a - sum(1 for k in static if k < a) for a in argnums)
        return py_fun, kept, moved

    def _forget_if_redefined(self):
        """Drop the generated modules when the user's function has a new code object
        (``f.__code__ = g.__code__``): they were generated from the old one."""
        code = getattr(self.py_fun, "__code__", None)
        seen = self.__dict__.get("_code")
        if seen is not None and seen is not code:
            self._modules.clear()
            self._last = None
            self.__dict__.get("jit_plans", {}).clear()
        self._code = code

    @property
    def source(self):
        """The generated module (for the most recent call's signature) as text."""
        if self._last is None:
            raise AttributeError(
                f"{self.kind}({getattr(self.fun, '__name__', 'f')}).source is written on the "
                "first call, for the argument types of that call: call it once, or use "
                "autodiff_ast.source(f, *example_args)")
        return self._last[0].source

    def _module_for(self, key, build):
        self._forget_if_redefined()
        # debug_nans: a variant with checks, for calls only (composed transforms read the
        # plain source).
        nans = getattr(self, "_in_call", 0) and self.kind in _NAN_KINDS and \
            debug.nans_enabled(self.debug_nans)
        key = (key, "debug_nans") if nans else key
        if writing_code_to_transform():  # (no tape rows written through views: nesting.py)
            key = (key, "to_transform")
        if key not in self._modules:
            generated = build()
            name = sanitize(f"{generated.entry}")
            if nans:
                name = f"debug_{name}"
                text = debug.nan_variant(generated.source, debug.user_function_of(self))
                generated = dataclasses.replace(generated, source=text)
            module = load_source(generated.source, name)
            if _rebound_imports(module, generated.source):
                # the user rebound a module global this source imports (`modw.W = new`) since
                # the module was loaded: a copy of its own imports the value now
                module = _private_copy(module)
            if generated.injected:
                # Values this function closes over: its own module object, so that two closures
                # with the same source never share (and overwrite) each other's data.
                module = _private_copy(module)
                for n, v in generated.injected.items():
                    setattr(module, n, v)
            debug.register(module.__file__, debug.user_function_of(self))
            self._modules[key] = (generated, module)
            if self.verbose:
                print(generated.source)
        self._last = self._modules[key]
        return self._last

    def _concrete_ints(self, names, values, candidates):
        """{name: Static(value)} for the arguments named in `candidates` holding a Python int
        (or a NumPy integer, or a bool). The values are interned (kept alive), so that a
        cache key built from their identity stays theirs."""
        interned = self.__dict__.setdefault("_interned_ints", {})
        out = {}
        for pname, value in zip(names, values):
            if pname in candidates and isinstance(value, (int, np.integer)):
                key = (type(value), int(value))
                out[pname] = Static(interned.setdefault(key, value))
        return out

    def _generate_concrete(self, specs, concrete, generate):
        """`generate(specs)`, with the arguments in `concrete` (from :meth:`_concrete_ints`)
        written as the values they hold once code for run-time ints cannot be written: JAX
        runs an argument it neither differentiates nor maps as the Python value itself
        (``np.sum(x, axis=axis)``). After one such call this function always does."""
        if concrete and getattr(self, "_needs_concrete", False):
            specs.update(concrete)
            return generate(specs)
        try:
            return generate(specs)
        except AutodiffError as error:
            if not concrete:
                raise
            first = error
        try:
            out = generate(dict(specs, **concrete))
        except NotImplementedError:  # (a composition that cannot take static arguments)
            raise first from None
        specs.update(concrete)
        self._needs_concrete = True
        return out

    def _specs(self, args, kwargs):
        target = self.py_fun if self.py_fun is not None else self.fun._signature_function()
        names, values = _bind(target, args, kwargs, getattr(self, "kind", None))
        specs = {n: _spec_of(v) for n, v in zip(names, values)}
        if self.py_fun is None and getattr(self.fun, "defaults_static", False):
            # a parameter left to its default is the inner transform's constant (vmap does
            # not map it), not one of its arguments
            passed = set(names[:len(args)]) | set(kwargs)
            specs.update({n: Static(v) for n, v in zip(names, values) if n not in passed})
        return names, values, specs

    def _signature_function(self):
        """A function with the parameters this transformed function is called with."""
        return self.py_fun if self.py_fun is not None else self.fun._signature_function()


class _ReverseTransform(_Transformed):
    def __init__(self, fun, argnums=0, has_aux=False, with_value=False, verbose=False):
        super().__init__(fun, verbose)
        self.argnums = argnums
        self.has_aux = has_aux
        self.with_value = with_value
        self.kind = "value_and_grad" if with_value else "grad"

    def _generate(self, specs, argnums):
        py_fun, own_specs, own_argnums = self._code_to_transform(specs, argnums)
        key = (_spec_key(specs), argnums)

        def build():
            from .build import build_reverse
            return build_reverse(py_fun, own_specs, argnums=own_argnums,
                                 has_aux=self.has_aux, with_value=self.with_value,
                                 argnums_text=self.argnums)
        return self._module_for(key, build)

    def _argnums(self, nparams, specs):
        """(single, resolved argnums) for `nparams` arguments, worked out once per count;
        the user's function is parsed only to report a malformed argnums."""
        known = self.__dict__.setdefault("_argnums_by_count", {})
        if nparams not in known:
            def info():
                from .frontend import cached_parse
                return cached_parse(self._python_function(specs))
            known[nparams] = _normalize_argnums(self.argnums, nparams, info)
        return known[nparams]

    def flat_entry(self, names, likes, specs):
        """(entry, structure): the generated function taking the flat leaves of the arguments,
        and a pytree of indices into its flat outputs with the structure a call returns
        (gradients shaped like the pytree arguments they belong to)."""
        single, argnums = self._argnums(len(names), specs)
        generated, module = self._generate(specs, argnums)
        layout = generated.layout
        k, extra = 0, []
        for present in (layout["value"], layout["aux"]):
            if present:
                extra.append(k)
                k += 1
        grads = []
        for i, group in zip(argnums, layout["groups"]):
            treedef = pytrees.tree_structure(likes[i])
            grads.append(pytrees.tree_unflatten(treedef, list(range(k, k + len(group)))))
            k += len(group)
        grads = grads[0] if single else tuple(grads)
        if layout["value"] and layout["aux"]:
            structure = ((extra[0], extra[1]), grads)
        elif layout["value"] or layout["aux"]:
            structure = (extra[0], grads) if layout["value"] else (grads, extra[0])
        else:
            structure = grads
        return getattr(module, generated.entry), structure

    def function_for(self, specs):
        if any(_spec_kind(s) == "tree" for s in specs.values()):
            raise UnsupportedError("transforming a transformed function with pytree "
                                   "arguments is not supported yet",
                                   hint="use hessian(f) for the second derivatives of pytree "
                                        "arguments, jvp or vjp of grad(f) for Hessian-vector "
                                        "products, or pass flat array arguments")
        single, argnums = self._argnums(len(specs), specs)
        generated, module = self._generate(specs, argnums)
        entry = getattr(module, generated.entry)
        layout = generated.layout
        if not (layout["aux"] or (layout["value"] and not single)):
            return entry  # (the generated outputs are the call's, in its order)
        return self._in_call_order(entry, layout, single)

    def _in_call_order(self, entry, layout, single):
        """`entry` (which returns value, aux and the gradients flat, in that order) wrapped so
        that it returns what a call does: ``(gradients, aux)``, ``(value, (g0, g1))``,
        ``((value, aux), gradients)``. Transforms of this one read the wrapper's source."""
        cache = self.__dict__.setdefault("_call_order", {})
        if entry in cache:
            return cache[entry]
        outputs = iter(f"out[{k}]" for k in itertools.count())
        value = next(outputs) if layout["value"] else None
        aux = next(outputs) if layout["aux"] else None
        grads = [next(outputs) for _ in layout["groups"]]
        grads_text = grads[0] if single else "(" + ", ".join(grads) + ("," if len(grads) == 1
                                                                     else "") + ")"
        if value and aux:
            returned = f"(({value}, {aux}), {grads_text})"
        elif value:
            returned = f"({value}, {grads_text})"
        else:
            returned = f"({grads_text}, {aux})"
        params = ", ".join(inspect.signature(entry).parameters)
        name = f"{entry.__name__}_in_call_order"
        text = (f"def {name}({params}):\n    out = {entry.__name__}({params})\n"
                f"    return {returned}\n")
        from .custom import source_function
        cache[entry] = source_function(text, name, {entry.__name__: entry})
        return cache[entry]

    def output_lists(self):
        if not self.has_aux:
            return None  # gradients come back in the structure of the arguments
        if self.with_value:  # ((value, aux), gradients): the function's own output first
            return tuple_spec(lists_of(self.fun), None)
        return result_lists(self.fun, True, lambda out: (None,))  # (gradients, aux)

    def one_tuple_output(self, specs):
        """Whether a call returns a 1-tuple (``argnums=(0,)``) that the generated entry
        function (:meth:`function_for`) returns bare: transforms of this one put it back."""
        single, argnums = self._argnums(len(specs), specs)
        return not single and len(argnums) == 1 and not self.with_value and not self.has_aux

    def __call__(self, *args, **kwargs):
        names, values, specs = self._specs(args, kwargs)
        single, argnums = self._argnums(len(names), specs)
        concrete = self._concrete_ints(
            names, values, {n for k, n in enumerate(names) if k not in argnums})
        generated, module = self._generate_concrete(
            specs, concrete, lambda specs: self._generate(specs, argnums))
        flat = _flat_values(specs, names, values)
        result = getattr(module, generated.entry)(*flat)
        layout = generated.layout
        n_extra = int(layout["value"]) + int(layout["aux"])
        groups = layout["groups"]
        n_bars = sum(len(g) for g in groups)
        if not isinstance(result, tuple) or n_extra + n_bars == 1:
            result = (result,)
        extra, bars = result[:n_extra], list(result[n_extra:])
        grads = []
        for i, group in zip(argnums, groups):
            leaf_grads, bars = bars[:len(group)], bars[len(group):]
            grads.append(_rebuild(values[i], leaf_grads))
        grads = grads[0] if single else tuple(grads)
        value = extra[0] if self.with_value else None
        aux = _plain_dict(extra[-1]) if self.has_aux else None
        if self.with_value and self.has_aux:
            return (value, aux), grads
        if self.with_value:
            return value, grads
        if self.has_aux:
            return grads, aux
        return grads


def _plain_dict(value):
    """An aux dict a compiled function returned (Numba gives a typed dict, its values of one
    type) as a plain dict, as the uncompiled function returns it."""
    if type(value).__name__ == "Dict" and type(value).__module__.startswith("numba"):
        return dict(value)
    return value


def grad(fun, argnums=0, has_aux=False, verbose=False, debug_nans=None):
    """Gradient of a scalar-output function, as generated source (JAX's ``grad``).

    argnums picks the differentiated positional argument(s) (an int or a tuple); with
    has_aux=True, `fun` returns ``(output, aux)`` and the result is ``(gradient, aux)``.
    verbose=True prints the generated module when it is written. debug_nans=True raises
    FloatingPointError at the first generated statement that produces a NaN or inf, naming
    your line (None: follow ``autodiff_ast.config``).

    >>> import numpy as np
    >>> grad(lambda x, y: x * y, argnums=(0, 1))(2.0, 3.0)
    (np.float64(3.0), np.float64(2.0))
    """
    transformed = _ReverseTransform(fun, argnums, has_aux, with_value=False, verbose=verbose)
    transformed.debug_nans = debug_nans
    return transformed


def value_and_grad(fun, argnums=0, has_aux=False, verbose=False, debug_nans=None):
    """``(value, gradient)`` in one pass; ``((value, aux), gradient)`` with has_aux.
    debug_nans as for :func:`grad`.

    >>> value_and_grad(lambda x: x ** 3)(2.0)
    (np.float64(8.0), np.float64(12.0))
    """
    transformed = _ReverseTransform(fun, argnums, has_aux, with_value=True, verbose=verbose)
    transformed.debug_nans = debug_nans
    return transformed


class _Pullback:
    """The cotangent function returned by :func:`vjp`; `.source` shows the backward code."""

    def __init__(self, generated, module, residuals, flat_params, values, n_seeds, tuple_out):
        self.generated = generated
        self.module = module
        self.residuals = residuals
        self.flat_params = flat_params
        self.values = values
        self.n_seeds = n_seeds
        self.tuple_out = tuple_out
        self.source = generated.source

    def __call__(self, cotangent):
        layout = self.generated.layout
        if getattr(self, "one_tuple", False) and isinstance(cotangent, tuple) and \
                len(cotangent) == 1:
            cotangent = cotangent[0]
        if layout.get("dicts") is not None:  # a dict output's cotangent is a dict like it
            from codegen.dict_outputs import flatten_dicts  # (gast: not at a warm start)
            try:
                cotangent = flatten_dicts(cotangent, layout["dicts"])
            except TypeError as exc:
                raise ShapeMismatchError(f"vjp: {exc}", hint="pass a cotangent shaped like "
                                         "the function's output") from None
        cts = list(cotangent) if self.tuple_out else [cotangent]
        likes = getattr(self, "out_likes", None)
        if likes is not None and len(cts) == len(likes):
            cts = [list(c) if isinstance(o, list) and isinstance(c, np.ndarray) else c
                   for c, o in zip(cts, likes)]
        if likes is not None and (len(cts) != len(likes) or any(
                _leaf_shapes(c) != _leaf_shapes(o) for c, o in zip(cts, likes))):
            raise ShapeMismatchError(
                f"vjp: the cotangent has shape(s) {[_shapes_text(c) for c in cts]}, but the "
                f"output has shape(s) {[_shapes_text(o) for o in likes]}",
                hint="pass a cotangent shaped like the function's output")
        # a list built at run time gets its cotangent as a list (the backward pops it);
        # a nested output's cotangent keeps its nesting, leaves made floats
        cts = [[_float_value(e) for e in c] if isinstance(o, list) else
               pytrees.tree_map(_float_value, c)
               for c, o in zip(cts, likes or [None] * len(cts))]
        bwd = getattr(self.module, self.generated.extra["bwd"])
        # The backward code pops its tapes and restores overwritten elements in place: each
        # call gets its own copy of the residuals, so the pullback can be called again.
        residuals = copy.deepcopy(self.residuals)
        try:
            result = bwd(*self.flat_params, *residuals, *cts[:self.n_seeds])
        except Exception as exc:
            debug.annotate(exc)  # names the user's line of the failing generated line
            raise
        n_bars = sum(len(g) for g in layout["groups"])
        if n_bars == 1 or not isinstance(result, tuple):
            result = (result,)
        bars = list(result)
        out = []
        for value, group in zip(self.values, layout["groups"]):
            leaf_grads, bars = bars[:len(group)], bars[len(group):]
            leaves = pytrees.tree_leaves(value)
            if len(leaf_grads) != len(leaves):  # integer leaves get zero cotangents
                it = iter(leaf_grads)
                leaf_grads = [next(it) if _is_float_leaf(v) else np.zeros(np.shape(v))
                              for v in leaves]
            out.append(_rebuild(value, leaf_grads))
        # one cotangent per primal passed (parameters their defaults filled are constants)
        return tuple(out[:getattr(self, "n_primals", len(out))])


def _leaf_shapes(value):
    return [np.shape(leaf) for leaf in pytrees.tree_leaves(value)]


def _shapes_text(value):
    shapes = _leaf_shapes(value)
    return shapes[0] if len(shapes) == 1 and not isinstance(value, (list, tuple)) else shapes


def _float_value(value):
    return np.asarray(value, dtype=float) if np.ndim(value) else float(value)


def _is_float_leaf(value):
    return T.abstract_of(value).is_float


class FlatView:
    """A gradient function (``grad(f)``) called with pytree arguments, seen as its generated
    entry on the flat leaves: vjp and jvp differentiate that entry, and this view puts their
    results back into the pytrees the user passed and gets back (dicts of gradients)."""

    def __init__(self, fun, primals):
        names, values, specs = fun._specs(tuple(primals), {})
        self.values = values
        self.trees = [_spec_kind(specs[n]) == "tree" for n in names]
        with code_to_transform():  # the entry is differentiated again (nesting.py)
            self.entry, self.structure = fun.flat_entry(names, values, specs)
        self.flat = _flat_values(specs, names, values)
        self.n_out = len(pytrees.tree_leaves(self.structure))
        self.spans, start = [], 0  # each argument's positions among the flat leaves
        for value, is_tree in zip(values, self.trees):
            count = len(pytrees.tree_leaves(value)) if is_tree else 1
            self.spans.append(range(start, start + count))
            start += count

    @staticmethod
    def applies(fun, primals):
        """Whether `fun` is a gradient function and some argument is a pytree (with no
        static arguments, which the flat entry cannot take)."""
        if not isinstance(fun, _ReverseTransform):
            return False
        kinds = [_spec_kind(_spec_of(v)) for v in primals]
        return "tree" in kinds and "static" not in kinds

    def outputs(self, flat_out):
        """The flat entry's result, in the structure a call of the gradient function has."""
        leaves = flat_out if self.n_out > 1 else (flat_out,)
        return pytrees.tree_map(lambda i: leaves[i], self.structure)

    def flat_outputs(self, tree):
        """A pytree shaped like the outputs (a cotangent or tangent) as the flat entry's."""
        order = pytrees.tree_leaves(self.structure)
        leaves = pytrees.tree_leaves(tree)
        if len(leaves) != len(order):
            raise ShapeMismatchError(f"expected a pytree with {len(order)} leaves shaped like "
                                     f"the output, got {len(leaves)}",
                                     hint="pass a value structured like the function's output")
        flat = [None] * len(order)
        for i, leaf in zip(order, leaves):
            flat[i] = leaf
        return tuple(flat) if self.n_out > 1 else flat[0]

    def flat_tangents(self, tangents):
        """Per-argument tangents (pytrees like the arguments) as one per flat leaf."""
        out = []
        for is_tree, t in zip(self.trees, tangents):
            if not is_tree:
                out.append(t)
                continue
            t = pytrees.tree_map(lambda x: 0.0 if x is None else x, t,
                                 is_leaf=lambda x: x is None)
            out += pytrees.tree_leaves(t)
        return tuple(out)

    def arguments(self, flat_cts):
        """Flat input cotangents as one per argument, each shaped like the argument."""
        flat_cts, out = list(flat_cts), []
        for value, is_tree, span in zip(self.values, self.trees, self.spans):
            part = flat_cts[span.start:span.stop]
            out.append(_rebuild(value, part) if is_tree else part[0])
        return tuple(out)

    def vjp(self):
        out, pullback = vjp(self.entry, *self.flat)

        def tree_pullback(cotangent):
            return self.arguments(pullback(self.flat_outputs(cotangent)))
        tree_pullback.source = pullback.source
        return self.outputs(out), tree_pullback


class _VjpBuilder(_Transformed):
    kind = "vjp"

    def __init__(self, fun, has_aux=False):
        super().__init__(fun)
        self.has_aux = has_aux

    def output_lists(self):
        return result_lists(self.fun, self.has_aux, lambda out: (out, None))  # (out, pullback)

    def __call__(self, *primals):
        if FlatView.applies(self.fun, primals):
            if self.has_aux:
                raise UnsupportedError("vjp(..., has_aux=True) of a gradient function called "
                                       "with pytree arguments is not supported",
                                       hint="return the auxiliary value from the inner "
                                            "function with grad(f, has_aux=True) instead")
            return FlatView(self.fun, primals).vjp()
        names, values, specs = self._specs(primals, {})
        key = _spec_key(specs)
        py_fun = self._python_function(specs)

        def build():
            from .build import build_vjp
            return build_vjp(py_fun, specs, has_aux=self.has_aux)
        generated, module = self._module_for(key, build)
        flat = _flat_values(specs, names, values)
        result = getattr(module, generated.entry)(*flat)
        layout = generated.layout
        n_out = 2 if self.has_aux else 1
        if not isinstance(result, tuple) or n_out + layout.get("residuals", 1) == 1:
            result = (result,)  # the output alone (a tuple output is not split up)
        out, residuals = result[:n_out], result[n_out:]
        params = layout["params"]
        by_name = dict(zip(params, flat))
        bwd_params = [by_name[p] for p in layout["bwd_params"]]
        pullback = _Pullback(generated, module, residuals, bwd_params, values,
                             layout["n_seeds"], layout["tuple_out"])
        outs = out[0] if layout["tuple_out"] and isinstance(out[0], tuple) else (out[0],)
        pullback.out_likes = list(outs)
        pullback.fun, pullback.has_aux = self.fun, self.has_aux  # (for jit(pullback))
        pullback.n_primals = len(primals)  # (the others are defaults: constants)
        one_tuple = getattr(self.fun, "one_tuple_output", None)
        if one_tuple is not None and not layout["tuple_out"] and one_tuple(specs):
            # grad(f, argnums=(0,)) returns a 1-tuple: so do its vjp and pullback's cotangent
            pullback.one_tuple = True
            out = ((out[0],),) + tuple(out[1:])
        if self.has_aux:
            return out[0], pullback, out[1]
        dicts = layout.get("dicts")
        if dicts is None:
            return out[0], pullback
        from codegen.dict_outputs import rebuild_dicts  # (gast: not at a warm start)
        return rebuild_dicts(out[0], dicts), pullback


def vjp(fun, *primals, has_aux=False, debug_nans=None):
    """``(output, pullback)``: pullback maps an output cotangent to input cotangents.
    debug_nans as for :func:`grad` (the pullback checks its statements too).

    >>> import numpy as np
    >>> out, pullback = vjp(lambda x: np.sin(x), np.array([0.0]))
    >>> pullback(np.array([2.0]))
    (array([2.]),)
    """
    builder = _VjpBuilder(fun, has_aux)
    builder.debug_nans = debug_nans
    return builder(*primals)


def source(fun, *example_args, **example_kwargs):
    """The generated source of a transformed function.

    With example arguments, generates it for their signature first.

    >>> import numpy as np
    >>> print(source(grad(lambda x: x * x), 1.0).splitlines()[-2].strip())
    x_bar = 2.0 * x
    """
    if example_args or example_kwargs:
        fun(*example_args, **example_kwargs)
    text = getattr(fun, "source", None)
    if text is None:
        raise TypeError(f"{fun!r} is not a function transformed by autodiff_ast")
    return text


__all__ = ["grad", "value_and_grad", "vjp", "source", "os"]
