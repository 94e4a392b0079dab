"""Safety of what we write and run: deterministic output, cache keys, concurrent cache fills,
atomic CLI writes, and generated functions that never change the caller's arrays."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import autodiff_ast as ad
from codegen.loader import load_source, module_path

REPO = Path(__file__).resolve().parents[1]

PROGRAM = '''
import numpy as np


def helper(v, s):
    return np.tanh(v) * s


def f(params, x):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        y[i] = helper(x[i], params["w"]) + params["b"][i]
    if np.sum(y) > 0.0:
        y = y * 2.0
    s = np.sum(y * y)
    while s < 10.0:
        s = s * 1.5 + 1.0
    return s


def g(x, w):
    z = x.copy()
    z[0] = z[0] * w
    for i in range(1, z.shape[0]):
        z[i] = z[i] * z[i - 1]
    return np.sum(np.sin(z) * x)
'''

# Every transformation's generated module for the program above, hashed.
SOURCES = '''
import hashlib, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import autodiff_ast as ad
import safety_program as p
x = np.array([0.3, -0.2, 0.5]); w = 0.7
params = {"w": 0.4, "b": np.array([0.1, 0.2, 0.3])}
out = []
for t in (ad.grad(p.f, argnums=(0, 1)), ad.value_and_grad(p.g, argnums=(0, 1))):
    t(params, x) if t.__wrapped__ is p.f else t(x, w)
    out.append(t.source)
out.append(ad.vjp(p.g, x, w)[1].source)
j = ad.jvp_transform(p.g); j((x, w), (x, w)); out.append(j.source)
h = ad.hessian(p.g); h(x, w); out.append(h.source)
v = ad.vmap(ad.grad(p.g)); v(np.ones((2, 3)), np.ones(2)); out.append(v.source)
print(hashlib.sha256("\\n".join(out).encode()).hexdigest())
'''


@pytest.fixture(scope="module")
def program_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("safety")
    (folder / "safety_program.py").write_text(PROGRAM)
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def _run(code, *args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


# ---------------------------------------------------------------- determinism
def test_output_is_byte_identical_across_processes_and_hash_seeds(program_dir, tmp_path):
    digests = set()
    for seed in ("0", "1", "98765"):
        env = dict(os.environ, PYTHONHASHSEED=seed, AUTODIFF_AST_CACHE=str(tmp_path / seed))
        done = _run(SOURCES, str(program_dir), env=env)
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_output_is_byte_identical_within_a_process(program_dir):
    import safety_program as p
    x, w = np.array([0.3, -0.2, 0.5]), 0.7
    first, second = ad.grad(p.g), ad.grad(p.g)
    first(x, w)
    second(x, w)
    assert first.source == second.source


# ---------------------------------------------------------------- cache keys
def test_module_file_changes_with_source(tmp_path):
    a = module_path("def f(x):\n    return x\n", "m", cache_dir=tmp_path)
    b = module_path("def f(x):\n    return x + 1\n", "m", cache_dir=tmp_path)
    assert a != b and a.parent == b.parent


def test_module_file_changes_with_options(program_dir):
    import safety_program as p
    x, w = np.array([0.3, -0.2, 0.5]), 0.7
    files = set()
    for transform in (ad.grad(p.g), ad.grad(p.g, argnums=1), ad.grad(p.g, argnums=(0, 1)),
                      ad.value_and_grad(p.g)):
        transform(x, w)
        files.add(transform._last[1].__file__)
    assert len(files) == 4


def test_compiled_module_names_every_library_version():
    from codegen.numba_cpu import versions
    found = versions()
    import numba
    assert found["numpy"] == np.__version__ and found["numba"] == numba.__version__
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))
    assert found["autodiff-ast"] == ad.__version__


def test_compiled_module_file_changes_with_library_versions(monkeypatch):
    """The versions are in the compiled module's text, so in the hash naming its file: a new
    numpy (or numba, python, autodiff-ast) never reuses a stale compiled module."""
    from autodiff_ast.jit import jit
    from codegen import numba_cpu

    def f(x):
        return np.sum(x * 2.0)
    first = jit(f)
    first(np.ones(2))
    assert f"numpy {np.__version__}" in first.source
    assert f"autodiff-ast {ad.__version__}" in first.source
    real = numba_cpu.versions
    monkeypatch.setattr(numba_cpu, "versions", lambda: {**real(), "numpy": "0.0.0"})
    second = jit(f)
    second(np.ones(2))
    assert "numpy 0.0.0" in second.source
    assert first._last[1].module.__file__ != second._last[1].module.__file__


# ---------------------------------------------------------------- concurrent cache fills
WORKER = '''
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import autodiff_ast as ad
import safety_program as p
x = np.array([0.3, -0.2, 0.5]); w = 0.7
params = {"w": 0.4, "b": np.array([0.1, 0.2, 0.3])}
gp, gx = ad.grad(p.f, argnums=(0, 1))(params, x)
gg = ad.grad(p.g, argnums=(0, 1))(x, w)
hv = ad.hessian(p.g)(x, w)
from autodiff_ast.jit import jit
gj = jit(ad.grad(p.g))(x, w)
print(repr([gp["w"], *gp["b"], *gx, *gg[0], gg[1], *hv.ravel(), *gj]))
'''


def test_concurrent_processes_fill_the_cache_safely(program_dir, tmp_path):
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "modules"),
               NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(program_dir)], env=env,
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outputs.append(out.strip())
    assert len(set(outputs)) == 1
    files = list((tmp_path / "modules").iterdir())
    assert files and not [f for f in files if f.suffix == ".tmp" or f.name.startswith(".")]
    for manifest in (tmp_path / "modules").glob("*.json"):
        json.loads(manifest.read_text())  # Numba cache manifests are whole JSON documents
    for path in files:
        if path.suffix == ".py":  # every file holds exactly what its name hashes
            digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
            assert path.stem.endswith(digest), path.name
            compile(path.read_text(), str(path), "exec")
    # A later process reads the filled cache and gets the same numbers.
    again = _run(WORKER, str(program_dir), env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == outputs[0]


def test_a_corrupt_cache_file_is_replaced(tmp_path):
    source = "def f(x):\n    return x * 3.0\n"
    path = module_path(source, "corrupt_demo", cache_dir=tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("def f(x):\n    return x * 4.0  # truncated or edited by hand\n")
    module = load_source(source, "corrupt_demo", cache_dir=tmp_path)
    assert module.f(2.0) == 6.0
    assert path.read_text() == source


# ---------------------------------------------------------------- the CLI's writes
def test_cli_writes_atomically_and_keeps_the_input(tmp_path):
    from autodiff_ast.cli import CliError, write_atomically
    model = tmp_path / "model.py"
    model.write_text("x = 1\n")
    out = tmp_path / "out.py"
    out.write_text("old\n")
    inode = out.stat().st_ino
    write_atomically(out, "new\n", protect=[model])
    assert out.read_text() == "new\n" and out.stat().st_ino != inode  # replaced, not rewritten
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]
    for spelling in (model, tmp_path / "." / "model.py", tmp_path / "sub" / ".." / "model.py"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(CliError, match="refusing to overwrite the input file"):
            write_atomically(spelling, "oops\n", protect=[model])
    link = tmp_path / "link.py"
    link.symlink_to(model)
    with pytest.raises(CliError, match="refusing to overwrite"):
        write_atomically(link, "oops\n", protect=[model])
    assert model.read_text() == "x = 1\n"


def test_cli_refuses_to_overwrite_the_source_it_reads(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""
        import numpy as np


        def loss(x):
            return np.sum(x * x)
    """))
    done = subprocess.run([sys.executable, "-m", "autodiff_ast", "grad", f"{model}:loss",
                           "--signature", "x=float64[N]", "-o", str(model)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "refusing to overwrite the input file" in done.stderr
    assert "def loss(x):" in model.read_text()


# ---------------------------------------------------------------- the caller's arrays
def writes_its_argument(x):
    x[0] = x[0] * 2.0
    for i in range(1, x.shape[0]):
        x[i] = x[i] * x[i - 1]
    return np.sum(x * x)


def writes_both(x, y):
    y[1] = np.sin(x[0])
    y += x
    return np.sum(y * x)


def _calls():
    x = np.array([0.5, 0.7, 0.9])
    y = np.array([0.1, 0.2, 0.3])
    xs = np.full((2, 3), 0.5)
    f, g = writes_its_argument, writes_both
    return [
        ("grad", lambda: ad.grad(f)(x), [x]),
        ("value_and_grad", lambda: ad.value_and_grad(g, argnums=(0, 1))(x, y), [x, y]),
        ("vjp", lambda: ad.vjp(g, x, y)[1](1.0), [x, y]),
        ("jvp", lambda: ad.jvp(g, (x, y), (np.ones(3), np.ones(3))), [x, y]),
        ("vmap", lambda: ad.vmap(f)(xs), [xs]),
        ("vmap of grad", lambda: ad.vmap(ad.grad(f))(xs), [xs]),
        ("jacrev", lambda: ad.jacrev(f)(x), [x]),
        ("hessian", lambda: ad.hessian(f)(x), [x]),
    ]


@pytest.mark.parametrize("label", [c[0] for c in _calls()])
def test_generated_functions_never_change_the_callers_arrays(label):
    _, call, arrays = next(c for c in _calls() if c[0] == label)
    before = [a.copy() for a in arrays]
    call()
    call()  # twice: a second call must not see a first call's writes either
    for a, b in zip(arrays, before):
        assert np.array_equal(a, b)


def _through_flip(x):
    y = np.flip(x)
    y[0, 0] = y[0, 0] * 2.0
    return np.sum(y * y)


def _through_fliplr(x):
    y = np.fliplr(x)
    y[0, 0] = y[0, 0] * 2.0
    return np.sum(y * y)


def _through_flipud(x):
    y = np.flipud(x)
    y[0, 0] = y[0, 0] * 2.0
    return np.sum(y * y)


def _through_rot90(x):
    y = np.rot90(x)
    y[0, 0] = y[0, 0] * 2.0
    return np.sum(y * y)


def _through_atleast_3d(x):
    y = np.atleast_3d(x)
    y[0, 0] = y[0, 0] * 2.0
    return np.sum(y * y)


@pytest.mark.parametrize("f", [_through_flip, _through_fliplr, _through_flipud,
                               _through_rot90, _through_atleast_3d],
                         ids=["flip", "fliplr", "flipud", "rot90", "atleast_3d"])
def test_writes_through_a_view_of_an_argument_leave_it_unchanged(f):
    """NumPy returns views from these: a write through one must copy first in generated code
    (the caller's array changed, and the gradient with it, from one call to the next)."""
    x = np.arange(1.0, 7.0).reshape(2, 3)
    before = x.copy()
    g = ad.grad(f)
    first, second = g(x), g(x)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(first, second)


def test_results_do_not_depend_on_earlier_calls():
    x = np.array([0.5, 0.7, 0.9])
    g = ad.grad(writes_its_argument)
    assert np.array_equal(g(x), g(x))
    assert json.dumps(g(x).tolist()) == json.dumps(ad.grad(writes_its_argument)(x).tolist())


DIRECTIONS = np.array([0.5, -1.0, 2.0])  # module data a gradient must leave alone


def _weighted_end(angles):
    pos = np.zeros(2)
    total = 0.0
    for i in range(angles.shape[0]):
        pos = pos + np.array([np.cos(angles[i]), np.sin(angles[i])])
        total = total + np.sum(pos * pos)
    v = np.zeros(3)
    v[0] = pos[0]
    v[2] = pos[1] * pos[0]
    return total + np.sum(v * DIRECTIONS)


def test_gradient_never_writes_into_module_data():
    """The adjoint of ``v * DIRECTIONS`` was DIRECTIONS itself after clean-ups, and the adjoint
    of ``v[2] = ...`` zeroed its entry in place: module data changed on every call (wrong
    gradients from then on)."""
    before = DIRECTIONS.copy()
    x = np.array([0.3, 0.7])
    g = ad.grad(_weighted_end)
    first, second = g(x), g(x)
    np.testing.assert_array_equal(DIRECTIONS, before)
    np.testing.assert_array_equal(first, second)
    fd = [(_weighted_end(x + e) - _weighted_end(x - e)) / 2e-6 for e in np.eye(2) * 1e-6]
    np.testing.assert_allclose(first, fd, rtol=1e-6)
