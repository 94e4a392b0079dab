"""Derivatives of any order, through our own generated source.

grad of grad of ..., jacfwd/jacrev (vmap of the jvp/vjp modules), their four compositions, jvp of
grad (Hessian-vector products) and vjp of jvp, each against finite differences; Hessians also for
symmetry. check_grads checks both modes and their agreement at every order, and catches a wrong
rule. A golden file pins the generated source of a Hessian.
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import rules
from autodiff_ast.templates import fill

RNG = np.random.default_rng(1)


def numeric_jacobian(f, x, eps=1e-6):
    """Central differences, laid out as JAX does: out.shape + x.shape."""
    x = np.asarray(x, dtype=float)
    out = np.asarray(f(x))
    jac = np.zeros(out.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        jac[(Ellipsis,) + idx] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
    return jac


def numeric_hessian(f, x, eps=1e-4):
    return numeric_jacobian(lambda v: numeric_jacobian(f, v, eps), x, eps)


# ---------------------------------------------------------------- grad of grad of ...
def cubic(x):
    return x ** 3 + 2 * x ** 2 - 3 * x + 1


def test_four_grads_of_the_polynomial():
    d1 = ad.grad(cubic)
    d2 = ad.grad(d1)
    d3 = ad.grad(d2)
    d4 = ad.grad(d3)
    assert [float(d(1.0)) for d in (d1, d2, d3, d4)] == [4.0, 10.0, 6.0, 0.0]


def test_three_grads_of_tanh():
    d1 = ad.grad(np.tanh)
    d2 = ad.grad(d1)
    d3 = ad.grad(d2)
    values = [d(2.0) for d in (d1, d2, d3)]
    assert np.allclose(values, [0.070650816, -0.13621868, 0.25265405], atol=1e-8)


# ---------------------------------------------------------------- Jacobians
def vector_field(x, y):
    """R^3 x R^(2x3) -> R^(2x3), with broadcasting."""
    return np.tanh(x * y) + np.sum(x ** 2) * y


X = np.array([0.3, -0.5, 0.8])
Y = RNG.uniform(-1.0, 1.0, (2, 3))


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobians_match_finite_differences_with_jax_shapes(jac):
    jx = jac(vector_field)(X, Y)
    jy = jac(vector_field, argnums=1)(X, Y)
    assert jx.shape == (2, 3, 3) and jy.shape == (2, 3, 2, 3)
    assert np.allclose(jx, numeric_jacobian(lambda v: vector_field(v, Y), X), atol=1e-6)
    assert np.allclose(jy, numeric_jacobian(lambda v: vector_field(X, v), Y), atol=1e-6)
    both = jac(vector_field, argnums=(0, 1))(X, Y)
    assert isinstance(both, tuple) and np.allclose(both[0], jx) and np.allclose(both[1], jy)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_scalar_inputs_and_outputs(jac):
    assert np.isclose(jac(lambda t: np.sin(t) * t)(0.4), np.cos(0.4) * 0.4 + np.sin(0.4))
    grad_like = jac(lambda v: np.sum(v ** 3))(X)
    assert grad_like.shape == (3,) and np.allclose(grad_like, 3 * X ** 2)
    column = jac(lambda t: np.array([t, t * t, np.sin(t)]))(0.5)
    assert column.shape == (3,) and np.allclose(column, [1.0, 1.0, np.cos(0.5)])


def two_outputs(x):
    return np.sin(x), np.sum(x * x)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_tuple_outputs_give_a_tuple_of_jacobians(jac):
    j0, j1 = jac(two_outputs)(X)
    assert np.allclose(j0, np.diag(np.cos(X))) and np.allclose(j1, 2 * X)


def layer(params, x):
    return np.tanh(np.dot(params["W"], x) + params["b"])


PARAMS = {"W": RNG.uniform(-1.0, 1.0, (2, 3)), "b": np.array([0.1, -0.2])}


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_pytree_inputs_give_pytree_jacobians(jac):
    jp = jac(layer)(PARAMS, X)
    assert set(jp) == {"W", "b"}
    assert jp["W"].shape == (2, 2, 3) and jp["b"].shape == (2, 2)
    assert np.allclose(jp["W"], numeric_jacobian(lambda w: layer({"W": w, "b": PARAMS["b"]},
                                                                 X), PARAMS["W"]), atol=1e-6)
    assert np.allclose(jp["b"], numeric_jacobian(lambda b: layer({"W": PARAMS["W"], "b": b},
                                                                 X), PARAMS["b"]), atol=1e-6)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_has_aux(jac):
    def f(x):
        y = np.sin(x)
        return y * 2.0, np.sum(y)
    j, aux = jac(f, has_aux=True)(X)
    assert np.allclose(j, np.diag(2.0 * np.cos(X))) and np.isclose(aux, np.sum(np.sin(X)))


def test_jacobians_are_one_vectorized_pass():
    fwd = ad.jacfwd(vector_field)
    fwd(X, Y)
    assert "np.eye(" in fwd.source and "vmap_jvp_vector_field" in fwd.source
    rev = ad.jacrev(vector_field)
    rev(X, Y)
    assert "vmap_vector_field_bwd" in rev.source
    for source in (fwd.source, rev.source):
        assert "for " not in source  # no Python loop over basis directions


# ---------------------------------------------------------------- Hessians
def energy(x):
    d = x[1:] - x[:-1]
    return np.sum(d * d) * 0.5 + np.sum(np.cos(x) * x ** 2)


COMPOSITIONS = {
    "hessian": ad.hessian,
    "jacfwd(jacrev)": lambda f: ad.jacfwd(ad.jacrev(f)),
    "jacrev(jacfwd)": lambda f: ad.jacrev(ad.jacfwd(f)),
    "jacfwd(jacfwd)": lambda f: ad.jacfwd(ad.jacfwd(f)),
    "jacrev(jacrev)": lambda f: ad.jacrev(ad.jacrev(f)),
    "jacfwd(grad)": lambda f: ad.jacfwd(ad.grad(f)),
}


@pytest.mark.parametrize("compose", sorted(COMPOSITIONS))
def test_hessian_compositions(compose):
    x = np.array([0.3, -0.4, 1.1, 0.2])
    hess = COMPOSITIONS[compose](energy)(x)
    assert hess.shape == (4, 4)
    assert np.allclose(hess, hess.T, atol=1e-10)
    assert np.allclose(hess, numeric_hessian(energy, x), atol=1e-5)


def test_hessian_with_broadcasting_and_two_arguments():
    def f(x, y):
        return np.sum(np.tanh(x[:, None] * y.T) ** 2)
    hxy = ad.hessian(f, argnums=(0, 1))(X, Y)
    assert hxy[0][0].shape == (3, 3) and hxy[0][1].shape == (3, 2, 3)
    assert hxy[1][0].shape == (2, 3, 3) and hxy[1][1].shape == (2, 3, 2, 3)
    assert np.allclose(hxy[0][1], np.transpose(hxy[1][0], (2, 0, 1)), atol=1e-10)
    assert np.allclose(hxy[0][0], numeric_hessian(lambda v: f(v, Y), X), atol=1e-5)


def test_hessian_of_pytree_params_nests_like_jax():
    def loss(params, x):
        return np.sum(layer(params, x) ** 2)
    h = ad.hessian(loss)(PARAMS, X)
    assert set(h) == {"W", "b"} and set(h["W"]) == {"W", "b"}
    assert h["W"]["W"].shape == (2, 3, 2, 3) and h["W"]["b"].shape == (2, 3, 2)
    assert h["b"]["W"].shape == (2, 2, 3) and h["b"]["b"].shape == (2, 2)
    assert np.allclose(h["W"]["b"], np.transpose(h["b"]["W"], (1, 2, 0)), atol=1e-10)
    expected = numeric_hessian(lambda b: loss({"W": PARAMS["W"], "b": b}, X), PARAMS["b"])
    assert np.allclose(h["b"]["b"], expected, atol=1e-5)


def test_hessian_vector_product_is_jvp_of_grad():
    x, v = np.array([0.3, -0.4, 1.1]), np.array([1.0, 0.5, -2.0])
    _, hvp = ad.jvp(ad.grad(energy), (x,), (v,))
    assert np.allclose(hvp, ad.hessian(energy)(x) @ v)
    assert np.allclose(hvp, numeric_hessian(energy, x) @ v, atol=1e-5)


def directional(x, v):
    return ad.jvp(energy, (x,), (v,))[1]


def test_vjp_of_jvp():
    x, v = np.array([0.3, -0.4, 1.1]), np.array([1.0, 0.5, -2.0])
    out, pullback = ad.vjp(directional, x, v)
    x_bar, v_bar = pullback(1.0)
    assert np.isclose(out, np.dot(ad.grad(energy)(x), v))
    assert np.allclose(x_bar, ad.hessian(energy)(x) @ v)  # d/dx <grad f(x), v> = H v
    assert np.allclose(v_bar, ad.grad(energy)(x))


def test_hessian_golden_source(golden):
    def potential(x):
        return np.sum(np.tanh(x) * x ** 2)
    h = ad.hessian(potential)
    x = np.array([0.2, -0.3])
    assert np.allclose(h(x), numeric_hessian(potential, x), atol=1e-5)
    golden("hessian_potential.py", h.source)


# ---------------------------------------------------------------- check_grads at every order
def with_helper(a, b):
    return np.sin(a) * b


def mixed(x, y):
    return np.sum(with_helper(x, y) * x) + np.sum(np.exp(-y * y))


@pytest.mark.parametrize("fun, args", [
    (energy, (np.array([0.3, -0.4, 1.1]),)),
    (mixed, (X, np.array([0.2, 0.7, -0.3]))),
    (lambda x, w: np.tanh(np.dot(w, x)), (X, Y)),
], ids=["energy", "helper_and_two_args", "broadcasting_dot"])
def test_check_grads_second_order_both_modes(fun, args):
    ad.check_grads(fun, args, order=2, modes=("fwd", "rev"))


@pytest.fixture
def broken_rule():
    """Replace a rule's jvp for one test (the rules are shared objects)."""
    saved = []

    def breaking(name, jvp):
        rule = rules.by_name(name)
        saved.append((rule, rule.jvp))
        rule.jvp = jvp
    yield breaking
    for rule, jvp in saved:
        rule.jvp = jvp


def test_check_grads_catches_a_wrong_forward_rule(broken_rule):
    broken_rule("tanh", lambda call, dots: fill("(1.0 + y * y) * d", y=call.out, d=dots["x"]))
    with pytest.raises(AssertionError, match="forward mode"):
        ad.check_grads(lambda v: np.tanh(v) * 2.0, (X,), modes=("fwd", "rev"))


def test_check_grads_catches_a_wrong_rule_seen_only_at_second_order(broken_rule):
    # sin's own rules are right; cos (which appears only in sin's derivative) has a wrong
    # forward rule: order 1 passes, order 2 (forward over reverse) must fail.
    broken_rule("cos", lambda call, dots: fill("np.sin(x) * d", x=call.args["x"],
                                               d=dots["x"]))

    def f(v):
        return np.sum(np.sin(v) * 3.0)
    ad.check_grads(f, (X,), order=1, modes=("fwd", "rev"))
    with pytest.raises(AssertionError, match="forward mode"):
        ad.check_grads(f, (X,), order=2, modes=("fwd", "rev"))


def test_third_order_reverse_through_helpers_returning_tuples():
    """Our own f_fwd functions return (output tuple, residuals): reverse mode of them used to
    seed and keep active only top-level outputs, dropping the inner tuple's adjoints."""
    ad.check_grads(lambda v: np.sum(np.tanh(v) * v), (X,), order=3, modes=("rev",))


def test_third_order_forward():
    ad.check_grads(lambda v: np.sum(np.tanh(v) * v), (X,), order=3, modes=("fwd",))


# ---------------------------------------------------------------- known gaps
INDEX = np.array([0, 2, 2])


def gathers(x):
    return np.sum(np.sin(x[INDEX]) ** 2)


def accumulates(x):
    k = 0
    s = 0.0
    while k < 3:
        s = s + np.sum(np.sin(x * k))
        k = k + 1
    return s


def test_forward_over_forward_handles_what_reverse_code_cannot_yet():
    x = np.array([0.3, -0.4, 1.1])
    for f in (gathers, accumulates):
        h = ad.jacfwd(ad.jacfwd(f))(x)
        assert np.allclose(h, numeric_hessian(f, x), atol=1e-5)


@pytest.mark.parametrize("fun", [gathers, accumulates], ids=["np_add_at", "while_tapes"])
def test_forward_over_reverse_through_scatters_and_tapes(fun):
    # The gradient modules hold np.add.at and list tapes (append/pop): jvp reads them too.
    x, v = np.array([0.3, -0.4, 1.1]), np.array([1.0, 2.0, -1.0])
    _, hvp = ad.jvp(ad.grad(fun), (x,), (v,))
    assert np.allclose(hvp, numeric_hessian(fun, x) @ v, atol=1e-5)


def test_hessian_through_fancy_index_scatter():
    x = np.array([0.3, -0.4, 1.1])
    assert np.allclose(ad.hessian(gathers)(x), numeric_hessian(gathers, x), atol=1e-5)


def test_hessian_through_a_while_loop_tape():
    # jvp of the gradient module pops a list of tangents; vmap pops batched elements
    x = np.array([0.3, -0.4, 1.1])
    assert np.allclose(ad.hessian(accumulates)(x), numeric_hessian(accumulates, x),
                       atol=1e-5)


def test_reverse_over_reverse_through_loops():
    # the vmapped backward-of-backward takes batched tapes (lists) before any batched array
    x = np.array([0.3, -0.4, 1.1])
    h = ad.jacrev(ad.jacrev(accumulates))(x)
    assert np.allclose(h, numeric_hessian(accumulates, x), atol=1e-5)



def _sum_of_cumprod(x):
    return np.sum(np.cumprod(x))


def _descending_products(x):
    # a loop bound `n` and a descending range, as in the cumprod_adjoint helper
    n = x.shape[0]
    out = np.empty(n)
    acc = 1.0
    for j in range(n - 1, -1, -1):
        acc = acc * x[j]
        out[j] = acc
    return np.sum(out)


@pytest.mark.parametrize("fun, orders", [
    (_sum_of_cumprod, ("rrr", "rfr")),
    (_descending_products, ("rfr",)),
], ids=["cumprod", "descending_loop"])
def test_third_order_reverse_of_a_loop_bound_n(fun, orders):
    """jacrev's wrapper named its basis size `n` (`n = out.size`), and a residual of the vjp
    module called `n` (the loop bound of cumprod's adjoint helper, differentiated as code at
    third order, or of a user's loop) was passed after it: the backward loops ran to
    out.size (IndexError: index 4 is out of bounds)."""
    x = np.array([0.3, 0.0, 0.7, 2.0])
    want = ad.jacfwd(ad.jacfwd(ad.jacfwd(fun)))(x)
    numeric = numeric_jacobian(ad.hessian(fun), x)
    assert np.allclose(want, numeric, atol=1e-6)
    composed = {"rrr": ad.jacrev(ad.jacrev(ad.jacrev(fun))),
                "rfr": ad.jacrev(ad.jacfwd(ad.jacrev(fun)))}
    for order in orders:
        got = composed[order](x)
        assert got.shape == (4, 4, 4)
        assert np.allclose(got, want, atol=1e-12), order
        assert np.allclose(got, numeric, atol=1e-6), order


# ---------------------------------------------------------------- second order with pytrees
def _dict_loss(p, x):
    return np.sum(np.tanh(p["W"] @ x + p["b"]) ** 2) + p["s"] * np.sum(x ** 2)


def _dict_point():
    rng = np.random.default_rng(7)
    p = {"W": rng.standard_normal((2, 3)), "b": rng.standard_normal(2), "s": 0.4}
    v = {"W": rng.standard_normal((2, 3)), "b": rng.standard_normal(2), "s": -0.3}
    return p, v, rng.standard_normal(3), rng.standard_normal(3)


def _fd_along(g, p, v, x, dx, eps=1e-6):
    """Central differences of g(p, x) along (v, dx), leaf by leaf (g returns a pytree)."""
    from autodiff_ast import pytrees
    plus = g(pytrees.tree_map(lambda a, b: a + eps * b, p, v), x + eps * dx)
    minus = g(pytrees.tree_map(lambda a, b: a - eps * b, p, v), x - eps * dx)
    return pytrees.tree_map(lambda a, b: (a - b) / (2 * eps), plus, minus)


@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_hessian_vector_products_of_dict_parameters(argnums):
    """jvp and vjp of grad(f) with a dict argument: results come back as the dicts (and
    tuples) grad returns, equal to finite differences of the gradient."""
    from autodiff_ast import pytrees
    p, v, x, dx = _dict_point()
    g = ad.grad(_dict_loss, argnums=argnums)
    want = _fd_along(g, p, v, x, dx)
    out, hvp = ad.jvp(g, (p, x), (v, dx))
    assert pytrees.tree_structure(hvp) == pytrees.tree_structure(g(p, x))
    for a, b in zip(pytrees.tree_leaves(hvp), pytrees.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    # vjp of the gradient, with u = J w (shaped like grad's output) as cotangent:
    # <J^T u, w> = <u, J w> (dot-product test)
    value, pullback = ad.vjp(g, p, x)
    assert pytrees.tree_structure(value) == pytrees.tree_structure(out)
    ct_p, ct_x = pullback(hvp)
    assert set(ct_p) == {"W", "b", "s"}
    lhs = sum(np.sum(a * b) for a, b in zip(pytrees.tree_leaves((ct_p, ct_x)),
                                            pytrees.tree_leaves((v, dx))))
    rhs = sum(np.sum(a * a) for a in pytrees.tree_leaves(hvp))
    assert lhs == pytest.approx(rhs, rel=1e-10)


@pytest.mark.parametrize("jac", [ad.jacfwd, ad.jacrev], ids=["jacfwd", "jacrev"])
def test_jacobians_of_grad_with_dict_parameters(jac):
    """jacfwd/jacrev(grad(f)) of a dict: JAX's nesting (gradient leaf, then argument leaf),
    equal to hessian(f) and, with argnums=(0, 1), to finite differences of the gradient."""
    from autodiff_ast import pytrees
    p, v, x, dx = _dict_point()
    got, want = jac(ad.grad(_dict_loss))(p, x), ad.hessian(_dict_loss)(p, x)
    assert pytrees.tree_structure(got) == pytrees.tree_structure(want)
    for a, b in zip(pytrees.tree_leaves(got), pytrees.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    g = ad.grad(_dict_loss, argnums=(0, 1))
    both = jac(g, argnums=(0, 1))(p, x)
    # contract the Jacobian with (v, dx): the directional derivative of the gradient
    contracted = []
    for out_leaf, (by_p, by_x) in zip(pytrees.tree_leaves(g(p, x)), _blocks(both)):
        total = np.tensordot(by_x, dx, axes=1)
        for blk, t in zip(pytrees.tree_leaves(by_p), pytrees.tree_leaves(v)):
            total = total + np.tensordot(blk, t, axes=np.ndim(t))
        contracted.append(total)
    want = pytrees.tree_leaves(_fd_along(g, p, v, x, dx))
    for a, b in zip(contracted, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def _blocks(jacobian):
    """The (by p, by x) block pairs of jac(grad(f, argnums=(0, 1)), argnums=(0, 1)), one per
    gradient leaf in tree_leaves order: the gradient's structure holds the pairs as leaves."""
    grads_p, grad_x = jacobian
    return [grads_p[k] for k in sorted(grads_p)] + [grad_x]


def test_hessian_with_argnums_over_a_dict_and_an_array():
    """hessian(f, argnums=(0, 1)) with a dict first argument: vmap read the nested tuple
    flag of grad's output ((p_w_bar,), x_bar) as batched (a non-empty tuple is truthy) and
    refused; blocks now match the same function written with flat arguments."""
    def tree(p, x):
        return np.sum(np.tanh(p["w"] * x) ** 2)

    def flat(w, x):
        return np.sum(np.tanh(w * x) ** 2)
    w, x = np.array([0.1, 0.2]), np.array([0.3, -0.2])
    got = ad.hessian(tree, argnums=(0, 1))({"w": w}, x)
    want = ad.hessian(flat, argnums=(0, 1))(w, x)
    np.testing.assert_allclose(got[0]["w"][0]["w"], want[0][0], rtol=1e-12)
    np.testing.assert_allclose(got[0]["w"][1], want[0][1], rtol=1e-12)
    np.testing.assert_allclose(got[1][0]["w"], want[1][0], rtol=1e-12)
    np.testing.assert_allclose(got[1][1], want[1][1], rtol=1e-12)
    np.testing.assert_allclose(want[0][0], numeric_hessian(lambda v: flat(v, x), w), atol=1e-5)


def _diagonal_cubes(m):
    return np.sum(np.diag(m) ** 3) + np.sum(m * m)


def test_hessian_through_np_diag_of_a_matrix():
    """vmap batches np.diag of a matrix into np.diagonal(x, axis1=1, axis2=2): that form has
    its own rule (it was refused, so no Hessian of a function reading a matrix's diagonal)."""
    from autodiff_ast.jit import jit
    m = np.arange(12.0).reshape(3, 4) / 10.0
    expected = 2.0 * np.eye(12).reshape(3, 4, 3, 4)
    for i in range(3):
        expected[i, i, i, i] += 6.0 * m[i, i]
    for hess in (ad.hessian(_diagonal_cubes), jit(ad.hessian(_diagonal_cubes)),
                 ad.jacrev(ad.jacrev(_diagonal_cubes)), ad.jacfwd(ad.jacfwd(_diagonal_cubes))):
        np.testing.assert_allclose(hess(m), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 4), (4, 3)])
def test_gradient_of_a_rectangular_matrix_diagonal(shape):
    """np.diag(g) was the adjoint of a matrix's diagonal: square, so a rectangular matrix's
    gradient failed to broadcast."""
    from autodiff_ast.jit import jit
    m = np.arange(12.0).reshape(shape)
    expected = np.zeros(shape)
    for i in range(3):
        expected[i, i] = 2.0 * m[i, i]
    for fn in (lambda a: np.sum(np.diag(a) ** 2), lambda a: np.sum(np.diagonal(a) ** 2)):
        np.testing.assert_allclose(ad.grad(fn)(m), expected, rtol=1e-12)
        np.testing.assert_allclose(jit(ad.grad(fn))(m), expected, rtol=1e-12)


COLUMNS = np.array([0, 3, 1, 1, 2])  # (column 1 twice: the adjoint's np.add.at accumulates)


def integer_slice_columns(y):
    z = y[0, :, COLUMNS]  # integer, slice, index array: NumPy puts the columns' axis first
    s = np.sum(z, axis=1)
    return np.sum(s * s) + np.sum(np.max(z, axis=0) ** 3) + np.sum(z[1:] * z[:-1])


def test_hessian_through_an_index_with_an_integer_a_slice_and_an_index_array():
    """The gradient scatters into y with np.add.at(y_bar, (0, slice, COLUMNS), ...); jacfwd's
    vmap does that once per example, and wrote np.add.at(y_bar_dot[i], ...), which the next
    reading of the module refused (np.add.at needs a named array). It writes
    np.add.at(y_bar_dot, (i, 0, slice, COLUMNS), ...) now: the same layout in NumPy, as the
    integer and the array are apart. (jit of this Hessian gives the same numbers; its cold
    compile takes about a minute, so it is not repeated here.)"""
    y = RNG.standard_normal((2, 3, 4))
    expected = numeric_jacobian(ad.grad(integer_slice_columns), y)
    np.testing.assert_allclose(ad.hessian(integer_slice_columns)(y), expected, atol=1e-6)


def slice_integer_columns(y):
    z = y[:, 0, COLUMNS]  # slice, then integer and array together: their axis stays second
    s = np.sum(z, axis=1)
    return np.sum(s * s) + np.sum(np.max(z, axis=0) ** 3) + np.sum(z[1:] * z[:-1])


def slice_pair_columns(y):
    z = y[:, :, 1, COLUMNS]  # two slices before the integer and the array
    return np.sum(np.sin(z) * z[::-1])


def test_hessian_through_slices_then_an_integer_and_an_index_array():
    """np.add.at(y_bar, (slice, 0, COLUMNS), v) once per example: y_bar_dot[i, :, 0, COLUMNS]
    puts the columns' axis first, y_bar_dot[i][:, 0, COLUMNS] second, so the value is written
    with its axes reordered, np.transpose(v[i], (1, 0)) (before: np.add.at(y_bar_dot[i], ...),
    which hessian's reading of the module refused)."""
    y = RNG.standard_normal((2, 3, 4))
    expected = numeric_jacobian(ad.grad(slice_integer_columns), y)
    np.testing.assert_allclose(ad.hessian(slice_integer_columns)(y), expected, atol=1e-6)
    y4 = RNG.standard_normal((2, 3, 2, 4))
    expected = numeric_jacobian(ad.grad(slice_pair_columns), y4)
    np.testing.assert_allclose(ad.hessian(slice_pair_columns)(y4), expected, atol=1e-6)


# ---------------------------------------------------------------- transforms of grad(has_aux)
# The gradient module returns (aux, gradient) flat (value and aux first); a call reorders it
# to JAX's (gradient, aux), but transforms of it and calls of it inside a transformed function
# read the module as written: jacfwd(grad(f, has_aux=True), has_aux=True) gave the Jacobian
# of the aux and the gradient as aux; jit/jvp of a function calling it summed the wrong
# outputs. function_for now hands them a wrapper returning the call's structure.
def cubes_and_max(w):
    return np.sum(w ** 3), np.max(w)


def uses_grad_with_aux(w):
    g, m = ad.grad(cubes_and_max, has_aux=True)(w)
    return np.sum(g) + m


def uses_value_and_grad_with_aux(w):
    vg = ad.value_and_grad(cubes_and_max, has_aux=True)(w)
    return vg[0][0] + vg[0][1] + np.sum(vg[1])


def two_args(x, y):
    return np.sum(x * y ** 2)


def uses_value_and_grad_of_two(x):
    v, g = ad.value_and_grad(two_args, argnums=(0, 1))(x, x * 2.0)
    gx, gy = g
    return v + np.sum(gx * gy)


W2 = np.array([1.0, 2.0])


def test_jacobians_of_grad_with_aux():
    grad_aux = ad.grad(cubes_and_max, has_aux=True)
    for make in (ad.jacfwd, ad.jacrev):
        jac, aux = make(grad_aux, has_aux=True)(W2)
        np.testing.assert_allclose(jac, np.diag(6 * W2), rtol=1e-12)
        assert aux == 2.0
    g, g_dot, aux = ad.jvp(grad_aux, (W2,), (np.array([1.0, 0.0]),), has_aux=True)
    np.testing.assert_allclose(g, 3 * W2 ** 2, rtol=1e-12)
    np.testing.assert_allclose(g_dot, [6.0, 0.0], rtol=1e-12)
    assert aux == 2.0
    out, pullback, aux = ad.vjp(grad_aux, W2, has_aux=True)
    np.testing.assert_allclose(pullback(np.array([1.0, 0.0]))[0], [6.0, 0.0], rtol=1e-12)


@pytest.mark.parametrize("f", [uses_grad_with_aux, uses_value_and_grad_with_aux,
                               uses_value_and_grad_of_two], ids=lambda f: f.__name__)
def test_functions_calling_grad_with_aux_or_several_argnums(f):
    value = f(W2)
    assert ad.jit(f, target="python")(W2) == pytest.approx(value, rel=1e-12)
    _, tangent = ad.jvp(f, (W2,), (np.array([1.0, 0.0]),))
    eps = 1e-6
    step = np.array([eps, 0.0])
    assert tangent == pytest.approx((f(W2 + step) - f(W2 - step)) / (2 * eps), rel=1e-6)
    g = ad.grad(f)(W2)
    fd = [(f(W2 + e * eps) - f(W2 - e * eps)) / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)


# ---------------------------------------------------------------- list displays as operands
# np.concatenate([x, [1.0]]) and np.take(x, [0, 2]) were typed as arrays of unknown rank, so
# the gradient summed through the `unbroadcast` helper, whose loop changes rank: jacrev and
# hessian (which read the gradient module again) failed with a TypeInferenceError, and Numba
# refused the list piece of np.concatenate under jit. A display of numbers is a vector there
# (types.as_operand; the dialect writes np.array([1.0])).
def appends_a_one(x):
    w = np.concatenate([x, [1.0]])
    return np.sum(w * np.linspace(0.0, 1.0, w.size) * w)


def takes_a_list(x):
    return np.sum(np.take(x, [0, 2]) ** 3)


@pytest.mark.parametrize("f", [appends_a_one, takes_a_list], ids=lambda f: f.__name__)
def test_list_displays_of_numbers_as_array_operands(f):
    x = np.array([1.0, 2.0, 3.0])
    grad_f = ad.grad(f)
    g = grad_f(x)
    np.testing.assert_allclose(ad.jacrev(f)(x), g, rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(f)(x), numeric_hessian(f, x), atol=1e-5)
    assert "unbroadcast" not in grad_f.source
    np.testing.assert_allclose(ad.jit(ad.grad(f))(x), g, rtol=1e-12)


def normalised_twice(w):
    v = np.zeros_like(w)
    for t in range(2):
        g = np.cos(w)
        v = v + g
        w = w / v
    return np.sum(w)


def test_jacrev_of_jacrev_through_a_loop_carried_sum():
    """jacrev(jacrev(f)) batches the inner backward function's `g_bar = g_bar + v_bar`: its
    g_bar arrives the same for every example and becomes one per example in the loop, so the
    batched function repeats it along the batch at entry (it failed to compile before)."""
    x = np.array([0.1, 0.2, 0.3])
    expected = numeric_hessian(normalised_twice, x)
    assert np.allclose(ad.jacrev(ad.jacrev(normalised_twice))(x), expected, atol=1e-5)
    assert np.allclose(ad.jacfwd(ad.jacrev(normalised_twice))(x), expected, atol=1e-5)


def _negated(x):
    return -x


def _spring_steps(x0, v0):
    x, v = x0, v0
    for _ in range(3):
        x = x + v
        v = v + _negated(x)
    return np.sum(x * x)


def test_hessian_of_a_loop_calling_a_linear_helper():
    """vmap's analysis met the helper's call with no batched argument on its first pass
    (a plain False for its tuple of outputs), then with one: merging the two made both
    outputs batched, and hessian / jacfwd(grad) failed with "out_axes is None for output
    0 ... differs between examples"."""
    x0, v0 = np.array([0.3, -0.2]), np.array([0.1, 0.4])
    expected = numeric_hessian(lambda x: _spring_steps(x, v0), x0)
    np.testing.assert_allclose(ad.hessian(_spring_steps)(x0, v0), expected, atol=1e-5)
    np.testing.assert_allclose(ad.jacfwd(ad.grad(_spring_steps))(x0, v0), expected,
                               atol=1e-5)


def _tanh_dict_loss(p, x):
    return np.sum(np.tanh(p["w"] * x) ** 2) + np.sum(p["b"] ** 3)


def test_hessian_vector_product_of_dict_parameters_the_jax_way():
    """``jvp(lambda q: grad(loss)(q, x), (p,), (v,))``: grad(loss) called with a dict inside
    differentiated code was refused ("a pytree argument cannot be used as one value"), and
    so was the dict it returns as jvp's output. Checked against hessian's blocks."""
    x = np.array([0.5, -1.0, 2.0])
    p = {"w": np.array([1.0, 2.0, 3.0]), "b": np.array([0.3, -0.2])}
    v = {"w": np.array([1.0, -0.5, 0.25]), "b": np.array([2.0, 1.0])}
    h = ad.hessian(_tanh_dict_loss)(p, x)
    expected = {k: h[k]["w"] @ v["w"] + h[k]["b"] @ v["b"] for k in ("w", "b")}
    g, hv = ad.jvp(lambda q: ad.grad(_tanh_dict_loss)(q, x), (p,), (v,))
    assert type(hv) is dict and sorted(hv) == ["b", "w"]
    for k in ("w", "b"):
        np.testing.assert_allclose(hv[k], expected[k], rtol=1e-12)
    np.testing.assert_allclose(g["b"], 3.0 * p["b"] ** 2, rtol=1e-14)
    jac = ad.jacfwd(lambda q: ad.grad(_tanh_dict_loss)(q, x))(p)
    for k in ("w", "b"):
        for j in ("w", "b"):
            np.testing.assert_allclose(jac[k][j], h[k][j], rtol=1e-12, atol=1e-15)


def _sum_of_cumprod(x):
    return np.sum(np.cumprod(1.0 + 0.1 * x * x))


def _columns(out, aux):
    return np.sum(out * aux, axis=1) * 2.0


def test_jacrev_names_its_output_apart_from_residuals_and_arguments():
    """jacrev(grad(f)) with np.cumprod: the vjp module keeps a residual called `out`, which
    took the output's name, and the basis was np.eye of its length (a 1 x 3 result for
    3 x 3, no error). An argument called `out` or `aux` broke jacfwd the same way."""
    x = np.array([0.3, -0.7, 1.1])
    h = ad.hessian(_sum_of_cumprod)(x)
    step = 1e-5
    numeric = np.array([(ad.grad(_sum_of_cumprod)(x + step * e) -
                         ad.grad(_sum_of_cumprod)(x - step * e)) / (2 * step)
                        for e in np.eye(3)])
    np.testing.assert_allclose(h, numeric, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(ad.jacrev(ad.grad(_sum_of_cumprod))(x), h, rtol=1e-12)
    a = np.arange(6.0).reshape(2, 3)
    b = a[::-1] + 1.0
    for transform in (ad.jacfwd, ad.jacrev):
        ja, jb = transform(_columns, argnums=(0, 1))(a, b)
        assert ja.shape == jb.shape == (2, 2, 3)
        np.testing.assert_allclose(ja, 2.0 * np.eye(2)[:, :, None] * b[None], rtol=1e-14)
        np.testing.assert_allclose(jb, 2.0 * np.eye(2)[:, :, None] * a[None], rtol=1e-14)


def _nested_loss(p):
    return np.sum(p["a"]["w"] ** 2) + np.sum(p["b"] ** 3)


def _nested_gradient_norm(p):
    g = ad.grad(_nested_loss)(p)
    return np.sum(g["b"] ** 2)


def test_grad_of_nested_dicts_inside_transformed_code_is_refused_at_the_users_line():
    """It failed inside the function written for the call (`<autodiff-ast custom 2>:3: the
    entry 'a' of a returned dict holds a dict`); the user's line is named now."""
    p = {"a": {"w": np.array([1.0, 2.0])}, "b": np.array([0.5])}
    with pytest.raises(ad.UnsupportedSyntaxError, match="of a dict holding dicts") as info:
        ad.grad(_nested_gradient_norm)(p)
    assert "test_higher_order.py" in str(info.value)
    assert "g = ad.grad(_nested_loss)(p)" in str(info.value)


# ---------------------------------------------------------------- vmap of the maps linearize
# and vjp return (session 44: refused, "it is not a Python function")
def _two_input_map(x, y):
    return np.sin(x) * y + x ** 2


def test_vmap_of_a_linearized_map_and_of_a_pullback():
    x, y = np.array([0.1, 0.5, -0.3]), np.array([1.2, -0.4, 0.8])
    tx = np.random.default_rng(3).standard_normal((4, 3))
    ty = np.random.default_rng(4).standard_normal((4, 3))
    _, linear = ad.linearize(_two_input_map, x, y)
    jac_x = np.diag(np.cos(x) * y + 2.0 * x)  # by hand
    jac_y = np.diag(np.sin(x))
    got = ad.vmap(linear)(tx, ty)
    np.testing.assert_allclose(got, tx @ jac_x.T + ty @ jac_y.T, rtol=1e-12)
    shared = ad.vmap(linear, in_axes=(0, None))(tx, ty[0])
    np.testing.assert_allclose(shared, tx @ jac_x.T + ty[0] @ jac_y.T, rtol=1e-12)
    _, pullback = ad.vjp(_two_input_map, x, y)
    x_bars, y_bars = ad.vmap(pullback)(tx)
    np.testing.assert_allclose(x_bars, tx @ jac_x, rtol=1e-12)
    np.testing.assert_allclose(y_bars, tx @ jac_y, rtol=1e-12)
    with pytest.raises(ad.UnsupportedError, match="in_axes has 1 entries for a map of 2"):
        ad.vmap(linear, in_axes=(0,))
