"""The Transformer PDE's claims, each decided by evidence (transformer_pde.md, claims table).

Every function takes measurements (numbers, arrays) and returns a
:class:`jaxdyn.evidence.Evidence`; none runs a simulation. Each has a negative control, a
counterfactual input on which it does not say ``holds``: in ``tests/test_meanfield_claims.py``,
or, for the claims of the particle experiments (the functions after :func:`single_cluster`),
in their experiments' registered negative controls.

- :func:`outcome`: a discrete outcome per member (blew up, converged, a rank) against the one
  the theory predicts.
- :func:`softmax_blowup_time`: solver blow-up times against the closed form ``t*``.
- :func:`covariance`: covariances against an exact solution.
- :func:`error_bound`: per-member errors against a derived bound on each.
- :func:`stability_bound`, :func:`bounded_growth`: measured ratios below a derived bound;
  :func:`dissipation`: an energy-dissipation equality; :func:`gradient_structure`: a flow is a
  gradient flow iff its configuration Jacobian is symmetric; :func:`single_cluster`: every
  system ends in one cluster; :func:`not_run`: ``inconclusive`` without a measurement.
- :func:`particles_lag_their_gaussian`: near a softmax blow-up the particles' top eigenvalue
  falls below their own Gaussian's (a systematic lag, not a random shift of the blow-up time).
- the particle experiments' claims, one per check: :func:`exact_closure`,
  :func:`closure_defect_order`, :func:`stability_ratio`, :func:`l2_bounded`,
  :func:`energy_monotone`, :func:`energy_tracks_gaussian`, :func:`geodesic_nonconvexity`,
  :func:`sinkhorn_gradient_flow`, :func:`half_ot_decreases`, :func:`sigmoid_energy_identity`,
  :func:`sigmoid_energy_nondecreasing`, :func:`clusters_increase_with_beta`,
  :func:`lipschitz_below_bounds`, :func:`sinkhorn_more_regular`, :func:`sink_influence`,
  :func:`twisted_dissipation`, :func:`twisted_gradient`, :func:`stability_estimate`.
- :func:`meanfield_rate`: the particles' error ``~ n^a`` with ``a = -1/2``, decided only by a
  design with the power to reject the nearest alternatives ``-1/2 +- margin``
  (:func:`rate_power` computes that power; :func:`rate_samples` sizes a design from it).
- The Gaussian experiments' claims (``pde-blowup``, ``pde-cone``, ``pde-ranks``; their negative
  controls are registered beside each experiment): :func:`rank_one_blowup`,
  :func:`growth_bound`, :func:`regime_agreement`, :func:`regime_trace_bound`,
  :func:`seed_criterion`, :func:`closed_form_covariance`, :func:`line_distance`,
  :func:`cone_case` (the cone pictures' outcome claims, ``CONE_OUTCOMES``),
  :func:`blowup_angle_flow`, :func:`blowup_direction`, :func:`stable_line`,
  :func:`published_histograms`, :func:`closed_form_ranks`, :func:`stop_rate`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import ArrayLike

from jaxdyn._numerics import fit_power_law
from jaxdyn.evidence import (
    ErrorModel,
    Evidence,
    Verdict,
    at_most,
    classified,
    ensemble_mean,
    monotone,
    rate,
    trend,
    within,
)

from ._particle_measures import stalled_inside_bound

# measured numbers: arrays, scalars or (nested) sequences of them
Numbers = ArrayLike | Sequence

__all__ = [
    "blowup_angle_flow",
    "blowup_direction",
    "bounded_growth",
    "closed_form_covariance",
    "closed_form_ranks",
    "closure_defect_order",
    "clusters_increase_with_beta",
    "cone_case",
    "covariance",
    "dissipation",
    "energy_monotone",
    "energy_tracks_gaussian",
    "error_bound",
    "exact_closure",
    "geodesic_nonconvexity",
    "gradient_structure",
    "growth_bound",
    "half_ot_decreases",
    "l2_bounded",
    "line_distance",
    "lipschitz_below_bounds",
    "meanfield_rate",
    "not_run",
    "outcome",
    "particles_lag_their_gaussian",
    "published_histograms",
    "rank_one_blowup",
    "rate_power",
    "rate_samples",
    "regime_agreement",
    "regime_trace_bound",
    "seed_criterion",
    "sigmoid_energy_identity",
    "sigmoid_energy_nondecreasing",
    "single_cluster",
    "sink_influence",
    "sinkhorn_gradient_flow",
    "sinkhorn_more_regular",
    "softmax_blowup_time",
    "stability_bound",
    "stability_estimate",
    "stability_ratio",
    "stable_line",
    "stop_rate",
    "twisted_dissipation",
    "twisted_gradient",
]


def outcome(claim: str, *, predicted, measured, basis: str) -> Evidence:
    """``holds`` iff every member's ``measured`` outcome equals ``predicted`` (broadcast).

    Recorded as counts: the prediction is the number of members, the measurement the number
    whose outcome is the predicted one."""
    predicted, measured = np.broadcast_arrays(np.asarray(predicted), np.asarray(measured))
    if predicted.size == 0:
        return classified(claim, prediction=0, measured=0, basis=basis, decided=False)
    agree = int(np.sum(predicted == measured))
    return classified(claim, prediction=int(predicted.size), measured=agree, basis=basis)


def softmax_blowup_time(closed_form, measured, *, tolerance: float) -> Evidence:
    """Solver blow-up times ``measured`` against the closed-form ``t*`` (softmax, ``V = I``):
    ``holds`` iff every relative error is at most ``tolerance``.

    The pole extrapolation ``t + tr / (d tr/dt)`` at ``tr = blowup_trace`` is exact up to
    ``O(blowup_trace^{-2})`` relative, so ``tolerance`` is the solver's global error."""
    return within(
        "softmax (V = I) blows up at t* = 1 / lambda_max(Sigma0^1/2 (A + A^T) Sigma0^1/2)",
        prediction=np.asarray(closed_form, float),
        measured=np.asarray(measured, float),
        relative=True,
        error_model=ErrorModel.solver_tolerance(
            tolerance,
            basis="relative global error of the tight solve; pole extrapolation "
            "O(1 / blowup_trace^2)",
        ),
    )


def covariance(claim: str, exact, measured, *, tolerance: float, basis: str) -> Evidence:
    """Covariances ``measured`` against an exact solution: every entry within ``tolerance``."""
    return within(
        claim,
        prediction=np.asarray(exact, float),
        measured=np.asarray(measured, float),
        error_model=ErrorModel.solver_tolerance(tolerance, basis=basis),
    )


def error_bound(claim: str, errors, bounds, *, basis: str) -> Evidence:
    """Per-member ``errors >= 0`` against a derived bound on each: ``holds`` iff every error
    is at most its bound (an empty set of members is ``inconclusive``)."""
    errors = np.asarray(errors, float)
    bounds = np.broadcast_to(np.asarray(bounds, float), errors.shape)
    if errors.size == 0:
        return classified(claim, prediction=0, measured=0, basis=basis, decided=False)
    return within(
        claim,
        prediction=np.zeros_like(errors),
        measured=errors,
        error_model=ErrorModel.bound(bounds, basis=basis),
    )


# generic: move to jaxdyn.evidence (a rate decision with a power requirement)
def _quantiles(confidence: float, power: float, dof: int) -> tuple[float, float]:
    from scipy import stats

    return float(stats.t.ppf(0.5 + confidence / 2, dof)), float(stats.norm.ppf(power))


def rate_power(
    sizes: ArrayLike,
    samples: int,
    noise: float,
    *,
    margin: float = 0.2,
    confidence: float = 0.99,
) -> float:
    """Probability that :func:`meanfield_rate` says ``holds`` when the rate is the predicted
    one, for a design of ``samples`` independent errors at each of ``sizes``.

    The fitted slope is normal about the true one with standard error
    ``s = noise / sqrt(samples sum_k (log n_k - mean log n)^2)`` (``noise``: the standard
    deviation of one sample's ``log error`` about the line). ``holds`` needs the interval
    ``slope +- q s`` (Student-t quantile ``q`` at ``confidence``) to contain the prediction and
    exclude both alternatives ``prediction +- margin``: the slope within ``min(q s, margin - q s)``
    of the prediction, probability ``2 Phi(min(q, margin / s - q)) - 1`` (0 when
    ``margin <= q s``)."""
    from scipy import stats

    logn = np.log(np.asarray(sizes, float).ravel())
    points = logn.size * int(samples)
    spread = int(samples) * float(np.sum((logn - logn.mean()) ** 2))
    if points < 3 or spread <= 0 or not noise > 0:
        return 0.0
    s = noise / np.sqrt(spread)
    q, _ = _quantiles(confidence, 0.5, points - 2)
    half = min(q, margin / s - q)
    return float(max(2.0 * stats.norm.cdf(half) - 1.0, 0.0))


def rate_samples(
    sizes: ArrayLike,
    noise: float,
    *,
    margin: float = 0.2,
    confidence: float = 0.99,
    power: float = 0.8,
    max_samples: int = 4096,
) -> int:
    """The fewest independent samples per size for which :func:`rate_power` reaches ``power``
    (``max_samples + 1`` if none up to ``max_samples`` does)."""

    def enough(samples: int) -> bool:
        return rate_power(sizes, samples, noise, margin=margin, confidence=confidence) >= power

    # the power grows with the samples (a smaller standard error, a smaller quantile)
    if not enough(max_samples):
        return max_samples + 1
    lo, hi = 1, max_samples  # enough(hi), and lo is too few
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


def meanfield_rate(
    claim: str,
    n: ArrayLike | Sequence,
    errors: ArrayLike | Sequence,
    *,
    prediction: float = -0.5,
    margin: float = 0.2,
    confidence: float = 0.99,
    power: float = 0.8,
) -> Evidence:
    """The exponent of ``errors ~ n^a`` (least squares of ``log error`` on ``log n``, one point
    per independent sample) against ``prediction``, deciding only where the design can reject
    the nearest alternatives ``prediction +- margin``.

    The design's power (:func:`rate_power`) must be able to reach ``power``: where it does not
    even at the smallest noise the residuals allow (their chi-square bound at ``confidence``),
    the verdict is ``inconclusive`` and the reason states the power and the samples per size
    (:func:`rate_samples`) that would reach it; the summary reports the power at the residual
    spread. With the power: ``refuted``
    when the slope's Student-t interval at ``confidence`` excludes the prediction, ``holds``
    when it contains the prediction and excludes both alternatives, ``inconclusive`` otherwise.
    A true slope at an alternative is then called ``holds`` with probability at most
    ``(1 - confidence) / 2`` (its interval must exclude it). Non-positive or non-finite
    errors are left out.
    """
    n = np.asarray(n, dtype=float).ravel()
    errors = np.asarray(errors, dtype=float).ravel()
    keep = np.isfinite(errors) & (errors > 0) & (n > 0)
    alternatives = [prediction - margin, prediction + margin]
    sizes, counts = np.unique(n[keep], return_counts=True)
    if sizes.size < 2 or keep.sum() < 4:
        model = ErrorModel.standard_error(0.0, dof=None, confidence=confidence)
        return Evidence(
            claim, prediction, float("nan"), model, Verdict.inconclusive, alternatives,
            "fewer than two sizes with a finite error",
        )  # fmt: skip
    fit = fit_power_law(n[keep], errors[keep])
    dof = max(fit.n - 2, 1)
    logn = np.log(n[keep])
    residual = np.log(errors[keep]) - (fit.intercept + fit.slope * logn)
    noise = float(np.sqrt(np.sum(residual**2) / dof))
    samples = int(counts.min())
    achieved = rate_power(sizes, samples, noise, margin=margin, confidence=confidence)
    needed = rate_samples(sizes, noise, margin=margin, confidence=confidence, power=power)
    model = ErrorModel.standard_error(
        fit.slope_stderr,
        dof=dof,
        confidence=confidence,
        basis=f"slope standard error of the log-log fit over {fit.n} independent samples; "
        f"power {achieved:.2f} against slopes {alternatives[0]:+.2f}, {alternatives[1]:+.2f} "
        f"({samples} samples per size at {', '.join(f'{s:g}' for s in sizes)}; "
        f"{needed} per size reach power {power:g})",
    )
    q, _ = _quantiles(confidence, 0.5, dof)
    lo, hi = fit.slope - q * fit.slope_stderr, fit.slope + q * fit.slope_stderr
    # underpowered: even the smallest noise the residuals allow (chi-square bound at
    # `confidence`) leaves the design short of `power`
    from scipy import stats

    least_noise = noise * np.sqrt(dof / stats.chi2.ppf(0.5 + confidence / 2, dof))
    best = rate_power(sizes, samples, least_noise, margin=margin, confidence=confidence)
    if not lo <= prediction <= hi:
        verdict, reason = Verdict.refuted, f"slope {fit.slope:.3f} in [{lo:.3f}, {hi:.3f}]"
    elif best < power:
        verdict = Verdict.inconclusive
        reason = (
            f"the design's power {achieved:.2f} < {power:g} to reject slopes +-{margin:g} "
            f"from {prediction:g}: {needed} samples per size would reach it"
        )
    elif all(not lo <= a <= hi for a in alternatives):
        verdict, reason = Verdict.holds, ""
    else:
        verdict = Verdict.inconclusive
        reason = f"the interval [{lo:.3f}, {hi:.3f}] contains an alternative"
    return Evidence(claim, prediction, fit.slope, model, verdict, alternatives, reason)


def particles_lag_their_gaussian(
    ratios: ArrayLike | Sequence, *, confidence: float = 0.99, where: str = ""
) -> Evidence:
    """Near a softmax (``V = I``) blow-up, the ratio of the particles' top eigenvalue to their
    own Gaussian's (``jaxdyn.meanfield``'s near-blow-up measurement, one ratio per independent
    system) is below 1: a one-sided sign test.

    The alternative is a random shift of each sample's blow-up time, which puts the ratio on
    either side of 1 with probability 1/2: ``holds`` when the count below 1 is improbable under
    it (binomial tail at most ``1 - confidence``), ``refuted`` when the count above 1 is,
    ``inconclusive`` otherwise (with ``m`` systems the test can decide only if
    ``2^-m <= 1 - confidence``: 7 systems at 99%). Non-finite ratios are left out."""
    from scipy import stats

    r = np.asarray(ratios, float).ravel()
    r = r[np.isfinite(r)]
    m, below = int(r.size), int(np.sum(r < 1.0))
    claim = "near a softmax blow-up the particles lag their own Gaussian (top eigenvalue ratio < 1)"
    if where:
        claim = f"{claim} at {where}"
    p_below = float(stats.binom.sf(below - 1, m, 0.5)) if m else 1.0
    p_above = float(stats.binom.sf(m - below - 1, m, 0.5)) if m else 1.0
    model = ErrorModel.exact(
        basis=f"count of {m} independent systems below 1; one-sided sign-test p = "
        f"{p_below:.2g} (below) / {p_above:.2g} (above) against a random shift (median 1)"
    )
    if m and p_below <= 1.0 - confidence:
        verdict, reason = Verdict.holds, ""
    elif m and p_above <= 1.0 - confidence:
        verdict, reason = Verdict.refuted, f"{m - below} of {m} ratios above 1"
    else:
        need = int(np.ceil(np.log2(1.0 / (1.0 - confidence))))
        verdict = Verdict.inconclusive
        reason = (
            f"{below} of {m} below 1: the sign test needs a clearer majority (>= {need} systems)"
        )
    return Evidence(claim, m, below, model, verdict, m / 2, reason)


def not_run(claim: str, prediction: float, alternatives: Sequence[float], reason: str) -> Evidence:
    """``inconclusive`` without a measurement: the check needs more work than this
    configuration gives it (e.g. the quick size), and ``reason`` says what decides it."""
    model = ErrorModel.standard_error(0.0, dof=None, confidence=0.99)
    return Evidence(
        claim, prediction, float("nan"), model, Verdict.inconclusive, list(alternatives), reason
    )


def stability_bound(
    claim: str,
    ratios: Numbers,
    constants: Numbers,
    *,
    relative_error: float | Numbers,
    basis: str,
) -> Evidence:
    """Measured stability ratios ``W_p(mu_t, nu_t) / W_p(mu_0, nu_0)`` never exceed the bound
    ``C(t)``: ``at_most(ratio / C, 1)`` with the ratios' relative error (solver error of the
    two flows) as a derived bound; ``inconclusive`` where the bound is infinite."""
    c = np.asarray(constants, dtype=float)
    r = np.asarray(ratios, dtype=float) / c
    model = ErrorModel.bound(np.max(np.asarray(relative_error, dtype=float) * r), basis=basis)
    if not np.all(np.isfinite(c)):
        return Evidence(
            claim,
            1.0,
            float(np.max(r)),
            model,
            Verdict.inconclusive,
            None,
            "the bound C(t) overflows: it says nothing here (weaker interaction or a shorter "
            "horizon would decide)",
        )
    return at_most(claim, measured=float(np.max(r)), limit=1.0, error_model=model)


def dissipation(
    claim: str,
    rate: float | Numbers,
    speed_squared: float | Numbers,
    *,
    relative_tolerance: float = 1e-9,
) -> Evidence:
    """An energy-dissipation equality ``dE/dt = +-|mu'|^2`` (a gradient flow in the metric the
    speed is measured in): ``within`` float64 rounding, relative to ``|dE/dt|``."""
    rate = np.asarray(rate, dtype=float)
    speed = np.asarray(speed_squared, dtype=float)
    model = ErrorModel.rounding(
        relative_tolerance, basis="float64 round-off of the two sums, relative to |dE/dt|"
    )

    return within(
        claim, prediction=np.abs(rate), measured=np.abs(speed), error_model=model, relative=True
    )


def gradient_structure(
    claim: str, jacobian: Numbers, *, relative_tolerance: float = 1e-9
) -> Evidence:
    """A velocity field on the configuration space is the gradient of a function (in the metric
    it was twisted by) iff its Jacobian is symmetric: the relative asymmetry
    ``|J - J^T|_F / |J|_F`` is 0 within float64 rounding (``holds``), or beyond it
    (``refuted``: no energy has this flow as its gradient flow in that metric)."""

    J = np.asarray(jacobian, dtype=float)
    asym = float(np.linalg.norm(J - J.T) / max(np.linalg.norm(J), 1e-300))
    model = ErrorModel.rounding(
        relative_tolerance, basis="float64 round-off of a forward-mode Jacobian"
    )
    return within(claim, prediction=0.0, measured=asym, error_model=model)


def bounded_growth(
    claim: str,
    growth: Numbers,
    reached: Numbers,
    *,
    relative_error: float,
    basis: str,
) -> Evidence:
    """A flow stays below a derived growth bound up to its horizon: ``growth`` is the measured
    size over the bound (e.g. ``|Sigma(t)| / (|Sigma_0| e^{r t})``) at every save of every
    draw, ``reached`` whether each draw's solve reached its horizon (no blow-up, no failure).

    ``refuted`` when a draw stopped early (a blow-up) or exceeds the bound beyond
    ``relative_error``; ``holds`` otherwise."""
    g = np.asarray(growth, dtype=float)
    ok = np.asarray(reached, dtype=bool)
    model = ErrorModel.solver_tolerance(relative_error, basis=basis)
    if not np.all(ok):
        reason = f"{int(np.sum(~ok))} of {ok.size} draws did not reach their horizon"
        return Evidence(claim, 1.0, g, model, Verdict.refuted, None, reason)
    return at_most(claim, measured=float(np.nanmax(g)), limit=1.0, error_model=model)


def single_cluster(claim: str, counts: ArrayLike | Sequence[float], *, basis: str) -> Evidence:
    """Every system's cluster count is one (``classified``; no systems: ``inconclusive``)."""
    counts = np.asarray(counts, dtype=float)
    return classified(
        claim,
        prediction=np.ones_like(counts),
        measured=counts,
        basis=basis,
        decided=counts.size > 0,
    )


# -- the particle experiments' claims (pde-meanfield, -stability, -energy, -sigmoid, -causal,
# -particles): each fixes its claim's statement and error model; the counterfactuals are the
# experiments' registered negative controls (jaxdyn.runs.negative_control).

L2_BOUNDED = "L2 attention never blows up: |Sigma(t)| <= |Sigma_0| exp(r t), r = 2|V||A|/lmin(K^TK)"
SINKHORN_DEFECT = (
    "Sinkhorn's closure defect on a Gaussian sample (the particles' d Sigma/dt against the "
    "Gaussian ODE's at the sample's own moments) is of second order: ~ n^-1"
)


def exact_closure(gap: float, scale: float) -> Evidence:
    """Linear attention's moments obey the Gaussian closure for every measure: the moment gap
    of a sample's flow against the ODE from its own moments is solver error only (Gaussian
    solves at rtol 1e-10: global error below 100 rtol times ``scale = tr Sigma_0``)."""
    return within(
        "linear attention's moments obey the Gaussian closure for every measure",
        prediction=0.0,
        measured=gap,
        error_model=ErrorModel.solver_tolerance(
            100 * 1e-10 * scale, basis="100 rtol (1e-10) times tr Sigma_0: Gaussian solves"
        ),
    )


def closure_defect_order(n: Numbers, defect: Numbers) -> Evidence:
    """Sinkhorn's closure defect on a Gaussian sample is of second order, ``~ n^-1``
    (rejecting ``n^-1/2``, softmax's first order, and 0)."""
    return rate(
        SINKHORN_DEFECT,
        n,
        defect,
        prediction=-1.0,
        alternatives=(-0.5, 0.0),
    )


def stability_ratio(ratios: Numbers, gaussian_ratio: float) -> Evidence:
    """The coupled clouds' ``W2(mu_t, nu_t) / W2(mu_0, nu_0)`` (one per sample) has the Gaussian
    ODE's Bures-Wasserstein ratio as its mean; alternative: the distance carried unchanged."""
    return ensemble_mean(
        "W2(mu_t, nu_t) / W2(mu_0, nu_0) of coupled particle clouds equals the Gaussian ODE's "
        "Bures-Wasserstein ratio",
        np.asarray(ratios)[:, None],
        prediction=[gaussian_ratio],
        alternative=[1.0],
    )


def l2_bounded(
    growth: Numbers, reached: Numbers, growth_at_stop: Numbers | None = None
) -> Evidence:
    """:func:`bounded_growth` of L2 Gaussians (solves at rtol 1e-8) over random draws. A draw
    whose solve stopped early with its last state inside the bound (``growth_at_stop <= 1``)
    is a numerical failure, not a blow-up (which leaves every exponential bound first): it is
    left out; ``inconclusive`` when every draw failed."""
    growth, reached = np.asarray(growth, float), np.asarray(reached, bool)
    failed = np.zeros(reached.shape, bool)
    if growth_at_stop is not None:
        failed = stalled_inside_bound(reached, growth_at_stop)
    if failed.all():
        return not_run(L2_BOUNDED, 1.0, (), "every draw failed numerically")
    return bounded_growth(
        L2_BOUNDED,
        growth[~failed],
        reached[~failed],
        relative_error=1e-6,
        basis="rtol 1e-8 Gaussian solves: global error below 100 rtol",
    )


def energy_monotone(series: Numbers, error: Numbers, *, increasing: bool) -> Evidence:
    """The interaction energy is monotone along the particle flow (decreasing for ``A V``
    negative definite, increasing for positive definite); ``error``: twice the RK4
    step-doubling difference per save."""
    word = "increases" if increasing else "decreases"
    return monotone(
        f"the interaction energy {word} along the particle flow",
        series,
        error=error,
        basis="twice the RK4 step-doubling difference per save, plus float64 round-off",
        increasing=increasing,
    )


def energy_tracks_gaussian(samples: Numbers, gaussian: Numbers, frozen: Numbers) -> Evidence:
    """The mean particle energy of independent ensembles equals the Gaussian closed form
    ``E(N(alpha_t, Sigma_t))``; alternative: the energy frozen at ``E(mu_0)``."""
    return ensemble_mean(
        "the particle interaction energy follows the Gaussian closed form E(N(alpha_t, Sigma_t))",
        samples,
        prediction=gaussian,
        alternative=frozen,
    )


def geodesic_nonconvexity(second_variation: Numbers, scale: float) -> Evidence:
    """``E''(s) < 0`` somewhere along a Bures-Wasserstein geodesic (``V = I, A = -I``): the
    energy is not geodesically convex."""
    return at_most(
        "the interaction energy (V = I, A = -I) is not geodesically convex: E'' < 0 somewhere "
        "along a Bures-Wasserstein geodesic",
        measured=float(np.min(second_variation)),
        limit=0.0,
        error_model=ErrorModel.rounding(1e-10 * scale, basis="float64 round-off of autodiff E''"),
    )


def _zero_to_round_off(claim: str, relative_gap: float, basis: str) -> Evidence:
    """An identity of the theory (two independent computations of one quantity) holds to
    float64 round-off: the relative gap within 1e-10."""
    return within(
        claim,
        prediction=0.0,
        measured=relative_gap,
        error_model=ErrorModel.rounding(1e-10, basis=basis),
    )


def sinkhorn_gradient_flow(relative_gap: float) -> Evidence:
    """Sinkhorn attention with ``V = A`` symmetric is the Bures-Wasserstein gradient descent of
    ``1/2 OT_eps(mu, mu)`` on Gaussians: ``dSigma/dt`` equals the BW gradient to round-off."""
    return _zero_to_round_off(
        "Sinkhorn attention with V = A symmetric is the Bures-Wasserstein gradient descent of "
        "1/2 OT_eps(mu, mu) on Gaussians",
        relative_gap,
        "float64 round-off, relative",
    )


def half_ot_decreases(path: Numbers) -> Evidence:
    """``1/2 OT_eps(mu, mu)`` decreases along the Sinkhorn Gaussian flow with ``V = A``."""
    path = np.asarray(path, dtype=float)
    return monotone(
        "1/2 OT_eps(mu, mu) decreases along the Sinkhorn flow with V = A",
        path,
        error=1e-9 * np.abs(path) + 1e-12,
        basis="100 rtol (1e-11) of the Gaussian solve times |F|",
        increasing=False,
    )


def sigmoid_energy_identity(relative_gap: float) -> Evidence:
    """Sigmoid attention on the sphere is a gradient flow of its energy:
    ``dE/dt = (beta/n) sum_i |dx_i/dt|^2`` to round-off."""
    return _zero_to_round_off(
        "sigmoid attention on the sphere: dE/dt = (beta/n) sum_i |dx_i/dt|^2 (a gradient flow)",
        relative_gap,
        "float64 round-off of forward-mode dE/dt",
    )


def sigmoid_energy_nondecreasing(series: Numbers) -> Evidence:
    """The sigmoid energy never decreases along one run's saves."""
    series = np.asarray(series, dtype=float)
    return monotone(
        "the sigmoid energy never decreases along the flow",
        series,
        error=1e-12 * np.abs(series),
        basis="float64 round-off of the energy (RK4 steps of a gradient ascent increase it)",
        increasing=True,
    )


def clusters_increase_with_beta(log_beta: Numbers, counts: Numbers) -> Evidence:
    """Metastability: more clusters survive at larger ``beta`` (slope of the count on
    ``log beta``, one point per system)."""
    return trend(
        "more clusters survive at larger beta (metastability)", log_beta, counts, increasing=True
    )


def lipschitz_below_bounds(worst_ratio: float) -> Evidence:
    """Softmax's measured Lipschitz constants over their bounds (``|V||A|R^2`` in space,
    ``L_mu(R)`` in the measure, W1) stay at most 1."""
    return at_most(
        "softmax's Lipschitz constants stay below |V||A|R^2 (space) and L_mu(R) (measure, W1)",
        measured=worst_ratio,
        limit=1.0,
        error_model=ErrorModel.rounding(1e-10, basis="float64 round-off of forward-mode Jacobians"),
    )


def sinkhorn_more_regular(log_radius: Numbers, log_ratio: Numbers) -> Evidence:
    """``log(softmax / Sinkhorn W2-Lipschitz constant)`` grows with ``log R``."""
    return trend(
        "Sinkhorn is more regular than softmax: the ratio of their W2-Lipschitz constants grows "
        "with the radius of the tokens",
        log_radius,
        log_ratio,
        increasing=True,
    )


def sink_influence(n: Numbers, influence: Numbers, *, sink: bool) -> Evidence:
    """With an attention sink one token's influence on the others decays like ``1/(sink mass
    n)`` (exponent -1, rejecting 0); without one the earliest token's does not vanish
    (exponent 0, rejecting -1: tokens 0 and 1 form a closed pair)."""
    if sink:
        claim = "with an attention sink one token's influence on the others decays like 1/n"
        return rate(claim, n, influence, prediction=-1.0, alternatives=(0.0,))
    claim = "without a sink the earliest token's influence does not vanish as n grows"
    return rate(claim, n, influence, prediction=0.0, alternatives=(-1.0,))


def twisted_dissipation(rate: Numbers, speed_squared: Numbers, *, normalised: bool) -> Evidence:
    """:func:`dissipation` of softmax with ``V = M A`` (``A`` symmetric, ``M`` positive
    definite): unnormalised, at its squared speed in ``d_{A,V}``; normalised, in the metric
    ``(k * mu)(x) M^-1`` weighted by its normaliser."""
    if normalised:
        claim = (
            "normalised softmax dissipates E at its squared speed in the metric (k * mu)(x) M^-1 "
            "(a gradient flow in the normaliser-weighted twisted metric)"
        )
    else:
        claim = "unnormalised softmax dissipates E at its squared speed in d_AV (gradient flow)"
    return dissipation(claim, rate, speed_squared)


def twisted_gradient(jacobian: Numbers, *, weighted: bool) -> Evidence:
    """:func:`gradient_structure` of normalised softmax: in ``d_{A,V}`` itself (its
    ``M^-1``-twisted velocity), or weighted by its normaliser."""
    if weighted:
        claim = (
            "normalised softmax, weighted by its normaliser, is a configuration gradient "
            "(symmetric Jacobian of (k * mu)(x_i) M^-1 Gamma(x_i))"
        )
    else:
        claim = (
            "normalised softmax is a gradient flow in d_AV itself: its M^-1-twisted particle "
            "velocity has a symmetric configuration Jacobian"
        )
    return gradient_structure(claim, jacobian)


def stability_estimate(p: int, ratios: Numbers, constants: Numbers, relative_error) -> Evidence:
    """:func:`stability_bound` of ``W_p`` ratios against ``C(t, R_0)`` with their RK4
    step-doubling error."""
    return stability_bound(
        f"the stability estimate W_p(mu_t, nu_t) <= C(t, R_0) W_p(mu_0, nu_0) (p = {p})",
        ratios,
        constants,
        relative_error=relative_error,
        basis="RK4 step-doubling difference of the ratios, relative",
    )


# -- the Gaussian experiments' claims (pde-blowup, pde-cone, pde-ranks) -------------------------
# Accepted entry error of the cone solves (rtol 1e-8 over O(100) steps, entries O(1)).
ENTRY_TOLERANCE = 1e-5
_ENTRY_BASIS = "solver global error on O(1) entries (rtol 1e-8 accumulated)"


_GROWTH = {
    "l2": "L2: |Sigma(t)|_2 <= |Sigma_0|_2 exp(r t), r = 2 |V| |A| / lambda_min(K^T K)",
    "sinkhorn": "Sinkhorn Gaussians grow at most exponentially (no finite-time blow-up): "
    "|phi(A~)|_2 < 1, so tr Sigma(t) <= d |Sigma_0|_2 exp(2 |V|_2 t) (all five cases)",
}


def growth_bound(attention: str, excess: Numbers, *, rtol: float) -> Evidence:
    """``log tr Sigma(t) - log(d |Sigma_0|_2 e^{r t})`` at every save (``excess``) at most 0,
    up to the solve's relative state error ``100 rtol``: exponential growth, no blow-up
    (``attention`` ``"l2"``: ``r = 2 |V| |A| / lambda_min(K^T K)``; ``"sinkhorn"``:
    ``r = 2 |V|_2``)."""
    return at_most(
        _GROWTH[attention],
        measured=float(np.max(np.asarray(excess, float))),
        limit=0.0,
        error_model=ErrorModel.solver_tolerance(
            100 * rtol, basis="relative state error of the solve (100 rtol) on log tr"
        ),
    )


def rank_one_blowup(ratio: Numbers, bound: Numbers) -> Evidence:
    """Softmax (``V = I``) blows up along one direction: ``lambda_2 / lambda_1`` at the event
    at most ``d / (mu_2 tr)`` plus the solver's relative state error (1e-8)."""
    return error_bound(
        "softmax (V = I) blows up along one direction: lambda_2 / lambda_1 <= d / (mu_2 tr)",
        ratio,
        np.asarray(bound, float) + 1e-8,
        basis="Sigma^-1 decreases to M* = Sigma0^-1 - t* (A + A^T), mu_2 its second "
        "eigenvalue; plus 100 rtol of state error",
    )


def regime_agreement(predicted: Numbers, observed: Numbers) -> Evidence:
    """:func:`jaxdyn.meanfield.gaussian_regime`'s decided regimes (codes) are the solver's."""
    return outcome(
        "gaussian_regime: every decided regime is the solver's",
        predicted=np.asarray(predicted),
        measured=np.asarray(observed),
        basis="regime codes; solver arbiter observed_regime on a solve to 1.05 x the blow-up "
        "bound or the horizon",
    )


def seed_criterion(seed_blowup: Numbers, observed_blowup: Numbers) -> Evidence:
    """The seed notes: "blow-up iff ``V A + A^T V^T`` has a positive eigenvalue" against the
    solver's outcome (refuted both ways: transformer_pde.md)."""
    return outcome(
        "seed notes: Sigma blows up iff V A + A^T V^T has a positive eigenvalue",
        predicted=np.asarray(seed_blowup, bool),
        measured=np.asarray(observed_blowup, bool),
        basis="blow-up event (trace 1e8) by the horizon, on draws the solver arbiter decides",
    )


def regime_trace_bound(ratios: Numbers) -> Evidence:
    """``tr Sigma(t) / trace_bound <= 1`` at every save of every bounded decided draw, up to
    the rtol 1e-8 solve's relative state error (1e-4)."""
    excess = np.maximum(np.max(np.asarray(ratios, float), initial=0.0) - 1.0, 0.0)
    return error_bound(
        "gaussian_regime: tr Sigma(t) stays below the derived trace bound",
        np.array([excess]),
        1e-4,
        basis="relative state error of the rtol 1e-8 solve over its steps (the bound is "
        "attained when Sigma is constant)",
    )


_EXACT = {
    "to_line": "softmax V = I: Sigma(t) = (Sigma_0^-1 - t (A + A^T))^-1",
    "two_lines": "two lines: c constant, a and b solve y' = -2 (y^2 - c^2)",
}


def closed_form_covariance(case: str, exact: Numbers, final: Numbers) -> Evidence:
    """A cone case's ``Sigma(t1)`` against its exact solution, every entry within
    ``ENTRY_TOLERANCE`` (``"to_line"``, softmax ``V = I``: ``(Sigma_0^-1 - t (A + A^T))^-1``;
    ``"two_lines"``: the Riccati solution)."""
    return covariance(_EXACT[case], exact, final, tolerance=ENTRY_TOLERANCE, basis=_ENTRY_BASIS)


_DECREASES = "trace 1 initially, smaller at the middle save, smaller still at t1"
_NO_EVENT = "the blow-up event did not fire by t1"
# The cone pictures' outcome claims: check name -> (claim, predicted outcome, basis).
CONE_OUTCOMES = {
    "softmax_to_line_rank_one": (
        "softmax V = I, rank-one A + A^T <= 0: Sigma(t1) has rank one",
        1,
        "eigenvalues of Sigma(t1) above 0.1 (the other decays like 1/t)",
    ),
    "softmax_two_lines_no_run_blows_up": (
        "two lines (V A = -I): no run blows up",
        False,
        _NO_EVENT,
    ),
    "softmax_two_lines_off_axis_runs_converge": (
        "two lines: every run with c0 != 0 converges (c0 = 0 decays like 1/t)",
        True,
        "cone_outcome: |dSigma/dt| below converged_tol at t1",
    ),
    "softmax_two_lines_both_lines_reached": (
        "two lines: both isotropic lines are limits (signs of 2c / tr at t1)",
        [-1.0, 1.0],
        "distinct signs of 2c / tr among the off-axis runs",
    ),
    "softmax_blowup_event_before_closed_form_time": (
        "softmax V = I, A + A^T > 0: the trace reaches blowup_trace before t*",
        True,
        "blow-up event time against the closed-form t*",
    ),
    "softmax_to_zero_trace_decreases": (
        "V SPD, A + A^T < 0: Sigma -> 0 (the trace decreases)",
        True,
        _DECREASES,
    ),
    "softmax_either_both_outcomes_occur": (
        "either: some starts blow up, others converge",
        [True, True],
        "outcome counts of the case's runs (blow-up, converged)",
    ),
    "softmax_either_every_run_decided": (
        "either: each run blows up or converges by t1",
        True,
        "cone_outcome at t1",
    ),
    "l2_never_blows_up": ("L2 Gaussians never blow up (all five cases)", False, _NO_EVENT),
    "sinkhorn_to_zero_trace_decreases": (
        "Sinkhorn, V SPD, A = -Q^T Q < 0: tr(V^-1 Sigma) decreases (d/dt = 2 tr(S phi(S A S) S) "
        "< 0), so Sigma -> 0 (the trace decreases)",
        True,
        _DECREASES,
    ),
}


def cone_case(check: str, measured: Numbers) -> Evidence:
    """One of the cone pictures' outcome claims (``CONE_OUTCOMES``, by its check name): every
    run's ``measured`` outcome is the predicted one (:func:`outcome`)."""
    claim, predicted, basis = CONE_OUTCOMES[check]
    return outcome(claim, predicted=predicted, measured=measured, basis=basis)


def line_distance(distance: Numbers, exact_distance: Numbers, tr: Numbers) -> Evidence:
    """Two lines: the disk distance to the limit line at ``t1`` against the exact flow's. An
    entry error ``eps`` moves each disk coordinate by at most ``4 eps / tr``, so the distance
    by ``4 sqrt 2 eps / tr``."""
    return error_bound(
        "two lines: Sigma / tr Sigma approaches the isotropic line of sign(c0) as the exact "
        "flow does",
        np.abs(np.asarray(distance) - np.asarray(exact_distance)),
        4 * np.sqrt(2) * ENTRY_TOLERANCE / np.asarray(tr),
        basis="the accepted entry error moves disk coordinates by <= 4 sqrt 2 eps / tr",
    )


def blowup_angle_flow(errors: Numbers, allowed: Numbers) -> Evidence:
    """Case ``either``: the top-eigenvector angle after a blow-up's continuation against the
    rank-one direction flow ``d theta / d ln r = g / h`` from the event's angle."""
    return error_bound(
        "either: blow-ups follow the rank-one direction flow d theta / d ln r = g / h",
        errors,
        allowed,
        basis="neglected rank-two share lambda_min / lambda_max at the event + num_steps rtol",
    )


def blowup_direction(limits: Numbers, allowed: Numbers, log_radius: float = 60.0) -> Evidence:
    """Case ``either``: the angle between the rank-one flow's limit and the nearest attracting
    eigenvector of ``V``."""
    return error_bound(
        "either: blow-ups end on an attracting eigenvector of V",
        limits,
        allowed,
        basis=f"contraction left after ln r + {log_radius:g} near the attracting angle "
        "+ 1e-10 direction-solve error",
    )


def stable_line(distances: Numbers, bounds: Numbers) -> Evidence:
    """Case ``either``: the disk distance of convergent runs to the stable isotropic line at
    ``t1``, against the linearised transverse growth from the save nearest ``t1 / 2``."""
    return error_bound(
        "either: convergent runs end on the stable isotropic line",
        distances,
        bounds,
        basis="linearised transverse growth from the save nearest t1 / 2, plus the entry-error "
        "floor 4 sqrt 2 1e-5 / tr",
    )


def published_histograms(runs: int, agreeing: int) -> Evidence:
    """The paper's rank histograms (projected Euler at published steps) show the ODE's limiting
    ranks: ``holds`` iff every published run's rank is the accurate solve's."""
    return classified(
        "the published rank histograms count the ODE's limiting ranks",
        prediction=int(runs),
        measured=int(agreeing),
        basis="published runs whose rank equals the accurate solve's (eigenvalues above 0.1)",
    )


def closed_form_ranks(exact_ranks: Numbers, solver_ranks: Numbers) -> Evidence:
    """Softmax ``V = I``: the accurate stop's rank is the exact ``Sigma(t_stop)``'s."""
    return outcome(
        "softmax V = I: the rank at the stop is that of (Sigma_0^-1 - t (A + A^T))^-1",
        predicted=np.asarray(exact_ranks),
        measured=np.asarray(solver_ranks),
        basis="eigenvalues above the rank threshold",
    )


def stop_rate(rates: Numbers, tol_low: Numbers, bounds: Numbers) -> Evidence:
    """Softmax ``V = I``: the accurate stop lies where the exact rate ``|F(Sigma(t))|_F`` equals
    ``tol_low``, within the first-order effect of the solver's state error."""
    return error_bound(
        "softmax V = I: the accurate stop is where the exact |F(Sigma)|_F equals tol_low",
        np.abs(np.asarray(rates) - np.asarray(tol_low)),
        np.asarray(bounds) + 1e-12 * np.asarray(tol_low),
        basis="|dF|_F <= 2 |A + A^T|_2 |Sigma|_2 |Sigma_solver - Sigma_exact|_F",
    )
