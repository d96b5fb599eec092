"""Experiments of the mean-field Transformer PDE on the particle side (transformer_pde.md).

- ``pde-meanfield``: particles sampled from ``N(alpha_0, Sigma_0)`` against the Gaussian ODE
  for every Gaussian-closed variant; the Bures-Wasserstein error vs ``n`` and its fitted rate
  (theory: ``n^{-1/2}``); the stability ratio ``W_2(mu(t), nu(t)) / W_2(mu_0, nu_0)``.
- ``pde-particles``: clouds for every variant (incl. sigmoid and masked with an attention
  sink), clusters over depth, and the beta (temperature) phase diagram of clustering on the
  sphere as ONE sweep.
- ``pde-energy``: the interaction energy along trajectories (monotone where the theory says),
  the non-convexity witness for ``V = I, A = -I``, Sinkhorn Gaussians vs a Bures-Wasserstein
  gradient step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, status_code, status_message, status_name
from jaxdyn.meanfield import (
    L2,
    Linear,
    Masked,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
    bures_wasserstein,
    bures_wasserstein_geodesic,
    bures_wasserstein_gradient,
    bures_wasserstein_map,
    bures_wasserstein_step,
    detect_clusters,
    empirical_mean_cov,
    fixed_step_particles,
    gaussian_interaction_energy,
    gaussian_sinkhorn_energy,
    geodesic_second_variation,
    interaction_energy,
    optimal_assignment,
    simulate_gaussian,
    sphere_softmax,
    stability_ratio,
    uniform_on_sphere,
)
from jaxdyn.plotting import heatmap, new_figure, note_excluded, time_series
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

CLOSED_VARIANTS = ("softmax", "l2", "sinkhorn", "linear", "multihead")
ALL_VARIANTS = CLOSED_VARIANTS + ("sigmoid", "masked")


def make_attention(variant: str, Q, K, V, *, sinkhorn_iterations: int = 50, positions=None):
    """An attention Module of the named variant from one ``(Q, K, V)`` (``multihead``: 2 heads;
    ``masked``: causal softmax over ``positions`` with an attention sink at position 0)."""
    if variant == "softmax":
        return Softmax(Q=Q, K=K, V=V)
    if variant == "l2":
        return L2(Q=Q, K=K, V=V)
    if variant == "sinkhorn":
        return Sinkhorn(Q=Q, K=K, V=V, iterations=sinkhorn_iterations)
    if variant == "linear":
        return Linear(Q=Q, K=K, V=V)
    if variant == "multihead":
        return MultiHead(Q=Q, K=K, V=V, heads=2)
    if variant == "sigmoid":
        return Sigmoid(Q=Q, K=K, V=V)
    if variant == "masked":
        return Masked(base=Softmax(Q=Q, K=K, V=V), positions=positions, sink=True)
    raise ValueError(f"unknown attention variant {variant!r}")


def _check_variants(variants, allowed, d):
    if not variants:
        raise ConfigError("variants must not be empty")
    bad = [v for v in variants if v not in allowed]
    if bad:
        raise ConfigError(f"unknown variants {bad}; choose from {list(allowed)}")
    if "multihead" in variants and d % 2:
        raise ConfigError(f"multihead uses 2 heads, so d must be even, got d={d}")


def _fit_slope(x, y):
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def _weights(seed: int, d: int, scale: float):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((d, d))
    K = scale * rng.standard_normal((d, d))
    V = np.eye(d) + 0.5 * scale * rng.standard_normal((d, d))
    return Q, K, V


# ---------------------------------------------------------------------------------------
# pde-meanfield
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeanFieldConfig(ExperimentConfig):
    """Particles vs the Gaussian ODE (transformer_pde.md, "Mean-field limit and stability").

    ``n`` runs over ``n_max / r`` for ``r`` in ``repeats``: each of the ``n`` samples is
    repeated ``r`` times, which leaves the empirical measure (hence every variant's dynamics)
    unchanged, so all ``n`` share one compiled sweep.
    """

    d: int = 2
    variants: tuple[str, ...] = CLOSED_VARIANTS
    n_max: int = 512
    repeats: tuple[int, ...] = (16, 8, 4, 2, 1)
    systems: int = 16
    t1: float = 1.0
    steps: int = 20
    weight_scale: float = 0.5
    weight_seed: int = 3
    sinkhorn_iterations: int = 30
    rate_tolerance: float = 0.15
    stability_n: int = 256
    stability_saves: int = 6
    stability_tolerance: float = 0.25

    def validate(self) -> None:
        if self.d < 1:
            raise ConfigError(f"d must be >= 1, got {self.d}")
        _check_variants(self.variants, CLOSED_VARIANTS, self.d)
        if len(self.repeats) < 3:
            raise ConfigError(f"repeats needs at least 3 values to fit a rate, got {self.repeats}")
        for r in self.repeats:
            if r < 1 or self.n_max % r:
                raise ConfigError(f"every repeat must divide n_max={self.n_max}, got {r}")
        if self.systems < 2:
            raise ConfigError(f"systems must be >= 2, got {self.systems}")
        if not self.t1 > 0 or self.steps < 1:
            raise ConfigError(f"t1 must be positive and steps >= 1, got {self.t1}, {self.steps}")
        if self.sinkhorn_iterations < 1:
            raise ConfigError(f"sinkhorn_iterations must be >= 1, got {self.sinkhorn_iterations}")
        if self.stability_n < 2 or self.stability_saves < 2:
            raise ConfigError("stability_n and stability_saves must be >= 2")

    @classmethod
    def quick(cls) -> dict:
        return {
            "n_max": 256,
            "repeats": (8, 4, 2, 1),
            "systems": 8,
            "steps": 5,
            "stability_n": 96,
            "stability_saves": 4,
            "sinkhorn_iterations": 20,
        }


def _initial_gaussian(d: int):
    alpha0 = 0.5 * np.cos(np.arange(d) + 1.0)
    G = np.eye(d) + 0.3 * np.ones((d, d)) / d
    return alpha0, 0.6 * G @ G.T


@register_experiment(
    "pde-meanfield",
    MeanFieldConfig,
    "particles from N(alpha0, Sigma0) vs the Gaussian ODE: BW error ~ n^-1/2, stability ratio",
)
def run_pde_meanfield(config: MeanFieldConfig, run: Run) -> None:
    d, t1 = config.d, config.t1
    alpha0, cov0 = _initial_gaussian(d)
    chol = np.linalg.cholesky(cov0)
    Q, K, V = _weights(config.weight_seed, d, config.weight_scale)
    ns = np.array([config.n_max // r for r in config.repeats])
    fig, axes = new_figure(1, 2, width=4.6)
    ax_err, ax_stab = axes[0]
    ts = np.linspace(0.0, t1, config.stability_saves)
    # one compilation per variant, reused by the stability part below (softmax)
    solve_gaussian = jax.jit(
        lambda att, m, c: simulate_gaussian(att, m, c, t1, ts=ts, rtol=1e-10, atol=1e-12)
    )
    for variant in config.variants:
        att = make_attention(variant, Q, K, V, sinkhorn_iterations=config.sinkhorn_iterations)
        gauss = solve_gaussian(att, alpha0, cov0)
        if not bool(gauss.status == Status.successful):
            run.log(f"{variant}: Gaussian ODE stopped early ({status_message(gauss.status)})")
        g_mean, g_cov = np.asarray(gauss.final_mean), np.asarray(gauss.final_cov)

        def member(params, key, att=att, g_mean=g_mean, g_cov=g_cov):
            z = jax.random.normal(key, (config.n_max, d))
            # n = n_max / r samples, each repeated r times: the same empirical measure
            x0 = alpha0 + z[jnp.arange(config.n_max) // params["repeat"]] @ chol.T
            sol = fixed_step_particles(att, x0, t1, config.steps)
            m, c = empirical_mean_cov(sol.final_x)
            m0, c0 = empirical_mean_cov(x0)
            return {
                "error": bures_wasserstein(m, c, g_mean, g_cov),
                "initial_error": bures_wasserstein(m0, c0, alpha0, cov0),
                "status": sol.status,
            }

        grid = Grid.product(
            {"repeat": np.array(config.repeats)}, seeds=config.systems, base_seed=config.seed
        )
        result = run.sweep(f"meanfield_{variant}", member, grid)
        err = result.reshaped("error")
        ok = result.ok().reshape(result.grid_shape)
        rms = np.array(
            [
                np.sqrt(np.mean(err[i][ok[i]] ** 2)) if ok[i].any() else np.nan
                for i in range(len(ns))
            ]
        )
        slope = _fit_slope(ns, rms) if np.all(np.isfinite(rms)) else float("nan")
        run.scalar(f"{variant}_error_at_n_max", float(rms[np.argmax(ns)]))
        run.check(
            f"{variant}_error_rate_vs_n",
            expected=-0.5,
            measured=slope,
            tolerance=config.rate_tolerance,
            note="slope of log RMS BW(particles, Gaussian ODE) vs log n",
        )
        ax_err.loglog(ns, rms, "o-", label=f"{variant} (slope {slope:.2f})")
        note_excluded(ax_err, result.n_failed(), len(grid))
        run.save_arrays(**{f"meanfield_{variant}.n": ns, f"meanfield_{variant}.rms_error": rms})
    ax_err.loglog(ns, rms[np.argmax(ns)] * np.sqrt(ns.max() / ns), "k--", lw=0.8, label="n^-1/2")
    ax_err.set_xlabel("particles n")
    ax_err.set_ylabel("BW(particles, Gaussian ODE) at t1")
    ax_err.legend(fontsize=7)

    # Stability ratio: two Gaussians coupled by an affine OT map, particles and Gaussian ODE.
    att = make_attention("softmax", Q, K, V)
    shift, stretch = 0.4 * np.ones(d) / np.sqrt(d), 1.3
    beta0, gamma0 = alpha0 + shift, stretch**2 * cov0
    x0 = (
        alpha0
        + np.asarray(jax.random.normal(jax.random.key(config.seed + 1), (config.stability_n, d)))
        @ chol.T
    )
    y0 = beta0 + stretch * (x0 - alpha0)  # OT map between the two Gaussians and the two clouds
    sols = jax.vmap(lambda x: fixed_step_particles(att, x, t1, config.steps, ts=ts))(
        jnp.stack([x0, y0])
    )
    particle_ratio = stability_ratio(sols.xs[0], sols.xs[1])
    g_mu, g_nu = solve_gaussian(att, alpha0, cov0), solve_gaussian(att, beta0, gamma0)
    bw = np.array(
        [
            float(bures_wasserstein(g_mu.means[i], g_mu.covs[i], g_nu.means[i], g_nu.covs[i]))
            for i in range(len(ts))
        ]
    )
    gauss_ratio = bw / bw[0]
    run.save_arrays(
        stability_ts=ts, stability_particles=particle_ratio, stability_gaussian=gauss_ratio
    )
    run.scalar("stability_ratio_at_t1", float(particle_ratio[-1]))
    run.check(
        "stability_ratio_particles_vs_gaussian_ode",
        expected=float(gauss_ratio[-1]),
        measured=float(particle_ratio[-1]),
        tolerance=config.stability_tolerance,
        relative=True,
        note=f"exact W2 of n={config.stability_n} clouds vs Bures-Wasserstein",
    )
    time_series(
        ax_stab,
        ts,
        [particle_ratio, gauss_ratio],
        labels=[f"particles, exact W2 (n={config.stability_n})", "Gaussian ODE, BW"],
        ylabel="W2(mu_t, nu_t) / W2(mu_0, nu_0)",
        title="stability ratio (softmax)",
    )
    run.save_figure(fig, "meanfield_error_and_stability")


# ---------------------------------------------------------------------------------------
# pde-particles
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParticlesConfig(ExperimentConfig):
    """Particle clouds of every variant, clusters over depth, and the beta phase diagram.

    Clouds: ``A = a diag(1, -1, ...)`` (``A + A^T`` indefinite: softmax expands along the first
    axis and contracts along the others; L2 stays bounded). Clusters are counted by
    single linkage at ``cluster_radius`` on the cloud standardised by its RMS radius [open].
    Phase diagram: tokens uniform on the sphere ``S^{phase_d - 1}`` under the sphere-projected
    softmax with ``A = beta I`` (``jaxdyn.meanfield.sphere_softmax``), clusters at chord
    distance ``phase_radius``, ``betas`` log-spaced; one sweep over ``beta`` x systems.
    """

    d: int = 2
    variants: tuple[str, ...] = ALL_VARIANTS
    n: int = 256
    t1: float = 3.0
    steps: int = 60
    snapshots: int = 4
    interaction: float = 1.0
    sinkhorn_iterations: int = 30
    cluster_radius: float = 0.05
    phase_d: int = 3
    phase_n: int = 64
    phase_systems: int = 16
    beta_min: float = 0.5
    beta_max: float = 32.0
    n_betas: int = 16
    phase_t1: float = 30.0
    phase_steps: int = 1000
    phase_saves: int = 16
    phase_radius: float = 0.05

    def validate(self) -> None:
        if self.d < 2:
            raise ConfigError(f"d must be >= 2 to draw clouds, got {self.d}")
        _check_variants(self.variants, ALL_VARIANTS, self.d)
        if self.n < 2 or self.phase_n < 2:
            raise ConfigError("n and phase_n must be >= 2")
        if not self.t1 > 0 or not self.phase_t1 > 0:
            raise ConfigError("t1 and phase_t1 must be positive")
        if self.steps < 1 or self.phase_steps < 1:
            raise ConfigError("steps and phase_steps must be >= 1")
        if self.snapshots < 2 or self.phase_saves < 2:
            raise ConfigError("snapshots and phase_saves must be >= 2")
        if not 0 < self.beta_min < self.beta_max:
            raise ConfigError(f"need 0 < beta_min < beta_max, got {self.beta_min}, {self.beta_max}")
        if self.n_betas < 2 or self.phase_systems < 1:
            raise ConfigError("n_betas must be >= 2 and phase_systems >= 1")
        if self.phase_d < 2:
            raise ConfigError(f"phase_d must be >= 2, got {self.phase_d}")
        # RK4 on the sphere is stable for beta * dt below ~2.8; keep a margin
        if self.beta_max * self.phase_t1 / self.phase_steps > 1.0:
            raise ConfigError(
                f"beta_max * phase_t1 / phase_steps = "
                f"{self.beta_max * self.phase_t1 / self.phase_steps:.2f} > 1: RK4 would be "
                "inaccurate; raise phase_steps"
            )
        if self.cluster_radius <= 0 or self.phase_radius <= 0:
            raise ConfigError("cluster_radius and phase_radius must be positive")

    @classmethod
    def quick(cls) -> dict:
        return {
            "n": 96,
            "steps": 30,
            "phase_n": 32,
            "phase_systems": 4,
            "n_betas": 8,
            "phase_t1": 15.0,
            "phase_steps": 240,
            "beta_max": 16.0,
            "phase_saves": 8,
        }


def _standardised(x):
    m, c = empirical_mean_cov(x)
    return (x - m) / jnp.sqrt(jnp.trace(c) + 1e-300)


@register_experiment(
    "pde-particles",
    ParticlesConfig,
    "particle clouds of every attention variant, clusters over depth, beta phase diagram",
    # small groups keep each group's score blocks in cache on CPUs
    sweep={"vmap_width": 8},
)
def run_pde_particles(config: ParticlesConfig, run: Run) -> None:
    d, n = config.d, config.n
    a = config.interaction
    A_diag = np.where(np.arange(d) == 0, a, -a)
    Q = np.sqrt(d) * np.diag(A_diag)  # A = K^T Q / sqrt(d) = diag(a, -a, ...)
    K = np.eye(d)
    V = np.eye(d)
    key = jax.random.key(config.seed)
    x0 = jax.random.normal(key, (n, d)) @ jnp.diag(jnp.linspace(1.0, 0.6, d))
    positions = jnp.sort(jax.random.uniform(jax.random.fold_in(key, 1), (n,)))
    ts = np.linspace(0.0, config.t1, config.snapshots)
    depth = np.linspace(0.0, config.t1, 3 * (config.snapshots - 1) + 1)  # contains ts
    radius = config.cluster_radius

    nv = len(config.variants)
    fig, axes = new_figure(nv, config.snapshots, width=2.4, height=2.3)
    cluster_counts, final_clouds = {}, {}
    for row, variant in enumerate(config.variants):
        att = make_attention(
            variant, Q, K, V, sinkhorn_iterations=config.sinkhorn_iterations, positions=positions
        )
        sol = jax.jit(
            lambda x, att=att: fixed_step_particles(
                att,
                x,
                config.t1,
                config.steps,
                ts=depth,
                save_fn=lambda t, y: (y, detect_clusters(_standardised(y), radius)[1]),
            )
        )(x0)
        clouds, counts = np.asarray(sol.xs[0]), np.asarray(sol.xs[1]).astype(float)
        finite = np.all(np.isfinite(clouds), axis=(1, 2))
        counts[~finite] = np.nan  # a blown-up cloud has no cluster count
        status = status_code(sol.status)
        cluster_counts[variant] = counts
        final_clouds[variant] = clouds[-1]
        run.save_arrays(**{f"clouds_{variant}": clouds, f"clusters_{variant}": counts})
        run.scalar(f"{variant}_status", status_name(status))
        run.scalar(
            f"{variant}_final_rms_radius",
            float(np.sqrt(np.mean(np.sum((clouds[-1] - clouds[-1].mean(0)) ** 2, -1)))),
        )
        for col, t in enumerate(ts):
            i = int(np.argmin(np.abs(depth - t)))
            ax = axes[row, col]
            pts = clouds[i]
            if variant == "masked":  # colour = position s in [0, 1]; the sink is token 0
                ax.scatter(pts[:, 0], pts[:, 1], s=3, c=np.asarray(positions), cmap="viridis")
                ax.scatter(pts[:1, 0], pts[:1, 1], s=25, marker="*", color="crimson")
            else:
                ax.scatter(pts[:, 0], pts[:, 1], s=3)
            label = f"{counts[i]:.0f} clusters" if finite[i] else "blown up"
            ax.set_title(f"{variant}, t={depth[i]:.2f}, {label}", fontsize=7)
            ax.tick_params(labelsize=6)
            if status != status_code(Status.successful):
                ax.text(
                    0.02,
                    0.02,
                    status_name(status),
                    transform=ax.transAxes,
                    color="crimson",
                    fontsize=7,
                )
    run.save_figure(fig, "clouds")

    fig, axes = new_figure(1, 1, width=5.0)
    time_series(
        axes[0, 0],
        depth,
        [cluster_counts[v] for v in config.variants],
        labels=list(config.variants),
        ylabel=f"clusters (radius {radius}, standardised)",
        xlabel="depth t",
        title="clusters over depth",
    )
    run.save_figure(fig, "clusters_over_depth")
    # L2 stays bounded where softmax expands (transformer_pde.md, particle pictures)
    if "softmax" in config.variants and "l2" in config.variants:
        r_soft = float(np.max(np.linalg.norm(final_clouds["softmax"], axis=-1)))
        r_l2 = float(np.max(np.linalg.norm(final_clouds["l2"], axis=-1)))
        run.check(
            "l2_cloud_stays_smaller_than_softmax",
            expected="l2 < softmax",
            measured=f"l2 {r_l2:.3g} vs softmax {r_soft:.3g}",
            passed=r_l2 < r_soft,
            note="max |x| at t1, A + A^T indefinite",
        )

    _phase_diagram(config, run)


def _phase_diagram(config: ParticlesConfig, run: Run) -> None:
    d, n = config.phase_d, config.phase_n
    betas = np.geomspace(config.beta_min, config.beta_max, config.n_betas)
    ts = np.linspace(0.0, config.phase_t1, config.phase_saves)
    radius = config.phase_radius

    def member(params, key):
        x0 = uniform_on_sphere(key, n, d)
        sol = fixed_step_particles(
            sphere_softmax(params["beta"], d, bounded=True),
            x0,
            config.phase_t1,
            config.phase_steps,
            ts=ts,
            save_fn=lambda t, x: (
                detect_clusters(x, radius)[1],
                jnp.max(jnp.abs(jnp.linalg.norm(x, axis=-1) - 1.0)),
            ),
        )
        counts, drift = sol.xs
        return {"clusters": counts, "norm_drift": jnp.max(drift), "status": sol.status}

    grid = Grid.product({"beta": betas}, seeds=config.phase_systems, base_seed=config.seed)
    result = run.sweep("phase", member, grid)
    clusters = result.reshaped("clusters").astype(float)  # (betas, systems, saves)
    ok = result.ok().reshape(result.grid_shape)
    clusters[~ok] = np.nan
    mean_clusters = np.nanmean(clusters, axis=1)
    run.save_arrays(phase_betas=betas, phase_ts=ts, phase_mean_clusters=mean_clusters)

    fig, axes = new_figure(1, 2, width=4.8)
    heatmap(
        axes[0, 0],
        mean_clusters.T[::-1],
        title="mean number of clusters (sphere)",
        xlabel="beta",
        ylabel="depth t",
        xticklabels=[f"{b:.2g}" for b in betas],
        yticklabels=[f"{t:.1f}" for t in ts[::-1]],
    )
    note_excluded(axes[0, 0], result.n_failed(), len(grid))
    for j in np.linspace(0, len(ts) - 1, 4).astype(int)[1:]:
        axes[0, 1].semilogx(betas, mean_clusters[:, j], "o-", label=f"t = {ts[j]:.1f}")
    axes[0, 1].set_xlabel("beta")
    axes[0, 1].set_ylabel("mean clusters")
    axes[0, 1].legend(fontsize=7)
    run.save_figure(fig, "beta_phase_diagram")

    ok = result.ok()
    drift = float(np.max(result.outputs["norm_drift"][ok])) if ok.any() else np.nan
    run.check(
        "tokens_stay_on_the_sphere",
        expected=0.0,
        measured=drift,
        tolerance=1e-6,
        note="max over members and saves of | |x_i| - 1 | (RK4 drift)",
    )
    # Metastability: more clusters survive at larger beta (lower temperature).
    mid = len(ts) // 2
    rho = _spearman(betas, mean_clusters[:, mid])
    run.scalar("spearman_clusters_vs_beta_mid_depth", rho)
    run.check(
        "clusters_increase_with_beta",
        expected="rho > 0.8",
        measured=f"rho = {rho:.3f}",
        passed=bool(rho > 0.8),
        note=f"Spearman correlation of mean clusters with beta at t = {ts[mid]:.1f}",
    )
    run.check(
        "smallest_beta_reaches_one_cluster",
        expected=1.0,
        measured=float(mean_clusters[0, -1]),
        tolerance=0.0,
        note=f"beta = {betas[0]:.2g}, t = {ts[-1]:.1f}",
    )


def _spearman(x, y) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    if np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


# ---------------------------------------------------------------------------------------
# pde-energy
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnergyConfig(ExperimentConfig):
    """Interaction energy, non-convexity witness, Sinkhorn Gaussians vs BW gradient steps.

    Energy: softmax with ``A = -C^T C`` (decreasing energy), ``A = +C^T C`` (increasing) and a
    random ``V`` (no monotonicity claimed), ``V = I`` in the first two.
    """

    d: int = 2
    n: int = 512
    t1: float = 1.0
    steps: int = 40
    saves: int = 11
    geodesic_n: int = 2000
    geodesic_points: int = 21
    bw_steps: tuple[int, ...] = (4, 8, 16, 32, 64)
    sinkhorn_t1: float = 0.5

    def validate(self) -> None:
        if self.d < 1 or self.n < 2 or self.geodesic_n < 2:
            raise ConfigError("d must be >= 1, n and geodesic_n >= 2")
        if not self.t1 > 0 or not self.sinkhorn_t1 > 0 or self.steps < 1:
            raise ConfigError("t1, sinkhorn_t1 must be positive and steps >= 1")
        if self.saves < 2 or self.geodesic_points < 3:
            raise ConfigError("saves must be >= 2 and geodesic_points >= 3")
        if len(self.bw_steps) < 2 or min(self.bw_steps) < 1:
            raise ConfigError(f"bw_steps needs >= 2 positive values, got {self.bw_steps}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 256, "geodesic_n": 600, "steps": 20, "bw_steps": (4, 8, 16, 32)}


@register_experiment(
    "pde-energy",
    EnergyConfig,
    "interaction energy along trajectories, non-convexity witness, Sinkhorn vs BW gradient step",
)
def run_pde_energy(config: EnergyConfig, run: Run) -> None:
    d = config.d
    rng = np.random.default_rng(config.seed)
    C = rng.standard_normal((d, d)) / np.sqrt(d)
    S = C.T @ C + 0.2 * np.eye(d)
    cases = {
        "decreasing (A = -C^T C, V = I)": (-S, np.eye(d)),
        "increasing (A = +C^T C, V = I)": (0.5 * S, np.eye(d)),
        "random V": (-S, rng.standard_normal((d, d))),
    }
    alpha0, cov0 = np.zeros(d) + 0.3, 0.5 * np.eye(d)
    ts = np.linspace(0.0, config.t1, config.saves)
    x0 = alpha0 + np.sqrt(0.5) * np.asarray(
        jax.random.normal(jax.random.key(config.seed), (config.n, d))
    )
    Qs = np.stack([np.sqrt(d) * A for A, _ in cases.values()])
    Vs = np.stack([V for _, V in cases.values()])

    def trajectory(Q, V):
        att = Softmax(Q=Q, K=jnp.eye(d), V=V)
        sol = fixed_step_particles(
            att, x0, config.t1, config.steps, ts=ts, save_fn=lambda t, x: interaction_energy(att, x)
        )
        gsol = simulate_gaussian(att, alpha0, cov0, config.t1, ts=ts, rtol=1e-10, atol=1e-12)
        g_energy = jax.vmap(lambda m, c: gaussian_interaction_energy(att, m, c))(
            gsol.means, gsol.covs
        )
        return sol.xs, g_energy, sol.status

    energies, g_energies, statuses = jax.jit(jax.vmap(trajectory))(Qs, Vs)
    energies, g_energies = np.asarray(energies), np.asarray(g_energies)
    fig, axes = new_figure(1, 3, width=4.2)
    for i, name in enumerate(cases):
        axes[0, 0].plot(ts, energies[i], label=f"{name}, particles")
        axes[0, 0].plot(ts, g_energies[i], "k:", lw=0.8)
        run.save_arrays(
            **{f"energy_case{i}": energies[i], f"gaussian_energy_case{i}": g_energies[i]}
        )
    axes[0, 0].set_xlabel("t")
    axes[0, 0].set_ylabel("E(mu_t)")
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_title("interaction energy (dotted: Gaussian closed form)", fontsize=9)
    axes[0, 0].legend(fontsize=6)
    inc = np.diff(energies[0])
    dec = np.diff(energies[1])
    run.check(
        "energy_decreases_when_AV_negative",
        expected=0.0,
        measured=float(max(inc.max(), 0.0)),
        tolerance=1e-12 * energies[0, 0],
        note="largest increase between saves, A = -C^T C, V = I",
    )
    run.check(
        "energy_increases_when_AV_positive",
        expected=0.0,
        measured=float(max(-dec.min(), 0.0)),
        tolerance=1e-12 * energies[1, 0],
        note="largest decrease between saves, A = +C^T C, V = I",
    )
    rel = np.max(np.abs(energies[:2] - g_energies[:2]) / g_energies[:2])
    run.check(
        "particle_energy_tracks_gaussian_closed_form",
        expected=0.0,
        measured=float(rel),
        tolerance=6.0 / np.sqrt(config.n),
        note=f"max relative gap over t, n = {config.n} particles (Monte-Carlo error)",
    )

    _nonconvexity(config, run, axes[0, 1])
    _sinkhorn_vs_bw(config, run, axes[0, 2])
    run.save_figure(fig, "energy")
    for i, s in enumerate(np.atleast_1d(status_code(statuses))):
        if s != status_code(Status.successful):
            run.log(f"energy case {i}: {status_message(s)}")


def _nonconvexity(config: EnergyConfig, run: Run, ax) -> None:
    """Second variation of E along W2 geodesics for V = I, A = -I (transformer_pde.md)."""
    d = config.d
    att = Softmax(Q=-np.sqrt(d) * np.eye(d), K=np.eye(d), V=np.eye(d))  # A = -I

    def energy(x):
        return interaction_energy(att, x)

    # 1) a translated Dirac: E(s) = 1/2 exp(-s^2 |v|^2), E''(0) = -|v|^2
    v = np.linspace(1.0, 0.5, d)[None, :]
    e2_dirac = float(geodesic_second_variation(energy, np.zeros((1, d)), v, 0.0))
    run.check(
        "dirac_translation_second_variation",
        expected=-float(np.sum(v**2)),
        measured=e2_dirac,
        tolerance=1e-10,
        note="E''(0) = -|v|^2 < 0: not convex",
    )
    # 2) a Bures-Wasserstein geodesic between two narrow Gaussians: particles vs closed form
    m0, m1 = np.zeros(d), np.linspace(1.5, 0.0, d)
    c0 = 0.05 * np.eye(d)
    c1 = 0.1 * np.diag(np.linspace(1.0, 0.3, d))
    T = np.asarray(bures_wasserstein_map(c0, c1))
    z = np.asarray(jax.random.normal(jax.random.key(config.seed + 7), (config.geodesic_n, d)))
    x0 = m0 + z @ np.linalg.cholesky(c0).T
    x1 = m1 + (x0 - m0) @ T.T  # the optimal map, applied to the samples
    # x1[i] is the optimal partner of x0[i]: the assignment of a monotone affine map is the identity
    if config.geodesic_n <= 300:
        assert np.all(optimal_assignment(x0, x1) == np.arange(config.geodesic_n))
    ss = np.linspace(0.0, 1.0, config.geodesic_points)
    particle_e2 = np.asarray(
        jax.jit(jax.vmap(lambda s: geodesic_second_variation(energy, x0, x1, s)))(ss)
    )

    def gaussian_energy_at(s):
        m, c = bures_wasserstein_geodesic(m0, c0, m1, c1, s)
        return gaussian_interaction_energy(att, m, c)

    gauss_e2 = np.asarray(jax.jit(jax.vmap(jax.grad(jax.grad(gaussian_energy_at))))(ss))
    run.save_arrays(geodesic_s=ss, geodesic_e2_particles=particle_e2, geodesic_e2_gaussian=gauss_e2)
    run.scalar("min_second_variation_gaussian", float(gauss_e2.min()))
    run.check(
        "gaussian_geodesic_second_variation_negative",
        expected="min E'' < 0",
        measured=f"{gauss_e2.min():.4g}",
        passed=bool(gauss_e2.min() < 0),
        note="non-convexity witness for V = I, A = -I along a BW geodesic",
    )
    i = int(np.argmin(gauss_e2))
    run.check(
        "particle_second_variation_matches_gaussian",
        expected=float(gauss_e2[i]),
        measured=float(particle_e2[i]),
        tolerance=0.1,
        relative=True,
        note=f"at s = {ss[i]:.2f}, n = {config.geodesic_n} matched samples",
    )
    ax.plot(ss, gauss_e2, label="Gaussian closed form")
    ax.plot(ss, particle_e2, "--", label=f"particles (n={config.geodesic_n})")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("geodesic parameter s")
    ax.set_ylabel("d^2/ds^2 E(mu_s)")
    ax.set_title("non-convexity witness, V = I, A = -I", fontsize=9)
    ax.legend(fontsize=7)


def _sinkhorn_vs_bw(config: EnergyConfig, run: Run, ax) -> None:
    """Sinkhorn Gaussian ODE with V = A (symmetric) vs Bures-Wasserstein gradient steps of
    F = 1/2 OT_eps(N(0, Sigma), N(0, Sigma)) (the sign: see jaxdyn.meanfield._energy)."""
    d = config.d
    rng = np.random.default_rng(config.seed + 11)
    B = rng.standard_normal((d, d))
    A = 0.3 * (B + B.T)
    G = rng.standard_normal((d, d))
    cov0 = G @ G.T / d + 0.5 * np.eye(d)
    att = Sinkhorn(Q=A, K=np.eye(d), V=A)

    def F(c):
        return gaussian_sinkhorn_energy(A, c)

    _, rhs = att.gaussian_rhs(jnp.zeros(d), jnp.asarray(cov0))
    gap = float(jnp.max(jnp.abs(rhs - bures_wasserstein_gradient(F, cov0))))
    run.check(
        "sinkhorn_rhs_equals_bw_gradient_of_half_ot",
        expected=0.0,
        measured=gap,
        tolerance=1e-10,
        note="V = A symmetric, max |dSigma/dt - BW gradient|",
    )
    tau = config.sinkhorn_t1
    sol = simulate_gaussian(
        att, np.zeros(d), cov0, tau, ts=np.linspace(0, tau, 11), rtol=1e-11, atol=1e-13
    )
    target = np.asarray(sol.final_cov)
    energy_path = np.array([float(F(c)) for c in np.asarray(sol.covs)])

    def bw_descent(m):
        h = tau / m

        def body(_, c):
            return bures_wasserstein_step(F, c, h)

        return jax.lax.fori_loop(0, m, body, jnp.asarray(cov0))

    steps = np.array(config.bw_steps)
    finals = jax.jit(jax.vmap(bw_descent))(jnp.asarray(steps))
    errors = np.array([float(jnp.linalg.norm(c - target)) for c in finals])
    order = -_fit_slope(steps, errors)
    run.save_arrays(bw_steps=steps, bw_errors=errors, sinkhorn_energy_path=energy_path)
    run.check(
        "bw_gradient_steps_converge_to_sinkhorn_ode_first_order",
        expected=1.0,
        measured=order,
        tolerance=0.2,
        note="order of |Sigma_BW(m steps) - Sigma_ODE(t)|",
    )
    run.check(
        "half_ot_decreases_along_sinkhorn_flow",
        expected=0.0,
        measured=float(max(np.diff(energy_path).max(), 0.0)),
        tolerance=1e-12,
        note="F(Sigma(t)) along the ODE with V = A",
    )
    ax.loglog(steps, errors, "o-", label=f"BW steps (order {order:.2f})")
    ax.loglog(steps, errors[0] * steps[0] / steps, "k--", lw=0.8, label="1/m")
    ax.set_xlabel("BW gradient steps m over [0, t]")
    ax.set_ylabel("|Sigma_BW - Sigma_Sinkhorn ODE|_F")
    ax.set_title("Sinkhorn Gaussians = BW gradient flow", fontsize=9)
    ax.legend(fontsize=7)
