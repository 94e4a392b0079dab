"""Abstract signatures written as text: ``"x=float64[N], y=float64"``.

The command line cannot see argument values, so it takes argument types from a ``--signature``
option or from the function's annotations. The grammar is small: a dtype (``float64``,
``float32``, ``float``, ``int``, ``int64``, ``bool``), optionally followed by axes in brackets,
each ``N`` (or ``:``, or a size other than 1) for an axis of any size, or ``1`` for an axis of
size one; ``float64[...]`` is an array of unknown rank. A bare ``float64`` is a scalar.

>>> from autodiff_ast.types import describe
>>> sig = parse_signature("x=float64[N, 1], y=float64, n=int")
>>> [(k, describe(v)) for k, v in sig.items()]
[('x', 'float64[N,1]'), ('y', 'float64'), ('n', 'int')]
"""

from __future__ import annotations

import inspect
import re

import numpy as np

from . import types as T

#: What a parameter with neither a signature entry nor an annotation is assumed to be.
DEFAULT = T.AType("array", "float64", None)

_DTYPES = {"float": "float64", "float64": "float64", "f8": "float64", "double": "float64",
           "float32": "float32", "f4": "float32", "single": "float32", "int": "int64",
           "int64": "int64", "int32": "int32", "bool": "bool"}
_TYPE = re.compile(r"^\s*(?:np\.|numpy\.)?(\w+)\s*(?:\[(.*)\])?\s*$")


class SignatureError(ValueError):
    """A signature or annotation that cannot be read as an abstract type."""


def parse_type(text):
    """The abstract type written as `text` (``float64[N,1]``, ``float``, ``int``...).

    >>> T.describe(parse_type("float32[:, :]"))
    'float32[N,N]'
    >>> T.describe(parse_type("float64[...]"))
    'float64[...]'
    """
    match = _TYPE.match(text)
    if not match or match.group(1) not in _DTYPES:
        raise SignatureError(f"cannot read the type {text.strip()!r}: write e.g. float64, "
                             "float64[N], float32[N,1] or float64[...]")
    dtype = _DTYPES[match.group(1)]
    axes = match.group(2)
    if axes is None:
        if dtype.startswith("int"):
            return T.AType("int", dtype)
        return T.BOOL if dtype == "bool" else T.AType("float", dtype)
    axes = axes.strip()
    if axes in ("...", "*"):
        return T.AType("array", dtype, None)
    dims = []
    for axis in axes.split(","):
        axis = axis.strip()
        if axis == "1":
            dims.append(1)
        elif axis in ("N", ":") or axis.isdigit() or axis.isidentifier():
            dims.append(T.N)
        else:
            raise SignatureError(f"cannot read the axis {axis!r} in {text.strip()!r}: "
                                 "use N (any size) or 1 (size one)")
    if not dims:
        raise SignatureError(f"{text.strip()!r} has no axes: write float64 for a scalar")
    return T.AType("array", dtype, tuple(dims))


def _split_top_level(text):
    """Split at commas that are not inside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def parse_signature(text):
    """``"x=float64[N], y=float64"`` as {parameter name: abstract type}.

    >>> list(parse_signature("a=float, b=float64[N,N]"))
    ['a', 'b']
    """
    out = {}
    for part in _split_top_level(text or ""):
        if "=" not in part:
            raise SignatureError(f"expected name=type in the signature, got {part.strip()!r}")
        key, _, value = part.partition("=")
        key = key.strip()
        if not key.isidentifier():
            raise SignatureError(f"{key!r} is not a parameter name")
        if key in out:
            raise SignatureError(f"the signature gives {key!r} twice")
        out[key] = parse_type(value)
    return out


def annotation_type(annotation):
    """The abstract type of a parameter annotation, or None when it says nothing we use.

    >>> T.describe(annotation_type(float)), T.describe(annotation_type("float32[N]"))
    ('float64', 'float32[N]')
    """
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):  # postponed annotations, or our own type strings
        if annotation.strip() in ("np.ndarray", "numpy.ndarray", "ndarray"):
            return DEFAULT
        match = _TYPE.match(annotation)
        if not match or match.group(1) not in _DTYPES:
            return None  # some other annotation (a class, a typing construct): not ours
        return parse_type(annotation)
    if annotation is float:
        return T.FLOAT
    if annotation is int:
        return T.INT
    if annotation is bool:
        return T.BOOL
    if annotation is np.ndarray:
        return DEFAULT
    if isinstance(annotation, type) and issubclass(annotation, np.floating):
        return T.AType("float", np.dtype(annotation).name)
    return None


def signature_of(fn, text=None):
    """Abstract types of every parameter of `fn`: the signature text first, then the
    annotations, else a float64 array of unknown rank.

    >>> def f(x, y: float):
    ...     return x * y
    >>> {k: T.describe(v) for k, v in signature_of(f, "x=float64[N]").items()}
    {'x': 'float64[N]', 'y': 'float64'}
    """
    params = list(inspect.signature(fn).parameters.values())
    given = parse_signature(text) if text else {}
    names = [p.name for p in params]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SignatureError(f"the signature names {', '.join(unknown)}, which "
                             f"{fn.__name__} does not take (it takes {', '.join(names)})")
    out = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in given:
            out[p.name] = given[p.name]
            continue
        try:
            typ = annotation_type(p.annotation)
        except SignatureError as exc:
            raise SignatureError(f"the annotation of {p.name}: {exc}") from None
        out[p.name] = typ if typ is not None else DEFAULT
    return out
