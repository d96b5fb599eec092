"""The focus-and-dilution experiments' configs, without JAX (``--show-config`` stays fast). A
field's meaning is its line in an ``Attributes`` section (of its class or a base); its range is
its entry in a ``RANGES`` table (of its class or a base), checked by ``ExperimentConfig``."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from ... import data
from ...runs import ConfigError, ExperimentConfig

HEADLINE_PI = (0.75, 0.19, 0.05, 0.01)


def need(ok, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``ok``."""
    if not ok:
        raise ConfigError(message)


def check_pi(pi) -> None:
    """A strictly positive probability vector (``gradflow.MarkovChain`` checks it again)."""
    p = np.asarray(pi, float)
    ok = p.ndim == 1 and p.size >= 2 and np.all(p > 0) and abs(p.sum() - 1) <= 1e-6
    need(ok, f"pi must be strictly positive and sum to 1, got {tuple(pi)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Config(ExperimentConfig):
    """Attributes:
    m: embedding width.
    m_attn: attention width m'.
    """

    RANGES: ClassVar[str] = "m >= 2; m_attn >= 1"  # checked by ExperimentConfig
    m: int = 6
    m_attn: int = 6


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Solved(_Config):
    """Attributes:
    rtol: relative tolerance of the adaptive solver.
    atol: absolute tolerance of the adaptive solver.
    num_saves: log-spaced save times of the flow (a phase shorter than their spacing is missed).
    max_steps: solver step budget.
    """

    RANGES: ClassVar[str] = "rtol > 0; atol > 0; num_saves >= 50; max_steps > 0"
    rtol: float = 1e-7
    atol: float = 1e-10
    num_saves: int = 2000
    max_steps: int = 100_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Analysis(_Solved):
    """Attributes:
    eps: initialisation scale (entries i.i.d. N(0, eps^2)).
    horizon_budget: the longest horizon, in first horizons, while the stage the run needs is not
        reached (end time and step budget multiplied by ``horizon_growth`` each time).
    horizon_growth: the factor of each growth of the horizon (each try solves from t = 0).
    origin_eps: initialisation scales of the flows near the origin (at least 3, distinct).
    origin_amplitude: the window near the origin ends where the largest eps has grown to this.
    """

    RANGES: ClassVar[str] = (
        "eps (0, 0.1); horizon_budget >= 1; horizon_growth > 1; origin_eps (0, 0.1); "
        "origin_amplitude (0, 1)"
    )
    eps: float = 1e-3
    horizon_budget: float = 4.0
    horizon_growth: float = 2.0
    origin_eps: tuple[float, ...] = (0.02, 0.01, 0.005, 0.0025)
    origin_amplitude: float = 0.1

    def validate(self) -> None:
        super().validate()
        n = len(set(self.origin_eps))
        need(n == len(self.origin_eps) >= 3, f"need at least 3 distinct origin_eps, got {n}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FocusDilutionConfig(_Analysis):
    """Population gradient flow on one Markov chain.

    Attributes:
        P: a row-stochastic transition matrix (rows as lists); empty = the paper's family.
        pi: stationary law: of the family (empty = (0.75, 0.19, 0.05, 0.01)), or of ``P``
            (empty = computed; a given one must be stationary).
        lam: self-transition weight of the paper's family ``P = lam I + (1 - lam) 1 pi^T``.
        t1: end time of the flow (0 = the default from the rates).
        departure: stage threshold (``gradflow.detect_stages``).
        new_direction_ratio: stage threshold (``gradflow.detect_stages``).
    """

    RANGES: ClassVar[str] = "lam [0, 1); t1 >= 0; departure (0, 1); new_direction_ratio (0, 1)"
    P: tuple[tuple[float, ...], ...] = ()
    pi: tuple[float, ...] = ()
    lam: float = 0.5
    t1: float = 0.0
    departure: float = 0.05
    new_direction_ratio: float = 0.1

    def validate(self) -> None:
        super().validate()
        if self.P:  # a matrix: gradflow.MarkovChain decides (irreducible, stationary pi)
            from ._common import chain

            chain(self.pi, self.lam, self.P)
        else:
            check_pi(self.pi or HEADLINE_PI)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationConfig(_Solved):
    """Population flows for several ``P`` with one stationary ``pi`` (end time: each chain's
    default; the headline's save count, so that both share compiled programs).

    Attributes:
        pi: the shared stationary distribution.
        eps: initialisation scale (entries i.i.d. N(0, eps^2)).
        lams: values of the paper's family ``P = lam I + (1 - lam) 1 pi^T``.
        n_random: random reversible (Metropolis-Hastings) chains, seeded by ``seed``.
        laziness: holding mass of the random chains.
    """

    RANGES: ClassVar[str] = "eps (0, 0.1); lams [0, 1); n_random >= 0; laziness [0, 1)"
    pi: tuple[float, ...] = HEADLINE_PI
    eps: float = 1e-3
    lams: tuple[float, ...] = (0.2, 0.5, 0.8)
    n_random: int = 3
    laziness: float = 0.2

    def validate(self) -> None:
        super().validate()
        check_pi(self.pi)
        need(len(self.lams) + self.n_random >= 1, "need at least one chain (lams or n_random)")

    @classmethod
    def quick(cls) -> dict:
        return {"lams": (0.5,), "n_random": 2}


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Family(ExperimentConfig):
    """Attributes:
    pi_top: probability of the frequent token.
    d: vocabulary size.
    lam: self-transition weight of the paper's family.
    """

    pi_top: float = 0.75
    d: int = 4
    lam: float = 0.5

    def check_family(self, c, deltas) -> None:
        """``pi = (pi_top, (1 - pi_top)/(d - 1) + delta c)`` is a probability at every delta."""
        ok = self.d >= 3 and 0 < self.pi_top < 1 and 0 <= self.lam < 1
        need(ok, f"need d >= 3, pi_top in (0, 1), lam in [0, 1): {self.d}, {self.pi_top}")
        for x in deltas:
            p = (1 - self.pi_top) / (self.d - 1) + x * c
            need(np.all(p > 0), f"delta={x} makes a probability non-positive")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeltaConfig(_Family, _Solved):
    """One sweep over ``delta`` (including 0) and ``eps`` for the low-frequency family
    ``pi = (pi_top, (1 - pi_top)/(d - 1) + delta c)``, ``P = lam I + (1 - lam) 1 pi^T``.

    Attributes:
        direction: ``c`` (centred; empty = linear from 1 to -1).
        deltas: asymmetries: 0 and at least 4 positive, where lambda_T is linear in delta
            (below 0.0075 for the default chain) for the exponent to be decided.
        eps_values: initialisation scales (at least 3, for the slope in log(1/eps)).
        t1: end time of every flow (escape times grow like 1/delta).
        new_direction_ratio: sigma2(W0)/sigma1(W0) level of the new-direction stage.
    """

    RANGES: ClassVar[str] = "eps_values (0, 0.1); t1 > 0; deltas >= 0"
    direction: tuple[float, ...] = ()
    deltas: tuple[float, ...] = (0.0, 0.002, 0.003, 0.004, 0.005, 0.0075)
    eps_values: tuple[float, ...] = (1e-2, 1e-3, 1e-4)
    t1: float = 100_000.0
    num_saves: int = 800
    new_direction_ratio: float = 0.1

    def direction_vector(self) -> np.ndarray:
        """The centred asymmetry direction ``c``."""
        c = np.asarray(self.direction or np.linspace(1.0, -1.0, self.d - 1), dtype=float)
        return c - c.mean()

    def validate(self) -> None:
        super().validate()
        n = len(self.direction)
        need(n in (0, self.d - 1), f"direction must have d - 1 = {self.d - 1} entries, got {n}")
        c = self.direction_vector()
        need(np.any(c), "direction must not be constant (it is centred to sum to zero)")
        need(0.0 in self.deltas, "deltas must include 0 (the symmetric case)")
        need(sum(x > 0 for x in self.deltas) >= 4, "deltas needs at least 4 positive values")
        self.check_family(c, self.deltas)
        need(len(set(self.eps_values)) >= 3, f"need at least 3 distinct eps: {self.eps_values}")

    @classmethod
    def quick(cls) -> dict:
        return {"deltas": (0.0, 0.01, 0.015, 0.02, 0.03), "t1": 12000.0, "num_saves": 250}


@dataclasses.dataclass(frozen=True, kw_only=True)
class FiniteConfig(_Config):
    """Finite-(N, s) gradient descent (one sweep over sizes and seeds) and Adam at the largest
    size, against the population references.

    Attributes:
        pi: stationary distribution of the paper's family.
        lam: self-transition weight of the paper's family.
        eps: initialisation scale; the population limit needs n s >> eps^-2.
        sizes_n: sequence counts (at least 3, paired with ``sizes_s``).
        sizes_s: sequence lengths.
        n_seeds: seeds per size (data and initialisation).
        lr: gradient-descent step (flow time ``t = k lr``).
        num_steps: gradient-descent steps.
        record_every: steps between records.
        adam_lr: Adam's learning rate.
        adam_steps: Adam's steps (at the largest size).
        flow_reference: also compare with the flow itself (reported beside the evidence).
    """

    RANGES: ClassVar[str] = (
        "lam [0, 1); eps (0, 0.1); sizes_n >= 1; sizes_s >= 2; n_seeds >= 2; lr > 0; adam_lr > 0"
    )
    pi: tuple[float, ...] = HEADLINE_PI
    lam: float = 0.5
    eps: float = 0.05
    sizes_n: tuple[int, ...] = (256, 1024, 4096, 16384)
    sizes_s: tuple[int, ...] = (16, 32, 64, 128)
    n_seeds: int = 4
    lr: float = 0.5
    num_steps: int = 400
    record_every: int = 10
    adam_lr: float = 0.01
    adam_steps: int = 1000
    flow_reference: bool = True

    def validate(self) -> None:
        super().validate()
        check_pi(self.pi)
        n, s = self.sizes_n, self.sizes_s
        need(len(n) == len(s) >= 3, f"sizes_n and sizes_s must pair up (>= 3 sizes): {n}, {s}")
        steps = (self.num_steps, self.adam_steps)
        need(
            not any(k % self.record_every for k in steps), "steps must be multiples of record_every"
        )

    @classmethod
    def quick(cls) -> dict:
        return dict(
            sizes_n=(64, 256, 1024),
            sizes_s=(8, 16, 32),
            n_seeds=3,
            adam_steps=400,
            flow_reference=False,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class LyapunovConfig(_Family):
    """Rank-one critical points of the low-frequency family (``focus-dilution-delta``'s) at
    ``delta = 0`` and a geometric grid.

    Attributes:
        delta_min: smallest positive delta.
        delta_max: largest delta.
        n_deltas: positive deltas (geometric from delta_min to delta_max, at least 4).
        eps: scale of the rank-one flow's initialisation.
        t_stall: end time of the rank-one flow at delta = 0.
    """

    delta_min: float = 3.125e-4
    delta_max: float = 0.04
    n_deltas: int = 8
    eps: float = 1e-3
    t_stall: float = 3000.0

    def validate(self) -> None:
        c = np.linspace(1.0, -1.0, max(self.d - 1, 1))
        self.check_family(c - c.mean(), [self.delta_max])
        ok = 0 < self.delta_min < self.delta_max and self.n_deltas >= 4
        need(ok, "need 0 < delta_min < delta_max and n_deltas >= 4")
        need(0 < self.eps < 0.1 and self.t_stall > 0, "need eps in (0, 0.1) and t_stall > 0")

    @classmethod
    def quick(cls) -> dict:
        return {"n_deltas": 6, "delta_max": 0.01}


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextConfig(_Analysis):
    """Bigram chain of a corpus, its population flow, and early training against the proxy.

    Attributes:
        corpus_path: "wikitext-2", "tinystories" (full file if fetched, else the packaged
            excerpt) or a text file (WikiText raw, TinyStories or plain text).
        data_dir: a folder of full corpora, <data_dir>/<name>/<file> ("": the command line's).
        corpus_format: "auto" (detected), "wikitext", "tinystories" or "plain".
        level: "word" (top-k words + queries + <oov>) or "char".
        line_breaks: "keep" (the token <nl>), "spaces" (running text) or "paragraph" (<par>
            per blank-line break): :class:`jaxdyn.data.LineBreaks`.
        vocab_size: the k most frequent tokens kept (including <oov>).
        oov: "drop" out-of-vocabulary tokens from the stream, or "keep" one <oov> bucket.
        queries: tokens whose attention story is reported (absent ones replaced, logged).
        max_chars: read only the first lines up to this many characters (0 = the whole file).
        smoothing: additive smoothing of the bigram counts.
        t1: end of the training (t = steps * lr) and the flow's first horizon.
        t_early: end of the early training where the bigram proxy is tested.
        stiff: solve the flow with ``gradflow.stiff_solver()`` instead of ``diffrax.Tsit5()``.
        n_windows: training windows per draw (distinct windows of the stream).
        s: window length (inputs; the target is one more token).
        lr: gradient-descent step.
        n_draws: window draws per data source (the spread of the proxy test).
        descent_width: proxy descents vectorised together (twice it per checkpointed chunk).
        record_every: steps between records.
        proxy_effect_loss: the loss difference (nats) the proxy test must exclude.
        proxy_effect_attention: the same for the attention the frequent token receives.
        find_stall: search the rank-one stall for ``lambda_T`` (reported only).
        proxy: run the bigram-proxy test (most of the time; without it its checks are not_run).
    """

    RANGES: ClassVar[str] = (
        "vocab_size >= 3; s >= 2; n_windows >= 2; n_draws >= 2; "
        "descent_width >= 1; smoothing > 0; lr > 0; t_early > 0"
    )
    corpus_path: str = "wikitext-2"
    data_dir: str = ""
    corpus_format: Literal["auto", "wikitext", "tinystories", "plain"] = "auto"
    level: Literal["word", "char"] = "word"
    line_breaks: Literal["keep", "spaces", "paragraph"] = "keep"
    vocab_size: int = 64
    oov: Literal["drop", "keep"] = "drop"
    queries: tuple[str, ...] = ("continue",)
    max_chars: int = 0
    smoothing: float = 1e-3
    m: int = 8
    m_attn: int = 8
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
    find_stall: bool = True
    proxy: bool = True

    def corpus(self):
        """The corpus file (a known corpus's best copy, or the file given)."""
        return data._corpora.corpus_path(self.corpus_path, data_dir=self.data_dir or None)

    def validate(self) -> None:
        try:
            self.corpus()
        except ValueError as err:
            raise ConfigError(f"corpus_path: {err}") from None
        super().validate()
        need(self.t_early <= self.t1, f"need t_early <= t1, got {self.t_early}, {self.t1}")
        steps = round(self.t1 / self.lr)
        ok = steps >= self.record_every and not steps % self.record_every
        need(ok, f"t1 / lr = {self.t1 / self.lr:g} steps must be a multiple of record_every")

    @classmethod
    def quick(cls) -> dict:
        return dict(
            max_chars=300_000,
            n_windows=2048,
            n_draws=6,
            num_saves=80,
            t1=200.0,
            horizon_growth=4.0,  # WikiText departs at t ~ 2200: 200, 800, 3200 as doubling ends
            horizon_budget=64.0,  # up to t = 12800, for chains that depart late
            find_stall=False,
            proxy=False,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyStoriesConfig(TextConfig):
    """``focus-dilution-text`` on TinyStories with the paper's TinyStories queries."""

    corpus_path: str = "tinystories"
    queries: tuple[str, ...] = ("the", ",", "a", "full", "been")
    vocab_size: int = 32

    @classmethod
    def quick(cls) -> dict:
        # the departure comes early here (t ~ 300): doubling stops at 400, growth 4 at 800
        return {**TextConfig.quick(), "horizon_growth": 2.0}
