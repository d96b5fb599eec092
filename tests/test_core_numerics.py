"""The shared small concepts: entropy, line/power-law fits with uncertainty, input validation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings, strategies as st

from jaxdyn import entropy, fit_exponential, fit_line, fit_power_law
from jaxdyn._validation import (
    is_traced,
    require_in_interval,
    require_positive,
    require_probability_vector,
    require_psd,
    require_stochastic,
)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), st.integers(0, 2**31 - 1))
def test_entropy_matches_a_direct_sum_and_is_maximal_for_uniform(k, seed):
    p = np.random.default_rng(seed).dirichlet(np.ones(k))
    p[0] = 0.0
    p /= p.sum()
    direct = -sum(x * np.log(x) for x in p if x > 0)
    assert float(entropy(p)) == pytest.approx(direct, rel=1e-12)
    assert float(entropy(np.full(k, 1.0 / k))) == pytest.approx(np.log(k), rel=1e-12)
    assert np.isfinite(np.asarray(jax.grad(lambda q: entropy(q))(jnp.asarray(p)))).all()


def test_entropy_reduces_over_the_requested_axis():
    p = np.array([[0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_allclose(entropy(p, axis=-1), [np.log(2), 0.0], atol=1e-15)
    np.testing.assert_allclose(entropy(p.T, axis=0), [np.log(2), 0.0], atol=1e-15)


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 40), st.integers(0, 2**31 - 1))
def test_line_fit_agrees_with_scipy_linregress(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    y = 1.5 - 0.7 * x + rng.normal(0, 0.3, n)
    fit = fit_line(x, y, confidence=0.9)
    ref = scipy.stats.linregress(x, y)
    assert fit.slope == pytest.approx(ref.slope, rel=1e-10, abs=1e-12)
    assert fit.intercept == pytest.approx(ref.intercept, rel=1e-10, abs=1e-12)
    assert fit.slope_stderr == pytest.approx(ref.stderr, rel=1e-8)
    half = scipy.stats.t.ppf(0.95, n - 2) * ref.stderr
    assert fit.ci_low == pytest.approx(ref.slope - half, rel=1e-8, abs=1e-12)
    assert fit.n == n and fit.confidence == 0.9


def test_confidence_interval_covers_the_true_slope_at_its_nominal_rate():
    rng = np.random.default_rng(0)
    x = np.linspace(0, 1, 12)
    hits = [fit_line(x, 2.0 * x + rng.normal(0, 0.5, 12)).contains(2.0) for _ in range(2000)]
    # 95% nominal; binomial standard error over 2000 trials is 0.0049
    assert abs(np.mean(hits) - 0.95) < 4 * np.sqrt(0.95 * 0.05 / 2000)


def test_power_law_and_exponential_fits_recover_exact_exponents():
    x = np.geomspace(1, 100, 9)
    fit = fit_power_law(x, 3.0 * x**1.75)
    assert fit.slope == pytest.approx(1.75, abs=1e-12) and fit.slope_stderr < 1e-10
    assert np.exp(fit.intercept) == pytest.approx(3.0, rel=1e-10)
    t = np.linspace(0, 5, 7)
    assert fit_exponential(t, -2.0 * np.exp(-0.4 * t)).slope == pytest.approx(-0.4, abs=1e-12)
    # non-positive points are left out of a power law, two points give no interval
    two = fit_power_law([1.0, 2.0, -1.0, 0.0], [1.0, 4.0, 5.0, 1.0])
    assert two.n == 2 and two.slope == pytest.approx(2.0) and np.isnan(two.ci_low)
    with pytest.raises(ValueError, match="two distinct"):
        fit_line([1.0, 1.0], [0.0, 1.0])


def test_concrete_invalid_inputs_raise_one_line_value_errors():
    cases = [
        (lambda: require_positive("t1", 0.0), "t1 must be positive and finite, got 0.0"),
        (lambda: require_positive("t1", np.inf), "t1 must be positive and finite"),
        (lambda: require_in_interval("lam", 1.0, 0.0, 1.0, closed="left"), r"lam must be in \[0"),
        (lambda: require_probability_vector("pi", [0.5, 0.6]), "pi must sum to 1"),
        (lambda: require_stochastic("P", [[0.5, 0.4], [0.5, 0.5]]), "P is not row-stochastic"),
        (lambda: require_stochastic("P", np.ones(3)), "P must be a square matrix"),
        (lambda: require_psd("Sigma0", np.diag([1.0, -0.1])), "Sigma0 must be positive semi"),
        (lambda: require_psd("Sigma0", [[1.0, 0.5], [0.0, 1.0]]), "Sigma0 must be symmetric"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            call()
        assert "\n" not in str(info.value)
    assert require_positive("t", np.inf, allow_inf=True) == np.inf
    np.testing.assert_array_equal(require_stochastic("P", np.eye(2)), np.eye(2))


def test_traced_invalid_inputs_fail_at_run_time_with_error_if():
    f = eqx.filter_jit(lambda t: require_positive("t1", t) * 2.0)
    assert float(f(jnp.asarray(1.5))) == 3.0
    with pytest.raises(eqx.EquinoxRuntimeError, match="t1 must be positive"):
        f(jnp.asarray(-1.0)).block_until_ready()
    g = eqx.filter_jit(lambda P: require_stochastic("P", P).sum())
    assert float(g(jnp.eye(3))) == 3.0
    with pytest.raises(eqx.EquinoxRuntimeError, match="P is not row-stochastic"):
        g(2.0 * jnp.eye(3)).block_until_ready()
    assert is_traced(jax.make_jaxpr(lambda x: x)(1.0)) is False
