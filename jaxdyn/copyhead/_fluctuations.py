"""Gaussian (Laplace) fluctuations of the G-posterior around a mode of the exact action.

The reduced theory is a saddle point: it predicts the modes of p(G | D) ~ exp(-S(G)). The
posterior also fluctuates around them in all L^2 directions of G. With H = d^2 S / dG^2 at a
mode G* (an L^2 x L^2 matrix, formed by autodiff on the exact finite-data action):

- covariance of observables o(G) (e.g. the order parameters):
  Cov(o) ~ J H^{-1} J^T with J = do/dG at G* (precursors: posterior variance rises where an
  eigenvalue of H goes soft, before a continuous transition);
- free energy of a mode: F = -ln int_{basin} exp(-S) ~ S(G*) + (1/2) ln det H + const, so the
  posterior weight of two coexisting modes is exp(-(F_1 - F_2)); with L^2 directions the
  (1/2) ln det H term can outweigh the difference of actions by tens of nats;
- one-loop mean: E[o] ~ o(G*) + (1/2) tr(C d^2o/dG^2) - (1/2) do/dG . C grad_G tr(C H(G)),
  C = H^{-1}: the curvature of o and the shift of the mean by the cubic terms of S.
All three are first-order (one-loop) approximations; they fail where H is not positive
definite (not a mode) and degrade where fluctuations are not small.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics


def action_hessian(
    posterior: CopyHeadPosterior, stats: CopyStatistics, G: Float[ArrayLike, "L L"]
) -> Float[Array, "L2 L2"]:
    """H = d^2 S / dG^2 at G, over the L^2 entries of G (row-major)."""
    G = jnp.asarray(G)
    L = G.shape[-1]
    return jax.hessian(lambda g: posterior.action(g.reshape(L, L), stats))(G.ravel())


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


def mode_free_energy(
    posterior: CopyHeadPosterior, stats: CopyStatistics, G: Float[ArrayLike, "L L"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """(F, smallest Hessian eigenvalue) of the mode G: F = S(G) + (1/2) ln det H.

    F is meaningful only where the smallest eigenvalue is positive (G a local minimum).
    """
    G = jnp.asarray(G)
    lam = jnp.linalg.eigvalsh(action_hessian(posterior, stats, G))
    F = posterior.action(G, stats) + 0.5 * jnp.sum(jnp.log(jnp.abs(lam)))
    return F, lam[0]


def one_loop_mean(
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    G: Float[ArrayLike, "L L"],
    observable: Callable[[Array], Array],
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    """One-loop posterior mean of a scalar ``observable`` around the mode G.

    Returns (o(G*), curvature term (1/2) tr(C d^2o), mean-shift term). Their sum is the
    one-loop E[o]. Costs L^2 third-order directional derivatives of S.
    """
    G = jnp.asarray(G)
    L = G.shape[-1]
    flat_S = lambda g: posterior.action(g.reshape(L, L), stats)
    flat_o = lambda g: observable(g.reshape(L, L))
    g0 = G.ravel()
    lam, U = jnp.linalg.eigh(jax.hessian(flat_S)(g0))
    C = (U / lam) @ U.T

    def trace_CH(g):
        hvp = lambda v: jax.jvp(jax.grad(flat_S), (g,), (v,))[1]
        return jnp.sum(jax.vmap(lambda v, lv: jnp.dot(v, hvp(v)) / lv)(U.T, lam))

    shift = -0.5 * C @ jax.grad(trace_CH)(g0)
    curvature = 0.5 * jnp.sum(jax.hessian(flat_o)(g0) * C)
    return flat_o(g0), curvature, jnp.dot(jax.grad(flat_o)(g0), shift)
