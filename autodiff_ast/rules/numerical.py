"""Polynomials, statistics and interpolation: np.polyval, np.cov, np.corrcoef and np.interp,
with the index functions their templates call (np.searchsorted, np.bincount).

Each template is written with functions that have rules themselves, so a gradient made of them
can be differentiated again (Hessians, ``grad(grad(f))``).

>>> from autodiff_ast.rules import by_name
>>> by_name("polyval").diff
('p', 'x')
"""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..templates import fill, summed
from . import Rule, register
from .structural import _relinear


def _given(call, param):
    """Whether the user passed `param` with a value other than None."""
    t = call.types.get(param)
    return t is not None and t.kind != "none"


# ---------------------------------------------------------------- polyval
# polyval(p, x) = sum over k of p[k] x ** (n - 1 - k) (Horner's rule), p a vector of n
# coefficients, highest power first. d/dx is the polynomial of the derivative's coefficients
# p[k] * (n - 1 - k), k < n - 1; d/dp[k] is x ** (n - 1 - k), summed against the cotangent.
def _as_array(call, param):
    """The argument as an array expression (a list display of numbers made an array)."""
    value = call.args[param]
    return value if call.types[param].kind in ("array", "unknown") else \
        fill("np.asarray(v)", v=value)


def _coefficients(call):
    """p as an array expression."""
    return _as_array(call, "p")


def _polyval_handled(call):
    """p is a vector (NumPy's polyval takes 1-D coefficients; of unknown rank, we assume so)."""
    return call.ndim("p") in (1, None) or call.types["p"].kind in ("list", "tuple")


def _derivative_polynomial(call):
    """np.polyval of the derivative's coefficients at x: d polyval(p, x) / dx."""
    p = _coefficients(call)
    return fill("np.polyval(p[:-1] * np.arange(p.shape[0] - 1, 0, -1), x)", p=p,
                x=call.args["x"])


def _powers(call):
    """The exponents n - 1, ..., 1, 0 of the coefficients, an integer vector."""
    return fill("np.arange(p.shape[0] - 1, -1, -1)", p=_coefficients(call))


def _polyval_vjp(call, g):
    """Cotangents of x (g times the derivative polynomial) and p (g against x's powers)."""
    if not _polyval_handled(call):
        return None
    x = call.args["x"]
    if call.ndim("x") == 0:
        p_bar = fill("g * x ** k", g=g, x=x, k=_powers(call))
    else:  # sum over the points of g * x ** k, one row of powers per point
        p_bar = fill("np.dot(np.ravel(g), np.ravel(x)[:, None] ** k)", g=g, x=x,
                     k=_powers(call))
    return {"x": (fill("g * d", g=g, d=_derivative_polynomial(call)), None),
            "p": (p_bar, call.types["p"] if call.types["p"].kind == "array" else None)}


def _polyval_jvp(call, dots):
    """polyval of p's tangent at x, plus the derivative polynomial times x's tangent."""
    if not _polyval_handled(call):
        return None
    terms = []
    if "p" in dots:
        terms.append(fill("np.polyval(d, x)", d=dots["p"], x=call.args["x"]))
    if "x" in dots:
        terms.append(fill("s * d", s=_derivative_polynomial(call), d=dots["x"]))
    return terms[0] if len(terms) == 1 else fill("a + b", a=terms[0], b=terms[1])


register(Rule("polyval", "np.polyval", ("p", "x"), {}, ("p", "x"),
              lambda call: T.broadcast(call.types["x"], T.FLOAT), _polyval_vjp, _polyval_jvp),
         np.polyval)


# ---------------------------------------------------------------- cov and corrcoef
# With the variables as the rows of a (m itself, or m.T for rowvar=False) and c = a minus each
# row's mean, cov = c c^T / (N - ddof), N observations. The rows of c sum to zero, so centering
# passes cotangents through unchanged: a_bar = (g + g^T) c / (N - ddof). NumPy squeezes the
# result: one variable (a vector, or one row) gives a number, 2 c . g / (N - ddof) for a.
def _cov_form(call):
    """(rowvar, ddof) of a call the templates cover, or None: a second array, weights or a
    dtype, or m not a vector or a matrix."""
    if any(_given(call, p) for p in ("y", "fweights", "aweights", "dtype")) or \
            call.ndim("m") not in (1, 2):
        return None
    rowvar, bias, ddof = call.const("rowvar", True), call.const("bias", False), \
        call.const("ddof")
    if ddof is None:
        ddof = 1 if not bias else 0
    return (rowvar is not False, ddof) if isinstance(ddof, int) else None


def _rows(call, value):
    """`value` (the argument, its tangent or its cotangent) with the variables as rows: as it
    is, or transposed for rowvar=False (its own inverse)."""
    return value if call.const("rowvar", True) is not False else fill("v.T", v=value)


def _one_variable(call, param="m"):
    """Whether NumPy squeezes the result to a number: a vector, or a single variable."""
    t = call.types[param]
    if t.ndim == 1:
        return True
    rowvar = call.const("rowvar", True) is not False
    return t.dims is not None and t.dims[0 if rowvar else 1] == 1


def _infer_cov(call, param="m"):
    """A number for one variable, else a matrix (variables by variables)."""
    t = call.types[param]
    if t.ndim not in (1, 2):
        return T.AType("array", "float64", None)
    return T.FLOAT if _one_variable(call, param) else T.array((T.N, T.N))


def _centered(rows):
    """Each row minus its mean."""
    return fill("a - np.mean(a, axis=-1, keepdims=True)", a=rows)


def _count(rows, ddof):
    """N - ddof: the divisor of a covariance of these rows."""
    return fill("a.shape[-1] - d", a=rows, d=ddof)


def _cov_vjp(call, g):
    """m_bar = (g + g^T) c / (N - ddof), or 2 g c / (N - ddof) for one variable."""
    form = _cov_form(call)
    if form is None:
        return None
    rows = _rows(call, call.args["m"])
    c, n = _centered(rows), _count(rows, form[1])
    if _one_variable(call):
        bar = fill("2.0 * g * c / n", g=g, c=c, n=n)
    else:
        bar = fill("np.dot(g + g.T, c) / n", g=g, c=c, n=n)
    return {"m": (_rows(call, bar), call.types["m"])}


def _cov_jvp(call, dots):
    """(d c^T + c d^T) / (N - ddof) for m's tangent d (as rows)."""
    form = _cov_form(call)
    if form is None:
        return None
    rows = _rows(call, call.args["m"])
    c, n, d = _centered(rows), _count(rows, form[1]), _rows(call, dots["m"])
    if _one_variable(call):
        return fill("2.0 * np.sum(d * c) / n", d=d, c=c, n=n)
    return fill("(np.dot(d, c.T) + np.dot(c, d.T)) / n", d=d, c=c, n=n)


register(Rule("cov", "np.cov", ("m", "y", "rowvar", "bias", "ddof", "fweights", "aweights",
                                "dtype"),
              {"rowvar": True, "bias": False, "ddof": None}, ("m",), _infer_cov, _cov_vjp,
              _cov_jvp), np.cov)


# corrcoef: with z the centered rows scaled to unit length (r their lengths), R = z z^T (ddof
# cancels). Its cotangent is S = g + g^T on z, z_bar = S z; unit scaling projects out each
# row's own direction: a_bar = (z_bar - z (z . z_bar)) / r, where z_i . z_bar_i is the sum of
# row i of S * R. One variable (or a vector) gives R = 1: no template (its derivative is 0).
def _corrcoef_handled(call):
    """A matrix of two or more variables, with no second array or dtype."""
    return not any(_given(call, p) for p in ("y", "dtype")) and call.ndim("x") == 2 and \
        not _one_variable(call, "x")


def _corrcoef_vjp(call, g):
    """The cotangent of x through the unit rows z (see the comment above)."""
    if not _corrcoef_handled(call):
        return None
    s = fill("g + g.T", g=g)
    bar = fill("(np.dot(s / r.T, c) - c * np.sum(s * y, axis=1, keepdims=True) / r) / r", s=s,
               c="corrcoef_rows", y=call.out, r="corrcoef_norms")
    return {"__let__": [("corrcoef_rows", _centered(_rows(call, call.args["x"]))),
                        ("corrcoef_norms", fill("np.sqrt(np.sum(c * c, axis=1, keepdims=True))",
                                                c="corrcoef_rows"))],
            "x": (_rows(call, bar), call.types["x"])}


def _corrcoef_jvp(call, dots):
    """p + p^T, p the tangent of z (z's own direction projected out) times z^T."""
    if not _corrcoef_handled(call):
        return None
    c, d = _centered(_rows(call, call.args["x"])), _rows(call, dots["x"])
    q = fill("np.sum(c * c, axis=1, keepdims=True)", c=c)
    p = fill("np.dot(d - c * (np.sum(c * d, axis=1, keepdims=True) / q), c.T) / np.sqrt(q * q.T)",
             c=c, d=d, q=q)
    return fill("p + p.T", p=p)


register(Rule("corrcoef", "np.corrcoef", ("x", "y", "rowvar", "bias", "ddof", "dtype"),
              {"rowvar": True}, ("x",), lambda call: _infer_cov(call, "x"), _corrcoef_vjp,
              _corrcoef_jvp), np.corrcoef)


# ---------------------------------------------------------------- interp
# interp(x, xp, fp) on segment k (xp[k - 1] <= x < xp[k]) is (1 - t) fp[k - 1] + t fp[k] with
# t = (x - xp[k - 1]) / (xp[k] - xp[k - 1]). As in JAX, k is searchsorted(xp, x, "right")
# kept in [1, n - 1]: at a knot x takes the segment to its right (the last one at xp[-1]).
# Below xp[0] and above xp[-1], interp gives fp[0] and fp[-1]: t clipped to [0, 1] weighs
# them, and the slope is 0. xp gets no derivative; left, right and period have no template.
def _interp_handled(call):
    """No left, right or period; xp and fp vectors (or of unknown rank)."""
    return not any(_given(call, p) for p in ("left", "right", "period")) and \
        call.ndim("xp") in (1, None) and call.ndim("fp") in (1, None)


def _segment(call):
    """k, the index of each point's segment's right end, in [1, n - 1]."""
    xp = _as_array(call, "xp")
    return fill('np.minimum(np.maximum(np.searchsorted(xp, x, side="right"), 1), '
                'xp.shape[0] - 1)', xp=xp, x=call.args["x"])


def _slope(call, k):
    """d interp / dx: the slope of the segment, 0 outside [xp[0], xp[-1]]."""
    x, xp, fp = call.args["x"], _as_array(call, "xp"), _as_array(call, "fp")
    slope = fill("(np.diff(fp) / np.diff(xp))[k - 1]", fp=fp, xp=xp, k=k)
    return fill("np.where(x < xp[0], 0.0, np.where(x > xp[-1], 0.0, s))", x=x, xp=xp, s=slope)


def _weight(call, k):
    """t: how far each point lies along its segment, clipped to [0, 1]."""
    xp = _as_array(call, "xp")
    return fill("np.minimum(np.maximum((x - xp[k - 1]) / (xp[k] - xp[k - 1]), 0.0), 1.0)",
                x=call.args["x"], xp=xp, k=k)


def _interp_vjp(call, g):
    """x: g times the slope; fp: g weighted (1 - t, t) at each point's two knots."""
    if not _interp_handled(call):
        return None
    k, t, n = "interp_at", "interp_t", fill("fp.shape[0]", fp=_as_array(call, "fp"))
    if call.ndim("x") == 0:  # one point: its two weights placed in a vector of fp's length
        fp_bar = fill("g * ((1.0 - t) * (np.arange(n) == k - 1) + t * (np.arange(n) == k))",
                      g=g, t=t, n=n, k=k)
    else:  # each point's weights added at its two knots
        fp_bar = fill("np.bincount(np.ravel(k) - 1, weights=np.ravel(g * (1.0 - t)), "
                      "minlength=n) + np.bincount(np.ravel(k), weights=np.ravel(g * t), "
                      "minlength=n)", g=g, t=t, n=n, k=k)
    return {"__let__": [(k, _segment(call)), (t, _weight(call, k))],
            "x": (fill("g * s", g=g, s=_slope(call, k)), None),
            "fp": (fp_bar, call.types["fp"])}


def _interp_jvp(call, dots):
    """interp of fp's tangent, plus the slope times x's tangent."""
    if not _interp_handled(call):
        return None
    terms = []
    if "fp" in dots:  # linear in fp
        terms.append(fill("np.interp(x, xp, d)", x=call.args["x"], xp=call.args["xp"],
                          d=dots["fp"]))
    if "x" in dots:
        terms.append(fill("s * d", s=_slope(call, _segment(call)), d=dots["x"]))
    return terms[0] if len(terms) == 1 else fill("a + b", a=terms[0], b=terms[1])


register(Rule("interp", "np.interp", ("x", "xp", "fp", "left", "right", "period"), {},
              ("x", "fp"), lambda call: T.broadcast(call.types["x"], T.FLOAT), _interp_vjp,
              _interp_jvp), np.interp)


# searchsorted: integer positions, no derivative. bincount(x, weights, minlength): linear in
# the weights; its transpose reads the cotangent back at the bins, g[x].
def _infer_positions(call):
    """One int64 position per value of v."""
    v = call.types["v"]
    return T.INT if v.ndim == 0 else T.AType("array", "int64", v.dims)


register(Rule("searchsorted", "np.searchsorted", ("a", "v", "side", "sorter"), {"side": "left"},
              (), _infer_positions, nondiff_output=True), np.searchsorted)


def _bincount_vjp(call, g):
    """Each weight's cotangent is its bin's: g[x]."""
    return {"weights": (fill("g[x]", g=g, x=call.args["x"]), call.types["weights"])}


register(Rule("bincount", "np.bincount", ("x", "weights", "minlength"), {"minlength": 0},
              ("weights",),
              lambda call: T.array((T.N,), "float64" if _given(call, "weights") else "int64"),
              _bincount_vjp, lambda call, dots: _relinear(call, dots, "weights"), linear=True),
         np.bincount)


# ---------------------------------------------------------------- trapezoid
# trapezoid(y, x, dx, axis) = sum over the intervals i along the axis of d_i s_i, with d_i the
# interval's width (np.diff(x), or dx) and s_i = (y_i + y_(i+1)) / 2. So d/dy_j is the mean
# of the widths on either side of point j (a half width at the ends), d/dx_j = s_(j-1) - s_j
# (s_(-1) = s_n = 0) and d/d dx = sum of s. Templates: y of known rank, x a vector (or None).
def _trapezoid_axis(call):
    """(rank of y, the axis made non-negative), or None when there is no template: y of
    unknown rank, or x not a vector while y is not one."""
    rank = call.ndim("y")
    if not rank:
        return None
    axis = call.const("axis", -1)
    if not isinstance(axis, int):
        return None
    if _given(call, "x") and call.ndim("x") != 1:
        return None
    return rank, axis % rank


def _along(value, rank, axis, part):
    """`value` sliced along `axis` (``1:``, ``:-1``), every other axis whole."""
    index = ", ".join([":"] * axis + [part])
    return fill(f"v[{index}]", v=value)


def _interval_means(call, rank, axis):
    """s: the mean of y at the two ends of each interval, along the axis."""
    y = call.args["y"]
    return fill("0.5 * (a + b)", a=_along(y, rank, axis, "1:"), b=_along(y, rank, axis, ":-1"))


def _widths(call, rank, axis):
    """d: the intervals' widths, a vector of one entry fewer than the points along the axis."""
    if _given(call, "x"):
        return fill("np.diff(x)", x=call.args["x"])
    dx = call.args.get("dx", fill("1.0"))
    return fill("dx * np.ones(y.shape[a] - 1)", dx=dx, y=call.args["y"], a=axis)


def _along_axis(vector, rank, axis):
    """A vector laid along `axis` of an array of `rank` (size-one axes after it)."""
    if axis == rank - 1:
        return vector
    ones = ", ".join(["1"] * (rank - 1 - axis))
    return fill(f"np.reshape(v, (-1, {ones}))", v=vector)


def _trapezoid_vjp(call, g):
    handled = _trapezoid_axis(call)
    if handled is None:
        return None
    rank, axis = handled
    ge = g if rank == 1 else fill("np.expand_dims(g, a)", g=g, a=axis)
    d = _widths(call, rank, axis)
    weights = fill("0.5 * (np.concatenate((d, np.zeros(1))) + np.concatenate((np.zeros(1), d)))",
                   d=d)
    out = {"y": (fill("ge * w", ge=ge, w=_along_axis(weights, rank, axis)), call.types["y"])}
    s = _interval_means(call, rank, axis)
    if _given(call, "x"):
        others = tuple(k for k in range(rank) if k != axis)
        c = fill("g * s", g=g, s=s) if rank == 1 else \
            fill("np.sum(ge * s, axis=o)", ge=ge, s=s, o=others)
        out["x"] = (fill("np.concatenate((np.zeros(1), c)) - np.concatenate((c, np.zeros(1)))",
                         c=c), call.types["x"])
    elif "dx" in call.args:
        out["dx"] = (fill("np.sum(ge * s)", ge=ge, s=s), T.FLOAT)
    return out


def _trapezoid_jvp(call, dots):
    handled = _trapezoid_axis(call)
    if handled is None:
        return None
    rank, axis = handled
    terms = []
    if "y" in dots:  # linear in y
        terms.append(_relinear(call, dots, "y"))
    s = _interval_means(call, rank, axis)
    if "x" in dots:
        widths = _along_axis(fill("np.diff(d)", d=dots["x"]), rank, axis)
        terms.append(fill("np.sum(w * s, axis=a)", w=widths, s=s, a=axis))
    if "dx" in dots:
        terms.append(fill("d * np.sum(s, axis=a)", d=dots["dx"], s=s, a=axis))
    return summed(terms)


def _infer_trapezoid(call):
    y = call.types["y"]
    axis = call.const("axis", -1)
    if y.kind != "array" or y.dims is None or not isinstance(axis, int):
        return T.AType("array", "float64", None) if y.ndim != 1 else T.FLOAT
    axis %= len(y.dims)
    return T.array(tuple(d for k, d in enumerate(y.dims) if k != axis), "float64")


register(Rule("trapezoid", "np.trapezoid", ("y", "x", "dx", "axis"), {"axis": -1},
              ("y", "x", "dx"), _infer_trapezoid, _trapezoid_vjp, _trapezoid_jvp),
         *([np.trapezoid] if hasattr(np, "trapezoid") else []),
         *([np.trapz] if hasattr(np, "trapz") else []))


# ---------------------------------------------------------------- convolve
# convolve(a, v, mode) of two vectors (n and m entries) is the full convolution c_k = sum of
# a_i v_(k-i), of n + m - 1 entries, or the part of it mode keeps: 'same' max(n, m) entries
# from (min(n, m) - 1) // 2, 'valid' max(n, m) - min(n, m) + 1 entries from min(n, m) - 1.
# With g put back in its place in the full length (zeros around it), a's cotangent is the
# correlation of g with v: convolve(g_full, v[::-1], 'valid') (n entries), and v's is
# convolve(g_full, a[::-1], 'valid') (m entries). Linear in each argument.
def _convolve_handled(call):
    """Two vectors, and a mode written in the code."""
    mode = call.const("mode", "full")
    return call.ndim("a") == 1 and call.ndim("v") == 1 and mode in ("full", "same", "valid")


def _full_cotangent(call, g):
    """g with zeros where the mode cut the full convolution."""
    mode = call.const("mode", "full")
    if mode == "full":
        return g
    k = fill("min(a.shape[0], v.shape[0])", a=call.args["a"], v=call.args["v"])
    if mode == "valid":
        before, after = fill("k - 1", k=k), fill("k - 1", k=k)
    else:  # same: (k - 1) // 2 before, the rest of the k - 1 after
        before = fill("(k - 1) // 2", k=k)
        after = fill("k - 1 - (k - 1) // 2", k=k)
    return fill("np.concatenate((np.zeros(b), g, np.zeros(e)))", b=before, g=g, e=after)


def _convolve_vjp(call, g):
    if not _convolve_handled(call):
        return None
    full = "convolve_g"
    a, v = call.args["a"], call.args["v"]
    return {"__let__": [(full, _full_cotangent(call, g))],
            "a": (fill("np.convolve(f, v[::-1], 'valid')", f=full, v=v), call.types["a"]),
            "v": (fill("np.convolve(f, a[::-1], 'valid')", f=full, a=a), call.types["v"])}


def _convolve_jvp(call, dots):
    if not _convolve_handled(call):
        return None
    terms = [_relinear(call, dots, p) for p in ("a", "v") if p in dots]
    return terms[0] if len(terms) == 1 else fill("s + t", s=terms[0], t=terms[1])


register(Rule("convolve", "np.convolve", ("a", "v", "mode"), {"mode": "full"}, ("a", "v"),
              lambda call: T.array((T.N,), "float64"), _convolve_vjp, _convolve_jvp),
         np.convolve)
