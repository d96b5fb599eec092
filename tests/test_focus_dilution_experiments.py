"""End-to-end --quick runs of the focus-and-dilution experiments (slow: run with -m slow)."""

from pathlib import Path

import pytest

from jaxdyn.runs import read_summary, run_experiment


def _run(name, tmp_path, overrides=()):
    return read_summary(
        run_experiment(name, out=tmp_path / name, quick=True, overrides=list(overrides))
    )


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


TINY = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinystories" / "sample.txt"


@pytest.mark.slow
@pytest.mark.skipif(not TINY.exists(), reason="../shared/data (real-text samples) not found")
def test_text_trained_focus_then_dilution_on_tinystories_needs_every_window(tmp_path):
    # the 3.7k-character sample has 3687 windows of 33 characters: trained on all of them the
    # model focuses on ' ' and then dilutes (as on WikiText-2); trained on 512 of them (512
    # examples, the loss sits on the last position) it over-fits and never focuses on ' '
    summary = _run("focus-dilution-text", tmp_path, [f"corpus_path={TINY}"])
    checks = {c["name"]: c for c in summary["checks"]}
    assert summary["checks_passed"] == summary["checks_total"], checks
    excess = summary["scalars"]["train_excess_on_top_key"]
    assert excess["peak_ratio"] > 1.3 and excess["min_after_peak"] < 0.5 * excess["peak"]
    small = _run(
        "focus-dilution-text", tmp_path / "small", [f"corpus_path={TINY}", "n_windows=512"]
    )
    checks = {c["name"]: c for c in small["checks"]}
    assert not checks["trained_frequent_focus_then_dilution"]["passed"]
