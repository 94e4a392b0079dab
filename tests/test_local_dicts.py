"""Dicts built inside the differentiated function (normalize.LocalDict): each entry is a local
name of its own, so reads, writes, branches, loops and aliasing behave as in Python, and the
derivative flows through entries as through names. Every gradient is checked against central
differences (check_grads) or an explicit value; jit(grad) against grad."""

from __future__ import annotations

import re

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError
from autodiff_ast.jit import jit

W = np.array([0.3, -0.2, 0.5])
X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])


def params_display(w, b, x):
    p = {"w": w, "b": b}
    return np.sum(np.tanh(x @ p["w"] + p["b"]))


def filled_in_a_loop(w, x):
    d = {}
    d["acc"] = 0.0
    for i in range(x.shape[0]):
        d["acc"] += np.sum(w * x[i]) ** 2
    return d["acc"]


def rebound_in_branches(w, x):
    d = {"s": w}
    if np.sum(x) > 0:
        d["s"] = w * 2.0
    else:
        d["s"] = w * 3.0
    return np.sum(d["s"] * x)


def aliased(w, x):
    p = {"w": w}
    q = p
    q["w"] = 2.0 * p["w"]  # p sees it: q is the same dict
    r = p
    p = {"w": 3.0 * w}  # a new dict: r keeps the old one
    return np.sum(r["w"] * x) + np.sum(p["w"])


def _scaled(d):
    return d["w"] * d["inner"]["scale"]


def passed_on(w, x):
    p = {"w": w, "inner": {"scale": np.sum(x)}}
    total = 0.0
    for k in ("w",):
        total = total + np.sum(p[k] * x)
    return total + np.sum(_scaled(p)) * len(p)


def with_aux(w, x):
    stats = {"mean": np.mean(w * x), "max": np.max(w)}
    return stats["mean"] * 2.0, stats


CASES = [(params_display, (W, np.array([0.1, 0.2]), X)), (filled_in_a_loop, (W, X)),
         (rebound_in_branches, (W, X[0])), (rebound_in_branches, (W, -X[0])),
         (aliased, (W, X[0])), (passed_on, (W, X[1]))]


@pytest.mark.parametrize("f,args", CASES, ids=[f"{c[0].__name__}-{k}"
                                               for k, c in enumerate(CASES)])
def test_gradients_through_dict_entries(f, args):
    ad.check_grads(f, args, modes=("rev", "fwd"), order=1)


def test_entries_follow_python_semantics():
    """Explicit values: the loop's running entry, the branch taken, aliasing and rebinding."""
    x = X[0]
    np.testing.assert_allclose(ad.grad(filled_in_a_loop)(W, X),
                               2 * (W @ X[0]) * X[0] + 2 * (W @ X[1]) * X[1])
    np.testing.assert_allclose(ad.grad(rebound_in_branches)(W, x), 2.0 * x)
    np.testing.assert_allclose(ad.grad(rebound_in_branches)(W, -x), -3.0 * x)
    assert aliased(W, x) == pytest.approx(np.sum(2 * W * x) + np.sum(3 * W))
    np.testing.assert_allclose(ad.grad(aliased)(W, x), 2.0 * x + 3.0)


@pytest.mark.numba
def test_jit_grad_through_dict_entries(quick_llvm):
    for f, args in CASES[:4]:
        np.testing.assert_allclose(jit(ad.grad(f))(*args), ad.grad(f)(*args), rtol=1e-12)


def test_a_built_dict_is_the_aux_output():
    (value, aux), g = ad.value_and_grad(with_aux, has_aux=True)(W, X[0])
    assert value == pytest.approx(2.0 * np.mean(W * X[0]))
    assert aux == {"mean": pytest.approx(np.mean(W * X[0])), "max": pytest.approx(0.5)}
    np.testing.assert_allclose(g, 2.0 * X[0] / 3)


def test_vmap_of_grad_through_dict_entries():
    batch = ad.vmap(ad.grad(rebound_in_branches), in_axes=(None, 0))(W, X)
    for row, x in zip(batch, X):
        np.testing.assert_allclose(row, ad.grad(rebound_in_branches)(W, x))


def _missing_key(w):
    p = {"w": w}
    return np.sum(p["b"])


def _runtime_key(w):
    p = {"w": w}
    k = "w" if w[0] > 0 else "v"
    return np.sum(p[k])


def _method(w):
    p = {"w": w}
    t = 0.0
    for _, v in p.items():
        t = t + np.sum(v)
    return t


def _to_numpy(w):
    p = {"w": w}
    return np.sum(np.asarray(p))


@pytest.mark.parametrize("f,message", [
    (_missing_key, "the dict has no key 'b' here (its keys: 'w')"),
    (_runtime_key, "read with constant string keys"),
    (_method, "p.items: a dict built in the function has no methods"),
    (_to_numpy, "a dict built in the function cannot be passed to")])
def test_unsupported_uses_name_the_line(f, message):
    with pytest.raises(UnsupportedSyntaxError, match=re.escape(message)) as info:
        ad.grad(f)(W)
    assert "test_local_dicts.py" in str(info.value)


# ---------------------------------------------------------------- dicts returned by calls
def _layer(x, w):
    h = np.tanh(x @ w)
    return {"out": h, "energy": np.sum(h * h)}


def _built_up(x, w):
    state = {}
    state["pre"] = x @ w
    if np.sum(x) > 0:
        state["act"] = np.tanh(state["pre"])
    else:
        state["act"] = np.sin(state["pre"])
    return state


def returned_display(w, x):
    r = _layer(x, w)
    return np.sum(r["out"] ** 2) + 0.5 * r["energy"]


def returned_built(w, x):
    s = _built_up(x, w)
    return np.sum(s["act"] * s["pre"])


def read_at_once(w, x):
    return np.sum(_layer(x, w)["out"])


def chained(w, x):
    first = _layer(x, w)
    second = _layer(first["out"], w[:2])
    return second["energy"] + first["energy"]


def in_a_loop(w, x):
    total = 0.0
    for i in range(x.shape[0]):
        r = _layer(x[i:i + 1], w)
        total = total + r["energy"]
    return total


def returned_as_aux(w, x):
    r = _layer(x, w)
    return r["energy"], r


WM = np.array([[0.3, -0.2], [0.5, 0.1], [-0.4, 0.2]])
RETURNED = [(returned_display, (WM, X)), (returned_built, (WM, X)), (returned_built, (WM, -X)),
            (read_at_once, (WM, X)), (chained, (WM, X)), (in_a_loop, (WM, X))]


@pytest.mark.parametrize("f,args", RETURNED, ids=[f"{c[0].__name__}-{k}"
                                                  for k, c in enumerate(RETURNED)])
def test_a_dict_returned_by_a_call_is_read_entry_by_entry(f, args):
    """It was refused ("reading a dict returned by a call is not supported")."""
    ad.check_grads(f, args, modes=("rev", "fwd"), order=1)


@pytest.mark.numba
def test_jit_and_vmap_through_a_returned_dict(quick_llvm):
    for f, args in RETURNED[:3]:
        np.testing.assert_allclose(jit(ad.grad(f))(*args), ad.grad(f)(*args), rtol=1e-12)
    batch = ad.vmap(ad.grad(returned_display), in_axes=(None, 0))(WM, np.stack([X, -X]))
    np.testing.assert_allclose(batch[1], ad.grad(returned_display)(WM, -X), rtol=1e-12)


def test_a_returned_dict_passed_on_as_the_aux_output():
    (value, aux), g = ad.value_and_grad(returned_as_aux, has_aux=True)(WM, X)
    h = np.tanh(X @ WM)
    assert value == pytest.approx(np.sum(h * h))
    assert set(aux) == {"out", "energy"}
    np.testing.assert_allclose(aux["out"], h)
    np.testing.assert_allclose(g, X.T @ (2.0 * h * (1.0 - h * h)), rtol=1e-12)


def written_with_loop_keys(w, b, x):
    p = {"w": w, "b": b}
    for k in ("w", "b"):
        p[k] = p[k] * 2.0
    for k in ("w", "b"):
        p[k] += 1.0
    return np.sum(np.tanh(x @ p["w"] + p["b"]))


def test_entries_written_with_a_loops_constant_key():
    """`for k in ("w", "b"): p[k] = ...` was refused (reads with such a key were accepted)."""
    w, b, x = np.array([0.1, -0.2]), 0.3, np.ones((3, 2))
    ad.check_grads(written_with_loop_keys, (w, b, x), modes=("rev", "fwd"), order=1)
    s = 1.0 - np.tanh(x @ (2.0 * w + 1.0) + 2.0 * b + 1.0) ** 2
    g_w, g_b = ad.grad(written_with_loop_keys, argnums=(0, 1))(w, b, x)
    np.testing.assert_allclose(g_w, 2.0 * x.T @ s, rtol=1e-12)
    assert g_b == pytest.approx(2.0 * np.sum(s))


def _rebuilt_in_a_loop(a, b):
    p = {"a": a, "b": b}
    for _ in range(2):
        p = {"a": p["a"] * p["b"], "b": p["b"] + p["a"]}
    return p["a"]


def _pair_in_a_loop(a, b):
    for _ in range(2):
        a, b = a * b, b + a
    return a


def _swapped_in_a_branch(a, b):
    p = {"a": a, "b": b}
    if a > 0:
        p = {"a": p["b"], "b": p["a"]}
    return p["a"] * 10.0 + p["b"]


def _descend(params, x):
    p = params
    for _ in range(3):
        g = ad.grad(_quadratic)(p, x)
        p = {"w": p["w"] - 0.1 * g["w"], "c": p["c"] - 0.1 * g["c"]}
    return _quadratic(p, x)


def _quadratic(p, x):
    return np.sum((p["w"] * x - p["c"]) ** 2) + np.sum(p["w"] ** 2)


def test_a_dict_rebuilt_from_itself_in_a_loop_or_branch():
    """The display's entries were written one after another, each reading the entries the
    ones before it had just rebound (the value 0.0156 for 0.03, a swap made both entries
    one value); every value is read first now. A dict argument rebuilt in a training loop
    was read as the argument by every step."""
    a, b = 0.3, 0.2
    assert _rebuilt_in_a_loop(a, b) == pytest.approx(0.03)
    assert jit(_rebuilt_in_a_loop)(a, b) == pytest.approx(0.03, rel=1e-14)
    expected = ad.grad(_pair_in_a_loop, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(expected, [0.16, 0.21], rtol=1e-12)
    np.testing.assert_allclose(ad.grad(_rebuilt_in_a_loop, argnums=(0, 1))(a, b), expected,
                               rtol=1e-14)
    assert ad.jvp(_rebuilt_in_a_loop, (a, b), (1.0, 0.0))[1] == pytest.approx(0.16, rel=1e-12)
    assert jit(_swapped_in_a_branch)(a, b) == pytest.approx(2.3, rel=1e-14)
    np.testing.assert_allclose(ad.grad(_swapped_in_a_branch, argnums=(0, 1))(a, b), [1.0, 10.0])
    params = {"w": np.array([0.5, -0.3, 0.8]), "c": np.array([0.1, 0.2, -0.4])}
    x = np.array([1.0, 2.0, -1.5])
    grads = ad.grad(_descend)(params, x)
    for key in params:
        numeric = np.zeros(3)
        for i in range(3):
            up = {k: v.copy() for k, v in params.items()}
            down = {k: v.copy() for k, v in params.items()}
            up[key][i] += 1e-6
            down[key][i] -= 1e-6
            numeric[i] = (_descend(up, x) - _descend(down, x)) / 2e-6
        np.testing.assert_allclose(grads[key], numeric, rtol=1e-6, atol=1e-9)


def _stats(w):
    return {"s": np.sum(w * w), "v": np.sin(w) * 3.0}


def test_linearize_of_a_function_returning_a_dict():
    """linearize refused a dict output; its output and tangents are dicts now (as jvp's)."""
    w = np.array([0.3, -0.7, 1.1])
    v = np.array([1.0, 2.0, -1.0])
    out, f_jvp = ad.linearize(_stats, w)
    tangent = f_jvp(v)
    assert type(out) is dict and type(tangent) is dict and sorted(tangent) == ["s", "v"]
    assert tangent["s"] == pytest.approx(np.sum(2.0 * w * v), rel=1e-14)
    np.testing.assert_allclose(tangent["v"], 3.0 * np.cos(w) * v, rtol=1e-14)
    np.testing.assert_allclose(out["v"], 3.0 * np.sin(w), rtol=1e-14)


def test_a_dict_output_inside_transformed_code_is_refused_not_returned_as_a_tuple():
    """jit of a linearized map (jvp inside the code jit compiles) of a function returning a
    dict returned the dict's values as a tuple; it is refused at the line until the call's
    tuple can be read as the dict."""
    w = np.array([0.3, -0.7, 1.1])
    _, f_jvp = ad.linearize(_stats, w)
    with pytest.raises(UnsupportedSyntaxError, match="jvp of a function returning a dict"):
        jit(f_jvp)(np.ones(3))


def _dict_by_condition(x):
    d = {"a": x, "b": 2.0} if x[0] > 0 else {"a": x * 2, "b": 3.0}
    return np.sum(d["a"] ** 2) * d["b"]


def test_dict_chosen_by_a_conditional_expression():
    # read as the if statement it means (was refused: "reading a dict returned by a call")
    x = np.array([0.3, 1.2, 0.7])
    np.testing.assert_allclose(ad.grad(_dict_by_condition)(x), 4.0 * x)
    np.testing.assert_allclose(ad.grad(_dict_by_condition)(-x), 24.0 * -x)
    for point in (x, -x):
        ad.check_grads(_dict_by_condition, (point,), modes=("rev", "fwd"), order=1)
