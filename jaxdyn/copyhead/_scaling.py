"""Where softmax is first order, and which scaling law P* follows (copy_head.md, "What the
reconstruction gives": the boundary V_c(L) [open]; P* ~ L ln^2 L [paper]).

- :func:`first_order_boundary`: V_c(L), the vocabulary at which the softmax first-order line
  ends, by bisection in ln V on the brute-force landscape (two coexisting minima of the reduced
  action near the transition, :func:`jaxdyn.copyhead.brute_force_coexistence`).
- :func:`compare_scaling_forms`: least-squares fits of candidate laws for P*(L, V), each
  linear in its coefficients and fitted to relative errors, ranked by AIC.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
from jaxtyping import ArrayLike, Float

from .._numerics import extrapolate_exponent
from ..evidence import local_exponents
from ._models import SoftmaxReduced
from ._phase import instability_point, linear_onset, locate_transition, phase_diagram
from ._transition import (
    TransitionOrder,
    brute_force_coexistence,
    crossover,
    crossover_point,
    transition_order,
)


def softmax_coexists(
    L: int | float,
    V: int | float,
    *,
    temperature: float = 1.0,
    sigma_w2: float = 1.0,
    sigma_g2: float = 1.0,
    P_range: tuple[float, float] = (1e-2, 1e5),
    n_delta: int = 6000,
) -> tuple[bool, tuple[float, float] | None, float]:
    """Brute-force coexistence of two softmax minima at (L, V): the reduced action on a fine
    Delta grid (spacing ~(3 ln L + 4) / n_delta) over ``P_range`` x T, zoomed three times
    around the jump. Returns (coexist, P window, largest barrier)."""
    model = SoftmaxReduced(L=L, V=V, temperature=temperature, sigma_w2=sigma_w2, sigma_g2=sigma_g2)
    deltas = np.linspace(-1.0, 3.0 * np.log(L) + 3.0, n_delta)
    lo, hi = P_range
    return brute_force_coexistence(model, lo * temperature, hi * temperature, deltas, zooms=3)


def first_order_boundary(
    L: int | float,
    V_lo: int | float,
    V_hi: int | float,
    *,
    iterations: int = 10,
    **kwargs,
) -> tuple[float, float]:
    """Bracket [V_a, V_b] of V_c(L): softmax first order (two coexisting minima) at V_a, not at
    V_b, after ``iterations`` bisections in ln V of the starting bracket [V_lo, V_hi]
    (``kwargs`` go to :func:`softmax_coexists`). Raises ValueError when the starting bracket
    does not straddle the boundary."""
    first = lambda V: softmax_coexists(L, V, **kwargs)[0]
    if not first(V_lo) or first(V_hi):
        raise ValueError(
            f"[V_lo, V_hi] = [{V_lo}, {V_hi}] does not bracket the end of the first-order line "
            f"at L = {L} (first order at V_lo: {first(V_lo)}, at V_hi: {first(V_hi)})"
        )
    for _ in range(iterations):
        mid = float(np.sqrt(V_lo * V_hi))
        if first(mid):
            V_lo = mid
        else:
            V_hi = mid
    return float(V_lo), float(V_hi)


Design = Callable[[np.ndarray, np.ndarray], np.ndarray]

SOFTMAX_FORMS: dict[str, tuple[str, Design]] = {
    "paper: P*_tokens = a L ln^2 L": ("linear", lambda L, V: np.stack([np.log(L) ** 2], -1)),
    "a ln^2 L + c": ("linear", lambda L, V: np.stack([np.log(L) ** 2, np.ones_like(L)], -1)),
    "reconstruction: a ln^2 L + b V^2 ln L / L + c": (
        "linear",
        lambda L, V: np.stack([np.log(L) ** 2, V**2 * np.log(L) / L, np.ones_like(L)], -1),
    ),
    "power law: C L^x V^y": (
        "log",
        lambda L, V: np.stack([np.ones_like(L), np.log(L), np.log(V)], -1),
    ),
}
"""Candidate laws for the softmax P* in sequences per unit temperature, P*_seq / T. "linear"
forms are fitted to relative errors; "log" forms to ln P*."""


@dataclasses.dataclass(frozen=True)
class FormFit:
    """One fitted scaling law.

    Attributes:
        name: the law.
        coefficients: fitted coefficients (for the power law: ln C, x, y).
        aic: n ln(RSS / n) + 2 k, RSS the sum of squared relative (or log) residuals.
        max_relative_error: max |prediction / data - 1|.
    """

    name: str
    coefficients: tuple[float, ...]
    aic: float
    max_relative_error: float


def compare_scaling_forms(
    L: Float[ArrayLike, "*shape"],
    V: Float[ArrayLike, "*shape"],
    P_star: Float[ArrayLike, "*shape"],
    forms: dict[str, tuple[str, Design]] | None = None,
) -> list[FormFit]:
    """Fit each candidate law to the finite positive P_star(L, V); best (lowest AIC) first."""
    L, V, y = (np.asarray(a, float).ravel() for a in (L, V, P_star))
    keep = np.isfinite(y) & (y > 0)
    L, V, y = L[keep], V[keep], y[keep]
    fits = []
    for name, (kind, design) in (SOFTMAX_FORMS if forms is None else forms).items():
        X = design(L, V)
        n, k = X.shape
        if n <= k:
            continue
        if kind == "log":
            coef, *_ = np.linalg.lstsq(X, np.log(y), rcond=None)
            pred = np.exp(X @ coef)
            resid = np.log(y) - X @ coef
        else:
            coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)
            pred = X @ coef
            resid = pred / y - 1.0
        rss = max(float(np.sum(resid**2)), 1e-300)
        fits.append(
            FormFit(
                name,
                tuple(float(c) for c in coef),
                n * np.log(rss / n) + 2 * k,
                float(np.max(np.abs(pred / y - 1.0))),
            )
        )
    return sorted(fits, key=lambda f: f.aic)


def per_axis_exponents(
    axis_values: Sequence[int | float], table: Float[ArrayLike, "a b"], *, axis: int = 0
) -> list:
    """Power-law fits (:func:`jaxdyn.fit_power_law`) of ``table`` against ``axis_values``
    along ``axis``, one per index of the other axis (None where fewer than 3 finite points)."""
    from .._numerics import fit_power_law

    table = np.asarray(table, float)
    if axis == 1:
        table = table.T
    fits = []
    for j in range(table.shape[1]):
        col = table[:, j]
        ok = np.isfinite(col) & (col > 0)
        fits.append(fit_power_law(np.asarray(axis_values)[ok], col[ok]) if ok.sum() >= 3 else None)
    return fits


def lnln_exponents(L: ArrayLike, P_star: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Local exponents of P* (sequences) in ln ln L (2 for L ln^2 L tokens, 1 for L ln L)
    between successive finite L, and the geometric mid-points of the pairs."""
    L, P = np.asarray(L, float), np.asarray(P_star, float)
    keep = np.isfinite(P) & (P > 0)
    L, P = L[keep], P[keep]
    return np.diff(np.log(P)) / np.diff(np.log(np.log(L))), np.sqrt(L[1:] * L[:-1])


def boundary_bracket(L: int, iterations: int, **kwargs) -> tuple[float, float]:
    """V_c(L) bracketed: V doubled from L until the first-order line has ended, then
    :func:`first_order_boundary`; ``(nan, 2)`` when softmax is not first order at V = 2."""
    V_lo, V_hi = 2.0, float(L)
    while softmax_coexists(L, V_hi, **kwargs)[0] and V_hi < 1e4:
        V_lo, V_hi = V_hi, 2.0 * V_hi
    if not softmax_coexists(L, V_lo, **kwargs)[0]:
        return float("nan"), V_lo
    return first_order_boundary(L, V_lo, V_hi, iterations=iterations, **kwargs)


def softmax_orders(L: int, V: int, P_min: float, P_max: float, n_P: int, **kwargs) -> dict:
    """The softmax reduced model at (L, V) (``kwargs``: temperature and prior variances)
    classified three independent ways: the landscape
    (:func:`jaxdyn.copyhead.locate_transition`), grid refinement
    (:func:`jaxdyn.copyhead.transition_order`) and brute force (:func:`softmax_coexists`);
    ``agree`` says whether all three find the same order, ``P_star`` is None unless first."""
    model = SoftmaxReduced(L=L, V=V, **kwargs)
    _, _, info = locate_transition(model, P_min, P_max, n_P)
    refined = transition_order(
        model, P_min, P_max, levels=(16, 32, 64, 128), offsets=4, fit_levels=3
    )
    coexist, window, barrier = softmax_coexists(L, V, **kwargs)
    first = TransitionOrder.first
    landscape_first = info["transition_order"] is first
    return {
        "landscape": info["transition_order"].name,
        "refinement": refined.order.name,
        "brute_force_two_minima": bool(coexist),
        "P_star": info["P_star"],
        "barrier": barrier,
        "refinement_exponent": refined.fit.slope,
        "window": window,
        "agree": (refined.order is first) == coexist and landscape_first == coexist,
        "first": landscape_first,
    }


def softmax_grid(Ls, Vs, P_min: float, P_max: float, n_P: int, log=print, **kwargs):
    """:func:`softmax_orders` at every (L, V) of ``Ls`` x ``Vs``: P* (NaN unless first order),
    the classifications by ``"L<L>_V<V>"`` and the (L, V) where they disagree (``"L=..,V=.."``);
    ``log`` gets each point's line."""
    P_star, orders, mismatches = np.full((len(Ls), len(Vs)), np.nan), {}, []
    for i, L in enumerate(Ls):
        for j, V in enumerate(Vs):
            found = softmax_orders(L, V, P_min, P_max, n_P, **kwargs)
            window, agree, first = (found.pop(k) for k in ("window", "agree", "first"))
            orders[f"L{L}_V{V}"] = found
            if not agree:
                mismatches.append(f"L={L},V={V}")
            if first:
                P_star[i, j] = found["P_star"]
            log(f"softmax L={L} V={V}: {found}, coexistence window {window}")
    return P_star, orders, mismatches


def tokens_exponents(Ls, Vs, P_star) -> dict:
    """Power-law exponents in L of the softmax P* in tokens (``P_star`` (L, V) in sequences,
    times L) per V (:func:`exponent_table`), each beside the local exponent of the paper's
    L ln^2 L at the L range's geometric centre, 1 + 2 / ln L."""
    paper = 1 + 2 / np.log(np.sqrt(min(Ls) * max(Ls)))
    table = exponent_table(Ls, P_star * np.asarray(Ls, float)[:, None], 0, "V", Vs)
    for v in table.values():
        if v is not None:
            v.pop("contains")
            v["paper_L_ln2L_local_exponent"] = paper
    return table


def linear_points(model, n_P: int) -> dict:
    """A linear reduced model's onset P_c (closed form), its relative difference from the
    bisected instability, and the crossovers c_G = c_1 (``raw``) and sqrt(L) c_G = c_1
    (``normalised``) on a phase diagram from P_c / 2 to 1000 P_c."""
    P_c = linear_onset(model)
    bis = instability_point(model, 1e-3 * P_c, 1e3 * P_c)
    d = phase_diagram(model, np.geomspace(0.5 * P_c, 1e3 * P_c, n_P))
    o = d.order_global
    return {
        "P_c": P_c,
        "bisection_error": abs((bis or np.nan) / P_c - 1),
        "raw": crossover_point(d.P, o["c_1"], o["c_G"], 1.0, P_c),
        "normalised": crossover_point(d.P, o["c_1"], o["c_G"], np.sqrt(model.L), P_c),
    }


def linear_table(reduced, Ls, Vs, n_P: int) -> dict[str, np.ndarray]:
    """:func:`linear_points` of ``reduced(L, V)`` at every (L, V) of ``Ls`` x ``Vs``: one
    (L, V) array per quantity."""
    points = [[linear_points(reduced(L, V), n_P) for V in Vs] for L in Ls]
    return {k: np.array([[p[k] for p in row] for row in points]) for k in points[0][0]}


def linear_exponents(Ls, Vs, table) -> dict[str, dict]:
    """Power-law exponents (:func:`exponent_table`) of a :func:`linear_table`: the onset's
    in V (candidates 3/2 and 2) and each crossover's in L (3/2) and in V (1/2), by name."""
    out = {"linear_onset_in_V_exponent": exponent_table(Vs, table["P_c"], 1, "L", Ls, (1.5, 2.0))}
    for name in ("raw", "normalised"):
        out[f"linear_crossover_{name}_in_L_exponent"] = exponent_table(
            Ls, table[name], 0, "V", Vs, (1.5,)
        )
        out[f"linear_crossover_{name}_in_V_exponent"] = exponent_table(
            Vs, table[name], 1, "L", Ls, (0.5,)
        )
    return out


def crossover_root(model, weight: float) -> float:
    """The crossover P of a linear reduced model (weight * c_G = c_1 of the global minimum)
    by 40 bisections in ln P above its onset."""
    return crossover(model, linear_onset(model), weight=weight, iterations=40)


def exponent_table(axis_values, table, axis: int, tag: str, labels, candidates=()) -> dict:
    """Power-law exponents of ``table`` along ``axis`` (:func:`per_axis_exponents`) per
    other-axis label, with their confidence intervals and the ``candidates`` each contains."""
    fits = per_axis_exponents(axis_values, table, axis=axis)
    return {
        f"{tag}{lab}": None
        if f is None
        else {
            "exponent": f.slope,
            "ci": [f.ci_low, f.ci_high],
            "contains": [x for x in candidates if f.contains(x)],
        }
        for lab, f in zip(labels, fits, strict=True)
    }


def softmax_P_star_along_L(
    reduced, Ls, P_min: float, P_max: float
) -> tuple[np.ndarray, np.ndarray]:
    """P* (sequences) and the jump of a_G of ``reduced(L)`` (a softmax reduced model) at each
    L where two minima coexist (NaN elsewhere). At large L the a_G jump shrinks while the
    logit gap still jumps by ~ ln L: P* is taken from the coexistence, not from the jump."""
    P, jump = np.full(len(Ls), np.nan), np.full(len(Ls), np.nan)
    for i, L in enumerate(Ls):
        _, _, info = locate_transition(reduced(L), P_min, P_max, 30)
        if info["coexistence"] is not None and info["P_star"] is not None:
            P[i], jump[i] = info["P_star"], info["jump"]
    return P, jump


def softmax_law(reduced, Ls, P_min: float, P_max: float) -> tuple[np.ndarray, dict]:
    """P* (sequences) of ``reduced(L)`` along ``Ls`` (:func:`softmax_P_star_along_L`) and
    its record against L ln^2 L (tokens): the a_G jump, the local exponents of P* in ln ln L
    (2 for the law) at the pairs' mid-points and their extrapolation to L -> infinity (value,
    error; :func:`jaxdyn.evidence.extrapolated_exponent`), and the local exponents in L of
    P* in tokens beside the law's own."""
    x = np.asarray(Ls, float)
    P, jump = softmax_P_star_along_L(reduced, Ls, P_min, P_max)
    m, mid = lnln_exponents(x, P)
    tokens = lambda y: local_exponents(x, y * x)[0].tolist()
    return P, {
        "L": list(Ls),
        "P_star_sequences": P.tolist(),
        "a_G_jump": jump.tolist(),
        "lnlnL_local_exponent": m.tolist(),
        "at_L": mid.tolist(),
        "tokens_local_exponent": tokens(P),
        "paper_tokens_local_exponent": tokens(np.log(x) ** 2),
        "extrapolated_lnlnL_exponent": list(extrapolate_exponent(mid, m)),
    }


def crossovers(reduced, Ls, V0, L1, Vs) -> tuple[np.ndarray, np.ndarray, dict]:
    """The linear crossover (:func:`crossover_root`) of ``reduced(L, V)`` along ``Ls`` at V0
    and along ``Vs`` at L1: each (2, n), raw (c_G = c_1) then normalised (sqrt(L) c_G = c_1),
    and their record: the raw P (sequences) and the local exponents of both conventions (3/2
    in L and 1/2 in V for the paper's laws)."""
    at = lambda L, V, w: crossover_root(reduced(L, V), w)
    along_L = np.stack([[at(L, V0, 1.0) for L in Ls], [at(L, V0, np.sqrt(L)) for L in Ls]])
    along_V = np.stack([[at(L1, V, 1.0) for V in Vs], [at(L1, V, np.sqrt(L1)) for V in Vs]])
    x, y = np.asarray(Ls, float), np.asarray(Vs, float)
    lex = lambda axis, P: local_exponents(axis, P)[0].tolist()
    record = dict(L=list(Ls), at_V=V0, V=list(Vs), at_L=L1)
    record.update(P_sequences_along_L=along_L[0].tolist(), P_sequences_along_V=along_V[0].tolist())
    record.update(L_local_exponents=lex(x, along_L[0]), V_local_exponents=lex(y, along_V[0]))
    record["normalised_L_local_exponents"] = lex(x, along_L[1])
    record["normalised_V_local_exponents"] = lex(y, along_V[1])
    return along_L, along_V, record
