"""Adam to the joint MAP over (W, G), and local minimisation of the exact action S(G).

copy_head.md, "Validation protocol". Adam minimises the joint energy E(W, G)
(:meth:`CopyHeadPosterior.energy`), whose prior terms are the weight decay V / sigma_w^2 on W
and 1 / sigma_g^2 on G (coupled L2: weight decay = prior precisions). Its minimum is the joint
MAP; the matching theory is the reduced action with ``objective="map"``. Pure ``init`` /
``step`` functions driven by ``lax.scan``; the learning rate is a traced array, so a sweep
over P and seeds compiles once.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, ArrayLike, Float

from .._custom_types import Key
from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics


class MAPState(NamedTuple):
    """Adam state: parameters {"W", "G"} and the optax state (learning rate inside)."""

    params: dict
    opt_state: optax.OptState


def _adam():
    return optax.inject_hyperparams(optax.adam)(learning_rate=0.0)


def map_init(
    key: Key,
    L: int,
    V: int,
    learning_rate: float | ArrayLike,
    *,
    init_scale: float | ArrayLike = 1e-2,
    G0: Float[ArrayLike, "L L"] | None = None,
    dtype=None,
) -> MAPState:
    """Small random (W, G) around (0, G0) (``G0`` defaults to zero; a copy-pattern ``G0`` is
    a start from the copy state, for hysteresis and the convergence filter), in ``dtype``
    (default: the default float dtype)."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    kw, kg = jax.random.split(key)
    G = init_scale * jax.random.normal(kg, (L, L), dtype)
    if G0 is not None:
        G = G + jnp.asarray(G0, dtype)
    params = {"W": init_scale * jax.random.normal(kw, (V, V), dtype), "G": G.astype(dtype)}
    state = _adam().init(params)
    hyper = {**state.hyperparams, "learning_rate": jnp.asarray(learning_rate, dtype)}
    return MAPState(params, state._replace(hyperparams=hyper))


def map_step(
    state: MAPState, posterior: CopyHeadPosterior, stats: CopyStatistics
) -> tuple[MAPState, Float[Array, ""]]:
    """One Adam step on the joint energy E(W, G); returns the new state and E before it."""

    def energy(p):
        return posterior.energy(p["W"], p["G"], stats)

    value, grads = jax.value_and_grad(energy)(state.params)
    updates, opt_state = _adam().update(grads, state.opt_state, state.params)
    return MAPState(optax.apply_updates(state.params, updates), opt_state), value


def _cosine(peak, t, total):
    """Cosine decay from ``peak`` to 1% of it: the last steps are gradient-flow-like."""
    return peak * (0.01 + 0.99 * 0.5 * (1.0 + jnp.cos(jnp.pi * t / total)))


def train_map(
    key: Key,
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    *,
    steps: int,
    learning_rate: float | ArrayLike,
    init_scale: float | ArrayLike = 1e-2,
    G0: Float[ArrayLike, "L L"] | None = None,
    record_every: int = 10,
) -> tuple[dict, Float[Array, " n"]]:
    """Adam to the joint MAP with a cosine-decayed learning rate (peak ``learning_rate``), so
    the final point is a converged minimum. Returns the final {"W", "G"} and the energy
    recorded every ``record_every`` steps. Computes in the statistics' dtype (float32
    statistics and posterior, :func:`jaxdyn.copyhead.cast_floating`, train in single
    precision)."""
    dtype = stats.N.dtype
    state = map_init(
        key, stats.L, stats.V, learning_rate, init_scale=init_scale, G0=G0, dtype=dtype
    )
    n_outer = max(int(steps) // record_every, 1)
    total = n_outer * record_every

    def inner(carry, _):
        state, t = carry
        lr = jnp.asarray(_cosine(learning_rate, t, total), dtype)
        hyper = {**state.opt_state.hyperparams, "learning_rate": lr}
        state = MAPState(state.params, state.opt_state._replace(hyperparams=hyper))
        state, e = map_step(state, posterior, stats)
        return (state, t + 1), e

    def outer(carry, _):
        carry, es = jax.lax.scan(inner, carry, None, length=record_every)
        return carry, es[-1]

    (state, _), trace = jax.lax.scan(outer, (state, jnp.asarray(0.0, dtype)), None, length=n_outer)
    return state.params, trace


def minimise_action(
    posterior: CopyHeadPosterior,
    stats: CopyStatistics,
    G0: Float[ArrayLike, "L L"],
    *,
    steps: int,
    learning_rate: float | ArrayLike,
) -> Float[Array, "L L"]:
    """Local minimiser of the exact action S(G) (W integrated out) from G0: Adam with a
    cosine-decayed learning rate (small steps keep it in G0's basin: hysteresis runs, and
    the posterior mode reached from a sampler's state). Computes in G0's dtype (with
    statistics and posterior of that dtype, :func:`jaxdyn.copyhead.cast_floating`)."""
    G0 = jnp.asarray(G0)
    opt = _adam()
    grad = jax.grad(lambda G: posterior.action(G, stats))

    def step(carry, t):
        G, state = carry
        lr = jnp.asarray(_cosine(learning_rate, t, steps), G0.dtype)
        state = state._replace(hyperparams={**state.hyperparams, "learning_rate": lr})
        updates, state = opt.update(grad(G), state, G)
        return (optax.apply_updates(G, updates), state), None

    (G, _), _ = jax.lax.scan(step, (G0, opt.init(G0)), jnp.arange(steps, dtype=G0.dtype))
    return G
