"""LLVM's vectorizer allowed more run-time overlap checks (codegen/llvm_options.py).

The loop is the forward step of ADBench's LSTM cell as the gradient writes it (three exps and
two tanhs of a unit saved on the loop's stack, the new cell and hidden entries written): with
LLVM's defaults it does not vectorize ("too many memory checks needed"); once the option is
set it does. The default case runs in a new process with ``AUTODIFF_AST_LLVM_TUNING=0``, the
switch that leaves LLVM alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.numba

CELL_STEP = '''
@numba.njit(error_model="numpy", fastmath={"contract"})
def cell_step(x, weights, state, cell, hidden, stack, row, n, s0, s1, s2, s3, s4, s5, s6,
              s7):
    for j in range(n):
        r = index_at_least(row + j, 0)
        forget_exp = exp_fast(-(x[j] * weights[0, s0 + j] + weights[1, s1 + j]))
        stack[0, r] = forget_exp
        forget = 1.0 / (1.0 + forget_exp)
        in_exp = exp_fast(-(state[0, j] * weights[0, s2 + j] +
                            weights[1, s3 + j]))
        stack[1, r] = in_exp
        ingate = 1.0 / (1.0 + in_exp)
        out_exp = exp_fast(-(x[j] * weights[0, s4 + j] + weights[1, s5 + j]))
        stack[2, r] = out_exp
        outgate = 1.0 / (1.0 + out_exp)
        change = tanh_fast(state[0, j] * weights[0, s6 + j] + weights[1, s7 + j])
        stack[3, r] = change
        new_cell = state[1, j] * forget + ingate * change
        cell[j] = new_cell
        squashed = tanh_fast(new_cell)
        stack[4, r] = squashed
        hidden[j] = outgate * squashed
'''

PROBE = r'''
import json, sys
import numpy as np
import numba
sys.path[:0] = {path!r}
from codegen.helpers import dialect_helper_source
from codegen.llvm_options import allow_more_memory_checks
from codegen.loop_indices import INDEX_HELPERS
applied = allow_more_memory_checks()
space = {{"np": np, "numba": numba}}
for source in dialect_helper_source({{"tanh_fast"}}) + [INDEX_HELPERS["index_at_least"]]:
    exec(source, space)
exec({step!r}, space)
n = 14
rng = np.random.default_rng(0)
args = (rng.standard_normal(n), rng.standard_normal((2, 4 * n)), rng.standard_normal((2, n)),
        np.empty(n), np.empty(n), np.zeros((5, 40)), 3, n,
        0, 0, n, n, 2 * n, 2 * n, 3 * n, 3 * n)
space["cell_step"](*args)
ir = "".join(space["cell_step"].inspect_llvm().values())
print(json.dumps({{"applied": applied, "vectorized": "vector.body" in ir and "x double>" in ir,
                  "hidden": args[4].tolist(), "stack": args[5][:, 3:3 + n].tolist()}}))
'''


def _probe(tuning):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, AUTODIFF_AST_LLVM_TUNING=tuning,
               NUMBA_BOUNDSCHECK="0")  # (the suite's bounds checks keep loops scalar)
    out = subprocess.run([sys.executable, "-c", PROBE.format(path=[here], step=CELL_STEP)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_lstm_cell_step_vectorizes_with_the_option_and_not_without():
    tuned, default = _probe("1"), _probe("0")
    assert tuned["applied"] and not default["applied"]
    assert tuned["vectorized"] and not default["vectorized"]
    # the same values either way: the checks only choose between two versions of the loop
    np.testing.assert_allclose(tuned["hidden"], default["hidden"], rtol=1e-15, atol=0.0)
    np.testing.assert_allclose(tuned["stack"], default["stack"], rtol=1e-15, atol=0.0)


def test_the_option_is_set_once():
    from codegen.llvm_options import allow_more_memory_checks
    first = allow_more_memory_checks()
    assert allow_more_memory_checks() is first
