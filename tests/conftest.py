"""Shared test fixtures and environment.

The environment variables must be set before anything imports numba: bounds checking makes an
out-of-range index in generated code fail loudly, and the CUDA simulator runs kernels on the CPU
(no GPU on CI). Generated modules go to the project's own cache unless the caller chose one.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

os.environ["NUMBA_BOUNDSCHECK"] = "1"
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
os.environ.setdefault("AUTODIFF_AST_CACHE", str(REPO_ROOT / ".cache" / "modules"))
os.environ.setdefault("NUMBA_CACHE_DIR", str(REPO_ROOT / ".cache" / "numba"))

import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# The directory numpy is installed in: a bare interpreter can import numpy from it without the
# .pth files that make autodiff_ast importable (it is installed in editable mode).
SITE_PACKAGES = str(Path(np.__file__).resolve().parents[1])


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current output instead of comparing "
                          "(same as AUTODIFF_AST_REGEN_GOLDEN=1)")


@pytest.fixture
def rng():
    """A seeded NumPy generator: every test draws the same numbers on every run."""
    return np.random.default_rng(0)


@pytest.fixture(scope="module")
def quick_llvm():
    """LLVM at -O0 while a test module compiles: typing and lowering, which decide whether
    Numba accepts the code, are the same at every level, and compiling is the tests' cost
    (the level is part of a generated module's text, so these never meet optimized ones)."""
    import numba
    from numba.core.registry import cpu_target
    # Numba makes its LLVM target machine once per process, at the level set then: made
    # here at -O0, it would stay so for every later compile (no multiply-adds formed, which
    # test_jit's test_multiply_adds_are_on_by_default_and_off_on_request saw), so make it
    # first at the normal level
    cpu_target.target_context.codegen()
    saved = numba.config.OPT
    numba.config.OPT = numba.core.config._OptLevel(0)
    yield
    numba.config.OPT = saved


@pytest.fixture(scope="session")
def regen_golden(request):
    """Whether golden files should be rewritten instead of compared."""
    return bool(request.config.getoption("--regen-golden")) or \
        os.environ.get("AUTODIFF_AST_REGEN_GOLDEN", "") not in ("", "0")


@pytest.fixture(scope="session")
def golden(regen_golden):
    """``golden(name, text)``: fail with a diff when `text` differs from tests/golden/<name>.

    With --regen-golden the file is rewritten instead; a missing file is written and the test
    fails so that it gets reviewed and committed.
    """
    import difflib
    directory = Path(__file__).resolve().parent / "golden"

    def compare(name, text):
        path = directory / name
        if regen_golden or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if not regen_golden:
                pytest.fail(f"{path} did not exist; it was written now: review and commit it")
            return
        expected = path.read_text()
        if text != expected:
            diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                f"golden/{name}", "generated now"))
            pytest.fail(f"generated source differs from golden/{name} (regenerate with "
                        f"--regen-golden if intended and review):\n{diff}")
    return compare


@pytest.fixture
def run_isolated():
    """Run Python code in a fresh interpreter that can import numpy and the files in `cwd`, but
    not autodiff_ast or codegen (``-I -S``: no site, no .pth, no environment, no user path).

    Returns the CompletedProcess; the code fails if autodiff_ast is importable.
    """
    def run(code, cwd, timeout=60):
        prelude = (f"import sys; sys.path[:0] = [{str(cwd)!r}, {SITE_PACKAGES!r}]\n"
                   "import importlib.util\n"
                   "assert importlib.util.find_spec('autodiff_ast') is None\n"
                   "assert importlib.util.find_spec('codegen') is None\n")
        return subprocess.run([sys.executable, "-I", "-S", "-c", prelude + code], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)
    return run
