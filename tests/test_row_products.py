"""A matrix's products with vectors in a fused run: one pass over its rows under jit
(codegen/row_products.py, collected by codegen/fused_regions.py).

Every compiled gradient is compared with the plain-NumPy gradient of the same function and with
central differences (test_vector_loops._grads_agree), every compiled value with the function's
own; the generated source is checked to show the products were taken into the loop. Arguments
the loop cannot take (a matrix in Fortran order, a vector to broadcast, a number for a vector)
run the statements as written: their results are checked too.
"""

from __future__ import annotations

import gast
import numba
import numpy as np
import pytest
from test_fused_regions import _rewrite  # fuse_regions on a function's text
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.dialect import lower_source, render
from codegen.fused_regions import FUSED_HELPERS
from codegen.numba_cpu import NumbaOptions, compile_module
from codegen.row_products import ROW_HELPERS, THREADED_FROM

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- programs
def logistic(w, X, y):
    """Logistic regression's mean negative log-likelihood (the seed workload)."""
    z = np.dot(X, w)
    return np.sum(np.logaddexp(0.0, z) - y * z) / X.shape[0]


def ridge(w, b, X, y, lam):
    """Least squares with an intercept and a penalty: `X @ w` and a second sum."""
    r = X @ w + b - y
    return 0.5 * np.sum(r * r) / X.shape[0] + lam * np.sum(w * w)


def poisson(w, X, y):
    """Poisson regression: the product's value read by two statements."""
    eta = np.dot(X, w)
    return np.sum(np.exp(eta) - y * eta) / len(y)


def kept(w, X):
    """The product read after the run (z[0]): its values are kept whole."""
    z = np.dot(X, w)
    s = np.sum(np.tanh(z))
    return s * s + z[0]


def mse(w, X, y):
    """A mean: its gradient divides by `((pred - y) ** 2).size`, the loop's row count."""
    pred = np.tanh(X @ w)
    return np.mean((pred - y) ** 2)


def line_mean(w, b, x, y):
    """A mean of vectors alone (fused_regions' loop over elements): `(r * r).size` is the
    loop's length when r is a vector, 1 when every argument is a number."""
    r = w * x + b - y
    return np.mean(r * r)


def scaled_mean(w, b, x, y):
    """A mean whose operand reads a length (`x.shape[0]`, a parameter of the loop)."""
    r = w * x + b - y
    return np.mean(r * r / x.shape[0])


def mixed_sizes(a, x):
    """One mean of a number (size 1) and one of a vector in the same gradient."""
    t = a * 2.0
    u = x * t
    return np.mean(t * t) + np.mean(u * u)


def _data(n=40, m=10, seed=0):  # (m > 8: w is not scalarized, autodiff_ast/scalarize.py)
    rng = np.random.default_rng(seed)
    return rng.standard_normal(m) * 0.3, rng.standard_normal((n, m)), \
        (rng.random(n) > 0.5).astype(float)


def _entry_source(compiled):
    source = compiled.source
    return source[source.rindex("\n@numba.njit"):]


# ---------------------------------------------------------------- compiled gradients
@pytest.mark.parametrize("argnums", [(0,), (0, 2)])
def test_logistic_gradient_reads_the_matrix_in_one_loop(argnums):
    w, X, y = _data()
    compiled = _grads_agree(logistic, (w, X, y), argnums)
    if argnums == (0,):  # (with X's gradient, X is read as a whole: no row loop)
        assert "row_dot(X, i, w)" in compiled.source
        assert "add_row(w_bar, X, i, z_bar)" in compiled.source
        assert _entry_source(compiled).count("fused(") == 1


def test_value_and_grad_takes_the_loss_and_the_gradient_in_one_loop():
    """The loss's sum joins the loop; `div = total / X.shape[0]` moves after the call."""
    w, X, y = _data(seed=1)
    compiled = ad.jit(ad.value_and_grad(logistic))
    value, grad = compiled(w, X, y)
    want_value, want_grad = ad.value_and_grad(logistic)(w, X, y)
    assert value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-14)
    entry = _entry_source(compiled)
    assert entry.count("fused(") == 1
    assert entry.index("fused(") < entry.index("div = total / X.shape[0]")


@pytest.mark.parametrize("fn, argnums", [(ridge, (0, 1)), (poisson, (0,)), (kept, (0,))],
                         ids=["ridge", "poisson", "kept"])
def test_other_models_agree_and_use_the_row_loop(fn, argnums):
    w, X, y = _data(seed=2)
    args = {ridge: (w, 0.3, X, y, 0.1), poisson: (w * 0.5, X, y * 3.0), kept: (w, X)}[fn]
    compiled = _grads_agree(fn, args, argnums)
    if fn is kept:  # (its gradient's run ends at z_bar's updates; its primal is one loop)
        primal = ad.jit(fn)
        primal(*args)
        assert "row_dot(X, i, w)" in primal.source and "z_values[i] = z" in primal.source
    else:
        assert "row_dot(" in compiled.source and "add_row(" in compiled.source


def test_a_mean_is_divided_by_the_loops_length_not_a_whole_array():
    """np.mean's gradient reads `(e).size`: in a run it is the loop's element count (no
    array made for its size), or 1 when e is a number."""
    w, X, y = _data(seed=6)
    compiled = _grads_agree(mse, (w, X, y), (0,))
    assert "row_dot(X, i, w)" in compiled.source
    loop = compiled.source.split("for i in range(n):")[1].split("return")[0]
    assert ".size" not in loop and "/ n" in loop
    rng = np.random.default_rng(7)
    x, v = rng.standard_normal(30), rng.standard_normal(30)
    compiled = _grads_agree(line_mean, (0.5, 0.2, x, v), (0, 1))
    assert "(n if sized else 1)" in compiled.source
    for args in [(0.5, 0.2, 2.0, 0.3), (0.5, np.full(30, 0.2), x, v), (0.5, 0.2, x[:1].copy(), v)]:
        got, want = ad.jit(ad.grad(line_mean, argnums=(0, 1)))(*args), \
            ad.grad(line_mean, argnums=(0, 1))(*args)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-14)
    _grads_agree(mixed_sizes, (0.7, x), (0, 1))
    compiled = _grads_agree(scaled_mean, (0.5, 0.2, x, v), (0,))
    assert "(n if sized else 1) / x_shape_0" in compiled.source


def test_arguments_the_loop_cannot_take_run_the_statements():
    """A matrix in Fortran order, a label vector of length one (NumPy broadcasts it), a number
    for the labels, one row, one column: each agrees with the plain gradient."""
    w, X, y = _data(n=9, m=4, seed=3)
    cases = [(w, np.asfortranarray(X), y), (w, X, y[:1].copy()), (w, X, 0.25),
             (w, X[:1].copy(), y[:1].copy()), (w[:1].copy(), X[:, :1].copy(), y)]
    compiled, plain = ad.jit(ad.grad(logistic)), ad.grad(logistic)
    for args in cases:
        np.testing.assert_allclose(compiled(*args), plain(*args), rtol=1e-10, atol=1e-14)


def test_shapes_numpy_refuses_are_refused_under_jit_too():
    w, X, y = _data(n=8, m=5, seed=4)
    with pytest.raises(ValueError):
        ad.grad(logistic)(w[:4].copy(), X, y)
    with pytest.raises(Exception):  # noqa: B017 (Numba's error or the user-facing one)
        ad.jit(ad.grad(logistic))(w[:4].copy(), X, y)


def test_batched_and_second_order_forms_agree():
    """vmap's batched code (matrices throughout: no row products there) and hessian."""
    w, X, y = _data(n=12, m=3, seed=5)
    batched = ad.vmap(ad.grad(logistic), in_axes=(0, None, None))
    ws = np.stack([w, w * 2.0, -w])
    np.testing.assert_allclose(ad.jit(batched)(ws, X, y), batched(ws, X, y), rtol=1e-10)
    np.testing.assert_allclose(ad.jit(ad.hessian(logistic))(w, X, y),
                               ad.hessian(logistic)(w, X, y), rtol=1e-9, atol=1e-13)


# ---------------------------------------------------------------- large matrices: threads
_LARGE = dict(n=21000, m=100)  # 2.1e6 elements, at least 2**THREADED_FROM: split in parts


@pytest.mark.parametrize("fn, argnums", [(logistic, (0,)), (ridge, (0, 1)), (poisson, (0,)),
                                         (mse, (0,))], ids=["logistic", "ridge", "poisson",
                                                            "mse"])
def test_large_matrices_split_their_rows_between_threads(fn, argnums):
    """Rows of a matrix of 2**21 elements or more run in parts on Numba's threads; each part's
    row sums and sums are added after: the gradient agrees with the plain one and with
    central differences, the compiled primal (its own threaded loop) with the function."""
    w, X, y = _data(seed=8, **_LARGE)
    args = {ridge: (w, 0.3, X, y, 0.1), poisson: (w * 0.1, X, y * 3.0)}.get(fn, (w, X, y))
    compiled = _grads_agree(fn, args, argnums)
    assert "fused_threads(" in compiled.source and "numba.prange(chunks)" in compiled.source
    assert f"X.size >= 2 ** {THREADED_FROM}" in compiled.source
    if fn is logistic:  # the textbook gradient, as a third reference
        expected = X.T @ (1.0 / (1.0 + np.exp(-(X @ w))) - y) / X.shape[0]
        np.testing.assert_allclose(compiled(*args)[0], expected, rtol=1e-9, atol=1e-15)


def test_large_matrices_keep_values_and_sums_across_parts():
    """value_and_grad (the loss's sum taken per part), and a product's values kept whole
    (`z_values`, each part writing its own rows)."""
    w, X, y = _data(seed=9, **_LARGE)
    value, grad = ad.jit(ad.value_and_grad(logistic))(w, X, y)
    want_value, want_grad = ad.value_and_grad(logistic)(w, X, y)
    assert value == pytest.approx(want_value, rel=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-15)
    primal = ad.jit(kept)
    assert primal(w, X) == pytest.approx(kept(w, X), rel=1e-12)
    assert "z_values = np.empty(n)" in primal.source and "fused_threads(" in primal.source
    _grads_agree(kept, (w, X), (0,))


def test_functions_run_on_several_threads_get_no_threaded_loop():
    """A prange loop's per-example functions and pmap's shards may run at once on several
    threads: their modules keep the one-thread loop (Numba's workqueue layer refuses a
    parallel region inside another)."""
    w, X, y = _data(n=30, m=10, seed=10)
    per_example = ad.jit(ad.vmap(ad.grad(logistic), in_axes=(None, 0, 0)), batching="loop")
    Xs, ys = np.stack([X, X * 0.5]), np.stack([y, 1.0 - y])
    got = per_example(w, Xs, ys)
    for k in range(2):
        np.testing.assert_allclose(got[k], ad.grad(logistic)(w, Xs[k], ys[k]), rtol=1e-10)
    assert "_threads(" not in per_example.source
    plain = ad.grad(logistic)
    plain(w, X, y)
    one_thread = lower_source(plain.source, numba_overloads=True)
    threaded = lower_source(plain.source, numba_overloads=True, threads=True)
    assert "fused_threads" not in render(one_thread) and "fused_threads" in render(threaded)
    for options, threads in [(NumbaOptions(), True), (NumbaOptions(nogil=True), False),
                             (NumbaOptions(prange=("vmap_f",)), False)]:
        compiled = compile_module(plain.source, f"rows_threads_{threads}_{options.nogil}",
                                  ["grad_logistic"], options=options)
        assert ("fused_threads(" in compiled.source) == threads
        np.testing.assert_allclose(compiled.grad_logistic(w, X, y), plain(w, X, y),
                                   rtol=1e-10, atol=1e-15)


# ---------------------------------------------------------------- the rewrite itself
def test_numbers_move_before_the_run_and_sums_of_it_after():
    text, names, sources = _rewrite('''
def g(w, X, y):
    z = np.dot(X, w)
    total = np.sum(z * z)
    mean = total / X.shape[0]
    scale = 2.0 / X.shape[0]
    z_bar = scale * z - y
    w_bar = np.dot(X.T, z_bar)
    return mean, w_bar
''')
    assert names == ["fused"]
    lines = [line.strip() for line in text.splitlines()[1:]]
    assert lines == ["scale = 2.0 / X.shape[0]", "total, w_bar = fused(scale, y, X, w)",
                     "mean = total / X.shape[0]", "return (mean, w_bar)"]
    assert "w_bar = np.zeros(X.shape[1])" in sources["fused"]


@pytest.mark.parametrize("text", ['''
def g(w, X):
    z = np.dot(X, w)
    return z * 2.0
''', '''
def g(w, X, y):
    z = np.dot(X, w)
    scale = 1.0 / X.shape[0]
    u = z * X
    return u
''', '''
def g(w, X, y):
    z = np.dot(X, w) - y
    z = z * 2.0
    w_bar = np.dot(X.T, z)
    return w_bar
'''], ids=["no sum", "matrix read elementwise", "name bound twice"])
def test_runs_left_alone_keep_their_order(text):
    """No sum (a loop would only replace BLAS), the matrix read as a vector, a name bound
    twice: no fused call, and a number moved for the run goes back to its place."""
    rewritten, names, _ = _rewrite(text)
    assert names == [] or "row_dot" not in _rewrite(text)[2].get(names[0], "")
    if not names:
        assert rewritten.strip() == unparse(gast.parse(text).body[0]).strip()


def test_the_loop_takes_c_order_float64_matrices_and_vectors_only():
    """rows_loop_types, on the Numba types of the arguments (what the overload sees)."""
    namespace = {"numba": numba}
    exec(FUSED_HELPERS["one_loop_types"], namespace)  # (rows_loop_types calls it)
    exec(ROW_HELPERS["rows_loop_types"], namespace)
    check = namespace["rows_loop_types"]
    typeof = numba.typeof
    w, X, y = _data(n=5, m=3)
    assert check((typeof(y), typeof(0.5)), ((-1, 0),), (typeof(X), typeof(w)), 1)
    assert not check((typeof(y),), ((-1, 0),), (typeof(np.asfortranarray(X)), typeof(w)), 1)
    assert not check((typeof(X),), ((-1, 0),), (typeof(X), typeof(w)), 1)  # a matrix vector
    assert not check((typeof(y),), ((-1,),), (typeof(X.astype(np.float32)), typeof(w)), 1)
    assert not check((typeof(0.5),), ((0,),), (typeof(X), typeof(w)), 1)  # reads no vector
