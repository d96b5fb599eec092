"""Interaction energy, its rate along the flow, geodesic convexity and the Sinkhorn/BW link.

transformer_pde.md, "Gradient-flow structure":

- the softmax PDE is a (twisted) gradient flow of ``E(mu) = 1/2 int int exp(y^T A x) dmu dmu``;
- ``E`` is not geodesically convex for ``V = I, A = -I`` (a negative second variation along a
  Wasserstein geodesic is the witness);
- Sinkhorn attention with symmetric ``A`` restricted to Gaussians is a Bures-Wasserstein
  gradient flow of the entropic self-transport cost.

Monotonicity [derived here, checked in tests]: for softmax attention with ``A`` symmetric,
``dE/dt = (1/n) sum_i u_i^T A V u_i / z_i`` with ``u_i = (1/n) sum_j exp(x_j^T A x_i) x_j`` and
``z_i = (1/n) sum_j exp(x_j^T A x_i) > 0``, so ``E`` decreases along every trajectory when
``A V + V^T A <= 0`` (e.g. ``V = I``, ``A = -I``) and increases when ``A V + V^T A >= 0``.

Sinkhorn sign [derived here, checked in tests]: with the kernel ``exp(y^T A x)`` (cost
``c(x, y) = -x^T A y``, ``eps = 1``), the Gaussian Sinkhorn ODE with ``V = A`` equals the
Bures-Wasserstein gradient *descent* of ``F(Sigma) = 1/2 OT_eps(N(0, Sigma), N(0, Sigma))``;
the page's ``V = -A`` is therefore the descent of ``-F`` (ascent of ``F``).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._analysis import _check_cloud, _check_gaussian, sqrtm_psd
from .fields._base import AbstractBilinearHead, AbstractVelocityField


def _interaction_matrix(attention: AbstractVelocityField, t) -> Float[Array, "d d"]:
    if not isinstance(attention, AbstractBilinearHead):
        raise ValueError(
            f"{type(attention).__name__} has no single interaction matrix A: the interaction "
            "energy is defined for single heads (AbstractBilinearHead: Softmax, L2, Sinkhorn, "
            "Sigmoid, Linear)"
        )
    return attention.A(t)


def interaction_energy(
    attention: AbstractVelocityField,
    tokens: Float[ArrayLike, "n d"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
) -> Float[Array, ""]:
    """``E(mu) = 1/2 int int exp(y^T A x) dmu(x) dmu(y)`` for the empirical measure of ``tokens``.

    ``A = attention.A(t)`` (for softmax ``K^T Q / sqrt(d)``). Evaluated as
    ``1/2 exp(logsumexp_ij(x_j^T A x_i) - 2 log n)`` so large scores do not overflow.
    """
    _check_cloud("tokens", tokens)
    x = jnp.asarray(tokens)
    A = _interaction_matrix(attention, t)
    scores = x @ A.T @ x.T  # [i, j] = x_j^T A x_i ... summed over all pairs, order irrelevant
    n = x.shape[0]
    return 0.5 * jnp.exp(jax.nn.logsumexp(scores) - 2.0 * jnp.log(n))


def energy_rate(
    attention: AbstractVelocityField,
    tokens: Float[ArrayLike, "n d"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
) -> Float[Array, ""]:
    """``dE/dt = sum_i grad_{x_i} E . Gamma_mu(x_i)`` along the particle flow, by a JVP.

    Exact chain rule (forward-mode derivative of :func:`interaction_energy` in the direction
    of the particles' velocities), valid for any variant that has an interaction matrix.
    """
    x = jnp.asarray(tokens)
    v = attention.velocity(x, x, t=t)
    _, rate = jax.jvp(lambda y: interaction_energy(attention, y, t=t), (x,), (v,))
    return rate


def gaussian_interaction_energy(
    attention: AbstractVelocityField,
    mean: Float[ArrayLike, " d"],
    cov: Float[ArrayLike, "d d"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
) -> Float[Array, ""]:
    """``E(N(alpha, Sigma)) = 1/2 E[exp(X^T A Y)]``, ``X, Y`` iid ``N(alpha, Sigma)``, closed form.

    Integrating ``Y`` first gives ``exp(b^T X + 1/2 X^T M X)`` with ``b = A alpha``,
    ``M = A Sigma A^T``; then, with ``P = Sigma^{-1} - M`` and ``h = Sigma^{-1} alpha + b``,
    ``E = 1/2 det(I - Sigma M)^{-1/2} exp(1/2 h^T P^{-1} h - 1/2 alpha^T Sigma^{-1} alpha)``.
    Finite iff ``|Sigma^{1/2} A Sigma^{1/2}|_2 < 1``; returns ``inf`` otherwise. ``Sigma``
    must be positive definite.
    """
    _check_gaussian("mean", mean, "cov", cov)
    alpha, sigma = jnp.asarray(mean), jnp.asarray(cov)
    A = _interaction_matrix(attention, t)
    d = alpha.shape[0]
    eye = jnp.eye(d, dtype=sigma.dtype)
    M = A @ sigma @ A.T
    sigma_inv_alpha = jnp.linalg.solve(sigma, alpha)
    h = sigma_inv_alpha + A @ alpha
    # P^{-1} = (I - Sigma M)^{-1} Sigma, applied by a solve
    core = eye - sigma @ M
    quad = h @ jnp.linalg.solve(core, sigma @ h) - alpha @ sigma_inv_alpha
    sign, logdet = jnp.linalg.slogdet(core)
    S = sqrtm_psd(sigma)
    finite = jnp.linalg.norm(S @ A @ S, ord=2) < 1.0
    value = 0.5 * jnp.exp(0.5 * quad - 0.5 * logdet)
    return jnp.where(finite & (sign > 0), value, jnp.inf)


def geodesic_second_variation(
    energy_fn: Callable[[Float[Array, "n d"]], Float[Array, ""]],
    x0: Float[ArrayLike, "n d"],
    x1: Float[ArrayLike, "n d"],
    s: Float[ArrayLike, ""] = 0.0,
) -> Float[Array, ""]:
    """``d^2/ds^2 E(mu_s)`` along ``mu_s = (1/n) sum_i delta_{(1 - s) x0_i + s x1_i}``.

    When ``x1[i]`` is the optimal-transport image of ``x0[i]`` (see
    :func:`jaxdyn.meanfield.optimal_assignment`, or a Bures-Wasserstein map for Gaussian
    samples), ``mu_s`` is the W2 geodesic, and a negative value at some ``s`` proves ``E`` is
    not geodesically convex (transformer_pde.md, "Gradient-flow structure"). Forward-over-
    forward differentiation, exact.
    """
    _check_cloud("x0", x0)
    if jnp.shape(x0) != jnp.shape(x1):
        raise ValueError(
            f"x0 and x1 must have the same shape, got {jnp.shape(x0)} and {jnp.shape(x1)}"
        )
    x0, x1 = jnp.asarray(x0), jnp.asarray(x1)

    def along(r):
        return energy_fn((1.0 - r) * x0 + r * x1)

    def first(r):
        return jax.jvp(along, (r,), (jnp.ones_like(r),))[1]

    s = jnp.asarray(s, x0.dtype)
    return jax.jvp(first, (s,), (jnp.ones_like(s),))[1]


def bures_wasserstein_geodesic(
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    mean1: Float[ArrayLike, " d"],
    cov1: Float[ArrayLike, "d d"],
    s: Float[ArrayLike, ""],
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """Point at ``s`` in [0, 1] of the W2 geodesic between two Gaussians (``cov0`` definite).

    ``alpha_s = (1 - s) alpha_0 + s alpha_1``, ``Sigma_s = T_s Sigma_0 T_s`` with
    ``T_s = (1 - s) I + s T`` and ``T`` the optimal map (McCann interpolation).
    """
    from ._analysis import bures_wasserstein_map

    T = bures_wasserstein_map(cov0, cov1)
    d = T.shape[0]
    Ts = (1.0 - s) * jnp.eye(d, dtype=T.dtype) + s * T
    mean = (1.0 - s) * jnp.asarray(mean0) + s * jnp.asarray(mean1)
    return mean, Ts @ jnp.asarray(cov0) @ Ts


def _phi(At: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """``phi(At) = 2 At (I + (I + 4 At^T At)^{1/2})^{-1}`` (transformer_pde.md, Sinkhorn row)."""
    eye = jnp.eye(At.shape[0], dtype=At.dtype)
    return 2.0 * At @ jnp.linalg.inv(eye + sqrtm_psd(eye + 4.0 * At.T @ At))


def gaussian_sinkhorn_energy(
    A: Float[ArrayLike, "d d"], cov: Float[ArrayLike, "d d"]
) -> Float[Array, ""]:
    """``F(Sigma) = 1/2 OT_eps(N(0, Sigma), N(0, Sigma))``, cost ``-x^T A y``, ``eps = 1``.

    Among Gaussian couplings with cross-covariance ``E[x y^T] = S M S`` (``S = Sigma^{1/2}``),
    ``OT = min_M -tr(At M) - 1/2 log det(I - M M^T)`` with ``At = S A S`` (the KL term is the
    mutual information of the coupling). The minimiser is ``M = phi(At)^T``, the same ``phi``
    as in the Sinkhorn Gaussian ODE; the entropic coupling of two Gaussians is Gaussian, so
    this is the exact entropic OT value (up to the additive constant of the KL convention).
    """
    A, sigma = jnp.asarray(A), jnp.asarray(cov)
    S = sqrtm_psd(sigma)
    At = S @ A @ S
    M = _phi(At).T
    eye = jnp.eye(A.shape[0], dtype=sigma.dtype)
    ot = -jnp.trace(At @ M) - 0.5 * jnp.linalg.slogdet(eye - M @ M.T)[1]
    return 0.5 * ot


def bures_wasserstein_gradient(
    energy_fn: Callable[[Float[Array, "d d"]], Float[Array, ""]], cov: Float[ArrayLike, "d d"]
) -> Float[Array, "d d"]:
    """Bures-Wasserstein gradient flow velocity ``dSigma/dt = -2 (G Sigma + Sigma G)``.

    ``G`` is the symmetric Euclidean gradient of ``energy_fn`` at ``cov``: the W2 gradient of a
    functional of centred Gaussians is the linear field ``x -> 2 G x``.
    """
    sigma = jnp.asarray(cov)
    G = jax.grad(lambda c: energy_fn(0.5 * (c + c.T)))(sigma)
    G = 0.5 * (G + G.T)
    return -2.0 * (G @ sigma + sigma @ G)


def bures_wasserstein_step(
    energy_fn: Callable[[Float[Array, "d d"]], Float[Array, ""]],
    cov: Float[ArrayLike, "d d"],
    step: Float[ArrayLike, ""],
) -> Float[Array, "d d"]:
    """One Bures-Wasserstein gradient step (exponential map), ``(I - 2 tau G) Sigma (I - 2 tau G)``.

    ``G`` is the symmetric Euclidean gradient of ``energy_fn`` at ``cov``; ``step`` is ``tau``.
    """
    sigma = jnp.asarray(cov)
    G = jax.grad(lambda c: energy_fn(0.5 * (c + c.T)))(sigma)
    G = 0.5 * (G + G.T)
    T = jnp.eye(sigma.shape[0], dtype=sigma.dtype) - 2.0 * step * G
    return T @ sigma @ T
