"""The dense softmax average of a large score matrix runs by query blocks: the same numbers as
the one-matrix evaluation (each row's softmax is independent), values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.attention import softmax_weights
from jaxdyn.meanfield.fields import Softmax
from jaxdyn.meanfield.fields._base import DENSE_BLOCK_ELEMENTS, QUERY_BLOCK, softmax_average


@pytest.mark.parametrize("seed", [1])
def test_blocked_equals_one_matrix(seed):
    key = jax.random.key(seed)
    d = 3 + seed
    m = 2 * QUERY_BLOCK + 37 + seed  # not a whole number of blocks: padding is sliced off
    n = DENSE_BLOCK_ELEMENTS // m + 11  # just past the size where blocks start
    x = jax.random.normal(key, (m, d)) * 2.0
    y = jax.random.normal(jax.random.fold_in(key, 1), (n, d)) * 2.0
    A = jax.random.normal(jax.random.fold_in(key, 2), (d, d))
    logw = jax.random.normal(jax.random.fold_in(key, 3), (n,))
    score = lambda q, k: q @ A.T @ k.T  # noqa: E731

    def reference(x, A, logw):
        return softmax_weights(x @ A.T @ y.T, log_weights=logw) @ y

    for lw in (None, logw):
        blocked = softmax_average(score, x, y, log_weights=lw)
        np.testing.assert_allclose(blocked, reference(x, A, lw), rtol=1e-10, atol=1e-12)

    def loss_blocked(x, A):
        return jnp.sum(jnp.sin(softmax_average(lambda q, k: q @ A.T @ k.T, x, y)))

    def loss_dense(x, A):
        return jnp.sum(jnp.sin(reference(x, A, None)))

    grads = jax.grad(loss_blocked, (0, 1))(x, A), jax.grad(loss_dense, (0, 1))(x, A)
    for g_b, g_d in zip(*grads, strict=True):
        np.testing.assert_allclose(g_b, g_d, rtol=1e-9, atol=1e-11)


def test_softmax_field_velocity_unchanged_by_blocks():
    key = jax.random.key(4)
    d, n = 4, 1100
    Q, K = jax.random.normal(key, (2, d, d))
    V = jax.random.normal(jax.random.fold_in(key, 1), (d, d))
    x = jax.random.normal(jax.random.fold_in(key, 2), (n, d))
    field = Softmax(Q=Q, K=K, V=V)
    A = K.T @ Q / jnp.sqrt(d)
    expected = softmax_weights(x @ A.T @ x.T) @ x @ V.T
    np.testing.assert_allclose(field.velocity(x, x), expected, rtol=1e-10, atol=1e-12)
