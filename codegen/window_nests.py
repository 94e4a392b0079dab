"""Loop nests over the taps of a correlation, written as one pass over the data.

A convolution written the NumPy way loops over the kernel's taps and makes one whole-array
pass per tap; its gradient does the same with one reduction per tap:

    for a in range(kh):
        for b in range(kw):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
    ...
    for a in range(kh - 1, -1, -1):
        for b in range(kw - 1, -1, -1):
            w_bar[a, b] += sum_of_products(out_bar, x[:, a:a + ho, b:b + wo])

With 25 taps over a batch of 32 images of 64 x 64, every pass streams a megabyte from memory:
the gradient took 2.9 ms, a hand-written Numba adjoint with the same loop order 1.8 ms, and
JAX 1.3 ms. :func:`rewrite_window_nests` replaces the first nest by
``out = window_accumulate(out, w, x, ho, wo, kh, kw)`` and computes the second nest's sums
before it, ``taps = window_products(out_bar, x, ho, wo, kh, kw)``, the nest then adding
``taps[a, b]``; the gradient with respect to x, ``x_bar[:, a:a + ho, b:b + wo] += out_bar *
w[a, b]`` in the same nest, becomes ``window_scatter(x_bar, out_bar, w, ho, wo, kh, kw)``
(a nest may hold several such sums and scatters, each writing its own array). Each helper
is plain NumPy (the taps loop as written) with a Numba overload that goes over the data
once, row by row, every tap applied to a row while it is in cache: an output row
``out[i, j]`` gets ``w[a, b] * x[i, j + a, b:b + wo]`` for every tap in the order the nest
had (so each element is summed in the same order: bit for bit the nest's result), each
tap's sum gathers row products, and each row of out_bar is added into the rows of x_bar it
reaches (the same sums in another order).

The rewritten statements run under ``if windows_fit(...)`` (and ``taps_fit(w, ...)``):
C-contiguous float64 arrays of two or three axes (windows on the last two), every window
inside ``x``, the window-shaped array (out, out_bar) of exactly the window's shape, ``w``
holding the taps the nest reads. The ``else`` branch is the nest as written, so anything
else keeps NumPy's broadcasting, clipping and errors, and the overloads compile no fallback
of their own.

The nest must be two ``for`` loops over ranges from zero (ascending; sums and scatters may
also run descending, as reverse mode writes them), the inner loop's statements of the forms
above (``np.sum(g * v)`` for ``sum_of_products(g, v)`` too, either operand order), the window
``x[:, a:a + h, b:b + l]`` or ``x[a:a + h, b:b + l]`` with h, l, the range bounds and the
arrays read free of the loop counters and of the names the nest writes.

>>> import gast
>>> from autodiff_ast.templates import unparse
>>> fn = gast.parse('''
... def f(w, x, ho, wo):
...     out = np.zeros((x.shape[0], ho, wo))
...     for a in range(w.shape[0]):
...         for b in range(w.shape[1]):
...             out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
...     return out
... ''').body[0]
>>> rewrite_window_nests(fn, {"f", "w", "x", "ho", "wo", "out", "a", "b"})
{'window_accumulate'}
>>> print(unparse(fn.body[1]))
if windows_fit(x, out, ho, wo, w.shape[0], w.shape[1]) and taps_fit(w, w.shape[0], w.shape[1]):
    out = window_accumulate(out, w, x, ho, wo, w.shape[0], w.shape[1])
else:
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            out = out + w[a, b] * x[:, a:a + ho, b:b + wo]
"""

from __future__ import annotations

import copy

import gast

from .emit import fresh_name, mentions, name_node, text_of
from .param_writes import dotted_name

__all__ = ["rewrite_window_nests", "WINDOW_HELPERS", "WINDOW_UNCOMPILED"]


def _const(node, value):
    """Whether `node` is the integer constant `value` (a negative one parsed or built)."""
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub):
        return _const(node.operand, -value)
    return isinstance(node, gast.Constant) and type(node.value) is int and node.value == value


def _range_bound(loop, descending_ok):
    """E when `loop` runs over range(E), range(0, E) or (if descending_ok) range(E - 1, -1,
    -1) with a plain name as its counter; else None."""
    it = loop.iter
    if loop.orelse or not isinstance(loop.target, gast.Name) or \
            not (isinstance(it, gast.Call) and dotted_name(it.func) == "range") or it.keywords:
        return None
    args = it.args
    if len(args) == 1:
        return args[0]
    if len(args) == 2 and _const(args[0], 0):
        return args[1]
    if descending_ok and len(args) == 3 and _const(args[2], -1) and _const(args[1], -1) and \
            isinstance(args[0], gast.BinOp) and isinstance(args[0].op, gast.Sub) and \
            _const(args[0].right, 1):
        return args[0].left
    return None


def _window_extent(part, counter):
    """L when `part` is the slice ``counter:counter + L`` (or ``counter:L + counter``)."""
    if not (isinstance(part, gast.Slice) and part.step is None and
            isinstance(part.lower, gast.Name) and part.lower.id == counter and
            isinstance(part.upper, gast.BinOp) and isinstance(part.upper.op, gast.Add)):
        return None
    left, right = part.upper.left, part.upper.right
    if isinstance(left, gast.Name) and left.id == counter:
        return right
    if isinstance(right, gast.Name) and right.id == counter:
        return left
    return None


def _window(node, a, b):
    """(x, h, l) when `node` is ``x[:, a:a + h, b:b + l]`` or ``x[a:a + h, b:b + l]``."""
    if not (isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and
            isinstance(node.slice, gast.Tuple)):
        return None
    parts = node.slice.elts
    if len(parts) == 3:
        full = parts[0]
        if not (isinstance(full, gast.Slice) and full.lower is None and full.upper is None and
                full.step is None):
            return None
        parts = parts[1:]
    if len(parts) != 2:
        return None
    h, ln = _window_extent(parts[0], a), _window_extent(parts[1], b)
    if h is None or ln is None:
        return None
    return node.value.id, h, ln


def _tap(node, a, b):
    """w when `node` is ``w[a, b]``."""
    if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
            isinstance(node.slice, gast.Tuple) and len(node.slice.elts) == 2 and \
            all(isinstance(e, gast.Name) for e in node.slice.elts) and \
            [e.id for e in node.slice.elts] == [a, b]:
        return node.value.id
    return None


def _accumulation(stmt, a, b):
    """(out, w, x, h, l) for ``out = out + w[a, b] * x[<window>]`` (either product order)."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and
            isinstance(stmt.targets[0], gast.Name) and isinstance(stmt.value, gast.BinOp) and
            isinstance(stmt.value.op, gast.Add) and isinstance(stmt.value.left, gast.Name) and
            stmt.value.left.id == stmt.targets[0].id and
            isinstance(stmt.value.right, gast.BinOp) and isinstance(stmt.value.right.op,
                                                                   gast.Mult)):
        return None
    product = stmt.value.right
    for tap, view in ((product.left, product.right), (product.right, product.left)):
        w, window = _tap(tap, a, b), _window(view, a, b)
        if w is not None and window is not None:
            return (stmt.targets[0].id, w) + window
    return None


def _reduction(stmt, a, b):
    """(w_bar, g, x, h, l) for ``w_bar[a, b] += sum_of_products(g, x[<window>])`` (or
    ``np.sum(g * x[<window>])``, either operand order)."""
    if not (isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, gast.Add)):
        return None
    target = _tap(stmt.target, a, b)
    call = stmt.value
    if target is None or not isinstance(call, gast.Call) or call.keywords:
        return None
    func = dotted_name(call.func)
    if func == "sum_of_products" and len(call.args) == 2:
        operands = call.args
    elif func == "np.sum" and len(call.args) == 1 and isinstance(call.args[0], gast.BinOp) \
            and isinstance(call.args[0].op, gast.Mult):
        operands = [call.args[0].left, call.args[0].right]
    else:
        return None
    for g, view in ((operands[0], operands[1]), (operands[1], operands[0])):
        window = _window(view, a, b)
        if isinstance(g, gast.Name) and window is not None:
            return (target, g.id) + window
    return None


def _scatter(stmt, a, b):
    """(x_bar, g, w, h, l) for ``add_into(x_bar[<window>], g * w[a, b])`` or
    ``x_bar[<window>] += g * w[a, b]`` (either product order)."""
    if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
            dotted_name(stmt.value.func) == "add_into" and len(stmt.value.args) == 2 and \
            not stmt.value.keywords:
        view, value = stmt.value.args
    elif isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, gast.Add):
        view, value = stmt.target, stmt.value
    else:
        return None
    window = _window(view, a, b)
    if window is None or not (isinstance(value, gast.BinOp) and isinstance(value.op, gast.Mult)):
        return None
    for g, tap in ((value.left, value.right), (value.right, value.left)):
        w = _tap(tap, a, b)
        if isinstance(g, gast.Name) and w is not None:
            return window[0], g.id, w, window[1], window[2]
    return None


def rewrite_window_nests(fn, taken):
    """Rewrite the tap nests of `fn` (anywhere in it); returns the helpers used."""
    used = set()

    def block(stmts):
        out = []
        for stmt in stmts:
            replaced = _nest(stmt, taken, used) if isinstance(stmt, gast.For) else None
            if replaced is not None:
                out += replaced
                continue
            for field in ("body", "orelse"):
                if isinstance(getattr(stmt, field, None), list) and not isinstance(
                        stmt, (gast.FunctionDef, gast.ClassDef)):
                    setattr(stmt, field, block(getattr(stmt, field)))
            out.append(stmt)
        return out
    fn.body = block(fn.body)
    return used


def _nest(outer, taken, used):
    """The statement standing for the tap nest `outer` (``if`` the windows fit, the helpers,
    ``else`` the nest as written), or None when it is not one."""
    if len(outer.body) != 1 or not isinstance(outer.body[0], gast.For) or not \
            isinstance(outer.target, gast.Name) or not isinstance(outer.body[0].target,
                                                                   gast.Name):
        return None
    inner = outer.body[0]
    a, b = outer.target.id, inner.target.id
    if a == b or not inner.body:
        return None
    if len(inner.body) == 1:
        found = _accumulation(inner.body[0], a, b)
        if found is not None:
            ea, eb = _range_bound(outer, False), _range_bound(inner, False)
            out, w, x, h, ln = found
            if not _free(ea, eb, h, ln, names=(a, b, out), arrays=(w, x), writes=out):
                return None
            used.add("window_accumulate")
            fast = [_assign(out, "window_accumulate", [name_node(out), name_node(w),
                                                       name_node(x)] +
                            copy.deepcopy([h, ln, ea, eb]))]
            return _guarded([(x, out, w)], h, ln, ea, eb, fast, outer)
    # sums into w_bar[a, b] and scatters into x_bar's windows: each its own one pass
    ea, eb = _range_bound(outer, True), _range_bound(inner, True)
    forms = []  # (statement, is a sum, (written, read, read, h, l))
    for stmt in inner.body:
        summed = _reduction(stmt, a, b)
        found = summed or _scatter(stmt, a, b)
        if found is None or not _free(ea, eb, *found[3:], names=(a, b, found[0]),
                                      arrays=found[1:3], writes=found[0]):
            return None
        forms.append((stmt, summed is not None, found))
    written = [found[0] for _, _, found in forms]
    read = {n for _, _, found in forms for n in found[1:3]}
    extents = {(text_of(found[3]), text_of(found[4])) for _, _, found in forms}
    if len(set(written)) != len(written) or set(written) & read or len(extents) != 1:
        return None  # (one windows_fit check covers windows of one extent)
    fast, kept, checks = [], [], []
    for stmt, is_sum, (target, g, x_or_w, h, ln) in forms:
        if is_sum:
            used.add("window_products")
            taps = fresh_name("taps", taken)
            fast.append(_assign(taps, "window_products", [name_node(g), name_node(x_or_w)] +
                                copy.deepcopy([h, ln, ea, eb])))
            checks.append((x_or_w, g, None))
            summed = copy.deepcopy(stmt)
            summed.value = gast.Subscript(value=name_node(taps), slice=gast.Tuple(
                elts=[name_node(a), name_node(b)], ctx=gast.Load()), ctx=gast.Load())
            kept.append(summed)
        else:
            used.add("window_scatter")
            fast.append(gast.Expr(value=gast.Call(
                func=name_node("window_scatter"), args=[
                    name_node(target), name_node(g), name_node(x_or_w)] +
                copy.deepcopy([h, ln, ea, eb]), keywords=[])))
            checks.append((target, g, x_or_w))
    if kept:
        nest = copy.deepcopy(outer)
        nest.body[0].body = kept
        fast.append(nest)
    return _guarded(checks, h, ln, ea, eb, fast, outer)


def _guarded(checks, h, ln, ea, eb, fast, nest):
    """``if <every window fits>: fast else: nest``."""
    tests = []
    for windowed, shaped, taps in checks:
        tests.append(gast.Call(func=name_node("windows_fit"), args=[
            name_node(windowed), name_node(shaped)] + copy.deepcopy([h, ln, ea, eb]),
            keywords=[]))
        if taps is not None:
            tests.append(gast.Call(func=name_node("taps_fit"), args=[name_node(taps)] +
                                   copy.deepcopy([ea, eb]), keywords=[]))
    test = tests[0] if len(tests) == 1 else gast.BoolOp(op=gast.And(), values=tests)
    return [gast.If(test=test, body=fast, orelse=[nest])]


def _assign(target, helper, args):
    return gast.Assign(targets=[name_node(target, gast.Store())], value=gast.Call(
        func=name_node(helper), args=args, keywords=[]), type_comment=None)


def _free(*bounds, names, arrays, writes):
    """Whether the bounds and extents are known and mention none of `names`, and no array
    read is the one written."""
    if any(e is None for e in bounds) or writes in arrays:
        return False
    return not any(mentions(e, n) for e in bounds for n in names)


#: The helpers' sources: plain NumPy, and the Numba overload going over the data once. The
#: generated code calls them only where ``windows_fit`` (and ``taps_fit``) hold; elsewhere it
#: runs the nest as written, so the overloads have no fallback of their own to compile (the
#: nest's three-axis array expression took Numba 1.7 s).
WINDOW_HELPERS = {}
WINDOW_HELPERS["windows_fit"] = '''\
def windows_fit(x, g, h, l, ea, eb):
    """Whether every window x[..., a:a + h, b:b + l] (a < ea, b < eb) lies inside x and g has
    a window's shape, x and g C-contiguous float64 arrays of two or three axes (under Numba,
    other types give False when the call is compiled)."""
    ok = all(isinstance(v, np.ndarray) and v.dtype == np.float64 and v.flags.c_contiguous
             for v in (x, g)) and x.ndim in (2, 3) and g.ndim == x.ndim
    return ok and ea > 0 and eb > 0 and h >= 0 and l >= 0 and \\
        ea - 1 + h <= x.shape[-2] and eb - 1 + l <= x.shape[-1] and \\
        g.shape == x.shape[:-2] + (h, l)


@numba.extending.overload(windows_fit, jit_options={'error_model': 'numpy'})
def windows_fit_numba(x, g, h, l, ea, eb):
    """How Numba compiles windows_fit: the sizes compared at run time, the types when the
    call is compiled."""
    if not all(isinstance(t, numba.types.Array) and t.dtype == numba.types.float64 and
               t.layout == 'C' for t in (x, g)) or x.ndim not in (2, 3) or g.ndim != x.ndim:
        return lambda x, g, h, l, ea, eb: False

    def sizes_fit(x, g, h, l, ea, eb):
        return ea > 0 and eb > 0 and h >= 0 and l >= 0 and ea - 1 + h <= x.shape[-2] and \\
            eb - 1 + l <= x.shape[-1] and g.shape[-2] == h and g.shape[-1] == l and \\
            (x.ndim == 2 or g.shape[0] == x.shape[0])
    return sizes_fit
'''

WINDOW_HELPERS["taps_fit"] = '''\
def taps_fit(w, ea, eb):
    """Whether w is a C-contiguous float64 matrix holding w[a, b] for a < ea and b < eb."""
    return isinstance(w, np.ndarray) and w.dtype == np.float64 and w.ndim == 2 and \\
        w.flags.c_contiguous and w.shape[0] >= ea and w.shape[1] >= eb


@numba.extending.overload(taps_fit, jit_options={'error_model': 'numpy'})
def taps_fit_numba(w, ea, eb):
    """How Numba compiles taps_fit: the type when the call is compiled, the size at run time."""
    if not (isinstance(w, numba.types.Array) and w.dtype == numba.types.float64 and
            w.layout == 'C' and w.ndim == 2):
        return lambda w, ea, eb: False
    return lambda w, ea, eb: w.shape[0] >= ea and w.shape[1] >= eb
'''

WINDOW_HELPERS["window_accumulate"] = '''\
def window_accumulate(out, w, x, h, l, ea, eb):
    """out + w[a, b] * x[..., a:a + h, b:b + l] summed over a < ea then b < eb, as the loops
    do, for arguments windows_fit and taps_fit accept (under Numba, one pass over x: see
    window_accumulate_numba)."""
    for a in range(ea):
        for b in range(eb):
            out = out + w[a, b] * x[..., a:a + h, b:b + l]
    return out


@numba.extending.overload(window_accumulate, jit_options={'error_model': 'numpy'})
def window_accumulate_numba(out, w, x, h, l, ea, eb):
    """How Numba compiles window_accumulate: each row out[i, j] gets every tap's w[a, b] *
    x[i, j + a, b:b + l] while it is in cache, the taps in the loops' order (each element
    the same sum, bit for bit)."""
    if not windows_fit_types(x, out, w):
        def refused(out, w, x, h, l, ea, eb):
            unreachable_window()
            return out
        return refused
    as_cube = cube_of_matrix if x.ndim == 2 else cube_itself

    def one_pass(out, w, x, h, l, ea, eb):
        x3 = as_cube(x)
        result = out.copy()
        r3 = as_cube(result)
        for i in range(x3.shape[0]):
            for j in range(h):
                for a in range(ea):
                    for b in range(eb):
                        tap = w[a, b]
                        for k in range(l):
                            r3[i, j, k] += tap * x3[i, j + a, b + k]
        return result
    return one_pass
'''

WINDOW_HELPERS["window_products"] = '''\
def window_products(g, x, h, l, ea, eb):
    """The ea x eb array of np.sum(g * x[..., a:a + h, b:b + l]), for arguments windows_fit
    accepts (under Numba, one pass over g and x: see window_products_numba)."""
    taps = np.empty((ea, eb))
    for a in range(ea):
        for b in range(eb):
            taps[a, b] = np.sum(g * x[..., a:a + h, b:b + l])
    return taps


@numba.extending.overload(window_products, jit_options={
    'error_model': 'numpy', 'fastmath': {'reassoc', 'contract'}})
def window_products_numba(g, x, h, l, ea, eb):
    """How Numba compiles window_products: each tap's sum gathers the products of the rows
    g[i, j] and x[i, j + a, b:b + l] while they are in cache (sums reassociated, as
    sum_of_products's)."""
    if not windows_fit_types(x, g, None):
        def refused(g, x, h, l, ea, eb):
            unreachable_window()
            return np.empty((0, 0))
        return refused
    as_cube = cube_of_matrix if x.ndim == 2 else cube_itself

    def one_pass(g, x, h, l, ea, eb):
        x3 = as_cube(x)
        g3 = as_cube(g)
        taps = np.zeros((ea, eb))
        for i in range(x3.shape[0]):
            for j in range(h):
                for a in range(ea):
                    for b in range(eb):
                        total = 0.0
                        for k in range(l):
                            total += g3[i, j, k] * x3[i, j + a, b + k]
                        taps[a, b] += total
        return taps
    return one_pass
'''

WINDOW_HELPERS["window_scatter"] = '''\
def window_scatter(x_bar, g, w, h, l, ea, eb):
    """x_bar[..., a:a + h, b:b + l] += g * w[a, b] for every a < ea and b < eb, in place (the
    adjoint of a correlation with respect to its input), for arguments windows_fit and
    taps_fit accept (under Numba, one pass over g and x_bar: see window_scatter_numba)."""
    for a in range(ea):
        for b in range(eb):
            x_bar[..., a:a + h, b:b + l] += g * w[a, b]


@numba.extending.overload(window_scatter, jit_options={'error_model': 'numpy'})
def window_scatter_numba(x_bar, g, w, h, l, ea, eb):
    """How Numba compiles window_scatter: each row g[i, j] is added, times every tap, into
    the rows of x_bar it reaches while it is in cache (the same sums, in another order)."""
    if not windows_fit_types(x_bar, g, w):
        def refused(x_bar, g, w, h, l, ea, eb):
            unreachable_window()
        return refused
    as_cube = cube_of_matrix if x_bar.ndim == 2 else cube_itself

    def one_pass(x_bar, g, w, h, l, ea, eb):
        x3 = as_cube(x_bar)
        g3 = as_cube(g)
        for i in range(x3.shape[0]):
            for j in range(h):
                for a in range(ea):
                    for b in range(eb):
                        tap = w[a, b]
                        for k in range(l):
                            x3[i, j + a, b + k] += tap * g3[i, j, k]
    return one_pass
'''

WINDOW_HELPERS["windows_fit_types"] = '''\
def windows_fit_types(x, g, w):
    """Whether the Numba types of a window helper's arrays are the ones its one pass takes:
    x and g C-contiguous float64 arrays of two or three axes, w (when not None) a
    C-contiguous float64 matrix."""
    arrays = (x, g) if w is None else (x, g, w)
    return all(isinstance(t, numba.types.Array) and t.dtype == numba.types.float64 and
               t.layout == 'C' for t in arrays) and x.ndim in (2, 3) and g.ndim == x.ndim \\
        and (w is None or w.ndim == 2)


def unreachable_window():
    """What a window helper compiles to for arguments windows_fit refuses (never called: the
    generated code runs the loops as written for them)."""
    raise TypeError("window helper called with arguments windows_fit refuses")
'''

WINDOW_HELPERS["cube_of_matrix"] = '''\
def cube_of_matrix(x):
    """A C-contiguous matrix as an array of one matrix (a view)."""
    return x.reshape((1, x.shape[0], x.shape[1]))
'''

WINDOW_HELPERS["cube_itself"] = '''\
def cube_itself(x):
    """A three-axis array as it is (window helpers take matrices and cubes alike)."""
    return x
'''

#: Helpers every rewritten nest brings along.
WINDOW_COMMON = ("windows_fit", "taps_fit", "windows_fit_types", "cube_of_matrix",
                 "cube_itself")

#: The functions of WINDOW_HELPERS Numba reaches through their overloads, or runs while it
#: types a call.
WINDOW_UNCOMPILED = frozenset({
    "window_accumulate", "window_accumulate_numba", "window_products", "window_products_numba",
    "window_scatter", "window_scatter_numba", "windows_fit", "windows_fit_numba", "taps_fit",
    "taps_fit_numba", "windows_fit_types"})
