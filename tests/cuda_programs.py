"""Per-example functions the CUDA and pmap tests compile (importable by a subprocess)."""

import numpy as np


def rnn(w, x):
    """An 8-step tanh recurrence: the per-example loop-style function."""
    h = 0.0
    for t in range(8):
        h = np.tanh(w * h + x[t])
    return h


def heat(u, k):
    """One explicit Euler step of the 1-D heat equation, then the energy of the result."""
    n = u.shape[0]
    v = np.zeros_like(u)
    for i in range(1, n - 1):
        v[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    return np.sum(v * v)


def mlp(W, b, x):
    h = np.tanh(np.dot(W, x) + b)
    return np.sum(h * h) / 2.0 + np.max(h)


def uses_cumsum(x):
    y = np.cumsum(x)
    return np.sum(y * y)


def halving(x):
    s = 0.0
    while x > 1e-3:
        s = s + np.sin(x)
        x = x * 0.5
    return s


def ptx_of_kernels():
    """PTX for the rnn and heat gradient kernels (run without the simulator)."""
    from autodiff_ast import grad, vmap
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(0)
    rnn_kernel = jit(vmap(grad(rnn)), target="cuda")
    heat_kernel = jit(vmap(grad(heat), in_axes=(0, None)), target="cuda")
    mlp_kernel = jit(vmap(grad(mlp), in_axes=(None, None, 0)), target="cuda", reduce="sum")
    return [rnn_kernel.ptx(rng.random(4), rng.random((4, 8))),
            heat_kernel.ptx(rng.random((4, 12)), 0.1),
            mlp_kernel.ptx(rng.random((3, 4)), rng.random(3), rng.random((5, 4)))]
