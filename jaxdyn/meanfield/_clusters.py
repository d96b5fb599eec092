"""Clusters of tokens (transformer_pde.md, "Particle pictures"): single-linkage counts and the
smooth "one cluster has formed" event condition."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from ._analysis import _check_cloud, empirical_mean_cov


def detect_clusters(
    x: Float[ArrayLike, "n d"], radius: float | Float[ArrayLike, ""]
) -> tuple[Int[Array, " n"], Int[Array, ""]]:
    """Single-linkage clusters: connected components of the graph ``|x_i - x_j| <= radius``.

    Returns ``(labels, n_clusters)``; ``labels[i]`` is the smallest particle index in the
    component of ``x_i``. Computed by min-label propagation with pointer jumping inside a
    ``lax.while_loop`` (at most ``n`` rounds), so it is jit/vmap-able and ``radius`` may be
    traced. A NaN particle is isolated (its own cluster).
    """
    _check_cloud("x", x)
    x = jnp.asarray(x)
    n = x.shape[0]
    sq = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    adjacent = sq <= jnp.asarray(radius, x.dtype) ** 2
    adjacent = adjacent | jnp.eye(n, dtype=bool)
    labels0 = jnp.arange(n, dtype=jnp.int32)

    def propagate(labels):
        new = jnp.min(jnp.where(adjacent, labels[None, :], n), axis=1).astype(jnp.int32)
        return new[new]  # pointer jumping: follow the label's own label

    def cond(state):
        labels, changed, it = state
        return changed & (it < n)

    def body(state):
        labels, _, it = state
        new = propagate(labels)
        return new, jnp.any(new != labels), it + 1

    labels, _, _ = jax.lax.while_loop(cond, body, (labels0, jnp.array(True), jnp.array(0)))
    n_clusters = jnp.sum(labels == labels0).astype(jnp.int32)
    return labels, n_clusters


def single_cluster_condition(
    radius: float | Float[ArrayLike, ""],
) -> Callable[[Float[Array, ""], Float[Array, "n d"]], Float[Array, ""]]:
    """Event condition "the tokens have formed one cluster of RMS radius ``radius``":
    ``g(t, x) = radius^2 - (1/n) sum_i |x_i - mean(x)|^2`` (``radius^2 - tr Cov(mu_t)``).

    Negative while the tokens are spread, crossing zero when their RMS distance to their mean
    falls to ``radius``; smooth in the particles, so the crossing time (``t_event`` of
    :func:`jaxdyn.meanfield.simulate_particles` with ``events={"one_cluster": ...}``) is
    differentiable. ``radius`` may be traced.
    """

    def condition(t, x):
        return jnp.asarray(radius, x.dtype) ** 2 - jnp.trace(empirical_mean_cov(x)[1])

    return condition
