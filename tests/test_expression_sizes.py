"""`(e).size` outside fused runs: from the operands' shapes, no array made
(codegen/expression_sizes.py).

np.mean's gradient divides by its operand's size; every compiled gradient here is compared
with the plain-NumPy one (and central differences through test_vector_loops._grads_agree),
and its source is checked to show the size was rewritten.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_vector_loops import _grads_agree

import autodiff_ast as ad
from codegen.expression_sizes import SIZE_HELPERS

pytestmark = [pytest.mark.numba,
              pytest.mark.filterwarnings("ignore:Cannot cache compiled function")]


def means(a, b):
    """A mean of a product (broadcasting when b is a number or a matrix) and one of a slice."""
    return np.mean(a * b) + np.mean(np.sin(a[1:]) * 2.0)


@pytest.mark.parametrize("shapes", [((6,), (6,)), ((4, 6), ()), ((6,), (3, 6))],
                         ids=["vectors", "matrix and number", "broadcast"])
def test_mean_gradients_take_the_size_from_shapes(shapes):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shapes[0])
    b = rng.standard_normal(shapes[1]) if shapes[1] else 0.5
    argnums = (0, 1) if shapes[1] else (0,)
    compiled = ad.jit(ad.grad(means, argnums=argnums))
    got, want = compiled(a, b), ad.grad(means, argnums=argnums)(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    entry = compiled.source[compiled.source.rindex("\n@numba.njit"):]
    assert "broadcast_size(np.shape(a)" in entry and ").size" not in entry


def test_vector_means_agree_with_differences():
    rng = np.random.default_rng(1)
    _grads_agree(means, (rng.standard_normal(7), rng.standard_normal(7)), (0, 1))


def test_broadcast_size_in_plain_python_and_under_numba():
    import numba
    namespace = {"np": np, "numba": numba}
    exec(SIZE_HELPERS["broadcast_size"], namespace)
    size = namespace["broadcast_size"]
    assert size((3, 4), (4,)) == 12 and size((), ()) == 1 and size((5,), ()) == 5

    @numba.njit
    def compiled(a, b):
        return size(np.shape(a), np.shape(b))
    assert compiled(np.ones((3, 4)), np.ones(4)) == 12
    assert compiled(2.0, 3.0) == 1
    assert compiled(np.ones((2, 1, 3)), np.ones((5, 1))) == 30
