"""The check contract: every theory-vs-simulation check is evidence, consistency or report.

- **Evidence**: a paper claim that could be false. It takes numbers (a prediction, a
  measurement), an :class:`ErrorModel` (solver tolerance, standard error with its degrees of
  freedom, a derived bound) and ends in a :class:`Verdict`: ``holds``, ``refuted`` (the
  measurement excludes the claim at the stated confidence) or ``inconclusive`` (the error is
  too large to tell; the evidence says what would make it decisive). A statistical check names
  the alternative it can reject; if it cannot reject it, the verdict is ``inconclusive``, never
  ``holds``. A refuted claim whose measurement is sound is a *finding*, not a bug.
- **Consistency**: an identity, a second computation of the same quantity, a structural
  invariant. A consistency failure is a bug and fails the run.
- **Report**: a measured number without a verdict.

The decision functions (:func:`within`, :func:`estimate`, :func:`at_most`, :func:`at_least`,
:func:`ordered`, :func:`classified`, and those of ``_decisions``) are pure functions of
numbers, so that a test can feed the same function a counterfactual input (a series with
slope 0, a perturbed model) and assert that the verdict is not ``holds``: every evidence
check of an experiment has such a negative control (:func:`jaxdyn.runs.negative_control`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import Any

import numpy as np

from .._json import jsonable


class _Named(enum.Enum):
    """An enumeration that prints as its value (the word ``summary.json`` stores)."""

    def __str__(self) -> str:
        return self.value


class Verdict(_Named):
    """The outcome of an evidence check."""

    holds = "holds"
    refuted = "refuted"
    inconclusive = "inconclusive"
    not_run = "not_run"  # not run at this size or config: the record says why and how to run it


class CheckKind(_Named):
    """What a recorded check is: see the module docstring."""

    evidence = "evidence"
    consistency = "consistency"
    report = "report"


@dataclasses.dataclass(frozen=True)
class ErrorModel:
    """Where a check's tolerance comes from: a name, a value and, for statistics, the degrees
    of freedom and confidence level.

    Build one with a constructor that says what it is: :meth:`solver_tolerance`,
    :meth:`rounding`, :meth:`bound` (a derived bound), :meth:`standard_error` (a Student-t
    interval with ``dof`` degrees of freedom; ``dof=None`` is the normal limit) or
    :meth:`exact` (a discrete quantity, no error).

    Attributes:
        name: the kind of error model, e.g. ``"standard_error"``.
        value: the error scale (a tolerance, a bound, or one standard error).
        dof: degrees of freedom of a standard error (``None``: normal quantile).
        confidence: two-sided confidence of a standard-error interval.
        basis: one line on where the value comes from.
    """

    name: str
    value: Any
    dof: float | int | None = None
    confidence: float | None = None
    basis: str = ""

    def __post_init__(self):
        value = np.asarray(self.value, dtype=float)
        if np.any(value < 0) or np.any(np.isnan(value)):
            raise ValueError(f"an error model's value must be >= 0, got {self.value!r}")
        if self.confidence is not None and not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.dof is not None and not self.dof > 0:
            raise ValueError(f"degrees of freedom must be > 0, got {self.dof}")

    @classmethod
    def solver_tolerance(cls, value, *, basis: str = "") -> ErrorModel:
        """An ODE/root-finding error bound taken from the solver's tolerances."""
        return cls("solver_tolerance", value, basis=basis)

    @classmethod
    def rounding(cls, value, *, basis: str = "floating-point rounding") -> ErrorModel:
        """Floating-point rounding of a closed form (e.g. ``100 * eps * scale``)."""
        return cls("rounding", value, basis=basis)

    @classmethod
    def bound(cls, value, *, basis: str) -> ErrorModel:
        """A derived bound (say which in ``basis``, e.g. "O(delta^2) remainder, eq. (12)")."""
        return cls("derived_bound", value, basis=basis)

    @classmethod
    def standard_error(
        cls, value, *, dof: float | int | None, confidence: float = 0.99, basis: str = ""
    ) -> ErrorModel:
        """A standard error with ``dof`` degrees of freedom; intervals at ``confidence``."""
        return cls("standard_error", value, dof=dof, confidence=confidence, basis=basis)

    @classmethod
    def exact(cls, *, basis: str = "a discrete quantity") -> ErrorModel:
        """No error: the measured quantity is discrete (a count, an order, a class)."""
        return cls("exact", 0.0, basis=basis)

    @property
    def statistical(self) -> bool:
        return self.name == "standard_error"

    def half_width(self) -> np.ndarray:
        """The interval half-width: ``t_{dof, (1+confidence)/2} * SE`` for a standard error,
        the value itself otherwise."""
        value = np.asarray(self.value, dtype=float)
        if not self.statistical:
            return value
        return np.asarray(value * _quantile(self.confidence or 0.99, self.dof))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": jsonable(self.value)}
        if self.dof is not None:
            out["dof"] = jsonable(self.dof)
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.basis:
            out["basis"] = self.basis
        return out


def _quantile(confidence: float, dof: float | int | None) -> float:
    from scipy import stats

    q = 0.5 + confidence / 2
    return float(stats.norm.ppf(q) if dof is None else stats.t.ppf(q, dof))


def _numbers(value: Any, what: str) -> Any:
    """Evidence takes numbers, booleans and Enumeration items, never formatted strings."""
    if isinstance(value, str):
        raise TypeError(f"evidence takes numbers, not strings: {what}={value!r}")
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, list | tuple) and any(isinstance(v, str) for v in value):
        raise TypeError(f"evidence takes numbers, not strings: {what}={value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One evidence check's outcome: the claim, the numbers and the verdict.

    Made by the decision functions of this module (or directly, for a decision they do not
    cover, with the same fields). ``alternative`` is the value a statistical check can reject
    (e.g. slope 0 where -1/2 is predicted); ``reason`` says why the verdict is what it is and,
    when ``inconclusive``, what would make it decisive.
    """

    claim: str
    prediction: Any
    measured: Any
    error_model: ErrorModel
    verdict: Verdict
    alternative: Any = None
    reason: str = ""

    def __post_init__(self):
        if not isinstance(self.verdict, Verdict):
            raise TypeError(f"verdict must be a Verdict, got {self.verdict!r}")
        if not isinstance(self.error_model, ErrorModel):
            raise TypeError(f"error_model must be an ErrorModel, got {self.error_model!r}")
        _numbers(self.prediction, "prediction")
        _numbers(self.measured, "measured")
        _numbers(self.alternative, "alternative")

    @property
    def holds(self) -> bool:
        return self.verdict is Verdict.holds

    @property
    def refuted(self) -> bool:
        return self.verdict is Verdict.refuted

    @property
    def inconclusive(self) -> bool:
        return self.verdict is Verdict.inconclusive

    def to_json(self) -> dict[str, Any]:
        out = {
            "claim": self.claim,
            "prediction": jsonable(self.prediction),
            "measured": jsonable(self.measured),
            "error_model": self.error_model.to_json(),
            "verdict": self.verdict.value,
        }
        if self.alternative is not None:
            out["alternative"] = jsonable(self.alternative)
        if self.reason:
            out["reason"] = self.reason
        return out


def _as_float(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=float)


def _not_finite(measured: np.ndarray) -> bool:
    return not bool(np.all(np.isfinite(measured)))


def within(
    claim: str,
    *,
    prediction: Any,
    measured: Any,
    error_model: ErrorModel,
    alternative: Any = None,
    relative: bool = False,
    censored: Any = None,
) -> Evidence:
    """Evidence that ``measured`` equals ``prediction`` within the error model.

    Deterministic error models (solver tolerance, rounding, a derived bound): ``holds`` when
    every ``|measured - prediction| <= error`` (times ``|prediction|`` when ``relative``),
    ``refuted`` otherwise. A standard error needs an ``alternative`` (the value the claim is
    tested against): ``refuted`` when the prediction lies outside the confidence interval,
    ``holds`` when it lies inside and the alternative outside, ``inconclusive`` when both lie
    inside. A non-finite measurement is ``inconclusive``. ``censored`` marks entries that are
    lower bounds of the true value (a time not reached by the horizon): one above the
    prediction beyond the error refutes the claim; otherwise it cannot confirm it
    (``inconclusive`` unless another entry refutes).
    """
    p = _as_float(prediction)
    m = _as_float(measured)
    half = error_model.half_width()
    bound = half * np.abs(p) if relative else half
    if error_model.statistical and alternative is None:
        raise ValueError(f"{claim!r}: a statistical evidence check needs an alternative to reject")
    if _not_finite(m):
        return Evidence(
            claim,
            prediction,
            measured,
            error_model,
            Verdict.inconclusive,
            alternative,
            "the measurement is not finite",
        )
    shape = np.broadcast_shapes(m.shape, p.shape, np.shape(bound))
    lower = _censored_mask(claim, censored, shape)
    if bool(np.any(lower)):
        m_, p_, b_ = (np.broadcast_to(v, shape) for v in (m, p, bound))
        wrong = np.where(lower, m_ - b_ > p_, np.abs(m_ - p_) > b_)
        if bool(np.any(wrong)):
            reason = (
                "an entry (a lower bound where censored) excludes the prediction beyond the error"
            )
            return Evidence(
                claim, prediction, measured, error_model, Verdict.refuted, alternative, reason
            )
        reason = (
            f"{int(np.sum(lower))} censored entr(y/ies) (a lower bound) cannot confirm the"
            " prediction: a longer horizon would decide"
        )
        return Evidence(
            claim, prediction, measured, error_model, Verdict.inconclusive, alternative, reason
        )
    gap = np.abs(m - p)
    if not bool(np.all(gap <= bound)):
        reason = (
            f"|measured - prediction| = {_fmt(np.max(gap))} exceeds the error {_fmt(np.max(bound))}"
        )
        return Evidence(
            claim, prediction, measured, error_model, Verdict.refuted, alternative, reason
        )
    if alternative is not None:
        a = _as_float(alternative)
        alt_bound = half * np.abs(a) if relative else half
        if bool(np.all(np.abs(m - a) <= alt_bound)):
            reason = (
                f"the interval (half-width {_fmt(np.max(bound))}) contains both the prediction and"
                f" the alternative {_fmt(alternative)}: a smaller error would decide"
            )
            return Evidence(
                claim, prediction, measured, error_model, Verdict.inconclusive, alternative, reason
            )
        return Evidence(
            claim,
            prediction,
            measured,
            error_model,
            Verdict.holds,
            alternative,
            f"the prediction is inside the interval, the alternative {_fmt(alternative)} outside",
        )
    return Evidence(claim, prediction, measured, error_model, Verdict.holds, None, "")


def estimate(
    claim: str,
    *,
    prediction: Any,
    value: Any,
    standard_error: Any,
    dof: float | int | None,
    alternative: Any,
    confidence: float = 0.99,
    basis: str = "",
) -> Evidence:
    """Evidence from a statistical estimate (a fitted slope, a mean) with its standard error.

    A Student-t interval ``value +- t_{dof} * SE`` at ``confidence``: ``refuted`` when it
    excludes ``prediction``, ``holds`` when it contains the prediction and excludes
    ``alternative``, ``inconclusive`` when it contains both (or the SE is not finite).
    """
    se = float(standard_error)
    if not math.isfinite(se):
        model = ErrorModel("standard_error", 0.0, dof=dof, confidence=confidence, basis=basis)
        return Evidence(
            claim,
            prediction,
            value,
            model,
            Verdict.inconclusive,
            alternative,
            "the standard error is not finite (too few points)",
        )
    model = ErrorModel.standard_error(se, dof=dof, confidence=confidence, basis=basis)
    return within(
        claim, prediction=prediction, measured=value, error_model=model, alternative=alternative
    )


def _censored_mask(claim: str, censored: Any, shape: tuple) -> np.ndarray:
    """``censored`` as a boolean array of ``shape`` (``None``: nothing censored)."""
    if censored is None:
        return np.zeros(shape, dtype=bool)
    mask = np.asarray(censored, dtype=bool)
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(
            f"{claim!r}: censored has shape {mask.shape}, the measurement {shape}"
        ) from None


def _bound_check(*, upper: bool):
    """The one implementation of :func:`at_most` (``upper``) and :func:`at_least`: the
    decorated function gives the public signature and docstring, :func:`_one_sided` the body."""

    def decorate(public):
        @functools.wraps(public)
        def check(claim, *, measured, limit, error_model, alternative=None, censored=None):
            return _one_sided(
                claim, measured, limit, error_model, alternative, censored, upper=upper
            )

        return check

    return decorate


@_bound_check(upper=True)
def at_most(
    claim: str,
    *,
    measured: Any,
    limit: Any,
    error_model: ErrorModel,
    alternative: Any = None,
    censored: Any = None,
) -> Evidence:
    """Evidence that ``measured <= limit`` (elementwise).

    ``holds`` when ``measured + error <= limit`` everywhere, ``refuted`` when
    ``measured - error > limit`` somewhere, ``inconclusive`` when the error straddles the limit.
    ``alternative`` is the value above the limit that the check is meant to reject (e.g. the
    size of the effect a statistical check has the power to see); it is recorded, must lie
    above the limit, and an interval containing both says so. ``censored`` marks entries that
    are lower bounds of the true value (a time not reached by the horizon is at least the
    horizon): such an entry refutes the claim when it exceeds the limit beyond its error and
    otherwise cannot confirm it (``inconclusive`` unless another entry refutes).
    """


@_bound_check(upper=False)
def at_least(
    claim: str,
    *,
    measured: Any,
    limit: Any,
    error_model: ErrorModel,
    alternative: Any = None,
    censored: Any = None,
) -> Evidence:
    """Evidence that ``measured >= limit`` (elementwise); the mirror of :func:`at_most`
    (``alternative`` lies below the limit). A ``censored`` entry (a lower bound of the true
    value) confirms the claim when it lies above the limit beyond its error and can never
    refute it."""


def _one_sided(claim, measured, limit, error_model, alternative, censored, *, upper: bool):
    m = _as_float(measured)
    lim = _as_float(limit)
    half = error_model.half_width()
    if alternative is not None:
        a = _as_float(alternative)
        if bool(np.any(a < lim if upper else a > lim)):
            side = "above" if upper else "below"
            raise ValueError(
                f"{claim!r}: the alternative {_fmt(alternative)} must lie {side} the limit"
                f" {_fmt(limit)} (it is the value the check rejects)"
            )
    lower = _censored_mask(claim, censored, np.broadcast_shapes(m.shape, lim.shape))
    args = (claim, limit, measured, error_model)
    if _not_finite(m):
        return Evidence(*args, Verdict.inconclusive, alternative, "the measurement is not finite")
    m, lim = np.broadcast_to(m, lower.shape), np.broadcast_to(lim, lower.shape)
    half = np.broadcast_to(half, lower.shape)
    # each entry's interval for the true value; a censored entry's is unbounded above
    lo, hi = m - half, np.where(lower, np.inf, m + half)
    bad = lo > lim if upper else hi < lim
    if bool(np.any(bad)):
        excess = (m - lim) if upper else (lim - m)
        reason = (
            f"beyond the limit by {_fmt(np.max(excess[bad]))}, more than the error"
            f" {_fmt(np.max(half))}"
        )
        return Evidence(*args, Verdict.refuted, alternative, reason)
    good = hi <= lim if upper else lo >= lim
    if bool(np.all(good)):
        return Evidence(*args, Verdict.holds, alternative, "")
    if bool(np.any(lower & ~good)):
        reason = (
            f"{int(np.sum(lower & ~good))} censored entr(y/ies) (a lower bound) cannot be"
            " placed against the limit: a longer horizon would decide"
        )
    else:
        reason = f"within the error {_fmt(np.max(half))} of the limit: a smaller error would decide"
        if alternative is not None:
            reason += f" (the alternative {_fmt(alternative)} is not excluded either)"
    return Evidence(*args, Verdict.inconclusive, alternative, reason)


def ordered(
    claim: str,
    *,
    measured: Any,
    error_model: ErrorModel,
    increasing: bool = True,
    censored: Any = None,
) -> Evidence:
    """Evidence that ``measured`` is strictly increasing (or decreasing).

    Each consecutive difference is compared with the error of a difference (the error model's
    half-width times sqrt 2 for a standard error, twice the bound otherwise): ``refuted``
    when some difference has the wrong sign beyond it, ``holds`` when every difference has
    the right sign beyond it, ``inconclusive`` otherwise.

    ``censored`` marks entries that are lower bounds of the true value: a stage not reached
    by the horizon happens at the horizon or later, so pass the horizon and mark it. A pair
    with one censored entry is still decided on the side the bound allows (increasing: a
    censored later entry above the earlier one beyond the error is in order; a censored
    earlier entry above the later one beyond the error is out of order); two censored
    entries cannot be ordered. Non-finite entries make it ``inconclusive``.
    """
    m = _as_float(measured).ravel()
    if m.size < 2:
        raise ValueError(f"{claim!r}: an order needs at least two values, got {m.size}")
    lower = _censored_mask(claim, censored, m.shape)
    half = np.broadcast_to(error_model.half_width(), m.shape)
    pair = (
        np.sqrt(half[1:] ** 2 + half[:-1] ** 2) if error_model.statistical else half[1:] + half[:-1]
    )
    sign = 1.0 if increasing else -1.0
    diffs = sign * np.diff(m)
    prediction = sign * np.arange(m.size)
    args = (claim, prediction, m, error_model)
    if _not_finite(m):
        return Evidence(*args, Verdict.inconclusive, None, "an entry is not finite (not reached)")
    # The true difference (in the claimed direction) is >= diffs when only the entry that
    # the direction puts last is censored, <= diffs when only the other one is.
    last, first = (lower[1:], lower[:-1]) if increasing else (lower[:-1], lower[1:])
    can_be_wrong = ~(last & ~first) & ~(last & first)
    can_be_right = ~(first & ~last) & ~(last & first)
    wrong = can_be_wrong & (diffs < -pair)
    if bool(np.any(wrong)):
        k = int(np.flatnonzero(wrong)[0])
        return Evidence(
            *args,
            Verdict.refuted,
            None,
            f"entries {k} and {k + 1} are in the wrong order beyond their error",
        )
    if bool(np.all(can_be_right & (diffs > pair))):
        return Evidence(*args, Verdict.holds, None, "")
    if bool(np.any(~can_be_right & (diffs > -pair))):
        reason = (
            "a censored entry (a lower bound) leaves a pair undecided: a longer horizon would"
            " decide"
        )
    else:
        reason = "some consecutive entries differ by less than their error"
    return Evidence(*args, Verdict.inconclusive, None, reason)


def classified(
    claim: str, *, prediction: Any, measured: Any, basis: str, decided: bool = True
) -> Evidence:
    """Evidence about a discrete outcome (a phase, a transition order, a rank, a count).

    ``holds`` when ``measured == prediction`` (elementwise), ``refuted`` when not;
    ``inconclusive`` when the classifier could not decide (``decided=False``). ``basis`` says
    what decided the class (e.g. "rank counted with eigenvalues above 1e-6 relative").
    """
    model = ErrorModel.exact(basis=basis)
    if not decided:
        return Evidence(
            claim,
            prediction,
            measured,
            model,
            Verdict.inconclusive,
            None,
            "the classifier could not decide",
        )
    if isinstance(prediction, enum.Enum) or isinstance(measured, enum.Enum):
        same = prediction == measured
    else:
        same = bool(np.all(np.asarray(prediction) == np.asarray(measured)))
    verdict = Verdict.holds if same else Verdict.refuted
    return Evidence(claim, prediction, measured, model, verdict, None, "")


def _fmt(value: Any) -> str:
    arr = np.asarray(value, dtype=float) if not isinstance(value, enum.Enum) else None
    if arr is None:
        return str(value)
    if arr.ndim == 0:
        return f"{float(arr):.4g}"
    return (
        "[" + ", ".join(f"{v:.4g}" for v in arr.ravel()[:6]) + (", ...]" if arr.size > 6 else "]")
    )
