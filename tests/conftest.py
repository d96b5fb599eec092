"""Test-session setup: float64 everywhere (tests compare to closed forms at 1e-8), Agg backend,
runtime type checking of jaxdyn's annotations (jaxtyping's import hook with beartype), and one
XLA compilation cache per test session.

The suite runs on every core (``-n auto`` of pytest-xdist in ``pyproject.toml``). The session's
main process creates an empty compilation cache folder, ``$JAXDYN_TEST_CACHE_DIR``, and removes
it at the end; the xdist workers and the CLI subprocesses the tests start
(``JAXDYN_CACHE_DIR``) share it, so a program compiled by one of them is loaded by the others
(every program is stored, jaxdyn's default). No test sees a cache from outside its session.

Each xdist worker is one process, so the jaxdyn runs that tests start use one process each
(``JAXDYN_LAUNCH='{"processes": 1}'`` unless set: ``JAXDYN_LAUNCH='{"processes": 2}'
python -m pytest`` runs them all on two); the default of every core through worker processes
is tested explicitly (``tests/test_sweep_processes.py``).

jaxdyn's XLA:CPU options are set (``jaxdyn.sweep.xla_cpu_setup``: single-threaded matrix kernels,
and XLA's elemental emitters, which compile faster), as the ``jaxdyn`` command line sets them for
``--quick`` runs: tests are quick-sized, and the CLI runs they start inherit the same settings.

Every module of jaxdyn is imported through the hook (``TYPECHECKED``), so each call of one of
its annotated functions checks argument and return types and array shapes/dtypes.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("JAXDYN_LAUNCH", '{"processes": 1}')

import jax  # noqa: E402
from jaxtyping import install_import_hook  # noqa: E402

jax.config.update("jax_enable_x64", True)

TYPECHECKED = ("jaxdyn",)
install_import_hook(TYPECHECKED, "beartype.beartype").__enter__()

from jaxdyn.distributed._devices import xla_cpu_setup  # noqa: E402

xla_cpu_setup(elemental_emitters=True)  # as the CLI's --quick runs (inherited by its subprocesses)

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
sys.path.insert(0, str(REPO_ROOT / "tests"))


def pytest_configure(config):
    if "JAXDYN_TEST_CACHE_DIR" not in os.environ:  # the session's main process
        os.environ["JAXDYN_TEST_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxdyn-test-xla-")
        config.jaxdyn_owned_cache = os.environ["JAXDYN_TEST_CACHE_DIR"]
    jax.config.update("jax_compilation_cache_dir", os.environ["JAXDYN_TEST_CACHE_DIR"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # store every program


def pytest_unconfigure(config):
    owned = getattr(config, "jaxdyn_owned_cache", None)
    if owned:
        shutil.rmtree(owned, ignore_errors=True)
        os.environ.pop("JAXDYN_TEST_CACHE_DIR", None)
