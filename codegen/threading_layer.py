"""Which of Numba's threading layers runs our parallel loops.

Two kinds of generated code run on Numba's threads: ``jit(vmap(f))``'s per-example driver (a
``numba.prange`` loop over examples, :mod:`autodiff_ast.batch_loop`) and a fused run's pass over
a large matrix's rows (:mod:`codegen.row_products`). Before the first of them runs,
:func:`configure_threading` picks the layer, unless the user chose one.
"""

from __future__ import annotations

import os

__all__ = ["configure_threading"]


def configure_threading():
    """Choose Numba's threading layer for our parallel loops; returns the layer chosen.

    The user's choice wins (``NUMBA_THREADING_LAYER``, or ``numba.config.THREADING_LAYER`` set
    before), and so does a layer already started. Otherwise 'workqueue': Numba's own pool,
    always available, whose idle threads sleep instead of spinning (OpenMP's spin beside
    BLAS's threads stalled prange calls by 80-98 ms instead of 4-13 ms on 2 busy cores).
    Workqueue must not run parallel functions from several threads at once, nor one inside
    another: our compiled functions hold the GIL, and the functions a prange loop or pmap's
    threads call are written without parallel loops, so they never do; if your own ``nogil``
    parallel functions run on several threads, or call our compiled functions inside a
    ``prange`` loop, set ``NUMBA_THREADING_LAYER=omp`` (or ``tbb``).

    >>> configure_threading() in ("workqueue", "omp", "tbb", "default", "safe", "threadsafe",
    ...                           "forksafe")
    True
    """
    import numba
    from numba.np.ufunc import parallel
    chosen = numba.config.THREADING_LAYER
    if os.environ.get("NUMBA_THREADING_LAYER") or chosen != "default" or \
            getattr(parallel, "_is_initialized", False):
        return chosen
    numba.config.THREADING_LAYER = "workqueue"
    return "workqueue"
