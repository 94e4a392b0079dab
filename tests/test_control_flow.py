"""Control flow the reverse and forward sweeps must get right: loop exits, recursion,
checkpointing, nested functions, calls without rules, and what the tapes keep.

Every derivative is checked against central finite differences (check_grads) in both modes and
at order 2 unless a strict xfail says why not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import MissingRuleError, UnsupportedSyntaxError, check_grads

X = np.array([0.3, 0.6, -0.2, 1.5, 0.4])


# ---------------------------------------------------------------- loop exits
def first_big(x, a):
    s = 0.0
    for i in range(len(x)):
        if x[i] * a > 1.0:
            break
        s = s + np.sin(x[i] * a)
    return s


def skip_negative(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < 0:
            continue
        s = s + x[i] ** 2
    return s


def find_first(x, a):
    for i in range(len(x)):
        if x[i] * a > 0.5:
            return x[i] * a * 3.0
    return a


def newton_with_break(c):
    y = c
    for k in range(50):
        y_next = 0.5 * (y + c / y)
        if abs(y_next - y) < 1e-14:
            break
        y = y_next
    return y


def while_in_a_for(x):
    s = 0.0
    for i in range(len(x)):
        j = 0
        while j <= i:  # a different step count in each outer step
            s = s + x[i] * x[j]
            j += 1
    return s


def while_in_a_while(x):
    s = 0.0
    i = 0
    while i < len(x):
        j = 0
        while j <= i:
            s = s + np.sin(x[i] * x[j])
            j += 1
        i += 1
    return s


def breaks_at_two_depths(x):
    s = 0.0
    for i in range(len(x)):
        j = 0
        while True:
            s = s + x[i] * x[j]
            j += 1
            if j > i:
                break
        if s > 2.0:
            break
    return s


def while_with_return(x):
    s = 0.0
    k = 0
    while k < len(x):
        s = s + x[k] * s + x[k]
        if s > 1.0:
            return s * 2.0
        k += 1  # after the return: guarded by a flag, in a branch with nothing active
    return s


def index_moved_in_a_branch(x):
    j = 0
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.0:  # nothing differentiated in the branch: only the index moves
            j = i
        s = s + x[j] * x[i]
    return s


EXITS = [(first_big, (X, 1.1)), (skip_negative, (X,)), (find_first, (X, 0.9)),
         (find_first, (X * 0.1, 0.9)), (newton_with_break, (2.0,)), (while_in_a_for, (X,)),
         (while_in_a_while, (X,)), (breaks_at_two_depths, (X,)), (breaks_at_two_depths, (X * 0.5,)),
         (while_with_return, (X,)), (while_with_return, (X * 0.1,)),
         (index_moved_in_a_branch, (X,))]


@pytest.mark.parametrize("fn,args", EXITS, ids=lambda v: getattr(v, "__name__", ""))
def test_loop_exits(fn, args):
    check_grads(fn, args, order=2, modes=("rev", "fwd"))


def test_a_nested_while_loop_saves_each_step_count():
    """The backward loop of a while loop runs as many steps as that run of it did: inside
    another loop, each run's count is saved when the counter is reset (the last run's count
    was used for every run, and the tapes ran dry)."""
    expected = np.cumsum(X) + np.cumsum(X[::-1])[::-1]  # d/dx_k of sum over j <= i of x_i x_j
    gradient = ad.grad(while_in_a_for)
    np.testing.assert_allclose(gradient(X), expected, rtol=1e-12)
    source = gradient.source
    assert "n_iter_tape" in source or "n_iter_2_tape" in source, source


def test_break_keeps_the_loop_readable():
    g = ad.grad(first_big, argnums=1)
    g(X, 1.1)
    assert "cond = not stop and" in g.source
    assert "stop = True" in g.source


# ---------------------------------------------------------------- recursion and checkpoint(f)
def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def test_recursion_gradient_and_second_derivative():
    assert ad.grad(power)(1.5, 4) == pytest.approx(4 * 1.5 ** 3)
    assert ad.grad(ad.grad(power))(1.5, 4) == pytest.approx(12 * 1.5 ** 2)
    check_grads(lambda x: power(x, 5), (0.7,), order=2, modes=("rev", "fwd"))


def test_recursive_backward_recomputes_instead_of_storing():
    g = ad.grad(power)
    g(1.5, 3)
    assert "def power_bwd(x, n, out_bar):" in g.source
    assert "recomputed here" in g.source


def array_power(x, n):
    if n <= 0:
        return np.ones_like(x)
    return x * array_power(x, n - 1)


def cube(x):
    return array_power(x, 3)


def nested_sines(x, n):
    if n <= 0:
        return x
    return x * nested_sines(x, n - 1) + np.sin(x)


def nested_sines_loss(x):
    return np.sum(nested_sines(x, 3))


def _central_jacobian(f, x, eps=1e-6):
    columns = [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)]
    return np.stack(columns, axis=-1)


# Batching a recursive helper (jacfwd's and hessian's vmap) once gave up on its vectorized
# form and flagged every output as varying between examples: "out_axes is None for output 0"
# of jacfwd, and "x_bar changes from float64[N,N] to float64[N]" for jacrev(grad).
def test_jacfwd_and_hessian_through_a_recursive_helper():
    x = np.array([0.5, -1.2, 2.0])
    np.testing.assert_allclose(ad.jacfwd(cube)(x), np.diag(3 * x ** 2), rtol=1e-12)
    np.testing.assert_allclose(ad.jacrev(cube)(x), np.diag(3 * x ** 2), rtol=1e-12)
    gradient = ad.grad(nested_sines_loss)
    expected = _central_jacobian(gradient, x)
    for second in (ad.hessian(nested_sines_loss), ad.jacrev(gradient), ad.jacfwd(gradient)):
        np.testing.assert_allclose(second(x), expected, rtol=1e-6, atol=1e-7)


def test_vmap_of_a_recursive_helper_is_vectorized():
    xs = np.array([[0.5, -1.2], [2.0, 0.3], [1.1, 1.4]])
    batched = ad.vmap(cube)
    np.testing.assert_allclose(batched(xs), xs ** 3, rtol=1e-12)
    assert "for " not in batched.source  # no per-example loop


@ad.checkpoint
def step(y, a):
    return np.tanh(a * y) + 0.1 * y


def simulate(y0, a):
    y = y0
    for t in range(6):
        y = step(y, a)
    return np.sum(y)


def test_checkpointed_function():
    check_grads(simulate, (np.array([0.3, -0.2]), 0.9), order=2, modes=("rev", "fwd"))
    g = ad.grad(simulate, argnums=(0, 1))
    g(np.array([0.3, -0.2]), 0.9)
    assert "def step_fwd" not in g.source  # nothing stored from inside step
    assert "recomputed here" in g.source


def plain_step(y, a):
    return np.tanh(a * y) + 0.1 * y


def simulate_inline(y0, a):
    # JAX's way of writing it: checkpoint(helper)(...) at the call (the normalizer read
    # checkpoint's own body: "isinstance has no derivative rule" in checkpointing.py)
    y = y0
    for t in range(6):
        y = ad.checkpoint(plain_step)(y, a)
    return np.sum(y)


def test_checkpoint_written_at_the_call():
    check_grads(simulate_inline, (np.array([0.3, -0.2]), 0.9), order=2, modes=("rev", "fwd"))
    g = ad.grad(simulate_inline, argnums=(0, 1))
    got = g(np.array([0.3, -0.2]), 0.9)
    want = ad.grad(simulate, argnums=(0, 1))(np.array([0.3, -0.2]), 0.9)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    assert "def plain_step_fwd" not in g.source and "recomputed here" in g.source


def test_checkpoint_at_the_call_of_a_local_function_is_refused_clearly():
    def f(x):
        def inner(v):
            return v * v
        return ad.checkpoint(inner)(x)
    with pytest.raises(UnsupportedSyntaxError, match="takes a function defined at module"):
        ad.grad(f)(1.0)


# ---------------------------------------------------------------- checkpointed loops
def long_loop(y0, a, steps):
    y = y0.copy()
    for t in ad.checkpoint(range(steps)):
        y = y + 0.01 * np.tanh(a * y)
    return np.sum(y * y)


def plain_loop(y0, a, steps):
    y = y0.copy()
    for t in range(steps):
        y = y + 0.01 * np.tanh(a * y)
    return np.sum(y * y)


@pytest.mark.parametrize("steps", [0, 1, 2, 10, 37])
def test_checkpointed_loop_matches_plain_tapes(steps):
    y0 = np.array([0.3, -0.2, 0.5])
    got = ad.grad(long_loop, argnums=(0, 1))(y0, 0.9, steps)
    want = ad.grad(plain_loop, argnums=(0, 1))(y0, 0.9, steps)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-14)
    assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-14)


def test_checkpointed_loop_against_finite_differences():
    y0 = np.array([0.3, -0.2, 0.5])
    check_grads(long_loop, (y0, 0.9, 37), order=2, modes=("rev",))
    check_grads(long_loop, (y0, 0.9, 37), order=1, modes=("fwd",))


def test_checkpointed_loop_forward_over_reverse():
    """check_grads differentiates the loop as a helper (inside its scalarized wrapper), whose
    backward function refills tapes it receives empty: their tangents used to be dropped
    (every popped value had a zero tangent), a silently wrong Hessian-vector product."""
    check_grads(long_loop, (np.array([0.3, -0.2, 0.5]), 0.9, 37), order=2, modes=("fwd",))


def test_checkpointed_loop_keeps_state_only_every_stride_steps():
    g = ad.grad(long_loop)
    g(np.ones(3), 0.9, 100)
    src = g.source
    assert "stride = int(np.sqrt(" in src
    assert "y_checkpoints.append(y.copy())" in src
    # the forward loop itself pushes nothing on a tape
    forward_loop = src.split("for t in range(steps):")[1].split("\n\n")[0]
    assert "_tape.append" not in forward_loop


def test_checkpoint_refuses_nested_loops():
    def nested(x):
        s = 0.0
        for i in range(2):
            for t in ad.checkpoint(range(3)):
                s = s + x * t
        return s
    with pytest.raises(UnsupportedSyntaxError, match="checkpointed loop must not be nested"):
        ad.grad(nested)(1.0)


# ---------------------------------------------------------------- nested functions, lambdas
def with_nested(x, a):
    def scaled(v, k=2.0):
        return np.tanh(a * v) * k
    square = lambda v: v * v  # noqa: E731 - a lambda bound to a name, on purpose
    s = 0.0
    for i in range(len(x)):
        s = s + square(scaled(x[i]))
    return s


def test_nested_functions_and_lambdas():
    check_grads(with_nested, (X, 0.7), order=2, modes=("rev", "fwd"))
    g = ad.grad(with_nested, argnums=(0, 1))
    g(X, 0.7)
    # `a` became a parameter; called in a loop, scaled_bwd recomputes tanh (no tape)
    assert "def scaled_bwd(v, k, a, out_bar):" in g.source


def test_inline_lambda_is_a_nested_function():
    # (was refused: "a lambda is supported when it is bound to a name")
    def f(x):
        return (lambda v: v * v * 2.0)(x)
    assert ad.grad(f)(1.5) == pytest.approx(6.0, rel=1e-12)


# ---------------------------------------------------------------- calls without rules
def lgamma_weight(x, m):
    w = math.lgamma(m + 0.5)
    return w * np.sum(x * x)


def test_call_without_rule_on_constants_is_fine():
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(ad.grad(lgamma_weight)(x, 3.0), 2 * math.lgamma(3.5) * x)


def test_call_without_rule_on_a_differentiated_value_names_the_line():
    def f(x):
        return math.lgamma(x) * 2.0
    with pytest.raises(MissingRuleError, match=r"test_control_flow.py:\d+: math.lgamma has no"):
        ad.grad(f)(3.0)


# ---------------------------------------------------------------- what the tapes keep
def heat(u0, c):
    u = u0.copy()
    n = len(u)
    for t in range(3):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def test_linear_stencil_keeps_no_state_tape():
    g = ad.grad(heat)  # with respect to u0 only: the stencil is linear in u
    g(np.linspace(0, 1, 6), 0.1)
    assert "_tape" not in g.source
    check_grads(heat, (np.linspace(0, 1, 6), 0.1), order=2, modes=("rev", "fwd"))


def test_index_arithmetic_is_recomputed_not_taped():
    g = ad.grad(heat, argnums=(0, 1))
    g(np.linspace(0, 1, 6), 0.1)
    src = g.source
    # the stencil's adjoint gathers (autodiff_ast/gather_form.py), reading the index shifted
    assert "un_bar[j - 1]" in src and "un_bar[j + 1]" in src and "u_bar_j += " in src
    assert "u_bar_j = u_bar[j]" in src and "u_bar[j] = u_bar_j" in src
    # only the value c multiplies, each step's state a row of one tape (test_copy_targets)
    assert "_tape = []" not in src and "u_tape = np.empty((3, u.shape[0])" in src, src


def test_loop_invariant_values_are_not_taped():
    def f(x, a):
        b = np.exp(a)
        s = 0.0
        for i in range(len(x)):
            s = s + b * np.sin(x[i])
        return s
    g = ad.grad(f, argnums=(0, 1))
    g(X, 0.3)
    assert "b_tape" not in g.source
    check_grads(f, (X, 0.3), order=2, modes=("rev", "fwd"))


def _rows_doubled_in_place(w):
    a = np.outer(w, w)
    for row in a:
        row[0] = row[0] * 2.0  # writes into a through the row
    return np.sum(a * a)


def test_a_write_into_the_row_a_for_loop_gives_is_refused_not_lost():
    """``for row in a`` binds a view of a's row: a write into it changes a, which the core
    form would not see (the gradient was silently wrong); it is refused with the line."""
    with pytest.raises(UnsupportedSyntaxError, match="shares memory with row"):
        ad.grad(_rows_doubled_in_place)(np.array([0.3, -0.7, 1.1]))


def _state_made_in_either_branch(u, c):
    """An explicit stencil whose next state is new on both paths: a scaled array, or (every
    second step) a copy of the state."""
    for t in range(5):
        un = u * 1.5
        if t % 2 == 0:
            un = np.copy(u)
        for i in range(1, u.shape[0] - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def _state_kept_in_one_branch(u, c):
    """As above, but one branch keeps the state itself: the writes then change u too."""
    for t in range(5):
        un = u * 1.5
        if t % 2 == 0:
            un = u
        for i in range(1, u.shape[0] - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def test_a_state_new_on_every_path_of_a_step_is_not_refused():
    """The array one statement made a step before is not the one it makes in this step: the
    shared-memory check used to refuse _state_made_in_either_branch ("u may share memory
    with un"), joining the branch that made a new copy with the one holding last step's."""
    u = np.sin(np.linspace(0.0, 3.0, 7))
    check_grads(_state_made_in_either_branch, (u, 0.3), order=1, modes=("rev", "fwd"))
    compiled = ad.jit(ad.grad(_state_made_in_either_branch, argnums=(0, 1)))
    for got, want in zip(compiled(u, 0.3), ad.grad(_state_made_in_either_branch,
                                                   argnums=(0, 1))(u, 0.3)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_a_state_one_branch_keeps_is_still_refused():
    with pytest.raises(UnsupportedSyntaxError, match="may share memory with un"):
        ad.grad(_state_kept_in_one_branch)(np.linspace(0.0, 1.0, 6), 0.3)


def _scaled_copy(v, s):
    v = v.copy()  # the write below goes into this copy, never into the caller's array
    v[0] = v[0] * s
    return v


def _uses_a_helper_that_copies_first(w):
    z = _scaled_copy(w, 3.0)
    z = _scaled_copy(z * w, 0.5)
    return np.sum(z * z) + np.sum(w)


def _scaled_view(v, s):
    v = v[::-1]  # a view: the write below would reach the caller's array
    v[0] = v[0] * s
    return np.sum(v)


def _uses_a_helper_that_writes_through_a_view(w):
    y = np.tanh(w)
    t = _scaled_view(y, 2.0)
    return t + np.sum(y)


def test_a_helper_that_copies_its_parameter_before_writing_is_accepted():
    """`v = v.copy()` first: the helper writes into its own array, so a caller reading its
    argument afterwards is fine (it was refused as a write into the parameter)."""
    check_grads(_uses_a_helper_that_copies_first, (np.array([0.3, -0.7, 1.1]),), order=2,
                modes=("rev", "fwd"))
    with pytest.raises(UnsupportedSyntaxError):  # a view rebinding still counts as the param
        ad.grad(_uses_a_helper_that_writes_through_a_view)(np.array([0.3, -0.7, 1.1]))


def _horner_reversed(w):
    t = 1.0
    for i in reversed(range(3)):
        t = t * w[i] + 0.5
    return t


def _window_reversed(w):
    t = 0.0
    for i in reversed(range(1, 3)):
        for j in reversed(range(i)):
            t = t * 0.5 + w[i] * w[j]
    return t


@pytest.mark.parametrize("f", [_horner_reversed, _window_reversed])
def test_reversed_range_loops(f):
    """``for i in reversed(range(a, b))`` runs as ``range(b - 1, a - 1, -1)``."""
    check_grads(f, (np.array([0.3, -0.7, 1.1]),), order=2, modes=("fwd", "rev"))


def _stepped_reversed(w):
    t = 0.0
    for i in reversed(range(0, 3, 2)):
        t = t + w[i]
    return t


def test_reversed_range_with_a_step_is_refused_with_a_hint():
    with pytest.raises(UnsupportedSyntaxError, match="reversed range itself"):
        ad.grad(_stepped_reversed)(np.array([0.3, -0.7, 1.1]))


def shrinking_in_a_loop(x):
    y = x * 1.0
    s = 0.0
    while y.shape[0] > 1:
        s = s + np.sum(y * y[0])
        y = y[1:] * 0.9  # one element fewer each step
    return s + y[0]


def test_an_array_shrinking_in_a_loop_first_order():
    check_grads(shrinking_in_a_loop, (X,), order=1, modes=("rev", "fwd"))


def test_an_array_shrinking_in_a_loop_second_order():
    """The backward step reads y's shape (np.zeros_like): y and the slice y[1:] are kept for
    every step because their size changes (autodiff_ast/loop_shapes.py)."""
    check_grads(shrinking_in_a_loop, (X,), order=2, modes=("rev", "fwd"))


@pytest.mark.numba
def test_an_array_shrinking_in_a_loop_under_jit():
    from autodiff_ast.jit import jit
    expected = np.array([(shrinking_in_a_loop(X + 1e-6 * e) - shrinking_in_a_loop(X - 1e-6 * e))
                         / 2e-6 for e in np.eye(X.size)])
    np.testing.assert_allclose(jit(ad.grad(shrinking_in_a_loop))(X), expected, rtol=1e-6)


def deletes_a_name(x):
    y = x * 2.0
    z = np.sum(y * x)
    del y  # a name deleted: nothing of it is read again
    y = np.sin(x)
    return z + np.sum(y)


def test_del_of_a_name_is_skipped():
    check_grads(deletes_a_name, (X,), order=2, modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(deletes_a_name))(X), ad.grad(deletes_a_name)(X),
                               rtol=1e-12)


def _square_any(v):
    if isinstance(v, np.ndarray):
        return np.sum(v * v)
    return v * v


def squares_of_a_vector_and_a_number(x):
    return _square_any(x) + _square_any(x[0]) * 2.0


def test_isinstance_of_ndarray_is_decided_from_the_type():
    """A helper written for arrays and numbers alike (`isinstance(v, np.ndarray)`) gets the
    branch of each call's argument (it had no derivative rule before)."""
    check_grads(squares_of_a_vector_and_a_number, (X,), order=2, modes=("rev", "fwd"))
    expected = 2 * X + np.array([4 * X[0]] + [0.0] * (len(X) - 1))
    np.testing.assert_allclose(ad.grad(squares_of_a_vector_and_a_number)(X), expected)
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(squares_of_a_vector_and_a_number))(X), expected)
