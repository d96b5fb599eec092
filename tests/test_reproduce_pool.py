"""``jaxdyn reproduce`` on several cores: a pool of single-process workers that take whole
experiments from one queue, then one report."""

import json
import subprocess
import sys
import textwrap

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
        + ["--out", str(out), "--processes", "2"],
        cwd=tmp_path,
        env={**__import__("os").environ, "POOL_TEST_DIR": str(tmp_path)},
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
    assert all(proc.stderr.count(f"] {n}\n") == 1 for n in names), proc.stderr  # each once
    assert "failed experiments: pool-c" in proc.stderr
    assert (out / "report" / "report.md").exists() and "report:" in proc.stdout
    assert not list(out.glob(".claims-*"))  # the queue is gone
