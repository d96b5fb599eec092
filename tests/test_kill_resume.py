"""What the launcher says when a worker of a two-process run is killed (slow): one line naming
the worker, the last checkpointed chunk and the exact --resume command, exit non-zero; running
that command completes the run bitwise equal to an uninterrupted one. A worker that ends after
the run completed leaves it complete."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from test_sweep_processes import _TOY, _children, _cli_env  # noqa: E402

from jaxdyn._cli._parallel import _failure_line  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")


@pytest.mark.slow
def test_a_killed_worker_says_how_to_resume_and_resuming_is_bitwise(tmp_path):
    one = tmp_path / "one"
    ref = subprocess.run(
        [sys.executable, "-m", "jaxdyn", *_TOY, "--processes", "1", "--out", str(one)],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=600,
    )
    assert ref.returncode == 0, ref.stderr[-3000:]

    out = tmp_path / "two"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "jaxdyn", *_TOY, "--processes", "2", "--out", str(out)],
        env=_cli_env(JAXDYN_IMPORT="toy_experiment,slow_chunks", JAXDYN_TEST_CHUNK_DELAY="1.5"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    chunks = out / "checkpoints" / "toy"
    deadline = time.time() + 400
    while time.time() < deadline and launcher.poll() is None:
        if len(list(chunks.glob("chunk_*.npz"))) >= 2:
            break
        time.sleep(0.05)
    workers = _children(launcher.pid)
    assert launcher.poll() is None and len(workers) == 2, "run ended before a worker was killed"
    os.kill(workers[1], signal.SIGKILL)
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 128 + signal.SIGKILL
    lines = [line for line in err.splitlines() if "--resume" in line]
    assert len(lines) == 1, err[-3000:]
    assert all(
        not Path(f"/proc/{w}").exists() or "zombie" in Path(f"/proc/{w}/status").read_text().lower()
        for w in workers
    )  # the other worker was stopped too
    assert (
        not (out / "summary.json").exists()
        or '"complete"' not in (out / "summary.json").read_text()
    )
    line = lines[0]
    finished = sorted(chunks.glob("chunk_*.npz"))
    assert 2 <= len(finished) < 5
    last = int(finished[-1].stem.split("_")[-1])
    assert re.search(rf"worker 1 of 2 \(pid {workers[1]}\) was killed by SIGKILL", line), line
    assert (
        f"last checkpointed chunk: sweep 'toy', chunk {last} ({len(finished)} of 5 finished)"
        in line
    ), line
    command = shlex.split(line.split("continue with: ", 1)[1])
    assert command[0] == "jaxdyn" and command[-1] == "--resume" and str(out) in command

    resumed = subprocess.run(
        [sys.executable, "-m", *command],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"
    with np.load(one / "results.npz") as a, np.load(out / "results.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_worker_ending_after_completion_leaves_the_run_complete(tmp_path, capsys):
    """A signal after the run completed is reported as such, with exit 0; before completion the
    same signal is a failure with the --resume line (the counterfactual)."""
    (tmp_path / "summary.json").write_text(json.dumps({"status": "complete"}))
    report = _failure_line(["run", "toy-blowup", "--out", str(tmp_path)], tmp_path)
    assert report(1, 2, 123, -signal.SIGKILL) == 0
    assert "after the run completed" in capsys.readouterr().err
    (tmp_path / "summary.json").write_text(json.dumps({"status": "running"}))
    assert report(1, 2, 123, -signal.SIGKILL) == 128 + signal.SIGKILL
    err = capsys.readouterr().err
    assert "no sweep chunk checkpointed yet" in err
    assert err.strip().endswith(f"continue with: jaxdyn run toy-blowup --out {tmp_path} --resume")
