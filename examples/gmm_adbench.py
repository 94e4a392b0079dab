"""The gradient of ADBench's Gaussian mixture model objective, written with plain loops.

ADBench (arXiv:1807.10129) measures AD tools on the GMM negative log-likelihood. Its natural
NumPy form (``examples/adbench/gmm.py``) builds lists of matrices in loops, writes into arrays in
place (``q[i, j] = ...``, ``sum_qs[c] = ...``) and calls ``math.lgamma``: code JAX would need
rewritten (``.at[].set``, ``jax.scipy.special``). autodiff-ast differentiates it as written; the
gradient with respect to ``alphas``, ``means`` and ``icf`` is checked against finite differences
on a few entries.

    python examples/gmm_adbench.py            # ADBench's d=10, K=5, n=1000 instance
    python examples/gmm_adbench.py --small    # ADBench's test instance (d=2, K=3, n=1)

The data files are read from ``examples/adbench/data`` (ADBench's, MIT licence).
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "adbench"))

from adbench_data import data_path, read_gmm  # noqa: E402
from gmm import gmm_objective  # noqa: E402

from autodiff_ast import grad  # noqa: E402


def fd_entry(args, k, index, eps=1e-6):
    up, down = [np.array(a, copy=True) if np.ndim(a) else a for a in args], list(args)
    down = [np.array(a, copy=True) if np.ndim(a) else a for a in down]
    up[k][index] += eps
    down[k][index] -= eps
    return (gmm_objective(*up) - gmm_objective(*down)) / (2 * eps)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="the d=2, K=3, n=1 test instance")
    args = parser.parse_args(argv)
    name = "test.txt" if args.small else "gmm_d10_K5_n1000.txt"
    data = read_gmm(data_path("gmm", name))
    alphas, means, icf, x = data[:4]
    print(f"GMM {name}: d={x.shape[1]}, K={alphas.shape[0]}, n={x.shape[0]}; objective "
          f"{gmm_objective(*data):.6f}")

    dgmm = grad(gmm_objective, argnums=(0, 1, 2))
    start = time.perf_counter()
    grads = dgmm(*data)
    first = time.perf_counter() - start
    start = time.perf_counter()
    grads = dgmm(*data)
    again = time.perf_counter() - start
    print(f"gradient: first call {first:.2f} s (writes the module), then {again:.2f} s")

    rng = np.random.default_rng(0)
    worst = 0.0
    for k, g in enumerate(grads):
        for _ in range(3):
            index = tuple(int(rng.integers(0, s)) for s in g.shape)
            want = fd_entry(data, k, index)
            worst = max(worst, abs(g[index] - want) / max(1.0, abs(want)))
    print(f"largest relative difference from finite differences (9 entries): {worst:.2e}")
    assert worst < 1e-5
    print()
    print(dgmm.source)


if __name__ == "__main__":
    main()
