"""Which cores each local worker process runs on (``launch_local`` and the reproduce pool)."""

from __future__ import annotations

import os

from .._affinity import process_cores


def worker_cores(n: int) -> list[frozenset[int] | None]:
    """The cores each of ``n`` local workers runs on: this process's cores split into ``n``
    contiguous shares (``None`` for every worker where they cannot be split, or on a platform
    without CPU affinity).

    A worker that may use every core sizes XLA's CPU thread pool to all of them and splits
    its larger loops over that pool; ``n`` such workers on ``n`` cores keep ``n`` times as
    many busy threads as cores, and a split loop waits for its slowest piece, descheduled
    behind another worker's thread. A worker held to its own share sizes the pool to it.
    """
    cores = process_cores()
    if cores is None:
        return [None] * n
    share = len(cores) // max(n, 1)
    if n <= 1 or share == 0:
        return [None] * n
    return [frozenset(cores[i * share : (i + 1) * share]) for i in range(n)]


def pinned_to(cores: frozenset[int] | None):
    """A ``preexec_fn`` for :class:`subprocess.Popen` that holds the child to ``cores``
    before it starts (``None``: no function, the child inherits this process's cores)."""
    if cores is None:
        return None

    def pin() -> None:
        try:
            os.sched_setaffinity(0, cores)
        except OSError:  # cores taken away meanwhile: the child keeps this process's
            pass

    return pin
