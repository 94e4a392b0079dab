"""Source-level lowering of loop exits before normalization.

``break``, ``continue`` and ``return`` inside loops become flags, so that the core form only
has structured control flow (if, for over range, while) the transformations know:

* ``return v`` in a loop becomes ``returned_value = v; returned = True; break`` and, after the
  loop, ``if returned: return returned_value`` (which the single-exit lowering then handles);
* ``break`` becomes ``stop = True``, ``continue`` becomes ``skip = True``, and everything that
  would not run after them in the iteration is guarded by ``if not (stop or skip):``;
* a ``for`` loop that can stop early becomes a ``while`` loop over its index.

>>> import gast
>>> from autodiff_ast.naming import Namer
>>> from autodiff_ast.templates import unparse
>>> body = gast.parse('''
... for i in range(n):
...     if x[i] > 1.0:
...         break
...     s = s + x[i]
... ''').body
>>> print(unparse(gast.Module(body=lower_loop_exits(body, Namer()), type_ignores=[])))
stop = False
i_next = 0
while not stop and i_next < n:
    i = i_next
    if x[i] > 1.0:
        stop = True
    if not stop:
        s = s + x[i]
    i_next = i_next + 1
"""

from __future__ import annotations

import gast

from .errors import UnsupportedSyntaxError


def _name(identifier, store=False):
    return gast.Name(id=identifier, ctx=gast.Store() if store else gast.Load(), annotation=None,
                     type_comment=None)


def _assign(target, value):
    return gast.Assign(targets=[_name(target, store=True)], value=value, type_comment=None)


def _const(value):
    return gast.Constant(value=value, kind=None)


def _checkpointed(loop):
    """Whether `loop` is ``for t in checkpoint(range(...))`` (or ``ad.checkpoint(...)``)."""
    it = getattr(loop, "iter", None)
    if not (isinstance(it, gast.Call) and len(it.args) == 1):
        return False
    func = it.func
    called = func.id if isinstance(func, gast.Name) else \
        func.attr if isinstance(func, gast.Attribute) else None
    return called == "checkpoint"


def _exits(stmts, kinds):
    """Whether `stmts` contain one of `kinds` outside nested loops (and nested defs)."""
    for stmt in stmts:
        if isinstance(stmt, kinds):
            return True
        if isinstance(stmt, (gast.If,)):
            if _exits(stmt.body, kinds) or _exits(stmt.orelse, kinds):
                return True
        if isinstance(stmt, gast.With) and _exits(stmt.body, kinds):
            return True
    return False


def _located(node, like):
    for sub in gast.walk(node):
        if hasattr(sub, "lineno") and getattr(sub, "lineno", None) is None:
            gast.copy_location(sub, like)
    return gast.copy_location(node, like)


class _Lowerer:
    def __init__(self, namer, error=None):
        self.namer = namer
        self.error = error

    def fail(self, message, node, hint=None):
        if self.error is not None:
            raise self.error(message, node, hint)
        raise UnsupportedSyntaxError(message, hint=hint)

    def block(self, stmts):
        out = []
        for stmt in stmts:
            if isinstance(stmt, (gast.For, gast.While)):
                stmt.body = self.block(stmt.body)
                out.extend(self.loop(stmt))
            elif isinstance(stmt, gast.If):
                stmt.body = self.block(stmt.body)
                stmt.orelse = self.block(stmt.orelse)
                out.append(stmt)
            elif isinstance(stmt, gast.With):
                stmt.body = self.block(stmt.body)
                out.append(stmt)
            else:
                out.append(stmt)
        return out

    def loop(self, loop):
        before, after = [], []
        returns = _exits(loop.body, gast.Return)
        if (returns or _exits(loop.body, gast.Break)) and _checkpointed(loop):
            word = "return" if returns else "break"
            self.fail(f"{word} inside a checkpointed loop (`for t in checkpoint(range(n))`) "
                      "is not supported: its backward sweep recomputes whole segments of "
                      "steps", loop, "use a plain range loop, or keep the loop running and "
                      "stop changing the state once done (a flag, or np.where)")
        if returns:
            returned = self.namer.temp("returned")
            value = self.namer.temp("returned_value")
            loop.body = self.replace_returns(loop.body, returned, value)
            before.append(_located(_assign(returned, _const(False)), loop))
            after.append(_located(gast.If(test=_name(returned),
                                          body=[gast.Return(value=_name(value))], orelse=[]),
                                  loop))
        has_break = _exits(loop.body, gast.Break)
        has_continue = _exits(loop.body, gast.Continue)
        if not (has_break or has_continue):
            return before + [loop] + after
        if loop.orelse:
            self.fail("for/else and while/else with break are not supported", loop,
                      "use a flag")
        stop = self.namer.temp("stop") if has_break else None
        skip = self.namer.temp("skip") if has_continue else None
        body = self.guard(loop.body, stop, skip)
        if skip:
            body = [_located(_assign(skip, _const(False)), loop)] + body
        if not has_break:
            loop.body = body
            return before + [loop] + after
        before.append(_located(_assign(stop, _const(False)), loop))
        not_stop = gast.UnaryOp(op=gast.Not(), operand=_name(stop))
        if isinstance(loop, gast.While):
            loop.test = gast.BoolOp(op=gast.And(), values=[not_stop, loop.test])
            loop.body = body
            return before + [_located(loop, loop)] + after
        return before + self.for_as_while(loop, body, not_stop) + after

    def for_as_while(self, loop, body, not_stop):
        it = loop.iter
        if not (isinstance(it, gast.Call) and isinstance(it.func, gast.Name) and
                it.func.id == "range" and isinstance(loop.target, gast.Name)):
            self.fail("break is supported in `for i in range(...)` loops and while loops",
                      loop, "loop over range(len(x)) and index x[i]")
        args = list(it.args)
        start, stop, step = (_const(0), args[0], _const(1)) if len(args) == 1 else (
            args[0], args[1], args[2] if len(args) > 2 else _const(1))
        if not (isinstance(step, gast.Constant) and isinstance(step.value, int) and
                step.value > 0):
            self.fail("break needs a range with a positive constant step", loop)
        index = loop.target.id
        following = self.namer.temp(f"{index}_next")
        init = _located(_assign(following, start), loop)
        test = gast.BoolOp(op=gast.And(), values=[
            not_stop, gast.Compare(left=_name(following), ops=[gast.Lt()], comparators=[stop])])
        bind = _located(_assign(index, _name(following)), loop)
        bump = _located(_assign(following, gast.BinOp(left=_name(following), op=gast.Add(),
                                                      right=step)), loop)
        loop_node = gast.While(test=test, body=[bind] + body + [bump], orelse=[])
        return [init, _located(loop_node, loop)]

    def replace_returns(self, stmts, returned, value):
        out = []
        for stmt in stmts:
            if isinstance(stmt, gast.Return):
                result = stmt.value if stmt.value is not None else _const(None)
                out += [_located(_assign(value, result), stmt),
                        _located(_assign(returned, _const(True)), stmt),
                        _located(gast.Break(), stmt)]
                continue
            if isinstance(stmt, gast.If):
                stmt.body = self.replace_returns(stmt.body, returned, value)
                stmt.orelse = self.replace_returns(stmt.orelse, returned, value)
            elif isinstance(stmt, gast.With):
                stmt.body = self.replace_returns(stmt.body, returned, value)
            out.append(stmt)
        return out

    def guard(self, stmts, stop, skip):
        """Flags instead of jumps; what follows a possible jump runs only if none happened."""
        out = []
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, gast.Break):
                out.append(_located(_assign(stop, _const(True)), stmt))
                return out
            if isinstance(stmt, gast.Continue):
                out.append(_located(_assign(skip, _const(True)), stmt))
                return out
            if isinstance(stmt, (gast.If, gast.With)) and _exits(
                    [stmt], (gast.Break, gast.Continue)):
                stmt.body = self.guard(stmt.body, stop, skip)
                if isinstance(stmt, gast.If):
                    stmt.orelse = self.guard(stmt.orelse, stop, skip)
                out.append(stmt)
                rest = self.guard(stmts[i + 1:], stop, skip)
                if rest:
                    flags = [_name(f) for f in (stop, skip) if f]
                    either = flags[0] if len(flags) == 1 else gast.BoolOp(op=gast.Or(),
                                                                          values=flags)
                    test = gast.UnaryOp(op=gast.Not(), operand=either)
                    out.append(_located(gast.If(test=test, body=rest, orelse=[]), stmt))
                return out
            out.append(stmt)
        return out


def lower_loop_exits(stmts, namer, error=None):
    """`stmts` with break/continue/return inside loops turned into flags (see module doc)."""
    return _Lowerer(namer, error).block(stmts)
