"""Numba's overload implementations built once for callers that differ only in their wrappers
(codegen/overload_sharing.py): each test counts the builds of an overload of its own."""

import numba
import numpy as np
from numba import extending

from codegen.overload_sharing import share_overload_implementations


def doubled(x):
    return 2.0 * x


def tripled(x):
    return 3.0 * x


DOUBLED_BUILDS = []
TRIPLED_BUILDS = []


@extending.overload(doubled)
def doubled_numba(x):
    DOUBLED_BUILDS.append(x)
    return lambda x: 2.0 * x


@extending.overload(tripled)
def tripled_numba(x):
    TRIPLED_BUILDS.append(x)
    return lambda x: 3.0 * x


def test_an_entry_and_an_internal_function_share_one_build():
    assert share_overload_implementations()

    @numba.njit
    def entry(x):
        return doubled(x) + 1.0

    @numba.njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    def internal(x):
        return doubled(x)

    @numba.njit
    def both(x):
        return internal(x) + entry(x)

    assert both(3.0) == 13.0
    assert both(np.ones(2)).tolist() == [5.0, 5.0]
    # one build per argument type, though callers of two flag sets asked for each
    assert [str(t) for t in DOUBLED_BUILDS] == ["float64", "array(float64, 1d, C)"]


def test_callers_with_other_inherited_flags_keep_their_own_builds():
    assert share_overload_implementations()

    @numba.njit
    def exact(x):
        return tripled(x)

    @numba.njit(fastmath=True)
    def fast(x):
        return tripled(x)

    assert exact(2.0) == 6.0 and fast(2.0) == 6.0
    # fastmath reaches the implementation (inherited): a build for each caller
    assert [str(t) for t in TRIPLED_BUILDS] == ["float64", "float64"]
