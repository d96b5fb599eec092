"""The mean-field limit measured against the Gaussian closure (transformer_pde.md,
"Mean-field limit and stability").

``n`` particles sampled from ``N(alpha_0, Sigma_0)`` differ from the Gaussian ODE for two
reasons: the sample's moments are not ``(alpha_0, Sigma_0)`` (the initial sampling error, of
order ``n^{-1/2}``, which the flow then propagates) and the sample is not Gaussian, so its
moments do not evolve exactly by the closure (the dynamic error). :func:`meanfield_error`
separates them: the dynamic error compares the particles with the Gaussian ODE started from the
particles' own empirical moments, so the initial sampling error is subtracted exactly. With
:func:`antithetic_gaussian_sample` (points in pairs ``alpha_0 +- z``) the sample's odd
cumulants vanish and the dynamic error's constant shrinks by an order of magnitude, so a
closure that is wrong by a small drift stands out against the ``n^{-1/2}`` decay.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxdyn._custom_types import Key
from jaxdyn._printing import AbstractResult
from jaxdyn._status import Status, mark_nonfinite

from ._analysis import bures_wasserstein, empirical_mean_cov
from ._particles import RK4
from ._simulate_particles import simulate_particles
from .fields._base import AbstractGaussianClosed


def antithetic_gaussian_sample(
    key: Key, mean: Float[ArrayLike, " d"], cov: Float[ArrayLike, "d d"], n: int
) -> Float[Array, "n d"]:
    """``n`` (even) points ``alpha +- L z_k``, ``z_k`` standard normal, ``L L^T = cov``.

    Each half is an iid sample of ``N(mean, cov)``; the whole sample is symmetric about
    ``mean``, so its odd central moments are exactly zero.
    """
    if n < 2 or n % 2:
        raise ValueError(f"antithetic_gaussian_sample: n must be even and >= 2, got {n}")
    mean, cov = jnp.asarray(mean), jnp.asarray(cov)
    z = jax.random.normal(key, (n // 2, mean.shape[0]), dtype=jnp.result_type(mean, float))
    w, U = jnp.linalg.eigh(0.5 * (cov + cov.T))
    root = (U * jnp.sqrt(jnp.clip(w, 0.0))) @ U.T
    half = z @ root.T
    return mean + jnp.concatenate([half, -half])


class MeanFieldError(AbstractResult):
    """Result of :func:`meanfield_error` (Bures-Wasserstein distances of moments).

    Attributes:
        initial: ``BW((m_0, C_0), (alpha_0, Sigma_0))``: the sample's initial sampling error.
        total: ``BW((m_t, C_t), ODE_t(alpha_0, Sigma_0))``: particles vs the Gaussian ODE.
        dynamic: ``BW((m_t, C_t), ODE_t(m_0, C_0))``: particles vs the ODE from their own
            initial moments (initial sampling error subtracted).
        mean_gap: ``m_t - mean of ODE_t(m_0, C_0)``, signed (its average over samples
            estimates a closure bias).
        moment_gap: ``(|m_t - alpha_t|^2 + |C_t - Sigma_t|_F^2)^{1/2}`` against the same ODE:
            the dynamic error without the ``sqrt(eps)`` round-off floor of the
            Bures-Wasserstein formula (which subtracts traces), for errors below ~1e-7.
        status: worst of the particle and the Gaussian solves (``successful`` if both are).
    """

    initial: Float[Array, ""]
    total: Float[Array, ""]
    dynamic: Float[Array, ""]
    mean_gap: Float[Array, " d"]
    moment_gap: Float[Array, ""]
    status: Status


def meanfield_error(
    field: AbstractGaussianClosed,
    x0: Float[ArrayLike, "n d"],
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    steps: int = 20,
    rtol: float = 1e-10,
    atol: float = 1e-12,
) -> MeanFieldError:
    """Distances between ``n`` particles at ``t1`` and the Gaussian ODE (see the module).

    Args:
        field: a Gaussian-closed field; the particles move with ``field.velocity``, the
            Gaussian ODE is ``field.gaussian_rhs``.
        x0: the particles at ``t = 0`` (e.g. :func:`antithetic_gaussian_sample`).
        mean0: ``alpha_0`` the sample was drawn from.
        cov0: ``Sigma_0`` the sample was drawn from.
        t1: final time.
        steps: RK4 steps of the particle solve (its error is ``O((t1/steps)^4)``).
        rtol: relative tolerance of the Gaussian solves.
        atol: absolute tolerance of the Gaussian solves.

    Returns:
        A :class:`MeanFieldError`.
    """
    if not isinstance(field, AbstractGaussianClosed):
        raise ValueError(f"meanfield_error: {type(field).__name__} is not Gaussian-closed")
    x0 = jnp.asarray(x0)
    particles = simulate_particles(
        field,
        x0,
        t1,
        dt0=t1 / steps,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    )
    m0, c0 = empirical_mean_cov(x0)
    m_t, c_t = empirical_mean_cov(particles.final_x)

    means = jnp.stack([jnp.asarray(mean0, x0.dtype), m0])
    covs = jnp.stack([jnp.asarray(cov0, x0.dtype), c0])
    (ref_mean, own_mean), (ref_cov, own_cov), gaussian_status = _gaussian_pair(
        field, means, covs, t1, rtol, atol
    )
    status = particles.status
    status = Status.where(status == Status.successful, gaussian_status, status)
    return MeanFieldError(
        initial=bures_wasserstein(m0, c0, mean0, cov0),
        total=bures_wasserstein(m_t, c_t, ref_mean, ref_cov),
        dynamic=bures_wasserstein(m_t, c_t, own_mean, own_cov),
        mean_gap=m_t - own_mean,
        moment_gap=jnp.sqrt(jnp.sum((m_t - own_mean) ** 2) + jnp.sum((c_t - own_cov) ** 2)),
        status=status,
    )


def _gaussian_pair(field, means, covs, t1, rtol, atol):
    """The Gaussian ODE from two initial states at once, as one adaptive Tsit5 solve of the
    stacked state (the controller's error norm covers both): ``(means, covs, status)`` at
    ``t1``.

    Numerical choice: no events (the horizon is fixed and the weak fields of the mean-field
    check do not blow up by it; a blow-up shows as a non-finite state or ``max_steps``), so
    the compiled program holds no root finder: about half the compilation of two
    :func:`jaxdyn.meanfield.simulate_gaussian` calls with their event.
    """
    dtype = means.dtype

    def rhs(t, y, args):
        return jax.vmap(lambda m, c: field.gaussian_rhs(m, c, t=t))(*y)

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        diffrax.Tsit5(),
        t0=jnp.zeros((), dtype),
        t1=jnp.asarray(t1, dtype),
        dt0=None,
        y0=(means, covs),
        saveat=diffrax.SaveAt(t1=True),
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=16384,
        throw=False,
    )
    final_means, final_covs = sol.ys[0][-1], sol.ys[1][-1]
    status = mark_nonfinite(Status.promote(sol.result), (final_means, final_covs))
    return final_means, final_covs, status


def rk4_linear_bound(V, t1, steps, size):
    """Global error bound of RK4 on ``dm/dt = V m``: per step the remainder of the exponential
    series after degree 4, ``(h|V|)^5 / 120 e^{h|V|}``, carried by ``e^{|V| t}``."""
    v, h = float(np.linalg.norm(V, 2)), t1 / steps
    return steps * (h * v) ** 5 / 120 * np.exp(h * v) * np.exp(v * t1) * size


def closure_defect(field, x):
    """``|d Sigma/dt (particles) - d Sigma/dt (Gaussian ODE at the sample's moments)|_F`` at
    ``t = 0``: the integrand of the dynamic error."""
    m, c = empirical_mean_cov(x)
    v = field.velocity(x, x)
    dc = (x - m).T @ (v - v.mean(0)) / x.shape[0]
    return jnp.linalg.norm(dc + dc.T - field.gaussian_rhs(m, c)[1])


def near_blowup_problem(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(A, Sigma_0)`` of the near-blow-up part: ``A`` symmetric positive definite (so
    ``A + A^T`` is, and softmax with ``V = I`` blows up at ``t*``), ``Sigma_0 = I / 2``."""
    rng = np.random.default_rng(seed + 31)
    P = rng.standard_normal((d, d))
    return 0.5 * (P @ P.T) / d + 0.2 * np.eye(d), 0.5 * np.eye(d)
