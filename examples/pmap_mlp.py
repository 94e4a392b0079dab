"""Data-parallel training of a small MLP with pmap: each shard computes the gradient of its part
of the batch, ``pmean`` averages the gradients across shards, every shard applies the same
update.

Run on one machine (shards on worker threads)::

    python examples/pmap_mlp.py

or across processes with MPI (one shard per rank; ``pip install -e '.[mpi]'`` brings mpi4py
and an MPICH runtime whose ``mpiexec`` lands next to the interpreter)::

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/pmap_mlp.py

Both print the same parameters: the MPI run reduces the gradients with ``Allreduce`` instead
of a NumPy sum over threads. ``--json FILE`` writes the final parameters and the time per step.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from autodiff_ast import grad, pmap, pmean

LEARNING_RATE = 0.1


def loss(W1, b1, W2, b2, x, y):
    h = np.tanh(np.dot(x, W1) + b1)
    pred = np.dot(h, W2) + b2
    return np.mean((pred - y) ** 2)


def step(W1, b1, W2, b2, x, y):
    g1, gb1, g2, gb2 = grad(loss, argnums=(0, 1, 2, 3))(W1, b1, W2, b2, x, y)
    g1 = pmean(g1, "batch")
    gb1 = pmean(gb1, "batch")
    g2 = pmean(g2, "batch")
    gb2 = pmean(gb2, "batch")
    return (W1 - LEARNING_RATE * g1, b1 - LEARNING_RATE * gb1, W2 - LEARNING_RATE * g2,
            b2 - LEARNING_RATE * gb2)


def data(shards, per_shard=32, features=8, seed=0):
    """A regression problem, split into `shards` equal parts (leading axis)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(shards * per_shard, features))
    y = np.sin(x[:, 0]) + 0.5 * x[:, 1] ** 2 - x[:, 2]
    return x.reshape(shards, per_shard, features), y.reshape(shards, per_shard)


def init(features=8, hidden=16, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(features, hidden)) / np.sqrt(features), np.zeros(hidden),
            rng.normal(size=hidden) / np.sqrt(hidden), 0.0)


def train(steps=50, shards=2, backend=None, per_shard=32):
    """Final parameters and seconds per step (after the first, compiling, step)."""
    x, y = data(shards, per_shard)
    params = init(x.shape[-1])
    update = pmap(step, axis_name="batch", in_axes=(None, None, None, None, 0, 0),
                  out_axes=None, backend=backend, devices=shards)
    params = update(*params, x, y)
    start = time.perf_counter()
    for _ in range(steps - 1):
        params = update(*params, x, y)
    per_step = (time.perf_counter() - start) / max(steps - 1, 1)
    return params, per_step, update


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--backend", choices=["threads", "mpi"], default=None)
    parser.add_argument("--json", help="write the parameters and time per step here")
    args = parser.parse_args(argv)
    params, per_step, update = train(args.steps, args.shards, args.backend)
    rank = 0
    if update.backend_name == "mpi":
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
    x, y = data(args.shards)
    final = loss(*params, x.reshape(-1, x.shape[-1]), y.reshape(-1))
    if rank == 0:
        print(f"backend {update.backend_name}: loss after {args.steps} steps {final:.6f}, "
              f"{per_step * 1e3:.2f} ms per step")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump({"params": [np.asarray(p).tolist() for p in params],
                           "loss": float(final), "seconds_per_step": per_step,
                           "backend": update.backend_name}, handle)


if __name__ == "__main__":
    main()
