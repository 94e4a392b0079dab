"""The Numba CUDA target: device functions plus a kernel with one thread per example.

:func:`kernel_module_source` writes the module: the device functions that
:mod:`autodiff_ast.device` lowered (each ``@cuda.jit(device=True, inline="always")``), then a
``@cuda.jit`` kernel in which thread ``i`` calls the entry device function on example ``i`` of
each mapped argument and writes its results into row ``i`` of each output (or, with
``reduce='sum'``, adds them into one shared output with ``cuda.atomic.add``).
:func:`load_kernel_module` imports it from a content-hashed file, :func:`launch` runs it and
:func:`compile_ptx` type-checks the kernel by compiling it to PTX, which needs the CUDA
compiler libraries of ``numba-cuda[cu13]`` but no GPU and no driver.

>>> spec = KernelSpec("f", ["x", "w"], [True, False], [None], [(2,)], "none")
>>> print(kernel_text(spec, ["float64"]))  # doctest: +NORMALIZE_WHITESPACE
@cuda.jit
def f_kernel(x, w, out_0, n_batch):
    \"\"\"Thread i computes example i: f(x[i], w).\"\"\"
    i = cuda.grid(1)
    if i < n_batch:
        r0 = f(x[i], w)
        out_0[i] = r0
"""

from __future__ import annotations

from dataclasses import dataclass

from .loader import load_source

__all__ = ["KernelSpec", "kernel_text", "kernel_module_source", "load_kernel_module",
           "launch", "compile_ptx", "numba_cuda_version"]


@dataclass
class KernelSpec:
    """What the kernel around an entry device function does."""

    entry: str  # the entry device function
    params: list  # argument names, in order
    mapped: list  # per argument: whether thread i reads example i of it (axis 0)
    out_shapes: list  # per result: None (a scalar the entry returns) or a per-example shape
    out_dtypes: list  # numba dtype names, one per array result (for reduce='sum' buffers)
    reduce: str = "none"  # 'none': one row per example; 'sum': atomically added together


def _fresh(base, taken):
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def kernel_text(spec, array_dtypes):
    """The ``@cuda.jit`` kernel function for `spec` (text)."""
    taken = set(spec.params) | {spec.entry}
    i = _fresh("i", taken)
    outs = [_fresh(f"out_{k}", taken) for k in range(len(spec.out_shapes))]
    n = _fresh("n_batch", taken)
    kernel = _fresh(f"{spec.entry}_kernel", taken)
    args = [f"{p}[{i}]" if m else p for p, m in zip(spec.params, spec.mapped)]
    scalar_names, lines, after = [], [], []
    array_args = []
    dtypes = iter(array_dtypes)
    for k, (out, shape) in enumerate(zip(outs, spec.out_shapes)):
        if shape is None:
            r = _fresh(f"r{k}", taken)
            scalar_names.append(r)
            if spec.reduce == "sum":
                after.append(f"cuda.atomic.add({out}, 0, {r})")
            else:
                after.append(f"{out}[{i}] = {r}")
            continue
        dtype = next(dtypes, "float64")
        if spec.reduce == "sum":
            buf = _fresh(f"part_{k}", taken)
            lines.append(f"{buf} = cuda.local.array({tuple(shape)!r}, {dtype})")
            array_args.append(buf)
            idx = [f"e{a}" for a in range(len(shape))]
            pad = ""
            for a, size in enumerate(shape):
                after.append(f"{pad}for e{a} in range({size}):")
                pad += "    "
            index = idx[0] if len(idx) == 1 else "(" + ", ".join(idx) + ")"
            after.append(f"{pad}cuda.atomic.add({out}, {index}, {buf}[{', '.join(idx)}])")
        else:
            array_args.append(f"{out}[{i}]")
    call = f"{spec.entry}({', '.join(args + array_args)})"
    if scalar_names:
        call = f"{', '.join(scalar_names)} = {call}"
    plain = ", ".join(args)
    doc = (f'    """Thread {i} computes example {i}: {spec.entry}({plain})'
           + (", summed into the outputs with atomic adds" if spec.reduce == "sum" else "")
           + '."""')
    body = [f"{i} = cuda.grid(1)", f"if {i} < {n}:"] + \
        ["    " + ln for ln in lines + [call] + after]
    head = ["@cuda.jit", f"def {kernel}({', '.join(list(spec.params) + outs + [n])}):", doc]
    return "\n".join(head + ["    " + ln for ln in body])


def kernel_module_source(doc, device_texts, spec, array_dtypes):
    """The whole kernel module: docstring, imports, device functions, kernel."""
    imports = ["import math", "", "from numba import boolean, cuda, float32, float64, int32, "
               "int64  # noqa: F401"]
    parts = ['"""' + doc.rstrip("\n").replace('"""', "'''") + '\n"""', "\n".join(imports)]
    parts += list(device_texts)
    parts.append(kernel_text(spec, array_dtypes))
    return "\n\n\n".join(parts) + "\n"


def load_kernel_module(source, name):
    """Import the kernel module (content-hashed file, so tracebacks show its lines)."""
    return load_source(source, name)


def is_device_array(value):
    """Whether `value` already lives on the device (a Numba device array, or anything with
    ``__cuda_array_interface__``)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    from numba import cuda
    check = getattr(cuda, "is_cuda_array", None)
    if check is not None:
        return bool(check(value))
    # the simulator: its device arrays are FakeCUDAArray objects
    return type(value).__name__ == "FakeCUDAArray"


def launch(kernel, n_batch, args, threads_per_block=128):
    """Run `kernel` with one thread per example (at least one block)."""
    threads = max(1, min(int(threads_per_block), max(int(n_batch), 1)))
    blocks = max(1, (int(n_batch) + threads - 1) // threads)
    kernel[blocks, threads](*args, n_batch)


def compile_ptx(kernel, argtypes, cc=(8, 0)):
    """PTX text for `kernel` (a ``@cuda.jit`` dispatcher or its Python function) with Numba
    argument types `argtypes`; works without a GPU or driver (not under the simulator)."""
    from numba import cuda
    from numba.cuda import config
    if getattr(config, "ENABLE_CUDASIM", False):
        raise RuntimeError("PTX cannot be compiled under the CUDA simulator "
                           "(NUMBA_ENABLE_CUDASIM=1): run in a process without it")
    fn = getattr(kernel, "py_func", kernel)
    ptx, _ = cuda.compile_ptx(fn, tuple(argtypes), cc=cc)
    return ptx


def numba_cuda_version():
    """The installed numba-cuda version (None when only the simulator is available)."""
    try:
        from importlib.metadata import version
        return version("numba-cuda")
    except Exception:  # noqa: BLE001 (not installed)
        return None
