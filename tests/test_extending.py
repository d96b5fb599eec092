"""Extending jaxdyn from outside the package: an experiment in a user's own package (entry
point, installed with ``pip install -e``) and in a plain module file (``--import``)."""

import json
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

PLUGIN_MODULE = textwrap.dedent(
    '''
    """A user's experiment: exponential decay dx/dt = -r x, solved by diffrax, vs exp(-r t)."""
    import dataclasses

    import diffrax
    import jax
    import jax.numpy as jnp
    import matplotlib.pyplot as plt
    import numpy as np

    from jaxdyn import Status
    from jaxdyn.runs import ConfigError, ExperimentConfig, register_experiment
    from jaxdyn.sweep import Grid


    @dataclasses.dataclass(frozen=True, kw_only=True)
    class DecayConfig(ExperimentConfig):
        rates: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
        seeds: int = 8
        t1: float = 2.0

        def validate(self):
            if not self.t1 > 0:
                raise ConfigError(f"t1 must be positive, got {self.t1}")

        @classmethod
        def quick(cls):
            return {"seeds": 4}


    def decay_member(params, key):
        x0 = jax.random.uniform(key, (), minval=0.5, maxval=1.5)
        ts = jnp.linspace(0.0, params["t1"], 9)
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, x, r: -r * x), diffrax.Tsit5(), 0.0, params["t1"], 0.01,
            x0, args=params["rate"], saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12), throw=False,
        )
        exact = x0 * jnp.exp(-params["rate"] * ts)
        return {"x": sol.ys, "exact": exact, "status": Status.promote(sol.result)}


    @register_experiment("{name}", DecayConfig, "user plugin: exponential decay", paper=False)
    def run_decay(config, run):
        grid = Grid.product({"rate": list(config.rates), "t1": [config.t1]},
                            seeds=config.seeds, base_seed=config.seed)
        result = run.sweep("decay", decay_member, grid)
        ok = result.ok()
        err = float(np.max(np.abs(result.outputs["x"][ok] - result.outputs["exact"][ok])))
        run.consistency("matches_closed_form", expected=0.0, measured=err, tolerance=1e-7)
        fig, ax = plt.subplots()
        ax.plot(result.outputs["x"][ok].T)
        run.save_figure(fig, "decay")
    '''
)

PYPROJECT = textwrap.dedent(
    """
    [build-system]
    requires = ["hatchling"]
    build-backend = "hatchling.build"

    [project]
    name = "jaxdyn-user-plugin"
    version = "0.0.1"

    [project.entry-points."jaxdyn.experiments"]
    user-decay = "jaxdyn_user_plugin.experiments"

    [tool.hatch.build.targets.wheel]
    packages = ["jaxdyn_user_plugin"]
    """
)


def _child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("JAXDYN_IMPORT", "XLA_FLAGS")}
    env.update(JAXDYN_CACHE_DIR=os.environ.get("JAXDYN_TEST_CACHE_DIR", "off"), PYTHONPATH="")
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory):
    """A throw-away environment that sees this one's packages, with the user's package
    installed into it by ``pip install -e`` (nothing is installed into this environment)."""
    root = tmp_path_factory.mktemp("user")
    pkg = root / "plugin"
    (pkg / "jaxdyn_user_plugin").mkdir(parents=True)
    (pkg / "jaxdyn_user_plugin" / "__init__.py").write_text("")
    (pkg / "jaxdyn_user_plugin" / "experiments.py").write_text(
        PLUGIN_MODULE.replace("{name}", "user-decay")
    )
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    child_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parent_site = sysconfig.get_paths()["purelib"]
    Path(child_site, "parent_env.pth").write_text(
        f"import site; site.addsitedir({parent_site!r})\n"
    )
    proc = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(pkg),
        ],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return python, root


def _jaxdyn(python, *args, cwd=None, timeout=300, **env):
    return subprocess.run(
        [str(python), "-m", "jaxdyn", *args],
        capture_output=True,
        text=True,
        env=_child_env(**env),
        cwd=cwd,
        timeout=timeout,
    )


def _wait_for_chunk(directory: Path, proc, timeout=240):
    start = time.time()
    while time.time() - start < timeout:
        if list(directory.glob("chunk_*.npz")):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


@pytest.mark.slow  # a throw-away environment and a pip install; kill + resume: test_cli_runs.py
def test_entry_point_experiment_lists_runs_resumes_and_reports(user_venv):
    python, root = user_venv
    listed = _jaxdyn(python, "list", "--verbose")
    assert listed.returncode == 0, listed.stderr
    assert "user-decay" in listed.stdout and "jaxdyn_user_plugin.experiments" in listed.stdout
    assert "focus-dilution" in listed.stdout  # the built-in ones come the same way

    out = root / "runs" / "decay"
    sweep = ["--sweep", "chunk_size=4", "--sweep", "vmap_width=4"]
    proc = subprocess.Popen(
        [str(python), "-m", "jaxdyn", "run", "user-decay", "--quick", *sweep, "--out", str(out)],
        env=_child_env(
            JAXDYN_IMPORT="slow_chunks",
            JAXDYN_TEST_CHUNK_DELAY="1.0",
            PYTHONPATH=os.path.dirname(__file__),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert _wait_for_chunk(out / "checkpoints" / "decay", proc), proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    resumed = _jaxdyn(python, "run", "user-decay", "--resume", "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from checkpoints" in resumed.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"
    assert [c["name"] for c in summary["checks"]] == ["matches_closed_form"]
    assert summary["checks"][0]["passed"] and summary["figures"] == ["figures/decay.png"]
    assert (out / "figures" / "decay.png").stat().st_size > 0
    config = json.loads((out / "config.json").read_text())
    assert config["sweep_options"]["vmap_width"] == 4 and config["quick"] is True
    with np.load(out / "results.npz") as data:
        assert data["decay.x"].shape == (16, 9)

    report = _jaxdyn(python, "report", str(out), "--out", str(root / "report"))
    assert report.returncode == 0, report.stderr
    assert "user-decay" in (root / "report" / "report.md").read_text()


@pytest.mark.slow  # a CLI subprocess run: in .ci/run's contract step
def test_import_option_registers_a_plain_module_file(tmp_path):
    python = sys.executable  # a plain module file needs no installed package
    module = tmp_path / "my_experiment.py"
    module.write_text(PLUGIN_MODULE.replace("{name}", "file-decay"))
    listed = _jaxdyn(python, "list", "--import", str(module))
    assert listed.returncode == 0 and "file-decay" in listed.stdout, listed.stderr
    out = tmp_path / "run"
    ran = _jaxdyn(
        python, "run", "--import", str(module), "file-decay", "--quick", "--out", str(out)
    )
    assert ran.returncode == 0, ran.stderr
    counts = json.loads((out / "summary.json").read_text())["counts"]
    assert counts["consistency"] == 1 and counts["consistency_failed"] == 0
    # the environment variable does the same for every command
    again = _jaxdyn(
        python, "run", "file-decay", "--resume", "--out", str(out), JAXDYN_IMPORT=str(module)
    )
    assert again.returncode == 0, again.stderr
    missing = _jaxdyn(python, "list", "--import", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no such file" in missing.stderr
