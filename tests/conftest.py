"""Test-session setup: float64 everywhere (tests compare to closed forms at 1e-8), Agg backend."""

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
sys.path.insert(0, str(REPO_ROOT / "tests"))
