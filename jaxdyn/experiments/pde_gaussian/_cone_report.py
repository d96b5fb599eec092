"""Figures and checks of ``pde-cone`` against the derived softmax flows
(:func:`jaxdyn.meanfield.cone_cases`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import status_code
from jaxdyn.evidence import ErrorModel, Evidence, at_most
from jaxdyn.meanfield import (
    blowup_time,
    claims,
    limiting_rank,
    low_rank_limit,
    softmax_identity_covariance,
)
from jaxdyn.meanfield._blowup import l2_growth_excess
from jaxdyn.meanfield._cone import (
    ConeOutcome,
    disk_coordinates,
    isotropic_line_stability,
    trace_one_covariances,
    two_lines_covariance,
)
from jaxdyn.meanfield._paper_inputs import CONE_CASES
from jaxdyn.runs import negative_control

from ._cone_either import either_blowup_checks, either_converged_checks, softmax_field

CONVERGED = status_code(ConeOutcome.converged)
BLOWUP = status_code(ConeOutcome.blowup)
COLORS = {CONVERGED: "C0", BLOWUP: "C3", status_code(ConeOutcome.undecided): "C0"}


def _path(covs: np.ndarray, final: np.ndarray) -> np.ndarray:
    """The finite saves of one run followed by its final state."""
    return np.concatenate([covs[np.all(np.isfinite(covs), axis=(1, 2))], final[None]])


def cone_figures(run, covs0, out, ok, variants) -> None:
    """Unit-disk pictures of ``Sigma / tr Sigma`` (blue: no blow-up, filled end dot if converged;
    red: blow-up, x at the event; black: initial conditions) and a 3-D cone picture (softmax):
    ``Sigma`` as ``(a - b, 2c, a + b)`` with the trace log-compressed to ``h = log(1 + tr)``
    (radius scaled alike), so the PSD cone stays the cone ``|(x, y)| <= h``."""
    import matplotlib.pyplot as plt

    from jaxdyn.plotting import cone_axes, new_figure, note_excluded

    start = disk_coordinates(covs0)
    outcome = out["outcome"]
    fig, axes = new_figure(len(variants), len(CONE_CASES), width=2.4, height=2.4)
    for ci, name in enumerate(CONE_CASES):
        for vi, variant in enumerate(variants):
            ax = cone_axes(axes[vi, ci], title=f"{name} / {variant}")
            ax.plot(start[:, 0], start[:, 1], "k.", ms=1.5)
            for m in np.flatnonzero(ok[ci, vi]):
                path = disk_coordinates(_path(out["covs"][ci, vi, m], out["final_cov"][ci, vi, m]))
                code = int(outcome[ci, vi, m])
                ax.plot(path[:, 0], path[:, 1], lw=0.6, color=COLORS[code])
                marker = "x" if code == BLOWUP else "o"
                face = COLORS[code] if code == CONVERGED else "none"
                ax.plot(*path[-1], marker, ms=3, color=COLORS[code], mfc=face)
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
                [0, h_max * np.cos(phi)], [0, h_max * np.sin(phi)], [0, h_max], color="0.75", lw=0.5
            )
        ax.set(xlim=(-h_max, h_max), ylim=(-h_max, h_max), zlim=(0, h_max))
        ax.set_title(f"softmax: {name}", fontsize=9)
        ax.set_xlabel("(a - b) s", fontsize=7)
        ax.set_ylabel("2c s", fontsize=7)
        ax.set_zlabel("log(1 + tr)", fontsize=7)
    fig.text(0.01, 0.01, "s = log(1 + tr) / tr", fontsize=7)
    run.save_figure(fig, "cone_3d")


def _interaction(case) -> np.ndarray:
    return case["K"].T @ case["Q"] / np.sqrt(2)


# Accepted entry error of the cone solves (rtol 1e-8 over O(100) steps, entries O(1)).
ENTRY_TOLERANCE = 1e-5
ENTRY_BASIS = "solver global error on O(1) entries (rtol 1e-8 accumulated)"


def to_line_evidence(exact, final) -> Evidence:
    """Softmax ``V = I``, ``A + A^T <= 0`` of rank one: ``Sigma(t1)`` is the closed form."""
    return claims.covariance(
        "softmax V = I: Sigma(t) = (Sigma_0^-1 - t (A + A^T))^-1",
        exact,
        final,
        tolerance=ENTRY_TOLERANCE,
        basis=ENTRY_BASIS,
    )


def two_lines_evidence(exact, final) -> Evidence:
    """The two-lines case (V A = -I): ``Sigma(t1)`` is the exact Riccati solution."""
    return claims.covariance(
        "two lines: c constant, a and b solve y' = -2 (y^2 - c^2)",
        exact,
        final,
        tolerance=ENTRY_TOLERANCE,
        basis=ENTRY_BASIS,
    )


def line_distance_evidence(distance, exact_distance, tr) -> Evidence:
    """Disk distance to the limit line at ``t1`` against the exact flow's: an entry error eps
    moves each disk coordinate by at most ``4 eps / tr``, so the distance by ``4 sqrt 2 eps /
    tr``."""
    return claims.error_bound(
        "two lines: Sigma / tr Sigma approaches the isotropic line of sign(c0) as the exact "
        "flow does",
        np.abs(np.asarray(distance) - np.asarray(exact_distance)),
        4 * np.sqrt(2) * ENTRY_TOLERANCE / np.asarray(tr),
        basis="the accepted entry error moves disk coordinates by <= 4 sqrt 2 eps / tr",
    )


def cone_checks(config, run, cases, covs0, out, ok, variants, ts) -> None:
    """Softmax against its closed forms and derived flows; L2 never blows up."""
    soft = variants.index("softmax")
    final, outcome = out["final_cov"], out["outcome"]
    end = disk_coordinates(final)  # Sigma / tr Sigma at t1 or at the blow-up event

    ci = CONE_CASES.index("to_line")  # V = I: the closed form at t1, rank one
    A = _interaction(cases["to_line"])
    expected = np.stack([np.asarray(softmax_identity_covariance(c, A, config.t1)) for c in covs0])
    run.evidence("softmax_to_line_matches_closed_form", to_line_evidence(expected, final[ci, soft]))
    ranks = np.asarray(jax.vmap(limiting_rank)(jnp.asarray(final[ci, soft])))
    run.evidence(
        "softmax_to_line_rank_one",
        claims.outcome(
            "softmax V = I, rank-one A + A^T <= 0: Sigma(t1) has rank one",
            predicted=1,
            measured=ranks,
            basis="eigenvalues of Sigma(t1) above 0.1 (the other decays like 1/t)",
        ),
    )
    limit = np.stack([np.asarray(low_rank_limit(c, A)) for c in covs0])
    run.scalar("to_line_distance_to_limit_at_t1", float(np.max(np.abs(final[ci, soft] - limit))))
    _two_lines_checks(config, run, covs0, final, end, outcome, soft)

    ci = CONE_CASES.index("blowup")  # V = I: the event fires before the closed-form t*
    t_star = np.array([float(blowup_time(c, _interaction(cases["blowup"]))) for c in covs0])
    run.evidence(
        "softmax_blowup_event_before_closed_form_time",
        claims.outcome(
            "softmax V = I, A + A^T > 0: the trace reaches blowup_trace before t*",
            predicted=True,
            measured=(outcome[ci, soft] == BLOWUP) & (out["t_event"][ci, soft] <= t_star),
            basis="blow-up event time against the closed-form t*",
        ),
    )
    _either_checks(config, run, cases, out, outcome, soft, ts)

    l2 = variants.index("l2")
    run.evidence(
        "l2_never_blows_up",
        claims.outcome(
            "L2 Gaussians never blow up (all five cases)",
            predicted=False,
            measured=outcome[:, l2] == BLOWUP,
            basis="the blow-up event did not fire by t1",
        ),
    )
    ci = CONE_CASES.index("to_zero")
    tr_end = np.trace(final[ci, soft], axis1=-2, axis2=-1)[ok[ci, soft]]
    tr_mid = np.trace(out["covs"][ci, soft, :, config.saves // 2], axis1=-2, axis2=-1)
    decreasing = (tr_end < tr_mid[ok[ci, soft]]) & (tr_mid[ok[ci, soft]] < 1.0)
    run.evidence(
        "softmax_to_zero_trace_decreases",
        claims.outcome(
            "V SPD, A + A^T < 0: Sigma -> 0 (the trace decreases)",
            predicted=True,
            measured=decreasing,
            basis="trace 1 initially, smaller at the middle save, smaller still at t1",
        ),
    )
    run.scalar("to_zero_max_trace_at_t1", float(tr_end.max()) if tr_end.size else None)
    if "sinkhorn" in variants:
        sk = variants.index("sinkhorn")
        _sinkhorn_checks(config, run, cases, covs0, out, ok, outcome, sk, ts)
    if "multihead" in variants:
        _multihead_to_line_check(run, out, ok, variants.index("multihead"))


SINKHORN_BOUNDED = (
    "Sinkhorn Gaussians grow at most exponentially (no finite-time blow-up): |phi(A~)|_2 < 1, "
    "so tr Sigma(t) <= d |Sigma_0|_2 exp(2 |V|_2 t) (all five cases)"
)
SINKHORN_TO_ZERO = (
    "Sinkhorn, V SPD, A = -Q^T Q < 0: tr(V^-1 Sigma) decreases (d/dt = 2 tr(S phi(S A S) S) "
    "< 0), so Sigma -> 0 (the trace decreases)"
)


def sinkhorn_growth_evidence(excess, rtol) -> Evidence:
    return at_most(
        SINKHORN_BOUNDED,
        measured=float(np.max(excess)),
        limit=0.0,
        error_model=ErrorModel.solver_tolerance(
            100 * rtol, basis="relative state error of the solve (100 rtol) on log tr"
        ),
    )


@negative_control("pde-cone", "sinkhorn_growth_within_exponential_bound")
def _growth_at_twice_the_sinkhorn_rate():
    # a trace growing like exp(4 |V| t), as a finite-time blow-up eventually outgrows the bound
    ts = np.linspace(0.0, 2.0, 5)[None]
    rate = np.array([2.0])
    return sinkhorn_growth_evidence(
        l2_growth_excess(ts, 2.0 * np.exp(2 * rate[:, None] * ts), np.eye(2)[None], rate), 1e-8
    )


def sinkhorn_to_zero_evidence(decreasing) -> Evidence:
    return claims.outcome(
        SINKHORN_TO_ZERO,
        predicted=True,
        measured=np.asarray(decreasing, bool),
        basis="trace 1 initially, smaller at the middle save, smaller still at t1",
    )


@negative_control("pde-cone", "sinkhorn_to_zero_trace_decreases")
def _sinkhorn_with_the_sign_of_a_flipped():
    # A = +Q^T Q: tr(V^-1 Sigma) increases, the trace grows from 1
    return sinkhorn_to_zero_evidence(np.array([False, False, True]))


def _sinkhorn_checks(config, run, cases, covs0, out, ok, outcome, sk, ts) -> None:
    """Sinkhorn (``A = K^T Q``, eps = 1): at most exponential growth in every case; to zero in
    the to-zero case.

    [derived] ``dSigma/dt = V S phi(A~) S + transpose`` with ``S = Sigma^{1/2}``,
    ``A~ = S A S`` and ``phi(A~) = 2 A~ (I + (I + 4 A~^T A~)^{1/2})^{-1}``, whose singular values
    are ``2 s / (1 + (1 + 4 s^2)^{1/2}) < 1``: ``|dSigma/dt|_2 < 2 |V|_2 |Sigma|_2``, so no
    finite-time blow-up: ``|Sigma(t)|_2 <= |Sigma_0|_2 e^{2 |V|_2 t}`` (Gronwall). For
    symmetric ``V > 0`` and symmetric ``A < 0``, ``phi(A~)`` is symmetric negative definite
    where ``Sigma > 0`` and ``d/dt tr(V^-1 Sigma) = 2 tr(S phi(A~) S) < 0``.
    """
    # Saves up to the solve's end (an event at tr = blowup_trace ends it), and the end itself.
    covs, final = out["covs"][:, sk], out["final_cov"][:, sk]  # (cases, runs, saves, 2, 2)
    t_end = np.where(np.isfinite(out["t_event"][:, sk]), out["t_event"][:, sk], config.t1)
    # t = 0 is left out: there the bound is an identity for an isotropic Sigma_0 (tr = d |.|_2)
    reached = (ts[None, None, :] <= t_end[..., None]) & (ts[None, None, :] > 0)
    times = np.concatenate([np.where(reached, ts, np.inf), t_end[..., None]], axis=-1)
    traces = np.concatenate(
        [np.trace(covs, axis1=-2, axis2=-1), np.trace(final, axis1=-2, axis2=-1)[..., None]],
        axis=-1,
    )
    rates = np.array([2 * np.linalg.norm(cases[c]["V"], 2) for c in CONE_CASES])
    runs = ok[:, sk]
    excess = l2_growth_excess(
        times[runs],
        traces[runs],
        np.broadcast_to(covs0, covs.shape[:2] + (2, 2))[runs],
        np.broadcast_to(rates[:, None], runs.shape)[runs],
    )
    run.evidence(
        "sinkhorn_growth_within_exponential_bound",
        sinkhorn_growth_evidence(excess, config.rtol),
        note=f"{int(runs.sum())} runs of the five cases, every save 0 < t <= end of the solve",
    )
    run.report(
        "sinkhorn_blowup_events",
        measured=int(np.sum((outcome[:, sk] == BLOWUP) & runs)),
        note="runs whose trace reached blowup_trace by t1: exponential growth (2 |V| t1 > "
        "log(blowup_trace)), not a finite-time blow-up",
    )
    ci = CONE_CASES.index("to_zero")
    tr_end = np.trace(out["final_cov"][ci, sk], axis1=-2, axis2=-1)
    tr_mid = np.trace(out["covs"][ci, sk, :, config.saves // 2], axis1=-2, axis2=-1)
    run.evidence(
        "sinkhorn_to_zero_trace_decreases",
        sinkhorn_to_zero_evidence(ok[ci, sk] & (tr_end < tr_mid) & (tr_mid < 1.0)),
    )


MULTIHEAD_TO_LINE = (
    "2-head multi-head on the to-line weights (Q = [q; 0], K = -Q, V = W = I): only head 0 "
    "acts, with C_0 = e_0 e_0^T, so dSigma_11/dt = 0 (Sigma_11 conserved) and "
    "d tr Sigma/dt = -2 (Sigma q)_0^2 <= 0"
)


def _multihead_to_line_check(run, out, ok, mh) -> None:
    """Multi-head on the to-line weights: head 1 has ``Q_1 = 0`` (no interaction) and head 0
    ``A_0 = -q^T q``, ``C_0 = W_0^T V_0 = e_0 e_0^T``: ``dSigma/dt = C_0 Sigma A_0 Sigma +
    transpose`` has a zero second row and column. So ``Sigma_11(t) = Sigma_11(0)`` and the trace
    does not increase: the flow does not approach softmax's line (whose ``Sigma_11`` changes)."""
    ci = CONE_CASES.index("to_line")
    good = ok[ci, mh]
    covs = out["covs"][ci, mh][good]  # (runs, saves, 2, 2), every save finite (no event)
    drift = np.abs(covs[:, :, 1, 1] - covs[:, :1, 1, 1])
    trace = np.trace(covs, axis1=-2, axis2=-1)
    rise = np.diff(trace, axis=1)
    # A structural invariant of the multi-head field (a zero second row and column): a failure
    # is a bug in the field or the solve, so it is consistency, not evidence of a claim.
    worst = float(max(drift.max(initial=0.0), np.maximum(rise, 0.0).max(initial=0.0)))
    run.consistency(
        "multihead_to_line_conserves_sigma_11",
        expected=0.0,
        measured=worst,
        tolerance=ENTRY_TOLERANCE,
        basis=ENTRY_BASIS,
        note=f"{MULTIHEAD_TO_LINE}; {int(good.sum())} runs x {covs.shape[1]} saves: the largest "
        "|Sigma_11(t) - Sigma_11(0)| and rise of tr Sigma between saves",
    )


def _two_lines_checks(config, run, covs0, final, end, outcome, soft) -> None:
    """Every run converges to the line of sign(c0); Sigma(t1) is the exact Riccati solution."""
    ci = CONE_CASES.index("two_lines")
    c0 = covs0[:, 0, 1]
    off = np.abs(c0) > 1e-12
    run.evidence(
        "softmax_two_lines_no_run_blows_up",
        claims.outcome(
            "two lines (V A = -I): no run blows up",
            predicted=False,
            measured=outcome[ci, soft] == BLOWUP,
            basis="the blow-up event did not fire by t1",
        ),
    )
    run.evidence(
        "softmax_two_lines_off_axis_runs_converge",
        claims.outcome(
            "two lines: every run with c0 != 0 converges (c0 = 0 decays like 1/t)",
            predicted=True,
            measured=outcome[ci, soft][off] == CONVERGED,
            basis="cone_outcome: |dSigma/dt| below converged_tol at t1",
        ),
    )
    exact = np.stack([two_lines_covariance(c, config.t1) for c in covs0])
    run.evidence(
        "softmax_two_lines_matches_exact_solution", two_lines_evidence(exact, final[ci, soft])
    )
    # The exact flow reaches the line (0, sign c0) as t -> inf; at t1 it is still
    # dist_exact(t1) away.
    line = np.stack([np.zeros_like(c0), np.sign(c0)], -1)
    dist = np.linalg.norm(end[ci, soft][off] - line[off], axis=-1)
    dist_exact = np.linalg.norm(disk_coordinates(exact[off]) - line[off], axis=-1)
    run.scalar("two_lines_max_exact_distance_to_line_at_t1", float(dist_exact.max()))
    run.evidence(
        "softmax_two_lines_limits_on_the_two_isotropic_lines",
        line_distance_evidence(dist, dist_exact, np.trace(exact[off], axis1=1, axis2=2)),
    )
    run.evidence(
        "softmax_two_lines_both_lines_reached",
        claims.outcome(
            "two lines: both isotropic lines are limits (signs of 2c / tr at t1)",
            predicted=[-1.0, 1.0],
            measured=_signs_reached(end[ci, soft][off, 1]),
            basis="distinct signs of 2c / tr among the off-axis runs",
        ),
    )


def _signs_reached(values) -> np.ndarray:
    """``[-1, 1]`` if both signs occur in ``values``, else the one that does, padded with 0."""
    signs = sorted(set(np.sign(np.asarray(values)).tolist()) - {0.0})
    return np.array((signs + [0.0, 0.0])[:2]) if len(signs) < 2 else np.array(signs)


@negative_control("pde-cone", "softmax_to_line_matches_closed_form")
def _to_line_with_a_faster_value_matrix():
    # V = 1.01 I runs the V = I flow at speed 1.01: Sigma(t1) is the closed form at 1.01 t1.
    A = np.array([[-1.0, 0.5], [-0.5, 0.0]]) / np.sqrt(2)
    covs = trace_one_covariances(3, 0.8)
    exact = np.stack([np.asarray(softmax_identity_covariance(c, A, 5.0)) for c in covs])
    faster = np.stack([np.asarray(softmax_identity_covariance(c, A, 5.05)) for c in covs])
    return to_line_evidence(exact, faster)


@negative_control("pde-cone", "softmax_to_line_rank_one")
def _to_line_ranks_of_the_initial_conditions():
    # Sigma_0 on the grid has full rank: a flow that did not collapse.
    covs = trace_one_covariances(3, 0.5)
    ranks = np.asarray(jax.vmap(lambda c: limiting_rank(c))(jnp.asarray(covs)))
    return claims.outcome("rank one", predicted=1, measured=ranks, basis="counterfactual")


@negative_control("pde-cone", "softmax_blowup_event_before_closed_form_time")
def _events_after_the_closed_form_time():
    return claims.outcome(
        "blow-up before t*",
        predicted=True,
        measured=np.array([True, False]),
        basis="counterfactual",
    )


@negative_control("pde-cone", "l2_never_blows_up")
def _softmax_outcomes_as_l2():
    return claims.outcome(
        "L2 never blows up", predicted=False, measured=np.array([False, True]), basis="softmax"
    )


@negative_control("pde-cone", "softmax_to_zero_trace_decreases")
def _trace_of_a_blowup():
    return claims.outcome(
        "trace decreases", predicted=True, measured=np.array([False, False]), basis="blowup case"
    )


@negative_control("pde-cone", "softmax_two_lines_no_run_blows_up")
def _two_lines_with_a_blowup():
    return claims.outcome(
        "no blow-up", predicted=False, measured=np.array([True, False]), basis="counterfactual"
    )


@negative_control("pde-cone", "softmax_two_lines_off_axis_runs_converge")
def _two_lines_undecided():
    return claims.outcome(
        "converge", predicted=True, measured=np.array([True, False]), basis="counterfactual"
    )


@negative_control("pde-cone", "softmax_two_lines_matches_exact_solution")
def _two_lines_solution_at_another_time():
    covs = trace_one_covariances(3, 0.8)
    exact = np.stack([two_lines_covariance(c, 5.0) for c in covs])
    later = np.stack([two_lines_covariance(c, 5.1) for c in covs])
    return two_lines_evidence(exact, later)


@negative_control("pde-cone", "softmax_two_lines_limits_on_the_two_isotropic_lines")
def _two_lines_distance_at_another_time():
    covs = trace_one_covariances(5, 0.8)
    c0 = covs[:, 0, 1]
    off = np.abs(c0) > 1e-12
    line = np.stack([np.zeros_like(c0), np.sign(c0)], -1)[off]
    exact = np.stack([two_lines_covariance(c, 5.0) for c in covs])[off]
    later = np.stack([two_lines_covariance(c, 5.1) for c in covs])[off]

    def dist(cov):
        return np.linalg.norm(disk_coordinates(cov) - line, axis=-1)

    return line_distance_evidence(dist(later), dist(exact), np.trace(exact, axis1=1, axis2=2))


@negative_control("pde-cone", "softmax_two_lines_both_lines_reached")
def _one_line_only():
    return claims.outcome(
        "both lines",
        predicted=[-1.0, 1.0],
        measured=_signs_reached([0.9, 0.8, 0.95]),
        basis="counterfactual: every run on one line",
    )


def _either_checks(config, run, cases, out, outcome, soft, ts) -> None:
    """Both outcomes occur; blow-ups end on the attracting blow-up direction of V, convergent
    runs on the stable isotropic line (both derived from A and V; ``_cone_either``)."""
    ci = CONE_CASES.index("either")
    case = cases["either"]
    lines = isotropic_line_stability(_interaction(case), case["V"])
    run.scalar("either_line_kappas", {str(np.round(e, 4).tolist()): k for e, k in lines})
    out_e = outcome[ci, soft]
    n_blow, n_conv = int(np.sum(out_e == BLOWUP)), int(np.sum(out_e == CONVERGED))
    run.scalar("either_softmax_blowup_runs", n_blow)
    run.scalar("either_softmax_converged_runs", n_conv)
    run.evidence(
        "softmax_either_both_outcomes_occur",
        claims.outcome(
            "either: some starts blow up, others converge",
            predicted=[True, True],
            measured=[n_blow > 0, n_conv > 0],
            basis="outcome counts of the case's runs (blow-up, converged)",
        ),
    )
    run.evidence(
        "softmax_either_every_run_decided",
        claims.outcome(
            "either: each run blows up or converges by t1",
            predicted=True,
            measured=(out_e == BLOWUP) | (out_e == CONVERGED),
            basis="cone_outcome at t1",
        ),
    )
    final = out["final_cov"][ci, soft]
    field = softmax_field(case)
    either_blowup_checks(config, run, field, final[out_e == BLOWUP])
    converged = out_e == CONVERGED
    either_converged_checks(
        config, run, field, out["covs"][ci, soft][converged], final[converged], ts
    )


@negative_control("pde-cone", "softmax_either_both_outcomes_occur")
def _either_with_one_outcome():
    return claims.outcome(
        "both outcomes", predicted=[True, True], measured=[True, False], basis="counterfactual"
    )


@negative_control("pde-cone", "softmax_either_every_run_decided")
def _either_with_an_undecided_run():
    return claims.outcome(
        "decided", predicted=True, measured=np.array([True, False]), basis="counterfactual"
    )
