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
    ensemble_mean,
    estimate,
    extrapolated_exponent,
    local_exponents,
    monotone,
    ordered,
    rate,
    trend,
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


# ---- censored values: a time not reached by the horizon is a lower bound -----------------


def test_censored_entries_are_lower_bounds_in_every_one_sided_and_equality_decision():
    model = ErrorModel.solver_tolerance(0.1)
    # a stage not reached by t = 10 happens at t >= 10: later than 3, so the order holds
    assert ordered("s", measured=[1.0, 3.0, 10.0], error_model=model, censored=[0, 0, 1]).holds
    # ... and a first stage not reached by t = 5 cannot precede one seen at t = 3
    assert ordered("s", measured=[5.0, 3.0], error_model=model, censored=[1, 0]).refuted
    # a censored earlier entry below the later one, or two censored entries, cannot decide
    assert ordered("s", measured=[2.0, 3.0], error_model=model, censored=[1, 0]).inconclusive
    two = ordered("s", measured=[1.0, 10.0, 10.0], error_model=model, censored=[0, 1, 1])
    assert two.inconclusive and "longer horizon" in two.reason
    # decreasing: a censored first entry above the second is in order
    assert ordered(
        "d", measured=[10.0, 3.0], error_model=model, increasing=False, censored=[1, 0]
    ).holds
    assert ordered(
        "d", measured=[3.0, 10.0], error_model=model, increasing=False, censored=[0, 1]
    ).refuted
    # at_most / at_least: a lower bound refutes "at most" above the limit, confirms "at least"
    assert at_most("t", measured=8.0, limit=5.0, error_model=model, censored=True).refuted
    assert at_most("t", measured=2.0, limit=5.0, error_model=model, censored=True).inconclusive
    assert at_least("t", measured=8.0, limit=5.0, error_model=model, censored=True).holds
    assert at_least("t", measured=2.0, limit=5.0, error_model=model, censored=True).inconclusive
    mixed = at_least("t", measured=[8.0, 6.0], limit=5.0, error_model=model, censored=[1, 0])
    assert mixed.holds
    # within: a lower bound above the prediction refutes it, below it cannot confirm it
    assert within("t", prediction=5.0, measured=8.0, error_model=model, censored=True).refuted
    assert within("t", prediction=5.0, measured=4.0, error_model=model, censored=True).inconclusive
    assert within(
        "t", prediction=[5.0, 1.0], measured=[4.0, 2.0], error_model=model, censored=[1, 0]
    ).refuted
    with pytest.raises(ValueError, match="censored has shape"):
        at_most("t", measured=[1.0, 2.0], limit=5.0, error_model=model, censored=[1, 0, 0])


def test_one_sided_decisions_take_the_alternative_they_reject():
    model = ErrorModel.standard_error(0.1, dof=20, confidence=0.99)  # half-width 0.2845
    ev = at_most("drift", measured=0.1, limit=0.5, error_model=model, alternative=1.0)
    assert ev.holds and ev.alternative == 1.0 and ev.to_json()["alternative"] == 1.0
    wide = at_most("drift", measured=0.4, limit=0.5, error_model=model, alternative=0.6)
    assert wide.inconclusive and "alternative 0.6" in wide.reason
    assert at_least("gap", measured=0.2, limit=0.5, error_model=model, alternative=0.0).refuted
    with pytest.raises(ValueError, match="must lie above the limit"):
        at_most("drift", measured=0.1, limit=0.5, error_model=model, alternative=0.0)
    with pytest.raises(ValueError, match="must lie below the limit"):
        at_least("gap", measured=0.1, limit=0.5, error_model=model, alternative=1.0)


# ---- generic decisions on closed-form inputs, with their counterfactuals -------------------


def test_trend_decides_the_sign_of_a_slope():
    x = np.arange(12.0)
    wiggle = 0.05 * np.array([1, -1, -1, 1] * 3)  # residuals with a known, small spread
    assert trend("grows", x, 0.3 * x + wiggle).holds
    assert trend("grows", x, -0.3 * x + wiggle).refuted
    flat = trend("grows", x, wiggle)
    assert flat.inconclusive and flat.alternative == 0.0
    assert trend("falls", x, -0.3 * x + wiggle, increasing=False).holds
    # the slope exceeds 0.25 but not 0.35: the alternative is the rejected value
    assert trend("fast", x, 0.3 * x + wiggle, alternative=0.25).holds
    assert trend("fast", x, 0.3 * x + wiggle, alternative=0.35).refuted
    assert trend("grows", [1.0, 2.0], [1.0, 2.0]).inconclusive


def test_rate_recovers_a_power_law_and_rejects_its_alternatives():
    n = np.repeat([256.0, 1024.0, 4096.0], 4)
    scatter = np.exp(0.05 * np.tile([1.0, -1.0, -1.0, 1.0], 3))  # symmetric in log
    errors = 2.0 * n**-0.5 * scatter
    ev = rate("n^-1/2", n, errors, prediction=-0.5, alternatives=(0.0, -1.0))
    assert ev.holds and abs(ev.measured + 0.5) < 1e-12  # the scatter is orthogonal to log n
    assert rate("n^-1/2", n, 2.0 * n**-1.0 * scatter, prediction=-0.5, alternatives=(0.0,)).refuted
    assert rate("n^-1/2", n[:4], errors[:4], prediction=-0.5, alternatives=(0.0,)).inconclusive
    with pytest.raises(ValueError, match="alternative"):
        rate("n^-1/2", n, errors, prediction=-0.5, alternatives=())


def test_rate_power_against_a_near_alternative_matches_the_noncentral_t():
    """The power of ``rate`` to reject a slope -0.3 when the truth is -1/2, for a design of
    3 sizes x 16 samples with log-normal scatter sigma = 0.5, equals the noncentral-t
    probability that the interval excludes -0.3 (the statistic (b - a) / SE is noncentral t
    with 46 degrees of freedom and noncentrality (b - a) / SE_true); with -0.3 as the truth
    the same design says ``holds`` at most 1% of the time (the interval's confidence)."""
    from scipy import stats

    rng = np.random.default_rng(0)
    logn = np.log(np.repeat([256.0, 1024.0, 4096.0], 16))
    sigma, reps, dof = 0.5, 400, logn.size - 2
    se_true = sigma / np.sqrt(np.sum((logn - logn.mean()) ** 2))
    t = stats.t.ppf(0.995, dof)
    ncp = 0.2 / se_true
    power = 1.0 - (stats.nct.cdf(t, dof, ncp) - stats.nct.cdf(-t, dof, ncp))
    assert 0.5 < power < 0.8  # a stated, moderate power: -0.3 is a near alternative here

    def holds(slope):
        return np.mean(
            [
                rate(
                    "r",
                    np.exp(logn),
                    np.exp(slope * logn + sigma * rng.standard_normal(logn.size)),
                    prediction=-0.5,
                    alternatives=(-0.3,),
                ).holds
                for _ in range(reps)
            ]
        )

    # P(holds) lies between power - 0.01 (the interval may also exclude -1/2) and power
    band = 4 * np.sqrt(power * (1 - power) / reps)
    assert power - 0.01 - band <= holds(-0.5) <= power + band
    assert holds(-0.3) <= 0.01 + 4 * np.sqrt(0.01 * 0.99 / reps)


def test_ensemble_mean_uses_the_spread_between_ensembles():
    offsets = 0.1 * np.array([1.0, -1.0, 0.5, -0.5, 0.0, 0.2, -0.2, 0.0])  # mean 0, SE 0.0227
    samples = 1.0 + offsets[:, None] * np.ones((1, 3))
    assert ensemble_mean("m", samples, prediction=1.0, alternative=0.5).holds
    assert ensemble_mean("m", samples, prediction=1.5, alternative=1.0).refuted
    assert ensemble_mean("m", samples, prediction=1.0, alternative=1.01).inconclusive
    with pytest.raises(ValueError, match="independent ensembles"):
        ensemble_mean("m", samples[:1], prediction=1.0, alternative=0.5)


def test_monotone_series_within_their_error():
    t = np.linspace(0.0, 5.0, 40)
    assert monotone("decays", np.exp(-t), error=1e-6, basis="closed form").holds
    bumped = np.exp(-t)
    bumped[20] += 0.05
    assert monotone("decays", bumped, error=1e-6, basis="closed form").refuted
    assert monotone("decays", np.ones(5), error=1e-6, basis="closed form").inconclusive
    assert monotone("grows", np.exp(t), error=1e-6, basis="closed form", increasing=True).holds


def test_local_exponents_equal_the_closed_form():
    x = np.geomspace(10.0, 1e6, 6)
    m, mid = local_exponents(x[::-1], 3.0 * x[::-1] ** 1.5)  # any order
    assert np.allclose(m, 1.5, atol=1e-12) and np.allclose(mid, np.sqrt(x[1:] * x[:-1]))
    m, _ = local_exponents(x, x * np.log(x) ** 2)
    exact = 1.0 + 2.0 * np.log(np.log(x[1:]) / np.log(x[:-1])) / np.log(x[1:] / x[:-1])
    assert np.allclose(m, exact, rtol=1e-12)


def test_extrapolated_exponent_finds_the_asymptote_under_a_log_correction():
    # y = x^{3/2} / ln x: local exponents 3/2 - 1/ln x + ..., drifting towards 3/2
    x = 2.0 ** np.arange(8, 41, 4)
    m, mid = local_exponents(x, x**1.5 / np.log(x))
    assert m[-1] < 1.48  # the last pair alone is still far from the law
    assert extrapolated_exponent("x^3/2", mid, m, 1.5, 1.0).holds
    assert extrapolated_exponent("x^1", mid, m, 1.0, 1.5).refuted
    assert extrapolated_exponent("x^3/2", mid[:2], m[:2], 1.5, 1.0).inconclusive
    # between the two laws (an exponent 1.25): neither
    m2, mid2 = local_exponents(x, x**1.25)
    assert extrapolated_exponent("x^3/2", mid2, m2, 1.5, 1.0).inconclusive
