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


def first_move(run, a, names) -> None:
    """Records on ``run`` which token the attention of the flow analysed in ``a`` (a
    :class:`FlowAnalysis`) first moves onto, named by the vocabulary ``names``, against
    ``sign(c)``'s prediction (onto the most frequent token for ``c > 0``, off it for ``c < 0``)."""
    first, c = a.first_attention_target(), float(a.rates.focus)
    top = names[int(np.argmax(a.chain.pi))]
    target = names[first["key"]] if first["key"] >= 0 else None
    run.scalar(
        "first_attention_target",
        {
            "time": first["time"],
            "token": target,
            "frequency_rank": first["rank"],
            "received": first["received"],
            "most_frequent_token": top,
            "c": c,
            "departure_sign": int(a.stages.departure_sign),
            "t_departure": float(a.stages.departure.time),
        },
    )
    run.log(
        f"the attention first moves onto {target!r} (frequency rank {first['rank']}) at t = "
        f"{first['time']:.4g}; c = {c:.3g} predicts a first move "
        f"{'onto' if c > 0 else 'off'} {top!r}"
    )


def query_stories(run, a, queries, rows, pi, names, counts, trained=None) -> None:
    """Records on ``run`` the :func:`attention_story` of each query (token index ``rows``) along
    the flow of ``a`` and, when given, along training (``trained``: records x queries x keys)."""
    stories = {}
    for j, (q, i) in enumerate(zip(queries, rows, strict=True)):
        stories[q] = {"flow": attention_story(a.metrics["attention"][:, i, :], pi, names)}
        if trained is not None:
            stories[q]["trained"] = attention_story(trained[:, j, :], pi, names)
        run.log(
            f"query {q!r} ({counts[i]} occurrences): "
            + "; ".join(f"{k} {' -> '.join(v)}" for k, v in stories[q].items())
        )
    run.scalar("query_stories", stories)
