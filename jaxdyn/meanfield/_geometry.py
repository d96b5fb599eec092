"""The two geometries of the Transformer PDE, each one object (transformer_pde.md, "Mean-field
limit and stability" and "Gradient-flow structure").

- :class:`BuresWasserstein`: the Wasserstein-2 geometry restricted to Gaussians (distance,
  optimal map, McCann geodesic, gradient and gradient step of a covariance functional), with a
  covariance-only and a relative form of the distance (a growing mean otherwise dominates it).
- :class:`TwistedWasserstein`: the distance ``d_{A,V}``, the Wasserstein distance after the
  linear map ``|M|^{-1/2}``, ``M = V A^{-1}``, in which the unnormalised softmax PDE is a
  gradient flow (its metric speed, the Jacobian test of a gradient structure).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._analysis import bures_wasserstein as _bw_distance, bures_wasserstein_map as _bw_map
from ._energy import (
    bures_wasserstein_geodesic as _bw_geodesic,
    bures_wasserstein_gradient as _bw_gradient,
    bures_wasserstein_step as _bw_step,
)
from ._gradient_flow import (
    twisted_force_jacobian as _force_jacobian,
    twisted_metric as _twisted_metric,
    twisted_wasserstein as _twisted_distance,
    weighted_twisted_speed_squared as _signed_speed_squared,
)
from .fields._base import AbstractVelocityField

CovarianceFunctional = Callable[[Float[Array, "d d"]], Float[Array, ""]]


class BuresWasserstein(eqx.Module):
    """Wasserstein-2 geometry of Gaussians ``N(m, S)`` (Bures-Wasserstein).

    ``W_2^2 = |m_1 - m_2|^2 + tr S_1 + tr S_2 - 2 tr (S_1^{1/2} S_2 S_1^{1/2})^{1/2}``.

    Attributes:
        covariance_only: drop the mean term ``|m_1 - m_2|^2`` (the distance between the
            centred Gaussians ``N(0, S_1)``, ``N(0, S_2)``): what the covariance ODE alone
            controls, and what a growing mean otherwise swamps.
        relative: divide the distance by the second Gaussian's distance to the Dirac at 0,
            ``sqrt(|m_2|^2 + tr S_2)`` (``sqrt(tr S_2)`` with ``covariance_only``): a
            scale-free error for solutions whose size grows or shrinks.
    """

    covariance_only: bool = eqx.field(static=True, default=False)
    relative: bool = eqx.field(static=True, default=False)

    def distance(
        self,
        mean1: Float[ArrayLike, " d"],
        cov1: Float[ArrayLike, "d d"],
        mean2: Float[ArrayLike, " d"],
        cov2: Float[ArrayLike, "d d"],
    ) -> Float[Array, ""]:
        """``W_2(N(m_1, S_1), N(m_2, S_2))`` in this object's form (see the attributes)."""
        if self.covariance_only:
            mean1 = jnp.zeros(jnp.shape(mean1), jnp.result_type(mean1, float))
            mean2 = jnp.zeros_like(mean1)
        dist = _bw_distance(mean1, cov1, mean2, cov2)
        if not self.relative:
            return dist
        scale = jnp.sqrt(jnp.sum(jnp.asarray(mean2) ** 2) + jnp.trace(jnp.asarray(cov2)))
        return dist / scale

    def map(
        self, cov0: Float[ArrayLike, "d d"], cov1: Float[ArrayLike, "d d"]
    ) -> Float[Array, "d d"]:
        """Linear optimal map between centred Gaussians, ``T S_0 T = S_1``:
        ``T = S_0^{-1/2} (S_0^{1/2} S_1 S_0^{1/2})^{1/2} S_0^{-1/2}`` (``S_0`` definite)."""
        return _bw_map(cov0, cov1)

    def geodesic(
        self,
        mean0: Float[ArrayLike, " d"],
        cov0: Float[ArrayLike, "d d"],
        mean1: Float[ArrayLike, " d"],
        cov1: Float[ArrayLike, "d d"],
        s: Float[ArrayLike, ""],
    ) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
        """Point at ``s`` in [0, 1] of the W2 geodesic (McCann interpolation):
        ``alpha_s = (1 - s) alpha_0 + s alpha_1``, ``Sigma_s = T_s Sigma_0 T_s``,
        ``T_s = (1 - s) I + s T``."""
        return _bw_geodesic(mean0, cov0, mean1, cov1, s)

    def gradient(
        self, energy: CovarianceFunctional, cov: Float[ArrayLike, "d d"]
    ) -> Float[Array, "d d"]:
        """Gradient-flow velocity ``dSigma/dt = -2 (G Sigma + Sigma G)``, ``G`` the symmetric
        Euclidean gradient of ``energy`` at ``cov`` (the W2 gradient is the field
        ``x -> 2 G x``)."""
        return _bw_gradient(energy, cov)

    def step(
        self, energy: CovarianceFunctional, cov: Float[ArrayLike, "d d"], step: Float[ArrayLike, ""]
    ) -> Float[Array, "d d"]:
        """One gradient step along the exponential map, ``(I - 2 tau G) Sigma (I - 2 tau G)``."""
        return _bw_step(energy, cov, step)


class TwistedWasserstein(eqx.Module):
    """The twisted distance ``d_{A,V}(mu, nu)^2 = min_pi int (x - y)^T |M|^{-1} (x - y) dpi``.

    For the unnormalised softmax (:class:`jaxdyn.meanfield.fields.Exponential`) with ``A``
    symmetric and ``M = V A^{-1}`` symmetric definite, the particle flow is a gradient flow of
    ``+-E(mu) = +-1/2 int int exp(x^T A y) dmu dmu`` in this distance
    (``dE/dt = +-|mu'|^2_{d_{A,V}}``). Build it with :meth:`of` from such a field, or from any
    symmetric definite ``metric = M``.

    Attributes:
        metric: the symmetric definite matrix ``M``.
    """

    metric: Float[Array, "d d"] = eqx.field(converter=jnp.asarray)

    def __check_init__(self):
        if self.metric.ndim != 2 or self.metric.shape[0] != self.metric.shape[1]:
            raise ValueError(f"TwistedWasserstein: metric must be square, got {self.metric.shape}")

    @classmethod
    def of(cls, field: AbstractVelocityField, *, t: float = 0.0) -> TwistedWasserstein:
        """The geometry of a field with symmetric invertible ``A`` and ``M = V A^{-1}`` symmetric
        definite; raises ``ValueError`` otherwise (the twisted distance is then no distance)."""
        return cls(metric=_twisted_metric(field, t=t))

    def distance(self, x: Float[ArrayLike, "n d"], y: Float[ArrayLike, "n d"]) -> float:
        """``d_{A,V}`` between two uniform empirical measures of the same size: the exact ``W_2``
        of the clouds mapped by ``|M|^{-1/2}`` (host-side optimal assignment)."""
        return _twisted_distance(x, y, np.asarray(self.metric))

    def speed_squared(
        self,
        field: AbstractVelocityField,
        tokens: Float[ArrayLike, "n d"],
        *,
        weights: Float[ArrayLike, " n"] | None = None,
        signed: bool = False,
        t: float = 0.0,
    ) -> Float[Array, ""]:
        """Squared metric speed of the particle flow, ``(1/n) sum_i w_i Gamma_i^T |M|^{-1} Gamma_i``
        (``M^{-1}`` itself with ``signed=True``; ``w = 1`` when ``weights`` is None).

        With the softmax normaliser as ``weights`` and ``signed=True`` this is the rate at which
        the normalised softmax flow dissipates ``E`` (transformer_pde.md, "Gradient-flow
        structure")."""
        if signed or weights is not None:
            M = self.metric
            if not signed:
                w, U = jnp.linalg.eigh(0.5 * (M + M.T))
                M = (U * jnp.abs(w)) @ U.T
            return _signed_speed_squared(field, tokens, M, weights=weights, t=t)
        x = jnp.asarray(tokens)
        w, U = jnp.linalg.eigh(0.5 * (self.metric + self.metric.T).astype(x.dtype))
        v = field.velocity(x, x, t=t)
        return jnp.mean(jnp.einsum("ni,ij,nj->n", v, (U / jnp.abs(w)) @ U.T, v))

    def force_jacobian(
        self,
        field: AbstractVelocityField,
        tokens: Float[ArrayLike, "n d"],
        *,
        weight_fn: Callable[[Float[Array, "n d"]], Float[Array, " n"]] | None = None,
        t: float = 0.0,
    ) -> Float[Array, "nd nd"]:
        """Jacobian of ``x -> (w_i(x) M^{-1} Gamma_mu(x_i))_i``: the particle flow is a gradient
        flow in the metric ``w_i M^{-1}`` iff it is symmetric."""
        return _force_jacobian(field, tokens, self.metric, weight_fn=weight_fn, t=t)
