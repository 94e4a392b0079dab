"""Small branches of a loop written without a jump: selects instead of ``if``.

The backward sweep of a running maximum (``if terms[c] > top: top = terms[c]``) reads the
taped condition of each step and, where it held, hands the maximum's adjoint to that element:

    for c in range(k - 1, 0, -1):
        if cond:
            add_at(terms_bar, c, top_bar)
            top_bar = 0.0
        cond = cond_tape[i * (k - 1) + (c - 1)]

The conditions follow the data, so the processor guesses the branch wrong about as often as
the maximum changed hands, and a wrong guess costs more than the branch's whole body (the GMM
log-sum-exp kernel's gradient spent 25 of its 330 us in the loop above). A select costs the
same whichever way the condition goes. :func:`select_small_branches` writes such a loop a
second time, its small branches as statements that take effect only where the condition
holds, and runs that copy when every index its adds use is in range:

    if indices_valid(terms_bar.shape[0], k - 1, 0, -1, 0):
        for c in range(k - 1, 0, -1):
            add_at_where(terms_bar, c, top_bar, cond)
            top_bar = 0.0 if cond else top_bar
            cond = cond_tape[i * (k - 1) + (c - 1)]
    else:
        (the loop as it was)

Each rewritten statement leaves everything as it was where the condition is false (the add
stores ``a[i] + 0.0`` back, which needs ``i`` in range whatever the condition: hence the copy
and the check, done once before the loop), so running them one after the other does what the
branch did. A loop whose branches only bind names needs no check and no copy.

Which branches: an ``if`` written directly in the body of a ``for`` over a ``range`` with a
constant step, whose test is a name (or ``not`` a name) that the branch does not bind, with
at most :data:`MAX_STATEMENTS` statements in its body and ``else`` together, each one of

- ``name = value``, where ``name`` is bound before on every path (a parameter, or assigned by
  an earlier statement of the loop's body, of the block around the loop or of a block around
  that), and
- ``add_at(a, i, value)``, ``subtract_at(a, i, value)``, ``a[i] += value`` or ``a[i] -=
  value``, where ``a`` is a name the loop does not bind and ``i`` is the loop's index plus or
  minus an integer the loop does not change,

where ``value`` is evaluated whether or not the condition holds, so it must be cheap and
unable to fail: a constant, a name, or ``+``, ``-``, ``*`` of names bound to numbers
(assigned a numeric constant somewhere in the function, or a ``range`` loop's index) and
constants. Array arithmetic (which would allocate in every step), indexing and calls stay
under the branch. The loop's ``range`` arguments are evaluated again by the check, so they
may hold only names, constants, arithmetic, ``.shape`` reads and ``len``/``min``/``max``.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(terms_bar, cond_tape, k):
...     top_bar = 0.0
...     cond = False
...     for c in range(k - 1, 0, -1):
...         if cond:
...             add_at(terms_bar, c, top_bar)
...             top_bar = 0.0
...         cond = cond_tape[c - 1]
...     return top_bar
... ''').body[0]
>>> select_small_branches(fn)
True
>>> print(unparse(fn.body[2]))
if indices_valid(terms_bar.shape[0], k - 1, 0, -1, 0):
    for c in range(k - 1, 0, -1):
        add_at_where(terms_bar, c, top_bar, cond)
        top_bar = 0.0 if cond else top_bar
        cond = cond_tape[c - 1]
else:
    for c in range(k - 1, 0, -1):
        if cond:
            add_at(terms_bar, c, top_bar)
            top_bar = 0.0
        cond = cond_tape[c - 1]
"""

from __future__ import annotations

import copy

import gast

from .emit import name_node, text_of

__all__ = ["select_small_branches", "SELECT_HELPERS", "SELECT_UNCOMPILED", "MAX_STATEMENTS"]

#: The most statements (body and ``else`` together) a branch written as selects may have.
MAX_STATEMENTS = 6

_ARITHMETIC = (gast.Add, gast.Sub, gast.Mult)
_PURE_CALLS = ("len", "min", "max")


def select_small_branches(fn):
    """Rewrite `fn` (a gast FunctionDef, in place); returns whether any loop was rewritten."""
    numbers = _number_names(fn)
    bound = {a.id for a in fn.args.args if isinstance(a, gast.Name)}
    return _block(fn.body, bound, numbers)


def _block(block, bound, numbers):
    """Rewrite the loops of `block` and of the blocks inside it; `bound` holds the names
    bound on every path into the block."""
    changed = False
    bound = set(bound)
    for k, stmt in enumerate(block):
        if isinstance(stmt, gast.For):
            inner = bound | _target_names(stmt.target)
            changed |= _block(stmt.body, inner, numbers)
            changed |= _block(stmt.orelse, bound, numbers)
            rewritten = _rewrite_loop(stmt, bound, numbers)
            if rewritten is not None:
                block[k] = rewritten
                changed = True
        elif isinstance(stmt, (gast.While, gast.If)):
            changed |= _block(stmt.body, bound, numbers)
            changed |= _block(stmt.orelse, bound, numbers)
        elif isinstance(stmt, (gast.With, gast.Try)):
            changed |= _block(stmt.body, bound, numbers)
        bound |= _bound_by(stmt)
    return changed


# ---------------------------------------------------------------- the loop
def _range_parts(loop):
    """(start, stop, step) expressions of ``for i in range(...)`` with a constant nonzero
    step and arguments that are cheap to evaluate again, or None."""
    it = loop.iter
    if not (isinstance(loop.target, gast.Name) and isinstance(it, gast.Call) and
            isinstance(it.func, gast.Name) and it.func.id == "range" and not it.keywords and
            1 <= len(it.args) <= 3 and not loop.orelse):
        return None
    args = list(it.args)
    if not all(_pure(a) for a in args):
        return None
    if len(args) == 1:
        args = [gast.Constant(value=0, kind=None)] + args
    if len(args) == 2:
        args.append(gast.Constant(value=1, kind=None))
    step = args[2]
    if isinstance(step, gast.UnaryOp) and isinstance(step.op, gast.USub) and \
            isinstance(step.operand, gast.Constant):
        value = -step.operand.value if type(step.operand.value) is int else None
    else:
        value = step.value if isinstance(step, gast.Constant) and \
            type(step.value) is int else None
    if not value:
        return None
    return args[0], args[1], args[2]


def _pure(node):
    """An expression with no effect that is cheap to evaluate twice."""
    if isinstance(node, (gast.Name, gast.Constant)):
        return True
    if isinstance(node, gast.BinOp):
        return _pure(node.left) and _pure(node.right)
    if isinstance(node, gast.UnaryOp):
        return _pure(node.operand)
    if isinstance(node, gast.Attribute):
        return node.attr == "shape" and _pure(node.value)
    if isinstance(node, gast.Subscript):
        return _pure(node.value) and isinstance(node.slice, (gast.Constant, gast.Name))
    if isinstance(node, gast.Call):
        return isinstance(node.func, gast.Name) and node.func.id in _PURE_CALLS and \
            not node.keywords and all(_pure(a) for a in node.args)
    return False


def _rewrite_loop(loop, bound, numbers):
    """The loop with its small branches as selects (behind a check of its indices when it
    adds into arrays), or None."""
    parts = _range_parts(loop)
    if parts is None:
        return None
    index = loop.target.id
    stored = {n.id for n in gast.walk(loop) if isinstance(n, gast.Name) and
              isinstance(n.ctx, (gast.Store, gast.Del))}
    here = bound | {index}
    body, checks, converted = [], [], False
    for stmt in loop.body:
        selects = None
        if isinstance(stmt, gast.If):
            selects = _as_selects(stmt, here, numbers, index, stored)
        if selects is None:
            body.append(copy.deepcopy(stmt))
        else:
            statements, updates = selects
            body += statements
            for update in updates:
                if update not in checks:
                    checks.append(update)
            converted = True
        here |= _bound_by(stmt)
    if not converted:
        return None
    fast = gast.For(target=copy.deepcopy(loop.target), iter=copy.deepcopy(loop.iter),
                    body=body, orelse=[], type_comment=None)
    if not checks:
        return fast
    if any(isinstance(n, (gast.For, gast.While)) for s in loop.body for n in gast.walk(s)):
        return None  # (two copies of an inner loop nest: compile time for little)
    start, stop, step = parts
    tests = [gast.Call(func=name_node("indices_valid"), args=[
        gast.Subscript(value=gast.Attribute(value=name_node(array), attr="shape",
                                            ctx=gast.Load()),
                       slice=gast.Constant(value=0, kind=None), ctx=gast.Load()),
        copy.deepcopy(start), copy.deepcopy(stop), copy.deepcopy(step),
        copy.deepcopy(offset)], keywords=[]) for array, offset in _unique(checks)]
    test = tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)
    return gast.If(test=test, body=[fast], orelse=[loop])


def _unique(checks):
    """(array, offset expression) pairs, one per distinct text."""
    seen, out = set(), []
    for array, offset in checks:
        key = (array, text_of(offset))
        if key not in seen:
            seen.add(key)
            out.append((array, offset))
    return out


# ---------------------------------------------------------------- one branch
def _as_selects(stmt, bound, numbers, index, stored):
    """(statements doing what the ``if`` `stmt` does without a jump, [(array, offset)] their
    adds need in range), or None."""
    test = stmt.test
    negated = isinstance(test, gast.UnaryOp) and isinstance(test.op, gast.Not)
    cond = test.operand if negated else test
    if not isinstance(cond, gast.Name) or not stmt.body:
        return None
    if len(stmt.body) + len(stmt.orelse) > MAX_STATEMENTS:
        return None
    written = set()
    for inner in stmt.body + stmt.orelse:
        written |= _bound_by(inner)
    if cond.id in written:
        return None
    out, updates = [], []
    for holds, block in ((not negated, stmt.body), (negated, stmt.orelse)):
        for inner in block:
            select = _select(inner, cond.id, holds, bound, numbers, index, stored)
            if select is None:
                return None
            out.append(select[0])
            if select[1] is not None:
                updates.append(select[1])
    return out, updates


def _condition(cond, holds):
    test = name_node(cond)
    return test if holds else gast.UnaryOp(op=gast.Not(), operand=test)


def _select(stmt, cond, holds, bound, numbers, index, stored):
    """(`stmt` taking effect only where `cond` is `holds`, the (array, offset) its add needs
    in range or None), or None."""
    if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], gast.Name):
        target = stmt.targets[0].id
        if target not in bound or not _cheap(stmt.value, numbers):
            return None
        kept = name_node(target)
        new, old = (stmt.value, kept) if holds else (kept, stmt.value)
        return gast.Assign(targets=[name_node(target, gast.Store())], value=gast.IfExp(
            test=name_node(cond), body=copy.deepcopy(new), orelse=copy.deepcopy(old)),
            type_comment=None), None
    update = _element_update(stmt)
    if update is None:
        return None
    array, position, value = update
    offset = _offset(position, index, stored)
    if array in stored or offset is None or not _cheap(value, numbers):
        return None
    call = gast.Expr(value=gast.Call(func=name_node("add_at_where"), args=[
        name_node(array), copy.deepcopy(position), copy.deepcopy(value),
        _condition(cond, holds)], keywords=[]))
    return call, (array, offset)


def _element_update(stmt):
    """(array, index, added value) of ``add_at(a, i, v)``, ``subtract_at(a, i, v)``,
    ``a[i] += v`` or ``a[i] -= v`` with one index, or None."""
    if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
            isinstance(stmt.value.func, gast.Name) and \
            stmt.value.func.id in ("add_at", "subtract_at") and \
            len(stmt.value.args) == 3 and not stmt.value.keywords and \
            isinstance(stmt.value.args[0], gast.Name):
        array, position, value = stmt.value.args
        if stmt.value.func.id == "subtract_at":
            value = gast.UnaryOp(op=gast.USub(), operand=value)
        return array.id, position, value
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, (gast.Add, gast.Sub)) and \
            isinstance(stmt.target, gast.Subscript) and \
            isinstance(stmt.target.value, gast.Name) and \
            not isinstance(stmt.target.slice, (gast.Tuple, gast.Slice)):
        value = stmt.value
        if isinstance(stmt.op, gast.Sub):
            value = gast.UnaryOp(op=gast.USub(), operand=value)
        return stmt.target.value.id, stmt.target.slice, value
    return None


def _offset(position, index, stored):
    """The integer e of ``index``, ``index + e``, ``e + index`` or ``index - e`` (e not
    changed by the loop), as an expression; None for other positions."""
    if isinstance(position, gast.Name) and position.id == index:
        return gast.Constant(value=0, kind=None)
    if not isinstance(position, gast.BinOp) or not isinstance(position.op, (gast.Add,
                                                                            gast.Sub)):
        return None
    left, right = position.left, position.right
    if isinstance(left, gast.Name) and left.id == index and _invariant_int(right, stored):
        return copy.deepcopy(right) if isinstance(position.op, gast.Add) else \
            gast.UnaryOp(op=gast.USub(), operand=copy.deepcopy(right))
    if isinstance(position.op, gast.Add) and isinstance(right, gast.Name) and \
            right.id == index and _invariant_int(left, stored):
        return copy.deepcopy(left)
    return None


def _invariant_int(node, stored):
    if isinstance(node, gast.Constant):
        return type(node.value) is int
    if isinstance(node, gast.Name):
        return node.id not in stored
    if isinstance(node, gast.BinOp) and isinstance(node.op, (gast.Add, gast.Sub, gast.Mult)):
        return _invariant_int(node.left, stored) and _invariant_int(node.right, stored)
    return False


# ---------------------------------------------------------------- names and values
def _bound_by(stmt):
    """Names `stmt` binds on every path through it (assignments, not compound statements)."""
    if isinstance(stmt, gast.Assign):
        names = set()
        for target in stmt.targets:
            names |= _target_names(target)
        return names
    if isinstance(stmt, (gast.AugAssign, gast.AnnAssign)) and \
            isinstance(stmt.target, gast.Name):
        return {stmt.target.id}
    return set()


def _target_names(target):
    if isinstance(target, gast.Name):
        return {target.id}
    if isinstance(target, (gast.Tuple, gast.List)):
        names = set()
        for element in target.elts:
            names |= _target_names(element)
        return names
    return set()


def _number_names(fn):
    """Names the function binds to numbers: assigned a numeric constant somewhere (Numba gives
    a name one type, so such a name is a number everywhere) or a ``range`` loop's index."""
    names = set()
    for node in gast.walk(fn):
        if isinstance(node, gast.Assign) and _numeric_constant(node.value):
            for target in node.targets:
                if isinstance(target, gast.Name):
                    names.add(target.id)
        elif isinstance(node, gast.For) and isinstance(node.target, gast.Name) and \
                isinstance(node.iter, gast.Call) and isinstance(node.iter.func, gast.Name) \
                and node.iter.func.id == "range":
            names.add(node.target.id)
    return names


def _numeric_constant(node):
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
        node = node.operand
    return isinstance(node, gast.Constant) and type(node.value) in (int, float, bool)


def _cheap(node, numbers):
    """A value that costs next to nothing and cannot fail where the condition is false."""
    if isinstance(node, gast.Name) or _numeric_constant(node):
        return True
    return _arithmetic(node, numbers)


def _arithmetic(node, numbers):
    if isinstance(node, gast.Constant):
        return type(node.value) in (int, float)
    if isinstance(node, gast.Name):
        return node.id in numbers
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
        return _arithmetic(node.operand, numbers)
    if isinstance(node, gast.BinOp) and isinstance(node.op, _ARITHMETIC):
        return _arithmetic(node.left, numbers) and _arithmetic(node.right, numbers)
    return False


#: The helpers (plain forms and Numba overloads), written into a module that calls them.
SELECT_HELPERS = {"add_at_where": '''\
def add_at_where(a, i, v, cond):
    """`a[i] += v` where `cond` holds, for one integer `i` that indexes `a` (checked before
    the loop: indices_valid); for a vector `a[i] + 0.0` is stored back where it does not,
    so the processor has no jump to guess (codegen/branch_selects.py)."""
    if a.ndim == 1 and a.dtype.kind == "f":
        a[i] += v if cond else 0.0
    elif cond:
        a[i] += v


@numba.extending.overload(add_at_where, inline='always', jit_options={'error_model': 'numpy'})
def add_at_where_numba(a, i, v, cond):
    """How Numba compiles add_at_where: the select for a float vector, the branch for a row
    or an integer vector."""
    if isinstance(a, numba.types.Array) and a.ndim == 1 and \
            isinstance(a.dtype, numba.types.Float):
        def element(a, i, v, cond):
            a[i] += v if cond else 0.0
        return element

    def branch(a, i, v, cond):
        if cond:
            a[i] += v
    return branch
''', "indices_valid": '''\
def indices_valid(n, start, stop, step, offset):
    """Whether i + offset indexes one of n elements (a negative one counting from the end) for
    every i of range(start, stop, step): a loop's branch-free copy may then add where its
    condition does not hold (codegen/branch_selects.py)."""
    trips = len(range(start, stop, step))
    if trips == 0:
        return True
    last = start + (trips - 1) * step
    return -n <= min(start, last) + offset and max(start, last) + offset < n
'''}
SELECT_UNCOMPILED = frozenset({"add_at_where", "add_at_where_numba"})
