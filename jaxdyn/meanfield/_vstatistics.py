"""The second variation of the interaction energy as a V-statistic of particles, with the gap to
the mean-field value it is allowed: 4 standard errors (Hajek projection: ``SE = 2 sd_i(h_i) /
sqrt(n)``, ``h_i`` the mean over ``j`` of the symmetrised pairwise term) plus the diagonal
bias ``|mean_i k_ii - mean_ij k_ij| / n``."""

from __future__ import annotations

import numpy as np


def second_variation_and_allowed_gap(A, x0, x1, s):
    """``E''(s)`` along the straight-line interpolation ``x(s) = x0 + s (x1 - x0)`` as the mean of
    its pairwise terms ``k_ij (f_ij'^2 + f_ij'')`` (``k_ij = exp(f_ij) / 2``,
    ``f_ij = x_j(s)^T A x_i(s)``), and the gap to the mean-field value it is allowed: 4 standard
    errors of this V-statistic (Hajek projection) plus its diagonal bias."""
    x0, x1, A = np.asarray(x0), np.asarray(x1), np.asarray(A)
    v = x1 - x0
    x = x0 + s * v
    f = x @ A.T @ x.T
    df = v @ A.T @ x.T + x @ A.T @ v.T
    terms = 0.5 * np.exp(f) * (df**2 + 2 * (v @ A.T @ v.T))
    mean = terms.mean()
    h = 0.5 * (terms.mean(0) + terms.mean(1))
    n = x.shape[0]
    allowed = 4 * 2 * np.std(h, ddof=1) / np.sqrt(n) + abs(np.mean(np.diag(terms)) - mean) / n
    return mean, allowed
