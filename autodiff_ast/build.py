"""Building generated modules: from a user function and an abstract signature to source text.

This is where the passes meet: parse (frontend) -> normalize -> reverse -> tidy -> emit.
:func:`build_reverse` writes the module for ``grad``/``value_and_grad`` (one combined function)
or for ``vjp`` (a forward function that keeps residuals and a backward function).

>>> import numpy as np
>>> from autodiff_ast.normalize import spec_of
>>> def f(x):
...     return np.sum(x * x)
>>> mod = build_reverse(f, {"x": spec_of(np.ones(3))}, argnums=(0,))
>>> print(mod.source.split("\\n\\n\\n")[1], end="")
def grad_f(x):
    # return np.sum(x * x)
    x_bar = 2.0 * x
    return x_bar
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from dataclasses import dataclass, field

import gast

from codegen.dict_outputs import flatten_returned_dicts
from codegen.emit import (
    blank,
    comment,
    function,
    is_marker,
    names_bound,
    render_function,
    render_module,
)
from codegen.fused_updates import ADD_HELPERS
from codegen.helpers import helper_source
from codegen.param_writes import dotted_name, numpy_writes_first_argument

from . import types as T
from .errors import ArgnumsError, NonFloatInputError, UnsupportedSyntaxError
from .frontend import parse_function
from .normalize import Program, Static, TreeSpec, normalize_into
from .reverse import SplitRegistry, _returned_names, _zero_of, reverse
from .rules.batching import replace_names
from .templates import assign, fill, name, to_expr, unparse
from .tidy import tidy_block


@dataclass
class Generated:
    """A generated module's source and how to call it."""

    source: str
    entry: str  # the main function's name
    injected: dict = field(default_factory=dict)  # names the loader must define in the module
    layout: dict = field(default_factory=dict)  # what the entry function returns
    extra: dict = field(default_factory=dict)


def param_names(info):
    args = info.node.args
    return [a.id for a in list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs)]


def _leaves(pname, spec):
    if isinstance(spec, TreeSpec):
        return [flat for flat, _ in spec.leaves(pname)]
    return [pname]


def check_argnum(info, params, argnums, i):
    """Raise ArgnumsError, naming the function's line, unless `i` (one of `argnums`) is the
    position of one of `params`."""
    if not isinstance(i, int) or not -len(params) <= i < len(params):
        raise ArgnumsError(
            f"argnums {argnums!r} names argument {i}, but {info.name} takes "
            f"{len(params)} argument(s): {', '.join(params) or 'none'}",
            filename=info.filename, lineno=info.file_line(info.node),
            hint=f"use an argnums between 0 and {len(params) - 1}")


def active_leaves(info, specs, argnums):
    """Flat names of the differentiated leaves, per argnum; checks argnums and float inputs."""
    params = param_names(info)
    result = []
    for i in argnums:
        check_argnum(info, params, argnums, i)
        pname = params[i]
        spec = specs.get(pname, T.UNKNOWN)
        leaves = _leaves(pname, spec)
        leaf_types = spec.leaves(pname) if isinstance(spec, TreeSpec) else [(pname, spec)]
        for flat, t in leaf_types:
            if not getattr(t, "is_float", False):  # a Static (None, a string...) too
                raise non_float_input("grad", pname, flat, t, info.filename,
                                      info.file_line(info.node))
        result.append(leaves)
    return result


def non_float_input(transform, pname, flat, t, filename, lineno):
    """The :class:`NonFloatInputError` for differentiating argument `pname` (its leaf `flat`,
    of type `t`): an integer, boolean, complex or otherwise non-float value, or a float
    that jit's static_argnums/static_argnames made a constant of the compiled code."""
    leaf = f"leaf {flat} " if flat != pname else ""
    if isinstance(t, Static) and isinstance(t.value, float):
        return NonFloatInputError(
            f"{transform} differentiates argument {pname!r} {leaf}but jit's static_argnums/"
            f"static_argnames make it a constant of the compiled code ({t.value!r}), which "
            "has no derivative", filename=filename, lineno=lineno,
            hint=f"leave {pname} out of static_argnums/static_argnames (jit compiles a float "
                 "argument once for all its values), or out of argnums")
    dtype = getattr(t, "dtype", None)
    what = "complex" if dtype and "complex" in dtype else (
        dtype or getattr(t, "kind", None) or type(getattr(t, "value", t)).__name__)
    return NonFloatInputError(
        f"{transform} requires real floating-point inputs, but argument {pname!r} {leaf}"
        f"is {what}", filename=filename, lineno=lineno,
        hint="pass floats (e.g. x.astype(float) or 1.0 instead of 1), or leave this argument "
             "out of argnums")


def _copy_nodes(value):
    """`value` with every gast node and list in it copied; other attributes (a statement's
    primitive, its origin) are shared.

    >>> stmt = gast.parse("y = x * 2.0").body[0]
    >>> twin = _copy_nodes(stmt)
    >>> twin.value is not stmt.value and unparse(twin) == unparse(stmt)
    True
    """
    if isinstance(value, gast.AST):
        new = type(value).__new__(type(value))
        new.__dict__.update({k: _copy_nodes(v) for k, v in value.__dict__.items()})
        return new
    if type(value) is list:
        return [_copy_nodes(v) for v in value]
    return value


def _spellings(tree):
    """The identifiers, attribute names and strings in `tree` (what its source text spells
    besides keywords, operators and numbers)."""
    for node in gast.walk(tree):
        if isinstance(node, gast.Name):
            yield node.id
        elif isinstance(node, gast.Attribute):
            yield node.attr
        elif isinstance(node, gast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, (gast.FunctionDef, gast.alias, gast.keyword)):
            yield getattr(node, "name", None) or getattr(node, "arg", None) or ""


def _zero(param, t):
    if t.kind == "float":
        return fill("0.0")
    if t.kind == "list":  # a list's adjoint is a list of its elements' adjoints
        return fill("[0.0] * len(p)", p=param)
    if t.kind == "tuple" and t.elts is not None:  # a tuple of its elements' zeros
        return _zero_of(name(param) if isinstance(param, str) else param, t)
    return fill("np.zeros_like(p)", p=param)


def _with_comments(stmts, info):
    """Statements with a comment before each block quoting the source line it came from."""
    out, last = [], None
    for stmt in stmts:
        origin = getattr(stmt, "origin", None)
        if origin is not None and origin is not last:
            text = info.source_line(origin)
            if text:
                out.append(comment(text))
            last = origin
        out.append(stmt)
    return out


def _bar_exprs(sweep, core):
    out = []
    for p, expr in zip(sweep.active_params, sweep.param_bars):
        out.append(to_expr(expr) if expr is not None else _zero(p, core.types.get(p, T.UNKNOWN)))
    return out


def _returned_bar_names(exprs):
    return {e.id for e in exprs if isinstance(e, gast.Name)}


def _written_into(stmts):
    """Names of the arrays `stmts` (and everything nested in them) write into: subscript
    targets and the first argument of the in-place calls."""
    written = set()
    for stmt in stmts:
        for node in gast.walk(stmt):
            if isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Store):
                base = node.value
                while isinstance(base, gast.Subscript):
                    base = base.value
                if isinstance(base, gast.Name):
                    written.add(base.id)
            elif isinstance(node, gast.Call) and node.args and \
                    isinstance(node.args[0], gast.Name) and _writes_first_argument(node.func):
                written.add(node.args[0].id)
    return written


def _writes_first_argument(func):
    """Whether a call of `func` writes into its first argument (the dialect's add helpers and
    NumPy's writing functions)."""
    called = dotted_name(func) or ""
    return called in ADD_HELPERS or numpy_writes_first_argument(called)


_LIST_CHANGES = ("pop", "append", "extend", "insert", "remove", "clear", "reverse", "sort")


def _lists_changed(stmts):
    """Names of the lists `stmts` change through their methods (the backward sweep pops the
    lists the forward sweep appended to)."""
    return {node.func.value.id for stmt in stmts for node in gast.walk(stmt)
            if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and
            node.func.attr in _LIST_CHANGES and isinstance(node.func.value, gast.Name)}


def _captured_outputs(returns, backward, namer, forward=()):
    """(statements, returns): the value and aux outputs in `returns` read as the forward
    sweep left them. The backward sweep restores the names it taped (``s = s_tape[i]``), the
    array elements it saved before overwriting, and pops the lists the forward sweep appended
    to, so a returned name the backward sweep binds is copied to a new name first (``s_out =
    s``), an array it writes into is copied whole (``y_out = np.copy(y)``), a list it pops is
    copied (``hist_out = list(hist)``), and a dict or tuple display the forward sweep built
    from such names (an aux dict, ``returned = {'hist': hist}``) is built again from the
    copies; the other outputs are returned as they are."""
    bound, written = names_bound(backward), _written_into(backward)
    popped = _lists_changed(backward)

    def copied(n):
        if n in popped:
            return fill("list(v)", v=name(n))
        return fill("np.copy(v)", v=name(n)) if n in written else name(n)
    changing = bound | written | popped
    displays = _last_displays(forward)
    captured, stmts = {}, []
    for expr in returns:
        for node in gast.walk(expr):
            if not isinstance(node, gast.Name) or node.id in captured:
                continue
            display = displays.get(node.id)
            inner = sorted({n.id for n in gast.walk(display) if isinstance(n, gast.Name)}
                           & changing) if display is not None else []
            if inner and node.id not in changing:  # a display holding changing names
                captured[node.id] = namer.fresh(f"{node.id}_out")
                value = replace_names(_copy_nodes(display), {n: copied(n) for n in inner})
                stmts.append(assign(captured[node.id], value))
            elif node.id in changing:
                captured[node.id] = namer.fresh(f"{node.id}_out")
                stmts.append(assign(captured[node.id], copied(node.id)))
    if not captured:
        return [], returns
    renamed = {old: name(new) for old, new in captured.items()}
    return stmts, [replace_names(_copy_nodes(expr), renamed) for expr in returns]


def _last_displays(forward):
    """name -> the dict, tuple or list display the top-level statements `forward` last bind
    it to, when no later statement rebinds a name the display reads."""
    out, decided, bound_later = {}, set(), set()
    for stmt in reversed(forward):
        bound = names_bound([stmt])
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name) and \
                isinstance(stmt.value, (gast.Dict, gast.Tuple, gast.List)) and \
                stmt.targets[0].id not in decided:
            read = {n.id for n in gast.walk(stmt.value) if isinstance(n, gast.Name)}
            if not read & bound_later:
                out[stmt.targets[0].id] = stmt.value
        decided |= bound
        bound_later |= bound
    return out


class ModuleBuilder:
    """Collects the functions of one generated module and renders it."""

    def __init__(self, program, registry):
        self.program = program
        self.registry = registry
        self.functions = []  # gast FunctionDefs in emission order
        self.helpers = set()
        self.emitted_primals = set()

    def add_splits(self):
        """Forward/backward pairs of every helper function the main sweep called."""
        done = set()
        while True:
            pending = [k for k, v in self.registry.pairs.items() if k not in done and v]
            if not pending:
                return
            for key in pending:
                done.add(key)
                split = self.registry.pairs[key]
                self.functions.extend(split_functions(split))
                self.helpers |= split.sweep.helpers

    def add_primals(self):
        """Primal copies of helpers that generated code still calls as they are."""
        cores = {core.name: core for core in self.program.functions.values()
                 if core is not None and core.body is not None}
        changed = True
        while changed:
            changed = False
            called = set()
            for fn in self.functions:
                for node in gast.walk(fn):
                    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name):
                        called.add(node.func.id)
            for fname in sorted(called & set(cores) - self.emitted_primals):
                core = cores[fname]
                # tidying rewrites statements in place, and the helper's forward function
                # (built already) holds the same statements: tidy copies of them
                body = tidy_block(_copy_nodes(core.body), keep=set(_returned_names(core)),
                                  temps=core.namer)
                self.functions.insert(0, function(core.name, core.params, body, core.returns,
                                                  doc=None))
                self.emitted_primals.add(fname)
                owner = self.program.custom_primals.get(fname)
                if owner is not None:  # (its text names the rule: custom.emitted_primal)
                    from .custom import note_emitted_primal
                    note_emitted_primal(render_function(self.functions[0]), owner)
                changed = True

    def imports_and_data(self, standalone_module=None):
        """Import lines and the data the loader injects (when not importable)."""
        # Rendering every function only to look for "math." is slow: do it only when some name,
        # attribute or string could spell one of the two words looked for.
        words = ("math", "collectives", "deepcopy")
        text = "\n".join(unparse(f) for f in self.functions) if any(
            any(w in s for w in words) for f in self.functions for s in _spellings(f)) else ""
        imports = ["import numpy as np"]
        if "math." in text:
            imports.insert(0, "import math")
        if "copy.deepcopy(" in text:  # a vmap loop's own copy of each example's tapes
            imports.insert(0, "import copy")
        if "collectives." in text:  # psum & co. (only meaningful inside pmap/vmap)
            imports.append("from autodiff_ast import collectives")
        injected = {}
        from_lines = []
        used = {n.id for f in self.functions for n in gast.walk(f) if isinstance(n, gast.Name)}
        for emitted, (module, attr, value) in sorted(self.program.data.items()):
            if emitted not in used:  # data of code that tidying removed
                continue
            importable = module and module != "__main__" and module in sys.modules and \
                getattr(sys.modules[module], "__file__", None) and \
                all(part.isidentifier() for part in module.split("."))  # (not runpy's
            # "<run_path>", say: an import line cannot name it; its data is injected)
            if importable or (module and module == standalone_module):
                line = f"from {module} import {attr}" + (f" as {emitted}" if attr != emitted
                                                        else "")
                from_lines.append(line)
            else:
                injected[emitted] = value
        imports += sorted(from_lines)
        for emitted in sorted(injected):
            module = self.program.data[emitted][0]
            where = f"module {module}" if module else "a closure or a computed value"
            main = sys.modules.get("__main__")
            if module == "__main__" and getattr(main, "__file__", None):
                where = os.path.basename(main.__file__) + ", run as a script"
            imports.append(f"# {emitted}: data from {where}; the loader sets it.")
        return imports, injected


def split_functions(split):
    """The forward and backward FunctionDefs of a helper's split."""
    sweep = split.sweep
    core = sweep.core
    functions = []
    if split.residuals:
        returns = [to_expr(core.returns)] + [name(r) for r in split.residuals]
        functions.append(function(
            split.fwd_name, core.params, sweep.forward, returns,
            doc=f"{core.info.name} ({_where(core.info)}), keeping what its backward pass reads."))
    bars = _bar_exprs(sweep, core)
    params = split.bwd_params + split.residuals + sweep.seeds
    body = _with_comments(sweep.backward, core.info)
    functions.append(function(split.bwd_name, params, body, bars))
    return functions


def _where(info):
    line = info.file_line(info.node)
    return f"{os.path.basename(info.filename)}:{line}"


def prepare(fn, specs, program=None, flat_dicts=False, dict_outputs=False):
    """`fn` parsed, and normalized for `specs`: (info, program, entry core function).

    With flat_dicts=True the dict displays `fn` returns are returned as tuples of their
    values (codegen/dict_outputs.py: vmap's per-example loop rebuilds them outside). With
    dict_outputs=True every dict it returns (a display, a dict built entry by entry, a
    helper's or a gradient's) is returned as the tuple of its values, as for a call from
    another function: :func:`returned_dicts` gives the spec that rebuilds them.

    When jit asked for small vectors as scalars (:func:`scalarizing`), the program returned is
    the rewritten one (autodiff_ast/scalarize.py, then autodiff_ast/inline_calls.py for the
    calls made in loops, then autodiff_ast/vector_loops.py for the vector arithmetic in loops
    left); `info` stays the user's function either way.
    """
    wanted = _SCALARIZE.get()
    if wanted:
        _SCALARIZE.set(False)  # only the outermost function of this build
    info = parse_function(fn)
    if flat_dicts:  # (the parse is this call's own: its tree may change)
        flatten_returned_dicts(info.node, [info.node])
    program = program or Program(reserved={"np", "math", "unbroadcast"})
    core = normalize_into(program, info, specs, core_name=info.name, called=dict_outputs)
    from .scalarize import calls_custom_rules
    if wanted and not calls_custom_rules(program):
        from .inline_calls import inline_calls
        from .scalarize import rebuild, scalarize
        from .vector_loops import vector_loops
        hints = wanted if isinstance(wanted, dict) else None
        # small vectors as scalars, helpers on arrays called in loops written in, then what
        # is left of vector arithmetic in loops. The scalars scalarize makes up are
        # temporaries of the rebuilt program (an LJ energy written with 3-vectors: 654 ->
        # 524 us per gradient); the names of the other two stay named values (as
        # temporaries, ADBench's LSTM gradient went from 4.25 to 4.71 ms).
        for rewrite, made_up in ((lambda p, c: scalarize(p, c, hints), True),
                                 (inline_calls, False), (vector_loops, False)):
            text = rewrite(program, core)
            rebuilt = rebuild(program, core, text, made_up) if text is not None else None
            if rebuilt is not None:
                program, core = rebuilt
        for cf in program.functions.values():  # (reverse.py: loop stacks of saved numbers)
            cf.for_compiled_code = True
    return info, program, core


def returned_dicts(core):
    """The spec (codegen/dict_outputs.py) that rebuilds the dicts `core`, normalized with
    dict_outputs=True, returns as tuples of their values; None when it returns none."""
    def entry(keys):
        return ["dict", list(keys), [None] * len(keys)]
    if core.nested_dicts is not None:
        return core.nested_dicts
    if core.dict_keys is not None:
        return entry(core.dict_keys)
    if core.tuple_dicts is not None:
        return ["tuple", [None if keys is None else entry(keys) for keys in core.tuple_dicts]]
    return None


_SCALARIZE = contextvars.ContextVar("autodiff_ast_scalarize", default=False)


@contextlib.contextmanager
def scalarizing(hints=None):
    """Within this block, the next :func:`prepare` keeps small vectors as scalars (jit);
    `hints` maps parameters to the length of their small last axis (the module is compiled
    for those lengths)."""
    token = _SCALARIZE.set(dict(hints) if hints else True)
    try:
        yield
    finally:
        _SCALARIZE.reset(token)


def _signature_line(info, specs):
    parts = []
    for pname in param_names(info):
        spec = specs.get(pname, T.UNKNOWN)
        if isinstance(spec, TreeSpec):
            leaves = ", ".join(f"{k}: {T.describe(t)}" for k, t in spec.leaves(pname))
            parts.append(f"{pname}: {spec.kind}({leaves})")
        elif isinstance(spec, T.AType):
            parts.append(f"{pname}: {T.describe(spec)}")
        else:
            parts.append(f"{pname}: static")
    return ", ".join(parts)


def build_reverse(fn, specs, argnums=(0,), has_aux=False, with_value=False, entry_name=None,
                  standalone_module=None, argnums_text=None):
    """The module of ``grad`` / ``value_and_grad`` of `fn` for this abstract signature."""
    info, program, core = prepare(fn, specs)
    groups = active_leaves(info, specs, argnums)
    active = [leaf for group in groups for leaf in group]
    if len(set(active)) != len(active):
        raise ArgnumsError(f"argnums {argnums!r} names an argument twice",
                           filename=info.filename, lineno=info.file_line(info.node),
                           hint="list each argument once")
    if has_aux and not (isinstance(core.returns, gast.Tuple) and len(core.returns.elts) == 2):
        raise UnsupportedSyntaxError(
            "has_aux=True needs the function to return a pair (output, aux)",
            filename=info.filename, lineno=info.file_line(core.return_node),
            code=info.source_line(core.return_node), hint="return loss, aux")
    registry = SplitRegistry(program)
    sweep = reverse(core, active, registry=registry, seed="grad",
                    output_index=0 if has_aux else None)
    bars = _bar_exprs(sweep, core)
    outputs = core.returns.elts if isinstance(core.returns, gast.Tuple) else [core.returns]
    returns = []
    if with_value:
        returns.append(to_expr(outputs[0]))
    if has_aux:
        returns.append(to_expr(outputs[1]))
    for stmt in sweep.backward:
        stmt.backward = True
    keep = _returned_bar_names(bars) | {n.id for r in returns for n in gast.walk(r)
                                        if isinstance(n, gast.Name)}
    # One block, so that cheap forward temporaries may be recomputed where the backward sweep
    # reads them instead of being stored.
    block = tidy_block(list(sweep.forward) + list(sweep.backward), keep=keep, temps=core.namer)
    forward = [s for s in block if not getattr(s, "backward", False)]
    backward = [s for s in block if getattr(s, "backward", False)]
    captures, returns = _captured_outputs(returns, backward, core.namer, forward)
    body = list(forward) + captures
    if forward and backward:
        body.append(blank())
    body += _with_comments(backward, core.info)
    prefix = "value_and_grad" if with_value else "grad"
    entry = entry_name or program.module_names.fresh(f"{prefix}_{info.name}")
    main = function(entry, core.params, body, returns + bars)
    builder = ModuleBuilder(program, registry)
    builder.add_splits()
    builder.functions.append(main)
    builder.helpers |= sweep.helpers
    builder.add_primals()
    imports, injected = builder.imports_and_data(standalone_module)
    arg_text = argnums_text or (argnums[0] if len(argnums) == 1 else argnums)
    options = f"argnums={arg_text}" + (", has_aux=True" if has_aux else "")
    doc = (f"{prefix}({info.name}, {options}), generated by autodiff-ast from "
           f"{os.path.basename(info.filename)}.\n\n{_signature_line(info, specs)}.\n"
           "Regenerate instead of editing.\n")
    helpers = helper_source(builder.helpers)
    functions = [f for f in builder.functions]
    source = render_module(doc, imports, helpers, functions)
    layout = {"value": with_value, "aux": has_aux, "groups": groups}
    return Generated(source, entry, injected, layout)


def build_vjp(fn, specs, has_aux=False, standalone_module=None, argnums=None):
    """The module of ``vjp``: ``<f>_fwd`` returns the output(s) and residuals, ``<f>_bwd``
    takes the residuals and output cotangent(s) and returns every float input's adjoint
    (only those of the arguments in `argnums` when given: jacrev asks for them)."""
    # a dict output is returned as the tuple of its values; its cotangent is flattened alike
    info, program, core = prepare(fn, specs, dict_outputs=not has_aux)
    params = param_names(info)
    groups = []
    for k, pname in enumerate(params):
        spec = specs.get(pname, T.UNKNOWN)
        leaf_types = spec.leaves(pname) if isinstance(spec, TreeSpec) else [(pname, spec)]
        wanted = argnums is None or k in argnums
        groups.append([flat for flat, t in leaf_types
                       if wanted and isinstance(t, T.AType) and t.is_float])
    active = [leaf for g in groups for leaf in g]
    registry = SplitRegistry(program)
    sweep = reverse(core, active, registry=registry, seed="split",
                    output_index=0 if has_aux else None)
    from .reverse import make_split
    backward = tidy_block(sweep.backward, keep=_returned_bar_names(_bar_exprs(sweep, core)),
                          temps=core.namer, gather=True)
    sweep.backward = backward
    split = make_split(sweep, program)
    if not split.residuals:  # make_split named it `<f>_fwd` already when it keeps residuals
        split.fwd_name = program.module_names.fresh(f"{info.name}_fwd")
    aux_extra = []
    if has_aux:
        aux_extra = [to_expr(core.returns.elts[1])]
    fwd_returns = [to_expr(core.returns.elts[0] if has_aux else core.returns)] + aux_extra + \
        [name(r) for r in split.residuals]
    fwd = function(split.fwd_name, core.params, sweep.forward, fwd_returns)
    bwd_params = split.bwd_params + split.residuals + sweep.seeds
    bwd = function(split.bwd_name, bwd_params, _with_comments(sweep.backward, core.info),
                   _bar_exprs(sweep, core))
    builder = ModuleBuilder(program, registry)
    builder.add_splits()
    builder.functions += [fwd, bwd]
    builder.helpers |= sweep.helpers
    builder.add_primals()
    imports, injected = builder.imports_and_data(standalone_module)
    doc = (f"vjp({info.name}), generated by autodiff-ast from "
           f"{os.path.basename(info.filename)}.\n\n{_signature_line(info, specs)}.\n"
           "Regenerate instead of editing.\n")
    source = render_module(doc, imports, helper_source(builder.helpers), builder.functions)
    layout = {"groups": groups, "residuals": len(split.residuals), "aux": has_aux,
              "bwd_params": split.bwd_params, "params": core.params,
              "n_seeds": len(sweep.seeds), "tuple_out": isinstance(core.returns, gast.Tuple)
              and not has_aux, "dicts": None if has_aux else returned_dicts(core)}
    return Generated(source, split.fwd_name, injected, layout, {"bwd": split.bwd_name})


__all__ = ["build_reverse", "build_vjp", "Generated", "is_marker"]
