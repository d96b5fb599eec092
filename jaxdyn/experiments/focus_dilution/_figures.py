"""Figures of one focus-and-dilution analysis."""

from __future__ import annotations

import math

import numpy as np

from ...plotting import new_figure, time_series
from ...runs import Run


def dynamics_figure(run: Run, a, name: str = "dynamics") -> None:
    """Loss, attention, entropies, focus rate, singular values and embedding PCA over time, every
    panel with the stage times and its reference level (dotted)."""
    keep = a.ts > 0
    t, met, pi = a.ts[keep], {k: np.asarray(v)[keep] for k, v in a.metrics.items()}, a.chain.pi
    d, H = len(pi), float(a.stages.uniform_entropy)
    stages = {k: v for k, v in a.stages.times().items() if math.isfinite(v)}
    queries = [f"query {q} (pi={pi[q]:.3g})" for q in range(d)] if d <= 8 else None
    panels = (  # (curves, labels, reference levels, log y, title)
        ({"loss": met["loss"]}, None, (math.log(d), H), False, "population loss"),
        (met["entropy_query"], queries, (H,), False, "attention entropy per query"),
        (
            {
                "sum_q pi_q w_q,top": met["frequent_weight"],
                "w_top,top": met["frequent_query_weight"],
            },
            None,
            (float(np.max(pi)),),
            False,
            "attention on the most frequent token",
        ),
        (
            {"k(t) = -gamma^T dL/dPhi gamma": met["focus_rate_path"]},
            None,
            (float(a.rates.focus),),
            False,
            "signed focus rate along the flow",
        ),
        (
            met["sv_W0"],
            [f"sigma{i + 1}(W0)" for i in range(met["sv_W0"].shape[1])],
            (),
            True,
            "singular values of W0",
        ),
    )
    fig, axes = new_figure(2, 3)
    for ax, (ys, labels, levels, logy, title) in zip(axes.flat, panels, strict=False):
        time_series(ax, t, ys, labels=labels, logx=True, logy=logy, stages=stages, title=title)
        for level, shade in zip(
            levels, ("0.5", "0.3")[-len(levels) :] if levels else (), strict=True
        ):
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
