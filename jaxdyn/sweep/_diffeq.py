"""Adaptive ODE solves as segmented sweep members: :class:`DiffeqProblem`, :class:`DiffeqMember`.

A theory package describes one member's initial-value problem with :class:`DiffeqProblem`
(the arguments of ``diffrax.diffeqsolve``) and its outputs with a function of the
``diffrax.Solution``; :class:`DiffeqMember` then solves it in segments of at most
``segment_steps`` solver steps, each segment continuing from the previous one's solver state,
controller state and loop position (``jaxdyn/sweep/_continuation.py``). The result is the
uninterrupted solve's, bitwise, so members whose step counts differ by orders of magnitude can
share a sweep without the cheap ones waiting for the slowest.

```python
def problem(params, key):
    y0 = jax.random.normal(key, (2,))
    return DiffeqProblem(
        terms=diffrax.ODETerm(lambda t, y, args: -args * y), solver=diffrax.Tsit5(),
        t0=0.0, t1=10.0, dt0=None, y0=y0, args=params["rate"],
        saveat=diffrax.SaveAt(ts=jnp.linspace(0, 10, 11), t1=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        event=diffrax.Event(lambda t, y, args, **kw: jnp.sum(y**2) < 1e-6),
        max_steps=100_000,
    )

def outputs(params, problem, sol):
    return {"y": sol.ys[-1], "t": sol.ts[-1], "status": Status.promote(sol.result)}

member = DiffeqMember(problem, outputs)
result = run_sweep(member, grid)              # or run.sweep("name", member, grid)
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from equinox._enum import EnumerationItem
from jaxtyping import Array, ArrayLike, PyTree, Real

from ._continuation import TrackedState, controller_never_jumps, step_to, tracked
from ._diffeq_start import start_state
from ._diffeq_state import after_segment, direction_of, segment_saveat, subsaves
from ._segmented import AbstractSegmentedMember


class DiffeqProblem(eqx.Module):
    """One member's initial-value problem: the arguments of ``diffrax.diffeqsolve``.

    Attributes:
        terms, solver, t0, t1, dt0, y0, args: as for ``diffrax.diffeqsolve``.
        saveat: a ``diffrax.SaveAt`` of ``t0``, ``t1``, ``ts`` and ``fn`` (also in ``subs``);
            ``steps`` and ``dense`` are not supported in segments.
        stepsize_controller: as for ``diffeqsolve`` (default ``ConstantStepSize()``).
        event: a ``diffrax.Event`` or ``None``. Its condition must not use the ``t0`` or
            ``dt0`` keyword arguments (a continued segment has its own).
        max_steps: the solve's total step budget (``None``: unbounded).
    """

    terms: PyTree
    solver: diffrax.AbstractSolver
    t0: Real[ArrayLike, ""]
    t1: Real[ArrayLike, ""]
    dt0: Real[ArrayLike, ""] | None
    y0: PyTree
    args: PyTree = None
    saveat: diffrax.SaveAt = diffrax.SaveAt(t1=True)
    stepsize_controller: diffrax.AbstractStepSizeController = diffrax.ConstantStepSize()
    event: diffrax.Event | None = None
    max_steps: int | None = 4096

    def __check_init__(self):
        if not isinstance(self.saveat, diffrax.SaveAt):
            raise TypeError(f"saveat must be a diffrax.SaveAt, got {type(self.saveat).__name__}")
        if self.saveat.dense or any(sub.steps for sub in subsaves(self.saveat)):
            raise ValueError(
                "DiffeqProblem: SaveAt(dense=...) and SaveAt(steps=...) cannot be continued "
                "across segments; save at t0, t1 or ts (with fn for statistics) instead"
            )
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool)
            or not isinstance(self.max_steps, int)
            or self.max_steps < 1
        ):
            raise ValueError(
                f"DiffeqProblem: max_steps must be a positive int or None, got {self.max_steps!r}"
            )


class DiffeqMember(AbstractSegmentedMember):
    """A sweep member that solves an ODE with diffrax, in segments (straggler-free sweeps).

    ``problem(params, key) -> DiffeqProblem`` builds one member's problem from its traced
    hyperparameters and PRNG key (it is called again in every segment, so it must be pure);
    ``outputs(params, problem, solution) -> dict`` turns the ``diffrax.Solution`` of the
    whole solve into the member's outputs (arrays, and optionally ``"status"``, e.g.
    ``jaxdyn.Status.promote(solution.result)``). The solution has ``ts``, ``ys``,
    ``result``, ``event_mask`` and ``stats`` (``num_steps``, ...) exactly as one
    uninterrupted ``diffeqsolve(..., throw=False)`` of the problem returns them, with one
    deliberate difference: the ``SaveAt(t1=True)`` value of a solve that ends without an
    event is always the solver's state at the time reached (diffrax interpolates it when
    another member of a vmapped batch had an event).

    Attributes:
        problem: builds the member's :class:`DiffeqProblem`.
        outputs: maps ``(params, problem, solution)`` to the member's outputs.
    """

    problem: Callable[[dict[str, Array], Array], DiffeqProblem]
    outputs: Callable[[dict[str, Array], DiffeqProblem, diffrax.Solution], dict[str, Any]]

    def __check_init__(self):
        if not callable(self.problem) or not callable(self.outputs):
            raise TypeError("DiffeqMember needs callable problem and outputs functions")

    def _problem(self, params, key) -> DiffeqProblem:
        problem = self.problem(params, key)
        if not isinstance(problem, DiffeqProblem):
            raise TypeError(
                f"DiffeqMember: problem() must return a DiffeqProblem, got {type(problem).__name__}"
            )
        return problem

    def _solve(self, problem, *, max_steps, saveat, steps_left, **continuation):
        return diffrax.diffeqsolve(
            problem.terms,
            problem.solver,
            continuation.pop("t0", problem.t0),
            problem.t1,
            continuation.pop("dt0", problem.dt0),
            continuation.pop("y0", problem.y0),
            problem.args,
            saveat=saveat,
            stepsize_controller=tracked(problem.stepsize_controller, problem.t1, steps_left),
            event=problem.event,
            max_steps=max_steps,
            throw=False,
            **continuation,
        )

    def init(self, params, key, max_steps):
        """Build the member's problem and solve its first ``max_steps`` steps, saving the
        solver state, controller state and ``made_jump`` to continue from. ``max_steps=0``
        solves nothing: the state before the first step (``_diffeq_start.start_state``)."""
        problem = self._problem(params, key)
        if max_steps == 0:
            return start_state(problem)
        subs = subsaves(problem.saveat)
        saveat = diffrax.SaveAt(subs=subs, solver_state=True, controller_state=True, made_jump=True)
        sol = self._solve(problem, max_steps=max_steps, saveat=saveat, steps_left=problem.max_steps)
        return after_segment(problem, subs, sol, None, direction_of(problem))

    def advance(self, params, key, state, max_steps):
        """Continue the solve from ``state`` by at most ``max_steps`` steps, taking the same
        steps an uninterrupted solve takes (``t0``, ``dt0``, solver and controller state
        from the previous segment)."""
        problem = self._problem(params, key)
        subs = subsaves(problem.saveat)
        direction = direction_of(problem)
        steps_left = None if problem.max_steps is None else problem.max_steps - state.num_steps
        never_jumps = controller_never_jumps(
            problem.stepsize_controller,
            problem.terms,
            problem.t0,
            problem.t1,
            problem.y0,
            problem.dt0,
            problem.args,
            problem.solver,
        )
        sol = self._solve(
            problem,
            max_steps=max_steps,
            saveat=segment_saveat(subs, state.t * direction, direction),
            steps_left=steps_left,
            t0=state.t * direction,
            dt0=step_to(state.t, state.tnext) * direction,
            y0=state.y,
            solver_state=state.solver_state,
            controller_state=TrackedState(
                state.controller_state, state.t, state.tnext, state.y, jnp.asarray(0, jnp.int32)
            ),
            made_jump=False if never_jumps else state.made_jump,
        )
        return after_segment(problem, subs, sol, state, direction)

    def done(self, state):
        """Whether the solve has ended: ``t1`` or an event reached, a failure, or the problem's
        own ``max_steps`` used up (not merely the segment's)."""
        return state.done

    def finish(self, params, key, state):
        """A ``diffrax.Solution`` assembled from the segments' saves and statistics, passed to
        the member's ``outputs(params, problem, solution)``."""
        problem = self._problem(params, key)
        saved = state.saved
        single = isinstance(problem.saveat.subs, diffrax.SubSaveAt)
        ts = [t for t, _ in saved]
        ys = [y for _, y in saved]
        structure = jtu.tree_structure(
            problem.saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt)
        )
        solution = diffrax.Solution(
            t0=jnp.asarray(problem.t0),
            t1=jnp.asarray(problem.t1),
            ts=ts[0] if single else jtu.tree_unflatten(structure, ts),
            ys=ys[0] if single else jtu.tree_unflatten(structure, ys),
            interpolation=None,
            stats={
                "num_steps": state.num_steps,
                "num_accepted_steps": state.num_accepted_steps,
                "num_rejected_steps": state.num_rejected_steps,
                "max_steps": problem.max_steps,
            },
            result=EnumerationItem(state.result, diffrax.RESULTS),
            solver_state=None,
            controller_state=None,
            made_jump=None,
            event_mask=state.event_mask,
        )
        return self.outputs(params, problem, solution)
