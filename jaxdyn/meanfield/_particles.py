"""Particle-side tools: a classical RK4 for diffrax, tokens on the sphere, cluster phase diagrams.

transformer_pde.md, "Particle pictures" and issue 5's beta (temperature) sweep. The token-
clustering literature (Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective
on Transformers") studies tokens normalised to the unit sphere (a layer norm), moving by

    dx_i/dt = P_{x_i}^perp ( sum_j softmax_j(beta <x_i, x_j>) x_j ),   P_x^perp = I - x x^T,

i.e. softmax attention with ``A = beta I``, ``V = I`` followed by the projection on the tangent
space of the sphere. :class:`SphereProjected` wraps any attention Module that way, so the
simulators of this package run it unchanged. [open, our choice] The phase diagram counts
clusters of these spherical dynamics: in R^d without normalisation, softmax with ``A = beta I``
blows up in finite time (transformer_pde.md, Closed forms) and there is nothing to count.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from .._status import nonfinite_status, status_from_diffrax
from ..attention import AbstractAttention, Softmax

_rk4_tableau = diffrax.ButcherTableau(
    a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
    b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
    b_error=np.zeros(4),  # no embedded method: fixed steps only
    c=np.array([0.5, 0.5, 1.0]),
)


class RK4(diffrax.AbstractERK):
    """The classical 4th-order Runge-Kutta method (4 stages, fixed steps only: no error estimate).

    diffrax ships no classical RK4; benchmarks against hand-written RK4 loops use this so that
    both sides take the same steps.
    """

    tableau: ClassVar[diffrax.ButcherTableau] = _rk4_tableau
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


class SphereProjected(AbstractAttention):
    """``Gamma(x) = (I - x x^T / |x|^2) Gamma_base(x)``: the base velocity projected on the tangent
    space of the sphere through ``x`` (tokens on the unit sphere stay there).

    The projection keeps ``|x_i|`` constant along the exact flow; numerical drift is
    ``O(dt^4)`` per unit time with :class:`RK4`.
    """

    base: AbstractAttention

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        v = self.base.velocity(x, tokens, t=t, chunk_size=chunk_size)
        radial = jnp.sum(v * x, axis=-1, keepdims=True) / jnp.sum(x * x, axis=-1, keepdims=True)
        return v - radial * x

    @property
    def dim(self) -> int:
        return self.base.dim


def sphere_softmax(beta: Float[ArrayLike, ""], d: int) -> SphereProjected:
    """The clustering model of the token-clustering literature: softmax with ``A = beta I``,
    ``V = I`` (``Q = beta sqrt(d) I``, ``K = I``, so ``K^T Q / sqrt(d) = beta I``), on the sphere.

    ``beta`` is the inverse temperature and may be traced (one compilation for a beta sweep).
    """
    eye = jnp.eye(d)
    return SphereProjected(base=Softmax(Q=beta * jnp.sqrt(d) * eye, K=eye, V=eye))


def uniform_on_sphere(key, n: int, d: int, dtype=None) -> Float[Array, "n d"]:
    """``n`` points uniform on the unit sphere ``S^{d-1}`` (normalised Gaussians)."""
    import jax

    z = jax.random.normal(key, (n, d), dtype=dtype or jnp.result_type(float))
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


class FixedStepSolution(eqx.Module):
    """Result of :func:`fixed_step_particles`: saved outputs at ``ts``, the final particles and a
    :class:`jaxdyn._status.Status`."""

    ts: Float[Array, " s"]
    xs: PyTree
    final_x: Float[Array, "n d"]
    status: Int[Array, ""]


def fixed_step_particles(
    attention: AbstractAttention,
    x0: Float[ArrayLike, "n d"],
    t1: Float[ArrayLike, ""],
    steps: int,
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    save_fn: Callable[[Float[Array, ""], Float[Array, "n d"]], PyTree] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    chunk_size: int | None = None,
) -> FixedStepSolution:
    """``dx_i/dt = Gamma_mu(x_i)`` with ``steps`` equal steps of ``solver`` (default :class:`RK4`).

    The lean path for sweeps of many fixed-step particle systems: the same vector field as
    :func:`jaxdyn.meanfield.simulate_particles` and the same diffrax loop, but without its
    blow-up event (whose root finder roughly doubles compilation time); a non-finite state
    gives ``Status.NAN`` instead. Use ``simulate_particles`` when blow-up must be located.
    """
    x0 = jnp.asarray(x0)
    if x0.ndim != 2:
        raise ValueError(f"fixed_step_particles: x0 must be (n, d), got shape {x0.shape}")
    if int(steps) < 1:
        raise ValueError(f"fixed_step_particles: steps must be >= 1, got {steps}")
    dtype = jnp.result_type(x0, float)
    t1 = jnp.asarray(t1, dtype)

    def rhs(t, x, args):
        return attention.velocity(x, x, t=t, chunk_size=chunk_size)

    fn = (lambda t, x, args: x) if save_fn is None else (lambda t, x, args: save_fn(t, x))
    saved = (
        diffrax.SubSaveAt(t1=True, fn=fn)
        if ts is None
        else diffrax.SubSaveAt(ts=jnp.asarray(ts, dtype), fn=fn)
    )
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver if solver is not None else RK4(),
        t0=jnp.zeros((), dtype),
        t1=t1,
        dt0=t1 / steps,
        y0=x0.astype(dtype),
        saveat=diffrax.SaveAt(subs=[saved, diffrax.SubSaveAt(t1=True)]),
        stepsize_controller=diffrax.ConstantStepSize(),
        max_steps=int(steps) + 1,
        throw=False,
    )
    out, final = sol.ys
    final_x = final[-1]
    status = nonfinite_status(final_x, status_from_diffrax(sol.result))
    return FixedStepSolution(ts=sol.ts[0], xs=out, final_x=final_x, status=status)
