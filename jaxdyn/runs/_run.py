"""The run directory: the contract every experiment writes and every reader relies on.

```
<run>/config.json     resolved config, versions, devices, seeds
<run>/results.npz     named arrays (sweeps as "<sweep>.<key>", with "<sweep>.status")
<run>/summary.json    status, headline scalars, checks {name, expected, measured,
                      tolerance, passed}, per-sweep failure counts, wall time
<run>/figures/*.png
<run>/log.txt
<run>/checkpoints/    finished sweep chunks while the run is in progress (removed at the end)
```
Every file except the append-only log is written atomically.
"""

from __future__ import annotations

import datetime
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_savefig, atomic_savez, atomic_write_text
from .._status import status_code, status_name
from ..sweep._grid import Grid
from ..sweep._options import SweepOptions
from ..sweep._result import SweepResult
from ..sweep._segmented import AbstractSegmentedMember


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic | np.ndarray) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.ndim == 0:
            return _jsonable(arr.item())
        return [_jsonable(v) for v in arr.tolist()]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


class Run:
    """Handle on one run directory, given to an experiment's run function.

    Methods write through to disk at once (atomically), so a killed run keeps everything it
    had finished.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        experiment: str,
        echo: bool = True,
        config=None,
        options: SweepOptions | None = None,
    ):
        self.path = Path(path)
        self.config = config
        self.options = SweepOptions() if options is None else options
        self.experiment = experiment
        self.echo = echo
        self.figures_dir = self.path / "figures"
        self._arrays: dict[str, np.ndarray] = {}
        self._scalars: dict[str, Any] = {}
        self._checks: list[dict[str, Any]] = []
        self._sweeps: dict[str, Any] = {}
        self._figures: list[str] = []
        self._t0 = time.perf_counter()
        # In a multi-host run every process computes, only process 0 writes.
        import jax

        self.writer = jax.process_index() == 0
        if self.writer:
            self.path.mkdir(parents=True, exist_ok=True)

    # -- logging -------------------------------------------------------------------------
    def log(self, message: str) -> None:
        stamp = datetime.datetime.now().strftime("%H:%M:%S")
        line = f"[{stamp}] {message}"
        if not self.writer:
            return
        with open(self.path / "log.txt", "a", encoding="utf-8") as f:
            f.write(line + "\n")
        if self.echo:
            print(f"[{self.experiment}] {message}", file=sys.stderr, flush=True)

    # -- arrays, scalars, checks -----------------------------------------------------------
    def save_arrays(self, **arrays) -> None:
        """Add named arrays to ``results.npz`` (rewritten atomically)."""
        for key, value in arrays.items():
            self._arrays[key] = np.asarray(value)
        if self.writer:
            atomic_savez(self.path / "results.npz", **self._arrays)

    def sweep(
        self,
        name: str,
        member: Callable | AbstractSegmentedMember,
        grid: Grid,
        *,
        accept: Iterable = (),
        options: SweepOptions | None = None,
    ) -> SweepResult:
        """Run a sweep into this run directory: checkpoint, resume, record, in one call.

        ``member(params, key) -> dict`` and ``grid`` are as in :func:`jaxdyn.sweep.run_sweep`;
        the run's :class:`~jaxdyn.sweep.SweepOptions` apply (``options`` replaces them for this
        sweep). Finished chunks go to ``checkpoints/<name>/`` so that ``--resume`` continues a
        killed run; the result's arrays go to ``results.npz`` as ``<name>.<key>`` and its
        status counts to ``summary.json``. Members whose status is in ``accept`` (besides
        ``Status.successful``) are not counted as failed (e.g. ``Status.blowup`` where blow-up
        is what is measured).
        """
        from ..sweep import run_sweep

        result = run_sweep(
            member,
            grid,
            name=name,
            options=self.options if options is None else options,
            checkpoint_dir=self.path / "checkpoints",
            log=self.log,
        )
        self._record_sweep(result, accept=accept)
        return result

    def _record_sweep(self, result: SweepResult, accept: Iterable = ()) -> None:
        """Store a sweep's arrays and its status counts."""
        self._sweeps[result.name] = {
            "members": int(result.status.shape[0]),
            "failed": result.n_failed(accept),
            "accepted": [status_name(status_code(s)) for s in accept],
            "status_counts": result.status_counts(),
            "chunk_size": result.chunk_size,
            "n_devices": result.n_devices,
            "compilations": result.n_compilations,
        }
        self.save_arrays(**result.arrays())
        self._write_summary("running")

    def scalar(self, name: str, value: Any) -> None:
        """A headline number (or string) for ``summary.json`` and the report."""
        self._scalars[name] = _jsonable(value)
        self._write_summary("running")

    def check(
        self,
        name: str,
        *,
        expected: Any,
        measured: Any,
        tolerance: float | None = None,
        relative: bool = False,
        passed: bool | None = None,
        note: str = "",
    ) -> bool:
        """Record a theory-vs-simulation check.

        Numbers pass when ``|measured - expected| <= tolerance`` (times ``|expected|`` when
        ``relative``); other values pass when equal. ``passed`` overrides the rule (for
        checks such as inequalities, described in ``note``). A NaN never passes.
        """
        if passed is None:
            if isinstance(expected, str | bool) or isinstance(measured, str | bool):
                passed = expected == measured
            else:
                e = np.asarray(expected, dtype=float)
                m = np.asarray(measured, dtype=float)
                tol = 0.0 if tolerance is None else float(tolerance)
                bound = tol * np.abs(e) if relative else tol
                passed = bool(np.all(np.isfinite(m)) and np.all(np.abs(m - e) <= bound))
        entry = {
            "name": name,
            "expected": _jsonable(expected),
            "measured": _jsonable(measured),
            "tolerance": _jsonable(tolerance),
            "relative": relative,
            "passed": bool(passed),
        }
        if note:
            entry["note"] = note
        self._checks = [c for c in self._checks if c["name"] != name] + [entry]
        self.log(
            f"check {name}: expected {entry['expected']}, measured {entry['measured']}"
            f" -> {'PASS' if passed else 'FAIL'}"
        )
        self._write_summary("running")
        return bool(passed)

    def save_figure(self, fig, name: str, *, dpi: int = 120) -> Path:
        """Save a matplotlib figure as ``figures/<name>.png`` atomically and close it."""
        import matplotlib.pyplot as plt

        path = self.figures_dir / f"{name}.png"
        if self.writer:
            atomic_savefig(fig, path, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        if name not in self._figures:
            self._figures.append(name)
        return path

    # -- summary ---------------------------------------------------------------------------
    def _write_summary(self, status: str, error: str | None = None) -> None:
        if not self.writer:
            return
        n_passed = sum(c["passed"] for c in self._checks)
        summary = {
            "experiment": self.experiment,
            "status": status,
            "scalars": self._scalars,
            "checks": self._checks,
            "checks_passed": n_passed,
            "checks_total": len(self._checks),
            "sweeps": self._sweeps,
            "failed_members": sum(s["failed"] for s in self._sweeps.values()),
            "figures": [f"figures/{f}.png" for f in self._figures],
            "wall_time_s": round(time.perf_counter() - self._t0, 3),
        }
        if error:
            summary["error"] = error
        atomic_write_text(self.path / "summary.json", json.dumps(_jsonable(summary), indent=2))

    def finish(self) -> None:
        """Mark the run complete and drop the sweep checkpoints (results.npz holds them)."""
        if not self.writer:
            return
        if self._arrays:
            atomic_savez(self.path / "results.npz", **self._arrays)
        self._write_summary("complete")
        shutil.rmtree(self.path / "checkpoints", ignore_errors=True)

    def fail(self, error: str) -> None:
        self._write_summary("failed", error=error)
