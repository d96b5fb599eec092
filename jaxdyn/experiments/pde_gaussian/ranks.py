"""``pde-ranks``: the paper's rank histograms (softmax and L2; rows ``V = I`` and ``V = G^T G``;
columns ``d = 3, 4, 5``), certified (transformer_pde.md, rank histograms;
docs/transformer_pde_ranks.md).

1. The published attempts are made as published (NumPy projected Euler, the published draws,
   steps, tolerances and stopping rule; stepped as stacks, attempt by attempt the published
   loop's): they decide which ``Sigma_0`` each run index uses.
2. Every attempt it made is solved again accurately (adaptive Tsit5, the same stopping rule
   located on the interpolant), all panels in one sweep.
3. Where the two disagree (a converged run's rank, or an attempt the published loop set aside
   that converges when solved accurately), a third method decides: SciPy's DOP853 on the
   published right-hand side at a tight tolerance, sharing nothing with the accurate solve
   but the stopping rule.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from jaxdyn._status import Status, status_code
from jaxdyn._validation import require_positive
from jaxdyn.meanfield._paper_inputs import (
    PUBLISHED_DIMS,
    RANK_ATTENTIONS,
    RANK_CONSTRUCTIONS,
    RANK_SIGMA0_NORMS,
    PaperRankInputs,
    RankPanelSettings,
    paper_rank_inputs,
    published_rank_settings,
    rank_panels,
)
from jaxdyn.meanfield._published_euler import published_rank_attempts, stacked_rank_attempts
from jaxdyn.meanfield._third_method import dop853_rank_outcome
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._rank_member import pad_rank_member, rank_member
from ._ranks_report import rank_checks, rank_figures, rank_summary

# Segmented sweeps in groups of one width, 8 (two float64 SIMD registers on CPUs): one
# compiled segment program (each width is one more, seconds of compilation) and groups narrow
# enough that members of very different length waste few lanes.
ONE_GROUP_WIDTH = {"vmap_width": 8, "segment_widths": 1}

# Outcomes of a rank run: converged, diverged, or neither by the horizon (status successful).
RANK_ACCEPT = [Status.steady_state, Status.blowup]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RanksConfig(ExperimentConfig):
    """The rank-histogram figures.

    Attributes:
        dims: columns of the figures (a subset of 3, 4, 5).
        runs: converged runs per panel (the paper: 100).
        construction: ``"published"`` draws, or ``"per_run"`` / ``"shared"``
            (:func:`jaxdyn.meanfield.paper_rank_inputs`).
        sigma0_norm: ``"none"`` (``S S^T``, published) or ``"dim"`` (``S S^T / d``).
        rtol: relative tolerance of the accurate solve.
        atol: absolute tolerance of the accurate solve.
        confirm_rtol: relative tolerance of the third method (SciPy's DOP853).
        confirm_atol: absolute tolerance of the third method.
        max_steps: solver steps per run.
        threshold: the rank counts eigenvalues above it (published: 0.1).
    """

    dims: tuple[int, ...] = PUBLISHED_DIMS
    runs: int = 100
    construction: str = "published"
    sigma0_norm: str = "none"
    rtol: float = 1e-8
    atol: float = 1e-10
    confirm_rtol: float = 1e-11
    confirm_atol: float = 1e-13
    max_steps: int = 100_000
    threshold: float = 0.1

    def validate(self) -> None:
        if (
            not self.dims
            or not set(self.dims) <= set(PUBLISHED_DIMS)
            or len(set(self.dims)) != len(self.dims)
        ):
            raise ConfigError(f"dims must be distinct values of {PUBLISHED_DIMS}, got {self.dims}")
        if not 1 <= self.runs <= 100:
            raise ConfigError(f"runs must be in 1..100, got {self.runs}")
        if self.construction not in RANK_CONSTRUCTIONS:
            raise ConfigError(f"construction must be one of {RANK_CONSTRUCTIONS}")
        if self.sigma0_norm not in RANK_SIGMA0_NORMS:
            raise ConfigError(f"sigma0_norm must be one of {RANK_SIGMA0_NORMS}")
        for name in ("rtol", "atol", "confirm_rtol", "confirm_atol", "threshold"):
            require_positive(name, getattr(self, name))
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")

    @classmethod
    def quick(cls) -> dict:
        return {"runs": 6}


def panel_inputs(config: RanksConfig) -> list[tuple[PaperRankInputs, RankPanelSettings]]:
    """The draws and the published integrator settings of every panel, in
    :func:`jaxdyn.experiments.pde_gaussian.rank_panels` order."""
    return [
        (
            paper_rank_inputs(
                attention,
                value,
                d,
                runs=config.runs,
                construction=config.construction,
                sigma0_norm=config.sigma0_norm,
            ),
            published_rank_settings(attention, value, d),
        )
        for attention, value, d in rank_panels(config.dims)
    ]


def published_attempts(config: RanksConfig, log=lambda msg: None):
    """The published attempt loop of every panel: ``(panel inputs, settings, attempts)``, each
    attempt timed (the benchmarks' baseline)."""
    out = []
    for (attention, value, d), (inputs, settings) in zip(
        rank_panels(config.dims), panel_inputs(config), strict=True
    ):
        t0 = time.perf_counter()
        attempts = published_rank_attempts(inputs, settings, attention, runs=config.runs)
        log(
            f"published Euler {attention}/{value}/d={d}: {len(attempts.run)} attempts, "
            f"{int(attempts.converged.sum())} converged, {time.perf_counter() - t0:.1f} s"
        )
        out.append((inputs, settings, attempts))
    return out


def stacked_published_attempts(config: RanksConfig, log=lambda msg: None):
    """:func:`published_attempts` with the same attempts and bits, the panels of one attention
    and dimension stepped together as stacks (:func:`stacked_rank_attempts`; untimed)."""
    keys, inputs = rank_panels(config.dims), panel_inputs(config)
    attempts = {}
    for attention, d in dict.fromkeys((a, d) for a, _, d in keys):
        t0 = time.perf_counter()
        members = [p for p, (a, _, dim) in enumerate(keys) if (a, dim) == (attention, d)]
        group = stacked_rank_attempts(
            [inputs[p] for p in members], attention, runs=config.runs, log=log
        )
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


def rank_members(config: RanksConfig, panels) -> dict[str, np.ndarray]:
    """One sweep member per attempt of every panel, padded to ``D = max(dims)``."""
    D = max(config.dims)
    rows: dict[str, list] = {
        k: [] for k in ("Q", "K", "V", "Sigma0", "attention", "tol_low", "tol_high", "t1", "panel")
    }
    for p, ((attention, _, _), (inputs, settings, attempts)) in enumerate(
        zip(rank_panels(config.dims), panels, strict=True)
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


@register_experiment(
    "pde-ranks",
    RanksConfig,
    "the paper's rank histograms: published draws, published Euler vs accurate solve, certified",
    title="the paper's rank histograms",
    docs="transformer_pde.md#gaussian-closure-the-papers-rank-histograms-and-the-gaussian-experiments",
    sweep=ONE_GROUP_WIDTH,
)
def run_pde_ranks(config: RanksConfig, run: Run) -> None:
    t0 = time.perf_counter()
    panels = stacked_published_attempts(config, run.log)
    run.scalar("published_euler_wall_s", time.perf_counter() - t0)
    params = rank_members(config, panels)
    run.log(f"{len(params['panel'])} attempts of {len(panels)} panels, solved accurately")
    member = rank_member(
        rtol=config.rtol, atol=config.atol, max_steps=config.max_steps, threshold=config.threshold
    )
    accurate = run.sweep("ranks", member, Grid.zip(params), accept=RANK_ACCEPT)
    run.scalar("sweep_wall_s", accurate.wall_time_s)
    euler_status = np.concatenate([att.status for _, _, att in panels])
    euler_rank = np.concatenate([att.rank for _, _, att in panels])
    disagree = _disagreements(accurate, euler_status, euler_rank)
    # The third method on every disagreement.
    chosen = np.flatnonzero(disagree)
    confirm = third_method(config, panels, chosen, run.log)
    run.save_arrays(
        ranks_panel=params["panel"],
        ranks_run=np.concatenate([att.run for _, _, att in panels]),
        ranks_attempt=np.concatenate([att.attempt for _, _, att in panels]),
        ranks_euler_status=euler_status,
        ranks_euler_rank=euler_rank,
        ranks_euler_steps=np.concatenate([att.steps for _, _, att in panels]),
        ranks_euler_projected=np.concatenate([att.projected for _, _, att in panels]),
        ranks_disagree=disagree,
        ranks_confirm_index=chosen,
        ranks_confirm_status=confirm[0],
        ranks_confirm_rank=confirm[1],
    )
    projected = np.concatenate([att.projected for _, _, att in panels])
    summary = rank_summary(
        config, params, accurate, euler_status, euler_rank, projected, disagree, chosen, confirm
    )
    rank_figures(config, run, summary)
    rank_checks(config, run, params, accurate, summary)


def third_method(config: RanksConfig, panels, chosen, log=lambda msg: None):
    """``(status, rank)`` arrays of :func:`dop853_rank_outcome` for the attempts ``chosen``
    (indices into the attempts of every panel, in order), from the unpadded draws."""
    where = [
        (p, int(r), int(a))
        for p, (_, _, attempts) in enumerate(panels)
        for r, a in zip(attempts.run, attempts.attempt, strict=True)
    ]
    keys = rank_panels(config.dims)
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
                rtol=config.confirm_rtol,
                atol=config.confirm_atol,
                threshold=config.threshold,
            )
        )
    log(f"third method (DOP853): {len(chosen)} disagreements, {time.perf_counter() - t0:.1f} s")
    outcomes = np.array(outcomes, np.int32).reshape(-1, 2)
    return outcomes[:, 0], outcomes[:, 1]


def _disagreements(accurate, euler_status, euler_rank) -> np.ndarray:
    """Attempts where the published Euler and the accurate solve differ: a converged run whose
    rank (or convergence) differs, or a set-aside attempt that converges when solved
    accurately."""
    converged = accurate.has_status(Status.steady_state)
    published = euler_status == status_code(Status.steady_state)
    rank = accurate.outputs["rank"]
    return np.where(published, ~converged | (rank != euler_rank), converged)
