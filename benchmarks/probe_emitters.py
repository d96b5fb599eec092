"""Probe: what XLA's elemental emitters cost at run time (``xla_cpu_setup``'s option).

XLA:CPU's elemental emitters (``--xla_cpu_use_fusion_emitters=false``) compile faster than its
default MLIR fusion emitters (docs/benchmarks.md, the main job). This measures the compiled
programs' speed with each, in separate processes (XLA reads its flags once), alternating, one
core, warm (compiled beforehand), median of repetitions:

- ``particle_step_n256`` / ``particle_step_n2048``: one RK4 step of softmax attention on n
  tokens in d = 64 (``simulate_particles`` at fixed RK4 steps, float32;
  ``bench_pde_particles.particle_steps``);
- ``particle_sweep``: ``run_sweep`` of 16 betas x 64 systems of 64 tokens on the sphere in d = 8,
  100 RK4 steps (``bench_pde_particles``' beta sweep, jaxdyn's part);
- ``gaussian_sweep``: ``run_sweep`` of 256 ``simulate_gaussian`` solves of softmax attention at
  d = 5 (float64, Tsit5 with unrolled stages, a small-state solve like the rank figure's).

Prints a line of progress per process on stderr, one JSON object per process and the ratios
(elemental / fusion) of the medians, with whether the two settings computed the same cluster
counts and how far apart their Gaussian solves' final traces are.

    python benchmarks/probe_emitters.py [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CASES = ("particle_step_n256", "particle_step_n2048", "particle_sweep", "gaussian_sweep")


def measure(elemental: bool, core: int) -> dict:
    """The timings in this process, pinned to ``core``, with jaxdyn's XLA:CPU options (and the
    elemental emitters if asked), and the results they computed (to compare across settings)."""
    os.sched_setaffinity(0, {core})
    from jaxdyn.distributed._devices import xla_cpu_setup

    xla_cpu_setup(elemental_emitters=elemental)  # before JAX starts
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_pde_particles as particles
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.meanfield import simulate_gaussian
    from jaxdyn.meanfield.fields import Softmax
    from jaxdyn.sweep import Grid, SweepOptions, run_sweep

    out = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
    for n in (256, 2048):
        out[f"particle_step_n{n}"] = particles.particle_steps(n, 64, 1, 7)[0]

    # the beta sweep of bench_pde_particles (float32), jaxdyn's part
    member = particles.sphere_member(64, 8, 10.0, 100, 0.05)
    grid = Grid.product({"beta": np.geomspace(0.5, 8.0, 16).astype(np.float32)}, seeds=64)
    options = SweepOptions(progress=False, vmap_width=8)
    out["particle_sweep"] = particles._median_time(
        lambda: run_sweep(member, grid, options=options).outputs["clusters"], 5
    )
    out["clusters"] = np.asarray(run_sweep(member, grid, options=options).outputs["clusters"])

    jax.config.update("jax_enable_x64", True)  # the Gaussian solve in float64, as jaxdyn's runs
    rng = np.random.default_rng(0)
    d, members = 5, 256
    weights = {k: rng.normal(size=(members, d, d)) / np.sqrt(d) for k in ("Q", "K", "V")}

    def gaussian_member(params, key):
        sol = simulate_gaussian(
            Softmax(params["Q"], params["K"], params["V"]), jnp.zeros(d), jnp.eye(d), 5.0
        )
        return {"trace": jnp.trace(sol.final_cov), "status": sol.status}

    gaussian_grid = Grid.zip(weights)
    options = SweepOptions(progress=False)
    out["gaussian_sweep"] = particles._median_time(
        lambda: run_sweep(gaussian_member, gaussian_grid, options=options).outputs["trace"], 5
    )
    out["traces"] = np.asarray(
        run_sweep(gaussian_member, gaussian_grid, options=options).outputs["trace"]
    )
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--child", choices=("fusion", "elemental"), help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child == "elemental", args.core)))
        return
    core = sorted(os.sched_getaffinity(0))[0]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the settings measured
    runs: dict[str, list[dict]] = {"fusion": [], "elemental": []}
    for pair in range(args.pairs):
        for mode in runs:
            print(
                f"[pair {pair + 1}/{args.pairs}] {mode} emitters ...", file=sys.stderr, flush=True
            )
            proc = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--core", str(core)],
                env=env,
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                sys.exit(f"probe_emitters: the {mode} process failed ({proc.returncode}): {last}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[mode].append(result)
            print(json.dumps({k: v for k, v in result.items() if k not in ("clusters", "traces")}))
    ratios = {
        case: statistics.median(r[case] for r in runs["elemental"])
        / statistics.median(r[case] for r in runs["fusion"])
        for case in _CASES
    }
    # the timings compare like with like only if both settings computed the same results
    fusion, elemental = runs["fusion"][0], runs["elemental"][0]
    trace_gap = max(
        abs(a - b) / max(abs(a), 1e-300)
        for a, b in zip(fusion["traces"], elemental["traces"], strict=True)
    )
    print(
        json.dumps(
            {
                "elemental_over_fusion": {k: round(v, 2) for k, v in ratios.items()},
                "same_cluster_counts": fusion["clusters"] == elemental["clusters"],
                "gaussian_final_trace_max_relative_difference": trace_gap,
            }
        )
    )


if __name__ == "__main__":
    main()
