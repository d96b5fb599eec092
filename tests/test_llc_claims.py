"""jaxdyn.llc.claims: each calibration verdict with its negative control (docs/llc.md)."""

import jax
import pytest

from jaxdyn.experiments.llc import _problems
from jaxdyn.llc import claims, estimate_llc


def _judge(problem, est, prediction, alternatives, bias):
    return claims.learning_coefficient(
        "lambda",
        prediction=prediction,
        alternatives=alternatives,
        value=float(est.llc),
        stderr=float(est.stderr),
        num_chains=est.num_chains,
        bias=bias,
    )


@pytest.fixture(scope="module")
def regression():
    pr = _problems.linear_regression(jax.random.key(0), 4, 300)
    est = estimate_llc(
        pr.loss_fn,
        pr.w_star,
        pr.data,
        key=jax.random.key(1),
        num_chains=16,
        num_draws=1000,
        num_burnin=200,
        step_size=1e-3,
        localization=1.0,
    )
    bias = _problems.sampler_bias(pr, n=est.n, beta=est.beta, step_size=1e-3, localization=1.0)
    return pr, est, bias


def test_regular_model_d_over_2_and_wrong_d_refuted(regression):
    pr, est, bias = regression
    assert bias < 0.1  # the quadratic expansion's bias at these settings is small
    assert _judge(pr, est, 2.0, [1.5, 2.5], bias).holds
    # negative controls: a model with one parameter more or fewer
    assert _judge(pr, est, 2.5, [2.0], bias).refuted
    assert _judge(pr, est, 1.5, [2.0], bias).refuted


def test_stationarity_and_its_negative_control(regression):
    _, est, _ = regression
    assert not claims.stationary(est).refuted  # holds or, with this few draws, inconclusive
    # chains with no burn-in and a tiny step start at the minimum and are still climbing
    pr = _problems.linear_regression(jax.random.key(0), 4, 300)
    cold = estimate_llc(
        pr.loss_fn,
        pr.w_star,
        pr.data,
        key=jax.random.key(2),
        num_chains=16,
        num_draws=400,
        num_burnin=0,
        step_size=2e-5,
        localization=1.0,
    )
    assert claims.stationary(cold).refuted


def test_softmax_copy_head_gauge_and_ignoring_it_refuted():
    """Softmax's row-shift gauge removes L directions: (d - L) / 2, not d / 2."""
    L, V = 3, 2
    pr = _problems.copy_head_network(jax.random.key(3), "softmax", L, V, 20)
    assert _problems.flat_directions(pr.hessian) == L
    n, eps, gamma = 1e4, 4e-5, 1.0
    est = estimate_llc(
        pr.loss_fn,
        pr.w_star,
        pr.data,
        key=jax.random.key(4),
        n=n,
        num_chains=16,
        num_draws=1500,
        num_burnin=500,
        step_size=eps,
        localization=gamma,
    )
    bias = _problems.sampler_bias(pr, n=n, beta=est.beta, step_size=eps, localization=gamma)
    d = L * L + V * V
    assert _judge(pr, est, (d - L) / 2, [d / 2], bias).holds
    assert _judge(pr, est, d / 2, [(d - L) / 2], bias).refuted  # the gauge ignored


def test_learning_coefficient_decision_rules():
    kw = dict(stderr=0.1, num_chains=9, bias=0.05)
    assert claims.learning_coefficient(
        "x", prediction=1.0, alternatives=[2.0], value=1.05, **kw
    ).holds
    assert claims.learning_coefficient(
        "x", prediction=1.0, alternatives=[1.1], value=1.05, **kw
    ).inconclusive
    assert claims.learning_coefficient(
        "x", prediction=1.0, alternatives=[2.0], value=1.6, **kw
    ).refuted
    assert claims.learning_coefficient(
        "x", prediction=1.0, alternatives=[2.0], value=float("nan"), **kw
    ).inconclusive
    with pytest.raises(ValueError, match="alternative"):
        claims.learning_coefficient("x", prediction=1.0, alternatives=[], value=1.0, **kw)


@pytest.mark.slow
def test_reduced_rank_regression_aoyagi_and_regular_count_refuted():
    from jaxdyn.llc import step_size_effect

    pr = _problems.reduced_rank(jax.random.key(0), 3, 3, 3, 1, 64)  # the most singular point
    eff = step_size_effect(
        pr.loss_fn,
        pr.w_star,
        pr.data,
        key=jax.random.key(3),
        n=1e4,
        num_chains=8,
        num_draws=10000,
        num_burnin=10000,
        step_size=2e-5,
        localization=1.0,
    )
    bias = abs(float(eff.bias)) + 2 * float(eff.bias_stderr)
    assert _judge(pr, eff.fine, 4.0, [9.0], bias).holds
    assert _judge(pr, eff.fine, 9.0, [4.0], bias).refuted


def test_experiment_negative_controls_never_hold():
    import jaxdyn.experiments.llc  # noqa: F401  (registers the controls)
    from jaxdyn.runs import negative_controls

    ours = {k: f for k, f in negative_controls().items() if k[0] == "copy-head-llc"}
    assert {k[1] for k in ours} == {
        "regression_d_over_2",
        "regression_stationary",
        "copy_head_symmetries",
        "rrr_aoyagi",
        "rrr_generic_point",
    }
    for fn in ours.values():
        assert fn().refuted
