"""The measurements of the particle experiments (jaxdyn.meanfield._particle_measures) against
independent computations: brute force, the sample they stand for, closed forms."""

import itertools

import jax
import numpy as np
import pytest

from jaxdyn.meanfield import _particle_measures as pm, empirical_mean_cov
from jaxdyn.meanfield._meanfield_limit import antithetic_gaussian_sample


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_w1_is_the_best_assignment_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 3)) + 0.5
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    best = min(cost[np.arange(5), list(p)].mean() for p in itertools.permutations(range(5)))
    assert pm.wasserstein1_exact(x, y) == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_a_nested_sample_is_the_n_point_sample_repeated(n):
    """The static-shape sample of every n has the moments of the n-point antithetic sample."""
    key, mean, cov = jax.random.key(3), np.array([0.3, -0.2]), np.array([[1.0, 0.3], [0.3, 0.5]])
    x = pm.nested_sample(key, mean, cov, n, 16)
    full = np.asarray(antithetic_gaussian_sample(key, mean, cov, 16))
    small = np.concatenate([full[: n // 2], full[8 : 8 + n // 2]])
    assert x.shape == (16, 2)
    assert sorted(map(tuple, np.unique(np.asarray(x), axis=0))) == sorted(map(tuple, small))
    for a, b in zip(empirical_mean_cov(x), empirical_mean_cov(small), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-14)


def test_fitted_slope_recovers_a_power_law_and_skips_zeros():
    n = np.repeat([16.0, 64.0, 256.0], 3)
    assert pm.fitted_slope(n, 2.0 * n**-0.5) == pytest.approx(-0.5, abs=1e-12)
    assert np.isnan(pm.fitted_slope(n, np.where(n > 16, 0.0, 1.0)))


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="unknown attention variant"):
        pm.variant_field("cosine", np.eye(2), np.eye(2), np.eye(2))
