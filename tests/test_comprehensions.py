"""List comprehensions and the folding builtins sum/max/min (autodiff_ast/comprehensions.py),
and the loops over zip and enumerate(zip(...)) they are often written with.

Each program's derivatives are checked against central differences (check_grads at order 2 in
both modes, jit and vmap of the gradient against differences), and its value against the
function run by Python itself.
"""

from __future__ import annotations

import numpy
import numpy as np
import pytest
from test_vmap import numeric_grad  # central differences

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError


def pairs_then_stack(x):  # a condition, then np.stack of the list
    rows = [x[i] * x[i + 1] for i in range(len(x) - 1) if i % 2 == 0]
    return np.sum(np.stack(rows) ** 2)


def shadowing(x):  # the comprehension's v is its own: the outer v keeps its value
    v = x[0] * 3.0
    s = sum(v * v for v in x)
    return s + v


def outer_products(x):  # two generators; sum of a list of arrays
    W = x.reshape(3, 2)
    mats = [np.outer(W[i], W[j]) for i in range(W.shape[0]) for j in range(i, W.shape[0])]
    return np.sum(sum(mats) ** 2)


def folds(x):  # sum with a start, sum of a matrix's rows, max of a generator, min of three
    A = np.outer(x, x)
    r = sum(A, np.ones(len(x)))
    return (np.sum(r * r) + max(v for v in x) - min(x[0], x[1], x[2])
            + sum([x[0], x[1]], 1.0))


def in_a_loop(x):  # a list made anew in each step, read by index (sum), zip and enumerate
    out = 0.0
    for t in range(3):
        terms = [a * b * (t + 1) for a, b in zip(x, x[::-1])]
        out = out + sum(terms) + sum([v * k for k, v in enumerate(x)])
    return out


def sum_of_an_array(x):
    return sum(np.sin(x)) * sum(np.cos(x))


def indexed_list_made_in_each_step(x):  # the same without comprehensions
    out = 0.0
    for t in range(3):
        terms = []
        for a in x:
            terms.append(a * (t + 1.5))
        total = 0.0
        for k in range(len(terms)):
            total = total + terms[k] * terms[k]
        out = out + total
    return out


def enumerate_zip(x):  # a loop and a comprehension over enumerate(zip(...))
    y = np.cos(x)
    s = 0.0
    for k, (a, b) in enumerate(zip(x, y)):
        s = s + a * b * (k + 1)
    return s + sum([a * b * k for k, (a, b) in enumerate(zip(x, y))])


def zip_of_unequal_lengths(x):  # zip stops at the shorter sequence, as in Python
    s = 0.0
    for a, b in zip(x, x[2:]):
        s = s + np.sin(a) * b
    return s


def matrix_from_nested(x):  # np.array of a nested comprehension: rows made arrays
    M = np.array([[x[i] * x[j] for j in range(3)] for i in range(3)])
    return np.sum(M ** 2) + np.sum(np.array([[x[0], 1.0], [2.0, x[1]]]) ** 3) + \
        np.sum(numpy.array([(x[2], 1.0), (2.0, x[3])]) ** 3)  # tuple rows, numpy by name


def joined_lists(x):  # two fixed lists joined with +, then summed; tuple() of a generator
    a = [x[0], x[1]]
    b = [x[2] * 2.0]
    t = tuple(v * 2.0 for v in x)
    return sum(a + b) * t[1] + t[3]


def numpy_of_lists(x):  # NumPy functions given a list: as np.array(list); vstack of rows
    vals = [np.sum(x ** k) for k in range(1, 4)]
    rows = [np.sin(x * k) for k in range(3)]
    return np.mean(vals) + np.max(vals) + np.sum(np.vstack(rows) ** 2)


def any_and_all(x):  # branches on any()/all() of a generator, a comprehension, an array
    s = 0.0
    if any(v > 0.5 for v in x):
        s = s + np.sum(x ** 2)
    if all([v > -5.0 for v in x]):
        s = s + np.sum(np.sin(x))
    if any(x > 10.0):
        s = s + 100.0 * np.sum(x)
    return s


def list_of_iterators(x):  # list(zip(...)), list(enumerate(...)), list(range(...)), list(x)
    pairs = list(zip(x, x[1:]))
    rows = list(x)
    s = 0.0
    for a, b in pairs:
        s = s + a * b
    for i, v in list(enumerate(x)):
        s = s + v * rows[i] * (i + 1.0)
    return s + sum(x[k] ** 3 for k in list(range(2)))


PROGRAMS = [pairs_then_stack, shadowing, outer_products, folds, in_a_loop, sum_of_an_array,
            indexed_list_made_in_each_step, enumerate_zip, zip_of_unequal_lengths,
            matrix_from_nested, joined_lists, numpy_of_lists, any_and_all, list_of_iterators]


def _x():
    return np.array([0.3, 1.2, -0.7, 0.9, 0.45, -1.1])


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_derivatives_against_differences(f):
    ad.check_grads(f, (_x(),), order=2, modes=("rev", "fwd"))


@pytest.mark.parametrize("f", PROGRAMS, ids=lambda f: f.__name__)
def test_value_is_pythons(f):
    value, _ = ad.value_and_grad(f)(_x())
    assert value == pytest.approx(f(_x()), rel=1e-12)


@pytest.mark.parametrize("f", [shadowing, in_a_loop, folds],
                         ids=lambda f: f.__name__)
def test_vmap_of_grad(f):
    xs = np.stack([_x(), 0.5 * _x() + 0.1])
    batched = ad.vmap(ad.grad(f))(xs)
    for row, x in zip(batched, xs):
        np.testing.assert_allclose(row, numeric_grad(f, x), rtol=1e-5, atol=1e-8)


@pytest.mark.numba
@pytest.mark.parametrize("f", [shadowing, in_a_loop, indexed_list_made_in_each_step,
                               sum_of_an_array, zip_of_unequal_lengths, matrix_from_nested,
                               numpy_of_lists, any_and_all, list_of_iterators],
                         ids=lambda f: f.__name__)
def test_jit_gradient(f):
    from autodiff_ast.jit import jit
    np.testing.assert_allclose(jit(ad.grad(f))(_x()), numeric_grad(f, _x()), rtol=1e-5,
                               atol=1e-8)


def test_a_comprehension_reads_as_a_loop():
    g = ad.grad(shadowing)
    g(_x())
    assert "items.append(v_2 * v_2)" in g.source  # renamed: the outer v is another value
    assert "for k in range(n):" in g.source


# ---------------------------------------------------------------- loops over a dict's keys
KEYS = ("a", "b")


def over_keys(p, x):  # a dict argument's keys, items and values; constant keys
    s = 0.0
    for k in p:
        s = s + np.sum(p[k] * x) ** 2
    for k, v in p.items():
        s = s + np.sum(v * x * v)
    for v in p.values():
        s = s + np.sum(np.sin(v))
    for k in KEYS:
        s = s + np.sum(np.cos(p[k]))
    return s + sum(np.sum(p[k] * p[k]) for k in ("a", "b"))


def _params():
    return {"b": np.arange(4.0) * 0.3, "a": np.array([0.5, -0.2, 0.7, 0.1])}


def test_loops_over_a_dict_argument():
    ad.check_grads(over_keys, (_params(), _x()[:4]), order=2, modes=("rev", "fwd"))
    value, _ = ad.value_and_grad(over_keys)(_params(), _x()[:4])
    assert value == pytest.approx(over_keys(_params(), _x()[:4]), rel=1e-12)


@pytest.mark.numba
def test_jit_loops_over_a_dict_argument():
    from autodiff_ast.jit import jit
    p, x = _params(), _x()[:4]
    got = jit(ad.grad(over_keys))(p, x)
    for key in p:
        def along(v, key=key):
            q = dict(p)
            q[key] = v
            return over_keys(q, x)
        np.testing.assert_allclose(got[key], numeric_grad(along, p[key]), rtol=1e-5,
                                   atol=1e-8)


def list_of_lists_to_array(x):
    rows = []
    for i in range(2):
        row = []
        for j in range(2):
            row.append(x[i] * x[j])
        rows.append(row)
    return np.sum(np.array(rows))


def concatenate_a_list(x):
    parts = [x[:k] for k in range(1, 3)]
    return np.sum(np.concatenate(parts))


def generator_to_stack(x):
    return np.sum(np.stack(x * k for k in range(3)))


def sum_of_a_number(x):
    return sum(x[0])


def max_with_key(x):
    return max([x[0], x[1]], key=abs)


@pytest.mark.parametrize("f, what", [
    (generator_to_stack, "generator expression is supported only"),
    (sum_of_a_number, "sum() of a float is not supported"),
    (max_with_key, "max() with keywords"),
    (list_of_lists_to_array, "np.array of a list of lists"),
    (concatenate_a_list, "np.concatenate of a list built at run time"),
], ids=["generator elsewhere", "sum of a number", "max with key", "list of lists",
        "concatenate a list"])
def test_unsupported_folds_name_the_line(f, what):
    with pytest.raises(UnsupportedSyntaxError) as info:
        ad.grad(f)(_x())
    assert what in str(info.value)
    assert "test_comprehensions.py" in str(info.value)
