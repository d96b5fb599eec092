"""How far an optimiser's end point is from the minimum it approaches: the Newton estimate.

copy_head.md, "Validation protocol" (Adam to the MAP; posterior modes). Near a non-degenerate
minimum x* of a smooth objective f, the point x an optimiser stopped at satisfies

    x* - x = -H^{-1} g + O(|x - x*|^2),        g = grad f(x),  H = hess f(x),

so the first-order change of an observable o along the Newton step, J_o(x) (-H^{-1} g),
estimates o(x*) - o(x) with a relative error of order |x - x*| (the second-order remainder).
It is a per-run error estimate of the optimiser, derived from its own end point, not an
allowance. Matrix-free: H^{-1} g by conjugate gradients on Hessian-vector products, so the
cost is that of a few hundred gradients, for the L^2 + V^2 parameters of a copy head.

The estimate is meaningful only where H is positive definite (x is in the basin of a
minimum, not on a saddle or a soft mode): a run whose conjugate-gradient solve does not reach
its tolerance, or whose Newton step is not a descent direction, is reported as not converged
and its error bound is infinite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree


class NewtonEstimate(NamedTuple):
    """The Newton estimate of the distance from an end point to the minimum.

    Attributes:
        change: first-order change of each observable along the Newton step, the estimate
            of o(x*) - o(x).
        step_norm: |H^{-1} g| (Euclidean, in the flattened parameters).
        residual: relative residual |H d + g| / |g| of the conjugate-gradient solve.
        converged: the solve reached ``residual_tol`` and d^T H d > 0 (a descent step).
    """

    change: Float[Array, " k"]
    step_norm: Float[Array, ""]
    residual: Float[Array, ""]
    converged: Bool[Array, ""]

    def bound(self) -> Float[Array, " k"]:
        """|change| where converged, +inf where not (an unknown error fails any check)."""
        return jnp.where(self.converged, jnp.abs(self.change), jnp.inf)


def newton_estimate(
    objective: Callable[[PyTree], Float[Array, ""]],
    params: PyTree,
    observable: Callable[[PyTree], Float[Array, " k"]],
    *,
    tol: float = 1e-10,
    maxiter: int = 2000,
    residual_tol: float = 1e-6,
) -> NewtonEstimate:
    """Estimate o(x*) - o(x) at an optimiser's end point x = ``params`` (module docstring).

    ``objective`` maps the parameter pytree to the scalar minimised; ``observable`` maps it to
    the (k,) quantities whose optimisation error is wanted. The Newton step d = -H^{-1} g
    comes from conjugate gradients on Hessian-vector products (``tol``, ``maxiter``); the
    estimate is J_o d, by one Jacobian-vector product.
    """
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    f = lambda v: objective(unravel(v))
    grad = jax.grad(f)
    g = grad(flat)
    hvp = lambda v: jax.jvp(grad, (flat,), (v,))[1]
    d, _ = jax.scipy.sparse.linalg.cg(hvp, -g, tol=tol, maxiter=maxiter)
    Hd = hvp(d)
    g_norm = jnp.linalg.norm(g)
    residual = jnp.linalg.norm(Hd + g) / jnp.where(g_norm > 0, g_norm, 1.0)
    curvature = jnp.vdot(d, Hd)
    converged = (residual <= residual_tol) & ((curvature > 0) | (g_norm == 0))
    _, change = jax.jvp(lambda v: observable(unravel(v)), (flat,), (d,))
    return NewtonEstimate(change, jnp.linalg.norm(d), residual, converged)
