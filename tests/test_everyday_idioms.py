"""Everyday numerical idioms an idiom survey (session 28, survey C) found wrong or crashing:
each test runs the idiom through the transformation that failed and compares with an
independent reference (central finite differences through check_grads, a Python loop over
examples, or values written out).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_vmap import numeric_grad as fd_grad  # central differences

import autodiff_ast as ad
from autodiff_ast.jit import jit

RNG = np.random.default_rng(28)


# ---------------------------------------------------------------- a helper returning its
# rebound parameter: `u = new` in a loop, then `return s, u`
def _relax(u, c):
    for _ in range(2):
        new = u.copy()
        new[1:-1] = u[1:-1] + c * (u[2:] + u[:-2] - 2.0 * u[1:-1])
        u = new
    return np.sum(u ** 2), u


def _relax_energy(u):
    s, v = _relax(u, 0.1)
    return s + np.sum(v * np.sin(v))


def _relaxed_only_energy(u):
    s, v = _relax(u, 0.1)
    return s * 2.0


def _heat(u, c):
    for _ in range(2):
        new = u.copy()
        new[1:-1] = u[1:-1] + c * (u[2:] + u[:-2] - 2.0 * u[1:-1])
        u = new
    return np.sum(u ** 2)


def _heat_at(u):
    return _heat(u, 0.1)


@pytest.mark.parametrize("f", [_relax_energy, _relaxed_only_energy])
def test_vjp_of_helper_returning_its_rebound_parameter(f):
    # The helper's backward function read the parameter's final value, which was neither
    # a residual nor passed again: NameError in generated code.
    x = RNG.standard_normal(6)
    ad.check_grads(f, (x,), order=1, modes=("rev",))
    _, pullback = ad.vjp(f, x)
    np.testing.assert_allclose(pullback(1.0)[0], fd_grad(f, x), rtol=1e-6, atol=1e-8)


def test_second_order_of_a_stencil_loop():
    # grad(f)'s module has heat_fwd return (sum, u); differentiating it again crashed.
    x = RNG.standard_normal(6)
    ad.check_grads(_heat_at, (x,), order=2, modes=("fwd", "rev"))
    g = ad.grad(_heat_at)
    hess = np.stack([ad.vjp(g, x)[1](e)[0] for e in np.eye(6)])
    np.testing.assert_allclose(hess, np.stack([fd_grad(lambda v, k=k: g(v)[k], x)
                                               for k in range(6)]), rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- jvp/vjp of grad(f) with a
# pytree argument, after grad(f) was called
def _loglik(params, zs):
    q = params["q"]
    ll = 0.0
    s = 1.0
    for z in zs:
        s = s * 0.5 + q
        innov = z - s
        ll = ll - (np.log(s) + innov ** 2 / s)
    return ll


def test_derivatives_of_grad_with_pytree_argument_after_a_call():
    # The call wrote grad's module with loop tapes as columns of one matrix; jvp and vjp of
    # grad then read that module and refused the shared memory of its own tapes.
    zs = np.array([0.3, -0.2, 0.5])
    p = {"q": 0.4}
    g = ad.grad(_loglik)
    g(p, zs)

    def h(q):
        p = {"q": q}
        return _loglik(p, zs)
    eps = 1e-5
    second = (ad.grad(h)(0.4 + eps) - ad.grad(h)(0.4 - eps)) / (2 * eps)
    _, tangent = ad.jvp(g, (p, zs), ({"q": 1.0}, np.zeros(3)))
    np.testing.assert_allclose(tangent["q"], second, rtol=1e-6)
    _, pullback = ad.vjp(g, p, zs)
    np.testing.assert_allclose(pullback({"q": 1.0})[0]["q"], second, rtol=1e-6)
    ad.check_grads(lambda p: _loglik(p, zs), (p,), order=2, modes=("fwd", "rev"))


# ---------------------------------------------------------------- helpers with b=None
def _leaky(z, alpha=0.1):
    return np.where(z > 0, z, alpha * z)


def _dense(x, W, b=None, act=True, scale=1.0):
    z = W @ x
    if b is not None:
        z = z + b
    if act:
        return _leaky(z, alpha=0.2) * scale
    return z * scale


def _two_layer(W1, W2, x):
    h = _dense(x, W1, b=np.ones(W1.shape[0]), scale=0.5)
    out = _dense(h, W2, act=False)
    return np.sum(np.tanh(out))


def test_none_default_argument_test_is_decided_where_code_is_generated():
    W1, W2, x = RNG.standard_normal((4, 3)), RNG.standard_normal((2, 4)), RNG.standard_normal(3)
    g = ad.grad(_two_layer)
    np.testing.assert_allclose(g(W1, W2, x), fd_grad(lambda w: _two_layer(w, W2, x), W1),
                               rtol=1e-6, atol=1e-8)
    # vmap of the gradient refused its own generated code (`add = z + b` typed float, then
    # an array, where b is None)
    batch = np.stack([W1, 1.1 * W1, 0.9 * W1])
    got = ad.vmap(g, in_axes=(0, None, None))(batch, W2, x)
    np.testing.assert_allclose(got, np.stack([g(w, W2, x) for w in batch]), rtol=1e-12)
    assert "is not None" not in ad.source(g, W1, W2, x)
    np.testing.assert_allclose(jit(g)(W1, W2, x), g(W1, W2, x), rtol=1e-12)


def _dense_act(x, W, act):
    z = W @ x
    if act:
        return np.tanh(z)
    return z * 2.0


def _two_dense(W, x):
    return np.sum(_dense_act(x, W, True) ** 2) + np.sum(_dense_act(x, W, False))


def _product_then_branch(W, x, act):
    z = W @ x
    if act:
        z = np.tanh(z)
    return np.sum(z ** 2)


@pytest.mark.parametrize("f, extra", [(_two_dense, ()), (_product_then_branch, (True,))])
def test_jit_of_a_product_followed_by_an_if(f, extra):
    # codegen/fused_regions.py read `.value` of the `if` after a run of products.
    W, x = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    got = jit(ad.grad(f))(W, x, *extra)
    np.testing.assert_allclose(got, fd_grad(lambda w: f(w, x, *extra), W), rtol=1e-6,
                               atol=1e-8)


# ---------------------------------------------------------------- vmap of has_aux outputs
def _loss_tuple_aux(w, X):
    pred = X @ w
    return np.sum(pred ** 2), (pred, np.mean(pred))


def _loss_dict_aux(w, X):
    pred = X @ w
    return np.sum(pred ** 2), {"pred": pred, "m": np.mean(pred)}


def _loss_loop_dict_aux(w, X):
    pred = X @ w
    loss = 0.0
    for i in range(3):
        loss = loss + np.sum(np.tanh(pred * i) ** 2)
    return loss, {"pred": pred, "m": np.mean(pred)}


def _loss_masked_tuple_aux(w, X):
    pred = X @ w
    pos = pred[pred > 0]
    return np.sum(pos ** 2), (pred, np.sum(pos))


def _returns_dict(x):
    return {"a": x * 2.0, "s": np.sum(x)}


def _stacked(outs):
    """Per-example results (pytrees) stacked leaf by leaf, as vmap returns them."""
    first = outs[0]
    if isinstance(first, tuple):
        return tuple(_stacked([o[k] for o in outs]) for k in range(len(first)))
    if isinstance(first, dict):
        return {k: _stacked([o[k] for o in outs]) for k in first}
    return np.stack([np.asarray(o) for o in outs])


def _assert_same_tree(got, want):
    """The same tuples and dicts, leaves equal (a number may be a float or np.float64)."""
    if isinstance(want, (tuple, dict)):
        assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _assert_same_tree(a, b)
    elif isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _assert_same_tree(got[k], want[k])
    else:
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


AUX_LOSSES = [_loss_tuple_aux, _loss_dict_aux, _loss_loop_dict_aux, _loss_masked_tuple_aux]


@pytest.mark.parametrize("loss", AUX_LOSSES)
@pytest.mark.parametrize("transform", [ad.grad, ad.value_and_grad])
def test_vmap_of_grad_with_aux(loss, transform):
    # A tuple aux came back in the gradient's place (silently: (mean, pred) for (grad,
    # (pred, mean))); a dict aux was refused with "the rank of output 0 is unknown".
    ws, X = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    g = transform(loss, has_aux=True)
    want = _stacked([g(w, X) for w in ws])
    _assert_same_tree(ad.vmap(g, in_axes=(0, None))(ws, X), want)


@pytest.mark.parametrize("batching", ["loop", "vectorized"])
@pytest.mark.parametrize("loss", [_loss_tuple_aux, _loss_dict_aux, _loss_loop_dict_aux])
def test_jit_vmap_of_grad_with_aux(loss, batching):
    ws, X = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    g = ad.grad(loss, has_aux=True)
    want = _stacked([g(w, X) for w in ws])
    _assert_same_tree(jit(ad.vmap(g, in_axes=(0, None)), batching=batching)(ws, X), want)


def test_vmap_out_axes_inside_a_tuple_aux():
    ws, X = RNG.standard_normal((3, 4)), RNG.standard_normal((5, 4))
    g = ad.grad(_loss_masked_tuple_aux, has_aux=True)
    grads, (pred, total) = ad.vmap(g, in_axes=(0, None), out_axes=(0, (1, 0)))(ws, X)
    per = [g(w, X) for w in ws]
    np.testing.assert_allclose(grads, np.stack([p[0] for p in per]), rtol=1e-12)
    np.testing.assert_allclose(pred, np.stack([p[1][0] for p in per], axis=1), rtol=1e-12)
    np.testing.assert_allclose(total, [p[1][1] for p in per], rtol=1e-12)


@pytest.mark.parametrize("wrap", [lambda f: f, lambda f: jit(f, batching="loop"),
                                  lambda f: jit(f, batching="vectorized")])
def test_vmap_of_a_function_returning_a_dict(wrap):
    xs = RNG.standard_normal((3, 4))
    got = wrap(ad.vmap(_returns_dict))(xs)
    _assert_same_tree(got, {"a": xs * 2.0, "s": xs.sum(axis=1)})


# ---------------------------------------------------------------- a dict display passed to a
# function of the user's
def _affine_loss(params, x):
    return np.sum((params["w"] * x + params["b"]) ** 2)


def _inline_dict_argument(w, x):
    return _affine_loss({"w": w, "b": 0.5}, x)


def _keyword_dict_argument(w, x):
    return _affine_loss(x=x, params={"b": np.sin(w), "w": w})


@pytest.mark.parametrize("f", [_inline_dict_argument, _keyword_dict_argument])
def test_dict_display_passed_to_a_helper(f):
    # was refused at the helper's `params["w"]` ("reading a dict returned by a call")
    w, x = RNG.standard_normal(3), RNG.standard_normal(3)
    ad.check_grads(lambda v: f(v, x), (w,), order=2, modes=("fwd", "rev"))
    g = ad.grad(f)
    np.testing.assert_allclose(g(w, x), fd_grad(lambda v: f(v, x), w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(g)(w, x), g(w, x), rtol=1e-12)
    ws = np.stack([w, 2 * w])
    np.testing.assert_allclose(ad.vmap(g, in_axes=(0, None))(ws, x),
                               np.stack([g(v, x) for v in ws]), rtol=1e-12)


# ---------------------------------------------------------------- zip over a pytree's list
def _fit_two(model, ys):
    res = [np.sum((m - y) ** 2) for m, y in zip([model, 2.0 * model], ys)]
    return sum(res)


def _fit_loop(model, ys):
    total = 0.0
    for k, (m, y) in enumerate(zip((model, np.sin(model)), ys)):
        total = total + (k + 1) * np.sum((m - y) ** 2)
    return total


def _layers_zip(params, x):
    h = x
    for W, s in zip(params["W"], (1.0, 0.5)):
        h = np.tanh(s * (W @ h))
    return np.sum(h ** 2)


@pytest.mark.parametrize("f", [_fit_two, _fit_loop])
def test_zip_with_a_list_argument(f):
    # was refused: "returning a whole pytree argument is not supported", at the zip line
    x = np.linspace(0.0, 1.0, 5)
    ys = [RNG.standard_normal(5), RNG.standard_normal(5)]
    ad.check_grads(lambda v: f(v, ys), (x,), order=2, modes=("fwd", "rev"))
    g = ad.grad(f)
    np.testing.assert_allclose(g(x, ys), fd_grad(lambda v: f(v, ys), x), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(jit(g)(x, ys), g(x, ys), rtol=1e-12)
    xs = np.stack([x, x + 0.5])
    np.testing.assert_allclose(ad.vmap(g, in_axes=(0, None))(xs, ys),
                               np.stack([g(v, ys) for v in xs]), rtol=1e-12)


def test_zip_of_a_pytree_list_with_a_tuple():
    params = {"W": [RNG.standard_normal((3, 2)), RNG.standard_normal((2, 3))]}
    x = RNG.standard_normal(2)
    grads = ad.grad(_layers_zip)(params, x)
    for k in range(2):
        def at(w, k=k):
            p = {"W": list(params["W"])}
            p["W"][k] = w
            return _layers_zip(p, x)
        np.testing.assert_allclose(grads["W"][k], fd_grad(at, params["W"][k]), rtol=1e-6,
                                   atol=1e-8)


def test_zip_of_a_pytree_list_with_an_array_is_refused_at_the_line():
    def f(x, ys):
        total = 0.0
        for a, y in zip(x, ys):
            total = total + a * np.sum(y)
        return total
    with pytest.raises(ad.UnsupportedSyntaxError, match="length is not known") as info:
        ad.grad(f)(np.ones(2), [np.ones(3), np.ones(3)])
    assert "for a, y in zip(x, ys):" in str(info.value)


# ---------------------------------------------------------------- unpacking an array's entries
def _shoelace(pts):
    n = pts.shape[0]
    area = 0.0
    for i in range(n):
        x0, y0 = pts[i]
        x1, y1 = pts[(i + 1) % n]
        area = area + x0 * y1 - x1 * y0
    return 0.5 * area


def _rows_unpacked(pts):
    s = 0.0
    for x, y in pts:
        s = s + x * y ** 2
    return s


def _three(v):
    a, b, c = v
    return a * b + np.sin(c)


def test_unpacking_an_array_row():
    # was refused: "can only unpack tuples whose length is known"
    pts = np.array([[0.0, 0.0], [1.2, 0.1], [1.0, 1.1], [-0.1, 0.9]])
    for f in (_shoelace, _rows_unpacked):
        ad.check_grads(f, (pts,), order=2, modes=("fwd", "rev"))
        g = ad.grad(f)
        np.testing.assert_allclose(jit(g)(pts), g(pts), rtol=1e-12)
        batch = np.stack([pts, 1.5 * pts])
        np.testing.assert_allclose(ad.vmap(g)(batch), np.stack([g(p) for p in batch]),
                                   rtol=1e-12)
    # d area / d x_i = (y_{i+1} - y_{i-1}) / 2, d area / d y_i = (x_{i-1} - x_{i+1}) / 2
    expect = 0.5 * np.stack([np.roll(pts[:, 1], -1) - np.roll(pts[:, 1], 1),
                             np.roll(pts[:, 0], 1) - np.roll(pts[:, 0], -1)], axis=1)
    np.testing.assert_allclose(ad.grad(_shoelace)(pts), expect, rtol=1e-12, atol=1e-15)
    v = np.array([0.3, -1.2, 0.7])
    np.testing.assert_allclose(ad.grad(_three)(v), [v[1], v[0], np.cos(v[2])], rtol=1e-12)


def test_unpacking_an_array_of_another_length_raises_as_python_does():
    with pytest.raises(ValueError, match="cannot unpack an array into 3 names"):
        ad.grad(_three)(np.ones(4))
    with pytest.raises(ValueError):
        _three(np.ones(4))


# ---------------------------------------------------------------- vmap: a helper given a tuple
# only some of whose entries differ between examples
def _tuple_helper(t):
    a, b = t
    return np.sum(a * b) + b


def _passes_a_mixed_tuple(x, c):
    t = (x, c * 2.0)
    return _tuple_helper(t)


def test_vmap_of_a_helper_given_a_partly_batched_tuple():
    # the batched helper took the whole tuple as batched: b[:, None] of a number crashed
    xs, c = RNG.standard_normal((3, 4)), 1.5
    for f in (_passes_a_mixed_tuple, ad.grad(_passes_a_mixed_tuple, argnums=1)):
        got = ad.vmap(f, in_axes=(0, None))(xs, c)
        np.testing.assert_allclose(got, [f(x, c) for x in xs], rtol=1e-12)
    np.testing.assert_allclose(ad.vmap(ad.grad(_passes_a_mixed_tuple, argnums=1),
                                       in_axes=(0, None))(xs, c),
                               2.0 * xs.sum(axis=1) + 2.0, rtol=1e-12)


# ---------------------------------------------------------------- a has_aux loss called by
# another function: `loss, aux = loss_fn(w)`, `loss_fn(w)[0]`, aux passed on or read
def _loss_with_metrics(w, X, y):
    pred = X @ w
    err = pred - y
    return np.mean(err ** 2), {"pred": pred, "mae": np.mean(np.abs(err))}


def _first_of(w, X, y):
    return _loss_with_metrics(w, X, y)[0]


def _reads_metric(w, X, y):
    loss, aux = _loss_with_metrics(w, X, y)
    return loss + 0.1 * aux["mae"] + np.sum(aux["pred"] ** 2)


def _passes_on(w, X, y):
    loss, aux = _loss_with_metrics(w, X, y)
    return loss, aux


def _returns_the_call(w, X, y):
    return _loss_with_metrics(w, X, y)


def _data():
    return RNG.standard_normal(3), RNG.standard_normal((4, 3)), RNG.standard_normal(4)


@pytest.mark.parametrize("f", [_first_of, _reads_metric])
def test_indexing_a_has_aux_loss_called_by_another_function(f):
    # reverse mode refused: "returns a dict, which has no derivative here"; reading aux["mae"]
    # was refused in every mode
    w, X, y = _data()
    ad.check_grads(lambda v: f(v, X, y), (w,), order=2, modes=("fwd", "rev"))
    g = ad.grad(f)
    np.testing.assert_allclose(g(w, X, y), fd_grad(lambda v: f(v, X, y), w), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(jit(g)(w, X, y), g(w, X, y), rtol=1e-12)


@pytest.mark.parametrize("f", [_passes_on, _returns_the_call])
def test_a_has_aux_loss_passed_on_as_aux(f):
    w, X, y = _data()
    g = ad.grad(f, has_aux=True)
    grads, aux = g(w, X, y)
    np.testing.assert_allclose(grads, fd_grad(lambda v: f(v, X, y)[0], w), rtol=1e-6,
                               atol=1e-8)
    _assert_same_tree(aux, {"pred": X @ w, "mae": np.mean(np.abs(X @ w - y))})
    _assert_same_tree(jit(g)(w, X, y), (grads, aux))
    ws = np.stack([w, 2.0 * w])
    _assert_same_tree(ad.vmap(g, in_axes=(0, None, None))(ws, X, y),
                      _stacked([g(v, X, y) for v in ws]))


# ---------------------------------------------------------------- np.trapezoid, np.convolve
def _trapz_energy(a, t):
    y = a[0] * np.exp(-a[1] * t) * np.cos(a[2] * t)
    return np.trapezoid(y ** 2, t)


def _trapz_rows(Y, t):
    return np.sum(np.trapezoid(np.tanh(Y), t, axis=0) ** 2) + np.trapezoid(Y[0] ** 3, dx=0.5)


def _smooth_penalty(x):
    k = np.ones(3) / 3.0
    s = np.convolve(x, k, mode="valid")
    return np.sum((s - x[1:-1]) ** 2) + np.sum(np.convolve(x, np.array([1.0, -1.0])) ** 2)


def _self_convolution(x):
    return np.sum(np.convolve(x, x[::-1], "same") ** 2)


@pytest.mark.parametrize("f, args", [
    (_trapz_energy, (np.array([1.0, 0.5, 2.0]), np.linspace(0.0, 2.0, 7))),
    (_trapz_rows, (RNG.standard_normal((5, 3)), np.sort(RNG.uniform(0.0, 3.0, 5)))),
    (_smooth_penalty, (RNG.standard_normal(7),)),
    (_self_convolution, (RNG.standard_normal(5),)),
])
def test_trapezoid_and_convolve(f, args):
    # np.trapezoid and np.convolve had no rule (MissingRuleError at the line)
    ad.check_grads(f, args, order=2, modes=("fwd", "rev"))
    g = ad.grad(f)
    first, rest = args[0], args[1:]
    np.testing.assert_allclose(g(*args), fd_grad(lambda v: f(v, *rest), first), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(jit(g)(*args), g(*args), rtol=1e-10, atol=1e-12)
    batch = np.stack([first, 0.8 * first])
    np.testing.assert_allclose(ad.vmap(g, in_axes=(0,) + (None,) * len(rest))(batch, *rest),
                               np.stack([g(b, *rest) for b in batch]), rtol=1e-12)


def test_second_derivatives_through_convolve_cross_terms():
    # The gradient reads `convolve_g`, the name the rule's own temporary takes when that
    # gradient is differentiated again: renaming the temporary renamed the argument too,
    # and the mixed second derivatives came out silently wrong.
    a, v = RNG.standard_normal(6), RNG.standard_normal(3)

    def f(a, v):
        return np.sum(np.convolve(a, v) ** 2)
    g = ad.grad(f, argnums=(0, 1))
    w = np.arange(3.0)
    got = ad.grad(lambda x: g(x, v)[1] @ w)(a)
    np.testing.assert_allclose(got, fd_grad(lambda x: g(x, v)[1] @ w, a), rtol=1e-6, atol=1e-8)
    w = np.arange(6.0)
    got = ad.grad(lambda x: g(a, x)[0] @ w)(v)
    np.testing.assert_allclose(got, fd_grad(lambda x: g(a, x)[0] @ w, v), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- `1.0 * n` makes a float of
# an int (session 38's bug hunt): simplification dropped the user's 1.0, so np.arange(3) * 1.0
# stayed an int array and the float written into it was truncated
def _float_arange(x):
    k = np.arange(3) * 1.0
    k[0] = x[0] * 0.5
    return np.sum(k * x)


def _float_fill(x):
    n = x.shape[0]
    s = np.full(x.shape, 1.0 * n)
    s[0] = x[0] * 0.7
    return np.sum(s * x)


def _float_entries(x):
    v = np.array([x.shape[0] + 0.0, x.shape[0] / 1])
    v[0] = x[0] * 0.3
    return np.sum(v * x[:2])


def _float_count_aux(x):
    return np.sum(x ** 2), {"n": 1.0 * x.shape[0]}


@pytest.mark.parametrize("f", [_float_arange, _float_fill, _float_entries],
                         ids=lambda f: f.__name__)
def test_one_times_an_int_stays_a_float(f):
    x = np.array([1.0, 2.0, 3.0])
    value, g = ad.value_and_grad(f)(x)
    np.testing.assert_allclose(value, f(x), rtol=1e-12)
    np.testing.assert_allclose(g, fd_grad(f, x), rtol=1e-6, atol=1e-8)
    value_jit, g_jit = jit(ad.value_and_grad(f))(x)
    np.testing.assert_allclose(value_jit, f(x), rtol=1e-12)
    np.testing.assert_allclose(g_jit, g, rtol=1e-12)


def test_one_times_an_int_in_an_aux_dict_is_a_float():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    _, aux = ad.grad(_float_count_aux, has_aux=True)(x)
    assert isinstance(aux["n"], float) and aux["n"] == 4.0


# ---------------------------------------------------------------- masked and integer weights
# `np.sum(y * mask)` seeds y_bar with `1.0 * mask`, simplified to the bool (or int) mask
# itself: the float updates written into y_bar in the loop truncated (grad gave [1, 0, 1]
# for exp(x) * mask; vmap(grad) a bool array; a slice update a casting error). The first
# adjoint bound to an integral expression is made a float (reverse._integral).
MASK = np.array([True, False, True])


def _masked_loop(x, mask):
    y = x.copy()
    for i in range(x.shape[0]):
        y[i] = np.exp(y[i])
    return np.sum(y * mask)


def _integer_weights(x):
    y = x.copy()
    y[1:] = np.sin(y[1:])
    return np.sum(y * np.arange(3))


def _integer_array_weights(x, k):
    return np.sum(x * k) + np.sum(np.sin(x) * (k * 2))


def test_integer_and_boolean_weights_keep_float_gradients():
    x = np.array([0.3, -0.4, 0.5])
    expected = np.exp(x) * MASK
    for mask in (MASK, MASK.astype(np.int64)):
        np.testing.assert_allclose(ad.grad(_masked_loop)(x, mask), expected, rtol=1e-12)
    vm = ad.vmap(ad.grad(_masked_loop), in_axes=(0, None))(np.stack([x, x]), MASK)
    assert vm.dtype == np.float64
    np.testing.assert_allclose(vm[1], expected, rtol=1e-12)
    np.testing.assert_allclose(ad.grad(_integer_weights)(x),
                               fd_grad(_integer_weights, x), rtol=1e-6, atol=1e-8)
    k = np.array([1, 2, 3])
    g = ad.grad(_integer_array_weights)(x, k)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, k + 2 * k * np.cos(x), rtol=1e-12)


@pytest.mark.numba
def test_integer_and_boolean_weights_under_jit():
    x = np.array([0.3, -0.4, 0.5])
    np.testing.assert_allclose(jit(ad.grad(_masked_loop))(x, MASK), np.exp(x) * MASK,
                               rtol=1e-12)
    np.testing.assert_allclose(jit(ad.grad(_integer_weights))(x),
                               fd_grad(_integer_weights, x), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- forward mode with a dict aux
# jacfwd(f, has_aux=True) and jvp(f, ..., has_aux=True) of a loss whose aux is a dict were
# refused ("f returns a dict, which has no derivative here (a dict is passed back only as
# has_aux's aux output)"), with has_aux given; jacfwd then crashed laying out the dict.
def _loss_with_dict_aux(w):
    return np.sum(w ** 2), {"m": np.max(w), "v": w * 2.0}


def test_forward_mode_with_a_dict_aux():
    w = np.array([1.0, 2.0, 3.0])
    aux = {"m": 3.0, "v": 2.0 * w}
    out, out_dot, got = ad.jvp(_loss_with_dict_aux, (w,), (np.ones(3),), has_aux=True)
    assert out == pytest.approx(14.0) and out_dot == pytest.approx(12.0)
    _assert_same_tree(got, aux)
    for transform in (ad.jacfwd(_loss_with_dict_aux, has_aux=True),
                      jit(ad.jacfwd(_loss_with_dict_aux, has_aux=True))):
        jac, got = transform(w)
        np.testing.assert_allclose(jac, 2.0 * w, rtol=1e-12)
        _assert_same_tree(got, aux)
    hess, got = ad.jacfwd(ad.grad(_loss_with_dict_aux, has_aux=True), has_aux=True)(w)
    np.testing.assert_allclose(hess, 2.0 * np.eye(3), rtol=1e-12)
    _assert_same_tree(got, aux)


# ---------------------------------------------------------------- a shape passed as a tuple
# `x.reshape(shape)` / `np.zeros(shape)` with shape a tuple argument: refused as "tuple values
# cannot be used here" under jit(static_argnums) (a static tuple is its display now) and as "a
# pytree or Python object cannot be passed" without (a tuple of ints is its leaves' display).
def _reshaped(x, shape):
    m = x.reshape(shape)
    return np.sum(m[0] ** 2)


def _filled(x, shape):
    z = np.zeros(shape)
    z[0] = x[:shape[1]]
    return np.sum(np.sin(z) * 2.0) + np.sum(x)


@pytest.mark.parametrize("f", [_reshaped, _filled], ids=lambda f: f.__name__)
def test_a_shape_given_as_a_tuple(f):
    x = np.arange(6.0) / 5.0
    expected = fd_grad(lambda v: f(v, (2, 3)), x)
    np.testing.assert_allclose(ad.grad(f)(x, (2, 3)), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(ad.grad(f), static_argnums=1, target="python")(x, (2, 3)),
                               expected, rtol=1e-6, atol=1e-8)
    assert jit(f, static_argnames="shape", target="python")(x, (3, 2)) == \
        pytest.approx(f(x, (3, 2)), rel=1e-12)


def _loss_and_first(w):
    return np.sum(np.sin(w) * w), w[0]


def _nested_value_and_grad(w):
    (v, first), g = ad.value_and_grad(_loss_and_first, has_aux=True)(w)
    return v + first * np.sum(g * g)


def _pairs(x):
    return (x[0] * x[1], np.cos(x[2])), x[1:] * 2.0


def _nested_helper_result(x):
    (p, q), r = _pairs(x)
    s = 0.0
    for k in range(2):
        (a, b), c = (p, q * k), r[k]
        s = s + a * b + c ** 2
    return s


def _nested_display(x):
    a, (b, (c, d)) = x[0], (x[1], (x[2] * x[0], 2.0))
    return a * b + c * d


def _rotating(x):
    a, b, c = x[0], x[1], x[2]
    for k in range(3):
        (a, b), c = (b * 1.1, c), a  # every value read before a name is bound
    return a * 2.0 + b * 3.0 + c * c


def _pair_then_unpacked(x):
    a, b = (x[0], x[1]), x[2]
    c, d = a
    return c * d * b


@pytest.mark.parametrize("f", [_nested_value_and_grad, _nested_helper_result,
                               _nested_display, _rotating, _pair_then_unpacked],
                         ids=lambda f: f.__name__)
def test_nested_unpacking(f):
    """`(v, m), g = value_and_grad(f, has_aux=True)(w)` and other nested targets unpack
    level by level (they were refused: "nested unpacking is not supported"). A name bound to
    a tuple display by unpacking (`a, b = (p, q), r`) carries p's and q's derivatives: they
    were dropped (zeros, silently)."""
    x = np.array([0.4, -0.7, 1.3])
    np.testing.assert_allclose(ad.grad(f)(x), fd_grad(f, x), rtol=1e-6, atol=1e-8)
    ad.check_grads(f, (x,), order=1, modes=("fwd", "rev"))
    np.testing.assert_allclose(jit(ad.grad(f))(x), ad.grad(f)(x), rtol=1e-12)


def test_unpacking_into_the_wrong_number_of_names_is_refused():
    with pytest.raises(ad.errors.UnsupportedSyntaxError, match="holds 2 values: unpack "
                       "them into as many names, not 3"):
        ad.grad(_wrong_count)(np.ones(3))


def _wrong_count(x):
    (a, b), c, d = _pairs(x)
    return a


def _between(x):
    m = (x > 0.0) & (x < 1.0)
    return np.sum(np.where(m, x ** 2, x))


def _masks_narrowed_in_a_loop(x):
    active = np.ones(x.shape[0], dtype=bool)
    y = x
    for _ in range(3):
        y = np.where(active, 0.5 * y, y)
        active = active & (np.abs(y) > 0.3)
    return np.sum(y)


def _outside_or_far(x):
    m = x > 0.0
    m &= x < 1.0
    far = (x > 2.0) | (x < -1.0) ^ (x > 5.0)
    return np.sum(np.where(m, x ** 2, x)) + np.sum(np.where(far, x, 0.0))


def _odd_positions(x):
    s = 0.0
    for i in range(4):
        if i & 1:
            s = s + x[i] * (i >> 1)
    return s


@pytest.mark.parametrize("f", [_between, _masks_narrowed_in_a_loop, _outside_or_far,
                               _odd_positions], ids=lambda f: f.__name__)
def test_bitwise_operators_on_masks_and_integers(f):
    """&, |, ^, &=, << and >> of booleans and integers (they raised a bare KeyError)."""
    x = np.array([0.5, 1.5, -0.2, 2.5])
    expected = fd_grad(f, x)
    np.testing.assert_allclose(ad.grad(f)(x), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(ad.grad(f))(x), expected, rtol=1e-6, atol=1e-8)
    batch = np.stack([x, -x])
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(batch), np.stack([fd_grad(f, v)
                                                                      for v in batch]),
                               rtol=1e-6, atol=1e-8)


def _bits_of_floats(x):
    return np.sum(x & x)


def test_a_bitwise_operator_on_floats_is_refused():
    with pytest.raises(ad.errors.UnsupportedSyntaxError,
                       match="the operator & takes booleans or integers"):
        ad.grad(_bits_of_floats)(np.ones(2))


def _sum_where_positive(x):
    return np.sum(x * x, where=x > 0.5)


def _column_sums_where(x):
    return np.sum(np.sum(np.sin(x), axis=0, where=x < 0.25) ** 2)


def _method_and_product_where(x):
    return x.sum(where=x > 0.0) + np.prod(x + 2.0, where=x < 1.0)


@pytest.mark.parametrize("f", [_sum_where_positive, _column_sums_where,
                               _method_and_product_where], ids=lambda f: f.__name__)
def test_sum_and_prod_with_where(f):
    """np.sum(x, where=m) is the sum of np.where(m, x, 0.0) (np.prod: 1.0); was refused."""
    x = np.array([[0.3, 0.9, -0.6], [0.7, 0.1, 1.4]])
    expected = fd_grad(f, x)
    np.testing.assert_allclose(ad.grad(f)(x), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(jit(ad.grad(f))(x), expected, rtol=1e-6, atol=1e-8)
    ad.check_grads(f, (x,), order=1, modes=("fwd", "rev"))


# ---------------------------------------------------------------- an empty selection's mean,
# and a name that is an array on one path and a number on another (session 43)
def _mean_of_outliers(x):
    return np.mean(x[x > 10.0]) + np.sum(x * x)


def _mean_by_size(x):
    y = x[x > 10.0]
    return np.sum(y) / y.size + np.sum(x * x)


def _mean_by_named_count(x):
    y = x[x > 10.0]
    n = len(y)
    total = float(n)
    return np.sum(y) / n + 2.0 * np.sum(y) / total + np.sum(x * x)


@pytest.mark.parametrize("f", [_mean_of_outliers, _mean_by_size, _mean_by_named_count])
def test_the_mean_of_an_empty_selection_has_a_gradient(f):
    # The primal is nan (NumPy warns); the gradient divided a Python 1.0 by the selection's
    # size 0 and raised ZeroDivisionError. The empty selection's adjoint is empty: the
    # gradient is that of the other term, as under jit.
    x = np.array([0.5, -1.0, 2.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        got = ad.grad(f)(x)
    np.testing.assert_allclose(got, 2.0 * x)
    np.testing.assert_allclose(jit(ad.grad(f))(x), 2.0 * x)
    y = np.array([0.5, 11.0, 12.0])  # not empty: central differences
    np.testing.assert_allclose(ad.grad(f)(y), fd_grad(f, y), rtol=1e-6)


def _sum_over_other_length(x, y):
    n = len(y)
    return np.sum(x) / n


def test_a_constant_over_a_named_count_of_zero_is_inf():
    # NumPy: np.sum(x) / 0 is inf; the gradient's `1.0 / n` (n = len(y) bound to a name)
    # raised ZeroDivisionError; now inf, as under jit.
    x, empty = np.array([1.0, 2.0]), np.zeros(0)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(ad.grad(_sum_over_other_length)(x, empty), [np.inf] * 2)
    np.testing.assert_array_equal(jit(ad.grad(_sum_over_other_length))(x, empty), [np.inf] * 2)
    y = np.ones(4)
    np.testing.assert_allclose(ad.grad(_sum_over_other_length)(x, y), [0.25, 0.25])


def _rows_or_zero(A):
    n = A.shape[0]
    s = np.zeros(n)
    for i in range(n):
        s[-i:] += A[i - 1, -i:] if i > 0 else 0.0
    return np.sum(s * s)


def test_a_name_bound_to_an_array_or_a_number():
    # The backward sweep reset the choice's adjoint with `t.size`: AttributeError on the
    # step that had bound 0.0.
    A = RNG.standard_normal((4, 4))
    np.testing.assert_allclose(ad.grad(_rows_or_zero)(A), fd_grad(_rows_or_zero, A),
                               rtol=1e-6, atol=1e-8)
    with pytest.raises(ad.CompileError) as info:  # Numba gives a name one type
        jit(ad.grad(_rows_or_zero))(A)
    assert "`choice` is array(float64, 1d, C) on one path and float64 on another" in \
        str(info.value)


def _zero_d_output(x):
    return np.array(np.sum(x ** 2))


def test_jit_of_jacfwd_of_a_zero_d_array_output():
    # The batched tangent kept np.array(...) around a vector, which Numba refuses.
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(jit(ad.jacfwd(_zero_d_output))(x), 2.0 * x)
    np.testing.assert_allclose(ad.jacfwd(_zero_d_output)(x), 2.0 * x)


def _cross_weighted(a, b):
    return np.sum(a ** 2 * b)


def _cross_block_sum(x, y):
    H = ad.hessian(_cross_weighted, argnums=(0, 1))(x, y)
    return np.sum(H[0][1])  # d2/da db of sum(a^2 b): diag(2a)


def test_jit_of_grad_through_a_hessian_block():
    # A cotangent the generated code fills an array with came out an array at this depth:
    # np.full_like(y, y_bar) with an array y_bar, which NumPy takes and Numba's does not.
    x, y = np.array([0.3, -1.2, 0.5]), np.array([1.1, 0.4, -0.7])
    for g in (ad.grad(_cross_block_sum, argnums=(0, 1)),
              jit(ad.grad(_cross_block_sum, argnums=(0, 1)))):
        gx, gy = g(x, y)
        np.testing.assert_allclose(gx, 2.0 * np.ones(3))
        np.testing.assert_allclose(gy, np.zeros(3), atol=1e-12)


# ---------------------------------------------------------------- np.float32(...) and
# np.float64(...) as casts (session 44: "np.float32 has no derivative rule")
def _float32_accumulator(x):
    s = np.float32(0.0)
    for i in range(3):
        s = s + x[i] * x[i]
    return s


def _float64_cast_of_an_entry(x):
    return np.float64(x[0]) * x[1] + np.float32(x[2]) ** 2 + np.sum(np.float64(x))


def _cast_gradient(f, x):  # by hand (central differences through float32 are too coarse)
    if f is _float32_accumulator:
        return np.array([2.0 * x[0], 2.0 * x[1], 2.0 * x[2]])
    return np.array([x[1] + 1.0, x[0] + 1.0, 2.0 * x[2] + 1.0])


@pytest.mark.parametrize("f", [_float32_accumulator, _float64_cast_of_an_entry])
def test_numpy_scalar_casts_are_differentiated(f):
    x = np.array([0.3, 2.0, 1.0])
    expected = _cast_gradient(f, x)
    np.testing.assert_allclose(ad.grad(f)(x), expected, rtol=1e-6)
    np.testing.assert_allclose(ad.jvp(f, (x,), (np.ones(3),))[1], np.sum(expected), rtol=1e-6)
    xs = np.stack([x, 2.0 * x])
    np.testing.assert_allclose(ad.vmap(ad.grad(f))(xs)[1], _cast_gradient(f, 2.0 * x),
                               rtol=1e-6)
    assert ad.grad(f)(x.astype(np.float32)).dtype == np.float32
    if f is _float32_accumulator:  # (np.float64 of an array: Numba has no such call)
        np.testing.assert_allclose(jit(ad.grad(f))(x), expected, rtol=1e-6)
