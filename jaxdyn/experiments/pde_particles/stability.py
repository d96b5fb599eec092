"""``pde-stability``: the stability estimate ``W_2(mu_t, nu_t) <= C(t, R_0) W_2(mu_0, nu_0)``
with its constant computed (a priori and along the trajectory) against the measured constants,
and the Lipschitz constants of softmax and Sinkhorn attention measured against the bounds
(docs/transformer_pde.md, "Stability and regularity")."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.meanfield._stability import (
    softmax_lipschitz_bounds,
    softmax_stability_constant,
)
from jaxdyn.meanfield.fields import Sinkhorn, Softmax
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment


@dataclasses.dataclass(frozen=True, kw_only=True)
class StabilityConfig(ExperimentConfig):
    """``clouds`` draws of three candidate clouds of ``n`` tokens in the ball of radius
    ``radius0``, each paired with its perturbation by ``top_eps`` along the flow Jacobian's top
    singular vector and with copies moved by ``pair_scales``. Lipschitz constants: clouds
    uniform in the ball of each of ``lipschitz_radii``, softmax and Sinkhorn with one ``A``."""

    d: int = 3
    n: int = 48
    clouds: int = 4
    radius0: float = 1.0
    weight_scale: float = 0.15
    weight_seed: int = 3
    t1: float = 1.0
    saves: int = 6
    steps: int = 40
    pair_scales: tuple[float, ...] = (1e-3, 0.1, 0.5)
    top_eps: float = 1e-3
    lipschitz_radii: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)
    lipschitz_clouds: int = 3
    sinkhorn_iterations: int = 200

    def validate(self) -> None:
        if min(self.d, self.clouds, self.lipschitz_clouds, self.steps, self.n - 1) < 1:
            raise ConfigError("d, clouds, lipschitz_clouds, steps must be >= 1 and n >= 2")
        if min(self.radius0, self.weight_scale, self.t1) <= 0 or self.saves < 2:
            raise ConfigError("radius0, weight_scale, t1 must be positive and saves >= 2")
        if self.sinkhorn_iterations < 1 or not self.pair_scales or min(self.pair_scales) <= 0:
            raise ConfigError("sinkhorn_iterations >= 1 and positive pair_scales")
        radii = self.lipschitz_radii
        if len(radii) < 3 or min(radii) <= 0 or list(radii) != sorted(radii):
            raise ConfigError(f"lipschitz_radii needs >= 3 increasing positive radii, got {radii}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 24, "clouds": 2, "lipschitz_radii": (0.5, 1.5, 3.0), "lipschitz_clouds": 2}


@register_experiment(
    "pde-stability",
    StabilityConfig,
    "stability constant C(t, R0) vs measured constants; Lipschitz constants softmax vs Sinkhorn",
    title="stability of the mean-field flow",
    docs="transformer_pde.md#stability-and-regularity-_stabilitypy-derived",
)
def run_pde_stability(config: StabilityConfig, run: Run) -> None:
    fig, axes = new_figure(1, 2, width=4.6)
    _stability_constants(config, run, axes[0, 0])
    _lipschitz(config, run, axes[0, 1])
    run.save_figure(fig, "stability")


def _stability_constants(config, run, ax):
    """W2 and W1 ratios of each pair against ``C(t)`` along its trajectory (a posteriori radii);
    the local constant ``|dx_t/dx_0|_2`` against ``C(t)``."""
    Q, K, V = pm.random_weights(config.weight_seed, config.d, config.weight_scale)
    field = Softmax(Q, K, V)
    ts = np.linspace(0.0, config.t1, config.saves)
    prior = softmax_stability_constant(
        field, ts, config.radius0 * np.exp(float(np.linalg.norm(V, 2)) * ts)
    )
    keys = [jax.random.key(config.seed + c) for c in range(config.clouds)]
    m = pm.stability_pairs(
        field, ts, config.steps, config.radius0, config.top_eps, config.pair_scales, keys, config.n
    )
    # one constant per pair: each cloud's trajectory constant, repeated over its pairs
    local, constants = m["local"], np.repeat(m["constant"][:, 1:], len(config.pair_scales) + 1, 0)
    for cloud, sigma in zip(m["cloud"], m["sigma"], strict=True):
        run.report(f"top_singular_value_at_t1[{cloud}]", measured=sigma)
    for p in (2, 1):
        run.evidence(
            f"stability_bound_w{p}",
            claims.stability_estimate(p, m[f"w{p}"], constants, m[f"w{p}_err"]),
            note=f"every pair, every save t > 0, d = {config.d}: W{p} ratio against C(t)",
        )
        run.report(f"best_w{p}_ratio_at_t1", measured=float(np.max(m[f"w{p}"][:, -1])))
    run.evidence(
        "local_stability_constant_below_bound",
        claims.stability_estimate(2, float(np.max(local[:, 1:] / m["constant"][:, 1:])), 1.0, 1e-9),
        note="max over clouds and saves of |dx_t/dx_0|_2 / C(t) (infinitesimal pairs)",
    )
    c_t1, local_best = float(np.min(constants[:, -1])), float(np.max(local[:, -1]))
    run.report("smallest_trajectory_constant_at_t1", measured=c_t1)
    run.report("a_priori_constant_at_t1", measured=float(prior[-1]))
    run.report("measured_local_constant_at_t1", measured=local_best)
    run.report("sharpness_best_constant_over_bound", measured=local_best / c_t1)
    ax.semilogy(ts, m["constant"].T, "C0-", lw=0.8)
    ax.semilogy(ts, local.T, "C1-", lw=0.8)
    ax.semilogy(ts, prior, "k--", label="a priori C(t, R0)")
    ax.plot([], [], "C0-", label="C along the trajectories")
    ax.plot([], [], "C1-", label="measured |dx_t/dx_0|")
    ax.set(xlabel="t", title=f"stability constants (softmax, d = {config.d})")
    ax.legend(fontsize=6)
    run.save_arrays(
        stability_prior=prior,
        stability_local=local,
        dims={"stability_prior": ("time",), "stability_local": ("cloud", "time")},
        coords={"time": ts, "cloud": m["cloud"]},
    )


def _lipschitz(config, run, ax):
    d = config.d
    A = np.asarray(pm.random_weights(config.weight_seed + 1, d, 1.0)[0]) / np.sqrt(d)
    fields = {
        "softmax": Softmax(np.sqrt(d) * A, np.eye(d), np.eye(d)),  # K^T Q / sqrt(d) = A
        "sinkhorn": Sinkhorn(A, np.eye(d), np.eye(d), iterations=config.sinkhorn_iterations),
    }
    radii = np.array(config.lipschitz_radii)
    values = pm.lipschitz_table(
        fields, radii, config.lipschitz_clouds, config.n, d, config.seed + 100
    )
    bounds = np.array([softmax_lipschitz_bounds(fields["softmax"], R) for R in radii])
    top = values["softmax"].max(axis=1)
    worst = max(np.max(top[:, 0] / bounds[:, 0]), np.max(top[:, 2] / bounds[:, 1]))
    run.evidence(
        "softmax_lipschitz_constants_below_bounds",
        claims.lipschitz_below_bounds(worst),
        note="max over radii of measured L_x / |V||A|R^2 and L_W1 / L_mu(R)",
    )
    mean_w2 = {k: v[:, :, 1].mean(axis=1) for k, v in values.items()}
    slopes = {
        k: fit_power_law(np.repeat(radii, config.lipschitz_clouds), v[:, :, 1].ravel()).slope
        for k, v in values.items()
    }
    for k, slope in slopes.items():
        run.scalar(f"{k}_lipschitz_w2_exponent_in_R", slope)
    per_cloud = np.log(values["softmax"][:, :, 1] / values["sinkhorn"][:, :, 1])
    run.evidence(
        "sinkhorn_more_regular_than_softmax",
        claims.sinkhorn_more_regular(
            np.repeat(np.log(radii), config.lipschitz_clouds), per_cloud.ravel()
        ),
        note="slope of log(softmax / Sinkhorn W2-Lipschitz constant) on log R, one per cloud; "
        f"mean ratios {np.round(mean_w2['softmax'] / mean_w2['sinkhorn'], 3).tolist()}",
    )
    run.save_arrays(
        lipschitz_bounds=bounds,
        **{f"lipschitz_{k}": v for k, v in values.items()},
        dims={"lipschitz_bounds": ("radius", "bound"),
              **{f"lipschitz_{k}": ("radius", "cloud_draw", "constant") for k in values}},
        coords={"radius": radii, "bound": ["space", "measure_w1"],
                "constant": ["space", "measure_w2", "measure_w1"]},
    )  # fmt: skip
    for k, style in (("softmax", "C3o-"), ("sinkhorn", "C2s-")):
        ax.loglog(radii, mean_w2[k], style, label=f"{k} L_W2 (exponent {slopes[k]:.2f})")
    ax.loglog(radii, bounds[:, 1], "k--", lw=0.8, label="softmax bound L_mu(R)")
    ax.set_ylim(top=10 * max(mean_w2["softmax"].max(), 1.0))
    ax.set(xlabel="radius R of the tokens", title="Lipschitz constant in the measure")
    ax.legend(fontsize=6)
