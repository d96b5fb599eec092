"""The checks one :class:`FlowAnalysis` supports, as the calls that record them.

A flow's analysis decides the per-chain claims of :mod:`jaxdyn.gradflow.claims` (the plateau,
the condensation's alignments, the saddle's unstable mode, the first attention phase, the
stage order, the entropy's down-up-down, the dilution mode's rate) and checks its closed-form
rates against the Jacobian (consistency). :meth:`FlowAnalysis.checks` returns them as
``(method, args, kwargs)`` calls of a run's recorder (``evidence``, ``consistency``,
``report``, ``scalar``, ``log``), so the library decides and an application records.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.flatten_util
import numpy as np

from .._status import Status
from . import claims

# Float64 Hessians and ``eigh`` have backward errors ~ n u ||J|| (about 1e-13 for the sizes
# used); root-found points leave gradient residuals below 1e-10. A formula that is wrong is off
# by O(1), so agreement to 1e-8 relative separates the two with room on both sides.
EIGEN_RTOL = 1e-8

# a flow whose ||grad L|| at the end of its horizon is below this is at a steady state there
# (the rank-one stall's steady-state stop uses 1e-9): its entropy course is complete
STEADY_GRAD = 1e-8


class _Recorder:
    """Collects the calls a run would receive, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict[str, Any]]] = []

    def __getattr__(self, method: str):
        if method not in ("evidence", "consistency", "report", "scalar", "log"):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.calls.append((method, args, kwargs))


def _rates(run: _Recorder, a, tag: str) -> None:
    """Closed-form rates against the Jacobian and the trajectory: two computations of one
    quantity each (consistency)."""
    r = a.rates
    c, mu1 = float(r.focus), float(r.condensation)
    run.consistency(
        f"condensation_rate{tag}",
        expected=mu1,
        measured=float(r.condensation_jacobian),
        tolerance=EIGEN_RTOL,
        relative=True,
        basis="eigh backward error",
        note="top eigenvalue of J = -Hess L at theta = 0 vs ||pi|| ||pi - 1/d 1||",
    )
    fit, bound = a.condensation_fit()
    if fit is None:  # no save in the linear regime (e.g. t1 ends before condensation)
        run.report(
            f"condensation_rate_fit{tag}",
            measured=float("nan"),
            claim="growth rate of theta's projection on the unstable eigenspace at 0 = mu1",
            note="not measurable: no save of the flow lies in the linear regime before the "
            "condensation (a longer t1 or more saves)",
        )
    else:
        run.consistency(
            f"condensation_rate_fit{tag}",
            expected=mu1,
            measured=fit.slope,
            tolerance=bound,
            basis="the linearisation's largest rate error in the fit window",
            note=f"growth rate of theta's projection on the unstable eigenspace at 0, fitted on "
            f"{fit.n} saves where the flow is linear: only a solver error can fail it (the "
            "window is chosen where the linearisation holds)",
        )
    run.consistency(
        f"focus_rate_closed_form_saddle{tag}",
        expected=c,
        measured=float(r.focus_jacobian),
        tolerance=EIGEN_RTOL * max(abs(c), 1e-12),
        basis="eigh backward error",
        note="signed top attention eigenvalue of J at the closed-form saddle vs "
        "c = Var_pi(gamma) Cov_pi(gamma, P beta)",
    )
    c_v = float(r.focus_visited_formula)
    run.consistency(
        f"focus_rate{tag}",
        expected=c_v,
        measured=float(r.focus_visited),
        tolerance=EIGEN_RTOL * max(abs(c_v), 1e-12),
        basis="eigh backward error",
        note="signed top attention eigenvalue of J at the saddle the flow visits vs "
        f"Var_pi(gamma) Cov_pi(gamma, P beta) of that saddle (closed-form balanced saddle: "
        f"c = {c:.6g})",
    )


def _saddle_evidence(run: _Recorder, a, tag: str) -> None:
    """The plateau, the condensation's alignments and the saddle's unstable mode."""
    H, d = float(a.stages.uniform_entropy), len(a.chain.pi)
    t_p, loss_p, bound_p = a.plateau()
    plateau = claims.unigram_plateau(loss_p, bound_p, H, float(np.log(d)))
    run.evidence(
        f"unigram_plateau{tag}",
        plateau,
        note=f"loss at the save nearest a critical point (t = {t_p:.4g})",
    )
    mu1 = float(a.rates.condensation)
    i = a.linear_window()
    noise = float(np.linalg.norm(jax.flatten_util.ravel_pytree(_at(a.trajectory, 0))[0]))
    model = _at(a.trajectory, max(i, 0))
    err = a.metrics["condensation_nonlinearity"]
    run.evidence(
        f"condensation_alignment{tag}",
        claims.condensation_alignment(
            model.W0,
            model.W1,
            a.chain.pi,
            noise=noise,
            amplitude=float(a.metrics["condensation_amplitude"][i]) if i >= 0 else 0.0,
            nonlinearity=float(np.max(err[1 : i + 1])) if i >= 1 else 0.0,
            rate=mu1,
        ),
        note=f"at t = {float(a.ts[max(i, 0)]):.4g}, the last save of the linear regime",
    )
    m_attn = int(a.trajectory.WQ.shape[-1])
    c_v = float(a.rates.focus_visited)
    run.evidence(
        f"unstable_attention_mode{tag}",
        claims.unstable_attention_mode(
            a.spectrum_saddle.eigenvalues,
            a.spectrum_saddle.attention_weight,
            c_v,
            m_attn,
            tolerance=EIGEN_RTOL * max(float(np.max(np.abs(a.spectrum_saddle.eigenvalues))), 1.0),
        ),
        note="spectrum of J at the saddle the flow visits",
    )
    sd = a.score_angle()
    run.evidence(
        f"score_direction{tag}",
        claims.score_direction(sd["angle"], sd["bound"], at_saddle=plateau.holds),
        note=f"angle between Phi and sign(c) pi pi^T at t = {sd['time']:.4g} (from the save "
        f"nearest the saddle to the departure, the one with the smallest bound): e = "
        f"{sd['embedding_offset']:.2g}, nu = {sd['attention_ratio']:.2g}, sin(gamma_v, pi) = "
        f"{sd['saddle_sin']:.2g}",
    )


def _at(tree, i: int):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def _stage_evidence(
    run: _Recorder, a, tag: str, tolerances: tuple[float, float], horizon: str = ""
) -> None:
    """Stage order from each stage's own signature, the low-query entropy's down-up-down and
    the embedding PCA (``c > 0``)."""
    st = a.stages
    sig = st.signature_times()
    horizon = f" ({horizon or f'horizon t1 = {float(a.end_time):.4g}'}, {int(a.num_steps)} steps)"
    run.evidence(
        f"stages_in_order{tag}",
        claims.stages_in_order(a.ts, sig, horizon_note=horizon),
        note="first crossing of each stage's own signature, searched from t = 0",
    )
    run.evidence(
        f"focus_fastest_for_frequent_queries{tag}",
        claims.focus_fastest_for_frequent_queries(
            a.ts, a.metrics["entropy_query"], a.chain.pi, float(st.uniform_entropy)
        ),
        note="first save where each query's attention entropy is 1% below H(pi)",
    )
    dip, peak, H = float(st.entropy_dip), float(st.entropy_peak), float(st.uniform_entropy)
    rtol, atol = tolerances
    after = float(st.entropy_after_peak)
    # the entropy's scale: its peak, or H(pi) when dilution was not reached (peak NaN)
    scale = float(np.nanmax([abs(peak), H]))
    solver_error = int(a.num_steps) * (rtol * scale + atol)
    run.evidence(
        f"entropy_down_up_down{tag}",
        claims.entropy_down_up_down(
            dip,
            peak,
            after,
            H,
            solver_error,
            complete=bool(np.isfinite(sig["new_direction"])),
            settled=bool(float(a.metrics["grad_norm"][-1]) <= STEADY_GRAD),
        ),
        note="low-query entropy: minimum before dilution, maximum after it, minimum after that",
    )
    _dilution_rate_evidence(run, a, tag)
    pca = a.pca_stage_changes()
    run.report(
        f"pca_stage_changes{tag}",
        measured=pca,
        claim="stage III moves the frequent and low-frequency embedding rows apart along PC1; "
        "stage IV spreads them along PC2",
        note="the PCA picture of the paper, reported: its axes are fitted to the trajectory",
    )


def _dilution_rate_evidence(run: _Recorder, a, tag: str) -> None:
    """The dilution mode's growth rate out of the saddle (from the save nearest the saddle to
    the departure) against ``c`` (the paper) and ``2 c`` (forced by ``Phi``)."""
    c_v = float(a.rates.focus_visited)
    t_saddle, loss_p, bound_p = a.plateau()
    dr = a.dilution_mode_growth()
    at_saddle = claims.unigram_plateau(
        loss_p, bound_p, float(a.stages.uniform_entropy), float(np.log(len(a.chain.pi)))
    ).holds
    ev = claims.dilution_mode_rate(
        dr["rate"], dr["half_rates"], dr["rate_error"], c_v, at_saddle=at_saddle
    )
    run.evidence(
        f"dilution_mode_rate{tag}",
        ev,
        note=f"log-slope of the dilution mode above its visited-saddle value over {dr['n']} "
        f"saves from t = {t_saddle:.4g} to the departure; rate / c = "
        f"{dr['rate'] / c_v:.4g} (2 would be a mode forced by Phi, quadratic in the attention "
        "amplitude)",
    )


def _record_analysis(
    run: _Recorder,
    a,
    label: str = "",
    tolerances: tuple[float, float] = (1e-7, 1e-10),
    horizon: str = "",
) -> dict:
    """The checks one :class:`gradflow.FlowAnalysis` supports, named ``name[label]``: rates
    (consistency), the plateau, alignments, the saddle's unstable mode and the first attention
    phase (evidence); the stage order and the entropy's down-up-down when the theory predicts
    them (``c > 0``, a successful flow). ``tolerances``: the ``(rtol, atol)`` the flow was
    solved with (they size the entropy's solver error); ``horizon``: why the horizon stopped
    (:func:`gradflow.analyse_flow_until`), said by an inconclusive stage verdict."""
    tag = f"[{label}]" if label else ""
    c, lam_t, mu1 = float(a.rates.focus), float(a.rates.transverse), float(a.rates.condensation)
    flow_ok = Status.code(a.status) == Status.code(Status.successful)
    stall_status = "not searched" if a.stall is None else Status.name(a.stall.point.status)
    run.scalar(
        f"flow{tag}",
        {"status": Status.name(a.status), "steps": int(a.num_steps), "t1": float(a.end_time)},
    )
    run.report(
        f"transverse_rate{tag}",
        measured=lam_t,
        claim="lambda_T: the top transverse eigenvalue at the rank-one stall",
        note=f"stall root-find: {stall_status}"
        + ("" if np.isfinite(lam_t) else " (lambda_T unknown: the end time leaves its term out)"),
    )
    _rates(run, a, tag)
    _saddle_evidence(run, a, tag)
    st = a.stages
    run.evidence(
        f"first_attention_phase{tag}", claims.first_attention_phase(c, int(st.departure_sign))
    )
    run.scalar(f"stages{tag}", st.times())
    run.scalar(f"stage_status{tag}", st.status())
    run.scalar(f"stage_signatures{tag}", st.signature_times())
    run.scalar(
        f"low_query_entropy{tag}",
        {
            "uniform": float(st.uniform_entropy),
            "dip": float(st.entropy_dip),
            "peak": float(st.entropy_peak),
            "after_peak": float(st.entropy_after_peak),
        },
    )
    if flow_ok and c > 0:
        _stage_evidence(run, a, tag, tolerances, horizon)
    else:
        why = "c <= 0" if flow_ok else f"the flow failed ({Status.name(a.status)})"
        run.log(f"{label or 'flow'}: stage order and dilution not predicted ({why}); reported")
    return {"c": c, "mu1": mu1, "lambda_T": lam_t}


def analysis_checks(
    a, label: str = "", tolerances: tuple[float, float] = (1e-7, 1e-10), horizon: str = ""
) -> tuple[list[tuple[str, tuple, dict[str, Any]]], dict[str, float]]:
    """The calls recording ``a``'s checks, and its rates ``{"c", "mu1", "lambda_T"}``."""
    rec = _Recorder()
    rates = _record_analysis(rec, a, label, tolerances, horizon)
    return rec.calls, rates
