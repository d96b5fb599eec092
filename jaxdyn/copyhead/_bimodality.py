"""Two modes in a sample: the signature of coexisting states near a first-order transition.

copy_head.md, "What the theory predicts". :func:`bimodality` fits a two-component Gaussian
mixture to samples (SGLD / MALA / trained networks) and computes Ashman's
D = sqrt(2) |mu_1 - mu_2| / sqrt(s_1^2 + s_2^2); a mixture of two Gaussians is bimodal when
D > 2.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from jaxtyping import ArrayLike, Float


@dataclasses.dataclass(frozen=True)
class Bimodality:
    """Two-component Gaussian mixture of a sample.

    Attributes:
        means, stds, weights: the two components (lower mean first).
        ashman_d: sqrt(2) |mu_1 - mu_2| / sqrt(s_1^2 + s_2^2).
        bimodal: ``ashman_d > 2``, the lighter component holds at least ``min_weight`` and
            the means are more than ``min_separation`` apart.
    """

    means: tuple[float, float]
    stds: tuple[float, float]
    weights: tuple[float, float]
    ashman_d: float
    bimodal: bool


def bimodality(
    samples: Float[ArrayLike, "..."],
    *,
    min_separation: float = 0.0,
    min_weight: float = 0.1,
    iterations: int = 200,
) -> Bimodality:
    """Fit two Gaussians to ``samples`` by EM (started from the best two-group split of the
    sorted sample) and test for two modes: Ashman's D > 2, both weights >= ``min_weight`` and
    means more than ``min_separation`` apart (e.g. half the distance between two theory
    states: correlated samples of one chain can form tight clusters that are not modes).
    Component variances are floored at 1e-6 of the sample variance (a tight cluster)."""
    x = np.sort(np.asarray(samples, float).ravel())
    x = x[np.isfinite(x)]
    n = x.size
    if n < 4 or np.ptp(x) == 0:
        m = float(x.mean()) if n else float("nan")
        return Bimodality((m, m), (0.0, 0.0), (1.0, 0.0), 0.0, False)
    csum, csq = np.cumsum(x), np.cumsum(x**2)
    k = np.arange(1, n)
    within = (csq[:-1] - csum[:-1] ** 2 / k) + (
        (csq[-1] - csq[:-1]) - (csum[-1] - csum[:-1]) ** 2 / (n - k)
    )
    split = int(np.argmin(within)) + 1
    floor = 1e-6 * x.var()
    mu = np.array([x[:split].mean(), x[split:].mean()])
    var = np.maximum(np.array([x[:split].var(), x[split:].var()]), floor)
    w = np.array([split, n - split]) / n
    for _ in range(iterations):
        logp = -0.5 * (x[:, None] - mu) ** 2 / var - 0.5 * np.log(2 * np.pi * var) + np.log(w)
        r = np.exp(logp - logp.max(axis=1, keepdims=True))
        r /= r.sum(axis=1, keepdims=True)
        w = np.maximum(r.mean(axis=0), 1e-12)
        mu = (r * x[:, None]).sum(axis=0) / (w * n)
        var = np.maximum((r * (x[:, None] - mu) ** 2).sum(axis=0) / (w * n), floor)
    order = np.argsort(mu)
    mu, var, w = mu[order], var[order], w[order]
    d = float(np.sqrt(2.0) * abs(mu[1] - mu[0]) / np.sqrt(var.sum()))
    return Bimodality(
        (float(mu[0]), float(mu[1])),
        (float(np.sqrt(var[0])), float(np.sqrt(var[1]))),
        (float(w[0]), float(w[1])),
        d,
        bool(d > 2.0 and w.min() >= min_weight and mu[1] - mu[0] > min_separation),
    )


def bimodal_fraction(P, seeds, samples, Ps, min_separation: float) -> np.ndarray:
    """Per P of ``Ps``: the fraction of datasets whose pooled samples (every chain of that
    P and dataset) are bimodal with components more than ``min_separation`` apart."""
    return np.array(
        [
            np.mean(
                [
                    bimodality(
                        samples[(P == p) & (seeds == s)], min_separation=min_separation
                    ).bimodal
                    for s in np.unique(seeds)
                ]
            )
            for p in Ps
        ]
    )
