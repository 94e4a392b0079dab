"""Abstract values: what static inference knows about a name without tracing.

An abstract value records the kind (float scalar, array, int, bool, tuple...), the dtype and,
for arrays, each axis as ``1`` (size one: it broadcasts) or ``N`` (any other size). Sizes are
never recorded, so one generated module serves every input size; which axes are size one is
recorded because it decides where broadcasting happens and so where adjoints must be summed.

>>> import numpy as np
>>> describe(abstract_of(np.ones((3, 1))))
'float64[N,1]'
>>> describe(broadcast(abstract_of(np.ones((3, 1))), abstract_of(np.ones(4))))
'float64[N,N]'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N = "N"  # an axis whose size is not known to be one


@dataclass(frozen=True)
class AType:
    """An abstract value.

    kind is one of 'float' (a real scalar), 'array', 'int', 'bool', 'tuple', 'none', 'str',
    'object' (an opaque value we only pass around) or 'unknown'.
    """

    kind: str
    dtype: str | None = None
    dims: tuple | None = None  # arrays: one entry per axis, 1 or N; None when the rank is unknown
    elts: tuple | None = None  # tuples: the element types
    value: object = None  # compile-time constant value, when known (ints, strings, tuples of ints)
    # tuples: the NamedTuple class it was built as in the function (``P(a, b)``), so that
    # ``p.a`` reads an entry by its field; generated code holds a plain tuple
    record: type | None = None

    @property
    def ndim(self):
        if self.kind in ("float", "int", "bool"):
            return 0
        if self.kind == "array" and self.dims is not None:
            return len(self.dims)
        return None

    @property
    def is_float(self):
        """True for values that carry derivatives: real floating scalars and arrays."""
        return self.kind in ("float", "unknown") or (
            self.kind == "array" and self.dtype in (None, "float64", "float32")
        )


UNKNOWN = AType("unknown")
FLOAT = AType("float", "float64")
INT = AType("int", "int64")
BOOL = AType("bool", "bool")
NONE = AType("none")
DICT = AType("object", "dict")  # a dict display made in the function (an aux output)


def flat_tuple(t):
    """Whether `t` is a tuple of known length whose elements are numbers or arrays.

    >>> flat_tuple(AType("tuple", elts=(FLOAT, array((N,))))), flat_tuple(AType("tuple"))
    (True, False)
    """
    return t.kind == "tuple" and t.elts is not None and all(
        e.kind in ("float", "int", "bool", "array") for e in t.elts)


def nested_tuple(t):
    """Whether `t` is a tuple of known length whose elements are numbers, arrays or such
    tuples again.

    >>> nested_tuple(AType("tuple", elts=(FLOAT, AType("tuple", elts=(INT,)))))
    True
    """
    return t.kind == "tuple" and t.elts is not None and all(
        e.kind in ("float", "int", "bool", "array") or nested_tuple(e) for e in t.elts)


def carries_derivative(t):
    """Whether a value of type `t` has a derivative: a real float or array, or a tuple of
    known length with such an element (at any depth).

    >>> carries_derivative(AType("tuple", elts=(INT, AType("tuple", elts=(FLOAT,)))))
    True
    """
    if t.kind == "tuple":
        return t.elts is not None and any(carries_derivative(e) for e in t.elts)
    return t.is_float and t.kind != "unknown"


def holds_differentiated_tuple(t):
    """Whether `t` is a tuple with an element that is a tuple with a derivative.

    >>> holds_differentiated_tuple(AType("tuple", elts=(FLOAT, AType("tuple", elts=(FLOAT,)))))
    True
    """
    return t.kind == "tuple" and any(e.kind == "tuple" and carries_derivative(e)
                                     for e in t.elts or ())


def as_operand(t):
    """The array a tuple or list display of numbers stands for where NumPy takes an array
    (``np.concatenate([x, [1.0]])``, ``np.take(x, [0, 2])``): a vector, or a matrix of equal
    rows; any other type as it is.

    >>> describe(as_operand(AType("tuple", elts=(const(1.0), const(2)))))
    'float64[N]'
    """
    if t.kind != "tuple" or not t.elts:
        return t
    if all(e.kind in ("float", "int", "bool") for e in t.elts):
        return array((N,), "float64" if any(e.kind == "float" for e in t.elts) else
                     "int64" if any(e.kind == "int" for e in t.elts) else "bool")
    rows = [as_operand(e) for e in t.elts]
    if all(r.kind == "array" and r.ndim == 1 for r in rows) and len({r.dtype for r in rows}) == 1:
        return array((N, N), rows[0].dtype)
    return t


def array(dims, dtype="float64"):
    """An array of the given axes; rank 0 is a float scalar.

    >>> describe(array((N, 1)))
    'float64[N,1]'
    """
    if dims is not None and len(dims) == 0:
        return AType("float", dtype) if dtype in (None, "float64", "float32") else AType(
            "int" if dtype.startswith("int") else "bool", dtype)
    return AType("array", dtype, tuple(dims) if dims is not None else None)


def const(value):
    """The abstract value of a Python constant, keeping its value.

    >>> const(2).value
    2
    """
    if isinstance(value, bool):
        return AType("bool", "bool", value=value)
    if isinstance(value, int):
        return AType("int", "int64", value=value)
    if isinstance(value, float):
        return AType("float", "float64", value=value)
    if value is None:
        return NONE
    if isinstance(value, str):
        return AType("str", value=value)
    if isinstance(value, tuple) and all(isinstance(v, (int, float, bool, str)) for v in value):
        return AType("tuple", elts=tuple(const(v) for v in value), value=value)
    return AType("object")


def abstract_of(value):
    """The abstract value of a runtime value: dtype, rank and size-one axes, never sizes.

    >>> describe(abstract_of(1.5)), describe(abstract_of(np.float32(2)))
    ('float64', 'float32')
    """
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, (int, np.integer)):
        return AType("int", str(np.asarray(value).dtype))
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, np.floating):
        return AType("float", str(value.dtype))
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return abstract_of(value[()])
        dims = tuple(1 if s == 1 else N for s in value.shape)
        return AType("array", str(value.dtype), dims)
    if value is None:
        return NONE
    if isinstance(value, complex | np.complexfloating):
        return AType("object", "complex128")
    return AType("object")


def broadcast(*types):
    """The abstract value of an elementwise result of the given operands.

    >>> describe(broadcast(FLOAT, array((N,))))
    'float64[N]'
    """
    ranks = [t.ndim for t in types]
    dtype = result_dtype(*types)
    if any(r is None for r in ranks):
        return AType("array", dtype, None) if any(t.kind == "array" for t in types) else UNKNOWN
    if max(ranks) == 0:
        return AType("float", dtype) if dtype in ("float64", "float32") else array((), dtype)
    rank = max(ranks)
    dims = []
    for axis in range(rank):
        size = 1
        for t, r in zip(types, ranks):
            offset = axis - (rank - r)
            if offset >= 0 and t.dims[offset] == N:
                size = N
        dims.append(size)
    return AType("array", dtype, tuple(dims))


def result_dtype(*types):
    """The dtype NumPy gives an arithmetic result of these operands (floats only widen).

    >>> result_dtype(INT, FLOAT)
    'float64'
    """
    dtypes = [t.dtype for t in types if t.kind in ("float", "array", "int", "bool")]
    arrays = [t.dtype for t in types if t.kind == "array" and t.dtype]
    if "float64" in arrays:
        return "float64"
    if "float32" in arrays:
        return "float32"
    if any(t.kind == "float" for t in types):
        # Integer or boolean arrays with a float scalar give float64 (NumPy's promotion),
        # float scalars alone keep the widest float.
        floats = [t.dtype for t in types if t.kind == "float"]
        return "float64" if "float64" in floats or arrays else floats[0]
    if dtypes and all(d and d.startswith("int") or d == "bool" for d in dtypes):
        return "int64"
    return "float64"


def describe(t):
    """A short human-readable form used in generated docstrings and errors.

    >>> describe(INT)
    'int'
    """
    if t.kind == "array":
        if t.dims is None:
            return f"{t.dtype or 'float64'}[...]"
        return f"{t.dtype}[{','.join(str(d) for d in t.dims)}]"
    if t.kind == "float":
        return t.dtype or "float64"
    if t.kind == "tuple" and t.elts is not None:
        return "(" + ", ".join(describe(e) for e in t.elts) + ")"
    return t.kind
