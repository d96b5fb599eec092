"""``pde-sigmoid``: sigmoid attention on the sphere against softmax (docs/transformer_pde.md,
"Sigmoid attention"): its energy identity, and how its tokens cluster over depth and
temperature."""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.plotting import new_figure, note_excluded, time_series
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._common import record


@dataclasses.dataclass(frozen=True, kw_only=True)
class SigmoidConfig(ExperimentConfig):
    """Tokens uniform on ``S^{d-1}``, ``A = beta I``, ``V = I``, projected on the sphere; sigmoid
    with ``bias`` [open: the page leaves ``b`` free] against softmax at the same ``beta``.
    Clusters: single linkage at chord distance ``radius``."""

    d: int = 3
    n: int = 32
    systems: int = 6
    betas: tuple[float, ...] = (1.0, 4.0, 9.0)
    bias: float = 0.0
    t1: float = 30.0
    steps: int = 600
    saves: int = 16
    radius: float = 0.05

    def validate(self) -> None:
        if min(self.d, self.n, self.saves) < 2 or min(self.systems, self.steps) < 1:
            raise ConfigError("d, n and saves must be >= 2, systems and steps >= 1")
        if not self.betas or min(self.betas) <= 0 or min(self.t1, self.radius) <= 0:
            raise ConfigError("betas, t1 and radius must be positive")
        if max(self.betas) * self.t1 / self.steps > 1.0:
            raise ConfigError("max(betas) * t1 / steps > 1: RK4 would be inaccurate; raise steps")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 24, "systems": 3, "t1": 20.0, "steps": 400, "saves": 8}


@register_experiment(
    "pde-sigmoid",
    SigmoidConfig,
    "sigmoid attention on the sphere: energy identity, clustering against softmax",
    title="sigmoid attention on the sphere",
    docs="transformer_pde.md#sigmoid-attention-and-the-twisted-distance-_gradient_flowpy-derived",
)
def run_pde_sigmoid(config: SigmoidConfig, run: Run) -> None:
    ts = np.linspace(0.0, config.t1, config.saves)
    member = pm.sigmoid_member(
        config.d, config.n, config.bias, config.t1, config.steps, ts, config.radius
    )
    grid = Grid.product(
        {"beta": np.array(config.betas)}, seeds=config.systems, base_seed=config.seed
    )
    series = ("energy", "sigmoid_clusters", "softmax_clusters")
    result = run.sweep(
        "sigmoid", member, grid, dims={k: ("time",) for k in series}, coords={"time": ts}
    )
    ok = result.ok()
    gap = float(np.max(result.outputs["identity_gap"][ok]))
    note = "max |dE/dt - (beta/n) sum |dx_i/dt|^2| over saves, relative to its largest sum"
    record(run, {"sigmoid_energy_rate_identity": (claims.sigmoid_energy_identity(gap), note)})
    record(run, {
        f"sigmoid_energy_never_decreases[{i}]": (claims.sigmoid_energy_nondecreasing(e), "one run")
        for i, e in enumerate(result.outputs["energy"][ok])
    })  # fmt: skip
    shape = result.grid_shape + (config.saves,)
    clusters = {
        k: np.where(ok[:, None], result.outputs[f"{k}_clusters"], np.nan).reshape(shape)
        for k in ("sigmoid", "softmax")
    }
    mean = {k: np.nanmean(v, axis=1) for k, v in clusters.items()}
    run.save_arrays(
        **{f"{k}_mean_clusters": v for k, v in mean.items()},
        dims={f"{k}_mean_clusters": ("beta", "time") for k in mean},
        coords={"beta": np.array(config.betas), "time": ts},
    )
    for (k, v), (i, beta) in ((kv, ib) for kv in mean.items() for ib in enumerate(config.betas)):
        run.scalar(f"{k}_clusters_at_t1_beta_{beta:g}", float(v[i, -1]))
    first = clusters["sigmoid"][0, :, -1]
    run.evidence(
        "sigmoid_tokens_form_one_cluster_at_smallest_beta",
        claims.single_cluster(
            "at the smallest beta every sigmoid system reaches one cluster",
            first[np.isfinite(first)],
            basis="single-linkage cluster count at chord distance radius",
        ),
        note=f"every system at t = {config.t1:g}, beta = {config.betas[0]:g}",
    )
    fig, axes = new_figure(1, 1, width=5.0)
    curves = [
        (v[i], f"{k}, beta={b:g}") for k, v in mean.items() for i, b in enumerate(config.betas)
    ]
    time_series(axes[0, 0], ts, [c for c, _ in curves], labels=[lab for _, lab in curves],
                ylabel="mean clusters", xlabel="depth t")  # fmt: skip
    note_excluded(axes[0, 0], result.n_failed(), len(grid))
    run.save_figure(fig, "sigmoid_clusters")
