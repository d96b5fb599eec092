"""Limiting ranks of the paper's rank-histogram runs, solved accurately (transformer_pde.md, rank
histograms): the published stopping rule on an adaptive solve, and ``pde-ranks``' sweep member.

A rank-histogram run integrates ``dSigma/dt = F(Sigma)`` from ``Sigma_0`` (mean zero) and stops
as the published loop stops it: *converged* at the first time ``|F(Sigma)|_F = tol_low``
(``Status.steady_state``), *diverged* when ``tr Sigma = tol_high`` (``Status.blowup``), or not
finished at ``t1`` (the published horizon ``max_steps * h``; ``Status.successful``). The limiting
rank is the number of eigenvalues of ``Sigma`` above 0.1 at the stop. Here the stop is located on
an adaptive solve's interpolant (:func:`jaxdyn.meanfield.gaussian_ode`), not at the end of an
Euler step.

:func:`rank_ode` builds the problem of one run (to be solved whole or in segments) and
:func:`rank_outcome` post-processes it; :func:`rank_member` is the sweep member of many runs
(a :class:`jaxdyn.sweep.DiffeqMember`, solved in segments so that a sweep costs the sum of its
runs' steps; softmax and L2 members share one field,
:meth:`jaxdyn.meanfield.fields.QuadraticKeySoftmax.softmax_or_l2`). :func:`pad_rank_member` embeds a
``d``-dimensional run in ``D`` dimensions so that runs of every dimension share one compiled
program.
"""

from __future__ import annotations

import diffrax
import numpy as np

from jaxdyn.meanfield import rank_ode, rank_outcome
from jaxdyn.meanfield._simulate_gaussian import GaussianODE
from jaxdyn.meanfield.fields import QuadraticKeySoftmax
from jaxdyn.sweep._diffeq import DiffeqMember


def pad_rank_member(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, Sigma0: np.ndarray, D: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Embed a run of dimension ``d`` in ``D >= d`` dimensions without changing it.

    ``Q`` is zero-padded to ``(D // 2, D)`` and scaled by ``sqrt(D / d)``, so that
    ``A = K^T Q / sqrt(D)`` equals the unpadded ``K^T Q / sqrt(d)``; ``K`` is zero-padded (so
    ``K^T K`` is unchanged for L2); ``V`` and ``Sigma_0`` are zero-padded. The extra rows and
    columns of ``Sigma`` then stay exactly zero and add no eigenvalue.
    """
    k, d = Q.shape
    if D < d or D // 2 < k:
        raise ValueError(f"cannot pad a ({k}, {d}) member to D = {D}")
    Qp, Kp = np.zeros((D // 2, D)), np.zeros((D // 2, D))
    Qp[:k, :d], Kp[:k, :d] = Q * np.sqrt(D / d), K
    Vp, Sp = np.zeros((D, D)), np.zeros((D, D))
    Vp[:d, :d], Sp[:d, :d] = V, Sigma0
    return Qp, Kp, Vp, Sp


RANK_MEMBER_PARAMS = ("Q", "K", "V", "Sigma0", "attention", "tol_low", "tol_high", "t1")


def rank_member(
    *,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 100_000,
    solver: diffrax.AbstractSolver | None = None,
    threshold: float = 0.1,
) -> DiffeqMember:
    """The sweep member of rank runs: params ``Q, K, V, Sigma0`` (one run, e.g. padded by
    :func:`pad_rank_member`), ``attention`` (0 softmax, 1 L2), ``tol_low``, ``tol_high``, ``t1``
    (see :func:`rank_ode`); outputs those of :func:`rank_outcome`.

    Args:
        rtol: relative tolerance of the adaptive solve.
        atol: absolute tolerance of the adaptive solve.
        max_steps: solver steps per run.
        solver: a diffrax solver (default ``Tsit5``).
        threshold: the rank counts eigenvalues above it.

    Returns:
        A :class:`jaxdyn.sweep.DiffeqMember` for ``jaxdyn.sweep.run_sweep`` or ``Run.sweep``.
    """

    def ode(p) -> GaussianODE:
        field = QuadraticKeySoftmax.softmax_or_l2(p["Q"], p["K"], p["V"], p["attention"] == 1)
        return rank_ode(
            field, p["Sigma0"], tol_low=p["tol_low"], tol_high=p["tol_high"], t1=p["t1"],
            rtol=rtol, atol=atol, max_steps=max_steps, solver=solver,
        )  # fmt: skip

    return DiffeqMember(
        problem=lambda p, key: ode(p).diffeq_problem(),
        outputs=lambda p, problem, sol: rank_outcome(ode(p).solution(sol), threshold),
    )
