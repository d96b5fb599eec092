"""Reading a run directory back: its sweeps as labelled arrays, its summary and config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..sweep._result import SweepResult
from ._config import ConfigError


@dataclasses.dataclass(frozen=True)
class RunData:
    """A run directory, read back (:func:`load`).

    Attributes:
        path: the run directory.
        summary: ``summary.json`` (status, counts, findings, checks, scalars, sweeps).
        config: ``config.json`` (the resolved config, versions, devices).
        sweeps: each sweep as an ``xarray.Dataset``
            (:meth:`jaxdyn.sweep.SweepResult.to_xarray`): one dimension per grid axis and
            ``seed``, every output a variable, ``status`` a variable.
        arrays: the other arrays of ``results.npz`` (those an experiment saved itself).
    """

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    sweeps: dict[str, Any]
    arrays: dict[str, np.ndarray]

    def sweep_result(self, name: str) -> SweepResult:
        """Sweep ``name`` as a :class:`jaxdyn.sweep.SweepResult` (flat member axis)."""
        return _sweep_results(self.path, self.summary)[name]


def _sweep_results(path: Path, summary: dict[str, Any]) -> dict[str, SweepResult]:
    file = path / "results.npz"
    if not file.exists():
        return {}
    with np.load(file) as data:
        arrays = {key: data[key] for key in data.files}
    out = {}
    for name, info in summary.get("sweeps", {}).items():
        if f"{name}.status" not in arrays:
            continue
        shape, axes = info.get("grid_shape"), info.get("axes")
        out[name] = SweepResult.from_arrays(
            name,
            arrays,
            grid_shape=None if shape is None else tuple(shape),
            axes=None if axes is None else tuple(axes),
            chunk_size=int(info.get("chunk_size") or 0),
            n_devices=int(info.get("n_devices") or 0),
            n_compilations=int(info.get("compilations") or 0),
        )
    return out


def load(run_dir: str | Path) -> RunData:
    """Read run directory ``run_dir``: its sweeps as ``xarray.Dataset`` objects (dimensions
    named after the grid's axes and ``seed``, member status as a variable), its summary, its
    config and its other arrays. ``results.npz`` stays the storage; nothing is written.

    ```python
    run = jaxdyn.runs.load("runs/toy")
    run.sweeps["toy"].y0.sel(rate=0.5)          # one value per seed
    run.summary["counts"]
    ```

    Raises :class:`ConfigError` when ``run_dir`` holds no ``summary.json``.
    """
    path = Path(run_dir)
    if not (path / "summary.json").exists():
        raise ConfigError(f"{path} is not a jaxdyn run directory (no summary.json)")
    summary = json.loads((path / "summary.json").read_text())
    config = {}
    if (path / "config.json").exists():
        config = json.loads((path / "config.json").read_text())
    results = _sweep_results(path, summary)
    arrays: dict[str, np.ndarray] = {}
    if (path / "results.npz").exists():
        with np.load(path / "results.npz") as data:
            arrays = {
                key: data[key]
                for key in data.files
                if not any(key.startswith(f"{name}.") for name in results)
            }
    sweeps = {name: result.to_xarray() for name, result in results.items()}
    return RunData(path, summary, config, sweeps, arrays)
