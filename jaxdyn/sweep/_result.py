"""What a sweep returns: :class:`SweepResult`, every member's outputs and status on the host."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from .._status import Status, count_by_status, status_code


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

    def arrays(self) -> dict[str, np.ndarray]:
        """Flat ``{"<name>.<key>": array}`` for ``results.npz``."""
        out = {f"{self.name}.{k}": v for k, v in self.outputs.items()}
        out.update({f"{self.name}.param.{k}": v for k, v in self.params.items()})
        out[f"{self.name}.seed"] = self.seeds
        out[f"{self.name}.status"] = self.status
        return out
