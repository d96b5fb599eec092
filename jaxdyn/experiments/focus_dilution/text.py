"""``focus-dilution-text``: real text (focus_dilution.md, "Real text").

The corpus (word level by default: the top-k words, the query words, and ``<oov>``; or
characters) gives a bigram chain ``(pi, P)``. Its population flow is analysed like any chain
(:func:`jaxdyn.gradflow.analyse_flow`: the sign of ``c`` says whether attention first moves onto
or off the most frequent token). The bigram-Markov proxy is then tested on early training:
gradient descent from one initialisation on windows of the real stream and on windows sampled
from the bigram chain (same count, same length, stationary start), several window draws each;
their population loss and the attention the frequent token receives must agree record by
record within the spread of the draws (Welch statistic, Bonferroni over the records). The query
words' attention over training (flow and real-text descent) is read as a story of focus and
dilution phases and reported as measured.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ... import data, gradflow as gf
from ...plotting import band, new_figure, time_series
from ...runs import ConfigError, ExperimentConfig, Run, register_experiment
from ._common import record_analysis, to_host
from .headline import origin_evidence
from ._proxy import descents, proxy_checks, proxy_not_run


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextConfig(ExperimentConfig):
    """Bigram chain of a corpus, its population flow, and early training against the proxy.

    Attributes:
        corpus_path: a known corpus ("wikitext-2", "tinystories": the full file when
            ``data_dir`` or ``jaxdyn data fetch`` provides it, else the packaged excerpt) or a
            text file (WikiText raw, TinyStories or plain text).
        data_dir: a folder of full corpora, ``<data_dir>/<name>/<file>`` ("": none; the
            command line gives ``JAXDYN_DATA``).
        corpus_format: "auto" (detected), "wikitext", "tinystories" or "plain".
        level: "word" (top-k words + queries + <oov>) or "char".
        line_breaks: what line breaks become (:class:`jaxdyn.data.LineBreaks`): "keep" (each
            one the token <nl>), "spaces" (no token: a hard-wrapped text reads as running
            text) or "paragraph" (one <par> token per blank-line paragraph break).
        vocab_size: the k most frequent tokens kept (including <oov>).
        oov: "drop" (default): out-of-vocabulary tokens are removed from the stream, so every
            attention target is a real token (bigrams skip over the removed words); "keep":
            one <oov> bucket (at vocab_size 64 it holds about half of WikiText-2 and becomes
            the "most frequent token").
        queries: tokens whose attention story is reported (added to the vocabulary); a query
            absent from the corpus is replaced by a medium-frequency word (logged).
        max_chars: read only the first lines up to this many characters (0 = the whole file;
            --quick reads the first 300,000, the packaged WikiText-2 excerpt's size).
        smoothing: additive smoothing of the bigram counts.
        m: embedding width.
        m_attn: attention width m'.
        eps: initialisation scale.
        t1: end of the training (t = steps * lr) and the flow's first horizon.
        horizon_budget: the flow's horizon grows (doubling, with its step budget) from ``t1``
            until the attention has left the unigram saddle (the departure), up to this many
            times ``t1``.
        t_early: end of the early training where the bigram proxy is tested.
        num_saves: log-spaced save times of the flow.
        rtol: relative tolerance of the adaptive solver.
        atol: absolute tolerance of the adaptive solver.
        stiff: solve the flow with :func:`jaxdyn.gradflow.stiff_solver` (implicit Kvaerno5 with
            Newton-GMRES, for stiff late stages) instead of ``diffrax.Tsit5()``.
        max_steps: solver step budget.
        n_windows: training windows per draw (distinct windows of the stream).
        s: window length (inputs; the target is one more token).
        lr: gradient-descent step.
        n_draws: window draws per data source (the spread of the proxy test).
        descent_width: proxy descents vectorised together (the sweep's ``vmap_width`` for
            them; each holds its ``n_windows`` one-hot windows, about 33 MB at full size), and
            twice it per chunk unless the run sets ``chunk_size``: progress and a checkpoint
            every chunk.
        record_every: steps between records.
        proxy_effect_loss: the loss difference (nats) between real-text and bigram-chain
            training that the proxy test must exclude (equivalence margin).
        proxy_effect_attention: the same for the attention the frequent token receives.
        origin_eps: initialisation scales of the flows near the origin (the frozen attention
            and Lemma 3.1 on the text chain, as in ``focus-dilution``).
        origin_amplitude: the window near the origin ends where the largest ``eps`` has grown
            to this amplitude.
        find_stall: search the rank-one stall for ``lambda_T`` (reported only: ``t1`` is
            fixed, so the horizon does not need it; --quick leaves it out).
        proxy: run the bigram-proxy test (the descents on real and bigram-chain windows,
            most of the experiment's time). --quick leaves it out and records both proxy
            checks ``inconclusive`` with the reason: at the quick size the spread of the
            window draws is about ten times the margin, so the test cannot decide there.
    """

    corpus_path: str = "wikitext-2"
    data_dir: str = ""
    corpus_format: str = "auto"
    level: str = "word"
    line_breaks: str = "keep"
    vocab_size: int = 64
    oov: str = "drop"
    queries: tuple[str, ...] = ("continue",)
    max_chars: int = 0
    smoothing: float = 1e-3
    m: int = 8
    m_attn: int = 8
    eps: float = 1e-3
    t1: float = 600.0
    horizon_budget: float = 16.0
    t_early: float = 200.0
    num_saves: int = 150
    rtol: float = 1e-6
    atol: float = 1e-9
    stiff: bool = False
    max_steps: int = 50_000
    n_windows: int = 4096
    s: int = 32
    lr: float = 0.25
    n_draws: int = 64
    descent_width: int = 16
    record_every: int = 20
    proxy_effect_loss: float = 0.02
    proxy_effect_attention: float = 0.02
    origin_eps: tuple[float, ...] = (0.02, 0.01, 0.005, 0.0025)
    origin_amplitude: float = 0.1
    find_stall: bool = True
    proxy: bool = True

    def corpus(self) -> Path:
        """The corpus file (:func:`jaxdyn.data.corpus_path`)."""
        return data.corpus_path(self.corpus_path, data_dir=self.data_dir or None)

    def validate(self) -> None:
        try:
            self.corpus()
        except ValueError as err:
            raise ConfigError(f"corpus_path: {err}") from None
        if self.corpus_format not in ("auto", "wikitext", "tinystories", "plain"):
            raise ConfigError(
                "corpus_format must be auto, wikitext, tinystories or plain, "
                f"got {self.corpus_format!r}"
            )
        if self.oov not in ("drop", "keep"):
            raise ConfigError(f"oov must be 'drop' or 'keep', got {self.oov!r}")
        if self.line_breaks not in [lb.value for lb in data.LineBreaks]:
            raise ConfigError(
                "line_breaks must be one of "
                f"{[lb.value for lb in data.LineBreaks]}, got {self.line_breaks!r}"
            )
        if self.level not in ("word", "char"):
            raise ConfigError(f"level must be 'word' or 'char', got {self.level!r}")
        if self.vocab_size < 3 or self.s < 2 or self.n_windows < 2 or self.n_draws < 2:
            raise ConfigError("need vocab_size >= 3, s >= 2, n_windows >= 2 and n_draws >= 2")
        if len(set(self.origin_eps)) < 3 or not all(0 < e < 0.1 for e in self.origin_eps):
            raise ConfigError(
                f"need at least 3 distinct origin_eps in (0, 0.1), got {self.origin_eps}"
            )
        if not 0 < self.origin_amplitude < 1:
            raise ConfigError(f"origin_amplitude must be in (0, 1), got {self.origin_amplitude}")
        if not self.horizon_budget >= 1:
            raise ConfigError(f"horizon_budget must be >= 1, got {self.horizon_budget}")
        if self.descent_width < 1:
            raise ConfigError(f"descent_width must be >= 1, got {self.descent_width}")
        if not (self.smoothing > 0 and 0 < self.eps < 0.1 and self.lr > 0):
            raise ConfigError("need smoothing > 0, eps in (0, 0.1) and lr > 0")
        if not 0 < self.t_early <= self.t1:
            raise ConfigError(f"need 0 < t_early <= t1, got t_early={self.t_early}, t1={self.t1}")
        steps = round(self.t1 / self.lr)
        if steps < self.record_every or steps % self.record_every:
            raise ConfigError(
                f"t1 / lr = {self.t1 / self.lr:g} steps must be a multiple of record_every"
            )

    @classmethod
    def quick(cls) -> dict:
        return {
            "max_chars": 300_000,
            "n_windows": 2048,
            "n_draws": 6,
            "num_saves": 80,
            "t1": 200.0,
            "find_stall": False,
            "proxy": False,
        }


def _corpus_and_queries(config: TextConfig, run: Run):
    """The tokenised corpus and the query words: the configured ones that occur, and for each
    one that does not, a word of middling frequency from the corpus (said in the log and the
    summary). Runs before anything is compiled."""
    kwargs = dict(
        fmt=config.corpus_format,
        level=config.level,
        vocab_size=config.vocab_size,
        max_chars=config.max_chars or None,
        drop_oov=config.oov == "drop",
        line_breaks=data.LineBreaks(config.line_breaks),
    )
    corpus = data.load_corpus(config.corpus(), include=config.queries, missing="skip", **kwargs)
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


ORIGIN_TOLERANCES = (1e-10, 1e-14)


def _save_arrays(run: Run, a, pi, P, names, queries, t=None, real=None, proxy=None) -> None:
    """The flow's arrays labelled with the vocabulary (``flow_attention``: time x query x key),
    and the descents' curves when they ran (``train_time``: ``step * lr``)."""
    vocab = np.asarray(names, dtype=str)
    arrays = dict(flow_loss=a.metrics["loss"], flow_attention=a.metrics["attention"], pi=pi, P=P)
    dims = {
        "flow_loss": ("time",),
        "flow_attention": ("time", "query", "key"),
        "pi": ("key",),
        "P": ("query", "key"),
    }
    coords = {"time": np.asarray(a.ts), "query": vocab, "key": vocab}
    if real is not None:
        arrays.update(
            real_loss=real.population_loss,
            proxy_loss=proxy.population_loss,
            real_query_attention=real.query_attention[0],
        )
        dims.update(
            real_loss=("real_draw", "train_time"),
            proxy_loss=("proxy_draw", "train_time"),
            real_query_attention=("train_time", "story_query", "key"),
        )
        coords.update(train_time=np.asarray(t), story_query=np.asarray(queries, dtype=str))
    run.save_arrays(dims=dims, coords=coords, **arrays)


def _departure(run: Run, a, names) -> None:
    """Which token the attention first moves onto, against ``sign(c)``'s prediction (onto the
    most frequent token for ``c > 0``, off it for ``c < 0``)."""
    first = a.first_attention_target()
    c = float(a.rates.focus)
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


def _query_stories(run: Run, queries, a, real, pi, names, counts) -> None:
    stories = {}
    for q in queries:
        i = names.index(q)
        stories[q] = {"flow": gf.attention_story(a.metrics["attention"][:, i, :], pi, names)}
        if real is not None:
            j = queries.index(q)
            stories[q]["trained"] = gf.attention_story(real.query_attention[0][:, j, :], pi, names)
        run.log(
            f"query {q!r} ({counts[i]} occurrences): "
            + "; ".join(f"{k} {' -> '.join(v)}" for k, v in stories[q].items())
        )
    run.scalar("query_stories", stories)


def _text_figure(run: Run, config: TextConfig, queries, a, t, real, proxy, pi, names) -> None:
    top = int(np.argmax(pi))
    fig, axes = new_figure(1, 2 + len(queries))
    panels = (
        ("population loss", real.population_loss, proxy.population_loss, a.metrics["loss"]),
        (
            f"attention on {names[top]!r}",
            real.frequent_attention,
            proxy.frequent_attention,
            a.metrics["frequent_weight"],
        ),
    )
    for ax, (title, r, p, flow) in zip(axes[0], panels, strict=False):
        band(ax, t, r, label="real windows")
        band(ax, t, p, label="bigram windows")
        ax.plot(t, np.interp(t, a.ts, flow), "k--", lw=1, label="bigram flow")
        ax.axvline(config.t_early, color="0.5", ls=":", lw=0.8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("t = step * lr")
        ax.legend(fontsize=7)
    keys = list(dict.fromkeys([top] + list(np.argsort(-pi)[:3])))
    for j, q in enumerate(queries):
        time_series(
            axes[0, 2 + j],
            t,
            real.query_attention[0][:, j, keys] / pi[keys],
            labels=[f"key {names[k]!r}" for k in keys],
            title=f"trained: query {q!r}",
            xlabel="t = step * lr",
            ylabel="w_qk / pi_k",
        )
    run.save_figure(fig, "text_proxy")


def _flow_figure(run: Run, queries, a, pi, names) -> None:
    """The flow alone (no proxy descents): its loss and each query's attention."""
    fig, axes = new_figure(1, 1 + len(queries))
    ax = axes[0, 0]
    ax.semilogx(a.ts[1:], a.metrics["loss"][1:], "k-", lw=1)
    ax.set_title("bigram population flow: loss", fontsize=10)
    ax.set_xlabel("t")
    keys = list(dict.fromkeys(np.argsort(-pi)[:3]))
    for j, q in enumerate(queries):
        i = names.index(q)
        time_series(
            axes[0, 1 + j],
            a.ts,
            a.metrics["attention"][:, i, keys] / pi[keys],
            labels=[f"key {names[k]!r}" for k in keys],
            title=f"flow: query {q!r}",
            xlabel="t",
            ylabel="w_qk / pi_k",
        )
    run.save_figure(fig, "text_flow")


@register_experiment(
    "focus-dilution-text",
    TextConfig,
    "real text (WikiText / TinyStories): bigram population flow, proxy test, attention stories",
    title="Real text: the bigram flow past the departure",
    docs="focus_dilution.md#real-text",
)
def run_text(config: TextConfig, run: Run) -> None:
    """Real text: its bigram chain's population flow, the proxy test and the attention stories."""
    corpus, queries = _corpus_and_queries(config, run)
    P, pi = data.bigram_chain(corpus.tokens, corpus.d, smoothing=config.smoothing)
    names = list(corpus.vocab)
    counts = np.bincount(corpus.tokens, minlength=corpus.d)
    run.log(
        f"corpus {config.corpus()} ({corpus.format}, {config.level}): "
        f"{len(corpus.tokens)} tokens, d={corpus.d}"
    )
    run.scalar(
        "corpus",
        {
            "path": str(config.corpus()),
            "tokens": len(corpus.tokens),
            "d": corpus.d,
            "vocab_head": names[:10],
            "oov_share_of_text": corpus.oov_share,
            "oov": config.oov,
            "line_breaks": config.line_breaks,
            "most_frequent_token": names[int(np.argmax(pi))],
            "pi_top": float(np.max(pi)),
            "queries": list(queries),
            "query_counts": {q: int(counts[names.index(q)]) for q in queries},
        },
    )
    key = jax.random.key(config.seed)
    chain = gf.MarkovChain(P, pi)
    a, horizon = gf.analyse_flow_until(
        chain,
        lambda st: st.departure.time,
        budget=config.horizon_budget,
        key=key,
        m=config.m,
        m_attn=config.m_attn,
        eps=config.eps,
        t1=config.t1,
        num_saves=config.num_saves,
        rtol=config.rtol,
        atol=config.atol,
        solver=gf.stiff_solver() if config.stiff else None,
        max_steps=config.max_steps,
        find_stall=config.find_stall,
    )
    a = to_host(a)
    run.log(f"horizon: {horizon}")
    record_analysis(run, a, tolerances=(config.rtol, config.atol), horizon=horizon)
    _departure(run, a, names)
    # the orders in eps compare deviations of relative size (eps e^{mu1 t})^2 ~ 1e-4 between
    # flows: the text flow's tolerances (rtol 1e-6) would be of their size, so the origin's
    # short flows are solved tighter
    origin_evidence(run, config, chain, a, tolerances=ORIGIN_TOLERANCES)
    if not config.proxy:
        proxy_not_run(run, config)
        _query_stories(run, queries, a, None, pi, names, counts)
        _save_arrays(run, a, pi, P, names, queries)
        _flow_figure(run, queries, a, pi, names)
        return
    # the flow's initial point (saved at t = 0) is the descents' initialisation too
    model0 = jax.tree_util.tree_map(lambda x: x[0], a.trajectory)
    rows = [names.index(q) for q in queries]
    real, proxy = descents(run, config, corpus, jnp.asarray(pi), jnp.asarray(P), model0, rows)
    t = np.asarray(real.steps[0]) * config.lr
    proxy_checks(run, config, t, real, proxy, pi, names)
    flow_loss = np.interp(t, a.ts, a.metrics["loss"])
    run.scalar(
        "max_gap_to_flow",
        {
            "loss_real": float(np.max(np.abs(real.population_loss.mean(0) - flow_loss))),
            "loss_bigram": float(np.max(np.abs(proxy.population_loss.mean(0) - flow_loss))),
        },
    )
    _query_stories(run, queries, a, real, pi, names, counts)
    _save_arrays(run, a, pi, P, names, queries, t, real, proxy)
    _text_figure(run, config, queries, a, t, real, proxy, pi, names)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyStoriesConfig(TextConfig):
    """``focus-dilution-text`` on TinyStories with the paper's TinyStories queries."""

    corpus_path: str = "tinystories"
    queries: tuple[str, ...] = ("the", ",", "a", "full", "been")
    vocab_size: int = 32


@register_experiment(
    "focus-dilution-tinystories",
    TinyStoriesConfig,
    "TinyStories: bigram population flow, proxy test, attention stories of the paper's queries",
    title="TinyStories: the paper's queries",
    docs="focus_dilution.md#real-text",
)
def run_tinystories(config: TinyStoriesConfig, run: Run) -> None:
    """:func:`run_text` on TinyStories."""
    run_text(config, run)
