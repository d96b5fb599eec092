"""Exact learning coefficients to calibrate the estimator against (docs/llc.md, "Calibration").

* :func:`quadratic_llc`: the exact expectation of the estimator on a quadratic loss (a regular
  model), with the localisation and BlackJAX's step size included: the sampler's bias in
  closed form.
* :func:`reduced_rank_rlct`: Aoyagi and Watanabe's learning coefficient of reduced-rank
  regression (a two-layer linear network), with its multiplicity.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from jaxtyping import ArrayLike


def quadratic_llc(
    hessian: ArrayLike,
    *,
    n: float,
    beta: float,
    step_size: float = 0.0,
    localization: float = 0.0,
) -> float:
    """E[lambda_hat] for L_n(w) = L_n(w*) + (1/2) (w - w*)^T H (w - w*), full-batch SGLD.

    Per eigenvalue h_i of H, the localised tempered posterior has precision
    a_i = n beta h_i + gamma; BlackJAX's step w <- w - eps a w + sqrt(2 eps) xi has the
    stationary variance 1 / (a_i (1 - eps a_i / 2)) (exact for the discrete chain, eps a_i < 2).
    So

        E[lambda_hat] = (1/2) sum_i n beta h_i / (a_i (1 - eps a_i / 2)),

    which is d / 2 at gamma = eps = 0 when H is positive definite, and counts a flat direction
    (h_i = 0) as 0: a symmetry of the loss removes one half from the count.
    """
    H = np.asarray(hessian, dtype=float)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"hessian must be a square matrix, got shape {H.shape}")
    h = np.linalg.eigvalsh((H + H.T) / 2)
    if np.any(h < -1e-12 * max(1.0, float(np.max(np.abs(h))))):
        raise ValueError("hessian must be positive semi-definite (w* a local minimum)")
    h = np.clip(h, 0.0, None)
    a = n * beta * h + localization
    if np.any(a == 0):
        raise ValueError("a flat direction with localization = 0 has no stationary law")
    if np.any(step_size * a >= 2):
        raise ValueError(
            f"step_size {step_size} is unstable: step_size * (n beta h_max + gamma) must be < 2"
        )
    return float(0.5 * np.sum(n * beta * h / (a * (1 - step_size * a / 2))))


def reduced_rank_rlct(M: int, N: int, H: int, r: int) -> tuple[Fraction, int]:
    """Learning coefficient lambda and multiplicity m of reduced-rank regression.

    The model y = B A x + noise with A: H x M, B: N x H (M inputs, N outputs, H hidden units)
    and a true map B0 A0 of rank r <= H (Aoyagi and Watanabe 2005, "Stochastic complexities of
    reduced rank regression in Bayesian estimation", Neural Networks 18, Main Theorem):

    1. N + r <= M + H, M + r <= N + H and H + r <= M + N:
       M + H + N + r even: lambda = [2(H + r)(M + N) - (M - N)^2 - (H + r)^2] / 8, m = 1;
       odd: lambda = [2(H + r)(M + N) - (M - N)^2 - (H + r)^2 + 1] / 8, m = 2.
    2. M + H < N + r: lambda = (H M - H r + N r) / 2, m = 1.
    3. N + H < M + r: lambda = (H N - H r + M r) / 2, m = 1.
    4. M + N < H + r: lambda = M N / 2, m = 1.

    At H = r (no redundant hidden unit) this is the regular count of the rank-r matrices,
    (M + N) r / 2 - r^2 / 2.
    """
    for name, v in (("M", M), ("N", N), ("H", H), ("r", r)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise TypeError(f"{name} must be an integer, got {v!r}")
    if min(M, N, H) < 1:
        raise ValueError(f"M, N, H must be >= 1, got {(M, N, H)}")
    if not 0 <= r <= min(M, N, H):
        raise ValueError(f"the true rank r must be in [0, min(M, N, H)], got r = {r}")
    if M + H < N + r:
        return Fraction(H * M - H * r + N * r, 2), 1
    if N + H < M + r:
        return Fraction(H * N - H * r + M * r, 2), 1
    if M + N < H + r:
        return Fraction(M * N, 2), 1
    base = 2 * (H + r) * (M + N) - (M - N) ** 2 - (H + r) ** 2
    if (M + H + N + r) % 2 == 0:
        return Fraction(base, 8), 1
    return Fraction(base + 1, 8), 2
