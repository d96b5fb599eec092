"""Checks of posterior samples (SGLD over (W, G), MALA on G) against the marginal theory."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _bimodality, _hysteresis, _phase, _reduced
from . import _figures
from ._common import critical_value, info_json, standard_error, transition
from ._networks import (
    order_keys,
    transition_key,
)


@dataclasses.dataclass
class PosteriorAnalysis:
    """The marginal theory a posterior experiment is checked against, and its P grids."""

    config: object
    model: ch.AbstractReducedModel
    diagram: _phase.PhaseDiagram
    info: dict
    P_t: float
    window_P: np.ndarray
    P_grid: np.ndarray
    precursor_P: np.ndarray

    @classmethod
    def from_theory(cls, c, model, run) -> PosteriorAnalysis:
        lo, hi = 0.5 * min(c.P_values), 2.0 * max(c.P_values)
        diagram, _, info = transition(model, lo, hi)
        P_t = info["P_star"]
        if P_t is None:
            P_t = float(np.sqrt(np.prod(ch.transition_order(model, lo, hi).window)))
        window = np.array([])
        if info["transition_order"] is ch.TransitionOrder.first and c.window_points > 0:
            # The posterior's metastability window lies above the saddle point's: the uniform
            # state's larger fluctuation entropy shifts it (docs/copy_head.md); scanned from
            # P* to twice the uniform spinodal P_hi.
            window = np.geomspace(P_t, 2.0 * info["coexistence"][1], c.window_points)
        P_grid = np.unique(np.concatenate([np.asarray(c.P_values, float), window]))
        precursor_P = P_t * np.asarray(c.precursor_fractions, float)
        run.scalar(
            "theory",
            {
                "objective": _reduced.objective_label(model.objective),
                **info_json(info),
                "window_P": window.tolist(),
                "precursor_P": precursor_P.tolist(),
            },
        )
        run.save_arrays(
            **{
                "theory.P": diagram.P,
                "theory.x_global": diagram.x_global,
                "theory.x_up": diagram.x_up,
                "theory.x_down": diagram.x_down,
            },
            dims={
                "theory.P": ("theory_P",),
                **{f"theory.{k}": ("theory_P", "state") for k in ("x_global", "x_up", "x_down")},
            },
            coords={"theory_P": diagram.P},
        )
        return cls(c, model, diagram, info, P_t, window, P_grid, precursor_P)

    def theory(self, key: str, P) -> np.ndarray:
        theory_key = key if isinstance(self.model, ch.LinearReduced) else {"c_G": "a_G"}[key]
        return np.interp(np.log(P), np.log(self.diagram.P), self.diagram.order_global[theory_key])

    def ladder_mask(self, P) -> np.ndarray:
        """Members at the configured P_values farther than exclusion_factor from P_t and
        outside the saddle coexistence window (widened by window_margin^2)."""
        c = self.config
        far = np.isin(P, np.asarray(c.P_values, float))
        far &= np.abs(np.log(np.asarray(P) / self.P_t)) > np.log(c.exclusion_factor)
        if self.info["coexistence"] is not None:
            lo, hi = self.info["coexistence"]
            far &= (P < lo / c.window_margin**2) | (P > hi * c.window_margin**2)
        return far


def chain_means(result, key):
    return np.nanmean(np.where(result.ok()[:, None], result.outputs[key], np.nan), axis=1)


def check_samplers(run, a: PosteriorAnalysis, result) -> None:
    """SGLD's G-marginal and MALA sample the same law exp(-S(G)): per P of the ladder (away
    from the transition and the metastable window) and start, their chain means agree within
    k combined standard errors over datasets, k the 99% Student-t quantile for the number of
    datasets (9.9 for 3).

    This check first used k = 4 and every P, including the metastable window, where the two
    samplers' different dynamics escape a metastable state at different times (full-size
    softmax run: at P = 26.7 SGLD stays in the copy state, MALA leaves it). Its verdict under
    that definition is reported as ``sgld_matches_mala_every_P_at_4_se``."""
    P, start = result.params["P"], result.params["start"]
    k = critical_value(a.config.seeds)
    ladder = np.unique(P[a.ladder_mask(P)])
    rows, ok, ok_old = [], True, True
    for key in order_keys(a.config):
        sg, ma = chain_means(result, key), chain_means(result, f"mala_{key}")
        for p in np.unique(P):
            for b in (0.0, 1.0):
                sel = (P == p) & (start == b)
                d = float(np.nanmean(sg[sel]) - np.nanmean(ma[sel]))
                se = float(np.hypot(standard_error(sg[sel]), standard_error(ma[sel])))
                ok_old &= abs(d) <= 4 * se
                if p in ladder:
                    ok &= abs(d) <= k * se
                rows.append({"key": key, "P": float(p), "start": b, "sgld_minus_mala": d, "se": se})
    run.scalar("sgld_minus_mala", rows)
    run.scalar("sgld_matches_mala_every_P_at_4_se", bool(ok_old))
    run.consistency(
        "sgld_matches_mala",
        expected=0.0,
        measured=max(
            abs(r["sgld_minus_mala"]) / max(r["se"], 1e-300) for r in rows if r["P"] in ladder
        ),
        passed=bool(ok),
        basis="two samplers of one law exp(-S(G)): max |SGLD - MALA| / SE (chain means, SE "
        f"over datasets) over P = {ladder.tolist()}, starts and order parameters; passes "
        f"<= {k:.3g} (99% t)",
    )


def check_hysteresis_and_bimodality(run, a: PosteriorAnalysis, result) -> None:
    """First-order theory: on the scan above P* there is a contiguous range of P where, in
    every dataset, the chains from the two starts stay in different states (more than half the
    theory's jump apart) and the pooled samples are bimodal, with the two starts agreeing
    everywhere else. Continuous theory: no P with disagreement or bimodality."""
    c = a.config
    key = transition_key(c)
    P, seeds, start, ok = result.params["P"], result.seeds, result.params["start"], result.ok()
    first = a.info["transition_order"] is ch.TransitionOrder.first
    tol = (
        0.5 * a.info["jump"]
        if first
        else 0.1 * float(np.max(np.abs(a.diagram.order_global["amplitude"])))
    )
    hyst = _hysteresis.pair_disagreement(
        P, seeds, start, chain_means(result, key), ok, tolerance=tol
    )
    samples = np.where(ok[:, None], result.outputs[key], np.nan)
    bimodal = np.array(
        [
            np.mean(
                [
                    _bimodality.bimodality(
                        samples[(P == p) & (seeds == s)], min_separation=tol
                    ).bimodal
                    for s in np.unique(seeds)
                ]
            )
            for p in hyst.P
        ]
    )
    run.scalar("hysteresis_per_P", hyst.where(np.ones_like(hyst.P, bool)))
    run.scalar(
        "bimodal_fraction_per_P",
        dict(zip([f"{p:g}" for p in hyst.P], bimodal.tolist(), strict=True)),
    )
    frac = hyst.disagree_fraction
    where = np.flatnonzero(frac > 0)
    if first:
        run.evidence(
            "sgld_hysteresis_window",
            ch.claims.hysteresis_window(
                "first order: the posterior's chains from the two starts stay in different "
                "states over a contiguous range of P above P*",
                frac,
            ),
            note=f"chains > {tol:.3g} apart at P = {hyst.P[where].tolist()} (saddle "
            f"coexistence {a.info['coexistence']})",
        )
    else:
        run.evidence(
            "sgld_no_hysteresis",
            ch.claims.hysteresis(
                f"theory {a.info['transition_order'].name}: chains from both starts agree",
                frac,
                expected=False,
            ),
            note=f"per P {hyst.where(hyst.P > 0)}",
        )
    settled = (frac == 0) | (frac == 1)
    run.evidence(
        "posterior_bimodal_exactly_where_hysteresis",
        ch.claims.bimodal_where_hysteretic(
            "the posterior is bimodal exactly where its chains stay in two states",
            frac[settled] == 1,
            bimodal[settled] == 1,
        ),
        note=f"at P = {hyst.P[settled].tolist()} (all or no datasets disagree); components "
        f"> {tol:.3g} apart",
    )


def check_coverage(run, a: PosteriorAnalysis, result, posterior) -> None:
    """Coverage of span{U, S} by the posterior modes (checked) and by single posterior
    samples (reported: the prior's noise on all L^2 scores adds a non-uniform part outside
    the span, small for softmax, whose rows suppress it, large for linear attention)."""
    P = result.params["P"]
    sel = result.ok() & (P >= 2 * a.P_t)
    if not sel.any():
        return
    seeds = result.seeds
    A = lambda key: jax.vmap(posterior.attention)(jnp.asarray(result.outputs[key][sel]))
    run.scalar("posterior_sample_coverage_of_copy_span", float(ch.coverage(A("G_final"))))
    modes = A("mode_G")
    per_dataset = [float(ch.coverage(modes[seeds[sel] == s])) for s in np.unique(seeds[sel])]
    run.evidence(
        "posterior_mode_coverage_of_copy_span",
        ch.claims.copy_span_coverage(
            "span{U, S} captures the vast majority (>= 0.9) of the posterior modes' "
            "non-uniform attention in the copy phase",
            per_dataset,
        ),
        note=f"modes reached from SGLD states at P >= 2 P_t; per dataset "
        f"{np.round(per_dataset, 4).tolist()}",
    )


def figures(run, a: PosteriorAnalysis, result, pre) -> None:
    """Order parameters of the SGLD runs against the marginal theory, and histograms of the
    transition's order parameter from the two starts (inside the hysteresis window and above)."""
    key = transition_key(a.config)
    P, start = result.params["P"], result.params["start"]
    curves = {k: (a.diagram.P, a.theory(k, a.diagram.P)) for k in order_keys(a.config)}
    _figures.network_figures(
        run,
        "sgld",
        P,
        result.ok(),
        result,
        order_keys(a.config),
        curves,
        result.n_failed(),
        loss_key="mode_" + key,
    )
    shown = list(a.window_P[:1]) + [float(np.unique(P)[-1])]
    _figures.histograms(
        run,
        "sgld",
        key,
        {
            p: {
                f"from {'copy' if b else 'uniform'}": result.outputs[key][(P == p) & (start == b)]
                for b in (0.0, 1.0)
            }
            for p in shown
        },
    )
