"""`assert test, message` in differentiated code runs as Python runs it: ``if not test: raise
AssertionError(message)``, in every generated function that runs the primal code (gradients,
tangents, vjp, batches, Hessians, compiled code), raised while the code is generated where the
arguments' kinds decide the test false, and dropped under ``python -O`` as Python drops it.
The asserts used to be skipped silently. Gradients through an assert that passes are checked
against central differences (check_grads) and explicit values."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def positive_log(x):
    assert np.all(x > 0), f"x must be positive, smallest {np.min(x)}"
    return np.sum(np.log(x) * x)


def bare(x):
    assert np.all(x < 100.0)
    return np.sum(np.sin(x) * x)


def both_positive(x):
    assert x[0] > 0 and x[1] > 0, "the first two entries must be positive"
    return np.sum(x ** 3)


def value_message(x):
    assert x[0] < 100.0, x[0]
    return np.sum(np.cos(x) * x)


def vector_only(x):
    assert x.ndim == 1, f"need a vector, got {x.ndim} axes"
    return np.sum(x ** 2 * np.sin(x))


def checked_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        assert x[i] > -10.0, f"x[{i}] = {x[i]} is below -10"
        s = s + x[i] ** 2 * np.cos(x[i])
    return s


def bounded_iterations(x):
    s = x[0]
    k = 0
    while s < 10.0:
        assert k < 50, f"no convergence after {k} steps"
        s = s * 1.5 + 0.1
        k += 1
    return s * x[1]


def checked_square(v):
    assert v > -5.0, f"v = {v:.2f} is below -5"
    return v * v


def calls_a_checked_helper(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + checked_square(x[i]) * x[i]
    return s


def quadratic(x):
    # the gradient needs no value the forward code computes: the check must still run
    assert np.all(x < 100.0), "entries below 100"
    return np.sum(x * x) * 0.5


X = np.array([0.5, 1.5, 0.7, 2.0])
PASSING = [positive_log, bare, both_positive, value_message, vector_only, checked_in_loop,
           bounded_iterations, calls_a_checked_helper, quadratic]


@pytest.mark.parametrize("fn", PASSING, ids=lambda f: f.__name__)
def test_gradients_through_an_assert_that_passes(fn):
    ad.check_grads(fn, (X,), order=2, modes=("rev", "fwd"))


@pytest.mark.numba
@pytest.mark.parametrize("fn", PASSING, ids=lambda f: f.__name__)
def test_compiled_and_batched_gradients_through_an_assert_that_passes(fn):
    def fd(x, eps=1e-6):
        return np.array([(fn(x + eps * e) - fn(x - eps * e)) / (2 * eps) for e in np.eye(4)])
    batch = np.stack([X, X + 0.25])
    expected = np.stack([fd(x) for x in batch])
    np.testing.assert_allclose(jit(ad.grad(fn))(X), expected[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ad.vmap(ad.grad(fn))(batch), expected, rtol=1e-6, atol=1e-7)


def test_explicit_gradient_values():
    np.testing.assert_allclose(ad.grad(positive_log)(X), np.log(X) + 1.0, rtol=1e-12)
    np.testing.assert_allclose(ad.grad(quadratic)(X), X, rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(quadratic)(X), np.eye(4), rtol=1e-12)


BAD = np.array([0.5, -1.5, 0.7, 2.0])
FAILING = {
    "grad": lambda f, x: ad.grad(f)(x),
    "value_and_grad": lambda f, x: ad.value_and_grad(f)(x),
    "jvp": lambda f, x: ad.jvp(f, (x,), (np.ones_like(x),)),
    "vjp": lambda f, x: ad.vjp(f, x),
    "vmap": lambda f, x: ad.vmap(f)(np.stack([X, x])),
    "vmap_grad": lambda f, x: ad.vmap(ad.grad(f))(np.stack([X, x])),
    "jacrev": lambda f, x: ad.jacrev(f)(x),
    "jacfwd": lambda f, x: ad.jacfwd(f)(x),
    "hessian": lambda f, x: ad.hessian(f)(x),
    "grad_of_grad": lambda f, x: ad.grad(lambda v: ad.grad(f)(v)[0])(x),
    "jit": lambda f, x: jit(f)(x),
    "jit_grad": lambda f, x: jit(ad.grad(f))(x),
    "jit_vmap_grad": lambda f, x: jit(ad.vmap(ad.grad(f)))(np.stack([X, x])),
}


@pytest.mark.parametrize("transform", list(FAILING))
def test_a_failing_assert_raises_with_the_users_message(transform):
    # under vmap the message shows the batch's values (np.min of each example)
    message = "x must be positive, smallest" if transform.startswith("vmap") else \
        "x must be positive, smallest -1.5"
    with pytest.raises(AssertionError, match=re.escape(message)):
        FAILING[transform](positive_log, BAD)


@pytest.mark.parametrize("transform", ["grad", "jvp", "jacrev", "hessian", "jit_grad",
                                       "vmap_grad", "jit_vmap_grad"])
def test_an_assert_whose_values_the_derivative_does_not_need_still_runs(transform):
    with pytest.raises(AssertionError, match="entries below 100"):
        FAILING[transform](quadratic, X * 100.0)


@pytest.mark.parametrize("transform", ["grad", "jvp", "hessian", "jit_grad", "vmap_grad",
                                       "jit_vmap_grad"])
def test_an_assert_in_a_helper_called_in_a_loop(transform):
    bad = np.array([1.0, -7.0, 1.0, 1.0])
    message = "is below -5" if transform == "vmap_grad" else None
    with pytest.raises(AssertionError, match=message) as info:
        FAILING[transform](calls_a_checked_helper, bad)
    if transform != "vmap_grad":  # (jit applies the format spec too: message_format)
        assert str(info.value) == "v = -7.00 is below -5"


def test_messages_as_python_writes_them():
    with pytest.raises(AssertionError) as info:
        ad.grad(bare)(X * 1000.0)
    assert str(info.value) == ""
    with pytest.raises(AssertionError) as info:
        ad.grad(value_message)(X * 1000.0)
    assert str(info.value) == "500.0"
    with pytest.raises(AssertionError, match="the first two entries must be positive"):
        jit(ad.grad(both_positive))(BAD)
    with pytest.raises(AssertionError, match="no convergence after 50 steps"):
        ad.grad(bounded_iterations)(np.array([-0.2, 1.0]))  # s = -0.2 is a fixed point
    with pytest.raises(AssertionError, match=re.escape("x[1] = -20.0 is below -10")):
        jit(ad.grad(checked_in_loop))(np.array([1.0, -20.0, 2.0]))


def test_an_assert_the_arguments_kinds_decide_raises_while_generating():
    np.testing.assert_allclose(ad.grad(vector_only)(X), 2 * X * np.sin(X) + X ** 2 * np.cos(X),
                               rtol=1e-12)
    g = ad.grad(vector_only)
    g(X)
    assert "AssertionError" not in g.source  # true for every vector: no check written
    for call in (lambda: ad.grad(vector_only)(np.ones((2, 2))),
                 lambda: jit(ad.grad(vector_only))(np.ones((2, 2)))):
        with pytest.raises(AssertionError, match="need a vector, got 2 axes") as info:
            call()
        note = "\n".join(getattr(info.value, "__notes__", []))
        assert re.search(r"test_assert\.py:\d+ while its derivative code", note), note


def test_generated_source_holds_the_check_once():
    g = ad.grad(positive_log)
    g(X)
    assert "if not np.all(x > 0):" in g.source
    assert "raise AssertionError('x must be positive, smallest ' + str(np.min(x)))" in g.source
    assert g.source.count("raise AssertionError") == 1  # forward code only
    compiled = jit(ad.grad(positive_log))
    compiled(X)
    assert "raise AssertionError(" in compiled.source


def test_the_traceback_note_names_the_assert_line():
    with pytest.raises(AssertionError) as info:
        ad.grad(positive_log)(BAD)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert 'assert np.all(x > 0), f"x must be positive, smallest {np.min(x)}"' in note, note


def test_a_cuda_kernel_refuses_an_assert_at_its_line():
    from autodiff_ast.device import DeviceCodeError
    with pytest.raises(DeviceCodeError, match="nor check an assert") as info:
        jit(ad.vmap(ad.grad(positive_log)), target="cuda")(np.stack([X, X]))
    assert "assert np.all(x > 0)" in str(info.value)


MODEL = '''\
import numpy as np


def positive_log(x):
    assert np.all(x > 0), "x must be positive"
    return np.sum(np.log(np.abs(x)) * x)
'''

RUN = '''\
import numpy as np
import autodiff_ast as ad
from autodiff_ast.jit import jit
import assert_model

bad = np.array([0.5, -1.5, 0.7])
expected = np.log(np.abs(bad)) + 1.0
for name, g in (("grad", ad.grad(assert_model.positive_log)),
                ("jit_grad", jit(ad.grad(assert_model.positive_log)))):
    try:
        got = g(bad)
    except AssertionError as exc:
        print(name, "raised", exc)
    else:
        assert np.allclose(got, expected), got
        print(name, "ran")
'''


@pytest.mark.numba
def test_python_dash_o_drops_asserts(tmp_path):
    (tmp_path / "assert_model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "modules"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    outputs = {}
    # a normal run first: its compiled module is recorded for warm starts, and python -O
    # must not load it
    for flags in ([], ["-O"]):
        run = subprocess.run([sys.executable, *flags, "run.py"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        outputs[tuple(flags)] = run.stdout
    assert outputs[()] == textwrap.dedent("""\
        grad raised x must be positive
        jit_grad raised x must be positive
        """)
    assert outputs[("-O",)] == "grad ran\njit_grad ran\n"
