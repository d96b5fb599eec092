"""Finite-time blow-up of softmax Gaussians and the bounded growth of L2 (transformer_pde.md,
"Closed forms to test against").

Softmax with ``V = I`` blows up at ``t* = 1 / lambda_max(Sigma_0^{1/2} (A + A^T) Sigma_0^{1/2})``
iff ``A + A^T`` has a positive eigenvalue on the range of ``Sigma_0``
(:func:`jaxdyn.meanfield.blowup_time`). L2 never blows up: [derived]
``dSigma/dt = 2 V (Sigma^{-1} + 2 K^T K)^{-1} A Sigma + transpose`` and
``(Sigma^{-1} + 2 K^T K)^{-1} <= (2 K^T K)^{-1}`` give ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}`` with
``r = 2 |V|_2 |A|_2 / lambda_min(K^T K)`` (:func:`l2_growth_rate`).
"""

from __future__ import annotations

import numpy as np


def random_blowup_problems(d: int, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Random interaction matrices ``A`` and covariances for blow-up tests.

    Even samples have ``A + A^T > 0`` (``A = P P^T / (2d) + I/10 + (M - M^T)/2``), odd samples an
    indefinite ``A + A^T`` (``A = M / sqrt(d)``, redrawn until both signs occur);
    ``Sigma_0 = G G^T / d + I/10``. ``Q = sqrt(d) I`` and ``K = A^T`` realise
    ``A = K^T Q / sqrt(d)`` exactly.

    Returns:
        ``{"Q", "K", "Sigma0", "A"}`` stacked over samples and ``"family"`` (0 positive,
        1 indefinite).
    """
    if d < 2 or samples < 1:
        raise ValueError(f"need d >= 2 and samples >= 1, got d={d}, samples={samples}")
    rng = np.random.default_rng(seed)
    As, covs, family = [], [], []
    for s in range(samples):
        positive = s % 2 == 0
        while True:
            M = rng.standard_normal((d, d))
            if positive:
                P = rng.standard_normal((d, d))
                A = 0.5 * (P @ P.T) / d + 0.1 * np.eye(d) + 0.5 * (M - M.T)
            else:
                A = M / np.sqrt(d)
            lam = np.linalg.eigvalsh(A + A.T)
            if (positive and lam[0] > 0) or (not positive and lam[0] < 0 < lam[-1]):
                break
        G = rng.standard_normal((d, d))
        As.append(A)
        covs.append(G @ G.T / d + 0.1 * np.eye(d))
        family.append(0 if positive else 1)
    A = np.stack(As)
    return {
        "Q": np.broadcast_to(np.sqrt(d) * np.eye(d), A.shape).copy(),
        "K": np.transpose(A, (0, 2, 1)).copy(),
        "Sigma0": np.stack(covs),
        "family": np.array(family),
        "A": A,
    }


def l2_growth_rate(A: np.ndarray, K: np.ndarray, V: np.ndarray) -> float:
    """``r = 2 |V|_2 |A|_2 / lambda_min(K^T K)``: L2 Gaussians obey
    ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}`` (module docstring). ``inf`` if ``K^T K`` is
    singular (the bound says nothing then)."""
    smallest = float(np.linalg.eigvalsh(K.T @ K)[0])
    if smallest <= 0:
        return float("inf")
    return 2.0 * float(np.linalg.norm(V, 2)) * float(np.linalg.norm(A, 2)) / smallest
