"""Tests for codegen.loader."""

from __future__ import annotations

import doctest
import inspect
import os
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

from codegen import loader
from codegen.loader import PACKAGE, cache_dir, load_source, module_path

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tmp_cache(tmp_path):
    return tmp_path / "modules"


def _unique_source(request, body):
    # The loader memoizes by content, so every test loads source of its own.
    return f"# test: {request.node.nodeid}\n{textwrap.dedent(body)}"


def test_loads_functions_from_a_real_file(request, tmp_cache):
    source = _unique_source(request, "def twice(x):\n    return 2 * x\n")
    module = load_source(source, "gen_twice", cache_dir=tmp_cache)
    assert module.twice(21) == 42
    path = module_path(source, "gen_twice", cache_dir=tmp_cache)
    assert path.parent == tmp_cache
    assert path.name.startswith("gen_twice_") and len(path.stem) == len("gen_twice_") + 16
    assert path.read_bytes() == source.encode("utf-8")
    assert module.__file__ == str(path)
    assert module.__name__ == f"{PACKAGE}.{path.stem}"
    assert sys.modules[module.__name__] is module
    assert getattr(sys.modules[PACKAGE], path.stem) is module
    assert list(tmp_cache.iterdir()) == [path]  # no temporary files, no __pycache__


def test_same_source_gives_the_same_module(request, tmp_cache):
    source = _unique_source(request, "counter = []\n")
    first = load_source(source, "gen_same", cache_dir=tmp_cache)
    first.counter.append(1)
    second = load_source(source, "gen_same", cache_dir=tmp_cache)
    assert second is first and second.counter == [1]
    other_name = load_source(source, "gen_same_other", cache_dir=tmp_cache)
    assert other_name is not first
    other_source = load_source(source + "x = 1\n", "gen_same", cache_dir=tmp_cache)
    assert other_source is not first and other_source.__file__ != first.__file__


def test_traceback_shows_the_generated_line(request, tmp_cache):
    source = _unique_source(
        request,
        """
        def helper(x):
            return 1.0 / x

        def outer(x):
            y = x - 1.0
            return helper(y) + 2.0
        """,
    )
    module = load_source(source, "gen_boom", cache_dir=tmp_cache)
    try:
        module.outer(1.0)
    except ZeroDivisionError:
        text = traceback.format_exc()
    else:
        pytest.fail("expected ZeroDivisionError")
    assert f'File "{module.__file__}", line ' in text
    assert "return 1.0 / x" in text
    assert "return helper(y) + 2.0" in text


def test_getsource_works(request, tmp_cache):
    body = "def poly(x):\n    # a comment survives\n    return x * x + 1\n"
    source = _unique_source(request, "import math\n\n" + body)
    module = load_source(source, "gen_src", cache_dir=tmp_cache)
    assert inspect.getsource(module.poly) == body
    assert inspect.getsource(module) == source
    assert inspect.getsourcefile(module.poly) == module.__file__


def test_unicode_source(request, tmp_cache):
    source = _unique_source(request, 'def greet():\n    return "naïve ∂"\n')
    module = load_source(source, "gen_unicode", cache_dir=tmp_cache)
    assert module.greet() == "naïve ∂"
    assert Path(module.__file__).read_text(encoding="utf-8") == source


@pytest.mark.parametrize("corruption", ["garbage", "truncated", "empty"])
def test_corrupt_file_is_rewritten(request, tmp_cache, corruption):
    source = _unique_source(request, "def value():\n    return 'the real one'\n")
    path = module_path(source, "gen_corrupt", cache_dir=tmp_cache)
    tmp_cache.mkdir(parents=True)
    bad = {
        "garbage": "def value():\n    return 'corrupt'\n",
        "truncated": source[: len(source) // 2],
        "empty": "",
    }[corruption]
    path.write_text(bad, encoding="utf-8")
    module = load_source(source, "gen_corrupt", cache_dir=tmp_cache)
    assert module.value() == "the real one"
    assert path.read_text(encoding="utf-8") == source
    assert "'the real one'" in inspect.getsource(module.value)
    assert sorted(p.name for p in tmp_cache.iterdir()) == [path.name]


def test_identical_file_is_reused_untouched(request, tmp_cache):
    # Numba's cache is keyed on the source file's mtime: an existing file must not be rewritten.
    source = _unique_source(request, "answer = 42\n")
    path = module_path(source, "gen_reuse", cache_dir=tmp_cache)
    tmp_cache.mkdir(parents=True)
    path.write_text(source, encoding="utf-8")
    old = time.time() - 3600
    os.utime(path, (old, old))
    module = load_source(source, "gen_reuse", cache_dir=tmp_cache)
    assert module.answer == 42
    assert path.stat().st_mtime == pytest.approx(old)


@pytest.mark.parametrize("winner", ["same", "corrupt", "no_hard_links"])
def test_write_races(request, tmp_cache, monkeypatch, winner):
    """Another process creates the file between our check and our link."""
    source = _unique_source(request, "value = 'ours'\n")
    path = module_path(source, "gen_race", cache_dir=tmp_cache)
    real_link = os.link

    def racing_link(src, dst):
        if winner == "no_hard_links":
            raise PermissionError("hard links not supported here")
        Path(dst).write_text(source if winner == "same" else "value = 'bad'\n", encoding="utf-8")
        os.utime(dst, (1_000_000, 1_000_000))
        return real_link(src, dst)

    monkeypatch.setattr(loader.os, "link", racing_link)
    module = load_source(source, "gen_race", cache_dir=tmp_cache)
    assert module.value == "ours"
    assert path.read_text(encoding="utf-8") == source
    kept_winners_file = path.stat().st_mtime == 1_000_000
    assert kept_winners_file == (winner == "same")
    assert sorted(p.name for p in tmp_cache.iterdir()) == [path.name]


def test_errors_while_executing_leave_nothing_registered(request, tmp_cache):
    source = _unique_source(request, "raise RuntimeError('module body failed')\n")
    path = module_path(source, "gen_fails", cache_dir=tmp_cache)
    name = f"{PACKAGE}.{path.stem}"
    for _ in range(2):  # not memoized: a second load runs the body again
        with pytest.raises(RuntimeError, match="module body failed"):
            load_source(source, "gen_fails", cache_dir=tmp_cache)
        assert name not in sys.modules


def test_syntax_error_names_the_generated_file(request, tmp_cache):
    source = _unique_source(request, "def broken(:\n    pass\n")
    with pytest.raises(SyntaxError) as info:
        load_source(source, "gen_syntax", cache_dir=tmp_cache)
    assert info.value.filename == str(module_path(source, "gen_syntax", cache_dir=tmp_cache))


@pytest.mark.parametrize("name", ["", "has-dash", "a.b", "../escape", "1abc", "a b", None])
def test_module_name_must_be_an_identifier(name, tmp_cache):
    with pytest.raises(ValueError, match="identifier"):
        load_source("x = 1\n", name, cache_dir=tmp_cache)


def test_cache_dir_default_and_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("AUTODIFF_AST_CACHE", raising=False)
    assert cache_dir() == Path.home() / ".cache" / "autodiff_ast" / "modules"
    monkeypatch.setenv("AUTODIFF_AST_CACHE", str(tmp_path / "env-cache"))
    assert cache_dir() == tmp_path / "env-cache"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTODIFF_AST_CACHE", "relative")
    assert cache_dir() == tmp_path / "relative"


def test_load_source_uses_the_environment_default(request, monkeypatch, tmp_path):
    monkeypatch.setenv("AUTODIFF_AST_CACHE", str(tmp_path / "from-env"))
    source = _unique_source(request, "y = 3\n")
    module = load_source(source, "gen_env")
    assert Path(module.__file__).parent == tmp_path / "from-env"


def test_pickle_finds_generated_functions(request, tmp_cache):
    import pickle

    source = _unique_source(request, "def f(x):\n    return x + 1\n")
    module = load_source(source, "gen_pickle", cache_dir=tmp_cache)
    assert pickle.loads(pickle.dumps(module.f)) is module.f


def _run_together(script: str, count: int, env: dict[str, str], go_file: Path):
    """Start ``count`` copies of ``script``; they all wait for ``go_file`` and then race."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    time.sleep(0.5)  # let them import and reach the barrier
    go_file.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out, err))
    return results


_WAIT_FOR_GO = """
import os, time
go = os.environ["GO_FILE"]
deadline = time.time() + 60
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.001)
"""


def test_concurrent_processes_share_one_file(tmp_path):
    shared = tmp_path / "shared-cache"
    source = "def cube(x):\n    return x * x * x\n" + "# padding\n" * 2000
    script = _WAIT_FOR_GO + textwrap.dedent(
        f"""
        from codegen.loader import load_source
        module = load_source({source!r}, "gen_shared", cache_dir={str(shared)!r})
        assert module.cube(3) == 27
        print(module.__file__)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GO_FILE": str(tmp_path / "go")}
    results = _run_together(script, 4, env, tmp_path / "go")
    for code, _, err in results:
        assert code == 0, err
    files = {out.strip() for _, out, _ in results}
    expected = module_path(source, "gen_shared", cache_dir=shared)
    assert files == {str(expected)}
    assert expected.read_bytes() == source.encode("utf-8")
    assert sorted(p.name for p in shared.iterdir()) == [expected.name]


@pytest.mark.numba
@pytest.mark.slow
def test_numba_cache_works_across_concurrent_processes(tmp_path):
    pytest.importorskip("numba")
    shared = tmp_path / "modules"
    source = textwrap.dedent(
        """
        import numba
        import numpy as np


        @numba.njit(cache=True)
        def affine(x, a):
            out = np.empty_like(x)
            for i in range(x.shape[0]):
                out[i] = a * x[i] + 1.0
            return out
        """
    )
    script = _WAIT_FOR_GO + textwrap.dedent(
        f"""
        import numpy as np
        from codegen.loader import load_source
        module = load_source({source!r}, "gen_numba", cache_dir={str(shared)!r})
        assert module.affine(np.arange(3.0), 2.0).tolist() == [1.0, 3.0, 5.0]
        print(sum(module.affine.stats.cache_hits.values()))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "GO_FILE": str(tmp_path / "go"),
        "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache"),
    }
    # Two cold processes compile and write the cache at the same time...
    for code, _, err in _run_together(script, 2, env, tmp_path / "go"):
        assert code == 0, err
    # ...and a later process loads the compiled code from it.
    again = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert int(again.stdout.strip()) >= 1


def test_docstring_examples():
    result = doctest.testmod(loader)
    assert result.attempted > 0
    assert result.failed == 0


def test_malloc_thresholds_are_raised_once_unless_opted_out():
    """codegen.allocator raises glibc's mmap/trim thresholds the first time (and only then);
    AUTODIFF_AST_MALLOC_TUNING=0 leaves them alone. Checked in fresh processes."""
    import platform

    code = ("from codegen.allocator import keep_large_blocks as k; "
            "print(k(), k())")
    expected = "True True" if platform.system() == "Linux" and \
        platform.libc_ver()[0] == "glibc" else "False False"
    env = dict(os.environ)
    env.pop("AUTODIFF_AST_MALLOC_TUNING", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split("\n")[0]
    assert out == expected
    env["AUTODIFF_AST_MALLOC_TUNING"] = "0"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.split("\n")[0]
    assert out == "False False"


def test_data_of_a_module_run_by_runpy_is_injected(tmp_path):
    # runpy.run_path runs a file as the module "<run_path>": no import line can name it, so
    # the generated module gets its data from the loader (it wrote `from <run_path> import`).
    import runpy
    script = tmp_path / "run_me.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import autodiff_ast as ad

        W = np.array([0.5, -1.0, 2.0])

        def f(x):
            return np.sum(W * np.sin(x))

        X = np.array([0.1, 0.2, 0.3])
        GRADIENT = ad.grad(f)(X)
    """))
    result = runpy.run_path(str(script))
    want = result["W"] * np.cos(result["X"])
    np.testing.assert_allclose(result["GRADIENT"], want, rtol=1e-12)
