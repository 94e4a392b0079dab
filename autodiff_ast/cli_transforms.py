"""What each command-line transform writes for one function: a standalone module's source.

:func:`generate` is the one entry point: ``generate("jacrev", fn, module, options)`` returns a
:class:`Piece` (the module text and the name of its entry function). Every transform goes through
the same builders as the Python API (:mod:`autodiff_ast.build`, :mod:`autodiff_ast.build_forward`,
:mod:`autodiff_ast.jacobians`, :mod:`autodiff_ast.batching`), then the text is made standalone:
data read from the user's module is imported from it by name, never from the modules
autodiff-ast generated on the way (:func:`resolve_generated_imports`).

Argument types are those of FUNC's own parameters (``--signature``, annotations, number
defaults); for ``vmap`` they are the types of one example, and the mapped axes are added.

>>> import numpy as np
>>> def f(x: "float64[N]"):
...     return np.sum(np.sin(x))
>>> piece = generate("jvp", f, None, Options())
>>> piece.entry
'jvp_f'
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import sys
from dataclasses import dataclass, field

from codegen.dict_outputs import rebuilding_expression

from . import types as T
from .normalize import Static
from .signatures import DEFAULT, SignatureError, signature_of

__all__ = ["Options", "Piece", "generate", "COMMANDS", "entry_name", "parse_axes", "options_for",
           "parse_static", "resolve_generated_imports", "TransformError"]

#: The transform commands, in the order the help lists them.
COMMANDS = ("grad", "value-and-grad", "jvp", "vjp", "jacfwd", "jacrev", "hessian", "vmap")


class TransformError(Exception):
    """A problem with the options or the function, reported as one line (`status`: exit)."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


@dataclass
class Options:
    """The options of one transform command, as parsed from the command line."""

    argnums: str | None = None
    has_aux: bool = False
    signature: str | None = None
    static: dict = field(default_factory=dict)
    in_axes: object = 0
    out_axes: object = 0


@dataclass
class Piece:
    """One function's generated module: its text and its entry function's name."""

    source: str
    entry: str
    command: str
    function: str


def entry_name(command, function):
    """The name of the function a command writes for FUNC.

    >>> entry_name("value-and-grad", "loss"), entry_name("hessian", "loss")
    ('value_and_grad_loss', 'hessian_loss')
    """
    return f"{command.replace('-', '_')}_{function}"


# ---------------------------------------------------------------- options
def parse_axes(text):
    """``"0"`` -> 0, ``"None"`` -> None, ``"0,None"`` -> (0, None) (JAX's in_axes/out_axes).

    >>> parse_axes("1"), parse_axes("None"), parse_axes("0,None"), parse_axes("(0, 1)")
    (1, None, (0, None), (0, 1))
    """
    text = (text or "0").strip()
    inner = text[1:-1] if text[:1] in "([" and text[-1:] in ")]" else text
    parts = [p.strip() for p in inner.split(",") if p.strip()]

    def one(part):
        if part in ("None", "none", "-"):
            return None
        if part.lstrip("-").isdigit():
            return int(part)
        raise TransformError(f"axes: {part!r} is neither an int nor None (write e.g. "
                             "--in-axes 0,None)", status=2)
    if "," not in text and len(parts) == 1:
        return one(parts[0])
    return tuple(one(p) for p in parts)


def parse_static(items):
    """``["n=3", "mode='fast'"]`` -> {"n": 3, "mode": "fast"} (Python literals).

    >>> parse_static(["n=3", "mode=fast", "scale=0.5"])
    {'n': 3, 'mode': 'fast', 'scale': 0.5}
    """
    out = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise TransformError(f"--static {item!r}: write NAME=VALUE, e.g. --static n=3",
                                 status=2)
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()  # a bare word: a string
        out[name] = value
    return out


def parse_argnums(text, params):
    """``"0,1"`` (or parameter names, ``"w,b"``) as an int or a tuple of ints.

    >>> parse_argnums("0", ["x", "y"]), parse_argnums("1,x", ["x", "y"])
    (0, (1, 0))
    """
    if text is None:
        return 0
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise TransformError("--argnums: give argument positions, e.g. --argnums 0,1", status=2)
    nums = []
    for part in parts:
        if part.lstrip("-").isdigit():
            nums.append(int(part))
        elif part in params:
            nums.append(params.index(part))
        else:
            raise TransformError(f"--argnums: {part!r} is neither a position nor a parameter "
                                 f"({', '.join(params)})", status=2)
    return nums[0] if len(nums) == 1 and "," not in text else tuple(nums)


def options_for(fn, options):
    """The options of one of several functions: the --signature and --static entries that
    name its own parameters."""
    from .signatures import _split_top_level
    params = set(inspect.signature(fn).parameters)
    parts = [p for p in _split_top_level(options.signature or "")
             if p.partition("=")[0].strip() in params]
    return dataclasses.replace(options, signature=",".join(parts) or None,
                               static={k: v for k, v in options.static.items() if k in params})


def specs_of(fn, options):
    """Abstract types of fn's parameters: --signature, annotations, number defaults, static
    values; else a float64 array of any rank."""
    text = options.signature
    try:
        specs = signature_of(fn, text)
    except SignatureError as exc:
        code = fn.__code__
        raise TransformError(f"--signature: {exc}" if text else f"{code.co_filename}:"
                             f"{code.co_firstlineno}: {exc}", status=2) from None
    given = set()
    if text:
        given = {part.partition("=")[0].strip() for part in text.split(",") if "=" in part}
    for p in inspect.signature(fn).parameters.values():
        default = p.default
        if p.name in given or specs.get(p.name) is not DEFAULT or default is p.empty:
            continue
        if isinstance(default, (int, float)):  # a number default says what the value is
            typ = T.abstract_of(default)
            specs[p.name] = T.AType(typ.kind, typ.dtype)
    unknown = sorted(set(options.static) - set(specs))
    if unknown:
        raise TransformError(f"--static names {', '.join(unknown)}, which {fn.__name__} does "
                             f"not take (it takes {', '.join(specs)})", status=2)
    for name, value in options.static.items():
        specs[name] = Static(value)
    return specs


def _where(fn):
    code = fn.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def _need_ranks(fn, specs, command):
    for name, spec in specs.items():
        if isinstance(spec, T.AType) and spec.kind == "array" and spec.dims is None:
            raise TransformError(
                f"{_where(fn)}: {command} needs the rank of every array argument, and the rank "
                f"of {name} is unknown (hint: give it, --signature \"{name}=float64[N]\" for "
                f"a vector or \"{name}=float64[N,N]\" for a matrix, or an annotation such as "
                f"{name}: \"float64[N,N]\")", status=2)


# ---------------------------------------------------------------- making the text standalone
_GEN_IMPORT = re.compile(r"^from (autodiff_ast_generated\.\w+) import (.+)$", re.M)


def _binding(module_name, name, depth=0):
    """(module, attribute) the name `name` of a generated module was imported from."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if module is None or path is None or depth > 16:
        return None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if (alias.asname or alias.name) == name:
                    if stmt.module.startswith("autodiff_ast_generated."):
                        return _binding(stmt.module, alias.name, depth + 1)
                    return stmt.module, alias.name
    return None


def resolve_generated_imports(source, fn):
    """Replace imports from modules autodiff-ast generated on the way (a Jacobian is built from
    a jvp or vjp module) by imports from where the data really lives."""
    def replace(match):
        lines = []
        for part in match.group(2).split(","):
            name, _, alias = (s.strip() for s in part.partition(" as "))
            bound = alias or name
            found = _binding(match.group(1), name)
            if found is None:
                raise TransformError(
                    f"{_where(fn)}: {fn.__name__} reads {bound}, which the generated module "
                    "cannot import (hint: make it a module-level name of an importable module, "
                    "or pass it as an argument)")
            module, attr = found
            lines.append(f"from {module} import {attr}" + (f" as {bound}" if attr != bound
                                                            else ""))
        return "\n".join(lines)
    return _GEN_IMPORT.sub(replace, source)


def _entry_path(value, container, spelled, depth=0):
    """How `value` is reached from `container` (a dict, list or tuple), spelled from `spelled`
    (``P['w']``, ``LAYERS[1]``), or None."""
    if depth > 4:
        return None
    items = container.items() if isinstance(container, dict) else \
        enumerate(container) if isinstance(container, (list, tuple)) else ()
    for key, item in items:
        here = f"{spelled}[{key!r}]"
        if item is value:
            return here
        if isinstance(item, (dict, list, tuple)):
            found = _entry_path(value, item, here, depth + 1)
            if found:
                return found
    return None


def _check_standalone(generated, fn):
    if not generated.injected:
        return
    module_globals = getattr(fn, "__globals__", {})
    described, entries = [], []
    for emitted, value in sorted(generated.injected.items()):
        found = next((path for holder, held in module_globals.items()
                      if isinstance(held, (dict, list, tuple)) and not holder.startswith("__")
                      for path in [_entry_path(value, held, holder)] if path), None)
        described.append(found or emitted)
        if found:
            entries.append(found)
    if entries:
        first = entries[0]
        raise TransformError(
            f"{_where(fn)}: {fn.__name__} reads {', '.join(described)}, "
            f"{'an entry' if len(described) == 1 else 'entries'} of a "
            "module-level dict, list or tuple; the generated module imports module-level "
            "arrays by name only (hint: bind the entry to a module-level name, "
            f"`{_identifier_for(first)} = {first}`, and read that, or pass it as an argument; "
            "grad(f) in Python takes it as it is)")
    raise TransformError(
        f"{_where(fn)}: {fn.__name__} reads {', '.join(described)}, which the generated module "
        "cannot import (not a module-level name of an importable module) (hint: make it a "
        "module-level name or pass it as an argument)")


def _identifier_for(path):
    """A module-level name for an entry (``P['w']`` -> ``P_w``)."""
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in path)
    return "_".join(part for part in text.split("_") if part)


# ---------------------------------------------------------------- reverse mode (grad, vjp)
def _literal(value):
    return isinstance(value, (int, float, bool, str)) or value is None


def _parameter_list(fn):
    """FUNC's parameters as written in a def line, with literal defaults kept."""
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    keep_defaults = all(_literal(p.default) for p in params if p.default is not p.empty)
    parts, star_done = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        text = p.name
        if keep_defaults and p.default is not p.empty:
            text += f"={p.default!r}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (
                p is params[-1] or params[params.index(p) + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    return ", ".join(parts)


def _with_parameters(source, entry, flat_params, fn):
    """Give the entry function FUNC's own parameter list (defaults, keyword-only markers)."""
    names = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if names != list(flat_params):
        return source
    old = f"def {entry}({', '.join(flat_params)}):"
    new = f"def {entry}({_parameter_list(fn)}):"
    return source.replace(old, new, 1) if source.count(old) == 1 else source


def _vjp_wrapper(generated, fn):
    """``vjp_FUNC(params..., out_bar)`` calling the generated forward and backward functions."""
    tree = ast.parse(generated.source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    fwd, bwd = functions[generated.entry], functions[generated.extra["bwd"]]
    params = generated.layout["params"]
    returned = fwd.body[-1].value
    residuals = []
    if generated.layout["residuals"] and isinstance(returned, ast.Tuple):
        residuals = [ast.unparse(e) for e in returned.elts[1:]]
    taken = set(params) | set(residuals) | set(functions)

    def free(base):
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name
    out = free("out")
    n_seeds = generated.layout["n_seeds"]
    seeds = [free("out_bar")] if n_seeds == 1 else [free(f"out{i}_bar") for i in range(n_seeds)]
    bwd_args = [a.arg for a in bwd.args.args]
    n_bwd_params = len(generated.layout["bwd_params"])
    call_args = bwd_args[:n_bwd_params] + residuals + seeds
    lhs = ", ".join([out] + residuals)
    name = f"vjp_{fn.__name__}"
    dicts = generated.layout.get("dicts")
    what = ", ".join(seeds)
    if dicts is not None:  # a dict's cotangent is the tuple of its values: say in which order
        what += ("\n    (a dict's cotangent as the tuple of its values: the cotangents of " +
                 ", ".join(_leaf_reads("out", dicts)) + ")")
    lines = [
        f"def {name}({', '.join(params + seeds)}):",
        f'    """{fn.__name__}(...) and the cotangents of its inputs for {what}."""',
        f"    {lhs} = {generated.entry}({', '.join(params)})",
        f"    return {rebuilding_expression(out, dicts)}, "
        f"{generated.extra['bwd']}({', '.join(call_args)})",
    ]
    return generated.source + "\n\n" + "\n".join(lines) + "\n", name


def _leaf_reads(base, spec):
    """``out['a']``, ``out[1]['s']``...: how the user reads each leaf of an output whose
    dicts `spec` describes (codegen/dict_outputs.py), in the generated code's order."""
    if spec is None:
        return [base]
    if spec[0] == "tuple":
        return [read for i, s in enumerate(spec[1]) for read in _leaf_reads(f"{base}[{i}]", s)]
    return [read for k, s in zip(spec[1], spec[2]) for read in _leaf_reads(f"{base}[{k!r}]", s)]


def _returning_dicts(source, entry, spec, parts=True):
    """`source` with `entry`'s final ``return (out, out_dot)`` giving both as the dicts the
    user's function returns (the generated code returns a dict as the tuple of its values);
    with parts=False the returned value is itself shaped like the output (a Jacobian)."""
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)
    ret = fn.body[-1]
    if not (isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple)):
        return source
    values = ret.value.elts if parts else [ret.value]
    text = ", ".join(ast.unparse(_dict_display(e, spec)) for e in values)
    lines = source.split("\n")
    indent = lines[ret.lineno - 1][:ret.col_offset]
    lines[ret.lineno - 1:ret.end_lineno] = [indent + "return " + (f"({text})" if parts else text)]
    return "\n".join(lines)


def _dict_display(node, spec):
    """The tuple display `node` with the dicts of `spec` written as dict displays."""
    if spec is None:
        return node
    if not isinstance(node, ast.Tuple):
        return ast.parse(rebuilding_expression(ast.unparse(node), spec), mode="eval").body
    if spec[0] == "tuple":
        return ast.Tuple(elts=[_dict_display(e, s) for e, s in zip(node.elts, spec[1])],
                         ctx=ast.Load())
    return ast.Dict(keys=[ast.Constant(value=k) for k in spec[1]],
                    values=[_dict_display(e, s) for e, s in zip(node.elts, spec[2])])


def _jax_layout(source, entry, with_value, has_aux, single):
    """Rewrite the entry's flat ``return value, aux, g0, g1`` as JAX lays it out:
    ``((value, aux), (g0, g1))``, ``(value, g)``, ``(g, aux)``..."""
    if not (with_value or has_aux or not single):
        return source
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)
    ret = fn.body[-1]
    elts = list(ret.value.elts) if isinstance(ret.value, ast.Tuple) else [ret.value]
    n_extra = int(with_value) + int(has_aux)
    extra, grads = elts[:n_extra], elts[n_extra:]
    grads = grads[0] if single else ast.Tuple(elts=grads, ctx=ast.Load())
    if with_value and has_aux:
        value = ast.Tuple(elts=[ast.Tuple(elts=extra, ctx=ast.Load()), grads], ctx=ast.Load())
    elif with_value:
        value = ast.Tuple(elts=[extra[0], grads], ctx=ast.Load())
    elif has_aux:
        value = ast.Tuple(elts=[grads, extra[0]], ctx=ast.Load())
    else:
        value = grads
    lines = source.split("\n")
    indent = lines[ret.lineno - 1][:ret.col_offset]
    lines[ret.lineno - 1:ret.end_lineno] = [indent + "return " + ast.unparse(value)]
    return "\n".join(lines)


def _resolved_argnums(options, params):
    nums = parse_argnums(options.argnums, params)
    single = isinstance(nums, int)
    resolved = tuple(i % len(params) if -len(params) <= i < 0 else i
                     for i in ((nums,) if single else nums))
    return nums, single, resolved


def _grad(command, fn, module_name, specs, options):
    from .build import build_reverse
    params = list(specs)
    nums, single, resolved = _resolved_argnums(options, params)
    with_value = command == "value-and-grad"
    generated = build_reverse(fn, specs, argnums=resolved, has_aux=options.has_aux,
                              with_value=with_value, standalone_module=module_name,
                              argnums_text=nums)
    _check_standalone(generated, fn)
    source = _jax_layout(generated.source, generated.entry, with_value, options.has_aux, single)
    flat = generated.layout.get("params") or params
    return _with_parameters(source, generated.entry, flat, fn), generated.entry


def _vjp(fn, module_name, specs, options):
    from .build import build_vjp
    generated = build_vjp(fn, specs, standalone_module=module_name)
    _check_standalone(generated, fn)
    generated.source = _with_parameters(generated.source, generated.entry,
                                        generated.layout["params"], fn)
    return _vjp_wrapper(generated, fn)


def _jvp(fn, module_name, specs, options):
    from .build_forward import build_jvp
    generated = build_jvp(fn, specs, has_aux=options.has_aux, standalone_module=module_name)
    _check_standalone(generated, fn)
    dicts = generated.layout.get("dicts")
    if dicts is not None:
        return _returning_dicts(generated.source, generated.entry, dicts), generated.entry
    return generated.source, generated.entry


def _jacobian(command, fn, specs, options):
    from .jacobians import hessian, jacfwd, jacrev
    _need_ranks(fn, specs, command)
    if any(isinstance(s, Static) for s in specs.values()):
        raise TransformError(f"{command} with --static arguments is not supported yet",
                             status=2)
    nums, _, _ = _resolved_argnums(options, list(specs))
    if command == "hessian":
        if options.has_aux:
            raise TransformError("hessian takes no --has-aux", status=2)
        transform = hessian(fn, nums)
    else:
        make = jacfwd if command == "jacfwd" else jacrev
        transform = make(fn, nums, options.has_aux)
    generated, _, _ = transform._generate(specs)
    _check_standalone(generated, fn)
    source = resolve_generated_imports(generated.source, fn)
    dicts = generated.layout.get("dicts")
    if dicts is not None:  # (not with has_aux: the spec is then None)
        source = _returning_dicts(source, generated.entry, dicts, parts=False)
    return _with_parameters(source, generated.entry, list(specs), fn), generated.entry


def _batched(spec, axis, name):
    if axis is None or not isinstance(spec, T.AType):
        return spec
    if spec.kind == "array" and spec.dims is None:
        raise TransformError(f"vmap needs the rank of {name} (hint: give --signature)",
                             status=2)
    dims = list(spec.dims or ())
    rank = len(dims) + 1
    if not -rank <= axis < rank:
        raise TransformError(f"--in-axes: axis {axis} of {name} is out of range for a "
                             f"rank-{rank - 1} argument mapped to rank {rank}", status=2)
    dims.insert(axis % rank, T.N)
    return T.array(tuple(dims), spec.dtype or "float64")


def _vmap(fn, specs, options):
    from .batching import _placeholder, vmap
    names = list(specs)
    in_axes = options.in_axes
    per_param = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(names)
    if len(per_param) != len(names):
        raise TransformError(f"--in-axes has {len(per_param)} entries but {fn.__name__} takes "
                             f"{len(names)} argument(s): {', '.join(names)}", status=2)
    bspecs = {n: _batched(specs[n], a, n) for n, a in zip(names, per_param)}
    batcher = vmap(fn, in_axes=in_axes, out_axes=options.out_axes)
    likes = [_placeholder(bspecs[n]) for n in names]
    per_arg = batcher._per_arg_axes(names, len(names), set())
    leaf_axes, _ = batcher._leaf_axes(names, likes, bspecs, per_arg)
    if all(a is None for a in leaf_axes):
        raise TransformError("--in-axes maps no argument: map at least one (e.g. 0)", status=2)
    generated, _ = batcher._generate(names, likes, bspecs, leaf_axes, False)
    _check_standalone(generated, fn)
    source = resolve_generated_imports(generated.source, fn)
    defaults = inspect.signature(fn).parameters
    if all(a is None for n, a in zip(names, per_param)
           if n in defaults and defaults[n].default is not defaults[n].empty):
        # (a mapped argument takes a batch, so its default for one example would be wrong)
        source = _with_parameters(source, generated.entry, names, fn)
    return source, generated.entry


def _rename_entry(source, old, new):
    from .cli_module import rename_names
    if old == new or not re.search(rf"^def {re.escape(old)}\(", source, re.M):
        return source
    if re.search(rf"^def {re.escape(new)}\(", source, re.M):
        return source
    return rename_names(source, {old: new})


def _static_note(source, static):
    if not static:
        return source
    note = "Static arguments (fixed when this module was written): " + ", ".join(
        f"{k}={v!r}" for k, v in static.items()) + ".\n"
    marker = "Regenerate instead of editing.\n"
    return source.replace(marker, note + marker, 1) if marker in source else source


def generate(command, fn, module, options):
    """The :class:`Piece` that `command` writes for `fn` (defined in `module`, which the
    generated code imports its data from)."""
    from .build_jacobian import Argnums  # noqa: F401  (keeps the jacobian builders importable)
    if command not in COMMANDS:
        raise TransformError(f"unknown command {command!r}", status=2)
    specs = specs_of(fn, options)
    module_name = getattr(module, "__name__", None)
    if command in ("grad", "value-and-grad"):
        source, entry = _grad(command, fn, module_name, specs, options)
    elif command == "vjp":
        source, entry = _vjp(fn, module_name, specs, options)
    elif command == "jvp":
        source, entry = _jvp(fn, module_name, specs, options)
    elif command == "vmap":
        source, entry = _vmap(fn, specs, options)
    else:
        source, entry = _jacobian(command, fn, specs, options)
    if command == "hessian":  # named as the user asked, not as it is built
        first, _, rest = source.partition("\n")
        title = first[3:].split(", generated by")[0]
        source = f'"""hessian{title[len("jacfwd(jacrev"):-1]} = {title}, generated by' + \
            first.split(", generated by", 1)[1] + "\n" + rest
    wanted = entry_name(command, fn.__name__)
    if command in ("hessian", "jacfwd", "jacrev", "vmap", "jvp"):
        source = _rename_entry(source, entry, wanted)
        entry = wanted if re.search(rf"^def {re.escape(wanted)}\(", source, re.M) else entry
    source = _static_note(source, options.static)
    return Piece(source, entry, command, fn.__name__)
