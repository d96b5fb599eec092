"""Benchmark: 64 SGLD chains of the copy head vmapped vs per-chain loops of the same kernel.

jaxdyn runs the chains as one sweep (``jaxdyn.sweep.run_sweep`` over the chain index; each
chain a ``lax.scan`` of the blackjax SGLD step), sharded over every CPU core
(``--cpu-devices auto``: one XLA device per core, ``jaxdyn.sweep.use_cpu_devices``; results
are identical for any device count). Also reported: the same chains as one ``jit(vmap(chain))``
on a single device. Two baselines are measured in the same run, on the same keys:

(a) ``baseline_step_loop``: the per-chain loop of the same jitted blackjax SGLD step kernel as
    paper scripts write it -- a Python loop over chains and over steps, one jitted ``step``
    call per step. The issue's target (>= 20x) applies to this baseline. It is timed on
    ``--loop-chains`` chains (all steps) and extrapolated linearly to all chains (a Python loop
    over independent chains costs the same per chain); the JSON says so.
(b) ``baseline_scan_loop``: a Python loop over chains of the jitted single-chain ``lax.scan``
    (the stronger baseline: no per-step dispatch). Its ratio is reported too; no target.

The kernel is the library's, ``jaxdyn.copyhead.sgld_kernel`` (the one ``sample_sgld`` and the
``copy-head-sgld`` experiment use): ``blackjax.sgld`` with the gradient written out from the
sufficient statistics (``joint_energy_gradient``) and threefry noise drawn in JAX's
non-partitionable bit layout (``partitionable_noise=False``, its default).

Problem size: the default L = 16, V = 4, P = 40, float32, 64 chains sharing one dataset (one
posterior, many chains). The ``copy-head-sgld`` experiment runs L = 32, V = 8 (``--quick``:
V = 4) with one dataset per member; ``--L 32 --V 8`` times that size. Each step costs
O(L^2 V^2) whatever P. Larger problems make the per-step dispatch of baseline (a) a smaller
share, so the ratio falls with L and V (docs/copy_head.md gives both sizes).

Prints one JSON object (timings are medians of ``--reps``; the 1-minute load average before
and after is recorded, since loaded machines inflate the ratio). ``--quick`` uses fewer steps.
"""

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp  # noqa: E402
import numpy as np

import jaxdyn.copyhead as ch  # noqa: E402
from jaxdyn.sweep import Grid, SweepOptions, run_sweep, use_cpu_devices


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--loop-chains", type=int, default=8,
                        help="chains timed for the per-step loop baseline (extrapolated)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--L", type=int, default=16)
    parser.add_argument("--V", type=int, default=4)
    parser.add_argument("--x64", action="store_true", help="float64 (default float32)")
    parser.add_argument("--cpu-devices", default="auto",
                        help="XLA CPU devices for the sweep (auto: one per core)")
    args = parser.parse_args()
    n_devices = use_cpu_devices(args.cpu_devices)  # before any array exists
    jax.config.update("jax_enable_x64", args.x64)
    L, V, P = args.L, args.V, 40
    steps = args.steps or (100 if args.quick else 400)
    n_loop = min(args.loop_chains, args.chains)
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    stats = ch.copy_statistics(X, Y)
    head = ch.HeadSettings(attention="softmax")
    kernel = ch.sgld_kernel(stats, head, 4.0)
    h = 0.2 / (V + P * L / V)

    def start(key):
        k0, k1 = jax.random.split(key)
        pos = {"W": 0.01 * jax.random.normal(k0, (V, V)), "g": jnp.zeros((L, L))}
        return pos, jax.random.split(k1, steps)

    def chain(key):
        pos, step_keys = start(key)

        def one(p, k):
            return kernel.step(k, p, stats, h), None

        pos, _ = jax.lax.scan(one, pos, step_keys)
        return pos["g"]

    keys = jax.random.split(jax.random.key(1), args.chains)
    scan_single = jax.jit(chain)
    batched = jax.jit(jax.vmap(chain))
    grid = Grid.product({"chain": np.arange(args.chains, dtype=np.float32)}, seeds=1)

    def member(params, _key):
        return {"g": chain(keys[params["chain"].astype(jnp.int32)]), "status": jnp.int32(0)}

    def swept():
        return run_sweep(member, grid, options=SweepOptions(progress=False)).outputs["g"]
    step = jax.jit(lambda k, p: kernel.step(k, p, stats, h))  # the same kernel, one step
    key_list = [keys[i] for i in range(args.chains)]  # slicing outside the timed loops
    starts = [jax.jit(start)(key_list[i]) for i in range(n_loop)]
    starts = [(pos, [ks[t] for t in range(steps)]) for pos, ks in starts]
    jax.block_until_ready((key_list, starts))
    # warm-up (compile)
    scan_single(key_list[0]).block_until_ready()
    batched(keys).block_until_ready()
    jax.block_until_ready(swept())
    step(starts[0][1][0], starts[0][0])["g"].block_until_ready()

    def run_step_loop():
        outs = []
        for pos, step_keys in starts:
            for k in step_keys:
                pos = step(k, pos)
            outs.append(pos["g"])
        return outs

    def time_step_loop():
        t = time.perf_counter()
        jax.block_until_ready(run_step_loop())
        return time.perf_counter() - t

    def time_scan_loop():
        t = time.perf_counter()
        jax.block_until_ready([scan_single(k) for k in key_list])
        return time.perf_counter() - t

    def time_vmap():
        t = time.perf_counter()
        batched(keys).block_until_ready()
        return time.perf_counter() - t

    def time_sweep():
        t = time.perf_counter()
        jax.block_until_ready(swept())
        return time.perf_counter() - t

    # Same chains, same keys: all paths must agree (up to float rounding).
    ref = np.asarray(batched(keys)[:n_loop])
    agree = float(np.max(np.abs(np.stack(run_step_loop()) - ref)) / (np.max(np.abs(ref)) + 1e-30))
    agree_sweep = float(
        np.max(np.abs(np.asarray(swept())[:n_loop] - ref)) / (np.max(np.abs(ref)) + 1e-30)
    )

    load_before = os.getloadavg()[0]
    step_sub = statistics.median(time_step_loop() for _ in range(args.reps))
    step_loop = step_sub * args.chains / n_loop
    scan_loop = statistics.median(time_scan_loop() for _ in range(args.reps))
    vm = statistics.median(time_vmap() for _ in range(args.reps))
    sw = statistics.median(time_sweep() for _ in range(args.reps))
    ratio = step_loop / sw
    print(json.dumps({
        "benchmark": "copy_head_sgld_chains",
        "chains": args.chains, "steps": steps, "L": L, "V": V, "P": P, "x64": args.x64,
        "kernel": "jaxdyn.copyhead.sgld_kernel: blackjax.sgld, joint_energy_gradient, "
                  "non-partitionable threefry noise",
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "devices": n_devices,
        "sweep_s": sw,
        "sweep_note": f"run_sweep over the chain index on {n_devices} CPU device(s)",
        "vmapped_s": vm,
        "vmapped_note": "jit(vmap(chain)) on one device",
        "ratio_single_device_vmap": step_loop / vm,
        "baseline_step_loop_s": step_loop,
        "baseline_step_loop_note": (
            f"Python loop over chains and steps, one jitted blackjax SGLD step per call; "
            f"timed on {n_loop} of {args.chains} chains ({step_sub:.3f} s) and extrapolated "
            f"linearly x{args.chains / n_loop:g}"),
        "baseline_scan_loop_s": scan_loop,
        "baseline_scan_loop_note": "Python loop over all chains of the jitted lax.scan chain",
        "ratio": ratio, "ratio_vs_scan_loop": scan_loop / sw,
        "target_ratio": 20.0, "target_applies_to": "sweep_s vs baseline_step_loop_s",
        "passed": bool(ratio >= 20.0),
        "max_rel_diff_step_loop_vs_vmapped": agree,
        "max_rel_diff_sweep_vs_vmapped": agree_sweep,
        "chain_steps_per_s_sweep": args.chains * steps / sw,
    }))


if __name__ == "__main__":
    main()
