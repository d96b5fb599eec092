"""Counterfactual inputs of the particle experiments' claims (transformer_pde.md, claims
table): per experiment, per check, a measurement on which the claim is false, so its
decision must not say ``holds``. The experiments register them as negative controls."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from . import _energy_geometry as eg, _particle_measures as pm, claims
from ._gradient_flow import twisted_force_jacobian, weighted_twisted_speed_squared

RATE = "the particles' dynamic error decays like n^-1/2 (mean-field limit)"


def _synthetic(n_values, systems, slope, floor, seed):
    """Errors ``0.05 n^slope + floor`` with the measured log scatter 0.5."""
    n = np.repeat(np.asarray(n_values, dtype=float), systems)
    noise = np.exp(0.5 * np.random.default_rng(seed).standard_normal(n.size))
    return n, (0.05 * n**slope + floor) * noise


def _influence(slope, seed):
    n = np.repeat([16.0, 32.0, 64.0], 3)
    return n, 0.5 * n**slope * np.exp(0.2 * np.random.default_rng(seed).standard_normal(n.size))


def _twisted(which):
    """The twisted claims on a cloud of 12 tokens, measured in the wrong metric."""
    exp_field, field, M, x = pm.twisted_problem(0, 12, x_seed=0)
    if which == "plain":  # the unnormalised dissipation against the plain W2 speed
        rate, _, plain, _ = pm.twisted_rates(exp_field, x)
        return claims.twisted_dissipation(rate, plain, normalised=False)
    if which == "unweighted":  # the normalised dissipation against the unweighted speed
        speed = eqx.filter_jit(weighted_twisted_speed_squared)(field, x, M)
        return claims.twisted_dissipation(pm.energy_rate(field, x), speed, normalised=True)
    jacobian = eqx.filter_jit(twisted_force_jacobian)(field, x, M)
    return claims.twisted_gradient(jacobian, weighted=True)


_t = np.linspace(0.0, 1.0, 11)
_A = np.array([[0.4, 0.1], [0.1, -0.2]])
_c, _s = np.cos(0.3), np.sin(0.3)

COUNTERFACTUALS = {
    "pde-meanfield": {
        # a closure converging to another limit: an error floor of 3e-3 (5% near the blow-up)
        "dynamic_error_rate": lambda: claims.meanfield_rate(
            RATE, *_synthetic((32, 64, 128, 256), 16, -0.5, 3e-3, 0)
        ),
        "near_blowup_error_rate": lambda: claims.meanfield_rate(
            RATE, *_synthetic((64, 256, 1024, 4096), 8, -0.5, 0.05, 2)
        ),
        # softmax's moments do not close on a sample: its gap is ~1e-3
        "linear_closure_exact_for_every_sample": lambda: claims.exact_closure(1e-3, 1.2),
        # a first-order defect, as softmax's
        "sinkhorn_closure_defect_second_order": lambda: claims.closure_defect_order(
            *_synthetic((256, 512, 1024, 2048, 4096), 16, -0.5, 0.0, 3)
        ),
        # softmax draws past their blow-up: solves stop early
        "l2_bounded_for_random_v": lambda: claims.l2_bounded(
            [0.2, 0.5, np.inf], [True, True, False]
        ),
        # a random shift of each sample's blow-up time: ratios on both sides of 1
        "near_blowup_particles_lag": lambda: claims.particles_lag_their_gaussian(
            np.exp(0.3 * np.random.default_rng(5).standard_normal(8))
        ),
        # clouds whose distance does not move while the Gaussian ratio is 0.9
        "stability_ratio_particles_vs_gaussian_ode": lambda: claims.stability_ratio(
            1.0 + 0.01 * np.random.default_rng(0).standard_normal(8), 0.9
        ),
    },
    "pde-particles": {
        "clusters_increase_with_beta": lambda: claims.clusters_increase_with_beta(
            np.repeat(np.log(np.geomspace(0.5, 16.0, 8)), 4),
            np.random.default_rng(0).integers(1, 6, 32).astype(float),
        ),
        "smallest_beta_reaches_one_cluster": lambda: claims.single_cluster(
            "one cluster", [1.0, 2.0, 1.0, 1.0], basis="counterfactual counts"
        ),
    },
    "pde-stability": {
        # C = exp(L_x t), ignoring the measure's Lipschitz part, against ratios above it
        "stability_bound_w2": lambda: claims.stability_estimate(
            2, [1.3, 1.8, 2.5], [1.1, 1.2, 1.3], 1e-8
        ),
        "stability_bound_w1": lambda: claims.stability_estimate(1, [1.05, 1.2], [1.0, 1.0], 1e-8),
        "local_stability_constant_below_bound": lambda: claims.stability_estimate(
            2, 1.6, 1.0, 1e-9
        ),
        "softmax_lipschitz_constants_below_bounds": lambda: claims.lipschitz_below_bounds(1.4),
        "sinkhorn_more_regular_than_softmax": lambda: claims.sinkhorn_more_regular(
            np.repeat(np.log([0.5, 1.5, 3.0]), 2),
            0.1 * np.random.default_rng(0).standard_normal(6),
        ),
    },
    "pde-energy": {
        "energy_decreases_when_AV_negative": lambda: claims.energy_monotone(
            0.5 * np.exp(0.3 * _t), 1e-6, increasing=False
        ),
        "energy_increases_when_AV_positive": lambda: claims.energy_monotone(
            0.5 * np.exp(-0.3 * _t), 1e-6, increasing=True
        ),
        # ensembles frozen at E(mu_0) = 0.5 while the closed form moves to 0.45
        "particle_energy_tracks_gaussian_closed_form": lambda: claims.energy_tracks_gaussian(
            0.5 + 0.005 * np.random.default_rng(0).standard_normal((8, 4)),
            np.linspace(0.5, 0.45, 4),
            np.full(4, 0.5),
        ),
        # A = +I along a translated Dirac: E''(s) > 0
        "gaussian_geodesic_second_variation_negative": lambda: claims.geodesic_nonconvexity(
            np.exp(np.linspace(0.0, 1.0, 5) ** 2), 1.0
        ),
        # V = -A: the gradient ascent of 1/2 OT_eps (the sign an earlier version of the notes gave)
        "sinkhorn_rhs_equals_bw_gradient_of_half_ot": lambda: claims.sinkhorn_gradient_flow(
            float(eg.sinkhorn_gradient_gap(_A, np.array([[1.0, 0.2], [0.2, 0.7]]), -_A))
        ),
        "half_ot_decreases_along_sinkhorn_flow": lambda: claims.half_ot_decreases(-1.0 + 0.05 * _t),
    },
    "pde-sigmoid": {
        # V a rotation by 0.3 rad: the flow is no longer the energy's gradient flow
        "sigmoid_energy_rate_identity": lambda: claims.sigmoid_energy_identity(
            float(
                pm.sigmoid_identity_gap(
                    jnp.array([[_c, -_s, 0.0], [_s, _c, 0.0], [0.0, 0.0, 1.0]]), 2.0
                )
            )
        ),
        "sigmoid_energy_never_decreases": lambda: claims.sigmoid_energy_nondecreasing(
            [1.0, 1.2, 1.19, 1.3]
        ),
        "sigmoid_tokens_form_one_cluster_at_smallest_beta": lambda: claims.single_cluster(
            "one cluster", [1.0, 2.0, 2.0], basis="counterfactual counts"
        ),
    },
    "pde-causal": {
        "sink_makes_single_token_influence_vanish": lambda: claims.sink_influence(
            *_influence(0.0, 0), sink=True
        ),
        "without_sink_influence_stays_order_one": lambda: claims.sink_influence(
            *_influence(-1.0, 1), sink=False
        ),
    },
    "pde-twisted": {
        "energy_rate_equals_twisted_metric_speed": lambda: _twisted("plain"),
        "normalised_energy_rate_equals_weighted_speed": lambda: _twisted("unweighted"),
        "normalised_softmax_gradient_in_weighted_metric": lambda: _twisted("jacobian"),
        # the particle map x_i -> R x_i, R a rotation: no gradient in any metric
        "normalised_softmax_gradient_in_d_AV": lambda: claims.twisted_gradient(
            np.kron(np.eye(6), np.array([[0.0, -1.0], [1.0, 0.0]])), weighted=False
        ),
    },
}
