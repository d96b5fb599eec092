"""The in-context Markov task and its Bayes predictors against brute-force posterior integrals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import roots_jacobi

import jaxdyn.induction as ind


def _nodes(alpha, n=40):
    """Gauss-Jacobi nodes and weights for the Beta(alpha, alpha) prior on [0, 1] (exact for
    polynomial likelihoods of degree < 2n)."""
    x, w = roots_jacobi(n, alpha - 1.0, alpha - 1.0)
    return (1 + x) / 2, w / w.sum()


def _brute_bigram(seq, alpha):
    """p(x_{t+1} = 1 | x_{0..t}) for k = 2 by integrating the likelihood of the whole prefix over
    both transition rows (q_i = P(i -> 1) ~ Beta(alpha, alpha)) on a 2-d quadrature grid."""
    q, w = _nodes(alpha)
    Q0, Q1 = np.meshgrid(q, q, indexing="ij")
    W = np.outer(w, w)
    out = []
    like = np.ones_like(Q0)
    for t in range(len(seq)):
        if t > 0:
            qrow = Q0 if seq[t - 1] == 0 else Q1
            like = like * (qrow if seq[t] == 1 else 1 - qrow)
        qcur = Q0 if seq[t] == 0 else Q1
        out.append(np.sum(W * like * qcur) / np.sum(W * like))
    return np.array(out)


def _brute_unigram(seq, alpha):
    q, w = _nodes(alpha)
    out, like = [], np.ones_like(q)
    for x in seq:
        like = like * (q if x == 1 else 1 - q)
        out.append(np.sum(w * like * q) / np.sum(w * like))
    return np.array(out)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_predictors_equal_brute_force_posterior_for_two_states(alpha):
    task = ind.InContextMarkov(states=2, length=24, concentration=alpha)
    rng = np.random.default_rng(int(alpha * 10))
    seqs = rng.integers(0, 2, size=(6, 24))  # arbitrary sequences, not only typical ones
    seqs[0] = 0  # a run of one state
    bi = np.asarray(task.bigram(jnp.asarray(seqs)))
    uni = np.asarray(task.unigram(jnp.asarray(seqs)))
    for s, seq in enumerate(seqs):
        np.testing.assert_allclose(bi[s, :, 1], _brute_bigram(seq, alpha), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(uni[s, :, 1], _brute_unigram(seq, alpha), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bi.sum(-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("k", [3, 5])
def test_bigram_predictor_counts_transitions_of_the_current_row(k):
    """Against an explicit loop over the prefix, for k > 2 and a non-uniform alpha."""
    task = ind.InContextMarkov(states=k, length=15, concentration=0.7)
    seq = np.random.default_rng(k).integers(0, k, size=15)
    bi = np.asarray(task.bigram(jnp.asarray(seq)))
    for t in range(15):
        counts = np.zeros(k)
        for s in range(1, t + 1):
            if seq[s - 1] == seq[t]:
                counts[seq[s]] += 1
        np.testing.assert_allclose(bi[t], (counts + 0.7) / (counts.sum() + 0.7 * k), atol=1e-12)


def test_expected_loss_at_length_two_equals_closed_form():
    """T = 2: x_1 = x_0 with probability E[P_ii] = 1/k, so the unigram predictor's expected loss is
    -(1/k) ln((1 + a)/(1 + k a)) - (1 - 1/k) ln(a / (1 + k a)); the bigram one is ln k."""
    k, a = 3, 0.8
    task = ind.InContextMarkov(states=k, length=2, concentration=a)
    exact = -(1 / k) * np.log((1 + a) / (1 + k * a)) - (1 - 1 / k) * np.log(a / (1 + k * a))
    mean, se = task.expected_loss(jax.random.key(0), task.unigram, sequences=4000)
    assert abs(float(mean) - exact) < 4 * float(se)
    mean, se = task.expected_loss(jax.random.key(1), task.bigram, sequences=2000)
    np.testing.assert_allclose(float(mean), np.log(k), rtol=1e-12)


def test_chains_follow_their_transition_matrix():
    """in_context=False: one matrix for the batch, recovered from the transition counts."""
    task = ind.InContextMarkov(states=3, length=64, in_context=False)
    key = jax.random.key(3)
    seqs = np.asarray(task.sample(key, 400))
    P = np.asarray(task.transition_matrices(jax.random.split(key, 3)[0], 1))[0]
    counts = np.zeros((3, 3))
    np.add.at(counts, (seqs[:, :-1].ravel(), seqs[:, 1:].ravel()), 1)
    freq = counts / counts.sum(1, keepdims=True)
    se = np.sqrt(P * (1 - P) / counts.sum(1, keepdims=True))
    assert np.all(np.abs(freq - P) < 5 * se + 1e-12)


def test_bigram_beats_unigram_by_more_than_the_error():
    task = ind.InContextMarkov(states=3, length=32)
    u, su = task.expected_loss(jax.random.key(0), task.unigram, sequences=2048)
    b, sb = task.expected_loss(jax.random.key(1), task.bigram, sequences=2048)
    assert float(u - b) > 5 * float(np.hypot(su, sb))
    assert float(u) < np.log(3)


@pytest.mark.parametrize("bad", [dict(states=1), dict(length=1), dict(concentration=0.0)])
def test_invalid_tasks_are_rejected(bad):
    with pytest.raises(ValueError):
        ind.InContextMarkov(**{"states": 3, "length": 8, **bad})


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_transition_rows_are_dirichlet(alpha):
    """Each entry of a Dirichlet(alpha 1_k) row is Beta(alpha, (k - 1) alpha): a KS test against
    it (alpha = 1 takes the normalised-exponential path, other alphas the gamma sampler), and
    rows sum to one."""
    from scipy import stats

    k = 4
    task = ind.InContextMarkov(states=k, length=4, concentration=alpha)
    P = np.asarray(task.transition_matrices(jax.random.key(3), 2000), np.float64)
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-5)
    entry = P[:, 1, 2]  # one entry per independent matrix
    assert stats.kstest(entry, stats.beta(alpha, (k - 1) * alpha).cdf).pvalue > 1e-3
    # counterfactuals the test has the power to reject (2000 draws): the same mean at twice the
    # concentration, and rows of normalised uniforms (a plausible wrong sampler for alpha = 1)
    wrong = stats.beta(2 * alpha, 2 * (k - 1) * alpha).cdf
    assert stats.kstest(entry, wrong).pvalue < 1e-3
    U = np.random.default_rng(0).uniform(size=(2000, k))
    normalised = (U / U.sum(-1, keepdims=True))[:, 2]
    assert stats.kstest(normalised, stats.beta(alpha, (k - 1) * alpha).cdf).pvalue < 1e-3
