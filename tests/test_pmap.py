"""pmap and the collectives (psum, pmean, pmax, pmin, all_gather, axis_index): the seed
examples, vmap with axis_name, collectives under grad, errors, and an MPI run with 2 ranks.
References: NumPy computations written out by hand, central finite differences, and the
single-process run for MPI."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autodiff_ast import (
    all_gather,
    axis_index,
    grad,
    pmap,
    pmax,
    pmean,
    psum,
    vmap,
)
from autodiff_ast.pmap import PmapError

ROOT = Path(__file__).resolve().parents[1]


def normalize(x):
    return x / psum(x, 'i')


def centered(x):
    return x - pmean(x, 'i') + 0.5 * axis_index('i')


def loss(w, x):
    return psum(np.sum(np.tanh(w * x)), 'i')


def local_loss(w, x):
    return np.sum(np.tanh(w * x) ** 2)


def gathered(x):
    return np.sum(all_gather(x, 'i') * x) + np.sum(pmax(x, 'i') * x)


def in_a_loop(x):
    s = 0.0
    for _ in range(2):
        s = s + psum(x, 'i')
    return s


def central(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def test_seed_normalize():
    p = pmap(normalize, axis_name='i')
    np.testing.assert_allclose(p(np.arange(4.)), [0, 1 / 6, 2 / 6, 3 / 6], rtol=1e-15)
    assert "nogil=True" in p.source and "normalize_part_1" in p.source
    np.testing.assert_allclose(vmap(normalize, axis_name='i')(np.arange(4.)),
                               [0, 1 / 6, 2 / 6, 3 / 6], rtol=1e-15)


def test_seed_matrices_and_mean():
    ms = np.arange(24.0).reshape(4, 2, 3)
    out = pmap(lambda m: np.dot(m, m.T))(ms)
    np.testing.assert_allclose(out, np.stack([m @ m.T for m in ms]), rtol=1e-15)
    np.testing.assert_allclose(pmap(np.mean)(ms), ms.reshape(4, -1).mean(axis=1), rtol=1e-15)


def test_collectives_match_vmap_and_numpy():
    x = np.array([0.5, -1.0, 2.0])
    expected = x - x.mean() + 0.5 * np.arange(3)
    np.testing.assert_allclose(pmap(centered, axis_name='i', jit=False)(x), expected)
    np.testing.assert_allclose(vmap(centered, axis_name='i')(x), expected)
    by_hand = np.sum(x) * x + np.max(x) * x
    np.testing.assert_allclose(pmap(gathered, axis_name='i', jit=False)(x), by_hand)
    np.testing.assert_allclose(vmap(gathered, axis_name='i')(x), by_hand)


def test_psum_under_grad():
    """The adjoint of psum is psum: in shard i, d/dw psum(l(w, x_j)) seeds every shard's
    cotangent with 1, so the shard gets n * dl(w, x_i)/dw (JAX's semantics)."""
    w, xs = 0.7, np.array([0.3, -1.2, 2.0])
    fd = np.array([central(lambda v, x=x: np.sum(np.tanh(v * x)), w) for x in xs])
    p = pmap(grad(loss), in_axes=(None, 0), axis_name='i')(w, xs)
    v = vmap(grad(loss), in_axes=(None, 0), axis_name='i')(w, xs)
    np.testing.assert_allclose(p, len(xs) * fd, rtol=1e-6)
    np.testing.assert_allclose(v, p, rtol=1e-12)


def test_data_parallel_gradient():
    """pmean of per-shard gradients is the gradient of the mean loss (finite differences)."""
    rng = np.random.default_rng(0)
    w, xs = rng.normal(size=3), rng.normal(size=(4, 3))

    def step(w, x):
        return pmean(grad(local_loss)(w, x), 'i')

    out = pmap(step, in_axes=(None, 0), axis_name='i', out_axes=None, devices=2)(w, xs)
    fd = central(lambda v: np.mean([local_loss(v, x) for x in xs]), w)
    np.testing.assert_allclose(out, fd, rtol=1e-6, atol=1e-9)


def test_gradient_through_gather_and_max_matches_vmap():
    x = np.array([0.5, -1.0, 2.0])
    g = grad(gathered)
    np.testing.assert_allclose(pmap(g, axis_name='i', jit=False)(x),
                               vmap(g, axis_name='i')(x), rtol=1e-12)


def test_errors():
    with pytest.raises(PmapError) as info:
        pmap(in_a_loop, axis_name='i', jit=False)(np.ones(2))
    assert info.value.lineno == in_a_loop.__code__.co_firstlineno + 3
    with pytest.raises(PmapError, match="unbound axis name"):
        pmap(normalize, axis_name='j', jit=False)(np.ones(2))
    with pytest.raises(NameError, match="unbound axis name"):
        normalize(np.ones(2))


def _mpiexec():
    found = Path(sys.executable).parent / "mpiexec"
    return str(found) if found.exists() else shutil.which("mpiexec")


def test_mpi_two_ranks_match_single_process(tmp_path):
    """Data-parallel MLP training: 2 MPI ranks (loopback) give the single process's params."""
    import mpi4py  # noqa: F401
    mpiexec = _mpiexec()
    assert mpiexec, "mpiexec not found: install the mpi extra (mpich wheel)"
    script = str(ROOT / "examples" / "pmap_mlp.py")
    single, multi = tmp_path / "single.json", tmp_path / "mpi.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_"))}
    subprocess.run([sys.executable, script, "--steps", "5", "--backend", "threads", "--json",
                    str(single)], check=True, env=env, timeout=300, cwd=ROOT)
    done = subprocess.run([mpiexec, "-launcher", "fork", "-hosts", "localhost", "-n", "2",
                           sys.executable, script, "--steps", "5", "--json", str(multi)],
                          env=env, timeout=300, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = json.loads(single.read_text()), json.loads(multi.read_text())
    assert (a["backend"], b["backend"]) == ("threads", "mpi")
    for p, q in zip(a["params"], b["params"]):
        np.testing.assert_allclose(np.array(q), np.array(p), rtol=1e-12, atol=1e-15)


def _centered_cubes(z):
    return np.sum(pmap(centered, axis_name='i')(z) ** 3)


def test_grad_of_a_function_calling_pmap():
    """grad through pmap (its source was read as the user's: "function values cannot be
    used here" at a line of pmap.py): on one process pmap computes vmap's values, so its
    transformation reads vmap's source."""
    x = np.array([[1.0, 2.0], [0.5, 3.0], [2.0, -1.0]])
    np.testing.assert_allclose(grad(_centered_cubes)(x), central(_centered_cubes, x),
                               rtol=1e-7)


def test_pmap_refuses_pytree_arguments_clearly():
    """A dict argument or a pytree prefix in in_axes was a bare TypeError/IndexError."""
    xs = np.arange(1.0, 4.0)
    with pytest.raises(PmapError, match="argument 'w' is a pytree"):
        pmap(lambda w, x: w["a"] * x, axis_name='i', in_axes=(None, 0))({"a": 2.0}, xs)
    with pytest.raises(PmapError, match="pmap in_axes for argument 'w' is"):
        pmap(lambda w, x: w["a"] * x, axis_name='i',
             in_axes=({"a": None}, 0))({"a": 2.0}, xs)


# ---------------------------------------------------------------- session 43: a collective
# of a tuple
def _sum_of_pair(x, y):
    a, b = psum((x, y), "i")  # JAX: psum of a pytree reduces each leaf
    return a + b


@pytest.mark.parametrize("jit", [True, False])
def test_psum_of_a_tuple_reduces_each_leaf(jit):
    # pmap read the tuple operand with ast.literal_eval: ValueError "malformed node".
    X, Y = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    got = pmap(_sum_of_pair, axis_name="i", jit=jit)(X, Y)
    np.testing.assert_allclose(got, np.tile(X.sum(0) + Y.sum(0), (2, 1)))


# ---------------------------------------------------------------- session 48: collectives of
# pytrees reduce each leaf (vmap summed the tuple's entries into one array; pmap raised
# KeyError 'mul' on an operand computed in the call)
def _pair_total(x):
    a, b = psum((x, 10 * x), "i")
    return a + b


def _dict_product(x):
    s = psum({"a": x, "b": x * x}, "i")
    return s["a"] * s["b"]


def _mean_of_params(p, x):
    s = pmean(p, "i")
    return s["w"] * x + s["b"][0]


def _tuple_name_loss(x):
    t = (x, x * x)
    a, b = psum(t, "i")
    return a * b


@pytest.mark.parametrize("mapper", ["vmap", "pmap"])
def test_psum_of_a_computed_tuple_reduces_each_leaf(mapper):
    x = np.arange(3.0)
    mapped = (vmap if mapper == "vmap" else pmap)(_pair_total, axis_name="i")
    np.testing.assert_allclose(mapped(x), np.full(3, 33.0))


def test_psum_of_dict_display_and_pmean_of_dict_argument():
    x = np.arange(3.0)
    np.testing.assert_allclose(vmap(_dict_product, axis_name="i")(x), np.full(3, 15.0))
    p = {"w": np.arange(3.0), "b": [np.full(3, 2.0)]}
    np.testing.assert_allclose(vmap(_mean_of_params, axis_name="i")(p, x), x + 2.0)


def test_grad_through_psum_of_a_tuple_name():
    """Every example's loss is psum(x) * psum(x**2); psum's adjoint is psum, so example j's
    gradient is n * (sum(x**2) + 2 * x_j * sum(x))."""
    x = np.array([0.5, -1.0, 2.0])
    want = 3 * (np.sum(x * x) + 2 * x * np.sum(x))
    np.testing.assert_allclose(vmap(grad(_tuple_name_loss), axis_name="i")(x), want)
