"""Rules for np.linalg.matrix_power, the other orders of np.linalg.norm, np.linalg.svd and
np.linalg.pinv.

Every loss is checked against central differences in both modes (check_grads' dot-product
test ties them together), on well-conditioned matrices drawn from a fixed seed; matrix_power,
a p-norm, the nuclear norm, the SVD and pinv also at order 2, and matrix_power and a p-norm
by ad.hessian. Losses of singular vectors read them only where their signs cancel (u ** 2,
u diag(w) vh), as LAPACK may flip a pair. Ties (a repeated singular value, equal column sums)
get JAX's equal shares, checked against values worked out by hand. One test compiles the
gradient and one the jvp of a function using every new template under Numba.
"""

from __future__ import annotations

import numpy as np
import pytest
from hessian_check import assert_hessian_matches_gradient_differences

import autodiff_ast as ad
from autodiff_ast.errors import MissingRuleError
from autodiff_ast.jit import jit

pytestmark = pytest.mark.filterwarnings("ignore:Cannot cache compiled function")

_DRAW = np.random.default_rng(20240611)
SQUARE = np.eye(3) + 0.3 * _DRAW.standard_normal((3, 3))
STACK = np.eye(3) + 0.3 * _DRAW.standard_normal((2, 3, 3))
TALL = _DRAW.standard_normal((4, 3))
WIDE = _DRAW.standard_normal((3, 4))
VECTOR = _DRAW.standard_normal(5)
W3 = _DRAW.standard_normal((3, 3))
W43 = _DRAW.standard_normal((4, 3))
W34 = _DRAW.standard_normal((3, 4))
W33 = _DRAW.standard_normal((3, 3))
SHARES = np.array([1.0, -2.0, 0.5])


# ---------------------------------------------------------------- losses
def power_loss(a):
    return (np.sum(np.linalg.matrix_power(a, 3) * W3) + np.sum(np.linalg.matrix_power(a, 2) * W3)
            + np.sum(np.linalg.matrix_power(a, 5) ** 2) + np.sum(np.linalg.matrix_power(a, 1) * W3)
            + np.sum(np.linalg.matrix_power(a, 0) * W3))


def inverse_power_loss(a):
    return np.sum(np.linalg.matrix_power(a, -1) * W3) + np.sum(np.linalg.matrix_power(a, -3) * W3)


def stacked_power_loss(a):
    return np.sum(np.linalg.matrix_power(a, 3) * W3) + np.sum(np.linalg.matrix_power(a, -2) * W3)


def p_norm_loss(x):
    return np.linalg.norm(x, 3) + np.linalg.norm(x, 1.5) ** 2 + np.linalg.norm(x, ord=-1)


def p_norm_axis_loss(x):
    return np.sum(np.linalg.norm(x, 3, axis=1) * np.arange(1.0, 5.0)) + \
        np.sum(np.linalg.norm(x, 0.5, axis=0, keepdims=True) * SHARES)


def singular_norms_loss(x):
    return np.linalg.norm(x, "nuc") + np.linalg.norm(x, 2) ** 2 + np.linalg.norm(x, -2)


def abs_sum_norms_loss(x):
    return (np.linalg.norm(x, 1) + np.linalg.norm(x, -1) ** 2 + np.linalg.norm(x, np.inf)
            + np.linalg.norm(x, -np.inf))


def matrix_norm_keepdims_loss(x):
    return np.sum(np.linalg.norm(x, "nuc", keepdims=True) * np.linalg.norm(x, 1, keepdims=True))


def singular_values_loss(x):
    return np.sum(np.linalg.svd(x, compute_uv=False) ** 2 * SHARES)


def svd_loss(x):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    return np.sum(u ** 2 * W43) + np.sum(s ** 3) + np.sum(vh ** 2 * W33) + \
        np.sum(np.dot(u * SHARES, vh) * W43)


def svd_wide_loss(x):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    return np.sum(u ** 2 * W33) + np.sum(np.sqrt(s)) + np.sum(vh ** 2 * W34)


def svd_square_loss(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.sum(u ** 2 * W3) + np.sum(vh ** 2 * W33)


def svd_values_of_full_matrices_loss(x):
    u, s, vh = np.linalg.svd(x)  # (full_matrices=True: only s carries a derivative)
    return np.sum(s ** 3)


def pinv_loss(x):
    return np.sum(np.linalg.pinv(x) * W34)


def pinv_wide_loss(x):
    return np.sum(np.linalg.pinv(x) ** 2 * W43)


def pinv_square_loss(a):
    return np.sum(np.linalg.pinv(a) * W3)


def pinv_stack_loss(x):
    return np.sum(np.linalg.pinv(x) * W3)


CASES = {
    "matrix_power": (power_loss, SQUARE),
    "matrix_power-negative": (inverse_power_loss, SQUARE),
    "matrix_power-stack": (stacked_power_loss, STACK),
    "norm-p": (p_norm_loss, VECTOR),
    "norm-p-axis": (p_norm_axis_loss, TALL),
    "norm-nuc-2": (singular_norms_loss, TALL),
    "norm-nuc-2-wide": (singular_norms_loss, WIDE),
    "norm-1-inf-matrix": (abs_sum_norms_loss, TALL),
    "norm-matrix-keepdims": (matrix_norm_keepdims_loss, TALL),
    "svd-values": (singular_values_loss, TALL),
    "svd": (svd_loss, TALL),
    "svd-wide": (svd_wide_loss, WIDE),
    "svd-square": (svd_square_loss, SQUARE),
    "pinv": (pinv_loss, TALL),
    "pinv-wide": (pinv_wide_loss, WIDE),
    "pinv-square": (pinv_square_loss, SQUARE),
    "pinv-stack": (pinv_stack_loss, STACK),
}


@pytest.mark.parametrize("name", list(CASES))
def test_both_modes_against_differences(name):
    f, x = CASES[name]
    ad.check_grads(f, (x,), modes=("rev", "fwd"))


def test_singular_values_of_full_matrices_in_reverse_mode():
    """full_matrices=True (NumPy's default) with only s read: the first columns of u and rows
    of vh are the reduced decomposition's."""
    ad.check_grads(svd_values_of_full_matrices_loss, (TALL,), modes=("rev",))
    ad.check_grads(svd_values_of_full_matrices_loss, (WIDE,), modes=("rev",))


@pytest.mark.parametrize("name", ["matrix_power", "matrix_power-negative", "norm-p",
                                  "norm-nuc-2", "svd", "pinv"])
def test_order_2(name):
    f, x = CASES[name]
    ad.check_grads(f, (x,), order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("name", ["matrix_power", "norm-p"])
def test_hessian_matches_differences_of_the_gradient(name, rng):
    f, x = CASES[name]
    assert_hessian_matches_gradient_differences(f, (x,), rng)


@pytest.mark.parametrize("name", ["matrix_power-negative", "norm-nuc-2", "svd", "pinv"])
def test_batched_gradient(name):
    """vmap(grad) and vmap(f) against the plain ones per example."""
    f, x = CASES[name]
    batch = np.stack([x, 0.9 * x + 0.05, 1.1 * x])
    want = [ad.grad(f)(e) for e in batch]
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(batch), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ad.vmap(f)(batch), [f(e) for e in batch], rtol=1e-12)


# ---------------------------------------------------------------- values worked out by hand
def test_matrix_power_values():
    """d sum(a^2 * w) / da = w a^T + a^T w; d sum(a^-1 * w) / da = -a^-T w a^-T."""
    a_bar = ad.grad(lambda a: np.sum(np.linalg.matrix_power(a, 2) * W3))(SQUARE)
    np.testing.assert_allclose(a_bar, W3 @ SQUARE.T + SQUARE.T @ W3, rtol=1e-12)
    inverse = np.linalg.inv(SQUARE)
    a_bar = ad.grad(lambda a: np.sum(np.linalg.matrix_power(a, -1) * W3))(SQUARE)
    np.testing.assert_allclose(a_bar, -inverse.T @ W3 @ inverse.T, rtol=1e-10)
    assert not ad.grad(lambda a: np.sum(np.linalg.matrix_power(a, 0)))(SQUARE).any()


def test_norm_values():
    """The p-norm's gradient sign(x) |x|^(p-1) / |x|_p^(p-1); the nuclear norm's u vh; the
    spectral norm's u_1 v_1^T."""
    x = np.array([3.0, -4.0, 0.0, 1.0])
    y = np.sum(np.abs(x) ** 3) ** (1 / 3)
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, 3))(x),
                               np.sign(x) * np.abs(x) ** 2 / y ** 2, rtol=1e-12)
    u, s, vh = np.linalg.svd(TALL, full_matrices=False)
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, "nuc"))(TALL), u @ vh,
                               rtol=1e-10)
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, 2))(TALL),
                               np.outer(u[:, 0], vh[0]), rtol=1e-10)
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, -2))(TALL),
                               np.outer(u[:, 2], vh[2]), rtol=1e-10)


def test_ties_share_equally():
    """As jnp.linalg.norm (a max or min of singular values or of abs sums, whose rules share
    among ties): a repeated largest singular value, and equal column / row sums, each get an
    equal share; an entry at 0 counts as positive (np.abs's slope 1 there)."""
    tied = np.diag([2.0, 2.0, 1.0])
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, 2))(tied),
                               np.diag([0.5, 0.5, 0.0]), atol=1e-12)
    _, tangent = ad.jvp(lambda x: np.linalg.norm(x, 2), (tied,), (np.diag([1.0, 3.0, 5.0]),))
    assert tangent == pytest.approx(2.0)
    x = np.array([[1.0, -2.0], [0.0, 1.0], [-3.0, 0.0]])  # column sums 4, 3; row sums 3, 1, 3
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, 1))(x),
                               [[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    np.testing.assert_allclose(ad.grad(lambda x: np.linalg.norm(x, np.inf))(x),
                               [[0.5, -0.5], [0.0, 0.0], [-0.5, 0.5]])


@pytest.mark.filterwarnings("ignore:divide by zero", "ignore:invalid value")
def test_p_norm_at_zeros():
    """As JAX's sum(abs(x) ** p) ** (1 / p): 0 at an entry 0 for p > 1, inf for p < 1, nan
    at x = 0 (0/0, as the 2-norm's)."""
    x = np.array([1.0, 0.0, -2.0])
    assert ad.grad(lambda x: np.linalg.norm(x, 3))(x)[1] == 0.0
    assert ad.grad(lambda x: np.linalg.norm(x, 0.5))(x)[1] == np.inf
    assert np.isnan(ad.grad(lambda x: np.linalg.norm(x, 3))(np.zeros(3))).all()


def test_singular_values_and_pinv_values():
    """d sum(s * w) / dx = u diag(w) vh; pinv of an invertible matrix is its inverse."""
    u, s, vh = np.linalg.svd(TALL, full_matrices=False)
    got = ad.grad(lambda x: np.sum(np.linalg.svd(x, compute_uv=False) * SHARES))(TALL)
    np.testing.assert_allclose(got, (u * SHARES) @ vh, rtol=1e-10)
    inverse = np.linalg.inv(SQUARE)
    np.testing.assert_allclose(ad.grad(pinv_square_loss)(SQUARE), -inverse.T @ W3 @ inverse.T,
                               rtol=1e-8)


# ---------------------------------------------------------------- refusals
def _zero_order_norm(x):
    return np.linalg.norm(x, 0)


def _svd_full_vectors(x):
    u, s, vh = np.linalg.svd(x)
    return np.sum(u ** 2 * W43)


def _svd_hermitian(a):
    return np.sum(np.linalg.svd(a, compute_uv=False, hermitian=True))


def _svd_of_a_stack(a):
    return np.sum(np.linalg.svd(a, compute_uv=False))


def _pinv_hermitian(a):
    return np.sum(np.linalg.pinv(a, hermitian=True))


@pytest.mark.parametrize("f,x,words", [
    (_zero_order_norm, VECTOR, "ord=0 counts the nonzero entries"),
    (_svd_full_vectors, TALL, "full_matrices=True"),
    (_svd_hermitian, SQUARE, "hermitian=True"),
    (_svd_of_a_stack, STACK, "not for a stack of matrices"),
    (_pinv_hermitian, SQUARE, "hermitian=True"),
], ids=["norm-ord-0", "svd-full-matrices", "svd-hermitian", "svd-stack", "pinv-hermitian"])
def test_refused_with_a_reason(f, x, words):
    """What has no template is refused at the user's line, saying why, in both modes."""
    with pytest.raises(MissingRuleError) as caught:
        ad.grad(f)(x)
    assert words in caught.value.message and caught.value.hint
    assert caught.value.lineno == f.__code__.co_firstlineno + 1  # (the call, first line)
    with pytest.raises(MissingRuleError) as caught:
        ad.jvp(f, (x,), (x,))
    assert words in caught.value.message


def test_svd_values_of_full_matrices_are_refused_in_forward_mode():
    with pytest.raises(MissingRuleError) as caught:
        ad.jvp(svd_values_of_full_matrices_loss, (TALL,), (TALL,))
    assert "full_matrices=False" in caught.value.hint


# ---------------------------------------------------------------- compiled by Numba
def every_new_template(a, x, v):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    total = np.sum(np.linalg.matrix_power(a, 3) * W3) + np.sum(np.linalg.matrix_power(a, -2) * W3)
    total = total + np.linalg.norm(v, 3) + np.sum(np.linalg.norm(x, 3, axis=1))
    total = total + np.linalg.norm(x, "nuc") + np.linalg.norm(x, 2) + np.linalg.norm(x, -2)
    total = total + np.linalg.norm(x, 1) + np.linalg.norm(x, -np.inf)
    total = total + np.sum(np.linalg.svd(x, compute_uv=False) ** 2)
    total = total + np.sum(u ** 2 * W43) + np.sum(s ** 3) + np.sum(vh ** 2 * W33)
    return total + np.sum(np.linalg.pinv(x) * W34)


@pytest.mark.numba
def test_compiled_gradient_equals_the_plain_one(quick_llvm):
    args = (SQUARE, TALL, VECTOR)
    g = ad.grad(every_new_template, argnums=(0, 1, 2))
    for got, want in zip(jit(g)(*args), g(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.numba
def test_compiled_jvp_equals_the_plain_one(quick_llvm):
    """The forward rules' helpers (svd_tangents, singular_value_tangents,
    matrix_power_tangent, singular_norm_slope) and the primal calls Numba takes in another
    form (norm 'nuc', a p-norm along an axis, svd with compute_uv=False)."""
    from autodiff_ast.jacobians import jvp_transform
    args = (SQUARE, TALL, VECTOR)
    tangents = tuple(np.random.default_rng(5).standard_normal(np.shape(a)) for a in args)
    got = jit(jvp_transform(every_new_template))(args, tangents)
    want = jvp_transform(every_new_template)(args, tangents)
    np.testing.assert_allclose(got, want, rtol=1e-10)
