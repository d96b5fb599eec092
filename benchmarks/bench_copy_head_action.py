"""Benchmark: the exact copy-head action batched over 1000 matrices G vs a loop over G.

Prints one JSON object: timings (median of reps, and the minimum), the loop baseline in the
same run, the ratio of medians, the target (>= 10x) and "passed". ``--quick`` uses 200
matrices. The batched path builds the sufficient statistics once per call and evaluates every
G with GEMMs and a Cholesky factor unrolled over V (``CopyHeadPosterior.action`` on a batch,
``jaxdyn/copyhead/_batched.py``); on a shared CPU its time fluctuates a lot, hence ``--reps``.
"""

import argparse
import json
import statistics
import time

import jax
import numpy as np

import jaxdyn.copyhead as ch  # noqa: E402
from jaxdyn.copyhead import _posterior


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--x64", action="store_true", help="float64 (default float32)")
    parser.add_argument("--L", type=int, default=16)
    parser.add_argument("--V", type=int, default=8)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", args.x64)
    n = 200 if args.quick else 1000
    P, L, V = 32, args.L, args.V
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    Gs = jax.random.normal(jax.random.key(1), (n, L, L))
    single = jax.jit(  # one G: the data contracted directly, O(P L^2 V + P L V^2)
        lambda g: _posterior.action_from_data(g, X, Y, attention=ch.SoftmaxCopyHead())
    )
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    batched = jax.jit(lambda g: posterior.action(g, ch.copy_statistics(X, Y)))
    G_list = [jax.device_put(g) for g in np.asarray(Gs)]  # slicing outside the timed loop
    single(G_list[0]).block_until_ready()
    batched(Gs).block_until_ready()

    def time_loop():
        t = time.perf_counter()
        out = [single(g) for g in G_list]
        jax.block_until_ready(out)
        return time.perf_counter() - t

    def time_batched():
        t = time.perf_counter()
        batched(Gs).block_until_ready()
        return time.perf_counter() - t

    loops, bats = [], []
    for _ in range(args.reps):  # interleaved, so that a slow spell of the machine hits both
        loops.append(time_loop())
        batched(Gs).block_until_ready()  # re-warm after the loop
        bats.append(time_batched())
    loop, bat = statistics.median(loops), statistics.median(bats)
    ratio = loop / bat
    print(
        json.dumps(
            {
                "benchmark": "copy_head_exact_action_batched",
                "matrices": n,
                "P": P,
                "L": L,
                "V": V,
                "x64": args.x64,
                "reps": args.reps,
                "batched_s": bat,
                "baseline_loop_s": loop,
                "ratio": ratio,
                "batched_min_s": min(bats),
                "baseline_loop_min_s": min(loops),
                "target_ratio": 10.0,
                "passed": bool(ratio >= 10.0),
            }
        )
    )


if __name__ == "__main__":
    main()
