"""The check contract: evidence (holds / refuted / inconclusive), consistency, report.

Evidence checks are pure decision functions of numbers and an :class:`ErrorModel`; an
experiment records their :class:`Evidence` with :meth:`jaxdyn.runs.Run.evidence`, and a test
feeds the same function a counterfactual (:func:`jaxdyn.runs.negative_control`).

The generic decisions every theory's claims call: equality within an error model
(:func:`within`, :func:`estimate`), one-sided bounds with the alternative they reject
(:func:`at_most`, :func:`at_least`), orders (:func:`ordered`), discrete outcomes
(:func:`classified`), trends and monotone series (:func:`trend`, :func:`monotone`), rates
(:func:`rate`), ensemble means (:func:`ensemble_mean`) and scaling exponents
(:func:`local_exponents`, :func:`extrapolated_exponent`). Decisions on times take censored
entries (a time not reached by the horizon is a lower bound).
"""

from ._contract import (
    ErrorModel as ErrorModel,
    Evidence as Evidence,
    Verdict as Verdict,
    at_least as at_least,
    at_most as at_most,
    classified as classified,
    estimate as estimate,
    ordered as ordered,
    within as within,
)
from ._decisions import (
    ensemble_mean as ensemble_mean,
    extrapolated_exponent as extrapolated_exponent,
    local_exponents as local_exponents,
    monotone as monotone,
    rate as rate,
    trend as trend,
)

__all__ = [
    "ErrorModel",
    "Evidence",
    "Verdict",
    "at_least",
    "at_most",
    "classified",
    "ensemble_mean",
    "estimate",
    "extrapolated_exponent",
    "local_exponents",
    "monotone",
    "ordered",
    "rate",
    "trend",
    "within",
]
