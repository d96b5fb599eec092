"""Random Gaussian problems of the blow-up and regime experiments (``pde-blowup``): softmax
``A`` with a chosen symmetric part, general ``V`` by family, random ``Sigma_0``."""

from __future__ import annotations

import numpy as np

from jaxdyn._status import status_code

from ._regime import Regime, gaussian_regime, seed_criterion
from .fields._heads import Softmax


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


# Families of random_regime_problems: how V and A + A^T are drawn.
REGIME_FAMILIES = (
    "scalar_value",  # V = c I, c of either sign, S = A + A^T of any inertia
    "spd_dissipative",  # V SPD, S <= 0 with a kernel
    "spd_expansive",  # V SPD, S > 0
    "similar_dissipative",  # V = -P R (P, R SPD: non-symmetric, negative spectrum), S >= 0
    "spd_seed_negative",  # V SPD, V A + A^T V^T < 0 (the seed criterion says "no blow-up")
    "spd_indefinite",  # V SPD, S indefinite
    "nonsymmetric",  # V a random non-symmetric matrix
    "symmetric_indefinite",  # V symmetric with eigenvalues of both signs
)


def _spd(rng, d, low=0.5, high=2.0):
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (U * rng.uniform(low, high, d)) @ U.T


def _symmetric_with(rng, d, eigenvalues):
    U, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (U * np.asarray(eigenvalues)) @ U.T


def _antisymmetric(rng, d, size):
    M = rng.standard_normal((d, d))
    return size * (M - M.T) / 2


def random_regime_problems(d: int, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Random softmax Gaussian problems over general ``V`` (the families of
    ``REGIME_FAMILIES``, cycled): ``A`` from its symmetric part ``S`` (eigenvalues of size
    0.5..1.5 or exactly 0) plus an antisymmetric part, ``Q = sqrt(d) I``, ``K = A^T``,
    ``Sigma_0 = G G^T / d + I / 10``.

    Returns:
        ``{"Q", "K", "V", "Sigma0", "A"}`` stacked over samples and ``"family"`` (index into
        ``REGIME_FAMILIES``).
    """
    if d < 2 or samples < 1:
        raise ValueError(f"need d >= 2 and samples >= 1, got d={d}, samples={samples}")
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("A", "V", "Sigma0", "family")}

    def sizes(n):
        return rng.uniform(0.5, 1.5, n)

    for s in range(samples):
        family = s % len(REGIME_FAMILIES)
        name = REGIME_FAMILIES[family]
        W = _antisymmetric(rng, d, rng.uniform(0.0, 2.0))
        kernel = int(rng.integers(0, d))
        if name == "scalar_value":
            V = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0) * np.eye(d)
            S = _symmetric_with(rng, d, rng.choice([-1.0, 0.0, 1.0], d) * sizes(d))
        elif name == "spd_dissipative":
            V = _spd(rng, d)
            S = _symmetric_with(rng, d, -np.r_[sizes(d - kernel), np.zeros(kernel)])
        elif name == "spd_expansive":
            V = _spd(rng, d)
            S = _symmetric_with(rng, d, sizes(d))
        elif name == "similar_dissipative":
            V = -_spd(rng, d) @ _spd(rng, d)
            S = _symmetric_with(rng, d, np.r_[sizes(d - kernel), np.zeros(kernel)])
        elif name == "spd_seed_negative":
            V = _spd(rng, d)
            N = _symmetric_with(rng, d, sizes(d))
            # V A + A^T V^T = -N: A = V^-1 (-N / 2 + W).
            A = np.linalg.solve(V, -N / 2 + 2 * W)
            S = None
        elif name == "spd_indefinite":
            V = _spd(rng, d)
            S = _symmetric_with(rng, d, np.r_[1.0, -1.0, rng.choice([-1.0, 1.0], d - 2)] * sizes(d))
        elif name == "nonsymmetric":
            V = rng.standard_normal((d, d))
            S = _symmetric_with(rng, d, rng.choice([-1.0, 1.0], d) * sizes(d))
        else:
            V = _symmetric_with(rng, d, np.r_[1.0, -1.0, rng.choice([-1.0, 1.0], d - 2)] * sizes(d))
            S = _symmetric_with(rng, d, rng.choice([-1.0, 1.0], d) * sizes(d))
        if S is not None:
            A = S / 2 + W
        G = rng.standard_normal((d, d))
        out["A"].append(A)
        out["V"].append(V)
        out["Sigma0"].append(G @ G.T / d + 0.1 * np.eye(d))
        out["family"].append(family)
    A = np.stack(out["A"])
    return {
        "Q": np.broadcast_to(np.sqrt(d) * np.eye(d), A.shape).copy(),
        "K": np.transpose(A, (0, 2, 1)).copy(),
        "V": np.stack(out["V"]),
        "Sigma0": np.stack(out["Sigma0"]),
        "A": A,
        "family": np.array(out["family"]),
    }


def _pad(M: np.ndarray, size: int, fill: float) -> np.ndarray:
    out = fill * np.eye(size)
    out[: M.shape[-1], : M.shape[-1]] = M
    return out


def padded_regime_problems(
    dims, samples: int, seed: int, horizon: float
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`random_regime_problems` for every ``d`` in ``dims`` (seed ``seed + d``), each
    classified by :func:`~jaxdyn.meanfield.gaussian_regime` and the seed criterion, embedded in
    one size ``max(dims)`` so that one compiled solve runs them all: ``Q, K, V`` padded with
    zeros (``Q`` scaled by ``sqrt(max / d)`` keeps ``A = K^T Q / sqrt(dim)``), ``Sigma_0``
    with an identity block (a decoupled block that adds ``max - d`` to the trace), horizon
    ``min(1.05 * blow-up time bound, horizon)``.

    Returns ``(params, meta)``: the padded inputs (``Q, K, V, Sigma0, t1``) and per draw its
    ``d``, ``family``, the criterion's ``regime`` and ``condition`` (codes), ``seed`` (the seed
    criterion says blow-up) and ``trace_bound``."""
    pad = max(dims)
    rows = {k: [] for k in ("Q", "K", "V", "Sigma0", "t1")}
    meta = {k: [] for k in ("d", "family", "regime", "seed", "trace_bound", "condition")}
    for d in dims:
        draws = random_regime_problems(d, samples, seed + d)
        for i in range(samples):
            field = Softmax(Q=draws["Q"][i], K=draws["K"][i], V=draws["V"][i])
            verdict = gaussian_regime(field, np.zeros(d), draws["Sigma0"][i])
            rows["Q"].append(_pad(draws["Q"][i] * np.sqrt(pad / d), pad, 0.0))
            rows["K"].append(_pad(draws["K"][i], pad, 0.0))
            rows["V"].append(_pad(draws["V"][i], pad, 0.0))
            rows["Sigma0"].append(_pad(draws["Sigma0"][i], pad, 1.0))
            rows["t1"].append(min(1.05 * verdict.blowup_time_bound, horizon))
            meta["d"].append(d)
            meta["family"].append(int(draws["family"][i]))
            meta["regime"].append(status_code(verdict.regime))
            meta["seed"].append(status_code(seed_criterion(field)) == status_code(Regime.blowup))
            meta["trace_bound"].append(verdict.trace_bound)
            meta["condition"].append(status_code(verdict.condition))
    params = {k: np.stack(v) if k != "t1" else np.array(v) for k, v in rows.items()}
    return params, {k: np.array(v) for k, v in meta.items()}
