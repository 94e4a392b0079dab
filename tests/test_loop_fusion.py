"""A loop that only sums into numbers, merged into the gathering loop before it
(codegen/loop_fusion.py).

The rules are checked on small functions (what merges, and each thing that must keep two
loops); the compiled gradients of stencils whose reverse step merges are compared with the
plain-NumPy gradient and central differences (test_vector_loops._grads_agree), at lengths
where the merged loop's head, interior or tail is empty (the heat equation's at short lengths:
test_gather_targets.test_heat_gradient_at_short_lengths, which goes through the merge).
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_loop_adjoints import heat  # the benchmark's heat equation
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.loop_fusion import fuse_sum_loops

TWO_LOOPS = '''
def f(y_bar, u, c, n, keep):
    x_bar = zeros_outside(u, 0, n)
    c_bar = 0.0
    for j in range({first}):
        x_bar_j = gather_start(x_bar, j)
        x_bar_j += y_bar[j] * c
        x_bar[j] = x_bar_j
    # a comment between them
    for i in range({second}):
        t = y_bar[i]
        {body}
    {after}
    return x_bar, c_bar
'''


def _fuse(first="0, n", second="1, n - 1", body="c_bar = c_bar + t * u[i]", after="pass"):
    fn = gast.parse(TWO_LOOPS.format(first=first, second=second, body=body,
                                     after=after)).body[0]
    return fuse_sum_loops(fn), unparse(fn)


def test_a_sum_loop_merges_before_the_store():
    merged, text = _fuse()
    assert merged
    assert "for i in" not in text
    assert ("        if j >= 1 and j < n - 1:\n            t = y_bar[j]\n"
            "            c_bar = c_bar + t * u[j]\n        x_bar[j] = x_bar_j") in text


@pytest.mark.parametrize("second,test", [("0, n", None), ("2, n", "j >= 2"),
                                         ("0, n - 3", "j < n - 3"), ("n", None)])
def test_only_the_bounds_that_differ_are_tested(second, test):
    merged, text = _fuse(second=second)
    assert merged
    if test is None:
        assert "if " not in text
    else:
        assert f"if {test}:" in text and " and " not in text


@pytest.mark.parametrize("kwargs", [
    dict(second="0, n + 1"),                      # past the first loop's end
    dict(first="1, n", second="0, n"),            # before its start
    dict(second="0, m"),                          # bounds not comparable
    dict(body="x_bar_j = t"),                     # a name the first loop binds
    dict(body="c_bar = c_bar + t * x_bar[i]"),    # an array the first loop writes
    dict(body="y_bar[i] = 0.0"),                  # an entry written
    dict(body="keep.append(t)"),                  # a call that may change its object
    dict(body="c_bar = c_bar + g(t)"),            # a call that may change anything
    dict(body="c = c + t"),                       # a name the first loop reads
    dict(body="if t > 0:\n            c_bar = c_bar + t"),  # a branch
    dict(after="print(i)"),                       # the index read after the loop
])
def test_what_keeps_two_loops(kwargs):
    merged, text = _fuse(**kwargs)
    assert not merged and "for i in" in text


def test_a_loop_that_does_not_gather_is_left():
    fn = gast.parse(TWO_LOOPS.format(first="0, n", second="0, n",
                                     body="c_bar = c_bar + t", after="pass")
                    .replace("gather_start(x_bar, j)", "x_bar[j]")).body[0]
    assert not fuse_sum_loops(fn)


def test_the_index_of_a_later_loop_over_it_is_allowed():
    merged, _ = _fuse(after="for i in range(3):\n        keep.append(i)")
    assert merged


# ---------------------------------------------------------------- compiled gradients
def one_sided_sum(u0, c, steps):
    """A stencil whose coefficient's adjoint sums over range(2, n) inside the gathering
    loop's range(0, n)."""
    u = u0.copy()
    n = len(u)
    for _step in range(steps):
        un = u.copy()
        for i in range(2, n):
            un[i] = u[i] + c * (u[i - 1] - u[i - 2])
        u = un
    return np.sum(u * u)


@pytest.mark.numba
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_merged_one_sided_gradient(n):
    u0 = np.sin(np.linspace(0.0, 3.0, n)) + 0.5
    _grads_agree(one_sided_sum, (u0, 0.3, 4), (0, 1))


@pytest.mark.numba
@pytest.mark.filterwarnings("ignore:Cannot cache compiled function")
def test_the_heat_step_is_one_pass():
    """The benchmark's reverse step: the coefficient's sum in the gathering loop, whose
    interior is one outlined function (1,000 x 500: 347-433 -> 326-395 us)."""
    import autodiff_ast as ad
    compiled = ad.jit(ad.grad(heat, argnums=(0, 1)))
    compiled(np.linspace(0.0, 1.0, 12), 0.2, 2)
    source = compiled.source
    assert "c_bar = c_bar + sum_loop(n, u_bar, c, un_bar, u)" in source, source
    assert source.count("for i in range(1, n - 1)") == 1  # (the forward step's only)


@pytest.mark.parametrize("change", [
    ("    x_bar = zeros_outside(u, 0, n)", "    x_bar = y_bar"),            # not a new array
    ("    c_bar = 0.0", "    c_bar = 0.0\n    z = x_bar"),                  # copied into z
    ("    x_bar = zeros_outside(u, 0, n)", "    x_bar = zeros_outside(u, 0, n, z, True)"),
])
def test_a_target_the_second_loop_may_see_keeps_two_loops(change):
    """The target held by another name, or a spare array zeros_outside may fill, that the
    second loop reads (z)."""
    text = TWO_LOOPS.format(first="0, n", second="1, n - 1", body="c_bar = c_bar + t * z[i]",
                            after="pass")
    fn = gast.parse(text.replace(*change)).body[0]
    assert not fuse_sum_loops(fn)
    fn = gast.parse(text).body[0]
    assert fuse_sum_loops(fn)  # (as written, z is another array)
