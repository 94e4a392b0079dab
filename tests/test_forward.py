"""Forward mode: jvp and linearize, checked against central finite differences.

Every primitive with a reverse rule has a forward rule; the op table below runs each through
``check_grads`` in both modes (finite differences for jvp and vjp, and the dot-product test tying
them together), with broadcasting pairs, keepdims reductions and every kind of indexing.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import gast
import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import rules
from autodiff_ast.build_forward import build_jvp
from autodiff_ast.errors import MissingRuleError
from autodiff_ast.normalize import spec_of

RNG = np.random.default_rng(0)
A = RNG.uniform(0.5, 1.5, (3, 4))
B = RNG.uniform(0.5, 1.5, (4,))
COL = RNG.uniform(0.5, 1.5, (3, 1))
SPD = RNG.uniform(0.5, 1.5, (3, 3)) + 3.0 * np.eye(3)
V3 = RNG.uniform(0.5, 1.5, 3)

OPS = {
    "sin": (lambda x: np.sin(x), (A,)),
    "tanh_times_row": (lambda x, y: np.tanh(x) * y, (A, B)),
    "add_column": (lambda x, y: x + y, (A, COL)),
    "scalar_plus_array": (lambda s, y: np.sum(np.sin(s + y)), (0.3, A)),
    "divide": (lambda x, y: x / y, (A, B)),
    "power_const": (lambda x: x ** 3, (A,)),
    "power_array": (lambda x, y: x ** y, (A, B)),
    "where": (lambda x, y: np.where(x > 1.0, x, y), (A, B)),
    "where_scalar_branch": (lambda x, y: np.where(x > 1.0, x * 2.0, y), (A, 0.7)),
    "clip": (lambda x: np.clip(x, 0.8, 1.2), (A,)),
    "clip_array_bound": (lambda x, lo: np.clip(x, lo, None), (A, B)),
    "maximum": (lambda x, y: np.maximum(x, y), (A, B)),
    "abs": (lambda x: np.abs(x - 1.0), (A,)),
    "logaddexp": (lambda x, y: np.logaddexp(x, y), (A, B)),
    "arctan2": (lambda x, y: np.arctan2(x, y), (A, B)),
    "hypot": (lambda x, y: np.hypot(x, y), (A, B)),
    "sqrt": (lambda x: np.sqrt(x), (A,)),
    "math_exp": (lambda x: math.exp(x) * 2.0, (0.3,)),
    "sum_axis": (lambda x: np.sum(x, axis=1), (A,)),
    "sum_keepdims": (lambda x: np.sum(x, axis=1, keepdims=True) * x, (A,)),
    "mean_keepdims": (lambda x: np.mean(x, axis=0, keepdims=True) * x, (A,)),
    "mean_tuple_axis": (lambda x: np.mean(x, axis=(0, 1)), (A,)),
    "prod": (lambda x: np.prod(x), (B,)),
    "prod_keepdims": (lambda x: np.prod(x, axis=1, keepdims=True) * x, (A,)),
    "max_axis": (lambda x: np.max(x, axis=1), (A,)),
    "max_keepdims": (lambda x: np.max(x, axis=1, keepdims=True) - x, (A,)),
    "min_all": (lambda x: np.min(x), (A,)),
    "var_axis": (lambda x: np.var(x, axis=0), (A,)),
    "var_keepdims": (lambda x: np.var(x, axis=1, keepdims=True) * x, (A,)),
    "std": (lambda x: np.std(x), (A,)),
    "std_keepdims": (lambda x: np.std(x, axis=1, keepdims=True) * x, (A,)),
    "cumsum": (lambda x: np.cumsum(x, axis=1), (A,)),
    "reshape": (lambda x: np.reshape(x, (4, 3)) * 2.0, (A,)),
    "ravel": (lambda x: np.ravel(x), (A,)),
    "attribute_T": (lambda x: x.T * B[:, None], (A,)),
    "transpose": (lambda x: np.transpose(x, (1, 0)), (A,)),
    "expand_dims": (lambda x: np.expand_dims(x, 0) * 2.0, (A,)),
    "squeeze": (lambda x: np.squeeze(x), (COL,)),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 1), (A,)),
    "flip": (lambda x: np.flip(x, 0), (A,)),
    "roll": (lambda x: np.roll(x, 1), (B,)),
    "broadcast_to": (lambda x: np.broadcast_to(x, (3, 4)) * 1.0, (B,)),
    "tile": (lambda x: np.tile(x, 2), (B,)),
    "concatenate": (lambda x, y: np.concatenate([x, y * 2.0]), (B, V3)),
    "stack": (lambda x, y: np.stack([x, y], axis=1), (V3, V3)),
    "array_of_scalars": (lambda x, y: np.array([x, y * 2.0, 1.0]), (0.3, 0.4)),
    "hstack": (lambda x, y: np.hstack([x, y]), (B, V3)),
    "vstack": (lambda x, y: np.vstack([x, y]), (V3, V3)),
    "full_like": (lambda x, c: np.full_like(x, c) * x, (A, 0.5)),
    "dot_matrix_vector": (lambda x, y: np.dot(x, y), (A, B)),
    "dot_vector_matrix": (lambda x, y: np.dot(y, x), (A, V3)),
    "matmul": (lambda x, y: x @ y, (A, A.T)),
    "outer": (lambda x, y: np.outer(x, y), (V3, B)),
    "inner": (lambda x, y: np.inner(x, y), (B, B)),
    "vdot": (lambda x, y: np.vdot(x, y), (B, B)),
    "einsum": (lambda x, y: np.einsum("ij,jk->ik", x, y), (A, A.T)),
    "trace": (lambda x: np.trace(x), (SPD,)),
    "diag_of_vector": (lambda x: np.diag(x), (V3,)),
    "diag_of_matrix": (lambda x: np.diag(x), (SPD,)),
    "norm": (lambda x: np.linalg.norm(x), (A,)),
    "norm_axis": (lambda x: np.linalg.norm(x, axis=1), (A,)),
    "solve": (lambda a, b: np.linalg.solve(a, b), (SPD, V3)),
    "inv": (lambda a: np.linalg.inv(a), (SPD,)),
    "det": (lambda a: np.linalg.det(a), (SPD,)),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1], (SPD,)),
    "getitem_slices": (lambda x: x[1:, ::2], (A,)),
    "getitem_int": (lambda x: x[1], (A,)),
    "getitem_fancy": (lambda x: x[np.array([0, 2, 2])], (A,)),
    "getitem_newaxis": (lambda x: x[:, None] * B, (V3,)),
    "getitem_mask": (lambda x: x[x > 1.0], (B,)),
    "astype": (lambda x: x.astype(np.float64) * 2.0, (A,)),
    "float": (lambda x: float(x) * 2.0, (0.3,)),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_forward_and_reverse_agree_with_finite_differences(op):
    fun, args = OPS[op]
    ad.check_grads(fun, args, modes=("fwd", "rev"))


def test_every_rule_with_a_reverse_rule_has_a_forward_rule():
    missing = [n for n, r in rules.all_rules().items() if r.vjp is not None and r.jvp is None]
    assert missing == []


# ---------------------------------------------------------------- the generated source
def model(x, w):
    h = np.tanh(x * w)
    return np.sum(h * h) + np.sum(w)


def test_jvp_value_and_tangent():
    x, w = np.array([0.2, -0.4]), np.array([1.5, 0.5])
    dx, dw = np.array([1.0, 2.0]), np.array([-1.0, 0.5])
    out, out_dot = ad.jvp(model, (x, w), (dx, dw))
    eps = 1e-6
    fd = (model(x + eps * dx, w + eps * dw) - model(x - eps * dx, w - eps * dw)) / (2 * eps)
    assert np.isclose(out, model(x, w))
    assert np.isclose(out_dot, fd, rtol=1e-7)


def test_jvp_tangents_given_as_an_array_are_refused_with_the_tuple_form():
    x, w = np.array([0.2, -0.4]), np.array([1.5, 0.5])
    with pytest.raises(TypeError, match=r"as a tuple, one per primal.*jvp\(f, \(x,\), \(v,\)\)"):
        ad.jvp(lambda v: model(v, w), (x,), x)
    with pytest.raises(TypeError, match="got 2 primal"):
        ad.jvp(model, (x, w), (x,))
    # primals as an array were unpacked into arguments ("too many positional arguments")
    with pytest.raises(TypeError, match=r"its primals as a tuple.*got a ndarray"):
        ad.jvp(lambda v: model(v, w), x, (x,))


def test_generated_source_names_tangents_after_values_and_quotes_lines():
    source = build_jvp(model, {"x": spec_of(np.ones(2)), "w": spec_of(np.ones(2))}).source
    assert "def jvp_model(x, w, x_dot, w_dot):" in source
    assert "h_dot = " in source
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("h_dot ="))
    assert lines[at - 1].strip() == "# h = np.tanh(x * w)"
    assert "import numpy as np" in source and "autodiff_ast" not in source
    compile(source, "<jvp>", "exec")


def test_jvp_transform_shows_its_source():
    t = ad.jvp_transform(model)
    out, out_dot = t((V3, V3), (np.ones(3), np.zeros(3)))
    assert np.isclose(out_dot, ad.jvp(model, (V3, V3), (np.ones(3), np.zeros(3)))[1])
    assert "def jvp_model(x, w, x_dot, w_dot):" in t.source


def test_generated_source_is_deterministic():
    specs = {"x": spec_of(np.ones(2)), "w": spec_of(np.ones(2))}
    assert build_jvp(model, specs).source == build_jvp(model, specs).source


def test_structural_zeros_write_no_code():
    def f(x, y):
        c = np.cos(y) * 3.0
        return np.sin(x) * c
    source = build_jvp(f, {"x": spec_of(np.ones(2)), "y": spec_of(np.ones(2))},
                       argnums=(0,)).source
    assert "y_dot" not in source and "c_dot" not in source
    assert "def jvp_f(x, y, x_dot):" in source


def helper(a, b):
    return a * np.tanh(b)


def uses_helper(x, y):
    return np.sum(helper(x, y) + helper(y, x) + helper(x, y))


def test_helpers_get_their_own_tangent_functions_per_activity_pattern():
    x, y = np.array([0.3, 0.1]), np.array([0.5, -0.2])
    ad.check_grads(uses_helper, (x, y), modes=("fwd",))
    source = build_jvp(uses_helper, {"x": spec_of(x), "y": spec_of(y)}, argnums=(0,)).source
    # Only x has a tangent: helper(x, y) differentiates a, helper(y, x) differentiates b.
    assert source.count("def helper_jvp") == 2
    assert source.count("helper_jvp(x, y, x_dot)") == 2  # one function for both calls
    assert "np.tanh" not in source.split("def jvp_uses_helper")[1]  # never inlined


def test_has_aux_returns_aux_unchanged():
    def f(x):
        y = np.sin(x)
        return np.sum(y), y * 2.0
    out, out_dot, aux = ad.jvp(f, (V3,), (np.ones(3),), has_aux=True)
    assert np.isclose(out_dot, np.sum(np.cos(V3)))
    assert np.allclose(aux, 2.0 * np.sin(V3))


def test_tuple_outputs_give_tuple_tangents():
    def f(x):
        return np.sin(x), np.sum(x * x)
    out, (d0, d1) = ad.jvp(f, (V3,), (np.ones(3),))
    assert np.allclose(d0, np.cos(V3)) and np.isclose(d1, 2.0 * np.sum(V3))


class Params(NamedTuple):
    W: np.ndarray
    b: float


def test_pytree_inputs_dict_and_namedtuple():
    def f(p, q):
        return np.tanh(np.dot(p["W"], q.W) + p["b"] * q.b)
    p = {"W": A, "b": 0.3}
    q = Params(B, 0.7)
    ad.check_grads(f, (p, q), modes=("fwd", "rev"))
    tp = {"W": np.ones_like(A), "b": 1.0}
    tq = Params(np.zeros_like(B), 0.0)
    _, out_dot = ad.jvp(f, (p, q), (tp, tq))
    eps = 1e-6
    fd = (f({"W": A + eps, "b": 0.3 + eps}, q) - f({"W": A - eps, "b": 0.3 - eps}, q)) / (2 * eps)
    assert np.allclose(out_dot, fd, atol=1e-8)


def test_float32_tangents_keep_the_dtype():
    x = np.linspace(0.1, 0.5, 3).astype(np.float32)
    out, out_dot = ad.jvp(np.sin, (x,), (np.ones(3, np.float32),))
    assert out_dot.dtype == np.float32
    assert np.allclose(out_dot, np.cos(x), atol=1e-6)


def test_tangent_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="shape"):
        ad.jvp(np.sin, (V3,), (np.ones(4),))


def test_integer_arguments_take_no_tangent():
    def f(x, n):
        return x * n
    out, out_dot = ad.jvp(f, (V3, 3), (np.ones(3), None))
    assert np.allclose(out_dot, 3.0)


# ---------------------------------------------------------------- control flow and writes
def loop(x, n):
    s = 0.0
    y = x * 1.0
    for _ in range(n):
        y = np.sin(y) * x
        s = s + np.sum(y)
    return s


def branch(x):
    if np.sum(x) > 0:
        y = x * x
    else:
        y = np.sin(x)
    return np.sum(y * 2.0)


def writes(x):
    y = np.zeros(5)
    y[1:4] = x * 2.0
    y[0] = x[0] ** 2
    return np.sum(y * y)


def heat(u0, c, steps):
    u = u0.copy()
    n = len(u)
    for _ in range(steps):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def until(x):
    k = 0
    y = x
    while k < 3:
        y = y * x + 1.0
        k = k + 1
    return np.sum(y)


def appends(x):
    out = []
    for i in range(3):
        out.append(x * float(i))
    return np.sum(np.stack(out) ** 2)


def self_update(x):
    y = x
    for _ in range(3):
        y = np.sin(y)  # the tangent reads the old y, the primal writes the new one
        y = y * x
    return np.sum(y)


def polar(a, b):
    return np.sqrt(a * a + b * b), np.arctan2(b, a)


def helper_in_loop(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        r, theta = polar(x[i], y[i])
        s = s + r * theta
    return s


def column_scaling(q, s):
    q = q.copy()
    for j in range(q.shape[1]):
        column = q[:, j]  # a view: the write below changes it
        q[:, j] = column * s
    return np.sum(q * q)


def rebinds_its_input(x, scale):
    # (linearize's forward function returned the loop's last x as the residual x: the
    # tangent map then ran the loop from there, -0.0099 for 1.7537)
    for _ in range(3):
        x = np.sin(x) * scale
    return np.sum(x)


def writes_its_input(x):
    for i in range(1, x.shape[0]):
        x[i] = np.sin(x[i - 1]) * x[i]
    return np.sum(x * x)


CONTROL_FLOW = pytest.mark.parametrize("fun, args", [
    (loop, (V3, 3)), (branch, (V3,)), (branch, (-V3,)), (writes, (V3,)),
    (heat, (np.linspace(0.0, 1.0, 6), 0.1, 3)), (until, (V3,)), (appends, (V3,)),
    (self_update, (V3,)), (helper_in_loop, (V3, B[:3])), (column_scaling, (A, 1.3)),
    (rebinds_its_input, (V3, 1.5)), (writes_its_input, (V3,))],
    ids=["loop", "branch_taken", "branch_not_taken", "in_place_writes", "heat", "while",
         "list_append", "self_update", "helper_in_loop", "view_then_write",
         "rebinds_its_input", "writes_its_input"])


@CONTROL_FLOW
def test_forward_mode_through_loops_branches_and_writes(fun, args):
    ad.check_grads(fun, args, modes=("fwd",))


@CONTROL_FLOW
def test_linearize_through_loops_branches_and_writes(fun, args):
    """The tangent map of a function with loops and branches (it failed with a NameError
    before: the tangent statements inside them were left in the forward function) against
    central differences along a random direction (integer arguments held)."""
    out, f_jvp = ad.linearize(fun, *args)
    assert np.allclose(out, fun(*args))
    rng = np.random.default_rng(3)
    moving = [isinstance(a, (float, np.ndarray)) for a in args]
    direction = [rng.standard_normal(np.shape(a)) if m else 0.0 for a, m in zip(args, moving)]
    direction = [d if np.ndim(d) else float(d) for d in direction]
    eps = 1e-6

    def moved(sign):
        return np.asarray(fun(*[a + sign * eps * d if m else a
                                for a, d, m in zip(args, direction, moving)]))
    want = (moved(1.0) - moved(-1.0)) / (2 * eps)
    for _ in range(2):  # the residuals are not used up by a call
        np.testing.assert_allclose(f_jvp(*direction), want, rtol=1e-5, atol=1e-7)


def helper_on_elements(x, y):
    r, theta = polar(x[0], y[1])
    return r * theta


def test_linearize_of_a_helper_called_on_elements():
    """The forward function calls the helper on what the tangent call reads (it read a
    temporary tidying had written into the tangent call: NameError before)."""
    out, f_jvp = ad.linearize(helper_on_elements, V3, B[:3])
    assert np.isclose(out, helper_on_elements(V3, B[:3]))
    t = (RNG.standard_normal(3), RNG.standard_normal(3))
    eps = 1e-6
    want = (helper_on_elements(V3 + eps * t[0], B[:3] + eps * t[1]) -
            helper_on_elements(V3 - eps * t[0], B[:3] - eps * t[1])) / (2 * eps)
    np.testing.assert_allclose(f_jvp(*t), want, rtol=1e-6)


# ---------------------------------------------------------------- linearize
def test_linearize_matches_jvp_and_keeps_only_tangent_code():
    out, f_jvp = ad.linearize(model, V3, B[:3])
    assert np.isclose(out, model(V3, B[:3]))
    for _ in range(3):
        t = (RNG.standard_normal(3), RNG.standard_normal(3))
        assert np.isclose(f_jvp(*t), ad.jvp(model, (V3, B[:3]), t)[1])
    lin = f_jvp.source.split("def model_lin(")[1]
    code = [line for line in lin.splitlines() if not line.strip().startswith("#")]
    assert not any("np.tanh" in line for line in code)  # the primal ran once, in the fwd


# ---------------------------------------------------------------- errors
def test_missing_forward_rule_names_the_users_line():
    def opaque(x):
        return x * 2.0
    rule = rules.Rule("opaque_test_op", "opaque", ("x",), diff=("x",),
                      infer=lambda call: call.types["x"],
                      vjp=lambda call, g: {"x": (g, None)}, jvp=None)
    rules.register(rule, opaque)
    try:
        def f(x):
            y = np.sin(x)
            return opaque(y)
        with pytest.raises(MissingRuleError) as info:
            ad.jvp(f, (V3,), (V3,))
        message = str(info.value)
        assert "no forward-mode rule" in message and "return opaque(y)" in message
        assert "test_forward.py:" in message
    finally:
        rules._BY_CALLABLE.pop(opaque, None)
        rules._BY_NAME.pop("opaque_test_op", None)


def test_a_rule_whose_jvp_returns_none_is_reported():
    with pytest.raises(MissingRuleError, match="forward-mode rule"):
        ad.jvp(lambda x: np.linalg.norm(np.outer(x, x), "nuc", (0, 1)), (V3,), (V3,))


# ---------------------------------------------------------------- jvp inside transformed code
def directional(x, v):
    out, out_dot = ad.jvp(model, (x, x), (v, v))
    return out_dot


def test_jvp_written_inside_a_function_is_differentiated_through_its_source():
    x, v = np.array([0.2, -0.1]), np.array([1.0, 0.5])
    ad.check_grads(directional, (x, v), modes=("rev",))
    g = ad.grad(directional)
    g(x, v)
    assert "jvp_model" in g.source


def test_forward_mode_of_a_transformed_function_reads_its_generated_module():
    df = ad.grad(model)
    out, out_dot = ad.jvp(df, (V3, B[:3]), (np.ones(3), np.zeros(3)))
    eps = 1e-6
    fd = (df(V3 + eps, B[:3]) - df(V3 - eps, B[:3])) / (2 * eps)
    assert np.allclose(out_dot, fd, atol=1e-7)


def test_core_statements_keep_their_annotations_after_tidying():
    from autodiff_ast.build import prepare
    from autodiff_ast.forward import forward
    _, _, core = prepare(model, {"x": spec_of(V3), "w": spec_of(V3)})
    sweep = forward(core, ["x", "w"])
    tangent = [s for s in sweep.body if getattr(s, "tangent", False)]
    assert tangent and all(s.origin is not None for s in tangent)
    assert all(isinstance(s, gast.Assign) for s in tangent)
