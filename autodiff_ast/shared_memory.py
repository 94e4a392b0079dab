"""Refuse an in-place write whose effect another name would see.

NumPy lets two names share memory: ``b = a``, ``v = y[1:3]``, ``v = y.T``, and a 0-d array
from ``np.where`` of scalars. ``y[i] = v`` or ``y += v`` then changes what the other name
reads. The core program binds a new value instead (``y = y + v``), so a later read of the other
name would differentiate the old value: a silently wrong gradient. This module finds such
reads and raises :class:`UnsupportedSyntaxError` naming the write.

The analysis is a may-analysis over the structured core program. Each name maps to the set of
allocations it may hold; an allocation is named by the statement that made it. The state at a
program point is the set of such maps, one per way of getting there (_Paths): branches join by
keeping both, loops run to a fixed point, so a name rebound in only one branch, or in a loop
that may run zero times, still counts as sharing afterwards, while two buffers exchanged each
step (``u, un = un, u``) never hold the same array on any path. Past _MAX_PATHS maps, or
_COLLAPSE_AFTER trips of one loop, the maps are merged into one (each name's allocations
joined): less precise, never unsound.

Example (doctest)::

    >>> import numpy as np, autodiff_ast as ad
    >>> def f(x):
    ...     y = np.tanh(x)
    ...     z = y
    ...     if x[0] > 5.0:
    ...         z = y * 2.0
    ...     y += x
    ...     return np.sum(y * z)
    >>> ad.grad(f)(np.ones(2))
    Traceback (most recent call last):
    ...
    autodiff_ast.errors.UnsupportedSyntaxError: ... z may share memory with y ...
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import gast

from .errors import UnsupportedSyntaxError
from .tidy import _names


@dataclass(frozen=True)
class _State:
    """What may be true at one program point on one path (the maps _Paths keeps), or on
    all paths merged."""

    memory: dict  # name -> frozenset of allocations it may hold
    # (id of a write, written name, other name that must not be read, whether that name may
    # also hold other memory)
    pending: frozenset

    def join(self, other):
        memory = dict(self.memory)
        for n, allocs in other.memory.items():
            memory[n] = memory.get(n, frozenset()) | allocs
        return _State(memory, self.pending | other.pending)


_MAX_PATHS = 32
_NUMBER_KINDS = ("float", "int", "bool", "none", "str")
_COLLAPSE_AFTER = 12


@dataclass(frozen=True)
class _Paths:
    """What may be true at one program point: the name -> allocations maps of every path
    (each a frozenset of (name, allocations) items), and the pending reads (as _State's)."""

    maps: frozenset
    pending: frozenset

    @staticmethod
    def of(states):
        maps = frozenset(frozenset(state.memory.items()) for state in states)
        pending = frozenset().union(*(state.pending for state in states))
        return _Paths(maps, pending).capped()

    def states(self):
        return [_State(dict(items), self.pending) for items in self.maps]

    def join(self, other):
        return _Paths(self.maps | other.maps, self.pending | other.pending).capped()

    def capped(self, limit=_MAX_PATHS):
        if len(self.maps) <= limit:
            return self
        merged = _State({}, self.pending)
        for state in self.states():
            merged = merged.join(state)
        return _Paths(frozenset({frozenset(merged.memory.items())}), self.pending)


def _reads(node):
    return set(_names(node, gast.Load))


def _stores(node):
    return _names(node, gast.Store)


class _SharedMemoryCheck:
    def __init__(self, normalizer):
        self.normalizer = normalizer
        self.writes = {}  # id -> the write statement, for the error
        self.written_in_loops = set()  # ids of those writes made inside a loop
        self.loop_depth = 0
        # id of an entry -> (callee, its parameter's user name, its write), one entry per
        # parameter a call writes into (kept here, so the ids stay unique)
        self.calls = {}
        # names that only ever hold numbers (a loop's counter, a running sum): no memory to
        # share, so left out of the maps (fewer and smaller maps: one per path and trip)
        self.numbers = {n for n, t in normalizer.types.items()
                        if t.kind in _NUMBER_KINDS and n not in normalizer.zero_dim}

    def allocations(self, state, n):
        return state.memory.get(n, frozenset({("given", n)}))

    # -- one program point to the next
    def read(self, state, names):
        hit = sorted((p[2], p[0], p) for p in state.pending if p[2] in names)
        if not hit:
            return
        key, base, alias, maybe = hit[0][2]
        user = self.normalizer.user_name
        if key in self.calls:
            self.refuse_call(key, base, alias, maybe)
        if maybe:
            what = (f"{user(alias)} may share memory with {user(base)} (on a path where one "
                    "of them is not rebound: a branch not taken, or a loop that runs zero times)")
        else:
            what = f"{user(alias)} shares memory with {user(base)}"
        hint = (f"take a copy instead (v = x[1:3].copy(), or b = a.copy()), or write "
                f"{user(base)} = {user(base)} + ... rather than an in-place update")
        if key in self.written_in_loops:
            # two buffers exchanged each step (u, un = un, u) look like one to this analysis
            hint += (f"; for two buffers exchanged each step ({user(alias)}, {user(base)} = "
                     f"{user(base)}, {user(alias)}), write {user(alias)} = "
                     f"{user(base)}.copy() instead")
        raise self.normalizer.info.error(
            UnsupportedSyntaxError, f"{what}, which is written in place before {user(alias)} "
            "is read again; the gradient would miss the shared memory",
            getattr(self.writes[key], "origin", None) or self.normalizer.info.node, hint)

    def refuse_call(self, key, base, alias, maybe):
        """A call wrote into `base`'s memory through a parameter, and `alias` is read after."""
        callee, param, write = self.calls[key]
        info = callee.info
        where = f"{os.path.basename(info.filename)}:{info.file_line(write)}"
        user = self.normalizer.user_name
        shared = "" if alias == base else (
            f" ({user(alias)} {'may share' if maybe else 'shares'} memory with it)")
        raise self.normalizer.info.error(
            UnsupportedSyntaxError, f"{info.name} writes into its parameter {param} in place "
            f"({where}), and {user(alias)} is read after the call{shared}; generated code "
            f"gives {info.name} a copy of {user(base)}, so that read would not see the write",
            getattr(self.writes[key], "origin", None) or self.normalizer.info.node,
            f"return the new array and bind it ({user(base)} = {info.name}(...)), or pass a "
            f"copy ({user(base)}.copy()) when the change should not be seen")

    def bind(self, state, n, allocs):
        """`n` now holds `allocs`; other names keep what they held."""
        if n in self.numbers:
            return state
        memory = dict(state.memory)
        memory[n] = allocs
        pending = frozenset(p for p in state.pending if p[2] != n)
        return _State(memory, pending)

    def fresh(self, state, n, stmt):
        """`n` holds a new allocation made by `stmt`; a name still holding the allocation the
        same statement made on an earlier trip round a loop now holds an older one."""
        if n in self.numbers:
            return state
        made = ("made", id(stmt))
        memory = state.memory
        holding = [k for k, allocs in memory.items() if made in allocs]
        if holding:  # (most statements run once per trip: nothing to age)
            memory = dict(memory)
            older = _aged(made, {id(stmt)})
            for k in holding:
                memory[k] = frozenset(older if a == made else a for a in memory[k])
        return self.bind(_State(memory, state.pending), n, frozenset({made}))

    def simple(self, stmt, paths):
        """The paths after `stmt`: each path's map moved on by it."""
        self.read(paths, _reads(stmt))
        after = [self.simple_on_one_path(stmt, state) for state in paths.states()]
        # a write sharing memory on some paths only may share (the message says so)
        kept = frozenset().union(*(state.pending & paths.pending for state in after))
        new = [state.pending - paths.pending for state in after]
        on_every_path = set.intersection(*({p for p in pending if not p[3]} for pending in new))
        added = {p[:3] + (True,) if not p[3] and p not in on_every_path else p
                 for pending in new for p in pending}
        return _Paths(_Paths.of(after).maps, kept | added).capped()

    def simple_on_one_path(self, stmt, state):
        prim = getattr(stmt, "prim", None)
        in_place_of = getattr(stmt, "in_place_of", None)
        if prim is not None and prim.kind == "setitem" and in_place_of is None and \
                self.normalizer.types.get(prim.base) is not None and \
                self.normalizer.types[prim.base].kind == "list":
            return state  # `xs[i] = v` rebinds an entry: no element's memory is written
        if (prim is not None and prim.kind == "setitem") or in_place_of is not None:
            # a write into memory other names may share: `y[i] = v`, or `y += v` on an array
            base = in_place_of or prim.base
            written = self.allocations(state, base)
            sharing = {n: allocs != written for n, allocs in state.memory.items()
                       if n != base and allocs & written}
            if not sharing:
                return state
            self.writes[id(stmt)] = stmt
            if self.loop_depth:
                self.written_in_loops.add(id(stmt))
            return _State(state.memory, state.pending |
                          {(id(stmt), base, n, maybe) for n, maybe in sharing.items()})
        if prim is not None and prim.kind == "user":
            state = self.call_writes(stmt, prim, state)
            held = self.returned_arguments(prim, state)
            if held and isinstance(stmt, gast.Assign):
                # `b = ident(a)` (a helper returning its parameter): b is another name of a
                for n in _stores(stmt.targets[0]):
                    state = self.bind(state, n, held)
                return state
        if prim is not None and prim.kind in ("tuple", "tuple_get", "unpack") and \
                isinstance(stmt, gast.Assign):
            # `t = (a, 0.5)` holds a itself, and so does `u = t[0]` or `u, v = t`: a write into
            # a in place changes what t, t[0] and u read (each element is not told apart)
            held = frozenset().union(*(self.allocations(state, n) for n in _reads(stmt.value)))
            for n in _stores(stmt.targets[0]):
                state = self.bind(state, n, held)
            return state
        view_of = getattr(stmt, "view_of", None)
        for target in stmt.targets if isinstance(stmt, gast.Assign) else []:
            if view_of is not None and isinstance(target, gast.Name):
                state = self.bind(state, target.id, self.allocations(state, view_of))
                continue
            for n in _stores(target):
                state = self.fresh(state, n, stmt)
        return state

    def call_writes(self, stmt, prim, state):
        """A call of a function that writes into some of its parameters: every name holding
        an argument's memory, the argument itself included, must not be read afterwards (the
        callee wrote into a copy)."""
        callee = prim.callee
        written = getattr(callee, "written_params", None) or {}
        pending = set()
        for param, arg in zip(getattr(callee, "params", ()), prim.args or ()):
            if param not in written or not isinstance(arg, gast.Name):
                continue
            allocs = self.allocations(state, arg.id)
            entry = (callee, written[param][0], written[param][1])  # one per parameter
            self.writes[id(entry)] = stmt
            self.calls[id(entry)] = entry
            for n in set(state.memory) | {arg.id}:
                held = self.allocations(state, n)
                if held & allocs:
                    pending.add((id(entry), arg.id, n, held != allocs))
        if not pending:
            return state
        return _State(state.memory, state.pending | pending)

    def returned_arguments(self, prim, state):
        """The memory of the arguments a helper may return as they are (``return v``, or
        ``return v, v * 2.0``: each element not told apart)."""
        callee = prim.callee
        params = list(getattr(callee, "params", ()))
        returned = _returned_params(callee)
        held = frozenset()
        for param, arg in zip(params, prim.args or ()):
            if param in returned and isinstance(arg, gast.Name):
                held |= self.allocations(state, arg.id)
        return held

    def block(self, stmts, state):
        """`state`: the _Paths before `stmts`; the _Paths after."""
        for stmt in stmts:
            if isinstance(stmt, gast.If):
                self.read(state, _reads(stmt.test))
                state = self.block(stmt.body, state).join(self.block(stmt.orelse, state))
            elif isinstance(stmt, (gast.For, gast.While)):
                self.loop_depth += 1
                try:
                    state = self.loop(stmt, state)
                finally:
                    self.loop_depth -= 1
            else:
                state = self.simple(stmt, state)
        return state

    def loop(self, stmt, state):
        """The state after any number of trips, the zero-trip one included. At the top of a
        trip, what the loop's statements made in trips before is older: a name a branch of
        this trip binds to a new array shares nothing with one still holding the array the
        same statement made a trip before (``un = u * 1.5``, ``if ...: un = np.copy(u)``,
        ... ``u = un``)."""
        if isinstance(stmt, gast.For):
            self.read(state, _reads(stmt.iter))
        from .reverse import walk_statements
        made = {id(s) for s in walk_statements(stmt.body)}

        def older(allocs):
            return frozenset(_aged(a, made) for a in allocs)

        entry = state
        for trips in itertools.count(1):
            starts = []
            for path in entry.states():
                trip = _State({n: older(allocs) for n, allocs in path.memory.items()},
                              path.pending)
                if isinstance(stmt, gast.For):
                    for n in _stores(stmt.target):
                        trip = self.fresh(trip, n, stmt)
                starts.append(trip)
            start = _Paths.of(starts)
            if isinstance(stmt, gast.While):
                self.read(start, _reads(stmt.test))
            after = entry.join(self.block(stmt.body, start))
            if trips >= _COLLAPSE_AFTER:  # (one merged map: the fixed point comes quickly)
                after = after.capped(1)
            if after == entry:
                return entry
            entry = after


def _aged(allocation, statements):
    """`allocation` one trip older if one of `statements` made it: ("made", s) becomes
    ("older", s, 1), that ("older", s, 2), which stands for every older trip. Two generations
    tell apart the arrays of two buffers exchanged each step when one of them is a copy made
    each step (``u_held = u; u = un.copy(); un = u_held``: u holds last step's copy, un the
    one before); arrays two or more trips old are one, so may share."""
    kind, stmt = allocation[0], allocation[1]
    if kind == "made" and stmt in statements:
        return ("older", stmt, 1)
    if kind == "older" and stmt in statements:
        return ("older", stmt, 2)
    return allocation


def _returned_params(callee, seen=None):
    """Parameters of core function `callee` that it may return as they are, or through a
    copy, a view, a tuple or a helper that returns its own parameter (flow-insensitive)."""
    from .reverse import walk_statements
    seen = set() if seen is None else seen
    if callee is None or id(callee) in seen or getattr(callee, "body", None) is None:
        return set()
    seen.add(id(callee))
    holds = {p: {p} for p in callee.params}
    changed = True
    while changed:
        changed = False
        for stmt in walk_statements(callee.body):
            prim = getattr(stmt, "prim", None)
            if not isinstance(stmt, gast.Assign) or prim is None:
                continue
            if getattr(stmt, "view_of", None) is not None:
                sources = holds.get(stmt.view_of, set())
            elif prim.kind in ("copy", "tuple", "tuple_get", "unpack"):
                sources = set().union(*(holds.get(n, set()) for n in _reads(stmt.value)))
            elif prim.kind == "user":
                inner = _returned_params(prim.callee, seen)
                sources = set().union(*(holds.get(a.id, set()) for p, a in zip(
                    getattr(prim.callee, "params", ()), prim.args or ())
                    if p in inner and isinstance(a, gast.Name)))
            else:
                continue
            for n in _stores(stmt.targets[0]):
                if not sources <= holds.setdefault(n, set()):
                    holds[n] |= sources
                    changed = True
    seen.discard(id(callee))
    returns = getattr(callee, "returns", None)
    return set().union(*(holds.get(n, set()) for n in _reads(returns))) if returns is not None \
        else set()


def check_view_writes(normalizer):
    """Refuse an in-place write while another name for the same memory is read afterwards."""
    given = {n: frozenset({("given", n)}) for n in normalizer.params}
    _SharedMemoryCheck(normalizer).block(normalizer.body,
                                         _Paths.of([_State(given, frozenset())]))
