"""Forward mode and Jacobians: ``jvp``, ``linearize``, ``jacfwd``, ``jacrev``, ``hessian``.

JAX's names, signatures and output shapes (pytrees included); every result comes from a
generated module you can read (``.source``). A Jacobian is one vectorized pass: ``jacfwd`` pushes
every basis direction through one tangent pass whose tangents carry a leading basis axis,
``jacrev`` pulls every output cotangent back in one pass. Transformed functions compose
(``hessian = jacfwd(jacrev(f))``) because each transformation reads the source the previous one
wrote.

>>> import numpy as np
>>> out, out_dot = jvp(lambda x: np.sin(x) * x, (np.array([0.0, 1.0]),), (np.ones(2),))
>>> np.allclose(out_dot, np.cos([0.0, 1.0]) * [0.0, 1.0] + np.sin([0.0, 1.0]))
True
"""

from __future__ import annotations

import inspect
import weakref

import gast
import numpy as np

from codegen.dict_outputs import rebuild_dicts

from . import pytrees, rules
from .api import (
    FlatView,
    _flat_values,
    _match_leaf,
    _normalize_argnums,
    _prepare_leaf,
    _spec_key,
    _spec_kind,
    _Transformed,
)
from .build import non_float_input
from .build_forward import build_jvp, build_linearize
from .build_jacobian import Argnums, build_jacfwd, build_jacrev
from .custom import register_route, source_function
from .errors import ArgnumsError, ShapeMismatchError
from .frontend import parse_function
from .nesting import code_to_transform
from .normalize import Static, TreeSpec
from .output_lists import lists_of, restore_lists, result_lists


# ---------------------------------------------------------------- shared plumbing
def _float_leaf(x):
    return isinstance(x, (float, np.floating)) or (
        isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating))


def _flat_specs(specs, what):
    if any(isinstance(s, (TreeSpec, Static)) for s in specs.values()):
        raise NotImplementedError(f"transforming {what} with pytree or static arguments is "
                                  "not supported yet")


def _tangent_leaves(primals, tangents):
    """The tangents of the float leaves of `primals`, checked against their structure."""
    if not isinstance(tangents, (tuple, list)):
        raise TypeError(f"jvp takes its tangents as a tuple, one per primal, as it takes the "
                        f"primals: jvp(f, (x,), (v,)); got a {type(tangents).__name__} for "
                        f"{len(primals)} primal(s)")
    if len(tangents) != len(primals):
        raise TypeError(f"jvp needs one tangent per primal: got {len(primals)} primal(s) and "
                        f"{len(tangents)} tangent(s)")
    out = []
    for k, (p, t) in enumerate(zip(primals, tangents)):
        p_leaves, p_def = pytrees.tree_flatten(p)
        if not any(_float_leaf(x) for x in p_leaves):
            continue  # integer and static arguments have no tangents (any value is accepted)
        # None stands for the tangent of an integer leaf.
        t = pytrees.tree_map(lambda x: 0 if x is None else x, t, is_leaf=lambda x: x is None)
        t_leaves, t_def = pytrees.tree_flatten(t)
        if p_def != t_def:
            raise ShapeMismatchError(f"jvp: primal {k} has structure {p_def} but its tangent "
                                     f"has structure {t_def}",
                                     hint="pass tangents shaped like the primals")
        for pl, tl in zip(p_leaves, t_leaves):
            if not _float_leaf(pl):
                continue
            if np.shape(tl) != np.shape(pl):
                raise ShapeMismatchError(
                    f"jvp: a tangent of shape {np.shape(tl)} was given for a primal of shape "
                    f"{np.shape(pl)} (argument {k})", hint="pass tangents shaped like the primals")
            if isinstance(pl, np.ndarray):
                out.append(_prepare_leaf(np.asarray(tl, dtype=pl.dtype)))
            else:
                out.append(float(tl))
    return out


def _with_default_tangents(tangents, n_primals, values):
    """`tangents` for the `n_primals` primals passed, followed by zero tangents of the
    parameters their defaults filled in (`values` holds every parameter's value): a default
    is a constant, as in JAX, where only the primals passed have tangents."""
    if not isinstance(tangents, (tuple, list)) or len(tangents) != n_primals or \
            n_primals >= len(values):
        return tangents
    zeros = [pytrees.tree_map(lambda x: np.zeros_like(x) if isinstance(x, np.ndarray) else
                              0.0, v) for v in values[n_primals:]]
    return tuple(tangents) + tuple(zeros)


def _with_dicts(value, generated):
    """`value` with the dicts the function returns rebuilt: the generated module returns
    each as the tuple of its values (layout "dicts", autodiff_ast/build.py returned_dicts)."""
    dicts = generated.layout.get("dicts")
    return value if dicts is None else rebuild_dicts(value, dicts)


def _refuse_dict_outputs(generated, kind):
    """Inside transformed code the entry's tuples could not be read as the dicts they stand
    for: refused (the caller names the line)."""
    if generated.layout.get("dicts") is not None:
        raise NotImplementedError(f"{kind} of a function returning a dict, called inside "
                                  "transformed code, is not supported yet: return the dict's "
                                  "values as a tuple there")


def _match_tree(values, like):
    """`values` (nested tuples from a generated module) with the dtypes of `like`."""
    if isinstance(like, tuple):
        return tuple(_match_tree(v, lk) for v, lk in zip(values, like))
    if isinstance(like, (np.ndarray, np.floating)):
        return _match_leaf(values, like)
    return values


_CACHE = weakref.WeakKeyDictionary()


def _cached(kind, fun, factory):
    """One transform object per (function, kind, options): generated modules are reused."""
    try:
        per_fun = _CACHE.setdefault(fun, {})
    except TypeError:  # not weakly referenceable: no cache
        return factory()
    if kind not in per_fun:
        per_fun[kind] = factory()
    return per_fun[kind]


# ---------------------------------------------------------------- jvp
class _JvpTransform(_Transformed):
    """The generated tangent function of `fun`; call with (primals, tangents)."""

    kind = "jvp"

    def __init__(self, fun, has_aux=False):
        super().__init__(fun)
        self.has_aux = has_aux

    def _generate(self, specs):
        py_fun = self._python_function(specs)
        return self._module_for(_spec_key(specs), lambda: build_jvp(
            py_fun, specs, has_aux=self.has_aux))

    def output_lists(self):
        return result_lists(self.fun, self.has_aux, lambda out: (out, out))  # (out, out_dot)

    def function_for(self, specs):
        """The entry ``jvp_f(x..., x_dot...) -> (out, out_dot)`` for flat argument specs."""
        _flat_specs(specs, "jvp")
        generated, module = self._generate(specs)
        _refuse_dict_outputs(generated, "jvp")
        return getattr(module, generated.entry)

    def __call__(self, primals, tangents):
        if not isinstance(primals, (tuple, list)):  # (an array would be unpacked)
            raise TypeError(f"jvp takes its primals as a tuple, one per argument: jvp(f, (x,), "
                            f"(v,)); got a {type(primals).__name__}")
        primals = tuple(primals)
        if FlatView.applies(self.fun, primals) and not self.has_aux:
            # grad(f) of pytree arguments: the jvp of its flat entry, put back into pytrees
            view = FlatView(self.fun, primals)
            _tangent_leaves(primals, tangents)  # (checks the tangents' structure)
            out, out_dot = jvp_transform(view.entry)(view.flat, view.flat_tangents(tangents))
            return view.outputs(out), view.outputs(out_dot)
        names, values, specs = self._specs(primals, {})
        generated, module = self._generate(specs)
        flat = _flat_values(specs, names, values)
        tangents = _with_default_tangents(tangents, len(primals), values)
        if isinstance(tangents, (tuple, list)) and len(tangents) == len(values):
            # a static argument (a default vmap leaves out, say) has no tangent
            kept = [k for k, n in enumerate(names) if _spec_kind(specs[n]) != "static"]
            values, tangents = [values[k] for k in kept], [tangents[k] for k in kept]
        dots = _tangent_leaves(values, tangents)
        result = getattr(module, generated.entry)(*flat, *dots)
        out, out_dot = result[0], result[1]
        out_dot = _match_tree(out_dot, out)
        out, out_dot = _with_dicts(out, generated), _with_dicts(out_dot, generated)
        if self.has_aux:
            return out, out_dot, result[2]
        return out, out_dot


def jvp_transform(fun, has_aux=False, debug_nans=None):
    """The transformation behind :func:`jvp`: call it with ``(primals, tangents)``; after a
    call, ``.source`` is the generated module (``jvp_f(x, x_dot) -> (out, out_dot)``).

    >>> import numpy as np
    >>> t = jvp_transform(lambda x: np.sin(x) * 2.0)
    >>> _ = t((0.5,), (1.0,))
    >>> "x_dot" in t.source
    True
    """
    def make():
        transformed = _JvpTransform(fun, has_aux)
        transformed.debug_nans = debug_nans
        return transformed
    return _cached(("jvp", has_aux, debug_nans), fun, make)


def jvp(fun, primals, tangents, has_aux=False, debug_nans=None):
    """``(fun(*primals), J @ tangents)``: the output and its directional derivative.

    `primals` and `tangents` are tuples of the same pytree structure (JAX's ``jvp``); with
    has_aux=True `fun` returns ``(output, aux)`` and the result is ``(out, out_dot, aux)``.
    debug_nans=True raises at the first generated statement producing a NaN or inf.

    >>> import numpy as np
    >>> jvp(lambda x, y: x * y, (2.0, 3.0), (1.0, 0.0))
    (np.float64(6.0), np.float64(3.0))
    """
    return jvp_transform(fun, has_aux, debug_nans)(primals, tangents)


# ---------------------------------------------------------------- linearize
class _Linearized:
    """The tangent map returned by :func:`linearize`; `.source` shows the generated module."""

    def __init__(self, generated, module, residuals, out, values, lists=None):
        self.generated = generated
        self.lists = lists  # the lists the function returns (autodiff_ast/output_lists.py)
        self.values = values
        self.module = module
        self.residuals = residuals
        self.out = out
        self.source = generated.source

    def __call__(self, *tangents):
        n_primals = getattr(self, "n_primals", len(self.values))
        dots = _tangent_leaves(self.values, _with_default_tangents(tangents, n_primals,
                                                                   self.values))
        lin = getattr(self.module, self.generated.extra["lin"])
        out_dot = _match_tree(lin(*self.residuals, *dots), self.out)
        return restore_lists(_with_dicts(out_dot, self.generated), self.lists)


class _LinearizeTransform(_Transformed):
    kind = "linearize"

    def output_lists(self):
        return result_lists(self.fun, False, lambda out: (out, None))  # (out, f_jvp)

    def __call__(self, *primals):
        names, values, specs = self._specs(primals, {})
        py_fun = self._python_function(specs)
        generated, module = self._module_for(_spec_key(specs), lambda: build_linearize(
            py_fun, specs))
        flat = _flat_values(specs, names, values)
        result = getattr(module, generated.entry)(*flat)
        n_res = len(generated.layout["residuals"])
        if n_res == 0:
            result = (result,)
        out, residuals = result[0], result[1:]
        linearized = _Linearized(generated, module, residuals, out, values, lists_of(self.fun))
        linearized.fun = self.fun  # (for jit(linearized))
        linearized.n_primals = len(primals)  # (the others are defaults: constants)
        return _with_dicts(out, generated), linearized


def linearize(fun, *primals):
    """``(fun(*primals), f_jvp)`` where ``f_jvp(*tangents)`` is the tangent map at primals.

    The primal is computed once; ``f_jvp`` runs only the tangent code, on the values it keeps.

    >>> import numpy as np
    >>> out, f_jvp = linearize(np.sin, 0.5)
    >>> bool(np.isclose(f_jvp(2.0), 2.0 * np.cos(0.5)))
    True
    """
    transform = _cached("linearize", fun, lambda: _LinearizeTransform(fun))
    return transform(*primals)


# ---------------------------------------------------------------- Jacobians
def all_single_precision(values):
    """Whether every float leaf of `values` is float32 (and there is one)."""
    floats = [np.asarray(v).dtype for v in pytrees.tree_leaves(values)
              if np.issubdtype(np.asarray(v).dtype, np.floating)]
    return bool(floats) and all(d == np.float32 for d in floats)


def single_precision_like(values, tree):
    """float32 inputs give float32 Jacobians and Hessians (JAX's dtype rule)."""
    if not all_single_precision(values):
        return tree
    return pytrees.tree_map(
        lambda a: a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64
        else (np.float32(a) if isinstance(a, (float, np.float64)) else a), tree)


class _JacobianTransform(_Transformed):
    """``jacfwd`` / ``jacrev`` of a function: call it like the function; `.source` shows the
    generated module (vmap of the jvp or vjp module, and the wrapper that lays out blocks)."""

    def __init__(self, fun, argnums=0, has_aux=False, mode="fwd"):
        super().__init__(fun)
        self.argnums = argnums
        self.has_aux = has_aux
        self.mode = mode
        self.kind = "jacfwd" if mode == "fwd" else "jacrev"

    def output_lists(self):
        # the Jacobian has the output's structure (and has_aux's (jacobian, aux) is the
        # function's (output, aux)), each output leaf holding its blocks
        return lists_of(self.fun)

    def _argnums(self, specs, py_fun):
        info = parse_function(py_fun)
        single, nums = _normalize_argnums(self.argnums, len(specs), info)
        return Argnums(nums, single)

    def _generate(self, specs):
        key = _spec_key(specs)
        cached = self._modules.get(("plan", key))
        if cached is not None:  # the module and argnums of a signature seen before
            self._last = cached[:2]
            return cached
        self._refuse_non_float(specs)
        py_fun = self._python_function(specs)
        argnums = self._argnums(specs, py_fun)
        _, own_specs, own_nums = self._code_to_transform(specs, argnums)
        own_argnums = Argnums(own_nums, argnums.single)
        build = build_jacfwd if self.mode == "fwd" else build_jacrev
        key = (key, tuple(argnums), argnums.single)
        code = getattr(self._signature_function(), "__code__", None)
        label = (self.label(), code.co_filename if code else "<unknown>")
        generated, module = self._module_for(key, lambda: build(py_fun, own_specs, own_argnums,
                                                                self.has_aux, label))
        # Kept with the modules (jit starts a transform with none of them).
        self._modules[("plan", _spec_key(specs))] = (generated, module, argnums)
        return generated, module, argnums

    def _refuse_non_float(self, specs):
        """Differentiated arguments must be real floats, as for grad (NonFloatInputError)."""
        names = list(specs)
        nums = (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)
        for i in nums:
            if not isinstance(i, int) or not -len(names) <= i < len(names):
                continue  # a malformed argnums is reported by _argnums
            name, spec = names[i], specs[names[i]]
            leaves = spec.leaves(name) if isinstance(spec, TreeSpec) else [(name, spec)]
            for flat, t in leaves:
                if getattr(t, "is_float", False):
                    continue
                code = getattr(self._signature_function(), "__code__", None)
                if code is not None and code.co_filename.startswith("<autodiff-ast"):
                    code = None  # a NumPy function's stand-in has no file of the user's
                raise non_float_input(self.public_name(), name, flat, t,
                                      code.co_filename if code else None,
                                      code.co_firstlineno if code else None)

    def public_name(self):
        """``hessian(f)``, ``jacfwd(f)`` or ``jacrev(f)``, as the user wrote it."""
        inner = self.fun
        while isinstance(inner, _Transformed) and inner.py_fun is None:
            inner = inner.fun
        fn = getattr(inner, "__name__", "f")
        return f"{'hessian' if getattr(self, 'is_hessian', False) else self.kind}({fn})"

    def label(self):
        """How the docstring names this transform: ``jacfwd(jacrev(f))``."""
        inner = self.fun.label() if isinstance(self.fun, _JacobianTransform) else (
            f"{self.fun.kind}({getattr(self.fun, '__name__', 'f')})"
            if isinstance(self.fun, _Transformed) else getattr(self.fun, "__name__", "f"))
        options = "" if self.argnums == 0 else f", argnums={self.argnums}"
        return f"{self.kind}({inner}{options})"

    def function_for(self, specs):
        """The generated entry for these argument specs: flat arrays, or pytrees (then a
        one-line wrapper passes the leaves)."""
        if any(isinstance(s, Static) for s in specs.values()) and \
                any(isinstance(s, TreeSpec) for s in specs.values()):
            raise NotImplementedError(f"transforming {self.kind}(f) with static and pytree "
                                      "arguments together is not supported yet")
        generated, module, _ = self._generate(specs)
        _refuse_dict_outputs(generated, self.kind)
        entry = getattr(module, generated.entry)
        if any(isinstance(s, TreeSpec) for s in specs.values()):
            return tree_wrapper(entry, specs)
        return entry

    def __call__(self, *args, **kwargs):
        if not kwargs and not self.has_aux and FlatView.applies(self.fun, args):
            return self._of_flat_view(args)
        names, values, specs = self._specs(args, kwargs)  # keywords are placed by name
        nums = (self.argnums,) if isinstance(self.argnums, int) else tuple(self.argnums)
        differentiated = {i % len(names) for i in nums if isinstance(i, int) and
                          -len(names) <= i < len(names)}
        concrete = self._concrete_ints(
            names, values, {n for k, n in enumerate(names) if k not in differentiated})
        generated, module, argnums = self._generate_concrete(specs, concrete, self._generate)
        flat = _flat_values(specs, names, values)
        raw = getattr(module, generated.entry)(*flat)
        aux = None
        if self.has_aux:
            raw, aux = raw
        jac = single_precision_like(values, self.assemble(values, specs, raw))
        jac = _with_dicts(jac, generated)  # (a dict output's blocks, per entry)
        return (jac, aux) if self.has_aux else jac

    def _of_flat_view(self, args):
        """jacfwd/jacrev of grad(f) with pytree arguments: the Jacobian of grad's flat entry
        (one argument per leaf), each block put back into the argument's pytree and the
        blocks into the structure grad returns (JAX's nesting: output tree, then argnums)."""
        self._refuse_non_float(self._specs(args, {})[2])
        view = FlatView(self.fun, args)
        single = isinstance(self.argnums, int)
        nums = [a % len(args) if isinstance(a, int) and -len(args) <= a < len(args) else a
                for a in ((self.argnums,) if single else tuple(self.argnums))]
        spans = view.spans
        try:
            leaf_nums = tuple(i for a in nums for i in spans[a] if _float_leaf(view.flat[i]))
        except (IndexError, TypeError):
            raise ArgnumsError(f"{self.kind}: argnums={self.argnums!r} does not name "
                               f"arguments of a function called with {len(args)}",
                               hint=f"use argnums between 0 and {len(args) - 1}") from None
        inner = self.__dict__.setdefault("_flat_jacobians", {}).get(view.entry)
        if inner is None:
            inner = _JacobianTransform(view.entry, leaf_nums, mode=self.mode)
            self._flat_jacobians[view.entry] = inner
        raw = inner(*view.flat)
        pieces = raw if view.n_out > 1 else (raw,)

        def blocks(piece):
            by_leaf = dict(zip(leaf_nums, piece))
            per_arg = []
            for a in nums:
                leaves = [by_leaf.get(i) for i in spans[a]]
                per_arg.append(pytrees.tree_unflatten(pytrees.tree_structure(
                    view.values[a]), leaves) if view.trees[a] else leaves[0])
            return per_arg[0] if single else tuple(per_arg)
        out = view.outputs(tuple(blocks(p) for p in pieces) if view.n_out > 1
                           else blocks(pieces[0]))
        return single_precision_like(view.values, out)

    def assembles_as_is(self, specs):
        """Whether :meth:`assemble` returns the module's result unchanged for these specs:
        one argument differentiated, no pytree arguments, one output (at every level of a
        nested Jacobian). jit's fast path then hands the compiled result straight back."""
        if any(isinstance(s, TreeSpec) for s in specs.values()):
            return False
        generated, _, argnums = self._generate(specs)
        out_type = generated.layout["out_type"]
        if not argnums.single or (out_type.kind == "tuple" and out_type.elts is not None):
            return False
        return not isinstance(self.fun, _JacobianTransform) or self.fun.assembles_as_is(specs)

    def assemble(self, values, specs, raw):
        """The generated module's nested tuples (output structure, then arguments) as JAX's
        Jacobian pytree; `raw`'s leaves may be any objects (a composed transform's pieces)."""
        generated, _, argnums = self._generate(specs)
        names = list(specs)

        def per_arg(k, piece):
            spec = specs[names[k]]
            if not isinstance(spec, TreeSpec):
                return piece
            leaves, treedef = pytrees.tree_flatten(values[k])
            pieces = iter(piece)
            return pytrees.tree_unflatten(treedef, [next(pieces) if _float_leaf(v) else None
                                                    for v in leaves])

        def walk(typ, r):
            if typ.kind == "tuple" and typ.elts is not None:
                return tuple(walk(e, x) for e, x in zip(typ.elts, r))
            if argnums.single:
                return per_arg(argnums[0], r)
            return tuple(per_arg(k, x) for k, x in zip(argnums, r))

        result = walk(generated.layout["out_type"], raw)
        if isinstance(self.fun, _JacobianTransform):  # the inner Jacobian's own structure
            result = self.fun.assemble(values, specs, result)
        return result


def tree_wrapper(entry, specs):
    """A function taking pytree arguments that calls `entry` with their leaves (source)."""
    params = list(specs)
    leaves = []
    for pname, spec in specs.items():
        leaves += _leaf_access(pname, spec) if isinstance(spec, TreeSpec) else [pname]
    fname = f"{entry.__name__}_tree"
    text = (f"def {fname}({', '.join(params)}):\n"
            f"    return {entry.__name__}({', '.join(leaves)})\n")
    return source_function(text, fname, {entry.__name__: entry})


def _leaf_access(base, spec):
    out = []
    for key, child in spec.children:
        if spec.kind in ("dict", "ordered_dict", "default_dict"):
            expr = f"{base}[{key!r}]"
        elif spec.kind in ("list", "tuple"):
            expr = f"{base}[{key}]"
        elif spec.kind in ("namedtuple", "dataclass"):
            expr = f"{base}.{key}"
        else:
            raise NotImplementedError(f"transforming a Jacobian of a {spec.kind} pytree "
                                      "argument is not supported yet")
        if isinstance(child, TreeSpec):
            out += _leaf_access(expr, child)
        elif not isinstance(child, Static):
            out.append(expr)
    return out


def jacfwd(fun, argnums=0, has_aux=False):
    """The Jacobian of `fun` by forward mode (JAX's ``jacfwd``): shape ``out.shape +
    in.shape``, pytrees nested output-first. Every basis direction goes through one vectorized
    tangent pass (vmap of the generated jvp module).

    >>> import numpy as np
    >>> jacfwd(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    return _JacobianTransform(fun, argnums, has_aux, "fwd")


def jacrev(fun, argnums=0, has_aux=False):
    """The Jacobian of `fun` by reverse mode (JAX's ``jacrev``): one forward pass, then every
    output cotangent pulled back in one vectorized pass (vmap of the generated backward code).

    >>> import numpy as np
    >>> jacrev(lambda x: np.sin(x) * x[0])(np.array([0.0, 1.0]))
    array([[0.        , 0.        ],
           [0.84147098, 0.        ]])
    """
    return _JacobianTransform(fun, argnums, has_aux, "rev")


def hessian(fun, argnums=0):
    """The Hessian of a scalar function: ``jacfwd(jacrev(fun, argnums), argnums)``.

    >>> import numpy as np
    >>> hessian(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]))
    array([[ 6.,  0.],
           [ 0., 12.]])
    """
    outer = jacfwd(jacrev(fun, argnums), argnums)
    outer.is_hessian = True  # names it in error messages
    return outer


# ---------------------------------------------------------------- inside differentiated code
def _route_jvp(normalizer, fn, node, target):
    """``jvp(f, (x, y), (x_dot, y_dot))`` written in a function being transformed: a call to
    the generated ``jvp_f`` (whose source is differentiated like any helper)."""
    from .normalize import atom_type
    args = list(node.args)
    keywords = {k.arg: k.value for k in node.keywords}
    for k, key in enumerate(("fun", "primals", "tangents")):
        if len(args) <= k and key in keywords:
            args.append(keywords.pop(key))
    has_aux = False
    if "has_aux" in keywords:
        flag = normalizer.expr(keywords.pop("has_aux"))
        has_aux = bool(getattr(flag, "value", False))
    if len(args) != 3 or keywords:
        raise normalizer.unsupported("write jvp(f, (x, ...), (x_dot, ...)) with the primals "
                                     "and tangents as tuples", node)
    from .normalize import LocalFunction
    fun = normalizer.expr(args[0])
    local = fun.value if isinstance(fun, Static) and \
        isinstance(fun.value, LocalFunction) else None
    if not isinstance(fun, Static) or not (callable(fun.value) or local is not None):
        raise normalizer.unsupported("the function passed to jvp must be known when the code "
                                     "is transformed (a global, closure or nested function, "
                                     "or a lambda)", node)
    displays = []
    for arg, what in ((args[1], "primals"), (args[2], "tangents")):
        if not isinstance(arg, (gast.Tuple, gast.List)):
            raise normalizer.unsupported(f"jvp's {what} must be written as a tuple display, "
                                         f"e.g. (x,)", node)
        displays.append([normalizer.atom(e) for e in arg.elts])
    primals, tangents = displays
    if len(primals) != len(tangents):
        raise normalizer.unsupported("jvp needs one tangent per primal", node)
    function = fun.value
    if local is not None:  # (the lifted function is made once per text: jvp's cache keeps)
        # (a lambda or nested def: its free variables are passed as primals of their own,
        # with zero tangents: constants of the derivative, as a closure's values are in JAX)
        if len(primals) != len(local.node.args.args):
            raise normalizer.unsupported(f"jvp of {local.name} needs one primal per parameter "
                                         f"({len(local.node.args.args)})", node)
        function, free = normalizer.lifted(local, node)
        for atom in free:
            primals.append(atom)
            zeros = normalizer.call_rule(rules.lookup(np.zeros_like), [], [], node, None,
                                         first=atom) if atom_type(
                atom, normalizer.types).kind == "array" else gast.Constant(value=0.0, kind=None)
            tangents.append(zeros)
    transform = _cached(("jvp", has_aux), function,
                        lambda: _JvpTransform(function, has_aux))
    parameters = inspect.signature(transform._signature_function()).parameters
    names = list(parameters)
    tangents = list(tangents)
    for n in names[len(primals):]:  # filled in by their defaults: constants, as in JAX
        default = parameters[n].default
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            primals.append(gast.Constant(value=default, kind=None))
            tangents.append(gast.Constant(value=0.0, kind=None))
    specs = {n: atom_type(a, normalizer.types) for n, a in zip(names, primals)}
    try:
        with code_to_transform():  # the caller's code, with this call's, may be transformed
            entry = transform.function_for(specs)
    except NotImplementedError as exc:
        raise normalizer.unsupported(str(exc), node) from None
    dots = [t for p, t in zip(primals, tangents) if atom_type(p, normalizer.types).is_float]
    return normalizer.call_user(entry, node, target, atoms=primals + dots)


def _route_constructor(normalizer, fn, node, target):
    """``jacfwd(f)``, ``hessian(f, 1)``... written in transformed code: built now, once (their
    arguments must be known statically)."""
    from .normalize import _NOT_STATIC, LocalFunction, _static_value
    atoms = [normalizer.expr(a) for a in node.args]
    if atoms and isinstance(atoms[0], Static) and isinstance(atoms[0].value, LocalFunction):
        return normalizer.transform_of_local(fn, atoms, {k.arg: normalizer.expr(k.value)
                                                         for k in node.keywords}, node)
    args = [_static_value(a) for a in atoms]
    kwargs = {k.arg: _static_value(normalizer.expr(k.value)) for k in node.keywords}
    if any(v is _NOT_STATIC for v in args + list(kwargs.values())):
        raise normalizer.unsupported(f"{fn.__name__}(...) inside transformed code needs "
                                     "arguments known when the code is transformed", node)
    return Static(fn(*args, **kwargs))


register_route(jvp, _route_jvp)
for _constructor in (jacfwd, jacrev, hessian):
    register_route(_constructor, _route_constructor)


__all__ = ["jvp", "jvp_transform", "linearize", "jacfwd", "jacrev", "hessian"]
