"""Generic decisions on series and samples: trends, monotone series, rates, ensemble means,
local and extrapolated exponents.

Like the decisions of ``_contract`` (:func:`within`, :func:`at_most`, ...), each is a pure
function of numbers returning an :class:`Evidence`, so a theory's claim calls one with its
measurements and a test feeds the same function a counterfactual on which it must not say
``holds``. A statistical decision names the alternatives it can reject and says
``inconclusive`` when its interval cannot reject them; a deterministic one takes its tolerance
from a stated bound (:class:`ErrorModel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike

from .._numerics import extrapolate_exponent, fit_line, fit_power_law
from ._contract import ErrorModel, Evidence, Verdict, at_least, at_most, estimate

Numbers = ArrayLike | Sequence
"""Measured numbers: arrays, scalars or (nested) sequences of them."""


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


def rate(
    claim: str,
    n: Numbers,
    errors: Numbers,
    *,
    prediction: float,
    alternatives: Sequence[float],
    confidence: float = 0.99,
) -> Evidence:
    """The exponent ``a`` of ``errors ~ n^a`` against ``prediction``, rejecting every value of
    ``alternatives``.

    The exponent is the least-squares slope of ``log errors`` on ``log n`` (one point per
    independent sample); its tolerance the slope's Student-t interval (``points - 2`` degrees
    of freedom) at ``confidence``. ``refuted`` when the interval excludes the prediction,
    ``holds`` when it contains the prediction and excludes every alternative, ``inconclusive``
    otherwise (more sizes or samples would decide). Non-positive or non-finite errors are left
    out; fewer than two sizes is ``inconclusive``.
    """
    alternatives = [float(a) for a in alternatives]
    if not alternatives:
        raise ValueError(f"{claim!r}: a rate decision needs at least one alternative to reject")
    n = np.asarray(n, dtype=float).ravel()
    errors = np.asarray(errors, dtype=float).ravel()
    keep = np.isfinite(errors) & (errors > 0) & np.isfinite(n) & (n > 0)
    if np.unique(n[keep]).size < 2:
        model = ErrorModel.standard_error(0.0, dof=None, confidence=confidence)
        return Evidence(
            claim,
            prediction,
            float("nan"),
            model,
            Verdict.inconclusive,
            alternatives,
            "fewer than two sizes with a finite positive error",
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
    return _combine(claim, parts, prediction, fit.slope, parts[0].error_model, alternatives)


def trend(
    claim: str,
    x: Numbers,
    y: Numbers,
    *,
    increasing: bool = True,
    alternative: float = 0.0,
    confidence: float = 0.99,
) -> Evidence:
    """``y`` grows (or falls) with ``x``: the least-squares slope of ``y`` on ``x`` (one point
    per independent sample) lies above (below) ``alternative`` (default 0: no trend) beyond
    its Student-t interval (``points - 2`` degrees of freedom) at ``confidence``.

    ``holds`` when the interval lies on the claimed side of the alternative, ``refuted`` when
    it lies on the other side, ``inconclusive`` when it contains the alternative (or fewer
    than three points leave no standard error).
    """
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
        return Evidence(
            claim,
            alternative,
            fit.slope,
            model,
            Verdict.inconclusive,
            alternative,
            "too few points",
        )
    decide = at_least if increasing else at_most
    return decide(
        claim, measured=fit.slope, limit=alternative, error_model=model, alternative=alternative
    )


def ensemble_mean(
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
    dependence within an ensemble or the tails of its terms. Several entries are tested
    jointly: the confidence per entry is Bonferroni-corrected to
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


def monotone(
    claim: str,
    series: Numbers,
    *,
    error: float | Numbers,
    basis: str,
    increasing: bool = False,
) -> Evidence:
    """A series never moves the wrong way by more than its error.

    ``error`` bounds each entry's deviation from the exact value (e.g. a step-doubling estimate
    of a solver's error), so a wrong-way step beyond the two entries' errors cannot be a
    discretisation artefact. ``refuted`` when some consecutive difference has the wrong sign
    beyond it, ``holds`` when none has and the series moves the claimed way overall (first to
    last) beyond the two end errors, ``inconclusive`` when it moves less than that.
    """
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


def local_exponents(x: Numbers, y: Numbers) -> tuple[np.ndarray, np.ndarray]:
    """The local exponents ``d ln y / d ln x`` between consecutive points (sorted by ``x``),
    and the geometric midpoints ``sqrt(x_i x_{i+1})`` where they apply.

    For ``y = C x^a`` every local exponent is ``a``; for ``y = x^a (ln x)^b`` it is
    ``a + b / ln x`` at the midpoint, up to ``O((ln x_{i+1} / x_i)^2)``: the drift that
    :func:`extrapolated_exponent` removes.
    """
    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    order = np.argsort(x)
    x, y = x[order], y[order]
    return np.diff(np.log(y)) / np.diff(np.log(x)), np.sqrt(x[1:] * x[:-1])


def _between_forms(
    claim: str, measured: float, law: float, alternative: float, *, error: float, basis: str
) -> Evidence:
    """Which of two exponents a measured one follows, at a resolution of a quarter of their
    gap ``g``: ``holds`` within ``g / 4`` of the law (beyond its own ``error``), ``refuted``
    within ``g / 4`` of the alternative or beyond the law's band on the side away from both,
    ``inconclusive`` in between or when its error straddles a band's edge."""
    m, p, a, d = float(measured), float(law), float(alternative), float(error)
    g = abs(p - a)
    band = 0.25 * g
    model = ErrorModel.bound(band, basis=f"a quarter of the gap between the exponents; {basis}")
    args = (claim, p, m, model)
    if not (np.isfinite(m) and np.isfinite(d)) or g == 0:
        return Evidence(*args, Verdict.inconclusive, a, "not finite, or the exponents coincide")
    if abs(m - p) + d <= band:
        return Evidence(*args, Verdict.holds, a, f"{m:.4f} within {band:.3g} of the law {p:.4f}")
    between = min(p, a) + band < m < max(p, a) - band
    straddles = abs(abs(m - p) - band) <= d or abs(abs(m - a) - band) <= d
    if between or straddles:
        return Evidence(
            *args,
            Verdict.inconclusive,
            a,
            f"{m:.4f} lies between the law {p:.4f} and the alternative {a:.4f} (error {d:.3g}):"
            " a wider range would decide",
        )
    return Evidence(
        *args,
        Verdict.refuted,
        a,
        f"{m:.4f} is outside the law's band {p:.4f} +- {band:.3g} (alternative {a:.4f})",
    )


def extrapolated_exponent(
    claim: str, x: Numbers, exponents: Numbers, law: float, alternative: float
) -> Evidence:
    """An asymptotic exponent: local exponents ``exponents`` at ``x`` (e.g. the midpoints of
    :func:`local_exponents`) extrapolated to ``x -> infinity`` in ``1 / ln x`` (the parabola
    through the three largest ``x``; its error the difference from the line through the two
    largest), against the law's exponent and an ``alternative``.

    The resolution is a quarter of the gap ``g = |law - alternative|``: ``holds`` when the
    extrapolation (with its error) lies within ``g / 4`` of the law, ``refuted`` when it lies
    within ``g / 4`` of the alternative or beyond the law on the side away from both,
    ``inconclusive`` in between, with fewer than three finite exponents, or when the error
    straddles a band's edge (a range reaching larger ``x`` would decide).
    """
    value, error = extrapolate_exponent(x, exponents)
    return _between_forms(
        claim,
        value,
        law,
        alternative,
        error=error,
        basis="extrapolated in 1 / ln x (parabola through the three largest x; error: its "
        "difference from the line through the two largest)",
    )
