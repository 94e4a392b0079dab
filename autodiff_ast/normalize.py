"""Normalization: a parsed user function becomes the core form the transformations read.

Core form is straight Python in which every statement applies one primitive to names and
constants (``div = x / 2.0``; ``tanh = np.tanh(div)``), so a derivative rule never sees a nested
expression. Along the way we resolve every free name statically (numpy under any alias, ``math``,
module constants, module data, the user's other functions), infer an abstract type for every
name (:mod:`autodiff_ast.types`), give re-assigned names fresh versions (``x``, ``x_2``) so each
value keeps its own name, turn pytree arguments into flat leaves (``params['W']`` becomes
``params_W``), and call the user's helper functions as calls to their own core functions.

Each core statement carries ``stmt.prim`` (what it computes, for the rules) and
``stmt.origin`` (the user's statement it came from, for comments and error messages).

>>> import numpy as np
>>> from autodiff_ast.frontend import parse_function
>>> def f(x):
...     return np.sum(np.tanh(x) * 2.0)
>>> core = normalize(parse_function(f), {"x": T.array((T.N,))})
>>> [unparse(s) for s in core.body]
['tanh = np.tanh(x)', 'mul = tanh * 2.0', 'sum_ = np.sum(mul)']
"""

from __future__ import annotations

import collections
import copy
import inspect
import math
import operator
import sys
import types as pytypes
import typing
from dataclasses import dataclass, field, replace

import gast
import numpy as np

from codegen.helpers import helper_names

from . import rules
from . import types as T
from .collective_leaves import PER_LEAF, spread_collective
from .comprehensions import (
    FOLDS,
    MAKERS,
    comprehension_of,
    fold_builtin,
    has_rows,
    lower_comprehension,
    rows_made_arrays,
)
from .errors import MissingRuleError, TypeInferenceError, UnsupportedSyntaxError
from .frontend import FunctionInfo, parse_function
from .hidden_indices import loops_with_hidden_index
from .lowering import lower_loop_exits
from .naming import Namer, sanitize
from .nesting import code_to_transform
from .pytrees import bind_namedtuple_fields, is_namedtuple_class
from .rules import PrimCall
from .shared_memory import check_view_writes
from .specs import Static, TreeSpec, spec_of  # noqa: F401  (re-exported: older imports)
from .templates import USER_CONSTANT, assign, fill, name, to_expr, unparse

BINOPS = {gast.Add: "add", gast.Sub: "subtract", gast.Mult: "multiply", gast.Div: "divide",
          gast.Pow: "power", gast.MatMult: "matmul", gast.Mod: "remainder",
          gast.FloorDiv: "floor_divide"}
TEMP_BASE = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div",
             "power": "pow", "matmul": "matmul", "negative": "neg", "T": "transposed",
             "getitem": "item", "sum": "sum_", "max": "max_", "min": "min_", "len": "n",
             "float": "value", "int": "count", "remainder": "rem", "floor_divide": "quot"}
METHODS = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min,
           "var": np.var, "std": np.std, "cumsum": np.cumsum, "dot": np.dot,
           "reshape": np.reshape, "transpose": np.transpose, "copy": np.copy, "ravel": np.ravel,
           "flatten": np.ravel, "squeeze": np.squeeze, "clip": np.clip,
           "swapaxes": np.swapaxes, "argmax": np.argmax, "argmin": np.argmin,
           "round": np.round, "trace": np.trace, "diagonal": np.diagonal, "any": np.any,
           "all": np.all, "argsort": np.argsort, "take": np.take,
           "repeat": np.repeat}
VARARG_METHODS = {"reshape": "shape", "transpose": "axes"}
#: Bitwise operators: (symbol, Python's function of two constants)
_BITWISE = {gast.BitAnd: ("&", operator.and_), gast.BitOr: ("|", operator.or_),
            gast.BitXor: ("^", operator.xor), gast.LShift: ("<<", operator.lshift),
            gast.RShift: (">>", operator.rshift)}


# (source text, globals' id, closure ids) -> a nested function lifted to the module level
_LIFTED = {}


@dataclass(frozen=True, eq=False)
class BoundTransform:
    """A transform (grad, vmap...) of a nested function or lambda made inside transformed
    code: the transform of the function lifted (its free variables after its parameters),
    and the atoms each call passes for those variables."""

    transform: object
    free: tuple


def _lambda_def(fname, node):
    """The lambda `node` as ``def fname(...): return <its body>`` (at its location)."""
    fdef = gast.FunctionDef(name=fname, args=node.args,
                            body=[gast.copy_location(gast.Return(value=node.body), node)],
                            decorator_list=[], returns=None, type_comment=None,
                            type_params=[])
    return gast.copy_location(fdef, node)


def _assign_node(target, value):
    """The statement `target = value` (a fresh Store name), located where `value` is."""
    stmt = gast.Assign(targets=[gast.Name(id=target.id, ctx=gast.Store(), annotation=None,
                                          type_comment=None)], value=value, type_comment=None)
    return gast.copy_location(stmt, value)


# calls that define a NamedTuple class (refused inside transformed code)
_NAMEDTUPLE_MAKERS = (collections.namedtuple, typing.NamedTuple)


class LocalFunction:
    """A function defined inside the differentiated function (keyed by identity)."""

    def __init__(self, node, name_):
        self.node = node
        self.name = name_

    def __repr__(self):
        return f"<nested function {self.name}>"


@dataclass(frozen=True)
class TreeRef:
    """A compile-time reference to a (part of a) pytree argument."""

    spec: TreeSpec
    base: str  # the flat-name prefix of this subtree


def _int_tuple_display(ref):
    """A tuple argument of integers (a shape passed to np.reshape or np.zeros) as the tuple
    display of its leaves; None for anything else."""
    if not isinstance(ref, TreeRef) or ref.spec.kind != "tuple" or \
            any(isinstance(spec, (TreeSpec, Static)) for _, spec in ref.spec.children):
        return None
    leaves = ref.spec.leaves(ref.base)
    if not leaves or any(t.kind != "int" for _, t in leaves):
        return None
    return gast.Tuple(elts=[name(flat) for flat, _ in leaves], ctx=gast.Load())


@dataclass(eq=False)
class LocalDict:
    """A dict with string keys built in the function (``p = {"w": w}``, ``layers = {}``):
    each entry is a local name of its own, so ``p["w"]`` reads a name and ``p["h"] = v``
    binds one (branches and loops treat it as any name, and its derivative flows as a
    name's). Where the dict itself is a value (returned, passed to a call) it is built from
    its entries, as a dict display."""

    entries: dict  # key -> the (user-level) local name holding its value
    prefix: str  # the start of its entries' local names

    def local_name(self, key, taken):
        """The local name for entry `key`: new names avoid every name in `taken`."""
        if key not in self.entries:
            base = sanitize(f"{self.prefix}_{key}")
            local, k = base, 1
            while local in taken:
                k += 1
                local = f"{base}_{k}"
            taken.add(local)
            self.entries[key] = local
        return self.entries[key]


@dataclass(eq=False)
class HeldTuple:
    """What a call of a function of the user's returning a tuple that holds a dict gives
    (``loss, aux = loss_fn(w)`` with ``return loss, {"acc": acc}``): its entries, each an atom
    or a LocalDict whose entries the call's tuple bound, so ``aux["acc"]`` reads a name."""

    parts: list


# ---------------------------------------------------------------- core program
@dataclass
class Prim:
    """What one core statement computes."""

    kind: str  # 'rule', 'user', 'copy', 'unpack', 'nondiff'
    rule: object = None
    call: PrimCall | None = None
    callee: object = None  # CoreFunction for 'user'
    args: list = field(default_factory=list)  # atoms read (for activity analysis)


@dataclass
class CoreFunction:
    info: FunctionInfo
    name: str
    params: list  # flat parameter names
    body: list
    types: dict
    returns: object  # atom or gast.Tuple of atoms
    return_node: object
    namer: Namer
    arg_specs: dict

    recursive_calls: int = 0
    checkpointed: bool = False
    # core name -> (user statement, user name) where values with and without a size-one
    # axis met (reverse mode refuses such a name when it is active)
    merged_axes: dict = field(default_factory=dict)
    # core parameter name -> (user name, first statement writing into it): the parameters
    # the function writes in place (it writes into a copy; autodiff_ast/shared_memory.py
    # refuses a caller that reads the argument after the call)
    written_params: dict = field(default_factory=dict)
    # the keys of the dict a function called by another one returns (it returns their values
    # as a tuple: the caller reads the dict's entries as names, normalize.LocalDict)
    dict_keys: tuple | None = None
    # the same for each entry of a tuple it returns (None for an entry that is no dict):
    # `return loss, {"acc": acc}` returns (loss, (acc,)) and the caller gets a HeldTuple
    tuple_dicts: tuple | None = None
    # the spec (codegen/dict_outputs.py) of dicts it returns deeper inside displays
    # (`return x, [y, {"k": z}]`): it returns their values as tuples, the call of the
    # transformed function rebuilds them, and a caller gets nested HeldTuples (held_parts)
    nested_dicts: list | None = None

    @property
    def return_type(self):
        if self.returns is None:  # still being normalized: a recursive call
            self.recursive_calls += 1
            return T.UNKNOWN
        if isinstance(self.returns, gast.Tuple):
            return T.AType("tuple", elts=tuple(atom_type(e, self.types)
                                               for e in self.returns.elts),
                           record=getattr(self.returns, "record", None))
        return atom_type(self.returns, self.types)


class Program:
    """Everything one generated module needs: core functions, module data, imports."""

    def __init__(self, reserved=()):
        self.functions = {}  # key -> CoreFunction
        self.data = {}  # emitted name -> (module name or None, attribute, value)
        # emitted name of a custom_jvp/custom_vjp function's primal -> the custom object (the
        # module's copy of it keeps the rule when the module is differentiated again)
        self.custom_primals = {}
        # (the helpers a generated module may carry, or jit's dialect may add, are named
        # as they are: a function of the user's named like one is renamed)
        self.module_names = Namer(set(reserved) | helper_names())
        self.order = []
        # Variables of a program jit rewrote (autodiff_ast/scalarize.py rebuild) that the
        # user never wrote: their values are temporaries, which tidying may inline (user
        # variables are kept by name).
        self.synthetic_names = frozenset()

    def data_name(self, value, preferred, module):
        for emitted, (_, _, v) in self.data.items():
            if v is value:
                return emitted
        emitted = self.module_names.fresh(preferred)
        self.data[emitted] = (module, preferred, value)
        return emitted


def atom_type(atom, types):
    if isinstance(atom, gast.Name):
        return types.get(atom.id, T.UNKNOWN)
    if isinstance(atom, gast.Constant):
        return T.const(atom.value)
    if isinstance(atom, (gast.Tuple, gast.List)):
        elts = tuple(atom_type(e, types) for e in atom.elts)
        values = tuple(e.value for e in elts)
        const = values if all(v is not None for v in values) else None
        # (a NamedTuple's entries, returned by a function: Normalizer.output_entries)
        return T.AType("tuple", elts=elts, value=const, record=getattr(atom, "record", None))
    if isinstance(atom, gast.UnaryOp):
        value = atom_type(atom.operand, types)
        if value.value is not None and isinstance(value.value, (int, float)):
            return T.const(-value.value)
        return value
    if isinstance(atom, gast.Slice):
        return T.AType("object")
    return T.UNKNOWN


def names_in(node):
    return [n.id for n in gast.walk(node) if isinstance(n, gast.Name)]


# ---------------------------------------------------------------- the normalizer
class Normalizer:
    def __init__(self, info, arg_specs, program, core_name, called=False):
        self.info = info
        # normalized for a call from another function: a dict it returns is a tuple of the
        # dict's values (dict_keys), which the caller reads entry by entry
        self.called = called
        self.dict_keys = None
        self.tuple_dicts = None
        self.nested_dicts = None
        self.program = program
        self.body = []
        self.types = {}
        self.env = {}  # user name -> core name | TreeRef | Static | LocalDict
        taken = set(names_in(info.node)) | set(program.module_names.taken)
        self.namer = Namer(taken)
        self.taken_names = self.namer.taken  # (a dict's entries take names from it too)
        # a local is not named like a function this one's calls write into the module
        # later (a custom rule's primal, say): it would hide it
        self.namer.avoided.append(program.module_names.taken)
        self.dict_counts = {}  # user name -> dicts built under it so far (LocalDict)
        self.origin = None
        self.params = []
        self.core_name = core_name
        self.arg_specs = arg_specs
        self.depth = 0  # nesting of if/for/while: names are overwritten, not versioned, inside
        # per nested block: user names first bound in it (versioned there when their shape
        # changes, so one core name never holds values of two shapes: see define)
        self.block_locals = []
        # Float-typed names that hold a 0-d NumPy array at run time (np.where of scalars,
        # np.copy, np.asarray, np.array): `b = a` shares it, `a += c` writes it in place.
        self.zero_dim = set()
        self.hidden_indices = set()  # ids of for statements (autodiff_ast/hidden_indices.py)
        # core name -> (statement, user name) where a size-one axis met a longer one (join)
        self.merged_axes = {}
        self.written_params = {}  # see CoreFunction.written_params
        self.views = {}  # core name -> the array it is a view of (basic slicing, .T, reshape)
        self.written = set()  # core names written in place

    # -- errors
    def user_name(self, core_name):
        """The user's name for a core name (``x`` for ``x_2``), for messages."""
        for user, core in self.env.items():
            if core == core_name:
                return user
        return core_name

    def unsupported(self, message, node, hint=None):
        return self.info.error(UnsupportedSyntaxError, message, node, hint or (
            "rewrite this line with the supported subset: NumPy calls, arithmetic, "
            "if/for/while, in-place writes and calls of your own functions"))

    # -- entry point
    def run(self):
        node = self.info.node
        args = node.args
        if args.vararg or args.kwarg:
            raise self.unsupported("functions taking *args or **kwargs cannot be differentiated",
                                   node, "list the parameters explicitly")
        for arg in list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs):
            spec = self.arg_specs.get(arg.id, T.UNKNOWN)
            if isinstance(spec, TreeSpec):
                self.env[arg.id] = TreeRef(spec, arg.id)
                for flat, leaf in spec.leaves(arg.id):
                    self.namer.reserve(flat)
                    self.params.append(flat)
                    self.types[flat] = leaf
            elif isinstance(spec, Static):
                self.env[arg.id] = spec
            else:
                self.env[arg.id] = arg.id
                self.params.append(arg.id)
                self.types[arg.id] = spec
        returns, return_node = None, None
        body = lower_loop_exits(copy.deepcopy(node.body), self.namer,
                                lambda msg, n, hint: self.unsupported(msg, n, hint))
        body = lower_returns(body, self)  # lowering rewrites the (copied) tree
        self.hidden_indices = loops_with_hidden_index(body)  # (see range_loop)
        self.copy_params_written_in_place(body)
        for stmt in body:
            self.origin = stmt
            if isinstance(stmt, gast.Return):
                return_node = stmt
                returns = self.visit_return(stmt)
                break
            self.visit_stmt(stmt)
        check_view_writes(self)
        if return_node is None:
            returns = gast.Constant(value=None, kind=None)
            return_node = node
        core = CoreFunction(self.info, self.core_name, self.params, self.body, self.types,
                            returns, return_node, self.namer, self.arg_specs)
        core.merged_axes = self.merged_axes
        core.written_params = self.written_params
        core.dict_keys = self.dict_keys
        core.tuple_dicts = self.tuple_dicts
        core.nested_dicts = self.nested_dicts
        return core

    # -- statements
    def visit_stmt(self, stmt):
        self.current = stmt  # the statement being read, for errors inside blocks
        if isinstance(stmt, gast.Assign):
            for target in stmt.targets:
                self.assign_to(target, stmt.value)
        elif isinstance(stmt, gast.AnnAssign):
            if stmt.value is not None:
                self.assign_to(stmt.target, stmt.value)
        elif isinstance(stmt, (gast.If, gast.For, gast.While, gast.With)):
            getattr(self, "visit_" + type(stmt).__name__)(stmt)
        elif isinstance(stmt, (gast.Break, gast.Continue)):
            raise self.unsupported(f"{type(stmt).__name__.lower()} outside a loop", stmt)
        elif isinstance(stmt, gast.AugAssign):
            target = stmt.target
            if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name) and \
                    isinstance(self.env.get(target.value.id), LocalDict):
                # `d["k"] += v`: the entry's name rebound, as `k += v` would be
                read = gast.Subscript(value=target.value, slice=target.slice, ctx=gast.Load())
                self.assign_to(target, gast.copy_location(
                    gast.BinOp(left=read, op=stmt.op, right=stmt.value), stmt))
                return
            if isinstance(stmt.target, gast.Subscript):
                self.aug_setitem(stmt)
                return
            if not isinstance(stmt.target, gast.Name):
                raise self.unsupported("augmented assignment to an attribute is not supported",
                                       stmt, "assign to a local variable instead")
            value = gast.BinOp(left=gast.Name(id=stmt.target.id, ctx=gast.Load(),
                                              annotation=None, type_comment=None),
                               op=stmt.op, right=stmt.value)
            gast.copy_location(value, stmt)
            old = self.env.get(stmt.target.id)
            in_place = isinstance(old, str) and (
                self.types.get(old, T.UNKNOWN).kind == "array" or old in self.zero_dim)
            self.assign_to(stmt.target, value)
            if in_place and self.body:
                # NumPy writes an array in place here, where generated code binds a new value:
                # the same unless another name shares the array (check_view_writes).
                self.body[-1].in_place_of = old
        elif isinstance(stmt, gast.Expr):
            if isinstance(stmt.value, gast.Constant):
                return  # a docstring or a bare constant
            if isinstance(stmt.value, (gast.Yield, gast.YieldFrom, gast.Await)):
                raise self.unsupported(f"{_describe(stmt.value)} is not supported in "
                                       "differentiated code", stmt,
                                       _HINTS.get(type(stmt.value).__name__))
            if _is_append(stmt.value):
                self.list_append(stmt.value)
                return
            if _is_method(stmt.value, "pop"):
                self.list_pop(stmt.value, None)  # the value is dropped, the list shrinks
                return
            if self.is_add_at(stmt.value):
                self.add_at(stmt.value)
                return
            if isinstance(stmt.value, gast.Call) and isinstance(stmt.value.func, gast.Name) \
                    and self.expr(stmt.value.func) == Static(print):
                self.print_call(stmt.value)
                return
            raise self.unsupported("expression statements (calls kept for their side effects) "
                                   "are not supported, print aside", stmt,
                                   "remove the statement, or move it outside the function")
        elif isinstance(stmt, gast.Raise):
            self.visit_Raise(stmt)
        elif isinstance(stmt, gast.Assert):
            self.visit_Assert(stmt)
        elif isinstance(stmt, gast.Pass):
            return
        elif isinstance(stmt, gast.Delete) and all(isinstance(t, gast.Name)
                                                   for t in stmt.targets):
            return  # `del y`: the name is not read again in a program that runs
        elif isinstance(stmt, gast.FunctionDef):
            self.define_local_function(stmt.name, stmt)
        elif isinstance(stmt, gast.ClassDef) and any(
                unparse(b).split(".")[-1] == "NamedTuple" for b in stmt.bases):
            raise self.unsupported(f"a NamedTuple class defined inside the function ({stmt.name}) "
                                   "is not supported", stmt,
                                   f"define {stmt.name} at module level; building its values "
                                   f"inside the function ({stmt.name}(...)) is supported")
        else:
            what = type(stmt).__name__
            readable = {"If": "if statements", "For": "for loops", "While": "while loops",
                        "With": "with blocks", "Try": "try/except", "TryStar": "try/except*",
                        "Global": "global declarations",
                        "Nonlocal": "nonlocal statements", "ClassDef": "class definitions",
                        "FunctionDef": "nested function definitions", "Import": "imports",
                        "ImportFrom": "imports", "Delete": "del of an element or attribute",
                        "Match": "match statements",
                        "AsyncFor": "async for", "AsyncWith": "async with"}.get(what, what)
            raise self.unsupported(f"{readable} are not supported in differentiated code yet",
                                   stmt, _HINTS.get(what, "rewrite the function without it"))

    def assign_to(self, target, value):
        if isinstance(target, gast.Name) and isinstance(value, gast.Lambda):
            self.define_local_function(target.id, _lambda_def(target.id, value))
            return
        if isinstance(target, gast.Name) and isinstance(value, gast.Dict) and \
                all(isinstance(k, gast.Constant) and isinstance(k.value, str)
                    for k in value.keys):
            self.local_dict(target.id, value)
            return
        if isinstance(target, gast.Name) and isinstance(value, gast.IfExp) and any(
                isinstance(side, gast.Dict) for side in (value.body, value.orelse)):
            # `d = {..} if c else {..}`: the if statement it means, whose branches bind d's
            # entries as a dict built where it is read does
            branch = gast.If(test=value.test, body=[_assign_node(target, value.body)],
                             orelse=[_assign_node(target, value.orelse)])
            self.visit_stmt(gast.copy_location(branch, value))
            return
        if isinstance(target, gast.Name):
            resolved = self.expr(value, target=target.id)
            if isinstance(resolved, (TreeRef, Static, LocalDict, HeldTuple)):
                self.env[target.id] = resolved
            return
        if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name) and \
                isinstance(self.env.get(target.value.id), LocalDict):
            self.dict_store(self.env[target.value.id], target, value)
            return
        if isinstance(target, (gast.Tuple, gast.List)):
            names = target.elts
            if isinstance(value, (gast.Tuple, gast.List)) and len(value.elts) == len(names):
                # `a, b = b, a`: every value is read before any name is bound (inside a loop
                # or branch a rebound name keeps its core name, so read b into a temporary)
                bound = {self.env.get(t.id) for t in gast.walk(target)
                         if isinstance(t, gast.Name)}
                atoms = [self.held_if_bound(self.expr(v), bound) for v in value.elts]
                for t, a in zip(names, atoms):
                    self.bind_value(t, a)
                return
            self.unpack(target, self.expr(value), value)
            return
        if isinstance(target, gast.Subscript):
            self.setitem(target, self.atom(value))
            return
        raise self.unsupported(f"cannot assign to {type(target).__name__}", target,
                               "assign to a local name, or return the value instead")

    def local_dict(self, user_name, display):
        """`user_name = {"k": v, ...}` (string keys): a LocalDict whose entries are bound like
        names (its values read before the name is rebound). Inside a branch or loop a name
        already holding one keeps its entries' names, as a rebound name keeps its own."""
        current = self.env.get(user_name)
        values = {key.value: value for key, value in zip(display.keys, display.values)}
        read = {}  # key -> its value's atom, when the values are read first
        if self.depth > 0 and isinstance(current, LocalDict):
            made = LocalDict(dict(current.entries), current.prefix)
            if not any(isinstance(v, gast.Dict) for v in values.values()):
                # the entries keep their names: every value is read before one is written
                # (`p = {"a": p["a"] * p["b"], "b": p["b"] + p["a"]}` in a loop read the
                # new p["a"]; a swap made both entries one value)
                bound = {self.env[n] for n in current.entries.values()
                         if isinstance(self.env.get(n), str)}
                read = {key: self.held_if_bound(self.atom(value), bound)
                        for key, value in values.items()}
        else:
            made = self.new_local_dict(user_name)
        kept = {}
        for key, value in values.items():
            kept[key] = made.local_name(key, self.taken_names)
            target = gast.copy_location(name(kept[key], store=True), value)
            if key in read:
                self.bind_value(target, read[key])
            else:
                self.assign_to(target, value)
        made.entries = kept  # (the keys of this display only)
        self.env[user_name] = made

    def new_local_dict(self, user_name):
        """An empty LocalDict for `user_name`, its entries' names prefixed by the name (then
        ``name_2``, ... for later dicts bound to it)."""
        count = self.dict_counts.get(user_name, 0) + 1
        self.dict_counts[user_name] = count
        return LocalDict({}, user_name if count == 1 else f"{user_name}_{count}")

    def dict_key(self, key, subscript, message, hint):
        """The constant string `key` (an atom, or a loop's constant key) of `subscript` on a
        LocalDict, or the error."""
        if isinstance(key, Static) and isinstance(key.value, str):
            return key.value  # `for k in ("w", "b"): d[k]`
        if not (isinstance(key, gast.Constant) and isinstance(key.value, str)):
            raise self.unsupported(message, subscript, hint)
        return key.value

    def dict_store(self, local_dict, target, value):
        """`d["k"] = v` on a LocalDict: binds (or rebinds) the entry's name."""
        key = self.dict_key(self.expr(target.slice), target, "a dict built in the function "
                            "takes constant string keys", "write d['name'] = value")
        local = local_dict.local_name(key, self.taken_names)
        self.assign_to(gast.copy_location(name(local, store=True), target), value)

    def dict_read(self, local_dict, node):
        """`d["k"]` on a LocalDict: the entry's name."""
        key = self.dict_key(self.expr(node.slice), node, "a dict built in the function is "
                            "read with constant string keys", "write d['name'], not d[name]")
        if key not in local_dict.entries:
            raise self.unsupported(f"{unparse(node)}: the dict has no key {key!r} here "
                                   f"(its keys: {', '.join(map(repr, local_dict.entries))})",
                                   node, "set the entry before reading it")
        return self.expr_Name(gast.copy_location(name(local_dict.entries[key]), node), None)

    def dict_as_tree(self, local_dict, node):
        """A LocalDict passed to a function of the user's: (its TreeSpec, its flat leaves),
        as for a dict passed in as an argument (keys sorted, as pytrees flatten dicts)."""
        children, flat = [], []
        for key in sorted(local_dict.entries):
            bound = self.env.get(local_dict.entries[key])
            if isinstance(bound, str):
                if self.types.get(bound, T.UNKNOWN).kind in ("tuple", "list", "dict"):
                    raise self.unsupported(f"entry {key!r} of a dict built in the function "
                                           "holds a container: it cannot be passed on", node,
                                           "pass its entries as separate arguments")
                bound = name(bound)
            elif not isinstance(bound, (LocalDict, TreeRef, Static)):
                raise self.unsupported(f"entry {key!r} of a dict built in the function cannot "
                                       "be passed on", node, "pass the value itself")
            spec, leaves = self.passed(bound, node)
            children.append((key, spec))
            flat.extend(leaves)
        return TreeSpec("dict", tuple(children)), flat

    def passed(self, value, node):
        """(spec, flat arguments) of `value` passed to a function of the user's: a pytree's
        (a LocalDict's, an argument's subtree) spec and leaves, a Static alone, a value's type
        and the value."""
        if isinstance(value, LocalDict):
            return self.dict_as_tree(value, node)
        if isinstance(value, TreeRef):
            return value.spec, [name(flat) for flat, _ in value.spec.leaves(value.base)]
        if isinstance(value, Static):
            return value, []
        value = self.runtime(value, node)
        return atom_type(value, self.types), [value]

    def dict_value(self, local_dict, node):
        """A LocalDict used as a value: a dict display of its entries (a value with no
        derivative: returned as an aux output, say)."""
        keys = [gast.Constant(value=k, kind=None) for k in local_dict.entries]
        values = [name(v) for v in local_dict.entries.values()]
        if not keys:
            raise self.unsupported("an empty dict built in the function cannot be used as a "
                                   "value", node, "return or pass its entries instead")
        return self.expr_Dict(gast.copy_location(gast.Dict(keys=keys, values=values), node),
                              None)

    def held_if_bound(self, atom, bound):
        """`atom`, or a temporary copy of it when it names one of the core names `bound`
        (entry by entry in a tuple display)."""
        if isinstance(atom, (gast.Tuple, gast.List)):
            atom.elts = [self.held_if_bound(e, bound) for e in atom.elts]
            return atom
        if not (isinstance(atom, gast.Name) and atom.id in bound):
            return atom
        held = self.namer.temp(f"{atom.id}_held")
        self.types[held] = atom_type(atom, self.types)
        self.append(assign(held, atom), Prim("copy", args=[atom]))
        if self.types[held].kind == "array":
            self.body[-1].view_of = atom.id
        return name(held)

    def unpack(self, target, atom, node=None):
        """`a, b = atom` (one level deep): a tuple of known length, a pytree node or a
        constant."""
        names = target.elts
        if isinstance(atom, TreeRef):
            for i, t in enumerate(names):
                self.bind_value(t, self.tree_child(atom, i, node or target))
            return
        if isinstance(atom, HeldTuple):
            if len(atom.parts) != len(names):
                raise self.unpack_mismatch(len(atom.parts), names, target)
            for t, part in zip(names, atom.parts):
                if isinstance(part, LocalDict) and isinstance(t, gast.Name):
                    self.env[t.id] = part
                else:
                    self.bind_value(t, part)
            return
        if isinstance(atom, Static):
            for t, v in zip(names, atom.value):
                self.bind_value(t, self.static(v, node or target, None))
            return
        if isinstance(atom, (gast.Tuple, gast.List)):  # `(a, b), c = (p, q), r`: a display
            if len(atom.elts) != len(names):
                raise self.unpack_mismatch(len(atom.elts), names, target)
            for t, part in zip(names, atom.elts):
                self.bind_value(t, part)
            return
        typ = atom_type(atom, self.types)
        if typ.kind == "unknown":  # e.g. a recursive call, typed on a second pass
            typ = T.AType("tuple", elts=tuple(T.UNKNOWN for _ in names))
        if typ.kind == "array" and typ.ndim and isinstance(atom, gast.Name) and \
                all(isinstance(t, gast.Name) for t in names):
            self.unpack_array(names, atom, node or target)
            return
        if typ.kind == "tuple" and typ.elts is not None and len(typ.elts) != len(names):
            raise self.unpack_mismatch(len(typ.elts), names, target)
        if typ.kind != "tuple" or typ.elts is None:
            raise self.unsupported("can only unpack tuples whose length is known", target,
                                   "index the values one by one (a = x[0]) instead")
        # `(v, m), g = ...`: an inner target is first bound to a temporary, then unpacked
        inner = {k: self.namer.temp("unpacked") for k, t in enumerate(names)
                 if not isinstance(t, gast.Name)}
        out = [inner[k] if k in inner else self.define(t.id) for k, t in enumerate(names)]
        for n, t in zip(out, typ.elts):
            self.types[n] = t
        stmt = assign(out, atom)
        self.append(stmt, Prim("unpack", args=[atom]))
        for k, held in inner.items():
            self.unpack(names[k], name(held), node or target)

    def unpack_mismatch(self, count, names, target):
        """The error for unpacking `count` values into another number of names."""
        return self.unsupported(f"the value holds {count} values: unpack them into as "
                                f"many names, not {len(names)}", target)

    def unpack_array(self, names, atom, node):
        """`x0, y0 = pts[i]`: the array's entries along its first axis, read one by one, after
        a run-time check of its length (Python raises ValueError for another length)."""
        held = self.readable(atom, node, "unpacked").id
        count = len(names)

        def at(made):
            return gast.copy_location(made, node)
        length = at(gast.Subscript(value=at(gast.Attribute(value=at(name(held)), attr="shape",
                                                           ctx=gast.Load())),
                                   slice=at(gast.Constant(value=0, kind=None)),
                                   ctx=gast.Load()))
        message = f"cannot unpack an array into {count} names: its first axis has another length"
        check = at(gast.If(
            test=at(gast.Compare(left=length, ops=[gast.NotEq()],
                                 comparators=[at(gast.Constant(value=count, kind=None))])),
            body=[at(gast.Raise(exc=at(gast.Call(func=at(name("ValueError")), args=[
                at(gast.Constant(value=message, kind=None))], keywords=[])), cause=None))],
            orelse=[]))
        self.visit_stmt(check)
        for k, t in enumerate(names):
            item = at(gast.Subscript(value=at(name(held)), slice=at(gast.Constant(
                value=k, kind=None)), ctx=gast.Load()))
            self.visit_stmt(at(gast.Assign(targets=[at(name(t.id, store=True))], value=item,
                                           type_comment=None)))

    def bind_value(self, target, atom):
        if isinstance(target, (gast.Tuple, gast.List)):  # `(v, m), g = ...`: one level in
            self.unpack(target, atom, target)
            return
        if not isinstance(target, gast.Name):
            raise self.unsupported(f"cannot assign to {type(target).__name__}", target)
        if isinstance(atom, (TreeRef, Static, HeldTuple)):
            self.env[target.id] = atom
            return
        self.refuse_nested_tuple_in_block(atom_type(atom, self.types))
        if isinstance(atom, (gast.Tuple, gast.List)):  # `a, b = (p, q), r`: a is (p, q)
            self.bind_display(atom, target.id)
            return
        out = self.define(target.id)
        self.types[out] = atom_type(atom, self.types)
        self.append(assign(out, atom), Prim("copy", args=[atom]))
        if isinstance(atom, gast.Name) and self.types[out].kind == "array":
            self.body[-1].view_of = atom.id  # `for row in a`: row is a's row, not a copy

    def visit_return(self, stmt):
        if stmt.value is None:
            return gast.Constant(value=None, kind=None)
        if self.called and _string_keyed(stmt.value):
            held = self.namer.temp("returned")
            self.local_dict(held, stmt.value)
            return self.returned_dict(self.env[held], stmt)
        if self.called and isinstance(stmt.value, gast.Name) and \
                isinstance(self.env.get(stmt.value.id), LocalDict):
            return self.returned_dict(self.env[stmt.value.id], stmt)
        if self.called and any(self.holds_dict(e) for e in getattr(stmt.value, "elts", ())
                               if isinstance(e, (gast.Tuple, gast.List))):
            returned, self.nested_dicts = self.returned_tree(stmt.value, stmt)
            return returned
        if isinstance(stmt.value, (gast.Tuple, gast.List)):
            values = [self.returned_entry(e) for e in stmt.value.elts]
            if self.called and any(isinstance(v, LocalDict) for v in values):
                # `return loss, {"acc": acc}`: each dict the tuple of its entries' values
                self.tuple_dicts = tuple(tuple(v.entries) if isinstance(v, LocalDict)
                                         else None for v in values)
                return gast.Tuple(elts=[self.returned_dict(v, stmt, keep_keys=False)
                                        if isinstance(v, LocalDict) else self.output_entries(
                                            self.runtime(v, stmt, True)) for v in values],
                                  ctx=gast.Load())
            entries = [self.runtime(v, e, True) for v, e in zip(values, stmt.value.elts)]
            return gast.Tuple(elts=[self.output_entries(e) for e in entries], ctx=gast.Load())
        value = self.expr(stmt.value)
        if self.called and isinstance(value, LocalDict):  # `return loss_grad(p, x)`
            return self.returned_dict(value, stmt)
        if self.called and isinstance(value, HeldTuple) and any(
                isinstance(p, HeldTuple) for p in value.parts):
            # `return helper(w)` of a helper returning dicts deeper inside its tuple
            returned, self.nested_dicts = self.returned_atom(value, stmt, stmt)
            return returned
        if self.called and isinstance(value, HeldTuple) and any(
                isinstance(p, LocalDict) for p in value.parts):
            # `return loss_fn(w)` of a function returning a tuple holding a dict: passed on
            self.tuple_dicts = tuple(tuple(p.entries) if isinstance(p, LocalDict) else None
                                     for p in value.parts)
            return gast.Tuple(elts=[self.returned_dict(p, stmt, keep_keys=False)
                                    if isinstance(p, LocalDict) else self.output_entries(
                                        self.runtime(p, stmt, True)) for p in value.parts],
                              ctx=gast.Load())
        return self.output_entries(self.runtime(value, stmt.value, True))

    def holds_dict(self, node):
        """Whether display `node` holds a string-keyed dict display, or a name bound to a
        dict built entry by entry, in it or in a display inside it."""
        if isinstance(node, (gast.Tuple, gast.List)):
            return any(self.holds_dict(e) for e in node.elts)
        return (_string_keyed(node) and bool(node.keys)) or (
            isinstance(node, gast.Name) and isinstance(self.env.get(node.id), LocalDict))

    def returned_tree(self, node, stmt):
        """A returned display holding dict displays below its first level (`return x, [y,
        {"k": z}]`), or a HeldTuple holding HeldTuples (a helper's such output): the nested
        tuple of its entries, each dict the tuple of its values, and the spec that rebuilds
        the dicts (codegen/dict_outputs.py)."""
        if isinstance(node, (gast.Tuple, gast.List)):
            return self.returned_parts([self.returned_tree(e, stmt) for e in node.elts])
        return self.returned_atom(self.returned_entry(node), node, stmt)

    def returned_atom(self, value, node, stmt):
        if isinstance(value, HeldTuple):
            return self.returned_parts([self.returned_atom(p, stmt, stmt) for p in value.parts])
        if isinstance(value, LocalDict):
            keys = list(value.entries)
            return self.returned_dict(value, stmt, keep_keys=False), \
                ["dict", keys, [None] * len(keys)]
        return self.output_entries(self.runtime(value, node, True)), None

    @staticmethod
    def returned_parts(parts):
        specs = [spec for _, spec in parts]
        return gast.Tuple(elts=[part for part, _ in parts], ctx=gast.Load()), \
            None if all(spec is None for spec in specs) else ["tuple", specs]

    def returned_entry(self, node):
        """An entry of a returned tuple display: a dict display with string keys is made a
        LocalDict (a function normalized for a call returns its entries' values)."""
        if self.called and _string_keyed(node) and node.keys:
            held = self.namer.temp("returned")
            self.local_dict(held, node)
            return self.env[held]
        return self.expr(node)

    def returned_dict(self, local_dict, stmt, keep_keys=True):
        """A dict a called function returns: the tuple of its entries' values, its keys kept
        in dict_keys for the caller (call_core) unless keep_keys=False (an entry of a returned
        tuple: tuple_dicts has them)."""
        values = []
        for key, local in local_dict.entries.items():
            value = self.expr(gast.copy_location(name(local), stmt))
            if isinstance(value, (LocalDict, TreeRef)):
                raise self.unsupported(f"the entry {key!r} of a returned dict holds a dict "
                                       "or a pytree argument: return arrays and numbers",
                                       stmt, "return the inner dict's entries themselves")
            values.append(self.output_entries(self.runtime(value, stmt, True)))
        if keep_keys:
            self.dict_keys = tuple(local_dict.entries)
        return gast.Tuple(elts=values, ctx=gast.Load())

    def call_core(self, callee, flat_args, target, base):
        """The call of a function of the user's normalized as `callee`; a dict it returns is
        read entry by entry (a LocalDict whose entries the call's tuple binds)."""
        value = gast.Call(func=name(callee.name), args=flat_args, keywords=[])
        prim = Prim("user", callee=callee, args=flat_args)
        if callee.tuple_dicts is not None or callee.nested_dicts is not None:
            return self.held_tuple(callee, value, prim, base)
        if callee.dict_keys is None:
            return self.emit(value, callee.return_type, prim, target, base)
        held = self.emit(value, callee.return_type, prim, None, base)
        made = LocalDict({}, target or base)
        types_ = callee.return_type.elts
        cores = []
        for key, typ in zip(callee.dict_keys, types_):
            local = made.local_name(key, self.taken_names)
            core = self.define(local, typ)
            self.types[core] = self.join(core, typ) if self.depth > 0 else typ
            cores.append(core)
        self.append(assign(cores, held), Prim("unpack", args=[held]))
        return made

    def held_tuple(self, callee, value, prim, base):
        """The call of a function returning a tuple that holds dicts (tuple_dicts, or
        nested_dicts deeper down): its entries bound to names, each dict's entries to a
        LocalDict's names; a HeldTuple (of HeldTuples where tuples hold dicts)."""
        held = self.emit(value, callee.return_type, prim, None, base)
        spec = callee.nested_dicts or ["tuple", [
            None if keys is None else ["dict", list(keys), [None] * len(keys)]
            for keys in callee.tuple_dicts]]
        return self.held_parts(held, callee.return_type, spec, base)

    def held_parts(self, held, typ, spec, base):
        """Name `held` (a tuple of type `typ` holding dicts where `spec` has them) unpacked:
        a HeldTuple of its entries, a dict's entries bound to a LocalDict's names."""
        types_ = typ.elts
        parts = [self.define(self.namer.temp(f"{base}_{k}"), t) for k, t in enumerate(types_)]
        for part, t in zip(parts, types_):
            self.types[part] = self.join(part, t) if self.depth > 0 else t
        self.append(assign(parts, held), Prim("unpack", args=[held]))
        out = []
        for part, inner, t in zip(parts, spec[1], types_):
            if inner is None:
                out.append(name(part))
            elif inner[0] == "tuple":
                out.append(self.held_parts(name(part), t, inner, base))
            else:
                made = LocalDict({}, base)
                cores = []
                for key, entry_type in zip(inner[1], t.elts):
                    core = self.define(made.local_name(key, self.taken_names), entry_type)
                    self.types[core] = self.join(core, entry_type) if self.depth > 0 \
                        else entry_type
                    cores.append(core)
                self.append(assign(cores, name(part)), Prim("unpack", args=[name(part)]))
                out.append(made)
        return HeldTuple(out)

    def output_entries(self, atom):
        """A returned value as the (nested) tuple of its entries: each entry of a display
        (`return [a, b]`) or of a tuple bound to a name (`t = (a, b); return t`, a helper's
        tuple) is its own output, with its own tangent, cotangent and Jacobian block."""
        if isinstance(atom, (gast.List, gast.Tuple)):
            return gast.Tuple(elts=[self.output_entries(e) for e in atom.elts], ctx=gast.Load())
        if not isinstance(atom, gast.Name):
            return atom
        typ = atom_type(atom, self.types)
        if typ.kind != "tuple" or not typ.elts:
            return atom
        display = self.bound_display(atom.id)
        if display is not None:  # `t = (a, b)` just before: its entries, with no unpacking
            entries = self.output_entries(display)
        else:
            out = [self.namer.temp("returned") for _ in typ.elts]
            for n, t in zip(out, typ.elts):
                self.types[n] = t
            self.append(assign(out, atom), Prim("unpack", args=[atom]))
            entries = gast.Tuple(elts=[self.output_entries(name(n)) for n in out],
                                 ctx=gast.Load())
        if typ.record is not None:
            entries.record = typ.record  # (a NamedTuple: the caller reads its fields)
        return entries

    def expr_Dict(self, node, target):
        """A dict display with string keys (``return loss, {"acc": acc}``, has_aux's aux
        output): a value passed on as it is, with no derivative."""
        if not node.keys or not all(isinstance(k, gast.Constant) and isinstance(k.value, str)
                                    for k in node.keys):
            raise self.unsupported("a dict display is supported with string keys only "
                                   "(an aux output)", node,
                                   "build dicts outside the function and pass them as pytree "
                                   "arguments")
        values = [self.runtime(self.expr(v), v) for v in node.values]
        out = self.define(target) if target is not None else self.namer.temp("returned")
        self.types[out] = T.DICT
        display = gast.Dict(keys=[gast.Constant(value=k.value, kind=None) for k in node.keys],
                            values=values)
        self.append(assign(out, display), Prim("nondiff", args=values))
        return name(out)

    # -- names
    def define(self, user_name, typ=None):
        """The core name for a new value of `user_name`: itself the first time, then versions.

        Inside if/for/while a name keeps one core name (overwritten), unless it was first
        bound in the same block and its new value (of type `typ`) has another shape: then it
        gets a new version, as the reverse sweep needs one shape per name (``y_bar =
        np.sum(..., keepdims=True)`` then ``y_bar = np.broadcast_to(y_bar, y.shape)`` in
        generated code differentiated again).
        """
        current = self.env.get(user_name)
        if self.depth > 0 and isinstance(current, str):
            if not (typ is not None and self.block_locals and
                    user_name in self.block_locals[-1] and
                    _shape_changes(self.types.get(current), typ)):
                return current  # overwritten
        if current is None and user_name not in self.types:
            core = user_name
            self.namer.reserve(core)
        else:
            core = self.namer.fresh(user_name)
        if user_name in self.program.synthetic_names:
            self.namer.temps.add(core)
        if self.depth > 0 and self.block_locals and current is None:
            self.block_locals[-1].add(user_name)
        self.env[user_name] = core
        return core

    def empty_block(self):
        """A `pass` standing for an empty block: a core statement that computes nothing."""
        stmt = gast.Pass()
        stmt.prim = Prim("nondiff")
        stmt.origin = self.origin
        stmt.info = self.info
        return gast.copy_location(stmt, self.origin)

    def append(self, stmt, prim):
        stmt.prim = prim
        stmt.origin = self.origin
        stmt.info = self.info
        gast.copy_location(stmt, self.origin)
        self.body.append(stmt)

    def emit(self, value, typ, prim, target, base):
        if prim.kind in ("tuple", "tuple_get"):
            self.refuse_nested_tuple_in_block(typ)
        out = self.define(target, typ) if target is not None else self.namer.temp(base)
        if target is not None and self.depth > 0 and out in names_in(value):
            # `y = f(y)` in a loop: compute into a temporary, then copy, so the reverse
            # sweep can restore y's old value between the two.
            tmp = self.emit(value, typ, prim, None, base)
            self.types[out] = self.join(out, typ)
            self.append(assign(out, tmp), Prim("copy", args=[tmp]))
            return name(out)
        self.types[out] = self.join(out, typ) if self.depth > 0 else typ
        if prim.call is not None:
            prim.call.out = out
        self.append(assign(out, value), prim)
        base = prim.args[0] if prim.args else None
        if prim.kind == "rule" and typ.kind == "float" and \
                prim.rule.name.split("@")[0] in _ZERO_DIM_RULES:
            self.zero_dim.add(out)
        elif self.depth == 0:  # (in a branch or loop it may still hold the other value)
            self.zero_dim.discard(out)
        if prim.kind == "rule" and typ.kind in ("array", "tuple") and \
                isinstance(base, gast.Name) and _makes_view(prim, self.types):
            self.body[-1].view_of = base.id  # (a tuple: np.split's pieces, read by index)
        return name(out)

    def runtime(self, atom, node, returned=False):
        if isinstance(atom, LocalDict):
            return self.dict_value(atom, node)
        if isinstance(atom, HeldTuple):
            return gast.Tuple(elts=[self.runtime(p, node, returned) for p in atom.parts],
                              ctx=gast.Load())
        if isinstance(atom, TreeRef):
            if returned:
                raise self.unsupported("returning a whole pytree argument is not supported",
                                       node, "return its leaves")
            raise self.unsupported(
                f"a pytree argument (a {atom.spec.kind} of arrays and numbers) cannot be used "
                "as one value here", node,
                "index its leaves (x[0], x['w']), or pass an array instead (np.asarray(x) "
                "before the call)")
        if isinstance(atom, Static):
            return self.static_to_atom(atom.value, node)
        return atom

    # -- expressions
    def expr(self, node, target=None):
        """Normalize `node`; returns an atom (Name/Constant/display), a TreeRef or a Static."""
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.unsupported(f"{_describe(node)} is not supported in differentiated code",
                                   node, _HINTS.get(type(node).__name__))
        result = method(node, target)
        if target is not None and isinstance(result, (gast.Name, gast.Constant, gast.UnaryOp)) \
                and not (isinstance(result, gast.Name) and result.id == self.env.get(target)):
            self.refuse_nested_tuple_in_block(atom_type(result, self.types))
            out = self.define(target, atom_type(result, self.types))
            self.types[out] = self.join(out, atom_type(result, self.types))
            self.append(assign(out, result), Prim("copy", args=[result]))
            if self.depth == 0:
                self.zero_dim.discard(out)
            if self.names_memory(result):
                self.body[-1].view_of = result.id  # `b = a` makes b another name of a
                if result.id in self.zero_dim:
                    self.zero_dim.add(out)
            return name(out)
        if target is not None and isinstance(result, (gast.Tuple, gast.List)):
            return self.bind_display(result, target)
        return result

    def bound_display(self, name_id):
        """The display `name_id` was last bound to by a statement of the function's top level
        (`t = (a, b)`), or None: bound otherwise, inside a loop or branch, or a name the
        display reads is bound again after it (a loop's `a = a * 2.0`: t keeps the old a)."""
        def stored(stmts, names):
            return any(isinstance(n, gast.Name) and n.id in names and
                       isinstance(n.ctx, gast.Store) for s in stmts for n in gast.walk(s))
        for k in range(len(self.body) - 1, -1, -1):
            stmt = self.body[k]
            if not stored([stmt], {name_id}):
                continue
            if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                    isinstance(stmt.targets[0], gast.Name) and \
                    isinstance(stmt.value, (gast.Tuple, gast.List)) and \
                    not stored(self.body[k + 1:], set(names_in(stmt.value))):
                return stmt.value
            return None
        return None

    def refuse_nested_tuple_in_block(self, typ):
        """A tuple holding a tuple with a derivative (`(a, (b, c))`) is supported outside
        loops and branches only: inside them its derivative is not carried (it was dropped)."""
        if self.depth == 0 or not T.holds_differentiated_tuple(typ):
            return
        raise self.unsupported(
            "a tuple holding a tuple of differentiated values is not supported inside a loop "
            "or a branch", getattr(self, "current", None) or self.origin,
            "keep such tuples flat there: unpack the inner tuple into names (`a, (b, c)` -> "
            "`a, b, c`), or build the nested tuple after the loop")

    def bind_display(self, display, target=None):
        """`t = (a, b)`: the display bound to a name (`target`'s, or a temporary)."""
        typ = atom_type(display, self.types)
        kind = "tuple" if any(T.carries_derivative(t) for t in typ.elts) else "nondiff"
        return self.emit(display, typ, Prim(kind, args=list(display.elts)), target, "tup")

    def display_elements(self, node):
        """The atoms of a tuple or fixed list display's elements; an element that is itself a
        display (`(a, (b, c))`) is bound to a name first, so it has a derivative of its own."""
        atoms = [self.atom(e) for e in node.elts]
        return [self.bind_display(a) if isinstance(a, (gast.Tuple, gast.List)) else a
                for a in atoms]

    def atom(self, node):
        result = self.expr(node)
        return self.runtime(result, node)

    def expr_Constant(self, node, target):
        if isinstance(node.value, complex):  # (typed as floats, they gave wrong derivatives)
            raise self.unsupported(
                "complex numbers are not supported", node,
                "keep the real and imaginary parts as two real arrays (np.exp(1j * x) is "
                "np.cos(x) + 1j * np.sin(x): work with np.cos(x) and np.sin(x))")
        return _keep_mark(gast.Constant(value=node.value, kind=None), node)

    def expr_Name(self, node, target):
        if node.id in self.env:
            bound = self.env[node.id]
            return bound if isinstance(bound, (TreeRef, Static, LocalDict, HeldTuple)) \
                else name(bound)
        try:
            value = self.info.lookup(node.id)
        except KeyError:
            raise self.unsupported(f"name {node.id!r} is not defined", node,
                                   "define it before the function, or pass it as an argument") \
                from None
        return self.static(value, node, node.id)

    def static(self, value, node, preferred):
        """A compile-time value: constants become atoms, arrays become module data."""
        if isinstance(value, (bool, int, float, str)) or value is None:
            return gast.Constant(value=value, kind=None)
        if isinstance(value, (np.floating, np.integer, np.bool_)):
            return gast.Constant(value=value.item(), kind=None)
        if isinstance(value, np.ndarray):
            is_global = preferred is not None and preferred not in self.info.closure and \
                self.info.globals.get(preferred) is value
            module = self.info.globals.get("__name__") if is_global else None
            emitted = self.program.data_name(value, preferred or "data", module)
            self.types[emitted] = T.abstract_of(value)
            return name(emitted)
        return Static(value)

    def static_to_atom(self, value, node):
        if isinstance(value, tuple) and all(
                isinstance(v, (int, float, np.integer, np.floating)) and
                not isinstance(v, (bool, np.bool_)) for v in value):
            # a static tuple of numbers (jit's static shape argument): its display
            return gast.Tuple(elts=[self.static(v, node, None) for v in value], ctx=gast.Load())
        atom = self.static(value, node, None)
        if isinstance(atom, Static):
            raise self.unsupported(f"{type(value).__name__} values cannot be used here", node)
        return atom

    def expr_Attribute(self, node, target):
        base = self.expr(node.value)
        if isinstance(base, LocalDict):
            raise self.unsupported(f"{unparse(node)}: a dict built in the function has no "
                                   "methods here (its keys are known where the code is "
                                   "generated)", node, "read each entry with its key, "
                                   "d['name'], or loop over a tuple of the keys")
        if isinstance(base, Static):
            try:
                value = getattr(base.value, node.attr)
            except AttributeError:
                raise self.unsupported(f"{unparse(node)} does not exist", node) from None
            preferred = node.attr if isinstance(value, np.ndarray) else None
            return self.static(value, node, preferred)
        if isinstance(base, TreeRef):
            return self.tree_child(base, node.attr, node)
        typ = atom_type(base, self.types)
        if typ.kind == "tuple" and typ.record is not None:
            return self.namedtuple_field(base, typ, node, target)
        if node.attr == "T":
            return self.apply_rule(rules.by_name("T"), {"x": base}, node, target,
                                   value=gast.Attribute(value=base, attr="T", ctx=gast.Load()))
        if node.attr in ("shape", "size", "ndim", "dtype"):
            if node.attr == "ndim" and typ.ndim is not None:
                return gast.Constant(value=typ.ndim, kind=None)
            if node.attr == "shape":
                # a size-one axis stays known: np.broadcast_to(g, x.shape) must type as x
                out = T.AType("tuple", elts=tuple(T.const(1) if d == 1 else T.INT
                                                  for d in (typ.dims or ()))) \
                    if typ.ndim is not None else T.AType("tuple")
            else:
                out = T.INT if node.attr != "dtype" else T.AType("object")
            value = gast.Attribute(value=base, attr=node.attr, ctx=gast.Load())
            return self.emit(value, out, Prim("nondiff", args=[base]), target, node.attr)
        if node.attr == "real" and typ.is_float:
            return base
        if typ.kind == "tuple":
            raise self.unsupported(
                f"{unparse(node)}: {unparse(node.value)} is a plain tuple here, which has no "
                f"attribute .{node.attr}", node,
                "index it (t[0]); a NamedTuple built in the function keeps its fields where "
                "every value the name may hold is built from the same class")
        raise self.unsupported(f"the attribute .{node.attr} is not supported", node)

    def tree_child(self, ref, key, node):
        try:
            spec = ref.spec.child(key)
        except KeyError:
            raise self.unsupported(f"the argument has no entry {key!r}", node) from None
        if isinstance(key, int) and ref.spec.fields:
            key = ref.spec.children[key][0]
        flat = sanitize(f"{ref.base}_{key}")
        if isinstance(spec, TreeSpec):
            return TreeRef(spec, flat)
        if isinstance(spec, Static):
            return self.static(spec.value, node, None)
        return name(flat)

    def expr_Subscript(self, node, target):
        base = self.expr(node.value)
        if isinstance(base, LocalDict):
            return self.dict_read(base, node)
        if isinstance(base, HeldTuple):
            key = self.expr(node.slice)
            if not (isinstance(key, gast.Constant) and isinstance(key.value, int) and
                    -len(base.parts) <= key.value < len(base.parts)):
                raise self.unsupported(f"{unparse(node.value)} is a tuple of "
                                       f"{len(base.parts)} entries: index it with a constant "
                                       "in range", node)
            return base.parts[key.value]
        if isinstance(base, (TreeRef, Static)):
            key = self.expr(node.slice)
            if isinstance(key, Static) and isinstance(key.value, (str, int)):
                key = gast.Constant(value=key.value, kind=None)  # a loop's constant key
            if not isinstance(key, gast.Constant):
                raise self.unsupported("pytree entries must be selected with a constant key",
                                       node, "write params['W'], not params[name]")
            if isinstance(base, TreeRef):
                return self.tree_child(base, key.value, node)
            try:
                value = base.value[key.value]
            except (KeyError, IndexError, TypeError):
                raise self.unsupported(f"{unparse(node)} cannot be evaluated", node) from None
            return self.static(value, node, sanitize(f"{unparse(node.value)}_{key.value}"))
        index = self.index(node.slice)
        typ = atom_type(base, self.types)
        if isinstance(index, gast.Constant) and isinstance(index.value, str) and \
                typ.kind in ("array", "float", "int", "bool"):
            # (a dict argument given an array's signature: the command line cannot type one)
            raise self.unsupported(
                f"{unparse(node.value)} is {T.describe(typ)} here, which cannot be indexed by "
                f"the string {index.value!r}", node,
                "a dict argument is typed from the value passed: call grad(...) from Python "
                "with the dict (autodiff-ast's --signature describes arrays and numbers only), "
                "or pass its entries as separate arguments")
        if isinstance(base, (gast.Tuple, gast.List)) and isinstance(index, gast.Constant) and \
                isinstance(index.value, int) and -len(base.elts) <= index.value < len(base.elts):
            return base.elts[index.value]  # `(a, b)[1]` is b
        if typ.kind == "tuple":
            if isinstance(index, gast.Constant) and typ.elts is not None:
                if not isinstance(index.value, int) or \
                        not -len(typ.elts) <= index.value < len(typ.elts):
                    raise self.unsupported(
                        f"{unparse(node)} is out of range: {unparse(node.value)} has "
                        f"{len(typ.elts)} entries", node,
                        "check the index (a number's .shape is the empty tuple)")
            return self.tuple_item(base, typ, index, target)
        if typ == T.DICT:
            raise self.unsupported("reading a dict returned by a call is not supported (a "
                                   "dict made where it is read, d = {...}, is)", node,
                                   "return the values themselves, or build the dict here")
        if typ.kind == "list" and isinstance(index, (gast.Slice, gast.Tuple)):
            shown = unparse(node.value)
            raise self.unsupported(
                f"slicing the list {shown} ({unparse(node)}) is not supported: a list's "
                "entries are read one index at a time", node,
                f"make it an array first (np.stack({shown})[...], np.array({shown})[...]), or "
                f"loop over the indices you want (for i in range(1, len({shown})): "
                f"{shown}[i])")
        out = _element_type(typ) if typ.kind == "list" else index_type(typ, index, self.types)
        value = gast.Subscript(value=base, slice=index, ctx=gast.Load())
        call = PrimCall(rules.by_name("getitem"), {"x": base, "index": index},
                        {"x": typ, "index": atom_type(index, self.types)}, None, out)
        return self.emit(value, out, Prim("rule", rules.by_name("getitem"), call,
                                          args=[base]), target, "item")

    def tuple_item(self, base, typ, index, target):
        """`t[k]` of a name holding a tuple: the entry, bound to `target` or a temporary."""
        if isinstance(index, gast.Constant) and typ.elts is not None:
            out = typ.elts[index.value]
        else:
            out = T.UNKNOWN
        value = gast.Subscript(value=base, slice=index, ctx=gast.Load())
        kind = "tuple_get" if out.is_float or T.carries_derivative(out) else "nondiff"
        return self.emit(value, out, Prim(kind, args=[base], rule=index), target, "item")

    def namedtuple_field(self, base, typ, node, target):
        """`p.a` of a NamedTuple built in the function (a tuple in generated code): its
        entry by the field's position."""
        cls = typ.record
        if node.attr in cls._fields and typ.elts is not None:
            index = gast.Constant(value=cls._fields.index(node.attr), kind=None)
            return self.tuple_item(base, typ, index, target)
        if node.attr.startswith("_") and hasattr(cls, node.attr):
            raise self.unsupported(
                f"{unparse(node)}: {cls.__name__}'s {node.attr} is not supported on a "
                "NamedTuple built in the function (it is a plain tuple in the generated code)",
                node, f"build a new value instead: {cls.__name__}(...) with the fields you "
                "want (p._replace(a=v) is P(v, p.b))")
        raise self.unsupported(f"{unparse(node)}: {cls.__name__} has no field {node.attr!r} "
                               f"(its fields: {', '.join(cls._fields)})", node)

    def build_namedtuple(self, cls, node, target):
        """`P(a, b)`, `P(a=u, b=v)` of a NamedTuple class: a tuple of its fields in order
        (defaults filled in), typed as `cls` so that `p.a` reads its entry. The function's
        results rebuild the class (autodiff_ast/output_lists.py)."""
        fields = cls._fields
        defaults = getattr(cls, "_field_defaults", {})
        given, problem = bind_namedtuple_fields(cls, node.args,
                                                [(kw.arg, kw.value) for kw in node.keywords])
        if problem is not None:
            raise self.unsupported(problem, node)
        given = {key: self.atom(value) for key, value in given.items()}  # (Python's order)
        elts = []
        for key in fields:
            if key in given:
                atom = given[key]
            elif key in defaults:
                atom = self.static(defaults[key], node, sanitize(f"{cls.__name__}_{key}"))
                if isinstance(atom, Static):
                    raise self.unsupported(
                        f"the default of {cls.__name__}.{key} "
                        f"({type(defaults[key]).__name__}) cannot be used in transformed "
                        "code", node, f"pass {key}= explicitly")
            else:
                raise self.unsupported(f"{cls.__name__}(...) is missing the field {key!r}",
                                       node, f"pass every field: {cls.__name__}("
                                       f"{', '.join(fields)})")
            elts.append(self.bind_display(atom) if isinstance(atom, (gast.Tuple, gast.List))
                        else atom)
        display = gast.Tuple(elts=elts, ctx=gast.Load())
        typ = replace(atom_type(display, self.types), record=cls)
        kind = "tuple" if any(T.carries_derivative(t) for t in typ.elts) else "nondiff"
        return self.emit(display, typ, Prim(kind, args=list(elts)), target,
                         sanitize(cls.__name__.lower()))

    def index(self, node):
        if isinstance(node, gast.Slice):
            return gast.Slice(lower=self.opt_atom(node.lower), upper=self.opt_atom(node.upper),
                              step=self.opt_atom(node.step))
        if isinstance(node, gast.Tuple):
            return gast.Tuple(elts=[self.index(e) for e in node.elts], ctx=gast.Load())
        return self.atom(node)

    def opt_atom(self, node):
        return None if node is None else self.atom(node)

    def expr_BinOp(self, node, target):
        left, right = self.atom(node.left), self.atom(node.right)
        if type(node.op) in _BITWISE:
            return self.bitwise(node, left, right, target)
        rule = rules.by_name(BINOPS[type(node.op)])
        value = gast.BinOp(left=left, op=node.op, right=right)
        return self.apply_rule(rule, {"a": left, "b": right}, node, target, value=value)

    def bitwise(self, node, left, right, target):
        """``a & b``, ``a | b``, ``a ^ b``, ``a << b``, ``a >> b`` of booleans or integers
        (masks, flags, bit tricks): no derivative, computed as written."""
        symbol, compute = _BITWISE[type(node.op)]
        if _plain_constant(left) and _plain_constant(right):
            return gast.Constant(value=compute(left.value, right.value), kind=None)
        types_ = [atom_type(a, self.types) for a in (left, right)]
        if any(t.kind == "float" or t.kind == "array" and t.dtype not in (
                None, "bool", "int64", "int32") for t in types_):
            raise self.unsupported(f"the operator {symbol} takes booleans or integers", node,
                                   "compare first: (x > 0.0) & (x < 1.0)")
        typ = T.broadcast(*types_)
        dtype = "bool" if all(t.dtype == "bool" or t.kind == "bool" for t in types_) \
            else "int64"
        typ = T.array(typ.dims, dtype) if typ.kind == "array" else \
            (T.BOOL if dtype == "bool" else T.INT)
        value = gast.BinOp(left=left, op=node.op, right=right)
        return self.emit(value, typ, Prim("nondiff"), target, "bits")

    def expr_UnaryOp(self, node, target):
        operand = self.atom(node.operand)
        if isinstance(node.op, gast.UAdd):
            if atom_type(operand, self.types).kind != "array":
                return operand
            # `+a` of an array is a new array (np.positive), not a second name for a: writing
            # into either in place later leaves the other as it was
            value = gast.UnaryOp(op=gast.UAdd(), operand=operand)
            return self.apply_rule(rules.by_name("positive"), {"x": operand}, node, target,
                                   value=value)
        if isinstance(node.op, gast.USub):
            if isinstance(operand, gast.Constant) and isinstance(operand.value, (int, float)):
                return _keep_mark(gast.Constant(value=-operand.value, kind=None), operand)
            value = gast.UnaryOp(op=gast.USub(), operand=operand)
            return self.apply_rule(rules.by_name("negative"), {"x": operand}, node, target,
                                   value=value)
        if isinstance(node.op, gast.Not) and _plain_constant(operand):
            return gast.Constant(value=not operand.value, kind=None)
        value = gast.UnaryOp(op=node.op, operand=operand)
        typ = T.BOOL if isinstance(node.op, gast.Not) else atom_type(operand, self.types)
        return self.emit(value, typ, Prim("nondiff", args=[operand]), target, "flag")

    def expr_Compare(self, node, target):
        left = self.atom(node.left)
        parts = []
        for op, comparator in zip(node.ops, node.comparators):
            right = self.atom(comparator)
            parts.append(gast.Compare(left=left, ops=[op], comparators=[right]))
            left = right
        if all(_plain_constant(a) for p in parts for a in (p.left, p.comparators[0])) and \
                all(type(p.ops[0]) in _COMPARE for p in parts):
            # `x.ndim == 2`: decided where the code is generated (a static branch)
            return gast.Constant(value=all(_COMPARE[type(p.ops[0])](
                p.left.value, p.comparators[0].value) for p in parts), kind=None)
        identities = [_none_identity(p, self.types) for p in parts]
        if all(v is not None for v in identities):
            # `b is not None` of a parameter defaulting to None (`def dense(x, W, b=None)`):
            # whether a value is None is its type, so the branch is picked here
            return gast.Constant(value=all(identities), kind=None)
        value = parts[0] if len(parts) == 1 else gast.BoolOp(op=gast.And(), values=parts)
        types_ = [atom_type(a, self.types) for p in parts for a in (p.left, p.comparators[0])]
        typ = T.broadcast(*types_)
        typ = T.array(typ.dims, "bool") if typ.kind == "array" else T.BOOL
        return self.emit(value, typ, Prim("nondiff"), target, "cond")

    def expr_BoolOp(self, node, target):
        values = [self.atom(v) for v in node.values]
        if all(_plain_constant(v) for v in values):
            last = values[-1]
            for v in values[:-1]:  # Python's value of `a and b` / `a or b`
                if bool(v.value) != isinstance(node.op, gast.And):
                    return v
            return last
        return self.emit(gast.BoolOp(op=node.op, values=values), T.BOOL, Prim("nondiff"),
                         target, "cond")

    def expr_Tuple(self, node, target):
        return gast.Tuple(elts=self.display_elements(node), ctx=gast.Load())

    def expr_List(self, node, target):
        if target is not None and (not node.elts or target in self.mutable_lists()):
            # `xs = []`; or `xs = [a, b]` later indexed by a variable, written into, appended
            # to or popped from: a list built with append (a fixed tuple otherwise)
            atoms = [self.atom(e) for e in node.elts]
            out = self.define(target)
            self.types[out] = T.AType("list", elts=())
            self.append(assign(out, gast.List(elts=[], ctx=gast.Load())), Prim("list_new"))
            for atom in atoms:
                self.append_atom(out, atom, node)
            return name(out)
        return gast.List(elts=self.display_elements(node), ctx=gast.Load())

    def expr_ListComp(self, node, target):
        return lower_comprehension(self, node, target)

    def mutable_lists(self):
        """User names the function indexes with a non-constant, writes an element of, or
        appends to or pops from: a list display assigned to one is built as a list."""
        if getattr(self, "_mutable_lists", None) is None:
            names = set()
            for n in gast.walk(self.info.node):
                if isinstance(n, gast.Subscript) and isinstance(n.value, gast.Name) and (
                        isinstance(n.ctx, gast.Store) or not isinstance(
                            n.slice, (gast.Constant, gast.Slice, gast.Tuple))):
                    names.add(n.value.id)
                elif isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Subscript) \
                        and isinstance(n.target.value, gast.Name):
                    names.add(n.target.value.id)
                elif isinstance(n, gast.Call) and isinstance(n.func, gast.Attribute) and \
                        n.func.attr in ("append", "pop") and isinstance(n.func.value, gast.Name):
                    names.add(n.func.value.id)
            self._mutable_lists = names
        return self._mutable_lists

    # -- calls
    def checkpointed_callee(self, call):
        """``checkpoint(helper)`` called where it is written: the marked helper (as a Static),
        or None when `call` is not a call of checkpoint."""
        from .checkpointing import checkpoint
        try:
            maker = self.expr(call.func)
        except UnsupportedSyntaxError:
            return None
        if not (isinstance(maker, Static) and maker.value is checkpoint):
            return None
        if len(call.args) != 1 or call.keywords:
            raise self.unsupported("checkpoint takes one function", call)
        fn = self.expr(call.args[0])
        if not (isinstance(fn, Static) and inspect.isfunction(fn.value)):
            raise self.unsupported("checkpoint(f)(...) inline takes a function defined at "
                                   "module level", call, "define the helper at module level, "
                                   "or decorate it with @checkpoint")
        return Static(checkpoint(fn.value))

    def expr_Call(self, node, target):
        if any(isinstance(a, gast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            raise self.unsupported("calls with *args or **kwargs splats are not supported", node,
                                   "pass the arguments one by one")
        for arg in node.args:  # report the comprehension, not the function it is passed to
            if isinstance(arg, (gast.SetComp, gast.DictComp)):
                raise self.unsupported(f"{_describe(arg)} is not supported in differentiated "
                                       "code", arg, _HINTS.get(type(arg).__name__))
        func = node.func
        receiver = None
        if isinstance(func, gast.Attribute):
            base = self.expr(func.value)
            if isinstance(base, (Static, TreeRef)):
                callee = self.expr(func)
            else:
                receiver, callee = base, None
        elif isinstance(func, gast.Call) and isinstance(func.func, (gast.Name, gast.Attribute)) \
                and (marked := self.checkpointed_callee(func)):
            callee = marked  # checkpoint(helper)(x), written inline as in JAX
        else:
            callee = self.expr(func)
        if receiver is not None:
            return self.method_call(receiver, func.attr, node, target)
        if not isinstance(callee, Static):
            raise self.unsupported(f"cannot call {unparse(func)}", node)
        fn = callee.value
        if (value := self.constant_call(fn, node)) is not None:
            return value  # `k.startswith("W")` of a dict key: decided here
        if is_namedtuple_class(fn):
            return self.build_namedtuple(fn, node, target)
        if isinstance(getattr(fn, "__self__", None), type) and \
                is_namedtuple_class(fn.__self__):  # P._make(values)
            cls = fn.__self__.__name__
            raise self.unsupported(f"{cls}.{fn.__name__}(...) is not supported in transformed "
                                   "code", node, f"call {cls}(...) with the fields instead")
        if any(fn is maker for maker in _NAMEDTUPLE_MAKERS):
            raise self.unsupported("defining a NamedTuple class inside transformed code is not "
                                   "supported", node, "define the class at module level; "
                                   "building one of its values inside the function is "
                                   "supported")
        from .custom import route  # custom_jvp/custom_vjp, registered rules, jvp(...) calls
        routed = route(self, fn, node, target)
        if routed is not None:
            return routed
        if fn in FOLDS:  # sum(xs), max(v for v in xs), min(a, b, c)
            folded = fold_builtin(self, fn, node, target)
            if folded is not None:
                return folded
        elif fn in MAKERS and len(node.args) == 1 and not node.keywords and isinstance(
                node.args[0], (gast.GeneratorExp, gast.ListComp)):
            return lower_comprehension(self, node.args[0], target)
        elif fn in MAKERS and len(node.args) == 1 and not node.keywords and isinstance(
                node.args[0], (gast.List, gast.Tuple)):
            # tuple([a, b]), list((a, b)): the display they make
            kind = gast.Tuple if fn is tuple else gast.List
            display = gast.copy_location(kind(elts=node.args[0].elts, ctx=gast.Load()), node)
            return self.expr(display, target)
        elif fn is tuple and len(node.args) == 1 and not node.keywords and isinstance(
                node.args[0], gast.Name) and self.fixed_tuple(node.args[0]):
            return self.expr(node.args[0], target)  # tuple(t) of a tuple: t
        elif fn is list and len(node.args) == 1 and not node.keywords:
            # list(zip(a, b)), list(enumerate(x)), list(range(n)), list(xs): the comprehension
            # [v for v in ...] it stands for (zip and enumerate give tuples)
            return lower_comprehension(self, comprehension_of(self, node.args[0]), target)
        elif fn is isinstance and len(node.args) == 2 and not node.keywords and \
                (decided := self.is_array_test(node)) is not None:
            return Static(decided)  # a branch on it is decided here
        elif fn in (any, all) and len(node.args) == 1 and not node.keywords:
            # any(v > 0 for v in x): the list of truths, then np.any / np.all of it
            arg = node.args[0]
            items = lower_comprehension(self, arg) if isinstance(
                arg, (gast.GeneratorExp, gast.ListComp)) else self.atom(arg)
            rule = rules.lookup(np.any if fn is any else np.all)
            return self.call_rule(rule, [], [], node, target, first=items)
        elif any(isinstance(a, gast.GeneratorExp) for a in node.args):
            raise self.unsupported("a generator expression is supported only as what sum(), "
                                   "max(), min(), any(), all(), list() or tuple() takes", node,
                                   "build a list instead: [... for ...]")
        rule = rules.lookup(fn) or rules.helper_rule(fn)
        if rule is not None and rule.name in PER_LEAF and \
                (spread := spread_collective(self, node)) is not None:
            return self.spread_display(spread, target, rule.name)  # psum((a, b), 'i')
        if rule is not None:
            return self.call_rule(rule, node.args, node.keywords, node, target)
        if isinstance(fn, LocalFunction):
            return self.call_local(fn, node, target)
        from .api import _Transformed
        if isinstance(fn, _Transformed):
            return self.call_transformed(fn, node, target)
        if isinstance(fn, BoundTransform):  # grad(lambda q: loss(q, x))(p)
            return self.call_transformed(fn.transform, node, target, extra=fn.free)
        if (getattr(fn, "__module__", None) or "").startswith((
                "autodiff_ast.api", "autodiff_ast.batching", "autodiff_ast.pmap")) and \
                callable(fn):
            # grad(f), vmap(f, ...) written inside the function: built once, now.
            # (options written as displays, `in_axes=({"w": None}, 0)`, are read as written)
            args = [_display_value(a) or self.expr(a) for a in node.args]
            kwargs = {k.arg: _display_value(k.value) or self.expr(k.value)
                      for k in node.keywords}
            if args and isinstance(args[0], Static) and \
                    isinstance(args[0].value, LocalFunction):
                return self.transform_of_local(fn, args, kwargs, node)
            values = [_static_value(a) for a in args] + [_static_value(v) for v in
                                                         kwargs.values()]
            if all(v is not _NOT_STATIC for v in values):
                return Static(fn(*values[:len(args)], **dict(zip(kwargs, values[len(args):]))))
            if fn.__name__ in _TRANSFORM_MAKERS:
                raise self.unsupported(
                    f"the options of {fn.__name__}(...) written inside transformed code must "
                    "be known when the code is generated (constants, or names bound to "
                    "constants outside the function)", node,
                    f"write {fn.__name__}'s options as constants: in_axes=(None, 0), "
                    "argnums=(0, 1)")
        if inspect.isfunction(fn) or inspect.ismethod(fn):
            return self.call_user(fn, node, target)
        error = self.info.error(
            MissingRuleError, f"{_callable_name(fn)} has no derivative rule", node,
            "write it with supported NumPy functions, or register a rule for it "
            "(see docs/adding-a-rule.md)")
        return self.opaque_call(fn, node, target, error)

    def is_array_test(self, node):
        """``isinstance(x, np.ndarray)`` decided from x's type (an array, or a number: NumPy's
        scalars are no ndarray), or None: another class, or a value of unknown kind."""
        if not isinstance(node.args[0], gast.Name) or not isinstance(
                node.args[1], (gast.Name, gast.Attribute)):
            return None  # (names only: reading them writes no statements)
        classes = self.expr(node.args[1])
        if not isinstance(classes, Static) or classes.value is not np.ndarray:
            return None
        value = self.expr(node.args[0])
        if not isinstance(value, gast.Name):
            return None
        kind = atom_type(value, self.types).kind
        return True if kind == "array" else False if kind in ("float", "int", "bool") else None

    def spread_display(self, display, target, base):
        """A display of calls made in place of one call (a collective of a pytree): a dict
        display becomes a LocalDict (read entry by entry), a tuple or list a display."""
        if isinstance(display, gast.Dict):
            held = target or self.namer.temp(base)
            self.local_dict(held, display)
            return self.env[held]
        return self.expr(display, target)

    def fixed_tuple(self, node):
        """Whether the name `node` holds a tuple of known length (a display bound to it,
        unpacked, returned by a helper)."""
        bound = self.env.get(node.id)
        return isinstance(bound, str) and self.types.get(bound, T.UNKNOWN).kind == "tuple" and \
            self.types[bound].elts is not None

    def opaque_call(self, fn, node, target, error):
        """A call with no rule: fine while no derivative flows through it (math.lgamma of a
        constant, say); the transformations raise `error` if one must."""
        func = self.emittable(fn)
        if func is None:
            raise error
        if node.keywords:
            raise error
        args = [self.atom(a) for a in node.args]
        arg_types = [atom_type(a, self.types) for a in args]
        module = getattr(fn, "__module__", "") or ""
        if module == "math" or fn in vars(math).values():
            typ = T.INT if fn.__name__ in ("floor", "ceil", "trunc", "factorial", "comb",
                                           "perm", "gcd", "isqrt") else T.FLOAT
        elif arg_types and all(t.kind in ("float", "int") for t in arg_types):
            typ = T.FLOAT
        else:
            typ = T.broadcast(*arg_types) if arg_types else T.UNKNOWN
        value = gast.Call(func=func, args=args, keywords=[])
        prim = Prim("opaque", args=args)
        prim.error = error
        return self.emit(value, typ, prim, target, getattr(fn, "__name__", "value"))

    def emittable(self, fn):
        """How generated code names `fn`: math.x, np.x, or an import of module data."""
        name_ = getattr(fn, "__name__", None)
        module = getattr(fn, "__module__", None) or ""
        if name_ is None:
            return None
        if (module == "math" or fn in vars(math).values()) and getattr(math, name_, None) is fn:
            return fill(f"math.{name_}")
        if vars(np).get(name_) is fn:  # (not getattr: np.object warns)
            return fill(f"np.{name_}")
        imported = sys.modules.get(module)
        if imported is not None and getattr(imported, name_, None) is fn and \
                module not in ("__main__", "builtins"):
            emitted = self.program.data_name(fn, name_, module)
            return name(emitted)
        return None

    def constant_call(self, method, node):
        """A method of a constant (a dict key, a static string) called with constants:
        its result, as a constant of the generated code (Static); None for any other call,
        or when an argument is not a constant."""
        if not isinstance(getattr(method, "__self__", None), (str, int, float)):
            return None
        values = []
        for a in node.args:
            atom = self.expr(a)
            if not isinstance(atom, (Static, gast.Constant)):
                return None
            values.append(atom.value)
        options = {}
        for kw in node.keywords:
            atom = self.expr(kw.value)
            if not isinstance(atom, (Static, gast.Constant)):
                return None
            options[kw.arg] = atom.value
        try:
            result = method(*values, **options)
        except Exception as exc:  # noqa: BLE001 - Python's own error, at the user's line
            raise self.unsupported(f"{unparse(node.func)}(...) raised {type(exc).__name__}: "
                                   f"{exc}", node) from None
        return Static(result)

    def method_call(self, receiver, attr, node, target):
        cls = atom_type(receiver, self.types).record
        if cls is not None:  # p._replace(a=v) of a NamedTuple built in the function
            hint = {"_replace": f"build a new value: {cls.__name__}(...) with every field "
                                f"(p._replace({cls._fields[0]}=v) is {cls.__name__}("
                                f"{', '.join(['v'] + ['p.' + f for f in cls._fields[1:]])}))",
                    "_asdict": "build the dict yourself: {" + ", ".join(
                        f'"{f}": p.{f}' for f in cls._fields) + "}"}.get(
                attr, "read its fields (p.name, p[0]) and compute with them")
            raise self.unsupported(f"{unparse(node.func)}(...): the methods of a NamedTuple "
                                   f"({cls.__name__}) built in the function are not "
                                   "supported (it is a plain tuple in the generated code)",
                                   node, hint)
        if attr == "pop" and atom_type(receiver, self.types).kind == "list":
            return self.list_pop(node, target, receiver)
        if attr == "astype":
            rule = rules.by_name("astype")
            dtype = self.expr(node.args[0]) if node.args else None
            value = gast.Call(func=gast.Attribute(value=receiver, attr="astype", ctx=gast.Load()),
                              args=[_dtype_atom(dtype, node.args[0], self)], keywords=[])
            return self.apply_rule(rule, {"x": receiver, "dtype": value.args[0]}, node, target,
                                   value=value)
        if attr == "copy" and not node.args:
            return self.call_rule(rules.lookup(np.copy), [], [], node, target,
                                  first=receiver)
        fn = METHODS.get(attr)
        if fn is None:
            raise self.info.error(MissingRuleError, f"the method .{attr}() has no derivative "
                                  "rule", node, "call the NumPy function instead")
        args = list(node.args)
        if attr in VARARG_METHODS and len(args) > 1:
            args = [gast.Tuple(elts=args, ctx=gast.Load())]
        return self.call_rule(rules.lookup(fn), args, node.keywords, node, target,
                              first=receiver)

    def call_rule(self, rule, args, keywords, node, target, first=None):
        if rule.name == "diff" and first is None and any(
                kw.arg in ("prepend", "append") for kw in keywords):
            return self.diff_with_ends(rule, args, keywords, node, target)
        if rule.name in ("sum", "prod") and any(kw.arg == "where" for kw in keywords):
            return self.reduce_where(rule, args, keywords, node, target, first)
        if rule.name == "trace" and first is None and args:  # (its rank decides: below)
            return self.call_rule(rule, args[1:], keywords, node, target,
                                  first=self.atom(args[0]))
        if rule.name == "trace" and (args or keywords or (
                atom_type(first, self.types).ndim or 0) > 2):
            return self.trace_along(args, keywords, node, target, first)
        bound, kws = {}, []
        params = list(rule.params)
        atoms = [first] if first is not None else []
        if rule.name in ("array", "stack") and args and isinstance(
                args[0], (gast.ListComp, gast.List, gast.Tuple)) and has_rows(args[0]):
            args = [rows_made_arrays(self, args[0])] + list(args[1:])  # rows of a matrix
            if rule.name == "array" and not isinstance(args[0], gast.ListComp) and \
                    len(args) == 1 and not keywords:
                rule = rules.by_name("stack")  # the same rows, stacked
                params = list(rule.params)
        atoms += [self.expr(a) for a in args]
        atoms = [self.static_to_atom(a.value, node) if isinstance(a, Static) and
                 isinstance(a.value, (tuple,)) else _int_tuple_display(a) or a for a in atoms]
        if rule.name == "len" and len(atoms) == 1 and isinstance(atoms[0], LocalDict):
            return gast.Constant(value=len(atoms[0].entries), kind=None)  # its keys are known
        if rule.name == "len" and len(atoms) == 1 and isinstance(atoms[0], Static) and \
                isinstance(atoms[0].value, str):
            return gast.Constant(value=len(atoms[0].value), kind=None)  # a key's length
        for a, src in zip(atoms, ([None] if first is not None else []) + list(args)):
            if isinstance(a, LocalDict):
                raise self.unsupported("a dict built in the function cannot be passed to "
                                       f"{rule.emit or rule.name}", src or node,
                                       "pass its entries, d['name']")
            if isinstance(a, TreeRef) or isinstance(a, Static) and not _is_dtype(a) and \
                    not _constant_value(a.value):  # (a static argument under jit: a constant)
                raise self.unsupported("a pytree or Python object cannot be passed to "
                                       f"{rule.emit or rule.name}", src or node,
                                       "pass one of its leaves (x[0], x['w']), or an array "
                                       "(np.asarray(x) before the call)")
        if rule.name in ("array", "stack") and atoms and isinstance(atoms[0], gast.Name) and \
                self.types.get(atoms[0].id, T.UNKNOWN).kind == "list" and \
                _element_type(self.types[atoms[0].id]).kind == "list":
            raise self.unsupported(f"np.{rule.name} of a list of lists is not supported", node,
                                   "make each row an array as you build the list: "
                                   "rows.append(np.array(row))")
        if rule.name == "vstack" and len(atoms) == 1 and self.is_list_of(atoms[0], 1):
            rule = rules.by_name("array")  # np.vstack(rows) of vectors: np.array(rows)
            params = list(rule.params)
        atoms = [self.list_as_array(rule, a, src or node) for a, src in zip(
            atoms, ([None] if first is not None else []) + list(args))]
        if rule.varargs:
            k = params.index(rule.varargs)
            if len(atoms) > k:
                atoms = atoms[:k] + [gast.Tuple(elts=atoms[k:], ctx=gast.Load())]
        if len(atoms) > len(params):
            raise self.unsupported(f"too many arguments for {rule.emit}", node)
        for p, a in zip(params, atoms):
            bound[p] = a
        for kw in keywords:
            if kw.arg not in params:
                raise self.unsupported(f"the keyword {kw.arg}= of {rule.emit} is not supported",
                                       node)
            value = self.expr(kw.value)
            bound[kw.arg] = value
            kws.append(kw.arg)
        if rule.name == "squeeze" and "axis" not in bound and "x" in bound:
            self.squeeze_axes(bound, kws)
        static_values = {}
        for p, a in list(bound.items()):
            if isinstance(a, Static):
                static_values[p] = a.value  # a dtype: rules read its value
                bound[p] = _dtype_atom(a, node, self)
        value = _emit_call(rule, bound, kws)
        return self.apply_rule(rule, bound, node, target, value=value, keywords=kws,
                               static_values=static_values)

    def squeeze_axes(self, bound, kws):
        """``np.squeeze(x)`` of an array whose size-one axes the types know (``x[:, None]``)
        names them, ``np.squeeze(x, axis=1)``: what its type already assumes (the other
        axes kept), and a rank Numba can compile."""
        dims = atom_type(bound["x"], self.types).dims
        axes = tuple(i for i, d in enumerate(dims or ()) if d == 1)
        if axes:
            bound["axis"] = gast.Constant(value=axes[0], kind=None) if len(axes) == 1 else \
                gast.Tuple(elts=[gast.Constant(value=a, kind=None) for a in axes],
                           ctx=gast.Load())
            kws.append("axis")

    def reduce_where(self, rule, args, keywords, node, target, first):
        """``np.sum(x, where=m)`` (``np.prod``, ``x.sum(where=m)``): the reduction of
        ``np.where(m, x, identity)``, 0.0 for a sum and 1.0 for a product, as NumPy leaves
        the entries m excludes out."""
        mask = next(kw.value for kw in keywords if kw.arg == "where")
        rest = [kw for kw in keywords if kw.arg != "where"]
        if any(kw.arg == "initial" for kw in rest):
            raise self.unsupported(f"np.{rule.name} with where= and initial= is not supported",
                                   node, "add the initial value after the reduction")
        x = first if first is not None else self.expr(args[0])
        identity = gast.copy_location(gast.Constant(value=0.0 if rule.name == "sum" else 1.0,
                                                    kind=None), node)
        kept = self.call_rule(rules.lookup(np.where), [
            mask, self.readable(x, node, "reduced"), identity], [], node, None)
        return self.call_rule(rule, [self.readable(kept, node, "kept")] +
                              list(args[0 if first is not None else 1:]), rest, node, target)

    def readable(self, atom, node, label):
        """A name user-level code built here can read for `atom` (a core name, bound to a
        temporary user name); other atoms (constants) as they are."""
        if not isinstance(atom, gast.Name):
            return atom
        held = self.namer.temp(label)
        self.env[held] = atom.id
        return gast.copy_location(name(held), node)

    def trace_along(self, args, keywords, node, target, first):
        """``np.trace(a, offset, axis1, axis2)`` (or ``a.trace(...)``, or the trace of more
        than two axes), `first` the atom of a: the sums of the diagonals of the two axes,
        moved last (np.transpose) for np.diagonal's template (which Numba compiles)."""
        given = dict(zip(("a", "offset", "axis1", "axis2"), [first] + list(args)))
        given.update((kw.arg, kw.value) for kw in keywords)
        if set(given) - {"a", "offset", "axis1", "axis2"}:
            raise self.unsupported("np.trace takes a, offset, axis1 and axis2 here", node)

        def constant(node_):
            atom = self.expr(node_)
            return atom.value if isinstance(atom, (gast.Constant, Static)) else None

        def held(atom):
            return self.readable(atom, node, "trace_part")

        def number(value):
            return gast.copy_location(gast.Constant(value=value, kind=None), node)
        if "offset" in given and constant(given["offset"]) != 0:
            raise self.unsupported("np.trace with an offset is not supported", node,
                                   "sum the entries by index instead (a[0, 1] + a[1, 2] + ...)")
        x = first
        rank = atom_type(x, self.types).ndim
        axes = [constant(given[k]) if k in given else d for k, d in (("axis1", 0),
                                                                   ("axis2", 1))]
        if not isinstance(x, gast.Name) or rank is None or rank < 2 or \
                not all(isinstance(a, int) and -rank <= a < rank for a in axes) or \
                axes[0] % rank == axes[1] % rank:
            raise self.unsupported("np.trace needs an array whose rank is known and two "
                                   "different constant axes here", node)
        pair = [a % rank for a in axes]
        if pair != [rank - 2, rank - 1]:
            order = [k for k in range(rank) if k not in pair] + pair
            x = self.call_rule(rules.lookup(np.transpose), [
                held(x), gast.copy_location(gast.Tuple(elts=[number(k) for k in order],
                                                       ctx=gast.Load()), node)], [], node, None)
        diagonal = self.call_rule(rules.by_name("diagonal"), [held(x)], [
            gast.keyword(arg="axis1", value=number(rank - 2)),
            gast.keyword(arg="axis2", value=number(rank - 1))], node, None)
        last = gast.copy_location(gast.keyword(arg="axis", value=number(-1)), node)
        return self.call_rule(rules.lookup(np.sum), [held(diagonal)], [last], node, target)

    def diff_with_ends(self, rule, args, keywords, node, target):
        """``np.diff(x, n, axis, prepend=p, append=q)``: np.diff of x with p and q joined
        to it along the axis, each ``p + np.zeros_like(np.take(x, [0], axis=axis))`` (a
        number becomes a slice of x's shape, as NumPy makes it)."""
        given = dict(zip(("a", "n", "axis"), args))
        given.update((kw.arg, kw.value) for kw in keywords)
        if "a" not in given or set(given) - {"a", "n", "axis", "prepend", "append"}:
            raise self.unsupported("np.diff takes a, n, axis, prepend and append", node)

        def at(made):
            for part in gast.walk(made):
                gast.copy_location(part, node)
            return made

        def held(atom):
            return self.readable(atom, node, "diff_part")

        def call(fn, call_args, **options):
            keys = [at(gast.keyword(arg=k, value=v)) for k, v in options.items()]
            return held(self.call_rule(rules.lookup(fn), call_args, keys, node, None))
        axis = {"axis": given["axis"]} if "axis" in given else {}
        x = held(self.expr(given["a"]))
        edge = None  # zeros of the shape of one slice of x along the axis

        def end(key):
            nonlocal edge
            if edge is None:
                first_slice = call(np.take, [x, at(gast.List(elts=[gast.Constant(
                    value=0, kind=None)], ctx=gast.Load()))], axis=axis.get(
                        "axis", at(gast.Constant(value=-1, kind=None))))
                edge = call(np.zeros_like, [first_slice])
            value = held(self.expr(given[key]))
            return held(self.expr(at(gast.BinOp(left=value, op=gast.Add(), right=edge))))
        pieces = ([end("prepend")] if "prepend" in given else []) + [x] + \
            ([end("append")] if "append" in given else [])
        joined = call(np.concatenate, [at(gast.Tuple(elts=pieces, ctx=gast.Load()))],
                      axis=axis.get("axis", at(gast.Constant(value=-1, kind=None))))
        options = [at(gast.keyword(arg=k, value=given[k])) for k in ("n", "axis") if k in given]
        return self.call_rule(rule, [joined], options, node, target)

    def is_list_of(self, atom, ndim):
        """Whether `atom` names a local list whose elements have `ndim` axes."""
        return isinstance(atom, gast.Name) and \
            self.types.get(atom.id, T.UNKNOWN).kind == "list" and \
            _element_type(self.types[atom.id]).ndim == ndim

    def list_as_array(self, rule, atom, node):
        """A local list passed to a NumPy function, as NumPy takes it: ``np.array(xs)``
        first (``np.mean(vals)``, ``np.max(vals)``); the functions that read a list
        themselves (np.stack, np.array, len) get it as it is."""
        if not (isinstance(atom, gast.Name) and
                self.types.get(atom.id, T.UNKNOWN).kind == "list") or \
                rule.name in ("stack", "array", "len", "getitem") or \
                rule.name.endswith("_like"):  # (generated code's zero of a list's shape)
            return atom
        if rule.name in ("concatenate", "hstack", "vstack", "column_stack", "dstack"):
            raise self.unsupported(f"np.{rule.name} of a list built at run time is not "
                                   "supported (its pieces may differ in length)", node,
                                   "stack pieces of one shape with np.stack(xs), or pass a "
                                   "tuple of the pieces")
        array = rules.by_name("array")
        return self.apply_rule(array, {"arrays": atom}, node, None,
                               value=_emit_call(array, {"arrays": atom}, []))

    def apply_rule(self, rule, bound, node, target, value, keywords=(), static_values=None):
        if rule.name == "where" and len(bound) == 1:
            raise self.unsupported(
                "np.where(condition) with one argument (the indices where it holds) is not "
                "supported: how many there are is known only at run time", node,
                "use the condition as a mask: x[cond], np.where(cond, x, 0.0) or "
                "np.sum(x * cond)")
        types_ = {p: atom_type(a, self.types) for p, a in bound.items()}
        for p, v in (static_values or {}).items():
            types_[p] = T.AType("object", value=v)
        call = PrimCall(rule, bound, types_, None, None, keywords)
        try:
            out = rule.infer(call)
        except Exception as exc:  # a type rule that cannot handle these operands
            raise self.unsupported(f"cannot infer the type of {unparse(node)} ({exc})",
                                   node) from None
        call.out_type = out
        option = call.unknown_option()
        if out.kind == "tuple" and out.elts is None and option is not None:
            # as many values as an option known only at run time says (np.split(x, k)):
            # nothing after this line could be written for them
            message, hint = rules.runtime_option_message(rule, option)
            raise self.info.error(MissingRuleError, message, node, hint)
        kind = "nondiff" if rule.nondiff_output or not rule.diff else "rule"
        reads = [a for p, a in bound.items() if p in rule.diff]
        base = TEMP_BASE.get(rule.name.split("@")[0], rule.name.split("@")[0])
        return self.emit(value, out, Prim(kind, rule, call, args=reads), target, base)

    # -- functions defined inside the differentiated function
    def define_local_function(self, name_, node):
        """A nested def (or a lambda bound to a name): a function of its own in the generated
        module, whose free variables become extra parameters passed at each call."""
        if node.decorator_list:
            raise self.unsupported("decorated nested functions are not supported", node,
                                   "define the helper at module level, without decorators")
        for inner in gast.walk(node):
            if isinstance(inner, gast.Nonlocal):  # its calls rebind our names: refuse it here
                raise self.unsupported("nonlocal statements are not supported in "
                                       "differentiated code yet", inner, _HINTS["Nonlocal"])
        self.env[name_] = Static(LocalFunction(node, name_))

    def free_variables(self, fdef, params):
        """The names a nested function reads from the enclosing one (bound here, neither
        its parameters nor assigned in it), sorted."""
        assigned = {n.id for n in gast.walk(fdef) if isinstance(n, gast.Name) and
                    isinstance(n.ctx, gast.Store)}
        return sorted({n.id for n in gast.walk(fdef) if isinstance(n, gast.Name) and
                       isinstance(n.ctx, gast.Load) and n.id not in params and
                       n.id not in assigned and n.id in self.env})

    def call_local(self, local, node, target):
        fdef = local.node
        args = fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise self.unsupported("nested functions with *args, **kwargs or keyword-only "
                                   "parameters are not supported", node)
        params = [a.id for a in args.args]
        bound = {}
        atoms = [self.expr(a) for a in node.args]
        if len(atoms) > len(params):
            raise self.unsupported(f"too many arguments for {local.name}", node)
        bound.update(zip(params, atoms))
        for kw in node.keywords:
            if kw.arg not in params or kw.arg in bound:
                raise self.unsupported(f"bad keyword argument {kw.arg}= for {local.name}", node)
            bound[kw.arg] = self.expr(kw.value)
        defaults = dict(zip(params[len(params) - len(args.defaults):], args.defaults))
        for p in params:
            if p not in bound:
                if p not in defaults:
                    raise self.unsupported(f"missing argument {p} for {local.name}", node)
                bound[p] = self.expr(defaults[p])
        free = self.free_variables(fdef, params)
        for v in free:
            value = self.env[v]
            bound[v] = value if isinstance(value, (TreeRef, Static, LocalDict)) else name(value)
        extra = [gast.Name(id=v, ctx=gast.Param(), annotation=None, type_comment=None)
                 for v in free]
        new_args = gast.arguments(args=list(args.args) + extra, posonlyargs=[], vararg=None,
                                  kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
        fdef_full = gast.FunctionDef(name=fdef.name, args=new_args, body=fdef.body,
                                     decorator_list=[], returns=None, type_comment=None,
                                     type_params=[])
        gast.copy_location(fdef_full, fdef)
        info = FunctionInfo(fn=local, name=local.name, node=fdef_full,
                            filename=self.info.filename, line_offset=self.info.line_offset,
                            globals=self.info.globals, closure=dict(self.info.closure),
                            module_name=self.info.module_name)
        specs, flat_args = {}, []
        for pname in params + free:
            specs[pname], leaves = self.passed(bound[pname], node)
            flat_args.extend(leaves)
        callee = normalize_into(self.program, info, specs, called=True)
        return self.call_core(callee, flat_args, target, f"{local.name}_out")

    def transform_of_local(self, make, args, kwargs, node):
        """``grad(lambda q: loss(q, x))`` (or vmap, pmap, value_and_grad... of a nested def)
        written in transformed code: the transform of the function lifted with its free
        variables as parameters after its own (:meth:`lifted`), kept with the atoms passed for
        them. The free variables are constants of the transform: no argnums names them, and
        vmap or pmap maps none of them (in_axes None)."""
        local = args[0].value
        lifted, free = self.lifted(local, node)
        bound = self.bound_options(make, lifted, args[1:], kwargs, node)
        n = len(local.node.args.args)
        if "in_axes" in bound.signature.parameters:  # vmap, pmap
            bound.arguments["in_axes"] = self.lifted_in_axes(
                make, bound.arguments["in_axes"], local, len(free), node)
        elif "argnums" in bound.signature.parameters:  # grad, value_and_grad
            bound.arguments["argnums"] = self.nonnegative_argnums(bound.arguments["argnums"], n)
        return Static(BoundTransform(make(*bound.args, **bound.kwargs), tuple(free)))

    def bound_options(self, make, lifted, args, kwargs, node):
        """``make(lifted, *args, **kwargs)``'s arguments bound to make's parameters by name,
        defaults applied (pmap's second parameter is axis_name, vmap's in_axes): each must be
        known when the code is transformed."""
        values = [_static_value(a) for a in args]
        options = {k: _static_value(v) for k, v in kwargs.items()}
        if any(v is _NOT_STATIC for v in values + list(options.values())):
            raise self.unsupported(f"{make.__name__}(...) inside transformed code needs "
                                   "arguments known when the code is transformed", node)
        try:
            bound = inspect.signature(make).bind(lifted, *values, **options)
        except TypeError as exc:
            raise self.unsupported(f"bad call to {make.__name__}: {exc}", node) from None
        bound.apply_defaults()
        return bound

    def lifted_in_axes(self, make, given, local, n_free, node):
        """vmap's or pmap's in_axes for `local` as one entry per parameter of the lifted
        function: the given axes, then None (not mapped) for each of its free variables."""
        n = len(local.node.args.args)
        given = tuple(given) if isinstance(given, (tuple, list)) else (given,) * n
        if len(given) != n:
            raise self.unsupported(f"{make.__name__}'s in_axes has {len(given)} entries for "
                                   f"{local.name}'s {n} parameters", node)
        return given + (None,) * n_free

    @staticmethod
    def nonnegative_argnums(argnums, n):
        """argnums of a function of `n` parameters with negative positions counted from its own
        last parameter (so that parameters appended after them, a lifted function's free
        variables, do not shift what they name)."""
        def position(i):
            return i % n if isinstance(i, int) and -n <= i < 0 else i
        return tuple(position(i) for i in argnums) if isinstance(argnums, tuple) else \
            position(argnums)

    def call_transformed(self, fn, node, target, extra=()):
        """A call to grad(f)/jvp(f)/... inside differentiated code: the transformed function's
        generated source is differentiated like any user function (DESIGN.md, decision 1).
        `extra`: atoms passed after the call's own arguments (a lifted nested function's free
        variables: :meth:`transform_of_local`)."""
        if node.keywords:
            raise self.unsupported("keyword arguments to a transformed function are not "
                                   "supported", node)
        passed = [self.argument(a) for a in node.args] + list(extra)
        target_fn = fn._signature_function()
        names = list(inspect.signature(target_fn).parameters)[:len(passed)]
        if any(isinstance(a, (LocalDict, TreeRef)) for a in passed) and \
                hasattr(fn, "flat_entry"):
            return self.call_transformed_tree(fn, node, target, names, passed)
        atoms = [self.runtime(a, node) for a in passed]
        specs = {n: atom_type(a, self.types) for n, a in zip(names, atoms)}
        try:
            with code_to_transform():  # the caller's code, with this call's, may be transformed
                entry = fn.function_for(specs)
        except NotImplementedError as exc:
            raise self.unsupported(str(exc), node) from None
        return self.call_user(entry, node, target, atoms=atoms)

    def call_transformed_tree(self, fn, node, target, names, passed):
        """grad(f)(params, x) inside differentiated code, `params` a pytree (the Hessian-vector
        product ``jvp(lambda p: grad(loss)(p, x), (p,), (v,))``): a function written for this
        call takes the pytrees' leaves, calls the generated entry, which takes and returns flat
        leaves, and returns the gradients' pytrees; that function is called like the user's."""
        from .batching import _placeholder
        from .custom import source_function
        specs, flat = {}, []
        for pname, value in zip(names, passed):
            specs[pname], leaves = self.passed(value, node)
            flat.extend(leaves)
        try:
            with code_to_transform():  # the caller's code, with this call's, may be transformed
                entry, structure = fn.flat_entry(
                    names, [_placeholder(specs[n]) for n in names], specs)
        except NotImplementedError as exc:
            raise self.unsupported(str(exc), node) from None
        params = [f"leaf_{k}" for k in range(len(flat))]

        def nested(part, depth=0):
            if isinstance(part, dict):
                return depth > 0 or any(nested(v, depth + 1) for v in part.values())
            if isinstance(part, (tuple, list)):
                return any(nested(v, depth) for v in part)
            return False
        if nested(structure):
            raise self.unsupported(
                f"{fn.kind}(...) of a dict holding dicts, called inside transformed code, is "
                "not supported yet (its result would be a dict of dicts)", node,
                f"pass the inner dicts' arrays as a flat dict, or transform {fn.kind}(f) "
                "itself: jvp(grad(f), ...), hessian(f)")

        def display(part):
            if isinstance(part, int):
                return f"out[{part}]" if not isinstance(structure, int) else "out"
            if isinstance(part, dict):
                return "{" + ", ".join(f"{k!r}: {display(v)}" for k, v in part.items()) + "}"
            inner = ", ".join(display(v) for v in part)
            return f"[{inner}]" if isinstance(part, list) else f"({inner},)"
        inner = getattr(fn._signature_function(), "__name__", "f").replace("<lambda>", "fn")
        label = sanitize(f"{fn.kind}_{inner}_tree")
        source = (f"def {label}({', '.join(params)}):\n"
                  f"    out = entry({', '.join(params)})\n"
                  f"    return {display(structure)}\n")
        wrapper = source_function(source, label, {"entry": entry})
        return self.call_user(wrapper, node, target, atoms=flat)

    def argument(self, node):
        """An argument of a call to a function of the user's: a dict display with string keys
        (`loss({"w": w, "b": b}, x)`) is a LocalDict, passed as a dict pytree, as one bound
        to a name first is."""
        if _string_keyed(node) and node.keys:
            held = self.namer.temp("passed")
            self.local_dict(held, node)
            return self.env[held]
        return self.expr(node)

    def call_user(self, fn, node, target, atoms=None):
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            raise self.info.error(MissingRuleError, f"cannot read the signature of "
                                  f"{_callable_name(fn)}", node) from None
        if atoms is None:
            atoms = [self.argument(a) for a in node.args]
            kw = {k.arg: self.argument(k.value) for k in node.keywords}
        else:
            kw = {}
        try:
            bound = sig.bind(*atoms, **kw)
        except TypeError as exc:
            raise self.unsupported(f"bad call to {fn.__name__}: {exc}", node) from None
        bound.apply_defaults()
        specs, flat_args = {}, []
        for pname, value in bound.arguments.items():
            param = sig.parameters[pname]
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                from . import api
                if fn is api.vjp:  # (its pullback is a function value: none in generated code)
                    raise self.unsupported(
                        "vjp(...) inside transformed code is not supported: the pullback it "
                        "returns is a function value", node,
                        "use grad of np.sum(f(x) * ct) for one cotangent, or jacrev for all")
                raise self.unsupported(f"{fn.__name__} takes *args/**kwargs, which transformed "
                                       "code cannot call", node,
                                       "call it outside the function being transformed")
            if not isinstance(value, (LocalDict, TreeRef, Static, gast.AST)):
                value = self.static(value, node, pname)  # a default value
            specs[pname], leaves = self.passed(value, node)
            flat_args.extend(leaves)
        checkpointed = bool(getattr(fn, "__autodiff_checkpoint__", False))
        if checkpointed:
            fn = fn.__wrapped__
        callee = normalize_into(self.program, parse_callee(fn), specs,
                                checkpointed=checkpointed, called=True)
        base = f"{fn.__name__}_out" if fn.__name__ != "<lambda>" else "out"
        return self.call_core(callee, flat_args, target, base)

    # -- control flow
    def join(self, core_name, typ):
        """The type of a name assigned again inside control flow: both types must agree."""
        old = self.types.get(core_name)
        if old is None or old == typ:
            return typ
        if old.kind == typ.kind == "array" and (old.dims is None or typ.dims is None):
            return old if typ.dims is None else typ  # the side whose rank is known
        if old.kind == typ.kind == "array" and old.ndim == typ.ndim and old.ndim is not None:
            dims = tuple(a if a == b else T.N for a, b in zip(old.dims, typ.dims))
            if dims != old.dims or dims != typ.dims:
                # One name now holds values with a size-one axis and values without: the
                # reverse sweep, which sums adjoints over size-one axes, refuses it (reverse).
                self.merged_axes.setdefault(core_name, (self.origin,
                                                        self.user_name(core_name)))
            return T.array(dims, old.dtype if old.dtype == typ.dtype else "float64")
        if {old.kind, typ.kind} <= {"float", "int", "bool"}:
            return T.FLOAT if "float" in (old.kind, typ.kind) else typ
        if old.kind == "list" and typ.kind == "list":
            return typ if typ.elts else old
        if old.kind == typ.kind == "tuple" and old.elts is not None and typ.elts is not None \
                and len(old.elts) == len(typ.elts):  # element by element
            saved = self.types.get(core_name)
            elts = []
            try:
                for a, b in zip(old.elts, typ.elts):
                    self.types[core_name] = a
                    elts.append(self.join(core_name, b))
            finally:
                self.types[core_name] = saved
            return T.AType("tuple", elts=tuple(elts),
                           record=old.record if old.record is typ.record else None)
        if "unknown" in (old.kind, typ.kind):
            # Optimistic: the known side (a recursive call is typed before its result is).
            return typ if old.kind == "unknown" else old
        raise self.info.error(
            TypeInferenceError, f"{self.user_name(core_name)} changes from "
            f"{T.describe(old)} to {T.describe(typ)} here; a value must keep one type and rank "
            "through loops and branches", self.origin,
            "initialise it with the final type before the loop (e.g. np.zeros_like(x))")

    def block(self, stmts):
        """Normalize a nested block; returns its core statements."""
        saved = self.body
        self.body = []
        self.depth += 1
        self.block_locals.append(set())
        try:
            for stmt in stmts:
                outer = self.origin
                self.origin = stmt
                if isinstance(stmt, gast.Return):
                    raise self.unsupported("return inside a loop is not supported yet", stmt,
                                           "set a flag, stop the loop, and return after it")
                try:
                    self.visit_stmt(stmt)
                except Exception as error:  # a helper that always raises, called here
                    if not hasattr(error, "autodiff_static_raise"):
                        raise
                    self.raise_reached(error, stmt)
                    self.origin = outer
                    break  # the rest of the block never runs
                self.origin = outer
                if isinstance(stmt, gast.Raise):
                    break  # the rest of the block never runs
        finally:
            self.depth -= 1
            self.block_locals.pop()
            out, self.body = self.body, saved
        return out

    def static_condition(self, atom):
        if isinstance(atom, gast.Constant):
            return bool(atom.value)
        if isinstance(atom, Static):
            return bool(atom.value)
        return None

    def visit_If(self, stmt):
        test = self.expr(stmt.test)
        chosen = self.static_condition(test)
        if chosen is not None:  # a static condition picks the branch now
            for inner in (stmt.body if chosen else stmt.orelse):
                outer = self.origin
                self.origin = inner
                self.visit_stmt(inner)
                self.origin = outer
            return
        test = self.runtime(test, stmt.test)
        before = dict(self.env)
        body = self.block(stmt.body)
        after_body = dict(self.env)
        new = {k: v for k, v in after_body.items() if before.get(k) != v}
        self.env = {**before, **new}
        orelse = self.block(stmt.orelse)
        self.env.update({k: v for k, v in after_body.items() if k not in self.env})
        node = gast.If(test=test, body=body or [self.empty_block()], orelse=orelse)
        self.append(node, Prim("if", args=[test]))

    def visit_Assert(self, stmt):
        """`assert test, message` as Python runs it: `if not test: raise
        AssertionError(message)` (kept where the test is known only at run time, raised here
        where the arguments' kinds decide it false), and nothing at all under ``python -O``,
        where Python drops asserts (``__debug__`` is False)."""
        if not __debug__:
            return
        error = gast.Name(id="AssertionError", ctx=gast.Load(), annotation=None,
                          type_comment=None)
        error.resolved = Static(AssertionError)  # the builtin, whatever the name is bound to
        call = gast.Call(func=error, args=[stmt.msg] if stmt.msg is not None else [],
                         keywords=[])
        raised = gast.Raise(exc=call, cause=None)
        negated = gast.UnaryOp(op=gast.Not(), operand=stmt.test)
        check = gast.If(test=negated, body=[raised], orelse=[])
        for node in (error, call, raised, negated, check):
            gast.copy_location(node, stmt)  # the user's line, for comments and errors
        self.visit_If(check)

    def visit_Raise(self, stmt):
        """`raise E(message)`: kept in the generated code where a run-time condition guards
        it; raised here, while the code is generated, where nothing does (the condition was
        decided by the arguments' kinds: `if x.ndim != 2: raise ...`)."""
        if stmt.exc is None:
            raise self.unsupported("a bare raise (re-raising) is not supported: there is no "
                                   "exception to re-raise", stmt, "raise an exception: "
                                   "raise ValueError('...')")
        exc, args = stmt.exc, []
        if isinstance(exc, gast.Call):
            if exc.keywords or len(exc.args) > 1 or any(isinstance(a, gast.Starred)
                                                         for a in exc.args):
                raise self.unsupported("an exception raised here takes at most one argument, "
                                       "its message", stmt, "build one message: "
                                       "raise ValueError(f'... {n} ...')")
            exc, args = exc.func, exc.args
        cls = getattr(exc, "resolved", None) or (
            self.expr(exc) if isinstance(exc, (gast.Name, gast.Attribute)) else None)
        if not (isinstance(cls, Static) and isinstance(cls.value, type) and
                issubclass(cls.value, Exception)):
            raise self.unsupported("raise takes an exception class here (ValueError, or a "
                                   "class of your own defined at module level)", stmt)
        if args:
            self.refuse_chosen_text(args[0])
        pieces = _message_pieces(args[0]) if args else []
        if self.depth == 0:
            raise self.static_raise(cls.value, pieces, stmt)
        atoms = []
        message = self.text(pieces, atoms) if pieces else None
        call = gast.Call(func=self.exception_class(cls.value, stmt),
                         args=[message] if message is not None else [], keywords=[])
        self.append(gast.Raise(exc=call, cause=None), Prim("raise", args=atoms))

    def text(self, pieces, atoms):
        """The string `pieces` (constant text and expressions) make: `'x = ' + str(x)`, each
        expression normalized to an atom (appended to `atoms`)."""
        parts = []
        for piece in pieces:
            if isinstance(piece, str):
                parts.append(gast.Constant(value=piece, kind=None))
                continue
            piece, spec = piece if isinstance(piece, tuple) else (piece, None)
            atom = self.atom(piece)
            parts.append(_str_call(atom, spec))
            if not isinstance(parts[-1], gast.Constant):
                atoms.append(atom)
        out = parts[0]
        for part in parts[1:]:
            out = gast.BinOp(left=out, op=gast.Add(), right=part)
        return out

    def print_call(self, call):
        """`print(a, f"... {b}")`: kept in every generated function that runs the primal
        code, so it prints each time the derivative's primal part runs."""
        if any(k.arg != "flush" for k in call.keywords) or \
                any(isinstance(a, gast.Starred) for a in call.args):
            raise self.unsupported("print takes its values here, without sep=, end= or file= "
                                   "(nor *args)", call, "build the line as one f-string: "
                                   "print(f'{a} {b}')")
        atoms, args = [], []
        for arg in call.args:
            self.refuse_chosen_text(arg)
            pieces = _message_pieces(arg)
            if isinstance(arg, gast.Constant) or pieces != [arg]:
                args.append(self.text(pieces, atoms))  # a string: text and str() of values
            else:
                atom = self.atom(arg)
                if isinstance(atom, gast.Name):
                    atoms.append(atom)
                args.append(atom)
        self.append(gast.Expr(value=gast.Call(func=name("print"), args=args, keywords=[])),
                    Prim("print", args=atoms))

    def refuse_chosen_text(self, node):
        """A message chosen by a conditional expression (``f"a {x}" if c else f"b {y}"``) is
        refused here, with what to write (an f-string is text only where it is printed or
        raised)."""
        if isinstance(node, gast.IfExp) and any(
                isinstance(branch, gast.JoinedStr) or any(
                    isinstance(p, str) for p in _message_pieces(branch))
                for branch in (node.body, node.orelse)):
            raise self.unsupported("a message chosen by a conditional expression is not "
                                   "supported", node, "choose with an if statement: "
                                   "if c: print(f'...') else: print(f'...')")

    def exception_class(self, cls, node):
        """The expression naming exception class `cls` in generated code."""
        import builtins
        if getattr(builtins, cls.__name__, None) is cls:
            return name(cls.__name__)
        module = getattr(cls, "__module__", None) or ""
        imported = sys.modules.get(module)
        if imported is None or getattr(imported, cls.__qualname__, None) is not cls or \
                module == "__main__":
            raise self.unsupported(f"the exception class {cls.__name__} must be importable: "
                                   "defined at the top level of a module", node,
                                   "define the class at module level, or raise a built-in "
                                   "exception such as ValueError")
        return name(self.program.data_name(cls, cls.__name__, module))

    def static_raise(self, cls, pieces, stmt):
        """The user's exception, raised while the code is generated: the raise runs for
        every argument of these kinds. Values known only at run time stay as source text."""
        text = []
        for piece in pieces:
            if isinstance(piece, str):
                text.append(piece)
                continue
            piece, spec = piece if isinstance(piece, tuple) else (piece, "")
            try:
                value = self.expr(piece)
            except UnsupportedSyntaxError:
                value = None
            if isinstance(value, (gast.Constant, Static)):
                text.append(format(value.value, spec))
            else:
                text.append("{" + unparse(piece) + (":" + spec if spec else "") + "}")
        error = cls("".join(text)) if pieces else cls()
        where = f"{self.info.filename}:{self.info.file_line(stmt)}"
        error.add_note(f"raised at {where} while its derivative code was being generated: "
                       "for arguments of these kinds (ranks, dtypes, static values) the "
                       "function always reaches this raise")
        # (a caller reaching it only under a run-time condition raises it there instead)
        error.autodiff_static_raise = (cls, "".join(text) if pieces else None, where)
        return error

    def raise_reached(self, error, stmt):
        """A helper called here raises `error` for arguments of these kinds, and this call
        runs only under a run-time condition: the raise, with its message, is written here
        (a comment names the helper's line)."""
        cls, message, where = error.autodiff_static_raise
        args = [gast.Constant(value=message, kind=None)] if message is not None else []
        call = gast.Call(func=self.exception_class(cls, stmt), args=args, keywords=[])
        self.append(gast.Raise(exc=call, cause=None), Prim("raise", args=[]))

    def loop_body(self, make_body):
        """Normalize a loop body; again if a loop-carried name changed type on the way."""
        start, env, types = len(self.body), dict(self.env), dict(self.types)
        for _ in range(3):
            body = make_body()
            changed = [n for n in types if n in self.types and self.types[n] != types[n]]
            if not changed:
                return body
            del self.body[start:]
            self.env = dict(env)
            joined = {n: self.types[n] for n in changed}
            self.types = dict(types)
            self.types.update(joined)
            types = dict(self.types)
        return body

    def visit_For(self, stmt):
        if stmt.orelse:
            raise self.unsupported("for/else is not supported", stmt, "use a flag")
        if self.dict_loop(stmt):
            return
        it = stmt.iter
        fn = None
        if isinstance(it, gast.Call) and isinstance(it.func, (gast.Name, gast.Attribute)):
            callee = self.expr(it.func)
            fn = callee.value if isinstance(callee, Static) else None
        if fn is range:
            bounds = [self.atom(a) for a in it.args]
            self.range_loop(stmt, bounds, stmt.target, [])
            return
        if fn is reversed and len(it.args) == 1 and isinstance(it.args[0], gast.Call) and \
                not it.keywords:
            inner = it.args[0]
            callee = self.expr(inner.func) if isinstance(inner.func, (gast.Name,
                                                                       gast.Attribute)) else None
            if isinstance(callee, Static) and callee.value is range and not inner.keywords:
                if not 1 <= len(inner.args) <= 2:
                    raise self.unsupported("reversed() of a range with a step is not supported",
                                           stmt, "write the reversed range itself: "
                                           "range(last, first - step, -step)")
                # reversed(range(a, b)) is range(b - 1, a - 1, -1)
                start = inner.args[0] if len(inner.args) == 2 else gast.Constant(0, None)
                stop = inner.args[-1]
                one = gast.Constant(1, None)
                bounds = [self.atom(gast.BinOp(left=stop, op=gast.Sub(), right=one)),
                          self.atom(gast.BinOp(left=start, op=gast.Sub(), right=one)),
                          self.atom(gast.UnaryOp(op=gast.USub(), operand=one))]
                self.range_loop(stmt, bounds, stmt.target, [])
                return
        from .checkpointing import checkpoint
        if fn is checkpoint:
            inner = it.args[0] if len(it.args) == 1 else None
            inner_fn = None
            if isinstance(inner, gast.Call):
                callee = self.expr(inner.func)
                inner_fn = callee.value if isinstance(callee, Static) else None
            if inner_fn is not range or len(inner.args) > 2:
                raise self.unsupported("checkpoint() in a for loop takes range(n) or "
                                       "range(start, stop)", stmt)
            if self.depth > 0:
                raise self.unsupported("a checkpointed loop must not be nested in another loop "
                                       "or branch", stmt, "checkpoint the outer loop")
            bounds = [self.atom(a) for a in inner.args]
            self.range_loop(stmt, bounds, stmt.target, [])
            self.body[-1].checkpointed = True
            return
        if fn is enumerate:
            if not (isinstance(stmt.target, gast.Tuple) and len(stmt.target.elts) == 2):
                raise self.unsupported("enumerate() must be unpacked into (index, value)", stmt)
            index_name, value_target = stmt.target.elts
            zipped = self.zipped(it.args[0])
            if zipped is not None:  # `for k, (a, b) in enumerate(zip(xs, ys))`
                if not (isinstance(value_target, gast.Tuple) and
                        len(value_target.elts) == len(zipped)):
                    raise self.unsupported("enumerate(zip(...)) must be unpacked into (index, "
                                           "(one name per sequence))", stmt)
                if self.zip_unrolled(stmt, zipped, value_target.elts, index_name):
                    return
                zipped = [self.runtime(q, a) for q, a in zip(zipped, it.args[0].args)]
                n = self.zip_length(zipped)
                self.range_loop(stmt, [n], index_name, list(zip(value_target.elts, zipped)))
                return
            tree = self.expr(it.args[0])
            if isinstance(tree, TreeRef) and tree.spec.kind in ("list", "tuple"):
                self.tree_entries_loop(stmt, tree, value_target, index_name)
                return
            seq = self.runtime(tree, it.args[0])
            n = self.emit_len(seq)
            self.range_loop(stmt, [n], index_name, [(value_target, seq)])
            return
        if fn is zip:
            seqs = [self.expr(a) for a in it.args]
            if not (isinstance(stmt.target, gast.Tuple) and len(stmt.target.elts) == len(seqs)):
                raise self.unsupported("zip() must be unpacked into one name per sequence",
                                       stmt)
            if self.zip_unrolled(stmt, seqs, stmt.target.elts):
                return
            seqs = [self.runtime(q, a) for q, a in zip(seqs, it.args)]
            n = self.zip_length(seqs)
            index = gast.Name(id=self.namer.temp("k"), ctx=gast.Store(), annotation=None,
                              type_comment=None)
            self.range_loop(stmt, [n], index, list(zip(stmt.target.elts, seqs)), raw_index=True)
            return
        seq = self.expr(it)
        if isinstance(seq, (gast.Tuple, gast.List)) and seq.elts and all(
                isinstance(e, gast.Constant) for e in seq.elts):
            seq = Static(tuple(e.value for e in seq.elts))  # `for k in ("W1", "W2")`
        if isinstance(seq, Static) and isinstance(seq.value, (tuple, list)):
            for value in seq.value:  # a loop over constants unrolls
                # (a string stays a constant: a pytree key, `params[k]`)
                self.bind_value(stmt.target, Static(value) if isinstance(value, str) else
                                self.static(value, stmt, None))
                for inner in stmt.body:
                    self.visit_stmt(inner)
            return
        if isinstance(seq, TreeRef) and seq.spec.kind in ("list", "tuple"):
            self.tree_entries_loop(stmt, seq, stmt.target)
            return
        seq = self.runtime(seq, it)
        if self.fixed_sequence_loop(stmt, seq):
            return
        n = self.emit_len(seq)
        index = gast.Name(id=self.namer.temp("k"), ctx=gast.Store(), annotation=None,
                          type_comment=None)
        self.range_loop(stmt, [n], index, [(stmt.target, seq)], raw_index=True)

    def tree_entries_loop(self, stmt, seq, target, index_target=None):
        """`for layer in params["layers"]` (and `for i, layer in enumerate(...)`): a loop over
        the entries of a pytree argument unrolls (each entry is its own leaves, of its own
        shapes; the index, if any, is a constant in each copy)."""
        if not (isinstance(target, gast.Name) or (isinstance(target, gast.Tuple) and all(
                isinstance(e, gast.Name) for e in target.elts))):
            raise self.unsupported("the loop variable over a pytree's entries must be a "
                                   "name or names", stmt, "index the entries inside the loop")
        if any(isinstance(n, (gast.Break, gast.Continue)) for n in gast.walk(stmt)):
            raise self.unsupported("break/continue in a loop over a pytree's entries is "
                                   "not supported", stmt, "use a flag")
        for k in range(len(seq.spec.children)):
            entry = self.tree_child(seq, seq.spec.children[k][0], stmt)
            if index_target is not None:
                self.bind_value(index_target, gast.Constant(value=k, kind=None))
            if isinstance(target, gast.Name):
                self.bind_value(target, entry)
            else:  # `for W, b in params`: each entry a tuple of as many parts
                if not (isinstance(entry, TreeRef) and
                        len(entry.spec.children) == len(target.elts)):
                    raise self.unsupported("an entry does not unpack into "
                                           f"{len(target.elts)} names", stmt)
                for j, e in enumerate(target.elts):
                    self.bind_value(e, self.tree_child(entry, entry.spec.children[j][0],
                                                       stmt))
            for inner in stmt.body:
                self.visit_stmt(inner)

    def zip_unrolled(self, stmt, seqs, targets, index_target=None):
        """``for m, y in zip([a, b], ys)`` with a list or tuple of a pytree argument (or a
        list the function closes over) among the sequences: unrolled, as a loop over the
        argument's entries is (each entry its own leaves). Every sequence's length must then
        be known here. False when no sequence is such a list."""
        if not any(isinstance(q, TreeRef) and q.spec.kind in ("list", "tuple") or
                   isinstance(q, Static) and isinstance(q.value, (list, tuple)) for q in seqs):
            return False
        if any(isinstance(n, (gast.Break, gast.Continue)) for n in gast.walk(stmt)):
            raise self.unsupported("break/continue in a loop over a pytree's entries is "
                                   "not supported", stmt, "use a flag")

        def length(seq):
            if isinstance(seq, TreeRef):
                return len(seq.spec.children) if seq.spec.kind in ("list", "tuple") else None
            if isinstance(seq, Static):
                return len(seq.value) if isinstance(seq.value, (list, tuple)) else None
            if isinstance(seq, (gast.Tuple, gast.List)):
                return len(seq.elts)
            typ = atom_type(seq, self.types)
            return len(typ.elts) if typ.kind == "tuple" and typ.elts is not None else None
        lengths = [length(q) for q in seqs]
        if None in lengths:
            raise self.unsupported("zip() of a pytree argument's entries with a sequence "
                                   "whose length is not known where the code is generated",
                                   stmt, "zip it with a list display, a tuple or another "
                                   "pytree list, or index the entries in a range loop")

        def entry(seq, k):
            if isinstance(seq, TreeRef):
                return self.tree_child(seq, seq.spec.children[k][0], stmt)
            if isinstance(seq, Static):  # (a string stays a constant: a pytree key)
                value = seq.value[k]
                return Static(value) if isinstance(value, str) else self.static(value, stmt,
                                                                                None)
            if isinstance(seq, (gast.Tuple, gast.List)):
                return seq.elts[k]
            elt = atom_type(seq, self.types).elts[k]
            kind = "tuple_get" if T.carries_derivative(elt) else "nondiff"
            index = gast.Constant(value=k, kind=None)
            return self.emit(gast.Subscript(value=seq, slice=index, ctx=gast.Load()), elt,
                             Prim(kind, args=[seq], rule=index), None, "item")
        for k in range(min(lengths)):
            if index_target is not None:
                self.bind_value(index_target, gast.Constant(value=k, kind=None))
            for target, seq in zip(targets, seqs):
                value = entry(seq, k)
                if isinstance(target, gast.Tuple) and not isinstance(value, TreeRef):
                    self.unpack(target, value, stmt)
                elif isinstance(target, gast.Tuple):
                    if len(value.spec.children) != len(target.elts):
                        raise self.unsupported("an entry does not unpack into "
                                               f"{len(target.elts)} names", stmt)
                    for j, e in enumerate(target.elts):
                        self.bind_value(e, self.tree_child(value, value.spec.children[j][0],
                                                           stmt))
                else:
                    self.bind_value(target, value)
            for inner in stmt.body:
                self.visit_stmt(inner)
        return True

    def fixed_sequence_loop(self, stmt, seq):
        """``for a, b in [(x, y), (u, v)]`` or over a tuple bound to a name: a sequence of a
        length known here unrolls, each entry read with a constant index (typed, so its
        derivative is carried: read with the loop's index it had none)."""
        typ = atom_type(seq, self.types)
        if typ.kind != "tuple" or not typ.elts or not any(
                T.carries_derivative(e) for e in typ.elts):
            return False
        if any(isinstance(n, (gast.Break, gast.Continue)) for n in gast.walk(stmt)):
            raise self.unsupported("break/continue in a loop over a tuple or list display "
                                   "is not supported", stmt, "use a flag")
        for k, elt in enumerate(typ.elts):
            if isinstance(seq, (gast.Tuple, gast.List)):
                entry = seq.elts[k]
            else:
                index = gast.Constant(value=k, kind=None)
                kind = "tuple_get" if T.carries_derivative(elt) else "nondiff"
                entry = self.emit(gast.Subscript(value=seq, slice=index, ctx=gast.Load()),
                                  elt, Prim(kind, args=[seq], rule=index), None, "item")
            if isinstance(stmt.target, gast.Tuple):
                self.unpack(stmt.target, entry, stmt)
            else:
                self.bind_value(stmt.target, entry)
            for inner in stmt.body:
                self.visit_stmt(inner)
        return True

    def dict_loop(self, stmt):
        """``for k in d``, ``for k in d.keys()``, ``for v in d.values()``, ``for k, v in
        d.items()`` over a dict in a pytree argument: unrolled, a key a constant (so
        ``d[k]`` selects its leaf), in the pytree's key order (sorted, as its leaves are).
        False when the loop is not one of these."""
        it, what = stmt.iter, "keys"
        if isinstance(it, gast.Call) and isinstance(it.func, gast.Attribute) and \
                it.func.attr in ("keys", "values", "items") and not it.args and \
                not it.keywords:
            it, what = it.func.value, it.func.attr
        root = it
        while isinstance(root, (gast.Subscript, gast.Attribute)):
            root = root.value
        if not (isinstance(root, gast.Name) and isinstance(self.env.get(root.id), TreeRef)):
            return False
        ref = self.expr(it)  # a pytree's part: no code emitted
        if not (isinstance(ref, TreeRef) and ref.spec.kind == "dict"):
            return False
        target = stmt.target
        pair = isinstance(target, gast.Tuple) and len(target.elts) == 2
        if what == "items" and not pair:
            raise self.unsupported("items() must be unpacked into (key, value)", stmt)
        if any(isinstance(n, (gast.Break, gast.Continue)) for n in gast.walk(stmt)):
            raise self.unsupported("break/continue in a loop over a pytree's entries is "
                                   "not supported", stmt, "use a flag")
        for key, _ in ref.spec.children:
            entry = self.tree_child(ref, key, stmt)
            if what == "items":
                self.bind_value(target.elts[0], Static(key))
                self.bind_value(target.elts[1], entry)
            else:
                self.bind_value(target, Static(key) if what == "keys" else entry)
            for inner in stmt.body:
                self.visit_stmt(inner)
        return True

    def zipped(self, node):
        """The sequences of ``zip(a, b, ...)`` as atoms, or None when `node` is not a zip."""
        if not (isinstance(node, gast.Call) and isinstance(node.func, (gast.Name,
                                                                        gast.Attribute))):
            return None
        callee = self.expr(node.func)
        if not (isinstance(callee, Static) and callee.value is zip) or node.keywords:
            return None
        return [self.expr(a) for a in node.args]  # (runtime() of them when not unrolled)

    def zip_length(self, seqs):
        """How many steps ``zip(*seqs)`` takes: the shortest sequence's length, as in Python."""
        n = self.emit_len(seqs[0])
        for seq in seqs[1:]:
            other = self.emit_len(seq)
            rule = rules.lookup(min)
            n = self.apply_rule(rule, {"a": n, "b": other}, self.origin, None,
                                value=gast.Call(func=name("min"), args=[n, other], keywords=[]))
        return n

    def emit_len(self, seq):
        rule = rules.by_name("len")
        return self.apply_rule(rule, {"x": seq}, self.origin, None,
                               value=gast.Call(func=name("len"), args=[seq], keywords=[]))

    def dicts_rebuilt_in(self, loop):
        """A dict argument the loop rebinds to a dict display (``p = {"w": p["w"] - lr *
        g["w"]}``: a training loop) becomes, before the loop, a dict of its own entries: the
        loop then writes those entries, read again by its next step (the argument's leaves,
        read by every step, were the first step's values)."""
        for node in gast.walk(loop):
            if not (isinstance(node, gast.Assign) and len(node.targets) == 1 and
                    isinstance(node.targets[0], gast.Name) and _string_keyed(node.value)):
                continue
            ref = self.env.get(node.targets[0].id)
            if not (isinstance(ref, TreeRef) and ref.spec.kind == "dict") or any(
                    isinstance(spec, (TreeSpec, Static)) for _, spec in ref.spec.children):
                continue
            user = node.targets[0].id
            made = self.new_local_dict(user)
            for (key, _), (flat, _) in zip(ref.spec.children, ref.spec.leaves(ref.base)):
                local = made.local_name(key, self.taken_names)
                self.bind_value(gast.copy_location(name(local, store=True), node), name(flat))
            self.env[user] = made

    def range_loop(self, stmt, bounds, target, elements, raw_index=False):
        if not isinstance(target, gast.Name):
            raise self.unsupported("the loop variable must be a single name", stmt)
        self.dicts_rebuilt_in(stmt)
        for b in bounds:
            t = atom_type(b, self.types)
            if t.kind not in ("int", "unknown"):
                raise self.unsupported("range() bounds must be integers", stmt,
                                       "convert with int(...)")
        hidden = not raw_index and id(stmt) in self.hidden_indices
        if raw_index:
            index = target.id
        elif hidden:
            # the user's name is read after the loop or rebound in it: bound from a hidden
            # index at each step, a value the reverse sweep restores (hidden_indices.py)
            index = self.namer.temp(f"{target.id}_index")
        else:
            current = self.env.get(target.id)
            index = self.define(target.id)
            if self.depth == 0 and isinstance(current, str) and current != index and \
                    self.types.get(current, T.UNKNOWN).kind == "int" and any(
                        not isinstance(s, (gast.If, gast.For, gast.While)) and
                        current in {n.id for t in getattr(s, "targets", ())
                                    for n in gast.walk(t) if isinstance(n, gast.Name)}
                        for s in self.body):
                # A loop that runs zero times leaves the name its old value: the new version
                # starts as that value (only when it surely has one, bound at the top level).
                self.body.append(self.copy_stmt(index, name(current)))
        self.types[index] = T.INT

        def make_body():
            self.depth += 1
            saved, self.body = self.body, []
            try:
                if hidden:
                    self.bind_value(target, name(index))
                for element_target, seq in elements:
                    item = self.subscript_value(seq, name(index), stmt)
                    if isinstance(element_target, (gast.Tuple, gast.List)):
                        self.unpack(element_target, item)  # `for a, b in pairs`
                    else:
                        self.bind_value(element_target, item)
            finally:
                prefix, self.body = self.body, saved
                self.depth -= 1
            return prefix + self.block(stmt.body)

        body = self.loop_body(make_body)
        loop = gast.For(target=name(index, store=True),
                        iter=gast.Call(func=name("range"), args=bounds, keywords=[]),
                        body=body or [self.empty_block()], orelse=[], type_comment=None)
        self.append(loop, Prim("for", args=list(bounds)))

    def subscript_value(self, seq, index, node):
        typ = atom_type(seq, self.types)
        value = gast.Subscript(value=seq, slice=index, ctx=gast.Load())
        out = _element_type(typ) if typ.kind == "list" else index_type(typ, index, self.types)
        call = PrimCall(rules.by_name("getitem"), {"x": seq, "index": index},
                        {"x": typ, "index": T.INT}, None, out)
        return self.emit(value, out, Prim("rule", rules.by_name("getitem"), call, args=[seq]),
                         None, "item")

    def visit_While(self, stmt):
        if stmt.orelse:
            raise self.unsupported("while/else is not supported", stmt, "use a flag")
        self.dicts_rebuilt_in(stmt)
        cond = self.namer.temp("cond")
        counter = self.namer.temp("n_iter")
        first = self.runtime(self.expr(stmt.test), stmt.test)
        self.types[cond] = T.BOOL
        self.types[counter] = T.INT
        self.append(assign(counter, 0), Prim("counter"))
        self.append(assign(cond, first), Prim("nondiff", args=[first]))

        def make_body():
            body = self.block(stmt.body)
            saved, self.body = self.body, []
            self.depth += 1
            try:
                again = self.runtime(self.expr(stmt.test), stmt.test)
                self.append(assign(cond, again), Prim("nondiff", args=[again]))
                bump = assign(counter, gast.BinOp(left=name(counter), op=gast.Add(),
                                                  right=gast.Constant(value=1, kind=None)))
                self.append(bump, Prim("counter"))
            finally:
                tail, self.body = self.body, saved
                self.depth -= 1
            return body + tail

        body = self.loop_body(make_body)
        loop = gast.While(test=name(cond), body=body, orelse=[])
        self.append(loop, Prim("while", args=[name(counter)]))
        loop.counter = counter

    def visit_With(self, stmt):
        for item in stmt.items:
            ctx = item.context_expr
            fn = None
            if isinstance(ctx, gast.Call):
                callee = self.expr(ctx.func)
                fn = callee.value if isinstance(callee, Static) else None
            if fn is not np.errstate or item.optional_vars is not None:
                raise self.unsupported("only `with np.errstate(...)` blocks are supported", stmt,
                                       "move other context managers outside the function")
        # np.errstate changes warnings only: its body is differentiated as plain code.
        for inner in stmt.body:
            outer = self.origin
            self.origin = inner
            self.visit_stmt(inner)
            self.origin = outer

    # -- in-place writes and lists
    def written_base(self, target):
        base = target.value
        if not isinstance(base, gast.Name):
            raise self.unsupported("only writes into a named array are supported (y[i] = v)",
                                   target)
        core = self.env.get(base.id)
        if not isinstance(core, str):
            raise self.unsupported(f"{base.id} is not an array that can be written", target)
        return core

    def setitem(self, target, value):
        core = self.written_base(target)
        index = self.index(target.slice)
        store = gast.Subscript(value=name(core), slice=index, ctx=gast.Store())
        stmt = gast.Assign(targets=[store], value=value, type_comment=None)
        self.written.add(core)
        t = self.types.get(core, T.UNKNOWN)
        vt = atom_type(value, self.types)
        if t.kind == "array" and t.dtype and t.dtype.startswith(("int", "bool")) and \
                vt.is_float and vt.kind != "unknown":
            pass  # a float written into an int array is truncated: no derivative flows
        prim = Prim("setitem", args=[value], rule=index)
        prim.base = core
        self.append(stmt, prim)

    def aug_setitem(self, stmt):
        target = stmt.target
        core = self.written_base(target)
        index = self.index(target.slice)
        current = self.subscript_value(name(core), index, stmt)
        rhs = self.atom(stmt.value)
        rule = rules.by_name(BINOPS[type(stmt.op)])
        updated = self.apply_rule(rule, {"a": current, "b": rhs}, stmt, None,
                                  value=gast.BinOp(left=current, op=stmt.op, right=rhs))
        store = gast.Subscript(value=name(core), slice=index, ctx=gast.Store())
        self.written.add(core)
        prim = Prim("setitem", args=[updated], rule=index)
        prim.base = core
        self.append(gast.Assign(targets=[store], value=updated, type_comment=None), prim)

    def list_append(self, call):
        base = call.func.value
        core = self.env.get(base.id) if isinstance(base, gast.Name) else None
        if not isinstance(core, str) or self.types.get(core, T.UNKNOWN).kind != "list":
            raise self.unsupported("append() is supported on local lists created with []",
                                   call)
        if len(call.args) != 1:
            raise self.unsupported("append() takes one value", call)
        self.append_atom(core, self.atom(call.args[0]), call)

    def append_atom(self, core, value, node):
        """``core.append(value)`` (value an atom) on the local list `core`."""
        vt = atom_type(value, self.types)
        if T.holds_differentiated_tuple(vt):
            raise self.unsupported(
                "a list of tuples holding tuples of differentiated values is not supported",
                node, "keep the list's tuples flat: (a, b, c) instead of (a, (b, c))")
        old = self.types[core]
        if old.elts and old.elts[0] != vt:
            joined = self.join_list_element(old.elts[0], vt, node)
            vt = joined
        self.types[core] = T.AType("list", elts=(vt,))
        expr = gast.Call(func=gast.Attribute(value=name(core), attr="append", ctx=gast.Load()),
                         args=[value], keywords=[])
        prim = Prim("append", args=[value])
        prim.base = core
        self.append(gast.Expr(value=expr), prim)

    def list_pop(self, call, target, receiver=None):
        """``v = t.pop()`` on a local list (the tapes of generated code are such lists)."""
        if receiver is None:
            receiver = self.atom(call.func.value)
        typ = atom_type(receiver, self.types)
        if typ.kind != "list" or call.args or not isinstance(receiver, gast.Name):
            raise self.unsupported("pop() is supported without arguments on local lists", call)
        elem = typ.elts[0] if typ.elts else T.UNKNOWN
        out = self.define(target) if target is not None else self.namer.temp("popped")
        self.types[out] = self.join(out, elem) if self.depth > 0 else elem
        value = gast.Call(func=gast.Attribute(value=receiver, attr="pop", ctx=gast.Load()),
                          args=[], keywords=[])
        prim = Prim("pop", args=[receiver])
        prim.base = receiver.id
        self.append(assign(out, value), prim)
        return name(out)

    def is_add_at(self, call):
        if not (isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) and
                call.func.attr == "at"):
            return False
        try:
            ufunc = self.expr(call.func.value)
        except Exception:  # not a compile-time object: not ours to read
            return False
        return isinstance(ufunc, Static) and ufunc.value is np.add

    def add_at(self, call):
        """``np.add.at(b, idx, v)``: scatter-add that accumulates repeated indices."""
        if len(call.args) != 3 or not isinstance(call.args[0], gast.Name):
            raise self.unsupported("np.add.at(array, index, values) on a named array", call)
        core = self.env.get(call.args[0].id)
        if not isinstance(core, str):
            raise self.unsupported("np.add.at needs a local array", call)
        index = self.atom(call.args[1])
        value = self.atom(call.args[2])
        expr = gast.Call(func=fill("np.add.at"), args=[name(core), index, value], keywords=[])
        prim = Prim("add_at", args=[value], rule=index)
        prim.base = core
        self.written.add(core)
        self.append(gast.Expr(value=expr), prim)

    def join_list_element(self, old, new, node):
        if old.kind == new.kind and old.ndim == new.ndim:
            return old
        raise self.unsupported("a list must hold values of one type and rank", node)

    def copy_params_written_in_place(self, body):
        """Parameters the function writes into are copied first: callers' arrays never change."""
        written = {}  # user name -> the first statement writing into it
        fresh = set()  # parameters bound to a new array (`v = v.copy()`) before any write
        for node in body:
            if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], gast.Name) and _makes_new_array(node.value) \
                    and node.targets[0].id not in written:
                fresh.add(node.targets[0].id)
            for sub in gast.walk(node):
                target = None
                if isinstance(sub, gast.Assign):
                    for t in sub.targets:
                        if isinstance(t, gast.Subscript) and isinstance(t.value, gast.Name):
                            written.setdefault(t.value.id, sub)
                elif isinstance(sub, gast.AugAssign):
                    target = sub.target
                    if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name):
                        written.setdefault(target.value.id, sub)
        for pname in sorted(set(written) - fresh):
            core = self.env.get(pname)
            if isinstance(core, str) and core in self.params:
                self.written_params[core] = (pname, written[pname])
                self.origin = body[0] if body else self.info.node
                copy_rule = rules.lookup(np.copy)
                self.apply_rule(copy_rule, {"x": name(core)}, self.origin, pname,
                                value=gast.Call(func=fill("np.copy"), args=[name(core)],
                                                keywords=[]))

    def expr_IfExp(self, node, target):
        test = self.atom(node.test)
        chosen = self.static_condition(test)
        if chosen is not None:
            return self.expr(node.body if chosen else node.orelse, target)
        out = target if target is not None else None
        tmp = self.namer.temp("choice") if out is None else None
        before = dict(self.env)
        self.depth += 1
        saved, self.body = self.body, []
        try:
            a = self.atom(node.body)
            if isinstance(a, (gast.Tuple, gast.List)):  # (a display's copy kept no derivative)
                a = self.bind_display(a)
        finally:
            body, self.body = self.body, saved
        saved, self.body = self.body, []
        try:
            b = self.atom(node.orelse)
            if isinstance(b, (gast.Tuple, gast.List)):
                b = self.bind_display(b)
        finally:
            orelse, self.body = self.body, saved
            self.depth -= 1
        self.env = before
        ta, tb = atom_type(a, self.types), atom_type(b, self.types)
        result = out if out is not None else tmp
        if out is not None:
            result = self.define(out)
        if ta.kind == tb.kind == "tuple" and ta != tb:
            # two tuples (NamedTuples): joined entry by entry, as a name bound in two
            # branches (broadcasting them typed the result unknown: its derivative was lost)
            saved = self.types.get(result)
            self.types[result] = ta
            try:
                typ = self.join(result, tb)
            finally:
                if saved is None:
                    del self.types[result]
                else:
                    self.types[result] = saved
        else:
            typ = ta if ta == tb else T.broadcast(ta, tb) if ta.kind != "unknown" else tb
        self.types[result] = self.join(result, typ) if result in self.types else typ
        body.append(self.copy_stmt(result, a))
        orelse.append(self.copy_stmt(result, b))
        self.append(gast.If(test=test, body=body, orelse=orelse), Prim("if", args=[test]))
        return name(result)

    def copy_stmt(self, out, atom):
        stmt = assign(out, atom)
        stmt.prim = Prim("copy", args=[atom])
        stmt.origin = self.origin
        stmt.info = self.info
        if self.names_memory(atom):
            stmt.view_of = atom.id  # `b = a if c else x`: b is another name of a (or of x)
        gast.copy_location(stmt, self.origin)
        return stmt

    def names_memory(self, atom):
        """Whether copying `atom` to a name makes another name of its memory: an array, or a
        0-d array from np.where/np.copy of scalars."""
        return isinstance(atom, gast.Name) and atom.id in self.types and (
            self.types[atom.id].kind == "array" or atom.id in self.zero_dim)

    # -- unsupported expression kinds give specific errors

    def expr_Lambda(self, node, target):
        """A lambda written inline (``jvp(lambda q: grad(loss)(q, x), (p,), (v,))``, or
        called where it stands): a nested function of its own, as when bound to a name."""
        fname = self.namer.temp("lambda")
        self.define_local_function(fname, _lambda_def(fname, node))
        return self.env.pop(fname)

    def lifted(self, local, node):
        """A nested function (or lambda) as a Python function of the user's module, its free
        variables made parameters after its own: (that function, the free variables' atoms,
        which a caller passes for them). Their values must be arrays or numbers here."""
        from .custom import source_function
        fdef = local.node
        params = [a.id for a in fdef.args.args]
        free = self.free_variables(fdef, params)
        atoms = []
        for v in free:
            value = self.env[v]
            if isinstance(value, (TreeRef, Static, LocalDict)):
                raise self.unsupported(f"{local.name} reads {v!r}, a pytree, dict or constant "
                                       "of the enclosing function, where it is passed to a "
                                       "transform: only arrays and numbers can be passed on",
                                       node, "pass it as one of the function's arguments")
            atoms.append(name(value))
        if fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs or \
                fdef.args.posonlyargs:
            raise self.unsupported("a nested function passed to a transform takes plain "
                                   "parameters only", node)
        lifted_name = sanitize(f"{self.info.name}_{local.name}")
        whole = gast.FunctionDef(name=lifted_name, args=gast.arguments(
            args=[gast.Name(id=p, ctx=gast.Param(), annotation=None, type_comment=None)
                  for p in params + free], posonlyargs=[], vararg=None, kwonlyargs=[],
            kw_defaults=[], kwarg=None, defaults=list(fdef.args.defaults)),
            body=copy.deepcopy(fdef.body), decorator_list=[], returns=None,
            type_comment=None, type_params=[])
        text = unparse(whole) + "\n"
        key = (text, id(self.info.globals),
               tuple(sorted((k, id(v)) for k, v in self.info.closure.items())))
        fn = _LIFTED.get(key)
        if fn is None:  # (once per text and environment: the transforms' caches hold)
            namespace = dict(self.info.globals)
            namespace.update(self.info.closure)
            fn = _LIFTED[key] = source_function(text, lifted_name, namespace)
        return fn, atoms


_HINTS = {
    "Try": "move error handling outside the differentiated function",
    "Global": "pass the value as an argument instead",
    "Nonlocal": "pass the value as an argument and return the new one",
    "ClassDef": "define classes outside the function",
    "Yield": "return a list or an array instead of yielding",
    "YieldFrom": "return a list or an array instead of yielding",
    "Await": "differentiate synchronous code",
    "GeneratorExp": "build a list instead ([... for ...]), or fold it at once: sum(...)",
    "DictComp": "build the dict outside the function",
    "SetComp": "sets are not differentiable containers",
    "JoinedStr": "format strings outside the differentiated function",
    "NamedExpr": "assign the value in its own statement",
    "Starred": "pass the arguments one by one",
    "Dict": "build dicts outside the function and pass them as pytree arguments",
    "Set": "sets are not differentiable containers",
    "Import": "import at module level",
    "ImportFrom": "import at module level",
}


_COMPARE = {gast.Eq: operator.eq, gast.NotEq: operator.ne, gast.Lt: operator.lt,
            gast.LtE: operator.le, gast.Gt: operator.gt, gast.GtE: operator.ge}


_NEVER_NONE = ("float", "int", "bool", "array", "tuple", "str", "list")


def _none_identity(part, types):
    """The value of `part` (one comparison) when it is `a is b` / `a is not b` with one side
    None and the other's type saying whether it is None (None, a number, an array...); None
    when that is not known where the code is generated."""
    op = type(part.ops[0])
    if op not in (gast.Is, gast.IsNot):
        return None
    kinds = [atom_type(a, types).kind for a in (part.left, part.comparators[0])]
    if "none" not in kinds or any(k != "none" and k not in _NEVER_NONE for k in kinds):
        return None
    same = kinds[0] == kinds[1]
    return same if op is gast.Is else not same


def _plain_constant(atom):
    """A constant of Python's own number, bool, str or None types."""
    return isinstance(atom, gast.Constant) and (
        atom.value is None or type(atom.value) in (bool, int, float, str))


def _string_keyed(node):
    """A dict display with constant string keys."""
    return isinstance(node, gast.Dict) and all(
        isinstance(k, gast.Constant) and isinstance(k.value, str) for k in node.keys)


def _message_pieces(node):
    """An exception's message (or a printed string) as constant text and expressions: an
    f-string's parts, the parts of `'text ' + str(v)` (as generated code writes it), or one
    value shown with str(). A value with a format spec (`{v:.3f}`) is the pair (v, spec)."""
    if isinstance(node, gast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, gast.BinOp) and isinstance(node.op, gast.Mult) and all(
            isinstance(side, gast.Constant) for side in (node.left, node.right)) and \
            {type(node.left.value), type(node.right.value)} == {str, int}:
        return [node.left.value * node.right.value]  # "-" * 30: a rule line
    if isinstance(node, gast.BinOp) and isinstance(node.op, gast.Add):
        left, right = _message_pieces(node.left), _message_pieces(node.right)
        if any(isinstance(p, str) for p in left + right):
            return left + right
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
            node.func.id == "str" and len(node.args) == 1 and not node.keywords:
        return [node.args[0]]
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
            node.func.id == "format" and len(node.args) == 2 and not node.keywords and \
            isinstance(node.args[1], gast.Constant) and isinstance(node.args[1].value, str):
        return [(node.args[0], node.args[1].value)]
    if isinstance(node, gast.JoinedStr):
        pieces = []
        for part in node.values:
            if isinstance(part, gast.Constant):
                pieces.append(str(part.value))
                continue
            spec = part.format_spec  # a FormattedValue: str() shows it, or format(v, spec)
            if spec is not None and all(isinstance(v, gast.Constant) for v in spec.values):
                pieces.append((part.value, "".join(str(v.value) for v in spec.values)))
            else:
                pieces.append(part.value)
        return pieces
    return [node]


def _str_call(atom, spec=None):
    """`str(atom)`, or `format(atom, spec)` (a constant is made text at once)."""
    if isinstance(atom, gast.Constant):
        return gast.Constant(value=format(atom.value, spec or ""), kind=None)
    if spec:
        return gast.Call(func=name("format"), args=[atom, gast.Constant(value=spec, kind=None)],
                         keywords=[])
    return gast.Call(func=name("str"), args=[atom], keywords=[])


def _describe(node):
    names = {"ListComp": "a list comprehension", "GeneratorExp": "a generator expression",
             "DictComp": "a dict comprehension", "SetComp": "a set comprehension",
             "JoinedStr": "an f-string", "NamedExpr": "the walrus operator :=",
             "Yield": "yield", "YieldFrom": "yield from", "Await": "await",
             "Starred": "a starred expression", "Dict": "a dict display", "Set": "a set display"}
    return names.get(type(node).__name__, type(node).__name__)


def _callable_name(fn):
    module = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    if module.startswith("numpy"):
        return f"np.{qual}" if module in ("numpy", "numpy._core.fromnumeric") else \
            f"{module.replace('numpy', 'np')}.{qual}"
    return f"{module}.{qual}" if module and module != "builtins" else qual


def _is_dtype(atom):
    return isinstance(atom, Static) and (isinstance(atom.value, (type, np.dtype)) and (
        atom.value in (float, int, bool) or isinstance(atom.value, np.dtype) or
        issubclass(atom.value, np.generic)))


def _constant_value(value):
    """Whether `value` is a number, string, None or a tuple of them (a constant in code)."""
    if isinstance(value, tuple):
        return all(_constant_value(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, np.generic))


def _dtype_atom(atom, node, normalizer):
    """A Static passed to a NumPy call: a dtype as its name, a constant (a static argument
    under jit: `axis=k`) as itself."""
    if isinstance(atom, Static):
        value = atom.value
        if _constant_value(value):
            return to_expr(value.item() if isinstance(value, np.generic) else value)
        if value in (float, int, bool):
            return gast.Name(id=value.__name__, ctx=gast.Load(), annotation=None,
                             type_comment=None)
        try:
            dtype = np.dtype(value)
        except TypeError:
            raise normalizer.unsupported("only dtypes and constants may be passed here",
                                         node) from None
        return fill(f"np.{dtype.name}")
    return atom


def _emit_call(rule, bound, keywords):
    args, kws = [], []
    for p in rule.params:
        if p not in bound:
            continue
        value = bound[p]
        if p == rule.varargs and isinstance(value, gast.Tuple):
            args.extend(value.elts)
        elif p in keywords:
            kws.append(gast.keyword(arg=p, value=value))
        else:
            args.append(value)
    return gast.Call(func=fill(rule.emit), args=args, keywords=kws)


def _is_method(call, method):
    return isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) and \
        call.func.attr == method


def _is_append(call):
    return isinstance(call, gast.Call) and isinstance(call.func, gast.Attribute) and \
        call.func.attr == "append"


def _ends_with_return(stmts):
    """Whether a block ends by leaving the function (return, or raise)."""
    return bool(stmts) and isinstance(stmts[-1], (gast.Return, gast.Raise))


def _contains_return(stmt):
    return any(isinstance(n, gast.Return) for n in gast.walk(stmt))


def lower_returns(stmts, normalizer):
    """Give the function one exit: a return inside an if takes the rest of the body into the
    other branch, and every branch assigns the result before one final return.

    Returns inside loops are left for the normalizer to reject.
    """
    structured = _structure_returns(list(stmts))
    if not any(isinstance(s, gast.If) and _contains_return(s) for s in structured):
        return structured
    result = normalizer.namer.temp("result")
    tuple_size = [None]

    def collect(node):
        for sub in gast.walk(node):
            # (a list display too: each entry is its own output, and Numba cannot unpack
            # a list holding an array and a number)
            if isinstance(sub, gast.Return) and isinstance(sub.value, (gast.Tuple, gast.List)):
                tuple_size[0] = len(sub.value.elts)
    for s in structured:
        collect(s)
    names = [normalizer.namer.temp(f"result{i}") for i in range(tuple_size[0])] \
        if tuple_size[0] else [result]

    def rewrite(block):
        out = []
        for s in block:
            if isinstance(s, gast.Return):
                value = s.value if s.value is not None else gast.Constant(value=None, kind=None)
                targets = [gast.Name(id=n, ctx=gast.Store(), annotation=None, type_comment=None)
                           for n in names]
                if len(names) == 1:
                    new = gast.Assign(targets=targets, value=value, type_comment=None)
                else:
                    new = gast.Assign(targets=[gast.Tuple(elts=targets, ctx=gast.Store())],
                                      value=value, type_comment=None)
                out.append(gast.copy_location(new, s))
            elif isinstance(s, gast.If):
                s.body = rewrite(s.body)
                s.orelse = rewrite(s.orelse)
                out.append(s)
            else:
                out.append(s)
        return out
    body = rewrite(structured)
    loads = [gast.Name(id=n, ctx=gast.Load(), annotation=None, type_comment=None) for n in names]
    value = loads[0] if len(loads) == 1 else gast.Tuple(elts=loads, ctx=gast.Load())
    final = gast.Return(value=value)
    gast.copy_location(final, structured[-1] if structured else normalizer.info.node)
    return body + [final]


def _structure_returns(stmts):
    for i, s in enumerate(stmts):
        if isinstance(s, (gast.Return, gast.Raise)):
            return stmts[:i + 1]
        if isinstance(s, gast.If) and _contains_return(s) and not any(
                isinstance(n, (gast.For, gast.While)) and _contains_return(n)
                for n in gast.walk(s)):
            rest = stmts[i + 1:]
            body = list(s.body) if _ends_with_return(s.body) else list(s.body) + rest
            orelse = list(s.orelse) if _ends_with_return(s.orelse) else list(s.orelse) + rest
            s.body = _structure_returns(body)
            s.orelse = _structure_returns(orelse)
            return stmts[:i] + [s]
    return stmts


_VIEW_RULES = {"T", "transpose", "reshape", "ravel", "squeeze", "expand_dims", "swapaxes",
               "moveaxis", "broadcast_to", "asarray", "diagonal", "flip", "fliplr", "flipud",
               "rot90", "atleast_1d", "atleast_2d", "atleast_3d"}
# rules returning a tuple of views of their first argument (each piece one of its slices)
_VIEW_TUPLE_RULES = {"split", "array_split", "hsplit", "vsplit", "dsplit"}


def _makes_view(prim, types):
    """Whether a primitive's result may share memory with its first argument."""
    rule = prim.rule.name.split("@")[0]
    if rule == "getitem":
        index = prim.call.args["index"]
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        return all(isinstance(p, (gast.Slice, gast.Constant)) or
                   atom_type(p, types).kind in ("int", "bool") for p in parts)
    return rule in _VIEW_RULES or rule in _VIEW_TUPLE_RULES


# Calls that return a 0-d array (not a NumPy scalar) when given scalars.
_ZERO_DIM_RULES = frozenset({"where", "copy", "asarray", "array"})


_NOT_STATIC = object()


#: The transforms a function may build inside transformed code (``vmap(loss, ...)(p, X)``)
#: from the function and options alone (jvp, vjp, linearize take values as well).
_TRANSFORM_MAKERS = frozenset({"grad", "value_and_grad", "jacfwd", "jacrev", "jacobian",
                               "hessian", "vmap", "checkpoint"})


def _display_value(node):
    """Static(value) of a display made of constants only (``({"w": None, "b": 0}, 0)``), for
    a transform's options, read before it is normalized (a dict display would become a local
    dict); None for anything else (a name, a call, a plain constant)."""
    if not isinstance(node, (gast.Tuple, gast.List, gast.Dict)):
        return None
    found = _static_value(node)
    return None if found is _NOT_STATIC else Static(found)


def _static_value(atom):
    """The value of a compile-time atom, or of a display of constants (a list as a tuple, a
    dict with constant keys, ``-1``); _NOT_STATIC otherwise."""
    if isinstance(atom, Static):
        return atom.value
    if isinstance(atom, gast.Constant):
        return atom.value
    if isinstance(atom, gast.UnaryOp) and isinstance(atom.op, gast.USub) and \
            isinstance(atom.operand, gast.Constant) and \
            isinstance(atom.operand.value, (int, float)):
        return -atom.operand.value
    if isinstance(atom, (gast.Tuple, gast.List)):
        values = [_static_value(e) for e in atom.elts]
        return _NOT_STATIC if any(v is _NOT_STATIC for v in values) else tuple(values)
    if isinstance(atom, gast.Dict) and None not in atom.keys:
        keys, values = [_static_value(k) for k in atom.keys], \
            [_static_value(v) for v in atom.values]
        if any(v is _NOT_STATIC for v in keys + values):
            return _NOT_STATIC
        return dict(zip(keys, values))
    return _NOT_STATIC


def _shape_changes(old, new):
    """Whether a value of type `new` has another kind or other axes than one of type `old`."""
    if old is None or new is None or "unknown" in (old.kind, new.kind):
        return False
    if old.kind != new.kind:
        return not {old.kind, new.kind} <= {"float", "int", "bool"}
    return old.kind == "array" and None not in (old.dims, new.dims) and old.dims != new.dims


# ---------------------------------------------------------------- indexing types
def _element_type(typ):
    """The type of an element of a list of type `typ` (one element type per list)."""
    return typ.elts[0] if typ.elts else T.UNKNOWN


def index_type(base, index, types):
    """Abstract type of base[index] for basic and integer-array indexing."""
    if base.kind != "array" or base.dims is None:
        return T.AType("array", base.dtype, None) if base.kind == "array" else T.UNKNOWN
    parts = index.elts if isinstance(index, gast.Tuple) else [index]
    dims = list(base.dims)
    out, axis = [], 0
    advanced = []
    n_consumed = sum(1 for p in parts if not (isinstance(p, gast.Constant) and
                                                (p.value is None or p.value is Ellipsis)))
    for p in parts:
        if isinstance(p, gast.Slice):
            out.append(1 if _length_one(p, types) else dims[axis] if axis < len(dims) else T.N)
            axis += 1
        elif isinstance(p, gast.Constant) and p.value is None:
            out.append(1)
        elif isinstance(p, gast.Constant) and p.value is Ellipsis:
            skip = len(dims) - n_consumed
            out.extend(dims[axis:axis + skip])
            axis += skip
        elif _int_list(p):
            # a list of integers indexes as an integer vector does
            advanced.append((len(out), (T.N if len(p.elts) > 1 else 1,)))
            axis += 1
        else:
            t = atom_type(p, types)
            if t.kind in ("int", "bool"):
                axis += 1
            elif t.kind == "array" and t.dtype == "bool":
                advanced.append((len(out), (T.N,)))
                axis += len(t.dims or (1,))
            elif t.kind == "array":
                advanced.append((len(out), t.dims))
                axis += 1
            else:
                return T.AType("array", base.dtype, None)
    out.extend(dims[axis:])
    if advanced:
        adv_dims = T.broadcast(*(T.array(d) for _, d in advanced)).dims or ()
        at = advanced[0][0] if all(pos == advanced[0][0] for pos, _ in advanced) else 0
        out[at:at] = list(adv_dims)
    return T.array(tuple(out), base.dtype or "float64")


def _int_list(part):
    """Whether the index part `part` is a list display of integers (``y[[0, 0, 2]]``)."""
    return isinstance(part, gast.List) and bool(part.elts) and all(
        isinstance(e, gast.Constant) and type(e.value) is int for e in part.elts)


def _length_one(part, types):
    """Whether the slice `part` (``0:1``, ``k:k + 1`` with constants, ``-1:``) takes one element.

    Typing its axis as size one keeps adjoints consistent: a contribution to ``x[:, 0:1]``
    is summed over that axis, never broadcast up to it.
    """
    def const(atom):
        if atom is None:
            return None
        t = atom_type(atom, types)
        return t.value if t.kind == "int" and isinstance(t.value, int) else _NOT_STATIC

    lower, upper, step = const(part.lower), const(part.upper), const(part.step)
    if step not in (None, 1) or lower is _NOT_STATIC or upper is _NOT_STATIC:
        return False
    if upper is None:
        return lower == -1
    lower = 0 if lower is None else lower
    return upper - lower == 1 and (lower >= 0) == (upper > 0) and upper != 0


# ---------------------------------------------------------------- getitem rule
def _getitem_vjp(call, g):
    return {"x": ("scatter", call.args["index"])}


def _getitem_jvp(call, dots):
    return gast.Subscript(value=to_expr(dots["x"]), slice=to_expr(call.args["index"]),
                          ctx=gast.Load())


rules.register(rules.Rule("getitem", None, ("x", "index"), {}, ("x",), lambda call:
                          call.out_type, _getitem_vjp, _getitem_jvp, linear=True))


# ---------------------------------------------------------------- entry points
_CALLEES = {}


def parse_callee(fn):
    if fn not in _CALLEES:
        _CALLEES[fn] = parse_function(fn)
    return _CALLEES[fn]


def _spec_key(specs):
    return tuple(sorted((k, v if not isinstance(v, Static) else ("static", id(v.value)))
                        for k, v in specs.items()))


def _makes_new_array(value):
    """Whether `value` certainly makes an array of its own (a copy or an arithmetic result),
    never a view of its operand: a parameter bound to it can be written in place freely."""
    if isinstance(value, (gast.BinOp, gast.UnaryOp)):
        return True
    if isinstance(value, gast.Call) and isinstance(value.func, gast.Attribute):
        func = value.func
        if func.attr == "copy" and not value.args:  # v.copy()
            return True
        return isinstance(func.value, gast.Name) and func.value.id in ("np", "numpy") and \
            func.attr in ("copy", "array", "zeros_like", "ones_like", "full_like")
    return False


def normalize_into(program, info, specs, core_name=None, checkpointed=False, called=False):
    """Normalize `info` for these argument specs into `program` (memoized per signature).
    `called`: for a call from another function (a dict it returns is a tuple there; the
    entry function called again, recursively, is the same core function as the entry)."""
    key = (info.fn, _spec_key(specs), checkpointed)
    if key in program.functions:
        return program.functions[key]
    base = core_name or info.name
    emitted = program.module_names.fresh(base)
    placeholder = CoreFunction(info, emitted, [], None, {}, None, None, None, specs)
    program.functions[key] = placeholder  # recursion guard: a recursive call sees this
    try:
        core = Normalizer(info, specs, program, emitted, called).run()
    except BaseException:  # (no half-made function left for a later call to find)
        del program.functions[key]
        raise
    calls = placeholder.recursive_calls
    # Recursive calls hold the placeholder: it becomes the function itself.
    placeholder.__dict__.update(core.__dict__)
    if calls:
        # The recursive calls were typed before the return type was known: once more.
        core = Normalizer(info, specs, program, emitted, called).run()
        placeholder.__dict__.update(core.__dict__)
    placeholder.checkpointed = checkpointed
    program.order.append(key)
    return placeholder


def normalize(info, specs, program=None):
    """Normalize one function (and, through `program`, the helpers it calls)."""
    program = program or Program()
    return normalize_into(program, info, specs)


__all__ = ["normalize", "normalize_into", "Program", "CoreFunction", "TreeSpec", "spec_of",
           "Static", "TreeRef", "Prim", "math", "pytypes"]


def _keep_mark(constant, original):
    """`constant` marked as the user's when `original` is (templates.mark_user_constants)."""
    if getattr(original, USER_CONSTANT, False):
        setattr(constant, USER_CONSTANT, True)
    return constant
