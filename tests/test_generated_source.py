"""The generated source itself: pinned by golden files, valid Python, deterministic, standalone,
and annotated with the user's lines.

Golden files live in tests/golden/. After an intended change to the output, regenerate them
with ``pytest tests/test_generated_source.py --regen-golden`` (or set
``AUTODIFF_AST_REGEN_GOLDEN=1``) and review the diff like any other code change.
"""

from __future__ import annotations

import ast
import importlib
import linecache
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import autodiff_ast as ad

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def logistic_regression():
    """examples/logistic_regression.py imported under its own name, as a user would."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        sys.modules.pop("logistic_regression", None)
        module = importlib.import_module("logistic_regression")
        yield module
    finally:
        sys.path.remove(str(EXAMPLES))
        sys.modules.pop("logistic_regression", None)


def logistic_source(module):
    weights = np.zeros(3)
    return ad.source(ad.grad(module.training_loss), weights, module.targets)


# ---------------------------------------------------------------- golden files
def test_logistic_regression_gradient_matches_golden(logistic_regression, golden):
    golden("logistic_regression_grad.py", logistic_source(logistic_regression))


def test_golden_gradient_is_correct(logistic_regression):
    """The pinned source computes the right gradient (against finite differences)."""
    lr = logistic_regression
    weights = np.array([0.3, -0.2, 0.5])
    ad.check_grads(lambda w: lr.training_loss(w, lr.targets), (weights,), modes=("rev",))
    g = ad.grad(lr.training_loss)(weights, lr.targets)
    eps = 1e-6
    numeric = [(lr.training_loss(weights + eps * e, lr.targets) -
                lr.training_loss(weights - eps * e, lr.targets)) / (2 * eps)
               for e in np.eye(3)]
    np.testing.assert_allclose(g, numeric, rtol=1e-6)


def test_logistic_regression_imports_its_data_by_module_name(logistic_regression):
    source = logistic_source(logistic_regression)
    assert "from logistic_regression import inputs" in source
    assert "the loader sets it" not in source


# ---------------------------------------------------------------- valid, standalone Python
def tour(x):
    return np.sum(np.tanh(x[:, None] * x[None, :]) ** 2) + np.sum(x[::2])


def helper(v, scale=2.0):
    return np.exp(-v * v) * scale


def uses_helper(x, y):
    z = helper(x) * y
    return np.sum(z[1:] * z[:-1])


CASES = [
    ("tour", lambda: ad.source(ad.grad(tour), np.ones(4))),
    ("helper-grad", lambda: ad.source(ad.grad(uses_helper, argnums=(0, 1)), np.ones(4),
                                      np.ones(4))),
    ("value-and-grad", lambda: ad.source(ad.value_and_grad(uses_helper), np.ones(4), 2.0)),
    ("vjp", lambda: ad.vjp(lambda x: helper(x) * x, np.ones(3))[1].source),
    ("second-order", lambda: ad.source(ad.grad(ad.grad(lambda x: x ** 3 * np.sin(x))), 1.0)),
]


def imported_modules(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


@pytest.mark.parametrize("make", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_generated_source_parses_and_stands_alone(make):
    source = make()
    tree = ast.parse(source)
    assert ast.get_docstring(tree).split("\n")[0].endswith(".")
    modules = imported_modules(tree)
    assert not modules & {"autodiff_ast", "codegen", "gast"}
    assert modules <= {"numpy", "math", "test_generated_source"}
    assert "[(:" not in source  # what astunparse would write for x[:, None]
    compile(source, "<generated>", "exec")


def test_slices_are_written_as_numpy_slices():
    source = ad.source(ad.grad(tour), np.ones(4))
    assert "x[:, None]" in source and "x[None, :]" in source and "x[::2]" in source


def test_logistic_module_runs_standalone_in_a_fresh_interpreter(logistic_regression,
                                                                tmp_path, run_isolated):
    """Written to disk beside a copy of the user's module, with nothing of ours importable."""
    source = logistic_source(logistic_regression)
    (tmp_path / "logistic_regression.py").write_text(
        (EXAMPLES / "logistic_regression.py").read_text())
    (tmp_path / "grad_loss.py").write_text(source)
    script = (
        "import sys, numpy as np\n"
        "import grad_loss, logistic_regression as lr\n"
        "assert 'autodiff_ast' not in sys.modules and 'codegen' not in sys.modules\n"
        "w = np.array([0.3, -0.2, 0.5])\n"
        "print(repr(grad_loss.grad_training_loss(w, lr.targets).tolist()))\n"
    )
    out = run_isolated(script, tmp_path)
    assert out.returncode == 0, out.stderr
    g = ad.grad(logistic_regression.training_loss)(np.array([0.3, -0.2, 0.5]),
                                                    logistic_regression.targets)
    np.testing.assert_allclose(ast.literal_eval(out.stdout.strip()), g, rtol=1e-12)


# ---------------------------------------------------------------- readable
def test_comments_quote_the_users_source_lines(logistic_regression):
    source = logistic_source(logistic_regression)
    user_lines = {line.strip() for line in
                  (EXAMPLES / "logistic_regression.py").read_text().splitlines()}
    comments = [line.strip()[2:] for line in source.splitlines()
                if line.strip().startswith("# ") and not line.startswith("#")]
    assert len(comments) >= 4
    for text in comments:
        assert text in user_lines, text
    assert "# return -np.sum(np.log(label_probabilities))" in source


def test_adjoints_are_named_after_the_users_names(logistic_regression):
    source = logistic_source(logistic_regression)
    for name in ("weights_bar", "preds_bar", "label_probabilities_bar"):
        assert name in source
    assert "tmp" not in source and "_1234" not in source


# ---------------------------------------------------------------- deterministic
def test_same_input_gives_byte_identical_source(logistic_regression):
    first = logistic_source(logistic_regression)
    again = ad.source(ad.grad(logistic_regression.training_loss), np.ones(3),
                      logistic_regression.targets)
    assert first.encode() == again.encode()


def test_exec_defined_functions_are_deterministic():
    def build():
        src = "def f(x):\n    return np.sum(np.sin(x) * x)\n"
        filename = "<determinism>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        namespace = {"np": np}
        exec(compile(src, filename, "exec"), namespace)
        return ad.source(ad.grad(namespace["f"]), np.ones(2))
    assert build() == build()


_PRINT_SOURCE = """
import sys
import numpy as np
sys.path.insert(0, {examples!r})
import logistic_regression as lr
import autodiff_ast as ad
sys.stdout.write(ad.source(ad.grad(lr.training_loss), np.zeros(3), lr.targets))
"""


def test_source_is_identical_across_fresh_processes(logistic_regression, tmp_path):
    script = _PRINT_SOURCE.format(examples=str(EXAMPLES))
    env = dict(os.environ, PYTHONHASHSEED="random", AUTODIFF_AST_CACHE=str(tmp_path))
    outputs = []
    for seed in ("1", "2"):
        env["PYTHONHASHSEED"] = seed  # different hash orders must not change the output
        run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                             capture_output=True, timeout=120)
        assert run.returncode == 0, run.stderr.decode()
        outputs.append(run.stdout)
    assert outputs[0] == outputs[1]
    assert outputs[0].decode() == logistic_source(logistic_regression)
