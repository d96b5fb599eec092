"""Reduced models: the population action on a few order-parameter coordinates, and its minima.

copy_head.md, "Population reduction" and "What the reconstruction gives". A reduced model maps
coordinates x to scores G(x) and an action S(x; P); :func:`global_minimum` (grid search, then
damped Newton) and :func:`local_minimum` find its minima at a number P of sequences.
"""

from __future__ import annotations

import abc
import enum
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._validation import is_traced, require_positive
from ._heads import AbstractCopyHead, LinearCopyHead, SoftmaxCopyHead
from ._order import order_parameters
from ._reduced import (
    check_objective,
    linear_invariants,
    population_action,
    reduced_action_linear,
    reduced_action_softmax,
    softmax_order_parameters,
)
from ._task import shift_matrix, uniform_matrix


def descend(
    f, x0: Float[Array, " n"], iterations: int = 100, xtol: float = 0.0
) -> Float[Array, " n"]:
    """Monotone damped-Newton minimisation of a smooth low-dimensional f (backtracking over
    step fractions 2^-k of the regularised Newton step and of the gradient step), stopped
    after ``iterations`` or once a step moves x by at most ``xtol`` (1 + |x|). With the
    default 0 it stops at a fixed point of the iteration (a step that leaves x unchanged,
    after which every further step would too): the result of all ``iterations`` steps."""

    grad = jax.grad(f)
    hess = jax.hessian(f)

    def step(x):
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

    def body(carry):
        i, x, _ = carry
        new = step(x)
        return i + 1, new, jnp.linalg.norm(new - x) <= xtol * (1.0 + jnp.linalg.norm(x))

    def cond(carry):
        i, _, done = carry
        return (i < iterations) & ~done

    _, x, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.asarray(False)))
    return x


def _as_float(x) -> Array:
    return jnp.asarray(x, dtype=jnp.result_type(float))


def _check_sizes(L, V) -> None:
    if is_traced(L, V):
        return
    if not float(L) >= 2:
        raise ValueError(f"L must be >= 2, got {L}")
    if not float(V) >= 1:
        raise ValueError(f"V must be >= 1, got {V}")


class AbstractReducedModel(eqx.Module):
    """A reduced action S(x; P) on a few order-parameter coordinates x of a head.

    For a head of your own, :class:`HeadReduced` builds one from the head and a few L x L
    score directions; subclass this only for a reduced action in closed form (as
    :class:`SoftmaxReduced` and :class:`LinearReduced` are).

    Attributes:
        L, V: sequence length and vocabulary (arrays: one compilation serves every value).
        temperature, sigma_w2, sigma_g2: as in :class:`jaxdyn.copyhead.CopyHeadPosterior`.
        objective: ``"marginal"`` (W integrated out: the posterior of G) or ``"map"`` (the
            profile of the joint energy: what Adam to the joint MAP minimises).
    """

    L: eqx.AbstractVar[Float[Array, ""]]
    V: eqx.AbstractVar[Float[Array, ""]]
    temperature: eqx.AbstractVar[Float[Array, ""]]
    sigma_w2: eqx.AbstractVar[Float[Array, ""]]
    sigma_g2: eqx.AbstractVar[Float[Array, ""]]
    objective: eqx.AbstractVar[str]
    symmetric_state: eqx.AbstractClassVar[bool]

    @abc.abstractmethod
    def action(self, x: Float[Array, " n"], P: Float[ArrayLike, ""]) -> Float[Array, ""]:
        """Reduced action at coordinates x and P sequences."""

    @abc.abstractmethod
    def grid(self) -> Float[Array, "k n"]:
        """Coordinates scanned for the global minimum."""

    @abc.abstractmethod
    def order(self, x: Float[Array, " n"]) -> dict[str, Float[Array, ""]]:
        """Named order parameters at x; "amplitude" is the one the transition is read from."""

    @abc.abstractmethod
    def scores(self, x: Float[Array, " n"], L: int) -> Float[Array, "L L"]:
        """The L x L scores G(x) of the reduced state (``L`` given as a Python int)."""

    @abc.abstractmethod
    def head(self) -> AbstractCopyHead:
        """The attention head this model reduces."""

    @abc.abstractmethod
    def canonical(self, x: Float[Array, " n"]) -> Float[Array, " n"]:
        """Representative of x modulo the model's exact symmetries."""

    def __check_init__(self):
        check_objective(self.objective)
        _check_sizes(self.L, self.V)
        for name in ("temperature", "sigma_w2", "sigma_g2"):
            if not is_traced(getattr(self, name)):
                require_positive(name, getattr(self, name))


class SoftmaxReduced(AbstractReducedModel):
    """Softmax copy head reduced to the logit gap Delta (x = (Delta,)), with row-centred
    scores G = Delta (S - 1 1^T / L): the row-constant part of G is a gauge of softmax."""

    L: Float[Array, ""] = eqx.field(converter=_as_float)
    V: Float[Array, ""] = eqx.field(converter=_as_float)
    temperature: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_w2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_g2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    objective: str = eqx.field(static=True, default="marginal")
    grid_points: int = eqx.field(static=True, default=2001)
    symmetric_state: ClassVar[bool] = False

    def action(self, x, P):
        return reduced_action_softmax(
            x[0],
            P,
            L=self.L,
            V=self.V,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2,
            objective=self.objective,
        )

    def grid(self):
        top = 2.0 * jnp.log(self.L) + 8.0
        return (-1.0 + (top + 1.0) * jnp.linspace(0.0, 1.0, self.grid_points))[:, None]

    def order(self, x):
        a1, aG = softmax_order_parameters(x[0], self.L)
        return {"delta": x[0], "a_1": a1, "a_G": aG, "amplitude": aG}

    def scores(self, x, L):
        return x[0] * (shift_matrix(L) - 1.0 / L)

    def head(self):
        return SoftmaxCopyHead()

    def canonical(self, x):
        return x


class LinearReduced(AbstractReducedModel):
    """Linear copy head A = G / L^alpha reduced to x = (c_1, c_G), A = c_1 U + c_G S."""

    L: Float[Array, ""] = eqx.field(converter=_as_float)
    V: Float[Array, ""] = eqx.field(converter=_as_float)
    temperature: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_w2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    sigma_g2: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    alpha: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    objective: str = eqx.field(static=True, default="marginal")
    grid_points: int = eqx.field(static=True, default=161)
    symmetric_state: ClassVar[bool] = True

    def action(self, x, P):
        return reduced_action_linear(
            x,
            P,
            L=self.L,
            V=self.V,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2,
            alpha=self.alpha,
            objective=self.objective,
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

    def scores(self, x, L):
        return jnp.asarray(L, x.dtype) ** self.alpha * (
            x[0] * uniform_matrix(L) + x[1] * shift_matrix(L)
        )

    def head(self):
        return LinearCopyHead(alpha=self.alpha)

    def canonical(self, x):
        """Representative modulo the exact mirror symmetry A -> -A (row sums >= 0)."""
        return jnp.where(x[0] + x[1] < 0, -x, x)


def global_minimum(model: AbstractReducedModel, P: Float[ArrayLike, ""]) -> Float[Array, " n"]:
    """Global minimiser of the reduced action at P: grid search, then :func:`descend`."""
    return _global_minimum(model, _as_float(P))


def local_minimum(
    model: AbstractReducedModel, P: Float[ArrayLike, ""], x0: Float[ArrayLike, " n"]
) -> Float[Array, " n"]:
    """Local minimiser reached from x0 (a tiny offset lifts x0 off a symmetric saddle)."""
    return _local_minimum(model, _as_float(P), _as_float(x0))


def continuation(
    model: AbstractReducedModel, Ps: Float[ArrayLike, " k"], x0: Float[ArrayLike, " n"]
) -> Float[Array, "k n"]:
    """Local minima along Ps, each descent starting from the previous minimum (a hysteresis
    branch when Ps is monotone)."""
    return _continuation(model, _as_float(Ps), _as_float(x0))


# The compiled minimisers take P as an array (a Python float would be a static argument of
# filter_jit: one compilation per value); L, V of the built-in models are arrays too, so each
# model type compiles once.
@eqx.filter_jit
def _global_minimum(model, P):
    grid = model.grid()
    vals = jax.vmap(lambda x: model.action(x, P))(grid)
    vals = jnp.where(jnp.isfinite(vals), vals, jnp.inf)
    x = descend(lambda y: model.action(y, P), grid[jnp.argmin(vals)])
    return model.canonical(x)


@eqx.filter_jit
def _local_minimum(model, P, x0):
    x = descend(lambda y: model.action(y, P), jnp.asarray(x0) + 1e-6)
    return model.canonical(x)


@eqx.filter_jit
def _continuation(model, Ps, x0):
    def step(x, P):
        x = model.canonical(descend(lambda y: model.action(y, P), x + 1e-6))
        return x, x

    _, xs = jax.lax.scan(step, jnp.asarray(x0), jnp.asarray(Ps))
    return xs


class HeadReduced(AbstractReducedModel):
    """The population action of any head restricted to scores G(x) = sum_i x_i D_i spanned by
    a few L x L ``directions`` D_i (copy_head.md, "Population reduction", exact for i.i.d.
    tokens): a reduced model of a head of your own in one line,
    ``HeadReduced(head, jnp.stack([uniform_matrix(L), shift_matrix(L)]), V=V)``.

    The order parameters are (c_1, c_G) of A(G(x)) (:func:`jaxdyn.copyhead.order_parameters`)
    and ``amplitude`` = c_G. The global minimum is searched on the box ``[lo, hi]^n`` with
    ``grid_points`` per axis. The minimisers need the action to be twice differentiable near
    its minima; a non-smooth head (a ReLU kink) is minimised, and
    :func:`minimum_status` says when the point found is not a minimum.

    Attributes:
        attention_head: the head (any :class:`jaxdyn.copyhead.AbstractCopyHead`).
        directions: (n, L, L) score directions.
        V, temperature, sigma_w2, sigma_g2, objective: as :class:`SoftmaxReduced`.
        lo, hi, grid_points: the global-search box.
    """

    attention_head: AbstractCopyHead
    directions: Float[Array, "n L L"]
    L: Float[Array, ""]
    V: Float[Array, ""]
    temperature: Float[Array, ""]
    sigma_w2: Float[Array, ""]
    sigma_g2: Float[Array, ""]
    objective: str = eqx.field(static=True)
    lo: float = eqx.field(static=True)
    hi: float = eqx.field(static=True)
    grid_points: int = eqx.field(static=True)
    symmetric_state: ClassVar[bool] = False

    def __init__(
        self,
        attention_head: AbstractCopyHead,
        directions: Float[ArrayLike, "n L L"],
        *,
        V: float | int | ArrayLike,
        temperature: float | int | ArrayLike = 1.0,
        sigma_w2: float | int | ArrayLike = 1.0,
        sigma_g2: float | int | ArrayLike = 1.0,
        objective: str = "marginal",
        lo: float | int = -1.0,
        hi: float | int = 8.0,
        grid_points: int = 161,
    ):
        self.attention_head = attention_head
        self.directions = _as_float(directions)
        self.L = _as_float(self.directions.shape[-1])
        self.V = _as_float(V)
        self.temperature = _as_float(temperature)
        self.sigma_w2 = _as_float(sigma_w2)
        self.sigma_g2 = _as_float(sigma_g2)
        self.objective = objective
        self.lo, self.hi, self.grid_points = float(lo), float(hi), int(grid_points)

    def __check_init__(self):
        if self.directions.ndim != 3 or self.directions.shape[1] != self.directions.shape[2]:
            raise ValueError(f"directions must be (n, L, L), got {self.directions.shape}")
        if not self.hi > self.lo or self.grid_points < 2:
            raise ValueError(f"need hi > lo and grid_points >= 2, got {self.lo}, {self.hi}")
        super().__check_init__()

    def action(self, x, P):
        G = self.scores(x, self.directions.shape[-1])
        return population_action(
            G,
            self.attention_head.weights(G),
            P,
            V=self.V,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            sigma_g2=self.sigma_g2,
            objective=self.objective,
        )

    def grid(self):
        n = self.directions.shape[0]
        axis = jnp.linspace(self.lo, self.hi, self.grid_points)
        mesh = jnp.meshgrid(*([axis] * n), indexing="ij")
        return jnp.stack(mesh, -1).reshape(-1, n)

    def order(self, x):
        c1, cG = order_parameters(
            self.attention_head.weights(self.scores(x, self.directions.shape[-1]))
        )
        return {"c_1": c1, "c_G": cG, "amplitude": cG}

    def scores(self, x, L):
        return jnp.tensordot(x, self.directions, axes=1)

    def head(self):
        return self.attention_head

    def canonical(self, x):
        return x


class MinimumStatus(enum.Enum):
    """Whether a point returned by :func:`global_minimum` / :func:`local_minimum` is a
    minimum: ``converged`` (small gradient, no lower probe), ``stalled`` (the gradient is not
    small: the descent stopped on a slope), ``non_smooth`` (the gradient is small but a probe
    step finds a lower action: a kink, where derivatives do not describe the action)."""

    converged = "converged"
    stalled = "stalled"
    non_smooth = "non_smooth"


def minimum_status(
    model: AbstractReducedModel,
    x: Float[ArrayLike, " n"],
    P: Float[ArrayLike, ""],
    *,
    gradient_tolerance: float = 1e-6,
    probe: float = 1e-3,
) -> MinimumStatus:
    """Check a minimiser's result: the gradient norm (relative to 1 + |S|) against
    ``gradient_tolerance``, then the action at x +- probe (1 + |x|) e_i and along the
    diagonals: any lower by more than 1e-9 (1 + |S|) is a descent direction the derivatives
    missed."""
    x = jnp.asarray(x, dtype=jnp.result_type(float))
    f = lambda y: model.action(y, P)
    S = float(f(x))
    scale = 1.0 + abs(S)
    if float(jnp.linalg.norm(jax.grad(f)(x))) > gradient_tolerance * scale:
        return MinimumStatus.stalled
    n = x.shape[0]
    eye = jnp.eye(n, dtype=x.dtype)
    steps = jnp.concatenate([eye, -eye, jnp.ones((1, n)), -jnp.ones((1, n))])
    h = probe * (1.0 + jnp.linalg.norm(x))
    values = jax.vmap(f)(x + h * steps)
    if float(jnp.min(values)) < S - 1e-9 * scale:
        return MinimumStatus.non_smooth
    return MinimumStatus.converged
