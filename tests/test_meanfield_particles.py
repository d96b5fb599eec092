"""Particle integrators, tokens on the sphere and the invariances the experiments rely on."""

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.meanfield import RK4, detect_clusters, simulate_particles, uniform_on_sphere
from jaxdyn.meanfield.fields import Linear, Sigmoid, Sinkhorn, Softmax, SphereSoftmax


def test_rk4_is_fourth_order_on_a_linear_ode():
    # dy/dt = -y + cos t has an exact solution; halving dt divides the error by ~16
    def solve(steps):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, a: -y + jnp.cos(t)),
            RK4(),
            0.0,
            2.0,
            2.0 / steps,
            jnp.asarray(1.0),
            stepsize_controller=diffrax.ConstantStepSize(),
        )
        return float(sol.ys[-1])

    exact = 0.5 * np.exp(-2.0) + 0.5 * (np.cos(2.0) + np.sin(2.0))
    errors = [abs(solve(n) - exact) for n in (10, 20, 40)]
    # Observed order log2(e(h) / e(h/2)) = 4 + O(h): it rounds to 4 (not 3 or 5), and its
    # deviation from 4 shrinks as h halves (the asymptotic regime), no band fitted to values.
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert abs(orders[-1] - 4.0) < 0.5, orders
    assert abs(orders[-1] - 4.0) < abs(orders[0] - 4.0), orders


def _numpy_softmax_rk4(x, A, V, t1, steps):
    """An independent slow implementation: softmax particle velocities and RK4 in NumPy."""

    def velocity(x):
        s = x @ A.T @ x.T  # s[i, j] = x_j^T A x_i
        w = np.exp(s - s.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        return (w @ x) @ V.T

    h = t1 / steps
    for _ in range(steps):
        k1 = velocity(x)
        k2 = velocity(x + 0.5 * h * k1)
        k3 = velocity(x + 0.5 * h * k2)
        k4 = velocity(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def test_fixed_steps_matches_a_numpy_rk4_of_softmax_attention():
    rng = np.random.default_rng(0)
    d, n = 3, 20
    Q, K = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    V = rng.standard_normal((d, d))
    x0 = rng.standard_normal((n, d))
    sol = simulate_particles(
        Softmax(Q=Q, K=K, V=V),
        x0,
        0.7,
        dt0=0.7 / 14,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    )
    expected = _numpy_softmax_rk4(x0, K.T @ Q / np.sqrt(d), V, 0.7, 14)
    np.testing.assert_allclose(sol.final_x, expected, atol=1e-11)
    assert bool(sol.status == Status.successful)


@pytest.mark.slow
@pytest.mark.heavy
def test_on_grid_saves_take_the_same_steps_as_diffeqsolve_values_and_gradients():
    """RK4 at constant steps with no event and saves on the step grid runs as a lax loop; with
    an event that never fires (``blowup_norm=inf``) it goes through ``diffrax.diffeqsolve``:
    same states, same gradient (both are checked against a NumPy RK4 above)."""
    rng = np.random.default_rng(3)
    d, n, steps, t1 = 3, 8, 12, 0.6
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    x0 = jnp.asarray(rng.standard_normal((n, d)))
    ts = np.arange(1, 5) * (3 * t1 / steps)  # steps 3, 6, 9, 12

    def run(scale, blowup_norm):
        field = Softmax(Q=scale * Q, K=K, V=V)
        sol = simulate_particles(
            field,
            x0,
            t1,
            dt0=t1 / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=blowup_norm,
            ts=ts,
        )
        return sol.xs, sol.final_x

    fast, slow = run(1.0, None), run(1.0, np.inf)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)

    def loss(scale, blowup_norm):
        xs, final = run(scale, blowup_norm)
        return jnp.sum(xs**2) + jnp.sum(jnp.sin(final))

    np.testing.assert_allclose(jax.grad(loss)(1.0, None), jax.grad(loss)(1.0, np.inf), rtol=1e-12)


@pytest.mark.parametrize("variant", ["sinkhorn", "sigmoid"])
def test_duplicated_particles_follow_the_same_mean_field_dynamics(variant):
    # n samples each repeated r times define the same empirical measure, hence the same flow
    # (pde-meanfield runs every n in one compiled sweep this way)
    rng = np.random.default_rng(1)
    d, n, r = 2, 12, 3
    Q, K = 0.7 * rng.standard_normal((d, d)), 0.7 * rng.standard_normal((d, d))
    V = np.eye(d)
    att = {
        "softmax": Softmax(Q=Q, K=K, V=V),
        "sinkhorn": Sinkhorn(Q=Q, K=K, V=V, iterations=60),
        "sigmoid": Sigmoid(Q=Q, K=K, V=V, bias=0.3),
    }[variant]
    x0 = rng.standard_normal((n, d))
    single = simulate_particles(
        att,
        x0,
        0.5,
        dt0=0.5 / 5,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    ).final_x
    repeated = simulate_particles(
        att,
        np.repeat(x0, r, axis=0),
        0.5,
        dt0=0.5 / 5,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    ).final_x
    np.testing.assert_allclose(np.asarray(repeated)[::r], single, atol=1e-10)


@functools.partial(jax.jit, static_argnums=1)
def _sphere_flow(beta, t1, x0):
    # one compilation per t1 shared by the sphere tests (beta is traced; the fixed-step path
    # needs t1 concrete)
    return simulate_particles(
        SphereSoftmax(beta, x0.shape[1], bounded=False),
        x0,
        t1,
        dt0=t1 / 300,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    ).final_x


def test_sphere_projected_velocity_is_tangent_and_the_flow_stays_on_the_sphere():
    d, n = 3, 16
    x0 = uniform_on_sphere(jax.random.key(0), n, d)
    np.testing.assert_allclose(jnp.linalg.norm(x0, axis=-1), 1.0, atol=1e-14)
    att = SphereSoftmax(4.0, d, bounded=False)
    v = att.velocity(x0, x0)
    np.testing.assert_allclose(jnp.sum(v * x0, axis=-1), 0.0, atol=1e-14)
    final = _sphere_flow(4.0, 5.0, x0)
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(final, axis=-1) - 1.0))) < 1e-8
    # A = beta I: the base softmax has K^T Q / sqrt(d) = beta I
    np.testing.assert_allclose(att.A(), 4.0 * np.eye(d), atol=1e-14)


def test_sphere_softmax_at_small_beta_collapses_to_one_cluster():
    # beta -> 0: every token moves towards the (projected) mean, so consensus is reached
    d, n = 3, 16
    x0 = uniform_on_sphere(jax.random.key(3), n, d)
    _, k = detect_clusters(_sphere_flow(0.5, 30.0, x0), 0.05)
    assert int(k) == 1


def test_fixed_steps_marks_a_blown_up_linear_attention_cloud_nan():
    # linear attention's velocity is cubic in x: large clouds blow up in finite time

    x0 = 3.0 * np.ones((4, 1)) + np.arange(4.0)[:, None]
    sol = simulate_particles(
        Linear(Q=np.eye(1), K=np.eye(1), V=np.eye(1)),
        x0,
        5.0,
        dt0=5.0 / 50,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    )
    assert bool(sol.status == Status.nonfinite)


def test_fixed_steps_rejects_bad_inputs():
    att = Softmax(Q=np.eye(2), K=np.eye(2), V=np.eye(2))
    # ValueError from the function, or the annotation's TypeCheckError under the test hook
    with pytest.raises((ValueError, TypeError), match="x0"):
        simulate_particles(
            att,
            np.zeros(3),
            1.0,
            dt0=1.0 / 4,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
        )
    with pytest.raises(ValueError, match="dt0"):
        simulate_particles(
            att,
            np.zeros((3, 2)),
            1.0,
            dt0=0.0,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
        )


def _projected_softmax_velocity(x, tokens, beta):
    """The plain definition in NumPy: row-max softmax of beta <x_i, y_j>, then P_x^perp."""
    s = beta * x @ tokens.T
    w = np.exp(s - s.max(axis=1, keepdims=True))
    avg = (w / w.sum(axis=1, keepdims=True)) @ tokens
    return avg - np.sum(avg * x, axis=1, keepdims=True) / np.sum(x * x, axis=1, keepdims=True) * x


@jax.jit
def _sphere_velocities(beta, x, tokens):
    # bounded, general and chunked-bounded velocities; one compilation per shape (beta traced)
    d = x.shape[1]
    fast = SphereSoftmax(beta, d)
    general = SphereSoftmax(beta, d, bounded=False)
    return (
        fast.velocity(x, tokens),
        general.velocity(x, tokens),
        SphereSoftmax(beta=beta, d=d, chunk_size=16).velocity(x, tokens),
    )


@pytest.mark.parametrize("beta", [0.3, 4.0, 30.0])
def test_bounded_sphere_softmax_velocity_equals_the_projected_softmax_velocity(beta):
    # the shift by the bound beta (no row max) changes nothing but rounding, also off the
    # sphere (RK4 stages) and for queries that are not tokens
    rng = np.random.default_rng(7)
    d, n = 5, 40
    y = np.asarray(uniform_on_sphere(jax.random.key(1), n, d))
    off = y * (1.0 + 0.05 * rng.standard_normal((n, 1)))
    queries = rng.standard_normal((7, d))
    for x, tokens in [(y, y), (off, off), (queries, y)]:
        expected = _projected_softmax_velocity(x, tokens, beta)
        for v in _sphere_velocities(beta, x, tokens):
            np.testing.assert_allclose(v, expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(SphereSoftmax(beta, d).A(), beta * np.eye(d))


def test_bounded_sphere_softmax_rejects_bad_shapes():
    with pytest.raises(ValueError, match="beta must be a scalar"):
        SphereSoftmax(beta=np.ones(2), d=3)
    with pytest.raises(ValueError, match="d = 3 columns"):
        SphereSoftmax(beta=1.0, d=3).velocity(np.ones((4, 2)), np.ones((4, 2)))


def _numpy_rk4_sphere(x, beta, t1, steps, save_every=None):
    h = t1 / steps
    saves = [x] if save_every else []
    for k in range(steps):
        k1 = _projected_softmax_velocity(x, x, beta)
        y = x + 0.5 * h * k1
        k2 = _projected_softmax_velocity(y, y, beta)
        y = x + 0.5 * h * k2
        k3 = _projected_softmax_velocity(y, y, beta)
        y = x + h * k3
        k4 = _projected_softmax_velocity(y, y, beta)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if save_every and (k + 1) % save_every == 0:
            saves.append(x)
    return x, np.stack(saves) if save_every else None


def test_fixed_step_sphere_flow_matches_a_hand_written_rk4_at_its_save_times():
    # the default RK4 (diffrax, constant steps) against NumPy, for the bounded and general
    # velocities, saving on the step grid (t = 0 and every 4th step of 12)
    d, n, beta, t1, steps = 4, 24, 3.0, 1.5, 12
    x0 = np.asarray(uniform_on_sphere(jax.random.key(5), n, d))
    final, saves = _numpy_rk4_sphere(x0, beta, t1, steps, save_every=4)
    ts = np.linspace(0.0, t1, 4)
    for bounded in (True, False):
        sol = simulate_particles(
            SphereSoftmax(beta, d, bounded=bounded),
            x0,
            t1,
            dt0=t1 / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
        )
        np.testing.assert_allclose(sol.final_x, final, atol=1e-12)
        np.testing.assert_allclose(sol.xs, saves, atol=1e-12)
        np.testing.assert_allclose(sol.ts, ts, atol=1e-15)
        assert bool(sol.status == Status.successful)


@pytest.mark.parametrize("d", [1, 8, 16, 17, 40])
def test_sphere_projection_equals_the_projector_applied_to_the_base_velocity(d):
    # row dots written out (d <= 16) or summed as a reduction (d > 16): the same projector
    # (I - x x^T / |x|^2) v, computed here in NumPy float64 row by row
    from jaxdyn.meanfield.fields import SphereProjected

    rng = np.random.default_rng(d)
    n = 11
    base = Softmax(
        Q=rng.standard_normal((d, d)) / np.sqrt(d),
        K=rng.standard_normal((d, d)) / np.sqrt(d),
        V=rng.standard_normal((d, d)),
    )
    x = rng.standard_normal((n, d)) * rng.uniform(0.5, 2.0, (n, 1))
    v = np.asarray(base.velocity(jnp.asarray(x), jnp.asarray(x)), np.float64)
    projectors = [np.eye(d) - np.outer(xi, xi) / (xi @ xi) for xi in x]
    expected = np.stack([p @ vi for p, vi in zip(projectors, v, strict=True)])
    got = np.asarray(SphereProjected(base=base).velocity(jnp.asarray(x), jnp.asarray(x)))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(v).max())
    np.testing.assert_allclose(np.sum(got * x, axis=-1), 0.0, atol=1e-12 * np.abs(v).max())
