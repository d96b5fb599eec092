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

    alts = [float(a) for a in alternatives]
    if not alts:
        raise ValueError(f"{claim!r}: a statistical check needs an alternative to reject")
    if num_chains < 2:
        raise ValueError("a standard error over chains needs num_chains >= 2")
    if bias < 0:
        raise ValueError(f"bias must be a bound >= 0, got {bias}")
    value, stderr = float(value), float(stderr)
    q = float(stats.t.ppf(0.5 + confidence / 2, num_chains - 1))
    if not (np.isfinite(value) and np.isfinite(stderr)):
        model = ErrorModel(
            "standard_error_plus_bias", 0.0, dof=num_chains - 1, confidence=confidence, basis=basis
        )
        return Evidence(
            claim,
            prediction,
            value,
            model,
            Verdict.inconclusive,
            alts,
            "the estimate or its standard error is not finite",
        )
    half = q * stderr + float(bias)
    model = ErrorModel(
        "standard_error_plus_bias",
        half,
        dof=num_chains - 1,
        confidence=confidence,
        basis=f"t x SE ({_fmt(q)} x {_fmt(stderr)}) + bias {_fmt(bias)}; {basis}",
    )
    gap = abs(value - float(prediction))
    if gap > half:
        return Evidence(
            claim,
            prediction,
            value,
            model,
            Verdict.refuted,
            alts,
            f"|estimate - prediction| = {_fmt(gap)} exceeds {_fmt(half)}",
        )
    close = [a for a in alts if abs(value - a) <= half]
    if close:
        return Evidence(
            claim,
            prediction,
            value,
            model,
            Verdict.inconclusive,
            alts,
            f"the interval (half-width {_fmt(half)}) also contains {close}: "
            "more chains or a smaller bias would decide",
        )
    return Evidence(
        claim,
        prediction,
        value,
        model,
        Verdict.holds,
        alts,
        f"the prediction is inside +-{_fmt(half)}, the alternatives {alts} outside",
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

    alts = [float(a) for a in alternatives]
    if not alts:
        raise ValueError(f"{claim!r}: a statistical check needs an alternative to reject")
    if not (correction >= 0):
        raise ValueError(f"correction must be a bound >= 0, got {correction}")
    predicted, exact, stderr = float(predicted), float(exact), float(stderr)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    if not (np.isfinite(predicted) and np.isfinite(exact) and np.isfinite(stderr)):
        model = ErrorModel("standard_error_plus_bias", 0.0, confidence=confidence, basis=basis)
        return Evidence(
            claim,
            exact,
            predicted,
            model,
            Verdict.inconclusive,
            alts,
            "no crossing of the free energies where both phases exist (or no exact P*)",
        )
    half = z * stderr + float(correction)
    model = ErrorModel(
        "standard_error_plus_bias",
        half,
        confidence=confidence,
        basis=f"z x SE ({_fmt(z)} x {_fmt(stderr)}) + finite-n correction {_fmt(correction)} "
        f"in ln P*; {basis}",
    )
    gap = abs(predicted - exact)
    if gap > half:
        return Evidence(
            claim,
            exact,
            predicted,
            model,
            Verdict.refuted,
            alts,
            f"|ln P*_predicted - ln P*_exact| = {_fmt(gap)} exceeds {_fmt(half)}",
        )
    close = [a for a in alts if np.isfinite(a) and abs(a - exact) <= half]
    if close:
        return Evidence(
            claim,
            exact,
            predicted,
            model,
            Verdict.inconclusive,
            alts,
            f"the exact ln P* is within +-{_fmt(half)} of the prediction, but an alternative "
            f"{close} is as close: the prediction's LLC terms are not what decides it",
        )
    return Evidence(
        claim,
        exact,
        predicted,
        model,
        Verdict.holds,
        alts,
        f"the exact ln P* is within +-{_fmt(half)} of the prediction, "
        f"the alternatives {alts} are not",
    )
