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


def l2_growth_rate(A: np.ndarray, K: np.ndarray, V: np.ndarray) -> float:
    """``r = 2 |V|_2 |A|_2 / lambda_min(K^T K)``: L2 Gaussians obey
    ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{r t}`` (module docstring). ``inf`` if ``K^T K`` is
    singular (the bound says nothing then)."""
    smallest = float(np.linalg.eigvalsh(K.T @ K)[0])
    if smallest <= 0:
        return float("inf")
    return 2.0 * float(np.linalg.norm(V, 2)) * float(np.linalg.norm(A, 2)) / smallest
