"""Linearisation: rates at the origin and at the unigram saddle, critical points, Jacobians
(focus_dilution.md, "Stages" and "Linearisation tools")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import jaxdyn.gradflow as gf
from jaxdyn import Status, entropy
from jaxdyn.gradflow import _linearise, _markov, _model

PI = jnp.array([0.75, 0.19, 0.05, 0.01])


def test_condensation_rate_reference_value_and_top_jacobian_eigenvalue_at_origin():
    assert abs(float(gf.condensation_rate(PI)) - 0.4595) < 5e-5
    P = _markov.paper_transition(PI, 0.5)
    zero = gf.init_transformer(jax.random.key(0), 4, 3, 2, 0.0)
    spec = _linearise._jacobian_spectrum(zero, PI, P)
    ev = np.asarray(spec.eigenvalues)
    # one +-mu1 pair per embedding column (m = 3), all in the (W0, W1) block
    np.testing.assert_allclose(ev[:3], float(gf.condensation_rate(PI)), rtol=1e-10)
    assert ev[3] < 1e-10
    np.testing.assert_allclose(np.asarray(spec.embedding_weight[:3]), 1.0, atol=1e-12)


def test_focus_rate_reference_value_and_paper_family_identity():
    P = _markov.paper_transition(PI, 0.5)
    c = float(_linearise._focus_rate(PI, P))
    assert abs(c - 0.0798) < 5e-5
    s = gf.unigram_saddle(PI, 1, 1)
    p = np.asarray(PI)
    g, b = np.asarray(s.gamma), np.asarray(s.beta)
    var = p @ (g - p @ g) ** 2
    cov = p @ ((g - p @ g) * (b - p @ b))
    for lam in (0.2, 0.5, 0.9):
        np.testing.assert_allclose(
            float(_linearise._focus_rate(PI, _markov.paper_transition(PI, lam))),
            lam * var * cov,
            rtol=1e-12,
        )


def test_unigram_saddle_is_a_critical_point():
    for P in (
        _markov.paper_transition(PI, 0.5),
        _markov.reversible_transition(PI, jax.random.key(1)),
    ):
        s = gf.unigram_saddle(PI, 4, 3)
        g = ravel_pytree(_linearise._loss_gradient(s.model, PI, P))[0]
        assert float(jnp.linalg.norm(g)) < 1e-12


def test_attention_eigenvalue_at_saddle_equals_focus_rate_for_other_chains():
    for seed in range(2):
        P = _markov.reversible_transition(PI, jax.random.key(seed), laziness=0.2)
        s = gf.unigram_saddle(PI, 4, 3)
        spec = _linearise._jacobian_spectrum(s.model, PI, P)
        att = np.asarray(spec.attention_weight) > 0.5
        c = float(_linearise._focus_rate(PI, P, s.gamma, s.beta))
        np.testing.assert_allclose(np.asarray(spec.eigenvalues)[att][0], abs(c), rtol=1e-9)
        # m' = 3 copies of the unstable attention mode, and the block split is clean
        np.testing.assert_allclose(np.asarray(spec.eigenvalues)[att][:3], abs(c), rtol=1e-9)


def test_jacobian_matches_finite_differences_of_the_gradient():
    P = _markov.paper_transition(PI, 0.4)
    model = gf.init_transformer(jax.random.key(2), 4, 3, 2, 0.5)
    flat, unravel = ravel_pytree(model)
    J = np.asarray(_linearise._jacobian(model, PI, P))
    v = np.asarray(jax.random.normal(jax.random.key(3), flat.shape))
    h = 1e-5
    grad = lambda x: np.asarray(ravel_pytree(_linearise._loss_gradient(unravel(x), PI, P))[0])
    fd = -(grad(flat + h * v) - grad(flat - h * v)) / (2 * h)
    np.testing.assert_allclose(J @ v, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
@pytest.mark.heavy
def test_root_finding_from_a_perturbed_saddle_returns_to_the_saddle_loss():
    P = _markov.paper_transition(PI, 0.5)
    s = gf.unigram_saddle(PI, 3, 2)
    flat, unravel = ravel_pytree(s.model)
    start = unravel(flat + 1e-2 * jax.random.normal(jax.random.key(4), flat.shape))
    cp = jax.jit(_linearise._find_critical_point)(start, PI, P)
    assert bool(cp.status == Status.successful)
    assert float(cp.grad_norm) < 1e-9
    np.testing.assert_allclose(float(cp.loss), float(entropy(PI)), atol=1e-9)


def test_predicted_escape_time_is_log_inverse_eps_over_rate():
    np.testing.assert_allclose(_linearise.predicted_escape_time(1e-3, 0.4595), np.log(1e3) / 0.4595)


def test_signed_focus_eigenvalue_has_the_sign_of_c_for_chains_of_either_sign():
    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(6):
        base = np.ones(4)
        base[0] = 6.0
        P = rng.dirichlet(base * rng.uniform(0.3, 3.0), size=4)
        mc = gf.MarkovChain(P)
        pi, P = mc.pi, mc.P
        s = gf.unigram_saddle(pi, 3, 2)
        c = float(_linearise._focus_rate(pi, P, s.gamma, s.beta))
        spec = _linearise._jacobian_spectrum(s.model, pi, P)
        np.testing.assert_allclose(
            float(_linearise._signed_focus_eigenvalue(s.model, spec, pi)), c, rtol=1e-8
        )
        # the closed form is minus the second derivative of L along gamma gamma^T in Phi
        M, _ = s.model.matrices()
        G = jax.grad(_model.population_loss_from_matrices, argnums=1)(M, jnp.zeros((4, 4)), pi, P)
        np.testing.assert_allclose(-float(s.gamma @ G @ s.gamma), c, rtol=1e-10)
        seen.add(np.sign(c))
    assert seen == {-1.0, 1.0}
