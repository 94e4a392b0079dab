"""ADBench objectives for the benchmarks: ours as written, the competitors' rewrites, data.

Ours differentiates the very functions tests/test_adbench.py checks against ADBench's expected
values: ``examples/adbench/{gmm,ba,lstm}.py`` (loops, in-place writes, lists), imported here
under names of their own. JAX and autograd cannot run that code as written (in-place writes
into arrays), so each gets a rewrite with the same mathematics: vectorized GMM and BA (one
function, written against a NumPy-like module ``xp``: ``jax.numpy`` or ``autograd.numpy``), the
LSTM with ``lax.scan`` (JAX) or a Python loop over the sequence (autograd). The hand-written
NumPy gradient of the GMM objective is here too.

Data: synthetic, from a fixed seed, with the shapes of ADBench's standard problems (ADBench's
``data/gmm/1k/gmm_d10_K25.txt``, ``data/ba/ba1_n49_m7776_p31843.txt``,
``data/lstm/lstm_l2_c1024.txt``).

>>> args = gmm_data(2, 3, 4)
>>> bool(np.isclose(gmm.gmm_objective(*args), gmm_vectorized(np, 2, *args[4:])(*args[:4])))
True
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ADBENCH_DIR = os.path.join(os.path.dirname(HERE), "examples", "adbench")

GMM_SIZE = (10, 25, 1000)  # d, K, N: ADBench gmm/1k/gmm_d10_K25
BA_SIZE = (49, 7776, 31843)  # cameras, points, observations: ADBench ba1_n49_m7776_p31843
LSTM_SIZE = (2, 1024, 14)  # layers, characters, bits per character: ADBench lstm_l2_c1024


def _load(stem):
    """Import examples/adbench/<stem>.py under a name of its own (the folder is no package)."""
    alias = f"benchmarks_adbench_{stem}"
    if alias not in sys.modules:
        spec = importlib.util.spec_from_file_location(alias, os.path.join(ADBENCH_DIR,
                                                                          f"{stem}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        spec.loader.exec_module(module)
    return sys.modules[alias]


gmm = _load("gmm")
ba = _load("ba")
lstm = _load("lstm")


def ba_sum_squares(cams, x, w, obs, feats):
    """Half the sum of squared BA residuals: one reverse pass gives J^T r (a Gauss-Newton
    gradient), what jit(grad) of every tool measures here."""
    r = ba.ba_objective(cams, x, w, obs, feats)
    return 0.5 * np.sum(r * r)


def gmm_objective_preallocated(alphas, means, icf, x, wishart_gamma, wishart_m):
    """gmm.gmm_objective with its two lists (``qs.append`` then ``np.stack``) replaced by
    preallocated arrays: the same helpers and loops otherwise. jit cannot compile np.stack of
    a list yet; this variant is what ``jit(grad)`` measures until it can."""
    n = x.shape[0]
    d = x.shape[1]
    k = alphas.shape[0]
    qs = np.zeros((k, d, d))
    qdiags = np.zeros((k, d))
    sum_qs = np.zeros(k)
    for c in range(k):
        qs[c] = gmm.make_q(icf[c], d)
        qdiags[c] = np.exp(icf[c, :d])
        sum_qs[c] = np.sum(icf[c, :d])
    slse = 0.0
    for i in range(n):
        main_term = np.zeros(k)
        for c in range(k):
            xcentered = x[i] - means[c]
            qxcentered = np.dot(qs[c], xcentered)
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * np.sum(qxcentered * qxcentered)
        slse = slse + gmm.logsumexp(main_term)
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + slse - n * gmm.logsumexp(alphas)
            + gmm.log_wishart_prior(d, wishart_gamma, wishart_m, sum_qs, qdiags, icf))


# ---------------------------------------------------------------- data (fixed seeds)
def gmm_data(d, k, n, seed=0):
    """(alphas, means, icf, x, wishart_gamma, wishart_m) of the given sizes."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(k), rng.standard_normal((k, d)),
            rng.uniform(-0.5, 0.5, (k, d * (d + 1) // 2)), rng.standard_normal((n, d)), 1.0, 0)


def ba_data(n, m, p, seed=0):
    """(cams, points, weights, obs, feats): ADBench's camera and point, perturbed; observation i
    pairs camera i % n with point i % m, as in ADBench's files."""
    rng = np.random.default_rng(seed)
    # The camera, point and feature of ADBench's ba1 file (which replicates them).
    cam = np.array([-0.758453, -1.109613, -0.845551, 34.556073, 39.676747, 53.881673,
                    419.194514, 5.864426, -8.518870, 0.087812, 0.002739])
    point = np.array([7.203245, 0.001144, 3.023326])
    feat = np.array([271.760969, 834.209256])
    cams = cam * (1.0 + 0.05 * rng.standard_normal((n, 11)))
    points = point + 0.1 * rng.standard_normal((m, 3))
    weights = 0.5 + 0.5 * rng.random(p)
    obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1).astype(np.int64)
    feats = feat + 10.0 * rng.standard_normal((p, 2))
    return cams, points, weights, obs, feats


def lstm_data(layers, chars, bits, seed=0):
    """(main_params, extra_params, state, sequence) of the given sizes."""
    rng = np.random.default_rng(seed)
    return (0.5 * rng.standard_normal((2 * layers, 4 * bits)),
            0.5 * rng.standard_normal((3, bits)), 0.5 * rng.standard_normal((2 * layers, bits)),
            rng.random((chars, bits)))


# ---------------------------------------------------------------- GMM: rewrite and gradient
def _lower(d):
    """Row and column of each strictly-lower entry of Q, column by column (ADBench's order)."""
    rows = [i for j in range(d) for i in range(j + 1, d)]
    cols = [j for j in range(d) for i in range(j + 1, d)]
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def _gmm_constants(d, k, n, gamma, m):
    """The parameter-free terms: the Gaussian constant and the Wishart normaliser."""
    p = d + m + 1
    big_c = p * d * math.log(gamma / math.sqrt(2.0))
    lgd = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * p + 0.5 * (1 - j)) for j in range(1, d + 1))
    return -n * d * 0.5 * math.log(2.0 * math.pi) - k * (big_c - lgd)


def gmm_vectorized(xp, d, gamma, m):
    """The GMM objective f(alphas, means, icf, x), vectorized with the NumPy-like module xp
    (Q built from icf by a constant 0/1 tensor: no in-place writes, so JAX and autograd run
    it)."""
    rows, cols = _lower(d)
    select = np.zeros((len(rows), d, d))
    select[np.arange(len(rows)), rows, cols] = 1.0
    eye = np.eye(d)

    def objective(alphas, means, icf, x):
        k, n = alphas.shape[0], x.shape[0]
        logdiag = icf[:, :d]
        qdiag = xp.exp(logdiag)
        q = qdiag[:, :, None] * eye + xp.einsum("kt,tab->kab", icf[:, d:], select)
        centered = x[None, :, :] - means[:, None, :]
        z = xp.einsum("kab,knb->kna", q, centered)
        main = (alphas + xp.sum(logdiag, axis=1))[:, None] - 0.5 * xp.sum(z * z, axis=2)
        top = xp.max(main, axis=0)
        slse = xp.sum(xp.log(xp.sum(xp.exp(main - top), axis=0)) + top)
        atop = xp.max(alphas)
        lse_alphas = xp.log(xp.sum(xp.exp(alphas - atop))) + atop
        prior = xp.sum(0.5 * gamma * gamma * (xp.sum(qdiag * qdiag, axis=1)
                                              + xp.sum(icf[:, d:] * icf[:, d:], axis=1))
                       - m * xp.sum(logdiag, axis=1))
        return _gmm_constants(d, k, n, gamma, m) + slse - n * lse_alphas + prior
    return objective


def gmm_grad_numpy(alphas, means, icf, x, gamma, m):
    """The gradient of gmm_objective with respect to (alphas, means, icf), by hand."""
    k, d = means.shape
    n = x.shape[0]
    rows, cols = _lower(d)
    diag = np.arange(d)
    qdiag = np.exp(icf[:, :d])
    q = np.zeros((k, d, d))
    q[:, diag, diag] = qdiag
    q[:, rows, cols] = icf[:, d:]
    centered = x[None, :, :] - means[:, None, :]  # k, n, d
    z = np.matmul(centered, q.transpose(0, 2, 1))  # z[c, i] = Q_c (x_i - mu_c)
    main = (alphas + icf[:, :d].sum(axis=1))[:, None] - 0.5 * np.sum(z * z, axis=2)
    resp = np.exp(main - main.max(axis=0))
    resp /= resp.sum(axis=0)  # responsibilities, k x n
    weight = resp.sum(axis=1)
    soft = np.exp(alphas - alphas.max())
    d_alphas = weight - n * soft / soft.sum()
    rz = resp[:, :, None] * z
    d_means = np.einsum("ka,kab->kb", rz.sum(axis=1), q)
    d_q = -np.matmul(rz.transpose(0, 2, 1), centered)
    d_icf = np.empty_like(icf)
    d_icf[:, :d] = d_q[:, diag, diag] * qdiag + weight[:, None] + gamma * gamma * qdiag ** 2 - m
    d_icf[:, d:] = d_q[:, rows, cols] + gamma * gamma * icf[:, d:]
    return d_alphas, d_means, d_icf


# ---------------------------------------------------------------- BA: rewrite
def ba_vectorized(xp):
    """ba_sum_squares(cams, x, w, obs, feats), every observation at once with the module xp
    (Rodrigues' formula only in its theta != 0 branch: no camera here has a zero rotation)."""
    def objective(cams, x, w, obs, feats):
        cam = cams[obs[:, 0]]
        pt = x[obs[:, 1]] - cam[:, 3:6]
        rot = cam[:, 0:3]
        theta = xp.sqrt(xp.sum(rot * rot, axis=1))
        axis = rot / theta[:, None]
        cos, sin = xp.cos(theta), xp.sin(theta)
        cross = xp.stack([axis[:, 1] * pt[:, 2] - axis[:, 2] * pt[:, 1],
                          axis[:, 2] * pt[:, 0] - axis[:, 0] * pt[:, 2],
                          axis[:, 0] * pt[:, 1] - axis[:, 1] * pt[:, 0]], axis=1)
        along = xp.sum(axis * pt, axis=1) * (1.0 - cos)
        xcam = pt * cos[:, None] + cross * sin[:, None] + axis * along[:, None]
        proj = xcam[:, 0:2] / xcam[:, 2:3]
        rsq = xp.sum(proj * proj, axis=1)
        scale = 1.0 + cam[:, 9] * rsq + cam[:, 10] * rsq * rsq
        pixels = proj * (scale * cam[:, 6])[:, None] + cam[:, 7:9]
        reproj = w[:, None] * (pixels - feats)
        werr = 1.0 - w * w
        return 0.5 * (xp.sum(reproj * reproj) + xp.sum(werr * werr))
    return objective


# ---------------------------------------------------------------- LSTM: rewrites
def _lstm_step(xp, main_params, extra_params, state, inp, layers):
    """One character through every layer: (prediction, list of new state rows)."""
    hsize = state.shape[1]
    x2 = inp * extra_params[0]
    rows = []
    for i in range(layers):
        weight, bias = main_params[2 * i], main_params[2 * i + 1]
        hidden, cell = state[2 * i], state[2 * i + 1]

        def gate(v, j, weight=weight, bias=bias):
            return v * weight[j * hsize:(j + 1) * hsize] + bias[j * hsize:(j + 1) * hsize]
        forget = 1.0 / (1.0 + xp.exp(-gate(x2, 0)))
        ingate = 1.0 / (1.0 + xp.exp(-gate(hidden, 1)))
        outgate = 1.0 / (1.0 + xp.exp(-gate(x2, 2)))
        change = xp.tanh(gate(hidden, 3))
        cell = cell * forget + ingate * change
        hidden = outgate * xp.tanh(cell)
        rows += [hidden, cell]
        x2 = hidden
    ypred = x2 * extra_params[1] + extra_params[2]
    return ypred - xp.log(xp.sum(xp.exp(ypred)) + 2.0), rows


def lstm_jax(jax, jnp):
    """The LSTM objective for JAX: lax.scan over the sequence."""
    def objective(main_params, extra_params, state, sequence):
        layers = state.shape[0] // 2

        def step(s, pair):
            inp, gold = pair
            ynorm, rows = _lstm_step(jnp, main_params, extra_params, s, inp, layers)
            return jnp.stack(rows), jnp.sum(gold * ynorm)
        _, totals = jax.lax.scan(step, state, (sequence[:-1], sequence[1:]))
        return -jnp.sum(totals) / ((sequence.shape[0] - 1) * sequence.shape[1])
    return objective


def lstm_loop(anp):
    """The LSTM objective for autograd: a Python loop over the sequence, no in-place writes."""
    def objective(main_params, extra_params, state, sequence):
        layers = state.shape[0] // 2
        total = 0.0
        s = state
        for t in range(sequence.shape[0] - 1):
            ynorm, rows = _lstm_step(anp, main_params, extra_params, s, sequence[t], layers)
            s = anp.stack(rows)
            total = total + anp.sum(sequence[t + 1] * ynorm)
        return -total / ((sequence.shape[0] - 1) * sequence.shape[1])
    return objective
