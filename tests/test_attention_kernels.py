"""Velocity fields: dense vs chunked evaluation, vs independent slow loops, validation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.attention import sinkhorn_log_coupling
from jaxdyn.meanfield.fields import (
    L2,
    Linear,
    Masked,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
    TimeSwitch,
)


def _weights(d=3, k=2, seed=0):
    rng = np.random.default_rng(seed)
    return (
        jnp.asarray(rng.standard_normal((k, d))),
        jnp.asarray(rng.standard_normal((k, d))),
        jnp.asarray(rng.standard_normal((d, d))),
    )


def _tokens(n=60, d=3, seed=1):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((n, d)))


def _slow_velocity(kind, Q, K, V, x, tokens, bias=0.0, positions=None):
    """Independent double loop over queries and keys (NumPy), straight from Table 1."""
    Q, K, V, x, y = map(np.asarray, (Q, K, V, x, tokens))
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    out = np.zeros_like(x)
    for i, xi in enumerate(x):
        if kind == "softmax":
            s = np.array([yj @ A @ xi for yj in y])
        elif kind == "l2":
            s = np.array([-np.sum((Q @ xi / np.sqrt(d) - K @ yj) ** 2) for yj in y])
        visible = np.ones(len(y), bool) if positions is None else positions <= positions[i]
        if kind in ("softmax", "l2"):
            w = np.where(visible, np.exp(s - s[visible].max()), 0.0)
            w = w / w.sum()
        elif kind == "sigmoid":
            w = np.array([1 / (1 + np.exp(-(yj @ A @ xi + bias))) for yj in y]) / visible.sum()
            w = np.where(visible, w, 0.0)
        elif kind == "linear":
            w = np.where(visible, np.array([yj @ A @ xi for yj in y]) / visible.sum(), 0.0)
        out[i] = V @ (w @ y)
    return out


@pytest.mark.parametrize(
    "kind,cls", [("softmax", Softmax), ("l2", L2), ("sigmoid", Sigmoid), ("linear", Linear)]
)
def test_velocity_matches_slow_double_loop(kind, cls):
    Q, K, V = _weights()
    x = _tokens(25, seed=2)
    tokens = _tokens()
    kw = {"bias": 0.3} if kind == "sigmoid" else {}
    att = cls(Q=Q, K=K, V=V, **kw)
    expected = _slow_velocity(kind, Q, K, V, x, tokens, bias=0.3)
    np.testing.assert_allclose(att.velocity(x, tokens), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "kind,cls", [("softmax", Softmax), ("l2", L2), ("sigmoid", Sigmoid), ("linear", Linear)]
)
def test_masked_velocity_averages_only_over_earlier_positions(kind, cls):
    Q, K, V = _weights(seed=3)
    tokens = _tokens(40)
    positions = jnp.asarray(np.sort(np.random.default_rng(4).uniform(0, 1, 40)))
    att = Masked(base=cls(Q=Q, K=K, V=V), positions=positions)
    chunked = Masked(base=cls(Q=Q, K=K, V=V, chunk_size=7), positions=positions)
    expected = _slow_velocity(kind, Q, K, V, tokens, tokens, positions=np.asarray(positions))
    np.testing.assert_allclose(att.velocity(tokens, tokens), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(chunked.velocity(tokens, tokens), expected, rtol=1e-10, atol=1e-12)


def test_attention_sink_makes_first_token_visible_to_all():
    Q, K, V = _weights(seed=5)
    tokens = _tokens(10)
    positions = jnp.linspace(0.1, 1.0, 10)  # token 0 not at 0: the earliest query sees only itself
    plain = Masked(base=Softmax(Q=Q, K=K, V=V), positions=positions)
    sink = Masked(base=Softmax(Q=Q, K=K, V=V), positions=positions.at[3].set(0.05), sink=True)
    # The first token sees only itself: its velocity is V x_0 for softmax.
    np.testing.assert_allclose(plain.velocity(tokens, tokens)[0], V @ tokens[0], rtol=1e-12)
    # With the sink at position 0, the token at position 0.05 sees token 0 and itself.
    w = jax.nn.softmax(
        jnp.array(
            [
                tokens[0] @ Softmax(Q=Q, K=K, V=V).A() @ tokens[3],
                tokens[3] @ Softmax(Q=Q, K=K, V=V).A() @ tokens[3],
            ]
        )
    )
    expected = V @ (w[0] * tokens[0] + w[1] * tokens[3])
    np.testing.assert_allclose(sink.velocity(tokens, tokens)[3], expected, rtol=1e-12)


@pytest.mark.parametrize("cls", [Softmax, L2, Sinkhorn, Sigmoid, Linear])
def test_chunked_velocity_equals_dense(cls):
    Q, K, V = _weights(d=4, k=3, seed=6)
    tokens = _tokens(103, d=4, seed=7)
    dense = cls(Q=Q, K=K, V=V).velocity(tokens, tokens)
    for chunk in (16, 200):
        chunked = cls(Q=Q, K=K, V=V, chunk_size=chunk)
        np.testing.assert_allclose(chunked.velocity(tokens, tokens), dense, rtol=1e-10, atol=1e-12)


def test_chunked_softmax_survives_scores_that_overflow_exp():
    Q, K, V = _weights(seed=8)
    tokens = 30.0 * _tokens(64, seed=9)  # scores ~ 1e3: exp overflows without log-sum-exp
    att = Softmax(Q=Q, K=K, V=V)
    dense = att.velocity(tokens, tokens)
    assert np.all(np.isfinite(dense))
    chunked = Softmax(Q=Q, K=K, V=V, chunk_size=8)
    np.testing.assert_allclose(chunked.velocity(tokens, tokens), dense, rtol=1e-9, atol=1e-9)


def test_sinkhorn_weights_are_a_coupling_with_uniform_marginals():
    Q, K, V = _weights(seed=10)
    tokens = _tokens(50, seed=11)
    att = Sinkhorn(Q=Q, K=K, V=V, iterations=300)
    W = att.weights(tokens, tokens)  # conditional pi(y_k | x_i): rows sum to 1
    np.testing.assert_allclose(W.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(W.sum(0), 1.0, atol=1e-8)  # column marginal: n * (1/n)
    s = (tokens @ Q.T) @ (tokens @ K.T).T
    logm = jnp.full(50, -jnp.log(50.0))
    pi = jnp.exp(
        sinkhorn_log_coupling(s, log_row_weights=logm, log_col_weights=logm, iterations=300)
    )
    np.testing.assert_allclose(W / 50, pi, atol=1e-10)


def test_chunked_sinkhorn_potential_matches_dense_coupling():
    Q, K, V = _weights(seed=12)
    tokens = _tokens(70, seed=13)
    att = Sinkhorn(Q=Q, K=K, V=V, iterations=200)
    g_dense = att.column_potential(tokens)
    g_chunk = Sinkhorn(Q=Q, K=K, V=V, iterations=200, chunk_size=16).column_potential(tokens)
    np.testing.assert_allclose(g_chunk - g_chunk[0], g_dense - g_dense[0], atol=1e-9)


def test_multihead_is_sum_of_single_heads():
    rng = np.random.default_rng(14)
    d, H = 4, 2
    Q, K = jnp.asarray(rng.standard_normal((d, d))), jnp.asarray(rng.standard_normal((d, d)))
    V, W = jnp.asarray(rng.standard_normal((d, d))), jnp.asarray(rng.standard_normal((d, d)))
    tokens = _tokens(30, d=d, seed=15)
    mh = MultiHead(Q=Q, K=K, V=V, W=W, heads=H)
    k = d // H
    expected = 0
    for h in range(H):
        rows = slice(h * k, (h + 1) * k)
        C = W[rows].T @ V[rows]
        # A single Softmax head with k-dim projections uses 1/sqrt(d); rescale Q to get 1/sqrt(k).
        head = Softmax(Q=Q[rows] * np.sqrt(d / k), K=K[rows], V=C)
        expected = expected + head.velocity(tokens, tokens)
    np.testing.assert_allclose(mh.velocity(tokens, tokens), expected, rtol=1e-10)
    mh_chunked = MultiHead(Q=Q, K=K, V=V, W=W, heads=H, chunk_size=8)
    np.testing.assert_allclose(mh_chunked.velocity(tokens, tokens), expected, rtol=1e-10)


def test_time_dependent_weights_follow_the_schedule():
    Q1, K1, V1 = _weights(seed=16)
    Q2, K2, V2 = _weights(seed=17)
    tokens = _tokens(20)
    sched = TimeSwitch(
        fields=(
            Softmax(Q=Q1, K=K1, V=lambda t: V1 * (1.0 + t)),
            Softmax(Q=Q2, K=K2, V=lambda t: V1 * (1.0 + t)),
        ),
        breaks=[1.0],
    )
    np.testing.assert_allclose(
        sched.velocity(tokens, tokens, t=0.5),
        Softmax(Q=Q1, K=K1, V=1.5 * V1).velocity(tokens, tokens),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        sched.velocity(tokens, tokens, t=2.0),
        Softmax(Q=Q2, K=K2, V=3.0 * V1).velocity(tokens, tokens),
        rtol=1e-12,
    )


def test_invalid_shapes_are_rejected_with_the_bad_input_named():
    Q, K, V = _weights()
    with pytest.raises(ValueError, match="Q and K"):
        Softmax(Q=Q, K=K[:, :2], V=V)
    with pytest.raises(ValueError, match="V must be"):
        L2(Q=Q, K=K, V=V[:2])
    with pytest.raises(ValueError, match="heads"):
        MultiHead(Q=jnp.ones((3, 3)), K=jnp.ones((3, 3)), V=jnp.eye(3), heads=2)
    with pytest.raises(ValueError, match="positions"):
        Masked(base=Softmax(Q=Q, K=K, V=V), positions=jnp.array([0.0, 1.5]))
    with pytest.raises(TypeError, match="base"):
        Masked(base=Q, positions=jnp.array([0.0, 0.5]))
    with pytest.raises(ValueError, match="iterations"):
        Sinkhorn(Q=Q, K=K, V=V, iterations=0)
