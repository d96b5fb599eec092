"""``pde-twisted``: unnormalised and normalised softmax as gradient flows in the twisted
Wasserstein distance ``d_{A,V}`` (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.meanfield._gradient_flow import (
    softmax_normaliser,
    twisted_force_jacobian,
    weighted_twisted_speed_squared,
)
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment

from ._common import record


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwistedConfig(ExperimentConfig):
    """``A = -0.1 (S S^T + I/2)``, ``M = G G^T + I/2`` (``S, G`` Gaussian), ``V = M A``; ``n``
    tokens ``N(0, I/4)``; the configuration Jacobians use the first ``jacobian_n`` tokens."""

    d: int = 2
    n: int = 200
    jacobian_n: int = 24

    def validate(self) -> None:
        if self.d < 1 or self.n < 2 or not 2 <= self.jacobian_n <= self.n:
            raise ConfigError(f"need d >= 1, n >= 2, 2 <= jacobian_n <= n; got {self}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 100, "jacobian_n": 16}


@register_experiment(
    "pde-twisted",
    TwistedConfig,
    "un/normalised softmax: energy dissipation in the (weighted) twisted distance d_AV, not W2",
    title="energy dissipation in the twisted distance",
    docs="transformer_pde.md#sigmoid-attention-and-the-twisted-distance-_gradient_flowpy-derived",
)
def run_pde_twisted(config: TwistedConfig, run: Run) -> None:
    """Unnormalised softmax with ``M = V A^{-1}`` symmetric positive definite: ``dE/dt`` is the
    squared metric speed in ``d_{A,V}`` (not in ``W_2``), and the twisted distance between
    nearby clouds measures it; the normalised softmax with the same weights against the
    unweighted and the normaliser-weighted metric, and its configuration Jacobians."""
    exp_field, field, M, x = pm.twisted_problem(config.seed, config.n, config.d)
    rate, twisted, plain, speeds = pm.twisted_rates(exp_field, x)
    run.consistency(
        "twisted_distance_measures_the_metric_speed",
        expected=float(np.sqrt(twisted)),
        measured=speeds[1],
        tolerance=2.0 * abs(speeds[0] - speeds[1]) + 1e-9,
        basis="twice the O(h) change of d_AV(mu_h, mu_0) / h from h = 2e-3 to 1e-3",
        note="the twisted distance between nearby clouds vs the speed formula",
    )
    quantities = ["dE/dt", "|mu'|^2 in d_AV", "|mu'|^2 in W2"]
    run.save_arrays(
        twisted_rates=np.array([rate, twisted, plain]),
        dims={"twisted_rates": ("quantity",)},
        coords={"quantity": quantities},
    )
    fig, axes = new_figure(1, 1, width=4.0)
    axes[0, 0].bar(quantities, [rate, twisted, plain], color="C0")
    axes[0, 0].set_title("energy dissipation of unnormalised softmax", fontsize=9)
    run.save_figure(fig, "twisted_dissipation")
    normalised_rate = float(pm.energy_rate(field, x))
    weights = softmax_normaliser(field, x)
    weighted = float(weighted_twisted_speed_squared(field, x, M, weights=weights))
    unweighted = float(weighted_twisted_speed_squared(field, x, M))
    xj, tokens = x[: config.jacobian_n], f"{config.jacobian_n} tokens"
    weight_fn = lambda y: softmax_normaliser(field, y)  # noqa: E731
    record(run, {
        "energy_rate_equals_twisted_metric_speed": (
            claims.twisted_dissipation(rate, twisted, normalised=False),
            "dE/dt vs (1/n) sum Gamma^T M^-1 Gamma"),
        "normalised_energy_rate_equals_weighted_speed": (
            claims.twisted_dissipation(normalised_rate, weighted, normalised=True),
            "dE/dt vs (1/n) sum (k * mu)(x_i) Gamma_i^T M^-1 Gamma_i"),
        "normalised_softmax_gradient_in_d_AV": (
            claims.twisted_gradient(twisted_force_jacobian(field, xj, M), weighted=False),
            f"{tokens}: a symmetric Jacobian is necessary for any energy"),
        "normalised_softmax_gradient_in_weighted_metric": (claims.twisted_gradient(
            twisted_force_jacobian(field, xj, M, weight_fn=weight_fn), weighted=True), tokens),
    })  # fmt: skip
    run.report("energy_rate_relative_gap_to_plain_w2_speed", measured=abs(plain - rate) / abs(rate))
    run.report(
        "normalised_energy_rate_relative_gap_to_d_AV_speed",
        measured=abs(unweighted - normalised_rate) / abs(normalised_rate),
    )
