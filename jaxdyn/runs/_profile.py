"""Where a run's time goes: ``profile.json`` in the run directory (``jaxdyn run --profile``,
or the launch configuration's ``profile``).

The breakdown comes from public event hooks, so profiling changes nothing about the run:

- ``startup_s``: from the process's start (Linux ``/proc``) to the experiment's start (Python
  and package imports, ``jax.distributed`` set-up, config parsing); for a later experiment of
  the same process (``reproduce``), from the end of the one before;
- ``trace_s``, ``lower_s``, ``compile_s``: jax's own monitoring events
  (``jax.monitoring``: ``/jax/core/compile/jaxpr_trace_duration``,
  ``.../jaxpr_to_mlir_module_duration``, ``.../backend_compile_duration``), with the number
  of compilations and of persistent-cache hits (a hit is counted in ``compile_s`` as the time
  to load it);
- ``sweep_s``: inside :func:`jaxdyn.sweep.run_sweep` (it includes tracing and compiling the
  sweep programs), ``device_s`` the part spent in the compiled sweep programs or waiting for
  their results (device compute and transfers; on CPUs a call runs the program), and
  ``host_syncs`` how many times the host waited for device results (one per chunk, and one
  per group and segment round of a segmented sweep);
- ``plotting_s``: the figures the run writes (:meth:`jaxdyn.runs.Run.save_figure`, where Agg
  draws them);
- ``other_s``: the rest of the experiment (Python loops, eager JAX operations, NumPy analysis,
  writing results): ``experiment_s`` minus tracing, lowering, compilation, sweep device time
  and plotting (nested traces are counted in each enclosing one, so the parts can overlap
  a little; device time outside sweeps, e.g. eager or jitted calls of an experiment, is in
  ``other_s``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

import jax

from .._atomic import atomic_write_text

_DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "compile_s",
    "/jaxdyn/sweep/duration": "sweep_s",
    "/jaxdyn/sweep/device_duration": "device_s",
    "/jaxdyn/plotting/duration": "plotting_s",
}
_COUNTS = {
    "/jax/core/compile/backend_compile_duration": "compilations",
    "/jaxdyn/sweep/duration": "sweeps",
}
_EVENTS = {
    "/jax/compilation_cache/cache_hits": "persistent_cache_hits",
    "/jaxdyn/sweep/host_sync": "host_syncs",
}


def profiling_enabled() -> bool:
    """Whether runs write ``profile.json`` (the launch configuration's ``profile``:
    ``--profile``)."""
    from ..distributed._launch import LaunchConfig

    return LaunchConfig.from_environ().profile


def process_age_s() -> float | None:
    """Seconds since this process started (Linux), else ``None``."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)


class _Collector:
    def __init__(self):
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.counts: Counter[str] = Counter()
        self.active = True

    def on_duration(self, event: str, duration: float, **kwargs) -> None:
        if not self.active:
            return
        if event in _DURATIONS:
            self.seconds[_DURATIONS[event]] += duration
        if event in _COUNTS:
            self.counts[_COUNTS[event]] += 1

    def on_event(self, event: str, **kwargs) -> None:
        if self.active and event in _EVENTS:
            self.counts[_EVENTS[event]] += 1


_previous_end: float | None = None  # when this process's last profiled experiment ended


@contextlib.contextmanager
def profiled(out: Path, writer: bool = True):
    """Record the breakdown of the block (one experiment) into ``out / "profile.json"``."""
    global _previous_end
    startup = process_age_s() if _previous_end is None else time.monotonic() - _previous_end
    collector = _Collector()
    jax.monitoring.register_event_duration_secs_listener(collector.on_duration)
    jax.monitoring.register_event_listener(collector.on_event)
    start = time.perf_counter()
    try:
        yield collector
    finally:
        total = time.perf_counter() - start
        _previous_end = time.monotonic()
        collector.active = False  # jax has no public way to remove one listener in 0.10
        with contextlib.suppress(AttributeError, ValueError):
            jax.monitoring.unregister_event_duration_listener(collector.on_duration)
            jax.monitoring.unregister_event_listener(collector.on_event)
        if writer:
            atomic_write_text(
                out / "profile.json", json.dumps(breakdown(collector, total, startup), indent=2)
            )


def breakdown(collector: _Collector, experiment_s: float, startup_s: float | None) -> dict:
    """The profile as written to ``profile.json`` (module docstring)."""
    s = collector.seconds
    accounted = sum(s[k] for k in ("trace_s", "lower_s", "compile_s", "device_s", "plotting_s"))
    return {
        "startup_s": None if startup_s is None else round(startup_s, 3),
        "experiment_s": round(experiment_s, 3),
        **{k: round(s[k], 3) for k in ("trace_s", "lower_s", "compile_s")},
        "compilations": collector.counts["compilations"],
        "persistent_cache_hits": collector.counts["persistent_cache_hits"],
        "sweeps": collector.counts["sweeps"],
        "sweep_s": round(s["sweep_s"], 3),
        "device_s": round(s["device_s"], 3),
        "host_syncs": collector.counts["host_syncs"],
        "plotting_s": round(s["plotting_s"], 3),
        "other_s": round(max(0.0, experiment_s - accounted), 3),
        "device": str(jax.devices()[0].platform),
        "n_devices": jax.device_count(),
    }
