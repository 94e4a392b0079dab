"""The ADBench Gaussian mixture model objective, written with plain NumPy loops.

The negative log-likelihood of ``n`` points ``x`` (``n x d``) under a mixture of ``k`` Gaussians
with log-weights ``alphas`` (``k``), means ``means`` (``k x d``) and inverse covariance factors
``icf`` (``k x d(d+1)/2``), plus a Wishart prior on the precisions (ADBench's paper,
arXiv:1807.10129, section 4.1). Each row of ``icf`` holds the log of the diagonal of ``Q``, then
the strictly-lower triangle of ``Q`` column by column; the precision is ``Q Q^T``.

>>> import numpy as np
>>> from adbench_data import read_gmm, data_path
>>> alphas, means, icf, x, gamma, m = read_gmm(data_path("gmm", "test.txt"))
>>> print(f"{gmm_objective(alphas, means, icf, x, gamma, m):.6f}")
8.073804
"""

import math

import numpy as np


def logsumexp(v):
    """log(sum(exp(v))) without overflow."""
    mx = np.max(v)
    return np.log(np.sum(np.exp(v - mx))) + mx


def log_gamma_distrib(a, p):
    """The multivariate log-gamma function log Gamma_p(a)."""
    out = 0.25 * p * (p - 1) * math.log(math.pi)
    for j in range(1, p + 1):
        out = out + math.lgamma(a + 0.5 * (1 - j))
    return out


def make_q(icf_row, d):
    """The lower-triangular Q of one component: exp of the log-diagonal, then the triangle."""
    q = np.zeros((d, d))
    for i in range(d):
        q[i, i] = np.exp(icf_row[i])
    idx = d
    for j in range(d):
        for i in range(j + 1, d):
            q[i, j] = icf_row[idx]
            idx += 1
    return q


def log_wishart_prior(p, wishart_gamma, wishart_m, sum_qs, qdiags, icf):
    """The log of the Wishart prior on every component's precision."""
    n = p + wishart_m + 1
    k = icf.shape[0]
    out = 0.0
    for c in range(k):
        frobenius = np.sum(qdiags[c] * qdiags[c]) + np.sum(icf[c, p:] * icf[c, p:])
        out = out + 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_qs[c]
    big_c = n * p * (math.log(wishart_gamma / math.sqrt(2.0)))
    return out - k * (big_c - log_gamma_distrib(0.5 * n, p))


def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    """ADBench's GMM objective: minus the log-likelihood of x, plus the Wishart prior term."""
    n = x.shape[0]
    d = x.shape[1]
    k = alphas.shape[0]
    qs = []
    qdiags = []
    sum_qs = np.zeros(k)
    for c in range(k):
        qs.append(make_q(icf[c], d))
        qdiags.append(np.exp(icf[c, :d]))
        sum_qs[c] = np.sum(icf[c, :d])
    qs = np.stack(qs)
    qdiags = np.stack(qdiags)
    slse = 0.0
    for i in range(n):
        main_term = np.zeros(k)
        for c in range(k):
            xcentered = x[i] - means[c]
            qxcentered = np.dot(qs[c], xcentered)
            main_term[c] = alphas[c] + sum_qs[c] - 0.5 * np.sum(qxcentered * qxcentered)
        slse = slse + logsumexp(main_term)
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return (constant + slse - n * logsumexp(alphas)
            + log_wishart_prior(d, wishart_gamma, wishart_m, sum_qs, qdiags, icf))
