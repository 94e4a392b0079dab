"""Jacobian modules: ``jacfwd`` is vmap of the jvp module, ``jacrev`` vmap of the vjp backward.

JAX builds ``jacfwd`` as ``vmap(jvp)`` over the basis of the input space and ``jacrev`` as
``vmap(vjp)`` over the basis of the output space. We do the same through source: the jvp (or
vjp) module is generated and loaded, :func:`autodiff_ast.batching.vmap` writes its batched
variant (every basis direction in one vectorized pass, tangents or cotangents with a leading
basis axis), and a short wrapper written here builds the basis, calls the batched function once
and lays the rows out in JAX's Jacobian shape (``out.shape + in.shape``). The wrapper is then
written out as one standalone module (:func:`autodiff_ast.primal.build_primal`), which every
transformation can read again: ``hessian`` is ``jacfwd(jacrev(f))``.

>>> import numpy as np
>>> from autodiff_ast.normalize import spec_of
>>> mod = build_jacfwd(lambda x: np.sin(x) * 2.0, {"x": spec_of(np.ones(3))}, (0,))
>>> "x_dot = np.eye(x.shape[0])" in mod.source
True
"""

from __future__ import annotations

import inspect
import os

from codegen.loader import load_source

from . import types as T
from .build import build_vjp, check_argnum, param_names, returned_dicts
from .build_forward import build_jvp
from .custom import source_function
from .errors import NonFloatOutputError
from .frontend import parse_function
from .naming import Namer, sanitize
from .nesting import code_to_transform
from .normalize import Program, TreeSpec, normalize, normalize_into
from .primal import build_primal


def load(generated):
    """Load a generated module (with the values the loader must set in it)."""
    module = load_source(generated.source, sanitize(generated.entry))
    for n, v in generated.injected.items():
        setattr(module, n, v)
    return module


def flat_leaves(info, specs):
    """[(flat name, AType)] of every non-static leaf, in parameter order."""
    out = []
    for pname in param_names(info):
        spec = specs.get(pname, T.UNKNOWN)
        if isinstance(spec, TreeSpec):
            out += spec.leaves(pname)
        elif isinstance(spec, T.AType):
            out.append((pname, spec))
    return out


def batched(typ):
    """The type of a stack of values of type `typ` along a new leading axis."""
    return T.array((T.N,) + tuple(typ.dims or ()), typ.dtype or "float64")


def out_leaves(typ, path=()):
    """[(index path, AType)] of the leaves of a (nested) tuple output type."""
    if typ.kind == "tuple" and typ.elts is not None:
        out = []
        for i, e in enumerate(typ.elts):
            out += out_leaves(e, path + (i,))
        return out
    return [(path, typ)]


def _index(base, path):
    return base + "".join(f"[{i}]" for i in path)


def _dims(var, typ):
    return [f"{var}.shape[{k}]" for k in range(typ.ndim or 0)]


def _shape(parts):
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _size(var, typ):
    if not typ.ndim:
        return "1"
    return f"{var}.shape[0]" if typ.ndim == 1 else f"{var}.size"


class _Basis:
    """Lines that build one identity basis and slice it into per-leaf directions."""

    def __init__(self, lines, namer):
        self.lines = lines
        # the basis's own names (its length, the identity), named apart from the wrapper's
        # other names: a residual of the vjp module called `n` (a loop bound of an emitted
        # helper differentiated as code) was read after `n = out.size` rebound it
        self.namer = namer

    def write(self, leaves, name_of, value_of):
        """Bind `name_of(leaf)` to the basis directions of each (leaf, type); returns the
        (offset, size) text of each leaf's block of rows (offset None: all rows)."""
        lines = self.lines
        if len(leaves) == 1:
            leaf, t = leaves[0]
            var = value_of(leaf)
            if not t.ndim:
                lines.append(f"{name_of(leaf)} = np.ones(1)")
            elif t.ndim == 1:
                lines.append(f"{name_of(leaf)} = np.eye({var}.shape[0])")
            else:
                n = self.namer.fresh("n")
                lines.append(f"{n} = {var}.size")
                shape = _shape([n] + _dims(var, t))
                lines.append(f"{name_of(leaf)} = np.eye({n}).reshape({shape})")
            return [(None, _size(var, t))]
        sizes, blocks, offset = [], [], "0"
        for leaf, t in leaves:
            size = _size(value_of(leaf), t)
            if size != "1":
                size_name = self.namer.fresh(f"n_{leaf}")
                lines.append(f"{size_name} = {size}")
                size = size_name
            blocks.append((offset, size))
            sizes.append(size)
            offset = size if offset == "0" else f"{offset} + {size}"
        n, basis = self.namer.fresh("n"), self.namer.fresh("basis")
        lines.append(f"{n} = {' + '.join(sizes)}")
        lines.append(f"{basis} = np.eye({n})")
        for (leaf, t), (start, size) in zip(leaves, blocks):
            if not t.ndim:
                lines.append(f"{name_of(leaf)} = {basis}[:, {start}]")
                continue
            cols = f"{basis}[:, {_slice(start, size)}]"
            if t.ndim > 1:
                cols += f".reshape({_shape([n] + _dims(value_of(leaf), t))})"
            lines.append(f"{name_of(leaf)} = {cols}")
        return blocks


def _slice(start, size):
    return f":{size}" if start == "0" else f"{start}:{start} + {size}"


def _rows(var, block, typ_rows):
    """The rows of `var` (stacked along axis 0) that belong to one block."""
    start, size = block
    if start is None:
        return var if typ_rows.ndim else f"{var}[0]"
    if not typ_rows.ndim:
        return f"{var}[{start}]"
    return f"{var}[{_slice(start, size)}]"


def _result(out_leaf_exprs, out_type, groups, single):
    """The nested tuple the wrapper returns: output structure, then argument structure."""
    def at(typ, path):
        if typ.kind == "tuple" and typ.elts is not None:
            return "(" + ", ".join(at(e, path + (i,)) for i, e in enumerate(typ.elts)) + \
                ("," if len(typ.elts) == 1 else "") + ")"
        per_arg = []
        for group in groups:
            blocks = [out_leaf_exprs[(path, leaf)] for leaf, _, tree in group]
            if group and not group[0][2]:
                per_arg.append(blocks[0])
            else:
                per_arg.append("(" + ", ".join(blocks) + ("," if len(blocks) == 1 else "") + ")")
        return per_arg[0] if single else "(" + ", ".join(per_arg) + \
            ("," if len(per_arg) == 1 else "") + ")"
    return at(out_type, ())


def _arg_groups(info, specs, argnums):
    """Per argnum: [(leaf, type, is_pytree)] of its float leaves."""
    params = param_names(info)
    groups = []
    for k in argnums:
        check_argnum(info, params, tuple(argnums), k)
        spec = specs[params[k]]
        tree = isinstance(spec, TreeSpec)
        leaves = spec.leaves(params[k]) if tree else [(params[k], spec)]
        groups.append([(leaf, t, tree) for leaf, t in leaves if t.is_float])
    return groups


def _write_module(kind, info, lines, namespace, flat, doc_extra, label=None):
    fname = sanitize(f"{kind}_{info.name}")
    source = "\n".join([f"def {fname}({', '.join(leaf for leaf, _ in flat)}):"] +
                       ["    " + line for line in lines]) + "\n"
    wrapper = source_function(source, fname, namespace)
    generated = build_primal(wrapper, dict(flat), entry_name=fname)
    text = generated.source.split("\n")
    # The docstring names the user's function; the wrapper's lines need no comments quoting
    # them (they are our lines, not the user's).
    title, where = label or (f"{kind}({info.name}{doc_extra})", info.filename)
    what = "jvp" if kind == "jacfwd" else "vjp"
    text[0] = (f'"""{title}, generated by autodiff-ast from {os.path.basename(where)}: '
               f"vmap of the {what} module.")
    start = text.index(next(line for line in text if line.startswith(f"def {fname}(")))
    kept = text[:start] + [line for line in text[start:] if not line.strip().startswith("#")]
    generated.source = "\n".join(kept)
    return generated


def _check_float_out(info, typ, kind):
    for _, t in out_leaves(typ):
        if t.kind == "list":
            raise NonFloatOutputError(
                f"{kind}({info.name}): the output is a list built at run time (its length is "
                "not known when the Jacobian's code is written)", filename=info.filename,
                lineno=info.file_line(info.node), code=info.source_line(info.node),
                hint="return np.array(the list), or a tuple or list display of fixed length "
                     "(`return [a, b]`)")
        if not t.is_float:
            raise NonFloatOutputError(f"{kind}({info.name}) needs real floating-point "
                                      f"outputs, got {T.describe(t)}",
                                      filename=info.filename, lineno=info.file_line(info.node),
                                      code=info.source_line(info.node))


def build_jacfwd(fn, specs, argnums, has_aux=False, label=None):
    """The module of ``jacfwd(fn, argnums)``: one forward pass of every basis tangent."""
    from .batching import vmap
    info = parse_function(fn)
    jvp_mod = build_jvp(fn, specs, has_aux=has_aux, argnums=argnums)
    entry = getattr(load(jvp_mod), jvp_mod.entry)
    layout = jvp_mod.layout
    flat = flat_leaves(info, specs)
    groups = _arg_groups(info, specs, argnums)
    active = [(leaf, t) for g in groups for leaf, t, _ in g]
    out_type = layout["out_type"]
    _check_float_out(info, out_type, "jacfwd")
    dots = layout["dot_params"]
    in_axes = (None,) * len(flat) + (0,) * len(dots)
    out_axes = (None, 0, None) if has_aux else (None, 0)
    bspecs = dict(flat)
    types_ = dict(flat)
    bspecs.update({d: batched(types_[leaf]) for d, leaf in zip(
        dots, [leaf for g in layout["groups"] for leaf in g])})
    batcher = vmap(entry, in_axes=in_axes, out_axes=out_axes)
    vmapped, structure = batcher.flat_entry(list(bspecs), [None] * len(bspecs), bspecs)
    lines = []
    in_order = [leaf for g in layout["groups"] for leaf in g]  # parameter order
    dot_of = dict(zip(in_order, dots))
    # (named apart from the arguments, which the blocks' shapes read after this call)
    namer = Namer({leaf for leaf, _ in flat} | set(dots))
    blocks = _Basis(lines, namer).write(active, lambda leaf: dot_of[leaf], lambda leaf: leaf)
    call = f"{vmapped.__name__}({', '.join([leaf for leaf, _ in flat] + dots)})"
    # The batched function returns the leaves of (out, out_dot[, aux]) one by one.
    roles = ["out", "out_dot", "aux"]
    stems = {role: namer.fresh(role) for role in roles}
    leaf_names = {}
    for role, part in zip(roles, structure):
        for path, _ in _index_paths(part):
            leaf_names[(role, path)] = stems[role] + "".join(
                f"_{i}" for i in _positions(part, path))
    order = sorted(leaf_names, key=lambda key: _index_at(structure, roles.index(key[0]),
                                                         key[1]))
    lines.append(f"{', '.join(leaf_names[k] for k in order)} = {call}")
    aux_expr = _rebuild_text(structure[2], stems["aux"]) if has_aux else None
    exprs = {}
    for path, to in out_leaves(out_type):
        rows_var = leaf_names[("out_dot", path)]
        out_var = leaf_names[("out", path)]
        for (leaf, ti), block in zip(active, blocks):
            rows = _rows(rows_var, block, ti)
            if not ti.ndim:
                block_expr = rows
            elif not to.ndim:
                block_expr = rows if ti.ndim == 1 else \
                    f"{rows}.reshape({_shape(_dims(leaf, ti))})"
            elif to.ndim == 1 and ti.ndim == 1:
                block_expr = f"{rows}.T"
            else:
                block_expr = f"np.moveaxis({rows}, 0, -1)"
                if ti.ndim > 1:
                    block_expr += f".reshape({_shape(_dims(out_var, to) + _dims(leaf, ti))})"
            exprs[(path, leaf)] = block_expr
    result = _result(exprs, out_type, groups, layout_single(argnums))
    lines.append(f"return {result}, {aux_expr}" if has_aux else f"return {result}")
    namespace = {"np": __import__("numpy"), vmapped.__name__: vmapped}
    generated = _write_module("jacfwd", info, lines, namespace, flat, _options(argnums),
                              label)
    generated.layout.update({"out_type": out_type, "aux": has_aux,
                             "dicts": layout.get("dicts")})
    return generated


def _index_paths(part, path=()):
    """[(path, flat index)] of a placeholder pytree of output indices (nested tuples, and
    dicts: an aux dict), a path holding positions and keys."""
    if isinstance(part, (tuple, list)):
        out = []
        for i, sub in enumerate(part):
            out += _index_paths(sub, path + (i,))
        return out
    if isinstance(part, dict):
        out = []
        for key, sub in part.items():
            out += _index_paths(sub, path + (key,))
        return out
    return [(path, part)]


def _positions(part, path):
    """`path` with each dict key replaced by its position (for names of the leaves)."""
    out = []
    for key in path:
        out.append(list(part).index(key) if isinstance(part, dict) else key)
        part = part[key]
    return out


def _index_at(structure, role, path):
    part = structure[role]
    for i in path:
        part = part[i]
    return part


def _rebuild_text(part, base, path=()):
    """Source rebuilding a nested tuple (or dict) from the leaf names ``base_i_j`` (a dict's
    entries numbered by position)."""
    if isinstance(part, (tuple, list)):
        items = [_rebuild_text(sub, base, path + (i,)) for i, sub in enumerate(part)]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(part, dict):
        return "{" + ", ".join(f"{key!r}: {_rebuild_text(sub, base, path + (i,))}"
                               for i, (key, sub) in enumerate(part.items())) + "}"
    return base + "".join(f"_{i}" for i in path)


def layout_single(argnums):
    return getattr(argnums, "single", len(argnums) == 1)


class Argnums(tuple):
    """argnums as a tuple, remembering whether the user gave one int (JAX's output nesting)."""

    def __new__(cls, nums, single):
        obj = super().__new__(cls, nums)
        obj.single = single
        return obj


def _options(argnums):
    if layout_single(argnums) and argnums == (0,):
        return ""
    text = argnums[0] if layout_single(argnums) else tuple(argnums)
    return f", argnums={text}"


def _flat_outputs(fn, info, specs):
    """(fn wrapped to return the leaves of its nested tuple output, the output's type, each
    leaf's index path, the spec of the dicts it returns), or None when no output is nested
    (``return a, (b, c)`` is nested, and so is ``return a, {"b": b}``: a dict output is the
    tuple of its values)."""
    core = normalize_into(Program(), info, specs, called=True)
    typ, dicts = core.return_type, returned_dicts(core)
    leaves = out_leaves(typ)
    if all(len(path) <= 1 for path, _ in leaves):
        return None
    params = param_names(info)
    fname = sanitize(f"leaves_of_{info.name}")
    reads = ", ".join("out" + _subscripts(path, dicts) for path, _ in leaves)
    source = (f"def {fname}({', '.join(params)}):\n"
              f"    out = {sanitize(info.name)}({', '.join(params)})\n"
              f"    return ({reads},)\n")
    wrapper = source_function(source, fname, {sanitize(info.name): fn, "__name__":
                                              getattr(fn, "__module__", None) or "__main__"})
    return wrapper, typ, [path for path, _ in leaves], dicts


def _subscripts(path, dicts):
    """``[0]['b']``: the reads of the output leaf at `path` (positions), a dict's entry read
    by its key (`dicts`: codegen/dict_outputs.py's spec of the output)."""
    text = ""
    for i in path:
        if dicts is not None and dicts[0] == "dict":
            text += f"[{dicts[1][i]!r}]"
            dicts = dicts[2][i]
        else:
            text += f"[{i}]"
            dicts = None if dicts is None else dicts[1][i]
    return text


def build_jacrev(fn, specs, argnums, has_aux=False, label=None):
    """The module of ``jacrev(fn, argnums)``: one forward pass, then one backward pass of
    every basis cotangent. A nested output (``return a, (b, c)``) is differentiated as the
    tuple of its leaves, and the blocks are nested back."""
    from .batching import vmap
    info = parse_function(fn)
    nested = None if has_aux else _flat_outputs(fn, info, specs)
    if nested is not None:
        generated = build_jacrev(nested[0], specs, argnums, label=label or (
            f"jacrev({info.name}{_options(argnums)})", info.filename))
        return _nest_blocks(generated, info, specs, argnums, nested, label)
    with code_to_transform():  # read again below (its types) and batched by vmap
        vjp_mod = build_vjp(fn, specs, has_aux=has_aux, argnums=tuple(argnums))
    module = load(vjp_mod)
    fwd = getattr(module, vjp_mod.entry)
    bwd = getattr(module, vjp_mod.extra["bwd"])
    layout = vjp_mod.layout
    flat = flat_leaves(info, specs)
    groups = _arg_groups(info, specs, argnums)
    active = [(leaf, t) for g in groups for leaf, t, _ in g]
    fwd_types = normalize(parse_function(fwd), dict(flat), Program()).return_type
    n_res = layout["residuals"]
    n_lead = 2 if has_aux else 1
    if n_res or has_aux:
        out_type = fwd_types.elts[0]
        res_types = list(fwd_types.elts[n_lead:])
    else:
        out_type, res_types = fwd_types, []
    _check_float_out(info, out_type, "jacrev")
    outs = out_leaves(out_type)
    if any(len(path) > 1 for path, _ in outs):
        raise NotImplementedError("jacrev(..., has_aux=True) of a function whose output is a "
                                  "nested tuple is not supported yet")
    bwd_names = list(inspect.signature(bwd).parameters)
    n_params = len(layout["bwd_params"])
    res_names = bwd_names[n_params:n_params + n_res]
    seeds = bwd_names[n_params + n_res:]
    lines = []
    # the output's name, not a residual's or an argument's (a residual called `out` took
    # its place: np.eye of the residual's length was the basis)
    taken = Namer(set(res_names) | set(layout["bwd_params"]) | set(seeds) |
                  {leaf for leaf, _ in flat})
    out_name = taken.fresh("out")
    aux_name = taken.fresh("aux")
    results = [out_name] + ([aux_name] if has_aux else []) + res_names
    call = f"{fwd.__name__}({', '.join(leaf for leaf, _ in flat)})"
    lines.append(f"{', '.join(results)} = {call}")
    bars = [f"{leaf}_bar" for g in layout["groups"] for leaf in g]  # parameter order
    namespace = {"np": __import__("numpy"), fwd.__name__: fwd}
    if len(outs) == 1 and not outs[0][1].ndim:
        # One output cotangent: the basis is the number 1.0 and the backward function runs
        # once as it is (a vmap over one direction would only add an axis of size one).
        args = layout["bwd_params"] + res_names + ["1.0"]
        lines.append(f"{', '.join(bars)} = {bwd.__name__}({', '.join(args)})")
        namespace[bwd.__name__] = bwd
        exprs = {((), leaf): f"{leaf}_bar" for leaf, _ in active}
        result = _result(exprs, out_type, groups, layout_single(argnums))
        lines.append(f"return {result}, {aux_name}" if has_aux else f"return {result}")
        generated = _write_module("jacrev", info, lines, namespace, flat, _options(argnums),
                                  label)
        generated.layout.update({"out_type": out_type, "aux": has_aux,
                                 "dicts": layout.get("dicts")})
        return generated
    types_ = dict(flat)
    bspecs = {p: types_[p] for p in layout["bwd_params"]}
    bspecs.update(dict(zip(res_names, res_types)))
    bspecs.update({s: batched(t) for s, (_, t) in zip(seeds, outs)})
    in_axes = (None,) * (n_params + n_res) + (0,) * len(seeds)
    vmapped = vmap(bwd, in_axes=in_axes, out_axes=0).function_for(bspecs)
    out_values = [_index(out_name, path) if len(outs) > 1 or out_type.kind == "tuple" else
                  out_name for path, _ in outs]
    seed_leaves = [(s, t) for s, (_, t) in zip(seeds, outs)]
    value_of = dict(zip(seeds, out_values))
    for bar in bars:
        taken.reserve(bar)
    blocks = _Basis(lines, taken).write(seed_leaves, lambda s: s, lambda s: value_of[s])
    args = layout["bwd_params"] + res_names + seeds
    lines.append(f"{', '.join(bars)} = {vmapped.__name__}({', '.join(args)})")
    exprs = {}
    for (path, to), out_var, block in zip(outs, out_values, blocks):
        for leaf, ti in active:
            rows = _rows(f"{leaf}_bar", block, to)
            if (to.ndim or 0) <= 1:
                block_expr = rows
            else:
                block_expr = f"{rows}.reshape({_shape(_dims(out_var, to) + _dims(leaf, ti))})"
            exprs[(path, leaf)] = block_expr
    result = _result(exprs, out_type, groups, layout_single(argnums))
    lines.append(f"return {result}, {aux_name}" if has_aux else f"return {result}")
    namespace[vmapped.__name__] = vmapped
    generated = _write_module("jacrev", info, lines, namespace, flat, _options(argnums),
                              label)
    generated.layout.update({"out_type": out_type, "aux": has_aux,
                             "dicts": layout.get("dicts")})
    return generated


def _nest_blocks(flat_module, info, specs, argnums, nested, label):
    """The module of jacrev of a nested output: the flat leaves' jacrev module, called and its
    blocks nested as the output is."""
    _, out_type, paths, dicts = nested
    flat = flat_leaves(info, specs)
    inner = getattr(load(flat_module), flat_module.entry)
    groups = _arg_groups(info, specs, argnums)
    names = [f"block_{k}" for k in range(len(paths))]
    lines = [f"{', '.join(names)}, = {inner.__name__}({', '.join(leaf for leaf, _ in flat)})"]
    exprs = {}
    single = layout_single(argnums)
    for block, path in zip(names, paths):
        for g, group in enumerate(groups):
            for j, (leaf, _, tree) in enumerate(group):
                where = block if single else f"{block}[{g}]"
                exprs[(path, leaf)] = f"{where}[{j}]" if tree else where
    lines.append(f"return {_result(exprs, out_type, groups, single)}")
    namespace = {"np": __import__("numpy"), inner.__name__: inner}
    generated = _write_module("jacrev", info, lines, namespace, flat, _options(argnums),
                              label)
    generated.layout.update({"out_type": out_type, "aux": False, "dicts": dicts})
    return generated


__all__ = ["build_jacfwd", "build_jacrev", "Argnums", "flat_leaves", "out_leaves", "load"]
