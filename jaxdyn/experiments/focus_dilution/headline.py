"""``focus-dilution``: the population flow on one chain, its stages and rates (any ``P``)."""

from __future__ import annotations

import math

import jax
import numpy as np

from ... import gradflow as gf
from ...plotting import new_figure, time_series
from ...runs import Run
from ._common import chain, keywords, origin_evidence, record_analysis, to_host
from ._configs import FocusDilutionConfig


def run_focus_dilution(config: FocusDilutionConfig, run: Run) -> None:
    """One chain's :class:`gradflow.FlowAnalysis` (its horizon grown until stage IV's signature
    appears or ``horizon_budget`` is spent): its checks, arrays and figures."""
    mc = chain(config.pi, config.lam, config.P)
    run.scalar("chain", {"pi": np.asarray(mc.pi), "P": np.asarray(mc.P)})
    a, horizon = gf.analyse_flow_until(
        mc,
        budget=config.horizon_budget,
        growth=config.horizon_growth,
        key=jax.random.key(config.seed),
        **keywords(config, gf.analyse_flow) | {"t1": config.t1 or None},
    )
    a = to_host(a)
    run.log(f"horizon: {horizon}")
    c = record_analysis(run, a, config, horizon=horizon)["c"]
    run.log(f"c = {c:.4g}: attention first moves {'onto' if c > 0 else 'off'} the top token")
    run.scalar("rates", {k: float(v) for k, v in vars(a.rates).items()})
    st = a.stages
    run.log("stages: " + ", ".join(f"{k} t={v:.4g}" for k, v in st.times().items()))
    # log(1/eps) / mu1 (gradflow.predicted_escape_time) on the host: no eager compile
    t_esc = float(np.log(1.0 / config.eps) / float(a.rates.condensation))
    run.scalar("condensation_escape", {"predicted": t_esc, "observed": float(st.condensation.time)})
    run.save_arrays(ts=a.ts, **a.labelled_arrays())
    dynamics_figure(run, a)
    spectra_figure(run, a)
    origin_evidence(run, config, mc, a)


def dynamics_figure(run: Run, a, name: str = "dynamics") -> None:
    """Loss, attention, entropies, focus rate, singular values and embedding PCA over time, every
    panel with the stage times and its reference level (dotted)."""
    keep = a.ts > 0
    t, met, pi = a.ts[keep], {k: np.asarray(v)[keep] for k, v in a.metrics.items()}, a.chain.pi
    d, H = len(pi), float(a.stages.uniform_entropy)
    stages = {k: v for k, v in a.stages.times().items() if math.isfinite(v)}
    queries = [f"query {q} (pi={pi[q]:.3g})" for q in range(d)] if d <= 8 else None
    sv = met["sv_W0"]
    panels = (  # curves, labels, reference levels, log y, title
        ({"loss": met["loss"]}, None, (math.log(d), H), False, "population loss"),
        (met["entropy_query"], queries, (H,), False, "attention entropy per query"),
        ({"sum_q pi_q w_q,top": met["frequent_weight"], "w_top,top": met["frequent_query_weight"]},
         None, (float(np.max(pi)),), False, "attention on the most frequent token"),
        ({"k(t) = -gamma^T dL/dPhi gamma": met["focus_rate_path"]}, None, (float(a.rates.focus),),
         False, "signed focus rate along the flow"),
        (sv, [f"sigma{i + 1}(W0)" for i in range(sv.shape[1])], (), True, "singular values of W0"),
    )  # fmt: skip
    fig, axes = new_figure(2, 3)
    for ax, (ys, labels, levels, logy, title) in zip(axes.flat, panels, strict=False):
        time_series(ax, t, ys, labels=labels, logx=True, logy=logy, stages=stages, title=title)
        for level, shade in zip(levels[::-1], ("0.3", "0.5"), strict=False):  # the last darker
            ax.axhline(level, color=shade, ls=":", lw=0.8)
    pca, ax = a.embedding_pca(), axes[1, 2]
    for i in range(min(d, 8)):
        y = pca[:, i, 1] if pca.shape[2] > 1 else 0 * pca[:, i, 0]
        (line,) = ax.plot(pca[:, i, 0], y, lw=1.2, label=f"row {i}")
        ax.plot(pca[-1, i, 0], y[-1], "o", ms=3, color=line.get_color())
    ax.set_title("PCA of embedding rows W0[i, :](t)", fontsize=10)
    ax.legend(fontsize=7)
    run.save_figure(fig, name)


def spectra_figure(run: Run, a, name: str = "jacobian_spectra") -> None:
    """Eigenvalues of ``J`` at the origin, at the visited saddle and at the rank-one stall."""
    fig, axes = new_figure(1, 3)
    for ax, spec, title in (
        (axes[0, 0], a.spectrum_origin, "J at theta = 0"),
        (axes[0, 1], a.spectrum_saddle, "J at the visited saddle"),
    ):
        ev, w = np.asarray(spec.eigenvalues)[:20], np.asarray(spec.attention_weight)[:20]
        ax.bar(np.arange(len(ev)), ev, color=[("#d95f02" if x > 0.5 else "#1b9e77") for x in w])
        ax.set(title=title + " (orange: attention block)", xlabel="eigenvalue index")
    ax = axes[0, 2]
    for values, style, label in (
        (a.stall.tangential, "o", "tangential"),
        (a.stall.transverse, "s", "transverse"),
    ):
        ax.plot(np.arange(len(values)), np.asarray(values), style, label=label)
    ax.set_title("J at the rank-one stall", fontsize=9)
    ax.legend(fontsize=7)
    run.save_figure(fig, name)
