"""Benchmark: one experiment at ``--quick`` as N cooperating processes (``jaxdyn run NAME
--quick --processes N``, ``jax.distributed`` on localhost, each worker on its own share of the
cores) against one process (``--processes 1``, the ``--quick`` default), in the same run, with
the compilation cache warm (each command runs once before it is timed). The results are
identical for any N; this measures what the split costs at quick sizes. Prints one JSON
object and writes benchmarks/results/cooperating_processes.json.

    python benchmarks/bench_cooperating_processes.py [--quick] [--experiments A B ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jaxdyn._atomic import atomic_write_text


def _timed_run(name: str, processes: int, out: Path) -> float:
    """Wall seconds of ``jaxdyn run name --quick --processes processes``; exits with one line
    (the run's last error line) when it fails."""
    shutil.rmtree(out, ignore_errors=True)
    print(f"jaxdyn run {name} --quick --processes {processes}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "run", name, "--quick", "--processes", str(processes)]
        + ["--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"jaxdyn run {name} --processes {processes} failed: {last}")
    print(f"  {seconds:.1f} s", file=sys.stderr, flush=True)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", nargs="+", default=None)
    ap.add_argument("--quick", action="store_true", help="one small experiment (focus-dilution)")
    args = ap.parse_args()
    if args.experiments is None:
        args.experiments = (
            ["focus-dilution"] if args.quick else ["focus-dilution-text", "copy-head-sgld"]
        )
    cores = len(os.sched_getaffinity(0))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.experiments:
            for processes in (1, cores):  # warm the compilation cache for both layouts
                _timed_run(name, processes, Path(tmp, "warm"))
            one = _timed_run(name, 1, Path(tmp, "one"))
            many = _timed_run(name, cores, Path(tmp, "many"))
            rows[name] = {
                "jaxdyn_s": one,  # the --quick default: one process
                "baseline_s": many,  # one cooperating process per core
                "speedup_vs_cooperating": many / one,
                "target_speedup": 1.0,
            }
    result = {
        "benchmark": "cooperating_processes",
        "what": "jaxdyn run NAME --quick, warm: one process against one cooperating process per "
        "core (each on its own core)",
        "quick": args.quick,
        "cores": cores,
        "load_average_1_5_15min": list(os.getloadavg()),
        **rows,
        "target": "the --quick default (one process) is the faster layout",
        "passed": all(r["speedup_vs_cooperating"] > 1 for r in rows.values()),
    }
    print(json.dumps(result))  # one line: benchmarks/run_all.sh reads the last line
    out = Path(__file__).resolve().parent / "results" / "cooperating_processes.json"
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
