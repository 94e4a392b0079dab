"""``jit`` of the maps that :func:`vjp` and :func:`linearize` return.

A pullback (``vjp(f, x)[1]``) and a linearized map (``linearize(f, x)[1]``) run generated NumPy
code bound to their primal point; they are not functions whose source jit could read. JAX
users compile them all the same (``jit(pullback)``), so this module writes the function each
one computes, as source the front end reads like the user's own:

- a pullback at ``x`` maps ``ct`` to the gradient of ``np.sum(f(x) * ct)`` (summed per output
  for a tuple of outputs): ``jit(grad(that, argnums=every primal))``, called with the primals;
- a linearized map at ``x`` maps tangents ``t`` to ``jvp(f, x, t)[1]``: ``jit(that)``.

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

__all__ = ["jit_of_bound_map"]


def jit_of_bound_map(bound, jit_options, static=()):
    """The jitted function for a pullback or a linearized map (`jit_options`: jit's keyword
    arguments other than the function and the static arguments, which such a map does not
    take), or None when `bound` is neither."""
    from .api import _Pullback
    from .jacobians import _Linearized
    if static and isinstance(bound, (_Pullback, _Linearized)):
        raise StaticArgumentError("jit of a pullback or a linearized map takes no static "
                                  "arguments", hint="leave out static_argnums/static_argnames")
    if isinstance(bound, _Pullback):
        return _jit_pullback(bound, jit_options)
    if isinstance(bound, _Linearized):
        return _jit_linearized(bound, jit_options)
    return None


def _refuse(what, why):
    return UnsupportedError(
        f"jit of {what}: {why}",
        hint="call it as it is (it runs the generated NumPy code), or jit the function it "
             "computes: for a pullback, jit(grad(g)) of `def g(x, ct): return np.sum(f(x) * "
             "ct)`; for a linearized map, jit(g) of `def g(x, t): return jvp(f, (x,), (t,))[1]`")


def _jit_pullback(pullback, jit_options):
    from .api import grad
    from .jit import jit
    fun = getattr(pullback, "fun", None)
    if fun is None or getattr(pullback, "one_tuple", False):
        raise _refuse("this pullback", "it was made where its function is not known")
    likes = getattr(pullback, "out_likes", None) or []
    if any(isinstance(o, (dict, list, tuple)) for o in likes):
        raise _refuse("this pullback", "an output that is itself a pytree is not supported")
    n = getattr(pullback, "n_primals", len(pullback.values))
    params = [f"x{i}" for i in range(n)]
    out = "fun(" + ", ".join(params) + ")" + ("[0]" if pullback.has_aux else "")
    if pullback.tuple_out:
        terms = [f"np.sum(out[{k}] * ct[{k}])" for k in range(len(likes))]
    else:
        terms = ["np.sum(out * ct)"]
    name = _name("pullback", fun)
    body = [f"out = {out}", f"return {' + '.join(terms)}"]
    dot = _function(name, params + ["ct"], body, {"fun": fun})
    compiled = jit(grad(dot, argnums=tuple(range(n))), **jit_options)
    primals = tuple(pullback.values[:n])

    def jitted_pullback(cotangent):
        return compiled(*primals, cotangent)
    jitted_pullback.compiled = compiled
    return jitted_pullback


def _jit_linearized(linearized, jit_options):
    from .jacobians import jvp
    from .jit import jit
    fun = getattr(linearized, "fun", None)
    if fun is None or linearized.lists:
        raise _refuse("this linearized map", "its function returns lists built at run time")
    n = getattr(linearized, "n_primals", len(linearized.values))
    params = [f"x{i}" for i in range(n)]
    tangents = [f"t{i}" for i in range(n)]
    name = _name("linearized", fun)
    body = [f"return jvp(fun, ({', '.join(params)},), ({', '.join(tangents)},))[1]"]
    tangent_map = _function(name, params + tangents, body, {"fun": fun, "jvp": jvp})
    compiled = jit(tangent_map, **jit_options)
    primals = tuple(linearized.values[:n])

    def jitted_linearized(*dots):
        return compiled(*primals, *dots)
    jitted_linearized.compiled = compiled
    return jitted_linearized


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
