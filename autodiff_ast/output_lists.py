"""Lists a function returns, put back where transformed functions return their results.

Generated code returns a fixed-length output as a (nested) tuple: the front end gives each
entry of ``return [a, b]`` its own tangent, cotangent and Jacobian block, and Numba returns
tuples, not lists of arrays. JAX keeps the container a function returns (a list stays a
list), and so does this library: each transformation knows the *list spec* of its result,
read from the user's source, and the call rebuilds the lists from the tuples.

A spec is ``None`` (leave the value as it is), ``("list", children)``, ``("tuple",
children)``, ``(cls, children)`` for a NamedTuple class ``cls`` built in the function
(``P(a, b)``: generated code holds a plain tuple) or ``("dict", ((key, child), ...))``; only
specs with a list or a NamedTuple somewhere inside are kept (anything else is None). The
source is read statically: a list display (or a NamedTuple call) returned directly, through
a name bound once to it, through a conditional expression, or from a helper function of the
user's that returns one. A list grown at run time (``out.append``)
is returned as a list already and needs no spec.

>>> def f(x):
...     out = [x, 2.0 * x]
...     return out, x
>>> spec = returned_lists(f)
>>> spec
('tuple', (('list', (None, None)), None))
>>> restore_lists(((1.0, 2.0), 3.0), spec)
([1.0, 2.0], 3.0)
"""

from __future__ import annotations

import builtins
import inspect

from .pytrees import bind_namedtuple_fields, is_namedtuple_class

__all__ = ["lists_of", "restore_lists", "result_lists", "returned_lists", "split_aux",
           "tuple_spec"]

_SPECS = {}  # code object -> spec (or None)
_GROWING = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort",
                      "reverse", "__setitem__", "__delitem__"})


def returned_lists(fn):
    """The list spec of what Python function `fn` returns (None when it returns no list
    display, or its source cannot be read).

    >>> returned_lists(lambda x: [x, (x, [x])])
    ('list', (None, ('tuple', (None, ('list', (None,))))))
    >>> returned_lists(lambda x: (x, x)) is None
    True
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    if code not in _SPECS:
        _SPECS[code] = None  # a recursive helper reads None while its spec is worked out
        _SPECS[code] = _function_spec(fn)
    return _SPECS[code]


def lists_of(fun):
    """The list spec of what `fun` returns: a transformed function's own (its
    ``output_lists``), a Python function's from its source, None for anything else."""
    own = getattr(fun, "output_lists", None)
    if own is not None:
        return own()
    return returned_lists(fun) if inspect.isfunction(fun) else None


def restore_lists(value, spec):
    """`value` with the tuples `spec` marks as lists made lists again (and dicts' values
    restored by key); a part whose length or type differs from the spec is left as it is.

    >>> restore_lists((1, (2, 3)), ("tuple", (None, ("list", (None, None)))))
    (1, [2, 3])
    >>> restore_lists({"a": (1, 2)}, ("dict", (("a", ("list", (None, None))),)))
    {'a': [1, 2]}
    """
    if spec is None:
        return value
    kind, children = spec
    if kind == "dict":
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for key, child in children:
            if key in out:
                out[key] = restore_lists(out[key], child)
        return out
    if type(value) not in (tuple, list) or len(value) != len(children):
        return value
    items = [restore_lists(v, s) for v, s in zip(value, children)]
    if isinstance(kind, type):  # a NamedTuple built in the function
        return kind(*items)
    return items if kind == "list" else tuple(items)


def tuple_spec(*children):
    """The spec of a tuple whose entries have these specs (None when no entry holds a list).

    >>> tuple_spec(None, ("list", (None,)))
    ('tuple', (None, ('list', (None,))))
    >>> tuple_spec(None, None) is None
    True
    """
    return _pruned(("tuple", tuple(children)))


def result_lists(fun, has_aux, parts):
    """The spec of a transformation's result: the entries ``parts(spec of fun's output)``,
    then, with `has_aux`, the aux output's (fun returns ``(output, aux)``).

    >>> def f(x):
    ...     return [x, x], (x, [x])
    >>> result_lists(f, True, lambda out: (out, None))  # vjp: (out, pullback, aux)
    ('tuple', (('list', (None, None)), None, ('tuple', (None, ('list', (None,))))))
    """
    spec = lists_of(fun)
    if not has_aux:
        return tuple_spec(*parts(spec))
    out, aux = split_aux(spec)
    return tuple_spec(*parts(out), aux)


def split_aux(spec):
    """(output spec, aux spec) of a has_aux function's spec (it returns ``(output, aux)``).

    >>> split_aux(("tuple", (None, ("list", (None,)))))
    (None, ('list', (None,)))
    """
    if spec is None or spec[0] != "tuple" or len(spec[1]) != 2:
        return None, None
    return spec[1]


def _function_spec(fn):
    # (gast and the front end are imported here: a warm start's calls only restore lists)
    import gast

    from .errors import AutodiffError
    from .frontend import cached_parse
    try:
        info = cached_parse(fn)
    except (AutodiffError, OSError, TypeError, SyntaxError):
        return None
    body = info.node.body
    returns = [node.value for node in _own_nodes(body) if isinstance(node, gast.Return)]
    if not returns or any(r is None for r in returns):
        return None
    reader = _Reader(info, body, gast)
    specs = [reader.spec(r) for r in returns]
    merged = specs[0]
    for other in specs[1:]:
        merged = _merged(merged, other)
    return _pruned(merged)


def _own_nodes(body):
    """The nodes of a function body, not descending into functions or classes it defines."""
    import gast
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (gast.FunctionDef, gast.AsyncFunctionDef, gast.Lambda,
                             gast.ClassDef)):
            continue
        stack.extend(reversed(list(gast.iter_child_nodes(node))))


class _Reader:
    """Reads the spec of returned expressions in one function."""

    def __init__(self, info, body, gast):
        self.info = info
        self.gast = gast
        self.displays = {gast.List: "list", gast.Tuple: "tuple"}
        self.bindings = {}  # name -> the values bound to it (None: bound otherwise)
        self.grown = set()  # names a method call may change (out.append(...))
        for node in _own_nodes(body):
            if isinstance(node, gast.Assign):
                for target in node.targets:
                    self._bind(target, node.value if len(node.targets) == 1 else None)
            elif isinstance(node, (gast.AugAssign, gast.AnnAssign)):
                self._bind(node.target, None)
            elif isinstance(node, (gast.For, gast.AsyncFor, gast.comprehension)):
                self._bind(node.target, None)
            elif isinstance(node, (gast.With, gast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, None)
            elif isinstance(node, gast.NamedExpr):
                self._bind(node.target, None)
            elif isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute) and \
                    isinstance(node.func.value, gast.Name) and node.func.attr in _GROWING:
                self.grown.add(node.func.value.id)
            elif isinstance(node, gast.Subscript) and isinstance(node.ctx, gast.Store) and \
                    isinstance(node.value, gast.Name):
                self.grown.add(node.value.id)  # `out[0] = ...` on a list display
        self.reading = set()

    def _bind(self, target, value):
        gast = self.gast
        if isinstance(target, gast.Name):
            self.bindings.setdefault(target.id, []).append(value)
        elif isinstance(target, (gast.Tuple, gast.List)):
            for element in target.elts:
                self._bind(element, None)
        elif isinstance(target, gast.Starred):
            self._bind(target.value, None)

    def spec(self, expr):
        gast = self.gast
        kind = self.displays.get(type(expr))
        if kind is not None:
            if any(isinstance(e, gast.Starred) for e in expr.elts):
                return None
            return (kind, tuple(self.spec(e) for e in expr.elts))
        if isinstance(expr, gast.Dict):
            if any(k is None or not isinstance(k, gast.Constant) for k in expr.keys):
                return None
            return ("dict", tuple((k.value, self.spec(v)) for k, v in zip(expr.keys,
                                                                          expr.values)))
        if isinstance(expr, gast.IfExp):
            return _merged(self.spec(expr.body), self.spec(expr.orelse))
        if isinstance(expr, gast.Name):
            values = self.bindings.get(expr.id)
            if not values or len(values) != 1 or values[0] is None or \
                    expr.id in self.grown or expr.id in self.reading:
                return None
            self.reading.add(expr.id)
            try:
                return self.spec(values[0])
            finally:
                self.reading.discard(expr.id)
        if isinstance(expr, gast.Call) and isinstance(expr.func, gast.Name):
            callee = self.info.closure.get(expr.func.id, self.info.globals.get(expr.func.id,
                                           getattr(builtins, expr.func.id, None)))
            if callee in (list, tuple) and len(expr.args) == 1 and not expr.keywords and \
                    type(expr.args[0]) in self.displays:  # list((a, b)): the list display
                return self.spec(gast.List(elts=expr.args[0].elts, ctx=gast.Load())
                                 if callee is list else
                                 gast.Tuple(elts=expr.args[0].elts, ctx=gast.Load()))
            if inspect.isfunction(callee):
                return returned_lists(callee)
            if is_namedtuple_class(callee):
                return self.namedtuple_spec(callee, expr)
        return None

    def namedtuple_spec(self, cls, call):
        """The spec of ``P(a, b)`` or ``P(a=u, b=v)`` (fields in the class's order; a default
        holds no list), or None when the call does not name each field once."""
        fields = cls._fields
        given, problem = bind_namedtuple_fields(cls, call.args,
                                                [(kw.arg, kw.value) for kw in call.keywords])
        if problem is not None:
            return None
        defaults = getattr(cls, "_field_defaults", {})
        if any(f not in given and f not in defaults for f in fields):
            return None
        return (cls, tuple(self.spec(given[f]) if f in given else None for f in fields))


def _merged(a, b):
    """The spec two returns agree on: position by position, None where they differ."""
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return None
    if a[0] == "dict":
        if [k for k, _ in a[1]] != [k for k, _ in b[1]]:
            return None
        return ("dict", tuple((k, _merged(x, y)) for (k, x), (_, y) in zip(a[1], b[1])))
    return (a[0], tuple(_merged(x, y) for x, y in zip(a[1], b[1])))


def _pruned(spec):
    """`spec` with every part holding no list or NamedTuple replaced by None."""
    if spec is None:
        return None
    kind, children = spec
    if kind == "dict":
        kept = tuple((k, _pruned(c)) for k, c in children)
        return ("dict", kept) if any(c is not None for _, c in kept) else None
    kept = tuple(_pruned(c) for c in children)
    if kind == "list" or isinstance(kind, type) or any(c is not None for c in kept):
        return (kind, kept)
    return None
