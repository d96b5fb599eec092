"""The CLI and the run-directory contract: errors, config resolution, reports, kill + resume."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.cli import main
from jaxdyn.runs import (
    ConfigError,
    ExperimentConfig,
    get_experiment,
    register_experiment,
    resolve_config,
)

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


@pytest.fixture(autouse=True, scope="module")
def _toy_experiment_importable():
    """This module's in-process ``main`` calls load the toy experiment (``JAXDYN_IMPORT``) and
    use the session's compilation cache. Set for these tests only: other modules' CLI runs,
    collected in the same process, must not inherit an import of a module they cannot see."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JAXDYN_IMPORT", "toy_experiment")
        mp.setenv("JAXDYN_CACHE_DIR", os.environ.get("JAXDYN_TEST_CACHE_DIR", "off"))
        yield


def _cli_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
    env["JAXDYN_IMPORT"] = "toy_experiment"
    env["JAXDYN_CACHE_DIR"] = os.environ.get("JAXDYN_TEST_CACHE_DIR", "off")
    env.update(extra)
    return env


def _jaxdyn(*args, timeout=300, **env):
    return subprocess.run(
        [sys.executable, "-m", "jaxdyn", *args],
        capture_output=True,
        text=True,
        env=_cli_env(**env),
        timeout=timeout,
    )


def test_unknown_key_exits_2_with_one_line_and_no_run_directory(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", "toy-blowup", "--set", "bogus=1", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "bogus" in err
    assert not out.exists()


def test_unknown_experiment_exits_2_and_suggests(tmp_path, capsys):
    code = main(["run", "toy-blowpu", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "unknown experiment 'toy-blowpu'" in err and "toy-blowup" in err
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_wrong_type_and_invalid_science_value_exit_2(tmp_path, capsys):
    assert main(["run", "toy-blowup", "--set", "t1=abc", "--out", str(tmp_path / "a")]) == 2
    assert "t1" in capsys.readouterr().err
    assert main(["run", "toy-blowup", "--set", "t1=-1", "--out", str(tmp_path / "b")]) == 2
    assert "t1 must be positive" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_set_parses_lists_floats_bools_and_toml_layers(tmp_path):
    cls = get_experiment("toy-blowup").config_cls
    cfg = resolve_config(
        cls, experiment="toy-blowup", overrides=["rates=[0.6,0.3,0.1]", "t1=0.5", "x64=false"]
    )
    assert cfg.rates == (0.6, 0.3, 0.1) and cfg.t1 == 0.5 and cfg.x64 is False
    toml = tmp_path / "c.toml"
    toml.write_text("t1 = 2.0\nseeds = 3\n")
    cfg = resolve_config(
        cls, experiment="toy-blowup", quick=True, toml_path=toml, overrides=["seeds=5"]
    )
    assert cfg.t1 == 2.0 and cfg.seeds == 5  # --set wins over the file, the file over --quick
    with pytest.raises(ConfigError, match="expected list of float"):
        resolve_config(cls, experiment="toy-blowup", overrides=["rates=0.5"])


def test_quick_runs_use_narrow_groups_only_after_the_wide_ones_lost_narrow_after(
    tmp_path, monkeypatch
):
    """A quick run's sweeps take ``QUICK_SWEEP_OPTIONS`` (``narrow_after = 2^19``: short
    one-off sweeps do not earn back a narrower width's compilation); a full-size run the
    library default (``0``: straggler-free); ``--sweep`` wins over both, and so does an
    experiment's own value, even when it equals the library default."""
    from jaxdyn.runs import _registry
    from jaxdyn.runs._execute import QUICK_SWEEP_OPTIONS, prepare_run
    from jaxdyn.sweep import SweepOptions

    quick_value = QUICK_SWEEP_OPTIONS["narrow_after"]
    assert SweepOptions().narrow_after == 0 and quick_value > 0
    quick = prepare_run("toy-blowup", out=tmp_path / "q", quick=True)
    full = prepare_run("toy-blowup", out=tmp_path / "f")
    chosen = prepare_run("toy-blowup", out=tmp_path / "c", quick=True, sweep=["narrow_after=7"])
    assert quick.options.narrow_after == quick_value
    assert full.options.narrow_after == 0 and chosen.options.narrow_after == 7
    assert not any(tmp_path.iterdir())  # prepare_run creates nothing

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    toy = get_experiment("toy-blowup")
    for name, sweep in (
        ("toy-own-zero", {"narrow_after": 0, "vmap_width": 4}),
        ("toy-own-options", SweepOptions(vmap_width=4)),
        ("toy-other-option", {"vmap_width": 4}),
    ):
        register_experiment(name, toy.config_cls, "test", paper=False, sweep=sweep)(toy.fn)
        options = prepare_run(name, out=tmp_path / name, quick=True).options
        expected = quick_value if name == "toy-other-option" else 0
        assert (options.narrow_after, options.vmap_width) == (expected, 4), name


@pytest.mark.slow
def test_run_writes_the_run_directory_contract(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 0
    for name in ["config.json", "results.npz", "summary.json", "log.txt"]:
        assert (out / name).exists(), name
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["seeds"] == 2 and config["quick"] is True
    assert "jax_version" in config and config["devices"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["closed_form"]["kind"] == "consistency" and checks["closed_form"]["passed"]
    assert checks["event_time"]["passed"] and summary["counts"]["consistency_failed"] == 0
    blowup = checks["blowup_members"]
    assert blowup["kind"] == "evidence" and blowup["verdict"] == "holds"
    assert blowup["negative_control"] and blowup["error_model"]["name"] == "exact"
    # r * y0 > 1 blows up before t1 = 1: those members are counted and excluded.
    with np.load(out / "results.npz") as data:
        status = data["toy.status"]
        rate, y0, y = data["toy.param.rate"], data["toy.y0"], data["toy.y"]
    np.testing.assert_array_equal(status == Status.code(Status.blowup), rate * y0 > 1.0)
    # the stored trajectories against the closed form y0 / (1 - r y0 t), t = 0, 0.1, ..., 1:
    # a local error of rtol = 1e-8 per unit time, amplified by the variational factor
    # (y / y0)^2 of dy/dt = r y^2, with a factor 100 for the error constant
    ok = status == Status.code(Status.successful)
    t = np.linspace(0.0, 1.0, 11)
    exact = y0[ok, None] / (1.0 - rate[ok, None] * y0[ok, None] * t)
    bound = 100 * 1e-8 * np.abs(exact) * (exact / y0[ok, None]) ** 2
    assert ok.sum() >= 4 and np.all(np.abs(y[ok] - exact) <= bound)
    # blow-up is the toy's accepted outcome: no member failed
    assert summary["sweeps"]["toy"]["accepted"] == ["blowup"]
    assert summary["failed_members"] == 0 == summary["sweeps"]["toy"]["failed"]
    assert summary["sweeps"]["toy"]["status_counts"]["blowup"] == int(np.sum(rate * y0 > 1))
    assert not (out / "checkpoints").exists()
    # An existing run directory is not silently overwritten.
    assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 2


def test_report_collects_runs_into_markdown_and_html(tmp_path):
    out = tmp_path / "runs" / "toy"
    assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 0
    report = tmp_path / "report"
    assert main(["report", str(tmp_path / "runs"), "--out", str(report)]) == 0
    md = (report / "report.md").read_text()
    assert "toy-blowup" in md and "closed_form" in md
    assert "<table>" in (report / "report.html").read_text()
    assert main(["report", str(tmp_path / "nothing"), "--out", str(report)]) == 2


def _wait_for_chunks(directory: Path, n: int, proc, timeout=240):
    start = time.time()
    while time.time() - start < timeout:
        if len(list(directory.glob("chunk_*.npz"))) >= n:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


_RESUME_ARGS = ["run", "toy-blowup", "--sweep", "chunk_size=4", "--sweep", "vmap_width=4"]


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory):
    full = tmp_path_factory.mktemp("full") / "run"
    assert _jaxdyn(*_RESUME_ARGS, "--out", str(full)).returncode == 0
    return full


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
@pytest.mark.slow
def test_killed_run_resumes_to_identical_results(tmp_path, sig, uninterrupted_run):
    args = _RESUME_ARGS
    full = uninterrupted_run

    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxdyn", *args, "--out", str(out)],
        env=_cli_env(JAXDYN_IMPORT="toy_experiment,slow_chunks", JAXDYN_TEST_CHUNK_DELAY="1.0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert _wait_for_chunks(out / "checkpoints" / "toy", 2, proc), proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "--resume" in err
    # summary.json exists from the start: "running" when killed outright, else "interrupted"
    summary = json.loads((out / "summary.json").read_text())
    killed_status = "running" if sig == signal.SIGKILL else "interrupted"
    assert summary["status"] == killed_status
    if sig == signal.SIGINT:
        assert err.count("jaxdyn: interrupted") == 1  # one message per interruption
        assert "interrupted after" in (out / "log.txt").read_text()
    finished = len(list((out / "checkpoints" / "toy").glob("chunk_*.npz")))
    assert 2 <= finished < 5

    resumed = _jaxdyn("run", "toy-blowup", "--resume", "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{finished} chunk(s) resumed" in resumed.stderr
    # the resumption is logged before the sweep runs, and the wall time adds up
    log = resumed.stderr
    assert f"resuming: session 2; the previous one ended {killed_status}" in log
    announced = log.index(f"sweep 'toy': resuming, {finished} of 5 chunk(s) finished on disk")
    assert announced < log.index(f"{finished} chunk(s) resumed")
    after = json.loads((out / "summary.json").read_text())
    assert after["sessions"] == 2 and after["status"] == "complete"
    assert after["wall_time_s"] > summary["wall_time_s"] > 0
    with np.load(full / "results.npz") as a, np.load(out / "results.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


def test_resume_refuses_a_changed_config(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 0
    assert main(["run", "toy-blowup", "--resume", "--out", str(out), "--set", "t1=3.0"]) == 2


def test_an_experiment_carries_its_report_title_and_docs_link():
    register_experiment(
        "test-titled",
        _PrecisionConfig,
        "test-only: a titled experiment. More words.",
        title="A titled experiment",
        docs="extending.md#your-own-experiment",
        paper=False,
    )(_record_precision)
    titled = get_experiment("test-titled")
    assert (titled.title, titled.docs) == (
        "A titled experiment",
        "extending.md#your-own-experiment",
    )
    # the default title is the description's first sentence
    assert get_experiment("test-precision").title == "test-only: records its dtype"
    assert get_experiment("toy-blowup").docs == ""
    for bad in ("extending", "/abs.md", "page.md#", "a page.md"):
        with pytest.raises(ValueError, match="docs must be a docs page"):
            register_experiment("test-bad-docs", _PrecisionConfig, "x", docs=bad)


def test_list_shows_registered_experiments(capsys):
    assert main(["list"]) == 0
    assert "toy-blowup" in capsys.readouterr().out


_ERROR_MODE_PROBE = """
import sys
from jaxdyn.cli import main
assert "equinox" not in sys.modules  # the command line comes first
sys.argv = ["jaxdyn", "list"]
assert main() == 0
import jax, equinox as eqx
program = jax.jit(lambda x: eqx.error_if(x, x < 0, "negative")).lower(1.0)
print("callback" in program.as_text())
"""


@pytest.mark.slow  # CI's slow contract tests run it; kept out of the fast suite for its time
def test_the_command_line_decides_what_a_failed_error_if_does(monkeypatch, capsys):
    """Every ``jaxdyn`` command runs ``eqx.error_if`` as ``nan`` (no host callback in the
    program, so the persistent cache keeps it) unless ``EQX_ON_ERROR`` is set, through the
    environment equinox reads at import (never equinox's module state); a call of ``main``
    from Python leaves its process's mode and environment alone."""
    monkeypatch.delenv("EQX_ON_ERROR", raising=False)
    assert main(["list"]) == 0 and "EQX_ON_ERROR" not in os.environ
    capsys.readouterr()
    env = _cli_env()
    env.pop("EQX_ON_ERROR", None)
    probe = [sys.executable, "-c", _ERROR_MODE_PROBE]
    nan = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=300)
    assert nan.returncode == 0 and nan.stdout.strip().endswith("False"), nan.stderr
    raised = subprocess.run(
        probe, capture_output=True, text=True, env=dict(env, EQX_ON_ERROR="raise"), timeout=300
    )
    assert raised.returncode == 0 and raised.stdout.strip().endswith("True"), raised.stderr


@pytest.mark.slow
def test_run_results_identical_on_one_and_eight_devices_and_chunk_sizes(tmp_path):
    """The toy's event root finding cannot trace under shard_map (diffrax #765): the engine
    falls back to per-device dispatch, and results stay bitwise identical."""
    runs = {
        "one": ([], ["--sweep", "chunk_size=64"]),
        "eight": (["--xla_force_host_platform_device_count=8"], ["--sweep", "chunk_size=1"]),
    }
    for name, (flags, extra) in runs.items():
        proc = _jaxdyn(
            "run",
            "toy-blowup",
            "--sweep",
            "vmap_width=4",
            *extra,
            "--out",
            str(tmp_path / name),
            XLA_FLAGS=" ".join(flags),
        )
        assert proc.returncode == 0, proc.stderr
    config = json.loads((tmp_path / "eight" / "config.json").read_text())
    assert config["n_devices"] == 8
    with (
        np.load(tmp_path / "one" / "results.npz") as a,
        np.load(tmp_path / "eight" / "results.npz") as b,
    ):
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.slow  # sharding over 8 in-process devices, fast: test_sweep_engine.py
def test_cpu_devices_option_shards_over_cores_with_identical_results(tmp_path, uninterrupted_run):
    # --cpu-devices 2 splits the CPU into two XLA devices (one per core); sweep results do not
    # depend on the device count
    out = tmp_path / "two"
    proc = _jaxdyn(*_RESUME_ARGS, "--cpu-devices", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "config.json").read_text())["n_devices"] == 2
    with np.load(uninterrupted_run / "results.npz") as a, np.load(out / "results.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])


def test_cpu_devices_option_rejects_bad_values_in_one_line(tmp_path):
    proc = _jaxdyn("run", "toy-blowup", "--cpu-devices", "0", "--out", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--cpu-devices" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_bad_launch_configuration_exits_2_before_the_run(tmp_path, monkeypatch, capsys):
    """The environment is read once, into one typed launch configuration: a bad one is a
    one-line error naming JAXDYN_LAUNCH, before anything runs."""
    cache = tmp_path / "xla"
    monkeypatch.setenv("JAXDYN_CACHE_DIR", str(cache))
    for bad in (
        '{"cache_min_compile_secs": "soon"}',
        '{"cache_min_compile_secs": -1}',
        '{"cache_min_compile_secs": NaN}',
        '{"processes": 1, "procesess": 2}',
        "processes=1",
    ):
        monkeypatch.setenv("JAXDYN_LAUNCH", bad)
        out = tmp_path / "run"
        assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "JAXDYN_LAUNCH" in err and err.count("\n") == 1, err
        assert not out.exists()


def test_the_launch_configuration_round_trips_through_the_environment():
    from jaxdyn.distributed._launch import LaunchConfig

    launch = LaunchConfig(
        imports=("a", "b.py"),
        data_dir="/data",
        cache_dir=None,
        processes=2,
        profile=True,
        coordinator="127.0.0.1:1234",
        num_processes=2,
        process_id=1,
        launcher_pid=99,
    )
    env = launch.to_environ()
    assert set(env) == {"JAXDYN_IMPORT", "JAXDYN_DATA", "JAXDYN_CACHE_DIR", "JAXDYN_LAUNCH"}
    assert env["JAXDYN_CACHE_DIR"] == "off" and LaunchConfig.from_environ(env) == launch
    assert LaunchConfig.from_environ({}) == LaunchConfig() and LaunchConfig().to_environ() == {}
    assert launch.replace(imports=["c", "a"]).imports == ("a", "b.py", "c")
    assert LaunchConfig.from_environ({}).is_worker is False and launch.is_worker


def test_the_package_names_at_most_four_environment_variables():
    import re

    names = set()
    for path in (REPO / "jaxdyn").rglob("*.py"):
        names |= set(re.findall(r"JAXDYN_[A-Z_]+", path.read_text()))
    assert names <= {"JAXDYN_IMPORT", "JAXDYN_DATA", "JAXDYN_CACHE_DIR", "JAXDYN_LAUNCH"}, names


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PrecisionConfig(ExperimentConfig):
    fail: bool = False


@register_experiment(
    "test-precision", _PrecisionConfig, "test-only: records its dtype", paper=False
)
def _record_precision(config, run):
    import jax.numpy as jnp

    run.scalar("dtype", str(jnp.zeros(()).dtype))
    if config.fail:
        raise RuntimeError("the experiment failed")


@pytest.mark.parametrize("x64_before", [False, True])
def test_run_experiment_leaves_jax_precision_as_it_found_it(tmp_path, x64_before):
    import jax

    from jaxdyn.runs import read_summary, run_experiment

    try:
        jax.config.update("jax_enable_x64", x64_before)
        for x64 in (True, False):
            out = tmp_path / f"run-{x64}"
            run_experiment("test-precision", out=out, overrides={"x64": x64}, processes=1)
            assert read_summary(out)["scalars"]["dtype"] == ("float64" if x64 else "float32")
            assert jax.config.read("jax_enable_x64") is x64_before
        with pytest.raises(RuntimeError, match="failed"):
            run_experiment(
                "test-precision",
                out=tmp_path / "fails",
                overrides={"x64": not x64_before, "fail": True},
                processes=1,
            )
        assert jax.config.read("jax_enable_x64") is x64_before
    finally:
        jax.config.update("jax_enable_x64", True)  # the test session's setting


def test_import_by_name_finds_a_module_in_the_working_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_cwd_experiments.py").write_text(
        "import dataclasses\n"
        "from jaxdyn.runs import ExperimentConfig, register_experiment\n"
        "@dataclasses.dataclass(frozen=True, kw_only=True)\n"
        "class C(ExperimentConfig):\n"
        "    pass\n"
        "@register_experiment('cwd-experiment', C, 'test-only: found in the cwd', paper=False)\n"
        "def run(config, run):\n"
        "    run.report('answer', measured=42)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["list", "--import", "my_cwd_experiments"]) == 0
    assert "cwd-experiment" in capsys.readouterr().out
    assert main(["list", "--import", "no_such_module_anywhere"]) == 2
    assert "no_such_module_anywhere" in capsys.readouterr().err


def test_readme_lists_every_registered_paper_experiment():
    from jaxdyn.runs import list_experiments

    readme = (TESTS.parent / "README.md").read_text()
    missing = [e.name for e in list_experiments() if e.paper and f"`{e.name}`" not in readme]
    assert not missing, f"README's experiment table lacks {missing}"


@pytest.mark.slow
def test_load_gives_the_sweeps_of_a_real_run_as_labelled_arrays(tmp_path):
    """jaxdyn.runs.load on a run of the toy experiment: the sweep as an xarray Dataset with the
    grid's dimensions, equal to the flat results.npz arrays, status as a variable."""
    from jaxdyn.runs import load

    out = tmp_path / "run"
    assert main(["run", "toy-blowup", "--quick", "--out", str(out)]) == 0
    run = load(out)
    assert run.summary["status"] == "complete" and run.config["experiment"] == "toy-blowup"
    ds = run.sweeps["toy"]
    assert dict(ds.sizes) == {"rate": 5, "t1": 1, "seed": 2, "time": 11}
    assert ds["y"].dims == ("rate", "t1", "seed", "time") and run.unlabelled() == []
    np.testing.assert_allclose(ds["time"].values, np.linspace(0.0, 1.0, 11))
    np.testing.assert_array_equal(ds["rate"].values, [-1.0, -0.5, 0.1, 0.5, 2.0])
    np.testing.assert_array_equal(ds["seed"].values, [0, 1])
    with np.load(out / "results.npz") as flat:
        y0 = flat["toy.y0"].reshape(5, 1, 2)
        np.testing.assert_array_equal(ds["y0"].values, y0)
        np.testing.assert_array_equal(ds["status"].values.ravel(), flat["toy.status"])
        np.testing.assert_array_equal(ds["y"].values, flat["toy.y"].reshape(5, 1, 2, 11))
    # labelled selection: the member with rate 2.0 and seed 1 is the flat member 4 * 2 + 1
    with np.load(out / "results.npz") as flat:
        assert float(ds["y0"].sel(rate=2.0, seed=1).item()) == float(flat["toy.y0"][9])
    blown = ds["status_name"] == "blowup"
    r_y0 = ds["rate"] * ds["y0"]
    assert bool((blown == (r_y0 > 1.0)).all())  # r y0 > 1 blows up before t1 = 1
    assert "blowup" in ds["status"].attrs["flag_meanings"]
    # the SweepResult the run recorded, rebuilt from disk
    result = run.sweep_result("toy")
    assert result.grid_shape == (5, 1, 2) and result.axes == ("rate", "t1", "seed")
    assert result.n_failed(accept=[Status.blowup]) == 0
    with pytest.raises(ConfigError, match="not a jaxdyn run"):
        load(tmp_path)
