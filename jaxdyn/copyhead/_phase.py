"""Phase diagrams of the reduced action: minima vs P, hysteresis, transition order, P* by bisection.

copy_head.md, "What the theory predicts" and "What the reconstruction gives". For each P the
reduced action is minimised three ways: from a grid (global search), by continuation upwards
in P from the small-P (uniform) state, and by continuation downwards from the large-P (copy)
state. The two continuations are the hysteresis runs: where they disagree, two minima coexist.

Classification from the landscape [derived]:
- "first": the branches coexist over a window [P_lo, P_hi] and the global minimum's order
  parameter jumps there; P* is where the two minima have equal action (bisection).
- "second": no coexistence, and a symmetric state (A = 0, linear attention) loses stability at
  P_c (bisection on the smallest Hessian eigenvalue of the action at A = 0); beyond it the
  amplitude rises like sqrt(P - P_c).
- "crossover": neither (e.g. softmax at L = 8).
The same question answered without these constructions, from how the largest step of the
global minimum shrinks as the P grid is refined: :func:`jaxdyn.copyhead.transition_order`.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from .._numerics import LinearFit, fit_power_law
from .._status import item_code
from ._models import (
    AbstractReducedModel,
    LinearReduced,
    MinimumStatus,
    continuation,
    global_minimum,
    local_minimum,
)
from ._reduced import Objective
from ._transition import TransitionOrder


@dataclasses.dataclass(frozen=True)
class PhaseDiagram:
    """Minima of the reduced action over a P grid (numpy arrays, leading axis = P).

    Attributes:
        P: the grid of sequence counts (sorted).
        x_global, S_global: global minimiser and its action at each P.
        x_up: continuation upwards in P from the small-P (uniform) state.
        x_down: continuation downwards in P from the large-P (copy) state.
        order_global, order_up, order_down: the model's named order parameters on each.
        coexistence: per P, whether the two continuations disagree (two minima coexist).
        status_global, status_up, status_down: per P, the minimiser's
            :class:`jaxdyn.copyhead.MinimumStatus` on each, as its integer code (host arrays,
            like a sweep's statuses; ``jaxdyn.count_outcomes(MinimumStatus, codes)`` counts
            them); ``converged()`` says whether every point is a minimum.
    """

    P: np.ndarray
    x_global: np.ndarray
    S_global: np.ndarray
    x_up: np.ndarray
    x_down: np.ndarray
    order_global: dict
    order_up: dict
    order_down: dict
    coexistence: np.ndarray
    status_global: np.ndarray
    status_up: np.ndarray
    status_down: np.ndarray

    def converged(self) -> bool:
        """Whether every point of the diagram is a (smooth) minimum."""
        ok = int(item_code(MinimumStatus.converged))
        return all(bool(np.all(s == ok)) for s in self._statuses())

    def _statuses(self):
        return (self.status_global, self.status_up, self.status_down)


def phase_diagram(
    model: AbstractReducedModel, Ps: Float[ArrayLike, " k"], *, coexistence_tol: float = 1e-3
) -> PhaseDiagram:
    """Global minimum and both hysteresis branches of the reduced action on a grid of P."""
    Ps = jnp.asarray(np.sort(np.asarray(Ps, dtype=float)))
    if Ps.ndim != 1 or Ps.shape[0] < 3:
        raise ValueError(f"P grid must be 1-D with at least 3 values, got shape {Ps.shape}")
    if not bool(jnp.all(Ps > 0)):
        raise ValueError("P grid values must be > 0")
    xg, x_up, x_down, S_global, o_global, o_up, o_down, codes = jax.tree.map(
        np.asarray, _phase_minima(model, Ps)
    )
    scale = max(float(np.max(np.abs(o_down["amplitude"]))), 1e-12)
    coex = np.abs(o_up["amplitude"] - o_down["amplitude"]) > coexistence_tol * scale
    return PhaseDiagram(
        P=np.asarray(Ps),
        x_global=xg,
        S_global=S_global,
        x_up=x_up,
        x_down=x_down,
        order_global=o_global,
        order_up=o_up,
        order_down=o_down,
        coexistence=coex,
        status_global=codes[0],
        status_up=codes[1],
        status_down=codes[2],
    )


@eqx.filter_jit
def _phase_minima(model: AbstractReducedModel, Ps):
    """The three minimisations of :func:`phase_diagram` as one program (per model type and
    grid length)."""
    grid = jax.vmap(lambda P: global_minimum(model, P))(Ps)
    # Both branches as one vmapped continuation (one copy of the minimiser in the program).
    branches = jax.vmap(lambda P, x0: continuation(model, P, x0))(
        jnp.stack([Ps, Ps[::-1]]), jnp.stack([grid.x[0], grid.x[-1]])
    )
    up = jax.tree.map(lambda a: a[0], branches)
    down = jax.tree.map(lambda a: a[1][::-1], branches)
    # The global minimum is the best of the grid search and both branches.
    found = [grid, up, down]
    vals = jnp.stack([m.action for m in found])
    best = jnp.argmin(vals, axis=0)
    rows = jnp.arange(Ps.shape[0])
    xg = jnp.stack([m.x for m in found])[best, rows]
    codes = [item_code(m.status) for m in found]
    code_g = jnp.stack(codes)[best, rows]
    orders = lambda xs: jax.vmap(model.order)(xs)
    return (
        xg,
        up.x,
        down.x,
        jnp.min(vals, axis=0),
        orders(xg),
        orders(up.x),
        orders(down.x),
        jnp.stack([code_g, codes[1], codes[2]]),
    )


def _bisect(fn, lo: float, hi: float, iterations: int, log: bool = True) -> float:
    """Root of fn on [lo, hi] (fn(lo) > 0 > fn(hi) or opposite), bisecting in log P."""
    f_lo = fn(lo)
    for _ in range(iterations):
        mid = float(np.sqrt(lo * hi)) if log else 0.5 * (lo + hi)
        f_mid = fn(mid)
        if np.sign(f_mid) == np.sign(f_lo):
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi)) if log else 0.5 * (lo + hi)


def first_order_point(
    model: AbstractReducedModel, diagram: PhaseDiagram, *, iterations: int = 40
) -> float | None:
    """P* where the copy and uniform minima have equal action (bisection), or None."""
    P = diagram.P
    S_up, S_down = (
        np.asarray(_actions(model, jnp.asarray(x), jnp.asarray(P)))
        for x in (diagram.x_up, diagram.x_down)
    )
    h = S_down - S_up
    coex = diagram.coexistence
    idx = [i for i in range(len(P) - 1) if coex[i] and coex[i + 1] and h[i] > 0 and h[i + 1] <= 0]
    if not idx:
        return None
    i = idx[0]
    x_up0, x_down0 = jnp.asarray(diagram.x_up[i]), jnp.asarray(diagram.x_down[i + 1])
    return float(
        _bisect_equal_action(
            model, jnp.asarray(P[i]), jnp.asarray(P[i + 1]), x_up0, x_down0, iterations
        )
    )


@eqx.filter_jit
def _amplitude(model: AbstractReducedModel, x):
    return model.order(x)["amplitude"]


@eqx.filter_jit
def _actions(model: AbstractReducedModel, xs, Ps):
    return jax.vmap(model.action)(xs, Ps)


@eqx.filter_jit
def _bisect_equal_action(model: AbstractReducedModel, lo, hi, x_up0, x_down0, iterations: int):
    """:func:`_bisect` in ln P of S(copy minimum) - S(uniform minimum), as one program
    (``lo``, ``hi`` arrays: a Python float would be a static argument, one compilation
    each)."""

    starts = jnp.stack([x_up0, x_down0])

    def gap(p):
        found = jax.vmap(lambda x0: local_minimum(model, p, x0))(starts)
        return found.action[1] - found.action[0]

    def body(_, carry):
        # The caller's bracket has S(copy) > S(uniform) at lo: keep lo where the gap is > 0.
        lo, hi = carry
        mid = jnp.sqrt(lo * hi)
        above = gap(mid) > 0
        return jnp.where(above, mid, lo), jnp.where(above, hi, mid)

    lo, hi = jax.lax.fori_loop(0, iterations, body, (lo, hi))
    return jnp.sqrt(lo * hi)


@eqx.filter_jit
def _symmetric_state_curvature(model, P):
    x0 = jnp.zeros(2)
    return jnp.min(jnp.linalg.eigvalsh(jax.hessian(lambda x: model.action(x, P))(x0)))


def instability_point(
    model: AbstractReducedModel, P_lo: float | int, P_hi: float | int, *, iterations: int = 60
) -> float | None:
    """P_c where the symmetric state x = 0 loses stability: the smallest eigenvalue of the
    Hessian of the reduced action at 0 crosses zero (bisection), or None."""
    if not model.symmetric_state:
        return None
    f = lambda p: float(_symmetric_state_curvature(model, jnp.asarray(p)))
    if not (f(P_lo) > 0 > f(P_hi)):
        return None
    return _bisect(f, P_lo, P_hi, iterations)


def linear_onset(model: LinearReduced) -> float:
    """Closed-form onset P_c of the linear reduced model: the smallest P > 0 at which the
    Hessian of the action at A = 0 becomes singular (copy_head.md, "Population reduction").

    To second order in c = (c_1, c_G), with kappa = sigma_w^2 / V, the action is
    c^T H(P) c / 2 with H(P) = H_0 + P H_1 - P^2 H_2,

        H_0 = L^{2 alpha} F / sigma_g^2,    H_1 = (kappa / T) ((V - 1) F + R)  (marginal only),
        H_2 = kappa / (T^2 V^2) ((V - 1) u u^T + L^2 1 1^T),

    F = [[1, 1], [1, L]] (||A||^2), R = L 1 1^T (||A 1||^2), u = (1, L) (tau). det H(P) is a
    quartic in P; P_c is its smallest positive real root (H(0) = H_0 is positive definite).
    Independent of :func:`instability_point`, which bisects on the autodiff Hessian.
    """
    L, V = float(model.L), float(model.V)
    T, sw2, sg2 = float(model.temperature), float(model.sigma_w2), float(model.sigma_g2)
    alpha = float(model.alpha)
    kappa = sw2 / V
    F = np.array([[1.0, 1.0], [1.0, L]])
    u = np.array([1.0, L])
    H0 = L ** (2 * alpha) * F / sg2
    H1 = kappa / T * ((V - 1) * F + L * np.ones((2, 2)))
    if model.objective_kind == Objective.map:
        H1 = np.zeros((2, 2))
    H2 = kappa / (T * T * V * V) * ((V - 1) * np.outer(u, u) + L * L * np.ones((2, 2)))
    # det(H0 + P H1 - P^2 H2) as a polynomial in P (coefficients of each entry: [P^2, P, 1]).
    entry = lambda i, j: np.array([-H2[i, j], H1[i, j], H0[i, j]])
    det = np.polysub(np.polymul(entry(0, 0), entry(1, 1)), np.polymul(entry(0, 1), entry(1, 0)))
    roots = np.roots(det)
    real = roots[(np.abs(roots.imag) <= 1e-9 * np.abs(roots)) & (roots.real > 0)].real
    return float(real.min()) if real.size else float("nan")


def onset_amplitudes(
    model: AbstractReducedModel, P_c: float | int, eps: Float[ArrayLike, " k"] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The global minimum's amplitude at P = P_c (1 + eps) (default eps log-spaced from 1e-4
    to 1e-2): the input of :func:`onset_exponent` and
    :func:`jaxdyn.copyhead.onset_exponent_evidence`."""
    eps = np.geomspace(1e-4, 1e-2, 8) if eps is None else np.asarray(eps, float)
    amp = np.array(
        [float(_amplitude(model, global_minimum(model, jnp.asarray(P_c * (1 + e))).x)) for e in eps]
    )
    return eps, amp


def onset_exponent(
    model: AbstractReducedModel, P_c: float | int, eps: Float[ArrayLike, " k"] | None = None
) -> tuple[float, LinearFit]:
    """Exponent beta of the amplitude ~ (P - P_c)^beta just above a continuous onset P_c.

    Global minima at P = P_c (1 + eps) (default eps from 1e-4 to 1e-2); returns beta from the
    fit of ln amplitude against ln eps and eps (the term eps absorbs the analytic correction
    (1 + b eps) of the power law), and the plain power-law fit (:func:`jaxdyn.fit_power_law`).
    """
    eps, amp = onset_amplitudes(model, P_c, eps)
    design = np.stack([np.log(eps), eps, np.ones_like(eps)], -1)
    ok = amp > 0
    coef, *_ = np.linalg.lstsq(design[ok], np.log(amp[ok]), rcond=None)
    return float(coef[0]), fit_power_law(eps, amp)


def classify_transition(
    model: AbstractReducedModel,
    diagram: PhaseDiagram,
    *,
    jump_tol: float = 0.05,
    bisection_iterations: int = 40,
) -> dict:
    """Transition order (a :class:`TransitionOrder`) with P*, window and jump size: a dict
    with keys ``transition_order``, ``P_star`` (None without a transition), ``coexistence``
    (the window of coexisting minima or None) and ``jump``.

    "first" needs coexisting minima and a jump of the order parameter ("amplitude") between
    them at P* larger than ``jump_tol`` times its largest value on the grid.
    """
    P = diagram.P
    out = {
        "transition_order": TransitionOrder.crossover,
        "P_star": None,
        "coexistence": None,
        "jump": 0.0,
    }
    if diagram.coexistence.any():
        where = np.flatnonzero(diagram.coexistence)
        out["coexistence"] = (float(P[where[0]]), float(P[where[-1]]))
        P_star = first_order_point(model, diagram, iterations=bisection_iterations)
        if P_star is not None:
            i = int(np.searchsorted(P, P_star)) - 1
            p = jnp.asarray(P_star)
            up = local_minimum(model, p, jnp.asarray(diagram.x_up[i])).x
            down = local_minimum(model, p, jnp.asarray(diagram.x_down[i + 1])).x
            jump = abs(float(_amplitude(model, down) - _amplitude(model, up)))
            scale = float(np.max(np.abs(diagram.order_global["amplitude"])))
            out.update(P_star=P_star, jump=jump)
            if jump > jump_tol * scale:
                out["transition_order"] = TransitionOrder.first
                return out
    P_c = instability_point(model, float(P[0]), float(P[-1]))
    if P_c is not None:
        out.update(transition_order=TransitionOrder.second, P_star=P_c)
    return out


@eqx.filter_jit
def _bisect_spinodal(model: AbstractReducedModel, inside, outside, starts, tol, iterations: int):
    """Bisection in ln P between ``inside`` (two minima: the local minimisations from the two
    ``starts`` end apart, by more than ``tol`` in amplitude) and ``outside`` (one minimum)."""

    def two_minima(p):
        found = jax.vmap(lambda x0: local_minimum(model, p, x0))(starts)
        amp = jax.vmap(lambda x: model.order(x)["amplitude"])(found.x)
        return jnp.abs(amp[1] - amp[0]) > tol

    def body(_, carry):
        a, b = carry
        mid = jnp.sqrt(a * b)
        two = two_minima(mid)
        return jnp.where(two, mid, a), jnp.where(two, b, mid)

    a, b = jax.lax.fori_loop(0, iterations, body, (inside, outside))
    return a, b


def _coexistence_window(model, diagram: PhaseDiagram, n_P: int, widenings: int, iterations: int):
    """Both spinodals of a first-order transition: the diagram is widened in ln P (by its own
    span on the clipped side, up to ``widenings`` times) until the coexistence window lies
    inside it, then each end is bisected in ln P ``iterations`` times. Returns (lower, upper,
    clipped, diagram): ``clipped`` when a window still touches the widened grid's end (that
    end is then the grid's, not a spinodal)."""
    d = diagram
    for _ in range(widenings + 1):
        where = np.flatnonzero(d.coexistence)
        low, high = where[0] == 0, where[-1] == d.P.size - 1
        if not (low or high):
            break
        span = float(np.log(d.P[-1] / d.P[0]))
        lo = d.P[0] * (np.exp(-span) if low else 1.0)
        hi = d.P[-1] * (np.exp(span) if high else 1.0)
        d = phase_diagram(model, np.geomspace(lo, hi, n_P))
        if not d.coexistence.any():
            return float(diagram.P[0]), float(diagram.P[-1]), True, diagram
    where = np.flatnonzero(d.coexistence)
    clipped = bool(where[0] == 0 or where[-1] == d.P.size - 1)
    scale = max(float(np.max(np.abs(d.order_down["amplitude"]))), 1e-12)
    tol = jnp.asarray(1e-3 * scale)
    ends = []
    for i, j in ((where[0], where[0] - 1), (where[-1], where[-1] + 1)):
        if j < 0 or j >= d.P.size:
            ends.append(float(d.P[i]))
            continue
        starts = jnp.stack([jnp.asarray(d.x_up[i]), jnp.asarray(d.x_down[i])])
        a, b = _bisect_spinodal(
            model, jnp.asarray(d.P[i]), jnp.asarray(d.P[j]), starts, tol, iterations
        )
        ends.append(float(np.sqrt(float(a) * float(b))))
    return ends[0], ends[1], clipped, d


def locate_transition(
    model: AbstractReducedModel,
    P_min: float | int,
    P_max: float | int,
    n_P: int = 60,
    *,
    zooms: int = 4,
    jump_tol: float = 0.05,
    widenings: int = 8,
    spinodal_iterations: int = 30,
) -> tuple[PhaseDiagram, PhaseDiagram, dict]:
    """Phase diagram on a log grid, then zoom in around the largest jump of the global order
    parameter (``zooms`` times, each window about 7 grid cells of the previous one) until the
    coexistence window spans several grid points (narrow windows, e.g. softmax at L = 16, are
    otherwise missed), and classify. P counts sequences (each of L supervised positions).

    Returns (coarse, fine, info): ``info["transition_order"]`` (a :class:`TransitionOrder`),
    ``info["P_star"]`` (equal action of the two minima; the onset for a continuous
    transition; None without one), ``info["jump"]`` and, for a first-order transition,
    ``info["coexistence"]``: the whole window between the two spinodals, the search widened
    (by its own span, up to ``widenings`` times) until both are inside and each bisected in
    ln P ``spinodal_iterations`` times; ``info["clipped"]`` says when an end is still the
    widened grid's (then it is a bound, not a spinodal)."""
    diagram = phase_diagram(model, np.geomspace(P_min, P_max, n_P))
    P = diagram.P
    i = int(np.argmax(np.abs(np.diff(diagram.order_global["amplitude"]))))
    lo, hi = P[max(i - 3, 0)], P[min(i + 4, n_P - 1)]
    fine = diagram
    for _ in range(zooms):
        fine = phase_diagram(model, np.geomspace(lo, hi, n_P))  # same length: no recompilation
        info = classify_transition(model, fine, jump_tol=jump_tol)
        if info["transition_order"] is TransitionOrder.first:
            lower, upper, clipped, _ = _coexistence_window(
                model, fine, n_P, widenings, spinodal_iterations
            )
            info.update(coexistence=(lower, upper), clipped=clipped)
            return diagram, fine, info
        where = np.flatnonzero(fine.coexistence)
        if where.size:
            lo = fine.P[max(where[0] - 2, 0)]
            hi = fine.P[min(where[-1] + 2, n_P - 1)]
        else:  # no coexistence resolved yet: narrow in on the largest jump
            i = int(np.argmax(np.abs(np.diff(fine.order_global["amplitude"]))))
            lo, hi = fine.P[max(i - 3, 0)], fine.P[min(i + 4, n_P - 1)]
    return (
        diagram,
        fine,
        {**classify_transition(model, diagram, jump_tol=jump_tol), "clipped": False},
    )


def transition_with_onset(model: AbstractReducedModel, P_min, P_max, n_P: int = 60):
    """:func:`locate_transition`, with a linear model's continuous onset P_c in closed form
    (:func:`linear_onset`) as ``info["P_star"]``."""
    diagram, fine, info = locate_transition(model, P_min, P_max, n_P)
    if isinstance(model, LinearReduced) and info["transition_order"] is TransitionOrder.second:
        info = {**info, "P_star": linear_onset(model)}
    return diagram, fine, info
