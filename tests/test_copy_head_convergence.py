"""Error models of the copy-head checks: the Newton estimate of an optimiser's remaining error
and the bootstrap estimate of a fit's finite-P bias (copy_head.md, "Validation protocol")."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _measure, _task, _train


def test_newton_estimate_is_exact_on_a_quadratic_with_a_linear_observable():
    A = jnp.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    x_star = jnp.array([0.3, -1.2, 2.0])
    f = lambda p: 0.5 * (p["x"] - x_star) @ A @ (p["x"] - x_star)
    o = lambda p: jnp.array([p["x"][0] - 2.0 * p["x"][2], jnp.sum(p["x"])])
    x = {"x": jnp.array([1.0, 1.0, 1.0])}
    est = ch.newton_estimate(f, x, o)
    assert bool(est.converged)
    np.testing.assert_allclose(est.change, o({"x": x_star}) - o(x), atol=1e-9)
    np.testing.assert_allclose(est.step_norm, jnp.linalg.norm(x_star - x["x"]), rtol=1e-9)


def test_newton_estimate_is_not_converged_on_a_saddle():
    f = lambda p: p[0] ** 2 - p[1] ** 2
    est = ch.newton_estimate(f, jnp.array([1.0, 2.0]), lambda p: p)
    assert not bool(est.converged)
    assert np.all(np.isinf(est.bound()))


def _problem(seed):
    """A random softmax copy head problem: data, temperature and prior variances drawn."""
    L, V, P = 6, 3, 20
    k = jax.random.split(jax.random.key(seed), 3)
    X, Y = ch.copy_task(k[0], P, L, V)
    T, sw2, sg2 = (float(v) for v in jax.random.uniform(k[1], (3,), minval=0.5, maxval=2.0))
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), T, sw2, sg2)
    return posterior, ch.copy_statistics(X, Y), k[2], L, V


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
@pytest.mark.heavy
def test_newton_estimate_predicts_what_an_early_stopped_adam_has_left(seed):
    """Adam (constant learning rate 0.02) on the joint energy stopped after n = 100, 200, 300,
    400 steps; x* the minimum it approaches (Newton's iteration with the dense Hessian, to
    machine precision; a minimum: positive definite Hessian). The Newton estimate at the
    stopped point predicts o(x*) - o(x) for a_G and the population test loss within its own
    size (|true - estimate| <= |estimate|: the factor 2 the experiments allow), and its
    relative error falls with the distance to x* (the remainder is second order: measured 0.2
    at distance 0.4, 6e-6 at 6e-6)."""
    posterior, stats, key, L, V = _problem(seed)
    energy = lambda q: posterior.energy(q["W"], q["G"], stats)
    observable = lambda q: jnp.stack(
        [
            _measure.measure(posterior, q["G"], q["W"], stats)["c_G"],
            _measure.population_test_loss(posterior, q["G"], q["W"], V=V),
        ]
    )

    G0 = 2.0 * _task.shift_matrix(L)

    @jax.jit
    def stopped(n):
        state = _train.map_init(key, L, V, 0.02, G0=G0)
        step = lambda _, s: _train.map_step(s, posterior, stats)[0]
        return jax.lax.fori_loop(0, n, step, state).params

    def newton_limit(p):
        flat, unravel = jax.flatten_util.ravel_pytree(p)
        f = lambda v: energy(unravel(v))
        step = lambda v, _: (v - jnp.linalg.solve(jax.hessian(f)(v), jax.grad(f)(v)), None)
        v = jax.lax.scan(step, flat, None, length=30)[0]
        return unravel(v), jnp.linalg.eigvalsh(jax.hessian(f)(v))[0]

    relative, distance = [], []
    newton = jax.jit(newton_limit)
    estimate = jax.jit(lambda q: ch.newton_estimate(energy, q, observable))
    for n in (100, 200, 300, 400):
        p = stopped(n)
        x_star, lowest = newton(p)
        assert float(lowest) > 0
        true = np.asarray(observable(x_star) - observable(p))
        est = estimate(p)
        assert bool(est.converged)
        change = np.asarray(est.change)
        assert np.all(np.abs(true - change) <= np.abs(change)), (n, true, change)
        relative.append(float(np.max(np.abs(true - change) / np.abs(true))))
        distance.append(float(est.step_norm))
    order = np.argsort(distance)
    assert relative[order[0]] < relative[order[-1]]


def test_bootstrap_weights_resample_the_weighted_data():
    """sum(w) draws in total (fractional P kept), none on padding, E[w_boot] = w, and the
    multinomial variance P p (1 - p) per sequence, p = w / P."""
    w = jnp.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0])
    draws = jax.jit(jax.vmap(lambda k: _task.bootstrap_weights(k, w)))(
        jax.random.split(jax.random.key(0), 20_000)
    )
    np.testing.assert_allclose(jnp.sum(draws, axis=1), 5.5, rtol=1e-12)
    assert float(jnp.max(jnp.abs(draws[:, 6:]))) == 0.0
    n = draws.shape[0]
    mean, var = np.asarray(jnp.mean(draws, 0)), np.asarray(jnp.var(draws, 0))
    np.testing.assert_array_less(np.abs(mean - w)[:6], 5 * np.sqrt(var[:6] / n))
    p = w[:5] / 5.5
    expected_var = 5.0 * p * (1 - p)  # five whole draws; the half draw adds at most 0.25 p
    np.testing.assert_array_less(np.abs(var[:5] - expected_var), 0.25 * p + 0.05 * expected_var)


def test_bootstrap_estimates_the_bias_of_the_plug_in_variance():
    """The plug-in variance of P draws has bias -sigma^2 / P; the mean over resamples of the
    plug-in variance minus the estimate recovers it (in expectation -s^2 / P, s^2 the plug-in
    variance of the data), within 5 standard errors over resamples."""
    P = 12
    x = jax.random.normal(jax.random.key(1), (P,))
    plug_in = lambda w: jnp.sum(w * x**2) / jnp.sum(w) - (jnp.sum(w * x) / jnp.sum(w)) ** 2
    s2 = plug_in(jnp.ones(P))
    boot = jax.jit(jax.vmap(lambda k: plug_in(_task.bootstrap_weights(k, jnp.ones(P)))))(
        jax.random.split(jax.random.key(2), 40_000)
    )
    bias = float(jnp.mean(boot) - s2)
    se = float(jnp.std(boot)) / np.sqrt(boot.size)
    assert abs(bias - float(-s2 / P)) < 5 * se
