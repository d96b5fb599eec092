"""The loss-of-definiteness event: ``smallest_pivot`` (LDL^T without pivoting) against
``numpy.linalg.eigvalsh`` on random symmetric matrices, and ``simulate_gaussian``'s
``not_psd`` status at the closed-form time of a covariance shrinking linearly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield._simulate_gaussian import smallest_pivot
from jaxdyn.meanfield.fields._base import AbstractGaussianClosed

jax.config.update("jax_enable_x64", True)


def test_smallest_pivot_is_positive_exactly_on_positive_definite_matrices():
    rng = np.random.default_rng(0)
    pivot = jax.jit(smallest_pivot)
    for d in range(1, 7):
        for _ in range(40):
            a = rng.normal(size=(d, d))
            sym = a @ a.T / d + rng.normal() * np.eye(d)  # spectra on both sides of 0
            smallest = np.linalg.eigvalsh(sym)[0]
            if abs(smallest) < 1e-9:
                continue
            assert (float(pivot(jnp.asarray(sym))) > 0) == (smallest > 0), (d, smallest)


def test_smallest_pivot_vanishes_where_the_smallest_eigenvalue_does():
    """Along ``A + s I`` the pivot's root in ``s`` (bisection) is ``-lambda_min(A)``."""
    rng = np.random.default_rng(1)
    pivot = jax.jit(smallest_pivot)
    for d in (2, 3, 5, 8):
        a = rng.normal(size=(d, d))
        sym = (a + a.T) / 2
        lo, hi = -20.0, 20.0  # indefinite at lo, positive definite at hi
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if float(pivot(jnp.asarray(sym + mid * np.eye(d)))) > 0:
                hi = mid
            else:
                lo = mid
        np.testing.assert_allclose(hi, -np.linalg.eigvalsh(sym)[0], rtol=0, atol=1e-9)


class _Shrinking(AbstractGaussianClosed):
    """``d Sigma/dt = -I``: not a congruence, so ``Sigma`` loses definiteness at ``t = 1``."""

    def velocity(self, x, tokens, *, t=0.0):
        return jnp.zeros_like(x)

    def affine_velocity(self, mean, cov, *, t=0.0):
        return jnp.zeros_like(cov), jnp.zeros_like(mean)

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        cov = jnp.asarray(cov)
        return jnp.zeros_like(jnp.asarray(mean)), -jnp.eye(cov.shape[0], dtype=cov.dtype)


@pytest.mark.heavy  # four event-stopped solves to compile
def test_not_psd_fires_at_the_closed_form_time():
    """``Sigma(t) = diag(1, 2, 4) - t I``: ``lambda_min = 1 - t`` crosses ``-p tr Sigma``
    (``tr = 7 - 3t``) at ``t* = (1 + 7p) / (1 + 3p)``."""
    for p in (1e-6, 1e-2, 0.1):
        sol = simulate_gaussian(
            _Shrinking(), jnp.zeros(3), jnp.diag(jnp.array([1.0, 2.0, 4.0])), 5.0, psd_tol=p
        )
        assert Status.name(sol.status) == "not_psd", Status.name(sol.status)
        np.testing.assert_allclose(float(sol.t_event), (1 + 7 * p) / (1 + 3 * p), rtol=1e-8)
    kept = simulate_gaussian(
        _Shrinking(), jnp.zeros(3), jnp.diag(jnp.array([1.0, 2.0, 4.0])), 0.9, psd_tol=1e-6
    )
    assert Status.name(kept.status) == "successful"  # definite until t1: no event
