"""The third method of ``pde-ranks``: a rank run solved by SciPy's DOP853 on the published
right-hand side (transformer_pde.md, rank histograms).

Where the published projected Euler and the accurate solve (diffrax, adaptive Tsit5 on
jaxdyn's fields) disagree, this decides. It shares nothing with the accurate solve but the
stopping rule: the right-hand side is the published formula in NumPy
(:data:`PAPER_RHS`), the integrator SciPy's eighth-order Dormand-Prince with its own error
control, the stopping times its own event location (a root of ``|F(Sigma)|_F - tol_low`` or
of ``tr Sigma - tol_high`` on its dense output). Each run takes tens of milliseconds and
compiles nothing.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from jaxdyn._status import Status, status_code

from ._published_euler import PAPER_RHS


def dop853_rank_outcome(
    attention: str,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    Sigma0: np.ndarray,
    *,
    tol_low: float,
    tol_high: float,
    t1: float,
    rtol: float,
    atol: float,
    threshold: float = 0.1,
) -> tuple[int, int]:
    """One rank run, ``dSigma/dt = F(Sigma)`` from ``Sigma0``, stopped as the accurate solve
    stops it: converged when ``|F(Sigma)|_F`` falls to ``tol_low``, diverged when
    ``tr Sigma`` reaches ``tol_high``, otherwise run to ``t1``.

    Args:
        attention: ``"softmax"`` or ``"l2"`` (the published right-hand side).
        Q, K, V: the run's weights.
        Sigma0: initial covariance.
        tol_low: converged when ``|F|_F`` falls to it.
        tol_high: diverged when ``tr Sigma`` reaches it.
        t1: horizon.
        rtol: relative tolerance of DOP853.
        atol: absolute tolerance of DOP853.
        threshold: the rank counts eigenvalues above it.

    Returns:
        ``(status, rank)``: a :class:`jaxdyn.Status` code (``steady_state``, ``blowup``,
        ``successful`` at ``t1``, ``dt_min_reached`` if SciPy's step failed) and the number
        of eigenvalues of the final state above ``threshold``.
    """
    rhs = PAPER_RHS[attention]
    Q, K, V = (np.asarray(w, float) for w in (Q, K, V))
    d = Q.shape[1]

    def field(t, y):
        return rhs(y.reshape(d, d), Q, K, V).ravel()

    def converged(t, y):
        return np.linalg.norm(field(t, y)) - tol_low

    def diverged(t, y):
        return np.trace(y.reshape(d, d)) - tol_high

    converged.terminal, converged.direction = True, -1
    diverged.terminal, diverged.direction = True, 1
    sol = solve_ivp(
        field,
        (0.0, t1),
        np.asarray(Sigma0, float).ravel(),
        method="DOP853",
        rtol=rtol,
        atol=atol,
        events=(converged, diverged),
    )
    if sol.status == 1:  # a terminal event: the last point is the event's
        status = Status.steady_state if sol.t_events[0].size else Status.blowup
    elif sol.status == 0:
        status = Status.successful
    else:
        status = Status.dt_min_reached
    final = sol.y[:, -1].reshape(d, d)
    rank = int(np.sum(np.linalg.eigvalsh(0.5 * (final + final.T)) > threshold))
    return status_code(status), rank
