"""What tidying does to loop adjoints: dead forward loops go, accumulations into adjoints known
to be zero become assignments. Each test checks the gradient against finite differences or an
explicit value, and the shape of the source that made it."""

from __future__ import annotations

import numpy as np
import pytest
from test_loop_adjoints import pair_energy  # a Lennard-Jones-like double loop

import autodiff_ast as ad

POS = np.array([[0.0, 0.1], [1.1, -0.2], [0.3, 1.4], [-0.9, 0.8]])


def _loops(source):
    return sum(line.strip().startswith("for ") for line in source.splitlines())


def test_forward_loop_nothing_reads_is_dropped():
    """grad needs no value of the forward double loop (the reverse loop recomputes dx, dy,
    r2): only the reverse double loop is left."""
    g = ad.grad(pair_energy)
    ad.check_grads(pair_energy, (POS, 0.7), modes=("fwd", "rev"))
    g(POS, 0.7)
    assert _loops(g.source) == 2, g.source
    assert "energy = " not in g.source


def test_forward_loop_is_kept_when_its_value_is_returned():
    g = ad.value_and_grad(pair_energy)
    value, grad = g(POS, 0.7)
    assert value == pytest.approx(pair_energy(POS, 0.7), rel=1e-15)
    assert _loops(g.source) == 4, g.source
    h = 1e-6
    bumped = POS.copy()
    bumped[1, 0] += h
    lowered = POS.copy()
    lowered[1, 0] -= h
    fd = (pair_energy(bumped, 0.7) - pair_energy(lowered, 0.7)) / (2 * h)
    assert grad[1, 0] == pytest.approx(fd, rel=1e-6)


def test_accumulations_into_known_zero_adjoints_are_assignments():
    """`r2_bar = r2_bar + c` at the top of a trip whose end resets r2_bar reads as
    `r2_bar = c`; the resets and the zeros before the loop are gone."""
    g = ad.grad(pair_energy)
    g(POS, 0.7)
    body = g.source
    for adjoint in ("dx_bar", "dy_bar", "r2_bar"):
        assert f"{adjoint} = {adjoint} +" not in body, body
        assert f"{adjoint} = 0.0" not in body, body


def branch_accumulates(x, c):
    total = 0.0
    for i in range(x.shape[0]):
        t = np.sin(x[i])
        if c > 0.0:
            u = t * c
        else:
            u = t * t
        total = total + u * x[i]
    return total


def carried_through_trips(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = 0.5 * s + np.tanh(x[i])
    return s * s


@pytest.mark.parametrize("c", [0.8, -0.8])
def test_adjoint_known_zero_on_one_branch_only(c):
    x = np.array([0.3, -1.2, 0.7])
    ad.check_grads(lambda x: branch_accumulates(x, c), (x,), modes=("fwd", "rev"))
    ad.check_grads(branch_accumulates, (x, c), modes=("fwd", "rev"), order=2)


def test_adjoint_carried_between_trips_still_accumulates():
    """s_bar carries from one trip to the next (never reset): it is not known zero, and the
    gradient is the chain through every trip."""
    x = np.array([0.3, -1.2, 0.7, 0.1])
    g = ad.grad(carried_through_trips)(x)
    s, ds = 0.0, np.zeros((4, 4))
    for i in range(4):
        row = 0.5 * ds[i - 1] if i else np.zeros(4)
        row[i] += 1.0 - np.tanh(x[i]) ** 2
        ds[i] = row
        s = 0.5 * s + np.tanh(x[i])
    np.testing.assert_allclose(g, 2.0 * s * ds[3], rtol=1e-14)
    ad.check_grads(carried_through_trips, (x,), modes=("fwd", "rev"), order=2)


def test_known_zero_rewrite_under_jit():
    g = ad.jit(ad.grad(pair_energy))
    np.testing.assert_allclose(g(POS, 0.7), ad.grad(pair_energy)(POS, 0.7), rtol=1e-13)


# ---------------------------------------------------------------- array adjoints known zero
def mixture_like(qs, x, means):
    total = 0.0
    for i in range(x.shape[0]):
        for c in range(qs.shape[0]):
            centered = x[i] - means[c]
            q = np.dot(qs[c], centered)
            total = total + np.sum(q * q)
    return total


MIX = (np.array([[[1.0, 0.2], [-0.3, 0.8]], [[0.5, 0.0], [0.4, 1.2]]]),
       np.array([[0.1, -0.4], [1.3, 0.2], [-0.7, 0.9]]), np.array([[0.0, 0.5], [-0.2, 0.1]]))


def test_array_adjoints_known_zero_are_assigned_not_added():
    """In the reverse loop, q_bar and centered_bar hold zeros of their value's shape at the top
    of every trip: the sweep's marked ``x_bar = x_bar + c`` becomes ``x_bar = c``, and the
    zeroing at the end of each trip goes (two arrays fewer per trip)."""
    ad.check_grads(mixture_like, MIX, modes=("rev",))
    g = ad.grad(mixture_like, argnums=(0, 1, 2))
    g(*MIX)
    backward = g.source.split("_bar = ", 1)[1]
    assert "q_bar = q_bar +" not in backward and "centered_bar +=" not in backward, g.source
    assert "q_bar = 2.0 * " in backward, g.source
    assert "centered_bar = np.dot(" in backward, g.source
    loop = backward[backward.index("for c in range("):]
    assert "np.zeros_like(q)" not in loop and "np.zeros_like(centered)" not in loop, g.source


def test_array_adjoint_read_while_zero_keeps_its_accumulation():
    """When something else reads the zeros (here the adjoint is also summed into a scalar
    before the add), ``x_bar += c`` stays an update of that array."""
    import gast

    from autodiff_ast.known_zeros import forward_known_zeros
    from autodiff_ast.templates import unparse

    body = gast.parse("x_bar = np.zeros_like(x)\ny = x_bar\nx_bar += 2.0 * x\n"
                      "z_bar = np.zeros_like(x)\nz_bar += 3.0 * x\n"
                      "w_bar = np.zeros_like(x)\nw_bar += v\n"
                      "u_bar = np.zeros_like(x)\nu_bar += 4.0 * x").body
    for stmt in body[2], body[4], body[6]:
        stmt.same_shape_as = "x"
    text = [unparse(s) for s in forward_known_zeros(body)]
    assert text[2] == "x_bar += 2.0 * x"  # y holds the zeros: it must see the update
    assert text[4] == "z_bar = 3.0 * x"
    assert text[6] == "w_bar += v"  # (z_bar = v would make z_bar a name of v's array)
    assert text[8] == "u_bar += 4.0 * x"  # not marked: c might broadcast up


@pytest.mark.numba
def test_array_known_zero_rewrite_under_jit():
    from autodiff_ast.jit import jit
    got = jit(ad.grad(mixture_like, argnums=(0, 1, 2)))(*MIX)
    expected = ad.grad(mixture_like, argnums=(0, 1, 2))(*MIX)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def dot_then_row_update(x, c, w):
    """x @ y1 gives x's adjoint y1 itself (times a seed of 1.0); x[0] read again adds into
    that adjoint in place."""
    y1 = np.copy(np.maximum(x, w))
    for i1 in range(2, y1.shape[0]):
        y1[i1] += w
    xs4 = []
    for q5 in range(4):
        xs4.append(np.tanh(np.dot((c * y1)[2], y1)) * (q5 + 1.0))
    r5 = np.sum(xs4[0])
    t8 = np.expm1(np.tanh(x[0]))
    return (x @ y1) + r5 + t8


def test_folding_a_seed_of_one_never_aliases_an_array_written_in_place():
    """Regression (found by make fuzz): tidying folded ``x_bar = 1.0 * y1`` to ``x_bar = y1``
    and ``x_bar[0] += g`` then changed y1, which the backward loop still read: grad with
    argnums=(0, 1, 2) gave c's adjoint 1.905 instead of 0.656 (argnums=1 alone was right)."""
    from test_vector_loops import central
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(4) * 0.5, rng.standard_normal((3, 1)) * 0.5, 0.3]
    got = ad.grad(dot_then_row_update, argnums=(0, 1, 2))(*args)
    for k in range(3):
        np.testing.assert_allclose(got[k], central(dot_then_row_update, list(args), k),
                                   rtol=1e-6, atol=1e-8)
    source = ad.source(ad.grad(dot_then_row_update, argnums=(0, 1, 2)), *args)
    assert "x_bar = y1\n" not in source
