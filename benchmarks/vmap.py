"""Benchmark: per-example gradients with vmap(grad(f)), against JAX and a Python loop.

Two workloads, as the vmap issue asks:

- the gradient of a 3-tap convolution loss with respect to the taps, for each of 1,000 vectors
  of length 100 (one gradient per example);
- the gradient of a small MLP's squared error with respect to every parameter (a dict of
  arrays), for each of 1,000 examples.

Ours is ``vmap(grad(f), in_axes=...)``: generated NumPy source processing the whole batch at
once, and compiled by Numba: ``jit(vmap(grad(f)))`` with ``batching='auto'`` (the notes say
what it chose), ``'vectorized'`` (vmap's module) and ``'loop'`` (a ``numba.prange`` loop over
the compiled per-example function, autodiff_ast/batch_loop.py). Competitors: JAX's
``jit(vmap(grad(f)))`` (when JAX is installed: ``pip install -e '.[bench]'``) and a Python loop
calling our per-example ``grad(f)`` once per example. Times are the median of several repeats
of one call on warm caches (generation and compilation are reported separately, in the notes).

``run()`` returns one dict per measurement: ``name``, ``ours_s``, ``competitors`` ({name:
seconds}) and ``notes``. Run this file directly to print them.
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from timing import first_call, median_time  # noqa: E402 (benchmarks/ is on sys.path now)

BATCH = 1000
LENGTH = 100
MLP_SIZES = (10, 32, 1)  # inputs, hidden units, outputs


# ---------------------------------------------------------------- the functions (NumPy)
def conv_loss(w, x):
    """Squared output of a 3-tap convolution of x with taps w."""
    y = x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2]
    return np.sum(y * y)


def mlp_loss(params, x, y):
    """Squared error of a one-hidden-layer tanh network on one example."""
    h = np.tanh(np.dot(params["W1"], x) + params["b1"])
    out = np.dot(params["W2"], h) + params["b2"]
    return np.sum((out - y) ** 2)


def _generated_entry(transformed, *example):
    """The function grad generated for these arguments (flat leaves in, no call overhead)."""
    transformed(*example)
    generated, module = transformed._last
    return getattr(module, generated.entry)


# ---------------------------------------------------------------- competitors
def _jax_conv():
    import jax
    import jax.numpy as jnp

    def loss(w, x):
        y = x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2]
        return jnp.sum(y * y)
    return jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0)))


def _jax_mlp():
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        h = jnp.tanh(jnp.dot(params["W1"], x) + params["b1"])
        out = jnp.dot(params["W2"], h) + params["b2"]
        return jnp.sum((out - y) ** 2)
    return jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))


def _jax_time(make, args, check):
    """(seconds, note) for JAX, or (None, why not) when JAX is absent."""
    try:
        import jax
    except ImportError:
        return None, "JAX not installed (pip install -e '.[bench]')"
    jax.config.update("jax_enable_x64", True)  # float64, like ours
    fn, out, first = first_call(make, *args)
    check(jax.tree_util.tree_map(np.asarray, out))

    def call():
        jax.block_until_ready(fn(*args))
    note = f"JAX {jax.__version__}, first call (trace + XLA compile) {first:.2f} s"
    return median_time(call), note


def _strategy_rows(what, make, args, check, competitors):
    """Rows for ``jit(vmap(...), batching=...)`` with each strategy asked for explicitly:
    'vectorized' (vmap's module compiled) and 'loop' (a numba.prange loop over the compiled
    per-example function, autodiff_ast/batch_loop.py)."""
    rows = []
    for strategy in ("vectorized", "loop"):
        compiled, out, compile_s = first_call(lambda s=strategy: make(s), *args)
        check(out)
        rows.append({"name": f"{what}, jit(vmap(grad(f)), batching='{strategy}') Numba",
                     "ours_s": median_time(lambda c=compiled: c(*args)),
                     "competitors": competitors,
                     "notes": f"first call (generate + Numba compile or cache load) "
                              f"{compile_s:.2f} s"})
    return rows


def _auto_choice(compiled):
    """What jit's batching='auto' chose, from the compiled module's source."""
    return "per-example prange loop" if "prange(" in compiled.source else "vectorized"


# ---------------------------------------------------------------- the benchmarks
def _conv_rows():
    from autodiff_ast import grad, vmap
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(0)
    xs, w = rng.standard_normal((BATCH, LENGTH)), rng.standard_normal(3)
    loop_grad = grad(conv_loss)
    reference = np.stack([loop_grad(w, x) for x in xs])

    def check(out):
        np.testing.assert_allclose(out, reference, rtol=1e-9, atol=1e-9)
    ours, out, generate = first_call(lambda: vmap(grad(conv_loss), in_axes=(None, 0)), w, xs)
    check(out)
    compiled, out, compile_s = first_call(
        lambda: jit(vmap(grad(conv_loss), in_axes=(None, 0))), w, xs)
    check(out)
    loop_s = median_time(lambda: [loop_grad(w, x) for x in xs], repeats=3)
    entry = _generated_entry(loop_grad, w, xs[0])
    entry_s = median_time(lambda: [entry(w, x) for x in xs], repeats=3)
    jax_s, jax_note = _jax_time(_jax_conv, (w, xs), check)
    competitors = {"python loop over grad(f)": loop_s,
                   "python loop over grad(f)'s generated function": entry_s}
    if jax_s is not None:
        competitors["jax jit(vmap(grad(f)))"] = jax_s
    variant = "vectorized" if "vectorized variant" in ours.source else "per-example loop"
    what = f"per-example gradients, 3-tap convolution loss ({BATCH} x {LENGTH})"
    return [
        {"name": f"{what}, vmap(grad(f)) NumPy", "ours_s": median_time(lambda: ours(w, xs)),
         "competitors": competitors,
         "notes": f"{variant} variant; first call (generate + load) {generate:.2f} s; "
                  f"{jax_note}"},
        {"name": f"{what}, jit(vmap(grad(f))) Numba",
         "ours_s": median_time(lambda: compiled(w, xs)), "competitors": competitors,
         "notes": f"batching='auto' chose: {_auto_choice(compiled)}; first call (generate + "
                  f"Numba compile or cache load) {compile_s:.2f} s"},
    ] + _strategy_rows(what, lambda s: jit(vmap(grad(conv_loss), in_axes=(None, 0)),
                                           batching=s), (w, xs), check, competitors)


def _mlp_rows():
    from autodiff_ast import grad, vmap
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(1)
    n_in, n_hidden, n_out = MLP_SIZES
    params = {"W1": rng.standard_normal((n_hidden, n_in)) / np.sqrt(n_in),
              "b1": rng.standard_normal(n_hidden) * 0.1,
              "W2": rng.standard_normal((n_out, n_hidden)) / np.sqrt(n_hidden),
              "b2": rng.standard_normal(n_out) * 0.1}
    xs, ys = rng.standard_normal((BATCH, n_in)), rng.standard_normal((BATCH, n_out))
    loop_grad = grad(mlp_loss)
    per = [loop_grad(params, x, y) for x, y in zip(xs, ys)]
    reference = {k: np.stack([g[k] for g in per]) for k in params}

    def check(out):
        for k in params:
            np.testing.assert_allclose(out[k], reference[k], rtol=1e-9, atol=1e-9)
    ours, out, generate = first_call(lambda: vmap(grad(mlp_loss), in_axes=(None, 0, 0)),
                                      params, xs, ys)
    check(out)
    compiled, out, compile_s = first_call(
        lambda: jit(vmap(grad(mlp_loss), in_axes=(None, 0, 0))), params, xs, ys)
    check(out)
    loop_s = median_time(lambda: [loop_grad(params, x, y) for x, y in zip(xs, ys)], repeats=3)
    entry = _generated_entry(loop_grad, params, xs[0], ys[0])
    leaves = [params[k] for k in sorted(params)]
    entry_s = median_time(lambda: [entry(*leaves, x, y) for x, y in zip(xs, ys)], repeats=3)
    jax_s, jax_note = _jax_time(_jax_mlp, (params, xs, ys), check)
    competitors = {"python loop over grad(f)": loop_s,
                   "python loop over grad(f)'s generated function": entry_s}
    if jax_s is not None:
        competitors["jax jit(vmap(grad(f)))"] = jax_s
    variant = "vectorized" if "vectorized variant" in ours.source else "per-example loop"
    what = (f"per-example gradients, MLP {n_in}-{n_hidden}-{n_out} tanh, dict params "
            f"({BATCH} examples)")
    return [
        {"name": f"{what}, vmap(grad(f)) NumPy",
         "ours_s": median_time(lambda: ours(params, xs, ys)), "competitors": competitors,
         "notes": f"{variant} variant; first call (generate + load) {generate:.2f} s; "
                  f"{jax_note}"},
        {"name": f"{what}, jit(vmap(grad(f))) Numba",
         "ours_s": median_time(lambda: compiled(params, xs, ys)), "competitors": competitors,
         "notes": f"batching='auto' chose: {_auto_choice(compiled)}; first call (generate + "
                  f"Numba compile or cache load) {compile_s:.2f} s"},
    ] + _strategy_rows(what, lambda s: jit(vmap(grad(mlp_loss), in_axes=(None, 0, 0)),
                                           batching=s), (params, xs, ys), check, competitors)


def run():
    """Measure every workload; one dict per row (see the module docstring)."""
    return _conv_rows() + _mlp_rows()


if __name__ == "__main__":
    for row in run():
        print(row["name"])
        print(f"  ours: {row['ours_s'] * 1e3:.3f} ms")
        for label, seconds in row["competitors"].items():
            print(f"  {label}: {seconds * 1e3:.3f} ms ({seconds / row['ours_s']:.1f}x ours)")
        print(f"  notes: {row['notes']}")
