"""Benchmark: ``analyse_flow`` inside ``run_sweep`` over random chains whose flows take very
different numbers of solver steps (focus_dilution.md, "analyse_flow in a sweep").

The member is written as a user writes it (an ``analyse_flow`` call with a given ``t1``,
default ``SweepOptions``): the engine continues its flow in segments. Against the same member
run as written (``segment_steps=0``: one vmapped solve per group, which costs the group's
width times its slowest flow), in the same process, each cold (first sweep: tracing and
compilation) and warm (the same sweep again). Outputs must agree (same solver steps). Prints one
JSON object of CPU seconds (``time.process_time``: comparable on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import time

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn.gradflow as gf  # noqa: E402
from jaxdyn.sweep import Grid, SweepOptions, run_sweep  # noqa: E402


def grid(members: int, d: int, seed: int) -> Grid:
    """Random chains (Dirichlet rows) and end times log-uniform in [100, 20000]."""
    rng = np.random.default_rng(seed)
    rows = rng.uniform(0.05, 1.0, (members, d, d))
    return Grid.zip(
        {
            "P": rows / rows.sum(-1, keepdims=True),
            "t1": np.exp(rng.uniform(np.log(100.0), np.log(20000.0), members)),
        }
    )


def member(params, key):
    a = gf.analyse_flow(
        gf.MarkovChain(params["P"]), key=key, eps=1e-3, t1=params["t1"], num_saves=100, find_stall=False
    )
    t = a.stages.focus.time
    return {
        "loss_end": a.metrics["loss"][-1],
        "t_focus": jnp.where(jnp.isnan(t), jnp.inf, t),
        "steps": a.num_steps,
        "status": a.status,
    }


def timed(g: Grid, options: SweepOptions) -> tuple[dict, dict]:
    out = {}
    for rep in ("cold", "warm"):
        logged: list[str] = []
        t0 = time.process_time()
        result = run_sweep(member, g, options=options, log=logged.append)
        jax.block_until_ready(result.outputs)
        out[rep] = {
            "cpu_s": round(time.process_time() - t0, 2),
            "compilations": result.n_compilations,
        }
    out["segmented"] = any("segments of" in line for line in logged)
    return out, result.outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=48)
    parser.add_argument("--d", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    g = grid(args.members, args.d, args.seed)
    routed, a = timed(g, SweepOptions())
    plain, b = timed(g, SweepOptions(segment_steps=0))
    np.testing.assert_array_equal(a["steps"], b["steps"])
    steps = a["steps"]
    print(
        json.dumps(
            {
                "members": args.members,
                "d": args.d,
                "steps": {
                    "min": int(steps.min()),
                    "median": float(np.median(steps)),
                    "max": int(steps.max()),
                    "sum": int(steps.sum()),
                },  # fmt: skip
                "segmented": routed,
                "as_written": plain,
                "warm_speedup": round(plain["warm"]["cpu_s"] / routed["warm"]["cpu_s"], 2),
                "outputs_bitwise_equal": all(
                    np.array_equal(a[k], b[k]) for k in ("loss_end", "t_focus")
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
