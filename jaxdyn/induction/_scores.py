"""Attention order parameters of the induction circuit (induction.md, "Order parameters").

- previous-token score: the mean attention of position ``t`` on ``t - 1`` (``t >= 1``), the
  causal analogue of the copy head's copy weight ``c_G`` (its attention pattern is the shift
  ``S`` with ones at ``(t, t - 1)``; copy_head.md, "Order parameters");
- induction score: the attention of position ``t`` on the positions ``s + 1`` that follow an
  earlier occurrence ``x_s = x_t`` (``s < t``), averaged over the positions that have one. Uniform
  causal attention scores the fraction of such positions (about ``1/k``); a perfect induction
  head scores 1.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float, Int


def previous_token_score(patterns: Float[Array, "*batch T T"]) -> Float[Array, " *batch"]:
    """Mean over ``t = 1..T-1`` of ``A[t, t-1]``."""
    sub = jnp.diagonal(patterns, offset=-1, axis1=-2, axis2=-1)
    return sub.mean(-1)


def induction_score(
    patterns: Float[Array, "*layers T T"], tokens: Int[Array, " T"]
) -> Float[Array, " *layers"]:
    """Mean over positions ``t`` with an earlier occurrence of ``x_t`` of the attention mass
    on ``{s + 1 : s < t, x_s = x_t}``."""
    T = tokens.shape[0]
    same = tokens[:, None] == tokens[None, :]  # same[t, s]: x_s = x_t
    earlier = jnp.tril(jnp.ones((T, T), bool), k=-1)  # s < t
    match = same & earlier
    # target[t, u] = match[t, u - 1]: position u = s + 1 follows a match s
    target = jnp.concatenate([jnp.zeros((T, 1), bool), match[:, :-1]], axis=1)
    mass = (patterns * target).sum(-1)  # (*layers, T)
    has = target.any(-1)
    return (mass * has).sum(-1) / jnp.maximum(has.sum(), 1)
