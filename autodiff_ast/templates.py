"""Source templates: derivative code written as Python text with placeholder names.

A rule says ``"g * (1.0 - y * y)"``; :func:`fill` parses it once and substitutes the
placeholders (``g`` the output's cotangent, ``y`` the output, the primal's parameter names)
with the names or expressions of one call site. :func:`simplify` then removes the noise that
mechanical substitution leaves (``1.0 * a``, ``a * (1.0 / b)``, ``--a``).

>>> import gast
>>> print(unparse(fill("g * (1.0 - y * y)", g=1.0, y="t")))
1.0 - t * t
"""

from __future__ import annotations

import ast
import copy
import functools

import gast


@functools.cache
def _parse(template):
    return gast.parse(template, mode="eval").body


_ATOMS = (str, int, float, bool, complex, bytes, type(None), type(Ellipsis))


def copy_tree(node, memo=None):
    """A deep copy of a gast tree, as ``copy.deepcopy`` makes it (a node reached twice is
    copied once) but several times faster: nodes are rebuilt from their attribute
    dictionaries, and only values that are not nodes, lists, tuples or atoms go through
    ``copy.deepcopy``.

    >>> tree = gast.parse("a + b * 2.0", mode="eval").body
    >>> twin = copy_tree(tree)
    >>> twin is not tree and unparse(twin) == unparse(tree)
    True
    """
    if memo is None:
        memo = {}
    return _copy_value(node, memo)


def _copy_value(value, memo):
    if type(value) in _ATOMS:
        return value
    key = id(value)
    done = memo.get(key)
    if done is not None:
        return done
    if isinstance(value, gast.AST):
        cls = type(value)
        new = cls.__new__(cls)
        memo[key] = new
        new.__dict__.update({k: _copy_value(v, memo) for k, v in value.__dict__.items()})
        return new
    if type(value) is list:
        new = []
        memo[key] = new
        new.extend(_copy_value(v, memo) for v in value)
        return new
    if type(value) is tuple:
        new = tuple(_copy_value(v, memo) for v in value)
        return memo.setdefault(key, new)
    return copy.deepcopy(value, memo)


def to_expr(value):
    """A gast expression for a name (str), a number or an existing expression."""
    if isinstance(value, gast.AST):
        return copy_tree(value)
    if isinstance(value, str):
        return gast.Name(id=value, ctx=gast.Load(), annotation=None, type_comment=None)
    if isinstance(value, (bool, int, float)) or value is None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            return gast.UnaryOp(op=gast.USub(), operand=gast.Constant(value=-value, kind=None))
        return gast.Constant(value=value, kind=None)
    if isinstance(value, tuple):
        return gast.Tuple(elts=[to_expr(v) for v in value], ctx=gast.Load())
    raise TypeError(f"cannot turn {value!r} into an expression")


class _Substitute(gast.NodeTransformer):
    def __init__(self, subs):
        self.subs = subs

    def visit_Name(self, node):
        if node.id in self.subs:
            return to_expr(self.subs[node.id])
        return node


def fill(template, **subs):
    """Parse `template` and replace its placeholder names; returns a simplified expression."""
    tree = copy_tree(_parse(template))
    tree = _Substitute(subs).visit(tree)
    return simplify(tree)


def summed(terms):
    """The expressions `terms` (at least one) added left to right: ``t0 + t1 + ...``.

    >>> import ast
    >>> ast.unparse(gast.gast_to_ast(summed([fill("a"), fill("2 * b"), fill("c")])))
    'a + 2 * b + c'
    """
    total = terms[0]
    for term in terms[1:]:
        total = fill("a + b", a=total, b=term)
    return total


def name(identifier, store=False):
    """A gast Name node."""
    return gast.Name(id=identifier, ctx=gast.Store() if store else gast.Load(),
                     annotation=None, type_comment=None)


def copy_marks(source, target):
    """Give `target` (a node replacing `source`) the attributes passes hang on nodes (origin,
    backward marks, same_shape_as and the like): every attribute of `source` that is neither
    a field of `target` nor a source position."""
    for attr, held in vars(source).items():
        if attr not in target._fields and attr not in ("lineno", "col_offset", "end_lineno",
                                                        "end_col_offset"):
            setattr(target, attr, held)
    return target


def append_loop(target, source, entry, element):
    """``target = []`` and ``for element in source: target.append(entry)`` (`entry` a
    template of ``e``, which names the element): a list built element by element (a loop,
    not a comprehension: generated code is differentiated again).

    >>> print("\\n".join(unparse(s) for s in append_loop("xs_bar", name("xs"), "0.0", "e_1")))
    xs_bar = []
    for e_1 in xs:
        xs_bar.append(0.0)
    """
    return [assign(target, gast.List(elts=[], ctx=gast.Load())),
            gast.For(target=name(element, store=True), iter=source,
                     body=[gast.Expr(value=fill(f"t.append({entry})", t=target, e=element))],
                     orelse=[], type_comment=None)]


def assign(target, value):
    """``target = value`` as a gast statement; target is a name or a list of names."""
    if isinstance(target, (list, tuple)):
        tgt = gast.Tuple(elts=[name(t, store=True) for t in target], ctx=gast.Store())
    elif isinstance(target, str):
        tgt = name(target, store=True)
    else:
        tgt = target
    return gast.Assign(targets=[tgt], value=to_expr(value), type_comment=None)


def is_const(node, value=None):
    """Whether `node` is a numeric constant (equal to `value` when given), sign included."""
    v = const_value(node)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return value is None or v == value


def const_value(node):
    """The value of a numeric constant expression such as ``2.0`` or ``-1``, else None."""
    if isinstance(node, gast.Constant):
        return node.value
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        inner = const_value(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return None


def _num(value):
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return to_expr(float(value))
    return to_expr(value)


class _Simplify(gast.NodeTransformer):
    """Local algebraic clean-ups that keep the arithmetic exactly equal.

    ``changed`` records whether a clean-up rewrote anything (every rewrite returns a node
    other than the one visited; re-spelling a negative constant as itself does not count).
    """

    changed = False

    def visit_UnaryOp(self, node):
        result = self._unary(node)
        if result is not node and not _same_negative_constant(node, result):
            self.changed = True
        return result

    def visit_BinOp(self, node):
        result = self._binary(node)
        if result is not node:
            self.changed = True
        return result

    def _unary(self, node):
        self.generic_visit(node)
        if isinstance(node.op, gast.USub):
            inner = node.operand
            if isinstance(inner, gast.UnaryOp) and isinstance(inner.op, gast.USub):
                return inner.operand
            v = const_value(inner)
            if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)):
                return _num(-v)
        if isinstance(node.op, gast.UAdd):
            return node.operand
        if isinstance(node.op, gast.Not):
            inner = node.operand
            if isinstance(inner, gast.UnaryOp) and isinstance(inner.op, gast.Not):
                return inner.operand
            flipped = {gast.Eq: gast.NotEq, gast.NotEq: gast.Eq, gast.Lt: gast.GtE,
                       gast.GtE: gast.Lt, gast.Gt: gast.LtE, gast.LtE: gast.Gt}
            if isinstance(inner, gast.Compare) and len(inner.ops) == 1 and \
                    type(inner.ops[0]) in flipped and not _float_compare(inner):
                return gast.Compare(left=inner.left, ops=[flipped[type(inner.ops[0])]()],
                                    comparators=inner.comparators)
        return node

    def _binary(self, node):
        self.generic_visit(node)
        left, right, op = node.left, node.right, node.op
        lv, rv = const_value(left), const_value(right)
        numeric = (int, float)
        if (isinstance(lv, numeric) and isinstance(rv, numeric) and not isinstance(lv, bool)
                and not isinstance(rv, bool)):
            try:
                folded = {gast.Add: lambda: lv + rv, gast.Sub: lambda: lv - rv,
                          gast.Mult: lambda: lv * rv, gast.Pow: lambda: lv ** rv,
                          gast.Div: lambda: lv / rv if rv else None}[type(op)]()
            except (KeyError, OverflowError, ZeroDivisionError):
                folded = None
            if folded is not None:
                return _num(folded)
        if _converts(left, op) or _converts(right, op):
            return node  # the user's `1.0 * n`: a float from an int, kept
        if isinstance(op, gast.Mult):
            # (1.0 * mask is a float array; mask alone is a boolean one, which - negates
            # never and + combines by logical or)
            if is_const(left, 1) and not _boolean(right):
                return right
            if is_const(right, 1) and not _boolean(left):
                return left
            if is_const(left, -1) and not _boolean(right):
                return self.visit(gast.UnaryOp(op=gast.USub(), operand=right))
            if is_const(right, -1) and not _boolean(left):
                return self.visit(gast.UnaryOp(op=gast.USub(), operand=left))
            # g * (1.0 / b) -> g / b ; (1.0 / b) * g -> g / b
            for a, b in ((left, right), (right, left)):
                if isinstance(b, gast.BinOp) and isinstance(b.op, gast.Div) and is_const(b.left, 1):
                    return gast.BinOp(left=a, op=gast.Div(), right=b.right)
            # np.where(c, g, 0.0) * e -> np.where(c, g * e, 0.0): where c is false the
            # product is 0, not 0 * inf = nan (a branch vmap selected with np.where, or the
            # user's where, whose untaken side has an infinite derivative: sqrt, log at 0)
            masked = _masked_cotangent(left)
            if masked is not None:
                return masked(lambda g: gast.BinOp(left=g, op=gast.Mult(), right=right))
            masked = _masked_cotangent(right)
            if masked is not None:
                return masked(lambda g: gast.BinOp(left=left, op=gast.Mult(), right=g))
            # g * -a -> -(g * a)
            if isinstance(right, gast.UnaryOp) and isinstance(right.op, gast.USub):
                return gast.UnaryOp(op=gast.USub(), operand=self.visit(
                    gast.BinOp(left=left, op=gast.Mult(), right=right.operand)))
        if isinstance(op, gast.Div) and is_const(right, 1):
            return left
        if isinstance(op, gast.Div) and _masked_cotangent(left) is not None:
            return _masked_cotangent(left)(
                lambda g: gast.BinOp(left=g, op=gast.Div(), right=right))
        if isinstance(op, gast.Add):
            if isinstance(left, gast.UnaryOp) and isinstance(left.op, gast.USub) and not (
                    isinstance(right, gast.UnaryOp) and isinstance(right.op, gast.USub)):
                return gast.BinOp(left=right, op=gast.Sub(), right=left.operand)
            if is_const(left, 0):
                return right
            if is_const(right, 0):
                return left
            if isinstance(right, gast.UnaryOp) and isinstance(right.op, gast.USub):
                return gast.BinOp(left=left, op=gast.Sub(), right=right.operand)
        if isinstance(op, gast.Sub) and is_const(right, 0):
            return left
        if isinstance(op, gast.Pow) and is_const(right, 1):
            return left
        return node


def _masked_cotangent(node):
    """For ``np.where(c, g, 0.0)`` (or ``np.where(c, 0.0, g)``, either made a float with
    ``.astype(np.float64)``): a function that puts an expression of g in g's place, keeping
    the zero; None for any other node."""
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
            node.func.attr == "astype" and len(node.args) == 1 and \
            unparse(node.args[0]) == "np.float64":
        node = node.func.value
    if not (isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and
            node.func.attr == "where" and isinstance(node.func.value, gast.Name) and
            node.func.value.id == "np" and len(node.args) == 3 and not node.keywords):
        return None
    c, a, b = node.args
    for k, (zero, g) in enumerate(((b, a), (a, b))):
        value, given = const_value(zero), const_value(g)
        if isinstance(value, float) and value == 0.0 and given != 0:
            def rebuild(make, k=k, g=g, zero=zero):
                made = make(g)
                args = [c, made, zero] if k == 0 else [c, zero, made]
                return gast.Call(func=node.func, args=args, keywords=[])
            return rebuild
    return None


#: The attribute the front end sets on the numeric constants of the user's own code.
USER_CONSTANT = "user_written"


def mark_user_constants(tree):
    """Mark the numeric constants of the user's code (`tree`): :func:`simplify` then keeps
    ``1.0 * n``, ``n + 0.0``, ``n / 1`` and ``n ** 1.0`` the user wrote, which turn an int
    ``n`` (or an int array) into a float one, where it drops the same forms in generated code
    (whose operands are floats).

    >>> tree = gast.parse("k = np.arange(3) * 1.0").body[0]
    >>> _ = mark_user_constants(tree)
    >>> unparse(simplify(tree.value))
    'np.arange(3) * 1.0'
    >>> unparse(simplify(fill("g * 1.0", g="k_bar")))
    'k_bar'
    """
    for node in gast.walk(tree):
        if isinstance(node, gast.Constant) and type(node.value) in (int, float):
            setattr(node, USER_CONSTANT, True)
    return tree


def _converts(node, op):
    """Whether `node`, an operand of `op`, is a constant of the user's code whose identity
    operation may turn an int operand into a float: a float 1.0 multiplying, dividing or
    raising, a float 0.0 added or subtracted, any 1 dividing (``n / 1`` is a float)."""
    if not getattr(node, USER_CONSTANT, False):
        if not (isinstance(node, gast.UnaryOp) and getattr(node.operand, USER_CONSTANT, False)):
            return False
    value = const_value(node)
    if isinstance(op, gast.Div):
        return value in (1, -1)
    if not isinstance(value, float):
        return False
    if isinstance(op, (gast.Mult, gast.Pow)):
        return value in (1.0, -1.0)
    return isinstance(op, (gast.Add, gast.Sub)) and value == 0.0


_BOOLEAN_CALLS = ("isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_not",
                  "logical_xor", "signbit", "isclose", "greater", "less", "equal", "not_equal",
                  "greater_equal", "less_equal")


def _boolean(node):
    """Whether `node` may be a boolean array (a comparison, a logical function or operator)."""
    if isinstance(node, (gast.Compare, gast.BoolOp)):
        return True
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, (gast.Not, gast.Invert)) or _boolean(node.operand)
    if isinstance(node, gast.BinOp) and isinstance(node.op, (gast.BitAnd, gast.BitOr,
                                                             gast.BitXor)):
        return True
    if isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute):
        return node.func.attr in _BOOLEAN_CALLS
    return False


def _same_negative_constant(node, result):
    """Whether `result` spells the same ``-c`` as `node` (a constant's sign re-normalized)."""
    def parts(n):
        if isinstance(n, gast.UnaryOp) and isinstance(n.op, gast.USub) and \
                isinstance(n.operand, gast.Constant):
            c = n.operand
            return type(c.value), c.value, getattr(c, "kind", None)
        return None
    mine = parts(node)
    return mine is not None and mine == parts(result)


def _float_compare(node):
    """Ordered comparisons can't be flipped when NaN may be involved (not (a < b) != a >= b);
    == and != always can."""
    return not isinstance(node.ops[0], (gast.Eq, gast.NotEq))


def simplify(expr):
    """Apply the clean-ups until nothing changes.

    >>> print(unparse(simplify(fill("g * (1.0 / b)", g="y_bar", b="w"))))
    y_bar / w
    """
    while True:
        cleaner = _Simplify()
        expr = cleaner.visit(expr)
        if not cleaner.changed:
            return expr


def replace_names(node, texts):
    """`node` (a standard-library ast expression) with the names read in `texts` replaced by
    those expressions' source (an element ``x[i, j]`` for a vector ``v``, say).

    >>> ast.unparse(replace_names(ast.parse("v * 2.0 + w", mode="eval").body, {"v": "x[i, j]"}))
    'x[i, j] * 2.0 + w'
    """
    class Swap(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in texts and isinstance(node.ctx, ast.Load):
                return ast.parse(texts[node.id], mode="eval").body
            return node
    return Swap().visit(node)


def unparse(node):
    """Source text of a gast node (via the standard library's unparser; a negative constant
    raised to a power is parenthesized, :func:`codegen.emit.to_ast`).

    >>> unparse(gast.BinOp(left=gast.Constant(value=-0.7, kind=None), op=gast.Pow(),
    ...                    right=name("n")))
    '(-0.7) ** n'
    """
    from codegen.emit import to_ast
    return ast.unparse(to_ast(node)).strip()
