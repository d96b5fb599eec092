"""``pde-cone``: the paper's d = 2 pictures, ``Sigma = [[a, c], [c, b]]`` drawn as
``(a - b, 2c, a + b)`` (transformer_pde.md, "The paper's numerical experiments"): five cases
(to zero, to a line, two lines, blow-up, either) x four attention variants in one sweep, checked
against the closed forms and the derived flows (``jaxdyn.meanfield._cone*``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, count_outcomes, status_code
from jaxdyn._validation import require_positive
from jaxdyn.meanfield import blowup_time, claims, softmax_identity_covariance
from jaxdyn.meanfield._blowup import l2_growth_excess
from jaxdyn.meanfield._closed_forms import limiting_rank, low_rank_limit
from jaxdyn.meanfield._cone import (
    ConeOutcome,
    blowup_directions,
    disk_coordinates,
    isotropic_line_stability,
    trace_one_covariances,
    two_lines_covariance,
)
from jaxdyn.meanfield._cone_limits import (
    LIMIT_LOG_RADIUS,
    blowup_limit_errors,
    nearest_direction_distance,
    rank_one_angle_flow,
    stable_line_distances,
    wrapped_angle,
)
from jaxdyn.meanfield._cone_runs import (
    CONE_VARIANTS,
    cone_member,
    cone_params,
    cone_save_times,
    continue_blowups,
    sigma_11_drift,
    signs_reached,
    sinkhorn_growth_excess,
    trace_decreases,
    two_lines_distances,
)
from jaxdyn.meanfield._paper_inputs import CONE_CASES, cone_cases
from jaxdyn.meanfield.fields import Softmax
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid

CONVERGED, BLOWUP = status_code(ConeOutcome.converged), status_code(ConeOutcome.blowup)
COLORS = {CONVERGED: "C0", BLOWUP: "C3", status_code(ConeOutcome.undecided): "C0"}
CONTINUE_FACTOR = 1e6  # blow-ups are followed from tr = blowup_trace to this times more


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
        converged_tol: rate threshold of ``cone_outcome``.
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
        if self.grid < 2 or self.saves < 2:
            raise ConfigError(f"grid and saves must be >= 2, got {self.grid}, {self.saves}")
        if not 0 < self.disk_radius < 1:
            raise ConfigError(f"disk_radius must be in (0, 1), got {self.disk_radius}")
        for name in ("t1", "blowup_trace", "converged_tol", "rtol", "atol"):
            require_positive(name, getattr(self, name))

    @classmethod
    def quick(cls) -> dict:
        return {"grid": 5, "saves": 32, "t1": 8.0}


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
    c = config
    cases, covs0 = cone_cases(c.seed), trace_one_covariances(c.grid, c.disk_radius)
    ts = cone_save_times(c.t1, c.saves)
    member = cone_member(
        ts, t1=c.t1, rtol=c.rtol, atol=c.atol, max_steps=c.max_steps,
        blowup_trace=c.blowup_trace, converged_tol=c.converged_tol,
    )  # fmt: skip
    result = run.sweep(
        "cone", member, Grid.zip(cone_params(cases, covs0)), accept=[Status.blowup],
        dims={"covs": ("time", "i", "j"), "final_cov": ("i", "j"), "Q": ("k", "i"),
              "K": ("k", "i"), "V": ("i", "j"), "Sigma0": ("i", "j")},
        coords={"time": ts},
    )  # fmt: skip
    shape = (len(CONE_CASES), len(CONE_VARIANTS), len(covs0))
    out = {k: v.reshape(shape + v.shape[1:]) for k, v in result.outputs.items()}
    ok = result.ok(accept=[Status.blowup]).reshape(shape)
    # A member the engine marked non-finite after the fact is a failure, whatever it said.
    out["outcome"] = outcome = np.where(ok, out["outcome"], status_code(ConeOutcome.failed))
    cells = ("case", "variant", "start")
    run.save_arrays(
        cone_u0=covs0[:, 0, 0] - covs0[:, 1, 1],
        cone_w0=2 * covs0[:, 0, 1],
        cone_outcome=outcome,
        cone_final_cov=out["final_cov"],
        cone_t_event=out["t_event"],
        dims={"cone_u0": ("start",), "cone_w0": ("start",), "cone_outcome": cells,
              "cone_final_cov": (*cells, "i", "j"), "cone_t_event": cells},
        coords={"case": list(CONE_CASES), "variant": list(CONE_VARIANTS)},
    )  # fmt: skip
    run.scalar(
        "outcomes_by_case_variant",
        {
            f"{case}/{v}": count_outcomes(ConeOutcome, outcome[ci, vi])
            for ci, case in enumerate(CONE_CASES)
            for vi, v in enumerate(CONE_VARIANTS)
        },
    )
    _figures(run, covs0, out, ok)
    short = ok & (out["t_final"] < c.t1) & (outcome != BLOWUP)
    run.consistency(
        "no_event_runs_reach_t1",
        expected=0,
        measured=int(short.sum()),
        note="runs without an event whose solve ended before t1 (final state not at t1)",
    )
    _checks(c, run, cases, covs0, out, ok, ts)


def _case(out, case, variant="softmax", key="final_cov"):
    return out[key][CONE_CASES.index(case), CONE_VARIANTS.index(variant)]


def _A(case) -> np.ndarray:
    return case["K"].T @ case["Q"] / np.sqrt(2)


def _checks(config, run, cases, covs0, out, ok, ts) -> None:
    """Softmax against its closed forms and derived flows (to a line, two lines, blow-up before
    ``t*``, to zero, either); L2 never blows up; Sinkhorn grows at most exponentially; the
    multi-head invariant."""
    outcome, middle = out["outcome"], config.saves // 2
    final, A = _case(out, "to_line"), _A(cases["to_line"])
    exact = np.stack([np.asarray(softmax_identity_covariance(c, A, config.t1)) for c in covs0])
    run.evidence(
        "softmax_to_line_matches_closed_form",
        claims.closed_form_covariance("to_line", exact, final),
    )
    limit = np.stack([np.asarray(low_rank_limit(c, A)) for c in covs0])
    run.scalar("to_line_distance_to_limit_at_t1", float(np.max(np.abs(final - limit))))
    two, two_end = _case(out, "two_lines", key="outcome"), _case(out, "two_lines")
    exact, off, dist, dist_exact = two_lines_distances(covs0, two_end, config.t1)
    run.evidence(
        "softmax_two_lines_matches_exact_solution",
        claims.closed_form_covariance("two_lines", exact, two_end),
    )
    run.scalar("two_lines_max_exact_distance_to_line_at_t1", float(dist_exact.max()))
    run.evidence(
        "softmax_two_lines_limits_on_the_two_isotropic_lines",
        claims.line_distance(dist, dist_exact, np.trace(exact[off], axis1=1, axis2=2)),
    )
    t_star = np.array([float(blowup_time(c, _A(cases["blowup"]))) for c in covs0])
    zero, sk = CONE_CASES.index("to_zero"), CONE_VARIANTS.index("sinkhorn")
    tr_end = np.trace(_case(out, "to_zero"), axis1=-2, axis2=-1)[ok[zero, 0]]
    run.scalar("to_zero_max_trace_at_t1", float(tr_end.max()) if tr_end.size else None)
    either = _case(out, "either", key="outcome")
    n_blow, n_conv = int(np.sum(either == BLOWUP)), int(np.sum(either == CONVERGED))
    run.scalar("either_softmax_blowup_runs", n_blow)
    run.scalar("either_softmax_converged_runs", n_conv)
    measured = {
        "softmax_to_line_rank_one": np.asarray(jax.vmap(limiting_rank)(jnp.asarray(final))),
        "softmax_two_lines_no_run_blows_up": two == BLOWUP,
        "softmax_two_lines_off_axis_runs_converge": two[off] == CONVERGED,
        "softmax_two_lines_both_lines_reached": signs_reached(disk_coordinates(two_end)[off, 1]),
        "softmax_blowup_event_before_closed_form_time": (
            _case(out, "blowup", key="outcome") == BLOWUP
        )
        & (_case(out, "blowup", key="t_event") <= t_star),
        "softmax_to_zero_trace_decreases": trace_decreases(
            _case(out, "to_zero", key="covs"), _case(out, "to_zero"), middle
        )[ok[zero, 0]],
        "softmax_either_both_outcomes_occur": [n_blow > 0, n_conv > 0],
        "softmax_either_every_run_decided": (either == BLOWUP) | (either == CONVERGED),
        "l2_never_blows_up": outcome[:, CONE_VARIANTS.index("l2")] == BLOWUP,
        "sinkhorn_to_zero_trace_decreases": ok[zero, sk]
        & trace_decreases(
            _case(out, "to_zero", "sinkhorn", "covs"), _case(out, "to_zero", "sinkhorn"), middle
        ),
    }
    for name, values in measured.items():
        run.evidence(name, claims.cone_case(name, values))
    _either_checks(config, run, cases["either"], out, ts)
    runs = ok[:, sk]
    excess = sinkhorn_growth_excess(
        cases, covs0, out["covs"][:, sk], out["final_cov"][:, sk], out["t_event"][:, sk], runs, ts
    )
    run.evidence(
        "sinkhorn_growth_within_exponential_bound",
        claims.growth_bound("sinkhorn", excess, rtol=config.rtol),
        note=f"{int(runs.sum())} runs of the five cases, every save 0 < t <= end of the solve",
    )
    run.report(
        "sinkhorn_blowup_events",
        measured=int(np.sum((outcome[:, sk] == BLOWUP) & runs)),
        note="runs whose trace reached blowup_trace by t1: exponential growth (2 |V| t1 > "
        "log(blowup_trace)), not a finite-time blow-up",
    )
    good = ok[CONE_CASES.index("to_line"), CONE_VARIANTS.index("multihead")]
    covs = _case(out, "to_line", "multihead", "covs")[good]
    # A structural invariant of the multi-head field (a zero second row and column): a failure
    # is a bug in the field or the solve, so it is consistency, not evidence of a claim.
    run.consistency(
        "multihead_to_line_conserves_sigma_11",
        expected=0.0,
        measured=sigma_11_drift(covs),
        tolerance=claims.ENTRY_TOLERANCE,
        basis="solver global error on O(1) entries (rtol 1e-8 accumulated)",
        note="2-head multi-head on the to-line weights (Q = [q; 0], K = -Q, V = W = I): only "
        "head 0 acts, so Sigma_11 is conserved and tr Sigma does not rise; "
        f"{int(good.sum())} runs x {covs.shape[1]} saves: the largest |Sigma_11(t) - "
        "Sigma_11(0)| and rise of tr Sigma between saves",
    )


def _either_checks(config, run, case, out, ts) -> None:
    """Case ``either``: blow-ups follow the rank-one direction flow to an attracting
    eigenvector of ``V``; convergent runs end on the stable isotropic line
    (``jaxdyn.meanfield._cone_limits``)."""
    lines = isotropic_line_stability(_A(case), case["V"])
    run.scalar("either_line_kappas", {str(np.round(e, 4).tolist()): k for e, k in lines})
    soft, final = _case(out, "either", key="outcome"), _case(out, "either")
    field = Softmax(Q=jnp.asarray(case["Q"]), K=jnp.asarray(case["K"]), V=jnp.asarray(case["V"]))
    ends, V = final[soft == BLOWUP], np.asarray(field.V)
    directions = blowup_directions(np.asarray(field.A()), V)
    run.scalar(
        "either_blowup_max_distance_to_direction_at_event",
        nearest_direction_distance(ends, directions),
    )
    if len(ends):
        trace = config.blowup_trace * CONTINUE_FACTOR
        later, steps, reached = continue_blowups(
            field, ends, t1=config.t1, rtol=config.rtol, atol=config.atol,
            max_steps=config.max_steps, trace=trace,
        )  # fmt: skip
        m = blowup_limit_errors(V, directions, ends, later, steps, config.rtol)
        run.scalar("either_blowup_angle_flow_max_error", float(m["errors"].max()))
        run.scalar("either_blowup_angle_flow_max_allowed", float(m["allowed"].max()))
        run.evidence(
            "softmax_either_blowups_follow_the_rank_one_direction_flow",
            claims.blowup_angle_flow(np.where(reached, m["errors"], np.inf), m["allowed"]),
            note=f"blow-up runs continued from tr = {config.blowup_trace:g} to {trace:g}; a "
            "continuation that did not get there counts as an infinite error",
        )
        # plus the direction solve's own error (rtol 1e-12 on an O(1) angle: under 1e-10)
        run.evidence(
            "softmax_either_blowup_direction",
            claims.blowup_direction(m["limits"], m["left"] + 1e-10, LIMIT_LOG_RADIUS),
            note=f"eigenvectors of V {[np.round(u, 4).tolist() for u in directions]}",
        )
    conv = soft == CONVERGED
    paths, ends = _case(out, "either", key="covs")[conv], final[conv]
    stable, dist, bounds, anchor = stable_line_distances(
        field, paths, ends, ts, claims.ENTRY_TOLERANCE
    )
    ratios = [d / b for d, b in zip(dist, bounds, strict=True)]
    run.scalar("either_converged_max_distance_to_stable_line_at_t1", max(dist, default=None))
    run.scalar("either_converged_max_distance_over_bound", max(ratios, default=None))
    run.evidence(
        "softmax_either_converged_on_stable_line",
        claims.stable_line(np.array(dist), bounds)
        if stable
        else claims.stable_line(np.full(len(ends), np.inf), np.zeros(len(ends))),
        note=f"stable line(s) {[np.round(e, 4).tolist() for e in stable]}, bound from "
        f"t = {ts[anchor]:.3g}",
    )


def _path(covs: np.ndarray, final: np.ndarray) -> np.ndarray:
    """The finite saves of one run followed by its final state."""
    return np.concatenate([covs[np.all(np.isfinite(covs), axis=(1, 2))], final[None]])


def _figures(run, covs0, out, ok) -> None:
    """Unit-disk pictures of ``Sigma / tr Sigma`` (blue: no blow-up, filled end dot if converged;
    red: blow-up, x at the event; black: initial conditions) and a 3-D cone picture (softmax):
    ``Sigma`` as ``(a - b, 2c, a + b)`` with the trace log-compressed to ``h = log(1 + tr)``
    (radius scaled alike), so the PSD cone stays the cone ``|(x, y)| <= h``."""
    import matplotlib.pyplot as plt

    from jaxdyn.plotting import cone_axes, new_figure, note_excluded

    start, outcome = disk_coordinates(covs0), out["outcome"]
    fig, axes = new_figure(len(CONE_VARIANTS), len(CONE_CASES), width=2.4, height=2.4)
    for (ci, name), (vi, variant) in [
        (x, y) for x in enumerate(CONE_CASES) for y in enumerate(CONE_VARIANTS)
    ]:
        ax = cone_axes(axes[vi, ci], title=f"{name} / {variant}")
        ax.plot(start[:, 0], start[:, 1], "k.", ms=1.5)
        for m in np.flatnonzero(ok[ci, vi]):
            path = disk_coordinates(_path(out["covs"][ci, vi, m], out["final_cov"][ci, vi, m]))
            code = int(outcome[ci, vi, m])
            ax.plot(path[:, 0], path[:, 1], lw=0.6, color=COLORS[code])
            face = COLORS[code] if code == CONVERGED else "none"
            ax.plot(*path[-1], "x" if code == BLOWUP else "o", ms=3, color=COLORS[code], mfc=face)
        note_excluded(ax, int((~ok[ci, vi]).sum()), len(covs0))
    run.save_figure(fig, "cone_disk")

    fig = plt.figure(figsize=(3.2 * len(CONE_CASES), 3.4))
    theta = np.linspace(0, 2 * np.pi, 60)
    for ci, name in enumerate(CONE_CASES):
        ax = fig.add_subplot(1, len(CONE_CASES), ci + 1, projection="3d")
        h_max = 0.0
        for m in np.flatnonzero(ok[ci, 0]):
            c = _path(out["covs"][ci, 0, m], out["final_cov"][ci, 0, m])
            h = np.log1p(c[:, 0, 0] + c[:, 1, 1])
            xy = disk_coordinates(c) * h[:, None]
            h_max = max(h_max, float(h.max()))
            ax.plot(xy[:, 0], xy[:, 1], h, lw=0.6, color=COLORS[int(outcome[ci, 0, m])])
        for level in np.linspace(0, h_max, 4)[1:]:
            ax.plot(level * np.cos(theta), level * np.sin(theta), level, color="0.75", lw=0.5)
        for phi in np.linspace(0, 2 * np.pi, 8, endpoint=False):
            ax.plot(
                [0, h_max * np.cos(phi)], [0, h_max * np.sin(phi)], [0, h_max], c="0.75", lw=0.5
            )
        ax.set(xlim=(-h_max, h_max), ylim=(-h_max, h_max), zlim=(0, h_max))
        ax.set_title(f"softmax: {name}", fontsize=9)
        ax.set_xlabel("(a - b) s", fontsize=7)
        ax.set_ylabel("2c s", fontsize=7)
        ax.set_zlabel("log(1 + tr)", fontsize=7)
    fig.text(0.01, 0.01, "s = log(1 + tr) / tr", fontsize=7)
    run.save_figure(fig, "cone_3d")


# Negative controls: each check on a counterfactual on which its claim is false.
def _two_lines_at(t, grid=3):
    return np.stack([two_lines_covariance(c, t) for c in trace_one_covariances(grid, 0.8)])


def _to_line_at(t):  # V = 1.01 I runs the V = I flow at speed 1.01: the closed form at 1.01 t
    A = np.array([[-1.0, 0.5], [-0.5, 0.0]]) / np.sqrt(2)
    return np.stack([softmax_identity_covariance(c, A, t) for c in trace_one_covariances(3, 0.8)])


def _line_distance_at_another_time():
    exact, off, later, dist = two_lines_distances(
        trace_one_covariances(5, 0.8), _two_lines_at(5.1, grid=5), 5.0
    )
    return claims.line_distance(later, dist, np.trace(exact[off], axis1=1, axis2=2))


_GROWTH = np.linspace(0.0, 2.0, 5)[None]  # a trace growing like exp(4 |V| t) outgrows the bound
_COUNTER = {
    name: lambda name=name, m=m: claims.cone_case(name, m() if callable(m) else m)
    for name, m in {
        # Sigma_0 on the grid has full rank: a flow that did not collapse (computed when the
        # control runs: importing an experiment starts no JAX backend)
        "softmax_to_line_rank_one": lambda: jax.vmap(limiting_rank)(trace_one_covariances(3, 0.5)),
        "softmax_blowup_event_before_closed_form_time": [True, False],
        "l2_never_blows_up": [False, True],
        "softmax_to_zero_trace_decreases": [False, False],
        "softmax_two_lines_no_run_blows_up": [True, False],
        "softmax_two_lines_off_axis_runs_converge": [True, False],
        "softmax_two_lines_both_lines_reached": signs_reached([0.9, 0.8]),
        "softmax_either_both_outcomes_occur": [True, False],
        "softmax_either_every_run_decided": [True, False],
        # A = +Q^T Q: tr(V^-1 Sigma) increases, the trace grows from 1
        "sinkhorn_to_zero_trace_decreases": [False, False, True],
    }.items()
} | {
    "softmax_to_line_matches_closed_form": lambda: claims.closed_form_covariance(
        "to_line", _to_line_at(5.0), _to_line_at(5.05)
    ),
    "softmax_two_lines_matches_exact_solution": lambda: claims.closed_form_covariance(
        "two_lines", _two_lines_at(5.0), _two_lines_at(5.1)
    ),
    "softmax_two_lines_limits_on_the_two_isotropic_lines": _line_distance_at_another_time,
    # A continuation whose direction did not move: the angle at the event read as the later one.
    "softmax_either_blowups_follow_the_rank_one_direction_flow": lambda: claims.blowup_angle_flow(
        [abs(wrapped_angle(0.6 - rank_one_angle_flow(cone_cases()["either"]["V"], 0.6, 0.0, 1.0)))],
        [1e-6],
    ),
    # The eigenvector (1, 0) of V repels: a limit there is 0.6435 rad from the attracting (4, 3).
    "softmax_either_blowup_direction": lambda: claims.blowup_direction(
        [abs(wrapped_angle(0.0 - np.arctan2(3.0, 4.0)))], 1e-6
    ),
    # Disk points (0, -1) (stable line (1, -1)) and (0, 1) (unstable (1, 1)) are 2 apart.
    "softmax_either_converged_on_stable_line": lambda: claims.stable_line([2.0], [1e-3]),
    "sinkhorn_growth_within_exponential_bound": lambda: claims.growth_bound(
        "sinkhorn",
        l2_growth_excess(_GROWTH, 2 * np.exp(4 * _GROWTH), np.eye(2)[None], np.array([2.0])),
        rtol=1e-8,
    ),
}
for _name, _control in _COUNTER.items():
    negative_control("pde-cone", _name)(_control)
