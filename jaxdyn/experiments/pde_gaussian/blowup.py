"""``pde-blowup``: softmax blow-up times against the closed form over random ``A``; L2 on the same
inputs stays finite within its exponential bound (transformer_pde.md, "Closed forms")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import Status, require_positive
from jaxdyn.meanfield import (
    L2,
    SelectField,
    Softmax,
    blowup_time,
    l2_growth_rate,
    random_blowup_problems,
    simulate_gaussian,
)
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlowupConfig(ExperimentConfig):
    """Blow-up times of softmax Gaussians (``V = I``) vs the closed form, over random ``A``.

    Attributes:
        d: dimension.
        samples: random ``A``, half with ``A + A^T > 0``, half indefinite.
        blowup_trace: trace at which the event fires (the blow-up time is then extrapolated from
            the pole).
        l2_horizon: L2 runs on the same inputs up to this multiple of the softmax blow-up time.
        rtol: relative tolerance of the softmax solves.
        atol: absolute tolerance of the softmax solves.
        max_steps: solver steps per run.
    """

    d: int = 3
    samples: int = 64
    blowup_trace: float = 1e6
    l2_horizon: float = 3.0
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 20000

    def validate(self) -> None:
        if not 2 <= self.d <= 8:
            raise ConfigError(f"d must be in 2..8, got {self.d}")
        if self.samples < 1:
            raise ConfigError(f"samples must be >= 1, got {self.samples}")
        for name in ("blowup_trace", "l2_horizon", "rtol", "atol"):
            require_positive(name, getattr(self, name))
        if self.l2_horizon < 1:
            raise ConfigError(f"l2_horizon must be >= 1, got {self.l2_horizon}")

    @classmethod
    def quick(cls) -> dict:
        return {"samples": 16}


def _member(config: BlowupConfig):
    d = config.d

    def member(p, key):
        eye = jnp.eye(d, dtype=p["Sigma0"].dtype)
        softmax = p["variant"] == 0
        field = SelectField(
            (Softmax(Q=p["Q"], K=p["K"], V=eye), L2(Q=p["Q"], K=p["K"], V=eye)), p["variant"]
        )
        horizon = jnp.where(softmax, 10.0, config.l2_horizon) * p["t_star"]
        ts = p["t_star"] * jnp.linspace(0.0, 1.0, 33) * jnp.where(softmax, 0.999, config.l2_horizon)
        sol = simulate_gaussian(
            field,
            jnp.zeros(d, eye.dtype),
            p["Sigma0"],
            horizon,
            ts=ts,
            # The blow-up time needs tight tolerances; "L2 stays finite" does not.
            rtol=jnp.where(softmax, config.rtol, 1e-6),
            atol=jnp.where(softmax, config.atol, 1e-9),
            max_steps=config.max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(softmax, config.blowup_trace, 1e200),
        )
        eig = jnp.linalg.eigvalsh(sol.final_cov)
        return {
            "t_blowup": sol.t_blowup,
            "ts": sol.ts,
            "trace": jnp.trace(sol.covs, axis1=-2, axis2=-1),
            "final_trace": jnp.trace(sol.final_cov),
            "t_final": sol.t_final,
            "horizon": horizon,
            "rank_one_ratio": eig[-2] / eig[-1],
            "status": sol.status,
        }

    return member


@register_experiment(
    "pde-blowup",
    BlowupConfig,
    "softmax blow-up times vs the closed form over random A; L2 stays finite on the same inputs",
)
def run_pde_blowup(config: BlowupConfig, run: Run) -> None:
    inputs = random_blowup_problems(config.d, config.samples, config.seed)
    t_star = np.asarray(
        jax.vmap(blowup_time)(jnp.asarray(inputs["Sigma0"]), jnp.asarray(inputs["A"]))
    )
    both = {k: np.concatenate([inputs[k], inputs[k]]) for k in ("Q", "K", "Sigma0")}
    both["t_star"] = np.concatenate([t_star, t_star])
    both["variant"] = np.repeat([0, 1], config.samples)
    # Blow-up is the measured outcome for softmax, not a failure; L2 must not blow up.
    result = run.sweep("blowup", _member(config), Grid.zip(both), accept=[Status.blowup])
    out = result.outputs
    n = config.samples
    soft_ok = result.has_status(Status.blowup)[:n]
    rel = np.abs(out["t_blowup"][:n][soft_ok] - t_star[soft_ok]) / t_star[soft_ok]
    run.check(
        "softmax_blowup_time_matches_closed_form",
        expected=0.0,
        measured=float(rel.max()) if rel.size else float("nan"),
        tolerance=1e-6,
        note="max relative error of the pole-extrapolated blow-up time, V = I",
    )
    run.check("softmax_all_runs_blow_up", expected=n, measured=int(soft_ok.sum()), tolerance=0.0)
    # Sigma(t)^{-1} = Sigma_0^{-1} - t (A + A^T) decreases to M* at t*, whose smallest eigenvalue
    # is 0 and second smallest mu_2 > 0, so lambda_2(Sigma(t)) <= 1 / mu_2 before t*, while
    # lambda_1 >= tr / d: lambda_2 / lambda_1 <= d / (mu_2 tr), plus the solver's relative
    # state error (100 rtol, as a fraction of the trace).
    sym = inputs["A"] + np.swapaxes(inputs["A"], -1, -2)
    m_star = np.linalg.inv(inputs["Sigma0"]) - t_star[:, None, None] * sym
    mu_2 = np.linalg.eigvalsh(m_star)[:, 1]
    bound = config.d / (mu_2 * out["final_trace"][:n]) + 100 * config.rtol
    ratio = out["rank_one_ratio"][:n]
    run.scalar("softmax_max_rank_one_ratio_at_event", float(np.max(ratio[soft_ok], initial=0)))
    run.check(
        "softmax_blowup_direction_rank_one",
        expected=0,
        measured=int(np.sum(ratio[soft_ok] > bound[soft_ok])),
        tolerance=0.0,
        note="runs whose lambda_2 / lambda_1 at the event exceeds d / (mu_2 tr Sigma) + 100 rtol "
        "(mu_2: second eigenvalue of Sigma_0^{-1} - t* (A + A^T))",
    )
    l2_ok = result.ok()[n:]
    run.check(
        "l2_stays_finite_on_same_inputs",
        expected=n,
        measured=int(l2_ok.sum()),
        tolerance=0.0,
        note=f"L2 reaches {config.l2_horizon} x the softmax blow-up time with a finite Sigma",
    )
    run.check(
        "l2_runs_reach_horizon",
        expected=0,
        measured=int(np.sum(l2_ok & (out["t_final"][n:] < out["horizon"][n:]))),
        tolerance=0.0,
        note="L2 runs that ended before l2_horizon t* without failing",
    )
    _l2_growth_check(config, run, inputs, out, l2_ok)
    _blowup_figure(config, run, inputs, out, t_star, soft_ok, l2_ok)


def _l2_growth_check(config, run, inputs, out, l2_ok) -> None:
    """``log tr Sigma(t) <= log(d |Sigma_0|_2) + r t`` at every save of every L2 run."""
    n = config.samples
    eye = np.eye(config.d)
    r = np.array([l2_growth_rate(A, K, eye) for A, K in zip(inputs["A"], inputs["K"], strict=True)])
    bound0 = np.log(config.d * np.linalg.norm(inputs["Sigma0"], 2, axis=(1, 2)))
    ts, trace = out["ts"][n:], out["trace"][n:]
    with np.errstate(invalid="ignore", divide="ignore"):  # saves after a solve's end are inf
        excess = np.log(trace) - bound0[:, None] - r[:, None] * ts
    excess = np.where(np.isfinite(ts) & l2_ok[:, None], excess, -np.inf)
    worst = float(np.max(excess)) if l2_ok.any() else float("nan")
    run.check(
        "l2_growth_within_exponential_bound",
        expected="<= 0",
        measured=worst,
        passed=bool(l2_ok.any() and worst <= 0),
        note="max over L2 runs and saves of log tr Sigma(t) - log(d |Sigma_0|_2) - r t",
    )
    run.scalar(
        "max_l2_trace", float(np.max(out["final_trace"][n:][l2_ok])) if l2_ok.any() else None
    )


def _blowup_figure(config, run, inputs, out, t_star, soft_ok, l2_ok) -> None:
    from jaxdyn.plotting import new_figure, note_excluded

    n = config.samples
    fig, axes = new_figure(1, 2, width=4.0, height=3.4)
    ax = axes[0, 0]
    for f, label in ((0, "A + Aᵀ > 0"), (1, "A + Aᵀ indefinite")):
        m = soft_ok & (inputs["family"] == f)
        ax.scatter(t_star[m], out["t_blowup"][:n][m], s=12, label=label)
    lim = [0, float(np.max(t_star)) * 1.05]
    ax.plot(lim, lim, "k:", lw=0.8)
    ax.set_xlabel("closed-form t*")
    ax.set_ylabel("simulated blow-up time")
    ax.legend(fontsize=7)
    note_excluded(ax, int((~soft_ok).sum()), n)
    ax = axes[0, 1]
    for i in np.flatnonzero(soft_ok)[:8]:
        ax.semilogy(out["ts"][i] / t_star[i], out["trace"][i], color="C3", lw=0.8)
    for j in np.flatnonzero(l2_ok)[:8]:
        ax.semilogy(out["ts"][n + j] / t_star[j], out["trace"][n + j], color="C0", lw=0.8)
    ax.set_ylim(top=1e8)  # an L2 run may grow (exponentially) to ~1e50 by l2_horizon t*
    ax.set_xlabel("t / t* (softmax, red; L2, blue)")
    ax.set_ylabel("tr Sigma")
    run.save_figure(fig, "blowup_times")
