"""Finished sweep chunks on disk: ``<dir>/<sweep name>/chunk_XXXXX.npz`` plus ``meta.json``.

Each chunk is written atomically when it finishes, by the process that computed it, so a
killed sweep resumes from its last finished chunk. ``meta.json`` (written by process 0)
records the grid's fingerprint and the vector width; a resumed sweep whose grid or width
differs is refused rather than silently mixed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np

from .._atomic import atomic_savez, atomic_write_text


class SweepCheckpoints:
    """The checkpoint folder of one sweep (``root=None``: keep nothing on disk)."""

    def __init__(self, root: Path | None, name: str, meta: dict):
        self.dir = None if root is None else Path(root) / name
        self.meta = meta
        self.writer = jax.process_index() == 0

    def stored_chunk_size(self) -> int | None:
        """The chunk size of an earlier, compatible attempt, or ``None``."""
        if self.dir is None or not (self.dir / "meta.json").exists():
            return None
        stored = json.loads((self.dir / "meta.json").read_text())
        for key in ("fingerprint", "vmap_width"):
            if stored.get(key) != self.meta[key]:
                raise ValueError(
                    f"cannot resume sweep '{self.meta['name']}': its {key} differs from the "
                    f"stored one in {self.dir} ({stored.get(key)} != {self.meta[key]})"
                )
        return int(stored["chunk_size"])

    def discard(self) -> None:
        if self.dir is not None and self.writer:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, chunk_size: int) -> None:
        if self.dir is None or not self.writer:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = dict(self.meta, chunk_size=chunk_size)
        atomic_write_text(self.dir / "meta.json", json.dumps(meta, indent=1))

    def path(self, index: int) -> Path:
        return self.dir / f"chunk_{index:05d}.npz"

    def exists(self, index: int) -> bool:
        """Whether chunk ``index`` is finished on disk (as this process sees it)."""
        return self.dir is not None and self.path(index).exists()

    def load(self, index: int):
        """``(outputs, status)`` of a finished chunk, or ``None``."""
        if self.dir is None or not self.path(index).exists():
            return None
        with np.load(self.path(index)) as data:
            outputs = {k[4:]: data[k] for k in data.files if k.startswith("out.")}
            return outputs, data["status"]

    def save(self, index: int, outputs: dict, status: np.ndarray) -> None:
        if self.dir is None:
            return
        arrays = {f"out.{k}": v for k, v in outputs.items()}
        atomic_savez(self.path(index), status=status, **arrays)
