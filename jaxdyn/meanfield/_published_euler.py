"""A faithful NumPy re-implementation of the published projected-Euler loop of the paper's rank
histograms (transformer_pde.md, "The paper's numerical experiments").

Projected explicit Euler on the covariance ODE ``dSigma/dt = F(Sigma)``:
``Sigma <- P(Sigma + h F(Sigma))``, ``P`` replacing negative eigenvalues by ``1e-14``. At each
step ``|F(Sigma)|_F`` is taken before the update; after the update the run stops as converged
if that norm was below ``tol_low``, or as diverged if ``tr Sigma > tol_high``. The limiting rank
counts the eigenvalues above 0.1 of the state *before* the final update.

It is deliberately a plain Python loop over runs and steps, as published: it is the reference
the JAX solvers are compared with run by run, and the baseline of
``benchmarks/bench_pde_ranks.py``. Outcomes are :class:`jaxdyn.Status` codes:
``steady_state`` (converged), ``blowup`` (diverged), ``max_steps_reached``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from jaxdyn._status import Status, status_code

from ._paper_inputs import PaperRankInputs, RankPanelSettings

CONVERGED = status_code(Status.steady_state)
DIVERGED = status_code(Status.blowup)
NOT_FINISHED = status_code(Status.max_steps_reached)


def paper_softmax_rhs(Sigma: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """``V Sigma A Sigma + transpose``, ``A = K^T Q / sqrt(d)`` (the paper's softmax ODE)."""
    A = K.T @ Q / np.sqrt(Q.shape[1])
    M = V @ Sigma @ A @ Sigma
    return M + M.T


def paper_l2_rhs(Sigma: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """``2 V Sigma (I + 2 K^T K Sigma)^{-1} A Sigma + transpose`` (the paper's L2 ODE)."""
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    M = 2.0 * V @ Sigma @ np.linalg.inv(np.eye(d) + 2.0 * K.T @ K @ Sigma) @ A @ Sigma
    return M + M.T


PAPER_RHS = {"softmax": paper_softmax_rhs, "l2": paper_l2_rhs}


def _softmax_rhs_of(Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """:func:`paper_softmax_rhs` with its constant ``A`` computed once: the same operations in
    the same order on the same operands, so every step has the same bits."""
    A = K.T @ Q / np.sqrt(Q.shape[1])

    def rhs(Sigma):
        M = V @ Sigma @ A @ Sigma
        return M + M.T

    return rhs


def _l2_rhs_of(Q: np.ndarray, K: np.ndarray, V: np.ndarray):
    """:func:`paper_l2_rhs` with its constants computed once (``2.0 * V @ ...`` and
    ``2.0 * K.T @ K @ ...`` associate from the left, so ``2.0 * V`` and ``2.0 * K.T @ K`` are
    the operands the published expression multiplies): the same bits every step."""
    d = Q.shape[1]
    A = K.T @ Q / np.sqrt(d)
    eye, two_v, two_ktk = np.eye(d), 2.0 * V, 2.0 * K.T @ K

    def rhs(Sigma):
        M = two_v @ Sigma @ np.linalg.inv(eye + two_ktk @ Sigma) @ A @ Sigma
        return M + M.T

    return rhs


_RHS_OF = {"softmax": _softmax_rhs_of, "l2": _l2_rhs_of}


@dataclasses.dataclass(frozen=True)
class EulerResult:
    """One projected-Euler run.

    Attributes:
        Sigma: the state before the final update (converged runs) or the last state.
        status: a :class:`jaxdyn.Status` code (``steady_state``, ``blowup``,
            ``max_steps_reached``).
        steps: updates made.
        t: ``steps * dt``.
        projected: updates that produced a negative eigenvalue (replaced by the floor).
    """

    Sigma: np.ndarray
    status: int
    steps: int
    t: float
    projected: int = 0

    @property
    def converged(self) -> bool:
        """Whether the run stopped on ``|F|_F < tol_low``."""
        return self.status == CONVERGED


def projected_euler(
    rhs: Callable[[np.ndarray], np.ndarray],
    Sigma0: np.ndarray,
    *,
    dt: float,
    tol_low: float,
    tol_high: float = 1e3,
    max_steps: int = 1_000_000,
    floor: float = 1e-14,
) -> EulerResult:
    """The published integrator ``Sigma <- P(Sigma + dt rhs(Sigma))`` (see the module docstring).

    Args:
        rhs: ``Sigma -> dSigma/dt`` (NumPy).
        Sigma0: initial covariance.
        dt: step size.
        tol_low: converged when ``|rhs|_F`` before a step is below it.
        tol_high: diverged when ``tr Sigma`` after a step exceeds it.
        max_steps: steps before giving up (status ``max_steps_reached``).
        floor: value given to negative eigenvalues by the projection.

    Returns:
        An :class:`EulerResult`; a converged run returns the state before its final update.
    """
    Sigma = np.array(Sigma0, dtype=float)
    projected = 0
    eigh = np.linalg.eigh
    # The loop is the benchmarks' baseline and pde-ranks' reference: per step only the
    # operations of the published loop, written with the fewest Python calls (|F|_F as
    # sqrt(f . f) over the flattened F is how np.linalg.norm computes it; Sigma.trace() is
    # np.trace): the same bits, about a third fewer interpreter calls.
    for step in range(1, max_steps + 1):
        F = rhs(Sigma)
        f = F.ravel()
        norm = np.sqrt(f.dot(f))
        before = Sigma
        w, U = eigh(Sigma + dt * F)
        negative = w[0] < 0
        if negative:
            projected += 1
            w = np.where(w < 0, floor, w)
        Sigma = (U * w) @ U.T
        if norm < tol_low:
            return EulerResult(before, CONVERGED, step, step * dt, projected)
        if Sigma.trace() > tol_high:
            return EulerResult(Sigma, DIVERGED, step, step * dt, projected)
    return EulerResult(Sigma, NOT_FINISHED, max_steps, max_steps * dt, projected)


@dataclasses.dataclass(frozen=True)
class RankAttempts:
    """The published attempt loop of one panel: one entry per attempt made, in order.

    Attributes:
        run: run index paired with each attempt (``Q, V`` entry).
        attempt: attempt index (``Sigma_0`` entry).
        status: :class:`jaxdyn.Status` code of each attempt.
        rank: limiting rank of converged attempts (``-1`` otherwise).
        steps: Euler steps of each attempt.
        projected: steps whose update had a negative eigenvalue (set to the floor).
        seconds: wall time of each attempt (the loop is the benchmarks' baseline).
    """

    run: np.ndarray
    attempt: np.ndarray
    status: np.ndarray
    rank: np.ndarray
    steps: np.ndarray
    projected: np.ndarray
    seconds: np.ndarray

    @property
    def converged(self) -> np.ndarray:
        """Mask of the attempts that converged (the panel's runs)."""
        return self.status == CONVERGED


def limiting_rank_numpy(Sigma: np.ndarray, threshold: float = 0.1) -> int:
    """Number of eigenvalues of ``Sigma`` above ``threshold`` (NumPy)."""
    return int(np.sum(np.linalg.eigvalsh(Sigma) > threshold))


def published_rank_attempts(
    inputs: PaperRankInputs,
    settings: RankPanelSettings,
    attention: str,
    *,
    runs: int | None = None,
    dt: float | None = None,
) -> RankAttempts:
    """Run the published attempt loop of one panel with :func:`projected_euler`.

    Attempt ``a`` is paired with the current run index ``r``; the index advances only when the
    attempt converges, until ``runs`` runs have converged or the attempts run out.

    Args:
        inputs: the panel's draws (:func:`jaxdyn.meanfield.paper_rank_inputs`).
        settings: the panel's integrator settings.
        attention: ``"softmax"`` or ``"l2"``.
        runs: run indices to fill (default: all of ``inputs``).
        dt: step size replacing ``settings.dt`` (e.g. ``settings.dt / 20``).

    Returns:
        A :class:`RankAttempts`.
    """
    rhs_of = _RHS_OF[attention]
    runs = inputs.Q.shape[0] if runs is None else runs
    rows: list[tuple[int, int, int, int, int, int]] = []
    seconds: list[float] = []
    r = 0
    for a in range(min(settings.attempts, inputs.Sigma0.shape[0])):
        if r == runs:
            break
        Q, K, V = inputs.Q[r], inputs.K[r], inputs.V[r]
        start = time.perf_counter()
        res = projected_euler(
            rhs_of(Q, K, V),
            inputs.Sigma0[a],
            dt=settings.dt if dt is None else dt,
            tol_low=settings.tol_low,
            tol_high=settings.tol_high,
            max_steps=settings.max_steps,
            floor=settings.floor,
        )
        rank = limiting_rank_numpy(res.Sigma, settings.threshold) if res.converged else -1
        seconds.append(time.perf_counter() - start)
        rows.append((r, a, res.status, rank, res.steps, res.projected))
        r += int(res.converged)
    cols = np.array(rows, dtype=np.int64).reshape(-1, 6).T
    return RankAttempts(*(c.astype(np.int32) for c in cols), seconds=np.array(seconds))


def _run_constants(inputs: PaperRankInputs, attention: str) -> tuple[np.ndarray, ...]:
    """Per run index, the constants :func:`_softmax_rhs_of` / :func:`_l2_rhs_of` hoist out of
    the step, by the same expressions (so with the same bits), stacked over runs."""
    d = inputs.Q.shape[-1]
    rows = []
    for Q, K, V in zip(inputs.Q, inputs.K, inputs.V, strict=True):
        A = K.T @ Q / np.sqrt(d)
        rows.append((V, A) if attention == "softmax" else (2.0 * V, A, 2.0 * K.T @ K))
    return tuple(np.stack(c) for c in zip(*rows, strict=True))


def _stacked_rhs(attention: str, constants: tuple[np.ndarray, ...], Sigma: np.ndarray):
    """The published right-hand side of a stack of states, each with its run's constants:
    ``np.matmul`` and ``np.linalg.inv`` apply the 2-D routines to every matrix of a stack, so
    each state's ``F`` has the bits of the loop's."""
    if attention == "softmax":
        V, A = constants
        M = V @ Sigma @ A @ Sigma
    else:
        two_v, A, two_ktk = constants
        eye = np.eye(Sigma.shape[-1])
        M = two_v @ Sigma @ np.linalg.inv(eye + two_ktk @ Sigma) @ A @ Sigma
    return M + np.swapaxes(M, -1, -2)


def stacked_rank_attempts(
    panels: Sequence[tuple[PaperRankInputs, RankPanelSettings]],
    attention: str,
    *,
    runs: int | None = None,
    lanes: int = 256,
    stagger: int = 32,
    suspect_after: int = 2048,
    log: Callable[[str], None] | None = None,
) -> list[RankAttempts]:
    """The attempts of :func:`published_rank_attempts` for panels of one attention and
    dimension, with the same bits, stepped as stacks.

    Up to ``lanes`` attempts, of any of the panels, advance together, each step of all of them
    one NumPy call per operation of :func:`projected_euler` (the published loop makes those
    calls once per step of each attempt). Every matrix of a stack goes through the same
    routine as in the loop (``np.matmul``, ``eigh`` and ``inv`` apply the 2-D routines matrix
    by matrix), so every attempt's status, steps, limiting rank and projections equal the
    loop's (tested against it).

    Which run index an attempt pairs with depends on whether the attempts before it
    converged, and an attempt's outcome depends only on its run index and its ``Sigma_0``
    entry. So ``(attempt, run index)`` pairs are stepped speculatively, and the published
    pairing is read off the finished ones. A panel's next attempt starts, on the guess that
    the one before it converges, once that one has run ``stagger`` steps: the attempts the
    published loop sets aside by divergence diverge within a few steps (at most 35 in the
    full published figures, 609 of them, against at least 46 and mostly thousands for a
    converging one), so the guess is then rarely wrong. The other attempts it sets aside
    run to the step limit (37 of 247 in the softmax, V = G^T G, d = 5 panel), and on that
    guess alone each of them would hold up its panel for the whole limit. So once the
    earliest attempt whose outcome is not known has run ``suspect_after`` steps, the attempts
    after it are also started on the guess that it does not converge (two run indices each),
    and those long attempts overlap. Pairs that finished outcomes rule out are dropped.

    Args:
        panels: ``(inputs, settings)`` of each panel, all of one dimension.
        attention: ``"softmax"`` or ``"l2"``.
        runs: run indices to fill per panel (default: all of each panel's ``inputs``).
        lanes: attempts stepped together.
        stagger: steps an attempt runs before the next one starts on the guess that it
            converges.
        suspect_after: steps the earliest unfinished attempt runs before the next one also
            starts on the guess that it does not converge.
        log: called with a line of progress (runs filled, lanes) about every 10 s.

    Returns:
        One :class:`RankAttempts` per panel, in order, whose ``seconds`` are NaN (the attempts
        are not timed one by one; :func:`published_rank_attempts` is the timed loop).
    """
    if lanes < 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    if not 1 <= stagger <= suspect_after:
        raise ValueError(
            f"need 1 <= stagger <= suspect_after, got stagger={stagger}, "
            f"suspect_after={suspect_after}"
        )
    dims = {inputs.Sigma0.shape[-1] for inputs, _ in panels}
    if len(dims) != 1:
        raise ValueError(f"the panels must share one dimension, got {sorted(dims)}")
    (d,) = dims
    n_panels = len(panels)
    settings = [s for _, s in panels]
    wanted = [inputs.Q.shape[0] if runs is None else runs for inputs, _ in panels]
    cap = [min(s.attempts, inputs.Sigma0.shape[0]) for inputs, s in panels]
    # Every panel's per-run constants in one stack: panel p's run r is row offset[p] + r.
    per_panel = [_run_constants(inputs, attention) for inputs, _ in panels]
    constants = tuple(np.concatenate(c) for c in zip(*per_panel, strict=True))
    offset = np.cumsum([0] + [inputs.Q.shape[0] for inputs, _ in panels])
    step_size = np.array([s.dt for s in settings])
    tol_low = np.array([s.tol_low for s in settings])
    tol_high = np.array([s.tol_high for s in settings])
    max_steps = np.array([s.max_steps for s in settings])
    floor = np.array([s.floor for s in settings])
    # Finished pairs: outcome[p][(attempt, run)] = (status, rank, steps, projected).
    outcome: list[dict[tuple[int, int], tuple[int, int, int, int]]] = [{} for _ in panels]
    # The first attempt of each panel whose published run index is known but not its outcome.
    resolved = [(0, 0)] * n_panels
    eigh = np.linalg.eigh
    lane = {
        "panel": np.zeros(0, np.int64),
        "run": np.zeros(0, np.int64),
        "attempt": np.zeros(0, np.int64),
        "Sigma": np.zeros((0, d, d)),
        "steps": np.zeros(0, np.int64),
        "projected": np.zeros(0, np.int64),
    }

    def resolve(p: int) -> None:
        a, r = resolved[p]
        while r < wanted[p] and a < cap[p] and (a, r) in outcome[p]:
            r, a = r + int(outcome[p][(a, r)][0] == CONVERGED), a + 1
        resolved[p] = (a, r)

    def plan(p: int, running: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
        """The panel's pairs worth stepping, in order of priority: from the resolved attempt
        on, every run index still possible for each attempt under the guesses."""
        a, r = resolved[p]
        first = a
        order: list[tuple[int, int]] = []
        candidates = {r}
        while candidates and a < cap[p]:
            following: set[int] = set()
            for run in sorted(candidates, reverse=True):
                if run >= wanted[p]:
                    continue  # on this branch the panel is full
                if (a, run) in outcome[p]:
                    following.add(run + int(outcome[p][(a, run)][0] == CONVERGED))
                    continue
                order.append((a, run))
                if running.get((a, run), 0) >= stagger:
                    following.add(run + 1)
                    if a == first and running[(a, run)] >= suspect_after:
                        following.add(run)
            candidates = following
            a += 1
        return order

    replan, started = True, time.perf_counter()
    last_log = started
    while True:
        if log is not None and time.perf_counter() - last_log > 10.0:
            last_log = time.perf_counter()
            filled = sum(r for _, r in resolved)
            log(
                f"stacked attempts: {filled}/{sum(wanted)} runs filled, "
                f"{lane['run'].size} lanes, {last_log - started:.0f} s"
            )
        if replan:
            running = {
                (int(p), int(a), int(r)): int(s)
                for p, a, r, s in zip(
                    lane["panel"], lane["attempt"], lane["run"], lane["steps"], strict=True
                )
            }
            orders = [
                plan(p, {(a, r): s for (q, a, r), s in running.items() if q == p})
                for p in range(n_panels)
            ]
            wanted_pairs = {(p, a, r) for p in range(n_panels) for a, r in orders[p]}
            keep = np.array([key in wanted_pairs for key in running], dtype=bool)
            lane = {k: v[keep] for k, v in lane.items()} if not keep.all() else lane
            free = lanes - lane["run"].size
            new: list[tuple[int, int, int]] = []
            # Round-robin over the panels, each panel's pairs in order of priority.
            queues = [
                [(p, a, r) for a, r in orders[p] if (p, a, r) not in running]
                for p in range(n_panels)
            ]
            for rank_in_queue in range(max((len(q) for q in queues), default=0)):
                if len(new) >= free:
                    break
                for q in queues:
                    if rank_in_queue < len(q) and len(new) < free:
                        new.append(q[rank_in_queue])
            if new:
                p_new, a_new, r_new = (np.array(c, np.int64) for c in zip(*new, strict=True))
                sigma0 = np.stack([panels[p][0].Sigma0[a] for p, a, _ in new]).astype(float)
                zeros = np.zeros(len(new), np.int64)
                for key, value in zip(
                    lane, (p_new, r_new, a_new, sigma0, zeros, zeros), strict=True
                ):
                    lane[key] = np.concatenate([lane[key], value])
            if lane["run"].size == 0:
                break
            p_of = lane["panel"]
            lane_constants = tuple(c[offset[p_of] + lane["run"]] for c in constants)
            lane_dt, lane_floor = step_size[p_of][:, None, None], floor[p_of][:, None]
            lane_low, lane_high, lane_max = tol_low[p_of], tol_high[p_of], max_steps[p_of]
            replan = False
        # One step of every lane: the operations of projected_euler, stacked.
        Sigma = lane["Sigma"]
        F = _stacked_rhs(attention, lane_constants, Sigma)
        f = F.reshape(F.shape[0], 1, d * d)
        norm = np.sqrt(f @ np.swapaxes(f, -1, -2))[:, 0, 0]
        w, U = eigh(Sigma + lane_dt * F)
        lane["projected"] = lane["projected"] + (w[:, 0] < 0)
        w = np.where(w < 0, lane_floor, w)
        lane["Sigma"] = (U * w[:, None, :]) @ np.swapaxes(U, -1, -2)
        lane["steps"] = steps = lane["steps"] + 1
        converged = norm < lane_low
        diverged = ~converged & (np.trace(lane["Sigma"], axis1=1, axis2=2) > lane_high)
        finished = converged | diverged | (steps >= lane_max)
        if finished.any():
            for i in np.flatnonzero(finished):
                p, r, a = (int(lane[k][i]) for k in ("panel", "run", "attempt"))
                if converged[i]:
                    status = CONVERGED
                    rank = limiting_rank_numpy(Sigma[i], settings[p].threshold)
                else:
                    status, rank = (DIVERGED if diverged[i] else NOT_FINISHED), -1
                outcome[p][(a, r)] = (status, rank, int(steps[i]), int(lane["projected"][i]))
            lane = {k: v[~finished] for k, v in lane.items()}
            for p in range(n_panels):
                resolve(p)
            replan = True
        elif ((steps == stagger) | (steps == suspect_after)).any():
            replan = True  # a guess can now be made past an attempt
    out = []
    for p in range(n_panels):
        rows, a, r = [], 0, 0
        while (a, r) in outcome[p] and a < resolved[p][0]:
            status, rank, steps_taken, projected = outcome[p][(a, r)]
            rows.append((r, a, status, rank, steps_taken, projected))
            r, a = r + int(status == CONVERGED), a + 1
        cols = np.array(rows, dtype=np.int64).reshape(-1, 6).T
        out.append(
            RankAttempts(*(c.astype(np.int32) for c in cols), seconds=np.full(len(rows), np.nan))
        )
    return out


def rank_histogram(ranks: np.ndarray, d: int) -> np.ndarray:
    """Counts of ranks ``0 .. (d + 1) // 2``; ranks above ``(d + 1) // 2`` (and negative codes)
    are left out, as in the published figures."""
    cap = (d + 1) // 2
    ranks = np.asarray(ranks)
    kept = ranks[(ranks >= 0) & (ranks <= cap)]
    return np.bincount(kept, minlength=cap + 1)
