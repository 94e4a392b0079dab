"""``autodiff-ast check OUT.py``: verify a written module numerically, at random inputs.

A module written by the command line records the command that wrote it (a ``# autodiff-ast
...`` line under its docstring). ``check`` reads that line back, imports the user's functions
and the written module, draws random inputs for each function's signature and compares every
entry function against an independent reference computed from the user's own function:

- ``grad`` / ``value-and-grad``: central finite differences of FUNC (and FUNC's value);
- ``jvp``: a central difference along the tangent; ``vjp``: the finite-difference Jacobian
  contracted with the cotangent; ``jacfwd`` / ``jacrev``: the finite-difference Jacobian;
  ``hessian``: second-order central differences;
- ``vmap``: FUNC called on each example in a Python loop (exact up to rounding).

Axis sizes come from the signature: a number is that size, a name (``float64[n, d]``) is one
size shared by every axis of that name (``--sizes n=4,d=3`` fixes it), ``N`` and unknown ranks
get ``--size`` (default 3). Inputs are drawn from a normal distribution, or from [0.5, 1.5] when
FUNC is not finite there (logs, square roots), or always with ``--positive``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cli_module import COMMAND_PREFIX
from .cli_transforms import (
    Options,
    TransformError,
    entry_name,
    options_for,
    parse_argnums,
    specs_of,
)
from .normalize import Static

__all__ = ["check_module", "Result", "fd_jacobian", "axis_sizes"]


@dataclass
class Result:
    """The outcome for one entry function."""

    entry: str
    ok: bool
    error: float
    against: str

    def line(self):
        status = "ok  " if self.ok else "FAIL"
        return f"{status} {self.entry}: max abs error {self.error:.2e} against {self.against}"


# ---------------------------------------------------------------- references
def fd_jacobian(fun, args, k, eps=1e-6):
    """d fun(*args) / d args[k] by central differences: shape out.shape + arg.shape.

    >>> fd_jacobian(lambda x: x ** 2, [np.array([1.0, 2.0])], 0).round(6)
    array([[2., 0.],
           [0., 4.]])
    """
    first = fun(*args)
    if isinstance(first, (tuple, list)):  # several outputs: one Jacobian each
        return tuple(fd_jacobian(lambda *a, i=i: fun(*a)[i], args, k, eps)
                     for i in range(len(first)))
    x = np.asarray(args[k], dtype=float)
    cols = []
    for i in np.ndindex(x.shape or ()):
        step = np.zeros_like(x)
        step[i] = eps
        up, down = list(args), list(args)
        up[k] = (x + step) if x.shape else float(x + step)
        down[k] = (x - step) if x.shape else float(x - step)
        cols.append((np.asarray(fun(*up), dtype=float) - np.asarray(fun(*down), dtype=float))
                    / (2 * eps))
    out = np.stack(cols, axis=-1) if cols else np.zeros(0)
    return out.reshape(np.shape(cols[0]) + x.shape)


def _fd_hessian(fun, args, j, k, eps=1e-4):
    xj, xk = np.asarray(args[j], dtype=float), np.asarray(args[k], dtype=float)
    out = np.zeros(xj.shape + xk.shape)

    def shifted(a, b):
        values = list(args)
        for idx, (which, sign) in enumerate(((j, a), (k, b))):
            base = np.asarray(values[which], dtype=float)
            step = np.zeros_like(base)
            step[indices[idx]] = sign * eps
            values[which] = base + step if base.shape else float(base + step)
        return float(fun(*values))
    for ij in np.ndindex(xj.shape or ()):
        for ik in np.ndindex(xk.shape or ()):
            indices = (ij, ik)
            out[ij + ik] = (shifted(1, 1) - shifted(1, -1) - shifted(-1, 1) +
                            shifted(-1, -1)) / (4 * eps * eps)
    return out


# ---------------------------------------------------------------- random inputs
_AXES = re.compile(r"\[(.*)\]")


def axis_sizes(fn, options, size, fixed):
    """{param: tuple of axis sizes, or None for a scalar} from the signature's axis names.

    >>> def f(x, w, b: float):
    ...     return x
    >>> axis_sizes(f, Options(signature="x=float64[n, d], w=float64[d]"), 3, {"n": 5})
    {'x': (5, 3), 'w': (3,), 'b': None}
    """
    specs = specs_of(fn, options)
    written = {}
    for part in _split(options.signature or ""):
        name, _, text = part.partition("=")
        written[name.strip()] = text
    for p, annotation in fn.__annotations__.items():
        if isinstance(annotation, str) and p not in written:
            written[p] = annotation
    named = dict(fixed)
    out = {}
    for p, spec in specs.items():
        if isinstance(spec, Static):
            continue
        if spec.kind != "array":
            out[p] = None
            continue
        match = _AXES.search(written.get(p, ""))
        tokens = [t.strip() for t in match.group(1).split(",")] if match else []
        if spec.dims is None or not tokens or tokens == ["..."]:
            out[p] = (size,)
            continue
        dims = []
        for token in tokens:
            if token.isdigit():
                dims.append(int(token))
            elif token.isidentifier() and token != "N":
                dims.append(named.setdefault(token, size))
            else:
                dims.append(size)
        out[p] = tuple(dims)
    return out


def _split(text):
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + ([current] if current.strip() else [])


def _draw(spec, shape, rng, positive):
    if spec.kind == "int":
        return int(rng.integers(2, 5))
    if spec.kind == "bool":
        return True
    if shape is None:
        return float(rng.uniform(0.5, 1.5)) if positive else float(rng.standard_normal())
    value = rng.uniform(0.5, 1.5, shape) if positive else rng.standard_normal(shape)
    return value.astype(spec.dtype or "float64")


def _inputs(fn, options, rng, size, fixed, positive):
    specs = specs_of(fn, options)
    shapes = axis_sizes(fn, options, size, fixed)
    values = {}
    for p, spec in specs.items():
        values[p] = spec.value if isinstance(spec, Static) else _draw(spec, shapes[p], rng,
                                                                      positive)
    return specs, values


def _finite(fn, values):
    try:
        with np.errstate(all="ignore"):
            out = fn(**values)
    except Exception:  # noqa: BLE001 - the other domain may work
        return False
    leaves = out if isinstance(out, tuple) else (out,)
    return all(np.all(np.isfinite(np.asarray(v, dtype=float))) for v in leaves
               if np.asarray(v).dtype != object)


# ---------------------------------------------------------------- comparing one entry
def _close(got, want, rtol, atol):
    got_leaves = _leaves(got)
    want_leaves = _leaves(want)
    if len(got_leaves) != len(want_leaves):
        return False, float("inf")
    worst, ok = 0.0, True
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
        if g.shape != w.shape:
            return False, float("inf")
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        err = float(np.max(np.abs(g - w))) if w.size else 0.0
        worst = max(worst, err)
        ok = ok and bool(np.allclose(g, w, rtol=rtol, atol=atol * scale))
    return ok, worst


def _leaves(value):
    if isinstance(value, dict):  # (an aux dict: its entries by key)
        value = [value[key] for key in sorted(value)]
    if isinstance(value, (tuple, list)):
        out = []
        for v in value:
            out += _leaves(v)
        return out
    return [value]


def _each_output(f, *parts):
    """f applied per output: to the entries of tuples (several outputs), else once."""
    if isinstance(parts[0], tuple):
        return tuple(f(*entries) for entries in zip(*parts))
    return f(*parts)


def _plus(a, b):
    """a + b, entry by entry for tuples (several outputs); None is zero."""
    if a is None:
        return b
    return _each_output(lambda x, y: x + y, a, b)


def _primary(fn, has_aux):
    if not has_aux:
        return fn

    def out_only(*args):
        return fn(*args)[0]
    return out_only


def _check_entry(command, fn, entry, options, values, specs, rng, tol):
    rtol, atol = tol
    params = [p for p in specs if not isinstance(specs[p], Static)]
    statics = {p: v.value for p, v in specs.items() if isinstance(v, Static)}
    args = [values[p] for p in params]

    def user(*a):
        return fn(**dict(zip(params, a)), **statics)
    primal = _primary(user, options.has_aux)
    floats = [k for k, p in enumerate(params) if specs[p].is_float]
    if command in ("grad", "value-and-grad"):
        nums = parse_argnums(options.argnums, list(specs))
        single = isinstance(nums, int)
        ks = [params.index(list(specs)[i]) for i in ((nums,) if single else nums)]
        result = entry(*args)
        want = [fd_jacobian(primal, args, k) for k in ks]
        want = want[0] if single else tuple(want)
        if command == "value-and-grad":
            value, got = result
            value_want = user(*args) if options.has_aux else primal(*args)
            if options.has_aux:
                want = (value_want, want)
                got = (value, got)
            else:
                want, got = (value_want, want), (value, got)
        else:
            got = result[0] if options.has_aux else result
        return _close(got, want, rtol, atol) + ("central differences of FUNC",)
    if command == "jvp":
        dots = [_like(args[k], rng) for k in floats]
        result = entry(*args, *dots)
        out, out_dot = result[0], result[1]
        want_dot = None
        for k, v in zip(floats, dots):
            jac = fd_jacobian(primal, args, k)
            want_dot = _plus(want_dot, _each_output(lambda j, v=v: _contract_in(j, v), jac))
        return _close((out, out_dot), (primal(*args), want_dot), rtol, atol) + (
            "a central difference along the tangent",)
    if command == "vjp":
        out = primal(*args)
        several = isinstance(out, (tuple, list))
        u = tuple(_like(o, rng) for o in out) if several else _like(out, rng)
        got_out, bars = entry(*args, *u) if several else entry(*args, u)
        bars = bars if isinstance(bars, tuple) else (bars,)
        want = []
        for k in floats:
            jac = fd_jacobian(primal, args, k)
            pieces = [_contract_out(ui, ji) for ui, ji in zip(u, jac)] if several else \
                [_contract_out(u, jac)]
            want.append(sum(pieces[1:], pieces[0]))
        return _close((got_out, bars), (out, tuple(want)), rtol, atol) + (
            "the finite-difference Jacobian times the cotangent",)
    if command in ("jacfwd", "jacrev"):
        nums = parse_argnums(options.argnums, list(specs))
        single = isinstance(nums, int)
        ks = [params.index(list(specs)[i]) for i in ((nums,) if single else nums)]
        got = entry(*args)
        if options.has_aux:
            got = got[0]
        want = [fd_jacobian(primal, args, k) for k in ks]
        if isinstance(want[0], tuple):  # several outputs: the outputs' structure outside
            want = tuple(w[0] if single else tuple(w) for w in zip(*want))
        else:
            want = want[0] if single else tuple(want)
        return _close(got, want, rtol, atol) + ("the finite-difference Jacobian",)
    if command == "hessian":
        nums = parse_argnums(options.argnums, list(specs))
        single = isinstance(nums, int)
        ks = [params.index(list(specs)[i]) for i in ((nums,) if single else nums)]
        got = entry(*args)
        want = tuple(tuple(_fd_hessian(primal, args, j, k) for k in ks) for j in ks)
        want = want[0][0] if single else want
        return _close(got, want, max(rtol, 1e-4), max(atol, 1e-5)) + (
            "second-order central differences",)
    if command == "vmap":
        return _check_vmap(fn, entry, options, params, args, statics, rng, tol)
    raise TransformError(f"check: unknown command {command!r}", status=2)


def _like(value, rng):
    if np.ndim(value) == 0:
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(value))


def _contract_in(jac, v):
    v = np.asarray(v, dtype=float)
    if v.ndim == 0:
        return jac * float(v)
    return np.tensordot(jac, v, axes=v.ndim)


def _contract_out(u, jac):
    u = np.asarray(u, dtype=float)
    if u.ndim == 0:
        return jac * float(u)
    return np.tensordot(u, jac, axes=u.ndim)


def _check_vmap(fn, entry, options, params, args, statics, rng, tol):
    in_axes = options.in_axes
    per = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(params)
    batch = 4
    batched = []
    for a, axis in zip(args, per):
        if axis is None:
            batched.append(a)
        else:
            stack = [np.asarray(a) * (1.0 + 0.1 * b) for b in range(batch)]
            batched.append(np.stack(stack, axis=axis))
    got = entry(*batched)
    outs = []
    for b in range(batch):
        example = [a if axis is None else np.take(x, b, axis=axis)
                   for a, x, axis in zip(args, batched, per)]
        outs.append(fn(**dict(zip(params, example)), **statics))
    out_axes = options.out_axes
    if isinstance(outs[0], tuple):
        axes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(outs[0])
        want = tuple(np.stack([o[i] for o in outs], axis=ax) if ax is not None else outs[0][i]
                     for i, ax in enumerate(axes))
    else:
        want = np.stack(outs, axis=out_axes) if out_axes is not None else outs[0]
    return _close(got, want, 1e-9, 1e-12) + ("FUNC called on each example",)


# ---------------------------------------------------------------- the module
def _import_path(path):
    path = Path(path).resolve()
    name = path.stem
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"autodiff_ast_checked_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_command(text):
    """The command line recorded in a written module (without ``autodiff-ast``), or None.

    >>> recorded_command('\"\"\"Doc.\"\"\"\\n# autodiff-ast grad m.py:f\\nimport numpy as np\\n')
    ['grad', 'm.py:f']
    """
    for line in text.split("\n"):
        if line.startswith(COMMAND_PREFIX):
            return shlex.split(line[len(COMMAND_PREFIX):])
    return None


def _recorded_folder(target, path):
    """Where to read a recorded target from: it is relative to the folder the command ran
    in, which the module does not record. This folder when the target's file is here, else
    the written module's folder or the nearest of its parents that holds it (``-o out/m.py``
    run beside the source, checked from anywhere); this folder when none does (the error
    then names the file)."""
    source_file = target.rsplit(":", 1)[0]
    here = Path.cwd()
    if not source_file.endswith(".py") or (here / source_file).is_file():
        return str(here)
    written = Path(path).resolve().parent
    for folder in [written, *written.parents][:4]:
        if (folder / source_file).is_file():
            return str(folder)
    return str(here)


def check_module(path, parse, load_functions, seed=0, size=3, fixed=None, positive=False,
                 tol=(1e-5, 1e-6)):
    """Check every entry of the written module at `path`; returns the :class:`Result` list.

    `parse` is the command line's argument parser and `load_functions` its target loader
    (``(functions, module, where)`` for a target), so that the recorded command is read
    exactly as it was run.
    """
    resolved = str(Path(path).resolve())  # (imported after moving to the target's folder)
    text = Path(path).read_text(encoding="utf-8")
    argv = recorded_command(text)
    if argv is None:
        raise TransformError(f"{path}: not written by autodiff-ast's command line (no "
                             f"'{COMMAND_PREFIX.strip()} ...' line under the docstring)")
    args = parse(argv)
    here = os.getcwd()
    os.chdir(_recorded_folder(args.target, resolved))
    try:
        functions, _, _ = load_functions(args.target)
        module = _import_path(resolved)
    finally:
        os.chdir(here)
    options = options_from(args)
    rng = np.random.default_rng(seed)
    results = []
    for fn in functions:
        name = entry_name(args.command, fn.__name__)
        if args.command == "vjp":
            name = f"vjp_{fn.__name__}"
        entry = getattr(module, name, None)
        if entry is None:
            raise TransformError(f"{path}: no function {name} (written for {fn.__name__})")
        own = options_for(fn, options) if len(functions) > 1 else options
        specs, values = _inputs(fn, own, rng, size, fixed or {}, positive)
        if not positive and not _finite(fn, values):
            specs, values = _inputs(fn, own, rng, size, fixed or {}, True)
        try:
            with np.errstate(all="ignore"):
                ok, err, against = _check_entry(args.command, fn, entry, own, values, specs,
                                                rng, tol)
        except Exception as exc:  # noqa: BLE001 - reported as one line
            shapes = ", ".join(f"{k}: {np.shape(v)}" for k, v in values.items()
                               if not isinstance(specs[k], Static))
            raise TransformError(
                f"{path}: checking {name} at random inputs ({shapes}) raised "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} (hint: "
                "give the axis sizes the function needs in the signature, e.g. float64[3], "
                "or name them, float64[n], and pass --sizes n=3)") from None
        results.append(Result(name, ok, err, against))
    return results


def options_from(args):
    """The transform :class:`Options` of parsed command-line arguments."""
    from .cli_transforms import parse_axes, parse_static
    return Options(argnums=getattr(args, "argnums", None),
                   has_aux=getattr(args, "has_aux", False),
                   signature=getattr(args, "signature", None),
                   static=parse_static(getattr(args, "static", None)),
                   in_axes=parse_axes(getattr(args, "in_axes", None)),
                   out_axes=parse_axes(getattr(args, "out_axes", None)))
