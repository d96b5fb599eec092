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
    classified,
    estimate,
    within,
)

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


def not_run_evidence(
    claim: str, prediction: float, alternatives: Sequence[float], reason: str
) -> Evidence:
    """``inconclusive`` without a measurement: the check needs more work than this
    configuration gives it (e.g. the quick size), and ``reason`` says what decides it."""
    model = ErrorModel.standard_error(0.0, dof=None, confidence=0.99)
    return Evidence(
        claim, prediction, float("nan"), model, Verdict.inconclusive, list(alternatives), reason
    )


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
        return not_run_evidence(
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


def stability_bound_evidence(
    claim: str,
    ratios: Numbers,
    constants: Numbers,
    *,
    relative_error: float | Numbers,
    basis: str,
) -> Evidence:
    """Measured stability ratios ``W_p(mu_t, nu_t) / W_p(mu_0, nu_0)`` never exceed the bound
    ``C(t)``: ``at_most(ratio / C, 1)`` with the ratios' relative error (solver error of the
    two flows) as a derived bound; ``inconclusive`` where the bound is infinite."""
    c = np.asarray(constants, dtype=float)
    r = np.asarray(ratios, dtype=float) / c
    model = ErrorModel.bound(np.max(np.asarray(relative_error, dtype=float) * r), basis=basis)
    if not np.all(np.isfinite(c)):
        return Evidence(
            claim,
            1.0,
            float(np.max(r)),
            model,
            Verdict.inconclusive,
            None,
            "the bound C(t) overflows: it says nothing here (weaker interaction or a shorter "
            "horizon would decide)",
        )
    return at_most(claim, measured=float(np.max(r)), limit=1.0, error_model=model)


def dissipation_evidence(
    claim: str,
    rate: float | Numbers,
    speed_squared: float | Numbers,
    *,
    relative_tolerance: float = 1e-9,
) -> Evidence:
    """An energy-dissipation equality ``dE/dt = +-|mu'|^2`` (a gradient flow in the metric the
    speed is measured in): ``within`` float64 rounding, relative to ``|dE/dt|``."""
    rate = np.asarray(rate, dtype=float)
    speed = np.asarray(speed_squared, dtype=float)
    model = ErrorModel.rounding(
        relative_tolerance, basis="float64 round-off of the two sums, relative to |dE/dt|"
    )

    return within(
        claim, prediction=np.abs(rate), measured=np.abs(speed), error_model=model, relative=True
    )


def gradient_structure_evidence(
    claim: str, jacobian: Numbers, *, relative_tolerance: float = 1e-9
) -> Evidence:
    """A velocity field on the configuration space is the gradient of a function (in the metric
    it was twisted by) iff its Jacobian is symmetric: the relative asymmetry
    ``|J - J^T|_F / |J|_F`` is 0 within float64 rounding (``holds``), or beyond it
    (``refuted``: no energy has this flow as its gradient flow in that metric)."""

    J = np.asarray(jacobian, dtype=float)
    asym = float(np.linalg.norm(J - J.T) / max(np.linalg.norm(J), 1e-300))
    model = ErrorModel.rounding(
        relative_tolerance, basis="float64 round-off of a forward-mode Jacobian"
    )
    return within(claim, prediction=0.0, measured=asym, error_model=model)


def bounded_growth_evidence(
    claim: str,
    growth: Numbers,
    reached: Numbers,
    *,
    relative_error: float,
    basis: str,
) -> Evidence:
    """A flow stays below a derived growth bound up to its horizon: ``growth`` is the measured
    size over the bound (e.g. ``|Sigma(t)| / (|Sigma_0| e^{r t})``) at every save of every
    draw, ``reached`` whether each draw's solve reached its horizon (no blow-up, no failure).

    ``refuted`` when a draw stopped early (a blow-up) or exceeds the bound beyond
    ``relative_error``; ``holds`` otherwise."""
    g = np.asarray(growth, dtype=float)
    ok = np.asarray(reached, dtype=bool)
    model = ErrorModel.solver_tolerance(relative_error, basis=basis)
    if not np.all(ok):
        reason = f"{int(np.sum(~ok))} of {ok.size} draws did not reach their horizon"
        return Evidence(claim, 1.0, g, model, Verdict.refuted, None, reason)
    return at_most(claim, measured=float(np.nanmax(g)), limit=1.0, error_model=model)


def single_cluster_evidence(
    claim: str, counts: ArrayLike | Sequence[float], *, basis: str
) -> Evidence:
    """Every system's cluster count is one (``classified``; no systems: ``inconclusive``)."""
    counts = np.asarray(counts, dtype=float)
    return classified(
        claim,
        prediction=np.ones_like(counts),
        measured=counts,
        basis=basis,
        decided=counts.size > 0,
    )
