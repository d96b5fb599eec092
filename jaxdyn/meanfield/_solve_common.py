"""Solver pieces shared by the particle and Gaussian simulators: step-size control, time
checks, and the event root finder that works inside sharded sweeps."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import optimistix as optx


def _controller(adaptive: bool, rtol: float, atol: float, dt0, t0, t1, name: str):
    if adaptive:
        return diffrax.PIDController(rtol=rtol, atol=atol), dt0
    if dt0 is None:
        raise ValueError(f"{name}: adaptive=False needs a fixed step dt0")
    return diffrax.ConstantStepSize(), dt0


def _check_times(name, t1, ts, dt0):
    for label, value in (("t1", t1), ("dt0", dt0)):
        if value is None:
            continue
        try:
            v = float(value)
        except (TypeError, jax.errors.ConcretizationTypeError):
            continue  # traced inside a sweep: validated by the experiment config
        if not v > 0:
            raise ValueError(f"{name}: {label} must be positive, got {v}")


class _UpcrossingBisection(optx.AbstractRootFinder):
    """Bisection for an event condition that changes sign on ``[lower, upper]``.

    diffrax brackets the crossing by the step that triggered the event. Unlike
    ``optx.Bisection`` this never raises when round-off makes the bracket look empty (it
    then returns ``upper``, the end of the step), stops on the interval width alone (an event
    function near a blow-up is too steep for a tolerance on its value), and needs no linear
    solve, so it runs inside ``jaxdyn.sweep``'s ``shard_map`` where optimistix's Newton fails.

    The direction of the crossing is read off the sign at ``lower``: under ``vmap`` diffrax
    runs the root finder for every member, and for members *without* an event it finds the
    end of the step as the root of the decreasing ``t_next - t``. A bisection that assumed an
    upward crossing returned ``lower`` for those members, so they stopped one step short of
    ``t1`` whenever another member of the batch hit an event.
    """

    rtol: float
    atol: float
    norm = staticmethod(jnp.abs)

    def init(self, fn, y, args, options, f_struct, aux_struct, tags):
        lower = jnp.asarray(options["lower"], f_struct.dtype)
        upper = jnp.asarray(options["upper"], f_struct.dtype)
        f_lower, _ = fn(lower, args)
        return (lower, upper, f_lower < 0)

    def step(self, fn, y, args, options, state, tags):
        lower, upper, lower_negative = state
        mid = lower + 0.5 * (upper - lower)
        value, aux = fn(mid, args)
        same_side_as_lower = (value < 0) == lower_negative
        lower = jnp.where(same_side_as_lower, mid, lower)
        upper = jnp.where(same_side_as_lower, upper, mid)
        return upper, (lower, upper, lower_negative), aux

    def terminate(self, fn, y, args, options, state, tags):
        lower, upper = state[0], state[1]
        done = (upper - lower) <= self.atol + self.rtol * jnp.abs(upper)
        return done, optx.RESULTS.successful

    def postprocess(self, fn, y, aux, args, options, state, tags, result):
        return state[1], aux, {}


def _root_finder():
    return _UpcrossingBisection(rtol=1e-14, atol=1e-14)
