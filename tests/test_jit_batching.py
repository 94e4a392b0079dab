"""jit(vmap(f), batching=...): the prange loop over a compiled per-example function
(autodiff_ast/batch_loop.py) against the vectorized module, NumPy and finite differences.

Numba compiles are slow, so the compiled functions are built once per module (fixtures) and at
LLVM -O0 (the numbers are the same; only the speed differs). At -O0 Numba does not cache a
parallel function ("dynamic globals"): that warning is ignored here, and a test in new
processes at the default level checks the driver is cached.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_api import numeric_grad as central_differences

import autodiff_ast as ad
from autodiff_ast import pytrees
from autodiff_ast.batch_loop import _BlasLimit, choose_strategy, configure_threading
from autodiff_ast.build import Generated
from autodiff_ast.jit import jit
from codegen.numba_cpu import NumbaOptions

pytestmark = [pytest.mark.numba, pytest.mark.filterwarnings(
    "ignore:Cannot cache compiled function:numba.core.errors.NumbaWarning")]


# ---------------------------------------------------------------- functions under test
def conv_loss(w, x):
    y = x[:-2] * w[0] + x[1:-1] * w[1] + x[2:] * w[2]
    return np.sum(y * y)


def mlp_loss(params, x, y):
    h = np.tanh(np.dot(params["W1"], x) + params["b1"])
    out = np.dot(params["W2"], h) + params["b2"]
    return np.sum((out - y) ** 2)


def rnn_loss(w, x):
    s = 0.0
    for t in range(x.shape[0]):
        s = np.tanh(w[0] * s + w[1] * x[t])
    return s * s


def stats(w, x):
    """A tuple of a per-example scalar and a value shared by every example."""
    return np.sum(np.sin(x) * w), w * 2.0


def aux_loss(w, x):
    y = np.tanh(x * w)
    return np.sum(y ** 2), np.max(y)


def numeric_grad(f, x):
    """Central finite differences of scalar f at a float array x."""
    return central_differences(f, (x,))


def assert_trees_close(got, want, rtol=1e-10, atol=1e-12):
    got_leaves, got_def = pytrees.tree_flatten(got)
    want_leaves, want_def = pytrees.tree_flatten(want)
    assert got_def == want_def
    for g, w in zip(got_leaves, want_leaves):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- shared compiled functions
@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    params = {"W1": rng.standard_normal((5, 3)), "b1": rng.standard_normal(5),
              "W2": rng.standard_normal((2, 5)), "b2": rng.standard_normal(2)}
    return {"w": rng.standard_normal(3), "xs": rng.standard_normal((6, 9)),
            "params": params, "mx": rng.standard_normal((6, 3)),
            "my": rng.standard_normal((6, 2)), "rw": np.array([0.7, -0.4]),
            "rx": rng.standard_normal((5, 4)), "sx": rng.standard_normal((3, 4))}


@pytest.fixture(scope="module")
def compiled(quick_llvm, data):
    """Every compiled function the tests share, each called once here."""
    d = data
    out = {}

    def add(key, fn, *args):
        out[key] = (fn, fn(*args))

    conv = ad.vmap(ad.grad(conv_loss), in_axes=(None, 0))
    add("conv_loop", jit(conv, batching="loop"), d["w"], d["xs"])
    add("conv_auto", jit(conv), d["w"], d["xs"])
    add("conv_vectorized", jit(conv, batching="vectorized"), d["w"], d["xs"])
    mlp = ad.vmap(ad.grad(mlp_loss), in_axes=(None, 0, 0))
    add("mlp_loop", jit(mlp, batching="loop"), d["params"], d["mx"], d["my"])
    add("mlp_auto", jit(mlp), d["params"], d["mx"], d["my"])
    add("rnn_auto", jit(ad.vmap(ad.grad(rnn_loss), in_axes=(None, 0))), d["rw"], d["rx"])
    add("axes_loop", jit(ad.vmap(lambda x, s: np.tanh(x) * s, in_axes=(1, None), out_axes=1),
                         batching="loop"), d["sx"], 2.0)
    add("stats_loop", jit(ad.vmap(stats, in_axes=(None, 0), out_axes=(0, None)),
                          batching="loop"), d["w"], d["xs"][:, :3])
    add("aux_loop", jit(ad.vmap(ad.value_and_grad(aux_loss, has_aux=True), in_axes=(None, 0)),
                        batching="loop"), d["w"], d["xs"][:, :3])
    add("parallel_loop", jit(ad.vmap(lambda x: np.sum(x * x)), batching="loop",
                             parallel=True), d["sx"])
    return out


# ---------------------------------------------------------------- per-example gradients
def test_conv_loop_matches_vectorized_and_finite_differences(compiled, data):
    w, xs = data["w"], data["xs"]
    got = compiled["conv_loop"][1]
    np.testing.assert_allclose(got, compiled["conv_vectorized"][1], rtol=1e-12, atol=1e-12)
    want = np.stack([numeric_grad(lambda v, x=x: conv_loss(v, x), w) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_repeated_calls_take_the_fast_path_and_still_check_sizes(compiled, data):
    """A second call with arguments of the same types reuses the last call's plan: right
    results for new values and batch sizes, and mismatched batch sizes are still refused."""
    for key in ("conv_vectorized", "mlp_auto", "axes_loop"):
        assert compiled[key][0].jit_plans, key
    fn = compiled["conv_vectorized"][0]
    w, xs = data["w"] * 2.0, data["xs"][:4] + 1.0
    want = np.stack([numeric_grad(lambda v, x=x: conv_loss(v, x), w) for x in xs])
    np.testing.assert_allclose(fn(w, xs), want, rtol=1e-6, atol=1e-7)
    mlp = compiled["mlp_auto"][0]
    with pytest.raises(ad.BatchingError, match="inconsistent sizes"):
        mlp(data["params"], data["mx"], data["my"][:3])
    assert_trees_close(mlp(data["params"], data["mx"], data["my"]), compiled["mlp_auto"][1])


def test_conv_loop_source_is_a_prange_driver(compiled):
    source = compiled["conv_loop"][0].source
    assert "for b in prange(1, n_batch):" in source
    assert "from numba import prange" in source
    # Only the driver is parallel: the per-example function is a plain njit function.
    driver = NumbaOptions(prange=("vmap_grad_conv_loss",)).decorator("vmap_grad_conv_loss")
    assert f"@{driver}\ndef vmap_grad_conv_loss(w, x):" in source
    example = NumbaOptions().decorator("grad_conv_loss", internal=True)
    assert f"@{example}\ndef grad_conv_loss(w, x):" in source  # the driver calls it
    assert "batching='loop' was asked for" in source


def test_parallel_true_leaves_the_per_example_function_serial(compiled, data):
    fn, got = compiled["parallel_loop"]
    np.testing.assert_allclose(got, np.sum(data["sx"] ** 2, axis=1), rtol=1e-12)
    assert fn.source.count("parallel=True") == 2  # the docstring's note and the driver
    example = NumbaOptions().decorator("lambda_fn", internal=True)
    assert "parallel" not in example and f"@{example}\ndef lambda_fn(x):" in fn.source


def test_auto_takes_the_loop_without_matrix_products(compiled):
    fn, got = compiled["conv_auto"]
    assert "prange(" in fn.source and "no matrix product" in fn.source
    np.testing.assert_allclose(got, compiled["conv_loop"][1], rtol=1e-12)


def test_auto_keeps_the_vectorized_module_for_matrix_products(compiled):
    fn, got = compiled["mlp_auto"]
    assert "prange(" not in fn.source
    assert "jit batching='auto' chose this variant: the per-example code multiplies " \
           "matrices (np.dot, np.outer)." in fn.source
    assert_trees_close(got, compiled["mlp_loop"][1])


def test_mlp_loop_pytree_gradients(compiled, data):
    params, xs, ys = data["params"], data["mx"], data["my"]
    got = compiled["mlp_loop"][1]
    assert sorted(got) == sorted(params)
    for k in params:
        assert got[k].shape == (len(xs),) + params[k].shape
    # Finite differences of one parameter for every example.
    for i, (x, y) in enumerate(zip(xs, ys)):
        def along_b1(b1, x=x, y=y):
            return mlp_loss(dict(params, b1=b1), x, y)
        np.testing.assert_allclose(got["b1"][i], numeric_grad(along_b1, params["b1"]),
                                   rtol=1e-6, atol=1e-7)
    # Every parameter against the uncompiled per-example gradient.
    one = ad.grad(mlp_loss)
    for i, (x, y) in enumerate(zip(xs, ys)):
        want = one(params, x, y)
        for k in params:
            np.testing.assert_allclose(got[k][i], want[k], rtol=1e-10, atol=1e-12)


def test_loop_in_per_example_code_chooses_the_loop(compiled, data):
    fn, got = compiled["rnn_auto"]
    assert "because the per-example code has a loop" in fn.source
    w = data["rw"]
    want = np.stack([numeric_grad(lambda v, x=x: rnn_loss(v, x), w) for x in data["rx"]])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


def test_check_grads_on_the_per_example_function(data):
    """The function each example runs: its gradient agrees with finite differences."""
    ad.check_grads(lambda w: conv_loss(w, data["xs"][0]), (data["w"],), modes=("rev",))


# ---------------------------------------------------------------- axes and outputs
def test_in_axes_one_and_out_axes_one(compiled, data):
    fn, got = compiled["axes_loop"]
    np.testing.assert_allclose(got, np.tanh(data["sx"]) * 2.0, rtol=1e-12)
    assert "np.ascontiguousarray(np.moveaxis(x, 1, 0))" in fn.source
    assert "np.moveaxis(" in fn.source.split("return")[-1]


def test_tuple_output_with_an_unmapped_part(compiled, data):
    fn, (sums, doubled) = compiled["stats_loop"]
    w, xs = data["w"], data["xs"][:, :3]
    np.testing.assert_allclose(sums, np.sum(np.sin(xs) * w, axis=1), rtol=1e-12)
    np.testing.assert_allclose(doubled, w * 2.0, rtol=1e-12)
    assert doubled.shape == w.shape  # out_axes None: one value, not one per example


def test_value_and_grad_with_aux(compiled, data):
    (value, aux), grads = compiled["aux_loop"][1]
    w, xs = data["w"], data["xs"][:, :3]
    want = ad.vmap(ad.value_and_grad(aux_loss, has_aux=True), in_axes=(None, 0))(w, xs)
    assert_trees_close(((value, aux), grads), want)
    fd = np.stack([numeric_grad(lambda v, x=x: aux_loss(v, x)[0], w) for x in xs])
    np.testing.assert_allclose(grads, fd, rtol=1e-6, atol=1e-8)


def test_python_target_runs_the_same_module(data):
    """target='python' runs the loop module without Numba (prange is range there)."""
    fn = jit(ad.vmap(lambda x, s: np.tanh(x) * s, in_axes=(1, None), out_axes=1),
             target="python", batching="loop")
    got = fn(data["sx"], 2.0)
    np.testing.assert_allclose(got, np.tanh(data["sx"]) * 2.0, rtol=1e-12)
    assert "for b in prange(1, n_batch):" in fn.source
    assert "@numba" not in fn.source


def test_mapped_scalars_and_scalar_outputs():
    fn = jit(ad.vmap(lambda a, b: a * b + 1.0), target="python", batching="loop")
    got = fn(np.arange(4.0), np.ones(4) * 3.0)
    np.testing.assert_allclose(got, np.arange(4.0) * 3.0 + 1.0)
    assert "np.empty(n_batch, dtype=np.float64)" in fn.source


def test_only_unmapped_outputs_need_no_loop():
    fn = jit(ad.vmap(lambda w, x: w * 2.0, in_axes=(None, 0), out_axes=None),
             target="python", batching="loop")
    np.testing.assert_allclose(fn(np.ones(2), np.ones((3, 2))), [2.0, 2.0])
    assert "prange(" not in fn.source.split("def vmap_")[-1]


def test_an_empty_batch_uses_the_vectorized_module():
    fn = jit(ad.vmap(lambda x: x * 2.0), target="python", batching="loop")
    assert fn(np.zeros((0, 3))).shape == (0, 3)


def test_loop_and_vectorized_agree_on_pytree_arguments_and_nested_tuples():
    def f(p, x):
        pair = (np.sum(x * p["v"]), x[0])
        return p["u"] * x, pair
    p = {"u": np.array([1.0, 2.0]), "v": np.arange(6.0).reshape(3, 2) - 2.0}
    xs = np.arange(6.0).reshape(3, 2)
    axes = ({"u": None, "v": 0}, 0)
    loop = jit(ad.vmap(f, in_axes=axes), target="python", batching="loop")
    got = loop(p, xs)
    assert_trees_close(got, ad.vmap(f, in_axes=axes)(p, xs))
    np.testing.assert_allclose(got[1][0], np.sum(xs * p["v"], axis=1))


# ---------------------------------------------------------------- the module text
def test_source_is_deterministic():
    def make():
        fn = jit(ad.vmap(ad.grad(conv_loss), in_axes=(None, 0)), target="python",
                 batching="loop")
        fn(np.ones(3), np.ones((2, 6)))
        return fn.source
    assert make() == make()


def test_unknown_batching_is_refused():
    with pytest.raises(ValueError, match="unknown batching"):
        jit(ad.vmap(conv_loss), batching="threads")


def test_choose_strategy_rules():
    vec = Generated("", "f", layout={"variant": "vectorized"})
    assert choose_strategy("auto", Generated("", "f", layout={"variant": "loop"}), "")[0] == \
        "loop"
    assert choose_strategy("auto", vec, "def f(x):\n    for i in range(3):\n        x = x @ x\n"
                           "    return x\n") == ("loop", "the per-example code has a loop")
    assert choose_strategy("auto", vec, "def f(a, b):\n    return a @ b\n")[0] == "vectorized"
    assert choose_strategy("vectorized", vec, "def f(x):\n    return x\n")[0] == "vectorized"


# ---------------------------------------------------------------- threads
def test_blas_limit_restores_thread_counts():
    libraries = _BlasLimit.libraries()
    assert libraries  # threadpoolctl (a test dependency, through scikit-learn) sees OpenBLAS
    before = [lib.get_num_threads() for lib in libraries]
    seen = _BlasLimit.call(lambda: [lib.get_num_threads() for lib in libraries], ())
    assert all(n == 1 for n in seen)
    assert [lib.get_num_threads() for lib in libraries] == before


def test_blas_limit_applies_when_examples_call_blas(compiled):
    assert compiled["mlp_loop"][0]._last[0].layout["blas"] is True
    assert compiled["conv_loop"][0]._last[0].layout["blas"] is False


def test_configure_threading_keeps_the_users_choice(monkeypatch):
    import numba
    monkeypatch.setattr(numba.config, "THREADING_LAYER", "omp")
    assert configure_threading() == "omp"
    assert numba.config.THREADING_LAYER == "omp"


_CHILD = textwrap.dedent("""\
    import numba
    import numpy as np
    import autodiff_ast as ad
    from autodiff_ast.jit import jit

    fn = jit(ad.vmap(lambda x: np.sum(x * x)), batching="loop")
    got = fn(np.arange(6.0).reshape(3, 2))
    assert np.allclose(got, [1.0, 13.0, 41.0]), got
    stats = fn._last[1].module.vmap_lambda_fn.stats
    print(numba.threading_layer(), sum(stats.cache_hits.values()),
          sum(stats.cache_misses.values()))
""")


def _child(tmp_path, layer=None):
    """(threading layer, cache hits, cache misses of the driver) in a new process."""
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "modules"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    env.pop("NUMBA_THREADING_LAYER", None)
    if layer:
        env["NUMBA_THREADING_LAYER"] = layer
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    name, hits, misses = done.stdout.split()[-3:]
    return name, int(hits), int(misses)


def test_workqueue_by_default_and_the_driver_is_cached_on_disk(tmp_path):
    assert _child(tmp_path) == ("workqueue", 0, 1)  # compiled, written to the cache
    assert _child(tmp_path) == ("workqueue", 1, 0)  # a new process loads it


def test_the_users_threading_layer_wins(tmp_path):
    assert _child(tmp_path, "omp")[0] == "omp"


# ---------------------------------------------------------------- an empty backward loop
def picked_sum(A, x):
    """The loop's backward step adds nothing into A's adjoint: the gradient's loop is `pass`
    (a fuzzer find: the vectorized batching crashed on normalize's empty-block pass)."""
    r = np.mean(A[:, 2])
    j = 0
    for i in range(x.shape[0]):
        if x[i] > -0.2:
            j = i
        r = r + x[j] * np.tanh(x[i])
    return np.sum(np.sin(A)) + r


def test_a_gradient_with_an_empty_loop_is_batched():
    A = np.arange(6.0).reshape(2, 3) * 0.1
    x = np.array([0.3, -0.5, 0.2])
    batch = np.stack([A, 0.9 * A + 0.05])
    got = jit(ad.vmap(ad.grad(picked_sum), in_axes=(0, None)), batching="vectorized")(batch, x)
    want = np.stack([np.cos(a) + _mean_column(a) for a in batch])  # by hand
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, np.stack([ad.grad(picked_sum)(a, x) for a in batch]),
                               rtol=1e-12)


def _mean_column(a):
    """d mean(A[:, 2]) / dA: 1/rows in column 2."""
    out = np.zeros_like(a)
    out[:, 2] = 1.0 / a.shape[0]
    return out


_CHOLESKY_W = np.arange(9.0).reshape(3, 3) / 9.0


def _cholesky_of_a_gram(x):
    b = x.reshape(3, 2)
    return np.sum(np.linalg.cholesky(np.dot(b, b.T) + 3.0 * np.eye(3)) * _CHOLESKY_W)


def test_auto_batching_takes_the_loop_when_numba_refuses_the_vectorized_module():
    """The vectorized gradient solves stacks of matrices (np.linalg.solve of 3-D arrays),
    which Numba does not compile: under batching='auto' jit(vmap) then compiles the loop
    over examples instead of raising; batching='vectorized' still raises, naming the line."""
    xs = np.random.default_rng(3).standard_normal((4, 6))
    want = np.stack([ad.grad(_cholesky_of_a_gram)(x) for x in xs])
    auto = jit(ad.vmap(ad.grad(_cholesky_of_a_gram)))
    np.testing.assert_allclose(auto(xs), want, rtol=1e-10)
    np.testing.assert_allclose(auto(xs), want, rtol=1e-10)  # (the fast path)
    assert "Numba could not compile the vectorized module" in auto.source
    with pytest.raises(ad.CompileError, match="test_jit_batching.py"):
        jit(ad.vmap(ad.grad(_cholesky_of_a_gram)), batching="vectorized")(xs)


def _positives_doubled(x):
    return x[x > 0] * 2.0


@pytest.mark.parametrize("batching", ["auto", "loop"])
def test_outputs_whose_shape_differs_per_example_are_refused(batching):
    # (the prange driver sized the batch from example 0 and wrote the others into it: a
    # shorter output was broadcast into its row, a longer one read past its end)
    xs = np.array([[1.0, 2.0, 3.0], [-1.0, 5.0, -2.0], [4.0, -1.0, 2.0]])
    with pytest.raises(ValueError, match="has a different shape for different examples"):
        jit(ad.vmap(_positives_doubled), batching=batching)(xs)
    same = np.array([[1.0, -2.0, 3.0], [4.0, -5.0, 6.0]])
    np.testing.assert_array_equal(jit(ad.vmap(_positives_doubled), batching=batching)(same),
                                  [[2.0, 6.0], [8.0, 12.0]])


# ---------------------------------------------------------------- session 43: a collective
def _share_of_batch(x):
    return x / ad.psum(x, "i")


def test_auto_batching_keeps_a_collective_over_the_whole_batch():
    # 'auto' chose the per-example loop (no matrix product), whose examples each ran psum
    # alone: a CompileError naming the user's line, and a wrong answer had it compiled.
    X = np.arange(1.0, 13.0).reshape(4, 3)
    want = X / X.sum(axis=0)
    np.testing.assert_allclose(jit(ad.vmap(_share_of_batch, axis_name="i"))(X), want)
    with pytest.raises(ad.BatchingError, match="cannot run f's collective"):
        jit(ad.vmap(_share_of_batch, axis_name="i"), batching="loop")(X)
