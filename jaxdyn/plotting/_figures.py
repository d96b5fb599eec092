"""Shared figure helpers: one look for every experiment's figures.

All helpers draw on a given matplotlib ``Axes`` and return it, so experiments compose them.
Failed sweep members are never drawn: pass ``ok`` masks, and the helpers annotate how many
members were excluded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

STAGE_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = 4.2, height: float = 3.2, **kw):
    """A figure with an ``nrows x ncols`` grid of axes (always a 2-D array of axes)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw
    )
    fig.set_layout_engine("constrained")
    return fig, axes


def mark_stages(ax, stages: Mapping[str, float | None], *, label: bool = True):
    """Vertical lines at stage times (e.g. condensation, focus, dilution, new direction)."""
    for i, (name, t) in enumerate(stages.items()):
        if t is None or not np.isfinite(t):
            continue
        color = STAGE_COLORS[i % len(STAGE_COLORS)]
        ax.axvline(t, color=color, ls="--", lw=1.0, alpha=0.8)
        if label:
            ax.text(
                t,
                0.98,
                f" {name}",
                color=color,
                rotation=90,
                va="top",
                ha="right",
                fontsize=7,
                transform=ax.get_xaxis_transform(),
            )
    return ax


def time_series(
    ax,
    t,
    ys,
    *,
    labels: Sequence[str] | None = None,
    logx: bool = False,
    logy: bool = False,
    stages: Mapping[str, float | None] | None = None,
    xlabel: str = "t",
    ylabel: str = "",
    title: str = "",
):
    """Curves ``ys`` against ``t``.

    ``ys`` is one array, a sequence of arrays, a 2-D array (one curve per column) or a mapping
    ``{label: array}`` (its keys label the curves unless ``labels`` is given). Every curve must
    have ``len(t)`` points; a mismatch raises ``ValueError`` naming the curve.
    """
    t = np.asarray(t)
    if isinstance(ys, Mapping):
        labels = list(ys) if labels is None else labels
        arr = list(ys.values())
    else:
        arr = list(ys) if isinstance(ys, list | tuple) else [ys]
    curves = []
    for y in arr:
        y = np.asarray(y)
        curves.extend([y] if y.ndim <= 1 else list(y.T))
    for i, y in enumerate(curves):
        name = labels[i] if labels is not None and i < len(labels) else None
        if y.shape != t.shape:
            raise ValueError(
                f"time_series: curve {name or i} has shape {y.shape}, expected {t.shape} like t"
            )
        ax.plot(t, y, label=name, lw=1.4)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if stages:
        mark_stages(ax, stages)
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    if labels:
        ax.legend(fontsize=7)
    return ax


def heatmap(
    ax,
    matrix,
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin=None,
    vmax=None,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
):
    """A matrix as an image (row 0 at the top), with an optional colour bar."""
    matrix = np.asarray(matrix)
    im = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, shrink=0.85)
    if xticklabels is not None:
        ax.set_xticks(range(len(xticklabels)), xticklabels, rotation=60, fontsize=7)
    if yticklabels is not None:
        ax.set_yticks(range(len(yticklabels)), yticklabels, fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return ax


def band(ax, x, samples, *, ok=None, label: str | None = None, color=None, logx: bool = False):
    """Median and 10-90% band over members (axis 0 of ``samples``), failed members excluded."""
    x = np.asarray(x)
    samples = np.asarray(samples, dtype=float)
    if ok is not None:
        ok = np.asarray(ok, dtype=bool)
        excluded = int(np.sum(~ok))
        samples = samples[ok]
        if excluded:
            label = f"{label or ''} ({excluded} failed excluded)".strip()
    if samples.shape[0] == 0:
        return ax
    lo, med, hi = np.nanpercentile(samples, [10, 50, 90], axis=0)
    (line,) = ax.plot(x, med, label=label, color=color)
    ax.fill_between(x, lo, hi, alpha=0.25, color=line.get_color())
    if logx:
        ax.set_xscale("log")
    return ax


def note_excluded(ax, n_failed: int, n_total: int):
    """Say on the plot how many members were excluded as failed."""
    if n_failed:
        ax.text(
            0.01,
            0.01,
            f"{n_failed}/{n_total} failed members excluded",
            transform=ax.transAxes,
            fontsize=7,
            color="crimson",
        )
    return ax


def cone_axes(ax, *, title: str = ""):
    """The cone of 2x2 PSD matrices [[a, c], [c, b]] drawn as (a - b, 2c) in the unit disk."""
    theta = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(theta), np.sin(theta), color="0.6", lw=0.8)
    ax.set_aspect("equal")
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel("(a - b) / (a + b)")
    ax.set_ylabel("2c / (a + b)")
    if title:
        ax.set_title(title, fontsize=10)
    return ax
