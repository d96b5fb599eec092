"""Where a segmented diffrax solve stands between segments, and how one segment moves it on.

The saves of a continued segment go into the slots the uninterrupted solve would fill: its
requested times from the segment's start on, its ``t1`` save at the end; slots of earlier
times keep the earlier segments' values.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Int, PyTree, Real

from ._continuation import TrackedState


def subsaves(saveat: diffrax.SaveAt) -> list[diffrax.SubSaveAt]:
    """The ``SubSaveAt`` leaves of a ``SaveAt``, in order."""
    return jtu.tree_leaves(saveat.subs, is_leaf=lambda s: isinstance(s, diffrax.SubSaveAt))


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


def direction_of(problem):
    return jnp.where(problem.t0 < problem.t1, 1, -1)


def segment_saveat(subs: list[diffrax.SubSaveAt], t_start, direction) -> diffrax.SaveAt:
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


def after_segment(problem, subs, sol, previous: DiffeqState | None, direction) -> DiffeqState:
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
        result=jnp.asarray(result._value, jnp.int32),
        saved=saved,
        event_mask=event_mask,
        done=done,
        **{k: jnp.asarray(v, jnp.int32) for k, v in steps.items()},
    )
