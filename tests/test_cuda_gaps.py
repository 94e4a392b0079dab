"""jit(..., target='cuda') where it used to fall short (kernels run in Numba's CUDA simulator,
see conftest.py): the gradient of np.prod (its derivative calls the helper prod_others), a
while loop whose popped counter indexes an array, slice writes of a scalar (the adjoint of a
slice read writes them too), and the dtypes of results in float32 calls. References: plain
NumPy for primals, central finite differences and the CPU grad for gradients, the CPU jit for
dtypes."""

import sys
from pathlib import Path

import numpy as np
import pytest

from autodiff_ast import grad, jvp, vmap
from autodiff_ast.device import DeviceCodeError
from autodiff_ast.jit import jit

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_cuda import assert_ptx_compiles, central  # noqa: E402

X = np.array([0.5, 1.2, -0.7, 2.0])
A = np.array([[0.5, 1.2, -0.7], [2.0, 0.3, 1.5]])


# ---------------------------------------------------------------- user functions
def prod_head(x):
    return np.prod(x[:3]) + np.sum(x)


def prod_columns(A):
    return np.sum(np.prod(A, axis=0) ** 2)


def prod_all(A):
    return np.prod(A) * A[0, 0]


def grow(x):
    s = 1.0
    k = 0
    while s < 10.0 and k < 3:
        s = s * 1.5 + x[k] * s
        k += 1
    return s * x[3]


def grow_in_helper(x):
    return _grow_from(x[0], x[1]) * x[2]


def _grow_from(a, b):
    s = a
    while s < 10.0:
        s = s * s + b
    return s


def zero_middle(x):
    y = x * 1.0
    y[1:3] = 0.0
    return np.sum(y * y)


def double_tail(x):
    y = x.copy()
    y[1:] = y[1:] * 2.0
    return np.sum(y * y * x)


def tile_rows(x):
    y = np.zeros((2, 3))
    y[0:2, :] = x[:3]
    y[1, 1:] = 0.5
    return np.sum(y * y)


def runtime_slice(x):
    y = np.zeros(4)
    k = 1
    while k < 3:
        k += 1
    y[:k] = x[1]
    return np.sum(y * x)


def energy(x):
    return np.sum(x * x)


def energy_and_scaled(x):
    return np.sum(x * x), x * 3.0


def one(x):
    return 1.0


def scaled(x, w):
    return np.sum(np.sin(x) * w), x * w


def scaled_sum(x, w):
    return np.sum(np.sin(x) * w)


def _line_of(fn, text):
    """The file line number of the first line of `fn` that holds `text`."""
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# ---------------------------------------------------------------- np.prod
@pytest.mark.parametrize("fn, arg", [(prod_head, X), (prod_head, X * [1, 0, 1, 1]),
                                     (prod_columns, A), (prod_all, A)],
                         ids=["head", "head-with-a-zero", "columns", "all"])
def test_grad_of_prod(fn, arg):
    out = jit(grad(fn), target="cuda")(arg)
    np.testing.assert_allclose(out, grad(fn)(arg), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out, central(fn, arg), rtol=1e-6, atol=1e-8)


def test_jvp_and_per_example_grad_of_prod():
    t = np.array([0.3, -1.0, 0.5, 2.0])
    value, tangent = jit(lambda x, t: jvp(prod_head, (x,), (t,)), target="cuda")(X, t)
    assert value == pytest.approx(prod_head(X), rel=1e-12)
    eps = 1e-6
    fd = (prod_head(X + eps * t) - prod_head(X - eps * t)) / (2 * eps)
    assert tangent == pytest.approx(fd, rel=1e-6)
    xs = np.stack([X, X * [1, 0, 1, 1], X[::-1]])
    np.testing.assert_allclose(jit(vmap(grad(prod_head)), target="cuda")(xs),
                               [grad(prod_head)(x) for x in xs], rtol=1e-12)


# ---------------------------------------------------------------- while loops
def test_grad_of_a_while_loop_whose_counter_indexes():
    xs = np.array([[0.5, 1.2, 0.7, 2.0], [0.1, 0.2, 0.3, -1.0], [3.0, 0.5, 0.5, 1.0]])
    kernel = jit(vmap(grad(grow)), target="cuda", tape_size=8)
    out = kernel(xs)
    for x, g in zip(xs, out):
        np.testing.assert_allclose(g, grad(grow)(x), rtol=1e-12)
        np.testing.assert_allclose(g, central(grow, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(grad(grow), target="cuda", tape_size=8)(xs[0]), out[0],
                               rtol=1e-15)


def test_a_while_loop_without_tape_size_names_the_loop():
    with pytest.raises(DeviceCodeError) as info:
        jit(grad(grow), target="cuda")(X)
    err = info.value
    assert err.lineno == _line_of(grow, "while s < 10.0")
    assert "while s < 10.0 and k < 3:" in err.code
    assert "tape_size=N" in err.hint and "for _ in range(N):" in err.hint


def test_a_while_loop_in_a_called_function_is_refused_with_what_to_write():
    with pytest.raises(DeviceCodeError) as info:
        jit(grad(grow_in_helper), target="cuda", tape_size=16)(X)
    err = info.value
    assert "hands to its backward pass" in err.message
    assert "write the loop in the function you differentiate" in err.hint


# ---------------------------------------------------------------- slice writes
@pytest.mark.parametrize("fn", [zero_middle, double_tail, tile_rows])
def test_slice_writes(fn):
    np.testing.assert_allclose(jit(fn, target="cuda")(X), fn(X), rtol=1e-12)
    out = jit(grad(fn), target="cuda")(X)
    np.testing.assert_allclose(out, grad(fn)(X), rtol=1e-12)
    np.testing.assert_allclose(out, central(fn, X), rtol=1e-6, atol=1e-8)


def test_a_slice_with_run_time_bounds_says_what_to_write():
    with pytest.raises(DeviceCodeError) as info:
        jit(grad(runtime_slice), target="cuda")(X)
    assert "for i in range(k): y[i] = v" in info.value.hint


# ---------------------------------------------------------------- dtypes
X32 = X.astype(np.float32)


@pytest.mark.parametrize("fn", [energy, energy_and_scaled, one])
def test_float32_primal_answers_in_float32(fn):
    out = jit(fn, target="cuda")(X32)
    cpu = jit(fn)(X32)
    expected = fn(X32)
    for got, want, ref in zip(*(v if isinstance(v, tuple) else (v,)
                                for v in (out, cpu, expected))):
        assert np.asarray(got).dtype == np.float32 == np.asarray(want).dtype
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_float32_per_example_and_jvp_results():
    xs = np.stack([X32, X32[::-1]])
    out = jit(vmap(energy), target="cuda")(xs)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [energy(x) for x in xs], rtol=1e-6)
    value, tangent = jit(lambda x, t: jvp(energy, (x,), (t,)), target="cuda")(X32, X32)
    assert type(value) is type(tangent) is np.float32
    assert tangent == pytest.approx(2 * np.sum(X32 * X32), rel=1e-6)


@pytest.mark.parametrize("w", [np.float64(2.0), np.float32(2.0), 2.0],
                         ids=["float64", "float32", "python-float"])
def test_dtypes_match_the_cpu_jit(w):
    for fn in (scaled, grad(scaled_sum, argnums=(0, 1))):
        cuda_out = jit(fn, target="cuda")(X32, w)
        cpu_out = jit(fn)(X32, w)
        assert [np.asarray(v).dtype for v in cuda_out] == \
            [np.asarray(v).dtype for v in cpu_out]
        for got, want in zip(cuda_out, cpu_out):
            np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------- type-checked for a GPU
def ptx_of_gap_kernels():
    """PTX of the kernels above (run without the simulator: Numba's CUDA compiler type-checks
    what the simulator would let through)."""
    xs = np.stack([X, X[::-1]])
    cases = [(grad(prod_head), (X,), {}), (grad(prod_columns), (A,), {}),
             (vmap(grad(grow)), (xs,), {"tape_size": 8}), (grad(tile_rows), (X,), {}),
             (grad(double_tail), (X,), {}), (energy_and_scaled, (X32,), {}),
             (vmap(energy), (xs.astype(np.float32),), {"reduce": "sum"}),
             (grad(scaled_sum, argnums=(0, 1)), (X32, np.float64(2.0)), {})]
    return [jit(fn, target="cuda", **options).ptx(*args) for fn, args, options in cases]


def test_ptx_compiles_without_a_gpu():
    assert_ptx_compiles("test_cuda_gaps", "ptx_of_gap_kernels")
