"""The seed tutorial: examples/logistic_regression.py trains and prints the known losses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_logistic_regression_demo_prints_the_seed_losses(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg", AUTODIFF_AST_CACHE=str(tmp_path))
    run = subprocess.run([sys.executable, str(REPO / "examples" / "logistic_regression.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Initial loss: 2.7725887"
    assert lines[1] == "Trained loss: 1.0672707"
    # ... and it shows the gradient it trained with
    assert "def grad_training_loss(weights, targets):" in run.stdout
    assert "weights_bar" in run.stdout
    assert run.stderr == ""
