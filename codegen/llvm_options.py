"""Let LLVM's loop vectorizer check more pairs of arrays for overlap (once per process).

A loop that writes several arrays and reads others vectorizes only when LLVM can rule out
that a write lands where another access reads or writes: for arrays it knows nothing about
(Numba's arrays are plain pointers to it) it emits run-time checks, one per pair, and gives up
past a threshold ("loop not vectorized: too many memory checks needed", in its remarks).
Generated loops hit it where a hand-written loop would not: the forward step of ADBench's
LSTM cell writes the new cell and hidden vectors and five saved values of the loop's stack
while reading the input, the weights and the state, and ran one unit at a time (the gradient's
forward sweep 1.75 ms against the primal's 0.75 ms); with the threshold raised it vectorizes.
The checks cost a few comparisons per run of the loop, before it starts.

:func:`allow_more_memory_checks` sets LLVM's ``-vectorize-memory-check-threshold`` (the
vectorizer's limit when it weighs the checks against the loop's cost) and
``-runtime-memory-check-threshold`` (its limit otherwise) once, the first time a module is
compiled or loaded for the CPU. These are options of the LLVM inside llvmlite, shared by
everything Numba compiles in the process afterwards: more loops may vectorize, with the same
results (the checks fall back to the scalar loop when arrays overlap; no reassociation is
allowed by it). Set ``AUTODIFF_AST_LLVM_TUNING=0`` to leave LLVM's defaults alone.

>>> allow_more_memory_checks() in (True, False)
True
"""

from __future__ import annotations

import os

__all__ = ["allow_more_memory_checks", "MEMORY_CHECKS"]

#: The number of run-time overlap checks a loop may need and still vectorize.
MEMORY_CHECKS = 256

_state = {"done": False, "applied": False}


def allow_more_memory_checks():
    """Raise LLVM's limits on run-time overlap checks once; returns whether they are raised."""
    if _state["done"]:
        return _state["applied"]
    _state["done"] = True
    if os.environ.get("AUTODIFF_AST_LLVM_TUNING", "1") == "0":
        return False
    try:
        import llvmlite.binding as llvm
        for option in ("vectorize-memory-check-threshold", "runtime-memory-check-threshold"):
            llvm.set_option("autodiff-ast", f"-{option}={MEMORY_CHECKS}")
    except (ImportError, AttributeError, RuntimeError):
        return False
    _state["applied"] = True
    return True
