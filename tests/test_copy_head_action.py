"""The exact copy-head action (copy_head.md, "Exact action") against independent computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch

T, SW2, SG2 = 0.7, 1.3, 0.8


def _data(P=5, L=6, V=4, cyclic=True, seed=0):
    return ch.copy_task(jax.random.key(seed), P, L, V, cyclic=cyclic)


def _direct_gaussian_integral(G, X, Y, attention, cyclic):
    """-ln p(Y | G) - ln p(G) with the PL x PL kernel T I + kappa Phi Phi^T (no tricks)."""
    P, L, V = X.shape
    A = ch.attention_matrix(G, attention=attention, cyclic=cyclic)
    Phi = jnp.einsum("lm,pmv->plv", A, X).reshape(P * L, V)
    K = T * jnp.eye(P * L) + (SW2 / V) * Phi @ Phi.T
    Yf = Y.reshape(P * L, V)
    _, logdet = jnp.linalg.slogdet(2 * jnp.pi * K)
    nll = 0.5 * V * logdet + 0.5 * jnp.trace(Yf.T @ jnp.linalg.solve(K, Yf))
    neg_log_prior = jnp.sum(G**2) / (2 * SG2) + 0.5 * L * L * jnp.log(2 * jnp.pi * SG2)
    return nll + neg_log_prior


def _constant(Y, L):
    P, _, V = Y.shape
    return (
        jnp.sum(Y**2) / (2 * T)
        + 0.5 * V * P * L * jnp.log(2 * jnp.pi * T)
        + 0.5 * L * L * jnp.log(2 * jnp.pi * SG2)
    )


@pytest.mark.parametrize("attention", ["linear", "softmax"])
@pytest.mark.parametrize("cyclic", [True, False])
def test_action_equals_direct_gaussian_integral(attention, cyclic):
    X, Y = _data(cyclic=cyclic)
    G = 1.5 * jax.random.normal(jax.random.key(3), (6, 6))
    S = ch.action(G, X, Y, attention=attention, temperature=T, sigma_w2=SW2, sigma_g2=SG2,
                  cyclic=cyclic)
    direct = _direct_gaussian_integral(G, X, Y, attention, cyclic)
    assert abs(float(S + _constant(Y, 6) - direct)) < 1e-8


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_action_gradient_matches_finite_differences(attention):
    X, Y = _data()
    G = jax.random.normal(jax.random.key(4), (6, 6))
    f = lambda g: ch.action(g, X, Y, attention=attention, temperature=T, sigma_w2=SW2,
                            sigma_g2=SG2)
    grad = jax.grad(f)(G)
    for k in range(3):
        D = jax.random.normal(jax.random.key(10 + k), G.shape)
        h = 1e-5
        fd = (f(G + h * D) - f(G - h * D)) / (2 * h)
        assert abs(float(fd - jnp.sum(grad * D))) < 1e-6 * (1 + abs(float(fd)))


@pytest.mark.parametrize("attention", ["linear", "softmax"])
def test_batched_action_equals_loop_and_statistics(attention):
    X, Y = _data(P=7)
    Gs = jax.random.normal(jax.random.key(5), (2, 3, 6, 6))
    batched = ch.action(Gs, X, Y, attention=attention)
    assert batched.shape == (2, 3)
    stats = ch.copy_statistics(X, Y)
    one = jax.jit(lambda g: ch.action(g, X, Y, attention=attention))
    from_stats = jax.jit(lambda g: ch.action_from_statistics(g, stats, attention=attention))
    for i in range(2):
        for j in range(3):
            assert abs(float(batched[i, j] - one(Gs[i, j]))) < 1e-10
            assert abs(float(from_stats(Gs[i, j]) - one(Gs[i, j]))) < 1e-9


def test_padded_statistics_equal_truncated_data():
    X, Y = _data(P=9)
    G = jax.random.normal(jax.random.key(6), (6, 6))
    w = (jnp.arange(9) < 4).astype(X.dtype)
    padded = ch.action_from_statistics(G, ch.copy_statistics(X, Y, w))
    truncated = ch.action(G, X[:4], Y[:4])
    assert abs(float(padded - truncated)) < 1e-10


def test_joint_energy_marginalises_to_exact_action():
    """-ln int exp(-E(W, G)) dW (Gaussian in W: Laplace is exact) minus S(G) is G-independent."""
    X, Y = _data(P=4, L=5, V=3)
    stats = ch.copy_statistics(X, Y)
    kw = dict(attention="softmax", temperature=T, sigma_w2=SW2, sigma_g2=SG2)

    @jax.jit
    def marginal_minus_action(G):
        E = lambda w: ch.joint_energy(w.reshape(3, 3), G, stats, **kw)
        H = jax.hessian(E)(jnp.zeros(9))
        w_star = jnp.linalg.solve(H, -jax.grad(E)(jnp.zeros(9)))
        _, logdet = jnp.linalg.slogdet(H / (2 * jnp.pi))
        return E(w_star) + 0.5 * logdet - ch.action_from_statistics(G, stats, **kw)

    Gs = 2.0 * jax.random.normal(jax.random.key(0), (3, 5, 5))
    diffs = [float(marginal_minus_action(G)) for G in Gs]
    assert np.ptp(diffs) < 1e-9


@pytest.mark.parametrize("attention,alpha,causal", [("softmax", 1.0, False),
                                                    ("softmax", 1.0, True),
                                                    ("linear", 1.0, False), ("linear", 0.0, True)])
@pytest.mark.parametrize("cyclic", [True, False])
def test_joint_energy_gradient_equals_autodiff(attention, alpha, causal, cyclic):
    """The hand-written gradient (SGLD's) equals jax.grad of the joint energy, padded data too."""
    X, Y = _data(P=9, cyclic=cyclic)
    stats = ch.copy_statistics(X, Y, (jnp.arange(9) < 7).astype(X.dtype))
    kw = dict(attention=attention, alpha=alpha, causal=causal, cyclic=cyclic, temperature=T,
              sigma_w2=SW2, sigma_g2=SG2)
    W = jax.random.normal(jax.random.key(1), (4, 4))
    G = jax.random.normal(jax.random.key(2), (6, 6))
    expected = jax.grad(lambda W, G: ch.joint_energy(W, G, stats, **kw), argnums=(0, 1))(W, G)
    got = ch.joint_energy_gradient(W, G, stats, **kw)
    for e, g in zip(expected, got, strict=True):
        assert float(jnp.max(jnp.abs(e - g))) < 1e-12 * float(jnp.max(jnp.abs(e)))


def test_linear_action_has_mirror_symmetry():
    X, Y = _data()
    G = jax.random.normal(jax.random.key(7), (6, 6))
    assert abs(float(ch.action(G, X, Y, attention="linear")
                     - ch.action(-G, X, Y, attention="linear"))) < 1e-10


def test_action_never_forms_a_PL_by_PL_matrix():
    P, L, V = 7, 5, 3
    X, Y = _data(P=P, L=L, V=V)
    jaxpr = jax.make_jaxpr(jax.grad(lambda g: ch.action(g, X, Y, attention="softmax")))(
        jnp.zeros((L, L))
    )
    sizes = [
        v.aval.shape
        for eqn in jaxpr.jaxpr.eqns
        for v in eqn.outvars
        if hasattr(v.aval, "shape")
    ]
    assert not any(s.count(P * L) >= 2 or (P in s and s.count(L) >= 1 and len(s) == 2)
                   for s in sizes)
    assert max(int(np.prod(s)) for s in sizes) <= P * L * L * V


def test_copy_targets_are_shifted_tokens():
    X, Y = _data(P=3, L=6, V=4, cyclic=True)
    assert np.array_equal(np.asarray(Y[:, 1:]), np.asarray(X[:, :-1]))
    assert np.array_equal(np.asarray(Y[:, 0]), np.asarray(X[:, -1]))
    _, Yn = _data(P=3, L=6, V=4, cyclic=False)
    assert float(jnp.sum(Yn[:, 0])) == 0.0
    stats = ch.copy_statistics(X, Y)
    assert float(jnp.sum(stats.N)) == 3 * 6 * 6  # one count per (sequence, l, m)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(attention="cosine"), "attention"),
        (dict(temperature=-1.0), "temperature"),
        (dict(sigma_w2=0.0), "sigma_w2"),
        (dict(sigma_g2=-2.0), "sigma_g2"),
    ],
)
def test_action_rejects_bad_hyperparameters(kwargs, message):
    X, Y = _data()
    with pytest.raises(ValueError, match=message):
        ch.action(jnp.zeros((6, 6)), X, Y, **kwargs)


def test_action_rejects_bad_shapes():
    X, Y = _data()
    with pytest.raises(ValueError, match="G must have shape"):
        ch.action(jnp.zeros((5, 5)), X, Y)
    with pytest.raises(ValueError, match="X and Y"):
        ch.action(jnp.zeros((6, 6)), X[0], Y[0])
    with pytest.raises(ValueError, match="X and Y"):
        ch.action(jnp.zeros((6, 6)), X, Y[:, :, :2])
