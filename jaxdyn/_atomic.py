"""Atomic file writes: write a temporary file in the same directory, then rename over.

A reader (or a resumed run) sees either the old file or the new one, never half of one,
even if the process is killed mid-write.
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_savez(path: str | os.PathLike, **arrays) -> None:
    """A compressed ``.npz`` of ``arrays`` at ``path``, written atomically (keys may contain
    dots; ``np.load`` reads it as it reads ``np.savez_compressed``'s).

    Compressed at zlib's fastest level: a run rewrites its ``results.npz`` each time it adds
    arrays, and numbers in floating point barely compress at any level, while numpy's level 6
    costs several times the time of level 1."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(value), allow_pickle=True)
    atomic_write_bytes(path, buffer.getvalue())


PLOTTING_EVENT = "/jaxdyn/plotting/duration"


def atomic_savefig(fig, path: str | os.PathLike, **kwargs) -> None:
    """Save a matplotlib figure to ``path`` atomically (format from the suffix).

    The time spent drawing it is reported as the ``jax.monitoring`` duration event
    ``/jaxdyn/plotting/duration`` (a run's profile counts it as ``plotting_s``)."""
    import time

    import jax

    start = time.perf_counter()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
    atomic_write_bytes(path, buffer.getvalue())
    jax.monitoring.record_event_duration_secs(PLOTTING_EVENT, time.perf_counter() - start)
