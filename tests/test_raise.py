"""`raise` in differentiated code: a check guarded by a run-time condition is kept in every
generated function (gradients, tangents, batches, compiled code) and raises the user's own
exception there; a raise the arguments' kinds always reach (`if x.ndim != 2: raise ...`) is
raised while the code is generated. Gradients are checked against central differences
(check_grads) or explicit values; messages against what Python's f-string writes."""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError
from autodiff_ast.jit import jit


class ShapeMismatch(Exception):
    """An exception class of the user's own (module level, importable)."""


def checked_sum(x):
    if x.shape[0] < 2:
        raise ValueError(f"need two entries, got {x.shape[0]}")
    return np.sum(np.sin(x) * x)


def rank_checked(x):
    if x.ndim != 1:
        raise ValueError(f"need a vector, got {x.ndim} axes")
    return np.sum(x ** 3)


def by_rank(x):
    if x.ndim == 1:
        y = np.sin(x)
    elif x.ndim == 2:
        y = np.cos(x)
    else:
        raise TypeError("a vector or a matrix")
    return np.sum(y * x)


def checked_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < -10.0:
            raise ValueError(f"x[{i}] = {x[i]} is below -10")
        s = s + x[i] ** 2 * np.cos(x[i])
    return s


def nonnegative_roots(x):
    if np.any(x < 0):
        raise ValueError("negative entries")
    return np.sum(np.sqrt(x) * x)


def by_mode(x, mode):
    if mode == 0:
        return np.sum(x * x)
    elif mode == 1:
        return np.sum(np.exp(x))
    raise ValueError(f"unknown mode {mode}")


def own_exception(x, y):
    if x.shape[0] != y.shape[0]:
        raise ShapeMismatch(f"x has {x.shape[0]} entries, y has {y.shape[0]}")
    return np.sum(x * y * y)


def first_checked(x):
    y = np.tanh(x) * 2.0
    if x[0] > 100.0:
        raise ValueError(f"first entry too big: {x[0]}")
    return np.sum(y * y)


X = np.array([0.5, 1.5, -0.7, 2.0])


@pytest.mark.parametrize("fn", [checked_sum, rank_checked, by_rank, checked_in_loop,
                                nonnegative_roots, first_checked])
def test_gradients_through_a_check_that_passes(fn):
    x = np.abs(X) if fn is nonnegative_roots else X
    ad.check_grads(fn, (x,), order=2, modes=("rev", "fwd"))
    np.testing.assert_allclose(jit(ad.grad(fn))(x), ad.grad(fn)(x), rtol=1e-12)


def test_matrix_branch_of_a_rank_dispatch():
    m = X.reshape(2, 2)
    np.testing.assert_allclose(ad.grad(by_rank)(m), np.cos(m) - m * np.sin(m), rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(by_rank))(m), np.cos(m) - m * np.sin(m), rtol=1e-12)


@pytest.mark.parametrize("transform", ["grad", "jit_grad", "jvp", "vmap_grad", "jit_vmap_grad",
                                       "hessian", "grad_of_grad"])
def test_a_failing_check_raises_the_users_exception(transform):
    bad = np.array([1.0, -20.0, 2.0])
    run = {
        "grad": lambda: ad.grad(checked_in_loop)(bad),
        "jit_grad": lambda: jit(ad.grad(checked_in_loop))(bad),
        "jvp": lambda: ad.jvp(checked_in_loop, (bad,), (np.ones(3),)),
        "vmap_grad": lambda: ad.vmap(ad.grad(checked_in_loop))(np.stack([X[:3], bad])),
        "jit_vmap_grad": lambda: jit(ad.vmap(ad.grad(checked_in_loop)))(np.stack([X[:3], bad])),
        "hessian": lambda: ad.hessian(checked_in_loop)(bad),
        "grad_of_grad": lambda: ad.grad(lambda v: ad.grad(checked_in_loop)(v)[0])(bad),
    }[transform]
    # (under vmap the message shows the batch's values: x[1] is a column there)
    message = "is below -10" if transform == "vmap_grad" else "x[1] = -20.0 is below -10"
    with pytest.raises(ValueError, match=re.escape(message)):
        run()


def test_a_batched_condition_raises_when_any_example_fails():
    batch = np.stack([X, X])
    expected = np.stack([ad.grad(first_checked)(X)] * 2)
    for vmapped in (ad.vmap(ad.grad(first_checked)), jit(ad.vmap(ad.grad(first_checked)))):
        np.testing.assert_allclose(vmapped(batch), expected, rtol=1e-12)
        bad = batch.copy()
        bad[1, 0] = 200.0
        with pytest.raises(ValueError, match="first entry too big"):
            vmapped(bad)


def test_a_per_example_loop_that_may_raise_is_not_a_prange_loop():
    compiled = jit(ad.vmap(ad.grad(first_checked)), batching="loop")
    batch = np.stack([X, X, X])
    compiled(batch)
    assert "for b in range(1, n_batch):" in compiled.source
    for k in range(3):  # (Numba drops an exception raised in a prange loop's worker)
        bad = batch.copy()
        bad[k, 0] = 200.0
        with pytest.raises(ValueError, match="first entry too big: 200.0"):
            compiled(bad)


def test_a_batched_guard_is_one_check_on_the_whole_batch():
    vmapped = ad.vmap(ad.grad(nonnegative_roots))
    batch = np.stack([np.abs(X), np.abs(X) + 1.0])
    np.testing.assert_allclose(vmapped(batch)[1], ad.grad(nonnegative_roots)(np.abs(X) + 1.0))
    assert "raise ValueError('negative entries')" in vmapped.source
    bad = batch.copy()
    bad[0, 2] = -1.0
    with pytest.raises(ValueError, match="negative entries"):
        vmapped(bad)


def test_a_check_decided_by_the_arguments_kinds_raises_while_generating():
    for call in (lambda: ad.grad(rank_checked)(np.ones((2, 2))),
                 lambda: jit(ad.grad(rank_checked))(np.ones((2, 2))),
                 lambda: ad.jacfwd(rank_checked)(np.ones((2, 2)))):
        with pytest.raises(ValueError, match="need a vector, got 2 axes") as info:
            call()
        note = "\n".join(getattr(info.value, "__notes__", []))
        assert re.search(r"test_raise\.py:\d+ while its derivative code", note), note


def test_a_runtime_int_picks_the_branch_or_raises():
    x = X[:3]
    np.testing.assert_allclose(ad.grad(by_mode)(x, 0), 2.0 * x, rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(by_mode))(x, 1), np.exp(x), rtol=1e-12)
    for g in (ad.grad(by_mode), jit(ad.grad(by_mode)), jit(ad.grad(by_mode), static_argnums=1)):
        with pytest.raises(ValueError, match="unknown mode 3") as info:
            g(x, 3)
        note = "\n".join(getattr(info.value, "__notes__", []))
        if g is not None and "raised in generated code" in note:
            # the traceback note points at the user's raise, not the def line
            assert 'raise ValueError(f"unknown mode {mode}")' in note, note


def test_an_exception_class_of_the_users_own():
    y = np.array([1.0, 2.0, 3.0])
    expected = y * y
    np.testing.assert_allclose(ad.grad(own_exception)(y, y), expected, rtol=1e-12)
    for g in (ad.grad(own_exception), jit(ad.grad(own_exception))):
        with pytest.raises(ShapeMismatch, match="x has 3 entries, y has 2"):
            g(y, y[:2])


def test_generated_source_raises_as_the_user_wrote():
    g = ad.grad(checked_in_loop)
    g(X)
    ast.parse(g.source)
    assert "raise ValueError('x[' + str(i) + '] = ' + str(x[i]) + ' is below -10')" in g.source
    # no backward code for the check: it appears once, in the forward part
    assert g.source.count("raise ValueError") == 1
    compiled = jit(ad.grad(checked_in_loop))
    compiled(X)
    assert "message_text(x[i])" in compiled.source


def test_message_values_are_written_like_python_under_jit():
    def show(x, n):
        if n > 0:
            raise ValueError(f"{x[0]} {x[1]} {x[2]} {x.shape} {n} {n > 1}")
        return np.sum(x)
    x = np.array([0.5, -1234567.0, 2.5e-7])
    with pytest.raises(ValueError) as info:
        jit(ad.grad(show))(x, 2)
    assert str(info.value) == "0.5 -1.23457e+06 2.5e-07 (3,) 2 True"
    with pytest.raises(ValueError) as info:
        ad.grad(show)(x, 2)
    assert str(info.value) == f"{x[0]} {x[1]} {x[2]} {x.shape} 2 True"


def bare_reraise(x):
    if x > 0:
        raise
    return x


def two_arguments(x):
    if x > 0:
        raise ValueError("bad", x)
    return x


def not_an_exception(x):
    if x > 0:
        raise len("no")
    return x


def local_exception_class(x):
    class Local(Exception):
        pass
    if x > 0:
        raise Local("no")
    return x


@pytest.mark.parametrize("fn, words", [
    (bare_reraise, "bare raise"),
    (two_arguments, "at most one argument"),
    (not_an_exception, "raise takes an exception class"),
    (local_exception_class, "class definitions"),
])
def test_unsupported_raises_are_refused_at_the_line(fn, words):
    with pytest.raises(UnsupportedSyntaxError, match=words) as info:
        ad.grad(fn)(1.0)
    assert "test_raise.py" in str(info.value)


def test_a_raise_cannot_become_cuda_device_code():
    from autodiff_ast.device import DeviceCodeError
    with pytest.raises(DeviceCodeError, match="a raise statement cannot become CUDA"):
        jit(ad.vmap(ad.grad(first_checked)), target="cuda")(np.stack([X, X]))


# ---------------------------------------------------------------- a helper that always raises
def as_vector(v):
    if v.ndim != 1:
        raise ShapeMismatch("as_vector needs a vector")
    return v * 1.0


def flattened_unless_asked(x, mode):
    """as_vector(x) always raises for a matrix, but only runs when mode > 0."""
    if mode > 0:
        y = as_vector(x)
    else:
        y = x.ravel()
    return np.sum(np.sin(y) * y)


def helper_raise_mid_branch(x, mode):
    y = x[0]
    if mode > 0:
        y = np.sum(as_vector(x)) * y
    return np.sum(y * y)


M = np.array([[0.3, -1.2, 0.8], [2.1, -0.4, 1.5]])


@pytest.mark.parametrize("fn", [flattened_unless_asked, helper_raise_mid_branch])
def test_a_helper_that_always_raises_raises_only_when_its_branch_runs(fn):
    ad.check_grads(fn, (M, -1.0), modes=("fwd", "rev"))
    np.testing.assert_allclose(jit(ad.grad(fn))(M, -1.0), ad.grad(fn)(M, -1.0), rtol=1e-13)
    for transform in (ad.grad, lambda f: jit(ad.grad(f)), ad.value_and_grad):
        with pytest.raises(ShapeMismatch, match="as_vector needs a vector"):
            transform(fn)(M, 1.0)
    with pytest.raises(ShapeMismatch, match="as_vector needs a vector"):
        ad.jvp(fn, (M, 1.0), (np.ones_like(M), 0.0))


def test_a_helper_that_always_raises_in_a_batch():
    batched = ad.vmap(ad.grad(flattened_unless_asked), in_axes=(None, 0))
    np.testing.assert_allclose(batched(M, np.array([-1.0, -2.0]))[1],
                               ad.grad(flattened_unless_asked)(M, -2.0), rtol=1e-13)
    with pytest.raises(ShapeMismatch, match="as_vector needs a vector"):
        batched(M, np.array([-1.0, 2.0]))


def test_a_helper_that_always_raises_unconditionally_raises_while_generating():
    def calls_it(x):
        return np.sum(as_vector(x))
    with pytest.raises(ShapeMismatch, match="as_vector needs a vector") as info:
        ad.grad(calls_it)(M)
    assert any("while its derivative code was being generated" in n
               for n in info.value.__notes__)
    # the failed helper left nothing behind: a vector argument works afterwards
    assert ad.grad(calls_it)(M[0]) == pytest.approx(np.ones(3))


def validated(v):
    if v[0] > 5.0:
        raise ValueError("first entry above 5")
    return v * 2.0


def result_unread(x):
    checked = validated(x)  # noqa: F841  (called for its check only)
    return np.sum(x ** 2)


@pytest.mark.parametrize("transform", ["grad", "jvp", "jit_grad", "vmap_grad", "jacrev",
                                       "jacfwd", "hessian"])
def test_a_helper_that_may_raise_runs_though_nothing_reads_its_result(transform):
    # tidying dropped the call as a dead store: no check ran in any transformation
    bad = np.array([9.0, 1.0])
    run = {
        "grad": lambda: ad.grad(result_unread)(bad),
        "jvp": lambda: ad.jvp(result_unread, (bad,), (np.ones(2),)),
        "jit_grad": lambda: jit(ad.grad(result_unread))(bad),
        "vmap_grad": lambda: ad.vmap(ad.grad(result_unread))(np.stack([X[:2], bad])),
        "jacrev": lambda: ad.jacrev(result_unread)(bad),
        "jacfwd": lambda: ad.jacfwd(result_unread)(bad),
        "hessian": lambda: ad.hessian(result_unread)(bad),
    }[transform]
    with pytest.raises(ValueError, match="first entry above 5"):
        run()
    np.testing.assert_allclose(ad.grad(result_unread)(X[:2]), 2 * X[:2], rtol=1e-12)
