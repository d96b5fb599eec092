"""Experiments of the focus-and-dilution theory (focus_dilution.md; arXiv 2605.01199).

- ``focus-dilution``: headline synthetic run (population gradient flow, stages, rates);
- ``focus-dilution-ablation``: other transition matrices with the same ``pi``;
- ``focus-dilution-delta``: symmetry-breaking sweep over ``delta`` (including 0) and ``eps``;
- ``focus-dilution-finite``: finite-(N, s) gradient descent / Adam vs the population flow;
- ``focus-dilution-text``: the bigram chain of a real corpus, its population flow and actual
  training of the model on the token stream, with per-query attention stories.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import gradflow as gf
from .._status import Status
from ..plotting import heatmap, mark_stages, new_figure, note_excluded, time_series
from ..runs import ConfigError, ExperimentConfig, Run, register_experiment
from ..sweep import Grid, run_sweep

HEADLINE_PI = (0.75, 0.19, 0.05, 0.01)


# ----------------------------------------------------------------------------------------
# shared validation and helpers
# ----------------------------------------------------------------------------------------
def _check_pi(pi) -> None:
    try:
        gf.validate_distribution(pi)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_positive(**values) -> None:
    for name, v in values.items():
        if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{name} must be positive, got {v}")


def _check_lam(lam: float) -> None:
    if not 0.0 <= lam < 1.0:
        raise ConfigError(f"lam must be in [0, 1) so that P = lam I + (1 - lam) 1 pi^T mixes, got {lam}")


def _entropy(pi) -> float:
    pi = np.asarray(pi, dtype=float)
    return float(-np.sum(pi * np.log(pi)))


def _np(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _plateau_loss(ts, loss, t_from: float, t_to: float) -> float:
    """Loss where it is flattest (smallest |dL/dlog t|) between ``t_from`` and ``t_to``."""
    ts = np.asarray(ts)
    loss = np.asarray(loss)
    sel = np.nonzero((ts > t_from) & (ts < t_to))[0]
    if sel.size < 3:
        return float("nan")
    slope = np.abs(np.gradient(loss, np.log(np.maximum(ts, 1e-12))))
    i = sel[np.argmin(slope[sel])]
    return float(loss[i])


def _stage_figures(run: Run, ts, met, stages, pi, prefix: str = "") -> None:
    """Every time-series figure draws the detected stages."""
    ts = np.asarray(ts)
    keep = ts > 0
    t = ts[keep]
    H = _entropy(pi)
    d = len(pi)
    fig, axes = new_figure(2, 3)
    ax = axes[0, 0]
    time_series(ax, t, met["loss"][keep], labels=["loss"], logx=True, stages=stages, title="population loss")
    ax.axhline(np.log(d), color="0.5", ls=":", lw=0.8)
    ax.axhline(H, color="0.3", ls=":", lw=0.8)
    time_series(
        axes[0, 1], t, [met["sv_W0"][keep], met["sv_Phi"][keep, :2]],
        labels=[f"sigma{i + 1}(W0)" for i in range(met["sv_W0"].shape[1])] + ["sigma1(Phi)", "sigma2(Phi)"],
        logx=True, logy=True, stages=stages, title="singular values",
    )
    time_series(
        axes[0, 2], t,
        [met["cos_W0_pi"][keep], met["cos_W1_centred"][keep], met["cos_Phi_pipi"][keep]],
        labels=["cos(u1(W0), pi)", "cos(v1(W1), pi - 1/d)", "cos(Phi, pi pi^T)"],
        logx=True, stages=stages, title="alignments",
    )
    time_series(
        axes[1, 0], t, met["entropy_query"][keep],
        labels=[f"query {q} (pi={pi[q]:.3g})" for q in range(d)] if d <= 8 else None,
        logx=True, stages=stages, title="token-type attention entropy",
    )
    time_series(
        axes[1, 1], t, [met["dilution_mode_rel"][keep], met["attention_mode"][keep]],
        labels=["dilution mode / ||gamma||", "attention mode ||alpha^T (WQ, WK)||"],
        logx=True, stages=stages, title="stage modes",
    )
    pca = gf.embedding_pca(met["W0"])
    ax = axes[1, 2]
    for i in range(min(d, 8)):
        ax.plot(pca[:, i, 0], pca[:, i, 1] if pca.shape[2] > 1 else 0 * pca[:, i, 0], lw=1.2, label=f"row {i}")
        ax.plot(pca[-1, i, 0], pca[-1, i, 1] if pca.shape[2] > 1 else 0, "o", ms=3)
    ax.set_title("PCA of embedding rows W0[i, :](t)", fontsize=10)
    ax.legend(fontsize=7)
    run.save_figure(fig, f"{prefix}dynamics")


# ----------------------------------------------------------------------------------------
# focus-dilution: the headline synthetic run
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class FocusDilutionConfig(ExperimentConfig):
    """Headline run: population gradient flow on ``P = lam I + (1 - lam) 1 pi^T``.

    Attributes:
        pi: stationary distribution (token 0 should be the most frequent for the stage names).
        lam: self-transition weight of the paper's family.
        m, m_attn: embedding width and attention width m'.
        eps: initialisation scale (entries i.i.d. N(0, eps^2)).
        t1: end time of the flow; num_saves: log-spaced save times.
        rtol, atol: adaptive step-size tolerances.
        focus_fraction, dilution_fraction, new_direction_ratio: stage thresholds [open].
        t_critical: time on the trajectory from which the saddle is root-found (0 = midway,
            on a log scale, between the condensation and focus times).
    """

    pi: tuple[float, ...] = HEADLINE_PI
    lam: float = 0.5
    m: int = 6
    m_attn: int = 6
    eps: float = 1e-3
    t1: float = 800.0
    num_saves: int = 400
    rtol: float = 1e-7
    atol: float = 1e-10
    focus_fraction: float = 0.5
    dilution_fraction: float = 0.5
    new_direction_ratio: float = 0.1
    t_critical: float = 0.0

    def validate(self) -> None:
        _check_pi(self.pi)
        _check_lam(self.lam)
        _check_positive(eps=self.eps, t1=self.t1, rtol=self.rtol, atol=self.atol)
        if self.eps >= 0.1:
            raise ConfigError(f"eps must be small (< 0.1) for the small-initialisation theory, got {self.eps}")
        if self.m < 2 or self.m_attn < 1:
            raise ConfigError(f"need m >= 2 and m_attn >= 1, got m={self.m}, m_attn={self.m_attn}")
        if self.num_saves < 50:
            raise ConfigError(f"num_saves must be >= 50, got {self.num_saves}")
        for name in ("focus_fraction", "dilution_fraction", "new_direction_ratio"):
            v = getattr(self, name)
            if not 0 < v < 1:
                raise ConfigError(f"{name} must be in (0, 1), got {v}")
        if self.t_critical < 0 or self.t_critical >= self.t1:
            raise ConfigError(f"t_critical must be in [0, t1), got {self.t_critical}")

    @classmethod
    def quick(cls) -> dict:
        return {"num_saves": 300}


def _flow_and_metrics(pi, P, model0, ts, rtol, atol):
    sol = gf.population_flow(model0, pi, P, ts, rtol=rtol, atol=atol)
    met = gf.trajectory_metrics(sol.models, pi, P)
    met["W0"] = sol.models.W0
    return sol, met


@register_experiment(
    "focus-dilution",
    FocusDilutionConfig,
    "population gradient flow on Markov data: condensation, focus, dilution, new direction",
)
def run_focus_dilution(config: FocusDilutionConfig, run: Run) -> None:
    pi = jnp.asarray(config.pi)
    P = gf.paper_transition(pi, config.lam)
    d = pi.shape[0]
    H = _entropy(config.pi)
    ts = gf.log_time_grid(config.t1, config.num_saves)
    model0 = gf.init_transformer(jax.random.key(config.seed), d, config.m, config.m_attn, config.eps)
    sol, met = jax.jit(_flow_and_metrics, static_argnums=(4, 5))(pi, P, model0, ts, config.rtol, config.atol)
    status = int(sol.status)
    run.log(f"flow: {int(sol.num_steps)} steps, status {Status.describe(status)}")
    run.scalar("flow_status", Status(status).name)
    run.scalar("flow_steps", int(sol.num_steps))
    met = _np(met)
    if status != Status.SUCCESS:
        run.log("the flow failed: no stage or rate is reported from it")
    stages = gf.detect_stages(
        ts, met, config.pi, focus_fraction=config.focus_fraction,
        dilution_fraction=config.dilution_fraction, new_direction_ratio=config.new_direction_ratio,
    )
    run.scalar("stages", stages)
    run.log("stages: " + ", ".join(f"{k} t={v:.4g}" for k, v in stages.items()))

    # --- stage I: condensation rate from the Jacobian at the origin and from the trajectory
    mu1 = float(gf.condensation_rate(pi))
    zero = gf.init_transformer(jax.random.key(0), d, config.m, config.m_attn, 0.0)
    spec0 = jax.jit(gf.jacobian_spectrum)(zero, pi, P)
    mu_jac = float(spec0.eigenvalues[0])
    mu_fit, n_fit = gf.fitted_condensation_rate(ts, met)
    run.check("condensation_rate", expected=mu1, measured=mu_jac, tolerance=1e-6, relative=True,
              note="top eigenvalue of J = -Hess L at theta = 0 vs ||pi|| ||pi - 1/d 1||")
    run.check("condensation_rate_fit", expected=mu1, measured=mu_fit, tolerance=0.05, relative=True,
              note=f"growth rate of sigma1(W0) fitted on {n_fit} saved times in the linear regime")
    run.check("condensation_embedding_block", expected=1.0, measured=float(spec0.embedding_weight[0]),
              tolerance=1e-8, note="the unstable mode at the origin lives in (W0, W1) only")

    # --- stage II: plateau and focus rate at the unigram saddle
    plateau = _plateau_loss(ts, met["loss"], stages["condensation"], stages["focus"])
    run.check("unigram_plateau", expected=H, measured=plateau, tolerance=5e-3,
              note="flattest loss between condensation and focus vs H(pi)")
    saddle = gf.unigram_saddle(pi, config.m, config.m_attn)
    c = float(gf.focus_rate(pi, P, saddle.gamma, saddle.beta))
    spec_s = jax.jit(gf.jacobian_spectrum)(saddle.model, pi, P)
    att = np.asarray(spec_s.attention_weight) > 0.5
    c_closed = float(np.asarray(spec_s.eigenvalues)[att][0])
    run.check("focus_rate_closed_form_saddle", expected=abs(c), measured=c_closed, tolerance=1e-6,
              relative=True, note="top attention-block eigenvalue of J at the closed-form saddle")
    t_crit = config.t_critical or float(np.sqrt(stages["condensation"] * stages["focus"]))
    i_crit = int(np.clip(np.searchsorted(ts, t_crit), 0, len(ts) - 1))
    start = jax.tree_util.tree_map(lambda x: x[i_crit], sol.models)
    cp = jax.jit(gf.find_critical_point)(start, pi, P)
    spec_c = jax.jit(gf.jacobian_spectrum)(cp.model, pi, P)
    att_c = np.asarray(spec_c.attention_weight) > 0.5
    c_cp = float(np.asarray(spec_c.eigenvalues)[att_c][0]) if int(cp.status) == Status.SUCCESS else float("nan")
    run.scalar("critical_point", {"from_t": float(ts[i_crit]), "loss": float(cp.loss),
                                  "grad_norm": float(cp.grad_norm), "status": Status(int(cp.status)).name})
    run.check("critical_point_loss", expected=H, measured=float(cp.loss), tolerance=1e-6,
              note=f"root of grad L found from the trajectory at t={ts[i_crit]:.3g}")
    run.check("focus_rate", expected=abs(c), measured=c_cp, tolerance=0.03, relative=True,
              note="top attention-block eigenvalue of J at the critical point root-found from the "
                   "trajectory vs Var_pi(gamma) Cov_pi(gamma, P beta)")
    c_fit, n_cfit = gf.fitted_focus_rate(ts, met, config.pi)
    run.check("focus_rate_fit", expected=abs(c), measured=c_fit, tolerance=0.1, relative=True,
              note=f"growth rate of ||alpha^T (WQ, WK)|| fitted on {n_cfit} saved times near the saddle")
    # focus direction: Phi / ||Phi|| aligns with pi pi^T once attention has grown
    i_f = int(np.clip(np.searchsorted(ts, stages["focus"]), 0, len(ts) - 1)) if np.isfinite(stages["focus"]) else -1
    cos_f = float(met["cos_Phi_pipi"][i_f]) if i_f >= 0 else float("nan")
    run.check("focus_direction", expected=">= 0.9", measured=cos_f, passed=bool(cos_f >= 0.9),
              note="cos(Phi, pi pi^T) at the focus time")
    top = int(np.argmax(config.pi))
    ent = met["entropy_query"]
    order_ok = bool(np.all(np.nanmin(ent[:, top]) <= np.nanmin(np.delete(ent, top, axis=1), axis=0)))
    run.check("frequent_query_focuses_most", expected=True, measured=order_ok,
              note="the most frequent query reaches the lowest token-type attention entropy")
    run.check("stages_in_order", expected=True, measured=gf.stages_in_order(stages),
              note="condensation < focus < dilution < new direction (may need a larger t1 for other pi)")

    # --- escape times: predicted log(1/eps)/rate vs observed
    t_esc_pred = float(gf.predicted_escape_time(config.eps, mu1))
    run.scalar("condensation_escape", {"predicted": t_esc_pred, "observed": stages["condensation"]})
    run.scalar("focus_escape", {"predicted_after_plateau": float(gf.predicted_escape_time(config.eps, abs(c))),
                                "observed_focus_minus_condensation": stages["focus"] - stages["condensation"]})
    run.scalar("rates", {"mu1": mu1, "c": c, "H_pi": H})
    run.scalar("final_loss", float(met["loss"][-1]))

    run.save_arrays(
        ts=ts, loss=met["loss"], sv_W0=met["sv_W0"], sv_W1=met["sv_W1"], sv_Phi=met["sv_Phi"],
        cos_W0_pi=met["cos_W0_pi"], cos_W1_centred=met["cos_W1_centred"], cos_Phi_pipi=met["cos_Phi_pipi"],
        entropy_query=met["entropy_query"], attention=met["attention"], dilution_mode=met["dilution_mode"],
        attention_mode=met["attention_mode"], W0=met["W0"], embedding_pca=gf.embedding_pca(met["W0"]),
        spectrum_origin=spec0.eigenvalues, spectrum_saddle=spec_c.eigenvalues,
        spectrum_saddle_attention_weight=spec_c.attention_weight,
    )
    _stage_figures(run, ts, met, stages, config.pi)
    fig, axes = new_figure(1, 2)
    for ax, spec, title in ((axes[0, 0], spec0, "J at theta = 0"), (axes[0, 1], spec_c, "J at the unigram saddle")):
        ev = np.asarray(spec.eigenvalues)[:20]
        w = np.asarray(spec.attention_weight)[:20]
        ax.bar(np.arange(len(ev)), ev, color=[("#d95f02" if a > 0.5 else "#1b9e77") for a in w])
        ax.set_title(title + " (orange: attention block)", fontsize=9)
        ax.set_xlabel("eigenvalue index")
    run.save_figure(fig, "jacobian_spectra")
