"""Forward mode when two values share one tangent: ``b = a + 0.0`` (or ``1.0 * a``,
``np.positive(a)``, ``b = a``, ``t = (a, 0.5)``) makes b's tangent a's tangent array. A later
loop or branch that binds a again, or an in-place write into a, must leave b's tangent as it
was; and an in-place write into a while a tuple still holds a is refused (the tuple shares
its memory). Checked against central finite differences (check_grads), both modes."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from fuzzing import load_program

import autodiff_ast as ad
from autodiff_ast.errors import UnsupportedSyntaxError

SOURCE = """
import numpy as np


def f(x):
    a = x * 2.0
    {hold}
    {block}
    return np.sum({use} + np.sin(a))
"""

HOLDS = {
    "plus_zero": ("b = a + 0.0", "b * b"),
    "times_one": ("b = 1.0 * a", "b * b"),
    "positive": ("b = np.positive(a)", "b * b"),
    "unary_plus": ("b = +a", "b * b"),  # a new array, as np.positive (it was refused as a view)
    "copy_then_copy": ("b = 1.0 * a\n    c = b", "c * b"),
    "tuple": ("t = (a, 0.5)", "t[0] * t[1]"),
    "nested_tuple": ("t = (a, (a, 2.0))", "t[1][0] * t[0]"),
}

BLOCKS = {
    "loop": "for i in range(3):\n        a = a * 1.5 + np.sin(a)",
    "branch": "if x[0] > 0.0:\n        a = np.tanh(a)\n    else:\n        a = a * a",
    "one_armed_branch": "if x[0] < 0.0:\n        a = np.tanh(a)",
    "while": "while np.sum(a) < 10.0:\n        a = a + 1.0 + np.abs(a)",
    "in_place": "a[0] = 5.0 * a[1]",
    "slice_in_place": "a[1:] = a[1:] * x[:2]",
}


def _program(hold, block):
    held, use = HOLDS[hold]
    return load_program(textwrap.dedent(SOURCE).format(hold=held, block=BLOCKS[block],
                                                       use=use)).f


@pytest.mark.parametrize("block", sorted(BLOCKS))
@pytest.mark.parametrize("hold", sorted(HOLDS))
def test_a_value_keeps_its_tangent_when_its_source_changes(hold, block):
    f = _program(hold, block)
    x = np.array([0.3, -0.2, 0.5])
    if "tuple" in hold and "in_place" in block:
        with pytest.raises(UnsupportedSyntaxError, match="t shares memory with a"):
            ad.grad(f)(x)
        return
    ad.check_grads(f, (x,), order=1, modes=("fwd", "rev"))



def unary_plus_then_write(x):
    a = np.tanh(x)
    b = +a
    a[0] = 3.0 * a[1]
    return np.sum(b * b * x + a)


def test_unary_plus_of_an_array_is_a_copy_under_jit_and_vmap():
    from autodiff_ast.jit import jit
    x = np.array([0.3, -0.2, 0.5])
    want = ad.grad(unary_plus_then_write)(x)
    ad.check_grads(unary_plus_then_write, (x,), order=2, modes=("fwd", "rev"))
    np.testing.assert_allclose(jit(ad.grad(unary_plus_then_write))(x), want, rtol=1e-12)
    xs = np.stack([x, 0.5 * x])
    np.testing.assert_allclose(ad.vmap(ad.grad(unary_plus_then_write))(xs),
                               [want, ad.grad(unary_plus_then_write)(0.5 * x)], rtol=1e-12)


HELPERS = """
import numpy as np


def ident(v):
    return v


def pair(v):
    return v, v * 2.0


def scale(v, s):
    return v * s


def f(x):
    a = x * 2.0
    {hold}
    a *= 3.0
    return np.sum({use} + np.sin(a))
"""


@pytest.mark.parametrize("hold, use, refused", [
    ("b = ident(a)", "b * b", "b shares memory with a"),
    ("b, c = pair(a)", "b * c", "shares memory with a"),
    ("b = a if x[0] > 0.0 else x", "b * b", "b may share memory with a"),
    ("b = scale(a, 1.0)", "b * b", None),  # a new array: no refusal
    ("b = ident(a).copy()", "b * b", None),
], ids=["helper_returns_its_parameter", "helper_returns_a_tuple_holding_it", "if_expression",
        "helper_returns_a_new_array", "copy_of_the_helper_result"])
def test_names_a_helper_or_if_expression_gives_to_an_array_written_in_place(hold, use, refused):
    # NumPy: b is a itself, so `a *= 3.0` changes b too; the gradient was wrong in both modes
    f = load_program(textwrap.dedent(HELPERS).format(hold=hold, use=use)).f
    x = np.array([0.3, -0.2, 0.5])
    if refused:
        with pytest.raises(UnsupportedSyntaxError, match=refused):
            ad.grad(f)(x)
    else:
        ad.check_grads(f, (x,), order=1, modes=("fwd", "rev"))
