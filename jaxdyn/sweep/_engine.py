"""The sweep engine: one compiled, vmapped, device-sharded program over all members.

``run_sweep(fn, grid)`` evaluates ``fn(params, key)`` for every member of ``grid``:

1. one member function is vmapped over a chunk of members and wrapped in
   ``jax.shard_map`` over a one-axis mesh of this process's devices (``"sweep"``), so each
   device runs ``chunk / n_devices`` members;
2. the program is lowered and compiled once; hyperparameters are traced arrays, so every
   chunk (the last one padded) reuses the same executable, whatever the values;
3. chunks are sized to a memory budget (from XLA's own memory analysis of the compiled
   program) or given explicitly;
4. with a checkpoint folder, each finished chunk is written atomically, so a killed sweep
   resumes from its last finished chunk with results identical to an uninterrupted run;
5. with several processes (``jax.distributed``), each process computes its share of the
   chunks on its own devices and every process receives every chunk's results
   (``jaxdyn/sweep/_processes.py``).

Results do not depend on the chunk size, the number of devices or the number of processes:
each member is computed by the same per-member program with its own key
(``jax.random.key(seed)``).

A segmented member (:class:`~jaxdyn.sweep.AbstractSegmentedMember`, e.g. a
:class:`~jaxdyn.sweep.DiffeqMember`) is instead advanced in segments of at most
``segment_steps`` steps, the unfinished members re-batched between segments
(``jaxdyn/sweep/_scheduler.py``), so that a chunk costs about the sum of its members' work
rather than ``width x`` its slowest member. A plain member function whose one solve goes
through :meth:`~jaxdyn.sweep.DiffeqProblem.solve` (the library's simulators) is run the same
way (``jaxdyn/sweep/_diffeq.py``).

Compiled programs come from ``jax.jit``'s own cache (the member, widths and devices are static
arguments), so a second sweep of the same member and shapes compiles nothing;
``SweepResult.n_compilations`` counts the sweep programs XLA compiled during the call, from
``jax.monitoring`` events. The engine records its own events too (``_programs.SWEEP_EVENT``,
``DEVICE_EVENT``, ``HOST_SYNC_EVENT``), which ``jaxdyn run --profile`` reads.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import jax
import numpy as np

from .._affinity import usable_cores
from .._status import status_code, status_name
from ._cache import SweepCache
from ._checkpoints import SweepCheckpoints
from ._chunks import (
    ChunkPlan,
    fit_memory,
    initial_chunk,
    run_plain_chunks,
    run_segmented_chunks,
    slice_members,
    spread_order,
)
from ._diffeq import SolveMember
from ._grid import Grid
from ._options import SweepOptions
from ._processes import process_layout, same_everywhere
from ._programs import (
    SWEEP_EVENT,
    CompileCounter,
    compile_program,
    effective_vmap_width,
    plain_out_shape,
)
from ._result import SweepResult
from ._scheduler import segmented_out_shape, segmented_programs
from ._segmented import AbstractSegmentedMember, unsegmented


def _check_arguments(fn, grid, options, cache, log, name):
    segmented = isinstance(fn, AbstractSegmentedMember)
    if not segmented and not callable(fn):
        raise TypeError(f"run_sweep needs a callable member function, got {type(fn).__name__}")
    if not isinstance(grid, Grid):
        raise TypeError(f"run_sweep needs a jaxdyn.sweep.Grid, got {type(grid).__name__}")
    options = SweepOptions() if options is None else options
    if not isinstance(options, SweepOptions):
        raise TypeError(f"options must be a SweepOptions, got {type(options).__name__}")
    cache = SweepCache.default if cache is None else cache
    if not isinstance(cache, SweepCache):
        raise TypeError(f"cache must be a SweepCache, got {type(cache).__name__}")
    if segmented and options.segment_steps == 0:
        return unsegmented(fn), False, options, cache
    if not segmented and len(grid):
        # A plain member whose one solve is a DiffeqProblem.solve() (the library's
        # simulators) is run in segments (jaxdyn/sweep/_diffeq.py, docs/sweep.md).
        one = {k: v[0] for k, v in grid.params.items()}
        width = effective_vmap_width(options.vmap_width, len(grid))
        plan, new = cache.plan(fn, one, grid.seeds[0], width)
        if plan.reason is None:
            member = SolveMember(plan)
            if options.segment_steps > 0:
                return member, True, options, cache
            return unsegmented(member), False, options, cache
        if new and "calls no" not in plan.reason:
            name_of = getattr(fn, "__qualname__", type(fn).__name__)
            log(f"sweep '{name}': member {name_of} is not run in segments: {plan.reason}")
        return plan.program, False, options, cache  # its plain programs share the plan's trace
    return fn, segmented, options, cache


def _local_devices(options: SweepOptions) -> list:
    devices = jax.local_devices()  # several processes: each runs its own chunks
    if options.devices is not None:
        if options.devices > len(devices):
            raise ValueError(
                f"sweep option devices={options.devices}, but only {len(devices)} available"
            )
        devices = devices[: options.devices]
    return devices


def chunk_threads(devices: list) -> int:
    """How many chunks may run at once in this process: on CPU devices, the cores this
    process may use per device (XLA:CPU runs a program on the calling thread, and the small
    operations of sweep members gain nothing from its thread pool, so one program leaves
    the other cores idle); one elsewhere."""
    if devices[0].platform != "cpu":
        return 1
    return max(1, usable_cores() // len(devices))


def _compiler(fn, segmented, devices, width, options, log, cache):
    """``compile_for(params, seeds) -> (program, compilations done now)`` for a chunk."""
    if segmented:
        return lambda params, seeds: segmented_programs(
            fn, devices[0], width, options, params, seeds, cache
        )
    mesh = jax.sharding.Mesh(np.array(devices), ("sweep",))
    return lambda params, seeds: compile_program(fn, mesh, width, params, seeds, log)


def run_sweep(
    fn: Callable[[dict[str, jax.Array], jax.Array], dict[str, jax.Array]] | AbstractSegmentedMember,
    grid: Grid,
    *,
    name: str = "sweep",
    options: SweepOptions | None = None,
    checkpoint_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    cache: SweepCache | None = None,
    accept: Iterable | None = None,
) -> SweepResult:
    """Evaluate ``fn(params, key)`` for every member of ``grid`` as one compiled program.

    Args:
        fn: pure JAX function of one member's hyperparameters (a dict of traced arrays) and a
            typed PRNG key, returning a dict of arrays; an optional ``"status"`` entry (a
            :class:`jaxdyn.Status` item, e.g. ``Status.promote(sol.result)``) marks numerical
            failures. A NaN in any output of a ``successful`` member marks it
            ``Status.nonfinite``. To differentiate, take gradients *inside* ``fn`` (e.g.
            ``jax.grad`` of a loss of the member's parameters) and return them as outputs.
            Or a segmented member (:class:`AbstractSegmentedMember`, e.g. a
            :class:`DiffeqMember` for adaptive ODE solves), run in segments of
            ``options.segment_steps`` steps so that members of very different cost do not
            wait for each other.
        grid: the members (:class:`Grid`).
        name: the sweep's name; with ``checkpoint_dir`` its chunks are stored under
            ``<checkpoint_dir>/<name>/``.
        options: :class:`SweepOptions` (vector width, chunk size, memory budget, devices,
            segments, progress); defaults if ``None``.
        checkpoint_dir: folder for finished chunks; a second call with the same folder and
            grid resumes from them. ``None`` keeps everything in memory.
        log: called with one-line progress messages (e.g. ``Run.log``).
        accept: statuses besides ``Status.successful`` that are outcomes, not failures
            (e.g. ``Status.blowup`` where blow-up is what is measured): the sweep's last log
            line then says how many members failed, counting these as accepted. ``None``:
            it states the counts by status only (no verdict).
        cache: what the engine remembers between sweeps (:class:`SweepCache`; default
            ``SweepCache.default``).

    Within a run directory use :meth:`jaxdyn.runs.Run.sweep`, which passes the run's options
    and checkpoint folder and records the result. In a multi-process run every process calls
    this with the same arguments and receives the whole result.
    """
    log = log or (lambda msg: None)
    fn, segmented, options, cache = _check_arguments(fn, grid, options, cache, log, name)
    with CompileCounter() as compiles:
        t_start = time.perf_counter()
        devices = _local_devices(options)
        n_members = len(grid)
        n_devices = 1 if segmented else len(devices)  # a segmented chunk runs on one device
        width = effective_vmap_width(options.vmap_width, n_members)
        meta = dict(
            name=name, fingerprint=grid.fingerprint(), n_members=n_members, vmap_width=width
        )
        checkpoints = SweepCheckpoints(checkpoint_dir, name, meta)
        compile_for = _compiler(fn, segmented, devices, width, options, log, cache)
        threads = chunk_threads(devices)
        # A segmented chunk's members share groups, so its size must not depend on the
        # cores; its chunks run at once as far as the memory budget allows (_at_once).
        sizing_threads = 1 if segmented else threads
        program, chunk, _ = _agree_on_chunk(
            compile_for,
            grid,
            checkpoints,
            options,
            n_devices,
            width,
            log,
            name,
            segmented,
            sizing_threads,
        )
        order = spread_order(n_members, chunk) if segmented else None
        ordered = _reordered(grid, order)
        example = slice_members(ordered.params, ordered.seeds, 0, chunk)
        programs = _LazyProgram(compile_for, example, program)

        n_chunks = math.ceil(n_members / chunk)
        log(_plan_message(name, n_members, n_chunks, chunk, n_devices, segmented, options))
        plan = ChunkPlan(checkpoints, n_chunks)
        at_once = _at_once(threads, plan, programs, segmented, options)
        if at_once > 1:
            log(f"sweep '{name}': up to {at_once} chunks at once ({usable_cores()} cores)")
        run_chunks = run_segmented_chunks if segmented else run_plain_chunks
        segments = run_chunks(
            programs.get, plan, ordered, chunk, checkpoints, options.progress, name, log, at_once
        )
        if segmented:
            n_segments, lane_steps = segments
            log(
                f"sweep '{name}': at most {n_segments} segment(s) per chunk, "
                f"{lane_steps} lane-steps"
            )
        out_shape = _out_shape(programs.program, fn, segmented, width, options, example)
        chunk_outputs, chunk_status = plan.gather(out_shape)
        if plan.n_resumed:
            log(f"sweep '{name}': {plan.n_resumed} chunk(s) resumed from checkpoints")
        result = _assemble(
            name,
            grid,
            chunk_outputs,
            chunk_status,
            order,
            chunk=chunk,
            n_devices=n_devices,
            n_compilations=compiles.count,
            wall_time_s=time.perf_counter() - t_start,
        )
    jax.monitoring.record_event_duration_secs(SWEEP_EVENT, result.wall_time_s)
    _log_outcome(result, log, name, accept)
    return result


def _at_once(threads, plan, programs, segmented, options) -> int:
    """Chunks to run at once: ``threads`` where there are several to run and the programs
    hold no blocking kernel (``program.concurrent``); a segmented sweep's chunks were sized
    for one at a time, so as many as the memory budget holds."""
    if threads <= 1 or len(plan.todo) <= 1 or not programs.get().concurrent:
        return 1
    if segmented and programs.get().bytes_per_device > 0:
        fits = int(options.memory_budget_gb * 2**30 // programs.get().bytes_per_device)
        return max(1, min(threads, fits))
    return threads


def _plan_message(name, n_members, n_chunks, chunk, n_devices, segmented, options) -> str:
    n_proc, _ = process_layout()
    return (
        f"sweep '{name}': {n_members} members, {n_chunks} chunk(s) of {chunk} on "
        f"{n_devices} device(s)"
        + (f" x {n_proc} processes" if n_proc > 1 else "")
        + (f", segments of {options.segment_steps} steps" if segmented else "")
    )


def _agree_on_chunk(
    compile_for, grid, checkpoints, options, n_devices, width, log, name, segmented, threads
):
    """``(program or None, chunk size, compilations)``: process 0 sizes the chunks (compiling
    the program), every process receives the size. The others compile only if they get
    chunks, by then usually from the persistent compilation cache."""
    program, chunk, n_compilations = None, 0, 0
    if process_layout()[1] == 0:
        chunk, resumed = initial_chunk(
            checkpoints, options, len(grid), n_devices, width, log, name, segmented, threads
        )
        program, chunk, n_compilations = fit_memory(
            compile_for,
            grid,
            n_devices,
            width,
            chunk,
            bool(options.chunk_size) or resumed,
            options,
            log,
            name,
            threads,
        )
        checkpoints.start(chunk)
    return program, same_everywhere(chunk), n_compilations


def _reordered(grid: Grid, order: np.ndarray | None) -> Grid:
    """The grid with its members in ``order`` (a segmented sweep's spread order, computed from
    the final chunk size, so that a resumed sweep finds the same chunks)."""
    if order is None:
        return grid
    params = {k: v[order] for k, v in grid.params.items()}
    return dataclasses.replace(grid, params=params, seeds=grid.seeds[order])


class _LazyProgram:
    """The chunk program, compiled on first use (a process that sized no chunk)."""

    def __init__(self, compile_for, example, program):
        self.compile_for, self.example, self.program = compile_for, example, program

    def get(self):
        if self.program is None:
            self.program, _ = self.compile_for(*self.example)
        return self.program


def _out_shape(program, fn, segmented, width, options, example):
    """Shapes and dtypes of one chunk's outputs (traced when this process compiled nothing)."""
    if program is not None:
        return program.out_shape
    if segmented:
        return segmented_out_shape(fn, width, options.segment_steps, *example)
    return plain_out_shape(fn, width, *example)


def _log_outcome(result: SweepResult, log, name: str, accept) -> None:
    """The sweep's one line of outcomes: its members counted by status. With ``accept`` (the
    statuses besides ``successful`` that are outcomes, not failures) it is the sweep's status
    line and says how many failed; without, it states the counts only and leaves the verdict
    to the caller (:meth:`jaxdyn.runs.Run.sweep` logs it with what was expected)."""
    counts = result.status_counts()
    line = f"sweep '{name}': {len(result.seeds)} members in {result.wall_time_s:.1f} s"
    if accept is None:
        log(f"{line} ({', '.join(f'{v} {k}' for k, v in counts.items())})")
        return
    accepted = {"successful"} | {status_name(status_code(s)) for s in accept}
    failed = {k: v for k, v in counts.items() if k not in accepted}
    kept = ", ".join(
        f"{v} {k}" + (" (accepted)" if k != "successful" else "")
        for k, v in counts.items()
        if k in accepted
    )
    log(
        f"{line}: {result.n_failed(accept)} failed"
        + (f" ({', '.join(f'{v} {k}' for k, v in failed.items())})" if failed else "")
        + (f"; {kept}" if kept else "")
    )


def _assemble(name, grid, chunk_outputs, chunk_status, order, **stats) -> SweepResult:
    """The chunks' results in grid order (``order``: the member order the chunks used)."""
    n = len(grid)
    outputs = {k: np.concatenate([c[k] for c in chunk_outputs])[:n] for k in chunk_outputs[0]}
    status = np.concatenate(chunk_status)[:n].astype(np.int32)
    if order is not None:
        inverse = np.argsort(order)
        outputs = {k: v[inverse] for k, v in outputs.items()}
        status = status[inverse]
    return SweepResult(
        name=name,
        params={k: np.asarray(v) for k, v in grid.params.items()},
        seeds=grid.seeds,
        outputs=outputs,
        status=status,
        grid_shape=grid.shape,
        axes=grid.axes,
        chunk_size=stats["chunk"],
        n_devices=stats["n_devices"],
        n_compilations=stats["n_compilations"],
        wall_time_s=stats["wall_time_s"],
    )
