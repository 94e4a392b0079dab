"""Google's tangent (source-to-source AD for Python/NumPy, unmaintained since 2018) as a
competitor: measured when it imports, otherwise the reason it cannot run here.

tangent 0.1.9 (its last release) is not in the ``bench`` extra: on Python 3.11 it installs but
does not import. It walks ``gast.Num``/``gast.Str`` nodes, which gast removed in 0.5 (this
project needs gast 0.7); with gast 0.2.2 instead it imports TensorFlow unconditionally
(``tangent/tracing.py``; its requirements pull ``tf-nightly``, about 2 GB) and then calls
TensorFlow 1 APIs (``tf.to_float``) that TensorFlow 2 no longer has. Checked on 2026-11-22
in a separate virtual environment.

When ``import tangent`` works, the row times tangent's gradient of the logistic-regression
loss of seed_workloads.py (N=100,000, D=100) against ours, after checking both against the
hand-written gradient.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from timing import compare  # noqa: E402

NAME = "tangent (source-to-source AD, Google, 2017-2018) as a competitor"


def _reason():
    """Why tangent cannot be measured, or None when it imports."""
    try:
        version = importlib.metadata.version("tangent")
    except importlib.metadata.PackageNotFoundError:
        return ("not measured: tangent is not installed (deliberately not in the bench extra; "
                "see this module's docstring)")
    try:
        import tangent  # noqa: F401
    except Exception as exc:  # noqa: BLE001 (any import failure is the finding)
        return (f"not measured: tangent {version} is installed but does not import on Python "
                f"{sys.version.split()[0]}: {type(exc).__name__}: {str(exc)[:150]}")
    return None


def run():
    """One row: tangent's time when it runs, else the reason in the notes."""
    reason = _reason()
    if reason is not None:
        return [{"name": NAME, "ours_s": float("nan"), "competitors": {},
                 "notes": reason + ". tangent 0.1.9 needs gast < 0.5 (gast.Num) and TensorFlow "
                          "1 APIs (tf.to_float); this project needs gast 0.7."}]
    import tangent
    from seed_workloads import logistic_grad_numpy, logistic_loss

    from autodiff_ast import grad
    from autodiff_ast.jit import jit
    rng = np.random.default_rng(0)
    n, d = 100_000, 100
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 0.5).astype(np.float64)
    w = rng.standard_normal(d) * 0.1
    args = (w, X, y)
    return [compare(f"{NAME}: logistic regression N=1e5 D=100", jit(grad(logistic_loss)), args,
                    logistic_grad_numpy(*args), {"tangent grad": tangent.grad(logistic_loss)})]
