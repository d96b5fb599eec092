"""What the focus-and-dilution experiments share: chains from configs, host copies of an
analysis, the checks one analysis supports, and its figures."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import entropy, fit_exponential, gradflow as gf, require_probability_vector
from ..._status import Status, status_code, status_name
from ...runs import ConfigError, Run

HEADLINE_PI = (0.75, 0.19, 0.05, 0.01)

# Float64 Hessians and ``eigh`` have backward errors ~ n u ||J|| (about 1e-13 for the sizes
# used); root-found points leave gradient residuals below 1e-10. A formula that is wrong is off
# by O(1), so agreement to 1e-8 relative separates the two with room on both sides.
EIGEN_RTOL = 1e-8
# the linearisation's rate error may be at most this fraction of the rate in a fit window
LINEAR_WINDOW = 0.01


def check_lam(lam: float) -> None:
    """``P = lam I + (1 - lam) 1 pi^T`` is stochastic for ``lam`` in ``[0, 1)``."""
    if not 0.0 <= lam < 1.0:
        raise ConfigError(
            f"lam must be in [0, 1) so that P = lam I + (1 - lam) 1 pi^T mixes, got {lam}"
        )


def chain(pi, lam: float, P=()) -> tuple[np.ndarray, np.ndarray]:
    """``(pi, P)`` from a config: the given matrix ``P`` (``pi`` its stationary law, or the given
    ``pi`` if it is stationary), else the paper's family at ``pi`` and ``lam``."""
    try:
        if len(P):
            pi_given = np.asarray(pi, dtype=float) if len(pi) else None
            pi_out, P_out = gf.resolve_chain(np.asarray(P, dtype=float), pi_given)
        else:
            check_lam(lam)
            p = require_probability_vector(
                "pi", np.asarray(pi or HEADLINE_PI, dtype=float), strictly_positive=True
            )
            p = jnp.asarray(p)
            pi_out, P_out = gf.resolve_chain(gf.paper_transition(p, lam), p)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return np.asarray(pi_out), np.asarray(P_out)


def to_host(tree):
    """NumPy copy of every array leaf (an analysis read on the host)."""
    return jax.tree_util.tree_map(np.asarray, tree)


def plateau(a) -> tuple[float, float, float]:
    """The loss where the flow is nearest a critical point between condensation and departure
    (smallest ``||grad L||`` among the saves) and the error bound of the quadratic model there:
    ``|L - L*| <= ||grad L||^2 / (2 lambda_min)``, ``lambda_min`` the smallest non-zero
    ``|eigenvalue|`` of ``J`` at the visited saddle. Returns ``(time, loss, bound)``."""
    ts = a.ts
    sel = np.nonzero((ts >= a.stages.condensation.time) & (ts <= a.stages.departure.time))[0]
    if sel.size == 0:
        return float("nan"), float("nan"), float("nan")
    g = a.metrics["grad_norm"]
    i = sel[np.argmin(g[sel])]
    ev = np.abs(a.spectrum_saddle.eigenvalues)
    smallest = float(np.min(ev[ev > 1e-9 * ev.max()]))
    return float(ts[i]), float(a.metrics["loss"][i]), float(g[i] ** 2 / (2 * smallest))


def condensation_fit(a):
    """Growth rate of the projection on the unstable eigenspace at ``theta = 0``, fitted while the
    linearisation's rate error is below ``LINEAR_WINDOW`` of ``mu1`` (before condensation).
    Returns ``(fit or None, bound)``: the slope of a least-squares line is a weighted mean of
    the local log-slopes, so it is within the window's largest rate error of ``mu1``."""
    ts = a.ts
    mu1 = float(a.rates.condensation)
    err = a.metrics["condensation_nonlinearity"]
    sel = (err <= LINEAR_WINDOW * mu1) & (ts <= a.stages.condensation.time) & (ts > 0)
    if sel.sum() < 3:
        return None, float("nan")
    return fit_exponential(ts[sel], a.metrics["condensation_amplitude"][sel]), float(err[sel].max())


def pca_stage_changes(a) -> dict[str, float]:
    """PCA of the embedding rows (shared axes over the run; PC1 signed so that the frequent row
    is positive): the change over stage III (departure -> new direction) of the frequent row's
    and of the pi-weighted low-frequency rows' PC1 coordinate, and the PC2 spread of the rows at
    the dilution time and at the end."""
    pca = gf.embedding_pca(a.trajectory.W0)
    ts, pi = a.ts, a.pi
    top = int(np.argmax(pi))
    low = np.arange(len(pi)) != top
    x = pca[:, :, 0] * np.sign(pca[-1, top, 0] or 1.0)
    st = a.stages

    def at(t):
        return int(min(np.searchsorted(ts, t), len(ts) - 1)) if np.isfinite(t) else len(ts) - 1

    i0, i1, i_dil = at(st.departure.time), at(st.new_direction.time), at(st.dilution.time)
    x_low = x[:, low] @ pi[low] / pi[low].sum()
    spread = np.ptp(pca[:, :, 1], axis=1) if pca.shape[2] > 1 else np.zeros(len(ts))
    return {
        "top_pc1_change": float(x[i1, top] - x[i0, top]),
        "low_pc1_change": float(x_low[i1] - x_low[i0]),
        "pc2_spread_at_dilution": float(spread[i_dil]),
        "pc2_spread_at_end": float(spread[-1]),
    }


def _check_rates(run: Run, a, tag: str) -> None:
    """Closed-form rates against the Jacobian and the trajectory, and the plateau."""
    r = a.rates
    c, mu1 = float(r.focus), float(r.condensation)
    run.check(
        f"condensation_rate{tag}",
        expected=mu1,
        measured=float(r.condensation_jacobian),
        tolerance=EIGEN_RTOL,
        relative=True,
        note="top eigenvalue of J = -Hess L at theta = 0 vs ||pi|| ||pi - 1/d 1||",
    )
    fit, bound = condensation_fit(a)
    run.check(
        f"condensation_rate_fit{tag}",
        expected=mu1,
        measured=fit.slope if fit else float("nan"),
        tolerance=bound,
        note="growth rate of theta's projection on the unstable eigenspace at 0, fitted on "
        f"{fit.n if fit else 0} saves where the linearisation's rate error is at most the "
        "tolerance (its maximum there)",
    )
    run.check(
        f"focus_rate_closed_form_saddle{tag}",
        expected=c,
        measured=float(r.focus_jacobian),
        tolerance=EIGEN_RTOL * max(abs(c), 1e-12),
        note="signed top attention eigenvalue of J at the closed-form saddle vs "
        "c = Var_pi(gamma) Cov_pi(gamma, P beta)",
    )
    c_v = float(r.focus_visited_formula)
    run.check(
        f"focus_rate{tag}",
        expected=c_v,
        measured=float(r.focus_visited),
        tolerance=EIGEN_RTOL * max(abs(c_v), 1e-12),
        note="signed top attention eigenvalue of J at the saddle the flow visits vs "
        f"Var_pi(gamma) Cov_pi(gamma, P beta) of that saddle (closed-form balanced saddle: "
        f"c = {c:.6g}, relative gap {c_v / c - 1 if c else float('nan'):.2e} from the O(eps) "
        "profile the condensation leaves)",
    )
    t_p, loss_p, bound_p = plateau(a)
    run.check(
        f"unigram_plateau{tag}",
        expected=float(a.stages.uniform_entropy),
        measured=loss_p,
        tolerance=bound_p,
        note=f"loss at the save nearest a critical point (t = {t_p:.4g}) between condensation "
        "and departure vs H(pi); tolerance ||grad L||^2 / (2 lambda_min) (quadratic model)",
    )


def _check_stages(run: Run, a, tag: str, tolerances: tuple[float, float]) -> None:
    """Stage order, the low-query entropy's down-up-down and the embedding PCA (``c > 0``)."""
    st, c, lam_t = a.stages, float(a.rates.focus), float(a.rates.transverse)
    run.check(
        f"stages_in_order{tag}",
        expected=True,
        measured=bool(st.in_order()),
        note=f"condensation < focus < dilution < new direction (rates mu1 = "
        f"{float(a.rates.condensation):.3g}, c = {c:.3g}, lambda_T = {lam_t:.3g})",
    )
    dip, peak, H = float(st.entropy_dip), float(st.entropy_peak), float(st.uniform_entropy)
    run.check(
        f"dilution_entropy_rise{tag}",
        expected=f"dip < H(pi) = {H:.5f} < peak",
        measured={"dip": dip, "peak": peak},
        passed=bool(dip < H < peak),
        note="attention entropy of the non-frequent queries: lowered by the focus, then "
        "above its uniform-attention value H(pi) (dilution)",
    )
    # The fall after the peak must exceed what the solve can get wrong: a worst-case
    # accumulation of one local error rtol |H| + atol per accepted step.
    rtol, atol = tolerances
    after = float(st.entropy_after_peak)
    solver_error = int(a.num_steps) * (rtol * peak + atol)
    run.check(
        f"entropy_falls_after_dilution{tag}",
        expected=f"after-peak minimum < peak - {solver_error:.2g}",
        measured={"peak": peak, "after_peak": after, "fall": peak - after},
        passed=bool(peak - after > solver_error),
        note="the third leg of the paper's down-up-down: the new direction lowers the "
        "non-frequent queries' attention entropy again; margin = solver steps x "
        "(rtol peak + atol)",
    )
    pca = pca_stage_changes(a)
    run.check(
        f"pca_retraction_stage_III{tag}",
        expected="frequent row out, low rows back along PC1",
        measured=pca,
        passed=bool(pca["top_pc1_change"] > 0 > pca["low_pc1_change"]),
        note="PC1 coordinates of the embedding rows from departure to the new direction: "
        "the dilution mode (rate c > 0) moves the frequent and low-frequency rows apart",
    )
    run.check(
        f"pca_expansion_stage_IV{tag}",
        expected="PC2 spread grows after dilution",
        measured=pca["pc2_spread_at_end"] / max(pca["pc2_spread_at_dilution"], 1e-300),
        passed=bool(pca["pc2_spread_at_end"] > pca["pc2_spread_at_dilution"]),
        note="spread of the embedding rows along PC2, end / dilution time",
    )


def record_analysis(
    run: Run, a, label: str = "", tolerances: tuple[float, float] = (1e-7, 1e-10)
) -> dict:
    """The checks one :class:`gradflow.FlowAnalysis` supports, named ``name[label]``: rates and
    plateau always; the order of the stages, the dilution's entropy rise and the PCA changes
    when the theory predicts them (``c > 0``, a successful flow). ``tolerances``: the
    ``(rtol, atol)`` the flow was solved with (they size the entropy-fall margin)."""
    tag = f"[{label}]" if label else ""
    c, lam_t, mu1 = float(a.rates.focus), float(a.rates.transverse), float(a.rates.condensation)
    flow_ok = status_code(a.status) == status_code(Status.successful)
    run.scalar(
        f"flow{tag}",
        {"status": status_name(a.status), "steps": int(a.num_steps), "t1": float(a.end_time)},
    )
    _check_rates(run, a, tag)
    st = a.stages
    run.check(
        f"first_attention_phase{tag}",
        expected=int(np.sign(c)),
        measured=int(st.departure_sign),
        note="+1: attention first moves onto the most frequent token (focus), -1: off it; "
        "predicted by the sign of c",
    )
    run.scalar(f"stages{tag}", st.times())
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
        _check_stages(run, a, tag, tolerances)
    else:
        why = "c <= 0" if flow_ok else f"the flow failed ({status_name(a.status)})"
        run.log(f"{label or 'flow'}: stage order and dilution not predicted ({why}); reported")
    return {"c": c, "mu1": mu1, "lambda_T": lam_t}


def entropy_of(pi) -> float:
    """``H(pi)`` as a float."""
    return float(entropy(jnp.asarray(pi)))
