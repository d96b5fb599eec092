"""Attention on real text (focus_dilution.md, "Real text"): the empirical token-type attention
of a trained model on windows of a stream, and a query's attention read as a story of focus
and dilution phases. Tokenisation and bigram chains live in :mod:`jaxdyn.data`.
"""

from __future__ import annotations

import numpy as np


def attention_by_token(model, windows, d: int):
    """Empirical token-type attention of a trained model on real windows: for query type ``q``
    (the last input token) the mean attention mass on positions holding key type ``k``,
    ``A[q, k]``, and the mean share of positions holding ``k`` in those windows,
    ``F[q, k]`` (the uniform-attention baseline). Returns ``(A, F, query_counts)``."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(windows)[:, :-1]
    a = jax.vmap(model.attention)(x)
    onehot = jax.nn.one_hot(x, d, dtype=a.dtype)
    mass = jnp.einsum("ns,nsk->nk", a, onehot)
    share = jnp.mean(onehot, axis=1)
    q = jax.nn.one_hot(x[:, -1], d, dtype=a.dtype)
    counts = jnp.sum(q, axis=0)
    denom = jnp.maximum(counts, 1.0)[:, None]
    return (q.T @ mass) / denom, (q.T @ share) / denom, counts


def attention_story(
    weights: np.ndarray, prior: np.ndarray, names, *, threshold: float = 0.1
) -> list[str]:
    """Phases of one query's attention over time (focus_dilution.md, "Real text").

    At each time the attention row ``w(t)`` is compared with the uniform-attention baseline
    ``prior`` (``pi`` for the population model) by entropy: ``H(w) < (1 - threshold) H(prior)``
    is *focus on* the key with the largest gain ``w_k - prior_k``; ``H(w) > (1 + threshold)
    H(prior)`` is *dilution*; otherwise *uniform*. Consecutive repeats are merged.
    """
    w = np.asarray(weights, dtype=float)
    prior = np.asarray(prior, dtype=float)

    def H(p):
        p = p[p > 0]
        return float(-np.sum(p * np.log(p)))

    H0 = H(prior / prior.sum())
    story: list[str] = []
    for row in w:
        if not np.all(np.isfinite(row)):
            break
        h = H(row / max(row.sum(), 1e-300))
        if h < (1 - threshold) * H0:
            k = int(np.argmax(row - prior))
            phase = f"focus on {names[k]!r}"
        elif h > (1 + threshold) * H0:
            phase = "dilution"
        else:
            phase = "uniform"
        if not story or story[-1] != phase:
            story.append(phase)
    return story
