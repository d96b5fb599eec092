"""Grids of sweep members: hyperparameter values times seeds, flattened to one member axis."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping, Sequence

import jax
import numpy as np


def _as_value_array(name: str, values) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == object:
        raise ValueError(f"sweep parameter '{name}': values must form a rectangular numeric array")
    if arr.ndim == 0:
        arr = arr[None]
    if arr.shape[0] == 0:
        raise ValueError(f"sweep parameter '{name}' has no values")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"sweep parameter '{name}' must be numeric, got dtype {arr.dtype}")
    # Match JAX's default precision (float64 only under jax_enable_x64) so inputs never
    # trigger silent down-casts inside the compiled sweep.
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype))


def _as_seeds(seeds, base_seed: int) -> np.ndarray:
    if isinstance(seeds, int | np.integer):
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        return base_seed + np.arange(int(seeds), dtype=np.int64)
    arr = np.asarray(seeds, dtype=np.int64).ravel()
    if arr.size == 0:
        raise ValueError("seeds must not be empty")
    return arr


@dataclasses.dataclass(frozen=True)
class Grid:
    """A flattened set of sweep members.

    Each member is one assignment of hyperparameters plus one integer seed. Members are
    ordered in C order over ``shape``; the seed axis is last. Members that share a seed
    share their PRNG key (common random numbers across hyperparameter values), which makes
    differences between hyperparameter values less noisy.

    Attributes:
        params: name -> array whose leading axis is the member axis (length ``len(grid)``).
        seeds: integer seed of each member.
        shape: the grid's shape, e.g. ``(n_lam, n_delta, n_seeds)`` for a product grid.
        axes: the name of each axis of ``shape``.
    """

    params: dict[str, np.ndarray]
    seeds: np.ndarray
    shape: tuple[int, ...]
    axes: tuple[str, ...]

    @classmethod
    def product(
        cls,
        values: Mapping[str, Sequence | np.ndarray | jax.Array],
        *,
        seeds: int | Sequence[int] = 1,
        base_seed: int = 0,
    ) -> Grid:
        """Cartesian product of the values of each parameter, times the seeds.

        A parameter's values are an array whose leading axis indexes its values, so a value
        may itself be an array (e.g. ``{"pi": [[0.7, 0.3], [0.5, 0.5]]}``).
        """
        arrays = {name: _as_value_array(name, v) for name, v in values.items()}
        seed_values = _as_seeds(seeds, base_seed)
        sizes = [a.shape[0] for a in arrays.values()]
        index = np.array(
            list(itertools.product(*[range(s) for s in sizes], range(len(seed_values)))),
            dtype=np.int64,
        ).reshape(-1, len(sizes) + 1)
        params = {name: arrays[name][index[:, j]] for j, name in enumerate(arrays)}
        return cls(
            params=params,
            seeds=seed_values[index[:, -1]],
            shape=(*sizes, len(seed_values)),
            axes=(*arrays.keys(), "seed"),
        )

    @classmethod
    def zip(
        cls,
        values: Mapping[str, Sequence | np.ndarray | jax.Array],
        *,
        seeds: int | Sequence[int] = 1,
        base_seed: int = 0,
    ) -> Grid:
        """Members given directly: every parameter has the same leading length ``n``.

        The grid is ``n`` members times the seeds (shape ``(n, n_seeds)``). Use this when each
        member carries its own matrices (e.g. one random ``Q`` and ``Sigma0`` per run).
        """
        arrays = {name: _as_value_array(name, v) for name, v in values.items()}
        lengths = {name: a.shape[0] for name, a in arrays.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Grid.zip needs equal leading lengths, got {lengths}")
        n = next(iter(lengths.values())) if lengths else 1
        seed_values = _as_seeds(seeds, base_seed)
        member = np.repeat(np.arange(n), len(seed_values))
        params = {name: a[member] for name, a in arrays.items()}
        return cls(
            params=params,
            seeds=np.tile(seed_values, n),
            shape=(n, len(seed_values)),
            axes=("member", "seed"),
        )

    def __len__(self) -> int:
        return int(self.seeds.shape[0])

    def fingerprint(self) -> str:
        """A hash of every member's values and seed: a resumed sweep must match it."""
        h = hashlib.sha256()
        for name in sorted(self.params):
            arr = np.ascontiguousarray(self.params[name])
            h.update(name.encode())
            h.update(str(arr.dtype).encode())
            h.update(str(arr.shape).encode())
            h.update(arr.tobytes())
        h.update(np.ascontiguousarray(self.seeds).tobytes())
        h.update(str(self.shape).encode())
        return h.hexdigest()[:16]
