"""Linear regression on a million points, trained for 1000 steps of gradient descent.

The gradient is generated once for the signature of the arguments and reused for every step
(and every size of data). The loss is written the way one writes it on paper; the generated
gradient is printed at the end.

    python examples/linear_regression.py             # N = 1,000,000 points, 1000 steps
    python examples/linear_regression.py --small     # N = 1,000, 100 steps (the smoke test)
    python examples/linear_regression.py --n 100000 --steps 200
"""

import argparse
import time

import numpy as np

from autodiff_ast import value_and_grad


def loss(w, b, x, y):
    pred = x @ w + b
    return np.mean((pred - y) ** 2)


def make_data(n, rng):
    true_w = np.array([2.0, -3.4, 0.7])
    true_b = 4.2
    x = rng.standard_normal((n, 3))
    y = x @ true_w + true_b + 0.01 * rng.standard_normal(n)
    return x, y, true_w, true_b


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="number of points")
    parser.add_argument("--steps", type=int, default=1000, help="gradient steps")
    parser.add_argument("--small", action="store_true", help="1,000 points, 100 steps")
    args = parser.parse_args(argv)
    n, steps = (1000, 100) if args.small else (args.n, args.steps)

    rng = np.random.default_rng(0)
    x, y, true_w, true_b = make_data(n, rng)
    w, b = np.zeros(3), 0.0
    step = value_and_grad(loss, argnums=(0, 1))
    rate = 0.1
    start = time.perf_counter()
    for k in range(steps):
        value, (w_grad, b_grad) = step(w, b, x, y)
        w = w - rate * w_grad
        b = b - rate * b_grad
        if k % max(1, steps // 10) == 0 or k == steps - 1:
            print(f"step {k:5d}  loss {value:.6f}")
    seconds = time.perf_counter() - start
    print(f"{steps} steps on {n:,} points in {seconds:.2f} s "
          f"({1e3 * seconds / steps:.2f} ms per step)")
    print(f"learned w = {np.round(w, 3)}, b = {b:.3f}; true w = {true_w}, b = {true_b}")
    error = max(np.max(np.abs(w - true_w)), abs(b - true_b))
    print(f"largest parameter error {error:.2e}")
    print()
    print("The generated value_and_grad of loss:")
    print(step.source)


if __name__ == "__main__":
    main()
