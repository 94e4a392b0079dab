"""np.linalg and the products on stacks of matrices and on operands of other ranks.

NumPy's np.linalg maps over leading axes (a stack of matrices), np.inner contracts the last
axes of both operands, np.outer flattens its operands and np.trace of more than two axes
sums the first two's diagonal. Each rule is checked against central differences in both
modes (and at order 2 where the adjoint is itself differentiated), on stacks whose length
differs from and equals the matrix size (a transpose of all three axes is silently wrong when
they are equal). Each was wrong before (a 2-D formula applied to a stack) or crashed.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit

WEIGHTS = np.arange(9.0).reshape(3, 3) - 4.0


def numeric_grad(f, args, argnum, eps=1e-6):
    x = np.array(args[argnum], dtype=float)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[idx] = eps
        up = list(args)
        down = list(args)
        up[argnum], down[argnum] = x + step, x - step
        out[idx] = (f(*up) - f(*down)) / (2 * eps)
    return out


def well_conditioned(rng, stack, n=3):
    return rng.normal(size=stack + (n, n)) + 3.0 * np.eye(n)


# ---------------------------------------------------------------- products and trace
def inner_of_matrices(a, b):
    return np.sum(np.inner(a, b) * np.arange(6.0).reshape(2, 3))


def inner_vector_matrix(a, b):
    return np.sum(np.inner(a, b) * np.array([1.0, -2.0, 0.5]))


def outer_of_a_matrix(x, y):
    return np.sum(np.outer(x, y) * np.arange(12.0).reshape(4, 3))


def trace_of_three_axes(a):
    return np.sum(np.trace(a) * np.array([1.0, -2.0]))


@pytest.mark.parametrize("f,shapes", [
    (inner_of_matrices, [(2, 4), (3, 4)]),
    (inner_vector_matrix, [(4,), (3, 4)]),
    (outer_of_a_matrix, [(2, 2), (3,)]),
    (trace_of_three_axes, [(3, 3, 2)]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_products_and_trace_of_other_ranks(f, shapes):
    rng = np.random.default_rng(0)
    args = [rng.normal(size=s) for s in shapes]
    for k in range(len(args)):
        np.testing.assert_allclose(ad.grad(f, argnums=k)(*args), numeric_grad(f, args, k),
                                   rtol=1e-6, atol=1e-8)
    ad.check_grads(f, tuple(args), order=1, modes=("fwd", "rev"))


def test_inner_of_square_matrices_is_a_times_b_transposed():
    """inner(A, B) = A B^T: d sum(W * inner(A, B)) / dA = W B (it was W B^T)."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))

    def f(a, b):
        return np.sum(np.inner(a, b) * WEIGHTS)
    da, db = ad.grad(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(da, WEIGHTS @ b, rtol=1e-12)
    np.testing.assert_allclose(db, WEIGHTS.T @ a, rtol=1e-12)


# ---------------------------------------------------------------- np.linalg on stacks
def inv_loss(a):
    return np.sum(np.linalg.inv(a) * np.sin(a))


def det_loss(a):
    return np.sum(np.linalg.det(a) ** 2)


def logdet_loss(a):
    return np.sum(np.linalg.slogdet(a)[1] * np.arange(1.0, 1.0 + a.shape[0]))


def solve_vector_loss(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


def solve_matrix_loss(a, b):
    return np.sum(np.linalg.solve(a, b) * np.cos(b))


def cholesky_loss(x):
    a = np.matmul(x, np.swapaxes(x, -1, -2)) + 3.0 * np.eye(3)
    return np.sum(np.linalg.cholesky(a) ** 2)


@pytest.mark.parametrize("stack", [1, 3, 4])
@pytest.mark.parametrize("f", [inv_loss, det_loss, logdet_loss, cholesky_loss],
                         ids=lambda f: f.__name__)
def test_linalg_of_a_stack(f, stack):
    rng = np.random.default_rng(stack)
    a = well_conditioned(rng, (stack,))
    np.testing.assert_allclose(ad.grad(f)(a), numeric_grad(f, (a,), 0), rtol=1e-5, atol=1e-7)
    ad.check_grads(f, (a,), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("stack", [1, 3])
def test_solve_of_a_stack(stack):
    rng = np.random.default_rng(10 + stack)
    a = well_conditioned(rng, (stack,))
    for f, b in ((solve_vector_loss, rng.normal(size=3)),
                 (solve_vector_loss, rng.normal(size=(stack, 3, 2))),
                 (solve_matrix_loss, rng.normal(size=(stack, 3, 2))),
                 (solve_matrix_loss, rng.normal(size=(3, 2)))):
        for k in (0, 1):
            np.testing.assert_allclose(ad.grad(f, argnums=k)(a, b),
                                       numeric_grad(f, (a, b), k), rtol=1e-5, atol=1e-7)
        ad.check_grads(f, (a, b), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("stack", [3, 4])
def test_one_matrix_against_a_stack_of_right_hand_sides(stack):
    # jvp wrote np.dot(da, x) for one matrix a whatever b's rank: with b a (k, n, m) stack
    # that contracts the wrong axes (silently wrong when k == n, a ValueError otherwise),
    # and hessian (jacfwd of the gradient) inherited it
    rng = np.random.default_rng(20 + stack)
    a = well_conditioned(rng, ())
    b = rng.normal(size=(stack, 3, 2))
    ad.check_grads(solve_matrix_loss, (a, b), order=2, modes=("fwd", "rev"))
    direction = rng.normal(size=(3, 3))
    _, tangent = ad.jvp(lambda m: solve_matrix_loss(m, b), (a,), (direction,))
    np.testing.assert_allclose(tangent, np.sum(numeric_grad(solve_matrix_loss, (a, b), 0)
                                               * direction), rtol=1e-6)


def test_second_order_through_a_stack():
    rng = np.random.default_rng(5)
    a = well_conditioned(rng, (2,))
    for f in (inv_loss, logdet_loss):
        ad.check_grads(f, (a,), order=2, modes=("fwd", "rev"))


# ---------------------------------------------------------------- under vmap
def solve_one(a, b):
    return np.linalg.solve(a, b)


def inverse_sum(a):
    return np.sum(np.linalg.inv(a))


def total_of_inverses(stack):
    return np.sum(ad.vmap(inverse_sum)(stack))


def test_vmap_of_vmap_of_solve():
    rng = np.random.default_rng(7)
    a, b = well_conditioned(rng, (4,)), rng.normal(size=(4, 5, 3))
    got = ad.vmap(ad.vmap(solve_one, in_axes=(None, 0)))(a, b)
    expected = np.stack([[np.linalg.solve(a[i], b[i, j]) for j in range(5)]
                         for i in range(4)])
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    got = ad.vmap(ad.vmap(solve_one, in_axes=(0, None)), in_axes=(None, 0))(a, b[:, 0])
    expected = np.stack([[np.linalg.solve(a[j], b[i, 0]) for j in range(4)]
                         for i in range(4)])
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("stack", [3, 4])
def test_grad_through_vmap_of_an_inverse(stack):
    rng = np.random.default_rng(stack)
    a = well_conditioned(rng, (stack,))
    np.testing.assert_allclose(ad.grad(total_of_inverses)(a),
                               numeric_grad(total_of_inverses, (a,), 0), rtol=1e-5, atol=1e-7)


def trace_of_the_last_axes(a):
    return np.sum(np.trace(a, axis1=1, axis2=2) * np.array([1.0, -2.0]))


def trace_method_first_and_last(a):
    return np.sum(a.trace(axis1=0, axis2=2) ** 2)


def trace_with_an_offset(a):
    return np.trace(a, 1)


@pytest.mark.parametrize("f,shape", [(trace_of_the_last_axes, (2, 3, 3)),
                                     (trace_method_first_and_last, (3, 2, 3)),
                                     (trace_of_three_axes, (3, 3, 2))],
                         ids=["axis1-axis2", "method", "three-axes"])
def test_trace_along_other_axes(f, shape):
    """np.trace(a, axis1=, axis2=) is the sums of np.diagonal's last axis (was refused);
    so is the trace of three axes, which Numba's np.trace (matrices only) did not compile."""
    a = np.random.default_rng(4).normal(size=shape)
    np.testing.assert_allclose(ad.grad(f)(a), numeric_grad(f, (a,), 0), rtol=1e-6, atol=1e-8)
    ad.check_grads(f, (a,), order=1, modes=("fwd", "rev"))
    np.testing.assert_allclose(ad.jit(f)(a), f(a), rtol=1e-12)


def test_trace_with_an_offset_is_refused_clearly():
    with pytest.raises(ad.errors.UnsupportedSyntaxError, match="np.trace with an offset"):
        ad.grad(trace_with_an_offset)(np.ones((3, 3)))


def dot_of_a_stack_and_a_vector(a, v):
    return np.sum(np.dot(a, v) ** 2)


def dot_of_a_stack_and_a_matrix(a, m):
    return np.sum(np.sin(np.dot(a, m)))


@pytest.mark.parametrize("f,shapes", [(dot_of_a_stack_and_a_vector, [(2, 4, 3), (3,)]),
                                      (dot_of_a_stack_and_a_matrix, [(2, 4, 3), (3, 2)])],
                         ids=["vector", "matrix"])
def test_dot_of_a_stack(f, shapes):
    """np.dot(a, b) of a stack a and a vector or matrix b is np.matmul(a, b) (it was
    refused: "np.dot has no reverse-mode rule for these argument ranks")."""
    rng = np.random.default_rng(8)
    args = [rng.normal(size=s) for s in shapes]
    for k in (0, 1):
        np.testing.assert_allclose(ad.grad(f, argnums=k)(*args), numeric_grad(f, args, k),
                                   rtol=1e-6, atol=1e-8)
    ad.check_grads(f, tuple(args), order=1, modes=("fwd", "rev"))


_A0 = np.array([[2.0, 0.3, 0.1], [0.2, 3.0, -0.4], [0.1, 0.5, 1.5]])


def _solved(x):
    return np.linalg.solve(_A0 + np.diag(x), x)


def _solved_squared(x):
    return np.sum(_solved(x) ** 2)


def test_jit_jacobians_of_one_solve():
    """A Jacobian batches the solve's vector (one per basis direction) against one matrix:
    written np.linalg.solve(a, b.T).T, one solve with a column each, which Numba compiles
    (its solve of a matrix and a stack of vectors did not: jit(jacrev) failed)."""
    x = np.array([0.3, -0.7, 1.1])
    step = 1e-6
    numeric = np.array([(_solved(x + step * e) - _solved(x - step * e)) / (2 * step)
                        for e in np.eye(3)]).T
    for transform in (ad.jacrev, ad.jacfwd):
        np.testing.assert_allclose(transform(_solved)(x), numeric, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(jit(transform(_solved))(x), numeric, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(jit(ad.hessian(_solved_squared))(x),
                               ad.hessian(_solved_squared)(x), rtol=1e-12)


def _det_squared(a):
    return np.linalg.det(a) ** 2


def _cholesky_cubed(a):
    return np.sum(np.linalg.cholesky(a) ** 3)


def _solve_each(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


@pytest.mark.numba
@pytest.mark.parametrize("f", [_det_squared, _cholesky_cubed])
def test_jit_hessian_of_det_and_cholesky(f):
    # jacfwd's tangent directions made np.linalg.solve(a, stack): Numba's solve refused it
    # (a CompileError); solve_stacks solves one matrix against a stack in one call
    rng = np.random.default_rng(30)
    m = rng.normal(size=(3, 3))
    s = m @ m.T + 3.0 * np.eye(3)
    expected = ad.hessian(f)(s)
    np.testing.assert_allclose(jit(ad.hessian(f))(s), expected, rtol=1e-10)
    g = ad.grad(f)
    step = 1e-5
    direction = (m + m.T) / 2.0  # (cholesky reads the lower triangle: a symmetric step)
    by_differences = (g(s + step * direction) - g(s - step * direction)) / (2 * step)
    np.testing.assert_allclose(np.tensordot(expected, direction, 2), by_differences,
                               rtol=1e-5, atol=1e-7)


@pytest.mark.numba
def test_jit_vmap_of_a_solve_per_example():
    rng = np.random.default_rng(31)
    a, b = well_conditioned(rng, (4,)), rng.normal(size=(4, 3))
    batched = jit(ad.vmap(ad.grad(_solve_each, argnums=(0, 1))))(a, b)
    for k in range(4):
        for got, want in zip(batched, ad.grad(_solve_each, argnums=(0, 1))(a[k], b[k])):
            np.testing.assert_allclose(got[k], want, rtol=1e-10)
