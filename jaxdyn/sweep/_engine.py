"""The sweep engine: one compiled, vmapped, device-sharded program over all members.

``run_sweep(fn, grid)`` evaluates ``fn(params, key)`` for every member of ``grid``:

1. one member function is vmapped over a chunk of members and wrapped in
   ``jax.shard_map`` over a one-axis device mesh (``"sweep"``), so each device runs
   ``chunk / n_devices`` members;
2. the program is lowered and compiled once; hyperparameters are traced arrays, so every
   chunk (the last one padded) reuses the same executable, whatever the values;
3. chunks are sized to a memory budget (from XLA's own memory analysis of the compiled
   program) or given explicitly;
4. with a checkpoint folder, each finished chunk is written atomically, so a killed sweep
   resumes from its last finished chunk with results identical to an uninterrupted run.

Results do not depend on the chunk size or on the number of devices: each member is
computed by the same per-member program with its own key (``jax.random.key(seed)``).

A segmented member (:class:`~jaxdyn.sweep.AbstractSegmentedMember`, e.g. a
:class:`~jaxdyn.sweep.DiffeqMember`) is instead advanced in segments of at most
``segment_steps`` steps, the unfinished members re-batched between segments
(``jaxdyn/sweep/_scheduler.py``), so that a chunk costs about the sum of its members' work
rather than ``width x`` its slowest member.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from ._checkpoints import SweepCheckpoints
from ._grid import Grid
from ._options import SweepOptions
from ._programs import compile_program, effective_vmap_width
from ._result import SweepResult
from ._scheduler import SegmentedPrograms, segment_width
from ._segmented import AbstractSegmentedMember, unsegmented

_DEFAULT_MAX_PER_DEVICE = 1024
_DEFAULT_MAX_SEGMENTED_CHUNK = 4096


def _slice_members(params: dict, seeds: np.ndarray, start: int, stop: int):
    """Members start:stop; indices past the end repeat the last member (chunk padding)."""
    idx = np.minimum(np.arange(start, stop), seeds.shape[0] - 1)
    return {k: v[idx] for k, v in params.items()}, seeds[idx]


def _choose_chunk(
    requested: int, n_members: int, n_devices: int, width: int, max_per_device: int
) -> int:
    if requested and requested > 0:
        per_device = math.ceil(requested / n_devices)
    else:
        per_device = min(math.ceil(n_members / n_devices), max_per_device)
    per_device = math.ceil(max(per_device, 1) / width) * width
    return per_device * n_devices


def _segmented_chunk(requested: int, n_members: int, width: int) -> int:
    """Chunk of a segmented sweep: as few chunks as the cap allows, evenly filled."""
    if requested and requested > 0:
        return math.ceil(requested / width) * width
    n_chunks = math.ceil(n_members / _DEFAULT_MAX_SEGMENTED_CHUNK)
    return math.ceil(math.ceil(n_members / n_chunks) / width) * width


def _initial_chunk(checkpoints, options, n_members, n_devices, width, log, name,
                   segmented=False):
    """The chunk size: a resumed sweep keeps its stored one when it still divides evenly."""
    stored = checkpoints.stored_chunk_size()
    if stored is not None and stored % (n_devices * width) == 0:
        return stored, True
    if stored is not None:
        log(
            f"sweep '{name}': stored chunk size {stored} does not divide over {n_devices} "
            f"devices x width {width}; recomputing all chunks"
        )
        checkpoints.discard()
    if segmented:
        return _segmented_chunk(options.chunk_size, n_members, width), False
    chunk = _choose_chunk(options.chunk_size, n_members, n_devices, width, _DEFAULT_MAX_PER_DEVICE)
    return chunk, False


def _fit_memory(compile_for, grid, n_devices, width, chunk, fixed, options, log, name):
    """Compile for ``chunk``; halve it while one chunk exceeds the memory budget."""
    budget = options.memory_budget_gb * 2**30
    n_compilations = 0
    while True:
        example_params, example_seeds = _slice_members(grid.params, grid.seeds, 0, chunk)
        program, fresh = compile_for(example_params, example_seeds)
        n_compilations += fresh
        smallest = n_devices * width
        if fixed or program.bytes_per_device <= budget or chunk == smallest:
            break
        new_chunk = max(smallest, (chunk // 2) // smallest * smallest)
        log(
            f"sweep '{name}': chunk of {chunk} needs {program.bytes_per_device / 2**30:.2f} GiB "
            f"per device (> {options.memory_budget_gb} GiB); retrying with {new_chunk}"
        )
        chunk = new_chunk
    if program.bytes_per_device > budget:
        log(
            f"sweep '{name}': warning: one chunk needs {program.bytes_per_device / 2**30:.2f} "
            f"GiB per device, above the budget of {options.memory_budget_gb} GiB"
        )
    return program, chunk, n_compilations


def _load_chunks(checkpoints, n_chunks):
    outputs: list = [None] * n_chunks
    status: list = [None] * n_chunks
    for i in range(n_chunks):
        loaded = checkpoints.load(i)
        if loaded is not None:
            outputs[i], status[i] = loaded
    return outputs, status


def _progress_bar(progress, n_pending, n_chunks, n_resumed, name):
    if progress is None:
        progress = n_pending > 1 and os.isatty(2)
    from tqdm.auto import tqdm

    return tqdm(total=n_chunks, initial=n_resumed, desc=f"sweep {name}", unit="chunk",
                disable=not progress, leave=False)


def _after_chunk():
    delay = float(os.environ.get("JAXDYN_SWEEP_CHUNK_DELAY", "0") or 0)
    if delay:  # test hook: slow a sweep down so that it can be killed mid-way
        time.sleep(delay)


def _run_chunks(program, grid, chunk, checkpoints, progress, name):
    """Dispatch every unfinished chunk (one ahead of the fetch), checkpointing each."""
    n_chunks = math.ceil(len(grid) / chunk)
    outputs, status = _load_chunks(checkpoints, n_chunks)
    n_resumed = sum(s is not None for s in status)
    pending = [i for i in range(n_chunks) if status[i] is None]
    bar = _progress_bar(progress, len(pending), n_chunks, n_resumed, name)

    def dispatch(i):
        return program.dispatch(*_slice_members(grid.params, grid.seeds, i * chunk,
                                                (i + 1) * chunk))

    try:
        in_flight = dispatch(pending[0]) if pending else None
        for j, i in enumerate(pending):
            current = in_flight
            # Dispatch the next chunk before fetching this one: device work overlaps I/O.
            in_flight = dispatch(pending[j + 1]) if j + 1 < len(pending) else None
            outputs[i], status[i] = program.fetch(current)
            checkpoints.save(i, outputs[i], status[i])
            bar.update(1)
            _after_chunk()
    finally:
        bar.close()
    return outputs, status, n_resumed


def _run_segmented_chunks(programs, grid, chunk, checkpoints, progress, name):
    """Run every unfinished chunk of a segmented sweep, checkpointing each."""
    n_chunks = math.ceil(len(grid) / chunk)
    outputs, status = _load_chunks(checkpoints, n_chunks)
    n_resumed = sum(s is not None for s in status)
    pending = [i for i in range(n_chunks) if status[i] is None]
    bar = _progress_bar(progress, len(pending), n_chunks, n_resumed, name)
    n_segments = 0
    try:
        for i in pending:
            params, seeds = _slice_members(grid.params, grid.seeds, i * chunk, (i + 1) * chunk)
            n_real = min(chunk, len(grid) - i * chunk)
            outputs[i], status[i], segments = programs.run(params, seeds, n_real)
            n_segments = max(n_segments, segments)
            checkpoints.save(i, outputs[i], status[i])
            bar.update(1)
            _after_chunk()
    finally:
        bar.close()
    return outputs, status, n_resumed, n_segments


_SEGMENTED: dict = {}


def _segmented_programs(member, device, width, options, params, seeds):
    """Compiled programs of a segmented member, cached like :func:`compile_program`."""
    group_width = segment_width(options.segment_width, width, device.platform)
    signature = tuple(
        (k, np.shape(v), np.asarray(v).dtype.str) for k, v in sorted(params.items())
    ) + ((np.shape(seeds), np.asarray(seeds).dtype.str),)
    key = (member, device.id, width, group_width, options.segment_steps, signature)
    try:
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _SEGMENTED:
        return _SEGMENTED[key], 0
    programs = SegmentedPrograms(
        member, width, group_width, options.segment_steps, params, seeds, device
    )
    if key is not None:
        if len(_SEGMENTED) >= 16:
            _SEGMENTED.pop(next(iter(_SEGMENTED)))
        _SEGMENTED[key] = programs
    return programs, programs.compilations


def run_sweep(
    fn: Callable[[dict[str, jax.Array], jax.Array], dict[str, jax.Array]]
    | AbstractSegmentedMember,
    grid: Grid,
    *,
    name: str = "sweep",
    options: SweepOptions | None = None,
    checkpoint_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
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
            progress); defaults if ``None``.
        checkpoint_dir: folder for finished chunks; a second call with the same folder and
            grid resumes from them. ``None`` keeps everything in memory.
        log: called with one-line progress messages (e.g. ``Run.log``).

    Within a run directory use :meth:`jaxdyn.runs.Run.sweep`, which passes the run's options
    and checkpoint folder and records the result.
    """
    segmented = isinstance(fn, AbstractSegmentedMember)
    if not segmented and not callable(fn):
        raise TypeError(f"run_sweep needs a callable member function, got {type(fn).__name__}")
    if not isinstance(grid, Grid):
        raise TypeError(f"run_sweep needs a jaxdyn.sweep.Grid, got {type(grid).__name__}")
    options = SweepOptions() if options is None else options
    if not isinstance(options, SweepOptions):
        raise TypeError(f"options must be a SweepOptions, got {type(options).__name__}")
    log = log or (lambda msg: None)
    if segmented and options.segment_steps == 0:
        fn, segmented = unsegmented(fn), False
    t_start = time.perf_counter()
    devices = jax.devices()
    if options.devices is not None:
        if options.devices > len(devices):
            raise ValueError(
                f"sweep option devices={options.devices}, but only {len(devices)} available"
            )
        devices = devices[: options.devices]
    mesh = jax.sharding.Mesh(np.array(devices), ("sweep",))
    n_members, n_devices = len(grid), len(devices)
    width = effective_vmap_width(options.vmap_width, n_members)
    meta = {"name": name, "fingerprint": grid.fingerprint(), "n_members": n_members,
            "vmap_width": width}
    checkpoints = SweepCheckpoints(checkpoint_dir, name, meta)

    if segmented:
        n_devices = 1  # one device per process (see docs/scaling.md)

        def compile_for(params, seeds):
            return _segmented_programs(fn, devices[0], width, options, params, seeds)
    else:

        def compile_for(params, seeds):
            return compile_program(fn, mesh, width, params, seeds, log)

    chunk, resumed = _initial_chunk(
        checkpoints, options, n_members, n_devices, width, log, name, segmented
    )
    program, chunk, n_compilations = _fit_memory(
        compile_for, grid, n_devices, width, chunk, bool(options.chunk_size) or resumed,
        options, log, name,
    )
    checkpoints.start(chunk)
    n_chunks = math.ceil(n_members / chunk)
    log(f"sweep '{name}': {n_members} members, {n_chunks} chunk(s) of {chunk} on "
        f"{n_devices} device(s)" + (f", segments of {options.segment_steps} steps"
                                    if segmented else ""))
    if segmented:
        compiled_before = program.compilations
        outputs, status, n_resumed, n_segments = _run_segmented_chunks(
            program, grid, chunk, checkpoints, options.progress, name
        )
        n_compilations += program.compilations - compiled_before
        log(f"sweep '{name}': at most {n_segments} segment(s) per chunk")
    else:
        outputs, status, n_resumed = _run_chunks(
            program, grid, chunk, checkpoints, options.progress, name
        )
    if n_resumed:
        log(f"sweep '{name}': {n_resumed} chunk(s) resumed from checkpoints")
    result = SweepResult(
        name=name,
        params={k: np.asarray(v) for k, v in grid.params.items()},
        seeds=grid.seeds,
        outputs={k: np.concatenate([c[k] for c in outputs])[:n_members] for k in outputs[0]},
        status=np.concatenate(status)[:n_members].astype(np.int32),
        grid_shape=grid.shape,
        axes=grid.axes,
        chunk_size=chunk,
        n_devices=n_devices,
        n_compilations=n_compilations,
        wall_time_s=time.perf_counter() - t_start,
    )
    failed = result.n_failed()
    if failed:
        log(f"sweep '{name}': {failed}/{n_members} member(s) not successful: "
            f"{result.status_counts()}")
    else:
        log(f"sweep '{name}': done in {result.wall_time_s:.1f} s")
    return result
