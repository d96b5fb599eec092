"""Reduced models: the population action on a few order-parameter coordinates, and its minima.

copy_head.md, "Population reduction" and "What the reconstruction gives". A reduced model maps
coordinates x to scores G(x) and an action S(x; P); :func:`global_minimum` (grid search, then
Newton in a trust region, optimistix) and :func:`local_minimum` find its minima at a number P
of sequences, each with a :class:`MinimumStatus`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from jaxdyn._printing import AbstractResult

from .._validation import is_traced, require_positive
from ._heads import AbstractCopyHead, AbstractRowHead, LinearCopyHead, SoftmaxCopyHead
from ._order import order_parameters
from ._reduced import (
    Objective,
    linear_invariants,
    objective_of,
    objective_weight,
    population_action,
    population_data_term,
    reduced_action_linear,
    reduced_action_softmax,
    softmax_order_parameters,
)
from ._task import shift_matrix, uniform_matrix


class MinimumStatus(eqx.Enumeration):
    """Whether a point returned by the reduced minimisers is a minimum (an equinox
    Enumeration, like :class:`jaxdyn.Status`: traced, vmapped, compared with ``==``)."""

    __module__ = "jaxdyn.copyhead"  # items print with the public name

    converged = "small gradient and no lower probe point: a minimum"
    stalled = "the gradient is not small: the descent stopped on a slope"
    non_smooth = (
        "small gradient but a probe step finds a lower action: a kink, where derivatives do "
        "not describe the action"
    )


class _NewtonTrustRegion(optx.AbstractQuasiNewton):
    """Newton's method on the exact Hessian in a classical trust region (optimistix): the
    damped step (H + lambda I)^{-1} g with lambda = 1 / radius set by the ratio of the actual
    to the predicted decrease. An indefinite Hessian is shifted to positive definite, so each
    step is a descent direction and an accepted step never climbs."""

    rtol: float
    atol: float
    hessian: Callable
    norm: Callable = optx.max_norm
    use_inverse: bool = False
    descent: optx.AbstractDescent = optx.DampedNewtonDescent()
    search: optx.AbstractSearch = optx.ClassicalTrustRegion()
    verbose: Callable = lambda **kwargs: None

    def init_hessian(self, y, f, grad):
        eye = lx.MatrixLinearOperator(
            jnp.eye(y.shape[0], dtype=y.dtype), lx.positive_semidefinite_tag
        )
        return optx.FunctionInfo.EvalGradHessian(f, grad, eye), None

    def update_hessian(self, y, y_eval, f_info, f_eval_info, hessian_update_state):
        H = self.hessian(y_eval)
        lam_min = jnp.min(jnp.linalg.eigvalsh(H))
        shift = jnp.maximum(0.0, -lam_min) + 1e-12 * (1.0 + jnp.max(jnp.abs(H)))
        H = H + shift * jnp.eye(y.shape[0], dtype=y.dtype)
        op = lx.MatrixLinearOperator(H, lx.positive_semidefinite_tag)
        return optx.FunctionInfo.EvalGradHessian(f_eval_info.f, f_eval_info.grad, op), None


# Relative tolerances of the Newton solve (steps and action changes, optimistix's Cauchy
# criterion), its step budget, and the kink probe of :func:`_minimise_locally`.
NEWTON_RTOL = 1e-11
NEWTON_MAX_STEPS = 200
KINK_PROBE = 1e-3
KINK_RESTARTS = 3
GRADIENT_TOLERANCE = 1e-6


def _probe(f, x) -> tuple[Array, Array]:
    """Whether f is lower (by more than 1e-9 (1 + |f(x)|)) at one of x +- KINK_PROBE
    (1 + |x|) along the axes and both diagonals, and the lowest such point."""
    n = x.shape[0]
    eye = jnp.eye(n, dtype=x.dtype)
    ones = jnp.ones((1, n), x.dtype)
    cands = x + KINK_PROBE * (1.0 + jnp.linalg.norm(x)) * jnp.concatenate([eye, -eye, ones, -ones])
    vals = jax.vmap(f)(cands)
    vals = jnp.where(jnp.isfinite(vals), vals, jnp.inf)
    i = jnp.argmin(vals)
    S = f(x)
    return vals[i] < S - 1e-9 * (1.0 + jnp.abs(S)), cands[i]


def _minimise_locally(f, x0: Float[Array, " n"]) -> tuple[Float[Array, " n"], MinimumStatus]:
    """Local minimiser of a low-dimensional f from x0 (optimistix Newton trust region), and
    its :class:`MinimumStatus`. After the solve, the action at
    x +- KINK_PROBE (1 + |x|) along the axes and diagonals is probed: a lower probe is a
    descent direction the derivatives missed (a kink, e.g. a ReLU head at G = 0), and the
    solve restarts from it (at most KINK_RESTARTS times). Status: ``converged`` (gradient
    norm at most GRADIENT_TOLERANCE (1 + |f|), no lower probe), ``stalled`` (the gradient is
    not small: out of steps, or a trust region shrunk to nothing), ``non_smooth`` (still a
    lower probe)."""
    x0 = jnp.asarray(x0)
    solver = _NewtonTrustRegion(rtol=NEWTON_RTOL, atol=NEWTON_RTOL, hessian=jax.hessian(f))

    def solve(x):
        # throw=False: a solve that runs out of steps returns its last iterate, judged below
        # by its gradient (no host callback, so the program is cached).
        return optx.minimise(
            lambda y, _: f(y), solver, x, max_steps=NEWTON_MAX_STEPS, throw=False
        ).value

    def body(carry):
        k, x, _ = carry
        x = solve(x)
        lower, better = _probe(f, x)
        return k + 1, jnp.where(lower, better, x), lower

    def cond(carry):
        k, _, lower = carry
        return (k == 0) | (lower & (k <= KINK_RESTARTS))

    _, x, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.asarray(False)))
    return x, _point_status(f, x)


def _point_status(f, x) -> MinimumStatus:
    """:class:`MinimumStatus` of x as a minimum of f (the rule of :func:`minimum_status`)."""
    small = jnp.linalg.norm(jax.grad(f)(x)) <= GRADIENT_TOLERANCE * (1.0 + jnp.abs(f(x)))
    lower, _ = _probe(f, x)
    smooth = MinimumStatus.where(lower, MinimumStatus.non_smooth, MinimumStatus.converged)
    return MinimumStatus.where(small, smooth, MinimumStatus.stalled)


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
        objective: a :class:`jaxdyn.copyhead.Objective` (``marginal``: W integrated out, the
            posterior of G; ``map``: the profile of the joint energy, what Adam to the joint
            MAP minimises), stored as the weight of the ln det term (1.0 or 0.0: both
            objectives share one compiled program); ``objective_kind`` gives it back.
    """

    L: eqx.AbstractVar[Float[Array, ""]]
    V: eqx.AbstractVar[Float[Array, ""]]
    temperature: eqx.AbstractVar[Float[Array, ""]]
    sigma_w2: eqx.AbstractVar[Float[Array, ""]]
    sigma_g2: eqx.AbstractVar[Float[Array, ""]]
    objective: eqx.AbstractVar[Float[Array, ""]]
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

    def status(self, x: Float[ArrayLike, " n"], P: Float[ArrayLike, ""]) -> MinimumStatus:
        """Whether ``x`` is a minimum of the action at P (any point: a minimiser's end point,
        a phase diagram's branch): the gradient norm against GRADIENT_TOLERANCE (1 + |S|)
        (else ``stalled``), then the action at x +- KINK_PROBE (1 + |x|) along the axes and
        diagonals: a lower one (by more than 1e-9 (1 + |S|)) is a descent direction the
        derivatives missed (``non_smooth``)."""
        return minimum_status(self, x, P)

    @property
    def objective_kind(self) -> Objective:
        """The :class:`jaxdyn.copyhead.Objective` this model minimises."""
        return objective_of(self.objective)

    def __check_init__(self):
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
    objective: Float[Array, ""] = eqx.field(
        converter=objective_weight, default=1.0
    )  # Objective.marginal
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


class RowHeadReduced(AbstractReducedModel):
    """The closed-form reduced model of any :class:`jaxdyn.copyhead.AbstractRowHead`, on the
    logit gap Delta (x = (Delta,)) with row-centred scores G = Delta (S - 1 1^T / L), as
    :class:`SoftmaxReduced` is for softmax.

    Every row of G holds one entry Delta (1 - 1/L) (the copy position) and L - 1 entries
    -Delta / L, so the head's weights are p = A_{l,l-1} and q on the others, from
    ``head.row_weights`` on those two values with multiplicities (1, L - 1). Then
    A = L q U + (p - q) S, and the population action (copy_head.md, "Population reduction")
    has ||A||_F^2 = L (p^2 + (L - 1) q^2), ||A 1||^2 = L r^2 with r = p + (L - 1) q,
    tau = L p, 1^T A 1 = L r, prior (L - 1) Delta^2 / (2 sigma_g^2): O(1) per evaluation at
    any L (L = 2^40 in float64). For a head that is not invariant under adding a constant to
    a row this is the restriction of the population action to row-centred scores (what the
    dense :class:`HeadReduced` with the one direction S - 1 1^T / L computes, at O(L^2)).

    Attributes:
        attention_head: the head (an :class:`jaxdyn.copyhead.AbstractRowHead`).
        L, V, temperature, sigma_w2, sigma_g2, objective: as :class:`SoftmaxReduced`.
        grid_points: points of the global search over Delta in [-1, 2 ln L + 8].
    """

    attention_head: AbstractRowHead
    L: Float[Array, ""]
    V: Float[Array, ""]
    temperature: Float[Array, ""]
    sigma_w2: Float[Array, ""]
    sigma_g2: Float[Array, ""]
    objective: Float[Array, ""]
    grid_points: int = eqx.field(static=True)
    symmetric_state: ClassVar[bool] = False

    def __init__(
        self,
        attention_head: AbstractRowHead,
        *,
        L: float | int | ArrayLike,
        V: float | int | ArrayLike,
        temperature: float | int | ArrayLike = 1.0,
        sigma_w2: float | int | ArrayLike = 1.0,
        sigma_g2: float | int | ArrayLike = 1.0,
        objective: Objective | Float[ArrayLike, ""] = Objective.marginal,
        grid_points: int = 2001,
    ):
        self.attention_head = attention_head
        self.L, self.V = _as_float(L), _as_float(V)
        self.temperature = _as_float(temperature)
        self.sigma_w2, self.sigma_g2 = _as_float(sigma_w2), _as_float(sigma_g2)
        self.objective = objective_weight(objective)
        self.grid_points = int(grid_points)

    def __check_init__(self):
        if not isinstance(self.attention_head, AbstractRowHead):
            got = type(self.attention_head).__name__
            raise TypeError(f"attention_head must be an AbstractRowHead, got {got}")
        super().__check_init__()

    def copy_weights(
        self, delta: Float[ArrayLike, ""]
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """(p, q): the head's weight on the copy position and on each other position of a row
        with logit gap ``delta``."""
        delta = jnp.asarray(delta, self.L.dtype)
        values = jnp.stack([delta * (1.0 - 1.0 / self.L), -delta / self.L])
        counts = jnp.stack([jnp.ones_like(self.L), self.L - 1.0])
        w = self.attention_head.row_weights(values, counts)
        return w[0], w[1]

    def action(self, x, P):
        L = self.L
        p, q = self.copy_weights(x[0])
        r = p + (L - 1.0) * q
        data = population_data_term(
            L * (p**2 + (L - 1.0) * q**2),
            L * r**2,
            L * p,
            L * r,
            P,
            V=self.V,
            temperature=self.temperature,
            sigma_w2=self.sigma_w2,
            objective=self.objective,
        )
        return (L - 1.0) * x[0] ** 2 / (2.0 * self.sigma_g2) + data

    def grid(self):
        top = 2.0 * jnp.log(self.L) + 8.0
        return (-1.0 + (top + 1.0) * jnp.linspace(0.0, 1.0, self.grid_points))[:, None]

    def order(self, x):
        p, q = self.copy_weights(x[0])
        return {"delta": x[0], "a_1": self.L * q, "a_G": p - q, "amplitude": p - q}

    def scores(self, x, L):
        return x[0] * (shift_matrix(L) - 1.0 / L)

    def head(self):
        return self.attention_head

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
    objective: Float[Array, ""] = eqx.field(
        converter=objective_weight, default=1.0
    )  # Objective.marginal
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


class ReducedMinimum(AbstractResult):
    """A minimiser's result: the point ``x``, the ``action`` there and its ``status``, a
    :class:`MinimumStatus` (arrays with a leading axis when batched; compare with ``==``,
    e.g. ``found.status == MinimumStatus.converged``). ``converged()`` says whether every
    point is a minimum."""

    x: Float[Array, "... n"]
    action: Float[Array, "..."]
    status: MinimumStatus

    def converged(self) -> bool:
        return bool(jnp.all(self.status == MinimumStatus.converged))


def global_minimum(model: AbstractReducedModel, P: Float[ArrayLike, ""]) -> ReducedMinimum:
    """Global minimiser of the reduced action at P: grid search, then
    Newton in a trust region from the best grid point, with its status."""
    return _global_minimum(model, _as_float(P))


def local_minimum(
    model: AbstractReducedModel, P: Float[ArrayLike, ""], x0: Float[ArrayLike, " n"]
) -> ReducedMinimum:
    """Local minimiser reached from x0 (a tiny offset lifts x0 off a symmetric saddle), with
    its status."""
    return _local_minimum(model, _as_float(P), _as_float(x0))


def continuation(
    model: AbstractReducedModel, Ps: Float[ArrayLike, " k"], x0: Float[ArrayLike, " n"]
) -> ReducedMinimum:
    """Local minima along Ps, each descent starting from the previous minimum (a hysteresis
    branch when Ps is monotone), with their statuses."""
    return _continuation(model, _as_float(Ps), _as_float(x0))


def _descend(model, P, x0) -> ReducedMinimum:
    f = lambda y: model.action(y, P)
    x, status = _minimise_locally(f, x0)
    return ReducedMinimum(model.canonical(x), f(x), status)


# The compiled minimisers take P as an array (a Python float would be a static argument of
# filter_jit: one compilation per value); L, V of the built-in models are arrays too, so each
# model type compiles once.
@eqx.filter_jit
def _global_minimum(model, P):
    grid = model.grid()
    vals = jax.vmap(lambda x: model.action(x, P))(grid)
    vals = jnp.where(jnp.isfinite(vals), vals, jnp.inf)
    return _descend(model, P, grid[jnp.argmin(vals)])


@eqx.filter_jit
def _local_minimum(model, P, x0):
    return _descend(model, P, jnp.asarray(x0) + 1e-6)


@eqx.filter_jit
def _continuation(model, Ps, x0):
    def step(x, P):
        found = _descend(model, P, x + 1e-6)
        return found.x, found

    _, found = jax.lax.scan(step, jnp.asarray(x0), jnp.asarray(Ps))
    return found


class HeadReduced(AbstractReducedModel):
    """The population action of any head restricted to scores G(x) = sum_i x_i D_i spanned by
    a few L x L ``directions`` D_i (copy_head.md, "Population reduction", exact for i.i.d.
    tokens): a reduced model of a head of your own in one line,
    ``HeadReduced.copy_span(head, L, V=V)`` (directions U and S), or
    ``HeadReduced(head, directions, V=V)`` for directions of your own.

    The order parameters are (c_1, c_G) of A(G(x)) (:func:`jaxdyn.copyhead.order_parameters`)
    and ``amplitude`` = c_G. The global minimum is searched on the box ``[lo, hi]^n`` with
    ``grid_points`` per axis. The minimisers need the action to be twice differentiable near
    its minima; a non-smooth head (a ReLU kink) is minimised, and
    the minimisers restart from a lower probe point and report a status
    (:class:`ReducedMinimum`, :func:`minimum_status`) when the point found is not a minimum.

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
    objective: Float[Array, ""]
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
        objective: Objective | Float[ArrayLike, ""] = Objective.marginal,
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
        self.objective = objective_weight(objective)
        self.lo, self.hi, self.grid_points = float(lo), float(hi), int(grid_points)

    @classmethod
    def copy_span(cls, attention_head: AbstractCopyHead, L: int, **kwargs) -> HeadReduced:
        """The head's population action on G = c_1 U + c_G S (uniform pooling and the copy
        pattern, copy_head.md "Order parameters"); ``kwargs`` as the constructor's."""
        return cls(attention_head, jnp.stack([uniform_matrix(L), shift_matrix(L)]), **kwargs)

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


# Rounding of a float action, in units of eps (1 + |S|): the resolution of a minimum's
# location in :func:`minimum_error`.
ROUNDING_ULPS = 64.0


def minimum_error(
    model: AbstractReducedModel,
    x: Float[ArrayLike, " n"],
    P: Float[ArrayLike, ""],
    observable: Callable[[Array], Array],
) -> Float[Array, " k"]:
    """Bound on |o(x) - o(x*)| for an observable o of a point x a reduced minimiser returned
    and the exact minimum x* it approaches: |J_o(x)| (|H^{-1} g| + sqrt(2 dS / lambda_min))
    + ROUNDING_ULPS eps (1 + |o(x)|), with g, H the gradient and Hessian of S at x and
    dS = ROUNDING_ULPS eps (1 + |S|). The
    first term is the Newton step (the remaining distance); the second the resolution of a
    minimum in floating point (its location is determined only to where the action's
    curvature equals its rounding), so the bound is never 0, also where x* = 0 exactly.
    +inf where H is not positive definite (a soft mode: undetermined at this order).
    ``observable`` maps x to a (k,) array (jit the caller; it is traced here)."""
    x = _as_float(x)
    f = lambda y: model.action(y, P)
    S, g = jax.value_and_grad(f)(x)
    H = jax.hessian(f)(x)
    lam_min = jnp.linalg.eigvalsh(H)[0]
    definite = lam_min > 0
    safe = jnp.where(definite, H, jnp.eye(x.shape[0], dtype=x.dtype))
    step = jnp.linalg.norm(jnp.linalg.solve(safe, g))
    dS = ROUNDING_ULPS * jnp.finfo(x.dtype).eps * (1.0 + jnp.abs(S))
    resolution = jnp.sqrt(2.0 * dS / jnp.where(definite, lam_min, 1.0))
    o = lambda y: jnp.atleast_1d(observable(y))
    J = jnp.atleast_2d(jax.jacfwd(o)(x))
    # + the observable's own rounding (it is evaluated in floating point too).
    rounding = ROUNDING_ULPS * jnp.finfo(x.dtype).eps * (1.0 + jnp.abs(o(x)))
    error = jnp.linalg.norm(J, axis=-1) * (step + resolution) + rounding
    return jnp.where(definite, error, jnp.inf)


def minimum_status(
    model: AbstractReducedModel, x: Float[ArrayLike, " n"], P: Float[ArrayLike, ""]
) -> MinimumStatus:
    """Check any point as a minimum of the reduced action at P: the gradient norm against
    GRADIENT_TOLERANCE (1 + |S|) (else ``stalled``), then the action at x +- KINK_PROBE
    (1 + |x|) along the axes and diagonals: a lower one (by more than 1e-9 (1 + |S|)) is a
    descent direction the derivatives missed (``non_smooth``)."""
    return _status(model, _as_float(P), _as_float(x))


@eqx.filter_jit
def _status(model, P, x):
    return _point_status(lambda y: model.action(y, P), x)
