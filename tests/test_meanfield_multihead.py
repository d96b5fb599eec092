"""Several heads: gaussian_regime decides every multi-head problem that reduces exactly to one
softmax head, and an accurate solve of the multi-head ODE itself agrees on every one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status, status_code
from jaxdyn.meanfield import (
    Regime,
    gaussian_regime,
    simulate_gaussian,
    softmax_identity_covariance,
)
from jaxdyn.meanfield.fields import MultiHead, Softmax

jax.config.update("jax_enable_x64", True)


def _heads(rng, d, H, dissipative):
    heads, A_sum = [], np.zeros((d, d))
    for _ in range(H):
        k = int(rng.integers(1, d + 1))
        Q = rng.standard_normal((k, d))
        K = -Q if dissipative else rng.standard_normal((k, d))
        c = rng.uniform(0.3, 1.5) * (1.0 if dissipative else rng.choice([-1.0, 1.0]))
        heads.append(Softmax(Q=Q, K=K, V=c * np.eye(d)))
        A_sum += c * K.T @ Q / np.sqrt(d)  # A_h = K_h^T Q_h / sqrt(d), by hand
    return heads, A_sum


def test_from_heads_velocity_is_the_sum_of_the_heads():
    rng = np.random.default_rng(1)
    d = 4
    heads = [
        Softmax(Q=rng.standard_normal((2, d)), K=rng.standard_normal((2, d)),
                V=rng.standard_normal((d, d)))
        for _ in range(3)
    ]  # fmt: skip
    field = MultiHead.from_heads(heads)
    x = jnp.asarray(rng.standard_normal((7, d)))
    direct = sum(np.asarray(h.velocity(x, x)) for h in heads)
    np.testing.assert_allclose(np.asarray(field.velocity(x, x)), direct, rtol=1e-12, atol=1e-12)
    mean, cov = jnp.asarray(rng.standard_normal(d)), jnp.eye(d) + 0.2 * jnp.ones((d, d))
    rhs = [h.gaussian_rhs(mean, cov) for h in heads]
    got = field.gaussian_rhs(mean, cov)
    for part in range(2):
        np.testing.assert_allclose(got[part], sum(r[part] for r in rhs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("H", [2, 3])
def test_scalar_value_heads_are_decided_and_agree_with_the_solver(H):
    rng = np.random.default_rng(10 + H)
    decided = 0
    for d in range(2, 6):
        for dissipative in (False, True):
            heads, A_sum = _heads(rng, d, H, dissipative)
            field = MultiHead.from_heads(heads)
            G = rng.standard_normal((d, d))
            cov0 = G @ G.T / d + 0.1 * np.eye(d)
            r = gaussian_regime(field, np.zeros(d), cov0)
            assert "c_h I" in r.reduction
            assert status_code(r.regime) != status_code(Regime.inconclusive)
            decided += 1
            if status_code(r.regime) == status_code(Regime.blowup):
                sol = simulate_gaussian(field, np.zeros(d), cov0, 2.0 * r.blowup_time_bound,
                                        rtol=1e-10, atol=1e-12)  # fmt: skip
                # the pole extrapolation's error is O(1 / blowup_trace^2) relative
                assert float(sol.t_blowup) == pytest.approx(r.blowup_time_bound, rel=1e-6)
            else:
                t1 = 20.0
                sol = simulate_gaussian(field, np.zeros(d), cov0, t1, rtol=1e-10, atol=1e-12)
                assert status_code(sol.status) != status_code(Status.blowup)
                exact = softmax_identity_covariance(cov0, A_sum, t1)
                np.testing.assert_allclose(sol.final_cov, exact, atol=1e-6)
                assert np.trace(sol.final_cov) <= r.trace_bound * (1 + 1e-8)
    assert decided == 8


def test_heads_with_unrelated_values_are_not_decided():
    rng = np.random.default_rng(3)
    d = 3
    heads = [
        Softmax(Q=rng.standard_normal((1, d)), K=rng.standard_normal((1, d)), V=V)
        for V in (np.eye(d), np.diag([1.0, 2.0, 3.0]))
    ]
    r = gaussian_regime(MultiHead.from_heads(heads), np.zeros(d), np.eye(d))
    assert status_code(r.regime) == status_code(Regime.inconclusive)
    assert "no reduction" in r.reduction


def test_heads_sharing_one_definite_value_reduce_to_softmax_with_that_value():
    rng = np.random.default_rng(4)
    d = 3
    G = rng.standard_normal((d, d))
    V = G @ G.T + np.eye(d)
    Qs = [rng.standard_normal((1, d)) for _ in range(2)]
    heads = [Softmax(Q=Q, K=-Q, V=c * V) for Q, c in zip(Qs, (0.5, 2.0))]
    r = gaussian_regime(MultiHead.from_heads(heads), np.zeros(d), np.eye(d))
    assert "share one value matrix" in r.reduction
    assert status_code(r.regime) == status_code(Regime.low_rank)
    assert r.rank_bound == 1
