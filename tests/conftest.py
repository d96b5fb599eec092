"""Test-session setup: float64 everywhere (tests compare to closed forms at 1e-8), Agg backend,
and runtime type checking of jaxdyn's annotations (jaxtyping's import hook with beartype).

Every jaxdyn module listed in ``TYPECHECKED`` is imported through the hook, so each call of one
of its annotated functions checks argument and return types and array shapes/dtypes.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402
from jaxtyping import install_import_hook  # noqa: E402

jax.config.update("jax_enable_x64", True)

TYPECHECKED = (
    "jaxdyn.copyhead",
    "jaxdyn.experiments.copy_head",
    "jaxdyn._numerics",
    "jaxdyn._status",
    "jaxdyn._validation",
    "jaxdyn.attention",
    "jaxdyn.cli",
    "jaxdyn._cli",
    "jaxdyn.data",
    "jaxdyn.distributed",
    "jaxdyn.experiments.focus_dilution",
    "jaxdyn.experiments.pde_gaussian",
    "jaxdyn.experiments.pde_particles",
    "jaxdyn.gradflow",
    "jaxdyn.meanfield._analysis",
    "jaxdyn.meanfield._blowup",
    "jaxdyn.meanfield._causal",
    "jaxdyn.meanfield._closed_forms",
    "jaxdyn.meanfield._clusters",
    "jaxdyn.meanfield._cone",
    "jaxdyn.meanfield._design",
    "jaxdyn.meanfield._energy",
    "jaxdyn.meanfield._fields",
    "jaxdyn.meanfield._gradient_flow",
    "jaxdyn.meanfield._heads",
    "jaxdyn.meanfield._meanfield_limit",
    "jaxdyn.meanfield._paper",
    "jaxdyn.meanfield._particles",
    "jaxdyn.meanfield._published_euler",
    "jaxdyn.meanfield._ranks",
    "jaxdyn.meanfield._select",
    "jaxdyn.meanfield._simulate_gaussian",
    "jaxdyn.meanfield._simulate_particles",
    "jaxdyn.meanfield._sinkhorn",
    "jaxdyn.meanfield._solve_common",
    "jaxdyn.meanfield._stability",
    "jaxdyn.meanfield._wrappers",
    "jaxdyn.plotting",
    "jaxdyn.runs",
    "jaxdyn.sweep",
)
install_import_hook(TYPECHECKED, "beartype.beartype").__enter__()

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
sys.path.insert(0, str(REPO_ROOT / "tests"))
