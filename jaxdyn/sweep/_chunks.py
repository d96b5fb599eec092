"""Chunks of a sweep: their size, which process computes which, and the loops that run them.

A sweep's members are cut into chunks of equal size (the last one padded by repeating its last
member). A chunk is the unit of compilation (one executable serves every chunk), of memory
(sized to a budget from XLA's memory analysis), of checkpointing (one file per finished chunk)
and of work sharing between processes.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import time

import jax
import numpy as np

from ._options import SweepOptions
from ._processes import agree_on_finished, assign_pending, exchange, process_layout
from ._programs import DEVICE_EVENT

_DEFAULT_MAX_PER_DEVICE = 1024
_SEGMENTED_CHUNK = 256


def slice_members(params: dict, seeds: np.ndarray, start: int, stop: int):
    """Members start:stop; indices past the end repeat the last member (chunk padding)."""
    idx = np.minimum(np.arange(start, stop), seeds.shape[0] - 1)
    return {k: v[idx] for k, v in params.items()}, seeds[idx]


def choose_chunk(
    requested: int,
    n_members: int,
    n_devices: int,
    width: int,
    max_per_device: int,
    threads: int = 1,
) -> int:
    """Members per chunk: at least one chunk per process and per thread (``threads`` chunks
    run at once, :func:`run_plain_chunks`), at most ``max_per_device`` members per device, a
    multiple of ``devices x width``."""
    if requested and requested > 0:
        per_device = math.ceil(requested / n_devices)
    else:
        n_proc, _ = process_layout()
        share = n_devices * n_proc * threads
        per_device = min(math.ceil(n_members / share), max_per_device)
    per_device = math.ceil(max(per_device, 1) / width) * width
    return per_device * n_devices


def segmented_chunk(requested: int, n_members: int, width: int) -> int:
    """Chunk of a segmented sweep: at most ``_SEGMENTED_CHUNK`` members (rounded up to a
    multiple of ``width``), whatever the number of processes.

    Which members share a group of a segmented chunk depends on the chunks, and a member's
    bits may depend on the width of the groups it was advanced in (``_scheduler.py``), so
    the default chunks must not depend on how many processes share them: then
    ``--processes N`` gives bitwise the results of one process.
    """
    if requested and requested > 0:
        return math.ceil(requested / width) * width
    n_chunks = math.ceil(n_members / _SEGMENTED_CHUNK)
    return math.ceil(math.ceil(n_members / n_chunks) / width) * width


def spread_order(n_members: int, chunk: int) -> np.ndarray:
    """Member order of a segmented sweep: member ``i`` goes to chunk ``~ i mod n_chunks``, so
    that costly regions of a grid (one setting's members are adjacent) are shared between the
    chunks, and so between processes."""
    n_chunks = math.ceil(n_members / chunk)
    return np.argsort(np.arange(n_members) % n_chunks, kind="stable")


def initial_chunk(
    checkpoints, options, n_members, n_devices, width, log, name, segmented, threads=1
):
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
        return segmented_chunk(options.chunk_size, n_members, width), False
    chunk = choose_chunk(
        options.chunk_size, n_members, n_devices, width, _DEFAULT_MAX_PER_DEVICE, threads
    )
    return chunk, False


def fit_memory(
    compile_for, grid, n_devices, width, chunk, fixed, options: SweepOptions, log, name, threads=1
):
    """Compile for ``chunk``; halve it while the ``threads`` chunks that may run at once
    exceed the memory budget."""
    budget = options.memory_budget_gb * 2**30 / threads
    n_compilations = 0
    while True:
        example_params, example_seeds = slice_members(grid.params, grid.seeds, 0, chunk)
        program, fresh = compile_for(example_params, example_seeds)
        n_compilations += fresh
        smallest = n_devices * width
        if fixed or program.bytes_per_device <= budget or chunk == smallest:
            break
        new_chunk = max(smallest, (chunk // 2) // smallest * smallest)
        log(
            f"sweep '{name}': chunk of {chunk} needs {program.bytes_per_device / 2**30:.2f} GiB "
            f"per device (> {budget / 2**30:.2f} GiB: {options.memory_budget_gb} GiB over "
            f"{threads} chunk(s) at once); retrying with {new_chunk}"
        )
        chunk = new_chunk
    if program.bytes_per_device > budget:
        log(
            f"sweep '{name}': warning: one chunk needs {program.bytes_per_device / 2**30:.2f} "
            f"GiB per device, above the budget of {budget / 2**30:.2f} GiB"
        )
    return program, chunk, n_compilations


class ChunkPlan:
    """Which chunks this process computes, which it loads, and who holds each one."""

    def __init__(self, checkpoints, n_chunks: int):
        have = np.array([checkpoints.exists(i) for i in range(n_chunks)], bool)
        finished_by = agree_on_finished(have)
        self.owner = assign_pending(finished_by)
        _, me = process_layout()
        self.n_resumed = int(np.sum(finished_by >= 0))
        self.outputs: list = [None] * n_chunks
        self.status: list = [None] * n_chunks
        for i in np.flatnonzero(finished_by == me).tolist():
            self.outputs[i], self.status[i] = checkpoints.load(i)
        self.todo = [int(i) for i in np.flatnonzero((self.owner == me) & (finished_by < 0))]

    def gather(self, out_shape) -> tuple[list, list]:
        """Every chunk's ``(outputs, status)`` on every process."""
        template = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), out_shape)
        exchange(self.outputs, self.status, self.owner, template)
        return self.outputs, self.status


def _progress_bar(progress, plan: ChunkPlan, name):
    n_chunks = len(plan.outputs)
    if progress is None:
        progress = len(plan.todo) > 1 and os.isatty(2)
    from tqdm.auto import tqdm

    return tqdm(
        total=n_chunks,
        initial=plan.n_resumed,
        desc=f"sweep {name}",
        unit="chunk",
        disable=not progress or process_layout()[1] != 0,
        leave=False,
    )


class _ChunkLog:
    """One log line per chunk this process finishes where no progress bar shows (a run
    directory's log, a job's output): a sweep of several chunks says how far it is. The count
    is every process's: the chunks finished on disk (each process writes its own), or this
    process's own when nothing is kept on disk."""

    def __init__(self, log, plan: ChunkPlan, bar, name, checkpoints):
        self.n_chunks, self.done = len(plan.outputs), plan.n_resumed
        pending = self.n_chunks - plan.n_resumed
        self.on = log is not None and bar.disable and pending > 1
        self.log, self.name, self.start = log, name, time.perf_counter()
        self.checkpoints = checkpoints

    def update(self):
        self.done += 1
        if not self.on or process_layout()[1] != 0:
            return
        done = self.done
        if self.checkpoints.dir is not None and process_layout()[0] > 1:
            done = max(done, sum(self.checkpoints.exists(i) for i in range(self.n_chunks)))
        self.log(
            f"sweep '{self.name}': chunk {done}/{self.n_chunks} done "
            f"({time.perf_counter() - self.start:.0f} s)"
        )


def run_plain_chunks(
    get_program, plan: ChunkPlan, grid, chunk, checkpoints, progress, name, log=None, threads=1
):
    """Dispatch this process's unfinished chunks (one ahead of the fetch), checkpointing
    each; ``get_program()`` compiles the chunk program when first needed.

    With ``threads > 1`` (a CPU device with more cores than devices, and a program that can:
    the engine's ``chunk_threads`` and ``program.concurrent``), up to ``threads`` chunks run
    at once, each in a thread of its own. XLA:CPU runs a program on the thread that
    calls it, with little parallelism inside the small operations of sweep members, so one
    program leaves the other cores idle; the checkpoints are written here, by the calling
    thread, as the chunks finish. Results do not depend on it: every chunk runs the same
    executable on its own members."""
    pending = plan.todo
    bar = _progress_bar(progress, plan, name)
    chunk_log = _ChunkLog(log, plan, bar, name, checkpoints)
    if _in_threads(threads, plan):
        program = get_program()

        def run(i):
            members = slice_members(grid.params, grid.seeds, i * chunk, (i + 1) * chunk)
            return program.fetch(program.dispatch(*members))

        try:
            _each_chunk(run, plan, checkpoints, threads, bar, chunk_log)
        finally:
            bar.close()
        return

    def dispatch(i):
        members = slice_members(grid.params, grid.seeds, i * chunk, (i + 1) * chunk)
        program = get_program()
        start = time.perf_counter()
        handle = program.dispatch(*members)
        jax.monitoring.record_event_duration_secs(DEVICE_EVENT, time.perf_counter() - start)
        return handle

    def fetch(handle):
        start = time.perf_counter()
        out = get_program().fetch(handle)
        jax.monitoring.record_event_duration_secs(DEVICE_EVENT, time.perf_counter() - start)
        return out

    try:
        in_flight = dispatch(pending[0]) if pending else None
        for j, i in enumerate(pending):
            current = in_flight
            # Dispatch the next chunk before fetching this one: device work overlaps I/O.
            in_flight = dispatch(pending[j + 1]) if j + 1 < len(pending) else None
            plan.outputs[i], plan.status[i] = fetch(current)
            checkpoints.save(i, plan.outputs[i], plan.status[i])
            bar.update(1)
            chunk_log.update()
    finally:
        bar.close()


def _in_threads(threads, plan) -> bool:
    """Whether :func:`_each_chunk` runs the chunks in threads: several threads, several
    chunks to run."""
    return threads > 1 and len(plan.todo) > 1


def _each_chunk(run, plan, checkpoints, threads, bar, chunk_log) -> list:
    """``run(i) -> (outputs, status, *rest)`` for this process's unfinished chunks, up to
    ``threads`` at once (one: in this thread); each chunk is checkpointed by the calling
    thread as it ends. Returns each chunk's ``rest``, in the order the chunks ended.

    With threads, a failed chunk cancels the chunks not yet started and is raised; those
    already running finish first (an XLA program cannot be interrupted), and the time inside
    is recorded as ``DEVICE_EVENT`` once (the chunks' own times overlap)."""
    pool = None
    if _in_threads(threads, plan):
        pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="jaxdyn-chunk")
    start = time.perf_counter()
    rest = []
    try:
        if pool is None:
            finished = ((i, run(i)) for i in plan.todo)
        else:
            futures = {pool.submit(run, i): i for i in plan.todo}
            finished = ((futures[f], f.result()) for f in concurrent.futures.as_completed(futures))
        for i, (outputs, status, *more) in finished:
            plan.outputs[i], plan.status[i] = outputs, status
            checkpoints.save(i, outputs, status)
            rest.append(more)
            bar.update(1)
            chunk_log.update()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            jax.monitoring.record_event_duration_secs(DEVICE_EVENT, time.perf_counter() - start)
    return rest


def run_segmented_chunks(
    get_program, plan: ChunkPlan, grid, chunk, checkpoints, progress, name, log=None, threads=1
) -> tuple[int, int]:
    """Run this process's unfinished chunks of a segmented sweep, checkpointing each; returns
    the most segments a chunk needed and the lanes x steps the device ran (all chunks).

    With ``threads > 1``, up to ``threads`` chunks run at once, as in
    :func:`run_plain_chunks`. Each chunk's segments and groups depend on its own members
    only, so results do not change."""
    bar = _progress_bar(progress, plan, name)
    chunk_log = _ChunkLog(log, plan, bar, name, checkpoints)
    alone = not _in_threads(threads, plan)  # each chunk records its own device time

    def run(i):
        params, seeds = slice_members(grid.params, grid.seeds, i * chunk, (i + 1) * chunk)
        n_real = min(chunk, len(grid) - i * chunk)
        return get_program().run(params, seeds, n_real, record=alone)

    try:
        counts = _each_chunk(run, plan, checkpoints, threads, bar, chunk_log)
    finally:
        bar.close()
    n_segments = max((segments for segments, _ in counts), default=0)
    return n_segments, sum(lane_steps for _, lane_steps in counts)
