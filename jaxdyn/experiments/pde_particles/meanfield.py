"""``pde-meanfield``: particles sampled from ``N(alpha_0, Sigma_0)`` against the Gaussian ODE
(docs/transformer_pde.md, "Mean-field limit"): per Gaussian-closed variant the dynamic error's
rate in ``n``, a biased-closure probe, Sinkhorn's closure defect, L2's bounded growth, the
near-blow-up lag and the stability ratio of coupled clouds."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxdyn.evidence import Verdict
from jaxdyn.meanfield import _particle_measures as pm, blowup_time, claims
from jaxdyn.meanfield._meanfield_limit import near_blowup_problem, rk4_linear_bound
from jaxdyn.plotting import new_figure, note_excluded
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._common import check_sizes, check_variants, require

RATE_CLAIM = "the particles' dynamic error decays like n^-1/2 (mean-field limit)"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeanFieldConfig(ExperimentConfig):
    """Particles vs the Gaussian ODE. Samples are antithetic; ``weight_scale`` sets ``Q, K``;
    the closure probe (drift ``closure_bias``) runs on the first variant; ``deferred_variants``
    are recorded ``not_run`` (their rate needs the full size). ``systems`` (and Sinkhorn's 64)
    come from ``claims.rate_samples(n_values, noise=0.5)``: power 0.8 to reject slopes
    ``-0.5 +- 0.2`` at 99%. Sinkhorn's 10 iterations are converged at these weights (docs)."""

    d: int = 2
    variants: tuple[str, ...] = pm.CLOSED_VARIANTS
    n_values: tuple[int, ...] = (256, 1024, 2048)
    sinkhorn_n_values: tuple[int, ...] = (128, 256, 512)
    systems: int = 43
    sinkhorn_systems: int = 64
    t1: float = 1.0
    steps: int = 20
    weight_scale: float = 0.25
    weight_seed: int = 3
    sinkhorn_iterations: int = 10
    closure_bias: float = 1e-3
    stability_n: int = 256
    stability_systems: int = 8
    l2_draws: int = 16
    l2_horizon: float = 3.0
    near_n_values: tuple[int, ...] = (64, 256, 1024, 4096)
    near_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9, 0.95)
    near_systems: int = 8
    near_steps: int = 200
    deferred_variants: tuple[str, ...] = ()
    defect_n_values: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
    defect_systems: int = 16

    def validate(self) -> None:
        check_variants(self.variants, pm.CLOSED_VARIANTS, self.d)
        if not set(self.deferred_variants) <= set(self.variants) - {self.variants[0]}:
            raise ConfigError("deferred_variants must be variants other than the first")
        check_sizes(self, "n_values", "sinkhorn_n_values", divide=True)
        check_sizes(self, "near_n_values", divide=True, empty=True)
        check_sizes(self, "defect_n_values", empty=True)
        require(self, positive=("t1", "closure_bias", "weight_scale", "l2_horizon"), at_least={
            1: ("steps", "sinkhorn_iterations", "near_steps"),
            2: ("near_systems", "defect_systems"), 4: ("stability_n",),
            3: ("systems", "sinkhorn_systems", "stability_systems")})  # fmt: skip
        fr = self.near_fractions
        if self.near_n_values and (not fr or list(fr) != sorted(fr) or not 0 < fr[0] <= fr[-1] < 1):
            raise ConfigError(f"near_fractions must increase within (0, 1), got {fr}")

    @classmethod
    def quick(cls) -> dict:
        # the near-blow-up rate, multi-head's rate and Sinkhorn's defect need the full sizes
        return dict(n_values=(32, 256), sinkhorn_n_values=(32, 128), systems=8, sinkhorn_systems=8,
                    stability_n=96, stability_systems=4, l2_draws=8, near_n_values=(),
                    deferred_variants=("multihead",), defect_n_values=())  # fmt: skip


def _rms_by_n(result, key):
    values = np.where(result.ok(), result.outputs[key], np.nan).reshape(result.grid_shape)
    return np.sqrt(np.nanmean(values**2, axis=1))


def _rate(result):
    ok = result.ok()
    return claims.meanfield_rate(RATE_CLAIM, result.params["n"][ok], result.outputs["dynamic"][ok])


@register_experiment(
    "pde-meanfield",
    MeanFieldConfig,
    "particles vs the Gaussian ODE: dynamic error ~ n^-1/2, closure-bias probe, stability ratio",
    title="the mean-field limit of the particles",
    docs="transformer_pde.md#the-mean-field-limit-_meanfield_limitpy",
)
def run_pde_meanfield(config: MeanFieldConfig, run: Run) -> None:
    alpha0, cov0 = pm.initial_gaussian(config.d)
    Q, K, V = pm.random_weights(config.weight_seed, config.d, config.weight_scale)
    full = type(config)()
    fig, axes = new_figure(1, 2, width=4.6)
    ax = axes[0, 0]
    for variant in config.variants:
        if variant in config.deferred_variants:
            run.not_run(
                f"dynamic_error_rate[{variant}]", RATE_CLAIM, full_size=True,
                needs={"deferred_variants": list(full.deferred_variants)},
                why=f"{variant}: log BW vs log n over n = {list(full.n_values)}",
            )  # fmt: skip
            continue
        field = pm.variant_field(variant, Q, K, V, sinkhorn_iterations=config.sinkhorn_iterations)
        sinkhorn = variant == "sinkhorn"
        sizes = config.sinkhorn_n_values if sinkhorn else config.n_values
        size_dim = "sinkhorn_n" if sinkhorn else "n"
        probe = variant == config.variants[0]  # the biased closure shares the probe's program
        drifts = (0.0, config.closure_bias) if probe else (0.0,)
        grid = Grid.product(
            {"drift": np.asarray(drifts, float), "n": np.array(sizes)},
            seeds=config.sinkhorn_systems if sinkhorn else config.systems,
            base_seed=config.seed,
        )
        member = pm.meanfield_error_member(field, alpha0, cov0, max(sizes), config.t1, config.steps)
        both = run.sweep(f"meanfield_{variant}", member, grid, dims={"mean_gap": ("component",)})
        per = int(np.prod(both.grid_shape[1:]))
        result, *probed = [
            both.select(slice(i * per, (i + 1) * per), both.grid_shape[1:], both.axes[1:])
            for i in range(len(drifts))
        ]
        if sinkhorn:
            _sinkhorn_checks(config, run, result, field, alpha0, cov0, V)
        if variant == "linear":
            gap = float(np.max(result.outputs["moment_gap"][result.ok()]))
            run.evidence(
                "linear_closure_exact_for_every_sample",
                claims.exact_closure(gap, float(np.trace(cov0))),
                note="max over runs of (|m_t - alpha_t|^2 + |C_t - Sigma_t|_F^2)^1/2, ODE from "
                "the sample's own moments (no n^-1/2 part)",
            )
        else:
            run.evidence(
                f"dynamic_error_rate[{variant}]", _rate(result), note=f"{variant}: log BW vs log n"
            )
        rms = {k: _rms_by_n(result, k) for k in ("initial", "total", "dynamic")}
        for k, values in rms.items():
            run.scalar(f"{variant}_{k}_error_at_n_max", float(values[-1]))
        run.save_arrays(
            **{f"meanfield_{variant}_rms_{k}": v for k, v in rms.items()},
            dims={f"meanfield_{variant}_rms_{k}": (size_dim,) for k in rms},
            coords={size_dim: np.asarray(sizes)},
        )
        ok = result.ok()
        slope = pm.fitted_slope(result.params["n"][ok], result.outputs["dynamic"][ok])
        ax.loglog(sizes, rms["dynamic"], "o-", label=f"{variant} ({slope:.2f})")
        ax.loglog(sizes, rms["total"], ":", color="0.6")
        note_excluded(ax, result.n_failed(), len(result.status))
        if probe:
            _closure_probe(config, run, variant, probed[0], sizes, ax)
    ax.set(xlabel="particles n", ylabel="RMS BW at t1 (dotted: total, solid: dynamic)")
    ax.legend(fontsize=6)
    if config.l2_draws:
        _l2_bounded(config, run)
    if config.near_n_values:
        _near_blowup(config, run)
    for f in () if config.near_n_values else config.near_fractions:
        run.not_run(
            f"near_blowup_error_rate[{f:g}]", RATE_CLAIM, full_size=True,
            needs={"near_n_values": list(full.near_n_values)},
            why=f"relative covariance error at t = {f:g} t* against n",
        )  # fmt: skip
    _stability_ratio(config, run, Q, K, V, alpha0, cov0, axes[0, 1])
    run.save_figure(fig, "meanfield_error_and_stability")


def _closure_probe(config, run, variant, result, sizes, ax):
    """The error sweep for a closure off by ``closure_bias``: the rate check must fail."""
    evidence = _rate(result)
    gap = result.outputs["mean_gap"][result.ok()][:, 0]
    se = float(np.std(gap, ddof=1) / np.sqrt(gap.size))
    run.report("closure_probe_rate", measured=evidence.measured, note=evidence.reason)
    run.report("closure_probe_mean_gap", measured=float(np.mean(gap)), note=f"SE {se:.2e}")
    run.consistency(
        "closure_bias_is_not_called_holds",
        expected=1,
        measured=int(evidence.verdict is not Verdict.holds),
        basis="the rate check must have the power to see a closure off by closure_bias",
        note=f"{variant}, closure's c shifted by {config.closure_bias:g}: {evidence.verdict.value}",
    )
    ax.loglog(sizes, _rms_by_n(result, "dynamic"), "k--", label="probe")


def _sinkhorn_checks(config, run, result, field, alpha0, cov0, V):
    """The mean against ``exp(t V) m_0`` (an identity of the column-normalised coupling:
    consistency), and the closure defect's second order (docs)."""
    gap, size = result.outputs["mean_gap"][result.ok()], float(np.linalg.norm(alpha0))
    run.consistency(
        "sinkhorn_mean_decoupled_from_covariance",
        expected=0.0,
        measured=float(np.max(np.linalg.norm(gap, axis=-1))),
        tolerance=rk4_linear_bound(V, config.t1, config.steps, size) + 1e-9 * size,
        basis="RK4 remainder bound on the linear mean ODE plus 1e-9 |alpha_0|",
        note="max over members of |m_t - exp(t V) m_0| for the particles' mean m",
    )
    name = "sinkhorn_closure_defect_second_order"
    if not config.defect_n_values:
        full = list(type(config)().defect_n_values)
        run.not_run(name, claims.SINKHORN_DEFECT, needs={"defect_n_values": full}, full_size=True,
                    why="the closure defect at t = 0 against n")  # fmt: skip
        return
    n_all, defects = pm.closure_defects(
        field, alpha0, cov0, config.defect_n_values, config.defect_systems, config.seed + 41
    )
    rms = np.sqrt(np.mean(defects.reshape(len(config.defect_n_values), -1) ** 2, 1))
    run.report("sinkhorn_closure_defect_rms", measured=rms, note=f"n = {config.defect_n_values}")
    run.evidence(name, claims.closure_defect_order(n_all, defects), note="log defect vs log n")


def _l2_bounded(config, run):
    growth, reached, at_stop, t_end, _, t_soft = pm.l2_growth_draws(
        config.d, config.l2_draws, config.l2_horizon, config.seed + 23
    )
    failed = pm.stalled_inside_bound(reached, at_stop)
    run.report(
        "l2_draws_failed_numerically",
        measured=np.flatnonzero(failed),
        note=f"solves stopped early inside the bound (t = {np.round(t_end[failed], 3).tolist()})",
    )
    if np.any(~failed):
        run.report("l2_largest_growth_fraction_of_bound", measured=float(np.max(growth[~failed])))
    run.evidence(
        "l2_bounded_for_random_v",
        claims.l2_bounded(growth, reached, at_stop),
        note=f"{config.l2_draws} draws (Q, K, V standard normal, d = {config.d}), horizon "
        f"{config.l2_horizon:g} x the softmax stop time",
    )


def _near_blowup(config, run):
    A, cov0 = near_blowup_problem(config.d, config.seed)
    t_star = float(blowup_time(cov0, A))
    fractions = np.asarray(config.near_fractions)
    ts = np.concatenate([[0.0], fractions * t_star])
    member = pm.near_blowup_member(A, cov0, ts, max(config.near_n_values), config.near_steps)
    grid = Grid.product(
        {"n": np.array(config.near_n_values)}, seeds=config.near_systems, base_seed=config.seed
    )
    keys = ("total", "dynamic", "lag", "lag_bound")
    result = run.sweep(
        "near_blowup", member, grid, dims={k: ("t_over_t_star",) for k in keys},
        coords={"t_over_t_star": fractions},
    )  # fmt: skip
    ok = result.ok()
    out = {k: np.where(ok[:, None], result.outputs[k], np.nan) for k in keys}
    shape = result.grid_shape + (fractions.size,)
    rms = {f"near_blowup_{k}": np.sqrt(np.nanmean(out[k].reshape(shape) ** 2, 1)) for k in keys[:2]}
    coords = {"near_n": np.array(config.near_n_values), "t_over_t_star": fractions}
    run.save_arrays(**rms, dims={k: ("near_n", "t_over_t_star") for k in rms}, coords=coords)
    for k, v in rms.items():  # t* is in the sweep's coordinates: t_over_t_star
        run.report(f"{k}_relative_error", measured=v)
    run.report("near_blowup_members_failed", measured=int(result.n_failed()))
    lag, bound = out["lag"], out["lag_bound"]
    largest = result.params["n"] == max(config.near_n_values)
    run.report("near_blowup_lag_minus_one", measured=np.nanmean(lag[largest], axis=0) - 1.0)
    run.consistency(
        "near_blowup_lag_within_the_extreme_value_bound",
        expected=True,
        measured=bool(np.all((lag <= bound * (1 + 1e-9)) | np.isnan(lag))),
        basis="V = I: |x_i(t)| <= max_j |x_j(0)| e^t (convex combinations)",
    )
    for j, f in enumerate(fractions):
        run.evidence(
            f"near_blowup_particles_lag[{f:g}]",
            claims.particles_lag_their_gaussian(lag[largest][:, j], where=f"t = {f:g} t*"),
            note=f"n = {max(config.near_n_values)}, {int(np.sum(largest & ok))} systems",
        )
        run.evidence(
            f"near_blowup_error_rate[{f:g}]",
            claims.meanfield_rate(
                RATE_CLAIM, result.params["n"][ok], result.outputs["total"][ok][:, j]
            ),
            note=f"relative covariance error at t = {f:g} t* (sampling error included)",
        )


def _stability_ratio(config, run, Q, K, V, alpha0, cov0, ax):
    field = pm.variant_field("softmax", Q, K, V)
    shift = 0.4 * np.ones(config.d) / np.sqrt(config.d)
    keys = jax.random.split(jax.random.key(config.seed + 1), config.stability_systems)
    ratios, gaussian = pm.coupled_clouds_ratio(
        field, alpha0, cov0, shift, 1.3, config.stability_n, config.t1, config.steps, keys
    )
    se = float(np.std(ratios, ddof=1) / np.sqrt(ratios.size))
    run.save_arrays(
        stability_particle_ratios=ratios, dims={"stability_particle_ratios": ("system",)}
    )
    run.scalar("stability_ratio_at_t1", float(ratios.mean()))
    run.evidence(
        "stability_ratio_particles_vs_gaussian_ode",
        claims.stability_ratio(ratios, gaussian),
        note=f"mean over {ratios.size} samples of n={config.stability_n}, exact W2",
    )
    ax.errorbar([config.t1], [ratios.mean()], yerr=[3 * se], fmt="o", label="particles (3 SE)")
    ax.plot([0.0, config.t1], [1.0, gaussian], "k-", label="Gaussian ODE, BW")
    ax.set(xlabel="t", ylabel="W2(mu_t, nu_t) / W2(mu_0, nu_0)")
    ax.legend(fontsize=7)
