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
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .. import gradflow as gf
from .._status import Status, status_code, status_message, status_name
from ..plotting import mark_stages, new_figure, note_excluded, time_series
from ..runs import ConfigError, ExperimentConfig, Run, register_experiment
from ..sweep import Grid

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
        raise ConfigError(
            f"lam must be in [0, 1) so that P = lam I + (1 - lam) 1 pi^T mixes, got {lam}"
        )


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
    time_series(
        ax, t, met["loss"][keep], labels=["loss"], logx=True, stages=stages, title="population loss"
    )
    ax.axhline(np.log(d), color="0.5", ls=":", lw=0.8)
    ax.axhline(H, color="0.3", ls=":", lw=0.8)
    time_series(
        axes[0, 1],
        t,
        [met["sv_W0"][keep], met["sv_Phi"][keep, :2]],
        labels=[f"sigma{i + 1}(W0)" for i in range(met["sv_W0"].shape[1])]
        + ["sigma1(Phi)", "sigma2(Phi)"],
        logx=True,
        logy=True,
        stages=stages,
        title="singular values",
    )
    time_series(
        axes[0, 2],
        t,
        [met["cos_W0_pi"][keep], met["cos_W1_centred"][keep], met["cos_Phi_pipi"][keep]],
        labels=["cos(u1(W0), pi)", "cos(v1(W1), pi - 1/d)", "cos(Phi, pi pi^T)"],
        logx=True,
        stages=stages,
        title="alignments",
    )
    time_series(
        axes[1, 0],
        t,
        met["entropy_query"][keep],
        labels=[f"query {q} (pi={pi[q]:.3g})" for q in range(d)] if d <= 8 else None,
        logx=True,
        stages=stages,
        title="token-type attention entropy",
    )
    time_series(
        axes[1, 1],
        t,
        [met["dilution_mode_rel"][keep], met["attention_mode"][keep]],
        labels=["dilution mode / ||gamma||", "attention mode ||alpha^T (WQ, WK)||"],
        logx=True,
        stages=stages,
        title="stage modes",
    )
    pca = gf.embedding_pca(met["W0"])
    ax = axes[1, 2]
    for i in range(min(d, 8)):
        y = pca[:, i, 1] if pca.shape[2] > 1 else 0 * pca[:, i, 0]
        (line,) = ax.plot(pca[:, i, 0], y, lw=1.2, label=f"row {i}")
        ax.plot(pca[-1, i, 0], y[-1], "o", ms=3, color=line.get_color())
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
        t1: end time of the flow (0 = automatic: max(800, 8 log(1/eps) / c), long enough
            for the four stages); num_saves: log-spaced save times.
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
    t1: float = 0.0
    num_saves: int = 400
    rtol: float = 1e-7
    atol: float = 1e-10
    focus_fraction: float = 0.5
    dilution_fraction: float = 0.9
    new_direction_ratio: float = 0.1
    t_critical: float = 0.0

    def validate(self) -> None:
        _check_pi(self.pi)
        _check_lam(self.lam)
        _check_positive(eps=self.eps, rtol=self.rtol, atol=self.atol)
        if self.t1 < 0:
            raise ConfigError(f"t1 must be >= 0 (0 = automatic), got {self.t1}")
        if self.eps >= 0.1:
            raise ConfigError(
                f"eps must be small (< 0.1) for the small-initialisation theory, got {self.eps}"
            )
        if self.m < 2 or self.m_attn < 1:
            raise ConfigError(f"need m >= 2 and m_attn >= 1, got m={self.m}, m_attn={self.m_attn}")
        if self.num_saves < 50:
            raise ConfigError(f"num_saves must be >= 50, got {self.num_saves}")
        for name in ("focus_fraction", "dilution_fraction", "new_direction_ratio"):
            v = getattr(self, name)
            if not 0 < v < 1:
                raise ConfigError(f"{name} must be in (0, 1), got {v}")
        if self.t_critical < 0 or (self.t1 and self.t_critical >= self.t1):
            raise ConfigError(f"t_critical must be in [0, t1), got {self.t_critical}")

    def end_time(self) -> float:
        """``t1``, or ``max(800, 8 log(1/eps) / |c|)`` when ``t1 = 0``."""
        if self.t1:
            return self.t1
        pi = np.asarray(self.pi)
        c = abs(
            float(gf.focus_rate(jnp.asarray(pi), gf.paper_transition(jnp.asarray(pi), self.lam)))
        )
        return float(max(800.0, 8.0 * math.log(1.0 / self.eps) / max(c, 1e-3)))

    @classmethod
    def quick(cls) -> dict:
        return {"num_saves": 300}


def _flow_and_metrics(pi, P, model0, ts, rtol, atol, solver="tsit5", max_steps=100_000):
    sol = gf.population_flow(
        model0, pi, P, ts, rtol=rtol, atol=atol, solver=solver, max_steps=max_steps
    )
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
    t1 = config.end_time()
    run.scalar("t1", t1)
    ts = gf.log_time_grid(t1, config.num_saves)
    model0 = gf.init_transformer(
        jax.random.key(config.seed), d, config.m, config.m_attn, config.eps
    )
    sol, met = jax.jit(_flow_and_metrics, static_argnums=(4, 5))(
        pi, P, model0, ts, config.rtol, config.atol
    )
    status = status_code(sol.status)
    run.log(f"flow: {int(sol.num_steps)} steps, status {status_message(status)}")
    run.scalar("flow_status", status_name(status))
    run.scalar("flow_steps", int(sol.num_steps))
    met = _np(met)
    if status != status_code(Status.successful):
        run.log("the flow failed: no stage or rate is reported from it")
    stages = gf.detect_stages(
        ts,
        met,
        config.pi,
        focus_fraction=config.focus_fraction,
        dilution_fraction=config.dilution_fraction,
        new_direction_ratio=config.new_direction_ratio,
    )
    run.scalar("stages", stages)
    run.log("stages: " + ", ".join(f"{k} t={v:.4g}" for k, v in stages.items()))

    # --- stage I: condensation rate from the Jacobian at the origin and from the trajectory
    mu1 = float(gf.condensation_rate(pi))
    zero = gf.init_transformer(jax.random.key(0), d, config.m, config.m_attn, 0.0)
    spec0 = jax.jit(gf.jacobian_spectrum)(zero, pi, P)
    mu_jac = float(spec0.eigenvalues[0])
    mu_fit, n_fit = gf.fitted_condensation_rate(ts, met)
    run.check(
        "condensation_rate",
        expected=mu1,
        measured=mu_jac,
        tolerance=1e-6,
        relative=True,
        note="top eigenvalue of J = -Hess L at theta = 0 vs ||pi|| ||pi - 1/d 1||",
    )
    run.check(
        "condensation_rate_fit",
        expected=mu1,
        measured=mu_fit,
        tolerance=0.05,
        relative=True,
        note=f"growth rate of sigma1(W0) fitted on {n_fit} saved times in the linear regime",
    )
    run.check(
        "condensation_embedding_block",
        expected=1.0,
        measured=float(spec0.embedding_weight[0]),
        tolerance=1e-8,
        note="the unstable mode at the origin lives in (W0, W1) only",
    )

    # --- stage II: plateau and focus rate at the unigram saddle
    plateau = _plateau_loss(ts, met["loss"], stages["condensation"], stages["focus"])
    run.check(
        "unigram_plateau",
        expected=H,
        measured=plateau,
        tolerance=5e-3,
        note="flattest loss between condensation and focus vs H(pi)",
    )
    saddle = gf.unigram_saddle(pi, config.m, config.m_attn)
    c = float(gf.focus_rate(pi, P, saddle.gamma, saddle.beta))
    spec_s = jax.jit(gf.jacobian_spectrum)(saddle.model, pi, P)
    att = np.asarray(spec_s.attention_weight) > 0.5
    c_closed = float(np.asarray(spec_s.eigenvalues)[att][0])
    run.check(
        "focus_rate_closed_form_saddle",
        expected=abs(c),
        measured=c_closed,
        tolerance=1e-6,
        relative=True,
        note="top attention-block eigenvalue of J at the closed-form saddle",
    )
    t_crit = config.t_critical or float(np.sqrt(stages["condensation"] * stages["focus"]))
    i_crit = int(np.clip(np.searchsorted(ts, t_crit), 0, len(ts) - 1))
    start = jax.tree_util.tree_map(lambda x: x[i_crit], sol.models)
    cp = jax.jit(gf.find_critical_point)(start, pi, P)
    spec_c = jax.jit(gf.jacobian_spectrum)(cp.model, pi, P)
    att_c = np.asarray(spec_c.attention_weight) > 0.5
    c_cp = (
        float(np.asarray(spec_c.eigenvalues)[att_c][0])
        if bool(cp.status == Status.successful)
        else float("nan")
    )
    run.scalar(
        "critical_point",
        {
            "from_t": float(ts[i_crit]),
            "loss": float(cp.loss),
            "grad_norm": float(cp.grad_norm),
            "status": status_name(cp.status),
        },
    )
    run.check(
        "critical_point_loss",
        expected=H,
        measured=float(cp.loss),
        tolerance=1e-6,
        note=f"root of grad L found from the trajectory at t={ts[i_crit]:.3g}",
    )
    run.check(
        "focus_rate",
        expected=abs(c),
        measured=c_cp,
        tolerance=0.03,
        relative=True,
        note="top attention-block eigenvalue of J at the critical point root-found from the "
        "trajectory vs Var_pi(gamma) Cov_pi(gamma, P beta)",
    )
    c_fit, n_cfit = gf.fitted_focus_rate(ts, met, config.pi)
    run.check(
        "focus_rate_fit",
        expected=abs(c),
        measured=c_fit,
        tolerance=0.1,
        relative=True,
        note=f"growth rate of ||alpha^T (WQ, WK)|| fitted on {n_cfit} saved times near the saddle",
    )
    # focus direction: in the linear regime out of the saddle Phi / ||Phi|| -> pi pi^T / ||pi||^2
    win = (ts >= stages["condensation"]) & (ts <= stages["focus"])
    cos_f = float(np.nanmax(met["cos_Phi_pipi"][win])) if win.any() else float("nan")
    run.check(
        "focus_direction",
        expected=">= 0.95",
        measured=cos_f,
        passed=bool(cos_f >= 0.95),
        note="max of cos(Phi, pi pi^T) between the condensation and focus times",
    )
    top = int(np.argmax(config.pi))
    ent = met["entropy_query"]
    order_ok = bool(
        np.all(np.nanmin(ent[:, top]) <= np.nanmin(np.delete(ent, top, axis=1), axis=0))
    )
    run.check(
        "frequent_query_focuses_most",
        expected=True,
        measured=order_ok,
        note="the most frequent query reaches the lowest token-type attention entropy",
    )
    run.check(
        "stages_in_order",
        expected=True,
        measured=gf.stages_in_order(stages),
        note="condensation < focus < dilution < new direction (may need a larger t1 for other pi)",
    )

    # --- escape times: predicted log(1/eps)/rate vs observed
    t_esc_pred = float(gf.predicted_escape_time(config.eps, mu1))
    run.scalar("condensation_escape", {"predicted": t_esc_pred, "observed": stages["condensation"]})
    run.scalar(
        "focus_escape",
        {
            "predicted_after_plateau": float(gf.predicted_escape_time(config.eps, abs(c))),
            "observed_focus_minus_condensation": stages["focus"] - stages["condensation"],
        },
    )
    run.scalar("rates", {"mu1": mu1, "c": c, "H_pi": H})
    run.scalar("final_loss", float(met["loss"][-1]))

    run.save_arrays(
        ts=ts,
        loss=met["loss"],
        sv_W0=met["sv_W0"],
        sv_W1=met["sv_W1"],
        sv_Phi=met["sv_Phi"],
        cos_W0_pi=met["cos_W0_pi"],
        cos_W1_centred=met["cos_W1_centred"],
        cos_Phi_pipi=met["cos_Phi_pipi"],
        entropy_query=met["entropy_query"],
        attention=met["attention"],
        dilution_mode=met["dilution_mode"],
        attention_mode=met["attention_mode"],
        W0=met["W0"],
        embedding_pca=gf.embedding_pca(met["W0"]),
        spectrum_origin=spec0.eigenvalues,
        spectrum_saddle=spec_c.eigenvalues,
        spectrum_saddle_attention_weight=spec_c.attention_weight,
    )
    _stage_figures(run, ts, met, stages, config.pi)
    fig, axes = new_figure(1, 2)
    for ax, spec, title in (
        (axes[0, 0], spec0, "J at theta = 0"),
        (axes[0, 1], spec_c, "J at the unigram saddle"),
    ):
        ev = np.asarray(spec.eigenvalues)[:20]
        w = np.asarray(spec.attention_weight)[:20]
        ax.bar(np.arange(len(ev)), ev, color=[("#d95f02" if a > 0.5 else "#1b9e77") for a in w])
        ax.set_title(title + " (orange: attention block)", fontsize=9)
        ax.set_xlabel("eigenvalue index")
    run.save_figure(fig, "jacobian_spectra")


# ----------------------------------------------------------------------------------------
# focus-dilution-ablation: other transition matrices with the same pi
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class AblationConfig(ExperimentConfig):
    """Population flows for several ``P`` with the same stationary ``pi``: the paper's family
    at each ``lams`` value and ``n_random`` random reversible (Metropolis) chains.

    Attributes:
        pi: shared stationary distribution; lams: values of the paper's family.
        n_random: random reversible chains (seeded by ``seed``); laziness: their holding mass.
        m, m_attn, eps, t1, num_saves, rtol, atol: as in ``focus-dilution``.
    """

    pi: tuple[float, ...] = HEADLINE_PI
    lams: tuple[float, ...] = (0.0, 0.5, 0.8)
    n_random: int = 3
    laziness: float = 0.2
    m: int = 6
    m_attn: int = 6
    eps: float = 1e-3
    t1: float = 800.0
    num_saves: int = 300
    rtol: float = 1e-7
    atol: float = 1e-10

    def validate(self) -> None:
        _check_pi(self.pi)
        for lam in self.lams:
            _check_lam(lam)
        _check_positive(eps=self.eps, t1=self.t1)
        if self.n_random < 0:
            raise ConfigError(f"n_random must be >= 0, got {self.n_random}")
        if len(self.lams) + self.n_random < 1:
            raise ConfigError("need at least one transition matrix (lams or n_random)")
        if not 0 <= self.laziness < 1:
            raise ConfigError(f"laziness must be in [0, 1), got {self.laziness}")
        if self.m < 2 or self.m_attn < 1 or self.num_saves < 50:
            raise ConfigError(
                f"need m >= 2, m_attn >= 1, num_saves >= 50; "
                f"got {self.m}, {self.m_attn}, {self.num_saves}"
            )

    @classmethod
    def quick(cls) -> dict:
        return {"lams": (0.0, 0.5), "n_random": 2, "num_saves": 200}


@register_experiment(
    "focus-dilution-ablation",
    AblationConfig,
    "focus-and-dilution flow for other transition matrices with the same pi (paper ablation)",
)
def run_ablation(config: AblationConfig, run: Run) -> None:
    pi_np = gf.validate_distribution(config.pi)
    pi = jnp.asarray(pi_np)
    d = len(pi_np)
    H = _entropy(pi_np)
    Ps, names = [], []
    for lam in config.lams:
        Ps.append(np.asarray(gf.paper_transition(pi, lam)))
        names.append(f"paper lam={lam:g}")
    keys = jax.random.split(jax.random.key(config.seed + 1000), max(config.n_random, 1))
    for i in range(config.n_random):
        Ps.append(np.asarray(gf.reversible_transition(pi_np, keys[i], laziness=config.laziness)))
        names.append(f"reversible #{i}")
    Ps = np.stack(Ps)
    for P, name in zip(Ps, names, strict=True):
        gf.validate_transition(P, name)
        if np.max(np.abs(pi_np @ P - pi_np)) > 1e-10:
            raise ConfigError(f"{name}: pi is not stationary")
    ts = gf.log_time_grid(config.t1, config.num_saves)
    saddle = gf.unigram_saddle(pi, config.m, config.m_attn)

    def member(params, key):
        P = params["P"]
        model0 = gf.init_transformer(key, d, config.m, config.m_attn, config.eps, dtype=P.dtype)
        sol = gf.population_flow(model0, pi, P, ts, rtol=config.rtol, atol=config.atol)
        met = gf.trajectory_metrics(sol.models, pi, P)
        spec = gf.jacobian_spectrum(saddle.model, pi, P)
        att = spec.attention_weight > 0.5
        c_jac = jnp.max(jnp.where(att, spec.eigenvalues, -jnp.inf))
        return {
            "loss": met["loss"],
            "sv_W0": met["sv_W0"],
            "entropy_top_query": met["entropy_top_query"],
            "entropy_query": met["entropy_query"],
            "dilution_mode_rel": met["dilution_mode_rel"],
            "attention_mode": met["attention_mode"],
            "phi_norm": met["phi_norm"],
            "c_formula": gf.focus_rate(pi, P, saddle.gamma, saddle.beta),
            "c_jacobian": c_jac,
            "status": sol.status,
        }

    result = run.sweep("ablation", member, Grid.zip({"P": Ps}, seeds=[config.seed]))
    ok = result.ok()
    run.log(f"{int(np.sum(~ok))} of {len(ok)} flows failed and are excluded")
    mu1 = float(gf.condensation_rate(pi))
    fig, axes = new_figure(1, 3)
    for i, name in enumerate(names):
        if not ok[i]:
            continue
        met = {k: result.outputs[k][i] for k in result.outputs}
        stages = gf.detect_stages(ts, met, pi_np)
        c = float(met["c_formula"])
        run.check(
            f"focus_rate[{name}]",
            expected=abs(c),
            measured=float(met["c_jacobian"]),
            tolerance=1e-6 * max(abs(c), 1e-2),
            note="Var_pi(gamma) Cov_pi(gamma, P beta) vs top attention eigenvalue of J at saddle",
        )
        t_end = stages["focus"] if np.isfinite(stages["focus"]) else ts[-1]
        plateau = _plateau_loss(ts, met["loss"], stages["condensation"], t_end)
        run.check(f"unigram_plateau[{name}]", expected=H, measured=plateau, tolerance=5e-3)
        mu_fit, _ = gf.fitted_condensation_rate(ts, met)
        run.check(
            f"condensation_rate_fit[{name}]",
            expected=mu1,
            measured=mu_fit,
            tolerance=0.05,
            relative=True,
            note="mu1 depends on pi only, not on P",
        )
        if abs(c) > 0.02:
            c_fit, n = gf.fitted_focus_rate(ts, met, pi_np)
            run.check(
                f"focus_rate_fit[{name}]",
                expected=abs(c),
                measured=c_fit,
                tolerance=0.15,
                relative=True,
                note=f"fitted on {n} saved times",
            )
        run.scalar(f"stages[{name}]", stages)
        run.scalar(f"c[{name}]", c)
        keep = ts > 0
        axes[0, 0].plot(ts[keep], met["loss"][keep], label=f"{name} (c={c:.3f})")
        axes[0, 1].plot(ts[keep], met["entropy_top_query"][keep], label=name)
        axes[0, 2].plot(ts[keep], met["attention_mode"][keep], label=name)
    for ax, title in zip(
        axes[0], ("loss", "attention entropy of the frequent query", "attention mode"), strict=True
    ):
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("t")
        note_excluded(ax, int(np.sum(~ok)), len(ok))
    axes[0, 0].axhline(H, color="0.3", ls=":", lw=0.8)
    axes[0, 2].set_yscale("log")
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "ablation")
    run.save_arrays(ts=ts, transition_matrices=Ps)


# ----------------------------------------------------------------------------------------
# focus-dilution-delta: symmetry breaking
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class DeltaConfig(ExperimentConfig):
    """One sweep over ``delta`` (including 0) and ``eps`` for the low-frequency family
    ``pi = (pi_top, (1 - pi_top)/(d - 1) + delta c)``, ``P = lam I + (1 - lam) 1 pi^T``.

    Attributes:
        pi_top, d, lam: the family; direction: ``c`` (centred; empty = linear from 1 to -1).
        deltas, eps_values: the sweep grid (delta = 0 is exactly symmetric).
        t1, num_saves, rtol, atol, max_steps: solver settings (escape times grow like 1/delta).
        new_direction_ratio: sigma2(W0)/sigma1(W0) threshold of the new-direction stage.
        exponent_tolerance: allowed |fitted exponent + 1|.
    """

    pi_top: float = 0.75
    d: int = 4
    lam: float = 0.5
    direction: tuple[float, ...] = ()
    deltas: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02)
    eps_values: tuple[float, ...] = (1e-3, 1e-4)
    m: int = 6
    m_attn: int = 6
    t1: float = 20000.0
    num_saves: int = 300
    rtol: float = 1e-7
    atol: float = 1e-10
    max_steps: int = 50000
    new_direction_ratio: float = 0.1
    exponent_tolerance: float = 0.25

    def validate(self) -> None:
        if self.d < 3:
            raise ConfigError(f"d must be >= 3 (two or more low-frequency tokens), got {self.d}")
        if not 0 < self.pi_top < 1:
            raise ConfigError(f"pi_top must be in (0, 1), got {self.pi_top}")
        _check_lam(self.lam)
        if self.direction and len(self.direction) != self.d - 1:
            raise ConfigError(
                f"direction must have d - 1 = {self.d - 1} entries, got {len(self.direction)}"
            )
        c = np.asarray(self.direction or gf.default_direction(self.d), dtype=float)
        c = c - c.mean()
        if not np.any(c):
            raise ConfigError("direction must not be constant (it is centred to sum to zero)")
        if any(dl < 0 for dl in self.deltas) or 0.0 not in self.deltas:
            raise ConfigError(
                f"deltas must be >= 0 and include 0 (the symmetric case), got {self.deltas}"
            )
        if sum(dl > 0 for dl in self.deltas) < 2:
            raise ConfigError("deltas needs at least two positive values to fit the exponent")
        for dl in self.deltas:
            low = (1 - self.pi_top) / (self.d - 1) + dl * c
            if np.any(low <= 0):
                raise ConfigError(f"delta={dl} makes a low-frequency probability non-positive")
        for e in self.eps_values:
            if not 0 < e < 0.1:
                raise ConfigError(f"eps values must be in (0, 0.1), got {e}")
        _check_positive(t1=self.t1)

    @classmethod
    def quick(cls) -> dict:
        return {"deltas": (0.0, 0.01, 0.02), "eps_values": (1e-3,), "t1": 8000.0, "num_saves": 200}


@register_experiment(
    "focus-dilution-delta",
    DeltaConfig,
    "symmetry breaking: escape from the rank-one stall vs delta (including delta = 0) and eps",
)
def run_delta(config: DeltaConfig, run: Run) -> None:
    direction = jnp.asarray(config.direction or gf.default_direction(config.d))
    ts = gf.log_time_grid(config.t1, config.num_saves)

    def member(params, key):
        pi = gf.symmetry_breaking_pi(config.pi_top, params["delta"], direction)
        P = gf.paper_transition(pi, config.lam)
        model0 = gf.init_transformer(
            key, config.d, config.m, config.m_attn, params["eps"], dtype=pi.dtype
        )
        sol = gf.population_flow(
            model0, pi, P, ts, rtol=config.rtol, atol=config.atol, max_steps=config.max_steps
        )
        met = gf.trajectory_metrics(sol.models, pi, P)
        return {
            "pi": pi,
            "loss": met["loss"],
            "sv_W0": met["sv_W0"],
            "entropy_top_query": met["entropy_top_query"],
            "dilution_mode_rel": met["dilution_mode_rel"],
            "steps": sol.num_steps,
            "status": sol.status,
        }

    grid = Grid.product(
        {"delta": list(config.deltas), "eps": list(config.eps_values)}, seeds=[config.seed]
    )
    result = run.sweep("delta", member, grid)
    run.check("delta_sweep_compiles_once", expected=1, measured=int(result.n_compilations))
    ok = result.ok()
    n_bad = int(np.sum(~ok))
    if n_bad:
        run.log(f"{n_bad} members failed ({result.status_counts()}) and are excluded")
    M = len(ok)
    t_stall = np.full(M, np.nan)
    t_new = np.full(M, np.nan)
    final_ratio = np.full(M, np.nan)
    for i in range(M):
        if not ok[i]:
            continue
        met = {
            k: result.outputs[k][i]
            for k in ("loss", "sv_W0", "entropy_top_query", "dilution_mode_rel")
        }
        st = gf.detect_stages(
            ts, met, result.outputs["pi"][i], new_direction_ratio=config.new_direction_ratio
        )
        t_stall[i] = st["dilution"]
        t_new[i] = st["new_direction"]
        final_ratio[i] = met["sv_W0"][-1, 1] / met["sv_W0"][-1, 0]
    escape = t_new - t_stall
    delta = result.params["delta"]
    eps = result.params["eps"]
    run.save_arrays(
        ts=ts,
        escape_time=escape,
        t_stall=t_stall,
        t_new_direction=t_new,
        final_sigma_ratio=final_ratio,
        delta=delta,
        eps=eps,
    )
    zero = ok & (delta == 0)
    stalled = bool(zero.any() and np.all(~np.isfinite(t_new[zero])))
    run.check(
        "stall_at_delta_0",
        expected=True,
        measured=stalled,
        note=f"no new direction by t1={config.t1:g} when delta = 0 (final sigma2/sigma1 = "
        f"{np.nanmax(final_ratio[zero]) if zero.any() else float('nan'):.3g})",
    )
    exps = {}
    fig, axes = new_figure(1, 2)
    for e in config.eps_values:
        sel = ok & (eps == e) & (delta > 0) & np.isfinite(escape)
        if sel.sum() >= 2:
            slope = float(np.polyfit(np.log(delta[sel]), np.log(escape[sel]), 1)[0])
            exps[f"{e:g}"] = slope
            axes[0, 0].loglog(delta[sel], escape[sel], "o-", label=f"eps={e:g}: slope {slope:.2f}")
        censored = int(np.sum(ok & (eps == e) & (delta > 0) & ~np.isfinite(escape)))
        if censored:
            run.log(f"eps={e:g}: {censored} positive-delta members did not escape by t1 (censored)")
    run.scalar("escape_exponents", exps)
    measured = float(np.mean(list(exps.values()))) if exps else float("nan")
    run.check(
        "escape_time_exponent",
        expected=-1.0,
        measured=measured,
        tolerance=config.exponent_tolerance,
        note="slope of log(t_new_direction - t_stall) vs log(delta), averaged over eps",
    )
    if len(config.eps_values) >= 2:
        e_lo, e_hi = min(config.eps_values), max(config.eps_values)
        sel_lo = ok & (eps == e_lo) & (delta > 0)
        sel_hi = ok & (eps == e_hi) & (delta > 0)
        ratio = np.nanmean(escape[sel_lo] / escape[sel_hi])
        run.scalar(
            "escape_ratio_eps",
            {
                "measured": float(ratio),
                "log_ratio_prediction": math.log(1 / e_lo) / math.log(1 / e_hi),
            },
        )
    ax = axes[0, 0]
    ax.set_xlabel("delta")
    ax.set_ylabel("escape time t_new - t_stall")
    ax.legend(fontsize=7)
    note_excluded(ax, n_bad, M)
    ax = axes[0, 1]
    keep = ts > 0
    for i in range(M):
        if ok[i]:
            sv = result.outputs["sv_W0"][i]
            ax.plot(
                ts[keep], (sv[:, 1] / sv[:, 0])[keep], label=f"delta={delta[i]:g}, eps={eps[i]:g}"
            )
    ax.axhline(config.new_direction_ratio, color="0.4", ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("sigma2(W0) / sigma1(W0)", fontsize=10)
    mark_stages(ax, {"stall": float(np.nanmedian(t_stall))})
    ax.legend(fontsize=6)
    run.save_figure(fig, "delta_escape")


# ----------------------------------------------------------------------------------------
# focus-dilution-finite: finite N, s vs the population flow
# ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class FiniteConfig(ExperimentConfig):
    """Full-batch gradient descent on ``n`` sampled sequences of length ``s`` (one sweep over
    seeds per size, since sizes are array shapes), compared at ``t = k lr`` with the population
    flow from the same initialisation; and Adam at the largest size.

    Attributes:
        pi, lam, m, m_attn, eps: as in ``focus-dilution``.
        sizes_n, sizes_s: paired sample sizes (increasing).
        n_seeds: seeds per size (data and initialisation).
        lr, num_steps, record_every: gradient descent (flow time t = num_steps * lr).
        adam_lr, adam_steps: the Adam run at the largest size.
    """

    pi: tuple[float, ...] = HEADLINE_PI
    lam: float = 0.5
    m: int = 6
    m_attn: int = 6
    eps: float = 1e-3
    sizes_n: tuple[int, ...] = (256, 1024, 4096)
    sizes_s: tuple[int, ...] = (16, 32, 64)
    n_seeds: int = 4
    lr: float = 0.5
    num_steps: int = 400
    record_every: int = 20
    adam_lr: float = 0.01
    adam_steps: int = 1000

    def validate(self) -> None:
        _check_pi(self.pi)
        _check_lam(self.lam)
        _check_positive(eps=self.eps, lr=self.lr, adam_lr=self.adam_lr)
        if len(self.sizes_n) != len(self.sizes_s) or len(self.sizes_n) < 2:
            raise ConfigError(
                f"sizes_n and sizes_s must pair up (>= 2 sizes), got {self.sizes_n}, {self.sizes_s}"
            )
        if any(n < 1 for n in self.sizes_n) or any(s < 2 for s in self.sizes_s):
            raise ConfigError("sizes_n must be >= 1 and sizes_s >= 2")
        if self.num_steps % self.record_every or self.adam_steps % self.record_every:
            raise ConfigError("num_steps and adam_steps must be multiples of record_every")
        if self.n_seeds < 1:
            raise ConfigError(f"n_seeds must be >= 1, got {self.n_seeds}")

    @classmethod
    def quick(cls) -> dict:
        return {"sizes_n": (64, 1024), "sizes_s": (8, 32), "n_seeds": 3, "adam_steps": 400}


@register_experiment(
    "focus-dilution-finite",
    FiniteConfig,
    "finite-(N, s) gradient descent and Adam approach the population flow",
)
def run_finite(config: FiniteConfig, run: Run) -> None:
    pi = jnp.asarray(config.pi)
    P = gf.paper_transition(pi, config.lam)
    d = pi.shape[0]
    H = _entropy(config.pi)
    n_rec = config.num_steps // config.record_every + 1
    ts = np.arange(n_rec) * config.record_every * config.lr

    def make_member(n, s, optimizer, num_steps):
        def member(params, key):
            k_data, k_init = jax.random.split(key)
            tr = gf.train_finite(
                k_data,
                P,
                pi,
                n=n,
                s=s,
                m=config.m,
                m_attn=config.m_attn,
                eps=config.eps,
                lr=params["lr"],
                num_steps=num_steps,
                record_every=config.record_every,
                optimizer=optimizer,
                init_key=k_init,
            )
            out = {
                "train_loss": tr.train_loss,
                "population_loss": tr.population_loss,
                "position_entropy": tr.position_entropy,
                "status": tr.status,
            }
            return out

        return member

    # The population flow from each seed's initialisation (the sweep engine keys member
    # ``seed`` with ``jax.random.key(seed)``; the data/init split is the one train_finite uses).
    seeds = config.seed + np.arange(config.n_seeds)

    def flow_from_seed(seed):
        k_init = jax.random.split(jax.random.key(seed))[1]
        model0 = gf.init_transformer(k_init, d, config.m, config.m_attn, config.eps, dtype=pi.dtype)
        sol = gf.population_flow(model0, pi, P, jnp.asarray(ts))
        return jax.vmap(lambda mm: gf.population_loss(mm, pi, P))(sol.models), sol.status

    flow_loss, flow_status = _np(jax.jit(jax.vmap(flow_from_seed))(jnp.asarray(seeds)))
    run.save_arrays(flow_loss=flow_loss, flow_status=status_code(flow_status))
    flow_ok = status_code(flow_status) == status_code(Status.successful)

    fig, axes = new_figure(1, 3)
    mean_err, final_err = [], []
    for n, s in zip(config.sizes_n, config.sizes_s, strict=True):
        grid = Grid.product({"lr": [config.lr]}, seeds=config.n_seeds, base_seed=config.seed)
        res = run.sweep(f"gd_n{n}_s{s}", make_member(n, s, "gd", config.num_steps), grid)
        ok = res.ok() & flow_ok
        diff = np.abs(res.outputs["population_loss"] - flow_loss)[ok]
        mean_err.append(float(np.mean(diff)) if diff.size else float("nan"))
        final_err.append(float(np.mean(diff[:, -1])) if diff.size else float("nan"))
        run.log(
            f"n={n}, s={s}: mean |L_pop(GD) - L_flow| = {mean_err[-1]:.4g}, "
            f"final {final_err[-1]:.4g}"
            f" ({int(np.sum(~ok))} failed seeds excluded)"
        )
        axes[0, 0].plot(
            ts, np.mean(res.outputs["population_loss"][ok], axis=0), label=f"GD n={n}, s={s}"
        )
        axes[0, 2].plot(
            ts, np.mean(res.outputs["position_entropy"][ok], axis=0), label=f"n={n}, s={s}"
        )
        if n == config.sizes_n[-1]:
            axes[0, 0].plot(ts, np.mean(flow_loss[ok], axis=0), "k--", label="population flow")
    run.scalar(
        "mean_abs_error",
        dict(
            zip(
                [f"n{n}_s{s}" for n, s in zip(config.sizes_n, config.sizes_s, strict=True)],
                mean_err,
                strict=True,
            )
        ),
    )
    run.scalar(
        "final_abs_error",
        dict(
            zip(
                [f"n{n}_s{s}" for n, s in zip(config.sizes_n, config.sizes_s, strict=True)],
                final_err,
                strict=True,
            )
        ),
    )
    decreasing = bool(np.all(np.diff(final_err) < 0))
    run.check(
        "finite_approaches_population",
        expected=True,
        measured=decreasing,
        note=f"final |L_pop(GD) - L_flow| decreases with (n, s): {np.round(final_err, 5).tolist()}",
    )
    run.check(
        "largest_size_matches_flow",
        expected=0.0,
        measured=final_err[-1],
        tolerance=0.02,
        note="population loss of the GD-trained model vs the flow at the final time",
    )
    n, s = config.sizes_n[-1], config.sizes_s[-1]
    grid = Grid.product({"lr": [config.adam_lr]}, seeds=config.n_seeds, base_seed=config.seed)
    res = run.sweep("adam", make_member(n, s, "adam", config.adam_steps), grid)
    ok = res.ok()
    t_adam = np.arange(config.adam_steps // config.record_every + 1) * config.record_every
    adam_final = (
        float(np.median(res.outputs["population_loss"][ok][:, -1])) if ok.any() else float("nan")
    )
    run.check(
        "adam_escapes_unigram_plateau",
        expected=f"< H(pi) = {H:.4f}",
        measured=adam_final,
        passed=bool(adam_final < H - 0.01),
        note="Adam passes the unigram plateau (focus)",
    )
    ax = axes[0, 1]
    ax.plot(
        t_adam, np.median(res.outputs["population_loss"][ok], axis=0), label=f"Adam n={n}, s={s}"
    )
    ax.axhline(H, color="0.3", ls=":", lw=0.8)
    ax.set_xlabel("Adam step")
    ax.set_title("Adam: population loss", fontsize=10)
    note_excluded(ax, int(np.sum(~ok)), len(ok))
    axes[0, 0].axhline(H, color="0.3", ls=":", lw=0.8)
    axes[0, 0].set_title("GD (t = k lr) vs population flow", fontsize=10)
    axes[0, 0].set_xlabel("t")
    axes[0, 0].legend(fontsize=7)
    axes[0, 2].set_title("last-token position entropy / log s", fontsize=10)
    axes[0, 2].set_xlabel("t")
    axes[0, 2].legend(fontsize=7)
    run.save_figure(fig, "finite_vs_population")
    run.save_arrays(
        ts=ts, mean_abs_error=np.asarray(mean_err), final_abs_error=np.asarray(final_err)
    )


# ----------------------------------------------------------------------------------------
# focus-dilution-text: real text
# ----------------------------------------------------------------------------------------
_REPO_ROOT = Path(__file__).resolve().parents[2]
# The real-text samples live outside the repository: ``$JAXDYN_DATA`` if set, else the
# ``shared/data`` folder beside the checkout (never downloaded, never copied in).
_DATA_DIR = Path(os.environ.get("JAXDYN_DATA", _REPO_ROOT.parent / "shared" / "data"))
DEFAULT_CORPUS = _DATA_DIR / "wikitext-2" / "valid.txt"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextConfig(ExperimentConfig):
    """Bigram chain of a real corpus, its population flow, and training of the model on the
    token stream, with per-query attention stories.

    Attributes:
        corpus_path: WikiText raw or TinyStories text file
            ("" = ../shared/data/wikitext-2/valid.txt).
        corpus_format: "auto" (detected), "wikitext", "tinystories" or "plain".
        level: "word" (top-k words + <oov>) or "char".
        vocab_size: vocabulary size d including <oov>; max_tokens: 0 = the whole file.
        smoothing: additive smoothing of the bigram counts.
        queries: query tokens for the stories (empty = the 3 most frequent and one of median
            frequency).
        m, m_attn, eps, t1, num_saves, rtol, atol: the population flow.
        solver: "tsit5" (explicit, default) or "kvaerno5" (implicit, for stiff flows past
            t ~ 2000); max_steps: solver step budget.
        n_windows, s, optimizer, lr, train_steps, record_every: training on the stream
            (n_windows distinct windows, every window if the stream has fewer: each window
            is one example, since the loss sits on the last position).
        story_threshold: relative entropy change that counts as focus or dilution.
    """

    corpus_path: str = ""
    corpus_format: str = "auto"
    level: str = "char"
    vocab_size: int = 32
    max_tokens: int = 0
    smoothing: float = 1e-3
    queries: tuple[str, ...] = ()
    m: int = 8
    m_attn: int = 8
    eps: float = 1e-3
    t1: float = 1000.0
    num_saves: int = 150
    rtol: float = 1e-5
    atol: float = 1e-8
    solver: str = "tsit5"
    max_steps: int = 100_000
    n_windows: int = 4096
    s: int = 32
    optimizer: str = "adam"
    lr: float = 0.01
    train_steps: int = 1500
    record_every: int = 50
    story_threshold: float = 0.1

    def corpus(self) -> Path:
        return Path(self.corpus_path) if self.corpus_path else DEFAULT_CORPUS

    def validate(self) -> None:
        if not self.corpus().is_file():
            raise ConfigError(f"corpus_path does not exist: {self.corpus()}")
        if self.corpus_format not in ("auto", "wikitext", "tinystories", "plain"):
            raise ConfigError(
                f"corpus_format must be auto, wikitext, tinystories or plain, "
                f"got {self.corpus_format!r}"
            )
        if self.level not in ("word", "char"):
            raise ConfigError(f"level must be 'word' or 'char', got {self.level!r}")
        if self.solver not in gf.SOLVERS:
            raise ConfigError(f"solver must be one of {gf.SOLVERS}, got {self.solver!r}")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.optimizer not in ("gd", "adam"):
            raise ConfigError(f"optimizer must be 'gd' or 'adam', got {self.optimizer!r}")
        if self.vocab_size < 3:
            raise ConfigError(f"vocab_size must be >= 3, got {self.vocab_size}")
        _check_positive(smoothing=self.smoothing, eps=self.eps, t1=self.t1, lr=self.lr)
        if self.max_tokens < 0 or self.s < 2 or self.n_windows < 1:
            raise ConfigError("need max_tokens >= 0, s >= 2, n_windows >= 1")
        if self.train_steps % self.record_every:
            raise ConfigError("train_steps must be a multiple of record_every")

    @classmethod
    def quick(cls) -> dict:
        return {"max_tokens": 200_000, "num_saves": 100, "train_steps": 1000}


def _story_queries(config: TextConfig, corpus, pi) -> list[int]:
    if config.queries:
        missing = [q for q in config.queries if q not in corpus.vocab]
        if missing:
            raise ConfigError(f"queries not in the vocabulary: {missing}")
        return [corpus.vocab.index(q) for q in config.queries]
    order = np.argsort(-np.asarray(pi))
    return [int(order[0]), int(order[1]), int(order[2]), int(order[len(order) // 2])]


@register_experiment(
    "focus-dilution-text",
    TextConfig,
    "real text (WikiText / TinyStories): bigram population flow and training, attention stories",
)
def run_text(config: TextConfig, run: Run) -> None:
    corpus = gf.load_corpus(
        config.corpus(),
        fmt=config.corpus_format,
        level=config.level,
        vocab_size=config.vocab_size,
        max_tokens=config.max_tokens or None,
    )
    d = corpus.d
    P_np, pi_np = gf.bigram_chain(corpus.tokens, d, smoothing=config.smoothing)
    names = list(corpus.vocab)
    run.log(
        f"corpus {config.corpus()} ({corpus.format}, {config.level}): "
        f"{len(corpus.tokens)} tokens, d={d}"
    )
    run.scalar(
        "corpus",
        {
            "path": str(config.corpus()),
            "format": corpus.format,
            "tokens": len(corpus.tokens),
            "vocab_head": names[:8],
            "oov_mass": float(pi_np[corpus.index(gf._text.OOV)]),
        },
    )
    pi = jnp.asarray(pi_np)
    P = jnp.asarray(P_np)
    H = _entropy(pi_np)
    queries = _story_queries(config, corpus, pi_np)
    qnames = [names[q] for q in queries]

    # --- population flow on the bigram chain
    ts = gf.log_time_grid(config.t1, config.num_saves)
    model0 = gf.init_transformer(
        jax.random.key(config.seed), d, config.m, config.m_attn, config.eps
    )
    sol, met = jax.jit(_flow_and_metrics, static_argnums=(4, 5, 6, 7))(
        pi, P, model0, ts, config.rtol, config.atol, config.solver, config.max_steps
    )
    met = _np(met)
    status = status_code(sol.status)
    run.scalar("flow_status", status_name(status))
    run.scalar("flow_steps", int(sol.num_steps))
    valid = np.all(np.isfinite(met["attention"].reshape(len(ts), -1)), axis=1)
    run.log(
        f"flow: {int(sol.num_steps)} steps, {status_message(status)}; "
        f"{int(valid.sum())} valid saves"
    )
    stages = gf.detect_stages(ts[valid], {k: v[valid] for k, v in met.items()}, pi_np)
    stages = {k: v for k, v in stages.items() if k in ("condensation", "focus", "dilution")}
    run.scalar("flow_stages", stages)
    mu1 = float(gf.condensation_rate(pi))
    mu_fit, _ = gf.fitted_condensation_rate(ts[valid], {k: v[valid] for k, v in met.items()})
    run.check(
        "condensation_rate_fit",
        expected=mu1,
        measured=mu_fit,
        tolerance=0.1,
        relative=True,
        note="||pi|| ||pi - 1/d 1|| of the corpus bigram chain vs the fitted growth of sigma1(W0)",
    )
    plateau = _plateau_loss(
        ts,
        met["loss"],
        stages["condensation"],
        stages["focus"] if np.isfinite(stages["focus"]) else ts[valid][-1],
    )
    # On text |c| is often larger than the approach rate to the saddle, so attention moves before
    # the loss settles on H(pi): the flattest loss is reported, not checked.
    run.scalar("plateau", {"H_pi": H, "flattest_loss": plateau})
    flow_stories = {}
    for q in queries:
        flow_stories[names[q]] = gf.attention_story(
            met["attention"][valid][:, q, :], pi_np, names, threshold=config.story_threshold
        )
    run.scalar("flow_stories", flow_stories)
    top = int(np.argmax(pi_np))

    # Sign of the stage-II mode at the corpus' unigram saddle: c > 0 focuses every query on
    # the frequent tokens (Phi ~ +gamma gamma^T); c < 0 makes the unstable direction
    # Phi ~ -gamma gamma^T, so attention first moves off the frequent tokens (dilution).
    saddle = gf.unigram_saddle(pi, config.m, config.m_attn)
    c = float(gf.focus_rate(pi, P, saddle.gamma, saddle.beta))
    spec = jax.jit(gf.jacobian_spectrum)(saddle.model, pi, P)
    att = np.asarray(spec.attention_weight) > 0.5
    run.check(
        "focus_rate",
        expected=abs(c),
        measured=float(np.asarray(spec.eigenvalues)[att][0]),
        tolerance=1e-6,
        relative=True,
        note=f"|Var_pi(gamma) Cov_pi(gamma, P beta)| (c = {c:.4g}) "
        "vs top attention eigenvalue of J",
    )
    run.scalar("focus_rate_signed", c)
    W = met["attention"][valid]
    excess = np.einsum("q,tq->t", pi_np, W[:, :, top] - pi_np[top])
    moved = np.nonzero(np.abs(excess) > 1e-3)[0]
    first_sign = float(np.sign(excess[moved[0]])) if moved.size else 0.0
    run.check(
        "first_attention_phase_sign",
        expected=float(np.sign(c)),
        measured=first_sign,
        note=f"first change of the pi-weighted attention excess on the most frequent token "
        f"{names[top]!r}: +1 focus, -1 dilution (flow), predicted by the sign of c",
    )
    run.scalar(
        "flow_excess_on_top_key",
        {"first_sign": first_sign, "max": float(np.max(excess)), "min": float(np.min(excess))},
    )

    # --- actual training on the token stream
    rng = np.random.default_rng(config.seed)
    windows = gf.stream_windows(corpus.tokens, config.s + 1, config.n_windows, rng)
    run.log(f"training on {len(windows)} windows of {config.s + 1} tokens")
    run.scalar("train_windows", len(windows))
    opt = gf.make_optimizer(config.optimizer)

    def train(model, windows):
        state = gf.train_init(model, opt, config.lr)
        batch = gf.prepare_batch(windows, d)

        def block(st, _):
            def inner(c, _):
                return gf.train_step(c, batch, opt)

            st, losses = jax.lax.scan(inner, st, None, length=config.record_every)
            A, F, _ = gf.attention_by_token(st.model, windows, d)
            return st, (losses[-1], gf.population_loss(st.model, pi, P), A, F)

        return jax.lax.scan(block, state, None, length=config.train_steps // config.record_every)[1]

    train_loss, pop_loss, A, F = _np(jax.jit(train)(model0, jnp.asarray(windows)))
    steps = np.arange(1, len(train_loss) + 1) * config.record_every
    ok_train = bool(np.all(np.isfinite(train_loss)))
    run.scalar("train_status", status_name(Status.successful if ok_train else Status.nonfinite))
    run.scalar("train_final_loss", float(train_loss[-1]))
    train_stories = {}
    for q in queries:
        prior = np.mean(F[:, q, :], axis=0)
        train_stories[names[q]] = gf.attention_story(
            A[:, q, :], prior, names, threshold=config.story_threshold
        )
    run.scalar("train_stories", train_stories)
    # trained model: attention on the most frequent key, weighted by query frequency, against
    # its share of the positions (the uniform-attention baseline). Focus: the attention reaches
    # (1 + story_threshold) times the share; dilution: the excess over the share then falls
    # below half of its peak.
    qw = np.asarray(pi_np)
    att_t = np.einsum("q,tq->t", qw, A[:, :, top])
    share_t = np.einsum("q,tq->t", qw, F[:, :, top])
    ex_t = att_t - share_t
    i_pk = int(np.nanargmax(ex_t))
    peak_ratio = float(att_t[i_pk] / share_t[i_pk])
    focus_then_dilution = bool(
        peak_ratio >= 1.0 + config.story_threshold and np.nanmin(ex_t[i_pk:]) < 0.5 * ex_t[i_pk]
    )
    run.scalar(
        "train_excess_on_top_key",
        {
            "peak": float(ex_t[i_pk]),
            "peak_ratio": peak_ratio,
            "peak_step": int((i_pk + 1) * config.record_every),
            "min_after_peak": float(np.nanmin(ex_t[i_pk:])),
        },
    )
    run.check(
        "trained_frequent_focus_then_dilution",
        expected=True,
        measured=focus_then_dilution,
        note=f"trained model: attention on {names[top]!r} peaks at {peak_ratio:.3g} x its "
        f"share (excess {ex_t[i_pk]:.3g}, step {(i_pk + 1) * config.record_every}; focus needs "
        f"{1.0 + config.story_threshold:.3g} x) and the excess later falls to "
        f"{np.nanmin(ex_t[i_pk:]):.3g} (dilution: below half the peak)",
    )
    for name in qnames:
        run.log(
            f"query {name!r}: flow {' -> '.join(flow_stories[name])}; "
            f"trained {' -> '.join(train_stories[name])}"
        )
    run.save_arrays(
        ts=ts,
        loss=met["loss"],
        attention=met["attention"],
        pi=pi_np,
        P=P_np,
        train_steps=steps,
        train_loss=train_loss,
        train_population_loss=pop_loss,
        train_attention=A,
        train_key_share=F,
        queries=np.asarray(queries),
    )

    # --- figures: per-query stories, flow and training
    fig, axes = new_figure(2, len(queries))
    keys = list(dict.fromkeys([top] + queries))
    for j, q in enumerate(queries):
        ax = axes[0, j]
        ratios = W[:, q, keys] / pi_np[keys]
        time_series(
            ax,
            ts[valid],
            ratios,
            labels=[f"key {names[k]!r}" for k in keys],
            logx=True,
            stages=stages,
            title=f"flow: query {names[q]!r}",
            ylabel="w_qk / pi_k",
        )
        ax.axhline(1.0, color="0.5", ls=":", lw=0.8)
        ax = axes[1, j]
        ratios_t = A[:, q, keys] / np.maximum(F[:, q, keys], 1e-12)
        time_series(
            ax,
            steps,
            ratios_t,
            labels=[f"key {names[k]!r}" for k in keys],
            logx=True,
            title=f"trained ({config.optimizer}): query {names[q]!r}",
            xlabel="step",
            ylabel="attention / key share",
        )
        ax.axhline(1.0, color="0.5", ls=":", lw=0.8)
    run.save_figure(fig, "attention_stories")
    fig, axes = new_figure(1, 2)
    time_series(
        axes[0, 0],
        ts[valid],
        met["loss"][valid],
        labels=["population loss"],
        logx=True,
        stages=stages,
        title="population flow on the bigram chain",
    )
    axes[0, 0].axhline(H, color="0.3", ls=":", lw=0.8)
    time_series(
        axes[0, 1],
        steps,
        [train_loss, pop_loss],
        labels=["training loss", "population loss"],
        logx=True,
        xlabel="step",
        title=f"training on the stream ({config.optimizer})",
    )
    axes[0, 1].axhline(H, color="0.3", ls=":", lw=0.8)
    run.save_figure(fig, "text_loss")
