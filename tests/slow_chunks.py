"""Test helper, loaded with ``--import slow_chunks`` (``JAXDYN_IMPORT``): every sweep chunk
checkpoint is followed by a pause of ``JAXDYN_TEST_CHUNK_DELAY`` seconds, so that a test can
kill a sweep between two chunks. Imported by the CLI and its worker processes; the library
itself has no such hook."""

import os
import time

from jaxdyn.sweep import _checkpoints

_DELAY = float(os.environ.get("JAXDYN_TEST_CHUNK_DELAY", "0") or 0)
_save = _checkpoints.SweepCheckpoints.save


def _save_then_wait(self, *args, **kwargs):
    _save(self, *args, **kwargs)
    time.sleep(_DELAY)


if _DELAY > 0:
    _checkpoints.SweepCheckpoints.save = _save_then_wait
