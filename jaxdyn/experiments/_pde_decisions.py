"""The particle and mean-field claims of the Transformer PDE as decisions on numbers
(transformer_pde.md, "Mean-field limit and stability", "Gradient-flow structure").

Each function takes measured numbers (never a run) and returns a
:class:`jaxdyn.evidence.Evidence`, so that an experiment records it and a test feeds the same
function a counterfactual on which the claim is false (a biased closure, a series with another
rate, a non-gradient field) and sees that it is not called ``holds``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike

from jaxdyn import fit_line, fit_power_law
from jaxdyn.evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_least,
    at_most,
    estimate,
)
from jaxdyn.meanfield import claims

# measured numbers: arrays, scalars or (nested) sequences of them
Numbers = ArrayLike | Sequence


def _combine(claim: str, parts: Sequence[Evidence], prediction, measured, model, alternative):
    """One verdict from several tests of one claim: refuted if any refutes it, holds only if
    every one holds, inconclusive otherwise (the reasons are joined)."""
    verdicts = [p.verdict for p in parts]
    if Verdict.refuted in verdicts:
        verdict = Verdict.refuted
    elif all(v is Verdict.holds for v in verdicts):
        verdict = Verdict.holds
    else:
        verdict = Verdict.inconclusive
    reason = "; ".join(p.reason for p in parts if p.reason and p.verdict is not Verdict.holds)
    return Evidence(claim, prediction, measured, model, verdict, alternative, reason)


def rate_evidence(
    claim: str,
    n: Numbers,
    errors: Numbers,
    *,
    prediction: float = -0.5,
    alternatives: Sequence[float] = (0.0, -1.0),
    confidence: float = 0.99,
) -> Evidence:
    """The exponent of ``errors ~ n^a`` (least squares of ``log error`` on ``log n``, one point
    per independent sample) against ``prediction``, rejecting every ``alternatives`` value.

    The tolerance is the slope's Student-t interval from its standard error with ``points - 2``
    degrees of freedom at ``confidence``: ``refuted`` when the interval excludes the
    prediction, ``holds`` when it contains the prediction and excludes every alternative
    (default: slope 0, an error that does not decay, e.g. a closure converging to another
    limit; and slope -1, the rate of a deterministic quadrature), ``inconclusive`` otherwise
    (more sizes or samples would decide). Non-positive or non-finite errors are left out.
    """
    n = np.asarray(n, dtype=float).ravel()
    errors = np.asarray(errors, dtype=float).ravel()
    keep = np.isfinite(errors) & (errors > 0)
    if np.unique(n[keep]).size < 2:
        return claims.not_run(
            claim, prediction, alternatives, "fewer than two sizes with a finite error"
        )
    fit = fit_power_law(n[keep], errors[keep])
    basis = f"slope standard error of the log-log fit over {fit.n} independent samples"
    parts = [
        estimate(
            claim,
            prediction=prediction,
            value=fit.slope,
            standard_error=fit.slope_stderr,
            dof=max(fit.n - 2, 1),
            alternative=a,
            confidence=confidence,
            basis=basis,
        )
        for a in alternatives
    ]
    return _combine(claim, parts, prediction, fit.slope, parts[0].error_model, list(alternatives))


def trend_evidence(
    claim: str,
    x: Numbers,
    y: Numbers,
    *,
    increasing: bool = True,
    confidence: float = 0.99,
) -> Evidence:
    """``y`` grows (or falls) with ``x``: the least-squares slope of ``y`` on ``x`` (one point
    per independent sample) is positive (negative) beyond its Student-t interval
    (``points - 2`` degrees of freedom). ``inconclusive`` when the interval contains 0,
    ``refuted`` when it excludes 0 on the wrong side."""
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    keep = np.isfinite(x) & np.isfinite(y)
    fit = fit_line(x[keep], y[keep])
    model = ErrorModel.standard_error(
        fit.slope_stderr if np.isfinite(fit.slope_stderr) else 0.0,
        dof=max(fit.n - 2, 1),
        confidence=confidence,
        basis=f"slope standard error over {fit.n} independent samples",
    )
    if not np.isfinite(fit.slope_stderr):
        return Evidence(claim, 0.0, fit.slope, model, Verdict.inconclusive, None, "too few points")
    decide = at_least if increasing else at_most
    return decide(claim, measured=fit.slope, limit=0.0, error_model=model)


def ensemble_mean_evidence(
    claim: str,
    samples: Numbers,
    *,
    prediction: Numbers,
    alternative: Numbers,
    confidence: float = 0.99,
) -> Evidence:
    """The mean of independent ensembles ``samples[r, ...]`` against ``prediction``, with the
    standard error from the spread between ensembles (``R - 1`` degrees of freedom), rejecting
    ``alternative``.

    The ensembles are independent, so their spread estimates the standard error whatever the
    within-ensemble dependence or the tails of the per-particle terms (a V-statistic's own
    variance estimate from one cloud under-estimates it when the tails are heavy). Several
    entries are tested jointly: the confidence per entry is Bonferroni-corrected to
    ``1 - (1 - confidence) / entries``; ``refuted`` if any entry excludes its prediction,
    ``holds`` if none does and some entry excludes its alternative, ``inconclusive`` otherwise.
    """
    s = np.asarray(samples, dtype=float)
    if s.ndim == 0 or s.shape[0] < 2:
        raise ValueError(f"{claim!r}: needs >= 2 independent ensembles, got shape {s.shape}")
    rows = s.shape[0]
    mean = s.mean(axis=0)
    se = s.std(axis=0, ddof=1) / np.sqrt(rows)
    entries = max(int(np.size(mean)), 1)
    per_entry = 1.0 - (1.0 - confidence) / entries
    model = ErrorModel.standard_error(
        se,
        dof=rows - 1,
        confidence=per_entry,
        basis=f"spread of {rows} independent ensembles, Bonferroni over {entries} entries",
    )
    p = np.broadcast_to(np.asarray(prediction, dtype=float), mean.shape)
    a = np.broadcast_to(np.asarray(alternative, dtype=float), mean.shape)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(p))):
        return Evidence(
            claim, p, mean, model, Verdict.inconclusive, a, "a mean or prediction is not finite"
        )
    half = model.half_width()
    if np.any(np.abs(mean - p) > half):
        k = int(np.argmax(np.abs(mean - p) - half))
        reason = f"entry {k}: |mean - prediction| exceeds {float(np.ravel(half)[k]):.3g}"
        return Evidence(claim, p, mean, model, Verdict.refuted, a, reason)
    if np.any(np.abs(mean - a) > half):
        return Evidence(claim, p, mean, model, Verdict.holds, a, "")
    return Evidence(
        claim,
        p,
        mean,
        model,
        Verdict.inconclusive,
        a,
        "every interval contains the alternative: more ensembles would decide",
    )


def monotone_evidence(
    claim: str,
    series: Numbers,
    *,
    error: float | Numbers,
    basis: str,
    increasing: bool = False,
) -> Evidence:
    """A series never moves the wrong way by more than its error (``error`` bounds each entry's
    deviation from the exact trajectory's value, e.g. a step-doubling estimate of the solver
    error, so a wrong-way step beyond ``2 error`` cannot be a discretisation artefact).

    ``refuted`` when some consecutive difference has the wrong sign beyond ``2 error``,
    ``holds`` when none has and the series moves the right way overall beyond ``2 error``
    (first to last), ``inconclusive`` when it barely moves."""
    s = np.asarray(series, dtype=float).ravel()
    err = np.broadcast_to(np.asarray(error, dtype=float), s.shape)
    model = ErrorModel.bound(err, basis=basis)
    sign = 1.0 if increasing else -1.0
    if not np.all(np.isfinite(s)):
        return Evidence(claim, sign, s, model, Verdict.inconclusive, None, "not finite")
    wrong = -sign * np.diff(s) - (err[1:] + err[:-1])
    if np.any(wrong > 0):
        k = int(np.argmax(wrong))
        reason = f"entries {k} and {k + 1} move the wrong way by more than their error"
        return Evidence(claim, sign, s, model, Verdict.refuted, None, reason)
    if sign * (s[-1] - s[0]) > err[0] + err[-1]:
        return Evidence(claim, sign, s, model, Verdict.holds, None, "")
    return Evidence(
        claim, sign, s, model, Verdict.inconclusive, None, "the series moves less than its error"
    )
