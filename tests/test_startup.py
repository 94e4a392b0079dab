"""Start-up: the warm-start index (autodiff_ast/warmstart.py), lazy imports and per-call caching.

The subprocess tests run a small script in new processes that share one cache directory, and
read the warm-start log ($AUTODIFF_AST_WARMSTART_LOG: one line per lookup, 'hit', 'miss',
'stored' or 'nokey') to see whether a process generated its module or loaded it. Every result
is checked against the gradient worked out by hand. No timings here (benchmarks/ has them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from autodiff_ast import frontend, grad, warmstart
from codegen import loader

#: The modules that parse and generate code: a warm start imports none of them.
PASSES = ("gast", "autodiff_ast.frontend", "autodiff_ast.normalize", "autodiff_ast.build",
          "autodiff_ast.reverse", "autodiff_ast.tidy", "codegen.dialect")

SCRIPT = textwrap.dedent("""\
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import userfns
    from autodiff_ast import grad, value_and_grad
    from autodiff_ast.jit import jit
    x = np.array([1.0, 2.0, 3.0])
    how = sys.argv[2]
    fn = getattr(userfns, sys.argv[3])
    if how == "grad":
        out = jit(grad(fn))(x)
    elif how == "value_and_grad":
        out = jit(value_and_grad(fn))(x)[1]
    elif how == "primal":
        out = np.atleast_1d(jit(fn)(x))
    elif how.startswith("int="):  # a Python int beside the differentiated array
        out = jit(grad(fn))(x, int(how.split("=")[1]))
    else:  # "static=<value>": the second argument is static
        out = jit(grad(fn), static_argnums=1)(x, float(how.split("=")[1]))
    passes = [m for m in {passes!r} if m in sys.modules]
    # Numba's BLAS came without the scipy.linalg package, which still imports and works.
    blas_only = "scipy.linalg" not in sys.modules and "scipy.linalg.cython_blas" in sys.modules
    import scipy.linalg
    solved = float(scipy.linalg.solve(2.0 * np.eye(2), np.ones(2))[0])
    print(json.dumps({{"out": [float(v) for v in out], "passes": passes,
                      "blas_only": blas_only, "solved": solved}}))
""").format(passes=PASSES)

USER = textwrap.dedent("""\
    import numpy as np
    from userconsts import SCALE


    def square(x):
        return np.sum(x * x)


    def edited(x):
        return np.sum(x * x)


    def options(x):
        return np.sum(x * x)


    def scaled(x, s):
        return np.sum(s * x * x)


    def uses_constant(x):
        return np.sum(SCALE * x * x)


    def powered(x, n):
        return np.sum(x ** n)


    def corrupted(x):
        return np.sum(x * x)


    def contracted(x):
        return np.sum(x * x)
""")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A directory with the user's module, and the caches every process of this file shares."""
    root = tmp_path_factory.mktemp("startup")
    (root / "userfns.py").write_text(USER)
    (root / "userconsts.py").write_text("SCALE = 2.0\n")
    (root / "run.py").write_text(SCRIPT)
    return root


class Runner:
    def __init__(self, root):
        self.root = root
        self.log = root / "warmstart.log"

    def __call__(self, how, name, **settings):
        """Run the script in a new process (with `settings` in its environment); (gradient,
        passes imported, log lines written)."""
        env = dict(os.environ, AUTODIFF_AST_CACHE=str(self.root / "modules"),
                   NUMBA_CACHE_DIR=str(self.root / "numba"),
                   AUTODIFF_AST_WARMSTART_LOG=str(self.log), **settings)
        before = self.log.read_text().splitlines() if self.log.exists() else []
        done = subprocess.run([sys.executable, str(self.root / "run.py"), str(self.root), how,
                               name], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["blas_only"] and result["solved"] == 0.5
        after = self.log.read_text().splitlines()
        events = [line.split()[0] for line in after[len(before):]]
        return np.array(result["out"]), result["passes"], events


@pytest.fixture(scope="module")
def run(workdir):
    return Runner(workdir)


X = np.array([1.0, 2.0, 3.0])


def test_second_process_loads_the_module_without_generating(run):
    out, passes, events = run("grad", "square")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"]
    assert "autodiff_ast.normalize" in passes  # the first process generated the module
    out, passes, events = run("grad", "square")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["hit"]
    assert passes == []  # nothing was parsed, normalized, differentiated or lowered


def test_jit_of_a_plain_function_is_indexed_too(run):
    out, _, events = run("primal", "square")
    np.testing.assert_allclose(out, [14.0])
    assert events == ["miss", "stored"]
    out, passes, events = run("primal", "square")
    np.testing.assert_allclose(out, [14.0])
    assert events == ["hit"] and passes == []


def test_warm_start_with_int_and_static_arguments_imports_no_pass(run):
    # a Python int argument is a candidate static value (api's _concrete_ints) and a static
    # argument's spec is a Static: neither may import the normalizer to say so
    out, _, events = run("int=3", "powered")
    np.testing.assert_allclose(out, 3 * X ** 2)
    assert events == ["miss", "stored"]
    out, passes, events = run("int=3", "powered")
    np.testing.assert_allclose(out, 3 * X ** 2)
    assert events == ["hit"] and passes == []
    run("static=4.0", "scaled")
    out, passes, events = run("static=4.0", "scaled")
    np.testing.assert_allclose(out, 8 * X)
    assert events == ["hit"] and passes == []


def test_edited_source_is_not_reused(run, workdir):
    out, _, _ = run("grad", "edited")
    np.testing.assert_allclose(out, 2 * X)
    path = workdir / "userfns.py"
    original = path.read_text()
    path.write_text(original.replace("def edited(x):\n    return np.sum(x * x)\n",
                                     "def edited(x):\n    return np.sum(x * x * x)\n"))
    try:
        out, passes, events = run("grad", "edited")
        np.testing.assert_allclose(out, 3 * X ** 2)
        assert events == ["miss", "stored"] and "autodiff_ast.normalize" in passes
    finally:
        path.write_text(original)
    out, _, events = run("grad", "edited")  # the first version's entry is still good
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["hit"]


def test_changed_options_and_static_values_are_not_reused(run):
    out, _, events = run("grad", "options")
    assert events == ["miss", "stored"]
    out, _, events = run("value_and_grad", "options")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"]
    out, _, events = run("static=2.0", "scaled")
    np.testing.assert_allclose(out, 4 * X)
    assert events == ["miss", "stored"]
    out, _, events = run("static=3.0", "scaled")
    np.testing.assert_allclose(out, 6 * X)
    assert events == ["miss", "stored"]
    out, _, events = run("static=2.0", "scaled")
    np.testing.assert_allclose(out, 4 * X)
    assert events == ["hit"]


def test_a_module_with_multiply_adds_is_not_reused_without_them(run):
    # AUTODIFF_AST_FP_CONTRACT=0 compiles without fastmath={'contract'}: another module
    out, _, events = run("grad", "contracted")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"]
    out, _, events = run("grad", "contracted", AUTODIFF_AST_FP_CONTRACT="0")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"]
    assert run("grad", "contracted", AUTODIFF_AST_FP_CONTRACT="0")[2] == ["hit"]
    assert run("grad", "contracted")[2] == ["hit"]


def test_changed_global_constant_is_not_reused(run, workdir):
    out, _, events = run("grad", "uses_constant")
    np.testing.assert_allclose(out, 4 * X)
    consts = workdir / "userconsts.py"
    consts.write_text("SCALE = 5.0\n")
    try:
        out, _, events = run("grad", "uses_constant")
        np.testing.assert_allclose(out, 10 * X)
        assert events == ["miss", "stored"]
    finally:
        consts.write_text("SCALE = 2.0\n")


def _entry(workdir, name):
    """(index file, module file) of the entry written for function `name`."""
    for path in sorted((workdir / "modules" / "index").glob("*.json")):
        data = json.loads(path.read_text())
        if data["module"] == f"jit_grad_{name}":
            return path, workdir / "modules" / data["file"]
    raise AssertionError(f"no index entry for {name}")


def test_corrupt_module_file_or_index_entry_is_rebuilt(run, workdir):
    out, _, events = run("grad", "corrupted")
    assert events == ["miss", "stored"]
    index, module = _entry(workdir, "corrupted")
    module.write_text(module.read_text() + "\nraise RuntimeError('corrupt')\n")
    out, passes, events = run("grad", "corrupted")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"] and "autodiff_ast.normalize" in passes
    index.write_text("{ not json")
    out, _, events = run("grad", "corrupted")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["miss", "stored"]
    out, passes, events = run("grad", "corrupted")
    np.testing.assert_allclose(out, 2 * X)
    assert events == ["hit"] and passes == []


# ---------------------------------------------------------------- in this process
def test_read_indexed_checks_the_module_text(tmp_path):
    source = "def f(x):\n    return x\n"
    loader.load_source(source, "idx_check", cache_dir=tmp_path)
    key = "0123456789abcdef" * 4
    loader.write_index(key, source, "idx_check", {"entry": "f"}, cache_dir=tmp_path)
    assert loader.read_indexed(key, cache_dir=tmp_path) == (source, "idx_check", {"entry": "f"})
    path = loader.module_path(source, "idx_check", cache_dir=tmp_path)
    path.write_text(source + "# changed\n")
    assert loader.read_indexed(key, cache_dir=tmp_path) is None
    path.unlink()
    assert loader.read_indexed(key, cache_dir=tmp_path) is None
    assert loader.read_indexed("fedcba9876543210" * 4, cache_dir=tmp_path) is None
    with pytest.raises(ValueError, match="hex digest"):
        loader.read_indexed("../escape", cache_dir=tmp_path)


def _defined(source, name="f", scope=None):
    """A function defined by exec with its source registered (as a user's file would be)."""
    import linecache
    filename = f"<startup-test-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np, **(scope or {})}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_fingerprint_covers_source_helpers_and_constants():
    base = "def f(x):\n    return np.sum(x * x)\n"
    f1, f2 = _defined(base), _defined(base)
    assert warmstart.function_fingerprint(f1) == warmstart.function_fingerprint(f2)
    f3 = _defined("def f(x):\n    return np.sum(x * x * x)\n")
    assert warmstart.function_fingerprint(f3) != warmstart.function_fingerprint(f1)
    with_constant = "def f(x):\n    return np.sum(C * x)\n"
    a = _defined(with_constant, scope={"C": 2.0})
    b = _defined(with_constant, scope={"C": 3.0})
    assert warmstart.function_fingerprint(a) != warmstart.function_fingerprint(b)
    helper1 = _defined("def h(x):\n    return x * x\n", "h")
    helper2 = _defined("def h(x):\n    return x * x * x\n", "h")
    calls = "def f(x):\n    return np.sum(h(x))\n"
    c1 = _defined(calls, scope={"h": helper1})
    c2 = _defined(calls, scope={"h": helper2})
    assert warmstart.function_fingerprint(c1) != warmstart.function_fingerprint(c2)
    # An object the key cannot describe: no key, the module is generated as before.
    opaque = _defined("def f(x):\n    return np.sum(obj.w * x)\n", scope={"obj": object()})
    assert warmstart.function_fingerprint(opaque) is None


def test_fingerprint_covers_what_is_read_through_a_users_module():
    """``cfg.SCALE`` and ``layers.act(x)``: a new process reused the gradient written for the
    old constant (folded into the code) or the old helper, since a module was keyed by its
    name alone (session 42's bug hunt)."""
    import types
    reads = "def f(x):\n    return np.sum(cfg.SCALE * layers.act(x))\n"

    def modules(scale, body):
        cfg, layers = types.ModuleType("cfg"), types.ModuleType("layers")
        cfg.SCALE = scale
        layers.act = _defined(f"def act(x):\n    return {body}\n", "act")
        return {"cfg": cfg, "layers": layers}
    base = warmstart.function_fingerprint(_defined(reads, scope=modules(2.0, "np.sin(x)")))
    assert base == warmstart.function_fingerprint(
        _defined(reads, scope=modules(2.0, "np.sin(x)")))
    assert base != warmstart.function_fingerprint(
        _defined(reads, scope=modules(5.0, "np.sin(x)")))
    assert base != warmstart.function_fingerprint(
        _defined(reads, scope=modules(2.0, "np.cos(x)")))
    # a submodule's attribute too (cfg.sub.LIMIT)
    nested = "def f(x):\n    return np.sum(cfg.sub.LIMIT * x)\n"

    def with_sub(limit):
        cfg, sub = types.ModuleType("cfg"), types.ModuleType("cfg.sub")
        cfg.sub, sub.LIMIT = sub, limit
        return {"cfg": cfg}
    assert warmstart.function_fingerprint(_defined(nested, scope=with_sub(1.0))) != \
        warmstart.function_fingerprint(_defined(nested, scope=with_sub(2.0)))


def square(x):
    return np.sum(x * x)


def cube(x):
    return np.sum(x * x * x)


def test_parse_is_cached_per_code_object():
    def f(x):
        return np.sum(x * x)
    first = frontend.cached_parse(f)
    assert frontend.cached_parse(f) is first
    f.__code__ = cube.__code__
    again = frontend.cached_parse(f)
    assert again is not first and again.node.name == "cube"


def test_calls_do_not_parse_again_and_a_new_code_object_regenerates(monkeypatch):
    def f(x):
        return np.sum(x * x)
    df = grad(f)
    np.testing.assert_allclose(df(X), 2 * X)
    calls = []
    real = frontend.parse_function
    monkeypatch.setattr(frontend, "parse_function", lambda fn: calls.append(fn) or real(fn))
    for _ in range(3):
        np.testing.assert_allclose(df(X), 2 * X)
    assert calls == []
    f.__code__ = cube.__code__
    np.testing.assert_allclose(df(X), 3 * X ** 2)


def test_argnums_errors_still_name_the_users_line():
    from autodiff_ast.errors import ArgnumsError
    with pytest.raises(ArgnumsError) as info:
        grad(square, argnums=1.5)(X)
    assert info.value.filename == __file__


def test_importing_the_package_loads_no_pass():
    code = ("import sys, autodiff_ast; from autodiff_ast import grad, jit; "
            f"print([m for m in {PASSES!r} + ('numba', 'scipy') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_jit_and_pmap_stay_functions_after_their_modules_are_imported():
    import autodiff_ast
    import autodiff_ast.jit  # noqa: F401
    import autodiff_ast.pmap  # noqa: F401
    assert callable(autodiff_ast.jit) and autodiff_ast.jit.__name__ == "jit"
    assert callable(autodiff_ast.pmap) and autodiff_ast.pmap.__name__ == "pmap"
    assert set(autodiff_ast.__all__) <= set(dir(autodiff_ast))
    assert all(getattr(autodiff_ast, name) is not None for name in autodiff_ast.__all__)
