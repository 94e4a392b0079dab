"""``checkpoint``: trade recomputation for memory in the reverse sweep (JAX's name).

``checkpoint(f)`` marks a helper function: its reverse pass stores nothing from its inside and
recomputes its forward pass when the backward sweep reaches it. ``checkpoint(range(n))`` in a
``for`` loop marks a time-stepping loop: the forward sweep keeps the loop's state only every
``ceil(sqrt(n))`` steps and the backward sweep recomputes one segment at a time, so tape memory
grows with ``sqrt(n)`` instead of ``n``. Outside a differentiated function both are identities.

>>> import numpy as np
>>> import autodiff_ast as ad
>>> step = ad.checkpoint(lambda y: np.tanh(1.5 * y))
>>> float(step(0.0))
0.0
>>> list(ad.checkpoint(range(3)))
[0, 1, 2]
"""

from __future__ import annotations

import functools


def checkpoint(fun):
    """Mark a function (or a ``range`` driving a loop) for recomputation in reverse mode.

    >>> def f(x):
    ...     return x * x
    >>> checkpoint(f)(3.0)
    9.0
    """
    if isinstance(fun, range):
        return fun  # recognised syntactically in `for t in checkpoint(range(n))`
    if not callable(fun):
        raise TypeError(f"checkpoint expects a function or a range, got {fun!r}")

    @functools.wraps(fun)
    def checkpointed(*args, **kwargs):
        return fun(*args, **kwargs)

    checkpointed.__autodiff_checkpoint__ = True
    return checkpointed
