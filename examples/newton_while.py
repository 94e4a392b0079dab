"""Differentiating through a while loop: a Newton solver whose iteration count depends on data.

``jax.grad`` cannot reverse-differentiate ``lax.while_loop`` (it supports only forward mode
there, because the number of iterations is unknown until run time). autodiff-ast writes a
reverse sweep for the Python ``while`` loop as it is: the forward sweep counts the iterations
and saves what each one overwrites, the backward sweep replays them in reverse.

The solver finds the root of ``x**3 + a*x - b`` by Newton's method; the derivatives of the root
with respect to ``a`` and ``b`` are checked against the implicit function theorem,
``dx/da = -x / (3x^2 + a)`` and ``dx/db = 1 / (3x^2 + a)``.

    python examples/newton_while.py            # 1000 solves
    python examples/newton_while.py --small    # 5 solves
"""

import argparse

import numpy as np

from autodiff_ast import grad


def cube_root_solve(a, b):
    """The real root of x**3 + a*x - b (a > 0), by Newton's method from x = b."""
    x = b
    residual = x * x * x + a * x - b
    while abs(residual) > 1e-12:
        x = x - residual / (3.0 * x * x + a)
        residual = x * x * x + a * x - b
    return x


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="5 solves")
    args = parser.parse_args(argv)
    count = 5 if args.small else 1000

    droot = grad(cube_root_solve, argnums=(0, 1))
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(count):
        a, b = rng.uniform(0.5, 3.0), rng.uniform(-5.0, 5.0)
        x = cube_root_solve(a, b)
        da, db = droot(a, b)
        slope = 3.0 * x * x + a
        worst = max(worst, abs(da + x / slope), abs(db - 1.0 / slope))
    print(f"{count} solves: the largest difference from the implicit function theorem is "
          f"{worst:.2e}")
    assert worst < 1e-8
    print()
    print(droot.source)


if __name__ == "__main__":
    main()
