"""Benchmark: the whole pde-ranks figure (3 dims x 100 runs x 2 V x softmax and L2) as ONE
jaxdyn sweep of adaptive diffrax solves, vs the paper's method (projected explicit Euler in a
NumPy loop, one run at a time) on the same seeded inputs, in the same process.

Without ``--warm`` (full size) the sweep is called once and its time includes compilation
(the conservative ratio); ``--quick`` and ``--warm`` also time a second, compiled call.
The NumPy baseline is far too slow to run on all 1200 members (seconds per run), so it is
timed on ``--baseline-runs`` runs per histogram and extrapolated per run to the full figure
(said in the JSON). Prints one JSON object. Target: >= 100x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_ENABLE_X64", "1")

import numpy as np  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--quick", action="store_true", help="20 runs per histogram, 1 baseline run each"
    )
    parser.add_argument("--baseline-runs", type=int, default=None)
    parser.add_argument("--warm", action="store_true", help="also time a second (compiled) call")
    args = parser.parse_args()

    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxdyn import Status
    from jaxdyn.experiments.pde_gaussian import (
        RANK_VALUES,
        RANK_VARIANTS,
        RanksConfig,
        _rank_member,
        ranks_members,
    )
    from jaxdyn.meanfield import paper_limiting_ranks, paper_rank_inputs
    from jaxdyn.sweep import Grid, run_sweep

    config = RanksConfig(runs=20 if args.quick else 100)
    baseline_runs = args.baseline_runs or 1
    params, _ = ranks_members(config)
    D = max(config.dims)
    grid = Grid.zip(params)
    member = _rank_member(config, D)

    t0 = time.perf_counter()
    first = run_sweep(member, grid, name="ranks")
    t_first = time.perf_counter() - t0
    if args.quick or args.warm:
        # A second call reuses the compiled program: the warm time of the sweep alone.
        t0 = time.perf_counter()
        second = run_sweep(member, grid, name="ranks")
        t_warm = time.perf_counter() - t0
        assert np.array_equal(first.outputs["rank"], second.outputs["rank"])
    else:
        second, t_warm = first, t_first
    jax_ranks = second.outputs["rank"].reshape(len(config.dims), 2, 2, config.runs)

    # The paper's projected Euler on the first `baseline_runs` runs of every histogram.
    t_base, n_base, mismatches = 0.0, 0, 0
    for i, d in enumerate(config.dims):
        for j, variant in enumerate(RANK_VARIANTS):
            for k, value in enumerate(RANK_VALUES):
                inp = paper_rank_inputs(d, config.runs, attention=variant, value=value)
                t0 = time.perf_counter()
                ranks, _ = paper_limiting_ranks(
                    inp,
                    attention=variant,
                    dt=config.euler_dt,
                    tol_low=config.tol_low,
                    max_iter=config.euler_max_iter,
                    threshold=config.threshold,
                    runs=baseline_runs,
                )
                t_base += time.perf_counter() - t0
                n_base += baseline_runs
                mismatches += int(np.sum(ranks != jax_ranks[i, j, k, :baseline_runs]))
    per_run = t_base / n_base
    members = len(grid)
    baseline_full = per_run * members
    ratio = baseline_full / t_warm
    out = {
        "benchmark": "pde_ranks_figure",
        "members": members,
        "jax_sweep_first_call_s": round(t_first, 3),
        "jax_sweep_warm_s": round(t_warm, 3),
        "jax_failed_members": int(second.n_failed(accept=[Status.steady_state])),
        "baseline": f"paper projected Euler, NumPy loop, dt={config.euler_dt:g}, "
        f"tol_low={config.tol_low:g}",
        "baseline_runs_timed": n_base,
        "baseline_s_per_run": round(per_run, 4),
        "baseline_extrapolated_full_s": round(baseline_full, 1),
        "baseline_extrapolated": True,
        "rank_mismatches_on_timed_runs": mismatches,
        "ratio_warm": round(ratio, 1),
        "warm_timed_separately": bool(args.quick or args.warm),
        "ratio_including_compile": round(baseline_full / t_first, 1),
        "target": 100.0,
        "passed": bool(ratio >= 100.0),
        "quick": bool(args.quick),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
