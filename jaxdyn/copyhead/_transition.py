"""Measuring a transition so that the measurement can fail.

copy_head.md, "What the theory predicts". Two detectors that assume nothing about the order
(the third, :func:`bimodality`, looks for two modes in samples):

- :func:`transition_order`: the largest step of the order parameter between neighbouring
  P values, as the P grid is refined (spacing h in ln P). A first-order jump stays finite
  (step ~ h^0), a continuous onset with amplitude ~ sqrt(P - P_c) shrinks like h^{1/2}, and a
  smooth crossover like h^1 (bounded slope). The exponent is fitted with its confidence
  interval (:func:`jaxdyn.fit_power_law`) and the order named by the nearest of 0, 1/2, 1.
- :func:`landscape_minima`: brute force on a fine coordinate grid of a 1-D reduced action:
  how many local minima exist at each P and the barrier between them; no Newton, no
  continuation, no bisection.
"""

from __future__ import annotations

import dataclasses
import enum

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from .._numerics import LinearFit, fit_power_law
from ._models import AbstractReducedModel, global_minimum


class TransitionOrder(enum.Enum):
    """The order of a transition of the order parameter with P.

    ``first``: a jump between coexisting minima; ``second``: a continuous onset (amplitude ~
    sqrt(P - P_c)) where a symmetric state loses stability; ``crossover``: neither (a smooth
    change, or no change at all). The value is the refinement exponent of each order: how the
    largest step between neighbouring P shrinks with the grid spacing h (h^0, h^(1/2), h^1).
    """

    first = 0.0
    second = 0.5
    crossover = 1.0

    def __str__(self) -> str:
        return self.name


ORDER_EXPONENTS = {o: o.value for o in TransitionOrder}


@dataclasses.dataclass(frozen=True)
class RefinementOrder:
    """Transition order read from how the largest step of an order parameter shrinks with the
    P-grid spacing.

    Attributes:
        spacing: grid spacings h in ln P, coarse to fine.
        largest_step: largest |x(P_{i+1}) - x(P_i)| on each grid.
        fit: power-law fit of ``largest_step`` against ``spacing``; ``fit.slope`` is the
            exponent (0: jump, 1/2: square-root onset, 1: smooth).
        order: the :class:`TransitionOrder` whose exponent is nearest to the fitted one
            (boundaries at 1/4 and 3/4).
        window: the P window (sequences) the grids were refined in (None for measured data).
    """

    spacing: np.ndarray
    largest_step: np.ndarray
    fit: LinearFit
    order: TransitionOrder
    window: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        """JSON-ready summary (exponent, its interval, order, steps)."""
        return {
            "order": self.order.name,
            "exponent": self.fit.slope,
            "exponent_ci": [self.fit.ci_low, self.fit.ci_high],
            "spacing": self.spacing.tolist(),
            "largest_step": self.largest_step.tolist(),
            "window": None if self.window is None else list(self.window),
        }


def classify_refinement(
    spacing: Float[ArrayLike, " k"], largest_step: Float[ArrayLike, " k"]
) -> RefinementOrder:
    """Fit largest_step ~ spacing^beta and name the order by the nearest of beta = 0, 1/2, 1.

    A step that is zero at every resolution (no transition in the window) is a crossover
    with no change at all; it is reported as ``TransitionOrder.crossover`` with a NaN exponent.
    """
    h = np.asarray(spacing, float)
    step = np.asarray(largest_step, float)
    if np.all(step <= 0):
        nan = float("nan")
        fit = LinearFit(nan, nan, nan, nan, nan, 0.95, 0, nan)
        return RefinementOrder(h, step, fit, TransitionOrder.crossover)
    fit = fit_power_law(h, step)
    order = min(TransitionOrder, key=lambda o: abs(o.value - fit.slope))
    return RefinementOrder(h, step, fit, order)


def largest_step(P: Float[ArrayLike, " k"], values: Float[ArrayLike, " k"]) -> float:
    """max_i |x(P_{i+1}) - x(P_i)| with the points sorted by P (NaN values skipped)."""
    P, x = np.asarray(P, float), np.asarray(values, float)
    keep = np.isfinite(x)
    order = np.argsort(P[keep])
    x = x[keep][order]
    return float(np.max(np.abs(np.diff(x)))) if x.size > 1 else float("nan")


def refinement_grids(
    P_lo: float | int, P_hi: float | int, levels: tuple[int, ...], offsets: int
) -> list[list[np.ndarray]]:
    """For each level n, ``offsets`` log-spaced grids of n + 1 points with spacing
    h = ln(P_hi / P_lo) / n, shifted by h k / offsets (k = 0..offsets-1): the largest step
    over the shifted grids does not depend on where the transition falls between points."""
    grids = []
    for n in levels:
        h = np.log(P_hi / P_lo) / n
        grids.append([P_lo * np.exp(h * (np.arange(n + 1) + k / offsets)) for k in range(offsets)])
    return grids


# P values per call of the compiled global-minimum scan: every call of _global_order pads its
# P values to a multiple of this, so one program serves all grids of a model type.
_ORDER_CHUNK = 256


@eqx.filter_jit
def _global_order_chunk(model: AbstractReducedModel, Ps, key: str):
    f = lambda P: model.order(global_minimum(model, P).x)[key]
    return jax.lax.map(f, Ps, batch_size=32)


def _global_order(model: AbstractReducedModel, Ps: np.ndarray, key: str) -> np.ndarray:
    """``key`` of the global minimum at each P (one compiled program per model type)."""
    Ps = np.asarray(Ps, float).reshape(-1)
    n = Ps.size
    padded = np.concatenate([Ps, np.full((-n) % _ORDER_CHUNK, Ps[-1])])
    out = [
        np.asarray(_global_order_chunk(model, jnp.asarray(chunk), key))
        for chunk in padded.reshape(-1, _ORDER_CHUNK)
    ]
    return np.concatenate(out)[:n]


def _least_smooth_cell(model, P_min: float, P_max: float, n: int, key: str) -> int:
    """Index i of the coarse cell [P_i, P_{i+1}] (n log-spaced points) where the largest step
    shrinks least from a 4-fold to a 16-fold split of the cell (local refinement exponent:
    0 for a jump, 1/2 for a square-root onset, 1 for a smooth change); among cells within
    0.05 of the smallest exponent, the one with the largest change."""
    fine = np.geomspace(P_min, P_max, 16 * (n - 1) + 1)
    x = _global_order(model, fine, key).reshape(-1)
    sub16 = np.abs(np.diff(x)).reshape(n - 1, 16).max(axis=1)
    sub4 = np.abs(x[4::4] - x[:-4:4]).reshape(n - 1, 4).max(axis=1)
    change = np.abs(x[16::16] - x[:-16:16])
    live = change > 1e-6 * max(float(change.max()), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.where(live, np.log(sub4 / sub16) / np.log(4.0), np.inf)
    near = np.flatnonzero(exponent <= exponent.min() + 0.05)
    return int(near[np.argmax(change[near])])


def transition_order(
    model: AbstractReducedModel,
    P_min: float | int,
    P_max: float | int,
    *,
    levels: tuple[int, ...] = (16, 32, 64, 128, 256),
    offsets: int = 8,
    coarse_points: int = 40,
    fit_levels: int = 4,
    key: str = "amplitude",
) -> RefinementOrder:
    """The order of the reduced model's transition (the one classifier): grid refinement of
    its global minimum, P in sequences.

    The window is the coarse cell (``coarse_points`` log-spaced on [P_min, P_max]) where the
    step of the global minimum's ``key`` shrinks least under splitting (the least smooth
    place), widened by one cell on either side. Within it, grids of ``levels`` intervals, each
    shifted ``offsets`` times (:func:`refinement_grids`), give the largest step per
    spacing; the finest ``fit_levels`` are fitted (the asymptotic regime) and classified by
    :func:`classify_refinement`. Returns the result (all levels in its arrays, the window in
    ``window``), whose ``order`` is a :class:`TransitionOrder`.
    """
    coarse = np.geomspace(P_min, P_max, coarse_points)
    i = _least_smooth_cell(model, P_min, P_max, coarse_points, key)
    lo, hi = coarse[max(i - 1, 0)], coarse[min(i + 2, coarse_points - 1)]
    grids = refinement_grids(lo, hi, levels, offsets)
    allP = np.concatenate([g for level in grids for g in level])
    values = _global_order(model, allP, key)
    steps, start = [], 0
    for level in grids:
        best = 0.0
        for g in level:
            best = max(best, largest_step(g, values[start : start + g.size]))
            start += g.size
        steps.append(best)
    spacing = np.array([np.log(hi / lo) / n for n in levels])
    fitted = classify_refinement(spacing[-fit_levels:], np.asarray(steps)[-fit_levels:])
    return RefinementOrder(
        spacing, np.asarray(steps), fitted.fit, fitted.order, (float(lo), float(hi))
    )


def _action_grid(model: AbstractReducedModel, Ps, coordinates) -> np.ndarray:
    """S[i, j] = action of the 1-D reduced model at coordinates[j] and Ps[i]."""
    return np.asarray(_action_rows(model, jnp.asarray(Ps), jnp.asarray(coordinates)[:, None]))


@eqx.filter_jit
def _action_rows(model: AbstractReducedModel, Ps, xs):
    return jax.vmap(lambda P: jax.vmap(lambda x: model.action(x, P))(xs))(Ps)


def landscape_minima(
    model: AbstractReducedModel,
    Ps: Float[ArrayLike, " k"],
    coordinates: Float[ArrayLike, " m"],
) -> tuple[np.ndarray, np.ndarray]:
    """Brute force on a 1-D reduced model: the action on ``coordinates`` at every P.

    Returns, per P, the number of strict local minima on the grid and the barrier between the
    outermost two (the action's maximum between them minus the higher of the two; 0 with one
    minimum).
    """
    S = _action_grid(model, Ps, coordinates)
    minima = (S[:, 1:-1] < S[:, :-2]) & (S[:, 1:-1] < S[:, 2:])
    counts = minima.sum(axis=1)
    barrier = np.zeros(len(counts))
    for k in np.flatnonzero(counts >= 2):
        idx = np.flatnonzero(minima[k]) + 1
        barrier[k] = np.max(S[k, idx[0] : idx[-1] + 1]) - max(S[k, idx[0]], S[k, idx[-1]])
    return counts, barrier


def brute_force_coexistence(
    model: AbstractReducedModel,
    P_min: float | int,
    P_max: float | int,
    coordinates: Float[ArrayLike, " m"],
    *,
    n_P: int = 400,
    zooms: int = 2,
) -> tuple[bool, tuple[float, float] | None, float]:
    """Whether two minima of a 1-D reduced model coexist near its transition, by brute force.

    Scans n_P log-spaced P on [P_min, P_max], zooms ``zooms - 1`` times to x1.1 either side of
    the largest jump of the grid argmin, and reports (two minima found, their P window, the
    largest barrier between them).
    """
    d = np.asarray(coordinates)
    for _ in range(zooms):
        Ps = np.geomspace(P_min, P_max, n_P)
        S = _action_grid(model, Ps, d)
        i = int(np.argmax(np.abs(np.diff(d[np.argmin(S, axis=1)]))))
        P_min, P_max = Ps[i] / 1.1, Ps[i] * 1.1
    counts, barrier = landscape_minima(model, Ps, d)
    two = counts >= 2
    if not two.any():
        return False, None, 0.0
    return True, (float(Ps[two][0]), float(Ps[two][-1])), float(barrier.max())


def crossover_point(
    P: Float[ArrayLike, " k"],
    c1: Float[ArrayLike, " k"],
    cG: Float[ArrayLike, " k"],
    weight: float | int,
    P_c: float | int,
) -> float:
    """First P above the onset P_c where weight * c_G >= c_1 (log-linear interpolation), or
    NaN when the copy weight never overtakes pooling on the grid (copy_head.md: "pool first,
    then cross over"; ``weight`` = 1 or sqrt(L) for the two conventions)."""
    P = np.asarray(P, float)
    d = weight * np.asarray(cG, float) - np.asarray(c1, float)
    above = P > 1.01 * P_c
    idx = np.flatnonzero((d[:-1] < 0) & (d[1:] >= 0) & above[:-1])
    if idx.size == 0:
        return float("nan")
    i = idx[0]
    t = d[i] / (d[i] - d[i + 1])
    return float(np.exp(np.log(P[i]) + t * (np.log(P[i + 1]) - np.log(P[i]))))


@eqx.filter_jit
def _copy_excess(model: AbstractReducedModel, P, weight):
    o = model.order(global_minimum(model, P).x)
    return weight * o["c_G"] - o["c_1"]


def crossover(
    model: AbstractReducedModel,
    P_c: float | int,
    *,
    weight: float | int = 1.0,
    P_max_factor: float = 1e6,
    n_P: int = 60,
    iterations: int = 50,
) -> float:
    """The crossover of a linear head: the first P above the onset P_c where the global
    minimum's copy weight overtakes pooling, weight * c_G = c_1 (copy_head.md: "pool first,
    then cross over"; ``weight`` = 1 or sqrt(L) for the two conventions), P in sequences.

    Bracketed on ``n_P`` log-spaced points over (1.01 P_c, P_max_factor P_c], then bisected
    ``iterations`` times in ln P (a root find: its resolution is the bracket over 2^iterations,
    not a grid spacing). NaN when the copy weight never overtakes pooling in the range."""
    Ps = np.geomspace(1.01 * P_c, P_max_factor * P_c, n_P)
    w = jnp.asarray(weight, dtype=jnp.result_type(float))
    d = np.array([float(_copy_excess(model, jnp.asarray(P), w)) for P in Ps])
    idx = np.flatnonzero((d[:-1] < 0) & (d[1:] >= 0))
    if idx.size == 0:
        return float("nan")
    lo, hi = np.log(Ps[idx[0]]), np.log(Ps[idx[0] + 1])
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if float(_copy_excess(model, jnp.asarray(np.exp(mid)), w)) < 0:
            lo = mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))
