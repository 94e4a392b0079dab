"""One check the rule tests share: a Hessian against central differences of the gradient."""

from __future__ import annotations

import numpy as np

import autodiff_ast as ad


def assert_hessian_matches_gradient_differences(f, args, rng, eps=1e-6):
    """ad.hessian(f) (every rule's batching rule, differentiated) times a random direction
    against central differences of ad.grad(f) along it, for every argument."""
    argnums = tuple(range(len(args)))
    hess = ad.hessian(f, argnums=argnums)(*args)
    step = [rng.standard_normal(np.shape(a)) for a in args]
    grad = ad.grad(f, argnums=argnums)
    up = grad(*[a + eps * d for a, d in zip(args, step)])
    down = grad(*[a - eps * d for a, d in zip(args, step)])
    for i in range(len(args)):
        want = (np.asarray(up[i]) - np.asarray(down[i])) / (2 * eps)
        got = sum(np.tensordot(hess[i][j], step[j], axes=np.ndim(step[j]))
                  for j in range(len(args)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
