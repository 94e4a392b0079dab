"""jit: compiled primal and transformed functions, the compiled dialect, the on-disk cache.

Three layers, cheapest first:

- the dialect helpers and rewrites, run as plain Python and compared with NumPy (no Numba);
- Numba compiles (``@pytest.mark.numba``): every rule of the op table (tests/test_ops.py) through
  ``jit(grad(f))``, compared with the plain-Python gradient; the public behaviour of ``jit``
  (static arguments, pytrees, input normalisation, module data, errors on the user's line);
- new processes sharing the on-disk cache: a warm start compiles nothing, a corrupt cache file
  is detected and rebuilt.

Compiling is the cost here, so compiled functions are shared through module-scoped fixtures,
the op table is compiled in groups (one module per group), and LLVM runs at -O0 while these
tests compile (typing and lowering, which decide whether Numba accepts the code, are the same
at every optimization level; the level is part of the generated module's text, so these
modules never meet the optimized ones in the cache).
"""

from __future__ import annotations

import json
import linecache
import os
import re
import subprocess
import sys
import textwrap
from typing import NamedTuple

import numpy as np
import pytest
import test_ops as OPS
from test_higher_order import numeric_jacobian  # central differences, out.shape + x.shape

import autodiff_ast as ad
from autodiff_ast.errors import ArgnumsError, CompileError
from autodiff_ast.jit import jit
from codegen import dialect
from codegen.helpers import dialect_helper_source
from codegen.numba_cpu import NumbaOptions, versions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# At -O0 Numba does not cache functions that call other compiled functions; that is expected.
pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")


# ---------------------------------------------------------------- plain-Python dialect checks
def _run_lowered(source, entry, *args):
    """Lower `source`, exec the rendered module as plain Python and call `entry`."""
    lowered = dialect.lower_source(source, entries=[entry])
    text = dialect.render(lowered)
    namespace = {}
    exec(compile(text, "<lowered>", "exec"), namespace)
    return namespace[entry](*args), text


def _module(body, params="x"):
    return f"import numpy as np\n\n\ndef f({params}):\n    return {body}\n"


X3 = np.random.default_rng(0).standard_normal((2, 3, 4))

REDUCTIONS = [
    ("np.sum(x, axis=1, keepdims=True)", "keep_axis"),
    ("np.sum(x, axis=(0, 2))", "np.sum"),
    ("np.sum(x, axis=(0, -1), keepdims=True)", "keep_axis"),
    ("np.sum(x, keepdims=True)", "keep_all"),
    ("np.mean(x, axis=1)", "mean_axis"),
    ("np.mean(x, axis=-1, keepdims=True)", "mean_axis"),
    ("np.mean(x, axis=(0, 2))", "mean_axis"),
    ("np.max(x, axis=0)", "max_axis"),
    ("np.amax(x, axis=(1, 2))", "max_axis"),
    ("np.min(x, axis=2, keepdims=True)", "min_axis"),
    ("np.prod(x, axis=1)", "prod_axis"),
    ("np.var(x, axis=1)", "var_axis"),
    ("np.var(x, axis=0, ddof=1)", "var_axis"),
    ("np.std(x, axis=(0, 2), keepdims=True)", "np.sqrt"),
    ("np.var(x, ddof=1)", ".size"),
    ("np.flip(x, 1)", "flip_axis"),
    ("np.flip(x, axis=(0, 2))", "flip_axis"),
    ("np.roll(x, 2, 2)", "roll_axis"),
    ("np.take(x, np.array([[0, 1], [1, -1]]), axis=1)", "take_axis"),
    ("np.take(x, 2, axis=-1)", "take_axis"),
    ("np.repeat(x, np.array([1, 0, 2]), axis=1)", "repeat_axis"),
    ("np.repeat(x, 2, axis=-1)", "repeat_axis"),
    ("np.tile(x, 2)", "tile_count"),
    ("np.tile(x[0, 0, 0], 3)", "tile_count"),
    ("np.tile(x, (3,))", "tile_count"),
    ("np.tile(x[0], (2, 3))", "tile_rows_columns"),
    ("np.tile(x, (1, 2))", "tile_rows_columns"),
    ("np.atleast_3d(x[0, 0, 0])", "np.atleast_3d(np.asarray("),
    ("np.rot90(x, 1, axes=(1, 2))", "np.swapaxes(flip_axis(x, 2), 1, 2)"),
    ("np.rot90(x, 2, (0, -1))", "flip_axis(flip_axis(x, 0), -1)"),
    ("np.rot90(x, -1, (2, 0))", "flip_axis(np.swapaxes(x, 2, 0), 0)"),
    ("np.vstack([x[0, 0], x[1]])", "np.concatenate((np.atleast_2d(x[0, 0]), np.atleast_2d"),
    ("np.dstack((x[0, 0], x[1, :1]))", "np.atleast_3d(x[0, 0]), np.atleast_3d(x[1, :1])"),
    ("np.column_stack([x[0, 0], x[1].T])", "np.column_stack((x[0, 0], x[1].T))"),
    ("np.kron(x[0], x[1, :, 2])", "np.kron(np.ascontiguousarray(x[0]), np.ascontiguousarray("),
    ("np.squeeze(x, axis=1)", "reshape"),
    ("np.expand_dims(x, (0, 2))", "np.expand_dims"),
    ("np.matmul(x[0], x[1].T)", "@"),
    ("np.clip(x, -0.5, 0.5)", "np.minimum"),
    ("np.clip(x, None, 0.5)", "np.minimum"),
    ("abs(x)", "np.abs"),
    ("np.diagonal(x[0])", "np.diag"),
    ("x.T.reshape(-1)", "ascontiguousarray"),
    ("np.reshape(x.T, (4, 6))", "ascontiguousarray"),
    ("np.heaviside(x, 0.5)", "np.where"),
    ("np.concatenate([x, x[:1]])", "np.concatenate((x, x[:1]))"),
    ("x[[0, 1, 1]]", "np.array([0, 1, 1])"),
    ("np.linalg.norm(x, axis=1)", "np.sqrt"),
    ("np.linalg.norm(x, axis=(0, 2), keepdims=True)", "keep_axis"),
    ("np.linalg.norm(x, keepdims=True)", "keep_all"),
    ("np.outer(x[0, 0], x[1, :, 1])", "outer_product"),
    ("np.outer(x[0], x[1, 0])", "outer_product"),
]


@pytest.mark.parametrize("expr,marker", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
def test_lowered_numpy_matches_numpy(expr, marker):
    """Each rewrite computes what the NumPy call it replaces computes."""
    src = _module(expr)
    x = X3[:, :1] if "squeeze" in expr else X3
    got, text = _run_lowered(src, "f", x)
    expected = eval(expr, {"np": np, "x": x})
    assert marker in text.split("def f(x):")[1]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert np.shape(got) == np.shape(expected)


# In-place additions into part of an array: (loop body using a, b, t, v, w, the helper the
# lowering must call, or None when it must leave the statement as written).
SLICE_UPDATES = [
    ("a[c, 1:] += v[c, 1:]", "add_into(a[c, 1:], v[c, 1:])"),
    ("a[c, :] += 2.0 * c", "add_into(a[c, :], 2.0 * c)"),
    ("a[1:, c] += w[:2]", "add_into(a[1:, c], w[:2])"),
    ("a[c] += w", "add_at(a, c, w)"),
    ("a[c] += w[:1]", "add_at(a, c, w[:1])"),
    ("a[c + 1 - 1] += 0.5", "add_at(a, c + 1 - 1, 0.5)"),
    ("b[c] += w[c] * c", "add_at(b, c, w[c] * c)"),
    ("t[c] += v", "add_at(t, c, v)"),
    ("t[c, 1] += w", None),  # a row of t, but only one integer index is rewritten
    ("t[c, 1:, 2:] += v[:2, :2]", "add_into(t[c, 1:, 2:], v[:2, :2])"),
    ("t[:, None, c] += a[:, None, :]", "add_into(t[:, None, c], a[:, None, :])"),  # newaxis
    ("a[None, c, :] += w", "add_into(a[None, c, :], w)"),
    ("a[c, 2] += 1.0", None),  # every index an integer: may be one element, left as written
    ("a[idx] += 1.0", None),  # an index array: a copy, not a view
    ("a[c - 1:c] -= w", None),  # only += is rewritten
    ("v[c] += w", None),  # a parameter: might be a list
    ("idx[c] += 1", None),  # a list
    ("rows[c] += 1.0", None),  # a list built by a call (it has .append)
]


@pytest.mark.parametrize("stmt,call", SLICE_UPDATES, ids=[u[0] for u in SLICE_UPDATES])
def test_slice_updates_add_in_place_like_numpy(stmt, call):
    """`a[c, p:] += v` and `a[c] += v` (c a loop counter) become add_into / add_at, which add
    in place with NumPy's broadcasting: the same arrays as the statement run by NumPy."""
    source = ("import numpy as np\n\n\ndef f(a0, b0, t0, v, w):\n    idx = [0, 0, 2]\n"
              "    a = a0.copy()\n    b = b0.copy()\n    t = t0.copy()\n"
              "    rows = w.tolist()\n    rows.append(1.0)\n"
              f"    for c in range(3):\n        {stmt}\n    return a, b, t\n")
    rng = np.random.default_rng(1)
    args = (rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((3, 3, 4)),
            rng.standard_normal((3, 4)), rng.standard_normal(4))
    namespace = {"np": np}
    exec(compile(source, "<numpy>", "exec"), namespace)
    expected = namespace["f"](*[np.copy(x) for x in args])
    got, text = _run_lowered(source, "f", *[np.copy(x) for x in args])
    body = text.split("def f(")[1]
    if call is None:
        assert stmt in body and "add_into(" not in body and "add_at(" not in body
    else:
        assert call in body
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_loop_counters_rebound_in_the_body_are_not_integers():
    source = ("import numpy as np\n\n\ndef f(a0, s):\n    a = a0.copy()\n"
              "    for c in range(2):\n        c = s\n        a[c] += 1.0\n    return a\n")
    got, text = _run_lowered(source, "f", np.zeros((3, 2)), slice(0, 2))
    assert "a[c] += 1.0" in text
    np.testing.assert_array_equal(got, [[2.0, 2.0], [2.0, 2.0], [0.0, 0.0]])


@pytest.mark.numba
def test_slice_updates_and_outer_compile(quick_llvm):
    """The helpers replacing slice assignments and np.outer compile, and agree with NumPy."""
    import numba
    source = ("import numpy as np\n\n\ndef f(a0, b0, v):\n    a = a0.copy()\n"
              "    b = b0.copy()\n    for c in range(a.shape[0]):\n"
              "        a[c, 1:] += v[1:]\n        a[c] += np.outer(v, v)[c]\n"
              "        b[c] += v[c]\n    return a, b\n")
    rng = np.random.default_rng(2)
    args = (rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal(3))
    namespace = {"np": np}
    exec(compile(source, "<numpy>", "exec"), namespace)
    expected = namespace["f"](*[np.copy(x) for x in args])
    text = dialect.render(dialect.lower_source(source, entries=["f"]), "numba.njit")
    assert "add_into(" in text and "add_at(" in text and "outer_product(" in text
    namespace = {"numba": numba}
    exec(compile(text, "<lowered>", "exec"), namespace)
    got = namespace["f"](*[np.copy(x) for x in args])
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-14)


def stacked_products(q, c, w):
    """Three stacks of matrix products (large enough for np.dot) and one small one."""
    z = np.einsum("kab,knb->kna", q, c)
    q_back = np.einsum("kna,knb->kab", z, c)
    c_back = np.einsum("kna,kab->knb", z, q)
    small = np.einsum("kab,kbc->kac", q[:, :2, :3], w)
    return np.sum(z * z) + np.sum(q_back * q) + np.sum(np.tanh(c_back)) + np.sum(small)


@pytest.mark.numba
def test_stacked_matrix_products_compile(quick_llvm):
    """Under jit the einsum helpers multiply each stacked pair with np.dot when large (the
    loops otherwise) for floats, strided views and integers; jit(grad) of a loss built on
    them (its cotangents are stacked products too) agrees with finite differences."""
    rng = np.random.default_rng(11)
    q, c, w = rng.standard_normal((3, 8, 16)), rng.standard_normal((3, 40, 16)), \
        rng.standard_normal((1, 3, 2))
    expected = stacked_products(q, c, w)
    compiled = jit(stacked_products)
    np.testing.assert_allclose(compiled(q, c, w), expected, rtol=1e-10)
    assert "np.dot(np.asarray(op1[k], dtype=np.float64)" in compiled.source
    view = np.repeat(c, 2, axis=-1)[..., ::2]
    np.testing.assert_allclose(compiled(q, view, w), expected, rtol=1e-10)
    gradient = jit(ad.grad(stacked_products, argnums=(0, 1)))
    for got, want in zip(gradient(q, c, w), ad.grad(stacked_products, argnums=(0, 1))(q, c, w)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10)
    ad.check_grads(stacked_products, (q, c, w), modes=("rev",), order=1)


def soft_assignments(a, b, c):
    """Vectorized, with new axes and axis sums of 2-D, 3-D and boolean arrays (the shape of
    ADBench GMM's vectorized rewrite)."""
    scores = a[:, None] - (b[None, :, :] * c[:, None, :]).sum(axis=2) ** 2
    top = np.max(scores, axis=0)
    hits = np.sum(scores == top, axis=0)
    return np.sum(np.log(np.sum(np.exp(scores - top), axis=0)) + top) + 0.0 * np.sum(hits)


@pytest.mark.numba
def test_new_axes_and_axis_sums_compile(quick_llvm):
    """jit(grad) of vectorized code whose cotangents are added through new axes
    (`a_bar[:, None] += ...` as add_into of a view) and summed over axes of 3-D and boolean
    arrays (sum_axis's loops) agrees with the plain gradient and finite differences."""
    rng = np.random.default_rng(12)
    a, b, c = rng.standard_normal(4), rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    compiled = jit(ad.grad(soft_assignments, argnums=(0, 1, 2)))
    for got, want in zip(compiled(a, b, c), ad.grad(soft_assignments, argnums=(0, 1, 2))(a, b, c)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert re.search(r"add_into\(\w+\[:, None", compiled.source), compiled.source
    assert jit(soft_assignments)(a, b, c) == pytest.approx(soft_assignments(a, b, c), rel=1e-12)
    ad.check_grads(soft_assignments, (a, b, c), modes=("rev",), order=1)


@pytest.mark.numba
def test_stacking_a_list_of_arrays_compiles(quick_llvm):
    """np.stack of a list built in a loop (Numba stacks only tuples): a dialect helper, plain
    and compiled, and the list display form becomes a tuple."""
    import numba
    source = ("import numpy as np\n\n\ndef f(x):\n    rows = []\n"
              "    for i in range(x.shape[0]):\n        rows.append(x[i] * 2.0)\n"
              "    return np.stack(rows) + np.stack([x[0], x[1]])[:1]\n")
    got, text = _run_lowered(source, "f", X3)
    assert "stack_list(rows)" in text and "np.stack((x[0], x[1]))" in text
    expected = 2.0 * X3 + X3[:1]
    np.testing.assert_allclose(got, expected)
    namespace = {}
    exec(compile(text, "<lowered>", "exec"), namespace)
    compiled = numba.njit(namespace["f"])
    for helper in ("stack_list",):
        namespace[helper] = numba.njit(namespace[helper])
    np.testing.assert_allclose(compiled(X3), expected)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", ["max_axis", "min_axis", "prod_axis", "mean_axis"])
def test_one_axis_helpers_on_vectors_and_matrices(name, axis):
    ns = {"np": np}
    exec(dialect.DIALECT_HELPERS[name], ns)
    x = X3[0]
    reference = {"max_axis": np.max, "min_axis": np.min, "prod_axis": np.prod,
                 "mean_axis": np.mean}[name]
    np.testing.assert_allclose(ns[name](x, axis), reference(x, axis=axis))
    np.testing.assert_allclose(ns[name](x[0], 0), reference(x[0], axis=0))


ND_PRODUCTS = [((2, 3), (3, 4)), ((4, 2, 3), (3,)), ((3,), (4, 3, 2)), ((4, 2, 3), (3, 5)),
               ((2, 3), (5, 3, 4)), ((4, 2, 3), (4, 3, 2)), ((4, 2, 3), (1, 3, 2)),
               ((5, 4, 2, 3), (4, 3, 2)),
               # batch axes broadcast both ways (a stack of one was the only broadcast before)
               ((2, 1, 2, 3), (2, 3, 4)), ((2, 1, 2, 3), (3, 3, 4)), ((1, 4, 2, 3), (5, 1, 3, 2))]


@pytest.mark.parametrize("sa,sb", ND_PRODUCTS, ids=str)
def test_any_rank_products_match_numpy(sa, sb):
    ns = {"np": np}
    for text in dialect_helper_source({"matmul_nd"}):
        exec(text, ns)
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_allclose(ns["matmul_nd"](a, b), a @ b, rtol=1e-12)
    np.testing.assert_allclose(ns["dot_nd"](a, b), np.dot(a, b), rtol=1e-12)


def _integer_matrix_products(x, A, B):
    return np.sum(np.dot(A, x) ** 2) + np.sum((x @ B) ** 3) + np.sum(A @ B)


def _integer_matrix_in_a_loop(x, A):
    s = np.zeros(A.shape[0])
    for i in range(3):
        s = s + np.dot(A, x) * i
    return np.sum(s ** 2)


def _integer_product(A, B):
    return A @ B


@pytest.mark.numba
def test_integer_and_mixed_dtype_matrix_products_compile():
    # Numba's np.dot and @ take two arrays of one float dtype: an int matrix times a float
    # vector was a CompileError (dot_nd, matmul_nd and small_dot now convert, as NumPy does).
    A = np.array([[1, 2], [3, 4], [0, -1]])
    B = np.array([[True, False, True], [False, True, True]])
    x = np.array([0.5, -1.0])
    for f, args in ((_integer_matrix_products, (x, A, B)), (_integer_matrix_in_a_loop, (x, A))):
        expected = numeric_jacobian(lambda v, f=f, rest=args[1:]: f(v, *rest), x)
        np.testing.assert_allclose(jit(ad.grad(f))(*args), expected, rtol=1e-6)
        np.testing.assert_allclose(jit(f)(*args), f(*args), rtol=1e-12)
    product = jit(_integer_product)(A, A.T)  # int @ int stays int, as in NumPy
    assert product.dtype == (A @ A.T).dtype
    np.testing.assert_array_equal(product, A @ A.T)
    mixed = jit(_integer_product)(x.astype(np.float32), A.T.astype(np.float64))
    assert mixed.dtype == np.float64
    np.testing.assert_allclose(mixed, x @ A.T, rtol=1e-6)


UNBROADCAST = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 3), (2, 1)), ((2, 3), (1, 3)),
               ((4, 2, 3), (2, 1)), ((2, 3), ()), ((3,), (1,)), ((), (2, 2))]


@pytest.mark.parametrize("gshape,shape", UNBROADCAST, ids=str)
def test_unbroadcast_loops_match_numpy_sums(gshape, shape):
    ns = {"np": np}
    exec(dialect.DIALECT_HELPERS["unbroadcast"], ns)
    g = np.random.default_rng(1).standard_normal(gshape)
    g = float(g) if gshape == () else g
    expected = np.zeros(shape) + np.asarray(g)
    lead = np.ndim(g) - len(shape)
    if lead > 0:
        expected = np.sum(g, axis=tuple(range(lead)))
        for axis, size in enumerate(shape):
            if size == 1:
                expected = np.sum(expected, axis=axis, keepdims=True)
    elif lead == 0 and shape:
        expected = np.asarray(g)
        for axis, size in enumerate(shape):
            if size == 1 and expected.shape[axis] != 1:
                expected = np.sum(expected, axis=axis, keepdims=True)
    elif not shape:
        expected = np.sum(g)
    got = ns["unbroadcast"](g, shape)
    np.testing.assert_allclose(got, expected)
    assert np.shape(got) == tuple(shape)


SCATTERS = [
    ("np.add.at(b, idx, g)", (5,), (6,)),
    ("np.add.at(b, idx, g)", (5, 3), (6, 3)),
    ("np.add.at(b, idx2, g)", (5,), (2, 3)),
    ("np.add.at(b, (slice(None), idx), g)", (3, 5), (3, 6)),
    ("np.add.at(b, (idx, 2), g)", (5, 3), (6,)),
    ("np.add.at(b, (idx, idx), g)", (5, 5), (6,)),
    ("np.add.at(b, (1, slice(None), idx), g)", (2, 3, 5), (6, 3)),
    ("np.add.at(b, [0, 0, 2], g)", (5,), (3,)),
]


@pytest.mark.parametrize("stmt,bshape,gshape", SCATTERS, ids=[f"{s[0]}{s[1]}" for s in SCATTERS])
def test_scatter_add_accumulates_repeated_indices(stmt, bshape, gshape):
    rng = np.random.default_rng(2)
    idx = np.array([0, 2, 0, 4, 2, 0])
    idx2 = idx.reshape(2, 3)
    g = rng.standard_normal(gshape)
    src = ("import numpy as np\n\n\ndef f(b, idx, idx2, g):\n    b = b.copy()\n"
           f"    {stmt}\n    return b\n")
    got, text = _run_lowered(src, "f", np.ones(bshape), idx, idx2, g)
    expected = np.ones(bshape)
    exec(stmt, {"np": np, "b": expected, "idx": idx, "idx2": idx2, "g": g})
    assert "np.add.at" not in text.split("def f(")[1]
    np.testing.assert_allclose(got, expected)


EINSUMS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,kj->ik", [(2, 3), (4, 3)]),
           ("ij,jk->ki", [(2, 3), (3, 4)]), ("i,i->", [(3,), (3,)]),
           ("i,j->ij", [(2,), (3,)]), ("i,j->ji", [(2,), (3,)]), ("ij->j", [(2, 3)]),
           ("ij->ji", [(2, 3)]), ("ij,j->i", [(2, 3), (3,)]), ("ii->i", [(3, 3)]),
           ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("ij,jk", [(2, 3), (3, 2)]),
           ("i,ij,j->", [(2,), (2, 3), (3,)])]


@pytest.mark.parametrize("spec,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_lowering_matches_numpy(spec, shapes):
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(s) for s in shapes]
    params = ", ".join(f"a{k}" for k in range(len(ops)))
    src = f"import numpy as np\n\n\ndef f({params}):\n    return np.einsum({spec!r}, {params})\n"
    got, text = _run_lowered(src, "f", *ops)
    assert "np.einsum" not in text.split("def f(")[1]
    np.testing.assert_allclose(got, np.einsum(spec, *ops), rtol=1e-12)


def test_negative_integer_powers_become_float_powers():
    got, text = _run_lowered(_module("x ** -2"), "f", 2)
    assert "x ** (-2.0)" in text and got == 0.25


def test_lowering_keeps_comments_and_is_deterministic():
    src = ('"""Doc."""\nimport numpy as np\n\n\ndef f(x):\n    y = x\n\n    # y = np.max(x, 1)\n'
           "    if y[0] > 0:\n        # a branch\n        z = np.max(y, axis=1)\n\n    else:\n"
           "        z = y[0]\n    return z\n")
    first = dialect.render(dialect.lower_source(src, entries=["f"]))
    second = dialect.render(dialect.lower_source(src, entries=["f"]))
    assert first == second
    assert "    # y = np.max(x, 1)\n" in first and "        # a branch\n" in first
    assert "max_axis(y, 1)" in first
    compile(first, "<rendered>", "exec")


def test_module_data_becomes_arguments():
    src = ("import numpy as np\nfrom somewhere import table\n\n\ndef helper(x):\n"
           "    return x * table\n\n\ndef f(x):\n    return np.sum(helper(x))\n")
    lowered = dialect.lower_source(src, entries=["f"])
    text = dialect.render(lowered)
    assert "def helper(x, table):" in text and "helper(x, table)" in text
    assert "def f(x, table):" in text and "def f_entry(x):" in text
    assert lowered.data_args == {"f": ["table"]}


# ---------------------------------------------------------------- compiled: shared fixtures
inputs = np.array([[0.52, 1.12, 0.77], [0.88, -1.08, 0.15], [0.52, 0.06, -1.3],
                   [0.74, -2.49, 1.39]])


def sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1)


def training_loss(weights, targets):
    preds = sigmoid(np.dot(inputs, weights))
    label_probabilities = preds * targets + (1 - preds) * (1 - targets)
    return -np.sum(np.log(label_probabilities))


def mlp(params, x, scale):
    h = np.tanh(np.dot(x, params["W"]) + params["b"])
    return np.sum(np.max(h, axis=1, keepdims=True) * h) * scale


def branchy(x, normal=True):
    if normal:
        return np.sum(x * x)
    return np.sum(np.abs(x))


@pytest.fixture(scope="module")
def compiled(quick_llvm):
    """The compiled functions the behaviour tests share (compiled once, here)."""
    rng = np.random.default_rng(4)
    params = {"W": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    x = rng.standard_normal((5, 3))
    w = np.array([0.1, -0.2, 0.3])
    targets = np.array([True, True, False, True])
    out = {"params": params, "x": x, "w": w, "targets": targets}
    out["grad_lr"] = jit(ad.grad(training_loss))
    out["grad_lr_value"] = out["grad_lr"](w, targets)
    out["vg_mlp"] = jit(ad.value_and_grad(mlp, argnums=(0, 1)))
    out["vg_mlp_value"] = out["vg_mlp"](params, x, 1.5)
    out["primal_mlp"] = jit(mlp)
    out["primal_mlp_value"] = out["primal_mlp"](params, x, 1.5)
    out["branchy"] = jit(ad.grad(branchy), static_argnums=1)
    out["branchy_values"] = (out["branchy"](w, True), out["branchy"](w, False))
    return out


@pytest.mark.numba
def test_jit_grad_matches_plain_python_gradient(compiled):
    w, targets = compiled["w"], compiled["targets"]
    np.testing.assert_allclose(compiled["grad_lr_value"], ad.grad(training_loss)(w, targets))
    ad.check_grads(training_loss, (w, targets), modes=("rev",))  # the reference is right
    text = compiled["grad_lr"].source
    decorator = "@" + NumbaOptions().decorator()  # (fastmath={'contract'} unless turned off)
    assert text.count(decorator[:-1]) >= 3
    # helpers only compiled code calls go without the wrappers Python would need
    assert text.count("no_cpython_wrapper=True, no_cfunc_wrapper=True)") >= 2
    assert decorator + "\ndef grad_training_loss(" in text
    assert "def grad_training_loss(weights, targets, inputs):" in text  # data as argument
    for part in versions().values():
        assert part in text


@pytest.mark.numba
def test_jit_value_and_grad_with_pytree_matches_plain(compiled):
    params, x = compiled["params"], compiled["x"]
    value, (g_params, g_x) = compiled["vg_mlp_value"]
    ref_value, (ref_params, ref_x) = ad.value_and_grad(mlp, argnums=(0, 1))(params, x, 1.5)
    assert value == pytest.approx(ref_value, rel=1e-12)
    assert set(g_params) == {"W", "b"}
    for k in params:
        np.testing.assert_allclose(g_params[k], ref_params[k], rtol=1e-10)
    np.testing.assert_allclose(g_x, ref_x, rtol=1e-10)
    assert "keep_axis(max_axis(" in compiled["vg_mlp"].source


@pytest.mark.numba
def test_jit_primal_is_written_from_the_core_form(compiled):
    params, x = compiled["params"], compiled["x"]
    assert compiled["primal_mlp_value"] == pytest.approx(mlp(params, x, 1.5), rel=1e-12)
    text = compiled["primal_mlp"].source
    assert "def mlp(params_W, params_b, x, scale):" in text
    assert '# h = np.tanh(np.dot(x, params["W"]) + params["b"])' in text


@pytest.mark.numba
def test_static_argument_picks_the_branch_and_keys_the_cache(compiled):
    w = compiled["w"]
    g = compiled["branchy"]
    on, off = compiled["branchy_values"]
    np.testing.assert_allclose(on, 2 * w)
    np.testing.assert_allclose(off, np.sign(w))
    assert len(g._modules) == 2  # one module per static value
    sources = [generated.source for generated, _ in g._modules.values()]
    assert all("if " not in s.split("def grad_branchy")[1] for s in sources)
    g(w * 2.0, True)
    assert len(g._modules) == 2  # same value again: no new module
    assert "Static arguments: normal=True" in sources[0] + sources[1]


@pytest.mark.numba
def test_static_argnames_and_bad_static_arguments(compiled):
    w = compiled["w"]
    by_name = jit(ad.grad(branchy), static_argnames="normal")
    np.testing.assert_allclose(by_name(w, False), compiled["branchy_values"][1])
    with pytest.raises(ValueError, match="hashable"):
        jit(ad.grad(branchy), static_argnums=1)(w, [True])
    with pytest.raises(ArgnumsError):
        jit(ad.grad(branchy), static_argnums=5)(w, True)


@pytest.mark.numba
def test_inputs_are_normalised_so_one_signature_compiles_once(compiled):
    g = compiled["grad_lr"]
    targets = compiled["targets"]
    wide = np.array([[0.1, 9.0], [-0.2, 9.0], [0.3, 9.0]])
    readonly = compiled["w"].copy()
    readonly.flags.writeable = False
    for w in (wide[:, 0], np.asfortranarray(compiled["w"]), readonly, compiled["w"]):
        np.testing.assert_allclose(g(w, targets), compiled["grad_lr_value"])
    (_, module), = g._modules.values()
    assert len(module.module.grad_training_loss.signatures) == 1


@pytest.mark.numba
def test_module_data_is_passed_not_frozen(quick_llvm):
    """Two closures with the same source but different data share one compiled module and
    still see their own data (Numba would freeze a global array into the compiled code)."""
    def make(a):
        def f(x):
            return np.sum(a * x * x)
        return f
    x = np.array([1.0, 2.0, 3.0])
    g1, g2 = jit(ad.grad(make(np.ones(3)))), jit(ad.grad(make(np.full(3, 3.0))))
    np.testing.assert_allclose(g1(x), 2 * x)
    np.testing.assert_allclose(g2(x), 6 * x)
    np.testing.assert_allclose(g1(x), 2 * x)
    assert g1.source == g2.source


@pytest.mark.numba
def test_grad_of_jit_differentiates_the_plain_source(compiled):
    w, targets = compiled["w"], compiled["targets"]
    np.testing.assert_allclose(ad.grad(jit(training_loss))(w, targets),
                               compiled["grad_lr_value"])


def _uncompilable(x):
    y = x * 2.0
    z = np.tile(y, (2, 2, 2))  # (one or two counts are lowered; three stay)
    return np.sum(z)


@pytest.mark.numba
def test_compile_error_names_the_user_line_and_numba_reason(quick_llvm):
    with pytest.raises(CompileError) as info:
        jit(_uncompilable)(np.ones((2, 2)))
    err = info.value
    assert err.filename == __file__
    assert err.lineno == _uncompilable.__code__.co_firstlineno + 2
    assert "np.tile(y, (2, 2, 2))" in err.code
    assert "tile" in err.message and "Numba cannot compile" in err.message
    # Numba's reason without the generated lines it quotes; the hint names a page that exists
    assert "def " not in err.message and "<source elided>" not in err.message
    assert "docs/numba.md" in err.hint
    with pytest.raises(CompileError) as info:
        jit(ad.grad(_uncompilable))(np.ones((2, 2)))
    assert info.value.lineno == _uncompilable.__code__.co_firstlineno + 2


def _tiled_vector(x):
    return np.sum(np.tile(x, 2)[1::3] * x[0])


def _tiled_rows(a):
    return np.sum(np.tile(a, 3) ** 2 * np.arange(a.shape[1] * 3))


def _tiled_number(x):
    return np.sum(np.tile(x[0] * 2.0, 4) * x[1])


def _tiled_down(x):
    return np.sum(np.sin(np.tile(x, (3, 1)) * np.arange(3.0)[:, None]))


def _tiled_both_ways(x):
    m = np.tile(x[:, None], (1, 2)) + np.tile(x[1:], (3, 1)) * np.tile(x[0], (1, 1))
    return np.sum(m * m)


@pytest.mark.numba
@pytest.mark.parametrize("f,arg", [
    (_tiled_down, np.array([1.0, 2.0, 3.0])),
    (_tiled_both_ways, np.array([0.1, 0.2, 0.3])),
], ids=["rows", "both"])
def test_tile_with_two_counts_compiles(f, arg, quick_llvm):
    # (Numba refused np.tile(x, (3, 1)), the way to stack copies of a row)
    assert jit(f)(arg) == pytest.approx(f(arg), rel=1e-12)
    np.testing.assert_allclose(jit(ad.grad(f))(arg), numeric_jacobian(f, arg), rtol=1e-6,
                               atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("f,arg", [
    (_tiled_vector, np.array([1.0, 2.0, 3.0])),
    (_tiled_rows, np.arange(6.0).reshape(2, 3) / 5.0),
    (_tiled_number, np.array([0.5, -1.5])),
], ids=["vector", "rows", "number"])
def test_tile_with_one_count_compiles(f, arg, quick_llvm):
    # Numba has no np.tile: the dialect writes tile_count (docs/numba.md)
    g = jit(ad.grad(f))(arg)
    np.testing.assert_allclose(g, numeric_jacobian(f, arg), rtol=1e-6, atol=1e-8)


def test_targets():
    with pytest.raises(ValueError, match="unknown jit target"):
        jit(branchy, target="tpu")
    # target='cuda' (tests/test_cuda.py): here one thread, in the simulator conftest enables
    assert jit(branchy, target="cuda")(np.array([1.0, -2.0])) == 5.0
    g = jit(ad.grad(training_loss), target="python")
    w = np.array([0.1, -0.2, 0.3])
    targets = np.array([True, True, False, True])
    np.testing.assert_allclose(g(w, targets), ad.grad(training_loss)(w, targets))
    assert "numba" not in g.source and "def grad_training_loss_entry" in g.source


def test_versions_and_options_are_part_of_the_module_text(monkeypatch):
    import codegen.numba_cpu as numba_cpu
    src = "import numpy as np\n\n\ndef f(x):\n    return x + 1.0\n"
    first = numba_cpu.compile_module(src, "version_probe", ["f"])
    monkeypatch.setattr(numba_cpu, "versions", lambda: {"numba": "0.0.0-other"})
    second = numba_cpu.compile_module(src, "version_probe", ["f"])
    third = numba_cpu.compile_module(src, "version_probe", ["f"],
                                     options=NumbaOptions(parallel=True))
    files = {first.module.__file__, second.module.__file__, third.module.__file__}
    assert len(files) == 3  # nothing was called, so nothing compiled


# ---------------------------------------------------------------- compiled: the op table
NUMBA_GAPS = {}  # rules whose generated code Numba cannot compile yet: none at the moment
# Scalar inputs take other code paths (math on floats): checked for the ops most likely to differ.
SCALAR_UNARY = {"clip", "where-self", "abs-builtin", "np.abs", "absolute", "fabs", "sign-times",
                "floor-plus", "pow-const-2", "pow-const-neg", "rpow-const", "square",
                "reciprocal", "negative", "neg-operator", "tanh", "exp", "log"}
GROUP = 32


def _op_cases():
    cases = []
    for name, f, dom in OPS.UNARY:
        for shape in [(2, 3), ()] if name in SCALAR_UNARY else [(2, 3)]:
            cases.append((f"{name}[{OPS._shape_id(shape)}]", f, [shape], [dom]))
    for name, f, da, db in OPS.BINARY:
        for shapes in [((2, 3), (2, 1)), ((), (2, 3))]:
            sid = "-".join(OPS._shape_id(s) for s in shapes)
            cases.append((f"{name}[{sid}]", f, list(shapes), [da, db]))
    for name, f, shapes, dom in OPS.STRUCTURAL:
        cases.append((name, f, list(shapes), [dom] * len(shapes)))
    return cases


OP_CASES = _op_cases()


def _group_source(entries, rng):
    """A function summing <op_k(args_k), c_k> over the ops, its namespace and arguments."""
    namespace = dict(vars(OPS), __name__="op_table_group")  # its arrays are not importable
    params, lines, args = [], [], []
    for k, (_, f, shapes, domains) in enumerate(entries):
        values = [OPS.draw(d, s, rng) for d, s in zip(domains, shapes)]
        names = [f"x{k}_{i}" for i in range(len(values))]
        out = f(*values)
        namespace[f"op{k}"] = f
        namespace[f"c{k}"] = rng.standard_normal(np.shape(out)) if np.ndim(out) else 1.25
        params += names
        args += values
        lines.append(f"    t{k} = np.sum(op{k}({', '.join(names)}) * c{k})")
    lines.append("    return " + " + ".join(f"t{k}" for k in range(len(entries))))
    return f"def group({', '.join(params)}):\n" + "\n".join(lines) + "\n", namespace, args


def _compile_group(entries, rng, tag):
    src, namespace, args = _group_source(entries, rng)
    filename = f"<op table group {tag}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), namespace)
    fn = namespace["group"]
    argnums = tuple(range(len(args)))
    reference = ad.grad(fn, argnums=argnums)(*args)
    try:
        got = jit(ad.grad(fn, argnums=argnums))(*args)
    except CompileError as exc:
        return None, reference, exc
    return got, reference, None


def _distinct_code(cases, rng):
    """{case name: name of the case whose generated gradient code it shares} (the plain
    generated modules, compared without comments and docstrings): identical code compiles
    identically, so each distinct text is compiled once."""
    first, same_as = {}, {}
    for case in cases:
        src, namespace, args = _group_source([case], rng)
        filename = f"<op {case[0]}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), namespace)
        g = ad.grad(namespace["group"], argnums=tuple(range(len(args))))
        g(*args)
        body = g.source.split('"""', 2)[2]
        body = "\n".join(line for line in body.split("\n") if not line.strip().startswith("#"))
        body = re.sub(r'""".*?"""', "", body, flags=re.S)
        same_as[case[0]] = first.setdefault(body, case[0])
    return same_as


@pytest.fixture(scope="module")
def op_table(quick_llvm):
    """{case name: (compiled gradients, plain gradients) or the CompileError}, compiled in
    groups of distinct generated code; a group that fails is compiled op by op to find the
    culprit. Cases whose code duplicates another's map to that case's result."""
    rng = np.random.default_rng(5)
    cases = [c for c in OP_CASES if c[0] not in NUMBA_GAPS]
    same_as = _distinct_code(cases, rng)
    distinct = [c for c in cases if same_as[c[0]] == c[0]]
    results = {}
    for start in range(0, len(distinct), GROUP):
        chunk = distinct[start:start + GROUP]
        got, reference, error = _compile_group(chunk, rng, start)
        singles = [[c] for c in chunk] if error is not None else [chunk]
        for part in singles:
            if error is not None:
                got, reference, err = _compile_group(part, rng, part[0][0])
            else:
                err = None
            offset = 0
            for name, _, shapes, _ in part:
                n = len(shapes)
                if err is not None:
                    results[name] = err
                else:
                    results[name] = (got[offset:offset + n], reference[offset:offset + n])
                offset += n
    return {name: results[same_as[name]] for name in same_as}


@pytest.mark.numba
@pytest.mark.parametrize("name", [c[0] for c in OP_CASES if c[0] not in NUMBA_GAPS])
def test_every_rule_compiles_under_njit(op_table, name):
    result = op_table[name]
    if isinstance(result, Exception):
        pytest.fail(f"{name}: {result}")
    got, reference = result
    for g, r in zip(got, reference):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)


@pytest.mark.numba
def test_batched_products_are_lowered_again_when_numba_refuses_them(op_table):
    """matmul of rank-3 arrays: Numba's @ refuses it, so the module is lowered again with
    matmul_nd / dot_nd (op table case 'matmul-batched'), and the compiled gradient agrees."""
    got, reference = op_table["matmul-batched"]
    for g, r in zip(got, reference):
        np.testing.assert_allclose(g, r, rtol=1e-10)


@pytest.mark.numba
def test_jit_of_vmap_and_hessian(quick_llvm):
    def f(w, x):
        return np.sum(np.tanh(np.dot(x, w)) ** 2)
    rng = np.random.default_rng(7)
    w, xs = rng.standard_normal(3), rng.standard_normal((4, 5, 3))
    per_example = ad.vmap(ad.grad(f), in_axes=(None, 0))
    compiled = jit(per_example)
    np.testing.assert_allclose(compiled(w, xs), per_example(w, xs), rtol=1e-10)
    assert "matmul_nd" in compiled.source or "dot_nd" in compiled.source
    np.testing.assert_allclose(jit(ad.hessian(f))(w, xs[0]), ad.hessian(f)(w, xs[0]),
                               rtol=1e-10)


@pytest.mark.numba
def test_repeated_jacobian_calls_take_the_fast_path(quick_llvm):
    """jit(hessian/jacfwd/jacrev) calls after the first reuse a plan (the module's layout for
    array and scalar arguments): new values, argnums naming two arguments, float32 inputs
    (float32 out, as JAX) and a new shape (a module of its own) all give what the plain
    transformations give; a transformation no plan fits is marked once, not worked out again
    at every call."""
    from autodiff_ast.jit import _NO_PLAN

    def f(w, x):
        return np.sum(np.tanh(np.dot(x, w)) ** 2) + np.sum(w ** 3) * x[0, 0]

    rng = np.random.default_rng(8)
    w, x = rng.standard_normal(3), rng.standard_normal((4, 3))
    cases = [(ad.hessian(f), jit(ad.hessian(f))),
             (ad.jacfwd(ad.grad(f), argnums=(0, 1)), jit(ad.jacfwd(ad.grad(f), argnums=(0, 1)))),
             (ad.jacrev(ad.grad(f)), jit(ad.jacrev(ad.grad(f))))]
    for plain, compiled in cases:
        for args in [(w, x), (w * 2.0, x - 1.0), (w.astype(np.float32), x.astype(np.float32)),
                     (rng.standard_normal(3), rng.standard_normal((6, 3)))]:
            for _ in range(2):
                got, want = compiled(*args), plain(*args)
                for g, e in zip(np.atleast_1d(got) if not isinstance(got, tuple) else got,
                                np.atleast_1d(want) if not isinstance(want, tuple) else want):
                    assert np.asarray(g).dtype == np.asarray(e).dtype
                    np.testing.assert_allclose(g, e, rtol=1e-5 if g.dtype == np.float32
                                               else 1e-10, atol=1e-6)
        assert compiled.jit_plans and _NO_PLAN not in compiled.jit_plans.values()
    # One argument and one output: the plan hands the compiled matrix straight back (float32
    # arguments run widened, and are narrowed after the plan); argnums=(0, 1) (a tuple of
    # blocks) assembles it.
    kinds = [sorted({p.__name__ for p in compiled.jit_plans.values()}) for _, compiled in cases]
    assert kinds[0] == ["matrix_plan"]
    assert kinds[1] == ["jacobian_plan"]
    unplanned = jit(ad.jvp_transform(f))
    for _ in range(3):  # (primals in a list: the jvp plan takes tuples of arrays)
        unplanned([w, x], [np.ones(3), np.zeros((4, 3))])
    assert list(unplanned.jit_plans.values()) == [_NO_PLAN]


@pytest.mark.numba
def test_repeated_jvp_calls_take_the_fast_path(quick_llvm):
    """jit(jvp_transform(grad(f))) with tuples of float64 arrays (a Hessian-vector product):
    calls after the first go straight to the entry; new values and shapes agree with the
    plain transformation, and a tangent shaped unlike its primal is still the clear error."""
    from autodiff_ast.jacobians import jvp_transform

    def f(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    rng = np.random.default_rng(11)
    compiled, plain = jit(jvp_transform(ad.grad(f))), jvp_transform(ad.grad(f))
    for n in (6, 6, 6, 9):
        x, v = rng.standard_normal(n), rng.standard_normal(n)
        for got, want in zip(compiled((x,), (v,)), plain((x,), (v,))):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    plans = list(compiled.jit_plans.values())
    assert plans and all(p.__name__ == "jvp_plan" for p in plans)
    with pytest.raises(ad.ShapeMismatchError, match="tangent of shape"):
        compiled((rng.standard_normal(6),), (rng.standard_normal(5),))


def test_repeated_calls_with_a_dict_of_arrays_take_the_fast_path(quick_llvm):
    """A dict of arrays and numbers (an MLP's parameters) is keyed and flattened without a
    pytree walk (one walk cost the MLP 784 gradient at batch 32 about a third of its time):
    later calls give what the plain gradient gives, with the dict's keys, dtypes and
    scalar-ness; a float32 leaf in the dict still answers in float32, and a dict whose values
    are not all leaves (a nested list) takes the general path and agrees too."""
    def f(p, x):
        h = np.tanh(np.dot(x, p["W"]) + p["b"])
        return np.sum(h * h) * p["scale"]

    def g(p, x):
        return f(p, x) + np.sum(np.dot(x, p["nested"][0]))

    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 3))
    params = {"b": rng.standard_normal(2), "W": rng.standard_normal((3, 2)), "scale": 0.7}
    compiled, plain = jit(ad.grad(f)), ad.grad(f)
    for p in (params, {k: v * 2.0 for k, v in params.items()}, params):
        got, want = compiled(p, x), plain(p, x)
        assert list(got) == list(want) == ["W", "b", "scale"]
        for k in want:
            assert type(got[k]) is type(want[k]) and np.asarray(got[k]).dtype == np.float64
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12)
    assert [p.__name__ for p in compiled.jit_plans.values()] == ["reverse_plan"]
    key = next(iter(compiled.jit_plans))
    assert key[0][:2] == ("dict", ("W", "b", "scale"))
    single = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v)
              for k, v in params.items()}
    got = compiled(single, x.astype(np.float32))
    assert got["W"].dtype == np.float32
    np.testing.assert_allclose(got["W"], plain(params, x)["W"], rtol=1e-5)
    nested = dict(params, nested=[rng.standard_normal(3)])
    compiled, plain = jit(ad.grad(g)), ad.grad(g)
    for _ in range(2):
        got, want = compiled(nested, x), plain(nested, x)
        np.testing.assert_allclose(got["nested"][0], want["nested"][0], rtol=1e-12)
        np.testing.assert_allclose(got["W"], want["W"], rtol=1e-12)


@pytest.mark.numba
def test_float32_arguments_run_in_float64_and_answer_in_float32(quick_llvm):
    """Compiled code mixes float64 constants and seeds with float32 arguments, and Numba
    refuses np.dot of float32 and float64: float32 arguments run as float64; a call whose
    floats are all float32 returns float32 (JAX's dtype rule); one mixing them gives each
    gradient its argument's dtype, as the plain transformations do."""
    def f(w, x):
        return np.sum(np.tanh(np.dot(x, w)) ** 2) + 0.5 * np.sum(w * w)

    rng = np.random.default_rng(9)
    w, xs = rng.standard_normal(3), rng.standard_normal((5, 4, 3))
    w32, xs32 = w.astype(np.float32), xs.astype(np.float32)
    pairs = [(ad.grad(f), (w32, xs32[0])), (ad.hessian(f), (w32, xs32[0])),
             (f, (w32, xs32[0])), (ad.vmap(ad.grad(f), in_axes=(None, 0)), (w32, xs32)),
             (ad.value_and_grad(f, argnums=(0, 1)), (w32, xs32[0]))]
    for fn, args in pairs:
        got, want = jit(fn)(*args), fn(*args)
        got_leaves, want_leaves = ad.tree_leaves(got), ad.tree_leaves(want)
        assert len(got_leaves) == len(want_leaves)
        for g, e in zip(got_leaves, want_leaves):
            assert np.asarray(g).dtype == np.float32, fn
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
    for fn in (ad.grad(f, argnums=(0, 1)), ad.value_and_grad(f, argnums=(0, 1))):
        got, want = jit(fn)(w, xs32[0]), fn(w, xs32[0])  # float64 and float32
        for g, e in zip(ad.tree_leaves(got), ad.tree_leaves(want)):
            assert np.asarray(g).dtype == np.asarray(e).dtype, fn  # each argument's dtype
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6)
    params = {"w": w, "x": xs32[0]}
    tree = jit(ad.grad(lambda p: f(p["w"], p["x"])))(params)
    assert (tree["w"].dtype, tree["x"].dtype) == (np.float64, np.float32)


# ---------------------------------------------------------------- new processes, one cache
_CHILD = textwrap.dedent("""\
    import json
    import numpy as np
    import autodiff_ast as ad
    from autodiff_ast.jit import jit

    def loss(w, x):
        return np.sum(np.tanh(np.dot(x, w)) ** 2)

    g = jit(ad.grad(loss))
    value = g(np.array([0.5, -0.25]), np.array([[1.0, 2.0], [3.0, -1.0]]))
    (_, module), = g._modules.values()
    stats = module.module.grad_loss.stats
    print(json.dumps({"value": [float(v) for v in value], "rebuilt": module.rebuilt,
                      "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
""")


def _child(tmp_path):
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "modules"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.numba
def test_new_process_reuses_the_cache_and_rebuilds_a_corrupt_entry(tmp_path):
    expected = list(ad.grad(lambda w, x: np.sum(np.tanh(np.dot(x, w)) ** 2))(
        np.array([0.5, -0.25]), np.array([[1.0, 2.0], [3.0, -1.0]])))
    cold = _child(tmp_path)
    np.testing.assert_allclose(cold["value"], expected)
    assert cold["misses"] >= 1 and cold["hits"] == 0  # compiled, nothing from disk
    warm = _child(tmp_path)
    np.testing.assert_allclose(warm["value"], expected)
    assert warm["hits"] >= 1 and warm["misses"] == 0 and warm["rebuilt"] == []
    # Corrupt every data file of the cache: the next process must notice and compile again.
    data_files = list((tmp_path / "numba").rglob("*.nbc"))
    assert data_files
    for p in data_files:
        p.write_bytes(b"not a pickle")
    healed = _child(tmp_path)
    np.testing.assert_allclose(healed["value"], expected)
    assert "grad_loss" in healed["rebuilt"] and healed["misses"] >= 1
    assert all(p.read_bytes() != b"not a pickle" for p in data_files if p.exists())


@pytest.mark.numba
def test_jit_matmul_broadcasts_batch_axes(quick_llvm):
    """(2, 1, 2, 3) @ (2, 3, 4) is (2, 2, 2, 4): the compiled matmul used to pair the stacks
    one to one and return (2, 1, 2, 4), a silently wrong result."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((2, 1, 2, 3)), rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(jit(lambda a, b: a @ b)(a, b), a @ b, rtol=1e-12)


def _shifted_add_through_a_view(x):
    a = x * 1.0
    v = a[:-1]
    a[1:] += v  # NumPy buffers the overlap: a[1:] gets the old a[:-1]
    return np.sum(a * a)


def _shifted_add_in_place(x):
    a = x * 1.0
    a[1:] += a[:-1]
    return np.sum(a * a)


@pytest.mark.parametrize("fn", [_shifted_add_through_a_view, _shifted_add_in_place])
def test_overlapping_in_place_add_matches_numpy_under_jit(fn):
    """An in-place add whose right-hand side overlaps its target (directly or through a view
    name) reads the old values, as NumPy does, plain and compiled, value and gradient."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert jit(fn)(x) == pytest.approx(fn(x)) == 84.0
    expected = np.array([8.0, 16.0, 24.0, 14.0])  # a = [1, 3, 5, 7]; d/dx of sum(a * a)
    np.testing.assert_allclose(ad.grad(fn)(x), expected, rtol=1e-14)
    np.testing.assert_allclose(jit(ad.grad(fn))(x), expected, rtol=1e-14)


def test_an_internal_error_of_numbas_compiler_is_a_compile_failure():
    """An exception Numba's compiler raises without wrapping it (an assertion in its
    lowering) is reported like any compile failure; one raised by compiled code is not."""
    from codegen.numba_cpu import _failure, _inside_numba_compiler, _InternalError
    namespace = {}
    exec(compile("def lower():\n    raise AssertionError()\n",
                 "/site-packages/numba/core/lowering.py", "exec"), namespace)
    try:
        namespace["lower"]()
    except AssertionError as exc:
        inside = exc
    assert _inside_numba_compiler(inside)
    try:
        [][1]
    except IndexError as exc:
        assert not _inside_numba_compiler(exc)
    failure = _failure(_InternalError(inside), "/tmp/jit_f.py", "def f(x):\n    return x\n")
    assert "Numba's compiler failed inside (AssertionError)" in failure.reason, failure.reason
    assert failure.lineno is None


def difference_of_squares(a, b):
    return a * a - b * b


@pytest.mark.numba
def test_multiply_adds_are_on_by_default_and_off_on_request(monkeypatch):
    """docs/numba.md: contracted, `a * a - b * b` at a == b is the rounding error of b * b
    (not 0.0); with AUTODIFF_AST_FP_CONTRACT=0 it cancels exactly, as in NumPy."""
    values = [0.1, 1.0 / 3.0, 2.7182818284590451, -5.4]
    contracted = jit(difference_of_squares)
    assert "fastmath={'contract'}" in (contracted(1.0, 1.0), contracted.source)[1]
    errors = [contracted(v, v) for v in values]
    import llvmlite.binding
    if llvmlite.binding.get_host_cpu_features().get("fma"):  # (a CPU without FMA rounds twice)
        assert any(e != 0.0 for e in errors)
    for v, e in zip(values, errors):
        assert abs(e) <= abs(v * v) * 2.0 ** -52  # one rounding of b * b at most
    monkeypatch.setenv("AUTODIFF_AST_FP_CONTRACT", "0")
    exact = jit(difference_of_squares)
    assert [exact(v, v) for v in values] == [0.0] * len(values)
    assert "contract" not in exact.source


def _python_dtypes(x):
    y = x.astype(float) * np.asarray(x, dtype=float)
    return np.sum(y) + np.sum(np.zeros(x.shape[0], dtype=float))


def test_python_number_classes_as_dtypes_compile():
    """`x.astype(float)` and `np.asarray(x, dtype=float)`: Numba takes neither (it takes
    np.float64); the dialect writes NumPy's classes (a survey of everyday idioms found it)."""
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(jit(ad.grad(_python_dtypes))(x), 2 * x)
    np.testing.assert_allclose(jit(_python_dtypes)(x), np.sum(x * x))


# ---------------------------------------------------------------- result types
def _loss_with_aux(x):
    """A loss with an aux dict of numbers (np.float64 in NumPy)."""
    s = np.sum(x * x)
    return s, {"norm": np.sqrt(s), "first": x[0], "pair": [x[1] * 2.0, s]}


def _same_types(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same_types(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same_types(x, y)
    else:
        assert type(a) is type(b), (a, b)
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_numbers_come_back_as_numpy_floats_as_without_jit(quick_llvm):
    """Numba returns a float64 as a Python float; jit gives it back as np.float64, as the
    NumPy code without jit (and the user's own function) does: `.dtype`, `.item()` work."""
    x = np.array([1.0, 2.0, 3.0])
    for transform in (lambda f: ad.value_and_grad(f, has_aux=True),
                      lambda f: ad.grad(f, has_aux=True), lambda f: f):
        compiled = ad.jit(transform(_loss_with_aux))
        for _ in range(2):  # (the second call takes the plan the first one made)
            _same_types(compiled(x), transform(_loss_with_aux)(x))
    value = ad.jit(_loss_with_aux)(x)
    assert value[0].dtype == np.float64 and value[0].item() == 14.0


def _outer_scaled(w):
    return np.outer(w, w) * 2.0 + np.sin(w)[:, None]


def _squashed(m):
    return np.tanh(m) * m[0, 1]


@pytest.mark.numba
@pytest.mark.parametrize("f, shape", [(_outer_scaled, (4,)), (_squashed, (2, 3))],
                         ids=["matrix-of-a-vector", "matrix-of-a-matrix"])
def test_jacfwd_puts_the_tangent_axis_last_without_np_moveaxis(f, shape):
    """jacfwd's last step moves the tangents' axis last (np.moveaxis(rows, 0, -1), reshaped
    for a matrix input). Numba took ~6 s to compile np.moveaxis alone; the dialect writes
    first_axis_last(rows), a copying loop (jit(jacfwd) of the outer product, cold: 15.1 ->
    6.4 s)."""
    x = np.random.default_rng(5).standard_normal(shape)
    compiled = jit(ad.jacfwd(f))
    np.testing.assert_allclose(compiled(x), numeric_jacobian(f, x), rtol=1e-6, atol=1e-8)
    body = compiled.source[compiled.source.index("def jacfwd_"):]
    assert "first_axis_last(out_dot)" in body and "np.moveaxis(" not in body, body


def _squeezed_column(x):
    return np.sum(np.squeeze(x[:, None]) ** 2)


def _squeezed_middle(x):
    y = x[None, :, None]
    return np.sum(np.squeeze(y) * x)


def _squeezed_argument(x):
    return np.sum(np.squeeze(x) ** 2)


@pytest.mark.numba
def test_np_squeeze_without_an_axis_compiles():
    """np.squeeze(x) with no axis: the size-one axes the types know are named (axis=1, or
    (0, 2)), lowered to a reshape; an array with none known is checked (squeeze_none) and
    kept. Numba has no np.squeeze, so each failed before."""
    x = np.array([1.0, 2.0, 3.0])
    for f in (_squeezed_column, _squeezed_middle, _squeezed_argument):
        np.testing.assert_allclose(jit(f)(x), f(x), rtol=1e-12)
        np.testing.assert_allclose(jit(ad.grad(f))(x), ad.grad(f)(x), rtol=1e-12)
        np.testing.assert_allclose(ad.grad(f)(x), numeric_jacobian(f, x), rtol=1e-6)
    column = x[:, None]
    np.testing.assert_allclose(jit(ad.grad(_squeezed_argument))(column), 2.0 * column,
                               rtol=1e-12)


def _vdot_of_matrices(a, b):
    return np.vdot(a, np.sin(b)) * np.vdot(a[0], b[0])


@pytest.mark.numba
def test_np_vdot_of_matrices_compiles():
    """np.vdot flattens its operands; Numba's takes vectors only (it was refused)."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    np.testing.assert_allclose(jit(_vdot_of_matrices)(a, b), _vdot_of_matrices(a, b),
                               rtol=1e-12)
    g = ad.grad(_vdot_of_matrices, argnums=(0, 1))
    for got, want in zip(jit(g)(a, b), g(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(g(a, b)[0], numeric_jacobian(lambda v: _vdot_of_matrices(v, b),
                                                            a), rtol=1e-6)


def _norm_of_three_axes(a):
    return np.linalg.norm(a) * np.linalg.norm(a[0])


def _inner_of_ranks(a, m, v):
    return np.sum(np.inner(m, m * 2.0) * np.inner(v, m)[:, None]) + np.inner(v, a[0, 0])


@pytest.mark.numba
def test_norm_of_three_axes_and_inner_compile():
    """Numba's np.linalg.norm takes vectors and matrices, and it has no np.inner: the
    dialect's norm_any_rank and inner_product (both from the bug hunt)."""
    rng = np.random.default_rng(2)
    a, m, v = rng.standard_normal((2, 3, 2)), rng.standard_normal((4, 2)), \
        rng.standard_normal(2)
    np.testing.assert_allclose(jit(_norm_of_three_axes)(a), _norm_of_three_axes(a),
                               rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(_norm_of_three_axes))(a),
                               numeric_jacobian(_norm_of_three_axes, a), rtol=1e-6)
    np.testing.assert_allclose(jit(_inner_of_ranks)(a, m, v), _inner_of_ranks(a, m, v),
                               rtol=1e-12)
    g = ad.grad(_inner_of_ranks, argnums=(0, 1, 2))
    for got, want in zip(jit(g)(a, m, v), g(a, m, v)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g(a, m, v)[1], numeric_jacobian(
        lambda w: _inner_of_ranks(a, w, v), m), rtol=1e-6)


# ---------------------------------------------------------------- names jit's helpers use
def outer_product(a, b):
    """The user's helper, named like the dialect's np.outer helper (it is no outer product)."""
    return np.sum(a) * b


def _calls_own_outer_product(x, m):
    v = outer_product(x, m)
    return np.sum(v * v) + np.sum(np.outer(x, m))


def prod_axis(a):
    """An entry function named like the dialect's helper for np.prod(x, axis=k)."""
    return np.sum(np.prod(a, axis=1) ** 2)


def _local_named_exp_fast(x):
    exp_fast = np.exp(x)
    s = 0.0
    for i in range(x.shape[0]):
        s = s + exp_fast[i] * x[i]
    return s


def test_user_names_that_jits_helpers_use():
    """jit swapped a user's function named like one of its helpers for the helper (a wrong
    value: 8.92 for 8.64 here) and broke on such an entry or local name; the module's namer
    reserves the helpers' names and the dialect renames a user's local before lowering."""
    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    x, m = np.array([0.3, -0.2, 0.5]), np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(jit(_calls_own_outer_product)(x, m),
                               _calls_own_outer_product(x, m), rtol=1e-14)
    np.testing.assert_allclose(jit(grad(_calls_own_outer_product))(x, m),
                               grad(_calls_own_outer_product)(x, m), rtol=1e-14)
    np.testing.assert_allclose(grad(_calls_own_outer_product)(x, m), [22.8] * 3, rtol=1e-14)
    a = np.array([[1.5, 0.1, -0.7], [0.5, 1.2, 0.3]])
    np.testing.assert_allclose(jit(prod_axis)(a), prod_axis(a), rtol=1e-14)
    np.testing.assert_allclose(jit(grad(prod_axis))(a), grad(prod_axis)(a), rtol=1e-14)
    v = np.array([0.3, -0.2, 0.5, 1.0])
    np.testing.assert_allclose(jit(_local_named_exp_fast)(v), _local_named_exp_fast(v),
                               rtol=1e-14)
    np.testing.assert_allclose(jit(grad(_local_named_exp_fast))(v), np.exp(v) * (1.0 + v),
                               rtol=1e-13)


def _heaviside_in_a_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i] * x[i] * np.heaviside(x[i], 0.5)
    return s


def _zero_dim_times(s):
    return np.array(2.0) * s * s


def test_heaviside_of_an_element_and_a_0d_array_output():
    """np.heaviside(x[i], h) reached Numba as written (it has no np.heaviside): the dialect
    writes it with np.where for an element too. np.array(2.0) (a 0-d array) had an unknown
    rank, so grad refused its product as "not a scalar"."""
    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    x = np.array([0.3, -0.7, 0.0, 1.6])
    np.testing.assert_allclose(jit(_heaviside_in_a_loop)(x), _heaviside_in_a_loop(x),
                               rtol=1e-14)
    np.testing.assert_allclose(jit(grad(_heaviside_in_a_loop))(x), [0.6, 0.0, 0.0, 3.2],
                               rtol=1e-14)
    assert grad(_zero_dim_times)(1.3) == pytest.approx(5.2, rel=1e-14)
    assert jit(grad(_zero_dim_times))(1.3) == pytest.approx(5.2, rel=1e-14)


class _Float32Params(NamedTuple):
    w: np.ndarray
    b: float


def _named_params_loss(p, x):
    return np.sum((x @ p.w + p.b) ** 2)


def test_float32_leaves_of_a_named_tuple_run_as_float64():
    # (only dicts, lists and tuples were widened: a NamedTuple's float32 leaves reached
    # Numba's np.dot beside float64 arrays, a CompileError)
    p = _Float32Params(np.array([1.0, 2.0, 3.0], dtype=np.float32), np.float32(0.5))
    x = np.arange(6.0).reshape(2, 3) / 4
    got = jit(ad.grad(_named_params_loss))(p, x)
    want = ad.grad(_named_params_loss)(p, x)
    assert isinstance(got, _Float32Params)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-6)
    assert float(got.b) == pytest.approx(float(want.b), rel=1e-6)


def _nested_square_roots(a):
    x = a
    for _ in range(3):
        x = np.sqrt(x + a)
    return x


def _fixed_point_of_square_root(a):
    x = a
    previous = a * 0.0
    while abs(x - previous) > 1e-12:
        previous = x
        x = np.sqrt(x + a)
    return x


@pytest.mark.numba
@pytest.mark.parametrize("f", [_nested_square_roots, _fixed_point_of_square_root])
def test_a_zero_d_array_argument_carried_through_a_loop(f):
    # Numba's np.sqrt of a 0-d array is a float: a loop carrying both failed to compile
    # ("Cannot unify array(float64, 0d, C) and float64"); 0-d arrays are passed as numbers.
    a = np.array(0.5)
    step = 1e-6
    expected = (f(0.5 + step) - f(0.5 - step)) / (2 * step)
    assert jit(f)(a) == pytest.approx(f(a), rel=1e-12)
    got = jit(ad.grad(f))(a)
    assert np.shape(got) == () and got == pytest.approx(expected, rel=1e-6)
    assert got == pytest.approx(ad.grad(f)(a), rel=1e-12)
    _, tangent = jit(lambda p, t: ad.jvp(f, (p,), (t,)))(0.5, np.array(1.0))
    assert tangent == pytest.approx(expected, rel=1e-6)
