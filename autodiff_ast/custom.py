"""Custom derivative rules: ``custom_jvp``, ``custom_vjp`` and ``register_rule``.

Use them to fix a derivative that is numerically unstable, or to supply one for a function we
cannot read (a C extension, a third-party callable). ``custom_jvp`` and ``custom_vjp`` follow
JAX: the decorated function is called as it is; its derivative comes from the rule you define.

>>> import numpy as np
>>> import autodiff_ast as ad
>>> @ad.custom_jvp
... def log1pexp(x):
...     return np.log1p(np.exp(x))
>>> @log1pexp.defjvp
... def log1pexp_jvp(primals, tangents):
...     x, = primals
...     x_dot, = tangents
...     return log1pexp(x), x_dot / (1.0 + np.exp(-x))
>>> float(ad.grad(log1pexp)(1000.0))   # the naive derivative would be nan (inf / inf)
1.0

``register_rule(fn, partials=..., vjp=..., jvp=...)`` attaches derivative templates (source
text, like the rules in :mod:`autodiff_ast.rules`) to any callable; ``check=True`` compares them
with finite differences of ``fn`` before accepting them.

How calls are routed: the normalizer asks :func:`route` first about every call. A call to a
custom function becomes one primitive whose rule writes calls to generated helper functions (the
user's jvp rule, its transpose, the user's fwd/bwd), so the generated module stays inside the
subset we differentiate again for higher orders.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import linecache
import sys

import gast
import numpy as np

from . import types as T
from .errors import ArgnumsError, AutodiffError, MissingRuleError, ShapeMismatchError
from .rules import Rule
from .specs import Static, TreeSpec
from .templates import assign, fill, name, summed, to_expr, unparse

_ROUTES = {}  # callable -> handler(normalizer, fn, node, target)
_REGISTERED = {}  # callable -> _Registration (register_rule)
_COUNTER = itertools.count(1)
_INSIDE_OWN_RULE = set()  # ids of the custom_vjp functions whose fwd/bwd are being read


class RuleCheckError(AutodiffError, AssertionError):
    """A registered derivative rule disagrees with finite differences of the function."""


# ---------------------------------------------------------------- routing
def register_route(fn, handler):
    """Have calls to `fn` inside differentiated code normalized by `handler`."""
    _ROUTES[fn] = handler


#: The text of a generated module's copy of a custom function's primal -> the custom object.
_EMITTED_PRIMALS = {}
_EMITTED_BY_CODE = {}  # a generated function's code object -> its owner, or None


def note_emitted_primal(text, owner):
    """Remember that a generated module defines `text`, the primal of custom function `owner`:
    when that module is differentiated again (hessian, jacfwd(grad(f))), a call to it is the
    custom function's, with its rule, not a function whose body is differentiated."""
    known = _EMITTED_PRIMALS.setdefault(text, owner)
    if known is not owner:  # two custom functions with one text: neither is told apart
        _EMITTED_PRIMALS[text] = None


def emitted_primal(fn):
    """The custom object whose primal `fn` (a function of a generated module) is, or None."""
    if not _EMITTED_PRIMALS or not inspect.isfunction(fn) or \
            not (getattr(fn, "__module__", None) or "").startswith("autodiff_ast_generated"):
        return None
    code = fn.__code__
    if code not in _EMITTED_BY_CODE:
        try:
            text = inspect.getsource(fn)
        except (OSError, TypeError):
            text = None
        _EMITTED_BY_CODE[code] = _EMITTED_PRIMALS.get(text.rstrip("\n")) if text else None
    return _EMITTED_BY_CODE[code]


def route(normalizer, fn, node, target):
    """Normalize a call to a function with a custom rule; None for every other callable."""
    if isinstance(fn, (custom_jvp, custom_vjp)):
        return fn._route(normalizer, node, target)
    owner = emitted_primal(fn)
    if owner is not None:
        return owner._route(normalizer, node, target)
    try:
        handler = _ROUTES.get(fn)
        registration = _REGISTERED.get(fn)
    except TypeError:  # unhashable callables have no custom rule
        return None
    if registration is not None:
        return registration.route(normalizer, node, target)
    return None if handler is None else handler(normalizer, fn, node, target)


def wrapper_for(fun):
    """A Python function whose one statement calls `fun` (for ``grad(custom_function)``), or
    None when `fun` has no custom rule."""
    try:
        custom = isinstance(fun, (custom_jvp, custom_vjp)) or fun in _REGISTERED
    except TypeError:
        return None
    if not custom:
        return None
    params = _param_names(fun)
    fname = _identifier(getattr(fun, "__name__", "f"))
    text = ", ".join(params)
    return source_function(f"def {fname}({text}):\n    return fun({text})\n", fname,
                           {"fun": fun, "np": np})


def source_function(source, fname, namespace):
    """Define a function from source text registered in linecache (so it can be parsed)."""
    filename = f"<autodiff-ast custom {next(_COUNTER)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace.setdefault("__name__", "autodiff_ast_source")  # the function's __module__
    exec(compile(source, filename, "exec"), namespace)
    return namespace[fname]


def _identifier(text):
    from .naming import sanitize
    return sanitize(text.replace("<lambda>", "fn"))


def _param_names(fun):
    target = fun.fun if isinstance(fun, (custom_jvp, custom_vjp)) else fun
    registration = _REGISTERED.get(fun) if not isinstance(fun, (custom_jvp, custom_vjp)) \
        else None
    if registration is not None:
        return list(registration.params)
    return list(inspect.signature(target).parameters)


def _home_module(obj, attr):
    """A loaded module that exposes `obj` as `attr` (its own, or a public parent package such
    as scipy.special for a ufunc defined in scipy.special._ufuncs), or None."""
    module = getattr(obj, "__module__", None)
    candidates = [module] if module else []
    if module:
        parts = module.split(".")
        candidates += [".".join(parts[:k]) for k in range(len(parts) - 1, 0, -1)]
    for cand in candidates:
        mod = sys.modules.get(cand)
        if mod is not None and getattr(mod, attr, None) is obj and \
                getattr(mod, "__file__", None):
            return cand
    if module is None:  # ufuncs do not say where they live: look in the public modules
        for cand in sorted(m for m in list(sys.modules) if not any(
                p.startswith("_") for p in m.split("."))):
            mod = sys.modules.get(cand)
            try:
                found = getattr(mod, attr, None) is obj
            except Exception:  # noqa: BLE001 - lazy modules may fail on attribute access
                found = False
            if found and getattr(mod, "__file__", None):
                return cand
    return None


def _data_name(normalizer, obj):
    """The module-level name generated code uses for `obj` (imported, or set by the loader)."""
    preferred = _identifier(getattr(obj, "__name__", "fn"))
    module = _home_module(obj, preferred)
    emitted = normalizer.program.data_name(obj, preferred, module)
    normalizer.namer.reserve(emitted)  # no local variable may shadow it
    return emitted


def _bind(normalizer, params, defaults, node, what):
    """Atoms of a call's arguments, by parameter name (defaults filled in)."""
    atoms = {}
    if len(node.args) > len(params):
        raise normalizer.unsupported(f"too many arguments for {what}", node)
    for p, a in zip(params, node.args):
        atoms[p] = normalizer.expr(a)
    for kw in node.keywords:
        if kw.arg not in params:
            raise normalizer.unsupported(f"{what} has no parameter {kw.arg!r}", node)
        atoms[kw.arg] = normalizer.expr(kw.value)
    for p in params:
        if p not in atoms:
            if p not in defaults:
                raise normalizer.unsupported(f"{what} is missing the argument {p!r}", node)
            atoms[p] = normalizer.static(defaults[p], node, p)
    return atoms


def _signature(fn):
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    return [p.name for p in params], defaults


def _call(func_name, args):
    return gast.Call(func=name(func_name), args=[to_expr(a) for a in args], keywords=[])


def _zero_tangent(atom, typ):
    if typ.kind == "array":
        return fill("np.zeros_like(x)", x=atom)
    return fill("0.0")


# ---------------------------------------------------------------- type inference by example
def _dummy(typ):
    if typ.kind == "array" and typ.dims is not None:
        shape = tuple(1 if d == 1 else 3 for d in typ.dims)
        return np.full(shape, 0.5, dtype=typ.dtype or "float64")
    if typ.kind == "int":
        return 1
    if typ.kind == "bool":
        return True
    if typ.value is not None:
        return typ.value
    return 0.5


def infer_by_example(fn, params):
    """A type rule that calls `fn` on small arrays of the argument types (sizes are never
    recorded, so the result's type is what any size gives)."""
    def infer(call):
        args = [_dummy(call.types[p]) for p in params if p in call.types]
        with np.errstate(all="ignore"):
            return T.abstract_of(fn(*args))
    return infer


# ---------------------------------------------------------------- register_rule
class _Registration:
    """Derivative templates attached to a callable by :func:`register_rule`."""

    def __init__(self, fn, params, defaults, partials, vjp, jvp, infer):
        self.fn = fn
        self.params = tuple(params)
        self.defaults = defaults
        self.partials = partials or {}
        self.vjp_templates = vjp or {}
        self.jvp_templates = jvp or {}
        self.infer = infer or infer_by_example(fn, self.params)
        self.diff = tuple(p for p in self.params if p in self.partials or
                          p in self.vjp_templates or p in self.jvp_templates)

    def subs(self, call):
        out = {p: call.args[p] for p in self.params if p in call.args}
        out["y"] = call.out
        return out

    def vjp(self, call, g):
        subs = self.subs(call)
        result = {}
        for p in self.diff:
            if p in self.vjp_templates:
                result[p] = (fill(self.vjp_templates[p], g=g, **subs), None)
            elif p in self.partials:
                result[p] = (fill(f"g * ({self.partials[p]})", g=g, **subs), None)
            else:
                return None
        return result

    def jvp(self, call, dots):
        subs = self.subs(call)
        terms = []
        for p, dot in dots.items():
            if p in self.jvp_templates:
                terms.append(fill(self.jvp_templates[p], **{f"{p}_dot": dot}, **subs))
            elif p in self.partials:
                terms.append(fill(f"({self.partials[p]}) * d", d=dot, **subs))
            else:
                return None
        return summed(terms)

    def route(self, normalizer, node, target):
        what = getattr(self.fn, "__name__", repr(self.fn))
        atoms = _bind(normalizer, self.params, self.defaults, node, what)
        for p, a in atoms.items():
            if not isinstance(a, gast.AST):
                raise normalizer.unsupported(f"the argument {p!r} of {what} must be an array "
                                             "or a number", node)
        emitted = _data_name(normalizer, self.fn)
        rule = Rule(f"{_identifier(what)}@custom", emitted, self.params, {}, self.diff,
                    self.infer, self.vjp, self.jvp)
        if self.partials and not (self.vjp_templates or self.jvp_templates):
            # Scalar partials make an elementwise rule: cotangents and tangents may stay
            # lazily broadcast through it (see reverse.Adjoints and forward.Tangents).
            from .reverse import _ELEMENTWISE_OK
            _ELEMENTWISE_OK.add(rule.name)
        value = _call(emitted, [atoms[p] for p in self.params])
        return normalizer.apply_rule(rule, atoms, node, target, value=value)


def _templates(spec, params, what):
    if spec is None:
        return {}
    if isinstance(spec, str):
        floaty = [p for p in params]
        if len(floaty) != 1:
            raise TypeError(f"{what} needs a dict {{parameter: template}} for a function of "
                            f"several parameters ({', '.join(params)})")
        return {floaty[0]: spec}
    unknown = set(spec) - set(params)
    if unknown:
        raise TypeError(f"{what} names unknown parameter(s) {sorted(unknown)}; the function "
                        f"takes {', '.join(params)}")
    return dict(spec)


def register_rule(fn, *, partials=None, vjp=None, jvp=None, params=None, infer=None,
                  check=False):
    """Attach derivative templates to `fn` (any callable, with or without Python source).

    Templates are Python expressions in the names of fn's parameters and ``y`` (its output):
    ``partials`` gives each parameter's elementwise partial derivative (both modes derive from
    it, broadcasting included); ``vjp`` gives each parameter's cotangent from ``g`` (the output
    cotangent); ``jvp`` gives each parameter's contribution to the output tangent from
    ``<param>_dot``. A string stands for the one parameter of a one-argument function.
    ``params`` names the parameters when fn has no readable signature; ``infer`` is a type rule
    (default: call fn on small example arrays). ``check=True`` (or a tuple of example
    arguments) compares the rule with central finite differences of fn in both modes and
    raises :class:`RuleCheckError` if they disagree. Returns fn.

    >>> import numpy as np
    >>> def softplus(x):
    ...     return np.log1p(np.exp(x))
    >>> _ = register_rule(softplus, partials="1.0 / (1.0 + np.exp(-x))", check=True)
    >>> from autodiff_ast import grad
    >>> float(grad(lambda x: softplus(x) * 2.0)(800.0))
    2.0
    """
    if params is None:
        try:
            params, defaults = _signature(fn)
        except (TypeError, ValueError):
            raise TypeError(f"cannot read the parameters of {fn!r}: pass params=('x', ...)") \
                from None
    else:
        params, defaults = list(params), {}
    partials = _templates(partials, params, "partials")
    vjp = _templates(vjp, params, "vjp")
    jvp = _templates(jvp, params, "jvp")
    if not (partials or vjp or jvp):
        raise TypeError("register_rule needs partials=, vjp= or jvp=")
    for p in set(vjp) ^ set(jvp):
        if p not in partials:
            raise TypeError(f"parameter {p!r} has a {'vjp' if p in vjp else 'jvp'} template "
                            "but no template for the other mode (give both, or partials=)")
    for text in list(partials.values()) + list(vjp.values()) + list(jvp.values()):
        try:
            gast.parse(text, mode="eval")
        except SyntaxError as exc:
            raise TypeError(f"the template {text!r} is not a Python expression: {exc}") \
                from None
    registration = _Registration(fn, params, defaults, partials, vjp, jvp, infer)
    previous = _REGISTERED.get(fn)
    _REGISTERED[fn] = registration
    if check is not False and check is not None:
        examples = check if isinstance(check, tuple) else None
        try:
            check_rule(fn, examples)
        except AssertionError as exc:
            if previous is None:
                del _REGISTERED[fn]
            else:
                _REGISTERED[fn] = previous
            raise RuleCheckError(f"the rule registered for {getattr(fn, '__name__', fn)} "
                                 f"disagrees with finite differences: {exc}",
                                 hint="fix the template, or check it at other example "
                                      "arguments with check=(x, ...)") from None
    return fn


def unregister_rule(fn):
    """Remove a rule added by :func:`register_rule` (no error if there is none)."""
    _REGISTERED.pop(fn, None)


def check_rule(fn, examples=None, modes=("fwd", "rev")):
    """Compare `fn`'s custom derivative with finite differences of `fn` itself.

    Without examples, every parameter gets a float64 array of 3 values in (0.2, 0.8) (the
    domain of most functions).
    """
    from .checks import check_grads
    if examples is None:
        rng = np.random.default_rng(0)
        examples = tuple(rng.uniform(0.2, 0.8, 3) for _ in _param_names(fn))
    # Calling the wrapper runs fn itself (the finite differences); transforming it reads its
    # one line, which routes to the custom rule.
    check_grads(wrapper_for(fn), examples, order=1, modes=modes)


# ---------------------------------------------------------------- custom_jvp
class custom_jvp:
    """A function with a custom forward-mode rule (JAX's ``jax.custom_jvp``).

    Define the rule with :meth:`defjvp` (``rule(primals, tangents) -> (out, out_dot)``) or
    :meth:`defjvps` (one function per argument). Reverse mode uses the rule's transpose, which
    we get by differentiating the rule's tangent output with respect to its tangents.

    >>> import numpy as np
    >>> @custom_jvp
    ... def f(x):
    ...     return np.sin(x)
    >>> _ = f.defjvps(lambda x_dot, ans, x: 2.0 * x_dot)
    >>> from autodiff_ast import grad
    >>> float(grad(f)(0.3))
    2.0
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp = None
        self._transposes = {}
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def defjvp(self, jvp):
        """Set the rule ``jvp(*nondiff_args, primals, tangents) -> (out, out_dot)``."""
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument: ``jvps[i](x_i_dot, out, *primals)`` is that argument's
        contribution to the output tangent (None: the argument has no derivative)."""
        params, _ = _signature(self.fun)
        if len(jvps) != len(params):
            raise TypeError(f"defjvps needs one function per parameter of {self.__name__} "
                            f"({len(params)}), got {len(jvps)}")
        args = ", ".join(params)
        lines = [f"def {_identifier(self.__name__)}_jvp(primals, tangents):",
                 f"    {args}, = primals",
                 f"    {', '.join(p + '_dot' for p in params)}, = tangents",
                 f"    out = fun({args})"]
        terms = [f"jvp_{i}({p}_dot, out, {args})" for i, (p, j) in enumerate(zip(params, jvps))
                 if j is not None]
        lines.append(f"    return out, {' + '.join(terms) if terms else '0.0 * out'}")
        namespace = {"fun": self, "np": np}
        namespace.update({f"jvp_{i}": j for i, j in enumerate(jvps) if j is not None})
        self.jvp = source_function("\n".join(lines) + "\n", f"{_identifier(self.__name__)}_jvp",
                                   namespace)
        return self.jvp

    # -- inside differentiated code
    def _route(self, normalizer, node, target):
        from .normalize import atom_type, normalize_into, parse_callee
        params, defaults = _signature(self.fun)
        atoms = _bind(normalizer, params, defaults, node, self.__name__)
        if self.jvp is None:  # no rule yet: differentiate the function itself
            return normalizer.call_user(self.fun, node, target,
                                        atoms=[atoms[p] for p in params])
        static = [params[i] for i in self.nondiff_argnums]
        diff = [p for p in params if p not in static]
        for p in diff:
            if not isinstance(atoms[p], gast.AST):
                raise normalizer.unsupported(f"the argument {p!r} of {self.__name__} must be "
                                             "an array or a number (or listed in "
                                             "nondiff_argnums)", node, _PYTREE_HINT)
        types_ = {p: atom_type(atoms[p], normalizer.types) for p in diff}
        rule_params, _ = _signature(self.jvp)
        specs = {}
        for p, s in zip(rule_params, static):
            specs[p] = Static(getattr(atoms[s], "value", None))
        primal_spec = TreeSpec("tuple", tuple((i, types_[p]) for i, p in enumerate(diff)))
        tangent_spec = TreeSpec("tuple", tuple(
            (i, types_[p] if types_[p].is_float else T.FLOAT) for i, p in enumerate(diff)))
        specs[rule_params[len(static)]] = primal_spec
        specs[rule_params[len(static) + 1]] = tangent_spec
        for p in static:
            value = atoms[p].value if isinstance(atoms[p], (Static, gast.Constant)) else None
            if not isinstance(value, (int, float, str, bool)):
                raise normalizer.unsupported(f"the argument {p!r} of {self.__name__} is in "
                                             "nondiff_argnums: it must be a number or a "
                                             "string constant", node)
            atoms[p] = gast.Constant(value=value, kind=None)
        # The primal is the function written into the module (so jit compiles it; the
        # custom_jvp object itself cannot be called by Numba), the static arguments folded in.
        primal_specs = {p: types_[p] if p in types_ else Static(atoms[p].value)
                        for p in params}
        primal = normalize_into(normalizer.program, parse_callee(self.fun), primal_specs)
        emitted, out_t = primal.name, primal.return_type
        if not static:  # (with static arguments folded in, the copy takes fewer parameters)
            normalizer.program.custom_primals[emitted] = self
        rule_core = normalize_into(normalizer.program, parse_callee(self.jvp), specs)
        program = normalizer.program
        owner = self

        def vjp(call, g):
            return owner._transpose(program, call, g, diff, types_, static, atoms, out_t)

        def jvp(call, dots):
            args = [call.args[p] for p in diff] + [
                dots.get(p, _zero_tangent(call.args[p], types_[p])) for p in diff]
            return gast.Subscript(value=_call(rule_core.name, args), slice=to_expr(1),
                                  ctx=gast.Load())

        def joint(stmt, tan, core, registry):
            return _joint_call(stmt, tan, rule_core.name, diff, types_)

        float_diff = tuple(p for p in diff if types_[p].is_float)
        rule = Rule(f"{_identifier(self.__name__)}@custom_jvp", emitted, tuple(diff), {},
                    float_diff, lambda call: out_t, vjp, jvp)
        rule.joint_jvp = joint
        value = _call(emitted, [atoms[p] for p in diff])
        return normalizer.apply_rule(rule, {p: atoms[p] for p in diff}, node, target,
                                     value=value)

    def _transpose(self, program, call, g, diff, types_, static, atoms, out_t):
        """Cotangents from the rule's transpose: the gradient, with respect to the tangents,
        of ``<g, out_dot>`` (the rule is linear in the tangents, so any tangent point works;
        zeros are passed)."""
        from .build import build_reverse
        from .normalize import normalize_into, parse_callee
        if out_t.kind not in ("float", "array"):
            return None
        values = tuple(atoms[p].value for p in static)
        key = (tuple(types_[p] for p in diff), out_t, values)
        if key not in self._transposes:
            from codegen.loader import load_source
            fname = _identifier(self.__name__)
            scalar, params = _scalarized_rule(self.jvp, f"{fname}_transpose")
            specs = {p: Static(v) for p, v in zip(params, values)}
            primals, tangents = params[len(static)], params[len(static) + 1]
            specs[primals] = TreeSpec("tuple", tuple((i, types_[p]) for i, p in enumerate(diff)))
            specs[tangents] = TreeSpec("tuple", tuple(
                (i, types_[p] if types_[p].is_float else T.FLOAT) for i, p in enumerate(diff)))
            specs["cotangent"] = out_t
            generated = build_reverse(scalar, specs, argnums=(len(static) + 1,),
                                      entry_name=f"{fname}_vjp")
            module = load_source(generated.source, f"{fname}_vjp")
            for n, v in generated.injected.items():
                setattr(module, n, v)
            self._transposes[key] = getattr(module, generated.entry)
        entry = self._transposes[key]
        flat_specs = {f"primals_{i}": types_[p] for i, p in enumerate(diff)}
        flat_specs.update({f"tangents_{i}": types_[p] if types_[p].is_float else T.FLOAT
                           for i, p in enumerate(diff)})
        flat_specs["cotangent"] = out_t
        names = list(inspect.signature(entry).parameters)
        core = normalize_into(program, parse_callee(entry),
                              {n: s for n, s in zip(names, flat_specs.values())})
        args = [call.args[p] for p in diff] + [
            _zero_tangent(call.args[p], types_[p]) for p in diff] + [g]
        value = _call(core.name, args)
        if len(diff) == 1:
            return {diff[0]: (value, types_[diff[0]])}
        out = {"__let__": [("custom_bar", value)]}
        for i, p in enumerate(diff):
            if types_[p].is_float:
                out[p] = (gast.Subscript(value=name("custom_bar"), slice=to_expr(i),
                                         ctx=gast.Load()), types_[p])
        return out


def _scalarized_rule(rule, fname):
    """The jvp rule rewritten to return ``np.sum(cotangent * out_dot)`` (its gradient with
    respect to the tangents is the transpose): same body, same globals and closure."""
    from .frontend import parse_function
    info = parse_function(rule)
    node = copy.deepcopy(info.node)
    params = [a.id for a in node.args.args]
    node.name = fname
    node.args.args.append(gast.Name(id="cotangent", ctx=gast.Param(), annotation=None,
                                    type_comment=None))
    namespace = dict(rule.__globals__)
    namespace.update(info.closure)
    numpy_name = "np" if namespace.get("np") is np else "_autodiff_ast_numpy"
    namespace[numpy_name] = np

    class Returns(gast.NodeTransformer):
        def visit_FunctionDef(self, inner):
            return inner if inner is not node else self.generic_visit(inner)

        def visit_Lambda(self, inner):
            return inner

        def visit_Return(self, ret):
            value = ret.value
            if isinstance(value, gast.Tuple) and len(value.elts) == 2:
                dot = value.elts[1]
            else:
                dot = gast.Subscript(value=value, slice=to_expr(1), ctx=gast.Load())
            total = fill(f"{numpy_name}.sum(cotangent * d)", d=dot)
            return gast.copy_location(gast.Return(value=total), ret)

    node = Returns().visit(node)
    source = unparse(node) + "\n"
    return source_function(source, fname, namespace), params


def _joint_call(stmt, tan, func_name, params, types_):
    """Forward mode: ``y, y_dot = rule(x..., x_dot...)`` replaces the primal statement."""
    from .reverse import _stmt_targets
    call = stmt.prim.call
    target = _stmt_targets(stmt)[0]
    args = [call.args[p] for p in params]
    dots = []
    for p, a in zip(params, args):
        dot = tan.of_atom(a, full=True) if isinstance(a, gast.Name) else None
        dots.append(dot if dot is not None else _zero_tangent(a, types_[p]))
    dot_name = tan.namer.tangent(target)
    replacement = assign([target, dot_name], _call(func_name, args + dots))
    for attr in ("prim", "origin", "info"):
        setattr(replacement, attr, getattr(stmt, attr, None))
    gast.copy_location(replacement, stmt)
    replacement.primal = stmt
    tan.emit(replacement)
    tan.bound.add(target)
    tan.exprs[target] = name(dot_name)
    tan.ttypes[target] = tan.type_of(target)
    return replacement


# ---------------------------------------------------------------- custom_vjp
class custom_vjp:
    """A function with a custom reverse-mode rule (JAX's ``jax.custom_vjp``).

    ``defvjp(fwd, bwd)``: ``fwd(*args) -> (out, residuals)`` runs in the forward sweep;
    ``bwd(residuals, g) -> tuple of cotangents`` (one per argument) in the backward sweep.
    Residuals are a tuple (possibly nested) of arrays and numbers. As in JAX, forward mode
    (jvp) of a custom_vjp function is an error.

    ``nondiff_argnums`` (JAX's): those arguments get no cotangent. ``fwd`` takes every
    argument; ``bwd(*nondiff_args, residuals, g)`` takes them first and returns one cotangent
    per other argument. A nondiff argument may be a constant (folded into the generated
    code) or a value computed at run time (passed to bwd as it is; no derivative flows
    through it, so a gradient with respect to it is zero).

    >>> import numpy as np
    >>> @custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> def fwd(x):
    ...     return x, ()
    >>> def bwd(res, g):
    ...     return (np.clip(g, -1.0, 1.0),)
    >>> clip_gradient.defvjp(fwd, bwd)
    >>> from autodiff_ast import grad
    >>> float(grad(lambda x: 5.0 * clip_gradient(x))(2.0))
    1.0
    """

    def __init__(self, fun, nondiff_argnums=()):
        self.fun = fun
        params, _ = _signature(fun)
        nums = (nondiff_argnums,) if isinstance(nondiff_argnums, int) else nondiff_argnums
        for i in nums:
            if not isinstance(i, int) or not -len(params) <= i < len(params):
                raise ArgnumsError(f"custom_vjp: nondiff_argnums={nondiff_argnums!r} does "
                                   f"not name parameters of {fun.__name__} ({len(params)})")
        self.nondiff_argnums = tuple(sorted({i % len(params) for i in nums}))
        self.fwd = None
        self.bwd = None
        self._flat_fwd = {}
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def defvjp(self, fwd, bwd):
        """Set the forward function (output and residuals) and the backward function."""
        self.fwd, self.bwd = fwd, bwd

    def _flat_forward(self, res_type):
        """fwd rewritten to return ``(out, r0, r1, ...)``, its residuals flattened (same body,
        globals and closure), so generated code passes each residual by name."""
        from .frontend import parse_function
        paths = _leaf_paths(res_type)
        key = tuple(paths)
        if key not in self._flat_fwd:
            info = parse_function(self.fwd)
            node = copy.deepcopy(info.node)
            taken = {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}
            out_name = _unused("out", taken)
            res_name = _unused("residuals", taken)
            node.name = f"{_identifier(self.__name__)}_fwd"

            class Returns(gast.NodeTransformer):
                def visit_FunctionDef(self, inner):
                    return inner if inner is not node else self.generic_visit(inner)

                def visit_Return(self, ret):
                    pair = ret.value
                    if isinstance(pair, gast.Tuple) and len(pair.elts) == 2:
                        out, res = pair.elts
                    else:
                        out = gast.Subscript(value=pair, slice=to_expr(0), ctx=gast.Load())
                        res = gast.Subscript(value=copy.deepcopy(pair), slice=to_expr(1),
                                             ctx=gast.Load())
                    items = [name(out_name)]
                    for path in paths:
                        item = name(res_name)
                        for i in path:
                            item = gast.Subscript(value=item, slice=to_expr(i),
                                                  ctx=gast.Load())
                        items.append(item)
                    stmts = [assign(out_name, out), assign(res_name, res),
                             gast.Return(value=gast.Tuple(elts=items, ctx=gast.Load()))]
                    return [gast.copy_location(st, ret) for st in stmts]

            node = Returns().visit(node)
            namespace = dict(self.fwd.__globals__)
            namespace.update(info.closure)
            self._flat_fwd[key] = source_function(unparse(node) + "\n", node.name, namespace)
        return self._flat_fwd[key]

    def _route(self, normalizer, node, target):
        from .normalize import (
            Prim,
            Program,
            atom_type,
            normalize,
            normalize_into,
            parse_callee,
        )
        params, defaults = _signature(self.fun)
        atoms = _bind(normalizer, params, defaults, node, self.__name__)
        if self.fwd is None or id(self) in _INSIDE_OWN_RULE:
            # (in its own fwd or bwd, JAX's `return f(x), (x,)`: the function as written)
            return normalizer.call_user(self.fun, node, target,
                                        atoms=[atoms[p] for p in params])
        nondiff = [params[i] for i in self.nondiff_argnums]
        types_ = {}
        for p in params:
            value = getattr(atoms[p], "value", None)
            if p in nondiff and isinstance(atoms[p], (Static, gast.Constant)) and \
                    isinstance(value, (int, float, str, bool)):
                atoms[p] = gast.Constant(value=value, kind=None)  # folded in
                types_[p] = Static(value)
                continue
            if not isinstance(atoms[p], gast.AST):
                raise normalizer.unsupported(f"the argument {p!r} of {self.__name__} must be "
                                             "an array or a number" + (
                                                 " (or, in nondiff_argnums, a number or "
                                                 "string constant)" if p in nondiff else ""),
                                             node, _PYTREE_HINT)
            types_[p] = atom_type(atoms[p], normalizer.types)
        diff = [p for p in params if p not in nondiff]
        program = normalizer.program
        _INSIDE_OWN_RULE.add(id(self))  # (its fwd and bwd may call it: see above)
        try:
            ret = normalize(parse_callee(self.fwd), dict(types_), Program()).return_type
            if ret.kind != "tuple" or not ret.elts or len(ret.elts) != 2:
                raise normalizer.info.error(MissingRuleError, f"the fwd function of "
                                            f"{self.__name__} must return (output, residuals)",
                                            node)
            out_t, res_t = ret.elts
            paths = _leaf_paths(res_t)
            flat_fwd = self._flat_forward(res_t)
            flat_core = normalize_into(program, parse_callee(flat_fwd), dict(types_))
            leaf_types = [_at(res_t, path) for path in paths]
            bwd_params, _ = _signature(self.bwd)
            if len(bwd_params) != len(nondiff) + 2:
                raise normalizer.info.error(
                    MissingRuleError, f"the bwd function of {self.__name__} must take "
                    f"{len(nondiff) + 2} arguments: " + "".join(f"{p}, " for p in nondiff) +
                    "residuals, g", node)
            res_spec = _residual_spec(res_t)
            bwd_specs = {b: types_[p] for b, p in zip(bwd_params, nondiff)}
            bwd_specs.update({bwd_params[-2]: res_spec, bwd_params[-1]: out_t})
            bwd_core = normalize_into(program, parse_callee(self.bwd), bwd_specs)
            bwd_out = bwd_core.return_type
        finally:
            _INSIDE_OWN_RULE.discard(id(self))
        floats = [p for p in diff if types_[p].is_float]
        if bwd_out.kind == "tuple" and len(bwd_out.elts or ()) == len(diff):
            for p, cot_t in zip(diff, bwd_out.elts):
                ranks = (types_[p].ndim, cot_t.ndim)
                if p in floats and cot_t.kind != "none" and None not in ranks and \
                        ranks[0] != ranks[1]:  # (JAX refuses a cotangent of another shape)
                    what = "a number" if not ranks[0] else f"an array of rank {ranks[0]}"
                    got = "a number" if not ranks[1] else f"an array of rank {ranks[1]}"
                    raise normalizer.info.error(
                        ShapeMismatchError, f"the bwd function of {self.__name__} returns "
                        f"{got} as the cotangent of {p!r}, which is {what}", node,
                        "return a cotangent of the argument's shape (for a number broadcast "
                        "into an array, np.sum of the array's cotangent)")
        fwd_out_t = T.AType("tuple", elts=(out_t,) + tuple(leaf_types))
        owner = self

        def vjp(call, g):
            cot = g[0] if isinstance(g, (list, tuple)) else g
            if cot is None:
                return {}
            tuple_name = call.out
            residuals = [gast.Subscript(value=to_expr(tuple_name), slice=to_expr(i + 1),
                                        ctx=gast.Load()) for i in range(len(leaf_types))]
            if out_t.kind == "array":
                first = gast.Subscript(value=to_expr(tuple_name), slice=to_expr(0),
                                       ctx=gast.Load())
                cot = fill("g + np.zeros_like(y)", g=cot, y=first)
            # (a constant is folded into bwd as into fwd; a run-time value is passed)
            passed = [call.args[p] for p in nondiff if not isinstance(types_[p], Static)]
            value = _call(bwd_core.name, passed + residuals + [cot])
            result = {"__let__": [("custom_bar", value)]}
            n = len(bwd_out.elts or ()) if bwd_out.kind == "tuple" else 0
            if n != len(diff):
                others = " other than nondiff_argnums" if nondiff else ""
                raise ValueError(f"the bwd function of {owner.__name__} must return a tuple "
                                 f"with one cotangent per argument{others} ({len(diff)})")
            for i, p in enumerate(diff):
                if p in floats and bwd_out.elts[i].kind != "none":
                    result[p] = (gast.Subscript(value=name("custom_bar"), slice=to_expr(i),
                                                ctx=gast.Load()), types_[p])
            return result

        # (a constant nondiff argument is folded into the forward function: not passed)
        passed = [p for p in params if not isinstance(types_[p], Static)]
        rule = Rule(f"{_identifier(self.__name__)}@custom_vjp", flat_core.name, tuple(passed),
                    {}, tuple(floats), lambda call: fwd_out_t, vjp, None)
        pair = normalizer.apply_rule(rule, {p: atoms[p] for p in passed}, node, None,
                                     value=_call(flat_core.name, [atoms[p] for p in passed]))
        first = gast.Constant(value=0, kind=None)
        value = gast.Subscript(value=to_expr(pair), slice=first, ctx=gast.Load())
        kind = "tuple_get" if out_t.is_float or T.carries_derivative(out_t) else \
            "nondiff"
        return normalizer.emit(value, out_t, Prim(kind, args=[pair], rule=first), target,
                               f"{_identifier(self.__name__)}_out")


#: What to do when a custom function is passed a pytree (JAX takes one; we do not yet).
_PYTREE_HINT = ("a custom_jvp/custom_vjp function takes arrays and numbers, not a dict, "
                "list or tuple of them yet: pass the entries as arguments of their own "
                "(f(p['w'], x) for f(p, x))")


def _unused(base, taken):
    name_, k = base, 2
    while name_ in taken:
        name_, k = f"{base}_{k}", k + 1
    return name_


def _leaf_paths(typ, prefix=()):
    """Index paths of the leaves of a (nested) tuple type."""
    if typ.kind == "tuple" and typ.elts is not None:
        out = []
        for i, e in enumerate(typ.elts):
            out += _leaf_paths(e, prefix + (i,))
        return out
    if typ.kind == "none":
        return []
    return [prefix]


def _residual_spec(typ):
    """The spec of bwd's residuals argument: the structure fwd returned them in (one array,
    or tuples nested as written; a None is a static None), its leaves in _leaf_paths' order."""
    if typ.kind == "tuple" and typ.elts is not None:
        return TreeSpec("tuple", tuple((i, _residual_spec(e)) for i, e in enumerate(typ.elts)))
    return Static(None) if typ.kind == "none" else typ


def _at(typ, path):
    for i in path:
        typ = typ.elts[i]
    return typ


__all__ = ["custom_jvp", "custom_vjp", "register_rule", "unregister_rule", "check_rule",
           "RuleCheckError", "route", "register_route", "wrapper_for", "source_function",
           "unparse"]
