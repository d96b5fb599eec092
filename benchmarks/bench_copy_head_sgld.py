"""Benchmark: 64 SGLD chains of the copy head vmapped vs a per-chain loop of the same kernel.

Prints one JSON object: timings (median of reps), the baseline in the same run, the ratio,
the target (>= 20x) and "passed". ``--quick`` uses fewer steps.
"""

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp  # noqa: E402

import jaxdyn.copyhead as ch  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--L", type=int, default=16)
    parser.add_argument("--V", type=int, default=4)
    parser.add_argument("--x64", action="store_true", help="float64 (default float32)")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", args.x64)
    L, V, P = args.L, args.V, 40
    steps = 100 if args.quick else 400
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    stats = ch.copy_statistics(X, Y)
    head = ch.HeadSettings(attention="softmax")
    kernel = ch.sgld_kernel(stats, head, 4.0)
    h = 0.2 / (V + P * L / V)

    def chain(key):
        k0, k1 = jax.random.split(key)
        pos = {"W": 0.01 * jax.random.normal(k0, (V, V)), "g": jnp.zeros((L, L))}

        def one(p, k):
            return kernel.step(k, p, stats, h), None

        pos, _ = jax.lax.scan(one, pos, jax.random.split(k1, steps))
        return pos["g"]

    keys = jax.random.split(jax.random.key(1), args.chains)
    single = jax.jit(chain)
    batched = jax.jit(jax.vmap(chain))
    key_list = [keys[i] for i in range(args.chains)]  # slicing outside the timed loop
    jax.block_until_ready(key_list)
    single(key_list[0]).block_until_ready()  # warm-up (compile)
    batched(keys).block_until_ready()

    def time_loop():
        t = time.perf_counter()
        outs = [single(k) for k in key_list]
        jax.block_until_ready(outs)
        return time.perf_counter() - t

    def time_vmap():
        t = time.perf_counter()
        batched(keys).block_until_ready()
        return time.perf_counter() - t

    loop = statistics.median(time_loop() for _ in range(args.reps))
    vm = statistics.median(time_vmap() for _ in range(args.reps))
    ratio = loop / vm
    print(json.dumps({
        "benchmark": "copy_head_sgld_chains",
        "chains": args.chains, "steps": steps, "L": L, "V": V, "x64": args.x64,
        "vmapped_s": vm, "baseline_per_chain_loop_s": loop,
        "ratio": ratio, "target_ratio": 20.0, "passed": bool(ratio >= 20.0),
        "chain_steps_per_s_vmapped": args.chains * steps / vm,
    }))


if __name__ == "__main__":
    main()
