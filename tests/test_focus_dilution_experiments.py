"""End-to-end --quick runs of the focus-and-dilution experiments (slow: run with -m slow)."""

import pytest

from jaxdyn.runs import execute_run, prepare_run, read_summary


def _run(name, tmp_path, overrides=()):
    experiment, config, out = prepare_run(
        name, out=tmp_path / name, quick=True, overrides=list(overrides)
    )
    execute_run(experiment, config, out, quick=True, echo=False)
    return read_summary(out)


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [(), ("pi=[0.5,0.3,0.2]", "lam=0.7")])
def test_headline_checks_pass_for_the_headline_and_another_chain(tmp_path, overrides):
    summary = _run("focus-dilution", tmp_path, overrides)
    checks = {c["name"]: c for c in summary["checks"]}
    for name in ("condensation_rate", "focus_rate", "unigram_plateau", "stages_in_order"):
        assert checks[name]["passed"], checks[name]
    assert summary["checks_passed"] == summary["checks_total"]


@pytest.mark.slow
def test_delta_sweep_stalls_at_zero_and_fits_exponent_minus_one(tmp_path):
    summary = _run("focus-dilution-delta", tmp_path)
    checks = {c["name"]: c for c in summary["checks"]}
    assert checks["stall_at_delta_0"]["passed"]
    assert checks["escape_time_exponent"]["passed"], checks["escape_time_exponent"]
    assert checks["delta_sweep_compiles_once"]["passed"]
