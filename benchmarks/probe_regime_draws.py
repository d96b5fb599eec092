"""``gaussian_regime`` on random softmax Gaussians against the solver (docs/transformer_pde.md,
findings): d = 2..6, eight families of ``(V, A)``, 30% of the starts rank-deficient.

Families: ``V = c I`` with a random ``A`` (``scalar_random``) or a dissipative ``c S <= 0``
(``scalar_dissipative``); ``V`` SPD with ``S <= 0`` (``spd_dissipative``, a kernel of random
dimension) or ``S > 0`` (``spd_expansive``); ``V = M D M^{-1}`` non-symmetric with ``D > 0``
and ``S <= 0`` or ``S > 0`` (``similar_*``); ``V`` negative definite with ``S >= 0``
(``negative_dissipative``); ``V`` SPD with ``A`` skew (``skew``, ``S = 0``).

Every decided draw is solved (``simulate_gaussian``, rtol 1e-9, atol 1e-12, blow-up at
``tr Sigma = 1e8``) to ``1.05 x`` its blow-up bound, or for a bounded regime to
``400 / (|S| |V| tr Sigma_0)`` (``|S|`` at least ``|A| / 2``), and ``observed_regime`` reads
the outcome (floor 1e-7). A draw disagrees when the solve blows up and the criterion says
bounded (or the reverse), when the observed regime is decided and differs, or when the trace
leaves ``trace_bound``. Starts of rank ``r < d`` whose solve shows more than ``r`` eigenvalues
above ``1e-6`` of the largest are listed apart (round-off growing: the rank-deficient set
repels, see the findings). ``observed_regime`` is a finite-horizon reading: a bounded draw
that disagrees is solved again 100 times longer and read again (shown as ``x100``), and is a
disagreement only if it still differs.

    python benchmarks/probe_regime_draws.py [--seed 0] [--draws 100]

About 7 minutes per 100 draws on one core of a 2-core AMD EPYC VM.
"""

from __future__ import annotations

import argparse
import collections

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn import Status  # noqa: E402
from jaxdyn.meanfield import (  # noqa: E402
    Regime,
    Softmax,
    gaussian_regime,
    observed_regime,
    simulate_gaussian,
)

FAMILIES = (
    "scalar_random",
    "scalar_dissipative",
    "spd_dissipative",
    "spd_expansive",
    "similar_dissipative",
    "similar_expansive",
    "negative_dissipative",
    "skew",
)


def _name(regime) -> str:
    return next(
        r
        for r in ("blowup", "low_rank", "full_rank", "inconclusive")
        if regime == getattr(Regime, r)
    )


def draw(rng: np.random.Generator):
    """``(family, d, start rank, field, Sigma_0, A, V)`` of one random problem."""
    d = int(rng.integers(2, 7))
    family = str(rng.choice(FAMILIES))

    def spd():
        B = rng.standard_normal((d, d))
        return B @ B.T / d + 0.3 * np.eye(d)

    def skew():
        B = rng.standard_normal((d, d))
        return B - B.T

    def nonpositive():  # -B B^T with a kernel of random dimension
        kernel = int(rng.integers(0, d))
        B = rng.standard_normal((d, d - kernel))
        return -(B @ B.T)

    if family.startswith("scalar"):
        c = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 2.0))
        V = c * np.eye(d)
        if family == "scalar_random":
            A = rng.standard_normal((d, d))
        else:
            A = np.sign(c) * nonpositive() / 2 + skew() / 2
    elif family.startswith("spd"):
        V = spd()
        A = (nonpositive() if family == "spd_dissipative" else spd()) / 2 + skew() / 2
    elif family.startswith("similar"):
        M = rng.standard_normal((d, d)) + 2.0 * np.eye(d)
        V = M @ np.diag(rng.uniform(0.3, 2.0, d)) @ np.linalg.inv(M)
        A = (nonpositive() if family == "similar_dissipative" else spd()) / 2 + skew() / 2
    elif family == "negative_dissipative":
        V = -spd()
        A = -nonpositive() / 2 + skew() / 2
    else:
        V = spd()
        A = skew() / 2
    rank = int(rng.integers(1, d + 1)) if rng.random() < 0.3 else d
    F = rng.standard_normal((d, rank))
    cov0 = F @ F.T / rank + (0.05 * np.eye(d) if rank == d else 0.0)
    field = Softmax(Q=np.sqrt(d) * np.eye(d), K=A.T, V=V)  # A = K^T Q / sqrt(d)
    return family, d, rank, field, cov0, A, V


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=100)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    counts: collections.Counter = collections.Counter()
    disagreements, rank_grew, unsolved = [], [], []
    for i in range(args.draws):
        family, d, rank, field, cov0, A, V = draw(rng)
        res = gaussian_regime(field, np.zeros(d), cov0)
        counts[(family, _name(res.regime))] += 1
        if res.regime == Regime.inconclusive:
            continue
        if res.regime == Regime.blowup:
            t1 = 1.05 * res.blowup_time_bound
        else:
            s = max(np.linalg.norm(A + A.T, 2), 0.5 * np.linalg.norm(A, 2))
            t1 = 400.0 / (s * np.linalg.norm(V, 2) * max(np.trace(cov0), 1e-3))
        sol = simulate_gaussian(
            field,
            np.zeros(d),
            cov0,
            t1,
            ts=t1 * jnp.arange(1, 17) / 16,
            rtol=1e-9,
            atol=1e-12,
            max_steps=200_000,
            blowup_trace=1e8,
        )
        blew = bool(sol.status == Status.blowup)
        if not blew and sol.status != Status.successful:  # max_steps: no reading
            unsolved.append((i, family, d, rank, _name(res.regime), str(sol.status)))
            continue
        observed = observed_regime(blew, cov0, sol.covs[7], sol.covs[15], floor=1e-7)
        agree = blew == (res.regime == Regime.blowup) and (
            observed == res.regime or observed == Regime.inconclusive
        )
        if np.isfinite(res.trace_bound) and not blew:
            top = float(jnp.max(jnp.trace(sol.covs, axis1=1, axis2=2)))
            agree &= top <= res.trace_bound * (1 + 1e-5)
        row = (i, family, d, rank, _name(res.regime), _name(observed), round(float(t1), 3))
        if not agree and not blew and res.regime != Regime.blowup:
            # A finite horizon decides nothing about t -> inf: read it again 100 times longer.
            long = simulate_gaussian(
                field,
                np.zeros(d),
                cov0,
                100 * t1,
                ts=100 * t1 * jnp.arange(1, 17) / 16,
                rtol=1e-9,
                atol=1e-12,
                max_steps=2_000_000,
                blowup_trace=1e8,
            )
            again = observed_regime(
                bool(long.status == Status.blowup), cov0, long.covs[7], long.covs[15], floor=1e-7
            )
            row = (*row, f"x100: {_name(again)}")
            agree = again == res.regime
        if not agree:
            disagreements.append(row)
        if rank < d and not blew:
            w = np.linalg.eigvalsh(np.asarray(sol.covs[15]))
            if np.sum(w > 1e-6 * max(w[-1], 1e-300)) > rank:
                rank_grew.append((*row, np.round(w, 6).tolist()))
    print("regimes by family:")
    for (family, regime), k in sorted(counts.items()):
        print(f"  {family:22s} {regime:14s} {k}")
    print(f"disagreements ({len(disagreements)}):")
    for row in disagreements:
        print("  ", row)
    print(f"solves that stopped early ({len(unsolved)}):")
    for row in unsolved:
        print("  ", row)
    print(f"rank-deficient starts whose solve gained rank ({len(rank_grew)}):")
    for row in rank_grew:
        print("  ", row)


if __name__ == "__main__":
    main()
