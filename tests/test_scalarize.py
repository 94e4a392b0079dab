"""Small vectors kept as scalars under jit (autodiff_ast/scalarize.py) and calls in loops
inlined (codegen/inlining.py).

Every compiled result is compared with the plain-NumPy gradient of the same function (itself
checked against finite differences by the rest of the suite) and, for the rewritten programs
here, with central differences directly; the generated source is checked to show that the
rewrite happened (so a test cannot pass through the fallback to the original program).
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

import autodiff_ast as ad
from autodiff_ast import scalarize as S
from autodiff_ast.build import prepare
from autodiff_ast.normalize import spec_of
from codegen import inlining

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]

WEIGHTS = np.array([0.5, -1.0, 2.0])  # module data: a constant vector of length 3


# ---------------------------------------------------------------- programs
def cross(a, b):
    return np.array([a[1] * b[2] - a[2] * b[1],
                     a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]])


def rotate(rot, x):
    sq = np.sum(rot * rot)
    if sq != 0.0:
        theta = np.sqrt(sq)
        w = rot / theta
        return x * np.cos(theta) + cross(w, x) * np.sin(theta) + \
            w * np.dot(w, x) * (1.0 - np.cos(theta))
    return x + cross(rot, x)


def residual(cam, point, feat):
    p = rotate(cam[0:3], point - cam[3:6])
    proj = p[0:2] / p[2]
    return cam[6] * proj - feat


def reprojection(cams, points, obs, feats):
    """Bundle-adjustment shaped: rows of matrices read element by element through helpers."""
    n = obs.shape[0]
    out = np.zeros((n, 2))
    for i in range(n):
        out[i] = residual(cams[obs[i, 0]], points[obs[i, 1]], feats[i])
    return np.sum(out * out)


def arm(angles, lengths):
    """A planar arm: a 2-vector accumulated in a loop, module data, a constant write."""
    pos = np.zeros(2)
    total = 0.0
    for i in range(angles.shape[0]):
        step = lengths[i] * np.array([np.cos(angles[i]), np.sin(angles[i])])
        pos = pos + step
        total = total + np.sum(pos * pos)
    v = np.zeros(3)
    v[0] = pos[0]
    v[2] = pos[1] * pos[0]
    return total + np.sum(v * WEIGHTS)


def norm2(v):
    return np.sum(v * v)


def two_lengths(x):
    """One helper called with vectors of two lengths: its parameter stays an array."""
    return norm2(x[0:2]) + norm2(x[1:4]) * x[0]


def broadcast(a, b):
    """A slice of length 3 beside b, which may have length 3 or 1 (NumPy broadcasting)."""
    return np.sum(a[0:3] * b + a[1:4])


def row_as_array(a, i):
    """A row also used whole (np.sum): it stays an array; the slice beside it is scalars."""
    r = a[i]
    s = r[0:2] * 3.0
    return np.sum(r * r) + np.sum(s * s) + r[1]


def vector_out(x):
    return np.array([x[0] * x[1], x[1]]) * 2.0


def with_aux(x):
    v = np.array([x[0], x[1] * x[0]])
    return np.sum(v * v), v


def split(v):
    """A helper returning a vector and a number."""
    return v * 2.0, np.sum(v * v)


def shapes_and_control(x, A):
    """Tuple returns, both arms of a branch, a while loop, a row read in a nested loop, a
    vector also needed whole (np.linalg.norm, its shape)."""
    a, b = split(x[0:2])
    if b > 1.0:
        v = a * x[2]
    else:
        v = np.array([b, x[1]])
    k = 0
    while k < 3:
        v = v * 0.9 + np.sin(v)
        k = k + 1
    total = np.linalg.norm(v) + v.shape[0]
    for i in range(A.shape[0]):
        r = A[i]
        for j in range(2):
            total = total + np.sum(r[0:2] * v) * (j + 1.0)
    c, d = split(x[1:3])
    return total + np.sum(c) + d


# ---------------------------------------------------------------- mixed programs
# Small vectors with slices of steps, tuples, lists, while/break, three levels of helpers,
# constant writes read back, vectors also needed whole: jit against plain against differences.
def mixed_1(x):
    v = x[0:3]
    w = v[::-1] * 2.0 + v[-1]
    u = w[1:]
    return np.sum(u * u) + np.max(w) + np.sum(np.where(w > 0.5, w, -w))


def _pair(a, b):
    return a * b, a + b


def mixed_2(x, y):
    p, q = _pair(x[0:2], y[1:3])
    r, s = _pair(p, q)
    return np.sum(r * s) + np.dot(p, q)


def mixed_3(x):
    pos = np.array([x[0], x[1]])
    vel = np.zeros(2)
    t = 0
    while t < 5:
        vel = vel - 0.1 * pos
        pos = pos + 0.1 * vel
        if np.sum(pos * pos) > 10.0:
            break
        t = t + 1
    return np.sum(pos * vel)


def mixed_4(x):
    v = np.zeros(3)
    for i in range(3):
        v[i] = x[i] * (i + 1.0)   # variable index: stays an array
    w = x[0:3] * v
    return np.sum(w * w)


def _inner(a):
    return a * np.tanh(a)


def _middle(a, s):
    return _inner(a) * s + _inner(a * 0.5)


def _outer(a, b):
    return np.sum(_middle(a, 2.0) * _middle(b, 0.3))


def mixed_5(x):
    return _outer(x[0:3], x[2:5])


def mixed_6(A):
    total = 0.0
    for i in range(A.shape[0]):
        r = A[i]
        a = r[0:2]
        b = r[1:3]
        total = total + np.sum(_inner(a) * b) + r[2] * r[0]
    return total


def mixed_7(x):
    xs = []
    for k in range(3):
        xs.append(x[k:k + 2] * (k + 1.0))
    v = xs[0] + xs[1] * xs[2]
    return np.sum(v * v)


def mixed_8(x):
    v = x[0:2]
    t = (v, 3.0)
    return np.sum(t[0] * t[1]) + np.sum(v)


def mixed_9(x):
    v = np.array([x[0], x[1], x[2]])
    n = np.linalg.norm(v)
    u = v / n
    return np.sum(u * x[1:4]) + n


def mixed_10(x, k):
    v = x[0:2] * k
    return np.sum(v ** 2) + np.sum(np.exp(v) / (1.0 + v * v))


def mixed_11(x):
    m = np.zeros(3)
    m[0] = x[0]
    m[1] = m[0] * x[1]
    m[2] = m[1] + np.sin(m[0])
    m[0] = m[2] * 2.0
    return np.sum(m * m) + m[-1]


MIXED = [
    (mixed_1, lambda r: (r.standard_normal(4),)),
    (mixed_2, lambda r: (r.standard_normal(3), r.standard_normal(4))),
    (mixed_3, lambda r: (r.standard_normal(2),)),
    (mixed_4, lambda r: (r.standard_normal(3),)),
    (mixed_5, lambda r: (r.standard_normal(5),)),
    (mixed_6, lambda r: (r.standard_normal((4, 3)),)),
    (mixed_7, lambda r: (r.standard_normal(4),)),
    (mixed_8, lambda r: (r.standard_normal(2),)),
    (mixed_9, lambda r: (r.standard_normal(4),)),
    (mixed_10, lambda r: (r.standard_normal(2), 1.7)),
    (mixed_11, lambda r: (r.standard_normal(2),)),
]


def pair_energy(pos, sigma):
    """Particles as rows of an N x 3 (or N x 2) array, written with vectors: jit compiles it
    for the row length, so each row is kept as scalars."""
    n = pos.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            d = pos[i] - pos[j]
            r2 = np.sum(d * d)
            s6 = (sigma * sigma / r2) ** 3
            energy = energy + s6 * s6 - s6 + norm2(d[0:2])
    return energy


def stretched(v, A):
    """A 3-vector argument (its length known to the compiled code) and a matrix rebound in
    the function (its rows are not taken at the argument's length)."""
    A = A * 2.0
    return norm2(v) * np.sum(v * A[0]) + np.dot(v[::-1], v)


def rng_data():
    rng = np.random.default_rng(7)
    cams = rng.standard_normal((3, 11)) * 0.3  # rows longer than MAX_LENGTH (as in ADBench)
    cams[:, 3:6] = rng.standard_normal((3, 3)) * 0.1
    cams[:, 6] = 1.0 + rng.random(3)
    points = rng.standard_normal((5, 3)) + np.array([0.0, 0.0, 6.0])
    obs = np.array([[i % 3, i % 5] for i in range(8)], dtype=np.int64)
    feats = rng.standard_normal((8, 2)) * 0.1
    return cams, points, obs, feats


def central(f, args, k, eps=1e-6):
    x = np.array(args[k], dtype=float)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        g[idx] = (f(*args[:k], up, *args[k + 1:]) - f(*args[:k], down, *args[k + 1:])) / (2 * eps)
    return g


# ---------------------------------------------------------------- the rewrite itself
def _rewritten(fn, *args):
    names = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    _, program, core = prepare(fn, {n: spec_of(a) for n, a in zip(names, args)})
    return S.scalarize(program, core)


def test_rewrite_keeps_small_vectors_as_scalars():
    text = _rewritten(reprojection, *rng_data())
    ast.parse(text)
    assert "def cross(a_0, a_1, a_2, b_0, b_1, b_2):" in text
    assert "np.array(" not in text.split("def cross")[1]  # no array left in the helpers
    # the camera row is read in place by the loop, element by element
    assert "cams[item, slice_index(cams.shape[1], 0, 3)]" in text
    assert "points[item_3, broadcast_index(points.shape[1], 0, 3)]" in text


def test_rewrite_is_deterministic():
    assert _rewritten(reprojection, *rng_data()) == _rewritten(reprojection, *rng_data())


def test_nothing_to_rewrite_returns_none():
    assert _rewritten(lambda x: np.sum(np.tanh(x) * x), np.ones(4)) is None


def test_vectors_only_ever_needed_as_arrays_stay_arrays():
    """norm2 is called with vectors of two lengths, so its parameter stays an array; the two
    slices passed to it would only be made into arrays again: nothing is rewritten."""
    assert _rewritten(two_lengths, np.ones(5)) is None


# ---------------------------------------------------------------- compiled results
def _grads_agree(fn, args, argnums, check_fd=True):
    compiled = ad.jit(ad.grad(fn, argnums=argnums))
    plain = ad.grad(fn, argnums=argnums)
    got, want = compiled(*args), plain(*args)
    for g, w, k in zip(got, want, argnums):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
        if check_fd:
            scale = max(1.0, float(np.max(np.abs(w))))  # differences lose digits to it
            np.testing.assert_allclose(g, central(fn, list(args), k), rtol=1e-5,
                                       atol=1e-7 * scale)
    return compiled


def test_bundle_adjustment_shape(quick_llvm):
    compiled = _grads_agree(reprojection, rng_data(), (0, 1, 3))
    assert "slice_index(" in compiled.source and "np.array(" not in compiled.source
    # The index helpers' results and the elements they pick are read again in the backward
    # step, not saved on tapes (27 tapes made ADBench BA's forward sweep 3x slower); so is
    # store_index of the shape of `out`, which the loop writes only in place.
    source = compiled.source
    backward = source[source.index("for i in range(n - 1, -1, -1):"):]
    assert "= slice_index(cams.shape[1], 0, 3)" in backward, source
    assert re.search(r"= store_index\(out\.shape\[1\], 0, 2\)", backward), source
    # (math_tape: the forward loop's cosines and sines, codegen/forward_math.py)
    assert not re.findall(r"\b(?!math_tape\b)\w+_tape\b", source), source
    assert "math_tape" in source, source
    primal = ad.jit(reprojection)
    assert primal(*rng_data()) == pytest.approx(reprojection(*rng_data()), rel=1e-12)


def test_zero_rotation_branch(quick_llvm):
    cams, points, obs, feats = rng_data()
    cams[1, 0:3] = 0.0  # rotate's other branch
    _grads_agree(reprojection, (cams, points, obs, feats), (1,))


def test_loop_accumulator_module_data_and_writes(quick_llvm):
    rng = np.random.default_rng(1)
    compiled = _grads_agree(arm, (rng.standard_normal(6), 1.0 + rng.random(6)), (0, 1))
    assert "pos_0" in compiled.source


def test_two_lengths_and_rows_used_whole(quick_llvm):
    _grads_agree(two_lengths, (np.array([0.3, -1.2, 0.7, 2.0, 0.1]),), (0,))
    a = np.random.default_rng(2).standard_normal((4, 3))
    _grads_agree(row_as_array, (a, 2), (0,))


def test_broadcasting_of_unknown_lengths(quick_llvm):
    a = np.array([0.3, -1.2, 0.7, 2.0])
    compiled = _grads_agree(broadcast, (a, np.array([1.5, -0.5, 2.0])), (0, 1))
    one = _grads_agree(broadcast, (a, np.array([1.5])), (0, 1))  # b: length one, broadcast
    assert "broadcast_index(" in one.source
    with pytest.raises(ValueError):  # NumPy raises too: lengths 3 and 2 do not broadcast
        compiled(a, np.array([1.0, 2.0]))
    with pytest.raises(ValueError):
        broadcast(a, np.array([1.0, 2.0]))


def test_slice_past_the_end_raises(quick_llvm):
    """NumPy would slice a shorter vector; the compiled code needs all three elements and
    says so rather than read past the end (an `a` of length one: jit does not specialise on
    it, so its length is unknown to the code)."""
    compiled = ad.jit(ad.grad(broadcast))
    np.testing.assert_allclose(compiled(np.ones(12), np.ones(1)), [1, 2, 2, 1] + [0] * 8)
    with pytest.raises(ValueError, match="slice"):
        compiled(np.ones(1), np.ones(1))


def test_tuples_branches_while_rows_and_mixed_calls(quick_llvm):
    rng = np.random.default_rng(3)
    x, A = rng.standard_normal(4), rng.standard_normal((3, 2))
    compiled = _grads_agree(shapes_and_control, (x, A), (0, 1))
    assert "v_0" in compiled.source and "def split(v_0, v_1):" in compiled.source
    x[0:2] = 0.1  # the other arm
    _grads_agree(shapes_and_control, (x, A), (0, 1))


@pytest.mark.parametrize("fn, make", MIXED, ids=[f.__name__ for f, _ in MIXED])
def test_mixed_programs(quick_llvm, fn, make):
    args = make(np.random.default_rng(5))
    argnums = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray))
    _grads_agree(fn, args, argnums)
    assert ad.jit(fn)(*args) == pytest.approx(fn(*args), rel=1e-12)


def test_arguments_with_a_small_last_axis(quick_llvm):
    rng = np.random.default_rng(11)
    pos3 = np.arange(18.0).reshape(6, 3) * 0.7 + 0.1 * rng.standard_normal((6, 3))
    compiled = _grads_agree(pair_energy, (pos3, 1.1), (0,))
    assert "pos[i, 2]" in compiled.source and "d = " not in compiled.source  # three numbers
    # another row length compiles another module; the first is still used for rows of 3
    pos2 = np.arange(10.0).reshape(5, 2) * 0.8 + 0.1 * rng.standard_normal((5, 2))
    np.testing.assert_allclose(compiled(pos2, 1.1)[0], ad.grad(pair_energy)(pos2, 1.1),
                               rtol=1e-9)
    assert "pos[i, 1]" in compiled.source and "pos[i, 2]" not in compiled.source  # two
    np.testing.assert_allclose(compiled(pos3, 1.1)[0], ad.grad(pair_energy)(pos3, 1.1),
                               rtol=1e-9)
    big = np.arange(36.0).reshape(4, 9) * 0.3  # rows longer than MAX_LENGTH: arrays
    np.testing.assert_allclose(compiled(big, 1.1)[0], ad.grad(pair_energy)(big, 1.1),
                               rtol=1e-9)
    args = (rng.standard_normal(3), rng.standard_normal((2, 3)))
    compiled = _grads_agree(stretched, args, (0, 1))
    assert "v[0]" in compiled.source or "v[2]" in compiled.source


def test_vector_outputs_and_aux(quick_llvm):
    x = np.array([0.4, -1.3])
    np.testing.assert_allclose(ad.jit(vector_out)(x), vector_out(x))
    (value, aux), g = ad.jit(ad.value_and_grad(with_aux, has_aux=True))(x)
    (value2, aux2), g2 = ad.value_and_grad(with_aux, has_aux=True)(x)
    assert value == pytest.approx(value2)
    np.testing.assert_allclose(aux, aux2)
    np.testing.assert_allclose(g, g2)


def test_turned_off_by_environment(quick_llvm, monkeypatch):
    monkeypatch.setenv("AUTODIFF_AST_SCALARIZE", "0")
    compiled = _grads_agree(arm, (np.array([0.1, 0.2]), np.array([1.0, 2.0])), (0,),
                            check_fd=False)
    assert "pos_0" not in compiled.source


def test_failure_of_the_rewrite_falls_back(quick_llvm, monkeypatch):
    monkeypatch.delenv("AUTODIFF_AST_STRICT_REWRITE", raising=False)

    def broken(*args):
        raise KeyError("a bug in the rewrite")
    monkeypatch.setattr(S, "scalarize", broken)
    compiled = _grads_agree(arm, (np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 0.5])), (0,),
                            check_fd=False)
    assert "pos_0" not in compiled.source


def test_strict_switch_raises_a_bug_of_the_rewrite_but_not_its_refusals(quick_llvm,
                                                                          monkeypatch):
    """AUTODIFF_AST_STRICT_REWRITE=1 (the test suite's setting): a failure of the rewrite
    that the plain build does not share is raised, unless the rewrite declined."""
    monkeypatch.setenv("AUTODIFF_AST_STRICT_REWRITE", "1")
    args = (np.array([0.1, 0.2, 0.4]), np.array([1.0, 2.0, 0.25]))

    def step(p, q):  # (a function of its own: no earlier build of it to reuse)
        u = np.array([p[0] * q[1], p[1] + q[0]])
        return np.sum(u * u)

    def broken(*args):
        raise KeyError("a bug in the rewrite")
    monkeypatch.setattr(S, "scalarize", broken)
    with pytest.raises(RuntimeError, match="scalarizing rewrite failed.*KeyError"):
        ad.jit(ad.grad(step))(*args)

    def declines(*args):
        raise RuntimeError("scalarize: lengths did not settle")
    monkeypatch.setattr(S, "scalarize", declines)
    compiled = _grads_agree(arm, args, (0,), check_fd=False)
    assert "pos_0" not in compiled.source


# ---------------------------------------------------------------- inlining
def test_inlining_leaves_outside_calls_and_recursion():
    import gast

    from autodiff_ast.templates import unparse
    source = ("def g(x):\n    return g(x - 1.0) if x > 0 else x\n"
              "def h(x):\n    y = x * 2.0\n    return y\n"
              "def f(a):\n    b = h(a)\n    t = 0.0\n    for i in range(2):\n"
              "        t = g(b)\n        u = h(t)\n        t = u\n    return t\n")
    fns = inlining.inline_loop_calls(gast.parse(source).body, entries=["f"])
    assert [fn.name for fn in fns] == ["g", "h", "f"]  # g recursive, h also called outside
    text = unparse(fns[-1])
    assert "b = h(a)" in text and "t = g(b)" in text and "u = h(t)" not in text
    inlined, original = {}, {}
    exec("\n".join(unparse(fn) for fn in fns), inlined)
    exec(source, original)
    assert inlined["f"](1.25) == original["f"](1.25) == -1.0


def test_jit_specialises_on_the_lengths_the_rewrite_uses():
    from autodiff_ast.jit import SMALL_AXIS, _small_axis
    assert SMALL_AXIS == S.MAX_LENGTH
    assert _small_axis(np.ones((5, 3))) == 3 and _small_axis(np.ones(4)) == 4
    assert _small_axis(np.ones((5, 9))) is None and _small_axis(np.ones(1)) is None
    assert _small_axis(np.ones((2, 3), dtype=np.float32)) is None


def squared_negative(a, b):
    return a + b * ((-0.7) ** 2)


def scaled_rows(x, c):
    t = c / (2.0 + np.sin(c))
    return squared_negative(t[:, 0] ** 2 / (2.0 + np.sin(x[1])), c[:, 0]) * t[:, 0]


def negative_base(x, c):
    """A negative constant raised to a power in a helper (found by the fuzzer: the rewritten
    module's text read ``-0.7 ** 2``, which is -(0.7 ** 2)); x's elements are passed to
    scaled_rows, so the module is rewritten."""
    return np.sum(scaled_rows(x, c))


def test_negative_constant_raised_to_a_power(quick_llvm):
    rng = np.random.default_rng(11)
    args = (rng.standard_normal(4), rng.standard_normal((2, 1)))
    _, program, core = prepare(negative_base, {"x": spec_of(args[0]), "c": spec_of(args[1])})
    assert "(-0.7) ** 2" in S.scalarize(program, core, {"x": 4})  # (jit's hint for x)
    _grads_agree(negative_base, args, (0, 1))
    assert ad.jit(negative_base)(*args) == pytest.approx(negative_base(*args), rel=1e-12)


def test_names_the_rewrite_makes_up_are_temporaries():
    """Split elements (d_0, d_1, d_2) are temporaries of the rebuilt program, which tidying
    may inline like any other (an LJ energy written with 3-vectors: its jit gradient 654 ->
    524 us); the user's variables stay names it keeps."""
    from autodiff_ast.build import scalarizing
    pos3 = np.arange(18.0).reshape(6, 3) * 0.7
    with scalarizing({"pos": 3}):
        _, program, core = prepare(pair_energy, {"pos": spec_of(pos3), "sigma": spec_of(1.1)})
    assert {"d_0", "d_1", "d_2"} <= core.namer.temps
    assert "energy" not in core.namer.temps and "r2" not in core.namer.temps
    # so are the temporaries of the core form the rewrite was written from: `energy = energy
    # + ...` is written out as `add_5 = energy + mul_15` then `energy = add_5`, and as a
    # named value add_5's adjoint was carried round the backward loop (four accumulators
    # added to and zeroed in each step, and the inner loop kept in reverse order)
    made = {n for n in core.types if n.startswith(("add_", "mul_", "sub_", "div_"))}
    assert made and made <= core.namer.temps, made - core.namer.temps


def last_step_read_after(w, x):
    """A small vector bound in each step and read after the loop: its scalars (h_0 ...) are
    names scalarize made, read outside the loop body."""
    n = x.shape[0]
    acc = 0.0
    for i in range(n):
        h = np.tanh(x[i] * w)
        acc = acc + np.sum(h * h)
    return acc + np.sum(h)


def last_step_max(w, x):
    n = x.shape[0]
    acc = 0.0
    for i in range(n):
        h = np.tanh(x[i] * w)
        acc = acc + np.max(h)
    return acc + np.sum(h)


@pytest.mark.parametrize("fn", [last_step_read_after, last_step_max])
def test_a_vector_of_the_last_step_read_after_the_loop(fn):
    """Regression: the backward sweep treated those scalars as temporaries of one step and
    never reset their adjoints after a step, so the gradient added the last step's adjoint
    into every earlier step (jit(grad) wrong, grad right, before 2026-11-26)."""
    rng = np.random.default_rng(8)
    compiled = _grads_agree(fn, (rng.standard_normal(5), rng.standard_normal((4, 5))), (0, 1))
    assert "h_4" in compiled.source  # the vector was scalarized
