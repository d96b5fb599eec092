"""The paper's rank-histogram runs solved accurately (transformer_pde.md, "The paper's numerical
experiments"): the published stopping rule on an adaptive solve.

A rank-histogram run integrates ``dSigma/dt = F(Sigma)`` from ``Sigma_0`` (mean zero) and stops
as the published loop stops it: *converged* at the first time ``|F(Sigma)|_F = tol_low``
(``Status.steady_state``), *diverged* when ``tr Sigma = tol_high`` (``Status.blowup``), or not
finished at ``t1`` (the published horizon ``max_steps * h``; ``Status.successful``). The limiting
rank is the number of eigenvalues of ``Sigma`` above 0.1 at the stop, located on an adaptive
solve's interpolant rather than at the end of an Euler step.
"""

from __future__ import annotations

import diffrax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxdyn.sweep._diffeq import DiffeqMember

from ._closed_forms import limiting_rank
from ._simulate_gaussian import GaussianODE, GaussianSolution, gaussian_ode
from .fields._base import AbstractGaussianClosed
from .fields._quadratic import QuadraticKeySoftmax


def rank_ode(
    field: AbstractGaussianClosed,
    cov0: Float[ArrayLike, "d d"],
    *,
    tol_low: Float[ArrayLike, ""],
    tol_high: Float[ArrayLike, ""],
    t1: Float[ArrayLike, ""],
    rtol: Float[ArrayLike, ""] = 1e-8,
    atol: Float[ArrayLike, ""] = 1e-10,
    max_steps: int = 100_000,
    solver: diffrax.AbstractSolver | None = None,
) -> GaussianODE:
    """The covariance ODE of one rank run with the published stopping rule (module docstring).

    Args:
        field: a Gaussian-closed field (e.g.
            :meth:`jaxdyn.meanfield.QuadraticKeySoftmax.softmax_or_l2`).
        cov0: initial covariance.
        tol_low: converged when ``|dSigma/dt|_F`` falls to ``tol_low``.
        tol_high: diverged when ``tr Sigma`` reaches ``tol_high``.
        t1: horizon (the published ``max_steps * h``).
        rtol: relative tolerance of the adaptive solve.
        atol: absolute tolerance of the adaptive solve.
        max_steps: solver steps before ``Status.max_steps_reached``.
        solver: a diffrax solver (default ``Tsit5``).

    Returns:
        The `jaxdyn.meanfield.GaussianODE` (no loss-of-definiteness check: the flow is a
        congruence of ``Sigma_0``).
    """
    cov0 = jnp.asarray(cov0)
    return gaussian_ode(
        field,
        jnp.zeros(cov0.shape[0], cov0.dtype),
        cov0,
        t1,
        solver=solver,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        blowup_trace=tol_high,
        steady_tol=tol_low,
        psd_tol=None,
    )


def rank_outcome(sol: GaussianSolution, threshold: float = 0.1) -> dict[str, Array]:
    """The sweep outputs of a rank run: ``rank``, ``final_cov``, ``eigenvalues``, ``t_final``,
    ``num_steps`` and ``status`` (``steady_state`` converged, ``blowup`` diverged,
    ``successful`` not finished by ``t1``)."""
    cov = sol.final_cov
    return {
        "rank": limiting_rank(cov, threshold),
        "final_cov": cov,
        "eigenvalues": jnp.linalg.eigvalsh(0.5 * (cov + cov.T)),
        "t_final": sol.t_final,
        "num_steps": sol.num_steps,
        "status": sol.status,
    }


def pad_rank_member(
    Q: np.ndarray, K: np.ndarray, V: np.ndarray, Sigma0: np.ndarray, D: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Embed a run of dimension ``d`` in ``D >= d`` dimensions without changing it, so that runs
    of every dimension share one compiled program.

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
    (see :func:`rank_ode`); outputs those of :func:`rank_outcome`. Solved in segments, so that
    a sweep costs the sum of its runs' steps; softmax and L2 members share one field
    (:meth:`QuadraticKeySoftmax.softmax_or_l2`)."""

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
