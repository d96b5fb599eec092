"""Distances, clusters and stability of token measures (transformer_pde.md)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from jaxdyn.meanfield import detect_clusters, empirical_mean_cov
from jaxdyn.meanfield._analysis import (
    bures_wasserstein,
    bures_wasserstein_map,
    optimal_assignment,
    sliced_wasserstein,
    stability_ratio,
    wasserstein2_exact,
)


def _random_spd(rng, d, scale=1.0):
    G = rng.standard_normal((d, d))
    return scale * (G @ G.T / d + 0.1 * np.eye(d))


def test_bures_wasserstein_commuting_covariances_closed_form():
    m1, m2 = np.array([1.0, -2.0, 0.5]), np.array([0.0, 1.0, 0.5])
    a, b = np.array([1.0, 4.0, 0.25]), np.array([9.0, 1.0, 0.25])
    expected = np.sqrt(np.sum((m1 - m2) ** 2) + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2))
    got = bures_wasserstein(m1, np.diag(a), m2, np.diag(b))
    assert abs(float(got) - expected) < 1e-12


def test_bures_wasserstein_matches_scipy_sqrtm_formula_and_is_symmetric():
    rng = np.random.default_rng(0)
    for d in (2, 5):
        s1, s2 = _random_spd(rng, d), _random_spd(rng, d, 3.0)
        m1, m2 = rng.standard_normal(d), rng.standard_normal(d)
        r1 = scipy.linalg.sqrtm(s1).real
        cross = scipy.linalg.sqrtm(r1 @ s2 @ r1).real
        expected = np.sqrt(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * cross))
        assert abs(float(bures_wasserstein(m1, s1, m2, s2)) - expected) < 1e-10
        assert abs(float(bures_wasserstein(m2, s2, m1, s1)) - expected) < 1e-10


def test_bures_wasserstein_map_pushes_cov0_to_cov1_and_realises_the_distance():
    rng = np.random.default_rng(1)
    s0, s1 = _random_spd(rng, 4), _random_spd(rng, 4, 2.0)
    T = np.asarray(bures_wasserstein_map(s0, s1))
    np.testing.assert_allclose(T, T.T, atol=1e-12)
    np.testing.assert_allclose(T @ s0 @ T, s1, atol=1e-10)
    # the cost of the map, E|x - T x|^2, equals W2^2
    cost = np.trace((np.eye(4) - T) @ s0 @ (np.eye(4) - T).T)
    assert abs(cost - float(bures_wasserstein(np.zeros(4), s0, np.zeros(4), s1)) ** 2) < 1e-10


def test_bures_wasserstein_rejects_non_psd_covariance_and_bad_shapes():
    with pytest.raises(ValueError, match="cov2 must be positive semi-definite"):
        bures_wasserstein(np.zeros(2), np.eye(2), np.zeros(2), np.diag([1.0, -1.0]))
    # ValueError from the function, or the annotation's TypeCheckError under the test hook
    with pytest.raises((ValueError, TypeError), match="cov1"):
        bures_wasserstein(np.zeros(2), np.eye(3), np.zeros(2), np.eye(2))


def test_empirical_mean_cov_is_the_measures_own_moments():
    x = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0], [2.0, 4.0]])
    mean, cov = empirical_mean_cov(x)
    np.testing.assert_allclose(mean, [1.0, 2.0])
    np.testing.assert_allclose(cov, np.diag([1.0, 4.0]), atol=1e-14)


def test_optimal_assignment_matches_scipy_and_brute_force():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    cost = np.sum((x[:, None] - y[None]) ** 2, -1)
    brute = min(sum(cost[i, p[i]] for i in range(6)) for p in itertools.permutations(range(6)))
    sigma = optimal_assignment(x, y)
    assert sorted(sigma.tolist()) == list(range(6))
    assert abs(cost[np.arange(6), sigma].sum() - brute) < 1e-12
    for n in (17, 60):
        x, y = rng.standard_normal((n, 2)), rng.standard_normal((n, 2)) + 1.0
        cost = np.sum((x[:, None] - y[None]) ** 2, -1)
        rows, cols = scipy.optimize.linear_sum_assignment(cost)
        sigma = optimal_assignment(x, y)
        assert abs(cost[np.arange(n), sigma].sum() - cost[rows, cols].sum()) < 1e-9


def test_wasserstein2_exact_of_a_translation_is_the_shift_length():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 3))
    shift = np.array([0.3, -0.4, 1.2])
    # a translated copy, shuffled: the optimal map undoes the shuffle
    y = (x + shift)[rng.permutation(20)]
    assert abs(wasserstein2_exact(x, y) - np.linalg.norm(shift)) < 1e-12


def test_sliced_wasserstein_is_exact_in_one_dimension_with_unequal_sizes():
    # 1-D: every projection is +-identity, so SW2 equals the exact W2 of the quantile functions
    x = np.array([[0.0], [1.0]])
    y = np.array([[0.0], [0.0], [3.0]])
    # quantiles: x = 0 on (0,1/2), 1 on (1/2,1); y = 0 on (0,2/3), 3 on (2/3,1)
    expected = np.sqrt(0.5 * 0 + (2 / 3 - 1 / 2) * 1.0 + (1 / 3) * 4.0)
    got = sliced_wasserstein(x, y, jax.random.key(0), n_projections=3)
    assert abs(float(got) - expected) < 1e-12


def test_sliced_wasserstein_of_a_translation_matches_the_sphere_average():
    # SW2^2 of a translation by v is E_theta (theta . v)^2 = |v|^2 / d
    rng = np.random.default_rng(4)
    x = rng.standard_normal((50, 3))
    v = np.array([1.0, 2.0, -2.0])
    m = 20000
    got = sliced_wasserstein(x, x + v, jax.random.key(1), n_projections=m)
    # (theta . v)^2 = |v|^2 u^2, u uniform on [-1, 1]: variance |v|^4 (1/5 - 1/9); 5 SE.
    standard_error = np.sqrt(81.0 * (1 / 5 - 1 / 9) / m)
    assert abs(float(got) ** 2 - 9.0 / 3) < 5 * standard_error


def test_sliced_wasserstein_lower_bounds_exact_w2():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((30, 4)), 1.5 * rng.standard_normal((30, 4))
    sw = float(sliced_wasserstein(x, y, jax.random.key(2), n_projections=256))
    assert 0 < sw <= wasserstein2_exact(x, y)


def test_detect_clusters_counts_separated_blobs_under_jit_and_vmap():
    rng = np.random.default_rng(6)
    centres = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    x = np.concatenate([c + 0.1 * rng.standard_normal((10, 2)) for c in centres])
    labels, k = jax.jit(detect_clusters)(x, 1.0)
    assert int(k) == 3
    assert len(set(np.asarray(labels)[:10])) == 1 and int(labels[0]) == 0
    assert int(labels[10]) == 10 and int(labels[20]) == 20
    # a chain of points 0.9 apart is one cluster at radius 1 and n clusters at radius 0.5
    chain = np.stack([0.9 * np.arange(12), np.zeros(12)], axis=1)
    counts = jax.vmap(lambda r: detect_clusters(chain, r)[1])(jnp.array([1.0, 0.5]))
    assert counts.tolist() == [1, 12]


def test_stability_ratio_of_a_rigid_contraction():
    rng = np.random.default_rng(7)
    x0, y0 = rng.standard_normal((8, 2)), rng.standard_normal((8, 2))
    factors = np.array([1.0, 0.5, 0.25])
    xs, ys = factors[:, None, None] * x0, factors[:, None, None] * y0
    np.testing.assert_allclose(stability_ratio(xs, ys), factors, atol=1e-12)
