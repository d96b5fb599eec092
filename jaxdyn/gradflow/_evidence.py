"""The focus-and-dilution claims as decisions on numbers (focus_dilution.md, "Stages and the
numbers the theory gives"): each function takes measured arrays (from a
:class:`FlowAnalysis`, a sweep, or a counterfactual built by hand) and returns a
:class:`jaxdyn.evidence.Evidence` whose verdict can go either way.

The measurements they read are taken by :func:`plateau`, :func:`linear_window`,
:func:`stage_resolution` and :func:`pooled_slope` (host-side NumPy on saved arrays).

Error models, one per kind of measurement:

- rates and times read from the flow: the save spacing (a crossing is interpolated between two
  saves) and the solver's local tolerance accumulated over its steps (``steps (rtol |y| +
  atol)``, a worst case);
- the plateau: the quadratic model at the nearest critical point, ``|L - L*| <= ||grad L||^2 /
  (2 lambda_min)``;
- alignments in the linear regime: Wedin's ``sin theta`` bound with the initial noise and the
  accumulated nonlinear drift as the perturbation;
- fits over a sweep: the slope's standard error with its degrees of freedom, against a stated
  alternative.
"""

from __future__ import annotations

import numpy as np

from ..evidence import ErrorModel, Evidence, Verdict, classified, estimate, ordered, within

# the linearisation's rate error may be at most this fraction of the rate in a linear window
LINEAR_WINDOW = 0.01


def plateau(
    ts, loss, grad_norm, t_from: float, t_to: float, eigenvalues
) -> tuple[float, float, float]:
    """The loss where the flow is nearest a critical point between ``t_from`` and ``t_to``
    (smallest ``||grad L||`` among the saves) and the error bound of the quadratic model there:
    ``|L - L*| <= ||grad L||^2 / (2 lambda_min)``, ``lambda_min`` the smallest non-zero
    ``|eigenvalue|`` of ``J`` at the saddle. Returns ``(time, loss, bound)`` (``nan`` when no
    save lies in the window)."""
    ts, loss, g = (np.asarray(x, dtype=float) for x in (ts, loss, grad_norm))
    sel = np.nonzero((ts >= t_from) & (ts <= t_to) & np.isfinite(g))[0]
    if sel.size == 0:
        return float("nan"), float("nan"), float("nan")
    i = sel[np.argmin(g[sel])]
    ev = np.abs(np.asarray(eigenvalues, dtype=float))
    smallest = float(np.min(ev[ev > 1e-9 * ev.max()]))
    return float(ts[i]), float(loss[i]), float(g[i] ** 2 / (2 * smallest))


def plateau_evidence(loss: float, bound: float, entropy: float, log_d: float) -> Evidence:
    """The loss sits at ``H(pi)`` (the unigram plateau) before attention moves.

    ``within`` the quadratic-model bound of :func:`plateau`, against the alternative ``log d``
    (no plateau below the start): a bound that contains both is ``inconclusive``."""
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


def linear_window(ts, nonlinearity, rate: float, t_max: float) -> int:
    """Index of the last save before ``t_max`` (and after 0) where the linearisation's rate error
    is at most :data:`LINEAR_WINDOW` of ``rate``, or ``-1`` if there is none."""
    ts, err = np.asarray(ts, dtype=float), np.asarray(nonlinearity, dtype=float)
    ok = np.nonzero((ts > 0) & (ts <= t_max) & (err <= LINEAR_WINDOW * abs(rate)))[0]
    return int(ok[-1]) if ok.size else -1


def _sin(u, v) -> float:
    u, v = np.asarray(u, float), np.asarray(v, float)
    c = abs(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v))
    return float(np.sqrt(max(0.0, 1.0 - c * c)))


def alignment_evidence(
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


def first_phase_evidence(c: float, departure_sign: int) -> Evidence:
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


def stage_resolution(ts, times) -> np.ndarray:
    """The time resolution of each crossing time: the spacing of the saves around it (a
    crossing is interpolated between two saves); ``nan`` for a time not reached."""
    ts = np.asarray(ts, float)
    out = []
    for t in np.asarray(times, float):
        if not np.isfinite(t):
            out.append(np.nan)
            continue
        i = int(np.clip(np.searchsorted(ts, t), 1, len(ts) - 1))
        out.append(float(ts[i] - ts[i - 1]))
    return np.asarray(out)


def stage_order_evidence(times, resolution, names, *, horizon_note: str = "") -> Evidence:
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


def entropy_course_evidence(
    dip: float,
    peak: float,
    after_peak: float,
    uniform: float,
    solver_error: float,
    *,
    complete: bool,
) -> Evidence:
    """The attention entropy of the non-frequent queries goes down (focus), up above its
    uniform value ``H(pi)`` (dilution) and down again (new direction): the three legs
    ``H - dip``, ``peak - H`` and ``peak - after_peak`` all exceed the solver's error.

    A leg within the error is ``refuted`` when the horizon covered the whole course
    (``complete``: the new direction's signature was seen), ``inconclusive`` otherwise."""
    legs = np.asarray([uniform - dip, peak - uniform, peak - after_peak], float)
    claim = "the non-frequent queries' attention entropy goes down, up past H(pi), down again"
    model = ErrorModel.solver_tolerance(
        solver_error, basis="solver steps x (rtol |H| + atol): a worst-case accumulation"
    )
    names = ("down", "up", "down again")
    if bool(np.all(np.isfinite(legs)) and np.all(legs > solver_error)):
        return Evidence(claim, [1, 1, 1], legs, model, Verdict.holds, None, "")
    bad = [n for n, leg in zip(names, legs, strict=True) if not (leg > solver_error)]
    verdict = Verdict.refuted if complete and np.all(np.isfinite(legs)) else Verdict.inconclusive
    reason = f"legs not beyond the solver error: {', '.join(bad)}"
    if verdict is Verdict.inconclusive:
        reason += " (the horizon ended before the new direction's signature)"
    return Evidence(claim, [1, 1, 1], np.nan_to_num(legs, nan=0.0), model, verdict, None, reason)


def unstable_mode_evidence(
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


def pooled_slope(x, y, groups, nuisance=None) -> tuple[float, float, int]:
    """Least-squares slope of ``y`` on ``x`` with one intercept per group (the groups share the
    slope) and optional ``nuisance`` regressors (columns, e.g. a known next-order term):
    ``(slope, standard error, degrees of freedom)``; ``nan`` standard error without residual
    degrees of freedom."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    groups = np.asarray(groups)
    extra = np.zeros((x.size, 0)) if nuisance is None else np.asarray(nuisance, float)
    extra = extra.reshape(x.size, -1)
    ok = np.isfinite(x) & np.isfinite(y) & np.all(np.isfinite(extra), axis=1)
    x, y, groups, extra = x[ok], y[ok], groups[ok], extra[ok]
    labels = np.unique(groups)
    if x.size == 0:
        return float("nan"), float("nan"), 0
    X = np.column_stack([x, extra] + [(groups == g).astype(float) for g in labels])
    dof = x.size - X.shape[1]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    if dof <= 0 or np.linalg.matrix_rank(X) < X.shape[1]:
        return float(coef[0]), float("nan"), max(dof, 0)
    resid = y - X @ coef
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(X.T @ X)
    return float(coef[0]), float(np.sqrt(cov[0, 0])), int(dof)


def escape_time_evidence(
    claim: str, log_inv_eps, scaled_times, groups, *, confidence: float = 0.99
) -> Evidence:
    """Lemma 3.1's escape time ``t = (log(1/eps) + K) / rate``: the time times the rate
    (``scaled_times``) has slope 1 in ``log(1/eps)`` (one offset ``K`` per group, e.g. per
    chain), against the alternative 0 (an escape that does not depend on the initial scale)."""
    slope, se, dof = pooled_slope(log_inv_eps, scaled_times, groups)
    return estimate(
        claim,
        prediction=1.0,
        value=slope,
        standard_error=se,
        dof=dof if dof > 0 else None,
        alternative=0.0,
        confidence=confidence,
        basis=f"pooled least squares, one offset per group, {dof} residual dof",
    )


def local_order_evidence(claim: str, x, y, prediction: float, alternative: float) -> Evidence:
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


def equivalence_evidence(claim: str, a, b, effect: float, *, confidence: float = 0.99) -> Evidence:
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
    :func:`equivalence_evidence` decides if the mean differences and per-draw variances stay
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


def condensation_fit(ts, amplitude, nonlinearity, rate: float, t_max: float):
    """Growth rate of the projection on the unstable eigenspace at ``theta = 0``, fitted on the
    saves before ``t_max`` where the linearisation's rate error is at most :data:`LINEAR_WINDOW`
    of ``rate``. Returns ``(fit or None, bound)``: the slope of a least-squares line is a
    weighted mean of the local log-slopes, so it lies within the window's largest rate error of
    the linear rate."""
    from .._numerics import fit_exponential

    ts, err = np.asarray(ts, float), np.asarray(nonlinearity, float)
    sel = (err <= LINEAR_WINDOW * abs(rate)) & (ts <= t_max) & (ts > 0)
    if sel.sum() < 3:
        return None, float("nan")
    return fit_exponential(ts[sel], np.asarray(amplitude)[sel]), float(err[sel].max())


def pca_stage_changes(ts, W0, pi, t_departure: float, t_new: float, t_dilution: float):
    """PCA of the embedding rows (shared axes over the run, :func:`embedding_pca`; PC1 signed so
    that the frequent row is positive): the change from ``t_departure`` to ``t_new`` of the
    frequent row's and of the pi-weighted low-frequency rows' PC1 coordinate, and the PC2
    spread of the rows at ``t_dilution`` and at the end (a time not reached reads the end)."""
    from ._metrics import embedding_pca

    pca = embedding_pca(W0)
    ts, pi = np.asarray(ts, float), np.asarray(pi, float)
    top = int(np.argmax(pi))
    low = np.arange(len(pi)) != top
    x = pca[:, :, 0] * np.sign(pca[-1, top, 0] or 1.0)

    def at(t):
        return int(min(np.searchsorted(ts, t), len(ts) - 1)) if np.isfinite(t) else len(ts) - 1

    i0, i1, i_dil = at(t_departure), at(t_new), at(t_dilution)
    x_low = x[:, low] @ pi[low] / pi[low].sum()
    spread = np.ptp(pca[:, :, 1], axis=1) if pca.shape[2] > 1 else np.zeros(len(ts))
    return {
        "top_pc1_change": float(x[i1, top] - x[i0, top]),
        "low_pc1_change": float(x_low[i1] - x_low[i0]),
        "pc2_spread_at_dilution": float(spread[i_dil]),
        "pc2_spread_at_end": float(spread[-1]),
    }


def stall_evidence(transverse, scale: float, *, rtol: float = 1e-8) -> Evidence:
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


def below_plateau_evidence(final_losses, entropy: float, *, rtol: float = 1e-12) -> Evidence:
    """Training with attention ends below ``H(pi)``, the best loss without attention (uniform
    attention makes every query's output the same, so the loss is at least ``H(pi)``)."""
    from ..evidence import at_most

    final = np.asarray(final_losses, float)
    return at_most(
        "trained models end below the attention-free optimum H(pi)",
        measured=float(np.max(final)) if final.size else float("nan"),
        limit=entropy,
        error_model=ErrorModel.rounding(rtol * max(abs(entropy), 1.0)),
    )


def finite_size_evidence(
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


def query_drop_times(ts, entropy_query, uniform: float, fall: float = 0.01) -> np.ndarray:
    """For each query, the first save time at which its attention entropy is ``fall`` below
    ``H(pi)`` (its uniform-attention value); ``nan`` if it never is."""
    ts = np.asarray(ts, float)
    H = np.asarray(entropy_query, float)
    below = H <= (1.0 - fall) * uniform
    out = np.full(H.shape[1], np.nan)
    for q in range(H.shape[1]):
        hit = np.nonzero(below[:, q] & (ts > 0))[0]
        if hit.size:
            out[q] = ts[hit[0]]
    return out


def frequent_first_evidence(pi, times, resolution) -> Evidence:
    """Focus is fastest for frequent queries: ordered by decreasing ``pi_q``, the queries' entropy
    drop times (:func:`query_drop_times`) increase. A query that never drops counts as later
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


def escape_exponent_evidence(
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


def order_bound_evidence(claim: str, x, y, order: float) -> Evidence:
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
    from ..evidence import at_least

    return at_least(claim, measured=float(e[0]), limit=order, error_model=model)


def _profile(W0, pi) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, gamma = W0 alpha)`` with the sign ``gamma . pi > 0`` (NumPy twin of
    :func:`embedding_profile`, for saved arrays)."""
    W0 = np.asarray(W0, float)
    alpha = np.linalg.svd(W0, full_matrices=False)[2][0]
    if (W0 @ alpha) @ np.asarray(pi, float) < 0:
        alpha = -alpha
    return alpha, W0 @ alpha


def _dilution_mode(gamma, pi) -> np.ndarray:
    """:func:`dilution_mode` on the last axis of saved profiles (NumPy)."""
    gamma, pi = np.asarray(gamma, float), np.asarray(pi, float)
    top = int(np.argmax(pi))
    rest = gamma.sum(axis=-1) - gamma[..., top]
    return np.asarray((1.0 - pi[top]) * gamma[..., top] - pi[top] * rest)


def _angle(cos) -> float:
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


def score_direction(
    ts, W0, WQ, WK, pi, c: float, saddle_W0, t_from: float, t_to: float, *, t_noise=None
):
    """The direction of ``Phi = W0 WQ WK^T W0^T`` against ``sign(c) pi pi^T`` while the
    attention grows out of the unigram saddle, with the linearisation's bound on it.

    Near the saddle ``W0 = gamma_v alpha^T + E`` (``gamma_v`` the profile of ``saddle_W0``, the
    embedding of the saddle the flow visits, ``alpha`` the top right singular vector of
    ``W0``) and ``(WQ, WK)`` is the unstable attention mode (``WQ = alpha q^T``,
    ``WK = +-alpha q^T``, ``|q| = ||alpha^T (WQ +- WK)|| / 2``, the larger of the two signs)
    plus a part that does not grow there, of norm at most ``N = ||(WQ, WK)||`` at ``t_from``. Then
    ``Phi = a gamma_v gamma_v^T + R`` with ``sign(a)`` the growing mode's sign (``sign(c)`` by
    the theory) and ``||R|| / (|a| ||gamma_v||^2) <= r = (2 e + e^2) (1 + nu)^2 /
    (1 - 2 nu - nu^2)``, ``e = ||E|| / ||gamma_v||``, ``nu = N / |q|``; so the angle between
    ``Phi`` and ``sign(c) pi pi^T`` is at most ``arcsin r + arcsin(sqrt 2 sin(gamma_v, pi))``.

    Among the saves in ``[t_from, t_to]`` (from the save nearest the saddle to the departure)
    the one with the smallest bound is read (the bound uses ``W0`` and the attention
    amplitude, not ``Phi``).
    Returns a dict: ``time``, ``angle`` (``arccos`` of the signed cosine: ``pi`` when ``Phi``
    points along ``-sign(c) pi pi^T``), ``bound`` (``nan`` where ``r`` or ``nu`` leave no
    bound), ``embedding_offset`` ``e``, ``attention_ratio`` ``nu``, ``saddle_sin``."""
    ts = np.asarray(ts, float)
    W0, WQ, WK = (np.asarray(x, float) for x in (W0, WQ, WK))
    pi = np.asarray(pi, float)
    _, g_v = _profile(saddle_W0, pi)
    s = 1.0 if c >= 0 else -1.0
    sel = np.nonzero((ts >= t_from) & (ts <= t_to))[0]
    nan = {"time": np.nan, "angle": np.nan, "bound": np.nan}
    if sel.size == 0 or not np.isfinite(t_from):
        return dict(nan, embedding_offset=np.nan, attention_ratio=np.nan, saddle_sin=np.nan)
    i0 = sel[0] if t_noise is None else int(np.argmin(np.abs(ts - t_noise)))
    N = float(np.sqrt(np.sum(WQ[i0] ** 2) + np.sum(WK[i0] ** 2)))
    saddle_sin = _sin(g_v, pi)
    gv = float(np.linalg.norm(g_v))
    best = None
    for i in sel:
        alpha, _ = _profile(W0[i], pi)
        e = float(np.linalg.norm(W0[i] - np.outer(g_v, alpha))) / gv
        # the growing mode's amplitude, whichever its sign (a sign other than c's is what the
        # angle then shows)
        q = max(np.linalg.norm(alpha @ (WQ[i] + WK[i])), np.linalg.norm(alpha @ (WQ[i] - WK[i])))
        q = float(q) / 2.0
        nu = N / q if q > 0 else np.inf
        denom = 1.0 - 2.0 * nu - nu * nu
        r = (2 * e + e * e) * (1 + nu) ** 2 / denom if denom > 0 else np.inf
        bound = (
            float(np.arcsin(r) + np.arcsin(min(1.0, np.sqrt(2.0) * saddle_sin)))
            if r < 1
            else np.inf
        )
        if best is None or bound < best[0]:
            best = (bound, i, e, nu)
    bound, i, e, nu = best
    Phi = W0[i] @ WQ[i] @ WK[i].T @ W0[i].T
    pp = np.outer(pi, pi)
    cos = s * float(np.sum(Phi * pp)) / (np.linalg.norm(Phi) * np.linalg.norm(pp) + 1e-300)
    return {
        "time": float(ts[i]),
        "angle": _angle(cos),
        "bound": bound if np.isfinite(bound) else np.nan,
        "embedding_offset": e,
        "attention_ratio": nu,
        "saddle_sin": saddle_sin,
    }


def score_direction_evidence(angle: float, bound: float, *, at_saddle: bool = True) -> Evidence:
    """During focus ``Phi / ||Phi|| -> sign(c) pi pi^T / ||pi||^2``: the angle between them
    (:func:`score_direction`) is within the linearisation's bound at the saddle. ``Phi``
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
            "the unstable attention mode never outgrew the rest of (WQ, WK) near the saddle "
            "(a smaller eps or a longer plateau would decide)"
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
        "(1 - 2 nu - nu^2) at the save with the smallest bound",
    )
    return within(claim, prediction=0.0, measured=angle, error_model=model, alternative=np.pi)


def dilution_rate(ts, gamma, pi, saddle_W0, focus_rate_path, c: float, t_from, t_to):
    """The growth rate of the dilution mode ``D = (1 - pi_1) gamma_1 - pi_1 sum_{i != 1}
    gamma_i`` out of the unigram saddle: the least-squares slope of ``log(D(t) - D_v)`` (``D_v``
    the visited saddle's value, root-found) on the saves in ``[t_from, t_to]`` where the excess
    is positive (from the saddle to the departure: attention in its linear growth);
    ``gamma`` the saved profiles (``metrics["gamma"]``), ``saddle_W0`` the visited saddle's
    embedding.

    Returns a dict: ``rate``, ``half_rates`` (the slopes over the window's two halves), ``n``
    (saves), ``rate_error`` (``max |k(t) - c|`` over the window: the attention grows at the
    instantaneous rate ``k = focus_rate_path``, not exactly at ``c``)."""
    ts = np.asarray(ts, float)
    excess = _dilution_mode(gamma, pi) - float(_dilution_mode(_profile(saddle_W0, pi)[1], pi))
    k = np.asarray(focus_rate_path, float)
    sel = np.nonzero((ts >= t_from) & (ts <= t_to) & (excess > 0) & np.isfinite(excess))[0]
    out = {"rate": np.nan, "half_rates": [np.nan, np.nan], "n": int(sel.size)}
    if sel.size < 6:
        return dict(out, rate_error=np.nan)

    def slope(idx):
        return float(np.polyfit(ts[idx], np.log(excess[idx]), 1)[0])

    h = sel.size // 2
    return {
        "rate": slope(sel),
        "half_rates": [slope(sel[:h]), slope(sel[h:])],
        "n": int(sel.size),
        "rate_error": float(np.max(np.abs(k[sel] - c))),
    }


def dilution_rate_evidence(
    rate: float, half_rates, rate_error: float, c: float, *, at_saddle: bool = True
) -> Evidence:
    """The dilution mode grows like ``e^{c t}`` out of the saddle (the paper's stage III):
    the measured rate (:func:`dilution_rate`) equals ``c`` within ``2 max |k - c|`` (a mode
    driven at the attention's instantaneous rate ``k``, once or twice) plus the change of the
    rate between the window's halves, against the alternative ``2c`` (a mode forced by
    ``Phi``, quadratic in the attention amplitude). ``inconclusive`` for a flow that has not
    settled on the saddle (``at_saddle`` false)."""
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
