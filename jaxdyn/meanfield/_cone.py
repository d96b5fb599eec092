"""The d = 2 covariance flows of the paper's cone pictures (transformer_pde.md, "The paper's
numerical experiments": convergence to 0, to a line, to two lines, blow-up, either).

A 2 x 2 covariance ``Sigma = [[a, c], [c, b]]`` is drawn as ``(a - b, 2c, a + b)`` in the PSD cone
``|(a - b, 2c)| <= a + b``; ``Sigma / tr Sigma`` lies in the unit disk (:func:`disk_coordinates`),
rank-one matrices on its boundary. :func:`cone_cases` gives the weights of the five cases, with
the derived facts that make two of them work (:func:`isotropic_line_stability`,
:func:`blowup_directions`, the exact flow :func:`two_lines_covariance`); :class:`ConeOutcome`
and :func:`cone_outcome` classify one run.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxdyn import Status

CONE_CASES = ("to_zero", "to_line", "two_lines", "blowup", "either")
# "either": a non-normal V (see cone_cases).
EITHER_V = ((0.5, 2.0), (0.0, 2.0))


def cone_cases(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """``Q, K (2, 2)``, ``V (2, 2)`` of the five d = 2 cases (transformer_pde.md, cone pictures).

    ``to_line`` uses ``Q = [q; 0]`` so every variant (incl. 2-head multi-head, one row per
    head) sees the same rows. ``two_lines`` and ``either`` share ``A = K^T Q / sqrt(2) =
    diag(1, -1)``, whose isotropic lines ``x^T A x = 0`` are ``(1, 1)`` and ``(1, -1)``.
    [derived] On rank-one ``Sigma = x x^T`` the flow is ``x' = (x^T A x) V x``, so:

    - the rank-one matrices on an isotropic line ``e`` are equilibria, linearly stable iff
      ``kappa = (e^T A f)(f^T V e) < 0`` (``f`` orthogonal to ``e``; the Jacobian off the line
      has the double eigenvalue ``2 p kappa`` at ``p e e^T``): :func:`isotropic_line_stability`;
    - along a real eigenvector ``u`` of ``V`` (eigenvalue ``lam``) the direction is fixed and
      ``|x|`` blows up in finite time iff ``(u^T A u) lam > 0``; it attracts nearby
      directions iff ``(u^T A u) d/dtheta (e_theta^perp . V e_theta) < 0`` at ``u``.

    With ``V = I`` every direction is fixed, so any positive eigenvalue of ``A + A^T`` blows
    up: neither "two lines" nor "either" exist for V = I, and both cases need their own V.

    - ``two_lines``: ``V = diag(-1, 1)`` (``V A = -I``). Both lines are stable (``kappa = -1``)
      and neither eigenvector of V blows up. The flow is ``a' = -2 (a^2 - c^2)``,
      ``b' = -2 (b^2 - c^2)``, ``c' = 0``: every run converges, to ``|c0| (1, s)(1, s)^T`` with
      ``s = sign(c0)`` (``c0 = 0`` decays to 0 like 1/t): :func:`two_lines_covariance`.
    - ``either``: ``V = EITHER_V = [[0.5, 2], [0, 2]]`` (non-normal, ``V A + A^T V^T``
      indefinite). The line ``(1, -1)`` is stable (``kappa = -1.75``), ``(1, 1)`` unstable
      (``kappa = 0.25``); the eigenvector ``(4, 3)`` of ``V`` (eigenvalue 2,
      ``u^T A u > 0``) is an attracting blow-up direction, while the eigenvector ``(1, 0)``
      (eigenvalue 0.5) repels. Starts are split between blowing up along ``(4, 3)`` (disk
      point ``(0.28, 0.96)``) and converging to the line ``(1, -1)`` (disk point ``(0, -1)``).
      (A diagonal ``V`` gives no open blow-up basin: with ``0 < v1 < v2`` only the axis
      ``c = 0`` blows up, and nearby runs converge to a line with a huge trace.)
    """
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((2, 2))
    q = np.array([[1.0, 0.5], [0.0, 0.0]])
    # K^T Q / sqrt(2) = diag(1, -1) with Q = I.
    K_indef = np.sqrt(2.0) * np.diag([1.0, -1.0])
    cases = {
        "to_zero": dict(
            Q=np.array([[1.0, 0.2], [0.3, 0.8]]),
            K=-np.array([[1.0, 0.2], [0.3, 0.8]]),
            V=G @ G.T + 0.1 * np.eye(2),
        ),
        "to_line": dict(Q=q, K=-q, V=np.eye(2)),
        "two_lines": dict(Q=np.eye(2), K=K_indef, V=np.diag([-1.0, 1.0])),
        "blowup": dict(
            Q=np.array([[1.0, 0.3], [0.0, 0.7]]), K=np.array([[1.0, 0.0], [0.2, 0.9]]), V=np.eye(2)
        ),
        "either": dict(Q=np.eye(2), K=K_indef, V=np.array(EITHER_V)),
    }
    return cases


def two_lines_covariance(cov0: np.ndarray, t: float) -> np.ndarray:
    """Exact softmax flow of ``two_lines`` (``A = diag(1, -1)``, ``V = diag(-1, 1)``).

    ``c`` is constant and ``a``, ``b`` each solve ``y' = -2 (y^2 - c^2)``:
    ``y(t) = k (y0 + k tau) / (k + y0 tau)``, ``k = |c|``, ``tau = tanh(2 k t)``
    (``y0 / (1 + 2 y0 t)`` when ``c = 0``).
    """
    a0, b0, c = cov0[0, 0], cov0[1, 1], cov0[0, 1]
    k = abs(c)

    def riccati(y0):
        if k == 0:
            return y0 / (1 + 2 * y0 * t)
        tau = np.tanh(2 * k * t)
        return k * (y0 + k * tau) / (k + y0 * tau)

    return np.array([[riccati(a0), c], [c, riccati(b0)]])


def isotropic_line_stability(A: np.ndarray, V: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """``[(e, kappa)]`` for the isotropic lines ``e^T A e = 0`` of a 2 x 2 ``A`` with indefinite
    symmetric part: ``kappa = (e^T A f)(f^T V e)``, ``f`` orthogonal to ``e``; the rank-one
    equilibria ``p e e^T`` of the softmax flow are linearly stable iff ``kappa < 0``
    (see :func:`cone_cases`)."""
    lam, U = np.linalg.eigh(0.5 * (A + A.T))
    if not lam[0] < 0 < lam[1]:
        raise ValueError(f"A + A^T must be indefinite, eigenvalues {2 * lam}")
    out = []
    for sign in (1.0, -1.0):
        e = np.sqrt(lam[1]) * U[:, 0] + sign * np.sqrt(-lam[0]) * U[:, 1]
        e = e / np.linalg.norm(e)
        f = np.array([-e[1], e[0]])
        out.append((e, float((e @ A @ f) * (f @ V @ e))))
    return out


def blowup_directions(A: np.ndarray, V: np.ndarray) -> list[np.ndarray]:
    """Real eigenvectors ``u`` of ``V`` (2 x 2) that are attracting finite-time blow-up
    directions of the rank-one softmax flow ``x' = (x^T A x) V x``: ``(u^T A u) lam > 0`` and
    ``(u^T A u) g'(theta_u) < 0``, ``g(theta) = e_theta^perp . V e_theta`` (see
    :func:`cone_cases`)."""
    lam, vecs = np.linalg.eig(V)
    out = []
    for k in range(2):
        if abs(lam[k].imag) > 1e-12:
            continue
        u = vecs[:, k].real / np.linalg.norm(vecs[:, k].real)
        theta = np.arctan2(u[1], u[0])
        # g'(theta) of g(theta) = e_theta^perp . V e_theta, e_theta = (cos theta, sin theta).
        slope = np.cos(2 * theta) * (V[1, 1] - V[0, 0]) - np.sin(2 * theta) * (V[0, 1] + V[1, 0])
        qa = u @ A @ u
        if qa * lam[k].real > 0 and qa * slope < 0:
            out.append(u)
    return out


def disk_coordinates(cov: np.ndarray) -> np.ndarray:
    """``Sigma / tr Sigma`` as the unit-disk point ``(a - b, 2c) / (a + b)`` (last axes 2 x 2)."""
    cov = np.asarray(cov)
    tr = cov[..., 0, 0] + cov[..., 1, 1]
    return np.stack([cov[..., 0, 0] - cov[..., 1, 1], 2 * cov[..., 0, 1]], -1) / tr[..., None]


def trace_one_covariances(grid: int, radius: float) -> np.ndarray:
    """The cone pictures' initial conditions: ``Sigma_0 = [[1 + u, w], [w, 1 - u]] / 2`` (trace
    one) for ``(u, w)`` on a ``grid x grid`` lattice of ``[-radius, radius]^2`` inside the disk
    ``u^2 + w^2 < radius^2``; shape ``(n, 2, 2)``."""
    if grid < 2 or not 0 < radius < 1:
        raise ValueError(f"need grid >= 2 and 0 < radius < 1, got {grid}, {radius}")
    u = np.linspace(-radius, radius, grid)
    U, W = np.meshgrid(u, u)
    inside = U**2 + W**2 < radius**2
    u0, w0 = U[inside], W[inside]
    return np.stack([[(1 + u0) / 2, w0 / 2], [w0 / 2, (1 - u0) / 2]]).transpose(2, 0, 1)


class ConeOutcome(eqx.Enumeration):
    """Outcome of one cone run (:func:`cone_outcome`)."""

    converged = "no event and |dSigma/dt|_F < converged_tol max(1, tr Sigma) at t1"
    blowup = "the blow-up event fired"
    undecided = "no event, still moving at t1 (e.g. a 1/t decay)"
    failed = "the solve failed (any other status)"


def cone_outcome(
    status: Status,
    final_cov: Float[Array, "2 2"],
    rhs_norm: Float[ArrayLike, ""],
    converged_tol: Float[ArrayLike, ""],
) -> ConeOutcome:
    """Classify a run: ``blowup`` if its status is ``Status.blowup``; ``converged`` if it reached
    ``t1`` with ``|dSigma/dt|_F < converged_tol max(1, tr Sigma)`` (the paper's ``tol_low`` below
    trace one, a relative rate above it, where the absolute rate carries the solver's error
    ``~ rtol (tr Sigma)^2``); ``undecided`` if it reached ``t1`` still moving; else ``failed``."""
    reached_t1 = status == Status.successful
    resting = rhs_norm < converged_tol * jnp.maximum(1.0, jnp.trace(final_cov))
    outcome = ConeOutcome.where(reached_t1 & resting, ConeOutcome.converged, ConeOutcome.failed)
    outcome = ConeOutcome.where(reached_t1 & ~resting, ConeOutcome.undecided, outcome)
    return ConeOutcome.where(status == Status.blowup, ConeOutcome.blowup, outcome)
