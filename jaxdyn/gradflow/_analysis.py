"""One call from a Markov chain to its focus-and-dilution story: :func:`analyse_flow`.

For any row-stochastic ``P`` (``pi`` its stationary law) it solves the population flow from a
small initialisation and measures, with the evidence for each (focus_dilution.md):

- the closed-form rates: condensation ``mu1 = ||pi|| ||pi - 1/d 1||`` and the signed focus rate
  ``c = Var_pi(gamma) Cov_pi(gamma, P beta)``, with the Jacobian eigenvalues they predict;
- the unigram saddle the flow visits (root-found from the flow with attention off, on the
  rank-one manifold where the closed form holds) and the signed attention eigenvalue there;
- the rank-one critical point where the flow stalls after dilution, its tangential and
  transverse spectra and the transverse rate ``lambda_T`` of a new embedding direction;
- the stages (:func:`detect_stages`) and the metrics of :func:`trajectory_metrics`.

Default end time (``t1=None``): :func:`default_end_time`, from the rates. The rank-one stall
is the steady state of the rank-one flow (stopped when ``||grad L|| <= 1e-9``, at the latest
at ``50 margin log(1/eps) (1/mu1 + 1/|c|)``).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Float, Int, Key, Scalar
from .._status import Status
from .._validation import require_in_interval, require_positive
from ..sweep._diffeq import in_sweep
from . import _measure as _m
from ._end_time import END_TIME_MARGIN, default_end_time, log_save_times
from ._flow import flow_problem, flow_solution, population_flow
from ._linearise import (
    CriticalPoint,
    Spectrum,
    UnigramSaddle,
    _find_critical_point,
    _focus_rate,
    _jacobian_spectrum,
    _loss_gradient,
    _signed_focus_eigenvalue,
    condensation_rate,
    unigram_saddle,
)
from ._lyapunov import (
    RankOneCriticalPoint,
    embed_rank_one,
    rank_one_critical_point,
    rank_one_part,
)
from ._markov import MarkovChain
from ._measure import dilution_mode_growth, plateau_loss, score_angle
from ._metrics import _trajectory_metrics, embedding_pca, embedding_profile
from ._model import OneLayerTransformer, init_transformer
from ._stages import Stages, detect_stages

ROOT_TOL = 1e-13  # eigenvalues move with a critical point to first order
STALL_HORIZON = 25.0  # the rank-one flow stops when steady; this only bounds it


class Rates(AbstractResult):
    """Closed-form rates and the Jacobian eigenvalues that test them (all signed).

    Attributes:
        condensation: ``mu1 = ||pi|| ||pi - 1/d 1||``.
        condensation_jacobian: the top eigenvalue of ``J`` at ``theta = 0``.
        focus: ``c = Var_pi(gamma) Cov_pi(gamma, P beta)`` at the closed-form saddle.
        focus_jacobian: the signed top attention eigenvalue of ``J`` there
            (the signed top attention eigenvalue of ``J``).
        focus_visited: the signed top attention eigenvalue at the saddle the flow visits.
        focus_visited_formula: ``Var_pi(gamma_v) Cov_pi(gamma_v, P beta_v)`` with the visited
            saddle's own profiles ``gamma_v = W0 alpha``, ``beta_v = W1^T alpha``.
        transverse: ``lambda_T``, the top transverse eigenvalue at the rank-one stall.
    """

    condensation: Scalar
    condensation_jacobian: Scalar
    focus: Scalar
    focus_jacobian: Scalar
    focus_visited: Scalar
    focus_visited_formula: Scalar
    transverse: Scalar


class FlowAnalysis(AbstractResult):
    """Everything :func:`analyse_flow` measured on one chain.

    Attributes:
        chain: the :class:`MarkovChain`.
        eps: the initialisation scale.
        ts: save times (``0`` then log-spaced to ``end_time``).
        trajectory: the models at ``ts`` (leading time axis on every leaf).
        metrics: :func:`trajectory_metrics` of the trajectory, plus
            ``condensation_amplitude`` (the projection of ``theta(t)`` on the unstable
            eigenspace of ``J`` at ``0``) and ``condensation_nonlinearity`` (``||-grad L(theta)
            - J theta||`` divided by that projection: the rate error of the linearisation) and
            ``grad_norm`` (``||grad L(theta(t))||``).
        status: the flow's :class:`jaxdyn.Status`.
        num_steps: solver steps of the flow.
        end_time: the flow's end time (module docstring for the default).
        rates: :class:`Rates`.
        saddle: the closed-form unigram saddle.
        visited_saddle: the saddle the flow visits: the rank-one part of the flow with
            attention switched off, at the predicted focus time, root-found on the rank-one
            manifold and placed in widths ``(m, m_attn)``.
        stall: the rank-one critical point after dilution (:class:`RankOneCriticalPoint`);
            ``None`` when it was not searched (``find_stall=False``).
        spectrum_origin, spectrum_saddle: ``J`` at ``theta = 0`` and at the visited saddle.
        stages: :class:`Stages`.
    """

    chain: MarkovChain
    eps: Scalar
    ts: Float[Array, " T"]
    trajectory: OneLayerTransformer
    metrics: dict[str, Array]
    status: Status
    num_steps: Int[Array, ""]
    end_time: Scalar
    rates: Rates
    saddle: UnigramSaddle
    visited_saddle: CriticalPoint
    stall: RankOneCriticalPoint | None
    spectrum_origin: Spectrum
    spectrum_saddle: Spectrum
    stages: Stages

    @property
    def focus_sign(self) -> Int[Array, ""]:
        """``sign(c)``: ``+1`` attention first moves onto the frequent token, ``-1`` off it."""
        return jnp.sign(self.rates.focus).astype(jnp.int32)

    # -- measurements the claims read (host-side NumPy on the saved arrays) -----------------

    def _departure_or_end(self) -> float:
        t = float(self.stages.departure.time)
        return t if np.isfinite(t) else float(self.end_time)

    def plateau(self) -> tuple[float, float, float]:
        """``(time, loss, bound)`` at the save nearest a critical point between the
        condensation and the departure (the plateau measurement, with the
        spectrum at the visited saddle)."""
        return plateau_loss(
            self.ts,
            self.metrics["loss"],
            self.metrics["grad_norm"],
            float(self.stages.condensation.time),
            self._departure_or_end(),
            self.spectrum_saddle.eigenvalues,
        )

    def checks(
        self,
        label: str = "",
        tolerances: tuple[float, float] = (1e-7, 1e-10),
        horizon: str = "",
    ) -> tuple[list, dict[str, float]]:
        """The checks this analysis supports, named ``name[label]``, as ``(method, args,
        kwargs)`` calls of a run (``run.evidence``, ``run.consistency``, ``run.report``,
        ``run.scalar``, ``run.log``), and the rates ``{"c", "mu1", "lambda_T"}``: the rates
        against the Jacobian (consistency); the plateau, the condensation's alignments, the
        saddle's unstable mode, the score direction and the first attention phase (evidence);
        the stage order, the entropy's down-up-down and the dilution mode's rate when the
        theory predicts them (``c > 0``, a successful flow). ``tolerances``: the ``(rtol,
        atol)`` the flow was solved with (they size the entropy's solver error); ``horizon``:
        why the horizon stopped (:func:`analyse_flow_until`), said by an inconclusive stage
        verdict."""
        from ._checks import analysis_checks

        return analysis_checks(self, label, tolerances, horizon)

    def linear_window(self) -> int:
        """Index of the last save before the condensation where the linearisation at 0 holds
        (rate error at most 1% of ``mu1``), ``-1`` if none."""
        return _m.linear_window(
            self.ts,
            self.metrics["condensation_nonlinearity"],
            float(self.rates.condensation),
            float(self.stages.condensation.time),
        )

    def condensation_fit(self):
        """``(fit or None, bound)``: the growth rate of the projection on the unstable
        eigenspace at 0, fitted in the linear window, and the window's largest rate error."""
        return _m.condensation_fit(
            self.ts,
            self.metrics["condensation_amplitude"],
            self.metrics["condensation_nonlinearity"],
            float(self.rates.condensation),
            float(self.stages.condensation.time),
        )

    def score_angle(self, t_from: float | None = None, t_to: float | None = None) -> dict:
        """The angle of ``Phi`` to ``sign(c) pi pi^T`` and the linearisation's bound on it
        (``_measure.score_angle``) on the trajectory against ``sign(c)`` of the
        visited saddle, from the save nearest the saddle (default) to the departure (default;
        the end when attention never departed)."""
        return score_angle(
            self.ts,
            self.trajectory.W0,
            self.trajectory.WQ,
            self.trajectory.WK,
            self.chain.pi,
            float(self.rates.focus_visited),
            self.visited_saddle.model.W0,
            self.plateau()[0] if t_from is None else t_from,
            self._departure_or_end() if t_to is None else t_to,
            t_noise=float(self.stages.condensation.time),
        )

    def dilution_mode_growth(self) -> dict:
        """The growth rate of the dilution mode out of the saddle
        (``_measure.dilution_mode_growth``) from the save nearest the saddle to the departure."""
        return dilution_mode_growth(
            self.ts,
            self.metrics["gamma"],
            self.chain.pi,
            self.visited_saddle.model.W0,
            self.metrics["focus_rate_path"],
            float(self.rates.focus_visited),
            self.plateau()[0],
            self._departure_or_end(),
        )

    def first_attention_target(self, departure: float = 0.05) -> dict:
        """Which key the attention first moves onto: for every key ``k`` the attention it
        receives, ``f_k = sum_q pi_q w_qk`` (``pi_k`` under uniform attention), and the first
        save at which one of them has risen by the fraction ``departure`` of its room, ``f_k
        >= pi_k + departure (1 - pi_k)`` (for the most frequent key this is the focus stage's
        criterion). Returns ``time`` (``nan`` if none rose by the end), ``key`` (its index,
        ``-1`` if none), ``rank`` (0 = the most frequent key) and ``received`` (``f_k`` then).
        """
        pi = np.asarray(self.chain.pi, float)
        w = np.asarray(self.metrics["attention"], float)
        received = np.einsum("q,tqk->tk", pi, w)
        rose = received >= pi + departure * (1.0 - pi)
        hit = np.nonzero(rose.any(axis=1) & (np.asarray(self.ts) > 0))[0]
        if hit.size == 0:
            return {"time": float("nan"), "key": -1, "rank": -1, "received": float("nan")}
        i = int(hit[0])
        gain = np.where(rose[i], (received[i] - pi) / (1.0 - pi), -np.inf)
        k = int(np.argmax(gain))
        rank = int(np.nonzero(np.argsort(-pi, kind="stable") == k)[0][0])
        return {
            "time": float(self.ts[i]),
            "key": k,
            "rank": rank,
            "received": float(received[i, k]),
        }

    def embedding_pca(self, n_components: int = 2) -> np.ndarray:
        """PCA trajectories of the embedding rows ``W0[i, :](t)`` on the top principal axes of
        all rows at all times (one shared basis): ``(T, d, n_components)``."""
        return embedding_pca(self.trajectory.W0, n_components)

    def pca_stage_changes(self) -> dict:
        """The PCA picture of the embedding rows between the stages (PC1 change of the
        frequent and low-frequency rows from departure to new direction, PC2 spread at
        dilution and at the end)."""
        st = self.stages
        return _m.pca_stage_changes(
            self.ts,
            self.trajectory.W0,
            self.chain.pi,
            float(st.departure.time),
            float(st.new_direction.time),
            float(st.dilution.time),
        )

    def labelled_arrays(self) -> dict:
        """The measurements as ``xarray.DataArray`` objects, each with its dimensions named and
        its coordinates: the trajectory's ``W0`` and its :meth:`embedding_pca`, every metric
        but ``gamma`` (over ``time``, the saves ``ts``; ``query`` and ``key`` the token
        indices), the spectra of ``J`` at the origin and at the visited saddle (``eigenvalue``)
        and, when it was searched, the stall's (``tangential_exponent``,
        ``transverse_exponent``). Host-side; what ``jaxdyn.runs.Run.save_arrays`` takes."""
        import xarray as xr

        tokens = np.arange(self.chain.d)
        coords = {"time": np.asarray(self.ts), "token": tokens, "query": tokens, "key": tokens}
        arrays = {
            "W0": (("time", "token", "embedding"), self.trajectory.W0),
            "embedding_pca": (("time", "token", "component"), self.embedding_pca()),
            "spectrum_origin": (("eigenvalue",), self.spectrum_origin.eigenvalues),
            "spectrum_saddle": (("eigenvalue",), self.spectrum_saddle.eigenvalues),
        }
        if self.stall is not None:
            arrays["stall_tangential"] = (("tangential_exponent",), self.stall.tangential)
            arrays["stall_transverse"] = (("transverse_exponent",), self.stall.transverse)
        over_time = {"attention": ("query", "key"), "entropy_query": ("query",)}
        for name, values in self.metrics.items():
            if name != "gamma":
                axes = over_time.get(name, ("singular_value",) if name.startswith("sv_") else ())
                arrays[name] = (("time", *axes), values)
        return {
            name: xr.DataArray(
                np.asarray(values), dims=dims, coords={k: coords[k] for k in dims if k in coords}
            )
            for name, (dims, values) in arrays.items()
        }


def _condensation_projection(trajectory, spectrum, pi, P):
    """Projection on the unstable eigenspace at 0, the linearisation's rate error there, and
    ``||grad L||`` along the trajectory."""
    flat = jax.vmap(lambda m: ravel_pytree(m)[0])(trajectory)
    vals, vecs = spectrum.eigenvalues, spectrum.eigenvectors
    top = vals[0]
    coords = flat @ vecs
    amplitude = jnp.linalg.norm(coords * (vals >= top * (1 - 1e-8))[None, :], axis=1)
    grads = jax.vmap(lambda m: ravel_pytree(_loss_gradient(m, pi, P))[0])(trajectory)
    # J theta from J's eigen-decomposition at 0 (J = V diag(lambda) V^T, exact to eigh's
    # rounding): no second Hessian of the same point
    linear = (coords * vals[None, :]) @ vecs.T
    residual = jnp.linalg.norm(-grads - linear, axis=1)
    return amplitude, residual / jnp.maximum(amplitude, 1e-300), jnp.linalg.norm(grads, axis=1)


@eqx.filter_jit
def _closed_forms(pi, P, eps, m, m_attn):
    mu1 = condensation_rate(pi)
    saddle = unigram_saddle(pi, m, m_attn)
    c = _focus_rate(pi, P, saddle.gamma, saddle.beta)
    rate = 1.0 / mu1 + 1.0 / jnp.maximum(jnp.abs(c), 1e-12)
    t_stall = 2 * END_TIME_MARGIN * jnp.log(1.0 / eps) * rate
    return mu1, saddle, c, t_stall, STALL_HORIZON * t_stall


@eqx.filter_jit
def _initial_models(key, eps, d: int, m: int, m_attn: int, dtype):
    """The models every analysis starts from (one program: the random draws compile once)."""
    k_main, k_rank_one = jax.random.split(key)
    model0 = init_transformer(k_main, d, m, m_attn, eps, dtype=dtype)
    frozen0 = eqx.tree_at(lambda mm: (mm.WQ, mm.WK), model0, (model0.WQ * 0, model0.WK * 0))
    model1 = init_transformer(k_rank_one, d, 1, 1, eps, dtype=dtype)
    zero = jax.tree_util.tree_map(jnp.zeros_like, model0)
    return model0, frozen0, model1, zero


@eqx.filter_jit
def _horizon(stall: RankOneCriticalPoint | None, eps, t1, mu1, c, t_stall, num_saves: int):
    """``lambda_T`` (``nan`` unless the stall was searched and its root-find converged), the
    end time and the save times of the flow and of the attention-free flow."""
    if stall is None:
        lam_t = jnp.full_like(mu1, jnp.nan)
    else:
        lam_t = jnp.where(stall.point.status == Status.successful, stall.transverse_rate, jnp.nan)
    end = jnp.where(jnp.isfinite(t1), t1, default_end_time(eps, mu1, c, lam_t))
    return lam_t, end, log_save_times(end, num_saves), log_save_times(t_stall, num_saves)


@eqx.filter_jit
def _rank_one_start(frozen: OneLayerTransformer) -> OneLayerTransformer:
    return rank_one_part(jax.tree_util.tree_map(lambda x: x[-1], frozen))


@eqx.filter_jit
def _embed(visited: CriticalPoint, m: int, m_attn: int) -> CriticalPoint:
    return eqx.tree_at(lambda cp: cp.model, visited, embed_rank_one(visited.model, m, m_attn))


@eqx.filter_jit
def _measure(models, ts, spec0, pi, P, thresholds):
    metrics = _trajectory_metrics(models, pi, P)
    amplitude, nonlinearity, grad_norm = _condensation_projection(models, spec0, pi, P)
    metrics = dict(
        metrics,
        condensation_amplitude=amplitude,
        condensation_nonlinearity=nonlinearity,
        grad_norm=grad_norm,
    )
    departure, new_direction_ratio = thresholds
    stages = detect_stages(
        ts, metrics, pi, departure=departure, new_direction_ratio=new_direction_ratio
    )
    return metrics, stages


@eqx.filter_jit
def _rates(pi, P, mu1, c, lam_t, saddle, visited, spec0, spec_s, spec_v) -> Rates:
    alpha, gamma_v = embedding_profile(visited.model, pi)
    return Rates(
        condensation=mu1,
        condensation_jacobian=spec0.eigenvalues[0],
        focus=c,
        focus_jacobian=_signed_focus_eigenvalue(saddle.model, spec_s, pi),
        focus_visited=_signed_focus_eigenvalue(visited.model, spec_v, pi),
        focus_visited_formula=_focus_rate(pi, P, gamma_v, visited.model.W1.T @ alpha),
        transverse=lam_t,
    )


def _main_flow(model0, chain, ts, flow: dict, *, segmentable: bool):
    """The analysed flow. In a member that :func:`jaxdyn.sweep.run_sweep` traces, with a given
    end time, it is :func:`flow_problem`'s ``solve()``: the one solve that the engine continues
    in segments (the attention-free flow and the stall's solve are plain ``diffeqsolve`` calls,
    which it leaves as they are). Otherwise (called eagerly, under the caller's ``jit`` or
    ``vmap``, or with the default end time, whose horizon comes from the stall and would be
    recomputed in every segment) it is the jitted :func:`population_flow`: the same steps."""
    if segmentable and in_sweep():
        return flow_solution(flow_problem(model0, chain, ts, **flow).solve())
    return population_flow(model0, chain, ts, **flow)


def _analyse(
    chain,
    key,
    eps,
    t1,
    thresholds,
    *,
    m,
    m_attn,
    num_saves,
    rtol,
    atol,
    solver,
    max_steps,
    find_stall,
    fixed_end,
) -> FlowAnalysis:
    pi, P = chain.pi, chain.P
    # a few jitted functions, no eager operations between them (each would compile a program of
    # its own); repeated shapes (two flows, two root-finds, three spectra) compile once
    d, dtype = pi.shape[0], pi.dtype
    flow = dict(rtol=rtol, atol=atol, solver=solver, max_steps=max_steps)
    mu1, saddle, c, t_stall, t_stall_max = _closed_forms(pi, P, eps, m, m_attn)
    model0, frozen0, model1, zero = _initial_models(key, eps, d, m, m_attn, dtype)
    stall = (
        rank_one_critical_point(model1, chain, t_stall_max, max_steps=max_steps, root_tol=ROOT_TOL)
        if find_stall
        else None
    )
    lam_t, end, ts, ts_frozen = _horizon(stall, eps, t1, mu1, c, t_stall, num_saves)
    sol = _main_flow(model0, chain, ts, flow, segmentable=fixed_end)
    # the saddle the flow visits: the same flow with attention off (it stays off), run for
    # twice the default's time to reach the stall, its rank-one part polished by root-finding
    frozen = population_flow(frozen0, chain, ts_frozen, **flow)
    start = _rank_one_start(frozen.models)
    visited = _embed(_find_critical_point(start, pi, P, rtol=ROOT_TOL, atol=ROOT_TOL), m, m_attn)
    spec0 = _jacobian_spectrum(zero, pi, P)
    spec_s = _jacobian_spectrum(saddle.model, pi, P)
    spec_v = _jacobian_spectrum(visited.model, pi, P)
    metrics, stages = _measure(sol.models, ts, spec0, pi, P, thresholds)
    rates = _rates(pi, P, mu1, c, lam_t, saddle, visited, spec0, spec_s, spec_v)
    return FlowAnalysis(
        chain=chain,
        eps=jnp.asarray(eps, dtype),
        ts=ts,
        trajectory=sol.models,
        metrics=metrics,
        status=sol.status,
        num_steps=sol.num_steps,
        end_time=end,
        rates=rates,
        saddle=saddle,
        visited_saddle=visited,
        stall=stall,
        spectrum_origin=spec0,
        spectrum_saddle=spec_v,
        stages=stages,
    )


def analyse_flow(
    chain: MarkovChain,
    *,
    key: Key | None = None,
    m: int = 6,
    m_attn: int = 6,
    eps: float | Float[ArrayLike, ""] = 1e-3,
    t1: float | Float[ArrayLike, ""] | None = None,
    num_saves: int = 2000,
    rtol: float = 1e-7,
    atol: float = 1e-10,
    solver: diffrax.AbstractSolver | None = None,
    max_steps: int = 100_000,
    departure: float | Float[ArrayLike, ""] = 0.05,
    new_direction_ratio: float | Float[ArrayLike, ""] = 0.1,
    find_stall: bool = True,
) -> FlowAnalysis:
    """Analyse the population gradient flow of the one-layer transformer on ``chain``.

    Args:
        chain: a :class:`MarkovChain` (any row-stochastic ``P``; ``MarkovChain(P)`` computes
            and validates its stationary law).
        key: PRNG key of the initialisation (default ``jax.random.key(0)``).
        m: embedding width.
        m_attn: attention width ``m'``.
        eps: initialisation scale (entries i.i.d. ``N(0, eps^2)``).
        t1: end time; ``None`` for the default derived from the rates (module docstring).
        num_saves: save times (``0``, then log-spaced). Stages are read from the saves: a
            phase shorter than the spacing near its time (e.g. a short dilution) is missed.
        rtol: relative tolerance of the adaptive solver.
        atol: absolute tolerance of the adaptive solver.
        solver: a diffrax solver (default ``diffrax.Tsit5()``; :func:`stiff_solver` is the
            implicit one set up for stiff flows).
        max_steps: solver step budget (a flow that runs out gets that :class:`jaxdyn.Status`).
        departure: stage threshold of :func:`detect_stages`.
        new_direction_ratio: stage threshold of :func:`detect_stages`.
        find_stall: search the rank-one stall (``stall``, ``rates.transverse``). Needed by the
            default end time; with a given ``t1`` and no use for ``lambda_T``, ``False`` skips
            it (its flow and root-find are a large share of an analysis in large ``d``):
            ``stall`` is then ``None`` and ``lambda_T`` NaN.

    Returns:
        A :class:`FlowAnalysis`. Every array input may be traced (``eps``, ``t1``, ``P``,
        thresholds): ``jax.vmap`` over chains of one size compiles once. Inside
        :func:`jaxdyn.sweep.run_sweep`, a member calling it with a given ``t1`` has its flow
        continued in segments (straggler-free; focus_dilution.md, "analyse_flow in a sweep").
    """
    if not isinstance(chain, MarkovChain):
        raise TypeError(
            f"chain must be a MarkovChain (MarkovChain(P) for a transition matrix), got "
            f"{type(chain).__name__}"
        )
    pi = chain.pi
    if solver is not None and not isinstance(solver, diffrax.AbstractSolver):
        raise TypeError(f"solver must be a diffrax solver, got {solver!r}")
    if m < 2:
        raise ValueError(f"m must be >= 2 so that a new embedding direction can grow, got {m}")
    if m_attn < 1 or num_saves < 20:
        raise ValueError(f"need m_attn >= 1 and num_saves >= 20, got {m_attn}, {num_saves}")
    eps = require_in_interval("eps", eps, 0.0, 1.0, closed="neither")
    if t1 is None and not find_stall:
        raise ValueError("the default end time needs the stall: pass t1 or find_stall=True")
    fixed_end = t1 is not None
    t1 = jnp.nan if t1 is None else require_positive("t1", t1)
    key = jax.random.key(0) if key is None else key
    return _analyse(
        chain,
        key,
        jnp.asarray(eps, pi.dtype),
        jnp.asarray(t1, pi.dtype),
        (departure, new_direction_ratio),
        m=m,
        m_attn=m_attn,
        num_saves=num_saves,
        rtol=rtol,
        atol=atol,
        solver=solver,
        max_steps=max_steps,
        find_stall=find_stall,
        fixed_end=fixed_end,
    )


def _new_direction_signature(stages: Stages):
    return stages.new_direction_signature.time


def analyse_flow_until(
    chain: MarkovChain,
    reached: Callable[[Stages], Scalar] = _new_direction_signature,
    *,
    budget: float = 4.0,
    growth: float = 2.0,
    **kwargs,
) -> tuple[FlowAnalysis, str]:
    """:func:`analyse_flow` with a horizon that grows until a stage is reached or the budget
    is spent.

    ``reached(stages)`` is the time of the stage to reach (``nan`` while it is not): by default
    the new direction's signature; ``lambda st: st.departure.time`` runs until the attention
    has left the unigram saddle. Starts at ``t1`` (default: the end time derived from the
    rates); while that time is ``nan`` and the flow succeeded, the end time and the solver's
    step budget (``max_steps``) grow by ``growth``, up to ``budget`` times the first end time.
    Returns the last analysis and a sentence saying why the horizon stopped (stage reached,
    budget spent, or the flow's status), for the record of an inconclusive verdict. Host-side
    (a Python loop): inside ``jax.vmap`` or a sweep, call :func:`analyse_flow` with a fixed
    ``t1``.
    """
    if not budget >= 1 or not growth > 1:
        raise ValueError(f"need budget >= 1 and growth > 1, got {budget}, {growth}")
    kwargs = dict(kwargs)
    max_steps = int(kwargs.pop("max_steps", 100_000))
    a = analyse_flow(chain, max_steps=max_steps, **kwargs)
    limit = budget * float(a.end_time)
    kwargs.pop("t1", None)
    while True:
        end = float(a.end_time)
        t = float(reached(a.stages))
        if np.isfinite(t):
            return a, f"the stage was reached at t = {t:.4g} (horizon t1 = {end:.4g})"
        if Status.code(a.status) != Status.code(Status.successful):
            return a, f"the flow stopped before t1 = {end:.4g} ({Status.name(a.status)})"
        if end >= limit * (1 - 1e-12):
            return (
                a,
                f"the stage was not reached by the horizon budget t1 = {end:.4g} ({budget:g}x)",
            )
        t1 = min(growth * end, limit)
        max_steps = int(max_steps * t1 / end) + 1
        a = analyse_flow(chain, t1=t1, max_steps=max_steps, **kwargs)
