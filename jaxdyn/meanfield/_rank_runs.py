"""The paper's rank-histogram figures certified (transformer_pde.md, rank histograms;
docs/transformer_pde_ranks.md): the published attempts, their accurate re-solves as sweep
members, the third method on every disagreement, and the per-panel counts.

1. The published attempts are made as published (NumPy projected Euler, the published draws,
   steps, tolerances and stopping rule; stepped as stacks, attempt by attempt the published
   loop's): they decide which ``Sigma_0`` each run index uses.
2. Every attempt it made is solved again accurately (:func:`rank_member`, all panels in one
   sweep, padded to ``D = max(dims)``).
3. Where the two disagree (a converged run's rank, or an attempt the published loop set aside
   that converges when solved accurately), a third method decides: SciPy's DOP853 on the
   published right-hand side at a tight tolerance, sharing nothing with the accurate solve
   but the stopping rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status, status_code

from ._closed_forms import limiting_rank, softmax_identity_covariance
from ._paper_inputs import (
    PUBLISHED_DIMS,
    RANK_ATTENTIONS,
    PaperRankInputs,
    RankPanelSettings,
    paper_rank_inputs,
    published_rank_settings,
    rank_panels,
)
from ._published_euler import published_rank_attempts, rank_histogram, stacked_rank_attempts
from ._ranks import pad_rank_member
from ._third_method import dop853_rank_outcome

CONVERGED = status_code(Status.steady_state)


def _quiet(msg: str) -> None:
    pass


def panel_inputs(
    dims: Sequence[int] = PUBLISHED_DIMS,
    runs: int = 100,
    construction: str = "published",
    sigma0_norm: str = "none",
) -> list[tuple[PaperRankInputs, RankPanelSettings]]:
    """The draws and the published integrator settings of every panel, in
    :func:`rank_panels` order."""
    return [
        (
            paper_rank_inputs(
                attention, value, d, runs=runs, construction=construction, sigma0_norm=sigma0_norm
            ),
            published_rank_settings(attention, value, d),
        )
        for attention, value, d in rank_panels(dims)
    ]


def published_attempts(
    dims: Sequence[int] = PUBLISHED_DIMS, runs: int = 100, log: Callable = _quiet, **draws
):
    """The published attempt loop of every panel: ``(panel inputs, settings, attempts)``, each
    attempt timed (the benchmarks' baseline)."""
    out = []
    for (attention, value, d), (inputs, settings) in zip(
        rank_panels(dims), panel_inputs(dims, runs, **draws), strict=True
    ):
        t0 = time.perf_counter()
        attempts = published_rank_attempts(inputs, settings, attention, runs=runs)
        log(
            f"published Euler {attention}/{value}/d={d}: {len(attempts.run)} attempts, "
            f"{int(attempts.converged.sum())} converged, {time.perf_counter() - t0:.1f} s"
        )
        out.append((inputs, settings, attempts))
    return out


def stacked_published_attempts(
    dims: Sequence[int] = PUBLISHED_DIMS, runs: int = 100, log: Callable = _quiet, **draws
):
    """:func:`published_attempts` with the same attempts and bits, the panels of one attention
    and dimension stepped together as stacks (:func:`stacked_rank_attempts`; untimed)."""
    keys, inputs = rank_panels(dims), panel_inputs(dims, runs, **draws)
    attempts = {}
    for attention, d in dict.fromkeys((a, d) for a, _, d in keys):
        t0 = time.perf_counter()
        members = [p for p, (a, _, dim) in enumerate(keys) if (a, dim) == (attention, d)]
        group = stacked_rank_attempts([inputs[p] for p in members], attention, runs=runs, log=log)
        attempts.update(zip(members, group, strict=True))
        log(
            f"published Euler {attention}/d={d}, stacked: "
            + ", ".join(
                f"{keys[p][1]} {len(att.run)} attempts, {int(att.converged.sum())} converged"
                for p, att in zip(members, group, strict=True)
            )
            + f", {time.perf_counter() - t0:.1f} s"
        )
    return [(*inputs[p], attempts[p]) for p in range(len(keys))]


def rank_members(dims: Sequence[int], panels) -> dict[str, np.ndarray]:
    """One sweep member (:func:`rank_member`'s params, plus ``panel``) per attempt of every
    panel, padded to ``D = max(dims)``."""
    D = max(dims)
    rows: dict[str, list] = {
        k: [] for k in ("Q", "K", "V", "Sigma0", "attention", "tol_low", "tol_high", "t1", "panel")
    }
    for p, ((attention, _, _), (inputs, settings, attempts)) in enumerate(
        zip(rank_panels(dims), panels, strict=True)
    ):
        for r, a in zip(attempts.run, attempts.attempt, strict=True):
            padded = pad_rank_member(inputs.Q[r], inputs.K[r], inputs.V[r], inputs.Sigma0[a], D)
            for key, value in zip(("Q", "K", "V", "Sigma0"), padded, strict=True):
                rows[key].append(value)
            rows["attention"].append(RANK_ATTENTIONS.index(attention))
            rows["tol_low"].append(settings.tol_low)
            rows["tol_high"].append(settings.tol_high)
            rows["t1"].append(settings.max_steps * settings.dt)
            rows["panel"].append(p)
    return {
        k: np.stack(v) if k in ("Q", "K", "V", "Sigma0") else np.array(v) for k, v in rows.items()
    }


def third_method(
    dims: Sequence[int],
    panels,
    chosen,
    *,
    rtol: float = 1e-11,
    atol: float = 1e-13,
    threshold: float = 0.1,
    log: Callable = _quiet,
):
    """``(status, rank)`` arrays of :func:`dop853_rank_outcome` for the attempts ``chosen``
    (indices into the attempts of every panel, in order), from the unpadded draws."""
    where = [
        (p, int(r), int(a))
        for p, (_, _, attempts) in enumerate(panels)
        for r, a in zip(attempts.run, attempts.attempt, strict=True)
    ]
    keys = rank_panels(dims)
    t0 = last = time.perf_counter()
    outcomes = []
    for i, m in enumerate(chosen):
        if time.perf_counter() - last > 10.0:  # a line of progress every 10 s
            last = time.perf_counter()
            log(f"third method (DOP853): {i}/{len(chosen)} disagreements, {last - t0:.0f} s")
        p, r, a = where[m]
        inputs, settings, _ = panels[p]
        outcomes.append(
            dop853_rank_outcome(
                keys[p][0],
                inputs.Q[r],
                inputs.K[r],
                inputs.V[r],
                inputs.Sigma0[a],
                tol_low=settings.tol_low,
                tol_high=settings.tol_high,
                t1=settings.max_steps * settings.dt,
                rtol=rtol,
                atol=atol,
                threshold=threshold,
            )  # fmt: skip
        )
    log(f"third method (DOP853): {len(chosen)} disagreements, {time.perf_counter() - t0:.1f} s")
    outcomes = np.array(outcomes, np.int32).reshape(-1, 2)
    return outcomes[:, 0], outcomes[:, 1]


def disagreements(acc_status, acc_rank, euler_status, euler_rank) -> np.ndarray:
    """Attempts where the published Euler and the accurate solve differ: a converged run whose
    rank (or convergence) differs, or a set-aside attempt that converges when solved
    accurately."""
    converged = np.asarray(acc_status) == CONVERGED
    published = np.asarray(euler_status) == CONVERGED
    return np.where(published, ~converged | (acc_rank != euler_rank), converged)


def rank_summary(
    dims, panel, acc_status, acc_rank, euler_status, euler_rank, projected, disagree, confirmed
) -> dict[str, dict[str, int | list[int]]]:
    """Per panel (``"attention/value/d=d"``): the two histograms on the published runs and the
    disagreements.

    ``rank_disagreements``: published runs (converged in the published loop) whose accurate rank
    differs or that do not converge accurately; ``set_aside_converging``: attempts the published
    loop set aside (diverged or unfinished) that converge when solved accurately;
    ``confirmed``: disagreements where the third method gives the accurate solve's outcome and
    rank (``confirmed``, a mask over attempts); ``projected_disagreeing`` /
    ``projected_agreeing``: published runs whose Euler steps produced a negative eigenvalue
    (replaced by 1e-14), among the runs that disagree / agree.
    """
    panels = {}
    for p, (attention, value, d) in enumerate(rank_panels(dims)):
        mine = panel == p
        published = mine & (euler_status == CONVERGED)
        both = published & (acc_status == CONVERGED)
        panels[f"{attention}/{value}/d={d}"] = {
            "runs": int(published.sum()),
            "euler_histogram": rank_histogram(euler_rank[published], d).tolist(),
            "accurate_histogram": rank_histogram(acc_rank[both], d).tolist(),
            "rank_disagreements": int((published & disagree).sum()),
            "not_converged_accurately": int((published & ~both).sum()),
            "set_aside": int((mine & ~published).sum()),
            "set_aside_converging": int((mine & ~published & disagree).sum()),
            "confirmed": int((mine & disagree & confirmed).sum()),
            "projected_disagreeing": int((published & disagree & (projected > 0)).sum()),
            "projected_agreeing": int((published & ~disagree & (projected > 0)).sum()),
            "euler_above_half_d": int(np.sum(euler_rank[published] > (d + 1) // 2)),
            "accurate_above_half_d": int(np.sum(acc_rank[both] > (d + 1) // 2)),
        }
    return panels


@jax.vmap
def _exact_stop(cov0, A, t, cov, threshold):
    exact_cov = softmax_identity_covariance(cov0, A, t)
    S = A + A.T
    rate = jnp.linalg.norm(exact_cov @ S @ exact_cov)
    # dF = dSigma S Sigma + Sigma S dSigma, so |dF|_F <= 2 |S|_2 |Sigma|_2 |dSigma|_F.
    error = jnp.linalg.norm(cov - exact_cov)
    bound = 2 * jnp.linalg.norm(S, 2) * jnp.linalg.norm(exact_cov, 2) * error
    return limiting_rank(exact_cov, threshold), rate, bound, error / jnp.linalg.norm(exact_cov)


def exact_stops(Q, K, cov0, t_stop, final_cov, threshold: float = 0.1) -> dict[str, np.ndarray]:
    """Softmax ``V = I`` runs (padded members) at their accurate stop against the exact
    ``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}``: its ``rank``, its ``rate``
    ``|F(Sigma(t))|_F``, the first-order ``bound`` on that rate's error from the solver's state
    error, and the solver's ``relative_error``."""
    A = np.einsum("mki,mkj->mij", K, Q) / np.sqrt(Q.shape[-1])
    t = np.broadcast_to(threshold, np.shape(t_stop))
    out = map(np.asarray, _exact_stop(cov0, A, t_stop, final_cov, t))
    return dict(zip(("rank", "rate", "bound", "relative_error"), out, strict=True))
