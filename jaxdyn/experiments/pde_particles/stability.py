"""``pde-stability``: the stability estimate ``W_2(mu_t, nu_t) <= C(t, R_0) W_2(mu_0, nu_0)``
with its constant computed (a priori and along the trajectory) against the measured constants,
and the Lipschitz constants of softmax and Sinkhorn attention measured against the bounds
(docs/transformer_pde.md, "Stability and regularity")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.meanfield import (
    Sinkhorn,
    Softmax,
    field_lipschitz_constants,
    fixed_step_particles,
    flow_jacobian_norms,
    softmax_lipschitz_bounds,
    softmax_stability_constant,
    wasserstein2_exact,
)
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment

from ._common import random_weights


@dataclasses.dataclass(frozen=True, kw_only=True)
class StabilityConfig(ExperimentConfig):
    """Stability constants and Lipschitz constants of the velocity fields.

    ``clouds`` random clouds of ``n`` tokens uniform in the disc of radius ``radius0``; each is
    paired with perturbed copies at the relative scales ``pair_scales``; the local constant is
    the spectral norm of the flow's Jacobian. Lipschitz constants: clouds uniform in the disc
    of each radius in ``lipschitz_radii``, softmax and Sinkhorn with the same ``A``, ``V = I``.
    """

    d: int = 2
    n: int = 48
    clouds: int = 4
    radius0: float = 1.0
    weight_scale: float = 0.5
    weight_seed: int = 3
    t1: float = 1.0
    saves: int = 6
    steps: int = 40
    pair_scales: tuple[float, ...] = (1e-3, 0.1, 0.5)
    lipschitz_radii: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)
    lipschitz_clouds: int = 3
    sinkhorn_iterations: int = 200

    def validate(self) -> None:
        if self.d < 1 or self.n < 2 or self.clouds < 1 or self.lipschitz_clouds < 1:
            raise ConfigError("d, clouds and lipschitz_clouds must be >= 1 and n >= 2")
        for name in ("radius0", "weight_scale", "t1"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.saves < 2 or self.steps < 1 or self.sinkhorn_iterations < 1:
            raise ConfigError("saves must be >= 2, steps and sinkhorn_iterations >= 1")
        if not self.pair_scales or min(self.pair_scales) <= 0:
            raise ConfigError(f"pair_scales must be positive, got {self.pair_scales}")
        radii = self.lipschitz_radii
        if len(radii) < 3 or min(radii) <= 0 or list(radii) != sorted(radii):
            raise ConfigError(f"lipschitz_radii needs >= 3 increasing positive radii, got {radii}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 24, "clouds": 2, "lipschitz_radii": (0.5, 1.5, 3.0), "lipschitz_clouds": 2}


def _disc_cloud(key, n, d, radius):
    """``n`` points uniform in the ball of radius ``radius``."""
    k1, k2 = jax.random.split(key)
    z = jax.random.normal(k1, (n, d))
    r = radius * jax.random.uniform(k2, (n, 1)) ** (1.0 / d)
    return r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)


@register_experiment(
    "pde-stability",
    StabilityConfig,
    "stability constant C(t, R0) vs measured constants; Lipschitz constants softmax vs Sinkhorn",
)
def run_pde_stability(config: StabilityConfig, run: Run) -> None:
    fig, axes = new_figure(1, 2, width=4.6)
    _stability_constants(config, run, axes[0, 0])
    _lipschitz(config, run, axes[0, 1])
    run.save_figure(fig, "stability")


def _stability_constants(config, run, ax):
    Q, K, V = random_weights(config.weight_seed, config.d, config.weight_scale)
    field = Softmax(Q, K, V)
    ts = np.linspace(0.0, config.t1, config.saves)
    v_norm = float(np.linalg.norm(V, 2))
    prior = softmax_stability_constant(field, ts, config.radius0 * np.exp(v_norm * ts))
    trajectories = jax.jit(
        jax.vmap(lambda x: fixed_step_particles(field, x, config.t1, config.steps, ts=ts).xs)
    )
    jacobian_norms = jax.jit(lambda x: flow_jacobian_norms(field, x, ts, config.steps))
    worst_local, worst_pair, measured, along = 0.0, 0.0, [], []
    for c in range(config.clouds):
        key = jax.random.key(config.seed + c)
        x0 = _disc_cloud(key, config.n, config.d, config.radius0)
        local = np.asarray(jacobian_norms(x0))
        pairs = [
            _disc_cloud(jax.random.fold_in(key, i + 1), config.n, config.d, config.radius0)
            for i in range(len(config.pair_scales))
        ]
        y0 = jnp.stack([x0 + s * (p - x0) for s, p in zip(config.pair_scales, pairs, strict=True)])
        xs = np.asarray(trajectories(jnp.concatenate([x0[None], y0])))  # (1 + pairs, s, n, d)
        radii = np.max(np.linalg.norm(xs, axis=-1), axis=(0, 2))
        posterior = softmax_stability_constant(field, ts, radii)
        for y in xs[1:]:
            ratio = [wasserstein2_exact(a, b) for a, b in zip(xs[0], y, strict=True)]
            ratio = np.array(ratio[1:]) / ratio[0]  # t > 0 (both are 1 at t = 0)
            worst_pair = max(worst_pair, float(np.max(ratio / posterior[1:])))
        worst_local = max(worst_local, float(np.max(local[1:] / posterior[1:])))
        measured.append(local)
        along.append(posterior[-1])
        ax.semilogy(
            ts, posterior, "C0-", lw=0.8, label="C along the trajectory" if c == 0 else None
        )
        ax.semilogy(ts, local, "C1-", lw=0.8, label="measured |dx_t/dx_0|" if c == 0 else None)
    ax.semilogy(ts, prior, "k--", label="a priori C(t, R0)")
    ax.set_xlabel("t")
    ax.set_title("stability constants (softmax)", fontsize=9)
    ax.legend(fontsize=6)
    run.save_arrays(stability_ts=ts, stability_prior=prior, stability_local=np.array(measured))
    run.scalar("measured_local_constant_at_t1", float(np.max(np.array(measured)[:, -1])))
    run.scalar("a_priori_constant_at_t1", float(prior[-1]))
    run.scalar("smallest_trajectory_constant_at_t1", float(np.min(along)))
    for name, worst, what in (
        ("local_stability_constant_below_bound", worst_local, "|dx_t/dx_0|_2"),
        ("finite_pair_ratio_below_bound", worst_pair, "W2(mu_t, nu_t) / W2(mu_0, nu_0)"),
    ):
        run.check(
            name,
            expected="<= 1",
            measured=f"{worst:.4g}",
            passed=bool(worst <= 1.0),
            note=f"max over clouds and times t > 0 of {what} / C(t) along the trajectory",
        )


def _lipschitz(config, run, ax):
    d = config.d
    A = np.asarray(random_weights(config.weight_seed + 1, d, 1.0)[0]) / np.sqrt(d)
    softmax = Softmax(np.sqrt(d) * A, np.eye(d), np.eye(d))  # K^T Q / sqrt(d) = A
    sinkhorn = Sinkhorn(A, np.eye(d), np.eye(d), iterations=config.sinkhorn_iterations)
    measure = {
        "softmax": jax.jit(lambda y: jnp.stack(field_lipschitz_constants(softmax, y))),
        "sinkhorn": jax.jit(lambda y: jnp.stack(field_lipschitz_constants(sinkhorn, y))),
    }
    radii = np.array(config.lipschitz_radii)
    values = {k: np.zeros((len(radii), config.lipschitz_clouds, 3)) for k in measure}
    for i, R in enumerate(radii):
        for c in range(config.lipschitz_clouds):
            y = _disc_cloud(jax.random.key(config.seed + 100 + c), config.n, d, R)
            for k, fn in measure.items():
                values[k][i, c] = np.asarray(fn(y))
    bounds = np.array([softmax_lipschitz_bounds(softmax, R) for R in radii])
    soft_max = values["softmax"].max(axis=1)
    worst = max(np.max(soft_max[:, 0] / bounds[:, 0]), np.max(soft_max[:, 2] / bounds[:, 1]))
    run.check(
        "softmax_lipschitz_constants_below_bounds",
        expected="<= 1",
        measured=f"{worst:.3g}",
        passed=bool(worst <= 1.0),
        note="max over radii of measured L_x / |V||A|R^2 and L_W1 / L_mu(R)",
    )
    mean_w2 = {k: v[:, :, 1].mean(axis=1) for k, v in values.items()}
    ratio = mean_w2["softmax"] / mean_w2["sinkhorn"]
    exponents = {
        k: fit_power_law(np.repeat(radii, config.lipschitz_clouds), v[:, :, 1].ravel())
        for k, v in values.items()
    }
    for k, fit in exponents.items():
        run.scalar(f"{k}_lipschitz_w2_exponent_in_R", fit.slope)
    run.check(
        "sinkhorn_more_regular_than_softmax",
        expected="softmax / Sinkhorn L_W2 ratio increasing in R",
        measured=", ".join(f"{r:.3g}" for r in ratio),
        passed=bool(np.all(np.diff(ratio) > 0)),
        note="mean over clouds of the measured W2-Lipschitz constant in the measure",
    )
    run.save_arrays(
        lipschitz_radii=radii,
        lipschitz_bounds=bounds,
        **{f"lipschitz_{k}": v for k, v in values.items()},
    )
    for k, style in (("softmax", "C3o-"), ("sinkhorn", "C2s-")):
        ax.loglog(radii, mean_w2[k], style, label=f"{k} L_W2 (exponent {exponents[k].slope:.2f})")
    ax.loglog(radii, bounds[:, 1], "k--", lw=0.8, label="softmax bound L_mu(R)")
    ax.set_ylim(top=10 * max(mean_w2["softmax"].max(), 1.0))
    ax.set_xlabel("radius R of the tokens")
    ax.set_title("Lipschitz constant in the measure", fontsize=9)
    ax.legend(fontsize=6)
