"""Stage times of a trajectory, each with the measurement that defines it (focus_dilution.md,
"Stages"), for any chain.

Each stage is the first crossing of a level by one measured curve, searched only after the
previous stage (a crossing is a pair of consecutive saves on either side of the level; its time
is linearly interpolated between them):

- ``condensation``: the loss crosses ``(log d + H(pi)) / 2``, midway from its start ``log d``
  to the unigram plateau ``H(pi)``;
- ``departure``: attention leaves uniform: ``f = sum_q pi_q w_{q,top}``, the attention the
  most frequent token receives (``pi_top`` under uniform attention), has moved by the fraction
  ``departure`` of its room, up to ``pi_top + departure (1 - pi_top)`` or down to
  ``(1 - departure) pi_top``; ``departure_sign`` is ``+1`` when attention moves onto that token
  (focus, predicted for ``c > 0``) and ``-1`` when it moves off it (``c < 0``);
- ``focus``: the attention moves onto the frequent token, ``f >= pi_top + departure
  (1 - pi_top)`` (the departure itself when ``c > 0``; later, if ever, when attention first
  moves off it);
- ``dilution``: the attention entropy of the other queries (pi-weighted), which the focus
  first lowers, rises back above ``H(pi)``, its value under uniform attention;
- ``new_direction``: ``sigma_2(W0) / sigma_1(W0)`` crosses ``new_direction_ratio`` (a second
  embedding direction grows).

Beside these sequential stages, each stage's own *signature* is searched on its own, from
``t = 0`` and independently of the other stages (``signatures``): the focus signature (the
frequent token's attention up by the fraction ``departure`` of its room), the dilution signature
(the low-query entropy back up through ``H(pi)`` after it first fell below ``(1 -
ENTROPY_FALL) H(pi)``) and the new direction's (``sigma_2 / sigma_1`` up through
``new_direction_ratio``; it
starts near one for a random initialisation, so its first upward crossing comes after the
condensation made ``W0`` rank one). Their order is a measurement, not a definition.

The low-query entropy's course is summarised by ``entropy_dip`` (its minimum between
condensation and dilution), ``entropy_peak`` (its maximum from dilution to the new direction)
and ``entropy_after_peak`` (its minimum after the peak): the down-up-down of the paper.
Everything is JAX (jit- and vmap-able); a stage not reached is ``nan``.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Bool, Float, Int, Scalar
from .._numerics import entropy
from .._validation import require_in_interval

STAGE_NAMES = ("condensation", "focus", "dilution", "new_direction")
# the dilution signature starts once the low-query entropy has fallen this fraction below H(pi)
# (far above the solver's error, below the focus's dip on the chains tried) [open]
ENTROPY_FALL = 0.01


class StageEvidence(AbstractResult):
    """When one stage was reached and the measurement that says so.

    Attributes:
        time: the crossing time (``nan`` if the level is not crossed after the previous stage).
        level: the level whose crossing defines the stage.
        start: the measured quantity at the start of the search (the previous stage's time).
        value: the quantity at the first save past the level.
    """

    time: Scalar
    level: Scalar
    start: Scalar
    value: Scalar


@eqx.filter_jit
def first_crossing(
    ts: Float[ArrayLike, " T"],
    y: Float[ArrayLike, " T"],
    level: Float[ArrayLike, ""],
    t_min: Float[ArrayLike, ""],
    *,
    upward: bool,
) -> StageEvidence:
    """First crossing of ``level`` by ``y(ts)`` between consecutive saves after ``t_min``
    (upward: from below to at-or-above; downward: from above to at-or-below; the save past the
    level comes after ``t_min``), with the time linearly interpolated between the two saves, so
    it may precede ``t_min`` when both crossings fall between the same saves (``nan`` if none,
    or if ``t_min`` is ``nan``)."""
    ts = jnp.asarray(ts)
    y = jnp.asarray(y)
    level = jnp.asarray(level, y.dtype)
    beyond = (y >= level) if upward else (y <= level)
    before = jnp.concatenate([jnp.zeros(1, bool), beyond[:-1]])
    hit = beyond & ~before & (ts > t_min) & jnp.isfinite(y)
    i = jnp.argmax(hit)
    found = jnp.any(hit)
    j = jnp.maximum(i - 1, 0)
    frac = jnp.where(y[i] == y[j], 1.0, (level - y[j]) / (y[i] - y[j]))
    t = jnp.where(i > 0, ts[j] + jnp.clip(frac, 0.0, 1.0) * (ts[i] - ts[j]), ts[i])
    k = jnp.argmax(ts >= t_min)
    nan = jnp.full((), jnp.nan, y.dtype)
    return StageEvidence(
        time=jnp.where(found, t, nan),
        level=level,
        start=jnp.where(jnp.isfinite(t_min), y[k], nan),
        value=jnp.where(found, y[i], nan),
    )


class Stages(AbstractResult):
    """The stages of one trajectory (module docstring), each a :class:`StageEvidence`.

    Attributes:
        condensation, departure, focus, dilution, new_direction: the stages.
        departure_sign: ``+1`` attention first moves onto the most frequent token, ``-1`` off
            it, ``0`` it never departs from uniform.
        entropy_dip, entropy_peak, entropy_after_peak: the low-query attention entropy's
            minimum before dilution, maximum after it, and minimum after that maximum.
        uniform_entropy: ``H(pi)``, every query's attention entropy under uniform attention.
    """

    condensation: StageEvidence
    departure: StageEvidence
    departure_sign: Int[Array, ""]
    focus: StageEvidence
    dilution: StageEvidence
    new_direction: StageEvidence
    entropy_dip: Scalar
    entropy_peak: Scalar
    entropy_after_peak: Scalar
    uniform_entropy: Scalar
    focus_signature: StageEvidence
    dilution_signature: StageEvidence
    new_direction_signature: StageEvidence

    def signature_times(self) -> dict[str, float]:
        """Host-side ``{stage: first crossing of its own signature}`` (module docstring)."""
        return {
            "condensation": float(self.condensation.time),
            "focus": float(self.focus_signature.time),
            "dilution": float(self.dilution_signature.time),
            "new_direction": float(self.new_direction_signature.time),
        }

    def status(self) -> dict[str, str]:
        """Host-side ``{stage: "reached" | "not crossed" | "not searched"}`` of the sequential
        stages: "not searched" when the stage it is searched after was not reached."""
        after = {
            "condensation": None,
            "departure": "condensation",
            "focus": "condensation",
            "dilution": "focus",
            "new_direction": "dilution",
        }
        out = {}
        for name, prev in after.items():
            if np.isfinite(float(getattr(self, name).time)):
                out[name] = "reached"
            elif prev is not None and not np.isfinite(float(getattr(self, prev).time)):
                out[name] = "not searched"
            else:
                out[name] = "not crossed"
        return out

    def in_order(self) -> Bool[Array, ""]:
        """All four stages reached, in the order condensation < focus < dilution < new
        direction (each is searched after the previous one; equal times are not in order)."""
        t = jnp.stack([getattr(self, name).time for name in STAGE_NAMES])
        return jnp.all(jnp.isfinite(t)) & jnp.all(jnp.diff(t) > 0)

    def times(self) -> dict[str, float]:
        """Host-side ``{stage: time}`` (including ``departure``)."""
        names = ("condensation", "departure", "focus", "dilution", "new_direction")
        return {name: float(getattr(self, name).time) for name in names}


def _masked(y, mask, reduce, fill):
    return jnp.where(jnp.any(mask), reduce(jnp.where(mask, y, fill)), jnp.nan)


@eqx.filter_jit
def detect_stages(
    ts: Float[ArrayLike, " T"],
    metrics: dict[str, Array],
    pi: Float[ArrayLike, " d"],
    *,
    departure: float | Float[ArrayLike, ""] = 0.05,
    new_direction_ratio: float | Float[ArrayLike, ""] = 0.1,
) -> Stages:
    """:class:`Stages` from the saved ``metrics`` of :func:`trajectory_metrics` (keys
    ``loss``, ``frequent_weight``, ``entropy_low_queries``, ``sv_W0``). The thresholds are
    modelling choices (focus_dilution.md, "[open]")."""
    departure = require_in_interval("departure", departure, 0.0, 1.0, closed="neither")
    new_direction_ratio = require_in_interval(
        "new_direction_ratio", new_direction_ratio, 0.0, 1.0, closed="neither"
    )
    ts = jnp.asarray(ts)
    pi = jnp.asarray(pi)
    d = pi.shape[0]
    H = entropy(pi)
    top = jnp.max(pi)
    cond = first_crossing(ts, metrics["loss"], 0.5 * (jnp.log(d) + H), -jnp.inf, upward=False)
    excess = metrics["frequent_weight"] - top
    # the move as a fraction of its room: up to 1, down to 0
    moved = jnp.where(excess > 0, excess / (1.0 - top), -excess / top)
    dep = first_crossing(ts, moved, departure, cond.time, upward=True)
    i_dep = jnp.argmax(ts >= dep.time)
    sign = jnp.where(jnp.isfinite(dep.time), jnp.sign(excess[i_dep]), 0).astype(jnp.int32)
    foc = first_crossing(ts, excess / (1.0 - top), departure, cond.time, upward=True)
    h_low = metrics["entropy_low_queries"]
    dil = first_crossing(ts, h_low, H, foc.time, upward=True)
    sv = metrics["sv_W0"]
    ratio = sv[:, 1] / jnp.maximum(sv[:, 0], 1e-300) if sv.shape[1] > 1 else jnp.zeros_like(ts)
    new = first_crossing(ts, ratio, new_direction_ratio, dil.time, upward=True)
    t_stop = jnp.where(jnp.isfinite(new.time), new.time, ts[-1])
    dip = _masked(h_low, (ts >= cond.time) & (ts <= dil.time), jnp.min, jnp.inf)
    after_dil = (ts >= dil.time) & (ts <= t_stop)
    peak = _masked(h_low, after_dil, jnp.max, -jnp.inf)
    t_peak = ts[jnp.argmax(jnp.where(after_dil, h_low, -jnp.inf))]
    after_peak = _masked(h_low, jnp.isfinite(peak) & (ts >= t_peak), jnp.min, jnp.inf)
    # searched after the first save: a curve that starts beyond its level has not crossed it
    t0 = ts[0]
    foc_sig = first_crossing(ts, excess / (1.0 - top), departure, t0, upward=True)
    fell = first_crossing(ts, h_low, (1.0 - ENTROPY_FALL) * H, t0, upward=False)
    dil_sig = first_crossing(ts, h_low, H, fell.time, upward=True)
    new_sig = first_crossing(ts, ratio, new_direction_ratio, t0, upward=True)
    return Stages(
        focus_signature=foc_sig,
        dilution_signature=dil_sig,
        new_direction_signature=new_sig,
        condensation=cond,
        departure=dep,
        departure_sign=sign,
        focus=foc,
        dilution=dil,
        new_direction=new,
        entropy_dip=dip,
        entropy_peak=peak,
        entropy_after_peak=after_peak,
        uniform_entropy=H,
    )


def stage_times(stages: Stages) -> dict[str, np.ndarray]:
    """``{stage: times}`` as NumPy arrays (any leading batch shape, e.g. a vmapped sweep)."""
    names = ("condensation", "departure", "focus", "dilution", "new_direction")
    return {name: np.asarray(getattr(stages, name).time) for name in names}
