"""``pde-stability``: the stability estimate ``W_2(mu_t, nu_t) <= C(t, R_0) W_2(mu_0, nu_0)``
with its constant computed (a priori and along the trajectory) against the measured constants,
and the Lipschitz constants of softmax and Sinkhorn attention measured against the bounds
(docs/transformer_pde.md, "Stability and regularity")."""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.evidence import ErrorModel, at_most, trend
from jaxdyn.meanfield import RK4, claims, simulate_particles
from jaxdyn.meanfield._analysis import wasserstein2_exact
from jaxdyn.meanfield._stability import (
    field_lipschitz_constants,
    flow_jacobian_norms,
    softmax_lipschitz_bounds,
    softmax_stability_constant,
)
from jaxdyn.meanfield.fields import Sinkhorn, Softmax
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment

from ._common import random_weights


@dataclasses.dataclass(frozen=True, kw_only=True)
class StabilityConfig(ExperimentConfig):
    """Stability constants and Lipschitz constants of the velocity fields.

    ``clouds`` draws of three candidate clouds of ``n`` tokens in the ball of radius
    ``radius0`` (uniform, on the sphere, two clusters); each is paired with its perturbation
    by ``top_eps`` along the flow Jacobian's top singular vector and with perturbed copies at
    the relative scales ``pair_scales``; the local constant is the spectral norm of the flow's
    Jacobian. Lipschitz constants: clouds uniform in the disc
    of each radius in ``lipschitz_radii``, softmax and Sinkhorn with the same ``A``, ``V = I``.
    """

    d: int = 3
    n: int = 48
    clouds: int = 4
    radius0: float = 1.0
    weight_scale: float = 0.15
    weight_seed: int = 3
    t1: float = 1.0
    saves: int = 6
    steps: int = 40
    pair_scales: tuple[float, ...] = (1e-3, 0.1, 0.5)
    top_eps: float = 1e-3
    lipschitz_radii: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)
    lipschitz_clouds: int = 3
    sinkhorn_iterations: int = 200

    def validate(self) -> None:
        if self.d < 1 or self.n < 2 or self.clouds < 1 or self.lipschitz_clouds < 1:
            raise ConfigError("d, clouds and lipschitz_clouds must be >= 1 and n >= 2")
        for name in ("radius0", "weight_scale", "t1"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.saves < 2 or self.steps < 1 or self.sinkhorn_iterations < 1:
            raise ConfigError("saves must be >= 2, steps and sinkhorn_iterations >= 1")
        if not self.pair_scales or min(self.pair_scales) <= 0:
            raise ConfigError(f"pair_scales must be positive, got {self.pair_scales}")
        radii = self.lipschitz_radii
        if len(radii) < 3 or min(radii) <= 0 or list(radii) != sorted(radii):
            raise ConfigError(f"lipschitz_radii needs >= 3 increasing positive radii, got {radii}")

    @classmethod
    def quick(cls) -> dict:
        return {"n": 24, "clouds": 2, "lipschitz_radii": (0.5, 1.5, 3.0), "lipschitz_clouds": 2}


def _disc_cloud(key, n, d, radius):
    """``n`` points uniform in the ball of radius ``radius``."""
    k1, k2 = jax.random.split(key)
    z = jax.random.normal(k1, (n, d))
    r = radius * jax.random.uniform(k2, (n, 1)) ** (1.0 / d)
    return r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)


@register_experiment(
    "pde-stability",
    StabilityConfig,
    "stability constant C(t, R0) vs measured constants; Lipschitz constants softmax vs Sinkhorn",
    title="stability of the mean-field flow",
    docs="transformer_pde.md#stability-and-regularity-_stabilitypy-derived",
)
def run_pde_stability(config: StabilityConfig, run: Run) -> None:
    fig, axes = new_figure(1, 2, width=4.6)
    _stability_constants(config, run, axes[0, 0])
    _lipschitz(config, run, axes[0, 1])
    run.save_figure(fig, "stability")


def _wasserstein1_exact(x, y) -> float:
    """Exact W1 between two uniform clouds of equal size: the assignment for the Euclidean
    cost (the W2 assignment minimises squared distances, a different problem)."""
    from scipy.optimize import linear_sum_assignment

    x, y = np.asarray(x), np.asarray(y)
    cost = np.linalg.norm(x[:, None] - y[None], axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def _pair_ratios(xs, ys, distance):
    """``W(mu_t, nu_t) / W(mu_0, nu_0)`` at the saves ``t > 0``."""
    d = np.array([distance(a, b) for a, b in zip(xs, ys, strict=True)])
    return d[1:] / d[0]


BOUND = "the stability estimate W_p(mu_t, nu_t) <= C(t, R_0) W_p(mu_0, nu_0) (p = {p})"


def _bound_evidence(p, ratios, constants, relative_error):
    return claims.stability_bound(
        BOUND.format(p=p),
        ratios,
        constants,
        relative_error=relative_error,
        basis="RK4 step-doubling difference of the ratios, relative",
    )


@negative_control("pde-stability", "stability_bound_w2")
def _w2_ratios_above_a_too_small_constant():
    # a constant that ignores the measure's Lipschitz part (C = exp(L_x t)) against ratios
    # that exceed it: the bound must not be called satisfied
    return _bound_evidence(2, [1.3, 1.8, 2.5], [1.1, 1.2, 1.3], 1e-8)


@negative_control("pde-stability", "stability_bound_w1")
def _w1_ratios_above_one():
    # the claim of a non-expansive flow (C = 1) against ratios above 1
    return _bound_evidence(1, [1.05, 1.2], [1.0, 1.0], 1e-8)


@negative_control("pde-stability", "local_stability_constant_below_bound")
def _local_constant_above_the_bound():
    # |dx_t/dx_0| / C(t) = 1.6: a flow that stretches more than the estimate allows
    return _bound_evidence(2, 1.6, 1.0, 1e-9)


def _candidate_clouds(key, config):
    """Initial clouds in the ball of radius ``radius0``: uniform, on the sphere, and two
    clusters at ``+-radius0`` along the first axis (the configurations that stretch most)."""
    n, d, r = config.n, config.d, config.radius0
    uniform = _disc_cloud(key, n, d, r)
    z = jax.random.normal(jax.random.fold_in(key, 7), (n, d))
    shell = r * z / jnp.linalg.norm(z, axis=-1, keepdims=True)
    e1 = jnp.zeros(d).at[0].set(r)
    signs = jnp.where(jnp.arange(n) % 2 == 0, 1.0, -1.0)[:, None]
    clusters = signs * e1 + 0.05 * r * z / jnp.sqrt(d)
    clusters = clusters / jnp.maximum(1.0, jnp.linalg.norm(clusters, axis=-1, keepdims=True) / r)
    return {"uniform": uniform, "shell": shell, "clusters": clusters}


def _stability_constants(config, run, ax):
    """Pairs ``(x_0, x_0 + eps u)`` with ``u`` the top right singular vector of the flow's
    Jacobian at ``t1`` (the perturbation that drives the ratio toward its supremum) and finite
    pairs at the relative scales ``pair_scales``, from several candidate clouds; W2 and W1
    ratios against the constant along each trajectory."""
    Q, K, V = random_weights(config.weight_seed, config.d, config.weight_scale)
    field = Softmax(Q, K, V)
    ts = np.linspace(0.0, config.t1, config.saves)
    v_norm = float(np.linalg.norm(V, 2))
    prior = softmax_stability_constant(field, ts, config.radius0 * np.exp(v_norm * ts))

    def flows(steps):
        return jax.jit(
            jax.vmap(
                lambda x: (
                    simulate_particles(
                        field,
                        x,
                        config.t1,
                        dt0=config.t1 / steps,
                        solver=RK4(),
                        stepsize_controller=diffrax.ConstantStepSize(),
                        blowup_norm=None,
                        ts=ts,
                    ).xs
                )
            )
        )

    coarse, fine = flows(config.steps), flows(2 * config.steps)

    def top_direction(x):
        def flow(y):
            return simulate_particles(
                field,
                y,
                config.t1,
                dt0=config.t1 / config.steps,
                solver=RK4(),
                stepsize_controller=diffrax.ConstantStepSize(),
                blowup_norm=None,
            ).final_x

        J = jax.jacfwd(flow)(x)
        J = J.reshape(x.size, x.size)
        _, svals, vt = jnp.linalg.svd(J)
        return svals[0], vt[0].reshape(x.shape)

    top_direction = jax.jit(top_direction)
    jacobian_norms = jax.jit(lambda x: flow_jacobian_norms(field, x, ts, config.steps))
    ratios = {1: [], 2: []}
    errors = {1: [], 2: []}
    constants, best, local_best = [], {1: 0.0, 2: 0.0}, 0.0
    measured = []
    for c in range(config.clouds):
        key = jax.random.key(config.seed + c)
        for kind, x0 in _candidate_clouds(key, config).items():
            local = np.asarray(jacobian_norms(x0))
            sigma, u = top_direction(x0)
            rms = float(jnp.sqrt(jnp.mean(jnp.sum(u**2, axis=-1))))
            starts = [x0 + config.top_eps * config.radius0 * u / rms]
            for i, s in enumerate(config.pair_scales):
                p = _disc_cloud(jax.random.fold_in(key, i + 1), config.n, config.d, config.radius0)
                starts.append(x0 + s * (p - x0))
            y0 = jnp.concatenate([x0[None], jnp.stack(starts)])
            xs, xs_fine = np.asarray(coarse(y0)), np.asarray(fine(y0))
            radii = np.max(np.linalg.norm(xs, axis=-1), axis=(0, 2))
            posterior = softmax_stability_constant(field, ts, radii)
            for y, y_fine in zip(xs[1:], xs_fine[1:], strict=True):
                constants.append(posterior[1:])
                for p, distance in ((2, wasserstein2_exact), (1, _wasserstein1_exact)):
                    r = _pair_ratios(xs[0], y, distance)
                    r_fine = _pair_ratios(xs_fine[0], y_fine, distance)
                    ratios[p].append(r)
                    errors[p].append(np.abs(r - r_fine) / r + 1e-12)
                    best[p] = max(best[p], float(r[-1]))
            local_best = max(local_best, float(local[-1]))
            measured.append(local)
            run.report(
                f"top_singular_value_at_t1[{kind}{c}]",
                measured=float(sigma),
                note="spectral norm of d x(t1) / d x(0) (the local constant's supremum)",
            )
            ax.semilogy(ts, posterior, "C0-", lw=0.8)
            ax.semilogy(ts, local, "C1-", lw=0.8)
    constants = np.array(constants)
    for p in (2, 1):
        r, e = np.array(ratios[p]), np.array(errors[p])
        run.evidence(
            f"stability_bound_w{p}",
            _bound_evidence(p, r, constants, e),
            note=f"every pair, every save t > 0, d = {config.d}: W{p} ratio against C(t) along "
            "the pair's trajectory (a posteriori radii)",
        )
        run.report(
            f"best_w{p}_ratio_at_t1",
            measured=best[p],
            note="largest measured ratio at t1 over the pairs (the best constant found)",
        )
    worst_local = float(
        np.max(np.array(measured)[:, 1:] / constants[:: len(config.pair_scales) + 1])
    )
    run.evidence(
        "local_stability_constant_below_bound",
        _bound_evidence(2, worst_local, 1.0, 1e-9),
        note="max over clouds and saves of |dx_t/dx_0|_2 / C(t) (infinitesimal pairs)",
    )
    c_t1 = float(np.min(constants[:, -1]))
    run.report("smallest_trajectory_constant_at_t1", measured=c_t1)
    run.report("a_priori_constant_at_t1", measured=float(prior[-1]))
    run.report("measured_local_constant_at_t1", measured=local_best)
    run.report(
        "sharpness_best_constant_over_bound",
        measured=local_best / c_t1,
        claim="how much of C(t1) the worst pair found uses",
        note="largest |dx_t1/dx_0|_2 over the candidate clouds / smallest C(t1) along them",
    )
    ax.semilogy(ts, prior, "k--", label="a priori C(t, R0)")
    ax.plot([], [], "C0-", label="C along the trajectories")
    ax.plot([], [], "C1-", label="measured |dx_t/dx_0|")
    ax.set_xlabel("t")
    ax.set_title(f"stability constants (softmax, d = {config.d})", fontsize=9)
    ax.legend(fontsize=6)
    run.save_arrays(stability_ts=ts, stability_prior=prior, stability_local=np.array(measured))


def _lipschitz_bound_evidence(worst_ratio):
    return at_most(
        "softmax's Lipschitz constants stay below |V||A|R^2 (space) and L_mu(R) (measure, W1)",
        measured=worst_ratio,
        limit=1.0,
        error_model=ErrorModel.rounding(1e-10, basis="float64 round-off of forward-mode Jacobians"),
    )


@negative_control("pde-stability", "softmax_lipschitz_constants_below_bounds")
def _lipschitz_above_bound():
    return _lipschitz_bound_evidence(1.4)


def _regularity_evidence(log_radius, log_ratio):
    return trend(
        "Sinkhorn is more regular than softmax: the ratio of their W2-Lipschitz constants grows "
        "with the radius of the tokens",
        log_radius,
        log_ratio,
        increasing=True,
    )


@negative_control("pde-stability", "sinkhorn_more_regular_than_softmax")
def _equally_regular():
    rng = np.random.default_rng(0)
    log_r = np.repeat(np.log([0.5, 1.5, 3.0]), 2)
    return _regularity_evidence(log_r, 0.1 * rng.standard_normal(log_r.size))


def _lipschitz(config, run, ax):
    d = config.d
    A = np.asarray(random_weights(config.weight_seed + 1, d, 1.0)[0]) / np.sqrt(d)
    softmax = Softmax(np.sqrt(d) * A, np.eye(d), np.eye(d))  # K^T Q / sqrt(d) = A
    sinkhorn = Sinkhorn(A, np.eye(d), np.eye(d), iterations=config.sinkhorn_iterations)
    measure = {
        "softmax": jax.jit(lambda y: jnp.stack(field_lipschitz_constants(softmax, y))),
        "sinkhorn": jax.jit(lambda y: jnp.stack(field_lipschitz_constants(sinkhorn, y))),
    }
    radii = np.array(config.lipschitz_radii)
    values = {k: np.zeros((len(radii), config.lipschitz_clouds, 3)) for k in measure}
    for i, R in enumerate(radii):
        for c in range(config.lipschitz_clouds):
            y = _disc_cloud(jax.random.key(config.seed + 100 + c), config.n, d, R)
            for k, fn in measure.items():
                values[k][i, c] = np.asarray(fn(y))
    bounds = np.array([softmax_lipschitz_bounds(softmax, R) for R in radii])
    soft_max = values["softmax"].max(axis=1)
    worst = max(np.max(soft_max[:, 0] / bounds[:, 0]), np.max(soft_max[:, 2] / bounds[:, 1]))
    run.evidence(
        "softmax_lipschitz_constants_below_bounds",
        _lipschitz_bound_evidence(worst),
        note="max over radii of measured L_x / |V||A|R^2 and L_W1 / L_mu(R)",
    )
    mean_w2 = {k: v[:, :, 1].mean(axis=1) for k, v in values.items()}
    ratio = mean_w2["softmax"] / mean_w2["sinkhorn"]
    exponents = {
        k: fit_power_law(np.repeat(radii, config.lipschitz_clouds), v[:, :, 1].ravel())
        for k, v in values.items()
    }
    for k, fit in exponents.items():
        run.scalar(f"{k}_lipschitz_w2_exponent_in_R", fit.slope)
    per_cloud = np.log(values["softmax"][:, :, 1] / values["sinkhorn"][:, :, 1])
    run.evidence(
        "sinkhorn_more_regular_than_softmax",
        _regularity_evidence(np.repeat(np.log(radii), config.lipschitz_clouds), per_cloud.ravel()),
        note="slope of log(softmax / Sinkhorn W2-Lipschitz constant) on log R, one point per "
        f"cloud; mean ratios {np.round(ratio, 3).tolist()}",
    )
    run.save_arrays(
        lipschitz_radii=radii,
        lipschitz_bounds=bounds,
        **{f"lipschitz_{k}": v for k, v in values.items()},
    )
    for k, style in (("softmax", "C3o-"), ("sinkhorn", "C2s-")):
        ax.loglog(radii, mean_w2[k], style, label=f"{k} L_W2 (exponent {exponents[k].slope:.2f})")
    ax.loglog(radii, bounds[:, 1], "k--", lw=0.8, label="softmax bound L_mu(R)")
    ax.set_ylim(top=10 * max(mean_w2["softmax"].max(), 1.0))
    ax.set_xlabel("radius R of the tokens")
    ax.set_title("Lipschitz constant in the measure", fontsize=9)
    ax.legend(fontsize=6)
