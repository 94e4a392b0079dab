"""``check_grads``: compare generated derivatives with central finite differences.

For each requested mode, in a random direction ``v`` of the inputs and a random cotangent ``u``
of the output: forward mode compares ``jvp(f, x, v)`` with ``(f(x + eps v) - f(x - eps v)) /
2 eps``; reverse mode compares ``<vjp(f, x)(u), v>`` with ``<u, that finite difference>``; with
both, the two modes must also agree with each other (a dot-product test). Order 2 repeats the
check on the gradient of ``<u, f(x)>`` and, with 'fwd', also on ``<u, jvp(f, x, v)>`` (the
first derivative by forward mode), each in every requested mode: the generated derivative code
itself is the function under test, and forward-over-forward, forward-over-reverse,
reverse-over-forward and reverse-over-reverse must all agree with finite differences.

>>> import numpy as np
>>> check_grads(lambda x: np.sin(x) * x, (np.linspace(0.1, 1.0, 4),), order=1, modes=("rev",))
"""

from __future__ import annotations

import linecache

import numpy as np

from . import pytrees


def _float_leaf(x):
    return isinstance(x, (float, np.floating)) or (
        isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating))


def _random_like(tree, rng):
    def draw(x):
        if not _float_leaf(x):
            return None
        if isinstance(x, np.ndarray):
            return rng.standard_normal(x.shape).astype(x.dtype)
        return float(rng.standard_normal())
    return pytrees.tree_map(draw, tree)


def _axpy(a, x, y):
    """y + a * x over pytrees (leaves of x that are None leave y's leaf as it is)."""
    def step(yi, xi):
        if xi is None:
            return yi
        if isinstance(yi, np.ndarray):
            return (yi + a * xi).astype(yi.dtype)
        return type(yi)(yi + a * xi) if isinstance(yi, np.floating) else yi + a * xi
    return pytrees.tree_map(step, y, x)


def _inner(a, b):
    total = 0.0
    # None (no direction for an int argument) stays a leaf, so the two sides stay aligned.
    def leaves(tree):
        return pytrees.tree_leaves(tree, is_leaf=lambda v: v is None)
    for x, y in zip(leaves(a), leaves(b)):
        if x is None or y is None:
            continue
        total += float(np.sum(np.asarray(x, dtype=float) * np.asarray(y, dtype=float)))
    return total


def _close(a, b, atol, rtol, what):
    if not np.isfinite(a) or not np.isfinite(b) or abs(a - b) > atol + rtol * max(abs(a),
                                                                                  abs(b)):
        raise AssertionError(f"{what}: {a!r} != {b!r} (atol={atol}, rtol={rtol})")


class FiniteDifferencesUnsettled(AssertionError):
    """Central differences give different answers at every step size near this point (the
    function is too steep or too rough there), so they cannot judge the derivative. Raised by
    :func:`check_grads` only after forward and reverse mode agreed with each other."""


def _fd_matches(value, fd_at, eps, atol, rtol, what, scale=0.0):
    """Whether `value` matches central differences: at `eps`, or else at the limit that
    Richardson extrapolation over steps 100*eps ... eps/100 settles on. Returns False when the
    estimates never settle (nothing to compare with); raises AssertionError on a mismatch.

    `scale` is the size of the function's values (as seen through the cotangent): a step h
    cannot resolve a slope finer than about ``4 * 2.2e-16 * scale / h`` (rounding of the
    values themselves), so estimates from such steps do not count as settled."""
    first = fd_at(eps)
    if np.isfinite(value) and np.isfinite(first) and \
            abs(value - first) <= atol + rtol * max(abs(value), abs(first)):
        return True
    steps = [eps * 10.0 ** k for k in (2, 1, 0, -1, -2)]
    estimates = [fd_at(h) if h != eps else first for h in steps]
    refined = [(100.0 * b - a) / 99.0 for a, b in zip(estimates, estimates[1:])]
    tolerance = atol + rtol * abs(value)
    for k, (a, b) in enumerate(zip(refined, refined[1:])):
        resolvable = 4 * 2.2e-16 * scale / steps[k + 2] <= tolerance
        if resolvable and np.isfinite(a) and np.isfinite(b) and \
                abs(a - b) <= atol + rtol * max(abs(a), abs(b)):
            _close(value, b, atol, rtol, what)
            return True
    return False


def _finite_difference(f, args, direction, eps):
    plus = f(*_axpy(eps, direction, tuple(args)))
    minus = f(*_axpy(-eps, direction, tuple(args)))
    return pytrees.tree_map(lambda p, m: (np.asarray(p, dtype=float) - np.asarray(
        m, dtype=float)) / (2 * eps), plus, minus)


def check_grads(f, args, order=1, modes=("fwd", "rev"), atol=None, rtol=None, eps=None,
                seed=0):
    """Raise AssertionError unless f's generated derivatives match finite differences.

    args is a tuple of positional arguments (pytrees allowed). modes names 'fwd' and/or 'rev'.

    >>> import numpy as np
    >>> check_grads(np.tanh, (np.array([0.3, -1.2]),), modes=("rev",))
    """
    from . import api
    if isinstance(modes, str):
        modes = (modes,)
    args = tuple(args)
    leaves = [x for x in pytrees.tree_leaves(args) if _float_leaf(x)]
    single = all(np.asarray(x).dtype == np.float32 for x in leaves) and leaves
    eps = eps or (1e-3 if single else 1e-6)
    atol = atol if atol is not None else (1e-2 if single else 1e-5)
    rtol = rtol if rtol is not None else (1e-2 if single else 1e-5)
    rng = np.random.default_rng(seed)
    direction = _random_like(args, rng)
    out = f(*args)
    cotangent = _random_like(out, rng)

    def fd_at(h):
        return _inner(cotangent, _finite_difference(f, args, direction, h))
    scale = float(_inner(pytrees.tree_map(np.abs, cotangent), pytrees.tree_map(np.abs, out)))
    settled = True
    tangent_out = None
    if "fwd" in modes:
        from .jacobians import jvp
        _, tangent_out = jvp(f, args, direction)
        settled &= _fd_matches(_inner(cotangent, tangent_out), fd_at, eps, atol, rtol,
                               "forward mode (jvp) disagrees with finite differences", scale)
    if "rev" in modes:
        _, pullback = api.vjp(f, *args)
        ct_in = pullback(cotangent)
        settled &= _fd_matches(_inner(ct_in, direction), fd_at, eps, atol, rtol,
                               "reverse mode (vjp) disagrees with finite differences", scale)
        if tangent_out is not None:
            _close(_inner(ct_in, direction), _inner(cotangent, tangent_out), atol, rtol,
                   "forward and reverse mode disagree (dot-product test)")
    if not settled:
        raise FiniteDifferencesUnsettled(
            f"finite differences do not settle at this point (central differences at steps "
            f"{eps * 100:g} ... {eps / 100:g}: {[float(fd_at(h)) for h in (eps * 100, eps / 100)]}"
            "), so "
            "they cannot check the derivative here; try other arguments")
    if order > 1:
        inner = scalarized(f, cotangent, len(args))
        floats = tuple(i for i, a in enumerate(args)
                       if any(_float_leaf(x) for x in pytrees.tree_leaves(a)))
        argnums = floats[0] if len(floats) == 1 and len(args) == 1 else floats
        check_grads(api.grad(inner, argnums=argnums), args, order - 1, modes, atol * 10,
                    rtol * 10, eps, seed + 1)
        if "fwd" in modes and _flat(args) and _flat(out):
            # The first derivative by forward mode too: <cotangent, jvp(f, args, direction)>,
            # checked in both modes (forward-over-forward, reverse-over-forward).
            check_grads(directional(f, direction, cotangent, len(args)), args, order - 1,
                        modes, atol * 10, rtol * 10, eps, seed + 2)


def _flat(tree):
    """Whether `tree` is an array or a float, or a tuple of them (no other containers)."""
    if isinstance(tree, tuple):
        return all(_float_leaf(x) for x in tree)
    return _float_leaf(tree)


def directional(f, direction, cotangent, nargs):
    """A Python function ``d(*args) = <cotangent, jvp(f, args, direction)[1]>`` with a real
    source (the derivative it contains is generated by forward mode)."""
    names = ", ".join(f"x{i}" for i in range(nargs))
    dots = ", ".join(f"v{i}" for i in range(nargs))
    if isinstance(cotangent, tuple):
        total = " + ".join(f"np.sum(c{i} * out_dot[{i}])" for i in range(len(cotangent)))
    else:
        total = "np.sum(c0 * out_dot)"
    _COUNTER[0] += 1
    filename = f"<autodiff-ast check_grads {_COUNTER[0]}>"
    source = (f"def directional({names}):\n    out, out_dot = jvp(f, ({names},), ({dots},))\n"
              f"    return {total}\n")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    from .jacobians import jvp
    namespace = {"np": np, "f": f, "jvp": jvp, "__name__": "autodiff_ast_check_grads"}
    namespace.update({f"v{i}": v for i, v in enumerate(direction)})
    cts = cotangent if isinstance(cotangent, tuple) else (cotangent,)
    namespace.update({f"c{i}": c for i, c in enumerate(cts)})
    exec(compile(source, filename, "exec"), namespace)
    return namespace["directional"]


_COUNTER = [0]


def scalarized(f, cotangent, nargs):
    """A Python function ``s(*args) = <cotangent, f(*args)>`` with a real source."""
    names = ", ".join(f"x{i}" for i in range(nargs))
    _COUNTER[0] += 1
    filename = f"<autodiff-ast check_grads {_COUNTER[0]}>"
    source = f"def scalarized({names}):\n    return np.sum(cotangent * f({names}))\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np, "cotangent": cotangent, "f": f}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["scalarized"]
