"""The compiled dialect's helpers compute what the NumPy calls they replace compute.

codegen/dialect.py rewrites NumPy features Numba lacks into helper functions
(codegen.helpers.DIALECT_HELPERS, plus ``keep_all`` and the einsum/scatter helpers written by
dialect.py itself). Two layers:

- property tests (hypothesis, deterministic): each helper's source exec'd as plain Python and
  compared with the NumPy expression it replaces over random shapes, axes, broadcasts and
  dtypes;
- a few compiles (``@pytest.mark.numba``): ``jit(lambda ...: <numpy expression>)`` against plain
  NumPy, to check the lowering passes the helpers the right arguments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autodiff_ast as ad
from autodiff_ast.errors import CompileError
from autodiff_ast.jit import jit
from autodiff_ast.templates import unparse
from codegen import dialect
from codegen.helpers import (
    DIALECT_HELPERS,
    HELPERS,
    OVERLOAD_FORMS,
    dialect_helper_source,
    helper_source,
)

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function",
                                        "ignore:invalid value", "ignore:Mean of empty",
                                        "ignore:divide by zero", "ignore:Degrees of freedom")

QUICK = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def helpers(*names):
    """A namespace holding the named dialect helpers (and those they call), as plain Python."""
    ns = {"np": np}
    for text in dialect_helper_source(set(names) - {"keep_all"}):
        exec(text, ns)
    if "keep_all" in names:
        exec(dialect._KEEP_ALL, ns)
    return ns


def _with_overload_forms(ns):
    """`ns` with the helpers a compiled module takes in their overload forms (their Numba
    implementations registered) where they have one."""
    import numba

    from codegen.helpers import OVERLOAD_FORMS
    ns["numba"] = numba
    for name in [n for n in OVERLOAD_FORMS if n in ns]:
        exec(OVERLOAD_FORMS[name], ns)
    return ns


def same(got, expected, rtol=1e-12):
    """Equal values, shape and dtype kind (float32 stays float32)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)


def shapes(min_dims=1, max_dims=4, min_side=1, max_side=3):
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple)


dtypes = st.sampled_from([np.float64, np.float32])


def array(shape, seed, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@st.composite
def array_and_axis(draw, min_side=1, min_dims=1):
    shape = draw(shapes(min_dims=min_dims, min_side=min_side))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return array(shape, draw(st.integers(0, 99)), draw(dtypes)), axis


def tol(x):
    return 1e-5 if np.asarray(x).dtype == np.float32 else 1e-12


# ---------------------------------------------------------------- reductions along one axis
@QUICK
@given(array_and_axis())
def test_keep_axis_is_keepdims(case):
    x, axis = case
    ns = helpers("keep_axis")
    same(ns["keep_axis"](np.sum(x, axis=axis), axis), np.sum(x, axis=axis, keepdims=True),
         tol(x))


@QUICK
@given(array_and_axis(), st.integers(0, 1))
def test_mean_and_var_along_one_axis(case, ddof):
    x, axis = case
    ns = helpers("var_axis")
    same(ns["mean_axis"](x, axis), np.mean(x, axis=axis), tol(x))
    if x.shape[axis] > ddof:
        same(ns["var_axis"](x, axis, ddof), np.var(x, axis=axis, ddof=ddof), tol(x))


@QUICK
@given(array_and_axis(), st.sampled_from([np.float64, np.float32, np.int32, np.int64]))
def test_max_min_prod_along_one_axis(case, dtype):
    x, axis = case
    x = (x * 3).astype(dtype)
    ns = helpers("max_axis", "min_axis", "prod_axis")
    same(ns["max_axis"](x, axis), np.max(x, axis=axis), tol(x))
    same(ns["min_axis"](x, axis), np.min(x, axis=axis), tol(x))
    same(ns["prod_axis"](x, axis), np.prod(x, axis=axis), tol(x))


@QUICK
@given(array_and_axis(min_side=0))
def test_prod_along_an_empty_axis_is_one(case):
    x, axis = case
    ns = helpers("prod_axis")
    same(ns["prod_axis"](x, axis), np.prod(x, axis=axis))


@QUICK
@given(shapes(min_dims=0, max_dims=6), st.integers(0, 9), dtypes)
def test_keep_all_keeps_every_axis(shape, seed, dtype):
    """Regression: arrays of rank 0 and of rank 5 or more came back with four axes."""
    x = array(shape, seed, dtype)
    ns = helpers("keep_all")
    same(ns["keep_all"](np.sum(x), x), np.sum(x, keepdims=True), tol(x))


def test_keep_all_refuses_rank_seven():
    with pytest.raises(ValueError, match="rank 7"):
        helpers("keep_all")["keep_all"](1.0, np.ones((1,) * 7))


@QUICK
@given(shapes(min_dims=0), st.integers(0, 9), dtypes)
def test_reassociated_sum_is_the_sum(shape, seed, dtype):
    x = array(shape, seed, dtype)
    same(helpers("reassociated_sum")["reassociated_sum"](x), np.sum(x), tol(x))


# ---------------------------------------------------------------- reorderings along one axis
@QUICK
@given(array_and_axis(min_side=0), st.integers(-7, 7))
def test_flip_and_roll_along_one_axis(case, shift):
    x, axis = case
    ns = helpers("flip_axis", "roll_axis")
    same(ns["flip_axis"](x, axis), np.flip(x, axis))
    same(ns["roll_axis"](x, shift, axis), np.roll(x, shift, axis))


@QUICK
@given(array_and_axis(min_side=0), st.booleans())
def test_sort_and_stable_argsort_along_one_axis(case, ties):
    x, axis = case
    if ties:  # repeated values: the argsort must keep tied entries in order
        x = np.round(x)
    ns = helpers("sort_axis", "argsort_axis")
    same(ns["sort_axis"](x, axis), np.sort(x, axis=axis))
    same(ns["argsort_axis"](x, axis), np.argsort(x, axis=axis, kind="stable"))


# ---------------------------------------------------------------- gathers and repeats
@st.composite
def taken(draw):
    """An array, an axis (or None), and indices of rank 0 to 2 valid along it (negative ones
    included)."""
    x, axis = draw(array_and_axis())
    flat = draw(st.booleans())
    length = x.size if flat else x.shape[axis]
    index_shape = draw(shapes(min_dims=0, max_dims=2))
    seed = draw(st.integers(0, 99))
    indices = np.random.default_rng(seed).integers(-length, length, index_shape)
    return x, indices if index_shape else int(indices), None if flat else axis


@st.composite
def repeated(draw):
    """An array, an axis (or None), and one count or a count per entry along it."""
    x, axis = draw(array_and_axis(min_side=0))
    flat = draw(st.booleans())
    length = x.size if flat else x.shape[axis]
    seed = draw(st.integers(0, 99))
    per_entry = draw(st.booleans())
    counts = np.random.default_rng(seed).integers(0, 3, length) if per_entry else \
        draw(st.integers(0, 3))
    return x, counts, None if flat else axis


@QUICK
@given(taken())
def test_take_along_an_axis_is_np_take(case):
    x, indices, axis = case
    if axis is not None:
        same(helpers("take_axis")["take_axis"](x, indices, axis), np.take(x, indices, axis=axis))


@QUICK
@given(repeated())
def test_repeat_along_an_axis_is_np_repeat(case):
    x, counts, axis = case
    if axis is not None:
        same(helpers("repeat_axis")["repeat_axis"](x, counts, axis),
             np.repeat(x, counts, axis=axis))


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 1, 4), (0,), (2, 0)])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_tile_count_is_np_tile(shape, count):
    x = np.arange(float(np.prod(shape))).reshape(shape)
    same(helpers("tile_count")["tile_count"](x, count), np.tile(x, count))


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 1, 4), (0,), (2, 0)])
@pytest.mark.parametrize("counts", [(0, 2), (1, 1), (3, 1), (2, 3)])
def test_tile_rows_columns_is_np_tile(shape, counts):
    x = np.arange(float(np.prod(shape))).reshape(shape)
    same(helpers("tile_rows_columns")["tile_rows_columns"](x, *counts), np.tile(x, counts))


def _adjoint_pair(name, forward, x, arg, axis):
    """<forward(v), g> against <v, helper(x, ..., g)> for random v and g: the helper is the
    adjoint (transpose) of the NumPy gather or repeat."""
    ns = {"np": np}
    for text in helper_source({name}):  # with the helpers it calls
        exec(text, ns)
    rng = np.random.default_rng(3)
    v = rng.standard_normal(x.shape)
    g = rng.standard_normal(np.shape(forward(v, arg, axis=axis)))
    back = ns[name](x, arg, g, axis) if name == "add_taken" else ns[name](x, g, arg, axis)
    assert np.shape(back) == x.shape
    np.testing.assert_allclose(np.sum(v * back), np.sum(forward(v, arg, axis=axis) * g),
                               rtol=1e-10, atol=1e-10)


@QUICK
@given(taken())
def test_add_taken_is_the_adjoint_of_take(case):
    _adjoint_pair("add_taken", np.take, *case)


@QUICK
@given(repeated())
def test_add_repeated_is_the_adjoint_of_repeat(case):
    _adjoint_pair("add_repeated", np.repeat, *case)


# ---------------------------------------------------------------- products
@st.composite
def matmul_operands(draw):
    core = draw(st.lists(st.integers(1, 3), min_size=3, max_size=3))
    n, k, m = core
    batch = draw(shapes(min_dims=0, max_dims=3))
    a_batch = tuple(draw(st.sampled_from([1, s])) for s in batch[draw(st.integers(
        0, len(batch))):])
    b_batch = tuple(draw(st.sampled_from([1, s])) for s in batch[draw(st.integers(
        0, len(batch))):])
    a_shape = draw(st.sampled_from([(k,), a_batch + (n, k)]))
    b_shape = draw(st.sampled_from([(k,), b_batch + (k, m)]))
    dtype = draw(dtypes)
    seed = draw(st.integers(0, 99))
    return array(a_shape, seed, dtype), array(b_shape, seed + 1, dtype)


@QUICK
@given(matmul_operands())
def test_matmul_nd_broadcasts_like_numpy(ab):
    a, b = ab
    same(helpers("matmul_nd")["matmul_nd"](a, b), a @ b, tol(a))


@QUICK
@given(shapes(max_dims=3), shapes(max_dims=3), st.integers(0, 9), dtypes)
def test_dot_nd_is_np_dot(sa, sb, seed, dtype):
    sb = sb[:-2] + (sa[-1],) + sb[-1:] if len(sb) >= 2 else (sa[-1],)
    a, b = array(sa, seed, dtype), array(sb, seed + 1, dtype)
    same(helpers("dot_nd")["dot_nd"](a, b), np.dot(a, b), tol(a))


@pytest.mark.numba
def test_dot_nd_compiled_is_np_dot():
    """Compiled, for each rank pair jit's batched code meets (b's second-to-last axis moved
    first by loops: Numba compiled np.moveaxis there in ~8 s)."""
    import numba
    ns = _with_overload_forms(helpers("dot_nd"))  # (dot_of_any_dtype, as Numba compiles it)
    compiled = numba.njit(ns["dot_nd"])
    rng = np.random.default_rng(4)
    for sa, sb in [((4,), (2, 4, 3)), ((5, 4), (2, 4, 3)), ((2, 5, 4), (4, 3)),
                   ((2, 5, 4), (4,)), ((3, 4), (4, 2)), ((2, 3, 4), (2, 2, 4, 3)),
                   ((3, 4), (0, 4, 2))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        same(compiled(a, b), np.dot(a, b))
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((3, 4, 2))[:, :, ::-1]
    same(compiled(a, b), np.dot(a, b))  # (b not contiguous)


@QUICK
@given(shapes(min_dims=0, max_dims=3, min_side=0), shapes(min_dims=0, max_dims=3, min_side=0),
       dtypes, dtypes)
def test_outer_product_is_np_outer(sa, sb, da, db):
    a, b = array(sa, 1, da), array(sb, 2, db)
    same(helpers("outer_product")["outer_product"](a, b), np.outer(a, b), tol(a))


# ---------------------------------------------------------------- building and accumulating
@QUICK
@given(shapes(min_dims=0, max_dims=3, min_side=0), st.integers(1, 4), dtypes)
def test_stack_list_is_np_stack(shape, count, dtype):
    arrays = [array(shape, k, dtype) for k in range(count)]
    same(helpers("stack_list")["stack_list"](arrays), np.stack(arrays))


@st.composite
def broadcast_to_shape(draw, shape):
    """A shape that broadcasts to `shape` (trailing axes, some of size one)."""
    start = draw(st.integers(0, len(shape)))
    return tuple(draw(st.sampled_from([1, s])) for s in shape[start:])


@QUICK
@given(st.data(), shapes(min_dims=1, max_dims=3), dtypes)
def test_add_into_and_add_at_update_in_place(data, shape, dtype):
    ns = helpers("add_into", "add_at")
    a = array(shape, 3, dtype)
    i = data.draw(st.integers(-shape[0], shape[0] - 1))
    v = array(data.draw(broadcast_to_shape(shape[1:])), 4, dtype)
    expected = a.copy()
    expected[i] += v
    got = a.copy()
    ns["add_at"](got, i, v)
    same(got, expected, tol(a))
    w = array(data.draw(broadcast_to_shape((shape[0] - 1,) + shape[1:])), 5, dtype)
    expected = a.copy()
    expected[1:] += w
    got = a.copy()
    ns["add_into"](got[1:], w)
    same(got, expected, tol(a))


@st.composite
def scatter_case(draw):
    b_shape = draw(shapes(min_dims=1, max_dims=3))
    index_shape = draw(shapes(min_dims=1, max_dims=2, max_side=4))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    index = rng.integers(-b_shape[0], b_shape[0], size=index_shape)  # repeats, negatives
    g_shape = draw(broadcast_to_shape(index_shape + b_shape[1:]))
    return np.zeros(b_shape), index, rng.standard_normal(g_shape)


@QUICK
@given(scatter_case())
def test_scatter_add_accumulates_repeated_indices(case):
    b, index, g = case
    expected = b.copy()
    # (the values broadcast by hand: NumPy 2.4's np.add.at reads garbage when it broadcasts
    # them itself against an index of two or more axes)
    np.add.at(expected, index, np.broadcast_to(g, index.shape + b.shape[1:]))
    helpers("scatter_add")["scatter_add"](b, index, g)
    same(b, expected)


@QUICK
@given(st.data(), shapes(min_dims=2, max_dims=3), st.integers(0, 9))
def test_scatter_pattern_helpers_accumulate(data, shape, seed):
    """np.add.at(b, (i, slice(...)), g) and friends: dialect.py writes one helper per pattern
    of index and slice parts."""
    rng = np.random.default_rng(seed)
    kinds = data.draw(st.lists(st.sampled_from("sv"), min_size=1, max_size=len(shape)))
    if "v" not in kinds:
        kinds[0] = "v"
    index_shape = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    parts = tuple(rng.integers(-shape[k], shape[k], size=index_shape) if kind == "v"
                  else slice(data.draw(st.integers(0, 1)), None) for k, kind in enumerate(kinds))
    b = np.zeros(shape)
    full = b[parts].shape
    g = rng.standard_normal(data.draw(broadcast_to_shape(full)))  # broadcast like NumPy
    expected = b.copy()
    np.add.at(expected, parts, np.broadcast_to(g, full))  # (see the test above)
    ns = {"np": np}
    name = "scatter_add_" + "".join(kinds)
    exec(dialect._scatter_source(name, kinds), ns)
    ns[name](b, *parts, g)
    same(b, expected)


@st.composite
def unbroadcast_case(draw):
    gshape = draw(shapes(min_dims=0, max_dims=4))
    shape = draw(broadcast_to_shape(gshape))
    return array(gshape, draw(st.integers(0, 9))), shape


@QUICK
@given(unbroadcast_case())
def test_unbroadcast_sums_down_to_the_shape(case):
    g, shape = case
    got = helpers("unbroadcast")["unbroadcast"](g, shape)
    lead = g.ndim - len(shape)
    expected = np.sum(g, axis=tuple(range(lead)))
    for axis, size in enumerate(shape):
        if size == 1:
            expected = np.sum(expected, axis=axis, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.shape(got) == shape


@st.composite
def compatible_shapes(draw):
    full = draw(shapes(min_dims=0, max_dims=4))
    gshape, shape = draw(broadcast_to_shape(full)), draw(broadcast_to_shape(full))
    gshape = (1,) * (len(shape) - len(gshape)) + gshape  # (the plain helper needs g's rank)
    return gshape, shape


@QUICK
@given(compatible_shapes(), st.integers(0, 9))
def test_unbroadcast_agrees_with_the_plain_numpy_helper(pair, seed):
    """The dialect's unbroadcast replaces helpers.HELPERS['unbroadcast'] in compiled modules:
    same values for any g and shape that broadcast together (g may have size one where
    shape does not)."""
    gshape, shape = pair
    g = array(gshape, seed)
    ns = {"np": np}
    exec(HELPERS["unbroadcast"], ns)
    expected = ns["unbroadcast"](g, shape)
    got = helpers("unbroadcast")["unbroadcast"](g, shape)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.shape(got) == np.shape(expected)


# ---------------------------------------------------------------- einsum helpers
EINSUMS = ["ij,jk->ik", "ij,kj->ki", "ji,jk->ik", "i,j->ji", "ii->i", "ii->", "ij->ji",
           "ijk,ik->ij", "ij,ij->", "ij,ij->i", "i,i,i->", "bij,bjk->bik"]


@QUICK
@given(st.sampled_from(EINSUMS), st.data())
def test_einsum_helpers_match_np_einsum(spec, data):
    ins, out = dialect.parse_subscripts(spec, spec.split("->")[0].count(",") + 1)
    sizes = {c: data.draw(st.integers(1, 3)) for c in sorted(set("".join(ins)))}
    ones = data.draw(st.booleans())  # some axes of size one, broadcast as NumPy does

    def shape(sub):
        if len(set(sub)) != len(sub):  # a diagonal: equal sizes
            return tuple(sizes[c] for c in sub)
        return tuple(1 if ones and data.draw(st.booleans()) else sizes[c] for c in sub)

    ops = [array(shape(sub), k) for k, sub in enumerate(ins)]
    ns = {"np": np}
    exec(dialect._einsum_source("e", ins, out), ns)
    np.testing.assert_allclose(ns["e"](*ops), np.einsum(spec, *ops), rtol=1e-12)


# each a stack of matrix products large enough for np.dot (rows x columns x summed >= 4096)
# and one below the size, with its operands as strided views, integers and broadcast stacks
PRODUCTS = [("kab,knb->kna", [(3, 10, 16), (3, 30, 16)]),
            ("kna,knb->kab", [(2, 300, 4), (2, 300, 5)]),
            ("kna,kab->knb", [(2, 50, 10), (2, 10, 9)]),
            ("bij,bjk->bki", [(2, 20, 16), (1, 16, 15)]),
            ("bcij,bcjk->bcik", [(2, 2, 17, 16), (2, 2, 16, 16)]),
            ("bij,bjk->bik", [(4, 3, 2), (4, 2, 5)])]


@pytest.mark.parametrize("spec,shapes", PRODUCTS, ids=[p[0] for p in PRODUCTS])
@pytest.mark.parametrize("kind", ["float", "view", "int"])
def test_einsum_helper_products_match_np_einsum(spec, shapes, kind):
    """Stacks of matrix products go to np.dot per matrix (BLAS) when large: each letter
    order, operands of any layout and dtype, a batch axis of size one broadcast."""
    ins, out = dialect.parse_subscripts(spec, 2)
    text = dialect._einsum_source("e", ins, out)
    sizes = {c: n for sub, shape in zip(ins, shapes) for c, n in zip(sub, shape) if n > 1}
    work = np.prod([n for c, n in sizes.items() if not (c in ins[0] and c in ins[1] and c in out)])
    assert "np.dot(" in text  # (the size is tested when it runs)
    assert bool(work >= dialect.BLAS_PRODUCT_SIZE) is (spec != "bij,bjk->bik")
    ops = [array(s, k) for k, s in enumerate(shapes)]
    if kind == "view":
        ops = [np.repeat(op, 2, axis=-1)[..., ::2] for op in ops]
        assert not ops[0].flags.c_contiguous
    elif kind == "int":
        ops = [np.round(4 * op).astype(np.int64) for op in ops]
    ns = {"np": np}
    exec(text, ns)
    np.testing.assert_allclose(ns["e"](*ops), np.einsum(spec, *ops), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec,inner", [("bij,bjk->bik", "k"), ("kab,knb->kna", "b"),
                                        ("kna,knb->kab", "b"), ("ij->ji", "i"),
                                        ("ij,ij->", "j"), ("ii->i", "i")])
def test_einsum_helper_innermost_loop_has_unit_stride(spec, inner):
    """The innermost loop walks the last axis of the operands holding its letter (a store
    into the output's last axis, or a running total), so LLVM can vectorize it."""
    ins, out = dialect.parse_subscripts(spec, spec.count(",") + 1)
    order, _ = dialect._einsum_order(ins, out)
    assert order[-1] == inner and sorted(order) == sorted(set("".join(ins)))


def test_einsum_helper_broadcasts_axes_of_size_one():
    """Regression: the helper took each letter's size from its first operand, so a first
    operand of size one along it silently dropped the rest."""
    ns = {"np": np}
    exec(dialect._einsum_source("e", ["bij", "bjk"], "bik"), ns)
    a, b = array((1, 3, 4), 0), array((2, 4, 2), 1)
    same(ns["e"](a, b), np.einsum("bij,bjk->bik", a, b))


# ---------------------------------------------------------------- the lowering, plain Python
def lowered(body, params="x", general_dot=False):
    """`def f(params): return body` lowered to the dialect and exec'd as plain Python."""
    source = f"import numpy as np\n\n\ndef f({params}):\n    return {body}\n"
    text = dialect.render(dialect.lower_source(source, entries=["f"], general_dot=general_dot))
    ns = {}
    exec(compile(text, "<lowered>", "exec"), ns)
    return ns["f"]


# (2, -3) and (1, -2) are ambiguous without the rank (-3 lies left of 2 at rank 4, right of it
# at rank 6): the lowering leaves them as written (plain Python computes them, Numba refuses
# them naming the line)
REDUCE_AXES = [0, 1, 2, 3, -1, -2, -3, -4, (0, 1), (1, 3), (0, -1), (-1, 0), (2, -1), (-4, -2),
               (0, 2, -1), (-3, -1), (-1, -4, -2), (3, 0, 1), (2, -3), (1, -2), (0, -3, -1)]


@pytest.mark.parametrize("axis", REDUCE_AXES, ids=str)
@pytest.mark.parametrize("func", ["sum", "mean", "max", "min", "prod", "var", "std"])
@pytest.mark.parametrize("keep", [False, True])
def test_lowered_reductions_match_numpy(func, axis, keep):
    x = array((2, 3, 4, 5), 7)
    f = lowered(f"np.{func}(x, axis={axis!r}, keepdims={keep})")
    np.testing.assert_allclose(f(x), getattr(np, func)(x, axis=axis, keepdims=keep),
                               rtol=1e-12)


@pytest.mark.parametrize("axis,lowered_", [((0, -1), True), ((-1, 1), True), ((2, -3), False),
                                            ((1, -2), False), ((0, -2, -1), True)], ids=str)
def test_ambiguous_mixed_sign_axes_are_left_as_written(axis, lowered_):
    source = f"import numpy as np\n\n\ndef f(x):\n    return np.max(x, axis={axis!r})\n"
    text = dialect.render(dialect.lower_source(source, entries=["f"]))
    assert (f"axis={axis!r}" not in text) == lowered_


LOWERED = [
    "np.squeeze(y, axis=-2)", "np.squeeze(y, axis=0)", "np.squeeze(y, axis=-4)",
    "np.squeeze(y, axis=2)", "np.expand_dims(x, (0, 2))", "np.expand_dims(x, -2)",
    "np.flip(x, axis=(-1, 0))", "np.flip(x, axis=k)", "np.roll(x, 7, axis=-2)",
    "np.roll(x, -2, axis=k)", "np.sort(x, axis=None)", "np.sort(x, axis=-2)",
    "np.argsort(x, axis=None)", "np.argsort(x)", "np.argsort(x, axis=k, kind='stable')",
    "np.clip(x, -0.5, None)", "np.clip(x, None, 0.5)", "np.clip(x, -0.1, 0.2)",
    "np.linalg.norm(x, axis=-1)", "np.linalg.norm(x, axis=(0, 2), keepdims=True)",
    "np.sum(x, axis=k, keepdims=True)", "np.var(x, axis=k, ddof=1)",
    "np.mean(x, axis=(1, -1), keepdims=True)", "np.where(x[0, 0, 0] > 0, 1.0, 2.0) + 1.0",
    "np.einsum('ij,jk->ki', x[0], x[1].T)", "np.einsum('ji,jk->ik', x[0], x[1])",
    "np.einsum('ij,kj->ki', x[0], x[1])", "np.einsum('ji,kj->ki', x[0], x[1].T)",
    "np.einsum('i,j->ji', x[0, 0], x[1, 1])", "np.einsum('j,ij->i', x[0, 0], x[1])",
    "np.einsum('ii->i', x[0, :, :3])", "np.einsum('ijk->kji', x)",
    "np.dot(x, x[0].T)", "np.matmul(x, x[0].T)", "x @ x[0].T",
]


@pytest.mark.parametrize("general_dot", [False, True])
@pytest.mark.parametrize("expression", LOWERED)
def test_lowered_expressions_match_numpy(expression, general_dot):
    x = array((3, 3, 4), 11)
    x[0, 0, :2] = x[0, 0, 2:]  # ties, for the sorts
    y = array((1, 3, 1, 4), 12)
    f = lowered(expression, params="x, y, k", general_dot=general_dot)
    reference = expression
    if "argsort" in expression and "kind" not in expression:
        # NumPy's default argsort (an unstable quicksort) orders ties in no documented way;
        # the compiled one keeps them in order, as kind="stable" does
        reference = expression[:-1] + (", " if "," in expression else ", -1, ") + \
            "kind='stable')"
    expected = eval(reference, {"np": np, "x": x, "y": y, "k": 1})
    same(f(x, y, 1), expected)


ALIASED = ("import numpy as np\n\n\ndef f(x0):\n    x = x0.copy()\n    x[1:] += x[:-1]\n"
           "    x[:-1] += x[1:] * 2.0\n    x[0] *= x[1]\n    x[2:] += x.reshape(-1)[:-2]\n"
           "    return x\n")


def test_updates_reading_their_own_array_are_not_done_in_place():
    text = dialect.render(dialect.lower_source(ALIASED, entries=["f"]))
    assert "x[1:] = x[1:] + x[:-1]" in text
    assert "x[2:] = x[2:] + np.ascontiguousarray(x).reshape" in text
    assert "add_into(x[:-1], x[1:] * 2.0)" in text  # a new array: added in place
    ns = {}
    exec(compile(text, "<lowered>", "exec"), ns)
    x = np.arange(6.0)
    expected = x.copy()
    expected[1:] += expected[:-1]
    expected[:-1] += expected[1:] * 2.0
    expected[0] *= expected[1]
    expected[2:] += expected.reshape(-1)[:-2]
    np.testing.assert_allclose(ns["f"](x), expected)


@pytest.mark.numba
def test_compiled_updates_reading_their_own_array_match_numpy():
    """Numba's in-place `x[1:] += x[:-1]` reads entries it already updated (a running sum)."""
    import numba
    text = dialect.render(dialect.lower_source(ALIASED, entries=["f"]))
    plain, ns = {}, {"numba": numba}
    exec(compile(text, "<lowered>", "exec"), plain)
    exec(compile(dialect.render(dialect.lower_source(ALIASED, entries=["f"]), "numba.njit"),
                 "<lowered>", "exec"), ns)
    x = np.arange(6.0)
    np.testing.assert_allclose(ns["f"](x), plain["f"](x))


SPLITS = ("import numpy as np\n\n\ndef f(x):\n    t = np.array_split(x, [1, 3], axis=1)\n"
          "    a, b = np.split(x, 2)\n    whole = np.split(x, ())\n"
          "    return t[0] * t[2], a * b, np.hsplit(x, [1])[1], whole[0]\n")


def test_split_bound_to_a_name_is_a_tuple_of_its_pieces():
    """Generated code holds np.split's pieces as a tuple (a loop's placeholder for them is
    one), Numba's split gives a list: a name bound to the pieces gets them as a tuple; a split
    at no index (one piece) is a split into one section, which Numba takes."""
    text = dialect.render(dialect.lower_source(SPLITS, entries=["f"]))
    assert "t_pieces = np.array_split(x, [1, 3], axis=1)" in text
    assert "t = (t_pieces[0], t_pieces[1], t_pieces[2])" in text
    assert "a, b = np.split(x, 2)" in text  # unpacked at once: a list unpacks too
    assert "whole_pieces = np.split(x, 1)" in text
    ns = {}
    exec(compile(text, "<lowered>", "exec"), ns)
    x = array((4, 4), 3)
    expected = (x[:, :1] * x[:, 3:], x[:2] * x[2:], x[:, 1:], x)
    for got, want in zip(ns["f"](x), expected, strict=True):
        same(got, want)


def test_lowered_heaviside_keeps_nan():
    x = np.array([-1.0, 0.0, -0.0, 2.0, np.nan])
    f = lowered("np.heaviside(x, 0.5)")
    np.testing.assert_array_equal(f(x), np.heaviside(x, 0.5))


@QUICK
@given(shapes(min_dims=0, max_dims=3), st.integers(0, 5), st.integers(0, 99))
def test_polyval_horner_matches_numpy(shape, degree, seed):
    ns = helpers("polyval_horner")
    p, x = array((degree,), seed), array(shape, seed + 1)
    x = float(x) if shape == () else x
    np.testing.assert_allclose(ns["polyval_horner"](p, x), np.polyval(p, x), rtol=1e-12,
                               atol=1e-12)
    assert np.shape(ns["polyval_horner"](p, x)) == np.shape(np.polyval(p, x))


@QUICK
@given(shapes(min_dims=1, max_dims=2, min_side=2), st.integers(0, 99))
def test_number_if_vector_is_the_covariance(shape, seed):
    ns = helpers("number_if_vector")
    m = array(shape, seed)
    got = ns["number_if_vector"](np.cov(m), m)
    np.testing.assert_allclose(got, np.cov(m), rtol=1e-12)
    assert isinstance(got, float) == (m.ndim == 1)


# ---------------------------------------------------------------- compiled: the lowering
def reductions(x):
    return (np.mean(x, axis=-2), np.var(x, axis=1, ddof=1, keepdims=True),
            np.max(x, axis=(0, -1)), np.prod(x, axis=-1, keepdims=True), np.sum(x, keepdims=True),
            np.min(x, axis=(-3, -1), keepdims=True), np.std(x, axis=(0, 2)),
            np.median(x, axis=1), np.median(x, axis=-1, keepdims=True),
            np.average(x, axis=1, weights=x * x + 1.0), np.average(x, weights=x * x + 1.0),
            np.average(x, axis=1, weights=np.arange(1.0, 5.0), keepdims=True),
            np.average(x, axis=-1), np.ptp(x, axis=0))


def reorderings(x):
    column = x[:, :1]
    return (np.roll(np.flip(x, axis=(0, 1)), -5, axis=1), np.sort(x, axis=0),
            np.argsort(x, axis=0), np.squeeze(column, axis=1), np.expand_dims(x, -1),
            np.cumprod(x, axis=0), np.cumprod(x, axis=-1))


def products(a, b):
    return (np.matmul(a, b), a @ b, np.outer(a[0, 0], b[0]),
            np.einsum("bij,bjk->bik", a[:1, 0], b), np.dot(a[0], b[0]))


def scalars(x):
    return np.heaviside(x, 0.5), math.cbrt(x[0]), np.where(x[1] > 0, 1.0, 2.0) + 1.0


def scatter(b, idx, v):
    c = b * 1.0
    np.add.at(c, idx, v)  # v is one row, broadcast to every indexed row
    np.add.at(c, (idx, 1), 0.5)  # a scalar, broadcast to every indexed entry
    return c


def accumulate(x):
    rows = []
    for i in range(3):
        rows.append(x[i] * i)
    out = np.zeros((3, 4))
    for i in range(3):
        out[i] += x[i]
    out[1:, 2:] += x[1:, 2:]
    return np.stack(rows), out


def splits(x):
    halves = np.split(x, 2, axis=1)
    a, b, c = np.array_split(x, [1, 3])
    whole = np.split(x, ())
    return halves[0] * halves[1], a * c, np.hsplit(x, [1])[1], np.vsplit(x, 3)[2], whole[0]


def ambiguous_sum(x):
    return np.sum(x, axis=(2, -3))


def ambiguous_max(x):
    return np.max(x, axis=(2, -3))


def broadcast_loss(x, y):
    return np.sum(np.tanh(x + y) * y)


def gathers_and_joins(x, idx):
    taken = np.take(x, idx.reshape(1, -1), axis=1) + np.take(x[0], 2, axis=0)
    repeated = np.repeat(x, np.array([1, 0, 2]), axis=0) + np.repeat(x[:1], 3, axis=-1)[:, :4]
    turned = np.rot90(x.reshape(3, 2, 2), 3, (2, 0))
    joined = np.vstack((x[0], x)) + np.dstack((x[0], x[:1]))[0, :, :1] + np.atleast_2d(x[0, 0])
    return taken, repeated, turned, joined, np.kron(x[:, 1], x[0])


def polynomials_and_covariances(p, x):
    return (np.polyval(p, x), np.polyval(p, x[0, 0]), np.polyval(p[:1], x), np.cov(x[0]),
            np.cov(x, rowvar=False, ddof=0))


INDEX = np.array([0, 2, 2, -1, 0])
CASES = {
    "polynomials_and_covariances": (polynomials_and_covariances, [(4,), (3, 4)]),
    "reductions": (reductions, [(3, 4, 2)]),
    "reorderings": (reorderings, [(4, 3)]),
    "products": (products, [(2, 1, 2, 3), (2, 3, 4)]),
    "scalars": (scalars, [(5,)]),
    "scatter": (scatter, [(5, 3), INDEX, (3,)]),
    "accumulate": (accumulate, [(3, 4)]),
    "grad_unbroadcast": (ad.grad(broadcast_loss), [(1, 3), (2, 3)]),
    "gathers_and_joins": (gathers_and_joins, [(3, 4), np.array([0, 3, -1, 3])]),
    "splits": (splits, [(3, 4)]),
}


def _args(specs):
    return [spec if isinstance(spec, np.ndarray) else array(spec, k)
            for k, spec in enumerate(specs)]


@pytest.fixture(scope="module")
def compiled_results():
    """Each case compiled once with jit (LLVM at -O0, as in test_jit.py) and called; its result
    (or the error it raised) with the plain result, by name."""
    import numba
    saved = numba.config.OPT
    numba.config.OPT = numba.core.config._OptLevel(0)
    out = {}
    try:
        for name, (fn, specs) in CASES.items():
            args = _args(specs)
            try:
                out[name] = (jit(fn)(*args), fn(*args))
            except Exception as error:  # raised by the test of that name
                out[name] = (error, fn(*args))
    finally:
        numba.config.OPT = saved
    return out


@pytest.mark.numba
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_lowering_matches_numpy(compiled_results, name):
    got, expected = compiled_results[name]
    if isinstance(got, Exception):
        raise got
    got, expected = (got, expected) if isinstance(expected, tuple) else ((got,), (expected,))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12)
        assert np.shape(g) == np.shape(e)


@pytest.mark.numba
@pytest.mark.parametrize("fn", [ambiguous_sum, ambiguous_max], ids=lambda f: f.__name__)
def test_compiled_ambiguous_axes_are_right_or_refused_naming_the_line(fn):
    """Axes the lowering leaves as written: Numba computes them itself (np.sum takes a tuple of
    axes in Numba 0.68) or refuses them naming the user's line, never a wrong value."""
    x = array((2, 3, 4, 5), 3)
    try:
        got = jit(fn)(x)
    except CompileError as error:
        assert error.lineno == fn.__code__.co_firstlineno + 1
    else:
        np.testing.assert_allclose(got, fn(x), rtol=1e-12)
        assert got.shape == (2, 5)


@pytest.mark.numba
def test_index_array_gives_a_mask_beside_an_index_array_its_positions():
    """``y[mask, cols]``: NumPy replaces a 1-D mask among several index arrays by the positions
    of its True entries; Numba checks the mask's own length against the others instead, so
    the dialect writes index_array(mask)."""
    import numba
    ns = {"np": np, "numba": numba}
    exec(OVERLOAD_FORMS["index_array"], ns)
    plain = {"np": np}
    exec(DIALECT_HELPERS["index_array"], plain)
    index_array = ns["index_array"]
    compiled = numba.njit(lambda y, a, b: y[index_array(a), index_array(b)])
    y = np.arange(12.0).reshape(4, 3)
    mask, cols = np.array([False, True, False, True]), np.array([2, 0])
    for rows in (mask, np.array([3, 1])):
        expected = y[rows, cols]
        np.testing.assert_array_equal(compiled(y, rows, cols), expected)
        np.testing.assert_array_equal(
            y[plain["index_array"](rows), plain["index_array"](cols)], expected)
    # one True broadcasts against the other index array, as in NumPy
    one = np.array([False, False, True, False])
    np.testing.assert_array_equal(compiled(y, one, cols), y[one, cols])


@pytest.mark.numba
def test_full_like_any_fills_with_a_number_or_broadcasts_an_array():
    import numba
    ns = {"np": np, "numba": numba}
    exec(OVERLOAD_FORMS["full_like_any"], ns)
    plain = {"np": np}
    exec(DIALECT_HELPERS["full_like_any"], plain)
    full_like_any = ns["full_like_any"]
    compiled = numba.njit(lambda a, v: full_like_any(a, v))
    a = np.zeros((2, 3))
    for v in (2.5, np.array([1.0, 2.0, 3.0]), np.arange(6.0).reshape(2, 3)):
        expected = np.full_like(a, v)
        np.testing.assert_array_equal(compiled(a, v), expected)
        np.testing.assert_array_equal(plain["full_like_any"](a, v), expected)


@pytest.mark.numba
def test_mask_read_and_store_take_masks_of_any_rank():
    """``a[mask]`` and ``a[mask] = v``: Numba's getitem and setitem fail with an AssertionError
    on a mask of two or more axes (``B[B < 0] = 0.0``, ReLU written in place, failed even for
    jit(f)); the dialect writes mask_read and mask_store, compiled as loops for those masks.
    Checked against NumPy for C-ordered and strided arrays, a number, a vector of values and a
    one-value vector (which broadcasts), and a 1-D mask."""
    import numba
    ns = {"np": np, "numba": numba}
    exec(OVERLOAD_FORMS["mask_read"], ns)
    exec(OVERLOAD_FORMS["mask_store"], ns)
    mask_read, mask_store = ns["mask_read"], ns["mask_store"]
    read = numba.njit(lambda a, m: mask_read(a, m))

    @numba.njit
    def store(a, m, v):
        mask_store(a, m, v)
        return a
    rng = np.random.default_rng(3)
    base = rng.standard_normal((4, 6, 2))
    for a in (base, base[:, ::2], base[..., 0], base[..., 0].T, base[0, :, 0]):
        m = a < 0.1
        np.testing.assert_array_equal(read(a, m), a[m])
        for v in (0.0, np.arange(float(np.count_nonzero(m))), np.array([7.0])):
            expected = a.copy()
            expected[m] = v
            np.testing.assert_array_equal(store(a.copy(), m, v), expected)
    with pytest.raises(IndexError):
        read(base[..., 0], np.ones((2, 2), dtype=bool))
    with pytest.raises(ValueError):
        store(base[..., 0].copy(), base[..., 0] < 0.1, np.ones(100))
    plain = {"np": np}
    exec(DIALECT_HELPERS["mask_read"] + DIALECT_HELPERS["mask_store"], plain)
    a = base[..., 0].copy()
    np.testing.assert_array_equal(plain["mask_read"](a, a > 0), a[a > 0])
    plain["mask_store"](a, a > 0, 0.0)
    assert np.all(a <= 0)


def _relu_in_place(A):
    B = A.copy()
    B[B < 0] = 0.0
    return np.sum(B ** 2)


def _masked_scale(A):
    B = A * 1.0
    keep = (A > 0.2) & ~(A > 0.8)
    B[keep] = B[keep] * 3.0
    return np.sum(np.sin(B)) + np.sum(A[keep] ** 3)


@pytest.mark.numba
@pytest.mark.parametrize("f", [_relu_in_place, _masked_scale])
def test_a_two_axis_mask_under_jit(f):
    a = np.array([[0.3, -0.7, 0.5], [-0.2, 0.9, 0.25]])
    assert jit(f)(a) == pytest.approx(f(a), rel=1e-12)
    expected = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[idx] = 1e-6
        expected[idx] = (f(a + e) - f(a - e)) / 2e-6
    np.testing.assert_allclose(jit(ad.grad(f))(a), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(ad.grad(f))(np.asfortranarray(a)), expected, rtol=1e-6,
                               atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("shape", [(4,), (3, 5), (3, 2, 4), (0, 3), (3, 0, 2)])
def test_first_axis_last_is_a_contiguous_moveaxis(shape):
    import numba
    ns = {"np": np}
    exec(DIALECT_HELPERS["first_axis_last"], ns)
    x = np.arange(float(np.prod(shape))).reshape(shape)
    expected = np.moveaxis(x, 0, -1)
    for fn in (ns["first_axis_last"], numba.njit(ns["first_axis_last"])):
        got = fn(x)
        assert got.shape == expected.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, expected)
    # a view that is not contiguous (jacfwd's tangents may be one)
    np.testing.assert_array_equal(ns["first_axis_last"](x[::-1]), np.moveaxis(x[::-1], 0, -1))


def test_every_dialect_helper_is_covered():
    tested = {"stack_list", "add_into", "add_at", "outer_product", "reassociated_sum",
              "keep_axis", "mean_axis", "var_axis", "flip_axis", "roll_axis", "sort_axis",
              "argsort_axis", "cumprod_axis", "median_axis", "weighted_average",
              "scatter_add", "dot_nd", "matmul_nd",
              "unbroadcast", "max_axis", "min_axis", "prod_axis", "tanh_fast",
              "sum_of_products", "sum_axis", "small_dot", "add_outer_at", "subtract_at",
              "batched_outer", "zeros_like_reusing", "whole_max", "whole_min", "take_axis",
              "repeat_axis", "message_text", "message_format", "diagonal_of",
              "polyval_horner", "number_if_vector", "exp_fast",
              "sum_axis_of_products", "index_array", "first_axis_last", "tile_count",
              "tile_rows_columns", "squeeze_none", "norm_any_rank", "inner_product",
              "mask_read", "mask_store", "full_like_any", "dot_of_any_dtype",
              "solve_stacks"}
    # (squeeze_none, norm_any_rank, inner_product: tests/test_jit.py, compiled;
    # zeros_like_reusing: tests/test_hoisting.py; message_text: tests/test_raise.py;
    # message_format: tests/test_message_format.py;
    # diagonal_of: tests/test_ops.py's diagonal-stack row, compiled; exp_fast:
    # tests/test_fast_exp.py)
    assert set(DIALECT_HELPERS) == tested


def _tanh_fast_compiled():
    """tanh_fast's source exec'd as the lowered module holds it (the overload registered),
    and a compiled caller."""
    import numba
    ns = {"np": np, "numba": numba}
    exec(DIALECT_HELPERS["exp_fast"], ns)  # (float_from_bits: its number form builds 2**k)
    exec(DIALECT_HELPERS["tanh_fast"], ns)
    tanh_fast = ns["tanh_fast"]
    return tanh_fast, numba.njit(lambda x: tanh_fast(x))


def _tanh_fast_of_numbers():
    """A compiled loop calling tanh_fast on each float64 number of a vector."""
    import numba
    tanh_fast, _ = _tanh_fast_compiled()

    def each(xs):
        out = np.empty_like(xs)
        for i in range(xs.shape[0]):
            out[i] = tanh_fast(xs[i])
        return out
    return numba.njit(each)


def _ulps(got, expected):
    spacing = np.spacing(np.abs(expected).astype(np.float64))
    return np.max(np.abs(got - expected) / np.where(spacing > 0, spacing, 5e-324))


@pytest.mark.numba
def test_tanh_fast_is_np_tanh_within_a_few_ulp():
    """The vectorized loop Numba compiles for np.tanh of a float array of 256 elements or more
    (issue #6; shorter ones keep Numba's np.tanh): within 3 ulp
    of NumPy's over every magnitude, exact at signed zeros, +-1 at large values and at
    infinities, nan at nan; float32 stays float32; strided, 0-d and empty arrays; scalars and
    integer arrays go to np.tanh itself (float64 numbers: the next test)."""
    plain, compiled = _tanh_fast_compiled()
    rng = np.random.default_rng(7)
    for scale in (1e-300, 1e-12, 1e-6, 1e-3, 0.1, 0.5, 1.0, 3.0, 10.0, 30.0, 1e300):
        x = rng.standard_normal(5000) * scale
        assert _ulps(compiled(x), np.tanh(x)) <= 3.0, scale
        same(plain(x), np.tanh(x), rtol=0.0)
    values = np.array([0.0, -0.0, 5e-324, -5e-324, 19.0, -19.0, 710.0, -710.0, np.inf,
                       -np.inf, np.nan])
    special = np.tile(values, 30)  # (256 elements or more take the vectorized loop)
    got = compiled(special)
    np.testing.assert_array_equal(got, np.tanh(special))
    real = ~np.isnan(special)
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(np.tanh(special[real])))
    short = compiled(values)  # Numba's own np.tanh: within an ulp of NumPy's
    np.testing.assert_allclose(short, np.tanh(values), rtol=2.3e-16, atol=0)
    x32 = (rng.standard_normal(300) * 2).astype(np.float32)
    assert compiled(x32).dtype == np.float32
    np.testing.assert_allclose(compiled(x32), np.tanh(x32), rtol=2e-7, atol=0)
    grid = rng.standard_normal((70, 9))
    same(compiled(grid[::3, 1::2]), np.tanh(grid[::3, 1::2]), rtol=1e-15)
    same(compiled(grid.T), np.tanh(grid.T), rtol=1e-15)
    same(compiled(np.array(0.25)), np.tanh(np.array(0.25)), rtol=1e-15)
    assert compiled(np.zeros((0, 3))).shape == (0, 3)
    assert _ulps(compiled(0.25), np.tanh(0.25)) <= 3.0
    assert compiled(np.float32(0.25)) == np.tanh(np.float32(0.25))
    same(compiled(np.arange(4)), np.tanh(np.arange(4)), rtol=1e-15)


@pytest.mark.numba
def test_tanh_fast_of_numbers_is_np_tanh_within_a_few_ulp():
    """A float64 number (what jit's element loops pass) takes the array loop's arithmetic,
    with no call: within 3 ulp of NumPy's over every magnitude (and around 0.3125, where an
    earlier form switched from a polynomial to exp), exact at signed zeros, +-1 at large
    values and infinities, nan at nan; the loop calling it holds SIMD vectors."""
    each = _tanh_fast_of_numbers()
    rng = np.random.default_rng(8)
    for scale in (1e-300, 1e-12, 1e-6, 1e-3, 0.1, 0.3, 0.5, 1.0, 3.0, 10.0, 30.0, 1e300):
        x = rng.standard_normal(5000) * scale
        assert _ulps(each(x), np.tanh(x)) <= 3.0, scale
    many = rng.standard_normal(300_000) * 0.3  # (rare values: Estrin's order for every term
    assert _ulps(each(many), np.tanh(many)) <= 3.0  # of the polynomial put some at 4 ulp)
    edge = np.nextafter(0.3125, [0.0, 1.0, 0.0, 1.0]) * np.array([1.0, 1.0, -1.0, -1.0])
    edge = np.concatenate([edge, np.linspace(-1.0, 1.0, 20001)])
    assert _ulps(each(edge), np.tanh(edge)) <= 3.0
    values = np.array([0.0, -0.0, 5e-324, -5e-324, 19.0, -19.0, 710.0, -710.0, np.inf,
                       -np.inf, np.nan])
    got = each(values)
    np.testing.assert_array_equal(got, np.tanh(values))
    real = ~np.isnan(values)
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(np.tanh(values[real])))
    ir = "\n".join(each.inspect_llvm().values())
    assert " x double>" in ir and "@tanh(" not in ir and "@llvm.exp" not in ir


@pytest.mark.numba
def test_jit_writes_np_tanh_of_arrays_as_tanh_fast():
    def f(w, x):
        h = np.tanh(x @ w)
        return np.sum(np.tanh(h) * h) + np.tanh(np.sum(w))

    rng = np.random.default_rng(3)
    w, x = rng.standard_normal(4), rng.standard_normal((6, 4))
    compiled = jit(ad.grad(f))
    np.testing.assert_allclose(compiled(w, x), ad.grad(f)(w, x), rtol=1e-13, atol=1e-15)
    assert "tanh_fast(" in compiled.source
    assert jit(f)(w, x) == pytest.approx(f(w, x), rel=1e-14)


@pytest.mark.numba
def test_sum_of_products_is_np_sum_of_the_product():
    """One loop for two float64 arrays of one shape (any rank, strided too); broadcasting,
    scalars and float32 go to np.sum(a * b)."""
    import numba
    ns = _helper_namespace("sum_of_products", compiled=True)
    plain = ns["sum_of_products"]
    compiled = numba.njit(lambda a, b: plain(a, b))
    rng = np.random.default_rng(11)
    for shape in [(), (1,), (7,), (1000,), (3, 4), (2, 3, 5)]:
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        same(compiled(a, b), np.sum(a * b), rtol=1e-13)
        same(plain(a, b), np.sum(a * b), rtol=0.0)
    grid = rng.standard_normal((8, 6))
    same(compiled(grid[::2, 1:], grid[1::2, :-1]), np.sum(grid[::2, 1:] * grid[1::2, :-1]),
         rtol=1e-13)
    same(compiled(grid.T, grid.T), np.sum(grid * grid), rtol=1e-13)
    same(compiled(grid, grid[:1]), np.sum(grid * grid[:1]), rtol=1e-13)  # broadcast
    same(compiled(grid[:, :1].copy(), grid), np.sum(grid[:, :1] * grid), rtol=1e-13)
    cube = rng.standard_normal((3, 4, 5))
    for other in (cube, cube[:1].copy(), cube[:, :1].copy(), cube[:, :, :1].copy(),
                  cube[:1, :1].copy()):
        same(compiled(cube, other), np.sum(cube * other), rtol=1e-13)
        same(compiled(other, cube), np.sum(other * cube), rtol=1e-13)
    with pytest.raises(ValueError):
        compiled(cube, cube[:2].copy())
    same(compiled(grid, 2.5), np.sum(grid * 2.5), rtol=1e-13)
    same(compiled(2.5, 4.0), np.sum(2.5 * 4.0), rtol=0.0)
    g32 = grid.astype(np.float32)
    same(plain(g32, g32), np.sum(g32 * g32), rtol=0.0)
    # (compiled, it is Numba's np.sum of float32: a float64, as reassociated_sum gives)
    assert compiled(g32, g32) == pytest.approx(float(np.sum(g32 * g32)), rel=1e-6)
    assert compiled(np.zeros(0), np.zeros(0)) == 0.0
    v = rng.standard_normal(9)
    for a, b in ((v, v[:1]), (v[:1], v), (v[:8:2], v[1::2]), (np.zeros(0), v[:1])):
        same(compiled(a, b), np.sum(a * b), rtol=1e-13)  # a vector of length one broadcasts
    with pytest.raises(ValueError):
        compiled(v, v[:4])


@pytest.mark.numba
def test_jit_writes_a_whole_array_sum_of_a_product_as_sum_of_products():
    def loss(w, b, x, y):
        r = w * x + b - y
        return np.sum(r * r) / x.shape[0]

    rng = np.random.default_rng(5)
    x = rng.standard_normal(50)
    y = 2.0 * x - 1.0 + 0.1 * rng.standard_normal(50)
    compiled = jit(ad.grad(loss, argnums=(0, 1)))
    got, expected = compiled(0.3, 0.1, x, y), ad.grad(loss, argnums=(0, 1))(0.3, 0.1, x, y)
    np.testing.assert_allclose(got, expected, rtol=1e-13)
    assert "sum_of_products(" in compiled.source
    assert jit(loss)(0.3, 0.1, x, y) == pytest.approx(loss(0.3, 0.1, x, y), rel=1e-14)


@pytest.mark.numba
def test_sum_of_products_in_loops(monkeypatch):
    """Inside loops too (small vectors: no temporary per step), the gradient unchanged. (With
    jit's rewrites off: they would write this loop's vector arithmetic as element loops,
    tests/test_vector_loops.py.)"""
    monkeypatch.setenv("AUTODIFF_AST_SCALARIZE", "0")
    def f(x, m):
        total = 0.0
        for i in range(x.shape[0]):
            d = x[i] - m
            total = total + np.sum(d * d) * np.sum(d * x[i])
        return total

    rng = np.random.default_rng(9)
    # rows of 12: longer than jit's SMALL_AXIS (shorter rows are kept as scalars instead)
    x, m = rng.standard_normal((6, 12)), rng.standard_normal(12)
    compiled = jit(ad.grad(f, argnums=(0, 1)))
    got, expected = compiled(x, m), ad.grad(f, argnums=(0, 1))(x, m)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    assert "sum_of_products(d, d)" in compiled.source, compiled.source
    assert jit(f)(x, m) == pytest.approx(f(x, m), rel=1e-13)


@pytest.mark.numba
def test_sum_axis_is_np_sum_along_one_axis():
    """Loops for 2-D and 3-D float arrays (each axis, negative axes, strided and transposed
    views, empty axes; float32 stays float32) and 2-D booleans (counts); other ranks and
    integer arrays go to np.sum."""
    import numba
    ns = {"np": np, "numba": numba}
    exec(DIALECT_HELPERS["sum_axis"], ns)
    plain = ns["sum_axis"]
    compiled = numba.njit(lambda x, axis: plain(x, axis))
    rng = np.random.default_rng(12)
    grid = rng.standard_normal((37, 300))
    for x in (grid, grid.T, grid[::3, 1::2], np.zeros((0, 4)), np.zeros((4, 0)),
              rng.standard_normal((1, 1))):
        for axis in (0, 1, -1, -2):
            got = compiled(x, axis)
            same(got, np.sum(x, axis=axis), rtol=1e-13)
            assert got.shape == np.sum(x, axis=axis).shape
            same(plain(x, axis), np.sum(x, axis=axis), rtol=0.0)
    g32 = grid.astype(np.float32)
    assert compiled(g32, 1).dtype == np.float32
    np.testing.assert_allclose(compiled(g32, 1), np.sum(g32, axis=1), rtol=1e-5)
    cube = rng.standard_normal((3, 4, 5))
    for x in (cube, cube.transpose(2, 0, 1), cube[:, ::2, 1:], np.zeros((2, 0, 3))):
        for axis in (0, 1, 2, -1, -2, -3):
            same(compiled(x, axis), np.sum(x, axis=axis), rtol=1e-13)
    assert compiled(cube.astype(np.float32), 0).dtype == np.float32
    with pytest.raises(ValueError):
        compiled(cube, 3)
    same(compiled(cube[None], 1), np.sum(cube[None], axis=1), rtol=1e-13)  # 4-D: np.sum
    flags = grid[:, ::7] > 0.3
    for axis in (0, 1, -1, -2):
        same(compiled(flags, axis), np.sum(flags, axis=axis), rtol=0.0)  # counted in int64
    with pytest.raises(ValueError):
        compiled(flags, 2)
    same(compiled(np.arange(12).reshape(3, 4), 1), np.sum(np.arange(12).reshape(3, 4), axis=1),
         rtol=0.0)
    v = rng.standard_normal(6)
    same(compiled(v, 0), np.sum(v, axis=0), rtol=1e-13)
    with pytest.raises(ValueError):
        compiled(grid, 2)


@pytest.mark.numba
def test_sum_axis_of_products_is_np_sum_of_the_product():
    """One loop nest for two C-contiguous float64 arrays of one shape (2-D, 3-D, every axis,
    negative axes, empty axes); broadcasting operands, strided views, numbers, float32 and
    other ranks take sum_axis(a * b) (the same values)."""
    ns = _helper_namespace("sum_axis_of_products")
    plain = ns["sum_axis_of_products"]
    import numba
    compiled = numba.njit(lambda a, b, axis: plain(a, b, axis))
    rng = np.random.default_rng(21)
    for shape in ((7, 9), (3, 4, 5), (1, 1), (0, 4), (2, 0, 3)):
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        for axis in range(-len(shape), len(shape)):
            expected = np.sum(a * b, axis=axis)
            got = compiled(a, b, axis)
            same(got, expected, rtol=1e-13)
            assert got.shape == expected.shape
            same(plain(a, b, axis), expected, rtol=0.0)
    cube = rng.standard_normal((3, 4, 5))
    eye = np.eye(5)[:4]
    for a, b in ((cube, eye), (cube, cube[:1]), (cube[:, ::2], cube[:, 1::2]),
                 (2.0, cube), (cube.astype(np.float32), cube.astype(np.float32)),
                 (cube[:, :4, :4], eye[:4, :4])):
        for axis in (0, 2, -1):
            same(compiled(a, b, axis), np.sum(np.multiply(a, b), axis=axis), rtol=1e-6)
    with pytest.raises(ValueError):
        compiled(cube, cube, 3)


@pytest.mark.numba
def test_jit_sums_products_and_negations_along_an_axis_without_temporaries():
    """np.sum(a * b, axis=k) as sum_axis_of_products(a, b, k), np.sum(-e, axis=k) as
    -sum_axis(e, k): the same values (a negation is exact)."""
    def loss(w, x):
        z = x[None, :, :] * w[:, None, :]
        return np.sum(np.sum(z * z, axis=2) * np.sum(-z, axis=1)[:, :1])

    rng = np.random.default_rng(22)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((6, 4))
    compiled = jit(ad.grad(loss))
    np.testing.assert_allclose(compiled(w, x), ad.grad(loss)(w, x), rtol=1e-12, atol=1e-14)
    assert "sum_axis_of_products(z, z, 2)" in compiled.source
    assert "-sum_axis(z, 1)" in compiled.source
    assert jit(loss)(w, x) == pytest.approx(loss(w, x), rel=1e-13)
    step, direction = 1e-6, rng.standard_normal(w.shape)
    numeric = (loss(w + step * direction, x) - loss(w - step * direction, x)) / (2 * step)
    assert float(np.sum(compiled(w, x) * direction)) == pytest.approx(numeric, rel=1e-6)


@pytest.mark.numba
def test_jit_writes_an_axis_sum_as_sum_axis():
    def loss(w, x):
        h = np.tanh(x @ w)
        return np.sum(np.sum(h * h, axis=1) * np.sum(h, axis=0)[0])

    rng = np.random.default_rng(6)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((6, 4))
    compiled = jit(ad.grad(loss))
    np.testing.assert_allclose(compiled(w, x), ad.grad(loss)(w, x), rtol=1e-12, atol=1e-14)
    assert "sum_axis(" in compiled.source
    assert jit(loss)(w, x) == pytest.approx(loss(w, x), rel=1e-13)


def _helper_namespace(*names, compiled=False):
    """The named dialect helpers (and those they call) exec'd into one namespace; with
    compiled=True each plain helper is replaced by its numba.njit, as a target compiles it."""
    import numba
    ns = {"np": np, "numba": numba}
    for source in dialect_helper_source(set(names)):
        exec(source, ns)
    if compiled:
        import types

        from codegen.helpers import DIALECT_NOT_COMPILED
        for key, value in list(ns.items()):
            if isinstance(value, types.FunctionType) and key not in DIALECT_NOT_COMPILED:
                ns[key] = numba.njit(value)
    return ns


@pytest.mark.numba
def test_small_dot_is_np_dot():
    """Loops for float64 matrix-vector, vector-matrix and vector-vector products up to 4096
    matrix entries (any strides); larger ones, matrix products, other dtypes and mismatched
    shapes go to np.dot (which raises as it always did)."""
    import numba
    ns = _with_overload_forms(_helper_namespace("small_dot"))
    plain = ns["small_dot"]
    compiled = numba.njit(lambda a, b: plain(a, b))
    rng = np.random.default_rng(13)
    m = rng.standard_normal((10, 12))
    cases = [(m, rng.standard_normal(12)), (m.T, rng.standard_normal(10)),
             (rng.standard_normal(10), m), (rng.standard_normal(12), m.T),
             (m[::2, 1::3], rng.standard_normal(4)), (rng.standard_normal(7),
                                                      rng.standard_normal(7)),
             (rng.standard_normal((100, 50)), rng.standard_normal(50)),  # 5000 entries: BLAS
             (rng.standard_normal(5000), rng.standard_normal(5000)),
             (m, rng.standard_normal((12, 3))), (np.zeros((0, 3)), np.zeros(3)),
             (np.zeros(0), np.zeros(0))]
    for a, b in cases:
        same(compiled(a, b), np.dot(a, b), rtol=1e-13)
        same(plain(a, b), np.dot(a, b), rtol=0.0)
    f32 = m.astype(np.float32)
    assert compiled(f32, f32[0]).dtype == np.float32
    with pytest.raises(ValueError):
        compiled(m, np.ones(5))


@pytest.mark.numba
def test_add_outer_at_and_subtract_at_update_a_row_in_place():
    """add_outer_at(a, i, u, v) is add_at(a, i, outer_product(u, v)) to the last bit (loops
    into a matrix row of a 3-D array; otherwise the two helpers); subtract_at(a, i, v) is
    add_at(a, i, -v)."""
    ns = _helper_namespace("add_outer_at", "subtract_at")
    jitted = _helper_namespace("add_outer_at", "subtract_at", compiled=True)
    rng = np.random.default_rng(14)
    cube = rng.standard_normal((4, 3, 5))
    u, v = rng.standard_normal(3), rng.standard_normal(5)
    for fn in (ns["add_outer_at"], jitted["add_outer_at"]):
        expected = cube.copy()
        expected[2] += np.outer(u, v)
        got = cube.copy()
        fn(got, 2, u, v)
        np.testing.assert_array_equal(got, expected)
        shallow = rng.standard_normal((3, 1, 5))  # a (1, 5) row: u of one element
        expected = shallow.copy()
        expected[1] += np.outer(u[:1], v)
        got = shallow.copy()
        fn(got, 1, u[:1], v)
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError):  # a vector row cannot take a matrix: as add_at refuses
        ns["add_outer_at"](rng.standard_normal((3, 5)), 1, u, v)
    matrix = rng.standard_normal((4, 5))
    for fn in (ns["subtract_at"], jitted["subtract_at"]):
        got, expected = matrix.copy(), matrix.copy()
        fn(got, 3, v)
        ns["add_at"](expected, 3, -v)
        np.testing.assert_array_equal(got, expected)
        vector = rng.standard_normal(6)
        got, expected = vector.copy(), vector.copy()
        fn(got, 2, 0.75)
        expected[2] += -0.75
        np.testing.assert_array_equal(got, expected)


@pytest.mark.numba
def test_jit_writes_small_products_and_row_updates_without_temporaries(monkeypatch):
    """The adjoint of a matrix-vector product in a loop: small_dot both ways, the outer
    product added into the row in place, the negated row subtracted; gradients equal the
    NumPy source's. (With jit's rewrites off, which would write the loop's vector arithmetic
    as element loops.)"""
    monkeypatch.setenv("AUTODIFF_AST_SCALARIZE", "0")
    from test_adjoint_tidying import mixture_like as f  # q = np.dot(qs[c], x[i] - means[c])

    rng = np.random.default_rng(15)
    args = (rng.standard_normal((3, 4, 4)), rng.standard_normal((5, 4)),
            rng.standard_normal((3, 4)))
    compiled = jit(ad.grad(f, argnums=(0, 1, 2)))
    got, expected = compiled(*args), ad.grad(f, argnums=(0, 1, 2))(*args)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
    source = compiled.source
    assert "small_dot(qs[c], centered)" in source, source
    assert "add_outer_at(qs_bar, c, " in source, source
    assert "subtract_at(means_bar, c, " in source, source


def test_outer_product_adds_move_only_where_nothing_can_tell():
    """The named-product form moves the add up to the product only when the statements in
    between neither mention the array nor rebind the index, and no other name can see it."""
    import gast

    from codegen.fused_updates import fuse_outer_adds

    def fused(body, params="m, x, g"):
        fn = gast.parse(f"def f({params}):\n" + "\n".join("    " + line for line in body)).body[0]
        return fuse_outer_adds(fn)
    head = ["m_bar = np.zeros_like(m)", "t = outer_product(g, x)"]
    tail = ["add_at(m_bar, 1, t)", "return m_bar"]
    assert fused(head + ["y = g * 2.0"] + tail)
    assert not fused(head + ["y = m_bar[1, 0, 0]"] + tail)  # reads the array in between
    assert not fused(["m_bar = np.zeros_like(m)", "c = 1", "t = outer_product(g, x)",
                      "c = 2", "add_at(m_bar, c, t)", "return m_bar"])  # the index changes
    assert not fused(["m_bar = np.zeros_like(m)", "v = m_bar[1]", "t = outer_product(g, x)",
                      "y = v * 2.0", "add_at(m_bar, 1, t)", "return m_bar"])  # a view of it
    assert not fused(["t = outer_product(g, x)", "y = g * 2.0", "add_at(m, 1, t)",
                      "return m"])  # a parameter: the caller may hold it under other names
    assert not fused(head + ["z = t * 1.0"] + tail)  # the product is read twice
    assert not fused(["m_bar = np.zeros_like(m)", "peek = lambda: m_bar[1, 0, 0]",
                      "t = outer_product(g, x)", "y = peek()", "add_at(m_bar, 1, t)",
                      "return m_bar"])  # a closure could see the early add


@pytest.mark.numba
def test_max_and_min_of_a_matrix_along_one_axis():
    """The 2-D loops of max_axis/min_axis: either axis (negative too), strided and transposed
    views, integers, NaN propagating as in NumPy, an empty reduced axis raising ValueError,
    an empty other axis giving an empty result; other ranks take the moveaxis form."""
    ns = _helper_namespace("max_axis", "min_axis", compiled=True)
    rng = np.random.default_rng(16)
    grid = rng.standard_normal((5, 7))
    grid[2, 3] = np.nan
    for name, reference in (("max_axis", np.max), ("min_axis", np.min)):
        for x in (grid, grid.T, grid[::2, 1:], np.arange(12).reshape(3, 4),
                  rng.standard_normal((1, 1))):
            for axis in (0, 1, -1, -2):
                np.testing.assert_array_equal(ns[name](x, axis), reference(x, axis=axis))
        assert ns[name](np.zeros((0, 3)), 1).shape == (0,)
        for shape, axis in (((3, 0), 1), ((0, 3), 0)):
            with pytest.raises(ValueError):
                ns[name](np.zeros(shape), axis)
        cube = rng.standard_normal((2, 3, 4))
        np.testing.assert_array_equal(ns[name](cube, 1), reference(cube, axis=1))


@pytest.mark.numba
@pytest.mark.parametrize("name, op", [("add_at", np.add), ("subtract_at", np.subtract)])
def test_overload_forms_update_elements_and_rows_in_place(name, op):
    """The Numba forms of add_at/subtract_at (written into the caller) update an element of a
    vector and a row of a matrix in place, as NumPy's ``a[i] += v`` does, plain and compiled;
    a module lowered for Numba's overloads takes them."""
    import numba

    ns = {"np": np, "numba": numba}
    exec(OVERLOAD_FORMS[name], ns)
    helper = ns[name]

    @numba.njit
    def compiled(a, i, v):
        helper(a, i, v)

    for run in (helper, compiled):
        a, b = np.arange(4.0), np.arange(6.0).reshape(3, 2)
        want_a, want_b = a.copy(), b.copy()
        want_a[2] = op(want_a[2], 0.5)
        want_b[1] = op(want_b[1], [1.0, -1.0])
        run(a, 2, 0.5)
        run(b, 1, np.array([1.0, -1.0]))
        np.testing.assert_array_equal(a, want_a)
        np.testing.assert_array_equal(b, want_b)
    source = "import numpy as np\n\n\ndef f(a0, w):\n    a = a0.copy()\n" \
             "    for c in range(2):\n        a[c] += w\n    return a\n"
    text = dialect.render(dialect.lower_source(source, entries=["f"], numba_overloads=True))
    if name == "add_at":
        assert "inline='always'" in text and "add_at(a, c, w)" in text, text


@pytest.mark.numba
def test_batched_outer_is_the_broadcast_product():
    """a[:, :, None] * b[:, None, :]: one loop nest for float64 matrices with as many rows
    (strided views too); other dtypes, a batch of one against many and other ranks take the
    expression itself."""
    import numba
    ns = _helper_namespace("batched_outer", compiled=True)
    plain = ns["batched_outer"]
    compiled = numba.njit(lambda a, b: plain(a, b))
    rng = np.random.default_rng(12)
    cases = [(rng.standard_normal((5, 3)), rng.standard_normal((5, 4))),
             (rng.standard_normal((6, 8))[::2, 1::3], rng.standard_normal((3, 2))),
             (rng.standard_normal((0, 3)), rng.standard_normal((0, 2))),
             (rng.standard_normal((1, 3)), rng.standard_normal((4, 2))),
             (rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 2))),
             (np.arange(6).reshape(2, 3), np.arange(4).reshape(2, 2)),
             (rng.standard_normal((2, 2, 3)), rng.standard_normal((2, 3)))]
    for a, b in cases:
        expected = a[:, :, None] * b[:, None, :]
        for fn in (plain, compiled):
            got = fn(a, b)
            assert got.shape == expected.shape and got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)


@pytest.mark.numba
def test_jit_writes_a_batched_outer_product_as_batched_outer():
    """vmap of a dense layer's weight gradient: the per-example outer products."""
    def loss(w, x):
        return np.sum(np.tanh(np.dot(w, x)) ** 2)

    rng = np.random.default_rng(13)
    w, xs = rng.standard_normal((4, 3)), rng.standard_normal((7, 3))
    compiled = jit(ad.vmap(ad.grad(loss), in_axes=(None, 0)), batching="vectorized")
    want = np.stack([ad.grad(loss)(w, x) for x in xs])
    np.testing.assert_allclose(compiled(w, xs), want, rtol=1e-12, atol=1e-14)
    assert "batched_outer(" in compiled.source, compiled.source
    lowered = dialect.lower_source("def f(a, b):\n    return b[:, None, :] * a[:, :, None]\n",
                                   numba_overloads=True)
    text = "\n".join(unparse(fn) for fn in lowered.functions if fn.name == "f")
    assert "batched_outer(a, b)" in text, text


@pytest.mark.numba
@pytest.mark.parametrize("kind", ["max", "min"])
def test_whole_max_and_min_are_numpys(kind):
    """whole_max/whole_min (np.max/np.min of a whole array in a module lowered for Numba's
    overloads): NumPy's value for vectors of any layout, C and Fortran matrices, a number, a
    NaN anywhere (returned), and NumPy's error for an empty array; plain and compiled."""
    import numba

    from codegen.helpers import OVERLOAD_FORMS
    ns = {"np": np, "numba": numba}
    exec(OVERLOAD_FORMS[f"whole_{kind}"], ns)
    helper = ns[f"whole_{kind}"]
    compiled = numba.njit(lambda a: helper(a))
    reference = getattr(np, kind)
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((4, 5))
    values = [rng.standard_normal(7), matrix[:, 2], matrix[1], matrix, np.asfortranarray(matrix),
              np.array([np.nan, 1.0, 2.0]), np.array([1.0, np.nan, -2.0]), np.array([3.0]),
              2.5]
    for value in values:
        for run in (helper, compiled):
            got, want = run(value), reference(value)
            assert got == want or (np.isnan(got) and np.isnan(want)), (value, got, want)
    for run in (helper, compiled):
        with pytest.raises(ValueError, match="zero-size array"):
            run(np.zeros(0))
    source = f"import numpy as np\n\n\ndef f(x):\n    return np.{kind}(x) + np.{kind}(x, axis=0)\n"
    text = dialect.render(dialect.lower_source(source, entries=["f"], numba_overloads=True))
    assert f"whole_{kind}(x)" in text and f"{kind}_axis(x, 0)" in text, text
