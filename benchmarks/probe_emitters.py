"""Probe: what XLA's elemental emitters cost at run time (``xla_cpu_setup``'s option).

XLA:CPU's elemental emitters (``--xla_cpu_use_fusion_emitters=false``) compile faster than its
default MLIR fusion emitters (docs/benchmarks.md, the main job). This measures the compiled
programs' speed with each, in separate processes (XLA reads its flags once), alternating, one
core, warm (compiled beforehand), median of repetitions:

- ``particle_step_n256`` / ``particle_step_n2048``: one RK4 step of softmax attention on n
  tokens in d = 64 (``fixed_step_particles``, float32; ``bench_pde_particles.particle_steps``);
- ``particle_sweep``: ``run_sweep`` of 16 betas x 64 systems of 64 tokens on the sphere in d = 8,
  100 RK4 steps (``bench_pde_particles``' beta sweep, jaxdyn's part);
- ``gaussian_sweep``: ``run_sweep`` of 256 ``simulate_gaussian`` solves of softmax attention at
  d = 5 (float64, Tsit5 with unrolled stages, a small-state solve like the rank figure's).

Prints one JSON object per process and the ratios (elemental / fusion) of the medians.

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


def measure() -> dict:
    """The timings in this process (its XLA_FLAGS already set)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_pde_particles as particles
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.meanfield import (
        Softmax,
        detect_clusters,
        fixed_step_particles,
        simulate_gaussian,
        sphere_softmax,
        uniform_on_sphere,
    )
    from jaxdyn.sweep import Grid, SweepOptions, run_sweep

    out = {"xla_flags": os.environ.get("XLA_FLAGS", "")}
    for n in (256, 2048):
        out[f"particle_step_n{n}"] = particles.particle_steps(n, 64, 1, 7)[0]

    betas = np.geomspace(0.5, 8.0, 16).astype(np.float32)

    def particle_member(params, key):
        x0 = uniform_on_sphere(key, 64, 8, dtype=jnp.float32)
        sol = fixed_step_particles(sphere_softmax(params["beta"], 8, bounded=True), x0, 10.0, 100)
        return {"clusters": detect_clusters(sol.final_x, 0.05)[1], "status": sol.status}

    grid = Grid.product({"beta": betas}, seeds=64)
    options = SweepOptions(progress=False, vmap_width=8)
    out["particle_sweep"] = particles._median_time(
        lambda: run_sweep(particle_member, grid, options=options).outputs["clusters"], 5
    )

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
    out["gaussian_sweep"] = particles._median_time(
        lambda: run_sweep(
            gaussian_member, gaussian_grid, options=SweepOptions(progress=False)
        ).outputs["trace"],
        5,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.pairs):
        for elemental in (False, True):
            env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
            env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false" + (
                " --xla_cpu_use_fusion_emitters=false" if elemental else ""
            )
            core = sorted(os.sched_getaffinity(0))[0]
            proc = subprocess.run(
                ["taskset", "-c", str(core), sys.executable, __file__, "--child"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[elemental].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(proc.stdout.strip().splitlines()[-1], flush=True)
    ratios = {
        case: statistics.median(r[case] for r in runs[True])
        / statistics.median(r[case] for r in runs[False])
        for case in _CASES
    }
    print(json.dumps({"elemental_over_fusion": {k: round(v, 2) for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
