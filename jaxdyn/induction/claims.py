"""The induction-head claims (induction.md, "Claims"): verdicts on measured training curves.

Each function takes measurements (held-out losses and their standard errors at checkpoints,
attention scores, learning-coefficient estimates) and returns a
:class:`jaxdyn.evidence.Evidence`. Curves carry a leading seed axis; a claim holds when it holds
for every seed, is refuted when some seed refutes it, and is inconclusive otherwise.
"""

from __future__ import annotations

import numpy as np

from ..evidence import ErrorModel, Evidence, Verdict, at_least
from ._stages import band, broken_line_changes, first_crossing, plateau_window, stage_counts

__all__ = [
    "induction_head",
    "llc_trend_changes",
    "loss_plateau",
    "previous_token_head_first",
]


def _seeds(a) -> np.ndarray:
    a = np.asarray(a, float)
    return a[None] if a.ndim == 1 else a


def _combine(verdicts) -> Verdict:
    if any(v is Verdict.refuted for v in verdicts):
        return Verdict.refuted
    if verdicts and all(v is Verdict.holds for v in verdicts):
        return Verdict.holds
    return Verdict.inconclusive


def loss_plateau(
    steps,
    loss,
    loss_se,
    *,
    level: float,
    level_se: float,
    alternatives=(),
    name: str = "the predictor",
    confidence: float = 0.99,
    min_checkpoints: int = 3,
) -> Evidence:
    """The held-out loss passes a plateau at ``level`` (a Bayes predictor's expected loss).

    A plateau is a window of at least ``min_checkpoints`` consecutive checkpoints where the
    loss is within the Monte-Carlo band of ``level`` (``z sqrt(se_loss^2 + se_level^2)`` at
    ``confidence``; when loss and level are measured on the same sequences, pass the standard
    error of their paired difference as ``loss_se`` and ``level_se = 0``) and flat within
    that band (its least-squares slope in ``ln(1 + step)`` times the window's span at most the
    band).
    Per seed: ``holds`` with such a window; ``refuted`` when the loss crosses the band from
    above to below without one (it passes the level without pausing) or settles, flat, outside
    it; ``inconclusive`` otherwise (the level is not reached within training). The check is
    ``inconclusive`` for all seeds when the band (its median over checkpoints) cannot tell
    ``level`` from an ``alternatives`` level (e.g. the other predictor's loss, or ``ln k``).
    """
    steps = np.asarray(steps, float)
    loss, loss_se = _seeds(loss), _seeds(loss_se)
    half = band(loss_se, level_se, confidence)
    model = ErrorModel.standard_error(
        np.sqrt(np.median(loss_se) ** 2 + level_se**2),
        dof=None,
        confidence=confidence,
        basis="standard errors of the loss and of the level (paired: of their difference)",
    )
    claim = f"the loss passes a plateau at {name}'s loss"
    alts = (
        [float(a) for a in np.atleast_1d(alternatives)] if len(np.atleast_1d(alternatives)) else []
    )
    power = float(np.median(half))
    close = [a for a in alts if abs(a - level) <= 2 * power]
    measured = np.full(loss.shape[0], np.nan)
    if close:
        reason = f"the band {power:.3g} cannot separate {level:.4g} from {close}"
        return Evidence(claim, level, measured, model, Verdict.inconclusive, alts or None, reason)
    verdicts, notes = [], []
    for s in range(loss.shape[0]):
        window = plateau_window(steps, loss[s], half[s], level, min_checkpoints)
        if window is not None:
            a, b = window
            measured[s] = loss[s, a : b + 1].mean()
            verdicts.append(Verdict.holds)
            notes.append(f"seed {s}: steps {int(steps[a])}-{int(steps[b])}")
            continue
        above = np.flatnonzero(loss[s] > level + half[s])
        below = np.flatnonzero(loss[s] < level - half[s])
        tail = slice(loss.shape[1] - min_checkpoints, None)
        settled = plateau_window(
            steps[tail], loss[s, tail], half[s, tail], loss[s, tail].mean(), min_checkpoints
        )
        if above.size and below.size and below[-1] > above[0]:
            verdicts.append(Verdict.refuted)
            notes.append(f"seed {s}: crossed {level:.4g} without a plateau")
        elif settled is not None and not np.any(np.abs(loss[s, tail] - level) <= half[s, tail]):
            measured[s] = loss[s, tail].mean()
            verdicts.append(Verdict.refuted)
            notes.append(f"seed {s}: settled at {measured[s]:.4g}")
        else:
            verdicts.append(Verdict.inconclusive)
            notes.append(f"seed {s}: {level:.4g} not reached and not settled")
    return Evidence(
        claim, level, measured, model, _combine(verdicts), alts or None, "; ".join(notes)
    )


def previous_token_head_first(
    steps,
    previous_token,
    loss,
    *,
    start_level: float,
    threshold: float = 0.5,
) -> Evidence:
    """Layer 1 becomes a previous-token head before or as the loss leaves the unigram plateau.

    Times are checkpoint indices (the error model: one checkpoint of resolution). The head's
    time is the first checkpoint where layer 1's previous-token score has completed half of
    its rise (from its first to its last value); the loss's is the first checkpoint where the
    loss has completed half of its fall from ``start_level`` (the unigram loss) to its final
    value. Per seed: ``holds`` when the head's time is at most the loss's plus one checkpoint,
    ``refuted`` when later, or when the loss left the plateau but layer 1's final score is
    below ``threshold`` (1/2: most of its attention on ``t - 1``): it never became a
    previous-token head. ``inconclusive`` when the loss did not fall below ``start_level``.
    """
    steps = np.asarray(steps, float)
    prev, loss = _seeds(previous_token), _seeds(loss)
    model = ErrorModel.exact(basis="checkpoint indices; one checkpoint of resolution")
    lag = np.full(prev.shape[0], np.nan)
    verdicts, notes = [], []
    for s in range(prev.shape[0]):
        final = loss[s, -1]
        if not final < start_level:
            verdicts.append(Verdict.inconclusive)
            notes.append(f"seed {s}: the loss did not leave the plateau")
            continue
        if prev[s, -1] < threshold:
            verdicts.append(Verdict.refuted)
            notes.append(f"seed {s}: final previous-token score {prev[s, -1]:.3g} < {threshold}")
            continue
        t_head = first_crossing(prev[s], 0.5 * (prev[s, 0] + prev[s, -1]))
        start = first_crossing(loss[s], start_level, below=True)
        t_loss = first_crossing(loss[s, start:], 0.5 * (start_level + final), below=True) + start
        lag[s] = t_head - t_loss
        ok = lag[s] <= 1
        verdicts.append(Verdict.holds if ok else Verdict.refuted)
        notes.append(
            f"seed {s}: head at step {int(steps[t_head])}, loss half-way at {int(steps[t_loss])}"
        )
    claim = "layer 1 becomes a previous-token head before or as the loss leaves the unigram plateau"
    return Evidence(claim, 1, lag, model, _combine(verdicts), None, "; ".join(notes))


def induction_head(
    induction, baseline: float, *, threshold: float = 0.5, confidence: float = 0.99
) -> Evidence:
    """Layer 2 attends to the token after earlier occurrences of the current one.

    ``induction``: layer 2's final induction score per seed (>= 2 seeds); ``baseline``: the
    score of uniform causal attention on the same sequences. ``holds`` when the seed mean
    exceeds both the baseline and ``threshold`` (1/2: most of the attention on those tokens)
    beyond its Student-t interval across seeds, ``refuted`` when it is below them beyond it.
    """
    x = np.asarray(induction, float).ravel()
    if x.size < 2:
        raise ValueError(f"induction_head needs >= 2 seeds for a standard error, got {x.size}")
    limit = max(float(baseline), threshold)
    se = float(x.std(ddof=1) / np.sqrt(x.size))
    model = ErrorModel.standard_error(
        se, dof=x.size - 1, confidence=confidence, basis="seed-to-seed spread of the final score"
    )
    claim = "layer 2 attends to the token after earlier occurrences of the current one"
    return at_least(claim, measured=float(x.mean()), limit=limit, error_model=model)


def llc_trend_changes(
    steps, llc, boundaries, *, effect: float = 0.5, confidence: float = 0.99
) -> Evidence:
    """The learning coefficient's trend in ``ln(1 + step)`` changes at the stage boundaries.

    ``llc``: per-chain estimates, ``(chains, steps)``, sampled with common random numbers
    (chain ``c`` draws the same Langevin noise and minibatches at every step, so each row is
    a smooth function of the weights along training); ``boundaries``: the steps where the loss
    and the attention change stage (:func:`~jaxdyn.induction.stage_boundaries`).

    Per chain, a continuous broken line in ``x = ln(1 + step)`` with kinks at the boundaries is
    fitted by least squares. A kink's *displacement* is its slope change times the length in
    ``x`` of the stage after it (to the next boundary, or to the last estimate): how far the
    LLC has left the previous stage's trend by the end of that stage. The chains are
    independent, so the displacements' spread across chains is their sampling error: the mean
    over chains with a Student-t interval (``chains - 1`` degrees of freedom) at ``confidence``.

    The minimal effect ``effect`` (LLC units) is what counts as a change: 1/2, one parameter
    direction of a regular model (each adds 1/2 to the learning coefficient; the resolution the
    LLC calibration's alternatives ``(d +- 1) / 2`` use). ``holds`` when every boundary's
    interval lies beyond ``+-effect`` (a change of at least one direction, resolved);
    ``refuted`` when some boundary's interval lies inside ``(-effect, effect)`` (at that
    boundary the LLC keeps its trend to within less than one direction: a two one-sided test,
    each side at ``(1 - confidence) / 2``, so at most ``1 - confidence`` over two boundaries);
    ``inconclusive`` otherwise, with fewer than 2 chains, or when the broken line is not
    identified (fewer than two estimates up to the first boundary, none in a later stage).
    """
    steps = np.asarray(steps, float)
    llc = np.asarray(llc, float)
    knots = sorted(float(np.log1p(b)) for b in boundaries)
    x = np.log1p(steps)
    claim = "the LLC's trend changes at the stage boundaries"
    counts = stage_counts(x, knots) if knots else []
    chains = llc.shape[0] if llc.ndim == 2 and llc.shape[1] == x.size else 0
    if not knots or counts[0] < 2 or min(counts) < 1 or chains < 2 or not np.all(np.isfinite(llc)):
        model = ErrorModel.standard_error(0.0, dof=None, confidence=confidence)
        reason = (
            f"estimates per stage {counts} (need >= 2 up to the first boundary, >= 1 in each "
            f"later stage), {chains} chains (need >= 2, rows of shape (chains, {x.size})), "
            "or an estimate is not finite"
        )
        return Evidence(claim, effect, np.nan, model, Verdict.inconclusive, 0.0, reason)
    span = np.diff([*knots, x.max()])
    changes = broken_line_changes(x, llc, knots)
    shift = changes * span
    se = shift.std(axis=0, ddof=1) / np.sqrt(chains)
    model = ErrorModel.standard_error(
        se,
        dof=chains - 1,
        confidence=confidence,
        basis=f"chain-to-chain spread of per-chain broken-line fits, {chains} chains with common"
        " random numbers along training",
    )
    mean, half = shift.mean(axis=0), model.half_width()
    inside = np.abs(mean) + half < effect
    beyond = np.abs(mean) - half > effect
    if inside.any():
        verdict = Verdict.refuted
    elif beyond.all():
        verdict = Verdict.holds
    else:
        verdict = Verdict.inconclusive
    per_knot = "; ".join(
        f"step {b:g}: slope change {c:.3g}, displacement {m:.3g} +- {h:.2g}"
        for b, c, m, h in zip(sorted(boundaries), changes.mean(0), mean, half, strict=True)
    )
    reason = {
        Verdict.holds: f"every displacement beyond +-{effect:g} ({per_knot})",
        Verdict.refuted: f"a displacement inside +-{effect:g} ({per_knot})",
        Verdict.inconclusive: f"a displacement's interval contains +-{effect:g} ({per_knot})",
    }[verdict]
    return Evidence(claim, effect, mean, model, verdict, 0.0, reason)
