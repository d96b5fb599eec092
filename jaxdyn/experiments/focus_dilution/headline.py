"""``focus-dilution``: the population flow on one chain, its stages and rates (any ``P``)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ... import gradflow as gf
from ..._status import Status
from ...runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from ._common import HEADLINE_PI, chain, record_analysis, to_host
from ._figures import dynamics_figure, spectra_figure


@dataclasses.dataclass(frozen=True, kw_only=True)
class FocusDilutionConfig(ExperimentConfig):
    """Population gradient flow on one Markov chain.

    Attributes:
        P: a row-stochastic transition matrix (rows as lists); empty = the paper's family
            ``P = lam I + (1 - lam) 1 pi^T``.
        pi: stationary distribution: with ``P`` empty, the family's ``pi`` (empty = the
            headline ``(0.75, 0.19, 0.05, 0.01)``); with ``P`` given, empty = computed from
            ``P`` (a given one must be stationary).
        lam: self-transition weight of the paper's family (used only when ``P`` is empty).
        m: embedding width.
        m_attn: attention width m'.
        eps: initialisation scale (entries i.i.d. N(0, eps^2)).
        t1: end time of the flow (0 = the default from the rates, ``gradflow.default_end_time``).
        num_saves: log-spaced save times (``gradflow.analyse_flow``: a phase shorter than
            the save spacing can be missed).
        rtol: relative tolerance of the adaptive solver.
        atol: absolute tolerance of the adaptive solver.
        max_steps: solver step budget.
        departure: stage threshold (``gradflow.detect_stages``).
        new_direction_ratio: stage threshold (``gradflow.detect_stages``).
        horizon_budget: the longest horizon, as a multiple of the first one (``t1`` or the
            default): the flow is extended (end time and step budget doubled) until stage
            IV's signature appears or this is spent.
        origin_eps: initialisation scales of the flows near the origin
            (``gradflow.origin_scaling``; at least 3, for the orders in ``eps``).
        origin_amplitude: the window near the origin ends where the largest ``eps`` has grown
            to ``eps e^{mu1 t}`` = this (the linear regime).
    """

    P: tuple[tuple[float, ...], ...] = ()
    pi: tuple[float, ...] = ()
    lam: float = 0.5
    m: int = 6
    m_attn: int = 6
    eps: float = 1e-3
    t1: float = 0.0
    num_saves: int = 2000
    rtol: float = 1e-7
    atol: float = 1e-10
    max_steps: int = 100_000
    departure: float = 0.05
    new_direction_ratio: float = 0.1
    horizon_budget: float = 4.0
    origin_eps: tuple[float, ...] = (0.02, 0.01, 0.005, 0.0025)
    origin_amplitude: float = 0.1

    def validate(self) -> None:
        chain(self.pi, self.lam, self.P)
        if not 0 < self.eps < 0.1:
            raise ConfigError(f"eps must be in (0, 0.1) (small initialisation), got {self.eps}")
        if self.t1 < 0:
            raise ConfigError(f"t1 must be >= 0 (0 = the default from the rates), got {self.t1}")
        if self.m < 2 or self.m_attn < 1:
            raise ConfigError(f"need m >= 2 and m_attn >= 1, got m={self.m}, m_attn={self.m_attn}")
        if self.num_saves < 50:
            raise ConfigError(f"num_saves must be >= 50, got {self.num_saves}")
        if not (self.rtol > 0 and self.atol > 0 and self.max_steps > 0 and 0 < self.departure < 1):
            raise ConfigError("need rtol, atol, max_steps > 0 and departure in (0, 1)")
        if not self.horizon_budget >= 1:
            raise ConfigError(f"horizon_budget must be >= 1, got {self.horizon_budget}")
        if len(self.origin_eps) < 3 or not all(0 < e < 0.1 for e in self.origin_eps):
            raise ConfigError(f"need at least 3 origin_eps in (0, 0.1), got {self.origin_eps}")
        if len(set(self.origin_eps)) != len(self.origin_eps):
            raise ConfigError(f"origin_eps must be distinct, got {self.origin_eps}")
        if not 0 < self.origin_amplitude < 1:
            raise ConfigError(f"origin_amplitude must be in (0, 1), got {self.origin_amplitude}")
        if not 0 < self.new_direction_ratio < 1:
            raise ConfigError(
                f"new_direction_ratio must be in (0, 1), got {self.new_direction_ratio}"
            )


def analyse(config: FocusDilutionConfig, mc: gf.MarkovChain):
    """:func:`gradflow.analyse_flow_until` with the config's settings: the horizon
    grows from ``t1`` (or the default) until stage IV's signature appears or ``horizon_budget``
    times the first horizon is spent. Returns ``(analysis, why the horizon stopped)``."""
    return gf.analyse_flow_until(
        mc,
        budget=config.horizon_budget,
        key=jax.random.key(config.seed),
        m=config.m,
        m_attn=config.m_attn,
        eps=config.eps,
        t1=config.t1 or None,
        num_saves=config.num_saves,
        rtol=config.rtol,
        atol=config.atol,
        max_steps=config.max_steps,
        departure=config.departure,
        new_direction_ratio=config.new_direction_ratio,
    )


def origin_orders(mc: gf.MarkovChain, direction, eps, amplitude: float, **kwargs):
    """:func:`gradflow.origin_scaling` on ``[0, t1]`` with ``max(eps) e^{mu1 t1} =
    amplitude``, read at equal times: the deviation from the linearisation at ``t1``, the
    lemma's ``max_t deviation / e^{2 mu1 t}`` (``C eps^2``), and the attention parameters'
    change at ``t1``. Returns ``(eps ascending, those three (E,) arrays, the scaling)``."""
    eps = np.sort(np.asarray(eps, float))
    pi = np.asarray(mc.pi)
    mu1 = float(np.linalg.norm(pi) * np.linalg.norm(pi - 1.0 / pi.size))  # condensation_rate
    t1 = float(np.log(amplitude / eps[-1]) / mu1)
    o = to_host(gf.origin_scaling(mc, direction, eps, t1, **kwargs))
    growth = np.exp(2 * float(o.rate) * o.ts[1:])
    lemma = np.max(o.deviation[:, 1:] / growth[None, :], axis=1)
    return eps, o.deviation[:, -1], lemma, o.attention_change[:, -1], o


def origin_evidence(run: Run, config, mc: gf.MarkovChain, a, *, tolerances=None) -> None:
    """Lemma 3.1 at the origin and the frozen attention, as orders in ``eps`` at equal times:
    the paper's bounds and the orders derived here (``gradflow.origin_scaling``, float64), from
    the analysis's own initial direction."""
    if mc.pi.dtype != np.float64:
        run.log("origin orders not measured: they need float64 (x64 = true)")
        return
    direction = jax.tree_util.tree_map(lambda x: np.asarray(x[0]) / config.eps, a.trajectory)
    eps, dev, lemma, att, o = origin_orders(
        mc,
        direction,
        config.origin_eps,
        config.origin_amplitude,
        # the analysis's flow settings: its compiled flow is reused
        num_saves=config.num_saves,
        rtol=(tolerances or (config.rtol, config.atol))[0],
        atol=(tolerances or (config.rtol, config.atol))[1],
        max_steps=config.max_steps,
    )
    run.consistency(
        "origin_flows_converged",
        expected=len(eps),
        measured=int(np.sum(Status.code(o.status) == Status.code(Status.successful))),
        basis="solver status per eps",
        note=f"steps {np.asarray(o.num_steps).tolist()}",
    )
    window = f"at t = {float(o.ts[-1]):.4g} (max eps e^(mu1 t) = {config.origin_amplitude:g})"
    run.evidence(
        "linearisation_bound",
        gf.claims.linearisation_bound(eps, lemma),
        note=f"C estimates max_t dev / (eps^2 e^(2 mu1 t)) = {np.round(lemma / eps**2, 6).tolist()}"
        f" for eps = {eps.tolist()}, t in [0, {float(o.ts[-1]):.4g}]",
    )
    run.evidence(
        "linearisation_error_order",
        gf.claims.linearisation_error_order(eps, dev),
        note=window,
    )
    run.evidence(
        "attention_frozen_at_origin",
        gf.claims.attention_frozen_at_origin(eps, att),
        note=window + f"; changes {np.asarray(att).tolist()}",
    )
    run.evidence(
        "attention_change_order",
        gf.claims.attention_change_order(eps, att),
        note=window,
    )
    run.save_arrays(
        origin_eps=eps,
        origin_ts=o.ts,
        origin_deviation=o.deviation,
        origin_attention_change=o.attention_change,
        dims={
            "origin_eps": ("eps",),
            "origin_deviation": ("eps", "origin_time"),
            "origin_attention_change": ("eps", "origin_time"),
        },
    )


def _for_origin_experiments(check: str):
    """Register a counterfactual for every experiment that records the origin's orders."""

    def register(fn):
        for experiment in ORIGIN_EXPERIMENTS:
            negative_control(experiment, check)(fn)
        return fn

    return register


ORIGIN_EXPERIMENTS = ("focus-dilution", "focus-dilution-text", "focus-dilution-tinystories")


def _embedding_not_small():
    # counterfactual: W0 initialised at scale 1 (the other blocks at eps): the linearisation at
    # 0 and the frozen attention both fail
    mc = gf.MarkovChain.paper(np.asarray(HEADLINE_PI), 0.5)
    direction = gf.init_transformer(jax.random.key(0), 4, 6, 6, 1.0)
    return origin_orders(mc, direction, (0.02, 0.01, 0.005, 0.0025), 0.1, embedding_scale=1.0)


@_for_origin_experiments("linearisation_bound")
def _lemma_with_an_embedding_not_small():
    eps, _, lemma, _, _ = _embedding_not_small()
    return gf.claims.linearisation_bound(eps, lemma)


@_for_origin_experiments("attention_frozen_at_origin")
def _attention_with_an_embedding_not_small():
    eps, _, _, att, _ = _embedding_not_small()
    return gf.claims.attention_frozen_at_origin(eps, att)


@_for_origin_experiments("linearisation_error_order")
def _a_quadratic_deviation():
    # a field with a quadratic term: the deviation is O(eps^2)
    x = np.array([0.0025, 0.005, 0.01, 0.02])
    return gf.claims.linearisation_error_order(x, 0.7 * x**2 * (1 + x))


@_for_origin_experiments("attention_change_order")
def _a_cubic_attention_change():
    x = np.array([0.0025, 0.005, 0.01, 0.02])
    return gf.claims.attention_change_order(x, 0.7 * x**3 * (1 + x**2))


@register_experiment(
    "focus-dilution",
    FocusDilutionConfig,
    "population gradient flow on any Markov chain: condensation, focus, dilution, new direction",
    title="Focus and dilution on one Markov chain",
    docs="focus_dilution.md#headline",
)
def run_focus_dilution(config: FocusDilutionConfig, run: Run) -> None:
    """One chain's :class:`gradflow.FlowAnalysis`: its checks, arrays and figures."""
    mc = chain(config.pi, config.lam, config.P)
    run.scalar("chain", {"pi": np.asarray(mc.pi), "P": np.asarray(mc.P)})
    a, horizon = analyse(config, mc)
    a = to_host(a)
    run.log(f"horizon: {horizon}")
    rates = record_analysis(run, a, tolerances=(config.rtol, config.atol), horizon=horizon)
    run.log(
        f"c = {rates['c']:.4g}: attention first moves "
        f"{'onto' if rates['c'] > 0 else 'off'} the most frequent token"
    )
    run.scalar("rates", {k: float(v) for k, v in vars(a.rates).items()})
    st = a.stages
    run.log("stages: " + ", ".join(f"{k} t={v:.4g}" for k, v in st.times().items()))
    # log(1/eps) / mu1 (gradflow.predicted_escape_time) on the host: no eager compile
    t_esc = float(np.log(1.0 / config.eps) / float(a.rates.condensation))
    run.scalar("condensation_escape", {"predicted": t_esc, "observed": float(st.condensation.time)})
    run.save_arrays(
        ts=a.ts,
        W0=a.trajectory.W0,
        embedding_pca=a.embedding_pca(),
        spectrum_origin=a.spectrum_origin.eigenvalues,
        spectrum_saddle=a.spectrum_saddle.eigenvalues,
        stall_tangential=a.stall.tangential,
        stall_transverse=a.stall.transverse,
        **{k: v for k, v in a.metrics.items() if k != "gamma"},
        dims={
            "W0": ("time", "token", "embedding"),
            "embedding_pca": ("time", "token", "component"),
            "spectrum_origin": ("eigenvalue",),
            "spectrum_saddle": ("eigenvalue",),
            "stall_tangential": ("tangential_exponent",),
            "stall_transverse": ("transverse_exponent",),
            "attention": ("time", "query", "key"),
            "entropy_query": ("time", "query"),
            "sv_W0": ("time", "singular_value"),
            "sv_W1": ("time", "singular_value"),
            "sv_Phi": ("time", "singular_value"),
        },
        coords={
            "token": np.arange(np.shape(a.trajectory.W0)[1]),
            "query": np.arange(np.shape(a.trajectory.W0)[1]),
            "key": np.arange(np.shape(a.trajectory.W0)[1]),
        },
    )
    dynamics_figure(run, a)
    spectra_figure(run, a)
    origin_evidence(run, config, mc, a)
