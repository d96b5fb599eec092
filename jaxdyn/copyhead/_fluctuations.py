"""Gaussian (Laplace) fluctuations of the G-posterior around a mode of the exact action.

The reduced theory is a saddle point: it predicts the modes of p(G | D) ~ exp(-S(G)). The
posterior also fluctuates around them in all L^2 directions of G. With H = d^2 S / dG^2 at a
mode G* of the exact finite-data action, the covariance of observables o(G) (e.g. the order
parameters) is Cov(o) ~ J H^{-1} J^T with J = do/dG at G*: the posterior variance rises where
an eigenvalue of H goes soft, before a continuous transition (precursors). A first-order
approximation: it fails where H is not positive definite (not a mode) and degrades where the
fluctuations are not small.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics


def laplace_covariance(
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    G: Float[ArrayLike, "L L"],
    observable: Callable[[Array], Array],
    *,
    tol: float = 1e-10,
    maxiter: int = 2000,
) -> Float[Array, "k k"]:
    """Laplace covariance J H^{-1} J^T of ``observable(G) -> (k,)`` at the mode G.

    Matrix-free: H^{-1} J^T by conjugate gradients on Hessian-vector products of S (H is
    positive definite at a mode), so the cost is a few hundred gradients, not an L^2 x L^2
    matrix.
    """
    G = jnp.asarray(G)
    L = G.shape[-1]
    g0 = G.ravel()
    grad = jax.grad(lambda g: posterior.action(g.reshape(L, L), stats))
    hvp = lambda v: jax.jvp(grad, (g0,), (v,))[1]
    J = jax.jacobian(lambda g: observable(g.reshape(L, L)))(g0)
    solve = lambda b: jax.scipy.sparse.linalg.cg(hvp, b, tol=tol, maxiter=maxiter)[0]
    return J @ jax.vmap(solve)(J).T
