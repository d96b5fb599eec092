"""The particle-side decisions (jaxdyn.evidence, with the particle closure's rate and
alternatives) on inputs whose answer is
known: each can say holds, refuted and inconclusive, and the gradient-flow structure of
unnormalised and normalised softmax on random weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.evidence import (
    Verdict,
    ensemble_mean as ensemble_mean_evidence,
    monotone as monotone_evidence,
    rate,
    trend as trend_evidence,
)
from jaxdyn.meanfield import claims, interaction_energy, meanfield_error
from jaxdyn.meanfield._gradient_flow import (
    softmax_normaliser,
    twisted_force_jacobian,
    weighted_twisted_speed_squared,
)
from jaxdyn.meanfield._meanfield_limit import antithetic_gaussian_sample
from jaxdyn.meanfield.fields import Exponential, Softmax
from jaxdyn.meanfield.fields._wrappers import DriftedClosure


def rate_evidence(claim, n, errors):
    # the particle closure: prediction -1/2, alternatives 0 (no decay) and -1 (quadrature)
    return rate(claim, n, errors, prediction=-0.5, alternatives=(0.0, -1.0))


def _series(rate, floor=0.0, systems=16, sizes=(32, 128, 512, 2048), scatter=0.5, seed=0):
    rng = np.random.default_rng(seed)
    n = np.repeat(np.asarray(sizes, dtype=float), systems)
    return n, (0.05 * n**rate + floor) * np.exp(scatter * rng.standard_normal(n.size))


def test_rate_evidence_holds_for_an_inverse_square_root_series():
    assert rate_evidence("r", *_series(-0.5)).verdict is Verdict.holds


@pytest.mark.parametrize("rate", [-1.0, 0.0, -0.2])
def test_rate_evidence_refutes_other_rates(rate):
    assert rate_evidence("r", *_series(rate)).verdict is Verdict.refuted


def test_rate_evidence_refutes_a_biased_limit_and_is_inconclusive_without_power():
    # an error floor (a closure converging to the wrong limit) flattens the slope
    assert rate_evidence("r", *_series(-0.5, floor=3e-3)).verdict is not Verdict.holds
    # two nearby sizes and few systems: both alternatives inside the interval
    few = _series(-0.5, systems=3, sizes=(64, 128))
    assert rate_evidence("r", *few).verdict is Verdict.inconclusive


@pytest.mark.slow
def test_rate_check_refutes_particles_measured_against_another_limit():
    """Real particles (softmax, n = 32..512) against a closure off by a drift of 3e-3: the
    particles converge to another limit than this Gaussian ODE, their dynamic error stops
    decaying, and the n^-1/2 check (pde-meanfield's decision) says refuted."""
    rng = np.random.default_rng(3)
    field = Softmax(*(0.25 * rng.standard_normal((2, 2)) for _ in range(2)), np.eye(2))
    mean0, cov0 = jnp.array([0.27, -0.21]), jnp.array([[0.7, 0.1], [0.1, 0.5]])
    wrong = DriftedClosure(field, jnp.array([3e-3, 0.0]))
    sizes, n_max = np.array([32, 128, 512]), 512

    def dynamic(n, key):
        # the n-point sample, repeated to n_max points: one compiled program for every n
        x = antithetic_gaussian_sample(key, mean0, cov0, n_max)
        index = jnp.arange(n_max // 2) % (n // 2)
        x = jnp.concatenate([x[: n_max // 2][index], x[n_max // 2 :][index]])
        return meanfield_error(wrong, x, mean0, cov0, 1.0).dynamic

    n = np.repeat(sizes, 4)
    keys = jax.random.split(jax.random.key(2), n.size)
    errors = np.asarray(jax.jit(jax.vmap(dynamic))(jnp.asarray(n), keys))
    assert rate_evidence("r", n, errors).verdict is Verdict.refuted


def test_ensemble_mean_evidence_takes_its_error_from_the_spread_of_ensembles():
    rng = np.random.default_rng(1)
    samples = 1.0 + 0.01 * rng.standard_normal((12, 3))
    assert ensemble_mean_evidence("m", samples, prediction=1.0, alternative=1.1).holds
    assert ensemble_mean_evidence("m", samples, prediction=1.1, alternative=1.0).refuted
    wide = 1.0 + 0.5 * rng.standard_normal((4, 3))
    assert ensemble_mean_evidence("m", wide, prediction=1.0, alternative=1.05).inconclusive


def test_monotone_evidence_all_three_verdicts():
    up = np.array([1.0, 1.1, 1.3, 1.4])
    kw = dict(error=1e-3, basis="test", increasing=True)
    assert monotone_evidence("m", up, **kw).holds
    assert monotone_evidence("m", [1.0, 1.1, 1.05, 1.4], **kw).refuted
    assert monotone_evidence("m", [1.0, 1.0, 1.0], **kw).inconclusive


def test_stability_and_trend_decisions():
    assert claims.stability_bound("s", [0.5, 0.9], [1.0, 1.0], relative_error=1e-6, basis="")
    assert (
        claims.stability_bound("s", [1.5], [1.0], relative_error=1e-6, basis="").verdict
        is Verdict.refuted
    )
    infinite = claims.stability_bound("s", [0.5], [np.inf], relative_error=1e-6, basis="")
    assert infinite.verdict is Verdict.inconclusive
    x = np.repeat(np.arange(5.0), 4)
    rng = np.random.default_rng(2)
    assert trend_evidence("t", x, 2 * x + 0.1 * rng.standard_normal(x.size)).holds
    assert trend_evidence("t", x, -2 * x + 0.1 * rng.standard_normal(x.size)).refuted
    assert trend_evidence("t", x, rng.standard_normal(x.size)).verdict is not Verdict.holds


def _random_gradient_weights(d, seed):
    # A symmetric definite, M = V A^{-1} symmetric definite: V = M A
    rng = np.random.default_rng(seed)
    S, G = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    A = -0.2 * (S @ S.T / d + 0.3 * np.eye(d))
    M = G @ G.T / d + 0.3 * np.eye(d)
    return A, M


@pytest.mark.parametrize("d, seed", [(2, 0), (3, 1)])
def test_normalised_softmax_is_a_gradient_flow_only_in_the_weighted_twisted_metric(d, seed):
    A, M = _random_gradient_weights(d, seed)
    Q, K, V = np.sqrt(d) * A, np.eye(d), M @ A
    x = 0.7 * jax.random.normal(jax.random.key(seed), (10, d))
    unnormalised = Exponential(Q=Q, K=K, V=V)
    normalised = Softmax(Q=Q, K=K, V=V)
    # the unnormalised flow: symmetric configuration Jacobian of M^-1 Gamma
    assert claims.gradient_structure("g", twisted_force_jacobian(unnormalised, x, M)).holds
    # the normalised flow: not in d_AV, but with the normaliser as weight
    assert claims.gradient_structure("g", twisted_force_jacobian(normalised, x, M)).refuted
    weighted = twisted_force_jacobian(
        normalised, x, M, weight_fn=lambda y: softmax_normaliser(normalised, y)
    )
    assert claims.gradient_structure("g", weighted).holds
    # energy-dissipation equality of E = 1/2 int int exp(x^T A y) along the normalised flow
    v = normalised.velocity(x, x)
    _, rate = jax.jvp(lambda y: interaction_energy(normalised, y), (x,), (v,))
    z = softmax_normaliser(normalised, x)
    assert claims.dissipation(
        "e", rate, weighted_twisted_speed_squared(normalised, x, M, weights=z)
    ).holds
    assert claims.dissipation("e", rate, weighted_twisted_speed_squared(normalised, x, M)).refuted


def test_l2_bounded_decision_leaves_out_a_stall_inside_the_bound_only():
    from jaxdyn.meanfield._particle_measures import stalled_inside_bound

    growth = np.array([[0.2, 0.3], [0.1, np.inf]])
    # the second draw stalled (max_steps) with its last state at 1e-40 of the bound
    assert claims.l2_bounded(growth, [True, False], [0.3, 1e-40]).verdict is Verdict.holds
    assert list(stalled_inside_bound([True, False], [0.3, 1e-40])) == [False, True]
    # the same stall beyond the bound, or not finite, is a blow-up: refuted
    for at_stop in (5.0, np.inf):
        evidence = claims.l2_bounded(growth, [True, False], [0.3, at_stop])
        assert evidence.verdict is Verdict.refuted
        assert not stalled_inside_bound([True, False], [0.3, at_stop]).any()
    assert claims.l2_bounded(growth[1:], [False], [1e-40]).verdict is Verdict.inconclusive
