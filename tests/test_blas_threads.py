"""SciPy's OpenBLAS (the BLAS compiled code calls) and NumPy's are set to let their idle threads
sleep soon (codegen/blas_threads.py), products still compute right after the threads restart,
and the user's own setting wins. What it is for (a NumPy product then a compiled one: 8.0 ms
per pair instead of 0.24 ms on 2 cores) is measured in benchmarks/seed_workloads.py, not
here."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from autodiff_ast import grad
from autodiff_ast.jit import jit
from codegen.blas_threads import (
    TIMEOUT,
    calm_blas_threads,
    numpy_openblas_path,
    scipy_openblas_path,
)

PATH = scipy_openblas_path()
needs_openblas = pytest.mark.skipif(
    PATH is None, reason="SciPy here does not bundle OpenBLAS (system BLAS, MKL, Accelerate): "
                         "calm_blas_threads has nothing to set")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layer_loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


@needs_openblas
def test_compiled_code_sets_the_timeout_and_products_stay_right():
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((40, 30)), rng.standard_normal((50, 40))
    got = jit(grad(layer_loss))(w, x)
    assert calm_blas_threads() is True
    assert ctypes.CDLL(PATH).openblas_thread_timeout() == TIMEOUT
    numpy_path = numpy_openblas_path()
    if numpy_path is not None:  # NumPy's pool polls as briefly (and NumPy's products agree)
        assert ctypes.CDLL(numpy_path).openblas_thread_timeout() == TIMEOUT
    # the threads restarted: compiled products still agree with NumPy's, and with the
    # analytic gradient 2 x^T (tanh(xw) * (1 - tanh(xw)^2))
    t = np.tanh(x @ w)
    np.testing.assert_allclose(got, x.T @ (2.0 * t * (1.0 - t * t)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jit(grad(layer_loss))(w, x), got, rtol=0, atol=0)


def _timeout_in_new_process(**env):
    code = ("import ctypes\n"
            "from codegen.blas_threads import calm_blas_threads, scipy_openblas_path\n"
            "done = calm_blas_threads()\n"
            "print(done, ctypes.CDLL(scipy_openblas_path()).openblas_thread_timeout())\n")
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_THREAD_TIMEOUT", "AUTODIFF_AST_BLAS_TIMEOUT")}
    environ.update(env, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.split()


@needs_openblas
def test_a_new_process_gets_the_timeout():
    assert _timeout_in_new_process() == ["True", str(TIMEOUT)]


@needs_openblas
def test_the_users_own_timeout_is_kept():
    assert _timeout_in_new_process(OPENBLAS_THREAD_TIMEOUT="22") == ["False", "22"]


@needs_openblas
def test_keep_leaves_openblas_as_it_loaded():
    # without OPENBLAS_THREAD_TIMEOUT, OpenBLAS reads 0 and uses its built-in 2**28 cycles
    assert _timeout_in_new_process(AUTODIFF_AST_BLAS_TIMEOUT="keep") == ["False", "0"]
