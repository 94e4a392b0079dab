"""A last guard on every generated function: it never writes into its caller's arrays (nor
into module data it reads).

The passes that write generated code decide when ``x_bar += c`` may add in place (the adjoint
owns its array) before later clean-ups run; a clean-up can still turn ``a_bar = 1.0 * x`` into
``a_bar = x``, after which ``a_bar += c`` would add into the caller's ``x``. This module looks at
the finished function: names that may hold a parameter's memory (the parameters, names bound to
one of them, to an element or slice of one, or to a view such as ``p.T``) are tracked in order,
loop bodies twice; an ``t += c`` on such a name becomes ``t = t + c``, and an item write
``t[i] = v`` / ``t[i] += v`` on one makes the binding that shared the memory take a copy
(``t = p.copy()``; a parameter written this way is copied on entry).

>>> import gast
>>> from codegen.emit import render_function, function
>>> body = gast.parse("a_bar = x\\nif c:\\n    a_bar += g").body
>>> print(render_function(function("bwd", ["x", "c", "g"], body, gast.Name(
...     id="a_bar", ctx=gast.Load(), annotation=None, type_comment=None))))
def bwd(x, c, g):
    a_bar = x
    if c:
        a_bar = a_bar + g
    return a_bar
"""

from __future__ import annotations

import gast

__all__ = ["dotted_name", "keep_params_unwritten", "numpy_writes_first_argument"]

# Calls whose result may share memory with an argument.
_VIEWS = {"np.asarray", "np.reshape", "np.ravel", "np.transpose", "np.broadcast_to",
          "np.squeeze", "np.expand_dims", "np.atleast_1d", "np.atleast_2d", "np.atleast_3d",
          "np.moveaxis", "np.swapaxes", "np.diagonal", "np.real", "np.ascontiguousarray",
          "np.flip", "np.fliplr", "np.flipud", "np.rot90"}
_VIEW_METHODS = {"reshape", "ravel", "view", "transpose", "squeeze", "swapaxes", "T"}


#: NumPy's functions that write into the array they are handed first (the ufunc methods
#: ``np.add.at`` and the like are matched by their ``.at``).
_NUMPY_WRITERS = frozenset({"np.copyto", "np.put", "np.place", "np.putmask",
                            "np.fill_diagonal", "np.put_along_axis"})


def numpy_writes_first_argument(called):
    """Whether the NumPy function named `called` (a dotted name) writes into its first
    argument: the one list the passes that track writes share.

    >>> [numpy_writes_first_argument(c) for c in ("np.add.at", "np.copyto", "np.sum")]
    [True, True, False]
    """
    return called in _NUMPY_WRITERS or (called.startswith("np.") and called.endswith(".at"))


def dotted_name(node):
    """'np.sum' for the expression np.sum (None for anything but a dotted name). Kept here,
    at the bottom of codegen's imports (emit imports this module, dialect imports emit), so
    both this guard and :mod:`codegen.dialect` use the one definition."""
    if isinstance(node, gast.Name):
        return node.id
    if isinstance(node, gast.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _shares(value, shared):
    """Whether `value` may be (a view of) the memory of a name in `shared`."""
    if isinstance(value, gast.Name):
        return value.id in shared
    if isinstance(value, gast.Subscript):
        return _shares(value.value, shared)
    if isinstance(value, gast.Attribute):
        return value.attr in _VIEW_METHODS and _shares(value.value, shared)
    if isinstance(value, gast.Call):
        func = value.func
        if dotted_name(func) in _VIEWS:
            return bool(value.args) and _shares(value.args[0], shared)
        if isinstance(func, gast.Attribute) and func.attr in _VIEW_METHODS:
            return _shares(func.value, shared)
    if isinstance(value, gast.IfExp):
        return _shares(value.body, shared) or _shares(value.orelse, shared)
    return False


def _base_name(target):
    while isinstance(target, gast.Subscript):
        target = target.value
    return target.id if isinstance(target, gast.Name) else None


def keep_params_unwritten(params, body):
    """Rewrite `body` (a list of statements, changed in place) so it writes into no array a
    parameter in `params` holds, nor one a module global holds (module data: ``v_bar = W``
    then ``v_bar[2] = 0.0`` would change W for every later call); returns `body`."""
    names = [n for s in body for n in gast.walk(s) if isinstance(n, gast.Name)]
    bound = {n.id for n in names if isinstance(n.ctx, (gast.Store, gast.Del))}
    shared = set(params) | ({n.id for n in names if isinstance(n.ctx, gast.Load)} - bound)
    bindings = {}  # name -> the statements that bound it to shared memory
    copy_on_entry = set()

    def visit(block, depth):
        for i, stmt in enumerate(block):
            if isinstance(stmt, (gast.For, gast.While)):
                for _ in range(2):  # the second pass sees what the first carried round
                    visit(stmt.body, depth + 1)
                visit(stmt.orelse, depth + 1)
            elif isinstance(stmt, gast.If):
                visit(stmt.body, depth + 1)
                visit(stmt.orelse, depth + 1)
            elif isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Name):
                t = stmt.target.id
                if t in shared:
                    new = gast.Assign(
                        targets=[gast.Name(id=t, ctx=gast.Store(), annotation=None,
                                           type_comment=None)],
                        value=gast.BinOp(left=gast.Name(id=t, ctx=gast.Load(), annotation=None,
                                                        type_comment=None),
                                         op=stmt.op, right=stmt.value), type_comment=None)
                    block[i] = gast.copy_location(new, stmt)
                    for attr in ("origin", "info"):
                        if hasattr(stmt, attr):
                            setattr(block[i], attr, getattr(stmt, attr))
                    if depth == 0:
                        shared.discard(t)
            elif isinstance(stmt, (gast.Assign, gast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, gast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, gast.Subscript):
                        base = _base_name(target)
                        if base in shared:
                            if base in params and base not in bindings:
                                copy_on_entry.add(base)
                            for binding in bindings.get(base, ()):
                                binding.value = gast.Call(
                                    func=gast.Attribute(value=binding.value, attr="copy",
                                                        ctx=gast.Load()),
                                    args=[], keywords=[])
                            bindings.pop(base, None)
                            shared.discard(base)
                    elif isinstance(target, gast.Name) and isinstance(stmt, gast.Assign):
                        t = target.id
                        if _shares(stmt.value, shared):
                            shared.add(t)
                            bindings.setdefault(t, []).append(stmt)
                        elif depth == 0:
                            shared.discard(t)
                            bindings.pop(t, None)

    visit(body, 0)
    for p in sorted(copy_on_entry):
        body.insert(0, gast.Assign(
            targets=[gast.Name(id=p, ctx=gast.Store(), annotation=None, type_comment=None)],
            value=gast.Call(func=gast.Attribute(value=gast.Name(
                id=p, ctx=gast.Load(), annotation=None, type_comment=None), attr="copy",
                ctx=gast.Load()), args=[], keywords=[]), type_comment=None))
    return body
