"""``focus-dilution``: the population flow on one chain, its stages and rates (any ``P``)."""

from __future__ import annotations

import jax
import numpy as np

from ... import gradflow as gf
from ...runs import Run
from ._common import chain, origin_evidence, record_analysis, to_host
from ._configs import FocusDilutionConfig
from ._figures import dynamics_figure, spectra_figure


def run_focus_dilution(config: FocusDilutionConfig, run: Run) -> None:
    """One chain's :class:`gradflow.FlowAnalysis` (its horizon grown until stage IV's signature
    appears or ``horizon_budget`` is spent): its checks, arrays and figures."""
    mc = chain(config.pi, config.lam, config.P)
    run.scalar("chain", {"pi": np.asarray(mc.pi), "P": np.asarray(mc.P)})
    keys = (
        "m",
        "m_attn",
        "eps",
        "num_saves",
        "rtol",
        "atol",
        "max_steps",
        "departure",
        "new_direction_ratio",
    )
    a, horizon = gf.analyse_flow_until(
        mc,
        budget=config.horizon_budget,
        key=jax.random.key(config.seed),
        t1=config.t1 or None,
        **{k: getattr(config, k) for k in keys},
    )
    a = to_host(a)
    run.log(f"horizon: {horizon}")
    c = record_analysis(run, a, tolerances=(config.rtol, config.atol), horizon=horizon)["c"]
    run.log(f"c = {c:.4g}: attention first moves {'onto' if c > 0 else 'off'} the top token")
    run.scalar("rates", {k: float(v) for k, v in vars(a.rates).items()})
    st = a.stages
    run.log("stages: " + ", ".join(f"{k} t={v:.4g}" for k, v in st.times().items()))
    # log(1/eps) / mu1 (gradflow.predicted_escape_time) on the host: no eager compile
    t_esc = float(np.log(1.0 / config.eps) / float(a.rates.condensation))
    run.scalar("condensation_escape", {"predicted": t_esc, "observed": float(st.condensation.time)})
    tokens = np.arange(np.shape(a.trajectory.W0)[1])
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
        coords={"token": tokens, "query": tokens, "key": tokens},
    )
    dynamics_figure(run, a)
    spectra_figure(run, a)
    origin_evidence(run, config, mc, a)
