"""``focus-dilution-delta``: escape from the rank-one stall against the asymmetry ``delta`` of
the low-frequency tokens and the initialisation scale ``eps`` (focus_dilution.md, stage 4).

The linearisation at the stall predicts an escape time ``t_new - t_dil = (log(1/eps) + K) /
lambda_T(delta)``: a power law in ``lambda_T`` with exponent ``-1``, in ``delta`` with minus
the exponent of ``lambda_T(delta)`` over the same deltas (``-1`` as ``delta -> 0``, see
``focus-dilution-lyapunov``), and a slope ``1 / lambda_T`` against ``log(1/eps)``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import fit_power_law, gradflow as gf
from ..._status import Status
from ...plotting import new_figure, note_excluded
from ...runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from ...sweep import Grid
from ._common import EIGEN_RTOL, check_lam


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeltaConfig(ExperimentConfig):
    """One sweep over ``delta`` (including 0) and ``eps`` for the low-frequency family
    ``pi = (pi_top, (1 - pi_top)/(d - 1) + delta c)``, ``P = lam I + (1 - lam) 1 pi^T``.

    Attributes:
        pi_top: probability of the frequent token.
        d: vocabulary size.
        lam: self-transition weight of the paper's family.
        direction: ``c`` (centred; empty = linear from 1 to -1).
        deltas: asymmetries (0 is the exactly symmetric stall; at least 4 positive ones). The
            full size keeps them where ``lambda_T`` is linear in ``delta`` (local exponents
            within 0.05 of 1, below ``delta ~ 0.0075`` for the default chain), so the escape
            time's exponent can be decided; the quick deltas are above that regime and leave it
            ``inconclusive``.
        eps_values: initialisation scales (at least 3, for a confidence interval of the slope
            in log(1/eps)).
        m: embedding width.
        m_attn: attention width m'.
        t1: end time of every flow (escape times grow like 1/delta: about 7e4 at delta =
            0.002, eps = 1e-4).
        num_saves: log-spaced save times.
        rtol: relative tolerance of the adaptive solver.
        atol: absolute tolerance of the adaptive solver.
        max_steps: solver step budget.
        new_direction_ratio: sigma2(W0)/sigma1(W0) level of the new-direction stage.
    """

    pi_top: float = 0.75
    d: int = 4
    lam: float = 0.5
    direction: tuple[float, ...] = ()
    deltas: tuple[float, ...] = (0.0, 0.002, 0.003, 0.004, 0.005, 0.0075)
    eps_values: tuple[float, ...] = (1e-2, 1e-3, 1e-4)
    m: int = 6
    m_attn: int = 6
    t1: float = 100_000.0
    num_saves: int = 800
    rtol: float = 1e-7
    atol: float = 1e-10
    max_steps: int = 100_000
    new_direction_ratio: float = 0.1

    def direction_vector(self) -> np.ndarray:
        """The centred asymmetry direction ``c``."""
        c = np.asarray(self.direction or np.linspace(1.0, -1.0, self.d - 1), dtype=float)
        return c - c.mean()

    def validate(self) -> None:
        if self.d < 3:
            raise ConfigError(f"d must be >= 3 (two or more low-frequency tokens), got {self.d}")
        if not 0 < self.pi_top < 1:
            raise ConfigError(f"pi_top must be in (0, 1), got {self.pi_top}")
        check_lam(self.lam)
        if self.direction and len(self.direction) != self.d - 1:
            raise ConfigError(
                f"direction must have d - 1 = {self.d - 1} entries, got {len(self.direction)}"
            )
        c = self.direction_vector()
        if not np.any(c):
            raise ConfigError("direction must not be constant (it is centred to sum to zero)")
        if any(x < 0 for x in self.deltas) or 0.0 not in self.deltas:
            raise ConfigError(
                f"deltas must be >= 0 and include 0 (the symmetric case), got {self.deltas}"
            )
        if sum(x > 0 for x in self.deltas) < 4:
            raise ConfigError(
                "deltas needs at least 4 positive values for a power-law fit with a CI"
            )
        for x in self.deltas:
            if np.any((1 - self.pi_top) / (self.d - 1) + x * c <= 0):
                raise ConfigError(f"delta={x} makes a low-frequency probability non-positive")
        if len(set(self.eps_values)) < 3 or any(not 0 < e < 0.1 for e in self.eps_values):
            raise ConfigError(
                f"need at least 3 distinct eps values in (0, 0.1), got {self.eps_values}"
            )
        if not (self.t1 > 0 and self.num_saves >= 50 and self.max_steps > 0):
            raise ConfigError("need t1 > 0, num_saves >= 50 and max_steps > 0")

    @classmethod
    def quick(cls) -> dict:
        return {"deltas": (0.0, 0.01, 0.015, 0.02, 0.03), "t1": 12000.0, "num_saves": 250}


def _member(config: DeltaConfig):
    """One (delta, eps) member: the population flow, its stages, and the rank-one stall's
    ``lambda_T`` (the parts of :func:`gradflow.analyse_flow` the escape times need: no
    attention-free flow, visited saddle or spectra, which would only add to the program)."""
    direction = jnp.asarray(config.direction_vector())
    ts = _save_times(config)
    solve = dict(rtol=config.rtol, atol=config.atol, max_steps=config.max_steps)

    def member(params, key):
        pi = gf.symmetry_breaking_pi(config.pi_top, params["delta"], direction)
        chain = gf.MarkovChain.paper(pi, config.lam)
        k_flow, k_stall = jax.random.split(key)
        d, eps = pi.shape[0], params["eps"]
        model0 = gf.init_transformer(k_flow, d, config.m, config.m_attn, eps)
        sol = gf.population_flow(model0, chain, ts, **solve)
        metrics = gf.trajectory_metrics(sol.models, chain)
        stages = gf.detect_stages(
            ts, metrics, chain.pi, new_direction_ratio=config.new_direction_ratio
        )
        # the stall: the rank-one flow stops when steady (t1 only bounds it), then root-found
        stall = gf.rank_one_critical_point(
            gf.init_transformer(k_stall, d, 1, 1, eps),
            chain,
            config.t1,
            max_steps=config.max_steps,
        )
        converged = stall.point.status == Status.successful
        sv = metrics["sv_W0"]

        def reached(t):  # a stage not reached is inf here: NaN would mark the member failed
            return jnp.where(jnp.isnan(t), jnp.inf, t)

        return {
            "t_dilution": reached(stages.dilution.time),
            "t_new_direction": reached(stages.new_direction.time),
            "lambda_T": jnp.where(converged, stall.transverse_rate, jnp.nan),
            "mu1": gf.condensation_rate(chain.pi),
            "t_condensation": reached(stages.condensation.time),
            "sigma_ratio": sv[:, 1] / sv[:, 0],
            "status": sol.status,
        }

    return member


def _save_times(config: DeltaConfig) -> np.ndarray:
    """``0`` then ``num_saves - 1`` log-spaced times from 0.05 to ``t1``."""
    return np.concatenate([[0.0], np.geomspace(0.05, config.t1, config.num_saves - 1)])


def _spacing(ts, times) -> np.ndarray:
    """The save spacing around each crossing time (a crossing lies between two saves)."""
    i = np.clip(np.searchsorted(ts, np.nan_to_num(times, nan=0.0, posinf=ts[-1])), 1, len(ts) - 1)
    return np.where(np.isfinite(times), ts[i] - ts[i - 1], np.nan)


def _escape_fits(run: Run, ts, delta, eps, lam_t, escape, ok, t_cond, t_dil, mu1) -> None:
    """Lemma 3.1's escape times: from the stall (``(log(1/eps) + K(delta)) / lambda_T``) and
    from the origin (``(log(1/eps) + K) / mu1``), each a pooled fit with one offset per delta,
    and the escape time's exponent in delta against -1 (lambda_T linear in delta)."""
    pos = ok & (delta > 0) & np.isfinite(escape)
    cond = ok & np.isfinite(t_cond)
    r_stall = lam_t * (_spacing(ts, t_dil) + _spacing(ts, t_dil + escape))
    r_cond = mu1 * _spacing(ts, t_cond)
    for name, claim, sel, scaled, res, note in (
        (
            "escape_time_log_eps",
            gf.claims.escape_time_log_eps,
            pos,
            escape * lam_t,
            r_stall,
            f"{int(pos.sum())} members with delta > 0 that escaped, one offset per delta",
        ),
        (
            "condensation_escape_time",
            gf.claims.condensation_escape_time,
            cond,
            t_cond * mu1,
            r_cond,
            f"{int(cond.sum())} members, one offset per delta",
        ),
    ):
        run.evidence(
            name,
            claim(
                np.log(1 / eps[sel]), scaled[sel], delta[sel], eps=eps[sel], resolution=res[sel]
            ),
            note=note,
        )
    # K(delta) = lambda_T (t_new - t_dil) - log(1/eps): reported per delta, without a law
    k_of = {
        f"{v:g}": np.round(escape[pos & (delta == v)] * lam_t[pos & (delta == v)]
                           - np.log(1 / eps[pos & (delta == v)]), 4).tolist()
        for v in np.unique(delta[pos])
    }
    run.scalar("escape_offset_K", k_of)
    fits = {}
    for e in np.unique(eps[pos]):
        sel = pos & (eps == e)
        if sel.sum() >= 3:
            fits[f"{e:g}"] = {
                "vs_lambda_T": fit_power_law(lam_t[sel], escape[sel]).as_dict(),
                "lambda_T_vs_delta": fit_power_law(delta[sel], lam_t[sel]).as_dict(),
            }
    run.scalar("escape_fits", fits)
    # the prediction -1 in delta needs lambda_T linear in delta over the swept range
    x = np.unique(delta[pos])
    lam_of = np.array([np.mean(lam_t[pos & (delta == v)]) for v in x])
    if x.size >= 2:
        run.report(
            "lambda_T_local_exponents",
            measured=np.diff(np.log(lam_of)) / np.diff(np.log(x)),
            claim="lambda_T = a delta + O(delta^3): local exponents near 1 in the linear regime",
            note=f"at deltas {x.tolist()}",
        )
    run.evidence(
        "escape_time_exponent",
        gf.claims.escape_time_exponent(delta[pos], eps[pos], escape[pos], lam_t[pos]),
        note="only the deltas where lambda_T, measured at the stall, is linear in delta",
    )


@negative_control("focus-dilution-delta", "escape_time_log_eps")
def _escape_that_ignores_the_initial_scale():
    x = np.log(1 / np.array([1e-2, 1e-3, 1e-4] * 3))
    groups = np.repeat([0.01, 0.02, 0.03], 3)
    y = 5.0 + 0.01 * np.sin(7 * x) + groups  # flat in log(1/eps)
    return gf.claims.escape_time_log_eps(x, y, groups, eps=np.exp(-x), resolution=np.full(9, 0.01))


@negative_control("focus-dilution-delta", "condensation_escape_time")
def _condensation_twice_as_slow():
    x = np.log(1 / np.array([1e-2, 1e-3, 1e-4] * 3))
    groups = np.repeat([0.01, 0.02, 0.03], 3)
    y = 2.0 * x + 1.0 + 0.01 * np.cos(5 * x)  # slope 2: escape at half the predicted rate
    return gf.claims.condensation_escape_time(
        x, y, groups, eps=np.exp(-x), resolution=np.full(9, 0.01)
    )


@negative_control("focus-dilution-delta", "escape_time_exponent")
def _escape_independent_of_delta():
    deltas = np.repeat([0.005, 0.01, 0.02, 0.04], 3)
    eps = np.tile([1e-2, 1e-3, 1e-4], 4)
    t = 300.0 * np.log(1 / eps) * (1 + 0.01 * np.sin(40 * deltas))
    return gf.claims.escape_time_exponent(deltas, eps, t, 0.094 * deltas)


@negative_control("focus-dilution-delta", "stall_at_delta_0")
def _stall_of_an_asymmetric_chain():
    return gf.claims.degenerate_stall(np.array([0.004, -0.004]), 0.5)


@register_experiment(
    "focus-dilution-delta",
    DeltaConfig,
    "symmetry breaking: escape from the rank-one stall vs delta (including 0) and eps",
    title="Escape from the rank-one stall against delta and eps",
    docs="focus_dilution.md#delta-and-eps",
)
def run_delta(config: DeltaConfig, run: Run) -> None:
    """The escape from the rank-one stall over a (delta, eps) grid, with its power-law fits."""
    grid = Grid.product(
        {"delta": list(config.deltas), "eps": list(config.eps_values)}, seeds=[config.seed]
    )
    result = run.sweep("delta", _member(config), grid)
    run.consistency(
        "delta_sweep_compiles_once",
        expected=1,
        measured=int(result.n_compilations),
        note="every member has the same shapes: one compilation",
    )
    ok = result.ok()
    out = {k: np.asarray(v) for k, v in result.outputs.items()}
    delta, eps = np.asarray(result.params["delta"]), np.asarray(result.params["eps"])
    escape = out["t_new_direction"] - out["t_dilution"]
    run.save_arrays(escape_time=escape, delta=delta, eps=eps)
    zero = ok & (delta == 0)
    scale = float(np.nanmax(np.abs(out["mu1"]))) if out["mu1"].size else 1.0
    run.evidence(
        "stall_at_delta_0",
        gf.claims.degenerate_stall(out["lambda_T"][zero], scale, rtol=EIGEN_RTOL),
        note="delta = 0: new direction at "
        f"{out['t_new_direction'][zero].tolist()}, sigma2/sigma1 at t1 = "
        f"{np.round(out['sigma_ratio'][zero, -1], 5).tolist()}",
    )
    censored = ok & (delta > 0) & ~np.isfinite(escape)
    if censored.any():
        run.log(f"{int(censored.sum())} positive-delta members did not escape by t1 (censored)")
    _escape_fits(
        run,
        _save_times(config),
        delta,
        eps,
        out["lambda_T"],
        escape,
        ok,
        out["t_condensation"],
        out["t_dilution"],
        out["mu1"],
    )
    fig, axes = new_figure(1, 2)
    ax = axes[0, 0]
    for e in config.eps_values:
        sel = ok & (eps == e) & (delta > 0) & np.isfinite(escape)
        ax.loglog(delta[sel], escape[sel], "o-", label=f"eps={e:g}")
        ax.loglog(delta[sel], np.log(1 / e) / out["lambda_T"][sel], "k:", lw=0.8)
    ax.set_xlabel("delta")
    ax.set_ylabel("t_new - t_dil (dotted: log(1/eps) / lambda_T)")
    ax.legend(fontsize=7)
    note_excluded(ax, int(np.sum(~ok)), len(ok))
    ax = axes[0, 1]
    ts = _save_times(config)
    for i in np.nonzero(ok & (eps == min(config.eps_values)))[0]:
        ax.loglog(ts[1:], out["sigma_ratio"][i, 1:], label=f"delta={delta[i]:g}")
    ax.axhline(config.new_direction_ratio, color="0.4", ls=":")
    ax.set_title(f"sigma2(W0) / sigma1(W0), eps={min(config.eps_values):g}", fontsize=10)
    ax.legend(fontsize=6)
    run.save_figure(fig, "delta_escape")
