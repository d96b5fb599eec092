"""Simulate n particles of the mean-field Transformer PDE (transformer_pde.md, "The model"):
adaptive diffrax solves that stop at a blow-up or at a user event.

Events are real-valued conditions of the state, negative before the event and crossing zero at
it: the blow-up condition ``max_i |x_i| / blowup_norm - 1`` and any named user conditions
``condition(t, x)`` (e.g. "the tokens have formed one cluster":
``eps - mean_i |x_i - mean(x)|^2``). They are merged into one condition (their maximum), whose
first upward crossing is located by bisection on the step's interpolant; which one fired is
read off the final state. The crossing time is differentiable with respect to anything the
field depends on (implicit function theorem: ``dt/dtheta = -(dg/dtheta) / (dg/dt)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import diffrax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree

from jaxdyn._printing import AbstractResult
from jaxdyn._status import Status, mark_nonfinite
from jaxdyn.sweep import DiffeqProblem

from ._particles import RK4, _saves_on_the_step_grid, fixed_steps, rk4_loop
from ._solve_common import (
    _check_times,
    _root_finder,
    check_events,
    requested_and_final_saveat,
)
from .fields._base import AbstractVelocityField

_DEFAULT_SOLVER = diffrax.Tsit5()
_DEFAULT_CONTROLLER = diffrax.PIDController(rtol=1e-6, atol=1e-8)

ParticleCondition = Callable[[Float[Array, ""], Float[Array, "n d"]], Float[Array, ""]]


class ParticleSolution(AbstractResult):
    """Result of :func:`simulate_particles`.

    Attributes:
        ts: requested save times (``inf`` after an event, as diffrax fills them).
        xs: the particles at ``ts``, or the ``save_fn(t, x)`` outputs.
        final_x: the particles at ``t_final``.
        t_final: the event time if an event fired, else ``t1`` (or where the solve stopped).
        t_event: the event time (``inf`` if none fired); differentiable.
        status: ``blowup``, ``event_occurred`` (a user event), ``successful`` (reached ``t1``)
            or a failure (``max_steps_reached``, ``nonfinite``, ...).
        events: for each user event, whether it is the one that stopped the solve.
        num_steps: solver steps taken.
    """

    ts: Float[Array, " s"]
    xs: PyTree
    final_x: Float[Array, "n d"]
    t_final: Float[Array, ""]
    t_event: Float[Array, ""]
    status: Status
    events: dict[str, Bool[Array, ""]]
    num_steps: Int[Array, ""]


def simulate_particles(
    field: AbstractVelocityField,
    x0: Float[ArrayLike, "n d"],
    t1: Float[ArrayLike, ""],
    *,
    ts: Float[ArrayLike, " s"] | None = None,
    solver: diffrax.AbstractSolver = _DEFAULT_SOLVER,
    stepsize_controller: diffrax.AbstractStepSizeController = _DEFAULT_CONTROLLER,
    dt0: Float[ArrayLike, ""] | None = None,
    max_steps: int = 4096,
    blowup_norm: Float[ArrayLike, ""] | None = 1e6,
    events: Mapping[str, ParticleCondition] | None = None,
    save_fn: Callable[[Float[Array, ""], Float[Array, "n d"]], PyTree] | None = None,
    adjoint: diffrax.AbstractAdjoint | None = None,
) -> ParticleSolution:
    """Solve ``dx_i/dt = Gamma_mu(x_i)``, ``mu = (1/n) sum_j delta_{x_j}``, from ``t = 0``.

    Stops at ``t1``, when ``max_i |x_i|`` reaches ``blowup_norm`` (status ``blowup``) or at
    the first user event (status ``event_occurred``). Pure and jit/vmap-able; never raises at
    run time.

    Fixed steps are a solver choice: ``solver=RK4()``,
    ``stepsize_controller=diffrax.ConstantStepSize()``, ``dt0 = t1 / steps`` and
    ``blowup_norm=None`` (no event to locate) take ``steps`` classical RK4 steps as a plain
    ``lax`` loop when ``t1`` and ``dt0`` are concrete and the saves ``ts`` (if any) lie on the
    step grid at equal spacing: a fraction of ``diffrax.diffeqsolve``'s compilation, forward
    and reverse differentiable (``jax.jacfwd`` included). A non-finite state then gives
    ``Status.nonfinite``. Otherwise the solve goes through diffrax.

    Args:
        field: the velocity field (any :class:`jaxdyn.meanfield.fields.AbstractVelocityField`).
        x0: initial particles ``(n, d)``.
        t1: final time (depth).
        ts: save times (default: ``t1`` only).
        solver: a diffrax solver (default ``Tsit5``; its error estimate drives an adaptive
            controller).
        stepsize_controller: a diffrax step-size controller, e.g.
            ``diffrax.PIDController(rtol=1e-10, atol=1e-12)`` (the default has ``rtol=1e-6,
            atol=1e-8``; tolerances may be traced) or ``diffrax.ConstantStepSize()`` with
            ``dt0``.
        dt0: initial step (``None``: chosen by the controller); the step of a constant
            controller.
        max_steps: step budget (status ``max_steps_reached`` when exhausted).
        blowup_norm: ``max_i |x_i|`` at which the blow-up event fires (``None``: no blow-up
            event).
        events: named user events, ``condition(t, x)`` negative before the event and crossing
            zero at it; the crossing time is ``t_event``.
        save_fn: ``save_fn(t, x)`` saved at ``ts`` instead of the particles (memory).
        adjoint: how gradients through the solve are computed (a diffrax adjoint; default
            ``diffrax.RecursiveCheckpointAdjoint()``; the blow-up event rules out
            ``diffrax.BacksolveAdjoint``).

    Returns:
        A :class:`ParticleSolution`.
    """
    name = "simulate_particles"
    x0 = jnp.asarray(x0)
    if x0.ndim != 2:
        raise ValueError(f"{name}: x0 must be (n, d), got shape {x0.shape}")
    _check_times(name, t1, ts, dt0)
    events = check_events(name, events, "(t, x)", reserved=("blowup",))
    dtype = jnp.result_type(x0, float)
    if isinstance(stepsize_controller, diffrax.ConstantStepSize) and dt0 is None:
        raise ValueError(f"{name}: a ConstantStepSize controller needs the step dt0")
    steps = fixed_steps(t1, dt0) if dt0 is not None else None
    if (
        isinstance(solver, RK4)
        and isinstance(stepsize_controller, diffrax.ConstantStepSize)
        and blowup_norm is None
        and not events
        and steps is not None
    ):
        save_steps = _saves_on_the_step_grid(ts, t1, steps)
        if save_steps is not None:
            out = rk4_loop(field, x0.astype(dtype), jnp.asarray(t1, dtype), steps, ts, save_fn,
                           save_steps)  # fmt: skip
            return _fixed_step_solution(*out, jnp.asarray(t1, dtype), steps)
    if steps is not None and isinstance(stepsize_controller, diffrax.ConstantStepSize):
        max_steps = max(int(max_steps), steps + 1)  # constant steps: the budget is known
    t1 = jnp.asarray(t1, dtype)

    def conditions(t, x, norm):
        out = {}
        if norm is not None:
            out["blowup"] = jnp.sqrt(jnp.max(jnp.sum(x**2, axis=-1))) / norm - 1.0
        out.update({key: jnp.asarray(cond(t, x), dtype) for key, cond in events.items()})
        return out

    def merged_condition(t, y, args, **kwargs):  # diffrax passes t, y, args by keyword
        return jnp.max(jnp.stack(list(conditions(t, y, args[1]).values())))

    has_event = blowup_norm is not None or bool(events)
    # diffeqsolve(..., throw=False) through DiffeqProblem.solve(): inside run_sweep the engine
    # continues it in segments (straggler-free), with the same solution. The field and the
    # threshold are the problem's args (array leaves), not closed over, so that the engine's
    # segment programs can carry them.
    sol = DiffeqProblem(
        terms=diffrax.ODETerm(lambda t, x, args: args[0].velocity(x, x, t=t)),
        solver=solver,
        t0=jnp.zeros((), dtype),
        t1=t1,
        dt0=dt0,
        y0=x0.astype(dtype),
        args=(field, blowup_norm),
        saveat=requested_and_final_saveat(ts, save_fn, dtype),
        stepsize_controller=stepsize_controller,
        event=(
            diffrax.Event(merged_condition, root_finder=_root_finder(), direction=True)
            if has_event
            else None
        ),
        max_steps=int(max_steps),
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint,
    ).solve()
    return _particle_solution(sol, lambda t, x: conditions(t, x, blowup_norm), list(events))


def _particle_solution(sol: diffrax.Solution, conditions, user_events: list[str]):
    """Final state, which event fired (the largest condition at the stop) and the status."""
    saved, final = sol.ys
    final_x = final[-1]
    t_final = sol.ts[1][-1]
    values = conditions(t_final, final_x)
    if not values:  # no event
        status = mark_nonfinite(Status.promote(sol.result), final_x)
        return ParticleSolution(
            ts=sol.ts[0], xs=saved, final_x=final_x, t_final=t_final,
            t_event=jnp.full((), jnp.inf, final_x.dtype), status=status, events={},
            num_steps=sol.stats["num_steps"],
        )  # fmt: skip
    event_mask = sol.event_mask
    winner = jnp.argmax(jnp.stack(list(values.values())))
    fired = {key: event_mask & (winner == i) for i, key in enumerate(values)}
    blew_up = fired.get("blowup", jnp.zeros((), bool))
    status = Status.where(blew_up, Status.blowup, Status.promote(sol.result))
    status = mark_nonfinite(status, final_x)
    return ParticleSolution(
        ts=sol.ts[0],
        xs=saved,
        final_x=final_x,
        t_final=t_final,
        t_event=jnp.where(event_mask, t_final, jnp.inf),
        status=status,
        events={key: fired[key] for key in user_events},
        num_steps=sol.stats["num_steps"],
    )


def _fixed_step_solution(ts, xs, final_x, status, t1, steps: int) -> ParticleSolution:
    """The :class:`ParticleSolution` of the fixed-step path (no event: it never fires)."""
    return ParticleSolution(
        ts=ts,
        xs=xs,
        final_x=final_x,
        t_final=t1,
        t_event=jnp.full((), jnp.inf, final_x.dtype),
        status=status,
        events={},
        num_steps=jnp.asarray(steps),
    )
