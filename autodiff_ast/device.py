"""Device code: a per-example function (the user's, or one a transformation generated) lowered
into what a CUDA device function may contain.

Device code cannot allocate, has no NumPy, and wants every local array's size at compile time.
The pass works on the core form (one primitive per statement, with types) and is specialised on
the per-example shapes of the arguments, so every array has a constant shape:

- every array a function computes gets a ``cuda.local.array`` of its shape (declared at the top
  of the function), and assignments fill it element by element (value semantics: ``a = b``
  copies); arrays that index or transpose another are views;
- elementwise NumPy expressions become loops over the elements, with scalar ``math.*``
  functions (``np.tanh`` -> ``math.tanh``, ``np.where`` -> a conditional expression) and size-one
  axes broadcast by index; reductions (sum, mean, max, min, prod), np.prod's derivative (the
  helper ``prod_others``), ``dot``/``@`` and ``outer`` become accumulation loops; a write to a
  slice (``y[1:3] = 0.0``, ``y[0, :] = row``) loops over the view it picks;
- list tapes (``t = []``, ``t.append(v)``, ``v = t.pop()``) become a local array with a
  counter, sized from the trip counts of the loops around the append, or from the ``tape_size``
  option when a trip count is not known before the kernel runs;
- a helper function becomes its own device function; arrays it returns are written into
  arrays its caller passes (Warp's convention: outputs are arguments);
- anything else raises :class:`DeviceCodeError` naming the construct and the user's line.

>>> import numpy as np
>>> from autodiff_ast.normalize import spec_of
>>> def f(x, w):
...     return np.sum(np.tanh(x * w))
>>> module = lower_for_device(f, {"x": spec_of(np.ones(3)), "w": spec_of(2.0)}, {"x": (3,)})
>>> print(module.functions[-1].text)  # doctest: +NORMALIZE_WHITESPACE
@cuda.jit(device=True, inline="always")
def f(x, w):
    mul = cuda.local.array((3,), float64)
    tanh = cuda.local.array((3,), float64)
    # return np.sum(np.tanh(x * w))
    for e0 in range(3):
        mul[e0] = x[e0] * w
    for e0 in range(3):
        tanh[e0] = math.tanh(mul[e0])
    sum_ = 0.0
    for e0 in range(3):
        sum_ += tanh[e0]
    return sum_
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import gast
import numpy as np

from codegen.dialect import dotted_name

from . import types as T
from .errors import AutodiffError
from .frontend import parse_function
from .normalize import Program, normalize_into
from .rules.elementwise import PARTIALS, PIECEWISE_CONSTANT
from .templates import unparse

__all__ = ["DeviceCodeError", "DeviceFunction", "DeviceModule", "lower_for_device",
           "NUMBA_DTYPES"]


class DeviceCodeError(AutodiffError, TypeError):
    """The function cannot become CUDA device code (names the construct and the line)."""


#: numba type names for the dtypes device arrays may hold (imported by kernel modules)
NUMBA_DTYPES = {"float64": "float64", "float32": "float32", "int64": "int64",
                "int32": "int32", "bool": "boolean", None: "float64"}

# ---------------------------------------------------------------- scalar functions on device
# NumPy function -> how a scalar device expression writes it ({0}, {1}: the arguments)
_SCALAR = {
    "sin": "math.sin({0})", "cos": "math.cos({0})", "tan": "math.tan({0})",
    "arcsin": "math.asin({0})", "arccos": "math.acos({0})", "arctan": "math.atan({0})",
    "arctan2": "math.atan2({0}, {1})", "sinh": "math.sinh({0})", "cosh": "math.cosh({0})",
    "tanh": "math.tanh({0})", "arcsinh": "math.asinh({0})", "arccosh": "math.acosh({0})",
    "arctanh": "math.atanh({0})", "exp": "math.exp({0})", "exp2": "2.0 ** {0}",
    "expm1": "math.expm1({0})", "log": "math.log({0})", "log2": "math.log2({0})",
    "log10": "math.log10({0})", "log1p": "math.log1p({0})", "sqrt": "math.sqrt({0})",
    "cbrt": "math.copysign(abs({0}) ** (1.0 / 3.0), {0})", "square": "{0} * {0}",
    "reciprocal": "1.0 / {0}", "negative": "-{0}", "positive": "{0}", "absolute": "abs({0})",
    "abs": "abs({0})", "fabs": "abs({0})", "deg2rad": "{0} * 0.017453292519943295",
    "rad2deg": "{0} * 57.29577951308232", "erf": "math.erf({0})", "add": "{0} + {1}",
    "subtract": "{0} - {1}", "multiply": "{0} * {1}", "divide": "{0} / {1}",
    "true_divide": "{0} / {1}", "power": "{0} ** {1}", "maximum": "max({0}, {1})",
    "minimum": "min({0}, {1})", "fmax": "max({0}, {1})", "fmin": "min({0}, {1})",
    "hypot": "math.hypot({0}, {1})", "fmod": "math.fmod({0}, {1})",
    "remainder": "{0} % {1}", "mod": "{0} % {1}", "floor_divide": "{0} // {1}",
    "logaddexp": "max({0}, {1}) + math.log1p(math.exp(-abs({0} - {1})))",
    "floor": "float(math.floor({0}))", "ceil": "float(math.ceil({0}))",
    "trunc": "float(math.trunc({0}))", "fix": "float(math.trunc({0}))",
    "rint": "float(round({0}))", "round": "float(round({0}))", "around": "float(round({0}))",
    "sign": "(1.0 if {0} > 0 else (-1.0 if {0} < 0 else 0.0))",
    "heaviside": "(1.0 if {0} > 0 else ({1} if {0} == 0 else 0.0))",
    "isfinite": "math.isfinite({0})", "isnan": "math.isnan({0})", "isinf": "math.isinf({0})",
    "where": "({1} if {0} else {2})", "clip": "min(max({0}, {1}), {2})",
    "logical_and": "({0} and {1})", "logical_or": "({0} or {1})",
    "logical_not": "(not {0})", "equal": "{0} == {1}", "not_equal": "{0} != {1}",
    "less": "{0} < {1}", "less_equal": "{0} <= {1}", "greater": "{0} > {1}",
    "greater_equal": "{0} >= {1}", "float64": "float({0})", "float32": "float({0})",
    "copy": "{0}", "asarray": "{0}", "array": "{0}", "broadcast_to": "{0}",
    "ascontiguousarray": "{0}",
}
_ELEMENTWISE = set(PARTIALS) | set(PIECEWISE_CONSTANT) | {
    "power", "where", "clip", "copy", "asarray", "astype", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_not",
    "float", "int", "broadcast_to", "ascontiguousarray"}
_CREATORS = {"zeros": "0.0", "ones": "1.0", "empty": None, "zeros_like": "0.0",
             "ones_like": "1.0", "empty_like": None}
_REDUCERS = ("sum", "mean", "prod", "max", "min")
_RUNTIME_SLICE_HINT = (
    "a kernel's local arrays have sizes fixed when it is compiled: write the line as a loop "
    "over the elements, e.g. `for i in range(k): y[i] = v` for `y[:k] = v`")
_TAPE_SIZE_HINT = (
    "a kernel's local arrays have sizes fixed when it is compiled: pass jit(..., "
    "target='cuda', tape_size=N) with N at least the number of values the loop saves per "
    "example (its iterations, times those of the loops around it), or bound the loop with a "
    "count known before the kernel runs: `for _ in range(N):` around `if <condition>:` and the "
    "loop's body")
#: helpers generated code calls (codegen/helpers.py) -> (a NumPy function giving the shape and
#: dtype of the result from stand-ins, the _FunctionLowering method writing its device loops)
_HELPERS = {"prod_others": (np.ones_like, "_prod_others")}
#: other calls whose result _FunctionLowering writes with a method of its own (out, prim)
_WRITERS = {"moveaxis": "_moveaxis", **{n: method for n, (_, method) in _HELPERS.items()}}
_RESHAPES = ("expand_dims", "reshape", "ravel", "squeeze", "atleast_1d", "atleast_2d")


def _strides(shape):
    """C-order element strides of `shape`."""
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= size
    return list(reversed(out))


class _ScalarMath(gast.NodeTransformer):
    """Rewrites np.* calls of scalars into math.* / Python expressions."""

    def __init__(self, fail):
        self.fail = fail

    def visit_Call(self, node):
        self.generic_visit(node)
        func = dotted_name(node.func)
        if func is None:
            return node
        module, _, attr = func.rpartition(".")
        if module not in ("np", "numpy", "math"):
            return node
        if module == "math" and attr not in ("floor", "ceil", "trunc"):
            return node
        if node.keywords:
            self.fail(f"{func}() with keyword arguments")
        template = _SCALAR.get(attr)
        if template is None:
            self.fail(f"{func}()")
        args = [f"({unparse(a)})" for a in node.args]
        try:
            text = template.format(*args)
        except IndexError:
            self.fail(f"{func}() with {len(args)} argument(s)")
        return gast.parse(text, mode="eval").body


def _names(node):
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name)}


def _clone(node):
    return gast.parse(unparse(node), mode="eval").body if not isinstance(node, gast.stmt) \
        else gast.parse(unparse(node)).body[0]


# ---------------------------------------------------------------- results
@dataclass
class DeviceFunction:
    """One generated device function."""

    name: str
    text: str
    out_shapes: list  # per returned value: None (a scalar, returned) or an array shape
    out_dtypes: list


@dataclass
class DeviceModule:
    """The device functions for one per-example signature; the entry is the last one."""

    functions: list = field(default_factory=list)
    entry: DeviceFunction | None = None
    tuple_out: bool = False
    notes: list = field(default_factory=list)


_UNKNOWN = object()  # a runtime value (not known when the kernel is written)


def _dummy_for(typ, shape):
    """A stand-in value used to compute shapes with NumPy itself."""
    if typ.kind == "array":
        dtype = typ.dtype or "float64"
        return np.ones(shape, dtype=dtype)
    return _stand_in((), {"int": "int64", "bool": "bool"}.get(typ.kind, typ.dtype))


def _stand_in(shape, dtype):
    """A stand-in value of this shape and dtype: an array of ones, or for shape () a scalar
    of the dtype's kind (1, True, 0.5), so that NumPy computes the dtypes and shapes of what
    is derived from it (a popped loop counter stays an integer and can index an array). A
    float32 scalar is NumPy's float32: float32 arithmetic with it stays float32."""
    if shape:
        return np.ones(shape, dtype=dtype)
    kind = np.dtype(dtype or "float64").kind
    if kind in "iu":
        return 1
    if kind == "b":
        return True
    return np.float32(0.5) if dtype == "float32" else 0.5


# ---------------------------------------------------------------- the lowering
class _Lowering:
    """Lowers core functions to device functions, one per (function, argument shapes)."""

    def __init__(self, program, options):
        self.program = program
        self.options = options
        self.done = {}  # (core name, shapes) -> DeviceFunction
        self.order = []
        self.taken = set()

    def function(self, core, shapes):
        key = (core.name, tuple(shapes.get(p) for p in core.params))
        if key not in self.done:
            if key in getattr(self, "_active", set()):
                raise core.info.error(DeviceCodeError, "recursion cannot become CUDA device "
                                      "code", core.info.node, "write the recursion as a loop")
            self._active = getattr(self, "_active", set()) | {key}
            fname = core.name if core.name not in self.taken else f"{core.name}_{len(self.done)}"
            self.taken.add(fname)
            lowered = _FunctionLowering(self, core, shapes, fname).run()
            self._active = self._active - {key}
            self.done[key] = lowered
            self.order.append(lowered)
        return self.done[key]


class _FunctionLowering:
    def __init__(self, parent, core, shapes, fname):
        self.parent = parent
        self.core = core
        self.info = core.info
        self.types = core.types
        self.fname = fname
        self.param_shapes = dict(shapes)
        self.shape = {}  # array name -> shape
        self.known = {}  # name -> compile-time value (ints, tuples of ints)
        self.env = {}  # name -> stand-in value used to compute shapes
        self.defs = {}  # name -> number of assignments
        self.view_defs = {}  # name -> number of assignments that are views
        self.lists = {}  # list name -> (element shape or None, dtype)
        self.capacity = {}  # list name -> number of appends (None: unknown)
        self.callees = {}  # id(stmt) -> DeviceFunction
        self.used = set(_all_names(core))
        self.lines = []
        self.current = None  # the core statement being lowered (for errors)

    # -- errors
    def fail(self, what, node=None, hint=None):
        node = node if node is not None else getattr(self.current, "origin", None)
        node = node if node is not None else self.info.node
        raise self.info.error(DeviceCodeError, f"{what} cannot become CUDA device code", node,
                              hint or "write this line with scalar loops and math.* functions "
                              "(see docs/cuda-and-pmap.md)")

    def fresh(self, base):
        k, name_ = 0, base
        while name_ in self.used:
            k += 1
            name_ = f"{base}_{k}"
        self.used.add(name_)
        return name_

    # -- analysis: shapes, constants, tapes
    def run(self):
        for p in self.core.params:
            typ = self.types.get(p, T.UNKNOWN)
            if typ.kind == "array":
                shape = self.param_shapes.get(p)
                if shape is None:
                    self.fail(f"argument {p} (an array of unknown shape)")
                self.shape[p] = tuple(shape)
                self.env[p] = _dummy_for(typ, shape)
            elif typ.kind in ("tuple", "list", "object", "unknown", "str", "none"):
                self.fail(f"argument {p} ({T.describe(typ)})", self.info.node,
                          "pass arrays and scalars")
            else:
                self.env[p] = _dummy_for(typ, ())
        self._count_defs(self.core.body)
        self._analyze(self.core.body, 1)
        return self._emit()

    def _count_defs(self, stmts):
        for stmt in stmts:
            if isinstance(stmt, (gast.For, gast.While, gast.If)):
                if isinstance(stmt, gast.For):
                    for n in _names(stmt.target):
                        self.defs[n] = self.defs.get(n, 0) + 2  # runtime values
                self._count_defs(stmt.body)
                self._count_defs(stmt.orelse)
            elif isinstance(stmt, gast.Assign):
                for target in stmt.targets:
                    for n in _store_names(target):
                        self.defs[n] = self.defs.get(n, 0) + 1

    def _trip_count(self, stmt):
        """The number of iterations of a for loop, when known before it runs."""
        it = stmt.iter
        if isinstance(it, gast.Call) and dotted_name(it.func) == "range" and not it.keywords:
            values = [self._const(a) for a in it.args]
            if all(v is not _UNKNOWN and isinstance(v, int) for v in values):
                return len(range(*values))
        return None

    def _const(self, node):
        if isinstance(node, gast.Constant):
            return node.value
        names = _names(node)
        if any(self.known.get(n, _UNKNOWN) is _UNKNOWN for n in names):
            return _UNKNOWN
        try:
            return eval(compile(ast.Expression(gast.gast_to_ast(_clone(node))), "<const>",
                                "eval"), {"__builtins__": {"len": len, "min": min, "max": max,
                                                           "int": int}}, dict(self.known))
        except Exception:  # noqa: BLE001 (not a constant we can fold)
            return _UNKNOWN

    def _analyze(self, stmts, trips):
        for stmt in stmts:
            self.current = stmt
            if isinstance(stmt, gast.For):
                count = self._trip_count(stmt)
                for n in _names(stmt.target):
                    self.env[n] = 0
                    self.known[n] = _UNKNOWN
                self._analyze(stmt.body, None if (trips is None or count is None)
                              else trips * count)
            elif isinstance(stmt, gast.While):
                self._analyze(stmt.body, None)
            elif isinstance(stmt, gast.If):
                self._analyze(stmt.body, trips)
                self._analyze(stmt.orelse, trips)
            elif isinstance(stmt, (gast.Assign, gast.Expr)):
                self._analyze_simple(stmt, trips)
            elif isinstance(stmt, gast.Pass):
                continue
            elif isinstance(stmt, gast.Raise):
                self.fail("a raise statement", getattr(stmt, "origin", None),
                          "a CUDA kernel cannot raise (nor check an assert): check the inputs "
                          "before the call, or run this function on the CPU target (python -O "
                          "drops asserts)")
            else:
                self.fail(f"a {type(stmt).__name__} statement", getattr(stmt, "origin", None))

    def _analyze_simple(self, stmt, trips):
        prim = getattr(stmt, "prim", None)
        kind = prim.kind if prim is not None else None
        if isinstance(stmt, gast.Expr):
            if kind == "append":
                self._analyze_append(stmt, prim, trips)
            elif kind == "print":
                self.fail("print", getattr(stmt, "origin", None), "print on the CPU target "
                          "(jit without target='cuda'), or remove the print")
            elif not _is_marker(stmt):
                self.fail(f"the statement `{unparse(stmt).strip()}`")
            return
        target = stmt.targets[0]
        if kind == "setitem":
            return
        if kind == "list_new":
            self.lists[target.id] = None
            self.capacity[target.id] = 0
            return
        if kind == "pop":
            base = prim.base
            elem = self.lists.get(base)
            shape, dtype = elem if elem else ((), "float64")
            self._bind(target.id, _stand_in(shape, dtype))
            self.known[target.id] = _UNKNOWN
            return
        if kind == "user":
            self._analyze_call(stmt, prim)
            return
        if kind in ("add_at", "opaque") and kind == "add_at":
            self.fail("np.add.at")
        value = stmt.value
        for node in gast.walk(value):
            if isinstance(node, gast.Slice):
                for part in (node.lower, node.upper, node.step):
                    if part is not None and self._const(part) is _UNKNOWN:
                        self.fail("a slice whose bounds are only known at run time",
                                  hint=_RUNTIME_SLICE_HINT)
        result = self._stand_in_value(value)
        if isinstance(target, gast.Tuple):
            for elt, v in zip(target.elts, result):
                self._bind(elt.id, v)
                self.known[elt.id] = _UNKNOWN
            return
        self._bind(target.id, result)
        const = self._const(value) if self.defs.get(target.id, 0) == 1 else _UNKNOWN
        if const is _UNKNOWN and self.defs.get(target.id, 0) == 1 and _is_int_tuple(result) \
                and self._shape_only(value):
            const = tuple(int(v) for v in result) if isinstance(result, tuple) else int(result)
        if isinstance(const, (int, tuple)) and not isinstance(const, bool) or \
                isinstance(const, float):
            self.known[target.id] = const
        else:
            self.known[target.id] = _UNKNOWN

    def _stand_in_value(self, value):
        """`value` computed by NumPy from the stand-ins of the names it reads (so its shape and
        dtype are those device code will have)."""
        names = _names(value)
        local = {n: self.env[n] for n in names if n in self.env}
        scope = {"np": np, "math": math, "numpy": np, "__builtins__": __builtins__}
        scope.update((n, like) for n, (like, _) in _HELPERS.items())
        try:
            return eval(compile(ast.Expression(gast.gast_to_ast(_clone(value))), "<shape>",
                                "eval"), scope, local)
        except Exception as exc:  # noqa: BLE001
            self.fail(f"`{unparse(value)}` ({type(exc).__name__}: {exc})")

    def _shape_only(self, value):
        """Whether `value` reads arrays only through their shapes (so it is a constant)."""
        allowed = set()
        for node in gast.walk(value):
            if isinstance(node, gast.Attribute) and node.attr in ("shape", "size", "ndim") and \
                    isinstance(node.value, gast.Name):
                allowed.add(id(node.value))
            if isinstance(node, gast.Call) and dotted_name(node.func) in ("len", "np.shape",
                                                                      "np.size", "np.ndim"):
                allowed.update(id(a) for a in node.args if isinstance(a, gast.Name))
        for node in gast.walk(value):
            if isinstance(node, gast.Name) and id(node) not in allowed and \
                    node.id not in ("np", "len", "numpy") and \
                    self.known.get(node.id, _UNKNOWN) is _UNKNOWN:
                return False
        return True

    def _bind(self, name_, value):
        if isinstance(value, np.ndarray) and value.ndim > 0:
            old = self.shape.get(name_)
            if old is not None and old != value.shape:
                self.fail(f"`{name_}` holding arrays of shapes {old} and {value.shape}")
            self.shape[name_] = value.shape
        self.env[name_] = value

    def _analyze_append(self, stmt, prim, trips):
        base = prim.base
        value = prim.args[0]
        v = self.env.get(value.id) if isinstance(value, gast.Name) else 0.5
        typ = self.types.get(value.id, T.FLOAT) if isinstance(value, gast.Name) else T.FLOAT
        shape = self.shape.get(value.id, ()) if isinstance(value, gast.Name) else ()
        if typ.kind == "tuple":
            self.fail("a tape of tuples")
        dtype = str(v.dtype) if isinstance(v, (np.ndarray, np.generic)) else (
            "int64" if typ.kind == "int" else "bool" if typ.kind == "bool" else "float64")
        self.lists[base] = (tuple(shape), dtype)
        if trips is None or self.capacity.get(base) is None:
            self.capacity[base] = None
        else:
            self.capacity[base] += trips

    def _analyze_call(self, stmt, prim):
        callee = prim.callee
        shapes = {}
        for p, a in zip(callee.params, prim.args):
            if isinstance(a, gast.Name) and a.id in self.shape:
                shapes[p] = self.shape[a.id]
        lowered = self.parent.function(callee, shapes)
        self.callees[id(stmt)] = lowered
        target = stmt.targets[0]
        targets = target.elts if isinstance(target, gast.Tuple) else [target]
        outs = list(zip(lowered.out_shapes, lowered.out_dtypes))
        if len(targets) != len(outs):
            if any(shape is not None for shape, _ in outs):
                self.fail(f"a call to {callee.info.name} whose tuple result (holding arrays) "
                          "is kept whole", hint="unpack the tuple where you call the function")
            self.env[target.id] = tuple(_stand_in((), dtype) for _, dtype in outs)
            self.known[target.id] = _UNKNOWN
            return
        for t, (shape, dtype) in zip(targets, outs):
            self._bind(t.id, np.ones(shape, dtype=dtype) if shape is not None else
                       _stand_in((), dtype))
            self.known[t.id] = _UNKNOWN

    # -- emission
    def _emit(self):
        core = self.core
        self.kinds = {}
        for n in self.shape:
            if n in core.params:
                self.kinds[n] = "param"
        self._classify(core.body)
        returns = core.returns.elts if isinstance(core.returns, gast.Tuple) else \
            [core.returns]
        tuple_out = isinstance(core.returns, gast.Tuple)
        if len(returns) == 1 and isinstance(returns[0], gast.Name) and \
                isinstance(self.env.get(returns[0].id), tuple):
            # a tuple of scalars held in one name: return its elements
            whole = returns[0].id
            returns = [gast.parse(f"{whole}[{k}]", mode="eval").body
                       for k in range(len(self.env[whole]))]
            tuple_out = True
        out_shapes, out_dtypes, out_params, out_names = [], [], [], []
        bound_outs = {}
        for r in returns:
            if isinstance(r, gast.Name) and r.id in self.shape:
                shape = self.shape[r.id]
                dtype = str(self.env[r.id].dtype)
                out_shapes.append(shape)
                out_dtypes.append(dtype)
                pname = self.fresh(f"{r.id}_out" if not r.id.endswith("_out") else r.id)
                out_params.append(pname)
                if self.kinds.get(r.id) == "buffer" and r.id not in bound_outs:
                    bound_outs[r.id] = pname
                out_names.append((r.id, pname))
            elif isinstance(r, gast.Name) and self.lists.get(r.id):
                self._fail_returned_tape(r.id)
            elif isinstance(r, gast.Name) and self.types.get(r.id, T.UNKNOWN).kind in (
                    "tuple", "list"):
                self.fail(f"returning {T.describe(self.types[r.id])} `{r.id}`",
                          core.return_node, "return scalars and arrays")
            else:
                out_shapes.append(None)
                out_dtypes.append(self._scalar_dtype(r))
        self.bound_outs = bound_outs
        body = []
        for n in sorted(self.kinds, key=_order_key(core)):
            if self.kinds[n] == "buffer" and n not in bound_outs:
                body.append(f"{n} = cuda.local.array({self.shape[n]!r}, "
                            f"{_numba_dtype(self.env[n])})")
        for n, elem in self.lists.items():
            if elem is None:
                continue
            cap = self.capacity.get(n)
            if cap is None:
                cap = self.parent.options.get("tape_size")
                if cap is None:
                    self.fail(f"the tape `{n}` (its loop's trip count is only known at run "
                              "time)", self._tape_origin(n), _TAPE_SIZE_HINT)
            shape, dtype = elem
            body.append(f"{n} = cuda.local.array({(max(int(cap), 1),) + tuple(shape)!r}, "
                        f"{NUMBA_DTYPES.get(dtype, 'float64')})")
            body.append(f"{n}_n = 0")
        for r_id, pname in out_names:
            if bound_outs.get(r_id) == pname:
                body.append(f"{r_id} = {pname}")
        self.lines = body
        self._emit_block(core.body, 1, comments=True)
        lines = self.lines
        for r_id, pname in out_names:
            if bound_outs.get(r_id) != pname:
                lines.extend(self._copy_loop(pname, r_id, self.shape[r_id], 1))
        scalars = [unparse(r) for r in returns
                   if not (isinstance(r, gast.Name) and r.id in self.shape)]
        if scalars:
            lines.append("    return " + ", ".join(scalars))
        params = list(core.params) + out_params
        head = ['@cuda.jit(device=True, inline="always")',
                f"def {self.fname}({', '.join(params)}):"]
        text_lines = []
        for line in lines:
            text_lines.append(line if line.startswith("    ") or line == "" else "    " + line)
        if not text_lines:
            text_lines = ["    pass"]
        text = "\n".join(head + text_lines)
        fn = DeviceFunction(self.fname, text, out_shapes, out_dtypes)
        fn.scalar_outs = len(scalars)
        fn.tuple_out = tuple_out
        return fn

    def _scalar_dtype(self, node):
        """The dtype of a returned scalar, as NumPy computes it from the stand-ins (a float32
        sum of float32 arrays is float32, as on the CPU target); bool, int64 for an integer,
        float64 when nothing says otherwise."""
        v = self._stand_in_value(node) if _names(node) <= set(self.env) else None
        if isinstance(v, (bool, np.bool_)):
            return "bool"
        if isinstance(v, (int, np.integer)):
            return "int64"
        return "float32" if isinstance(v, np.float32) else "float64"

    def _fail_returned_tape(self, name_):
        """Refuses a tape a function hands to its caller: the forward half of a called
        function whose loop the gradient replays, passing its saved values to the backward
        half (device functions have no lists to pass)."""
        self.fail(f"the tape `{name_}` that {self.fname} hands to its backward pass (the "
                  "saved steps of a loop inside a called function, differentiated)",
                  self._tape_origin(name_),
                  "CUDA device functions cannot pass a tape to one another: write the loop "
                  "in the function you differentiate rather than in a function it calls (a "
                  "while loop there takes jit(..., target='cuda', tape_size=N))")

    def _tape_origin(self, name_):
        """Where an error about tape `name_` points: the loop around its pops (a backward
        sweep, which the generated code heads with the user's loop line), else its append."""
        for kind in ("pop", "append"):
            for stmt, loops in _walk_in_loops(self.core.body):
                prim = getattr(stmt, "prim", None)
                if prim is not None and prim.kind == kind and prim.base == name_:
                    node = loops[-1] if kind == "pop" and loops else stmt
                    return getattr(node, "origin", None)
        return None

    def _classify(self, stmts):
        """Array names: 'view' (every assignment indexes or transposes another array) or
        'buffer' (it holds values computed here: a local array)."""
        views = {}
        for stmt in _walk_stmts(stmts):
            if not isinstance(stmt, gast.Assign) or not isinstance(stmt.targets[0], gast.Name):
                continue
            n = stmt.targets[0].id
            if n not in self.shape or n in self.core.params:
                continue
            views.setdefault(n, []).append(self._is_view(stmt))
        for n, flags in views.items():
            self.kinds[n] = "view" if all(flags) and len(flags) == 1 else "buffer"
        for stmt in _walk_stmts(stmts):
            if isinstance(stmt, gast.Assign) and isinstance(stmt.targets[0], gast.Tuple):
                for elt in stmt.targets[0].elts:
                    if elt.id in self.shape:
                        self.kinds[elt.id] = "buffer"

    def _is_view(self, stmt):
        """Whether `stmt` binds a view of another array: an indexing (`a[1:]`, `a[i]`) or a
        transpose (`a.T`, of any rank, and of a view as well: Numba makes it on the device)."""
        prim = getattr(stmt, "prim", None)
        value = stmt.value
        if prim is None:
            return False
        rule = _rule_name(prim)
        if rule == "getitem" or (isinstance(value, gast.Subscript) and prim.kind == "nondiff"):
            return True
        return isinstance(value, gast.Attribute) and value.attr == "T" and \
            isinstance(value.value, gast.Name) and value.value.id in self.shape

    # -- statements
    def _emit_block(self, stmts, depth, comments=False):
        pad = "    " * depth
        last = None
        start = len(self.lines)
        for stmt in stmts:
            self.current = stmt
            origin = getattr(stmt, "origin", None)
            if origin is not None and origin is not last:
                text = self.info.source_line(origin)
                if text:
                    self.lines.append(f"{pad}# {text}")
                last = origin
            if isinstance(stmt, gast.For):
                self.lines.append(f"{pad}for {unparse(stmt.target)} in "
                                  f"{self._scalar(stmt.iter)}:")
                self._emit_block(stmt.body, depth + 1)
            elif isinstance(stmt, gast.While):
                self.lines.append(f"{pad}while {self._scalar(stmt.test)}:")
                self._emit_block(stmt.body, depth + 1)
            elif isinstance(stmt, gast.If):
                self.lines.append(f"{pad}if {self._scalar(stmt.test)}:")
                self._emit_block(stmt.body, depth + 1)
                if stmt.orelse:
                    self.lines.append(f"{pad}else:")
                    self._emit_block(stmt.orelse, depth + 1)
            elif isinstance(stmt, gast.Pass) or _is_marker(stmt):
                continue
            else:
                self.lines.extend(pad + line for line in self._simple(stmt, depth))
        if len(self.lines) == start or all(ln.strip().startswith("#")
                                           for ln in self.lines[start:]):
            self.lines.append(f"{pad}pass")

    def _simple(self, stmt, depth):
        prim = getattr(stmt, "prim", None)
        kind = prim.kind if prim is not None else None
        if isinstance(stmt, gast.Expr):
            if kind == "append":
                return self._append(prim, depth)
            return []
        target = stmt.targets[0]
        if kind == "list_new":
            return []
        if kind == "pop":
            return self._pop(target.id, prim.base, depth)
        if kind == "setitem":
            return self._setitem(stmt, depth)
        if kind == "user":
            return self._call(stmt, prim, depth)
        if isinstance(target, gast.Tuple):
            return [f"{unparse(target)} = {self._scalar(stmt.value)}"]
        out = target.id
        if out not in self.shape:
            return self._scalar_assign(out, stmt, prim, depth)
        if self.kinds.get(out) == "view":
            return self._view(out, stmt)
        return self._array_assign(out, stmt, prim, depth)

    def _scalar(self, node):
        tree = _ScalarMath(lambda what: self.fail(what)).visit(_clone(node))
        return unparse(tree)

    def _scalar_assign(self, out, stmt, prim, depth):
        value = stmt.value
        rule = _rule_name(prim)
        name_ = (rule or "").split("@")[0]
        const = self.known.get(out, _UNKNOWN)
        if const is not _UNKNOWN and isinstance(const, (int, float, tuple)) and \
                self.defs.get(out, 0) == 1:
            return [f"{out} = {const!r}"]
        if name_ in _REDUCERS and self._array_operand(prim, "x") is not None:
            return self._reduce_all(out, name_, self._array_operand(prim, "x"), depth)
        if name_ in ("dot", "matmul", "inner", "vdot"):
            a, b = self._operands(prim, ("a", "b"))
            if a in self.shape and b in self.shape:
                return self._dot(out, a, b, depth)
        for n in _names(value):
            if n in self.shape and not _indexes(value, n):
                self.fail(f"`{unparse(value)}` (an array operation with a scalar result)")
        return [f"{out} = {self._scalar(value)}"]

    def _array_operand(self, prim, param):
        atom = prim.call.args.get(param) if prim.call is not None else None
        if isinstance(atom, gast.Name) and atom.id in self.shape:
            if prim.call.const("axis") is not None or prim.call.const("keepdims"):
                return None
            return atom.id
        return None

    def _operands(self, prim, params):
        out = []
        for p in params:
            atom = prim.call.args.get(p) if prim.call is not None else None
            out.append(atom.id if isinstance(atom, gast.Name) else None)
        return out

    # -- arrays
    def _loops(self, shape, depth):
        """(loop header lines, index names, inner indentation)."""
        lines, idx = [], []
        pad = "    " * depth
        for k, size in enumerate(shape):
            e = f"e{k}"
            idx.append(e)
            lines.append(f"{pad}{'    ' * k}for {e} in range({size}):")
        return lines, idx, pad + "    " * len(shape)

    def _at(self, name_, idx, out_shape=None):
        """The element of array `name_` at output indices `idx` (broadcasting size-one axes)."""
        shape = self.shape[name_]
        out_shape = out_shape if out_shape is not None else shape
        lead = len(out_shape) - len(shape)
        parts = []
        for k, size in enumerate(shape):
            if size == 1 and out_shape[lead + k] != 1:
                parts.append("0")
            else:
                parts.append(idx[lead + k])
        return f"{name_}[{', '.join(parts)}]"

    def _elementwise_expr(self, value, idx, out_shape):
        class Sub(gast.NodeTransformer):
            def visit_Name(inner, node):
                if node.id in self.shape and isinstance(node.ctx, gast.Load):
                    return gast.parse(self._at(node.id, idx, out_shape), mode="eval").body
                return node
        tree = Sub().visit(_clone(value))
        return self._scalar(tree)

    def _array_assign(self, out, stmt, prim, depth):
        value = stmt.value
        shape = self.shape[out]
        rule = _rule_name(prim)
        name_ = (rule or "").split("@")[0]
        if prim is not None and prim.kind == "copy" or isinstance(value, gast.Name):
            src = value.id if isinstance(value, gast.Name) else None
            if src in self.shape:
                return self._copy_loop(out, src, shape, depth, relative=True)
        if self._is_view(stmt):
            return self._copy_view(out, value, shape, depth)
        if name_ in _CREATORS or name_ in ("full", "full_like"):
            if name_ in ("full", "full_like"):
                fill_value = prim.call.args.get("fill_value")
                constant = self._scalar(fill_value)
            else:
                constant = _CREATORS[name_]
            if constant is None:
                return []
            loops, idx, inner = self._loops(shape, 0)
            return loops + [f"{inner}{out}[{', '.join(idx)}] = {constant}"]
        if name_ in _ELEMENTWISE or (rule is None and isinstance(
                value, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.IfExp))):
            loops, idx, inner = self._loops(shape, 0)
            expr = self._elementwise_expr(value, idx, shape)
            return loops + [f"{inner}{out}[{', '.join(idx)}] = {expr}"]
        if name_ in _REDUCERS:
            return self._reduce_axis(out, name_, prim)
        if name_ in _WRITERS:
            return getattr(self, _WRITERS[name_])(out, prim)
        if name_ in _RESHAPES:
            src = prim.call.args.get("x", prim.call.args.get("a"))
            if isinstance(src, gast.Name) and src.id in self.shape and \
                    int(np.prod(self.shape[src.id])) == int(np.prod(shape)):
                return self._reshape_copy(out, src.id, shape)
        if name_ in ("dot", "matmul", "inner"):
            a, b = self._operands(prim, ("a", "b"))
            if a in self.shape and b in self.shape:
                return self._dot(out, a, b, 0)
        if name_ == "outer":
            a, b = self._operands(prim, ("a", "b"))
            return [f"for e0 in range({shape[0]}):", f"    for e1 in range({shape[1]}):",
                    f"        {out}[e0, e1] = {a}[e0] * {b}[e1]"]
        if name_ in ("transpose", "T"):
            src = _names(value) & set(self.shape)
            if len(src) == 1 and len(shape) == 2:
                return self._permuted_copy(out, src.pop(), [1, 0])
        self.fail(f"`{unparse(value)}`")

    def _reshape_copy(self, out, src, shape):
        """Elements copied in C order between arrays of the same size and another shape."""
        loops, idx, inner = self._loops(shape, 0)
        strides = _strides(shape)
        flat = " + ".join(f"{i} * {st}" for i, st in zip(idx, strides)) or "0"
        src_shape = self.shape[src]
        parts = [f"(k // {st}) % {size}" for st, size in zip(_strides(src_shape), src_shape)]
        return loops + [f"{inner}k = {flat}",
                        f"{inner}{out}[{', '.join(idx)}] = {src}[{', '.join(parts)}]"]

    def _copy_loop(self, out, src, shape, depth, relative=False):
        loops, idx, inner = self._loops(shape, 0 if relative else depth)
        return loops + [f"{inner}{out}[{', '.join(idx)}] = {self._at(src, idx)}"]

    def _copy_view(self, out, value, shape, depth):
        loops, idx, inner = self._loops(shape, 0)
        return [f"{out}_view = {self._scalar(value)}"] + loops + [
            f"{inner}{out}[{', '.join(idx)}] = {out}_view[{', '.join(idx)}]"]

    def _view(self, out, stmt):
        """A view (`a[1:]`, `a[i]`, `a.T`) bound as the Numba view it is on the device: a later
        line may index it, view it again or pass it to a device function, as NumPy would."""
        return [f"{out} = {self._scalar(stmt.value)}"]

    def _reduce_all(self, out, how, src, depth):
        shape = self.shape[src]
        loops, idx, inner = self._loops(shape, 0)
        elem = self._at(src, idx)
        first = self._at(src, ["0"] * len(shape))
        if how in ("sum", "mean"):
            lines = [f"{out} = 0.0"] + loops + [f"{inner}{out} += {elem}"]
            if how == "mean":
                lines.append(f"{out} = {out} / {int(np.prod(shape))}")
            return lines
        if how == "prod":
            return [f"{out} = 1.0"] + loops + [f"{inner}{out} *= {elem}"]
        op = "max" if how == "max" else "min"
        return [f"{out} = {first}"] + loops + [f"{inner}{out} = {op}({out}, {elem})"]

    def _reduce_axis(self, out, how, prim):
        src = prim.call.args.get("x")
        if not isinstance(src, gast.Name) or src.id not in self.shape:
            self.fail(f"np.{how} of a non-array")
        src = src.id
        shape = self.shape[src]
        axis = prim.call.axis()
        if not isinstance(axis, int):
            self.fail(f"np.{how} over several axes")
        keep = bool(prim.call.const("keepdims", False))
        out_shape = self.shape[out]
        free = [k for k in range(len(shape)) if k != axis]
        lines = []
        loops, idx, inner = self._loops([shape[k] for k in free], 0)
        lines += loops
        full = list(idx)
        full.insert(axis, "r")
        target_idx = list(idx)
        if keep:
            target_idx.insert(axis, "0")
        target = f"{out}[{', '.join(target_idx)}]" if out_shape else out
        elem = self._at(src, full)
        acc = "acc"
        if how in ("sum", "mean"):
            lines += [f"{inner}{acc} = 0.0", f"{inner}for r in range({shape[axis]}):",
                      f"{inner}    {acc} += {elem}"]
            if how == "mean":
                lines.append(f"{inner}{acc} = {acc} / {shape[axis]}")
        elif how == "prod":
            lines += [f"{inner}{acc} = 1.0", f"{inner}for r in range({shape[axis]}):",
                      f"{inner}    {acc} *= {elem}"]
        else:
            first = list(idx)
            first.insert(axis, "0")
            op = "max" if how == "max" else "min"
            lines += [f"{inner}{acc} = {self._at(src, first)}",
                      f"{inner}for r in range(1, {shape[axis]}):",
                      f"{inner}    {acc} = {op}({acc}, {elem})"]
        lines.append(f"{inner}{target} = {acc}")
        self.used |= {"acc", "r"}
        return lines

    def _permuted_copy(self, out, src, order):
        """`out` = `src` with its axes in `order` (out's axis k is src's axis order[k])."""
        loops, idx, inner = self._loops(self.shape[out], 0)
        at = [None] * len(order)
        for k, axis in enumerate(order):
            at[axis] = idx[k]
        return loops + [f"{inner}{out}[{', '.join(idx)}] = {self._at(src, at)}"]

    def _moveaxis(self, out, prim):
        """np.moveaxis(x, source, destination) copied into a local array of the moved shape."""
        src = prim.call.args.get("x")
        moves = [prim.call.const("source"), prim.call.const("destination")]
        if not isinstance(src, gast.Name) or src.id not in self.shape or \
                not all(isinstance(m, (int, tuple)) for m in moves):
            self.fail("np.moveaxis of a non-array or with axes known only at run time")
        rank = len(self.shape[src.id])
        source, destination = ([a % rank for a in np.atleast_1d(m)] for m in moves)
        order = [a for a in range(rank) if a not in source]
        for dest, axis in sorted(zip(destination, source)):
            order.insert(dest, axis)
        return self._permuted_copy(out, src.id, order)

    def _prod_others(self, out, prim):
        """The helper prod_others (np.prod's derivative) along the last axis: each entry the
        product of the entries before it, times the product of those after it (no division,
        so exact where x has zeros)."""
        src = prim.call.args.get("x")
        if not isinstance(src, gast.Name) or src.id not in self.shape:
            self.fail("np.prod's derivative of a non-array")
        shape = self.shape[src.id]
        loops, idx, inner = self._loops(shape[:-1], 0)
        acc, r = self.fresh("acc"), self.fresh("r")
        row = idx + [r]
        at, elem = f"{out}[{', '.join(row)}]", self._at(src.id, row)
        return loops + [f"{inner}{acc} = 1.0", f"{inner}for {r} in range({shape[-1]}):",
                        f"{inner}    {at} = {acc}", f"{inner}    {acc} *= {elem}",
                        f"{inner}{acc} = 1.0",
                        f"{inner}for {r} in range({shape[-1] - 1}, -1, -1):",
                        f"{inner}    {at} *= {acc}", f"{inner}    {acc} *= {elem}"]

    def _dot(self, out, a, b, depth):
        sa, sb = self.shape[a], self.shape[b]
        if len(sa) == 1 and len(sb) == 1:
            return [f"{out} = 0.0", f"for r in range({sa[0]}):",
                    f"    {out} += {self._at(a, ['r'])} * {self._at(b, ['r'])}"]
        if len(sa) == 2 and len(sb) == 1:
            return [f"for e0 in range({sa[0]}):", "    acc = 0.0",
                    f"    for r in range({sa[1]}):",
                    f"        acc += {self._at(a, ['e0', 'r'])} * {self._at(b, ['r'])}",
                    f"    {out}[e0] = acc"]
        if len(sa) == 1 and len(sb) == 2:
            return [f"for e0 in range({sb[1]}):", "    acc = 0.0",
                    f"    for r in range({sa[0]}):",
                    f"        acc += {self._at(a, ['r'])} * {self._at(b, ['r', 'e0'])}",
                    f"    {out}[e0] = acc"]
        if len(sa) == 2 and len(sb) == 2:
            return [f"for e0 in range({sa[0]}):", f"    for e1 in range({sb[1]}):",
                    "        acc = 0.0", f"        for r in range({sa[1]}):",
                    f"            acc += {self._at(a, ['e0', 'r'])} * "
                    f"{self._at(b, ['r', 'e1'])}", f"        {out}[e0, e1] = acc"]
        self.fail(f"np.dot of arrays of rank {len(sa)} and {len(sb)}")

    def _setitem(self, stmt, depth):
        target = stmt.targets[0]
        value = stmt.value
        base = target.value.id if isinstance(target.value, gast.Name) else None
        if base is None or base not in self.shape:
            self.fail(f"the write `{unparse(stmt).strip()}`")
        if isinstance(value, gast.Name) and value.id in self.shape or \
                any(isinstance(node, gast.Slice) for node in gast.walk(target.slice)):
            return self._write_view(base, target, value)
        return [f"{self._scalar(target)} = {self._scalar(value)}"]

    def _write_view(self, base, target, value):
        """A write through the view `target` picks (`y[1:3] = 0.0`, `y[0, :] = row`, an
        adjoint zeroing what a slice read): element by element over the view's own shape (the
        slice's bounds may be known only when the kernel runs), an array value broadcast."""
        shape = np.shape(self._stand_in_value(target))
        view = self.fresh(f"{base}_part")
        loops, idx, inner = self._loops([f"{view}.shape[{k}]" for k in range(len(shape))], 0)
        if isinstance(value, gast.Name) and value.id in self.shape:
            element = self._at(value.id, idx, shape)
        else:
            element = self._scalar(value)
        return [f"{view} = {self._scalar(target)}"] + loops + [
            f"{inner}{view}[{', '.join(idx)}] = {element}"]

    def _append(self, prim, depth):
        base = prim.base
        value = prim.args[0]
        counter = f"{base}_n"
        if isinstance(value, gast.Name) and value.id in self.shape:
            shape = self.shape[value.id]
            loops, idx, inner = self._loops(shape, 0)
            lines = loops + [f"{inner}{base}[{counter}, {', '.join(idx)}] = "
                             f"{self._at(value.id, idx)}"]
        else:
            lines = [f"{base}[{counter}] = {self._scalar(value)}"]
        return lines + [f"{counter} += 1"]

    def _pop(self, out, base, depth):
        counter = f"{base}_n"
        lines = [f"{counter} -= 1"]
        if out in self.shape:
            shape = self.shape[out]
            loops, idx, inner = self._loops(shape, 0)
            return lines + loops + [f"{inner}{out}[{', '.join(idx)}] = "
                                    f"{base}[{counter}, {', '.join(idx)}]"]
        return lines + [f"{out} = {base}[{counter}]"]

    def _call(self, stmt, prim, depth):
        lowered = self.callees[id(stmt)]
        target = stmt.targets[0]
        targets = target.elts if isinstance(target, gast.Tuple) else [target]
        args = [unparse(a) for a in prim.args]
        outs, scalars = [], []
        for t, shape in zip(targets, lowered.out_shapes):
            if shape is None:
                scalars.append(t.id)
            else:
                if self.kinds.get(t.id) != "buffer":
                    self.kinds[t.id] = "buffer"
                outs.append(t.id)
        call = f"{lowered.name}({', '.join(args + outs)})"
        if scalars:
            return [f"{', '.join(scalars)} = {call}"]
        return [call]


def _is_int_tuple(value):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return True
    return isinstance(value, tuple) and all(isinstance(v, (int, np.integer)) for v in value)


def _rule_name(prim):
    rule = getattr(prim, "rule", None) if prim is not None else None
    name_ = getattr(rule, "name", None)
    return name_ if isinstance(name_, str) else None


def _numba_dtype(value):
    return NUMBA_DTYPES.get(str(value.dtype), "float64")


def _indexes(value, name_):
    """Whether every read of `name_` in `value` is subscripted (an element, not the array)."""
    for node in gast.walk(value):
        if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
                node.value.id == name_:
            continue
        if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                node.value.id == name_ and node.attr in ("shape", "size", "ndim"):
            continue
    reads = [n for n in gast.walk(value) if isinstance(n, gast.Name) and n.id == name_]
    direct = []
    for node in gast.walk(value):
        if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
                node.value.id == name_:
            direct.append(node.value)
        if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                node.value.id == name_:
            direct.append(node.value)
        if isinstance(node, gast.Call) and dotted_name(node.func) == "len":
            direct.extend(a for a in node.args if isinstance(a, gast.Name))
    return all(any(r is d for d in direct) for r in reads)


def _is_marker(stmt):
    from codegen.emit import is_marker
    return is_marker(stmt)


def _store_names(target):
    if isinstance(target, gast.Name):
        return [target.id]
    if isinstance(target, (gast.Tuple, gast.List)):
        return [n for e in target.elts for n in _store_names(e)]
    return []


def _walk_stmts(stmts):
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            yield from _walk_stmts(stmt.body)
            yield from _walk_stmts(stmt.orelse)


def _walk_in_loops(stmts, loops=()):
    """(statement, the for/while loops around it, outermost first) for every statement."""
    for stmt in stmts:
        yield stmt, loops
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            inner = loops + (stmt,) if not isinstance(stmt, gast.If) else loops
            yield from _walk_in_loops(stmt.body, inner)
            yield from _walk_in_loops(stmt.orelse, inner)


def _all_names(core):
    names = set(core.params)
    for stmt in _walk_stmts(core.body):
        names |= _names(stmt)
    return names


def _order_key(core):
    order = {}
    for stmt in _walk_stmts(core.body):
        if isinstance(stmt, gast.Assign):
            for n in _store_names(stmt.targets[0]):
                order.setdefault(n, len(order))
    return lambda n: (order.get(n, -1), n)


# ---------------------------------------------------------------- entry point
def lower_for_device(fn, specs, shapes, tape_size=None):
    """Device functions for `fn` at one per-example signature.

    `specs` are the abstract argument types (flat: arrays and scalars), `shapes` the concrete
    per-example shape of every array argument. Returns a :class:`DeviceModule` whose last
    function is the entry: it takes the arguments, then one array per returned array (written
    in place), and returns the scalar results.
    """
    info = parse_function(fn)
    program = Program(reserved={"np", "math", "cuda", "float64", "float32", "int64", "int32",
                                "boolean"})
    core = normalize_into(program, info, specs, core_name=info.name)
    lowering = _Lowering(program, {"tape_size": tape_size})
    entry = lowering.function(core, shapes)
    return DeviceModule(list(lowering.order), entry, entry.tuple_out)
