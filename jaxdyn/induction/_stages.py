"""Stages of a training curve: plateaus at a reference level, crossings, breakpoints
(induction.md, "Stages"). Measurements on host arrays; :mod:`jaxdyn.induction.claims` decides.
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def band(loss_se, level_se, confidence: float) -> np.ndarray:
    """Half-width of the Monte-Carlo band of ``loss - level`` at ``confidence`` (two-sided,
    normal quantile: the held-out loss and the level are independent means of many
    sequences)."""
    z = stats.norm.ppf(0.5 + confidence / 2)
    return z * np.sqrt(np.asarray(loss_se, float) ** 2 + float(level_se) ** 2)


def plateau_window(steps, loss, half_width, level, min_checkpoints: int):
    """The longest run of consecutive checkpoints where ``|loss - level| <= half_width`` and
    the loss is flat within the band (its least-squares slope in ``ln(1 + step)`` times the
    window's span is at most the band), with at least ``min_checkpoints`` checkpoints, as
    ``(first, last)`` indices; ``None`` if there is none."""
    steps = np.asarray(steps, float)
    loss = np.asarray(loss, float)
    half = np.broadcast_to(np.asarray(half_width, float), loss.shape)
    inside = np.abs(loss - level) <= half
    best = None
    i = 0
    while i < loss.size:
        if not inside[i]:
            i += 1
            continue
        j = i
        while j + 1 < loss.size and inside[j + 1]:
            j += 1
        # the longest flat sub-window of the run [i, j]
        for a in range(i, j + 1):
            for b in range(j, a + min_checkpoints - 2, -1):
                if best is not None and b - a <= best[1] - best[0]:
                    break
                if _flat(steps[a : b + 1], loss[a : b + 1], half[a : b + 1]):
                    best = (a, b)
                    break
        i = j + 1
    return best


def _flat(steps, loss, half) -> bool:
    x = np.log1p(steps)
    if x.size < 2 or x[-1] == x[0]:
        return False
    slope = np.polyfit(x, loss, 1)[0]
    return bool(abs(slope) * (x[-1] - x[0]) <= np.min(half))


def first_crossing(values, threshold, *, below: bool = False):
    """Index of the first checkpoint at or beyond ``threshold`` (at or below when ``below``),
    ``None`` if none."""
    v = np.asarray(values, float)
    hit = v <= threshold if below else v >= threshold
    idx = np.flatnonzero(hit)
    return int(idx[0]) if idx.size else None


def broken_line_changes(x, y, knots) -> np.ndarray:
    """Least squares of each row of ``y`` on a continuous broken line in ``x`` with kinks at
    ``knots``: the slope change at each kink, one row per row of ``y`` (``(rows, knots)``).

    The line is ``a + b x + sum_i c_i max(x - k_i, 0)``; ``c_i`` is the change of slope at
    ``k_i``. It is identified when at least two ``x`` lie at or before the first kink and at
    least one in each later stage (after a kink, up to the next); :func:`stage_counts`.
    """
    # generic: move to jaxdyn.evidence
    x = np.asarray(x, float)
    y = np.atleast_2d(np.asarray(y, float))
    X = np.column_stack([np.ones_like(x), x] + [np.maximum(x - k, 0.0) for k in knots])
    coef, *_ = np.linalg.lstsq(X, y.T, rcond=None)
    return coef[2:].T


def stage_counts(x, knots) -> list[int]:
    """How many ``x`` lie in each stage that ``knots`` cut: ``(-inf, k_1]``, ``(k_1, k_2]``,
    ..., ``(k_last, inf)``."""
    x = np.asarray(x, float)
    edges = [-np.inf, *knots, np.inf]
    return [int(np.sum((x > lo) & (x <= hi))) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def stage_boundaries(
    steps,
    loss,
    loss_se,
    *,
    unigram: float,
    unigram_se: float,
    confidence: float = 0.99,
) -> tuple[int | None, int | None]:
    """The two stage boundaries of one held-out loss curve, as checkpoint indices: where the
    loss leaves the unigram stage (the first checkpoint below the unigram predictor's loss by
    more than the band of :func:`band`: from there on the model beats every in-context unigram
    predictor, so it uses transitions) and where it settles (the first later checkpoint from
    which every loss is within the band ``z sqrt(se_t^2 + se_last^2)`` of the last loss).
    ``None`` where a boundary is not seen.
    """
    loss = np.asarray(loss, float)
    loss_se = np.asarray(loss_se, float)
    below = loss < unigram - band(loss_se, unigram_se, confidence)
    idx = np.flatnonzero(below)
    if idx.size == 0:
        return None, None
    leave = int(idx[0])
    near = np.abs(loss - loss[-1]) <= band(loss_se, loss_se[-1], confidence)
    settle = None
    for i in range(leave + 1, loss.size):
        if np.all(near[i:]):
            settle = i
            break
    return leave, settle
