"""Benchmark: the symmetry-breaking delta sweep as one run_sweep program (delta traced, one
compilation) vs a Python loop that bakes each delta in as a Python float (one compilation per
value), same flows (focus_dilution.md, stage 4). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxdyn.gradflow as gf  # noqa: E402
from jaxdyn.gradflow import _flow, _markov, _model  # noqa: E402
from jaxdyn._atomic import atomic_write_text  # noqa: E402
from jaxdyn.sweep import Grid, run_sweep  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 deltas, t1 = 200")
    args = ap.parse_args()
    deltas = [0.0, 0.01, 0.02] if args.quick else [0.0, 0.005, 0.01, 0.02, 0.03, 0.04]
    t1 = 200.0 if args.quick else 600.0
    ts = _flow.log_time_grid(t1, 60)
    c = jnp.asarray(_markov.default_direction(4))

    def final_loss(delta, key):
        pi = gf.symmetry_breaking_pi(0.75, delta, c)
        P = _markov.paper_transition(pi, 0.5)
        sol = gf.population_flow(gf.init_transformer(key, 4, 6, 6, 1e-3), gf.MarkovChain(P, pi), ts)
        return _model._population_loss(
            jax.tree_util.tree_map(lambda x: x[-1], sol.models), pi, P
        ), sol.status

    def member(params, key):
        loss, status = final_loss(params["delta"], key)
        return {"loss": loss, "status": status}

    t0 = time.perf_counter()
    res = run_sweep(member, Grid.product({"delta": deltas}, seeds=[0]), name="delta")
    t_sweep = time.perf_counter() - t0

    t0 = time.perf_counter()
    loop = []
    for dl in deltas:  # the delta value is a compile-time constant: one compilation each
        f = jax.jit(lambda key, dl=dl: final_loss(dl, key))
        loop.append(float(f(jax.random.key(0))[0]))
    t_loop = time.perf_counter() - t0
    diff = float(np.max(np.abs(np.asarray(res.outputs["loss"]) - np.asarray(loop))))
    result = json.dumps(
        {
            "benchmark": "focus_dilution_delta_sweep",
            "deltas": deltas,
            "t1": t1,
            "sweep_seconds_including_compile": t_sweep,
            "sweep_compilations": int(res.n_compilations),
            "baseline": "Python loop, delta baked in as a float (recompiles per value)",
            "baseline_seconds_including_compiles": t_loop,
            "baseline_compilations": len(deltas),
            "max_abs_difference_final_loss": diff,
            "ratio": t_loop / t_sweep,
            "target": "sweep compiles once",
            "passed": bool(res.n_compilations == 1 and diff < 1e-8),
        }
    )
    print(result)
    out = Path(__file__).resolve().parent / "results" / "focus_dilution_delta.json"
    atomic_write_text(out, result + "\n")


if __name__ == "__main__":
    main()
