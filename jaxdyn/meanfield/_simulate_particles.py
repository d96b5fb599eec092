"""Simulate n particles of the mean-field Transformer PDE (transformer_pde.md, "The model"):
adaptive diffrax solves with a blow-up event; see ``_simulate_gaussian`` for the Gaussian ODE."""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from jaxdyn._status import Status, mark_nonfinite

from ._fields import AbstractVelocityField
from ._solve_common import _check_times, _controller, _root_finder


class ParticleSolution(eqx.Module):
    """Result of :func:`simulate_particles`.

    ``xs`` holds the particles at ``ts`` (or ``save_fn(t, x)`` outputs); ``final_x`` at
    ``t_final`` (blow-up event time or ``t1``); ``status``; ``num_steps``.
    """

    ts: Float[Array, " s"]
    xs: PyTree
    final_x: Float[Array, "n d"]
    t_final: Float[Array, ""]
    status: Status
    num_steps: Int[Array, ""]


def simulate_particles(
    field: AbstractVelocityField,
    x0: Float[ArrayLike, "n d"],
    t1: Float[ArrayLike, ""],
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    adaptive: bool = True,
    dt0: Float[ArrayLike, ""] | None = None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-8,
    max_steps: int = 4096,
    blowup_norm: Float[ArrayLike, ""] = 1e6,
    save_fn: Callable[[Float[Array, ""], Float[Array, "n d"]], PyTree] | None = None,
) -> ParticleSolution:
    """Solve ``dx_i/dt = Gamma_mu(x_i)``, ``mu = (1/n) sum_j delta_{x_j}``, from ``t = 0``.

    Stops at ``t1`` or when ``max_i |x_i|`` reaches ``blowup_norm`` (crossing located by a
    root finder, status ``Status.blowup``). ``save_fn(t, x)`` saves statistics instead of the
    particles (memory).
    """
    name = "simulate_particles"
    x0 = jnp.asarray(x0)
    if x0.ndim != 2:
        raise ValueError(f"{name}: x0 must be (n, d), got shape {x0.shape}")
    _check_times(name, t1, ts, dt0)
    dtype = jnp.result_type(x0, float)
    t1 = jnp.asarray(t1, dtype)

    def rhs(t, x, args):
        return field.velocity(x, x, t=t)

    def blowup_cond(t, y, args, **kw):  # diffrax passes t, y, args by keyword
        return jnp.sqrt(jnp.max(jnp.sum(y**2, axis=-1))) / blowup_norm - 1.0

    event = diffrax.Event(blowup_cond, root_finder=_root_finder(), direction=True)
    controller, dt0 = _controller(adaptive, rtol, atol, dt0, 0.0, t1, name)
    fn = (lambda t, x, args: x) if save_fn is None else (lambda t, x, args: save_fn(t, x))
    saved_at = (
        diffrax.SubSaveAt(t1=True, fn=fn)
        if ts is None
        else diffrax.SubSaveAt(ts=jnp.asarray(ts, dtype), fn=fn)
    )
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs),
        solver if solver is not None else diffrax.Tsit5(),
        t0=jnp.zeros((), dtype),
        t1=t1,
        dt0=dt0,
        y0=x0.astype(dtype),
        saveat=diffrax.SaveAt(subs=[saved_at, diffrax.SubSaveAt(t1=True)]),
        stepsize_controller=controller,
        event=event,
        max_steps=max_steps,
        throw=False,
    )
    saved, final = sol.ys
    final_x = final[-1]
    status = Status.where(sol.event_mask, Status.blowup, Status.promote(sol.result))
    status = mark_nonfinite(status, final_x)
    return ParticleSolution(
        ts=sol.ts[0],
        xs=saved,
        final_x=final_x,
        t_final=sol.ts[1][-1],
        status=status,
        num_steps=sol.stats["num_steps"],
    )
