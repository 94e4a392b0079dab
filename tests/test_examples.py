"""Every example runs (small sizes, ``--small``) and prints the derivative source it generated;
the MLP example's default run reaches at least 95% accuracy on held-out digits and saves its
loss curve. (logistic_regression.py is tested in test_demo.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def run_example(name, *args, cwd, timeout=300):
    env = dict(os.environ, MPLBACKEND="Agg", AUTODIFF_AST_CACHE=str(cwd / "cache"))
    run = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return run.stdout


@pytest.mark.parametrize("name,expected", [
    ("autodiff_tutorial.py", ["check_grads: first and second derivatives agree",
                              "def grad_grad_grad_tanh(x):", "def grad_loss(W, b):"]),
    ("linear_regression.py", ["largest parameter error", "def value_and_grad_loss(w, b, x, y):"]),
    ("vmap_convolution.py", ["equal to the Python loop over examples", "def vmap_convolve(",
                             "def vmap_grad_example_loss("]),
    ("heat_adjoint.py", ["largest difference from finite differences", "def grad_heat("]),
    ("newton_while.py", ["largest difference from the implicit function theorem",
                         "def grad_cube_root_solve(a, b):", "while "]),
    ("gmm_adbench.py", ["largest relative difference from finite differences",
                        "def grad_gmm_objective("]),
])
def test_example_runs_small(tmp_path, name, expected):
    out = run_example(name, "--small", cwd=tmp_path)
    for text in expected:
        assert text in out, out[-3000:]


def test_linear_regression_recovers_the_parameters(tmp_path):
    out = run_example("linear_regression.py", "--small", cwd=tmp_path)
    error = float(re.search(r"largest parameter error (\S+)", out).group(1))
    assert error < 0.01  # the noise is 0.01, on 1,000 points


def test_tutorial_values_match_closed_forms(tmp_path):
    out = run_example("autodiff_tutorial.py", cwd=tmp_path)
    for line in out.splitlines():
        if line.startswith("tanh'"):
            got, want = re.findall(r"= (-?\d+\.\d+)", line)
            assert got == want, line


def test_mlp_default_run_reaches_95_percent(tmp_path):
    out = run_example("mlp_digits.py", cwd=tmp_path, timeout=600)
    match = re.search(r"test accuracy (\d\.\d+) on (\d+) held-out images", out)
    assert match, out[-2000:]
    assert float(match.group(1)) >= 0.95
    assert int(match.group(2)) == 450  # a quarter of the 1797 digits, never trained on
    assert "epoch  20/20 [##############################]" in out  # the progress bar
    png = tmp_path / "mlp_digits_loss.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "def value_and_grad_loss(params_W1" in out


def test_makefile_runs_every_example():
    makefile = (REPO / "Makefile").read_text()
    assert "examples:" in makefile and "examples/*.py" in makefile
    for name in ("autodiff_tutorial", "linear_regression", "vmap_convolution", "mlp_digits",
                 "heat_adjoint", "newton_while", "gmm_adbench", "logistic_regression"):
        assert (EXAMPLES / f"{name}.py").is_file(), name
