"""Posterior modes (Adam on S(G) from each SGLD chain's end) against the marginal saddle-point
theory, with each mode's optimisation error (Newton estimate) and finite-P bias (bootstrap)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _measure
from ._common import power_record, powered
from ._networks import (
    NEWTON_SAFETY,
    optimiser_allowance,
    order_keys,
    theory_at,
)
from ._posterior_checks import PosteriorAnalysis, chain_means


def mode_error(posterior, stats, mode, prefix: str = "mode") -> dict:
    """Per-chain Newton estimate (:func:`jaxdyn.copyhead.newton_estimate`) of how far c_1 and
    c_G of the mode found by Adam on S(G) are from the exact local minimum:
    ``<prefix>_error_<key>`` (+inf where not converged)."""

    def observable(G):
        o = _measure.measure(posterior, G, None, stats)
        return jnp.stack([o["c_1"], o["c_G"]])

    bound = ch.newton_estimate(lambda G: posterior.action(G, stats), mode, observable).bound()
    return {f"{prefix}_error_c_1": bound[0], f"{prefix}_error_c_G": bound[1]}


def check_modes(run, a: PosteriorAnalysis, result) -> None:
    """The saddle-point theory predicts the posterior's modes: the mode reached from each
    SGLD chain's end (Adam on S(G)), bootstrap-corrected for its finite-P bias (2 x mode -
    the mode of a bootstrap resample), against the marginal theory on the ladder. The two
    starts share a dataset: their values are averaged per dataset and the standard error is
    over datasets (99% t for that many); + NEWTON_SAFETY x the mean Newton estimate of the
    optimiser's error + the reduced solver's error on the theory (:func:`theory_at`). The
    posterior mean minus the mode (fluctuation shift) is reported."""
    c = a.config
    P, seeds = result.params["P"], result.seeds
    far = a.ladder_mask(P) & result.ok()
    Ps = np.unique(P[far])

    def per_dataset(values, p):
        return np.array(
            [np.nanmean(values[(P == p) & (seeds == s) & far]) for s in np.unique(seeds)]
        )

    for key in order_keys(c):
        modes, boot = result.masked(f"mode_{key}"), result.masked(f"mode_bootstrap_{key}")
        error = 2.0 * result.outputs[f"mode_error_{key}"]
        error = error + result.outputs[f"mode_bootstrap_error_{key}"]
        table = np.stack([per_dataset(2.0 * modes - boot, p) for p in Ps], axis=1)
        raw = np.array([np.nanmean(modes[(P == p) & far]) for p in Ps])
        opt = np.array([optimiser_allowance(error[(P == p) & far]) for p in Ps])
        theory, solver = theory_at(c, a.model, key, Ps)
        effect = posterior_effect(a, key)
        power = power_record(table, effect)
        run.scalar(f"posterior_mode_{key}_power", power)
        run.evidence(
            f"posterior_mode_{key}_matches_theory",
            powered(
                ch.claims.matches_theory(
                    f"the posterior's modes have the saddle-point theory's {key}",
                    table,
                    theory,
                    np.full(theory.shape, effect),
                    bound=opt + solver,
                    basis="bootstrap-corrected modes (2 x mode - bootstrap mode) averaged per "
                    "dataset over both starts; alternative: off by the effect to detect; "
                    f"bound: {NEWTON_SAFETY:g} x mean Newton estimate + the reduced solver's "
                    "error; inconclusive unless SE <= effect / 5",
                ),
                power,
            ),
            note=f"P = {Ps.tolist()} (uncorrected {np.round(raw, 5).tolist()}); effect "
            f"{effect:.4g}",
        )
        means = chain_means(result, key)
        gap = [float(np.nanmean(means[(P == p) & far] - modes[(P == p) & far])) for p in Ps]
        run.scalar(
            f"posterior_mean_minus_mode_{key}", dict(zip([f"{p:g}" for p in Ps], gap, strict=True))
        )


def posterior_effect(a: PosteriorAnalysis, key: str) -> float:
    """What a comparison with the marginal theory must detect: the jump of ``key`` at P*
    (first order), else its change over the theory's P range."""
    tk = key if isinstance(a.model, ch.LinearReduced) else {"c_G": "a_G"}[key]
    if a.info["transition_order"] is ch.TransitionOrder.first:
        lp, lP = np.log(a.P_t), np.log(a.diagram.P)
        up = np.interp(lp, lP, a.diagram.order_up[tk])
        down = np.interp(lp, lP, a.diagram.order_down[tk])
        return float(abs(down - up))
    curve = a.diagram.order_global[tk]
    return float(np.max(curve) - np.min(curve))
