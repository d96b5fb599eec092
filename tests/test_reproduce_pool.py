"""``jaxdyn reproduce`` on several cores: a pool of single-process workers that take whole
experiments from one queue, then one report."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

_EXPERIMENTS = textwrap.dedent(
    """
    import dataclasses, os, pathlib, time

    import jax

    from jaxdyn.runs import ExperimentConfig, register_experiment


    @dataclasses.dataclass(frozen=True, kw_only=True)
    class C(ExperimentConfig):
        meet: str = ""  # another experiment this one waits for (both must run at once)
        fail: bool = False


    def _body(name, config, run):
        folder = pathlib.Path(os.environ["POOL_TEST_DIR"])
        (folder / f"{name}.started").touch()
        if config.meet:
            deadline = time.monotonic() + 120
            while not (folder / f"{config.meet}.started").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{config.meet} never ran beside {name}")
                time.sleep(0.05)
        if config.fail:
            raise RuntimeError("this experiment fails")
        run.report("pid", measured=os.getpid())
        run.report("process_count", measured=jax.process_count())
        run.report("cores", measured=sorted(os.sched_getaffinity(0)))


    for name, meet, fail in (("pool-a", "pool-b", False), ("pool-b", "pool-a", False),
                             ("pool-c", "", True), ("pool-d", "", False)):
        def body(config, run, name=name):
            _body(name, config, run)

        cls = dataclasses.make_dataclass(
            f"C_{name[-1]}", [("meet", str, dataclasses.field(default=meet)),
                              ("fail", bool, dataclasses.field(default=fail))],
            bases=(C,), frozen=True, kw_only=True)
        register_experiment(name, cls, "test-only: a pool member", paper=False)(body)
    """
)


def test_reproduce_runs_experiments_side_by_side_and_reports_once(tmp_path):
    """Two workers: pool-a and pool-b each wait for the other to start (so they must run at
    the same time), pool-c fails without stopping the others, every experiment runs once in a
    single process, and the launcher writes one report that counts the failure."""
    (tmp_path / "pool_experiments.py").write_text(_EXPERIMENTS)
    out = tmp_path / "out"
    names = ["pool-a", "pool-b", "pool-c", "pool-d"]
    only = [arg for name in names for arg in ("--only", name)]
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "reproduce", "--import", "pool_experiments", *only]
        + ["--out", str(out), "--processes", "2", "--profile"],
        cwd=tmp_path,
        env={
            **os.environ,
            "POOL_TEST_DIR": str(tmp_path),
            "JAXDYN_CACHE_DIR": str(tmp_path / "cache"),
        },
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr  # pool-c failed
    summaries = {n: json.loads((out / n / "summary.json").read_text()) for n in names}
    assert {n: s["status"] for n, s in summaries.items()} == {
        "pool-a": "complete",
        "pool-b": "complete",
        "pool-c": "failed",
        "pool-d": "complete",
    }
    reports = {
        n: {r["name"]: r["measured"] for r in s["checks"]}
        for n, s in summaries.items()
        if n != "pool-c"
    }
    assert all(r["process_count"] == 1 for r in reports.values())
    assert reports["pool-a"]["pid"] != reports["pool-b"]["pid"]  # side by side
    if len(os.sched_getaffinity(0)) >= 2:  # each worker on its own share of the cores
        assert not set(reports["pool-a"]["cores"]) & set(reports["pool-b"]["cores"])
    assert all(proc.stderr.count(f"] {n}\n") == 1 for n in names), proc.stderr  # each once
    assert "failed experiments: pool-c" in proc.stderr
    assert (out / "report" / "report.md").exists() and "report:" in proc.stdout
    assert not list(out.glob(".claims-*"))  # the queue is gone
    # the completed experiments' wall times are kept for the next queue's order
    times = json.loads((tmp_path / "cache" / "reproduce-times.json").read_text())
    assert set(times["full"]) == {"pool-a", "pool-b", "pool-d"}
    # --profile: the time outside the experiments (launcher start-up, report)
    profile = json.loads((out / "profile.json").read_text())
    assert 0 < profile["startup_s"] < profile["wall_s"] and profile["report_s"] >= 0
    assert profile["experiments_s"] > 0


def test_queue_is_longest_first_from_the_last_run_then_the_table(tmp_path):
    """The queue puts the longest experiments first: the last run's wall times where this
    cache folder has them (per size), the benchmark table for the others, the median of the
    known ones for an experiment neither knows; the launcher's order reaches the workers."""
    from jaxdyn._cli._commands import read_queue, write_queue
    from jaxdyn._cli._schedule import QUICK_WALL_S, longest_first, record_times

    names = ["pde-sigmoid", "copy-head-adam", "plugin-x", "copy-head-sgld", "pde-ranks"]
    assert longest_first(names, True, None) == [
        "copy-head-sgld",
        "pde-ranks",
        "plugin-x",  # the median of the other four estimates
        "copy-head-adam",
        "pde-sigmoid",
    ]
    record_times(tmp_path, True, [("pde-sigmoid", 500.0), ("plugin-x", 1.0)])
    record_times(tmp_path, False, [("pde-ranks", 5000.0)])
    assert longest_first(names, True, tmp_path) == [
        "pde-sigmoid",
        "copy-head-sgld",
        "pde-ranks",
        "copy-head-adam",
        "plugin-x",
    ]
    assert longest_first(names, False, tmp_path)[0] == "pde-ranks"
    (tmp_path / "reproduce-times.json").write_text("not json")  # unreadable: the table
    assert longest_first(names, True, tmp_path)[0] == "copy-head-sgld"
    # the pool's queue file, read back by a worker; an experiment it lacks goes last
    claims = tmp_path / "claims"
    claims.mkdir()
    queue = write_queue(claims, names[:4], quick=True)
    assert read_queue(claims, names) == [*queue, "pde-ranks"]
    assert read_queue(tmp_path / "nowhere", names) == names
    assert all(v > 0 for v in QUICK_WALL_S.values())


def _experiment_times() -> dict:
    import json
    from pathlib import Path

    file = Path(__file__).parents[1] / "benchmarks" / "results" / "experiment_wall_times.json"
    return json.loads(file.read_text())


def test_the_default_times_are_the_benchmark_table_of_every_paper_experiment():
    """QUICK_WALL_S is benchmarks/results/experiment_wall_times.json's quick cold times (the
    table of docs/benchmarks.md is generated from it), for every paper experiment."""
    from jaxdyn._cli._schedule import QUICK_WALL_S
    from jaxdyn.runs import list_experiments

    table = {name: row["cold_s"] for name, row in _experiment_times()["quick"].items()}
    assert QUICK_WALL_S == table
    assert set(QUICK_WALL_S) == {e.name for e in list_experiments() if e.paper}


def test_the_full_size_times_are_the_full_size_table_of_every_paper_experiment():
    """FULL_WALL_S is experiment_wall_times.json's full-size wall times, for every paper
    experiment, and a full-size queue without history starts with the longest of them."""
    from jaxdyn._cli._schedule import FULL_WALL_S, longest_first
    from jaxdyn.runs import list_experiments

    table = {name: row["wall_s"] for name, row in _experiment_times()["full"].items()}
    assert FULL_WALL_S == table
    assert set(FULL_WALL_S) == {e.name for e in list_experiments() if e.paper}
    names = sorted(FULL_WALL_S)
    assert longest_first(names, False, None)[0] == max(FULL_WALL_S, key=FULL_WALL_S.get)


def test_worker_cores_split_this_process_cores_into_disjoint_shares(monkeypatch):
    """n workers get n contiguous, disjoint, equal shares of this process's cores (the rest
    unused); nothing is pinned where the cores cannot be split."""
    from jaxdyn.distributed._cores import pinned_to, worker_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5, 7, 8, 9}, raising=False)
    assert worker_cores(2) == [frozenset({3, 5}), frozenset({7, 8})]
    assert worker_cores(5) == [frozenset({c}) for c in (3, 5, 7, 8, 9)]
    assert worker_cores(1) == [None] and worker_cores(6) == [None] * 6
    assert pinned_to(None) is None and callable(pinned_to(frozenset({3})))


def test_one_quick_experiment_runs_in_one_process_unless_processes_are_asked_for(monkeypatch):
    """``auto`` would start one cooperating process per core; one ``--quick`` experiment runs
    in one process instead (its sweeps are too small to divide), unless ``--processes`` or
    ``JAXDYN_LAUNCH`` asks for processes; a quick reproduce of several keeps its pool."""
    import argparse

    from jaxdyn._cli._parallel import _processes
    from jaxdyn.distributed import resolve_processes

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # "auto" counts cores, not accelerators
    monkeypatch.delenv("JAXDYN_LAUNCH", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    cores = len(os.sched_getaffinity(0))

    def args(quick=True, processes=None):
        return argparse.Namespace(quick=quick, processes=processes, cpu_devices=None)

    assert resolve_processes(None, quick=True) == 1 and resolve_processes(None) == cores
    assert _processes(args()) == 1
    assert _processes(args(processes="3")) == 3
    assert _processes(args(processes="auto")) == cores
    assert _processes(args(quick=False)) == cores
    assert _processes(args(), one_experiment=False) == cores  # a quick reproduce's pool
    monkeypatch.setenv("JAXDYN_LAUNCH", '{"processes": 3}')
    assert _processes(args()) == 3


@pytest.mark.slow  # CI's slow contract tests
def test_a_pool_started_before_the_names_are_checked_says_a_bad_name_once(tmp_path):
    """A reproduce of several experiments starts its workers before it lists and checks them
    (they import meanwhile): a bad name then stops the waiting workers, is said once, and
    leaves no folder."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdyn", "reproduce", "--quick", "--processes", "2"]
        + ["--only", "no-such-experiment", "--only", "pde-twisted", "--out", str(out)],
        cwd=tmp_path,
        env={**os.environ, "JAXDYN_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("unknown experiment 'no-such-experiment'") == 1, proc.stderr
    assert "[1/" not in proc.stderr and not out.exists()


def test_a_pool_worker_waits_for_its_launchers_queue(tmp_path):
    """A worker waits for the queue while its launcher (its parent) lives, and no longer than
    asked."""
    import threading
    import time

    from jaxdyn._cli._commands import QUEUE_FILE, wait_for_queue

    def write_later():
        time.sleep(0.3)
        (tmp_path / QUEUE_FILE).write_text("a\n")

    threading.Thread(target=write_later).start()
    start = time.monotonic()
    assert wait_for_queue(tmp_path, wait_s=30.0, launcher_pid=os.getppid())
    assert 0.25 < time.monotonic() - start < 10.0 and (tmp_path / QUEUE_FILE).exists()
    start = time.monotonic()
    assert wait_for_queue(tmp_path / "never", wait_s=0.2, launcher_pid=os.getppid())  # gives up
    assert 0.15 < time.monotonic() - start < 5.0
    start = time.monotonic()  # a launcher that is not (any more) this process's parent: ended
    assert not wait_for_queue(tmp_path / "never", wait_s=30.0, launcher_pid=os.getpid())
    assert time.monotonic() - start < 5.0
