"""induction-head figures: loss with the predictors' levels, layer-1 previous-token score,
layer-2 induction score, the LLC along training."""

from __future__ import annotations

import numpy as np
from scipy import stats

from ...plotting import new_figure


def figures(run, steps, loss, prev, induction, baseline, *, levels, boundaries, llc, confidence):
    z = stats.norm.ppf(0.5 + confidence / 2)
    x = np.maximum(steps, 1)
    fig, axes = new_figure(2, 2, width=4.6, height=3.4)
    ax = axes[0, 0]
    for s in range(loss.shape[0]):
        ax.plot(x, loss[s], lw=1, alpha=0.8, label="held-out loss" if s == 0 else None)
    ax.axhline(levels["ln k"], color="k", ls="--", lw=0.8, label="ln k (uniform)")
    for name, color in (("unigram", "tab:orange"), ("bigram", "tab:green")):
        level, se = levels[name]  # on the held-out sequences, with the paired SE
        label = f"{name} predictor, held-out (band)"
        ax.axhspan(level - z * se, level + z * se, color=color, alpha=0.25, label=label)
    ax.set(ylim=(levels["bigram"][0] - 0.05, levels["ln k"] + 0.08), ylabel="cross-entropy (nats)")
    ax.set_title("loss and the Bayes predictors")
    panels = (
        (axes[0, 1], prev[..., 0], 0.5, None, "mean A[t, t-1]",
         "layer 1: previous-token score (c_G)"),
        (axes[1, 0], induction[..., -1], baseline, "uniform attention", "induction score",
         f"layer {induction.shape[-1]}: induction score"),
    )  # fmt: skip
    for ax, curves, ref, ref_label, ylabel, title in panels:
        for curve in curves:
            ax.plot(x, curve, lw=1)
        ax.axhline(ref, color="0.4", ls="--", lw=0.8, label=ref_label)
        ax.set(ylim=(0, 1), ylabel=ylabel, title=title)
    ax = axes[1, 1]
    if llc is not None:
        ls, lv, le = llc
        ax.errorbar(np.maximum(ls, 1), lv, yerr=z * le, fmt="o-", ms=3, capsize=2)
    else:
        ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
    ax.set(ylabel="LLC estimate (seed 0)", title="local learning coefficient")
    for ax in axes.flat:
        ax.set(xscale="log", xlabel="Adam step")
        for b in boundaries:
            ax.axvline(max(b, 1), color="0.6", ls=":", lw=1)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    run.save_figure(fig, "induction_head")
