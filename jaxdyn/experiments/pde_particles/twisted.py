"""``pde-twisted``: unnormalised and normalised softmax as gradient flows in the twisted
Wasserstein distance ``d_{A,V}`` (docs/transformer_pde.md, "Gradient-flow structure")."""

from __future__ import annotations

import dataclasses

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.meanfield import RK4, claims, interaction_energy, simulate_particles
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
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwistedConfig(ExperimentConfig):
    """``A = -0.1 (S S^T + I/2)``, ``M = G G^T + I/2`` (``S, G`` Gaussian), ``V = M A``; ``n``
    tokens ``N(0, I/4)``; the configuration Jacobians use the first ``jacobian_n`` tokens."""

    d: int = 2
    n: int = 200
    jacobian_n: int = 24

    def validate(self) -> None:
        if self.d < 1 or self.n < 2:
            raise ConfigError(f"d must be >= 1 and n >= 2, got {self.d}, {self.n}")
        if not 2 <= self.jacobian_n <= self.n:
            raise ConfigError(f"jacobian_n must be in 2..n, got {self.jacobian_n}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 100, "jacobian_n": 16}


def _weights(d: int, seed: int):
    rng = np.random.default_rng(seed + 13)
    S, G = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    A = -0.1 * (S @ S.T + 0.5 * np.eye(d))
    M = G @ G.T + 0.5 * np.eye(d)
    return A, M


@eqx.filter_jit
def _energy_rate(field, x):
    v = field.velocity(x, x)
    _, rate = jax.jvp(lambda y: interaction_energy(field, y), (x,), (v,))
    return rate


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


def _control_cloud(seed: int = 0, n: int = 12, d: int = 2):
    A, M = _weights(d, seed)
    x = 0.5 * jax.random.normal(jax.random.key(seed), (n, d))
    return A, M, x


@negative_control("pde-twisted", "energy_rate_equals_twisted_metric_speed")
def _unnormalised_rate_against_the_plain_w2_speed():
    # the same dissipation measured in the plain W2 speed: not the flow's metric
    A, M, x = _control_cloud()
    d = x.shape[1]
    field = Exponential(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    plain = eqx.filter_jit(lambda f, y: jnp.mean(jnp.sum(f.velocity(y, y) ** 2, axis=-1)))(field, x)
    return claims.dissipation(UNNORMALISED, _energy_rate(field, x), plain)


@negative_control("pde-twisted", "normalised_energy_rate_equals_weighted_speed")
def _normalised_rate_against_the_unweighted_speed():
    A, M, x = _control_cloud()
    d = x.shape[1]
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    speed = eqx.filter_jit(weighted_twisted_speed_squared)(field, x, M)
    return claims.dissipation(WEIGHTED, _energy_rate(field, x), speed)


@negative_control("pde-twisted", "normalised_softmax_gradient_in_weighted_metric")
def _unweighted_normalised_jacobian():
    A, M, x = _control_cloud()
    d = x.shape[1]
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    jacobian = eqx.filter_jit(twisted_force_jacobian)(field, x, M)
    return claims.gradient_structure(WEIGHTED_GRADIENT, jacobian)


@negative_control("pde-twisted", "normalised_softmax_gradient_in_d_AV")
def _rotation_field_jacobian():
    # a field that is no gradient in any metric: the particle map x_i -> R x_i, R a rotation
    n = 6
    R = np.array([[0.0, -1.0], [1.0, 0.0]])
    J = np.kron(np.eye(n), R)
    return claims.gradient_structure(NORMALISED_GRADIENT, J)


@register_experiment(
    "pde-twisted",
    TwistedConfig,
    "un/normalised softmax: energy dissipation in the (weighted) twisted distance d_AV, not W2",
    title="energy dissipation in the twisted distance",
    docs="transformer_pde.md#sigmoid-attention-and-the-twisted-distance-_gradient_flowpy-derived",
)
def run_pde_twisted(config: TwistedConfig, run: Run) -> None:
    _twisted_distance(config, run)
    _normalised(config, run)


def _twisted_distance(config: TwistedConfig, run: Run) -> None:
    """Unnormalised softmax with symmetric ``A`` and ``M = V A^{-1}`` symmetric positive
    definite: ``dE/dt`` equals the squared metric speed in ``d_{A,V}`` (energy-dissipation
    equality of a gradient flow), not in the plain ``W_2``; the speed measured with the twisted
    distance between nearby particle clouds matches it (transformer_pde.md)."""
    d = config.d
    A, M = _weights(d, config.seed)
    field = Exponential(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    metric = twisted_metric(field)
    x = 0.5 * np.asarray(jax.random.normal(jax.random.key(config.seed + 5), (config.n, d)))
    v = field.velocity(jnp.asarray(x), jnp.asarray(x))
    rate = float(_energy_rate(field, jnp.asarray(x)))
    twisted = float(twisted_speed_squared(field, x))
    plain = float(jnp.mean(jnp.sum(v**2, axis=-1)))
    run.evidence(
        "energy_rate_equals_twisted_metric_speed",
        claims.dissipation(UNNORMALISED, rate, twisted),
        note="dE/dt vs (1/n) sum Gamma^T M^-1 Gamma",
    )
    run.report(
        "energy_rate_relative_gap_to_plain_w2_speed",
        measured=abs(plain - rate) / abs(rate),
        note="(1/n) sum |Gamma|^2 is not the dissipation (the negative control of the check above)",
    )
    speeds = {}
    moved_by = jax.jit(
        lambda h: (
            simulate_particles(
                field,
                x,
                h,
                dt0=h / 4,
                solver=RK4(),
                stepsize_controller=diffrax.ConstantStepSize(),
                blowup_norm=None,
            ).final_x
        )
    )  # h traced
    for h in (2e-3, 1e-3):
        moved = moved_by(jnp.asarray(h))
        speeds[h] = twisted_wasserstein(moved, x, metric) / h
    run.consistency(
        "twisted_distance_measures_the_metric_speed",
        expected=float(np.sqrt(twisted)),
        measured=speeds[1e-3],
        tolerance=2.0 * abs(speeds[2e-3] - speeds[1e-3]) + 1e-9,
        basis="twice the O(h) change of d_AV(mu_h, mu_0) / h from h = 2e-3 to 1e-3",
        note="the twisted distance between nearby clouds vs the speed formula",
    )
    run.save_arrays(
        twisted_rates=np.array([rate, twisted, plain]),
        dims={"twisted_rates": ("quantity",)},
        coords={"quantity": ["dE/dt", "|mu'|^2 in d_AV", "|mu'|^2 in W2"]},
    )
    fig, axes = new_figure(1, 1, width=4.0)
    axes[0, 0].bar(
        ["dE/dt", "|mu'|^2 in d_AV", "|mu'|^2 in W2"], [rate, twisted, plain], color="C0"
    )
    axes[0, 0].set_title("energy dissipation of unnormalised softmax", fontsize=9)
    run.save_figure(fig, "twisted_dissipation")


def _normalised(config: TwistedConfig, run: Run) -> None:
    """The normalised softmax with the same weights: the candidate energy is the interaction
    energy ``E``; its dissipation along the flow is compared with the speed in ``d_{A,V}``
    and in the normaliser-weighted metric; the configuration Jacobians decide whether any
    energy has the flow as its gradient flow in each metric."""
    d = config.d
    A, M = _weights(d, config.seed)
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=M @ A)
    x = 0.5 * jax.random.normal(jax.random.key(config.seed + 5), (config.n, d))
    rate = float(_energy_rate(field, x))
    weighted = float(
        weighted_twisted_speed_squared(field, x, M, weights=softmax_normaliser(field, x))
    )
    unweighted = float(weighted_twisted_speed_squared(field, x, M))
    run.evidence(
        "normalised_energy_rate_equals_weighted_speed",
        claims.dissipation(WEIGHTED, rate, weighted),
        note="dE/dt vs (1/n) sum (k * mu)(x_i) Gamma_i^T M^-1 Gamma_i",
    )
    run.report(
        "normalised_energy_rate_relative_gap_to_d_AV_speed",
        measured=abs(unweighted - rate) / abs(rate),
        note="the unweighted d_AV speed is not the dissipation of E",
    )
    xj = x[: config.jacobian_n]
    run.evidence(
        "normalised_softmax_gradient_in_d_AV",
        claims.gradient_structure(NORMALISED_GRADIENT, twisted_force_jacobian(field, xj, M)),
        note=f"{config.jacobian_n} tokens: a symmetric Jacobian is necessary for any energy",
    )
    run.evidence(
        "normalised_softmax_gradient_in_weighted_metric",
        claims.gradient_structure(
            WEIGHTED_GRADIENT,
            twisted_force_jacobian(field, xj, M, weight_fn=lambda y: softmax_normaliser(field, y)),
        ),
        note=f"{config.jacobian_n} tokens",
    )
