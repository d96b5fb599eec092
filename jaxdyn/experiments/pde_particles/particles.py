"""``pde-particles``: particle clouds of every attention variant, clusters over depth, and the
beta (temperature) phase diagram of clustering on the sphere as one sweep (docs/transformer_pde.md,
"Particle pictures")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, status_code, status_name
from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.meanfield.fields import SelectField
from jaxdyn.plotting import heatmap, new_figure, note_excluded, time_series
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._common import check_variants


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParticlesConfig(ExperimentConfig):
    """Clouds: ``A = a diag(1, -1, ...)`` (softmax expands along the first axis, L2 stays
    bounded), clusters by single linkage at ``cluster_radius`` on the standardised cloud
    [open]. Phase diagram: tokens uniform on ``S^{phase_d - 1}`` under ``SphereSoftmax`` with
    ``A = beta I``, clusters at chord distance ``phase_radius``, ``betas`` log-spaced."""

    d: int = 2
    variants: tuple[str, ...] = pm.ALL_VARIANTS
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
        check_variants(self.variants, pm.ALL_VARIANTS, self.d)
        if min(self.d, self.n, self.phase_n, self.phase_d, self.snapshots, self.phase_saves) < 2:
            raise ConfigError("d, n, phase_n, phase_d, snapshots and phase_saves must be >= 2")
        if min(self.t1, self.phase_t1, self.cluster_radius, self.phase_radius) <= 0:
            raise ConfigError("t1, phase_t1, cluster_radius and phase_radius must be positive")
        if min(self.steps, self.phase_steps, self.phase_systems) < 1 or self.n_betas < 2:
            raise ConfigError("steps, phase_steps, phase_systems must be >= 1, n_betas >= 2")
        if not 0 < self.beta_min < self.beta_max:
            raise ConfigError(f"need 0 < beta_min < beta_max, got {self.beta_min}, {self.beta_max}")
        # RK4 on the sphere is stable for beta * dt below ~2.8; keep a margin
        if self.beta_max * self.phase_t1 / self.phase_steps > 1.0:
            raise ConfigError("beta_max * phase_t1 / phase_steps > 1: RK4 would be inaccurate")

    @classmethod
    def quick(cls) -> dict:
        return dict(n=96, steps=30, phase_n=32, phase_systems=4, n_betas=8, phase_t1=15.0,
                    phase_steps=240, beta_max=16.0, phase_saves=8)  # fmt: skip


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
    d, a = config.d, config.interaction
    Q = np.sqrt(d) * np.diag(np.where(np.arange(d) == 0, a, -a))  # A = diag(a, -a, ...)
    key = jax.random.key(config.seed)
    x0 = jax.random.normal(key, (config.n, d)) @ jnp.diag(jnp.linspace(1.0, 0.6, d))
    positions = jnp.sort(jax.random.uniform(jax.random.fold_in(key, 1), (config.n,)))
    ts = np.linspace(0.0, config.t1, config.snapshots)
    depth = np.linspace(0.0, config.t1, 3 * (config.snapshots - 1) + 1)  # contains ts
    radius = config.cluster_radius
    fields = [
        pm.variant_field(v, Q, np.eye(d), np.eye(d), positions=positions,
                         sinkhorn_iterations=config.sinkhorn_iterations)
        for v in config.variants
    ]  # fmt: skip

    @jax.jit
    def cloud(index):  # one compiled program for every variant (a traced index)
        save = lambda t, y: (y, pm.cluster_count(pm.standardised(y), radius))  # noqa: E731
        return pm.rk4_flow(SelectField(fields, index), x0, config.t1, config.steps, ts=depth,
                           save_fn=save)  # fmt: skip

    fig, axes = new_figure(len(config.variants), config.snapshots, width=2.4, height=2.3)
    counts, finals, every = {}, {}, {}
    for row, variant in enumerate(config.variants):
        sol = cloud(jnp.asarray(row, jnp.int32))
        clouds, count = np.asarray(sol.xs[0]), np.asarray(sol.xs[1]).astype(float)
        finite = np.all(np.isfinite(clouds), axis=(1, 2))
        count[~finite] = np.nan  # a blown-up cloud has no cluster count
        status = status_code(sol.status)
        counts[variant], finals[variant], every[variant] = count, clouds[-1], clouds
        run.scalar(f"{variant}_status", status_name(status))
        for ax, t in zip(axes[row], ts, strict=True):
            i = int(np.argmin(np.abs(depth - t)))
            colour = np.asarray(positions) if variant == "masked" else None  # position s
            ax.scatter(clouds[i][:, 0], clouds[i][:, 1], s=3, c=colour)
            if variant == "masked":  # the sink is token 0
                ax.scatter(clouds[i][:1, 0], clouds[i][:1, 1], s=25, marker="*", color="crimson")
            label = f"{count[i]:.0f} clusters" if finite[i] else "blown up"
            ax.set_title(f"{variant}, t={depth[i]:.2f}, {label}", fontsize=7)
            ax.tick_params(labelsize=6)
            if status != status_code(Status.successful):
                ax.text(0.02, 0.02, status_name(status), transform=ax.transAxes, color="crimson")
    run.save_figure(fig, "clouds")
    run.save_arrays(
        clouds=np.stack(list(every.values())), clusters=np.stack(list(counts.values())),
        dims={"clouds": ("variant", "depth", "particle", "coordinate"),
              "clusters": ("variant", "depth")},
        coords={"variant": list(config.variants), "depth": depth},
    )  # fmt: skip
    fig, axes = new_figure(1, 1, width=5.0)
    time_series(
        axes[0, 0], depth, [counts[v] for v in config.variants], labels=list(config.variants),
        ylabel=f"clusters (radius {radius}, standardised)", xlabel="depth t",
        title="clusters over depth",
    )  # fmt: skip
    run.save_figure(fig, "clusters_over_depth")
    if "softmax" in config.variants and "l2" in config.variants:
        r = {v: float(np.max(np.linalg.norm(finals[v], axis=-1))) for v in ("softmax", "l2")}
        run.report(
            "l2_cloud_radius_over_softmax",
            measured=r["l2"] / r["softmax"],
            claim="L2 stays bounded where softmax expands",
            note="max |x| at t1, A + A^T indefinite (tested on Gaussians in pde-meanfield)",
        )
    _phase_diagram(config, run)


def _phase_diagram(config: ParticlesConfig, run: Run) -> None:
    d, n, radius = config.phase_d, config.phase_n, config.phase_radius
    betas = np.geomspace(config.beta_min, config.beta_max, config.n_betas)
    ts = np.linspace(0.0, config.phase_t1, config.phase_saves)

    member = pm.sphere_cluster_member(d, n, config.phase_t1, config.phase_steps, ts, radius)
    grid = Grid.product({"beta": betas}, seeds=config.phase_systems, base_seed=config.seed)
    result = run.sweep("phase", member, grid, dims={"clusters": ("time",)}, coords={"time": ts})
    clusters = result.reshaped("clusters").astype(float)  # (betas, systems, saves)
    clusters[~result.ok().reshape(result.grid_shape)] = np.nan
    mean = np.nanmean(clusters, axis=1)
    run.save_arrays(
        phase_mean_clusters=mean,
        dims={"phase_mean_clusters": ("beta", "time")},
        coords={"beta": betas, "time": ts},
    )
    fig, axes = new_figure(1, 2, width=4.8)
    heatmap(
        axes[0, 0], mean.T[::-1], title="mean number of clusters (sphere)", xlabel="beta",
        ylabel="depth t", xticklabels=[f"{b:.2g}" for b in betas],
        yticklabels=[f"{t:.1f}" for t in ts[::-1]],
    )  # fmt: skip
    note_excluded(axes[0, 0], result.n_failed(), len(grid))
    for j in np.linspace(0, len(ts) - 1, 4).astype(int)[1:]:
        axes[0, 1].semilogx(betas, mean[:, j], "o-", label=f"t = {ts[j]:.1f}")
    axes[0, 1].set(xlabel="beta", ylabel="mean clusters")
    axes[0, 1].legend(fontsize=7)
    run.save_figure(fig, "beta_phase_diagram")
    ok = result.ok()
    run.consistency(
        "tokens_stay_on_the_sphere",
        expected=0.0,
        measured=float(np.max(result.outputs["norm_drift"][ok])) if ok.any() else np.nan,
        tolerance=1e-6,
        basis="RK4 drift off the sphere, O(dt^4) per unit time",
        note="max over members and saves of | |x_i| - 1 |",
    )
    mid = len(ts) // 2
    run.scalar("spearman_clusters_vs_beta_mid_depth", pm.spearman(betas, mean[:, mid]))
    members = clusters[:, :, mid]  # (betas, systems)
    keep = np.isfinite(members)
    log_beta = np.broadcast_to(np.log(betas)[:, None], members.shape)
    run.evidence(
        "clusters_increase_with_beta",
        claims.clusters_increase_with_beta(log_beta[keep], members[keep]),
        note=f"slope of the cluster count on log beta at t = {ts[mid]:.1f}, one point per system",
    )
    final = clusters[0, :, -1]
    run.evidence(
        "smallest_beta_reaches_one_cluster",
        claims.single_cluster(
            "at the smallest beta every system reaches one cluster",
            final[np.isfinite(final)],
            basis="single-linkage cluster count at chord distance phase_radius",
        ),  # fmt: skip
        note=f"beta = {betas[0]:.2g}, t = {ts[-1]:.1f}, every system",
    )
