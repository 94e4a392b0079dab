"""Transposes of views on the CUDA target (jit(..., target='cuda'), run in Numba's simulator).

`a.T` is a view: when `a` was itself a view (a slice, a row, another transpose) the device code
named an array it never defined (NameError 'transposed' from the kernel). Each function here
is compared with NumPy running the same function, its gradient with central differences and
with grad on the CPU; the kernels are also compiled to PTX without the simulator, where Numba
types the views as it would on a GPU.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from autodiff_ast import grad, jvp, vmap
from autodiff_ast.jit import jit

sys.path.insert(0, str(Path(__file__).parent))
from test_cuda import assert_ptx_compiles, central  # noqa: E402  (central differences)

HERE = Path(__file__).parent


# ---------------------------------------------------------------- user functions
def slice_then_transpose(A):
    B = A[1:, :]
    C = B.T
    return np.sum(C * C[:, ::-1])


def double_transpose(A):
    return np.sum(A.T.T * A)


def transposed_row(A):
    return np.sum(np.sin(A.T[1]))


def transposed_element(A):
    return A.T[2, 1] * A[0, 3]


def transposed_local(A):
    return np.sum((A * A).T[1:, ::2] ** 3)


def transposed_rows_dot(A):
    return np.sum(np.dot(A.T[:2], A[:, 1:]) ** 2)


def transpose_chain(A):
    return np.sum(np.cos(A.T.T.T[:, 1:].T[0]))


def transposed_vector(A):
    return np.sum(A[1].T * A[2])


def transposed_rank3(A):
    B = np.reshape(A, (2, 3, 2))
    return np.sum(np.sin(B.T[1]))


def rows_in_a_loop(A):
    s = 0.0
    At = A.T
    for i in range(4):
        r = At[i]
        s = s + np.sum(r * r[::-1]) * At[i, 0]
    return s


def pair_product(M):
    return np.sum(M[0] * M[1])


def transposed_view_to_helper(A):
    return pair_product(A[:, 1:].T)


def returns_transposed_view(A):
    return np.tanh(A).T[1:].T


SCALAR_FUNCTIONS = [slice_then_transpose, double_transpose, transposed_row, transposed_element,
                    transposed_local, transposed_rows_dot, transpose_chain, transposed_vector,
                    transposed_rank3, rows_in_a_loop]
ids = [f.__name__ for f in SCALAR_FUNCTIONS]


@pytest.fixture(scope="module")
def A():
    return np.random.default_rng(1).normal(size=(3, 4))


@pytest.fixture(scope="module")
def As():
    return np.random.default_rng(2).normal(size=(5, 3, 4))


# ---------------------------------------------------------------- one thread
@pytest.mark.parametrize("f", SCALAR_FUNCTIONS, ids=ids)
def test_primal_matches_numpy(f, A):
    np.testing.assert_allclose(jit(f, target="cuda")(A), f(A), rtol=1e-12)


@pytest.mark.parametrize("f", SCALAR_FUNCTIONS, ids=ids)
def test_gradient_matches_differences(f, A):
    out = jit(grad(f), target="cuda")(A)
    np.testing.assert_allclose(out, central(f, A), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(out, grad(f)(A), rtol=1e-12, atol=1e-15)


def test_transposed_view_passed_to_a_device_function(A):
    np.testing.assert_allclose(jit(transposed_view_to_helper, target="cuda")(A),
                               transposed_view_to_helper(A), rtol=1e-12)


def test_transposed_view_returned(A):
    out = jit(returns_transposed_view, target="cuda")(A)
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out, returns_transposed_view(A), rtol=1e-12)


# ---------------------------------------------------------------- one thread per example
def test_per_example_gradients(As):
    out = jit(vmap(grad(rows_in_a_loop)), target="cuda")(As)
    np.testing.assert_allclose(out, np.stack([central(rows_in_a_loop, a) for a in As]),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(out, vmap(grad(rows_in_a_loop))(As), rtol=1e-12, atol=1e-15)


def test_per_example_tangents(As):
    def tangent(A, A_dot):
        return jvp(slice_then_transpose, (A,), (A_dot,))

    directions = np.random.default_rng(3).normal(size=As.shape)
    out, out_dot = jit(vmap(tangent), target="cuda")(As, directions)
    np.testing.assert_allclose(out, [slice_then_transpose(a) for a in As], rtol=1e-12)
    expected = [np.sum(central(slice_then_transpose, a) * d) for a, d in zip(As, directions)]
    np.testing.assert_allclose(out_dot, expected, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- Numba's CUDA compiler
def ptx_of_kernels():
    """PTX for a kernel of each kind of transposed view (run without the simulator)."""
    A = np.random.default_rng(1).normal(size=(3, 4))
    kernels = [jit(grad(f), target="cuda") for f in (slice_then_transpose, transpose_chain,
                                                      transposed_vector, transposed_rank3)]
    kernels.append(jit(transposed_view_to_helper, target="cuda"))
    kernels.append(jit(returns_transposed_view, target="cuda"))
    return [kernel.ptx(A) for kernel in kernels]


def test_ptx_compiles_without_a_gpu():
    """The transposed views type-check with Numba's CUDA compiler (no simulator, no driver)."""
    assert_ptx_compiles("test_cuda_transposes", "ptx_of_kernels")
