"""Gradients through the Gaussian-ODE solver against the closed forms' derivatives."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield import blowup_time, softmax_identity_covariance
from jaxdyn.meanfield._design import (
    delay_blowup,
    solver_blowup_time,
    solver_final_covariance,
    weight_gradients,
)
from jaxdyn.meanfield.fields import Softmax

D = 3
RNG = np.random.default_rng(11)
Q0 = RNG.standard_normal((D, D))
K0 = RNG.standard_normal((D, D))
_G = RNG.standard_normal((D, D))
COV0 = _G @ _G.T / D + 0.3 * np.eye(D)
W = RNG.standard_normal((D, D))  # weights of the scalar functional tr(W Sigma(t1))


def _A(Q, K):
    return K.T @ Q / jnp.sqrt(D)


@pytest.mark.slow
@pytest.mark.heavy
def test_blowup_time_gradient_through_the_solver_matches_the_closed_form():
    att = Softmax(Q=Q0, K=K0, V=np.eye(D))
    t_closed = float(blowup_time(COV0, _A(Q0, K0)))
    assert np.isfinite(t_closed)

    @eqx.filter_jit
    def solver_value_and_grads(att):
        # one forward pass shared by the value and the gradient
        fn = lambda a: solver_blowup_time(a, jnp.zeros(D), COV0, 4 * t_closed)
        value, g = eqx.filter_value_and_grad(fn)(att)
        return value, {"Q": g.Q, "K": g.K, "V": g.V}

    t_solver, grads = solver_value_and_grads(att)
    assert abs(float(t_solver) - t_closed) < 1e-6 * t_closed
    gQ, gK = jax.grad(lambda Q, K: blowup_time(COV0, _A(Q, K)), argnums=(0, 1))(Q0, K0)
    scale = float(jnp.max(jnp.abs(gQ)))
    np.testing.assert_allclose(grads["Q"], gQ, atol=1e-5 * scale)
    np.testing.assert_allclose(grads["K"], gK, atol=1e-5 * scale)
    # V = c I runs the V = I flow at speed c, so t*(c) = t*/c and tr(dt*/dV) = -t*
    assert abs(float(jnp.trace(grads["V"])) + t_closed) < 1e-5 * t_closed


@pytest.mark.slow
def test_final_covariance_gradient_through_the_solver_matches_the_closed_form():
    # contracting weights (K = -Q) so Sigma(t1) stays finite; the functional is tr(W Sigma(t1))
    t1 = 1.5
    Qc, Kc = Q0, -Q0 + 0.3 * K0
    att = Softmax(Q=Qc, K=Kc, V=np.eye(D))

    @eqx.filter_jit
    def solver_value_and_grads(att):
        fn = lambda a: jnp.trace(W @ solver_final_covariance(a, jnp.zeros(D), COV0, t1))
        return fn(att), weight_gradients(fn, att)

    def closed(Q, K, t=t1):
        return jnp.trace(W @ softmax_identity_covariance(COV0, _A(Q, K), t))

    value, grads = solver_value_and_grads(att)
    assert abs(float(value) - float(closed(Qc, Kc))) < 1e-8
    gQ, gK = jax.grad(closed, argnums=(0, 1))(Qc, Kc)
    np.testing.assert_allclose(grads["Q"], gQ, atol=1e-7)
    np.testing.assert_allclose(grads["K"], gK, atol=1e-7)
    dt = jax.grad(lambda t: closed(Qc, Kc, t))(t1)
    assert abs(float(jnp.trace(grads["V"])) - t1 * float(dt)) < 1e-7


@pytest.mark.slow
def test_value_gradient_through_the_solver_matches_finite_differences():
    # off the closed-form family (random V): directional derivative against central differences
    t1 = 1.0
    V = np.eye(D) + 0.3 * RNG.standard_normal((D, D))
    direction = RNG.standard_normal((D, D))
    Qc, Kc = Q0, -Q0 + 0.3 * K0

    @jax.jit
    def f(V):
        return jnp.trace(
            W @ solver_final_covariance(Softmax(Q=Qc, K=Kc, V=V), jnp.zeros(D), COV0, t1)
        )

    g = jax.jit(jax.grad(f))(V)
    h = 1e-5
    fd = (float(f(V + h * direction)) - float(f(V - h * direction))) / (2 * h)
    assert abs(float(jnp.sum(g * direction)) - fd) < 1e-6 * max(1.0, abs(fd))


@pytest.mark.slow
def test_delay_blowup_design_pushes_the_closed_form_blowup_past_the_target():
    t_initial = float(blowup_time(COV0, _A(Q0, K0)))
    target = 2.0 * t_initial
    design = delay_blowup(Q0, K0, COV0, target, steps=30, learning_rate=0.1)
    assert float(design.losses[-1]) < float(design.losses[0])
    # the solver's time and the closed form agree on the designed weights, past the target
    t_final = float(blowup_time(COV0, _A(design.Q, design.K)))
    assert t_final > target
    np.testing.assert_allclose(jnp.linalg.norm(design.Q), np.linalg.norm(Q0), rtol=1e-12)
