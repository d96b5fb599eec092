"""Stability, regularity, the mean-field limit, causal structure and gradient-flow identities,
each against an independent computation (closed form, quadrature, autodiff of a formula)."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.linalg

from jaxdyn.meanfield import (
    RK4,
    interaction_energy,
    meanfield_error,
    simulate_particles,
    uniform_on_sphere,
)
from jaxdyn.meanfield._analysis import wasserstein2_exact
from jaxdyn.meanfield._causal import causal_influence, sink_positions
from jaxdyn.meanfield._gradient_flow import sigmoid_energy, twisted_metric, twisted_speed_squared
from jaxdyn.meanfield._meanfield_limit import antithetic_gaussian_sample
from jaxdyn.meanfield._stability import (
    field_lipschitz_constants,
    flow_jacobian_norms,
    softmax_lipschitz_bounds,
    softmax_stability_constant,
)
from jaxdyn.meanfield.fields import (
    AbstractVelocityField,
    Exponential,
    Linear,
    Masked,
    Sigmoid,
    Softmax,
    SphereProjected,
)
from jaxdyn.meanfield.fields._wrappers import DriftedClosure


class _LinearDrift(AbstractVelocityField):
    """``Gamma(x) = M x``: the flow map is ``exp(M t)``, the same for every particle."""

    M: jax.Array

    def velocity(self, x, tokens, *, t=0.0):
        return x @ self.M.T


def _ball(key, n, d, radius):
    z = jax.random.normal(key, (n, d))
    r = radius * jax.random.uniform(jax.random.fold_in(key, 1), (n, 1)) ** (1.0 / d)
    return r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
@pytest.mark.heavy
def test_measured_softmax_lipschitz_constants_respect_the_bounds(seed):
    rng = np.random.default_rng(seed)
    d = 2 + seed % 2
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    field = Softmax(Q, K, V)
    radius = 0.5 + seed
    y = _ball(jax.random.key(seed), 12, d, radius)
    L_x, L_w2, L_w1 = (float(v) for v in field_lipschitz_constants(field, y))
    bound_x, bound_mu = softmax_lipschitz_bounds(field, radius)
    assert L_x <= bound_x and L_w2 <= L_w1 * (1 + 1e-12) and L_w1 <= bound_mu
    # independent formula: d Gamma / dx = V Cov_{p_x}(y) A at the first token
    A, x = np.asarray(field.A()), np.asarray(y[0])
    w = np.exp(np.asarray(y) @ A @ x)
    w /= w.sum()
    m = w @ np.asarray(y)
    cov = (np.asarray(y) - m).T @ ((np.asarray(y) - m) * w[:, None])
    J = jax.jacfwd(lambda q: field.velocity(q[None], y)[0])(y[0])
    np.testing.assert_allclose(J, V @ cov @ A, rtol=1e-10, atol=1e-12)


def test_a_priori_stability_constant_equals_its_integral():
    field = Softmax(0.3 * np.eye(2), np.eye(2), np.diag([1.0, 0.5]))
    a, v, R0, t = 0.3 / np.sqrt(2), 1.0, 0.8, 0.7

    def rate(s):
        r2 = (R0 * np.exp(v * s)) ** 2
        return v * a * r2 + v * (1 + 2 * a * r2) * np.exp(2 * a * r2)

    exact = np.exp(scipy.integrate.quad(rate, 0.0, t, epsabs=1e-13)[0])
    C = softmax_stability_constant(field, [0.0, t], [R0, R0], nodes=4001)
    assert C[-1] >= exact  # the trapezoidal rule over-estimates a convex integrand
    np.testing.assert_allclose(C[-1], exact, rtol=1e-5)


def test_flow_jacobian_norm_of_a_linear_flow_is_the_matrix_exponential_norm():
    M = jnp.array([[0.2, 1.0], [-0.3, -0.4]])
    ts = jnp.array([0.0, 0.5, 1.0])
    norms = flow_jacobian_norms(_LinearDrift(M), jnp.ones((5, 2)), ts, steps=200)
    exact = [np.linalg.norm(scipy.linalg.expm(np.asarray(M) * float(t)), 2) for t in ts]
    np.testing.assert_allclose(norms, exact, rtol=1e-8)


def test_measured_stability_ratios_stay_below_the_trajectory_constant():
    rng = np.random.default_rng(4)
    field = Softmax(*(0.5 * rng.standard_normal((2, 2)) for _ in range(2)), np.eye(2))
    ts = np.linspace(0.0, 1.0, 5)
    x0 = _ball(jax.random.key(5), 16, 2, 1.0)
    y0 = x0 + 0.05 * jax.random.normal(jax.random.key(6), x0.shape)
    xs, ys = (
        np.asarray(
            simulate_particles(
                field,
                z,
                1.0,
                dt0=1.0 / 40,
                solver=RK4(),
                stepsize_controller=diffrax.ConstantStepSize(),
                blowup_norm=None,
                ts=ts,
            ).xs
        )
        for z in (x0, y0)
    )
    radii = np.maximum(np.linalg.norm(xs, axis=-1).max(-1), np.linalg.norm(ys, axis=-1).max(-1))
    C = softmax_stability_constant(field, ts, radii)
    ratio = np.array([wasserstein2_exact(a, b) for a, b in zip(xs, ys, strict=True)])
    local = np.asarray(flow_jacobian_norms(field, x0, ts, 40))
    assert np.all(ratio / ratio[0] <= C) and np.all(local <= C)


def test_linear_attention_closure_is_exact_for_every_sample():
    """Linear attention's moments obey the Gaussian ODE for any measure: with the initial
    sampling error subtracted only the RK4 error remains."""
    field = Linear(0.5 * np.eye(2), np.eye(2), np.eye(2))
    x0 = antithetic_gaussian_sample(jax.random.key(0), jnp.array([0.3, -0.2]), jnp.eye(2), 64)
    err = meanfield_error(field, x0, jnp.array([0.3, -0.2]), jnp.eye(2), 0.5, steps=100)
    assert float(err.initial) > 1e-2 and float(err.moment_gap) < 1e-9 and float(err.dynamic) < 1e-7


def test_a_closure_bias_of_1e3_stands_out_of_the_dynamic_error():
    rng = np.random.default_rng(3)
    field = Softmax(*(0.25 * rng.standard_normal((2, 2)) for _ in range(2)), np.eye(2))
    mean0, cov0 = jnp.array([0.27, -0.21]), jnp.array([[0.7, 0.1], [0.1, 0.5]])
    biased = DriftedClosure(field, jnp.array([1e-3, 0.0]))

    @jax.jit
    def errors(key):
        x0 = antithetic_gaussian_sample(key, mean0, cov0, 256)
        right = meanfield_error(field, x0, mean0, cov0, 1.0)
        wrong = meanfield_error(biased, x0, mean0, cov0, 1.0)
        return right.dynamic, wrong.dynamic, right.total

    right, wrong, total = jax.vmap(errors)(jax.random.split(jax.random.key(1), 6))
    rms = {
        k: float(jnp.sqrt(jnp.mean(v**2))) for k, v in (("r", right), ("w", wrong), ("t", total))
    }
    assert rms["r"] < 1e-3 / 3 < 1e-3 / 2 < rms["w"]
    # the total error (initial sampling error included) hides the bias entirely
    assert rms["t"] > 30 * 1e-3


def test_causal_influence_is_zero_from_later_to_earlier_tokens():
    base = Softmax(np.eye(2), 0.5 * np.eye(2), np.eye(2))
    positions = sink_positions(10, 0.2, jax.random.key(0))
    assert int(jnp.sum(positions == 0.0)) == 2
    x0 = jax.random.normal(jax.random.key(1), (10, 2))
    influence = np.asarray(causal_influence(Masked(base, positions), x0, 0.5, 10))
    later = np.asarray(positions)[None, :] > np.asarray(positions)[:, None]
    assert np.all(influence[later] == 0.0) and np.all(influence[~later] > 0.0)


def test_padded_sink_positions_leave_the_real_tokens_flow_unchanged():
    # n = 7 real tokens padded to 12 (n traced): the padding comes after every real token, so
    # the first 7 follow the flow of the 7 alone, and the real positions are the sink layout
    base = Softmax(np.eye(2), 0.5 * np.eye(2), np.eye(2))
    positions = jax.jit(lambda n: sink_positions(n, 0.3, jax.random.key(3), length=12))(7)
    real = np.asarray(positions[:7])
    assert int(np.sum(real == 0.0)) == 3 and np.all(np.diff(real) >= 0) and real[-1] < 1
    assert np.all(np.asarray(positions[7:]) == 1.0)
    x0 = jax.random.normal(jax.random.key(4), (12, 2))
    padded = simulate_particles(
        Masked(base, positions),
        x0,
        0.5,
        dt0=0.5 / 10,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    ).final_x[:7]
    alone = simulate_particles(
        Masked(base, positions[:7]),
        x0[:7],
        0.5,
        dt0=0.5 / 10,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    ).final_x
    np.testing.assert_allclose(padded, alone, rtol=1e-12, atol=1e-14)


def test_unnormalised_softmax_dissipates_energy_in_the_twisted_distance():
    rng = np.random.default_rng(7)
    S, G = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    A = -0.2 * (S @ S.T + np.eye(3))
    M = G @ G.T + 0.3 * np.eye(3)
    field = Exponential(np.sqrt(3) * A, np.eye(3), M @ A)
    np.testing.assert_allclose(twisted_metric(field), M, rtol=1e-10)
    x = jax.random.normal(jax.random.key(2), (30, 3))
    v = field.velocity(x, x)
    _, rate = jax.jvp(lambda y: interaction_energy(field, y), (x,), (v,))
    np.testing.assert_allclose(rate, twisted_speed_squared(field, x), rtol=1e-10)
    assert abs(float(jnp.mean(jnp.sum(v**2, -1))) - float(rate)) > 1e-2 * float(rate)
    with pytest.raises(ValueError, match="symmetric"):
        twisted_metric(Exponential(np.sqrt(3) * A, np.eye(3), M @ A + np.triu(np.ones((3, 3)))))
    with pytest.raises(ValueError, match="definite"):
        twisted_metric(Exponential(np.sqrt(3) * A, np.eye(3), np.diag([1.0, -1.0, 1.0]) @ A))


@pytest.mark.parametrize("beta, bias", [(1.0, 0.0), (5.0, -2.0)])
def test_sigmoid_sphere_flow_is_an_energy_ascent(beta, bias):
    sigmoid = Sigmoid(beta * np.sqrt(3) * np.eye(3), np.eye(3), np.eye(3), bias=bias)
    x = uniform_on_sphere(jax.random.key(3), 25, 3)
    v = SphereProjected(sigmoid).velocity(x, x)
    _, rate = jax.jvp(lambda y: sigmoid_energy(sigmoid, y), (x,), (v,))
    np.testing.assert_allclose(rate, beta / 25 * jnp.sum(v**2), rtol=1e-10)
