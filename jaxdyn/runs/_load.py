"""Reading a run directory back: its sweeps as labelled arrays, its summary and config."""

from __future__ import annotations

import dataclasses
import json
import re
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
        sweeps: each sweep as an ``xarray.Dataset``: one dimension per grid axis (``seed``, or
            the name the experiment gave it, e.g. ArviZ's ``chain``), then each output's own
            axes by the names the experiment gave them (``time``, ``query``, ``key``, ...),
            with their coordinates; every output a variable, ``status`` and ``status_name``
            variables.
        arrays: the other arrays of ``results.npz`` (those an experiment saved itself), each
            an ``xarray.DataArray`` with the dims and coords given to
            :meth:`jaxdyn.runs.Run.save_arrays` (``.values`` is the NumPy array).
    """

    path: Path
    summary: dict[str, Any]
    config: dict[str, Any]
    sweeps: dict[str, Any]
    arrays: dict[str, Any]

    def sweep_result(self, name: str) -> SweepResult:
        """Sweep ``name`` as a :class:`jaxdyn.sweep.SweepResult` (flat member axis)."""
        return _sweep_results(self.path, self.summary)[name]

    def unlabelled(self) -> list[str]:
        """Every dimension still named ``<array>_<i>`` (no label was given), as
        ``"sweep <name>: <dim>"`` / ``"array <name>: <dim>"``; empty when all are labelled."""
        out = [
            f"sweep {n}: {d}"
            for n, ds in self.sweeps.items()
            for d in ds.dims
            if _ANONYMOUS.fullmatch(str(d))
        ]
        out += [
            f"array {n}: {d}"
            for n, a in self.arrays.items()
            for d in a.dims
            if _ANONYMOUS.fullmatch(str(d))
        ]
        return out


_ANONYMOUS = re.compile(r".*_\d+")


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    file = path / "results.npz"
    if not file.exists():
        return {}
    with np.load(file) as data:
        return {key: data[key] for key in data.files}


def _sweep_keys(name: str, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[str]:
    """The keys of ``results.npz`` that are sweep ``name``'s own (its outputs, params, seed,
    status), not arrays an experiment saved under a name that starts with ``<name>.``."""
    prefix = f"{name}."
    own = [f"{prefix}status", f"{prefix}seed"] + [
        k for k in arrays if k.startswith(f"{prefix}param.")
    ]
    members = arrays[f"{prefix}status"].shape[0]
    candidates = [f"{prefix}{k}" for k in info["outputs"]] if "outputs" in info else list(arrays)
    # An output has one row per member; an array saved over an output's name (by a run written
    # before save_arrays refused that) is read as a saved array instead.
    own += [
        k
        for k in candidates
        if k.startswith(prefix)
        and k not in own
        and k in arrays
        and np.ndim(arrays[k]) >= 1
        and arrays[k].shape[0] == members
    ]
    return [k for k in own if k in arrays]


def _sweep_results(path: Path, summary: dict[str, Any], arrays=None) -> dict[str, SweepResult]:
    arrays = _read_npz(path) if arrays is None else arrays
    out = {}
    for name, info in summary.get("sweeps", {}).items():
        if f"{name}.status" not in arrays:
            continue
        shape, axes = info.get("grid_shape"), info.get("axes")
        out[name] = SweepResult.from_arrays(
            name,
            {k: arrays[k] for k in _sweep_keys(name, info, arrays)},
            grid_shape=None if shape is None else tuple(shape),
            axes=None if axes is None else tuple(axes),
            chunk_size=int(info.get("chunk_size") or 0),
            n_devices=int(info.get("n_devices") or 0),
            n_compilations=int(info.get("compilations") or 0),
        )
    return out


def _coordinates(labels: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, tuple]:
    return {
        name: (tuple(dims), arrays[f"coord.{name}"])
        for name, dims in labels.get("coords", {}).items()
        if f"coord.{name}" in arrays
    }


def _attach(
    dims: tuple[str, ...], shape: tuple[int, ...], coords: dict[str, tuple]
) -> dict[str, tuple]:
    """The coordinates that fit an object of these dims and sizes."""
    size = dict(zip(dims, shape, strict=False))
    return {
        name: (cdims, values)
        for name, (cdims, values) in coords.items()
        if cdims and all(size.get(d) == n for d, n in zip(cdims, values.shape, strict=True))
    }


def _labelled_sweep(ds, info: dict[str, Any], coords: dict[str, tuple]):
    """Rename a sweep Dataset's grid axes and its outputs' ``<output>_<i>`` dims by the
    labels the run recorded, and attach the declared coordinates."""
    import xarray as xr

    grid = dict(zip(info.get("axes", []), info.get("dims", info.get("axes", [])), strict=False))
    outputs = info.get("outputs", {})
    sizes: dict[str, int] = {}

    def new_dims(var: str, dims) -> tuple[str, ...]:
        out = []
        for dim in dims:
            new = grid.get(dim, dim)
            match = re.fullmatch(rf"{re.escape(var)}_(\d+)", str(dim))
            if match and var in outputs and int(match.group(1)) < len(outputs[var]):
                new = outputs[var][int(match.group(1))] or dim
            out.append(new)
        return tuple(out)

    def variable(var: str, da):
        dims = new_dims(var, da.dims)
        fixed = []
        for dim, n in zip(dims, da.shape, strict=False):
            if sizes.setdefault(dim, n) != n:  # two outputs gave one name to axes of other sizes
                dim = f"{var}_{dim}"
            fixed.append(dim)
        return tuple(fixed), da.values, da.attrs

    data = {var: variable(str(var), da) for var, da in ds.data_vars.items()}
    index = {str(c): variable(str(c), ds.coords[c]) for c in ds.coords}
    shape = {
        d: n
        for dims, values, _ in [*data.values(), *index.values()]
        for d, n in zip(dims, np.shape(values), strict=False)
    }
    extra = _attach(tuple(shape), tuple(shape.values()), coords)
    extra = {k: v for k, v in extra.items() if k not in index and k not in data}
    return xr.Dataset(data, coords={**index, **extra}, attrs=ds.attrs)


def _labelled_array(key: str, value: np.ndarray, labels: dict[str, Any], coords: dict[str, tuple]):
    import xarray as xr

    names = labels.get("arrays", {}).get(key) or [None] * value.ndim
    dims = tuple(name or f"{key}_{i}" for i, name in enumerate(names))
    return xr.DataArray(value, dims=dims, coords=_attach(dims, value.shape, coords), name=key)


def load(run_dir: str | Path) -> RunData:
    """Read run directory ``run_dir`` as labelled arrays: its sweeps as ``xarray.Dataset``
    objects (dimensions named after the grid's axes and the outputs' own axes, with their
    coordinates; member status as a variable), every other array as an ``xarray.DataArray``
    with the dims and coords the experiment gave it, its summary and its config.
    ``results.npz`` stays the storage; nothing is written.

    ```python
    run = jaxdyn.runs.load("runs/toy")
    run.sweeps["toy"].y.sel(rate=0.5)           # one time series per seed, over dim "time"
    run.summary["counts"]
    run.unlabelled()                            # dimensions no label named (empty: all named)
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
    flat = _read_npz(path)
    results = _sweep_results(path, summary, flat)
    labels = summary.get("labels", {})
    coords = _coordinates(labels, flat)
    taken = {
        k
        for name, info in summary.get("sweeps", {}).items()
        if name in results
        for k in _sweep_keys(name, info, flat)
    }
    arrays = {
        key: _labelled_array(key, value, labels, coords)
        for key, value in flat.items()
        if key not in taken and not key.startswith("coord.")
    }
    sweeps = {
        name: _labelled_sweep(result.to_xarray(), summary["sweeps"][name], coords)
        for name, result in results.items()
    }
    return RunData(path, summary, config, sweeps, arrays)
