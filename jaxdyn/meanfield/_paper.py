"""The paper's own method, in NumPy: projected explicit Euler on Sigma, and its seeded inputs
(transformer_pde.md, "The paper's numerical experiments").

This is the reference the JAX solvers are compared against, run by run, and the baseline of
``benchmarks/bench_pde_ranks.py``. It is deliberately a plain Python loop over runs and steps,
as in the published code: ``Sigma <- P(Sigma + dt * F(Sigma))`` where ``P`` clips eigenvalues
at ``1e-14``, stopping when ``|F|_F < tol_low`` (converged), ``tr Sigma > tol_high`` (diverged)
or after ``max_iter`` steps.

Seeded construction [paper: the seeds; draw order and Sigma_0 normalisation open]: for one
histogram (one ``d``, one choice of V, one attention), ``np.random.seed(40)`` then ``Q_r =
randn(floor(d/2), d)``; for ``V = G^T G``, ``np.random.seed(26)`` (softmax) or ``27`` (L2)
then ``G_r = randn(d, d)``; ``np.random.seed(41)`` then ``G_r = randn(d, d)`` and ``Sigma_0 =
G_r G_r^T / d`` (``sigma0_norm="dim"``) or ``G_r G_r^T`` (``"none"``, the page's literal
text). ``K = -Q``. With ``weights="per_run"`` a new ``Q_r`` (and ``V_r``) is drawn for every
run ``r`` in turn; with ``"shared"`` one ``Q`` (and one ``V``) serves the whole histogram and
only ``Sigma_0`` varies. The legacy generator is reseeded for every histogram, so each
histogram is reproducible on its own.

Why the defaults (``per_run``, ``dim``): the page describes the paper's d = 3, softmax, V = I
histogram as "about half rank 2, half rank 1, a few rank 0". On these seeds (tol_low = 1e-3)
``per_run`` + ``dim`` gives (1, 50, 49, 0) runs of rank 0..3; ``per_run`` + ``none`` gives
(0, 32, 68, 0); ``shared`` gives no rank-0 run with either normalisation ((0, 43, 57, 0) and
(0, 27, 73, 0)). Dividing by ``d`` is the usual normalisation ``E Sigma_0 = I``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PAPER_SEED_Q = 40
PAPER_SEED_V = {"softmax": 26, "l2": 27}
PAPER_SEED_SIGMA = 41


@dataclasses.dataclass(frozen=True)
class PaperRankInputs:
    """Inputs of one rank histogram: ``Q, K (runs, floor(d/2), d)``, ``V, Sigma0 (runs, d, d)``."""

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    Sigma0: np.ndarray


RANK_WEIGHT_DRAWS = ("per_run", "shared")
RANK_SIGMA0_NORMS = ("dim", "none")


def paper_rank_inputs(
    d: int,
    runs: int,
    *,
    attention: str,
    value: str,
    weights: str = "per_run",
    sigma0_norm: str = "dim",
) -> PaperRankInputs:
    """The paper's seeded random construction for the rank histograms (see module docstring).

    ``attention`` is ``"softmax"`` or ``"l2"``; ``value`` is ``"identity"`` (V = I) or
    ``"random"`` (V = G^T G); ``weights`` is ``"per_run"`` (new Q, V every run) or
    ``"shared"`` (one Q, V per histogram); ``sigma0_norm`` is ``"dim"`` (``G G^T / d``) or
    ``"none"`` (``G G^T``).
    """
    if attention not in PAPER_SEED_V:
        raise ValueError(f"attention must be 'softmax' or 'l2', got {attention!r}")
    if value not in ("identity", "random"):
        raise ValueError(f"value must be 'identity' or 'random', got {value!r}")
    if weights not in RANK_WEIGHT_DRAWS:
        raise ValueError(f"weights must be one of {RANK_WEIGHT_DRAWS}, got {weights!r}")
    if sigma0_norm not in RANK_SIGMA0_NORMS:
        raise ValueError(f"sigma0_norm must be one of {RANK_SIGMA0_NORMS}, got {sigma0_norm!r}")
    if d < 2 or runs < 1:
        raise ValueError(f"need d >= 2 and runs >= 1, got d={d}, runs={runs}")
    k = d // 2
    draws = runs if weights == "per_run" else 1

    def repeat(x):
        return np.broadcast_to(x, (runs,) + x.shape[1:]).copy() if draws == 1 else x

    np.random.seed(PAPER_SEED_Q)
    Q = repeat(np.stack([np.random.randn(k, d) for _ in range(draws)]))
    if value == "identity":
        V = np.broadcast_to(np.eye(d), (runs, d, d)).copy()
    else:
        np.random.seed(PAPER_SEED_V[attention])
        Gs = [np.random.randn(d, d) for _ in range(draws)]
        V = repeat(np.stack([G.T @ G for G in Gs]))
    np.random.seed(PAPER_SEED_SIGMA)
    Gs = [np.random.randn(d, d) for _ in range(runs)]
    scale = 1.0 / d if sigma0_norm == "dim" else 1.0
    Sigma0 = np.stack([scale * (G @ G.T) for G in Gs])
    return PaperRankInputs(Q=Q, K=-Q, V=V, Sigma0=Sigma0)


def paper_softmax_rhs(Sigma, Q, K, V):
    """``V Sigma A Sigma + transpose``, ``A = K^T Q / sqrt(d)`` (the paper's softmax ODE)."""
    A = K.T @ Q / np.sqrt(Q.shape[1])
    M = V @ Sigma @ A @ Sigma
    return M + M.T


def paper_l2_rhs(Sigma, Q, K, V):
    """``2 V Sigma (I + 2 K^T K Sigma)^{-1} A Sigma + transpose`` (the paper's L2 ODE)."""
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    M = 2.0 * V @ Sigma @ np.linalg.inv(np.eye(d) + 2.0 * K.T @ K @ Sigma) @ A @ Sigma
    return M + M.T


@dataclasses.dataclass(frozen=True)
class EulerResult:
    Sigma: np.ndarray
    outcome: str  # "converged", "diverged" or "max_iter"
    steps: int
    t: float


def projected_euler(
    rhs,
    Sigma0: np.ndarray,
    *,
    dt: float,
    tol_low: float,
    tol_high: float = 1e3,
    max_iter: int = 1_000_000,
    clip: float = 1e-14,
) -> EulerResult:
    """The paper's integrator: ``Sigma <- P(Sigma + dt rhs(Sigma))``, eigenvalues clipped at
    ``clip``."""
    Sigma = np.array(Sigma0, dtype=float)
    for step in range(max_iter):
        F = rhs(Sigma)
        if np.linalg.norm(F) < tol_low:
            return EulerResult(Sigma, "converged", step, step * dt)
        if np.trace(Sigma) > tol_high:
            return EulerResult(Sigma, "diverged", step, step * dt)
        Sigma = Sigma + dt * F
        w, U = np.linalg.eigh(0.5 * (Sigma + Sigma.T))
        Sigma = (U * np.maximum(w, clip)) @ U.T
    return EulerResult(Sigma, "max_iter", max_iter, max_iter * dt)


def paper_limiting_ranks(
    inputs: PaperRankInputs,
    *,
    attention: str,
    dt: float,
    tol_low: float,
    tol_high: float = 1e3,
    max_iter: int = 1_000_000,
    threshold: float = 0.1,
    runs: int | None = None,
) -> tuple[np.ndarray, list[EulerResult]]:
    """Limiting ranks (eigenvalues above ``threshold``) of the first ``runs`` runs, by the
    paper's projected Euler."""
    rhs = paper_softmax_rhs if attention == "softmax" else paper_l2_rhs
    n = inputs.Q.shape[0] if runs is None else runs
    results = [
        projected_euler(
            lambda S, r=r: rhs(S, inputs.Q[r], inputs.K[r], inputs.V[r]),
            inputs.Sigma0[r],
            dt=dt,
            tol_low=tol_low,
            tol_high=tol_high,
            max_iter=max_iter,
        )
        for r in range(n)
    ]
    ranks = np.array([int(np.sum(np.linalg.eigvalsh(res.Sigma) > threshold)) for res in results])
    return ranks, results
