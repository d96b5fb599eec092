"""``pde-twisted``: unnormalised softmax as a gradient flow in the twisted Wasserstein distance
``d_{A,V}`` (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.meanfield import (
    Exponential,
    fixed_step_particles,
    interaction_energy,
    twisted_metric,
    twisted_speed_squared,
    twisted_wasserstein,
)
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwistedConfig(ExperimentConfig):
    """``A = -0.1 (S S^T + I/2)``, ``M = G G^T + I/2`` (``S, G`` Gaussian), ``V = M A``; ``n``
    tokens ``N(0, I/4)``."""

    d: int = 2
    n: int = 200

    def validate(self) -> None:
        if self.d < 1 or self.n < 2:
            raise ConfigError(f"d must be >= 1 and n >= 2, got {self.d}, {self.n}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 100}


@register_experiment(
    "pde-twisted",
    TwistedConfig,
    "unnormalised softmax: energy dissipation in the twisted distance d_AV, not in W2",
)
def run_pde_twisted(config: TwistedConfig, run: Run) -> None:
    _twisted_distance(config, run)


def _twisted_distance(config: TwistedConfig, run: Run) -> None:
    """Unnormalised softmax with symmetric ``A`` and ``M = V A^{-1}`` symmetric positive
    definite: ``dE/dt`` equals the squared metric speed in ``d_{A,V}`` (energy-dissipation
    equality of a gradient flow), not in the plain ``W_2``; the speed measured with the twisted
    distance between nearby particle clouds matches it (transformer_pde.md)."""
    d = config.d
    rng = np.random.default_rng(config.seed + 13)
    S, G = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    A = -0.1 * (S @ S.T + 0.5 * np.eye(d))
    M = G @ G.T + 0.5 * np.eye(d)
    field = Exponential(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    metric = twisted_metric(field)
    x = 0.5 * np.asarray(jax.random.normal(jax.random.key(config.seed + 5), (config.n, d)))
    v = field.velocity(jnp.asarray(x), jnp.asarray(x))
    _, rate = jax.jvp(lambda y: interaction_energy(field, y), (jnp.asarray(x),), (v,))
    twisted = float(twisted_speed_squared(field, x))
    plain = float(jnp.mean(jnp.sum(v**2, axis=-1)))
    run.check(
        "energy_rate_equals_twisted_metric_speed",
        expected=float(rate),
        measured=twisted,
        tolerance=1e-10 * abs(float(rate)),
        note="dE/dt vs (1/n) sum Gamma^T M^-1 Gamma, float64 round-off",
    )
    run.check(
        "energy_rate_differs_from_plain_w2_speed",
        expected="relative gap > 1e-3",
        measured=f"{abs(plain - float(rate)) / abs(float(rate)):.3g}",
        passed=abs(plain - float(rate)) > 1e-3 * abs(float(rate)),
        note="(1/n) sum |Gamma|^2 is not the dissipation: the metric is the twisted one",
    )
    speeds = {}
    for h in (2e-3, 1e-3):
        moved = fixed_step_particles(field, x, h, 4).final_x
        speeds[h] = twisted_wasserstein(moved, x, metric) / h
    run.check(
        "twisted_distance_measures_the_metric_speed",
        expected=float(np.sqrt(twisted)),
        measured=speeds[1e-3],
        tolerance=2.0 * abs(speeds[2e-3] - speeds[1e-3]) + 1e-9,
        note="d_AV(mu_h, mu_0) / h at h = 1e-3; tolerance: twice the O(h) change from h = 2e-3",
    )
    run.save_arrays(twisted_rates=np.array([float(rate), twisted, plain]))
    fig, axes = new_figure(1, 1, width=4.0)
    axes[0, 0].bar(
        ["dE/dt", "|mu'|^2 in d_AV", "|mu'|^2 in W2"], [float(rate), twisted, plain], color="C0"
    )
    axes[0, 0].set_title("energy dissipation of unnormalised softmax", fontsize=9)
    run.save_figure(fig, "twisted_dissipation")
