"""``jit(..., target='cuda')``: a function, or a batched/differentiated one, as a CUDA kernel.

``jit(vmap(f), target='cuda')``, ``jit(vmap(grad(f)), target='cuda')`` and
``jit(vmap(lambda x, t: jvp(f, (x,), (t,))), target='cuda')`` become one kernel with one thread
per example: the per-example function (the user's, or the module grad/jvp generated for one
example) is lowered into device functions by :mod:`autodiff_ast.device`, and the kernel
(:mod:`codegen.numba_cuda`) calls it on example ``i`` in thread ``i``. ``jit(f, target='cuda')``
without vmap runs `f` in a single thread. The kernel is specialised on the per-example shapes
(device code needs constant sizes for its local arrays), so a new shape writes a new kernel.

Inputs may be NumPy arrays (copied to the device, results copied back) or device arrays
(``numba.cuda.to_device``; results stay on the device). ``reduce='sum'`` adds the results of
all examples together with ``cuda.atomic.add`` (a data-parallel gradient, say).

Without a GPU, set ``NUMBA_ENABLE_CUDASIM=1`` before Numba is imported: the same kernel runs in
Numba's simulator. :meth:`CudaJitted.ptx` compiles it to PTX (no GPU needed) to type-check it.

>>> import numpy as np
>>> from autodiff_ast import grad, vmap
>>> def f(w, x):
...     h = 0.0
...     for t in range(3):
...         h = np.tanh(w * h + x[t])
...     return h
>>> k = CudaJitted(vmap(grad(f)), CudaOptions())
>>> print(k.kernel_source(np.ones(4), np.ones((4, 3))).split("@cuda.jit\\n")[-1].split(
...     chr(10))[0])
def grad_f_kernel(w, x, out_0, n_batch):
"""

from __future__ import annotations

import inspect
import linecache
import os
from dataclasses import dataclass

import numpy as np

from . import pytrees
from .api import _as_python_function, _bind, _Transformed
from .batching import BatchingError, _per_example_spec, _placeholder, _target_for, _Vmapped
from .device import NUMBA_DTYPES, DeviceCodeError, lower_for_device
from .jit import _float_dtypes, _grads_like
from .naming import sanitize
from .normalize import Static, TreeSpec, spec_of

__all__ = ["CudaOptions", "CudaJitted", "cuda_jit", "kernel_source"]


@dataclass(frozen=True)
class CudaOptions:
    """Options of the CUDA target (part of each kernel's identity)."""

    tape_size: int | None = None  # tape length when a loop's trip count is unknown
    threads_per_block: int = 128
    reduce: str | None = None  # None: one result per example; 'sum': results added up


class CudaJitted:
    """A function compiled as a CUDA kernel; call it like the function it wraps."""

    kind = "jit"

    def __init__(self, fun, options):
        if options.reduce not in (None, "sum"):
            raise ValueError(f"reduce must be None or 'sum', got {options.reduce!r}")
        self.fun = fun
        self.options = options
        self.vmapped = fun if isinstance(fun, _Vmapped) else None
        self.inner = fun.fun if self.vmapped is not None else fun
        self._kernels = {}
        self._last = None

    # -- what runs per example
    def _signature_function(self):
        if isinstance(self.inner, _Transformed):
            return self.inner._signature_function()
        return _as_python_function(self.inner)

    def _plan(self, args):
        names, values = _bind(self._signature_function(), args, {})
        if self.vmapped is not None:
            per_arg = self.vmapped._per_arg_axes(names, len(args), set())
        else:
            per_arg = [None] * len(names)
        axes, shapes, per_specs, likes = [], {}, {}, []
        batch = None
        for pname, value, axis in zip(names, values, per_arg):
            spec = _spec(value)
            if isinstance(spec, (TreeSpec, Static)):
                raise BatchingError(f"jit(target='cuda'): argument {pname!r} is a pytree or a "
                                    "static value; pass arrays and scalars",
                                    hint="flatten the argument into separate arrays")
            shape = tuple(np.shape(value))
            if axis is not None:
                if not shape:
                    raise BatchingError(f"vmap was asked to map argument {pname} along axis "
                                        f"{axis}, but it is a scalar")
                axis = axis % len(shape)
                size = shape[axis]
                if batch is not None and size != batch:
                    raise BatchingError(f"vmap got inconsistent sizes for the mapped axes: "
                                        f"{batch} and {size} (argument {pname})")
                batch = size
                shape = shape[:axis] + shape[axis + 1:]
                spec = _per_example_spec(spec, [axis])
            axes.append(axis)
            per_specs[pname] = spec
            shapes[pname] = shape
            likes.append(_placeholder(spec))
        if batch is None:
            batch = self.vmapped.axis_size if self.vmapped is not None and \
                self.vmapped.axis_size is not None else 1
        return names, values, axes, shapes, per_specs, likes, batch

    def _build(self, names, axes, shapes, per_specs, likes, floats):
        """The kernel for these per-example arguments; `floats` says which float dtypes the
        call mixes, and so those of its float results (:func:`_call_floats`)."""
        key = (tuple((n, per_specs[n], shapes[n]) for n in names), tuple(axes), self.options,
               floats)
        if key in self._kernels:
            self._last = self._kernels[key]
            return self._last
        inner = self.inner
        if isinstance(inner, _Transformed):
            if isinstance(inner, _Vmapped):
                raise BatchingError("jit(target='cuda') of a nested vmap is not supported",
                                    hint="map one axis per kernel")
            target = _target_for(inner, None, names, likes, per_specs)
        else:
            target = _target_for(inner, _as_python_function(inner), names, likes, per_specs)
        fn = target.fn
        params = list(inspect.signature(fn).parameters)
        flat_shapes = dict(zip(params, [shapes[n] for n in names]))
        try:
            device = lower_for_device(fn, target.specs, flat_shapes, self.options.tape_size)
        except DeviceCodeError as exc:
            raise _on_user_line(exc, self.fun) from None
        entry = device.entry
        out_dtypes = [_result_dtype(d, floats) for d in entry.out_dtypes]
        mapped = [a is not None for a in axes]
        from codegen.numba_cuda import KernelSpec, kernel_module_source, load_kernel_module
        spec = KernelSpec(entry.name, params, mapped, entry.out_shapes,
                          [NUMBA_DTYPES.get(d, "float64") for d, s in
                           zip(out_dtypes, entry.out_shapes) if s is not None],
                          self.options.reduce or "none")
        dtypes = spec.out_dtypes
        doc = _docstring(self, fn, params, mapped, shapes, names, entry, per_specs)
        source = kernel_module_source(doc, [f.text for f in device.functions], spec, dtypes)
        module = load_kernel_module(source, sanitize(f"cuda_{entry.name}"))
        kernel_name = source.split("@cuda.jit\ndef ")[-1].split("(")[0]
        built = _Kernel(source, getattr(module, kernel_name), entry, spec, target.structure,
                        device.tuple_out, out_dtypes)
        self._kernels[key] = built
        self._last = built
        return built

    # -- calling
    def __call__(self, *args):
        from numba import cuda

        from codegen.numba_cuda import is_device_array, launch
        names, values, axes, shapes, per_specs, likes, batch = self._plan(args)
        floats = _call_floats(values)
        built = self._build(names, axes, shapes, per_specs, likes, floats)
        on_device = any(is_device_array(v) for v in values)
        kernel_args = []
        for value, axis in zip(values, axes):
            if is_device_array(value):
                if axis not in (None, 0):
                    raise BatchingError("device arrays can be mapped along axis 0 only",
                                        hint="move the axis on the host first")
                kernel_args.append(value)
            elif np.ndim(value) == 0:
                kernel_args.append(value)
            else:
                array = np.asarray(value)
                if axis:
                    array = np.moveaxis(array, axis, 0)
                kernel_args.append(cuda.to_device(np.ascontiguousarray(array)))
        outs = []
        for shape, dtype in zip(built.entry.out_shapes, built.out_dtypes):
            if self.options.reduce == "sum":
                host = np.zeros(shape if shape is not None else (1,), dtype=dtype)
                outs.append(cuda.to_device(host))
            else:
                full = (batch,) + (tuple(shape) if shape is not None else ())
                outs.append(cuda.device_array(full, dtype=dtype))
        launch(built.kernel, batch, kernel_args + outs, self.options.threads_per_block)
        results = [o if on_device else o.copy_to_host() for o in outs]
        if self.options.reduce == "sum":
            results = [r if s is not None else r[0]
                       for r, s in zip(results, built.entry.out_shapes)]
        elif self.vmapped is None:
            results = [r[0] for r in results]
        elif self.vmapped.out_axes not in (0, None) and not on_device:
            axis = self.vmapped.out_axes
            results = [np.moveaxis(r, 0, axis) if isinstance(axis, int) else r
                       for r in results]
        if floats == "mixed":  # (as the CPU target: gradients in their arguments' dtypes)
            return _grads_like(self.fun, args, _assemble(built, results))
        return _assemble(built, results)

    # -- inspection
    @property
    def source(self):
        """The kernel module of the most recent call (device functions and kernel)."""
        if self._last is None:
            raise AttributeError("the CUDA kernel is written on the first call, for the shapes "
                                 "of that call: call it once, or use kernel_source(*args)")
        return self._last.source

    def kernel_source(self, *args):
        """The kernel module for these example arguments (nothing runs)."""
        return self._build_for(args).source

    def _build_for(self, args):
        names, values, axes, shapes, per_specs, likes, batch = self._plan(args)
        return self._build(names, axes, shapes, per_specs, likes, _call_floats(values))

    def ptx(self, *args, cc=(8, 0)):
        """PTX for the kernel at these example arguments: type-checks the device code with
        Numba's CUDA compiler (needs numba-cuda[cu13], no GPU; not under the simulator)."""
        import numba

        from codegen.numba_cuda import compile_ptx
        names, values, axes, shapes, per_specs, likes, batch = self._plan(args)
        built = self._build(names, axes, shapes, per_specs, likes, _call_floats(values))
        argtypes = []
        for value, axis in zip(values, axes):
            if np.ndim(value) == 0:
                argtypes.append(numba.typeof(value))
            else:
                array = np.asarray(value)
                if axis:
                    array = np.moveaxis(array, axis, 0)
                argtypes.append(numba.typeof(np.ascontiguousarray(array)))
        for shape, dtype in zip(built.entry.out_shapes, built.out_dtypes):
            rank = (len(shape) if shape is not None else 0) + (
                0 if self.options.reduce == "sum" and shape is not None else 1)
            argtypes.append(numba.types.Array(numba.from_dtype(np.dtype(dtype)), rank, "C"))
        argtypes.append(numba.types.int64)
        return compile_ptx(built.kernel, argtypes, cc=cc)


@dataclass
class _Kernel:
    source: str
    kernel: object
    entry: object
    spec: object
    structure: object
    tuple_out: bool
    out_dtypes: list  # of the results (the entry's, float32 for a float32 call)


def _spec(value):
    from codegen.numba_cuda import is_device_array
    if not isinstance(value, np.ndarray) and is_device_array(value):
        return spec_of(np.empty(value.shape, dtype=value.dtype))
    return spec_of(value)


def _call_floats(values):
    """Which float dtypes a call's arguments hold, for the dtypes of its results as the CPU
    jit gives them (autodiff_ast.jit: JAX's rule): 'float32' when its floats are all
    float32 (float32 in, float32 out), 'mixed' when it mixes float32 and float64 (the CPU
    target runs it in float64), None otherwise. Its float arrays (host or device) and NumPy
    float numbers count; Python floats do not."""
    from codegen.numba_cuda import is_device_array
    hosts = [np.empty(0, v.dtype) if is_device_array(v) and not isinstance(v, np.ndarray)
             else v for v in values]
    dtypes = set(_float_dtypes(hosts))
    if np.dtype(np.float32) not in dtypes:
        return None
    return "float32" if len(dtypes) == 1 else "mixed"


def _result_dtype(dtype, floats):
    """A float result's dtype in a call whose arguments' floats are `floats`: float32 in a
    float32 call, float64 in a mixed one; any other dtype as it is."""
    if floats == "float32" and dtype == "float64":
        return "float32"
    if floats == "mixed" and dtype == "float32":
        return "float64"
    return dtype


def _assemble(built, results):
    if built.structure is not None:
        if isinstance(built.structure, int):
            return results[built.structure]
        return pytrees.tree_map(lambda k: results[k], built.structure)
    if built.tuple_out:
        return tuple(results)
    return results[0]


def _docstring(jitted, fn, params, mapped, shapes, names, entry, per_specs):
    what = _label(jitted.fun)
    parts = []
    for p, m, n in zip(params, mapped, names):
        shape = shapes[n]
        desc = f"{per_specs[n].dtype or 'float64'}{list(shape)}" if shape else "scalar"
        parts.append(f"{p}: {desc}" + (" (one per thread)" if m else " (shared)"))
    code = getattr(fn, "__code__", None)
    where = os.path.basename(code.co_filename) if code is not None else "?"
    reduce = jitted.options.reduce
    return (f"jit({what}, target='cuda'), generated by autodiff-ast.\n\n"
            f"Per example: {', '.join(parts)}.\n"
            f"Kernel: one thread per example calling {entry.name} (from {where})"
            + (", results summed with cuda.atomic.add" if reduce == "sum" else "") + ".\n"
            "Device code: local arrays have the per-example shapes above; another shape "
            "writes another kernel.\nRegenerate instead of editing.\n")


def _on_user_line(exc, fun):
    """A DeviceCodeError located in a generated module, moved to the user's line (through the
    ``# <user line>`` comment above the generated line)."""
    from codegen.numba_cpu import comment_above
    user = fun
    while isinstance(user, _Transformed):
        user = user.py_fun if user.py_fun is not None else user.fun
    try:
        lines, first = inspect.getsourcelines(user)
        filename = inspect.getsourcefile(user)
    except (OSError, TypeError):
        return exc
    if not exc.filename or not exc.lineno or exc.filename == filename:
        return exc
    text = "".join(linecache.getlines(exc.filename))
    candidates = [c for c in (comment_above(text, exc.lineno), exc.code) if c]
    lineno, code = first, lines[0].strip()
    for wanted in candidates:
        wanted = " ".join(wanted.split())
        found = [k for k, line in enumerate(lines) if " ".join(line.split()) == wanted]
        if found:
            lineno, code = first + found[0], lines[found[0]].strip()
            break
    else:
        # the line map's other clues (an assert's check maps to the assert line)
        from .linemap import line_map
        origin = line_map(text, filename, (first, first + len(lines) - 1)).get(exc.lineno)
        if origin is not None and origin.filename == filename:
            lineno, code = origin.lineno, origin.code
    message = f"{exc.message} (generated line {exc.lineno} of {os.path.basename(exc.filename)})"
    return type(exc)(message, filename=filename, lineno=lineno, code=code, hint=exc.hint)


def _label(fun):
    if isinstance(fun, _Transformed):
        inner = fun.fun
        return f"{fun.kind}({_label(inner)})"
    name = getattr(fun, "__name__", "f")
    return "lambda" if name == "<lambda>" else name


def cuda_jit(fun, tape_size=None, threads_per_block=128, reduce=None):
    """`fun` compiled as a CUDA kernel (what ``jit(fun, target='cuda', ...)`` returns).

    >>> import numpy as np
    >>> from autodiff_ast import vmap
    >>> square = cuda_jit(vmap(lambda x: x * x))
    >>> square(np.arange(3.0))  # doctest: +SKIP
    array([0., 1., 4.])
    """
    return CudaJitted(fun, CudaOptions(tape_size, int(threads_per_block), reduce))


def kernel_source(fun, *example_args, tape_size=None, reduce=None):
    """The CUDA kernel module for `fun` at the example arguments' shapes (for the CLI's
    ``--jit cuda``): device functions and the kernel, as text. Nothing is compiled or run.

    >>> import numpy as np
    >>> from autodiff_ast import vmap
    >>> text = kernel_source(vmap(lambda x: np.sin(x) * 2.0), np.zeros(4))
    >>> "math.sin(x)" in text and "@cuda.jit" in text
    True
    """
    return CudaJitted(fun, CudaOptions(tape_size, 128, reduce))._build_for(example_args).source
