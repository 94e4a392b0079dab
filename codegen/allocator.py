"""Keep large temporaries of compiled code in the heap between calls (glibc only).

Numba allocates every array a compiled function makes with the C library's ``malloc``. With
glibc's defaults, a block above the mmap threshold (128 KiB at first, raised up to 32 MiB as
such blocks are freed) is a fresh ``mmap``, and freed heap memory above the trim threshold is
handed back to the system at once. A gradient over a million points makes and frees a few 8 MB
temporaries per call, so each call faults in its pages again: measured here, jit(grad) of a
linear regression on 1e6 points took 7.7 ms per call in a new process against 1.3 ms once the
blocks stay in the heap (BENCHMARKS.md; NumPy avoids part of this with transparent huge pages,
which Numba's allocations do not ask for).

:func:`keep_large_blocks` raises both thresholds once per process, the first time a module is
compiled or loaded for the CPU: blocks up to 32 MiB come from the heap, and up to 256 MiB of
freed heap is kept for the next call. The cost is that memory freed by the process (by any
library) is returned to the system later; set ``AUTODIFF_AST_MALLOC_TUNING=0`` to leave the
C library's defaults alone. Elsewhere than glibc (macOS, Windows, musl) this does nothing.

>>> keep_large_blocks() in (True, False)
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["keep_large_blocks"]

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed value on 64-bit systems
TRIM_THRESHOLD = 256 * 1024 * 1024

_state = {"done": False, "applied": False}


def keep_large_blocks():
    """Raise glibc's mmap and trim thresholds once; returns whether they are raised now."""
    if _state["done"]:
        return _state["applied"]
    _state["done"] = True
    if os.environ.get("AUTODIFF_AST_MALLOC_TUNING", "1") == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    _state["applied"] = applied
    return applied
