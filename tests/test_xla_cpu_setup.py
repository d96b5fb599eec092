"""``single_threaded_kernels``: XLA's CPU matrix kernels off Eigen's thread pool, set before JAX
starts, by the command line and its workers, never over the user's own ``XLA_FLAGS``."""

import os
import subprocess
import sys

import pytest

FLAG = "--xla_cpu_multi_thread_eigen=false"

_PROBE = """
import os, sys
import jax
from jaxdyn.sweep import single_threaded_kernels
if sys.argv[1] == "started":
    jax.numpy.zeros(1).block_until_ready()
elif sys.argv[1] == "cli":
    from jaxdyn.cli import main
    assert main(["list"]) == 0
    print(os.environ.get("XLA_FLAGS", ""))
    sys.exit(0)
print(single_threaded_kernels(), os.environ.get("XLA_FLAGS", ""), sep="|")
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
        ("fresh", None, f"True|{FLAG}"),
        # other flags are kept; the option is appended
        (
            "fresh",
            "--xla_force_host_platform_device_count=2",
            f"True|--xla_force_host_platform_device_count=2 {FLAG}",
        ),
        # the user's own setting wins
        ("fresh", "--xla_cpu_multi_thread_eigen=true", "False|--xla_cpu_multi_thread_eigen=true"),
        ("fresh", FLAG, f"True|{FLAG}"),
        ("fresh", "--xla_cpu_multi_thread_eigen=0", "True|--xla_cpu_multi_thread_eigen=0"),
        # a bare flag means true
        ("fresh", "--xla_cpu_multi_thread_eigen", "False|--xla_cpu_multi_thread_eigen"),
        # the last of two settings is the one XLA applies
        (
            "fresh",
            f"{FLAG} --xla_cpu_multi_thread_eigen=true",
            f"False|{FLAG} --xla_cpu_multi_thread_eigen=true",
        ),
        # too late once JAX has started: nothing changes, and it says so
        ("started", None, "False|"),
    ],
)
def test_single_threaded_kernels(mode, xla_flags, expected):
    assert _probe(mode, xla_flags) == expected


def test_the_command_line_sets_it_unless_the_user_did():
    """The setting a real run used is checked in config.json by the cluster tests
    (tests/test_sweep_processes.py)."""
    assert _probe("cli", None) == FLAG
    assert _probe("cli", "--xla_cpu_multi_thread_eigen=true") == (
        "--xla_cpu_multi_thread_eigen=true"
    )
