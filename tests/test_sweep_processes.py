"""One sweep over several processes (jax.distributed on localhost): identical results, resume
after a killed worker, the run directory written once."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.distributed import free_port
from jaxdyn.distributed._launch import LaunchConfig
from jaxdyn.sweep import SweepOptions, run_sweep

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from test_sweep_segmented import _Halving  # noqa: E402
from toy_experiment import toy_member  # noqa: E402

from jaxdyn.sweep import Grid  # noqa: E402

PLAIN_OPTIONS = dict(vmap_width=4, chunk_size=4)
SEGMENTED_OPTIONS = dict(vmap_width=8, chunk_size=16, segment_steps=5)

_WORKER = textwrap.dedent(
    """
    import sys
    import jax
    from jaxdyn.distributed import initialize
    initialize()
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", sys.argv[3])
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import test_sweep_processes as t
    from jaxdyn.sweep import run_sweep, SweepOptions
    plain, segmented = t.sweeps(sys.argv[2])
    np.savez(f"{sys.argv[2]}/process{jax.process_index()}.npz", processes=jax.process_count(),
             **{f"plain.{k}": v for k, v in plain.outputs.items()}, plain_status=plain.status,
             **{f"seg.{k}": v for k, v in segmented.outputs.items()}, seg_status=segmented.status)
    """
)


def _toy_grid():
    return Grid.product({"rate": [-1.0, 0.5, 1.0, 2.0, 4.0], "t1": [1.0]}, seeds=4)


def sweeps(checkpoint_dir=None):
    """A plain sweep with root-found diffrax events and a segmented one (loops of very
    different lengths), both checkpointed."""
    plain = run_sweep(
        toy_member,
        _toy_grid(),
        name="plain",
        checkpoint_dir=checkpoint_dir,
        options=SweepOptions(**PLAIN_OPTIONS),
    )
    starts = np.array([2 ** (1 + i % 12) for i in range(36)] + [27, 871, 77031, 97], np.int64)
    segmented = run_sweep(
        _Halving(),
        Grid.zip({"x": starts}),
        name="seg",
        checkpoint_dir=checkpoint_dir,
        options=SweepOptions(**SEGMENTED_OPTIONS),
    )
    return plain, segmented


def _launch(script_args, n=2, **extra_env):
    port = free_port()
    procs = []
    for i in range(n):
        env = dict(os.environ, **extra_env)
        place = LaunchConfig.from_environ(env).replace(
            coordinator=f"127.0.0.1:{port}", num_processes=n, process_id=i
        )
        place.to_environ(env)
        env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(
            subprocess.Popen(
                [sys.executable, *script_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


@pytest.mark.slow  # two launched processes: in .ci/run's contract step
def test_sweeps_over_two_processes_are_bitwise_one_process(tmp_path):
    procs = _launch(["-c", _WORKER, str(TESTS), str(tmp_path), str(tmp_path / "xla-cache")])
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    plain, segmented = sweeps()  # one process, no checkpoints
    for i in range(2):
        with np.load(tmp_path / f"process{i}.npz") as got:
            assert int(got["processes"]) == 2
            np.testing.assert_array_equal(got["plain_status"], plain.status)
            np.testing.assert_array_equal(got["seg_status"], segmented.status)
            for key, value in plain.outputs.items():
                np.testing.assert_array_equal(got[f"plain.{key}"], value, err_msg=key)
            for key, value in segmented.outputs.items():
                np.testing.assert_array_equal(got[f"seg.{key}"], value, err_msg=key)
    # both processes computed and checkpointed chunks; the events fired in both sweeps
    assert len(list((tmp_path / "plain").glob("chunk_*.npz"))) == 5
    assert len(list((tmp_path / "seg").glob("chunk_*.npz"))) == 3
    assert plain.has_status(Status.blowup).any() and plain.ok().any()
    assert segmented.outputs["n"].max() > 20 * SEGMENTED_OPTIONS["segment_steps"]


def _cli_env(**extra):
    env = dict(
        os.environ,
        JAXDYN_IMPORT="toy_experiment",
        JAXDYN_CACHE_DIR=os.environ.get("JAXDYN_TEST_CACHE_DIR", "off"),
    )
    env.update(extra)
    env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
    return env


_TOY = ["run", "toy-blowup", "--quick", "--sweep", "vmap_width=2", "--sweep", "chunk_size=2"]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


# A killed worker, the other worker stopped, and the resume bitwise: tests/test_kill_resume.py.


def _same_results(a: Path, b: Path):
    with np.load(a / "results.npz") as x, np.load(b / "results.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for key in x.files:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def _run_cli(*args, timeout=900):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxdyn", *args],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.parametrize(
    "experiment, processes",
    [("pde-ranks", "2"), ("focus-dilution-ablation", "auto")],  # ablation: eigh in members
)
def test_paper_experiment_on_several_processes_is_bitwise_one_process(
    tmp_path, experiment, processes
):
    _run_cli("run", experiment, "--quick", "--processes", "1", "--out", str(tmp_path / "one"))
    _run_cli(
        "run", experiment, "--quick", "--processes", processes, "--out", str(tmp_path / "many")
    )
    _same_results(tmp_path / "one", tmp_path / "many")


def test_bad_process_counts_exit_2_before_anything_starts(tmp_path, capsys, monkeypatch):
    from jaxdyn.cli import main

    monkeypatch.setenv("JAXDYN_IMPORT", "toy_experiment")
    for bad in ("0", "-2", "many"):
        out = tmp_path / bad
        assert main(["run", "toy-blowup", "--processes", bad, "--out", str(out)]) == 2
        assert "--processes" in capsys.readouterr().err
        assert not out.exists()


@pytest.mark.slow  # fast: the rule (test_resolve_processes_...)
def test_run_experiment_from_python_uses_every_core_by_default(tmp_path, monkeypatch):
    """``jaxdyn.runs.run_experiment`` starts worker processes by default (``"auto"``: one
    per core; two here when the machine has one core), with results bitwise those of one
    process; an experiment registered in ``__main__`` runs in the calling process."""
    import dataclasses

    import toy_experiment

    import jaxdyn.distributed
    from jaxdyn.runs import ConfigError, register_experiment, run_experiment

    monkeypatch.delenv("JAXDYN_LAUNCH", raising=False)
    monkeypatch.setenv("JAXDYN_CACHE_DIR", str(tmp_path / "xla"))
    auto = jaxdyn.distributed.resolve_processes(None)
    if auto < 2:
        monkeypatch.setenv("JAXDYN_LAUNCH", '{"processes": 2}')
    spawned = []
    launch = jaxdyn.distributed.launch_local

    def counting_launch(argv, n, **kw):
        spawned.append(n)
        return launch(argv, n, **kw)

    monkeypatch.setattr(jaxdyn.distributed, "launch_local", counting_launch)
    small = {"seeds": 2}  # the quick size, as a full-size run
    many = run_experiment("toy-blowup", out=tmp_path / "many", overrides=small)
    one = run_experiment("toy-blowup", out=tmp_path / "one", overrides=small, processes=1)
    assert spawned == [max(auto, 2)]
    # a quick run asks for no processes: it runs here (its sweeps are too small to divide)
    quick = run_experiment("toy-blowup", out=tmp_path / "quick", quick=True)
    assert spawned == [max(auto, 2)]
    _same_results(quick, one)
    _same_results(one, many)

    def local(config, run):
        toy_experiment.run_toy(dataclasses.replace(config, rates=(0.5,)), run)

    local.__module__ = "__main__"
    register_experiment("toy-main", toy_experiment.ToyConfig, "test-only", paper=False)(local)
    run_experiment("toy-main", out=tmp_path / "main", quick=True, processes=2)
    assert spawned == [max(auto, 2)]  # ran here: workers could not import __main__
    with pytest.raises(ConfigError, match="processes"):
        run_experiment("toy-blowup", out=tmp_path / "bad", quick=True, processes="many")
    assert not (tmp_path / "bad").exists()


def test_resolve_processes_one_rule_for_the_cli_and_python(monkeypatch):
    """``jaxdyn.distributed.resolve_processes``: explicit value, else the launch
    configuration's ``processes`` (``JAXDYN_LAUNCH``), else one process when the CPU is split
    into in-process devices, else one per core."""
    import os

    from jaxdyn.distributed import resolve_processes

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # "auto" counts cores, not accelerators
    monkeypatch.delenv("JAXDYN_LAUNCH", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert resolve_processes(None) == cores
    assert resolve_processes("3") == 3 and resolve_processes(2) == 2
    assert resolve_processes(None, cpu_devices=True) == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    assert resolve_processes(None) == 1
    assert resolve_processes("auto") == cores  # asked for explicitly
    monkeypatch.setenv("JAXDYN_LAUNCH", '{"processes": 3}')
    assert resolve_processes(None) == 3
    with pytest.raises(ValueError, match="processes"):
        resolve_processes("many")


def _port_in_cluster_range() -> int:
    """A free port in the range jax derives cluster coordinator ports from (61440-65535)."""
    import random
    import socket

    for port in random.Random().sample(range(61440, 65536), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 61440-65535")


def _cluster_env(kind: str, port: int, rank: int, n: int) -> dict:
    """What SLURM's ``srun`` or Open MPI's ``mpirun`` give each task of a job on one node; jax
    (``jax.distributed.initialize()`` without arguments) derives the coordinator
    ``localhost:port`` from the job id."""
    k = port - 61440
    if kind == "slurm":
        return {
            "SLURM_JOB_ID": str(k + 4096 * 7),
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_NTASKS": str(n),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
        }
    return {
        "OMPI_MCA_orte_hnp_uri": f"{(k + 4096 * 3) * 4096}.0;tcp://127.0.0.1:12345",
        "OMPI_COMM_WORLD_SIZE": str(n),
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
    }


@pytest.mark.slow  # two launched processes each: in .ci/run's contract step
@pytest.mark.parametrize("cluster", ["slurm", "ompi"])
def test_a_cluster_job_step_runs_one_sweep_bitwise_one_process(tmp_path, cluster):
    """``srun python -m jaxdyn.distributed run ...`` (docs/scaling.md) on one node: no jaxdyn
    coordinator variables, jax detects the cluster from its environment."""
    _run_cli(*_TOY, "--processes", "1", "--out", str(tmp_path / "one"))
    port, n = _port_in_cluster_range(), 2
    inherited = ("XLA_FLAGS", "JAXDYN_LAUNCH")
    base = {
        k: v
        for k, v in _cli_env().items()
        if k not in inherited and not k.startswith(("SLURM_", "OMPI_"))
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "jaxdyn.distributed", *_TOY, "--out", str(tmp_path / "job")],
            env=dict(base, **_cluster_env(cluster, port, rank, n)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(n)
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            p.kill()
    config = json.loads((tmp_path / "job" / "config.json").read_text())
    assert config["process_count"] == n
    # each task set jaxdyn's XLA:CPU options itself (its environment had no XLA_FLAGS)
    assert config["xla_flags"] == (
        "--xla_cpu_multi_thread_eigen=false --xla_cpu_use_fusion_emitters=false"
    )
    _same_results(tmp_path / "one", tmp_path / "job")
