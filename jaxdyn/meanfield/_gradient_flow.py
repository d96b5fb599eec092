"""Gradient-flow structures of attention dynamics (transformer_pde.md, "Gradient-flow structure").

Unnormalised softmax and the twisted Wasserstein distance [derived here, checked in tests]. The
field ``Gamma_mu(x) = V int exp(y^T A x) y dmu(y)`` (:class:`Exponential`) with ``A``
symmetric and invertible is ``Gamma_mu = M grad_x (delta E / delta mu)``,
``E(mu) = 1/2 int int exp(x^T A y) dmu dmu``, ``M = V A^{-1}``. When ``M`` is symmetric and
definite this is a gradient flow of ``+-E`` (ascent for ``M > 0``) in the twisted distance

    d_{A,V}(mu, nu)^2 = min_pi int (x - y)^T |M|^{-1} (x - y) dpi(x, y),

i.e. the Wasserstein distance after the linear map ``|M|^{-1/2}``. Along the flow the
energy-dissipation equality holds in that metric, ``dE/dt = +-|mu'|^2_{d_{A,V}}`` with
``|mu'|^2_{d_{A,V}} = int Gamma^T |M|^{-1} Gamma dmu``, and fails in the plain ``W_2`` unless
``M`` is a multiple of the identity.

Sigmoid attention on the sphere [derived here]: with ``A = beta I``, ``V = I`` the particle
flow is the Riemannian gradient ascent of ``E(x) = 1/(2 n^2) sum_jk softplus(x_k^T A x_j + b)``
scaled by ``n / beta``: ``dE/dt = (beta / n) sum_i |dx_i/dt|^2 >= 0`` (:func:`sigmoid_energy`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._analysis import wasserstein2_exact
from .fields._base import AbstractDotProductHead, AbstractVelocityField, weight_at
from .fields._heads import Exponential, Sigmoid


def twisted_metric(field: Exponential, *, t: float = 0.0) -> Float[np.ndarray, "d d"]:
    """``M = V A^{-1}`` of a field with symmetric invertible ``A`` and ``M`` symmetric definite.

    Raises ``ValueError`` otherwise: the twisted distance is then not a distance.
    """
    A = np.asarray(field.A(t), dtype=np.float64)
    V = np.asarray(weight_at(field.V, t), dtype=np.float64)
    scale = max(float(np.abs(A).max()), 1e-300)
    if not np.allclose(A, A.T, atol=1e-10 * scale):
        raise ValueError("twisted_metric: A = K^T Q / sqrt(d) must be symmetric")
    M = V @ np.linalg.inv(A)
    if not np.allclose(M, M.T, atol=1e-8 * max(float(np.abs(M).max()), 1e-300)):
        raise ValueError("twisted_metric: M = V A^{-1} must be symmetric")
    w = np.linalg.eigvalsh(0.5 * (M + M.T))
    if not (np.all(w > 0) or np.all(w < 0)):
        raise ValueError(f"twisted_metric: M = V A^{{-1}} must be definite, eigenvalues {w}")
    return 0.5 * (M + M.T)


def twisted_wasserstein(
    x: Float[ArrayLike, "n d"], y: Float[ArrayLike, "n d"], metric: Float[ArrayLike, "d d"]
) -> float:
    """``d_{A,V}`` between two uniform empirical measures: the exact ``W_2`` of the clouds mapped
    by ``|M|^{-1/2}`` (``metric = M`` from :func:`twisted_metric`; host-side assignment)."""
    M = np.asarray(metric, dtype=np.float64)
    w, U = np.linalg.eigh(0.5 * (M + M.T))
    if np.any(w == 0):
        raise ValueError("twisted_wasserstein: the metric must be definite")
    P = (U / np.sqrt(np.abs(w))) @ U.T
    return wasserstein2_exact(np.asarray(x) @ P.T, np.asarray(y) @ P.T)


def twisted_speed_squared(
    field: Exponential, tokens: Float[ArrayLike, "n d"], *, t: float = 0.0
) -> Float[Array, ""]:
    """``|mu'|^2_{d_{A,V}} = (1/n) sum_i Gamma_i^T |M|^{-1} Gamma_i``: squared metric speed of the
    particle flow in the twisted distance."""
    x = jnp.asarray(tokens)
    M = jnp.asarray(twisted_metric(field, t=t), x.dtype)
    w, U = jnp.linalg.eigh(M)
    M_inv_abs = (U / jnp.abs(w)) @ U.T
    v = field.velocity(x, x, t=t)
    return jnp.mean(jnp.einsum("ni,ij,nj->n", v, M_inv_abs, v))


def sigmoid_energy(field: Sigmoid, tokens: Float[ArrayLike, "n d"]) -> Float[Array, ""]:
    """``E(mu) = 1/2 int int softplus(y^T A x + b) dmu(x) dmu(y)`` for the tokens' empirical
    measure (``softplus' = sigmoid``): with ``A = beta I``, ``V = I`` the sigmoid particle flow,
    projected on the sphere or not, satisfies ``dE/dt = (beta/n) sum_i |dx_i/dt|^2``."""
    x = jnp.asarray(tokens)
    return 0.5 * jnp.mean(jax.nn.softplus(field.scores(x, x) + field.bias))


def twisted_force_jacobian(
    field: AbstractVelocityField,
    tokens: Float[ArrayLike, "n d"],
    metric: Float[ArrayLike, "d d"],
    *,
    weight_fn: Callable[[Float[Array, "n d"]], Float[Array, " n"]] | None = None,
    t: float = 0.0,
) -> Float[Array, "nd nd"]:
    """Jacobian of the configuration map ``x -> (w_i(x) M^{-1} Gamma_mu(x_i))_i`` (flattened),
    ``mu`` the empirical measure of ``x`` and ``w_i = weight_fn(x)_i`` (``1`` when ``None``).

    The particle flow ``dx_i/dt = Gamma(x_i)`` is a gradient flow ``w_i M^{-1} dx_i/dt =
    n d G / dx_i`` of some function ``G`` of the configuration, in the metric ``w_i M^{-1}``,
    iff this Jacobian is symmetric (it is then ``n`` times the Hessian of ``G``). For the
    unnormalised softmax (:class:`Exponential`, symmetric ``A``, ``M = V A^{-1}`` symmetric)
    it is symmetric with ``w = 1``; for the normalised softmax it is symmetric with
    ``w_i = (k * mu)(x_i)``, the softmax normaliser (:func:`softmax_normaliser`).
    """
    x = jnp.asarray(tokens)
    M_inv = jnp.linalg.inv(jnp.asarray(metric, x.dtype))

    def force(flat):
        y = flat.reshape(x.shape)
        f = field.velocity(y, y, t=t) @ M_inv.T
        if weight_fn is not None:
            f = weight_fn(y)[:, None] * f
        return f.ravel()

    return jax.jacfwd(force)(x.ravel())


def softmax_normaliser(
    field: AbstractDotProductHead, tokens: Float[ArrayLike, "n d"], *, t: float = 0.0
) -> Float[Array, " n"]:
    """``(k * mu)(x_i) = (1/n) sum_j exp(x_j^T A x_i)``: the softmax normaliser at each token.

    The normalised softmax velocity is the unnormalised one divided by it, so the normalised
    flow dissipates ``E(mu) = 1/2 int int exp(x^T A y) dmu dmu`` at the *weighted* twisted speed
    ``int (k * mu)(x) Gamma^T M^{-1} Gamma dmu`` (:func:`weighted_twisted_speed_squared`).
    """
    x = jnp.asarray(tokens)
    return jnp.mean(jnp.exp(field.scores(x, x, t=t)), axis=1)


def weighted_twisted_speed_squared(
    field: AbstractDotProductHead,
    tokens: Float[ArrayLike, "n d"],
    metric: Float[ArrayLike, "d d"],
    *,
    weights: Float[ArrayLike, " n"] | None = None,
    t: float = 0.0,
) -> Float[Array, ""]:
    """``(1/n) sum_i w_i Gamma_i^T M^{-1} Gamma_i`` (signed ``M``; ``w = 1`` when ``None``):
    the squared speed of the particle flow in the metric ``w M^{-1}``."""
    x = jnp.asarray(tokens)
    M_inv = jnp.linalg.inv(jnp.asarray(metric, x.dtype))
    v = field.velocity(x, x, t=t)
    w = jnp.ones(x.shape[0], x.dtype) if weights is None else jnp.asarray(weights, x.dtype)
    return jnp.mean(w * jnp.einsum("ni,ij,nj->n", v, M_inv, v))
