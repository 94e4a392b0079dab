"""Math the backward sweep computes again, read from a tape the forward sweep fills.

A helper called in a loop gets a recomputing pair (autodiff_ast/reverse.py): the backward
function's loop runs the helper's forward sweep again at every step, math-library calls
included. ADBench's bundle adjustment rotates each observation's point by Rodrigues'
formula, and its backward loop computes the cosine and the sine of the same angle the
forward loop did::

    def ba_objective_fwd(cams, x, w, obs, feats):
        p = obs.shape[0]
        for i in range(p):
            ...
            if sqtheta != 0.0:
                theta = np.sqrt(sqtheta)
                costheta = np.cos(theta)
        ...
        return (concatenate, p, reproj_err, w_err, ravel)

    def ba_objective_bwd(cams, x, w, obs, feats, p, reproj_err, w_err, ravel, out_bar):
        for i in range(p - 1, -1, -1):
            ...
            if sqtheta_3 != 0.0:
                theta_3 = np.sqrt(sqtheta_3)
                costheta_3 = np.cos(theta_3)

:func:`reuse_forward_math` proves the two calls compute the same value at the same step
and writes the forward loop's result into a tape the backward loop reads::

    math_tape = np.empty((max(p, 0), 2))   # in ba_objective_fwd, before its loop
    costheta = np.cos(theta)
    math_tape[i, 0] = costheta
    ...
    costheta_3 = math_tape[i, 0]           # in ba_objective_bwd

The tape travels as one more output of the forward function and one more parameter of the
backward one, through the function that calls both (``grad_ba_sum_squares``).

The proof numbers values in both loops (value numbering): the loop index, the arguments
the caller passes (the same name handed to both functions, never written in any of the
three; an output of the forward function handed to the backward one counts as the value the
forward function computed for it), constants, arithmetic, comparisons, elements of arrays
that none of the three functions writes, shapes, and calls of functions without side effects
(np.sqrt, np.cos, the index helpers); a name bound in a branch or an inner loop is known only
inside it. A backward call matches a forward one when both call the same function of the
same numbered argument under the same numbered branch conditions. Only a pair of functions
called once each, from one function, with loops over ``range(n)`` (forward) and over the
same steps (backward, in either order) and no ``break``, ``continue`` or ``return`` in them.

Measured on ADBench's bundle adjustment gradient (the generated module before and after this
change alone, CPU time in one process): 2.6 -> 2.3 ms, the same gradient bit for bit.

>>> from autodiff_ast.templates import unparse
>>> module = gast.parse('''
... def f_fwd(a):
...     n = a.shape[0]
...     out = np.zeros(n)
...     for i in range(n):
...         t = a[i] * 2.0
...         out[i] = np.cos(t)
...         c = np.cos(t)
...         out[i] = c * c
...     return (out, n)
... def f_bwd(a, n, out_bar):
...     a_bar = np.zeros_like(a)
...     for i in range(n - 1, -1, -1):
...         t_2 = a[i] * 2.0
...         c_2 = np.cos(t_2)
...         s_2 = np.sin(t_2)
...         a_bar[i] += out_bar[i] * -4.0 * c_2 * s_2
...     return a_bar
... def grad_f(a):
...     out, n = f_fwd(a)
...     out_bar = np.ones_like(out)
...     return f_bwd(a, n, out_bar)
... ''')
>>> taken = {n.id for n in gast.walk(module) if isinstance(n, gast.Name)}
>>> reuse_forward_math(module.body, taken, doc="a: float64[N].")
1
>>> for fn in module.body:
...     print(unparse(fn))
def f_fwd(a):
    n = a.shape[0]
    out = np.zeros(n)
    math_tape = np.empty((max(n, 0), 1))
    for i in range(n):
        t = a[i] * 2.0
        out[i] = np.cos(t)
        c = np.cos(t)
        math_tape[i, 0] = c
        out[i] = c * c
    return (out, n, math_tape)
def f_bwd(a, n, out_bar, math_tape):
    a_bar = np.zeros_like(a)
    for i in range(n - 1, -1, -1):
        t_2 = a[i] * 2.0
        c_2 = math_tape[i, 0]
        s_2 = np.sin(t_2)
        a_bar[i] += out_bar[i] * -4.0 * c_2 * s_2
    return a_bar
def grad_f(a):
    out, n, math_tape = f_fwd(a)
    out_bar = np.ones_like(out)
    return f_bwd(a, n, out_bar, math_tape)
"""

from __future__ import annotations

import copy
import itertools
import re

import gast

from .emit import fresh_name, is_marker, name_node
from .fused_updates import ADD_HELPERS
from .loop_indices import constant_int
from .param_writes import dotted_name, numpy_writes_first_argument

__all__ = ["reuse_forward_math"]

#: Calls worth a tape slot: tens of cycles each.
_MATH = frozenset({"np.cos", "np.sin", "np.tan", "np.exp", "np.log", "np.tanh", "np.arctan",
                   "np.arctan2", "np.arcsin", "np.arccos", "np.sinh", "np.cosh", "np.log1p",
                   "np.expm1", "math.cos", "math.sin", "math.tan", "math.exp", "math.log",
                   "math.tanh", "math.atan", "math.atan2", "math.log1p", "math.expm1",
                   "exp_fast", "tanh_fast"})
#: Calls whose value depends on their arguments only (and that write nothing).
_PURE = _MATH | frozenset({"np.sqrt", "math.sqrt", "np.abs", "abs", "float", "int", "min",
                           "max", "np.divide", "np.float64", "slice_index", "broadcast_index",
                           "store_index", "same_length", "slice_start", "slice_length", "len"})
#: Calls that write into their first argument: the dialect's add helpers and NumPy's own
#: (param_writes.numpy_writes_first_argument). Other calls write nothing they are handed: the
#: generated functions never write their parameters, codegen/param_writes.py, and NumPy's
#: functions write only ``out=``.
_WRITERS = ADD_HELPERS | {"add_outside", "zeros_outside", "zeros_like_reusing"}


def reuse_forward_math(functions, taken, entries=(), doc=""):
    """Rewrite `functions` (gast FunctionDefs of one module, in place) as the module docstring
    says; `taken` holds every name in use (new ones are added). `doc` is the module's
    docstring, whose signature line (``x: float64[N,N], c: float64.``) gives the ranks of the
    entries' arguments: only a call of a number is saved (one slot of the tape per step).
    Returns how many calls the backward functions no longer make."""
    ranks = param_ranks(doc)
    by_name = {fn.name: fn for fn in functions}
    calls = {}
    for fn in functions:
        for node in gast.walk(fn):
            if isinstance(node, gast.Call) and isinstance(node.func, gast.Name):
                calls[node.func.id] = calls.get(node.func.id, 0) + 1
    saved = 0
    for caller in functions:
        for fwd_call, bwd_call in _pairs(caller, by_name, calls, entries):
            saved += _reuse(caller, fwd_call, bwd_call, by_name, taken, ranks)
    for fn in functions:
        saved += _reuse_within(fn, taken, ranks)
    return saved


_SIGNATURE_ITEM = re.compile(r"(?:^|[\s,])(\w+): (float64|float32|int64|int32|int|bool|float)"
                             r"(\[[^\]]*\])?(?=[,.\s]|$)")


def param_ranks(doc):
    """name -> rank of each argument the signature line of a generated module's docstring
    describes (``cams: float64[N,N]`` is 2, ``c: float64`` 0; ``x: float64[...]`` unknown).

    >>> sorted(param_ranks("x: float64[N,3], c: float64, n: int, y: float64[...].").items())
    [('c', 0), ('n', 0), ('x', 2)]
    """
    out = {}
    for name, _, dims in _SIGNATURE_ITEM.findall(doc or ""):
        if not dims:
            out[name] = 0
        elif "..." not in dims:
            out[name] = dims.count(",") + 1
    return out


def param_masks(doc):
    """The arguments the signature line of a generated module's docstring describes as boolean
    vectors (``m: bool[N]``).

    >>> sorted(param_masks("x: float64[N], m: bool[N], w: bool[N,N], b: bool."))
    ['m']
    """
    return {name for name, dtype, dims in _SIGNATURE_ITEM.findall(doc or "")
            if dtype == "bool" and dims and "," not in dims and "..." not in dims}


def _rank(key, ranks):
    """The rank of the value a number stands for, or None when it is not known."""
    kind = key[0]
    if kind in ("const", "index"):
        return 0
    if kind == "arg":
        return ranks.get(key[1])
    if kind == "item":
        base, index = key[1], key[2]
        if base[0] == "shape":
            return 0
        whole = _rank(base, ranks)
        parts = index[1:] if index[0] == "tuple" else (index,)
        if whole is None or any(_rank(p, ranks) != 0 for p in parts) or len(parts) > whole:
            return None
        return whole - len(parts)
    if kind in ("bin", "unary", "compare", "bool", "ifexp", "call"):
        operands = key[2:] if kind in ("bin", "unary", "compare", "bool", "call") else key[1:]
        if kind == "call" and key[1] in _INTEGRAL:
            return 0
        found = [_rank(k, ranks) for k in operands]
        return None if any(r is None for r in found) else max(found, default=0)
    return None


#: Pure calls whose value is a number whatever their arguments are.
_INTEGRAL = frozenset({"slice_index", "broadcast_index", "store_index", "same_length",
                       "slice_start", "slice_length", "len", "int", "float"})


def _call_of(stmt):
    """The call `stmt` makes at its top (``x = f(...)``, ``a, b = f(...)``, ``f(...)``)."""
    value = getattr(stmt, "value", None)
    return value if isinstance(value, gast.Call) and isinstance(value.func, gast.Name) else None


def _pairs(caller, by_name, calls, entries):
    """(forward statement, backward statement) of `caller`: ``a, b = f_fwd(...)`` and a later
    statement calling ``f_bwd(...)``, each function called nowhere else in the module
    (`calls`: how many calls of each name the module makes)."""
    out = []
    for k, stmt in enumerate(caller.body):
        call = _call_of(stmt)
        if call is None or "_fwd" not in call.func.id or call.func.id not in by_name or \
                not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or \
                not isinstance(stmt.targets[0], gast.Tuple):
            continue
        bwd_name = call.func.id.replace("_fwd", "_bwd")
        if bwd_name not in by_name or calls.get(call.func.id) != 1 or \
                calls.get(bwd_name) != 1 or {call.func.id, bwd_name} & set(entries):
            continue
        for later in caller.body[k + 1:]:
            other = _call_of(later)
            if other is not None and other.func.id == bwd_name:
                out.append((stmt, later))
    return out


def _written_names(fn):
    """Names `fn` binds, writes elements of, or hands to a call that may write them."""
    out = set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del)):
            out.add(node.id)
        elif isinstance(node, (gast.Assign, gast.AugAssign)):
            for target in (node.targets if isinstance(node, gast.Assign) else [node.target]):
                for inner in gast.walk(target):
                    if isinstance(inner, gast.Subscript) and isinstance(inner.value, gast.Name):
                        out.add(inner.value.id)
        elif isinstance(node, gast.Call):
            called = dotted_name(node.func) or ""
            if called in _WRITERS or numpy_writes_first_argument(called) or \
                    called.startswith(("add_", "subtract_")):
                if node.args and isinstance(node.args[0], gast.Name):
                    out.add(node.args[0].id)
            out.update(k.value.id for k in node.keywords
                       if k.arg == "out" and isinstance(k.value, gast.Name))
            if isinstance(node.func, gast.Attribute) and isinstance(node.func.value, gast.Name) \
                    and not called.startswith(("np.", "math.", "numba.")):
                out.add(node.func.value.id)  # x.fill(0), lst.append(v)
    return out


class _Numbering:
    """Value numbers of one function's expressions (see the module docstring)."""

    _tags = itertools.count()

    def __init__(self, params, readonly):
        self.env = dict(params)  # name -> number
        self.readonly = readonly  # names whose elements nobody writes
        self.tag = next(self._tags)
        self.count = itertools.count()

    def opaque(self):
        return ("opaque", self.tag, next(self.count))

    def expr(self, node):
        if isinstance(node, gast.Constant):
            return ("const", type(node.value).__name__, repr(node.value))
        if isinstance(node, gast.Name):
            found = self.env.get(node.id)
            if found is None:
                self.env[node.id] = found = self.opaque()
            return found
        if isinstance(node, gast.BinOp):
            return ("bin", type(node.op).__name__, self.expr(node.left), self.expr(node.right))
        if isinstance(node, gast.UnaryOp):
            return ("unary", type(node.op).__name__, self.expr(node.operand))
        if isinstance(node, gast.Compare) and len(node.ops) == 1:
            return ("compare", type(node.ops[0]).__name__, self.expr(node.left),
                    self.expr(node.comparators[0]))
        if isinstance(node, gast.BoolOp):
            return ("bool", type(node.op).__name__) + tuple(self.expr(v) for v in node.values)
        if isinstance(node, gast.IfExp):
            return ("ifexp", self.expr(node.test), self.expr(node.body), self.expr(node.orelse))
        if isinstance(node, gast.Tuple):
            return ("tuple",) + tuple(self.expr(e) for e in node.elts)
        if isinstance(node, gast.Attribute) and node.attr == "shape":
            return ("shape", self.expr(node.value))
        if isinstance(node, gast.Subscript):
            base = self.expr(node.value)
            if isinstance(node.value, gast.Name) and node.value.id in self.readonly or \
                    base[0] in ("shape", "tuple"):  # (an array nobody writes; a shape)
                return ("item", base, self.expr(node.slice))
            return self.opaque()
        if isinstance(node, gast.Call) and not node.keywords:
            called = dotted_name(node.func)
            if called == "index_at_least" and len(node.args) == 2:
                return self.expr(node.args[0])
            if called in _PURE:
                return ("call", called) + tuple(self.expr(a) for a in node.args)
        return self.opaque()

    def block(self, stmts, path, found):
        """Number `stmts` in order; record (statement, its number, path) of each ``t =
        <math call>(a)`` in `found` (the number holds the call's name)."""
        for stmt in stmts:
            if is_marker(stmt):
                continue
            if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                    isinstance(stmt.targets[0], gast.Name):
                value = self.expr(stmt.value)
                self.env[stmt.targets[0].id] = value
                call = stmt.value
                if isinstance(call, gast.Call) and dotted_name(call.func) in _MATH and \
                        len(call.args) == 1 and not call.keywords:
                    found.append((stmt, value, tuple(path)))
                continue
            if isinstance(stmt, gast.If):
                test = self.expr(stmt.test)
                before = dict(self.env)
                self.block(stmt.body, path + [(test, True)], found)
                self.env = dict(before)
                self.block(stmt.orelse, path + [(test, False)], found)
                self.env = before
            for node in gast.walk(stmt):  # whatever it binds is not known after it
                if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
                    self.env[node.id] = self.opaque()


def _range_of(loop):
    """n of ``for i in range(n)``, of ``for i in range(n - 1, -1, -1)``, else None."""
    it = loop.iter
    if not (isinstance(it, gast.Call) and dotted_name(it.func) == "range" and not it.keywords
            and isinstance(loop.target, gast.Name) and not loop.orelse):
        return None
    if len(it.args) == 1:
        return it.args[0]
    if len(it.args) == 3:
        top, stop, step = it.args
        if constant_int(stop) == -1 and constant_int(step) == -1 and \
                isinstance(top, gast.BinOp) and isinstance(top.op, gast.Sub) and \
                constant_int(top.right) == 1:
            return top.left
    return None


def _loops(fn):
    """The top-level loops of `fn` over a range of steps, with no early exit in them and their
    index not rebound (but as ``i = index_at_least(i, 0)``, which keeps its value)."""
    out = []
    for k, stmt in enumerate(fn.body):
        if not isinstance(stmt, gast.For) or _range_of(stmt) is None or any(
                isinstance(n, (gast.Break, gast.Continue, gast.Return)) for n in gast.walk(stmt)):
            continue
        index = stmt.target.id
        kept = {id(s.targets[0]) for s in gast.walk(stmt) if isinstance(s, gast.Assign) and
                len(s.targets) == 1 and isinstance(s.targets[0], gast.Name) and
                isinstance(s.value, gast.Call) and dotted_name(s.value.func) == "index_at_least"
                and isinstance(s.value.args[0], gast.Name) and s.value.args[0].id == index}
        if any(isinstance(n, gast.Name) and n.id == index and isinstance(n.ctx, gast.Store) and
               n is not stmt.target and id(n) not in kept for n in gast.walk(stmt)):
            continue
        out.append((k, stmt))
    return out


def _reuse(caller, fwd_stmt, bwd_stmt, by_name, taken, ranks):
    """A forward function's loop and its backward function's (see the module docstring);
    returns how many backward calls went."""
    fwd_call, bwd_call = _call_of(fwd_stmt), _call_of(bwd_stmt)
    fwd, bwd = by_name[fwd_call.func.id], by_name[bwd_call.func.id]
    returns = [n for n in gast.walk(fwd) if isinstance(n, gast.Return)]
    if len(returns) != 1 or returns[0] is not fwd.body[-1] or \
            not isinstance(returns[0].value, gast.Tuple) or \
            len(returns[0].value.elts) != len(fwd_stmt.targets[0].elts) or \
            not all(isinstance(a, (gast.Name, gast.Constant))
                    for a in fwd_call.args + bwd_call.args) or \
            fwd_call.keywords or bwd_call.keywords or \
            len(fwd_call.args) != len(fwd.args.args) or len(bwd_call.args) != len(bwd.args.args):
        return 0
    caller_writes = _written_names(caller)
    caller_params = {a.id for a in caller.args.args}
    fwd_writes, bwd_writes = _written_names(fwd), _written_names(bwd)

    def shared(arg):  # a name of the caller both functions may read as the same value
        return isinstance(arg, gast.Name) and arg.id in caller_params and \
            arg.id not in caller_writes

    def number(arg):  # what a shared argument or a constant holds
        return ("arg", arg.id) if isinstance(arg, gast.Name) else \
            ("const", type(arg.value).__name__, repr(arg.value))

    if any(shared(a) and p.id in fwd_writes for p, a in zip(fwd.args.args, fwd_call.args)) \
            or any(shared(a) and p.id in bwd_writes
                   for p, a in zip(bwd.args.args, bwd_call.args)):
        return 0  # (the generated functions never write the caller's arrays; be sure)
    fwd_params = {p.id: number(a) for p, a in zip(fwd.args.args, fwd_call.args)
                  if shared(a) or isinstance(a, gast.Constant) and p.id not in fwd_writes}
    readonly_fwd = {p for p, key in fwd_params.items() if key[0] == "arg"}
    numbering_f = _Numbering(fwd_params, readonly_fwd)
    numbering_f.block(fwd.body[:-1], [], [])  # (the values at the end: the outputs)
    outputs = {}
    bound = {}
    for node in gast.walk(fwd):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
            bound[node.id] = bound.get(node.id, 0) + 1
    top_bound = {s.targets[0].id for s in fwd.body if isinstance(s, gast.Assign) and
                 len(s.targets) == 1 and isinstance(s.targets[0], gast.Name)}
    for element, target in zip(returns[0].value.elts, fwd_stmt.targets[0].elts):
        if isinstance(element, gast.Name) and isinstance(target, gast.Name) and \
                bound.get(element.id) == 1 and element.id in top_bound and \
                list(_binders(caller, target.id)) == [fwd_stmt]:
            key = numbering_f.env.get(element.id)
            if key is not None and key[0] not in ("opaque", "arg"):
                outputs[target.id] = key  # (a number the forward function computed)
    bwd_params = {}
    for p, a in zip(bwd.args.args, bwd_call.args):
        if p.id in bwd_writes:
            continue
        if shared(a) or isinstance(a, gast.Constant):
            bwd_params[p.id] = number(a)
        elif outputs.get(a.id) is not None:
            bwd_params[p.id] = outputs[a.id]
    readonly_bwd = {p for p, key in bwd_params.items() if key[0] == "arg"}
    plan = _plan(fwd, fwd_params, readonly_fwd, bwd, bwd_params, readonly_bwd, ranks)
    if plan is None:
        return 0
    tape = fresh_name("math_tape", taken)  # (one name in all three functions)
    replaced = _write_tape(fwd, bwd, plan, tape)
    returns[0].value.elts.append(name_node(tape))
    fwd_stmt.targets[0].elts.append(name_node(tape, gast.Store()))
    bwd_call.args.append(name_node(tape))
    bwd.args.args.append(gast.Name(id=tape, ctx=gast.Param(), annotation=None,
                                   type_comment=None))
    return replaced


def _reuse_within(fn, taken, ranks):
    """A forward loop and a later backward loop of one function (a gradient whose function
    has no helper pair: its sweeps are one function); returns how many calls went."""
    writes = _written_names(fn)
    params = {a.id: ("arg", a.id) for a in fn.args.args if a.id not in writes}
    plan = _plan(fn, params, set(params), fn, params, set(params), ranks)
    if plan is None:
        return 0
    return _write_tape(fn, fn, plan, fresh_name("math_tape", taken))


def _plan(fwd, fwd_params, readonly_fwd, bwd, bwd_params, readonly_bwd, ranks):
    """(forward loop, [(forward statement, backward statement)]) of the math calls of
    `bwd`'s loops that `fwd`'s one loop made with the same numbered arguments on the same
    numbered path (a later loop, when `fwd` is `bwd`); None when there are none."""
    fwd_loops, bwd_loops = _loops(fwd), _loops(bwd)
    plans = []
    for bpos, bloop in bwd_loops:
        for fpos, floop in fwd_loops:
            if len(floop.iter.args) != 1 or (fwd is bwd and fpos >= bpos):
                continue
            nf = _Numbering(fwd_params, readonly_fwd)
            nf.block(fwd.body[:fpos], [], [])
            nb = _Numbering(bwd_params, readonly_bwd)
            nb.block(bwd.body[:bpos], [], [])
            steps = nf.expr(_range_of(floop))
            if steps != nb.expr(_range_of(bloop)) or "opaque" in _flat(steps):
                continue
            nf.env[floop.target.id] = nb.env[bloop.target.id] = ("index",)
            found_f, found_b = [], []
            nf.block(floop.body, [], found_f)
            nb.block(bloop.body, [], found_b)
            known = {}
            for stmt, value, path in found_f:
                known.setdefault((value, path), stmt)
            matched = [(known[(value, path)], stmt, bloop) for stmt, value, path in found_b
                       if (value, path) in known and "opaque" not in _flat(value) and
                       _rank(value, ranks) == 0]
            if matched:
                plans.append((floop, matched))
            break
    if not plans or len({id(floop) for floop, _ in plans}) != 1:
        return None  # (one tape per forward loop would need more outputs; not needed yet)
    return plans[0][0], [m for _, matched in plans for m in matched]


def _write_tape(fwd, bwd, plan, tape):
    """Fill `tape` in the forward loop after each matched call, read it in the backward
    loops in place of their calls; returns how many calls went."""
    floop, matched = plan
    columns = {}
    for fstmt, _, _ in matched:
        columns.setdefault(id(fstmt), (len(columns), fstmt))
    allocation = gast.Assign(targets=[name_node(tape, gast.Store())], value=gast.Call(
        func=gast.Attribute(value=name_node("np"), attr="empty", ctx=gast.Load()),
        args=[gast.Tuple(elts=[gast.Call(func=name_node("max"), args=[
            copy.deepcopy(_range_of(floop)), gast.Constant(0, None)], keywords=[]),
            gast.Constant(len(columns), None)], ctx=gast.Load())],
        keywords=[]), type_comment=None)
    fwd.body.insert(fwd.body.index(floop), allocation)
    for column, fstmt in columns.values():
        block = _block_of(floop, fstmt)
        store = gast.Assign(targets=[gast.Subscript(value=name_node(tape), slice=gast.Tuple(
            elts=[name_node(floop.target.id), gast.Constant(column, None)], ctx=gast.Load()),
            ctx=gast.Store())], value=name_node(fstmt.targets[0].id), type_comment=None)
        block.insert(block.index(fstmt) + 1, store)
    for fstmt, bstmt, bloop in matched:
        bstmt.value = gast.Subscript(value=name_node(tape), slice=gast.Tuple(
            elts=[name_node(bloop.target.id), gast.Constant(columns[id(fstmt)][0], None)],
            ctx=gast.Load()), ctx=gast.Load())
    return len(matched)


def _binders(caller, name):
    """The top-level statements of `caller` that bind `name`."""
    for stmt in caller.body:
        if any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Store)
               for n in gast.walk(stmt)):
            yield stmt


def _flat(key):
    out = []
    stack = [key]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        else:
            out.append(item)
    return out


def _block_of(root, stmt):
    """The statement list under `root` that holds `stmt`, else None."""
    for node in gast.walk(root):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
    return None
