"""Gaussian experiments of the mean-field Transformer PDE (transformer_pde.md, "Closed forms"
and "The paper's numerical experiments"): ``pde-cone``, ``pde-ranks``, ``pde-blowup``.

Each experiment is one ``jaxdyn.sweep.run_sweep`` over all its members. Members of different
attention variants share one compiled program through :class:`_Switch`, which evaluates every
variant's Gaussian right-hand side and selects one by a traced index (the ODEs are at most
5 x 5, so computing a few right-hand sides per step is cheaper than separate compilations).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn._status import Status
from jaxdyn.attention import L2, AbstractAttention, MultiHead, Sinkhorn, Softmax
from jaxdyn.meanfield import (
    GaussianEvent,
    blowup_time,
    limiting_rank,
    low_rank_limit,
    paper_limiting_ranks,
    paper_rank_inputs,
    simulate_gaussian,
    softmax_identity_covariance,
)
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid, run_sweep


class _Switch(AbstractAttention):
    """Gaussian right-hand side of ``variants[index]`` with a traced ``index`` (one program)."""

    variants: tuple[AbstractAttention, ...]
    index: jax.Array
    gaussian_closed = True

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        outs = jnp.stack([v.velocity(x, tokens, t=t, chunk_size=chunk_size) for v in self.variants])
        return outs[self.index]

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        rhs = [v.gaussian_rhs(mean, cov, t=t) for v in self.variants]
        dmean = jnp.stack([r[0] for r in rhs])[self.index]
        dcov = jnp.stack([r[1] for r in rhs])[self.index]
        return dmean, dcov

    @property
    def dim(self) -> int:
        return self.variants[0].dim


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
    sigma0_scale: [open] multiplies the paper's ``Sigma_0 = G G^T`` (1 = the page's text).
    compare_runs: runs per histogram also integrated by the paper's NumPy projected Euler
        (``euler_dt``) for the run-by-run comparison (slow: a Python loop).
    """

    dims: tuple[int, ...] = (3, 4, 5)
    runs: int = 100
    tol_low: float = 1e-3
    t1: float = 1e5
    threshold: float = 0.1
    sigma0_scale: float = 1.0
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
        for name in ("tol_low", "t1", "threshold", "sigma0_scale", "rtol", "atol", "euler_dt"):
            _positive(name, getattr(self, name))
        if not 0 <= self.compare_runs <= self.runs:
            raise ConfigError(f"compare_runs must be in 0..runs, got {self.compare_runs}")
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")

    @classmethod
    def quick(cls) -> dict:
        return {"dims": (3,), "runs": 24, "compare_runs": 1, "euler_dt": 2e-3}


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
                inp = paper_rank_inputs(d, config.runs, attention=variant, value=value)
                k = d // 2
                for r in range(config.runs):
                    Q = np.zeros((D // 2, D))
                    Q[:k, :d] = inp.Q[r]
                    K = np.zeros((D // 2, D))
                    K[:k, :d] = inp.K[r]
                    V = np.zeros((D, D))
                    V[:d, :d] = inp.V[r]
                    S = np.zeros((D, D))
                    S[:d, :d] = config.sigma0_scale * inp.Sigma0[r]
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
    result = run_sweep(_rank_member(config, D), grid, name="ranks", run=run)
    run.record_sweep(result)
    run.scalar("sweep_wall_s", result.wall_time_s)
    ranks = result.outputs["rank"]
    converged = result.ok & (result.outputs["event"] == GaussianEvent.STEADY)
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
                    inp = paper_rank_inputs(d, config.runs, attention=variant, value=value)
                    inp = dataclasses.replace(inp, Sigma0=config.sigma0_scale * inp.Sigma0)
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
        blew_up = sol.status == Status.BLOWUP
        return {
            "blew_up": blew_up,
            "t_blowup": sol.t_blowup,
            "t_event": sol.t_event,
            "event": sol.event,
            "ts": sol.ts,
            "trace": jnp.trace(sol.covs, axis1=-2, axis2=-1),
            "final_trace": jnp.trace(sol.final_cov),
            "rank_one_ratio": jnp.linalg.eigvalsh(sol.final_cov)[-2]
            / jnp.linalg.eigvalsh(sol.final_cov)[-1],
            # Blow-up is the measured outcome for softmax, not a failure.
            "status": jnp.where(blew_up & (p["variant"] == 0), Status.SUCCESS, sol.status),
        }

    result = run_sweep(member, grid, name="blowup", run=run)
    run.record_sweep(result)
    out = result.outputs
    soft = np.arange(len(grid)) < config.samples
    l2 = ~soft
    soft_ok = soft & result.ok & out["blew_up"]
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
    l2_ok = l2 & (result.status == Status.SUCCESS)
    run.check(
        "l2_stays_finite_on_same_inputs",
        expected=int(l2.sum()),
        measured=int(l2_ok.sum()),
        tolerance=0,
        note=f"L2 reaches {config.l2_horizon} x the softmax blow-up time with a finite Sigma",
    )
    run.scalar("max_l2_trace", float(np.max(out["final_trace"][l2_ok])) if l2_ok.any() else None)

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
    ax.set_xlabel("t / t* (softmax, red; L2, blue)")
    ax.set_ylabel("tr Sigma")
    run.save_figure(fig, "blowup_times")


# ---------------------------------------------------------------------------------------
# pde-cone
# ---------------------------------------------------------------------------------------

CONE_CASES = ("to_zero", "to_line", "two_lines", "blowup", "either")
CONE_VARIANTS = ("softmax", "l2", "multihead", "sinkhorn")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConeConfig(ExperimentConfig):
    """The paper's d = 2 pictures: Sigma = [[a, c], [c, b]] drawn as (a - b, 2c, a + b).

    grid: initial conditions of trace 1 on a ``grid x grid`` lattice of (u, w) = (a - b, 2c)
    inside the unit disk (radius < disk_radius). t1: horizon; blowup_trace: event threshold.
    """

    grid: int = 9
    disk_radius: float = 0.95
    t1: float = 15.0
    saves: int = 64
    blowup_trace: float = 1e3
    rtol: float = 1e-6
    atol: float = 1e-9
    max_steps: int = 32768

    def validate(self) -> None:
        if self.grid < 2:
            raise ConfigError(f"grid must be >= 2, got {self.grid}")
        if not 0 < self.disk_radius < 1:
            raise ConfigError(f"disk_radius must be in (0, 1), got {self.disk_radius}")
        for name in ("t1", "blowup_trace", "rtol", "atol"):
            _positive(name, getattr(self, name))
        if self.saves < 2:
            raise ConfigError(f"saves must be >= 2, got {self.saves}")

    @classmethod
    def quick(cls) -> dict:
        return {"grid": 5, "saves": 32, "t1": 8.0}


def cone_cases(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """``Q, K (2, 2)``, ``V (2, 2)`` of the five d = 2 cases (transformer_pde.md, cone pictures).

    Rank-one cases use ``Q = [q; 0]`` so every variant (incl. 2-head multi-head, one row per
    head) sees the same rows.
    """
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((2, 2))
    q = np.array([[1.0, 0.5], [0.0, 0.0]])
    cases = {
        "to_zero": dict(
            Q=np.array([[1.0, 0.2], [0.3, 0.8]]),
            K=-np.array([[1.0, 0.2], [0.3, 0.8]]),
            V=G @ G.T + 0.1 * np.eye(2),
        ),
        "to_line": dict(Q=q, K=-q, V=np.eye(2)),
        "two_lines": dict(
            Q=np.array([[1.0, 0.0], [0.0, 1.0]]), K=np.array([[1.0, 0.0], [0.0, -1.0]]), V=np.eye(2)
        ),
        "blowup": dict(
            Q=np.array([[1.0, 0.3], [0.0, 0.7]]), K=np.array([[1.0, 0.0], [0.2, 0.9]]), V=np.eye(2)
        ),
        "either": dict(
            Q=np.array([[1.0, 0.0], [0.0, 1.0]]),
            K=np.array([[0.8, 0.0], [0.0, -1.0]]),
            V=np.array([[1.0, 0.6], [-0.4, 0.5]]),
        ),
    }
    return cases


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
    rows = {"Q": [], "K": [], "V": [], "Sigma0": [], "variant": [], "case": []}
    for ci, name in enumerate(CONE_CASES):
        for vi in range(len(CONE_VARIANTS)):
            for cov in covs0:
                rows["Q"].append(cases[name]["Q"])
                rows["K"].append(cases[name]["K"])
                rows["V"].append(cases[name]["V"])
                rows["Sigma0"].append(cov)
                rows["variant"].append(vi)
                rows["case"].append(ci)
    grid = Grid.zip({k: np.stack(v) for k, v in rows.items()})
    ts = np.linspace(0.0, config.t1, config.saves)

    def member(p, key):
        Q, K, V = p["Q"], p["K"], p["V"]
        variants = (
            Softmax(Q=Q, K=K, V=V),
            L2(Q=Q, K=K, V=V),
            MultiHead(Q=Q, K=K, V=V, heads=2),
            Sinkhorn(Q=Q, K=K, V=V),
        )
        sol = simulate_gaussian(
            _Switch(variants, p["variant"]),
            jnp.zeros(2, Q.dtype),
            p["Sigma0"],
            config.t1,
            ts=ts,
            rtol=config.rtol,
            atol=config.atol,
            max_steps=config.max_steps,
            # L2 grows at most exponentially: only an overflow-level trace counts for it.
            blowup_trace=jnp.where(p["variant"] == 1, 1e200, config.blowup_trace),
            psd_tol=10 * config.rtol,
        )
        status = jnp.where(sol.status == Status.BLOWUP, Status.SUCCESS, sol.status)
        return {
            "covs": sol.covs,
            "final_cov": sol.final_cov,
            "t_event": sol.t_event,
            "event": sol.event,
            "status": status,
        }

    result = run_sweep(member, grid, name="cone", run=run)
    run.record_sweep(result)
    covs = result.outputs["covs"].reshape(
        len(CONE_CASES), len(CONE_VARIANTS), n0, config.saves, 2, 2
    )
    final = result.outputs["final_cov"].reshape(len(CONE_CASES), len(CONE_VARIANTS), n0, 2, 2)
    event = result.outputs["event"].reshape(len(CONE_CASES), len(CONE_VARIANTS), n0)
    ok = result.ok.reshape(len(CONE_CASES), len(CONE_VARIANTS), n0)

    # Unit-disk pictures: Sigma / tr Sigma as ((a - b), 2c) / (a + b).
    fig, axes = new_figure(len(CONE_VARIANTS), len(CONE_CASES), width=2.4, height=2.4)
    for ci, name in enumerate(CONE_CASES):
        for vi, variant in enumerate(CONE_VARIANTS):
            ax = cone_axes(axes[vi, ci], title=f"{name} / {variant}")
            for m in np.flatnonzero(ok[ci, vi]):
                c = covs[ci, vi, m]
                good = np.all(np.isfinite(c), axis=(1, 2))
                a, b, cc = c[good, 0, 0], c[good, 1, 1], c[good, 0, 1]
                tr = np.maximum(a + b, 1e-300)
                blew = event[ci, vi, m] == GaussianEvent.BLOWUP
                ax.plot((a - b) / tr, 2 * cc / tr, lw=0.6, color="C3" if blew else "C0")
            note_excluded(ax, int((~ok[ci, vi]).sum()), n0)
    run.save_figure(fig, "cone_disk")

    # 3-D cone picture for softmax: (a - b, 2c, a + b), log-compressed trace.
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3.0 * len(CONE_CASES), 3.0))
    for ci, name in enumerate(CONE_CASES):
        ax = fig.add_subplot(1, len(CONE_CASES), ci + 1, projection="3d")
        for m in np.flatnonzero(ok[ci, 0]):
            c = covs[ci, 0, m]
            good = np.all(np.isfinite(c), axis=(1, 2))
            a, b, cc = c[good, 0, 0], c[good, 1, 1], c[good, 0, 1]
            tr = a + b
            scale = np.log1p(tr) / np.maximum(tr, 1e-300)
            ax.plot((a - b) * scale, 2 * cc * scale, np.log1p(tr), lw=0.6)
        ax.set_title(f"softmax: {name}", fontsize=9)
        ax.set_zlabel("log(1 + tr)")
    run.save_figure(fig, "cone_3d")

    # Checks against the V = I closed forms (softmax): "to a line" converges to the exact
    # low-rank limit, "blowup" blows up at t*, "to zero" has trace -> 0.
    A_line = cases["to_line"]["K"].T @ cases["to_line"]["Q"] / np.sqrt(2)
    ci = CONE_CASES.index("to_line")
    t_final = config.t1
    expected = np.stack(
        [np.asarray(softmax_identity_covariance(c, A_line, t_final)) for c in covs0]
    )
    err = np.max(np.abs(final[ci, 0] - expected))
    run.check(
        "softmax_to_line_matches_closed_form", expected=0.0, measured=float(err), tolerance=1e-5
    )
    ranks = np.asarray(jax.vmap(limiting_rank)(jnp.asarray(final[ci, 0])))
    run.check(
        "softmax_to_line_rank_one",
        expected=1,
        measured=int(np.max(ranks)),
        tolerance=0,
        note="eigenvalues of Sigma(t1) above 0.1 (the other decays like 1/t)",
    )
    limit = np.stack([np.asarray(low_rank_limit(c, A_line)) for c in covs0])
    run.scalar("to_line_distance_to_limit_at_t1", float(np.max(np.abs(final[ci, 0] - limit))))

    ci = CONE_CASES.index("blowup")
    A_b = cases["blowup"]["K"].T @ cases["blowup"]["Q"] / np.sqrt(2)
    t_star = np.array([float(blowup_time(c, A_b)) for c in covs0])
    t_ev = result.outputs["t_event"].reshape(len(CONE_CASES), len(CONE_VARIANTS), n0)[ci, 0]
    run.check(
        "softmax_blowup_event_before_closed_form_time",
        expected="all",
        measured="all"
        if np.all((event[ci, 0] == GaussianEvent.BLOWUP) & (t_ev <= t_star))
        else "not all",
    )
    run.check(
        "l2_never_blows_up",
        expected=0,
        measured=int(np.sum(event[:, 1] == GaussianEvent.BLOWUP)),
        tolerance=0,
        note="L2 Gaussians over all five cases",
    )
    ci = CONE_CASES.index("to_zero")
    tr_zero = np.trace(final[ci, 0], axis1=-2, axis2=-1)[ok[ci, 0]]
    tr_half = np.trace(covs[ci, 0, :, config.saves // 2], axis1=-2, axis2=-1)[ok[ci, 0]]
    run.check(
        "softmax_to_zero_trace_decreases",
        expected="all",
        measured="all" if np.all((tr_zero < tr_half) & (tr_half < 1.0)) else "not all",
        note="trace 1 initially, smaller at t1/2, smaller still at t1 (the decay is algebraic)",
    )
    run.scalar("to_zero_max_trace_at_t1", float(tr_zero.max()) if tr_zero.size else None)
    run.scalar(
        "blowup_fraction_by_case_variant",
        {
            f"{c}/{v}": float(np.mean(event[ci_, vi_] == GaussianEvent.BLOWUP))
            for ci_, c in enumerate(CONE_CASES)
            for vi_, v in enumerate(CONE_VARIANTS)
        },
    )
