"""Figures and checks of ``pde-cone`` against the derived softmax flows
(:func:`jaxdyn.meanfield.cone_cases`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import status_code
from jaxdyn.meanfield import (
    CONE_CASES,
    ConeOutcome,
    blowup_time,
    disk_coordinates,
    isotropic_line_stability,
    limiting_rank,
    low_rank_limit,
    softmax_identity_covariance,
    two_lines_covariance,
)

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


def cone_checks(config, run, cases, covs0, out, ok, variants, ts) -> None:
    """Softmax against its closed forms and derived flows; L2 never blows up."""
    soft = variants.index("softmax")
    final, outcome = out["final_cov"], out["outcome"]
    end = disk_coordinates(final)  # Sigma / tr Sigma at t1 or at the blow-up event

    ci = CONE_CASES.index("to_line")  # V = I: the closed form at t1, rank one
    A = _interaction(cases["to_line"])
    expected = np.stack([np.asarray(softmax_identity_covariance(c, A, config.t1)) for c in covs0])
    run.check(
        "softmax_to_line_matches_closed_form",
        expected=0.0,
        tolerance=1e-5,
        measured=float(np.max(np.abs(final[ci, soft] - expected))),
    )
    ranks = np.asarray(jax.vmap(limiting_rank)(jnp.asarray(final[ci, soft])))
    run.check(
        "softmax_to_line_rank_one",
        expected=1,
        measured=int(np.max(ranks)),
        tolerance=0.0,
        note="eigenvalues of Sigma(t1) above 0.1 (the other decays like 1/t)",
    )
    limit = np.stack([np.asarray(low_rank_limit(c, A)) for c in covs0])
    run.scalar("to_line_distance_to_limit_at_t1", float(np.max(np.abs(final[ci, soft] - limit))))
    _two_lines_checks(config, run, covs0, final, end, outcome, soft)

    ci = CONE_CASES.index("blowup")  # V = I: the event fires before the closed-form t*
    t_star = np.array([float(blowup_time(c, _interaction(cases["blowup"]))) for c in covs0])
    early = (outcome[ci, soft] == BLOWUP) & (out["t_event"][ci, soft] <= t_star)
    run.check(
        "softmax_blowup_event_before_closed_form_time",
        expected=len(covs0),
        measured=int(early.sum()),
        tolerance=0.0,
    )
    _either_checks(config, run, cases, out, outcome, soft, ts)

    l2 = variants.index("l2")
    run.check(
        "l2_never_blows_up",
        expected=0,
        measured=int(np.sum(outcome[:, l2] == BLOWUP)),
        tolerance=0.0,
        note="L2 Gaussians over all five cases",
    )
    ci = CONE_CASES.index("to_zero")
    tr_end = np.trace(final[ci, soft], axis1=-2, axis2=-1)[ok[ci, soft]]
    tr_mid = np.trace(out["covs"][ci, soft, :, config.saves // 2], axis1=-2, axis2=-1)
    decreasing = (tr_end < tr_mid[ok[ci, soft]]) & (tr_mid[ok[ci, soft]] < 1.0)
    run.check(
        "softmax_to_zero_trace_decreases",
        expected=len(covs0),
        measured=int(decreasing.sum()),
        tolerance=0.0,
        note="trace 1 initially, smaller at the middle save, smaller still at t1",
    )
    run.scalar("to_zero_max_trace_at_t1", float(tr_end.max()) if tr_end.size else None)


def _two_lines_checks(config, run, covs0, final, end, outcome, soft) -> None:
    """Every run converges to the line of sign(c0); Sigma(t1) is the exact Riccati solution."""
    ci = CONE_CASES.index("two_lines")
    c0 = covs0[:, 0, 1]
    off = np.abs(c0) > 1e-12
    run.check(
        "softmax_two_lines_no_run_blows_up",
        expected=0,
        tolerance=0.0,
        measured=int(np.sum(outcome[ci, soft] == BLOWUP)),
    )
    run.check(
        "softmax_two_lines_off_axis_runs_converge",
        expected=int(off.sum()),
        tolerance=0.0,
        measured=int(np.sum(outcome[ci, soft][off] == CONVERGED)),
        note="runs with c0 != 0 (those with c0 = 0 decay to 0 like 1/t)",
    )
    exact = np.stack([two_lines_covariance(c, config.t1) for c in covs0])
    run.check(
        "softmax_two_lines_matches_exact_solution",
        expected=0.0,
        tolerance=1e-5,
        measured=float(np.max(np.abs(final[ci, soft] - exact))),
        note="c constant, a and b solve y' = -2 (y^2 - c^2)",
    )
    # The exact flow reaches the line (0, sign c0) as t -> inf; at t1 it is still
    # dist_exact(t1) away. An entry error eps of Sigma moves each disk coordinate
    # ((a - b) / tr, 2c / tr) by at most 4 eps / tr, so by 4 sqrt(2) eps / tr in norm; eps is
    # the 1e-5 of the exact-solution check above.
    line = np.stack([np.zeros_like(c0), np.sign(c0)], -1)
    dist = np.linalg.norm(end[ci, soft][off] - line[off], axis=-1)
    dist_exact = np.linalg.norm(disk_coordinates(exact[off]) - line[off], axis=-1)
    allowed = 4 * np.sqrt(2) * 1e-5 / np.trace(exact[off], axis1=1, axis2=2)
    run.scalar("two_lines_max_exact_distance_to_line_at_t1", float(dist_exact.max()))
    run.check(
        "softmax_two_lines_limits_on_the_two_isotropic_lines",
        expected=0,
        tolerance=0.0,
        measured=int(np.sum(dist > dist_exact + allowed)),
        note="runs (c0 != 0) whose |Sigma/tr Sigma - (0, sign c0)| at t1 exceeds the exact "
        "flow's distance at t1 plus the effect of the solver's 1e-5 entry error",
    )
    run.check(
        "softmax_two_lines_both_lines_reached",
        expected=2,
        tolerance=0.0,
        measured=len(set(np.sign(end[ci, soft][off, 1]).tolist())),
        note="distinct signs of 2c/tr at t1: two distinct rank-one limits",
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
    run.check(
        "softmax_either_both_outcomes_occur",
        expected="both",
        measured="both" if n_blow and n_conv else f"blowup={n_blow}, converged={n_conv}",
    )
    run.check(
        "softmax_either_every_run_decided",
        expected=len(out_e),
        tolerance=0.0,
        measured=n_blow + n_conv,
        note="each run blows up or converges by t1",
    )
    final = out["final_cov"][ci, soft]
    field = softmax_field(case)
    either_blowup_checks(config, run, field, final[out_e == BLOWUP])
    converged = out_e == CONVERGED
    either_converged_checks(
        config, run, field, out["covs"][ci, soft][converged], final[converged], ts
    )
