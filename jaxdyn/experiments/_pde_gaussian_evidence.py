"""Measurements of the Gaussian-side claims; the decisions live in
:mod:`jaxdyn.meanfield.claims` (re-imported here under the names the experiments use).
Decisions of the Gaussian-side claims (transformer_pde.md, "Closed forms to test against",
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

from jaxdyn.meanfield.claims import (
    covariance as covariance_evidence,
    error_bound as error_bound_evidence,
    outcome as outcome_evidence,
    softmax_blowup_time as blowup_time_evidence,
)

__all__ = [
    "blowup_time_evidence",
    "covariance_evidence",
    "error_bound_evidence",
    "l2_growth_excess",
    "outcome_evidence",
    "rank_one_blowup_bound",
]


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
