"""Emission: gast trees become one formatted, deterministic Python module.

We unparse with the standard library's ``ast.unparse`` (never astunparse, which writes invalid
code for NumPy slices such as ``x[:, None]``). Comments and blank lines cannot live in an AST, so
the transformations insert marker statements (:func:`comment`, :func:`blank`) that are turned
into ``# text`` lines after unparsing.

>>> import gast
>>> fn = function("f", ["x"], [comment("y = x * 2"), gast.parse("y = 2.0 * x").body[0]],
...               gast.parse("y", mode="eval").body)
>>> print(render_function(fn))
def f(x):
    # y = x * 2
    y = 2.0 * x
    return y
"""

from __future__ import annotations

import ast
import re

import gast

from .param_writes import keep_params_unwritten

_MARK = "__autodiff_ast_comment__"
_MARK_LINE = re.compile(r"^(\s*)" + _MARK + r"\((.*)\)\s*$")


def comment(text):
    """A statement that becomes ``# text`` in the emitted source."""
    text = " ".join(str(text).split("\n")[0].split()) if text else ""
    call = gast.Call(func=gast.Name(id=_MARK, ctx=gast.Load(), annotation=None, type_comment=None),
                     args=[gast.Constant(value=text, kind=None)], keywords=[])
    return gast.Expr(value=call)


def blank():
    """A statement that becomes an empty line in the emitted source."""
    call = gast.Call(func=gast.Name(id=_MARK, ctx=gast.Load(), annotation=None, type_comment=None),
                     args=[gast.Constant(value=None, kind=None)], keywords=[])
    return gast.Expr(value=call)


def is_marker(stmt):
    """Whether `stmt` is a comment or blank-line marker."""
    return isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
        isinstance(stmt.value.func, gast.Name) and stmt.value.func.id == _MARK


def function(name, params, body, returns, doc=None):
    """A gast FunctionDef; `returns` is an expression, a list of them (a tuple) or None. The
    body is checked by :func:`codegen.param_writes.keep_params_unwritten` (no writes into the
    caller's arrays)."""
    args = gast.arguments(
        args=[gast.Name(id=p, ctx=gast.Param(), annotation=None, type_comment=None)
              for p in params],
        posonlyargs=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    stmts = []
    if doc:
        stmts.append(gast.Expr(value=gast.Constant(value=doc, kind=None)))
    stmts.extend(keep_params_unwritten(params, list(body)))
    if isinstance(returns, list):
        value = returns[0] if len(returns) == 1 else gast.Tuple(elts=returns, ctx=gast.Load())
        stmts.append(gast.Return(value=value))
    elif returns is not None:
        stmts.append(gast.Return(value=returns))
    if not stmts:
        stmts.append(gast.Pass())
    return gast.FunctionDef(name=name, args=args, body=stmts, decorator_list=[], returns=None,
                            type_comment=None, type_params=[])


def _unmark(text):
    out = []
    for line in text.split("\n"):
        match = _MARK_LINE.match(line)
        if match:
            value = ast.literal_eval(match.group(2))
            out.append("" if value is None else f"{match.group(1)}# {value}")
        else:
            out.append(line)
    # No blank line right after a def line or doubled blank lines inside functions.
    cleaned = []
    for line in out:
        if line == "" and cleaned and (cleaned[-1] == "" or cleaned[-1].rstrip().endswith(":")):
            continue
        cleaned.append(line)
    return "\n".join(cleaned)


def to_ast(node):
    """A gast node as a standard-library ast node with locations filled in.

    A negative number constant raised to a power (or whose attribute is read) becomes
    ``-(number)``: ``ast.unparse`` writes a negative constant without parentheses, so
    ``(-0.7) ** 0`` would come out as ``-0.7 ** 0``, that is ``-(0.7 ** 0)``.

    >>> ast.unparse(to_ast(gast.BinOp(left=gast.Constant(value=-0.7, kind=None),
    ...                               op=gast.Pow(), right=gast.Constant(value=0, kind=None))))
    '(-0.7) ** 0'
    """
    tree = _NegativeConstants().visit(gast.gast_to_ast(node))
    return ast.fix_missing_locations(tree)


class _NegativeConstants(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            node.left = _negated(node.left)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.value = _negated(node.value)
        return node


def text_of(node):
    """The Python source of a gast expression or statement (``ast.unparse`` of its ast form).

    >>> text_of(gast.parse("x [ i+1 ]").body[0].value)
    'x[i + 1]'
    """
    return ast.unparse(to_ast(node))


def _negated(node):
    """A negative number constant as ``-(its absolute value)``; other nodes unchanged."""
    value = getattr(node, "value", None) if isinstance(node, ast.Constant) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            value < 0 or (isinstance(value, float) and str(value).startswith("-"))):
        return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-value))
    return node


def is_count(node, tree=gast, names=()):
    """Whether `node` (of the `tree` module's classes: gast, or the standard library's ast)
    is ``x.size``, ``x.shape[k]``, ``len(x)``, ``float(...)`` of one, or one of `names` (names
    bound to a count, count_names): a count that may be 0."""
    if isinstance(node, tree.Call) and isinstance(node.func, tree.Name) and \
            node.func.id in ("float", "int") and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    return (isinstance(node, tree.Attribute) and node.attr == "size") or \
        (isinstance(node, tree.Subscript) and isinstance(node.value, tree.Attribute) and
         node.value.attr == "shape") or \
        (isinstance(node, tree.Call) and isinstance(node.func, tree.Name) and
         node.func.id == "len") or \
        (isinstance(node, tree.Name) and node.id in names)


def count_names(fn, tree=gast):
    """Names `fn` binds to a count (``n = len(y)``, ``m = float(x.size)``), in the order of
    their bindings, so a name bound to another count name counts too."""
    names = set()
    for node in tree.walk(fn):
        if isinstance(node, tree.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], tree.Name) and is_count(node.value, tree, names):
            names.add(node.targets[0].id)
    return names


class _CountDivisions(ast.NodeTransformer):
    """``1.0 / x.size`` (a constant over an array's size, length or extent, or a name bound
    to one) as ``float(np.divide(1.0, x.size))``: the mean of an empty selection
    (``np.mean(x[x > c])``) is nan in NumPy, and its adjoint must not raise ZeroDivisionError
    (Python's int and float)."""

    def __init__(self, names=()):
        self.names = names

    def visit_BinOp(self, node):
        self.generic_visit(node)
        left, right = node.left, node.right
        constant = isinstance(left, ast.Constant) and type(left.value) in (int, float)
        if not (isinstance(node.op, ast.Div) and constant and
                is_count(right, ast, self.names)):
            return node
        divide = ast.Attribute(value=ast.Name(id="np", ctx=ast.Load()), attr="divide",
                               ctx=ast.Load())
        quotient = ast.Call(func=divide, args=[left, right], keywords=[])
        # (a Python float, as `1.0 / n` is: NumPy's float64 scalar would make float32 arrays
        # it multiplies float64)
        return ast.copy_location(ast.Call(func=ast.Name(id="float", ctx=ast.Load()),
                                          args=[quotient], keywords=[]), node)


def render_function(fn, decorator=None):
    """Source text of one FunctionDef (markers turned into comments)."""
    tree = to_ast(fn)
    text = ast.unparse(_CountDivisions(count_names(tree, ast)).visit(tree))
    if decorator:
        text = f"@{decorator}\n{text}"
    return _unmark(text)


def _helpers_called_by(functions):
    """Sources of the emitted helpers (codegen.helpers.HELPERS) that `functions` call and do
    not define: a helper call copied from a module being differentiated again needs them."""
    from .helpers import HELPERS, helper_source
    defined = {f.name for f in functions if isinstance(f, (gast.FunctionDef, ast.FunctionDef))}
    called = set()
    for f in functions:
        if not isinstance(f, (gast.AST, ast.AST)):
            continue
        walk = gast.walk if isinstance(f, gast.AST) else ast.walk
        for node in walk(f):
            if isinstance(node, (gast.Call, ast.Call)) and \
                    isinstance(node.func, (gast.Name, ast.Name)) and node.func.id in HELPERS:
                called.add(node.func.id)
    return helper_source(called - defined) if called - defined else []


def render_module(doc, imports, helpers, functions, decorator=None):
    """The whole generated module: docstring, imports, helpers, functions.

    >>> print(render_module("Doc.", ["import numpy as np"], [], []), end="")
    \"\"\"Doc.\"\"\"
    import numpy as np
    """
    parts = ['"""' + doc.replace('"""', "'''") + '"""', "\n".join(imports)]
    helpers = list(helpers) + [h for h in _helpers_called_by(functions) if h not in helpers]
    pieces = [h.rstrip("\n") for h in helpers]
    pieces += [render_function(f, decorator) for f in functions]
    text = "\n".join(p for p in parts if p)
    if pieces:
        text += "\n\n\n" + "\n\n\n".join(pieces)
    return text + "\n"


def fresh_name(base, taken):
    """`base`, or `base_2`, `base_3`, ... : the first not in `taken` (which gets it).

    >>> taken = {"t", "t_2"}
    >>> fresh_name("t", taken), "t_3" in taken
    ('t_3', True)
    """
    name, k = base, 2
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def name_node(identifier, ctx=None):
    """A gast Name (load context unless `ctx` is given)."""
    return gast.Name(id=identifier, ctx=ctx or gast.Load(), annotation=None, type_comment=None)


def dotted_node(text):
    """``np.exp`` as a gast expression (a name, then attributes): param_writes.dotted_name's
    inverse.

    >>> ast.unparse(gast.gast_to_ast(dotted_node("np.random.rand")))
    'np.random.rand'
    """
    parts = text.split(".")
    node = name_node(parts[0])
    for part in parts[1:]:
        node = gast.Attribute(value=node, attr=part, ctx=gast.Load())
    return node


def call_node(func, args):
    """A call of `func` (a dotted name) with positional `args` (gast expressions).

    >>> ast.unparse(gast.gast_to_ast(call_node("np.copy", [name_node("u")])))
    'np.copy(u)'
    """
    return gast.Call(func=dotted_node(func), args=list(args), keywords=[])


def is_entry(node, array, index):
    """Whether `node` is ``array[index]`` (two names).

    >>> is_entry(gast.parse("u[i]", mode="eval").body, "u", "i")
    True
    """
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
        node.value.id == array and isinstance(node.slice, gast.Name) and \
        node.slice.id == index


def mentions(node, identifier):
    """Whether a Name `identifier` occurs anywhere under `node`."""
    return any(isinstance(n, gast.Name) and n.id == identifier for n in gast.walk(node))


def range_bounds(loop):
    """(lo, hi) of a loop ``for j in range(hi)`` or ``range(lo, hi)`` (step 1; lo a 0
    constant for the first), or None for any other loop.

    >>> lo, hi = range_bounds(gast.parse("for j in range(n): pass").body[0])
    >>> (lo.value, hi.id)
    (0, 'n')
    """
    it = loop.iter if isinstance(loop, gast.For) else None
    if not (isinstance(it, gast.Call) and
            isinstance(it.func, gast.Name) and it.func.id == "range" and not it.keywords and
            1 <= len(it.args) <= 2 and not any(isinstance(a, gast.Starred) for a in it.args)):
        return None
    if len(it.args) == 1:
        return gast.Constant(value=0, kind=None), it.args[0]
    return it.args[0], it.args[1]


def names_bound(statements):
    """The names the statements bind (or delete) anywhere inside them.

    >>> sorted(names_bound(gast.parse("for i in r:\\n    t = i").body))
    ['i', 't']
    """
    return {n.id for stmt in statements for n in gast.walk(stmt)
            if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Del))}


def statement_blocks(fn):
    """Every statement list of `fn`: its body and the bodies (and else blocks) of its loops
    and branches, outer ones first; a pass may rewrite a list in place while walking them.

    >>> fn = gast.parse("def f(x):\\n    for i in x:\\n        if i:\\n            pass").body[0]
    >>> [len(block) for block in statement_blocks(fn)]
    [1, 1, 0, 1, 0]
    """
    for owner in [fn] + [n for n in gast.walk(fn) if isinstance(n, (gast.For, gast.While,
                                                                     gast.If))]:
        for field in ("body", "orelse"):
            block = getattr(owner, field, None)
            if isinstance(block, list):
                yield block


def parent_map(nodes):
    """{id(node): its parent} for every node under the trees `nodes` (a tree's root has
    none).

    >>> tree = gast.parse("y = x + 1")
    >>> assign = tree.body[0]
    >>> parent_map([tree])[id(assign.value)] is assign
    True
    """
    parents = {}
    for root in nodes:
        for node in gast.walk(root):
            for child in gast.iter_child_nodes(node):
                parents[id(child)] = node
    return parents

