"""``pde-energy``'s geometry panels: the non-convexity witness of the interaction energy along
Wasserstein geodesics and Sinkhorn Gaussians against Bures-Wasserstein gradient steps."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.evidence import ErrorModel, at_most, monotone, within
from jaxdyn.meanfield import interaction_energy, simulate_gaussian
from jaxdyn.meanfield._analysis import bures_wasserstein_map, optimal_assignment
from jaxdyn.meanfield._energy import (
    bures_wasserstein_geodesic,
    bures_wasserstein_gradient,
    bures_wasserstein_step,
    gaussian_interaction_energy,
    gaussian_sinkhorn_energy,
    geodesic_second_variation,
)
from jaxdyn.meanfield._vstatistics import second_variation_and_allowed_gap
from jaxdyn.meanfield.fields import Sinkhorn, Softmax
from jaxdyn.runs import Run, negative_control


def nonconvexity(config, run: Run, ax) -> None:
    """Second variation of E along W2 geodesics for V = I, A = -I (transformer_pde.md)."""
    d = config.d
    att = Softmax(Q=-np.sqrt(d) * np.eye(d), K=np.eye(d), V=np.eye(d))  # A = -I

    def energy(x):
        return interaction_energy(att, x)

    # 1) a translated Dirac: E(s) = 1/2 exp(-s^2 |v|^2), E''(0) = -|v|^2
    v = np.linspace(1.0, 0.5, d)[None, :]
    e2_dirac = float(geodesic_second_variation(energy, np.zeros((1, d)), v, 0.0))
    run.consistency(
        "dirac_translation_second_variation",
        expected=-float(np.sum(v**2)),
        measured=e2_dirac,
        tolerance=1e-10,
        basis="float64 round-off of forward-over-reverse autodiff",
        note="E''(0) = -|v|^2 < 0 (closed form) against autodiff",
    )
    # 2) a Bures-Wasserstein geodesic between two narrow Gaussians: particles vs closed form
    m0, m1 = np.zeros(d), np.linspace(1.5, 0.0, d)
    c0 = 0.05 * np.eye(d)
    c1 = 0.1 * np.diag(np.linspace(1.0, 0.3, d))
    T = np.asarray(bures_wasserstein_map(c0, c1))
    z = np.asarray(jax.random.normal(jax.random.key(config.seed + 7), (config.geodesic_n, d)))
    x0 = m0 + z @ np.linalg.cholesky(c0).T
    x1 = m1 + (x0 - m0) @ T.T  # the optimal map, applied to the samples
    # x1[i] is the optimal partner of x0[i]: the assignment of a monotone affine map is the
    # identity, on every subset of the samples too (cyclical monotonicity); checked by the
    # exact assignment solver on the first 300
    k = min(config.geodesic_n, 300)
    mismatched = int(np.sum(optimal_assignment(x0[:k], x1[:k]) != np.arange(k)))
    run.consistency(
        "geodesic_samples_paired_by_the_optimal_map",
        expected=0,
        measured=mismatched,
        tolerance=0.0,
        basis="cyclical monotonicity of an affine monotone map (exact)",
        note=f"of the first {k} samples, those whose optimal-assignment partner is not their "
        "image under the BW map",
    )
    ss = np.linspace(0.0, 1.0, config.geodesic_points)
    particle_e2 = np.asarray(
        jax.jit(jax.vmap(lambda s: geodesic_second_variation(energy, x0, x1, s)))(ss)
    )

    def gaussian_energy_at(s):
        m, c = bures_wasserstein_geodesic(m0, c0, m1, c1, s)
        return gaussian_interaction_energy(att, m, c)

    gauss_e2 = np.asarray(jax.jit(jax.vmap(jax.grad(jax.grad(gaussian_energy_at))))(ss))
    run.save_arrays(geodesic_s=ss, geodesic_e2_particles=particle_e2, geodesic_e2_gaussian=gauss_e2)
    run.scalar("min_second_variation_gaussian", float(gauss_e2.min()))
    run.evidence(
        "gaussian_geodesic_second_variation_negative",
        _nonconvexity_evidence(gauss_e2, float(np.max(np.abs(gauss_e2)))),
        note="non-convexity witness for V = I, A = -I along a BW geodesic",
    )
    i = int(np.argmin(gauss_e2))
    pairwise_mean, allowed = second_variation_and_allowed_gap(att.A(), x0, x1, ss[i])
    run.consistency(
        "particle_second_variation_equals_pairwise_formula",
        expected=float(pairwise_mean),
        measured=float(particle_e2[i]),
        tolerance=1e-10,
        relative=True,
        basis="float64 round-off",
        note="autodiff E''(s) vs the mean of k_ij (f_ij'^2 + f_ij''), f_ij = x_j(s)^T A x_i(s)",
    )
    run.consistency(
        "particle_second_variation_matches_gaussian",
        expected=float(gauss_e2[i]),
        measured=float(particle_e2[i]),
        tolerance=float(allowed),
        basis="4 standard errors of the V-statistic (Hajek) plus its diagonal bias",
        note=f"at s = {ss[i]:.2f}, n = {config.geodesic_n} matched samples: the Gaussian closed "
        "form along the geodesic against its Monte-Carlo estimate",
    )
    ax.plot(ss, gauss_e2, label="Gaussian closed form")
    ax.plot(ss, particle_e2, "--", label=f"particles (n={config.geodesic_n})")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("geodesic parameter s")
    ax.set_ylabel("d^2/ds^2 E(mu_s)")
    ax.set_title("non-convexity witness, V = I, A = -I", fontsize=9)
    ax.legend(fontsize=7)


def _nonconvexity_evidence(second_variation, scale):
    return at_most(
        "the interaction energy (V = I, A = -I) is not geodesically convex: E'' < 0 somewhere "
        "along a Bures-Wasserstein geodesic",
        measured=float(np.min(second_variation)),
        limit=0.0,
        error_model=ErrorModel.rounding(1e-10 * scale, basis="float64 round-off of autodiff E''"),
    )


@negative_control("pde-energy", "gaussian_geodesic_second_variation_negative")
def _second_variation_of_a_convex_energy():
    # E = 1/2 int int exp(x^T A y) with A = +I along a translated Dirac: E''(s) = |v|^2 exp(..)
    s = np.linspace(0.0, 1.0, 5)
    return _nonconvexity_evidence(np.exp(s**2), 1.0)


@jax.jit
def _sinkhorn_gradient_gap(A, cov0, V):
    d = cov0.shape[0]
    att = Sinkhorn(Q=A, K=jnp.eye(d), V=V)
    _, rhs = att.gaussian_rhs(jnp.zeros(d), cov0)
    grad = bures_wasserstein_gradient(lambda c: gaussian_sinkhorn_energy(A, c), cov0)
    return jnp.max(jnp.abs(rhs - grad)) / jnp.max(jnp.abs(rhs))


def _sinkhorn_gradient_evidence(A, cov0, *, V):
    gap = float(_sinkhorn_gradient_gap(jnp.asarray(A), jnp.asarray(cov0), jnp.asarray(V)))
    return within(
        "Sinkhorn attention with V = A symmetric is the Bures-Wasserstein gradient descent of "
        "1/2 OT_eps(mu, mu) on Gaussians",
        prediction=0.0,
        measured=gap,
        error_model=ErrorModel.rounding(1e-10, basis="float64 round-off, relative"),
    )


@negative_control("pde-energy", "sinkhorn_rhs_equals_bw_gradient_of_half_ot")
def _sinkhorn_ascent():
    # V = -A: the gradient ascent of 1/2 OT_eps (the sign an earlier version of the notes gave)
    A = np.array([[0.4, 0.1], [0.1, -0.2]])
    return _sinkhorn_gradient_evidence(A, np.array([[1.0, 0.2], [0.2, 0.7]]), V=-A)


def _half_ot_monotone_evidence(path):
    path = np.asarray(path, dtype=float)
    return monotone(
        "1/2 OT_eps(mu, mu) decreases along the Sinkhorn flow with V = A",
        path,
        error=1e-9 * np.abs(path) + 1e-12,
        basis="100 rtol (1e-11) of the Gaussian solve times |F|",
        increasing=False,
    )


@negative_control("pde-energy", "half_ot_decreases_along_sinkhorn_flow")
def _half_ot_along_the_ascent():
    return _half_ot_monotone_evidence(-1.0 + 0.1 * np.linspace(0.0, 0.5, 11))


def sinkhorn_vs_bw(config, run: Run, ax) -> None:
    """Sinkhorn Gaussian ODE with V = A (symmetric) vs Bures-Wasserstein gradient steps of
    F = 1/2 OT_eps(N(0, Sigma), N(0, Sigma)) (the sign: see jaxdyn.meanfield._energy)."""
    d = config.d
    rng = np.random.default_rng(config.seed + 11)
    B = rng.standard_normal((d, d))
    A = 0.3 * (B + B.T)
    G = rng.standard_normal((d, d))
    cov0 = G @ G.T / d + 0.5 * np.eye(d)
    att = Sinkhorn(Q=A, K=np.eye(d), V=A)

    def F(c):
        return gaussian_sinkhorn_energy(A, c)

    run.evidence(
        "sinkhorn_rhs_equals_bw_gradient_of_half_ot",
        _sinkhorn_gradient_evidence(A, cov0, V=A),
        note="V = A symmetric, max |dSigma/dt - BW gradient| relative to max |dSigma/dt|",
    )
    tau = config.sinkhorn_t1
    # No events: Sinkhorn Gaussians never blow up (|phi| < 1, docs) and the flow is a
    # congruence of Sigma_0, so the solve needs no root finder and no eigvalsh per step.
    sol = simulate_gaussian(
        att, np.zeros(d), cov0, tau, ts=np.linspace(0, tau, 11), rtol=1e-11, atol=1e-13,
        blowup_trace=None, psd_tol=None,
    )  # fmt: skip
    target = np.asarray(sol.final_cov)
    energy_path = np.asarray(jax.jit(jax.vmap(F))(sol.covs))

    def bw_descent(m):
        h = tau / m

        def body(_, c):
            return bures_wasserstein_step(F, c, h)

        return jax.lax.fori_loop(0, m, body, jnp.asarray(cov0))

    steps = np.array(config.bw_steps)
    finals = jax.jit(jax.vmap(bw_descent))(jnp.asarray(steps))
    errors = np.array([float(jnp.linalg.norm(c - target)) for c in finals])
    order = -fit_power_law(steps, errors).slope
    # Local orders between consecutive step counts: 1 + O(1/m) for a first-order scheme. They
    # must round to 1 (not 0 or 2) at the finest pair and approach 1 as m grows (the
    # asymptotic regime); the fitted slope over all m is reported as well.
    local = np.log(errors[:-1] / errors[1:]) / np.log(steps[1:] / steps[:-1])
    run.save_arrays(bw_steps=steps, bw_errors=errors, sinkhorn_energy_path=energy_path)
    run.scalar("bw_fitted_order_all_steps", float(order))
    run.consistency(
        "bw_gradient_steps_converge_to_sinkhorn_ode_first_order",
        expected=1.0,
        measured=float(local[-1]),
        passed=bool(abs(local[-1] - 1.0) < 0.5 and abs(local[-1] - 1.0) <= abs(local[0] - 1.0)),
        basis="explicit BW gradient steps are a first-order scheme for the same flow",
        note="local order of |Sigma_BW(m steps) - Sigma_ODE(t)| at the two largest m; it "
        "must round to 1 and lie closer to 1 than at the two smallest m: "
        f"{np.round(local, 4).tolist()}",
    )
    run.evidence(
        "half_ot_decreases_along_sinkhorn_flow",
        _half_ot_monotone_evidence(energy_path),
        note="F(Sigma(t)) along the ODE with V = A",
    )
    ax.loglog(steps, errors, "o-", label=f"BW steps (order {order:.2f})")
    ax.loglog(steps, errors[0] * steps[0] / steps, "k--", lw=0.8, label="1/m")
    ax.set_xlabel("BW gradient steps m over [0, t]")
    ax.set_ylabel("|Sigma_BW - Sigma_Sinkhorn ODE|_F")
    ax.set_title("Sinkhorn Gaussians = BW gradient flow", fontsize=9)
    ax.legend(fontsize=7)
