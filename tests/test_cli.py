"""The command line, run as users run it: the installed ``autodiff-ast`` console script on real
files, its output imported by a fresh interpreter that cannot import autodiff_ast, gradients
checked there against finite differences of the user's own function."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "autodiff-ast"

MODEL = '''\
import numpy as np

inputs = np.array([[0.52, 1.12, 0.77],
                   [0.88, -1.08, 0.15],
                   [0.52, 0.06, -1.3],
                   [0.74, -2.49, 1.39]])


def scaled(x, y, scale=2.0):
    return np.sum(np.tanh(x) * y) * scale


def annotated(x: "float64[N]", y: float):
    return np.sum(np.sin(x) * y)


def broadcasting(x, y):
    return np.sum(np.exp(0.1 * x * y))


def predict(w):
    return np.tanh(np.dot(inputs, w))


def with_aux(w):
    loss = np.sum(w ** 2)
    return loss, w * 2.0


def reductions(x):
    return np.sum(np.max(x, axis=0) * np.mean(x, axis=-1, keepdims=True))


def unsupported(x):
    try:
        y = x * 2.0
    except ValueError:
        y = x
    return y


def no_rule(x):
    return np.sum(np.fft.fft(x).real)


def vector_output(x):
    return x * 2.0
'''

# Finite differences of a scalar function, computed in the fresh interpreter itself.
FD = '''
import numpy as np

def fd(f, args, k, eps=1e-6):
    args = [np.array(a, dtype=float) if np.ndim(a) else float(a) for a in args]
    x = args[k]
    if np.ndim(x) == 0:
        up, down = list(args), list(args)
        up[k], down[k] = x + eps, x - eps
        return (f(*up) - f(*down)) / (2 * eps)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = list(args), list(args)
        step = np.zeros_like(x)
        step[i] = eps
        up[k], down[k] = x + step, x - step
        out[i] = (f(*up) - f(*down)) / (2 * eps)
    return out

def check(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
'''


def cli(*args, cwd, use_module=False, check=True):
    command = [sys.executable, "-m", "autodiff_ast"] if use_module else [str(SCRIPT)]
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(cwd / ".modules"))
    run = subprocess.run(command + list(args), cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=120)
    if check:
        assert run.returncode == 0, run.stderr
    return run


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "logistic_regression.py").write_text(
        (REPO / "examples" / "logistic_regression.py").read_text())
    return tmp_path


def assert_one_line_error(run, *fragments):
    assert run.returncode != 0
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("autodiff-ast: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_console_script_is_installed():
    assert SCRIPT.exists(), "install the package: pip install -e .[test]"


# ---------------------------------------------------------------- the seed example
def test_grad_of_the_logistic_regression_file(project, run_isolated):
    cli("grad", "logistic_regression.py:training_loss", "--signature",
        "weights=float64[N], targets=float64[N]", "-o", "grad_loss.py", cwd=project)
    source = (project / "grad_loss.py").read_text()
    assert "from logistic_regression import inputs" in source
    assert "def grad_training_loss(weights, targets):" in source
    assert "unbroadcast" not in source  # ranks are known: no rank-generic helper
    out = run_isolated(FD + textwrap.dedent("""
        import logistic_regression as lr
        from grad_loss import grad_training_loss
        w = np.array([0.3, -0.2, 0.5])
        t = lr.targets.astype(float)
        check(grad_training_loss(w, t), fd(lr.training_loss, (w, t), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_without_a_signature_the_code_is_rank_generic(project, run_isolated):
    cli("grad", "logistic_regression.py:training_loss", "-o", "grad_any.py", cwd=project)
    source = (project / "grad_any.py").read_text()
    assert "def unbroadcast(g, shape):" in source
    assert "weights: float64[...], targets: float64[...]" in source
    out = run_isolated(FD + textwrap.dedent("""
        import logistic_regression as lr
        from grad_any import grad_training_loss
        w = np.array([0.3, -0.2, 0.5])
        t = lr.targets.astype(float)
        check(grad_training_loss(w, t), fd(lr.training_loss, (w, t), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_rank_generic_broadcasting_and_reductions(project, run_isolated):
    """One module serves every rank and broadcasting pattern (and Python floats)."""
    cli("grad", "model.py:broadcasting", "--argnums", "0,1", "-o", "grad_b.py", cwd=project)
    cli("grad", "model.py:reductions", "-o", "grad_r.py", cwd=project)
    out = run_isolated(FD + textwrap.dedent("""
        import model
        from grad_b import grad_broadcasting
        from grad_r import grad_reductions
        rng = np.random.default_rng(0)
        pairs = [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3)), ((3, 1), ())]
        for sx, sy in pairs:
            x = rng.standard_normal(sx) if sx else 0.7
            y = rng.standard_normal(sy) if sy else -1.3
            gx, gy = grad_broadcasting(x, y)
            assert np.shape(gx) == np.shape(x) and np.shape(gy) == np.shape(y)
            check(gx, fd(model.broadcasting, (x, y), 0))
            check(gy, fd(model.broadcasting, (x, y), 1))
        for shape in [(3, 4), (2, 3, 4)]:
            x = rng.standard_normal(shape)
            check(grad_reductions(x), fd(model.reductions, (x,), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------- options
def test_argnums_defaults_and_printing(project, run_isolated):
    printed = cli("grad", "model.py:scaled", "--argnums", "0,1", "--signature",
                  "x=float64[N], y=float64[N]", cwd=project).stdout
    cli("grad", "model.py:scaled", "--argnums", "0,1", "--signature",
        "x=float64[N], y=float64[N]", "-o", "grad_scaled.py", cwd=project)
    written = (project / "grad_scaled.py").read_text()
    assert printed == written  # printing and writing give the same bytes
    assert "def grad_scaled(x, y, scale=2.0):" in written  # FUNC's parameters and defaults
    assert "argnums=(0, 1)" in written.splitlines()[0]
    assert "scale: float64" in written  # the number default gave its type
    out = run_isolated(FD + textwrap.dedent("""
        import model
        from grad_scaled import grad_scaled
        x, y = np.array([0.1, -0.4, 0.9]), np.array([1.0, 2.0, -0.5])
        gx, gy = grad_scaled(x, y)
        check(gx, fd(model.scaled, (x, y), 0))
        check(gy, fd(model.scaled, (x, y), 1))
        gx3, _ = grad_scaled(x, y, 3.0)
        check(gx3, fd(model.scaled, (x, y, 3.0), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_annotations_give_the_types(project):
    source = cli("grad", "model.py:annotated", "--argnums", "y", cwd=project).stdout
    assert "x: float64[N], y: float64" in source
    assert "unbroadcast" not in source
    assert "def grad_annotated(x, y):" in source


def test_value_and_grad_and_has_aux(project, run_isolated):
    cli("value-and-grad", "model.py:with_aux", "--has-aux", "--signature", "w=float64[N]",
        "-o", "vg.py", cwd=project)
    out = run_isolated(FD + textwrap.dedent("""
        import model
        from vg import value_and_grad_with_aux
        w = np.array([0.5, -1.0, 2.0])
        (value, aux), g = value_and_grad_with_aux(w)
        check(value, model.with_aux(w)[0])
        check(aux, 2.0 * w)
        check(g, fd(lambda w: model.with_aux(w)[0], (w,), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_vjp_subcommand(project, run_isolated):
    cli("vjp", "model.py:predict", "--signature", "w=float64[N]", "-o", "vjp_predict.py",
        cwd=project)
    source = (project / "vjp_predict.py").read_text()
    assert "from model import inputs" in source
    out = run_isolated(FD + textwrap.dedent("""
        import model
        from vjp_predict import vjp_predict
        w = np.array([0.5, -1.0, 2.0])
        u = np.array([1.0, -2.0, 0.5, 3.0])
        out, w_bar = vjp_predict(w, u)
        check(out, model.predict(w))
        check(w_bar, fd(lambda w: np.sum(u * model.predict(w)), (w,), 0))
        print("ok")
    """), project)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_package_module_target(tmp_path, run_isolated):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODEL)
    cli("grad", "pkg.model:scaled", "--signature",
        "x=float64[N], y=float64[N]", "-o", "grad_pkg.py", cwd=tmp_path, use_module=True)
    cli("vjp", "pkg.model:predict", "--signature", "w=float64[N]", "-o", "vjp_pkg.py",
        cwd=tmp_path)
    assert "from pkg.model import inputs" in (tmp_path / "vjp_pkg.py").read_text()
    out = run_isolated(FD + textwrap.dedent("""
        from pkg import model
        from grad_pkg import grad_scaled
        from vjp_pkg import vjp_predict
        x, y = np.array([0.1, -0.4]), np.array([1.0, 2.0])
        check(grad_scaled(x, y), fd(model.scaled, (x, y), 0))
        w, u = np.array([0.5, -1.0, 2.0]), np.ones(4)
        check(vjp_predict(w, u)[1], fd(lambda w: np.sum(model.predict(w)), (w,), 0))
        print("ok")
    """), tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_functions_reading_data_of_the_same_name_from_two_modules(tmp_path, run_isolated):
    # Each function's module named the data it reads on its own (W from lib.py as W in one,
    # as W_2 in the other); the merged module imported both under both names, and both
    # gradients read model.W for lib.W (silently wrong). Session 43's CLI hunt.
    (tmp_path / "lib.py").write_text(
        "import numpy as np\nW = np.array([2.0, 3.0, 4.0])\n\n\n"
        "def smooth(v):\n    return np.sin(v) * W\n")
    (tmp_path / "twodata.py").write_text(
        "import numpy as np\nfrom lib import smooth\nW = np.array([-1.0, 0.5, 0.25])\n\n\n"
        "def f(x):\n    return np.sum(smooth(x) * W)\n\n\n"
        "def g(x):\n    return np.sum(smooth(x * W))\n")
    cli("grad", "twodata.py:f,g", "--signature", "x=float64[N]", "-o", "grads.py",
        cwd=tmp_path)
    out = run_isolated(FD + textwrap.dedent("""
        import twodata
        from grads import grad_f, grad_g
        x = np.array([0.3, -0.8, 1.1])
        check(grad_f(x), fd(twodata.f, (x,), 0))
        check(grad_g(x), fd(twodata.g, (x,), 0))
        print("ok")
    """), tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_merged_imports_keep_lines_that_bind_nothing_renamed():
    from autodiff_ast.cli_module import merge
    one = '"""One."""\nfrom lib import W\n\n\ndef f(x):\n    return x * W\n'
    two = ('"""Two."""\nimport os.path\nfrom model import W\n\n\n'
           'def g(x):\n    return x * W + len(os.path.sep)\n')
    merged = merge([one, two], entries=["f", "g"])
    assert "import os.path\n" in merged
    assert "from model import W as W_2" in merged
    assert "return x * W_2 + len(os.path.sep)" in merged


def test_merged_imports_rename_only_bare_names():
    from autodiff_ast.cli_module import rename_names
    assert rename_names("y = W * cfg.W  # W\n", {"W": "W_2"}) == "y = W_2 * cfg.W  # W\n"


# ---------------------------------------------------------------- writing
def test_output_is_written_atomically_and_replaced(project):
    target = project / "out.py"
    target.write_text("old contents\n")
    cli("grad", "model.py:scaled", "-o", "out.py", cwd=project)
    assert target.read_text().startswith('"""grad(scaled')
    leftovers = [p.name for p in project.iterdir() if p.name.startswith(".out.py")]
    assert leftovers == []


def test_refuses_to_overwrite_the_input_file(project):
    before = (project / "model.py").read_text()
    run = cli("grad", "model.py:scaled", "-o", "model.py", cwd=project, check=False)
    assert_one_line_error(run, "model.py", "refusing to overwrite the input file")
    assert (project / "model.py").read_text() == before
    run = cli("grad", "model.py:scaled", "-o", str(project / "model.py"), cwd=project,
              check=False)
    assert_one_line_error(run, "refusing")


# ---------------------------------------------------------------- errors: one line, no traceback
def test_missing_file(project):
    assert_one_line_error(cli("grad", "nowhere.py:f", cwd=project, check=False),
                          "nowhere.py: no such file")


def test_missing_function(project):
    run = cli("grad", "model.py:nope", cwd=project, check=False)
    assert_one_line_error(run, "model.py", "no function named 'nope'", "scaled")


def test_target_without_a_function(project):
    # (a whole file, model.py, is a target: tests/test_cli_transforms.py)
    run = cli("grad", "model", cwd=project, check=False)
    assert_one_line_error(run, "FILE.py:FUNC")
    assert run.returncode == 2


def test_missing_module(project):
    run = cli("grad", "no_such_pkg.mod:f", cwd=project, check=False)
    assert_one_line_error(run, "cannot import no_such_pkg.mod")


def test_syntax_error_in_the_file(project):
    (project / "broken.py").write_text("import numpy as np\n\ndef f(x):\n    return x +\n")
    run = cli("grad", "broken.py:f", cwd=project, check=False)
    assert_one_line_error(run, "broken.py:4:", "syntax error")


def test_a_dict_argument_is_refused_not_written_as_an_array(project):
    # (once a module exited 0 whose body wrote params_bar['b'] into an array)
    (project / "dicts.py").write_text(
        "import numpy as np\n\n\ndef dloss(params, x):\n"
        "    h = np.tanh(params['w'] @ x + params['b'])\n    return np.sum(h ** 2)\n")
    run = cli("grad", "dicts.py:dloss", "-o", "out.py", cwd=project, check=False)
    assert_one_line_error(run, "dicts.py:5:", "cannot be indexed by the string 'w'",
                          "separate arguments")
    assert run.returncode == 1 and not (project / "out.py").exists()


def test_an_entry_of_a_module_dict_is_refused_by_its_spelling(tmp_path):
    # The message named the flattened leaf (P_w, LAYERS_1), which the user never wrote, and
    # told them to make it a module-level name, which P already is.
    (tmp_path / "entries.py").write_text(
        "import numpy as np\nP = {'w': np.array([1.0, -2.0])}\n\n\n"
        "def f(x):\n    return np.sum(x * P['w'])\n")
    run = cli("grad", "entries.py:f", "--signature", "x=float64[N]", "-o", "g.py",
              cwd=tmp_path, check=False)
    assert_one_line_error(run, "entries.py:5: f reads P['w'], an entry of a module-level "
                          "dict", "`P_w = P['w']`")


def test_exception_while_importing_the_file(project):
    (project / "raises.py").write_text("import numpy as np\n\nvalue = 1 / 0\n")
    run = cli("grad", "raises.py:f", cwd=project, check=False)
    assert_one_line_error(run, "raises.py:3:", "ZeroDivisionError")


def _line(text):
    """The line of MODEL that starts with `text` (after indentation)."""
    for k, line in enumerate(MODEL.splitlines(), 1):
        if line.strip().startswith(text):
            return k
    raise AssertionError(text)


@pytest.mark.parametrize("func,marker,fragments", [
    ("unsupported", "try:", ["try/except", "hint:"]),
    ("no_rule", "return np.sum(np.fft", ["np.fft.fft", "rule"]),
    ("vector_output", "return x * 2.0", ["scalar", "float64[N]"]),
])
def test_code_that_cannot_be_differentiated(project, func, marker, fragments):
    run = cli("grad", f"model.py:{func}", "--signature", "x=float64[N]", cwd=project,
              check=False)
    assert_one_line_error(run, f"model.py:{_line(marker)}:", *fragments)
    assert run.returncode == 1


def test_bad_options(project):
    run = cli("grad", "model.py:scaled", "--signature", "x=float64[N", cwd=project,
              check=False)
    assert_one_line_error(run, "--signature")
    run = cli("grad", "model.py:scaled", "--signature", "z=float64", cwd=project, check=False)
    assert_one_line_error(run, "names z", "scaled")
    run = cli("grad", "model.py:scaled", "--argnums", "5", cwd=project, check=False)
    assert_one_line_error(run, "argnums", "model.py")
    run = cli("grad", "model.py:scaled", "--argnums", "q", cwd=project, check=False)
    assert_one_line_error(run, "--argnums")


def test_rank_generic_code_asks_for_a_signature_where_it_must(project):
    (project / "tiles.py").write_text("import numpy as np\n\n\ndef f(x):\n"
                                      "    return np.sum(np.tile(x, 2))\n")
    run = cli("grad", "tiles.py:f", cwd=project, check=False)
    assert_one_line_error(run, "tiles.py:5:", "np.tile", "--signature")
    assert "def grad_f" in cli("grad", "tiles.py:f", "--signature", "x=float64[N]",
                               cwd=project).stdout


def test_doctests_of_the_command_line_modules():
    import doctest

    from autodiff_ast import cli, signatures
    for module in (cli, signatures):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0
