"""Particle throughput of the mean-field Transformer PDE (issue 5).

1. A beta (temperature) sweep of tokens on the sphere (16 betas x 64 systems x 64 tokens,
   d = 8, 100 RK4 steps; ``jaxdyn.meanfield.sphere_softmax``), three ways, in the same run:
   - jaxdyn: ``run_sweep`` over a ``Grid`` of betas x seeds (``vmap_width=8``), sharded over
     every CPU core (``--cpu-devices auto``: one XLA device per core,
     ``jaxdyn.sweep.use_cpu_devices``; results are identical for any device count), each
     member ``fixed_step_particles`` (diffrax, the RK4 of jaxdyn.meanfield) of
     ``sphere_softmax(beta, d, bounded=True)`` (scores shifted by their bound ``beta`` on the
     unit sphere instead of a row max, normalisation after the products) and a cluster count;
   - PyTorch-style: a Python loop over betas and RK4 steps, each step one jitted batched
     velocity call over the 64 systems (what a hand-written training-loop script does);
   - plain jit + vmap: a hand-written RK4 in ``lax.fori_loop``, ``jit(vmap(vmap(...)))`` over
     betas and systems, all members at once.
   Targets: jaxdyn >= 3x the PyTorch-style loop and >= 1.5x plain jit + vmap.
2. Particle steps at n = 8192, d = 64 (float32): RK4 steps of (general) softmax attention
   through ``fixed_step_particles``, their matmul FLOP rate (4 n^2 d per velocity) against the
   machine's float32 matmul rate measured in the same run. Target: >= 40%.

All timings warm (compiled beforehand), median of repetitions, ``block_until_ready``.

    python benchmarks/bench_pde_particles.py [--quick] [--cpu-devices N|auto]
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.attention import softmax_weights
from jaxdyn.meanfield import (
    Softmax,
    detect_clusters,
    fixed_step_particles,
    sphere_softmax,
    uniform_on_sphere,
)
from jaxdyn.sweep import Grid, SweepOptions, run_sweep, use_cpu_devices


def _median_time(fn, reps):
    jax.block_until_ready(fn())  # warm-up (compilation)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _sphere_velocity(x, beta):
    """Reference velocity for the baselines: projected softmax average, x (..., n, d)."""
    scores = beta * jnp.einsum("...id,...jd->...ij", x, x)
    avg = jnp.einsum("...ij,...jd->...id", softmax_weights(scores), x)
    radial = jnp.sum(avg * x, -1, keepdims=True) / jnp.sum(x * x, -1, keepdims=True)
    return avg - radial * x


def _rk4_step(x, beta, h):
    k1 = _sphere_velocity(x, beta)
    k2 = _sphere_velocity(x + 0.5 * h * k1, beta)
    k3 = _sphere_velocity(x + 0.5 * h * k2, beta)
    k4 = _sphere_velocity(x + h * k3, beta)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def beta_sweep(n_betas, systems, n, d, steps, t1, reps):
    betas = np.geomspace(0.5, 8.0, n_betas).astype(np.float32)
    h = t1 / steps

    def member(params, key):
        x0 = uniform_on_sphere(key, n, d)
        sol = fixed_step_particles(sphere_softmax(params["beta"], d, bounded=True), x0, t1, steps)
        return {"clusters": detect_clusters(sol.final_x, 0.05)[1], "status": sol.status}

    grid = Grid.product({"beta": betas}, seeds=systems)
    # vmap_width=8: groups of 8 members keep each group's score blocks in cache on CPUs
    t_jaxdyn = _median_time(
        lambda: run_sweep(member, grid, options=SweepOptions(progress=False, vmap_width=8)).outputs[
            "clusters"
        ],
        reps,
    )

    # the same initial conditions for the baselines
    keys = jax.vmap(jax.random.key)(jnp.arange(systems))
    x0 = jax.vmap(lambda k: uniform_on_sphere(k, n, d))(keys)  # (systems, n, d)

    step = jax.jit(_rk4_step)

    def pytorch_style():
        counts = []
        for beta in betas:
            x = x0
            for _ in range(steps):
                x = step(x, beta, h)
            counts.append(jax.vmap(lambda y: detect_clusters(y, 0.05)[1])(x))
        return jnp.stack(counts)

    t_loop = _median_time(pytorch_style, 1)

    def one(x, beta):
        x = jax.lax.fori_loop(0, steps, lambda _, y: _rk4_step(y, beta, h), x)
        return detect_clusters(x, 0.05)[1]

    plain = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))
    t_plain = _median_time(lambda: plain(x0, jnp.asarray(betas)), reps)
    return {
        "size": {"betas": n_betas, "systems": systems, "tokens": n, "d": d, "rk4_steps": steps},
        "jaxdyn_path": f"run_sweep(vmap_width=8) over {jax.device_count()} device(s) of "
        "fixed_step_particles (diffrax RK4) of sphere_softmax(beta, d, bounded=True)",
        "jaxdyn_s": t_jaxdyn,
        "pytorch_style_loop_s": t_loop,
        "plain_jit_vmap_s": t_plain,
        "speedup_vs_loop": t_loop / t_jaxdyn,
        "speedup_vs_plain": t_plain / t_jaxdyn,
        "target_vs_loop": 3.0,
        "target_vs_plain": 1.5,
    }


def matmul_rate(size, reps):
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    f = jax.jit(jnp.matmul)
    t = _median_time(lambda: f(a, b), reps)
    return 2.0 * size**3 / t / 1e9


def particle_steps(n, d, steps, reps):
    key = jax.random.key(2)
    Q = jax.random.normal(key, (d, d), jnp.float32) / np.sqrt(d)
    K = jax.random.normal(jax.random.fold_in(key, 1), (d, d), jnp.float32) / np.sqrt(d)
    att = Softmax(Q=Q, K=K, V=jnp.eye(d, dtype=jnp.float32))
    x0 = jax.random.normal(jax.random.fold_in(key, 2), (n, d), jnp.float32)
    run = jax.jit(lambda x: fixed_step_particles(att, x, 0.1, steps).final_x)
    t = _median_time(lambda: run(x0), reps)
    flops = (
        steps * 4 * 4.0 * n * n * d
    )  # RK4: 4 velocities; each 2 n^2 d (scores) + 2 n^2 d (average)
    return t, flops / t / 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--cpu-devices", default="auto", help="XLA CPU devices for the sweep (auto: one per core)"
    )
    args = parser.parse_args()
    n_devices = use_cpu_devices(args.cpu_devices)  # before any array exists
    if args.quick:
        sweep = beta_sweep(8, 16, 32, 8, 50, 5.0, reps=3)
        n, d, steps, mm = 2048, 64, 1, 1024
    else:
        sweep = beta_sweep(16, 64, 64, 8, 100, 10.0, reps=3)
        n, d, steps, mm = 8192, 64, 1, 2048
    rate = matmul_rate(mm, 5)
    t_steps, achieved = particle_steps(n, d, steps, 3)
    fraction = achieved / rate
    passed = bool(
        sweep["speedup_vs_loop"] >= 3.0 and sweep["speedup_vs_plain"] >= 1.5 and fraction >= 0.4
    )
    print(
        json.dumps(
            {
                "benchmark": "pde_particles",
                "quick": args.quick,
                "devices": n_devices,
                "beta_sweep": sweep,
                "particle_steps": {
                    "n": n,
                    "d": d,
                    "rk4_steps": steps,
                    "time_s": t_steps,
                    "achieved_gflops": achieved,
                    "matmul_gflops": rate,
                    "matmul_size": mm,
                    "fraction_of_matmul_rate": fraction,
                    "target_fraction": 0.4,
                },
                "passed": passed,
            }
        )
    )


if __name__ == "__main__":
    main()
