"""Benchmark: the paper's rank-histogram workload on one core.

Workload: the 1,200 published runs (softmax and L2; V = I and V = G^T G; d = 3, 4, 5; 100
converged runs per panel), i.e. the published draws paired as the published attempt loop pairs
them, with the published steps, tolerances and stopping rule.

- Baseline: ``published_euler_numpy``, jaxdyn's faithful NumPy re-implementation of the
  published projected-Euler loop
  (``jaxdyn.meanfield._published_euler.published_rank_attempts``), run in full:
  it decides the pairing, and the time of each of its attempts is measured. The baseline time
  is the sum over the 1,200 converged runs (``baseline_s``); the whole loop, attempts it set
  aside included, is reported as ``published_loop_s``. The same attempts stepped as stacks
  (``stacked_rank_attempts``) are timed too (``stacked_published_loop_s``) and compared with
  the loop attempt by attempt (``stacked_attempts_identical_to_the_loop``).
- jaxdyn, written as a user writes it in a plain script (``natural_*``): a member function
  calling ``simulate_gaussian(Softmax(Q, K, V) or L2(Q, K, V), zeros(d), Sigma0, t1,
  steady_tol=tol_low, max_steps=200_000)`` with ``simulate_gaussian``'s defaults otherwise
  (the PSD check and the blow-up event included), one ``run_sweep`` per panel, default
  ``SweepOptions``, no set-up call: run in a fresh Python process (``PLAIN_SCRIPT``) that
  imports jax, numpy and jaxdyn only and enables float64. ``cold``: its first pass (the
  process's first compilation; no persistent compilation cache); ``warm``: its second pass.
  ``natural_cold_phases_s``: the cold pass's tracing, lowering, XLA compile and compiled solve
  (jax.monitoring events), and ``natural_ratio_cold_bound_without_xla_compile`` the ratio the
  cold pass would reach if XLA compiled in no time. ``natural_steps_*``: the solver steps the
  runs take, and how many runs need more than ``simulate_gaussian``'s default ``max_steps``
  (4096): what a generous ``max_steps`` costs is those runs' steps, not a buffer.
- jaxdyn, ``pde-ranks``' own member (``rank_member``, a ``DiffeqMember`` on runs padded to
  d = 5, all panels in one sweep): cold and warm as above.
- The same runs solved uninterrupted (``segment_steps=0``, ``rank_member``) must give the same
  limiting ranks (reported with the largest eigenvalue difference, round-off amplified along the
  solve); it is timed again, compiled (``uninterrupted_solve_s_warm``), for what segmenting
  saves on this workload.

The published loop (single-threaded: a Python loop over 5 x 5 NumPy products, BLAS held to
one thread) and ``rank_member`` run on one core (``sched_setaffinity``). The plain script runs
as a user runs it, on all of the machine's cores (``natural_*``, ``natural_cores``; the engine
compiles a sweep's programs concurrently there, while it traces the next one), and again held
to one core (``natural_one_core_*``, reported beside, not judged). A line of progress per
phase goes to stderr; the sweep engine compiles its programs with its own XLA options (no
``XLA_FLAGS``). Prints one
JSON object and writes it to ``benchmarks/results/pde_ranks.json`` (``--runs N``: the first N
converged runs of every panel, to ``pde_ranks_subset.json``; ``--quick``: the first
``--quick-runs`` runs of every panel, nothing written; ``--stacked``: also time the same
attempts stepped as stacks). The JSON states the load average at the start and the end, and
CPU seconds beside the wall times, which load inflates. Targets (the natural member in its
plain script): >= 100x warm, >= 10x cold, judged against ``baseline_s`` (``passed``) and
against the whole published loop (``passed_against_published_loop``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("JAXDYN_CACHE_DIR", "off")
# The machine's cores (a user's plain script runs on all of them); the benchmark itself, the
# published loop included, runs on the first.
MACHINE_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
if MACHINE_CORES:
    os.sched_setaffinity(0, {MACHINE_CORES[0]})

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "pde_ranks.json"
TARGET_WARM, TARGET_COLD = 100.0, 10.0
PLAIN_MAX_STEPS = 200_000

# The rank figure as a user writes it: a fresh process, no set-up call. argv[1]: the panels
# (.npz); prints one JSON line of its two passes.
PLAIN_SCRIPT = r"""
import json, sys, time
import numpy as np
import jax
import jax.numpy as jnp
from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield._closed_forms import limiting_rank
from jaxdyn.meanfield.fields import L2, Softmax
from jaxdyn.sweep import Grid, run_sweep

jax.config.update("jax_enable_x64", True)
panels = np.load(sys.argv[1])
n_panels, max_steps = int(panels["n_panels"]), int(panels["max_steps"])


def member_of(field):
    def member(params, key):
        d = params["Sigma0"].shape[0]
        sol = simulate_gaussian(
            field(params["Q"], params["K"], params["V"]), jnp.zeros(d), params["Sigma0"],
            params["t1"], steady_tol=params["tol"], max_steps=max_steps,
        )
        return {"rank": limiting_rank(sol.final_cov, 0.1), "steps": sol.num_steps,
                "status": sol.status}
    return member


members = {"softmax": member_of(Softmax), "l2": member_of(L2)}
events = {"/jax/core/compile/jaxpr_trace_duration": "tracing",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
          "/jax/core/compile/backend_compile_duration": "xla_compile",
          "/jaxdyn/sweep/device_duration": "compiled_solve"}
phases = dict.fromkeys(events.values(), 0.0)


def on_duration(event, duration, **kwargs):
    if event in events:
        phases[events[event]] += duration


jax.monitoring.register_event_duration_secs_listener(on_duration)


def one_pass():
    ranks, steps = [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n_panels):
        params = {k: panels[f"{i}_{k}"] for k in ("Q", "K", "V", "Sigma0", "t1", "tol")}
        kind = str(panels[f"{i}_attention"])
        result = run_sweep(members[kind], Grid.zip(params), name=f"ranks-{i}")
        ranks.append(result.outputs["rank"])
        steps.append(result.outputs["steps"])
    return (time.perf_counter() - t0, time.process_time() - c0,
            np.concatenate(ranks).tolist(), np.concatenate(steps).tolist())


cold = one_pass()
cold_phases = dict(phases)
warm = one_pass()
print(json.dumps({"cold_s": cold[0], "cold_cpu_s": cold[1], "warm_s": warm[0],
                  "warm_cpu_s": warm[1], "ranks": cold[2], "warm_ranks": warm[2],
                  "steps": warm[3], "cold_phases_s": cold_phases}))
"""


def plain_script(panels, progress, cores) -> dict:
    """The rank figure as a user writes it, in a fresh process (``PLAIN_SCRIPT``) allowed to
    run on ``cores``."""
    import subprocess
    import tempfile

    from jaxdyn.distributed._cores import pinned_to

    arrays: dict = {"n_panels": len(panels), "max_steps": PLAIN_MAX_STEPS}
    from jaxdyn.meanfield._paper_inputs import rank_panels

    for i, ((attention, _, _), (inputs, settings, attempts)) in enumerate(
        zip(rank_panels(), panels, strict=False)
    ):
        ok = attempts.converged
        runs, picks = attempts.run[ok], attempts.attempt[ok]
        arrays |= {
            f"{i}_attention": attention,
            f"{i}_Q": inputs.Q[runs],
            f"{i}_K": inputs.K[runs],
            f"{i}_V": inputs.V[runs],
            f"{i}_Sigma0": inputs.Sigma0[picks],
            f"{i}_t1": np.full(len(runs), settings.max_steps * settings.dt),
            f"{i}_tol": np.full(len(runs), settings.tol_low),
        }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "panels.npz"
        np.savez(path, **arrays)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAXDYN_"))}
        progress(f"plain script on {len(cores)} core(s): a fresh process, cold then warm")
        done = subprocess.run(
            [sys.executable, "-c", PLAIN_SCRIPT, str(path)],
            env=env,
            preexec_fn=pinned_to(frozenset(cores)) if cores else None,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the plain script failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the first runs of every panel")
    parser.add_argument("--quick-runs", type=int, default=5)
    parser.add_argument("--stacked", action="store_true", help="also time the stacked loop")
    parser.add_argument(
        "--runs",
        type=int,
        default=100,
        help="converged runs per panel (100: the published workload; fewer: a subset, "
        "written to results/pde_ranks_subset.json)",
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    start = time.perf_counter()

    def progress(message: str) -> None:
        """One line to stderr per phase (stdout is the JSON): the whole run takes minutes."""
        print(f"[{time.perf_counter() - start:6.0f} s] {message}", file=sys.stderr, flush=True)

    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxdyn import Status
    from jaxdyn.experiments.pde_gaussian.ranks import RanksConfig
    from jaxdyn.meanfield._rank_runs import (
        published_attempts,
        rank_members,
        stacked_published_attempts,
    )
    from jaxdyn.meanfield._ranks import rank_member
    from jaxdyn.sweep import Grid, SweepCache, SweepOptions, run_sweep

    config = RanksConfig(runs=args.quick_runs if args.quick else args.runs)
    t0, c0 = time.perf_counter(), time.process_time()
    panels = published_attempts(
        config.dims, config.runs, progress
    )  # the published loop, every attempt timed
    loop_s, loop_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    progress(f"published loop: {loop_s:.1f} s")
    stacked_s = stacked_cpu_s = stacked_same = None
    if args.stacked:  # the same attempts stepped as stacks (stacked_rank_attempts; same bits)
        t0, c0 = time.perf_counter(), time.process_time()
        stacked = stacked_published_attempts(config.dims, config.runs, progress)
        stacked_s, stacked_cpu_s = time.perf_counter() - t0, time.process_time() - c0
        progress(f"stacked loop: {stacked_s:.1f} s")
        stacked_same = all(
            np.array_equal(getattr(a, k), getattr(b, k))
            for (_, _, a), (_, _, b) in zip(panels, stacked, strict=True)
            for k in ("run", "attempt", "status", "rank", "steps", "projected")
        )
    converged = np.concatenate([att.converged for _, _, att in panels])
    baseline_s = float(np.sum(np.concatenate([att.seconds for _, _, att in panels])[converged]))
    steps = np.concatenate([att.steps for _, _, att in panels])[converged]

    plain = plain_script(panels, progress, MACHINE_CORES)
    one_core = plain_script(panels, progress, MACHINE_CORES[:1])
    natural_cold_s, natural_warm_s = plain["cold_s"], plain["warm_s"]
    natural_ranks = np.asarray(plain["ranks"])
    natural_warm_ranks = np.asarray(plain["warm_ranks"])
    natural_steps = np.asarray(plain["steps"])
    phases = plain["cold_phases_s"]
    progress(f"natural member: {natural_cold_s:.1f} s cold, {natural_warm_s:.2f} s warm")
    # CPU seconds: the baseline's share of the published loop's CPU time (its converged runs)
    baseline_cpu_s = loop_cpu_s * baseline_s / loop_s

    params = rank_members(config.dims, panels)
    runs = {k: v[converged] for k, v in params.items()}
    member = rank_member(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)
    SweepCache.default.clear()
    jax.clear_caches()
    t0 = time.perf_counter()
    cold = run_sweep(member, Grid.zip(runs), name="ranks")
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = run_sweep(member, Grid.zip(runs), name="ranks")
    warm_s = time.perf_counter() - t0
    progress(f"rank_member: {cold_s:.1f} s cold, {warm_s:.2f} s warm; uninterrupted next")
    same = bool(np.array_equal(cold.outputs["rank"], warm.outputs["rank"]))
    # The uninterrupted solve (every group of vmap_width runs until its slowest member is
    # done): the segmented sweep must give the same limiting ranks.
    t0 = time.perf_counter()
    whole = run_sweep(member, Grid.zip(runs), name="ranks", options=SweepOptions(segment_steps=0))
    whole_s = time.perf_counter() - t0
    t0 = time.perf_counter()  # again, compiled: what segmenting saves on this workload
    run_sweep(member, Grid.zip(runs), name="ranks", options=SweepOptions(segment_steps=0))
    whole_warm_s = time.perf_counter() - t0
    eig_gap = np.abs(whole.outputs["eigenvalues"] - warm.outputs["eigenvalues"])
    euler_rank = np.concatenate([att.rank for _, _, att in panels])[converged]
    out = {
        "benchmark": "pde_ranks_published_workload",
        "runs": int(converged.sum()),
        "baseline": "published_euler_numpy: NumPy re-implementation of the published "
        "projected-Euler loop, run in full, each attempt timed",
        "baseline_s": round(baseline_s, 2),
        "baseline_extrapolated": False,
        "baseline_euler_steps": int(steps.sum()),
        "published_loop_s": round(loop_s, 2),
        "published_loop_attempts": int(converged.size),
        "stacked_published_loop_s": None if stacked_s is None else round(stacked_s, 2),
        "stacked_published_loop_cpu_s": None if stacked_s is None else round(stacked_cpu_s, 2),
        "stacked_attempts_identical_to_the_loop": stacked_same,
        "natural": "a plain script in a fresh process, no set-up call: a member calling "
        "simulate_gaussian(Softmax or L2(Q, K, V), zeros(d), Sigma0, t1, steady_tol=tol_low, "
        "max_steps=200_000) with simulate_gaussian's defaults otherwise (UnrolledERK(Tsit5()), "
        "rtol=1e-8, atol=1e-10, psd_tol=1e-6, blowup_trace=1e6), one run_sweep per panel, "
        "default SweepOptions",
        "natural_cold_s": round(natural_cold_s, 2),
        "natural_warm_s": round(natural_warm_s, 2),
        "natural_ratio_warm": round(baseline_s / natural_warm_s, 1),
        "natural_ratio_cold": round(baseline_s / natural_cold_s, 1),
        # against the whole published loop (its set-aside attempts included): what a user of
        # the published code pays for the figure
        "natural_ratio_warm_vs_published_loop": round(loop_s / natural_warm_s, 1),
        "natural_ratio_cold_vs_published_loop": round(loop_s / natural_cold_s, 1),
        "natural_cores": len(MACHINE_CORES) or None,
        # the same plain script held to one core, as the published loop runs
        "natural_one_core_cold_s": round(one_core["cold_s"], 2),
        "natural_one_core_warm_s": round(one_core["warm_s"], 2),
        "natural_one_core_ratio_cold_vs_published_loop": round(loop_s / one_core["cold_s"], 1),
        "natural_one_core_ratio_warm_vs_published_loop": round(loop_s / one_core["warm_s"], 1),
        "natural_one_core_ranks_identical": bool(
            np.array_equal(natural_ranks, np.asarray(one_core["ranks"]))
        ),
        "published_loop_cpu_s": round(loop_cpu_s, 2),
        "baseline_cpu_s": round(baseline_cpu_s, 2),
        "natural_cold_cpu_s": round(plain["cold_cpu_s"], 2),
        "natural_warm_cpu_s": round(plain["warm_cpu_s"], 2),
        "natural_ratio_warm_cpu": round(baseline_cpu_s / plain["warm_cpu_s"], 1),
        "natural_ratio_cold_cpu": round(baseline_cpu_s / plain["cold_cpu_s"], 1),
        "natural_sweeps": len(panels),
        "natural_steps_total": int(natural_steps.sum()),
        "natural_steps_max": int(natural_steps.max()),
        "natural_runs_over_4096_steps": int(np.sum(natural_steps > 4096)),
        "natural_steps_of_runs_over_4096": int(natural_steps[natural_steps > 4096].sum()),
        # what a first pass pays besides the solve: tracing and lowering are never cached across
        # processes, so they and the solve bound the cold ratio whatever XLA's compile costs
        "natural_cold_phases_s": {k: round(v, 2) for k, v in phases.items()},
        "natural_ratio_cold_bound_without_xla_compile": round(
            baseline_s / (phases["tracing"] + phases["lowering"] + phases["compiled_solve"]), 1
        ),
        "natural_ranks_differing_from_rank_member": int(
            np.sum(natural_ranks != warm.outputs["rank"])
        ),
        "natural_ranks_identical_to_rank_member": bool(
            np.array_equal(natural_ranks, warm.outputs["rank"])
        ),
        "natural_cold_and_warm_ranks_identical": bool(
            np.array_equal(natural_ranks, natural_warm_ranks)
        ),
        "jaxdyn": "rank_member (DiffeqMember, padded to d = 5), one sweep",
        "jaxdyn_cold_s": round(cold_s, 2),
        "jaxdyn_warm_s": round(warm_s, 2),
        "jaxdyn_solver_steps": int(np.sum(warm.outputs["num_steps"])),
        "jaxdyn_failed": int(warm.n_failed(accept=[Status.steady_state, Status.blowup])),
        "cold_and_warm_ranks_identical": same,
        "uninterrupted_solve_s_cold": round(whole_s, 2),
        "uninterrupted_solve_s_warm": round(whole_warm_s, 2),
        "segmented_vs_uninterrupted_warm": round(whole_warm_s / warm_s, 1),
        "ranks_identical_to_uninterrupted_solve": bool(
            np.array_equal(whole.outputs["rank"], warm.outputs["rank"])
        ),
        "max_eigenvalue_difference_to_uninterrupted": float(eig_gap.max()),
        "ranks_differing_from_published_euler": int(np.sum(warm.outputs["rank"] != euler_rank)),
        "ratio_warm": round(baseline_s / warm_s, 1),
        "ratio_cold": round(baseline_s / cold_s, 1),
        "target_warm": TARGET_WARM,
        "target_cold": TARGET_COLD,
        "passed": bool(
            baseline_s / natural_warm_s >= TARGET_WARM
            and baseline_s / natural_cold_s >= TARGET_COLD
            and np.array_equal(whole.outputs["rank"], warm.outputs["rank"])
        ),
        "passed_against_published_loop": bool(
            loop_s / natural_warm_s >= TARGET_WARM and loop_s / natural_cold_s >= TARGET_COLD
        ),
        "cores": 1,  # the published loop and rank_member; the plain script: natural_cores
        "runs_per_panel": config.runs,
        "subset": config.runs != 100,
        "load_average_1_5_15min_at_start": [round(x, 1) for x in load_start],
        "load_average_1_5_15min_at_end": [round(x, 1) for x in os.getloadavg()],
        "quick": bool(args.quick),
    }
    line = json.dumps(out)
    if not args.quick:
        from jaxdyn._atomic import atomic_write_text

        path = RESULTS if config.runs == 100 else RESULTS.with_name("pde_ranks_subset.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, line + "\n")
    print(line)


def programs_by_kind(per_program: list[dict]) -> dict:
    """``{program name: [count, compile seconds]}`` of the sweep programs compiled."""
    kinds: dict = {}
    for p in per_program:
        if p["program"].startswith("_sweep_"):
            count, total = kinds.get(p["program"], (0, 0.0))
            kinds[p["program"]] = (count + 1, round(total + p["seconds"], 3))
    return {k: list(v) for k, v in kinds.items()}


def natural_members(config) -> dict:
    """The member functions a user writes, one per attention (created once: a second pass
    with new function objects would be a new program for jit's cache, and compile again)."""
    import jax.numpy as jnp

    from jaxdyn.meanfield import simulate_gaussian
    from jaxdyn.meanfield._closed_forms import limiting_rank
    from jaxdyn.meanfield.fields import L2, Softmax

    def member_of(field_class):
        def member(params, key):
            d = params["Sigma0"].shape[0]
            sol = simulate_gaussian(
                field_class(params["Q"], params["K"], params["V"]),
                jnp.zeros(d),
                params["Sigma0"],
                params["t1"],
                steady_tol=params["tol_low"],
                blowup_trace=params["tol_high"],
                psd_tol=None,
                rtol=config.rtol,
                atol=config.atol,
                max_steps=config.max_steps,
            )
            return {"rank": limiting_rank(sol.final_cov, 0.1), "status": sol.status}

        return member

    return {"softmax": member_of(Softmax), "l2": member_of(L2)}


# The phases of a cold pass (jax.monitoring events): what a first pass must pay besides the solve
_PHASE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "tracing",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
    "/jax/core/compile/backend_compile_duration": "xla_compile",
    "/jaxdyn/sweep/device_duration": "compiled_solve",
}


def natural_pass(panels, config, members, *, cold: bool, options=None, phases=None):
    """The rank runs as a user writes them: ``(seconds, ranks in run order, compile and trace
    seconds per program)``; one ``run_sweep`` per panel with default options (``options``:
    other ``SweepOptions``, for ``probe_narrow_after.py``). A cold pass fills ``phases`` (a
    dict) with the seconds of every program's tracing, lowering and XLA compilation and of the
    compiled solve (waiting for it included), summed over the pass."""
    import jax

    from jaxdyn.meanfield._paper_inputs import rank_panels
    from jaxdyn.sweep import Grid, SweepCache, run_sweep

    compile_s: dict[str, list[float]] = {}
    trace_s: dict[str, list[float]] = {}
    if phases is not None:
        phases.update(dict.fromkeys(_PHASE_EVENTS.values(), 0.0))

    def on_duration(event, duration, **kwargs):
        if phases is not None and event in _PHASE_EVENTS:
            phases[_PHASE_EVENTS[event]] += duration
        name = str(kwargs.get("fun_name"))
        if event == "/jax/core/compile/backend_compile_duration":
            compile_s.setdefault(name.removeprefix("jit(").removesuffix(")"), []).append(
                round(duration, 3)
            )
        elif event == "/jax/core/compile/jaxpr_trace_duration" and name.startswith("_sweep_"):
            trace_s.setdefault(name, []).append(round(duration, 3))

    if cold:
        SweepCache.default.clear()
        jax.clear_caches()
        jax.monitoring.register_event_duration_secs_listener(on_duration)
    ranks = []
    t0 = time.perf_counter()
    for (attention, _, _), (inputs, settings, attempts) in zip(
        rank_panels(config.dims), panels, strict=True
    ):
        ok = attempts.converged
        runs, picks = attempts.run[ok], attempts.attempt[ok]
        n = len(runs)
        params = {
            "Q": inputs.Q[runs],
            "K": inputs.K[runs],
            "V": inputs.V[runs],
            "Sigma0": inputs.Sigma0[picks],
            "t1": np.full(n, settings.max_steps * settings.dt),
            "tol_low": np.full(n, settings.tol_low),
            "tol_high": np.full(n, settings.tol_high),
        }
        result = run_sweep(members[attention], Grid.zip(params), name="ranks", options=options)
        ranks.append(result.outputs["rank"])
    seconds = time.perf_counter() - t0
    if cold:
        with contextlib.suppress(AttributeError, ValueError):
            jax.monitoring.unregister_event_duration_listener(on_duration)
    per_program = []
    for name, times in compile_s.items():
        traces = trace_s.get(name, [])
        for i, compile_seconds in enumerate(times):
            entry = {"program": name, "seconds": compile_seconds}
            if i < len(traces):
                entry["trace_s"] = traces[i]
            per_program.append(entry)
    return seconds, np.concatenate(ranks), per_program


if __name__ == "__main__":
    sys.exit(main())
