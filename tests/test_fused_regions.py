"""Whole-vector statements and their sums in one loop under jit (codegen/fused_regions.py).

Every compiled gradient is compared with the plain-NumPy gradient of the same function and
with central differences (test_vector_loops._grads_agree), every compiled value with the
function's own; the generated source is checked to show the run was replaced by a fused call
(a test cannot pass through code that was never fused). Arguments that are no float64
vectors of one length take the statements as written: their results are checked too.
"""

from __future__ import annotations

import ast

import gast
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from autodiff_ast.templates import unparse
from codegen.dialect import lower_source, render
from codegen.fused_regions import fuse_regions

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


# ---------------------------------------------------------------- programs
def line_fit(w, b, x, y):
    """Linear regression's loss: its gradient is one elementwise run and two sums."""
    r = w * x + b - y
    return np.sum(r * r) / x.shape[0]


def soft_terms(x, y, c):
    """Math calls, a power and a value read after the run (t[0])."""
    u = np.exp(-c * x) + np.log1p(y * y)
    t = np.tanh(u) ** 2 - 0.5 * np.maximum(x, y)
    total = np.sum(t)
    return total + t[0] * c


def _fused_calls(source):
    tree = ast.parse(source)
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and
            isinstance(n.func, ast.Name) and n.func.id.startswith("fused")]


# ---------------------------------------------------------------- the rewrite itself
def _rewrite(text):
    fn = gast.parse(text).body[0]
    sources = {}
    taken = {n.id for n in gast.walk(fn) if isinstance(n, gast.Name)}
    names = fuse_regions(fn, taken, sources)
    return unparse(fn), names, sources


def test_a_run_with_sums_becomes_one_call_and_keeps_its_comments():
    text, names, sources = _rewrite('''
def f(w, x, y):
    n = x.shape[0]
    r = w * x - y
    r_bar = 2.0 * (r / x.shape[0])
    w_bar = sum_of_products(r_bar, x)
    total = np.sum(r_bar)
    return (w_bar, total, n)
''')
    assert names == ["fused"]
    assert "w_bar, total = fused(w, x, y, x.shape[0])" in text
    assert "n = x.shape[0]" in text  # a number alone: nothing to fuse
    loop = sources["fused"].split("def fused_loop")[1]
    assert "w_bar += r_bar * element(x, i)" in loop and "total += r_bar" in loop
    assert "r_bar = 2.0 * (r / x_shape_0)" in loop


@pytest.mark.parametrize("text", [
    # one statement: NumPy (and Numba's array expressions) already make one pass
    "def f(x):\n    s = np.sum(x)\n    return s\n",
    # no sum: an elementwise chain, or numbers alone
    "def f(x, y):\n    a = x + y\n    b = np.exp(a) * 2.0\n    return b\n",
    "def f(p):\n    a = 0.25 * p\n    b = a * (p - 1)\n    return b\n",
    # a value reading a sum of the same run needs a second pass: the runs split there
    "def f(x):\n    s = np.sum(x)\n    c = x - s\n    return c\n",
    # a name updated from its own earlier value
    "def f(x, t):\n    t = t + x\n    s = np.sum(t)\n    return s\n",
    # a keyword, an axis, a comparison, a subscript: not elementwise
    "def f(x):\n    a = np.sum(x, axis=0)\n    b = np.sum(a)\n    return b\n",
    "def f(x, y):\n    a = x > y\n    b = np.sum(a)\n    return b\n",
    "def f(x):\n    a = x[::2] * 2.0\n    b = np.sum(a)\n    return b\n",
    # slices: a view bound to a name, slices of a value the run makes, two slices of an
    # array the run writes, a written array also read whole
    "def f(x):\n    a = x[1:]\n    return a\n",
    # one sum of a name or a slice: Numba sums it without a temporary
    "def f(x):\n    b = np.sum(x[1:])\n    return b\n",
    "def f(x):\n    a = x * 2.0\n    b = np.sum(a[1:])\n    return b\n",
    "def f(x, g):\n    g[:-1] = g[:-1] + x[:-1]\n    g[1:] = g[1:] - x[1:]\n    return g\n",
    "def f(x, g):\n    g[1:] = x[1:] * 2.0\n    s = np.sum(g)\n    return s\n",
    # a name the fused helper relies on
    "def f(x):\n    element = x * 2.0\n    b = np.sum(element)\n    return b\n",
])
def test_runs_left_alone(text):
    rewritten, names, _ = _rewrite(text)
    assert names == [] and rewritten.strip() == text.strip()


@pytest.mark.parametrize("copy", ["a = x", "a = x[1:]"])
def test_a_copy_or_a_view_stays_before_the_run(copy):
    """`a = x` and `a = x[1:]` bind an array another statement may write: no part of a run
    (a run would make `a` a new array); the sum after it is fused alone (its operand would
    otherwise be a temporary array)."""
    text, names, _ = _rewrite(f"def f(x, y):\n    {copy}\n    b = np.sum(a * y)\n"
                              "    return (a, b)\n")
    assert names == ["fused"]
    assert f"{copy}\n    b = fused(a, y)" in text


def test_a_run_binding_a_name_twice_splits():
    _, names, sources = _rewrite('''
def f(x, y):
    a = x * y
    s = np.sum(a)
    a = x - y
    t = np.sum(a * a)
    return (s, t)
''')
    assert names == ["fused", "fused_2"]


def test_slices_written_in_place_split_where_another_slice_of_them_is_read():
    """A Hessian-vector product's shape: reads of `x[1:]` and `x[:-1]`, in-place updates
    of `g[:-1]`, then of `g[1:]` (which would read what another step wrote: a second run)."""
    text, names, sources = _rewrite('''
def f(x, v):
    g = np.zeros_like(x)
    g[:-1] = 2.0 * v[:-1]
    s = 200.0 * (x[1:] - x[:-1] ** 2)
    g[:-1] += -s * x[:-1]
    g[1:] = g[1:] + s
    g[1:] += v[1:] * s
    return g
''')
    assert names == ["fused", "fused_2"]
    assert "s = fused(v[:-1], g[:-1], x[1:], x[:-1])" in text
    assert "fused_2(g[1:], s, v[1:])" in text
    loop = sources["fused"].split("def fused_loop")[1]
    # a written slice against each other argument
    assert "overlapping(g_to_m1, v_to_m1) or overlapping(g_to_m1, x_from_1)" in loop
    assert "g_to_m1_i = g_to_m1_i + -s * x_to_m1_i" in loop  # the element in a local
    assert "g_to_m1[i] = g_to_m1_i" in loop  # stored once, at the end of the step


def test_batched_code_runs_become_loop_nests():
    """A function slicing along two axes (vmap's batched code) may hold matrices: its runs
    take slices along the last axis (`x_dot[:, 1:]`) and become loop nests over rows and
    elements; a sum alone is still no run."""
    text, names, sources = _rewrite('''
def f(x, x_dot, g):
    d = x_dot[:, 1:] * 2.0
    g[:-1] = g[:-1] + x[1:]
    g[:-1] += x[:-1] * x[1:]
    s = np.sum(x * x)
    return (d, s)
''')
    assert names == ["fused"]
    assert "d, s = fused(x_dot[:, 1:], g[:-1], x[1:], x[:-1], x)" in text
    loop = sources["fused"].split("def fused_loop")[1]
    assert "x_dot_cols_from_1_i = element_at(x_dot_cols_from_1, r, i)" in loop
    assert "store_at(g_to_m1, r, i, g_to_m1_i)" in loop  # the new elements, from row 0 on
    text, names, _ = _rewrite('''
def f(x, x_dot):
    s = np.sum(x_dot[:, 1:] * x[:-1])
    return s
''')
    assert names == [] and "fused" not in text


_NEST_SOURCE = '''\
import numpy as np


def f(x, x_dot, g, g_dot, c):
    d = x_dot[:, 1:] * x[1:] + c
    s = x[1:] * 2.0 - c
    g_dot[:, :-1] = g_dot[:, :-1] + d * s
    g[:-1] = g[:-1] + s * x[:-1]
    t = np.sum(d * x[:-1])
    u = np.sum(s * s)
    m = np.mean(d)
    return (d, s, t, u, m, g, g_dot)


def h(x, x_dot, g):
    g[:-1] = g[:-1] + x[1:]
    d = x_dot[:, :-1] * g[:-1]
    e = d + 1.0
    return (d, e)
'''


@pytest.fixture(scope="module")
def nest_module():
    """_NEST_SOURCE lowered and compiled: f's run mixes matrix and vector statements, h's
    reads a vector it writes beside a matrix (the loop nest refuses it)."""
    lowered = lower_source(_NEST_SOURCE, entries=("f", "h"), numba_overloads=True)
    text = render(lowered, decorator="numba.njit(error_model='numpy')")
    assert "= fused(" in text and "= fused_2(" in text, text
    namespace = {"__source__": text}
    exec(compile("import numba\n" + text, "<nests>", "exec"), namespace)
    return namespace


def _nest_chosen(module, function, values):
    """Whether Numba's form of the fused helper `function` calls is its loop nest (not the
    statements) for these argument values: the overload asked with the call's types."""
    from numba import typeof
    tree = ast.parse(module["__source__"])
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    call = next(n for n in ast.walk(fn) if isinstance(n, ast.Call) and
                isinstance(n.func, ast.Name) and n.func.id.startswith("fused"))
    args = [eval(ast.unparse(a), {"np": np}, dict(values)) for a in call.args]
    chosen = module[f"{call.func.id}_numba"](*(typeof(a) for a in args))
    return chosen.__name__.endswith("_loop")


def _plain(name):
    namespace = {}
    exec(compile(_NEST_SOURCE, "<plain nests>", "exec"), namespace)
    return namespace[name]


@pytest.mark.parametrize("case", ["batched", "one row", "rows broadcast", "no rows",
                                  "overlapping", "float32"])
def test_loop_nests_agree_with_numpy(case, nest_module):
    """Matrix statements keep every row; a vector's value, sum and new elements are kept
    once (from the first row), whatever the number of rows. Rows that broadcast, no rows,
    memory shared by a written matrix and a read one, and other dtypes take the statements
    as written."""
    rng = np.random.default_rng(9)
    n, rows = 7, {"one row": 1, "no rows": 0}.get(case, 5)
    x = rng.standard_normal(n)

    def make():
        x_dot = rng.standard_normal((1 if case == "rows broadcast" else rows, n))
        g, g_dot = rng.standard_normal(n), rng.standard_normal((rows, n))
        if case == "overlapping":
            g_dot = x_dot
        if case == "float32":
            x_dot = x_dot.astype(np.float32)
        return x, x_dot, g, g_dot, 0.3

    state = rng.bit_generator.state
    want = _plain("f")(*make())
    rng.bit_generator.state = state
    args = make()
    got = nest_module["f"](*args)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        assert np.shape(g) == np.shape(e)
    values = dict(zip(("x", "x_dot", "g", "g_dot", "c"), args))
    assert _nest_chosen(nest_module, "f", values) == (case != "float32")


def test_a_matrix_statement_reading_a_written_vector_takes_the_statements(nest_module):
    from numba import typeof
    rng = np.random.default_rng(10)
    x, x_dot, g = rng.standard_normal(6), rng.standard_normal((4, 6)), rng.standard_normal(6)
    want = _plain("h")(x, x_dot, g.copy())
    got = nest_module["h"](x, x_dot, g.copy())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert not _nest_chosen(nest_module, "h", {"x": x, "x_dot": x_dot, "g": g})
    # a matrix written in place may be read beside other matrices
    assert _nest_chosen(nest_module, "h", {"x": x, "x_dot": x_dot, "g": np.zeros((5, 6))})
    nest_types = nest_module["nest_types"]
    reads = ((0, 1), (0, 1, 2), (0, 1, 2))  # g[:-1] written; d and e read it and x_dot
    types = (typeof(g[:-1]), typeof(x[1:]), typeof(x_dot[:, :-1]))
    assert not nest_types(types, reads, ((0, 1, 2), (0, 1, 2)), 3, (0,))
    assert nest_types(types[:2] + (typeof(x[:-1]),), reads, ((0, 1, 2),), 3, (0,))


def _slice_updates(a, b, c):
    a[1:] = b[1:] * 2.0
    a[1:] = a[1:] + c[:-1] * b[1:]
    return a


@pytest.mark.parametrize("case", ["apart", "same array", "shifted view", "matrices",
                                  "integers", "lengths differ"])
def test_slice_updates_agree_with_numpy_however_the_arguments_overlap(case):
    """A lowered module with one fused run writing a[1:]: arguments that share memory (the
    loop would read what it wrote) and arguments of other kinds take the statements."""
    source = '''\
import numpy as np


def f(a, b, c):
    a[1:] = b[1:] * 2.0
    a[1:] = a[1:] + c[:-1] * b[1:]
    return a
'''
    rng = np.random.default_rng(5)
    base = rng.standard_normal(12)
    if case == "apart":
        make = lambda: (np.zeros(12), base.copy(), base[::-1].copy())  # noqa: E731
    elif case == "same array":
        make = lambda: (lambda a: (a, a, a))(base.copy())  # noqa: E731
    elif case == "shifted view":
        make = lambda: (lambda a: (a[2:], a[:-2], a[1:-1]))(base.copy())  # noqa: E731
    elif case == "matrices":
        make = lambda: (np.zeros((4, 3)), base.reshape(4, 3).copy(),  # noqa: E731
                        base.reshape(4, 3)[::-1].copy())
    elif case == "integers":
        make = lambda: (np.zeros(12), np.arange(12), np.arange(12) * 3)  # noqa: E731
    else:
        make = lambda: (np.zeros(12), base.copy(), base[:5].copy())  # noqa: E731
    lowered = lower_source(source, entries=("f",), numba_overloads=True)
    text = render(lowered, decorator="numba.njit(error_model='numpy')")
    assert "fused(b[1:], a[1:], c[:-1])" in text
    namespace = {}
    exec(compile("import numba\n" + text, "<slice updates>", "exec"), namespace)
    args = make()
    if case == "lengths differ":
        with pytest.raises(ValueError):
            namespace["f"](*args)
        return
    want = _slice_updates(*make())
    got = namespace["f"](*args)
    # (a loop reading what it wrote would be off by whole values; the loop's multiply-adds
    # round once where NumPy rounds twice)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def test_a_hessian_vector_product_of_shifted_slices_is_fused_and_right():
    """jit(jvp(grad(f))) of the Rosenbrock function: forward over reverse, against the
    tridiagonal Hessian written out by hand."""
    from autodiff_ast.jacobians import jvp_transform
    rng = np.random.default_rng(6)
    x, v = rng.uniform(-1.2, 1.2, 500), rng.standard_normal(500)
    hvp = ad.jit(jvp_transform(ad.grad(rosenbrock)))
    g, hv = hvp((x,), (v,))
    diag = np.zeros(500)
    diag[:-1] = 1200.0 * x[:-1] ** 2 - 400.0 * x[1:] + 2.0
    diag[1:] += 200.0
    off = -400.0 * x[:-1]
    want = diag * v
    want[:-1] += off * v[1:]
    want[1:] += off * v[:-1]
    np.testing.assert_allclose(hv, want, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(g, ad.grad(rosenbrock)(x), rtol=1e-12)
    assert len(_fused_calls(hvp.source)) >= 2, hvp.source
    assert "x_bar[1:]" in hvp.source


def test_rosenbrock_gradient_fuses_its_slices():
    compiled = _grads_agree(rosenbrock, (np.linspace(-1.0, 1.5, 200),), (0,))
    assert _fused_calls(compiled.source), compiled.source


# ---------------------------------------------------------------- compiled results
@pytest.fixture(scope="module")
def line_data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000)
    return 0.7, -0.2, x, 2.0 * x + 0.3 + 0.05 * rng.standard_normal(1000)


def test_line_fit_gradient_is_fused_and_right(line_data):
    compiled = _grads_agree(line_fit, line_data, (0, 1))
    calls = _fused_calls(compiled.source)
    assert calls, compiled.source
    w, b, x, y = line_data
    r = w * x + b - y
    want = (2.0 * np.dot(r, x) / x.size, 2.0 * np.sum(r) / x.size)
    np.testing.assert_allclose(compiled(*line_data), want, rtol=1e-12)


def test_math_calls_and_a_value_read_after_the_run():
    rng = np.random.default_rng(4)
    args = (rng.standard_normal(300), rng.standard_normal(300), 0.4)
    compiled = _grads_agree(soft_terms, args, (0, 1, 2))
    primal = ad.jit(soft_terms)
    primal(*args)
    assert _fused_calls(primal.source), primal.source  # t is made whole: t[0] reads it
    assert "t_values[i] = t" in primal.source
    assert compiled is not None


@pytest.mark.parametrize("case", ["length-one", "matrices", "integers", "empty"])
def test_other_arguments_take_the_statements(case, line_data):
    w, b, x, y = line_data
    if case == "length-one":  # broadcasting: the lengths differ at run time
        args = (w, b, x, y[:1].copy())
    elif case == "matrices":
        args = (w, b, x[:600].reshape(20, 30), y[:600].reshape(20, 30))
    elif case == "integers":
        args = (w, b, np.arange(7), np.arange(7) * 2.0)
    else:
        args = (w, b, np.zeros(0), np.zeros(0))
    compiled = ad.jit(ad.grad(line_fit, argnums=(0, 1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        got = compiled(*args)
        want = ad.grad(line_fit, argnums=(0, 1))(*args)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert _fused_calls(compiled.source)


def test_a_length_of_a_number_is_a_clear_error():
    with pytest.raises(ad.UnsupportedSyntaxError, match="out of range"):
        ad.grad(line_fit, argnums=(0, 1))(0.7, -0.2, 1.5, 0.5)


def test_lengths_that_do_not_broadcast_raise_as_numpy_does(line_data):
    w, b, x, y = line_data
    compiled = ad.jit(ad.grad(line_fit, argnums=(0, 1)))
    compiled(*line_data)
    with pytest.raises(ValueError):
        compiled(w, b, x[:5], y[:4])


# a run of one statement and a sum, as a module of its own
_SQUARES = '''\
import numpy as np


def f(w, x, y):
    r = w * x - y
    total = np.sum(r * r)
    return total
'''


def test_the_plain_module_runs_without_numba_and_agrees(line_data):
    """The lowered module's fused helper, called as plain Python, runs the statements."""
    source = _SQUARES
    _, _, x, y = line_data
    want = np.sum((0.5 * x - y) ** 2)
    for decorator in (None, "numba.njit(error_model='numpy')"):
        lowered = lower_source(source, entries=("f",), numba_overloads=True)
        text = render(lowered, decorator=decorator)
        assert "total = fused(w, x, y)" in text
        namespace = {}
        exec(compile("import numba\n" + text, f"<fused {decorator}>", "exec"), namespace)
        assert namespace["f"](0.5, x, y) == pytest.approx(want, rel=1e-12)
        # a number where the run reads a vector: element(x, i) is x
        assert namespace["f"](0.5, 2.0, y) == pytest.approx(np.sum((1.0 - y) ** 2), rel=1e-12)
        # numbers alone: the statements as written
        assert namespace["f"](0.5, 2.0, 0.25) == pytest.approx(0.75 ** 2, rel=1e-12)


def test_a_sum_in_the_statement_ending_the_run_joins_it():
    text, names, sources = _rewrite('''
def f(w, x, y):
    r = w * x - y
    return np.sum(r * r) / x.shape[0] + (np.sum(y) if w > 0 else 0.0)
''')
    assert names == ["fused"]
    assert "total = fused(w, x, y)" in text
    assert "return total / x.shape[0] + (np.sum(y) if w > 0 else 0.0)" in text
    _, names, _ = _rewrite('''
def f(w, x, y):
    r = w * x - y
    return helper(np.sum(r * r))
''')
    assert names == []


def test_line_fit_primal_is_fused(line_data):
    primal = ad.jit(line_fit)
    assert primal(*line_data) == pytest.approx(line_fit(*line_data), rel=1e-12)
    assert _fused_calls(primal.source), primal.source


def mean_squared(w, b, x, y):
    """A mean, and a mean of a value made in the run."""
    r = w * x + b - y
    return np.mean(r * r) + 0.5 * np.mean(np.tanh(r))


def test_means_divide_the_running_sum_by_the_length(line_data):
    compiled = _grads_agree(mean_squared, line_data, (0, 1))
    primal = ad.jit(mean_squared)
    assert primal(*line_data) == pytest.approx(mean_squared(*line_data), rel=1e-12)
    assert _fused_calls(primal.source), primal.source
    assert "total = total / n" in primal.source, primal.source
    w, b, _, _ = line_data
    with np.errstate(invalid="ignore", divide="ignore"):
        empty = primal(w, b, np.zeros(0), np.zeros(0))
    assert np.isnan(empty)
    assert compiled is not None


def test_a_loop_with_one_vector_compiles_no_way_back_to_the_statements(line_data):
    """With one vector among the arguments the lengths cannot differ and nothing can overlap:
    `several` is False, Numba drops the branch, and the statements are never compiled beside
    the loop (a cold start's time); with two vectors they are, for lengths that differ."""
    source = _SQUARES
    _, _, x, y = line_data
    lowered = lower_source(source, entries=("f",), numba_overloads=True)
    text = render(lowered, decorator="numba.njit(error_model='numpy')")
    assert "if several and n < 0:" in text, text
    namespace = {}
    exec(compile("import numba\n" + text, "<one vector>", "exec"), namespace)
    assert namespace["f"](0.5, x, 0.25) == pytest.approx(np.sum((0.5 * x - 0.25) ** 2),
                                                         rel=1e-12)
    assert namespace["fused_statements"].signatures == []
    assert namespace["f"](0.5, x, y) == pytest.approx(np.sum((0.5 * x - y) ** 2), rel=1e-12)
    assert len(namespace["fused_statements"].signatures) == 1
    # a length-one vector broadcasts: the way back runs the statements
    assert namespace["f"](0.5, x, y[:1].copy()) == pytest.approx(
        np.sum((0.5 * x - y[0]) ** 2), rel=1e-12)


@pytest.mark.parametrize("value,expected", [
    ("t + c * b", "t += c * b"), ("t - (c + b)", "t -= c + b"), ("t + -c", "t += -c"),
    ("t + c", "t[:] = t + c"), ("c + t * b", "t[:] = c + t * b"),
    ("t + c[1:]", "t[:] = t + c[1:]")])
def test_a_fallback_write_adds_a_new_array_in_place(value, expected):
    """The statements a fused run falls back on write `t[:] = t + e` as `t += e` when e is
    an operator's result (a new array: Numba compiles the slice assignment slowly), and keep
    the slice assignment when e may be a view of t (a name, a slice) or t is not added to."""
    from codegen.fused_regions import _written_in_place
    assert _written_in_place("t", gast.parse(value).body[0].value) == expected
