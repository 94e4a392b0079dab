"""Benchmark: loop kernels and a batched convolution, our jit(grad) against hand-written
adjoints, JAX and autograd.

Workloads (float64 everywhere; JAX runs with ``jax_enable_x64``):

- batched 2-D convolution: 32 images of 64 x 64 convolved ("valid") with a learned 5 x 5
  kernel, loss = mean squared error against targets; gradient with respect to the kernel. The
  user's function loops over the 25 taps, adding shifted slices of the whole batch;
- Lennard-Jones energy of 500 particles in 3-D, written as a double loop over the pairs
  i < j with scalar arithmetic; gradient with respect to the positions (minus the forces);
  and the same written with 3-vectors (``d = pos[i] - pos[j]``, ``np.sum(d * d)``);
- a Gaussian-mixture log-likelihood (1000 points, 10 dimensions, 25 isotropic components)
  with the log-sum-exp written as loops; gradient with respect to means, log-weights and
  log-precisions.

Ours is ``jit(grad(f))`` on the loop code as written. Competitors: a hand-written NumPy
gradient (vectorized), a hand-written Numba adjoint (loops), JAX ``jit(grad)`` and autograd
``grad``. JAX and autograd run the convolution as written (the tap loop unrolls while
tracing) and vectorized rewrites of the two loop kernels (pairwise distance matrices; a
vectorized log-sum-exp): loops of scalar operations are what both handle worst. Each
competitor is checked against our gradient before timing.

The user functions and Numba adjoints are written in this file (benchmarks/kernels_src.py,
planned for them, did not exist when it was written).
"""

from __future__ import annotations

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from timing import (  # noqa: E402
    collect,
    compare,
    optional_autograd,
    optional_jax,
    print_rows,
)

CONV = (32, 64, 64, 5)  # images, height, width, kernel size
LJ_N = 500
MIX = (1000, 10, 25)  # points, dimensions, components


# ---------------------------------------------------------------- the user's functions
def conv2d_loss(w, x, y):
    """Mean squared error of a batch of 'valid' 2-D convolutions of x (B x H x W) with w."""
    kh = w.shape[0]
    kw = w.shape[1]
    ho = x.shape[1] - kh + 1
    wo = x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo))
    for a in range(kh):
        for b in range(kw):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
    r = out - y
    return np.sum(r * r) / (x.shape[0] * ho * wo)


def lj_energy(pos, sigma, epsilon):
    """Lennard-Jones energy of the particles at pos (N x 3), a double loop over the pairs."""
    n = pos.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            r2 = dx * dx + dy * dy + dz * dz
            s6 = (sigma * sigma / r2) ** 3
            energy = energy + 4.0 * epsilon * (s6 * s6 - s6)
    return energy


def lj_energy_vectors(pos, sigma, epsilon):
    """lj_energy written with 3-vectors: each pair's difference is a row minus a row (jit
    compiles it for rows of 3 and keeps them as scalars: autodiff_ast/scalarize.py)."""
    n = pos.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d = pos[i] - pos[j]
            r2 = np.sum(d * d)
            s6 = (sigma * sigma / r2) ** 3
            energy = energy + 4.0 * epsilon * (s6 * s6 - s6)
    return energy


def mixture_nll(means, log_weights, log_prec, x):
    """Negative log-likelihood of x (N x D) under isotropic Gaussians, log-sum-exp in loops."""
    n = x.shape[0]
    d = x.shape[1]
    k = means.shape[0]
    total = 0.0
    for i in range(n):
        terms = np.zeros(k)
        for c in range(k):
            sq = 0.0
            for j in range(d):
                diff = x[i, j] - means[c, j]
                sq = sq + diff * diff
            terms[c] = log_weights[c] + 0.5 * d * log_prec[c] - 0.5 * np.exp(log_prec[c]) * sq
        top = terms[0]
        for c in range(1, k):
            if terms[c] > top:
                top = terms[c]
        s = 0.0
        for c in range(k):
            s = s + np.exp(terms[c] - top)
        total = total + np.log(s) + top
    return -total


# ---------------------------------------------------------------- hand-written NumPy gradients
def conv2d_grad_numpy(w, x, y):
    kh, kw = w.shape
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo))
    for a in range(kh):
        for b in range(kw):
            out += w[a, b] * x[:, a:a + ho, b:b + wo]
    r = (2.0 / (x.shape[0] * ho * wo)) * (out - y)
    g = np.empty_like(w)
    for a in range(kh):
        for b in range(kw):
            g[a, b] = np.sum(r * x[:, a:a + ho, b:b + wo])
    return g


def lj_grad_numpy(pos, sigma, epsilon):
    diff = pos[:, None, :] - pos[None, :, :]
    r2 = np.sum(diff * diff, axis=2)
    np.fill_diagonal(r2, 1.0)
    s6 = (sigma * sigma / r2) ** 3
    # d/d r2 of 4 eps (s6^2 - s6) is 4 eps (-12 s6^2 + 6 s6) / (2 r2) per unordered pair
    coef = 4.0 * epsilon * (-12.0 * s6 * s6 + 6.0 * s6) / r2
    np.fill_diagonal(coef, 0.0)
    return np.sum(coef[:, :, None] * diff, axis=1)


def mixture_grad_numpy(means, log_weights, log_prec, x):
    d = x.shape[1]
    diff = x[:, None, :] - means[None, :, :]  # n, k, d
    sq = np.sum(diff * diff, axis=2)
    prec = np.exp(log_prec)
    terms = log_weights + 0.5 * d * log_prec - 0.5 * prec * sq
    resp = np.exp(terms - terms.max(axis=1, keepdims=True))
    resp /= resp.sum(axis=1, keepdims=True)
    g_means = -np.einsum("nk,nkd->kd", resp, diff) * prec[:, None]
    g_weights = -resp.sum(axis=0)
    g_prec = -np.sum(resp * (0.5 * d - 0.5 * prec * sq), axis=0)
    return g_means, g_weights, g_prec


# ---------------------------------------------------------------- hand-written Numba adjoints
def _conv2d_grad_loops(w, x, y):
    bsz, h, wd = x.shape
    kh, kw = w.shape
    ho, wo = h - kh + 1, wd - kw + 1
    scale = 2.0 / (bsz * ho * wo)
    g = np.zeros((kh, kw))
    for n in range(bsz):
        for i in range(ho):
            for j in range(wo):
                out = 0.0
                for a in range(kh):
                    for b in range(kw):
                        out += w[a, b] * x[n, i + a, j + b]
                r = scale * (out - y[n, i, j])
                for a in range(kh):
                    for b in range(kw):
                        g[a, b] += r * x[n, i + a, j + b]
    return g


def _lj_grad_loops(pos, sigma, epsilon):
    n = pos.shape[0]
    g = np.zeros_like(pos)
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            r2 = dx * dx + dy * dy + dz * dz
            s6 = (sigma * sigma / r2) ** 3
            c = 4.0 * epsilon * (-12.0 * s6 * s6 + 6.0 * s6) / r2
            g[i, 0] += c * dx
            g[i, 1] += c * dy
            g[i, 2] += c * dz
            g[j, 0] -= c * dx
            g[j, 1] -= c * dy
            g[j, 2] -= c * dz
    return g


def _mixture_grad_loops(means, log_weights, log_prec, x):
    n, d = x.shape
    k = means.shape[0]
    g_means = np.zeros_like(means)
    g_weights = np.zeros(k)
    g_prec = np.zeros(k)
    prec = np.exp(log_prec)
    terms = np.empty(k)
    sq = np.empty(k)
    for i in range(n):
        top = -np.inf
        for c in range(k):
            s = 0.0
            for j in range(d):
                diff = x[i, j] - means[c, j]
                s += diff * diff
            sq[c] = s
            terms[c] = log_weights[c] + 0.5 * d * log_prec[c] - 0.5 * prec[c] * s
            top = max(top, terms[c])
        total = 0.0
        for c in range(k):
            terms[c] = np.exp(terms[c] - top)
            total += terms[c]
        for c in range(k):
            r = terms[c] / total
            g_weights[c] -= r
            g_prec[c] -= r * (0.5 * d - 0.5 * prec[c] * sq[c])
            for j in range(d):
                g_means[c, j] -= r * prec[c] * (x[i, j] - means[c, j])
    return g_means, g_weights, g_prec


# ---------------------------------------------------------------- JAX / autograd rewrites
def lj_vectorized(xp):
    """lj_energy with pairwise matrices (the diagonal masked out) for JAX and autograd."""
    def energy(pos, sigma, epsilon):
        n = pos.shape[0]
        diff = pos[:, None, :] - pos[None, :, :]
        upper = np.triu(np.ones((n, n)), 1)
        r2 = xp.sum(diff * diff, axis=2) + (1.0 - upper)  # no division by zero off the pairs
        s6 = (sigma * sigma / r2) ** 3
        return xp.sum(upper * 4.0 * epsilon * (s6 * s6 - s6))
    return energy


def mixture_vectorized(xp):
    """mixture_nll with a vectorized log-sum-exp for JAX and autograd."""
    def nll(means, log_weights, log_prec, x):
        d = x.shape[1]
        diff = x[:, None, :] - means[None, :, :]
        sq = xp.sum(diff * diff, axis=2)
        terms = log_weights + 0.5 * d * log_prec - 0.5 * xp.exp(log_prec) * sq
        top = xp.max(terms, axis=1, keepdims=True)
        return -xp.sum(xp.log(xp.sum(xp.exp(terms - top), axis=1)) + top[:, 0])
    return nll




def _njit(fn):
    try:
        from numba import njit
    except ImportError:
        return None
    return njit(cache=True)(fn)


def _with_np(fn, module):
    """`fn` with its global name `np` bound to `module` (the same code for JAX/autograd)."""
    import types
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": module}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def _blocking(fn):
    """A JAX function that waits for its result (JAX dispatches asynchronously)."""
    if fn is None:
        return None
    import jax
    return lambda *a: jax.block_until_ready(fn(*a))


def _as_tuple(fn):
    return None if fn is None else (lambda *a: tuple(fn(*a)))


# ---------------------------------------------------------------- workloads
def conv_rows():
    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    bsz, h, wd, ksize = CONV
    rng = np.random.default_rng(3)
    x = rng.standard_normal((bsz, h, wd))
    w = rng.standard_normal((ksize, ksize)) / ksize
    y = rng.standard_normal((bsz, h - ksize + 1, wd - ksize + 1))
    args = (w, x, y)
    jx, ag = optional_jax(), optional_autograd()
    jax_fn = _blocking(jx[0].jit(jx[0].grad(_with_np(conv2d_loss, jx[1])))) if jx else None
    ag_fn = ag[0].grad(_with_np(conv2d_loss, ag[1])) if ag else None
    competitors = {"hand-written NumPy": conv2d_grad_numpy,
                   "hand-written Numba": _njit(_conv2d_grad_loops),
                   "JAX jit(grad), same code (tap loop unrolled)": jax_fn,
                   "autograd, same code": ag_fn, "ours without jit (NumPy source)":
                   grad(conv2d_loss)}
    return [compare(f"batched 2-D convolution: {bsz} images {h}x{wd}, {ksize}x{ksize} kernel, "
                    "MSE", jit(grad(conv2d_loss)), args, conv2d_grad_numpy(*args), competitors,
                    primal=jit(conv2d_loss))]


def lj_rows():
    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(4)
    side = int(np.ceil(LJ_N ** (1.0 / 3.0)))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
    pos = 1.2 * grid[:LJ_N].astype(float) + 0.05 * rng.standard_normal((LJ_N, 3))
    args = (pos, 1.0, 1.0)
    jx, ag = optional_jax(), optional_autograd()
    jax_fn = _blocking(jx[0].jit(jx[0].grad(lj_vectorized(jx[1])))) if jx else None
    ag_fn = ag[0].grad(lj_vectorized(ag[1])) if ag else None
    competitors = {"hand-written NumPy (pairwise matrices)": lj_grad_numpy,
                   "hand-written Numba (double loop)": _njit(_lj_grad_loops),
                   "JAX jit(grad), vectorized (pairwise matrices)": jax_fn,
                   "autograd, vectorized (pairwise matrices)": ag_fn}
    reference = lj_grad_numpy(*args)
    rows = [compare(f"Lennard-Jones energy, {LJ_N} particles in 3-D (double loop over pairs)",
                    jit(grad(lj_energy)), args, reference, competitors,
                    primal=jit(lj_energy), rtol=1e-8)]
    vector_competitors = {"hand-written Numba (double loop)": competitors[
        "hand-written Numba (double loop)"], "ours, written with scalar indexing":
        jit(grad(lj_energy))}
    rows.append(compare(f"Lennard-Jones energy, {LJ_N} particles, written with 3-vectors "
                        "(d = pos[i] - pos[j])", jit(grad(lj_energy_vectors)), args, reference,
                        vector_competitors, primal=jit(lj_energy_vectors), rtol=1e-8))
    return rows


def mixture_rows():
    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    n, d, k = MIX
    rng = np.random.default_rng(5)
    x = rng.standard_normal((n, d))
    means = rng.standard_normal((k, d))
    log_weights = np.log(rng.dirichlet(np.ones(k)))
    log_prec = rng.uniform(-0.5, 0.5, k)
    args = (means, log_weights, log_prec, x)
    jx, ag = optional_jax(), optional_autograd()
    jax_fn = _blocking(jx[0].jit(jx[0].grad(mixture_vectorized(jx[1]), argnums=(0, 1, 2)))) \
        if jx else None
    ag_fn = _as_tuple(ag[0].grad(mixture_vectorized(ag[1]), argnum=(0, 1, 2))) if ag else None
    competitors = {"hand-written NumPy (vectorized)": mixture_grad_numpy,
                   "hand-written Numba (loops)": _njit(_mixture_grad_loops),
                   "JAX jit(grad), vectorized log-sum-exp": jax_fn,
                   "autograd, vectorized log-sum-exp": ag_fn}
    return [compare(f"GMM log-sum-exp kernel in loops: N={n}, D={d}, K={k}",
                    jit(grad(mixture_nll, argnums=(0, 1, 2))), args,
                    mixture_grad_numpy(*args), competitors, primal=jit(mixture_nll))]


def run():
    """Measure every workload; one dict per row (see the module docstring)."""
    return collect((conv_rows, lj_rows, mixture_rows))


if __name__ == "__main__":
    print_rows(run())
