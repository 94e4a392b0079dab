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
