"""vmap: a 1-D convolution written for one example, batched without rewriting it.

JAX's vmap tutorial: ``convolve`` handles one signal; ``vmap(convolve)`` handles a batch, and the
generated source shows how (here every line runs on the whole batch at once, batch axis first).
Then per-example gradients: vmap of grad, batched the same way.

    python examples/vmap_convolution.py            # a batch of 1000 signals of length 500
    python examples/vmap_convolution.py --small    # a batch of 4 signals of length 8
"""

import argparse
import time

import numpy as np

from autodiff_ast import grad, vmap


def convolve(x, w):
    output = []
    for i in range(1, len(x) - 1):
        output.append(np.dot(x[i - 1:i + 2], w))
    return np.array(output)


def convolve_slices(x, w):
    """The same convolution, written with slices instead of a loop."""
    return w[0] * x[:-2] + w[1] * x[1:-1] + w[2] * x[2:]


def example_loss(w, x):
    # vmap(grad(...)) of the loop-and-list version is a known gap (the list tape of its
    # backward sweep is not batched yet), so the per-example loss uses the slice version.
    return np.sum(convolve_slices(x, w) ** 2)


def manual_batch(xs, w):
    """The loop vmap saves you from writing."""
    return np.stack([convolve(x, w) for x in xs])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="4 signals of length 8")
    args = parser.parse_args(argv)
    batch, length = (4, 8) if args.small else (1000, 500)

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((batch, length))
    w = np.array([2.0, 3.0, 4.0])

    batched = vmap(convolve, in_axes=(0, None))
    start = time.perf_counter()
    out = batched(xs, w)
    first = time.perf_counter() - start
    start = time.perf_counter()
    out = batched(xs, w)
    vmapped = time.perf_counter() - start
    start = time.perf_counter()
    expected = manual_batch(xs, w)
    looped = time.perf_counter() - start
    assert np.allclose(out, expected)
    print(f"vmap(convolve) on {batch} signals of length {length}: output {out.shape}, "
          f"equal to the Python loop over examples")
    print(f"first call (writes the module) {first * 1e3:.1f} ms; then {vmapped * 1e3:.2f} ms "
          f"per call; the loop over examples {looped * 1e3:.2f} ms")
    print()
    print(batched.source)

    # Per-example gradients: vmap of the gradient of one example's loss, with respect to the
    # kernel (one gradient row per signal), checked against finite differences.
    per_example = vmap(grad(example_loss), in_axes=(None, 0))
    grads = per_example(w, xs)
    eps = 1e-6
    fd = np.array([(example_loss(w + eps * e, xs[0]) - example_loss(w - eps * e, xs[0]))
                   / (2 * eps) for e in np.eye(3)])
    assert np.allclose(grads[0], fd, rtol=1e-5, atol=1e-6)
    assert np.allclose(convolve_slices(xs[0], w), convolve(xs[0], w))
    print(f"per-example gradients {grads.shape}; the first: {grads[0]} (finite differences: "
          f"{fd})")
    print()
    print(per_example.source)

if __name__ == "__main__":
    main()
