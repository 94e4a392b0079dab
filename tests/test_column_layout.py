"""A double loop's reads and adds a column at a time, from and into column copies
(codegen/column_layout.py).

The rule is checked on small functions (what is rewritten, and each thing that keeps the
loops as written); compiled gradients of pair potentials whose loops are rewritten are
compared with the plain-NumPy gradient and central differences (test_vector_loops).
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_loop_adjoints import pair_energy
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.column_layout import lay_out_columns

DOC = "pos: float64[N,N], c: float64."

PAIRS = '''
def grad_f(pos, c):
    n = pos.shape[0]
    pos_bar = np.zeros_like(pos)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            e = c * (dx * dx + dy * dy)
            pos_bar[j, 1] += -e * dy
            pos_bar[i, 1] += e * dy
            pos_bar[j, 0] -= e * dx
    return pos_bar
'''


def _rewrite(text=PAIRS, doc=DOC):
    fn = gast.parse(text).body[0]
    used = lay_out_columns(fn, doc, {"pos", "pos_bar", "n", "c", "i", "j", "dx", "dy", "e"})
    return used, unparse(fn)


def test_the_columns_are_read_and_added_from_copies():
    used, text = _rewrite()
    assert used == {"columns_of", "add_columns"}
    assert text.strip() == '''\
def grad_f(pos, c):
    n = pos.shape[0]
    pos_bar = np.zeros_like(pos)
    pos_columns = columns_of(pos, (0, 1))
    pos_bar_columns = np.zeros((2, pos_bar.shape[0]))
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos_columns[0, j]
            dy = pos[i, 1] - pos_columns[1, j]
            e = c * (dx * dx + dy * dy)
            pos_bar_columns[1, j] += -e * dy
            pos_bar[i, 1] += e * dy
            pos_bar_columns[0, j] -= e * dx
    add_columns(pos_bar, pos_bar_columns, (0, 1))
    return pos_bar'''


@pytest.mark.parametrize("change, adjoint", [
    (("    n = pos.shape[0]\n", "    n = pos.shape[0]\n    pos[0, 0] = 1.0\n"), True),  # written
    (("    n = pos.shape[0]\n", "    n = pos.shape[0]\n    keep(pos)\n"), True),  # handed on
    # a row: maybe not a matrix after all, so neither it nor its zeros_like is taken
    (("    n = pos.shape[0]\n", "    n = pos.shape[0]\n    first = pos[0]\n"), False),
])
def test_a_matrix_that_may_change_or_is_not_read_by_element_keeps_its_reads(change, adjoint):
    _, text = _rewrite(PAIRS.replace(*change))
    assert "columns_of" not in text and "pos[j, 0]" in text
    assert ("pos_bar_columns[1, j] += -e * dy" in text) == adjoint


@pytest.mark.parametrize("change", [
    ("            e = c * (dx * dx + dy * dy)\n",
     "            e = c * (dx * dx + dy * dy) + pos_bar[j, 0]\n"),  # read in the loop
    ("    return pos_bar\n", "    pos_bar = pos_bar * 2.0\n    return pos_bar\n"),  # rebound
    ("            pos_bar[j, 0] -= e * dx\n", "            pos_bar[j, 0] = e * dx\n"),  # stored
    ("            pos_bar[j, 0] -= e * dx\n",  # a return in the loop would skip the add
     "            pos_bar[j, 0] -= e * dx\n"
     "            if e > 9.0:\n                return pos_bar\n"),
])
def test_an_adjoint_read_or_stored_keeps_its_updates(change):
    _, text = _rewrite(PAIRS.replace(*change))
    assert "pos_bar_columns" not in text and "pos_bar[j, 1] += -e * dy" in text


@pytest.mark.parametrize("doc", [
    "pos: float64[N], c: float64.",  # not a matrix
    "pos: float64[N,N,N], c: float64.",
    "pos: float32[N,N], c: float64.",
    "Per example: pos: float64[N,N] (mapped along axis 0), c: float64 (not mapped).",  # vmap
])
def test_only_float64_matrices_of_the_entry_are_taken(doc):
    used, text = _rewrite(doc=doc)
    assert not used and "_columns" not in text


def test_only_rows_at_the_inner_index_and_constant_columns_move():
    text = PAIRS.replace("dy = pos[i, 1] - pos[j, 1]", "dy = pos[i, 1] - pos[j, k]") \
        .replace("def grad_f(pos, c):", "def grad_f(pos, c, k):")
    _, text = _rewrite(text, DOC + " k: int.")
    assert "pos_columns = columns_of(pos, (0,))" in text
    assert "pos[j, k]" in text and "pos[i, 0] - pos_columns[0, j]" in text
    rebinding = PAIRS.replace("            dx = pos[i, 0] - pos[j, 0]\n",
                              "            j = j + 0\n            dx = pos[i, 0] - pos[j, 0]\n")
    assert "_columns" not in _rewrite(rebinding)[1]


def wide_pairs(pos, w):
    """Reads columns 0 and 3 of a 4-column matrix (twice each), and a second matrix."""
    n = pos.shape[0]
    energy = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dz = pos[i, 3] - pos[j, 3]
            r2 = dx * dx + dz * dz + 0.5
            energy = energy + w[j, 1] * pos[j, 3] / r2 + np.sin(pos[j, 0]) * w[i, 0]
    return energy


def confined_pairs(pos, sigma):
    """A pair potential in a quadratic well: the gradient reads pos whole and adds into
    pos_bar whole (pos_bar += ... * pos) after the pairs' loop."""
    n = pos.shape[0]
    energy = 0.01 * np.sum(pos * pos)
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            energy = energy + np.exp(-(dx * dx + dy * dy) / sigma)
    return energy


@pytest.mark.numba
@pytest.mark.filterwarnings("ignore:Cannot cache compiled function")
def test_compiled_pair_gradients_agree():
    rng = np.random.default_rng(3)
    pos = rng.standard_normal((9, 2)) * 2.0
    compiled = _grads_agree(pair_energy, (pos, 0.7), (0, 1))
    assert "columns_of(pos, (0, 1))\n    pos_bar_columns = np.zeros((2, pos_bar.shape[0]))\n" \
        "    # for i in range(n):\n" in compiled.source  # (before the loop's comment)
    args = (rng.standard_normal((7, 4)), rng.standard_normal((7, 2)))
    compiled = _grads_agree(wide_pairs, args, (0, 1))
    assert "columns_of(pos, (0, 3))" in compiled.source
    assert "add_columns(pos_bar, pos_bar_columns, (0, 3))" in compiled.source
    compiled = _grads_agree(confined_pairs, (rng.standard_normal((8, 2)), 1.3), (0, 1))
    assert "columns_of(pos, (0, 1))" in compiled.source
    assert "add_columns(pos_bar, pos_bar_columns, (0, 1))" in compiled.source
