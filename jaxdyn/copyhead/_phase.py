"""Phase diagrams of the reduced action: minima vs P, hysteresis, transition order, P* by bisection.

copy_head.md, "What the theory predicts" and "What the reconstruction gives". For each P the
reduced action is minimised three ways: from a grid (global search), by continuation upwards
in P from the small-P (uniform) state, and by continuation downwards from the large-P (copy)
state. The two continuations are the hysteresis runs: where they disagree, two minima coexist.

Classification [derived]:
- "first": the branches coexist over a window [P_lo, P_hi] and the global minimum's order
  parameter jumps there; P* is where the two minima have equal action (bisection).
- "second": no coexistence, and a symmetric state (A = 0, linear attention) loses stability at
  P_c (bisection on the smallest Hessian eigenvalue of the action at A = 0); beyond it the
  amplitude rises like sqrt(P - P_c).
- "crossover": neither (e.g. softmax at L = 8).
"""

from __future__ import annotations

import abc
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._reduced import (
    _check_objective,
    linear_invariants,
    reduced_action_linear,
    reduced_action_softmax,
    softmax_order_parameters,
)


def descend(f, x0: Float[Array, " n"], iterations: int = 100) -> Float[Array, " n"]:
    """Monotone damped-Newton minimisation of a smooth low-dimensional f (backtracking over
    step fractions 2^-k of the regularised Newton step and of the gradient step)."""

    grad = jax.grad(f)
    hess = jax.hessian(f)

    def body(_, x):
        g = grad(x)
        H = hess(x)
        lam_min = jnp.min(jnp.linalg.eigvalsh(H))
        shift = jnp.maximum(0.0, -lam_min) + 1e-10 * (1.0 + jnp.max(jnp.abs(H)))
        newton = -jnp.linalg.solve(H + shift * jnp.eye(x.shape[0], dtype=x.dtype), g)
        # Small trust region: near an inflection the regularised Newton step can be enormous,
        # and a long step could hop over a barrier (these are local, hysteresis descents).
        radius = 0.1 * (1.0 + jnp.linalg.norm(x))
        newton = newton * jnp.minimum(1.0, radius / (jnp.linalg.norm(newton) + 1e-300))
        gradient = -g / (jnp.linalg.norm(g) + 1e-300) * radius
        scales = 2.0 ** -jnp.arange(0, 40, dtype=x.dtype)[:, None]
        cands = jnp.concatenate([x + scales * newton, x + scales * gradient, x[None]])
        vals = jax.vmap(f)(cands)
        vals = jnp.where(jnp.isfinite(vals), vals, jnp.inf)
        return cands[jnp.argmin(vals)]

    return jax.lax.fori_loop(0, iterations, body, x0)


class AbstractReducedModel(eqx.Module):
    """A reduced action S(x; P) on a few order-parameter coordinates x."""

    L: eqx.AbstractVar[int]
    V: eqx.AbstractVar[int]

    @abc.abstractmethod
    def action(self, x: Float[Array, " n"], P) -> Float[Array, ""]:
        """Reduced action at coordinates x and P sequences."""

    @abc.abstractmethod
    def grid(self) -> Float[Array, "k n"]:
        """Coordinates scanned for the global minimum."""

    @abc.abstractmethod
    def order(self, x: Float[Array, " n"]) -> dict[str, Float[Array, ""]]:
        """Named order parameters at x; "amplitude" is the one the transition is read from."""

    symmetric_state: eqx.AbstractVar[bool]


def _as_float(x):
    return jnp.asarray(x, dtype=jnp.result_type(float))


def _concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_common(L, V, temperature, sigma_w2, sigma_g2, objective):
    _check_objective(objective)
    if not all(_concrete(v) for v in (L, V, temperature, sigma_w2, sigma_g2)):
        return
    if L < 2:
        raise ValueError(f"L must be >= 2, got {L}")
    if V < 2:
        raise ValueError(f"V must be >= 2, got {V}")
    for name, v in (("temperature", temperature), ("sigma_w2", sigma_w2), ("sigma_g2", sigma_g2)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")


class SoftmaxReduced(AbstractReducedModel):
    """Softmax copy head reduced to the logit gap Delta (x = (Delta,))."""

    # Arrays, not static ints: one compilation serves every (L, V, T, sigma^2) of a sweep.
    L: Float[Array, ""] = eqx.field(converter=_as_float)
    V: Float[Array, ""] = eqx.field(converter=_as_float)
    temperature: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_w2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_g2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    objective: str = eqx.field(static=True, default="marginal")
    grid_points: int = eqx.field(static=True, default=2001)
    symmetric_state: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        _check_common(
            self.L, self.V, self.temperature, self.sigma_w2, self.sigma_g2, self.objective
        )

    def action(self, x, P):
        return reduced_action_softmax(
            x[0], P, L=self.L, V=self.V, temperature=self.temperature,
            sigma_w2=self.sigma_w2, sigma_g2=self.sigma_g2, objective=self.objective,
        )

    def grid(self):
        top = 2.0 * jnp.log(self.L) + 8.0
        return (-1.0 + (top + 1.0) * jnp.linspace(0.0, 1.0, self.grid_points))[:, None]

    def order(self, x):
        a1, aG = softmax_order_parameters(x[0], self.L)
        return {"delta": x[0], "a_1": a1, "a_G": aG, "amplitude": aG}


class LinearReduced(AbstractReducedModel):
    """Linear copy head A = G / L^alpha reduced to x = (c_1, c_G)."""

    L: Float[Array, ""] = eqx.field(converter=_as_float)
    V: Float[Array, ""] = eqx.field(converter=_as_float)
    temperature: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_w2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_g2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    alpha: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    objective: str = eqx.field(static=True, default="marginal")
    grid_points: int = eqx.field(static=True, default=161)
    symmetric_state: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        _check_common(
            self.L, self.V, self.temperature, self.sigma_w2, self.sigma_g2, self.objective
        )
        if _concrete(self.alpha) and not self.alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")

    def action(self, x, P):
        return reduced_action_linear(
            x, P, L=self.L, V=self.V, temperature=self.temperature, sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2, alpha=self.alpha, objective=self.objective,
        )

    def grid(self):
        # Natural scale of A: the prior L^{2 alpha} ||A||^2 balances a data term of order P/T.
        s = self.L ** (1.0 - self.alpha) * 2.0
        u = jnp.linspace(0.0, 1.0, self.grid_points)
        c1 = s * (-0.05 + 1.05 * u)
        cG = s * (-0.05 + 0.55 * u)
        return jnp.stack(jnp.meshgrid(c1, cG, indexing="ij"), -1).reshape(-1, 2)

    def order(self, x):
        c1, cG = x[0], x[1]
        frob2, *_ = linear_invariants(c1, cG, self.L)
        return {
            "c_1": c1,
            "c_G": cG,
            "c_G_normalised": jnp.sqrt(self.L) * cG,
            "amplitude": jnp.sqrt(jnp.maximum(frob2, 0.0)),
        }

    def canonical(self, x):
        """Representative of x modulo the exact mirror symmetry A -> -A (row sums >= 0)."""
        return jnp.where(x[0] + x[1] < 0, -x, x)


def _canon(model, x):
    return model.canonical(x) if isinstance(model, LinearReduced) else x


@eqx.filter_jit
def global_minimum(model: AbstractReducedModel, P) -> Float[Array, " n"]:
    """Global minimiser of the reduced action at P: grid search, then :func:`descend`."""
    grid = model.grid()
    vals = jax.vmap(lambda x: model.action(x, P))(grid)
    vals = jnp.where(jnp.isfinite(vals), vals, jnp.inf)
    x = descend(lambda y: model.action(y, P), grid[jnp.argmin(vals)])
    return _canon(model, x)


@eqx.filter_jit
def local_minimum(model: AbstractReducedModel, P, x0) -> Float[Array, " n"]:
    """Local minimiser reached from x0 (a tiny offset lifts x0 off a symmetric saddle)."""
    x = descend(lambda y: model.action(y, P), x0 + 1e-6)
    return _canon(model, x)


@eqx.filter_jit
def _continuation(model, Ps, x0):
    def step(x, P):
        x = descend(lambda y: model.action(y, P), x + 1e-6)
        x = _canon(model, x)
        return x, x

    _, xs = jax.lax.scan(step, x0, Ps)
    return xs


@dataclasses.dataclass(frozen=True)
class PhaseDiagram:
    """Minima of the reduced action over a P grid (numpy arrays, leading axis = P)."""

    P: np.ndarray
    x_global: np.ndarray
    S_global: np.ndarray
    x_up: np.ndarray  # continuation upwards in P from the small-P (uniform) state
    x_down: np.ndarray  # continuation downwards in P from the large-P (copy) state
    order_global: dict
    order_up: dict
    order_down: dict
    coexistence: np.ndarray  # bool per P: the two continuations disagree


def phase_diagram(
    model: AbstractReducedModel, Ps, *, coexistence_tol: float = 1e-3
) -> PhaseDiagram:
    """Global minimum and both hysteresis branches of the reduced action on a grid of P."""
    Ps = jnp.asarray(np.sort(np.asarray(Ps, dtype=float)))
    if Ps.ndim != 1 or Ps.shape[0] < 3:
        raise ValueError(f"P grid must be 1-D with at least 3 values, got shape {Ps.shape}")
    if not bool(jnp.all(Ps > 0)):
        raise ValueError("P grid values must be > 0")
    xg = jax.vmap(lambda P: global_minimum(model, P))(Ps)
    x_up = _continuation(model, Ps, xg[0])
    x_down = _continuation(model, Ps[::-1], xg[-1])[::-1]
    S = lambda xs: jax.vmap(model.action)(xs, Ps)
    # The global minimum is the best of the grid search and both branches.
    cands = jnp.stack([xg, x_up, x_down])
    vals = jnp.stack([S(xg), S(x_up), S(x_down)])
    best = jnp.argmin(vals, axis=0)
    xg = cands[best, jnp.arange(Ps.shape[0])]
    orders = lambda xs: {k: np.asarray(v) for k, v in jax.vmap(model.order)(xs).items()}
    o_up, o_down = orders(x_up), orders(x_down)
    scale = max(float(np.max(np.abs(o_down["amplitude"]))), 1e-12)
    coex = np.abs(o_up["amplitude"] - o_down["amplitude"]) > coexistence_tol * scale
    return PhaseDiagram(
        P=np.asarray(Ps),
        x_global=np.asarray(xg),
        S_global=np.asarray(jnp.min(vals, axis=0)),
        x_up=np.asarray(x_up),
        x_down=np.asarray(x_down),
        order_global=orders(xg),
        order_up=o_up,
        order_down=o_down,
        coexistence=coex,
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
    S_up = np.asarray(jax.vmap(model.action)(jnp.asarray(diagram.x_up), jnp.asarray(P)))
    S_down = np.asarray(jax.vmap(model.action)(jnp.asarray(diagram.x_down), jnp.asarray(P)))
    h = S_down - S_up
    coex = diagram.coexistence
    idx = [
        i
        for i in range(len(P) - 1)
        if coex[i] and coex[i + 1] and h[i] > 0 and h[i + 1] <= 0
    ]
    if not idx:
        return None
    i = idx[0]
    x_up0, x_down0 = jnp.asarray(diagram.x_up[i]), jnp.asarray(diagram.x_down[i + 1])

    def gap(p):
        p = jnp.asarray(p)
        up = local_minimum(model, p, x_up0)
        down = local_minimum(model, p, x_down0)
        return float(model.action(down, p) - model.action(up, p))

    return _bisect(gap, float(P[i]), float(P[i + 1]), iterations)


@eqx.filter_jit
def _symmetric_state_curvature(model, P):
    x0 = jnp.zeros(2)
    return jnp.min(jnp.linalg.eigvalsh(jax.hessian(lambda x: model.action(x, P))(x0)))


def instability_point(
    model: AbstractReducedModel, P_lo: float, P_hi: float, *, iterations: int = 60
) -> float | None:
    """P_c where the symmetric state x = 0 loses stability: the smallest eigenvalue of the
    Hessian of the reduced action at 0 crosses zero (bisection), or None."""
    if not model.symmetric_state:
        return None
    f = lambda p: float(_symmetric_state_curvature(model, jnp.asarray(p)))
    if not (f(P_lo) > 0 > f(P_hi)):
        return None
    return _bisect(f, P_lo, P_hi, iterations)


def classify_transition(
    model: AbstractReducedModel,
    diagram: PhaseDiagram,
    *,
    jump_tol: float = 0.05,
    bisection_iterations: int = 40,
) -> dict:
    """Transition order ("first" | "second" | "crossover") with P*, window and jump size.

    "first" needs coexisting minima and a jump of the order parameter ("amplitude") between
    them at P* larger than ``jump_tol`` times its largest value on the grid.
    """
    P = diagram.P
    out = {"transition_order": "crossover", "P_star": None, "coexistence": None, "jump": 0.0}
    if diagram.coexistence.any():
        where = np.flatnonzero(diagram.coexistence)
        out["coexistence"] = (float(P[where[0]]), float(P[where[-1]]))
        P_star = first_order_point(model, diagram, iterations=bisection_iterations)
        if P_star is not None:
            i = int(np.searchsorted(P, P_star)) - 1
            p = jnp.asarray(P_star)
            up = local_minimum(model, p, jnp.asarray(diagram.x_up[i]))
            down = local_minimum(model, p, jnp.asarray(diagram.x_down[i + 1]))
            jump = abs(float(model.order(down)["amplitude"] - model.order(up)["amplitude"]))
            scale = float(np.max(np.abs(diagram.order_global["amplitude"])))
            out.update(P_star=P_star, jump=jump)
            if jump > jump_tol * scale:
                out["transition_order"] = "first"
                return out
    P_c = instability_point(model, float(P[0]), float(P[-1]))
    if P_c is not None:
        out.update(transition_order="second", P_star=P_c)
    return out


def locate_transition(
    model: AbstractReducedModel,
    P_min: float,
    P_max: float,
    n_P: int = 60,
    *,
    zooms: int = 4,
    jump_tol: float = 0.05,
) -> tuple[PhaseDiagram, PhaseDiagram, dict]:
    """Phase diagram on a log grid, then zoom in around the largest jump of the global order
    parameter until the coexistence window spans several grid points (narrow windows, e.g.
    softmax at L = 16, are otherwise missed), and classify. Returns (coarse, fine, info)."""
    diagram = phase_diagram(model, np.geomspace(P_min, P_max, n_P))
    P = diagram.P
    i = int(np.argmax(np.abs(np.diff(diagram.order_global["amplitude"]))))
    lo, hi = P[max(i - 3, 0)], P[min(i + 4, n_P - 1)]
    fine = diagram
    for _ in range(zooms):
        fine = phase_diagram(model, np.geomspace(lo, hi, n_P))  # same length: no recompilation
        info = classify_transition(model, fine, jump_tol=jump_tol)
        if info["transition_order"] == "first":
            return diagram, fine, info
        where = np.flatnonzero(fine.coexistence)
        if where.size == 0:
            break
        lo = fine.P[max(where[0] - 2, 0)]
        hi = fine.P[min(where[-1] + 2, n_P - 1)]
    return diagram, fine, classify_transition(model, diagram, jump_tol=jump_tol)
