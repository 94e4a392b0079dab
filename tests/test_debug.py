"""Debugging generated code: tracebacks that name the user's line, explain() for modules the
command line wrote, pdb stepping through generated code, debug_nans, and show()."""

from __future__ import annotations

import io
import os
import pdb
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import debug
from autodiff_ast.linemap import line_map

SCRIPT = Path(sys.executable).parent / "autodiff-ast"

USER = '''\
import numpy as np


def solve(a, x):
    b = a * 2.0
    y = np.linalg.inv(b) @ x
    return np.sum(y * y)


def pick(x, idx):
    y = np.sin(x)
    z = y[idx] * 2.0
    return np.sum(z)


def root(x):
    y = np.sqrt(x)
    return np.sum(y)


def logs(x):
    y = np.log(x)
    return np.sum(y * y)
'''


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's module, imported from a real file."""
    folder = tmp_path_factory.mktemp("user")
    path = folder / "user_model.py"
    path.write_text(USER)
    sys.path.insert(0, str(folder))
    try:
        import user_model
        yield user_model
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("user_model", None)


def _line(text):
    return next(k for k, line in enumerate(USER.splitlines(), 1) if line.strip() == text)


def test_a_failing_generated_line_names_the_users_line_in_the_traceback(tmp_path):
    """The traceback printed by Python shows the generated line (a real file) and the note
    names the user's original line."""
    (tmp_path / "user_model.py").write_text(USER)
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import numpy as np
        import autodiff_ast as ad
        import user_model
        ad.grad(user_model.solve)(np.ones((2, 2)), np.ones(2))   # singular matrix
    """))
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    err = run.stderr
    assert "numpy.linalg.LinAlgError: Singular matrix" in err
    # the generated file and line, as Python prints any frame
    assert 'grad_solve_' in err and "inv = np.linalg.inv(b)" in err
    # ... and the user's line it comes from
    line = _line("y = np.linalg.inv(b) @ x")
    where = f"which comes from your line {tmp_path / 'user_model.py'}:{line}"
    assert where in err, err
    assert err.rstrip().endswith("y = np.linalg.inv(b) @ x")


def test_an_index_error_in_the_backward_sweep_names_the_users_line(user):
    with pytest.raises(IndexError) as info:
        ad.grad(user.pick)(np.array([1.0, 0.0]), np.array([0, 5]))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert f"user_model.py:{_line('z = y[idx] * 2.0')}" in notes
    assert "z = y[idx] * 2.0" in notes
    assert notes == ad.explain(info.value)  # explain() gives the same text


def test_explain_for_a_module_written_by_the_command_line(tmp_path):
    """A module the CLI wrote, imported and called without autodiff-ast's API in the way."""
    (tmp_path / "user_model.py").write_text(USER)
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "cache"))
    subprocess.run([str(SCRIPT), "grad", "user_model.py:solve", "--signature",
                    "a=float64[N,N], x=float64[N]", "-o", "grad_solve.py"], cwd=tmp_path,
                   env=env, check=True, timeout=120)
    code = textwrap.dedent("""
        import numpy as np
        import autodiff_ast as ad
        import grad_solve
        try:
            grad_solve.grad_solve(np.ones((2, 2)), np.ones(2))
        except np.linalg.LinAlgError as exc:
            print(ad.explain(exc))
    """)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "grad_solve.py:" in run.stdout
    assert f"user_model.py:{_line('y = np.linalg.inv(b) @ x')}" in run.stdout


def test_pdb_steps_through_generated_code(user):
    df = ad.grad(user.logs)
    x = np.array([0.5, 2.0])
    df(x)  # writes the module
    _, module = df._last
    lines = Path(module.__file__).read_text().splitlines()
    row = next(k for k, line in enumerate(lines, 1) if line.strip().startswith("x_bar ="))
    commands = "\n".join([f"break {module.__file__}:{row}", "continue", "list", "p y_bar",
                          "next", "p x_bar", "continue"]) + "\n"
    out = io.StringIO()
    debugger = pdb.Pdb(stdin=io.StringIO(commands), stdout=out, nosigint=True)
    debugger.use_rawinput = False
    result = debugger.runcall(df, x)
    text = out.getvalue()
    np.testing.assert_allclose(result, 2 * np.log(x) / x)
    assert f"{module.__file__}({row})grad_logs()" in text  # stopped in the generated file
    assert lines[row - 1].strip() in text  # `list` shows the generated source
    assert "# y = np.log(x)" in text  # with the comment quoting the user's line
    printed = [chunk.split("\n")[0] for chunk in text.split("(Pdb) ")[1:]]
    np.testing.assert_allclose(eval(printed[3].replace("array", "np.array")), 2 * np.log(x))
    np.testing.assert_allclose(eval(printed[5].replace("array", "np.array")),
                               2 * np.log(x) / x)  # `next` ran the generated line


# ---------------------------------------------------------------- debug_nans
def _nan_message(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(FloatingPointError) as info:
            call()
    return str(info.value)


def test_debug_nans_on_grad_names_the_users_line(user):
    x = np.array([1.0, 0.0])
    message = _nan_message(lambda: ad.grad(user.root, debug_nans=True)(x))
    assert message.startswith("debug_nans: NaN or inf in x_bar, computed by the generated line "
                              "`x_bar = 0.5 / y`")
    assert message.endswith(f"user_model.py:{_line('y = np.sqrt(x)')}: y = np.sqrt(x)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isinf(ad.grad(user.root)(x)[1])  # without it: an inf, silently


def test_debug_nans_on_the_first_statement_that_produced_it(user):
    message = _nan_message(lambda: ad.value_and_grad(user.logs, debug_nans=True)(
        np.array([1.0, -1.0])))
    # the primal log is where the NaN appears first (not its square, not the gradient)
    assert message.startswith("debug_nans: NaN or inf in y, computed by the generated line "
                              "`y = np.log(x)`"), message


def test_debug_nans_on_vjp_and_jvp(user):
    x = np.array([1.0, 0.0])
    _, pullback = ad.vjp(user.root, x, debug_nans=True)
    message = _nan_message(lambda: pullback(1.0))
    assert "in x_bar" in message and "y = np.sqrt(x)" in message
    message = _nan_message(lambda: ad.jvp(user.root, (x,), (np.ones(2),), debug_nans=True))
    assert "in y_dot" in message and f"user_model.py:{_line('y = np.sqrt(x)')}" in message


def test_debug_nans_from_the_global_config(user):
    x = np.array([1.0, 0.0])
    ad.config.update("debug_nans", True)
    try:
        message = _nan_message(lambda: ad.grad(user.root)(x))
    finally:
        ad.config.update("debug_nans", False)
    assert "y = np.sqrt(x)" in message
    assert ad.grad(user.root, debug_nans=True)(np.array([1.0, 4.0]))[1] == 0.25  # finite: fine


def test_debug_nans_leaves_composed_transforms_alone(user):
    # grad(grad(f)) reads the plain source of the inner module, not the checking variant
    ad.config.update("debug_nans", True)
    try:
        second = ad.grad(ad.grad(lambda x: x * x * x))(2.0)
    finally:
        ad.config.update("debug_nans", False)
    assert second == 12.0


@pytest.fixture
def nans_on():
    ad.config.update("debug_nans", True)
    try:
        yield
    finally:
        ad.config.update("debug_nans", False)


LOG_LINE = "y = np.log(x)"


@pytest.mark.parametrize("label", ["jacfwd", "jacrev", "hessian", "vmap", "vmap(grad)"])
def test_debug_nans_from_the_config_on_jacobians_and_vmap(user, nans_on, label):
    # (the global flag reached grad, value_and_grad, vjp and jvp only: these ran on and
    # returned finite Jacobians, or NaNs, without a word)
    x = np.array([1.0, -1.0])
    calls = {"jacfwd": lambda: ad.jacfwd(np.log)(x),  # a NumPy function: no line of ours
             "jacrev": lambda: ad.jacrev(user.logs)(x),
             "hessian": lambda: ad.hessian(user.logs)(x),
             "vmap": lambda: ad.vmap(user.logs)(np.stack([x, x])),
             "vmap(grad)": lambda: ad.vmap(ad.grad(user.logs))(np.stack([x, x]))}
    message = _nan_message(calls[label])
    assert message.startswith("debug_nans: NaN or inf in "), message
    if label != "jacfwd":
        assert message.endswith(f"user_model.py:{_line(LOG_LINE)}: {LOG_LINE}"), message


@pytest.mark.numba
def test_debug_nans_under_jit_runs_again_uncompiled(user, nans_on):
    # compiled code has no checks: an output holding a NaN runs the call again uncompiled,
    # which raises at the line that made it (JAX does the same)
    x = np.array([1.0, -1.0])
    message = _nan_message(lambda: ad.jit(ad.grad(user.logs))(x))
    assert message.startswith("debug_nans: NaN or inf in y, computed by the generated line "
                              "`y = np.log(x)`"), message
    message = _nan_message(lambda: ad.jit(user.logs)(x))
    assert message == (f"debug_nans: jit(logs) made a NaN or inf (invalid value encountered "
                       f"in log), at your line user_model.py:{_line(LOG_LINE)}: {LOG_LINE}")
    message = _nan_message(lambda: ad.jit(user.root)(np.array([1.0, np.nan])))
    assert "found none made along the way: an argument may hold one" in message
    ok = np.array([1.0, 2.0])
    np.testing.assert_allclose(ad.jit(ad.grad(user.logs))(ok), 2 * np.log(ok) / ok)


def test_debug_nans_flag_of_the_jitted_transform_wins(user):
    x = np.array([1.0, -1.0])
    assert "y = np.log(x)" in _nan_message(
        lambda: ad.jit(ad.grad(user.logs, debug_nans=True), target="python")(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ad.config.update("debug_nans", True)
        try:
            assert np.isnan(ad.jit(ad.grad(user.logs, debug_nans=False),
                                   target="python")(x)[1])
        finally:
            ad.config.update("debug_nans", False)


# ---------------------------------------------------------------- show and the line map
def test_show_side_by_side_text_and_html(user, tmp_path, capsys):
    text = ad.show(ad.grad(user.logs), np.array([0.5, 2.0]), color=False, width=120)
    assert capsys.readouterr().out == text
    rows = text.splitlines()
    assert rows[0].startswith("your function (user_model.py)")
    log_line = _line("y = np.log(x)")
    left = [r.split(" | ")[0].strip() for r in rows[1:]]
    right = [r.split(" | ")[1].strip() for r in rows[1:] if " | " in r]
    assert f"{log_line}     y = np.log(x)" in left  # the user's line, numbered
    assert f"{log_line}     x_bar = y_bar / x" in right  # its adjoint, marked with that number
    assert f"{log_line + 1}     y_bar = 2.0 * y" in right  # `return np.sum(y * y)`'s adjoint
    df = ad.grad(user.logs)
    with pytest.raises(TypeError, match="example arguments"):
        ad.show(df, html=True)  # no signature yet
    page = ad.show(df, np.array([0.5, 2.0]), html=True)
    assert page.startswith("<!DOCTYPE html>") and f'id="u{log_line}"' in page
    assert f'data-u="{log_line}"><span class="no">{log_line}</span>' in page
    path = ad.show(df, path=str(tmp_path / "x.html"))  # the module of the last call
    assert Path(path).read_text() == page


def test_line_map_of_a_reverse_module(user):
    df = ad.grad(user.solve)
    df(np.eye(2), np.ones(2))
    source = df.source
    mapping = line_map(source, user.__file__, (4, 7))
    lines = source.splitlines()
    by_text = {lines[row - 1].strip(): origin.lineno for row, origin in mapping.items()}
    assert by_text["inv = np.linalg.inv(b)"] == _line("y = np.linalg.inv(b) @ x")
    assert by_text["# return np.sum(y * y)"] == _line("return np.sum(y * y)")
    assert by_text[next(t for t in by_text if t.startswith("a_bar ="))] == _line("b = a * 2.0")


def test_doctests_of_the_debugging_modules():
    import doctest

    from autodiff_ast import config as config_object  # noqa: F401
    from autodiff_ast import display, linemap
    for module in (debug, display, linemap, sys.modules["autodiff_ast.config"]):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0
