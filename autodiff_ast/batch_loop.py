"""``jit(vmap(f))`` as a parallel loop over examples: the per-example strategy of batching.

``vmap(f)`` writes a *vectorized* function (every line runs on the whole batch). Compiled, that
is not always the fastest form: a per-example function compiled by Numba keeps its arrays small
and in cache, its loops stay scalar loops, and examples can run on several cores. So
``jit(vmap(f))`` can instead write a module holding the per-example function (the user's
function, or the module grad/jvp/... generated for one example, rewritten by
:func:`autodiff_ast.primal.build_primal`) and a driver that calls it once per example in a
``numba.prange`` loop::

    @numba.njit(cache=True, parallel=True, error_model='numpy')
    def vmap_grad_f(w, x):
        n_batch = x.shape[0]
        w_bar_first = grad_f(w, x[0])
        w_bar = np.empty((n_batch,) + w_bar_first.shape, dtype=np.float64)
        w_bar[0] = w_bar_first
        for b in prange(1, n_batch):
            w_bar[b] = grad_f(w, x[b])
        return w_bar

Only the driver is compiled with ``parallel=True``; the per-example functions are plain
``njit`` functions (no nested parallelism, no numba#3729). The first example runs before the
loop: its results give the output shapes.

``jit(..., batching=...)`` chooses: ``'vectorized'`` (the vmap module), ``'loop'`` (this
module) or ``'auto'`` (the default), which takes the loop when

1. vmap could not vectorize the function (its module is already a loop over examples), or
2. the per-example code has a ``for``/``while`` loop (a loop kernel vectorizes poorly: its
   batched form runs every iteration's statement on batch-sized temporaries), or
3. the per-example code has no matrix product (``np.dot``, ``@``, ``np.matmul``,
   ``np.tensordot``, ``np.einsum``, ``np.inner``, ``np.outer``): elementwise work and reductions
   run faster per example, in cache, on every core;

and the vectorized module otherwise, where a product of a shared matrix with every example
becomes one large BLAS call. ``.source`` says which was chosen and why.

Threads (see docs/numba.md): as a module with a prange loop loads (codegen/numba_cpu.py),
unless the user chose a Numba threading layer (``NUMBA_THREADING_LAYER``),
:func:`configure_threading` selects ``'workqueue'``: on a small machine OpenMP's spinning
threads stall beside BLAS's (a prange call after a NumPy matrix product took 80-98 ms with
OpenMP, 4-13 ms with workqueue, on 2 busy cores). While a driver whose per-example code calls
BLAS runs, BLAS libraries are limited to one thread (with threadpoolctl, when installed), so
the examples' threads do not each start BLAS threads.

>>> import numpy as np
>>> from autodiff_ast import grad, jit, vmap
>>> def f(w, x):
...     return np.sum((x * w[0] + w[1]) ** 2)
>>> per_example = jit(vmap(grad(f), in_axes=(None, 0)), batching="loop")
>>> w, xs = np.array([0.5, -1.0]), np.arange(6.0).reshape(3, 2)
>>> bool(np.allclose(per_example(w, xs), vmap(grad(f), in_axes=(None, 0))(w, xs)))
True
>>> "for b in prange(1, n_batch):" in per_example.source
True
"""

from __future__ import annotations

import os

import gast

from codegen.threading_layer import configure_threading

from . import pytrees
from . import types as T
from .batch_core import _DTYPES, wrap
from .batching import (
    _axes_leaves,
    _leaf_types,
    _normalized_axis,
    _options_text,
    _per_example_spec,
    _spec_key,
    _target_for,
    build_vmap,
)
from .build import Generated, prepare
from .naming import Namer
from .normalize import atom_type
from .primal import build_primal

__all__ = ["STRATEGIES", "build_batch_loop", "choose_strategy", "configure_threading",
           "JittedBatching"]

#: The values of ``jit(..., batching=...)``.
STRATEGIES = ("auto", "vectorized", "loop")

_PRODUCTS = {"dot", "matmul", "tensordot", "einsum", "inner", "outer", "vdot", "kron"}


# ---------------------------------------------------------------- choosing
def choose_strategy(strategy, vectorized, per_example_source):
    """('vectorized' | 'loop', why) for ``jit(vmap(f), batching=strategy)``.

    `vectorized` is the vmap module (its layout says whether it vectorized), the per-example
    module's source says what each example runs.

    >>> gen = Generated("", "f", layout={"variant": "vectorized"})
    >>> choose_strategy("auto", gen, "def f(x):\\n    return x * 2.0\\n")
    ('loop', 'the per-example code has no matrix product')
    >>> choose_strategy("auto", gen, "def f(W, x):\\n    return W @ x\\n")[0]
    'vectorized'
    """
    collective = "collectives." in per_example_source  # psum(x, 'i') needs every example
    if strategy == "vectorized":
        return "vectorized", "batching='vectorized' was asked for"
    if strategy == "loop":
        if collective:
            from .batching import BatchingError
            raise BatchingError(
                "jit(vmap(f), batching='loop') cannot run f's collective (psum, pmean...): "
                "it reduces over every example, and the loop runs one example at a time",
                hint="use batching='auto' or 'vectorized'")
        return "loop", "batching='loop' was asked for"
    if strategy != "auto":
        raise ValueError(f"unknown batching strategy {strategy!r}; choose one of {STRATEGIES}")
    if collective:
        return "vectorized", "the function calls a collective (psum, pmean...) over the batch"
    if vectorized.layout.get("variant") != "vectorized":
        return "loop", "vmap could not vectorize the function"
    loops, products = _code_kinds(per_example_source)
    if loops:
        return "loop", "the per-example code has a loop"
    if products:
        return "vectorized", f"the per-example code multiplies matrices " \
                             f"({', '.join(sorted(set(products)))})"
    return "loop", "the per-example code has no matrix product"


def _code_kinds(source):
    """(has a for/while loop, names of the matrix products it calls) in module `source`."""
    loops, products = False, []
    for node in gast.walk(gast.parse(source)):
        if isinstance(node, (gast.For, gast.While)):
            loops = True
        elif isinstance(node, gast.BinOp) and isinstance(node.op, gast.MatMult):
            products.append("@")
        elif isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
                node.func.attr in _PRODUCTS:
            products.append(f"np.{node.func.attr}")
    return loops, products


# ---------------------------------------------------------------- the module
def build_batch_loop(target, leaf_axes, out_axes, vectorized, options="", reason="",
                     per=None, strategy="loop"):
    """The per-example module with a prange driver, for one per-example signature.

    `target` is what vmap batches (:class:`autodiff_ast.batching._Target`), `leaf_axes` the
    mapped axis of each flat leaf (or None), `vectorized` the vmap module for the same
    signature (its layout gives the output structure; building it also checked out_axes).
    Returns a :class:`Generated` whose layout is the vmap module's, plus ``prange`` (the
    driver's name) and ``blas`` (whether examples call BLAS). `per` is the per-example
    module when already built (:func:`autodiff_ast.primal.build_primal` of ``target.fn``).
    """
    per = per or build_primal(target.fn, target.specs, flat_dicts=True)
    info, _, core = prepare(target.fn, target.specs, flat_dicts=True)
    params = list(core.params)
    if len(params) != len(leaf_axes):
        raise ValueError(f"batch loop: {len(leaf_axes)} mapped values for {len(params)} "
                         f"parameters of {info.name}")
    functions = [n.name for n in gast.parse(per.source).body if isinstance(n, gast.FunctionDef)]
    namer = Namer(set(params) | set(functions) | {"np", "math", "numba", "prange"})
    entry = namer.fresh(f"vmap_{per.entry}")
    layout = dict(vectorized.layout)
    structure = layout["structure"]
    axes_out = dict(zip(pytrees.tree_leaves(structure),
                        _axes_leaves(out_axes, structure, "out_axes")))
    outputs = _outputs(core)
    if len(outputs) != layout["n_out"]:
        raise ValueError(f"batch loop: {len(outputs)} outputs of {info.name}, the vmap module "
                         f"has {layout['n_out']}")

    # Numba drops an exception raised inside a prange loop (the example's result is left
    # unwritten), so per-example code that may raise runs in a plain loop.
    raises = any(isinstance(n, gast.Raise) for n in gast.walk(gast.parse(per.source)))
    loop_kind = "range" if raises else "prange"
    lines = [f"# {part}" for part in wrap(
        f"vmap: per-example loop, the examples split between threads by numba.prange; each "
        f"runs {per.entry} on its own ({reason})." if not raises else
        f"vmap: per-example loop, one example after another: {per.entry} may raise, and "
        f"Numba does not pass on an exception raised in a prange loop ({reason}).")]
    n_batch = namer.fresh("n_batch")
    b = namer.fresh("b")
    mapped = [(p, axis) for p, axis in zip(params, leaf_axes) if axis is not None]
    lines.append(f"{n_batch} = {mapped[0][0]}.shape[{mapped[0][1]}]")
    args_at = {}
    for p, axis in mapped:
        args_at[p] = p
        if axis:  # examples along axis 0, each one contiguous
            args_at[p] = namer.fresh(f"{p}_moved")
            lines.append(f"{args_at[p]} = np.ascontiguousarray(np.moveaxis({p}, {axis}, 0))")

    def call(at):
        args = [f"{args_at[p]}[{at}]" if p in args_at else p for p in params]
        return f"{per.entry}({', '.join(args)})"
    # An array output whose shape differs from the first example's (``x[x > 0]``) is not
    # written into the batch (a prange loop cannot raise): flagged, then refused after it.
    shaped = [k for k, (_, _, typ) in enumerate(outputs)
              if typ.ndim and axes_out.get(k, 0) is not None]
    whole = len(outputs) == 1 and not outputs[0][0] and not shaped
    first = namer.fresh(f"{outputs[0][1].rstrip('_')}_first" if whole else "first")
    one = namer.fresh("one")
    differs = namer.fresh("shape_differs")
    lines.append(f"{first} = {call(0)}")
    loop, returns = ([] if whole else [f"{one} = {call(b)}"]), []
    if shaped:
        lines.append(f"{differs} = np.zeros({n_batch}, dtype=np.bool_)")
    for k, (path, base, typ) in enumerate(outputs):
        index = "".join(f"[{i}]" for i in path)
        axis = axes_out.get(k, 0)
        if axis is None:
            returns.append(f"{first}{index}")
            continue
        axis = _normalized_axis(axis, (typ.ndim or 0) + 1, f"output {k}")
        out = namer.fresh(base)
        lines.append(f"{out} = {_empty(first + index, typ, n_batch)}")
        lines.append(f"{out}[0] = {first}{index}")
        if k in shaped:
            # (compared with the batch array's own shape: Numba's parfor takes no tuple from
            # outside the loop, "scalar type Tuple(...) given for non scalar argument")
            part = namer.fresh(f"{base}_part")  # (`whole` is False here: `one` is bound)
            loop += [f"{part} = {one}{index}",
                     f"if {part}.shape != {out}.shape[1:]:",
                     f"    {differs}[{b}] = True",
                     "else:",
                     f"    {out}[{b}] = {part}"]
        else:
            loop.append(f"{out}[{b}] = {call(b) if whole else one + index}")
        returns.append(f"np.moveaxis({out}, 0, {axis})" if axis else out)
    if any(axes_out.get(k, 0) is not None for k in range(len(outputs))):
        lines.append(f"for {b} in {loop_kind}(1, {n_batch}):")
        lines += [f"    {line}" for line in loop]
    if shaped:
        lines += [f"if np.any({differs}):",
                  f"    raise ValueError('vmap: an output of {info.name} has a different shape "
                  "for different examples; keep shapes independent of the mapped values (use "
                  "masks, np.where, or pad to a fixed size)')"]
    result = ", ".join(returns)
    tuple_out = layout["tuple_out"] or layout["n_out"] > 1
    lines.append(f"return ({result})" if tuple_out else f"return {result}")
    driver = f"def {entry}({', '.join(params)}):\n" + "".join(f"    {x}\n" for x in lines)

    doc = _docstring(info, target, params, leaf_axes, entry, per.entry, options, reason,
                     strategy, loop_kind)
    source = _with_driver(per.source, doc, driver)
    _, products = _code_kinds(per.source)
    layout.update(variant="loop", prange=() if raises else (entry,), blas=bool(products),
                  reason=reason)
    return Generated(source, entry, dict(per.injected), layout)


def _outputs(core):
    """(index path into the per-example result, name base, type) per flat output, in the
    order of the vmap module's outputs (tuple values opened at every depth, as vmap does:
    has_aux's ``(pred, acc)``, a returned dict's values)."""
    returns = core.returns
    tuple_return = isinstance(returns, gast.Tuple)
    elts = returns.elts if tuple_return else [returns]
    out = []

    def opened(path, base, typ):
        if typ.kind == "tuple" and typ.elts:
            for m, t in enumerate(typ.elts):
                opened(path + (m,), f"{base}_{m}", t)
        else:
            out.append((path, base, typ))
    for j, expr in enumerate(elts):
        base = expr.id if isinstance(expr, gast.Name) else "out"
        opened((j,) if tuple_return else (), base, atom_type(expr, core.types))
    return out


def _empty(first, typ, n_batch):
    dtype = _DTYPES.get(typ.dtype or "float64", "np.float64")
    if not typ.ndim:
        return f"np.empty({n_batch}, dtype={dtype})"
    return f"np.empty(({n_batch},) + {first}.shape, dtype={dtype})"


def _docstring(info, target, params, leaf_axes, entry, per_entry, options, reason, strategy,
               loop_kind="prange"):
    parts = []
    leaves = [t for pname, spec in target.specs.items() for t in _leaf_types(pname, spec)]
    for p, axis, typ in zip(params, leaf_axes, leaves):
        desc = T.describe(typ)
        parts.append(f"{p}: {desc}" + (f" (mapped along axis {axis})" if axis is not None
                                        else " (not mapped)"))
    what = target.label or info.name
    filename = target.filename or os.path.basename(info.filename)
    text = (f"Per example: {', '.join(parts)}. Strategy (jit batching='{strategy}'): "
            f"per-example loop, {entry} runs {per_entry} on each example in a "
            f"{'numba.prange' if loop_kind == 'prange' else 'plain (it may raise)'} loop, "
            f"because {reason}.")
    body = "\n".join(wrap(text, 96))
    return (f"jit(vmap({what}{options})), generated by autodiff-ast from {filename}.\n\n"
            f"{body}\nRegenerate instead of editing.\n")


def _with_driver(per_source, doc, driver):
    """The per-example module with our docstring, ``from numba import prange`` and the
    driver appended."""
    tree = gast.parse(per_source)
    first = tree.body[0] if tree.body else None
    rest = per_source
    if isinstance(first, gast.Expr) and isinstance(first.value, gast.Constant):
        end = per_source.index('"""', 3) + 3
        rest = per_source[end:].lstrip("\n")
    head, sep, functions = rest.partition("\n\n\n")
    functions = _drop_echoes(functions)
    imports = head.split("\n") + ["from numba import prange"]
    text = '"""' + doc.replace('"""', "'''") + '"""\n' + "\n".join(imports)
    return text + "\n\n\n" + (functions.rstrip("\n") + "\n\n\n" if sep else "") + driver


def _drop_echoes(text):
    """Without the ``# <line>`` comments that repeat the line below them (a per-example
    function written from generated code quotes each of its own lines).

    >>> _drop_echoes("    # y = x\\n    y = x\\n    # x += 1\\n    x = x + 1\\n")
    '    y = x\\n    # x += 1\\n    x = x + 1\\n'
    """
    lines = text.split("\n")
    kept = [line for line, below in zip(lines, lines[1:] + [""])
            if not (line.strip().startswith("# ") and line.strip()[2:] == below.strip())]
    return "\n".join(kept)


# ---------------------------------------------------------------- threads
class _BlasLimit:
    """Calls with every BLAS library (seen by threadpoolctl) limited to one thread."""

    controllers = None

    @classmethod
    def libraries(cls):
        if cls.controllers is None:
            try:
                from threadpoolctl import ThreadpoolController
                cls.controllers = ThreadpoolController().select(user_api="blas").lib_controllers
            except Exception:  # noqa: BLE001 (no threadpoolctl, or it cannot load: no limit)
                cls.controllers = []
        return cls.controllers

    @classmethod
    def call(cls, function, args):
        if os.environ.get("AUTODIFF_AST_BLAS_THREADS") == "keep":
            return function(*args)
        saved = []
        for lib in cls.libraries():
            n = lib.get_num_threads()
            if n and n > 1:
                lib.set_num_threads(1)
                saved.append((lib, n))
        try:
            return function(*args)
        finally:
            for lib, n in saved:
                lib.set_num_threads(n)


class _LimitedModule:
    """A compiled module whose `entry` runs with BLAS limited to one thread."""

    def __init__(self, module, entry):
        self._module = module
        self._entry = entry

    def __getattr__(self, name):
        function = getattr(self._module, name)
        if name != self._entry:
            return function
        return lambda *args: _BlasLimit.call(function, args)


# ---------------------------------------------------------------- the jitted vmap
class JittedBatching:
    """Mixed into ``jit(vmap(...))``: builds the module the ``batching`` option chooses."""

    def _batch_size(self, leaf_axes, labels, leaves):
        size = super()._batch_size(leaf_axes, labels, leaves)
        self._batch_now = size
        return size

    def _another_variant(self):
        """Under batching='auto', a vectorized module Numba refused (a NumPy call it compiles
        for matrices only, say): the loop over examples is tried instead, once."""
        last = self._last[0] if self._last else None
        if self.jit_options.batching != "auto" or last is None or \
                last.layout.get("batching") != "vectorized":
            return False
        self._vectorized_refused = True
        return True

    def _generate(self, names, likes, specs, leaf_axes, axis_size_param):
        strategy = self.jit_options.batching
        refused = strategy == "auto" and getattr(self, "_vectorized_refused", False)
        if strategy == "vectorized" or axis_size_param or \
                self.jit_options.target not in ("cpu", "python") or \
                getattr(self, "_batch_now", 1) == 0:
            return super()._generate(names, likes, specs, leaf_axes, axis_size_param)
        per_example, k = {}, 0
        for pname in names:
            count = len(_leaf_types(pname, specs[pname]))
            per_example[pname] = _per_example_spec(specs[pname], leaf_axes[k:k + count])
            k += count
        key = ("batching", "loop" if refused else strategy, _spec_key(per_example),
               tuple(leaf_axes), repr(self.out_axes))

        def build():
            target = _target_for(self.fun, self.py_fun, names, likes, per_example)
            options = _options_text(self.in_axes, self.out_axes)
            vectorized = build_vmap(target, leaf_axes, self.out_axes, False, options)
            per = build_primal(target.fn, target.specs, flat_dicts=True)
            choice, reason = ("loop", "Numba could not compile the vectorized module") \
                if refused else choose_strategy(strategy, vectorized, per.source)
            if choice == "vectorized":
                note = f"jit batching='{strategy}' chose this variant: {reason}.\n"
                source = vectorized.source.replace("Regenerate instead of editing.",
                                                   note + "Regenerate instead of editing.", 1)
                return Generated(source, vectorized.entry, vectorized.injected,
                                 dict(vectorized.layout, batching="vectorized"),
                                 vectorized.extra)
            return build_batch_loop(target, leaf_axes, self.out_axes, vectorized, options,
                                    reason, per, strategy)
        generated, module = self._module_for(key, build)
        if generated.layout.get("blas"):
            module = _LimitedModule(module, generated.entry)
        return generated, module
