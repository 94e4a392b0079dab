"""The threads of the BLAS that compiled code calls, made to sleep soon after each call.

Numba's compiled ``np.dot`` and ``@`` call BLAS through SciPy (``scipy.linalg.cython_blas``).
SciPy's and NumPy's wheels each bundle their own OpenBLAS, so a process using both has two
BLAS thread pools. After a call, OpenBLAS's worker threads keep polling for more work for
about 2**28 cycles (~0.1 s) before they sleep. When a program alternates between NumPy's
BLAS and compiled code's (a training loop that evaluates its loss with NumPy, then calls
``jit(grad(loss))``), both pools' workers poll at once and starve each other: on 2 cores a
NumPy ``32x784 @ 784x128`` product followed by the same product in Numba took 8.0 ms per pair
instead of 0.24 ms (make bench, the row "MLP 784-128-128-10, batch 32, NumPy loss + gradient").

:func:`calm_blas_threads` sets the polling time of SciPy's OpenBLAS (the one compiled code
calls) to OpenBLAS's minimum, 2**4 cycles: its idle workers sleep at once. The library reads
``OPENBLAS_THREAD_TIMEOUT`` again and restarts its threads, which then use the new value. One
pool that sleeps is enough to end the stall; NumPy's is left alone. Measured in one process,
switching the value between rounds (MLP 784-128-128-10 at batch 32: a NumPy loss, then
``jit(grad)``; 3 rounds of 400 steps): per step, median / mean / 90th percentile, 0.80-0.84 /
0.87-1.36 / 0.91-0.97 ms at 2**4, 0.86-1.01 / 1.70-2.80 / 3.17-4.58 ms at 2**18 and
8.02-8.03 / 18.6-19.3 / 35.8-52.0 ms at OpenBLAS's default 2**28 (the loss alone takes about
0.22 ms, the gradient 0.5 ms). The price: workers that sleep must be woken for the next product,
``jit(grad)`` alone 0.49-0.52 ms against 0.48-0.53 ms at the default (medians: within this
machine's noise; an earlier run of rounds at 2**16: 0.498 against 0.476 ms, 4%). It runs once
per process, before the first compiled module is used, and does nothing when the user set
``OPENBLAS_THREAD_TIMEOUT`` themselves, when ``$AUTODIFF_AST_BLAS_TIMEOUT`` is ``keep``, or
when SciPy's OpenBLAS is not found (another BLAS, a build without these entry points).
"""

from __future__ import annotations

import ctypes
import glob
import os

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT", "calm_blas_threads", "scipy_openblas_path",
           "set_thread_timeout"]

#: log2 of the cycles OpenBLAS's idle workers poll before sleeping, as set here (4, OpenBLAS's
#: minimum: they sleep at once) and as OpenBLAS builds it by default.
TIMEOUT = 4
DEFAULT_TIMEOUT = 28

_done = []  # the result of the first call: it runs once per process


def scipy_openblas_path():
    """The path of the OpenBLAS library SciPy's wheel bundles, or None when there is not
    exactly one (SciPy built against a system BLAS, MKL, Accelerate, or no SciPy).

    >>> path = scipy_openblas_path()
    >>> path is None or "openblas" in os.path.basename(path).lower()
    True
    """
    import importlib.util
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    package = os.path.dirname(spec.origin)
    found = []
    for directory in (package + ".libs", os.path.join(package, ".dylibs")):
        found += [p for p in glob.glob(os.path.join(directory, "*openblas*"))
                  if p.endswith((".so", ".dylib", ".dll")) or ".so." in p]
    return found[0] if len(found) == 1 else None


def set_thread_timeout(log2_cycles):
    """Make SciPy's OpenBLAS workers poll ``2**log2_cycles`` cycles before sleeping (OpenBLAS
    clamps it to 4..30; its default is 28); returns False when SciPy's OpenBLAS or its entry
    points are not found. The library reads ``OPENBLAS_THREAD_TIMEOUT`` once, at load: it is
    made to read it again, then its workers are stopped (the next call starts them, with the
    new value). Call it when no other thread is inside SciPy's BLAS.

    >>> set_thread_timeout(TIMEOUT) in (True, False)
    True
    """
    path = scipy_openblas_path()
    if path is None:
        return False
    try:
        library = ctypes.CDLL(path)
        read_env = library.openblas_read_env
        shutdown = library.blas_thread_shutdown_
    except (OSError, AttributeError):
        return False
    saved = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(int(log2_cycles))
    try:
        read_env()
    finally:
        if saved is None:
            del os.environ["OPENBLAS_THREAD_TIMEOUT"]
        else:
            os.environ["OPENBLAS_THREAD_TIMEOUT"] = saved
    shutdown()
    return True


def calm_blas_threads():
    """Set SciPy's OpenBLAS workers to sleep after :data:`TIMEOUT` (log2 cycles) of polling
    (at once), once per process; returns whether it did (now or at an earlier call).

    >>> calm_blas_threads() in (True, False)
    True
    """
    if not _done:
        _done.append(
            "OPENBLAS_THREAD_TIMEOUT" not in os.environ and
            os.environ.get("AUTODIFF_AST_BLAS_TIMEOUT") != "keep" and
            set_thread_timeout(TIMEOUT))
    return _done[0]
