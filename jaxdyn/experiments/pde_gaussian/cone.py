"""``pde-cone``: the paper's d = 2 pictures, ``Sigma = [[a, c], [c, b]]`` drawn as
``(a - b, 2c, a + b)`` (transformer_pde.md, "The paper's numerical experiments"): five cases
(to zero, to a line, two lines, blow-up, either) x four attention variants in one sweep."""

from __future__ import annotations

import dataclasses

import diffrax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, count_outcomes, item_code, status_code
from jaxdyn._validation import require_positive
from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield._cone import ConeOutcome, cone_outcome, trace_one_covariances
from jaxdyn.meanfield._paper_inputs import CONE_CASES, cone_cases
from jaxdyn.meanfield.fields import L2, MultiHead, SelectField, Sinkhorn, Softmax
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._cone_report import cone_checks, cone_figures

CONE_VARIANTS = ("softmax", "l2", "multihead", "sinkhorn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConeConfig(ExperimentConfig):
    """The cone pictures' settings.

    Attributes:
        grid: initial conditions of trace 1 on a ``grid x grid`` lattice of
            ``(u, w) = (a - b, 2c)`` inside the disk of radius ``disk_radius``.
        disk_radius: radius of that disk (below 1: definite initial covariances).
        t1: horizon.
        saves: log-spaced save times (the blow-ups and the turns towards lines happen early).
        blowup_trace: event threshold (1e6 rather than the paper's tol_high = 1e3: runs that
            converge to a line can rest at a trace of several thousand).
        converged_tol: rate threshold of :func:`jaxdyn.meanfield.cone_outcome`.
        rtol: relative tolerance.
        atol: absolute tolerance.
        max_steps: solver steps per run.
    """

    grid: int = 9
    disk_radius: float = 0.95
    t1: float = 15.0
    saves: int = 64
    blowup_trace: float = 1e6
    converged_tol: float = 1e-3
    rtol: float = 1e-8
    atol: float = 1e-11
    max_steps: int = 32768

    def validate(self) -> None:
        if self.grid < 2:
            raise ConfigError(f"grid must be >= 2, got {self.grid}")
        if not 0 < self.disk_radius < 1:
            raise ConfigError(f"disk_radius must be in (0, 1), got {self.disk_radius}")
        for name in ("t1", "blowup_trace", "converged_tol", "rtol", "atol"):
            require_positive(name, getattr(self, name))
        if self.saves < 2:
            raise ConfigError(f"saves must be >= 2, got {self.saves}")

    @classmethod
    def quick(cls) -> dict:
        return {"grid": 5, "saves": 32, "t1": 8.0}


def _member(config: ConeConfig, ts: np.ndarray):
    def member(p, key):
        Q, K, V = p["Q"], p["K"], p["V"]
        variants = (
            Softmax(Q=Q, K=K, V=V),
            L2(Q=Q, K=K, V=V),
            MultiHead(Q=Q, K=K, V=V, heads=2),
            Sinkhorn(Q=Q, K=K, V=V),
        )
        field = SelectField(variants, p["variant"])
        sol = simulate_gaussian(
            field,
            jnp.zeros(2, Q.dtype),
            p["Sigma0"],
            config.t1,
            ts=ts,
            rtol=config.rtol,
            atol=config.atol,
            max_steps=config.max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(p["variant"] == 1, 1e200, config.blowup_trace),
            # diffrax's Tsit5, whose stage loop traces the four-way SelectField once: unrolled
            # stages (the default) compile it once per stage, for runs of a few hundred steps.
            solver=diffrax.Tsit5(),
        )
        _, dcov = field.gaussian_rhs(sol.final_mean, sol.final_cov, t=sol.t_final)
        outcome = cone_outcome(
            sol.status, sol.final_cov, jnp.sqrt(jnp.sum(dcov**2)), config.converged_tol
        )
        return {
            "covs": sol.covs,
            "final_cov": sol.final_cov,
            "t_final": sol.t_final,
            "t_event": sol.t_event,
            "outcome": item_code(outcome),
            "status": sol.status,
        }

    return member


@register_experiment(
    "pde-cone",
    ConeConfig,
    "d = 2 covariance flows in the PSD cone: to 0, to a line, two lines, blow-up, either",
    title="covariance flows in the PSD cone (d = 2)",
    docs="transformer_pde.md#gaussian-closure-the-papers-rank-histograms-and-the-gaussian-experiments",
    # Unsegmented: every run takes a few hundred steps at most, so re-batching saves little,
    # and one compiled program replaces init, finish and a segment program per width.
    sweep={"segment_steps": 0},
)
def run_pde_cone(config: ConeConfig, run: Run) -> None:
    cases = cone_cases(config.seed)
    covs0 = trace_one_covariances(config.grid, config.disk_radius)
    n0, nc, nv = len(covs0), len(CONE_CASES), len(CONE_VARIANTS)
    case_of = np.repeat(np.arange(nc), nv * n0)
    params = {k: np.stack([cases[CONE_CASES[c]][k] for c in case_of]) for k in ("Q", "K", "V")}
    params["Sigma0"] = np.tile(covs0, (nc * nv, 1, 1))
    params["variant"] = np.tile(np.repeat(np.arange(nv), n0), nc)
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * config.t1, config.t1, config.saves - 1)])
    ts[-1] = config.t1
    result = run.sweep("cone", _member(config, ts), Grid.zip(params), accept=[Status.blowup])
    shape = (nc, nv, n0)
    out = {k: v.reshape(shape + v.shape[1:]) for k, v in result.outputs.items()}
    ok = result.ok(accept=[Status.blowup]).reshape(shape)
    # A member the engine marked non-finite after the fact is a failure, whatever it said.
    outcome = np.where(ok, out["outcome"], status_code(ConeOutcome.failed))
    out["outcome"] = outcome
    run.save_arrays(
        cone_u0=covs0[:, 0, 0] - covs0[:, 1, 1],
        cone_w0=2 * covs0[:, 0, 1],
        cone_outcome=outcome,
        cone_final_cov=out["final_cov"],
        cone_t_event=out["t_event"],
    )
    run.scalar(
        "outcomes_by_case_variant",
        {
            f"{c}/{v}": count_outcomes(ConeOutcome, outcome[ci, vi])
            for ci, c in enumerate(CONE_CASES)
            for vi, v in enumerate(CONE_VARIANTS)
        },
    )
    cone_figures(run, covs0, out, ok, CONE_VARIANTS)
    short = ok & (out["t_final"] < config.t1) & (outcome != status_code(ConeOutcome.blowup))
    run.consistency(
        "no_event_runs_reach_t1",
        expected=0,
        measured=int(short.sum()),
        note="runs without an event whose solve ended before t1 (final state not at t1)",
    )
    cone_checks(config, run, cases, covs0, out, ok, CONE_VARIANTS, ts)
