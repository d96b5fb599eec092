"""simulate_particles against an exact particle solution: linear attention, V = A = I.

With ``Gamma_mu(x) = M x``, ``M = (1/n) sum_j y_j y_j^T``, the second moment obeys
``dM/dt = 2 M^2``, so ``M(t) = M_0 (I - 2 t M_0)^{-1}`` and every particle follows
``x_i(t) = (I - 2 t M_0)^{-1/2} x_i(0)``: finite-time blow-up at ``t* = 1 / (2 lambda_max(M_0))``.
"""

import diffrax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from jaxdyn import Status
from jaxdyn.meanfield import simulate_particles
from jaxdyn.meanfield.fields import Linear

D, N = 2, 16


def _setup():
    x0 = np.random.default_rng(0).standard_normal((N, D))
    M0 = x0.T @ x0 / N
    att = Linear(Q=np.sqrt(D) * np.eye(D), K=np.eye(D), V=np.eye(D))
    return att, x0, M0


def _exact(x0, M0, t):
    w, U = np.linalg.eigh(np.eye(D) - 2 * t * M0)
    return x0 @ (U * w**-0.5) @ U.T


@pytest.mark.slow
@pytest.mark.heavy
def test_particles_follow_the_exact_linear_attention_solution():
    att, x0, M0 = _setup()
    t_star = 1 / (2 * np.linalg.eigvalsh(M0)[-1])
    ts = jnp.linspace(0.0, 0.8 * t_star, 5)
    sol = simulate_particles(
        att,
        jnp.asarray(x0),
        0.8 * t_star,
        ts=ts,
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-12),
    )
    assert bool(sol.status == Status.successful)
    for k, t in enumerate(np.asarray(ts)):
        np.testing.assert_allclose(sol.xs[k], _exact(x0, M0, t), rtol=1e-8, atol=1e-10)
    # save_fn stores statistics instead of particles, and chunked velocities agree.
    stats = simulate_particles(
        Linear(Q=att.Q, K=att.K, V=att.V, chunk_size=5),
        jnp.asarray(x0),
        0.8 * t_star,
        ts=ts,
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-12),
        save_fn=lambda t, x: jnp.mean(x**2),
    )
    np.testing.assert_allclose(stats.xs, np.mean(np.asarray(sol.xs) ** 2, axis=(1, 2)), rtol=1e-8)


def test_particle_blowup_event_located_at_the_exact_norm_crossing():
    att, x0, M0 = _setup()
    t_star = 1 / (2 * np.linalg.eigvalsh(M0)[-1])
    R = 1e3
    sol = simulate_particles(
        att,
        jnp.asarray(x0),
        2 * t_star,
        blowup_norm=R,
        stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-12),
        max_steps=100000,
    )
    assert bool(sol.status == Status.blowup)
    crossing = scipy.optimize.brentq(
        lambda t: np.max(np.linalg.norm(_exact(x0, M0, t), axis=1)) - R, 0.0, t_star * (1 - 1e-15)
    )
    assert abs(float(sol.t_final) - crossing) < 1e-9 * t_star
    assert float(sol.t_final) < t_star


@pytest.mark.slow
def test_fixed_steps_converge_to_adaptive():
    att, x0, M0 = _setup()
    t1 = 0.5 / (2 * np.linalg.eigvalsh(M0)[-1])
    fixed = simulate_particles(
        att, jnp.asarray(x0), t1, stepsize_controller=diffrax.ConstantStepSize(), dt0=t1 / 200
    )
    np.testing.assert_allclose(fixed.final_x, _exact(x0, M0, t1), rtol=1e-7)
