"""Benchmark: peak memory of the mean-field velocity of n = 100 000 tokens in d = 8.

The dense evaluation would hold an n x n score matrix (40 GB in float32); the chunked one
(online log-sum-exp over key chunks, query chunks mapped) needs O(chunk^2 + n d). Peak memory
is measured honestly as the maximum resident set size (``ru_maxrss``) of a fresh subprocess
that computes the velocity, minus nothing; a baseline subprocess that only imports jax and
builds the tokens is measured the same way. Also reports XLA's compiled memory analysis.
Prints one JSON object. Target: peak < 4 GB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
import jax, jax.numpy as jnp
from jaxdyn.meanfield.fields import Softmax
n, d, chunk, work = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
key = jax.random.key(0)
k1, k2, k3, k4 = jax.random.split(key, 4)
tokens = jax.random.normal(k1, (n, d), jnp.float32)
Q, K, V = (jax.random.normal(k, (d, d)) for k in (k2, k3, k4))
att = Softmax(Q=Q, K=K, V=V, chunk_size=chunk)
out = {"n": n, "d": d}
if work:
    f = jax.jit(lambda x: att.velocity(x, x))
    compiled = f.lower(tokens).compile()
    mem = compiled.memory_analysis()
    out["xla_temp_bytes"] = int(getattr(mem, "temp_size_in_bytes", -1))
    out["xla_argument_bytes"] = int(getattr(mem, "argument_size_in_bytes", -1))
    out["xla_output_bytes"] = int(getattr(mem, "output_size_in_bytes", -1))
    reps = int(sys.argv[5])
    if reps > 1:
        compiled(tokens).block_until_ready()  # warm-up (the program is already compiled AOT)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        v = compiled(tokens).block_until_ready()
        times.append(time.perf_counter() - t0)
    out["seconds_median"] = sorted(times)[len(times) // 2]
    out["reps"] = reps
    out["finite"] = bool(jnp.all(jnp.isfinite(v)))
else:
    tokens.block_until_ready()
print(json.dumps(out))
"""


def _child(n: int, d: int, chunk: int, work: bool, reps: int = 1) -> tuple[dict, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(n), str(d), str(chunk), "1" if work else "0", str(reps)],
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far (KiB on Linux): run the
    # larger (working) child last so its peak is the one read.
    return json.loads(proc.stdout.strip().splitlines()[-1]), max(after, before) * 1024.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="n = 20 000 instead of 100 000")
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--n", type=int, default=0, help="tokens (default 100 000; GPU: 10^6)")
    args = parser.parse_args()
    n, d = (args.n or (20_000 if args.quick else 100_000)), 8
    base_info, base_peak = _child(n, d, args.chunk, work=False)
    t0 = time.perf_counter()
    # Full size: one timed call (~45 s on 2 CPU cores) after AOT compilation; quick: median of 3.
    info, peak = _child(n, d, args.chunk, work=True, reps=3 if args.quick else 1)
    wall = time.perf_counter() - t0
    target = 4 * 1024**3
    out = {
        "benchmark": "velocity_memory",
        "n": n,
        "d": d,
        "chunk_size": args.chunk,
        "peak_rss_bytes": int(peak),
        "peak_rss_gb": round(peak / 1024**3, 3),
        "baseline_rss_bytes_import_and_tokens": int(base_peak),
        "dense_score_matrix_would_need_gb": round(n * n * 4 / 1024**3, 1),
        "xla_temp_bytes": info.get("xla_temp_bytes"),
        "velocity_seconds_median": round(info["seconds_median"], 3),
        "timed_reps": info["reps"],
        "child_wall_s_incl_compile": round(wall, 2),
        "finite": info["finite"],
        "ratio_peak_to_target": round(peak / target, 4),
        "target": "peak < 4 GB",
        "passed": bool(peak < target and info["finite"]),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
