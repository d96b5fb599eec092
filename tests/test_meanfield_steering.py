"""Steering a Gaussian through depth: a random same-rank target is reached; a target of
another rank is reported unreachable, and the optimiser's best stays at the start's rank."""

import jax
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.meanfield import SteerOutcome, steer_gaussian
from jaxdyn.meanfield._steering import flow_layers


def _same(a, b):
    return Status.code(a) == Status.code(b)


def test_layer_flow_keeps_the_rank_and_a_zero_mean():
    """The two invariants behind "unreachable", on random weights (no optimiser)."""
    from jaxdyn.meanfield._steering import LayerWeights

    key = jax.random.key(1)
    kq, kk, kv = jax.random.split(key, 3)
    d, layers = 3, 3
    weights = LayerWeights(
        Q=jax.random.normal(kq, (layers, d, d)),
        K=jax.random.normal(kk, (layers, d, d)),
        V=jax.random.normal(kv, (layers, d, d)),
    )
    u = np.array([1.0, -0.5, 0.3])
    mean, cov = flow_layers(weights, np.zeros(d), np.outer(u, u), 0.5)
    np.testing.assert_allclose(mean, 0.0, atol=1e-14)
    lam = np.linalg.eigvalsh(np.asarray(cov))
    # the default controller's rtol 1e-7, accumulated over the steps: 100 rtol
    assert lam[-1] > 0 and np.all(np.abs(lam[:-1]) <= 1e-5 * lam[-1])


@pytest.mark.slow
def test_same_rank_target_reached_other_rank_unreachable():
    rng = np.random.default_rng(0)
    d = 2
    G, H = rng.standard_normal((2, d, d))
    cov0, cov1 = G @ G.T / d + 0.2 * np.eye(d), H @ H.T / d + 0.2 * np.eye(d)
    mean0, mean1 = rng.standard_normal((2, d))
    key = jax.random.key(0)
    hit = steer_gaussian(mean0, cov0, mean1, cov1, key=key)
    assert _same(hit.outcome, SteerOutcome.reached), hit.error
    assert hit.error <= 1e-2
    # the reported state is what the weights do (an independent re-run of the layer flow)
    mean, cov = flow_layers(hit.weights, mean0, cov0, 1.0)
    np.testing.assert_allclose(cov, hit.cov, atol=1e-12)
    np.testing.assert_allclose(mean, mean1, atol=0.05 * np.linalg.norm(mean1))

    u = rng.standard_normal(d)
    miss = steer_gaussian(mean0, cov0, mean1, np.outer(u, u), key=key)
    assert _same(miss.outcome, SteerOutcome.unreachable)
    # Sigma(t) = Phi Sigma_0 Phi^T: the rank stays 2, so the Frobenius distance to the rank-one
    # target is at least lambda_min(Sigma(depth)) > 0 (Eckart-Young)
    lam = np.linalg.eigvalsh(np.asarray(miss.cov))
    assert lam[0] > 1e-4 * lam[-1]
    assert np.linalg.norm(np.asarray(miss.cov) - np.outer(u, u)) >= lam[0] * (1 - 1e-9)
    assert miss.error > 10 * hit.error
    # a zero mean stays zero: a non-zero target mean from it is unreachable
    zero = steer_gaussian(np.zeros(d), cov0, mean1, cov1, key=key)
    assert _same(zero.outcome, SteerOutcome.unreachable)
    np.testing.assert_allclose(zero.mean, 0.0, atol=1e-12)
