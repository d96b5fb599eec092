"""Which regime a softmax Gaussian falls into: blow-up, a bounded rank-deficient limit, a
bounded full-rank limit, or undecided (transformer_pde.md, "Closed forms to test against",
"General V").

The softmax covariance ODE is ``Sigma' = V Sigma A Sigma + Sigma A^T Sigma V^T``
(``A = K^T Q / sqrt(d)``, ``S = A + A^T``). :func:`gaussian_regime` applies only conditions that
are proved:

- ``V = c I`` (exact): ``Sigma(t) = (Sigma_0^{-1} - c t S)^{-1}``. Blow-up iff ``c S`` has a
  positive eigenvalue on the range of ``Sigma_0``, at ``t* = 1 / lambda_max(c Sigma_0^{1/2} S
  Sigma_0^{1/2})``; otherwise ``Sigma -> N (N^T Sigma_0^{-1} N)^{-1} N^T``
  (``N`` a basis of ``ker S``): full rank iff ``S = 0`` (or ``c = 0``).
- ``V = s M D M^{-1}`` with ``D > 0`` diagonal and ``s = +-1`` (``V`` diagonalisable with real
  eigenvalues of one sign; every symmetric definite ``V`` is one). With
  ``Sigma = M X M^T`` the flow is ``X' = D X (s A~) X + transpose``, ``A~ = M^T A M``, and
  [derived] ``d/dt tr(D^{-1} X) = tr(X S~ X)``, ``S~ = s M^T S M`` (same inertia as ``s S``).

  * ``s S <= 0``, ``S != 0``: ``tr(D^{-1} X)`` does not increase, so ``Sigma`` stays bounded
    (``tr Sigma <= lambda_max(M D M^T) tr(D^{-1} X_0)``); ``tr(X S~ X)`` is integrable and
    uniformly continuous, so it tends to 0 and every limit point has its range in ``ker S~``:
    rank at most ``dim ker S < d`` (zero if ``s S < 0``).
  * ``s S > 0``: ``u = tr(D^{-1} X)`` obeys ``u' >= lambda_min(S~) tr(X^2) >= k u^2`` with
    ``k = lambda_min(S~) min(D)^2 / d``, so ``Sigma`` blows up by ``t <= 1 / (k u_0)``.
- Nothing else is decided: an indefinite ``S`` with ``V != c I``, a ``V`` with complex or
  mixed-sign eigenvalues, or ``S = 0`` with ``V != c I`` and full-rank ``Sigma_0``, are
  ``inconclusive``. (``V A + A^T V^T <= 0`` decides nothing: such problems blow up; see
  docs/transformer_pde.md, "Findings".)

A rank-deficient ``Sigma_0`` stays rank-deficient (the flow is a congruence), so every bounded
outcome from it is ``low_rank``. Eigenvalues within ``tol`` (relative) of zero count as zero.
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxdyn._printing import AbstractResult

from ._closed_forms import blowup_time
from ._solve_common import _check_gaussian_inputs
from .fields._base import AbstractGaussianClosed
from .fields._heads import MultiHead, Softmax


class Regime(eqx.Enumeration):
    """The long-time regime of a Gaussian's covariance (:func:`gaussian_regime`)."""

    __module__ = "jaxdyn.meanfield"  # items print with the public name

    blowup = "Sigma blows up in finite time"
    low_rank = "Sigma stays bounded and every limit point is rank-deficient"
    full_rank = "Sigma stays bounded with a full-rank limit"
    inconclusive = "no proved condition decides"


class RegimeCondition(eqx.Enumeration):
    """The proved condition that decided a :class:`Regime` (or that none did)."""

    scalar_value = "V = c I: Sigma(t) = (Sigma_0^-1 - c t (A + A^T))^-1 (exact)"
    definite_value_dissipative = (
        "V = s M D M^-1 (D > 0) and s (A + A^T) <= 0: tr(D^-1 M^-1 Sigma M^-T) does not increase"
    )
    definite_value_expansive = (
        "V = s M D M^-1 (D > 0) and s (A + A^T) > 0: tr(D^-1 M^-1 Sigma M^-T) blows up (Riccati)"
    )
    singular_start = "Sigma_0 is rank-deficient and bounded by the condition above: rank kept"
    undecided = "no proved condition applies"
    not_softmax = "only the softmax field has proved criteria"


class GaussianRegime(AbstractResult):
    """Result of :func:`gaussian_regime`.

    Attributes:
        regime: the :class:`Regime`.
        condition: the :class:`RegimeCondition` that decided it.
        blowup_time_bound: for ``blowup``, an upper bound on the blow-up time (exact for
            ``V = c I``); ``inf`` otherwise.
        trace_bound: for the bounded regimes, a bound on ``tr Sigma(t)`` for all ``t``
            (``inf`` where none is derived).
        reduction: how a multi-head field was reduced to one softmax head ("" for none).
        rank_bound: an upper bound on the rank of the limit points (``d`` where unknown).
            From a rank-deficient ``Sigma_0`` it is the exact flow's: the rank is kept, but the
            rank-deficient set can repel, so a numerical solve's round-off may grow to a
            larger rank before the flow returns (docs/transformer_pde.md, "Findings").
    """

    regime: Regime
    condition: RegimeCondition
    blowup_time_bound: float
    trace_bound: float
    rank_bound: int
    reduction: str = ""


def _result(regime, condition, t=np.inf, trace=np.inf, rank=0) -> GaussianRegime:
    return GaussianRegime(regime, condition, float(t), float(trace), int(rank))


def _common_value(C: np.ndarray, tol: float):
    """``(c, V)`` with every ``C_h = c_h V`` (``V`` the largest head's ``C_h``), or ``None``."""
    norms = np.linalg.norm(C, axis=(1, 2))
    if norms.max() == 0:
        return np.zeros(len(C)), np.zeros_like(C[0])
    V = C[int(np.argmax(norms))]
    c = np.einsum("hij,ij->h", C, V) / np.sum(V * V)
    if np.max(np.linalg.norm(C - c[:, None, None] * V, axis=(1, 2))) > tol * norms.max():
        return None
    return c, V


def _reduced_softmax(field: MultiHead, tol: float):
    """The softmax field with the same covariance ODE as a multi-head ``field`` whose heads
    share one value matrix up to scale, ``C_h = c_h V``:
    ``sum_h C_h Sigma A_h Sigma = V Sigma (sum_h c_h A_h) Sigma`` exactly; else ``None``."""
    A, C = (np.asarray(a, float) for a in field.head_matrices())
    common = _common_value(C, tol)
    if common is None:
        return None, ""
    c, V = common
    d = V.shape[0]
    A_sum = np.einsum("h,hij->ij", c, A)
    scalar = np.linalg.norm(V - np.trace(V) / d * np.eye(d)) <= tol * max(np.linalg.norm(V), 1e-300)
    reduction = (
        "every head's value is c_h I: softmax with V = I, A = sum_h c_h A_h"
        if scalar
        else "the heads share one value matrix up to scale (C_h = c_h V): softmax with V, "
        "A = sum_h c_h A_h"
    )
    if scalar:
        A_sum, V = np.trace(V) / d * A_sum, np.eye(d)
    return Softmax(Q=np.sqrt(d) * A_sum, K=np.eye(d), V=V), reduction


def _definite_similarity(V: np.ndarray, tol: float):
    """``(s, M, D)`` with ``V = s M diag(D) M^{-1}``, ``D > 0``, or ``None``."""
    scale = max(np.linalg.norm(V, 2), 1e-300)
    lam, M = np.linalg.eig(V)
    if np.max(np.abs(lam.imag)) > tol * scale:
        return None
    lam, M = lam.real, M.real
    if np.all(lam > tol * scale):
        s = 1.0
    elif np.all(lam < -tol * scale):
        s = -1.0
    else:
        return None
    # A nearly defective V has no well-conditioned M: do not decide on it.
    if np.linalg.cond(M) > 1.0 / np.sqrt(tol):
        return None
    return s, M, s * lam


def gaussian_regime(
    field: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    *,
    tol: float = 1e-9,
) -> GaussianRegime:
    """Classify the softmax Gaussian ``N(mean0, cov0)`` under ``field`` (module docstring).

    Args:
        field: the softmax field (weights ``Q, K, V``), or a :class:`MultiHead` whose heads'
            value matrices ``C_h = c_h V`` share one matrix up to scale (every ``V_h = c_h I``
            included): its covariance ODE is exactly softmax's with ``V`` and
            ``A = sum_h c_h A_h``, decided as such (``reduction`` says so). Any other field
            is ``inconclusive``.
        mean0: initial mean (the softmax covariance ODE does not depend on it).
        cov0: initial covariance (symmetric PSD).
        tol: relative size below which an eigenvalue counts as zero.

    Returns:
        A :class:`GaussianRegime`: the regime, the condition that decided it, and the bounds
        that condition gives (blow-up time, trace, rank). Concrete inputs only (NumPy).
    """
    mean0, cov0 = _check_gaussian_inputs("gaussian_regime", field, mean0, cov0)
    cov0 = np.asarray(cov0, float)
    d = cov0.shape[0]
    if isinstance(field, MultiHead):
        reduced, reduction = _reduced_softmax(field, tol)
        if reduced is None:
            return eqx.tree_at(
                lambda r: r.reduction,
                _result(Regime.inconclusive, RegimeCondition.undecided, rank=d),
                "heads with value matrices not proportional to one matrix: no reduction",
            )
        out = gaussian_regime(reduced, mean0, cov0, tol=tol)
        return eqx.tree_at(lambda r: r.reduction, out, reduction)
    if not isinstance(field, Softmax):
        return _result(Regime.inconclusive, RegimeCondition.not_softmax, rank=d)
    A, V = np.asarray(field.A(), float), np.asarray(field.V, float)
    S = A + A.T
    w0 = np.linalg.eigvalsh(cov0)
    full_start = w0[0] > tol * max(w0[-1], 1e-300)
    start_rank = int(np.sum(w0 > tol * max(w0[-1], 1e-300)))
    s_scale = max(np.linalg.norm(S, 2), 1e-300)

    c = np.trace(V) / d
    if np.linalg.norm(V - c * np.eye(d)) <= tol * max(np.linalg.norm(V), 1e-300):
        t_star = float(blowup_time(cov0, c * A))
        if np.isfinite(t_star):
            return _result(Regime.blowup, RegimeCondition.scalar_value, t=t_star, rank=d)
        lam = np.linalg.eigvalsh(c * S) if c != 0 else np.zeros(d)
        kernel = int(np.sum(np.abs(lam) <= tol * s_scale * max(abs(c), 1e-300)))
        # Sigma(t) = (I - c t Sigma_0 S)^-1 Sigma_0 is bounded by its start when c S <= 0.
        trace = float(np.trace(cov0))
        rank = min(kernel, start_rank)
        regime = Regime.full_rank if rank == d else Regime.low_rank
        return _result(regime, RegimeCondition.scalar_value, trace=trace, rank=rank)

    similar = _definite_similarity(V, tol)
    if similar is None:
        return _result(Regime.inconclusive, RegimeCondition.undecided, rank=d)
    s, M, D = similar
    lam = np.linalg.eigvalsh(s * S)
    Minv = np.linalg.inv(M)
    X0 = Minv @ cov0 @ Minv.T
    u0 = float(np.sum(np.diag(X0) / D))
    if np.all(lam > tol * s_scale):
        S_t = s * M.T @ S @ M
        k = float(np.linalg.eigvalsh(0.5 * (S_t + S_t.T))[0]) * float(np.min(D)) ** 2 / d
        return _result(
            Regime.blowup, RegimeCondition.definite_value_expansive, t=1.0 / (k * u0), rank=d
        )
    if np.all(lam <= tol * s_scale):
        kernel = int(np.sum(np.abs(lam) <= tol * s_scale))
        # tr Sigma = tr(M X M^T) <= lambda_max(M D M^T) tr(D^-1 X) <= lambda_max(M D M^T) u0.
        trace = float(np.linalg.eigvalsh(M @ np.diag(D) @ M.T)[-1]) * u0
        if kernel < d:
            return _result(
                Regime.low_rank,
                RegimeCondition.definite_value_dissipative,
                trace=trace,
                rank=min(kernel, start_rank),
            )
        if not full_start:
            return _result(
                Regime.low_rank, RegimeCondition.singular_start, trace=trace, rank=start_rank
            )
    return _result(Regime.inconclusive, RegimeCondition.undecided, rank=d)


def seed_criterion(field: Softmax) -> Regime:
    """The general-V criterion as the seed notes state it: ``blowup`` iff
    ``V A + A^T V^T`` has a positive eigenvalue, else ``low_rank``. Refuted (docs/
    transformer_pde.md, "Findings"); kept as the claim that the ``pde-blowup`` experiment
    tests."""
    A, V = np.asarray(field.A(), float), np.asarray(field.V, float)
    W = V @ A + A.T @ V.T
    lam = np.linalg.eigvalsh(0.5 * (W + W.T))
    positive = lam[-1] > 1e-9 * max(np.max(np.abs(lam)), 1e-300)
    return Regime.blowup if positive else Regime.low_rank


def observed_regime(
    blew_up: bool,
    cov0,
    cov_half,
    cov_end,
    *,
    decay: float = 0.85,
    hold: float = 0.98,
    collapse: float = 1e-3,
    growth: float = 2.0,
    floor: float = 1e-7,
) -> Regime:
    """The regime a finite solve shows (the arbiter of :func:`gaussian_regime` in tests).

    ``blowup`` if the blow-up event fired. Else, from ``Sigma`` at ``0``, ``t1 / 2`` and
    ``t1``: ``inconclusive`` if the trace grew by more than ``growth`` over the second half;
    ``low_rank`` if the smallest eigenvalue at ``t1`` is below ``collapse`` times its start
    or below ``floor`` (the solver's resolution: pass about ``100 atol``), or fell over the
    second half to ``decay`` of its value or below (a ``1/t`` decay ``1 / (1 + a t)`` does once
    ``a t1 >= 0.43``); ``full_rank`` if it kept at least ``hold`` of its value; else
    ``inconclusive``. A finite horizon decides nothing about ``t -> inf``: ``t1`` must be long
    against the flow's time scale."""
    if blew_up:
        return Regime.blowup
    covs = [np.asarray(c, float) for c in (cov0, cov_half, cov_end)]
    if not all(np.all(np.isfinite(c)) for c in covs):
        return Regime.inconclusive
    start, half, end = (np.linalg.eigvalsh(c) for c in covs)
    if np.sum(end) > growth * np.sum(half):
        return Regime.inconclusive
    if end[0] <= max(floor, collapse * start[0]) or end[0] <= decay * half[0]:
        return Regime.low_rank
    if end[0] >= hold * half[0]:
        return Regime.full_rank
    return Regime.inconclusive
