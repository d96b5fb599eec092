"""``xla_cpu_setup``: jaxdyn's XLA:CPU options (matrix kernels off Eigen's thread pool; XLA's
elemental emitters when asked for, as the command line does for ``--quick`` runs), set before JAX
starts, by the command line and its workers, never over the user's own ``XLA_FLAGS``."""

import json
import os
import subprocess
import sys

import pytest

EIGEN = "--xla_cpu_multi_thread_eigen=false"
EMITTERS = "--xla_cpu_use_fusion_emitters=false"
BOTH = f"{EIGEN} {EMITTERS}"

_PROBE = """
import json, os, sys
import jax
from jaxdyn.distributed._devices import xla_cpu_setup
mode = sys.argv[1]
if mode == "started":
    jax.numpy.zeros(1).block_until_ready()
elif mode.startswith("cli"):
    from jaxdyn.cli import main
    # parsed, set up, then refused (exit 2) before anything runs
    quick = ["--quick"] if mode == "cli-quick" else []
    assert main(["run", "no-such-experiment", *quick]) == 2
    print(os.environ.get("XLA_FLAGS", ""))
    sys.exit(0)
in_effect = xla_cpu_setup(elemental_emitters=mode != "default")
print(json.dumps([in_effect.get("xla_cpu_multi_thread_eigen"),
                  in_effect.get("xla_cpu_use_fusion_emitters"),
                  os.environ.get("XLA_FLAGS", "")]))
"""


def _probe(mode: str, xla_flags: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAXDYN_IMPORT")}
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "mode, xla_flags, expected",
    [
        # by default only the matrix kernels' option; XLA's fusion emitters stay
        ("default", None, [True, None, EIGEN]),
        ("default", EMITTERS, [True, None, f"{EMITTERS} {EIGEN}"]),
        ("fresh", None, [True, True, BOTH]),
        # other flags are kept; the options are appended
        (
            "fresh",
            "--xla_force_host_platform_device_count=2",
            [True, True, f"--xla_force_host_platform_device_count=2 {BOTH}"],
        ),
        # the user's own setting wins, option by option
        (
            "fresh",
            "--xla_cpu_multi_thread_eigen=true",
            [False, True, f"--xla_cpu_multi_thread_eigen=true {EMITTERS}"],
        ),
        (
            "fresh",
            "--xla_cpu_use_fusion_emitters=true",
            [True, False, f"--xla_cpu_use_fusion_emitters=true {EIGEN}"],
        ),
        ("fresh", BOTH, [True, True, BOTH]),
        (
            "fresh",
            "--xla_cpu_multi_thread_eigen=0",
            [True, True, f"--xla_cpu_multi_thread_eigen=0 {EMITTERS}"],
        ),
        # a bare flag means true
        (
            "fresh",
            "--xla_cpu_use_fusion_emitters",
            [True, False, f"--xla_cpu_use_fusion_emitters {EIGEN}"],
        ),
        # the last of two settings is the one XLA applies
        (
            "fresh",
            f"{EIGEN} --xla_cpu_multi_thread_eigen=true",
            [False, True, f"{EIGEN} --xla_cpu_multi_thread_eigen=true {EMITTERS}"],
        ),
        # too late once JAX has started: nothing changes, and it says so
        ("started", None, [False, False, ""]),
    ],
)
def test_xla_cpu_setup(mode, xla_flags, expected):
    assert json.loads(_probe(mode, xla_flags)) == expected


@pytest.mark.slow  # five CLI start-ups (about a minute): CI runs it with the contract tests
def test_the_command_line_sets_them_unless_the_user_did():
    """``--quick`` runs get the elemental emitters too; the setting a real run used is checked
    in config.json by the cluster tests (tests/test_sweep_processes.py)."""
    assert _probe("cli", None) == EIGEN
    assert _probe("cli-quick", None) == BOTH
    assert _probe("cli-quick", "--xla_cpu_multi_thread_eigen=true") == (
        f"--xla_cpu_multi_thread_eigen=true {EMITTERS}"
    )
    assert _probe("cli", "--xla_cpu_use_fusion_emitters=false") == f"{EMITTERS} {EIGEN}"
