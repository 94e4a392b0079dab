"""pmap benchmarks: CPU worker threads (2 vs 1) on a compute-bound function, and the time per
step of data-parallel MLP training with MPI on 1 and 2 ranks (examples/pmap_mlp.py).

``run()`` returns rows for benchmarks/run.py; ``python benchmarks/pmap.py`` prints them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

from timing import median_time  # noqa: E402 (benchmarks/timing.py, shared by every module)


def work(x):
    """Compute-bound per shard: a scalar tanh recurrence over a long sequence."""
    h = 0.0
    for t in range(x.shape[0]):
        h = np.tanh(0.9 * h + x[t])
    return h


def _best(fn, repeat=5):
    """Median of `repeat` calls after a warm-up call (which compiles)."""
    return median_time(fn, repeats=repeat, min_time=0.0)


def _threads_row():
    from autodiff_ast import pmap
    xs = np.random.default_rng(0).normal(size=(8, 400_000))
    two = pmap(work, devices=2)
    one = pmap(work, devices=1)
    expected = np.array([work(x[:1000]) for x in xs])
    np.testing.assert_allclose(pmap(work, devices=2)(xs[:, :1000]), expected, rtol=1e-12)
    np.testing.assert_allclose(two(xs), one(xs), rtol=1e-12)
    t2 = _best(lambda: two(xs))
    t1 = _best(lambda: one(xs))
    start = time.perf_counter()
    work(xs[0])
    tn = (time.perf_counter() - start) * len(xs)  # plain Python: one shard, times 8
    return {"name": "pmap on CPU threads: 8 shards, tanh recurrence of 400k steps each "
                    "(2 workers)",
            "ours_s": t2,
            "competitors": {"pmap, 1 worker": t1, "plain Python loop (1 shard x 8)": tn},
            "notes": f"2 workers vs 1: {t1 / t2:.2f}x faster; compiled parts run with "
                     f"nogil=True on {os.cpu_count()} cores shared with everything else"}


def _mpiexec():
    found = Path(sys.executable).parent / "mpiexec"
    return str(found) if found.exists() else shutil.which("mpiexec")


def _mlp_step(ranks, steps=60):
    script = str(ROOT / "examples" / "pmap_mlp.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_"))}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        if ranks == 0:
            cmd = [sys.executable, script, "--backend", "threads"]
        else:
            cmd = [_mpiexec(), "-launcher", "fork", "-hosts", "localhost", "-n", str(ranks),
                   sys.executable, script, "--backend", "mpi"]
        subprocess.run(cmd + ["--steps", "3"], check=True, env=env, cwd=ROOT, timeout=600,
                       capture_output=True)  # compiles (and caches) first
        subprocess.run(cmd + ["--steps", str(steps), "--json", out], check=True, env=env,
                       cwd=ROOT, timeout=600, capture_output=True)
        with open(out, encoding="utf-8") as handle:
            return json.load(handle)["seconds_per_step"]


def _mpi_row():
    if _mpiexec() is None:
        return {"name": "MPI data-parallel MLP step", "ours_s": float("nan"),
                "competitors": {}, "notes": "mpiexec not found: pip install -e '.[mpi]'"}
    two = _mlp_step(2)
    one = _mlp_step(1)
    threads = _mlp_step(0)
    return {"name": "MLP training step, pmap over MPI, 2 ranks (2 shards of 32 examples)",
            "ours_s": two,
            "competitors": {"MPI, 1 rank (both shards)": one,
                            "threads backend, 1 process": threads},
            "notes": "examples/pmap_mlp.py; gradients averaged with pmean (MPI Allreduce); "
                     "the model is tiny, so the step time is mostly Python and MPI overhead"}


def run():
    """The rows for BENCHMARKS.md."""
    return [_threads_row(), _mpi_row()]


if __name__ == "__main__":
    for row in run():
        print(row["name"])
        print(f"  ours: {row['ours_s'] * 1e3:.3f} ms")
        for label, seconds in row["competitors"].items():
            print(f"  {label}: {seconds * 1e3:.3f} ms ({seconds / row['ours_s']:.2f}x ours)")
        print(f"  notes: {row['notes']}")
