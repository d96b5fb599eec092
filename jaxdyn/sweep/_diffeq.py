"""Adaptive ODE solves in segments: :class:`DiffeqProblem`, :class:`DiffeqMember`, and the
solves of plain members that the sweep engine continues in segments by itself.

A vmapped adaptive solve runs until its slowest member is done. The sweep engine instead
advances every unfinished member by at most ``segment_steps`` solver steps at a time and
re-batches the unfinished ones between segments (``_scheduler.py``). This module is what makes
one diffrax solve cut into segments take bitwise the steps of the uninterrupted solve.

**Describing a solve.** A :class:`DiffeqProblem` holds the arguments of
``diffrax.diffeqsolve``; ``problem.solve()`` is ``diffeqsolve(..., throw=False)`` of them with
the problem's adjoint. It is the one seam between the library's simulators and the sweep
engine (docs/sweep.md): inside :func:`~jaxdyn.sweep.run_sweep`, while the engine traces a
plain member function in one of its two jitted functions (:func:`member_problem`,
:func:`member_outputs`), the current :class:`MemberTrace` answers a top-level ``solve()``, and
the engine runs the member as a :class:`SolveMember` whose solve it continues from segment to
segment. A :class:`DiffeqMember` states the same split explicitly: ``problem(params, key)``
builds the problem and ``outputs(params, problem, solution)`` the member's outputs.

```python
def member(params, key):                       # the natural code is the fast code
    sol = simulate_gaussian(Softmax(params["Q"], params["K"], params["V"]), mean0, cov0, t1)
    return {"rank": ..., "status": sol.status}

result = run_sweep(member, grid)               # segmented: no member waits for the slowest
```

**Continuing a solve.** ``diffrax.diffeqsolve`` continues from a saved ``solver_state``,
``controller_state`` and ``made_jump`` (``SaveAt(solver_state=True, ...)``), but the loop's
own position is not saved: the time it reached, the end of the step it would take next, and
the state it holds (after an event elsewhere in a vmapped batch, diffrax's ``SaveAt(t1=True)``
value of a member without an event is an interpolation, not the state itself). The
:func:`tracked` step-size controller runs the user's controller unchanged and records those
three in its own state, with the loop's book-keeping of diffrax 0.7 (``jaxdyn._compat``). It
also stops the loop after a given total number of steps, so that a solve cut into segments
honours the problem's ``max_steps``. A continuation restarts with ``t0 = tprev`` and ``dt0``
such that ``t0 + dt0`` rounds to exactly the recorded ``tnext`` (:func:`step_to`), which is how
diffrax computes the first step end of a solve given a ``controller_state``.

**The first segment** starts from the state before the first step (:func:`start_state`),
what ``diffeqsolve`` computes before its loop: times in the solve's dtype, normalised by the
direction of integration, the controller's first step and state and the solver's state on
direction-wrapped terms, the ``t0`` saves. The engine's ``init`` program then holds no solver
loop and every step of every member is taken by the one segment program.

**Saves.** The saves of a continued segment go into the slots the uninterrupted solve would
fill: its requested times from the segment's start on, its ``t1`` save at the end; slots of
earlier times keep the earlier segments' values (tests/test_sweep_segmented.py).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Int, PyTree, Real

from .._compat import clip_floor, clip_to_end, direction_terms, own_final_save
from .._status import item_code, item_with_code
from ._programs import member_group
from ._segmented import AbstractSegmentedMember

_NO_LIMIT = 2**31 - 1


# --- the problem -----------------------------------------------------------------------------


def subsaves(saveat: diffrax.SaveAt) -> list[diffrax.SubSaveAt]:
    """The ``SubSaveAt`` leaves of a ``SaveAt``, in order."""
    return jtu.tree_leaves(saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt))


class DiffeqProblem(eqx.Module):
    """One initial-value problem: the arguments of ``diffrax.diffeqsolve``, and the one seam
    between the library's simulators and the sweep engine.

    A simulator builds its problem and calls :meth:`solve`. Outside
    :func:`~jaxdyn.sweep.run_sweep` that is ``diffrax.diffeqsolve(..., throw=False)`` with the
    problem's ``adjoint``. Inside, when the member function calls ``solve()`` once at its top
    level, the engine continues the solve in segments (docs/sweep.md); the solution is the
    same.

    Attributes:
        terms, solver, t0, t1, dt0, y0, args: as for ``diffrax.diffeqsolve``.
        saveat: a ``diffrax.SaveAt`` of ``t0``, ``t1``, ``ts`` and ``fn`` (also in ``subs``);
            ``steps``, ``dense`` and the solver's own state are not supported.
        stepsize_controller: as for ``diffeqsolve`` (default ``ConstantStepSize()``).
        event: a ``diffrax.Event`` or ``None``. Its condition must not use the ``t0`` or
            ``dt0`` keyword arguments (a continued segment has its own).
        max_steps: the solve's total step budget (``None``: unbounded).
        adjoint: how ``diffeqsolve`` differentiates the solve (default
            ``diffrax.RecursiveCheckpointAdjoint()``). ``diffrax.BacksolveAdjoint`` takes no
            event; sub-saves and save functions are computed from one save of the state for it.
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
    adjoint: diffrax.AbstractAdjoint = diffrax.RecursiveCheckpointAdjoint()

    def __check_init__(self):
        if not isinstance(self.saveat, diffrax.SaveAt):
            raise TypeError(f"saveat must be a diffrax.SaveAt, got {type(self.saveat).__name__}")
        if self.saveat.dense or any(sub.steps for sub in subsaves(self.saveat)):
            raise ValueError(
                "DiffeqProblem: SaveAt(dense=...) and SaveAt(steps=...) cannot be continued "
                "across segments; save at t0, t1 or ts (with fn for statistics) instead"
            )
        saveat = self.saveat
        if saveat.solver_state or saveat.controller_state or saveat.made_jump:
            raise ValueError(
                "DiffeqProblem: SaveAt(solver_state=..., controller_state=..., made_jump=...) "
                "are the sweep engine's to continue a solve; save at t0, t1 or ts instead"
            )
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool)
            or not isinstance(self.max_steps, int)
            or self.max_steps < 1
        ):
            raise ValueError(
                f"DiffeqProblem: max_steps must be a positive int or None, got {self.max_steps!r}"
            )
        if not isinstance(self.adjoint, diffrax.AbstractAdjoint):
            raise TypeError(f"adjoint must be a diffrax adjoint, got {type(self.adjoint).__name__}")
        if isinstance(self.adjoint, diffrax.BacksolveAdjoint):
            if self.event is not None:
                raise ValueError(
                    "DiffeqProblem: diffrax.BacksolveAdjoint takes no event (a simulator's "
                    "events: pass blowup_trace=None, steady_tol=None, psd_tol=None)"
                )
            if len({id(s.ts) for s in subsaves(saveat) if s.ts is not None}) > 1:
                raise ValueError(
                    "DiffeqProblem: with diffrax.BacksolveAdjoint at most one sub-save may "
                    "have ts (they are computed from one save of the state)"
                )

    def solve(self, *, shared: Callable[[], tuple] | None = None) -> diffrax.Solution:
        """``diffrax.diffeqsolve(..., throw=False)`` of the problem, or, when the sweep engine
        is tracing a member that calls it (:func:`~jaxdyn.sweep.run_sweep`), the engine's
        segmented solve of it, with the same ``ts``, ``ys``, ``result``, ``event_mask`` and
        ``stats``.

        Args:
            shared: optional ``() -> (problem, restrict)`` from a simulator: an equivalent
                problem in a form that problems of other sizes or kinds share (e.g. padded
                with zero blocks to a common size), and the map from its ``diffrax.Solution``
                to this problem's. Outside the engine it is not used. Inside ``run_sweep`` the
                engine solves the shared form, so that sweeps of different member functions,
                sizes or kinds share one compiled segment program. The simulator guarantees
                the two solutions agree to the solver's tolerance.
        """
        trace = _CURRENT.get()
        if trace is not None:
            solution = trace.solve(self, shared)
            if solution is not None:
                return solution
        if isinstance(self.adjoint, diffrax.BacksolveAdjoint):
            return backsolve_saves(self)
        if self.event is not None and any(sub.t1 for sub in subsaves(self.saveat)):
            return event_saves(self)
        return self._diffeqsolve(max_steps=self.max_steps, saveat=self.saveat)

    def _diffeqsolve(self, *, max_steps, saveat, controller=None, **continuation):
        return diffrax.diffeqsolve(
            self.terms,
            self.solver,
            continuation.pop("t0", self.t0),
            self.t1,
            continuation.pop("dt0", self.dt0),
            continuation.pop("y0", self.y0),
            self.args,
            saveat=saveat,
            stepsize_controller=self.stepsize_controller if controller is None else controller,
            event=self.event,
            max_steps=max_steps,
            adjoint=self.adjoint,
            throw=False,
            **continuation,
        )


def event_saves(problem: DiffeqProblem) -> diffrax.Solution:
    """``diffeqsolve`` of a problem with an event, its ``t1`` saves corrected for a vmapped
    batch (``jaxdyn._compat.own_final_save``): the controller is :func:`tracked`, which takes
    the same steps and records the state the loop holds, and a solve that ends without an
    event saves that state at ``t1``."""
    subs = subsaves(problem.saveat)
    sol = problem._diffeqsolve(
        max_steps=problem.max_steps,
        saveat=diffrax.SaveAt(subs=problem.saveat.subs, controller_state=True),
        controller=tracked(problem.stepsize_controller, problem.t1, None),
    )
    track: TrackedState = sol.controller_state
    t_end = track.tprev * direction_of(problem)
    fired = jnp.any(jnp.stack([jnp.asarray(m) for m in jtu.tree_leaves(sol.event_mask)]))
    single = isinstance(problem.saveat.subs, diffrax.SubSaveAt)
    all_ts = [sol.ts] if single else jtu.tree_leaves(sol.ts, is_leaf=lambda x: x is None)
    all_ys = [sol.ys] if single else list(sol.ys)
    saves = []
    for sub, ts, ys in zip(subs, all_ts, all_ys, strict=True):
        if sub.t1:
            ts, ys = own_final_save(sub, ts, ys, fired, t_end, track.y, problem.args)
        saves.append((ts, ys))
    structure = jtu.tree_structure(
        problem.saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt)
    )
    ts = saves[0][0] if single else jtu.tree_unflatten(structure, [t for t, _ in saves])
    ys = saves[0][1] if single else jtu.tree_unflatten(structure, [y for _, y in saves])
    return dataclasses.replace(sol, ts=ts, ys=ys, controller_state=None)


def backsolve_saves(problem: DiffeqProblem) -> diffrax.Solution:
    """``diffeqsolve`` with ``diffrax.BacksolveAdjoint``, which saves the state only, in one
    ``SubSaveAt``: the problem's sub-saves and save functions computed from one save of the
    state at the union of their times (``t0``, the one ``ts``, ``t1``)."""
    subs = subsaves(problem.saveat)
    single = isinstance(problem.saveat.subs, diffrax.SubSaveAt)
    if single and subs[0].fn is diffrax.SaveAt(t1=True).subs.fn:
        return problem._diffeqsolve(max_steps=problem.max_steps, saveat=problem.saveat)
    ts = next((s.ts for s in subs if s.ts is not None), None)
    t0, t1 = any(s.t0 for s in subs), any(s.t1 for s in subs)
    sol = problem._diffeqsolve(
        max_steps=problem.max_steps, saveat=diffrax.SaveAt(t0=t0, ts=ts, t1=t1)
    )
    n_ts = 0 if ts is None else ts.shape[0]
    all_ts, all_ys = [], []
    for sub in subs:
        idx = ([0] if sub.t0 else []) + (
            list(range(int(t0), int(t0) + n_ts)) if sub.ts is not None else []
        )
        idx += [int(t0) + n_ts] if sub.t1 else []
        idx = jnp.asarray(idx, jnp.int32)
        sub_ts = sol.ts[idx]
        sub_ys = jax.tree.map(lambda y, i=idx: y[i], sol.ys)
        all_ts.append(sub_ts)
        all_ys.append(jax.vmap(sub.fn, in_axes=(0, 0, None))(sub_ts, sub_ys, problem.args))
    structure = jtu.tree_structure(
        problem.saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt)
    )
    return eqx.tree_at(
        lambda s: (s.ts, s.ys),
        sol,
        (jtu.tree_unflatten(structure, all_ts), jtu.tree_unflatten(structure, all_ys)),
    )


class DiffeqState(eqx.Module):
    """Where one solve stands between segments (times in diffrax's normalised
    ``t * direction``). ``saved`` holds each sub-save's ``(ts, ys)`` buffers, as the
    uninterrupted solve returns them; ``result`` is a ``diffrax.RESULTS`` item."""

    t: Real[Array, ""]
    tnext: Real[Array, ""]
    y: PyTree
    solver_state: PyTree
    controller_state: PyTree
    made_jump: Bool[Array, ""]
    result: Any
    num_steps: Int[Array, ""]
    num_accepted_steps: Int[Array, ""]
    num_rejected_steps: Int[Array, ""]
    saved: list
    event_mask: PyTree
    done: Bool[Array, ""]


# --- the tracking controller -----------------------------------------------------------------


class TrackedState(eqx.Module):
    """The wrapped controller's state plus the loop position of diffrax after each step.

    Attributes:
        inner: the user's controller state.
        tprev: time reached (diffrax's normalised time: ``t * direction``).
        tnext: end of the next step the loop would take (normalised).
        y: the state at ``tprev``.
        steps: steps taken in this solve (accepted and rejected).
    """

    inner: PyTree
    tprev: Real[Array, ""]
    tnext: Real[Array, ""]
    y: PyTree
    steps: Int[Array, ""]


class _AbstractTracker(diffrax.AbstractStepSizeController):
    """Shared behaviour of the adaptive and fixed-step trackers (see :func:`tracked`)."""

    controller: eqx.AbstractVar[diffrax.AbstractStepSizeController]
    end: eqx.AbstractVar[Real[Array, ""]]
    end_floor: eqx.AbstractVar[Real[Array, ""]]
    steps_left: eqx.AbstractVar[Int[Array, ""]]

    def wrap(self, direction):
        end = self.end * direction
        return eqx.tree_at(
            lambda s: (s.controller, s.end, s.end_floor),
            self,
            (self.controller.wrap(direction), end, clip_floor(end)),
        )

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, inner = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        state = TrackedState(
            inner=inner,
            tprev=jnp.asarray(t0),
            tnext=jnp.minimum(tnext, t1),
            y=y0,
            steps=jnp.asarray(0, jnp.int32),
        )
        return tnext, state

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, state):
        keep, tprev, tnext, made_jump, inner, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state.inner
        )
        end = self.end
        loop_tprev = jnp.minimum(tprev, end)
        loop_tnext = clip_to_end(loop_tprev, tnext, end, self.end_floor, keep)
        y = jax.tree.map(lambda a, b: jnp.where(keep, a, b), y1_candidate, y0)
        steps = state.steps + 1
        out_of_steps = (steps >= self.steps_left) & (loop_tprev < end)
        result = diffrax.RESULTS.where(
            out_of_steps & (result == diffrax.RESULTS.successful),
            diffrax.RESULTS.max_steps_reached,
            result,
        )
        new_state = TrackedState(inner, loop_tprev, loop_tnext, y, steps)
        return keep, tprev, tnext, made_jump, new_state, result


class _AdaptiveTracker(_AbstractTracker, diffrax.AbstractAdaptiveStepSizeController):
    """Tracker of an adaptive controller (its tolerances stay visible to implicit solvers)."""

    controller: diffrax.AbstractStepSizeController
    end: Real[Array, ""]
    end_floor: Real[Array, ""]
    steps_left: Int[Array, ""]
    rtol: Real[ArrayLike, ""]
    atol: Real[ArrayLike, ""]
    norm: Callable


class _FixedTracker(_AbstractTracker):
    """Tracker of a non-adaptive controller (constant steps, ``StepTo``)."""

    controller: diffrax.AbstractStepSizeController
    end: Real[Array, ""]
    end_floor: Real[Array, ""]
    steps_left: Int[Array, ""]


def tracked(
    controller: diffrax.AbstractStepSizeController, t1, steps_left
) -> diffrax.AbstractStepSizeController:
    """``controller`` with the loop position recorded and the solve stopped (result
    ``max_steps_reached``) once ``steps_left`` steps are taken before ``t1``."""
    # ``end`` is in the caller's time until diffrax calls ``wrap(direction)``.
    end = jnp.asarray(t1)
    steps_left = jnp.asarray(_NO_LIMIT if steps_left is None else steps_left, jnp.int32)
    if isinstance(controller, diffrax.AbstractAdaptiveStepSizeController):
        return _AdaptiveTracker(
            controller, end, end, steps_left, controller.rtol, controller.atol, controller.norm
        )
    return _FixedTracker(controller, end, end, steps_left)


def step_to(tprev: Real[Array, "*t"], tnext: Real[Array, "*t"]) -> Real[Array, "*t"]:
    """A step ``dt`` with ``tprev + dt == tnext`` exactly in floating point.

    ``tnext - tprev`` is exact when the two are within a factor of two (Sterbenz); otherwise
    the sum may round one ULP off ``tnext``, and nudging ``dt`` by one of its own ULPs (at
    most one ULP of ``tnext``) lands on it.
    """
    dt = tnext - tprev
    for _ in range(4):
        total = tprev + dt
        dt = jnp.where(
            total > tnext,
            jnp.nextafter(dt, -jnp.inf),
            jnp.where(total < tnext, jnp.nextafter(dt, jnp.inf), dt),
        )
    return dt


def controller_never_jumps(problem: DiffeqProblem) -> bool:
    """Whether the problem's controller returns a static ``made_jump=False`` (no ``jump_ts``).

    diffrax then resolves ``made_jump`` at trace time; passing a traced ``False`` instead
    would make FSAL solvers carry a select of the first stage in every step.
    """
    known = (diffrax.PIDController, diffrax.ConstantStepSize, diffrax.StepTo)
    if not isinstance(problem.stepsize_controller, known):
        return False  # another controller: keep the traced flag (correct, a bit slower)
    wrapped = problem.stepsize_controller.wrap(jnp.asarray(1))
    terms, solver, args = problem.terms, problem.solver, problem.args
    order = solver.error_order(terms)
    t0, t1, dt0 = problem.t0, problem.t1, problem.dt0

    def probe(y):
        _, state = wrapped.init(terms, t0, t1, y, dt0, args, solver.func, order)
        return wrapped.adapt_step_size(t0, t1, y, y, args, y, order, state)[3]

    return eqx.filter_eval_shape(probe, problem.y0) is False


def opaque(problem: DiffeqProblem) -> DiffeqProblem:
    """``problem`` with its array leaves behind ``lax.optimization_barrier``: XLA compiles the
    solve the same whether the arrays are built in the same program (constants and zero
    blocks visible to it) or read from a segment's state, so every path of the engine (one
    uninterrupted solve, segments, a member routed or explicit) takes bitwise the same
    steps."""
    arrays, static = eqx.partition(problem, eqx.is_array)
    return eqx.combine(jax.lax.optimization_barrier(arrays), static)


# --- the state before the first step ---------------------------------------------------------


def direction_of(problem: DiffeqProblem):
    return jnp.where(problem.t0 < problem.t1, 1, -1)


def _time_dtype(problem):
    timelikes = [problem.t0, problem.t1, problem.dt0]
    timelikes += [s.ts for s in subsaves(problem.saveat)]
    with jax.numpy_dtype_promotion("standard"):
        dtype = jnp.result_type(*[x for x in timelikes if x is not None])
    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)


def _empty_saves(problem, subs, t0, y0):
    """Each sub-save's ``(ts, ys)`` buffers before the first step: the ``t0`` slot filled
    (``fn(t0, y0, args)``), every other slot ``inf`` as diffrax allocates them."""
    saved = []
    for sub in subs:
        size = int(sub.t0) + (0 if sub.ts is None else sub.ts.shape[0]) + int(sub.t1)
        y_shape = jax.eval_shape(sub.fn, t0, y0, problem.args)
        ts = jnp.full(size, jnp.inf, t0.dtype)
        ys = jax.tree.map(lambda s, n=size: jnp.full((n,) + s.shape, jnp.inf, s.dtype), y_shape)
        if sub.t0:
            value = sub.fn(t0, y0, problem.args)
            ts = ts.at[0].set(t0)
            ys = jax.tree.map(lambda b, v: b.at[0].set(v), ys, value)
        saved.append((ts, ys))
    return saved


def _result(code) -> Any:
    """The ``diffrax.RESULTS`` item of an int32 code."""
    return item_with_code(diffrax.RESULTS.successful, jnp.asarray(code, jnp.int32))


def start_state(problem: DiffeqProblem) -> DiffeqState:
    """The :class:`DiffeqState` of ``problem`` before its first step (module docstring)."""
    problem = opaque(problem)
    direction = direction_of(problem)
    dtype = _time_dtype(problem)
    t0 = jnp.asarray(problem.t0, dtype)
    t0n, t1n = t0 * direction, jnp.asarray(problem.t1, dtype) * direction
    dt0n = None if problem.dt0 is None else jnp.asarray(problem.dt0, dtype) * direction

    def promote(y):
        with jax.numpy_dtype_promotion("standard"):
            return jnp.asarray(y, jnp.result_type(y, dtype))

    y0 = jtu.tree_map(promote, problem.y0)
    terms = direction_terms(problem.terms, direction)
    solver = problem.solver
    controller = tracked(problem.stepsize_controller, problem.t1, problem.max_steps)
    controller = controller.wrap(direction)
    tnext, track = controller.init(
        terms, t0n, t1n, y0, dt0n, problem.args, solver.func, solver.error_order(terms)
    )
    tnext = jnp.minimum(tnext, t1n)
    event = problem.event
    event_mask = (
        None
        if event is None
        else jtu.tree_map(lambda _: jnp.asarray(False), event.cond_fn, is_leaf=callable)
    )
    zero = jnp.asarray(0, jnp.int32)
    return DiffeqState(
        t=t0n,
        tnext=tnext,
        y=y0,
        solver_state=solver.init(terms, t0n, tnext, y0, problem.args),
        controller_state=track.inner,
        made_jump=jnp.asarray(False),
        result=_result(item_code(diffrax.RESULTS.successful)),
        num_steps=zero,
        num_accepted_steps=zero,
        num_rejected_steps=zero,
        saved=_empty_saves(problem, subsaves(problem.saveat), t0, y0),
        event_mask=event_mask,
        done=jnp.asarray(False),
    )


# --- one segment -----------------------------------------------------------------------------


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


def _bcast(mask, x):
    return mask.reshape(mask.shape + (1,) * (x.ndim - 1))


def _continued_slots(sub, prev, seg_ts, seg_ys, state_t, direction, fresh):
    """One sub-save's buffers after a continued segment: the segment's saves, placed after the
    ``t0`` slot it did not save, and the slots of times up to the segment's start kept from
    the earlier segments (the segment's values there are extrapolations to its start). After
    a state that has taken no step yet (``fresh``), only the ``t0`` slot is kept: a requested
    time equal to ``t0`` is saved by the first step, as in the uninterrupted solve."""
    prev_ts, prev_ys = prev
    offset = 1 if sub.t0 else 0
    n = 0 if sub.ts is None else sub.ts.shape[0]
    keep = jnp.zeros(prev_ts.shape[0], bool).at[:offset].set(True)
    if n:
        requested = jnp.asarray(sub.ts, state_t.dtype) * direction
        earlier = jnp.arange(n) < jnp.where(fresh, 0, jnp.sum(requested <= state_t))
        keep = keep.at[offset : offset + n].set(earlier)
    if offset:
        seg_ts = jnp.concatenate([prev_ts[:1], seg_ts])
        seg_ys = jax.tree.map(lambda p, s: jnp.concatenate([p[:1], s]), prev_ys, seg_ys)
    ts = jnp.where(keep, prev_ts, seg_ts)
    ys = jax.tree.map(lambda p, s: jnp.where(_bcast(keep, s), p, s), prev_ys, seg_ys)
    return ts, ys


def _merge_saved(subs, previous, sol, state_t, final, problem, direction, fresh):
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
            ts, ys = _continued_slots(sub, previous[i], ts, ys, state_t, direction, fresh)
        if sub.t1:
            ts, ys = own_final_save(sub, ts, ys, event_fired, t_end, y_end, problem.args)
        merged.append((ts, ys))
    return merged


def _after_segment(problem, subs, sol, previous: DiffeqState | None, direction) -> DiffeqState:
    """The solve's state after one segment's ``diffeqsolve`` ``sol``."""
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
        None if previous is None else previous.num_steps == 0,
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
        result=_result(item_code(result)),
        saved=saved,
        event_mask=event_mask,
        done=done,
        **{k: jnp.asarray(v, jnp.int32) for k, v in steps.items()},
    )


def first_segment(problem: DiffeqProblem, max_steps: int | None) -> DiffeqState:
    """Start ``problem`` and solve at most ``max_steps`` steps (``0``: :func:`start_state`;
    ``None``: the whole solve), saving what a continuation needs."""
    if max_steps == 0:
        return start_state(problem)
    problem = opaque(problem)
    subs = subsaves(problem.saveat)
    saveat = diffrax.SaveAt(subs=subs, solver_state=True, controller_state=True, made_jump=True)
    sol = problem._diffeqsolve(
        max_steps=max_steps,
        saveat=saveat,
        controller=tracked(problem.stepsize_controller, problem.t1, problem.max_steps),
    )
    return _after_segment(problem, subs, sol, None, direction_of(problem))


def next_segment(problem: DiffeqProblem, state: DiffeqState, max_steps: int | None):
    """Continue the solve from ``state`` by at most ``max_steps`` steps, taking the same
    steps an uninterrupted solve takes (``t0``, ``dt0``, solver and controller state from the
    previous segment)."""
    problem = opaque(problem)
    subs = subsaves(problem.saveat)
    direction = direction_of(problem)
    steps_left = None if problem.max_steps is None else problem.max_steps - state.num_steps
    sol = problem._diffeqsolve(
        max_steps=max_steps,
        saveat=_segment_saveat(subs, state.t * direction, direction),
        controller=tracked(problem.stepsize_controller, problem.t1, steps_left),
        t0=state.t * direction,
        dt0=step_to(state.t, state.tnext) * direction,
        y0=state.y,
        solver_state=state.solver_state,
        controller_state=TrackedState(
            state.controller_state, state.t, state.tnext, state.y, jnp.asarray(0, jnp.int32)
        ),
        made_jump=False if controller_never_jumps(problem) else state.made_jump,
    )
    return _after_segment(problem, subs, sol, state, direction)


def solution_of(problem: DiffeqProblem, state: DiffeqState) -> diffrax.Solution:
    """The ``diffrax.Solution`` of the whole solve, assembled from the segments' saves and
    statistics: ``ts``, ``ys``, ``result``, ``event_mask`` and ``stats`` exactly as one
    uninterrupted ``diffeqsolve(..., throw=False)`` returns them, except that the
    ``SaveAt(t1=True)`` value of a solve that ends without an event is always the solver's
    state at the time reached (diffrax interpolates it when another member of a vmapped batch
    had an event)."""
    saved = state.saved
    single = isinstance(problem.saveat.subs, diffrax.SubSaveAt)
    ts = [t for t, _ in saved]
    ys = [y for _, y in saved]
    structure = jtu.tree_structure(
        problem.saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt)
    )
    return diffrax.Solution(
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
        result=state.result,
        solver_state=None,
        controller_state=None,
        made_jump=None,
        event_mask=state.event_mask,
    )


# --- segmented members -----------------------------------------------------------------------


class DiffeqMember(AbstractSegmentedMember):
    """A sweep member that solves an ODE with diffrax, in segments (straggler-free sweeps).

    ``problem(params, key) -> DiffeqProblem`` builds one member's problem from its traced
    hyperparameters and PRNG key (it is called again in every segment, so it must be pure);
    ``outputs(params, problem, solution) -> dict`` turns the ``diffrax.Solution`` of the
    whole solve (:func:`solution_of`) into the member's outputs (arrays, and optionally
    ``"status"``, e.g. ``jaxdyn.Status.promote(solution.result)``).

    A plain member function whose solve goes through :meth:`DiffeqProblem.solve` is run the
    same way without being written as a ``DiffeqMember`` (module docstring).

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

    def init(self, params, key, max_steps):
        """Build the member's problem and solve its first ``max_steps`` steps
        (:func:`first_segment`)."""
        return first_segment(self._problem(params, key), max_steps)

    def advance(self, params, key, state, max_steps):
        """Continue the solve by at most ``max_steps`` steps (:func:`next_segment`)."""
        return next_segment(self._problem(params, key), state, max_steps)

    def done(self, state):
        """Whether the solve has ended: ``t1`` or an event reached, a failure, or the problem's
        own ``max_steps`` used up (not merely the segment's)."""
        return state.done

    def finish(self, params, key, state):
        """The member's outputs of the whole solve's :func:`solution_of`."""
        problem = self._problem(params, key)
        return self.outputs(params, problem, solution_of(problem, state))


# --- plain members whose solve the engine continues ------------------------------------------
#
# The seam. A plain member function ``fn(params, key)`` that calls ``DiffeqProblem.solve()``
# once, at its top level, is run by the engine as a segmented member (:class:`SolveMember`).
# The engine asks the member for its problem through one explicit object, a
# :class:`MemberTrace`, which it makes current (``_CURRENT``) only while it traces the member
# in one of three jitted functions of its own:
#
# - the search (:func:`plan_member`): ``member_group`` traces one vmapped group of members as
#   a plain sweep runs them and counts the ``solve()`` calls at the member's top level. A
#   member with none is decided (run as written) and its plain programs reuse this trace;
# - :func:`member_problem` (a member that called ``solve()``) traces ``fn`` up to its outputs
#   with every ``solve()`` answered by a placeholder, and returns the array leaves of the
#   solved problem (of its shared form when the simulator offers one). The same trace decides
#   whether the member can be segmented; jit's cache keeps it, so the member is not traced
#   again for the programs that start each chunk's solves;
# - :func:`member_outputs` traces ``fn`` once more with ``solve()`` answered by the solution
#   of the finished segmented solve.
#
# Every segment between the last two runs the problem's own structure (``ProblemStructure``):
# no segment program traces ``fn``. Outside these functions no ``MemberTrace`` is current
# and ``solve()`` is ``diffrax.diffeqsolve``. The decisions (a :class:`MemberPlan` per member
# function and input shapes) live in a :class:`~jaxdyn.sweep.SweepCache`, which a user can
# clear.


class SharedState(eqx.Module):
    """The state of a solve run by the engine: the solved problem's array leaves, carried from
    segment to segment so that a segment program needs only the problem's structure, and the
    solve's :class:`DiffeqState`."""

    problem: PyTree
    solve: DiffeqState


class ProblemStructure:
    """The static part of a :class:`DiffeqProblem` (everything but its array leaves): equal
    for problems that one compiled segment program can continue (with arrays of the same
    shapes), so it keys the engine's segment programs. An unhashable static part is equal to
    itself only."""

    def __init__(self, problem: DiffeqProblem):
        static = eqx.partition(problem, eqx.is_array)[1]
        leaves, treedef = jtu.tree_flatten(static)
        self.key = (treedef, tuple(leaves))
        self._hashable = all(_hashable(x) for x in leaves)
        self._hash = hash(self.key) if self._hashable else id(self)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if not isinstance(other, ProblemStructure):
            return False
        if not (self._hashable and other._hashable):
            return self is other
        return self.key == other.key

    def problem(self, arrays: PyTree) -> DiffeqProblem:
        """The problem with these array leaves."""
        return eqx.combine(arrays, jtu.tree_unflatten(*self.key))


def _hashable(x) -> bool:
    return getattr(type(x), "__hash__", None) is not None and (
        not isinstance(x, (tuple, frozenset)) or all(_hashable(v) for v in x)
    )


def start_shared(structure: ProblemStructure, arrays: PyTree) -> SharedState:
    """A solve before its first step, from its problem's array leaves."""
    return SharedState(arrays, start_state(structure.problem(arrays)))


def advance_shared(structure: ProblemStructure, state: SharedState, max_steps) -> SharedState:
    """One segment of a solve, from its state alone (no member function)."""
    problem = structure.problem(state.problem)
    return SharedState(state.problem, next_segment(problem, state.solve, max_steps))


def _holds_tracer(obj, depth: int = 4) -> bool:
    """Whether a static leaf of a problem (a function, a ``functools.partial``, a container)
    reaches a traced value: a closure over the member's parameters, which a segment program
    compiled apart from the member cannot see."""
    if isinstance(obj, jax.core.Tracer):
        return True
    if depth == 0:
        return False
    inner: list = []
    if isinstance(obj, (tuple, list, set, frozenset)):
        inner = list(obj)
    elif isinstance(obj, dict):
        inner = list(obj.values())
    elif isinstance(obj, functools.partial):
        inner = [obj.func, *obj.args, *obj.keywords.values()]
    elif inspect.ismethod(obj):
        inner = [obj.__func__, obj.__self__]
    elif inspect.isfunction(obj):
        inner = [x for c in obj.__closure__ or () for x in _cell_contents(c)]
        inner += list(obj.__defaults__ or ())
    return any(_holds_tracer(x, depth - 1) for x in inner)


def _cell_contents(cell) -> list:
    try:
        return [cell.cell_contents]
    except ValueError:  # an empty cell: a name assigned after the closure was made
        return []


class PlainMember:
    """A plain member function as the engine's plain programs call it (``program`` of a
    :class:`MemberPlan`). Compared by identity, as a static argument of jit: the search for a
    solve and every plain program of the plan share jit's trace of it. While the engine
    searches it (a ``"search"`` :class:`MemberTrace` current), a call marks the member's top
    level, which is inside the engine's ``vmap``."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, params, key):
        trace = _CURRENT.get()
        if trace is not None and trace.mode == "search":
            trace.trace_state = jax.extend.core.get_opaque_trace_state()
        return self.fn(params, key)

    def __repr__(self) -> str:
        return f"PlainMember({getattr(self.fn, '__qualname__', type(self.fn).__name__)})"


class MemberPlan:
    """The engine's decision about one member function for one member's input shapes (kept in
    a :class:`~jaxdyn.sweep.SweepCache`): segmented (``reason is None``; ``structure`` is the
    structure of the problem it solves) or run as written (``reason`` says why) by the plain
    programs of ``program`` (a :class:`PlainMember`).
    Compared by identity: it is a static argument of the engine's jitted functions, so a new
    plan (after ``SweepCache.clear()``) traces the member again."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.reason: str | None = None
        self.structure: ProblemStructure | None = None
        self.program = PlainMember(fn)

    def __repr__(self) -> str:
        name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
        return f"MemberPlan({name}, {'segmented' if self.reason is None else self.reason})"


class MemberTrace:
    """What a :meth:`DiffeqProblem.solve` called while the engine traces a member answers.

    ``mode`` is ``"search"`` (count the solves while the member is traced as a plain
    program; answer with a placeholder), ``"problem"`` (record the problem, answer with a
    placeholder) or ``"outputs"`` (answer with the solution of the finished solve in
    ``state``). Only a solve called at the member's top level (the trace the engine started,
    not inside a ``vmap``, ``grad``, ``scan``, ``cond`` or ``jit`` of the member's own) is the
    engine's; any other is solved by ``diffeqsolve`` as written, and the plan records why the
    member is not segmented."""

    def __init__(self, plan: MemberPlan, mode: str, state: SharedState | None = None):
        self.plan, self.mode, self.state = plan, mode, state
        self.trace_state = jax.extend.core.get_opaque_trace_state()
        self.calls = 0
        self.nested = 0
        self.arrays: PyTree = None

    def at_top_level(self) -> bool:
        return jax.extend.core.get_opaque_trace_state() == self.trace_state

    def solve(self, problem: DiffeqProblem, shared) -> diffrax.Solution | None:
        """The answer to ``problem.solve(shared=shared)``, or ``None`` when this solve is not
        the engine's (``diffeqsolve`` then solves it)."""
        if not self.at_top_level():
            self.nested += 1
            return None
        self.calls += 1
        if self.calls > 1:
            return None
        solved, restrict = (problem, None) if shared is None else shared()
        arrays, static = eqx.partition(solved, eqx.is_array)
        if self.mode == "search":
            state = SharedState(arrays, start_state(solved))  # a placeholder of the right type
        elif self.mode == "problem":
            self.arrays = arrays
            if any(_holds_tracer(x) for x in jtu.tree_leaves(static)):
                self.plan.reason = (
                    "its DiffeqProblem holds a traced value outside its array leaves (a "
                    "closure over the member's parameters: pass them as args or as fields)"
                )
            self.plan.structure = ProblemStructure(solved)
            state = SharedState(arrays, start_state(solved))  # a placeholder of the right type
        else:
            state = self.state
        solution = solution_of(eqx.combine(state.problem, static), state.solve)
        return solution if restrict is None else restrict(solution)


_CURRENT: contextvars.ContextVar[MemberTrace | None] = contextvars.ContextVar(
    "jaxdyn_sweep_member_trace", default=None
)


def in_sweep() -> bool:
    """Whether a :meth:`DiffeqProblem.solve` called now goes to the sweep engine (it is
    tracing a plain member). A simulator that would otherwise solve inside a jitted function
    of its own calls ``solve()`` directly then (a jitted function's body is not traced again
    on a cache hit, so the engine would not see the solve)."""
    return _CURRENT.get() is not None


def _with_trace(fn, params, key, trace: MemberTrace):
    token = _CURRENT.set(trace)
    try:
        return fn(params, key)
    finally:
        _CURRENT.reset(token)


def plan_member(fn: Callable, params: dict, seed, width: int = 1) -> MemberPlan:
    """The engine's decision for ``fn`` (a plain member function), given one member's
    ``params`` and ``seed``.

    The member is first traced as the plain sweep runs it, one vmapped group of ``width``
    members (:func:`~jaxdyn.sweep._programs.member_group`), with a ``"search"`` trace
    current. A member that calls no ``solve()`` at its top level (most members) is then
    decided, and its plain programs reuse this trace from jit's cache: it is traced once. A
    member that does is traced once more, alone (:func:`member_problem`), to decide whether
    its solve can be continued in segments; its searched trace answered that solve with a
    placeholder, so its plain programs, if it needs them, get a :class:`PlainMember` of their
    own."""
    plan = MemberPlan(fn)
    search = MemberTrace(plan, "search")
    group = lambda x: jax.ShapeDtypeStruct((width,) + np.shape(x), np.asarray(x).dtype)
    _with_trace(
        lambda p, s: member_group.trace(plan.program, p, s),
        jax.tree.map(group, params),
        group(seed),
        search,
    )
    if search.calls == 0:
        plan.reason = _why_not(search)
        return plan
    plan.program = PlainMember(fn)
    member_problem.trace(plan, params, jax.random.key(seed))
    return plan


@functools.partial(jax.jit, static_argnums=0)
def member_problem(plan: MemberPlan, params, key):
    """The array leaves of the problem one member solves (the member traced once)."""
    trace = MemberTrace(plan, "problem")
    _with_trace(plan.fn, params, key, trace)
    if plan.reason is None:
        plan.reason = _why_not(trace)
    return trace.arrays


@functools.partial(jax.jit, static_argnums=0)
def member_outputs(plan: MemberPlan, params, key, state: SharedState):
    """One member's outputs from its finished solve (the member traced once more)."""
    trace = MemberTrace(plan, "outputs", state)
    out = _with_trace(plan.fn, params, key, trace)
    if trace.calls != 1 or trace.nested:
        raise RuntimeError(
            f"sweep member {plan.fn!r} solved differently when traced again ({_why_not(trace)})"
        )
    return out


def _why_not(trace: MemberTrace) -> str | None:
    if trace.nested:
        return (
            "its DiffeqProblem.solve() runs inside a transformation of its own (vmap, grad, "
            "scan, cond or jit)"
        )
    if trace.calls == 0:
        return "it calls no DiffeqProblem.solve() (the library's simulators do)"
    if trace.calls > 1:
        return f"it calls DiffeqProblem.solve() {trace.calls} times (the engine continues one)"
    return None


class SolveMember(AbstractSegmentedMember):
    """A plain member function whose one :meth:`DiffeqProblem.solve` the engine continues in
    segments (``plan``: its :class:`MemberPlan`, segmented). ``init`` and ``finish`` call the
    two jitted traces of the member (:func:`member_problem`, :func:`member_outputs`);
    ``advance`` continues the solve from its state alone."""

    plan: MemberPlan = eqx.field(static=True)

    def init(self, params, key, max_steps):
        arrays = member_problem(self.plan, params, key)
        if max_steps == 0:
            return start_shared(self.plan.structure, arrays)
        problem = self.plan.structure.problem(arrays)
        return SharedState(arrays, first_segment(problem, max_steps))

    def advance(self, params, key, state, max_steps):
        return advance_shared(self.plan.structure, state, max_steps)

    def problem_arrays(self, params, key):
        """The array leaves of the member's problem (the start of its solve)."""
        return member_problem(self.plan, params, key)

    def done(self, state):
        return state.solve.done

    def finish(self, params, key, state):
        return member_outputs(self.plan, params, key, state)


def shared_structure(member) -> ProblemStructure | None:
    """The structure of the problem a :class:`SolveMember` solves (``None`` for any other
    member: its segments are compiled for the member itself)."""
    return member.plan.structure if isinstance(member, SolveMember) else None
