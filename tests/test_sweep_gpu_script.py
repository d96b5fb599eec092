"""benchmarks/gpu.sh --dry-run: the accelerator run is checked on a CPU-only machine."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_script_dry_run_checks_every_benchmark_and_option(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("would run:")]
    assert len(commands) == 5 and any("bench_pde_ranks.py" in c for c in commands)
    assert not (ROOT / "benchmarks" / "gpu_results.jsonl").exists()

    # a copy whose command passes an option the benchmark does not declare fails the check
    copy = tmp_path / "repo"
    (copy / "benchmarks").mkdir(parents=True)
    for script in (ROOT / "benchmarks").glob("bench_*.py"):
        shutil.copy(script, copy / "benchmarks")
    text = (ROOT / "benchmarks" / "gpu.sh").read_text().replace("--chains 10000", "--chainz 10000")
    (copy / "benchmarks" / "gpu.sh").write_text(text)
    broken = subprocess.run(
        ["bash", str(copy / "benchmarks" / "gpu.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert broken.returncode == 1 and "no option --chainz" in broken.stderr
    bad = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--fast"], capture_output=True, timeout=60
    )
    assert bad.returncode == 2
