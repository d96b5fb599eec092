"""Decisions of the Gaussian-side claims (transformer_pde.md, "Closed forms to test against",
"The paper's numerical experiments"): pure functions of numbers that return
:class:`jaxdyn.evidence.Evidence`, so an experiment records them and a test feeds them a
counterfactual.

- :func:`outcome_evidence`: a discrete outcome per member (blew up, converged, a rank) against
  the one the theory predicts; ``holds`` iff every member has it.
- :func:`blowup_time_evidence`: solver blow-up times against the closed form, relative error
  within the solver's tolerance.
- :func:`covariance_evidence`: covariances against an exact solution (absolute entry error).
- :func:`error_bound_evidence`: per-member errors (a distance, an angle) against a derived
  bound on each.
- :func:`rank_one_blowup_bound` and :func:`l2_growth_excess` compute the derived quantities of
  two claims (softmax blow-ups become rank one; L2 grows at most exponentially).
"""

from __future__ import annotations

import numpy as np

from jaxdyn.evidence import ErrorModel, Evidence, classified, within


def outcome_evidence(claim: str, *, predicted, measured, basis: str) -> Evidence:
    """``holds`` iff every member's ``measured`` outcome equals ``predicted`` (broadcast).

    Recorded as counts: the prediction is the number of members, the measurement the number
    whose outcome is the predicted one."""
    predicted, measured = np.broadcast_arrays(np.asarray(predicted), np.asarray(measured))
    if predicted.size == 0:
        return classified(claim, prediction=0, measured=0, basis=basis, decided=False)
    agree = int(np.sum(predicted == measured))
    return classified(claim, prediction=int(predicted.size), measured=agree, basis=basis)


def blowup_time_evidence(closed_form, measured, *, tolerance: float) -> Evidence:
    """Solver blow-up times ``measured`` against the closed-form ``t*`` (softmax, ``V = I``):
    ``holds`` iff every relative error is at most ``tolerance``.

    The pole extrapolation ``t + tr / (d tr/dt)`` at ``tr = blowup_trace`` is exact up to
    ``O(blowup_trace^{-2})`` relative, so ``tolerance`` is the solver's global error."""
    closed_form = np.asarray(closed_form, float)
    measured = np.asarray(measured, float)
    return within(
        "softmax (V = I) blows up at t* = 1 / lambda_max(Sigma0^1/2 (A + A^T) Sigma0^1/2)",
        prediction=closed_form,
        measured=measured,
        relative=True,
        error_model=ErrorModel.solver_tolerance(
            tolerance,
            basis="relative global error of the tight solve; pole extrapolation "
            "O(1 / blowup_trace^2)",
        ),
    )


def covariance_evidence(claim: str, exact, measured, *, tolerance: float, basis: str) -> Evidence:
    """Covariances ``measured`` against an exact solution: every entry within ``tolerance``."""
    return within(
        claim,
        prediction=np.asarray(exact, float),
        measured=np.asarray(measured, float),
        error_model=ErrorModel.solver_tolerance(tolerance, basis=basis),
    )


def error_bound_evidence(claim: str, errors, bounds, *, basis: str) -> Evidence:
    """Per-member ``errors >= 0`` against a derived bound on each: ``holds`` iff every error
    is at most its bound (an empty set of members is ``inconclusive``)."""
    errors = np.asarray(errors, float)
    bounds = np.broadcast_to(np.asarray(bounds, float), errors.shape)
    if errors.size == 0:
        return classified(claim, prediction=0, measured=0, basis=basis, decided=False)
    return within(
        claim,
        prediction=np.zeros_like(errors),
        measured=errors,
        error_model=ErrorModel.bound(bounds, basis=basis),
    )


def rank_one_blowup_bound(cov0, A, t_star, trace) -> np.ndarray:
    """``lambda_2 / lambda_1 <= d / (mu_2 tr Sigma)`` before a softmax ``V = I`` blow-up.

    ``Sigma(t)^{-1} = Sigma_0^{-1} - t (A + A^T)`` decreases to ``M* = Sigma_0^{-1} - t* (A +
    A^T)``, whose smallest eigenvalue is 0 and second ``mu_2``, so ``lambda_2(Sigma(t)) <= 1 /
    mu_2`` while ``lambda_1 >= tr / d``. Batched over a leading axis."""
    cov0 = np.asarray(cov0, float)
    A = np.asarray(A, float)
    d = cov0.shape[-1]
    sym = A + np.swapaxes(A, -1, -2)
    m_star = np.linalg.inv(cov0) - np.asarray(t_star, float)[..., None, None] * sym
    mu_2 = np.linalg.eigvalsh(m_star)[..., 1]
    return d / (mu_2 * np.asarray(trace, float))


def l2_growth_excess(ts, traces, cov0, rates) -> np.ndarray:
    """``log tr Sigma(t) - log(d |Sigma_0|_2) - r t`` per save (``<= 0`` is the L2 bound
    ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}``, :func:`jaxdyn.meanfield.l2_growth_rate`); saves
    after a solve's end (``ts`` not finite) give ``-inf``, a non-finite trace ``+inf``."""
    ts, traces = np.asarray(ts, float), np.asarray(traces, float)
    cov0 = np.asarray(cov0, float)
    d = cov0.shape[-1]
    start = np.log(d * np.linalg.norm(cov0, 2, axis=(-2, -1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = np.log(traces) - start[..., None] - np.asarray(rates, float)[..., None] * ts
    excess = np.where(np.isfinite(excess), excess, np.inf)
    return np.where(np.isfinite(ts), excess, -np.inf)
