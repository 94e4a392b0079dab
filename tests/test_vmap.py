"""vmap: every primitive's batching rule against a Python loop over examples, JAX's in_axes /
out_axes semantics, control flow, compositions with grad and with itself, the seed tutorials'
examples, and the generated source.

References are independent of the code under test: a Python loop calling the per-example
function on each example (``loop_reference``), central finite differences, or exact values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import vmap
from autodiff_ast.batching import BatchingError
from autodiff_ast.types import abstract_of

B = 4  # examples per batch in the table-driven tests


# ---------------------------------------------------------------- references
def _example(value, axis, i):
    return value if axis is None else np.take(value, i, axis=axis)


def loop_reference(f, args, in_axes, out_axes=0, size=None):
    """f on each example in a Python loop, results stacked along out_axes."""
    if size is None:
        size = next(np.shape(a)[ax] for a, ax in zip(args, in_axes) if ax is not None)
    outs = [f(*[_example(a, ax, i) for a, ax in zip(args, in_axes)]) for i in range(size)]
    if isinstance(outs[0], tuple):
        axes = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(outs[0])
        return tuple(np.stack([np.asarray(o[k]) for o in outs], axis=ax)
                     for k, ax in enumerate(axes))
    return np.stack([np.asarray(o) for o in outs], axis=out_axes)


def assert_same(got, want, rtol=1e-10, atol=1e-12):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == bool or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def flat_text(source):
    """Generated source as one line of words, comment markers dropped (comments wrap)."""
    return " ".join(source.replace("#", " ").split())


def numeric_grad(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = eps
        out[idx] = (f(x + step) - f(x - step)) / (2 * eps)
    return out


# ---------------------------------------------------------------- argument makers
def _draw(spec, rng):
    """One example's value: a shape (normal floats), ('pos', shape), ('int', high, shape),
    ('bool', shape), ('spd', n) (a well-conditioned matrix) or ('const', value)."""
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        kind = spec[0]
        if kind == "pos":
            return rng.uniform(0.5, 2.0, size=spec[1]) if spec[1] else float(rng.uniform(0.5, 2))
        if kind == "int":
            value = rng.integers(0, spec[1], size=spec[2])
            return value if spec[2] else int(value)
        if kind == "bool":
            return rng.standard_normal(spec[1]) > 0
        if kind == "spd":
            a = rng.standard_normal((spec[1], spec[1]))
            return a @ a.T + spec[1] * np.eye(spec[1])
        if kind == "unit":
            return rng.uniform(-0.9, 0.9, size=spec[1])
        raise ValueError(spec)
    if spec == ():
        return float(rng.standard_normal())
    return rng.standard_normal(spec)


def _batched(spec, axis, rng):
    examples = [np.asarray(_draw(spec, rng)) for _ in range(B)]
    return np.stack(examples, axis=axis)


def run_case(f, specs, in_axes, out_axes=0, rtol=1e-10):
    rng = np.random.default_rng(1)
    args = [_batched(s, ax if ax is None or ax >= 0 else np.ndim(_draw(s, rng)) + 1 + ax, rng)
            if ax is not None else _draw(s, rng) for s, ax in zip(specs, in_axes)]
    batched = vmap(f, in_axes=in_axes, out_axes=out_axes)
    got = batched(*args)
    want = loop_reference(f, args, [None if ax is None else ax for ax in in_axes], out_axes)
    assert_same(got, want, rtol=rtol)
    return batched


def _variants(specs):
    """Several in_axes for one table entry: all mapped, each one alone, last axes."""
    n = len(specs)
    out = [(0,) * n]
    if n > 1:
        out += [tuple(0 if j == k else None for j in range(n)) for k in range(n)]
    if any(_rank(s) >= 1 for s in specs):
        out.append(tuple(-1 if _rank(s) >= 1 else 0 for s in specs))
    return out


def _rank(spec):
    if isinstance(spec, tuple) and spec and isinstance(spec[0], str):
        return {"pos": lambda s: len(s[1]) if s[1] else 0, "int": lambda s: len(s[2]),
                "bool": lambda s: len(s[1]), "spd": lambda s: 2,
                "unit": lambda s: len(s[1])}[spec[0]](spec)
    return len(spec)


V, M, M2 = (5,), (3, 5), (5, 2)
KNOTS = np.array([-1.5, -0.5, 0.0, 0.7, 1.5])  # np.interp's xp (normal draws fall outside too)
BINS = np.array([0, 2, 2, 1, 0])  # np.bincount's bins for a weight vector of length V

# (id, per-example function, argument specs). One line per lambda: the front end reads its
# source.
TABLE = [
    # elementwise, unary
    ("sin", lambda x: np.sin(x), [V]),
    ("tanh", lambda x: np.tanh(x), [M]),
    ("exp_scalar", lambda x: np.exp(x), [()]),
    ("log", lambda x: np.log(x), [("pos", V)]),
    ("sqrt", lambda x: np.sqrt(x), [("pos", M)]),
    ("abs", lambda x: np.abs(x), [V]),
    ("neg", lambda x: -x, [V]),
    ("square", lambda x: np.square(x), [V]),
    ("floor", lambda x: np.floor(x), [V]),
    ("sign", lambda x: np.sign(x), [V]),
    ("arctanh", lambda x: np.arctanh(x), [("unit", V)]),
    ("math_exp", lambda x: math.exp(x) + math.sin(x), [()]),
    ("builtin_abs", lambda x: abs(x), [()]),
    ("builtin_max", lambda x, y: max(x, y), [(), ()]),
    ("float_of", lambda x: float(x) * 2.0, [()]),
    # elementwise, binary (broadcasting between per-example ranks included)
    ("add", lambda x, y: x + y, [V, V]),
    ("sub_scalar", lambda x, y: x - y, [V, ()]),
    ("mul_matrix_vector", lambda x, y: x * y, [M, V]),
    ("div_vector_matrix", lambda x, y: x / y, [V, ("pos", M)]),
    ("scalar_times_matrix", lambda s, m: s * m, [(), M]),
    ("pow_const", lambda x: x ** 3, [V]),
    ("pow_base", lambda x: 2.0 ** x, [V]),
    ("power", lambda x, y: np.power(x, y), [("pos", V), V]),
    ("maximum", lambda x, y: np.maximum(x, y), [V, V]),
    ("arctan2", lambda x, y: np.arctan2(x, y), [M, V]),
    ("where", lambda x, y: np.where(x > 0, x, y), [V, V]),
    ("clip", lambda x: np.clip(x, -0.5, 0.5), [M]),
    ("compare", lambda x, y: x > y, [V, ()]),
    ("logical", lambda x, y: np.logical_and(x > 0, y < 0), [V, V]),
    ("mod", lambda x: x % 1.5, [V]),
    # reductions
    ("sum", lambda x: np.sum(x), [M]),
    ("sum_axis0", lambda x: np.sum(x, axis=0), [M]),
    ("sum_axis_neg", lambda x: np.sum(x, axis=-1), [M]),
    ("sum_keepdims", lambda x: np.sum(x, axis=1, keepdims=True), [M]),
    ("sum_method", lambda x: x.sum(), [V]),
    ("mean", lambda x: np.mean(x), [M]),
    ("mean_axis", lambda x: np.mean(x, axis=1), [M]),
    ("prod", lambda x: np.prod(x, axis=0), [M]),
    ("max", lambda x: np.max(x), [M]),
    ("min_axis", lambda x: np.min(x, axis=0), [M]),
    ("var", lambda x: np.var(x, axis=1), [M]),
    ("std_ddof", lambda x: np.std(x, ddof=1), [V]),
    ("argmax", lambda x: np.argmax(x), [M]),
    ("argmin_axis", lambda x: np.argmin(x, axis=1), [M]),
    ("argsort", lambda x: np.argsort(x), [V]),
    ("cumsum", lambda x: np.cumsum(x), [M]),
    ("cumsum_axis", lambda x: np.cumsum(x, axis=1), [M]),
    ("cumprod", lambda x: np.cumprod(x), [M]),
    ("cumprod_axis", lambda x: np.cumprod(x, axis=0), [M]),
    ("median", lambda x: np.median(x), [M]),
    ("median_axis", lambda x: np.median(x, axis=1, keepdims=True), [M]),
    ("nansum", lambda x: np.nansum(x, axis=0), [M]),
    ("nanmean", lambda x: np.nanmean(x), [M]),
    ("ptp", lambda x: np.ptp(x), [M]),
    ("ptp_axis", lambda x: np.ptp(x, axis=0), [M]),
    ("average", lambda x: np.average(x, axis=1), [M]),
    ("average_weights", lambda x, w: np.average(x, weights=w), [M, ("pos", M)]),
    ("average_weights_axis", lambda x, w: np.average(x, axis=0, weights=w, keepdims=True),
     [M, ("pos", M)]),
    ("average_vector_weights", lambda x, w: np.average(x, axis=1, weights=w), [M, ("pos", V)]),
    ("diff", lambda x: np.diff(x), [M]),
    ("diff_axis", lambda x: np.diff(x, 2, axis=0), [(4, 5)]),
    ("take", lambda x: np.take(x, np.array([0, 4, 0, -1])), [M]),
    ("take_axis", lambda x: np.take(x, np.array([[0, 1], [1, -1]]), axis=1), [M]),
    ("take_int", lambda x: np.take(x, 2, axis=-1), [M]),
    ("take_batched_indices", lambda x, i: np.take(x, i, axis=0), [M, ("int", 3, (2,))]),
    ("repeat", lambda x: np.repeat(x, 2), [M]),
    ("repeat_axis", lambda x: np.repeat(x, np.array([1, 0, 2]), axis=0), [M]),
    ("repeat_axis_neg", lambda x: np.repeat(x, 3, axis=-1), [M]),
    ("atleast_1d", lambda x: np.atleast_1d(x), [()]),
    ("atleast_2d", lambda x: np.atleast_2d(x) * 2.0, [V]),
    ("atleast_3d", lambda x, y: np.atleast_3d(x) + np.atleast_3d(y), [M, ()]),
    ("all", lambda x: np.all(x > -1.0), [M]),
    ("any", lambda x: np.any(x > 1.0), [V]),
    ("count_nonzero", lambda x: np.count_nonzero(x > 0), [M]),
    ("allclose", lambda x, y: np.allclose(x, y), [V, V]),
    # shape functions
    ("reshape", lambda x: np.reshape(x, (5, 3)), [M]),
    ("reshape_method", lambda x: x.reshape(-1), [M]),
    ("ravel", lambda x: np.ravel(x), [M]),
    ("squeeze", lambda x: np.squeeze(x), [(1, 5)]),
    ("expand_dims", lambda x: np.expand_dims(x, -1), [V]),
    ("transpose", lambda x: np.transpose(x), [M]),
    ("transpose_axes", lambda x: np.transpose(x, (1, 2, 0)), [(2, 3, 4)]),
    ("T", lambda x: x.T, [M]),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 2), [(2, 3, 4)]),
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1), [(2, 3, 4)]),
    ("flip", lambda x: np.flip(x), [M]),
    ("flip_axis", lambda x: np.flip(x, 1), [M]),
    ("fliplr", lambda x: np.fliplr(x), [M]),
    ("flipud", lambda x: np.flipud(x), [V]),
    ("rot90", lambda x: np.rot90(x), [M]),
    ("rot90_axes", lambda x: np.rot90(x, 3, axes=(-1, 0)), [(2, 3, 4)]),
    ("roll", lambda x: np.roll(x, 2), [M]),
    ("roll_axis", lambda x: np.roll(x, 1, 0), [M]),
    ("broadcast_to", lambda x: np.broadcast_to(x, (2, 5)), [V]),
    ("tile", lambda x: np.tile(x, (2, 1)), [V]),
    ("len_shape_size", lambda x: x * len(x) + x.shape[1] + x.size + x.ndim, [M]),
    ("np_shape", lambda x: np.zeros(np.shape(x)) + x, [M]),
    # joins
    ("concatenate", lambda x, y: np.concatenate([x, y]), [V, V]),
    ("concatenate_axis", lambda x, y: np.concatenate((x, y), axis=1), [M, M]),
    ("stack", lambda x, y: np.stack([x, y]), [V, V]),
    ("stack_axis", lambda x, y: np.stack([x, y], axis=1), [V, V]),
    ("hstack", lambda x, y: np.hstack([x, y]), [V, V]),
    ("vstack", lambda x, y: np.vstack([x, y]), [V, V]),
    ("array_of_scalars", lambda x, y: np.array([x, y, x * y]), [(), ()]),
    ("column_stack", lambda x, y: np.column_stack((x, y)), [V, (5, 2)]),
    ("column_stack_scalars", lambda x, y: np.column_stack((x, y)), [(), ()]),
    ("dstack", lambda x, y: np.dstack((x, y)), [V, (1, 5)]),
    ("dstack_3d", lambda x, y, z: np.dstack([x, y, z]), [(3, 5, 2), M, M]),
    ("row_stack", lambda x, y: np.row_stack((x, y)), [V, M]),
    # creators
    ("zeros_like", lambda x: np.zeros_like(x) + 1.0, [V]),
    ("ones_like", lambda x: np.ones_like(x) * x, [M]),
    ("full_like", lambda x, y: np.full_like(x, y), [V, ()]),
    ("full", lambda y: np.full((2, 3), y), [()]),
    # products
    ("dot_vv", lambda a, b: np.dot(a, b), [V, V]),
    ("dot_mv", lambda a, b: np.dot(a, b), [M, V]),
    ("dot_vm", lambda a, b: np.dot(a, b), [V, M2]),
    ("dot_mm", lambda a, b: np.dot(a, b), [M, M2]),
    ("dot_scalar", lambda a, b: np.dot(a, b), [(), V]),
    ("matmul_op", lambda a, b: a @ b, [M, M2]),
    ("matmul_mv", lambda a, b: np.matmul(a, b), [M, V]),
    ("matmul_stack", lambda a, b: np.matmul(a, b), [(2, 3, 5), M2]),
    ("inner_vv", lambda a, b: np.inner(a, b), [V, V]),
    ("inner_mm", lambda a, b: np.inner(a, b), [M, M]),
    ("vdot", lambda a, b: np.vdot(a, b), [V, V]),
    ("outer", lambda a, b: np.outer(a, b), [V, (3,)]),
    ("kron", lambda a, b: np.kron(a, b), [V, (3,)]),
    ("kron_matrices", lambda a, b: np.kron(a, b), [M, M2]),
    ("kron_vector_matrix", lambda a, b: np.kron(a, b), [V, M]),
    ("einsum", lambda a, b: np.einsum("ij,jk->ik", a, b), [M, M2]),
    ("einsum_implicit", lambda a: np.einsum("ii", a), [(3, 3)]),
    ("multi_dot", lambda a, b, c: np.linalg.multi_dot([a, b, c]), [M, M2, (2, 3)]),
    ("multi_dot_vectors", lambda a, b, c: np.linalg.multi_dot([a, b, c]), [(3,), M, V]),
    ("tensordot", lambda a, b: np.tensordot(a, b), [(2, 3, 5), M]),
    ("tensordot_pairs", lambda a, b: np.tensordot(a, b, axes=([0], [1])), [M, (2, 3)]),
    ("cross", lambda a, b: np.cross(a, b), [(3,), (3,)]),
    ("cross_stack", lambda a, b: np.cross(a, b), [(2, 3), (3,)]),
    ("trace", lambda a: np.trace(a), [(3, 4)]),
    ("diag_vector", lambda a: np.diag(a), [V]),
    ("diag_matrix", lambda a: np.diag(a), [(4, 4)]),
    ("diagflat", lambda a: np.diagflat(a), [M]),
    ("diagflat_k", lambda a: np.diagflat(a, 2), [V]),
    ("diagflat_k_neg", lambda a: np.diagflat(a, k=-1), [V]),
    ("norm", lambda a: np.linalg.norm(a), [V]),
    ("norm_matrix", lambda a: np.linalg.norm(a), [M]),
    ("norm_axis", lambda a: np.linalg.norm(a, axis=0), [M]),
    ("norm_fro", lambda a: np.linalg.norm(a, "fro"), [M]),
    ("norm_axis_keepdims", lambda a: np.linalg.norm(a, axis=1, keepdims=True), [M]),
    ("norm_keepdims", lambda a: np.linalg.norm(a, keepdims=True), [M]),
    ("norm_one", lambda a: np.linalg.norm(a, 1), [V]),
    ("norm_inf_axis", lambda a: np.linalg.norm(a, np.inf, axis=1), [M]),
    ("norm_minus_inf", lambda a: np.linalg.norm(a, ord=-np.inf), [V]),
    ("norm_two_axis", lambda a: np.linalg.norm(a, 2, 0), [M]),
    ("solve_vector", lambda a, b: np.linalg.solve(a, b), [("spd", 3), (3,)]),
    ("solve_matrix", lambda a, b: np.linalg.solve(a, b), [("spd", 3), (3, 2)]),
    ("inv", lambda a: np.linalg.inv(a), [("spd", 3)]),
    ("det", lambda a: np.linalg.det(a), [("spd", 3)]),
    ("slogdet", lambda a: np.linalg.slogdet(a)[1], [("spd", 3)]),
    ("eigvalsh", lambda a: np.linalg.eigvalsh(a), [("spd", 3)]),
    ("eigh", lambda a: np.linalg.eigh(a)[0][:, None] * np.linalg.eigh(a)[1] ** 2, [("spd", 3)]),
    # polynomials, statistics, interpolation
    ("polyval", lambda p, x: np.polyval(p, x), [(4,), M]),
    ("polyval_scalar", lambda p, x: np.polyval(p, x), [(3,), ()]),
    ("cov", lambda m: np.cov(m), [M]),
    ("cov_rowvar_ddof", lambda m: np.cov(m, rowvar=False, ddof=0), [M]),
    ("cov_vector_bias", lambda m: np.cov(m, bias=True), [V]),
    ("corrcoef", lambda m: np.corrcoef(m), [M]),
    ("corrcoef_rowvar", lambda m: np.corrcoef(m, rowvar=False), [M]),
    ("interp", lambda x, fp: np.interp(x, KNOTS, fp), [M, V]),
    ("trapezoid", lambda y, x: np.trapezoid(y, x), [M, V]),
    ("trapezoid_axis0_dx", lambda y: np.trapezoid(y, dx=0.5, axis=0), [M]),
    ("convolve", lambda a, v: np.convolve(a, v), [V, V]),
    ("convolve_valid", lambda a, v: np.convolve(a, v, "valid"), [V, (3,)]),
    ("searchsorted", lambda x: np.searchsorted(KNOTS, x, side="right"), [M]),
    ("bincount", lambda w: np.bincount(BINS, weights=w, minlength=4), [V]),
    ("bincount_short", lambda w: np.bincount(BINS, weights=w * 2.0), [V]),
    # indexing
    ("slice", lambda x: x[1:3], [V]),
    ("step_slice", lambda x: x[::2], [M]),
    ("column", lambda x: x[:, 0], [M]),
    ("row_and_slice", lambda x: x[1, 2:], [M]),
    ("newaxis", lambda x: x[None, :] + x[:, None], [V]),
    ("ellipsis", lambda x: x[..., 0], [(2, 3, 4)]),
    ("negative_index", lambda x: x[-1], [M]),
    ("fancy_constant", lambda x: x[np.array([0, 2, 2])], [V]),
    ("gather_int", lambda x, i: x[i], [V, ("int", 5, ())]),
    ("gather_row", lambda x, i: x[i] * 2.0, [M, ("int", 3, ())]),
    ("gather_column", lambda x, i: x[:, i], [M, ("int", 5, ())]),
    ("gather_pair", lambda x, i, j: x[i, j], [M, ("int", 3, ()), ("int", 5, ())]),
    ("gather_array", lambda x, idx: x[idx], [V, ("int", 5, (3,))]),
    ("gather_columns", lambda x, idx: x[:, idx] * 2.0, [M, ("int", 5, (2,))]),
    ("mask_unbatched", lambda x: x[np.array([True, False, True, True, False])], [V]),
]


@pytest.mark.parametrize("entry", TABLE, ids=[t[0] for t in TABLE])
def test_batching_rule_matches_a_loop(entry):
    _, f, specs = entry
    for axes in _variants(specs):
        if any(isinstance(s, tuple) and s and s[0] in ("int", "bool") and ax not in (0, None)
               for s, ax in zip(specs, axes)):
            continue
        run_case(f, specs, axes)


def test_table_covers_every_rule_family():
    from autodiff_ast.rules import all_rules
    from autodiff_ast.rules.batching import rule_for
    missing = sorted(n for n in all_rules() if rule_for(n) is None)
    assert missing == []


# ---------------------------------------------------------------- in-place writes and loops
def write_rows(x, i):
    y = np.zeros((3, 5))
    y[i] = x
    y[0, 1:3] = x[:2] * 2.0
    y[:, 4] += x[0]
    return y


def running_sum(x):
    s = 0.0
    out = np.zeros_like(x)
    for k in range(len(x)):
        s = s + x[k]
        out[k] = s
    return out


def over_rows(x):
    total = np.zeros(x.shape[1])
    for row in x:
        total = total + np.tanh(row)
    return total


def halve_until_small(x, n):
    k = 0
    while k < n:
        x = x * 0.5
        k = k + 1
    return x


def branch_on_static(x, flag):
    if flag > 0:
        return x * 2.0
    return -x


@pytest.mark.parametrize("f, specs, axes", [
    (write_rows, [V, ("int", 3, ())], (0, 0)),
    (write_rows, [V, ("int", 3, ())], (0, None)),
    (write_rows, [V, ("int", 3, ())], (None, 0)),
    (running_sum, [V], (0,)),
    (running_sum, [V], (1,)),
    (over_rows, [M], (0,)),
    (halve_until_small, [V, ("int", 4, ())], (0, None)),
    (branch_on_static, [V, ("int", 2, ())], (0, None)),
], ids=["write_both", "write_value", "write_index", "running_sum", "running_sum_axis1",
        "for_over_rows", "while_unbatched", "if_unbatched"])
def test_loops_and_writes_stay_vectorized(f, specs, axes):
    batched = run_case(f, specs, axes)
    assert "vectorized variant" in batched.source
    assert "for i in range(" not in batched.source  # no loop over examples


def one_branch(x):
    if np.sum(x) > 0.0:
        y = np.tanh(x)
        z = 1.0
    else:
        y = x * x
        z = -1.0
    return y * z


def test_branch_on_batched_value_is_a_select():
    batched = run_case(one_branch, [V], (0,))
    assert "np.where" in batched.source
    assert "both branches run on the whole batch" in flat_text(batched.source)
    assert "for i in range(" not in batched.source


def empty_unless_positive(x):
    t = np.zeros((0,))
    if x[0] > 0.0:
        t = np.tanh(x)
    return np.sum(t) + np.mean(t * t) if t.size else 0.5 * np.sum(x)


def test_zero_size_start_set_in_one_branch_runs_once_per_example():
    # Each example's t is empty or of x's size: no batched array holds both, so no select.
    xs = np.array([[0.3, -0.2, 0.5], [-0.4, 0.1, 0.2], [0.7, 0.1, -0.9]])
    batched = vmap(empty_unless_positive)
    assert_same(batched(xs), np.array([empty_unless_positive(x) for x in xs]))
    assert "t is a zero-size array on one path" in flat_text(batched.source)


def exp2_or_copy(c, a):
    if np.sum(c) > 0.0:
        t = np.exp2(np.tanh(c))
    else:
        t = np.copy(c)
    return t * a


def sine_of_helper(c, a):
    return np.sum(np.sin(exp2_or_copy(c, a)))


def test_vmap_of_grad_through_a_value_saved_in_one_branch():
    # The helper's forward function saves np.tanh(c) in one branch only, over a zero-size
    # placeholder: examples that take different branches are batched with one select.
    cs = np.array([[[0.3], [-0.2], [0.5]], [[-0.4], [0.1], [-0.2]], [[0.9], [0.1], [0.2]]])
    a = np.array([0.1, 0.2, 0.3])
    grad = ad.grad(sine_of_helper)
    want = np.stack([numeric_grad(lambda c: sine_of_helper(c, a), c) for c in cs])
    batched = vmap(grad, in_axes=(0, None))
    assert_same(batched(cs, a), want, rtol=1e-6, atol=1e-8)
    assert "per-example loop" not in batched.source
    from autodiff_ast.jit import jit
    assert_same(jit(batched, batching="vectorized")(cs, a), want, rtol=1e-6, atol=1e-8)


def count_steps(n):
    steps = 0
    while n > 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps = steps + 1
    return steps


def repeat_by_value(x, k):
    total = np.zeros_like(x)
    for j in range(k):
        total = total + x * j
    return total


def write_in_branch(x):
    y = np.zeros_like(x)
    if x[0] > 0.0:
        y[0] = x[0]
    return y


@pytest.mark.parametrize("f, specs, axes, why", [
    (count_steps, [("int", 30, ())], (0,), "the while loop's condition differs between examples"),
    (repeat_by_value, [V, ("int", 5, ())], (None, 0), "the for loop's trip count differs"),
    (write_in_branch, [V], (0,), "its branches write in place"),
], ids=["while", "for", "if_with_write"])
def test_control_flow_on_batched_values_loops_over_examples(f, specs, axes, why):
    batched = run_case(f, specs, axes)
    source = batched.source
    assert "per-example loop variant" in source and why in flat_text(source)
    assert "for i in range(1, n_batch):" in source


def roll_by(x, s):
    return np.roll(x, s) * 2.0


def scatter_columns(x, idx):
    y = np.zeros((3, 5))
    y[:, idx] = x
    return y


def test_write_without_vectorized_form_runs_once_per_example():
    batched = run_case(scatter_columns, [(3, 2), ("int", 5, (2,))], (0, 0))
    assert "this write runs once per example" in batched.source


def clip_by_mask(x):
    y = x * 2.0
    y[y > 0.5] = 0.5
    return y * x


def test_write_through_a_mask_that_differs_per_example_runs_once_per_example():
    """`y[y > 0.5] = 0.5` keeps y's shape whatever the mask: batched, it is written once
    per example (it was refused as a result whose shape depends on the mask)."""
    batched = run_case(clip_by_mask, [V], (0,))
    assert "a boolean mask that differs per example: this write runs once per example" in \
        flat_text(batched.source)


def test_statement_without_vectorized_form_runs_once_per_example():
    batched = run_case(roll_by, [V, ("int", 4, ())], (0, 0))
    source = batched.source
    assert "vectorized variant" in source
    assert "a shift that differs per example: this line runs once per example" in source


def test_helpers_are_batched_for_their_own_pattern():
    batched = run_case(uses_helpers, [V, ()], (0, None))
    source = batched.source
    assert "def vmap_scale(" in source and "def vmap_uses_helpers(" in source


def scale(v, c):
    return v * c, np.sum(v)


def uses_helpers(x, c):
    y, total = scale(x, c)
    z, _ = scale(np.ones(3), c)  # not batched: called as it is
    return y + total + np.sum(z)


# ---------------------------------------------------------------- in_axes / out_axes
def pair(x, y):
    return x * y, np.sum(x)


def test_in_axes_forms(rng):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((3, 4))
    want = loop_reference(pair, [x, y], [0, 1])
    assert_same(vmap(pair, in_axes=(0, 1))(x, y), want)
    assert_same(vmap(pair, in_axes=[0, -1])(x, y), want)
    assert_same(vmap(pair, in_axes=(-2, 1))(x, y), want)
    same = rng.standard_normal(3)
    assert_same(vmap(pair, in_axes=(0, None))(x, same), loop_reference(pair, [x, same],
                                                                       [0, None]))
    assert_same(vmap(pair)(x, y.T), loop_reference(pair, [x, y.T], [0, 0]))


def test_out_axes_forms(rng):
    x = rng.standard_normal((4, 3))
    want = loop_reference(pair, [x, x], [0, 0], out_axes=(1, 0))
    assert_same(vmap(pair, out_axes=(1, 0))(x, x), want)
    assert_same(vmap(pair, out_axes=(-1, -1))(x, x), want)
    y = vmap(lambda a, b: a + b, in_axes=(1, None), out_axes=1)(x, rng.standard_normal(4))
    assert y.shape == (4, 3)


def test_unmapped_output_with_out_axes_none_and_broadcast(rng):
    x = rng.standard_normal((4, 3))
    shared = rng.standard_normal(3)
    value, mapped = vmap(lambda a, b: (np.sum(b), a * 2.0), in_axes=(0, None),
                         out_axes=(None, 0))(x, shared)
    assert np.shape(value) == () and np.isclose(value, np.sum(shared))
    assert_same(mapped, 2.0 * x)
    broadcast = vmap(lambda a, b: np.sum(b), in_axes=(0, None))(x, shared)
    assert_same(broadcast, np.full(4, np.sum(shared)))


def test_pytree_in_axes_and_dict_params(rng):
    params = {"W": rng.standard_normal((2, 3)), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((5, 3))
    want = np.stack([mlp_layer(params, x) for x in xs])
    assert_same(vmap(mlp_layer, in_axes=(None, 0))(params, xs), want)
    assert_same(vmap(mlp_layer, in_axes=({"W": None, "b": None}, 0))(params, xs), want)
    per_b = {"W": params["W"], "b": rng.standard_normal((5, 2))}
    got = vmap(mlp_layer, in_axes=({"W": None, "b": 0}, 0))(per_b, xs)
    assert_same(got, np.stack([mlp_layer({"W": per_b["W"], "b": per_b["b"][i]}, xs[i])
                               for i in range(5)]))


def mlp_layer(params, x):
    return np.tanh(np.dot(params["W"], x) + params["b"])


def test_keyword_arguments_are_mapped_on_axis_0(rng):
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    assert_same(vmap(pair, in_axes=(0,))(x, y=y), loop_reference(pair, [x, y], [0, 0]))


def test_axis_size_without_mapped_arguments(rng):
    w = rng.standard_normal(3)
    out = vmap(lambda a: np.sum(a), in_axes=None, axis_size=6)(w)
    assert_same(out, np.full(6, np.sum(w)))


def test_axis_name_is_accepted():
    f = vmap(lambda a: a * 2.0, axis_name="batch")
    assert f.axis_name == "batch"
    assert_same(f(np.ones((2, 3))), np.full((2, 3), 2.0))


@pytest.mark.parametrize("call, message", [
    (lambda: vmap(pair)(np.ones((3, 2)), np.ones((4, 2))),
     "argument x has size 3 along axis 0; argument y has size 4 along axis 0"),
    (lambda: vmap(pair, in_axes=(0, 1))(np.ones((3, 2)), np.ones((2, 5))),
     "argument x has size 3 along axis 0; argument y has size 5 along axis 1"),
    (lambda: vmap(pair, axis_size=5)(np.ones((3, 2)), np.ones((3, 2))), "axis_size is 5"),
    (lambda: vmap(pair, in_axes=(0, 2))(np.ones((3, 2)), np.ones((3, 2))),
     "map argument y along axis 2, but it has rank 2"),
    (lambda: vmap(pair)(np.ones(3), 2.0), "it is a scalar"),
    (lambda: vmap(pair, in_axes=(0, None, 0))(np.ones(3), np.ones(3)),
     "in_axes has 3 entries but the function was called with 2"),
    (lambda: vmap(pair, in_axes=(None, None))(np.ones(3), np.ones(3)),
     "needs at least one mapped argument, or axis_size"),
    (lambda: vmap(pair, out_axes=(None, 0))(np.ones((3, 2)), np.ones((3, 2))),
     "out_axes is None for output 0 of pair"),
    (lambda: vmap(pair, in_axes=(0.5, 0)), "must be built from ints and None"),
    (lambda: vmap(mlp_layer, in_axes=({"V": None}, 0))({"W": np.ones((2, 2)), "b": np.ones(2)},
                                                       np.ones((3, 2))),
     "does not match the structure"),
], ids=["sizes", "sizes_axes", "axis_size", "axis_range", "scalar", "in_axes_length",
        "nothing_mapped", "out_axes_none", "bad_axis_type", "tree_mismatch"])
def test_errors_are_clear(call, message):
    with pytest.raises(BatchingError) as info:
        call()
    assert message in flat_text(str(info.value))


def ranged(x, n):
    return np.arange(n) * x


def test_value_dependent_shape_names_the_line():
    """An output whose shape depends on the mapped values: each example runs on its own, and
    stacking their outputs raises, naming the line (in generated code: the batch's values
    decide it)."""
    with pytest.raises(ValueError) as info:
        vmap(ranged)(np.ones(3), np.array([2, 3, 4]))
    text = str(info.value)
    assert "test_vmap.py" in text and "np.arange(n) * x" in text and "different shape" in text
    np.testing.assert_allclose(vmap(ranged)(np.ones(3), np.array([2, 2, 2])),
                               np.tile(np.arange(2.0), (3, 1)))


def _positive_part_energy(x):
    return np.sum(x[x > 0] ** 2)


def _masked_update(x):
    y = x * 1.0
    y[x > 0.5] *= 3.0
    return np.sum(y ** 2)


@pytest.mark.parametrize("fn, expected", [
    (_positive_part_energy, lambda x: 2.0 * np.maximum(x, 0.0)),
    (_masked_update, lambda x: 2.0 * x * np.where(x > 0.5, 9.0, 1.0))])
def test_an_intermediate_of_per_example_shape_runs_each_example_on_its_own(fn, expected):
    """`x[x > 0]` has a shape of its own per example: vmap refused the function ("vmap cannot
    batch this line"); it runs per example now (its outputs keep one shape)."""
    from autodiff_ast.jit import jit
    xs = np.array([[1.0, -2.0, 3.0], [-1.0, 0.7, 0.2]])
    for batched in (vmap(ad.grad(fn)), jit(vmap(ad.grad(fn)))):
        np.testing.assert_allclose(batched(xs), np.stack([expected(x) for x in xs]),
                                   rtol=1e-12)
    np.testing.assert_allclose(vmap(fn)(xs), [fn(x) for x in xs], rtol=1e-12)


# ---------------------------------------------------------------- the seed tutorials' examples
def convolve(x, w):
    output = []
    for i in range(1, len(x) - 1):
        output.append(np.dot(x[i - 1:i + 2], w))
    return np.array(output)


def one_hot(y, k):
    ret = np.zeros(k)
    ret[y] = 1.0
    return ret


@pytest.fixture(scope="module")
def seed_batch():
    x = np.arange(5.0)
    w = np.array([2.0, 3.0, 4.0])
    return np.stack([x, x]), np.stack([w, w]), x, w


def test_seed_convolve(seed_batch):
    xs, ws, x, w = seed_batch
    batched = vmap(convolve)
    assert_same(batched(xs, ws), np.array([[11.0, 20.0, 29.0], [11.0, 20.0, 29.0]]))
    assert "vectorized variant" in batched.source
    assert "for i in range(1, x.shape[1] - 1):" in batched.source  # over positions


def test_seed_convolve_in_axes_1_out_axes_1(seed_batch):
    xs, ws, _, _ = seed_batch
    got = vmap(convolve, in_axes=1, out_axes=1)(xs.T, ws.T)
    assert_same(got, np.array([[11.0, 20.0, 29.0], [11.0, 20.0, 29.0]]).T)


def test_seed_convolve_in_axes_list(seed_batch):
    xs, _, _, w = seed_batch
    got = vmap(convolve, in_axes=[0, None])(xs, w)
    assert_same(got, np.array([[11.0, 20.0, 29.0], [11.0, 20.0, 29.0]]))


def test_seed_jit_vmap_convolve(seed_batch):
    from autodiff_ast.jit import jit
    xs, ws, _, _ = seed_batch
    compiled = jit(vmap(convolve))
    assert_same(compiled(xs, ws), np.array([[11.0, 20.0, 29.0], [11.0, 20.0, 29.0]]))
    assert "@numba.njit" in compiled.source


def test_seed_one_hot():
    batched = vmap(one_hot, in_axes=(0, None))
    got = batched(np.array([1, 3, 0]), 4)
    assert_same(got, np.eye(4)[[1, 3, 0]])
    assert "ret[np.arange(n_batch), y] = 1.0" in batched.source


def conv_loss(w, x):
    y = x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2]
    return np.sum(y * y)


def test_seed_per_example_gradients(rng):
    xs, w = rng.standard_normal((6, 10)), rng.standard_normal(3)
    per_example = vmap(ad.grad(conv_loss), in_axes=(None, 0))
    got = per_example(w, xs)
    want = np.stack([numeric_grad(lambda v, x=x: conv_loss(v, x), w) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    assert "vectorized variant" in per_example.source
    assert "for i in range(" not in per_example.source


# ---------------------------------------------------------------- compositions
def mlp_loss(params, x, y):
    h = np.tanh(np.dot(params["W1"], x) + params["b1"])
    out = np.dot(params["W2"], h) + params["b2"]
    return np.sum((out - y) ** 2)


@pytest.fixture(scope="module")
def mlp_data():
    rng = np.random.default_rng(3)
    params = {"W1": rng.standard_normal((4, 3)), "b1": rng.standard_normal(4),
              "W2": rng.standard_normal((2, 4)), "b2": rng.standard_normal(2)}
    return params, rng.standard_normal((5, 3)), rng.standard_normal((5, 2))


def test_vmap_of_grad_with_dict_params(mlp_data):
    params, xs, ys = mlp_data
    per_example = vmap(ad.grad(mlp_loss), in_axes=(None, 0, 0))(params, xs, ys)
    assert sorted(per_example) == ["W1", "W2", "b1", "b2"]
    for key, value in params.items():
        for i in range(len(xs)):
            want = numeric_grad(lambda v, key=key, i=i: mlp_loss({**params, key: v}, xs[i],
                                                                  ys[i]), value)
            np.testing.assert_allclose(per_example[key][i], want, rtol=1e-6, atol=1e-8)


def test_vmap_of_value_and_grad_returns_both(mlp_data):
    params, xs, ys = mlp_data
    values, grads = vmap(ad.value_and_grad(mlp_loss), in_axes=(None, 0, 0))(params, xs, ys)
    assert_same(values, np.array([mlp_loss(params, x, y) for x, y in zip(xs, ys)]))
    assert grads["W1"].shape == (5, 4, 3)


def test_grad_of_summed_vmap(rng):
    xs, w = rng.standard_normal((5, 10)), rng.standard_normal(3)
    batched = vmap(conv_loss, in_axes=(None, 0))

    def total(v, x):
        return np.sum(batched(v, x))
    got = ad.grad(total)(w, xs)
    want = numeric_grad(lambda v: sum(conv_loss(v, x) for x in xs), w)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    ad.check_grads(total, (w, xs), order=1, modes=("rev",))


def test_vmap_of_vmap(rng):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((6, 3))
    inner = vmap(lambda u, v: np.tanh(np.dot(u, v)), in_axes=(0, None))
    outer = vmap(inner, in_axes=(None, 0))
    got = outer(a, b)
    assert_same(got, np.array([[np.tanh(np.dot(u, v)) for u in a] for v in b]))
    assert outer.source.startswith('"""vmap(vmap(lambda), in_axes=(None, 0))')


def test_vmap_of_vmap_of_grad(rng):
    xs, ws = rng.standard_normal((3, 4, 8)), rng.standard_normal((3, 3))
    nested = vmap(vmap(ad.grad(conv_loss), in_axes=(None, 0)), in_axes=(0, 0))
    got = nested(ws, xs)
    for i in range(3):
        for j in range(4):
            want = numeric_grad(lambda v, x=xs[i, j]: conv_loss(v, x), ws[i])
            np.testing.assert_allclose(got[i, j], want, rtol=1e-6, atol=1e-8)


def test_grad_of_loop_and_select_variants(rng):
    xs = rng.standard_normal((5, 4))
    batched = vmap(one_branch)

    def total(x):
        return np.sum(batched(x))
    got = ad.grad(total)(xs)
    want = numeric_grad(total, xs)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_vmap_of_jacfwd_and_jacrev_of_vmap(rng):
    from autodiff_ast import jacobians as J
    x = rng.standard_normal((3, 4))
    per_example = vmap(J.jacfwd(np.tanh))(x)
    assert_same(per_example, np.stack([np.diag(1 - np.tanh(r) ** 2) for r in x]), rtol=1e-8)
    whole = J.jacrev(vmap(lambda r: np.sin(r) * 2.0))(x)
    want = np.zeros((3, 4, 3, 4))
    for i in range(3):
        want[i, :, i, :] = np.diag(2 * np.cos(x[i]))
    assert_same(whole, want, rtol=1e-8)


# ---------------------------------------------------------------- the generated source
def test_source_is_deterministic_standalone_and_says_why(tmp_path, run_isolated):
    first = vmap(convolve, in_axes=(0, None))
    first(np.ones((2, 6)), np.ones(3))
    second = vmap(convolve, in_axes=(0, None))
    second(np.ones((3, 7)), np.ones(3))
    assert first.source == second.source
    assert "autodiff_ast" not in first.source.split('"""', 2)[2]
    assert "vmap: vectorized variant" in first.source
    (tmp_path / "batched.py").write_text(first.source)
    result = run_isolated("import numpy as np\nimport batched\n"
                          "print(batched.vmap_convolve(np.ones((2, 5)), np.ones(3)).sum())",
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "18.0"


def test_loop_variant_source_is_standalone(tmp_path, run_isolated):
    batched = vmap(count_steps)
    batched(np.array([3, 4]))
    source = batched.source
    assert "def count_steps(n):" in source and "def vmap_count_steps(n):" in source
    (tmp_path / "steps.py").write_text(source)
    result = run_isolated("import numpy as np\nimport steps\n"
                          "print(steps.vmap_count_steps(np.array([1, 6, 7])).tolist())",
                          cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 8, 16]"


def test_vmap_of_generated_function(rng):
    """Other transforms may batch the functions they generate: vmap reads them as source."""
    grad_fn = ad.grad(conv_loss)
    w = rng.standard_normal(3)
    grad_fn(w, np.ones(10))
    generated = grad_fn.function_for({"w": abstract_of(w), "x": abstract_of(np.ones(10))})
    xs = rng.standard_normal((4, 10))
    got = vmap(generated, in_axes=(None, 0))(w, xs)
    assert_same(got, np.stack([grad_fn(w, x) for x in xs]), rtol=1e-10)


def test_unknown_statement_kind_falls_back_to_the_loop_variant():
    """A core statement batching does not know (a future kind) makes the per-example loop
    variant, not a failure."""
    import gast

    from autodiff_ast.batch_core import FunctionBatcher, ModuleBatcher
    from autodiff_ast.frontend import parse_function
    from autodiff_ast.normalize import Program, normalize_into, spec_of
    program = Program(reserved={"np"})
    core = normalize_into(program, parse_function(pair), {"x": spec_of(np.ones(3)),
                                                          "y": spec_of(np.ones(3))})
    strange = gast.Assert(test=gast.Name(id="x", ctx=gast.Load(), annotation=None,
                                         type_comment=None), msg=None)
    core.body.insert(0, gast.copy_location(strange, core.body[0]))
    result = FunctionBatcher(ModuleBatcher(program), core, (True, False)).run()
    assert result.variant == "loop"
    assert result.reason == "Assert statements have no batching rule"


def calls_transformed(w, x):
    return ad.grad(conv_loss)(w, x) * 2.0


def calls_vmap(w, xs):
    return np.sum(vmap(conv_loss, in_axes=(None, 0))(w, xs))


def test_transformed_functions_called_inside(rng):
    xs, w = rng.standard_normal((4, 8)), rng.standard_normal(3)
    got = vmap(calls_transformed, in_axes=(None, 0))(w, xs)
    assert_same(got, np.stack([2.0 * ad.grad(conv_loss)(w, x) for x in xs]), rtol=1e-10)
    batches = rng.standard_normal((3, 4, 8))
    got = vmap(calls_vmap, in_axes=(None, 0))(w, batches)
    assert_same(got, np.array([sum(conv_loss(w, x) for x in b) for b in batches]), rtol=1e-10)


def convolve_loss(w, x):
    return np.sum(convolve(x, w) ** 2)


def test_per_example_gradients_of_the_seed_convolve(rng):
    # grad of a loop that builds a list pops list tapes; vmap pops batched elements
    xs, w = rng.standard_normal((3, 7)), rng.standard_normal(3)
    got = vmap(ad.grad(convolve_loss), in_axes=(None, 0))(w, xs)
    want = np.stack([numeric_grad(lambda v, x=x: convolve_loss(v, x), w) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def loss_and_peak(w, x):
    return np.sum(np.tanh(w * x)), np.max(x)


def test_vmap_of_grad_with_argnums_and_aux(rng):
    xs, w = rng.standard_normal((4, 3)), rng.standard_normal(3)
    (gw, gx), aux = vmap(ad.grad(loss_and_peak, argnums=(0, 1), has_aux=True),
                         in_axes=(None, 0))(w, xs)
    for i, x in enumerate(xs):
        np.testing.assert_allclose(gw[i], numeric_grad(
            lambda v, x=x: loss_and_peak(v, x)[0], w), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gx[i], numeric_grad(
            lambda v: loss_and_peak(w, v)[0], x), rtol=1e-6, atol=1e-8)
    assert_same(aux, xs.max(axis=1))


def test_grad_through_moved_axes(rng):
    xs, w = rng.standard_normal((10, 5)), rng.standard_normal(3)
    batched = vmap(lambda v, x: conv_loss(v, x) * x[:3], in_axes=(None, 1), out_axes=1)

    def total(v, x):
        return np.sum(batched(v, x) ** 2)
    want = numeric_grad(lambda v: total(v, xs), w)
    np.testing.assert_allclose(ad.grad(total)(w, xs), want, rtol=1e-6, atol=1e-8)


def _newton_sqrt(a):
    x = a * 1.0
    it = 0
    while it < 20 and np.abs(x * x - a) > 1e-12:
        x = 0.5 * (x + a / x)
        it += 1
    return x


def _calls_newton(a):
    return _newton_sqrt(a)


def test_a_helper_whose_tapes_differ_in_length_between_examples():
    """The helper's while loop runs a different number of steps per example, so its tapes
    (lists) differ in length: its per-example loop returned them into np.empty (an
    AttributeError in generated code); the caller runs per example now."""
    from autodiff_ast.jit import jit
    a = np.array([2.0, 1.8, 9.0])
    expected = 0.5 / np.sqrt(a)
    np.testing.assert_allclose(ad.vmap(ad.grad(_calls_newton))(a), expected, rtol=1e-10)
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(_calls_newton)))(a), expected, rtol=1e-10)


def _scaled_sin(x, s=2.0):
    return np.sin(x) * s


def _scaled_sin_keyword(x, *, s=2.0):
    return np.sin(x) * s


@pytest.mark.parametrize("fn", [_scaled_sin, _scaled_sin_keyword])
def test_transforms_of_vmap_leave_a_default_unmapped(fn):
    """JAX maps only the arguments passed: a parameter left to its default is a constant.
    vjp/jacrev/jvp of vmap(f) mapped the default along axis 0 ("it is a scalar"), and grad
    of a function calling vmap(f)(z) counted 1 mapped value for 2 parameters."""
    xs = np.array([[0.5, -1.0, 2.0], [0.1, 0.2, 0.3]])
    v = np.array([[1.0, 0.5, -2.0], [0.3, -0.1, 1.0]])
    cos2 = 2.0 * np.cos(xs)
    (cotangent,) = ad.vjp(vmap(fn), xs)[1](v)
    np.testing.assert_allclose(cotangent, cos2 * v, rtol=1e-14)
    _, tangent = ad.jvp(vmap(fn), (xs,), (v,))
    np.testing.assert_allclose(tangent, cos2 * v, rtol=1e-14)
    jac = ad.jacrev(vmap(fn))(xs)
    np.testing.assert_allclose(np.einsum("ijij->ij", jac), cos2, rtol=1e-14)
    assert np.count_nonzero(jac) == xs.size
    np.testing.assert_allclose(ad.grad(lambda z: np.sum(vmap(fn)(z)))(xs), cos2, rtol=1e-14)


def _window(x, i):
    return x[i:i + 2]


def _tail_energy(x, i):
    return np.sum(x[i:] ** 2)


def test_a_slice_whose_bounds_differ_per_example_loops_over_examples():
    # (an IndexError inside the batching rule: the slice's bound was batched, but the rule
    # looked for an index array)
    x = np.arange(24.0).reshape(6, 4)
    i = np.array([0, 2, 1, 0, 2, 1])
    windows = np.stack([_window(a, b) for a, b in zip(x, i)])
    np.testing.assert_allclose(vmap(_window)(x, i), windows, rtol=0)
    np.testing.assert_allclose(vmap(_tail_energy)(x, i),
                               [_tail_energy(a, b) for a, b in zip(x, i)], rtol=1e-14)
    expected = np.where(np.arange(4) >= i[:, None], 2.0 * x, 0.0)
    np.testing.assert_allclose(vmap(ad.grad(_tail_energy))(x, i), expected, rtol=1e-14)
