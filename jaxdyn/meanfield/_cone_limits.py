"""How the d = 2 softmax flows of the cone pictures approach their limits, at finite time or
trace: the two derived facts that turn "ends on a line / on a blow-up direction" into checks
whose tolerances come from an error model (``pde-cone``, case ``either``).

- Blow-up: on rank-one ``Sigma = x x^T`` the flow is ``x' = (x^T A x) V x``. With
  ``x = r (cos theta, sin theta)`` this is ``r'/r = (x^T A x) h(theta)``,
  ``theta' = (x^T A x) g(theta)``, ``h = e_theta . V e_theta``,
  ``g = e_theta^perp . V e_theta``, so in log-radius time the direction follows the scalar ODE
  ``d theta / d ln r = g(theta) / h(theta)``, independent of ``A``
  (:func:`rank_one_angle_flow`). A blowing-up ``Sigma`` becomes rank one (its smaller
  eigenvalue stays bounded while the larger one diverges), so its top eigenvector follows this
  ODE up to terms of relative order ``lambda_min / lambda_max``, and ends where the ODE ends as
  ``ln r -> infinity``: at an attracting zero of ``g`` (:func:`blowup_directions`).
- Convergence to a line: the rank-one matrices ``p e e^T`` on an isotropic line
  (``e^T A e = 0``) are equilibria. Linearised there, the direction ``e e^T`` is neutral (the
  family of equilibria) and decouples; the two transverse directions
  ``(e f^T + f e^T) / sqrt 2`` and ``f f^T`` form a block ``B`` (for softmax a Jordan block
  with the double eigenvalue ``2 p kappa``, :func:`isotropic_line_stability`).
  :func:`line_transverse_growth` is the largest factor by which the distance of
  ``Sigma / tr Sigma`` to the line's disk point can grow over a time ``dt`` under ``B``.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jaxtyping import Array, ArrayLike, Float


def rank_one_angle_rate(V: Float[ArrayLike, "2 2"], theta) -> Array:
    """``d theta / d ln r = g(theta) / h(theta)`` of the rank-one softmax direction flow
    (module docstring): zero at the eigenvector angles of ``V``; a zero with negative slope
    attracts the directions of a blow-up."""
    V = jnp.asarray(V, float)
    e = jnp.stack([jnp.cos(theta), jnp.sin(theta)])
    perp = jnp.stack([-jnp.sin(theta), jnp.cos(theta)])
    Ve = V @ e
    return (perp @ Ve) / (e @ Ve)


def _angle_rate_term(log_r, theta, V):
    return rank_one_angle_rate(V, theta)


_ANGLE_TERM = diffrax.ODETerm(_angle_rate_term)  # one object: diffrax compiles once


def rank_one_angle_flow(
    V: Float[ArrayLike, "2 2"],
    theta0: float,
    log_r0: float,
    log_r1: float,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-14,
) -> float:
    """Direction angle of the rank-one softmax flow ``x' = (x^T A x) V x`` when ``ln |x|`` has
    gone from ``log_r0`` (angle ``theta0``) to ``log_r1``: the solution of
    ``d theta / d ln r = g(theta) / h(theta)`` (module docstring). ``NaN`` if the solve
    fails (``h`` vanishing on the way: the radius turns before reaching ``log_r1``).
    ``log_r1 < log_r0`` runs the flow backwards (a shrinking ``|x|``)."""
    V = jnp.asarray(V, float)
    if V.shape != (2, 2):
        raise ValueError(f"rank_one_angle_flow: V must be 2 x 2, got shape {V.shape}")
    if not (np.isfinite(log_r0) and np.isfinite(log_r1) and np.isfinite(theta0)):
        raise ValueError(
            f"rank_one_angle_flow: theta0, log_r0, log_r1 must be finite, got "
            f"{theta0}, {log_r0}, {log_r1}"
        )
    if log_r1 == log_r0:
        return float(theta0)
    sol = diffrax.diffeqsolve(
        _ANGLE_TERM,
        diffrax.Tsit5(),
        jnp.asarray(log_r0, float),  # arrays, not Python floats: one compilation for all
        jnp.asarray(log_r1, float),
        None,
        jnp.asarray(theta0, float),
        V,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=100_000,
        throw=False,
    )
    ok = sol.result == diffrax.RESULTS.successful
    return float(sol.ys[-1]) if bool(ok) else float("nan")


def line_transverse_growth(
    rhs: Callable[[Array], Array],
    e: Float[ArrayLike, " 2"],
    p: float,
    dt: float,
) -> float:
    """Largest factor ``||M expm(B dt) M^+||_2`` by which the disk-coordinate distance of
    ``Sigma / tr Sigma`` to the equilibrium ``p e e^T`` can grow over ``dt`` under the flow
    ``Sigma' = rhs(Sigma)`` linearised there (module docstring; ``M``: derivative of the disk
    coordinates in the transverse directions). Raises if ``p e e^T`` is not an equilibrium
    or the line direction feeds the transverse ones (then the linearisation is not
    block-triangular and this factor bounds nothing)."""
    if not (p > 0 and dt >= 0):
        raise ValueError(f"line_transverse_growth: need p > 0 and dt >= 0, got p={p}, dt={dt}")
    e = np.asarray(e, float)
    if e.shape != (2,) or not np.linalg.norm(e) > 0:
        raise ValueError(f"line_transverse_growth: e must be a nonzero 2-vector, got {e}")
    e = e / np.linalg.norm(e)
    f = np.array([-e[1], e[0]])
    basis = jnp.asarray(
        [np.outer(e, e), (np.outer(e, f) + np.outer(f, e)) / np.sqrt(2), np.outer(f, f)]
    )
    at = p * basis[0]

    def components(z):
        return jnp.einsum("kij,ij->k", basis, rhs(at + jnp.einsum("k,kij->ij", z, basis)))

    def disk(z):
        S = at + jnp.einsum("k,kij->ij", z, basis)
        return jnp.stack([S[0, 0] - S[1, 1], 2 * S[0, 1]]) / (S[0, 0] + S[1, 1])

    zero = jnp.zeros(3)
    J = np.asarray(jax.jacfwd(components)(zero))
    size = float(np.abs(J).max())  # the rhs of an O(p) perturbation is O(size * p)
    residual = float(np.abs(np.asarray(components(zero))).max())
    leak = float(np.abs(J[1:, 0]).max())
    if residual > 1e-10 * size * p or leak > 1e-10 * size:
        raise ValueError(
            f"line_transverse_growth: p e e^T is not an equilibrium with a neutral line "
            f"direction (|rhs| = {residual:.2e}, line-to-transverse coupling {leak:.2e})"
        )
    M = np.asarray(jax.jacfwd(disk)(zero))[:, 1:]
    G = M @ scipy.linalg.expm(J[1:, 1:] * dt) @ np.linalg.pinv(M)
    return float(np.linalg.norm(G, 2))
