"""Finite-time blow-up of softmax Gaussians and the bounded growth of L2 (transformer_pde.md,
"Closed forms to test against").

Softmax with ``V = I`` blows up at ``t* = 1 / lambda_max(Sigma_0^{1/2} (A + A^T) Sigma_0^{1/2})``
iff ``A + A^T`` has a positive eigenvalue on the range of ``Sigma_0``
(:func:`jaxdyn.meanfield.blowup_time`). L2 never blows up: [derived]
``dSigma/dt = 2 V (Sigma^{-1} + 2 K^T K)^{-1} A Sigma + transpose`` and
``(Sigma^{-1} + 2 K^T K)^{-1} <= (2 K^T K)^{-1}`` give ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}`` with
``r = 2 |V|_2 |A|_2 / lambda_min(K^T K)`` (:func:`l2_growth_rate`).

A finite particle system cannot blow up [derived]: with ``V = I`` each velocity
``sum_j w_ij x_j`` is a convex combination of the tokens, so ``R(t) = max_j |x_j(t)|`` obeys
``R' <= R`` and ``|x_i(t)| <= R(0) e^t``; the particles' covariance then has
``lambda_max <= R(0)^2 e^{2t}`` while their own Gaussian's tends to infinity at its ``t*``
(:func:`near_blowup_lag`).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._analysis import empirical_mean_cov
from ._closed_forms import blowup_time, softmax_identity_covariance


def near_blowup_lag(
    x0: Float[ArrayLike, "n d"],
    covs: Float[ArrayLike, "s d d"],
    A: Float[ArrayLike, "d d"],
    ts: Float[ArrayLike, " s"],
) -> tuple[Float[Array, " s"], Float[Array, " s"]]:
    """How far particles lag their own Gaussian before a softmax (``V = I``) blow-up.

    ``ratio[k] = lambda_max(covs[k]) / lambda_max(Sigma_own(ts[k]))``, where ``covs[k]`` is the
    particles' covariance at ``ts[k]`` and ``Sigma_own(t) = (C_0^{-1} - t (A + A^T))^{-1}`` the
    Gaussian ODE started from the particles' own covariance ``C_0`` (no sampling error: a ratio
    below 1 is the particles falling behind their Gaussian). ``bound[k]`` is the extreme-value
    bound on that ratio, ``max_j |x_j(0)|^2 e^{2 t} / lambda_max(Sigma_own(t))`` (module
    docstring; the covariance's top eigenvalue is at most the mean of ``|x_i|^2``). Both are
    ``nan`` at or after the own Gaussian's blow-up time.
    """
    x0 = jnp.asarray(x0)
    _, cov0 = empirical_mean_cov(x0)
    ts = jnp.asarray(ts, cov0.dtype)
    t_own = blowup_time(cov0, A)
    own = jnp.stack([softmax_identity_covariance(cov0, A, t) for t in ts])
    top_own = jnp.linalg.eigvalsh(own)[:, -1]
    top = jnp.linalg.eigvalsh(jnp.asarray(covs))[:, -1]
    radius2 = jnp.max(jnp.sum(x0**2, axis=-1))
    valid = ts < t_own
    ratio = jnp.where(valid, top / top_own, jnp.nan)
    bound = jnp.where(valid, radius2 * jnp.exp(2.0 * ts) / top_own, jnp.nan)
    return ratio, bound


def l2_growth_rate(A: np.ndarray, K: np.ndarray, V: np.ndarray) -> float:
    """``r = 2 |V|_2 |A|_2 / lambda_min(K^T K)``: L2 Gaussians obey
    ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}`` (module docstring). ``inf`` if ``K^T K`` is
    singular (the bound says nothing then)."""
    smallest = float(np.linalg.eigvalsh(K.T @ K)[0])
    if smallest <= 0:
        return float("inf")
    return 2.0 * float(np.linalg.norm(V, 2)) * float(np.linalg.norm(A, 2)) / smallest


def rank_one_blowup_bound(cov0, A, t_star, trace) -> np.ndarray:
    """``lambda_2 / lambda_1 <= d / (mu_2 tr Sigma)`` before a softmax ``V = I`` blow-up.

    ``Sigma(t)^{-1} = Sigma_0^{-1} - t (A + A^T)`` decreases to ``M* = Sigma_0^{-1} - t* (A +
    A^T)``, whose smallest eigenvalue is 0 and second ``mu_2``, so ``lambda_2(Sigma(t)) <= 1 /
    mu_2`` while ``lambda_1 >= tr / d``. Batched over a leading axis."""
    cov0 = np.asarray(cov0, float)
    A = np.asarray(A, float)
    d = cov0.shape[-1]
    sym = A + np.swapaxes(A, -1, -2)
    m_star = np.linalg.inv(cov0) - np.asarray(t_star, float)[..., None, None] * sym
    mu_2 = np.linalg.eigvalsh(m_star)[..., 1]
    return d / (mu_2 * np.asarray(trace, float))


def l2_growth_excess(ts, traces, cov0, rates) -> np.ndarray:
    """``log tr Sigma(t) - log(d |Sigma_0|_2) - r t`` per save (``<= 0`` is the L2 bound
    ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}``, :func:`l2_growth_rate`); saves
    after a solve's end (``ts`` not finite) give ``-inf``, a non-finite trace ``+inf``."""
    ts, traces = np.asarray(ts, float), np.asarray(traces, float)
    cov0 = np.asarray(cov0, float)
    d = cov0.shape[-1]
    start = np.log(d * np.linalg.norm(cov0, 2, axis=(-2, -1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = np.log(traces) - start[..., None] - np.asarray(rates, float)[..., None] * ts
    excess = np.where(np.isfinite(excess), excess, np.inf)
    return np.where(np.isfinite(ts), excess, -np.inf)
