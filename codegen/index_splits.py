"""A loop whose steps test the index against fixed bounds, split into a middle without tests.

The gather form of a stencil's adjoint (:mod:`autodiff_ast.gather_form`) visits every point
once and adds the neighbours' contributions that exist there:

    for j in range(0, n):
        if j >= 2:
            add_at(u_bar, j, un_bar[j - 1] * c)
        if j >= 1 and j < n - 1:
            ...
        if j < n - 2:
            add_at(u_bar, j, un_bar[j + 1] * c)

The tests keep the compiler from running the loop on SIMD lanes. :func:`split_index_tests`
writes it as three loops: the steps before every test holds (tests kept), the middle where
every test holds (no tests), the steps after (tests kept):

    low = min(max(0, 2, 1), n)
    high = max(min(n, n - 1, n - 2), low)
    for j in range(0, low): <the body>
    for j in range(low, high): <the body, each if replaced by its statements>
    for j in range(high, n): <the body>

Which loops: ``for j in range(a, b)`` (or ``range(b)``: step one) whose body is statements and
``if`` statements without ``else`` whose test is a comparison of j with an expression
(``j >= e``, ``j > e``, ``j < e``, ``j <= e``, either side) or an ``and`` of such; at least
one test. Every bound (a, b and each e) is an integer the loop cannot change: integer
constants, lengths (``len(x)``, ``x.shape[k]``), names every binding of which is one of those
or integer arithmetic of them (a parameter's type is not known: never). The steps run in the
same order as before, each doing what it did, so the result is the same to the bit.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(g):
...     n = g.shape[0]
...     for j in range(n):
...         if j >= 1:
...             g[j] += g[j - 1]
...         if j < n - 1:
...             g[j] += 2.0
... ''').body[0]
>>> split_index_tests(fn, {"f", "g", "n", "j"})
1
>>> print(unparse(fn))
def f(g):
    n = g.shape[0]
    low = min(max(0, 1), n)
    high = max(min(n, n - 1), low)
    for j in range(0, low):
        if j >= 1:
            g[j] += g[j - 1]
        if j < n - 1:
            g[j] += 2.0
    for j in range(low, high):
        g[j] += g[j - 1]
        g[j] += 2.0
    for j in range(high, n):
        if j >= 1:
            g[j] += g[j - 1]
        if j < n - 1:
            g[j] += 2.0
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, name_node

__all__ = ["split_index_tests"]


def _bounds(test, index):
    """([lower bounds: j >= e], [upper bounds: j < e]) of a test, or None. `j > e` is
    `j >= e + 1`, `j <= e` is `j < e + 1`."""
    if isinstance(test, gast.BoolOp) and isinstance(test.op, gast.And):
        lows, highs = [], []
        for value in test.values:
            found = _bounds(value, index)
            if found is None:
                return None
            lows += found[0]
            highs += found[1]
        return lows, highs
    if not (isinstance(test, gast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(right, gast.Name) and right.id == index and not \
            (isinstance(left, gast.Name) and left.id == index):
        flipped = {gast.Lt: gast.Gt(), gast.LtE: gast.GtE(), gast.Gt: gast.Lt(),
                   gast.GtE: gast.LtE()}
        if type(op) not in flipped:
            return None
        left, op, right = right, flipped[type(op)], left
    if not (isinstance(left, gast.Name) and left.id == index) or \
            any(isinstance(n, gast.Name) and n.id == index for n in gast.walk(right)):
        return None
    one = gast.Constant(value=1, kind=None)
    if isinstance(op, gast.GtE):
        return [right], []
    if isinstance(op, gast.Gt):
        return [gast.BinOp(left=right, op=gast.Add(), right=one)], []
    if isinstance(op, gast.Lt):
        return [], [right]
    if isinstance(op, gast.LtE):
        return [], [gast.BinOp(left=right, op=gast.Add(), right=one)]
    return None


_INT_OPS = (gast.Add, gast.Sub, gast.Mult, gast.FloorDiv, gast.Mod)


def _is_shape(node):
    return isinstance(node, gast.Attribute) and node.attr == "shape"


def _int_expr(node, ints):
    """Whether `node` is an integer the loop cannot change: int constants, names known to
    hold integers, lengths (`len(x)`, `x.shape[k]`, `x.size`) and integer arithmetic."""
    if isinstance(node, gast.Constant):
        return type(node.value) is int
    if isinstance(node, gast.Name):
        return node.id in ints
    if isinstance(node, gast.BinOp):
        return isinstance(node.op, _INT_OPS) and _int_expr(node.left, ints) and \
            _int_expr(node.right, ints)
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, gast.USub) and _int_expr(node.operand, ints)
    if isinstance(node, gast.Subscript):
        return _is_shape(node.value) and isinstance(node.slice, gast.Constant) and \
            type(node.slice.value) is int
    if isinstance(node, gast.Attribute):
        return node.attr == "size" and isinstance(node.value, gast.Name)
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
            not node.keywords:
        if node.func.id == "len":
            return len(node.args) == 1 and isinstance(node.args[0], gast.Name)
        if node.func.id in ("min", "max"):
            return bool(node.args) and all(_int_expr(a, ints) for a in node.args)
    return False


def _int_names(fn):
    """Names every binding of which in `fn` is an integer expression, an element of a
    shape (`n, d = x.shape`, or of a name holding one) or a loop over a range."""
    bindings = {}
    shapes = set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign):
            for target in node.targets:
                if isinstance(target, gast.Name):
                    bindings.setdefault(target.id, []).append(node.value)
                    if _is_shape(node.value):
                        shapes.add(target.id)
                else:
                    for n in gast.walk(target):
                        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                            from_shape = isinstance(target, gast.Tuple) and (
                                _is_shape(node.value) or isinstance(node.value, gast.Name))
                            bindings.setdefault(n.id, []).append(
                                ("shape", node.value) if from_shape else None)
        elif isinstance(node, gast.For):
            is_range = isinstance(node.iter, gast.Call) and \
                isinstance(node.iter.func, gast.Name) and node.iter.func.id == "range"
            for n in gast.walk(node.target):
                if isinstance(n, gast.Name):
                    bindings.setdefault(n.id, []).append(("range",) if is_range else None)
        elif isinstance(node, (gast.AugAssign, gast.AnnAssign, gast.NamedExpr,
                               gast.comprehension, gast.With, gast.ExceptHandler)):
            for n in gast.walk(node):
                if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                    bindings.setdefault(n.id, []).append(None)
    for a in fn.args.args:
        bindings.setdefault(a.id, []).append(None)
    ints, changed = set(), True
    while changed:
        changed = False
        for name, values in bindings.items():
            if name in ints:
                continue
            ok = True
            for v in values:
                if v is None:
                    ok = False
                elif isinstance(v, tuple):
                    ok = ok and (v[0] == "range" or _is_shape(v[1]) or
                                 isinstance(v[1], gast.Name) and v[1].id in shapes)
                else:
                    ok = ok and _int_expr(v, ints)
            if ok:
                ints.add(name)
                changed = True
    return ints


def _plan(loop, ints):
    """(start, stop, lows, highs) of a loop to split, or None."""
    if not (isinstance(loop.target, gast.Name) and isinstance(loop.iter, gast.Call) and
            isinstance(loop.iter.func, gast.Name) and loop.iter.func.id == "range" and
            not loop.iter.keywords and 1 <= len(loop.iter.args) <= 2 and not loop.orelse):
        return None
    index = loop.target.id
    args = loop.iter.args
    start = args[0] if len(args) == 2 else gast.Constant(value=0, kind=None)
    stop = args[-1]
    bound = {n.id for s in loop.body for n in gast.walk(s)
             if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Del))}
    if index in bound or any(isinstance(n, (gast.Break, gast.Continue, gast.Return))
                             for s in loop.body for n in gast.walk(s)):
        return None
    lows, highs, tests = [], [], 0
    for stmt in loop.body:
        if not isinstance(stmt, gast.If):
            continue
        found = _bounds(stmt.test, index) if not stmt.orelse else None
        if found is None:
            return None
        for expr in found[0] + found[1]:
            if any(isinstance(n, gast.Name) and n.id in bound for n in gast.walk(expr)) or \
                    not _int_expr(expr, ints):
                return None
        lows += found[0]
        highs += found[1]
        tests += 1
    if not tests or not all(_int_expr(e, ints) for e in (start, stop)):
        return None
    return start, stop, lows, highs


def _call(name, args):
    return gast.Call(func=name_node(name), args=args, keywords=[])


def _range_loop(loop, start, stop, body):
    out = copy.deepcopy(loop)
    out.iter = _call("range", [copy.deepcopy(start), copy.deepcopy(stop)])
    out.body = body
    return out


def _untested(body):
    out = []
    for stmt in body:
        out += copy.deepcopy(stmt.body) if isinstance(stmt, gast.If) else [copy.deepcopy(stmt)]
    return out


class _Splitter(gast.NodeTransformer):
    def __init__(self, taken, ints):
        self.taken = taken
        self.ints = ints
        self.count = 0

    def _block(self, stmts):
        out = []
        for stmt in stmts:
            stmt = self.visit(stmt)
            plan = _plan(stmt, self.ints) if isinstance(stmt, gast.For) else None
            if plan is None:
                out.append(stmt)
                continue
            start, stop, lows, highs = plan
            low, high = fresh_name("low", self.taken), fresh_name("high", self.taken)
            self.taken |= {low, high}
            low_value = _call("min", [_call("max", [copy.deepcopy(start)] + lows),
                                      copy.deepcopy(stop)])
            high_value = _call("max", [_call("min", [copy.deepcopy(stop)] + highs),
                                       name_node(low)])
            out += [gast.Assign(targets=[name_node(low, gast.Store())], value=low_value,
                                type_comment=None),
                    gast.Assign(targets=[name_node(high, gast.Store())], value=high_value,
                                type_comment=None),
                    _range_loop(stmt, start, name_node(low), copy.deepcopy(stmt.body)),
                    _range_loop(stmt, name_node(low), name_node(high), _untested(stmt.body)),
                    _range_loop(stmt, name_node(high), stop, copy.deepcopy(stmt.body))]
            self.count += 1
        return out

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], gast.stmt):
                setattr(node, field, self._block(block))
        return node


def split_index_tests(fn, taken):
    """Split each loop of `fn` (a gast FunctionDef, in place) whose steps test the index
    against fixed bounds; `taken` holds the module's names. Returns how many were split."""
    splitter = _Splitter(taken, _int_names(fn))
    fn.body = splitter._block(fn.body)
    return splitter.count
