"""``gaussian_regime`` on random softmax Gaussians against the solver, beyond ``pde-blowup``
(docs/transformer_pde.md, findings): the draws of
``jaxdyn.meanfield._problems.random_regime_problems`` (its eight families of
``V`` and ``S = A + A^T``) at every d = 2..6, with other seeds than the experiment's and 30%
of the starts cut to a random lower rank (``Sigma_0``'s top eigenpairs; the experiment's are
full rank).

Every decided draw is solved (``simulate_gaussian``, rtol 1e-9, atol 1e-12, blow-up at
``tr Sigma = 1e8``) to ``1.05 x`` its blow-up bound, or for a bounded regime to
``400 / (|S| |V| tr Sigma_0)`` (``|S|`` at least ``|A| / 2``), and ``observed_regime`` reads
the outcome (floor 1e-7). A draw disagrees when the solve blows up and the criterion says
bounded (or the reverse), when the observed regime is decided and differs, or when the trace
leaves ``trace_bound``. ``observed_regime`` is a finite-horizon reading: a bounded draw that
disagrees is solved again 100 times longer and read again (shown as ``x100``), and is a
disagreement only if it still differs. Starts of rank ``r < d`` whose solve shows more than
``r`` eigenvalues above ``1e-6`` of the largest are listed apart (round-off growing: the
rank-deficient set repels, see the findings), as are solves that stopped on another event.

    python benchmarks/probe_regime_draws.py [--seed 0] [--draws-per-dim 20]

A line of progress per dimension on stderr; about 3 minutes per 100 draws on one core of a
2-core AMD EPYC VM.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn import Status  # noqa: E402
from jaxdyn.meanfield import Regime, gaussian_regime, simulate_gaussian  # noqa: E402
from jaxdyn.meanfield._problems import (  # noqa: E402
    REGIME_FAMILIES,
    random_regime_problems,
)
from jaxdyn.meanfield._regime import observed_regime  # noqa: E402
from jaxdyn.meanfield.fields import Softmax  # noqa: E402

SINGULAR_FRACTION = 0.3


def _name(regime) -> str:
    return next(
        r
        for r in ("blowup", "low_rank", "full_rank", "inconclusive")
        if regime == getattr(Regime, r)
    )


def draws(d: int, samples: int, seed: int):
    """``(family, start rank, field, Sigma_0, A, V)`` of ``random_regime_problems``' draws,
    a fraction of the starts cut to a random rank below ``d``."""
    # pde-blowup draws with seeds config.seed + d (small): these are other draws.
    problems = random_regime_problems(d, samples, 1000 + 10 * seed + d)
    rng = np.random.default_rng([seed, d])
    for i in range(samples):
        cov0 = problems["Sigma0"][i]
        rank = d
        if rng.random() < SINGULAR_FRACTION:
            rank = int(rng.integers(1, d))
            w, U = np.linalg.eigh(cov0)
            cov0 = (U[:, d - rank :] * w[d - rank :]) @ U[:, d - rank :].T
        field = Softmax(Q=problems["Q"][i], K=problems["K"][i], V=problems["V"][i])
        family = REGIME_FAMILIES[problems["family"][i]]
        yield family, rank, field, cov0, problems["A"][i], problems["V"][i]


def _solve(field, cov0, t1, max_steps):
    """``(blew up, covariances at t1 k / 16, k = 1..16, status)``."""
    d = cov0.shape[0]
    sol = simulate_gaussian(
        field,
        np.zeros(d),
        cov0,
        t1,
        ts=t1 * jnp.arange(1, 17) / 16,
        rtol=1e-9,
        atol=1e-12,
        max_steps=max_steps,
        blowup_trace=1e8,
    )
    return bool(sol.status == Status.blowup), np.asarray(sol.covs), sol.status


def _probe_one(family, rank, field, cov0, A, V, found) -> str:
    """Decide one draw, solve it, record in ``found`` where the two part; returns the regime."""
    d = cov0.shape[0]
    res = gaussian_regime(field, np.zeros(d), cov0)
    if res.regime == Regime.inconclusive:
        return "inconclusive"
    if res.regime == Regime.blowup:
        t1 = 1.05 * res.blowup_time_bound
    else:
        s = max(np.linalg.norm(A + A.T, 2), 0.5 * np.linalg.norm(A, 2))
        t1 = 400.0 / (s * np.linalg.norm(V, 2) * max(np.trace(cov0), 1e-3))
    blew, covs, status = _solve(field, cov0, t1, 200_000)
    row = (family, d, rank, _name(res.regime), round(float(t1), 3))
    if not blew and status != Status.successful:  # another event or max_steps: no reading
        found["unsolved"].append((*row, str(status)))
        return _name(res.regime)
    observed = observed_regime(blew, cov0, covs[7], covs[15], floor=1e-7)
    agree = blew == (res.regime == Regime.blowup) and observed in (res.regime, Regime.inconclusive)
    if np.isfinite(res.trace_bound) and not blew:
        agree &= np.max(np.trace(covs, axis1=1, axis2=2)) <= res.trace_bound * (1 + 1e-5)
    row = (*row, _name(observed))
    if not agree and not blew and res.regime != Regime.blowup:
        # A finite horizon decides nothing about t -> inf: read it again 100 times longer.
        long_blew, long_covs, _ = _solve(field, cov0, 100 * t1, 2_000_000)
        again = observed_regime(long_blew, cov0, long_covs[7], long_covs[15], floor=1e-7)
        row, agree = (*row, f"x100: {_name(again)}"), again == res.regime
    if not agree:
        found["disagreements"].append(row)
    if rank < d and not blew:
        w = np.linalg.eigvalsh(covs[15])
        if np.sum(w > 1e-6 * max(w[-1], 1e-300)) > rank:
            found["rank-deficient starts whose solve gained rank"].append(
                (*row, np.round(w, 6).tolist())
            )
    return _name(res.regime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws-per-dim", type=int, default=20)
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    found: dict[str, list] = {
        "disagreements": [],
        "unsolved": [],
        "rank-deficient starts whose solve gained rank": [],
    }
    start = time.perf_counter()
    for d in range(2, 7):
        print(
            f"[{time.perf_counter() - start:5.0f} s] d = {d}: {args.draws_per_dim} draws "
            f"({len(found['disagreements'])} disagreements so far)",
            file=sys.stderr,
            flush=True,
        )
        for family, rank, field, cov0, A, V in draws(d, args.draws_per_dim, args.seed):
            regime = _probe_one(family, rank, field, cov0, A, V, found)
            counts[(family, "singular" if rank < d else "full", regime)] += 1
    print("regimes by family and start:")
    for (family, start_kind, regime), k in sorted(counts.items()):
        print(f"  {family:22s} {start_kind:8s} {regime:14s} {k}")
    for title, rows in found.items():
        print(f"{title} ({len(rows)}):")
        for row in rows:
            print("  ", row)


if __name__ == "__main__":
    main()
