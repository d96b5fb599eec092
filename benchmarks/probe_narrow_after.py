"""Probe: ``SweepOptions.narrow_after`` on the rank figure (docs/benchmarks.md).

Times, cold and warm on one core, the member a user writes (``bench_pde_ranks.natural_pass``,
one ``run_sweep`` per panel) or ``pde-ranks``' ``rank_member`` (one sweep) with
``SweepOptions(narrow_after=N)``. The published loop runs first to pair the draws (``--runs``
converged runs per panel; 100 is the paper's workload, 5-8 minutes on one core, logged per
panel); ``--panels FILE`` keeps its attempts (a pickle, written atomically) for further
settings. Importing ``bench_pde_ranks`` pins this process to one core with single-threaded
kernels and the persistent compilation cache off.

    python benchmarks/probe_narrow_after.py --member natural --narrow-after 0 --panels /tmp/p.pkl
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_pde_ranks  # noqa: E402, F401  (one core, single-threaded kernels, no cache)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--member", choices=("natural", "rank"), default="natural")
    parser.add_argument("--narrow-after", type=int, required=True)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--panels", type=Path, help="pickle of the published attempts (cache)")
    args = parser.parse_args()

    import jax
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    from jaxdyn._atomic import atomic_write_bytes
    from jaxdyn.experiments.pde_gaussian.ranks import RanksConfig
    from jaxdyn.meanfield._rank_runs import published_attempts, rank_members
    from jaxdyn.meanfield._ranks import rank_member
    from jaxdyn.sweep import Grid, SweepCache, SweepOptions, run_sweep

    config = RanksConfig(runs=args.runs)
    if args.panels is not None and args.panels.exists():
        panels = pickle.loads(args.panels.read_bytes())
    else:
        panels = published_attempts(
            config.dims, config.runs, log=lambda msg: print(msg, file=sys.stderr)
        )
        if args.panels is not None:
            atomic_write_bytes(args.panels, pickle.dumps(panels))
    options = SweepOptions(narrow_after=args.narrow_after)
    if args.member == "natural":
        members = bench_pde_ranks.natural_members(config)
        cold, ranks, programs = bench_pde_ranks.natural_pass(
            panels, config, members, cold=True, options=options
        )
        warm, _, _ = bench_pde_ranks.natural_pass(
            panels, config, members, cold=False, options=options
        )
        extra = {"compilations": len(programs)}
    else:
        converged = np.concatenate([att.converged for _, _, att in panels])
        runs = {k: v[converged] for k, v in rank_members(config.dims, panels).items()}
        member = rank_member(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)
        SweepCache.default.clear()
        t0 = time.perf_counter()
        run_sweep(member, Grid.zip(runs), name="ranks", options=options)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = run_sweep(member, Grid.zip(runs), name="ranks", options=options)
        warm = time.perf_counter() - t0
        ranks = result.outputs["rank"]
        extra = {"solver_steps": int(np.sum(result.outputs["num_steps"]))}
    out = {
        "member": args.member,
        "narrow_after": args.narrow_after,
        "cold_s": round(cold, 2),
        "warm_s": round(warm, 2),
        "rank_sum": int(np.sum(ranks)),
        "load_average_1min": round(os.getloadavg()[0], 1),
        **extra,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
