"""``pde-sigmoid``: sigmoid attention on the sphere against softmax (docs/transformer_pde.md,
"Sigmoid attention"): its energy identity, and how its tokens cluster over depth and
temperature."""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status
from jaxdyn.evidence import ErrorModel, monotone, within
from jaxdyn.meanfield import RK4, claims, detect_clusters, simulate_particles, uniform_on_sphere
from jaxdyn.meanfield._gradient_flow import sigmoid_energy
from jaxdyn.meanfield.fields import Sigmoid, SphereProjected, SphereSoftmax
from jaxdyn.plotting import new_figure, note_excluded, time_series
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid


@dataclasses.dataclass(frozen=True, kw_only=True)
class SigmoidConfig(ExperimentConfig):
    """Tokens uniform on ``S^{d-1}``, ``A = beta I``, ``V = I``, projected on the sphere; sigmoid
    with ``bias`` [open: the page leaves ``b`` free] against softmax at the same ``beta``.
    Clusters: single linkage at chord distance ``radius``.
    """

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
        if self.d < 2 or self.n < 2 or self.systems < 1 or self.saves < 2:
            raise ConfigError("d and n must be >= 2, systems >= 1, saves >= 2")
        if not self.betas or min(self.betas) <= 0:
            raise ConfigError(f"betas must be positive, got {self.betas}")
        if not self.t1 > 0 or not self.radius > 0 or self.steps < 1:
            raise ConfigError("t1 and radius must be positive, steps >= 1")
        if max(self.betas) * self.t1 / self.steps > 1.0:
            raise ConfigError("max(betas) * t1 / steps > 1: RK4 would be inaccurate; raise steps")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 24, "systems": 3, "t1": 20.0, "steps": 400, "saves": 8}


def _sigmoid_field(beta, d, bias):
    eye = jnp.eye(d)
    return Sigmoid(Q=beta * jnp.sqrt(d) * eye, K=eye, V=eye, bias=bias)  # A = beta I


def _member(config: SigmoidConfig, ts):
    """One system at one ``beta``: sigmoid statistics over depth, softmax cluster counts."""
    d, n = config.d, config.n

    def clusters(x):
        # a float count: the solver fills saves after a stop with inf, which no integer holds
        return detect_clusters(x, config.radius)[1].astype(x.dtype)

    def member(params, key):
        x0 = uniform_on_sphere(key, n, d)
        beta = params["beta"]
        sigmoid = _sigmoid_field(beta, d, config.bias)
        sphere_sigmoid = SphereProjected(sigmoid)

        def stats(t, x):
            v = sphere_sigmoid.velocity(x, x)
            _, rate = jax.jvp(lambda y: sigmoid_energy(sigmoid, y), (x,), (v,))
            identity = beta / n * jnp.sum(v**2)
            return sigmoid_energy(sigmoid, x), rate - identity, identity, clusters(x)

        sig = simulate_particles(
            sphere_sigmoid,
            x0,
            config.t1,
            dt0=config.t1 / config.steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
            save_fn=stats,
        )
        soft = simulate_particles(
            SphereSoftmax(beta, d, bounded=False),
            x0,
            config.t1,
            dt0=config.t1 / config.steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            ts=ts,
            save_fn=lambda t, x: clusters(x),
        )
        energy, gap, identity, sig_clusters = sig.xs
        status = Status.where(sig.status == Status.successful, soft.status, sig.status)
        return {
            "energy": energy,
            # relative to the largest dissipation of the run: the rate itself tends to zero
            "identity_gap": jnp.max(jnp.abs(gap)) / jnp.max(identity),
            "sigmoid_clusters": sig_clusters,
            "softmax_clusters": soft.xs,
            "status": status,
        }

    return member


def _identity_evidence(relative_gap):
    return within(
        "sigmoid attention on the sphere: dE/dt = (beta/n) sum_i |dx_i/dt|^2 (a gradient flow)",
        prediction=0.0,
        measured=relative_gap,
        error_model=ErrorModel.rounding(1e-10, basis="float64 round-off of forward-mode dE/dt"),
    )


@negative_control("pde-sigmoid", "sigmoid_energy_rate_identity")
def _identity_for_a_rotated_value_matrix():
    # V a rotation by 0.3 rad: the flow is no longer the energy's gradient flow
    beta = 2.0
    c, s_ = np.cos(0.3), np.sin(0.3)
    V = jnp.array([[c, -s_, 0.0], [s_, c, 0.0], [0.0, 0.0, 1.0]])
    return _identity_evidence(float(_identity_gap(V, beta)))


@jax.jit
def _identity_gap(V, beta):
    n, d = 16, V.shape[0]
    eye = jnp.eye(d)
    field = Sigmoid(Q=beta * jnp.sqrt(d) * eye, K=eye, V=V)
    x = uniform_on_sphere(jax.random.key(0), n, d)
    v = SphereProjected(field).velocity(x, x)
    _, rate = jax.jvp(lambda y: sigmoid_energy(field, y), (x,), (v,))
    identity = beta / n * jnp.sum(v**2)
    return jnp.abs(rate - identity) / identity


def _nondecreasing_evidence(series):
    series = np.asarray(series, dtype=float)
    return monotone(
        "the sigmoid energy never decreases along the flow",
        series,
        error=1e-12 * np.abs(series),
        basis="float64 round-off of the energy (RK4 steps of a gradient ascent increase it)",
        increasing=True,
    )


@negative_control("pde-sigmoid", "sigmoid_energy_never_decreases")
def _energy_with_a_dip():
    return _nondecreasing_evidence([1.0, 1.2, 1.19, 1.3])


def _one_cluster_evidence(counts):
    return claims.single_cluster(
        "at the smallest beta every sigmoid system reaches one cluster",
        counts,
        basis="single-linkage cluster count at chord distance radius",
    )


@negative_control("pde-sigmoid", "sigmoid_tokens_form_one_cluster_at_smallest_beta")
def _systems_with_two_clusters():
    return _one_cluster_evidence([1.0, 2.0, 2.0])


@register_experiment(
    "pde-sigmoid",
    SigmoidConfig,
    "sigmoid attention on the sphere: energy identity, clustering against softmax",
    title="sigmoid attention on the sphere",
    docs="transformer_pde.md#sigmoid-attention-and-the-twisted-distance-_gradient_flowpy-derived",
)
def run_pde_sigmoid(config: SigmoidConfig, run: Run) -> None:
    ts = np.linspace(0.0, config.t1, config.saves)
    member = _member(config, ts)
    grid = Grid.product(
        {"beta": np.array(config.betas)}, seeds=config.systems, base_seed=config.seed
    )
    result = run.sweep("sigmoid", member, grid)
    ok = result.ok()
    energy = result.outputs["energy"][ok]
    run.evidence(
        "sigmoid_energy_rate_identity",
        _identity_evidence(float(np.max(result.outputs["identity_gap"][ok]))),
        note="max over saves of |dE/dt - (beta/n) sum |dx_i/dt|^2|, relative to the run's largest "
        "(beta/n) sum |dx_i/dt|^2",
    )
    for i, series in enumerate(energy):
        run.evidence(
            f"sigmoid_energy_never_decreases[{i}]",
            _nondecreasing_evidence(series),
            note="the sigmoid energy along one run's saves",
        )
    sig_clusters = np.where(ok[:, None], result.outputs["sigmoid_clusters"], np.nan)
    soft_clusters = np.where(ok[:, None], result.outputs["softmax_clusters"], np.nan)
    shape = result.grid_shape + (config.saves,)
    sig_mean = np.nanmean(sig_clusters.reshape(shape), axis=1)
    soft_mean = np.nanmean(soft_clusters.reshape(shape), axis=1)
    run.save_arrays(sigmoid_ts=ts, sigmoid_mean_clusters=sig_mean, softmax_mean_clusters=soft_mean)
    for i, beta in enumerate(config.betas):
        run.scalar(f"sigmoid_clusters_at_t1_beta_{beta:g}", float(sig_mean[i, -1]))
        run.scalar(f"softmax_clusters_at_t1_beta_{beta:g}", float(soft_mean[i, -1]))
    first = sig_clusters.reshape(shape)[0, :, -1]
    run.evidence(
        "sigmoid_tokens_form_one_cluster_at_smallest_beta",
        _one_cluster_evidence(first[np.isfinite(first)]),
        note=f"every system at t = {config.t1:g}, beta = {config.betas[0]:g}",
    )
    fig, axes = new_figure(1, 1, width=5.0)
    curves = [sig_mean[i] for i in range(len(config.betas))]
    curves += [soft_mean[i] for i in range(len(config.betas))]
    labels = [f"sigmoid, beta={b:g}" for b in config.betas]
    labels += [f"softmax, beta={b:g}" for b in config.betas]
    time_series(axes[0, 0], ts, curves, labels=labels, ylabel="mean clusters", xlabel="depth t")
    note_excluded(axes[0, 0], result.n_failed(), len(grid))
    run.save_figure(fig, "sigmoid_clusters")
