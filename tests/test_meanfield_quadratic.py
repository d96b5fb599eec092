"""QuadraticKeySoftmax: softmax and L2 attention as one Gaussian-closed field."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield.fields import L2, QuadraticKeySoftmax, Softmax


def _draw(rng, d, k):
    Q, K = rng.standard_normal((k, d)), rng.standard_normal((k, d))
    V = rng.standard_normal((d, d))
    G = rng.standard_normal((d, d))
    return Q, K, V, jnp.asarray(rng.standard_normal(d)), jnp.asarray(G @ G.T / d)


@pytest.mark.parametrize("seed", range(6))
def test_softmax_and_l2_are_special_cases(seed):
    """Random (d, k) beyond the paper's: the Gaussian ODE and the particle velocity of
    ``from_softmax`` / ``from_l2`` equal those of ``Softmax`` / ``L2`` (round-off: the
    products are associated differently)."""
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 7))
    Q, K, V, mean, cov = _draw(rng, d, int(rng.integers(1, d + 1)))
    x = jnp.asarray(rng.standard_normal((5, d)))
    tokens = jnp.asarray(rng.standard_normal((9, d)))
    for head, field in (
        (Softmax(Q=Q, K=K, V=V), QuadraticKeySoftmax.from_softmax(Softmax(Q=Q, K=K, V=V))),
        (L2(Q=Q, K=K, V=V), QuadraticKeySoftmax.from_l2(L2(Q=Q, K=K, V=V))),
    ):
        for got, want in zip(
            field.gaussian_rhs(mean, cov), head.gaussian_rhs(mean, cov), strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(
            field.velocity(x, tokens), head.velocity(x, tokens), rtol=1e-11, atol=1e-12
        )


def test_gaussian_closure_against_quadrature():
    """Independent check of ``Gamma(x) = V (I + 2 Sigma M)^{-1} (alpha + Sigma A x)``: the
    softmax-weighted mean of ``N(alpha, Sigma)`` by tensor Gauss-Hermite quadrature in d = 2
    (60 nodes per axis; exact to round-off for these smooth Gaussian integrands)."""
    rng = np.random.default_rng(3)
    A = rng.standard_normal((2, 2))
    R = rng.standard_normal((2, 2))
    M = R @ R.T / 4
    V = rng.standard_normal((2, 2))
    alpha = rng.standard_normal(2)
    G = rng.standard_normal((2, 2))
    Sigma = G @ G.T / 4 + 0.1 * np.eye(2)
    field = QuadraticKeySoftmax(A, M, V)
    B, c = field.affine_velocity(jnp.asarray(alpha), jnp.asarray(Sigma))
    z, w = np.polynomial.hermite_e.hermegauss(60)
    Z = np.stack(np.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    Y = alpha + Z @ np.linalg.cholesky(Sigma).T
    for x in rng.standard_normal((4, 2)):
        s = Y @ A @ x - np.einsum("ki,ij,kj->k", Y, M, Y)
        p = W * np.exp(s - s.max())
        want = V @ (p @ Y / p.sum())
        np.testing.assert_allclose(np.asarray(B @ x + c), want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("seed", range(3))
def test_l2_gaussian_closure_against_quadrature_of_its_own_score(seed):
    """``L2``'s Gaussian ODE (through the ``A = 2 K^T Q / sqrt(d)``, ``M = K^T K`` rewriting)
    against Gauss-Hermite quadrature of the L2 weights written from their definition,
    ``exp(-|Q x / sqrt(d) - K y|^2)``, so the rewriting itself is tested (d = 2, random k)."""
    rng = np.random.default_rng(10 + seed)
    d, k = 2, int(rng.integers(1, 4))
    Q, K = rng.standard_normal((k, d)) / 2, rng.standard_normal((k, d)) / 2
    V = rng.standard_normal((d, d))
    alpha = rng.standard_normal(d)
    G = rng.standard_normal((d, d))
    Sigma = G @ G.T / 4 + 0.1 * np.eye(d)
    B, c = L2(Q=Q, K=K, V=V).affine_velocity(jnp.asarray(alpha), jnp.asarray(Sigma))
    z, w = np.polynomial.hermite_e.hermegauss(60)
    Z = np.stack(np.meshgrid(z, z, indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(w, w).ravel()
    Y = alpha + Z @ np.linalg.cholesky(Sigma).T
    for x in rng.standard_normal((4, d)):
        s = -np.sum((Q @ x / np.sqrt(d) - Y @ K.T) ** 2, axis=-1)
        p = W * np.exp(s - s.max())
        want = V @ (p @ Y / p.sum())
        np.testing.assert_allclose(np.asarray(B @ x + c), want, rtol=1e-9, atol=1e-11)


def test_softmax_or_l2_selects_under_vmap():
    """``QuadraticKeySoftmax.softmax_or_l2``'s traced choice reproduces Softmax (0) and L2 (1)
    member by member."""
    rng = np.random.default_rng(7)
    Q, K, V, mean, cov = _draw(rng, 5, 2)
    rhs = jax.jit(
        jax.vmap(
            lambda a: QuadraticKeySoftmax.softmax_or_l2(Q, K, V, a == 1).gaussian_rhs(mean, cov)
        )
    )
    dmean, dcov = rhs(jnp.array([0, 1, 0]))
    for i, head in enumerate((Softmax(Q=Q, K=K, V=V), L2(Q=Q, K=K, V=V), Softmax(Q=Q, K=K, V=V))):
        want_mean, want_cov = head.gaussian_rhs(mean, cov)
        np.testing.assert_allclose(dmean[i], want_mean, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(dcov[i], want_cov, rtol=1e-11, atol=1e-12)


def test_invalid_penalty_and_shapes_rejected():
    with pytest.raises(ValueError, match="positive semi-definite"):
        QuadraticKeySoftmax(np.eye(3), -np.eye(3), np.eye(3))
    with pytest.raises(ValueError, match="square matrices of one size"):
        QuadraticKeySoftmax(np.eye(3), np.eye(2), np.eye(3))
