"""``focus-dilution-text`` and ``focus-dilution-tinystories``: a corpus's bigram chain, its
population flow past the departure from the unigram saddle, the bigram-proxy test
(``gradflow._proxy``) and the query words' attention stories (focus_dilution.md, "Real text")."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ... import data, gradflow as gf
from ...gradflow._counterfactuals import PROXY_CHECKS
from ...gradflow._proxy import Descents, proxy_checks, proxy_member
from ...gradflow._text import first_move, query_stories
from ...plotting import band, new_figure, time_series
from ...runs import ConfigError, Run
from ...sweep import Grid
from ._common import keywords, origin_evidence, record_analysis, to_host
from ._configs import TextConfig

# the orders in eps compare deviations of relative size (eps e^{mu1 t})^2 ~ 1e-4 between flows:
# the text flow's tolerances (rtol 1e-6) would be of their size, so the origin's flows are tighter
ORIGIN_TOLERANCES = (1e-10, 1e-14)


def _corpus_and_queries(config: TextConfig, run: Run):
    """The tokenised corpus and the query words: the configured ones that occur, and for each one
    that does not, a word of middling frequency (said in the log and the summary)."""
    corpus = data.load_corpus(
        config.corpus(),
        include=config.queries,
        missing="skip",
        fmt=config.corpus_format,
        level=config.level,
        vocab_size=config.vocab_size,
        max_chars=config.max_chars or None,
        drop_oov=config.oov == "drop",
        line_breaks=data.LineBreaks(config.line_breaks),
    )
    queries = [q.lower() for q in config.queries if q.lower() not in corpus.missing]
    if corpus.missing:
        extra = data.medium_frequency_tokens(corpus, len(corpus.missing), exclude=tuple(queries))
        run.log(
            f"queries {list(corpus.missing)} do not occur in the corpus: using the "
            f"medium-frequency words {extra} instead"
        )
        run.scalar("queries_replaced", {"absent": list(corpus.missing), "chosen": extra})
        queries += extra
    if not queries:
        raise ConfigError("no query word occurs in the corpus and none could be chosen")
    return corpus, tuple(queries)


def _descents(run: Run, config: TextConfig, corpus, pi, P, a, rows) -> tuple[Descents, Descents]:
    """The proxy's descents from the flow's initial point, as one sweep ``proxy_descents`` over
    (source, draw): one compiled program, chunks checkpointed for ``--resume``; a draw whose
    training failed numerically is left out of its source's draws and logged."""
    model0 = jax.tree_util.tree_map(lambda x: x[0], a.trajectory)
    steps = round(config.t1 / config.lr)
    settings = keywords(config, proxy_member)  # n_windows, s, lr, record_every
    member = proxy_member(corpus.tokens, pi, P, model0, rows, num_steps=steps, **settings)
    grid = Grid.zip({"source": [0, 1]}, seeds=config.n_draws, base_seed=config.seed)
    width = config.descent_width
    options = dataclasses.replace(
        run.options, vmap_width=width, chunk_size=run.options.chunk_size or 2 * width
    )
    result = run.sweep("proxy_descents", member, grid, options=options)
    source, ok, out = np.asarray(result.params["source"]), result.ok(), []
    for s, what in enumerate(("real-text", "bigram-chain")):
        keep = ok & (source == s)
        if lost := int((source == s).sum() - keep.sum()):
            run.log(f"proxy: {lost} {what} draw(s) failed numerically: left out")
        out.append(Descents(*(np.asarray(result.outputs[f])[keep] for f in Descents._fields)))
    return out[0], out[1]


def run_text(config: TextConfig, run: Run) -> None:
    """Real text: its bigram chain's population flow, the proxy test and the attention stories."""
    corpus, queries = _corpus_and_queries(config, run)
    P, pi = data.bigram_chain(corpus.tokens, corpus.d, smoothing=config.smoothing)
    names, n = list(corpus.vocab), len(corpus.tokens)
    counts = np.bincount(corpus.tokens, minlength=corpus.d)
    top = names[int(np.argmax(pi))]
    run.log(f"corpus {config.corpus()} ({corpus.format}, {config.level}): {n} tokens, d={corpus.d}")
    run.scalar(
        "corpus",
        {
            "path": str(config.corpus()),
            "tokens": n,
            "d": corpus.d,
            "vocab_head": names[:10],
            "oov_share_of_text": corpus.oov_share,
            "oov": config.oov,
            "line_breaks": config.line_breaks,
            "most_frequent_token": top,
            "pi_top": float(np.max(pi)),
            "queries": list(queries),
            "query_counts": {q: int(counts[names.index(q)]) for q in queries},
        },
    )
    chain = gf.MarkovChain(P, pi)
    a, horizon = gf.analyse_flow_until(
        chain,
        lambda st: st.departure.time,
        budget=config.horizon_budget,
        growth=config.horizon_growth,
        key=jax.random.key(config.seed),
        solver=gf.stiff_solver() if config.stiff else None,
        **keywords(config, gf.analyse_flow),
    )
    a = to_host(a)
    run.log(f"horizon: {horizon}")
    record_analysis(run, a, config, horizon=horizon)
    first_move(run, a, names)
    origin_evidence(run, config, chain, a, tolerances=ORIGIN_TOLERANCES)
    rows = [names.index(q) for q in queries]
    vocab = np.asarray(names, dtype=str)
    coords = {"time": np.asarray(a.ts), "query": vocab, "key": vocab}
    arrays = {  # name: (dims, values)
        "flow_loss": (("time",), a.metrics["loss"]),
        "flow_attention": (("time", "query", "key"), a.metrics["attention"]),
        "pi": (("key",), pi),
        "P": (("query", "key"), P),
    }
    real = proxy = None
    effects = (config.proxy_effect_loss, config.proxy_effect_attention)
    if not config.proxy:
        why = (
            "its descents are most of the experiment's time, and at the quick size the window "
            "draws' loss curves spread several times wider than the margin "
            f"{config.proxy_effect_loss:g}, so it cannot decide there"
        )
        for name, effect in zip(PROXY_CHECKS, effects, strict=True):
            claim = f"real-text and bigram-chain training agree within {effect:g}"
            run.not_run(name, claim, needs={"proxy": True}, full_size=True, why=why)
    else:
        real, proxy = _descents(run, config, corpus, pi, P, a, rows)
        t = np.asarray(real.steps[0]) * config.lr
        proxy_checks(run, t, real, proxy, config.t_early, effects, top)
        flow_loss = np.interp(t, a.ts, a.metrics["loss"])
        run.scalar(
            "max_gap_to_flow",
            {
                "loss_real": float(np.max(np.abs(real.population_loss.mean(0) - flow_loss))),
                "loss_bigram": float(np.max(np.abs(proxy.population_loss.mean(0) - flow_loss))),
            },
        )
        arrays |= {
            "real_loss": (("real_draw", "train_time"), real.population_loss),
            "proxy_loss": (("proxy_draw", "train_time"), proxy.population_loss),
            "real_query_attention": (("train_time", "story_query", "key"), real.query_attention[0]),
        }
        coords.update(train_time=t, story_query=np.asarray(queries, dtype=str))
    trained = None if real is None else real.query_attention[0]
    query_stories(run, a, queries, rows, pi, names, counts, trained)
    dims = {name: axes for name, (axes, _) in arrays.items()}
    run.save_arrays(dims=dims, coords=coords, **{name: v for name, (_, v) in arrays.items()})
    _figure(run, config, queries, rows, a, pi, names, real, proxy)


def _figure(run: Run, config: TextConfig, queries, rows, a, pi, names, real, proxy) -> None:
    """The loss and the attention on the top token (flow, and the descents' bands when they ran)
    and each query's attention ``w_qk / pi_k`` on the most frequent keys (trained, else flow)."""
    top = int(np.argmax(pi))
    keys = list(dict.fromkeys([top] + list(np.argsort(-pi)[:3])))
    panels = (("loss", "population loss"), ("frequent_weight", f"attention on {names[top]!r}"))
    fig, axes = new_figure(1, 2 + len(queries))
    t = a.ts[1:] if real is None else np.asarray(real.steps[0]) * config.lr
    for ax, (metric, title), field in zip(axes[0], panels, Descents._fields[1:3], strict=False):
        if real is not None:
            band(ax, t, getattr(real, field), label="real windows")
            band(ax, t, getattr(proxy, field), label="bigram windows")
            ax.axvline(config.t_early, color="0.5", ls=":", lw=0.8)
        ax.plot(t, np.interp(t, a.ts, a.metrics[metric]), "k--", lw=1, label="bigram flow")
        ax.set(title=title, xlabel="t", xscale="linear" if real is not None else "log")
        ax.legend(fontsize=7)
    for j, (q, i) in enumerate(zip(queries, rows, strict=True)):
        w = a.metrics["attention"][1:, i] if real is None else real.query_attention[0][:, j]
        time_series(
            axes[0, 2 + j],
            t,
            w[:, keys] / pi[keys],
            labels=[f"key {names[k]!r}" for k in keys],
            xlabel="t",
            ylabel="w_qk / pi_k",
            title=f"{'flow' if real is None else 'trained'}: query {q!r}",
        )
    run.save_figure(fig, "text_proxy" if real is not None else "text_flow")
