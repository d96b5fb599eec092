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
from ._task import CopyStatistics, cast_floating, padded_statistics


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


def exact_descent(
    posterior: CopyHeadPosterior, copy_G, L: int, V: int, P_max: int, *, steps, dtype
):
    """``descend(P, start, learning_rate, key) -> (G, stats)``: the minimum of the exact
    action S(G) reached by :func:`minimise_action` on the dataset of the key's first P of
    P_max sequences (P traced, :func:`jaxdyn.copyhead._task.padded_statistics`), from
    ``start * copy_G`` lifted by 1e-2 noise (G = 0 is stationary by symmetry). The descent
    computes in ``dtype``; the minimum is returned in the statistics' float64."""
    posterior_low = cast_floating(posterior, dtype)

    def descend(P, start, learning_rate, key):
        k_data, k_init = jax.random.split(key)
        stats, _ = padded_statistics(k_data, L, V, P, P_max)
        G0 = start * copy_G + 1e-2 * jax.random.normal(k_init, (L, L))
        G = minimise_action(
            posterior_low,
            cast_floating(stats, dtype),
            cast_floating(G0, dtype),
            steps=steps,
            learning_rate=learning_rate,
        )
        return G.astype(stats.N.dtype), stats

    return descend


def switch_root(posterior: CopyHeadPosterior, descend, key, learning_rate, P_lo, P_hi, iterations):
    """Bisection in ln P, ``iterations`` times, of the P in [P_lo, P_hi] where the minimum
    reached from the copy start becomes the lower one (both starts descended again at each
    midpoint, :func:`exact_descent`): ``ln_switch`` (the final bracket's centre) and
    ``half_width`` (its resolution)."""

    def lower_copy(ln_P):
        P = jnp.exp(ln_P)
        Gu, stats = descend(P, 0.0, learning_rate, key)
        Gc, _ = descend(P, 1.0, learning_rate, key)
        return posterior.action(Gc, stats) < posterior.action(Gu, stats)

    def bisect(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        copy = lower_copy(mid)
        return jnp.where(copy, lo, mid), jnp.where(copy, mid, hi)

    lo, hi = jax.lax.fori_loop(0, iterations, bisect, (jnp.log(P_lo), jnp.log(P_hi)))
    return {"ln_switch": 0.5 * (lo + hi), "half_width": 0.5 * (hi - lo)}
