"""`print` in differentiated code: kept in every generated function that runs the primal code,
so a gradient prints what the function prints, once per call (nothing is traced). Gradients
are checked against explicit values; printed lines against what the function itself prints
(capfd: compiled code prints from C, past Python's sys.stdout)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError
from autodiff_ast.jit import jit


def logged(x):
    y = np.tanh(x)
    print("y is", y)
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 1.0:
            print(f"step {i}: x = {x[i]}")
        s = s + y[i] * x[i]
    print(f"loss {s}")
    return s


def expected_grad(x):
    y = np.tanh(x)
    return y + x * (1.0 - y * y)


X = np.array([0.5, 1.5, 2.0])


def test_grad_prints_what_the_function_prints(capfd):
    logged(X)
    by_function = capfd.readouterr().out
    for g in (ad.grad(logged), ad.value_and_grad(logged)):
        out = g(X)
        assert capfd.readouterr().out == by_function
    np.testing.assert_allclose(out[1], expected_grad(X), rtol=1e-12)
    np.testing.assert_allclose(ad.grad(logged)(X), expected_grad(X), rtol=1e-12)
    assert by_function.count("step") == 2


def test_print_is_kept_once_in_the_forward_code():
    g = ad.grad(logged)
    g(X)
    assert g.source.count("print(") == 3
    assert "print('step ' + str(i) + ': x = ' + str(x[i]))" in g.source


def test_second_order_prints_once_per_call(capfd):
    h = ad.grad(lambda v: ad.grad(logged)(v)[0])
    capfd.readouterr()
    got = h(X)
    assert capfd.readouterr().out.count("loss") == 1
    # d/dx0 of (tanh(x0) + x0 (1 - tanh(x0)^2)): 2 sech^2 - 2 x0 tanh sech^2
    t = np.tanh(X[0])
    np.testing.assert_allclose(got[0], 2 * (1 - t * t) - 2 * X[0] * t * (1 - t * t),
                               rtol=1e-10)
    np.testing.assert_allclose(got[1:], 0.0, atol=1e-14)


def test_jit_prints_with_six_significant_digits(capfd):
    compiled = jit(ad.grad(logged))
    capfd.readouterr()
    np.testing.assert_allclose(compiled(X), expected_grad(X), rtol=1e-12)
    out = capfd.readouterr().out.splitlines()
    assert out[1:] == ["step 1: x = 1.5", "step 2: x = 2.0", "loss 3.51684"]
    assert out[0].startswith("y is [0.46211716")


def test_vmap_prints_the_batch_and_a_batched_branch_when_any_example_takes_it(capfd):
    batch = np.stack([X, -X])
    got = ad.vmap(ad.grad(logged))(batch)
    out = capfd.readouterr().out
    np.testing.assert_allclose(got, np.stack([expected_grad(X), expected_grad(-X)]),
                               rtol=1e-12)
    assert "step 1: x = [ 1.5 -1.5]" in out
    got = ad.vmap(ad.grad(logged))(-np.abs(batch))
    assert "step" not in capfd.readouterr().out  # no example takes the branch


def test_jvp_prints(capfd):
    _, tangent = ad.jvp(logged, (X,), (np.ones(3),))
    assert capfd.readouterr().out.count("loss") == 1
    np.testing.assert_allclose(tangent, np.sum(expected_grad(X)), rtol=1e-12)


def with_separator(x):
    print(x, x, sep=", ")
    return np.sum(x)


def to_a_file(x):
    print(x, file=sys.stderr)
    return np.sum(x)


@pytest.mark.parametrize("fn", [with_separator, to_a_file])
def test_print_options_are_refused_at_the_line(fn):
    with pytest.raises(UnsupportedSyntaxError, match="without sep=, end= or file=") as info:
        ad.grad(fn)(X)
    assert "test_print.py" in str(info.value)


def test_print_stays_out_of_cuda_kernels():
    from autodiff_ast.device import DeviceCodeError
    with pytest.raises(DeviceCodeError, match="print cannot become CUDA"):
        jit(ad.vmap(ad.grad(logged)), target="cuda")(np.stack([X, X]))


def formatted(x):
    s = np.sum(x * x)
    print(x + 1.0)
    print(f"loss {s:.3f} n={x.shape[0]:d}")
    return s


def test_format_specs_and_arithmetic_in_print(capfd):
    """`print(x + 1.0)` prints the array (not str(x) + '1.0'); a format spec applies as in
    the function itself, under jit too (codegen/helpers.py's message_format)."""
    x = np.array([1.0, 2.0])
    formatted(x)
    by_function = capfd.readouterr().out
    np.testing.assert_allclose(ad.grad(formatted)(x), 2.0 * x)
    assert capfd.readouterr().out == by_function == "[2. 3.]\nloss 5.000 n=2\n"
    np.testing.assert_allclose(jit(ad.grad(formatted))(x), 2.0 * x)
    assert capfd.readouterr().out == "[2. 3.]\nloss 5.000 n=2\n"


# ---------------------------------------------------------------- forward code run again
def noisy_square(v):
    print("square of", v)
    return v * v


def squares_in_a_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + noisy_square(x[i])
    return s


def checkpointed_steps(x):
    s = x
    for t in ad.checkpoint(range(3)):
        s = np.sin(s)
        print("step", t)
    return np.sum(s)


@pytest.mark.parametrize("transform", [ad.grad, ad.value_and_grad,
                                       lambda f: jit(ad.grad(f))],
                         ids=["grad", "value_and_grad", "jit(grad)"])
def test_a_helper_recomputed_for_its_adjoint_prints_once(capfd, transform):
    x = np.array([0.5, -1.5])
    squares_in_a_loop(x)
    by_function = capfd.readouterr().out
    result = transform(squares_in_a_loop)(x)
    grad = result[1] if isinstance(result, tuple) else result
    np.testing.assert_allclose(grad, 2.0 * x, rtol=1e-14)
    assert capfd.readouterr().out == by_function


def test_a_checkpointed_loop_prints_each_step_once(capfd):
    x = np.array([0.3, 0.4])
    checkpointed_steps(x)
    by_function = capfd.readouterr().out
    expected = np.cos(np.sin(np.sin(x))) * np.cos(np.sin(x)) * np.cos(x)
    np.testing.assert_allclose(ad.grad(checkpointed_steps)(x), expected, rtol=1e-14)
    assert capfd.readouterr().out == by_function == "step 0\nstep 1\nstep 2\n"


# ---------------------------------------------------------------- session 48: str(n) and
# "-" * k as printed values ("str has no derivative rule"); a message chosen by a conditional
# expression ("an f-string is not supported")
def ruled(x):
    s = np.sum(x * x)
    print("-" * 3, str(x.shape[0]), f"{x.shape[0]:#x}")
    return s


def chosen_message(x):
    s = np.sum(x * x)
    print(f"big {s:.2f}" if s > 1 else f"small {s:.3f}")
    return s


def test_str_and_repeated_text_print_as_in_the_function(capfd):
    x = np.array([1.0, 2.0])
    ruled(x)
    by_function = capfd.readouterr().out
    assert by_function == "--- 2 0x2\n"
    np.testing.assert_allclose(ad.grad(ruled)(x), 2.0 * x)
    assert capfd.readouterr().out == by_function
    np.testing.assert_allclose(jit(ad.grad(ruled))(x), 2.0 * x)
    assert capfd.readouterr().out == by_function


def test_a_message_chosen_by_a_conditional_is_refused_with_what_to_write():
    with pytest.raises(UnsupportedSyntaxError, match="chosen by a conditional") as info:
        ad.grad(chosen_message)(X)
    assert "test_print.py" in str(info.value) and "if statement" in str(info.value)
