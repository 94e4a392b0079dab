"""Dicts returned from compiled code: ``return loss, {"acc": acc, "pred": pred}`` (has_aux's
aux output, JAX's usual pattern) and a primal returning a dict. Numba boxes no dict whose values
differ in type, so the compiled entry returns the values as tuples and the call rebuilds the
dicts (codegen/dict_outputs.py); before, these calls failed with a SystemError. Each result is
compared with the uncompiled call's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit


def metrics(x):
    return {"pred": np.sin(x), "loss": np.sum(x * x)}


def loss_and_metrics(x):
    loss = np.sum(np.tanh(x) ** 2)
    return loss, {"pred": np.tanh(x), "loss": loss, "count": 3}


def nested_aux(x, w):
    loss = np.sum(w * x * x)
    inner = {"w": w, "scale": 2.0 * loss}
    return loss, {"inner": inner, "x": x}


X = np.array([0.3, -0.2, 0.5])


def assert_same_tree(got, want):
    assert type(got) is type(want) or (np.ndim(got) == 0 and np.ndim(want) == 0), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_same_tree(got[k], want[k])
    elif isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same_tree(g, w)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_a_primal_returning_a_dict_of_an_array_and_a_number(target):
    assert_same_tree(jit(metrics, target=target)(X), metrics(X))


@pytest.mark.parametrize("make", [
    lambda f: ad.grad(f, has_aux=True),
    lambda f: ad.value_and_grad(f, has_aux=True),
], ids=["grad", "value_and_grad"])
def test_has_aux_dict_of_mixed_values_under_jit(make):
    want = make(loss_and_metrics)(X)
    compiled = jit(make(loss_and_metrics))
    assert_same_tree(compiled(X), want)
    assert_same_tree(compiled(X), want)  # (the second call takes the fast path's plan)
    assert "with the dicts it returns rebuilt" in compiled.source


def test_a_dict_inside_the_aux_dict():
    w = np.array([1.0, 2.0, 0.5])
    want = ad.grad(nested_aux, argnums=(0, 1), has_aux=True)(X, w)
    got = jit(ad.grad(nested_aux, argnums=(0, 1), has_aux=True))(X, w)
    assert_same_tree(got, want)
    assert set(got[1]["inner"]) == {"w", "scale"}


def test_a_new_process_gets_the_dicts_from_the_warm_cache(tmp_path):
    script = tmp_path / "dict_aux.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import autodiff_ast as ad
        from autodiff_ast.jit import jit

        def loss_and_metrics(x):
            loss = np.sum(np.tanh(x) ** 2)
            return loss, {"pred": np.tanh(x), "loss": loss}

        g, aux = jit(ad.grad(loss_and_metrics, has_aux=True))(np.array([0.3, -0.2]))
        print(sorted(aux), type(aux).__name__, round(float(aux["loss"]), 12))
    """))
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "modules"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"),
               AUTODIFF_AST_WARMSTART_LOG=str(tmp_path / "warm.log"))
    outputs = [subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, check=True, timeout=300).stdout for _ in range(2)]
    want = round(float(np.sum(np.tanh([0.3, -0.2]) ** 2)), 12)
    assert outputs[0] == outputs[1] == f"['loss', 'pred'] dict {want}\n"
    assert "hit" in (tmp_path / "warm.log").read_text()  # (the second run loaded the module)
