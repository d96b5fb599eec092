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

import equinox as eqx
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


@eqx.filter_jit
def _laplace_variance(posterior, stats, G, index: int):
    from ._order import order_parameters

    observable = lambda g: jnp.stack(order_parameters(posterior.attention(g)))[index][None]
    return laplace_covariance(posterior, stats, G, observable)[0, 0]


def precursor_fluctuations(posterior, L, V, P, seeds, ok, samples, modes, mode_G, index, P_max):
    """Per chain (P, dataset seed ``seeds``; the dataset is :func:`padded_statistics` of the
    first key of ``jax.random.split(jax.random.key(seed), 3)``, as a sweep member's): the mean
    squared deviation of the ``samples`` of order parameter ``index`` (0: c_1, 1: c_G) from
    the mode, and the Laplace variance at that mode (``mode_G``) on the same data.

    Odd heads (A(-G) = -A(G)): the symmetric state G = 0 is exactly stationary and samples are
    reported modulo the mirror, so the fluctuation is E[o^2] about o = 0 (mirror invariant)."""
    import numpy as np

    from ._heads import AbstractOddCopyHead
    from ._task import padded_statistics

    odd = isinstance(posterior.head, AbstractOddCopyHead)
    ref = np.zeros(P.shape) if odd else modes
    dev = np.nanmean((samples - ref[:, None]) ** 2, axis=1)
    lap = np.full(P.shape, np.nan)
    for i in np.flatnonzero(ok):
        k_data = jax.random.split(jax.random.key(int(seeds[i])), 3)[0]
        stats, _ = padded_statistics(k_data, L, V, P[i], P_max)
        G = np.zeros((L, L)) if odd else mode_G[i]
        lap[i] = float(_laplace_variance(posterior, stats, jnp.asarray(G), index))
    return dev, lap
