"""The bigram-Markov proxy test on real text (focus_dilution.md, "Real text"): gradient descent
from one initialisation on windows of the real stream and on windows sampled from the corpus's
bigram chain, compared record by record within the spread of the window draws.

In float32: the test compares two trainings with each other at an effect of order 1e-2 nats,
far above float32's rounding (about 1e-7 relative per step, 1e-4 after the longest run), and the
matmuls over the windows, most of the test's time, cost half as much."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._markov import MarkovChain, sample_sequences
from ._model import Batch
from ._train import descend


class Descents(NamedTuple):
    """The recorded training curves of one data source's draws (leading axis: draws; records
    next).

    Attributes:
        steps: the recorded steps.
        population_loss: the trained model's population loss on the bigram chain.
        frequent_attention: the attention the most frequent token receives,
            ``sum_q pi_q w_{q,top}``.
        query_attention: the attention rows of the story queries (records, queries, keys).
    """

    steps: np.ndarray
    population_loss: np.ndarray
    frequent_attention: np.ndarray
    query_attention: np.ndarray


def proxy_member(tokens, pi, P, model0, queries, *, n_windows, s, lr, num_steps, record_every):
    """``member(params, key)`` for a sweep over ``params = {"source"}`` (0: ``n_windows``
    distinct windows of length ``s + 1`` of the stream ``tokens`` at random offsets, every
    window when the stream has at most that many; 1: as many windows sampled from the bigram
    chain ``(pi, P)`` from its stationary law), drawn from the member's key: gradient descent
    from ``model0`` in float32, returning the :class:`Descents` fields (the attention rows of
    the token indices ``queries`` only, not whole matrices)."""
    length, f32 = s + 1, jnp.float32
    model0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, f32), model0)
    chain = MarkovChain(jnp.asarray(P, f32), jnp.asarray(pi, f32))
    tokens = np.asarray(tokens, np.int32)
    available = len(tokens) - length + 1
    if available < 1:
        raise ValueError(
            f"the corpus has {len(tokens)} tokens, fewer than the window length {length}"
        )
    n = min(n_windows, available)
    top, rows = int(np.argmax(np.asarray(pi))), jnp.asarray(queries, jnp.int32)

    def member(params, key):
        k_real, k_chain = jax.random.split(key)
        if n == available:
            starts = jnp.arange(available)
        else:
            starts = jax.random.choice(k_real, available, (n,), replace=False)
        real = jnp.asarray(tokens)[starts[:, None] + jnp.arange(length)]
        sampled = sample_sequences(k_chain, chain, n, length, chain.pi).astype(jnp.int32)
        windows = jnp.where(params["source"] == 0, real, sampled)
        batch = Batch.from_sequences(windows, chain.d, f32)
        tr = descend(
            model0, batch.loss, chain, lr=lr, num_steps=num_steps, record_every=record_every
        )
        return {
            "steps": tr.steps,
            "population_loss": tr.population_loss,
            "frequent_attention": tr.attention[..., top] @ chain.pi,
            "query_attention": tr.attention[:, rows, :],
            "status": tr.status,
        }

    return member


def proxy_checks(run, t, real: Descents, proxy: Descents, t_early: float, effects, top: str):
    """Records on ``run`` the proxy test: early training (``t <= t_early``) on the corpus against
    its bigram chain, per record, within ``effects = (loss, attention)``
    (``claims.bigram_proxy_agrees``), and the whole run's largest difference (scalars)."""
    from . import claims

    early = t <= t_early
    for name, what, r, p, effect in (
        (
            "bigram_proxy_loss",
            "population loss of the trained model on the bigram chain",
            real.population_loss,
            proxy.population_loss,
            effects[0],
        ),
        (
            "bigram_proxy_attention",
            f"attention on the most frequent token {top!r}",
            real.frequent_attention,
            proxy.frequent_attention,
            effects[1],
        ),
    ):
        ev = claims.bigram_proxy_agrees(
            f"{what}, t <= {t_early:g}", r[:, early], p[:, early], effect
        )
        note = f"{r.shape[0]} window draws each, {early.sum()} records up to t = {t[early][-1]:.4g}"
        run.evidence(name, ev, note=note)
        r, p = np.asarray(r, float), np.asarray(p, float)  # the descents run in float32
        diff = np.abs(r.mean(0) - p.mean(0))
        se = np.sqrt(r.var(0, ddof=1) / len(r) + p.var(0, ddof=1) / len(p))
        spread = se > 0  # records where both trainings agree exactly have no statistic
        stat = float(np.max(diff[spread] / se[spread])) if spread.any() else 0.0
        run.scalar(
            f"{name}_whole_run", {"max_difference": float(diff.max()), "max_statistic": stat}
        )
