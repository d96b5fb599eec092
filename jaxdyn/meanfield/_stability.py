"""Regularity and stability of the Transformer PDE on compactly supported measures
(transformer_pde.md, "Mean-field limit and stability").

For softmax attention on measures supported in the ball ``B(0, R)`` [derived here]:

- the field is Lipschitz in space: ``d Gamma_mu / dx = V Cov_{p_x}(y) A`` with ``p_x(y)`` the
  tilted measure ``exp(y^T A x) mu(dy) / Z``, and ``|Cov| <= R^2``, so
  ``L_x(R) = |V| |A| R^2``;
- the field is Lipschitz in the measure: along the interpolation of a coupling of ``mu`` and
  ``nu`` the derivative of ``E_{p_x}[y]`` is an average of ``(I + (y - m) (A x)^T)`` against
  weights whose ratio is at most ``exp(2 |A| R^2)``, so
  ``|Gamma_mu(x) - Gamma_nu(x)| <= L_mu(R) W_1(mu, nu)``, ``L_mu(R) = |V| (1 + 2 |A| R^2)
  exp(2 |A| R^2)``;
- supports grow at most like ``R_t = R_0 exp(|V| t)`` (a softmax average lies in the convex
  hull of the tokens), and the coupling argument (flow both measures from an optimal coupling,
  differentiate the coupling cost) gives the stability estimate

      W_2(mu_t, nu_t) <= C(t, R_0) W_2(mu_0, nu_0),
      C(t, R_0) = exp( int_0^t L_x(R_s) + L_mu(R_s) ds ).

Norms are spectral norms. Empirical measures of particles are exact solutions of the PDE, so
the estimate applies to particle clouds directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxdyn._validation import require_positive

from ._particles import RK4
from ._simulate_particles import simulate_particles
from .fields._base import AbstractVelocityField, weight_at
from .fields._heads import Softmax


def _norms(field: Softmax, t: float) -> tuple[float, float]:
    A = np.asarray(field.A(t), dtype=np.float64)
    V = np.asarray(weight_at(field.V, t), dtype=np.float64)
    return float(np.linalg.norm(A, 2)), float(np.linalg.norm(V, 2))


def softmax_lipschitz_bounds(
    field: Softmax, radius: float | Float[ArrayLike, ""], *, t: float = 0.0
) -> tuple[float, float]:
    """``(L_x(R), L_mu(R))`` of softmax attention on measures supported in ``B(0, R)``.

    ``L_x = |V| |A| R^2`` bounds the field's Lipschitz constant in ``x``; ``L_mu = |V| (1 + 2
    |A| R^2) exp(2 |A| R^2)`` its Lipschitz constant in the measure for ``W_1`` (hence for
    ``W_2``). See the module docstring for the derivation.
    """
    require_positive("radius", radius)
    a, v = _norms(field, t)
    r2 = float(radius) ** 2
    return v * a * r2, v * (1.0 + 2.0 * a * r2) * float(np.exp(2.0 * a * r2))


def softmax_stability_constant(
    field: Softmax,
    ts: Float[ArrayLike, " s"] | Sequence[float],
    radii: Float[ArrayLike, " s"] | Sequence[float],
    *,
    nodes: int = 64,
) -> Float[np.ndarray, " s"]:
    """``C(t_k) = exp(int_{t_0}^{t_k} L_x(R_s) + L_mu(R_s) ds)`` at every save time ``t_k``.

    ``radii[k]`` bounds the supports of both measures at ``ts[k]``. On each interval the
    support radius is bounded by the a priori growth from its left end,
    ``R_s <= radii[k] exp(|V| (s - t_k))``, so ``C(t_k)`` bounds
    ``W_2(mu_{t_k}, nu_{t_k}) / W_2(mu_{t_0}, nu_{t_0})``. Pass ``ts = [0, t]``,
    ``radii = [R_0, R_0]`` for the a priori constant ``C(t, R_0)``, or the observed radii of two
    simulated clouds for the (smaller) a posteriori constant along their trajectories. The
    integrand is convex and increasing in ``s``, so the trapezoidal rule (``nodes`` per
    interval) over-estimates each integral: the returned constants remain upper bounds.
    ``inf`` once the exponent overflows.
    """
    ts = np.asarray(ts, dtype=np.float64)
    radii = np.asarray(radii, dtype=np.float64)
    if ts.ndim != 1 or ts.shape != radii.shape or ts.size < 2:
        raise ValueError(f"ts and radii must be (s,) with s >= 2, got {ts.shape}, {radii.shape}")
    if np.any(np.diff(ts) <= 0):
        raise ValueError("ts must be strictly increasing")
    require_positive("radii", radii)
    a, v = _norms(field, 0.0)
    exponents = [0.0]
    for k in range(ts.size - 1):
        s = np.linspace(0.0, ts[k + 1] - ts[k], nodes)
        r2 = (radii[k] * np.exp(v * s)) ** 2
        with np.errstate(over="ignore", invalid="ignore"):
            rate = v * a * r2 + v * (1.0 + 2.0 * a * r2) * np.exp(2.0 * a * r2)
            exponents.append(exponents[-1] + float(np.trapezoid(rate, s)))
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(exponents))


def flow_jacobian_norms(
    field: AbstractVelocityField,
    x0: Float[ArrayLike, "n d"],
    ts: Float[ArrayLike, " s"],
    steps: int,
) -> Float[Array, " s"]:
    """Measured local stability constants: ``|d x(t_k) / d x_0|_2`` at every save time.

    For a perturbation ``delta`` of the particles small enough that the identity coupling is
    optimal, ``W_2(mu_0, nu_0) = (1/n sum |delta_i|^2)^{1/2}`` and ``W_2(mu_t, nu_t) <= (1/n sum
    |(J delta)_i|^2)^{1/2}``: the supremum of the ratio over such perturbations is the spectral
    norm of the flow's Jacobian ``J`` (an ``n d x n d`` matrix, by forward-mode
    differentiation through the fixed-step RK4 solve of ``steps`` steps to ``ts[-1]``).
    """
    x0 = jnp.asarray(x0)
    ts = jnp.asarray(ts, x0.dtype)

    def flow(x):
        return simulate_particles(
            field,
            x,
            ts[-1],
            dt0=ts[-1] / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            # forward mode (jax.jacfwd below): diffrax's default adjoint is reverse-only, and
            # a traced end time (under jit) takes the diffeqsolve path
            adjoint=diffrax.ForwardMode(),
            ts=ts,
        ).xs

    J = jax.jacfwd(flow)(x0)  # (s, n, d, n, d)
    size = x0.size
    return jnp.linalg.norm(J.reshape(ts.shape[0], size, size), ord=2, axis=(1, 2))


def field_lipschitz_constants(
    field: AbstractVelocityField, tokens: Float[ArrayLike, "n d"], *, t: float = 0.0
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    """Measured Lipschitz constants of ``Gamma_mu`` at ``mu`` = the tokens, queries = the tokens.

    Returns ``(L_x, L_W2, L_W1)``: ``L_x = max_i |d Gamma_mu(x) / dx|_2`` at ``x = y_i``;
    ``L_W2 = max_i sqrt(n) |d Gamma_mu(y_i) / d y|_2`` (the largest change of the velocity per
    unit ``W_2`` among small moves of the tokens); ``L_W1 = max_i n max_k |d Gamma_mu(y_i) /
    d y_k|_2`` (per unit ``W_1``: moving one token). Local values, so lower bounds of the
    constants of :func:`softmax_lipschitz_bounds` on any ball containing the tokens.
    """
    y = jnp.asarray(tokens)
    n, d = y.shape

    def at(x, yy):
        return field.velocity(x[None], yy, t=t)[0]

    J_x = jax.vmap(jax.jacfwd(at, argnums=0), in_axes=(0, None))(y, y)  # (n, d, d)
    J_y = jax.vmap(jax.jacfwd(at, argnums=1), in_axes=(0, None))(y, y)  # (n, d, n, d)
    L_x = jnp.max(jnp.linalg.norm(J_x, ord=2, axis=(1, 2)))
    L_w2 = jnp.sqrt(n) * jnp.max(jnp.linalg.norm(J_y.reshape(n, d, n * d), ord=2, axis=(1, 2)))
    L_w1 = n * jnp.max(jnp.linalg.norm(jnp.moveaxis(J_y, 2, 1), ord=2, axis=(2, 3)))
    return L_x, L_w2, L_w1
