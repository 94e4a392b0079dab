"""Calls of the user's own functions made in loops, written into their callers, for compiled
code (``jit``).

Reverse mode gives a helper called in a loop a recomputing pair (autodiff_ast/reverse.py): the
backward sweep runs the helper's forward sweep again at every step, because one tape per
residual per step, as lists of small arrays, cost more than the recomputation. Once the helper's
body is part of the loop, the loop's own tapes keep what its backward sweep reads (a row of one
preallocated array per vector, a typed array per number), and nothing runs twice. ADBench's
LSTM calls ``lstm_predict`` in its loop over the sequence, which calls ``lstm_model`` in its
loop over the layers: with both written in, its compiled gradient went from 8.4 to about
4.5 ms (the cell ran three times per step before: forward sweep, recomputed ``lstm_predict``,
recomputed ``lstm_model``).

A call is written in when it is in a loop (also a loop of a helper written in), its callee is
not recursive and not marked with ``checkpoint`` (whose point is to recompute), has a loop or
makes an array (itself or through its own calls: see :func:`_works_on_arrays`), its body is
not larger than :data:`MAX_STATEMENTS`, and the call binds one name. The callee's names get
fresh names in the caller; a parameter the callee never rebinds reads the argument itself (in
core form a rebound parameter is a new name, so that is nearly all of them), the others start
as ``p = argument`` (what a call does: the same object). Only ``jit`` on the CPU
asks for the rewrite, after :mod:`autodiff_ast.scalarize` (whose small vectors become
numbers first) and before :mod:`autodiff_ast.vector_loops` (:func:`autodiff_ast.build.prepare`);
``AUTODIFF_AST_SCALARIZE=0`` turns all three off, and jit builds from the original program if
anything fails on the rewritten one.

>>> import numpy as np
>>> from autodiff_ast.build import prepare
>>> from autodiff_ast.normalize import spec_of
>>> def scaled(v, a):
...     a = a * 2.0
...     return v * a
>>> def f(x):
...     total = 0.0
...     for i in range(x.shape[0]):
...         total = total + np.sum(scaled(x[i], 0.5))
...     return total
>>> info, program, core = prepare(f, {"x": spec_of(np.ones((4, 3)))})
>>> print([t for t in inline_calls(program, core).split("\\n\\n\\n") if t.startswith("def f")][0])
def f(x):
    total = 0.0
    shape = x.shape
    item = shape[0]
    for i in range(item):
        item_3 = x[i]
        a_2_2 = 0.5 * 2.0
        scaled_out_2 = item_3 * a_2_2
        sum__2 = np.sum(scaled_out_2)
        add_2 = total + sum__2
        total = add_2
    return total
"""

from __future__ import annotations

import ast

import gast

from codegen.emit import fresh_name

from .reverse import walk_statements
from .scalarize import header_text
from .templates import unparse

__all__ = ["inline_calls", "MAX_STATEMENTS", "MAX_DEPTH"]

#: A callee with more core statements than this keeps its call (compile time grows with
#: every copy).
MAX_STATEMENTS = 400
#: Calls written in through at most this many levels of helpers.
MAX_DEPTH = 4


def _callees(cf):
    return [stmt.prim.callee for stmt in walk_statements(cf.body)
            if getattr(stmt, "prim", None) is not None and stmt.prim.kind == "user" and
            stmt.prim.callee is not None]


def _recursive(functions):
    """ids of the core functions that can call themselves (directly or through others)."""
    found = set()
    for cf in functions:
        seen, todo = set(), list(_callees(cf))
        while todo:
            callee = todo.pop()
            if callee is cf:
                found.add(id(cf))
                break
            if id(callee) not in seen:
                seen.add(id(callee))
                todo += _callees(callee)
    return found


def _works_on_arrays(cf, seen=None):
    """Whether core function `cf` (or a function it calls) has a loop or makes an array.

    A function of numbers only (what scalarize leaves of one on small vectors: a bundle
    adjustment's projection) keeps its recomputing pair: running its scalar code again costs
    less than a tape for each of its values (ADBench BA: 2.55 ms per gradient recomputing,
    2.69 ms written in). Arrays are what make recomputing dear (each call and its adjoint
    allocate them again), and a loop's recomputation keeps tapes of its own."""
    seen = set() if seen is None else seen
    if id(cf) in seen:
        return False
    seen.add(id(cf))
    for stmt in walk_statements(cf.body):
        if isinstance(stmt, (gast.For, gast.While)):
            return True
        if isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name):
            t = cf.types.get(stmt.targets[0].id)
            if t is not None and t.kind == "array":
                return True
        prim = getattr(stmt, "prim", None)
        if prim is not None and prim.kind == "user" and prim.callee is not None and \
                _works_on_arrays(prim.callee, seen):
            return True
    return False


def _callee(stmt, recursive):
    """The core function `stmt` calls when it can be written in there, else None."""
    prim = getattr(stmt, "prim", None)
    if prim is None or prim.kind != "user" or prim.callee is None:
        return None
    if not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or \
            not isinstance(stmt.targets[0], gast.Name):
        return None
    callee = prim.callee
    args = list(prim.args or ())
    if id(callee) in recursive or callee.recursive_calls or callee.checkpointed or \
            callee.returns is None or \
            not callee.body or len(args) != len(callee.params) or \
            not all(isinstance(a, (gast.Name, gast.Constant)) for a in args):
        return None
    if sum(1 for _ in walk_statements(callee.body)) > MAX_STATEMENTS or \
            not _works_on_arrays(callee):
        return None
    return callee


class _Inliner:
    def __init__(self, taken, recursive):
        self.taken = taken  # every name in the program, and each fresh one
        self.recursive = recursive  # ids of the functions that can call themselves
        self.reads = {}  # id(core function) -> how often each name is read in it
        self.changed = False

    def lines(self, cf, stmts, in_loop, depth):
        """Source lines of `stmts` (relative indentation) with their calls in loops written
        in."""
        out = []
        skip = None
        for k, stmt in enumerate(stmts):
            if stmt is skip:
                continue
            if isinstance(stmt, (gast.For, gast.While, gast.If)):
                loop = in_loop or not isinstance(stmt, gast.If)
                out.append(header_text(stmt))
                out += _indent(self.lines(cf, stmt.body, loop, depth)) or ["    pass"]
                if stmt.orelse:
                    out.append("else:")
                    out += _indent(self.lines(cf, stmt.orelse, loop, depth)) or ["    pass"]
                continue
            callee = _callee(stmt, self.recursive) if in_loop and depth < MAX_DEPTH else None
            if callee is None:
                out += unparse(stmt).rstrip("\n").split("\n")
                continue
            self.changed = True
            unpack = _unpacking(stmts[k + 1] if k + 1 < len(stmts) else None,
                                stmt.targets[0].id, callee, self.read_counts(cf))
            if unpack is not None:
                skip = stmts[k + 1]
            out += self.written_in(stmt, callee, depth, unpack)
        return out

    def read_counts(self, cf):
        if id(cf) not in self.reads:
            self.reads[id(cf)] = _reads(cf)
        return self.reads[id(cf)]

    def written_in(self, stmt, callee, depth, unpack=None):
        """The lines that replace ``target = callee(args)`` (and the ``a, b = target`` after
        it, when `unpack` names a and b)."""
        body = "\n".join(self.lines(callee, callee.body, True, depth + 1))
        tree = ast.parse(body) if body.strip() else ast.Module(body=[], type_ignores=[])
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and
                  isinstance(n.ctx, (ast.Store, ast.Del))}
        args = list(stmt.prim.args)
        arg_names = {a.id for a in args if isinstance(a, gast.Name)}
        target = stmt.targets[0].id
        # The callee's returned locals take the names the caller binds to them (no copy
        # statement between them: vector_loops would see the copy end its run).
        results = callee.returns.elts if unpack is not None else [callee.returns]
        names = unpack if unpack is not None else [target]
        direct = {}
        for value, bound in zip(results, names):
            if isinstance(value, gast.Name) and value.id in stored and \
                    value.id not in callee.params and value.id not in direct and \
                    bound not in arg_names and bound not in direct.values():
                direct[value.id] = bound
        renamed, first = {}, []
        for param, arg in zip(callee.params, args):
            if param not in stored:
                renamed[param] = unparse(arg)  # read the argument itself
                continue
            renamed[param] = fresh_name(param, self.taken)
            first.append(f"{renamed[param]} = {unparse(arg)}")
        for local in sorted(stored - set(callee.params)):
            renamed[local] = direct.get(local) or fresh_name(local, self.taken)
        _Rename(renamed).visit(tree)
        text = ast.unparse(tree)
        lines = first + (text.split("\n") if text else [])
        for value, bound in zip(results, names):
            if not (isinstance(value, gast.Name) and direct.get(value.id) == bound):
                expr = _Rename(renamed).visit(ast.parse(unparse(value), mode="eval"))
                lines.append(f"{bound} = {ast.unparse(expr.body)}")
        return lines


def _unpacking(stmt, target, callee, reads):
    """The names of ``a, b = target`` when `stmt` is that, the callee returns a tuple of as
    many atoms and nothing else reads `target`; else None."""
    if not isinstance(stmt, gast.Assign) or len(stmt.targets) != 1 or \
            not isinstance(stmt.targets[0], gast.Tuple) or \
            not isinstance(stmt.value, gast.Name) or stmt.value.id != target or \
            not isinstance(callee.returns, gast.Tuple) or reads.get(target, 0) != 1:
        return None
    elts = stmt.targets[0].elts
    if len(elts) != len(callee.returns.elts) or \
            not all(isinstance(e, gast.Name) for e in elts) or \
            len({e.id for e in elts}) != len(elts):
        return None
    return [e.id for e in elts]


class _Rename(ast.NodeTransformer):
    """Names replaced by other names (bound) or by an argument's text (read only)."""

    def __init__(self, renamed):
        self.renamed = renamed

    def visit_Name(self, node):
        text = self.renamed.get(node.id)
        if text is None:
            return node
        if isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.parse(text, mode="eval").body, node)
        return ast.copy_location(ast.Name(id=text, ctx=node.ctx), node)


def _reads(cf):
    """How often each name is read in core function `cf` (its return value too)."""
    counts = {}
    nodes = list(cf.body) + ([cf.returns] if cf.returns is not None else [])
    for n in gast.walk(gast.Module(body=[gast.Expr(value=x) if not isinstance(x, gast.stmt)
                                         else x for x in nodes], type_ignores=[])):
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
            counts[n.id] = counts.get(n.id, 0) + 1
    return counts


def _indent(lines):
    return ["    " + line for line in lines]


def inline_calls(program, core):
    """The program with the calls of user functions made in loops written into their callers
    (the module's source, for :func:`autodiff_ast.scalarize.rebuild`), or None when no call
    changes."""
    functions = list(program.functions.values())
    taken = {cf.name for cf in functions} | set(program.data) | {"np", "math"}
    for cf in functions:
        taken |= set(cf.params)
        taken |= {n.id for n in gast.walk(gast.Module(body=cf.body, type_ignores=[]))
                  if isinstance(n, gast.Name)}
    inliner = _Inliner(taken, _recursive(functions))
    sources = []
    for cf in functions:
        lines = [f"def {cf.name}({', '.join(cf.params)}):"]
        lines += _indent(inliner.lines(cf, cf.body, False, 0)) or ["    pass"]
        if cf.returns is not None:
            lines.append(f"    return {unparse(cf.returns)}")
        sources.append("\n".join(lines))
    if not inliner.changed:
        return None
    doc = (f"{core.info.name} with the calls in its loops written in, generated by "
           "autodiff-ast for compiled code (autodiff_ast/inline_calls.py). Regenerate instead "
           "of editing.")
    return '"""' + doc + '"""\nimport math\n\nimport numpy as np\n\n\n' + \
        "\n\n\n".join(sources) + "\n"
