"""Gaussian experiments of the mean-field Transformer PDE (transformer_pde.md, "Closed forms"
and "The paper's numerical experiments"): ``pde-cone``, ``pde-ranks``, ``pde-blowup``.

Each experiment is one ``Run.sweep`` over all its members. Members of different
attention variants share one compiled program through :class:`_Switch`, which evaluates every
variant's affine velocity and selects one by a traced index (the ODEs are at most
5 x 5, so computing a few right-hand sides per step is cheaper than separate compilations).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status
from jaxdyn.meanfield import (
    L2,
    AbstractGaussianClosed,
    GaussianEvent,
    MultiHead,
    Sinkhorn,
    Softmax,
    blowup_time,
    limiting_rank,
    low_rank_limit,
    paper_limiting_ranks,
    paper_rank_inputs,
    simulate_gaussian,
    softmax_identity_covariance,
)
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid


class _Switch(AbstractGaussianClosed):
    """Gaussian-closed field ``variants[index]`` with a traced ``index`` (one program)."""

    variants: tuple[AbstractGaussianClosed, ...]
    index: jax.Array

    def velocity(self, x, tokens, *, t=0.0):
        outs = jnp.stack([v.velocity(x, tokens, t=t) for v in self.variants])
        return outs[self.index]

    def affine_velocity(self, mean, cov, *, t=0.0):
        affine = [v.affine_velocity(mean, cov, t=t) for v in self.variants]
        B = jnp.stack([a[0] for a in affine])[self.index]
        c = jnp.stack([a[1] for a in affine])[self.index]
        return B, c


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be positive, got {value}")


# ---------------------------------------------------------------------------------------
# pde-ranks
# ---------------------------------------------------------------------------------------

RANK_VARIANTS = ("softmax", "l2")
RANK_VALUES = ("identity", "random")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RanksConfig(ExperimentConfig):
    """Rank histograms of the limiting covariance (transformer_pde.md, rank histograms).

    dims: token dimensions (padded to ``max(dims)`` so all histograms are one sweep).
    runs: runs per histogram (the paper: 100).
    tol_low: stop when ``|d Sigma/dt|_F < tol_low`` (the paper's converged criterion), shared
        by the adaptive solver and the projected-Euler reference.
    t1: time horizon; threshold: rank = eigenvalues above it (the paper: 0.1).
    weights: [open] ``"per_run"`` (a new Q and V = G^T G for every run, drawn in turn after
        the paper's seed) or ``"shared"`` (one Q and one V per histogram, only Sigma_0 varies).
    sigma0_norm: [open] ``"dim"`` (``Sigma_0 = G G^T / d``, so ``E Sigma_0 = I``) or
        ``"none"`` (``G G^T``, the page's literal text). The defaults (``per_run``, ``dim``)
        are the construction whose d = 3, softmax, V = I histogram matches the page's "about
        half rank 2, half rank 1, a few rank 0" (see ``jaxdyn.meanfield._paper``).
    compare_runs: runs per histogram also integrated by the paper's NumPy projected Euler
        (``euler_dt``) for the run-by-run comparison (slow: a Python loop).
    """

    dims: tuple[int, ...] = (3, 4, 5)
    runs: int = 100
    tol_low: float = 1e-3
    t1: float = 1e5
    threshold: float = 0.1
    weights: str = "per_run"
    sigma0_norm: str = "dim"
    rtol: float = 1e-5
    atol: float = 1e-8
    max_steps: int = 20000
    compare_runs: int = 2
    euler_dt: float = 1e-3
    euler_max_iter: int = 2_000_000

    def validate(self) -> None:
        if not self.dims or any(d < 2 or d > 8 for d in self.dims):
            raise ConfigError(f"dims must be in 2..8, got {self.dims}")
        if self.runs < 1:
            raise ConfigError(f"runs must be >= 1, got {self.runs}")
        if self.weights not in ("per_run", "shared"):
            raise ConfigError(f"weights must be 'per_run' or 'shared', got {self.weights!r}")
        if self.sigma0_norm not in ("dim", "none"):
            raise ConfigError(f"sigma0_norm must be 'dim' or 'none', got {self.sigma0_norm!r}")
        for name in ("tol_low", "t1", "threshold", "rtol", "atol", "euler_dt"):
            _positive(name, getattr(self, name))
        if not 0 <= self.compare_runs <= self.runs:
            raise ConfigError(f"compare_runs must be in 0..runs, got {self.compare_runs}")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")

    @classmethod
    def quick(cls) -> dict:
        return {"dims": (3,), "runs": 24, "compare_runs": 1, "euler_dt": 2e-3}


def _rank_inputs(config: RanksConfig, d: int, variant: str, value: str):
    return paper_rank_inputs(
        d,
        config.runs,
        attention=variant,
        value=value,
        weights=config.weights,
        sigma0_norm=config.sigma0_norm,
    )


def ranks_members(config: RanksConfig) -> tuple[dict[str, np.ndarray], list[tuple]]:
    """All members of the rank figure, padded to ``D = max(dims)``.

    A padded member keeps its ``d x d`` block exactly: ``Q`` is zero-padded and rescaled by
    ``sqrt(D / d)`` (so ``A = K^T Q / sqrt(D)`` equals the unpadded ``K^T Q / sqrt(d)``), ``K``
    is zero-padded (so ``K^T K`` is unchanged for L2), ``V`` and ``Sigma_0`` are zero-padded:
    the extra rows and columns of ``Sigma`` stay exactly zero and add no eigenvalue.
    """
    D = max(config.dims)
    params: dict[str, list] = {"Q": [], "K": [], "V": [], "Sigma0": [], "variant": []}
    labels = []
    for d in config.dims:
        for variant in RANK_VARIANTS:
            for value in RANK_VALUES:
                inp = _rank_inputs(config, d, variant, value)
                k = d // 2
                for r in range(config.runs):
                    Q = np.zeros((D // 2, D))
                    Q[:k, :d] = inp.Q[r]
                    K = np.zeros((D // 2, D))
                    K[:k, :d] = inp.K[r]
                    V = np.zeros((D, D))
                    V[:d, :d] = inp.V[r]
                    S = np.zeros((D, D))
                    S[:d, :d] = inp.Sigma0[r]
                    params["Q"].append(Q * np.sqrt(D / d))
                    params["K"].append(K)
                    params["V"].append(V)
                    params["Sigma0"].append(S)
                    params["variant"].append(RANK_VARIANTS.index(variant))
                    labels.append((d, variant, value, r))
    return {k: np.stack(v) for k, v in params.items()}, labels


def _rank_member(config: RanksConfig, D: int):
    def member(p, key):
        variants = tuple(cls(Q=p["Q"], K=p["K"], V=p["V"]) for cls in (Softmax, L2))
        sol = simulate_gaussian(
            _Switch(variants, p["variant"]),
            jnp.zeros(D, p["Sigma0"].dtype),
            p["Sigma0"],
            config.t1,
            rtol=config.rtol,
            atol=config.atol,
            max_steps=config.max_steps,
            steady_tol=config.tol_low,
            psd_tol=10 * config.rtol,
        )
        return {
            "cov": sol.final_cov,
            "rank": limiting_rank(sol.final_cov, config.threshold),
            "t_final": sol.t_final,
            "event": sol.event,
            "num_steps": sol.num_steps,
            "status": sol.status,
        }

    return member


@register_experiment(
    "pde-ranks",
    RanksConfig,
    "rank histograms of the limiting covariance, d in {3,4,5}, V = I and G^T G, softmax and L2",
)
def run_pde_ranks(config: RanksConfig, run: Run) -> None:
    from jaxdyn.plotting import new_figure, note_excluded

    params, labels = ranks_members(config)
    D = max(config.dims)
    grid = Grid.zip(params)
    run.log(f"{len(grid)} members (dims {config.dims} x 2 variants x 2 V x {config.runs} runs)")
    result = run.sweep("ranks", _rank_member(config, D), grid, accept=[Status.steady_state])
    run.scalar("sweep_wall_s", result.wall_time_s)
    ranks = result.outputs["rank"]
    converged = result.has_status(Status.steady_state)
    eig = np.linalg.eigvalsh(result.outputs["cov"])

    shape = (len(config.dims), len(RANK_VARIANTS), len(RANK_VALUES), config.runs)
    R = ranks.reshape(shape)
    ok = converged.reshape(shape)
    fig, axes = new_figure(
        len(RANK_VALUES) * len(RANK_VARIANTS), len(config.dims), width=2.8, height=2.2
    )
    hist = {}
    for i, d in enumerate(config.dims):
        cap = -(-d // 2)
        for j, variant in enumerate(RANK_VARIANTS):
            for k, value in enumerate(RANK_VALUES):
                ax = axes[2 * j + k, i]
                r = R[i, j, k][ok[i, j, k]]
                counts = np.bincount(r, minlength=d + 1)[: d + 1]
                hist[f"d{d}_{variant}_{value}"] = counts.tolist()
                ax.bar(np.arange(d + 1), counts, color="C0" if value == "identity" else "C1")
                ax.axvline(cap + 0.5, color="0.5", ls=":", lw=0.8)
                ax.set_title(
                    f"d={d} {variant} V={'I' if value == 'identity' else 'GᵀG'}", fontsize=8
                )
                note_excluded(ax, int((~ok[i, j, k]).sum()), config.runs)
                if value == "identity":
                    run.check(
                        f"rank_at_most_ceil_half_d{d}_{variant}_V_identity",
                        expected=f"<= {cap}",
                        measured=int(r.max()) if r.size else -1,
                        passed=bool(r.size and r.max() <= cap),
                        note="limiting ranks never exceed ceil(d/2) for V = I",
                    )
                else:
                    run.scalar(f"above_ceil_half_d{d}_{variant}_V_random", int((r > cap).sum()))
    for ax in axes[-1]:
        ax.set_xlabel("limiting rank")
    run.save_figure(fig, "rank_histograms")
    run.scalar("histograms", hist)
    run.scalar("excluded_members", int((~converged).sum()))
    run.save_arrays(ranks_eigenvalues=eig)

    # V = I softmax: Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1} exactly, so the solver's rank
    # at its stopping time must be the closed form's rank at that same time; the t -> inf
    # limit N (N^T Sigma_0^{-1} N)^{-1} N^T is reported for comparison.
    labels_arr = np.array(
        [(d, RANK_VARIANTS.index(v), RANK_VALUES.index(w)) for d, v, w, _ in labels]
    )
    sel = (labels_arr[:, 1] == 0) & (labels_arr[:, 2] == 0) & converged
    A = np.einsum("mki,mkj->mij", params["K"], params["Q"]) / np.sqrt(D)
    S0, A_sel = jnp.asarray(params["Sigma0"][sel]), jnp.asarray(A[sel])
    exact_now = jax.vmap(softmax_identity_covariance)(
        S0, A_sel, jnp.asarray(result.outputs["t_final"][sel])
    )
    rank_now = np.asarray(jax.vmap(lambda c: limiting_rank(c, config.threshold))(exact_now))
    # The t -> inf limit needs an invertible Sigma_0: evaluate it on each member's d x d block.
    dims_sel = labels_arr[sel, 0]
    rank_inf = np.zeros(int(sel.sum()), int)
    for d in np.unique(dims_sel):
        rows = dims_sel == d
        limits = jax.vmap(low_rank_limit)(S0[rows][:, :d, :d], A_sel[rows][:, :d, :d])
        rank_inf[rows] = np.asarray(jax.vmap(lambda c: limiting_rank(c, config.threshold))(limits))
    run.check(
        "softmax_identity_ranks_match_closed_form_at_stopping_time",
        expected=0,
        measured=int(np.sum(rank_now != ranks[sel])),
        tolerance=0,
        note=f"runs (of {int(sel.sum())}) whose rank differs from the exact Sigma(t_stop)'s",
    )
    run.scalar(
        "softmax_identity_runs_above_infinite_time_limit_rank", int(np.sum(ranks[sel] > rank_inf))
    )

    # Run-by-run comparison with the paper's projected Euler on the same inputs.
    if config.compare_runs:
        mismatches, compared, t_euler = [], 0, 0.0
        for i, d in enumerate(config.dims):
            for j, variant in enumerate(RANK_VARIANTS):
                for k, value in enumerate(RANK_VALUES):
                    inp = _rank_inputs(config, d, variant, value)
                    t0 = time.perf_counter()
                    er, res = paper_limiting_ranks(
                        inp,
                        attention=variant,
                        dt=config.euler_dt,
                        tol_low=config.tol_low,
                        max_iter=config.euler_max_iter,
                        threshold=config.threshold,
                        runs=config.compare_runs,
                    )
                    t_euler += time.perf_counter() - t0
                    for r in range(config.compare_runs):
                        compared += 1
                        if res[r].outcome != "converged" or not ok[i, j, k, r]:
                            continue
                        if er[r] != R[i, j, k, r]:
                            mismatches.append(
                                (d, variant, value, r, int(er[r]), int(R[i, j, k, r]))
                            )
        run.scalar("euler_compare_wall_s", t_euler)
        run.scalar("euler_rank_mismatches", [list(m) for m in mismatches])
        run.check(
            "ranks_match_paper_projected_euler_run_by_run",
            expected=0,
            measured=len(mismatches),
            tolerance=0,
            note=f"{compared} runs compared with the paper's NumPy projected Euler",
        )


# ---------------------------------------------------------------------------------------
# pde-blowup
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class BlowupConfig(ExperimentConfig):
    """Blow-up times of softmax Gaussians (V = I) vs the closed form, over random A.

    d: dimension; samples: random A per family ("positive": A + A^T > 0, "indefinite":
    A + A^T with both signs); blowup_trace: trace at which the event fires (the blow-up time
    is then extrapolated from the pole); l2_horizon: L2 runs on the same inputs up to this
    multiple of the softmax blow-up time and must stay finite.
    """

    d: int = 3
    samples: int = 64
    blowup_trace: float = 1e6
    l2_horizon: float = 3.0
    rtol: float = 1e-10
    atol: float = 1e-12
    max_steps: int = 20000

    def validate(self) -> None:
        if not 2 <= self.d <= 8:
            raise ConfigError(f"d must be in 2..8, got {self.d}")
        if self.samples < 1:
            raise ConfigError(f"samples must be >= 1, got {self.samples}")
        for name in ("blowup_trace", "l2_horizon", "rtol", "atol"):
            _positive(name, getattr(self, name))
        if self.l2_horizon < 1:
            raise ConfigError(f"l2_horizon must be >= 1, got {self.l2_horizon}")

    @classmethod
    def quick(cls) -> dict:
        return {"samples": 16}


def blowup_inputs(d: int, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Random ``A`` (half with ``A + A^T > 0``, half indefinite) and ``Sigma_0 = G G^T / d + I/10``.

    ``Q = sqrt(d) I``, ``K = A^T`` realise ``A = K^T Q / sqrt(d)`` exactly.
    """
    rng = np.random.default_rng(seed)
    As, covs, family = [], [], []
    for s in range(samples):
        positive = s % 2 == 0
        while True:
            M = rng.standard_normal((d, d))
            if positive:
                P = rng.standard_normal((d, d))
                A = 0.5 * (P @ P.T) / d + 0.1 * np.eye(d) + 0.5 * (M - M.T)
            else:
                A = M / np.sqrt(d)
            lam = np.linalg.eigvalsh(A + A.T)
            if (positive and lam[0] > 0) or (not positive and lam[0] < 0 < lam[-1]):
                break
        G = rng.standard_normal((d, d))
        As.append(A)
        covs.append(G @ G.T / d + 0.1 * np.eye(d))
        family.append(0 if positive else 1)
    A = np.stack(As)
    return {
        "Q": np.broadcast_to(np.sqrt(d) * np.eye(d), A.shape).copy(),
        "K": np.transpose(A, (0, 2, 1)).copy(),
        "Sigma0": np.stack(covs),
        "family": np.array(family),
        "A": A,
    }


@register_experiment(
    "pde-blowup",
    BlowupConfig,
    "softmax blow-up times vs the closed form over random A; L2 stays finite on the same inputs",
)
def run_pde_blowup(config: BlowupConfig, run: Run) -> None:
    from jaxdyn.plotting import new_figure, note_excluded

    d = config.d
    inputs = blowup_inputs(d, config.samples, config.seed)
    t_star = np.asarray(
        jax.vmap(blowup_time)(jnp.asarray(inputs["Sigma0"]), jnp.asarray(inputs["A"]))
    )
    members = {k: inputs[k] for k in ("Q", "K", "Sigma0")}
    members["t_star"] = t_star
    # Softmax and L2 on the same inputs: 2 x samples members, one program.
    both = {k: np.concatenate([v, v]) for k, v in members.items()}
    both["variant"] = np.repeat([0, 1], config.samples)
    grid = Grid.zip(both)

    def member(p, key):
        eye = jnp.eye(d, dtype=p["Sigma0"].dtype)
        variants = tuple(cls(Q=p["Q"], K=p["K"], V=eye) for cls in (Softmax, L2))
        horizon = jnp.where(p["variant"] == 0, 10.0 * p["t_star"], config.l2_horizon * p["t_star"])
        ts = p["t_star"] * jnp.linspace(0.0, 1.0, 33)
        sol = simulate_gaussian(
            _Switch(variants, p["variant"]),
            jnp.zeros(d, p["Sigma0"].dtype),
            p["Sigma0"],
            horizon,
            ts=ts * jnp.where(p["variant"] == 0, 0.999, config.l2_horizon),
            # The blow-up time needs tight tolerances; "L2 stays finite" does not.
            rtol=jnp.where(p["variant"] == 0, config.rtol, 1e-6),
            atol=jnp.where(p["variant"] == 0, config.atol, 1e-9),
            max_steps=config.max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(p["variant"] == 0, config.blowup_trace, 1e200),
        )
        blew_up = sol.status == Status.blowup
        return {
            "blew_up": blew_up,
            "t_blowup": sol.t_blowup,
            "t_event": sol.t_event,
            "event": sol.event,
            "ts": sol.ts,
            "trace": jnp.trace(sol.covs, axis1=-2, axis2=-1),
            "final_trace": jnp.trace(sol.final_cov),
            "t_final": sol.t_final,
            "horizon": horizon,
            "rank_one_ratio": jnp.linalg.eigvalsh(sol.final_cov)[-2]
            / jnp.linalg.eigvalsh(sol.final_cov)[-1],
            "status": sol.status,
        }

    # Blow-up is the measured outcome for softmax, not a failure (L2 must not blow up:
    # checked below from its statuses).
    result = run.sweep("blowup", member, grid, accept=[Status.blowup])
    out = result.outputs
    soft = np.arange(len(grid)) < config.samples
    l2 = ~soft
    soft_ok = soft & result.has_status(Status.blowup)
    rel = (
        np.abs(out["t_blowup"][soft_ok] - t_star[soft_ok[: config.samples]])
        / t_star[soft_ok[: config.samples]]
    )
    run.check(
        "softmax_blowup_time_matches_closed_form",
        expected=0.0,
        measured=float(rel.max()) if rel.size else float("nan"),
        tolerance=1e-6,
        note="max relative error of the pole-extrapolated blow-up time, V = I",
    )
    run.check(
        "softmax_all_runs_blow_up",
        expected=config.samples,
        measured=int(soft_ok.sum()),
        tolerance=0,
    )
    run.check(
        "softmax_blowup_direction_rank_one",
        expected=0.0,
        measured=float(np.max(out["rank_one_ratio"][soft_ok])),
        tolerance=1e-2,
        note="Sigma / tr Sigma tends to rank one: lambda_2 / lambda_1 at the event",
    )
    l2_ok = l2 & result.ok()
    run.check(
        "l2_stays_finite_on_same_inputs",
        expected=int(l2.sum()),
        measured=int(l2_ok.sum()),
        tolerance=0,
        note=f"L2 reaches {config.l2_horizon} x the softmax blow-up time with a finite Sigma",
    )
    run.scalar("max_l2_trace", float(np.max(out["final_trace"][l2_ok])) if l2_ok.any() else None)
    short = l2 & (out["event"] == GaussianEvent.NONE) & (out["t_final"] < out["horizon"])
    run.check(
        "l2_runs_reach_horizon",
        expected=0,
        measured=int(short.sum()),
        tolerance=0,
        note="L2 runs without an event whose solve ended before l2_horizon t* (t_final)",
    )
    # [derived] L2: dSigma/dt = 2 V (Sigma^{-1} + 2 K^T K)^{-1} A Sigma + transpose, and
    # (Sigma^{-1} + 2 K^T K)^{-1} <= (2 K^T K)^{-1}, so |Sigma(t)|_2 <= |Sigma_0|_2 e^{r t} with
    # r = 2 |V|_2 |A|_2 / lambda_min(K^T K) (V = I here): at most exponential growth.
    K = inputs["K"]
    r = np.array(
        [
            2 * np.linalg.norm(A, 2) / np.linalg.eigvalsh(k.T @ k)[0]
            for A, k in zip(inputs["A"], K, strict=True)
        ]
    )
    bound0 = np.log(d * np.linalg.norm(inputs["Sigma0"], 2, axis=(1, 2)))
    idx = np.flatnonzero(l2_ok)
    j = idx - config.samples
    with np.errstate(invalid="ignore"):  # saves after a solve's end are inf
        excess = np.log(out["trace"][idx]) - bound0[j, None] - r[j, None] * out["ts"][idx]
    excess = np.where(np.isfinite(out["ts"][idx]), excess, -np.inf)
    run.check(
        "l2_growth_within_exponential_bound",
        expected="<= 0",
        measured=float(np.max(excess)) if idx.size else float("nan"),
        passed=bool(idx.size and np.max(excess) <= 0),
        note="max over L2 runs and saves of log tr Sigma(t) - log(d |Sigma_0|_2) - r t",
    )
    run.scalar(
        "l2_growth_bound_slack_min", float(np.min(-np.max(excess, axis=1))) if idx.size else None
    )

    fig, axes = new_figure(1, 2, width=4.0, height=3.4)
    ax = axes[0, 0]
    fam = np.concatenate([inputs["family"], inputs["family"]])
    for f, label in ((0, "A + Aᵀ > 0"), (1, "A + Aᵀ indefinite")):
        m = soft_ok & (fam == f)
        ax.scatter(t_star[m[: config.samples]], out["t_blowup"][m], s=12, label=label)
    lim = [0, float(np.max(t_star)) * 1.05]
    ax.plot(lim, lim, "k:", lw=0.8)
    ax.set_xlabel("closed-form t*")
    ax.set_ylabel("simulated blow-up time")
    ax.legend(fontsize=7)
    note_excluded(ax, int((soft & ~soft_ok).sum()), config.samples)
    ax = axes[0, 1]
    for i in np.flatnonzero(soft_ok)[:8]:
        ax.semilogy(out["ts"][i] / t_star[i], out["trace"][i], color="C3", lw=0.8)
    for i in np.flatnonzero(l2_ok)[:8]:
        j = i - config.samples
        ax.semilogy(out["ts"][i] / t_star[j], out["trace"][i], color="C0", lw=0.8)
    ax.set_ylim(top=1e8)  # an L2 run may grow (exponentially) to ~1e50 by l2_horizon t*
    ax.set_xlabel("t / t* (softmax, red; L2, blue)")
    ax.set_ylabel("tr Sigma")
    run.save_figure(fig, "blowup_times")


# ---------------------------------------------------------------------------------------
# pde-cone
# ---------------------------------------------------------------------------------------

CONE_CASES = ("to_zero", "to_line", "two_lines", "blowup", "either")
CONE_VARIANTS = ("softmax", "l2", "multihead", "sinkhorn")
# Outcome of one cone run (saved per run as ``cone_outcome``).
CONE_CONVERGED, CONE_BLOWUP, CONE_UNDECIDED, CONE_FAILED = 0, 1, 2, 3
# "either": a non-normal V (see cone_cases).
EITHER_V = ((0.5, 2.0), (0.0, 2.0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConeConfig(ExperimentConfig):
    """The paper's d = 2 pictures: Sigma = [[a, c], [c, b]] drawn as (a - b, 2c, a + b).

    grid: initial conditions of trace 1 on a ``grid x grid`` lattice of (u, w) = (a - b, 2c)
    inside the unit disk (radius < disk_radius). t1: horizon; blowup_trace: event threshold
    (1e6 rather than the paper's tol_high = 1e3: with 1e3, runs of a diagonal-V "either"
    that converge to a line with trace up to ~9e3 would read as blow-ups).
    converged_tol: a run without an event is "converged" when ``|d Sigma/dt|_F`` at ``t1`` is
    below ``converged_tol * max(1, tr Sigma)``: the paper's ``tol_low`` while the trace is
    below 1, a relative rate ``|d Sigma/dt| / tr Sigma`` above it (the absolute rate of a
    softmax run resting on a line with trace ~1e3 carries the solver's error, about
    ``rtol (tr Sigma)^2``); else "undecided" (e.g. the ``1/t`` decays of ``to_zero`` and
    ``to_line``, or L2's exponential growth).
    """

    grid: int = 9
    disk_radius: float = 0.95
    t1: float = 15.0
    saves: int = 64
    blowup_trace: float = 1e6
    converged_tol: float = 1e-3
    rtol: float = 1e-8
    atol: float = 1e-11
    max_steps: int = 32768

    def validate(self) -> None:
        if self.grid < 2:
            raise ConfigError(f"grid must be >= 2, got {self.grid}")
        if not 0 < self.disk_radius < 1:
            raise ConfigError(f"disk_radius must be in (0, 1), got {self.disk_radius}")
        for name in ("t1", "blowup_trace", "converged_tol", "rtol", "atol"):
            _positive(name, getattr(self, name))
        if self.saves < 2:
            raise ConfigError(f"saves must be >= 2, got {self.saves}")

    @classmethod
    def quick(cls) -> dict:
        return {"grid": 5, "saves": 32, "t1": 8.0}


def cone_cases(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """``Q, K (2, 2)``, ``V (2, 2)`` of the five d = 2 cases (transformer_pde.md, cone pictures).

    ``to_line`` uses ``Q = [q; 0]`` so every variant (incl. 2-head multi-head, one row per
    head) sees the same rows. ``two_lines`` and ``either`` share ``A = K^T Q / sqrt(2) =
    diag(1, -1)``, whose isotropic lines ``x^T A x = 0`` are ``(1, 1)`` and ``(1, -1)``.
    [derived] On rank-one ``Sigma = x x^T`` the flow is ``x' = (x^T A x) V x``, so:

    - the rank-one matrices on an isotropic line ``e`` are equilibria, linearly stable iff
      ``kappa = (e^T A f)(f^T V e) < 0`` (``f`` orthogonal to ``e``; the Jacobian off the line
      has the double eigenvalue ``2 p kappa`` at ``p e e^T``): :func:`isotropic_line_stability`;
    - along a real eigenvector ``u`` of ``V`` (eigenvalue ``lam``) the direction is fixed and
      ``|x|`` blows up in finite time iff ``(u^T A u) lam > 0``; it attracts nearby
      directions iff ``(u^T A u) d/dtheta (e_theta^perp . V e_theta) < 0`` at ``u``.

    With ``V = I`` every direction is fixed, so any positive eigenvalue of ``A + A^T`` blows
    up: neither "two lines" nor "either" exist for V = I, and both cases need their own V.

    - ``two_lines``: ``V = diag(-1, 1)`` (``V A = -I``). Both lines are stable (``kappa = -1``)
      and neither eigenvector of V blows up. The flow is ``a' = -2 (a^2 - c^2)``,
      ``b' = -2 (b^2 - c^2)``, ``c' = 0``: every run converges, to ``|c0| (1, s)(1, s)^T`` with
      ``s = sign(c0)`` (``c0 = 0`` decays to 0 like 1/t): :func:`two_lines_covariance`.
    - ``either``: ``V = EITHER_V = [[0.5, 2], [0, 2]]`` (non-normal, ``V A + A^T V^T``
      indefinite). The line ``(1, -1)`` is stable (``kappa = -1.75``), ``(1, 1)`` unstable
      (``kappa = 0.25``); the eigenvector ``(4, 3)`` of ``V`` (eigenvalue 2,
      ``u^T A u > 0``) is an attracting blow-up direction, while the eigenvector ``(1, 0)``
      (eigenvalue 0.5) repels. Starts are split between blowing up along ``(4, 3)`` (disk
      point ``(0.28, 0.96)``) and converging to the line ``(1, -1)`` (disk point ``(0, -1)``).
      (A diagonal ``V`` gives no open blow-up basin: with ``0 < v1 < v2`` only the axis
      ``c = 0`` blows up, and nearby runs converge to a line with a huge trace.)
    """
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((2, 2))
    q = np.array([[1.0, 0.5], [0.0, 0.0]])
    # K^T Q / sqrt(2) = diag(1, -1) with Q = I.
    K_indef = np.sqrt(2.0) * np.diag([1.0, -1.0])
    cases = {
        "to_zero": dict(
            Q=np.array([[1.0, 0.2], [0.3, 0.8]]),
            K=-np.array([[1.0, 0.2], [0.3, 0.8]]),
            V=G @ G.T + 0.1 * np.eye(2),
        ),
        "to_line": dict(Q=q, K=-q, V=np.eye(2)),
        "two_lines": dict(Q=np.eye(2), K=K_indef, V=np.diag([-1.0, 1.0])),
        "blowup": dict(
            Q=np.array([[1.0, 0.3], [0.0, 0.7]]), K=np.array([[1.0, 0.0], [0.2, 0.9]]), V=np.eye(2)
        ),
        "either": dict(Q=np.eye(2), K=K_indef, V=np.array(EITHER_V)),
    }
    return cases


def two_lines_covariance(cov0: np.ndarray, t: float) -> np.ndarray:
    """Exact softmax flow of ``two_lines`` (``A = diag(1, -1)``, ``V = diag(-1, 1)``).

    ``c`` is constant and ``a``, ``b`` each solve ``y' = -2 (y^2 - c^2)``:
    ``y(t) = k (y0 + k tau) / (k + y0 tau)``, ``k = |c|``, ``tau = tanh(2 k t)``
    (``y0 / (1 + 2 y0 t)`` when ``c = 0``).
    """
    a0, b0, c = cov0[0, 0], cov0[1, 1], cov0[0, 1]
    k = abs(c)

    def riccati(y0):
        if k == 0:
            return y0 / (1 + 2 * y0 * t)
        tau = np.tanh(2 * k * t)
        return k * (y0 + k * tau) / (k + y0 * tau)

    return np.array([[riccati(a0), c], [c, riccati(b0)]])


def isotropic_line_stability(A: np.ndarray, V: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """``[(e, kappa)]`` for the isotropic lines ``e^T A e = 0`` of a 2 x 2 ``A`` with indefinite
    symmetric part: ``kappa = (e^T A f)(f^T V e)``, ``f`` orthogonal to ``e``; the rank-one
    equilibria ``p e e^T`` of the softmax flow are linearly stable iff ``kappa < 0``
    (see :func:`cone_cases`)."""
    lam, U = np.linalg.eigh(0.5 * (A + A.T))
    if not lam[0] < 0 < lam[1]:
        raise ValueError(f"A + A^T must be indefinite, eigenvalues {2 * lam}")
    out = []
    for sign in (1.0, -1.0):
        e = np.sqrt(lam[1]) * U[:, 0] + sign * np.sqrt(-lam[0]) * U[:, 1]
        e = e / np.linalg.norm(e)
        f = np.array([-e[1], e[0]])
        out.append((e, float((e @ A @ f) * (f @ V @ e))))
    return out


def blowup_directions(A: np.ndarray, V: np.ndarray) -> list[np.ndarray]:
    """Real eigenvectors ``u`` of ``V`` (2 x 2) that are attracting finite-time blow-up
    directions of the rank-one softmax flow ``x' = (x^T A x) V x``: ``(u^T A u) lam > 0`` and
    ``(u^T A u) g'(theta_u) < 0``, ``g(theta) = e_theta^perp . V e_theta`` (see
    :func:`cone_cases`)."""
    lam, vecs = np.linalg.eig(V)
    out = []
    for k in range(2):
        if abs(lam[k].imag) > 1e-12:
            continue
        u = vecs[:, k].real / np.linalg.norm(vecs[:, k].real)
        theta = np.arctan2(u[1], u[0])

        def g(th):
            e = np.array([np.cos(th), np.sin(th)])
            return np.array([-e[1], e[0]]) @ V @ e

        slope = (g(theta + 1e-6) - g(theta - 1e-6)) / 2e-6
        qa = u @ A @ u
        if qa * lam[k].real > 0 and qa * slope < 0:
            out.append(u)
    return out


def _disk(cov):
    """``Sigma / tr Sigma`` as ``((a - b), 2c) / (a + b)`` in the unit disk (last axes 2 x 2)."""
    tr = cov[..., 0, 0] + cov[..., 1, 1]
    return np.stack([cov[..., 0, 0] - cov[..., 1, 1], 2 * cov[..., 0, 1]], -1) / tr[..., None]


@register_experiment(
    "pde-cone",
    ConeConfig,
    "d = 2 covariance flows in the PSD cone: to 0, to a line, two lines, blow-up, either",
)
def run_pde_cone(config: ConeConfig, run: Run) -> None:
    from jaxdyn.plotting import cone_axes, new_figure, note_excluded

    cases = cone_cases(config.seed)
    u = np.linspace(-config.disk_radius, config.disk_radius, config.grid)
    U, W = np.meshgrid(u, u)
    inside = U**2 + W**2 < config.disk_radius**2
    u0, w0 = U[inside], W[inside]
    covs0 = np.stack(
        [
            np.array([[(1 + a) / 2, b / 2], [b / 2, (1 - a) / 2]])
            for a, b in zip(u0, w0, strict=True)
        ]
    )
    n0 = len(covs0)
    nc, nv = len(CONE_CASES), len(CONE_VARIANTS)
    rows = {"Q": [], "K": [], "V": [], "Sigma0": [], "variant": [], "case": []}
    for ci, name in enumerate(CONE_CASES):
        for vi in range(nv):
            for cov in covs0:
                rows["Q"].append(cases[name]["Q"])
                rows["K"].append(cases[name]["K"])
                rows["V"].append(cases[name]["V"])
                rows["Sigma0"].append(cov)
                rows["variant"].append(vi)
                rows["case"].append(ci)
    grid = Grid.zip({k: np.stack(v) for k, v in rows.items()})
    # Log-spaced saves: the blow-ups and the turns towards the lines happen early.
    ts = np.concatenate([[0.0], np.geomspace(1e-3 * config.t1, config.t1, config.saves - 1)])
    ts[-1] = config.t1

    def member(p, key):
        Q, K, V = p["Q"], p["K"], p["V"]
        variants = (
            Softmax(Q=Q, K=K, V=V),
            L2(Q=Q, K=K, V=V),
            MultiHead(Q=Q, K=K, V=V, heads=2),
            Sinkhorn(Q=Q, K=K, V=V),
        )
        switch = _Switch(variants, p["variant"])
        sol = simulate_gaussian(
            switch,
            jnp.zeros(2, Q.dtype),
            p["Sigma0"],
            config.t1,
            ts=ts,
            rtol=config.rtol,
            atol=config.atol,
            max_steps=config.max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(p["variant"] == 1, 1e200, config.blowup_trace),
            psd_tol=1e-6,
        )
        _, dcov = switch.gaussian_rhs(sol.final_mean, sol.final_cov, t=sol.t_final)
        return {
            "covs": sol.covs,
            "final_cov": sol.final_cov,
            "rhs_norm": jnp.sqrt(jnp.sum(dcov**2)),
            "t_final": sol.t_final,
            "t_event": sol.t_event,
            "event": sol.event,
            "status": sol.status,
        }

    result = run.sweep("cone", member, grid, accept=[Status.blowup])
    out = result.outputs
    covs = out["covs"].reshape(nc, nv, n0, config.saves, 2, 2)
    final = out["final_cov"].reshape(nc, nv, n0, 2, 2)
    event = out["event"].reshape(nc, nv, n0)
    t_event = out["t_event"].reshape(nc, nv, n0)
    rhs_norm = out["rhs_norm"].reshape(nc, nv, n0)
    ok = result.ok(accept=[Status.blowup]).reshape(nc, nv, n0)
    blew = ok & (event == GaussianEvent.BLOWUP)
    scale = np.maximum(1.0, np.trace(final, axis1=-2, axis2=-1))
    converged = ok & (event == GaussianEvent.NONE) & (rhs_norm < config.converged_tol * scale)
    outcome = np.full((nc, nv, n0), CONE_UNDECIDED, np.int32)
    outcome[converged] = CONE_CONVERGED
    outcome[blew] = CONE_BLOWUP
    outcome[~ok] = CONE_FAILED
    end = _disk(final)  # Sigma / tr Sigma at t1 or at the blow-up event
    run.save_arrays(
        cone_u0=u0, cone_w0=w0, cone_outcome=outcome, cone_final_cov=final, cone_t_event=t_event
    )
    run.scalar(
        "outcomes_by_case_variant",
        {
            f"{c}/{v}": {
                k: int(np.sum(outcome[ci, vi] == code))
                for k, code in (
                    ("converged", CONE_CONVERGED),
                    ("blowup", CONE_BLOWUP),
                    ("undecided", CONE_UNDECIDED),
                    ("failed", CONE_FAILED),
                )
            }
            for ci, c in enumerate(CONE_CASES)
            for vi, v in enumerate(CONE_VARIANTS)
        },
    )

    # Unit-disk pictures: Sigma / tr Sigma; blue no blow-up (filled dot at t1 if converged,
    # open if still moving), red blow-up (x at the event); black dots: initial conditions.
    fig, axes = new_figure(nv, nc, width=2.4, height=2.4)
    colors = {CONE_CONVERGED: "C0", CONE_BLOWUP: "C3", CONE_UNDECIDED: "C0"}
    for ci, name in enumerate(CONE_CASES):
        for vi, variant in enumerate(CONE_VARIANTS):
            ax = cone_axes(axes[vi, ci], title=f"{name} / {variant}")
            ax.plot(u0, w0, "k.", ms=1.5)
            for m in np.flatnonzero(ok[ci, vi]):
                c = covs[ci, vi, m]
                good = np.all(np.isfinite(c), axis=(1, 2))
                path = np.concatenate([_disk(c[good]), end[ci, vi, m][None]])
                color = colors[int(outcome[ci, vi, m])]
                ax.plot(path[:, 0], path[:, 1], lw=0.6, color=color)
                code = int(outcome[ci, vi, m])
                ax.plot(
                    *path[-1],
                    "x" if code == CONE_BLOWUP else "o",
                    ms=3,
                    color=color,
                    mfc=color if code == CONE_CONVERGED else "none",
                )
            note_excluded(ax, int((~ok[ci, vi]).sum()), n0)
    run.save_figure(fig, "cone_disk")

    # 3-D cone picture for softmax: Sigma as (a - b, 2c, a + b) with the trace log-compressed
    # to h = log(1 + tr) (radius scaled alike), so the PSD cone |(a - b, 2c)| <= a + b stays
    # the cone |(x, y)| <= h (grey) and rank-one matrices lie on its surface.
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3.2 * nc, 3.4))
    for ci, name in enumerate(CONE_CASES):
        ax = fig.add_subplot(1, nc, ci + 1, projection="3d")
        h_max = 0.0
        for m in np.flatnonzero(ok[ci, 0]):
            c = covs[ci, 0, m]
            c = np.concatenate([c[np.all(np.isfinite(c), axis=(1, 2))], final[ci, 0, m][None]])
            tr = c[:, 0, 0] + c[:, 1, 1]
            h = np.log1p(tr)
            xy = _disk(c) * h[:, None]
            h_max = max(h_max, float(h.max()))
            ax.plot(xy[:, 0], xy[:, 1], h, lw=0.6, color=colors[int(outcome[ci, 0, m])])
        theta = np.linspace(0, 2 * np.pi, 60)
        for level in np.linspace(0, h_max, 4)[1:]:
            ax.plot(level * np.cos(theta), level * np.sin(theta), level, color="0.75", lw=0.5)
        for phi in np.linspace(0, 2 * np.pi, 8, endpoint=False):
            ax.plot(
                [0, h_max * np.cos(phi)], [0, h_max * np.sin(phi)], [0, h_max], color="0.75", lw=0.5
            )
        ax.set_xlim(-h_max, h_max)
        ax.set_ylim(-h_max, h_max)
        ax.set_zlim(0, h_max)
        ax.set_title(f"softmax: {name}", fontsize=9)
        ax.set_xlabel("(a - b) s", fontsize=7)
        ax.set_ylabel("2c s", fontsize=7)
        ax.set_zlabel("log(1 + tr)", fontsize=7)
    fig.text(0.01, 0.01, "s = log(1 + tr) / tr", fontsize=7)
    run.save_figure(fig, "cone_3d")

    short = ok & (event == GaussianEvent.NONE) & (out["t_final"].reshape(nc, nv, n0) < config.t1)
    run.check(
        "no_event_runs_reach_t1",
        expected=0,
        measured=int(short.sum()),
        tolerance=0,
        note="runs without an event whose solve ended before t1 (final state not at t1)",
    )
    _cone_checks(config, run, cases, covs0, covs, final, end, outcome, t_event, event, ok)


def _cone_checks(config, run, cases, covs0, covs, final, end, outcome, t_event, event, ok):
    """Checks of pde-cone against the derived softmax flows (see :func:`cone_cases`)."""
    soft = CONE_VARIANTS.index("softmax")

    # to_line (V = I): the closed form Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}.
    A_line = cases["to_line"]["K"].T @ cases["to_line"]["Q"] / np.sqrt(2)
    ci = CONE_CASES.index("to_line")
    expected = np.stack(
        [np.asarray(softmax_identity_covariance(c, A_line, config.t1)) for c in covs0]
    )
    run.check(
        "softmax_to_line_matches_closed_form",
        expected=0.0,
        measured=float(np.max(np.abs(final[ci, soft] - expected))),
        tolerance=1e-5,
    )
    ranks = np.asarray(jax.vmap(limiting_rank)(jnp.asarray(final[ci, soft])))
    run.check(
        "softmax_to_line_rank_one",
        expected=1,
        measured=int(np.max(ranks)),
        tolerance=0,
        note="eigenvalues of Sigma(t1) above 0.1 (the other decays like 1/t)",
    )
    limit = np.stack([np.asarray(low_rank_limit(c, A_line)) for c in covs0])
    run.scalar("to_line_distance_to_limit_at_t1", float(np.max(np.abs(final[ci, soft] - limit))))

    # two_lines: every run converges; Sigma(t1) is the exact Riccati solution; the limits of
    # Sigma / tr Sigma are the two isotropic lines (0, +-1), chosen by the sign of c0.
    ci = CONE_CASES.index("two_lines")
    c0 = covs0[:, 0, 1]
    off = np.abs(c0) > 1e-12
    run.check(
        "softmax_two_lines_no_run_blows_up",
        expected=0,
        measured=int(np.sum(outcome[ci, soft] == CONE_BLOWUP)),
        tolerance=0,
    )
    run.check(
        "softmax_two_lines_off_axis_runs_converge",
        expected=int(off.sum()),
        measured=int(np.sum(outcome[ci, soft][off] == CONE_CONVERGED)),
        tolerance=0,
        note="runs with c0 != 0 (those with c0 = 0 decay to 0 like 1/t: exact solution below)",
    )
    exact = np.stack([two_lines_covariance(c, config.t1) for c in covs0])
    run.check(
        "softmax_two_lines_matches_exact_solution",
        expected=0.0,
        measured=float(np.max(np.abs(final[ci, soft] - exact))),
        tolerance=1e-5,
        note="c constant, a and b solve y' = -2 (y^2 - c^2)",
    )
    line = np.stack([np.zeros_like(c0), np.sign(c0)], -1)
    run.check(
        "softmax_two_lines_limits_on_the_two_isotropic_lines",
        expected=0.0,
        measured=float(np.max(np.linalg.norm(end[ci, soft][off] - line[off], axis=-1))),
        tolerance=0.02,
        note="|Sigma/tr Sigma - (0, sign c0)| at t1 (disk coordinates), runs with c0 != 0",
    )
    run.check(
        "softmax_two_lines_both_lines_reached",
        expected=2,
        measured=len(set(np.sign(end[ci, soft][off, 1]).tolist())),
        tolerance=0,
        note="distinct signs of 2c/tr at t1: two distinct rank-one limits",
    )

    # blowup (V = I): the blow-up event fires before the closed-form blow-up time.
    ci = CONE_CASES.index("blowup")
    A_b = cases["blowup"]["K"].T @ cases["blowup"]["Q"] / np.sqrt(2)
    t_star = np.array([float(blowup_time(c, A_b)) for c in covs0])
    run.check(
        "softmax_blowup_event_before_closed_form_time",
        expected="all",
        measured="all"
        if np.all((event[ci, soft] == GaussianEvent.BLOWUP) & (t_event[ci, soft] <= t_star))
        else "not all",
    )

    # either: both outcomes, each run one of them; blow-ups end on the attracting blow-up
    # direction of V, convergent runs on the stable isotropic line (both derived from A, V).
    ci = CONE_CASES.index("either")
    A_e = cases["either"]["K"].T @ cases["either"]["Q"] / np.sqrt(2)
    lines = isotropic_line_stability(A_e, cases["either"]["V"])
    stable = [e for e, kappa in lines if kappa < 0]
    blow_dirs = blowup_directions(A_e, cases["either"]["V"])
    run.scalar("either_line_kappas", {str(np.round(e, 4).tolist()): k for e, k in lines})

    def disk_points(vectors):
        return np.array([_disk(np.outer(v, v)) for v in vectors]).reshape(-1, 2)

    def distance_to_nearest(points, targets):
        if not len(points) or not len(targets):
            return float("nan")
        return float(np.max(np.min(np.linalg.norm(points[:, None] - targets[None], axis=-1), 1)))

    out_e = outcome[ci, soft]
    n_blow = int(np.sum(out_e == CONE_BLOWUP))
    n_conv = int(np.sum(out_e == CONE_CONVERGED))
    run.scalar("either_softmax_blowup_runs", n_blow)
    run.scalar("either_softmax_converged_runs", n_conv)
    run.check(
        "softmax_either_both_outcomes_occur",
        expected="both",
        measured="both" if n_blow > 0 and n_conv > 0 else f"blowup={n_blow}, converged={n_conv}",
    )
    run.check(
        "softmax_either_every_run_decided",
        expected=len(covs0),
        measured=n_blow + n_conv,
        tolerance=0,
        note="each run blows up or converges by t1",
    )
    run.check(
        "softmax_either_blowup_direction",
        expected=0.0,
        measured=distance_to_nearest(end[ci, soft][out_e == CONE_BLOWUP], disk_points(blow_dirs)),
        tolerance=0.02,
        note=f"Sigma/tr Sigma at the event (tr = {config.blowup_trace:g}) vs the attracting "
        f"blow-up eigenvector(s) of V {[np.round(u, 4).tolist() for u in blow_dirs]}",
    )
    run.check(
        "softmax_either_converged_on_stable_line",
        expected=0.0,
        measured=distance_to_nearest(end[ci, soft][out_e == CONE_CONVERGED], disk_points(stable)),
        tolerance=0.02,
        note=f"Sigma/tr Sigma at t1 vs the stable isotropic line(s) "
        f"{[np.round(e, 4).tolist() for e in stable]}",
    )

    run.check(
        "l2_never_blows_up",
        expected=0,
        measured=int(np.sum(event[:, CONE_VARIANTS.index("l2")] == GaussianEvent.BLOWUP)),
        tolerance=0,
        note="L2 Gaussians over all five cases",
    )
    ci = CONE_CASES.index("to_zero")
    tr_zero = np.trace(final[ci, soft], axis1=-2, axis2=-1)[ok[ci, soft]]
    tr_half = np.trace(covs[ci, soft, :, config.saves // 2], axis1=-2, axis2=-1)[ok[ci, soft]]
    run.check(
        "softmax_to_zero_trace_decreases",
        expected="all",
        measured="all" if np.all((tr_zero < tr_half) & (tr_half < 1.0)) else "not all",
        note="trace 1 initially, smaller at the middle save, smaller still at t1 (algebraic decay)",
    )
    run.scalar("to_zero_max_trace_at_t1", float(tr_zero.max()) if tr_zero.size else None)
