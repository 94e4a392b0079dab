"""Every transform of the command line, end to end: the installed ``autodiff-ast`` script on a
real file, the module it wrote imported by a fresh interpreter that cannot import autodiff_ast
(``run_isolated``), and checked there against finite differences of the user's own function (or
a loop over examples for vmap). Also: several functions into one module, whole files,
``--static``, ``--jit numba|cuda``, ``show`` and ``check``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "autodiff-ast"

MODEL = '''\
import numpy as np

W = np.array([[1.0, 2.0], [0.5, -1.0], [0.3, 0.2]])


def loss(x: "float64[2]", y: "float64[3]"):
    z = np.tanh(W @ x) * y
    return np.sum(z * z)


def predict(x: "float64[2]"):
    return np.sin(W @ x)


def energy(x: "float64[2]"):
    return np.sum(x ** 4) + x[0] * x[1]


def energy_scaled(x: "float64[2]", scale=2.0):
    return scale * (np.sum(x ** 4) + x[0] * x[1])


def simulate(x: "float64[2]", steps, rate=0.5):
    for _ in range(steps):
        x = x - rate * np.tanh(x)
    return np.sum(x * x)


def pair(a: "float64[2]", b: "float64[2]"):
    return np.sum(np.sin(a) * b) * 2.0, a * b


def scaled(a: "float64[2]", b: "float64[2]", scale=2.0):
    return np.sin(a) * b * scale


def with_aux(x: "float64[2]"):
    pred = np.tanh(W @ x)
    return np.sum(pred ** 2), {"pred": pred, "top": np.max(pred)}


def unsupported(x):
    try:
        y = x * 2.0
    except ValueError:
        y = x
    return y
'''

# Finite differences computed in the fresh interpreter itself, from the user's function.
FD = '''
import numpy as np

def jac(f, args, k, eps=1e-6):
    """d f(*args) / d args[k]: shape out.shape + arg.shape."""
    x = np.asarray(args[k], dtype=float)
    cols = []
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        up, down = list(args), list(args)
        up[k], down[k] = x + step, x - step
        cols.append((np.asarray(f(*up)) - np.asarray(f(*down))) / (2 * eps))
    return np.stack(cols, -1).reshape(np.shape(cols[0]) + x.shape)

def check(got, want, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)

x = np.array([0.3, -0.7])
y = np.array([1.0, -2.0, 0.5])
'''


def cli(*args, cwd, check=True):
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(cwd / ".modules"))
    run = subprocess.run([str(SCRIPT)] + list(args), cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=180)
    if check:
        assert run.returncode == 0, run.stderr
    return run


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


def isolated_ok(run_isolated, code, cwd, timeout=60):
    out = run_isolated(FD + textwrap.dedent(code) + "\nprint('ok')\n", cwd, timeout=timeout)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr
    return out


def test_grad(project, run_isolated):
    cli("grad", "model.py:loss", "--argnums", "0,1", "-o", "g.py", cwd=project)
    assert "def grad_loss(x, y):" in (project / "g.py").read_text()
    isolated_ok(run_isolated, """
        import model, g
        gx, gy = g.grad_loss(x, y)
        check(gx, jac(model.loss, (x, y), 0))
        check(gy, jac(model.loss, (x, y), 1))
    """, project)


def test_value_and_grad(project, run_isolated):
    cli("value-and-grad", "model.py:energy", "-o", "vg.py", cwd=project)
    isolated_ok(run_isolated, """
        import model, vg
        value, g = vg.value_and_grad_energy(x)
        check(value, model.energy(x))
        check(g, jac(model.energy, (x,), 0))
    """, project)


def test_jvp(project, run_isolated):
    cli("jvp", "model.py:loss", "-o", "j.py", cwd=project)
    isolated_ok(run_isolated, """
        import model, j
        dx, dy = np.array([1.0, 0.5]), np.array([0.2, -0.1, 0.3])
        out, out_dot = j.jvp_loss(x, y, dx, dy)
        check(out, model.loss(x, y))
        check(out_dot, jac(model.loss, (x, y), 0) @ dx + jac(model.loss, (x, y), 1) @ dy)
    """, project)


def test_vjp(project, run_isolated):
    cli("vjp", "model.py:predict", "-o", "v.py", cwd=project)
    isolated_ok(run_isolated, """
        import model, v
        u = np.array([1.0, -2.0, 0.5])
        out, x_bar = v.vjp_predict(x, u)
        check(out, model.predict(x))
        check(x_bar, u @ jac(model.predict, (x,), 0))
    """, project)


@pytest.mark.parametrize("command", ["jacfwd", "jacrev"])
def test_jacobians(project, run_isolated, command):
    cli(command, "model.py:predict", "-o", f"{command}.py", cwd=project)
    source = (project / f"{command}.py").read_text()
    assert "from model import W" in source and "autodiff_ast_generated" not in source
    isolated_ok(run_isolated, f"""
        import model, {command}
        check({command}.{command}_predict(x), jac(model.predict, (x,), 0))
    """, project)


def test_hessian(project, run_isolated):
    cli("hessian", "model.py:energy", "-o", "h.py", cwd=project)
    source = (project / "h.py").read_text()
    assert source.startswith('"""hessian(energy) = jacfwd(jacrev(energy))')
    assert "def hessian_energy(x):" in source
    isolated_ok(run_isolated, """
        import model, h
        grad = lambda x: jac(model.energy, (x,), 0, eps=1e-5)
        check(h.hessian_energy(x), jac(grad, (x,), 0, eps=1e-4), rtol=1e-4, atol=1e-5)
    """, project)


def test_vmap(project, run_isolated):
    cli("vmap", "model.py:loss", "--in-axes", "0,None", "-o", "b.py", cwd=project)
    cli("vmap", "model.py:predict", "--in-axes", "1", "--out-axes", "1", "-o", "b1.py",
        cwd=project)
    isolated_ok(run_isolated, """
        import model, b, b1
        xs = np.arange(8.0).reshape(4, 2) / 8
        check(b.vmap_loss(xs, y), [model.loss(xi, y) for xi in xs], rtol=1e-12)
        check(b1.vmap_predict(xs.T), np.stack([model.predict(xi) for xi in xs], 1),
              rtol=1e-12)
    """, project)


def test_vmap_out_axes_error_names_the_function_and_line(project):
    # `vmap model.py:loss,predict --out-axes 1` said "map output 0 along axis 1, but it has
    # rank 1", not which function: loss returns a number (rank 1 batched)
    run = cli("vmap", "model.py:predict,loss", "--out-axes", "1", "-o", "b.py", cwd=project,
              check=False)
    assert run.returncode != 0 and run.stderr.count("\n") == 1, run.stderr
    assert re.search(r"model.py:\d+: vmap was asked to map output 0 of loss along axis 1",
                     run.stderr), run.stderr


def test_number_defaults_are_kept(project, run_isolated):
    # the entry functions of jacfwd, jacrev, hessian, vjp's forward function and vmap (when
    # the argument is not mapped) kept FUNC's parameters but dropped `scale=2.0`
    expected = {"jacfwd": "def jacfwd_scaled(a, b, scale=2.0):",
                "jacrev": "def jacrev_scaled(a, b, scale=2.0):",
                "vjp": "def scaled_fwd(a, b, scale=2.0):"}
    for command, line in expected.items():
        cli(command, "model.py:scaled", "-o", f"d_{command}.py", cwd=project)
        assert line in (project / f"d_{command}.py").read_text()
    cli("hessian", "model.py:energy_scaled", "-o", "d_hessian.py", cwd=project)
    assert "def hessian_energy_scaled(x, scale=2.0):" in (project / "d_hessian.py").read_text()
    cli("vmap", "model.py:scaled", "--in-axes", "0,0,None", "-o", "d_vmap.py", cwd=project)
    assert "def vmap_scaled(a, b, scale=2.0):" in (project / "d_vmap.py").read_text()
    cli("vmap", "model.py:scaled", "-o", "d_vmap_all.py", cwd=project)  # scale mapped too
    assert "def vmap_scaled(a, b, scale):" in (project / "d_vmap_all.py").read_text()
    isolated_ok(run_isolated, """
        import model, d_jacfwd, d_jacrev, d_hessian, d_vjp, d_vmap
        b = np.array([1.5, -0.5])
        for module in (d_jacfwd.jacfwd_scaled, d_jacrev.jacrev_scaled):
            check(module(x, b), jac(model.scaled, (x, b), 0))
            check(module(x, b, 0.5), jac(lambda a, b: model.scaled(a, b, 0.5), (x, b), 0))
        grad = lambda x: jac(model.energy_scaled, (x,), 0, eps=1e-5)
        check(d_hessian.hessian_energy_scaled(x), jac(grad, (x,), 0, eps=1e-4), rtol=1e-4,
              atol=1e-5)
        check(d_vjp.scaled_fwd(x, b)[0], model.scaled(x, b))
        xs = np.stack([x, 2 * x])
        check(d_vmap.vmap_scaled(xs, np.stack([b, b])), [model.scaled(v, b) for v in xs])
    """, project)


def test_several_functions_into_one_module(project, run_isolated):
    cli("jacrev", "model.py:predict,loss", "-o", "jr.py", cwd=project)
    source = (project / "jr.py").read_text()
    assert source.startswith('"""jacrev(predict), jacrev(loss), generated by autodiff-ast')
    assert source.count("import numpy as np") == 1
    isolated_ok(run_isolated, """
        import model, jr
        check(jr.jacrev_predict(x), jac(model.predict, (x,), 0))
        check(jr.jacrev_loss(x, y), jac(model.loss, (x, y), 0))
    """, project)


def test_a_whole_file(project, run_isolated):
    run = cli("grad", "model.py", "-o", "all.py", cwd=project)
    # predict (a vector output), simulate (steps has no type) and unsupported are skipped,
    # each with one line naming it
    skipped = [line for line in run.stderr.splitlines() if line.startswith("autodiff-ast: ")]
    assert any("skipped predict" in line for line in skipped), run.stderr
    assert any("skipped unsupported" in line and "model.py:" in line for line in skipped)
    source = (project / "all.py").read_text()
    assert "def grad_loss(" in source and "def grad_energy(" in source
    isolated_ok(run_isolated, """
        import model, all
        check(all.grad_loss(x, y), jac(model.loss, (x, y), 0))
        check(all.grad_energy(x), jac(model.energy, (x,), 0))
    """, project)


def test_static_arguments(project, run_isolated):
    cli("grad", "model.py:simulate", "--static", "steps=3", "-o", "s.py", cwd=project)
    source = (project / "s.py").read_text()
    assert "Static arguments (fixed when this module was written): steps=3." in source
    isolated_ok(run_isolated, """
        import model, s
        check(s.grad_simulate(x, 0.5), jac(lambda x: model.simulate(x, 3, 0.5), (x,), 0))
        check(s.grad_simulate(x, 0.25), jac(lambda x: model.simulate(x, 3, 0.25), (x,), 0))
    """, project)


def test_jit_numba(project, run_isolated):
    cli("grad", "model.py:loss", "--argnums", "0,1", "--jit", "numba", "-o", "gn.py",
        cwd=project)
    source = (project / "gn.py").read_text()
    assert "import numba" in source
    assert "@numba.njit(cache=True" in source
    # W is passed to the compiled function, not frozen into it; grad_loss keeps its name
    assert "def grad_loss(x, y):" in source and "def grad_loss_compiled(x, y, W):" in source
    out = isolated_ok(run_isolated, """
        import numba, model, gn
        gx, gy = gn.grad_loss(x, y)
        check(gx, jac(model.loss, (x, y), 0))
        check(gy, jac(model.loss, (x, y), 1))
        assert isinstance(gn.grad_loss_compiled, numba.core.registry.CPUDispatcher)
        print(len(gn.grad_loss_compiled.signatures))
    """, project, timeout=180)
    assert out.stdout.split()[-2] == "1"  # compiled once, in nopython mode


RNN = """\
import numpy as np


def rnn(w, x):
    h = 0.0
    for t in range(8):
        h = np.tanh(w * h + x[t])
    return h
"""


def test_jit_cuda_writes_a_kernel(project, run_isolated):
    """Per-example gradients as a kernel, run in Numba's CUDA simulator (conftest sets
    NUMBA_ENABLE_CUDASIM=1, which the fresh interpreter inherits)."""
    (project / "rnn.py").write_text(RNN)
    cli("grad", "rnn.py:rnn", "--jit", "cuda", "--signature", "w=float64, x=float64[8]",
        "-o", "kernel.py", cwd=project)
    source = (project / "kernel.py").read_text()
    assert "@cuda.jit\ndef grad_rnn_kernel(w, x, out_0, n_batch):" in source
    assert "# autodiff-ast grad rnn.py:rnn --signature" in source
    isolated_ok(run_isolated, """
        import os
        assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
        import rnn, kernel
        ws = np.array([0.5, -0.3, 0.9])
        xs = np.linspace(-1, 1, 24).reshape(3, 8)
        out = np.zeros(3)
        kernel.grad_rnn_kernel[1, 32](ws, xs, out, 3)
        for k in range(3):
            check(out[k], jac(lambda w: rnn.rnn(w, xs[k]), (np.array(ws[k]),), 0))
    """, project, timeout=180)


def test_jit_cuda_errors(project):
    (project / "rnn.py").write_text(RNN)
    run = cli("jvp", "rnn.py:rnn", "--jit", "cuda", "--signature", "w=float64, x=float64[8]",
              cwd=project, check=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert "one thread per example" in run.stderr and run.stdout == ""
    run = cli("grad", "rnn.py:rnn", "--jit", "cuda", "--signature", "w=float64, x=float64[N]",
              cwd=project, check=False)
    assert run.returncode == 2 and "per-example sizes" in run.stderr
    run = cli("grad", "model.py:loss", "--jit", "cuda", "--signature",
              "x=float64[2], y=float64[3]", cwd=project, check=False)
    assert run.returncode == 1 and run.stderr.count("\n") == 1  # W: module data
    assert re.search(r"model.py:\d+: `W @ x`", run.stderr) and "CUDA device code" in run.stderr


def test_show_prints_plain_or_highlighted_source(project):
    plain = cli("show", "grad", "model.py:energy", cwd=project).stdout
    written = cli("grad", "model.py:energy", cwd=project).stdout
    assert plain == written  # not a terminal: no colours
    coloured = cli("show", "--color", "always", "grad", "model.py:energy", cwd=project).stdout
    assert "\x1b[" in coloured  # Pygments is installed in the test environment
    side = cli("show", "grad", "model.py:loss", "--argnums", "0,1", "--side-by-side",
               "--width", "140", cwd=project).stdout
    rows = side.splitlines()
    assert rows[0].startswith("loss (model.py)")
    # the user's line 7 and the generated line computing the adjoint of y, marked with 7
    assert any(r.split("|")[0].strip().startswith("7 ") and "z = np.tanh" in r for r in rows)
    assert any(r.split("|")[1].strip().startswith("7 ") and "y_bar =" in r for r in rows)
    cli("show", "grad", "model.py:loss", "--html", "page.html", cwd=project)
    page = (project / "page.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "grad_loss" in page


def test_check_of_several_outputs_and_an_aux_dict(project):
    # (check once crashed on these and blamed the axis sizes; the modules were right)
    cli("jvp", "model.py:pair", "-o", "t.py", cwd=project)
    cli("vjp", "model.py:pair", "-o", "c.py", cwd=project)
    cli("jacfwd", "model.py:pair", "--argnums", "0,1", "-o", "j.py", cwd=project)
    cli("value-and-grad", "model.py:with_aux", "--has-aux", "-o", "v.py", cwd=project)
    for name in ("t.py", "c.py", "j.py", "v.py"):
        run = cli("check", name, cwd=project)
        assert run.stdout.startswith("ok   "), run.stdout
    wrong = (project / "c.py").read_text()
    changed = wrong.replace("np.cos(a)", "np.cos(1.001 * a)")
    assert changed != wrong
    (project / "bad.py").write_text(changed)
    assert cli("check", "bad.py", cwd=project, check=False).returncode == 4


def test_check_passes_and_catches_a_wrong_module(project):
    cli("hessian", "model.py:energy", "-o", "h.py", cwd=project)
    cli("vmap", "model.py:loss", "--in-axes", "0,None", "-o", "b.py", cwd=project)
    cli("grad", "model.py:loss", "--argnums", "0,1", "-o", "g.py", cwd=project)
    for name in ("h.py", "b.py", "g.py"):
        run = cli("check", name, cwd=project)
        assert run.stdout.startswith("ok   "), run.stdout
    wrong = (project / "g.py").read_text().replace("z_bar = 2.0 * z", "z_bar = 2.001 * z")
    assert wrong != (project / "g.py").read_text()
    (project / "bad.py").write_text(wrong)
    run = cli("check", "bad.py", cwd=project, check=False)
    assert run.returncode == 4
    assert run.stdout.startswith("FAIL grad_loss: max abs error")


def test_check_of_a_module_written_into_another_folder(project):
    """The recorded target is relative to where the command ran: check finds it from the
    written module's folder and its parents too (it said "model.py: no such file" when run
    from anywhere but the folder the command ran in)."""
    (project / "out").mkdir()
    cli("grad", "model.py:energy", "-o", "out/g.py", cwd=project)
    for where, name in ((project, "out/g.py"), (project / "out", "g.py"),
                        (project.parent, str(project / "out" / "g.py"))):
        run = cli("check", name, cwd=where)
        assert run.stdout.startswith("ok   grad_energy"), (where, run.stdout)


def test_check_without_a_recorded_command(project):
    (project / "plain.py").write_text("x = 1\n")
    run = cli("check", "plain.py", cwd=project, check=False)
    assert run.returncode == 1
    assert run.stderr.strip().startswith("autodiff-ast: error: plain.py: not written by")


def test_help_documents_exit_codes_and_examples(project):
    text = cli("--help", cwd=project).stdout
    for line in ("exit status:", "  0  success", "  2  bad options or usage",
                 "  4  check:", "autodiff-ast hessian model.py -o hessians.py"):
        assert line in text
    for command in ("grad", "value-and-grad", "jvp", "vjp", "jacfwd", "jacrev", "hessian",
                    "vmap", "show", "check"):
        assert command in text
        assert "exit status:" in cli(command, "--help", cwd=project).stdout


def test_bad_axes_are_one_line_errors(project):
    run = cli("vmap", "model.py:loss", "--in-axes", "0,x", cwd=project, check=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "axes" in run.stderr
    run = cli("vmap", "model.py:loss", "--in-axes", "0", "--signature", "x=float64[...]",
              cwd=project, check=False)
    assert run.returncode == 2 and "rank" in run.stderr and "model.py" not in run.stdout


def test_doctests_of_the_cli_modules():
    import doctest

    from autodiff_ast import cli_check, cli_module, cli_transforms
    for module in (cli_transforms, cli_module, cli_check):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0


DICTS = '''\
import numpy as np


def stats(x: "float64[3]", y: "float64"):
    return np.sum(x) * y, {"s": np.exp(x) * y, "t": np.tanh(y * x[0])}
'''


@pytest.mark.parametrize("jit", [[], ["--jit", "numba"]], ids=["plain", "numba"])
def test_jvp_and_vjp_of_a_dict_output_return_dicts(tmp_path, run_isolated, jit):
    # The generated code returns a dict output as the tuple of its values; the written
    # jvp_FUNC and vjp_FUNC give the user's dicts back (they returned the tuples). vjp_FUNC
    # takes a dict's cotangent as the tuple of its values, as its docstring says (compiled
    # by Numba, it could not take a dict whose values differ in type).
    (tmp_path / "dicts.py").write_text(DICTS)
    cli("jvp", "dicts.py:stats", "-o", "j.py", *jit, cwd=tmp_path)
    cli("vjp", "dicts.py:stats", "-o", "v.py", *jit, cwd=tmp_path)
    assert "the tuple of its values: the cotangents of out[0], out[1]['s'], out[1]['t'])" \
        in (tmp_path / "v.py").read_text()
    isolated_ok(run_isolated, """
        import dicts, j, v
        x, y = np.array([0.3, -0.7, 1.1]), 1.3
        leaves = lambda out: np.concatenate([np.ravel(out[0]), np.ravel(out[1]["s"]),
                                             np.ravel(out[1]["t"])])
        flat = lambda x, y: leaves(dicts.stats(x, y))
        dx, dy = np.array([1.0, 0.5, -2.0]), 0.7
        out, out_dot = j.jvp_stats(x, y, dx, dy)
        assert type(out[1]) is dict and type(out_dot[1]) is dict and list(out[1]) == ["s", "t"]
        check(leaves(out), flat(x, y))
        check(leaves(out_dot), jac(flat, (x, y), 0) @ dx + jac(flat, (x, y), 1) * dy)
        u = np.array([0.5, 1.0, -1.0, 2.0, 0.25])
        out, (x_bar, y_bar) = v.vjp_stats(x, y, u[0], (u[1:4], u[4]))
        assert type(out[1]) is dict
        check(leaves(out), flat(x, y))
        check(x_bar, u @ jac(flat, (x, y), 0))
        check(y_bar, u @ jac(flat, (x, y), 1))
    """, tmp_path)


@pytest.mark.parametrize("command", ["jacfwd", "jacrev"])
def test_jacobians_of_a_dict_output_are_dicts(tmp_path, run_isolated, command):
    # (the written module returned the dict's blocks as a tuple)
    (tmp_path / "dicts.py").write_text(DICTS)
    cli(command, "dicts.py:stats", "--argnums", "0,1", "-o", "blocks.py", cwd=tmp_path)
    isolated_ok(run_isolated, f"""
        import dicts, blocks as written
        x, y = np.array([0.3, -0.7, 1.1]), 1.3
        (d0x, d0y), blocks = written.{command}_stats(x, y)
        assert type(blocks) is dict and list(blocks) == ["s", "t"]
        out = lambda k: (lambda x, y: dicts.stats(x, y)[1][k])
        check(d0x, jac(lambda x, y: dicts.stats(x, y)[0], (x, y), 0))
        check(d0y, jac(lambda x, y: dicts.stats(x, y)[0], (x, y), 1))
        for k in ("s", "t"):
            check(blocks[k][0], jac(out(k), (x, y), 0))
            check(blocks[k][1], jac(out(k), (x, y), 1))
    """, tmp_path)
