"""The pde-meanfield / pde-particles / pde-energy experiments: config validation (fast) and
end-to-end --quick runs whose theory-vs-simulation checks must all pass (slow)."""

import json

import pytest

from jaxdyn.cli import main
from jaxdyn.runs import ConfigError, get_experiment, resolve_config


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("pde-meanfield", {"repeats": (3, 2, 1), "n_max": 256}, "must divide n_max"),
        ("pde-meanfield", {"variants": ("softmax", "sigmoid")}, "unknown variants"),
        ("pde-meanfield", {"d": 3}, "d must be even"),
        ("pde-particles", {"beta_max": 64.0, "phase_steps": 100}, "RK4 would be inaccurate"),
        ("pde-particles", {"beta_min": 2.0, "beta_max": 1.0}, "beta_min < beta_max"),
        ("pde-energy", {"bw_steps": (4,)}, "bw_steps"),
    ],
)
def test_invalid_configs_are_rejected_before_compiling(name, overrides, message):
    cls = get_experiment(name).config_cls
    with pytest.raises(ConfigError, match=message):
        cls(**overrides).validate()
    # the CLI's resolution validates too, before any run directory or compilation
    with pytest.raises(ConfigError, match=message):
        resolve_config(cls, experiment=name, overrides=overrides)


def test_default_and_quick_configs_validate():
    for name in ("pde-meanfield", "pde-particles", "pde-energy"):
        cls = get_experiment(name).config_cls
        cls().validate()
        cls(**cls.quick()).validate()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pde-meanfield", "pde-particles", "pde-energy"])
def test_quick_run_passes_every_theory_check(name, tmp_path):
    out = tmp_path / name
    assert main(["run", name, "--quick", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"
    failed = [c["name"] for c in summary["checks"] if not c["passed"]]
    assert not failed, failed
    assert summary["figures"]
