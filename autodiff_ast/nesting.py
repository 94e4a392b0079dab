"""Whether the code being generated is for another transformation to read.

``hessian(f)`` differentiates the source ``grad(f)`` writes, ``vmap(grad(f))`` batches it.
Such code must be code the front end accepts as input: reverse mode then keeps a vector made
afresh in each loop step on a list tape instead of writing it through a view of a
preallocated tape row (shared memory, which the front end refuses). A transformation asking
for an inner one's function does so inside :func:`code_to_transform`; reverse mode and the
module cache read :func:`writing_code_to_transform`.

>>> writing_code_to_transform()
False
>>> with code_to_transform():
...     writing_code_to_transform()
True
"""

from __future__ import annotations

import contextlib
import contextvars

__all__ = ["code_to_transform", "writing_code_to_transform"]

_TO_TRANSFORM = contextvars.ContextVar("autodiff_ast_code_to_transform", default=False)


@contextlib.contextmanager
def code_to_transform():
    """Within this block, generated code is for another transformation to read
    (``hessian``, ``grad(grad(f))``, ``jvp(grad(f))``, ``vmap(grad(f))``)."""
    token = _TO_TRANSFORM.set(True)
    try:
        yield
    finally:
        _TO_TRANSFORM.reset(token)


def writing_code_to_transform():
    """Whether the code being written is for another transformation to read."""
    return _TO_TRANSFORM.get()
