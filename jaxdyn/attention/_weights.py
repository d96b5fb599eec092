"""Attention weights from scores: the single implementation every theory uses.

A score matrix ``scores[q, k]`` (query ``q`` attending to key ``k``) becomes weights by one
of the normalisations below. The key axis is the last axis. Keys may carry a measure
(``log_weights``: log-masses of an empirical or population measure, e.g. ``log pi`` in the
population model of focus_dilution.md or ``-log n`` for ``n`` particles) and a boolean
``mask`` (``True`` = attend).

- softmax:   w_qk = m_k exp(s_qk) / sum_l m_l exp(s_ql)
- sigmoid:   w_qk = m_k sigmoid(s_qk + b)                        (no row normalisation)
- linear:    w_qk = m_k s_qk                                       (no normalisation)
- Sinkhorn:  entropic optimal-transport self-coupling with both marginals equal to m,
             computed in the log domain (transformer_pde.md, Table 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Real

from .._numerics import entropy

_NEG_INF = -jnp.inf


def _masked_log_weights(scores, log_weights, mask):
    logits = scores
    if log_weights is not None:
        logits = logits + log_weights
    if mask is not None:
        logits = jnp.where(mask, logits, _NEG_INF)
    return logits


def softmax_weights(
    scores: Float[ArrayLike, "... k"],
    *,
    log_weights: Float[ArrayLike, "... k"] | None = None,
    mask: Bool[ArrayLike, "... k"] | None = None,
    axis: int = -1,
) -> Float[Array, "... k"]:
    """Softmax attention over the key axis (``axis``, last by default), optionally against a
    key measure and a mask.

    Rows that are fully masked return zeros rather than NaN. ``axis`` lets key-major layouts
    (keys first, many queries on the last axis, which vectorises best) avoid a transpose.
    """
    logits = _masked_log_weights(jnp.asarray(scores), log_weights, mask)
    row_max = jnp.max(logits, axis=axis, keepdims=True)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    unnorm = jnp.exp(logits - jax.lax.stop_gradient(row_max))
    total = jnp.sum(unnorm, axis=axis, keepdims=True)
    return unnorm / jnp.where(total > 0, total, 1.0)


def bounded_softmax_average(
    scores: Float[ArrayLike, "... q k"],
    values: Float[ArrayLike, "... k v"],
    bound: Float[ArrayLike, ""],
) -> Float[Array, "... q v"]:
    """``sum_j softmax_j(scores) values_j`` for scores known to be at most ~``bound``.

    A softmax is invariant under a shift of each row, so the known bound replaces the row
    maximum: ``E = exp(scores - bound)``, ``(E values) / (E 1)``, normalised after the product.
    This skips the max-reduction pass over the score matrix (the fast path of sweeps of small
    particle systems, e.g. tokens on the unit sphere where ``beta <x, y> <= beta``). Valid
    while no row underflows entirely, i.e. every row has a score within ~80 (float32) of
    ``bound``; otherwise use :func:`softmax_weights`. The row sums ``E 1`` are a product with a
    vector of ones, on XLA:CPU slightly faster than a reduction over the rows.
    """
    E = jnp.exp(jnp.asarray(scores) - bound)
    return (E @ values) / (E @ jnp.ones(E.shape[-1], E.dtype))[..., None]


def log_softmax_weights(
    scores: Float[ArrayLike, "... k"],
    *,
    log_weights: Float[ArrayLike, "... k"] | None = None,
    mask: Bool[ArrayLike, "... k"] | None = None,
) -> Float[Array, "... k"]:
    """Log of :func:`softmax_weights` (``-inf`` on masked keys)."""
    logits = _masked_log_weights(jnp.asarray(scores), log_weights, mask)
    return logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)


def sigmoid_weights(
    scores: Float[ArrayLike, "... k"],
    *,
    bias: float | Float[ArrayLike, ""] = 0.0,
    log_weights: Float[ArrayLike, "... k"] | None = None,
    mask: Bool[ArrayLike, "... k"] | None = None,
) -> Float[Array, "... k"]:
    """Sigmoid attention: each weight is ``m_k * sigmoid(s_qk + bias)``, rows not normalised."""
    return _weighted_and_masked(jax.nn.sigmoid(jnp.asarray(scores) + bias), log_weights, mask)


def linear_weights(
    scores: Float[ArrayLike, "... k"],
    *,
    log_weights: Float[ArrayLike, "... k"] | None = None,
    mask: Bool[ArrayLike, "... k"] | None = None,
) -> Float[Array, "... k"]:
    """Linear attention: the weights are the scores themselves, times the key measure."""
    return _weighted_and_masked(jnp.asarray(scores), log_weights, mask)


def _weighted_and_masked(w, log_weights, mask):
    """Unnormalised weights ``w`` times the key measure ``exp(log_weights)``, zero on masked
    keys."""
    if log_weights is not None:
        w = w * jnp.exp(log_weights)
    if mask is not None:
        w = jnp.where(mask, w, 0.0)
    return w


def sinkhorn_log_coupling(
    scores: Float[ArrayLike, "q k"],
    *,
    log_row_weights: Float[ArrayLike, " q"],
    log_col_weights: Float[ArrayLike, " k"],
    iterations: int = 100,
) -> Float[Array, "q k"]:
    """Log of the entropic-OT coupling with kernel ``exp(scores)`` and the given marginals.

    Symmetric log-domain Sinkhorn iterations: ``f <- log a - LSE_k(s + g)``,
    ``g <- log b - LSE_q(s + f)``. Never exponentiates raw scores, so large scores are safe.
    """
    scores = jnp.asarray(scores)
    log_a = jnp.asarray(log_row_weights)
    log_b = jnp.asarray(log_col_weights)

    def body(_, fg):
        f, g = fg
        f = log_a - jax.nn.logsumexp(scores + g[None, :], axis=1)
        g = log_b - jax.nn.logsumexp(scores + f[:, None], axis=0)
        return f, g

    f0 = jnp.zeros(scores.shape[0], scores.dtype)
    g0 = jnp.zeros(scores.shape[1], scores.dtype)
    f, g = jax.lax.fori_loop(0, iterations, body, (f0, g0))
    return scores + f[:, None] + g[None, :]


def sinkhorn_weights(
    scores: Float[ArrayLike, "q k"],
    *,
    log_row_weights: Float[ArrayLike, " q"],
    log_col_weights: Float[ArrayLike, " k"],
    iterations: int = 100,
) -> Float[Array, "q k"]:
    """Conditional weights ``pi(k | q)`` of the Sinkhorn coupling (each row sums to one)."""
    log_pi = sinkhorn_log_coupling(
        scores,
        log_row_weights=log_row_weights,
        log_col_weights=log_col_weights,
        iterations=iterations,
    )
    return jnp.exp(log_pi - jnp.asarray(log_row_weights)[:, None])


def bilinear_scores(
    queries: Float[ArrayLike, "q d"], keys: Float[ArrayLike, "k d"], A: Float[ArrayLike, "d d"]
) -> Float[Array, "q k"]:
    """Scores ``s_qk = y_k^T A x_q`` (transformer_pde.md: A = K^T Q / sqrt(d))."""
    return jnp.asarray(queries) @ jnp.asarray(A).T @ jnp.asarray(keys).T


def l2_scores(
    queries_proj: Float[ArrayLike, "q k_dim"], keys_proj: Float[ArrayLike, "k k_dim"]
) -> Float[Array, "q k"]:
    """Scores ``-||Qx - Ky||^2`` from already projected queries and keys."""
    q = jnp.asarray(queries_proj)
    k = jnp.asarray(keys_proj)
    sq = jnp.sum(q**2, -1)[:, None] + jnp.sum(k**2, -1)[None, :] - 2.0 * q @ k.T
    return -sq


def causal_mask(
    query_positions: Real[ArrayLike, " q"], key_positions: Real[ArrayLike, " k"]
) -> Bool[Array, "q k"]:
    """``True`` where key position ``s'`` is at or before query position ``s``."""
    return jnp.asarray(key_positions)[None, :] <= jnp.asarray(query_positions)[:, None]


def attention_entropy(weights: Float[ArrayLike, "... k"]) -> Float[Array, "..."]:
    """Shannon entropy ``-sum_k w log w`` of normalised attention rows (0 log 0 = 0); the key
    axis is last. The same function as :func:`jaxdyn.entropy` over the key axis."""
    return entropy(weights, axis=-1)
