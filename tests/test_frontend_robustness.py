"""Front-end robustness: mutated source never produces an internal exception.

Seed programs that we differentiate are mutated (statements we do not support inserted,
names renamed to unicode, comments, odd formatting, decorators, very long bodies); every
mutant is written to a real module file and differentiated in reverse and forward mode. The
result must be a gradient or an AutodiffError naming the file and a line inside the function,
with a hint; any other exception is a leak of our internals.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import autodiff_ast as ad

SEEDS = [
    """def f(x, w):
    y = np.tanh(x * w)
    z = np.sum(y * y)
    return z + w * w
""",
    """def f(x, w):
    acc = 0.0
    for i in range(x.shape[0]):
        acc = acc + np.sin(x[i]) * w
    if acc > 0.0:
        acc = acc * 2.0
    return acc
""",
    """def f(x, w):
    y = np.zeros_like(x)
    for i in range(1, x.shape[0]):
        y[i] = y[i - 1] * 0.5 + x[i] * w
    s = np.sum(y)
    while s < 5.0:
        s = s + 1.0
    return s + helper(w)
""",
]

# Statements we do not (all) support; each runs without error in plain Python.
INSERTS = [
    "try:\n    pass\nexcept Exception:\n    pass",
    "with contextlib.nullcontext():\n    pass",
    "global G",
    "class K:\n    pass",
    "del_me = 1\ndel del_me",
    "print(end='')",
    "assert True",
    "import math as m2",
    "if False:\n    raise ValueError('never')",
    "lam = lambda v: v",
    "for k_ in range(1):\n    pass\nelse:\n    pass",
    "d_ = {k: 1 for k in range(2)}",
    "s_ = {1, 2}",
    "fs_ = f'{1}'",
    "match 1:\n    case 1:\n        pass",
    "l_ = [1.0, 2.0]",
    "t_ = (1, 2)",
    "(wal_ := 3)",
    "n_ = __name__",
    "if False:\n    yield 1",
    "e_ = np.linalg.svdvals(np.eye(2))",
    "r_ = np.random.default_rng(0).normal()",
    "def inner_(v):\n    return v * 2.0",
    "c_ = complex(1, 2)",
    "st_ = 'a' * 3",
    "a_, *b_ = (1, 2, 3)",
    "x = x.astype(np.float32)",
    "w = int(w)",
    "x.sort()",
    "q_ = x.copy()\nq_[0] = 1.0",
    "ws_ = np.sum(x, keepdims=True)",
    "ei_ = eval('1 + 1')",
    "o_ = object()",
    "g_ = (v for v in range(3))",
    "z_ = x if w > 0 else x * 2.0",
    "h_ = hash(3)",
    "bl_ = 2 < 3 < 4",
    "sl_ = x[::2]",
    "pw_ = 2 ** 3",
    "fl_ = 7 // 2",
    "lx_ = len(x) % 2",
]
UNICODE = ["θ", "ñame", "δx", "_Ω1", "ξξ"]
DECORATORS = ["@identity", "@wrapped", "@functools.lru_cache(maxsize=None)", "@staticmethod"]

PRELUDE = """import contextlib
import functools
import math

import numpy as np

G = 1.0


def identity(fn):
    return fn


def wrapped(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    return call


def helper(v):
    return v * v


"""


def _indent(block, spaces):
    return textwrap.indent(block, " " * spaces)


@st.composite
def mutants(draw):
    """A seed program with a few mutations applied (text in, text out)."""
    source = draw(st.sampled_from(SEEDS))
    lines = source.rstrip("\n").split("\n")
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["insert", "rename", "comment", "reformat", "decorate",
                                     "long", "docstring", "annotate"]))
        body = [i for i, line in enumerate(lines) if line.startswith("    ") and
                not line.strip().startswith(("return", "else", "elif", "#"))]
        if kind == "insert":
            at = draw(st.sampled_from(body)) if body else 1
            depth = len(lines[at]) - len(lines[at].lstrip())
            lines[at:at] = _indent(draw(st.sampled_from(INSERTS)), depth).split("\n")
        elif kind == "rename":
            old = draw(st.sampled_from(["y", "acc", "s", "z", "w"]))
            new = draw(st.sampled_from(UNICODE))
            text = "\n".join(lines)
            import re
            lines = re.sub(rf"\b{old}\b", new, text).split("\n")
        elif kind == "comment":
            at = draw(st.integers(1, len(lines) - 1))
            lines[at] = lines[at] + "  # a comment: with 'quotes' and ünïcode"
            lines.insert(at, "    # a whole-line comment")
        elif kind == "reformat" and body:
            at = draw(st.sampled_from(body))
            line = lines[at]
            if " = " in line and not line.rstrip().endswith(":"):
                target, value = line.split(" = ", 1)
                lines[at] = f"{target} = (\n{target[:len(target) - len(target.lstrip())]}" \
                            f"        {value}\n{target[:len(target) - len(target.lstrip())]})"
            else:
                lines[at] = line + "  ;  pass" if not line.rstrip().endswith(":") else line
        elif kind == "decorate":
            lines.insert(0, draw(st.sampled_from(DECORATORS)))
        elif kind == "long" and body:
            at = draw(st.sampled_from(body))
            depth = len(lines[at]) - len(lines[at].lstrip())
            lines[at:at] = [" " * depth + f"pad_{k} = {k}.0 * 0.5" for k in range(150)]
        elif kind == "docstring":
            first = next(i for i, line in enumerate(lines) if line.startswith("def "))
            lines.insert(first + 1, '    """A docstring: with "quotes".\n\n    >>> f(1)\n    """')
        elif kind == "annotate":
            lines = "\n".join(lines).replace("def f(x, w):", "def f(x: np.ndarray, w: float "
                                             "= 2.0) -> float:").split("\n")
    return "\n".join(lines) + "\n"


def _load(source):
    name = "mutant_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    import tempfile
    from pathlib import Path
    path = Path(tempfile.gettempdir()) / "autodiff_ast_mutants" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _differentiate(fn, filename):
    """Run grad and jvp; return None on success or the AutodiffError raised."""
    x, w = np.array([0.3, -0.4, 0.8]), 0.7
    try:
        ad.grad(fn, argnums=(0, 1))(x, w)
        ad.jvp(fn, (x, w), (np.ones(3), 1.0))
    except ad.AutodiffError as err:
        return err
    return None


def _check(source):
    full = PRELUDE + source
    try:
        compile(full, "mutant", "exec")
    except SyntaxError:
        return  # not Python (a mutation can make invalid text): nothing to check
    module = _load(full)
    fn = module.f
    try:
        fn(np.array([0.3, -0.4, 0.8]), 0.7)
    except Exception:  # noqa: BLE001 (the mutant itself fails: no derivative to ask for)
        return
    err = _differentiate(fn, module.__file__)
    if err is not None:
        assert err.hint, f"error without a hint: {err}"
        if err.filename == module.__file__ and err.lineno is not None:
            assert 1 <= err.lineno <= full.count("\n") + 1, str(err)


@settings(max_examples=80, derandomize=True, deadline=None, database=None,
          phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
@given(mutants())
def test_mutants_raise_only_autodiff_errors(source):
    _check(source)


@pytest.mark.parametrize("insert", INSERTS)
def test_every_insert_into_every_seed(insert):
    for seed in SEEDS:
        lines = seed.rstrip("\n").split("\n")
        lines[1:1] = _indent(insert, 4).split("\n")
        _check("\n".join(lines) + "\n")


@pytest.mark.parametrize("decorator", DECORATORS)
def test_decorated_functions(decorator):
    _check(decorator + "\n" + SEEDS[0])


def test_unsupported_statement_names_its_line():
    source = SEEDS[0].replace("    z = np.sum(y * y)\n",
                              "    try:\n        z = np.sum(y * y)\n    except Exception:\n"
                              "        z = 0.0\n")
    module = _load(PRELUDE + source)
    err = _differentiate(module.f, module.__file__)
    assert isinstance(err, ad.UnsupportedSyntaxError)
    assert err.filename == module.__file__
    lines = (PRELUDE + source).split("\n")
    assert lines[err.lineno - 1].strip() == "try:"
    assert "try/except" in str(err) and err.hint


def test_very_long_function():
    body = "".join(f"    y = y * 0.999 + np.sin(x) * {k / 1000.0}\n" for k in range(80))
    source = f"def f(x, w):\n    y = x * w\n{body}    return np.sum(y)\n"
    module = _load(PRELUDE + source)
    assert _differentiate(module.f, module.__file__) is None
    ad.check_grads(module.f, (np.array([0.3, -0.4]), 0.7), order=1, modes=("rev",))


def _closure_lambdas():
    c, d = 1.5, 2.5
    a, b = lambda x: np.sum(np.sin(x) * c), lambda x: np.sum(-np.sin(x) * c)
    e, f = lambda x: np.sum(x * c), lambda x: np.sum(x * d)
    return a, b, e, f


def test_lambdas_on_one_line_each_get_their_own_source():
    """Two lambdas on one line reading the same names and constants (or, in a closure,
    taking the same parameters) were told apart by neither: the second got the first's
    derivative. Their instructions decide now; when even those agree it says so."""
    x = np.array([-4.0, 1.0, 5.0])
    inf, neg_inf = lambda v: np.linalg.norm(v, np.inf), lambda v: np.linalg.norm(v, -np.inf)
    np.testing.assert_allclose(ad.grad(inf)(x), [0.0, 0.0, 1.0])  # |5| is the largest
    np.testing.assert_allclose(ad.grad(neg_inf)(x), [0.0, 1.0, 0.0])
    a, b, e, f = _closure_lambdas()
    np.testing.assert_allclose(ad.grad(a)(x), 1.5 * np.cos(x))
    np.testing.assert_allclose(ad.grad(b)(x), -1.5 * np.cos(x))
    with pytest.raises(ad.SourceUnavailableError, match="cannot tell which lambda"):
        ad.grad(f)(x)
