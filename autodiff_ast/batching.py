"""vmap: batched variants of a function, written as source (JAX's ``vmap``).

``vmap(f)`` maps `f` over an axis of its arguments. We never trace: the user's function is
normalized to the core form for the *per-example* signature, then every statement is rewritten
by its primitive's batching rule (:mod:`autodiff_ast.batch_core`,
:mod:`autodiff_ast.rules.batching`) so that the generated function processes the whole batch at
once, batch axis first, with no Python loop over examples (the *vectorized variant*). Where that
is impossible (a loop whose trip count differs per example, a statement kind we do not know) the
generated function loops over the examples calling the per-example function (the *per-example
loop variant*); a comment in the generated source says which variant was chosen and why.

This module holds the public :func:`vmap`: in_axes/out_axes handling, batch-size checks, what
is batched (a Python function, or the source another transformation generated) and the module
around the batched function.

>>> import numpy as np
>>> def affine(W, x):
...     return np.tanh(np.dot(W, x))
>>> batched = vmap(affine, in_axes=(None, 0))
>>> W, xs = np.ones((2, 3)), np.arange(12.0).reshape(4, 3)
>>> np.allclose(batched(W, xs), np.tanh(xs @ W.T))
True
>>> print(batched.source.split("\\n\\n\\n")[1], end="")
def vmap_affine(W, x):
    # vmap: vectorized variant, every line runs on the whole batch (batch axis 0).
    # return np.tanh(np.dot(W, x))
    return np.tanh(np.dot(x, W.T))
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass

import gast
import numpy as np

from codegen.dict_outputs import flatten_returned_dicts, rebuild_dicts
from codegen.emit import comment, function, render_module
from codegen.helpers import helper_source

from . import pytrees
from . import types as T
from .api import _bind, _prepare_leaf, _ReverseTransform, _Transformed
from .batch_core import (
    FunctionBatcher,
    ModuleBatcher,
    after_comments,
    batch_size_of,
    flag_any,
    inline_returns,
    wrap,
)
from .build import Generated, ModuleBuilder
from .errors import AutodiffError
from .frontend import parse_function
from .nesting import code_to_transform
from .normalize import Program, Static, TreeSpec, atom_type, normalize_into, spec_of
from .output_lists import lists_of
from .rules import batching as R
from .templates import assign, fill, name


class BatchingError(AutodiffError, ValueError):
    """vmap cannot batch these arguments or this function (sizes, axes, shapes)."""


# ---------------------------------------------------------------- axes
def _sequences_like(axes, tree):
    """`axes` with each list or tuple made the kind of sequence `tree` has in its place (a
    list of axes for a list argument, ``in_axes=([0, None], 0)``, matches it as in JAX; a
    list where the value has a tuple, or none, is read as a tuple)."""
    if isinstance(axes, (list, tuple)):
        if isinstance(tree, (list, tuple)) and len(tree) == len(axes):
            return _sequence_of(type(tree), [_sequences_like(a, t) for a, t in zip(axes, tree)])
        return tuple(_sequences_like(a, None) for a in axes)
    if isinstance(axes, dict):
        return {k: _sequences_like(a, tree.get(k) if isinstance(tree, dict) else None)
                for k, a in axes.items()}
    return axes


def _sequence_of(kind, items):
    """A sequence of type `kind` (list, tuple or NamedTuple) holding `items`: a NamedTuple
    takes its fields as separate arguments, ``P(*items)``, not one iterable.

    >>> from collections import namedtuple
    >>> _sequence_of(namedtuple("P", "w b"), [0, None])
    P(w=0, b=None)
    """
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def _axes_leaves(axes, tree, what):
    """Flatten an in_axes/out_axes prefix tree against `tree`: one axis per leaf of `tree`.

    >>> _axes_leaves({"W": None, "b": 0}, {"W": 1.0, "b": 2.0}, "in_axes")
    [None, 0]
    """
    axes = _sequences_like(axes, tree)
    leaves, treedef = pytrees.tree_flatten(axes, is_leaf=lambda a: a is None)
    for a in leaves:
        if isinstance(a, bool) or not (a is None or isinstance(a, (int, np.integer))):
            raise BatchingError(f"vmap {what} must be built from ints and None, got {a!r}",
                                hint="use an int (the mapped axis) or None (not mapped)")
    try:
        subtrees = treedef.flatten_up_to(tree)
    except ValueError as exc:
        raise BatchingError(f"vmap {what} {axes!r} does not match the structure of the "
                            f"values: {exc}", hint=f"give {what} the structure of the values "
                            "(or a prefix of it), e.g. (None, 0)") from None
    out = []
    for axis, sub in zip(leaves, subtrees):
        count = len(pytrees.tree_leaves(sub))
        out.extend([None if axis is None else int(axis)] * count)
    return out


def _per_example_spec(spec, axes):
    """The per-example spec of one argument: mapped leaves lose their mapped axis."""
    it = iter(axes)

    def visit(s):
        if isinstance(s, TreeSpec):
            return TreeSpec(s.kind, tuple((k, visit(c)) for k, c in s.children), s.fields)
        if isinstance(s, Static):
            return s
        axis = next(it)
        if axis is None:
            return s
        dims = tuple(d for i, d in enumerate(s.dims) if i != axis)
        return T.array(dims, s.dtype or "float64")
    return visit(spec)


def _leaf_types(pname, spec):
    if isinstance(spec, TreeSpec):
        return [t for _, t in spec.leaves(pname)]
    return [] if isinstance(spec, Static) else [spec]


def _normalized_axis(axis, rank, what, where=None):
    """`axis` of a value of rank `rank` as a non-negative axis (`where`: the error's place,
    the filename, lineno and code of the user's line)."""
    if axis is None:
        return None
    if not -rank <= axis < rank:
        raise BatchingError(
            f"vmap was asked to map {what} along axis {axis}, but it has rank {rank}",
            hint=f"use an axis between {-rank} and {rank - 1}, or None to leave it unmapped",
            **(where or {}))
    return axis % rank


def _placeholder(spec):
    """A value with the pytree structure of `spec` (for matching in_axes prefixes)."""
    if isinstance(spec, TreeSpec):
        children = [_placeholder(c) for _, c in spec.children]
        if spec.kind == "dict":
            return {k: v for (k, _), v in zip(spec.children, children)}
        if spec.kind == "list":
            return children
        return tuple(children)
    return None if isinstance(spec, Static) else 0.0


# ---------------------------------------------------------------- what is being batched
@dataclass
class _Target:
    """The Python function vmap normalizes, its per-example specs and output structure."""

    fn: object
    specs: dict
    structure: object = None  # placeholder pytree of output indices; None: from the returns
    label: str = ""  # what was batched, as the user wrote it: "grad(loss)"; "" for fn itself
    filename: str = ""  # the user's file


def _flat_specs(fn, specs):
    """Specs of a generated entry function that takes the flat leaves of `specs`."""
    leaves = [t for pname, spec in specs.items() for t in _leaf_types(pname, spec)]
    params = list(inspect.signature(fn).parameters)
    return dict(zip(params, leaves))


def _reverse_target(fun, names, likes, specs):
    """vmap(grad(f)): batch the module grad generates for the per-example signature."""
    entry, structure = fun.flat_entry(names, likes, specs)
    return _Target(entry, _flat_specs(entry, specs), structure)


def _target_for(fun, py_fun, names, likes, specs):
    """What vmap batches: the user's function, or the source another transform generated."""
    if not isinstance(fun, _Transformed):
        return _Target(py_fun, specs)
    with code_to_transform():  # vmap reads the code fun writes
        return _transformed_target(fun, names, likes, specs)


def _transformed_target(fun, names, likes, specs):
    if isinstance(fun, _ReverseTransform):
        target = _reverse_target(fun, names, likes, specs)
    elif isinstance(fun, _Vmapped):
        entry, structure = fun.flat_entry(names, likes, specs)
        target = _Target(entry, _flat_specs(entry, specs), structure)
    elif any(isinstance(s, (TreeSpec, Static)) for s in specs.values()):
        raise BatchingError(f"vmap of {fun.kind}(...) with pytree or static arguments is not "
                            "supported yet", hint="pass the arrays as separate arguments")
    else:
        entry = fun.function_for(specs)
        target = _Target(entry, _flat_specs(entry, specs))
    inner = fun._signature_function()
    label = getattr(inner, "__name__", "f")
    target.label = f"{fun.kind}({'lambda' if label == '<lambda>' else label})"
    code = getattr(inner, "__code__", None)
    target.filename = os.path.basename(code.co_filename) if code is not None else ""
    return target


# ---------------------------------------------------------------- building the module
def build_vmap(target, leaf_axes, out_axes, axis_size_param=False, options=""):
    """The generated module of vmap for one per-example signature and choice of axes.

    `leaf_axes` gives, per flat leaf in order, the (non-negative) axis it is mapped along or
    None. With axis_size_param the entry function takes the batch size as a last argument.
    """
    info = parse_function(target.fn)
    # Dicts it returns (has_aux's metrics, a primal's dict) are batched as tuples of their
    # values and rebuilt from `dicts` (the parse is this build's own: its tree may change).
    dicts = flatten_returned_dicts(info.node, [info.node])
    program = Program(reserved={"np", "math"})
    core = normalize_into(program, info, target.specs, core_name=info.name)
    if len(core.params) != len(leaf_axes):
        raise BatchingError(f"vmap: {len(leaf_axes)} mapped values for {len(core.params)} "
                            f"parameters of {info.name}")
    axes = dict(zip(core.params, leaf_axes))
    pattern = tuple(axes[p] is not None for p in core.params)
    module = ModuleBatcher(program, quote_lines=not target.label)
    fb = FunctionBatcher(module, core, pattern)
    result = fb.run()
    n_batch = fb.n_batch
    exprs, types, flags, shape = _flat_returns(result.returns, result.out_flags,
                                               {**core.types, **result.types})
    tuple_out = isinstance(core.returns, gast.Tuple) or not isinstance(shape[0], int)
    n_out = len(exprs)
    structure = _output_structure(target.structure, shape,
                                  isinstance(core.returns, gast.Tuple), dicts)
    order = pytrees.tree_leaves(structure)
    by_index = dict(zip(order, _axes_leaves(out_axes, structure, "out_axes")))
    returns, needs_n = [], result.uses_n_batch
    for k, (expr, typ, flag) in enumerate(zip(exprs, types, flags)):
        expr, broadcast = _output(expr, typ, flag, by_index.get(k, 0), k, core, n_batch)
        needs_n = needs_n or broadcast
        returns.append(expr)
    prologue = [assign(p, fill("np.moveaxis(x, a, 0)", x=p, a=axes[p]))
                for p in core.params if axes[p]]
    params = list(core.params)
    if axis_size_param:
        params.append(n_batch)
    elif needs_n:
        batched = [p for p in core.params if axes[p] is not None]
        prologue.append(assign(n_batch, batch_size_of(batched, core.types)))
    body, returns = inline_returns(list(result.body), returns, core.namer.temps)
    if result.variant == "vectorized":
        head = [comment("vmap: vectorized variant, every line runs on the whole batch "
                        "(batch axis 0).")]
        body = head + prologue + body
    else:
        at = after_comments(body)
        body = body[:at] + prologue + body[at:]
    entry = program.module_names.fresh(f"vmap_{info.name}")
    main = function(entry, params, body, returns if tuple_out or n_out > 1 else returns[0])
    builder = ModuleBuilder(program, None)
    builder.functions = list(module.functions) + [main]
    builder.add_primals()  # per-example functions the batched code calls as they are
    imports, injected = builder.imports_and_data()
    doc = _docstring(info, target, core, axes, result, options)
    source = render_module(doc, imports, helper_source(builder.helpers), builder.functions)
    layout = {"structure": structure, "tuple_out": tuple_out, "n_out": n_out,
              "variant": result.variant}
    return Generated(source, entry, injected, layout)


def _output_structure(given, shape, returns_tuple, dicts):
    """The batched entry's output structure: a pytree of positions among its flat outputs.

    `shape` holds, per returned value, its flat position (or a nested tuple of them: a
    returned tuple is flattened into its leaves); `dicts` is the spec of the dicts the
    function returned (codegen/dict_outputs.py), which become dicts again. `given` is the
    structure of a transformed function's entry (``grad(f)``'s gradients, value and aux) in
    terms of its returned values, each of which may be a tuple or dict of several leaves
    here (has_aux's ``(pred, acc)``).
    """
    rebuilt = rebuild_dicts  # (of positions here, of the values they stand for at a call)
    if dicts is not None and dicts[0] == "dict":  # `return {"a": a, "b": b}`: one value
        returns_tuple, per_value = False, [rebuilt(tuple(shape), dicts)]
    elif returns_tuple:
        specs = dicts[1] if dicts is not None else [None] * len(shape)
        per_value = [rebuilt(p, s) for p, s in zip(shape, specs)]
    else:
        per_value = [shape[0]]
    if given is None:
        return tuple(per_value) if returns_tuple else per_value[0]
    return pytrees.tree_map(lambda i: per_value[i], given)


def _flat_returns(returns, flags, types):
    """Returned values with tuple values opened, nested ones too: (expressions, types, flags,
    structure), the structure holding each leaf's position."""
    exprs, out_types, out_flags = [], [], []

    def leaf(expr, typ, flag):
        if typ.kind == "tuple" and typ.elts:
            return tuple(leaf(R.subscript(expr, [gast.Constant(value=k, kind=None)]), elt,
                              flag[k] if isinstance(flag, tuple) else flag)
                         for k, elt in enumerate(typ.elts))
        exprs.append(expr)
        out_types.append(typ)
        out_flags.append(flag_any(flag))
        return len(exprs) - 1
    shape = [leaf(expr, atom_type(expr, types), flag) for expr, flag in zip(returns, flags)]
    return exprs, out_types, out_flags, shape


def _output(expr, typ, flag, axis, k, core, n_batch):
    """An output with its batch axis where out_axes asks; (expression, needs the batch size)."""
    info = core.info
    if axis is None:
        if flag:
            raise BatchingError(
                f"vmap: out_axes is None for output {k} of {info.name}, but that output "
                "differs between examples", filename=info.filename,
                lineno=info.file_line(core.return_node), code=info.source_line(core.return_node),
                hint="give that output an int out_axes, or return only unmapped values there")
        return expr, False
    if typ.ndim is None:
        where = dict(filename=info.filename, lineno=info.file_line(core.return_node),
                     code=info.source_line(core.return_node))
        if typ.kind == "list":
            raise BatchingError(
                f"vmap: output {k} of {info.name} is a list built at run time, whose length "
                "may differ between examples", **where,
                hint="return np.array(the list) (one array per example), or a tuple of a "
                     "fixed length")
        raise BatchingError(f"vmap: the rank of output {k} of {info.name} is unknown",
                            **where)
    axis = _normalized_axis(axis, typ.ndim + 1, f"output {k} of {info.name}", dict(
        filename=info.filename, lineno=info.file_line(core.return_node),
        code=info.source_line(core.return_node)))
    if not flag:
        expr = R.broadcast_batch(expr, typ, name(n_batch))
    if axis:
        expr = fill("np.moveaxis(e, 0, a)", e=expr, a=axis)
    return expr, not flag


def _docstring(info, target, core, axes, result, options):
    parts = []
    for p in core.params:
        t = core.types.get(p, T.UNKNOWN)
        axis = axes[p]
        parts.append(f"{p}: {T.describe(t)}" + (f" (mapped along axis {axis})"
                                                 if axis is not None else " (not mapped)"))
    what = target.label or info.name
    filename = target.filename or os.path.basename(info.filename)
    variant = "vectorized" if result.variant == "vectorized" else \
        f"per-example loop ({result.reason})"
    per_example = "\n".join(wrap(f"Per example: {', '.join(parts)}.", 96))
    return (f"vmap({what}{options}), generated by autodiff-ast from {filename}.\n\n"
            f"{per_example}\n"
            f"Variant: {variant}.\nRegenerate instead of editing.\n")


# ---------------------------------------------------------------- the public transformation
class _Vmapped(_Transformed):
    """A function mapped over an axis of its arguments; `.source` shows the batched code."""

    kind = "vmap"
    defaults_static = True  # (JAX maps only the arguments passed)

    def __init__(self, fun, in_axes=0, out_axes=0, axis_size=None, axis_name=None,
                 verbose=False):
        super().__init__(fun, verbose)
        in_axes = tuple(in_axes) if isinstance(in_axes, list) else in_axes
        out_axes = tuple(out_axes) if isinstance(out_axes, list) else out_axes
        _axes_leaves(in_axes, in_axes, "in_axes")  # checks: ints and None only
        _axes_leaves(out_axes, out_axes, "out_axes")
        if axis_size is not None and (isinstance(axis_size, bool) or not isinstance(
                axis_size, (int, np.integer)) or axis_size < 0):
            raise BatchingError(f"vmap axis_size must be a non-negative int, got "
                                f"{axis_size!r}")
        self.in_axes = in_axes
        self.out_axes = out_axes
        self.axis_size = axis_size
        self.axis_name = axis_name  # reserved for collectives (psum/pmean over the batch)

    def _per_arg_axes(self, names, n_positional, passed):
        """The in_axes entry of each parameter: keywords map axis 0, defaults are unmapped."""
        in_axes = self.in_axes
        if isinstance(in_axes, tuple) and len(in_axes) != n_positional:
            raise BatchingError(
                f"vmap in_axes has {len(in_axes)} entries but the function was called with "
                f"{n_positional} positional argument(s)",
                hint="give one in_axes entry per positional argument")
        out = []
        for k, pname in enumerate(names):
            if k < n_positional:
                out.append(in_axes[k] if isinstance(in_axes, tuple) else in_axes)
            else:
                out.append(0 if pname in passed else None)
        return out

    def _leaf_axes(self, names, likes, specs, per_arg):
        """(axis per flat leaf, made non-negative; a label per leaf)."""
        leaf_axes, labels = [], []
        for pname, like, axes in zip(names, likes, per_arg):
            types = _leaf_types(pname, specs[pname])
            if not types:
                continue
            axes_list = _axes_leaves(axes, like, f"in_axes for argument {pname!r}")
            for j, (t, axis) in enumerate(zip(types, axes_list)):
                label = pname if len(types) == 1 else f"{pname} (leaf {j})"
                if axis is not None:
                    if not t.ndim:
                        raise BatchingError(
                            f"vmap was asked to map argument {label} along axis {axis}, but "
                            "it is a scalar", hint="give it in_axes None, or pass an array")
                    axis = _normalized_axis(axis, t.ndim, f"argument {label}")
                leaf_axes.append(axis)
                labels.append(label)
        return leaf_axes, labels

    def _batch_size(self, leaf_axes, labels, leaves):
        sizes = [(label, np.shape(leaf)[axis], axis) for axis, label, leaf in
                 zip(leaf_axes, labels, leaves) if axis is not None]
        distinct = sorted({s for _, s, _ in sizes})
        if len(distinct) > 1 or (sizes and self.axis_size is not None and
                                 distinct[0] != self.axis_size):
            described = "; ".join(f"argument {label} has size {size} along axis {axis}"
                                  for label, size, axis in sizes)
            if self.axis_size is not None:
                described += f"; axis_size is {self.axis_size}"
            raise BatchingError(
                f"vmap got inconsistent sizes for the mapped axes: {described}",
                hint="every mapped axis must have the same length (the batch size)")
        if sizes:
            return distinct[0]
        if self.axis_size is None:
            raise BatchingError("vmap needs at least one mapped argument, or axis_size",
                                hint="map an argument (in_axes) or pass axis_size=n")
        return self.axis_size

    def _generate(self, names, likes, specs, leaf_axes, axis_size_param):
        per_example = {}
        k = 0
        for pname in names:
            count = len(_leaf_types(pname, specs[pname]))
            per_example[pname] = _per_example_spec(specs[pname], leaf_axes[k:k + count])
            k += count
        # The output structure follows from the function and the specs: not part of the key.
        key = (_spec_key(per_example), tuple(leaf_axes), repr(self.out_axes), axis_size_param)

        def build():
            target = _target_for(self.fun, self.py_fun, names, likes, per_example)
            options = _options_text(self.in_axes, self.out_axes)
            return build_vmap(target, leaf_axes, self.out_axes, axis_size_param, options)
        return self._module_for(key, build)

    def output_lists(self):
        return lists_of(self.fun)

    def __call__(self, *args, **kwargs):
        names, values = _bind(self._signature_function(), args, kwargs, "vmap")
        per_arg = self._per_arg_axes(names, len(args), set(kwargs))
        specs = {n: spec_of(v) for n, v in zip(names, values)}
        concrete = self._concrete_ints(
            names, values, {n for n, axes in zip(names, per_arg) if axes is None})
        leaf_axes, labels = self._leaf_axes(names, values, specs, per_arg)
        batch = self._batch_size(leaf_axes, labels, [_prepare_leaf(v) for v in _flat_leaves(
            values, specs)])
        no_mapped = all(a is None for a in leaf_axes)

        def generate(specs):
            nonlocal leaf_axes, labels  # (an int written as its value has no leaf)
            leaf_axes, labels = self._leaf_axes(names, values, specs, per_arg)
            return self._generate(names, values, specs, leaf_axes, no_mapped)
        generated, module = self._generate_concrete(specs, concrete, generate)
        flat = [_prepare_leaf(v) for v in _flat_leaves(values, specs)]
        if no_mapped:
            flat.append(batch)
        result = getattr(module, generated.entry)(*flat)
        self._last_call = None if no_mapped or kwargs else (
            leaf_axes, labels, tuple(isinstance(specs[n], Static) for n in names))
        from .jacobians import single_precision_like  # (jacobians imports this module)
        return single_precision_like(values, _assemble(generated.layout, result))

    def _batched_plan(self):
        """For jit's fast path: the last call's work, for arguments of the same types and
        shapes (flatten, check the batch sizes, call the compiled entry, assemble)."""
        last = getattr(self, "_last_call", None)
        if last is None or self._last is None:
            return None
        leaf_axes, labels, static = last
        generated, module = self._last
        entry = getattr(module, generated.entry)
        layout = generated.layout

        def plan(args):
            flat = []
            for value, skip in zip(args, static):
                if not skip:
                    flat.extend(_prepare_leaf(v) for v in pytrees.tree_leaves(value))
            self._batch_size(leaf_axes, labels, flat)
            return _assemble(layout, entry(*flat))
        return plan

    def flat_entry(self, names, likes, specs):
        """(generated entry, output structure) for batched `specs`: the entry takes the
        arguments' flat leaves, and `structure` indexes its outputs as a call returns them
        (used by other transforms, and by a call inside transformed code with pytree
        arguments, ``vmap(loss, in_axes=(None, 0))(params, X)``: see
        ``Normalizer.call_transformed_tree``)."""
        likes = [like if like is not None else _placeholder(specs[n])
                 for n, like in zip(names, likes)]
        names, likes, specs = self._with_defaults(names, likes, specs)
        per_arg = self._per_arg_axes(names, len(names), set())
        leaf_axes, _ = self._leaf_axes(names, likes, specs, per_arg)
        if all(a is None for a in leaf_axes):
            raise NotImplementedError("a vmap with no mapped argument cannot be transformed")
        generated, module = self._generate(names, likes, specs, leaf_axes, False)
        return getattr(module, generated.entry), generated.layout["structure"]

    def _with_defaults(self, names, likes, specs):
        """The parameters a call inside transformed code left out, added with their defaults
        as static arguments (not mapped: JAX maps only what is passed)."""
        parameters = inspect.signature(self._signature_function()).parameters
        missing = [n for n, p in parameters.items() if n not in specs and
                   p.default is not inspect.Parameter.empty]
        if not missing:
            return names, likes, specs
        specs = dict(specs, **{n: Static(parameters[n].default) for n in missing})
        return list(names) + missing, list(likes) + [
            parameters[n].default for n in missing], specs

    def function_for(self, specs):
        """The generated entry function for batched argument specs (flat arrays, and static
        arguments: a parameter left to its default)."""
        if any(isinstance(s, TreeSpec) for s in specs.values()):
            raise NotImplementedError("transforming vmap(f) with pytree arguments is not "
                                      "supported yet")
        names = list(specs)
        entry, _ = self.flat_entry(names, [None] * len(names), specs)
        return entry


def _flat_leaves(values, specs=None):
    """The array leaves of the arguments the generated entry takes (not the static ones)."""
    flat = []
    kinds = list(specs.values()) if specs is not None else [spec_of(v) for v in values]
    for value, spec in zip(values, kinds):
        if not isinstance(spec, Static):
            flat.extend(pytrees.tree_leaves(value))
    return flat


def _spec_key(specs):
    return tuple((k, ("static", id(v.value)) if isinstance(v, Static) else v)
                 for k, v in specs.items())


def _options_text(in_axes, out_axes):
    text = ""
    if in_axes != 0:
        text += f", in_axes={in_axes!r}"
    if out_axes != 0:
        text += f", out_axes={out_axes!r}"
    return text


def _assemble(layout, result):
    structure = layout["structure"]
    if isinstance(structure, int) and layout["n_out"] == 1 and not layout["tuple_out"]:
        return result
    flat = list(result) if isinstance(result, tuple) else [result]
    return pytrees.tree_map(lambda i: flat[i], structure)


def vmap(fun, in_axes=0, out_axes=0, axis_size=None, axis_name=None, verbose=False):
    """Map `fun` over an axis of its arguments, as generated vectorized source (JAX's vmap).

    in_axes says, per positional argument, which axis is mapped (negative axes count from the
    end) or None for an argument shared by every example: one int or None for all arguments,
    a tuple or list with one entry per argument, or a pytree prefix of an argument such as
    ``{"W": None, "b": 0}``. Keyword arguments are mapped along axis 0. out_axes places the
    batch axis in each output (None: an output that does not vary). axis_size gives the batch
    size when no argument is mapped. axis_name is accepted and reserved for collectives
    (psum/pmean over the mapped axis). verbose=True prints the generated module. `fun` may
    be the map :func:`linearize` or :func:`vjp` returns: its tangents (cotangent) are mapped,
    in_axes giving one entry per tangent.

    >>> import numpy as np
    >>> dot = vmap(lambda a, b: np.dot(a, b), in_axes=(0, None))
    >>> dot(np.eye(3), np.array([1.0, 2.0, 3.0]))
    array([1., 2., 3.])
    >>> vmap(lambda x: x * 2.0, in_axes=1, out_axes=1)(np.ones((2, 3))).shape
    (2, 3)
    """
    from .bound_maps import vmap_of_bound_map  # a pullback or a linearized map
    mapped = vmap_of_bound_map(fun, in_axes, out_axes, {
        "axis_size": axis_size, "axis_name": axis_name, "verbose": verbose})
    if mapped is not None:
        return mapped
    return _Vmapped(fun, in_axes, out_axes, axis_size, axis_name, verbose)


__all__ = ["vmap", "build_vmap", "BatchingError", "FunctionBatcher", "ModuleBatcher"]
