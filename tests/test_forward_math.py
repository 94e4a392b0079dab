"""Math-library calls a backward loop would compute again, read from a tape its forward loop
fills (codegen/forward_math.py).

Gradients of helpers called in loops (recomputing pairs) are compared under jit with the
plain NumPy gradient and central differences, and the generated source is read for the tape;
at the module level, pairs of loops whose values cannot be proved equal keep their calls.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

import autodiff_ast as ad
from codegen.forward_math import reuse_forward_math

pytestmark = [pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def rotate(angle, px, py):
    """A point turned by an angle (the identity for a zero angle: a branch, as in BA)."""
    if angle != 0.0:
        c = np.cos(angle)
        s = np.sin(angle)
        return c * px - s * py, s * px + c * py
    return px, py


def turned_points(angles, points, which):
    """Half the squared distance of each point, turned by its camera's angle, to (1, 0)."""
    total = 0.0
    for i in range(which.shape[0]):
        qx, qy = rotate(angles[which[i]], points[i, 0], points[i, 1])
        total = total + 0.5 * ((qx - 1.0) ** 2 + qy ** 2)
    return total


def recurrence(angles, start):
    """Each step turns the point the step before made: no value the backward loop computes
    is known to be one the forward loop did before the forward loop's writes."""
    pts = np.zeros((angles.shape[0] + 1, 2))
    pts[0] = start
    for i in range(angles.shape[0]):
        qx, qy = rotate(angles[i] * pts[i, 0], pts[i, 0], pts[i, 1])
        pts[i + 1, 0] = qx
        pts[i + 1, 1] = qy
    return np.sum(pts * pts)


def _backward_functions(source):
    return [fn for fn in gast.parse(source).body
            if isinstance(fn, gast.FunctionDef) and fn.name.endswith("_bwd")]


def test_the_backward_loop_reads_the_forward_loops_cosines():
    rng = np.random.default_rng(0)
    angles = rng.standard_normal(3)  # (none zero: differences across the branch would
    # see the rotation the gradient of the identity does not)
    points = rng.standard_normal((8, 2))
    which = np.array([0, 1, 2, 0, 1, 2, 2, 0])
    compiled = _grads_agree(turned_points, (angles, points, which), (0, 1))
    source = compiled.source  # (one function: the forward loop, then the backward one)
    assert "math_tape" in source, source
    assert source.count("np.cos(") == source.count("np.sin(") == 1, source


def turned_points_of_cameras(angles, points, which):
    """turned_points with its loop in a helper: a forward and a backward function."""
    return turned_points(angles, points, which) + 0.0 * np.sum(angles)


def test_a_backward_function_reads_its_forward_functions_cosines():
    rng = np.random.default_rng(2)
    angles, points = rng.standard_normal(3), rng.standard_normal((8, 2))
    which = np.array([0, 1, 2, 0, 1, 2, 2, 0])
    compiled = _grads_agree(turned_points_of_cameras, (angles, points, which), (0, 1))
    source = compiled.source
    backward = _backward_functions(source)
    assert backward and "math_tape" in source, source
    for fn in backward:
        assert fn.args.args[-1].id.startswith("math_tape"), source
        text = gast.dump(fn)
        assert "'cos'" not in text and "'sin'" not in text, source


def test_no_points_and_one_point():
    compiled = ad.jit(ad.grad(turned_points, argnums=(0, 1)))
    angles = np.array([0.4, -1.1, 2.0])
    for count in (0, 1):
        points = np.full((count, 2), 0.5)
        which = np.arange(count, dtype=np.int64)
        for got, want in zip(compiled(angles, points, which),
                             ad.grad(turned_points, argnums=(0, 1))(angles, points, which)):
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    assert "math_tape" in compiled.source


def test_a_recurrence_keeps_its_calls_and_agrees():
    rng = np.random.default_rng(1)
    compiled = _grads_agree(recurrence, (rng.standard_normal(6) * 0.5,
                                         np.array([0.3, -0.8])), (0, 1))
    assert "math_tape" not in compiled.source


MODULE = '''
def f_fwd(a, m):
    n = a.shape[0]
    out = np.zeros(n)
    for i in range(n):
        {forward}
        out[i] = c * c
    return (out, n)
def f_bwd(a, m, n, out_bar):
    a_bar = np.zeros_like(a)
    for i in range({steps}):
        c_2 = np.cos(a[i] * 2.0)
        a_bar[i] += out_bar[i] * c_2
    return a_bar
def grad_f(a, m):
    out, n = f_fwd(a, m)
    out_bar = np.ones_like(out)
    return f_bwd(a, m, n, out_bar)
'''


@pytest.mark.parametrize("forward, steps, reused", [
    ("c = np.cos(a[i] * 2.0)", "n - 1, -1, -1", 1),
    ("c = np.cos(a[i] * 2.0)", "n", 1),  # (a backward loop run forward: the same steps)
    ("c = np.cos(a[i] * 2.0)", "m - 1, -1, -1", 0),  # other steps
    ("c = np.cos(a[i] * 3.0)", "n - 1, -1, -1", 0),  # another angle
    ("c = np.sin(a[i] * 2.0)", "n - 1, -1, -1", 0),  # another function
    ("a[i] = 1.0; c = np.cos(a[i] * 2.0)", "n - 1, -1, -1", 0),  # the forward writes a
    ("c = np.cos(a[i + 1] * 2.0) if i < 0 else np.cos(a[i] * 2.0)", "n - 1, -1, -1", 0),
    ("i = i * 1; c = np.cos(a[i] * 2.0)", "n - 1, -1, -1", 0),  # (the index rebound)
])
def test_only_values_proved_equal_are_read_from_the_tape(forward, steps, reused):
    module = gast.parse(MODULE.format(forward=forward, steps=steps))
    taken = {n.id for n in gast.walk(module) if isinstance(n, gast.Name)}
    assert reuse_forward_math(module.body, taken, doc="a: float64[N], m: int.") == reused


def test_a_call_of_a_row_keeps_its_call():
    """np.cos of a row is an array: a tape of numbers could not hold it (a rank unknown or
    above zero keeps the call)."""
    for doc in ("a: float64[N,N], m: int.", "a: float64[...], m: int.", ""):
        module = gast.parse(MODULE.format(forward="c = np.cos(a[i] * 2.0)",
                                          steps="n - 1, -1, -1"))
        taken = {n.id for n in gast.walk(module) if isinstance(n, gast.Name)}
        assert reuse_forward_math(module.body, taken, doc=doc) == 0, doc
