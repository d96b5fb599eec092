"""Markov data, the one-layer transformer and its losses (focus_dilution.md, "Data", "Model",
"Population loss")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn import entropy
from jaxdyn._validation import require_stochastic
from jaxdyn.gradflow import _markov, _model

PI = np.array([0.75, 0.19, 0.05, 0.01])


def test_paper_transition_is_stochastic_with_stationary_pi():
    P = np.asarray(_markov.paper_transition(jnp.asarray(PI), 0.5))
    require_stochastic("P", P)
    np.testing.assert_allclose(PI @ P, PI, atol=1e-14)
    np.testing.assert_allclose(np.diag(P), 0.5 + 0.5 * PI, atol=1e-14)
    np.testing.assert_allclose(np.asarray(_markov.stationary_distribution(P)), PI, atol=1e-12)


def test_reversible_chain_satisfies_detailed_balance_with_given_pi():
    for seed in range(3):
        P = np.asarray(_markov.reversible_transition(PI, jax.random.key(seed), laziness=0.1))
        require_stochastic("P", P)
        flux = PI[:, None] * P
        np.testing.assert_allclose(flux, flux.T, atol=1e-14)
        np.testing.assert_allclose(np.asarray(_markov.stationary_distribution(P)), PI, atol=1e-10)
        assert not np.allclose(P, np.asarray(_markov.paper_transition(jnp.asarray(PI), 0.5)))


@pytest.mark.parametrize(
    "P, message",
    [
        (np.array([[0.5, 0.6], [0.5, 0.5]]), "not row-stochastic"),
        (np.array([[1.2, -0.2], [0.5, 0.5]]), "non-negative"),
        (np.ones((2, 3)) / 3, "square"),
    ],
)
def test_markov_chain_names_the_problem(P, message):
    with pytest.raises(ValueError, match=message):
        gf.MarkovChain(P)


def test_markov_chain_rejects_bad_pi_and_computes_the_stationary_law():
    P = np.asarray(_markov.paper_transition(jnp.asarray(PI), 0.3))
    with pytest.raises(ValueError, match="sum to 1"):
        gf.MarkovChain(P, np.array([0.5, 0.4, 0.05, 0.01]))
    with pytest.raises(ValueError, match="positive"):
        gf.MarkovChain(P, np.array([1.0, 0.0, 0.0, 0.0]))
    pi = gf.MarkovChain(P).pi
    np.testing.assert_allclose(pi, PI, atol=1e-12)


def test_markov_chain_validates_once_on_random_chains_and_batches_under_vmap():
    rng = np.random.default_rng(7)
    for d in (3, 5, 8):
        P = rng.dirichlet(np.ones(d), size=d)  # a random non-reversible chain
        chain = gf.MarkovChain(P)
        np.testing.assert_allclose(np.asarray(chain.pi) @ P, np.asarray(chain.pi), atol=1e-12)
        assert chain.d == d
    with pytest.raises(ValueError, match="not row-stochastic"):
        gf.MarkovChain(np.array([[0.5, 0.6], [0.5, 0.5]]))
    with pytest.raises(ValueError, match="not stationary"):
        gf.MarkovChain(
            _markov.paper_transition(jnp.asarray(PI), 0.3), np.array([0.4, 0.3, 0.2, 0.1])
        )
    with pytest.raises(ValueError, match="positive"):
        gf.MarkovChain.paper(np.array([1.0, 0.0, 0.0, 0.0]), 0.5)
    lams = jnp.array([0.2, 0.5])
    batch = jax.vmap(lambda lam: gf.MarkovChain.paper(jnp.asarray(PI), lam))(lams)
    assert batch.P.shape == (2, 4, 4) and batch.pi.shape == (2, 4)


def test_symmetry_breaking_family_sums_to_one_and_is_symmetric_at_delta_zero():
    c = _markov.default_direction(4)
    pi0 = np.asarray(gf.symmetry_breaking_pi(0.75, 0.0, c))
    np.testing.assert_allclose(pi0, [0.75, 0.25 / 3, 0.25 / 3, 0.25 / 3], atol=1e-15)
    pid = np.asarray(gf.symmetry_breaking_pi(0.75, 0.02, c))
    np.testing.assert_allclose(pid.sum(), 1.0, atol=1e-15)
    np.testing.assert_allclose(pid[1:] - pi0[1:], 0.02 * (c - c.mean()), atol=1e-15)


def test_sampler_transition_frequencies_match_P():
    P = np.asarray(_markov.paper_transition(jnp.asarray(PI), 0.3))
    x = np.asarray(_markov._sample_sequences(jax.random.key(0), P, 4000, 50))
    assert x.shape == (4000, 50)
    np.testing.assert_allclose(np.bincount(x[:, 0], minlength=4) / 4000, 0.25, atol=0.03)
    C = np.zeros((4, 4))
    np.add.at(C, (x[:, :-1].ravel(), x[:, 1:].ravel()), 1)
    emp = C / C.sum(1, keepdims=True)
    se = np.sqrt(P * (1 - P) / C.sum(1, keepdims=True))
    assert np.all(np.abs(emp - P) < 5 * se + 1e-12)


def test_population_loss_is_log_d_at_zero_and_entropy_at_the_unigram_saddle():
    pi = jnp.asarray(PI)
    P = _markov.paper_transition(pi, 0.5)
    zero = gf.init_transformer(jax.random.key(0), 4, 6, 5, 0.0)
    np.testing.assert_allclose(_model._population_loss(zero, pi, P), np.log(4), atol=1e-14)
    s = gf.unigram_saddle(pi, 6, 5)
    np.testing.assert_allclose(_model._population_loss(s.model, pi, P), 0.72714, atol=5e-6)
    np.testing.assert_allclose(_model._population_loss(s.model, pi, P), entropy(pi), atol=1e-12)
    M, _ = s.model.matrices()
    np.testing.assert_allclose(jax.nn.softmax(pi @ M), PI, atol=1e-12)


def test_gradient_in_M_at_origin_is_rank_one_pi_times_uniform_minus_pi():
    pi = jnp.asarray(PI)
    P = _markov.paper_transition(pi, 0.5)
    G = jax.grad(_model.population_loss_from_matrices)(jnp.zeros((4, 4)), jnp.zeros((4, 4)), pi, P)
    np.testing.assert_allclose(G, np.outer(PI, 0.25 - PI), atol=1e-14)
    GPhi = jax.grad(_model.population_loss_from_matrices, argnums=1)(
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


def _per_query_population_loss(model, pi, P):
    """``L_q = logsumexp(o(q)) - sum_y P_qy o(q)_y`` with ``O = softmax(log pi + Phi) M``
    (written out here, independently of :func:`gradflow.population_loss`)."""
    M, Phi = (np.asarray(a) for a in model.matrices())
    scores = np.log(pi)[None, :] + Phi
    W = np.exp(scores - scores.max(1, keepdims=True))
    W /= W.sum(1, keepdims=True)
    O = W @ M  # noqa: E741
    lse = O.max(1) + np.log(np.exp(O - O.max(1, keepdims=True)).sum(1))
    return lse - (P * O).sum(1)


def test_sequence_loss_approaches_the_population_loss_for_long_sequences():
    """Error model: for stationary windows (``x_1 ~ pi``) the expected per-sequence loss is
    ``L + b/s + c/s^2 + O(s^-3)`` (the attention sees empirical type frequencies whose
    fluctuations are ``O(s^-1/2)``; the loss is smooth in them, so the bias is a power series in
    ``1/s``). For each ``s`` the gap to ``L`` is estimated from independent sequences with the
    target averaged out exactly (``sum_y P[x_s, y] (-log softmax(z)_y)``) and the query's own
    population loss ``L_{x_s}`` subtracted (a control variate with mean ``L``, as ``x_s ~ pi``);
    its standard error is exact (independent sequences). A weighted fit of ``a + b/s + c/s^2``
    must give an intercept ``a`` within 4 standard errors of 0; ``sequence_loss`` itself is
    checked against the per-sequence losses it averages."""
    pi = jnp.asarray(PI)
    P = _markov.paper_transition(pi, 0.5)
    Pn = np.asarray(P)
    model = gf.init_transformer(jax.random.key(5), 4, 6, 6, 0.6)
    L_q = _per_query_population_loss(model, PI, Pn)
    pop = float(_model._population_loss(model, pi, P))
    np.testing.assert_allclose(PI @ L_q, pop, rtol=1e-12)
    M, Phi = (np.asarray(a) for a in model.matrices())
    lengths = np.array([16, 32, 64, 128, 256])
    n = 4000
    # independent chains for each s (prefixes of disjoint blocks of stationary chains)
    xs = np.asarray(
        _markov._sample_sequences(jax.random.key(6), P, n * len(lengths), 257, initial=pi)
    )
    gaps, ses = [], []
    for i, s in enumerate(lengths):
        x = xs[i * n : (i + 1) * n, : s + 1]
        q, y = x[:, -2], x[:, -1]
        counts = (x[:, :-1, None] == np.arange(4)).sum(1)
        # sum_j a_j M[x_j] = sum_k softmax_k(Phi[q, k] + log c_k) M[k]
        with np.errstate(divide="ignore"):
            scores = Phi[q] + np.log(counts)
        a = np.exp(scores - scores.max(1, keepdims=True))
        z = (a / a.sum(1, keepdims=True)) @ M
        z_max = z.max(1, keepdims=True)
        log_p = z - z_max - np.log(np.exp(z - z_max).sum(1, keepdims=True))
        if s == lengths[-1]:
            per_sequence = -log_p[np.arange(n), y]
            np.testing.assert_allclose(
                float(jax.jit(_model.sequence_loss)(model, x)), per_sequence.mean(), rtol=1e-10
            )
        f = -(Pn[q] * log_p).sum(1) - L_q[q]
        gaps.append(f.mean())
        ses.append(f.std(ddof=1) / np.sqrt(n))
    gaps, ses = np.array(gaps), np.array(ses)
    X = np.stack([np.ones_like(lengths, float), 1.0 / lengths, 1.0 / lengths**2], axis=1)
    A = X / ses[:, None]
    cov = np.linalg.inv(A.T @ A)
    coef = cov @ A.T @ (gaps / ses)
    assert abs(coef[0]) <= 4 * np.sqrt(cov[0, 0]), (coef, np.sqrt(np.diag(cov)), gaps, ses)
    # the finite-length bias shrinks with s
    assert abs(gaps[-1]) < abs(gaps[0]), gaps


def test_transformer_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="W1 must have shape"):
        gf.OneLayerTransformer(
            W0=jnp.zeros((4, 3)), W1=jnp.zeros((2, 4)), WQ=jnp.zeros((3, 2)), WK=jnp.zeros((3, 2))
        )
    with pytest.raises(ValueError, match="WK must have the shape"):
        gf.OneLayerTransformer(
            W0=jnp.zeros((4, 3)), W1=jnp.zeros((3, 4)), WQ=jnp.zeros((3, 2)), WK=jnp.zeros((3, 3))
        )
