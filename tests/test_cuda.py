"""jit(..., target='cuda'): kernels run in Numba's CUDA simulator (conftest sets
NUMBA_ENABLE_CUDASIM=1) and are type-checked by compiling them to PTX in a process without the
simulator. References: per-example grad on the CPU, central finite differences."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autodiff_ast import grad, jvp, vmap
from autodiff_ast.device import DeviceCodeError
from autodiff_ast.jit import jit

sys.path.insert(0, str(Path(__file__).parent))
from cuda_programs import halving, heat, mlp, rnn, uses_cumsum  # noqa: E402

HERE = Path(__file__).parent


def central(f, x, eps=1e-6):
    """Central finite differences of scalar f at array (or scalar) x."""
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return {"w": rng.uniform(0.2, 0.9, 6), "x": rng.normal(size=(6, 8)),
            "u": rng.random((5, 12)), "W": rng.normal(size=(3, 4)), "b": rng.normal(size=3),
            "xs": rng.normal(size=(5, 4))}


@pytest.fixture(scope="module")
def rnn_kernel():
    return jit(vmap(grad(rnn)), target="cuda")


def test_rnn_per_example_gradients(rnn_kernel, data):
    out = rnn_kernel(data["w"], data["x"])
    per_example = np.array([grad(rnn)(w, x) for w, x in zip(data["w"], data["x"])])
    np.testing.assert_allclose(out, per_example, rtol=1e-12)
    fd = np.array([central(lambda w, x=x: rnn(w, x), w) for w, x in zip(data["w"], data["x"])])
    np.testing.assert_allclose(out, fd, rtol=1e-6, atol=1e-8)


def test_rnn_matches_cpu_vmap(rnn_kernel, data):
    np.testing.assert_allclose(rnn_kernel(data["w"], data["x"]),
                               vmap(grad(rnn))(data["w"], data["x"]), rtol=1e-12)


def test_heat_per_example_gradients(data):
    kernel = jit(vmap(grad(heat), in_axes=(0, None)), target="cuda")
    out = kernel(data["u"], 0.1)
    assert out.shape == data["u"].shape
    fd = np.stack([central(lambda u: heat(u, 0.1), u) for u in data["u"]])
    np.testing.assert_allclose(out, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(out, np.stack([grad(heat)(u, 0.1) for u in data["u"]]),
                               rtol=1e-12)


def test_heat_matches_cpu_vmap(data):
    kernel = jit(vmap(grad(heat), in_axes=(0, None)), target="cuda")
    np.testing.assert_allclose(kernel(data["u"], 0.1),
                               vmap(grad(heat), in_axes=(0, None))(data["u"], 0.1), rtol=1e-12)


def test_primal_and_jvp_kernels(data):
    w, x = data["w"], data["x"]
    np.testing.assert_allclose(jit(vmap(rnn), target="cuda")(w, x),
                               [rnn(a, b) for a, b in zip(w, x)], rtol=1e-12)

    def tangent(w, x, w_dot):
        return jvp(rnn, (w, x), (w_dot, np.zeros_like(x)))

    out, out_dot = jit(vmap(tangent), target="cuda")(w, x, np.ones_like(w))
    np.testing.assert_allclose(out, [rnn(a, b) for a, b in zip(w, x)], rtol=1e-12)
    np.testing.assert_allclose(out_dot, [central(lambda v, b=b: rnn(v, b), a) for a, b in
                                         zip(w, x)], rtol=1e-6)


def test_reduce_sum_uses_atomics(data):
    W, b, xs = data["W"], data["b"], data["xs"]
    kernel = jit(vmap(grad(mlp, argnums=(0, 1)), in_axes=(None, None, 0)), target="cuda",
                 reduce="sum")
    gW, gb = kernel(W, b, xs)
    assert "cuda.atomic.add" in kernel.source
    total = lambda W_, b_: sum(mlp(W_, b_, x) for x in xs)  # noqa: E731
    np.testing.assert_allclose(gW, central(lambda W_: total(W_, b), W), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, central(lambda b_: total(W, b_), b), rtol=1e-6, atol=1e-8)


def test_device_arrays_stay_on_device(data):
    from numba import cuda
    kernel = jit(vmap(grad(mlp), in_axes=(None, None, 0)), target="cuda")
    on_device = kernel(cuda.to_device(data["W"]), cuda.to_device(data["b"]),
                       cuda.to_device(data["xs"]))
    assert not isinstance(on_device, np.ndarray)
    np.testing.assert_allclose(on_device.copy_to_host(),
                               kernel(data["W"], data["b"], data["xs"]), rtol=1e-15)


def test_single_thread_and_source(data):
    f = jit(grad(heat), target="cuda")
    u = data["u"][0]
    np.testing.assert_allclose(f(u, 0.1), grad(heat)(u, 0.1), rtol=1e-12)
    text = f.source
    assert "cuda.local.array((12,), float64)" in text and "@cuda.jit" in text
    device_code = text.split('"""', 2)[2]
    assert "np." not in device_code.replace("# ", "#").split("#")[0]
    from autodiff_ast.cuda import kernel_source
    assert kernel_source(vmap(grad(rnn)), data["w"], data["x"]).count("math.tanh") == 1


def test_tape_size_option():
    xs = np.array([0.5, 1.5, 3.0])
    with pytest.raises(DeviceCodeError, match="tape_size"):
        jit(vmap(grad(halving)), target="cuda")(xs)
    out = jit(vmap(grad(halving)), target="cuda", tape_size=16)(xs)
    np.testing.assert_allclose(out, [central(halving, x) for x in xs], rtol=1e-6)


def test_error_names_the_line():
    first = uses_cumsum.__code__.co_firstlineno
    for f in (vmap(uses_cumsum), vmap(grad(uses_cumsum))):
        with pytest.raises(DeviceCodeError) as info:
            jit(f, target="cuda")(np.ones((3, 4)))
        err = info.value
        assert err.filename.endswith("cuda_programs.py") and err.lineno == first + 1
        assert "np.cumsum" in err.code and "cannot become CUDA device code" in err.message


def assert_ptx_compiles(module, function, marker="'.entry' in ptx"):
    """`module.function()`'s PTX texts (one per kernel) compiled in a new process by Numba's
    CUDA compiler, with no simulator and no driver, each satisfying `marker`."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
            f"from {module} import {function}\n"
            f"for ptx in {function}():\n"
            f"    assert {marker}, ptx[:200]\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_ptx_compiles_without_a_gpu():
    """The kernels type-check with Numba's CUDA compiler (no simulator, no driver)."""
    assert_ptx_compiles("cuda_programs", "ptx_of_kernels",
                        "'.entry' in ptx and '.target sm_80' in ptx")
