"""The cores this process may run on: one answer for the sweep engine's compile threads, the
launcher's worker placement and ``--cpu-devices auto``."""

from __future__ import annotations

import os


def process_cores() -> list[int] | None:
    """This process's cores in increasing order (its CPU affinity), or ``None`` on a platform
    that does not report one."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def usable_cores() -> int:
    """How many cores this process may run on (at least one)."""
    cores = process_cores()
    return max(1, len(cores) if cores is not None else os.cpu_count() or 1)
