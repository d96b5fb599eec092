"""copy-head-sgld, copy-head-sgld-linear: the posterior by SGLD over (W, G) and MALA on G
against the marginal (saddle-point) theory, one body for either head (copy_head.md,
"Experiments")."""

from __future__ import annotations

import dataclasses
import types
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _bimodality, _compare as cmp, _fluctuations, _hysteresis, _mass, _members
from ...copyhead._samplers import mala_step_size
from ...runs import Run, register_experiment
from ...sweep import Grid
from . import _common as cm, _figures


@dataclasses.dataclass(frozen=True, kw_only=True)
class SGLDConfig(cm.NetworkConfig):
    """SGLD (blackjax) over (W, G) and MALA on G alone, vmapped over P, seeds and two starts.

    Step sizes (blackjax convention, no 1/2): SGLD h = :func:`jaxdyn.copyhead.sgld_step_size`
    with ``step_scale``, G moving ``g_preconditioner`` times faster (a constant
    reparametrisation, exact); MALA starts at :func:`jaxdyn.copyhead._samplers.mala_step_size`
    with ``mala_step_scale``.

    Attributes:
        window_points: P values scanned from P* to twice the uniform spinodal P_hi for
            hysteresis and bimodality (first-order theories only).
        precursor_fractions: P / P_t below the transition of the precursor chains (MALA
            from the uniform state).
        burn_in, num_samples, thin: chain lengths (each sampler).
        mode_steps: Adam steps on S(G) from each chain's final state to its mode.
        mass_check: SGLD's means against the Laplace shift and the mass's phase boundary
            (L^2-dimensional Hessians).
    """

    L: int = 64
    V: int = 8
    P_values: tuple[float, ...] = (8.0, 12.0, 64.0, 128.0)
    window_points: int = 5
    precursor_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9)
    step_scale: float = 0.2
    g_preconditioner: float = 16.0
    mala_step_scale: float = 0.4
    burn_in: int = 3000
    num_samples: int = 60
    thin: int = 20
    mode_steps: int = 1500
    mass_check: bool = True
    RANGES: ClassVar[str] = (
        "burn_in >= 1; num_samples >= 1; thin >= 1; mode_steps >= 1; window_points >= 0; "
        "step_scale > 0; g_preconditioner > 0; mala_step_scale > 0"
    )

    def validate(self) -> None:
        super().validate()
        cm.require(
            len(self.precursor_fractions) >= 2 and all(0 < f < 1 for f in self.precursor_fractions),
            f"precursor_fractions needs >= 2 values in (0, 1), got {self.precursor_fractions}",
        )

    @classmethod
    def quick(cls) -> dict:
        return dict(
            P_values=(10.0, 128.0), window_points=3, burn_in=1000, num_samples=20, thin=10,
            mode_steps=600, precursor_fractions=(0.25, 0.9), mass_check=False,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearSGLDConfig(SGLDConfig):
    """:class:`SGLDConfig` with linear attention, L = 32, P around its onset, and G moving
    64 times faster than W (the trade between pooling and copying is a slow direction)."""

    attention: str = "linear"
    L: int = 32
    P_values: tuple[float, ...] = (8.0, 64.0, 128.0)
    g_preconditioner: float = 64.0

    @classmethod
    def quick(cls) -> dict:
        return {**SGLDConfig.quick(), "P_values": (6.0, 96.0)}


def _theory(c: SGLDConfig, run) -> types.SimpleNamespace:
    """The marginal (saddle-point) theory and the P grids: the ``P_values``, ``window_P``
    (first order: the posterior's metastable window lies above the saddle point's, the
    uniform state having the larger fluctuation entropy, copy_head.md; P* to twice the
    spinodal) and ``precursor_P`` below P_t."""
    a = cm.reduced_theory(c, c.attention, "marginal", refine=False)
    a.window_P = np.array([])
    if a.first and c.window_points > 0:
        a.window_P = np.geomspace(a.P_t, 2.0 * a.info["coexistence"][1], c.window_points)
    a.P_grid = np.unique(np.concatenate([np.asarray(c.P_values, float), a.window_P]))
    a.precursor_P = a.P_t * np.asarray(c.precursor_fractions, float)
    states = {k: getattr(a.diagram, k) for k in ("x_global", "x_up", "x_down")}
    cm.record_theory(
        run, a, states, window_P=a.window_P.tolist(), precursor_P=a.precursor_P.tolist()
    )
    # The ladder: away from P_t and outside the saddle coexistence window (widened).
    window, widening = a.info["coexistence"], c.window_margin**2
    ladder = cmp.ladder(c.P_values, a.P_t, c.exclusion_factor, window, widening)
    a.ladder_mask = lambda P: np.isin(P, ladder)
    return a


_OUTPUTS = "mode_{} mode_bootstrap_{} mode_error_{} mode_bootstrap_error_{}"  # cm.check_theory
_CHAIN_SETTINGS = ("burn_in", "num_samples", "thin", "step_scale", "g_preconditioner", "mode_steps")


def _run_sgld(c: SGLDConfig, run: Run) -> None:
    a = _theory(c, run)
    posterior = c.posterior(c.attention)
    P_max = int(np.ceil(max(a.P_grid.max(), a.precursor_P.max())))
    # The ladder (every P from both starts) and the precursor chains (from uniform) in one
    # sweep, so one program is compiled.
    ladder_P = np.repeat(a.P_grid, 2)
    members = {
        "P": np.concatenate([ladder_P, a.precursor_P]),
        "start": np.concatenate([np.tile([0.0, 1.0], a.P_grid.size), 0.0 * a.precursor_P]),
        "precursor": np.concatenate([0.0 * ladder_P, 1.0 + 0.0 * a.precursor_P]),
    }
    chains = {k: getattr(c, k) for k in _CHAIN_SETTINGS}
    copy_G, grid = c.copy_scores(c.attention), Grid.zip(members, seeds=c.seeds, base_seed=c.seed)
    mala_step = lambda P: mala_step_size(P, c.L, c.V, c.temperature, c.mala_step_scale)
    member = _members.posterior_chains(
        posterior, copy_G, c.L, c.V, P_max, mala_step=mala_step, dtype=c.loop_dtype, **chains
    )
    # ArviZ's labels: a member's datasets are its chains, a chain's samples its draws.
    dims = {"seed": "chain", **dict.fromkeys(("G_final", "mala_G_final", "mode_G"), cm.SCORE_DIMS)}
    coords = {"draw": np.arange(c.num_samples)}
    both = cm.snug_sweep(run, "sgld", member, grid, c, dims=dims, coords=coords)
    result = both.select(both.params["precursor"] == 0)
    precursors = both.select(both.params["precursor"] == 1)
    run.scalar("failed_members", result.n_failed() + precursors.n_failed())
    run.scalar("mala_acceptance", float(np.nanmean(result.outputs["mala_acceptance"])))
    _check_samplers(run, a, result)
    _check_modes(run, a, result)
    _check_hysteresis_and_bimodality(run, a, result)
    _check_precursors(run, a, precursors, posterior, P_max)
    _check_coverage(run, a, result, posterior)
    _check_mass(run, a, result, posterior)
    _figures.posterior_figures(run, a, result)


def _chain_means(result, key):
    return np.nanmean(np.where(result.ok()[:, None], result.outputs[key], np.nan), axis=1)


def _check_samplers(run, a, result) -> None:
    """SGLD's G-marginal and MALA sample the same law exp(-S(G)): per ladder P (away from the
    transition and the metastable window, where the two dynamics escape a metastable state at
    different times) and start, their chain means agree within k combined standard errors
    over datasets, k the 99% Student-t quantile (9.9 for 3 datasets)."""
    P, start = result.params["P"], result.params["start"]
    k = cmp.critical_value(a.config.seeds)
    ladder = np.unique(P[a.ladder_mask(P)])
    keys = a.config.keys()
    means = {x: (_chain_means(result, x), _chain_means(result, f"mala_{x}")) for x in keys}
    rows = cmp.sampler_differences(P, start, keys, means)
    ok = all(abs(r["sgld_minus_mala"]) <= k * r["se"] for r in rows if r["P"] in ladder)
    run.scalar("sgld_minus_mala", rows)
    z = max(abs(r["sgld_minus_mala"]) / max(r["se"], 1e-300) for r in rows if r["P"] in ladder)
    run.consistency(
        "sgld_matches_mala",
        expected=0.0,
        measured=z,
        passed=bool(ok),
        basis="two samplers of one law exp(-S(G)): max |SGLD - MALA| / SE (chain means, SE "
        f"over datasets) over P = {ladder.tolist()}, starts and order parameters; passes "
        f"<= {k:.3g} (99% t)",
    )


def _check_modes(run, a, result) -> None:
    """The saddle-point theory predicts the posterior's modes: the mode reached from each SGLD
    chain's end, bootstrap-corrected and averaged per dataset over both starts, against the
    marginal theory on the ladder (:func:`._common.check_theory`: 99% t x SE + NEWTON_SAFETY x
    the mean Newton estimate + the reduced solver's error). The posterior mean minus the mode
    (fluctuation shift) is reported."""
    P = result.params["P"]
    far = a.ladder_mask(P) & result.ok()
    for key in a.config.keys():
        check = f"posterior_mode_{key}_matches_theory"
        claim = f"the posterior's modes have the saddle-point theory's {key}"
        comparison = cm.check_theory(run, a, result, far, key, _OUTPUTS, check, claim)
        gap = _chain_means(result, key) - result.masked(f"mode_{key}")
        run.scalar(
            f"posterior_mean_minus_mode_{key}",
            {f"{p:g}": float(np.nanmean(gap[(P == p) & far])) for p in comparison["P"]},
        )


def _check_hysteresis_and_bimodality(run, a, result) -> None:
    """First-order theory: on the scan above P* a contiguous range of P where, in every
    dataset, the chains from the two starts stay more than half the theory's jump apart and
    the pooled samples are bimodal, the starts agreeing everywhere else. Continuous theory:
    no P with disagreement or bimodality."""
    key = a.config.transition_key()
    P, seeds, start, ok = result.params["P"], result.seeds, result.params["start"], result.ok()
    amplitude = a.diagram.order_global["amplitude"]
    tol = 0.5 * a.info["jump"] if a.first else 0.1 * float(np.max(np.abs(amplitude)))
    hyst = _hysteresis.pair_disagreement(
        P, seeds, start, _chain_means(result, key), ok, tolerance=tol
    )
    samples = np.where(ok[:, None], result.outputs[key], np.nan)
    bimodal = _bimodality.bimodal_fraction(P, seeds, samples, hyst.P, tol)
    run.scalar("hysteresis_per_P", hyst.where(np.ones_like(hyst.P, bool)))
    run.scalar(
        "bimodal_fraction_per_P", {f"{p:g}": b for p, b in zip(hyst.P, bimodal, strict=True)}
    )
    frac = hyst.disagree_fraction
    if a.first:
        claim = "first order: the posterior's chains from the two starts stay in different "
        claim += "states over a contiguous range of P above P*"
        note = f"chains > {tol:.3g} apart at P = {hyst.P[frac > 0].tolist()} (saddle "
        note += f"coexistence {a.info['coexistence']})"
        run.evidence("sgld_hysteresis_window", ch.claims.hysteresis_window(claim, frac), note=note)
    else:
        claim = f"theory {a.info['transition_order'].name}: chains from both starts agree"
        evidence = ch.claims.hysteresis(claim, frac, expected=False)
        run.evidence("sgld_no_hysteresis", evidence, note=f"per P {hyst.where(hyst.P > 0)}")
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


def _check_precursors(run, a, pre, posterior, P_max: int) -> None:
    """MALA from the uniform state at P = f P_t (:func:`jaxdyn.copyhead._fluctuations.precursors`):
    for P <= 0.5 P_t (where the Gaussian approximation holds) the variance of the transition's
    order parameter against the Laplace variance (99% Student-t over datasets); the rise of
    the variance from the lowest to the highest P against the Laplace rise, the alternative no
    rise (linear) or a divergent 1 / (P_t - P) rise (softmax: the page predicts none)."""
    c = a.config
    p = _fluctuations.precursors(
        posterior, c.L, c.V, pre.params["P"], pre.seeds, pre.ok(), pre.outputs,
        c.transition_key(), P_max, a.P_t,
    )  # fmt: skip
    record = {"P_over_P_t": p["P"] / a.P_t, "variance": p["variance"], "laplace": p["laplace"]}
    cm.save_record(run, "precursor.", record, "precursor_P", p["P"])
    run.scalar("precursor", record)
    low = record["P_over_P_t"] <= 0.5
    run.evidence(
        "precursor_variance_matches_laplace",
        ch.claims.matches_theory(
            "below the transition (P <= 0.5 P_t) the posterior variance of the order parameter "
            "is the Laplace (Gaussian) variance at the mode",
            p["ratio"][:, low],
            np.ones(int(low.sum())),
            np.full(int(low.sum()), 0.5),
            basis="measured / Laplace variance per dataset; alternative: off by half",
        ),
        note=f"P / P_t = {np.round(record['P_over_P_t'][low], 3).tolist()}",
    )
    run.scalar("precursor_rise", {k: p[k] for k in ("rise", "laplace_rise", "divergent_rise")})
    alternative = 0.0 if c.attention == "linear" else p["divergent_rise"]
    run.evidence(
        "precursor_as_page_predicts",
        ch.claims.matches_theory(
            "precursors announce the linear onset (the variance rises as the Laplace variance "
            "diverging at P_c); none before softmax's first-order jump",
            p["rise"][:, None],
            np.array([p["laplace_rise"]]),
            np.array([abs(alternative - p["laplace_rise"])]),
            alternative=np.array([alternative]),
            basis=f"ln(variance at the top / bottom P) per dataset; alternative {alternative:.3g}",
        ),
        note=f"P / P_t = {np.round(record['P_over_P_t'], 3).tolist()}",
    )


def _check_coverage(run, a, result, posterior) -> None:
    """Coverage of span{U, S} by the posterior modes (checked) and by single samples
    (reported: the prior's noise on all L^2 scores adds a non-uniform part outside the span,
    small for softmax, large for linear attention)."""
    sel = result.ok() & (result.params["P"] >= 2 * a.P_t)
    if not sel.any():
        return
    A = jax.vmap(posterior.attention)(jnp.asarray(result.outputs["G_final"][sel]))
    run.scalar("posterior_sample_coverage_of_copy_span", float(ch.coverage(A)))
    what = "the posterior modes' non-uniform attention"
    note, modes = "modes from SGLD states at P >= 2 P_t", result.outputs["mode_G"]
    check = "posterior_mode_coverage_of_copy_span"
    cm.check_coverage(run, check, what, posterior, modes, sel, result.seeds, note)


MASS_CHECK = "posterior_mean_{}_matches_laplace"
MASS_CLAIM = "SGLD's posterior mean of {} is the mode plus its Laplace shift"


def _check_mass(run, a, result, posterior) -> None:
    """Per ladder P and dataset: the SGLD chain's mean minus the mode reached from its end
    (both starts averaged) against the Laplace shift at the population mode
    (:func:`jaxdyn.copyhead._mass.laplace_shifts`; its finite-P change, relative order 1 / P,
    is not in the bound), and for a first-order theory the mode's and the mass's phase
    boundaries. L^2 Hessian-vector products and an L^2 x L^2 eigendecomposition per P:
    recorded not run with ``mass_check=False``."""
    c = a.config
    if not c.mass_check:
        why = f"a Laplace phase costs {c.L**2} Hessian-vector products and an order-{c.L**2} "
        why, needs = why + "eigendecomposition per P", {"mass_check": True}
        for key in c.keys():
            check, claim = MASS_CHECK.format(key), MASS_CLAIM.format(key)
            run.not_run(check, claim, needs=needs, full_size=True, why=why)
        return
    P, seeds = result.params["P"], result.seeds
    far = a.ladder_mask(P) & result.ok()
    Ps = np.unique(P[far])
    predicted = _mass.laplace_shifts(posterior, a.model, Ps, c.keys(), log=run.log)
    kinks = Ps[~np.asarray(predicted["twice_differentiable"], bool)]
    basis = "chain mean minus the mode from its end per dataset; alternative: the mode alone"
    if kinks.size:  # no prediction: the Laplace expansion needs a twice-differentiable action
        basis = f"the mode sits on a kink of the action at P = {kinks.tolist()}"
    for key in c.keys():
        gap = _chain_means(result, key) - result.outputs[f"mode_{key}"]
        shift = np.where(kinks.size, np.nan, predicted[key])
        run.evidence(
            MASS_CHECK.format(key),
            ch.claims.laplace_shift(
                MASS_CLAIM.format(key), cmp.per_dataset(Ps, P, seeds, gap, far), shift, basis=basis
            ),
            note=f"P = {Ps.tolist()}; Laplace shift {np.round(predicted[key], 5).tolist()}",
        )
    if a.first:
        boundaries = _mass.phase_boundaries(
            posterior, a.model, a.diagram, a.info["coexistence"], a.P_t, log=run.log
        )
        run.scalar("phase_boundaries", boundaries)


def run_sgld(config: SGLDConfig, run: Run) -> None:
    """Either head's experiment at its (L, V) and at each of its further ``settings``."""
    cm.for_each_setting(config, run, _run_sgld)


for _name, _config, _description, _title in (
    ("copy-head-sgld", SGLDConfig, "softmax posterior by SGLD and MALA: modes vs theory, "
     "hysteresis, bimodality, no precursor", "The softmax posterior by SGLD and MALA"),
    ("copy-head-sgld-linear", LinearSGLDConfig, "linear posterior by SGLD and MALA: precursors "
     "rise towards P_c, no hysteresis, unimodal", "The linear posterior by SGLD and MALA"),
):  # fmt: skip
    register_experiment(
        _name, _config, _description, title=_title, docs="copy_head.md#mean-versus-mode"
    )(run_sgld)
