"""User events of simulate_particles: exact event times, which event fired, and the derivative
of a clustering time with respect to beta against finite differences."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from jaxdyn import Status
from jaxdyn.meanfield import simulate_particles, uniform_on_sphere
from jaxdyn.meanfield._clusters import single_cluster_condition
from jaxdyn.meanfield.fields import Linear, SphereSoftmax

N, D = 40, 2


def _linear_problem():
    """Linear attention with A = I, V = I: x(t) = x0 (I - 2 t M0)^{-1/2}, M0 = x0^T x0 / n."""
    x0 = np.random.default_rng(0).standard_normal((N, D))
    M0 = x0.T @ x0 / N
    return Linear(Q=np.sqrt(D) * np.eye(D), K=np.eye(D), V=np.eye(D)), x0, M0


def _second_moment(M0, t):
    """``(1/n) sum_i |x_i(t)|^2 = tr(M0 (I - 2 t M0)^{-1})`` from the exact solution."""
    lam = np.linalg.eigvalsh(M0)
    return float(np.sum(lam / (1.0 - 2.0 * t * lam)))


def test_user_event_time_matches_the_exact_crossing():
    att, x0, M0 = _linear_problem()
    level = 3.0 * _second_moment(M0, 0.0)
    t_star = 1.0 / (2.0 * np.linalg.eigvalsh(M0)[-1])
    exact = scipy.optimize.brentq(lambda t: _second_moment(M0, t) - level, 0.0, t_star * 0.999)
    sol = simulate_particles(
        att,
        x0,
        t_star,
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-12),
        events={"spread": lambda t, x: jnp.mean(jnp.sum(x**2, -1)) / level - 1.0},
    )
    assert bool(sol.status == Status.event_occurred)
    assert bool(sol.events["spread"])
    # bisection to 1e-14 on the interpolant; the interpolant's error is ~ the solver's rtol
    np.testing.assert_allclose(float(sol.t_event), exact, rtol=1e-8)
    np.testing.assert_allclose(float(sol.t_final), exact, rtol=1e-8)


@pytest.mark.slow
@pytest.mark.heavy
def test_the_first_of_several_events_stops_the_solve_and_is_named():
    att, x0, M0 = _linear_problem()
    t_star = 1.0 / (2.0 * np.linalg.eigvalsh(M0)[-1])
    events = {
        "early": lambda t, x: t - 0.3 * t_star,
        "late": lambda t, x: t - 0.6 * t_star,
    }
    sol = simulate_particles(
        att,
        x0,
        2 * t_star,
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        events=events,
    )
    assert bool(sol.events["early"]) and not bool(sol.events["late"])
    np.testing.assert_allclose(float(sol.t_event), 0.3 * t_star, rtol=1e-12)
    # the blow-up comes before a user event set after t*: status blowup, no user event fired
    late = {"after_blowup": lambda t, x: t - 1.5 * t_star}
    sol = simulate_particles(att, x0, 2 * t_star, blowup_norm=1e3, events=late, max_steps=20000)
    assert bool(sol.status == Status.blowup) and not bool(sol.events["after_blowup"])
    assert float(sol.t_event) < t_star
    # no event before t1: successful, t_event infinite
    sol = simulate_particles(att, x0, 0.1 * t_star, events=events)
    assert bool(sol.status == Status.successful) and np.isinf(float(sol.t_event))


@pytest.mark.slow
@pytest.mark.heavy
def test_clustering_time_derivative_matches_finite_differences():
    """dT/dbeta through the solver (implicit function theorem at the event) vs central finite
    differences. FD error model: truncation ~ |fd(h) - fd(2h)| (h^2 terms) plus solver noise
    rtol * T / h."""
    x0 = uniform_on_sphere(jax.random.key(1), 8, 2)
    rtol, radius = 1e-10, 0.1

    def clustering_time(beta):
        sol = simulate_particles(
            SphereSoftmax(beta, 2, bounded=False),
            x0,
            100.0,
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol),
            events={"one_cluster": single_cluster_condition(radius)},
        )
        return sol.t_event

    T = jax.jit(clustering_time)
    beta, h = 1.0, 1e-3
    grad = float(jax.jit(jax.grad(clustering_time))(beta))
    fd_h = float((T(beta + h) - T(beta - h)) / (2 * h))
    fd_2h = float((T(beta + 2 * h) - T(beta - 2 * h)) / (4 * h))
    t_value = float(T(beta))
    assert np.isfinite(t_value) and t_value > 0
    tolerance = abs(fd_h - fd_2h) + 10 * rtol * t_value / h
    assert abs(grad - fd_h) <= tolerance, (grad, fd_h, fd_2h)
    assert abs(grad) > 100 * tolerance  # the derivative is resolved, not zero within noise


def test_bad_events_are_rejected_before_compiling():
    att, x0, _ = _linear_problem()
    # the function's TypeError, or the annotation's TypeCheckError under the test hook
    with pytest.raises(TypeError, match="event"):
        simulate_particles(att, x0, 1.0, events={"e": 3.0})
    with pytest.raises(ValueError, match="reserved"):
        simulate_particles(att, x0, 1.0, events={"blowup": lambda t, x: t})
