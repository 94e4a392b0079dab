"""Tape memory of a long time-stepping loop, with and without ``checkpoint(range(n))``.

A 100,000-step nonlinear recurrence on a small state: the plain reverse sweep keeps every
step's values on its tapes; the checkpointed loop keeps the state every ~sqrt(n) steps and one
segment's tapes at a time. Peak memory is measured with tracemalloc around one gradient call
(generation and loading happen before, in a warm-up call).
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

import autodiff_ast as ad

STEPS = 100_000
STATE = 64


def plain(y0, a, steps):
    y = y0.copy()
    for t in range(steps):
        y = y + 0.001 * np.tanh(a * y)
    return np.sum(y * y)


def checkpointed(y0, a, steps):
    y = y0.copy()
    for t in ad.checkpoint(range(steps)):
        y = y + 0.001 * np.tanh(a * y)
    return np.sum(y * y)


def _measure(fn, *args, repeat=3):
    fn(*args)  # generate and load the module
    tracemalloc.start()
    fn(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return float(np.median(times)), peak


def run(steps=STEPS):
    """Rows for BENCHMARKS.md: time and peak tape memory of both variants."""
    y0 = np.linspace(-0.5, 0.5, STATE)
    g_plain = ad.grad(plain, argnums=(0, 1))
    g_ckpt = ad.grad(checkpointed, argnums=(0, 1))
    t_plain, m_plain = _measure(g_plain, y0, 0.9, steps)
    t_ckpt, m_ckpt = _measure(g_ckpt, y0, 0.9, steps)
    same = all(np.allclose(p, c) for p, c in zip(g_plain(y0, 0.9, steps),
                                                  g_ckpt(y0, 0.9, steps)))
    primal_start = time.perf_counter()
    plain(y0, 0.9, steps)
    t_primal = time.perf_counter() - primal_start
    note = (f"{steps} steps, state of {STATE} floats. Peak memory: plain {m_plain / 2**20:.1f} "
            f"MiB, checkpointed {m_ckpt / 2**20:.1f} MiB ({m_plain / max(m_ckpt, 1):.0f}x less). "
            f"Recompute overhead {t_ckpt / t_plain:.2f}x the plain gradient's time; gradients "
            f"equal: {same}. Primal alone {t_primal:.3f} s.")
    return [{"name": "grad of a 100k-step loop, checkpoint(range(n)) vs plain tapes",
             "ours_s": t_ckpt, "competitors": {"plain tapes (ours)": t_plain}, "notes": note,
             "peak_bytes": {"plain": m_plain, "checkpointed": m_ckpt}}]


if __name__ == "__main__":
    for row in run():
        print(row["name"])
        print(row["notes"])
