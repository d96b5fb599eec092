"""What a sweep returns: :class:`SweepResult`, every member's outputs and status on the host."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from .._status import Status, count_by_status, outcome_names, status_code


def _codes(statuses: Iterable) -> np.ndarray:
    return np.array([status_code(s) for s in statuses], dtype=np.int32)


@dataclasses.dataclass
class SweepResult:
    """Everything a sweep produced, on the host, with the member axis first.

    Attributes:
        name: the sweep's name (prefix of its arrays in ``results.npz``).
        params: hyperparameters per member.
        seeds: integer seed per member.
        outputs: the member function's outputs per member (``status`` excluded).
        status: each member's :class:`jaxdyn.Status` as an ``int32`` code; use :meth:`ok`
            and :meth:`has_status` rather than comparing codes.
        grid_shape, axes: the grid's shape and axis names.
        chunk_size: members per compiled call; n_devices: devices it was sharded over.
        n_compilations: sweep programs XLA compiled during the call (0 when jit's cache had them).
        wall_time_s: seconds from the call to the result.
    """

    name: str
    params: dict[str, np.ndarray]
    seeds: np.ndarray
    outputs: dict[str, np.ndarray]
    status: np.ndarray
    grid_shape: tuple[int, ...]
    axes: tuple[str, ...]
    chunk_size: int
    n_devices: int
    n_compilations: int
    wall_time_s: float = 0.0

    def has_status(self, *statuses) -> np.ndarray:
        """Mask of members whose status is one of ``statuses`` (``Status`` items)."""
        return np.isin(self.status, _codes(statuses))

    def ok(self, accept: Iterable = ()) -> np.ndarray:
        """Mask of members that finished with ``Status.successful`` or a status in ``accept``.

        An experiment that measures, say, finite-time blow-up accepts ``Status.blowup``
        (``result.ok(accept=[Status.blowup])``) instead of rewriting member statuses.
        """
        return self.has_status(Status.successful, *accept)

    def n_failed(self, accept: Iterable = ()) -> int:
        """Members that are not :meth:`ok` under ``accept``."""
        return int(np.sum(~self.ok(accept)))

    def status_counts(self) -> dict[str, int]:
        """``{status name: count}`` over all members."""
        return count_by_status(self.status)

    def reshaped(self, key: str) -> np.ndarray:
        """An output (or ``"status"``, or a parameter) reshaped to ``grid_shape + trailing``."""
        if key == "status":
            arr = self.status
        elif key in self.outputs:
            arr = self.outputs[key]
        elif key in self.params:
            arr = self.params[key]
        else:
            raise KeyError(f"sweep '{self.name}' has no output or parameter '{key}'")
        return arr.reshape(self.grid_shape + arr.shape[1:])

    def masked(self, key: str, *, accept: Iterable = (), fill=np.nan) -> np.ndarray:
        """An output with members that are not :meth:`ok` replaced by ``fill`` (NaN), so
        failed members are never averaged in."""
        arr = np.array(self.outputs[key], dtype=float, copy=True)
        arr[~self.ok(accept)] = fill
        return arr

    def select(
        self,
        members,
        grid_shape: tuple[int, ...] | None = None,
        axes: tuple[str, ...] = ("member",),
    ) -> SweepResult:
        """The members picked by ``members`` (a boolean mask, indices or a slice), as a result
        with grid ``grid_shape`` (default: one axis of the picked members) and ``axes``.

        For a sweep that ran several sub-grids as one (one compiled program), to analyse each
        sub-grid on its own.
        """
        index = np.arange(self.status.shape[0])[members]
        shape = (index.size,) if grid_shape is None else tuple(grid_shape)
        if int(np.prod(shape)) != index.size:
            raise ValueError(f"grid_shape {shape} does not hold the {index.size} selected members")
        if len(axes) != len(shape):
            raise ValueError(f"axes {tuple(axes)} do not name the {len(shape)} axes of {shape}")
        return dataclasses.replace(
            self,
            params={k: v[index] for k, v in self.params.items()},
            seeds=self.seeds[index],
            outputs={k: v[index] for k, v in self.outputs.items()},
            status=self.status[index],
            grid_shape=shape,
            axes=tuple(axes),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """Flat ``{"<name>.<key>": array}`` for ``results.npz``."""
        out = {f"{self.name}.{k}": v for k, v in self.outputs.items()}
        out.update({f"{self.name}.param.{k}": v for k, v in self.params.items()})
        out[f"{self.name}.seed"] = self.seeds
        out[f"{self.name}.status"] = self.status
        return out

    @classmethod
    def from_arrays(
        cls,
        name: str,
        arrays: dict[str, np.ndarray],
        *,
        grid_shape: tuple[int, ...] | None = None,
        axes: tuple[str, ...] | None = None,
        chunk_size: int = 0,
        n_devices: int = 0,
        n_compilations: int = 0,
    ) -> SweepResult:
        """The sweep ``name`` from the flat arrays of :meth:`arrays` (``results.npz``).

        Without ``grid_shape`` and ``axes`` (``summary.json`` records them) the members form
        one axis, ``"member"``.
        """
        prefix = f"{name}."
        if f"{prefix}status" not in arrays:
            raise KeyError(f"no sweep '{name}' among the arrays (no '{prefix}status')")
        params, outputs = {}, {}
        for key, value in arrays.items():
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if rest.startswith("param."):
                params[rest[len("param.") :]] = np.asarray(value)
            elif rest not in ("seed", "status"):
                outputs[rest] = np.asarray(value)
        status = np.asarray(arrays[f"{prefix}status"])
        if grid_shape is None or axes is None:
            grid_shape, axes = (int(status.shape[0]),), ("member",)
        return cls(
            name=name,
            params=params,
            seeds=np.asarray(arrays[f"{prefix}seed"]),
            outputs=outputs,
            status=status,
            grid_shape=tuple(int(n) for n in grid_shape),
            axes=tuple(axes),
            chunk_size=chunk_size,
            n_devices=n_devices,
            n_compilations=n_compilations,
        )

    def to_xarray(self):
        """The sweep as an ``xarray.Dataset`` with one dimension per grid axis (``seed`` last).

        Every output is a variable over the grid's dimensions (trailing axes of an output are
        dimensions ``<output>_0``, ``<output>_1``, ...); ``status`` is an ``int32`` variable
        whose ``flag_values`` / ``flag_meanings`` attributes name the codes (``status_name``
        holds the names). A parameter that varies along one axis only is that axis'
        coordinate (``lam`` of ``Grid.product({"lam": ...})``); others, and array-valued
        parameters, are coordinates over the dimensions they span. ``seed`` is the seed
        axis' coordinate.
        """
        import xarray as xr

        dims = tuple(self.axes)

        def variable(key: str, arr: np.ndarray):
            grid = arr.reshape(self.grid_shape + arr.shape[1:])
            return dims + tuple(f"{key}_{i}" for i in range(arr.ndim - 1)), grid

        data = {key: variable(key, arr) for key, arr in self.outputs.items()}
        codes = np.unique(self.status)
        names = outcome_names(Status, codes)
        data["status"] = (
            dims,
            self.status.reshape(self.grid_shape),
            {"flag_values": codes.astype(np.int32), "flag_meanings": " ".join(names)},
        )
        data["status_name"] = (dims, outcome_names(Status, self.status).reshape(self.grid_shape))
        coords = {}
        for key, arr in {**self.params, "seed": self.seeds}.items():
            grid = arr.reshape(self.grid_shape + arr.shape[1:])
            if key in dims and _constant_except(grid, dims.index(key), len(dims)):
                axis = dims.index(key)  # the axis' own values (an array per value is kept)
            elif arr.ndim == 1:
                axis = _axis_of(grid, len(dims))  # e.g. a Grid.zip parameter along "member"
            else:
                axis = None
            if axis is not None:
                index = tuple(slice(None) if a == axis else 0 for a in range(len(dims)))
                extra = tuple(f"{key}_{i}" for i in range(arr.ndim - 1))
                coords[key] = ((dims[axis], *extra), grid[index])
            else:
                coords[key if key not in dims else f"{key}_value"] = variable(key, arr)
        attrs = {"sweep": self.name, "chunk_size": self.chunk_size, "n_devices": self.n_devices}
        return xr.Dataset(data, coords=coords, attrs=attrs)


def _constant_except(grid: np.ndarray, axis: int, n_dims: int) -> bool:
    """Whether ``grid`` is the same along every grid axis but ``axis``."""
    return all(
        np.all(grid == np.take(grid, [0], axis=other)) for other in range(n_dims) if other != axis
    )


def _axis_of(grid: np.ndarray, n_dims: int) -> int | None:
    """The one grid axis along which ``grid`` varies (``None``: several, or none with more than
    one axis)."""
    varying = [
        axis
        for axis in range(n_dims)
        if grid.shape[axis] > 1 and not np.all(grid == np.take(grid, [0], axis=axis))
    ]
    if len(varying) == 1:
        return varying[0]
    if not varying and n_dims == 1:
        return 0
    return None
