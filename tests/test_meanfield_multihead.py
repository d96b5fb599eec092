"""Several heads: gaussian_regime decides every multi-head problem that reduces exactly to one
softmax head, and an accurate solve of the multi-head ODE itself agrees on every one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from jaxdyn import Status
from jaxdyn.meanfield import Regime, gaussian_regime, softmax_identity_covariance
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


def _accurate(heads, cov0, t1, blowup_trace=1e6):
    """The multi-head covariance ODE ``sum_h C_h Sigma A_h Sigma + transpose`` written out from
    the heads and solved by SciPy's DOP853 (rtol 1e-11): ``(Sigma(t_stop), t_stop, blew_up)``,
    stopping when ``tr Sigma`` reaches ``blowup_trace``."""
    d = cov0.shape[0]
    AC = [(np.asarray(h.A(), float), np.asarray(h.V, float)) for h in heads]

    def rhs(t, y):
        S = y.reshape(d, d)
        F = sum(C @ S @ A @ S for A, C in AC)
        return (F + F.T).ravel()

    def blowup(t, y):
        return np.trace(y.reshape(d, d)) - blowup_trace

    blowup.terminal, blowup.direction = True, 1
    sol = solve_ivp(rhs, (0.0, t1), cov0.ravel(), method="DOP853", rtol=1e-11, atol=1e-12,
                    events=blowup)  # fmt: skip
    blew_up = sol.status == 1
    return sol.y[:, -1].reshape(d, d), float(sol.t[-1]), blew_up


@pytest.mark.parametrize("H", [2, 3])
def test_scalar_value_heads_are_decided_and_agree_with_an_accurate_solve(H):
    """Random problems with every V_h = c_h I (d = 2..5, random signs, indefinite and
    dissipative): every one decided, and SciPy's solve of the multi-head ODE agrees."""
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
            assert Status.code(r.regime) != Status.code(Regime.inconclusive)
            decided += 1
            if Status.code(r.regime) == Status.code(Regime.blowup):
                t_star = r.blowup_time_bound
                _, t_stop, blew_up = _accurate(heads, cov0, 2.0 * t_star)
                # tr Sigma ~ c / (t* - t): the trace reaches 1e6 within O(1e-6) t* of t*
                assert blew_up and t_stop == pytest.approx(t_star, rel=1e-4)
            else:
                t1 = 20.0
                cov, t_stop, blew_up = _accurate(heads, cov0, t1)
                assert not blew_up and t_stop == t1
                np.testing.assert_allclose(
                    cov, softmax_identity_covariance(cov0, A_sum, t1), rtol=1e-7, atol=1e-9
                )
                assert np.trace(cov) <= r.trace_bound * (1 + 1e-8)
                assert r.rank_bound < d  # dissipative heads: a kernel, a low-rank limit
    assert decided == 8


def test_heads_with_unrelated_values_are_not_decided():
    rng = np.random.default_rng(3)
    d = 3
    heads = [
        Softmax(Q=rng.standard_normal((1, d)), K=rng.standard_normal((1, d)), V=V)
        for V in (np.eye(d), np.diag([1.0, 2.0, 3.0]))
    ]
    r = gaussian_regime(MultiHead.from_heads(heads), np.zeros(d), np.eye(d))
    assert Status.code(r.regime) == Status.code(Regime.inconclusive)
    assert "no reduction" in r.reduction


def test_heads_sharing_one_definite_value_reduce_to_softmax_with_that_value():
    rng = np.random.default_rng(4)
    d = 3
    G = rng.standard_normal((d, d))
    V = G @ G.T + np.eye(d)
    Qs = [rng.standard_normal((1, d)) for _ in range(2)]
    heads = [Softmax(Q=Q, K=-Q, V=c * V) for Q, c in zip(Qs, (0.5, 2.0), strict=True)]
    r = gaussian_regime(MultiHead.from_heads(heads), np.zeros(d), np.eye(d))
    assert "share one value matrix" in r.reduction
    assert Status.code(r.regime) == Status.code(Regime.low_rank)
    assert r.rank_bound == 1
