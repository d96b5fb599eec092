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
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from equinox._enum import EnumerationItem
from jaxtyping import Array, ArrayLike, Bool, Int, PyTree, Real

from ._continuation import TrackedState, controller_never_jumps, step_to, tracked
from ._segmented import AbstractSegmentedMember


def _subs(saveat: diffrax.SaveAt) -> list[diffrax.SubSaveAt]:
    return jtu.tree_leaves(saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt))


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
        if self.saveat.dense or any(sub.steps for sub in _subs(self.saveat)):
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


class DiffeqState(eqx.Module):
    """Where one member's solve stands between segments (times in diffrax's normalised
    ``t * direction``). ``saved`` holds each sub-save's ``(ts, ys)`` buffers, as the
    uninterrupted solve returns them."""

    t: Real[Array, ""]
    tnext: Real[Array, ""]
    y: PyTree
    solver_state: PyTree
    controller_state: PyTree
    made_jump: Bool[Array, ""]
    result: Int[Array, ""]
    num_steps: Int[Array, ""]
    num_accepted_steps: Int[Array, ""]
    num_rejected_steps: Int[Array, ""]
    saved: list
    event_mask: PyTree
    done: Bool[Array, ""]


def _direction(problem: DiffeqProblem):
    return jnp.where(problem.t0 < problem.t1, 1, -1)


def _segment_saveat(subs: list[diffrax.SubSaveAt], t_start, direction) -> diffrax.SaveAt:
    """The user's saves for a continued segment: ``t0`` dropped (saved by the first one) and
    requested times before the segment's start clipped to it (diffrax requires ``ts`` within
    ``[t0, t1]``; those slots already hold the earlier segments' values and are kept)."""
    continued = []
    for sub in subs:
        ts = sub.ts
        if ts is not None:
            ts = jnp.where((ts - t_start) * direction < 0, t_start, ts)
        continued.append(diffrax.SubSaveAt(t1=sub.t1, ts=ts, fn=sub.fn))
    return diffrax.SaveAt(subs=continued, solver_state=True, controller_state=True, made_jump=True)


def _continued_slots(sub, prev, seg_ts, seg_ys, state_t, direction):
    """One sub-save's buffers after a continued segment: the segment's saves, placed after the
    ``t0`` slot it did not save, and the slots of times up to the segment's start kept from
    the earlier segments (the segment's values there are extrapolations to its start)."""
    prev_ts, prev_ys = prev
    offset = 1 if sub.t0 else 0
    n = 0 if sub.ts is None else sub.ts.shape[0]
    keep = jnp.zeros(prev_ts.shape[0], bool).at[:offset].set(True)
    if n:
        requested = jnp.asarray(sub.ts, state_t.dtype) * direction
        earlier = jnp.arange(n) < jnp.sum(requested <= state_t)
        keep = keep.at[offset : offset + n].set(earlier)
    if offset:
        seg_ts = jnp.concatenate([prev_ts[:1], seg_ts])
        seg_ys = jax.tree.map(lambda p, s: jnp.concatenate([p[:1], s]), prev_ys, seg_ys)
    ts = jnp.where(keep, prev_ts, seg_ts)
    ys = jax.tree.map(lambda p, s: jnp.where(_bcast(keep, s), p, s), prev_ys, seg_ys)
    return ts, ys


def _merge_saved(subs, previous, sol, state_t, final, problem, direction):
    """Each sub-save's buffers after a segment (``previous`` is ``None`` for the first)."""
    event_fired = (
        jnp.asarray(False)
        if sol.event_mask is None
        else jnp.any(jnp.stack([jnp.asarray(m) for m in jtu.tree_leaves(sol.event_mask)]))
    )
    t_end, y_end = final
    merged = []
    for i, sub in enumerate(subs):
        ts, ys = sol.ts[i], sol.ys[i]
        if previous is not None:
            ts, ys = _continued_slots(sub, previous[i], ts, ys, state_t, direction)
        if sub.t1:
            # Without an event the final save is the loop's own state at the time reached
            # (diffrax interpolates it when another member of the vmapped batch had an event).
            own = jax.tree.map(lambda y: y[None], sub.fn(t_end, y_end, problem.args))
            ts = ts.at[-1].set(jnp.where(event_fired, ts[-1], t_end))
            ys = jax.tree.map(
                lambda s, o: s.at[-1:].set(jnp.where(event_fired, s[-1:], o)), ys, own
            )
        merged.append((ts, ys))
    return merged


def _bcast(mask, x):
    return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def _after_segment(problem, subs, sol, previous: DiffeqState | None, direction) -> DiffeqState:
    """The member's state after one segment's solve ``sol``."""
    track: TrackedState = sol.controller_state
    steps = {k: sol.stats[k] for k in ("num_steps", "num_accepted_steps", "num_rejected_steps")}
    if previous is not None:
        steps = {k: v + getattr(previous, k) for k, v in steps.items()}
    start = jnp.asarray(problem.t0) * direction if previous is None else previous.t
    saved = _merge_saved(
        subs,
        None if previous is None else previous.saved,
        sol,
        start,
        (track.tprev * direction, track.y),
        problem,
        direction,
    )
    result = sol.result
    over_budget = (
        jnp.asarray(False) if problem.max_steps is None else steps["num_steps"] >= problem.max_steps
    )
    done = (result != diffrax.RESULTS.max_steps_reached) | over_budget
    event_mask = sol.event_mask
    if previous is not None and event_mask is not None:
        event_mask = jax.tree.map(lambda now, before: now | before, event_mask, previous.event_mask)
    return DiffeqState(
        t=track.tprev,
        tnext=track.tnext,
        y=track.y,
        solver_state=sol.solver_state,
        controller_state=track.inner,
        made_jump=jnp.asarray(sol.made_jump, bool),
        result=jnp.asarray(result._value, jnp.int32),
        saved=saved,
        event_mask=event_mask,
        done=done,
        **{k: jnp.asarray(v, jnp.int32) for k, v in steps.items()},
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
        problem = self._problem(params, key)
        subs = _subs(problem.saveat)
        saveat = diffrax.SaveAt(subs=subs, solver_state=True, controller_state=True, made_jump=True)
        sol = self._solve(problem, max_steps=max_steps, saveat=saveat, steps_left=problem.max_steps)
        return _after_segment(problem, subs, sol, None, _direction(problem))

    def advance(self, params, key, state, max_steps):
        problem = self._problem(params, key)
        subs = _subs(problem.saveat)
        direction = _direction(problem)
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
            saveat=_segment_saveat(subs, state.t * direction, direction),
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
        return _after_segment(problem, subs, sol, state, direction)

    def done(self, state):
        return state.done

    def finish(self, params, key, state):
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
