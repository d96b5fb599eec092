"""The order in which a pool of ``reproduce`` workers takes experiments: longest first.

Workers that each take the next unclaimed experiment from one queue finish together when the
longest experiments go first and the shortest fill the gaps at the end (greedy
longest-processing-time scheduling, within 4/3 of the best makespan). Each experiment's time
is estimated from, in turn:

1. its wall time in the last ``reproduce`` of the same size on this machine, kept next to the
   compilation cache (``reproduce-times.json`` in ``$JAXDYN_CACHE_DIR``);
2. :data:`QUICK_WALL_S` (quick size) or :data:`FULL_WALL_S` (full size): each experiment's
   wall seconds measured on a 2-core machine with a cold compilation cache (the tables in
   ``docs/benchmarks.md``);
3. the median of the other estimates (an experiment registered by a plugin).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path

TIMES_FILE = "reproduce-times.json"

# Single-core wall time (s) of each paper experiment at quick size, cold compilation cache, two
# experiments side by side (benchmarks/results/experiment_wall_times.json, "quick" cold_s).
QUICK_WALL_S: dict[str, float] = {
    "copy-head-adam": 11.0,
    "copy-head-adam-linear": 20.4,
    "copy-head-llc": 3.6,
    "copy-head-scaling": 13.2,
    "copy-head-sgld": 30.8,
    "copy-head-sgld-linear": 9.2,
    "copy-head-theory": 18.4,
    "focus-dilution": 4.9,
    "focus-dilution-ablation": 1.2,
    "focus-dilution-delta": 11.1,
    "focus-dilution-finite": 4.9,
    "focus-dilution-lyapunov": 3.1,
    "focus-dilution-text": 17.7,
    "focus-dilution-tinystories": 6.3,
    "induction-head": 16.7,
    "pde-blowup": 8.1,
    "pde-causal": 6.6,
    "pde-cone": 10.4,
    "pde-energy": 8.3,
    "pde-meanfield": 11.7,
    "pde-particles": 7.8,
    "pde-ranks": 15.7,
    "pde-sigmoid": 3.8,
    "pde-stability": 3.4,
    "pde-twisted": 1.9,
}


# Wall time (s) of each paper experiment at full size, one experiment at a time in one process
# (`jaxdyn run NAME --processes 1`), one compilation cache shared in the order measured
# (benchmarks/results/experiment_wall_times.json, "full" wall_s).
FULL_WALL_S: dict[str, float] = {
    "copy-head-adam": 213.8,
    "copy-head-adam-linear": 107.4,
    "copy-head-llc": 1554.5,
    "copy-head-scaling": 52.6,
    "copy-head-sgld": 1241.6,
    "copy-head-sgld-linear": 103.4,
    "copy-head-theory": 57.4,
    "focus-dilution": 24.5,
    "focus-dilution-ablation": 16.8,
    "focus-dilution-delta": 66.7,
    "focus-dilution-finite": 60.5,
    "focus-dilution-lyapunov": 19.1,
    "focus-dilution-text": 1124.3,
    "focus-dilution-tinystories": 103.6,
    "induction-head": 296.4,
    "pde-blowup": 58.2,
    "pde-causal": 78.6,
    "pde-cone": 44.7,
    "pde-energy": 49.5,
    "pde-meanfield": 3088.0,
    "pde-particles": 51.8,
    "pde-ranks": 612.4,
    "pde-sigmoid": 8.8,
    "pde-stability": 30.5,
    "pde-twisted": 13.0,
}


def _size(quick: bool) -> str:
    return "quick" if quick else "full"


def recorded_times(cache: Path | None, quick: bool) -> dict[str, float]:
    """The wall times of the last ``reproduce`` of this size kept in ``cache`` (empty when
    there are none or the file is unreadable)."""
    if cache is None:
        return {}
    try:
        data = json.loads((cache / TIMES_FILE).read_text())
        times = data.get(_size(quick), {})
        return {str(k): float(v) for k, v in times.items() if float(v) > 0}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def estimated_times(names: Sequence[str], quick: bool, cache: Path | None) -> dict[str, float]:
    """Each experiment's estimated wall time (s): the last run's, else :data:`QUICK_WALL_S` or
    :data:`FULL_WALL_S` (by size), else the median of the others."""
    recorded = recorded_times(cache, quick)
    table = QUICK_WALL_S if quick else FULL_WALL_S
    known = {n: recorded.get(n, table.get(n)) for n in names}
    values = [v for v in known.values() if v is not None]
    fallback = statistics.median(values) if values else 1.0
    return {n: fallback if v is None else v for n, v in known.items()}


def longest_first(names: Sequence[str], quick: bool, cache: Path | None) -> list[str]:
    """``names`` ordered by estimated wall time, longest first (ties keep their order)."""
    times = estimated_times(names, quick, cache)
    return sorted(names, key=lambda n: -times[n])


def record_times(cache: Path | None, quick: bool, times: Iterable[tuple[str, float]]) -> None:
    """Keep these experiments' wall times in ``cache`` for the next ``reproduce``'s order (a
    cache folder that cannot be written is skipped: the order is only an optimisation)."""
    from .._atomic import atomic_write_text

    times = {name: round(float(t), 1) for name, t in times if t and float(t) > 0}
    if cache is None or not times:
        return
    try:
        data = json.loads((cache / TIMES_FILE).read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    section = data.get(_size(quick))
    data[_size(quick)] = {**(section if isinstance(section, dict) else {}), **times}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cache / TIMES_FILE, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass
