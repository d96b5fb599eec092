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

from jaxdyn.evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_most,
    classified,
    ensemble_mean,
    monotone,
    rate,
    trend,
    within,
)

# the generic decisions live in jaxdyn.evidence; these names stay for the experiments
ensemble_mean_evidence = ensemble_mean
monotone_evidence = monotone
trend_evidence = trend

# measured numbers: arrays, scalars or (nested) sequences of them
Numbers = ArrayLike | Sequence


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
    """:func:`jaxdyn.evidence.rate` with the particle closure's defaults: prediction -1/2,
    alternatives 0 (an error that does not decay) and -1 (a deterministic quadrature's)."""
    return rate(
        claim, n, errors, prediction=prediction, alternatives=alternatives, confidence=confidence
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
