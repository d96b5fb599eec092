"""``focus-dilution``: the population flow on one chain, its stages and rates (any ``P``)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from ... import gradflow as gf
from ...runs import ConfigError, ExperimentConfig, Run, register_experiment
from ._common import chain, record_analysis, to_host
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
        if not 0 < self.new_direction_ratio < 1:
            raise ConfigError(
                f"new_direction_ratio must be in (0, 1), got {self.new_direction_ratio}"
            )


def analyse(config: FocusDilutionConfig, mc: gf.MarkovChain):
    """:func:`gradflow.analyse_flow_to_new_direction` with the config's settings: the horizon
    grows from ``t1`` (or the default) until stage IV's signature appears or ``horizon_budget``
    times the first horizon is spent. Returns ``(analysis, why the horizon stopped)``."""
    return gf.analyse_flow_to_new_direction(
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


@register_experiment(
    "focus-dilution",
    FocusDilutionConfig,
    "population gradient flow on any Markov chain: condensation, focus, dilution, new direction",
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
    t_esc = float(gf.predicted_escape_time(config.eps, a.rates.condensation))
    run.scalar("condensation_escape", {"predicted": t_esc, "observed": float(st.condensation.time)})
    run.save_arrays(
        ts=a.ts,
        W0=a.trajectory.W0,
        embedding_pca=gf.embedding_pca(a.trajectory.W0),
        spectrum_origin=a.spectrum_origin.eigenvalues,
        spectrum_saddle=a.spectrum_saddle.eigenvalues,
        stall_tangential=a.stall.tangential,
        stall_transverse=a.stall.transverse,
        **{k: v for k, v in a.metrics.items() if k != "gamma"},
    )
    dynamics_figure(run, a)
    spectra_figure(run, a)
