"""``pde-meanfield``: particles sampled from ``N(alpha_0, Sigma_0)`` against the Gaussian ODE
(docs/transformer_pde.md, "Mean-field limit").

Per Gaussian-closed variant, one sweep over ``n`` x systems of
:func:`jaxdyn.meanfield.meanfield_error`: the dynamic error (initial sampling error subtracted)
must fall like ``n^{-1/2}``; a deliberately wrong closure (``DriftedClosure``, drift
``closure_bias``) must be detected by the same check; the stability ratio of two coupled
particle clouds must match the Gaussian ODE's Bures-Wasserstein ratio within its standard error.
"""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status, fit_power_law
from jaxdyn.evidence import ErrorModel, Verdict, ensemble_mean, rate, within
from jaxdyn.meanfield import (
    RK4,
    blowup_time,
    claims,
    empirical_mean_cov,
    meanfield_error,
    simulate_gaussian,
    simulate_particles,
    softmax_identity_covariance,
)
from jaxdyn.meanfield._analysis import bures_wasserstein, wasserstein2_exact
from jaxdyn.meanfield._blowup import l2_growth_rate, near_blowup_lag
from jaxdyn.meanfield._meanfield_limit import (
    antithetic_gaussian_sample,
    closure_defect,
    near_blowup_problem,
    rk4_linear_bound,
)
from jaxdyn.meanfield.fields import QuadraticKeySoftmax, Softmax
from jaxdyn.meanfield.fields._wrappers import DriftedClosure
from jaxdyn.plotting import new_figure, note_excluded
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid

from ._common import CLOSED_VARIANTS, check_variants, initial_gaussian, make_field, random_weights


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeanFieldConfig(ExperimentConfig):
    """Particles vs the Gaussian ODE (transformer_pde.md, "Mean-field limit and stability").

    Samples are antithetic (``alpha_0 +- z``); ``weight_scale`` sets ``Q, K`` (the dynamic
    error's constant grows steeply with the interaction strength, see the docs). The closure
    probe is run on the first variant. ``deferred_variants`` are reported ``inconclusive``
    without a run (their rate check needs the full size). ``stability_*``: two clouds coupled
    by the affine OT map between ``N(alpha_0, Sigma_0)`` and
    ``N(alpha_0 + shift, stretch^2 Sigma_0)``.
    """

    d: int = 2
    variants: tuple[str, ...] = CLOSED_VARIANTS
    # n >= 256: below it a correction of order 1/n flattens the decay (docs, findings)
    n_values: tuple[int, ...] = (256, 1024, 2048)
    # the samples per size come from the power computation of the rate claim
    # (claims.rate_samples(n_values, noise=0.5), the measured log scatter of one sample's
    # dynamic error): power 0.8 to reject slopes -0.5 +- 0.2 at 99% confidence
    # Sinkhorn's velocity costs iterations x n^2 log-sum-exp terms per stage
    sinkhorn_n_values: tuple[int, ...] = (128, 256, 512)
    systems: int = 43
    # one sample's log dynamic error scatters twice as much for Sinkhorn: 64 samples per n
    # decide its rate (docs, findings)
    sinkhorn_systems: int = 64
    t1: float = 1.0
    steps: int = 20
    weight_scale: float = 0.25
    weight_seed: int = 3
    # converged at these weights: the closure defect agrees to 4 digits at 5, 10 and 30
    # iterations; the mean velocity's gap to V m is 8e-17 at 10 (docs, findings)
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
        if self.d < 1:
            raise ConfigError(f"d must be >= 1, got {self.d}")
        check_variants(self.variants, CLOSED_VARIANTS, self.d)
        if not set(self.deferred_variants) <= set(self.variants) - {self.variants[0]}:
            raise ConfigError(
                "deferred_variants must be variants other than the first (the probe's), got "
                f"{self.deferred_variants}"
            )
        for name in ("n_values", "sinkhorn_n_values"):
            sizes = getattr(self, name)
            if len(sizes) < 2 or any(n < 2 or n % 2 for n in sizes):
                raise ConfigError(f"{name} needs >= 2 even sizes, got {sizes}")
            if any(max(sizes) % n for n in sizes):
                raise ConfigError(f"every n must divide max({name}), got {sizes}")
        if min(self.systems, self.sinkhorn_systems, self.stability_systems) < 3:
            raise ConfigError(
                "systems, sinkhorn_systems and stability_systems must be >= 3 (standard errors)"
            )
        if not self.t1 > 0 or self.steps < 1:
            raise ConfigError(f"t1 must be positive and steps >= 1, got {self.t1}, {self.steps}")
        if self.sinkhorn_iterations < 1:
            raise ConfigError(f"sinkhorn_iterations must be >= 1, got {self.sinkhorn_iterations}")
        if not self.closure_bias > 0 or not self.weight_scale > 0:
            raise ConfigError("closure_bias and weight_scale must be positive")
        near = self.near_n_values
        if near and (any(n < 2 or n % 2 or max(near) % n for n in near) or len(near) < 2):
            raise ConfigError(f"near_n_values: >= 2 even sizes dividing the largest, got {near}")
        fr = self.near_fractions
        if near and (not fr or list(fr) != sorted(fr) or not 0 < fr[0] <= fr[-1] < 1):
            raise ConfigError(f"near_fractions must increase within (0, 1), got {fr}")
        if near and (self.near_systems < 2 or self.near_steps < 1):
            raise ConfigError("near_systems must be >= 2 and near_steps >= 1")
        if self.stability_n < 4:
            raise ConfigError(f"stability_n must be >= 4, got {self.stability_n}")
        defect = self.defect_n_values
        if defect and (len(defect) < 2 or any(n < 2 or n % 2 for n in defect)):
            raise ConfigError(f"defect_n_values: >= 2 even sizes, got {defect}")
        if defect and self.defect_systems < 2:
            raise ConfigError(f"defect_systems must be >= 2, got {self.defect_systems}")

    @classmethod
    def quick(cls) -> dict:
        return {
            "n_values": (32, 256),
            "sinkhorn_n_values": (32, 128),
            "systems": 8,
            "sinkhorn_systems": 8,
            "stability_n": 96,
            "stability_systems": 4,
            "l2_draws": 8,
            # the near-blow-up rate needs the full sizes (2 sizes x 4 samples decided
            # nothing): quick reports it inconclusive without running it
            "near_n_values": (),
            # multi-head's rate is its only check here and quick cannot decide it
            "deferred_variants": ("multihead",),
            # Sinkhorn's closure defect reaches its n^-1 only from n of a few hundred on
            "defect_n_values": (),
        }


def _error_sweep(config, run, name, field, alpha0, cov0, n_values, systems, drifts=(0.0,)):
    """One sweep over ``drift x n x systems``: the particles move with ``field``, the Gaussian
    ODE is ``DriftedClosure(field, drift e_1)`` (``drift = 0``: the field's own closure, exactly;
    another value: the biased closure of the probe, in the same compiled program). Returns one
    result per drift."""
    n_max = max(n_values)
    half = n_max // 2
    e1 = np.eye(config.d)[0]

    def member(params, key):
        # The n-point antithetic sample, each point repeated n_max / n times: the same empirical
        # measure (so the same dynamics) with a static shape, one compilation for every n.
        x = antithetic_gaussian_sample(key, alpha0, cov0, n_max)
        z_index = jnp.arange(half) % (params["n"] // 2)
        x_n = jnp.concatenate([x[:half][z_index], x[half:][z_index]])
        closure = DriftedClosure(field, params["drift"] * e1)
        err = meanfield_error(closure, x_n, alpha0, cov0, config.t1, steps=config.steps)
        return {
            "initial": err.initial,
            "total": err.total,
            "dynamic": err.dynamic,
            "mean_gap": err.mean_gap,
            "moment_gap": err.moment_gap,
            "status": err.status,
        }

    grid = Grid.product(
        {"drift": np.asarray(drifts, float), "n": np.array(n_values)},
        seeds=systems,
        base_seed=config.seed,
    )
    result = run.sweep(name, member, grid, dims={"mean_gap": ("component",)})
    size = int(np.prod(result.grid_shape[1:]))
    return [
        result.select(slice(i * size, (i + 1) * size), result.grid_shape[1:], result.axes[1:])
        for i in range(len(drifts))
    ]


RATE_CLAIM = "the particles' dynamic error decays like n^-1/2 (mean-field limit)"


def _rate_evidence(result):
    ok = result.ok()
    return claims.meanfield_rate(RATE_CLAIM, result.params["n"][ok], result.outputs["dynamic"][ok])


def _rate_check(run, name, result, note):
    run.evidence(name, _rate_evidence(result), note=note)
    return _dynamic_slope(result)


def _dynamic_slope(result) -> float:
    """The figure legend's fitted exponent of the dynamic error (NaN without two sizes with a
    positive error: linear attention's is at the round-off floor, often exactly 0)."""
    n, err = result.params["n"][result.ok()], result.outputs["dynamic"][result.ok()]
    keep = np.isfinite(err) & (err > 0)
    return fit_power_law(n[keep], err[keep]).slope if np.unique(n[keep]).size > 1 else np.nan


def _synthetic_errors(n_values, systems, rate, floor, seed):
    """Errors ``c n^rate + floor`` with the log-normal scatter of the measured dynamic errors
    (log standard deviation 0.5): the counterfactuals of the rate check."""
    rng = np.random.default_rng(seed)
    n = np.repeat(np.asarray(n_values, dtype=float), systems)
    return n, (0.05 * n**rate + floor) * np.exp(0.5 * rng.standard_normal(n.size))


@negative_control("pde-meanfield", "dynamic_error_rate")
def _rate_of_a_biased_closure():
    # a closure converging to another limit: the error stops decaying at a floor of 3e-3
    # (the measured dynamic errors are ~1e-3..1e-2 at these n)
    n, err = _synthetic_errors((32, 64, 128, 256), 16, -0.5, 3e-3, seed=0)
    return claims.meanfield_rate(RATE_CLAIM, n, err)


@register_experiment(
    "pde-meanfield",
    MeanFieldConfig,
    "particles vs the Gaussian ODE: dynamic error ~ n^-1/2, closure-bias probe, stability ratio",
    title="the mean-field limit of the particles",
    docs="transformer_pde.md#the-mean-field-limit-_meanfield_limitpy",
)
def run_pde_meanfield(config: MeanFieldConfig, run: Run) -> None:
    alpha0, cov0 = initial_gaussian(config.d)
    Q, K, V = random_weights(config.weight_seed, config.d, config.weight_scale)
    fig, axes = new_figure(1, 2, width=4.6)
    for variant in config.variants:
        if variant in config.deferred_variants:
            run.not_run(
                f"dynamic_error_rate[{variant}]",
                RATE_CLAIM,
                needs={"deferred_variants": list(type(config)().deferred_variants)},
                full_size=True,
                why=f"{variant}: log BW vs log n over n = {list(type(config)().n_values)}",
            )
            continue
        field = make_field(variant, Q, K, V, sinkhorn_iterations=config.sinkhorn_iterations)
        sizes = config.sinkhorn_n_values if variant == "sinkhorn" else config.n_values
        systems = config.sinkhorn_systems if variant == "sinkhorn" else config.systems
        # The closure probe (the first variant with a biased closure) shares its program.
        probe = variant == config.variants[0]
        drifts = (0.0, config.closure_bias) if probe else (0.0,)
        result, *probe_result = _error_sweep(
            config, run, f"meanfield_{variant}", field, alpha0, cov0, sizes, systems, drifts
        )
        if variant == "sinkhorn":
            _sinkhorn_mean_decoupled(config, run, result, alpha0, V)
            _sinkhorn_defect(config, run, field, alpha0, cov0)
        if variant == "linear":
            slope = _exact_closure_check(config, run, result, cov0)
        else:
            slope = _rate_check(
                run, f"dynamic_error_rate[{variant}]", result, f"{variant}: log BW vs log n"
            )
        rms = {k: _rms_by_n(result, k) for k in ("initial", "total", "dynamic")}
        for k, values in rms.items():
            run.scalar(f"{variant}_{k}_error_at_n_max", float(values[-1]))
        run.save_arrays(  # RMS over systems per n (the sweep's own outputs keep their names)
            **{f"meanfield_{variant}_rms_{k}": v for k, v in rms.items()},
            coords={f"meanfield_{variant}_n": np.asarray(sizes)},
            dims={f"meanfield_{variant}_rms_{k}": (f"meanfield_{variant}_n",) for k in rms},
        )
        axes[0, 0].loglog(sizes, rms["dynamic"], "o-", label=f"{variant} ({slope:.2f})")
        axes[0, 0].loglog(sizes, rms["total"], ":", color="0.6")
        note_excluded(axes[0, 0], result.n_failed(), len(result.status))
        if probe:
            _closure_probe(config, run, variant, probe_result[0], sizes, axes[0, 0])
    axes[0, 0].set_xlabel("particles n")
    axes[0, 0].set_ylabel("RMS BW at t1 (dotted: total, solid: dynamic)")
    axes[0, 0].legend(fontsize=6)
    if config.l2_draws:
        _l2_bounded(config, run)
    if config.near_n_values:
        _near_blowup(config, run)
    else:
        for f in config.near_fractions:
            run.not_run(
                f"near_blowup_error_rate[{f:g}]",
                RATE_CLAIM,
                needs={"near_n_values": list(type(config)().near_n_values)},
                full_size=True,
                why=f"relative covariance error at t = {f:g} t* against n",
            )
    _stability_ratio(config, run, Q, K, V, alpha0, cov0, axes[0, 1])
    run.save_figure(fig, "meanfield_error_and_stability")


def _exact_closure_check(config, run, result, cov0):
    """Linear attention's moments obey the closure for every measure: its dynamic error (the
    moment gap, without the BW formula's sqrt(eps) floor) is solver error only. Error model:
    the Gaussian solves run at rtol 1e-10; their global error stays below 100 rtol times the
    scale of Sigma; RK4's error at these steps is smaller still."""
    ok = result.ok()
    gap = float(np.max(result.outputs["moment_gap"][ok]))
    run.evidence(
        "linear_closure_exact_for_every_sample",
        _linear_closure_evidence(gap, float(np.trace(cov0))),
        note="max over runs of (|m_t - alpha_t|^2 + |C_t - Sigma_t|_F^2)^1/2, ODE from the "
        "sample's own moments (no n^-1/2 part)",
    )
    return _dynamic_slope(result)


def _linear_closure_evidence(gap, scale):
    return within(
        "linear attention's moments obey the Gaussian closure for every measure",
        prediction=0.0,
        measured=gap,
        error_model=ErrorModel.solver_tolerance(
            100 * 1e-10 * scale, basis="100 rtol (1e-10) times tr Sigma_0: Gaussian solves"
        ),
    )


@negative_control("pde-meanfield", "linear_closure_exact_for_every_sample")
def _closure_gap_of_softmax():
    # softmax's moments do not close on a non-Gaussian sample: its moment gap at these sizes
    # is ~1e-3 (the dynamic error of the rate check)
    return _linear_closure_evidence(1e-3, 1.2)


def _sinkhorn_mean_decoupled(config, run, result, alpha0, V):
    """The particles' mean against ``exp(t V) m_0``: an identity of the column-normalised
    coupling (its column marginal is ``mu``, so the mean moves by ``V m`` for every measure),
    which only a code bug can break: a consistency check, not evidence."""
    ok = result.ok()
    gap = float(np.max(np.linalg.norm(result.outputs["mean_gap"][ok], axis=-1)))
    size = float(np.linalg.norm(alpha0))
    bound = rk4_linear_bound(V, config.t1, config.steps, size) + 1e-9 * size
    run.consistency(
        "sinkhorn_mean_decoupled_from_covariance",
        expected=0.0,
        measured=gap,
        tolerance=bound,
        basis="RK4 remainder bound on the linear mean ODE plus 1e-9 |alpha_0| (the Sinkhorn "
        "column marginals at convergence)",
        note="max over members of |m_t - exp(t V) m_0| for the particles' mean m",
    )


SINKHORN_DEFECT = (
    "Sinkhorn's closure defect on a Gaussian sample (the particles' d Sigma/dt against the "
    "Gaussian ODE's at the sample's own moments) is of second order: ~ n^-1"
)


def _defect_evidence(n, defect):
    return rate(SINKHORN_DEFECT, n, defect, prediction=-1.0, alternatives=(-0.5, 0.0))


@negative_control("pde-meanfield", "sinkhorn_closure_defect_second_order")
def _first_order_defect():
    # a defect of first order, as softmax's: n^-1/2 with the measured log scatter
    n, err = _synthetic_errors((256, 512, 1024, 2048, 4096), 16, -0.5, 0.0, seed=3)
    return _defect_evidence(n, err)


def _sinkhorn_defect(config, run, field, alpha0, cov0):
    """[derived] Sinkhorn's closure has no first-order defect: ``F(A, mu) = sup_pi int y^T A x
    dpi - KL(pi | mu x mu)`` has ``dF/dA = E_pi[y x^T]`` and first variation ``int (f + g) d nu``
    with the potentials ``f, g``, quadratic for a Gaussian ``mu`` and every ``A``; so along
    every ``nu`` keeping mass, mean and covariance the variation of ``E_pi[y x^T]``, hence of
    ``d Sigma/dt``, vanishes, and the defect of a sample is ``O(|mu_n - G_n|^2) = O(1/n)``.
    One compiled program per ``n`` (the cost is ``iterations n^2`` per sample)."""
    if not config.defect_n_values:
        run.not_run(
            "sinkhorn_closure_defect_second_order",
            SINKHORN_DEFECT,
            needs={"defect_n_values": list(type(config)().defect_n_values)},
            full_size=True,
            why="the closure defect at t = 0 against n",
        )
        return
    n_all, defects = [], []
    for n in config.defect_n_values:

        def one(key, n=n):
            return closure_defect(field, antithetic_gaussian_sample(key, alpha0, cov0, n))

        keys = jax.random.split(jax.random.key(config.seed + 41 + n), config.defect_systems)
        defects.append(np.asarray(jax.jit(jax.vmap(one))(keys)))
        n_all.append(np.full(config.defect_systems, n))
    n_all, defects = np.concatenate(n_all), np.concatenate(defects)
    run.report(
        "sinkhorn_closure_defect_rms",
        measured=np.sqrt(np.mean(defects.reshape(len(config.defect_n_values), -1) ** 2, 1)),
        note=f"RMS over {config.defect_systems} antithetic samples; n = "
        f"{list(config.defect_n_values)}",
    )
    run.evidence(
        "sinkhorn_closure_defect_second_order",
        _defect_evidence(n_all, defects),
        note="log closure defect at t = 0 vs log n (the dynamic error is its integral)",
    )


L2_BOUNDED = "L2 attention never blows up: |Sigma(t)| <= |Sigma_0| exp(r t), r = 2|V||A|/lmin(K^TK)"


def _l2_bounded_evidence(growth, reached):
    return claims.bounded_growth(
        L2_BOUNDED,
        growth,
        reached,
        relative_error=1e-6,
        basis="rtol 1e-8 Gaussian solves: global error below 100 rtol",
    )


def _l2_bounded_decision(growth, reached, growth_at_stop):
    """``(evidence, failed)``: a draw whose solve stopped early (``max_steps``) with its last
    state inside the bound (``growth_at_stop <= 1``) is a numerical failure of that draw, not
    a blow-up (a blow-up leaves every exponential bound before the solver stalls): it is left
    out of the decision; a draw that stopped beyond the bound, or not finite, refutes."""
    growth, reached = np.asarray(growth, float), np.asarray(reached, bool)
    at_stop = np.asarray(growth_at_stop, float)
    failed = ~reached & np.isfinite(at_stop) & (at_stop <= 1.0)
    if failed.all():
        return claims.not_run(L2_BOUNDED, 1.0, (), "every draw failed numerically"), failed
    return _l2_bounded_evidence(growth[~failed], reached[~failed]), failed


@negative_control("pde-meanfield", "l2_bounded_for_random_v")
def _softmax_growth_past_its_blowup():
    # the same decision on softmax draws past their blow-up: solves stop early
    return _l2_bounded_evidence([0.2, 0.5, np.inf], [True, True, False])


def _l2_bounded(config, run):
    """Random ``Q, K, V`` (``V`` general: non-symmetric, indefinite), ``Sigma_0`` random; the
    horizon is ``l2_horizon`` times the softmax Gaussian's blow-up time with the same weights
    (draws where softmax does not blow up by ``t = 50`` use ``t = 50``)."""
    d = config.d
    rng = np.random.default_rng(config.seed + 23)
    Qs = rng.standard_normal((config.l2_draws, d, d))
    Ks = rng.standard_normal((config.l2_draws, d, d))
    Vs = rng.standard_normal((config.l2_draws, d, d))
    G = rng.standard_normal((config.l2_draws, d, d))
    covs = G @ np.transpose(G, (0, 2, 1)) / d + 0.1 * np.eye(d)
    mean = np.zeros(d)
    saves = 9

    def solve(Q, K, V, cov, T, l2):
        # Softmax (l2 false): its stop time, with the blow-up and PSD events and
        # simulate_gaussian's default tolerances. L2: its growth up to T at atol 1e-12, with
        # no event that can fire (growth is what is measured). One field (softmax_or_l2) and
        # traced options: one compiled program for both.
        field = QuadraticKeySoftmax.softmax_or_l2(Q, K, V, l2)
        sol = simulate_gaussian(
            field,
            mean,
            cov,
            T,
            ts=jnp.linspace(0.0, T, saves),
            rtol=1e-8,
            atol=jnp.where(l2, 1e-12, 1e-10),
            max_steps=16384,
            blowup_trace=jnp.where(l2, jnp.inf, 1e6),
            psd_tol=jnp.where(l2, jnp.inf, 1e-6),
        )
        size = jnp.linalg.norm(sol.covs, ord=2, axis=(1, 2))
        final = jnp.linalg.norm(sol.final_cov, ord=2)
        return sol.t_final, size, final, sol.status == Status.successful

    solve_all = jax.jit(jax.vmap(solve))
    no = np.zeros(config.l2_draws, bool)
    t_soft = np.asarray(solve_all(Qs, Ks, Vs, covs, np.full(config.l2_draws, 50.0), no)[0])
    horizons = config.l2_horizon * np.minimum(t_soft, 50.0)
    t_end, sizes, final, reached = map(np.asarray, solve_all(Qs, Ks, Vs, covs, horizons, ~no))
    rates = np.array(
        [
            l2_growth_rate(np.asarray(make_field("l2", Q, K, V).A()), K, V)
            for Q, K, V in zip(Qs, Ks, Vs, strict=True)
        ]
    )
    ts = np.linspace(0.0, 1.0, saves)[None, :] * horizons[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        growth = sizes[:, 1:] / (sizes[:, :1] * np.exp(rates[:, None] * ts[:, 1:]))
        growth_at_stop = final / (sizes[:, 0] * np.exp(rates * t_end))
    evidence, failed = _l2_bounded_decision(growth, reached, growth_at_stop)
    run.report(
        "l2_draws_failed_numerically",
        measured=np.flatnonzero(failed),
        note="draws whose solve stopped early inside the growth bound (t = "
        f"{[round(float(t), 3) for t in t_end[failed]]}): left out",
    )
    run.report("l2_horizon_over_softmax_stop", measured=horizons / np.minimum(t_soft, 50.0))
    run.report("softmax_stop_times", measured=t_soft)
    if np.any(~failed):
        run.report("l2_largest_growth_fraction_of_bound", measured=float(np.max(growth[~failed])))
    run.evidence(
        "l2_bounded_for_random_v",
        evidence,
        note=f"{config.l2_draws} random draws (Q, K, V standard normal, d = {d}), horizon "
        f"{config.l2_horizon:g} x the softmax stop time",
    )


@negative_control("pde-meanfield", "near_blowup_particles_lag")
def _lag_of_a_random_shift():
    # a random shift of each sample's blow-up time: ratios on both sides of 1
    rng = np.random.default_rng(5)
    return claims.particles_lag_their_gaussian(np.exp(0.3 * rng.standard_normal(8)))


@negative_control("pde-meanfield", "near_blowup_error_rate")
def _near_blowup_error_of_a_shifted_blowup_time():
    # a limit that differs from the Gaussian's (an error floor of 5%) near the blow-up
    n, err = _synthetic_errors((64, 256, 1024, 4096), 8, -0.5, 0.05, seed=2)
    return claims.meanfield_rate(RATE_CLAIM, n, err)


def _near_blowup(config, run):
    """Softmax, ``V = I``, ``A + A^T`` positive definite: particles from ``N(0, Sigma_0)``
    against the closed form ``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}`` at fractions of the
    blow-up time ``t*``. The error is the relative spectral-norm error of the particles'
    covariance, against the closed form from ``Sigma_0`` (total) and from the sample's own
    covariance (dynamic, whose own ``t*`` differs by the sampling error)."""
    d = config.d
    A, cov0 = near_blowup_problem(d, config.seed)
    t_star = float(blowup_time(cov0, A))
    fractions = np.asarray(config.near_fractions)
    ts = np.concatenate([[0.0], fractions * t_star])
    field = Softmax(Q=np.sqrt(d) * A, K=np.eye(d), V=np.eye(d))
    n_max = max(config.near_n_values)
    half = n_max // 2
    mean0 = np.zeros(d)

    def member(params, key):
        x = antithetic_gaussian_sample(key, mean0, cov0, n_max)
        z_index = jnp.arange(half) % (params["n"] // 2)
        x = jnp.concatenate([x[:half][z_index], x[half:][z_index]])
        sol = simulate_particles(
            field,
            x,
            ts[-1],
            dt0=ts[-1] / config.near_steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
            save_fn=lambda t, y: empirical_mean_cov(y)[1],
        )
        covs = sol.xs
        c0 = covs[0]

        def rel(c, ref):
            return jnp.linalg.norm(c - ref, ord=2) / jnp.linalg.norm(ref, ord=2)

        exact = jax.vmap(lambda t: softmax_identity_covariance(cov0, A, t))(ts[1:])
        own = jax.vmap(lambda t: softmax_identity_covariance(c0, A, t))(ts[1:])
        lag, bound = near_blowup_lag(x, covs[1:], A, ts[1:])
        return {
            "total": jax.vmap(rel)(covs[1:], exact),
            "dynamic": jax.vmap(rel)(covs[1:], own),
            "lag": lag,
            "lag_bound": bound,
            "status": sol.status,
        }

    grid = Grid.product(
        {"n": np.array(config.near_n_values)}, seeds=config.near_systems, base_seed=config.seed
    )
    result = run.sweep("near_blowup", member, grid)
    ok = result.ok()
    n = result.params["n"][ok]
    for key in ("total", "dynamic"):
        values = np.where(ok[:, None], result.outputs[key], np.nan)
        rms = np.sqrt(np.nanmean(values.reshape(result.grid_shape + (fractions.size,)) ** 2, 1))
        run.save_arrays(**{f"near_blowup_{key}": rms})
        run.report(
            f"near_blowup_{key}_relative_error",
            measured=rms,
            note=f"RMS over systems; rows n = {list(config.near_n_values)}, columns t/t* = "
            f"{list(config.near_fractions)}; t* = {t_star:.4g}",
        )
    run.report(
        "near_blowup_members_failed",
        measured=int(result.n_failed()),
        note="members whose particles blew up (or failed) before the last fraction: left out",
    )
    lag = np.where(ok[:, None], result.outputs["lag"], np.nan)
    bound = np.where(ok[:, None], result.outputs["lag_bound"], np.nan)
    largest = result.params["n"] == max(config.near_n_values)
    run.save_arrays(near_blowup_lag=lag, near_blowup_lag_bound=bound)
    run.report(
        "near_blowup_lag_minus_one",
        measured=np.nanmean(lag[largest], axis=0) - 1.0,
        note="signed: mean over systems at the largest n of lambda_max(particles) / "
        f"lambda_max(their own Gaussian) - 1, columns t/t* = {list(config.near_fractions)}",
    )
    run.consistency(
        "near_blowup_lag_within_the_extreme_value_bound",
        expected=True,
        measured=bool(np.all((lag <= bound * (1 + 1e-9)) | np.isnan(lag))),
        basis="V = I: |x_i(t)| <= max_j |x_j(0)| e^t (convex combinations), so the particles' "
        "top eigenvalue is at most max_j |x_j(0)|^2 e^{2t}",
    )
    for j, f in enumerate(fractions):
        run.evidence(
            f"near_blowup_particles_lag[{f:g}]",
            claims.particles_lag_their_gaussian(lag[largest][:, j], where=f"t = {f:g} t*"),
            note=f"n = {max(config.near_n_values)}, {int(np.sum(largest & ok))} systems",
        )
        run.evidence(
            f"near_blowup_error_rate[{f:g}]",
            claims.meanfield_rate(RATE_CLAIM, n, result.outputs["total"][ok][:, j]),
            note=f"relative covariance error at t = {f:g} t* against the closed form from "
            "Sigma_0 (sampling error included: particles from N(0, Sigma_0) vs the Gaussian ODE)",
        )


def _rms_by_n(result, key):
    values = np.where(result.ok(), result.outputs[key], np.nan).reshape(result.grid_shape)
    return np.sqrt(np.nanmean(values**2, axis=1))


def _closure_probe(config, run, variant, result, sizes, ax):
    """The error sweep for a closure off by ``closure_bias``: the rate check must fail."""
    ok = result.ok()
    evidence = _rate_evidence(result)
    gap = result.outputs["mean_gap"][ok][:, 0]
    se = float(np.std(gap, ddof=1) / np.sqrt(gap.size))
    run.report("closure_probe_rate", measured=evidence.measured, note=evidence.reason)
    run.report("closure_probe_mean_gap", measured=float(np.mean(gap)), note=f"SE {se:.2e}")
    run.consistency(
        "closure_bias_is_not_called_holds",
        expected=1,
        measured=int(evidence.verdict is not Verdict.holds),
        basis="the rate check must have the power to see a closure off by closure_bias",
        note=f"{variant} with its closure's c shifted by {config.closure_bias:g}: rate verdict "
        f"{evidence.verdict.value}",
    )
    ax.loglog(sizes, _rms_by_n(result, "dynamic"), "k--", label="probe")


def _stability_ratio_evidence(ratios, gaussian_ratio):
    return ensemble_mean(
        "W2(mu_t, nu_t) / W2(mu_0, nu_0) of coupled particle clouds equals the Gaussian ODE's "
        "Bures-Wasserstein ratio",
        np.asarray(ratios)[:, None],
        prediction=[gaussian_ratio],
        alternative=[1.0],  # the distance carried unchanged (no dynamics)
    )


@negative_control("pde-meanfield", "stability_ratio_particles_vs_gaussian_ode")
def _stability_ratio_of_frozen_clouds():
    rng = np.random.default_rng(0)
    return _stability_ratio_evidence(1.0 + 0.01 * rng.standard_normal(8), 0.9)


def _stability_ratio(config, run, Q, K, V, alpha0, cov0, ax):
    """W2(mu_t, nu_t) / W2(mu_0, nu_0) of coupled clouds vs the Gaussian ODE's BW ratio.

    The particle ratio is averaged over ``stability_systems`` samples and compared within 3
    standard errors (the check used a fixed 25% relative tolerance before).
    """
    field = make_field("softmax", Q, K, V)
    shift, stretch = 0.4 * np.ones(config.d) / np.sqrt(config.d), 1.3
    ts = np.array([0.0, config.t1])

    def pair(key):
        x0 = antithetic_gaussian_sample(key, alpha0, cov0, config.stability_n)
        y0 = alpha0 + shift + stretch * (x0 - alpha0)  # OT map: identity assignment optimal
        flow = jax.vmap(
            lambda x: (
                simulate_particles(
                    field,
                    x,
                    config.t1,
                    dt0=config.t1 / config.steps,
                    solver=RK4(),
                    stepsize_controller=diffrax.ConstantStepSize(),
                    blowup_norm=None,
                ).final_x
            )
        )
        return x0, y0, flow(jnp.stack([x0, y0]))

    keys = jax.random.split(jax.random.key(config.seed + 1), config.stability_systems)
    ratios = []
    for key in keys:
        x0, y0, (xt, yt) = jax.jit(pair)(key)
        ratios.append(wasserstein2_exact(xt, yt) / wasserstein2_exact(x0, y0))
    ratios = np.array(ratios)

    def gaussian(mean, cov):
        # no events: the weak field does not blow up by t1 (a blow-up would show as a
        # non-finite ratio), so the solve needs no root finder
        sol = simulate_gaussian(
            field, mean, cov, config.t1, rtol=1e-10, atol=1e-12, blowup_trace=None, psd_tol=None
        )
        return sol.final_mean, sol.final_cov

    (m0, m1), (c0, c1) = jax.jit(jax.vmap(gaussian))(
        jnp.stack([alpha0, alpha0 + shift]), jnp.stack([cov0, stretch**2 * cov0])
    )
    bw_t = float(bures_wasserstein(m0, c0, m1, c1))
    bw_0 = float(bures_wasserstein(alpha0, cov0, alpha0 + shift, stretch**2 * cov0))
    se = float(np.std(ratios, ddof=1) / np.sqrt(ratios.size))
    run.save_arrays(
        stability_particle_ratios=ratios,
        stability_ts=ts,
        dims={"stability_particle_ratios": ("system",)},
    )
    run.scalar("stability_ratio_at_t1", float(ratios.mean()))
    # The former definition (25% relative tolerance), kept as a reported number.
    run.scalar("stability_ratio_relative_gap", abs(float(ratios.mean()) / (bw_t / bw_0) - 1.0))
    run.evidence(
        "stability_ratio_particles_vs_gaussian_ode",
        _stability_ratio_evidence(ratios, bw_t / bw_0),
        note=f"mean over {ratios.size} samples of n={config.stability_n}, exact W2",
    )
    ax.errorbar([config.t1], [ratios.mean()], yerr=[3 * se], fmt="o", label="particles (3 SE)")
    ax.plot(ts, [1.0, bw_t / bw_0], "k-", label="Gaussian ODE, BW")
    ax.set_xlabel("t")
    ax.set_ylabel("W2(mu_t, nu_t) / W2(mu_0, nu_0)")
    ax.legend(fontsize=7)
