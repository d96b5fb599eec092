"""Closed forms of the softmax Gaussian ODE with V = I (transformer_pde.md, "Closed forms to
test against").

With ``V = I`` the softmax covariance ODE ``d Sigma/dt = Sigma A Sigma + Sigma A^T Sigma`` is a
matrix Riccati equation whose inverse evolves linearly:
``d Sigma^{-1}/dt = -(A + A^T)``, so ``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}``.

Each function is jitted: called eagerly (one problem at a time, as the criteria and reports
do) it runs one compiled program per shape rather than one per operation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int


def _sym(M):
    return 0.5 * (M + M.T)


def _sym_sqrt(S):
    w, U = jnp.linalg.eigh(_sym(S))
    return (U * jnp.sqrt(jnp.clip(w, 0.0))) @ U.T


@jax.jit
def softmax_identity_covariance(
    cov0: Float[ArrayLike, "d d"], A: Float[ArrayLike, "d d"], t: Float[ArrayLike, ""]
) -> Float[Array, "d d"]:
    """``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}`` for softmax attention with ``V = I``.

    Evaluated as ``(I - t Sigma_0 (A + A^T))^{-1} Sigma_0``, which needs no inverse of
    ``Sigma_0`` (valid for singular ``Sigma_0``) and is finite for ``t < blowup_time``.
    """
    cov0 = jnp.asarray(cov0)
    A = jnp.asarray(A)
    S = A + A.T
    eye = jnp.eye(cov0.shape[0], dtype=cov0.dtype)
    return _sym(jnp.linalg.solve(eye - t * cov0 @ S, cov0))


@jax.jit
def blowup_time(cov0: Float[ArrayLike, "d d"], A: Float[ArrayLike, "d d"]) -> Float[Array, ""]:
    """``t* = 1 / lambda_max(Sigma_0^{1/2} (A + A^T) Sigma_0^{1/2})`` (softmax, ``V = I``).

    ``inf`` when that eigenvalue is ``<= 0`` (relative to round-off; no finite-time blow-up:
    ``A + A^T`` has no
    positive eigenvalue on the range of ``Sigma_0``).
    """
    cov0 = jnp.asarray(cov0)
    A = jnp.asarray(A)
    S = _sym_sqrt(cov0)
    eig = jnp.linalg.eigvalsh(_sym(S @ (A + A.T) @ S))
    lam = eig[-1]
    # Round-off of a zero eigenvalue (e.g. rank-deficient A) must not read as blow-up at 1e16.
    positive = lam > 1e-12 * jnp.max(jnp.abs(eig))
    return jnp.where(positive, 1.0 / jnp.where(positive, lam, 1.0), jnp.inf)


@jax.jit
def low_rank_limit(
    cov0: Float[ArrayLike, "d d"],
    A: Float[ArrayLike, "d d"],
    *,
    kernel_tol: float | Float[ArrayLike, ""] = 1e-10,
) -> Float[Array, "d d"]:
    """``lim_{t -> inf} Sigma(t) = N (N^T Sigma_0^{-1} N)^{-1} N^T`` for ``A + A^T <= 0``,
    ``V = I``.

    ``N`` is an orthonormal basis of ``ker(A + A^T)`` (eigenvalues below ``kernel_tol`` times
    the largest magnitude); the limit is zero if ``A + A^T < 0``. Returns NaNs if ``A + A^T``
    has a positive eigenvalue (the flow blows up instead). Shape-static (jit/vmap-able): the
    kernel is selected by a mask rather than by slicing.
    """
    cov0 = jnp.asarray(cov0)
    A = jnp.asarray(A)
    lam, U = jnp.linalg.eigh(_sym(A + A.T))
    scale = jnp.maximum(jnp.max(jnp.abs(lam)), 1e-300)
    in_kernel = jnp.abs(lam) <= kernel_tol * scale
    positive = jnp.any(lam > kernel_tol * scale)
    # M = U^T Sigma_0^{-1} U restricted to the kernel block; identity elsewhere so it inverts.
    M = U.T @ jnp.linalg.solve(cov0, U)
    block = in_kernel[:, None] & in_kernel[None, :]
    eye = jnp.eye(cov0.shape[0], dtype=cov0.dtype)
    Z = jnp.where(block, jnp.linalg.inv(jnp.where(block, M, eye)), 0.0)
    limit = _sym(U @ Z @ U.T)
    return jnp.where(positive, jnp.nan, limit)


@jax.jit
def limiting_rank(
    cov: Float[ArrayLike, "d d"], threshold: float | Float[ArrayLike, ""] = 0.1
) -> Int[Array, ""]:
    """Number of eigenvalues of ``cov`` above ``threshold`` (the paper's histograms use 0.1)."""
    return jnp.sum(jnp.linalg.eigvalsh(_sym(jnp.asarray(cov))) > threshold).astype(jnp.int32)
