"""Causal (masked) attention as a conditional structure (transformer_pde.md, "masked").

A token at position ``s`` moves with the field of the conditional measure of the tokens at
positions ``s' <= s``. Two consequences, both measured here:

- conditional structure: the tokens at positions up to ``s`` form a closed system, so a
  prefix simulated alone follows exactly the trajectories it has inside the whole sequence,
  and a later token never influences an earlier one;
- stability with an attention sink: with an atom of mass ``omega`` at position 0, every
  conditional measure has mass at least ``omega``, so one token of mass ``1/n`` moves any
  conditional measure by ``O(1/(omega n))`` [derived]: the influence of each earlier token on
  the later ones vanishes as ``n`` grows. Without a sink the first tokens see only a few
  tokens, and the influence of token 0 on token 1 stays of order one for every ``n``.
"""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Int

from jaxdyn._validation import require_in_interval

from ._particles import RK4
from ._simulate_particles import simulate_particles
from .fields._wrappers import Masked


def sink_positions(
    n: int | Int[ArrayLike, ""],
    sink_mass: float | Float[ArrayLike, ""],
    key: jax.Array,
    *,
    length: int | None = None,
) -> Float[Array, " length"]:
    """Positions of ``n`` tokens: the first ``ceil(sink_mass n)`` at 0 (an attention sink of
    mass ``sink_mass``, which may be traced), the others sorted uniform draws on ``(0, 1)``.

    With ``length >= n`` the positions are padded to ``length`` tokens at position 1, after
    every real draw (which lies in ``(0, 1)``): under causal masking they never move the first
    ``n``, so
    sequences of every ``n`` (which may then be traced) share one shape and one compiled
    program.
    """
    size = n if length is None else length
    if length is None and int(n) < 1:
        raise ValueError(f"sink_positions: n must be >= 1, got {n}")
    if length is not None and length < 1:
        raise ValueError(f"sink_positions: length must be >= 1, got {length}")
    sink_mass = require_in_interval("sink_positions: sink_mass", sink_mass, 0.0, 1.0, closed="left")
    index = jnp.arange(size)
    real = index < n
    u = jax.random.uniform(key, (size,), minval=1e-6, maxval=1.0)
    s = jnp.sort(jnp.where(real, u, 2.0))  # the n real draws first, in order
    positions = jnp.where(index < jnp.ceil(jnp.asarray(sink_mass) * n), 0.0, s)
    return jnp.where(real, positions, 1.0)


def causal_influence(
    field: Masked, x0: Float[ArrayLike, "n d"], t1: Float[ArrayLike, ""], steps: int
) -> Float[Array, "n n"]:
    """``I[j, i] = |d x_j(t1) / d x_i(0)|_2``: how much token ``i``'s initial position moves
    token ``j`` at depth ``t1`` (forward-mode derivative through ``steps`` RK4 steps).

    ``I[j, i]`` is exactly zero whenever token ``i`` comes after token ``j``.
    """
    x0 = jnp.asarray(x0)

    def flow(x):
        return simulate_particles(
            field,
            x,
            t1,
            dt0=t1 / steps,
            solver=RK4(),
            stepsize_controller=diffrax.ConstantStepSize(),
            blowup_norm=None,
            # forward mode (jax.jacfwd below): diffrax's default adjoint is reverse-only, and
            # a traced end time (under jit) takes the diffeqsolve path
            adjoint=diffrax.ForwardMode(),
        ).final_x

    J = jax.jacfwd(flow)(x0)  # (n, d, n, d)
    return jnp.linalg.norm(jnp.moveaxis(J, 2, 1), ord=2, axis=(2, 3))
