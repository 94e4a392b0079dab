"""Timing helpers shared by every benchmark module (not a benchmark itself: no ``run()``).

One way to time a call everywhere: ``median_time`` warms up once, picks how many calls make a
round long enough to measure, and returns the median of several rounds, per call.
``first_call`` times the first call of something freshly made (generation, compilation or
cache load included); ``fmt`` prints a duration with a readable unit. ``compare`` makes one
row of BENCHMARKS.md: it checks ours and every competitor against a reference gradient
(raising ``AssertionError`` on a mismatch, before anything is timed), then times them all side
by side (``side_by_side``: their rounds taken in turn) with repeat counts adapted to their cost.

Benchmark modules are imported by file (benchmarks/run.py), so they import this one with
``benchmarks/`` on ``sys.path``::

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from timing import first_call, fmt, median_time

>>> seconds = median_time(lambda: sum(range(100)), repeats=3, min_time=1e-3)
>>> 0.0 < seconds < 0.01
True
>>> fmt(2.5e-5), fmt(0.0123), fmt(3.0)
('25.0 us', '12.30 ms', '3.00 s')
"""

from __future__ import annotations

import math
import statistics
import time

__all__ = ["median_time", "adaptive_time", "side_by_side", "first_call", "timed", "fmt",
           "assert_close", "compare"]


#: Seconds to wait before each timed block, so that the thread pools the last block woke
#: (NumPy's and SciPy's OpenBLAS workers poll ~0.1 s after a product; JAX's too) are asleep
#: and every function is timed on a quiet machine. Without it, ours (timed first, after the
#: previous workload's competitors) measured MLP batch 32 at 464 us against hand NumPy's
#: 294 us; with it 354 against 301 us, as an interleaved A/B run shows (make bench, 11-28).
SETTLE_S = 0.3

#: Pause before each round of :func:`side_by_side` (long enough for OpenBLAS's workers, which
#: poll ~0.1 s after a product, to sleep again before the next function's round).
ROUND_SETTLE_S = 0.1


def median_time(call, repeats=7, min_time=0.02, max_number=1 << 14, warmup=True):
    """Median seconds of one ``call()`` over ``repeats`` rounds, each at least ``min_time`` long.

    A round runs the call ``number`` times, ``number`` doubling from 1 until a round takes
    ``min_time`` (or ``max_number`` is reached); the first such round counts as the first of
    the ``repeats``; the rounds start after a pause of :data:`SETTLE_S`. For expensive calls
    (seconds each) pass ``repeats=3``: a round is then one call. ``warmup=False`` skips the
    untimed first call (when the caller already made it).

    >>> median_time(lambda: None, repeats=3) < 1e-3
    True
    """
    if warmup:
        call()
    time.sleep(SETTLE_S)
    number, first = _round_size(call, min_time, max_number)
    times = [first] + [_round(call, number) for _ in range(repeats - 1)]
    return float(statistics.median(times))


def _round(call, number):
    """Seconds per call of ``number`` calls in a row."""
    start = time.perf_counter()
    for _ in range(number):
        call()
    return (time.perf_counter() - start) / number


def _round_size(call, min_time, max_number):
    """(number, seconds per call of that round): the first round of ``number`` calls (doubling
    from 1) that takes at least ``min_time`` seconds, or has ``max_number`` calls."""
    number = 1
    while True:
        seconds = _round(call, number)
        if seconds * number >= min_time or number >= max_number:
            return number, seconds
        number *= 2


def timed(call):
    """(result, seconds) of one ``call()``.

    >>> timed(lambda: 42)[0]
    42
    """
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start


def first_call(make, *args):
    """(function, result, seconds): ``make()`` then one call on ``args``, timed together.

    >>> fn, out, seconds = first_call(lambda: abs, -3)
    >>> fn is abs, out
    (True, 3)
    """
    start = time.perf_counter()
    fn = make()
    out = fn(*args)
    return fn, out, time.perf_counter() - start


def fmt(seconds):
    """A duration with a readable unit ('n/a' for None or NaN).

    >>> fmt(None), fmt(float("nan")), fmt(0.5)
    ('n/a', 'n/a', '500.00 ms')
    """
    if seconds is None or not isinstance(seconds, (int, float)) or math.isnan(seconds):
        return "n/a"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def adaptive_time(call, first_seconds):
    """``median_time`` with fewer rounds for expensive calls (``first_seconds``: one call's
    cost, e.g. the checking call): 7 rounds under 0.2 s a call, 5 under 1 s, the median of 3
    single calls under 20 s, else one single call.

    >>> adaptive_time(lambda: None, 1e-6) < 1e-3
    True
    """
    if first_seconds < 0.2:
        return median_time(call)
    if first_seconds < 1.0:
        return median_time(call, repeats=5)
    if first_seconds < 20.0:
        return median_time(call, repeats=3, warmup=False)
    return timed(call)[1]


def side_by_side(calls, costs, min_time=0.02, max_number=1 << 14):
    """Median seconds per call of each of ``calls`` (``{label: call}``), their rounds in turn.

    ``costs`` gives one warm call's seconds for each label. Calls under 1 s are timed round by
    round in turn (round 1 of every call, then round 2 of every call, ...), each round after a
    pause of :data:`ROUND_SETTLE_S`: 7 rounds for calls under 0.2 s, 5 under 1 s, a round
    being as many calls as take ``min_time``. This machine has spells of 50-200 ms in which
    memory-bound code runs up to twice as slow (seen on the same compiled gradient in most
    processes it was timed in, with no page faults nor context switches), so timing one
    function's rounds back to back, then the next's, could hand a spell to one of them and
    skew a ratio; in turn, each function's median sees the same machine. Slower calls are
    timed alone with
    :func:`adaptive_time`.

    >>> out = side_by_side({"a": lambda: None, "b": lambda: sum(range(10))},
    ...                    {"a": 1e-7, "b": 1e-6}, min_time=1e-3)
    >>> sorted(out), all(0.0 < s < 1e-3 for s in out.values())
    (['a', 'b'], True)
    """
    repeats = {label: 7 if costs[label] < 0.2 else 5 for label in calls if costs[label] < 1.0}
    out = {label: adaptive_time(call, costs[label]) for label, call in calls.items()
           if label not in repeats}
    time.sleep(SETTLE_S)
    numbers = {label: _round_size(calls[label], min_time, max_number)[0] for label in repeats}
    times = {label: [] for label in repeats}
    for round_ in range(max(repeats.values(), default=0)):
        for label in repeats:
            if round_ >= repeats[label]:
                continue
            time.sleep(ROUND_SETTLE_S)
            times[label].append(_round(calls[label], numbers[label]))
    out.update({label: float(statistics.median(seconds)) for label, seconds in times.items()})
    return {label: out[label] for label in calls}


def _leaves(value):
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def assert_close(actual, expected, rtol=1e-6, atol=1e-9, what="result"):
    """Raise AssertionError unless every leaf of `actual` (arrays, tuples, dicts) is close to
    `expected`'s.

    >>> assert_close((1.0, {"a": [2.0]}), (1.0, {"a": [2.0 + 1e-12]}))
    """
    import numpy as np
    got, want = _leaves(actual), _leaves(expected)
    if len(got) != len(want):
        raise AssertionError(f"{what}: {len(got)} arrays, the reference has {len(want)}")
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if a.shape != b.shape or not np.allclose(a, b, rtol=rtol, atol=atol):
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            err = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
            raise AssertionError(f"{what} disagrees with the reference (output {k}: shapes "
                                 f"{a.shape} vs {b.shape}, max abs error {err:.3g}, "
                                 f"reference scale {scale:.3g})")


def _blocking(fn, args):
    """A call of fn(*args) that waits for asynchronous results (JAX arrays)."""
    def call():
        value = fn(*args)
        for leaf in _leaves(value):
            if hasattr(leaf, "block_until_ready"):
                leaf.block_until_ready()
        return value
    return call


_OURS, _PRIMAL = object(), object()  # labels no competitor can have


def compare(name, ours, args, reference, competitors, primal=None, notes="", rtol=1e-6,
            atol=1e-9, skip_over=20.0, first_s=None):
    """One row: ``{name, ours_s, competitors: {label: seconds}, notes}``.

    ``ours`` and every competitor (``{label: fn or None}``; None: not installed) are called on
    ``args`` and checked against ``reference`` with :func:`assert_close` before timing (JAX's
    asynchronous results are waited for). A competitor that raises is reported in the notes. The
    notes give ours' first call (generation + compilation or cache load), grad/primal (when
    ``primal``, e.g. ``jit(f)``, is given) and each competitor's first call. A competitor whose
    checking call takes more than ``skip_over`` seconds is reported, not timed. ``first_s``:
    ours' first call when the caller already made it (the one here is then warm).

    >>> row = compare("abs", abs, (-2.0,), 2.0, {"same": abs})
    >>> row["name"], sorted(row["competitors"])
    ('abs', ['same'])
    """
    result, first = timed(lambda: ours(*args))
    first = first if first_s is None else first_s
    assert_close(result, reference, rtol, atol, f"{name}: ours")
    # one warm call of each gives its cost (how many rounds it gets); then all are timed in turn
    calls, costs = {_OURS: lambda: ours(*args)}, {_OURS: timed(lambda: ours(*args))[1]}
    firsts, skipped = [], []
    for label, fn in competitors.items():
        if fn is None:
            continue
        call = _blocking(fn, args)
        try:
            value, seconds = timed(call)
        except Exception as exc:  # noqa: BLE001 (a competitor's failure is reported, not fatal)
            skipped.append(f"{label} failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        assert_close(value, reference, rtol, atol, f"{name}: {label}")
        firsts.append(f"{label} {fmt(seconds)}")
        if seconds > skip_over:
            skipped.append(f"{label} skipped: > {skip_over:.0f} s (its checking call took "
                           f"{seconds:.0f} s)")
            continue
        calls[label] = call
        costs[label] = seconds if seconds >= 1.0 else timed(call)[1]
    if primal is not None:
        primal_first = timed(lambda: primal(*args))[1]
        calls[_PRIMAL] = lambda: primal(*args)
        costs[_PRIMAL] = timed(calls[_PRIMAL])[1]
    times = side_by_side(calls, costs)
    ours_s = times.pop(_OURS)
    primal_s = times.pop(_PRIMAL, None)
    parts = [f"first call (generate + compile or load) {first:.2f} s"]
    if primal is not None:
        parts.append(f"grad/primal {ours_s / primal_s:.2f} (jit primal {fmt(primal_s)}, "
                     f"first call {primal_first:.2f} s)")
    if firsts:
        parts.append("competitors' first calls (checked against the reference): "
                     + ", ".join(firsts))
    parts += skipped
    text = "; ".join(parts) + "."
    if notes:
        text += " " + notes.strip()
    return {"name": name, "ours_s": ours_s, "competitors": times, "notes": text}


# ---------------------------------------------------------------- competitors and drivers
def optional_jax():
    """(jax, jax.numpy) in 64-bit mode, or None when JAX is not installed (the bench extra)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    return jax, jnp


def optional_autograd():
    """(autograd, autograd.numpy), or None when autograd is not installed."""
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        return None
    return autograd, anp


def collect(makers):
    """The rows of every maker in turn; a maker that fails becomes one FAILED row (a broken
    workload must not hide the others)."""
    rows = []
    for make in makers:
        try:
            rows.extend(make())
        except Exception as exc:  # noqa: BLE001
            rows.append({"name": make.__name__.replace("_rows", ""), "ours_s": float("nan"),
                         "competitors": {}, "notes": f"FAILED: {type(exc).__name__}: "
                                                     f"{str(exc)[:300]}"})
    return rows


def print_rows(rows):
    """Print rows as `python benchmarks/<module>.py` shows them."""
    for row in rows:
        print(row["name"])
        print(f"  ours: {fmt(row['ours_s'])}")
        for label, seconds in row["competitors"].items():
            print(f"  {label}: {fmt(seconds)} ({seconds / row['ours_s']:.2f}x ours)")
        print(f"  notes: {row['notes']}")
