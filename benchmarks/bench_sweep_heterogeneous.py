"""Sweep engine on members of very different cost: segmented vs unsegmented, same width.

256 adaptive solves (Tsit5, PID rtol 1e-8, float64) of a 4 x 4 Gaussian-closure-like flow,
``dm/dt = B m``, ``dS/dt = B S + S B^T`` with ``B = w J + 0.05 (softmax(Q S) - I)`` (``J`` a
fixed rotation generator, ``Q`` random per member), on [0, 10]: the cost of one step is that
of the Transformer PDE's covariance ODEs, and the rotation rate ``w`` sets the step count
(about 205 w). Three step-count mixes:

- ``rank_like`` (the headline): modelled on the Transformer PDE rank-histogram workload
  (per setting a median of 30-150 steps, the slowest 3,000-20,000): 95% log-normal around
  100 steps, 5% log-uniform on 3,000-20,000, and one member each at 30 and 20,000 steps;
- ``log_uniform``: log-uniform on 30-20,000 (many costly members: less to gain);
- ``uniform_cheap``: every member about 100 steps (segmenting must cost nothing here).

For each mix, the same ``DiffeqMember`` runs unsegmented (``segment_steps=0``: every group of
``vmap_width`` members is one vmapped solve that runs until its slowest member is done, the
engine's plain path) and segmented (default options), both at ``vmap_width=32`` on one
device, each compiled first and then timed warm (median of 3 runs); the cold (compile
included) times are reported too. The same sweep with three group widths
(``segment_widths=3``: 4, 8 and 32) is timed too (reported, not the headline). The results
of all three must be bitwise identical.

    python benchmarks/bench_sweep_heterogeneous.py [--quick]

prints one JSON object and writes it to ``benchmarks/results/sweep_heterogeneous.json``.
"""

import argparse
import json
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status
from jaxdyn.sweep import DiffeqMember, DiffeqProblem, Grid, SweepOptions, run_sweep

# Calibration of the workload (not a threshold): num_steps ~ 205 w for w > 0.3 at these
# tolerances; the step counts actually taken are reported.
STEPS_PER_UNIT_OMEGA = 205.0
TARGET = 10.0
REPEATS = 3  # warm timings: median of this many runs
ROTATION = jnp.array([[0, 1, 0, 0], [-1, 0, 0, 0], [0, 0, 0, 2], [0, 0, -2, 0]], float) / 2


def field(t, y, args):
    mean, cov = y
    omega, Q = args
    B = omega * ROTATION + 0.05 * (jax.nn.softmax(Q @ cov, axis=-1) - jnp.eye(4))
    return B @ mean, B @ cov + cov @ B.T


def problem(params, key):
    kq, kc = jax.random.split(key)
    C = jax.random.normal(kc, (4, 4))
    return DiffeqProblem(
        terms=diffrax.ODETerm(field),
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=10.0,
        dt0=None,
        y0=(jnp.ones(4), C @ C.T + jnp.eye(4)),
        args=(params["omega"], 0.5 * jax.random.normal(kq, (4, 4))),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        max_steps=40_000,
    )


def outputs(params, problem, sol):
    mean, cov = sol.ys
    return {
        "mean": mean[-1],
        "cov": cov[-1],
        "num_steps": sol.stats["num_steps"],
        "status": Status.promote(sol.result),
    }


def step_targets(mix: str, n: int, rng) -> np.ndarray:
    if mix == "rank_like":
        n_tail = n // 20
        body = 10 ** rng.normal(2.0, 0.3, n - n_tail)
        tail = 10 ** rng.uniform(np.log10(3_000), np.log10(20_000), n_tail)
        steps = np.concatenate([body, tail])
        steps[0], steps[-1] = 30, 20_000
    elif mix == "log_uniform":
        steps = 10 ** rng.uniform(np.log10(30), np.log10(20_000), n)
        steps[0], steps[-1] = 30, 20_000
    else:
        steps = np.full(n, 100.0)
    return rng.permutation(np.clip(steps, 30, 20_000))


def timed(member, grid, options, repeats=REPEATS):
    """``(result, compilations, cold seconds, warm seconds)``; warm is the median of
    ``repeats`` runs."""
    t0 = time.perf_counter()
    result = run_sweep(member, grid, options=options)
    cold, compilations = time.perf_counter() - t0, result.n_compilations
    warm = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run_sweep(member, grid, options=options)
        warm.append(time.perf_counter() - t0)
    return result, compilations, cold, float(np.median(warm))


def _forget_compiled() -> None:
    """Cold timings: drop JAX's and the sweep engine's in-memory compiled programs."""
    from jaxdyn.sweep import _programs, _scheduler

    _programs._COMPILED.clear()
    _scheduler._COMPILED.clear()
    jax.clear_caches()


def _lane_steps(member) -> int:
    """Lanes x steps the device ran in the last segmented chunk of ``member`` (steps taken by
    the members / this = the share of the vector lanes that did useful work)."""
    from jaxdyn.sweep import _scheduler

    programs = [p for key, p in _scheduler._COMPILED.items() if key[0] is member]
    return int(sum(p.lane_steps for p in programs))


def measure(mix: str, n: int, seed: int) -> dict:
    _forget_compiled()
    rng = np.random.default_rng(seed)
    omega = step_targets(mix, n, rng) / STEPS_PER_UNIT_OMEGA
    grid = Grid.zip({"omega": omega})
    member = DiffeqMember(problem, outputs)
    plain, plain_compiled, plain_cold, plain_warm = timed(
        member, grid, SweepOptions(segment_steps=0)
    )
    seg, seg_compiled, seg_cold, seg_warm = timed(member, grid, SweepOptions())
    seg_lane_steps = _lane_steps(member)
    _forget_compiled()  # the three-width sweep compiles its own programs, cold
    three, three_compiled, three_cold, three_warm = timed(
        member, grid, SweepOptions(segment_widths=3)
    )
    identical = all(
        bool(
            np.array_equal(plain.status, other.status)
            and all(np.array_equal(plain.outputs[k], other.outputs[k]) for k in plain.outputs)
        )
        for other in (seg, three)
    )
    steps = plain.outputs["num_steps"]
    lane_steps = _lane_steps(member)  # of the last segmented sweep (three widths)
    if seg.chunk_size < n:
        raise RuntimeError("lane-step accounting below assumes the sweep is one chunk")
    return {
        "members": n,
        "steps_min": int(steps.min()),
        "steps_median": float(np.median(steps)),
        "steps_p90": float(np.percentile(steps, 90)),
        "steps_max": int(steps.max()),
        "steps_total": int(steps.sum()),
        "unsegmented_warm_s": round(plain_warm, 3),
        "segmented_warm_s": round(seg_warm, 3),
        "speedup_warm": round(plain_warm / seg_warm, 2),
        "unsegmented_cold_s": round(plain_cold, 3),
        "segmented_cold_s": round(seg_cold, 3),
        "speedup_cold": round(plain_cold / seg_cold, 2),
        "segmented_lane_steps": seg_lane_steps,
        "segmented_lane_efficiency": round(float(steps.sum()) / seg_lane_steps, 3),
        "three_widths_warm_s": round(three_warm, 3),
        "three_widths_speedup_warm": round(plain_warm / three_warm, 2),
        "three_widths_cold_s": round(three_cold, 3),
        "compilations": {
            "unsegmented": plain_compiled,
            "segmented": seg_compiled,
            "three_widths": three_compiled,
        },
        "three_widths_lane_steps": lane_steps,
        "three_widths_lane_efficiency": round(float(steps.sum()) / lane_steps, 3),
        "identical": identical,
        "all_successful": bool(np.all(seg.ok())),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="64 members per mix")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    n = 64 if args.quick else 256
    mixes = {
        mix: measure(mix, n, seed)
        for seed, mix in enumerate(["rank_like", "log_uniform", "uniform_cheap"])
    }
    head = mixes["rank_like"]
    report = {
        "benchmark": "sweep_heterogeneous",
        "device": str(jax.devices()[0]),
        "vmap_width": SweepOptions().vmap_width,
        "segment_steps": SweepOptions().segment_steps,
        "baseline": "the same DiffeqMember unsegmented (segment_steps=0), same width, same run",
        "mixes": mixes,
        "speedup": head["speedup_warm"],
        "target_speedup": TARGET,
        "passed": bool(
            head["speedup_warm"] >= TARGET
            and all(m["identical"] for m in mixes.values())
            and mixes["uniform_cheap"]["speedup_warm"] >= 0.8
        ),
    }
    line = json.dumps(report)
    if not args.quick:  # the stored result is the full-size one
        from jaxdyn.runs import atomic_write_text

        out = Path(__file__).resolve().parent / "results" / "sweep_heterogeneous.json"
        out.parent.mkdir(exist_ok=True)
        atomic_write_text(out, json.dumps(report, indent=1) + "\n")
    print(line)


if __name__ == "__main__":
    main()
