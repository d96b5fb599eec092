"""The geometry of the interaction energy (transformer_pde.md, "Energy, convexity and the
Sinkhorn gradient flow"): the non-convexity witness along Wasserstein geodesics for
``V = I, A = -I``, and Sinkhorn Gaussians against Bures-Wasserstein gradient steps of
``F = 1/2 OT_eps(N(0, Sigma), N(0, Sigma))``. Numbers in, numbers out."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._numerics import fit_power_law

from ._analysis import bures_wasserstein_map, optimal_assignment
from ._energy import (
    bures_wasserstein_geodesic,
    bures_wasserstein_gradient,
    bures_wasserstein_step,
    gaussian_interaction_energy,
    gaussian_sinkhorn_energy,
    geodesic_second_variation,
    interaction_energy,
)
from ._simulate_gaussian import simulate_gaussian
from ._vstatistics import second_variation_and_allowed_gap
from .fields import Sinkhorn, Softmax


def nonconvexity_witness(d: int, n: int, points: int, seed: int) -> dict:
    """``E''`` along geodesics for ``A = -I, V = I``: a translated Dirac (closed form
    ``E''(0) = -|v|^2``), and a Bures-Wasserstein geodesic between two narrow Gaussians, in
    closed form and on ``n`` samples paired by the optimal map (the pairing checked by the
    exact assignment on the first 300; a monotone affine map's assignment is the identity on
    every subset); at the closed form's minimum, the particles' ``E''`` by the pairwise
    formula and the V-statistic's allowed gap to the closed form."""
    field = Softmax(Q=-np.sqrt(d) * np.eye(d), K=np.eye(d), V=np.eye(d))  # A = -I

    def energy(x):
        return interaction_energy(field, x)

    v = np.linspace(1.0, 0.5, d)[None, :]
    out = {
        "dirac": float(geodesic_second_variation(energy, np.zeros((1, d)), v, 0.0)),
        "dirac_exact": -float(np.sum(v**2)),
    }
    m0, m1 = np.zeros(d), np.linspace(1.5, 0.0, d)
    c0, c1 = 0.05 * np.eye(d), 0.1 * np.diag(np.linspace(1.0, 0.3, d))
    T = np.asarray(bures_wasserstein_map(c0, c1))
    z = np.asarray(jax.random.normal(jax.random.key(seed), (n, d)))
    x0 = m0 + z @ np.linalg.cholesky(c0).T
    x1 = m1 + (x0 - m0) @ T.T
    k = min(n, 300)
    out["checked"] = k
    out["mismatched"] = int(np.sum(optimal_assignment(x0[:k], x1[:k]) != np.arange(k)))
    ss = np.linspace(0.0, 1.0, points)
    e2 = jax.jit(jax.vmap(lambda s: geodesic_second_variation(energy, x0, x1, s)))(ss)

    def gaussian_energy_at(s):
        m, c = bures_wasserstein_geodesic(m0, c0, m1, c1, s)
        return gaussian_interaction_energy(field, m, c)

    gauss = np.asarray(jax.jit(jax.vmap(jax.grad(jax.grad(gaussian_energy_at))))(ss))
    i = int(np.argmin(gauss))
    pairwise, allowed = second_variation_and_allowed_gap(field.A(), x0, x1, ss[i])
    out.update(s=ss, particles=np.asarray(e2), gaussian=gauss, at=i)
    out.update(pairwise=float(pairwise), allowed=float(allowed))
    return out


@jax.jit
def sinkhorn_gradient_gap(A, cov0, V):
    """``max |dSigma/dt - BW gradient of 1/2 OT_eps|`` relative to ``max |dSigma/dt|`` for
    Sinkhorn attention on ``N(0, cov0)``."""
    d = cov0.shape[0]
    _, rhs = Sinkhorn(Q=A, K=jnp.eye(d), V=V).gaussian_rhs(jnp.zeros(d), cov0)
    grad = bures_wasserstein_gradient(lambda c: gaussian_sinkhorn_energy(A, c), cov0)
    return jnp.max(jnp.abs(rhs - grad)) / jnp.max(jnp.abs(rhs))


def sinkhorn_problem(d: int, seed: int):
    """A random symmetric ``A = 0.3 (B + B^T)`` and ``Sigma_0 = G G^T / d + I/2``."""
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((d, d))
    G = rng.standard_normal((d, d))
    return 0.3 * (B + B.T), G @ G.T / d + 0.5 * np.eye(d)


def sinkhorn_vs_bw_steps(A, cov0, tau: float, steps) -> dict:
    """The Sinkhorn Gaussian ODE with ``V = A`` to ``tau`` against ``m`` explicit BW gradient
    steps of ``F`` for each ``m`` in ``steps``: ``F`` along the ODE, the errors, their fitted
    order and the local orders between consecutive ``m`` (``1 + O(1/m)`` for a first-order
    scheme). No events: Sinkhorn Gaussians never blow up (``|phi| < 1``)."""
    d = cov0.shape[0]

    def F(c):
        return gaussian_sinkhorn_energy(A, c)

    sol = simulate_gaussian(
        Sinkhorn(Q=A, K=np.eye(d), V=A), np.zeros(d), cov0, tau, ts=np.linspace(0, tau, 11),
        rtol=1e-11, atol=1e-13, blowup_trace=None, psd_tol=None,
    )  # fmt: skip
    target = np.asarray(sol.final_cov)

    def descent(m):
        body = lambda _, c: bures_wasserstein_step(F, c, tau / m)  # noqa: E731
        return jax.lax.fori_loop(0, m, body, jnp.asarray(cov0))

    steps = np.array(steps)
    finals = jax.jit(jax.vmap(descent))(jnp.asarray(steps))
    errors = np.array([float(jnp.linalg.norm(c - target)) for c in finals])
    return {
        "energy_path": np.asarray(jax.jit(jax.vmap(F))(sol.covs)),
        "steps": steps,
        "errors": errors,
        "order": -fit_power_law(steps, errors).slope,
        "local": np.log(errors[:-1] / errors[1:]) / np.log(steps[1:] / steps[:-1]),
    }


def energy_cases(d: int, t1: float, seed: int) -> dict:
    """Softmax weights ``(Q, V)`` whose energy decreases (``A = -S, V = I``), increases
    (``A = c S, V = I``) and a random ``V`` (no claim), ``S = C^T C + 0.2 I``;
    ``c = min(1/2, 1 / (2 t1 lambda_max(S)))`` keeps the Gaussian blow-up
    ``t* = 1 / (c lambda_max(S))`` (``Sigma_0 = I / 2``) past ``2 t1``."""
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((d, d)) / np.sqrt(d)
    S = C.T @ C + 0.2 * np.eye(d)
    c = min(0.5, 1.0 / (2.0 * t1 * float(np.linalg.eigvalsh(S)[-1])))
    return {
        "decreasing (A = -S, V = I)": (-np.sqrt(d) * S, np.eye(d)),
        f"increasing (A = {c:.3g} S, V = I)": (np.sqrt(d) * (c * S), np.eye(d)),
        "random V": (-np.sqrt(d) * S, rng.standard_normal((d, d))),
    }


def energy_ensembles(Qs, Vs, alpha0, cov0, n, ts, steps, keys):
    """The interaction energy at ``ts`` of ``n`` particles from ``N(alpha0, cov0)`` per key
    and weight pair (``(keys, cases, saves)``, with statuses), twice the RK4 step-doubling
    difference on the first key, the Gaussian closed form along the Gaussian ODE and the
    kernel's second moment (the energy of ``2 A``: the ensemble mean's variance is finite
    where it is). No events in the Gaussian solve: a blow-up shows as a non-finite energy."""
    from ._particle_measures import rk4_flow

    d = alpha0.shape[0]

    def particles(Q, V, key, steps):
        field = Softmax(Q=Q, K=jnp.eye(d), V=V)
        x0 = alpha0 + np.sqrt(0.5) * jax.random.normal(key, (n, d))
        save = lambda t, x: interaction_energy(field, x)  # noqa: E731
        sol = rk4_flow(field, x0, ts[-1], steps, ts=ts, save_fn=save)
        return sol.xs, sol.status

    def gaussian(Q, V):
        sol = simulate_gaussian(
            Softmax(Q=Q, K=jnp.eye(d), V=V), alpha0, cov0, ts[-1], ts=ts, rtol=1e-10, atol=1e-12,
            blowup_trace=None, psd_tol=None,
        )  # fmt: skip
        return tuple(
            jax.vmap(lambda m, c, s=s: gaussian_interaction_energy(
                Softmax(Q=s * Q, K=jnp.eye(d), V=V), m, c))(sol.means, sol.covs)
            for s in (1, 2)
        )  # fmt: skip

    over_cases = jax.vmap(particles, in_axes=(0, 0, None, None))
    over_both = jax.vmap(over_cases, in_axes=(None, None, 0, None))
    ens, statuses = jax.jit(over_both, static_argnums=3)(Qs, Vs, keys, steps)
    fine, _ = jax.jit(over_cases, static_argnums=3)(Qs, Vs, keys[0], 2 * steps)
    ens, fine = np.asarray(ens), np.asarray(fine)
    g, second = map(np.asarray, jax.jit(jax.vmap(gaussian))(Qs, Vs))
    error = 2.0 * np.abs(ens[0] - fine) + 1e-12 * np.abs(fine)
    return ens, statuses, error, g, second
