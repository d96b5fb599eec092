"""Continuing a diffrax solve exactly where it stopped: a transparent step-size controller.

``diffrax.diffeqsolve`` can be continued from a saved ``solver_state``, ``controller_state``
and ``made_jump`` (``SaveAt(solver_state=True, ...)``), but the loop's own position is not
saved: the time it reached, the end of the step it would take next, and the state it holds
(after an event elsewhere in a vmapped batch, diffrax's ``SaveAt(t1=True)`` value of a member
without an event is an interpolation, not the state itself). The :func:`tracked` controller
runs the user's controller unchanged and records those three in its own state, with the
loop's book-keeping of diffrax 0.7 (``tprev = min(tprev, t1)`` and the clip of ``tnext`` to
``t1`` within 100 ULP, ``diffrax/_integrate.py``). It also stops the loop after a given total
number of steps, so that a solve cut into segments honours the problem's ``max_steps``.

A continuation restarts with ``t0 = tprev`` and ``dt0`` such that ``t0 + dt0`` rounds to
exactly the recorded ``tnext`` (:func:`step_to`), which is how diffrax computes the first
step end of a solve given a ``controller_state``. Segmented and uninterrupted solves then take
bitwise the same steps (tests/test_sweep_segmented.py).
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Int, PyTree, Real

_NO_LIMIT = 2**31 - 1


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


def _clip_floor(t1):
    """``t1`` minus 100 ULP, as diffrax computes its ``t1_clip_floor``."""
    for _ in range(100):
        t1 = eqxi.prevbefore(t1)
    return t1


def _clip_to_end(tprev, tnext, t1, t1_floor, keep_step):
    """diffrax 0.7 ``_integrate._clip_to_end``: a ``tnext`` within 100 ULP of ``t1`` is ``t1``."""
    clip = tnext > t1_floor
    tclip = jnp.where(keep_step, t1, tprev + 0.5 * (t1 - tprev))
    return jnp.where(clip, tclip, tnext)


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
            (self.controller.wrap(direction), end, _clip_floor(end)),
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
        loop_tnext = _clip_to_end(loop_tprev, tnext, end, self.end_floor, keep)
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


def controller_never_jumps(controller, terms, t0, t1, y0, dt0, args, solver) -> bool:
    """Whether ``controller`` returns a static ``made_jump=False`` (no ``jump_ts``).

    diffrax then resolves ``made_jump`` at trace time; passing a traced ``False`` instead
    would make FSAL solvers carry a select of the first stage in every step.
    """
    wrapped = controller.wrap(jnp.asarray(1))
    order = solver.error_order(terms)

    def probe(y):
        _, state = wrapped.init(terms, t0, t1, y, dt0, args, solver.func, order)
        return wrapped.adapt_step_size(t0, t1, y, y, args, y, order, state)[3]

    try:
        made_jump = eqx.filter_eval_shape(probe, y0)
    except Exception:  # an unusual controller: keep the traced flag (correct, a bit slower)
        return False
    return made_jump is False
