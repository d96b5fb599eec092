"""``pde-energy``: the interaction energy along trajectories (monotone where the theory says),
the non-convexity witness for ``V = I, A = -I``, Sinkhorn Gaussians against Bures-Wasserstein
gradient steps (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxdyn._status import Status, status_code, status_message
from jaxdyn.meanfield import (
    _energy_geometry as eg,
    claims,
)
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnergyConfig(ExperimentConfig):
    """Softmax with ``A = -S`` (decreasing energy), ``A = +c S`` (increasing) and a random ``V``
    (no claim), ``V = I`` in the first two, ``S = C^T C + 0.2 I``; ``c = min(1/2, 1 / (2 t1
    lambda_max(S)))`` keeps the Gaussian blow-up ``t* = 1 / (c lambda_max(S))`` past ``2 t1``
    (``Sigma_0 = I / 2``)."""

    d: int = 2
    n: int = 512
    t1: float = 1.0
    steps: int = 40
    saves: int = 11
    geodesic_n: int = 2000
    geodesic_points: int = 21
    ensembles: int = 16
    bw_steps: tuple[int, ...] = (4, 8, 16, 32, 64)
    sinkhorn_t1: float = 0.5

    def validate(self) -> None:
        if self.d < 1 or min(self.n, self.geodesic_n, self.saves) < 2 or self.steps < 1:
            raise ConfigError("d, steps must be >= 1, n, geodesic_n and saves >= 2")
        if min(self.t1, self.sinkhorn_t1) <= 0 or self.ensembles < 3 or self.geodesic_points < 3:
            raise ConfigError("t1, sinkhorn_t1 positive; ensembles, geodesic_points >= 3")
        if len(self.bw_steps) < 2 or min(self.bw_steps) < 1:
            raise ConfigError(f"bw_steps needs >= 2 positive values, got {self.bw_steps}")

    @classmethod
    def quick(cls) -> dict:
        return dict(n=256, geodesic_n=600, steps=20, bw_steps=(4, 8, 16, 32), ensembles=8)


@register_experiment(
    "pde-energy",
    EnergyConfig,
    "interaction energy along trajectories, non-convexity witness, Sinkhorn vs BW gradient step",
    title="interaction energy and the Sinkhorn gradient flow",
    docs="transformer_pde.md#energy-convexity-and-the-sinkhorn-gradient-flow-_energypy",
)
def run_pde_energy(config: EnergyConfig, run: Run) -> None:
    cases = eg.energy_cases(config.d, config.t1, config.seed)
    Qs, Vs = (np.stack([w[i] for w in cases.values()]) for i in (0, 1))
    ts = np.linspace(0.0, config.t1, config.saves)
    keys = jax.random.split(jax.random.key(config.seed), config.ensembles)
    ens, statuses, solver_error, g_energies, second_moments = eg.energy_ensembles(
        Qs, Vs, np.zeros(config.d) + 0.3, 0.5 * np.eye(config.d), config.n, ts, config.steps, keys
    )
    fig, axes = new_figure(1, 3, width=4.2)
    for i, name in enumerate(cases):
        axes[0, 0].plot(ts, ens[0, i], label=f"{name}, particles")
        axes[0, 0].plot(ts, g_energies[i], "k:", lw=0.8)
    dims = {k: ("case", "time") for k in ("energy", "gaussian_energy")}
    coords = {"case": list(cases), "time": ts}
    run.save_arrays(energy=ens[0], gaussian_energy=g_energies, dims=dims, coords=coords)
    axes[0, 0].set(xlabel="t", ylabel="E(mu_t)", yscale="log", title="energy (dotted: Gaussian)")
    axes[0, 0].legend(fontsize=6)
    for name, case, increasing in (("negative", 0, False), ("positive", 1, True)):
        run.evidence(
            f"energy_{'increases' if increasing else 'decreases'}_when_AV_{name}",
            claims.energy_monotone(ens[0, case], solver_error[case], increasing=increasing),
            note=f"energy at the saves of one n = {config.n} cloud, case {list(cases)[case]}",
        )
    # The Gaussian energy is +inf where ||Sigma^{1/2} A Sigma^{1/2}|| >= 1; the ensemble mean has
    # a finite variance where E[k^2] is finite: the comparison uses those saves, t > 0.
    finite = np.isfinite(second_moments[:2])
    finite[:, 0] = False
    run.scalar("gaussian_energy_infinite_saves", int(np.sum(~np.isfinite(g_energies[:2]))))
    run.scalar("kernel_second_moment_infinite_saves", int(np.sum(~np.isfinite(second_moments[:2]))))
    if finite.any():
        samples, exact = ens[:, :2][:, finite], g_energies[:2][finite]
        run.scalar(
            "particle_energy_max_relative_gap",
            float(np.max(np.abs(samples.mean(0) - exact) / exact)),
        )
        run.evidence(
            "particle_energy_tracks_gaussian_closed_form",
            claims.energy_tracks_gaussian(
                samples, exact, np.broadcast_to(g_energies[:2, :1], finite.shape)[finite]
            ),
            note=f"mean of {config.ensembles} n = {config.n} clouds at {int(finite.sum())} saves "
            "(t > 0, two cases) where the kernel's variance is finite; alternative: E frozen",
        )
    _nonconvexity(config, run, axes[0, 1])
    _sinkhorn_vs_bw(config, run, axes[0, 2])
    run.save_figure(fig, "energy")
    for i in np.flatnonzero(np.ravel(status_code(statuses)) != status_code(Status.successful)):
        run.log(f"energy run {i}: {status_message(np.ravel(status_code(statuses))[i])}")


def _nonconvexity(config, run, ax) -> None:
    w = eg.nonconvexity_witness(
        config.d, config.geodesic_n, config.geodesic_points, config.seed + 7
    )
    run.consistency(
        "dirac_translation_second_variation", expected=w["dirac_exact"], measured=w["dirac"],
        tolerance=1e-10, basis="float64 round-off of forward-over-reverse autodiff",
        note="E''(0) = -|v|^2 < 0 (closed form) against autodiff",
    )  # fmt: skip
    run.consistency(
        "geodesic_samples_paired_by_the_optimal_map", expected=0, measured=w["mismatched"],
        basis="cyclical monotonicity of an affine monotone map (exact)",
        note=f"of the first {w['checked']} samples, those not paired with their BW-map image",
    )  # fmt: skip
    s, gauss, particles, i = w["s"], w["gaussian"], w["particles"], w["at"]
    run.save_arrays(
        geodesic_e2_particles=particles, geodesic_e2_gaussian=gauss,
        dims={"geodesic_e2_particles": ("s",), "geodesic_e2_gaussian": ("s",)}, coords={"s": s},
    )  # fmt: skip
    run.scalar("min_second_variation_gaussian", float(gauss.min()))
    run.evidence(
        "gaussian_geodesic_second_variation_negative",
        claims.geodesic_nonconvexity(gauss, float(np.max(np.abs(gauss)))),
        note="non-convexity witness for V = I, A = -I along a BW geodesic",
    )
    run.consistency(
        "particle_second_variation_equals_pairwise_formula", expected=w["pairwise"],
        measured=float(particles[i]), tolerance=1e-10, relative=True, basis="float64 round-off",
        note="autodiff E''(s) vs the mean of k_ij (f_ij'^2 + f_ij''), f_ij = x_j(s)^T A x_i(s)",
    )  # fmt: skip
    run.consistency(
        "particle_second_variation_matches_gaussian", expected=float(gauss[i]),
        measured=float(particles[i]), tolerance=w["allowed"],
        basis="4 standard errors of the V-statistic (Hajek) plus its diagonal bias",
        note=f"at s = {s[i]:.2f}, n = {config.geodesic_n} matched samples",
    )  # fmt: skip
    ax.plot(s, gauss, label="Gaussian closed form")
    ax.plot(s, particles, "--", label=f"particles (n={config.geodesic_n})")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set(xlabel="geodesic parameter s", ylabel="d^2/ds^2 E(mu_s)", title="V = I, A = -I")
    ax.legend(fontsize=7)


def _sinkhorn_vs_bw(config, run, ax) -> None:
    A, cov0 = eg.sinkhorn_problem(config.d, config.seed + 11)
    run.evidence(
        "sinkhorn_rhs_equals_bw_gradient_of_half_ot",
        claims.sinkhorn_gradient_flow(float(eg.sinkhorn_gradient_gap(A, cov0, A))),
        note="V = A symmetric, max |dSigma/dt - BW gradient| relative to max |dSigma/dt|",
    )
    r = eg.sinkhorn_vs_bw_steps(A, cov0, config.sinkhorn_t1, config.bw_steps)
    steps, errors, local = r["steps"], r["errors"], r["local"]
    run.save_arrays(
        bw_errors=errors, sinkhorn_energy_path=r["energy_path"],
        dims={"bw_errors": ("bw_steps",), "sinkhorn_energy_path": ("sinkhorn_time",)},
        coords={"bw_steps": steps, "sinkhorn_time": np.linspace(0, config.sinkhorn_t1, 11)},
    )  # fmt: skip
    run.scalar("bw_fitted_order_all_steps", float(r["order"]))
    run.consistency(
        "bw_gradient_steps_converge_to_sinkhorn_ode_first_order",
        expected=1.0,
        measured=float(local[-1]),
        passed=bool(abs(local[-1] - 1.0) < 0.5 and abs(local[-1] - 1.0) <= abs(local[0] - 1.0)),
        basis="explicit BW gradient steps are a first-order scheme for the same flow",
        note="local order at the two largest m: rounds to 1 and lies closer to 1 than at the "
        f"two smallest: {np.round(local, 4).tolist()}",
    )
    run.evidence(
        "half_ot_decreases_along_sinkhorn_flow",
        claims.half_ot_decreases(r["energy_path"]),
        note="F(Sigma(t)) along the ODE with V = A",
    )
    ax.loglog(steps, errors, "o-", label=f"BW steps (order {r['order']:.2f})")
    ax.loglog(steps, errors[0] * steps[0] / steps, "k--", lw=0.8, label="1/m")
    ax.set(xlabel="BW gradient steps m over [0, t]", ylabel="|Sigma_BW - Sigma_ODE|_F")
    ax.legend(fontsize=7)
