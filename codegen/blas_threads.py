"""The two BLAS thread pools of a process using NumPy and compiled code, made to poll briefly.

Numba's compiled ``np.dot`` and ``@`` call BLAS through SciPy (``scipy.linalg.cython_blas``).
SciPy's and NumPy's wheels each bundle their own OpenBLAS, so a process using both has two
BLAS thread pools. After a call, OpenBLAS's worker threads keep polling for more work for
about 2**28 cycles (~0.1 s) before they sleep. When a program alternates between NumPy's
BLAS and compiled code's (a training loop that evaluates its loss with NumPy, then calls
``jit(grad(loss))``), both pools' workers poll at once and starve each other: on 2 cores a
NumPy ``32x784 @ 784x128`` product followed by the same product in Numba took 8.0 ms per pair
instead of 0.24 ms (make bench, the row "MLP 784-128-128-10, batch 32, NumPy loss + gradient").

:func:`calm_blas_threads` sets the polling time of both OpenBLAS libraries (SciPy's, the one
compiled code calls, and NumPy's) to 2**:data:`TIMEOUT` cycles (2**18, ~0.1 ms): long enough
that a pool stays awake between the products of one gradient, short enough that it is asleep
when the other pool's work starts. Each library reads ``OPENBLAS_THREAD_TIMEOUT`` again and
restarts its threads, which then use the new value. Measured on 2 cores (a firecracker VM,
2026-11-28; MLP 784-128-128-10 at batch 32, 900 steps per setting, each setting twice,
median / mean / 90th percentile per step):

- SciPy's 2**4, NumPy's 2**28 (sessions 14-22): jit(grad) alone 335 / 353 / 396 us; a NumPy
  loss then jit(grad) 494-642 / 869-1341 / 676-853 us; the hand-written NumPy gradient 288-382.
- 2**18, 2**28: alone 263-354 / 276-368 / 301-397; loss + grad 542-573 / 2148-2518 / 3129-3351.
- 2**18, 2**18 (now): alone 262-265 / 270-284 / 292-328; loss + grad 461-487 / 481-513 /
  530-615; hand NumPy 288.
- 2**16, 2**16: alone 288-289 / 293-305; loss + grad 487-488 / 502-505; hand NumPy 355-368.

A pool that sleeps at once (2**4) must be woken for every product, and on a machine whose
idle cores are halted that costs more than the product (jit(grad) alone: 335 against 263 us);
NumPy's at its default polls through the compiled gradient that follows a NumPy loss (means of
2.1-2.5 ms). Batch 1024 was unchanged within the noise (7.2-7.6 ms ours, 7.2-8.1 ms NumPy).
The price for NumPy alone (its pool now sleeps between products further apart than ~0.1 ms):
the hand-written NumPy gradient took 288 us at both settings in the run above; in a noisier
run, medians of six rounds, 290 against 319 us at batch 32 and 14.3 against 14.8 ms at batch
1024 (2**28 against 2**18; rounds of one setting ranged 285-502 us).
It runs once per process, before the first compiled module is used, and does nothing when
the user set ``OPENBLAS_THREAD_TIMEOUT`` themselves or ``$AUTODIFF_AST_BLAS_TIMEOUT`` is
``keep``; a library not found (another BLAS, a build without these entry points) is skipped.
"""

from __future__ import annotations

import ctypes
import glob
import os

__all__ = ["DEFAULT_TIMEOUT", "TIMEOUT", "calm_blas_threads", "numpy_openblas_path",
           "scipy_openblas_path", "set_both_timeouts", "set_thread_timeout"]

#: log2 of the cycles OpenBLAS's idle workers poll before sleeping, as set here (~0.1 ms) and
#: as OpenBLAS builds it by default (~0.1 s).
TIMEOUT = 18
DEFAULT_TIMEOUT = 28

_done = []  # the result of the first call: it runs once per process


def scipy_openblas_path():
    """The path of the OpenBLAS library SciPy's wheel bundles, or None when there is not
    exactly one (SciPy built against a system BLAS, MKL, Accelerate, or no SciPy).

    >>> path = scipy_openblas_path()
    >>> path is None or "openblas" in os.path.basename(path).lower()
    True
    """
    return _bundled_openblas("scipy")


def numpy_openblas_path():
    """The path of the OpenBLAS library NumPy's wheel bundles, or None when there is not
    exactly one.

    >>> path = numpy_openblas_path()
    >>> path is None or "openblas" in os.path.basename(path).lower()
    True
    """
    return _bundled_openblas("numpy")


def _bundled_openblas(package_name):
    import importlib.util
    try:
        spec = importlib.util.find_spec(package_name)
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


def set_thread_timeout(log2_cycles, path=None):
    """Make the workers of the OpenBLAS at `path` (SciPy's by default) poll
    ``2**log2_cycles`` cycles before sleeping (OpenBLAS clamps it to 4..30; its default is
    28); returns False when that OpenBLAS or its entry points are not found. The library reads
    ``OPENBLAS_THREAD_TIMEOUT`` once, at load: it is made to read it again, then its workers
    are stopped (the next call starts them, with the new value). Call it when no other thread
    is inside that BLAS.

    >>> set_thread_timeout(TIMEOUT) in (True, False)
    True
    """
    path = scipy_openblas_path() if path is None else path
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


def set_both_timeouts(log2_cycles):
    """set_thread_timeout for SciPy's OpenBLAS and NumPy's (when they are two libraries);
    returns whether SciPy's was set.

    >>> set_both_timeouts(TIMEOUT) in (True, False)
    True
    """
    scipy_path, numpy_path = scipy_openblas_path(), numpy_openblas_path()  # (looked up once)
    done = scipy_path is not None and set_thread_timeout(log2_cycles, scipy_path)
    if numpy_path is not None and numpy_path != scipy_path:
        set_thread_timeout(log2_cycles, numpy_path)
    return done


def calm_blas_threads():
    """Set SciPy's and NumPy's OpenBLAS workers to sleep after 2**:data:`TIMEOUT` cycles of
    polling, once per process; returns whether SciPy's was set (now or at an earlier call).

    >>> calm_blas_threads() in (True, False)
    True
    """
    if not _done:
        _done.append(
            "OPENBLAS_THREAD_TIMEOUT" not in os.environ and
            os.environ.get("AUTODIFF_AST_BLAS_TIMEOUT") != "keep" and
            set_both_timeouts(TIMEOUT))
    return _done[0]
