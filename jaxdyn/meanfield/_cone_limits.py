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

from ._cone import disk_coordinates, isotropic_line_stability


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


LIMIT_LOG_RADIUS = 60.0  # how far in ln r the angle flow is run on to find its limit


def wrapped_angle(angle):
    """An angle difference of directions (lines), in ``[-pi/2, pi/2)``."""
    return (np.asarray(angle) + np.pi / 2) % np.pi - np.pi / 2


def _top_angle(cov):
    w, U = np.linalg.eigh(cov)
    return w, np.arctan2(U[1, -1], U[0, -1])


def nearest_direction_distance(ends, directions) -> float | None:
    """Largest disk distance of the covariances ``ends`` to the nearest of ``directions``."""
    if not len(ends) or not directions:
        return None
    points = disk_coordinates(ends)
    targets = np.array([disk_coordinates(np.outer(u, u)) for u in directions])
    return float(np.max(np.min(np.linalg.norm(points[:, None] - targets[None], axis=-1), 1)))


def blowup_limit_errors(V, directions, ends, later, steps, rtol: float) -> dict:
    """The two blow-up checks' measurements (module docstring, first item) for covariances
    ``ends`` at the blow-up event and ``later`` after a continuation of ``steps`` steps:

    - ``errors``: top-eigenvector angle of ``later`` against the rank-one direction flow's
      prediction from ``ends``; ``allowed``: the neglected rank-two share
      ``lambda_min / lambda_max`` at the event plus ``steps * rtol``;
    - ``limits``: angle between the flow's limit (run on ``LIMIT_LOG_RADIUS`` in ``ln r``) and
      the nearest of ``directions``; ``left``: the contraction near the attracting angles left
      of the largest start after ``LIMIT_LOG_RADIUS`` (``exp(slope ln r)``)."""
    V = np.asarray(V)
    thetas_u = [float(np.arctan2(u[1], u[0])) for u in directions]
    errors, allowed, limits, starts = [], [], [], []
    for cov1, cov2, n in zip(ends, later, steps, strict=True):
        w1, theta1 = _top_angle(cov1)
        w2, theta2 = _top_angle(cov2)
        log_r1, log_r2 = 0.5 * np.log(w1[-1]), 0.5 * np.log(w2[-1])
        predicted = rank_one_angle_flow(V, theta1, log_r1, log_r2)
        errors.append(abs(wrapped_angle(theta2 - predicted)))
        allowed.append(w1[0] / w1[-1] + int(n) * rtol)
        limit = rank_one_angle_flow(V, theta1, log_r1, log_r1 + LIMIT_LOG_RADIUS)
        limits.append(min((abs(wrapped_angle(limit - t)) for t in thetas_u), default=np.inf))
        starts.append(min((abs(wrapped_angle(theta1 - t)) for t in thetas_u), default=np.inf))
    slopes = [float(jax.grad(lambda t: rank_one_angle_rate(V, t))(t)) for t in thetas_u]
    left = max(starts) * np.exp(LIMIT_LOG_RADIUS * max(slopes, default=np.inf))
    return {
        "errors": np.array(errors),
        "allowed": np.array(allowed),
        "limits": np.array(limits),
        "left": left,
    }


def stable_line_distances(field, paths, ends, ts, entry_error: float):
    """The convergent runs' check (module docstring, second item): the stable isotropic
    lines of ``field`` (a d = 2 Gaussian-closed head), each end's disk distance to the nearest
    one at ``ts[-1]``, and its bound ``G (d(t_a) + floor) + floor`` from the save ``t_a``
    nearest ``ts[-1] / 2`` (``floor = 4 sqrt 2 entry_error / tr``). Returns
    ``(stable, distances, bounds, anchor)``."""
    A, V = np.asarray(field.A()), np.asarray(field.V)
    stable = [e for e, kappa in isotropic_line_stability(A, V) if kappa < 0]
    targets = [disk_coordinates(np.outer(e, e)) for e in stable]

    def rhs(cov):
        return field.gaussian_rhs(jnp.zeros(2, cov.dtype), cov)[1]

    anchor = int(np.argmin(np.abs(ts - ts[-1] / 2)))
    dt = float(ts[-1] - ts[anchor])
    distances, bounds = [], []
    if not stable:
        return stable, distances, bounds, anchor
    for path, end in zip(paths, ends, strict=True):
        dists = [np.linalg.norm(disk_coordinates(end) - t) for t in targets]
        k = int(np.argmin(dists))
        d_a = float(np.linalg.norm(disk_coordinates(path[anchor]) - targets[k]))
        p = float(np.trace(end))
        floor = 4 * np.sqrt(2) * entry_error / p
        distances.append(dists[k])
        bounds.append(line_transverse_growth(rhs, stable[k], p, dt) * (d_a + floor) + floor)
    return stable, distances, bounds, anchor
