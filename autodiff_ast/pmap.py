"""pmap: a function mapped over an axis whose examples (shards) run in parallel (JAX's pmap).

Each shard runs the per-shard function: the user's, or the module a transformation generated
for one shard (``pmap(grad(f))``). Collectives (:mod:`autodiff_ast.collectives`) need every
shard's value, so the per-shard function is *cut* at each collective written at its top level:

    def normalize(x):                   def normalize_part_0(x):
        return x / psum(x, 'i')   ->        return (x,)
                                        # psum = collectives.psum(x, 'i'), between the parts
                                        def normalize_part_1(x, psum):
                                            return (x / psum,)

The parts are written as one module (``.source``), compiled with ``numba.njit(nogil=True)``
and run on every shard; a collective runs between two parts, on the values every shard
returned. Two backends run the shards:

- ``'threads'`` (default): the shards are split over CPU worker threads; compiled code runs
  without the GIL, so the threads compute at the same time. Collectives are NumPy reductions
  over the shards' values.
- ``'mpi'`` (with ``mpi4py``, launched by ``mpiexec -n P``; chosen by default when the process
  was started by mpiexec with more than one rank): every rank is given the whole input, runs
  its own block of shards (one shard per rank when the axis has P examples), collectives
  become MPI reductions (``Allreduce``/``allgather``) and every rank gets the whole output.

A collective inside a loop, a branch or a helper function cannot be cut there: pmap raises an
:class:`AutodiffError` naming the line. (``vmap(f, axis_name=...)`` has no such limit: there
the collectives become NumPy reductions over the batch axis.)

>>> import numpy as np
>>> from autodiff_ast import psum
>>> def normalize(x):
...     return x / psum(x, 'i')
>>> pmap(normalize, axis_name='i', jit=False)(np.arange(4.0))
array([0.        , 0.16666667, 0.33333333, 0.5       ])
"""

from __future__ import annotations

import ast
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import gast
import numpy as np

from codegen.emit import comment, function, render_module
from codegen.helpers import helper_source

from . import pytrees
from .api import _as_python_function, _bind, _Transformed
from .batch_core import loads
from .batching import BatchingError, _per_example_spec, _placeholder, _target_for
from .build import ModuleBuilder, _with_comments
from .collectives import COLLECTIVES, reduce_shards
from .errors import AutodiffError
from .frontend import parse_function
from .naming import sanitize
from .normalize import Program, Static, TreeSpec, normalize_into, spec_of
from .output_lists import lists_of
from .templates import name, unparse
from .tidy import tidy_block

__all__ = ["pmap", "PmapError"]


class PmapError(AutodiffError, ValueError):
    """pmap cannot map this function or these arguments."""


# ---------------------------------------------------------------- cutting at collectives
@dataclass
class _Cut:
    kind: str  # psum, pmean, ..., axis_index
    target: str  # the name the collective's result is bound to
    operand: object  # gast atom (None for axis_index)
    axis_name: object
    line: str  # the user's line, for comments


@dataclass
class _Plan:
    """A per-shard function cut into parts, as one generated module."""

    source: str
    parts: list  # part function names, in order
    ins: list  # per part: the names it takes
    outs: list  # per part: the names it returns (the last part: the results)
    cuts: list  # collectives between consecutive parts
    params: list  # the per-shard function's parameters
    injected: dict
    structure: object
    tuple_out: bool


def _collective_kind(stmt):
    prim = getattr(stmt, "prim", None)
    rule = getattr(prim, "rule", None)
    kind = getattr(rule, "name", None)
    return kind if kind in COLLECTIVES else None


def _stores(stmt):
    return {n.id for n in gast.walk(stmt) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Store)}


def _check_nested(core, stmts, top=True):
    for stmt in stmts:
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            _check_nested(core, stmt.body, False)
            _check_nested(core, stmt.orelse, False)
        elif not top and _collective_kind(stmt):
            raise core.info.error(
                PmapError, f"pmap cannot run {_collective_kind(stmt)} inside a loop or a "
                "branch: shards meet only between top-level statements",
                getattr(stmt, "origin", None) or core.info.node,
                "move the collective out of the loop (or use vmap with axis_name)")


def _check_callees(program, core):
    for other in program.functions.values():
        if other is None or other is core or other.body is None:
            continue
        for stmt in _walk(other.body):
            if _collective_kind(stmt):
                raise other.info.error(
                    PmapError, f"pmap cannot run {_collective_kind(stmt)} inside the helper "
                    f"function {other.info.name}: shards meet only in the mapped function",
                    getattr(stmt, "origin", None) or other.info.node,
                    "call the collective in the mapped function itself")


def _walk(stmts):
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            yield from _walk(stmt.body)
            yield from _walk(stmt.orelse)


def build_parts(fn, specs, structure=None, label=None):
    """Cut `fn` (per-shard specs `specs`) at its collectives: the module of its parts."""
    info = parse_function(fn)
    program = Program(reserved={"np", "math", "collectives"})
    core = normalize_into(program, info, specs, core_name=info.name)
    _check_nested(core, core.body)
    _check_callees(program, core)
    segments, cuts = [[]], []
    for stmt in core.body:
        kind = _collective_kind(stmt)
        if kind is None:
            segments[-1].append(stmt)
            continue
        call = stmt.prim.call
        origin = getattr(stmt, "origin", None)
        cuts.append(_Cut(kind, stmt.targets[0].id, call.args.get("x"),
                         call.const("axis_name"), info.source_line(origin) if origin else ""))
        segments.append([])
    returns = core.returns.elts if isinstance(core.returns, gast.Tuple) else [core.returns]
    ret_names = {n for r in returns for n in loads(r)}
    defined = set(core.params)
    parts, ins, outs, functions = [], [], [], []
    for k, segment in enumerate(segments):
        later = set(ret_names)
        for seg in segments[k + 1:]:
            for stmt in seg:
                later |= set(loads(stmt))
        for cut in cuts[k:]:
            if isinstance(cut.operand, gast.Name):
                later.add(cut.operand.id)
        written = set()
        for stmt in segment:
            written |= _stores(stmt)
        reads = set()
        for stmt in segment:
            reads |= set(loads(stmt))
        last = k == len(segments) - 1
        live_in = sorted(n for n in reads | (ret_names if last else set()) if n in defined)
        live_out = sorted(n for n in written if n in later)
        body = tidy_block(segment, keep=set(live_out) | (ret_names if last else set()),
                          temps=core.namer)
        body = _with_comments(body, info)
        part = program.module_names.fresh(f"{info.name}_part_{k}")
        if last:
            ret = [gast.Tuple(elts=[_expr(r) for r in returns], ctx=gast.Load())]
            out_names = None
        else:
            ret = [gast.Tuple(elts=[name(n) for n in live_out], ctx=gast.Load())]
            out_names = live_out
        params = [p for p in core.params if p in live_in] + \
            [n for n in live_in if n not in core.params]
        if k < len(cuts):
            operand = unparse(cuts[k].operand) if cuts[k].operand is not None else ""
            body.append(comment(f"then, across shards: {cuts[k].target} = {cuts[k].kind}"
                                f"({operand}) over axis {cuts[k].axis_name!r}"))
        functions.append(function(part, params, body, ret))
        parts.append(part)
        ins.append(params)
        outs.append(out_names)
        defined |= written
        if k < len(cuts):
            defined.add(cuts[k].target)
    builder = ModuleBuilder(program, None)
    builder.functions = functions
    builder.add_primals()
    imports, injected = builder.imports_and_data()
    doc = (f"pmap({label or info.name}): the per-shard function cut at its collectives, "
           f"generated by autodiff-ast from {os.path.basename(info.filename)}.\n\n"
           f"Parts run on every shard; between part k and k+1 runs collective k:\n"
           + "".join(f"  {k}: {c.target} = {c.kind}"
                     f"({unparse(c.operand) if c.operand is not None else ''}) over "
                     f"axis {c.axis_name!r}\n" for k, c in enumerate(cuts))
           + "Regenerate instead of editing.\n")
    source = render_module(doc, imports, helper_source(builder.helpers), builder.functions)
    return _Plan(source, parts, ins, outs, cuts, list(core.params), injected, structure,
                 isinstance(core.returns, gast.Tuple))


def _expr(atom):
    return gast.parse(unparse(atom), mode="eval").body




# ---------------------------------------------------------------- backends
class _Threads:
    """Shards split over worker threads; collectives reduce over every shard's value."""

    name = "threads"

    def __init__(self, workers):
        self.workers = workers
        self._pool = None
        self._lock = threading.Lock()

    def pool(self):
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers,
                                                thread_name_prefix="pmap")
            return self._pool

    def shards(self, n):
        return range(n)

    def run_part(self, fn, jobs):
        """Call fn(*args) for every job (a list of argument lists); results in order."""
        if self.workers <= 1 or len(jobs) <= 1:
            return [fn(*args) for args in jobs]
        blocks = _blocks(len(jobs), min(self.workers, len(jobs)))
        futures = [self.pool().submit(lambda lo, hi: [fn(*jobs[j]) for j in range(lo, hi)],
                                      lo, hi) for lo, hi in blocks]
        out = []
        for future in futures:
            out.extend(future.result())
        return out

    def collective(self, kind, values, n, mine):
        return reduce_shards(kind, values)

    def gather(self, values, n, mine):
        return values


class _Mpi:
    """One block of shards per MPI rank; collectives are MPI reductions."""

    name = "mpi"

    def __init__(self, comm=None):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD

    def shards(self, n):
        size, rank = self.comm.Get_size(), self.comm.Get_rank()
        lo, hi = _blocks(n, size)[rank] if n >= size else (rank, rank + 1) if rank < n else \
            (n, n)
        return range(lo, hi)

    def run_part(self, fn, jobs):
        return [fn(*args) for args in jobs]

    def collective(self, kind, values, n, mine):
        MPI = self.MPI
        if kind == "axis_index":
            return list(mine)
        if kind == "all_gather":
            everyone = [v for block in self.comm.allgather(
                [np.asarray(v, dtype=float) for v in values]) for v in block]
            stacked = np.stack(everyone)
            return [stacked.copy() for _ in values]
        local = [np.asarray(v, dtype=float) for v in values]
        if kind in ("psum", "pmean"):
            part = np.sum(local, axis=0) if local else None
            op = MPI.SUM
        elif kind == "pmax":
            part = np.max(local, axis=0) if local else None
            op = MPI.MAX
        else:
            part = np.min(local, axis=0) if local else None
            op = MPI.MIN
        like = part if part is not None else self._shape_like(values)
        send = np.ascontiguousarray(part if part is not None else _identity(kind, like))
        recv = np.empty_like(send)
        self.comm.Allreduce(send, recv, op=op)
        if kind == "pmean":
            recv = recv / n
        value = float(recv) if recv.ndim == 0 else recv
        return [value if recv.ndim == 0 else value.copy() for _ in values]

    def _shape_like(self, values):
        shapes = self.comm.allgather(None if not values else np.shape(values[0]))
        shape = next(s for s in shapes if s is not None)
        return np.zeros(shape)

    def gather(self, values, n, mine):
        blocks = self.comm.allgather(values)
        return [v for block in blocks for v in block]


def _identity(kind, like):
    if kind == "pmax":
        return np.full_like(like, -np.inf)
    if kind == "pmin":
        return np.full_like(like, np.inf)
    return np.zeros_like(like)


def _blocks(n, parts):
    """Contiguous (lo, hi) ranges splitting range(n) into `parts` nearly equal blocks."""
    return [(k * n // parts, (k + 1) * n // parts) for k in range(parts)]


def _launched_by_mpiexec():
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        value = os.environ.get(key)
        if value and value.isdigit() and int(value) > 1:
            return True
    return False


# ---------------------------------------------------------------- the transformation
class _Pmapped(_Transformed):
    """A function mapped over an axis, shards in parallel; `.source` shows its parts."""

    kind = "pmap"

    def __init__(self, fun, axis_name=None, in_axes=0, out_axes=0, devices=None,
                 backend=None, jit=True):
        super().__init__(fun)
        if backend not in (None, "threads", "mpi"):
            raise ValueError(f"pmap backend must be 'threads' or 'mpi', got {backend!r}")
        self.axis_name = axis_name
        self.in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        self.out_axes = out_axes
        self.devices = devices
        self.backend_name = backend or ("mpi" if _launched_by_mpiexec() else "threads")
        self.jit = jit
        self._backend = None
        self._compiled = {}
        self._as_vmap = None  # (what a transformation of this pmap reads: function_for)

    def output_lists(self):
        return lists_of(self.fun)

    def backend(self, n):
        if self._backend is None:
            if self.backend_name == "mpi":
                self._backend = _Mpi()
            else:
                workers = self.devices if isinstance(self.devices, int) else \
                    len(self.devices) if self.devices is not None else (os.cpu_count() or 1)
                self._backend = _Threads(max(1, int(workers)))
        return self._backend

    def _axes(self, names, n_positional):
        in_axes = self.in_axes
        if isinstance(in_axes, tuple) and len(in_axes) != n_positional:
            raise PmapError(f"pmap in_axes has {len(in_axes)} entries but the function was "
                            f"called with {n_positional} positional argument(s)")
        return [in_axes[k] if isinstance(in_axes, tuple) else in_axes
                for k in range(len(names))]

    def _plan(self, names, values, axes):
        per_specs, likes, key = {}, [], []
        for pname, value, axis in zip(names, values, axes):
            spec = spec_of(value)
            if isinstance(spec, (TreeSpec, Static)):
                raise PmapError(f"pmap: argument {pname!r} is a pytree or a static value; "
                                "pass arrays and scalars", hint="flatten it into arrays")
            if axis is not None:
                if np.ndim(value) == 0:
                    raise PmapError(f"pmap was asked to map argument {pname} along axis "
                                    f"{axis}, but it is a scalar")
                spec = _per_example_spec(spec, [axis % np.ndim(value)])
            per_specs[pname] = spec
            likes.append(_placeholder(spec))
            key.append((pname, spec, axis))
        key = tuple(key)
        if key not in self._modules:
            fun = self.fun
            py_fun = None if isinstance(fun, _Transformed) else _as_python_function(fun)
            target = _target_for(fun, py_fun, names, likes, per_specs)
            plan = build_parts(target.fn, target.specs, target.structure,
                               label=target.label or None)
            for cut in plan.cuts:
                if cut.axis_name != self.axis_name:
                    raise PmapError(f"unbound axis name: {cut.axis_name} (this pmap maps axis "
                                    f"{self.axis_name!r})",
                                    hint=f"pmap(f, axis_name={cut.axis_name!r})")
            module = self._load(plan)
            self._modules[key] = (plan, module)
        self._last = self._modules[key]
        return self._last

    def _load(self, plan):
        entry = sanitize(f"pmap_{plan.parts[0]}")
        if self.jit:
            from codegen.numba_cpu import NumbaOptions, compile_module
            compiled = compile_module(plan.source, entry, plan.parts, plan.injected,
                                      NumbaOptions(cache=True, nogil=True))
            return {p: compiled.entry(p) for p in plan.parts}, compiled.source
        from codegen.loader import load_source
        module = load_source(plan.source, entry)
        for k, v in plan.injected.items():
            setattr(module, k, v)
        return {p: getattr(module, p) for p in plan.parts}, plan.source

    @property
    def source(self):
        """The per-shard function cut at its collectives (the module the shards run)."""
        if self._last is None:
            raise AttributeError("pmap(f).source is written on the first call")
        return self._last[1][1]

    def function_for(self, specs):
        """The generated entry for `specs` when pmap(f) is itself transformed (grad of a
        function calling it, say): on one process pmap computes what vmap with the same axes
        and axis name computes, so the transformation reads vmap's source."""
        from .batching import vmap
        if self._as_vmap is None:
            self._as_vmap = vmap(self.fun, in_axes=self.in_axes, out_axes=self.out_axes,
                                 axis_name=self.axis_name)
        return self._as_vmap.function_for(specs)

    def __call__(self, *args):
        names, values = _bind(self._signature_function(), args, {})
        axes = self._axes(names, len(args))
        for pname, value, axis in zip(names, values, axes):
            if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
                raise PmapError(f"pmap in_axes for argument {pname!r} is {axis!r}: pmap takes "
                                "an int or None per argument (a pytree prefix is vmap's)",
                                hint="pass the arrays of a pytree as separate arguments, or "
                                     "use vmap(f, in_axes=..., axis_name=...)")
            if isinstance(spec_of(value), TreeSpec):
                raise PmapError(f"pmap: argument {pname!r} is a pytree "
                                f"({type(value).__name__}); pmap takes arrays and scalars",
                                hint="pass its arrays as separate arguments, or use "
                                     "vmap(f, axis_name=...), which takes pytrees")
        sizes = {np.shape(v)[a] for v, a in zip(values, axes) if a is not None}
        if len(sizes) != 1:
            raise BatchingError("pmap needs at least one mapped argument, all mapped axes of "
                                f"one size (got sizes {sorted(sizes)})")
        (n,) = sizes
        plan, (parts, _) = self._plan(names, values, axes)
        backend = self.backend(n)
        mine = list(backend.shards(n))
        states = []
        for j in mine:
            state = {}
            for pname, value, axis in zip(names, values, axes):
                state[pname] = _scalar(value) if axis is None else _shard(value, j, axis)
            states.append(state)
        params = plan.params
        for state in states:  # the part functions take the flat parameters by their names
            for p, pname in zip(params, names):
                state.setdefault(p, state[pname])
        results = None
        for k, part in enumerate(plan.parts):
            jobs = [[state[v] for v in plan.ins[k]] for state in states]
            out = backend.run_part(parts[part], jobs)
            if plan.outs[k] is None:
                results = out
                break
            for state, values_k in zip(states, out):
                state.update(zip(plan.outs[k], values_k))
            cut = plan.cuts[k]
            operands = [_operand(cut, state) for state in states]
            if isinstance(cut.operand, gast.Tuple):  # psum((x, y), 'i'): each leaf reduced
                leaves = [backend.collective(cut.kind, list(leaf), n, mine)
                          for leaf in zip(*operands)]
                reduced = [tuple(leaf[s] for leaf in leaves) for s in range(len(states))]
            else:
                reduced = backend.collective(cut.kind, operands, n, mine)
            for state, value in zip(states, reduced):
                state[cut.target] = value
        results = backend.gather(results, n, mine)
        return self._assemble(plan, results)

    def _assemble(self, plan, results):
        n_out = len(results[0])
        stacked = []
        for k in range(n_out):
            rows = [np.asarray(r[k]) for r in results]
            axis = self.out_axes if not isinstance(self.out_axes, tuple) else self.out_axes[k]
            if axis is None:  # the same in every shard (a psum'd value, replicated params)
                stacked.append(_scalar(rows[0]))
                continue
            out = np.stack(rows)
            if axis:
                out = np.moveaxis(out, 0, axis)
            stacked.append(out)
        if plan.structure is not None:
            if isinstance(plan.structure, int):
                return stacked[plan.structure]
            return pytrees.tree_map(lambda k: stacked[k], plan.structure)
        return tuple(stacked) if plan.tuple_out else stacked[0]


def _scalar(value):
    """0-d arrays as Python scalars (one compiled signature for scalars, whatever their type).
    """
    if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0:
        return value.item()
    return value


def _shard(value, j, axis):
    """Example `j` of `value` along `axis`: a contiguous array, or a Python scalar."""
    part = np.take(np.asarray(value), j, axis=axis % np.ndim(value))
    return part.item() if part.ndim == 0 else np.ascontiguousarray(part)


def _operand(cut, state):
    atom = cut.operand
    if atom is None:
        return None
    return _operand_value(atom, state)


def _operand_value(atom, state):
    if isinstance(atom, gast.Name):
        return state[atom.id]
    if isinstance(atom, gast.Tuple):
        return tuple(_operand_value(e, state) for e in atom.elts)
    return ast.literal_eval(unparse(atom))


def pmap(fun, axis_name=None, in_axes=0, out_axes=0, devices=None, backend=None, jit=True):
    """Map `fun` over an axis with the examples (shards) running in parallel (JAX's pmap).

    axis_name names the axis for the collectives (psum, pmean, pmax, pmin, all_gather,
    axis_index); in_axes/out_axes as in vmap (ints and None per argument). devices: the
    number of CPU worker threads (an int, or a list whose length counts), by default one per
    core. backend: 'threads' or 'mpi' (default: 'mpi' when launched by mpiexec with more than
    one rank). jit=False runs the parts as plain Python instead of Numba-compiled code.

    >>> import numpy as np
    >>> pmap(lambda m: np.dot(m, m.T), jit=False)(np.ones((4, 2, 3)))[0]
    array([[3., 3.],
           [3., 3.]])
    """
    return _Pmapped(fun, axis_name, in_axes, out_axes, devices, backend, jit)
