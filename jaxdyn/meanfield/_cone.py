"""The d = 2 covariance flows of the paper's cone pictures (transformer_pde.md, "The paper's
numerical experiments": convergence to 0, to a line, to two lines, blow-up, either).

A 2 x 2 covariance ``Sigma = [[a, c], [c, b]]`` is drawn as ``(a - b, 2c, a + b)`` in the PSD cone
``|(a - b, 2c)| <= a + b``; ``Sigma / tr Sigma`` lies in the unit disk (:func:`disk_coordinates`),
rank-one matrices on its boundary. The derived facts behind the paper's two harder cases
(``two_lines``, ``either``; their weights are in the ``pde-cone`` experiment) are
:func:`isotropic_line_stability`, :func:`blowup_directions` and the exact flow
:func:`two_lines_covariance`; :class:`ConeOutcome`
and :func:`cone_outcome` classify one run.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxdyn import Status


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
    (the ``two_lines`` and ``either`` cases of ``pde-cone``)."""
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
