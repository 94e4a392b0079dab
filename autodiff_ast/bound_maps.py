"""``jit`` and ``vmap`` of the maps that :func:`vjp` and :func:`linearize` return.

A pullback (``vjp(f, x)[1]``) and a linearized map (``linearize(f, x)[1]``) run generated NumPy
code bound to their primal point; they are not functions whose source jit could read. JAX
users compile them all the same (``jit(pullback)``), so this module writes the function each
one computes, as source the front end reads like the user's own:

- a pullback at ``x`` maps ``ct`` to the gradient of ``np.sum(f(x) * ct)`` (summed per output
  for a tuple of outputs): ``jit(grad(that, argnums=every primal))``, called with the primals;
- a linearized map at ``x`` maps tangents ``t`` to ``jvp(f, x, t)[1]``: ``jit(that)``.

``vmap`` of either maps that function over the tangents (cotangents), the primals shared.

Both recompute f's forward pass on each call (the compiled code keeps no residuals between
calls); the values are those of the map itself.

>>> import numpy as np
>>> import autodiff_ast as ad
>>> def f(x):
...     return np.sin(x) * x
>>> out, pullback = ad.vjp(f, np.array([0.5, 1.0]))
>>> compiled = ad.jit(pullback, target="python")
>>> np.allclose(compiled(np.ones(2))[0], pullback(np.ones(2))[0])
True
"""

from __future__ import annotations

import numpy as np

from .errors import StaticArgumentError, UnsupportedError

__all__ = ["jit_of_bound_map", "vmap_of_bound_map"]


def jit_of_bound_map(bound, jit_options, static=()):
    """The jitted function for a pullback or a linearized map (`jit_options`: jit's keyword
    arguments other than the function and the static arguments, which such a map does not
    take), or None when `bound` is neither."""
    from .api import _Pullback
    from .jacobians import _Linearized
    if static and isinstance(bound, (_Pullback, _Linearized)):
        raise StaticArgumentError("jit of a pullback or a linearized map takes no static "
                                  "arguments", hint="leave out static_argnums/static_argnames")
    if isinstance(bound, (_Pullback, _Linearized)):
        return _jit_computed(bound, jit_options)
    return None


def _refuse(what, why, transform="jit"):
    return UnsupportedError(
        f"{transform} of {what}: {why}",
        hint="call it as it is (it runs the generated NumPy code), or jit the function it "
             "computes: for a pullback, jit(grad(g)) of `def g(x, ct): return np.sum(f(x) * "
             "ct)`; for a linearized map, jit(g) of `def g(x, t): return jvp(f, (x,), (t,))[1]`")


def _cotangent_map(pullback, what="jit"):
    """(the function of the primals and the cotangent whose gradient in the primals is the
    pullback's value, the primals)."""
    fun = getattr(pullback, "fun", None)
    if fun is None or getattr(pullback, "one_tuple", False):
        raise _refuse("this pullback", "it was made where its function is not known", what)
    likes = getattr(pullback, "out_likes", None) or []
    if any(isinstance(o, (dict, list, tuple)) for o in likes):
        raise _refuse("this pullback", "an output that is itself a pytree is not supported",
                      what)
    n = getattr(pullback, "n_primals", len(pullback.values))
    params = [f"x{i}" for i in range(n)]
    out = "fun(" + ", ".join(params) + ")" + ("[0]" if pullback.has_aux else "")
    if pullback.tuple_out:
        terms = [f"np.sum(out[{k}] * ct[{k}])" for k in range(len(likes))]
    else:
        terms = ["np.sum(out * ct)"]
    name = _name("pullback", fun)
    body = [f"out = {out}", f"return {' + '.join(terms)}"]
    return _function(name, params + ["ct"], body, {"fun": fun}), tuple(pullback.values[:n])


def _tangent_map(linearized, what="jit"):
    """(the function of the primals and the tangents giving the linearized map's value, the
    primals)."""
    from .jacobians import jvp
    fun = getattr(linearized, "fun", None)
    if fun is None or linearized.lists:
        raise _refuse("this linearized map", "its function returns lists built at run time",
                      what)
    n = getattr(linearized, "n_primals", len(linearized.values))
    params = [f"x{i}" for i in range(n)]
    tangents = [f"t{i}" for i in range(n)]
    name = _name("linearized", fun)
    body = [f"return jvp(fun, ({', '.join(params)},), ({', '.join(tangents)},))[1]"]
    return _function(name, params + tangents, body, {"fun": fun, "jvp": jvp}), \
        tuple(linearized.values[:n])


def _computed_function(bound, what):
    """(the function a pullback or linearized map computes, of the primals then the
    cotangent or tangents; the primals; how many cotangents or tangents it takes), or None
    when `bound` is neither."""
    from .api import _Pullback, grad
    from .jacobians import _Linearized
    if isinstance(bound, _Pullback):
        dot, primals = _cotangent_map(bound, what)
        return grad(dot, argnums=tuple(range(len(primals)))), primals, 1
    if isinstance(bound, _Linearized):
        function, primals = _tangent_map(bound, what)
        return function, primals, len(primals)
    return None


def _jit_computed(bound, jit_options):
    from .jit import jit
    function, primals, _ = _computed_function(bound, "jit")
    compiled = jit(function, **jit_options)

    def jitted_map(*dots):
        return compiled(*primals, *dots)
    jitted_map.compiled = compiled
    return jitted_map


def vmap_of_bound_map(bound, in_axes, out_axes, vmap_options):
    """vmap of a pullback or a linearized map (JAX's ``vmap(f_jvp)``): the function it computes
    (as for jit) mapped over the cotangent or tangents, the primals shared; None when `bound`
    is neither. `in_axes` is the map's own (one per tangent)."""
    from .batching import vmap
    computed = _computed_function(bound, "vmap")
    if computed is None:
        return None
    function, primals, count = computed
    if isinstance(in_axes, (list, tuple)):
        if len(in_axes) != count:
            raise UnsupportedError(
                f"vmap: in_axes has {len(in_axes)} entries for a map of {count} argument"
                f"{'s' if count > 1 else ''}",
                hint="give one axis per tangent (or cotangent), or one int for all")
        axes = tuple(in_axes)
    else:
        axes = (in_axes,) * count
    mapped = vmap(function, in_axes=(None,) * len(primals) + axes, out_axes=out_axes,
                  **vmap_options)

    def vmapped_map(*dots):
        return mapped(*primals, *dots)
    vmapped_map.vmapped = mapped
    return vmapped_map


def _name(kind, fun):
    base = getattr(fun, "__name__", "f")
    base = base if base.isidentifier() else "f"
    return f"{kind}_of_{base}"


def _function(name, params, body, names):
    """A Python function with readable source (registered in linecache: the front end reads
    it like the user's own) whose globals hold NumPy as np and `names`."""
    from .custom import source_function
    source = f"def {name}({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)
    return source_function(source, name, {"np": np, **names})
