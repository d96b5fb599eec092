"""Exact Bayesian action of the copy head: W integrated out (copy_head.md, "Exact action").

With kappa = sigma_w^2 / V, M(A) = sum_mu X^T A^T A X and B(A) = sum_mu X^T A^T Y (V x V),

    S(G) = ||G||^2 / (2 sigma_g^2) + (V/2) ln det(I + (kappa/T) M)
           - (1/2T) tr[B^T (T/kappa I + M)^{-1} B]                      (+ const),

    const = ||Y||^2 / 2T + (V P L / 2) ln(2 pi T) + (L^2 / 2) ln(2 pi sigma_g^2),

so that p(G | D) ~ exp(-S(G)). Only V x V matrices are formed (never the PL x PL kernel);
ln det and the quadratic form come from one Cholesky factor of T/kappa I + M (no inverse).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._network import ATTENTIONS, copy_head
from ._task import CopyStatistics, copy_statistics, supervised_positions


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _all(x, predicate) -> bool:
    # numpy, not jnp: validation must not create tracers under make_jaxpr / jit.
    return bool(np.all(predicate(np.asarray(x))))


def validate_hyperparameters(
    *, attention: str = "softmax", temperature=1.0, sigma_w2=1.0, sigma_g2=1.0, alpha=1.0
) -> None:
    """One-line ValueErrors for an unknown attention name, non-positive T or sigma^2."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    for name, value in (
        ("temperature", temperature),
        ("sigma_w2", sigma_w2),
        ("sigma_g2", sigma_g2),
    ):
        if _is_concrete(value) and not _all(value, lambda v: v > 0):
            raise ValueError(f"{name} must be > 0, got {value}")
    if _is_concrete(alpha) and not _all(alpha, lambda v: v >= 0):
        raise ValueError(f"alpha must be >= 0, got {alpha}")


def attention_matrix(
    G: Float[ArrayLike, "L L"],
    *,
    attention: str = "softmax",
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, "L L"]:
    """A(G) with the rows of unsupervised positions zeroed (position 1 when not ``cyclic``)."""
    A = copy_head(attention, alpha=alpha, causal=causal).weights(G)
    rows = supervised_positions(A.shape[-1], cyclic=cyclic)
    return jnp.where(rows[:, None], A, 0.0)


def action_from_moments(
    G: Float[ArrayLike, "L L"],
    M: Float[ArrayLike, "V V"],
    B: Float[ArrayLike, "V V"],
    *,
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
) -> Float[Array, ""]:
    """S(G) from the V x V moments M and B (the equation of the module docstring)."""
    G, M, B = jnp.asarray(G), jnp.asarray(M), jnp.asarray(B)
    V = M.shape[-1]
    T = jnp.asarray(temperature, M.dtype)
    kappa = jnp.asarray(sigma_w2, M.dtype) / V
    K = (T / kappa) * jnp.eye(V, dtype=M.dtype) + M
    # One Cholesky factor gives both terms: ln det(I + kappa M / T) = V ln(kappa/T) + ln det K,
    # and tr(B^T K^{-1} B) = ||C^{-1} B||_F^2 with K = C C^T (no explicit inverse).
    C = jnp.linalg.cholesky(K)
    logdet = V * jnp.log(kappa / T) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(C)))
    Z = jsl.solve_triangular(C, B, lower=True)
    prior = jnp.sum(G**2) / (2.0 * sigma_g2)
    return prior + 0.5 * V * logdet - jnp.sum(Z**2) / (2.0 * T)


def action_from_statistics(
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """S(G) from sufficient statistics: O(L^2 V^2) per evaluation, independent of P."""
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    return action_from_moments(
        G, M, B, temperature=temperature, sigma_w2=sigma_w2, sigma_g2=sigma_g2
    )


def _data_moments(A, X, Y):
    AX = jnp.einsum("lm,pmv->plv", A, X)
    return jnp.einsum("plv,plw->vw", AX, AX), jnp.einsum("plv,plw->vw", AX, Y)


def action(
    G: Float[ArrayLike, "*batch L L"],
    X: Float[ArrayLike, "P L V"],
    Y: Float[ArrayLike, "P L V"],
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, "*batch"]:
    """Exact action S(G) = -ln p(G | D) + const of the copy head, W integrated out.

    copy_head.md, "Exact action": see the module docstring for the equation. ``G`` may carry
    leading batch axes (evaluated with ``vmap``). Softmax: A = row-softmax(G); linear:
    A = G / L^alpha. Differentiable in G; float64 recommended for comparisons at 1e-8.
    """
    validate_hyperparameters(
        attention=attention,
        temperature=temperature,
        sigma_w2=sigma_w2,
        sigma_g2=sigma_g2,
        alpha=alpha,
    )
    G, X, Y = jnp.asarray(G), jnp.asarray(X), jnp.asarray(Y)
    if X.ndim != 3 or X.shape != Y.shape:
        raise ValueError(f"X and Y must both have shape (P, L, V), got {X.shape} and {Y.shape}")
    L = X.shape[1]
    if G.ndim < 2 or G.shape[-2:] != (L, L):
        raise ValueError(f"G must have shape (..., {L}, {L}) to match X, got {G.shape}")

    hyper = dict(temperature=temperature, sigma_w2=sigma_w2, sigma_g2=sigma_g2)
    if G.ndim == 2:
        # One G: contract the data directly, O(P L^2 V + P L V^2).
        A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
        M, B = _data_moments(A, X, Y)
        return action_from_moments(G, M, B, **hyper)
    # Many G: build the sufficient statistics once (O(P L^2 V^2)); each G then costs two
    # GEMM-shaped contractions, O(L^2 V^2), which batch far better than per-G data sums.
    stats = copy_statistics(X, Y)
    batch = G.shape[:-2]
    flat = G.reshape((-1, L, L))
    one = lambda g: action_from_statistics(
        g, stats, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic, **hyper
    )
    return jax.vmap(one)(flat).reshape(batch)


def joint_energy(
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """Energy of the joint posterior over (W, G) (copy_head.md, "Validation protocol"):

        E = (1/2T) sum_mu ||Y - A X W||^2 + V ||W||^2 / (2 sigma_w^2) + ||G||^2 / (2 sigma_g^2),

    with sum_mu ||Y - A X W||^2 = ||Y||^2 - 2 tr(W^T B) + tr(W^T M W) from the statistics.
    Its G-marginal is exp(-S(G)) up to a constant.
    """
    W, G = jnp.asarray(W), jnp.asarray(G)
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    sq = stats.yy - 2.0 * jnp.sum(W * B) + jnp.sum(W * (M @ W))
    V = W.shape[0]
    return (
        sq / (2.0 * temperature)
        + V * jnp.sum(W**2) / (2.0 * sigma_w2)
        + jnp.sum(G**2) / (2.0 * sigma_g2)
    )


def sequence_loss(
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """Mean squared error per sequence, sum_mu ||Y^mu - A X^mu W||^2 / P, from the statistics."""
    W = jnp.asarray(W)
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    sq = stats.yy - 2.0 * jnp.sum(W * B) + jnp.sum(W * (M @ W))
    return sq / jnp.maximum(stats.P, 1.0)
