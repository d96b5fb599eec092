"""Benchmark: the paper's rank-histogram workload on one core.

Workload: the 1,200 published runs (softmax and L2; V = I and V = G^T G; d = 3, 4, 5; 100
converged runs per panel), i.e. the published draws paired as the published attempt loop pairs
them, with the published steps, tolerances and stopping rule.

- Baseline: ``published_euler_numpy``, jaxdyn's faithful NumPy re-implementation of the
  published projected-Euler loop
  (``jaxdyn.experiments.pde_gaussian.published_rank_attempts``), run in full:
  it decides the pairing, and the time of each of its attempts is measured. The baseline time
  is the sum over the 1,200 converged runs (``baseline_s``); the whole loop, attempts it set
  aside included, is reported as ``published_loop_s``. The same attempts stepped as stacks
  (``stacked_rank_attempts``) are timed too (``stacked_published_loop_s``) and compared with
  the loop attempt by attempt (``stacked_attempts_identical_to_the_loop``).
- jaxdyn, written as a user writes it (``natural_*``): a member function calling
  ``simulate_gaussian(Softmax(Q, K, V) or L2(Q, K, V), zeros(d), Sigma0, t1,
  steady_tol=tol_low, blowup_trace=tol_high, ...)``, one ``run_sweep`` per panel, default
  ``SweepOptions`` (the engine segments the simulator's solve by itself). ``cold``: first pass,
  compilation included (persistent compilation cache off, jax's caches cleared); ``warm``: a
  second pass with the compiled programs in jit's cache. ``compile_s_per_program``: each
  compiled program's XLA compile time in the cold pass (jax.monitoring events);
  ``natural_cold_phases_s``: the cold pass's tracing, lowering, XLA compile and compiled
  solve, and ``natural_ratio_cold_bound_without_xla_compile`` the ratio the cold pass would
  reach if XLA compiled in no time (a first pass in a new process always traces and lowers).
- jaxdyn, ``pde-ranks``' own member (``rank_member``, a ``DiffeqMember`` on runs padded to
  d = 5, all panels in one sweep): cold and warm as above.
- The same runs solved uninterrupted (``segment_steps=0``, ``rank_member``) must give the same
  limiting ranks (reported with the largest eigenvalue difference, round-off amplified along the
  solve); it is timed again, compiled (``uninterrupted_solve_s_warm``), for what segmenting
  saves on this workload.

Everything runs on one core (``sched_setaffinity``, single-threaded BLAS, jaxdyn's XLA:CPU
options with the elemental emitters: :func:`jaxdyn.sweep.xla_cpu_setup`, recorded as
``xla_flags``), with a
line of progress per phase on stderr. Prints one JSON object and writes it to
``benchmarks/results/pde_ranks.json`` (``--runs N``, fewer than the published 100 converged
runs per panel: the first N of every panel, to
``pde_ranks_subset.json``, for a loaded machine where the published loop takes too long; the
ratios then hold compilation against a smaller baseline). ``--quick``: the first
``--quick-runs`` runs of every panel, nothing written. The JSON states the load average at the
start and the end, and CPU seconds (``*_cpu_s``; ``baseline_cpu_s`` is the converged runs' share
of the published loop's CPU time) beside the wall times, which load inflates. Targets (the
natural member): >= 100x warm, >= 25x cold.
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
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

import numpy as np  # noqa: E402

from jaxdyn.sweep import xla_cpu_setup  # noqa: E402

# jaxdyn's XLA:CPU options (single-threaded matrix kernels, elemental emitters), as the jaxdyn
# command line sets them for --quick runs and as docs/scaling.md tells a script of small-state
# solves (compile-bound; they run as fast) to set them
xla_cpu_setup(elemental_emitters=True)

RESULTS = Path(__file__).resolve().parent / "results" / "pde_ranks.json"
TARGET_WARM, TARGET_COLD = 100.0, 25.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="the first runs of every panel")
    parser.add_argument("--quick-runs", type=int, default=5)
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
    from jaxdyn.experiments.pde_gaussian import rank_member
    from jaxdyn.experiments.pde_gaussian.ranks import (
        RanksConfig,
        published_attempts,
        rank_members,
        stacked_published_attempts,
    )
    from jaxdyn.sweep import Grid, SweepOptions, clear_caches, run_sweep

    config = RanksConfig(runs=args.quick_runs if args.quick else args.runs)
    t0, c0 = time.perf_counter(), time.process_time()
    panels = published_attempts(config, progress)  # the published loop, every attempt timed
    loop_s, loop_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    progress(f"published loop: {loop_s:.1f} s; the same attempts as stacks next")
    # The same attempts stepped as stacks (stacked_rank_attempts; the same bits)
    t0, c0 = time.perf_counter(), time.process_time()
    stacked = stacked_published_attempts(config, progress)
    stacked_s, stacked_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    progress(f"stacked loop: {stacked_s:.1f} s; the natural member next (cold, then warm)")
    stacked_same = all(
        np.array_equal(getattr(a, k), getattr(b, k))
        for (_, _, a), (_, _, b) in zip(panels, stacked, strict=True)
        for k in ("run", "attempt", "status", "rank", "steps", "projected")
    )
    converged = np.concatenate([att.converged for _, _, att in panels])
    baseline_s = float(np.sum(np.concatenate([att.seconds for _, _, att in panels])[converged]))
    steps = np.concatenate([att.steps for _, _, att in panels])[converged]

    members = natural_members(config)
    c0 = time.process_time()
    phases: dict[str, float] = {}
    natural_cold_s, natural_ranks, per_program = natural_pass(
        panels, config, members, cold=True, phases=phases
    )
    c1 = time.process_time()
    natural_warm_s, natural_warm_ranks, _ = natural_pass(panels, config, members, cold=False)
    natural_cpu_s = (c1 - c0, time.process_time() - c1)
    progress(f"natural member: {natural_cold_s:.1f} s cold, {natural_warm_s:.2f} s warm")
    # CPU seconds: the baseline's share of the published loop's CPU time (its converged runs)
    baseline_cpu_s = loop_cpu_s * baseline_s / loop_s

    params = rank_members(config, panels)
    runs = {k: v[converged] for k, v in params.items()}
    member = rank_member(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)
    clear_caches()
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
        "stacked_published_loop_s": round(stacked_s, 2),
        "stacked_published_loop_cpu_s": round(stacked_cpu_s, 2),
        "stacked_attempts_identical_to_the_loop": bool(stacked_same),
        "natural": "a member calling simulate_gaussian, one run_sweep per panel, default "
        "SweepOptions and solver (UnrolledERK(Tsit5()), rtol=1e-8, atol=1e-10)",
        "natural_cold_s": round(natural_cold_s, 2),
        "natural_warm_s": round(natural_warm_s, 2),
        "natural_ratio_warm": round(baseline_s / natural_warm_s, 1),
        "natural_ratio_cold": round(baseline_s / natural_cold_s, 1),
        "published_loop_cpu_s": round(loop_cpu_s, 2),
        "baseline_cpu_s": round(baseline_cpu_s, 2),
        "natural_cold_cpu_s": round(natural_cpu_s[0], 2),
        "natural_warm_cpu_s": round(natural_cpu_s[1], 2),
        "natural_ratio_warm_cpu": round(baseline_cpu_s / natural_cpu_s[1], 1),
        "natural_ratio_cold_cpu": round(baseline_cpu_s / natural_cpu_s[0], 1),
        "natural_sweeps": len(panels),
        "natural_compilations": len(per_program),
        "natural_programs_by_kind": programs_by_kind(per_program),
        "natural_compile_s": round(sum(p["seconds"] for p in per_program), 2),
        "natural_trace_s": round(sum(p.get("trace_s", 0.0) for p in per_program), 2),
        "compile_s_per_program": per_program,
        # what a first pass pays besides the solve: tracing and lowering are never cached across
        # processes, so they and the solve bound the cold ratio whatever XLA's compile costs
        "natural_cold_phases_s": {k: round(v, 2) for k, v in phases.items()},
        "natural_ratio_cold_bound_without_xla_compile": round(
            baseline_s / (phases["tracing"] + phases["lowering"] + phases["compiled_solve"]), 1
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
            and np.array_equal(natural_ranks, warm.outputs["rank"])
        ),
        "cores": 1,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
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

    from jaxdyn.meanfield import limiting_rank, simulate_gaussian
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

    from jaxdyn.experiments.pde_gaussian import rank_panels
    from jaxdyn.sweep import Grid, clear_caches, run_sweep

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
        clear_caches()
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
