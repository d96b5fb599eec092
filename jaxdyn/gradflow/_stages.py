"""Automatic stage timestamps (focus_dilution.md, "Stages"): condensation, focus, dilution and
new direction, from the metrics of :func:`jaxdyn.gradflow.trajectory_metrics`.

Definitions (each a first crossing, linearly interpolated in ``t``; NaN if never crossed):

- condensation: the loss crosses the midpoint between ``log d`` (start) and ``H(pi)`` (unigram
  plateau);
- focus: the attention entropy of the most frequent query falls to ``focus_fraction * H(pi)``
  (it starts at ``H(pi)`` because attention is uniform, ``w = pi``);
- dilution: the relative dilution mode ``D / ||gamma||`` reaches ``dilution_fraction`` (0.9) of its
  maximum over the run (the high- and low-frequency embeddings move apart while the
  low-frequency queries' attention spreads out);
- new direction: ``sigma_2(W0) / sigma_1(W0)`` crosses ``new_direction_ratio`` after the
  condensation (at initialisation all singular values are comparable).

The thresholds are [open] modelling choices, exposed as arguments.
"""

from __future__ import annotations

import numpy as np

from .._custom_types import ArrayLike

STAGE_NAMES = ("condensation", "focus", "dilution", "new_direction")


def first_crossing(
    ts: ArrayLike, y: ArrayLike, level: float, *, downward: bool, t_min: float = -np.inf
) -> float:
    """First time at or after ``t_min`` that ``y`` crosses ``level`` (downward or upward),
    linearly interpolated between saved times."""
    ts = np.asarray(ts, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    hit = ((y <= level) if downward else (y >= level)) & (ts >= t_min)
    idx = np.nonzero(hit & np.isfinite(y))[0]
    if idx.size == 0:
        return float("nan")
    i = int(idx[0])
    if i == 0 or ts[i - 1] < t_min:
        return float(ts[i])
    y0, y1 = y[i - 1], y[i]
    frac = 0.0 if y1 == y0 else (level - y0) / (y1 - y0)
    return float(ts[i - 1] + np.clip(frac, 0.0, 1.0) * (ts[i] - ts[i - 1]))


def detect_stages(
    ts: ArrayLike,
    metrics: dict,
    pi: ArrayLike,
    *,
    focus_fraction: float = 0.5,
    dilution_fraction: float = 0.9,
    new_direction_ratio: float = 0.1,
) -> dict[str, float]:
    """Timestamps of the four stages (see the module docstring) from saved metrics."""
    pi = np.asarray(pi, dtype=np.float64)
    d = pi.shape[0]
    H = float(-np.sum(pi * np.log(pi)))
    loss = np.asarray(metrics["loss"])
    t_cond = first_crossing(ts, loss, 0.5 * (np.log(d) + H), downward=True)
    t_focus = first_crossing(ts, metrics["entropy_top_query"], focus_fraction * H, downward=True)
    D = np.asarray(metrics["dilution_mode_rel"])
    peak = np.nanmax(D) if np.any(np.isfinite(D)) else float("nan")
    t_dil = float("nan")
    if peak > 0:
        t_dil = first_crossing(ts, D, dilution_fraction * peak, downward=False)
    sv = np.asarray(metrics["sv_W0"])
    ratio = sv[:, 1] / np.maximum(sv[:, 0], 1e-300) if sv.shape[1] > 1 else np.zeros(len(sv))
    after = np.nanmax([t_cond, t_focus]) if np.isfinite([t_cond, t_focus]).any() else np.inf
    t_new = first_crossing(ts, ratio, new_direction_ratio, downward=False, t_min=after)
    return {"condensation": t_cond, "focus": t_focus, "dilution": t_dil, "new_direction": t_new}


def stages_in_order(stages: dict[str, float]) -> bool:
    """True if all four stages were detected and occur in the order of :data:`STAGE_NAMES`."""
    t = [stages.get(k, float("nan")) for k in STAGE_NAMES]
    return bool(np.all(np.isfinite(t)) and np.all(np.diff(t) > 0))
