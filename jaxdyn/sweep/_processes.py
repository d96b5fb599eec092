"""One sweep over several processes (``jax.distributed``): who computes which chunk, and how
every process gets every chunk's results.

Members never communicate, so no program spans processes: each process runs its chunks on its
own devices. The processes agree on the chunks already on disk (a killed run's checkpoints),
split the rest round-robin, and exchange the results with ``process_allgather`` (gloo on CPUs),
so that every process continues the experiment with the whole sweep, and results are bitwise
those of one process.
"""

from __future__ import annotations

import jax
import numpy as np


def process_layout() -> tuple[int, int]:
    """``(number of processes, this process's index)``."""
    return jax.process_count(), jax.process_index()


def _allgather(tree):
    from jax.experimental import multihost_utils

    return jax.tree.map(np.asarray, multihost_utils.process_allgather(tree, tiled=False))


def same_everywhere(value: int) -> int:
    """Process 0's ``value`` on every process (e.g. the chunk size it resumes with)."""
    n_proc, _ = process_layout()
    if n_proc == 1:
        return value
    return int(_allgather(np.asarray(value, np.int64))[0])


def agree_on_finished(have: np.ndarray) -> np.ndarray:
    """For each chunk, the lowest process that has it on disk (``-1``: nobody).

    Every process passes the chunks it can load; the collective also makes every process
    finish looking before any writes a chunk of this attempt.
    """
    n_proc, _ = process_layout()
    if n_proc == 1:
        return np.where(have, 0, -1)
    masks = _allgather(np.asarray(have, np.bool_))  # (n_proc, n_chunks)
    owner = np.argmax(masks, axis=0)
    return np.where(masks.any(axis=0), owner, -1)


def assign_pending(owner: np.ndarray) -> np.ndarray:
    """``owner`` with every unfinished chunk given to a process, round-robin over the
    unfinished chunks in order."""
    n_proc, _ = process_layout()
    owner = owner.copy()
    pending = np.flatnonzero(owner < 0)
    owner[pending] = np.arange(pending.size) % n_proc
    return owner


def exchange(outputs: list, status: list, owner: np.ndarray, template) -> None:
    """Fill ``outputs``/``status`` (lists over chunks) on every process from each chunk's
    owner, in rounds of one chunk per process. ``template``: zeros shaped like one chunk's
    ``(outputs, status)``, sent by processes with nothing left to send."""
    n_proc, me = process_layout()
    if n_proc == 1:
        return
    held = [np.flatnonzero(owner == p) for p in range(n_proc)]
    for r in range(max(len(h) for h in held)):
        mine = held[me][r] if r < len(held[me]) else None
        payload = template if mine is None else (outputs[mine], status[mine])
        gathered_out, gathered_status = _allgather(payload)
        for p in range(n_proc):
            if r < len(held[p]):
                i = held[p][r]
                outputs[i] = {k: v[p] for k, v in gathered_out.items()}
                status[i] = gathered_status[p]
