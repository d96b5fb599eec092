"""``pde-particles``: particle clouds of every attention variant, clusters over depth, and the
beta (temperature) phase diagram of clustering on the sphere as one sweep (docs/transformer_pde.md,
"Particle pictures")."""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, status_code, status_name
from jaxdyn.evidence import trend
from jaxdyn.meanfield import (
    RK4,
    claims,
    detect_clusters,
    empirical_mean_cov,
    simulate_particles,
    uniform_on_sphere,
)
from jaxdyn.meanfield.fields import SelectField, SphereSoftmax
from jaxdyn.plotting import heatmap, new_figure, note_excluded, time_series
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid

from ._common import ALL_VARIANTS, check_variants, make_field


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParticlesConfig(ExperimentConfig):
    """Particle clouds of every variant, clusters over depth, and the beta phase diagram.

    Clouds: ``A = a diag(1, -1, ...)`` (``A + A^T`` indefinite: softmax expands along the first
    axis and contracts along the others; L2 stays bounded). Clusters are counted by
    single linkage at ``cluster_radius`` on the cloud standardised by its RMS radius [open].
    Phase diagram: tokens uniform on the sphere ``S^{phase_d - 1}`` under the sphere-projected
    softmax with ``A = beta I`` (``jaxdyn.meanfield.fields.SphereSoftmax``), clusters at chord
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
        check_variants(self.variants, ALL_VARIANTS, self.d)
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


def _draw_row(axes, variant, clouds, counts, depth, ts, positions, status) -> None:
    """One row of the clouds figure: the cloud at each snapshot depth ``ts``."""
    finite = np.all(np.isfinite(clouds), axis=(1, 2))
    for ax, t in zip(axes, ts, strict=True):
        i = int(np.argmin(np.abs(depth - t)))
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
            ax.text(0.02, 0.02, status_name(status), transform=ax.transAxes, color="crimson")


@register_experiment(
    "pde-particles",
    ParticlesConfig,
    "particle clouds of every attention variant, clusters over depth, beta phase diagram",
    title="particle clusters over depth",
    docs="transformer_pde.md#particle-simulation-and-events",
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
    fields = [
        make_field(v, Q, K, V, sinkhorn_iterations=config.sinkhorn_iterations, positions=positions)
        for v in config.variants
    ]

    @jax.jit
    def cloud(index):
        # One compiled program for every variant (the variant is a traced index).
        return simulate_particles(
            SelectField(fields, index),
            x0,
            config.t1,
            dt0=config.t1 / config.steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=depth,
            # float counts: the solver fills saves after a stop with inf, which no integer holds
            save_fn=lambda t, y: (y, detect_clusters(_standardised(y), radius)[1].astype(y.dtype)),
        )

    for row, variant in enumerate(config.variants):
        sol = cloud(jnp.asarray(row, jnp.int32))
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
        _draw_row(axes[row], variant, clouds, counts, depth, ts, positions, status)
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
        run.report(
            "l2_cloud_radius_over_softmax",
            measured=r_l2 / r_soft,
            claim="L2 stays bounded where softmax expands",
            note="max |x| at t1, A + A^T indefinite (the bounded-L2 claim is tested on Gaussians "
            "with random V in pde-meanfield)",
        )

    _phase_diagram(config, run)


def _phase_diagram(config: ParticlesConfig, run: Run) -> None:
    d, n = config.phase_d, config.phase_n
    betas = np.geomspace(config.beta_min, config.beta_max, config.n_betas)
    ts = np.linspace(0.0, config.phase_t1, config.phase_saves)
    radius = config.phase_radius

    def member(params, key):
        x0 = uniform_on_sphere(key, n, d)
        sol = simulate_particles(
            SphereSoftmax(params["beta"], d),
            x0,
            config.phase_t1,
            dt0=config.phase_t1 / config.phase_steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
            save_fn=lambda t, x: (
                detect_clusters(x, radius)[1].astype(x.dtype),
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
    run.consistency(
        "tokens_stay_on_the_sphere",
        expected=0.0,
        measured=drift,
        tolerance=1e-6,
        basis="RK4 drift off the sphere, O(dt^4) per unit time",
        note="max over members and saves of | |x_i| - 1 |",
    )
    # Metastability: more clusters survive at larger beta (lower temperature).
    mid = len(ts) // 2
    rho = _spearman(betas, mean_clusters[:, mid])
    run.scalar("spearman_clusters_vs_beta_mid_depth", rho)
    members = clusters[:, :, mid]  # (betas, systems)
    keep = np.isfinite(members)
    log_beta = np.broadcast_to(np.log(betas)[:, None], members.shape)
    run.evidence(
        "clusters_increase_with_beta",
        _cluster_trend_evidence(log_beta[keep], members[keep]),
        note=f"least-squares slope of the cluster count on log beta at t = {ts[mid]:.1f}, one "
        "point per system",
    )
    final = clusters[0, :, -1]
    run.evidence(
        "smallest_beta_reaches_one_cluster",
        _one_cluster_evidence(final[np.isfinite(final)]),
        note=f"beta = {betas[0]:.2g}, t = {ts[-1]:.1f}, every system",
    )


def _cluster_trend_evidence(log_beta, counts):
    return trend(
        "more clusters survive at larger beta (metastability)", log_beta, counts, increasing=True
    )


@negative_control("pde-particles", "clusters_increase_with_beta")
def _cluster_counts_without_trend():
    rng = np.random.default_rng(0)
    log_beta = np.repeat(np.log(np.geomspace(0.5, 16.0, 8)), 4)
    return _cluster_trend_evidence(log_beta, rng.integers(1, 6, log_beta.size).astype(float))


def _one_cluster_evidence(counts):
    return claims.single_cluster(
        "at the smallest beta every system reaches one cluster",
        counts,
        basis="single-linkage cluster count at chord distance phase_radius",
    )


@negative_control("pde-particles", "smallest_beta_reaches_one_cluster")
def _two_clusters_left():
    return _one_cluster_evidence([1.0, 2.0, 1.0, 1.0])


def _spearman(x, y) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    if np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
