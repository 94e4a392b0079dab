"""The compiled dialect: generated source rewritten into what Numba's nopython mode accepts.

Generated modules are plain NumPy. Numba compiles most of it as written, but not everything
(``numba-notes.md``): ``keepdims=``, ``mean/max/min/prod/var/std`` with an axis, ``np.einsum``,
``np.add.at`` (scatter-add with repeated indices), ``np.flip``/``np.roll`` with an axis,
``np.take`` along an axis with indices that are not a vector, ``np.repeat`` along an axis,
``np.atleast_1d``/``2d``/``3d`` of a number, ``np.rot90`` with axes, ``np.vstack``/``np.dstack``
of pieces of different ranks, ``np.kron`` of a vector that is not contiguous, ``np.squeeze``,
``np.matmul``, ``abs`` of an array, ``np.sort``/``np.argsort`` with an axis or of more than one
axis (stable argsort), ``math.cbrt``, ``reshape`` of a non-contiguous array, an integer raised
to a negative integer (0 under Numba), module-level arrays (Numba freezes them into the
compiled code), and ``np.split``'s pieces bound to a name (a list under Numba, a tuple in
generated code). :func:`lower_source` rewrites those into small helper functions emitted into the
module (:data:`codegen.helpers.DIALECT_HELPERS`, or written here for one einsum subscript or one
index pattern) or into equivalent NumPy that Numba supports. Every rewrite computes the same
values in plain Python, so the lowered module also runs without Numba.

The pass reads source text (comment lines survive as markers, so the ``# <user line>`` comments
stay in place for error messages) and returns gast functions for a target to render.

>>> src = '''import numpy as np
...
...
... def grad_f(x):
...     # return np.sum(np.max(x, axis=1))
...     return np.sum(x, axis=0, keepdims=True)
... '''
>>> lowered = lower_source(src, entries=["grad_f"])
>>> print(render(lowered), end="")
import numpy as np
<BLANKLINE>
<BLANKLINE>
def keep_axis(r, axis):
    \"\"\"`r`, reduced over `axis`, with that axis put back with size one (keepdims=True).\"\"\"
    return np.expand_dims(np.asarray(r), axis)
<BLANKLINE>
<BLANKLINE>
def grad_f(x):
    # return np.sum(np.max(x, axis=1))
    return keep_axis(np.sum(x, axis=0), 0)
"""

from __future__ import annotations

import ast
import copy
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field

import gast

from .allocation_spelling import one_allocation_spelling
from .branch_selects import SELECT_HELPERS, SELECT_UNCOMPILED, select_small_branches
from .buffer_reuse import reuse_buffers
from .column_layout import COLUMN_HELPERS, lay_out_columns
from .common_calls import reuse_math_calls
from .copy_targets import COPY_HELPERS, COPY_UNCOMPILED, copy_only_outside
from .dict_outputs import flatten_returned_dicts, rebuilding_expression
from .emit import (
    comment,
    count_names,
    fresh_name,
    is_count,
    is_marker,
    mentions,
    render_function,
    text_of,
    to_ast,
)
from .expression_sizes import SIZE_HELPERS, SIZE_UNCOMPILED, sizes_from_shapes
from .fast_exp import fast_exp_in_source, use_fast_exp
from .forward_math import param_masks, reuse_forward_math
from .fused_regions import (
    FUSED_HELPERS,
    FUSED_UNCOMPILED,
    NEST_HELPERS,
    NEST_UNCOMPILED,
    fuse_regions,
    handles_matrices,
)
from .fused_updates import fuse_outer_adds
from .gather_targets import (
    GATHER_HELPERS,
    GATHER_UNCOMPILED,
    fill_gather_targets,
    reuse_previous_steps,
    skip_reset_entries,
)
from .helpers import DIALECT_DEPENDS, DIALECT_HELPERS, DIALECT_NOT_COMPILED, OVERLOAD_FORMS
from .index_splitting import split_index_ranges
from .inlining import inline_loop_calls
from .int_starts import widen_int_starts
from .invariant_accumulators import (
    ACCUMULATOR_HELPERS,
    ACCUMULATOR_UNCOMPILED,
    sum_invariant_updates,
)
from .invariant_tables import tabulate_invariant_calls
from .loop_fusion import fuse_sum_loops
from .loop_indices import INDEX_HELPERS, INDEX_UNCOMPILED, assume_loop_starts
from .param_writes import dotted_name
from .reduction_loops import REASSOCIATED, outline_reductions
from .row_products import ROW_HELPERS, ROW_UNCOMPILED
from .tape_order import store_values_after
from .tape_rows import read_rows_in_place
from .tie_shares import TIE_HELPERS, TIE_UNCOMPILED, share_ties_in_place
from .update_fission import split_independent_updates
from .window_nests import WINDOW_COMMON, WINDOW_HELPERS, WINDOW_UNCOMPILED, rewrite_window_nests

__all__ = ["LoweredModule", "lower_source", "parse_with_comments", "render"]

_MARK = comment("").value.func.id
_CONTINUATIONS = ("else", "elif", "except", "finally", "case")


# ---------------------------------------------------------------- source <-> gast with comments
def parse_with_comments(source):
    """Parse module source into gast, keeping whole-line comments and blank lines inside
    functions as the emitter's marker statements (so rendering puts them back).

    >>> tree = parse_with_comments("def f(x):\\n    # y = x\\n    return x\\n")
    >>> is_marker(tree.body[0].body[0])
    True
    """
    lines = source.split("\n")
    in_token = set()  # rows covered by a token (multi-line strings included)
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start
            if not lines[row - 1][:col].strip():
                comments[row] = (col, tok.string[1:].strip())
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER):
            in_token.update(range(tok.start[0], tok.end[0] + 1))
    out = []
    for row, line in enumerate(lines, start=1):
        if row in comments:
            col, text = comments[row]
            out.append(" " * col + f"{_MARK}({text!r})")
        elif not line.strip() and row not in in_token:
            out.append(_blank_marker(lines, row))
        else:
            out.append(line)
    return gast.parse("\n".join(out))


def _indent(line):
    return len(line) - len(line.lstrip())


def _blank_marker(lines, row):
    """A blank-line marker at an indentation valid for its position (or an empty line)."""
    before = next((ln for ln in reversed(lines[:row - 1]) if ln.strip()), "")
    after = next((ln for ln in lines[row:] if ln.strip()), "")
    if not before or not after or _indent(before) == 0 or _indent(after) == 0:
        return ""
    word = re.match(r"\s*(\w*)", after).group(1)
    col = _indent(before) if word in _CONTINUATIONS else _indent(after)
    if before.rstrip().endswith(":") and col > _indent(before):
        return ""
    return " " * col + f"{_MARK}(None)"


# ---------------------------------------------------------------- the lowered module
@dataclass
class LoweredModule:
    """A module in the compiled dialect: header statements, functions, entry wrappers."""

    header: list  # docstring, imports and module-level comment markers (gast statements)
    functions: list  # gast FunctionDefs: dialect helpers first, then the generated functions
    helpers: set = field(default_factory=set)  # names of the helpers emitted (their sources)
    helper_functions: set = field(default_factory=set)  # every function those sources define
    data: list = field(default_factory=list)  # module arrays passed to functions as arguments
    wrappers: dict = field(default_factory=dict)  # entry name -> plain wrapper FunctionDef
    compiled: set = field(default_factory=set)  # names of functions a target compiles
    data_args: dict = field(default_factory=dict)  # entry name -> data names appended to calls
    jit_options: dict = field(default_factory=dict)  # function -> extra njit options (text)
    # entry name -> spec of the dicts it returns as tuples (codegen/dict_outputs.py)
    dict_outputs: dict = field(default_factory=dict)

    def entry_name(self, entry):
        """The name to call for `entry` (its wrapper when it needs module data)."""
        wrapper = self.wrappers.get(entry)
        return wrapper.name if wrapper is not None else entry


def _called(helpers, sources):
    """The entries of `helpers` (name -> source) that `sources` call, directly or through the
    helpers they call: a module gets the helpers its fused runs use, no others."""
    chosen, texts = {}, list(sources)
    while texts:
        text = texts.pop()
        for name, source in helpers.items():
            if name not in chosen and re.search(rf"\b{name}\(", text):
                chosen[name] = source
                texts.append(source)
    return chosen


def render(lowered, decorator=None, doc_note=None):
    """Source text of a lowered module; `decorator` (e.g. ``numba.njit(cache=True)``) goes on
    every compiled function (or, when callable, `decorator(function name)` does), `doc_note` is
    appended to the module docstring."""
    parts = []
    header = list(lowered.header)
    if doc_note and not (header and _is_docstring(header[0])):
        header.insert(0, gast.Expr(value=gast.Constant(value="", kind=None)))
    for i, stmt in enumerate(header):
        if i == 0 and _is_docstring(stmt) and doc_note:
            text = stmt.value.value.rstrip("\n")
            text = (text + "\n\n" if text else "") + doc_note.strip("\n") + "\n"
            stmt = gast.Expr(value=gast.Constant(value=text, kind=None))
        parts.append(_render_stmt(stmt))
    text = _join_header(parts)
    pieces = []
    for fn in lowered.functions:
        chosen = decorator(fn.name) if callable(decorator) else decorator
        pieces.append(render_function(fn, chosen if fn.name in lowered.compiled else None))
    for wrapper in lowered.wrappers.values():
        pieces.append(render_function(wrapper))
    body = "\n\n\n".join(pieces)
    return (text + "\n\n\n" + body if text else body) + "\n"


def _is_docstring(stmt):
    return isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Constant) and \
        isinstance(stmt.value.value, str)


def _render_stmt(stmt):
    if is_marker(stmt):
        value = stmt.value.args[0].value
        return "" if value is None else f"# {value}"
    if _is_docstring(stmt):
        return '"""' + stmt.value.value.replace('"""', "'''") + '"""'
    return ast.unparse(to_ast(stmt))


def _join_header(parts):
    lines = []
    for text in parts:
        if text == "" and (not lines or lines[-1] == ""):
            continue
        lines.append(text)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


# ---------------------------------------------------------------- small gast helpers
def _expr(text):
    return gast.parse(text, mode="eval").body


def _name(identifier):
    return gast.Name(id=identifier, ctx=gast.Load(), annotation=None, type_comment=None)


def _call(func, args, keywords=()):
    return gast.Call(func=_expr(func) if isinstance(func, str) else func, args=list(args),
                     keywords=list(keywords))


def _const(node):
    """The Python value of a constant expression (ints, floats, None, tuples), else _NOPE."""
    if isinstance(node, gast.Constant):
        return node.value
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        inner = _const(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    if isinstance(node, gast.Tuple):
        values = [_const(e) for e in node.elts]
        if all(v is not _NOPE for v in values):
            return tuple(values)
    return _NOPE


_NOPE = object()


def _num(value):
    if isinstance(value, (int, float)) and value < 0:
        return gast.UnaryOp(op=gast.USub(), operand=gast.Constant(value=-value, kind=None))
    return gast.Constant(value=value, kind=None)


def _bind(node, params):
    """Arguments of a call by parameter name; None when it passes something unexpected."""
    bound = {}
    if len(node.args) > len(params):
        return None
    for p, a in zip(params, node.args):
        bound[p] = a
    for kw in node.keywords:
        if kw.arg is None or kw.arg not in params:
            return None
        bound[kw.arg] = kw.value
    return bound


_REDUCTIONS = {
    "np.sum": ("x", "axis", "dtype", "out", "keepdims"),
    "np.mean": ("x", "axis", "dtype", "out", "keepdims"),
    "np.prod": ("x", "axis", "dtype", "out", "keepdims"),
    "np.max": ("x", "axis", "out", "keepdims"),
    "np.amax": ("x", "axis", "out", "keepdims"),
    "np.min": ("x", "axis", "out", "keepdims"),
    "np.amin": ("x", "axis", "out", "keepdims"),
    "np.var": ("x", "axis", "dtype", "out", "ddof", "keepdims"),
    "np.std": ("x", "axis", "dtype", "out", "ddof", "keepdims"),
}
_ONE_AXIS = {"np.sum": None, "np.mean": "mean_axis", "np.prod": "prod_axis",
             "np.max": "max_axis", "np.amax": "max_axis", "np.min": "min_axis",
             "np.amin": "min_axis"}


#: Reductions of a whole array the Numba form of a module computes with a helper's loop.
_WHOLE = {"np.max": "whole_max", "np.amax": "whole_max", "np.min": "whole_min",
          "np.amin": "whole_min"}


def _ordered_axes(axes):
    """Axes in an order where reducing one at a time keeps the others' meaning: non-negative
    ones from the last, then negative ones from the first."""
    pos = sorted((a for a in axes if a >= 0), reverse=True)
    neg = sorted(a for a in axes if a < 0)
    return pos + neg


def _kept_order(axes):
    """Axes in an order where putting back one at a time (np.expand_dims) puts each where
    keepdims=True does: non-negative ones from the first, then negative ones from the last."""
    return sorted(a for a in axes if a >= 0) + sorted((a for a in axes if a < 0), reverse=True)


def _axes_unambiguous(axes):
    """Whether reducing (or keeping) integer `axes` one at a time in the orders above is right
    for every rank the axes are valid for: true unless some negative axis can lie left of a
    non-negative one, as (2, -3) does for an array of rank 4 (the rank is not known here).

    >>> _axes_unambiguous((0, -1)), _axes_unambiguous((2, -3))
    (True, False)
    """
    pos = [a for a in axes if a >= 0]
    neg = [a for a in axes if a < 0]
    if not pos or not neg:
        return True
    for rank in range(max(max(pos) + 1, -min(neg)), max(pos) - min(neg) + 1):
        placed = pos + [rank + a for a in neg]
        if len(set(placed)) == len(placed) and min(rank + a for a in neg) < max(pos):
            return False
    return True


def _axis_keywords(args):
    """New `axis=` and `keepdims=` keywords of a bound call, those it was given."""
    return [gast.keyword(arg=k, value=args[k]) for k in ("axis", "keepdims") if k in args]


def _lists_as_tuples(node):
    """A copy of a display with its list displays written as tuples (for _const)."""
    class _Tuples(gast.NodeTransformer):
        def visit_List(self, lst):
            self.generic_visit(lst)
            return gast.Tuple(elts=lst.elts, ctx=gast.Load())
    return _Tuples().visit(copy.deepcopy(node))


#: NumPy's splitting functions, by dotted name: their parameters
_SPLITS = {"np.split": ("ary", "indices_or_sections", "axis"),
           "np.array_split": ("ary", "indices_or_sections", "axis"),
           "np.hsplit": ("ary", "indices_or_sections"),
           "np.vsplit": ("ary", "indices_or_sections"),
           "np.dsplit": ("ary", "indices_or_sections")}


def _split_cuts(node):
    """The sections (an int) or indices (a tuple) of a call of np.split and its kin, written
    as constants; else _NOPE (not such a call, or cuts held in a name)."""
    args = _bind(node, _SPLITS[dotted_name(node.func)]) if isinstance(node, gast.Call) and \
        dotted_name(node.func) in _SPLITS else None
    if args is None or "indices_or_sections" not in args:
        return _NOPE
    return _const(_lists_as_tuples(args["indices_or_sections"]))


_BOOLEAN_FUNCTIONS = {"np.logical_and", "np.logical_or", "np.logical_xor", "np.logical_not",
                      "np.isnan", "np.isinf", "np.isfinite", "np.signbit", "np.isclose",
                      "np.greater", "np.less", "np.equal", "np.not_equal", "np.greater_equal",
                      "np.less_equal"}


def _boolean_names(fn):
    """Names `fn` binds only to comparisons, logical functions or operators of those names
    (``cond = x < 0``, ``keep = ~cond & other``): boolean arrays (or booleans)."""
    bound = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            for target in node.targets:
                for n in gast.walk(target):
                    if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                        bound.setdefault(n.id, []).append(
                            node.value if n is target else None)
        elif isinstance(node, (gast.AugAssign, gast.For, gast.AnnAssign)):
            for n in gast.walk(node.target):
                if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                    bound.setdefault(n.id, []).append(None)
        elif isinstance(node, gast.arguments):
            for arg in node.args:
                bound.setdefault(arg.id, []).append(None)
    boolean = set()

    def is_boolean(value):
        if isinstance(value, gast.Compare):
            return True
        if isinstance(value, gast.Name):
            return value.id in boolean
        if isinstance(value, gast.UnaryOp) and isinstance(value.op, (gast.Invert, gast.Not)):
            return is_boolean(value.operand)
        if isinstance(value, gast.BinOp) and isinstance(value.op, (gast.BitAnd, gast.BitOr,
                                                                   gast.BitXor)):
            return is_boolean(value.left) and is_boolean(value.right)
        return isinstance(value, gast.Call) and dotted_name(value.func) in _BOOLEAN_FUNCTIONS
    changed = True
    while changed:
        changed = False
        for n, values in bound.items():
            if n not in boolean and all(v is not None and is_boolean(v) for v in values):
                boolean.add(n)
                changed = True
    return boolean


def _split_count(node):
    """The number of pieces a call of np.split and its kin gives, or None when `node` is no
    such call or its cuts are not written as constants.

    >>> _split_count(_expr("np.array_split(x, [1, 4], axis=1)")), _split_count(_expr("x"))
    (3, None)
    """
    cuts = _split_cuts(node)
    if isinstance(cuts, int) and not isinstance(cuts, bool) and cuts > 0:
        return cuts
    return len(cuts) + 1 if isinstance(cuts, tuple) else None


# ---------------------------------------------------------------- the lowering pass
# Python's number classes as dtypes: Numba takes `np.zeros(n, dtype=float)` but not
# `x.astype(float)` or `np.asarray(x, dtype=float)`; NumPy reads them as these.
_PYTHON_DTYPES = {"float": "np.float64", "int": "np.int64", "bool": "np.bool_",
                  "complex": "np.complex128"}


def _numpy_dtypes(call):
    """`x.astype(float)` as `x.astype(np.float64)`, and a `dtype=float` keyword (of any call)
    as `dtype=np.float64` (the same in NumPy; only the second compiles under Numba)."""
    def numpy_class(node):
        if isinstance(node, gast.Name) and node.id in _PYTHON_DTYPES:
            return _expr(_PYTHON_DTYPES[node.id])
        return node
    if isinstance(call.func, gast.Attribute) and call.func.attr == "astype" and call.args:
        call.args[0] = numpy_class(call.args[0])
    for keyword in call.keywords:
        if keyword.arg == "dtype":
            keyword.value = numpy_class(keyword.value)


class _Lower(gast.NodeTransformer):
    """Rewrites one function's calls into the dialect; collects the helpers they need."""

    def __init__(self, module):
        self.module = module
        self.slices = {}  # name -> the slice(...) call it is bound to, once, in this function
        self.ints = set()  # names that only ever hold an integer in this function
        self.arrays = set()  # local names never bound to a list (so a[...] += v updates an array)
        self.lists = set()  # local names bound to a list built with append
        self.index_lists = set()  # local names bound once to a list of int constants
        self.local = set()  # names this function binds, its parameters among them
        self.masks = set()  # its parameters that may be boolean vectors (see visit_FunctionDef)

    def visit_FunctionDef(self, node):
        self.slices = _slice_names(node)
        params = {a.id for a in node.args.args}
        rebound, declared = set(), set()  # (declared: parameters, a nested lambda's too)
        for n in gast.walk(node):
            if isinstance(n, gast.Name) and not isinstance(n.ctx, gast.Load):
                (declared if isinstance(n.ctx, gast.Param) else rebound).add(n.id)
        self.local = params | declared | rebound
        # parameters named as an entry's boolean vector argument, never rebound (a function
        # an entry passes it to keeps its name: vmap's per-example function; a namesake that
        # is no mask only gets index_array's identity)
        self.masks = (params & self.module.masks) - rebound
        # names that only ever hold a comparison's (or a logical function's) boolean array
        self.boolean = _boolean_names(node)
        self.ints = _int_names(node)
        self.arrays = _local_non_lists(node)
        self.lists = _local_lists(node)
        self.index_lists = _index_lists(node)
        self.generic_visit(node)
        return node

    def helper(self, name):
        self.module.need(name)
        return name

    # -- calls
    def visit_Call(self, node):
        self.generic_visit(node)
        _numpy_dtypes(node)
        func = dotted_name(node.func)
        if func in _REDUCTIONS:
            return self.reduction(node, func)
        method = getattr(self, "call_" + (func or "").replace(".", "_"), None)
        if method is not None:
            result = method(node)
            if result is not None:
                return result
        if isinstance(node.func, gast.Attribute) and node.func.attr == "reshape" and \
                func != "np.reshape":
            node.func.value = self.contiguous(node.func.value)
        return node

    def contiguous(self, array):
        """`array` as a C-contiguous array a reshape may view: itself when it is one,
        ``first_axis_last(x)`` for jacfwd's ``np.moveaxis(x, 0, -1)``, else
        ``np.ascontiguousarray(array)``."""
        moved = _moved_first_axis_last(array)
        if moved is not None:
            return _call(self.helper("first_axis_last"), [moved])
        return array if _is_contiguous_call(array) else _call("np.ascontiguousarray", [array])

    def visit_Return(self, node):
        """``return np.moveaxis(rows, 0, -1)`` (jacfwd of a vector function): a new array,
        as the caller cannot tell (Numba compiles np.moveaxis slowly, see first_axis_last)."""
        self.generic_visit(node)
        values = node.value.elts if isinstance(node.value, gast.Tuple) else [node.value]
        moved = [v if _moved_first_axis_last(v) is None else self.contiguous(v) for v in values]
        if isinstance(node.value, gast.Tuple):
            node.value.elts = moved
        else:
            node.value = moved[0]
        return node

    def reduction(self, node, func):
        args = _bind(node, _REDUCTIONS[func])
        if args is None or "out" in args or "dtype" in args:
            return node
        x = args["x"]
        axis = _const(args["axis"]) if "axis" in args else None
        if axis is _NOPE:  # an axis held in a name: one integer axis
            axis = args["axis"]
        if isinstance(axis, tuple) and not _axes_unambiguous(axis):
            return node  # left as written: Numba computes it or refuses it, naming the line
        keep = _const(args.get("keepdims", gast.Constant(value=False, kind=None)))
        if keep is _NOPE:
            return node
        ddof = args.get("ddof", gast.Constant(value=0, kind=None))
        if func in ("np.var", "np.std"):
            value = self.variance(x, axis, ddof)
            if value is None:
                return node
            if func == "np.std":
                value = _call("np.sqrt", [value])
        elif axis is None:
            whole = func == "np.sum" and self.module.loop_free
            if func == "np.sum" and self.module.numba_overloads and \
                    isinstance(x, gast.BinOp) and isinstance(x.op, gast.Mult):
                value = _call(self.helper("sum_of_products"), [x.left, x.right])
            elif func in _WHOLE and self.module.numba_overloads:
                value = _call(self.helper(_WHOLE[func]), [x])
            else:
                value = _call(self.helper("reassociated_sum") if whole else func, [x])
        else:
            value = self.per_axis(func, x, axis)
        if keep:
            value = self.keep(value, x, axis)
        return value

    def per_axis(self, func, x, axis):
        axes = axis if isinstance(axis, tuple) else (axis,)
        value = x
        order = _ordered_axes(axes) if all(isinstance(a, int) for a in axes) else axes
        for a in order:
            a_node = a if isinstance(a, gast.AST) else _num(a)
            if _ONE_AXIS[func] is None and self.module.numba_overloads:
                value = self.sum_along(value, a_node)
            elif _ONE_AXIS[func] is None:
                value = _call("np.sum", [value], [gast.keyword(arg="axis", value=a_node)])
            else:
                value = _call(self.helper(_ONE_AXIS[func]), [value, a_node])
        return value

    def sum_along(self, x, axis):
        """np.sum(x, axis=axis) under Numba: `-e` summed as `-(sum of e)` (a negation of
        the smaller result, not of every element), `a * b` by sum_axis_of_products (no
        temporary product), anything else by sum_axis."""
        if isinstance(x, gast.UnaryOp) and isinstance(x.op, gast.USub):
            return gast.UnaryOp(op=gast.USub(), operand=self.sum_along(x.operand, axis))
        if isinstance(x, gast.BinOp) and isinstance(x.op, gast.Mult):
            return _call(self.helper("sum_axis_of_products"), [x.left, x.right, axis])
        return _call(self.helper("sum_axis"), [x, axis])

    def variance(self, x, axis, ddof):
        if axis is None:
            var = _call("np.var", [x])
            if _const(ddof) == 0:
                return var
            if not isinstance(x, gast.Name):
                return None
            return _expr(f"np.var({x.id}) * {x.id}.size / ({x.id}.size - {text_of(ddof)})")
        if not isinstance(axis, tuple):
            return _call(self.helper("var_axis"), [x, axis if isinstance(axis, gast.AST)
                                                   else _num(axis), ddof])
        if not isinstance(x, gast.Name) or not all(isinstance(a, int) for a in axis):
            return None
        # several axes: the mean over them, kept, then the mean of squared deviations
        mean = self.keep(self.per_axis("np.mean", x, axis), x, axis)
        centered = gast.BinOp(left=_name(x.id), op=gast.Sub(), right=mean)
        squares = gast.BinOp(left=centered, op=gast.Mult(), right=centered)
        total = self.per_axis("np.sum", squares, axis)
        count = " * ".join(f"{x.id}.shape[{a}]" for a in axis)
        return gast.BinOp(left=total, op=gast.Div(),
                          right=_expr(f"({count} - {text_of(ddof)})"))

    def keep(self, value, x, axis):
        if axis is None:
            return _call(self.helper("keep_all"), [value, x])
        axes = axis if isinstance(axis, tuple) else (axis,)
        order = _kept_order(axes) if all(isinstance(a, int) for a in axes) else axes
        for a in order:
            value = _call(self.helper("keep_axis"), [value, a if isinstance(a, gast.AST)
                                                     else _num(a)])
        return value

    def call_format(self, node):
        """`format(v, spec)` in a message: Numba has no format(); message_format applies a
        constant spec."""
        if len(node.args) != 2 or node.keywords:
            return None
        if not (isinstance(node.args[1], gast.Constant) and isinstance(node.args[1].value, str)):
            return _call(self.helper("message_text"), node.args[:1])
        return _call(self.helper("message_format"), node.args)

    def call_str(self, node):
        """`str(v)` (generated code writes one only into an exception's message): a helper
        that writes floats, shapes and arrays as Numba's str() does not."""
        if len(node.args) != 1 or node.keywords:
            return None
        return _call(self.helper("message_text"), node.args)

    def call_np_flip(self, node):
        args = _bind(node, ("m", "axis"))
        if args is None or "axis" not in args or _const(args["axis"]) is None:
            return None
        axes = _const(args["axis"])
        axes = axes if isinstance(axes, tuple) else (args["axis"],)
        value = args["m"]
        for a in axes:
            value = _call(self.helper("flip_axis"), [value, a if isinstance(a, gast.AST)
                                                     else _num(a)])
        return value

    def call_np_roll(self, node):
        args = _bind(node, ("a", "shift", "axis"))
        if args is None or "axis" not in args or _const(args["axis"]) is None:
            return None
        if isinstance(_const(args["axis"]), tuple):
            return None
        return _call(self.helper("roll_axis"), [args["a"], args["shift"], args["axis"]])

    def call_np_diagonal(self, node):
        """np.diagonal (Numba has none): a matrix's is np.diag's; over the last two axes of a
        stack with offset 0, a helper."""
        if len(node.args) == 1 and not node.keywords:
            return _call("np.diag", node.args)
        args = _bind(node, ("a", "offset", "axis1", "axis2"))
        if args is None or _const(args.get("offset", _num(0))) != 0:
            return None
        axis1, axis2 = args.get("axis1", _num(0)), args.get("axis2", _num(1))
        if not isinstance(_const(axis1), int) or not isinstance(_const(axis2), int):
            return None
        return _call(self.helper("diagonal_of"), [args["a"], axis1, axis2])

    def call_np_take(self, node):
        args = _bind(node, ("a", "indices", "axis", "out", "mode"))
        if args is None or set(args) != {"a", "indices", "axis"} or \
                _const(args["axis"]) is None:
            return None
        return _call(self.helper("take_axis"), [args["a"], args["indices"], args["axis"]])

    def call_np_repeat(self, node):
        args = _bind(node, ("a", "repeats", "axis"))
        if args is None or "axis" not in args or _const(args["axis"]) is None:
            return None
        return _call(self.helper("repeat_axis"), [args["a"], args["repeats"], args["axis"]])

    def call_np_diff(self, node):
        """np.diff along a given axis (Numba's takes the last axis only): the differences
        written as slices, `n` times (`x[:, 1:] - x[:, :-1]` along axis 1)."""
        args = _bind(node, ("a", "n", "axis"))
        if args is None or "axis" not in args:
            return None
        axis, n = _const(args["axis"]), _const(args.get("n", _num(1)))
        if not isinstance(axis, int) or axis < 0 or not isinstance(n, int) or not 0 <= n <= 3:
            return None  # (the last axis, -1, is Numba's own)
        if n == 0:
            return None
        before = ":, " * axis
        text = "a"
        for _ in range(n):
            text = f"({text})[{before}1:] - ({text})[{before}:-1]"
        expr = gast.parse(text, mode="eval").body
        for parent in gast.walk(expr):
            for attr, value in gast.iter_fields(parent):
                if isinstance(value, gast.Name) and value.id == "a":
                    setattr(parent, attr, copy.deepcopy(args["a"]))
        return expr

    def call_np_tile(self, node):
        # Numba has no np.tile: one count, or a tuple of one or two, by a helper (longer
        # tuples stay, and Numba refuses them at the user's line)
        args = _bind(node, ("A", "reps"))
        if args is None or "reps" not in args:
            return None
        reps = args["reps"]
        if not isinstance(reps, (gast.Tuple, gast.List)):
            return _call(self.helper("tile_count"), [args["A"], reps])
        if len(reps.elts) == 1:
            return _call(self.helper("tile_count"), [args["A"], reps.elts[0]])
        if len(reps.elts) == 2:
            return _call(self.helper("tile_rows_columns"), [args["A"]] + list(reps.elts))
        return None

    def call_np_atleast_1d(self, node):
        # Numba's atleast_2d/3d refuse a number (0-d arrays are fine)
        if len(node.args) != 1 or node.keywords or _is_array_call(node.args[0]):
            return None
        node.args[0] = _call("np.asarray", node.args)
        return node

    call_np_atleast_2d = call_np_atleast_3d = call_np_atleast_1d

    def call_np_rot90(self, node):
        # Numba's rot90 takes no axes: quarter turns are flips and a swap of the two axes
        args = _bind(node, ("m", "k", "axes"))
        if args is None or "axes" not in args:
            return None
        k, axes = _const(args.get("k", _num(1))), _const(args["axes"])
        if not isinstance(k, int) or not isinstance(axes, tuple) or len(axes) != 2:
            return None
        a, b = axes
        value = args["m"]
        turns = k % 4
        if turns == 0:
            return _call("np.copy", [value])
        if turns == 1:
            return _call("np.swapaxes", [self.flipped(value, b), _num(a), _num(b)])
        if turns == 2:
            return self.flipped(self.flipped(value, a), b)
        return self.flipped(_call("np.swapaxes", [value, _num(a), _num(b)]), b)

    def flipped(self, value, axis):
        return _call(self.helper("flip_axis"), [value, _num(axis)])

    def call_np_kron(self, node):
        # Numba's kron refuses a vector that is not contiguous (a column of a matrix)
        if len(node.args) != 2 or node.keywords:
            return None
        node.args = [a if _is_contiguous_call(a) else _call("np.ascontiguousarray", [a])
                     for a in node.args]
        return node

    def call_np_inner(self, node):
        if len(node.args) != 2 or node.keywords or not self.module.numba_overloads:
            return None
        return _call(self.helper("inner_product"), node.args)

    def call_np_vdot(self, node):
        # Numba's np.vdot takes vectors; NumPy's flattens its operands (real ones here)
        if len(node.args) != 2 or node.keywords:
            return None
        return _call("np.dot", [_call("np.ravel", [a]) for a in node.args])

    def call_np_squeeze(self, node):
        args = _bind(node, ("a", "axis"))
        if args is None or not _view_of_a_name(args["a"]):
            return None
        axis = _const(args.get("axis", gast.Constant(value=None, kind=None)))
        x = text_of(args["a"])
        if axis is None:  # the types saw no axis of size one: checked, the rank kept
            if "axis" in args or not self.module.numba_overloads:
                return None
            return _call(self.helper("squeeze_none"), [args["a"]])
        if axis == -1:
            return _expr(f"np.ascontiguousarray({x}).reshape({x}.shape[:-1])")
        axes = (axis,) if isinstance(axis, int) else axis
        if not (isinstance(axes, tuple) and axes and
                all(isinstance(a, int) and a >= 0 for a in axes)):
            return None
        # the shape without those axes, read in pieces between them (no rank needed)
        cuts = sorted(set(axes))
        pieces = [f"{x}.shape[{lo or ''}:{'' if hi is None else hi}]" for lo, hi in
                  zip([0] + [a + 1 for a in cuts], cuts + [None])]
        return _expr(f"np.ascontiguousarray({x}).reshape({' + '.join(pieces)})")

    def call_np_expand_dims(self, node):
        args = _bind(node, ("a", "axis"))
        if args is None or "axis" not in args:
            return None
        axes = _const(args["axis"])
        if not isinstance(axes, tuple):
            axes = (args["axis"],)
        elif not all(isinstance(a, int) and a >= 0 for a in axes):
            return None
        value = args["a"]
        if not _is_array_call(value):  # Numba's expand_dims refuses scalars
            value = _call("np.asarray", [value])
        for a in sorted(axes) if len(axes) > 1 else axes:
            value = _call("np.expand_dims", [value, a if isinstance(a, gast.AST) else _num(a)])
        return value

    def call_np_linalg_multi_dot(self, node):
        # Numba has no multi_dot: the products from the left
        if len(node.args) != 1 or node.keywords or \
                not isinstance(node.args[0], (gast.List, gast.Tuple)):
            return None
        value = node.args[0].elts[0]
        for operand in node.args[0].elts[1:]:
            value = _call("np.dot", [value, operand])
        return value

    def call_np_linalg_solve(self, node):
        # Numba's solve takes no stacks: batched code's solves of stacks (solve_stacks)
        if not self.module.numba_overloads or len(node.args) != 2 or node.keywords:
            return None
        return _call(self.helper("solve_stacks"), node.args)

    def call_np_linalg_svd(self, node):
        # Numba's svd takes no compute_uv: the singular values are the second of its outputs
        args = _bind(node, ("a", "full_matrices", "compute_uv", "hermitian"))
        if args is None or "hermitian" in args or "compute_uv" not in args:
            return None
        if _const(args["compute_uv"]) is not False:
            return None
        return _expr(f"np.linalg.svd({text_of(args['a'])}, False)[1]")

    def call_np_tensordot(self, node):
        # Numba has no tensordot: the contracted axes moved last in a and first in b, then one
        # matrix product of the two reshaped (the shapes' slices are constants to Numba)
        args = _bind(node, ("a", "b", "axes"))
        axes = _const(_lists_as_tuples(args.get("axes", _num(2)))) if args is not None else _NOPE
        if isinstance(axes, int):
            a, b, n = text_of(args["a"]), text_of(args["b"]), axes
        elif isinstance(axes, tuple) and len(axes) == 2:
            ia, ib = (t if isinstance(t, tuple) else (t,) for t in axes)
            n = len(ia)
            a = f"np.moveaxis({text_of(args['a'])}, {ia}, {tuple(range(-n, 0))})"
            b = f"np.moveaxis({text_of(args['b'])}, {ib}, {tuple(range(n))})"
        else:
            return None
        size = " * ".join(f"{a}.shape[{-k}]" for k in range(1, n + 1)) or "1"
        shape = f"{a}.shape[:{-n}] + {b}.shape[{n}:]" if n else f"{a}.shape + {b}.shape"
        return _expr(f"np.dot(np.ascontiguousarray({a}).reshape((-1, {size})), "
                     f"np.ascontiguousarray({b}).reshape(({size}, -1))).reshape({shape})")

    def call_np_linalg_norm(self, node):
        # Numba's norm takes no axis and no string order: along an axis, the 2-norm is a
        # square root of a sum, ord=1, inf, -inf a sum, maximum or minimum of np.abs; 'fro'
        # is the default order of a matrix.
        args = _bind(node, ("x", "ord", "axis", "keepdims"))
        if args is None:
            return None
        order = _const(args.get("ord", gast.Constant(value=None, kind=None)))
        if order in (None, "fro") and "axis" not in args and "keepdims" not in args:
            if not self.module.numba_overloads:
                return _call("np.linalg.norm", [args["x"]]) if order == "fro" else None
            return _call(self.helper("norm_any_rank"), [args["x"]])
        if order == "nuc" and "axis" not in args and "keepdims" not in args:
            # the sum of the singular values (Numba's norm takes no string order)
            return _expr(f"np.sum(np.linalg.svd({text_of(args['x'])}, False)[1])")
        if not isinstance(args["x"], gast.Name) or "axis" not in args and not (
                "keepdims" in args and order in (None, "fro")):
            return None  # (keepdims without an axis: the 2-norm of every entry, kept)
        x = args["x"].id
        keywords = _axis_keywords(args)
        if order is None or order == 2:
            total = _expr(f"np.sum({x} * {x})")
            total.keywords = keywords
            return _call("np.sqrt", [self.reduction(total, "np.sum")])
        func = {1: "np.sum", float("inf"): "np.max", -float("inf"): "np.min"}.get(order) \
            if isinstance(order, (int, float)) else None
        if func is None and isinstance(order, (int, float)) and order not in (0, True, False):
            # another p-norm: the p-th root of the sum of |x|^p
            total = _expr(f"np.sum(np.abs({x}) ** {float(order)!r})")
            total.keywords = keywords
            return _call("np.power", [self.reduction(total, "np.sum"), _num(1.0 / order)])
        if func is None:
            return None
        return self.reduction(_call(func, [_expr(f"np.abs({x})")], keywords), func)

    def call_np_trapezoid(self, node):
        # Numba's trapezoid integrates along the last axis only: another axis is moved there
        # first (np.moveaxis keeps the other axes in order, as NumPy's result has them).
        args = _bind(node, ("y", "x", "dx", "axis"))
        if args is None or "axis" not in args or _const(args["axis"]) == -1:
            return None
        y = _call("np.moveaxis", [args["y"], args["axis"], _num(-1)])
        rest = [gast.keyword(arg=k, value=args[k]) for k in ("x", "dx") if k in args]
        return _call("np.trapezoid", [y], rest)

    def call_np_clip(self, node):
        # Numba's clip refuses scalars; clip(x, lo, hi) is maximum then minimum in NumPy too.
        args = _bind(node, ("a", "a_min", "a_max"))
        if args is None or "a_min" not in args or "a_max" not in args:
            return None
        value = args["a"]
        if _const(args["a_min"]) is not None:
            value = _call("np.maximum", [value, args["a_min"]])
        if _const(args["a_max"]) is not None:
            value = _call("np.minimum", [value, args["a_max"]])
        return value

    def call_np_reshape(self, node):
        args = _bind(node, ("a", "newshape"))
        if args is None or "newshape" not in args:
            return None
        base = self.contiguous(args["a"])
        return _call(gast.Attribute(value=base, attr="reshape", ctx=gast.Load()),
                     [args["newshape"]])

    def call_np_dot(self, node):
        if len(node.args) != 2 or node.keywords:
            return None
        if self.module.general_dot:
            return _call(self.helper("dot_nd"), node.args)
        if self.module.numba_overloads and not self.module.loop_free:
            return _call(self.helper("small_dot"), node.args)
        return None

    def call_np_tanh(self, node):
        if not self.module.numba_overloads or len(node.args) != 1 or node.keywords:
            return None
        return _call(self.helper("tanh_fast"), node.args)

    def call_np_matmul(self, node):
        if len(node.args) != 2 or node.keywords:
            return None
        if self.module.general_dot:
            return _call(self.helper("matmul_nd"), node.args)
        return gast.BinOp(left=node.args[0], op=gast.MatMult(), right=node.args[1])

    def call_abs(self, node):
        if len(node.args) != 1 or node.keywords:
            return None
        return _call("np.abs", node.args)

    def call_np_sort(self, node):
        # Numba's np.sort takes no options (it sorts along the last axis); `kind` does not
        # change sorted values.
        args = _bind(node, ("a", "axis", "kind", "order"))
        if args is None or "order" in args or set(args) == {"a"}:
            return None
        if "axis" not in args:
            return _call("np.sort", [args["a"]])
        if _const(args["axis"]) is None:
            return _call("np.sort", [_call("np.ravel", [args["a"]])])
        return _call(self.helper("sort_axis"), [args["a"], args["axis"]])

    def call_np_cumprod(self, node):
        args = _bind(node, ("a", "axis", "dtype", "out"))
        if args is None or set(args) != {"a", "axis"} or _const(args["axis"]) is None:
            return None
        return _call(self.helper("cumprod_axis"), [args["a"], args["axis"]])

    def call_np_ptp(self, node):
        # Numba's ptp takes no axis: the maximum minus the minimum, each lowered as a reduction
        args = _bind(node, ("a", "axis", "out", "keepdims"))
        if args is None or "out" in args or set(args) == {"a"}:
            return None
        ends = [self.reduction(_call(func, [args["a"]], _axis_keywords(args)), func)
                for func in ("np.max", "np.min")]
        return gast.BinOp(left=ends[0], op=gast.Sub(), right=ends[1])

    def call_np_average(self, node):
        # Numba's average takes no axis: the mean, or the weighted sums' quotient
        args = _bind(node, ("a", "axis", "weights", "returned", "keepdims"))
        if args is None or "returned" in args:
            return None
        weights = args.get("weights")
        if weights is None or _const(weights) is None:
            return self.reduction(_call("np.mean", [args["a"]], _axis_keywords(args)), "np.mean")
        keep = _const(args.get("keepdims", gast.Constant(value=False, kind=None)))
        axis = _const(args.get("axis", gast.Constant(value=None, kind=None)))
        if keep is _NOPE or isinstance(axis, tuple):
            return None
        a = args["a"]
        if axis is None:
            value = gast.BinOp(left=_call("np.sum", [gast.BinOp(left=a, op=gast.Mult(),
                                                                  right=weights)]),
                               op=gast.Div(), right=_call("np.sum", [weights]))
        else:
            value = _call(self.helper("weighted_average"), [a, args["axis"], weights])
            axis = args["axis"] if axis is _NOPE else axis
        return self.keep(value, a, axis) if keep else value

    def call_np_nansum(self, node, mean=False):
        # Numba's nansum and nanmean take no axis: sums of the entries that are not NaN
        args = _bind(node, ("a", "axis", "dtype", "out", "keepdims"))
        if args is None or not set(args) <= {"a", "axis", "keepdims"} or set(args) == {"a"} \
                or not isinstance(args["a"], gast.Name):
            return None
        x = args["a"].id
        total = self.reduction(_call("np.sum", [_expr(f"np.where(np.isnan({x}), 0.0, {x})")],
                                     _axis_keywords(args)), "np.sum")
        if not mean:
            return total
        count = self.reduction(_call("np.sum", [_expr(f"~np.isnan({x})")],
                                     _axis_keywords(args)), "np.sum")
        return gast.BinOp(left=total, op=gast.Div(), right=count)

    def call_np_nanmean(self, node):
        return self.call_np_nansum(node, mean=True)

    def call_np_median(self, node):
        args = _bind(node, ("a", "axis", "out", "overwrite_input", "keepdims"))
        if args is None or not set(args) <= {"a", "axis", "keepdims"}:
            return None
        keep = _const(args.get("keepdims", gast.Constant(value=False, kind=None)))
        axis = _const(args.get("axis", gast.Constant(value=None, kind=None)))
        if keep is _NOPE or isinstance(axis, tuple):
            return None
        if axis is None:
            value = _call("np.median", [args["a"]])
        else:
            value = _call(self.helper("median_axis"), [args["a"], args["axis"]])
            axis = args["axis"] if axis is _NOPE else axis
        return self.keep(value, args["a"], axis) if keep else value

    def call_np_polyval(self, node):
        args = _bind(node, ("p", "x"))
        if args is None or set(args) != {"p", "x"}:
            return None
        return _call(self.helper("polyval_horner"), [args["p"], args["x"]])

    def call_np_cov(self, node):
        args = _bind(node, ("m", "y", "rowvar", "bias", "ddof", "fweights", "aweights"))
        if args is None or not isinstance(args.get("m"), gast.Name):
            return None
        return _call(self.helper("number_if_vector"), [node, args["m"]])

    def call_np_argsort(self, node):
        # Numba's argsort takes 1-D arrays; the helper is stable (ties keep their order).
        args = _bind(node, ("a", "axis", "kind", "order"))
        if args is None or "order" in args:
            return None
        axis = args.get("axis", _num(-1))
        if _const(axis) is None:
            return _call(self.helper("argsort_axis"), [_call("np.ravel", [args["a"]]),
                                                       _num(0)])
        return _call(self.helper("argsort_axis"), [args["a"], axis])

    def call_np_where(self, node):
        # Numba's np.where of three numbers is a 0-d array (NumPy's too), which Numba will not
        # add to a float; `[()]` makes it the number and leaves an array as it is.
        if len(node.args) != 3 or node.keywords:
            return None
        return gast.Subscript(value=node, slice=gast.Tuple(elts=[], ctx=gast.Load()),
                              ctx=gast.Load())

    def call_np_stack(self, node):
        # Numba stacks a tuple of arrays, not a list (a list of rows built in a loop).
        if node.args and isinstance(node.args[0], gast.List):
            return self.joined(node)
        if len(node.args) != 1 or isinstance(node.args[0], gast.Tuple):
            return None
        axis = [k.value for k in node.keywords if k.arg == "axis"]
        if len(axis) != len(node.keywords) or (axis and _const(axis[0]) != 0):
            return None
        return _call(self.helper("stack_list"), node.args)

    def call_np_full_like(self, node):
        # Numba's np.full_like takes a number to fill with; a cotangent there may be an array
        # (np.full_like(y, y_bar) in a transform of a transform)
        if not self.module.numba_overloads or len(node.args) != 2 or node.keywords or \
                isinstance(node.args[1], gast.Constant):
            return None
        return _call(self.helper("full_like_any"), node.args)

    def call_np_array(self, node):
        # Numba's np.array takes no list of arrays: a local list is stacked (np.array(rows))
        if len(node.args) != 1 or node.keywords:
            return None
        value = node.args[0]
        if isinstance(value, gast.Name) and value.id in self.lists:
            return _call(self.helper("stack_list"), node.args)
        if _is_array_call(value) or (isinstance(value, gast.Call) and
                                     dotted_name(value.func) in _ARRAY_OR_NUMBER):
            # nor an array (np.array(sum_axis(...)): a 0-d output's batched tangent); a copy
            # of np.asarray's view is NumPy's np.array of one
            return _call(gast.Attribute(value=_call("np.asarray", [value]), attr="copy",
                                        ctx=gast.Load()), [])
        return None

    def call_math_cbrt(self, node):
        # Numba has no math.cbrt; np.cbrt of a float is the same number.
        if len(node.args) != 1 or node.keywords:
            return None
        return _call("np.cbrt", node.args)

    def call_np_heaviside(self, node):
        if len(node.args) != 2 or node.keywords or not _repeatable(node.args[0]):
            return None
        x = node.args[0]

        def test(op):
            return gast.Compare(left=copy.deepcopy(x), ops=[op()],
                                comparators=[gast.Constant(value=0, kind=None)])
        # x where it is neither below, above nor equal to 0: NaN stays NaN, as in NumPy
        at_zero = _call("np.where", [test(gast.Eq), node.args[1], copy.deepcopy(x)])
        inner = _call("np.where", [test(gast.Gt), gast.Constant(value=1.0, kind=None),
                                   at_zero])
        return _call("np.where", [test(gast.Lt), gast.Constant(value=0.0, kind=None),
                                  inner])

    def call_np_einsum(self, node):
        if not node.args or node.keywords:
            return None
        spec = _const(node.args[0])
        if not isinstance(spec, str):
            return None
        operands = node.args[1:]
        try:
            ins, out = parse_subscripts(spec, len(operands))
        except ValueError:
            return None
        direct = _einsum_as_dot(ins, out, operands)
        if direct is not None:
            return direct
        name = self.module.einsum_helper(ins, out)
        return _call(name, operands)

    def joined(self, node):
        # Numba joins a tuple of arrays, not a list display (nor a piece written as a list
        # of numbers: np.concatenate([x, [1.0]]) joins np.array([1.0]))
        if node.args and isinstance(node.args[0], (gast.List, gast.Tuple)):
            pieces = [_call("np.array", [e]) if isinstance(e, gast.List) and all(
                _const(v) is not None for v in e.elts) else e for e in node.args[0].elts]
            changed = isinstance(node.args[0], gast.List) or any(
                p is not e for p, e in zip(pieces, node.args[0].elts))
            node.args[0] = gast.Tuple(elts=pieces, ctx=gast.Load())
            return node if changed else None
        return None

    call_np_concatenate = call_np_hstack = call_np_column_stack = joined

    def laid_and_joined(self, node, lay, axis):
        """np.vstack/np.dstack of a display as NumPy defines them: the pieces made at least
        2-D/3-D, then concatenated (Numba's own take pieces of one rank only)."""
        if len(node.args) != 1 or node.keywords or \
                not isinstance(node.args[0], (gast.List, gast.Tuple)):
            return self.joined(node)
        pieces = gast.Tuple(elts=[_call(lay, [p]) for p in node.args[0].elts], ctx=gast.Load())
        return _call("np.concatenate", [pieces], [gast.keyword(arg="axis", value=_num(axis))])

    def call_np_vstack(self, node):
        return self.laid_and_joined(node, "np.atleast_2d", 0)

    def call_np_dstack(self, node):
        return self.laid_and_joined(node, "np.atleast_3d", 2)

    def call_np_outer(self, node):
        if len(node.args) != 2 or node.keywords:
            return None
        return _call(self.helper("outer_product"), node.args)

    def split(self, node):
        """A split at no index (`np.split(x, ())`: one piece) as a split into one section:
        Numba's takes no empty tuple of indices."""
        if _split_cuts(node) != ():
            return None
        if len(node.args) > 1:
            node.args[1] = _num(1)
        for keyword in node.keywords:
            if keyword.arg == "indices_or_sections":
                keyword.value = _num(1)
        return node

    call_np_split = call_np_array_split = call_np_hsplit = call_np_vsplit = \
        call_np_dsplit = split

    # -- statements and operators
    def visit_Assign(self, node):
        """``t = np.split(x, 3)`` as ``t_pieces = np.split(x, 3)`` then ``t = (t_pieces[0],
        t_pieces[1], t_pieces[2])``: generated code holds the pieces as a tuple (so does a
        loop's placeholder for them), where Numba's split gives a list."""
        self.generic_visit(node)
        if len(node.targets) == 1 and self.boolean_index(node.targets[0]):
            # `a[mask] = v` (a mask of any rank: mask_store)
            target = node.targets[0]
            return gast.copy_location(gast.Expr(value=_call(self.helper("mask_store"), [
                _name(target.value.id), _name(target.slice.id), node.value])), node)
        count = _split_count(node.value)
        if count is None or len(node.targets) != 1 or not isinstance(node.targets[0], gast.Name):
            return node
        pieces = fresh_name(f"{node.targets[0].id}_pieces", self.module.taken)
        listed = gast.Assign(targets=[gast.Name(id=pieces, ctx=gast.Store(), annotation=None,
                                                type_comment=None)],
                             value=node.value, type_comment=None)
        node.value = gast.Tuple(elts=[gast.Subscript(value=_name(pieces), slice=_num(k),
                                                     ctx=gast.Load()) for k in range(count)],
                                ctx=gast.Load())
        return [listed, node]

    def visit_block(self, stmts):
        """The statements of a block, each visited (a statement may become several)."""
        out = []
        for stmt in stmts:
            visited = self.visit(stmt)
            out.extend(visited if isinstance(visited, list) else [visited])
        return out

    def boolean_index(self, node):
        """Whether the subscript `node` indexes with one boolean array alone (``a[b < 0]``
        with ``b < 0`` bound to a name): under Numba a mask of two or more axes fails."""
        return self.module.numba_overloads and isinstance(node, gast.Subscript) and \
            isinstance(node.value, gast.Name) and isinstance(node.slice, gast.Name) and \
            (node.slice.id in self.boolean or node.slice.id in self.masks)

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.ctx, gast.Load) and self.boolean_index(node):
            return _call(self.helper("mask_read"), [node.value, node.slice])
        if isinstance(node.slice, gast.List):  # x[[0, 0, 2]]: an index array
            node.slice = _call("np.array", [node.slice])
        elif isinstance(node.slice, gast.Tuple):  # y[[0, 1], [1, 0]]: index arrays
            # (a list display bound to a name, `cols = [0, 2]` then `a[:, cols]`, too: Numba
            # indexes with arrays, not lists)
            node.slice.elts = [
                _call("np.array", [e]) if isinstance(e, gast.List) or (
                    isinstance(e, gast.Name) and e.id in self.index_lists) else e
                for e in node.slice.elts]
            self.module_index_arrays(node.slice)
        return node

    def module_index_arrays(self, index):
        """``y[MASK, COLS]`` with two or more of the module's arrays (or list displays) as
        indices, or an entry's boolean vector argument beside another index: each such name
        as ``index_array(MASK)``, which Numba compiles as the positions of a 1-D boolean
        mask's True entries (NumPy's meaning there; Numba checks the mask's own length
        against the other indices) and as the name itself otherwise."""
        if not self.module.numba_overloads:
            return
        held = [e for e in index.elts if isinstance(e, gast.Name) and e.id not in self.local]
        lists = [e for e in index.elts if isinstance(e, gast.Call) and
                 dotted_name(e.func) == "np.array" and e.args and
                 isinstance(e.args[0], gast.List)]
        indices = [e for e in index.elts if not isinstance(e, gast.Slice) and
                   not _is_none(e) and not (isinstance(e, gast.Constant) and
                                            e.value is Ellipsis)]
        if len(indices) >= 2:
            held += [e for e in indices if isinstance(e, gast.Name) and e.id in self.masks]
        if not held or len(held) + len(lists) < 2 and not any(
                e.id in self.masks for e in held):
            return
        index.elts = [_call(self.helper("index_array"), [e]) if any(e is h for h in held)
                      else e for e in index.elts]

    def visit_AugAssign(self, node):
        """``a[c, p:] += v`` as ``add_into(a[c, p:], v)`` and ``a[c] += v`` (c an integer) as
        ``add_at(a, c, v)``: Numba compiles an array assigned into a slice slowly (its error
        message helper alone takes seconds), an in-place add on a view quickly."""
        self.generic_visit(node)
        target = node.target
        if self.boolean_index(target):  # `a[mask] += v`: read, combine, store (mask_store)
            read = _call(self.helper("mask_read"), [_name(target.value.id),
                                                    _name(target.slice.id)])
            combined = gast.BinOp(left=read, op=node.op, right=node.value)
            return gast.copy_location(gast.Expr(value=_call(self.helper("mask_store"), [
                _name(target.value.id), _name(target.slice.id), combined])), node)
        if isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name) and \
                _view_of(node.value, target.value.id):
            # `a[1:] += a[:-1]`: Numba adds in place element by element, reading entries it
            # has already updated; `a[1:] = a[1:] + a[:-1]` reads a new array, as NumPy does
            load = gast.Subscript(value=_name(target.value.id),
                                  slice=copy.deepcopy(target.slice), ctx=gast.Load())
            return gast.Assign(targets=[target], value=gast.BinOp(
                left=load, op=node.op, right=node.value), type_comment=None)
        if not isinstance(node.op, gast.Add) or not isinstance(target, gast.Subscript) or \
                not isinstance(target.value, gast.Name) or target.value.id not in self.arrays:
            return node
        index = target.slice
        parts = index.elts if isinstance(index, gast.Tuple) else [index]
        if not all(isinstance(p, gast.Slice) or self.is_int(p) or _is_none(p) for p in parts):
            return node
        if any(isinstance(p, gast.Slice) or _is_none(p) for p in parts):  # a view
            view = gast.Subscript(value=target.value, slice=index, ctx=gast.Load())
            call = _call(self.helper("add_into"), [view, node.value])
        elif len(parts) == 1:
            call = _call(self.helper("add_at"), [target.value, index, node.value])
        else:
            return node
        return gast.Expr(value=call)

    def visit_For(self, node):
        # inside `for c in range(...)` whose body does not rebind c, c is an integer
        target = node.target
        counter = isinstance(target, gast.Name) and isinstance(node.iter, gast.Call) and \
            dotted_name(node.iter.func) == "range" and target.id not in self.ints and \
            not any(isinstance(n, gast.Name) and n.id == target.id and
                    not isinstance(n.ctx, gast.Load) for stmt in node.body for n in gast.walk(stmt))
        node.iter = self.visit(node.iter)
        if counter:
            self.ints.add(target.id)
        node.body = self.visit_block(node.body)
        if counter:
            self.ints.discard(target.id)
        node.orelse = self.visit_block(node.orelse)
        return node

    def is_int(self, node):
        """Whether `node` is an integer expression (constants and integer names)."""
        if isinstance(node, gast.Name):
            return node.id in self.ints
        if isinstance(node, gast.BinOp) and isinstance(node.op, (gast.Add, gast.Sub,
                                                                 gast.Mult)):
            return self.is_int(node.left) and self.is_int(node.right)
        value = _const(node)
        return isinstance(value, int) and not isinstance(value, bool)

    def visit_Expr(self, node):
        self.generic_visit(node)
        value = node.value
        if isinstance(value, gast.Call) and dotted_name(value.func) == "np.add.at" and \
                len(value.args) == 3 and not value.keywords:
            target, index, g = value.args
            if self.is_int(index):  # one element (or row): an ordinary in-place add
                return gast.AugAssign(target=gast.Subscript(
                    value=target, slice=index, ctx=gast.Store()), op=gast.Add(), value=g)
            if isinstance(index, gast.List):
                index = _call("np.array", [index])
            if isinstance(index, gast.Tuple):
                index.elts = [copy.deepcopy(self.slices[p.id])
                              if isinstance(p, gast.Name) and p.id in self.slices else p
                              for p in index.elts]
                name = self.module.scatter_helper(index.elts)
                if name is None:
                    return node
                node.value = _call(name, [target] + list(index.elts) + [g])
            else:
                node.value = _call(self.helper("scatter_add"), [target, index, g])
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, gast.Mult) and self.module.numba_overloads:
            pair = _batched_outer_operands(node.left, node.right) or \
                _batched_outer_operands(node.right, node.left)
            if pair is not None:  # a[:, :, None] * b[:, None, :]: one loop nest
                return _call(self.helper("batched_outer"), list(pair))
        if isinstance(node.op, gast.MatMult) and self.module.general_dot:
            return _call(self.helper("matmul_nd"), [node.left, node.right])
        if isinstance(node.op, gast.MatMult) and self.module.numba_overloads and \
                not self.module.loop_free:  # (small operands, many calls: loop code)
            return _call(self.helper("small_dot"), [node.left, node.right])
        if isinstance(node.op, gast.Pow):
            p = _const(node.right)
            if isinstance(p, int) and not isinstance(p, bool) and p < 0:
                node.right = _num(float(p))  # under Numba an int to a negative int power is 0
        return node


def _batched_outer_operands(left, right):
    """(a, b) of ``a[:, :, None] * b[:, None, :]``, or None."""
    def parts(node):
        if not (isinstance(node, gast.Subscript) and isinstance(node.slice, gast.Tuple) and
                len(node.slice.elts) == 3):
            return None
        return ["s" if isinstance(e, gast.Slice) and e.lower is None and e.upper is None and
                e.step is None else "n" if isinstance(e, gast.Constant) and e.value is None
                else "?" for e in node.slice.elts]
    if parts(left) == ["s", "s", "n"] and parts(right) == ["s", "n", "s"]:
        return left.value, right.value
    return None


_VIEW_CALLS = ("np.ravel", "np.reshape", "np.transpose", "np.swapaxes", "np.moveaxis",
               "np.squeeze", "np.expand_dims", "np.asarray", "np.ascontiguousarray",
               "np.broadcast_to")


def _view_of(node, name):
    """Whether `node` may be a view of the array `name` (its slices, attributes such as `.T`,
    reshapes): an expression that computes a new array is not."""
    while True:
        if isinstance(node, (gast.Subscript, gast.Attribute)):
            node = node.value
        elif isinstance(node, gast.Call) and node.args and (
                dotted_name(node.func) in _VIEW_CALLS or (
                    isinstance(node.func, gast.Attribute) and
                    node.func.attr in ("reshape", "ravel", "transpose", "view"))):
            node = node.args[0] if dotted_name(node.func) in _VIEW_CALLS else node.func.value
        else:
            return isinstance(node, gast.Name) and node.id == name


def _view_of_a_name(node):
    """Whether `node` is a name or a view of one written with constants, slices and None
    (``x[:, None]``): cheap to write twice, with nothing to run twice."""
    if isinstance(node, gast.Name):
        return True
    if not (isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name)):
        return False
    parts = node.slice.elts if isinstance(node.slice, gast.Tuple) else [node.slice]
    return all(isinstance(p, gast.Constant) or isinstance(p, gast.Slice) and all(
        b is None or isinstance(b, gast.Constant) for b in (p.lower, p.upper, p.step))
        for p in parts)


def _is_array_call(node):
    """Whether `node` is a call known to return an array (never a scalar)."""
    return isinstance(node, gast.Call) and (dotted_name(node.func) in (
        "np.asarray", "np.expand_dims", "np.zeros", "np.ones", "np.empty", "np.array",
        "np.zeros_like", "np.ones_like", "np.full", "np.full_like", "np.outer",
        "np.ascontiguousarray", "outer_product", "full_like_any") or (
            isinstance(node.func, gast.Attribute) and
                                    node.func.attr == "reshape"))


def _is_contiguous_call(node):
    """Whether `node` is a call known to return a new C-contiguous array."""
    return isinstance(node, gast.Call) and dotted_name(node.func) in (
        "np.ascontiguousarray", "np.zeros", "np.ones", "np.empty", "np.array", "np.dot",
        "np.zeros_like", "np.ones_like", "np.full", "np.full_like", "np.outer", "np.copy",
        "outer_product", "first_axis_last", "full_like_any")


def _moved_first_axis_last(node):
    """x of ``np.moveaxis(x, 0, -1)`` (those two constants), alone or in
    ``np.ascontiguousarray(...)``; None for anything else."""
    if isinstance(node, gast.Call) and dotted_name(node.func) == "np.ascontiguousarray" and \
            len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, gast.Call) and dotted_name(node.func) == "np.moveaxis" and \
            len(node.args) == 3 and not node.keywords and \
            [_const(a) for a in node.args[1:]] == [0, -1]:
        return node.args[0]
    return None


# ---------------------------------------------------------------- einsum
def parse_subscripts(spec, count):
    """(['ij', 'jk'], 'ik') from 'ij,jk->ik'; the implicit output as NumPy defines it.

    >>> parse_subscripts("ij,jk", 2)
    (['ij', 'jk'], 'ik')
    """
    spec = spec.replace(" ", "")
    if "." in spec:
        raise ValueError("ellipsis in einsum subscripts")
    if "->" in spec:
        ins, out = spec.split("->")
    else:
        ins = spec
        letters = ins.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    parts = ins.split(",")
    if len(parts) != count:
        raise ValueError("operand count does not match the subscripts")
    return parts, out


def _einsum_as_dot(ins, out, operands):
    """np.dot/np.outer for two-operand einsums that are a matrix or vector product."""
    if len(ins) != 2:
        return None
    a, b = ins
    if len(a) > 2 or len(b) > 2 or len(set(a)) != len(a) or len(set(b)) != len(b):
        return None
    shared = set(a) & set(b)
    if (set(a) | set(b)) - shared != set(out) or shared & set(out) or len(set(out)) != len(out):
        return None
    x, y = operands
    if not shared:
        if len(a) == 1 and len(b) == 1:
            if out == a + b:
                return _call("np.outer", [x, y])
            if out == b + a:
                return _call("np.outer", [y, x])
        return None
    if len(shared) != 1:
        return None
    (c,) = shared
    left = x if a[-1] == c else gast.Attribute(value=x, attr="T", ctx=gast.Load())
    right = y if b[0] == c else gast.Attribute(value=y, attr="T", ctx=gast.Load())
    free = a.replace(c, "") + b.replace(c, "")
    if free == out:
        return _call("np.dot", [left, right])
    if free[::-1] == out and len(free) == 2:
        # (A B).T computed as B.T A.T, which is contiguous
        lt = gast.Attribute(value=right, attr="T", ctx=gast.Load()) if right is y else y
        rt = gast.Attribute(value=left, attr="T", ctx=gast.Load()) if left is x else x
        return _call("np.dot", [lt, rt])
    return None


def _is_none(node):
    """Whether `node` is the constant None (np.newaxis in an index)."""
    return isinstance(node, gast.Constant) and node.value is None


def _einsum_order(ins, out):
    """The order of an einsum helper's loops, outermost first, and whether its innermost loop
    sums (a running total a reassociated loop vectorizes) rather than writes the output.

    The innermost loop runs over a letter that is the last axis of every operand holding it
    (consecutive elements): the output's last letter when it is one (each step writes the
    next output element, ``out[b, i, k] += a[b, i, j] * c[b, j, k]``), else a summed letter
    that is (``total += a[k, i, b] * c[k, n, b]``). The other output letters come first, in
    the output's order, then the other summed letters. (In the output's order with the sums
    inside, ADBench GMM's vectorized einsums strode by rows in their inner loops: 2.8 ms
    for 'kna,knb->kab', 0.9 ms in this order, N=1000, K=25, D=10.)

    >>> _einsum_order(["bij", "bjk"], "bik")
    (['b', 'i', 'j', 'k'], False)
    >>> _einsum_order(["kab", "knb"], "kna")
    (['k', 'n', 'a', 'b'], True)
    """
    letters = sorted(set("".join(ins)))
    summed = [c for c in letters if c not in out]

    def consecutive(c):
        return all(sub.count(c) == 1 and sub[-1] == c for sub in ins if c in sub)
    inner = out[-1] if out and consecutive(out[-1]) else \
        next((c for c in summed if consecutive(c)), None)
    if inner is None:
        return list(out) + summed, bool(summed)
    order = [c for c in out if c != inner] + [c for c in summed if c != inner] + [inner]
    return order, inner not in out


BLAS_PRODUCT_SIZE = 4096  # rows x columns x summed length from which np.dot beats loops


def _einsum_products(ins, out):
    """For a stack of matrix products (``'kab,knb->kna'``: one matrix of each operand per k,
    multiplied over one summed letter), the helper's lines multiplying each pair with np.dot
    (BLAS) when the products are large enough, returning before the loops.

    ADBench GMM's vectorized rewrite (N=1000, K=25, D=10), each of its three stacked
    products: 920, 850, 900 us as loops, 380, 285, 250 us with np.dot. For small matrices
    the loops win (25 products of 4x3 by 3x3: 5.8 us with np.dot).

    >>> _einsum_products(["kab", "knb"], "kna")[1]
    '        for k in range(n_k):'
    """
    if len(ins) != 2:
        return []
    a, b = ins
    if any(len(set(sub)) != len(sub) for sub in (a, b, out)):
        return []
    batch = [c for c in out if c in a and c in b]
    summed = [c for c in a if c in b and c not in out]
    only_a = [c for c in a if c not in b]
    only_b = [c for c in b if c not in a]
    lead = "".join(batch)
    if not batch or len(summed) != 1 or len(only_a) != 1 or len(only_b) != 1 or \
            not (a.startswith(lead) and b.startswith(lead) and out.startswith(lead)) or \
            set(out) != set(batch + only_a + only_b):
        return []
    (c,), (i,), (j,) = summed, only_a, only_b
    index = ", ".join(batch)

    def matrix(k, rows):  # operand k's matrix at the batch index, its rows along `rows`
        text = f"np.asarray(op{k}[{index}], dtype=np.float64)"
        return text if ins[k][len(lead)] == rows else text + ".T"
    if out[len(lead):] == i + j:
        product = f"np.dot({matrix(0, i)}, {matrix(1, c)}, out[{index}])"
    else:
        product = f"np.dot({matrix(1, j)}, {matrix(0, c)}, out[{index}])"
    lines = [f"    if n_{i} * n_{j} * n_{c} >= {BLAS_PRODUCT_SIZE}:"]
    indent = "        "
    for letter in batch:
        lines.append(f"{indent}for {letter} in range(n_{letter}):")
        indent += "    "
    lines.append(f"{indent}{product}")
    lines.append("        return out")
    return lines


def _einsum_source(name, ins, out):
    """An einsum as loops (see _einsum_order); an operand whose axes are smaller than the
    letters' sizes (size one, broadcast as NumPy does) is copied to the full shape first."""
    params = [f"op{k}" for k in range(len(ins))]
    spec = ",".join(ins) + "->" + out
    products = _einsum_products(ins, out)
    how = "a matrix product per batch index (np.dot) when large, loops otherwise" if \
        products else "written as loops"
    lines = [f"def {name}({', '.join(params)}):",
             f'    """np.einsum({spec!r}, {", ".join(params)}): {how}."""']
    sizes = {}
    for k, sub in enumerate(ins):
        for axis, letter in enumerate(sub):
            sizes.setdefault(letter, []).append(f"op{k}.shape[{axis}]")
    for letter in sorted(sizes):
        found = sizes[letter]
        lines.append(f"    n_{letter} = " + (found[0] if len(found) == 1 else
                                              f"max({', '.join(found)})"))
    # an axis of size one broadcasts against the same letter's other axes, as in NumPy; a
    # copy keeps the loops on arrays with unit strides (a broadcast view has none)
    for k, sub in enumerate(ins):
        if any(len(sizes[c]) > 1 for c in sub):
            full = ", ".join(f"n_{c}" for c in sub) + ("," if len(sub) == 1 else "")
            lines.append(f"    if op{k}.shape != ({full}):")
            lines.append(f"        op{k} = np.broadcast_to(op{k}, ({full})).copy()")
    if out:
        shape = ", ".join(f"n_{c}" for c in out) + ("," if len(out) == 1 else "")
        lines.append(f"    out = np.zeros(({shape}))")
    lines.extend(products)
    order, sums_inside = _einsum_order(ins, out)
    summed_any = any(c not in out for c in order)
    product = " * ".join(f"op{k}[{', '.join(sub)}]" if sub else f"op{k}"
                         for k, sub in enumerate(ins))
    target = f"out[{', '.join(out)}]"

    def loops(letters, indent):  # opens a loop per letter; the indent inside them
        for letter in letters:
            lines.append(f"{indent}for {letter} in range(n_{letter}):")
            indent += "    "
        return indent
    if out and not summed_any:  # a transposition, a diagonal, an outer product
        lines.append(f"{loops(order, '    ')}{target} = {product}")
    elif not out or sums_inside:
        # the output letters outside, the sums inside: a running total per output element
        outer = [c for c in order if c in out]
        indent = loops(outer, "    ")
        lines.append(f"{indent}total = 0.0")
        lines.append(f"{loops(order[len(outer):], indent)}total += {product}")
        lines.append(f"{indent}{target} = total" if out else "    return total")
    else:
        lines.append(f"{loops(order, '    ')}{target} += {product}")
    if out:
        lines.append("    return out")
    return "\n".join(lines) + "\n"


def _int_names(fn):
    """Names `fn` binds only as ``for name in range(...)`` targets or to integer constants."""
    good = {}  # id of a Name node stored an integer -> its name
    for node in gast.walk(fn):
        if isinstance(node, gast.For) and isinstance(node.target, gast.Name) and \
                isinstance(node.iter, gast.Call) and dotted_name(node.iter.func) == "range":
            good[id(node.target)] = node.target.id
        elif isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name) and type(_const(node.value)) is int:
            good[id(node.targets[0])] = node.targets[0].id
    other = {a.id for a in fn.args.args}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)) and \
                id(node) not in good:
            other.add(node.id)
    return set(good.values()) - other


#: Calls whose value may be an array (or a number) under Numba, wrapped by np.array in
#: generated code (the calls always giving an array: _is_array_call).
_ARRAY_OR_NUMBER = frozenset({"sum_axis_of_products", "sum_axis", "np.sum", "np.dot",
                              "small_dot", "dot_nd", "matmul_nd"})


def _divide_counts_plainly(tree):
    """``float(np.divide(1.0, x.shape[0]))`` (how generated modules divide a constant by a
    count, codegen/emit.py) back as ``1.0 / x.shape[0]``: compiled with error_model='numpy' the
    division gives inf at 0 as np.divide does, and the passes below read the plain form (a
    mean's ``1.0 / X.shape[0]`` in codegen/row_products.py)."""
    names = count_names(tree)
    for node in gast.walk(tree):
        for attribute, value in gast.iter_fields(node):
            items = value if isinstance(value, list) else [value]
            for k, item in enumerate(items):
                if isinstance(item, gast.Call) and dotted_name(item.func) == "float" and \
                        len(item.args) == 1 and isinstance(item.args[0], gast.Call) and \
                        dotted_name(item.args[0].func) == "np.divide":
                    item = item.args[0]  # (emit.py's float(np.divide(1.0, n)))
                if not (isinstance(item, gast.Call) and dotted_name(item.func) == "np.divide"
                        and len(item.args) == 2 and not item.keywords and
                        isinstance(item.args[0], gast.Constant) and
                        type(item.args[0].value) in (int, float) and
                        is_count(item.args[1], names=names)):
                    continue
                plain = gast.BinOp(left=item.args[0], op=gast.Div(), right=item.args[1])
                if isinstance(value, list):
                    value[k] = plain
                else:
                    setattr(node, attribute, plain)


def _index_lists(fn):
    """Names `fn` binds once, to a list display of integer constants (``tup = [0, 0, 2]``: an
    index list the normalizer named), and never changes (no call of a list method on it)."""
    bound, once = {}, set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and not isinstance(node.ctx, gast.Load):
            bound[node.id] = bound.get(node.id, 0) + 1
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name) and isinstance(node.value, gast.List) \
                and node.value.elts and all(isinstance(e, gast.Constant) and
                                            type(e.value) is int for e in node.value.elts):
            once.add(node.targets[0].id)
    changed = {node.value.id for node in gast.walk(fn)
               if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name)}
    return {n for n in once if bound.get(n) == 1 and n not in changed}


def _local_lists(fn):
    """Names `fn` binds to an empty list display (``rows = []``) and appends to."""
    empty, appended = set(), set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign) and isinstance(node.value, gast.List) and \
                not node.value.elts:
            empty.update(t.id for t in node.targets if isinstance(t, gast.Name))
        if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                node.attr == "append":
            appended.add(node.value.id)
    return empty & appended


def _local_non_lists(fn):
    """Names `fn` binds (not its parameters) and never to a list or dict (a display, a
    comprehension, ``list(...)``/``dict(...)``) nor calls a list method on."""
    bound, lists = set(), {a.id for a in fn.args.args}
    containers = (gast.List, gast.ListComp, gast.Dict, gast.DictComp)
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and not isinstance(node.ctx, gast.Load):
            bound.add(node.id)
        if isinstance(node, gast.Assign) and any(
                isinstance(n, containers) or
                (isinstance(n, gast.Call) and dotted_name(n.func) in ("list", "dict"))
                for n in gast.walk(node.value)):
            lists.update(t.id for t in node.targets if isinstance(t, gast.Name))
        if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                node.attr in ("append", "pop", "extend", "insert", "items", "keys"):
            lists.add(node.value.id)
    return bound - lists


# ---------------------------------------------------------------- scatter-add patterns
def _slice_names(fn):
    """Names `fn` binds exactly once, to a ``slice(...)`` call (a normalizer's temporary)."""
    stores = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    found = {}
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], gast.Name) and isinstance(node.value, gast.Call) \
                and dotted_name(node.value.func) == "slice" and \
                stores[node.targets[0].id] == 1:
            found[node.targets[0].id] = node.value
    return found


def _scatter_source(name, kinds):
    """np.add.at(b, (i0, i1, ...), g) for one pattern of slice ('s') and index ('v') parts."""
    params = [f"i{k}" for k in range(len(kinds))]
    values = [k for k, kind in enumerate(kinds) if kind == "v"]
    lines = [f"def {name}(b, {', '.join(params)}, g):",
             f'    """np.add.at(b, ({", ".join(params)}), g): repeated indices accumulate."""']
    shapes = ", ".join(f"np.shape(i{k})" for k in values)
    lines.append(f"    shape = np.broadcast_shapes({shapes})")
    for k in values:
        lines.append(f"    j{k} = np.broadcast_to(np.asarray(i{k}), shape)")
    adjacent = values == list(range(values[0], values[-1] + 1))
    lead = values[0] if adjacent else 0
    # g broadcast to the shape of b[i0, i1, ...], as NumPy does: the shape of the part one
    # index selects (`slab`) with the index's shape in place of its parts
    first = ", ".join(f"np.ravel(j{k})[0]" if kind == "v" else f"i{k}"
                      for k, kind in enumerate(kinds))
    lines += [f"    if j{values[0]}.size == 0:",
              "        return",
              f"    slab = np.shape(b[{first}])",
              f"    g = np.broadcast_to(g, slab[:{lead}] + shape + slab[{lead}:])",
              "    for k in np.ndindex(shape):"]
    target = ", ".join(f"j{k}[k]" if kind == "v" else f"i{k}" for k, kind in enumerate(kinds))
    g_index = "k" if lead == 0 else "(" + "slice(None), " * lead + ") + k"
    lines.append(f"        b[{target}] += g[{g_index}]")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- module-level driver
class _Module:
    def __init__(self, tree):
        self.tree = tree
        self.taken = {n.id for n in gast.walk(tree) if isinstance(n, gast.Name)}
        self.taken |= {n.name for n in gast.walk(tree) if isinstance(n, gast.FunctionDef)}
        self.needed = set()
        self.general_dot = False
        self.numba_overloads = False
        self.generated = {}  # name -> source of helpers written for one einsum/pattern
        self.uncompiled = set()  # generated functions Numba reaches through an overload
        self.jit_options = {}  # generated function -> extra options (fastmath of sum loops)
        # Whole-array code (no loop anywhere): its sums run over whole arrays, where a
        # reassociated sum pays for its compile (in loops they are mostly over small rows)
        self.loop_free = not any(isinstance(n, (gast.For, gast.While)) for n in gast.walk(tree))

    def need(self, name):
        self.needed.add(name)
        for dep in DIALECT_DEPENDS.get(name, ()):
            self.needed.add(dep)

    def einsum_helper(self, ins, out):
        base = "einsum_" + "_".join(ins) + ("_to_" + out if out else "_to_scalar")
        if base not in self.generated:
            self.generated[base] = _einsum_source(base, ins, out)
            if _einsum_order(ins, out)[1]:
                self.jit_options[base] = REASSOCIATED
        return base

    def scatter_helper(self, parts):
        kinds = []
        for p in parts:
            if isinstance(p, gast.Call) and dotted_name(p.func) == "slice":
                kinds.append("s")
            elif _const(p) is Ellipsis or _const(p) is None:
                return None
            else:
                kinds.append("v")
        if "v" not in kinds:
            return None
        base = "scatter_add_" + "".join(kinds)
        if base not in self.generated:
            self.generated[base] = _scatter_source(base, kinds)
        return base


_KEEP_ALL = '''\
def keep_all(r, x):
    """The full reduction `r` of `x` with every axis kept with size one (keepdims=True)."""
    if x.ndim == 1:
        return np.full((1,), r)
    if x.ndim == 2:
        return np.full((1, 1), r)
    if x.ndim == 3:
        return np.full((1, 1, 1), r)
    if x.ndim == 4:
        return np.full((1, 1, 1, 1), r)
    if x.ndim == 5:
        return np.full((1, 1, 1, 1, 1), r)
    if x.ndim == 6:
        return np.full((1, 1, 1, 1, 1, 1), r)
    if x.ndim == 0:
        return np.asarray(r)
    raise ValueError("keepdims=True of a whole array of rank 7 or more is not supported")
'''


def lower_source(source, entries=(), injected=(), general_dot=False,
                 numba_overloads=False, threads=False):
    """Lower a generated module's source into the compiled dialect.

    `entries` are the functions callers use (they get a plain wrapper when module arrays must be
    passed to them); `injected` names module data the loader sets (not imported).
    general_dot=True writes every ``np.dot`` as ``dot_nd`` and ``@`` as ``matmul_nd`` (any
    ranks, as batched code needs);
    a target asks for it when Numba refused the module written without it.
    numba_overloads=True also uses the helpers whose Numba form is a
    ``numba.extending.overload`` (the module must import numba): ``np.tanh(x)`` as
    ``tanh_fast(x)``, ``np.exp(x)`` as ``exp_fast(x)`` (codegen/fast_exp.py),
    ``np.sum(a * b)`` as ``sum_of_products(a, b)``,
    ``np.sum(x, axis=k)`` as ``sum_axis(x, k)`` and, in a module with loops, ``np.dot`` and
    ``@`` as ``small_dot(a, b)``, compiled into loops for float arrays (a target that
    compiles with Numba asks for it). It also inlines calls made in loops
    (:mod:`codegen.inlining`) and reuses repeated math calls (:mod:`codegen.common_calls`).
    threads=True (with numba_overloads) lets a fused run's pass over a large matrix's rows
    run on Numba's threads (:mod:`codegen.row_products`): a target asks for it unless the
    module's functions may themselves run on several threads at once (a prange loop's
    per-example functions, pmap's nogil shards).
    """
    tree = parse_with_comments(source)
    _rename_user_clashes(tree, entries)
    _divide_counts_plainly(tree)
    module = _Module(tree)
    module.general_dot = general_dot
    module.numba_overloads = numba_overloads
    header, functions = [], []
    for stmt in tree.body:
        (functions if isinstance(stmt, gast.FunctionDef) else header).append(stmt)
    # the entries' boolean vector arguments (the docstring's signature line: `m: bool[N]`)
    module.doc = next((h.value.value for h in header if _is_docstring(h)), "")
    module.masks = param_masks(module.doc)
    replaced = {fn.name for fn in functions if fn.name in DIALECT_HELPERS}
    functions = [fn for fn in functions if fn.name not in replaced and
                 fn.name not in DIALECT_NOT_COMPILED]
    for name in replaced:
        module.need(name)
    if numba_overloads:  # calls in loops replaced by the callee's body (codegen/inlining.py)
        functions = inline_loop_calls(functions, entries=set(entries) | _helper_names(functions))
    lowering = _Lower(module)
    functions = [lowering.visit(fn) for fn in functions]
    for fn in functions:  # add_at(a, i, outer_product(u, v)) and add_at(a, i, -v)
        for name in fuse_outer_adds(fn):
            module.need(name)
        if numba_overloads:  # a correlation's tap nests: one pass (window_nests.py)
            for name in rewrite_window_nests(fn, module.taken):
                for helper in (name,) + WINDOW_COMMON:
                    module.generated[helper] = WINDOW_HELPERS[helper]
                module.uncompiled |= WINDOW_UNCOMPILED
        if numba_overloads:  # whole-vector statements and sums: one loop (fused_regions.py)
            nest = handles_matrices(fn)  # (decided before the run's calls replace slices)
            fused = fuse_regions(fn, module.taken, module.generated, threads)
            if fused:
                helpers, uncompiled = (NEST_HELPERS, NEST_UNCOMPILED) if nest else \
                    (dict(FUSED_HELPERS, **ROW_HELPERS), FUSED_UNCOMPILED | ROW_UNCOMPILED)
                module.generated.update(_called(helpers, [module.generated[n] for n in fused]))
                module.uncompiled |= uncompiled | {f"{n}{end}" for n in fused for end in
                                                   ("", "_numba", "_threads", "_threads_numba",
                                                    "_rows", "_rows_numba")}
            if sizes_from_shapes(fn):  # (e).size outside runs: from shapes (expression_sizes)
                module.generated.update(SIZE_HELPERS)
                module.uncompiled |= SIZE_UNCOMPILED
            # np.exp(a[c]) in a loop nest: one table before the nest
            reuse_math_calls(fn)  # np.cos(t) again where c = np.cos(t) still holds it
            tabulate_invariant_calls(fn, module.taken)
            if share_ties_in_place(fn):  # a maximum's adjoint added in place (tie_shares)
                module.generated.update(TIE_HELPERS)
                module.uncompiled |= TIE_UNCOMPILED
            for name in reuse_buffers(fn):  # x = np.zeros(k) in a loop: x's old array
                module.need(name)
            # an in-place stencil's reverse step: its new adjoint not zeroed first, the
            # copy's adjoint without the entries the step zeroed (gather_targets)
            used = fill_gather_targets(fn) | ({"add_outside"} if skip_reset_entries(fn) else set())
            if used:
                reuse_previous_steps(fn, module.taken)  # (zeros_outside given a spare)
                module.generated.update({n: GATHER_HELPERS[n] for n in used})
                module.uncompiled |= GATHER_UNCOMPILED
            # a loop summing into numbers after a gathering loop: one loop (loop_fusion)
            fused = fuse_sum_loops(fn)
            if copy_only_outside(fn):  # a copy whose middle a loop overwrites (copy_targets)
                module.generated.update(COPY_HELPERS)
                module.uncompiled |= COPY_UNCOMPILED
            read_rows_in_place(fn, module.taken)  # a tape's rows as row numbers (tape_rows)
            store_values_after(fn)  # a loop's taped number stored once computed (tape_order)
            if fn.name in entries:  # a double loop's column reads and adds (column_layout)
                for name in lay_out_columns(fn, module.doc, module.taken):
                    module.generated[name] = COLUMN_HELPERS[name]
            # a loop summing into a number: a function compiled with reassociation
            outlined = outline_reductions(fn, module.taken, module.generated,
                                          module.jit_options)
            # g[i, 0] += e at every step of a loop over j: summed in a local first
            used = sum_invariant_updates(fn, module.taken)
            if used:
                module.generated.update(ACCUMULATOR_HELPERS)
                module.uncompiled |= ACCUMULATOR_UNCOMPILED
                if "add_at" in used:
                    module.need("add_at")
                # (a loop whose only sums are those locals now qualifies: Lennard-Jones')
                outlined += outline_reductions(fn, module.taken, module.generated,
                                               module.jit_options)
            if select_small_branches(fn):  # small branches of a loop as selects
                module.generated.update(SELECT_HELPERS)
                module.uncompiled |= SELECT_UNCOMPILED
            split_independent_updates(fn)  # one loop per independent update (update_fission)
            # `if j >= 2` / `if j < n - 2` in a loop: head, branch-free interior, tail
            split_index_ranges(fn)
            if fused:  # (a merged loop's interior, branch-free now, sums with reassociation)
                outlined += outline_reductions(fn, module.taken, module.generated,
                                               module.jit_options)
            assume_loop_starts(fn)  # range(2, n), range(n - 1, -1, -1): vectorized
            # (those loops, loop stacks' slots, which reverse mode writes, and the index of
            # a loop outlined above)
            if mentions(fn, "index_at_least") or any(
                    "index_at_least(" in module.generated[name] for name in outlined):
                module.generated.update(INDEX_HELPERS)
                module.uncompiled |= INDEX_UNCOMPILED
    if numba_overloads:  # np.cos(t) again in a backward loop: the forward loop's value
        doc = next((h.value.value for h in header if _is_docstring(h)), "")
        reuse_forward_math(functions, module.taken, entries, doc)  # (forward_math.py)
    if numba_overloads:  # np.exp, math.exp: no libm call, loops vectorize (fast_exp.py)
        rewritten = [use_fast_exp(fn) for fn in functions]
        for name, text in sorted(module.generated.items()):
            module.generated[name], changed = fast_exp_in_source(text)
            rewritten.append(changed)
        if any(rewritten):
            module.need("exp_fast")
    helper_defs = []
    sources = {name: DIALECT_HELPERS[name] for name in module.needed if name in DIALECT_HELPERS}
    overloaded = set()
    if numba_overloads:  # add_at, subtract_at: written into their callers by Numba
        overloaded = {name for name in sources if name in OVERLOAD_FORMS}
        sources.update({name: OVERLOAD_FORMS[name] for name in overloaded})
    if "keep_all" in module.needed:
        sources["keep_all"] = _KEEP_ALL
    sources.update(module.generated)
    if numba_overloads:  # `top = 0` then `top = top + n`, passed on: int(0), one compile
        callees = set(sources) | {fn.name for fn in functions}
        for fn in functions:
            widen_int_starts(fn, callees)
            one_allocation_spelling(fn)  # np.empty(n), not also np.empty((n,), np.float64)
    for name in sorted(sources):
        helper_defs += gast.parse(sources[name]).body
    names = [fn.name for fn in helper_defs + functions
             if fn.name not in DIALECT_NOT_COMPILED and fn.name not in overloaded and
             fn.name not in module.uncompiled and not fn.decorator_list]  # (a helper's own
    # @numba.njit, message_format's shared _format_ functions, compiles as it says)
    # (an exception class stays a global: Numba raises only a class it knows when compiling)
    raised = {_raised_class(node) for fn in functions for node in gast.walk(fn)
              if isinstance(node, gast.Raise)}
    data = [d for d in _data_names(header, injected) if d not in raised]
    all_functions = helper_defs + functions
    # dicts an entry returns: Numba cannot box one whose values differ in type
    dict_outputs = {}
    for fn in functions:
        if fn.name in entries:
            spec = flatten_returned_dicts(fn, all_functions)
            if spec is not None:
                dict_outputs[fn.name] = spec
    lowered = LoweredModule(header, all_functions, set(sources), compiled=set(names),
                            helper_functions={fn.name for fn in helper_defs},
                            jit_options=dict(module.jit_options), dict_outputs=dict_outputs)
    _thread_data(lowered, data, entries, module.taken | set(names))
    _rebuilding_wrappers(lowered, module.taken | set(names))
    return lowered


def _rebuilding_wrappers(lowered, taken):
    """A plain wrapper for each entry returning dicts (the one that passes module data, if
    any, becomes it): it calls the compiled entry and rebuilds the dicts from their values."""
    by_name = {fn.name: fn for fn in lowered.functions}
    for entry, spec in lowered.dict_outputs.items():
        data = lowered.data_args.get(entry, [])
        fn = by_name[entry]
        params = [a.id for a in fn.args.args[:len(fn.args.args) - len(data)]]
        old = lowered.wrappers.get(entry)
        wrapper_name = old.name if old is not None else fresh_name(f"{entry}_entry", taken)
        text = (f"def {wrapper_name}({', '.join(params)}):\n"
                f'    """{entry} with the dicts it returns rebuilt (compiled code returns '
                f'their values\n    as tuples: Numba boxes no dict whose values differ in '
                f'type)."""\n'
                f"    out = {entry}({', '.join(params + data)})\n"
                f"    return {rebuilding_expression('out', spec)}\n")
        lowered.wrappers[entry] = gast.parse(text).body[0]


def _repeatable(node):
    """Whether `node` may be written more than once for one value: a name, or an element or
    slice of one (``x[i]``, ``u[1:-1]``) with names and numbers for indices (no calls)."""
    if isinstance(node, gast.Name):
        return True
    if isinstance(node, gast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, gast.Tuple) else [node.slice]
        return _repeatable(node.value) and all(
            isinstance(n, (gast.Name, gast.Constant, gast.Slice, gast.BinOp, gast.UnaryOp,
                           gast.Load, gast.operator, gast.unaryop, gast.Tuple))
            for part in parts for n in gast.walk(part))
    return False


def _rename_user_clashes(tree, entries):
    """Rename, before lowering, the user's functions and variables named like a helper this
    pass may add (``exp_fast = np.exp(x)``, a helper of theirs called ``outer_product``): the
    pass calls its helpers by those names and replaces a function so named with its own (a
    user's ``outer_product`` was silently swapped for np.outer's). The helpers the module
    carries already (codegen/helpers.py's HELPERS, their text as written there) keep their
    names; an entry function never clashes (the module's namer reserves these names)."""
    from .helpers import HELPERS
    reserved = _helper_function_names()
    # the user's: a function so named that is not the helper's text, a variable or parameter
    # so named (a call of a name the module does not define is a call of the helper)
    defined = {fn.name for fn in gast.walk(tree) if isinstance(fn, gast.FunctionDef) and
               fn.name in reserved and not (fn.name in HELPERS and ast.get_docstring(
                   gast.gast_to_ast(fn)) == _helper_docstring(fn.name))}
    bound = {n.id for n in gast.walk(tree) if isinstance(n, gast.Name) and
             n.id in reserved and isinstance(n.ctx, (gast.Store, gast.Param))}
    clashes = sorted((defined | bound) - set(entries))
    if not clashes:
        return
    used = {n.id for n in gast.walk(tree) if isinstance(n, gast.Name)} | {
        fn.name for fn in gast.walk(tree) if isinstance(fn, gast.FunctionDef)}
    taken = used | reserved
    renamed = {old: fresh_name(old, taken) for old in clashes}
    for node in gast.walk(tree):
        if isinstance(node, gast.Name) and node.id in renamed:
            node.id = renamed[node.id]
        elif isinstance(node, gast.FunctionDef) and node.name in renamed:
            node.name = renamed[node.name]


@functools.cache
def _helper_function_names():
    """Every module-level function a helper this pass may add defines (its overloads and
    loops too): the top-level def lines of every helper table's sources."""
    names = set(DIALECT_HELPERS) | set(DIALECT_NOT_COMPILED)
    for value in list(globals().values()):
        if isinstance(value, dict) and value and all(isinstance(v, str) for v in
                                                     value.values()):
            for text in value.values():
                names.update(re.findall(r"^def (\w+)\(", text, flags=re.MULTILINE))
    return frozenset(names)


@functools.cache
def _helper_docstring(name):
    from .helpers import HELPERS
    fn = ast.parse(HELPERS[name]).body[0]
    return ast.get_docstring(fn)


def _helper_names(functions):
    """The emitted helpers among `functions` (never inlined: they are written for any rank)."""
    from .helpers import HELPERS
    return {fn.name for fn in functions if fn.name in HELPERS or fn.name in DIALECT_HELPERS}


def _data_names(header, injected):
    names = []
    for stmt in header:
        if isinstance(stmt, gast.ImportFrom) and stmt.module not in ("numpy", "math", "numba"):
            names += [alias.asname or alias.name for alias in stmt.names]
    return names + [n for n in injected if n not in names]


def _raised_class(node):
    """The name of the class a `raise` statement raises (None if not a plain name)."""
    exc = node.exc.func if isinstance(node.exc, gast.Call) else node.exc
    return exc.id if isinstance(exc, gast.Name) else None


def _free_loads(fn):
    bound = {a.id for a in fn.args.args}
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)):
            bound.add(node.id)
    return {n.id for n in gast.walk(fn) if isinstance(n, gast.Name) and
            isinstance(n.ctx, gast.Load) and n.id not in bound}


def _thread_data(lowered, data, entries, taken):
    """Pass module arrays as arguments: Numba would freeze them into the compiled code (and its
    on-disk cache would keep stale values)."""
    if not data:
        return
    by_name = {fn.name: fn for fn in lowered.functions}
    free = {name: _free_loads(fn) for name, fn in by_name.items()}
    needs = {name: [d for d in data if d in free[name]] for name in by_name}
    changed = True
    while changed:
        changed = False
        for name in by_name:
            for callee in free[name] & set(by_name):
                extra = [d for d in needs[callee] if d not in needs[name]]
                if extra:
                    needs[name] = [d for d in data if d in needs[name] or d in extra]
                    changed = True
    for name, fn in by_name.items():
        for d in needs[name]:
            fn.args.args.append(gast.Name(id=d, ctx=gast.Param(), annotation=None,
                                          type_comment=None))
        for node in gast.walk(fn):
            if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
                    node.func.id in by_name and needs[node.func.id]:
                node.args.extend(_name(d) for d in needs[node.func.id])
    lowered.data = [d for d in data if any(d in n for n in needs.values())]
    for entry in entries:
        if entry not in by_name or not needs[entry]:
            continue
        fn = by_name[entry]
        lowered.data_args[entry] = list(needs[entry])
        wrapper_name = fresh_name(f"{entry}_entry", taken)
        params = [a.id for a in fn.args.args[:len(fn.args.args) - len(needs[entry])]]
        call = f"{entry}({', '.join(params + needs[entry])})"
        text = (f"def {wrapper_name}({', '.join(params)}):\n"
                f'    """{entry} with the module data it reads passed in: compiled code '
                f'must not\n    freeze module arrays."""\n'
                f"    return {call}\n")
        lowered.wrappers[entry] = gast.parse(text).body[0]
