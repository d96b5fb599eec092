"""The dense softmax average of a large score matrix runs by blocks in cache (whole rows, or
tiles with an online log-sum-exp over the keys): the same numbers as the one-matrix evaluation
(the result is invariant under each row's shift), values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.attention import bounded_softmax_average, softmax_weights
from jaxdyn.attention._chunked import (
    _ROW_BLOCK,
    _ROWS_IN_CACHE,
    _TILE,
    DENSE_ELEMENTS,
    _balanced_chunk,
    _cache_chunks,
    _tiled_softmax_average,
)
from jaxdyn.meanfield import uniform_on_sphere
from jaxdyn.meanfield.fields import Linear, Sigmoid, Softmax, SphereSoftmax
from jaxdyn.meanfield.fields._base import softmax_average
from jaxdyn.meanfield.fields._wrappers import tangent_projection

# (queries, keys): whole rows (not a whole number of blocks: padding is sliced off, just past
# the size where blocks start); tiles (neither axis a whole number of tiles); few queries
# against many keys (longer key tiles)
SHAPES = {
    "rows": (2 * _ROW_BLOCK + 38, DENSE_ELEMENTS // (2 * _ROW_BLOCK + 38) + 11),
    "tiles": (_TILE[0] + 37, _ROWS_IN_CACHE // _ROW_BLOCK + 5 * _TILE[1] + 3),
    "few queries": (7, DENSE_ELEMENTS // 7 + 1),
}


def test_shapes_reach_their_regime():
    for regime, (m, n) in SHAPES.items():
        assert m * n > DENSE_ELEMENTS
        assert (_cache_chunks(m, n)[1] == n) == (regime == "rows")  # whole rows: one key chunk


@pytest.mark.parametrize("regime", list(SHAPES))
def test_blocked_equals_one_matrix(regime):
    seed = 1 + list(SHAPES).index(regime)
    key = jax.random.key(seed)
    d = 3 + seed
    m, n = SHAPES[regime]
    x = jax.random.normal(key, (m, d)) * 2.0
    y = jax.random.normal(jax.random.fold_in(key, 1), (n, d)) * 2.0
    A = jax.random.normal(jax.random.fold_in(key, 2), (d, d))
    logw = jax.random.normal(jax.random.fold_in(key, 3), (n,))
    score = lambda q, k: q @ A.T @ k.T  # noqa: E731

    def reference(x, A, logw):
        return softmax_weights(x @ A.T @ y.T, log_weights=logw) @ y

    # the first key tiles wholly masked: the shift stays finite while every key seen is masked
    masked = logw.at[: 2 * _TILE[1] + 5].set(-jnp.inf)
    for lw in (None, logw, masked):
        blocked = softmax_average(score, x, y, log_weights=lw)
        np.testing.assert_allclose(blocked, reference(x, A, lw), rtol=1e-10, atol=1e-12)
        # the evaluation other platforms than CPU get (blocks of queries against every key)
        query_chunk = _balanced_chunk(m, _ROW_BLOCK)
        rows = _tiled_softmax_average(score, x, y, y, lw, query_chunk, n, remat=False)
        np.testing.assert_allclose(rows, reference(x, A, lw), rtol=1e-10, atol=1e-12)
    halves = jax.vmap(lambda q: softmax_average(score, q, y))(x[: 2 * (m // 2)].reshape(2, -1, d))
    np.testing.assert_allclose(
        halves.reshape(-1, d), reference(x[: 2 * (m // 2)], A, None), rtol=1e-10, atol=1e-12
    )

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


@pytest.mark.parametrize("regime", ["rows", "tiles"])
def test_sphere_softmax_many_tokens_equals_one_matrix(regime):
    """Beyond 2^20 scores ``SphereSoftmax`` evaluates by blocks shifted by the score bound,
    without a running maximum: the one matrix gives the same velocity."""
    n, d, beta = SHAPES[regime][1], 3, 9.0
    x = uniform_on_sphere(jax.random.key(7), n, d)
    one_matrix = tangent_projection(bounded_softmax_average(beta * (x @ x.T), x, beta), x)
    np.testing.assert_allclose(
        SphereSoftmax(beta, d).velocity(x, x), one_matrix, rtol=1e-10, atol=1e-12
    )


def _random_head(regime, seed):
    """A head's random ``Q, K, V`` (d = 3), queries ``x`` and keys ``y`` of the regime's
    shape, and uniform query and key positions."""
    (m, n), d = SHAPES[regime], 3
    key = jax.random.key(seed)
    Q, K, V = jax.random.normal(key, (3, d, d))
    x = jax.random.normal(jax.random.fold_in(key, 1), (m, d))
    y = jax.random.normal(jax.random.fold_in(key, 2), (n, d))
    qpos = jax.random.uniform(jax.random.fold_in(key, 3), (m,))
    kpos = jax.random.uniform(jax.random.fold_in(key, 4), (n,))
    return Q, K, V, x, y, qpos, kpos


@pytest.mark.parametrize("regime", ["tiles", "few queries"])
def test_kernel_heads_blocked_equal_one_matrix(regime):
    """Sigmoid and linear heads (unnormalised weights) evaluate a large weight matrix by the
    same blocks: the one-matrix sum ``(1/c) sum_k kernel(s_qk) y_k`` (``c`` visible keys),
    plain and causal, values and gradients."""
    Q, K, V, x, y, qpos, kpos = _random_head(regime, 11)
    A, n = K.T @ Q / jnp.sqrt(3), y.shape[0]
    heads = {
        "sigmoid": (Sigmoid(Q=Q, K=K, V=V, bias=-0.3), lambda s: jax.nn.sigmoid(s - 0.3)),
        "linear": (Linear(Q=Q, K=K, V=V), lambda s: s),
    }
    for field, kernel in heads.values():
        weights = kernel(x @ A.T @ y.T)
        np.testing.assert_allclose(
            field.velocity(x, y), weights @ y @ V.T / n, rtol=1e-10, atol=1e-12
        )
        visible = kpos[None, :] <= qpos[:, None]
        count = jnp.maximum(visible.sum(1), 1)[:, None]
        np.testing.assert_allclose(
            field.causal_velocity(x, y, qpos, kpos),
            jnp.where(visible, weights, 0.0) @ y @ V.T / count,
            rtol=1e-10,
            atol=1e-12,
        )
    field, kernel = heads["sigmoid"]

    def blocked(x):
        return jnp.sum(jnp.sin(field.velocity(x, y)))

    def one_matrix(x):
        return jnp.sum(jnp.sin(kernel(x @ A.T @ y.T) @ y @ V.T / n))

    np.testing.assert_allclose(jax.grad(blocked)(x), jax.grad(one_matrix)(x), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("regime", ["rows", "tiles"])
def test_causal_softmax_blocked_equals_masked_matrix(regime):
    """A causal softmax head beyond 2^20 scores evaluates its mask blockwise, as part of the
    scores: the one masked matrix gives the same velocity and gradient, including a query
    that sees no key (zeros) and one that sees a single key."""
    Q, K, V, x, y, qpos, kpos = _random_head(regime, 13)
    qpos = qpos.at[0].set(-1.0).at[1].set(jnp.min(kpos))  # sees no key; sees one key
    field = Softmax(Q=Q, K=K, V=V)
    A = K.T @ Q / jnp.sqrt(3)
    visible = kpos[None, :] <= qpos[:, None]

    def one_matrix(x):
        return softmax_weights(x @ A.T @ y.T, mask=visible) @ y @ V.T

    blocked = field.causal_velocity(x, y, qpos, kpos)
    np.testing.assert_allclose(blocked, one_matrix(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(blocked[0], 0.0)
    np.testing.assert_allclose(blocked[1], y[jnp.argmin(kpos)] @ V.T, rtol=1e-12)
    grads = [
        jax.grad(lambda x, f=f: jnp.sum(jnp.sin(f(x))))(x)
        for f in (lambda x: field.causal_velocity(x, y, qpos, kpos), one_matrix)
    ]
    assert np.all(np.isfinite(grads[0]))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-11)
