"""The documentation stays true: its links resolve, docs/architecture.md describes every module,
and the generated code it quotes as "real output" is what the code writes today."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
# Written by `make bench` (benchmarks/run.py), not kept in the repository between runs.
GENERATED = {"BENCHMARKS.md"}


def test_relative_links_resolve():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target in GENERATED:
                continue
            assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"


def test_architecture_describes_every_module():
    text = (REPO / "docs" / "architecture.md").read_text()
    modules = [p.relative_to(REPO).as_posix() for folder in ("autodiff_ast", "codegen")
               for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts]
    missing = [m for m in modules if m not in text and
               not (m.startswith("autodiff_ast/rules/") and Path(m).name in text)]
    assert missing == [], f"docs/architecture.md does not describe {missing}"


def _blocks(text, language):
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_readme_tour_is_real_output(tmp_path):
    readme = (REPO / "README.md").read_text()
    tour = readme[readme.index("## A short tour"):]
    code, shown = _blocks(tour, "python")[:2]
    (tmp_path / "tour.py").write_text(code.replace("dloss(np.zeros", "print(dloss(np.zeros"
                                                   ).replace("np.ones(4))", "np.ones(4)))"))
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "tour.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    first, _, printed = run.stdout.partition("\n")
    assert first == "[-2. -2. -2.]"
    assert printed.strip() == shown.strip()


MODEL = '''\
import numpy as np


def loss(w, x, y):
    pred = np.tanh(x @ w)
    return np.mean((pred - y) ** 2)


def predict(w, x):
    return np.tanh(x @ w)
'''


def test_transforms_page_quotes_real_output(tmp_path):
    """Every generated module in docs/transforms.md is what the command line writes now."""
    page = (REPO / "docs" / "transforms.md").read_text()
    assert MODEL in page
    (tmp_path / "model.py").write_text(MODEL)
    blocks = [b for b in _blocks(page, "python") if b.startswith('"""')]
    wanted = {}
    for block in blocks:
        command = re.search(r"^# autodiff-ast (.*)$", block, re.M).group(1)
        wanted[command] = block
    script = "\n".join([
        "import contextlib, io, json, shlex, sys",
        "from autodiff_ast.cli import main",
        "out = {}",
        f"for command in {list(wanted)!r}:",
        "    buffer = io.StringIO()",
        "    with contextlib.redirect_stdout(buffer):",
        "        assert main(shlex.split(command)) == 0, command",
        "    out[command] = buffer.getvalue()",
        "print(json.dumps(out))",
    ])
    env = dict(os.environ, AUTODIFF_AST_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    import json
    written = json.loads(run.stdout)
    assert len(written) == 8  # grad, vjp, jvp, jacfwd, jacrev, hessian, vmap, --jit numba
    for command, block in wanted.items():
        assert written[command].strip() == block.strip(), command


def test_every_module_docstring_example_runs():
    """The runnable examples in the docstrings of autodiff_ast and codegen modules pass (in a
    process of their own: some load modules or register rules, once per process)."""
    script = textwrap.dedent("""
        import doctest, importlib, pathlib
        failures = {}
        for folder in ("autodiff_ast", "codegen"):
            for path in sorted(pathlib.Path(folder).rglob("*.py")):
                if "__pycache__" in path.parts or path.name == "__main__.py":
                    continue
                parts = path.with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                result = doctest.testmod(importlib.import_module(name),
                                         optionflags=doctest.ELLIPSIS)
                if result.failed:
                    failures[name] = result.failed
        print("FAILED", failures)
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "FAILED {}" in run.stdout, run.stdout[-4000:]
