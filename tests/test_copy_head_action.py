"""The exact copy-head action (copy_head.md, "Exact action") against independent computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _heads, _posterior

T, SW2, SG2 = 0.7, 1.3, 0.8


def _data(P=5, L=6, V=4, cyclic=True, seed=0):
    return ch.copy_task(jax.random.key(seed), P, L, V, cyclic=cyclic)


def _direct_gaussian_integral(G, X, Y, head_weights, cyclic):
    """-ln p(Y | G) - ln p(G) with the PL x PL kernel T I + kappa Phi Phi^T (no tricks): the
    attention matrix comes straight from the head's formula, unsupervised rows removed here."""
    P, L, V = X.shape
    A = head_weights(G)
    if not cyclic:
        A = A.at[0].set(0.0)
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


class HalfTemperatureSoftmax(ch.AbstractCopyHead):
    """A user's head: A = softmax(G / 2)."""

    def weights(self, G):
        return jax.nn.softmax(G / 2.0, axis=-1)


class SqrtScaledLinear(_heads.AbstractOddCopyHead):
    """A user's head: A = G / sqrt(L)."""

    def weights(self, G):
        return G / jnp.sqrt(G.shape[-1])


HEADS = {  # the head passed to the action, and its formula written independently
    "linear": (ch.LinearCopyHead(), lambda G: G / G.shape[-1]),
    "softmax": (ch.SoftmaxCopyHead(), lambda G: jax.nn.softmax(G, axis=-1)),
    "user_softmax_half": (HalfTemperatureSoftmax(), lambda G: jax.nn.softmax(G / 2, axis=-1)),
    "user_linear_sqrt": (SqrtScaledLinear(), lambda G: G / np.sqrt(G.shape[-1])),
    "linear_alpha_0.5": (ch.LinearCopyHead(alpha=0.5), lambda G: G / np.sqrt(G.shape[-1])),
}


@pytest.mark.parametrize("name", sorted(HEADS))
@pytest.mark.parametrize("cyclic", [True, False])
@pytest.mark.slow
@pytest.mark.heavy
def test_action_equals_direct_gaussian_integral(name, cyclic):
    head, formula = HEADS[name]
    X, Y = _data(cyclic=cyclic)
    G = 1.5 * jax.random.normal(jax.random.key(3), (6, 6))
    priors = dict(temperature=T, sigma_w2=SW2, sigma_g2=SG2)
    S = _posterior.action_from_data(G, X, Y, attention=head, cyclic=cyclic, **priors)
    direct = _direct_gaussian_integral(G, X, Y, formula, cyclic)
    assert abs(float(S + _constant(Y, 6) - direct)) < 1e-8


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    L=st.integers(2, 7),
    V=st.integers(1, 5),
    P=st.integers(1, 6),
    T=st.floats(0.05, 20.0),
    sw2=st.floats(0.05, 20.0),
    sg2=st.floats(0.05, 20.0),
    name=st.sampled_from(sorted(HEADS)),
)
@pytest.mark.slow
@pytest.mark.heavy
def test_action_equals_direct_integral_on_random_problems(seed, L, V, P, T, sw2, sg2, name):
    """Random sizes (including L < 16, V = 1), hyperparameters, heads and scores; the direct
    PL x PL Gaussian integral in numpy."""
    head, formula = HEADS[name]
    kx, kg = jax.random.split(jax.random.key(seed))
    X, Y = ch.copy_task(kx, P, L, V)
    G = 2.0 * jax.random.normal(kg, (L, L))
    priors = dict(temperature=T, sigma_w2=sw2, sigma_g2=sg2)
    S = _posterior.action_from_data(G, X, Y, attention=head, **priors)
    X, Y, A = np.asarray(X), np.asarray(Y), np.asarray(formula(G))
    Phi = np.einsum("lm,pmv->plv", A, X).reshape(P * L, V)
    K = T * np.eye(P * L) + (sw2 / V) * Phi @ Phi.T
    Yf = Y.reshape(P * L, V)
    direct = (
        0.5 * V * np.linalg.slogdet(2 * np.pi * K)[1]
        + 0.5 * np.trace(Yf.T @ np.linalg.solve(K, Yf))
        + np.sum(np.asarray(G) ** 2) / (2 * sg2)
    )
    const = np.sum(Y**2) / (2 * T) + 0.5 * V * P * L * np.log(2 * np.pi * T)
    assert abs(float(S) + const - direct) < 1e-8 * (1.0 + abs(direct))


@pytest.mark.parametrize(
    "attention", [ch.LinearCopyHead(), ch.SoftmaxCopyHead(), HalfTemperatureSoftmax()]
)
@pytest.mark.slow
@pytest.mark.heavy
def test_action_gradient_matches_finite_differences(attention):
    X, Y = _data()
    G = jax.random.normal(jax.random.key(4), (6, 6))
    priors = dict(temperature=T, sigma_w2=SW2, sigma_g2=SG2)
    f = lambda g: _posterior.action_from_data(g, X, Y, attention=attention, **priors)
    grad = jax.grad(f)(G)
    for k in range(3):
        D = jax.random.normal(jax.random.key(10 + k), G.shape)
        h = 1e-5
        fd = (f(G + h * D) - f(G - h * D)) / (2 * h)
        assert abs(float(fd - jnp.sum(grad * D))) < 1e-6 * (1 + abs(float(fd)))


@pytest.mark.parametrize("attention", [ch.LinearCopyHead(), ch.SoftmaxCopyHead()])
@pytest.mark.slow
@pytest.mark.heavy
def test_batched_action_equals_loop_and_statistics(attention):
    X, Y = _data(P=7)
    Gs = jax.random.normal(jax.random.key(5), (2, 3, 6, 6))
    batched = _posterior.action_from_data(Gs, X, Y, attention=attention)
    assert batched.shape == (2, 3)
    stats = ch.copy_statistics(X, Y)
    one = jax.jit(lambda g: _posterior.action_from_data(g, X, Y, attention=attention))
    posterior = ch.CopyHeadPosterior(attention)
    from_stats = jax.jit(lambda g: posterior.action(g, stats))
    for i in range(2):
        for j in range(3):
            assert abs(float(batched[i, j] - one(Gs[i, j]))) < 1e-10
            assert abs(float(from_stats(Gs[i, j]) - one(Gs[i, j]))) < 1e-9


def test_padded_statistics_equal_truncated_data():
    X, Y = _data(P=9)
    G = jax.random.normal(jax.random.key(6), (6, 6))
    w = (jnp.arange(9) < 4).astype(X.dtype)
    padded = ch.CopyHeadPosterior(ch.SoftmaxCopyHead()).action(G, ch.copy_statistics(X, Y, w))
    truncated = _posterior.action_from_data(G, X[:4], Y[:4])
    assert abs(float(padded - truncated)) < 1e-10


def test_joint_energy_marginalises_to_exact_action():
    """-ln int exp(-E(W, G)) dW (Gaussian in W: Laplace is exact) minus S(G) is G-independent."""
    X, Y = _data(P=4, L=5, V=3)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), T, SW2, SG2)

    @jax.jit
    def marginal_minus_action(G):
        E = lambda w: posterior.energy(w.reshape(3, 3), G, stats)
        H = jax.hessian(E)(jnp.zeros(9))
        w_star = jnp.linalg.solve(H, -jax.grad(E)(jnp.zeros(9)))
        _, logdet = jnp.linalg.slogdet(H / (2 * jnp.pi))
        return E(w_star) + 0.5 * logdet - posterior.action(G, stats)

    Gs = 2.0 * jax.random.normal(jax.random.key(0), (3, 5, 5))
    diffs = [float(marginal_minus_action(G)) for G in Gs]
    assert np.ptp(diffs) < 1e-9


@pytest.mark.parametrize(
    "head",
    [
        ch.SoftmaxCopyHead(),
        ch.SoftmaxCopyHead(causal=True),
        ch.LinearCopyHead(),
        ch.LinearCopyHead(alpha=0.0, causal=True),
        HalfTemperatureSoftmax(),
    ],
)
@pytest.mark.parametrize("cyclic", [True, False])
def test_joint_energy_gradient_equals_autodiff(head, cyclic):
    """The hand-written gradient (SGLD's) equals jax.grad of the joint energy, padded data too."""
    X, Y = _data(P=9, cyclic=cyclic)
    stats = ch.copy_statistics(X, Y, (jnp.arange(9) < 7).astype(X.dtype))
    posterior = ch.CopyHeadPosterior(head, T, SW2, SG2, cyclic=cyclic)
    W = jax.random.normal(jax.random.key(1), (4, 4))
    G = jax.random.normal(jax.random.key(2), (6, 6))
    expected = jax.grad(lambda W, G: posterior.energy(W, G, stats), argnums=(0, 1))(W, G)
    got = posterior.grad(W, G, stats)
    for e, g in zip(expected, got, strict=True):
        assert float(jnp.max(jnp.abs(e - g))) < 1e-12 * float(jnp.max(jnp.abs(e)))


def test_linear_action_has_mirror_symmetry():
    X, Y = _data()
    G = jax.random.normal(jax.random.key(7), (6, 6))
    S = lambda g: _posterior.action_from_data(g, X, Y, attention=ch.LinearCopyHead())
    assert abs(float(S(G) - S(-G))) < 1e-10


def test_action_never_forms_a_PL_by_PL_matrix():
    P, L, V = 7, 5, 3
    X, Y = _data(P=P, L=L, V=V)
    S = lambda g: _posterior.action_from_data(g, X, Y, attention=ch.SoftmaxCopyHead())
    jaxpr = jax.make_jaxpr(jax.grad(S))(jnp.zeros((L, L)))
    sizes = [
        v.aval.shape for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars if hasattr(v.aval, "shape")
    ]
    assert not any(
        s.count(P * L) >= 2 or (P in s and s.count(L) >= 1 and len(s) == 2) for s in sizes
    )
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
        (dict(temperature=-1.0), "temperature"),
        (dict(sigma_w2=0.0), "sigma_w2"),
        (dict(sigma_g2=-2.0), "sigma_g2"),
        (dict(temperature=float("nan")), "temperature"),
    ],
)
def test_action_rejects_bad_hyperparameters(kwargs, message):
    X, Y = _data()
    with pytest.raises(ValueError, match=message) as info:
        _posterior.action_from_data(jnp.zeros((6, 6)), X, Y, **kwargs)
    assert "\n" not in str(info.value)


def test_traced_bad_temperature_fails_at_run_time():
    X, Y = _data()
    stats = ch.copy_statistics(X, Y)
    G = jnp.zeros((6, 6))
    action = lambda t: ch.CopyHeadPosterior(ch.SoftmaxCopyHead(), t).action(G, stats)
    f = jax.jit(action)
    assert np.isfinite(float(f(0.5)))
    with pytest.raises(Exception, match="temperature"):
        f(-0.5).block_until_ready()


def test_action_rejects_bad_shapes():
    """One-line errors (under the test suite's type-check hook a TypeError may come first)."""
    X, Y = _data()
    for G, x, y in (
        (jnp.zeros((5, 5)), X, Y),
        (jnp.zeros((6, 6)), X[0], Y[0]),
        (jnp.zeros((6, 6)), X, Y[:, :, :2]),
    ):
        with pytest.raises((ValueError, TypeError)) as info:
            _posterior.action_from_data(G, x, y)
        if isinstance(info.value, ValueError):
            assert "\n" not in str(info.value)
