"""Compile each ``@overload`` implementation once for callers that differ only in wrappers.

Numba builds the implementation of an ``@overload`` (``np.empty``, ``np.zeros_like``,
``max`` of a tuple, and the dialect's own helpers such as ``exp_fast``) for every
argument types *and every set of the caller's compile flags*: its cache key is the whole
``Flags`` object of the function being compiled. Only four of those flags reach the
implementation (``nrt``, ``fastmath``, ``error_model`` and ``forceinline``, which its compile
inherits from the caller); the rest describe the caller alone. A generated module compiles its
entry points with the CPython wrapper and every function Python never calls without it
(``no_cpython_wrapper=True, no_cfunc_wrapper=True``: :meth:`NumbaOptions.decorator
<codegen.numba_cpu.NumbaOptions.decorator>`), so each implementation both kinds call was
built and compiled twice: ADBench GMM's gradient built 425 implementations where 305 differ
(``exp_fast`` of a float64 three times, ``np.empty(n)`` twice, ...).

:func:`share_overload_implementations` narrows the key once per process, the first time a
module is compiled or loaded for the CPU: the caller's flags with those two wrapper flags set
to one value, every other flag kept (so callers that differ in fastmath or the error model
still get implementations of their own). Measured on a fresh cache, GMM's first
``jit(grad)`` call, alternating runs: 9.58 -> 8.99 s and 9.74/10.75 -> 8.57/9.46 s (the
machine was shared; the count of built implementations, 425 -> 305, is exact). It changes a
method of Numba's overload template class, so everything compiled in the process afterwards
shares the same way; it applies to the Numba versions setup.cfg allows (those whose template
has the method, checked before changing it) and ``AUTODIFF_AST_SHARE_OVERLOADS=0`` leaves
Numba as it is.

>>> share_overload_implementations() in (True, False)
True
"""

from __future__ import annotations

import os

__all__ = ["share_overload_implementations", "CALLER_ONLY_FLAGS"]

#: Compile flags that shape the caller's own wrappers and nothing its callees inherit.
CALLER_ONLY_FLAGS = ("no_cpython_wrapper", "no_cfunc_wrapper")

_state = {"done": False, "applied": False}


def share_overload_implementations():
    """Key Numba's overload implementations by the flags they inherit (once per process);
    returns whether the key is narrowed."""
    if _state["done"]:
        return _state["applied"]
    _state["done"] = True
    if os.environ.get("AUTODIFF_AST_SHARE_OVERLOADS", "1") == "0":
        return False
    try:
        from numba.core import targetconfig
        from numba.core.typing.templates import _OverloadFunctionTemplate as template
    except ImportError:
        return False
    if not (hasattr(template, "_get_impl") and hasattr(template, "_build_impl") and
            hasattr(targetconfig.ConfigStack, "top_or_none")):
        return False

    def _get_impl(self, args, kws):
        # Numba's own method with the key's flags passed through _shared_flags
        cache_key = (self.context, tuple(args), tuple(kws.items()),
                     _shared_flags(targetconfig.ConfigStack.top_or_none()))
        try:
            return self._impl_cache[cache_key]
        except KeyError:
            pass
        return self._build_impl(cache_key, args, kws)

    template._get_impl = _get_impl
    _state["applied"] = True
    return True


def _shared_flags(flags):
    """`flags` with the caller-only flags set to one value (None stays None)."""
    if flags is None:
        return None
    shared = flags.copy()
    for name in CALLER_ONLY_FLAGS:
        if name in shared.options:
            setattr(shared, name, False)
    return shared
