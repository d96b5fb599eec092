"""The bigram-Markov proxy test of the text experiment: gradient descent from one
initialisation on windows of the real stream and on windows sampled from the corpus's bigram
chain, compared record by record within the spread of the window draws."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ... import gradflow as gf
from ...runs import Run, negative_control
from ...sweep import Grid


class Descents(NamedTuple):
    """The recorded training curves of one data source's draws (leading axis: draws that
    finished; records next).

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


def descents(run: Run, config, corpus, pi, P, model0, queries) -> tuple[Descents, Descents]:
    """Gradient descent on real windows and on bigram-chain windows, ``n_draws`` draws each
    (as many bigram-chain windows as real ones), as one sweep ``proxy_descents`` of the run
    whose members are (source, draw) and draw their windows from their keys: one compiled
    program, chunks sized by the sweep options' memory budget, progress in the
    log, finished chunks checkpointed for ``--resume``. A draw whose training failed
    numerically (its member status) is left out of its source's draws and logged. Each member
    returns its loss curve, the attention on the most frequent token and the attention rows of
    the token indices ``queries``, not its whole attention matrices (d^2 per record).

    In float32: the test compares two trainings with each other at an effect of order 1e-2
    nats, far above float32's rounding (about 1e-7 relative per step, 1e-4 after the longest
    run), and the matmuls over the windows, most of the experiment's time, cost half as much."""
    d, length = corpus.d, config.s + 1
    f32 = jnp.float32
    model0 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, f32), model0)
    pi, P = jnp.asarray(pi, f32), jnp.asarray(P, f32)
    chain = gf.MarkovChain(P, pi)
    tokens = np.asarray(corpus.tokens, np.int32)
    available = len(tokens) - length + 1
    if available < 1:
        raise ValueError(
            f"the corpus has {len(tokens)} tokens, fewer than the window length {length}"
        )
    # As jaxdyn.data.stream_windows: n distinct windows at random offsets, or every window
    # when the stream has at most n (then every real-text draw is the same windows).
    n = min(config.n_windows, available)
    offsets = jnp.arange(length)
    top = int(np.argmax(np.asarray(pi)))
    query_rows = jnp.asarray(queries, jnp.int32)
    steps = round(config.t1 / config.lr)

    def draw_windows(source, key):
        """One draw of ``n`` windows: of the real stream (source 0) or sampled from its bigram
        chain (source 1), drawn inside the member so the sweep carries a key, not the windows."""
        k_real, k_chain = jax.random.split(key)
        if n == available:
            starts = jnp.arange(available)
        else:
            starts = jax.random.choice(k_real, available, (n,), replace=False)
        real = jnp.asarray(tokens)[starts[:, None] + offsets]
        sampled = gf.sample_sequences(k_chain, chain, n, length, pi).astype(jnp.int32)
        return jnp.where(source == 0, real, sampled)

    def member(params, key):
        batch = gf.Batch.from_sequences(draw_windows(params["source"], key), d, f32)
        tr = gf.descend(
            model0,
            batch.loss,
            chain,
            lr=config.lr,
            num_steps=steps,
            record_every=config.record_every,
        )
        return {
            "steps": tr.steps,
            "population_loss": tr.population_loss,
            "frequent_attention": tr.attention[..., top] @ pi,
            "query_attention": tr.attention[:, query_rows, :],
            "status": tr.status,
        }

    # Members (source, draw): 0 real windows, 1 bigram-chain windows; one seed per draw.
    grid = Grid.zip({"source": [0, 1]}, seeds=config.n_draws, base_seed=config.seed)
    width = config.descent_width
    options = dataclasses.replace(
        run.options, vmap_width=width, chunk_size=run.options.chunk_size or 2 * width
    )
    result = run.sweep("proxy_descents", member, grid, options=options)
    source = np.asarray(result.params["source"])
    ok = result.ok()
    out = []
    for s, what in enumerate(("real-text", "bigram-chain")):
        keep = ok & (source == s)
        lost = int((source == s).sum() - keep.sum())
        if lost:
            run.log(f"proxy: {lost} {what} draw(s) failed numerically: left out")
        out.append(Descents(*(np.asarray(result.outputs[f])[keep] for f in Descents._fields)))
    return out[0], out[1]


PROXY_CHECKS = ("bigram_proxy_loss", "bigram_proxy_attention")


def proxy_not_run(run: Run, config) -> None:
    """The proxy test left out (``proxy=False``, --quick): both checks ``not_run``."""
    why = (
        "its descents are most of the experiment's time, and at the quick size the window "
        "draws' loss curves spread several times wider than the margin "
        f"{config.proxy_effect_loss:g}, so it cannot decide there"
    )
    for name, effect in zip(
        PROXY_CHECKS, (config.proxy_effect_loss, config.proxy_effect_attention), strict=True
    ):
        run.not_run(
            name,
            f"real-text and bigram-chain training agree within {effect:g}",
            needs={"proxy": True},
            full_size=True,
            why=why,
        )


def proxy_check(run: Run, name: str, t, real, proxy, what: str, effect: float) -> None:
    """Equivalence within ``effect`` at every record (:func:`gradflow.claims.bigram_proxy_agrees`)."""
    run.evidence(
        name,
        gf.claims.bigram_proxy_agrees(what, real, proxy, effect),
        note=f"{real.shape[0]} window draws each, {len(t)} records up to t = {t[-1]:.4g}",
    )


def _data_without_the_bigram_structure():
    # training curves on data whose loss differs from the proxy's by more than the effect
    rng = np.random.default_rng(2)
    real = 0.70 + 0.002 * rng.normal(size=(6, 10))
    proxy = 0.72 + 0.002 * rng.normal(size=(6, 10))
    return gf.claims.bigram_proxy_agrees("loss", real, proxy, 0.01)


def _too_few_draws_to_tell():
    rng = np.random.default_rng(3)
    real = 0.3 + 0.05 * rng.normal(size=(2, 10))
    proxy = 0.3 + 0.05 * rng.normal(size=(2, 10))
    return gf.claims.bigram_proxy_agrees("attention", real, proxy, 0.02)


for _name in ("focus-dilution-text", "focus-dilution-tinystories"):
    negative_control(_name, "bigram_proxy_loss")(_data_without_the_bigram_structure)
    negative_control(_name, "bigram_proxy_attention")(_too_few_draws_to_tell)


def proxy_checks(run: Run, config, t, real, proxy, pi, names) -> None:
    """Early training on the corpus vs on its bigram chain: loss and attention, per record."""
    early = t <= config.t_early
    top = names[int(np.argmax(pi))]
    for name, what, r, p in (
        (
            "bigram_proxy_loss",
            "population loss of the trained model on the bigram chain",
            real.population_loss,
            proxy.population_loss,
        ),
        (
            "bigram_proxy_attention",
            f"attention on the most frequent token {top!r}",
            real.frequent_attention,
            proxy.frequent_attention,
        ),
    ):
        effect = (
            config.proxy_effect_loss if name.endswith("loss") else config.proxy_effect_attention
        )
        proxy_check(
            run,
            name,
            t[early],
            r[:, early],
            p[:, early],
            f"{what}, t <= {config.t_early:g}",
            effect,
        )
        r, p = np.asarray(r, float), np.asarray(p, float)  # the descents run in float32
        diff = np.abs(r.mean(0) - p.mean(0))
        se = np.sqrt(r.var(0, ddof=1) / len(r) + p.var(0, ddof=1) / len(p))
        spread = se > 0  # records where both trainings agree exactly have no statistic
        run.scalar(
            f"{name}_whole_run",
            {
                "max_difference": float(diff.max()),
                "max_statistic": float(np.max(diff[spread] / se[spread])) if spread.any() else 0.0,
            },
        )
