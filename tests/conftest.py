"""Test-session setup: float64 everywhere (tests compare to closed forms at 1e-8), Agg backend,
and runtime type checking of jaxdyn's annotations (jaxtyping's import hook with beartype).

Every module of jaxdyn is imported through the hook (``TYPECHECKED``), so each call of one of
its annotated functions checks argument and return types and array shapes/dtypes.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402
from jaxtyping import install_import_hook  # noqa: E402

jax.config.update("jax_enable_x64", True)

TYPECHECKED = ("jaxdyn",)
install_import_hook(TYPECHECKED, "beartype.beartype").__enter__()

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
sys.path.insert(0, str(REPO_ROOT / "tests"))
