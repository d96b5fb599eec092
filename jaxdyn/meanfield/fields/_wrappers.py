"""Wrappers that turn any velocity field into another (transformer_pde.md, "The model"):
causal masking with an optional attention sink, switching fields over depth, and projection on
the sphere. Each takes any :class:`jaxdyn.meanfield.fields.AbstractVelocityField`, a user's
included.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxdyn._validation import require_in_interval

from ._base import AbstractCausalField, AbstractGaussianClosed, AbstractVelocityField

# Last axes of at most this many numbers: row dot products are written out (row_dots).
UNROLLED_ROW_DOT = 16


def row_dots(a: Float[Array, "... d"], b: Float[Array, "... d"]) -> Float[Array, "... 1"]:
    """``sum_k a[..., k] b[..., k]``, the last axis kept with size 1.

    For a last axis of at most ``UNROLLED_ROW_DOT`` numbers the products and sums are written
    out. XLA:CPU then fuses them into the elementwise code that uses them, where ``jnp.sum``
    over the axis runs as a reduction kernel of its own, slow for a handful of numbers per row
    (sweeps of many small particle systems, e.g. :class:`SphereSoftmax` at d = 8;
    ``benchmarks/probe_beta_sweep_kernel.py`` times both forms). Same sum, summed in order.
    """
    d = a.shape[-1]
    if d > UNROLLED_ROW_DOT:
        return jnp.sum(a * b, axis=-1, keepdims=True)
    out = a[..., :1] * b[..., :1]
    for k in range(1, d):
        out = out + a[..., k : k + 1] * b[..., k : k + 1]
    return out


def tangent_projection(v: Float[Array, "n d"], x: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """``(I - x x^T / |x|^2) v`` row by row: ``v`` projected on the tangent space of the sphere
    through each ``x``."""
    return v - (row_dots(v, x) / row_dots(x, x)) * x


def prefix_causal_velocity(
    field: AbstractVelocityField,
    x: Float[Array, "m d"],
    tokens: Float[Array, "n d"],
    query_positions: Float[Array, " m"],
    key_positions: Float[Array, " n"],
    *,
    t: Float[ArrayLike, ""] = 0.0,
) -> Float[Array, "m d"]:
    """``Gamma_{mu_s}(x)`` for any field: ``mu_s`` is the empirical measure of the tokens at
    positions ``s' <= s`` (the query's), zero when no token is visible.

    Sorted by position, the tokens visible to a query are a prefix; the field is evaluated on
    each of the ``n`` prefixes and every query keeps the one it sees. This costs ``n`` field
    evaluations (and traces ``n`` shapes), so fields that can mask directly implement
    :class:`jaxdyn.meanfield.AbstractCausalField` instead; this is their reference.
    """
    order = jnp.argsort(key_positions, stable=True)
    sorted_tokens = tokens[order]
    visible = jnp.searchsorted(key_positions[order], query_positions, side="right")
    out = jnp.zeros_like(x)
    for k in range(1, tokens.shape[0] + 1):
        v_k = field.velocity(x, sorted_tokens[:k], t=t)
        out = jnp.where((visible == k)[:, None], v_k, out)
    return out


class Masked(AbstractVelocityField):
    """Causal attention: the token at position ``s_i`` in [0, 1] moves with the field of the
    tokens at positions ``s_j <= s_i`` only (transformer_pde.md, "masked"); positions never move.

    The base field is evaluated on the conditional measure of the visible tokens: for softmax
    and L2 that is the softmax over visible tokens, for sigmoid and linear the sum over visible
    tokens divided by their number. Any field works: built-in fields mask directly
    (:class:`jaxdyn.meanfield.AbstractCausalField`), others through
    :func:`jaxdyn.meanfield.prefix_causal_velocity`. With ``sink=True``, token 0 is an attention
    sink: its position is set to 0, so every token sees it (the atom at position 0 of the
    paper's well-posedness result).

    Attributes:
        base: the velocity field that is masked.
        positions: position ``s_i`` of each token, in [0, 1] (``(n,)``; may be traced).
        sink: whether token 0 is an attention sink at position 0.
    """

    base: AbstractVelocityField
    positions: Float[Array, " n"]
    sink: bool = eqx.field(static=True)

    def __init__(
        self, base: AbstractVelocityField, positions: Float[ArrayLike, " n"], sink: bool = False
    ):
        if not isinstance(base, AbstractVelocityField):
            raise TypeError(
                f"Masked: base must be an AbstractVelocityField, got {type(base).__name__}"
            )
        positions = jnp.asarray(positions)
        if positions.ndim != 1:
            raise ValueError(f"Masked: positions must be (n,), got shape {positions.shape}")
        self.base = base
        # traced positions (inside a sweep) are checked at run time by eqx.error_if
        self.positions = require_in_interval("Masked: positions", positions, 0.0, 1.0)
        self.sink = bool(sink)

    @property
    def key_positions(self) -> Float[Array, " n"]:
        """Positions used for masking (token 0 moved to 0 when ``sink``)."""
        return self.positions.at[0].set(0.0) if self.sink else self.positions

    def velocity_at_positions(
        self,
        x: Float[Array, "m d"],
        query_positions: Float[Array, " m"],
        tokens: Float[Array, "n d"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
    ) -> Float[Array, "m d"]:
        """Velocity of queries ``x`` placed at ``query_positions`` (not necessarily tokens)."""
        n = tokens.shape[0]
        if n != self.positions.shape[0]:
            raise ValueError(f"Masked: {n} tokens but {self.positions.shape[0]} positions")
        if query_positions.shape != (x.shape[0],):
            raise ValueError(
                f"Masked: query_positions must be ({x.shape[0]},), got {query_positions.shape}"
            )
        kpos = self.key_positions
        if isinstance(self.base, AbstractCausalField):
            return self.base.causal_velocity(x, tokens, query_positions, kpos, t=t)
        return prefix_causal_velocity(self.base, x, tokens, query_positions, kpos, t=t)

    def velocity(self, x, tokens, *, t=0.0):
        if x.shape[0] != tokens.shape[0]:
            raise ValueError(
                f"Masked: queries are the tokens themselves, so x needs {tokens.shape[0]} rows, "
                f"got {x.shape[0]} (use velocity_at_positions for other queries)"
            )
        return self.velocity_at_positions(x, self.key_positions, tokens, t=t)


class AbstractTimeSwitch(AbstractVelocityField):
    """``Gamma(t) = fields[i]`` for ``breaks[i-1] <= t < breaks[i]``: a stack of layers with
    different weights, depth as time. ``fields`` has one more entry than ``breaks``.
    """

    fields: eqx.AbstractVar[tuple[AbstractVelocityField, ...]]
    breaks: eqx.AbstractVar[Float[Array, " b"]]

    def __check_init__(self):
        name = type(self).__name__
        if self.breaks.ndim != 1:
            raise ValueError(f"{name}: breaks must be one-dimensional, got {self.breaks.shape}")
        if len(self.fields) != self.breaks.shape[0] + 1:
            raise ValueError(
                f"{name}: needs len(breaks) + 1 = {self.breaks.shape[0] + 1} fields, "
                f"got {len(self.fields)}"
            )
        bad = [type(f).__name__ for f in self.fields if not isinstance(f, AbstractVelocityField)]
        if bad:
            raise TypeError(f"{name}: fields must be velocity fields, got {bad}")

    def active(self, t: Float[ArrayLike, ""]) -> Int[Array, ""]:
        """Index of the field in force at time ``t``."""
        return jnp.searchsorted(self.breaks, jnp.asarray(t), side="right")

    def velocity(self, x, tokens, *, t=0.0):
        branches = [lambda x, y, t, f=f: f.velocity(x, y, t=t) for f in self.fields]
        return jax.lax.switch(self.active(t), branches, x, tokens, t)


class TimeSwitch(AbstractTimeSwitch):
    """Switches between velocity fields over depth (see :class:`AbstractTimeSwitch`).

    When every field is Gaussian-closed, the switch is too: ``TimeSwitch(fields, breaks)`` then
    returns a Gaussian-closed ``TimeSwitch`` (``(B, c)`` of the field in force), so one
    constructor serves particles and the Gaussian ODE.

    Attributes:
        fields: the field in force on each interval (``len(breaks) + 1`` of them).
        breaks: increasing switching times.
    """

    fields: tuple[AbstractVelocityField, ...] = eqx.field(converter=tuple)
    breaks: Float[Array, " b"] = eqx.field(converter=jnp.asarray)

    def __new__(cls, fields=(), *args, **kwargs):
        fields = kwargs.get("fields", fields)
        if (
            cls is TimeSwitch
            and fields
            and all(isinstance(f, AbstractGaussianClosed) for f in fields)
        ):
            cls = _GaussianTimeSwitch
        return super().__new__(cls)


class _GaussianTimeSwitch(TimeSwitch, AbstractGaussianClosed):
    """A :class:`TimeSwitch` of Gaussian-closed fields; Gaussian-closed itself."""

    def affine_velocity(self, mean, cov, *, t=0.0):
        branches = [lambda m, c, t, f=f: f.affine_velocity(m, c, t=t) for f in self.fields]
        return jax.lax.switch(self.active(t), branches, mean, cov, t)


class SphereProjected(AbstractVelocityField):
    """``Gamma(x) = (I - x x^T / |x|^2) Gamma_base(x)``: the base velocity projected on the
    tangent space of the sphere through ``x``, so tokens on the unit sphere stay there (a layer
    norm; the token-clustering model of Geshkovski et al.).

    The projection keeps ``|x_i|`` constant along the exact flow; numerical drift is
    ``O(dt^4)`` per unit time with :class:`jaxdyn.meanfield.RK4`.

    Attributes:
        base: the velocity field that is projected.
    """

    base: AbstractVelocityField

    def __check_init__(self):
        if not isinstance(self.base, AbstractVelocityField):
            raise TypeError(
                f"SphereProjected: base must be an AbstractVelocityField, "
                f"got {type(self.base).__name__}"
            )

    def velocity(self, x, tokens, *, t=0.0):
        return tangent_projection(self.base.velocity(x, tokens, t=t), x)


class DriftedClosure(AbstractGaussianClosed):
    """A deliberately wrong closure, to measure how sensitive a mean-field check is: particles
    move with ``base.velocity``, the Gaussian ODE uses ``(B, c + drift)``.

    The Gaussian mean then drifts by about ``drift t`` from the particles' mean; a check of
    the mean-field limit that passes for this field cannot detect a closure error of that size.

    Attributes:
        base: the correct Gaussian-closed field.
        drift: the constant added to ``c`` (shape ``(d,)``).
    """

    base: AbstractGaussianClosed
    drift: Float[Array, " d"] = eqx.field(converter=jnp.asarray)

    def velocity(self, x, tokens, *, t=0.0):
        return self.base.velocity(x, tokens, t=t)

    def affine_velocity(self, mean, cov, *, t=0.0):
        B, c = self.base.affine_velocity(mean, cov, t=t)
        return B, c + self.drift
