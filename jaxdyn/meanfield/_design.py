"""Differentiable outcomes of the Gaussian ODE and one inverse-design loop (transformer_pde.md).

Everything here differentiates *through the solver* (:func:`jaxdyn.meanfield.simulate_gaussian`:
diffrax, adaptive Tsit5, a blow-up event located by a Newton root finder, whose crossing
time is differentiable by the implicit function theorem). The closed forms of the softmax
ODE with ``V = I`` (``Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}``,
``t* = 1 / lambda_max(Sigma_0^{1/2} (A + A^T) Sigma_0^{1/2})``) give exact derivatives to test
the solver gradients against; for ``V = c I`` the flow is the ``V = I`` flow run at speed
``c``, so ``tr(dt*/dV) = -t*`` and ``tr(d f(Sigma(t_1))/dV) = t_1 d/dt f(Sigma(t))|_{t_1}``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from jaxdyn._printing import AbstractResult

from ._simulate_gaussian import ATOL, BLOWUP_TRACE, RTOL, simulate_gaussian
from .fields._base import AbstractGaussianClosed, AbstractVelocityField
from .fields._heads import Softmax


def solver_blowup_time(
    attention: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    blowup_trace: float = BLOWUP_TRACE,
    rtol: float = RTOL,
    atol: float = ATOL,
    max_steps: int = 4096,
) -> Float[Array, ""]:
    """Finite-time blow-up time of the Gaussian ODE, differentiable in the attention weights.

    ``t_event + tr Sigma / (d tr Sigma / dt)`` at the root-found crossing of
    ``tr Sigma = blowup_trace`` (the pole extrapolation of ``simulate_gaussian``; its error is
    ``O(1 / blowup_trace^2)`` relative; the defaults are ``simulate_gaussian``'s). ``inf`` if
    the trace stays below the threshold up to ``t1``. ``jax.grad`` with respect to the Module
    gives ``dt*/dQ``, ``dt*/dK``, ``dt*/dV``.
    """
    sol = simulate_gaussian(
        attention,
        mean0,
        cov0,
        t1,
        blowup_trace=blowup_trace,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
    )
    return sol.t_blowup


def solver_final_covariance(
    attention: AbstractGaussianClosed,
    mean0: Float[ArrayLike, " d"],
    cov0: Float[ArrayLike, "d d"],
    t1: Float[ArrayLike, ""],
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    max_steps: int = 4096,
) -> Float[Array, "d d"]:
    """``Sigma(t_1)`` of the Gaussian ODE (differentiable in the weights).

    NaN if an event stopped the solve first (blow-up or loss of definiteness before ``t_1``)."""
    sol = simulate_gaussian(
        attention,
        mean0,
        cov0,
        t1,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        blowup_trace=jnp.inf,
    )
    stopped = jnp.isfinite(sol.t_event)
    return jnp.where(stopped, jnp.nan, sol.final_cov)


def weight_gradients(fn, attention: AbstractVelocityField) -> dict[str, Array]:
    """Gradients of the scalar ``fn(attention)`` with respect to the array weights of ``attention``.

    Returns ``{"Q": dfn/dQ, "K": dfn/dK, "V": dfn/dV}`` (those fields that are arrays).
    """
    grads = eqx.filter_grad(fn)(attention)
    return {
        name: getattr(grads, name)
        for name in ("Q", "K", "V", "W")
        if isinstance(getattr(grads, name, None), jax.Array)
    }


class BlowupDesign(AbstractResult):
    """Trajectory of :func:`delay_blowup`: per step the loss, the solver's blow-up time (``t1`` if
    no blow-up before ``t1``), and the final weights."""

    losses: Float[Array, " steps"]
    blowup_times: Float[Array, " steps"]
    Q: Float[Array, "k d"]
    K: Float[Array, "k d"]


def delay_blowup(
    Q0: Float[ArrayLike, "k d"],
    K0: Float[ArrayLike, "k d"],
    cov0: Float[ArrayLike, "d d"],
    target_time: Float[ArrayLike, ""],
    *,
    steps: int = 40,
    learning_rate: Float[ArrayLike, ""] = 0.05,
    margin: float = 0.1,
    horizon: float = 3.0,
    blowup_trace: float = 1e4,
) -> BlowupDesign:
    """Inverse design: rotate ``Q, K`` (norms fixed) so softmax blow-up (``V = I``) happens after
    ``target_time``.

    Minimises ``relu((1 + margin) T - t*(Q, K))^2 / T^2`` with Adam (learning rate a traced
    array, ``optax.inject_hyperparams``), ``t*`` the solver's differentiable blow-up time on
    ``[0, horizon * T]`` (no blow-up counts as ``horizon * T``). ``Q = |Q_0|_F P / |P|_F`` and
    likewise ``K``: without the norm constraint shrinking the weights would be a trivial
    answer. A pure ``init``/``step`` loop driven by ``lax.scan``.
    """
    Q0, K0, cov0 = jnp.asarray(Q0), jnp.asarray(K0), jnp.asarray(cov0)
    if Q0.shape != K0.shape or Q0.ndim != 2:
        raise ValueError(f"Q0 and K0 must be equal (k, d) shapes, got {Q0.shape} and {K0.shape}")
    d = Q0.shape[1]
    if cov0.shape != (d, d):
        raise ValueError(f"cov0 must be ({d}, {d}), got {cov0.shape}")
    if int(steps) < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not horizon > 1.0 + margin:
        raise ValueError(f"horizon must exceed 1 + margin = {1 + margin}, got {horizon}")
    target = jnp.asarray(target_time, cov0.dtype)
    t1 = horizon * target
    qn, kn = jnp.linalg.norm(Q0), jnp.linalg.norm(K0)
    eye = jnp.eye(d, dtype=cov0.dtype)

    def weights(params):
        P, R = params
        return qn * P / jnp.linalg.norm(P), kn * R / jnp.linalg.norm(R)

    def blowup(params):
        Q, K = weights(params)
        tb = solver_blowup_time(
            Softmax(Q=Q, K=K, V=eye),
            jnp.zeros(d, cov0.dtype),
            cov0,
            t1,
            blowup_trace=blowup_trace,
            rtol=1e-8,
            atol=1e-10,
        )
        return jnp.where(jnp.isfinite(tb), jnp.minimum(tb, t1), t1)

    def loss_fn(params):
        tb = blowup(params)
        return jax.nn.relu((1.0 + margin) * target - tb) ** 2 / target**2, tb

    optimiser = optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate)
    params0 = (Q0, K0)
    state0 = (params0, optimiser.init(params0))

    def step(state, _):
        params, opt_state = state
        (loss, tb), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, tb)

    (params, _), (losses, tbs) = jax.lax.scan(step, state0, None, length=int(steps))
    Q, K = weights(params)
    return BlowupDesign(losses=losses, blowup_times=tbs, Q=Q, K=K)
