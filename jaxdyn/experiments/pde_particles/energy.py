"""``pde-energy``: the interaction energy along trajectories (monotone where the theory says),
the non-convexity witness for ``V = I, A = -I``, Sinkhorn Gaussians against Bures-Wasserstein
gradient steps (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status, status_code, status_message
from jaxdyn.meanfield import (
    Softmax,
    fixed_step_particles,
    gaussian_interaction_energy,
    simulate_gaussian,
)
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment

from ._energy_geometry import nonconvexity, sinkhorn_vs_bw
from ._vstatistics import energy_and_allowed_gap


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnergyConfig(ExperimentConfig):
    """Interaction energy, non-convexity witness, Sinkhorn Gaussians vs BW gradient steps.

    Energy: softmax with ``A = -S`` (decreasing energy), ``A = +c S`` (increasing) and a
    random ``V`` (no monotonicity claimed), ``V = I`` in the first two; ``S = C^T C + 0.2 I``.
    With ``A`` positive definite the Gaussian flow blows up at
    ``t* = 1 / lambda_max(Sigma_0^{1/2} (A + A^T) Sigma_0^{1/2}) = 1 / (c lambda_max(S))``
    (``Sigma_0 = I / 2``), so ``c = min(1/2, 1 / (2 t1 lambda_max(S)))`` keeps ``t* >= 2 t1``:
    the increasing case is observed before, not across, its blow-up.
    """

    d: int = 2
    n: int = 512
    t1: float = 1.0
    steps: int = 40
    saves: int = 11
    geodesic_n: int = 2000
    geodesic_points: int = 21
    bw_steps: tuple[int, ...] = (4, 8, 16, 32, 64)
    sinkhorn_t1: float = 0.5

    def validate(self) -> None:
        if self.d < 1 or self.n < 2 or self.geodesic_n < 2:
            raise ConfigError("d must be >= 1, n and geodesic_n >= 2")
        if not self.t1 > 0 or not self.sinkhorn_t1 > 0 or self.steps < 1:
            raise ConfigError("t1, sinkhorn_t1 must be positive and steps >= 1")
        if self.saves < 2 or self.geodesic_points < 3:
            raise ConfigError("saves must be >= 2 and geodesic_points >= 3")
        if len(self.bw_steps) < 2 or min(self.bw_steps) < 1:
            raise ConfigError(f"bw_steps needs >= 2 positive values, got {self.bw_steps}")

    @classmethod
    def quick(cls) -> dict:
        return {
            "n": 256,
            "geodesic_n": 600,
            "steps": 20,
            "bw_steps": (4, 8, 16, 32),
        }


@register_experiment(
    "pde-energy",
    EnergyConfig,
    "interaction energy along trajectories, non-convexity witness, Sinkhorn vs BW gradient step",
)
def run_pde_energy(config: EnergyConfig, run: Run) -> None:
    d = config.d
    rng = np.random.default_rng(config.seed)
    C = rng.standard_normal((d, d)) / np.sqrt(d)
    S = C.T @ C + 0.2 * np.eye(d)
    c = min(0.5, 1.0 / (2.0 * config.t1 * float(np.linalg.eigvalsh(S)[-1])))
    cases = {
        "decreasing (A = -S, V = I)": (-S, np.eye(d)),
        f"increasing (A = {c:.3g} S, V = I)": (c * S, np.eye(d)),
        "random V": (-S, rng.standard_normal((d, d))),
    }
    alpha0, cov0 = np.zeros(d) + 0.3, 0.5 * np.eye(d)
    ts = np.linspace(0.0, config.t1, config.saves)
    x0 = alpha0 + np.sqrt(0.5) * np.asarray(
        jax.random.normal(jax.random.key(config.seed), (config.n, d))
    )
    Qs = np.stack([np.sqrt(d) * A for A, _ in cases.values()])
    Vs = np.stack([V for _, V in cases.values()])

    def trajectory(Q, V):
        att = Softmax(Q=Q, K=jnp.eye(d), V=V)
        sol = fixed_step_particles(
            att,
            x0,
            config.t1,
            config.steps,
            ts=ts,
            save_fn=lambda t, x: energy_and_allowed_gap(att, x),
        )
        gsol = simulate_gaussian(att, alpha0, cov0, config.t1, ts=ts, rtol=1e-10, atol=1e-12)
        g_energy = jax.vmap(lambda m, c: gaussian_interaction_energy(att, m, c))(
            gsol.means, gsol.covs
        )
        # E[k^2] with k = exp(x^T A y) / 2 is finite iff the energy of A -> 2 A is
        scaled = Softmax(Q=2 * Q, K=jnp.eye(d), V=V)
        second_moment = jax.vmap(lambda m, c: gaussian_interaction_energy(scaled, m, c))(
            gsol.means, gsol.covs
        )
        return sol.xs, g_energy, second_moment, sol.status

    (energies, allowed), g_energies, second_moments, statuses = jax.jit(jax.vmap(trajectory))(
        Qs, Vs
    )
    second_moments = np.asarray(second_moments)
    energies, allowed, g_energies = map(np.asarray, (energies, allowed, g_energies))
    fig, axes = new_figure(1, 3, width=4.2)
    for i, name in enumerate(cases):
        axes[0, 0].plot(ts, energies[i], label=f"{name}, particles")
        axes[0, 0].plot(ts, g_energies[i], "k:", lw=0.8)
        run.save_arrays(
            **{f"energy_case{i}": energies[i], f"gaussian_energy_case{i}": g_energies[i]}
        )
    axes[0, 0].set_xlabel("t")
    axes[0, 0].set_ylabel("E(mu_t)")
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_title("interaction energy (dotted: Gaussian closed form)", fontsize=9)
    axes[0, 0].legend(fontsize=6)
    _energy_checks(config, run, energies, allowed, g_energies, second_moments)
    nonconvexity(config, run, axes[0, 1])
    sinkhorn_vs_bw(config, run, axes[0, 2])
    run.save_figure(fig, "energy")
    for i, s in enumerate(np.atleast_1d(status_code(statuses))):
        if s != status_code(Status.successful):
            run.log(f"energy case {i}: {status_message(s)}")


def _energy_checks(config, run, energies, allowed, g_energies, second_moments) -> None:
    """Monotone energy for ``A V`` negative / positive definite, and the particle energy
    against the Gaussian closed form within the V-statistic's error model."""
    inc = np.diff(energies[0])
    dec = np.diff(energies[1])
    run.check(
        "energy_decreases_when_AV_negative",
        expected=0.0,
        measured=float(max(inc.max(), 0.0)),
        tolerance=1e-12 * energies[0, 0],
        note="largest increase between saves, A = -S, V = I (S = C^T C + 0.2 I)",
    )
    run.check(
        "energy_increases_when_AV_positive",
        expected=0.0,
        measured=float(max(-dec.min(), 0.0)),
        tolerance=1e-12 * energies[1, 0],
        note="largest decrease between saves, A = +c S, V = I (c keeps the blow-up past 2 t1)",
    )
    # The Gaussian energy is +inf where the bilinear exponent outgrows the Gaussian tails
    # (||Sigma^{1/2} A Sigma^{1/2}|| >= 1). The allowed gap is 4 standard errors estimated from
    # the particles, which exist only where the kernel's variance does (E[k^2]: A -> 2 A
    # finite); the comparison uses those saves. Near that boundary the tails are heavy and 256
    # particles can under-estimate the standard error: the check can then fail (e.g. seeds 2
    # and 4 at --quick), which is reported, not hidden.
    finite = np.isfinite(second_moments[:2])
    gap = np.abs(energies[:2] - g_energies[:2])[finite]
    run.scalar("gaussian_energy_infinite_saves", int(np.sum(~np.isfinite(g_energies[:2]))))
    run.scalar("kernel_second_moment_infinite_saves", int(np.sum(~finite)))
    if finite.any():
        run.scalar("particle_energy_max_relative_gap", float(np.max(gap / g_energies[:2][finite])))
    run.check(
        "particle_energy_tracks_gaussian_closed_form",
        expected="<= 1",
        measured=float(np.max(gap / allowed[:2][finite])) if finite.any() else float("nan"),
        passed=bool(finite.any() and np.all(gap <= allowed[:2][finite])),
        note=f"max over t of |E_n - E| / (4 SE + diagonal bias) of the n = {config.n} particle "
        f"V-statistic, estimated at each save from the particles, over the {int(finite.sum())} "
        f"of {finite.size} saves where the kernel's variance is finite",
    )
