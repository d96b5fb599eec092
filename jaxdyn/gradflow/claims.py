"""The focus-and-dilution paper's claims, each decided by evidence (focus_dilution.md, "Claims").

Each function is named after the claim it decides, takes measurements (numbers, arrays: a
:class:`~jaxdyn.gradflow.FlowAnalysis`'s saved arrays and what its methods measure,
``plateau()``, ``score_angle()``, ``dilution_mode_growth()``, ...) and returns a
:class:`jaxdyn.evidence.Evidence` whose verdict can go either way; every claim has a
counterfactual on which it does not hold (``tests/test_focus_dilution_claims.py``).

Error models, one per kind of measurement:

- rates and times read from the flow: the save spacing (a crossing is interpolated between two
  saves) and the solver's local tolerance accumulated over its steps (``steps (rtol |y| +
  atol)``, a worst case);
- the plateau: the quadratic model at the nearest critical point, ``|L - L*| <= ||grad L||^2 /
  (2 lambda_min)``;
- alignments in the linear regime: Wedin's ``sin theta`` bound with the initial noise and the
  accumulated nonlinear drift as the perturbation;
- fits to deterministic numbers (escape times of one flow per member): the known next-order
  term as a nuisance regressor, the truncation estimated by the change when the term after it
  is added, and the crossings' save spacing propagated through the fit's weights; no
  Student-t interval (the residuals are the model's next-order terms, not noise);
- fits over random draws (finite-sample training): the slope's standard error with its degrees
  of freedom, against a stated alternative.
"""

from __future__ import annotations

import numpy as np

from ..evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_least,
    at_most,
    classified,
    estimate,
    ordered,
    within,
)
from ._measure import _sin, pooled_slope, query_drop_times, stage_resolution

__all__ = [
    "adam_escapes_unigram_plateau",
    "attention_change_order",
    "attention_frozen_at_origin",
    "bigram_proxy_agrees",
    "condensation_alignment",
    "condensation_escape_time",
    "degenerate_stall",
    "dilution_mode_rate",
    "entropy_down_up_down",
    "escape_time_exponent",
    "escape_time_log_eps",
    "finite_converges",
    "first_attention_phase",
    "focus_fastest_for_frequent_queries",
    "linearisation_bound",
    "linearisation_error_order",
    "score_direction",
    "stages_in_order",
    "tangential_order",
    "transverse_rate_order",
    "unigram_plateau",
    "unstable_attention_mode",
]


def unigram_plateau(loss: float, bound: float, entropy: float, log_d: float) -> Evidence:
    """The loss sits at ``H(pi)`` (the unigram plateau) before attention moves.

    ``within`` the quadratic-model bound of ``FlowAnalysis.plateau()``, against the alternative
    ``log d`` (no plateau below the start): a bound that contains both is ``inconclusive``."""
    model = ErrorModel.bound(
        bound if np.isfinite(bound) else 0.0,
        basis="|L - L*| <= ||grad L||^2 / (2 lambda_min) at the save nearest the saddle",
    )
    return within(
        "the loss sits at the unigram plateau H(pi) between condensation and departure",
        prediction=entropy,
        measured=loss,
        error_model=model,
        alternative=log_d,
    )


def condensation_alignment(
    W0, W1, pi, *, noise: float, amplitude: float, nonlinearity: float, rate: float
) -> Evidence:
    """Condensation aligns ``W0`` with ``pi`` (top left singular vector) and ``W1`` with
    ``pi - 1/d 1`` (top right singular vector), measured in the linear regime.

    There ``theta(t) = e^{Jt} theta(0) + r(t)``: the unstable eigenspace of ``J`` at 0 is
    ``{(pi_hat a^T, a u^T) / sqrt 2}`` (``u`` the unit ``pi - 1/d 1``), reached with amplitude
    ``A`` (``W0``'s part ``A / sqrt 2``); the rest of ``theta(0)`` (norm at most ``noise``)
    does not grow, and the nonlinear drift is at most ``A r / rate`` (``r`` the largest rate error
    of the linearisation so far). Wedin's theorem bounds each singular vector's angle:
    ``sin theta <= E / (A / sqrt 2 - E)`` with ``E = noise + A r / rate``. A matrix whose top
    singular vector points elsewhere has ``sin theta`` of order one."""
    pi = np.asarray(pi, float)
    d = pi.size
    U0, _, _ = np.linalg.svd(np.asarray(W0, float), full_matrices=False)
    _, _, V1t = np.linalg.svd(np.asarray(W1, float), full_matrices=False)
    measured = [_sin(U0[:, 0], pi), _sin(V1t[0], pi - 1.0 / d)]
    E = noise + amplitude * nonlinearity / abs(rate)
    gap = amplitude / np.sqrt(2.0) - E
    claim = "condensation aligns W0 with pi and W1 with pi - 1/d 1 (sin of the angles)"
    basis = (
        f"Wedin: sin <= E / (A / sqrt 2 - E), E = |theta(0)| + A r / mu1 = {E:.3g}, A = "
        f"{amplitude:.3g} (linear regime)"
    )
    if not gap > 0:
        return Evidence(
            claim,
            [0.0, 0.0],
            measured,
            ErrorModel.bound(0.0, basis=basis),
            Verdict.inconclusive,
            None,
            "the unstable component has not outgrown the noise in the linear regime "
            "(a smaller eps separates them)",
        )
    model = ErrorModel.bound(E / gap, basis=basis)
    return within(claim, prediction=[0.0, 0.0], measured=measured, error_model=model)


def first_attention_phase(c: float, departure_sign: int) -> Evidence:
    """The sign of ``c`` says whether attention first moves onto the most frequent token
    (``+1``) or off it (``-1``); undecided when attention never departed (sign 0) or ``c = 0``."""
    if departure_sign == 0 or c == 0:
        return Evidence(
            "attention first moves onto (+1) or off (-1) the most frequent token as sign(c) says",
            int(np.sign(c)),
            int(departure_sign),
            ErrorModel.exact(basis="departure of the frequent token's attention"),
            Verdict.inconclusive,
            None,
            "attention did not depart from uniform by the end of the horizon (a longer t1 decides)"
            if departure_sign == 0
            else "c = 0: no sign predicted",
        )
    return classified(
        "attention first moves onto (+1) or off (-1) the most frequent token as sign(c) says",
        prediction=int(np.sign(c)),
        measured=int(departure_sign),
        basis="departure: the attention the frequent token receives moves by a fixed fraction "
        "of its room",
        decided=bool(departure_sign != 0 and c != 0),
    )


def _stage_order(times, resolution, names, *, horizon_note: str = "") -> Evidence:
    """Each stage's own signature appears in the paper's order (condensation, focus, dilution,
    new direction), the signatures searched independently of one another (first crossings
    from ``t = 0``). A signature not seen by the end of the horizon makes it ``inconclusive``
    with the reason."""
    times = np.asarray(times, float)
    claim = "the stage signatures appear in the order " + " < ".join(names)
    missing = [n for n, t in zip(names, times, strict=True) if not np.isfinite(t)]
    res = np.where(np.isfinite(resolution), resolution, 0.0)
    model = ErrorModel.bound(res, basis="save spacing at each crossing")
    if missing:
        return Evidence(
            claim,
            list(range(len(names))),
            times,
            model,
            Verdict.inconclusive,
            None,
            f"not seen by the end of the horizon: {', '.join(missing)}" + horizon_note,
        )
    return ordered(claim, measured=times.tolist(), error_model=model)


def entropy_down_up_down(
    dip: float,
    peak: float,
    after_peak: float,
    uniform: float,
    solver_error: float,
    *,
    complete: bool,
    settled: bool = False,
) -> Evidence:
    """The attention entropy of the non-frequent queries goes down (focus), up above its
    uniform value ``H(pi)`` (dilution) and down again (new direction): the three legs
    ``H - dip``, ``peak - H`` and ``peak - after_peak`` all exceed the solver's error.

    The first two legs are fixed once the new direction's signature has been seen
    (``complete``: the dip is a minimum before the dilution, the peak a maximum between the
    dilution and the new direction); within the error they are ``refuted`` then. The third is
    a minimum over the rest of the horizon, which a longer horizon can only lower: within the
    error it is ``refuted`` only when the flow has ``settled`` (a steady state at the end of
    the horizon), ``inconclusive`` otherwise, with the horizon that would decide."""
    legs = np.asarray([uniform - dip, peak - uniform, peak - after_peak], float)
    claim = "the non-frequent queries' attention entropy goes down, up past H(pi), down again"
    model = ErrorModel.solver_tolerance(
        solver_error, basis="solver steps x (rtol |H| + atol): a worst-case accumulation"
    )
    names = ("down", "up", "down again")
    if bool(np.all(np.isfinite(legs)) and np.all(legs > solver_error)):
        return Evidence(claim, [1, 1, 1], legs, model, Verdict.holds, None, "")
    bad = [n for n, leg in zip(names, legs, strict=True) if not (leg > solver_error)]
    reason = f"legs not beyond the solver error: {', '.join(bad)}"
    finite = bool(np.all(np.isfinite(legs)))
    if not (complete and finite):
        verdict = Verdict.inconclusive
        reason += " (the horizon ended before the new direction's signature)"
    elif bad == ["down again"] and not settled:
        verdict = Verdict.inconclusive
        reason += (
            " (the flow still moves at the end of the horizon: the entropy can fall later; a "
            "horizon to the flow's steady state would decide)"
        )
    else:
        verdict = Verdict.refuted
    return Evidence(claim, [1, 1, 1], np.nan_to_num(legs, nan=0.0), model, verdict, None, reason)


def unstable_attention_mode(
    eigenvalues, attention_weight, c: float, m_attn: int, *, tolerance: float
) -> Evidence:
    """At the unigram saddle the only unstable direction is attention, with rate ``|c|``: the
    positive eigenvalues of ``J`` are ``m_attn`` copies of ``|c|`` (one per column of ``WQ``,
    ``WK``, all moving ``Phi`` along ``gamma gamma^T``), each on the attention block.

    Measured: the number of eigenvalues above ``tolerance``, the largest ``|lambda - |c||``
    among them and the smallest attention weight among them."""
    ev = np.asarray(eigenvalues, float)
    att = np.asarray(attention_weight, float)
    up = ev > tolerance
    n = int(up.sum())
    spread = float(np.max(np.abs(ev[up] - abs(c)))) if n else float("inf")
    weight = float(np.min(att[up])) if n else 0.0
    claim = "one unstable mode at the saddle: attention, rate |c| (m_attn-fold)"
    model = ErrorModel.rounding(tolerance, basis="eigh backward error of the Hessian")
    measured = [n, spread, weight]
    ok = n == m_attn and spread <= tolerance * max(1.0, abs(c)) and weight >= 1 - tolerance
    if abs(c) <= tolerance:
        return Evidence(
            claim, [m_attn, 0.0, 1.0], measured, model, Verdict.inconclusive, None, "c = 0"
        )
    return Evidence(
        claim,
        [m_attn, 0.0, 1.0],
        measured,
        model,
        Verdict.holds if ok else Verdict.refuted,
        None,
        "" if ok else "unstable eigenvalues other than m_attn attention copies of |c|",
    )


# generic (a local order with its one-refinement error): a jaxdyn.evidence candidate once
# the core's public budget has room
def _local_order(claim: str, x, y, prediction: float, alternative: float) -> Evidence:
    """The order of ``y(x)`` as ``x -> 0``: the local exponent ``log(y_1/y_0) / log(x_1/x_0)``
    at the two smallest ``x``, with the a-posteriori error ``|e_0 - e_1|`` (the change over one
    refinement), against an alternative order."""
    x, y = np.asarray(x, float), np.abs(np.asarray(y, float))
    e = np.diff(np.log(y)) / np.diff(np.log(x))
    model = ErrorModel.bound(
        abs(e[0] - e[1]) if e.size > 1 and np.isfinite(e[:2]).all() else 0.0,
        basis="change of the local exponent over one refinement",
    )
    return within(
        claim,
        prediction=prediction,
        measured=float(e[0]),
        error_model=model,
        alternative=alternative,
    )


# a two one-sided test over a trajectory's records, with the 'curves must move' clause that
# makes agreement informative: kept here (not small, and the clause is about trajectories)
def _equivalent(claim: str, a, b, effect: float, *, confidence: float = 0.99) -> Evidence:
    """Two sets of draws ``a``, ``b`` (draws on axis 0, records on axis 1) agree within
    ``effect`` at every record: a two one-sided test with Welch's standard error, Bonferroni over
    the records. ``holds`` when every record's interval of the mean difference lies inside
    ``[-effect, effect]``, and one of the two mean curves moves over the records by more than
    ``effect`` (curves that both stay within ``effect`` of where they start agree whatever
    drives them: that agreement is ``inconclusive``, it tests nothing); ``refuted`` when some
    record's interval excludes 0 and lies outside the band (a difference larger than the
    stated effect); ``inconclusive`` otherwise (more draws would decide)."""
    from scipy.stats import t as student_t

    a, b = np.asarray(a, float), np.asarray(b, float)
    ka, kb = a.shape[0], b.shape[0]
    va, vb = a.var(axis=0, ddof=1) / ka, b.var(axis=0, ddof=1) / kb
    se = np.sqrt(va + vb)
    # Welch-Satterthwaite; a record where both sets agree exactly (e.g. the shared initial
    # point) has no spread and no interval
    spread = se > 0
    dof = np.where(
        spread,
        (va + vb) ** 2 / np.maximum(va**2 / (ka - 1) + vb**2 / (kb - 1), 1e-300),
        np.inf,
    )
    diff = a.mean(axis=0) - b.mean(axis=0)
    n = diff.size
    q = np.where(spread, student_t.ppf(1 - (1 - confidence) / (2 * n), np.maximum(dof, 1.0)), 0)
    half = q * se
    lo, hi = diff - half, diff + half
    i = int(np.argmax(np.abs(diff) + half))
    model = ErrorModel.standard_error(
        se,
        dof=float(np.min(dof)),
        confidence=confidence,
        basis=f"Welch, {ka} and {kb} draws, Bonferroni over {n} records",
    )
    measured = [float(diff[i]), float(half[i])]

    def verdict(v: Verdict, reason: str) -> Evidence:
        return Evidence(claim, 0.0, measured, model, v, effect, reason)

    if bool(np.all((lo > -effect) & (hi < effect))):
        movement = max(float(np.ptp(a.mean(axis=0))), float(np.ptp(b.mean(axis=0))))
        if movement > effect:
            return verdict(Verdict.holds, "")
        return verdict(
            Verdict.inconclusive,
            f"neither mean curve moves by more than the margin {effect:g} over the records "
            f"(largest range {movement:.3g}): agreement within it is implied by their staying "
            "put and says nothing of what drives them",
        )
    if bool(np.any(((lo > 0) | (hi < 0)) & ((lo > effect) | (hi < -effect)))):
        return verdict(
            Verdict.refuted,
            "a record's mean difference is beyond the stated effect at the confidence level",
        )
    k = _draws_to_decide(diff, a.var(axis=0, ddof=1), b.var(axis=0, ddof=1), effect, confidence)
    more = (
        f"about {k} draws of each would decide at the measured differences and spreads"
        if k is not None
        else "no number of draws up to 10^6 decides at the measured differences (one lies "
        "at the margin)"
    )
    return verdict(
        Verdict.inconclusive,
        f"the largest interval (difference {diff[i]:.3g} +- {half[i]:.3g}) is not inside "
        f"+-{effect:g}: {more}",
    )


def _draws_to_decide(diff, var_a, var_b, effect, confidence, most=1_000_000):
    """The fewest draws ``k`` of each source at which the test of
    :func:`_equivalent` decides if the mean differences and per-draw variances stay
    as measured (a projection from the point estimates, not a power guarantee): every
    record's interval inside ``+-effect`` (holds) or one record's beyond it (refuted).
    ``None`` when no ``k`` up to ``most`` does."""
    from scipy.stats import t as student_t

    spread = (var_a + var_b) > 0
    if not spread.any():
        return None
    diff, var_a, var_b = np.abs(diff[spread]), var_a[spread], var_b[spread]
    n = int(spread.size)

    def decides(k: int) -> bool:
        va, vb = var_a / k, var_b / k
        dof = (va + vb) ** 2 / np.maximum(va**2 + vb**2, 1e-300) * (k - 1)
        half = student_t.ppf(1 - (1 - confidence) / (2 * n), np.maximum(dof, 1.0)) * np.sqrt(
            va + vb
        )
        return bool(np.all(diff + half < effect) or np.any(diff - half > effect))

    k = 2
    while k <= most and not decides(k):
        k *= 2
    if k > most:
        return None
    lo = k // 2  # the smallest k in (lo, k] that decides (decides is monotone in k)
    while k - lo > 1:
        mid = (lo + k) // 2
        lo, k = (lo, mid) if decides(mid) else (mid, k)
    return k


def degenerate_stall(transverse, scale: float, *, rtol: float = 1e-8) -> Evidence:
    """With exactly symmetric low-frequency tokens the rank-one stall is degenerate: every
    transverse eigenvalue there is 0 (no new direction can grow), within the Hessian's rounding
    ``rtol * scale``."""
    transverse = np.asarray(transverse, float)
    return within(
        "the rank-one stall of a symmetric chain has no unstable transverse mode (lambda_T = 0)",
        prediction=0.0,
        measured=float(np.max(np.abs(transverse))) if transverse.size else float("nan"),
        error_model=ErrorModel.rounding(rtol * scale, basis="eigh backward error x ||J||"),
    )


def adam_escapes_unigram_plateau(final_losses, entropy: float, *, rtol: float = 1e-12) -> Evidence:
    """Training with attention ends below ``H(pi)``, the best loss without attention (uniform
    attention makes every query's output the same, so the loss is at least ``H(pi)``)."""
    final = np.asarray(final_losses, float)
    return at_most(
        "trained models end below the attention-free optimum H(pi)",
        measured=float(np.max(final)) if final.size else float("nan"),
        limit=entropy,
        error_model=ErrorModel.rounding(rtol * max(abs(entropy), 1.0)),
    )


# generic (fit_power_law + estimate): a jaxdyn.evidence candidate once the core's public
# budget has room
def _power_law_exponent(
    claim: str, scale, error, *, prediction: float = 1.0, confidence: float = 0.99
) -> Evidence:
    """A finite-sample error shrinks like a predicted scale ``h``: the power-law exponent of
    ``error`` in ``h`` (least squares on logs, Student-t interval) is ``prediction``, tested
    against the alternative 0 (no convergence)."""
    from .._numerics import fit_power_law

    fit = fit_power_law(scale, error, confidence=confidence)
    return estimate(
        claim,
        prediction=prediction,
        value=fit.slope,
        standard_error=fit.slope_stderr,
        dof=fit.n - 2 if fit.n > 2 else None,
        alternative=0.0,
        confidence=confidence,
        basis=f"least squares on logs over {fit.n} runs",
    )


def _frequent_first(pi, times, resolution) -> Evidence:
    """Focus is fastest for frequent queries: ordered by decreasing ``pi_q``, the queries' entropy
    drop times (the query drop times) increase. A query that never drops counts as later
    than every one that does; one that never drops before a rarer one that does refutes it."""
    pi, times = np.asarray(pi, float), np.asarray(times, float)
    order = np.argsort(-pi, kind="stable")
    t = times[order]
    res = np.asarray(resolution, float)[order]
    claim = "attention entropy drops first for the most frequent queries (times in pi order)"
    model = ErrorModel.bound(np.nan_to_num(res, nan=0.0), basis="save spacing at each drop")
    seen = np.isfinite(t)
    k = int(seen.sum())
    if k and not np.all(seen[:k]):
        return Evidence(
            claim,
            list(range(t.size)),
            np.nan_to_num(t, nan=np.inf),
            model,
            Verdict.refuted,
            None,
            "a query dropped while a more frequent one never did",
        )
    if k < 2:
        return Evidence(
            claim,
            list(range(t.size)),
            np.nan_to_num(t, nan=np.inf),
            model,
            Verdict.inconclusive,
            None,
            f"only {k} query entropies dropped by the end of the horizon",
        )
    ev = ordered(
        claim, measured=t[:k].tolist(), error_model=ErrorModel.bound(res[:k], basis=model.basis)
    )
    if k < t.size and ev.holds:
        return Evidence(
            claim,
            ev.prediction,
            ev.measured,
            ev.error_model,
            ev.verdict,
            None,
            f"the {t.size - k} rarest queries never dropped (consistent with the order)",
        )
    return ev


def escape_time_exponent(
    delta, eps, escape, transverse, *, linear_tolerance: float = 0.05, confidence: float = 0.99
) -> Evidence:
    """The escape time from the stall grows like ``1/delta`` as ``delta -> 0`` (``lambda_T =
    Theta(delta)``): the pooled slope of ``log t`` on ``log delta`` (one offset per ``eps``) is
    -1, against the alternative 0, over the deltas where ``lambda_T`` is linear in ``delta``
    (its local exponent between consecutive deltas within ``linear_tolerance`` of 1, measured
    from ``lambda_T`` itself). Fewer than 3 such deltas: ``inconclusive`` (smaller deltas, and
    the longer horizon they need, would decide)."""
    delta, eps = np.asarray(delta, float), np.asarray(eps, float)
    escape, lam = np.asarray(escape, float), np.asarray(transverse, float)
    claim = "the escape time from the stall grows like 1/delta (exponent -1)"
    x = np.unique(delta)
    lam_of = np.array([np.mean(lam[delta == v]) for v in x])
    local = np.diff(np.log(lam_of)) / np.diff(np.log(x)) if x.size >= 2 else np.array([])
    linear = np.zeros(x.size, bool)
    for i, e in enumerate(local):
        if abs(e - 1.0) <= linear_tolerance:
            linear[i] = linear[i + 1] = True
    keep = np.isin(delta, x[linear])
    if int(linear.sum()) < 3:
        return Evidence(
            claim,
            -1.0,
            local.tolist(),
            ErrorModel.bound(linear_tolerance, basis="linear regime of lambda_T(delta)"),
            Verdict.inconclusive,
            0.0,
            f"fewer than 3 deltas where lambda_T is linear in delta (local exponents "
            f"{np.round(local, 3).tolist()}): smaller deltas and a longer horizon would decide",
        )
    slope, se, dof = pooled_slope(np.log(delta[keep]), np.log(escape[keep]), eps[keep])
    # the fit's interval plus the bias the remaining curvature of lambda_T(delta) leaves
    bias = float(np.max(np.abs(local[linear[:-1] & linear[1:]] - 1.0)))
    if not (np.isfinite(se) and dof > 0):
        return Evidence(
            claim,
            -1.0,
            slope,
            ErrorModel.bound(bias, basis="curvature of lambda_T"),
            Verdict.inconclusive,
            0.0,
            "no residual degrees of freedom",
        )
    from scipy.stats import t as student_t

    half = float(student_t.ppf(0.5 + confidence / 2, dof)) * se + bias
    return within(
        claim,
        prediction=-1.0,
        measured=slope,
        error_model=ErrorModel.bound(
            half,
            basis=f"t_{dof} x SE ({se:.2g}) of the pooled slope over {int(linear.sum())} deltas "
            f"in the linear regime, plus the curvature bias max |e - 1| = {bias:.2g} of "
            "lambda_T's local exponents there",
        ),
        alternative=0.0,
    )


# generic (the one-sided form of _local_order): a jaxdyn.evidence candidate once the core's
# public budget has room
def _order_at_least(claim: str, x, y, order: float) -> Evidence:
    """A bound ``y = O(x^order)`` as ``x -> 0`` (the true order may be higher): the local
    exponent ``log(y_1/y_0) / log(x_1/x_0)`` at the two smallest ``x`` is at least ``order``,
    with the a-posteriori error ``|e_0 - e_1|`` (the change over one refinement). A lower
    order (a ``y`` that shrinks more slowly) is ``refuted``; within the error of ``order``,
    ``inconclusive``."""
    x, y = np.asarray(x, float), np.abs(np.asarray(y, float))
    i = np.argsort(x)
    e = np.diff(np.log(y[i])) / np.diff(np.log(x[i]))
    model = ErrorModel.bound(
        abs(e[0] - e[1]) if e.size > 1 and np.isfinite(e[:2]).all() else 0.0,
        basis="change of the local exponent over one refinement",
    )
    return at_least(claim, measured=float(e[0]), limit=order, error_model=model)


def score_direction(angle: float, bound: float, *, at_saddle: bool = True) -> Evidence:
    """During focus ``Phi / ||Phi|| -> sign(c) pi pi^T / ||pi||^2``: the angle between them
    (``FlowAnalysis.score_angle()``) is within the linearisation's bound at the saddle. ``Phi``
    along ``-sign(c) pi pi^T`` (angle ``pi``) or along another chain's ``pi' pi'^T`` is
    ``refuted``; no bound (the unstable attention has not outgrown the rest before the
    departure, or ``W0`` is not rank one) is ``inconclusive``, and so is a flow that has not
    settled on the saddle (``at_saddle`` false: its linearisation does not apply)."""
    claim = "during focus Phi / ||Phi|| -> sign(c) pi pi^T / ||pi||^2 (angle, radians)"
    if not at_saddle:
        why = (
            "the flow has not settled on the unigram saddle (its plateau is not established): "
            "a longer horizon would decide"
        )
    elif not (np.isfinite(bound) and bound < 0.5):
        why = (
            "the growing attention mode never outgrew the rest of (WQ, WK) near the saddle, the "
            "stable mode left by condensation included: the linearisation at the saddle does "
            "not describe this stretch of the flow (a smaller eps, a longer plateau, or the "
            "saves after the stable part has decayed would decide)"
        )
    else:
        why = ""
    if why:
        measured = float(np.nan_to_num(angle, nan=np.pi))
        model = ErrorModel.bound(0.0, basis="no linearisation at the saddle")
        return Evidence(claim, 0.0, measured, model, Verdict.inconclusive, float(np.pi), why)
    model = ErrorModel.bound(
        bound,
        basis="arcsin r + arcsin(sqrt 2 sin(gamma_v, pi)), r = (2e + e^2)(1 + nu)^2 / "
        "(1 - 2 nu - nu^2), nu = (noise + stable attention mode) / growing mode, at the save "
        "with the smallest bound",
    )
    return within(claim, prediction=0.0, measured=angle, error_model=model, alternative=np.pi)


def dilution_mode_rate(
    rate: float, half_rates, rate_error: float, c: float, *, at_saddle: bool = True
) -> Evidence:
    """The dilution mode grows like ``e^{c t}`` out of the saddle (the paper's stage III):
    the measured rate (``FlowAnalysis.dilution_mode_growth()``) equals ``c`` within
    ``2 max |k - c|`` (a mode driven at the attention's instantaneous rate ``k``, once or
    twice) plus the change of the rate between the window's halves, against the alternative
    ``2c`` (a mode forced by ``Phi``, quadratic in the attention amplitude). ``inconclusive``
    for a flow that has not settled on the saddle (``at_saddle`` false)."""
    claim = "the dilution mode grows like exp(c t) out of the unigram saddle"
    if not at_saddle or not np.isfinite(rate):
        return Evidence(
            claim,
            c,
            0.0,
            ErrorModel.bound(0.0, basis="no window"),
            Verdict.inconclusive,
            2 * c,
            "the flow has not settled on the unigram saddle (its plateau is not established)"
            if not at_saddle
            else "fewer than 6 saves between the saddle and the departure with the mode above "
            "its saddle value",
        )
    change = float(abs(half_rates[0] - half_rates[1]))
    model = ErrorModel.bound(
        2 * rate_error + change,
        basis=f"2 max|k - c| = {2 * rate_error:.2g} (attention's instantaneous rate k) + change "
        f"{change:.2g} of the rate between the window's halves",
    )
    return within(claim, prediction=c, measured=rate, error_model=model, alternative=2 * c)


def stages_in_order(ts, signature_times: dict, *, horizon_note: str = "") -> Evidence:
    """Each stage's own signature appears in the paper's order (condensation, focus, dilution,
    new direction), the signatures searched independently of one another (first crossings from
    ``t = 0``; :meth:`~jaxdyn.gradflow.Stages.signature_times`), each known to the save
    spacing around it. A signature not seen by the end of the horizon makes it
    ``inconclusive``, with ``horizon_note`` (which horizon would decide)."""
    names = list(signature_times)
    times = np.asarray([float(signature_times[n]) for n in names])
    return _stage_order(times, stage_resolution(ts, times), names, horizon_note=horizon_note)


def focus_fastest_for_frequent_queries(ts, entropy_query, pi, uniform: float) -> Evidence:
    """Focus is fastest for frequent queries: ordered by decreasing ``pi_q``, the first save at
    which each query's attention entropy is 1% below ``H(pi)`` (``uniform``) increases. A
    query that never drops counts as later than every one that does; one that never drops
    before a rarer one that does refutes it."""
    drops = query_drop_times(ts, entropy_query, uniform)
    return _frequent_first(pi, drops, stage_resolution(ts, drops))


# -- orders in a small parameter (a-posteriori error: the change over one refinement) ----------


def linearisation_bound(eps, deviation_over_growth) -> Evidence:
    """Lemma 3.1 at the origin: ``||theta(t) - e^{Jt} theta(0)|| <= C eps^2 e^{2 mu1 t}``; the
    sup over ``t`` of the deviation over ``e^{2 mu1 t}``, per ``eps``, has order at least 2."""
    return _order_at_least(
        "Lemma 3.1: ||theta(t) - e^{Jt} theta(0)|| <= C eps^2 e^{2 mu1 t} (order in eps of the "
        "sup over t of the deviation / e^{2 mu1 t} at least 2)",
        eps,
        deviation_over_growth,
        2.0,
    )


def linearisation_error_order(eps, deviation) -> Evidence:
    """The deviation from the linearisation at 0 at a fixed time is of order 3 in ``eps``
    (``grad L`` is odd: no quadratic term), against order 2."""
    return _local_order(
        "the deviation from the linearisation at 0 is of order 3 in eps (grad L is odd: no "
        "quadratic term)",
        eps,
        deviation,
        3.0,
        2.0,
    )


def attention_frozen_at_origin(eps, attention_change) -> Evidence:
    """At the origin ``dL/dPhi = 0``: the change of ``(WQ, WK)`` at a fixed time has order at
    least 3 in ``eps``."""
    return _order_at_least(
        "attention frozen to O(eps^3) at the origin (order in eps of the change of (WQ, WK) at "
        "least 3)",
        eps,
        attention_change,
        3.0,
    )


def attention_change_order(eps, attention_change) -> Evidence:
    """The attention parameters move by ``O(eps^5)`` near the origin (``dL/dPhi = O(eps^2)``
    times ``W0 ~ eps`` on each side), against order 3."""
    return _local_order(
        "the attention parameters move by O(eps^5) near the origin (dL/dPhi = O(eps^2))",
        eps,
        attention_change,
        5.0,
        3.0,
    )


def transverse_rate_order(delta, transverse_rate) -> Evidence:
    """Lyapunov-Schmidt at the rank-one stall: ``lambda_T = Theta(delta)`` (order 1 in the
    asymmetry), against order 2."""
    return _local_order("lambda_T is of order 1 in delta", delta, transverse_rate, 1.0, 2.0)


def tangential_order(delta, tangential_change) -> Evidence:
    """The stall's tangential eigenvalues move by ``O(delta^2)`` (the asymmetry enters them
    at second order), against order 1."""
    return _local_order(
        "the tangential spectrum's change is of order 2 in delta",
        delta,
        tangential_change,
        2.0,
        1.0,
    )


# -- the proxy and the finite model --------------------------------------------------------------


def finite_converges(what: str, scale, error, *, confidence: float = 0.99) -> Evidence:
    """The finite-``(n, s)`` model's error (``what``: loss, attention) against the population
    flow shrinks like ``h = max(n^-1/2, 1/s)``: exponent 1, against 0 (random draws: a
    Student-t interval)."""
    return _power_law_exponent(
        f"the finite-(n, s) {what} error shrinks like max(n^-1/2, 1/s)",
        scale,
        error,
        confidence=confidence,
    )


def bigram_proxy_agrees(what: str, text, proxy, effect: float, *, confidence: float = 0.99):
    """Training on real text and on its bigram chain agree within ``effect`` at every record
    (draws on axis 0): two one-sided tests with Welch's standard error, Bonferroni over the
    records; agreement of curves that do not move is ``inconclusive``."""
    return _equivalent(
        f"{what}: real-text and bigram-chain training agree within {effect:g}",
        text,
        proxy,
        effect,
        confidence=confidence,
    )


# -- escape times (deterministic numbers: judged by their next-order term) ---------------------


# a deterministic fit judged by its next-order term: kept here (the nuisance regressor is the
# theory's O(eps) term in a log(1/eps) law)
def _deterministic_unit_slope(claim, log_inv_eps, scaled, groups, eps, resolution) -> Evidence:
    """Slope 1 of ``scaled`` (a time times its rate) in ``log(1/eps)``, one offset per group.

    The numbers come from one deterministic flow each: their residual about the law
    ``log(1/eps) + K`` is the next-order term, ``O(eps)`` (the non-growing components of
    ``theta(0)``, of size ``eps``, against a crossing at a fixed amplitude), not noise. So the
    fit includes ``eps`` as a nuisance regressor; its truncation error is estimated by the
    change of the slope when ``eps^2`` is added too (when the points allow it), and the
    crossings' save spacing ``r_i`` (a crossing lies between two saves) enters through the
    fit's weights ``w_i`` of the slope: ``sum |w_i| r_i``. Against the alternative 0."""
    x, y = np.asarray(log_inv_eps, float), np.asarray(scaled, float)
    e, r = np.asarray(eps, float), np.asarray(resolution, float)
    groups = np.asarray(groups)
    ok = np.isfinite(x) & np.isfinite(y) & np.isfinite(r)
    x, y, e, r, groups = x[ok], y[ok], e[ok], r[ok], groups[ok]
    labels = np.unique(groups)

    def design(powers):
        cols = [x] + [e**p for p in powers] + [(groups == g).astype(float) for g in labels]
        return np.column_stack(cols)

    X1 = design([1])
    if x.size == 0 or np.linalg.matrix_rank(X1) < X1.shape[1]:
        return Evidence(
            claim,
            1.0,
            float("nan"),
            ErrorModel.bound(0.0, basis="no fit"),
            Verdict.inconclusive,
            0.0,
            "too few distinct eps per group to fit the slope with its O(eps) term",
        )
    w = np.linalg.pinv(X1)[0]
    s1 = float(w @ y)
    spacing = float(np.abs(w) @ r)
    X2 = design([1, 2])
    if x.size > X2.shape[1] - 1 and np.linalg.matrix_rank(X2) == X2.shape[1]:
        s2 = float(np.linalg.pinv(X2)[0] @ y)
        truncation, how = abs(s1 - s2), "change when eps^2 is added"
    else:
        s0 = float(np.linalg.pinv(design([]))[0] @ y)
        truncation, how = abs(s1 - s0), "change when the eps term is added (no room for eps^2)"
    return within(
        claim,
        prediction=1.0,
        measured=s1,
        error_model=ErrorModel.bound(
            spacing + truncation,
            basis=f"save spacing through the fit's weights ({spacing:.2g}) + truncation of the "
            f"O(eps) model, {how} ({truncation:.2g}); {x.size} flows, {labels.size} offsets",
        ),
        alternative=0.0,
    )


def escape_time_log_eps(log_inv_eps, scaled_times, groups, *, eps, resolution) -> Evidence:
    """Escape from the rank-one stall (Lemma 3.1 there): ``lambda_T (t_new - t_dil) =
    log(1/eps) + K(delta) + O(eps)``, slope 1 in ``log(1/eps)`` with one offset per ``delta``
    (``groups``), against 0 (an escape that ignores the initial scale). ``resolution``: the
    save spacing of each scaled time (both crossings, times ``lambda_T``)."""
    return _deterministic_unit_slope(
        "escape from the stall: lambda_T (t_new - t_dil) has slope 1 in log(1/eps)",
        log_inv_eps,
        scaled_times,
        groups,
        eps,
        resolution,
    )


def condensation_escape_time(log_inv_eps, scaled_times, groups, *, eps, resolution) -> Evidence:
    """Escape from the origin: ``mu1 t_condensation = log(1/eps) + K + O(eps)``, slope 1 in
    ``log(1/eps)`` with one offset per group, against 0. ``resolution``: the save spacing of
    each scaled time (times ``mu1``)."""
    return _deterministic_unit_slope(
        "escape from the origin: mu1 t_condensation has slope 1 in log(1/eps)",
        log_inv_eps,
        scaled_times,
        groups,
        eps,
        resolution,
    )
