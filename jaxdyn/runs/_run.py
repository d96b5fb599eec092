"""The run directory: the contract every experiment writes and every reader relies on.

```
<run>/config.json     resolved config, versions, devices, seeds
<run>/results.npz     named arrays (sweeps as "<sweep>.<key>", with "<sweep>.status")
<run>/summary.json    status, counts, findings (refuted evidence) first, headline scalars,
                      checks (each with its kind: evidence with verdict and error model,
                      consistency with passed, report), per-sweep failure counts, wall time
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
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_savefig, atomic_savez, atomic_write_text
from .._json import jsonable
from .._status import status_code, status_message, status_name
from ..evidence import Evidence, Verdict
from ..evidence._contract import CheckKind
from ..sweep._grid import Grid
from ..sweep._options import SweepOptions
from ..sweep._result import SweepResult
from ..sweep._segmented import AbstractSegmentedMember
from ._controls import has_negative_control


def check_counts(checks: list[dict[str, Any]]) -> dict[str, int]:
    """Counts of a run's checks: evidence by verdict (``not_run`` apart from ``inconclusive``),
    findings (refuted evidence),
    consistency (and how many failed), report, and not yet classified."""
    evidence = [c for c in checks if c["kind"] == CheckKind.evidence.value]
    consistency = [c for c in checks if c["kind"] == CheckKind.consistency.value]
    return {
        "evidence": len(evidence),
        "holds": sum(c["verdict"] == Verdict.holds.value for c in evidence),
        "refuted": sum(c["verdict"] == Verdict.refuted.value for c in evidence),
        "inconclusive": sum(c["verdict"] == Verdict.inconclusive.value for c in evidence),
        "not_run": sum(c["verdict"] == Verdict.not_run.value for c in evidence),
        "findings": sum(c["verdict"] == Verdict.refuted.value for c in evidence),
        "without_negative_control": sum(not c["negative_control"] for c in evidence),
        "consistency": len(consistency),
        "consistency_failed": sum(not c["passed"] for c in consistency),
        "report": sum(c["kind"] == CheckKind.report.value for c in checks),
        "unclassified": sum(c["kind"] == "unclassified" for c in checks),
    }


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
        # Labels of the arrays in results.npz: dims per array, coordinate dims (values in
        # results.npz as "coord.<name>"); jaxdyn.runs.load builds labelled xarray from them.
        self._labels: dict[str, dict[str, list]] = {"arrays": {}, "coords": {}}
        self._figures: list[str] = []
        self._t0 = time.perf_counter()
        self._earlier_wall_time_s = 0.0  # of earlier sessions of this run (a resumed run)
        self._sessions = 1
        self._status = "running"
        # In a multi-host run every process computes, only process 0 writes.
        import jax

        self.writer = jax.process_index() == 0
        if self.writer:
            self.path.mkdir(parents=True, exist_ok=True)
        self._continue_earlier_sessions()
        self._write_summary("running")

    def _continue_earlier_sessions(self) -> None:
        """A resumed run adds its wall time to the earlier sessions' and says how they ended."""
        file = self.path / "summary.json"
        if not file.exists():
            return
        try:
            earlier = json.loads(file.read_text())
        except (OSError, ValueError):
            return
        if earlier.get("experiment") != self.experiment:
            return
        self._earlier_wall_time_s = float(earlier.get("wall_time_s") or 0.0)
        self._sessions = int(earlier.get("sessions") or 1) + 1
        self.log(
            f"resuming: session {self._sessions}; the previous one ended"
            f" {earlier.get('status')} after {self._earlier_wall_time_s:.1f} s of wall time"
        )

    @property
    def quick(self) -> bool:
        """Whether this run was started with ``--quick`` (from its ``config.json``)."""
        try:
            return bool(json.loads((self.path / "config.json").read_text()).get("quick", False))
        except (OSError, ValueError):
            return False

    def _config_values(self) -> dict[str, Any]:
        import dataclasses

        if dataclasses.is_dataclass(self.config):
            return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}
        return dict(self.config or {}) if isinstance(self.config, dict) else {}

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
        if self._status == "running":  # the wall time so far survives a kill
            self._write_summary("running")

    # -- arrays, scalars, checks -----------------------------------------------------------
    def save_arrays(
        self,
        *,
        dims: dict[str, Sequence[str]] | None = None,
        coords: dict[str, Any] | None = None,
        **arrays,
    ) -> None:
        """Add named arrays to ``results.npz`` (rewritten atomically), with their labels.

        ``dims`` names each array's axes (``dims={"flow_attention": ("time", "query", "key")}``);
        ``coords`` gives coordinate values: a 1-D array for the dimension of the same name
        (``coords={"time": ts, "key": vocabulary}``; strings for categorical values), or
        ``(dims, values)``. An ``xarray.DataArray`` value brings its own dims and coords. An
        axis left unnamed is named after the one coordinate of this call with its length, if
        exactly one has it; a 1-D time grid saved in the same call (``ts``, ``<prefix>_ts``)
        is the coordinate ``time`` (``<prefix>_time``), and names the *first* axis of the
        call's other arrays when that axis has its length. :func:`jaxdyn.runs.load` reads the
        arrays back as labelled
        ``xarray.DataArray`` objects; an axis that is still unnamed reads as ``<array>_<i>``.

        Raises ``ValueError`` (one line) when a name list does not match an array's number of
        axes, or a coordinate's length the size of its dimension.
        """
        dims = {k: tuple(v) for k, v in (dims or {}).items()}
        declared = _coords(coords or {})
        values = {}
        for key, value in arrays.items():
            if _is_dataarray(value):
                dims.setdefault(key, tuple(str(d) for d in value.dims))
                for name, coord in value.coords.items():
                    declared.setdefault(
                        str(name), (tuple(str(d) for d in coord.dims), np.asarray(coord.values))
                    )
                value = value.values
            values[key] = np.asarray(value)
        unknown = set(dims) - set(values)
        if unknown:
            raise ValueError(f"save_arrays: dims given for arrays not saved: {sorted(unknown)}")
        swept = {f"{n}.{k}" for n, info in self._sweeps.items() for k in info.get("outputs", {})}
        if not getattr(self, "_recording_sweep", False) and set(values) & swept:
            raise ValueError(
                f"save_arrays: {sorted(set(values) & swept)} would overwrite a sweep's output"
                " of the same name"
            )
        self._check_run_coords(declared)
        grids = _time_grids(values, declared, dims, self._existing_coords())
        labels = {
            key: _label_axes(key, arr, dims.get(key), declared, time=_time_of(key, grids))
            for key, arr in values.items()
        }
        _check_coords(declared, values, labels)
        for key, arr in values.items():
            self._arrays[key] = arr
            self._labels["arrays"][key] = labels[key]
        for name, (coord_dims, coord_values) in declared.items():
            self._arrays[f"coord.{name}"] = coord_values
            self._labels["coords"][name] = list(coord_dims)
        if self.writer:
            atomic_savez(self.path / "results.npz", **self._arrays)
            self._write_summary(self._status)

    def _existing_coords(self) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
        return {
            name: (tuple(dims), self._arrays[f"coord.{name}"])
            for name, dims in self._labels["coords"].items()
            if f"coord.{name}" in self._arrays
        }

    def _check_run_coords(self, declared) -> None:
        """Coordinates are run-wide: one name, one set of values."""
        existing = self._existing_coords()
        for name, (coord_dims, values) in declared.items():
            if name in existing and not _same_coord(existing[name], (coord_dims, values)):
                raise ValueError(
                    f"coordinate {name!r} is already saved with other values: give this one"
                    " another name"
                )

    def sweep(
        self,
        name: str,
        member: Callable | AbstractSegmentedMember,
        grid: Grid,
        *,
        accept: Iterable = (),
        options: SweepOptions | None = None,
        dims: dict[str, Sequence[str] | str] | None = None,
        coords: dict[str, Any] | None = None,
        expected: Iterable[tuple[Any, str]] | dict[str, str] | None = None,
    ) -> SweepResult:
        """Run a sweep into this run directory: checkpoint, resume, record, in one call.

        ``member(params, key) -> dict`` (or a
        :class:`~jaxdyn.sweep.AbstractSegmentedMember`) and ``grid`` are as in
        :func:`jaxdyn.sweep.run_sweep`; the run's :class:`~jaxdyn.sweep.SweepOptions` apply
        (``options`` replaces them for this sweep). In a multi-process run every process
        calls this and gets the whole result; only process 0 writes. Finished chunks go to
        ``checkpoints/<name>/`` so that ``--resume`` continues a killed run; the result's
        arrays go to ``results.npz`` as ``<name>.<key>`` and its
        status counts to ``summary.json``. Members whose status is in ``accept`` (besides
        ``Status.successful``) are not counted as failed (e.g. ``Status.blowup`` where blow-up
        is what is measured).

        Labels (:func:`jaxdyn.runs.load` reads them): ``dims`` names each output's own axes
        after the grid's (``{"loss": ("time",)}``), or renames a grid axis
        (``{"seed": "chain"}``, ArviZ's naming for posterior chains); ``coords`` gives their
        values as in :meth:`save_arrays`; an array-valued parameter's own axes are named the
        same way (``{"Sigma0": ("i", "j")}``). An unnamed trailing axis is named after the one
        coordinate of ``coords`` with its length, if exactly one has it.

        ``expected`` says which failures are expected and why, as ``(status, why)`` pairs
        (``[(Status.max_steps_reached, "beta > 4 stalls by design")]``; or a dict keyed by
        status name): the log and
        ``summary.json`` call those failures expected, with the reason; other failures are
        reported as unexpected, with what to do about them.
        """
        from ..sweep import run_sweep

        self._log_resumable_chunks(name)
        result = run_sweep(
            member,
            grid,
            name=name,
            options=self.options if options is None else options,
            checkpoint_dir=self.path / "checkpoints",
            log=self.log,
        )
        self._record_sweep(result, accept=accept, dims=dims, coords=coords, expected=expected)
        return result

    def _log_resumable_chunks(self, name: str) -> None:
        """Before a sweep: how many of its chunks an earlier session left finished on disk."""
        folder = self.path / "checkpoints" / name
        if not (folder / "meta.json").exists():
            return
        try:
            meta = json.loads((folder / "meta.json").read_text())
            total = math.ceil(int(meta["n_members"]) / int(meta["chunk_size"]))
        except (OSError, ValueError, KeyError, ZeroDivisionError):
            return
        done = len(list(folder.glob("chunk_*.npz")))
        if done:
            self.log(
                f"sweep '{name}': resuming, {done} of {total} chunk(s) finished on disk,"
                f" {max(total - done, 0)} to run"
            )

    def _record_sweep(
        self,
        result: SweepResult,
        accept: Iterable = (),
        dims: dict[str, Any] | None = None,
        coords: dict[str, Any] | None = None,
        expected=None,
    ) -> None:
        """Store a sweep's arrays, its labels and its status counts."""
        accept = list(accept)
        failed = result.n_failed(accept)
        members = int(result.status.shape[0])
        accepted = [status_name(status_code(s)) for s in accept]
        counts = result.status_counts()
        n_accepted = sum(counts.get(a, 0) for a in accepted if a != "successful")
        pairs = expected.items() if isinstance(expected, dict) else (expected or ())
        expected = {
            k if isinstance(k, str) else status_name(status_code(k)): str(v) for k, v in pairs
        }
        code_of = {status_name(int(c)): int(c) for c in np.unique(result.status)}
        failures = {
            k: n for k, n in counts.items() if k != "successful" and k not in accepted and n
        }
        expected_failures = {
            k: {"members": n, "why": expected[k]} for k, n in failures.items() if k in expected
        }
        unexpected = {k: n for k, n in failures.items() if k not in expected}
        line = f"sweep '{result.name}': {failed}/{members} member(s) failed"
        if accepted and n_accepted:
            line += f", {n_accepted} accepted as the measurement ({', '.join(accepted)})"
        if expected_failures:
            line += "; expected: " + "; ".join(
                f"{v['members']} {k} ({v['why']})" for k, v in expected_failures.items()
            )
        if unexpected:
            line += "; NOT expected: " + "; ".join(
                f"{n} {k} ({status_message(code_of[k])}: {_what_to_do(k)})"
                for k, n in unexpected.items()
            )
        self.log(line)
        grid_dims, output_dims, declared = _sweep_labels(result, dims or {}, coords or {})
        self._check_run_coords(declared)
        self._sweeps[result.name] = {
            "members": members,
            "failed": failed,
            "accepted": accepted,
            "accepted_members": n_accepted,
            "expected_failures": expected_failures,
            "unexpected_failures": int(sum(unexpected.values())),
            "status_counts": counts,
            "grid_shape": list(result.grid_shape),
            "axes": list(result.axes),
            "dims": grid_dims,
            "outputs": {k: v for k, v in output_dims.items()},
            "chunk_size": result.chunk_size,
            "n_devices": result.n_devices,
            "compilations": result.n_compilations,
        }
        for name, (coord_dims, coord_values) in declared.items():
            self._arrays[f"coord.{name}"] = coord_values
            self._labels["coords"][name] = list(coord_dims)
        self._recording_sweep = True
        try:
            self.save_arrays(**result.arrays())
        finally:
            self._recording_sweep = False
        for key in result.arrays():
            self._labels["arrays"].pop(key, None)  # a sweep's arrays are labelled by the sweep
        self._write_summary("running")

    def scalar(self, name: str, value: Any) -> None:
        """A headline number (or string) for ``summary.json`` and the report."""
        self._scalars[name] = jsonable(value)
        self._write_summary("running")

    # -- the check contract (jaxdyn.evidence) ------------------------------------------------
    def _record(self, entry: dict[str, Any], line: str) -> None:
        self._checks = [c for c in self._checks if c["name"] != entry["name"]] + [entry]
        self.log(f"{entry['kind']} {entry['name']}: {line}")
        self._write_summary("running")

    def evidence(self, name: str, evidence: Evidence, *, note: str = "") -> Verdict:
        """Record an evidence check: a paper claim with its :class:`~jaxdyn.evidence.Verdict`.

        ``evidence`` comes from a decision function of :mod:`jaxdyn.evidence`
        (``within``, ``estimate``, ``at_most``, ``ordered``, ...). A ``refuted`` verdict is a
        *finding*: the run still completes, and ``summary.json`` and the report list findings
        first. Whether a negative control (:func:`jaxdyn.runs.negative_control`) is registered
        for this check is recorded as ``negative_control``.
        """
        if not isinstance(evidence, Evidence):
            raise TypeError(f"run.evidence({name!r}) takes an Evidence, got {type(evidence)}")
        entry = {
            "name": name,
            "kind": CheckKind.evidence.value,
            **evidence.to_json(),
            "negative_control": has_negative_control(self.experiment, name),
        }
        if note:
            entry["note"] = note
        line = f"{evidence.verdict.value}"
        if evidence.reason:
            line += f" ({evidence.reason})"
        self._record(entry, line)
        return evidence.verdict

    def not_run(
        self,
        name: str,
        claim: str,
        *,
        needs: dict[str, Any] | None = None,
        full_size: bool = False,
        why: str = "",
    ) -> Verdict:
        """Record evidence check ``name`` (paper claim ``claim``) as ``not_run`` at this config.

        ``needs`` is the config that runs it (``{"proxy": True}``); ``full_size``: it needs
        the full size too (the command drops ``--quick``). The record's ``why`` is generated
        from the run's own config (each needed key with the value it has here, e.g. ``"needs
        proxy=True; this run has proxy=False (--quick)"``), ``why`` adds the experiment's own
        clause (what the check costs, why the quick size cannot decide it), and ``command`` is
        the ``jaxdyn run`` line that runs it, into a sibling of this run's directory. Counted
        apart from ``inconclusive``.
        """
        needs = dict(needs or {})
        config = self._config_values()
        have = ", ".join(f"{k}={config.get(k, '<unset>')!r}" for k in needs)
        parts = []
        if needs:
            parts.append(
                f"needs {', '.join(f'{k}={v!r}' for k, v in needs.items())}; this run has {have}"
            )
        if full_size or not needs:
            parts.append("needs the full size" + ("; this run is --quick" if self.quick else ""))
        elif self.quick:
            parts[-1] += " (--quick)"
        reason = "; ".join(parts)
        if why:
            reason += f": {why}"
        command = f"jaxdyn run {self.experiment}"
        if self.quick and not full_size and needs:
            command += " --quick"
        for k, v in needs.items():
            value = json.dumps(jsonable(v)) if not isinstance(v, str) else v
            assignment = f"{k}={value}".replace(" ", "")
            command += f" --set {shlex.quote(assignment)}"
        folder = re.sub(r"[^A-Za-z0-9.]+", "-", f"{self.path.name}-{name}").strip("-")
        command += f" --out {shlex.quote(str(self.path.parent / folder))}"
        entry = {
            "name": name,
            "kind": CheckKind.evidence.value,
            "claim": claim,
            "verdict": Verdict.not_run.value,
            "reason": reason,
            "why": reason,
            "command": command,
            "negative_control": has_negative_control(self.experiment, name),
        }
        self._record(entry, f"not_run ({reason}; run it: {command})")
        return Verdict.not_run

    def consistency(
        self,
        name: str,
        *,
        expected: Any,
        measured: Any,
        tolerance: float = 0.0,
        relative: bool = False,
        basis: str = "",
        passed: bool | None = None,
        note: str = "",
    ) -> bool:
        """Record a consistency check: an identity, a second computation of one quantity, or a
        structural invariant. Its failure is a bug: the run ends with status ``failed``.

        Numbers pass when ``|measured - expected| <= tolerance`` (times ``|expected|`` when
        ``relative``); ``basis`` says where the tolerance comes from (rounding, solver
        tolerance). ``passed`` decides an invariant that is not an equality (say which in
        ``note``). A NaN never passes.
        """
        if isinstance(expected, str) or isinstance(measured, str):
            raise TypeError(f"consistency check {name!r} takes numbers, not strings")
        if passed is None:
            e = np.asarray(expected, dtype=float)
            m = np.asarray(measured, dtype=float)
            bound = float(tolerance) * np.abs(e) if relative else float(tolerance)
            passed = bool(np.all(np.isfinite(m)) and np.all(np.abs(m - e) <= bound))
        entry = {
            "name": name,
            "kind": CheckKind.consistency.value,
            "expected": jsonable(expected),
            "measured": jsonable(measured),
            "tolerance": jsonable(tolerance),
            "relative": relative,
            "passed": bool(passed),
        }
        if basis:
            entry["basis"] = basis
        if note:
            entry["note"] = note
        self._record(entry, "pass" if passed else "FAIL (a bug: the run will fail)")
        return bool(passed)

    def report(
        self, name: str, *, measured: Any, claim: str = "", prediction: Any = None, note: str = ""
    ) -> None:
        """Record a measured number without a verdict (a claim that is reported, not tested;
        say why in ``note``)."""
        if isinstance(measured, str):
            raise TypeError(f"report {name!r} takes numbers, not strings")
        entry = {"name": name, "kind": CheckKind.report.value, "measured": jsonable(measured)}
        if claim:
            entry["claim"] = claim
        if prediction is not None:
            entry["prediction"] = jsonable(prediction)
        if note:
            entry["note"] = note
        self._record(entry, f"{entry['measured']}")

    def counts(self) -> dict[str, int]:
        """How many checks of each kind and verdict this run has recorded."""
        return check_counts(self._checks)

    def save_figure(self, fig, name: str, *, dpi: int = 120) -> Path:
        """Save a matplotlib figure as ``figures/<name>.png`` atomically and close it.

        A figure with a layout engine (:func:`jaxdyn.plotting.new_figure`'s constrained layout)
        is saved as laid out; one without is cropped to its artists (``bbox_inches="tight"``,
        which draws the figure twice)."""
        import matplotlib.pyplot as plt

        path = self.figures_dir / f"{name}.png"
        if self.writer:
            crop = {} if fig.get_layout_engine() is not None else {"bbox_inches": "tight"}
            atomic_savefig(fig, path, dpi=dpi, **crop)
        plt.close(fig)
        if name not in self._figures:
            self._figures.append(name)
        return path

    # -- summary ---------------------------------------------------------------------------
    def _write_summary(self, status: str, error: str | None = None) -> None:
        self._status = status
        if not self.writer:
            return
        findings = [c for c in self._checks if c.get("verdict") == Verdict.refuted.value]
        summary = {
            "experiment": self.experiment,
            "status": status,
            "counts": check_counts(self._checks),
            "findings": findings,
            "scalars": self._scalars,
            "checks": self._checks,
            "sweeps": self._sweeps,
            "labels": self._labels,
            "failed_members": sum(s["failed"] for s in self._sweeps.values()),
            "figures": [f"figures/{f}.png" for f in self._figures],
            "wall_time_s": round(self.wall_time_s(), 3),
            "sessions": self._sessions,
        }
        if error:
            summary["error"] = error
        atomic_write_text(self.path / "summary.json", json.dumps(jsonable(summary), indent=2))

    def finish(self) -> None:
        """Mark the run complete and drop the sweep checkpoints (results.npz holds them)."""
        if not self.writer:
            return
        if self._arrays:
            atomic_savez(self.path / "results.npz", **self._arrays)
        broken = self.failed_consistency()
        if broken:
            self._write_summary(
                "failed", error="consistency check(s) failed (a bug): " + ", ".join(broken)
            )
        else:
            self._write_summary("complete")
        shutil.rmtree(self.path / "checkpoints", ignore_errors=True)

    def failed_consistency(self) -> list[str]:
        """Names of the consistency checks that failed (each one a bug)."""
        return [
            c["name"]
            for c in self._checks
            if c["kind"] == CheckKind.consistency.value and not c["passed"]
        ]

    def wall_time_s(self) -> float:
        """Seconds of wall time over every session of this run (a resumed run adds up)."""
        return self._earlier_wall_time_s + time.perf_counter() - self._t0

    def fail(self, error: str) -> None:
        """Mark the run failed with ``error`` (an exception in the experiment)."""
        self._write_summary("failed", error=error)

    def interrupt(self) -> None:
        """Mark the run interrupted (its finished sweep chunks stay for ``--resume``)."""
        self._write_summary("interrupted", error="interrupted")


# -- labels -----------------------------------------------------------------------------------
_WHAT_TO_DO = {
    "max_steps_reached": (
        "raise the solver's max_steps or shorten t1, or pass expected= with the reason"
    ),
    "nonfinite": "rerun with EQX_ON_ERROR=raise to stop at the check that failed",
    "dt_min_reached": (
        "the step size collapsed: loosen the tolerances or check the field for a blow-up"
    ),
}


def _what_to_do(status: str) -> str:
    return _WHAT_TO_DO.get(
        status,
        "check the member's inputs; if this outcome is part of the design, pass expected= with"
        " the reason",
    )


def _is_dataarray(value: Any) -> bool:
    return (
        type(value).__name__ == "DataArray" and hasattr(value, "dims") and hasattr(value, "coords")
    )


def _coords(coords: dict[str, Any]) -> dict[str, tuple[tuple[str, ...], np.ndarray]]:
    """``{name: values or (dims, values)}`` as ``{name: (dims, values)}``."""
    out = {}
    for name, value in coords.items():
        if isinstance(value, tuple) and len(value) == 2 and not np.isscalar(value[0]):
            coord_dims, values = tuple(value[0]), np.asarray(value[1])
        else:
            values = np.asarray(value)
            coord_dims = (name,) if values.ndim == 1 else ()
        if values.dtype == object:
            values = values.astype(str)
        if len(coord_dims) != values.ndim:
            raise ValueError(f"coordinate {name!r}: {values.ndim} axes but dims {coord_dims}")
        out[str(name)] = (coord_dims, values)
    return out


_TIME_GRID = re.compile(r"(?:(.+)_)?(ts|times)")


def _same_coord(a, b) -> bool:
    return a[0] == b[0] and a[1].shape == b[1].shape and np.array_equal(a[1], b[1])


def _time_grids(
    values: dict[str, np.ndarray], declared: dict, dims: dict, existing: dict | None = None
) -> dict[str, tuple[str, int]]:
    """A call's time grids: each 1-D array named ``ts``/``times`` or ``<prefix>_ts``, declared
    as the coordinate ``time`` / ``<prefix>_time``: ``{prefix: (name, length)}``. A name the run
    already holds with other values is left alone (the axes stay unnamed, and say so)."""
    out = {}
    existing = existing or {}
    for key, ts in values.items():
        match = _TIME_GRID.fullmatch(key)
        if ts.ndim != 1 or not match or key in dims:
            continue
        prefix = match.group(1) or ""
        name = f"{prefix}_time" if prefix else "time"
        if name in declared or prefix in out:
            continue
        if name in existing and not _same_coord(existing[name], ((name,), ts)):
            continue
        declared[name] = ((name,), ts)
        dims[key] = (name,)
        out[prefix] = (name, ts.shape[0])
    return out


def _time_of(key: str, grids: dict[str, tuple[str, int]]) -> tuple[str, int] | None:
    """The time grid of array ``key``: the one of its prefix, else the unprefixed one."""
    for prefix, grid in grids.items():
        if prefix and key.startswith(f"{prefix}_"):
            return grid
    return grids.get("")


def _label_axes(key: str, arr: np.ndarray, names, declared, skip: int = 0, time=None) -> list:
    """Each axis' dimension name (``None``: unnamed); ``names`` covers the axes after ``skip``.
    ``time`` (a call's time grid: name, length) names a first axis of its length."""
    n = arr.ndim - skip
    if names is not None:
        names = tuple(names)
        if len(names) != n:
            raise ValueError(
                f"{key!r} has {n} axes {arr.shape[skip:]} but dims names {len(names)}: {names}"
            )
        return list(names)
    if n == 1 and key in declared and declared[key][0] == (key,):
        return [key]
    sizes = {}
    for name, (coord_dims, values) in declared.items():
        if coord_dims == (name,):
            sizes.setdefault(values.shape[0], []).append(name)
    out = []
    for axis, size in enumerate(arr.shape[skip:]):
        match = sizes.get(size, [])
        if axis == 0 and time is not None and size == time[1]:
            match = [time[0]]
        out.append(match[0] if len(match) == 1 and match[0] not in out else None)
    return out


def _check_coords(declared, values, labels) -> None:
    for name, (coord_dims, coord_values) in declared.items():
        for key, arr in values.items():
            for axis, dim in enumerate(labels[key]):
                if (
                    dim in coord_dims
                    and arr.shape[axis] != coord_values.shape[coord_dims.index(dim)]
                ):
                    raise ValueError(
                        f"coordinate {name!r} has {coord_values.shape[coord_dims.index(dim)]}"
                        f" values along"
                        f" {dim!r}, array {key!r} {arr.shape[axis]}"
                    )


def _sweep_labels(result: SweepResult, dims: dict[str, Any], coords: dict[str, Any]):
    """A sweep's dimension names: its grid axes (renamed where ``dims`` maps an axis to a
    string), each output's trailing axes, and its declared coordinates."""
    declared = _coords(coords)
    grid_dims = [
        dims.get(axis, axis) if isinstance(dims.get(axis), str) else axis for axis in result.axes
    ]
    unknown = {
        k
        for k, v in dims.items()
        if k not in result.outputs
        and not (isinstance(v, str) and k in result.axes)
        and not (not isinstance(v, str) and k in result.params)
    }
    if unknown:
        raise ValueError(
            f"sweep {result.name!r}: dims for {sorted(unknown)}, which are neither outputs"
            f" {sorted(result.outputs)}, array parameters nor grid axes {list(result.axes)}"
        )
    named = {k: v for k, v in dims.items() if not isinstance(v, str)}
    per_member = {k: v[0] for k, v in result.outputs.items() if v.ndim == 2 and np.all(v == v[:1])}
    grids = _time_grids(per_member, declared, named)  # a time grid output shared by every member
    # an array-valued parameter's own axes are named like an output's (its values stay params)
    params = {k: v for k, v in result.params.items() if k in named and k not in result.outputs}
    outputs = {
        key: _label_axes(key, arr, named.get(key), declared, skip=1, time=_time_of(key, grids))
        for key, arr in {**result.outputs, **params}.items()
    }
    return grid_dims, outputs, declared
