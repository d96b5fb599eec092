"""The default end time of a focus-and-dilution flow, from its rates, and its save times.

Each unstable mode must grow from the initialisation scale ``eps`` to order one, which takes
``log(1/eps) / rate``, so the default end time is

    t1 = margin * log(1/eps) * (1/mu1 + 1/|c| + 1/lambda_T),

with ``margin = 2`` (``mu1`` the condensation rate, ``c`` the signed focus rate, ``lambda_T``
the transverse rate of a new embedding direction); a term whose rate is not positive (``c = 0``,
or no unstable transverse mode) is left out.
"""

from __future__ import annotations

import jax.numpy as jnp

from .._custom_types import Array, ArrayLike, Float, Scalar

END_TIME_MARGIN = 2.0


def default_end_time(
    eps: Float[ArrayLike, ""],
    condensation: Float[ArrayLike, ""],
    focus: Float[ArrayLike, ""],
    transverse: Float[ArrayLike, ""] = jnp.nan,
    *,
    margin: float = END_TIME_MARGIN,
) -> Scalar:
    """``margin * log(1/eps) * (1/mu1 + 1/|c| + 1/lambda_T)``, leaving out a term whose rate
    is not positive and finite (module docstring)."""

    def inverse(rate):
        rate = jnp.asarray(rate)
        ok = jnp.isfinite(rate) & (rate > 0)
        return jnp.where(ok, 1.0 / jnp.where(ok, rate, 1.0), 0.0)

    total = inverse(condensation) + inverse(jnp.abs(focus)) + inverse(transverse)
    return margin * jnp.log(1.0 / jnp.asarray(eps)) * total


def log_save_times(t1: Float[ArrayLike, ""], num: int) -> Float[Array, " num"]:
    """``0``, then ``num - 1`` log-spaced times from ``min(0.05, t1 / 100)`` to ``t1`` (``t1``
    may be traced; :func:`log_time_grid` is the host-side grid)."""
    t1 = jnp.asarray(t1)
    t_first = jnp.minimum(0.05, 0.01 * t1)
    return jnp.concatenate([jnp.zeros(1, t1.dtype), jnp.geomspace(t_first, t1, num - 1)])
