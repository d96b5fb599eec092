"""Verdicts on learning coefficients (docs/llc.md, claims table).

Each function takes measurements (an estimate, its standard error, a bias budget) and returns
:class:`jaxdyn.evidence.Evidence`; the estimates themselves come from
:func:`jaxdyn.llc.estimate_llc` and :func:`jaxdyn.llc.step_size_effect`.
"""

from __future__ import annotations

import numpy as np

from ..evidence import ErrorModel, Evidence, Verdict, estimate

__all__ = ["free_energy_transition", "learning_coefficient", "stationary"]


def _fmt(x) -> str:
    return f"{float(x):.4g}"


def _interval(
    claim,
    prediction,
    measured,
    alternatives,
    *,
    anchor,
    q,
    stderr,
    bias,
    dof,
    confidence,
    basis,
    undecided,
) -> Evidence:
    """The verdict of an interval ``measured +- (q SE + bias)`` (``bias`` a bound on the
    systematic error): ``refuted`` when it excludes ``prediction``; ``inconclusive`` when an
    alternative (a finite one) is within the half-width of ``anchor``, or (``undecided`` the
    reason) when a number is not finite; ``holds`` otherwise."""
    alts = [float(a) for a in alternatives]
    if not alts:
        raise ValueError(f"{claim!r}: a statistical check needs an alternative to reject")
    if not bias >= 0:
        raise ValueError(f"the bias or correction must be a bound >= 0, got {bias}")
    numbers = (prediction, measured, stderr)
    if not all(np.isfinite(float(x)) for x in numbers):
        model = ErrorModel(
            "standard_error_plus_bias", 0.0, dof=dof, confidence=confidence, basis=basis
        )
        return Evidence(claim, prediction, measured, model, Verdict.inconclusive, alts, undecided)
    half = q * float(stderr) + float(bias)
    model = ErrorModel(
        "standard_error_plus_bias",
        half,
        dof=dof,
        confidence=confidence,
        basis=f"{_fmt(q)} x SE {_fmt(stderr)} + bias {_fmt(bias)}; {basis}",
    )
    gap = abs(float(measured) - float(prediction))
    close = [a for a in alts if np.isfinite(a) and abs(a - float(anchor)) <= half]
    if gap > half:
        verdict, reason = (
            Verdict.refuted,
            f"|{_fmt(measured)} - {_fmt(prediction)}| exceeds {_fmt(half)}",
        )
    elif close:
        verdict = Verdict.inconclusive
        reason = f"+-{_fmt(half)} also admits {close}: more chains or a smaller bias would decide"
    else:
        verdict, reason = Verdict.holds, f"within +-{_fmt(half)}; the alternatives {alts} are not"
    return Evidence(claim, prediction, measured, model, verdict, alts, reason)


def learning_coefficient(
    claim: str,
    *,
    prediction: float,
    alternatives: list[float] | tuple[float, ...],
    value: float,
    stderr: float,
    num_chains: int,
    bias: float = 0.0,
    basis: str = "",
    confidence: float = 0.99,
) -> Evidence:
    """The estimate against a predicted learning coefficient.

    Interval: ``value +- (t_{num_chains - 1} SE + bias)``, ``bias`` a bound on the estimator's
    systematic error (localisation, step size, finite n beta: say which in ``basis``).
    ``refuted`` when the prediction is outside it; ``holds`` when it is inside and every
    alternative (the values a wrong theory gives, e.g. the regular count d / 2) is outside;
    ``inconclusive`` otherwise, or when the estimate or its standard error is not finite.
    """
    from scipy import stats

    if num_chains < 2:
        raise ValueError("a standard error over chains needs num_chains >= 2")
    q = float(stats.t.ppf(0.5 + confidence / 2, num_chains - 1))
    return _interval(
        claim,
        prediction,
        value,
        alternatives,
        anchor=value,
        q=q,
        stderr=stderr,
        bias=bias,
        dof=num_chains - 1,
        confidence=confidence,
        basis=basis,
        undecided="the estimate or its standard error is not finite",
    )


def stationary(est, *, relative: float = 0.25) -> Evidence:
    """The chains are stationary: the second half of the draws gives the same estimate as the
    first (drift 0), against the alternative of a drift of ``relative`` x |estimate|."""
    alt = relative * abs(float(est.llc))
    return estimate(
        "chains stationary (second-half minus first-half estimate = 0)",
        prediction=0.0,
        value=float(est.half_drift),
        standard_error=float(est.half_drift_stderr),
        dof=est.num_chains - 1,
        alternative=alt,
        basis="standard error of the per-chain half drift over chains",
    )


def free_energy_transition(
    claim: str,
    *,
    predicted: float,
    exact: float,
    alternatives: list[float] | tuple[float, ...],
    correction: float,
    stderr: float,
    confidence: float = 0.99,
    basis: str = "",
) -> Evidence:
    """Singular learning theory's free-energy prediction of a transition against the exact one.

    Each phase's free energy F = n L_n(w_phase) + lambda_phase ln n (Watanabe's expansion,
    dropping -(m - 1) ln ln n + O(1)); the prediction ``predicted`` is ln P where the two cross,
    ``exact`` the exact ln P*. Interval: ``predicted +- (z SE + correction)`` with ``stderr``
    the crossing's standard error from the LLC estimates' and ``correction`` the finite-n
    correction's effect on ln P* (the dropped terms, bounded or estimated: say how in
    ``basis``). ``refuted`` when ``exact`` is outside; ``holds`` when it is inside and every
    alternative crossing (the loss alone, the LLC terms swapped or at the regular count) is
    outside (an alternative with no crossing, nan, is outside); ``inconclusive`` otherwise, or
    when the predicted crossing does not exist (nan: the phases
    never exchange order where both exist).
    """
    from scipy import stats

    z = float(stats.norm.ppf(0.5 + confidence / 2))
    return _interval(
        claim,
        exact,
        predicted,
        alternatives,
        anchor=exact,
        q=z,
        stderr=stderr,
        bias=correction,
        dof=None,
        confidence=confidence,
        basis=f"bias: the finite-n correction in ln P*; {basis}",
        undecided="no crossing of the free energies where both phases exist (or no exact P*)",
    )
