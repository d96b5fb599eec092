"""The functional attention kernels of jaxdyn.attention._weights against direct formulas."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.attention import (
    attention_entropy,
    bilinear_scores,
    causal_mask,
    l2_scores,
    linear_weights,
    sigmoid_weights,
    sinkhorn_weights,
    softmax_weights,
)


def test_bilinear_scores_are_y_transpose_a_x_indexed_query_then_key():
    x = jax.random.normal(jax.random.key(0), (3, 4))
    y = jax.random.normal(jax.random.key(1), (5, 4))
    A = jax.random.normal(jax.random.key(2), (4, 4))
    s = bilinear_scores(x, y, A)
    assert s.shape == (3, 5)
    np.testing.assert_allclose(s[1, 2], y[2] @ A @ x[1], rtol=1e-12)


def test_softmax_with_key_measure_and_mask_matches_direct_formula():
    s = jnp.array([[0.3, -1.0, 2.0, 0.5]])
    log_m = jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4]))
    mask = jnp.array([[True, True, False, True]])
    w = softmax_weights(s, log_weights=log_m, mask=mask)
    direct = np.exp(s) * np.exp(log_m) * mask
    np.testing.assert_allclose(w, direct / direct.sum(), rtol=1e-12)
    # A fully masked row gives zeros, not NaN.
    assert np.all(softmax_weights(s, mask=jnp.zeros_like(mask)) == 0)
    # Large scores do not overflow.
    assert np.all(np.isfinite(softmax_weights(jnp.array([1e4, 1e4 - 1.0]))))


def test_sigmoid_and_linear_weights_are_unnormalised():
    s = jnp.array([0.0, 1.0, -2.0])
    np.testing.assert_allclose(sigmoid_weights(s, bias=0.5), 1 / (1 + np.exp(-(s + 0.5))))
    np.testing.assert_allclose(linear_weights(s, log_weights=jnp.log(jnp.full(3, 0.5))), s / 2)


def test_sinkhorn_coupling_has_both_marginals():
    s = jax.random.normal(jax.random.key(3), (6, 6)) * 3.0
    log_a = jnp.log(jnp.full(6, 1 / 6))
    w = sinkhorn_weights(s, log_row_weights=log_a, log_col_weights=log_a, iterations=500)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-10)
    np.testing.assert_allclose((w / 6).sum(axis=0), 1 / 6, atol=1e-10)


def test_l2_scores_causal_mask_and_entropy():
    q = jnp.array([[0.0, 1.0]])
    k = jnp.array([[1.0, 1.0], [0.0, -1.0]])
    np.testing.assert_allclose(l2_scores(q, k), [[-1.0, -4.0]], atol=1e-12)
    np.testing.assert_array_equal(
        causal_mask(jnp.array([0.0, 0.5]), jnp.array([0.0, 0.5, 1.0])),
        [[True, False, False], [True, True, False]],
    )
    np.testing.assert_allclose(attention_entropy(jnp.full(4, 0.25)), np.log(4), rtol=1e-12)
    assert attention_entropy(jnp.array([1.0, 0.0])) == 0.0


def test_softmax_axis_argument_equals_transposed_last_axis_softmax():
    s = jax.random.normal(jax.random.key(4), (5, 7))
    log_m = jnp.log(jax.random.uniform(jax.random.key(5), (5, 7)))
    np.testing.assert_allclose(
        softmax_weights(s, log_weights=log_m, axis=0),
        softmax_weights(s.T, log_weights=log_m.T).T,
        rtol=1e-13,
    )


def test_bounded_softmax_average_equals_softmax_weights_times_values():
    # the known-bound shift (no row max) changes nothing but rounding, batched too
    from jaxdyn.attention import bounded_softmax_average

    s = 3.0 * jax.random.normal(jax.random.key(6), (2, 5, 7))
    v = jax.random.normal(jax.random.key(7), (2, 7, 3))
    bound = float(jnp.max(s))
    np.testing.assert_allclose(
        bounded_softmax_average(s, v, bound), softmax_weights(s) @ v, rtol=1e-12, atol=1e-14
    )
