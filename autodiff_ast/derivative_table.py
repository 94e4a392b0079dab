"""What forward and reverse mode share about holding derivatives lazily.

Both sweeps keep, for every value, the expression of its derivative (a tangent ``x_dot`` or an
adjoint ``x_bar``) together with that expression's abstract type. The type may be smaller than
the value's: a scalar adjoint of an array, or an array with size-one axes where the value has
full ones. Broadcasting is then deferred until something needs the full shape, so the
generated code never allocates a broadcast nobody reads.

>>> from types import SimpleNamespace
>>> from autodiff_ast import types as T
>>> class Table(DerivativeTable):
...     def __init__(self, core):
...         self.core, self.exprs, self.kinds = core, {}, {}
...     def derivative_types(self):
...         return self.kinds
>>> table = Table(SimpleNamespace(types={"x": T.AType("array", "float64", (T.N,))}))
>>> table.smaller(T.FLOAT, "x")
True
"""

from __future__ import annotations

import gast

from autodiff_ast import types as T


class DerivativeTable:
    """Base of `forward.Tangents` and `reverse.Adjoints`.

    Subclasses hold ``self.core`` (the core function, whose ``types`` map values to abstract
    types) and ``self.exprs`` (value name -> gast expression of its derivative), and return
    from `derivative_types` the dict of the derivative expressions' abstract types.
    """

    def derivative_types(self):
        raise NotImplementedError

    def type_of(self, value):
        """The abstract type of the primal `value`."""
        return self.core.types.get(value, T.UNKNOWN)

    def expr_type(self, expr):
        """Type of an elementwise expression: the broadcast of the names it reads."""
        kinds = self.derivative_types()
        found = []
        for node in gast.walk(expr):
            if isinstance(node, gast.Name):
                for value, held in self.exprs.items():
                    if isinstance(held, gast.Name) and held.id == node.id:
                        found.append(kinds.get(value, T.UNKNOWN))
                        break
                else:
                    if node.id in self.core.types:
                        found.append(self.core.types[node.id])
        return T.broadcast(*found) if found else T.FLOAT

    def smaller(self, typ, value):
        """Whether a derivative of type `typ` has fewer or size-one axes than `value`."""
        target = self.type_of(value)
        if target.kind != "array":
            return False
        if typ.kind == "float":
            return True
        if typ.kind != "array" or typ.dims is None or target.dims is None:
            return False
        if len(typ.dims) < len(target.dims):
            return True
        offset = len(typ.dims) - len(target.dims)
        return any(t == T.N and typ.dims[i + offset] == 1 for i, t in enumerate(target.dims))
