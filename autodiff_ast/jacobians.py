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

import weakref

import numpy as np

from . import pytrees
from .api import _flat_values, _match_leaf, _prepare_leaf, _spec_key, _Transformed
from .build_forward import build_jvp, build_linearize
from .normalize import Static, TreeSpec


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
    if not isinstance(tangents, (tuple, list)) or len(tangents) != len(primals):
        raise TypeError(f"jvp needs one tangent per primal: got {len(primals)} primal(s) and "
                        f"{len(tangents) if isinstance(tangents, (tuple, list)) else tangents!r}"
                        " tangent(s)")
    out = []
    for k, (p, t) in enumerate(zip(primals, tangents)):
        p_leaves, p_def = pytrees.tree_flatten(p)
        t_leaves, t_def = pytrees.tree_flatten(t)
        if p_def != t_def:
            raise TypeError(f"jvp: primal {k} has structure {p_def} but its tangent has "
                            f"structure {t_def}")
        for pl, tl in zip(p_leaves, t_leaves):
            if not _float_leaf(pl):
                continue
            if np.shape(tl) != np.shape(pl):
                raise ValueError(f"jvp: a tangent of shape {np.shape(tl)} was given for a "
                                 f"primal of shape {np.shape(pl)} (argument {k})")
            if isinstance(pl, np.ndarray):
                out.append(_prepare_leaf(np.asarray(tl, dtype=pl.dtype)))
            else:
                out.append(float(tl))
    return out


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

    def function_for(self, specs):
        """The entry ``jvp_f(x..., x_dot...) -> (out, out_dot)`` for flat argument specs."""
        _flat_specs(specs, "jvp")
        generated, module = self._generate(specs)
        return getattr(module, generated.entry)

    def __call__(self, primals, tangents):
        primals = tuple(primals)
        names, values, specs = self._specs(primals, {})
        generated, module = self._generate(specs)
        flat = _flat_values(specs, names, values)
        dots = _tangent_leaves(values, tuple(tangents))
        result = getattr(module, generated.entry)(*flat, *dots)
        out, out_dot = result[0], result[1]
        out_dot = _match_tree(out_dot, out)
        if self.has_aux:
            return out, out_dot, result[2]
        return out, out_dot


def jvp(fun, primals, tangents, has_aux=False):
    """``(fun(*primals), J @ tangents)``: the output and its directional derivative.

    `primals` and `tangents` are tuples of the same pytree structure (JAX's ``jvp``); with
    has_aux=True `fun` returns ``(output, aux)`` and the result is ``(out, out_dot, aux)``.

    >>> import numpy as np
    >>> jvp(lambda x, y: x * y, (2.0, 3.0), (1.0, 0.0))
    (6.0, 3.0)
    """
    transform = _cached(("jvp", has_aux), fun, lambda: _JvpTransform(fun, has_aux))
    return transform(primals, tangents)


# ---------------------------------------------------------------- linearize
class _Linearized:
    """The tangent map returned by :func:`linearize`; `.source` shows the generated module."""

    def __init__(self, generated, module, residuals, out, values):
        self.generated = generated
        self.values = values
        self.module = module
        self.residuals = residuals
        self.out = out
        self.source = generated.source

    def __call__(self, *tangents):
        dots = _tangent_leaves(self.values, tangents)
        lin = getattr(self.module, self.generated.extra["lin"])
        return _match_tree(lin(*self.residuals, *dots), self.out)


class _LinearizeTransform(_Transformed):
    kind = "linearize"

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
        return out, _Linearized(generated, module, residuals, out, values)


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


__all__ = ["jvp", "linearize"]
