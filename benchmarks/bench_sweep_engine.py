"""Sweep engine: a seed x hyperparameter sweep of small diffrax solves.

jaxdyn (one compiled program, vmapped groups) vs the paper-script way (a Python loop calling a
jitted single-member function per grid point), measured in the same run. Prints one JSON object.

    python benchmarks/bench_sweep_engine.py [--quick]
"""

import argparse
import json
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.sweep import Grid, SweepOptions, run_sweep

REPS = 7


def member(params, key):
    """A damped, driven oscillator with a random start, solved adaptively to t = 10."""
    y0 = jax.random.normal(key, (2,))
    omega, damping = params["omega"], params["damping"]

    def field(t, y, args):
        return jnp.stack([y[1], -(omega**2) * y[0] - damping * y[1] + jnp.sin(t)])

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        diffrax.Tsit5(),
        0.0,
        10.0,
        0.01,
        y0,
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-6, atol=1e-8),
        max_steps=4096,
        throw=False,
    )
    return {"y1": sol.ys[-1]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    n_omega, seeds = (8, 8) if args.quick else (16, 16)
    grid = Grid.product(
        {"omega": np.linspace(0.5, 3.0, n_omega), "damping": [0.1, 0.5]}, seeds=seeds
    )

    run_sweep(member, grid, options=SweepOptions(progress=False))  # compile
    sweep_times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        result = run_sweep(member, grid, options=SweepOptions(progress=False))
        sweep_times.append(time.perf_counter() - t0)
    t_sweep_total = float(np.median(sweep_times))

    single = jax.jit(member)
    single({k: v[0] for k, v in grid.params.items()}, jax.random.key(0))["y1"].block_until_ready()
    loop_times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        loop = []
        for i in range(len(grid)):
            key = jax.random.key(int(grid.seeds[i]))
            out = single({k: v[i] for k, v in grid.params.items()}, key)
            loop.append(np.asarray(out["y1"]))
        loop_times.append(time.perf_counter() - t0)
    t_loop = float(np.median(loop_times))
    max_diff = float(np.max(np.abs(np.stack(loop) - result.outputs["y1"])))

    # A repeated sweep compiles again only through JAX's cache; count traces explicitly.
    traces = []

    def counted(params, key):
        traces.append(1)
        return member(params, key)

    run_sweep(counted, grid, options=SweepOptions(progress=False))
    ratio = t_loop / t_sweep_total
    print(
        json.dumps(
            {
                "benchmark": "sweep_engine",
                "members": len(grid),
                "timing": f"median of {REPS} runs each",
                "jaxdyn_sweep_s": round(t_sweep_total, 4),
                "baseline_python_loop_s": round(t_loop, 4),
                "speedup": round(ratio, 2),
                "target_speedup": 2.0,
                "max_abs_difference": max_diff,
                "traces_per_sweep": len(traces),
                "passed": bool(ratio >= 2.0 and len(traces) == 1 and max_diff < 1e-6),
            }
        )
    )


if __name__ == "__main__":
    main()
