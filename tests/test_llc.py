"""jaxdyn.llc: the estimator against closed forms, the exact learning coefficients, validation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.llc import estimate_llc, quadratic_llc, reduced_rank_rlct, step_size_effect


def _regression(d=3, samples=200, seed=0):
    kx, kw, ke = jax.random.split(jax.random.key(seed), 3)
    x = jax.random.normal(kx, (samples, d))
    y = x @ jax.random.normal(kw, (d,)) + jax.random.normal(ke, (samples,))
    w = jnp.linalg.lstsq(x, y)[0]
    loss = lambda w, b: 0.5 * jnp.mean((b[1] - b[0] @ w) ** 2)
    return loss, w, (x, y), np.asarray(x.T @ x / samples)


# --- Aoyagi and Watanabe's formula ----------------------------------------------------------


def test_rrr_regular_limit_h_equals_r():
    """No redundant hidden unit: the count of rank-r matrices, (M + N) r / 2 - r^2 / 2."""
    for M in range(1, 6):
        for N in range(1, 6):
            for H in range(1, min(M, N) + 1):
                lam, m = reduced_rank_rlct(M, N, H, H)
                assert lam == (M + N) * H / 2 - H * H / 2 and m == 1


def test_rrr_known_small_cases():
    # K = (a b)^2: lambda 1/2, multiplicity 2 (normal crossing of two squared coordinates)
    assert reduced_rank_rlct(1, 1, 1, 0) == (0.5, 2)
    # K = (a1 b1 + a2 b2)^2, a rank-4 quadratic form squared: lct 1, lambda 1/2, m 1
    assert reduced_rank_rlct(1, 1, 2, 0) == (0.5, 1)
    # b a^T = 0 (b, a in R^2): |a|^2 |b|^2, lambda 1 (= 2/2 from either factor), m 2
    assert reduced_rank_rlct(2, 2, 1, 0) == (1, 2)
    # more hidden units than needed, full rank truth: regular in the product, M N / 2
    assert reduced_rank_rlct(1, 1, 2, 1) == (0.5, 1)
    assert reduced_rank_rlct(3, 3, 3, 1) == (4, 1)


def test_rrr_symmetric_in_inputs_and_outputs_and_below_regular_count():
    for M in range(1, 6):
        for N in range(1, 6):
            for H in range(1, 6):
                for r in range(0, min(M, N, H) + 1):
                    assert reduced_rank_rlct(M, N, H, r) == reduced_rank_rlct(N, M, H, r)
                    lam, _ = reduced_rank_rlct(M, N, H, r)
                    assert 0 <= lam <= H * (M + N) / 2


def test_rrr_rejects_invalid():
    with pytest.raises(ValueError, match="true rank"):
        reduced_rank_rlct(2, 2, 1, 2)
    with pytest.raises(ValueError):
        reduced_rank_rlct(0, 2, 1, 0)
    with pytest.raises(TypeError):
        reduced_rank_rlct(2.0, 2, 1, 0)


# --- the quadratic closed form --------------------------------------------------------------


def test_quadratic_llc_limits():
    H = np.diag([1.0, 2.0, 3.0])
    assert quadratic_llc(H, n=100.0, beta=1.0) == pytest.approx(1.5, rel=1e-14)
    # a flat direction counts zero once localised
    H0 = np.diag([1.0, 2.0, 0.0])
    assert quadratic_llc(H0, n=1e6, beta=1.0, localization=1.0) == pytest.approx(1.0, rel=1e-5)
    # one direction, BlackJAX step eps: variance 1 / (a (1 - eps a / 2)), closed form
    t, eps, g = 50.0, 1e-3, 2.0
    a = t + g
    assert quadratic_llc(np.eye(1), n=t, beta=1.0, step_size=eps, localization=g) == (
        pytest.approx(0.5 * t / (a * (1 - eps * a / 2)), rel=1e-14)
    )
    with pytest.raises(ValueError, match="unstable"):
        quadratic_llc(np.eye(1), n=100.0, beta=1.0, step_size=0.03)
    with pytest.raises(ValueError, match="semi-definite"):
        quadratic_llc(-np.eye(2), n=10.0, beta=1.0)


def test_estimate_matches_quadratic_closed_form():
    """Linear regression at the least-squares fit is quadratic: E[lambda_hat] is known exactly
    for the discrete chain, localisation included."""
    loss, w, data, H = _regression()
    eps, gamma = 1e-3, 5.0
    est = estimate_llc(
        loss,
        w,
        data,
        key=jax.random.key(1),
        num_chains=16,
        num_draws=1000,
        num_burnin=200,
        step_size=eps,
        localization=gamma,
    )
    exact = quadratic_llc(H, n=est.n, beta=est.beta, step_size=eps, localization=gamma)
    assert est.n == 200 and est.beta == pytest.approx(1 / math.log(200))
    assert abs(float(est.llc) - exact) < 4 * float(est.stderr)
    assert float(est.stderr) < 0.1
    # wrong by half a parameter is many standard errors away
    assert abs(float(est.llc) - (exact + 0.5)) > 4 * float(est.stderr)
    assert est.per_chain.shape == (16,) and est.loss_trace.shape == (16, 1000)
    assert int(est.diverged) == 0 and 0 < float(est.pull_fraction) < 1


def test_to_xarray_has_arviz_dims():
    loss, w, data, _ = _regression(d=2, samples=50)
    est = estimate_llc(
        loss,
        w,
        data,
        key=jax.random.key(0),
        num_chains=3,
        num_draws=20,
        num_burnin=5,
        step_size=1e-3,
        localization=1.0,
    )
    ds = est.to_xarray()
    assert ds["loss"].dims == ("chain", "draw") and ds["llc"].dims == ("chain",)
    assert ds.sizes == {"chain": 3, "draw": 20}
    assert ds.attrs["llc_mean"] == pytest.approx(float(est.llc))
    assert "BlackJAX" in ds.attrs["step_convention"]


def test_equinox_module_minibatch_and_float32():
    import equinox as eqx

    class Lin(eqx.Module):
        w: jax.Array
        name: str = "frozen"  # non-array leaves are held fixed

        def __call__(self, x):
            return x @ self.w

    loss, w, (x, y), _ = _regression(d=2, samples=64)
    model = Lin(w.astype(jnp.float32))
    f = lambda m, b: 0.5 * jnp.mean((b[1] - m(b[0])) ** 2)
    est = estimate_llc(
        f,
        model,
        (x.astype(jnp.float32), y.astype(jnp.float32)),
        key=jax.random.key(0),
        num_chains=2,
        num_draws=50,
        num_burnin=10,
        step_size=1e-3,
        localization=1.0,
        batch_size=16,
    )
    assert est.loss_trace.dtype == jnp.float32 and np.isfinite(float(est.llc))


def test_step_size_effect_shapes_and_sign():
    loss, w, data, H = _regression(d=2, samples=100)
    eff = step_size_effect(
        loss,
        w,
        data,
        key=jax.random.key(2),
        num_chains=8,
        num_draws=500,
        num_burnin=100,
        step_size=4e-3,
        localization=1.0,
    )
    assert eff.coarse.step_size == 4e-3 and eff.fine.step_size == 2e-3
    assert eff.fine.num_draws == 2 * eff.coarse.num_draws == 1000
    exact0 = quadratic_llc(H, n=100.0, beta=1 / math.log(100), localization=1.0)
    assert abs(float(eff.extrapolated) - exact0) < 4 * float(eff.extrapolated_stderr)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"data": jnp.ones(4)}, TypeError, "tuple of arrays"),
        ({"data": (jnp.ones(4), 1.0)}, ValueError, "leading sample axis"),
        ({"data": (jnp.ones((3, 2)), jnp.ones(4))}, ValueError, "disagree"),
        ({"step_size": -1.0}, ValueError, "step_size"),
        ({"localization": float("nan")}, ValueError, "localization"),
        ({"batch_size": 10}, ValueError, "exceeds"),
        ({"num_chains": 0}, ValueError, "num_chains"),
        ({"num_draws": 1}, ValueError, "num_draws"),
        ({"beta": 0.0}, ValueError, "beta"),
    ],
)
def test_invalid_input_fails_before_compiling(kwargs, error, match):
    data = (jnp.ones((4, 2)), jnp.ones(4))
    args = dict(key=jax.random.key(0))
    args.update({k: v for k, v in kwargs.items() if k != "data"})
    loss = lambda w, b: jnp.mean((b[1] - b[0] @ w) ** 2)
    with pytest.raises(error, match=match):
        estimate_llc(loss, jnp.zeros(2), kwargs.get("data", data), **args)


def test_loss_shape_and_w_star_checked():
    data = (jnp.ones((4, 2)), jnp.ones(4))
    with pytest.raises(ValueError, match="scalar"):
        estimate_llc(lambda w, b: b[1] - b[0] @ w, jnp.zeros(2), data, key=jax.random.key(0))
    with pytest.raises(ValueError, match="no floating-point"):
        estimate_llc(lambda w, b: 0.0, {"k": 3}, data, key=jax.random.key(0))
    with pytest.raises(ValueError, match="n > 1"):
        estimate_llc(
            lambda w, b: jnp.sum(w), jnp.zeros(2), (jnp.ones((1, 2)),), key=jax.random.key(0)
        )
