"""jaxdyn.llc.claims: each calibration verdict with its negative control (docs/llc.md)."""

import jax
import pytest

from jaxdyn.llc import _problems, claims, estimate_llc


def _decides(est, bias, exact, wrong):
    """The calibration check holds at the exact lambda, and each wrong theory's value taken
    as the prediction (the negative control) is refuted."""

    def judge(prediction, alternatives):
        return claims.learning_coefficient(
            "lambda",
            prediction=prediction,
            alternatives=alternatives,
            value=float(est.llc),
            stderr=float(est.stderr),
            num_chains=est.num_chains,
            bias=bias,
        )

    assert judge(exact, wrong).holds
    for value in wrong:
        assert judge(value, [exact]).refuted


def _estimate(problem, key, **sampler):
    est = estimate_llc(problem.loss_fn, problem.w_star, problem.data, key=key, **sampler)
    bias = _problems.sampler_bias(
        problem, n=est.n, beta=est.beta, step_size=est.step_size, localization=est.localization
    )
    return est, bias


@pytest.fixture(scope="module")
def regression():
    pr = _problems.linear_regression(jax.random.key(0), 4, 300)
    sampler = dict(num_chains=16, num_draws=1000, num_burnin=200, step_size=1e-3)
    return pr, *_estimate(pr, jax.random.key(1), localization=1.0, **sampler)


def test_regular_model_d_over_2_and_wrong_d_refuted(regression):
    _, est, bias = regression
    assert bias < 0.1  # the quadratic expansion's bias at these settings is small
    _decides(est, bias, 2.0, [1.5, 2.5])  # negative controls: one parameter more or fewer


def test_stationarity_and_its_negative_control(regression):
    pr, est, _ = regression
    assert not claims.stationary(est).refuted  # holds or, with this few draws, inconclusive
    # chains with no burn-in and a tiny step start at the minimum and are still climbing
    cold, _ = _estimate(
        pr, jax.random.key(2), num_chains=16, num_draws=400, num_burnin=0, step_size=2e-5,
        localization=1.0,
    )  # fmt: skip
    assert claims.stationary(cold).refuted


@pytest.mark.slow
@pytest.mark.heavy  # kept out of the fast suite for its time
def test_softmax_copy_head_gauge_and_ignoring_it_refuted():
    """Softmax's row-shift gauge removes L directions: (d - L) / 2, not d / 2."""
    L, V = 3, 2
    pr = _problems.copy_head_network(jax.random.key(3), "softmax", L, V, 20)
    assert _problems.flat_directions(pr.hessian) == L
    est, bias = _estimate(
        pr, jax.random.key(4), n=1e4, num_chains=16, num_draws=1500, num_burnin=500,
        step_size=4e-5, localization=1.0,
    )  # fmt: skip
    d = L * L + V * V
    _decides(est, bias, (d - L) / 2, [d / 2])  # negative control: the gauge ignored


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
    _decides(eff.fine, bias, 4.0, [9.0])  # negative control: the regular count


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
        "free_energy_transition",
    }
    for fn in ours.values():
        assert fn().refuted
