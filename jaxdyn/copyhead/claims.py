"""The copy-head claims as evidence: decision functions of numbers (copy_head.md, "What the
theory predicts").

Each function takes measured numbers (never a run) and returns a
:class:`jaxdyn.evidence.Evidence` with its error model, so that the same decision can be fed a
counterfactual input (a P*(L) following another law, a smooth curve where a jump is claimed,
samples from a model without the transition) and must then not say ``holds``.

- :func:`transition_order`: a transition's order read by grid refinement against a predicted
  :class:`TransitionOrder` (inconclusive when the exponent's interval admits two orders).
- :func:`matches_theory`: per-dataset measurements against a theory curve, Student-t
  interval over datasets plus a derived bound (an optimiser's Newton estimate, a grid
  spacing), tested against the alternative "off by the effect to detect" (the jump, the drop).
- :func:`hysteresis`, :func:`bimodal_where_hysteretic`: discrete outcomes per P.
- :func:`copy_span_coverage`: the share of the attention pattern in span{U, S} above a level,
  with the standard error over datasets.
- :func:`square_root_onset`: amplitude ~ (P - P_c)^beta with beta = 1/2.
- :func:`scaling_law`, :func:`asymptotic_law`: a scaling law decided where its local exponent
  has settled (two successive pairs in the law's band), or from the exponent extrapolated to
  the limit with its error; otherwise ``inconclusive`` with the range that would decide.
- :func:`first_order_line_above_L`: the end of the softmax first-order line above V = L.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from jaxtyping import ArrayLike, Shaped

from ..evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_least,
    at_most,
    classified,
    extrapolated_exponent,
    within,
)
from ..evidence._decisions import _between_forms
from ._order import pooling_share
from ._scaling import lnln_exponents
from ._transition import RefinementOrder, TransitionOrder

__all__ = [
    "asymptotic_law",
    "bimodal_where_hysteretic",
    "copy_span_coverage",
    "crossover_law",
    "first_order_line_above_L",
    "hysteresis",
    "hysteresis_window",
    "laplace_shift",
    "loss_jump",
    "matches_theory",
    "minima_at_most",
    "onset_V2",
    "pooling_first",
    "powered",
    "scaling_form",
    "scaling_law",
    "softmax_P_star_asymptotic",
    "softmax_P_star_law",
    "square_root_onset",
    "switch_at_P_star",
    "transition_order",
]

Numbers = Shaped[ArrayLike, "..."] | Sequence[float | int]
"""An array of numbers, or a list of them."""


def transition_order(claim: str, predicted: TransitionOrder, refined: RefinementOrder) -> Evidence:
    """The order found by grid refinement (:func:`jaxdyn.copyhead.transition_order`)
    against ``predicted``. Decided when the refinement exponent is finite and its confidence
    interval contains the exponent of one order at most (else ``inconclusive``)."""
    fit = refined.fit
    admitted = [o for o in TransitionOrder if fit.ci_low <= o.value <= fit.ci_high]
    decided = bool(np.isfinite(fit.slope)) and len(admitted) <= 1
    if not np.isfinite(fit.slope) and np.all(np.asarray(refined.largest_step) <= 0):
        decided = True  # no change at all on any grid: a crossover without a transition
    return classified(
        claim,
        prediction=predicted,
        measured=refined.order,
        decided=decided,
        basis=f"largest step ~ spacing^beta, beta = {fit.slope:.3g} "
        f"(CI {fit.ci_low:.3g}..{fit.ci_high:.3g}); first 0, second 1/2, crossover 1",
    )


def matches_theory(
    claim: str,
    per_dataset: Numbers,
    theory: Numbers,
    effect: Numbers,
    *,
    bound: Numbers | float = 0.0,
    confidence: float = 0.99,
    basis: str = "",
    alternative: Numbers | None = None,
) -> Evidence:
    """Mean over datasets (rows) of each column against ``theory``, Student-t interval at
    ``confidence`` with the datasets' standard error, widened by the derived ``bound``
    (optimisation error, grid resolution). The alternative is the theory displaced by
    ``effect`` towards the measurement (the size of what the comparison must detect: a
    jump, a drop): ``holds`` needs the prediction inside every interval and the alternative
    outside one at least, i.e. enough datasets for the effect. Non-finite entries of a
    dataset are left out of its column; a column with fewer than two gives ``inconclusive``.
    A specific ``alternative`` (a value the claim is tested against) replaces the displaced
    theory."""
    x = np.atleast_2d(np.asarray(per_dataset, float))
    theory = np.broadcast_to(np.asarray(theory, float), x.shape[1:]).astype(float)
    effect = np.abs(np.broadcast_to(np.asarray(effect, float), theory.shape))
    bound = np.broadcast_to(np.asarray(bound, float), theory.shape)
    n = np.sum(np.isfinite(x), axis=0)
    mean = np.array(
        [np.mean(c[np.isfinite(c)]) if k else np.nan for c, k in zip(x.T, n, strict=True)]
    )
    se = np.array(
        [
            np.std(c[np.isfinite(c)], ddof=1) / np.sqrt(k) if k >= 2 else np.nan
            for c, k in zip(x.T, n, strict=True)
        ]
    )
    dof = int(max(np.min(n) - 1, 1))
    if not (np.all(n >= 2) and np.all(np.isfinite(se)) and np.all(np.isfinite(bound))):
        model = ErrorModel.standard_error(0.0, dof=dof, confidence=confidence, basis=basis)
        return Evidence(
            claim,
            theory,
            mean,
            model,
            Verdict.inconclusive,
            theory + effect,
            "fewer than two finite datasets or a non-finite bound somewhere",
        )
    # t SE + bound as one standard-error model: the effective SE carries the bound / t.
    from scipy import stats

    t = float(stats.t.ppf(0.5 + confidence / 2, dof))
    model = ErrorModel.standard_error(
        se + bound / t,
        dof=dof,
        confidence=confidence,
        basis=(basis + "; " if basis else "")
        + f"SE over {int(np.min(n))} datasets plus a derived bound (max {np.max(bound):.3g})",
    )
    if alternative is None:
        alternative = theory + np.where(mean >= theory, 1.0, -1.0) * effect
    else:
        alternative = np.broadcast_to(np.asarray(alternative, float), theory.shape)
    return within(
        claim, prediction=theory, measured=mean, error_model=model, alternative=alternative
    )


def hysteresis(claim: str, disagree_fraction: Numbers, *, expected: bool) -> Evidence:
    """Per P, the fraction of datasets whose two starts end in different minima. ``expected``
    True (coexisting minima): every dataset disagrees at every P; False: none at any P. An
    empty P range (no fraction) is ``inconclusive``."""
    f = np.asarray(disagree_fraction, float)
    f = f[np.isfinite(f)]
    measured = bool(np.all(f == 1.0)) if expected else bool(np.any(f > 0.0))
    return classified(
        claim,
        prediction=expected,
        measured=measured,
        decided=f.size > 0,
        basis="two starts per dataset; 'different' beyond half the theory's jump (0.1 x its "
        "amplitude without a jump); measured: every dataset differs at every P (expected "
        "True) or some dataset differs at some P (expected False)",
    )


def bimodal_where_hysteretic(claim: str, apart: Numbers, bimodal: Numbers) -> Evidence:
    """Per P where the datasets settled (all or none disagree): the pooled samples are
    bimodal (1) exactly where the chains from the two starts stay apart (1)."""
    h = np.asarray(apart, bool)
    b = np.asarray(bimodal, bool)
    return classified(
        claim,
        prediction=h.tolist(),
        measured=b.tolist(),
        decided=h.size > 0,
        basis="two Gaussian components, Ashman's D > 2, each >= 10% of the samples",
    )


def copy_span_coverage(
    claim: str,
    per_dataset: Numbers,
    *,
    level: float = 0.9,
    confidence: float = 0.99,
) -> Evidence:
    """The fraction of the attention pattern's non-uniform variance in span{U, S}
    (:func:`jaxdyn.copyhead.coverage`), one value per dataset, at least ``level`` ("the vast
    majority"): one-sided against the Student-t interval of the datasets' mean."""
    c = np.asarray(per_dataset, float)
    c = c[np.isfinite(c)]
    if c.size < 2:
        model = ErrorModel.standard_error(0.0, dof=1, confidence=confidence)
        return Evidence(
            claim, level, c.tolist(), model, Verdict.inconclusive, None, "fewer than 2 datasets"
        )
    se = float(np.std(c, ddof=1) / np.sqrt(c.size))
    model = ErrorModel.standard_error(
        se, dof=c.size - 1, confidence=confidence, basis=f"SE over {c.size} datasets"
    )
    return at_least(claim, measured=float(np.mean(c)), limit=level, error_model=model)


def square_root_onset(
    claim: str,
    eps: Numbers,
    amplitude: Numbers,
    *,
    tolerance: float = 1e-3,
) -> Evidence:
    """beta of amplitude ~ eps^beta (eps = (P - P_c) / P_c) from the fit of ln amplitude on
    ln eps and eps (the eps term absorbs the analytic correction), against 1/2; the
    alternative is a linear rise (beta = 1). ``tolerance``: the bound on beta's error from
    minima converged to ~1e-10 over eps in 1e-4..1e-2."""
    eps, amp = np.asarray(eps, float), np.asarray(amplitude, float)
    ok = (amp > 0) & np.isfinite(amp)
    beta = float("nan")
    if ok.sum() >= 3:
        design = np.stack([np.log(eps), eps, np.ones_like(eps)], -1)
        coef, *_ = np.linalg.lstsq(design[ok], np.log(amp[ok]), rcond=None)
        beta = float(coef[0])
    model = ErrorModel.bound(
        tolerance, basis="minima converged to ~1e-10 at (P - P_c) / P_c >= 1e-4"
    )
    return within(claim, prediction=0.5, measured=beta, error_model=model, alternative=1.0)


def first_order_line_above_L(claim: str, L: Numbers, brackets: Numbers) -> Evidence:
    """The end V_c(L) of the softmax first-order line lies above V = L at every L: the
    bracket [V_a, V_b] of each V_c (bisection in ln V) against L, with the bracket's half-width
    in ln V as the bound (``holds`` when every bracket lies above L, ``refuted`` when one lies
    below, ``inconclusive`` when one straddles L or is missing)."""
    L = np.asarray(L, float)
    b = np.asarray(brackets, float)
    mid = 0.5 * (np.log(b[:, 0]) + np.log(b[:, 1]))
    half = 0.5 * np.abs(np.log(b[:, 1]) - np.log(b[:, 0]))
    model = ErrorModel.bound(half, basis="half-width of the bisection bracket in ln V")
    return at_least(claim, measured=mid, limit=np.log(L), error_model=model)


def minima_at_most(claim: str, counts: Numbers, limit: int, *, basis: str) -> Evidence:
    """A discrete count (e.g. local minima of a 1-D reduced action at each P) at most
    ``limit`` at every P."""
    c = np.asarray(counts, float)
    return at_most(
        claim,
        measured=float(np.max(c)),
        limit=float(limit),
        error_model=ErrorModel.exact(basis=basis),
    )


def pooling_first(
    claim: str, c_1: float, c_G: float, L: int | float, *, tolerance: float = 1e-6
) -> Evidence:
    """The onset direction of a linear head is pooling: the share of U in ||A||^2
    (:func:`jaxdyn.copyhead._order.pooling_share`) of the minimum just above the onset is at
    least 1/2; the bound is the minimiser's tolerance on the share."""
    return at_least(
        claim,
        measured=pooling_share(c_1, c_G, L),
        limit=0.5,
        error_model=ErrorModel.solver_tolerance(tolerance, basis="converged reduced minimum"),
    )


def loss_jump(claim: str, predicted: bool, refined: RefinementOrder) -> Evidence:
    """Whether a curve (a test loss against P) has a jump, read by grid refinement
    (:class:`RefinementOrder` ``first``), against ``predicted``; undecided as in
    :func:`transition_order`."""
    order = transition_order(claim, TransitionOrder.first, refined)
    measured = refined.order is TransitionOrder.first
    return classified(
        claim,
        prediction=predicted,
        measured=measured,
        decided=order.verdict is not Verdict.inconclusive,
        basis=order.error_model.basis,
    )


def hysteresis_window(claim: str, disagree_fraction: Numbers) -> Evidence:
    """On a P scan across a first-order transition: a contiguous range of P where the two
    starts disagree, with every dataset disagreeing at one P at least (escapes over the
    barrier at the ends of the range may make it partial there), and none elsewhere."""
    f = np.asarray(disagree_fraction, float)
    where = np.flatnonzero(f > 0)
    contiguous = where.size == 0 or bool(np.all(np.diff(where) == 1))
    return classified(
        claim,
        prediction=True,
        measured=bool(np.any(f == 1.0)) and contiguous,
        decided=bool(np.all(np.isfinite(f))) and f.size > 0,
        basis="per P, the fraction of datasets whose two starts stay apart",
    )


def scaling_form(
    claim: str,
    measured: float,
    law: float,
    alternative: float,
    *,
    error: float,
    basis: str,
) -> Evidence:
    """Which of two candidate scaling forms a measured local exponent follows.

    The resolution is a quarter of the gap g = |law - alternative| between the two forms'
    exponents over the same range: ``holds`` when the measured exponent lies within g / 4 of
    the law's (beyond its own ``error``), ``refuted`` when it lies within g / 4 of the
    alternative's or farther than g / 4 from both on the far side of the law (another law),
    ``inconclusive`` when it lies between the two bands (the range reached does not separate
    the forms) or its error straddles a band's edge."""
    # the decision is jaxdyn.evidence's, shared with its extrapolated exponent
    return _between_forms(claim, measured, law, alternative, error=error, basis=basis)


def scaling_law(
    claim: str,
    x: Numbers,
    y: Numbers,
    law: Callable[[np.ndarray], np.ndarray],
    alternative: Callable[[np.ndarray], np.ndarray],
    *,
    relative_error: Numbers | float,
    basis: str,
    settled_pairs: int = 2,
) -> Evidence:
    """A scaling law y ~ law(x), decided only where the local exponent has settled.

    The local exponent d ln y / d ln x between successive x (error (eps_1 + eps_2) /
    ln(x_2 / x_1) from the relative errors of y) is compared with the law's and the
    alternative's local exponents over the same pair, with the resolution of
    :func:`scaling_form` (a quarter of the gap between the two forms). ``holds`` needs the
    last ``settled_pairs`` successive pairs each within the law's band; ``refuted`` needs them
    each within the alternative's band, or each outside the law's band on the same side with
    the exponent moving by less than the band between them (settled elsewhere). Otherwise the
    exponent is still drifting over the range reached: ``inconclusive``, with the local
    exponents and the x to which the range would have to extend for the drift (extrapolated
    linearly in ln x from the last two pairs) to reach the law's band, or the statement that
    it moves away from it. An asymptotic law is decided by :func:`asymptotic_law`
    (the exponent extrapolated to x -> infinity with its error) instead.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    eps = np.broadcast_to(np.asarray(relative_error, float), x.shape)
    keep = np.isfinite(y) & (y > 0) & np.isfinite(x) & (x > 0) & np.isfinite(eps)
    x, y, eps = x[keep], y[keep], eps[keep]
    order = np.argsort(x)
    x, y, eps = x[order], y[order], eps[order]
    if x.size < settled_pairs + 1:
        model = ErrorModel.bound(np.inf, basis=basis)
        return Evidence(
            claim,
            float("nan"),
            float("nan"),
            model,
            Verdict.inconclusive,
            None,
            f"{x.size} points: {settled_pairs} successive pairs need {settled_pairs + 1}",
        )
    span = np.diff(np.log(x))
    measured = np.diff(np.log(y)) / span
    error = (eps[1:] + eps[:-1]) / span
    own = np.diff(np.log(law(x))) / span
    other = np.diff(np.log(alternative(x))) / span
    band = 0.25 * np.abs(own - other)
    k = slice(-settled_pairs, None)
    m, p, a, d, b = measured[k], own[k], other[k], error[k], band[k]
    model = ErrorModel.bound(
        b[-1],
        basis=f"a quarter of the gap between the forms' local exponents; the last "
        f"{settled_pairs} pairs of x = {x[-settled_pairs - 1]:.4g}..{x[-1]:.4g}; {basis}",
    )
    pairs = ", ".join(
        f"{v:.4f} (x {lo:.4g}..{hi:.4g})" for v, lo, hi in zip(measured, x[:-1], x[1:], strict=True)
    )
    args = (claim, float(p[-1]), float(m[-1]), model)
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(d))) or np.any(b == 0):
        return Evidence(
            *args, Verdict.inconclusive, float(a[-1]), "not finite, or the forms coincide"
        )
    # r: where the exponent sits between the law (0) and the alternative (1), in their gap.
    gap = a - p
    r, dr = (m - p) / gap, d / np.abs(gap)
    in_law = np.abs(r) + dr <= 0.25
    in_alt = np.abs(r - 1.0) + dr <= 0.25
    far_side = (r + dr < -0.25) | (r - dr > 1.25)  # another law, beyond the pair of forms
    settled = bool(np.all(np.abs(np.diff(r)) + dr[1:] + dr[:-1] <= 0.25))
    if np.all(in_law) and settled:
        return Evidence(
            *args,
            Verdict.holds,
            float(a[-1]),
            f"local exponents {pairs}: the last {settled_pairs} within {b[-1]:.3g} of the law's",
        )
    if np.all(in_alt) or (np.all(far_side) and settled):
        return Evidence(
            *args,
            Verdict.refuted,
            float(a[-1]),
            f"local exponents {pairs}: settled off the law's band {p[-1]:.4f} +- {b[-1]:.3g} "
            f"(alternative {a[-1]:.4f})",
        )
    # the drift of the exponent per unit ln x over the last two pairs, extrapolated linearly
    slope = (measured[-1] - measured[-2]) / (0.5 * (span[-1] + span[-2]))
    gap_now = p[-1] - m[-1]
    ratio = x[-1] / x[-2]
    if abs(gap_now) <= b[-1]:
        leave = float(x[-1] * np.exp((b[-1] - np.sign(slope) * (m[-1] - p[-1])) / abs(slope)))
        where = (
            f"it crosses the law's band (drift {slope:.3g} per e-fold of x) and leaves it near "
            f"x = {leave:.3g} if the drift continues: only pairs that stay in the band decide"
        )
    elif slope != 0.0 and np.sign(slope) == np.sign(gap_now):
        reach = float(x[-1] * np.exp((abs(gap_now) - b[-1]) / abs(slope)))
        where = (
            f"at its last rate the exponent reaches the law's band near x = {reach:.3g}; "
            f"{settled_pairs} successive pairs inside it (x up to ~"
            f"{reach * ratio**settled_pairs:.3g}) would decide"
        )
    else:
        where = "it moves away from the law's band: a wider range decides only if the drift turns"
    return Evidence(
        *args,
        Verdict.inconclusive,
        float(a[-1]),
        f"local exponents {pairs} still drift (law {p[-1]:.4f} +- {b[-1]:.3g}, alternative "
        f"{a[-1]:.4f}): {where}",
    )


def asymptotic_law(claim: str, x: Numbers, m: Numbers, law: float, alternative: float) -> Evidence:
    """An asymptotic exponent: the local exponents ``m`` at ``x`` extrapolated to
    x -> infinity (:func:`jaxdyn.evidence.extrapolated_exponent`, with its embedded error
    estimate), classified between the law's exponent and an alternative's (within a quarter
    of their gap of one of them, or in between)."""
    return extrapolated_exponent(claim, x, m, law, alternative)


_P_STAR_ERROR = 1e-6
"""Relative error bound of a reduced P*: 40 bisections in ln P of a grid cell (2^-40) between
minima converged to ~1e-10 in action, whose difference has an O(1) slope in ln P."""
_ONSET_ERROR = 1e-9
"""Relative error of the closed-form onset (roots of a quartic; tests compare it with
bisection on the autodiff Hessian to 1e-8)."""
_CROSSOVER_ERROR = 1e-9
"""Relative error bound of a crossover P: 40 bisections in ln P (2^-40 of a bracket of width
< 0.4 in ln P) of c_G - c_1 between global minima converged to ~1e-10."""


def softmax_P_star_law(L: Numbers, P_star: Numbers, relative_error=_P_STAR_ERROR) -> Evidence:
    """P* (sequences) against L ln^2 L in supervised tokens (P* L) where the local exponent
    has settled (:func:`scaling_law`); the alternative is L ln L (one log fewer)."""
    L = np.asarray(L, float)
    return scaling_law(
        "softmax P* ~ L ln^2 L (P* in supervised tokens)",
        L,
        np.asarray(P_star, float) * L,
        lambda x: x * np.log(x) ** 2,
        lambda x: x * np.log(x),
        relative_error=relative_error,
        basis="P* at equal action of the two reduced minima",
    )


def softmax_P_star_asymptotic(L: Numbers, P_star: Numbers) -> Evidence:
    """The local exponent of P* in ln ln L (:func:`lnln_exponents`) extrapolated to
    L -> infinity (:func:`asymptotic_law`): 2 for L ln^2 L tokens against 1 for L ln L."""
    m, mid = lnln_exponents(L, P_star)
    return asymptotic_law("softmax P* ~ L ln^2 L asymptotically (L -> infinity)", mid, m, 2.0, 1.0)


def onset_V2(V: Numbers, P_c: Numbers, relative_error=_ONSET_ERROR) -> Evidence:
    """The linear onset P_c against V^2 where its local exponent has settled; alternative
    V^(3/2)."""
    return scaling_law(
        "linear attention: onset P_c ~ V^2",
        V,
        P_c,
        lambda v: v**2,
        lambda v: v**1.5,
        relative_error=relative_error,
        basis="closed-form onset (quartic roots)",
    )


def crossover_law(
    claim: str,
    x: Numbers,
    P: Numbers,
    law: float,
    alternative: float,
    relative_error=_CROSSOVER_ERROR,
) -> Evidence:
    """A linear-attention crossover P (c_G = c_1) against x^law where its local exponent has
    settled; alternative x^alternative."""
    return scaling_law(
        claim,
        x,
        P,
        lambda v: v**law,
        lambda v: v**alternative,
        relative_error=relative_error,
        basis="crossover c_G = c_1 of the global minimum; error: change between two P grids",
    )


def switch_at_P_star(
    ln_switch: Numbers, ln_P_star: float, ln_spinodal: float, resolution: float
) -> Evidence:
    """Per-dataset ln P of the exact action's switch between its two minima (a root find)
    against the reduced ln P*: Student-t over datasets plus the root find's resolution (half
    its final bracket in ln P); the alternative is the uniform spinodal ln P_hi (a switch at
    the end of the coexistence window instead of at equal action)."""
    return matches_theory(
        "the exact action's global switch between the two minima lies at the reduced P*",
        np.asarray(ln_switch, float)[:, None],
        np.array([ln_P_star]),
        np.array([ln_spinodal - ln_P_star]),
        bound=resolution,
        alternative=np.array([ln_spinodal]),
        basis="ln P; bound: half the root find's final bracket in ln P",
    )


def laplace_shift(
    claim: str, shifts: Numbers, predicted: Numbers, *, confidence: float = 0.99, basis=""
) -> Evidence:
    """The posterior mean minus the mode, per dataset (rows) and P (columns), against the
    Laplace shift ``predicted`` at each P. The alternative is the saddle point alone (no
    shift), so ``holds`` needs the Laplace shift inside every Student-t interval and zero
    outside one at least; too few datasets for that is ``inconclusive``. NaN predictions
    (not run, or a kink at the mode) give ``inconclusive`` with ``basis`` as the reason."""
    predicted = np.asarray(predicted, float)
    if not np.all(np.isfinite(predicted)):
        return Evidence(
            claim,
            float("nan"),
            float("nan"),
            ErrorModel.standard_error(float("inf"), dof=None, basis="Student-t over datasets"),
            Verdict.inconclusive,
            0.0,
            basis,
        )
    return matches_theory(
        claim,
        shifts,
        predicted,
        np.abs(predicted),
        confidence=confidence,
        basis=basis,
        alternative=np.zeros_like(predicted),
    )


def powered(evidence: Evidence, power: dict) -> Evidence:
    """``evidence`` unless it holds on a comparison without power (``power["sufficient"]``
    false: a standard error over a fifth of the effect): then ``inconclusive``, saying how
    many datasets would decide it. A refutation stands (its interval already excludes the
    prediction)."""
    import dataclasses

    if power["sufficient"] or evidence.verdict is not Verdict.holds:
        return evidence
    se = np.asarray(power["se"], float)
    worst = float(np.nanmax(se)) if np.isfinite(se).any() else float("nan")
    return dataclasses.replace(
        evidence,
        verdict=Verdict.inconclusive,
        reason=f"too little power: SE {worst:.3g} over {power['datasets']} datasets "
        f"(dof {power['dof']}) exceeds a fifth of the effect ({power['threshold']:.3g}); "
        f"{power['datasets_needed']} datasets at the measured SD would resolve it",
    )
