"""Stencil adjoints in gather form (autodiff_ast/gather_form.py).

Two kinds of check. At the loop level, a scatter loop and its rewrite run in plain Python on
the same random arrays for many lengths (zero trips, one trip, the edges meeting) and must give
the same arrays to the last bit. At the gradient level, stencil programs are differentiated
(NumPy source and jit) and compared with central finite differences, and the generated source
is read: gather form where the conditions hold, scatter form where they do not.
"""

from __future__ import annotations

import ast

import gast
import numpy as np
import pytest
from test_loop_adjoints import heat  # the 1-D heat equation, per-element updates

import autodiff_ast as ad
from autodiff_ast import check_grads
from autodiff_ast.gather_form import gather_loop
from autodiff_ast.naming import Namer
from autodiff_ast.templates import unparse

# ---------------------------------------------------------------- loop level: same bits
LOOPS = {
    "three point": """
for i in range(1, n - 1):
    g = y_bar[i]
    y_bar[i] = 0.0
    s = s + g * w[i]
    x_bar[i + 1] += g * c
    x_bar[i - 1] += g * c
    x_bar[i] += -(g * c) * 2.0 + g
""",
    "one sided, wide": """
for i in range(n - 3):
    g = y_bar[i] * w[i + 3]
    x_bar[i] += g
    x_bar[i + 3] += g * w[i]
    z_bar[i + 1] += np.exp(w[i + 1]) * g
""",
    "descending": """
for i in range(n - 2, 0, -1):
    g = y_bar[i]
    h = g * w[i - 1]
    x_bar[i - 1] += h * w[i + 1]
    x_bar[i + 1] += h * w[i - 1]
""",
    "rows of a matrix": """
for i in range(1, n):
    x_bar[i - 1, :] += y_bar[i] * c
    x_bar[i, :] += y_bar[i] * w[i]
""",
    "index in the second position": """
for i in range(2, n):
    x_bar[1, i] += y_bar[i]
    x_bar[1, i - 2] += 2.0 * y_bar[i]
    x_bar[0, i - 1] += y_bar[i] * 0.5
""",
    "index used as a value": """
for i in range(1, n - 1):
    x_bar[i - 1] += y_bar[i] * i
    x_bar[i + 1] += y_bar[i] * (i + 1)
""",
}


def _arrays(n, seed):
    rng = np.random.default_rng(seed)
    return {"n": n, "c": 0.3, "s": 0.0, "w": rng.standard_normal(max(n, 1) + 3),
            "y_bar": rng.standard_normal(max(n, 1) + 3),
            "x_bar": rng.standard_normal(max(n, 1) + 3),
            "z_bar": rng.standard_normal(max(n, 1) + 3), "np": np}


def _copied(env):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in env.items()}


def _run(stmts, env):
    module = gast.Module(body=stmts, type_ignores=[])
    code = compile(ast.fix_missing_locations(gast.gast_to_ast(module)), "<loop>", "exec")
    exec(code, env)
    return env


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_rewrite_gives_the_same_bits_for_every_length(name):
    text = LOOPS[name]
    loop = gast.parse(text).body[0]
    rewritten = gather_loop(loop, Namer({"i", "g", "h", "n", "s", "c", "w", "np", "x_bar",
                                         "y_bar", "z_bar"}))
    assert rewritten is not None, name
    assert len(rewritten) == 2
    for n in range(0, 9):
        env = _arrays(n, seed=n)
        if "matrix" in name or "second position" in name:
            rng = np.random.default_rng(n)
            env["x_bar"] = rng.standard_normal((max(n, 2) + 3, 3)) if "matrix" in name else \
                rng.standard_normal((2, max(n, 1) + 3))
        expected = _run([gast.parse(text).body[0]], _copied(env))
        got = _run(rewritten, _copied(env))
        for key in ("x_bar", "y_bar", "z_bar", "s"):
            np.testing.assert_array_equal(got[key], expected[key], err_msg=f"{name}, n={n}")


def test_the_rewrite_reads_as_a_gather():
    loop = gast.parse(LOOPS["three point"]).body[0]
    namer = Namer({"i", "g", "n", "s", "c", "w", "x_bar", "y_bar"})
    text = "\n".join(unparse(s) for s in gather_loop(loop, namer))
    assert text.startswith("for j in range(0, n):\n    x_bar_j = x_bar[j]\n    if j >= 2:"), text
    assert "if j >= 1 and j < n - 1:" in text and "if j < n - 2:" in text, text
    assert text.count("x_bar_j += ") == 3 and "x_bar[i" not in text, text
    assert text.count("x_bar[j]") == 2 and "    x_bar[j] = x_bar_j\n" in text, text
    # the rest of the body stays, in its order, in the original loop (now after the gather)
    assert text.endswith("for i in range(1, n - 1):\n    g = y_bar[i]\n    y_bar[i] = 0.0\n"
                         "    s = s + g * w[i]"), text


REFUSED = {
    "one offset only": """
for i in range(1, n):
    x_bar[i - 1] += y_bar[i]
    x_bar[i - 1] += 2.0 * y_bar[i]
""",
    "target also read": """
for i in range(1, n - 1):
    x_bar[i - 1] += x_bar[i] * c
    x_bar[i + 1] += y_bar[i]
""",
    "value read after a write at the same index": """
for i in range(1, n - 1):
    y_bar[i] = 0.0
    x_bar[i - 1] += y_bar[i]
    x_bar[i + 1] += y_bar[i]
""",
    "value read at another index of an array the loop writes": """
for i in range(1, n - 1):
    x_bar[i - 1] += y_bar[i + 1]
    x_bar[i + 1] += y_bar[i]
    y_bar[i] = 0.0
""",
    "carried value": """
for i in range(1, n - 1):
    x_bar[i - 1] += g
    x_bar[i + 1] += g
    g = y_bar[i]
""",
    "a call with effects": """
for i in range(1, n - 1):
    g = helper(y_bar, i)
    x_bar[i - 1] += g
    x_bar[i + 1] += g
""",
    "step of two": """
for i in range(1, n - 1, 2):
    x_bar[i - 1] += y_bar[i]
    x_bar[i + 1] += y_bar[i]
""",
    "control flow in the body": """
for i in range(1, n - 1):
    if y_bar[i] > 0.0:
        x_bar[i - 1] += y_bar[i]
    x_bar[i + 1] += y_bar[i]
""",
    "bound changed in the body": """
for i in range(1, n - 1):
    x_bar[i - 1] += y_bar[i]
    x_bar[i + 1] += y_bar[i]
    n = n + 0
""",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_loops_outside_the_conditions_are_left_alone(name):
    loop = gast.parse(REFUSED[name]).body[0]
    assert gather_loop(loop, Namer({"i", "g", "n", "c", "x_bar", "y_bar", "helper"})) is None


# ---------------------------------------------------------------- gradients
def nonlinear(u0, c, steps):
    u = u0.copy()
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * np.tanh(u[i - 1] * u[i + 1]) - 0.1 * u[i] ** 2
        u = un
    return np.sum(np.sin(u))


def one_sided(x, w):
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n - 2):
        y[i] = w * x[i] * x[i + 2] + x[i + 1]
    return np.sum(y * y)


def rows_stencil(x):
    m = x.shape[0]
    n = x.shape[1]
    out = np.zeros((m, n))
    for r in range(m):
        for i in range(1, n - 1):
            out[r, i] = x[r, i - 1] * x[r, i + 1] - x[r, i]
    return np.sum(out * out)


def descending(x):
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n - 2, 0, -1):
        y[i] = np.exp(x[i - 1]) * x[i + 1]
    return np.sum(y)


def vector_rows(x):
    n = x.shape[0]
    y = np.zeros_like(x)
    for i in range(1, n):
        y[i] = x[i - 1] * 2.0 + x[i] * x[i]
    return np.sum(y * y)


PROGRAMS = {
    "heat": (heat, lambda n: (np.sin(np.linspace(0.0, 3.0, n)), 0.2, 3), (0, 1)),
    "nonlinear": (nonlinear, lambda n: (np.cos(np.linspace(0.0, 2.0, n)), 0.3, 2), (0, 1)),
    "one_sided": (one_sided, lambda n: (np.linspace(-1.0, 1.0, n), 0.7), (0, 1)),
    "rows_stencil": (rows_stencil, lambda n: (np.outer(np.arange(1.0, 3.0),
                                                       np.linspace(0.2, 1.0, n)),), (0,)),
    "descending": (descending, lambda n: (np.linspace(-0.5, 0.5, n),), (0,)),
    "vector_rows": (vector_rows, lambda n: (np.outer(np.linspace(0.1, 1.0, n),
                                                     np.array([1.0, -2.0])),), (0,)),
}


@pytest.mark.parametrize("n", [1, 2, 3, 4, 9])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_stencil_gradients_match_finite_differences(name, n):
    f, make, argnums = PROGRAMS[name]
    check_grads(f, make(n), modes=("rev", "fwd"))


@pytest.mark.parametrize("name", ["heat", "nonlinear", "one_sided", "rows_stencil", "descending",
                                  "vector_rows"])
def test_stencil_adjoints_are_written_in_gather_form(name):
    f, make, argnums = PROGRAMS[name]
    g = ad.grad(f, argnums=argnums)
    g(*make(6))
    backward = g.source.split("_bar = ", 1)[1]
    assert "for j in range(" in backward, g.source
    assert "_j += " in backward, g.source  # terms added into a local, stored back once
    assert "[j] = " in backward or ", j] = " in backward, g.source
    for k in (1, 2):
        assert f"[i + {k}] +=" not in backward and f"[i - {k}] +=" not in backward, g.source


@pytest.mark.parametrize("n", [2, 3, 40])
@pytest.mark.parametrize("name", ["heat", "nonlinear", "rows_stencil", "descending"])
def test_jit_gradients_equal_the_numpy_source(name, n):
    from autodiff_ast.jit import jit
    f, make, argnums = PROGRAMS[name]
    args = make(n)
    plain = ad.grad(f, argnums=argnums)(*args)
    compiled = jit(ad.grad(f, argnums=argnums))(*args)
    for a, b in zip(plain if isinstance(plain, tuple) else (plain,),
                    compiled if isinstance(compiled, tuple) else (compiled,)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_second_order_through_a_gathered_stencil():
    f, make, _ = PROGRAMS["heat"]
    u0, c, steps = make(5)
    check_grads(lambda u: f(u, c, steps), (u0,), order=2, modes=("rev", "fwd"))
