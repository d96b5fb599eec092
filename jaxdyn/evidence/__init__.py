"""The check contract: evidence (holds / refuted / inconclusive), consistency, report.

Evidence checks are pure decision functions of numbers and an :class:`ErrorModel`; an
experiment records their :class:`Evidence` with :meth:`jaxdyn.runs.Run.evidence`, and a test
feeds the same function a counterfactual (:func:`jaxdyn.runs.negative_control`).
"""

from ._contract import (
    CheckKind as CheckKind,
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
