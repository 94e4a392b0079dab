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


def rows_lse(x, w):
    total = 0.0
    for i in range(x.shape[0]):
        terms = np.zeros(w.shape[0])
        for c in range(w.shape[0]):
            terms[c] = w[c] - 0.5 * x[i, c] * x[i, c]
        total = total + lse(terms)
    return total


@pytest.mark.numba
def test_a_loop_stacks_start_compiles_its_helper_once():
    """A loop stack's top starts at 0 and grows; the row it hands an outlined sum loop is a
    copy of it. Written ``top = 0``, Numba first typed the copy Literal[int](0) and compiled
    the helper for it, then again for int64 (ADBench GMM's sum_loop_3); ``int(0)``
    (codegen/int_starts.py) gives one compile. The module is compiled here without Numba's
    disk cache, so its helpers' signatures are those this process compiled."""
    import numba
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((7, 12)), rng.standard_normal(12)
    compiled = jit(ad.grad(rows_lse, argnums=1))
    expected = compiled(x, w)
    eps = 1e-6
    basis = np.eye(w.shape[0])
    central = np.array([(rows_lse(x, w + eps * e) - rows_lse(x, w - eps * e)) / (2 * eps)
                        for e in basis])
    np.testing.assert_allclose(expected, central, rtol=1e-6, atol=1e-8)
    source = compiled.source
    assert "_stack_top = int(0)" in source, source
    namespace = {"__name__": "rows_lse_uncached"}
    exec(compile(source.replace("cache=True", "cache=False"), "<rows_lse>", "exec"), namespace)
    np.testing.assert_allclose(namespace["grad_rows_lse"](x, w), expected, rtol=1e-12)
    helpers = {name: value.signatures for name, value in namespace.items()
               if isinstance(value, numba.core.registry.CPUDispatcher) and
               name.startswith("sum_loop")}
    assert helpers, sorted(namespace)
    for name, signatures in helpers.items():
        assert len(signatures) == 1 and "Literal" not in str(signatures), (name, signatures)
