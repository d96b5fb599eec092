"""Solver pieces shared by the particle and Gaussian simulators: step-size control, input
checks, and the event root finder that works inside sharded sweeps."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import ArrayLike, Float

from jaxdyn._validation import is_traced, require_psd

from .fields._base import AbstractGaussianClosed


def _controller(
    adaptive: bool, rtol: Float[ArrayLike, ""], atol: Float[ArrayLike, ""], dt0, t0, t1, name: str
):
    """The step-size controller: PID with ``rtol``/``atol`` (traced in a sweep, so one
    compilation serves every tolerance), or constant steps of ``dt0``."""
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


def _check_gaussian_inputs(name: str, field, mean0, cov0):
    """One-line errors for a field that is not Gaussian-closed, wrong shapes or a concrete
    ``cov0`` that is not symmetric PSD; returns ``mean0, cov0`` as arrays."""
    if not isinstance(field, AbstractGaussianClosed):
        raise TypeError(f"{name}: {type(field).__name__} is not Gaussian-closed")
    mean0, cov0 = jnp.asarray(mean0), jnp.asarray(cov0)
    d = mean0.shape[-1] if mean0.ndim else 0
    if mean0.shape != (d,) or cov0.shape != (d, d):
        raise ValueError(
            f"{name}: mean0 must be (d,) and cov0 (d, d), got {mean0.shape}, {cov0.shape}"
        )
    if not is_traced(cov0):
        require_psd(f"{name}: cov0", cov0, rtol=1e-10)
    return mean0, cov0


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


def check_events(name: str, events, signature: str, reserved: tuple[str, ...] = ()) -> dict:
    """The user events as a dict of callables; a one-line error for a non-callable condition or
    a name a built-in event uses."""
    events = dict(events or {})
    for key, condition in events.items():
        if not isinstance(key, str) or not callable(condition):
            raise TypeError(f"{name}: event {key!r} must be a callable {signature} -> real")
        if key in reserved:
            raise ValueError(f"{name}: the event name {key!r} is reserved for a built-in event")
    return events


def requested_and_final_saveat(ts, save_fn, dtype) -> diffrax.SaveAt:
    """Saves of the simulators: ``save_fn(t, y)`` (default the state) at ``ts`` (default ``t1``
    only), and the final state as a second sub-save (diffrax fills requested saves after an
    event with ``inf``; the final state is at the event time)."""
    fn = (lambda t, x, args: x) if save_fn is None else (lambda t, x, args: save_fn(t, x))
    requested = (
        diffrax.SubSaveAt(t1=True, fn=fn)
        if ts is None
        else diffrax.SubSaveAt(ts=jnp.asarray(ts, dtype), fn=fn)
    )
    return diffrax.SaveAt(subs=[requested, diffrax.SubSaveAt(t1=True)])
