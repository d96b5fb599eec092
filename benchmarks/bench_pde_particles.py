"""Particle throughput of the mean-field Transformer PDE.

1. A beta (temperature) sweep of tokens on the sphere (16 betas x 64 systems x 64 tokens,
   d = 8, 100 RK4 steps, float32), three ways, in the same run, on the same initial tokens:
   - jaxdyn: ``run_sweep`` over a ``Grid`` of betas x seeds (default ``SweepOptions``), each member
     ``simulate_particles`` at fixed RK4 steps (jaxdyn.meanfield.RK4) of
     ``sphere_softmax(beta, d, bounded=True)`` and a cluster count;
   - PyTorch: the loop a researcher writes, vectorised over the whole batch (all betas and
     systems as one ``(B, n, d)`` tensor), RK4 in a Python loop over steps with
     ``torch.bmm`` and ``torch.softmax`` under ``torch.no_grad``, clusters counted afterwards
     by ``scipy.sparse.csgraph.connected_components``;
   - a hand-written JAX RK4 in ``lax.fori_loop`` under ``jit(vmap(vmap(...)))`` (no jaxdyn).
   The final tokens of the three agree (reported). Target: jaxdyn >= 10x the PyTorch loop.
2. Particle steps at n = 8192, d = 64 (float32): RK4 steps of (general) softmax attention
   through ``simulate_particles`` at fixed RK4 steps, their matmul FLOP rate (4 n^2 d per
   velocity) against the
   machine's float32 matmul rate measured in the same run. Target: >= 75%.

By default everything runs on ONE core (the process is pinned to one CPU before JAX and
PyTorch start; XLA's and PyTorch's thread pools are single-threaded). All timings warm
(compiled beforehand), median of repetitions (PyTorch's too). Writes JSON to stdout; the full-size
one-core run also to benchmarks/results/pde_particles.json.

    python benchmarks/bench_pde_particles.py [--quick] [--cores N]
"""

import argparse
import json
import os
import pathlib
import sys
import time

import diffrax


def _pin(cores: int) -> list[int]:
    """Restrict this process (and the thread pools created later) to ``cores`` CPUs."""
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    os.sched_setaffinity(0, allowed)
    if cores == 1:  # single-threaded matrix kernels, before JAX starts (XLA's default emitters)
        from jaxdyn.distributed._devices import xla_cpu_setup

        xla_cpu_setup()
    return allowed


def _say(line: str) -> None:
    """Progress on stderr (the JSON goes to stdout)."""
    print(line, file=sys.stderr, flush=True)


def _median_time(fn, reps):
    import jax
    import numpy as np

    jax.block_until_ready(fn())  # warm-up (compilation)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _torch_sweep(x0, betas, steps, h, radius):
    """The PyTorch loop: one (B, n, d) tensor for every (beta, system), RK4 over steps."""
    import numpy as np
    import torch
    from scipy.sparse.csgraph import connected_components

    systems = x0.shape[0]
    x = torch.from_numpy(np.tile(x0, (len(betas), 1, 1)))
    beta = torch.from_numpy(np.repeat(betas, systems)).view(-1, 1, 1)

    def velocity(y):
        weights = torch.softmax(beta * torch.bmm(y, y.transpose(1, 2)), dim=-1)
        avg = torch.bmm(weights, y)
        radial = (avg * y).sum(-1, keepdim=True) / (y * y).sum(-1, keepdim=True)
        return avg - radial * y

    with torch.no_grad():
        for _ in range(steps):
            k1 = velocity(x)
            k2 = velocity(x + 0.5 * h * k1)
            k3 = velocity(x + 0.5 * h * k2)
            k4 = velocity(x + h * k3)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        close = torch.cdist(x, x) <= radius
    counts = [connected_components(c.numpy(), directed=False)[0] for c in close]
    return x.numpy(), np.array(counts).reshape(len(betas), systems)


def sphere_member(n, d, t1, steps, radius):
    """The beta sweep's member: ``n`` tokens uniform on the sphere in ``d`` (seeded by the
    member's key), ``steps`` RK4 steps to ``t1`` of ``SphereSoftmax(beta, d)``, the clusters of
    the final tokens at ``radius``."""

    from jaxdyn.meanfield import RK4, detect_clusters, simulate_particles, uniform_on_sphere
    from jaxdyn.meanfield.fields import SphereSoftmax

    def member(params, key):
        x0 = uniform_on_sphere(key, n, d)
        sol = simulate_particles(
            SphereSoftmax(params["beta"], d),
            x0,
            t1,
            dt0=t1 / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
        )
        return {
            "clusters": detect_clusters(sol.final_x, radius)[1],
            "final_x": sol.final_x,
            "status": sol.status,
        }

    return member


def handwritten_rk4(velocity, h, steps):
    """``(x, beta) -> x`` after ``steps`` classical RK4 steps of size ``h`` of
    ``dx/dt = velocity(x, beta)`` in ``lax.fori_loop``: the hand-written JAX baseline (no
    jaxdyn), also the kernel of ``probe_beta_sweep_kernel.py``."""
    import jax

    def one(x, beta):
        def rk4(_, y):
            k1 = velocity(y, beta)
            k2 = velocity(y + 0.5 * h * k1, beta)
            k3 = velocity(y + 0.5 * h * k2, beta)
            k4 = velocity(y + h * k3, beta)
            return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        return jax.lax.fori_loop(0, steps, rk4, x)

    return one


def beta_sweep(n_betas, systems, n, d, steps, t1, reps):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.attention import softmax_weights
    from jaxdyn.meanfield import (
        uniform_on_sphere,
    )
    from jaxdyn.sweep import Grid, SweepOptions, run_sweep

    betas = np.geomspace(0.5, 8.0, n_betas).astype(np.float32)
    h = t1 / steps
    radius = 0.05
    member = sphere_member(n, d, t1, steps, radius)
    grid = Grid.product({"beta": betas}, seeds=systems)
    options = SweepOptions(progress=False)  # the defaults a user's script gets
    t_jaxdyn = _median_time(
        lambda: run_sweep(member, grid, options=options).outputs["clusters"], reps
    )
    _say(f"beta sweep: jaxdyn {t_jaxdyn:.2f} s (median of {reps})")
    result = run_sweep(member, grid, options=options)
    # the members' initial tokens, for the baselines: seed s of every beta uses key(s)
    keys = jax.vmap(jax.random.key)(jnp.asarray(result.seeds[:systems]))
    x0 = np.asarray(jax.vmap(lambda k: uniform_on_sphere(k, n, d))(keys))  # (systems, n, d)

    torch_times = []
    for _ in range(reps):  # no compilation: every run is timed, median like jaxdyn's
        t = time.perf_counter()
        torch_x, torch_clusters = _torch_sweep(x0, betas, steps, h, radius)
        torch_times.append(time.perf_counter() - t)
        _say(f"beta sweep: PyTorch run {len(torch_times)}/{reps} {torch_times[-1]:.2f} s")
    t_torch = float(np.median(torch_times))

    def velocity(x, beta):
        scores = beta * jnp.einsum("id,jd->ij", x, x)
        avg = softmax_weights(scores) @ x
        return avg - jnp.sum(avg * x, -1, keepdims=True) / jnp.sum(x * x, -1, keepdims=True) * x

    one = handwritten_rk4(velocity, h, steps)
    plain = jax.jit(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)))
    t_plain = _median_time(lambda: plain(jnp.asarray(x0), jnp.asarray(betas)), reps)
    jax_x = result.reshaped("final_x")  # (betas, systems, n, d)
    torch_gap = float(np.max(np.abs(jax_x - torch_x.reshape(jax_x.shape))))
    return {
        "size": {"betas": n_betas, "systems": systems, "tokens": n, "d": d, "rk4_steps": steps},
        "jaxdyn_path": "run_sweep (default SweepOptions) of simulate_particles at fixed RK4 "
        "steps of SphereSoftmax(beta, d)",
        "jaxdyn_s": t_jaxdyn,
        "pytorch_batched_loop_s": t_torch,
        "pytorch_batched_loop_runs_s": torch_times,
        "handwritten_jax_jit_vmap_s": t_plain,
        "speedup_vs_pytorch": t_torch / t_jaxdyn,
        "speedup_vs_handwritten_jax": t_plain / t_jaxdyn,
        "max_abs_final_token_gap_vs_pytorch": torch_gap,
        "same_cluster_counts_as_pytorch": float(
            np.mean(result.reshaped("clusters") == torch_clusters)
        ),
        "target_vs_pytorch": 10.0,
    }


def matmul_rate(size, reps):
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    f = jax.jit(jnp.matmul)
    t = _median_time(lambda: f(a, b), reps)
    return 2.0 * size**3 / t / 1e9


def particle_steps(n, d, steps, reps):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxdyn.meanfield import RK4, simulate_particles
    from jaxdyn.meanfield.fields import Softmax

    key = jax.random.key(2)
    Q = jax.random.normal(key, (d, d), jnp.float32) / np.sqrt(d)
    K = jax.random.normal(jax.random.fold_in(key, 1), (d, d), jnp.float32) / np.sqrt(d)
    att = Softmax(Q=Q, K=K, V=jnp.eye(d, dtype=jnp.float32))
    x0 = jax.random.normal(jax.random.fold_in(key, 2), (n, d), jnp.float32)
    run = jax.jit(
        lambda x: (
            simulate_particles(
                att,
                x,
                0.1,
                dt0=0.1 / steps,
                solver=RK4(),
                stepsize_controller=diffrax.ConstantStepSize(),
                blowup_norm=None,
            ).final_x
        )
    )
    t = _median_time(lambda: run(x0), reps)
    flops = steps * 4 * 4.0 * n * n * d  # RK4: 4 velocities of 2 n^2 d (scores) + 2 n^2 d
    return t, flops / t / 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cores", type=int, default=1, help="CPU cores to run on (default 1)")
    args = parser.parse_args()
    available = len(os.sched_getaffinity(0))
    if not 1 <= args.cores <= available:
        parser.error(f"--cores {args.cores}: this process may run on 1 to {available} cores")
    cpus = _pin(args.cores)
    import torch

    torch.set_num_threads(args.cores)
    if args.quick:
        sweep = beta_sweep(8, 16, 32, 8, 50, 5.0, reps=3)
        n, d, steps, mm = 2048, 64, 1, 1024
    else:
        sweep = beta_sweep(16, 64, 64, 8, 100, 10.0, reps=3)
        n, d, steps, mm = 8192, 64, 1, 2048
    rate = matmul_rate(mm, 5)
    _say(f"float32 matmul rate at {mm}: {rate:.1f} GFLOP/s")
    t_steps, achieved = particle_steps(n, d, steps, 3)
    _say(f"particle steps at n = {n}: {t_steps:.3f} s, {achieved / rate:.2f} of the matmul rate")
    fraction = achieved / rate
    out = {
        "load_average_1_5_15min": list(os.getloadavg()),  # a quiet machine: well below the cores
        "benchmark": "pde_particles",
        "quick": args.quick,
        "cpus": cpus,
        "torch": torch.__version__,
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
            "target_fraction": 0.75,
        },
        "passed": bool(sweep["speedup_vs_pytorch"] >= 10.0 and fraction >= 0.75),
    }
    text = json.dumps(out)
    print(text)
    if args.quick or args.cores != 1:  # the stored result is the full-size, one-core one
        _say("not stored (benchmarks/results/pde_particles.json holds the full one-core run)")
    else:
        from jaxdyn._atomic import atomic_write_text

        results = pathlib.Path(__file__).resolve().parent / "results"
        results.mkdir(exist_ok=True)
        atomic_write_text(results / "pde_particles.json", text + "\n")


if __name__ == "__main__":
    main()
