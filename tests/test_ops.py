"""Every reverse rule, checked against finite differences on a table of ops and shapes.

The table is data: (name, function, input domain per argument, arity). Elementwise ops are
crossed with broadcasting shape pairs; structural ops carry their own input shapes. Each case
goes through ``check_grads(f, args, modes=("rev",))``: central finite differences in a random
direction against the generated vjp (a dot-product test with a random output cotangent).
Nothing here is checked against a hand-written derivative formula.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hessian_check import assert_hessian_matches_gradient_differences

import autodiff_ast as ad
from autodiff_ast import rules
from autodiff_ast.rules.elementwise import PARTIALS

# ---------------------------------------------------------------- input domains
# Each domain draws values where the function is smooth: log > 0, arcsin in (-1, 1),
# arccosh > 1, and nothing within reach of a kink (|x| >= 0.2 for abs, sign, clip bounds).


def _real(rng, shape):
    return rng.uniform(-2.0, 2.0, shape)


def _positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def _unit(rng, shape):
    return rng.uniform(-0.8, 0.8, shape)


def _above_one(rng, shape):
    return rng.uniform(1.2, 3.0, shape)


def _away_from_zero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 2.0, shape)


def _small(rng, shape):
    return rng.uniform(-1.0, 1.0, shape)


DOMAINS = {"real": _real, "pos": _positive, "unit": _unit, "gt1": _above_one,
           "nonzero": _away_from_zero, "small": _small}


def draw(domain, shape, rng):
    """A value of `shape` from `domain`; shape () gives a Python float."""
    value = DOMAINS[domain](rng, shape)
    return float(value) if shape == () else value


# ---------------------------------------------------------------- elementwise table
# (name, function, domain of each argument). Binary entries are crossed with BINARY_SHAPES,
# unary ones with UNARY_SHAPES.
UNARY = [
    ("sin", lambda x: np.sin(x), "real"),
    ("cos", lambda x: np.cos(x), "real"),
    ("tan", lambda x: np.tan(x), "unit"),
    ("arcsin", lambda x: np.arcsin(x), "unit"),
    ("arccos", lambda x: np.arccos(x), "unit"),
    ("arctan", lambda x: np.arctan(x), "real"),
    ("sinh", lambda x: np.sinh(x), "real"),
    ("cosh", lambda x: np.cosh(x), "real"),
    ("tanh", lambda x: np.tanh(x), "real"),
    ("arcsinh", lambda x: np.arcsinh(x), "real"),
    ("arccosh", lambda x: np.arccosh(x), "gt1"),
    ("arctanh", lambda x: np.arctanh(x), "unit"),
    ("exp", lambda x: np.exp(x), "real"),
    ("exp2", lambda x: np.exp2(x), "real"),
    ("expm1", lambda x: np.expm1(x), "real"),
    ("log", lambda x: np.log(x), "pos"),
    ("log2", lambda x: np.log2(x), "pos"),
    ("log10", lambda x: np.log10(x), "pos"),
    ("log1p", lambda x: np.log1p(x), "pos"),
    ("sqrt", lambda x: np.sqrt(x), "pos"),
    ("cbrt", lambda x: np.cbrt(x), "pos"),
    ("square", lambda x: np.square(x), "real"),
    ("reciprocal", lambda x: np.reciprocal(x), "nonzero"),
    ("negative", lambda x: np.negative(x), "real"),
    ("positive", lambda x: np.positive(x), "real"),
    ("absolute", lambda x: np.absolute(x), "nonzero"),
    ("fabs", lambda x: np.fabs(x), "nonzero"),
    ("deg2rad", lambda x: np.deg2rad(x), "real"),
    ("rad2deg", lambda x: np.rad2deg(x), "real"),
    ("sinc", lambda x: np.sinc(x), "real"),
    # operators and aliases
    ("neg-operator", lambda x: -x, "real"),
    ("abs-builtin", lambda x: abs(x), "nonzero"),
    ("np.abs", lambda x: np.abs(x), "nonzero"),
    ("sign-times", lambda x: np.sign(x) * x * x, "nonzero"),
    ("floor-plus", lambda x: np.floor(x) + x, "nonzero"),
    ("pow-const-2", lambda x: x ** 2, "real"),
    ("pow-const-3.5", lambda x: x ** 3.5, "pos"),
    ("pow-const-neg", lambda x: x ** -1.5, "pos"),
    ("rpow-const", lambda x: 2.0 ** x, "real"),
    ("where-self", lambda x: np.where(x > 0.0, x * x, -x), "nonzero"),
    ("clip", lambda x: np.clip(x, -0.5, 0.5) * x, "nonzero"),
]

BINARY = [
    ("add", lambda a, b: np.add(a, b), "real", "real"),
    ("subtract", lambda a, b: np.subtract(a, b), "real", "real"),
    ("multiply", lambda a, b: np.multiply(a, b), "real", "real"),
    ("divide", lambda a, b: np.divide(a, b), "real", "nonzero"),
    ("maximum", lambda a, b: np.maximum(a, b), "real", "real"),
    ("minimum", lambda a, b: np.minimum(a, b), "real", "real"),
    ("fmax", lambda a, b: np.fmax(a, b), "real", "real"),
    ("fmin", lambda a, b: np.fmin(a, b), "real", "real"),
    ("arctan2", lambda a, b: np.arctan2(a, b), "nonzero", "nonzero"),
    ("hypot", lambda a, b: np.hypot(a, b), "nonzero", "nonzero"),
    ("logaddexp", lambda a, b: np.logaddexp(a, b), "real", "real"),
    ("logaddexp2", lambda a, b: np.logaddexp2(a, b), "real", "real"),
    ("remainder", lambda a, b: np.remainder(a, b), "pos", "pos"),
    ("fmod", lambda a, b: np.fmod(a, b), "pos", "pos"),
    ("power", lambda a, b: np.power(a, b), "pos", "real"),
    ("op+", lambda a, b: a + b, "real", "real"),
    ("op-", lambda a, b: a - b, "real", "real"),
    ("op*", lambda a, b: a * b, "real", "real"),
    ("op/", lambda a, b: a / b, "real", "nonzero"),
    ("op**", lambda a, b: a ** b, "pos", "real"),
    ("where", lambda a, b: np.where(a > b, a * b, b - a), "real", "real"),
    ("clip-lo", lambda a, b: np.clip(a, b, None), "real", "real"),
    ("clip-hi", lambda a, b: np.clip(a, None, b), "real", "real"),
]

UNARY_SHAPES = [(), (3,), (2, 3)]
BINARY_SHAPES = [((), ()), ((), (2, 3)), ((2, 3), ()), ((2, 3), (2, 1)), ((3,), (2, 3)),
                 ((2, 1), (1, 3))]


def _shape_id(shape):
    return "x".join(map(str, shape)) or "scalar"


def _cases(table, shapes, pairs):
    out = []
    for entry in table:
        for shape in shapes:
            sid = "-".join(_shape_id(s) for s in shape) if pairs else _shape_id(shape)
            out.append(pytest.param(entry, shape, id=f"{entry[0]}[{sid}]"))
    return out


@pytest.mark.parametrize("entry,shape", _cases(UNARY, UNARY_SHAPES, pairs=False))
def test_unary_elementwise(entry, shape, rng):
    name, f, domain = entry
    ad.check_grads(f, (draw(domain, shape, rng),), modes=("rev",))


@pytest.mark.parametrize("entry,shapes", _cases(BINARY, BINARY_SHAPES, pairs=True))
def test_binary_elementwise_broadcasting(entry, shapes, rng):
    name, f, da, db = entry
    args = (draw(da, shapes[0], rng), draw(db, shapes[1], rng))
    ad.check_grads(f, args, modes=("rev",))


def numeric_grad(f, args, k, eps=1e-6):
    """Central finite differences of a scalar function with respect to argument k."""
    args = list(args)
    x = np.asarray(args[k], dtype=float)
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        up, down = list(args), list(args)
        up[k], down[k] = x + step, x - step
        if np.ndim(args[k]) == 0:
            up[k], down[k] = float(up[k]), float(down[k])
        out[i] = (f(*up) - f(*down)) / (2 * eps)
    return out


def check_grad_of_scalar(f, args):
    """grad of a scalar function (the cotangent 1.0 is held lazily) against finite differences."""
    grads = ad.grad(f, argnums=tuple(range(len(args))))(*args)
    for k, g in enumerate(grads):
        assert np.shape(g) == np.shape(args[k])
        np.testing.assert_allclose(g, numeric_grad(f, args, k), rtol=1e-5, atol=1e-6)


# Reductions of broadcast results seed the cotangent lazily (one number standing for a whole
# array): each operand must still receive the sum over the axes it was broadcast along.
REDUCED = [
    ("sum(a+b)", lambda a, b: np.sum(a + b), "real", "real"),
    ("sum(a-b)", lambda a, b: np.sum(a - b), "real", "real"),
    ("sum(a*b)", lambda a, b: np.sum(a * b), "real", "real"),
    ("sum(a/b)", lambda a, b: np.sum(a / b), "real", "nonzero"),
    ("mean(a**b)", lambda a, b: np.mean(a ** b), "pos", "real"),
    ("sum(maximum)", lambda a, b: np.sum(np.maximum(a, b)), "real", "real"),
    ("sum(where)", lambda a, b: np.sum(np.where(a > b, a, 2.0 * b)), "real", "real"),
    ("sum(exp(a)+b)", lambda a, b: np.sum(np.exp(a) + b), "real", "real"),
    ("mean(2a-b)", lambda a, b: np.mean(2.0 * a - b), "real", "real"),
    ("sum(-(a+b))", lambda a, b: np.sum(-(a + b)), "real", "real"),
    ("sum(sum0(a+b))", lambda a, b: np.sum(np.sum(a + b, axis=0)), "real", "real"),
]


@pytest.mark.parametrize("entry,shapes", [
    case for case in _cases(REDUCED, BINARY_SHAPES, pairs=True)
    if not ("sum0" in case.values[0][0] and case.values[1] == ((), ()))])  # no axis 0 of a number
def test_grad_of_reduced_broadcasting(entry, shapes, rng):
    name, f, da, db = entry
    check_grad_of_scalar(f, (draw(da, shapes[0], rng), draw(db, shapes[1], rng)))


@pytest.mark.parametrize("entry,shapes", _cases(BINARY, BINARY_SHAPES[1:], pairs=True))
def test_grad_through_a_helper_of_every_binary_op(entry, shapes, rng):
    """The op inside a user helper: its backward function gets a full-shape cotangent."""
    name, op, da, db = entry

    def loss(a, b):
        return np.sum(op(a, b)) * 1.5
    check_grad_of_scalar(loss, (draw(da, shapes[0], rng), draw(db, shapes[1], rng)))


# x ** p with respect to a scalar p and b ** x with respect to a scalar b: both arguments are
# differentiated, and the scalar one receives the sum over the broadcast array.
@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1)], ids=_shape_id)
def test_power_wrt_scalar_exponent(shape, rng):
    ad.check_grads(lambda x, p: x ** p, (draw("pos", shape, rng), 1.7), modes=("rev",))


@pytest.mark.parametrize("shape", [(3,), (2, 3), (1, 3)], ids=_shape_id)
def test_power_wrt_scalar_base(shape, rng):
    ad.check_grads(lambda b, x: b ** x, (1.8, draw("real", shape, rng)), modes=("rev",))


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)], ids=_shape_id)
def test_clip_wrt_bounds(shape, rng):
    x = draw("real", shape, rng)
    # bounds well inside the sample range so that some entries are clipped on each side,
    # and no entry sits within the finite-difference step of a bound
    x = np.where(np.abs(np.abs(x) - 0.5) < 0.05, 1.5, x) if shape else x
    ad.check_grads(lambda x, lo, hi: np.clip(x, lo, hi), (x, -0.5, 0.5), modes=("rev",))


# ---------------------------------------------------------------- structural table
# (name, function, argument shapes, domain). These carry their own shapes.
IDX = np.array([0, 2, 0, 1, 2])  # repeated indices: adjoints must accumulate
ROWS = np.array([1, 1, 0])
GRID = np.array([[0, 1], [1, -1]])  # a 2-D index array (a negative entry too)
COUNTS = np.array([2, 0, 1])  # a count per entry (one dropped)
SPREAD = np.diag(np.array([0.0, 3.0, 6.0]))  # symmetric inputs with distinct eigenvalues
KNOTS = np.array([-1.5, -0.4, 0.3, 1.2])  # np.interp's xp: "real" points fall outside too

STRUCTURAL = [
    # reductions, with axis and keepdims
    ("sum", lambda x: np.sum(x), [(2, 3)], "real"),
    ("sum-axis0", lambda x: np.sum(x, axis=0), [(2, 3)], "real"),
    ("sum-axis1-keepdims", lambda x: np.sum(x, axis=1, keepdims=True), [(2, 3)], "real"),
    ("sum-axis-neg", lambda x: np.sum(x, axis=-1), [(2, 3, 2)], "real"),
    ("sum-axis-tuple", lambda x: np.sum(x, axis=(0, 2)), [(2, 3, 2)], "real"),
    ("sum-keepdims-all", lambda x: np.sum(x, keepdims=True) * x, [(2, 3)], "real"),
    ("mean", lambda x: np.mean(x), [(2, 3)], "real"),
    ("mean-axis0", lambda x: np.mean(x, axis=0), [(2, 3)], "real"),
    ("mean-axis1-keepdims", lambda x: np.mean(x, axis=1, keepdims=True), [(2, 3)], "real"),
    ("prod", lambda x: np.prod(x), [(2, 3)], "nonzero"),
    ("prod-axis1", lambda x: np.prod(x, axis=1), [(2, 3)], "nonzero"),
    ("max", lambda x: np.max(x), [(2, 3)], "real"),
    ("max-axis0", lambda x: np.max(x, axis=0), [(2, 3)], "real"),
    ("max-axis1-keepdims", lambda x: np.max(x, axis=1, keepdims=True), [(2, 3)], "real"),
    ("max-axis-tuple", lambda x: np.max(x, axis=(0, 2)), [(2, 3, 2)], "real"),
    ("mean-axis-tuple-keepdims", lambda x: np.mean(x, axis=(0, 2), keepdims=True),
     [(2, 3, 2)], "real"),
    ("amax", lambda x: np.amax(x, axis=1), [(2, 3)], "real"),
    ("min", lambda x: np.min(x), [(2, 3)], "real"),
    ("min-axis1", lambda x: np.min(x, axis=1), [(2, 3)], "real"),
    ("amin", lambda x: np.amin(x), [(4,)], "real"),
    ("var", lambda x: np.var(x), [(2, 3)], "real"),
    ("var-axis0", lambda x: np.var(x, axis=0), [(3, 2)], "real"),
    ("var-ddof", lambda x: np.var(x, ddof=1), [(5,)], "real"),
    ("var-axis1-keepdims", lambda x: np.var(x, axis=1, keepdims=True), [(2, 3)], "real"),
    ("var-axis-tuple", lambda x: np.var(x, axis=(0, 2)), [(2, 3, 2)], "real"),
    ("std", lambda x: np.std(x), [(2, 3)], "real"),
    ("std-axis1", lambda x: np.std(x, axis=1), [(2, 3)], "real"),
    ("std-axis1-keepdims", lambda x: np.std(x, axis=1, keepdims=True), [(2, 3)], "real"),
    ("cumsum", lambda x: np.cumsum(x), [(4,)], "real"),
    ("cumsum-2d-flat", lambda x: np.cumsum(x), [(2, 3)], "real"),
    ("cumsum-axis1", lambda x: np.cumsum(x, axis=1), [(2, 3)], "real"),
    ("cumprod", lambda x: np.cumprod(x), [(4,)], "real"),
    ("cumprod-2d-flat", lambda x: np.cumprod(x), [(2, 3)], "real"),
    ("cumprod-axis1", lambda x: np.cumprod(x, axis=1), [(2, 3)], "real"),
    ("cumprod-axis0", lambda x: np.cumprod(x, axis=0) * x, [(3, 2)], "real"),
    ("median-odd", lambda x: np.median(x), [(5,)], "real"),
    ("median-even", lambda x: np.median(x), [(2, 3)], "real"),
    ("median-axis1", lambda x: np.median(x, axis=1), [(3, 4)], "real"),
    ("median-axis0-keepdims", lambda x: np.median(x, axis=0, keepdims=True) * x, [(3, 2)],
     "real"),
    ("nansum", lambda x: np.nansum(x), [(2, 3)], "real"),
    ("nansum-axis1-keepdims", lambda x: np.nansum(x, axis=1, keepdims=True) * x, [(2, 3)],
     "real"),
    ("nanmean", lambda x: np.nanmean(x), [(2, 3)], "real"),
    ("nanmean-axis0", lambda x: np.nanmean(x, axis=0), [(3, 2)], "real"),
    ("ptp", lambda x: np.ptp(x), [(2, 3)], "real"),
    ("ptp-axis0", lambda x: np.ptp(x, axis=0), [(3, 2)], "real"),
    ("ptp-axis1-keepdims", lambda x: np.ptp(x, axis=1, keepdims=True) * x, [(2, 3)], "real"),
    ("average", lambda x: np.average(x), [(2, 3)], "real"),
    ("average-axis1", lambda x: np.average(x, axis=1), [(2, 3)], "real"),
    ("average-weights", lambda x, w: np.average(x, weights=w), [(2, 3), (2, 3)], "pos"),
    ("average-weights-axis0-keepdims",
     lambda x, w: np.average(x, axis=0, weights=w, keepdims=True) * x, [(3, 2), (3, 2)], "pos"),
    ("average-vector-weights", lambda x, w: np.average(x, axis=0, weights=w), [(3, 2), (3,)],
     "pos"),
    # methods
    ("method-sum", lambda x: x.sum(), [(2, 3)], "real"),
    ("method-sum-axis", lambda x: x.sum(axis=0), [(2, 3)], "real"),
    ("method-mean", lambda x: x.mean(), [(2, 3)], "real"),
    ("method-mean-axis", lambda x: x.mean(axis=1), [(2, 3)], "real"),
    ("method-dot", lambda a, b: a.dot(b), [(2, 3), (3,)], "real"),
    ("method-reshape-tuple", lambda x: x.reshape((3, 2)), [(2, 3)], "real"),
    ("method-reshape-varargs", lambda x: x.reshape(3, 2), [(2, 3)], "real"),
    ("method-reshape-flat", lambda x: x.reshape(-1), [(2, 3)], "real"),
    ("method-transpose", lambda x: x.transpose(), [(2, 3)], "real"),
    ("method-transpose-axes", lambda x: x.transpose(1, 0, 2), [(2, 3, 2)], "real"),
    ("method-copy", lambda x: x.copy() * x, [(2, 3)], "real"),
    ("method-astype", lambda x: x.astype(np.float64) * x, [(3,)], "real"),
    ("method-astype-float", lambda x: x.astype(float), [(3,)], "real"),
    ("attribute-T", lambda x: x.T, [(2, 3)], "real"),
    ("attribute-T-matmul", lambda x: x.T @ x, [(2, 3)], "real"),
    ("len", lambda x: len(x) * x, [(3,)], "real"),
    ("shape", lambda x: x / x.shape[0], [(2, 3)], "real"),
    ("ndim-size", lambda x: x * x.ndim + x.size, [(2, 3)], "real"),
    # linear algebra
    ("dot-1-1", lambda a, b: np.dot(a, b), [(3,), (3,)], "real"),
    ("dot-2-1", lambda a, b: np.dot(a, b), [(2, 3), (3,)], "real"),
    ("dot-1-2", lambda a, b: np.dot(a, b), [(2,), (2, 3)], "real"),
    ("dot-2-2", lambda a, b: np.dot(a, b), [(2, 3), (3, 4)], "real"),
    ("dot-scalar", lambda a, b: np.dot(a, b), [(), (3,)], "real"),
    ("matmul", lambda a, b: np.matmul(a, b), [(2, 3), (3, 4)], "real"),
    ("matmul-op-2-1", lambda a, b: a @ b, [(2, 3), (3,)], "real"),
    ("matmul-op-1-2", lambda a, b: a @ b, [(2,), (2, 3)], "real"),
    ("matmul-batched", lambda a, b: a @ b, [(2, 2, 3), (3, 2)], "real"),
    ("matmul-batched-both", lambda a, b: a @ b, [(2, 1, 2, 3), (3, 3, 4)], "real"),
    ("matmul-batched-vector", lambda a, b: a @ b, [(3,), (2, 3, 4)], "real"),
    ("matmul-batched-by-vector", lambda a, b: a @ b, [(2, 2, 3), (3,)], "real"),
    ("outer", lambda a, b: np.outer(a, b), [(2,), (3,)], "real"),
    ("kron", lambda a, b: np.kron(a, b), [(2,), (3,)], "real"),
    ("kron-2d", lambda a, b: np.kron(a, b), [(2, 3), (3, 2)], "real"),
    ("kron-vector-matrix", lambda a, b: np.kron(a, b), [(2,), (3, 2)], "real"),
    ("kron-matrix-vector", lambda a, b: np.kron(a, b) * 2.0, [(2, 2), (3,)], "real"),
    ("kron-same", lambda a: np.kron(a, a), [(2, 2)], "real"),
    ("inner", lambda a, b: np.inner(a, b), [(3,), (3,)], "real"),
    ("vdot", lambda a, b: np.vdot(a, b), [(3,), (3,)], "real"),
    ("einsum-matmul", lambda a, b: np.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)], "real"),
    ("einsum-dot", lambda a, b: np.einsum("i,i->", a, b), [(3,), (3,)], "real"),
    ("einsum-outer", lambda a, b: np.einsum("i,j->ij", a, b), [(2,), (3,)], "real"),
    ("einsum-sum-axis", lambda a: np.einsum("ij->j", a), [(2, 3)], "real"),
    ("einsum-transpose", lambda a: np.einsum("ij->ji", a), [(2, 3)], "real"),
    ("einsum-implicit", lambda a, b: np.einsum("ij,jk", a, b), [(2, 3), (3, 2)], "real"),
    ("einsum-batch", lambda a, b: np.einsum("bij,bjk->bik", a, b), [(2, 2, 3), (2, 3, 2)],
     "real"),
    ("einsum-trace", lambda a: np.einsum("ii", a), [(3, 3)], "real"),
    ("einsum-diagonal", lambda a: np.einsum("ii->i", a), [(3, 3)], "real"),
    ("einsum-diagonal-times", lambda a, b: np.einsum("ii,i->", a, b), [(3, 3), (3,)], "real"),
    ("einsum-by-diagonal", lambda a, b: np.einsum("ij,jj->i", a, b), [(2, 3), (3, 3)], "real"),
    # (reverse mode raised a bare ValueError, "ellipsis in einsum subscripts"; the ranks now
    # name the ellipsis axes: linalg._expand_ellipsis)
    ("einsum-ellipsis", lambda a, b: np.einsum("...ij,...j->...i", a, b),
     [(2, 3, 3), (2, 3)], "real"),
    ("einsum-ellipsis-broadcast", lambda a, b: np.einsum("...ij,...j->...i", a, b),
     [(2, 3, 3), (1, 3)], "real"),
    ("einsum-ellipsis-implicit", lambda a, b: np.einsum("i...,i", a, b), [(2, 3, 4), (2,)],
     "real"),
    ("multi_dot", lambda a, b, c: np.linalg.multi_dot([a, b, c]), [(2, 3), (3, 4), (4, 2)],
     "real"),
    ("multi_dot-vectors", lambda a, b, c: np.linalg.multi_dot((a, b, c)), [(3,), (3, 4), (4,)],
     "real"),
    ("tensordot", lambda a, b: np.tensordot(a, b), [(2, 3, 4), (3, 4, 2)], "real"),
    ("tensordot-1", lambda a, b: np.tensordot(a, b, 1), [(2, 3), (3, 4)], "real"),
    ("tensordot-pairs", lambda a, b: np.tensordot(a, b, axes=([0, 2], [1, 0])),
     [(2, 3, 4), (4, 2, 3)], "real"),
    ("cross", lambda a, b: np.cross(a, b), [(3,), (3,)], "real"),
    ("cross-stack", lambda a, b: np.cross(a, b), [(2, 3), (3,)], "real"),
    ("cross-stacks", lambda a, b: np.cross(a, b) * a, [(2, 3), (2, 3)], "real"),
    ("trace", lambda x: np.trace(x), [(3, 3)], "real"),
    ("diag-1d", lambda x: np.diag(x), [(3,)], "real"),
    ("diag-2d", lambda x: np.diag(x), [(3, 3)], "real"),
    ("diagonal", lambda x: np.diagonal(x), [(3, 3)], "real"),
    ("diag-2d-wide", lambda x: np.diag(x), [(3, 4)], "real"),
    ("diagonal-tall", lambda x: np.diagonal(x), [(4, 3)], "real"),
    ("diagonal-stack", lambda x: np.diagonal(x, axis1=1, axis2=2), [(2, 3, 4)], "real"),
    ("diagonal-last-axes", lambda x: np.diagonal(x, 0, -2, -1), [(2, 3, 3)], "real"),
    ("diagflat", lambda x: np.diagflat(x), [(3,)], "real"),
    ("diagflat-matrix", lambda x: np.diagflat(x) * 2.0, [(2, 2)], "real"),
    ("diagflat-k", lambda x: np.diagflat(x, 1), [(3,)], "real"),
    ("diagflat-k-neg", lambda x: np.diagflat(x, k=-2) * 3.0, [(2, 1)], "real"),
    ("diagflat-number", lambda x: np.diagflat(x, 1), [()], "real"),
    ("norm", lambda x: np.linalg.norm(x), [(2, 3)], "real"),
    ("norm-vector", lambda x: np.linalg.norm(x), [(4,)], "real"),
    ("norm-axis1", lambda x: np.linalg.norm(x, axis=1), [(2, 3)], "real"),
    ("norm-fro", lambda x: np.linalg.norm(x, "fro"), [(2, 3)], "real"),
    ("norm-2", lambda x: np.linalg.norm(x, 2), [(4,)], "real"),
    ("norm-1", lambda x: np.linalg.norm(x, 1), [(4,)], "nonzero"),
    ("norm-inf", lambda x: np.linalg.norm(x, np.inf), [(4,)], "real"),
    ("norm-minus-inf", lambda x: np.linalg.norm(x, ord=-np.inf), [(4,)], "nonzero"),
    ("norm-1-axis0", lambda x: np.linalg.norm(x, ord=1, axis=0), [(3, 2)], "nonzero"),
    ("norm-inf-axis1", lambda x: np.linalg.norm(x, np.inf, axis=1), [(2, 3)], "real"),
    ("norm-minus-inf-axis-neg", lambda x: np.linalg.norm(x, -np.inf, -1), [(2, 3)], "nonzero"),
    ("norm-axis1-keepdims", lambda x: np.linalg.norm(x, axis=1, keepdims=True), [(2, 3)],
     "real"),
    ("norm-keepdims", lambda x: np.linalg.norm(x, keepdims=True), [(2, 3)], "real"),
    ("norm-1-axis0-keepdims", lambda x: np.linalg.norm(x, ord=1, axis=0, keepdims=True),
     [(3, 2)], "nonzero"),
    ("solve-vector", lambda a, b: np.linalg.solve(a + 3.0 * np.eye(3), b), [(3, 3), (3,)],
     "small"),
    ("solve-matrix", lambda a, b: np.linalg.solve(a + 3.0 * np.eye(3), b), [(3, 3), (3, 2)],
     "small"),
    ("inv", lambda a: np.linalg.inv(a + 3.0 * np.eye(3)), [(3, 3)], "small"),
    ("det", lambda a: np.linalg.det(a + 3.0 * np.eye(3)), [(3, 3)], "small"),
    ("slogdet", lambda a: np.linalg.slogdet(a + 3.0 * np.eye(3))[1], [(3, 3)], "small"),
    ("slogdet-unpack", lambda a: _logabsdet(a), [(3, 3)], "small"),
    ("cholesky", lambda a: np.linalg.cholesky(np.dot(a, a.T) + 3.0 * np.eye(3)), [(3, 2)],
     "small"),
    ("eigvalsh", lambda a: np.linalg.eigvalsh(a + a.T + SPREAD), [(3, 3)], "small"),
    ("eigh-vectors", lambda a: np.linalg.eigh(a + a.T + SPREAD)[1] ** 2, [(3, 3)], "small"),
    ("eigh-both", lambda a: _eigen_pairs(a), [(3, 3)], "small"),
    # polynomials, statistics, interpolation
    ("polyval", lambda p, x: np.polyval(p, x), [(4,), (2, 3)], "real"),
    ("polyval-scalar", lambda p, x: np.polyval(p, x), [(3,), ()], "real"),
    ("cov", lambda m: np.cov(m), [(3, 5)], "real"),
    ("cov-rowvar-bias", lambda m: np.cov(m, rowvar=False, bias=True), [(5, 3)], "real"),
    ("cov-vector-ddof", lambda m: np.cov(m, ddof=2), [(5,)], "real"),
    ("corrcoef", lambda x: np.corrcoef(x), [(3, 5)], "real"),
    ("corrcoef-rowvar", lambda x: np.corrcoef(x, rowvar=False), [(5, 3)], "real"),
    ("interp", lambda x, fp: np.interp(x, KNOTS, fp), [(2, 3), (4,)], "real"),
    ("interp-scalar", lambda x, fp: np.interp(x, KNOTS, fp), [(), (4,)], "real"),
    ("trapezoid", lambda y, x: np.trapezoid(y, x), [(5,), (5,)], "real"),
    ("trapezoid-dx", lambda y: np.trapezoid(y, dx=0.3), [(2, 5)], "real"),
    ("trapezoid-dx-arg", lambda y, d: np.trapezoid(y, dx=d), [(4,), ()], "real"),
    ("trapezoid-axis0", lambda y, x: np.trapezoid(y, x, axis=0), [(4, 3), (4,)], "real"),
    ("convolve", lambda a, v: np.convolve(a, v), [(5,), (3,)], "real"),
    ("convolve-valid", lambda a, v: np.convolve(a, v, mode="valid"), [(5,), (3,)], "real"),
    ("convolve-same", lambda a, v: np.convolve(a, v, "same"), [(3,), (5,)], "real"),
    # shape functions
    ("reshape", lambda x: np.reshape(x, (3, 2)), [(2, 3)], "real"),
    ("reshape-flat", lambda x: np.reshape(x, -1), [(2, 3)], "real"),
    ("ravel", lambda x: np.ravel(x), [(2, 3)], "real"),
    ("transpose", lambda x: np.transpose(x), [(2, 3)], "real"),
    ("transpose-axes", lambda x: np.transpose(x, (2, 0, 1)), [(2, 3, 2)], "real"),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 2), [(2, 3, 2)], "real"),
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1), [(2, 3, 2)], "real"),
    ("expand_dims", lambda x: np.expand_dims(x, 1) * x, [(2, 3)], "real"),
    ("expand_dims-0", lambda x: np.expand_dims(x, 0), [(3,)], "real"),
    ("squeeze", lambda x: np.squeeze(x), [(2, 1, 3)], "real"),
    ("squeeze-axis", lambda x: np.squeeze(x, axis=1), [(2, 1, 3)], "real"),
    ("concatenate", lambda a, b: np.concatenate([a, b]), [(2,), (3,)], "real"),
    ("concatenate-axis1", lambda a, b: np.concatenate((a, b), axis=1), [(2, 3), (2, 1)],
     "real"),
    ("concatenate-same", lambda a: np.concatenate([a, a * a]), [(3,)], "real"),
    ("stack", lambda a, b: np.stack([a, b]), [(3,), (3,)], "real"),
    ("stack-axis1", lambda a, b: np.stack([a, b], axis=1), [(2, 3), (2, 3)], "real"),
    ("hstack", lambda a, b: np.hstack([a, b]), [(2,), (3,)], "real"),
    ("hstack-2d", lambda a, b: np.hstack([a, b]), [(2, 3), (2, 2)], "real"),
    ("vstack", lambda a, b: np.vstack([a, b]), [(3,), (3,)], "real"),
    ("vstack-2d", lambda a, b: np.vstack([a, b]), [(2, 3), (1, 3)], "real"),
    ("vstack-vector-and-matrix", lambda a, b: np.vstack((a, b)), [(3,), (2, 3)], "real"),
    ("array-of-scalars", lambda a, b: np.array([a, b, a * b]), [(), ()], "real"),
    ("column_stack", lambda a, b: np.column_stack([a, b]), [(3,), (3,)], "real"),
    ("column_stack-mixed", lambda a, b: np.column_stack((a, b, a * a)), [(2,), (2, 3)],
     "real"),
    ("dstack", lambda a, b: np.dstack([a, b]), [(3,), (3,)], "real"),
    ("dstack-mixed", lambda a, b, c: np.dstack((a, b, c)), [(2, 3), (2, 3, 2), (2, 3)],
     "real"),
    ("dstack-row", lambda a, b: np.dstack((a, b)) * 2.0, [(3,), (1, 3)], "real"),
    ("row_stack", lambda a, b: np.row_stack([a, b]), [(3,), (2, 3)], "real"),
    # splits: tuples of pieces (the pieces combined into one output)
    ("split", lambda x: _split_halves(x), [(4,)], "real"),
    ("split-middle-piece", lambda x: np.split(x, 3)[1] * 2.0, [(6,)], "real"),
    ("split-indices-axis1", lambda x: _split_columns_at(x), [(2, 4)], "real"),
    ("split-axis-neg", lambda x: _split_last_axis(x), [(2, 3, 4)], "real"),
    ("array_split-unequal", lambda x: _array_split_unequal(x), [(7,)], "real"),
    ("array_split-axis1", lambda x: np.array_split(x, 2, axis=1)[1] * x[:, :1], [(2, 3)],
     "real"),
    ("hsplit", lambda x: _hsplit_halves(x), [(2, 4)], "real"),
    ("hsplit-vector", lambda x: _hsplit_halves(x, [1]), [(4,)], "real"),
    ("vsplit", lambda x: _vsplit_first_row(x), [(3, 3)], "real"),
    ("dsplit", lambda x: _dsplit_halves(x), [(2, 3, 4)], "real"),
    ("broadcast_to", lambda x: np.broadcast_to(x, (2, 3)), [(3,)], "real"),
    ("broadcast_to-col", lambda x: np.broadcast_to(x, (2, 3)), [(2, 1)], "real"),
    ("tile", lambda x: np.tile(x, 2), [(3,)], "real"),
    ("tile-2d", lambda x: np.tile(x, (2, 2)), [(2, 3)], "real"),
    ("tile-rank-up", lambda x: np.tile(x, (2, 1)), [(3,)], "real"),
    ("flip", lambda x: np.flip(x), [(2, 3)], "real"),
    ("flip-axis", lambda x: np.flip(x, 1), [(2, 3)], "real"),
    ("roll", lambda x: np.roll(x, 1), [(4,)], "real"),
    ("fliplr", lambda x: np.fliplr(x) * x, [(2, 3)], "real"),
    ("fliplr-3d", lambda x: np.fliplr(x), [(2, 3, 2)], "real"),
    ("flipud", lambda x: np.flipud(x) * x, [(3,)], "real"),
    ("flipud-2d", lambda x: np.flipud(x), [(3, 2)], "real"),
    ("rot90", lambda x: np.rot90(x), [(2, 3)], "real"),
    ("rot90-k2", lambda x: np.rot90(x, 2) * x, [(2, 3)], "real"),
    ("rot90-k-neg", lambda x: np.rot90(x, k=-1), [(2, 3)], "real"),
    ("rot90-axes", lambda x: np.rot90(x, 1, axes=(1, 2)), [(2, 3, 2)], "real"),
    ("rot90-k3-axes-neg", lambda x: np.rot90(x, 3, (-1, 0)), [(2, 3, 2)], "real"),
    ("rot90-k2-axes", lambda x: np.rot90(x, 2, (0, 2)) * x, [(2, 3, 2)], "real"),
    ("tril", lambda x: np.tril(x) * x, [(3, 3)], "real"),
    ("triu-k", lambda x: np.triu(x, 1) * x + np.tril(x, k=-1), [(3, 4)], "real"),
    ("tril-of-vector", lambda x: np.tril(x) * 2.0, [(3,)], "real"),
    ("diff", lambda x: np.diff(x), [(4,)], "real"),
    ("diff-2d", lambda x: np.diff(x) * x[:, 1:], [(2, 4)], "real"),
    ("diff-last-axis", lambda x: np.diff(x, axis=1), [(2, 4)], "real"),
    # (refused in reverse mode: "no reverse-mode rule for these argument ranks or options")
    ("diff-second", lambda x: np.diff(x, n=2), [(5,)], "real"),
    ("diff-first-axis", lambda x: np.diff(x, axis=0), [(3, 4)], "real"),
    ("diff-second-first-axis", lambda x: np.diff(x, 2, 0) * x[2:], [(4, 3)], "real"),
    ("diff-size-one-column", lambda x: np.diff(x, axis=0) + x[1:], [(4, 1)], "real"),
    ("diff-prepend-number", lambda x: np.diff(x, prepend=0.5) * x, [(4,)], "real"),
    ("diff-prepend-append-axis0", lambda x: np.diff(x, axis=0, append=x[:1] * 3.0,
                                                    prepend=1.5), [(3, 2)], "real"),
    ("diff-second-append-array", lambda x: np.diff(x, 2, append=np.array([1.0, 2.0])),
     [(4,)], "real"),
    ("take", lambda x: np.take(x, IDX), [(3,)], "real"),
    ("take-flat-2d", lambda x: np.take(x, ROWS) * 2.0, [(2, 3)], "real"),
    ("take-int", lambda x: np.take(x, 4) * x, [(2, 3)], "real"),
    ("take-axis1", lambda x: np.take(x, IDX, axis=1), [(2, 3)], "real"),
    ("take-axis0-2d-indices", lambda x: np.take(x, GRID, axis=0), [(2, 3)], "real"),
    ("take-axis-neg-int", lambda x: np.take(x, -1, axis=-1), [(2, 3, 2)], "real"),
    ("method-take", lambda x: x.take(IDX, axis=0) * 2.0, [(3, 2)], "real"),
    ("take-vector-axis-int", lambda x: np.take(x, 1, axis=0) * x, [(3,)], "real"),
    ("take-axis-2d-indices-times", lambda x: np.take(x, GRID, axis=1) * x[:, :1, None], [(2, 3)],
     "real"),
    ("repeat", lambda x: np.repeat(x, 3), [(2,)], "real"),
    ("repeat-flat-2d", lambda x: np.repeat(x, 2) * 2.0, [(2, 3)], "real"),
    ("repeat-axis0", lambda x: np.repeat(x, 2, axis=0), [(2, 3)], "real"),
    ("repeat-axis-neg", lambda x: np.repeat(x, 2, axis=-1), [(2, 3, 2)], "real"),
    ("repeat-counts", lambda x: np.repeat(x, COUNTS, axis=1), [(2, 3)], "real"),
    ("method-repeat", lambda x: x.repeat(2, axis=1) * 2.0, [(2, 3)], "real"),
    ("atleast_1d-number", lambda x: np.atleast_1d(x) * 2.0, [()], "real"),
    ("atleast_1d-matrix", lambda x: np.atleast_1d(x) * x, [(2, 3)], "real"),
    ("atleast_2d-number", lambda x: np.atleast_2d(x), [()], "real"),
    ("atleast_2d-vector", lambda x: np.atleast_2d(x) * x[:, None], [(3,)], "real"),
    ("atleast_2d-matrix", lambda x: np.atleast_2d(x), [(2, 3)], "real"),
    ("atleast_3d-number", lambda x: np.atleast_3d(x), [()], "real"),
    ("atleast_3d-vector", lambda x: np.atleast_3d(x), [(3,)], "real"),
    ("atleast_3d-matrix", lambda x: np.atleast_3d(x) * x[:, :, None], [(2, 3)], "real"),
    ("atleast_3d-rank-3", lambda x: np.atleast_3d(x), [(2, 1, 2)], "real"),
    ("sort", lambda x: np.sort(x) * x, [(4,)], "real"),
    ("sort-2d", lambda x: np.sort(x) * x, [(2, 3)], "real"),
    ("sort-axis0", lambda x: np.sort(x, axis=0) * x, [(3, 2)], "real"),
    ("sort-flat", lambda x: np.sort(x, axis=None) * np.ravel(x), [(2, 3)], "real"),
    ("copy", lambda x: np.copy(x) * x, [(3,)], "real"),
    ("asarray", lambda x: np.asarray(x) * 2.0, [(3,)], "real"),
    ("float", lambda x: float(x) * x, [()], "real"),
    # indexing reads
    ("index-int", lambda x: x[0], [(3,)], "real"),
    ("index-negative", lambda x: x[-1] * x, [(3,)], "real"),
    ("index-row", lambda x: x[1], [(2, 3)], "real"),
    ("index-element", lambda x: x[1, 2] * x[0, 0], [(2, 3)], "real"),
    ("slice", lambda x: x[1:], [(4,)], "real"),
    ("slice-step", lambda x: x[::2], [(5,)], "real"),
    ("slice-reverse", lambda x: x[::-1] * x, [(4,)], "real"),
    ("slice-2d", lambda x: x[:, 1:], [(2, 3)], "real"),
    ("newaxis", lambda x: x[:, None] * x[None, :], [(3,)], "real"),
    ("ellipsis", lambda x: x[..., 1], [(2, 3)], "real"),
    ("overlapping-slices", lambda x: x[1:] * x[:-1], [(5,)], "real"),
    ("int-array-repeated", lambda x: x[IDX], [(3,)], "real"),
    ("int-array-repeated-2d", lambda x: x[ROWS], [(2, 3)], "real"),
    ("int-array-and-int", lambda x: x[ROWS, 2], [(2, 3)], "real"),
    ("int-array-times", lambda x: x[IDX] * x[IDX], [(3,)], "real"),
    ("list-index", lambda x: x[[0, 0, 2]], [(3,)], "real"),
    ("mask", lambda x: x[x > 0.0], [(4,)], "nonzero"),
    # creators (no derivative) mixed with differentiable values
    ("zeros_like", lambda x: np.zeros_like(x) + x * x, [(3,)], "real"),
    ("ones_like", lambda x: np.ones_like(x) * x, [(2, 3)], "real"),
    ("zeros", lambda x: np.zeros(3) + x, [(3,)], "real"),
    ("ones", lambda x: np.ones((2, 3)) * x, [(3,)], "real"),
    ("full", lambda x: np.full((2, 3), 2.0) * x, [(3,)], "real"),
    ("full-wrt-value", lambda x: np.full((2, 3), x), [()], "real"),
    ("arange", lambda x: np.arange(3) * x, [(3,)], "real"),
    ("arange-float", lambda x: np.arange(0.0, 3.0) * x, [(3,)], "real"),
    ("eye", lambda x: np.eye(3) @ x, [(3,)], "real"),
    ("linspace", lambda x: np.linspace(0.0, 1.0, 3) * x, [(3,)], "real"),
    ("argmax", lambda x: x[np.argmax(x)], [(4,)], "real"),
    # math module scalars
    ("erf", lambda x: math.erf(x), [()], "real"),  # NumPy has no erf; math's is the primitive
    ("math.sin", lambda x: math.sin(x) * math.exp(x), [()], "real"),
    ("math.log", lambda x: math.log(x) + math.sqrt(x), [()], "pos"),
    ("math.pow", lambda x, y: math.pow(x, y), [(), ()], "pos"),
    ("math.atan2-hypot", lambda x, y: math.atan2(x, y) * math.hypot(x, y), [(), ()],
     "nonzero"),
    ("builtin-max-min", lambda x, y: max(x, y) - 2.0 * min(x, y), [(), ()], "real"),
]


def _split_halves(x):
    a, b = np.split(x, 2)
    return a * b


def _split_columns_at(x):
    a, b, c = np.split(x, [1, 2], axis=1)
    return a * c + b  # columns a and b have size one: broadcast, their cotangents summed


def _split_last_axis(x):
    a, b = np.split(x, 2, axis=-1)
    return a * b


def _array_split_unequal(x):
    a, b, c = np.array_split(x, 3)  # 7 entries: 3, 2 and 2
    return a[1:] * b * c


def _hsplit_halves(x, cuts=2):
    a, b = np.hsplit(x, cuts)
    return a * b


def _vsplit_first_row(x):
    top, rest = np.vsplit(x, [1])
    return top * rest


def _dsplit_halves(x):
    a, b = np.dsplit(x, 2)
    return a * b


def _eigen_pairs(a):
    """Both outputs of eigh; each eigenvector times its first entry, so its sign cancels."""
    w, v = np.linalg.eigh(a + a.T + SPREAD)
    return w * v * v[0]


def _logabsdet(a):
    sign, logdet = np.linalg.slogdet(a + 3.0 * np.eye(3))
    return logdet * 2.0


@pytest.mark.parametrize("entry", [pytest.param(e, id=e[0]) for e in STRUCTURAL])
def test_structural(entry, rng):
    name, f, shapes, domain = entry
    args = tuple(draw(domain, s, rng) for s in shapes)
    ad.check_grads(f, args, modes=("rev",))


def test_table_covers_every_partial():
    """Every entry of the scalar-partials table has a row in the elementwise op table."""
    tested = {e[0] for e in UNARY + BINARY + STRUCTURAL}
    assert set(PARTIALS) - tested == set()


def test_sinc_at_zero():
    """sinc's partial has a removable singularity at 0: the rule must give 0 there."""
    x = np.array([0.0, 0.25, -1.5])
    g = ad.grad(lambda x: np.sum(np.sinc(x)))(x)
    np.testing.assert_allclose(g, numeric_grad(lambda x: np.sum(np.sinc(x)), (x,), 0),
                               atol=1e-6)


def test_max_with_ties_splits_the_cotangent():
    """At a tie, max shares its cotangent between the winners (JAX's convention)."""
    x = np.array([1.0, 3.0, 3.0, 0.0])
    g = ad.grad(lambda x: np.max(x))(x)
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5, 0.0])


# ---------------------------------------------------------------- the checker can fail
def test_check_grads_catches_a_wrong_rule(monkeypatch):
    """A deliberately wrong reverse rule for sin (g * sin(x) instead of g * cos(x)) is caught."""
    rule = rules.lookup(np.sin)
    right = rule.vjp

    def wrong(call, g):
        from autodiff_ast.templates import fill
        return {"x": (fill("g * np.sin(x)", g=g, x=call.args["x"]), None)}

    monkeypatch.setattr(rule, "vjp", wrong)
    x = np.array([0.3, -0.7, 1.1])

    def f(x):  # a fresh function, so no module generated with the right rule is reused
        return np.sin(x) * 1.0
    with pytest.raises(AssertionError, match="reverse mode"):
        ad.check_grads(f, (x,), modes=("rev",))
    monkeypatch.undo()
    assert rule.vjp is right

    def g(x):
        return np.sin(x) * 1.0
    ad.check_grads(g, (x,), modes=("rev",))


def test_check_grads_catches_a_wrong_partial(monkeypatch):
    """A wrong entry in the partials table (d tanh = 1 + y*y) is caught too."""
    from autodiff_ast.rules import elementwise
    rule = rules.lookup(np.tanh)
    monkeypatch.setattr(rule, "vjp", elementwise._make_vjp(("1.0 + y * y",)))

    def f(x):
        return np.tanh(x) + 0.0
    with pytest.raises(AssertionError, match="reverse mode"):
        ad.check_grads(f, (np.array([0.5, -1.0]),), modes=("rev",))


# ---------------------------------------------------------------- coverage
# NumPy callables that are not differentiable functions of floats, or not functions of arrays
# at all (I/O, printing, type queries, dtype classes, ...), are left out of the count.
_NOT_MATH = ("load", "save", "print", "set_", "get_", "show", "info", "source", "who",
             "typename", "issub", "isdtype", "iscomplex", "isreal", "isscalar", "isfortran",
             "from", "frombuffer", "busday", "datetime", "is_busday", "format", "array2string",
             "array_repr", "array_str", "base_repr", "binary_repr", "deprecate", "disp",
             "errstate", "geterr", "seterr", "can_cast", "promote_types", "result_type",
             "min_scalar_type", "mintypecode", "common_type", "obj2sctype", "sctype2char",
             "dtype", "finfo", "iinfo", "nditer", "nested_iters", "ndindex", "ndenumerate",
             "broadcast", "vectorize", "frompyfunc", "memmap", "recarray", "record", "chararray",
             "matrix", "poly1d", "asmatrix", "bmat", "test", "add_docstring", "add_newdoc",
             "lookfor", "byte_bounds", "shares_memory", "may_share_memory", "genfromtxt",
             "loadtxt", "savetxt", "savez", "fromfile", "fromregex", "fromstring", "packbits",
             "unpackbits", "bitwise", "left_shift", "right_shift", "invert", "gcd", "lcm",
             "datetime_as_string", "datetime_data", "unravel_index", "ravel_multi_index",
             "require", "copyto", "putmask", "place", "put", "fill_diagonal", "setbufsize",
             "getbufsize", "seterrcall", "geterrcall", "printoptions", "asarray_chkfinite",
             "asanyarray", "ascontiguousarray", "asfortranarray", "emath", "char", "strings",
             "rec", "ma", "typing", "testing", "ctypeslib", "lib", "exceptions", "fft", "random",
             "polynomial", "version", "isnat", "issctype", "maximum_sctype", "show_config",
             "show_runtime", "info")


def numpy_math_callables():
    """Public NumPy ufuncs and functions of arrays (np.* and np.linalg.*), by name."""
    found = {}
    for module, prefix in ((np, "np."), (np.linalg, "np.linalg.")):
        for attr in sorted(dir(module)):
            if attr.startswith("_") or attr.startswith(_NOT_MATH):
                continue
            value = getattr(module, attr)
            if isinstance(value, (type, types.ModuleType)) or not callable(value):
                continue
            found[prefix + attr] = value
    return found


def test_rule_coverage_of_numpy():
    callables = numpy_math_callables()
    covered = sorted(n for n, fn in callables.items() if rules.lookup(fn) is not None)
    differentiable = sorted(n for n in covered
                            if not rules.lookup(callables[n]).nondiff_output
                            and rules.lookup(callables[n]).diff)
    missing = sorted(n for n, fn in callables.items() if rules.lookup(fn) is None)
    print(f"\n{len(covered)} NumPy callables have a rule ({len(differentiable)} with a "
          f"derivative); {len(missing)} have none:")
    print("  " + ", ".join(missing))
    assert len(covered) >= 80
    assert len(differentiable) >= 80


# ---------------------------------------------------------------- rank-generic code
# Without argument types (the command line without a signature), every argument is a float64
# array of unknown rank: the same table must still be right, or ask for the rank.
NEEDS_RANK = {"inner", "hstack", "hstack-2d", "vstack", "vstack-2d", "tile", "tile-2d",
              "tile-rank-up", "diff-last-axis", "average-weights-axis0-keepdims",
              "average-vector-weights", "norm-fro", "norm-2", "norm-1", "norm-inf",
              "norm-minus-inf", "multi_dot", "multi_dot-vectors", "tensordot", "tensordot-1",
              "tensordot-pairs", "column_stack", "column_stack-mixed", "dstack",
              "dstack-mixed", "dstack-row", "row_stack", "vstack-vector-and-matrix", "kron",
              "kron-2d", "kron-vector-matrix", "kron-matrix-vector", "kron-same",
              "diagonal", "diagonal-tall", "diagonal-stack", "diagonal-last-axes", "hsplit",
              "hsplit-vector", "eigvalsh", "eigh-vectors", "eigh-both", "cov", "cov-rowvar-bias",
              "cov-vector-ddof", "corrcoef", "corrcoef-rowvar", "trapezoid", "trapezoid-dx",
              "trapezoid-dx-arg", "trapezoid-axis0", "convolve", "convolve-valid",
              "convolve-same", "einsum-ellipsis", "einsum-ellipsis-broadcast",
              "einsum-ellipsis-implicit", "diff-first-axis", "diff-second-first-axis",
              "diff-size-one-column", "diff-prepend-number", "diff-prepend-append-axis0",
              "diff-second-append-array"}


def _all_cases():
    out = []
    for name, f, domain in UNARY:
        out += [pytest.param(f, [s], [domain], id=f"{name}[{_shape_id(s)}]")
                for s in UNARY_SHAPES]
    for name, f, da, db in BINARY:
        out += [pytest.param(f, list(s), [da, db],
                             id=f"{name}[{'-'.join(_shape_id(t) for t in s)}]")
                for s in BINARY_SHAPES]
    for name, f, shapes, domain in STRUCTURAL:
        out.append(pytest.param(f, shapes, [domain] * len(shapes), id=name))
    return out


def rank_generic_vjp(f, nargs):
    """(forward, backward) of `f` generated with every argument of unknown rank."""
    import inspect

    from autodiff_ast.build import build_vjp
    from autodiff_ast.signatures import DEFAULT
    from codegen.loader import load_source
    params = list(inspect.signature(f).parameters)[:nargs]
    generated = build_vjp(f, {p: DEFAULT for p in params})
    module = load_source(generated.source, "rank_generic")
    layout = generated.layout

    def pullback(args, cotangent):
        result = getattr(module, generated.entry)(*args)
        result = result if isinstance(result, tuple) else (result,)
        by_name = dict(zip(layout["params"], args))
        bars = getattr(module, generated.extra["bwd"])(
            *[by_name[p] for p in layout["bwd_params"]], *result[1:], cotangent)
        return result[0], bars if isinstance(bars, tuple) else (bars,)
    return pullback


@pytest.mark.parametrize("f,shapes,domains", _all_cases())
def test_rank_generic(f, shapes, domains, request, rng):
    name = request.node.callspec.id.split("[")[0]
    args = [draw(d, s, rng) for d, s in zip(domains, shapes)]
    if name in NEEDS_RANK:
        with pytest.raises(ad.MissingRuleError, match="needs the rank"):
            rank_generic_vjp(f, len(args))
        return
    pullback = rank_generic_vjp(f, len(args))
    out = f(*args)
    u = rng.standard_normal(np.shape(out))
    v = [rng.standard_normal(np.shape(a)) for a in args]
    out_generated, bars = pullback(args, u if np.ndim(out) else float(u))
    np.testing.assert_allclose(out_generated, out, rtol=1e-12)
    eps = 1e-6
    up = f(*[a + eps * d for a, d in zip(args, v)])
    down = f(*[a - eps * d for a, d in zip(args, v)])
    expected = np.sum(u * (np.asarray(up) - np.asarray(down)) / (2 * eps))
    for bar, a in zip(bars, args):
        assert np.shape(bar) == np.shape(a)
    got = sum(float(np.sum(b * d)) for b, d in zip(bars, v))
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)


def _triangles(x):
    a = np.outer(x, x)
    return np.trace(np.tril(a)) + np.sum(np.triu(a, 1) * a) + np.sum(np.tril(a, k=-1))


def test_triangles_in_forward_mode_under_jit_and_vmap(rng):
    """np.tril/np.triu (no rule before): both modes at order 2, the compiled gradient and
    the batched one against the plain gradient per example."""
    x = rng.standard_normal(4)
    ad.check_grads(_triangles, (x,), order=2, modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    want = ad.grad(_triangles)(x)
    np.testing.assert_allclose(jit(ad.grad(_triangles))(x), want, rtol=1e-12)
    xs = np.stack([x, 2.0 * x])
    rows = np.stack([want, ad.grad(_triangles)(2.0 * x)])
    np.testing.assert_allclose(ad.vmap(ad.grad(_triangles))(xs), rows, rtol=1e-12)


def _cholesky_loss(x, w):
    b = x.reshape(3, 2)
    return np.sum(np.linalg.cholesky(np.dot(b, b.T) + 3.0 * np.eye(3)) * w)


def test_cholesky_in_both_modes_and_under_jit(rng):
    """np.linalg.cholesky (no rule before): both modes at order 2 and the compiled gradient,
    and the cotangent of a symmetric input is symmetric (JAX's convention)."""
    x, w = rng.standard_normal(6), rng.standard_normal((3, 3))
    ad.check_grads(_cholesky_loss, (x, w), order=2, modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_cholesky_loss))(x, w),
                               ad.grad(_cholesky_loss)(x, w), rtol=1e-10)
    a = np.eye(3) * 2.0 + 0.3
    a_bar = ad.grad(lambda a: np.sum(np.linalg.cholesky(a) * w))(a)
    np.testing.assert_allclose(a_bar, a_bar.T, rtol=1e-12)
    xs = np.stack([x, 0.5 * x])  # batched: NumPy's cholesky maps over the leading axis
    np.testing.assert_allclose(ad.vmap(ad.grad(_cholesky_loss), in_axes=(0, None))(xs, w),
                               np.stack([ad.grad(_cholesky_loss)(v, w) for v in xs]),
                               rtol=1e-12)


def _cumprod_loss(x, w):
    return np.sum(np.cumprod(x, axis=0) * w) + np.sum(np.cumprod(x) * np.ravel(w))


def test_cumprod_in_both_modes_and_under_jit(rng):
    """np.cumprod (no rule before): both modes at order 1 along an axis and flattened, and
    the compiled gradient (Numba's cumprod takes no axis: a dialect helper)."""
    x, w = rng.uniform(-2.0, 2.0, (3, 2)), rng.standard_normal((3, 2))
    ad.check_grads(_cumprod_loss, (x, w), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_cumprod_loss))(x, w),
                               ad.grad(_cumprod_loss)(x, w), rtol=1e-10)


def _median_loss(x, w):
    return np.sum(np.median(x, axis=1) * w) + np.median(x) * np.median(x, axis=0)[1]


def test_median_in_both_modes_and_under_jit(rng):
    """np.median (no rule before): both modes along an axis and of the whole array, and the
    compiled gradient (Numba's median takes no axis: a dialect helper)."""
    x, w = rng.standard_normal((3, 4)), rng.standard_normal(3)
    ad.check_grads(_median_loss, (x, w), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_median_loss))(x, w),
                               ad.grad(_median_loss)(x, w), rtol=1e-12)


def _ptp_loss(x, w):
    return np.sum(np.ptp(x, axis=0) * w) + np.ptp(x) * np.ptp(x, axis=1, keepdims=True)[0, 0]


def test_ptp_in_both_modes_and_under_jit(rng):
    """np.ptp (no rule before): both modes, and the compiled gradient (Numba's ptp takes no
    axis: the maximum minus the minimum)."""
    x, w = rng.standard_normal((3, 4)), rng.standard_normal(4)
    ad.check_grads(_ptp_loss, (x, w), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_ptp_loss))(x, w), ad.grad(_ptp_loss)(x, w),
                               rtol=1e-12)


def _average_loss(x, w, v):
    return np.sum(np.average(x, axis=1, weights=w) * v) + np.average(x, axis=0, weights=v)[1]


def test_average_in_both_modes_and_under_jit(rng):
    """np.average (no rule before), with weights shaped like the array and a vector of them
    along an axis: both modes with respect to the values and the weights, and compiled."""
    x, w, v = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(0.5, 2.0, 3)
    ad.check_grads(_average_loss, (x, w, v), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    for got, want in zip(jit(ad.grad(_average_loss, argnums=(0, 1, 2)))(x, w, v),
                         ad.grad(_average_loss, argnums=(0, 1, 2))(x, w, v)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _norms_loss(x, w):
    return (np.sum(np.linalg.norm(x, 1, axis=0) * w) + np.linalg.norm(x, "fro") +
            np.linalg.norm(x[0], np.inf) * np.linalg.norm(x[1], -np.inf))


def test_norm_orders_in_both_modes_and_under_jit(rng):
    """np.linalg.norm with ord=1, inf, -inf (vectors, or along an axis) and 'fro' (no rule
    before): both modes, and compiled (Numba's norm takes no axis and no string order)."""
    x, w = rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(0.3, 2.0, (3, 4)), rng.normal(size=4)
    ad.check_grads(_norms_loss, (x, w), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(_norms_loss))(x, w), ad.grad(_norms_loss)(x, w),
                               rtol=1e-12)


def _products_loss(a, b, c):
    return (np.sum(np.linalg.multi_dot([a, b, c]) * np.dot(a, a.T)) +
            np.sum(np.tensordot(b, c, axes=([1], [0])) ** 2) +
            np.tensordot(a, a.T, axes=(1, 0))[0, 1])


def test_multi_dot_and_tensordot_in_both_modes_and_under_jit(rng):
    """np.linalg.multi_dot and np.tensordot (no rules before), written as einsums: both
    modes, and compiled (Numba has neither: products of reshaped operands)."""
    a, b, c = rng.normal(size=(2, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    ad.check_grads(_products_loss, (a, b, c), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    argnums = (0, 1, 2)
    for got, want in zip(jit(ad.grad(_products_loss, argnums))(a, b, c),
                         ad.grad(_products_loss, argnums)(a, b, c)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _cross_loss(a, b):
    return np.sum(np.cross(a, b) * np.cross(b, a[0]))


def test_cross_in_both_modes_and_under_jit(rng):
    """np.cross of 3-vectors and stacks of them (no rule before): both modes, and compiled."""
    a, b = rng.normal(size=(4, 3)), rng.normal(size=3)
    ad.check_grads(_cross_loss, (a, b), modes=("rev", "fwd"))
    from autodiff_ast.jit import jit
    for got, want in zip(jit(ad.grad(_cross_loss, (0, 1)))(a, b),
                         ad.grad(_cross_loss, (0, 1))(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


# Rules added after the table: both modes at order 2 (the forward rule, and the reverse rule's
# own derivative), for at least one call of each function.
def _taken(x):
    return np.sum(np.take(x, GRID, axis=1) ** 2) + np.sum(np.take(x, IDX) * x[0, 0])


def _repeated(x):
    return np.sum(np.repeat(x, 2, axis=1) ** 2) + np.sum(np.repeat(x, COUNTS, axis=1) * x[0, 0])


def _atleast(x, s):
    return np.sum(np.atleast_3d(x) ** 2) + np.sum(np.atleast_2d(x[0]) * np.atleast_1d(s) * s)


def _turned(x):
    return np.sum(np.rot90(x, 1, (0, 2)) ** 2) + np.sum(np.fliplr(x) * np.flipud(x) * x)


def _side_by_side(a, b):
    stacked = np.dstack([a, a * b[:2, :1]])
    return np.sum(np.column_stack((a[0], b)) ** 2) + np.sum(stacked * a[:, :, None])


def _on_diagonals(x):
    return np.sum(np.diagflat(x) ** 2) + np.sum(np.diagflat(x * x, -1) * np.diagflat(x, k=-1))


def _kron_products(a, b):
    mixed = np.kron(b[0], a) * np.kron(a, b[:2, 1])  # a vector beside a matrix, both ways
    return np.sum(np.kron(a, b) ** 2) + np.sum(np.kron(a[0], b[:, 0]) ** 3) + np.sum(mixed)


def _split_pieces(x):
    a, b = np.split(x, 2, axis=1)
    top, bottom = np.vsplit(x, [1])
    p, q, r = np.array_split(x, 3, axis=1)  # 4 columns: 2, 1 and 1
    u, w = np.hsplit(x, [3])
    return (np.sum(a * b ** 2) + np.sum(top * bottom) + np.sum(p) * np.sum(q * r) +
            np.sum(u ** 3) * w[0, 0])


BOTH_MODES = [
    ("kron", _kron_products, [(2, 3), (3, 2)]),
    ("diagflat", _on_diagonals, [(2, 2)]),
    ("column_stack-dstack", _side_by_side, [(2, 3), (3, 2)]),
    ("flips-and-rot90", _turned, [(2, 3, 2)]),
    ("atleast", _atleast, [(2, 3), ()]),
    ("take", _taken, [(2, 3)]),
    ("repeat", _repeated, [(2, 3)]),
    ("splits", _split_pieces, [(2, 4)]),
]


@pytest.mark.parametrize("entry", [pytest.param(e, id=e[0]) for e in BOTH_MODES])
def test_new_rules_in_both_modes_at_order_2_and_batched(entry, rng):
    """check_grads in both modes at order 2; vmap(grad) against the gradient per example."""
    name, f, shapes = entry
    args = tuple(draw("real", s, rng) for s in shapes)
    ad.check_grads(f, args, order=2, modes=("rev", "fwd"))
    batch = [np.stack([a, 0.5 * a - 0.25]) for a in args]
    want = [ad.grad(f, argnums=tuple(range(len(args))))(*[b[i] for b in batch])
            for i in range(2)]
    got = ad.vmap(ad.grad(f, argnums=tuple(range(len(args)))))(*batch)
    for k in range(len(args)):
        np.testing.assert_allclose(got[k], np.stack([w[k] for w in want]), rtol=1e-12)


@pytest.mark.parametrize("entry", [pytest.param(e, id=e[0]) for e in BOTH_MODES])
def test_new_rules_hessians_match_differences_of_the_gradient(entry, rng):
    """ad.hessian (vmap over the forward derivative of the gradient: every rule's batching
    rule differentiated) against central differences of the gradient along a direction."""
    name, f, shapes = entry
    args = tuple(draw("real", s, rng) for s in shapes)
    assert_hessian_matches_gradient_differences(f, args, rng)


def _diff_from(x, start):
    return np.sum(np.diff(x, prepend=start) ** 2)


def test_diff_with_prepend_and_append_in_every_mode_and_under_jit(rng):
    """np.diff's prepend=/append= join their values to x along the axis (a number made a
    slice of x's shape, as NumPy does): derivatives for x and for a prepended number, in
    both modes and under jit (they were refused)."""
    x = rng.normal(size=(3, 4))
    ad.check_grads(_diff_from, (x, 0.7), order=2, modes=("fwd", "rev"))
    g = ad.grad(_diff_from, argnums=(0, 1))
    for got, want in zip(ad.jit(g)(x, 0.7), g(x, 0.7)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # d/d start of sum((x[:, 0] - start)**2) = -2 * sum(x[:, 0] - start)
    np.testing.assert_allclose(g(x, 0.7)[1], -2.0 * np.sum(x[:, 0] - 0.7), rtol=1e-12)
