"""The check contract: evidence decisions can go either way, consistency failures fail the run,
summary.json separates kinds, and every registered negative control is not called ``holds``."""

import json

import numpy as np
import pytest

from jaxdyn.evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_least,
    at_most,
    classified,
    estimate,
    ordered,
    within,
)
from jaxdyn.runs import Run


def test_within_solver_tolerance_holds_and_refutes():
    model = ErrorModel.solver_tolerance(1e-6)
    assert within("x", prediction=1.0, measured=1.0 + 5e-7, error_model=model).holds
    assert within("x", prediction=1.0, measured=1.0 + 5e-6, error_model=model).refuted
    assert within("x", prediction=[1.0, 2.0], measured=[1.0, 2.1], error_model=model).refuted
    assert within("x", prediction=1.0, measured=np.nan, error_model=model).inconclusive
    rel = within("x", prediction=100.0, measured=100.00005, error_model=model, relative=True)
    assert rel.holds


def test_statistical_evidence_needs_its_alternative():
    model = ErrorModel.standard_error(0.1, dof=10)
    with pytest.raises(ValueError, match="alternative"):
        within("slope", prediction=-0.5, measured=-0.5, error_model=model)


def test_estimate_rejects_the_alternative_or_says_inconclusive():
    # t_{10, 0.995} = 3.169: a half-width of 0.317 at SE 0.1
    sharp = estimate(
        "slope", prediction=-0.5, value=-0.45, standard_error=0.1, dof=10, alternative=0.0
    )
    assert sharp.holds and sharp.alternative == 0.0
    # a slope of -0.05 with a wide interval must not "confirm" -0.5
    wide = estimate(
        "slope", prediction=-0.5, value=-0.05, standard_error=0.25, dof=4, alternative=0.0
    )
    assert wide.inconclusive and "smaller error" in wide.reason
    far = estimate(
        "slope", prediction=-0.5, value=-0.05, standard_error=0.05, dof=10, alternative=0.0
    )
    assert far.refuted
    assert estimate(
        "slope", prediction=-0.5, value=-0.5, standard_error=np.nan, dof=1, alternative=0.0
    ).inconclusive


def test_one_sided_bounds_use_the_error_on_both_sides():
    model = ErrorModel.bound(0.1, basis="test")
    assert at_most("a", measured=0.5, limit=1.0, error_model=model).holds
    assert at_most("a", measured=0.95, limit=1.0, error_model=model).inconclusive
    assert at_most("a", measured=1.2, limit=1.0, error_model=model).refuted
    assert at_least("a", measured=1.2, limit=1.0, error_model=model).holds
    assert at_least("a", measured=0.5, limit=1.0, error_model=model).refuted


def test_ordered_needs_gaps_larger_than_the_error():
    model = ErrorModel.solver_tolerance(0.5)
    assert ordered("stages", measured=[1.0, 3.0, 7.0], error_model=model).holds
    assert ordered("stages", measured=[1.0, 1.5, 7.0], error_model=model).inconclusive
    assert ordered("stages", measured=[3.0, 1.0, 7.0], error_model=model).refuted
    assert ordered("stages", measured=[1.0, np.inf, 7.0], error_model=model).inconclusive
    assert ordered("d", measured=[3.0, 1.0], error_model=model, increasing=False).holds


def test_classified_and_strings_rejected():
    assert classified("rank", prediction=1, measured=1, basis="eigenvalues > 1e-8").holds
    assert classified("rank", prediction=1, measured=2, basis="eigenvalues > 1e-8").refuted
    assert classified("rank", prediction=1, measured=1, basis="x", decided=False).inconclusive
    with pytest.raises(TypeError, match="not strings"):
        classified("order", prediction="first", measured="first", basis="x")
    with pytest.raises(TypeError, match="Verdict"):
        Evidence("c", 1.0, 1.0, ErrorModel.exact(), "holds")


def test_summary_separates_kinds_and_lists_findings_first(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    model = ErrorModel.solver_tolerance(1e-8)
    assert (
        run.evidence("ok", within("a", prediction=1.0, measured=1.0, error_model=model))
        is Verdict.holds
    )
    run.evidence("wrong", within("b", prediction=1.0, measured=2.0, error_model=model))
    assert run.consistency("identity", expected=2.0, measured=2.0 + 1e-15, tolerance=1e-12)
    run.report("number", measured=3.5, claim="reported only")
    run.finish()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "complete"  # a finding does not fail the run
    assert summary["counts"] == {
        "evidence": 2,
        "holds": 1,
        "refuted": 1,
        "inconclusive": 0,
        "not_run": 0,
        "findings": 1,
        "without_negative_control": 2,
        "consistency": 1,
        "consistency_failed": 0,
        "report": 1,
        "unclassified": 0,
    }
    assert [f["name"] for f in summary["findings"]] == ["wrong"]
    kinds = {c["name"]: c["kind"] for c in summary["checks"]}
    assert kinds == {
        "ok": "evidence",
        "wrong": "evidence",
        "identity": "consistency",
        "number": "report",
    }
    wrong = next(c for c in summary["checks"] if c["name"] == "wrong")
    assert wrong["verdict"] == "refuted" and wrong["error_model"]["name"] == "solver_tolerance"
    assert list(summary).index("findings") < list(summary).index("checks")


def test_a_failed_consistency_check_fails_the_run(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    assert not run.consistency("identity", expected=1.0, measured=1.1, tolerance=1e-12)
    run.finish()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "failed" and "identity" in summary["error"]
