"""Small numerical concepts every theory uses, each written once: entropy and straight-line fits.

Fits return a :class:`LinearFit` with the slope's standard error and a Student-t confidence
interval, so that a scaling check compares an exponent with theory within its own statistical
uncertainty instead of a tolerance chosen by hand.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

Points = ArrayLike | Sequence[float]


def entropy(p: Float[ArrayLike, "... k"], axis: int = -1) -> Float[Array, "..."]:
    """Shannon entropy ``H(p) = -sum_k p_k log p_k`` in nats, with ``0 log 0 = 0``.

    Works on any batch of distributions (the reduction runs over ``axis``) and inside
    ``jit``/``vmap``/``grad``; the gradient at ``p_k = 0`` is finite (the zero entries are
    masked before the logarithm).
    """
    p = jnp.asarray(p)
    positive = p > 0
    return -jnp.sum(jnp.where(positive, p * jnp.log(jnp.where(positive, p, 1.0)), 0.0), axis=axis)


@dataclasses.dataclass(frozen=True)
class LinearFit:
    """Ordinary least-squares line ``y = intercept + slope * x`` with its uncertainty.

    Attributes:
        slope, intercept: the fitted coefficients.
        slope_stderr: standard error of the slope (``nan`` with fewer than 3 points).
        ci_low, ci_high: two-sided Student-t confidence interval of the slope at
            ``confidence`` (``nan`` with fewer than 3 points).
        confidence: the interval's level, e.g. 0.95.
        n: points used (finite, and positive where a logarithm was taken).
        r2: coefficient of determination.
    """

    slope: float
    intercept: float
    slope_stderr: float
    ci_low: float
    ci_high: float
    confidence: float
    n: int
    r2: float

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies inside the slope's confidence interval."""
        return bool(self.ci_low <= value <= self.ci_high)

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def fit_line(x: Points, y: Points, *, confidence: float = 0.95) -> LinearFit:
    """Least-squares line through the finite points of ``(x, y)``.

    Needs at least two distinct ``x`` (``ValueError`` otherwise); the standard error and the
    confidence interval need at least three points and are ``nan`` below that.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.shape[0]} and {y.shape[0]}")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = int(x.size)
    if n < 2 or np.ptp(x) == 0:
        raise ValueError(f"a line fit needs at least two distinct finite x values, got {n} points")
    xm, ym = x.mean(), y.mean()
    sxx = float(np.sum((x - xm) ** 2))
    slope = float(np.sum((x - xm) * (y - ym)) / sxx)
    intercept = float(ym - slope * xm)
    resid = y - (intercept + slope * x)
    ss_tot = float(np.sum((y - ym) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else 1.0
    if n < 3:
        nan = float("nan")
        return LinearFit(slope, intercept, nan, nan, nan, confidence, n, r2)
    from scipy.stats import t as student_t

    stderr = math.sqrt(float(np.sum(resid**2)) / (n - 2) / sxx)
    half = float(student_t.ppf(0.5 + confidence / 2, n - 2)) * stderr
    return LinearFit(slope, intercept, stderr, slope - half, slope + half, confidence, n, r2)


def fit_power_law(x: Points, y: Points, *, confidence: float = 0.95) -> LinearFit:
    """Exponent of ``y = C x^a``: the line fit of ``log y`` against ``log x``.

    Points with ``x <= 0`` or ``y <= 0`` (or non-finite) are left out; ``slope`` is the
    exponent ``a`` and ``intercept`` is ``log C``.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    keep = (x > 0) & (y > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return fit_line(np.log(x[keep]), np.log(y[keep]), confidence=confidence)


def fit_exponential(t: Points, y: Points, *, confidence: float = 0.95) -> LinearFit:
    """Rate of ``y = C exp(r t)``: the line fit of ``log |y|`` against ``t``.

    Points with ``y == 0`` (or non-finite) are left out; ``slope`` is the rate ``r``.
    """
    t = np.asarray(t, dtype=np.float64).ravel()
    y = np.abs(np.asarray(y, dtype=np.float64).ravel())
    keep = y > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return fit_line(t[keep], np.log(y[keep]), confidence=confidence)


__all__ = ["LinearFit", "entropy", "fit_exponential", "fit_line", "fit_power_law"]


def extrapolate_exponent(x: Points, m: Points) -> tuple[float, float]:
    """Local exponents ``m`` at ``x`` extrapolated to ``x -> infinity`` in ``u = 1 / ln x``:
    the parabola through the last three points, and as its error the difference from the
    line through the last two (an embedded pair, as a Runge-Kutta step with local
    extrapolation estimates its error by the lower-order solution)."""
    x, m = np.asarray(x, float).ravel(), np.asarray(m, float).ravel()
    keep = np.isfinite(m) & np.isfinite(x) & (x > 1)
    u, m = 1.0 / np.log(x[keep]), m[keep]
    if m.size < 3:
        return float("nan"), float("nan")
    line = np.polyval(np.polyfit(u[-2:], m[-2:], 1), 0.0)
    parabola = np.polyval(np.polyfit(u[-3:], m[-3:], 2), 0.0)
    return float(parabola), float(abs(line - parabola))
