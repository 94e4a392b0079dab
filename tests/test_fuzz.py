"""Property-based fuzzing of the derivative code (the fast profile) and the regressions it found.

``test_random_programs`` checks a few random programs from :mod:`fuzzing` (forward and reverse
mode, order 1 and 2, against finite differences and the dot-product test) on every ``make
test``; ``make fuzz`` runs the same checks for ten minutes. Each ``test_regression_*`` keeps a
program the fuzzer found wrong or crashing, minimized, with the program source inline.
"""

from __future__ import annotations

import numpy as np
import pytest
from fuzzing import Program, check_program, check_source, programs
from hypothesis import HealthCheck, given, settings

import autodiff_ast as ad

FAST = settings(max_examples=12, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


@FAST
@given(programs())
def test_random_programs(program):
    outcome = check_program(program)
    assert not outcome.failed, outcome.report(program)


def test_generator_writes_every_construct():
    """The strategy reaches loops, in-place writes, branches, helpers and dict arguments."""
    from hypothesis import find
    for needle in ("for ", "while ", "if ", "] = ", "def h0", "p['a']", "@", "axis=",
                   "np.where(", "np.maximum(", "int(np.sum("):
        program = find(programs(), lambda p, n=needle: n in p.source,
                       settings=settings(max_examples=2000, database=None,
                                         suppress_health_check=list(HealthCheck)))
        assert needle in program.source


def test_checker_flags_a_wrong_rule():
    """check_program reports 'wrong' for a program whose rule is deliberately wrong (the
    partial of x * x registered as 3 x), in both the order-1 and order-2 checks."""
    from fuzzing import load_program

    def wrong_square(x):
        return x * x

    ad.register_rule(wrong_square, partials="3.0 * x")
    program = Program("import numpy as np\n\n\ndef f(x):\n"
                      "    return np.sum(wrong_square(np.sin(x)))\n", ("x",), seed=3)
    load_program(program.source).wrong_square = wrong_square
    for order in (1, 2):
        outcome = check_program(program, order=order)
        assert outcome.status == "wrong", outcome.report(program)
        assert "disagrees with finite differences" in outcome.detail


# ---------------------------------------------------------------- regressions found by fuzzing
def test_regression_empty_loop_body_in_generated_code():
    """grad(f) writes `for _ in range(n_iter): pass` (nothing to restore); differentiating that
    source again raised AttributeError ('Pass' object has no attribute 'prim')."""
    check_source('''
import numpy as np


def f(w):
    s = w * w + 2.0
    while s < 1.5:
        s = s + 0.5
    return s * w
''', params=("w",))


def test_regression_zero_trip_while_loop_in_vjp():
    """A while loop that runs zero times: the vjp's backward function read the loop variable
    that only the (skipped) restores would have bound (UnboundLocalError)."""
    check_source('''
import numpy as np


def f(x):
    s = np.hypot(x[0], 1.5)
    while s < 1.5:
        s = s + 0.5
    y = np.copy(x)
    for i in range(y.shape[0]):
        y[i] = x[i]
    return s + np.sum(y)
''', params=("x",))


def test_regression_power_zero_forward_mode():
    """`x ** 0` had no forward-mode rule (MissingRuleError); its tangent is zero."""
    check_source('''
import numpy as np


def f(x):
    return np.sum((np.sin(x)) ** 0 * x) + (x[0]) ** 0
''', params=("x",))


def test_regression_keepdims_residual_in_branch():
    """A size-one axis (keepdims) computed in a branch: the residual placeholder had every axis
    of size zero, so the helper's backward function was typed [N,N] instead of [N,1] and its
    second derivative skipped a sum (a silently wrong Hessian-vector product)."""
    check_source('''
import numpy as np


def f(A, x):
    if 1.5 > 1.5:
        t2 = np.sum(A)
    else:
        t2 = np.sum(A, axis=1, keepdims=True)[0, 0]
    return t2 * t2
''', params=("A", "x"), n=3, m=2, seed=2)


def test_regression_integer_array_times_float_is_float():
    """`(x == m) / np.sum(x == m) + w` (the gradient of np.max) was typed int64: differentiating
    the gradient again lost the derivative with respect to w."""
    check_source('''
import numpy as np


def f(x, w):
    return np.sum(x * w) + np.max(x)
''', params=("x", "w"))


def test_regression_int_array_plus_float_type():
    from autodiff_ast import types as T
    ints = T.AType("array", "int64", (T.N,))
    assert T.result_dtype(ints, T.FLOAT) == "float64"
    assert T.describe(T.broadcast(ints, T.FLOAT)) == "float64[N]"


@pytest.mark.parametrize("x", [np.array([0.5, -1.0, 2.0])])
def test_regression_jacrev_of_max_gradient(x):
    """jacrev(grad(f)) refused the gradient of np.max ('needs real floating-point outputs')."""
    g = ad.grad(lambda v: np.max(v) + np.sum(v * v))
    hess = ad.jacrev(g)(x)
    assert np.allclose(hess, 2.0 * np.eye(3))
