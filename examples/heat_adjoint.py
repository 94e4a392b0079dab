"""The adjoint of an explicit heat-equation solver written with in-place loops.

JAX cannot take this code as it is: its arrays are immutable (``un[i] = ...`` must become
``un = un.at[i].set(...)``), and reverse mode through a Python loop of many time steps keeps
every intermediate array. autodiff-ast reads the loops and the in-place writes, and writes a
backward sweep you can read: the time loop runs backwards, each step's state is saved before
it is overwritten, and the stencil's adjoint is gathered in a loop like the original.

The gradient of the final energy with respect to the initial temperature ``u0`` and the
diffusion coefficient ``c`` is checked against finite differences.

    python examples/heat_adjoint.py            # 200 cells, 500 time steps
    python examples/heat_adjoint.py --small    # 20 cells, 10 time steps
"""

import argparse
import time

import numpy as np

from autodiff_ast import grad


def heat(u0, c, steps):
    u = u0.copy()
    n = len(u)
    for t in range(steps):
        un = u.copy()
        for i in range(1, n - 1):
            un[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u = un
    return np.sum(u * u)


def finite_differences(u0, c, steps, eps=1e-6):
    du0 = np.zeros_like(u0)
    for i in range(len(u0)):
        e = np.zeros_like(u0)
        e[i] = eps
        du0[i] = (heat(u0 + e, c, steps) - heat(u0 - e, c, steps)) / (2 * eps)
    dc = (heat(u0, c + eps, steps) - heat(u0, c - eps, steps)) / (2 * eps)
    return du0, dc


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="20 cells, 10 steps")
    args = parser.parse_args(argv)
    n, steps = (20, 10) if args.small else (200, 500)

    x = np.linspace(0.0, 1.0, n)
    u0 = np.exp(-50.0 * (x - 0.5) ** 2)
    c = 0.2
    dheat = grad(heat, argnums=(0, 1))
    start = time.perf_counter()
    du0, dc = dheat(u0, c, steps)
    seconds = time.perf_counter() - start
    print(f"gradient of heat() with {n} cells and {steps} steps in {seconds:.2f} s "
          "(includes writing the module)")
    fd_u0, fd_c = finite_differences(u0, c, steps if args.small else 20)
    if args.small:
        check_u0, check_c = du0, dc
    else:  # finite differences over 500 steps take minutes: compare on 20 steps
        check_u0, check_c = dheat(u0, c, 20)
    err = max(np.max(np.abs(check_u0 - fd_u0)), abs(check_c - fd_c))
    print(f"d/dc = {dc:.6f}; largest difference from finite differences: {err:.2e}")
    assert err < 1e-5 * max(1.0, np.max(np.abs(fd_u0)), abs(fd_c))
    print()
    print(dheat.source)


if __name__ == "__main__":
    main()
