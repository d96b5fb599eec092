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
   The PyTorch loop runs in a fresh process of its own, three times under glibc's default
   allocator and three times with freed blocks kept (``mallopt``: blocks up to 32 MB from the
   heap, never trimmed). Each operation allocates a fresh 16 MB tensor, which the default
   allocator may hand back to the system and fault in again page by page (up to millions of
   page faults a run, counted and reported); the baseline is the faster of the two medians.
   Whether any implementation can reach it on the machine is reported too: ``roofline_s`` is
   the sweep's work at the machine's best measured rates (its matrix products, ``4 n^2 d + 2
   n^2`` FLOPs per velocity, at the faster of XLA's and PyTorch's float32 2048 x 2048 matmul
   rates; its ``n^2`` exponentials per velocity at the faster of ``jnp.exp`` and ``torch.exp``
   on 2^16 numbers in the sweep's range, in cache, a call's fixed cost subtracted; on N cores,
   the faster of each rate with N threads and N times its one-core rate, measured in a process
   pinned to one core, since the members are independent), and ``speedup_bound_vs_pytorch``
   is the PyTorch time over it: at those rates, a program that evaluates every score's
   exponential and the products one after the other cannot beat it (the elementwise passes,
   projections and RK4 combinations are left out).
2. Particle steps at n = 8192, d = 64 (float32): RK4 steps of (general) softmax attention
   through ``simulate_particles`` at fixed RK4 steps under a plain ``jax.jit`` (what a user's
   script gets), their matmul FLOP rate (4 n^2 d per velocity) against XLA's float32 2048 x
   2048 matmul rate, the two timed alternately in the same run. Target: >= 75%. Also
   reported against the faster of XLA's and PyTorch's matmul rates
   (``fraction_of_best_matmul_rate``).

By default everything runs on ONE core (the process is pinned to one CPU before JAX and
PyTorch start; XLA's and PyTorch's thread pools are single-threaded). All timings warm
(compiled beforehand), median of repetitions (PyTorch's too). With ``--cores N`` both use N
cores: PyTorch N threads, jaxdyn's sweep N chunks at once (the engine's default on a CPU with
N cores). Writes JSON to stdout; a full-size run also to benchmarks/results/pde_particles.json
(one core) or pde_particles_coresN.json, with ``_avx2`` before ``.json`` on a CPU without
512-bit vectors (``vector_isa`` in the JSON): the two kinds of CPU differ in both rates and
bound, so each keeps its own files.

    python benchmarks/bench_pde_particles.py [--quick] [--cores N]
"""

import argparse
import json
import os
import pathlib
import sys
import time


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


def _median_s(fn, reps):
    """Median seconds of ``fn()`` (which waits for its result) over ``reps`` calls after a
    warm-up call (compilation, first-touch allocations)."""
    import numpy as np

    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _median_time(fn, reps):
    """:func:`_median_s` of a JAX computation (waits for its result)."""
    import jax

    return _median_s(lambda: jax.block_until_ready(fn()), reps)


def _keep_freed_blocks() -> bool:
    """Ask glibc's allocator to serve blocks up to 32 MB from its heap and never trim it, so a
    freed tensor's pages are reused instead of faulted in again (``mallopt``; ``False`` where
    the C library is not glibc)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    return bool(
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    )


def _minor_faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _torch_worker(x0, betas, steps, h, radius, reps, keep_freed_blocks, label):
    """In a fresh interpreter: ``reps`` runs of the PyTorch loop, each ``(seconds, minor page
    faults)``, said on stderr as it ends; the last run's tokens and clusters."""
    kept = _keep_freed_blocks() if keep_freed_blocks else False  # before torch allocates
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    runs = []
    for _ in range(reps):
        faults, t = _minor_faults(), time.perf_counter()
        x, clusters = _torch_sweep(x0, betas, steps, h, radius)
        runs.append((time.perf_counter() - t, _minor_faults() - faults))
        _say(f"beta sweep: PyTorch ({label}) {runs[-1][0]:.2f} s, {runs[-1][1]} page faults")
    return {"kept": kept, "runs": runs}, x, clusters


def _torch_runs(x0, betas, steps, h, radius, reps, keep_freed_blocks):
    """:func:`_torch_worker` in a fresh process (``spawn``: as a researcher runs the loop,
    nothing of JAX's in it; the CPUs this process is pinned to), under glibc's default
    allocator or with freed blocks kept (:func:`_keep_freed_blocks`)."""
    import multiprocessing

    label = "freed blocks kept" if keep_freed_blocks else "default allocator"
    args = (x0, betas, steps, h, radius, reps, keep_freed_blocks, label)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_torch_worker, args)


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

    import diffrax

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

    kept, torch_x, torch_clusters = _torch_runs(x0, betas, steps, h, radius, reps, True)
    default, _, _ = _torch_runs(x0, betas, steps, h, radius, reps, False)
    medians = {
        label: float(np.median([seconds for seconds, _ in runs["runs"]]))
        for label, runs in (("kept", kept), ("default", default))
    }
    t_torch = min(medians.values())  # the faster of the two: the stronger baseline

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
        "pytorch_batched_loop_freed_blocks_kept": {
            "applied": kept["kept"],
            "median_s": medians["kept"],
            "runs_s_and_minor_page_faults": kept["runs"],
        },
        "pytorch_batched_loop_default_allocator": {
            "median_s": medians["default"],
            "runs_s_and_minor_page_faults": default["runs"],
        },
        "handwritten_jax_jit_vmap_s": t_plain,
        "speedup_vs_pytorch": t_torch / t_jaxdyn,
        "speedup_vs_handwritten_jax": t_plain / t_jaxdyn,
        "max_abs_final_token_gap_vs_pytorch": torch_gap,
        "same_cluster_counts_as_pytorch": float(
            np.mean(result.reshaped("clusters") == torch_clusters)
        ),
        "target_vs_pytorch": 10.0,
        "work": {  # every member, every RK4 stage's velocity
            "matmul_flops": float(n_betas * systems * 4 * steps * (4 * n * n * d + 2 * n * n)),
            "exponentials": float(n_betas * systems * 4 * steps * n * n),
        },
    }


def _xla_matmul(size):
    """A call of XLA's float32 ``size`` x ``size`` matmul (compiled on first call)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    f = jax.jit(jnp.matmul)
    return lambda: f(a, b)


def matmul_rate(size, reps):
    return 2.0 * size**3 / _median_time(_xla_matmul(size), reps) / 1e9


def _exp_rate(exp_of, numbers, reps):
    """Exponentials per second of ``exp_of(n)`` (a call evaluating ``n`` exponentials of
    numbers in [-16, 0], the sweep's ``beta (<x, y> - 1)`` at beta <= 8), in cache: the
    arrays fit in L2, and a call's fixed cost (the time of 16 exponentials) is subtracted."""
    big, tiny = _median_s(exp_of(numbers), reps), _median_s(exp_of(16), reps)
    if big <= tiny:
        raise SystemExit(
            f"exponential rate: {numbers} exponentials took no longer than 16 "
            f"({big:.2e} s, {tiny:.2e} s); the machine is too noisy to measure it, run again"
        )
    return (numbers - 16) / (big - tiny)


def _rates(size, numbers, reps):
    """XLA's and PyTorch's float32 rates with the cores this process has: matmul (GFLOP/s,
    ``size`` x ``size``) and exponentials per second (``numbers`` of them in cache,
    :func:`_exp_rate`; XLA's the faster with 256- and 512-bit vectors)."""
    import jax
    import jax.numpy as jnp
    import torch

    xla_matmul = matmul_rate(size, reps)
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    torch_matmul = 2.0 * size**3 / _median_s(lambda: torch.mm(a, b, out=out), reps) / 1e9

    def xla_exp(width):
        def exp_of(n):
            z = jnp.linspace(-16.0, 0.0, n, dtype=jnp.float32)
            options = {"xla_cpu_prefer_vector_width": width}
            f = jax.jit(jnp.exp).lower(z).compile(compiler_options=options)
            return lambda: f(z).block_until_ready()

        return exp_of

    def torch_exp_of(n):
        z, e = torch.linspace(-16.0, 0.0, n), torch.empty(n)
        return lambda: torch.exp(z, out=e)

    return {
        "xla_matmul_gflops": xla_matmul,
        "torch_matmul_gflops": torch_matmul,
        "xla_exp_per_s": max(
            _exp_rate(xla_exp(width), numbers, 200 * reps) for width in (256, 512)
        ),
        "torch_exp_per_s": _exp_rate(torch_exp_of, numbers, 200 * reps),
    }


def _one_core_rates_worker(size, numbers, reps):
    """In a fresh interpreter pinned to one core before JAX and PyTorch start: :func:`_rates`.
    Pinning is what makes the rates one core's: in a process with more cores, XLA's matmul
    uses them even with ``xla_cpu_multi_thread_eigen=False``."""
    _pin(1)
    import torch

    torch.set_num_threads(1)
    return _rates(size, numbers, reps)


def best_rates(size, numbers, reps, cores):
    """The machine's best float32 rates on ``cores`` cores, for the beta sweep's roofline: for
    matmul and for exponentials, the fastest of XLA's and PyTorch's rates measured with every
    core and ``cores`` times their one-core rates (measured in a process of its own pinned to
    one core; an upper bound for a program that splits the work over the cores: the sweep's
    members are independent, and jaxdyn runs a chunk per core)."""
    import multiprocessing

    rates = _rates(size, numbers, reps)
    rates["exp_numbers_per_call"] = numbers
    one = rates
    if cores > 1:
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            one = pool.apply(_one_core_rates_worker, (size, numbers, reps))
        rates["one_core"] = one
        rates["cores"] = cores
    gflops = ("xla_matmul_gflops", "torch_matmul_gflops")
    exps = ("xla_exp_per_s", "torch_exp_per_s")
    rates["best_matmul_gflops"] = max(max(rates[k], cores * one[k]) for k in gflops)
    rates["best_exp_per_s"] = max(max(rates[k], cores * one[k]) for k in exps)
    return rates


def particle_steps(n, d, steps, matmul_size, reps):
    """Seconds of ``steps`` RK4 steps of softmax particles (``n`` tokens in ``d``) through
    ``simulate_particles`` under a plain ``jax.jit``, their matmul FLOP rate, and XLA's float32
    ``matmul_size`` x ``matmul_size`` matmul rate, timed alternately (a matmul, then the steps,
    ``reps`` times after a warm-up of each): a machine whose speed drifts moves both alike.
    Medians."""
    import diffrax
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
    timed = {"matmul": _xla_matmul(matmul_size), "steps": lambda: run(x0)}
    times = {name: [] for name in timed}
    for fn in timed.values():
        jax.block_until_ready(fn())
    for _ in range(reps):
        for name, fn in timed.items():
            t = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - t)
    t_steps, t_matmul = float(np.median(times["steps"])), float(np.median(times["matmul"]))
    flops = steps * 4 * 4.0 * n * n * d  # RK4: 4 velocities of 2 n^2 d (scores) + 2 n^2 d
    return t_steps, flops / t_steps / 1e9, 2.0 * matmul_size**3 / t_matmul / 1e9


def vector_isa() -> str:
    """``"avx512"``, ``"avx2"`` or ``"other"``: the widest x86 vector extension the CPU has."""
    try:
        flags = pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return "other"
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"


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
    rates = best_rates(mm, 1 << 16, 5, args.cores)
    work = sweep["work"]
    roofline = (
        work["matmul_flops"] / (1e9 * rates["best_matmul_gflops"])
        + work["exponentials"] / rates["best_exp_per_s"]
    )
    sweep["best_rates"] = rates
    sweep["roofline_s"] = roofline
    sweep["speedup_bound_vs_pytorch"] = sweep["pytorch_batched_loop_s"] / roofline
    _say(
        f"beta sweep: roofline {roofline:.2f} s at the best measured rates: a program that "
        f"evaluates every exponential and product exceeds PyTorch at most "
        f"{sweep['speedup_bound_vs_pytorch']:.1f}x here"
    )
    t_steps, achieved, step_matmul = particle_steps(n, d, steps, mm, 5)
    fraction = achieved / step_matmul
    _say(
        f"particle steps at n = {n}: {t_steps:.3f} s, {achieved:.1f} GFLOP/s, {fraction:.2f} "
        f"of XLA's matmul rate timed alternately ({step_matmul:.1f} GFLOP/s)"
    )
    out = {
        "load_average_1_5_15min": list(os.getloadavg()),  # a quiet machine: well below the cores
        "benchmark": "pde_particles" if args.cores == 1 else f"pde_particles_cores{args.cores}",
        "quick": args.quick,
        "cpus": cpus,
        "torch": torch.__version__,
        "vector_isa": vector_isa(),
        "beta_sweep": sweep,
        "particle_steps": {
            "n": n,
            "d": d,
            "rk4_steps": steps,
            "time_s": t_steps,
            "achieved_gflops": achieved,
            "matmul_gflops": step_matmul,  # XLA's, timed alternately with the steps
            "matmul_size": mm,
            "fraction_of_matmul_rate": fraction,
            # against best_rates' best_matmul_gflops (timed apart)
            "fraction_of_best_matmul_rate": achieved / rates["best_matmul_gflops"],
            "target_fraction": 0.75,
        },
        "passed": bool(sweep["speedup_vs_pytorch"] >= 10.0 and fraction >= 0.75),
    }
    text = json.dumps(out)
    print(text)
    if args.quick:  # the stored results are full-size ones
        _say("not stored (benchmarks/results holds full-size runs only)")
    else:
        from jaxdyn._atomic import atomic_write_text

        results = pathlib.Path(__file__).resolve().parent / "results"
        results.mkdir(exist_ok=True)
        stored = "pde_particles" + ("" if args.cores == 1 else f"_cores{args.cores}")
        stored += ("" if out["vector_isa"] == "avx512" else f"_{out['vector_isa']}") + ".json"
        atomic_write_text(results / stored, text + "\n")


if __name__ == "__main__":
    main()
