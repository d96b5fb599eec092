"""induction-head figures: loss with the predictors' levels, layer-1 previous-token score,
layer-2 induction score, the LLC along training."""

from __future__ import annotations

import numpy as np
from scipy import stats

from ...plotting import new_figure


def _marks(ax, boundaries):
    for b in boundaries:
        ax.axvline(max(b, 1), color="0.6", ls=":", lw=1)


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
        half = z * se
        ax.axhspan(
            level - half,
            level + half,
            color=color,
            alpha=0.25,
            label=f"{name} predictor, held-out (band)",
        )
    ax.set(
        xscale="log",
        xlabel="Adam step",
        ylabel="cross-entropy (nats)",
        ylim=(levels["bigram"][0] - 0.05, levels["ln k"] + 0.08),
        title="loss and the Bayes predictors",
    )
    ax.legend(fontsize=7)
    _marks(ax, boundaries)
    ax = axes[0, 1]
    for s in range(prev.shape[0]):
        ax.plot(x, prev[s, :, 0], lw=1)
    ax.axhline(0.5, color="0.5", ls="--", lw=0.8)
    ax.set(
        xscale="log",
        xlabel="Adam step",
        ylabel="mean A[t, t-1]",
        ylim=(0, 1),
        title="layer 1: previous-token score (c_G)",
    )
    _marks(ax, boundaries)
    ax = axes[1, 0]
    for s in range(induction.shape[0]):
        ax.plot(x, induction[s, :, -1], lw=1)
    ax.axhline(baseline, color="k", ls="--", lw=0.8, label="uniform attention")
    ax.set(
        xscale="log",
        xlabel="Adam step",
        ylabel="induction score",
        ylim=(0, 1),
        title=f"layer {induction.shape[-1]}: induction score",
    )
    ax.legend(fontsize=7)
    _marks(ax, boundaries)
    ax = axes[1, 1]
    if llc is not None:
        ls, lv, le = llc
        ax.errorbar(np.maximum(ls, 1), lv, yerr=z * le, fmt="o-", ms=3, capsize=2)
    else:
        ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
    ax.set(
        xscale="log",
        xlabel="Adam step",
        ylabel="LLC estimate (seed 0)",
        title="local learning coefficient",
    )
    _marks(ax, boundaries)
    run.save_figure(fig, "induction_head")
