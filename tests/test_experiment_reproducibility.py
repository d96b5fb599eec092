"""A registered paper experiment gives identical results.npz on 1 and 8 devices, with chunk
sizes 1 and 64, and after SIGKILL + --resume (the foundation's reproducibility contract)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# Three full CLI runs of a paper experiment (a few minutes on 2 cores): the slow suite.
# The fast suite checks the same contract on a small registered experiment
# (tests/test_cli_runs.py) and on the engine directly (tests/test_sweep_engine.py).
pytestmark = pytest.mark.slow

EXPERIMENT = "pde-ranks"
COMMON = ["--quick", "--sweep", "vmap_width=4"]


def _env(**extra):
    env = dict(os.environ, JAXDYN_CACHE_DIR=os.environ.get("JAXDYN_TEST_CACHE_DIR", "off"))
    env.pop("JAXDYN_IMPORT", None)  # the package's own experiments only
    env.update(extra)
    return env


def _run(out: Path, *extra, **env):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "run", EXPERIMENT, *COMMON, *extra, "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(**env),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _assert_same_results(a: Path, b: Path):
    with np.load(a / "results.npz") as x, np.load(b / "results.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for key in x.files:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    _run(out, "--sweep", "chunk_size=64")
    return out


def test_identical_on_eight_devices_with_chunk_size_one(reference, tmp_path):
    out = tmp_path / "eight"
    _run(out, "--sweep", "chunk_size=1", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    assert '"n_devices": 8' in (out / "config.json").read_text()
    _assert_same_results(reference, out)


def test_identical_after_sigkill_and_resume(reference, tmp_path):
    out = tmp_path / "killed"
    args = [sys.executable, "-m", "jaxdyn", "run", EXPERIMENT, *COMMON, "--sweep", "chunk_size=4"]
    proc = subprocess.Popen(
        [*args, "--out", str(out)],
        env=_env(
            JAXDYN_IMPORT="slow_chunks",
            JAXDYN_TEST_CHUNK_DELAY="0.5",
            PYTHONPATH=os.path.dirname(__file__) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    chunks = out / "checkpoints"
    deadline = time.time() + 400
    while time.time() < deadline and proc.poll() is None:
        if len(list(chunks.glob("*/chunk_*.npz"))) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    resumed = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "run", EXPERIMENT, "--resume", "--out", str(out)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from checkpoints" in resumed.stderr
    _assert_same_results(reference, out)
