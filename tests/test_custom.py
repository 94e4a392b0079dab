"""Custom derivative rules: custom_jvp, custom_vjp (JAX semantics) and register_rule.

The log1pexp example: ``log1p(exp(x))`` is fine to evaluate for large x in the form the user
writes below, but its naive derivative ``exp(x) / (1 + exp(x))`` is inf / inf = nan there.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import autodiff_ast as ad
from autodiff_ast.custom import RuleCheckError
from autodiff_ast.errors import MissingRuleError


def naive_log1pexp(x):
    return np.log1p(np.exp(x))


@ad.custom_jvp
def log1pexp(x):
    return np.log1p(np.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    x, = primals
    x_dot, = tangents
    return log1pexp(x), x_dot / (1.0 + np.exp(-x))


def loss(x):
    return np.sum(log1pexp(x) * 2.0)


def test_the_naive_derivative_overflows():
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(ad.grad(naive_log1pexp)(1000.0))


def test_custom_jvp_fixes_the_derivative_in_both_modes():
    x = np.array([1.0, 1000.0])
    with np.errstate(over="ignore"):
        g = ad.grad(loss)(x)
        _, out_dot = ad.jvp(loss, (x,), (np.ones(2),))
    expected = 2.0 / (1.0 + np.exp(-x))
    assert np.allclose(g, expected)
    assert np.isclose(out_dot, np.sum(expected))


def test_custom_jvp_against_finite_differences_to_second_order():
    ad.check_grads(loss, (np.array([0.3, -1.2, 2.0]),), order=2, modes=("fwd", "rev"))


def test_custom_jvp_source_calls_the_rule_not_the_naive_body():
    g = ad.grad(loss)
    g(np.array([1.0, 2.0]))
    assert "np.exp(-x)" in g.source
    rule = g.source.split("def log1pexp_vjp")[1].split("\ndef ")[0]
    assert "np.log1p" not in rule and "np.log1p" not in g.source.split("def grad_loss")[1]
    assert "def log1pexp(x):" in g.source  # the primal, written into the module
    _, _ = ad.jvp(loss, (np.ones(2),), (np.ones(2),))


def test_higher_order_derivatives_of_a_custom_jvp_function():
    x = 0.7
    s = 1.0 / (1.0 + np.exp(-x))
    assert np.isclose(ad.grad(ad.grad(log1pexp))(x), s * (1.0 - s))
    assert np.isclose(ad.hessian(lambda v: np.sum(log1pexp(v)))(np.array([x]))[0, 0],
                      s * (1.0 - s))


def test_jit_of_code_calling_a_custom_jvp_function():
    """The primal call is the function written into the module (it was the custom_jvp
    object, which Numba cannot call: "non-precise type pyobject")."""
    from autodiff_ast.jit import jit
    x = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(jit(loss)(x), loss(x), rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(loss))(x), 2.0 / (1.0 + np.exp(-x)), rtol=1e-12)
    xs = np.stack([x, 2.0 * x])
    np.testing.assert_allclose(jit(ad.vmap(ad.grad(loss)))(xs), 2.0 / (1.0 + np.exp(-xs)),
                               rtol=1e-12)
    np.testing.assert_allclose(jit(ad.vmap(loss))(xs), [loss(x), loss(2.0 * x)], rtol=1e-12)
    cube_sum = jit(ad.grad(_sum_of_cubes))
    np.testing.assert_allclose(cube_sum(x), 3.0 * x ** 2, rtol=1e-12)


@ad.custom_jvp
def scaled_sin(x, y):
    return np.sin(x) * y


scaled_sin.defjvps(lambda x_dot, out, x, y: np.cos(x) * y * x_dot,
                   lambda y_dot, out, x, y: np.sin(x) * y_dot)


def test_defjvps_one_rule_per_argument():
    x, y = np.array([0.3, 0.9]), np.array([1.5, -0.5])
    ad.check_grads(lambda a, b: scaled_sin(a, b), (x, y), modes=("fwd", "rev"))


@ad.custom_jvp
def power_of(x, n):
    return x ** n


@power_of.defjvp
def power_of_jvp(n, primals, tangents):
    x, = primals
    x_dot, = tangents
    return power_of(x, n), n * x ** (n - 1) * x_dot


power_of.nondiff_argnums = (1,)


def _sum_of_cubes(v):
    return np.sum(power_of(v, 3.0))


def test_nondiff_argnums_are_passed_first():
    x = np.array([0.5, 1.5])
    assert np.allclose(ad.grad(lambda v: np.sum(power_of(v, 3.0)))(x), 3.0 * x ** 2)


# ---------------------------------------------------------------- custom_vjp
@ad.custom_vjp
def clip_gradient(x):
    return x


def clip_fwd(x):
    return x, ()


def clip_bwd(res, g):
    return (np.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(clip_fwd, clip_bwd)


def test_custom_vjp_changes_the_reverse_derivative():
    assert ad.grad(lambda x: 5.0 * clip_gradient(x))(2.0) == 1.0
    g = ad.grad(lambda x: np.sum(0.5 * clip_gradient(x) ** 2))(np.array([0.5, 3.0]))
    assert np.allclose(g, [0.5, 1.0])


@ad.custom_vjp
def sin_with_residuals(x):
    return np.sin(x)


def sin_fwd(x):
    return np.sin(x), (np.cos(x), x)


def sin_bwd(res, g):
    cos, _ = res
    return (g * cos,)


sin_with_residuals.defvjp(sin_fwd, sin_bwd)


def test_custom_vjp_residuals_come_from_the_forward_sweep():
    x = np.array([0.3, 1.1])
    g = ad.grad(lambda v: np.sum(sin_with_residuals(v) * v))
    assert np.allclose(g(x), np.sin(x) + x * np.cos(x))
    assert "sin_with_residuals_fwd(v)" in g.source  # one call: output and residuals


def test_second_order_through_a_custom_vjp():
    x = 0.4
    assert np.isclose(ad.grad(ad.grad(lambda v: sin_with_residuals(v)))(x), -np.sin(x))


def _sum_of_custom_sines(x):
    return np.sum(sin_with_residuals(x) * x)


def _halved(x):
    return (0.5 * x,)


def _sum_of_halves(x):
    (half,) = _halved(x)
    return np.sum(half * half) + _halved(x)[0][0]


# A helper returning a 1-tuple (a custom_vjp's bwd always does) was batched into a function
# returning the bare array, which its caller still indexed: [0] picked example 0.
def test_vmap_and_jacrev_through_a_custom_vjp():
    xs = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])
    want = np.sin(xs) + xs * np.cos(xs)
    np.testing.assert_allclose(ad.vmap(ad.grad(_sum_of_custom_sines))(xs), want, rtol=1e-12)
    np.testing.assert_allclose(ad.jacrev(sin_with_residuals)(xs[1]), np.diag(np.cos(xs[1])),
                               rtol=1e-12)


def test_vmap_of_a_helper_returning_a_one_tuple():
    xs = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0]])
    want = 0.5 * xs
    want[:, 0] += 0.5
    np.testing.assert_allclose(ad.vmap(ad.grad(_sum_of_halves))(xs), want, rtol=1e-12)


@ad.custom_vjp
def sin_calling_itself(x):
    return np.sin(x)


def sin_calling_itself_fwd(x):
    return sin_calling_itself(x), (x,)  # JAX's idiom: the fwd calls the function


def sin_calling_itself_bwd(res, g):
    (x,) = res
    return (g * np.cos(x),)


sin_calling_itself.defvjp(sin_calling_itself_fwd, sin_calling_itself_bwd)


def _sum_of_self_calling_sines(x):
    return np.sum(sin_calling_itself(x))


def test_a_fwd_that_calls_its_own_function():
    # (read the fwd, which calls the function, which has a custom rule: a RecursionError)
    x = np.array([0.1, 0.2, 0.7])
    np.testing.assert_allclose(ad.grad(_sum_of_self_calling_sines)(x), np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(_sum_of_self_calling_sines)(x), np.diag(-np.sin(x)),
                               rtol=1e-12, atol=1e-15)


def _sum_of_custom_sines_jvp(x):
    return np.sum(sin_with_residuals(x))


def test_forward_mode_of_a_custom_vjp_function_is_an_error():
    # (as in JAX; the message named the generated sin_with_residuals_fwd)
    with pytest.raises(MissingRuleError) as info:
        ad.jvp(_sum_of_custom_sines_jvp, (np.array([0.3]),), (np.array([1.0]),))
    assert str(info.value.message) == (
        "sin_with_residuals is a custom_vjp function: it has a reverse-mode rule only, so "
        "forward mode (jvp, jacfwd, linearize) cannot differentiate it")
    assert info.value.filename == __file__ and "custom_jvp" in info.value.hint


# Residuals as fwd returns them: one array (not a tuple), or tuples nested with a None. The
# bwd was handed a flat tuple of the leaves, so `c * g` on one array was refused ("returning
# a whole pytree argument") and `res[0][1]` read the wrong leaf.
@ad.custom_vjp
def sin_one_residual(x):
    return np.sin(x)


def sin_one_residual_fwd(x):
    return np.sin(x), np.cos(x)


def sin_one_residual_bwd(cos, g):
    return (cos * g,)


sin_one_residual.defvjp(sin_one_residual_fwd, sin_one_residual_bwd)


@ad.custom_vjp
def scaled_sin_nested(x, a):
    return np.sin(x) * a


def scaled_sin_nested_fwd(x, a):
    return np.sin(x) * a, ((x, np.cos(x)), None, a)


def scaled_sin_nested_bwd(res, g):
    pair, _, a = res
    x, cos = pair
    return (g * cos * a, np.sum(g * np.sin(x)))


scaled_sin_nested.defvjp(scaled_sin_nested_fwd, scaled_sin_nested_bwd)


def _residual_losses(x):
    return np.sum(sin_one_residual(x) ** 2) + np.sum(scaled_sin_nested(x, x[0] * 2.0))


# A custom_vjp returning a tuple: its output was read as a non-differentiable value, so
# grad, jit(grad), vjp and jacrev gave zeros, and jvp a zero tangent without a word.
@ad.custom_vjp
def twice_and_thrice(a):
    return a * 2.0, a * 3.0


def twice_and_thrice_fwd(a):
    return (a * 2.0, a * 3.0), ()


def twice_and_thrice_bwd(res, g):
    g1, g2 = g
    return (2.0 * g1 + 3.0 * g2,)


twice_and_thrice.defvjp(twice_and_thrice_fwd, twice_and_thrice_bwd)


def _both_outputs(x):
    p, s = twice_and_thrice(x)
    return np.sum(p + s * s)


def _first_output(x):
    p, _ = twice_and_thrice(x)
    return np.sum(np.sin(p))


def _indexed_output(x):
    t = twice_and_thrice(x)
    return np.sum(t[1] * x)


@pytest.mark.parametrize("f, expected", [
    (_both_outputs, lambda x: 2.0 + 18.0 * x),
    (_first_output, lambda x: 2.0 * np.cos(2.0 * x)),
    (_indexed_output, lambda x: 6.0 * x)], ids=lambda v: getattr(v, "__name__", ""))
def test_custom_vjp_with_a_tuple_output(f, expected):
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(ad.grad(f)(x), expected(x), rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(np.stack([x, 2 * x]))[1], expected(2 * x),
                               rtol=1e-12)
    ad.check_grads(f, (x,), order=2, modes=("rev",))
    with pytest.raises(MissingRuleError, match="custom_vjp function"):
        ad.jvp(f, (x,), (x,))


@ad.custom_vjp
def safe_norm(x):
    return np.sqrt(np.sum(x ** 2))


def safe_norm_fwd(x):
    n = np.sqrt(np.sum(x ** 2))
    return n, (x, n)


def safe_norm_bwd(res, g):
    x, n = res
    return (g * x / n,)


safe_norm.defvjp(safe_norm_fwd, safe_norm_bwd)


def _norms_in_a_loop(rows):
    total = 0.0
    for i in range(rows.shape[0]):
        total = total + safe_norm(rows[i])
    return total


def test_vmap_of_grad_through_a_custom_vjp_called_in_a_loop():
    # the loop tapes the (output, residuals) tuple; its placeholder before the loop was
    # batched as one array (np.broadcast_to of a tuple: "inhomogeneous shape")
    rows = np.arange(1.0, 7.0).reshape(2, 3)
    batch = np.stack([rows, 2.0 * rows])
    want = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    got = ad.vmap(ad.grad(_norms_in_a_loop))(batch)
    np.testing.assert_allclose(got, [want, want], rtol=1e-12)


def test_residuals_keep_the_structure_fwd_gave_them():
    x = np.array([0.3, -0.8, 1.2])
    expected = np.sin(2 * x) + 2 * x[0] * np.cos(x)
    expected[0] += 2 * np.sum(np.sin(x))
    np.testing.assert_allclose(ad.grad(_residual_losses)(x), expected, rtol=1e-12)
    ad.check_grads(_residual_losses, (x,), order=1, modes=("rev",))


# ---------------------------------------------------------------- custom_vjp nondiff_argnums
# (raised NotImplementedError) JAX's form: fwd takes every argument, bwd takes the nondiff
# ones first and returns a cotangent per other argument.
def _clipped(limit, x):
    return x


def _clipped_fwd(limit, x):
    return x, ()


def _clipped_bwd(limit, res, g):
    return (np.clip(g, -limit, limit),)


clip_beyond = ad.custom_vjp(_clipped, nondiff_argnums=(0,))
clip_beyond.defvjp(_clipped_fwd, _clipped_bwd)


def _clipped_loss(x):
    return np.sum(5.0 * clip_beyond(1.0, x) * x)


def _clipped_loss_at(x, limit):
    return np.sum(5.0 * clip_beyond(limit, x) * x)


def _scaled_sine(x, s):
    return np.sin(x) * s


def _scaled_sine_fwd(x, s):
    return np.sin(x) * s, (np.cos(x),)


def _scaled_sine_bwd(s, res, g):
    (c,) = res
    return (g * c * s,)


scaled_sine = ad.custom_vjp(_scaled_sine, nondiff_argnums=-1)
scaled_sine.defvjp(_scaled_sine_fwd, _scaled_sine_bwd)


def _scaled_sine_loss(x, s):
    y = scaled_sine(x, 2.0 * s)
    return np.sum(y * y)


def test_custom_vjp_nondiff_argnums_constant_and_run_time():
    x = np.array([0.3, -2.0, 1.5])
    # the rule clips the cotangent 5x of clip_beyond's output; the other factor is exact
    np.testing.assert_allclose(ad.grad(_clipped_loss)(x), 5.0 * x + np.clip(5.0 * x, -1, 1),
                               rtol=1e-12)
    expected = 5.0 * x + np.clip(5.0 * x, -0.5, 0.5)
    np.testing.assert_allclose(ad.grad(_clipped_loss_at)(x, 0.5), expected, rtol=1e-12)
    # no derivative flows through a nondiff argument
    assert ad.grad(_clipped_loss_at, argnums=1)(x, 0.5) == 0.0
    # a rule that is the true derivative agrees with central differences
    g = ad.grad(_scaled_sine_loss)(x, 0.7)
    eps, fd = 1e-6, []
    for e in np.eye(3):
        fd.append((_scaled_sine_loss(x + eps * e, 0.7) - _scaled_sine_loss(x - eps * e, 0.7)) /
                  (2 * eps))
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.numba
def test_custom_vjp_nondiff_argnums_under_jit():
    x = np.array([0.3, -2.0, 1.5])
    np.testing.assert_allclose(ad.jit(ad.grad(_clipped_loss_at))(x, 0.5),
                               5.0 * x + np.clip(5.0 * x, -0.5, 0.5), rtol=1e-12)
    np.testing.assert_allclose(ad.jit(ad.grad(_scaled_sine_loss))(x, 0.7),
                               ad.grad(_scaled_sine_loss)(x, 0.7), rtol=1e-12)


def test_custom_vjp_nondiff_argnums_errors():
    with pytest.raises(ad.ArgnumsError, match="does not name parameters of _clipped"):
        ad.custom_vjp(_clipped, nondiff_argnums=(2,))
    wrong = ad.custom_vjp(_clipped, nondiff_argnums=(0,))
    wrong.defvjp(_clipped_fwd, lambda res, g: (g,))  # bwd without the nondiff argument

    def loss(x):
        return np.sum(wrong(1.0, x))
    with pytest.raises(MissingRuleError, match="must take 3 arguments: limit, residuals, g"):
        ad.grad(loss)(np.ones(2))


# ---------------------------------------------------------------- register_rule
@pytest.fixture
def registered():
    """Rules registered by a test are removed afterwards (the registry is global)."""
    names = []
    yield names
    for fn in names:
        ad.unregister_rule(fn)


def softplus(x):
    return np.log1p(np.exp(x))


def test_register_partials_for_a_users_function(registered):
    ad.register_rule(softplus, partials="1.0 / (1.0 + np.exp(-x))", check=True)
    registered.append(softplus)
    with np.errstate(over="ignore"):
        g = ad.grad(lambda x: np.sum(softplus(x) * 2.0))(np.array([800.0, 0.0]))
    assert np.allclose(g, [2.0, 1.0])
    ad.check_grads(lambda x: softplus(x) * x, (np.array([0.2, -0.7]),), modes=("fwd", "rev"))


def test_register_partials_for_a_function_without_source(registered):
    ad.register_rule(scipy.special.expit, params=("x",), partials="y * (1.0 - y)",
                     check=True)
    registered.append(scipy.special.expit)
    x = np.array([0.3, -1.0, 2.0])
    g = ad.grad(lambda v: np.sum(scipy.special.expit(v) ** 2))
    s = scipy.special.expit(x)
    assert np.allclose(g(x), 2.0 * s * s * (1.0 - s))
    assert "from scipy.special import expit" in g.source
    assert np.isclose(ad.grad(ad.grad(lambda v: scipy.special.expit(v)))(0.3),
                      s[0] * (1 - s[0]) * (1 - 2 * s[0]))


def my_norm(x):
    return np.sqrt(np.sum(x * x))


def test_register_vjp_and_jvp_templates(registered):
    ad.register_rule(my_norm, vjp="g * x / y", jvp="np.sum(x * x_dot) / y", check=True)
    registered.append(my_norm)
    ad.check_grads(lambda v: my_norm(v) * 3.0, (np.array([0.3, -1.0, 2.0]),), order=2)


def test_check_rejects_a_wrong_rule_and_keeps_the_registry_clean(registered):
    def twice(x):
        return 2.0 * x
    with pytest.raises(RuleCheckError, match="disagrees with finite differences"):
        ad.register_rule(twice, partials="3.0", check=True)
    g = ad.grad(lambda v: twice(v))(1.0)
    assert g == 2.0  # differentiated from its source: no rule was left behind


def test_register_rule_needs_templates():
    with pytest.raises(TypeError, match="partials"):
        ad.register_rule(np.sinc)


@ad.custom_vjp
def halved_sine(x):
    return np.sin(x)


def _halved_sine_fwd(x):
    return np.sin(x), None


def _halved_sine_bwd(residuals, g):
    return (0.5 * g,)  # deliberately not sin's derivative: the rule must be the one used


halved_sine.defvjp(_halved_sine_fwd, _halved_sine_bwd)


@ad.custom_jvp
def halved_sine_jvp(x):
    return np.sin(x)


@halved_sine_jvp.defjvp
def _halved_sine_tangent(primals, tangents):
    return np.sin(primals[0]), 0.5 * tangents[0]


def _custom_vjp_steps(x):
    h = x
    for _ in range(2):
        h = halved_sine(2.0 * h + 1.0)
    return np.sum(h)


def _custom_jvp_steps(x):
    h = x
    for _ in range(2):
        h = halved_sine_jvp(2.0 * h + 1.0)
    return np.sum(h)


@pytest.mark.parametrize("f", [_custom_vjp_steps, _custom_jvp_steps],
                         ids=["custom_vjp", "custom_jvp"])
def test_jit_keeps_a_custom_rule_called_in_a_loop(f):
    """jit rewrites loops for speed (scalarize, inline_calls, vector_loops) into plain
    Python normalized again, where the call was the function's body: jit(grad) took sin's
    derivative and ignored the rule (grad without jit was right). Two steps of a rule
    giving 0.5 times the cotangent, each times 2: 1.0 per entry."""
    from autodiff_ast.jit import jit
    x = np.array([0.3, 0.5])
    np.testing.assert_allclose(ad.grad(f)(x), [1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(f))(x), [1.0, 1.0], rtol=1e-12)
    value, g = jit(ad.value_and_grad(f))(x)
    np.testing.assert_allclose(g, [1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(value, f(x), rtol=1e-12)


def test_vmap_of_a_custom_jvp_function_itself():
    """vmap(log1pexp): its per-example loop named the call's result like the primal written
    into the module (`log1pexp_2 = log1pexp_2(x)`: UnboundLocalError); a local is never named
    like a module function now."""
    xs = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(ad.vmap(log1pexp)(xs), np.log1p(np.exp(xs)), rtol=1e-14)
    np.testing.assert_allclose(ad.vmap(ad.grad(log1pexp))(xs), 1.0 / (1.0 + np.exp(-xs)),
                               rtol=1e-14)


# ---------------------------------------------------------------- session 43: a second
# derivative through a custom_jvp function's own value
@ad.custom_jvp
def _round_ste(x):
    return np.round(x)


@_round_ste.defjvp
def _round_ste_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return _round_ste(x), t  # straight through: d round / dx taken as 1


def _ste_loss(x):
    return np.sum(_round_ste(x) * x)


@ad.custom_jvp
def _sin_thrice(x):
    return np.sin(x)


@_sin_thrice.defjvp
def _sin_thrice_jvp(primals, tangents):
    x, = primals
    t, = tangents
    return _sin_thrice(x), 3.0 * np.cos(x) * t


def _sin_thrice_times_x(x):
    return _sin_thrice(x) * x


def test_second_derivatives_keep_a_custom_jvp_rule():
    # The first-order module wrote the custom function's primal as a plain helper; a second
    # transform of that module differentiated the helper's body (np.round: 0) instead of
    # taking the rule (1). JAX's values: d2/dx2 of round_ste(x) * x is 2 on the diagonal.
    x = np.array([0.3, 1.6, -2.2])
    np.testing.assert_allclose(ad.hessian(_ste_loss)(x), 2.0 * np.eye(3))
    np.testing.assert_allclose(ad.jacfwd(ad.grad(_ste_loss))(x), 2.0 * np.eye(3))
    # f' = 3 cos by the rule: (f x)'' = 2 * 3 cos x - 3 x sin x
    want = 6.0 * np.cos(0.3) - 3.0 * 0.3 * np.sin(0.3)
    np.testing.assert_allclose(ad.grad(ad.grad(_sin_thrice_times_x))(0.3), want, rtol=1e-12)


@ad.custom_vjp
def _scale(x, a):
    return a * x


def _scale_fwd(x, a):
    return a * x, (x, a)


def _scale_bwd(res, g):
    x, a = res
    return g * a, g * x  # wrong: a is a number, its cotangent must be np.sum(g * x)


_scale.defvjp(_scale_fwd, _scale_bwd)


def _scale_loss(x, a):
    return np.sum(_scale(x, a) ** 2)


def test_a_bwd_cotangent_of_another_rank_is_refused():
    # It was returned as the number's gradient: an array of x's shape (JAX refuses it).
    with pytest.raises(ad.ShapeMismatchError, match="returns an array of rank 1 as the "
                       "cotangent of 'a', which is a number"):
        ad.grad(_scale_loss, argnums=1)(np.array([0.3, -0.8, 1.1]), 0.7)
