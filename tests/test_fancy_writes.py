"""Writes through an integer-array index that repeats a position (`y[idx] = v`,
`y[idx] += v`): NumPy keeps the last of the repeated writes, so only that entry of v reaches
y. The adjoint gave every entry the position's cotangent (reverse mode disagreed with finite
differences, 0.538 against 0.269); codegen/helpers.py's written_last keeps the last one.
Checked against central differences (check_grads, order 2) and explicit values."""

from __future__ import annotations

import numpy as np
import pytest
from test_api import numeric_grad

import autodiff_ast as ad
from autodiff_ast.jit import jit


def repeated_add(x):
    y = np.zeros(3)
    y[np.array([0, 0, 2])] += x[:3]
    return np.sum(y ** 2)


def repeated_rows(x):
    y = np.zeros((3, 2))
    y[np.array([1, -2, 0])] = x[:3, None] * np.ones((1, 2))
    return np.sum(y ** 2)


def repeated_in_a_loop(x):
    y = np.zeros(4)
    idx = np.array([3, 1, 3])
    for t in range(2):
        y[idx] = y[idx] + x[:3] * (t + 1)
    return np.sum(y ** 2)


def repeated_scalar(x):
    y = x * 1.0
    y[np.array([1, 1, 3])] = x[0] * 2.0
    return np.sum(y ** 2)


X = np.array([0.3, 0.5, 0.7, 0.1])
CASES = [repeated_add, repeated_rows, repeated_in_a_loop, repeated_scalar]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_repeated_positions_match_finite_differences(fn):
    ad.check_grads(fn, (X,), modes=("rev", "fwd"), order=2)


def test_explicit_values():
    # y = [x1, 0, x2]: x0's write is overwritten by x1's
    np.testing.assert_allclose(ad.grad(repeated_add)(X), [0.0, 2 * X[1], 2 * X[2], 0.0])
    # rows 1 and -2 are the same row: x1's write wins; row 0 gets x2
    np.testing.assert_allclose(ad.grad(repeated_rows)(X), [0.0, 4 * X[1], 4 * X[2], 0.0])
    # y[3] = 3 x2 and y[1] = 3 x1 after two steps (weights 1 and 2)
    np.testing.assert_allclose(ad.grad(repeated_in_a_loop)(X), [0.0, 18 * X[1], 18 * X[2], 0])


@pytest.mark.numba
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_jit_and_vmap_agree(fn):
    expected = ad.grad(fn)(X)
    np.testing.assert_allclose(jit(ad.grad(fn))(X), expected, rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(ad.grad(fn))(np.stack([X, 2 * X]))[0], expected,
                               rtol=1e-12)


# ---------------------------------------------------------------- several integer arrays
# `y[r, c] = v` (and `+=`) where the pairs (r[k], c[k]) repeat: NumPy keeps the last write of
# each element, so only that entry of v gets y's cotangent; the adjoint gave every entry the
# element's cotangent (set_pairs: 5.6 against finite differences' 0.0 for x0; add_pairs also
# read y's old value once per repeat: 16.6 against 13.4 for x4). reverse._last_write_mask
# combines the arrays into one position per write for codegen/helpers.py's last_writes.

R = np.array([0, 1, 0, 2])
C = np.array([1, 0, 1, 1])           # (0, 1) is written by entries 0 and 2
R_NEG = np.array([-3, 1, 0, 2])      # -3 is row 0 of three
D = np.array([0, 1, 0, 1])
COLS = np.array([2, 0, 2])
R_COLUMN = np.array([[0], [0], [1]])
C_ROW = np.array([1, 1, 0])           # broadcast with R_COLUMN: (0, 1) four times
IDX_2D = np.array([[1, 0], [1, 2]])
ONE_ROW = np.array([False, True, False])
TWICE = np.array([1, 1])


def set_pairs(x):
    y = np.zeros((3, 2))
    y[R, C] = x[:4] * 2.0
    return np.sum(y ** 2)


def add_pairs(x):
    y = np.ones((3, 2)) * x[4]
    y[R, C] += x[:4]
    return np.sum(y ** 2)


def negative_pairs(x):
    y = np.ones((3, 2)) * x[4]
    y[R_NEG, C] = np.sin(x[:4])
    return np.sum(y ** 3)


def three_arrays(x):
    y = np.zeros((3, 2, 2)) + x[4]
    y[R, C, D] = x[:4] ** 2
    return np.sum(y ** 2)


def pairs_of_rows(x):
    y = np.zeros((3, 2, 3))
    y[R, C] = x[:4, None] * x[None, 1:4]
    return np.sum(y ** 2)


def pairs_then_slice(x):
    y = np.zeros((3, 2, 3)) + x[4]
    y[R, C, :] += x[:4, None] * x[None, 1:4]
    return np.sum(y ** 2)


def slice_then_pairs(x):
    y = np.zeros((2, 3, 2)) + x[0]
    y[:, R, C] = x[None, :4] * np.array([[1.0], [2.0]])
    return np.sum(y ** 2)


def repeated_columns(x):
    y = np.zeros((2, 3)) + x[4]
    y[:, COLS] = x[None, :3] * np.array([[1.0], [3.0]])
    return np.sum(y ** 2)


def integer_apart(x):
    # the integer and the array are split by a slice: NumPy puts the written axis first
    y = np.zeros((2, 3, 3)) + x[4]
    y[1, :, COLS] = x[:3, None] * x[None, 1:4]
    return np.sum(y ** 2)


def broadcast_arrays(x):
    y = np.zeros((2, 3)) + x[4]
    y[R_COLUMN, C_ROW] = x[:3, None] * x[None, 1:4]
    return np.sum(y ** 2)


def matrix_index(x):
    y = np.zeros(3) + x[4]
    y[IDX_2D] = x[:4].reshape((2, 2))
    return np.sum(y ** 2)


def write_pairs(y, v):
    y[R, C] = v
    return y


def pairs_in_a_helper(x):
    y = np.ones((3, 2)) * x[4]
    y = write_pairs(y, x[:4] * 3.0)
    return np.sum(y ** 2)


def pairs_in_a_loop(x):
    y = np.zeros((3, 2))
    for t in range(3):
        y[R, C] = y[R, C] * x[4] + x[:4] * (t + 1)
    return np.sum(y ** 2)


def ellipsis_then_pairs(x):
    y = np.zeros((2, 3, 2)) + x[4]
    y[..., R, C] = x[None, :4] * np.array([[1.0], [2.0]])
    return np.sum(y ** 2)


def list_pairs(x):
    y = np.ones((3, 2)) * x[4]
    y[[0, 1, 0, 2], [1, 0, 1, 1]] = x[:4] * 2.0
    return np.sum(y ** 2)


def mask_and_array(x):
    # a mask with one True broadcasts against [1, 1]: element (1, 1) is written twice
    y = np.ones((3, 2)) * x[4]
    y[ONE_ROW, TWICE] = x[:2] * 2.0
    return np.sum(y ** 2)


X5 = np.array([0.3, 0.5, 0.7, 0.1, 0.9])
COMPILED = [set_pairs, add_pairs, negative_pairs, three_arrays, pairs_of_rows,
            pairs_then_slice, slice_then_pairs, repeated_columns, integer_apart,
            broadcast_arrays, matrix_index, pairs_in_a_helper, pairs_in_a_loop,
            ellipsis_then_pairs,
            list_pairs,  # (list displays: np.array(...) in the compiled module)
            mask_and_array]  # (the mask as index_array(ONE_ROW): its True positions)
PAIRS = COMPILED


def central_differences(f, x):
    """d f / d x by central differences, one coordinate at a time."""
    return numeric_grad(f, (x,))


@pytest.mark.parametrize("fn", PAIRS, ids=lambda f: f.__name__)
def test_several_index_arrays_match_finite_differences(fn):
    ad.check_grads(fn, (X5,), modes=("rev", "fwd"), order=2)


def test_several_index_arrays_explicit_values():
    # y[0, 1] = 2 x2 (x0's write lost), y[1, 0] = 2 x1, y[2, 1] = 2 x3
    np.testing.assert_allclose(ad.grad(set_pairs)(X5), [0.0, 8 * X5[1], 8 * X5[2],
                                                        8 * X5[3], 0.0])
    # y[0, 1] = x4 + x2 (y's old value read once), y[1, 0] = x4 + x1, y[2, 1] = x4 + x3,
    # three untouched entries x4
    y = np.full((3, 2), X5[4])
    y[0, 1] += X5[2]
    y[1, 0] += X5[1]
    y[2, 1] += X5[3]
    np.testing.assert_allclose(ad.grad(add_pairs)(X5),
                               [0.0, 2 * y[1, 0], 2 * y[0, 1], 2 * y[2, 1], 2 * np.sum(y)])


@pytest.mark.numba
@pytest.mark.parametrize("fn", COMPILED, ids=lambda f: f.__name__)
def test_several_index_arrays_compiled_and_batched(fn):
    batch = np.stack([X5, 2 * X5 - 0.1])
    expected = np.stack([central_differences(fn, x) for x in batch])
    np.testing.assert_allclose(ad.grad(fn)(X5), expected[0], atol=1e-6)
    np.testing.assert_allclose(jit(ad.grad(fn))(X5), expected[0], atol=1e-6)
    np.testing.assert_allclose(ad.vmap(ad.grad(fn))(batch), expected, atol=1e-6)
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(fn)))(batch), expected, atol=1e-6)
    np.testing.assert_allclose(ad.vmap(fn)(batch), [fn(x) for x in batch])


def per_example_rows(x, r):
    y = np.ones((3, 2)) * x[4]
    y[r, C] = x[:4] * 2.0
    return np.sum(y ** 2)


@pytest.mark.numba
def test_index_arrays_mapped_by_vmap():
    # each example's rows: example 0 writes (0, 1) twice, example 1 writes (2, 1) twice; the
    # mask must not see a repeat across examples
    rows = np.array([[0, 1, 0, 2], [0, 1, 2, 2]])
    batch = np.stack([X5, 2 * X5])
    expected = np.stack([central_differences(lambda v, r=r: per_example_rows(v, r), x)
                         for x, r in zip(batch, rows)])
    np.testing.assert_allclose(ad.vmap(ad.grad(per_example_rows))(batch, rows), expected,
                               atol=1e-6)
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(per_example_rows)))(batch, rows), expected,
                               atol=1e-6)


def mask_argument(x, mask, cols):
    y = np.ones((3, 2)) * x[4]
    y[mask, cols] = x[:2] * x[3]
    return np.sum(y ** 2)


@pytest.mark.numba
def test_a_mask_argument_beside_an_index_array_compiles_as_its_positions():
    """Numba checks a boolean vector's own length against the other index array (a ValueError
    for a mask of three with one True beside two columns, which NumPy takes): the dialect
    writes index_array(mask) for an argument the signature line calls bool[N]."""
    mask, cols = ONE_ROW, TWICE
    assert jit(mask_argument)(X5, mask, cols) == pytest.approx(mask_argument(X5, mask, cols),
                                                               rel=1e-12)
    expected = central_differences(lambda v: mask_argument(v, mask, cols), X5)
    compiled = jit(ad.grad(mask_argument))
    np.testing.assert_allclose(compiled(X5, mask, cols), expected, atol=1e-6)
    assert "index_array(mask), cols]" in compiled.source
    batch = np.stack([X5, 2 * X5 - 0.1])
    per_example = np.stack([central_differences(lambda v: mask_argument(v, mask, cols), x)
                            for x in batch])
    batched = jit(ad.vmap(ad.grad(mask_argument), in_axes=(0, None, None)))
    np.testing.assert_allclose(batched(batch, mask, cols), per_example, atol=1e-6)
    # an integer array in the mask's place is read as the indices it holds
    rows = np.array([2, 0])
    np.testing.assert_allclose(compiled(X5, rows, cols), central_differences(
        lambda v: mask_argument(v, rows, cols), X5), atol=1e-6)


RANK_GENERIC = '''\
import numpy as np

R = np.array([0, 1, 0, 2])
C = np.array([1, 0, 1, 1])


def pairs(x):
    y = x * 1.0
    y[R, C] = x[0, 0] * np.array([1.0, 2.0, 3.0, 4.0])
    return np.sum(y ** 2)


def columns(x):
    y = x * 1.0
    y[:, C] = x[0, 0] * np.array([1.0, 2.0, 3.0, 4.0])
    return np.sum(y ** 2)
'''


def test_rank_generic_code_counts_the_axes_where_it_runs(tmp_path, monkeypatch):
    # without a signature the command line writes code for x of any rank: the mask's new
    # axes (none for pairs, one for columns of a matrix) are counted by along_axes
    from autodiff_ast import cli
    (tmp_path / "fancy_model.py").write_text(RANK_GENERIC)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AUTODIFF_AST_CACHE", str(tmp_path / ".modules"))
    assert cli.main(["grad", "fancy_model.py:pairs,columns", "-o", "fancy_grads.py"]) == 0
    source = (tmp_path / "fancy_grads.py").read_text()
    assert "along_axes(" in source and "float64[...]" in source
    import fancy_grads
    import fancy_model
    x = np.arange(1.0, 13.0).reshape(3, 4) / 10
    for fn, grad_fn in ((fancy_model.pairs, fancy_grads.grad_pairs),
                        (fancy_model.columns, fancy_grads.grad_columns)):
        flat = central_differences(lambda v, fn=fn: fn(v.reshape(3, 4)), x.ravel())
        np.testing.assert_allclose(grad_fn(x), flat.reshape(3, 4), atol=1e-6)


# ---------------------------------------------------------------- the user's np.add.at
# np.add.at(w, idx, v) with v broadcast over w[idx] (one number per index, one row per
# indexed row): v's adjoint was w_bar[idx] unsummed (`x_bar[i] += w_bar[idx]`, "setting an
# array element with a sequence"); reverse._scattered_type sums it down to v's shape. An
# integer index (np.add.at(w, 1, v)) failed under jit in scatter_add (`index.shape` of an
# int); codegen/dialect.py writes it as `w[1] += v`.
SCATTER_INDEX = np.array([0, 1, 1])


def scatter_a_number_in_a_loop(x, idx):
    w = np.zeros(3)
    s = 0.0
    for i in range(4):
        for j in range(3):
            s = s + np.exp(w[j]) * x[j]
        np.add.at(w, idx, x[i])
    return s


def scatter_a_row(x, idx):
    w = np.zeros((3, 2))
    np.add.at(w, idx, x[:2] * x[2])
    return np.sum(np.sin(w) * np.arange(6.0).reshape(3, 2))


def scatter_at_one_index(x, idx):
    w = np.zeros(3)
    np.add.at(w, 1, x[0] * x[1])
    np.add.at(w, idx, x[1:])
    return np.sum(w * w)


def scatter_rows(x, idx):
    w = np.zeros((3, 2))
    np.add.at(w, idx, np.outer(x[:3], x[2:4]))
    return np.sum(np.tanh(w))


SCATTERS = [scatter_a_number_in_a_loop, scatter_a_row, scatter_at_one_index, scatter_rows]


@pytest.mark.parametrize("fn", SCATTERS, ids=lambda f: f.__name__)
def test_add_at_matches_finite_differences(fn):
    expected = numeric_grad(fn, (X, SCATTER_INDEX))
    np.testing.assert_allclose(ad.grad(fn)(X, SCATTER_INDEX), expected, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ad.jacfwd(fn)(X, SCATTER_INDEX), expected, rtol=1e-6,
                               atol=1e-9)


def test_add_at_of_a_number_explicit_value():
    # w = [x0 + x1 + ..., 2 (x0 + ...), 0] as the loop goes; the last x[3] is added after the
    # last read, so it has no effect
    assert ad.grad(scatter_a_number_in_a_loop)(X, SCATTER_INDEX)[3] == 0.0


@pytest.mark.numba
@pytest.mark.parametrize("fn", SCATTERS, ids=lambda f: f.__name__)
def test_add_at_under_jit(fn):
    expected = ad.grad(fn)(X, SCATTER_INDEX)
    assert jit(fn)(X, SCATTER_INDEX) == pytest.approx(fn(X, SCATTER_INDEX), rel=1e-12)
    np.testing.assert_allclose(jit(ad.grad(fn))(X, SCATTER_INDEX), expected, rtol=1e-12)
