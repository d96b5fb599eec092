"""``pde-blowup``: softmax blow-up times against the closed form over random ``A``; L2 on the same
inputs stays finite within its exponential bound (transformer_pde.md, "Closed forms")."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status
from jaxdyn._validation import require_positive
from jaxdyn.evidence import ErrorModel, at_most
from jaxdyn.meanfield import blowup_time, claims, simulate_gaussian
from jaxdyn.meanfield._blowup import l2_growth_excess, l2_growth_rate, rank_one_blowup_bound
from jaxdyn.meanfield._problems import random_blowup_problems
from jaxdyn.meanfield.fields import QuadraticKeySoftmax
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid

from ._regimes import regime_checks
from .ranks import ONE_GROUP_WIDTH


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
        regime_samples: random general-V problems per dimension d = 2..6 for the regime
            criterion (``_regimes``).
        regime_horizon: horizon of their solves (``t -> inf`` stand-in for the arbiter).
    """

    d: int = 3
    samples: int = 64
    blowup_trace: float = 1e6
    l2_horizon: float = 3.0
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 20000
    regime_samples: int = 32
    regime_horizon: float = 1e4

    def validate(self) -> None:
        if not 2 <= self.d <= 8:
            raise ConfigError(f"d must be in 2..8, got {self.d}")
        if self.samples < 1:
            raise ConfigError(f"samples must be >= 1, got {self.samples}")
        for name in ("blowup_trace", "l2_horizon", "rtol", "atol"):
            require_positive(name, getattr(self, name))
        if self.regime_samples < 1:
            raise ConfigError(f"regime_samples must be >= 1, got {self.regime_samples}")
        require_positive("regime_horizon", self.regime_horizon)
        if self.l2_horizon < 1:
            raise ConfigError(f"l2_horizon must be >= 1, got {self.l2_horizon}")

    @classmethod
    def quick(cls) -> dict:
        return {"samples": 16, "regime_samples": 8}


def _member(config: BlowupConfig):
    d = config.d

    def member(p, key):
        eye = jnp.eye(d, dtype=p["Sigma0"].dtype)
        softmax = p["variant"] == 0
        # Softmax and L2 as one field: one evaluation per step whichever the member's variant.
        field = QuadraticKeySoftmax.softmax_or_l2(p["Q"], p["K"], eye, p["variant"] == 1)
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
    title="softmax blow-up times against the closed form",
    docs="transformer_pde.md#gaussian-closure-the-papers-rank-histograms-and-the-gaussian-experiments",
    sweep=ONE_GROUP_WIDTH,
)
def run_pde_blowup(config: BlowupConfig, run: Run) -> None:
    inputs = random_blowup_problems(config.d, config.samples, config.seed)
    t_star = np.asarray(
        jax.jit(jax.vmap(blowup_time))(jnp.asarray(inputs["Sigma0"]), jnp.asarray(inputs["A"]))
    )
    both = {k: np.concatenate([inputs[k], inputs[k]]) for k in ("Q", "K", "Sigma0")}
    both["t_star"] = np.concatenate([t_star, t_star])
    both["variant"] = np.repeat([0, 1], config.samples)
    # Blow-up is the measured outcome for softmax, not a failure; L2 must not blow up.
    result = run.sweep("blowup", _member(config), Grid.zip(both), accept=[Status.blowup])
    out = result.outputs
    n = config.samples
    soft_ok = result.has_status(Status.blowup)[:n]
    run.evidence(
        "softmax_all_runs_blow_up",
        claims.outcome(
            "A + A^T with a positive eigenvalue (V = I): finite-time blow-up",
            predicted=True,
            measured=soft_ok,
            basis="the blow-up event fired before 10 t*",
        ),
    )
    run.evidence(
        "softmax_blowup_time_matches_closed_form",
        claims.softmax_blowup_time(
            t_star[soft_ok], out["t_blowup"][:n][soft_ok], tolerance=BLOWUP_TIME_TOLERANCE
        ),
    )
    bound = rank_one_blowup_bound(inputs["Sigma0"], inputs["A"], t_star, out["final_trace"][:n])
    ratio = out["rank_one_ratio"][:n]
    run.scalar("softmax_max_rank_one_ratio_at_event", float(np.max(ratio[soft_ok], initial=0)))
    run.evidence("softmax_blowup_direction_rank_one", _rank_one_evidence(ratio, bound, soft_ok))
    l2_ok = result.ok()[n:]
    run.evidence(
        "l2_stays_finite_on_same_inputs",
        claims.outcome(
            "L2 never blows up (on inputs where softmax does)",
            predicted=True,
            measured=l2_ok,
            basis=f"an L2 solve reached {config.l2_horizon} x the softmax t* with finite Sigma",
        ),
    )
    run.consistency(
        "l2_runs_reach_horizon",
        expected=0,
        measured=int(np.sum(l2_ok & (out["t_final"][n:] < out["horizon"][n:]))),
        note="L2 runs that ended before l2_horizon t* without failing (a solver bug)",
    )
    _l2_growth_check(config, run, inputs, out, l2_ok)
    _blowup_figure(config, run, inputs, out, t_star, soft_ok, l2_ok)
    regime_checks(config, run)


# Relative error allowed on the blow-up time: the solve's rtol 1e-10 accumulated over its steps
# and amplified near the pole (the pole extrapolation itself is O(1 / blowup_trace^2)).
BLOWUP_TIME_TOLERANCE = 1e-6
# lambda_2 / lambda_1 at the event: the derived bound plus the solver's relative state error.
RANK_ONE_STATE_ERROR = 1e-8


def _rank_one_evidence(ratio, bound, blew_up):
    blew_up = np.asarray(blew_up, bool)
    return claims.error_bound(
        "softmax (V = I) blows up along one direction: lambda_2 / lambda_1 <= d / (mu_2 tr)",
        np.asarray(ratio)[blew_up],
        np.asarray(bound)[blew_up] + RANK_ONE_STATE_ERROR,
        basis="Sigma^-1 decreases to M* = Sigma0^-1 - t* (A + A^T), mu_2 its second "
        "eigenvalue; plus 100 rtol of state error",
    )


@negative_control("pde-blowup", "softmax_all_runs_blow_up")
def _no_blowup_when_the_symmetric_part_is_negative():
    # A + A^T < 0 (V = I): Sigma(t) = (Sigma0^-1 + t |A + A^T|)^-1 stays bounded, no event.
    return claims.outcome(
        "A + A^T with a positive eigenvalue (V = I): finite-time blow-up",
        predicted=True,
        measured=np.array([True, False, False]),
        basis="counterfactual: two of three runs have A + A^T < 0",
    )


@negative_control("pde-blowup", "softmax_blowup_time_matches_closed_form")
def _blowup_time_of_a_faster_value_matrix():
    # V = 1.001 I runs the V = I flow at speed 1.001: its blow-up time is t* / 1.001.
    t_star = np.array([0.3, 1.2, 2.5])
    return claims.softmax_blowup_time(t_star, t_star / 1.001, tolerance=BLOWUP_TIME_TOLERANCE)


@negative_control("pde-blowup", "softmax_blowup_direction_rank_one")
def _initial_shape_instead_of_the_event_state():
    # The check fed Sigma_0's eigenvalue ratio (0.5) as if it were the state at tr = 1e6:
    # Sigma_0 = diag(1, 1/2, 1/4), A + A^T = diag(1, -1, -1), t* = 1, M* = diag(0, 3, 5).
    cov0, A = np.diag([1.0, 0.5, 0.25]), np.diag([0.5, -0.5, -0.5])
    bound = rank_one_blowup_bound(cov0[None], A[None], [1.0], [1e6])
    return _rank_one_evidence(np.array([0.5]), bound, np.array([True]))


@negative_control("pde-blowup", "l2_stays_finite_on_same_inputs")
def _softmax_outcomes_read_as_l2():
    return claims.outcome(
        "L2 never blows up (on inputs where softmax does)",
        predicted=True,
        measured=np.array([True, True, False]),
        basis="counterfactual: one run blew up (softmax outcomes)",
    )


def _l2_growth_evidence(excess, rtol):
    return at_most(
        "L2: |Sigma(t)|_2 <= |Sigma_0|_2 exp(r t), r = 2 |V| |A| / lambda_min(K^T K)",
        measured=float(np.max(excess)),
        limit=0.0,
        error_model=ErrorModel.solver_tolerance(
            100 * rtol, basis="relative state error of the L2 solve (100 rtol) on log tr"
        ),
    )


@negative_control("pde-blowup", "l2_growth_within_exponential_bound")
def _growth_at_twice_the_rate():
    # A trace growing like exp(2 r t) from the bound's start exceeds it for t > 0.
    ts = np.linspace(0.0, 1.0, 5)[None]
    cov0 = np.eye(2)[None]
    r = np.array([1.0])
    traces = 2.0 * np.exp(2.0 * r[:, None] * ts)
    return _l2_growth_evidence(l2_growth_excess(ts, traces, cov0, r), 1e-6)


def _l2_growth_check(config, run, inputs, out, l2_ok) -> None:
    """``log tr Sigma(t) <= log(d |Sigma_0|_2) + r t`` at every save of every L2 run."""
    n = config.samples
    eye = np.eye(config.d)
    r = np.array([l2_growth_rate(A, K, eye) for A, K in zip(inputs["A"], inputs["K"], strict=True)])
    excess = l2_growth_excess(out["ts"][n:], out["trace"][n:], inputs["Sigma0"], r)
    excess = np.where(l2_ok[:, None], excess, -np.inf)
    if l2_ok.any():
        run.evidence("l2_growth_within_exponential_bound", _l2_growth_evidence(excess, 1e-6))
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
