"""Interaction energy, its rate, geodesic (non-)convexity, the Sinkhorn / Bures-Wasserstein link."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.attention import sinkhorn_log_coupling
from jaxdyn.meanfield._energy import (
    _phi,
    bures_wasserstein_geodesic,
    bures_wasserstein_gradient,
    bures_wasserstein_step,
    energy_rate,
    gaussian_interaction_energy,
    gaussian_sinkhorn_energy,
    geodesic_second_variation,
    interaction_energy,
)
from jaxdyn.meanfield.fields import Linear, MultiHead, Sinkhorn, Softmax


def _softmax_with_A(A):
    """Softmax module whose interaction matrix K^T Q / sqrt(d) equals A."""
    d = A.shape[0]
    return Softmax(Q=np.sqrt(d) * np.asarray(A), K=np.eye(d), V=np.eye(d))


def test_interaction_energy_equals_the_double_sum():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 3))
    A = 0.3 * rng.standard_normal((3, 3))
    att = _softmax_with_A(A)
    direct = 0.5 * np.mean([[np.exp(y @ A @ z) for y in x] for z in x])
    assert abs(float(interaction_energy(att, x)) - direct) < 1e-12 * direct
    np.testing.assert_allclose(np.asarray(att.A()), A, atol=1e-14)


def test_energy_rate_matches_the_derived_softmax_formula():
    # A symmetric: dE/dt = (1/n) sum_i u_i^T A V u_i / z_i, u_i = mean_j k_ij x_j, z_i = mean_j k_ij
    rng = np.random.default_rng(1)
    d, n = 3, 9
    B = rng.standard_normal((d, d))
    A = 0.2 * (B + B.T)
    V = rng.standard_normal((d, d))
    att = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=V)
    x = rng.standard_normal((n, d))
    k = np.exp(x @ A @ x.T)
    u = k @ x / n
    z = k.mean(axis=1)
    expected = np.mean([u[i] @ A @ V @ u[i] / z[i] for i in range(n)])
    assert abs(float(energy_rate(att, x)) - expected) < 1e-12 * max(1.0, abs(expected))


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_softmax_energy_is_monotone_when_AV_is_semidefinite(sign):
    # V = I: A = -C^T C (A V <= 0) makes E decrease, A = +C^T C makes it increase, on any cloud
    rng = np.random.default_rng(2)
    d = 4
    rates = []
    for _ in range(20):
        C = rng.standard_normal((d, d)) / d
        att = _softmax_with_A(sign * C.T @ C)
        x = rng.standard_normal((12, d)) + rng.standard_normal(d)
        rates.append(float(energy_rate(att, x)))
    assert all(sign * r > 0 for r in rates)


def test_gaussian_interaction_energy_matches_gauss_hermite_quadrature():
    A = np.array([[-0.3, 0.2], [0.1, 0.25]])
    alpha = np.array([0.4, -0.7])
    L = np.array([[0.8, 0.0], [0.3, 0.6]])
    sigma = L @ L.T
    nodes, weights = np.polynomial.hermite_e.hermegauss(30)  # probabilists' Hermite
    weights = weights / weights.sum()
    z1, z2 = np.meshgrid(nodes, nodes, indexing="ij")
    pts = alpha + np.stack([z1.ravel(), z2.ravel()], 1) @ L.T  # samples of N(alpha, Sigma)
    w = np.outer(weights, weights).ravel()
    expected = 0.5 * w @ np.exp(pts @ A.T @ pts.T) @ w  # sum over x, y of w_x w_y exp(y^T A x)
    got = gaussian_interaction_energy(_softmax_with_A(A), alpha, sigma)
    assert abs(float(got) - expected) < 1e-10 * expected


def test_gaussian_interaction_energy_is_infinite_beyond_the_integrability_threshold():
    att = _softmax_with_A(np.eye(2))
    assert np.isinf(float(gaussian_interaction_energy(att, np.zeros(2), 1.01 * np.eye(2))))
    assert np.isfinite(float(gaussian_interaction_energy(att, np.zeros(2), 0.99 * np.eye(2))))
    # scalar check: 1/2 E exp(a X Y), X, Y ~ N(0, s) is 1/2 (1 - a^2 s^2)^{-1/2}
    att1 = _softmax_with_A(np.array([[0.5]]))
    got = gaussian_interaction_energy(att1, np.zeros(1), np.array([[1.5]]))
    assert abs(float(got) - 0.5 / np.sqrt(1 - 0.75**2)) < 1e-12


def test_dirac_translation_is_a_nonconvexity_witness_for_V_identity_A_minus_identity():
    # mu_s = delta_{s v}: E(s) = 1/2 exp(-s^2 |v|^2), so E''(0) = -|v|^2 < 0
    att = _softmax_with_A(-np.eye(3))
    v = np.array([[0.5, -1.0, 2.0]])
    got = geodesic_second_variation(lambda x: interaction_energy(att, x), np.zeros((1, 3)), v, 0.0)
    assert abs(float(got) + np.sum(v**2)) < 1e-12


def test_geodesic_second_variation_matches_finite_differences():
    rng = np.random.default_rng(3)
    att = _softmax_with_A(-np.eye(2))
    x0, x1 = rng.standard_normal((10, 2)), rng.standard_normal((10, 2))

    def E(s):
        return float(interaction_energy(att, (1 - s) * x0 + s * x1))

    h, s = 2e-4, 0.3
    fd = (E(s + h) - 2 * E(s) + E(s - h)) / h**2
    got = float(geodesic_second_variation(lambda x: interaction_energy(att, x), x0, x1, s))
    assert abs(got - fd) < 1e-5 * max(1.0, abs(fd))


def test_bures_wasserstein_geodesic_endpoints_and_midpoint_distance():
    from jaxdyn.meanfield._analysis import bures_wasserstein

    rng = np.random.default_rng(4)
    G0, G1 = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    s0, s1 = G0 @ G0.T + 0.1 * np.eye(3), G1 @ G1.T + 0.1 * np.eye(3)
    m0, m1 = rng.standard_normal(3), rng.standard_normal(3)
    m, s = bures_wasserstein_geodesic(m0, s0, m1, s1, 1.0)
    np.testing.assert_allclose(s, s1, atol=1e-9)
    np.testing.assert_allclose(m, m1, atol=1e-12)
    mh, sh = bures_wasserstein_geodesic(m0, s0, m1, s1, 0.5)
    total = float(bures_wasserstein(m0, s0, m1, s1))
    assert abs(float(bures_wasserstein(m0, s0, mh, sh)) - total / 2) < 1e-8
    assert abs(float(bures_wasserstein(mh, sh, m1, s1)) - total / 2) < 1e-8


def test_sinkhorn_coupling_matrix_phi_is_the_entropic_ot_optimum():
    # M = phi(At)^T is a stationary point of -tr(At M) - 1/2 logdet(I - M M^T) for any At
    rng = np.random.default_rng(5)
    At = rng.standard_normal((3, 3))
    M = _phi(jnp.asarray(At)).T

    def objective(M):
        return -jnp.trace(At @ M) - 0.5 * jnp.linalg.slogdet(jnp.eye(3) - M @ M.T)[1]

    assert float(jnp.max(jnp.abs(jax.grad(objective)(M)))) < 1e-12
    assert float(jnp.linalg.norm(M, ord=2)) < 1.0


def test_gaussian_sinkhorn_energy_matches_discretised_sinkhorn_in_one_dimension():
    # 1/2 OT_1(N(0, s), N(0, s)) with cost -a x y, against log-domain Sinkhorn on a fine grid
    a, s = 0.7, 1.3
    grid = np.linspace(-9.0, 9.0, 301) * np.sqrt(s)
    logm = -0.5 * grid**2 / s
    logm = logm - jax.scipy.special.logsumexp(logm)
    scores = a * np.outer(grid, grid)
    log_pi = sinkhorn_log_coupling(
        scores, log_row_weights=logm, log_col_weights=logm, iterations=200
    )
    pi = np.exp(np.asarray(log_pi))
    cost = -np.sum(pi * scores)
    kl = np.sum(pi * (np.asarray(log_pi) - logm[:, None] - logm[None, :]))
    expected = 0.5 * (cost + kl)
    got = float(gaussian_sinkhorn_energy(np.array([[a]]), np.array([[s]])))
    assert abs(got - expected) < 1e-10


def test_sinkhorn_gaussian_ode_with_V_equal_A_is_the_bures_wasserstein_gradient_flow():
    rng = np.random.default_rng(6)
    d = 3
    B = rng.standard_normal((d, d))
    A = 0.25 * (B + B.T)
    G = rng.standard_normal((d, d))
    sigma = G @ G.T / d + 0.2 * np.eye(d)

    def F(c):
        return gaussian_sinkhorn_energy(A, c)

    bw = np.asarray(bures_wasserstein_gradient(F, sigma))
    _, descent = Sinkhorn(Q=A, K=np.eye(d), V=A).gaussian_rhs(jnp.zeros(d), sigma)
    _, ascent = Sinkhorn(Q=A, K=np.eye(d), V=-A).gaussian_rhs(jnp.zeros(d), sigma)
    np.testing.assert_allclose(descent, bw, atol=1e-12)
    np.testing.assert_allclose(ascent, -bw, atol=1e-12)
    # one exponential-map step of size tau agrees with the flow to first order: with the
    # Euclidean gradient E (bw = -2 (E Sigma + Sigma E)), (step - Sigma) / tau - bw is exactly
    # 4 tau E Sigma E; what is left is the round-off of step - Sigma, divided by tau.
    E = np.asarray(jax.grad(F)(jnp.asarray(sigma)))
    E = 0.5 * (E + E.T)
    for tau in (1e-3, 1e-4):
        step = np.asarray(bures_wasserstein_step(F, sigma, tau))
        second_order = 4 * tau * E @ sigma @ E
        roundoff = 100 * np.finfo(float).eps * np.abs(sigma).max() / tau
        assert np.max(np.abs((step - sigma) / tau - bw - second_order)) < roundoff
        assert np.max(np.abs(second_order)) > roundoff  # the term checked is not round-off


def test_energy_rejects_attention_without_a_single_interaction_matrix():
    att = MultiHead(Q=np.eye(2), K=np.eye(2), V=np.eye(2), heads=2)
    with pytest.raises(ValueError, match="no single interaction matrix"):
        interaction_energy(att, np.zeros((3, 2)))
    # linear attention has one: the energy is defined
    assert np.isfinite(
        float(interaction_energy(Linear(Q=np.eye(2), K=np.eye(2), V=np.eye(2)), np.ones((3, 2))))
    )
