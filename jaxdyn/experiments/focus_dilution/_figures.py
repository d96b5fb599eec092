"""Figures of one focus-and-dilution analysis."""

from __future__ import annotations

import math

import numpy as np

from ... import gradflow as gf
from ...plotting import new_figure, time_series
from ...runs import Run


def dynamics_figure(run: Run, a, name: str = "dynamics") -> None:
    """Loss, attention, entropies, focus rate, singular values and embedding PCA over time, every
    panel with the stage times."""
    ts = a.ts
    keep = ts > 0
    t = ts[keep]
    met = {k: np.asarray(v)[keep] for k, v in a.metrics.items()}
    pi = a.chain.pi
    d = len(pi)
    H = float(a.stages.uniform_entropy)
    stages = {k: v for k, v in a.stages.times().items() if math.isfinite(v)}
    fig, axes = new_figure(2, 3)
    ax = time_series(
        axes[0, 0], t, {"loss": met["loss"]}, logx=True, stages=stages, title="population loss"
    )
    ax.axhline(math.log(d), color="0.5", ls=":", lw=0.8)
    ax.axhline(H, color="0.3", ls=":", lw=0.8)
    labels = [f"query {q} (pi={pi[q]:.3g})" for q in range(d)] if d <= 8 else None
    ax = time_series(
        axes[0, 1],
        t,
        met["entropy_query"],
        labels=labels,
        logx=True,
        stages=stages,
        title="attention entropy per query",
    )
    ax.axhline(H, color="0.3", ls=":", lw=0.8)
    ax = time_series(
        axes[0, 2],
        t,
        {"sum_q pi_q w_q,top": met["frequent_weight"], "w_top,top": met["frequent_query_weight"]},
        logx=True,
        stages=stages,
        title="attention on the most frequent token",
    )
    ax.axhline(float(np.max(pi)), color="0.3", ls=":", lw=0.8)
    ax = time_series(
        axes[1, 0],
        t,
        {"k(t) = -gamma^T dL/dPhi gamma": met["focus_rate_path"]},
        logx=True,
        stages=stages,
        title="signed focus rate along the flow",
    )
    ax.axhline(float(a.rates.focus), color="0.3", ls=":", lw=0.8)
    labels = [f"sigma{i + 1}(W0)" for i in range(met["sv_W0"].shape[1])]
    time_series(
        axes[1, 1],
        t,
        met["sv_W0"],
        labels=labels,
        logx=True,
        logy=True,
        stages=stages,
        title="singular values of W0",
    )
    pca = a.embedding_pca()
    ax = axes[1, 2]
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
        ev = np.asarray(spec.eigenvalues)[:20]
        w = np.asarray(spec.attention_weight)[:20]
        ax.bar(np.arange(len(ev)), ev, color=[("#d95f02" if x > 0.5 else "#1b9e77") for x in w])
        ax.set_title(title + " (orange: attention block)", fontsize=9)
        ax.set_xlabel("eigenvalue index")
    ax = axes[0, 2]
    tang, trans = np.asarray(a.stall.tangential), np.asarray(a.stall.transverse)
    ax.plot(np.arange(len(tang)), tang, "o", label="tangential")
    ax.plot(np.arange(len(trans)), trans, "s", label="transverse")
    ax.set_title("J at the rank-one stall", fontsize=9)
    ax.legend(fontsize=7)
    run.save_figure(fig, name)
