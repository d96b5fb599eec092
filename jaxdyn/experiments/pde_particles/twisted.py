"""``pde-twisted``: unnormalised and normalised softmax as gradient flows in the twisted
Wasserstein distance ``d_{A,V}`` (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.meanfield._gradient_flow import (
    softmax_normaliser,
    twisted_force_jacobian,
    twisted_metric,
    twisted_speed_squared,
    twisted_wasserstein,
    weighted_twisted_speed_squared,
)
from jaxdyn.meanfield.fields import Exponential, Softmax
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment

from ._common import controls

UNNORMALISED = "unnormalised softmax dissipates E at its squared speed in d_AV (gradient flow)"
WEIGHTED = (
    "normalised softmax dissipates E at its squared speed in the metric (k * mu)(x) M^-1 "
    "(a gradient flow in the normaliser-weighted twisted metric)"
)
NORMALISED_GRADIENT = (
    "normalised softmax is a gradient flow in d_AV itself: its M^-1-twisted particle velocity "
    "has a symmetric configuration Jacobian"
)
WEIGHTED_GRADIENT = (
    "normalised softmax, weighted by its normaliser, is a configuration gradient "
    "(symmetric Jacobian of (k * mu)(x_i) M^-1 Gamma(x_i))"
)


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


def _problem(seed, n, d=2, x_seed=None):
    """The fields (unnormalised, normalised), ``M`` and ``n`` tokens ``N(0, I/4)``."""
    A, M = pm.twisted_weights(d, seed)
    x = 0.5 * jax.random.normal(jax.random.key(seed + 5 if x_seed is None else x_seed), (n, d))
    kw = {"Q": np.sqrt(d) * A, "K": np.eye(d), "V": M @ A}
    return Exponential(**kw), Softmax(**kw), M, x


def _plain_speed(field, x):
    return jnp.mean(jnp.sum(field.velocity(x, x) ** 2, axis=-1))


def _control(which):
    exp_field, field, M, x = _problem(0, 12, x_seed=0)  # the controls' own cloud
    if which == "plain":  # the unnormalised dissipation against the plain W2 speed
        return claims.dissipation(
            UNNORMALISED, pm.energy_rate(exp_field, x), eqx.filter_jit(_plain_speed)(exp_field, x)
        )
    if which == "unweighted":  # the normalised dissipation against the unweighted speed
        speed = eqx.filter_jit(weighted_twisted_speed_squared)(field, x, M)
        return claims.dissipation(WEIGHTED, pm.energy_rate(field, x), speed)
    return claims.gradient_structure(
        WEIGHTED_GRADIENT, eqx.filter_jit(twisted_force_jacobian)(field, x, M)
    )


controls(
    "pde-twisted",
    energy_rate_equals_twisted_metric_speed=lambda: _control("plain"),
    normalised_energy_rate_equals_weighted_speed=lambda: _control("unweighted"),
    normalised_softmax_gradient_in_weighted_metric=lambda: _control("jacobian"),
    # the particle map x_i -> R x_i, R a rotation: no gradient in any metric
    normalised_softmax_gradient_in_d_AV=lambda: claims.gradient_structure(
        NORMALISED_GRADIENT, np.kron(np.eye(6), np.array([[0.0, -1.0], [1.0, 0.0]]))
    ),
)


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
    exp_field, field, M, x = _problem(config.seed, config.n, config.d)
    rate = float(pm.energy_rate(exp_field, x))
    twisted = float(twisted_speed_squared(exp_field, np.asarray(x)))
    plain = float(_plain_speed(exp_field, x))
    run.evidence(
        "energy_rate_equals_twisted_metric_speed",
        claims.dissipation(UNNORMALISED, rate, twisted),
        note="dE/dt vs (1/n) sum Gamma^T M^-1 Gamma",
    )
    run.report("energy_rate_relative_gap_to_plain_w2_speed", measured=abs(plain - rate) / abs(rate))
    moved_by = jax.jit(lambda h: pm.rk4_flow(exp_field, x, h, 4).final_x)  # h traced
    metric = twisted_metric(exp_field)
    speeds = {h: twisted_wasserstein(moved_by(jnp.asarray(h)), x, metric) / h for h in (2e-3, 1e-3)}
    run.consistency(
        "twisted_distance_measures_the_metric_speed",
        expected=float(np.sqrt(twisted)),
        measured=speeds[1e-3],
        tolerance=2.0 * abs(speeds[2e-3] - speeds[1e-3]) + 1e-9,
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
    rate = float(pm.energy_rate(field, x))
    weights = softmax_normaliser(field, x)
    weighted = float(weighted_twisted_speed_squared(field, x, M, weights=weights))
    unweighted = float(weighted_twisted_speed_squared(field, x, M))
    run.evidence(
        "normalised_energy_rate_equals_weighted_speed",
        claims.dissipation(WEIGHTED, rate, weighted),
        note="dE/dt vs (1/n) sum (k * mu)(x_i) Gamma_i^T M^-1 Gamma_i",
    )
    run.report(
        "normalised_energy_rate_relative_gap_to_d_AV_speed",
        measured=abs(unweighted - rate) / abs(rate),
    )
    xj = x[: config.jacobian_n]
    run.evidence(
        "normalised_softmax_gradient_in_d_AV",
        claims.gradient_structure(NORMALISED_GRADIENT, twisted_force_jacobian(field, xj, M)),
        note=f"{config.jacobian_n} tokens: a symmetric Jacobian is necessary for any energy",
    )
    weight_fn = lambda y: softmax_normaliser(field, y)  # noqa: E731
    run.evidence(
        "normalised_softmax_gradient_in_weighted_metric",
        claims.gradient_structure(
            WEIGHTED_GRADIENT, twisted_force_jacobian(field, xj, M, weight_fn=weight_fn)
        ),
        note=f"{config.jacobian_n} tokens",
    )
