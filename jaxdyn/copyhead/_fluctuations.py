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
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._heads import AbstractOddCopyHead
from ._order import order_parameters
from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics, padded_statistics


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
    observable = lambda g: jnp.stack(order_parameters(posterior.attention(g)))[index][None]
    return laplace_covariance(posterior, stats, G, observable)[0, 0]


def precursors(posterior, L: int, V: int, P, seeds, ok, outputs: dict, key: str, P_max: int, P_t):
    """The precursor chains (MALA from the uniform state at P below P_t, one dataset per
    ``seeds`` value: :func:`padded_statistics` of the first key of
    ``jax.random.split(jax.random.key(seed), 3)``, as a sweep member's) against the Laplace
    variance of the order parameter ``key`` at the mode reached from each chain.

    Per chain: the mean squared deviation of the samples ``outputs["mala_<key>"]`` from the
    mode ``outputs["mode_<key>"]`` and the Laplace variance at ``outputs["mode_G"]`` on the
    same data. Odd heads (A(-G) = -A(G)): G = 0 is exactly stationary and samples are reported
    modulo the mirror, so both are taken about 0 (mirror invariant). Returns per P of the
    sorted ``Ps``: the mean variance and Laplace variance, per (dataset, P) their ratio and
    the variance, and the ln rise of the variance from the lowest to the highest P: measured
    per dataset, Laplace's, and a mean-field divergence 1 / (P_t - P)'s."""
    index = 1 if key == "c_G" else 0
    odd = isinstance(posterior.head, AbstractOddCopyHead)
    ref = np.zeros(P.shape) if odd else outputs[f"mode_{key}"]
    dev = np.nanmean((outputs[f"mala_{key}"] - ref[:, None]) ** 2, axis=1)
    lap = np.full(P.shape, np.nan)
    for i in np.flatnonzero(ok):
        k_data = jax.random.split(jax.random.key(int(seeds[i])), 3)[0]
        stats, _ = padded_statistics(k_data, L, V, P[i], P_max)
        G = np.zeros((L, L)) if odd else outputs["mode_G"][i]
        lap[i] = float(_laplace_variance(posterior, stats, jnp.asarray(G), index))
    Ps = np.unique(P)
    by_dataset = lambda v: np.array(
        [[np.nanmean(v[(P == p) & (seeds == s)]) for p in Ps] for s in np.unique(seeds)]
    )
    laplace = np.array([np.nanmean(lap[P == p]) for p in Ps])
    variance = by_dataset(dev)
    f0, f1 = Ps[0] / P_t, Ps[-1] / P_t
    return {
        "P": Ps,
        "variance": np.array([np.nanmean(dev[P == p]) for p in Ps]),
        "laplace": laplace,
        "ratio": by_dataset(dev / lap),
        "rise": np.log(variance[:, -1] / variance[:, 0]),
        "laplace_rise": float(np.log(laplace[-1] / laplace[0])),
        "divergent_rise": float(np.log((1 - f0) / (1 - f1))),
    }
