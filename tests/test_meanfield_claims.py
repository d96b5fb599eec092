"""The claims of jaxdyn.meanfield.claims: each has a counterfactual on which it does not hold,
and the rate claim's power is what it says."""

import numpy as np
import pytest

from jaxdyn.evidence import Verdict
from jaxdyn.meanfield import claims

# the mean-field experiment's full design: sizes x independent samples
SIZES = np.array([256, 1024, 2048])


def _draws(rng, slope, noise, samples, sizes=SIZES):
    n = np.repeat(sizes, samples)
    return n, np.exp(0.3 + slope * np.log(n) + noise * rng.standard_normal(n.size))


def _holds_fraction(slope, noise, samples, reps=200, seed=0):
    rng = np.random.default_rng(seed)
    calls = [
        claims.meanfield_rate("rate", *_draws(rng, slope, noise, samples)).verdict
        for _ in range(reps)
    ]
    return np.mean([v is Verdict.holds for v in calls]), calls


@pytest.mark.parametrize(
    "noise, slope, samples",
    [
        (0.3, -0.3, 16),
        pytest.param(0.1, -0.3, 16, marks=pytest.mark.slow),
        pytest.param(0.6, -0.3, 16, marks=pytest.mark.slow),
        pytest.param(0.3, -0.7, 16, marks=pytest.mark.slow),
        pytest.param(0.5, -0.3, 43, marks=pytest.mark.slow),
    ],
)
def test_a_true_slope_at_an_alternative_is_rarely_called_holds(noise, slope, samples):
    """At the full design (3 sizes x 16 samples; 43, the pde-meanfield design for the measured
    log scatter 0.5), the estimator's sampling distribution under a true slope of -0.3 (or
    -0.7): holds in at most 10% of repetitions (by construction at most 0.5%)."""
    frac, _ = _holds_fraction(slope, noise, samples)
    assert frac <= 0.10, (slope, noise, frac)


def test_the_design_power_is_what_rate_power_predicts():
    """Under the predicted slope, holds as often as rate_power says (a design it sizes)."""
    noise = 0.3
    samples = claims.rate_samples(SIZES, noise, power=0.8)
    assert samples < 4096
    predicted = claims.rate_power(SIZES, samples, noise)
    assert predicted >= 0.8
    frac, _ = _holds_fraction(-0.5, noise, samples, reps=200, seed=1)
    # binomial standard error of 200 repetitions ~ 0.03; the residual spread is estimated
    assert abs(frac - predicted) < 0.1, (frac, predicted)


def test_an_underpowered_design_is_inconclusive_and_says_what_would_decide():
    rng = np.random.default_rng(2)
    ev = claims.meanfield_rate("rate", *_draws(rng, -0.5, 1.0, 4))
    assert ev.verdict is Verdict.inconclusive
    assert "power" in ev.reason and "samples per size" in ev.reason


def test_a_clearly_different_slope_is_refuted():
    rng = np.random.default_rng(3)
    ev = claims.meanfield_rate("rate", *_draws(rng, 0.0, 0.3, 16))
    assert ev.verdict is Verdict.refuted


def test_outcome_covariance_and_bound_claims_have_counterfactuals():
    assert claims.outcome("o", predicted=1, measured=[1, 1, 1], basis="b").verdict is Verdict.holds
    assert (
        claims.outcome("o", predicted=1, measured=[1, 0, 1], basis="b").verdict is not Verdict.holds
    )
    exact = np.eye(2)
    assert (
        claims.covariance("c", exact, exact + 1e-9, tolerance=1e-6, basis="b").verdict
        is Verdict.holds
    )
    assert (
        claims.covariance("c", exact, exact + 1e-3, tolerance=1e-6, basis="b").verdict
        is not Verdict.holds
    )
    assert claims.error_bound("e", [0.1, 0.2], [0.2, 0.3], basis="b").verdict is Verdict.holds
    assert claims.error_bound("e", [0.1, 0.4], [0.2, 0.3], basis="b").verdict is not Verdict.holds
    t = np.array([1.0, 2.0])
    assert claims.softmax_blowup_time(t, t * (1 + 1e-9), tolerance=1e-6).verdict is Verdict.holds
    assert claims.softmax_blowup_time(t, t * 1.01, tolerance=1e-6).verdict is not Verdict.holds


def test_particles_lag_needs_a_one_sided_majority():
    lagging = [0.6, 0.7, 0.5, 0.8, 0.65, 0.7, 0.9, 0.6]
    assert claims.particles_lag_their_gaussian(lagging).verdict is Verdict.holds
    shift = np.exp(0.3 * np.random.default_rng(5).standard_normal(8))  # both signs
    assert claims.particles_lag_their_gaussian(shift).verdict is Verdict.inconclusive
    assert claims.particles_lag_their_gaussian([1.4] * 8).verdict is Verdict.refuted
    # 4 systems cannot decide at 99% (2^-4 > 0.01)
    assert claims.particles_lag_their_gaussian([0.8] * 4).verdict is Verdict.inconclusive
