"""A faithful NumPy re-implementation of the published projected-Euler loop of the paper's rank
histograms (transformer_pde.md, "The paper's numerical experiments").

Projected explicit Euler on the covariance ODE ``dSigma/dt = F(Sigma)``:
``Sigma <- P(Sigma + h F(Sigma))``, ``P`` replacing negative eigenvalues by ``1e-14``. At each
step ``|F(Sigma)|_F`` is taken before the update; after the update the run stops as converged
if that norm was below ``tol_low``, or as diverged if ``tr Sigma > tol_high``. The limiting rank
counts the eigenvalues above 0.1 of the state *before* the final update.

It is deliberately a plain Python loop over runs and steps, as published: it is the reference
the JAX solvers are compared with run by run, and the baseline of
``benchmarks/bench_pde_ranks.py``. Outcomes are :class:`jaxdyn.Status` codes:
``steady_state`` (converged), ``blowup`` (diverged), ``max_steps_reached``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from jaxdyn import Status, status_code

from ._paper import PaperRankInputs, RankPanelSettings

CONVERGED = status_code(Status.steady_state)
DIVERGED = status_code(Status.blowup)
NOT_FINISHED = status_code(Status.max_steps_reached)


def paper_softmax_rhs(Sigma: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """``V Sigma A Sigma + transpose``, ``A = K^T Q / sqrt(d)`` (the paper's softmax ODE)."""
    A = K.T @ Q / np.sqrt(Q.shape[1])
    M = V @ Sigma @ A @ Sigma
    return M + M.T


def paper_l2_rhs(Sigma: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """``2 V Sigma (I + 2 K^T K Sigma)^{-1} A Sigma + transpose`` (the paper's L2 ODE)."""
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    M = 2.0 * V @ Sigma @ np.linalg.inv(np.eye(d) + 2.0 * K.T @ K @ Sigma) @ A @ Sigma
    return M + M.T


PAPER_RHS = {"softmax": paper_softmax_rhs, "l2": paper_l2_rhs}


def _softmax_rhs_of(Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """:func:`paper_softmax_rhs` with its constant ``A`` computed once: the same operations in
    the same order on the same operands, so every step has the same bits."""
    A = K.T @ Q / np.sqrt(Q.shape[1])

    def rhs(Sigma):
        M = V @ Sigma @ A @ Sigma
        return M + M.T

    return rhs


def _l2_rhs_of(Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """:func:`paper_l2_rhs` with its constants computed once (``2.0 * V @ ...`` and
    ``2.0 * K.T @ K @ ...`` associate from the left, so ``2.0 * V`` and ``2.0 * K.T @ K`` are
    the operands the published expression multiplies): the same bits every step."""
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    eye, two_v, two_ktk = np.eye(d), 2.0 * V, 2.0 * K.T @ K

    def rhs(Sigma):
        M = two_v @ Sigma @ np.linalg.inv(eye + two_ktk @ Sigma) @ A @ Sigma
        return M + M.T

    return rhs


_RHS_OF = {"softmax": _softmax_rhs_of, "l2": _l2_rhs_of}


@dataclasses.dataclass(frozen=True)
class EulerResult:
    """One projected-Euler run.

    Attributes:
        Sigma: the state before the final update (converged runs) or the last state.
        status: a :class:`jaxdyn.Status` code (``steady_state``, ``blowup``,
            ``max_steps_reached``).
        steps: updates made.
        t: ``steps * dt``.
        projected: updates that produced a negative eigenvalue (replaced by the floor).
    """

    Sigma: np.ndarray
    status: int
    steps: int
    t: float
    projected: int = 0

    @property
    def converged(self) -> bool:
        """Whether the run stopped on ``|F|_F < tol_low``."""
        return self.status == CONVERGED


def projected_euler(
    rhs: Callable[[np.ndarray], np.ndarray],
    Sigma0: np.ndarray,
    *,
    dt: float,
    tol_low: float,
    tol_high: float = 1e3,
    max_steps: int = 1_000_000,
    floor: float = 1e-14,
) -> EulerResult:
    """The published integrator ``Sigma <- P(Sigma + dt rhs(Sigma))`` (see the module docstring).

    Args:
        rhs: ``Sigma -> dSigma/dt`` (NumPy).
        Sigma0: initial covariance.
        dt: step size.
        tol_low: converged when ``|rhs|_F`` before a step is below it.
        tol_high: diverged when ``tr Sigma`` after a step exceeds it.
        max_steps: steps before giving up (status ``max_steps_reached``).
        floor: value given to negative eigenvalues by the projection.

    Returns:
        An :class:`EulerResult`; a converged run returns the state before its final update.
    """
    Sigma = np.array(Sigma0, dtype=float)
    projected = 0
    eigh = np.linalg.eigh
    # The loop is the benchmarks' baseline and pde-ranks' reference: per step only the
    # operations of the published loop, written with the fewest Python calls (|F|_F as
    # sqrt(f . f) over the flattened F is how np.linalg.norm computes it; Sigma.trace() is
    # np.trace): the same bits, about a third fewer interpreter calls.
    for step in range(1, max_steps + 1):
        F = rhs(Sigma)
        f = F.ravel()
        norm = np.sqrt(f.dot(f))
        before = Sigma
        w, U = eigh(Sigma + dt * F)
        negative = w[0] < 0
        if negative:
            projected += 1
            w = np.where(w < 0, floor, w)
        Sigma = (U * w) @ U.T
        if norm < tol_low:
            return EulerResult(before, CONVERGED, step, step * dt, projected)
        if Sigma.trace() > tol_high:
            return EulerResult(Sigma, DIVERGED, step, step * dt, projected)
    return EulerResult(Sigma, NOT_FINISHED, max_steps, max_steps * dt, projected)


@dataclasses.dataclass(frozen=True)
class RankAttempts:
    """The published attempt loop of one panel: one entry per attempt made, in order.

    Attributes:
        run: run index paired with each attempt (``Q, V`` entry).
        attempt: attempt index (``Sigma_0`` entry).
        status: :class:`jaxdyn.Status` code of each attempt.
        rank: limiting rank of converged attempts (``-1`` otherwise).
        steps: Euler steps of each attempt.
        projected: steps whose update had a negative eigenvalue (set to the floor).
        seconds: wall time of each attempt (the loop is the benchmarks' baseline).
    """

    run: np.ndarray
    attempt: np.ndarray
    status: np.ndarray
    rank: np.ndarray
    steps: np.ndarray
    projected: np.ndarray
    seconds: np.ndarray

    @property
    def converged(self) -> np.ndarray:
        """Mask of the attempts that converged (the panel's runs)."""
        return self.status == CONVERGED


def limiting_rank_numpy(Sigma: np.ndarray, threshold: float = 0.1) -> int:
    """Number of eigenvalues of ``Sigma`` above ``threshold`` (NumPy)."""
    return int(np.sum(np.linalg.eigvalsh(Sigma) > threshold))


def published_rank_attempts(
    inputs: PaperRankInputs,
    settings: RankPanelSettings,
    attention: str,
    *,
    runs: int | None = None,
    dt: float | None = None,
) -> RankAttempts:
    """Run the published attempt loop of one panel with :func:`projected_euler`.

    Attempt ``a`` is paired with the current run index ``r``; the index advances only when the
    attempt converges, until ``runs`` runs have converged or the attempts run out.

    Args:
        inputs: the panel's draws (:func:`jaxdyn.meanfield.paper_rank_inputs`).
        settings: the panel's integrator settings.
        attention: ``"softmax"`` or ``"l2"``.
        runs: run indices to fill (default: all of ``inputs``).
        dt: step size replacing ``settings.dt`` (e.g. ``settings.dt / 20``).

    Returns:
        A :class:`RankAttempts`.
    """
    rhs_of = _RHS_OF[attention]
    runs = inputs.Q.shape[0] if runs is None else runs
    rows: list[tuple[int, int, int, int, int, int]] = []
    seconds: list[float] = []
    r = 0
    for a in range(min(settings.attempts, inputs.Sigma0.shape[0])):
        if r == runs:
            break
        Q, K, V = inputs.Q[r], inputs.K[r], inputs.V[r]
        start = time.perf_counter()
        res = projected_euler(
            rhs_of(Q, K, V),
            inputs.Sigma0[a],
            dt=settings.dt if dt is None else dt,
            tol_low=settings.tol_low,
            tol_high=settings.tol_high,
            max_steps=settings.max_steps,
            floor=settings.floor,
        )
        rank = limiting_rank_numpy(res.Sigma, settings.threshold) if res.converged else -1
        seconds.append(time.perf_counter() - start)
        rows.append((r, a, res.status, rank, res.steps, res.projected))
        r += int(res.converged)
    cols = np.array(rows, dtype=np.int64).reshape(-1, 6).T
    return RankAttempts(*(c.astype(np.int32) for c in cols), seconds=np.array(seconds))


def rank_histogram(ranks: np.ndarray, d: int) -> np.ndarray:
    """Counts of ranks ``0 .. (d + 1) // 2``; ranks above ``(d + 1) // 2`` (and negative codes)
    are left out, as in the published figures."""
    cap = (d + 1) // 2
    ranks = np.asarray(ranks)
    kept = ranks[(ranks >= 0) & (ranks <= cap)]
    return np.bincount(kept, minlength=cap + 1)
