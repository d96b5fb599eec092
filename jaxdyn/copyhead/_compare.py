"""Runs against the reduced theory: each run's optimisation error (Newton estimate), the
theory's value and solver error at a P, the effect a comparison must resolve, per-dataset
tables and the power of a comparison over datasets (copy_head.md, "Validation protocol").

Measurements only (numbers in, numbers out); the verdicts are :mod:`jaxdyn.copyhead.claims`'s.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _measure, _models, _transition
from ._convergence import newton_estimate
from ._models import AbstractReducedModel, LinearReduced, global_minimum

NEWTON_SAFETY = 2.0
"""The Newton estimate of a run's remaining error is first order: the second-order remainder
is bounded by doubling it (tests/test_copy_head_samplers.py tests the estimate to this bound)."""
ERROR_KEYS = ("c_1", "c_G", "test_loss")
BOOTSTRAP_KEYS = (*ERROR_KEYS, *(f"optimiser_error_{k}" for k in ERROR_KEYS))
POWER_FRACTION = 0.2
"""A comparison must resolve a fifth of the effect it is to detect."""


def theory_key(model: AbstractReducedModel, key: str) -> str:
    """The reduced model's name of a run's order parameter (softmax calls c_G a_G)."""
    if key == "test_loss" or isinstance(model, LinearReduced):
        return key
    return {"c_G": "a_G", "c_1": "a_1"}.get(key, key)


def optimiser_error(posterior, stats, params: dict, *, V: int) -> dict:
    """Newton estimate (:func:`jaxdyn.copyhead.newton_estimate`) of how far c_1, c_G and the
    population test loss of Adam's end point ``params`` are from the minimum of the joint
    energy it approaches: ``optimiser_error_<key>`` (+inf where not converged) and the
    conjugate-gradient residual."""

    def observable(q):
        o = _measure.measure(posterior, q["G"], q["W"], stats)
        loss = _measure.population_test_loss(posterior, q["G"], q["W"], V=V)
        return jnp.stack([o["c_1"], o["c_G"], loss])

    est = newton_estimate(lambda q: posterior.energy(q["W"], q["G"], stats), params, observable)
    bound = est.bound()
    out = {f"optimiser_error_{k}": bound[i] for i, k in enumerate(ERROR_KEYS)}
    out["newton_residual"] = est.residual
    return out


def mode_error(posterior, stats, mode, prefix: str = "mode") -> dict:
    """Newton estimate of how far c_1 and c_G of a mode found by descent on S(G) are from
    the exact local minimum: ``<prefix>_error_<key>`` (+inf where not converged)."""

    def observable(G):
        o = _measure.measure(posterior, G, None, stats)
        return jnp.stack([o["c_1"], o["c_G"]])

    bound = newton_estimate(lambda G: posterior.action(G, stats), mode, observable).bound()
    return {f"{prefix}_error_c_1": bound[0], f"{prefix}_error_c_G": bound[1]}


def optimiser_allowance(values) -> float:
    """Bound on the optimisation bias of a mean over datasets from their per-run Newton
    estimates: NEWTON_SAFETY x their mean (|mean(x - x*)| <= mean |x - x*|); +inf if any
    estimate is missing or not converged."""
    v = np.asarray(values, float)
    if v.size == 0 or not np.all(np.isfinite(v)):
        return float("inf")
    return NEWTON_SAFETY * float(np.mean(v))


def theory_test_loss(posterior, model, xs, Ps, L: int, V: int) -> np.ndarray:
    """Population test loss of the reduced states xs at Ps with their MAP readouts."""
    return np.asarray(_test_losses(posterior, model, jnp.asarray(xs), jnp.asarray(Ps), L, V))


@eqx.filter_jit
def _test_losses(posterior, model, xs, Ps, L: int, V: int):
    loss = lambda x, P: _measure.population_test_loss(posterior, model.scores(x, L), V=V, P=P)
    return jax.vmap(loss)(xs, Ps)


_THEORY_CHUNK = 8


def theory_at(posterior, model, key: str, Ps, L: int, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The reduced theory's ``key`` (an order parameter, or ``test_loss``) at each P from its
    global minimum there (not interpolated), and the reduced solver's error bound on it
    (:func:`jaxdyn.copyhead._models.minimum_error`); +inf where the minimum is not converged."""
    Ps = np.asarray(Ps, float).reshape(-1)
    if Ps.size == 0:
        return np.zeros(0), np.zeros(0)
    found = [global_minimum(model, p) for p in Ps]
    n, pad = Ps.size, (-Ps.size) % _THEORY_CHUNK  # one program for every key and P set
    xs = np.stack([np.asarray(f.x) for f in found] + [np.asarray(found[-1].x)] * pad)
    padded = np.concatenate([Ps, np.full(pad, Ps[-1])])
    tk = theory_key(model, key)
    values, errors = _theory_observables(
        posterior, model, jnp.asarray(xs), jnp.asarray(padded), L, V
    )
    values, errors = np.asarray(values[tk])[:n], np.asarray(errors[tk])[:n]
    converged = np.array([f.converged() for f in found])
    return values, np.where(converged, errors, np.inf)


@eqx.filter_jit
def _theory_observables(posterior, model, xs, Ps, L: int, V: int):
    def observables(x, P):
        out = dict(model.order(x))
        out["test_loss"] = _measure.population_test_loss(posterior, model.scores(x, L), V=V, P=P)
        return out

    def one(x, P):
        values = observables(x, P)
        stacked = lambda y: jnp.stack([v for _, v in sorted(observables(y, P).items())])
        error = _models.minimum_error(model, x, P, stacked)
        return values, dict(zip(sorted(values), error, strict=True))

    return jax.vmap(one)(xs, Ps)


def effect_size(P, P_t: float, first: bool, up, down, curve) -> float:
    """What a comparison with the theory must detect: for a first-order theory the jump
    between the coexisting branches ``up`` and ``down`` at P_t, otherwise the change of the
    global ``curve`` over the theory's P grid ``P``."""
    if first:
        lp, lP = np.log(P_t), np.log(P)
        return float(abs(np.interp(lp, lP, up) - np.interp(lp, lP, down)))
    return float(np.max(curve) - np.min(curve))


def theory_effect(model, diagram, P_t: float, first: bool, key: str, loss=()) -> float:
    """:func:`effect_size` of the order parameter ``key`` along a phase diagram of ``model``
    (its global curve and both branches), or of the test loss (``key == "test_loss"``:
    ``loss`` = the global minimum's, the uniform branch's and the copy branch's curves)."""
    if key == "test_loss":
        curve, up, down = loss
    else:
        tk = theory_key(model, key)
        curve, up, down = (getattr(diagram, f"order_{b}")[tk] for b in ("global", "up", "down"))
    return effect_size(diagram.P, P_t, first, up, down, curve)


def loss_branches(posterior, model, diagram, L: int, V: int) -> tuple[np.ndarray, ...]:
    """The population test loss (:func:`theory_test_loss`) along a phase diagram of
    ``model``: the global minimum's, the uniform branch's and the copy branch's."""
    states = (diagram.x_global, diagram.x_up, diagram.x_down)
    return tuple(theory_test_loss(posterior, model, x, diagram.P, L, V) for x in states)


def fall_theory(posterior, model, P, loss, width: float, levels: int, L: int, V: int):
    """The nested :func:`fall_grid` around the steepest fall of the theory's test ``loss``
    along ``P``, and the theory's test loss at its points (from the global minimum at each,
    not interpolated)."""
    grid = fall_grid(P, loss, width, levels)
    xs = np.stack([np.asarray(global_minimum(model, p).x) for p in grid])
    return grid, theory_test_loss(posterior, model, xs, grid, L, V)


def ladder(P_values, P_t: float, factor: float, window=None, widening: float = 1.0):
    """The ``P_values`` a comparison with the theory uses: farther than ``factor`` from the
    transition P_t (in ratio) and, given a coexistence ``window`` (lo, hi), outside
    (lo / widening, hi widening)."""
    P = np.asarray(P_values, float)
    P = P[np.abs(np.log(P / P_t)) > np.log(factor)]
    if window is not None:
        P = P[(P < window[0] / widening) | (P > window[1] * widening)]
    return P


def select_lower_energy(P, seeds, energy) -> np.ndarray:
    """Mask of the member with the lower finite ``energy`` of each (P, seed) group: the
    network's MAP among its starts."""
    keep = np.zeros(P.shape, bool)
    for p in np.unique(P):
        for s in np.unique(seeds):
            sel = np.flatnonzero((P == p) & (seeds == s) & np.isfinite(energy))
            if sel.size:
                keep[sel[np.argmin(energy[sel])]] = True
    return keep


def per_dataset(grid, P, seeds, values, keep) -> np.ndarray:
    """(dataset, grid point) table of the mean of ``values`` over the kept members."""
    return np.array(
        [
            [np.nanmean(values[np.isclose(P, p) & (seeds == s) & keep]) for p in grid]
            for s in np.unique(seeds)
        ]
    )


def level_steps(grid, levels: int, table) -> np.ndarray:
    """(row, level) largest step between neighbours on the nested grids of 2^k intervals
    (k = 1..levels) of ``grid`` (2^levels + 1 points)."""
    n = np.asarray(grid).size - 1
    return np.array(
        [
            [
                _transition.largest_step(grid[:: n // 2**k], v[:: n // 2**k])
                for k in range(1, levels + 1)
            ]
            for v in np.atleast_2d(table)
        ]
    )


def refinement(grid, levels: int, table) -> _transition.RefinementOrder:
    """The order of the curves ``table`` (rows; the median largest step per level) on the
    nested grids of ``grid``."""
    spacing = np.log(grid[-1] / grid[0]) / 2.0 ** np.arange(1, levels + 1)
    steps = np.median(level_steps(grid, levels, table), axis=0)
    return _transition.classify_refinement(spacing, steps)


def largest_drops(grid, P, branches, loss, errors):
    """Per row of ``loss`` on ``grid``: the largest drop between neighbours, the theory's
    drop between the same P (``branches`` = (uniform, copy) on the theory grid ``P``: the
    uniform branch below, the copy branch above) and the drop's optimisation error."""
    lp, dP = np.log(grid), np.log(P)
    up, down = (np.interp(lp, dP, b) for b in branches)
    out = []
    for v, e in zip(loss, errors, strict=True):
        i = int(np.nanargmax(np.abs(np.diff(v))))
        out.append((abs(v[i + 1] - v[i]), abs(up[i] - down[i + 1]), e[i] + e[i + 1]))
    return tuple(np.asarray(x) for x in zip(*out, strict=True))


def fall_grid(P, loss, width: float, levels: int) -> np.ndarray:
    """Nested grid (2^levels intervals) on [P_f / width, P_f width] around the steepest fall
    P_f of a test-loss curve (per unit ln P)."""
    i = int(np.argmin(np.diff(loss) / np.diff(np.log(P))))
    P_f = float(np.sqrt(P[i] * P[i + 1]))
    return np.geomspace(P_f / width, P_f * width, 2**levels + 1)


def fall_slopes(grid, table, theory) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per interval of ``grid``: the bootstrap-corrected slopes d loss / d ln P per dataset
    (``table(name)``: dataset x P of an output), the optimiser's allowance over the interval
    (its Newton estimates at both ends over the spacing), and the ``theory`` loss's slope."""
    h = np.diff(np.log(grid))
    slopes = np.diff(2.0 * table("test_loss") - table("bootstrap_test_loss"), axis=1) / h
    error = 2.0 * table("optimiser_error_test_loss") + table("bootstrap_optimiser_error_test_loss")
    opt = np.array([optimiser_allowance(e) for e in ((error[:, :-1] + error[:, 1:]) / h).T])
    return slopes, opt, np.diff(theory) / h


def critical_value(n: int) -> float:
    """Two-sided 99% Student-t quantile for a mean over n independent datasets (n - 1
    degrees of freedom): 9.9 standard errors for 3 datasets. NaN below two."""
    from scipy.stats import t

    return float(t.ppf(0.995, n - 1)) if n >= 2 else float("nan")


def standard_error(values) -> float:
    """Standard error of the mean of the finite values (NaN with fewer than two)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size >= 2 else float("nan")


def power_record(table, effect) -> dict:
    """The power of a comparison over datasets (rows of ``table``; columns: the P compared):
    per column the standard deviation and standard error over datasets, against
    ``POWER_FRACTION`` x ``effect``. ``sufficient``: every standard error is at most that;
    ``datasets_needed``: the fewest datasets (at least 3) that would be, at the measured SD."""
    x = np.atleast_2d(np.asarray(table, float))
    n = np.sum(np.isfinite(x), axis=0)
    cols = [c[np.isfinite(c)] for c in x.T]
    sd = np.array([np.std(c, ddof=1) if c.size >= 2 else np.nan for c in cols])
    se = sd / np.sqrt(np.maximum(n, 1))
    threshold = POWER_FRACTION * abs(float(effect))
    finite = bool(np.all(np.isfinite(se))) and threshold > 0
    needed = max(3, int(np.ceil(np.max((sd / threshold) ** 2) - 1e-12))) if finite else None
    return {
        "datasets": int(np.min(n)) if n.size else 0,
        "dof": int(max(np.min(n) - 1, 0)) if n.size else 0,
        "sd": sd.tolist(),
        "se": se.tolist(),
        "effect": abs(float(effect)),
        "threshold": threshold,
        "se_over_effect": (se / abs(float(effect))).tolist() if effect else None,
        "sufficient": finite and bool(np.all(se <= threshold)),
        "datasets_needed": needed,
    }


def corrected_comparison(P, seeds, mask, raw, boot, error, posterior, model, key, L, V) -> dict:
    """Runs (``mask``) against the reduced theory's global minimum at each of their P: per
    dataset the bootstrap-corrected value 2 x - x_boot (a fit to P sequences is biased at
    order 1 / P; the theory has population statistics), its standard error over datasets,
    the optimisation bound :func:`optimiser_allowance` of the runs' Newton estimates
    ``error`` (2 e + e_boot), and the theory with its solver's error (:func:`theory_at`)."""
    Ps = np.unique(P[mask])
    table = per_dataset(Ps, P, seeds, 2.0 * raw - boot, mask)
    at = lambda v, f: np.array([f(v[(P == p) & mask]) for p in Ps])
    theory, solver = theory_at(posterior, model, key, Ps, L, V)
    return {
        "P": Ps,
        "table": table,
        "uncorrected": at(raw, np.nanmean),
        "bootstrap_bias": at(boot - raw, np.nanmean),
        "corrected": np.nanmean(table, axis=0),
        "se": np.array([standard_error(col) for col in table.T]),
        "theory": theory,
        "optimiser_allowance": at(error, optimiser_allowance),
        "theory_solver_error": solver,
    }


def sampler_differences(P, start, keys, means) -> list[dict]:
    """Per order parameter, P and start: the difference of two samplers' chain means
    (``means[key]`` = (first, second), one value per chain) and its standard error over
    datasets."""
    rows = []
    for key in keys:
        first, second = means[key]
        for p in np.unique(P):
            for b in (0.0, 1.0):
                sel = (P == p) & (start == b)
                d = float(np.nanmean(first[sel]) - np.nanmean(second[sel]))
                se = float(np.hypot(standard_error(first[sel]), standard_error(second[sel])))
                rows.append({"key": key, "P": float(p), "start": b, "sgld_minus_mala": d, "se": se})
    return rows
