"""Escape from the rank-one stall against the asymmetry ``delta`` of the low-frequency tokens and
the initialisation scale ``eps`` (focus_dilution.md, stage 4).

The linearisation at the stall predicts ``t_new - t_dil = (log(1/eps) + K(delta)) /
lambda_T(delta)``: slope ``1 / lambda_T`` against ``log(1/eps)``, and a power law in ``delta``
with minus the exponent of ``lambda_T(delta)`` (``-1`` where ``lambda_T`` is linear in
``delta``). :func:`escape_member` is one ``(delta, eps)`` flow for a sweep; :func:`escape_checks`
records the claims on a sweep's outputs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._numerics import fit_power_law
from .._status import Status
from . import claims
from ._checks import EIGEN_RTOL
from ._flow import population_flow
from ._linearise import condensation_rate
from ._lyapunov import rank_one_critical_point
from ._markov import MarkovChain, symmetry_breaking_pi
from ._metrics import trajectory_metrics
from ._model import init_transformer
from ._stages import detect_stages


def save_times(t1: float, num_saves: int) -> np.ndarray:
    """``0`` then ``num_saves - 1`` log-spaced times from 0.05 to ``t1``."""
    return np.concatenate([[0.0], np.geomspace(0.05, t1, num_saves - 1)])


def escape_member(
    pi_top, lam, direction, ts, *, m, m_attn, new_direction_ratio, rtol, atol, max_steps
):
    """``member(params, key)`` for a sweep over ``params = {"delta", "eps"}``: the population
    flow of ``pi = symmetry_breaking_pi(pi_top, delta, direction)`` in the paper's family, its
    stage times (a stage not reached is ``inf``), ``sigma2/sigma1(W0)`` and the rank-one stall's
    ``lambda_T`` (``nan`` unless its root-finder converged); only the parts of
    :func:`analyse_flow` the escape times need, solved with ``rtol``, ``atol``, ``max_steps``."""
    direction = jnp.asarray(direction)

    def member(params, key):
        chain = MarkovChain.paper(symmetry_breaking_pi(pi_top, params["delta"], direction), lam)
        k_flow, k_stall = jax.random.split(key)
        d, eps = chain.pi.shape[0], params["eps"]
        model0 = init_transformer(k_flow, d, m, m_attn, eps)
        sol = population_flow(model0, chain, ts, rtol=rtol, atol=atol, max_steps=max_steps)
        metrics = trajectory_metrics(sol.models, chain)
        stages = detect_stages(ts, metrics, chain.pi, new_direction_ratio=new_direction_ratio)
        # the stall: the rank-one flow stops when steady (ts[-1] only bounds it), then root-found
        model1 = init_transformer(k_stall, d, 1, 1, eps)
        stall = rank_one_critical_point(model1, chain, float(ts[-1]), max_steps=max_steps)
        converged = stall.point.status == Status.successful
        sv = metrics["sv_W0"]
        out = {
            f"t_{k}": jnp.where(jnp.isnan(t), jnp.inf, t)  # NaN would mark the member failed
            for k, t in (
                ("dilution", stages.dilution.time),
                ("new_direction", stages.new_direction.time),
                ("condensation", stages.condensation.time),
            )
        }
        return out | {
            "lambda_T": jnp.where(converged, stall.transverse_rate, jnp.nan),
            "mu1": condensation_rate(chain.pi),
            "sigma_ratio": sv[:, 1] / sv[:, 0],
            "status": sol.status,
        }

    return member


def _spacing(ts, times) -> np.ndarray:
    """The save spacing around each crossing time (a crossing lies between two saves)."""
    i = np.clip(np.searchsorted(ts, np.nan_to_num(times, nan=0.0, posinf=ts[-1])), 1, len(ts) - 1)
    return np.where(np.isfinite(times), ts[i] - ts[i - 1], np.nan)


def escape_checks(run, ts, delta, eps, out: dict, ok) -> None:
    """Records on ``run`` the claims on a ``(delta, eps)`` sweep's outputs (``out``: the members'
    :func:`escape_member` outputs, ``ok`` their success): the degenerate stall at ``delta = 0``;
    Lemma 3.1's escape times from the stall (``(log(1/eps) + K(delta)) / lambda_T``) and from the
    origin (``(log(1/eps) + K) / mu1``), each a pooled fit with one offset per delta and the save
    spacing as resolution; ``K(delta)`` per delta, without a law; the escape time's exponent in
    delta against -1; and the power-law fits and ``lambda_T``'s local exponents, reported."""
    lam_t, mu1, t_dil = out["lambda_T"], out["mu1"], out["t_dilution"]
    escape = out["t_new_direction"] - t_dil
    zero = ok & (delta == 0)
    scale = float(np.nanmax(np.abs(mu1))) if mu1.size else 1.0
    run.evidence(
        "stall_at_delta_0",
        claims.degenerate_stall(lam_t[zero], scale, rtol=EIGEN_RTOL),
        note=f"delta = 0: new direction at {out['t_new_direction'][zero].tolist()}, sigma2/sigma1"
        f" at t1 = {np.round(out['sigma_ratio'][zero, -1], 5).tolist()}",
    )
    pos = ok & (delta > 0) & np.isfinite(escape)
    if (censored := int(np.sum(ok & (delta > 0) & ~np.isfinite(escape)))) > 0:
        run.log(f"{censored} positive-delta members did not escape by t1 (censored)")
    cond = ok & np.isfinite(out["t_condensation"])
    for name, claim, sel, scaled, res in (
        (
            "escape_time_log_eps",
            claims.escape_time_log_eps,
            pos,
            escape * lam_t,
            lam_t * (_spacing(ts, t_dil) + _spacing(ts, t_dil + escape)),
        ),
        (
            "condensation_escape_time",
            claims.condensation_escape_time,
            cond,
            out["t_condensation"] * mu1,
            mu1 * _spacing(ts, out["t_condensation"]),
        ),
    ):
        x = np.log(1 / eps[sel])
        run.evidence(
            name,
            claim(x, scaled[sel], delta[sel], eps=eps[sel], resolution=res[sel]),
            note=f"{int(sel.sum())} members, one offset per delta",
        )
    offsets = escape * lam_t - np.log(1 / eps)  # K(delta)
    values = np.unique(delta[pos])
    run.scalar(
        "escape_offset_K",
        {f"{v:g}": np.round(offsets[pos & (delta == v)], 4).tolist() for v in values},
    )
    run.scalar(
        "escape_fits",
        {
            f"{e:g}": {
                "vs_lambda_T": fit_power_law(lam_t[s], escape[s]).as_dict(),
                "lambda_T_vs_delta": fit_power_law(delta[s], lam_t[s]).as_dict(),
            }
            for e in np.unique(eps[pos])
            if (s := pos & (eps == e)).sum() >= 3
        },
    )
    lam_of = np.array([np.mean(lam_t[pos & (delta == v)]) for v in values])
    if values.size >= 2:  # the prediction -1 needs lambda_T linear in delta
        run.report(
            "lambda_T_local_exponents",
            measured=np.diff(np.log(lam_of)) / np.diff(np.log(values)),
            claim="lambda_T = a delta + O(delta^3): local exponents near 1 in the linear regime",
            note=f"at deltas {values.tolist()}",
        )
    run.evidence(
        "escape_time_exponent",
        claims.escape_time_exponent(delta[pos], eps[pos], escape[pos], lam_t[pos]),
        note="only the deltas where lambda_T, measured at the stall, is linear in delta",
    )
