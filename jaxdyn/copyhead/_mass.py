"""Where the posterior's mass is: Laplace phases, their free energies and a mass-weighted mean.

The reduced theory is a saddle point: it predicts the modes of p(G | D) ~ exp(-S(G)). The
posterior's mass around a mode G* (a phase) is, to leading order in the fluctuations,

    Z_k = exp(-F_k),   F_k = S(G*_k) + 1/2 ln det H_k - (d / 2) ln(2 pi),   H_k = d^2 S / dG^2,

so a phase with a lower action can carry less mass when it is stiffer (larger ln det H) in the
d = L^2 directions of G: its entropy is lower. Phases k get weights w_k ~ m_k exp(-F_k)
(m_k copies related by an exact symmetry, e.g. the mirror A -> -A of an odd head). The mean
of an observable o within a phase, to the same order (Sigma = H^{-1}, S_3 the third
derivative of S):

    E_k[o] = o(G*) + 1/2 tr(Sigma d^2 o) - 1/2 (Sigma d o)_j tr(Sigma d_j H),

the second term from the curvature of o, the third from the skewness of the posterior
(d_j ln det H = tr(Sigma d_j H)). The mass-weighted mean is sum_k w_k E_k[o]. The phase
boundary for the mode is where two phases' actions are equal; for the mass, where their free
energies are.

Dense in the d coordinates (H is formed column by column from Hessian-vector products, then
factorised): memory O(d^2), time d Hessian-vector products and one O(d^3) factorisation.
A first-order approximation in the fluctuations: it fails where H is not positive definite
(``min_eigenvalue <= 0``: not a mode; the free energy and mean are NaN) and degrades where the
fluctuations are not small against the scale on which S departs from a quadratic, and in
many dimensions, where the next order sums over pairs of directions (docs/copy_head.md,
"Mean versus mode": the linear head's c_G shift at L = 32 is missed tenfold; softmax's
copy-phase shift is 16% high).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxdyn._printing import AbstractResult

from ._heads import AbstractOddCopyHead
from ._models import AbstractReducedModel, global_minimum, local_minimum
from ._order import order_parameters
from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics, population_statistics


class LaplacePhase(AbstractResult):
    """A mode of a posterior exp(-S(x)) and the Gaussian (Laplace) mass around it.

    Attributes:
        action: S(x*).
        half_log_det: 1/2 ln det H at x* (the phase's stiffness; NaN when H is not positive
            definite).
        free_energy: F = S + 1/2 ln det H - (d / 2) ln(2 pi) = -ln of the phase's mass.
        mode: o(x*), the observables at the mode (what a saddle point predicts).
        mean: o(x*) + the second-order Laplace correction (module docstring).
        covariance: Sigma projected on the observables, J H^{-1} J^T.
        min_eigenvalue: smallest eigenvalue of H (> 0 at a mode).
        gradient_defect: how far the gradient is from linear over the fluctuations, at
            probes x* +- h u (u: random signs times each coordinate's standard deviation
            sqrt(Sigma_ii)): the largest over probes of |g(x*+hu) - g(x*-hu) - 2 h H u| /
            |2 h H u|, at h = 1/2 and at h = 1/8. For a twice-differentiable action it
            falls like h^2 (16-fold from h = 1/2 to 1/8); with a jump of the Hessian
            (a C^1 action, e.g. relu(G)^2 terms) within the probes it stays constant, with a
            jump of the gradient (a kink of the action) it grows like 1/h.
        twice_differentiable: the defect falls more than :data:`KINK_RATIO` (4, the
            geometric midpoint of 16 and 1) from h = 1/2 to 1/8, or is below
            :data:`KINK_FLOOR` at 1/8. False: the mode sits on (or within about an eighth of
            a standard deviation of) a kink of the action (a scaled-ReLU head at G_ij = 0),
            where the Laplace expansion does not apply: its free energy and mean are not
            numbers to use.
    """

    action: Float[Array, ""]
    half_log_det: Float[Array, ""]
    free_energy: Float[Array, ""]
    mode: Float[Array, " k"]
    mean: Float[Array, " k"]
    covariance: Float[Array, "k k"]
    min_eigenvalue: Float[Array, ""]
    gradient_defect: Float[Array, "2"]
    twice_differentiable: Bool[Array, ""]

    @property
    def shift(self) -> Float[Array, " k"]:
        """The posterior mean minus the mode, E_k[o] - o(x*)."""
        return self.mean - self.mode


@eqx.filter_jit
def laplace_phase(
    action: Callable[[Array], Array],
    x: Float[ArrayLike, "..."],
    observable: Callable[[Array], Array],
    *,
    chunk: int = 256,
    corrections: bool = True,
) -> LaplacePhase:
    """The Laplace phase of exp(-action) at its mode ``x`` (any shape; flattened inside).

    ``observable(x) -> (k,)``. ``x``: a local minimum of ``action`` (a residual gradient g
    there enters the mean as its first-order shift -J Sigma g). ``chunk``: Hessian columns
    computed together (memory ``chunk`` x one Hessian-vector product). Compiled once per
    ``action`` and ``observable`` (equinox's ``filter_jit``: functions are static).
    ``corrections=False`` skips the mean's curvature and skewness terms (``mean`` is then the
    mode plus the residual-gradient shift): the free energy alone costs one pass of
    Hessian-vector products, the corrections about three more.
    """
    x = jnp.asarray(x)
    shape, d = x.shape, x.size
    x0 = x.ravel()
    S = lambda v: action(v.reshape(shape))
    o = lambda v: jnp.atleast_1d(observable(v.reshape(shape)))
    grad = jax.grad(S)
    hvp = lambda at, v: jax.jvp(grad, (at,), (v,))[1]
    H = jax.lax.map(lambda e: hvp(x0, e), jnp.eye(d, dtype=x0.dtype), batch_size=min(chunk, d))
    H = 0.5 * (H + H.T)
    evals, evecs = jnp.linalg.eigh(H)
    positive = evals[0] > 0
    inverse_evals = jnp.where(positive, 1.0 / jnp.where(positive, evals, 1.0), jnp.nan)
    Sigma = (evecs * inverse_evals) @ evecs.T
    J = jax.jacfwd(o)(x0)  # (k, d)
    U = J @ Sigma  # rows: Sigma d o_a
    jac_o = jax.jacrev(o)

    def traces(e, sigma_row):
        # Column e of d^2 o_a and of d_u H (the derivative of H along u = U_a), each
        # contracted with the matching row of Sigma: summed over columns, tr(Sigma d^2 o_a)
        # and tr(Sigma d_u H).
        curvature = jax.jvp(jac_o, (x0,), (e,))[1] @ sigma_row
        skew = jax.vmap(lambda u: jax.jvp(lambda at: hvp(at, e), (x0,), (u,))[1])(U) @ sigma_row
        return curvature, skew

    mode = o(x0)
    # A residual gradient g at x0 (x0 a minimum to finite precision) moves the mean to
    # first order by -Sigma g: -J Sigma g = -U g.
    residual = -U @ grad(x0)
    if corrections:
        eye = jnp.eye(d, dtype=x0.dtype)
        curv, skew = jax.lax.map(lambda a: traces(*a), (eye, Sigma), batch_size=min(chunk, d))
        curv, skew = jnp.sum(curv, axis=0), jnp.sum(skew, axis=0)
    else:
        curv = skew = jnp.zeros_like(mode)
    half_log_det = jnp.where(positive, 0.5 * jnp.sum(jnp.log(jnp.abs(evals))), jnp.nan)
    value = S(x0)
    defect = _gradient_defect(grad, hvp, x0, jnp.sqrt(jnp.abs(jnp.diag(Sigma))))
    return LaplacePhase(
        action=value,
        half_log_det=half_log_det,
        free_energy=value + half_log_det - 0.5 * d * jnp.log(2 * jnp.pi),
        mode=mode,
        mean=mode + residual + 0.5 * curv - 0.5 * skew,
        covariance=U @ J.T,
        min_eigenvalue=evals[0],
        gradient_defect=defect,
        twice_differentiable=(defect[1] < KINK_FLOOR) | (defect[0] > KINK_RATIO * defect[1]),
    )


KINK_FLOOR = 1e-6
"""A gradient defect (:class:`LaplacePhase`) below this at an eighth of a standard deviation
is smooth whatever its trend (float64 rounding of the gradient differences is about 1e-12)."""

KINK_RATIO = 4.0
"""Smooth when the gradient defect falls more than this from h = 1/2 to 1/8 (16 for a
twice-differentiable action, 1 with a Hessian jump, 1/4 with a gradient jump)."""

_KINK_PROBES = 4


def _gradient_defect(grad, hvp, x0, sd) -> Array:
    """(defect at h = 1/2, defect at h = 1/8) of :class:`LaplacePhase`, each the largest over
    ``_KINK_PROBES`` random sign vectors (a fixed key: the same probes every call)."""
    signs = jax.random.rademacher(jax.random.key(0), (_KINK_PROBES, x0.size), dtype=x0.dtype)
    u = signs * jnp.where(jnp.isfinite(sd), sd, 0.0)

    def defect(h, v):
        linear = 2.0 * h * hvp(x0, v)
        diff = grad(x0 + h * v) - grad(x0 - h * v)
        return jnp.linalg.norm(diff - linear) / jnp.maximum(jnp.linalg.norm(linear), 1e-300)

    at = jax.vmap(defect, in_axes=(None, 0))
    return jnp.stack([jnp.max(at(h, u)) for h in (0.5, 0.125)])


@eqx.filter_jit
def copy_head_phase(
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    G: Float[ArrayLike, "L L"],
    *,
    chunk: int = 256,
    corrections: bool = True,
) -> LaplacePhase:
    """The Laplace phase of the copy-head posterior p(G | D) ~ exp(-S(G)) at a mode G, with
    the order parameters (c_1, c_G) of A(G) (a_1, a_G for softmax) as the observables.

    d = L^2: the Hessian has L^4 entries (L = 32: 8 MB; L = 64: 134 MB in float64).
    Compiled once per head, shapes and options (the posterior and statistics are traced)."""

    def observable(G):
        return jnp.stack(order_parameters(posterior.attention(G), cyclic=posterior.cyclic))

    return laplace_phase(
        lambda G: posterior.action(G, stats),
        G,
        observable,
        chunk=chunk,
        corrections=corrections,
    )


def population_phase(
    posterior: CopyHeadPosterior,
    model: AbstractReducedModel,
    x: Float[ArrayLike, " n"],
    P: Float[ArrayLike, ""],
    *,
    corrections: bool = True,
    chunk: int = 256,
) -> LaplacePhase:
    """The Laplace phase, in all L^2 scores, of the population posterior at P sequences
    (:func:`population_statistics`) at the reduced model's point ``x`` (a minimum of its
    action: :func:`global_minimum`, :func:`local_minimum`, a :class:`PhaseDiagram` branch),
    G = ``model.scores(x, L)``. ``posterior`` must be the model's (same head and
    hyperparameters). What the saddle point leaves out: the phase's entropy in the L^2
    directions and its fluctuation shift of the order parameters."""
    L = int(model.L)
    stats = population_statistics(L, int(model.V), P, cyclic=posterior.cyclic)
    G = model.scores(jnp.asarray(x, dtype=jnp.result_type(float)), L)
    return copy_head_phase(posterior, stats, G, corrections=corrections, chunk=chunk)


class MassMixture(AbstractResult):
    """Phases weighted by their mass: ``weights`` w_k ~ m_k exp(-F_k) (summing to 1) and the
    mass-weighted ``mean`` sum_k w_k E_k[o]; ``mode_weights`` are what the actions alone
    give (m_k exp(-S_k): the saddle point's ranking, for comparison)."""

    weights: Float[Array, " n"]
    mode_weights: Float[Array, " n"]
    mean: Float[Array, " k"]


def mass_mixture(
    phases: Sequence[LaplacePhase], multiplicity: Sequence[float] | None = None
) -> MassMixture:
    """Mix Laplace phases by their mass. ``multiplicity``: how many copies of each phase an
    exact symmetry makes (default 1 each; 2 for the two mirror copy states A and -A of an odd
    head, whose observables are sign-aligned by the caller)."""
    m = jnp.ones(len(phases)) if multiplicity is None else jnp.asarray(multiplicity, float)
    F = jnp.stack([p.free_energy for p in phases])
    S = jnp.stack([p.action for p in phases])
    w = jax.nn.softmax(jnp.log(m) - F)
    return MassMixture(
        weights=w,
        mode_weights=jax.nn.softmax(jnp.log(m) - S),
        mean=jnp.einsum("n,nk->k", w, jnp.stack([p.mean for p in phases])),
    )


def phase_boundary(P: ArrayLike, first: ArrayLike, second: ArrayLike) -> float:
    """The P where ``first - second`` changes sign (linear interpolation in ln P between the
    two grid points that bracket the first change), NaN when it does not change sign.

    With the phases' actions it is the mode's boundary (equal action, the saddle point's P*);
    with their free energies, the mass's boundary (equal mass)."""
    P = np.asarray(P, float)
    diff = np.asarray(first, float) - np.asarray(second, float)
    ok = np.isfinite(diff)
    P, diff = P[ok], diff[ok]
    change = np.nonzero(np.sign(diff[:-1]) * np.sign(diff[1:]) < 0)[0]
    if change.size == 0:
        return float("nan")
    i = int(change[0])
    lp = np.log(P[i]) + (np.log(P[i + 1]) - np.log(P[i])) * diff[i] / (diff[i] - diff[i + 1])
    return float(np.exp(lp))


_INDEX = {"c_1": 0, "c_G": 1}


def laplace_shifts(posterior, model, Ps, keys, log=None) -> dict[str, np.ndarray]:
    """The Laplace shift (posterior mean minus mode) of each order parameter in ``keys`` at
    the reduced theory's global minimum at each P, on the population posterior. For an odd
    head the samples are sign-aligned (:func:`jaxdyn.copyhead._measure.measure` flips a
    sample with c_1 + c_G < 0), so the prediction is the aligned Gaussian mean
    (:func:`aligned_mean`; at the symmetric mode 0 it is sqrt(2 / pi) Cov(c, s) / sd(s), not
    0). ``twice_differentiable``: per P, whether the action is smooth at the mode (where it
    is not, the shift is no prediction). ``log(message)``: progress, one line per P."""
    odd = isinstance(posterior.head, AbstractOddCopyHead)
    out = {key: [] for key in keys}
    out["twice_differentiable"] = []
    for i, p in enumerate(Ps):
        if log is not None:
            log(f"Laplace phase at P = {float(p):g} ({i + 1} of {len(Ps)})")
        phase = population_phase(posterior, model, global_minimum(model, p).x, p)
        out["twice_differentiable"].append(bool(phase.twice_differentiable))
        mode, mean = np.asarray(phase.mode), np.asarray(phase.mean)
        if odd:
            sign = 1.0 if mode.sum() >= 0 else -1.0
            mode, mean = sign * mode, aligned_mean(mean, np.asarray(phase.covariance))
        for key in keys:
            out[key].append(float(mean[_INDEX[key]] - mode[_INDEX[key]]))
    return {k: np.array(v) for k, v in out.items()}


def aligned_mean(mean, covariance) -> np.ndarray:
    """E[sign(s) c] for Gaussian c = (c_1, c_G) with ``mean`` and ``covariance``, s = c_1 +
    c_G: m (1 - 2 Phi(-m_s / sd)) + 2 Cov(c, s) / sd phi(m_s / sd)."""
    mean, covariance = np.asarray(mean, float), np.asarray(covariance, float)
    m_s, cov_cs = mean.sum(), covariance.sum(axis=1)
    sd = float(np.sqrt(max(covariance.sum(), 0.0)))
    if sd == 0.0:
        return np.sign(m_s if m_s != 0 else 1.0) * mean
    z = m_s / sd
    Phi = 0.5 * math.erfc(z / math.sqrt(2.0))  # Phi(-z)
    phi = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return mean * (1.0 - 2.0 * Phi) + 2.0 * cov_cs / sd * phi


def phase_boundaries(posterior, model, diagram, coexistence, P_star, points=5, log=None) -> dict:
    """The mode's boundary (equal action: the saddle point's P*) and the mass's (equal free
    energy F = S + 1/2 ln det H) between the uniform and copy branches of ``diagram``, on
    ``points`` P across the ``coexistence`` window (2% in from each spinodal). ``mass`` is
    None when the free energies do not cross there (the sign of
    ``free_energy_copy_minus_uniform`` says which phase carries more mass)."""
    lo, hi = coexistence
    Ps = np.geomspace(lo + 0.02 * (hi - lo), lo + 0.98 * (hi - lo), points)
    lP = np.log(diagram.P)
    S, F = [], []
    for i, p in enumerate(Ps):
        if log is not None:
            log(f"free energies of both branches at P = {float(p):g} ({i + 1} of {points})")
        found = []
        for branch in (diagram.x_up, diagram.x_down):  # uniform, copy
            x0 = np.array([np.interp(np.log(p), lP, branch[:, j]) for j in range(branch.shape[1])])
            found.append(local_minimum(model, p, x0).x)
        phases = [population_phase(posterior, model, x, p, corrections=False) for x in found]
        # Both descents in one minimum (a branch's interpolation off its basin): no pair.
        same = np.allclose(np.asarray(found[0]), np.asarray(found[1]), rtol=1e-6, atol=1e-9)
        S.append([np.nan if same else float(ph.action) for ph in phases])
        F.append([np.nan if same else float(ph.free_energy) for ph in phases])
    S, F = np.array(S), np.array(F)
    mass = phase_boundary(Ps, F[:, 1], F[:, 0])
    return {
        "mode": float(P_star),
        "mode_on_scan": phase_boundary(Ps, S[:, 1], S[:, 0]),
        "mass": None if np.isnan(mass) else mass,
        "P": Ps.tolist(),
        "action_copy_minus_uniform": (S[:, 1] - S[:, 0]).tolist(),
        "free_energy_copy_minus_uniform": (F[:, 1] - F[:, 0]).tolist(),
    }
