"""Markov data, the one-layer transformer and its losses (focus_dilution.md, "Data", "Model",
"Population loss")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn import entropy, require_stochastic

PI = np.array([0.75, 0.19, 0.05, 0.01])


def test_paper_transition_is_stochastic_with_stationary_pi():
    P = np.asarray(gf.paper_transition(jnp.asarray(PI), 0.5))
    require_stochastic("P", P)
    np.testing.assert_allclose(PI @ P, PI, atol=1e-14)
    np.testing.assert_allclose(np.diag(P), 0.5 + 0.5 * PI, atol=1e-14)
    np.testing.assert_allclose(np.asarray(gf.stationary_distribution(P)), PI, atol=1e-12)


def test_reversible_chain_satisfies_detailed_balance_with_given_pi():
    for seed in range(3):
        P = np.asarray(gf.reversible_transition(PI, jax.random.key(seed), laziness=0.1))
        require_stochastic("P", P)
        flux = PI[:, None] * P
        np.testing.assert_allclose(flux, flux.T, atol=1e-14)
        np.testing.assert_allclose(np.asarray(gf.stationary_distribution(P)), PI, atol=1e-10)
        assert not np.allclose(P, np.asarray(gf.paper_transition(jnp.asarray(PI), 0.5)))


@pytest.mark.parametrize(
    "P, message",
    [
        (np.array([[0.5, 0.6], [0.5, 0.5]]), "not row-stochastic"),
        (np.array([[1.2, -0.2], [0.5, 0.5]]), "non-negative"),
        (np.ones((2, 3)) / 3, "square"),
    ],
)
def test_resolve_chain_names_the_problem(P, message):
    with pytest.raises(ValueError, match=message):
        gf.resolve_chain(P)


def test_resolve_chain_rejects_bad_pi_and_computes_the_stationary_law():
    P = np.asarray(gf.paper_transition(jnp.asarray(PI), 0.3))
    with pytest.raises(ValueError, match="sum to 1"):
        gf.resolve_chain(P, np.array([0.5, 0.4, 0.05, 0.01]))
    with pytest.raises(ValueError, match="positive"):
        gf.resolve_chain(P, np.array([1.0, 0.0, 0.0, 0.0]))
    pi, _ = gf.resolve_chain(P)
    np.testing.assert_allclose(pi, PI, atol=1e-12)


def test_symmetry_breaking_family_sums_to_one_and_is_symmetric_at_delta_zero():
    c = gf.default_direction(4)
    pi0 = np.asarray(gf.symmetry_breaking_pi(0.75, 0.0, c))
    np.testing.assert_allclose(pi0, [0.75, 0.25 / 3, 0.25 / 3, 0.25 / 3], atol=1e-15)
    pid = np.asarray(gf.symmetry_breaking_pi(0.75, 0.02, c))
    np.testing.assert_allclose(pid.sum(), 1.0, atol=1e-15)
    np.testing.assert_allclose(pid[1:] - pi0[1:], 0.02 * (c - c.mean()), atol=1e-15)


def test_sampler_transition_frequencies_match_P():
    P = np.asarray(gf.paper_transition(jnp.asarray(PI), 0.3))
    x = np.asarray(gf.sample_sequences(jax.random.key(0), P, 4000, 50))
    assert x.shape == (4000, 50)
    np.testing.assert_allclose(np.bincount(x[:, 0], minlength=4) / 4000, 0.25, atol=0.03)
    C = np.zeros((4, 4))
    np.add.at(C, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    emp = C / C.sum(1, keepdims=True)
    se = np.sqrt(P * (1 - P) / C.sum(1, keepdims=True))
    assert np.all(np.abs(emp - P) < 5 * se + 1e-12)


def test_population_loss_is_log_d_at_zero_and_entropy_at_the_unigram_saddle():
    pi = jnp.asarray(PI)
    P = gf.paper_transition(pi, 0.5)
    zero = gf.init_transformer(jax.random.key(0), 4, 6, 5, 0.0)
    np.testing.assert_allclose(gf.population_loss(zero, pi, P), np.log(4), atol=1e-14)
    s = gf.unigram_saddle(pi, 6, 5)
    np.testing.assert_allclose(gf.population_loss(s.model, pi, P), 0.72714, atol=5e-6)
    np.testing.assert_allclose(gf.population_loss(s.model, pi, P), entropy(pi), atol=1e-12)
    M, _ = s.model.matrices()
    np.testing.assert_allclose(jax.nn.softmax(pi @ M), PI, atol=1e-12)


def test_gradient_in_M_at_origin_is_rank_one_pi_times_uniform_minus_pi():
    pi = jnp.asarray(PI)
    P = gf.paper_transition(pi, 0.5)
    G = jax.grad(gf.population_loss_from_matrices)(jnp.zeros((4, 4)), jnp.zeros((4, 4)), pi, P)
    np.testing.assert_allclose(G, np.outer(PI, 0.25 - PI), atol=1e-14)
    GPhi = jax.grad(gf.population_loss_from_matrices, argnums=1)(
        jnp.zeros((4, 4)), jnp.zeros((4, 4)), pi, P
    )
    np.testing.assert_allclose(GPhi, 0.0, atol=1e-14)


def _slow_logits(W0, W1, WQ, WK, tokens):
    """Independent loop implementation of a_j = softmax_j(Phi[x_s, x_j]), z = sum_j a_j M[x_j]."""
    M = W0 @ W1
    Phi = W0 @ WQ @ WK.T @ W0.T
    q = tokens[-1]
    scores = np.array([Phi[q, k] for k in tokens])
    a = np.exp(scores - scores.max())
    a /= a.sum()
    z = np.zeros(M.shape[1])
    for aj, k in zip(a, tokens, strict=True):
        z += aj * M[k]
    return z


def test_forward_pass_matches_an_independent_loop_implementation():
    model = gf.init_transformer(jax.random.key(3), 5, 4, 3, 0.7)
    tokens = np.array([0, 3, 3, 1, 4, 2, 0, 1])
    z = np.asarray(model.logits(tokens))
    ref = _slow_logits(*(np.asarray(w) for w in (model.W0, model.W1, model.WQ, model.WK)), tokens)
    np.testing.assert_allclose(z, ref, atol=1e-12)


def test_sequence_loss_approaches_the_population_loss_for_long_sequences():
    pi = jnp.asarray(PI)
    P = gf.paper_transition(pi, 0.5)
    model = gf.init_transformer(jax.random.key(5), 4, 6, 6, 0.6)
    x = gf.sample_sequences(jax.random.key(6), P, 20000, 257)
    finite = float(jax.jit(gf.sequence_loss)(model, x))
    pop = float(gf.population_loss(model, pi, P))
    # measured +0.005 for this key (-0.001, -0.004 for keys 7, 8): sampling noise of 20000
    # sequences plus the O(1/s) finite-length bias; 0.01 is twice the largest seen
    assert abs(finite - pop) < 0.01, (finite, pop)


def test_transformer_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="W1 must have shape"):
        gf.OneLayerTransformer(
            W0=jnp.zeros((4, 3)), W1=jnp.zeros((2, 4)), WQ=jnp.zeros((3, 2)), WK=jnp.zeros((3, 2))
        )
    with pytest.raises(ValueError, match="WK must have the shape"):
        gf.OneLayerTransformer(
            W0=jnp.zeros((4, 3)), W1=jnp.zeros((3, 4)), WQ=jnp.zeros((3, 2)), WK=jnp.zeros((3, 3))
        )
