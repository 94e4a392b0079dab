"""A number a loop tapes, stored after it is computed and read back before its first use in
the backward step (codegen/tape_order.py).

The rules are checked on small functions (what is rewritten, and each thing that keeps the
push-and-restore form); compiled gradients of loops that tape such numbers are compared with
the plain-NumPy gradient and central differences (test_vector_loops._grads_agree), at sizes
where the loops run no step, one, or several.
"""

from __future__ import annotations

import gast
import numpy as np
import pytest
from test_vector_loops import _grads_agree  # jit(grad) == grad == differences

from autodiff_ast.templates import unparse
from codegen.tape_order import store_values_after

PROGRAM = '''
def f(terms, k, out):
    {tape}
    e = 0.0
    s = 0.0
    for c in range(k):
        {forward}
    {between}
    g = np.zeros(k)
    for c in range(k - 1, -1, -1):
        {backward}
    {after}
    return g
'''
FORWARD = "tape[c] = e\n        e = np.exp(terms[c])\n        s = s + e"
BACKWARD = "g[c] = e / s\n        e = tape[c]"


def _rewrite(tape="tape = np.empty(k, dtype=np.float64)", forward=FORWARD, between="pass",
             backward=BACKWARD, after="pass"):
    fn = gast.parse(PROGRAM.format(tape=tape, forward=forward, between=between,
                                   backward=backward, after=after)).body[0]
    return store_values_after(fn), unparse(fn)


def test_the_value_is_stored_after_and_read_before():
    changed, text = _rewrite()
    assert changed
    assert "e = np.exp(terms[c])\n        tape[c] = e\n        s = s + e" in text
    assert "e = tape[c]\n        g[c] = e / s\n" in text


def test_a_column_of_a_tape_matrix_becomes_a_vector():
    changed, text = _rewrite(tape="tapes = np.empty((k, 2), dtype=np.float64)\n"
                                  "    tape = tapes[:, 1]")
    assert changed and "tape = np.empty(tapes.shape[0], dtype=np.float64)" in text


def test_the_load_goes_before_the_first_use():
    changed, text = _rewrite(backward="t = 2.0 * c\n        g[c] = e / s + t\n"
                                      "        e = tape[c]")
    assert changed and "t = 2.0 * c\n        e = tape[c]\n        g[c] = e / s + t" in text


def test_a_value_the_backward_step_never_reads_keeps_its_restore():
    """Found by the fuzzer (a maximum's running value): the backward step restores the value
    but reads it nowhere, so there is no first use to load it before; the store moves after
    the computation and the restore stays (it moved onto itself, a ValueError, before)."""
    changed, text = _rewrite(backward="g[c] = 2.0 * s\n        e = tape[c]")
    assert changed
    assert "e = np.exp(terms[c])\n        tape[c] = e" in text
    assert "g[c] = 2.0 * s\n        e = tape[c]" in text


@pytest.mark.parametrize("kwargs", [
    dict(after="g[0] = e"),                                   # read after the loops
    dict(between="s = s + e"),                                # read between them
    dict(forward="tape[c] = e\n        e = np.exp(terms[c])\n        e = e + 1.0\n"
                 "        s = s + e"),                        # bound twice in the forward step
    dict(forward="e = np.exp(terms[c])\n        tape[c] = e\n        s = s + e"),  # stored after
    dict(forward="tape[c] = e\n        t = e\n        e = np.exp(terms[c])\n"
                 "        s = s + e + t"),                    # read before it is computed
    dict(forward="tape[c] = e\n        c = c + 0\n        e = np.exp(terms[c])\n"
                 "        s = s + e"),                        # the index rebound in between
    dict(backward="g[c] = e / s\n        e = tape[c]\n        g[c] += e"),  # read after
    dict(backward="g[c] = e / s\n        e = tape[c - 1]"),   # another slot
    dict(backward="g[c] = e / s\n        e = tape[c]\n        if c == 1:\n"
                  "            break"),                       # leaves the loop
    dict(between="h = tape"),                                 # the tape held elsewhere
    dict(tape="tape = np.zeros(k)"),                          # not a tape the sweep made
    dict(tape="tapes = np.empty((k, 2), dtype=np.float64)\n    tape = tapes[:, 1]",
         between="h = tapes[0, 1]"),                          # its matrix read elsewhere
])
def test_what_keeps_push_and_restore(kwargs):
    changed, text = _rewrite(**kwargs)
    assert not changed
    assert "tape[c] = e\n        e = np.exp" in text or "forward" in kwargs


# ---------------------------------------------------------------- compiled gradients
def log_sum_exp_rows(w, x):
    """A log-sum-exp per row written with loops: the exponentials are taped numbers."""
    total = 0.0
    for i in range(x.shape[0]):
        top = x[i, 0] * w[0]
        for c in range(1, w.shape[0]):
            if x[i, c] * w[c] > top:
                top = x[i, c] * w[c]
        s = 0.0
        for c in range(w.shape[0]):
            s = s + np.exp(x[i, c] * w[c] - top)
        total = total + np.log(s) + top
    return total


@pytest.mark.numba
@pytest.mark.parametrize("n,k", [(1, 1), (3, 2), (4, 7), (2, 9)])
def test_log_sum_exp_loops(n, k):
    rng = np.random.default_rng(n * 10 + k)
    w, x = rng.standard_normal(k), rng.standard_normal((n, k))
    compiled = _grads_agree(log_sum_exp_rows, (w, x), (0, 1))
    source = compiled.source
    assert "= exp_fast(" in source
    # the exponential stored after it is computed (and the sum outlined, vectorizable)
    assert "s = s + sum_loop" in source, source
