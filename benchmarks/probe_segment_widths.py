"""Probe: what one segment step costs at each group width (no target; explains a bound).

A segmented sweep (``DiffeqMember``) advances its unfinished members in groups; a straggler
that runs on after the others pays the step of the narrowest group. This script compiles the
one-segment program of ``bench_sweep_heterogeneous.py``'s member at several widths and times
``segment_steps`` steps of each, interleaved over repetitions (minimum and median per step,
and per member). With ``--fused-field`` the member's 4 x 4 products are written as
broadcast-multiply-sums instead of ``@``, which XLA fuses instead of running one batched-dot
kernel per product: the difference is the share of the step spent in small dot kernels.

    python benchmarks/probe_segment_widths.py [--widths 1,4,8,32] [--reps 15] [--fused-field]

Prints one JSON object; writes nothing.
"""

import argparse
import json
import time

import bench_sweep_heterogeneous as workload
import jax
import jax.numpy as jnp
import numpy as np


def fused_field(t, y, args):
    """``workload.field`` with every matrix product as a broadcast-multiply-sum."""
    mean, cov = y
    omega, Q = args

    def mm(a, b):
        return (a[..., :, :, None] * b[..., None, :, :]).sum(-2)

    B = omega * workload.ROTATION + 0.05 * (jax.nn.softmax(mm(Q, cov), axis=-1) - jnp.eye(4))
    return (B * mean[None, :]).sum(-1), mm(B, cov) + mm(cov, B.T)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--widths", default="1,2,4,8,16,32")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--segment-steps", type=int, default=128)
    parser.add_argument("--fused-field", action="store_true")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    if args.fused_field:
        workload.field = fused_field
    from jaxdyn.sweep._diffeq import DiffeqMember
    from jaxdyn.sweep._scheduler import SegmentedPrograms

    widths = [int(w) for w in args.widths.split(",")]
    members = max(32, max(widths))
    # The slowest member of the benchmark's mixes (20,000 steps): no lane finishes while timed.
    params = {"omega": jnp.full((members,), 20_000 / workload.STEPS_PER_UNIT_OMEGA)}
    seeds = np.arange(members, dtype=np.uint32)
    device = jax.devices()[0]
    programs = SegmentedPrograms(
        DiffeqMember(workload.problem, workload.outputs),
        max(widths),
        0,
        args.segment_steps,
        params,
        seeds,
        device,
    )
    params, seeds = jax.device_put((params, seeds), device)
    states = programs.init(params, seeds)[0]
    compiled = {w: programs.advance(w) for w in widths}
    seconds = {w: [] for w in widths}
    for _ in range(args.reps):
        for w in widths:
            idx = np.arange(w, dtype=np.int32)
            t0 = time.perf_counter()
            states, done = compiled[w](params, seeds, states, idx, np.int32(w))
            jax.block_until_ready(done)
            seconds[w].append(time.perf_counter() - t0)
    per_step = {w: np.array(s) * 1e6 / args.segment_steps for w, s in seconds.items()}
    report = {
        "probe": "segment_widths",
        "device": str(device),
        "field": "fused" if args.fused_field else "matmul",
        "segment_steps": args.segment_steps,
        "us_per_step_min": {w: round(float(v.min()), 1) for w, v in per_step.items()},
        "us_per_step_median": {w: round(float(np.median(v)), 1) for w, v in per_step.items()},
        "us_per_member_step_min": {w: round(float(v.min()) / w, 2) for w, v in per_step.items()},
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
