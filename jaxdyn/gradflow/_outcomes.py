"""Differentiable outcomes of the population flow (focus_dilution.md: rates and escape times
as functions of ``pi``, ``lam``, ``delta``): the loss at a time ``t`` and the time the loss
first crosses a level, both differentiable through the diffrax solve.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._custom_types import ArrayLike, Float, Scalar
from ._flow import population_flow
from ._markov import MarkovChain
from ._model import OneLayerTransformer, _population_loss


def crossing_time(ts: Float[ArrayLike, " T"], y: Float[ArrayLike, " T"], level) -> Scalar:
    """First downward crossing of ``level`` by the sampled curve ``y(ts)``, linearly
    interpolated between the bracketing samples; differentiable in ``y`` and ``level``
    (``inf`` if never crossed)."""
    ts = jnp.asarray(ts)
    y = jnp.asarray(y)
    below = y <= level
    i = jnp.argmax(below)
    i = jnp.clip(i, 1, ts.shape[0] - 1)
    y0, y1 = y[i - 1], y[i]
    frac = (y0 - level) / (y0 - y1)
    t = ts[i - 1] + frac * (ts[i] - ts[i - 1])
    return jnp.where(jnp.any(below), t, jnp.inf)


def loss_at_time(
    model0: OneLayerTransformer, chain: MarkovChain, t: Float[ArrayLike, ""], **flow_kwargs
) -> Scalar:
    """Population loss ``L(theta(t))`` of the flow on ``chain`` started at ``model0``."""
    ts = jnp.stack([jnp.zeros_like(jnp.asarray(t, float)), jnp.asarray(t, float)])
    sol = population_flow(model0, chain, ts, **flow_kwargs)
    last = jax.tree_util.tree_map(lambda x: x[-1], sol.models)
    return _population_loss(last, chain.pi, chain.P)


def escape_time(
    model0: OneLayerTransformer,
    chain: MarkovChain,
    ts: Float[ArrayLike, " T"],
    level: Float[ArrayLike, ""],
    **flow_kwargs,
) -> Scalar:
    """Time the population loss first falls below ``level`` (e.g. midway between ``log d``
    and ``H(pi)`` for the condensation escape), from the loss sampled on the grid ``ts``
    and interpolated (use a fine grid around the crossing for accuracy)."""
    sol = population_flow(model0, chain, ts, **flow_kwargs)
    losses = jax.vmap(lambda m: _population_loss(m, chain.pi, chain.P))(sol.models)
    return crossing_time(sol.ts, losses, level)
