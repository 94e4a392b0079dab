"""What keeps jit's compiles short and its whole-array code fast (issue #6).

- helpers that only compiled code calls are compiled without the CPython and C-callback
  wrappers (the entries keep theirs: Python calls them);
- a helper's backward function gets a float cotangent where tidying would have left an int
  (``n * f(x)`` seeds ``f_bwd`` with ``-n``), so one compiled signature serves every call;
- in a module without loops (whole-array code), ``np.sum(x)`` over every element becomes
  ``reassociated_sum(x)``, compiled with ``fastmath={'reassoc'}`` (partial sums in SIMD lanes);
  modules with loops keep ``np.sum``.

Each compiled check compares with an independent reference (a hand-written gradient or
central finite differences through ``check_grads``).
"""

from __future__ import annotations

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast.jit import jit
from codegen import dialect
from codegen.helpers import DIALECT_HELPERS, DIALECT_JIT_OPTIONS
from codegen.numba_cpu import NumbaOptions


def linreg_loss(w, b, x, y):
    r = w * x + b - y
    return np.sum(r * r) / x.shape[0]


def lse(v):
    m = np.max(v)
    return np.log(np.sum(np.exp(v - m))) + m


def scaled_lse(v):
    n = v.shape[0]
    return 0.5 * lse(v) - n * lse(2.0 * v)


# ---------------------------------------------------------------- no Numba
def test_internal_decorator_drops_the_wrappers():
    options = NumbaOptions(contract=False)
    assert options.decorator("f") == "numba.njit(cache=True, error_model='numpy')"
    internal = options.decorator("add_at", internal=True)
    assert internal.endswith("no_cpython_wrapper=True, no_cfunc_wrapper=True)")
    fast = options.decorator("reassociated_sum", internal=True,
                             extra=DIALECT_JIT_OPTIONS["reassociated_sum"])
    assert "fastmath={'reassoc'}" in fast
    # contraction (the default) joins a helper's own flags
    assert NumbaOptions(contract=True).decorator("f") == \
        "numba.njit(cache=True, fastmath={'contract'}, error_model='numpy')"
    assert "fastmath={'contract', 'reassoc'}" in NumbaOptions(contract=True).decorator(
        "reassociated_sum", extra=DIALECT_JIT_OPTIONS["reassociated_sum"])
    # a module compiled with fastmath=True keeps its own flag, not the helper's narrower one
    both = NumbaOptions(fastmath=True).decorator("reassociated_sum", extra="fastmath=x")
    assert "fastmath=True" in both and "fastmath=x" not in both


def test_whole_array_sum_is_reassociated_only_without_loops():
    straight = "import numpy as np\n\n\ndef g(x):\n    return np.sum(x * x) + np.sum(x, axis=0)\n"
    lowered = dialect.lower_source(straight, entries=["g"])
    text = dialect.render(lowered)
    assert "reassociated_sum(x * x)" in text and "np.sum(x, axis=0)" in text
    looped = ("import numpy as np\n\n\ndef g(x):\n    s = 0.0\n    for i in range(3):\n"
              "        s = s + np.sum(x * i)\n    return s\n")
    text = dialect.render(dialect.lower_source(looped, entries=["g"]))
    assert "reassociated_sum" not in text and "np.sum(x * i)" in text
    # the helper is plain NumPy: the lowered module runs without Numba too
    namespace = {"np": np}
    exec(DIALECT_HELPERS["reassociated_sum"], namespace)
    x = np.arange(10.0).reshape(2, 5)
    assert namespace["reassociated_sum"](x) == np.sum(x)


def test_int_cotangent_of_a_helper_is_made_float():
    g = ad.grad(scaled_lse)
    v = np.linspace(-1.2, 2.0, 10)  # longer than jit's SMALL_AXIS: not kept as scalars
    g(v)
    source = g.source
    assert "float(-n)" in source
    ad.check_grads(scaled_lse, (v,), modes=("rev",))


# ---------------------------------------------------------------- compiled
@pytest.fixture(scope="module")
def compiled():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1001)  # not a multiple of the SIMD width: the tail is summed too
    y = 3.0 * x - 1.0 + 0.1 * rng.standard_normal(1001)
    lin = jit(ad.grad(linreg_loss, argnums=(0, 1)))
    lse_grad = jit(ad.grad(scaled_lse))
    v = np.linspace(-1.2, 2.0, 10)  # longer than jit's SMALL_AXIS: not kept as scalars
    return {"lin": lin, "lin_args": (0.5, 0.2, x, y), "lin_value": lin(0.5, 0.2, x, y),
            "lse": lse_grad, "v": v, "lse_value": lse_grad(v)}


@pytest.mark.numba
def test_reassociated_sum_matches_the_hand_written_gradient(compiled):
    w, b, x, y = compiled["lin_args"]
    r = w * x + b - y
    expected = (2.0 * np.dot(r, x) / x.shape[0], 2.0 * np.sum(r) / x.shape[0])
    np.testing.assert_allclose(compiled["lin_value"], expected, rtol=1e-12)
    source = compiled["lin"].source
    assert "'reassoc'}" in source and "reassociated_sum(r_bar)" in source
    # the entry keeps its wrapper (Python calls it), the helper has none
    assert f"@{NumbaOptions().decorator()}\ndef grad_linreg_loss(" in source


@pytest.mark.numba
def test_helper_backward_compiles_once_for_int_and_float_cotangents(compiled):
    v = compiled["v"]
    reference = ad.grad(scaled_lse)(v)  # plain NumPy source (itself checked above)
    np.testing.assert_allclose(compiled["lse_value"], reference, rtol=1e-12)
    module = compiled["lse"]._last[1]
    assert "float(-n)" in compiled["lse"].source
    backward = [name for name in module.compiled_names() if name.endswith("_bwd")]
    assert backward  # lse_bwd, called with the cotangents 0.5 and float(-n)
    for name in backward:  # (none listed when the caller came from Numba's disk cache)
        signatures = getattr(module.module, name).signatures
        assert len(signatures) <= 1, (name, signatures)


def test_reserve_steps_copies_without_numpys_slice_machinery():
    """The loop stacks' helper (autodiff_ast/reverse.py, _stack_plan) grows its matrix (a row
    per value, a column per step) with an element loop: a slice assignment made Numba
    compile its shape-mismatch message, 3 s of the ADBench GMM gradient's cold start. It
    keeps every column and grows geometrically."""
    import numba
    from numba.core import event

    from codegen.helpers import HELPERS
    space = {"np": np}
    exec(HELPERS["reserve_steps"], space)
    compiled = numba.njit(space["reserve_steps"])
    stack = np.arange(6.0).reshape(2, 3)
    with event.install_recorder("numba:compile") as recorded:
        grown = compiled(stack, 4)
    names = " ".join(str(e.data.get("dispatcher", "")) for _, e in recorded.buffer)
    assert "shape_context" not in names, names
    assert grown.shape == (2, 6)
    np.testing.assert_array_equal(grown[:, :3], stack)
    assert compiled(grown, 5) is grown
    assert compiled(np.empty((2, 0)), 3).shape == (2, 3)
