"""Benchmark: Hessians and Hessian-vector products, against JAX and simple alternatives.

Two workloads, as the forward-mode issue asks:

- the full Hessian of the Rosenbrock function at n = 100: ours is ``hessian(f)`` =
  ``jacfwd(jacrev(f))`` (one vectorized forward pass over the generated gradient module), as
  NumPy and compiled by Numba (``jit(hessian(f))``);
- a Hessian-vector product of the Rosenbrock function at n = 100,000: ours is
  ``jvp(grad(f), (x,), (v,))`` (forward over reverse: one pass, no n x n matrix).

Competitors: JAX's ``jit(hessian(f))`` and ``jit(jvp(grad(f)))`` when JAX is installed
(``pip install -e '.[bench]'``; float64 enabled, like ours), a Python loop of n
Hessian-vector products (what a Hessian costs without the vectorized pass), and central
differences of our gradient (two gradient calls; approximate). Times are the median of several
repeats of one call on warm caches; generation and compilation are reported in the notes.

``run()`` returns one dict per measurement: ``name``, ``ours_s``, ``competitors`` ({name:
seconds}) and ``notes``. Run this file directly to print them.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from timing import first_call, median_time  # noqa: E402 (benchmarks/ is on sys.path now)

HESSIAN_N = 100
HVP_N = 100_000


def rosenbrock(x):
    """The Rosenbrock function in n dimensions."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosenbrock_hessian(x):
    """The exact Hessian, written by hand (the reference every result is checked against)."""
    n = x.size
    h = np.zeros((n, n))
    i = np.arange(n - 1)
    h[i, i] += 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    h[i + 1, i + 1] += 200.0
    h[i, i + 1] = h[i + 1, i] = -400.0 * x[:-1]
    return h


def _jax(make, args, check):
    """(seconds, note) for JAX, or (None, why not) when JAX is not installed."""
    try:
        import jax
    except ImportError:
        return None, "JAX: not installed (pip install -e '.[bench]')"
    jax.config.update("jax_enable_x64", True)
    fn, out, first = first_call(lambda: make(jax), *args)
    check(tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out))

    def call():
        jax.block_until_ready(fn(*args))
    note = f"JAX {jax.__version__}: first call (trace + XLA compile) {first:.2f} s"
    return median_time(call), note


def _jax_rosenbrock(jax):
    import jax.numpy as jnp

    def f(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return f


# ---------------------------------------------------------------- the benchmarks
def _hessian_rows():
    from autodiff_ast import grad, hessian, jvp
    from autodiff_ast.jit import jit
    x = np.linspace(-1.2, 1.2, HESSIAN_N)
    reference = rosenbrock_hessian(x)

    def check(out):
        np.testing.assert_allclose(out, reference, rtol=1e-10, atol=1e-8)
    ours, out, generate = first_call(lambda: hessian(rosenbrock), x)
    check(out)
    compiled, out, compile_s = first_call(lambda: jit(hessian(rosenbrock)), x)
    check(out)
    df = grad(rosenbrock)
    basis = np.eye(HESSIAN_N)
    loop_s = median_time(lambda: [jvp(df, (x,), (e,))[1] for e in basis], repeats=3)
    competitors = {f"python loop of {HESSIAN_N} jvp(grad(f)) calls": loop_s}
    jax_s, jax_note = _jax(lambda jax: jax.jit(jax.hessian(_jax_rosenbrock(jax))), (x,), check)
    if jax_s is not None:
        competitors["jax jit(hessian(f))"] = jax_s
    what = f"Hessian of Rosenbrock, n={HESSIAN_N}"
    return [
        {"name": f"{what}, hessian(f) NumPy", "ours_s": median_time(lambda: ours(x)),
         "competitors": competitors,
         "notes": f"jacfwd(jacrev(f)): vmap of the jvp of the gradient module; first call "
                  f"(generate + load) {generate:.2f} s; {jax_note}"},
        {"name": f"{what}, jit(hessian(f)) Numba", "ours_s": median_time(lambda: compiled(x)),
         "competitors": competitors,
         "notes": f"first call (generate + Numba compile or cache load) {compile_s:.2f} s"},
    ]


def _hvp_rows():
    from autodiff_ast import grad, jvp
    from autodiff_ast.jacobians import jvp_transform
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.2, 1.2, HVP_N)
    v = rng.standard_normal(HVP_N)
    df = grad(rosenbrock)
    start = time.perf_counter()
    _, hv = jvp(df, (x,), (v,))
    generate = time.perf_counter() - start
    # H is tridiagonal: H v without forming it is the reference.
    diag = np.zeros(HVP_N)
    diag[:-1] = 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    diag[1:] += 200.0
    off = -400.0 * x[:-1]
    reference = diag * v
    reference[:-1] += off * v[1:]
    reference[1:] += off * v[:-1]

    def check(out):
        np.testing.assert_allclose(out, reference, rtol=1e-9, atol=1e-7)
    check(hv)
    eps = 1e-6
    fd_s = median_time(lambda: (df(x + eps * v) - df(x - eps * v)) / (2 * eps))
    competitors = {"central differences of grad(f) (two gradients, approximate)": fd_s}
    jax_s, jax_note = _jax(
        lambda jax: jax.jit(lambda a, b: jax.jvp(jax.grad(_jax_rosenbrock(jax)), (a,), (b,))[1]),
        (x, v), check)
    if jax_s is not None:
        competitors["jax jit(jvp(grad(f)))"] = jax_s
    # jvp returns the gradient too, as ours does; above, XLA drops it (only [1] is returned)
    both_s, _ = _jax(lambda jax: jax.jit(lambda a, b: jax.jvp(jax.grad(_jax_rosenbrock(jax)),
                                                              (a,), (b,))),
                     (x, v), lambda out: check(out[1]))
    if both_s is not None:
        competitors["jax jit(jvp(grad(f))), gradient and product (as ours returns)"] = both_s
    compiled, (_, hv), compile_s = first_call(lambda: jit(jvp_transform(df)), (x,), (v,))
    check(hv)
    what = f"Hessian-vector product of Rosenbrock, n={HVP_N:,}"
    return [{"name": f"{what}, jvp(grad(f)) NumPy",
             "ours_s": median_time(lambda: jvp(df, (x,), (v,))),
             "competitors": competitors,
             "notes": f"forward over reverse, one pass; first call (generate + load) "
                      f"{generate:.2f} s; {jax_note}"},
            {"name": f"{what}, jit(jvp_transform(grad(f))) Numba",
             "ours_s": median_time(lambda: compiled((x,), (v,))),
             "competitors": competitors,
             "notes": f"the shifted slices' statements fused into two loops "
                      f"(codegen/fused_regions.py); first call (generate + Numba compile or "
                      f"cache load) {compile_s:.2f} s"}]


def run():
    """Measure every workload; one dict per row (see the module docstring)."""
    return _hessian_rows() + _hvp_rows()


if __name__ == "__main__":
    for row in run():
        print(row["name"])
        print(f"  ours: {row['ours_s'] * 1e3:.3f} ms")
        for label, seconds in row["competitors"].items():
            print(f"  {label}: {seconds * 1e3:.3f} ms ({seconds / row['ours_s']:.1f}x ours)")
        print(f"  notes: {row['notes']}")
