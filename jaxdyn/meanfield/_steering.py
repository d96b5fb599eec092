"""Steering a Gaussian through depth: the Gaussian family as a control system on
(mean, covariance) with the attention weights as controls (transformer_pde.md, "Steering a
Gaussian").

A softmax layer stack with weights ``Q_l, K_l, V_l`` held constant on ``[l h, (l + 1) h)``
(``h = depth / layers``) moves ``N(m, Sigma)`` by the closed Gaussian ODE
``m' = V (I + Sigma A) m``, ``Sigma' = V Sigma A Sigma + Sigma A^T Sigma V^T``.
:func:`steer_gaussian` finds weights taking ``N(m_0, Sigma_0)`` to ``N(m_1, Sigma_1)`` by
differentiating through the diffrax solve of every layer (optax).

Two targets are out of reach whatever the weights [derived]:

- another rank: ``Sigma' = B Sigma + Sigma B^T`` with ``B = V Sigma A`` gives
  ``Sigma(t) = Phi(t) Sigma_0 Phi(t)^T`` with ``Phi`` invertible (the fundamental matrix of
  ``Phi' = B Phi``), so ``rank Sigma(t) = rank Sigma_0`` at every finite depth;
- a non-zero mean from a zero one: ``m' = V (I + Sigma A) m`` is linear in ``m``.

:func:`steer_gaussian` reports those as :attr:`SteerOutcome.unreachable` (and still runs the
optimiser, so the distance it gets to is measured, not assumed).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxdyn._printing import AbstractResult
from jaxdyn._validation import require_psd

from .fields._heads import Softmax

_SOLVER = diffrax.Tsit5()
_CONTROLLER = diffrax.PIDController(rtol=1e-7, atol=1e-9)
_OPTIMISER = optax.adam(3e-2)


class SteerOutcome(eqx.Enumeration):
    """How :func:`steer_gaussian` ended."""

    __module__ = "jaxdyn.meanfield"  # items print with the public name

    reached = "the target is reached within the tolerance"
    not_reached = "the target has the start's rank but the optimiser did not reach it"
    unreachable = "no weights reach the target: another rank, or a non-zero mean from zero"


class LayerWeights(eqx.Module):
    """Softmax weights per layer: ``Q, K`` of shape ``(layers, k, d)``, ``V`` ``(layers, d, d)``."""

    Q: Float[Array, "L k d"]
    K: Float[Array, "L k d"]
    V: Float[Array, "L d d"]

    def __check_init__(self):
        if self.Q.shape != self.K.shape or self.V.shape[:1] != self.Q.shape[:1]:
            raise ValueError(
                f"LayerWeights: Q, K (L, k, d) and V (L, d, d) must agree, got {self.Q.shape}, "
                f"{self.K.shape}, {self.V.shape}"
            )

    def layer(self, i) -> Softmax:
        return Softmax(Q=self.Q[i], K=self.K[i], V=self.V[i])


class SteeringResult(AbstractResult):
    """Result of :func:`steer_gaussian`.

    Attributes:
        weights: the final :class:`LayerWeights`.
        mean: the mean the weights reach at ``depth``.
        cov: the covariance they reach.
        losses: ``|m - m_1|^2 + |Sigma - Sigma_1|_F^2`` per optimiser step.
        error: the final relative error ``(|m - m_1|^2 + |Sigma - Sigma_1|_F^2)^{1/2} /
            (|m_1|^2 + |Sigma_1|_F^2)^{1/2}``.
        outcome: a :class:`SteerOutcome`.
    """

    weights: LayerWeights
    mean: Float[Array, " d"]
    cov: Float[Array, "d d"]
    losses: Float[Array, " steps"]
    error: float
    outcome: SteerOutcome


def flow_layers(
    weights: LayerWeights,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    depth: Float[ArrayLike, ""],
    *,
    solver: diffrax.AbstractSolver = _SOLVER,
    stepsize_controller: diffrax.AbstractStepSizeController = _CONTROLLER,
    max_steps: int = 4096,
) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
    """``N(mean0, cov0)`` moved through the layers (each for ``depth / layers``): the closed
    Gaussian ODE of each layer's softmax, solved with diffrax (differentiable; default
    ``Tsit5`` with ``PIDController(rtol=1e-7, atol=1e-9)``)."""
    layers = weights.Q.shape[0]
    h = jnp.asarray(depth, float) / layers
    term = diffrax.ODETerm(lambda t, y, field: field.gaussian_rhs(*y))

    def one(y, w):
        Q, K, V = w
        sol = diffrax.diffeqsolve(
            term,
            solver,
            0.0,
            h,
            None,
            y,
            Softmax(Q=Q, K=K, V=V),
            stepsize_controller=stepsize_controller,
            max_steps=max_steps,
            throw=False,
        )
        return (sol.ys[0][-1], sol.ys[1][-1]), None

    y0 = (jnp.asarray(mean0, float), jnp.asarray(cov0, float))
    (mean, cov), _ = jax.lax.scan(one, y0, (weights.Q, weights.K, weights.V))
    return mean, cov


def _reachable(mean0, cov0, mean1, cov1, tol: float) -> bool:
    def rank(c):
        w = np.linalg.eigvalsh(np.asarray(c, float))
        return int(np.sum(w > tol * max(w[-1], 1e-300)))

    zero_mean = np.linalg.norm(mean0) <= tol * max(np.linalg.norm(mean1), 1e-300)
    return rank(cov0) == rank(cov1) and not (zero_mean and np.linalg.norm(mean1) > 0)


@eqx.filter_jit
def _optimise(weights, start, target, depth, optimiser, steps: int):
    """``steps`` optimiser steps on the relative squared distance at ``depth`` (one
    compilation per shape, optimiser and step count)."""
    (mean0, cov0), (mean1, cov1) = start, target
    scale = jnp.sum(mean1**2) + jnp.sum(cov1**2)

    def loss_fn(w):
        m, c = flow_layers(w, mean0, cov0, depth)
        loss = (jnp.sum((m - mean1) ** 2) + jnp.sum((c - cov1) ** 2)) / scale
        return jnp.where(jnp.isfinite(loss), loss, 1e6)

    def step(carry, _):
        w, state = carry
        loss, g = jax.value_and_grad(loss_fn)(w)
        # a layer stack that blew up gives no usable gradient: skip it
        g = jax.tree_util.tree_map(lambda x: jnp.where(jnp.isfinite(x), x, 0.0), g)
        updates, state = optimiser.update(g, state, w)
        return (optax.apply_updates(w, updates), state), loss

    state = optimiser.init(weights)
    (weights, _), losses = jax.lax.scan(step, (weights, state), None, length=steps)
    return weights, losses


def steer_gaussian(
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    mean1: Float[ArrayLike, " d"],
    cov1: Float[ArrayLike, "d d"],
    *,
    key: PRNGKeyArray,
    layers: int = 4,
    depth: float | int = 1.0,
    steps: int = 400,
    optimiser: optax.GradientTransformation = _OPTIMISER,
    init_scale: float = 0.1,
    tolerance: float = 1e-2,
    rank_tol: float = 1e-9,
) -> SteeringResult:
    """Find layer weights taking ``N(mean0, cov0)`` to ``N(mean1, cov1)`` at ``depth``.

    Minimises ``|m(depth) - m_1|^2 + |Sigma(depth) - Sigma_1|_F^2`` over ``Q_l, K_l, V_l``
    (``d x d`` each, drawn with scale ``init_scale`` around 0, so the first flow is near the
    identity: ``V = I`` would multiply the mean by ``e^depth``) with ``optimiser``, the
    gradient taken through :func:`flow_layers`. ``reached`` when the final relative error is at
    most ``tolerance``; ``unreachable`` when the target has another rank than ``cov0`` (or a
    non-zero mean from a zero one; module docstring), whatever the optimiser got to.
    """
    mean0, cov0 = jnp.asarray(mean0, float), jnp.asarray(cov0, float)
    mean1, cov1 = jnp.asarray(mean1, float), jnp.asarray(cov1, float)
    d = mean0.shape[0]
    for name, m, c in (("start", mean0, cov0), ("target", mean1, cov1)):
        if m.shape != (d,) or c.shape != (d, d):
            raise ValueError(
                f"steer_gaussian: {name} must be (d,), (d, d), got {m.shape}, {c.shape}"
            )
        require_psd(f"steer_gaussian: {name} covariance", c, rtol=1e-10)
    if layers < 1 or steps < 1 or not depth > 0:
        raise ValueError(
            f"steer_gaussian: need layers, steps >= 1 and depth > 0, got {layers}, {steps}, {depth}"
        )
    kq, kk, kv = jax.random.split(key, 3)
    weights = LayerWeights(
        Q=init_scale * jax.random.normal(kq, (layers, d, d)),
        K=init_scale * jax.random.normal(kk, (layers, d, d)),
        V=init_scale * jax.random.normal(kv, (layers, d, d)),
    )
    weights, losses = _optimise(
        weights, (mean0, cov0), (mean1, cov1), jnp.asarray(depth, float), optimiser, int(steps)
    )
    mean, cov = flow_layers(weights, mean0, cov0, depth)
    scale = jnp.sum(mean1**2) + jnp.sum(cov1**2)
    error = float(jnp.sqrt((jnp.sum((mean - mean1) ** 2) + jnp.sum((cov - cov1) ** 2)) / scale))
    if not _reachable(mean0, cov0, mean1, cov1, rank_tol):
        outcome = SteerOutcome.unreachable
    elif error <= tolerance:
        outcome = SteerOutcome.reached
    else:
        outcome = SteerOutcome.not_reached
    return SteeringResult(weights, mean, cov, losses, error, outcome)
