"""The copy-head experiments' training set-ups as sweep members ``member(params, key)``:
one dataset per key (the first P of P_max sequences, :func:`_task.padded_statistics`), a fit
or chains from a start (``params["start"]``: 0 uniform, 1 the copy pattern), and a refit on a
bootstrap resample of the same data (the finite-P bias against the population theory).

Loops compute in ``dtype`` (float32 halves their memory traffic); every end point, mode and
Newton estimate is measured in float64 on the float64 statistics, so the rounding is inside
the checks' error model (copy_head.md, "Validation protocol").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import _compare, _measure, _train
from ._samplers import sample_mala, sample_sgld, sgld_step_size
from ._task import bootstrap_weights, cast_floating, copy_statistics, padded_statistics


def _data(key, k_resample, L, V, P, P_max):
    stats, (X, Y, w) = padded_statistics(key, L, V, P, P_max)
    return stats, copy_statistics(X, Y, bootstrap_weights(k_resample, w))


def map_fits(
    posterior, copy_G, L: int, V: int, P_max: int, *, steps, init_scale, record_every, dtype
):
    """Adam to the joint MAP (:func:`jaxdyn.copyhead.train_map`) from the start, then from its
    scores on a bootstrap resample (two steps of one scan: one copy of the training loop):
    the order parameters, population test loss and their Newton estimates
    (``optimiser_error_<key>``), the fit's scores ``G`` and ``energy_trace`` (every
    ``record_every`` steps), and the refit's as ``bootstrap_<key>``."""
    posterior_low = cast_floating(posterior, dtype)

    def fit(key, stats, G0, learning_rate):
        p, trace = _train.train_map(
            key,
            posterior_low,
            cast_floating(stats, dtype),
            steps=steps,
            learning_rate=learning_rate,
            init_scale=init_scale,
            G0=G0,
            record_every=record_every,
        )
        p = cast_floating(p, stats.N.dtype)
        out = _measure.measure(posterior, p["G"], p["W"], stats)
        out["test_loss"] = _measure.population_test_loss(posterior, p["G"], p["W"], V=V)
        out.update(_compare.optimiser_error(posterior, stats, p, V=V))
        return p, trace, out

    def member(params, key):
        k_data, k_train = jax.random.split(key)
        k_resample, k_refit = jax.random.split(jax.random.fold_in(key, 1))
        stats, boot = _data(k_data, k_resample, L, V, params["P"], P_max)

        def fit_from(G_start, data):
            p, trace, out = fit(*data, G_start, params["learning_rate"])
            return p["G"], (p["G"], trace, out)

        both = jax.tree.map(lambda u, v: jnp.stack([u, v]), stats, boot)
        G0 = params["start"] * copy_G
        _, (G, trace, outs) = jax.lax.scan(fit_from, G0, (jnp.stack([k_train, k_refit]), both))
        out = {k: v[0] for k, v in outs.items()}
        out.update(G=G[0], energy_trace=trace[0])
        out.update(
            {f"bootstrap_{k}": v[1] for k, v in outs.items() if k in _compare.BOOTSTRAP_KEYS}
        )
        return out

    return member


def posterior_chains(
    posterior,
    copy_G,
    L: int,
    V: int,
    P_max: int,
    *,
    burn_in,
    num_samples,
    thin,
    step_scale,
    g_preconditioner,
    mala_step,
    mode_steps,
    dtype,
):
    """SGLD over (W, G) (:func:`jaxdyn.copyhead.sample_sgld`) and MALA on G
    (:func:`jaxdyn.copyhead.sample_mala`, step ``mala_step(P)``) from the start, then the mode
    of S(G) reached from the SGLD chain's end (the MALA chain's for ``params["precursor"] >
    0``) and from there the mode of a bootstrap resample: ``mode_<key>``,
    ``mode_error_<key>`` (Newton estimates), ``mode_G`` and ``mode_bootstrap_*``."""
    lowered = lambda tree: cast_floating(tree, dtype)
    posterior_low = lowered(posterior)

    def member(params, key):
        k_data, k_sgld, k_mala = jax.random.split(key, 3)
        k_mala, k_init = jax.random.split(k_mala)
        P = params["P"]
        stats, boot = _data(k_data, jax.random.fold_in(key, 1), L, V, P, P_max)
        stats_low = lowered(stats)
        G0 = lowered(params["start"] * copy_G)
        out = sample_sgld(
            k_sgld,
            posterior_low,
            stats_low,
            burn_in=burn_in,
            num_samples=num_samples,
            thin=thin,
            step_size=sgld_step_size(posterior_low, stats_low, scale=step_scale),
            G0=G0,
            g_preconditioner=g_preconditioner,
        )
        mala = sample_mala(
            k_mala,
            posterior_low,
            stats_low,
            step_size=mala_step(P),
            burn_in=burn_in,
            num_samples=num_samples,
            thin=thin,
            G0=params["start"] * copy_G + 1e-2 * jax.random.normal(k_init, G0.shape),
        )
        out.update({f"mala_{k}": v for k, v in mala.items()})
        G_end = lowered(jnp.where(params["precursor"] > 0, mala["G_final"], out["G_final"]))

        def mode_of(G_start, data):
            G = _train.minimise_action(
                posterior_low, lowered(data), G_start, steps=mode_steps, learning_rate=0.02
            )
            G64 = G.astype(stats.N.dtype)
            measured = _measure.measure(posterior, G64, None, data)
            return G, (G64, measured, _compare.mode_error(posterior, data, G64))

        data = jax.tree.map(lambda *a: jnp.stack(a), stats, boot)
        _, (modes, o, error) = jax.lax.scan(mode_of, G_end, data)
        out.update({f"mode_{k}": v[0] for k, v in o.items()})
        out.update({k: v[0] for k, v in error.items()})
        out["mode_G"] = modes[0]
        out.update({f"mode_bootstrap_{k}": o[k][1] for k in ("c_1", "c_G")})
        out.update({k.replace("mode_", "mode_bootstrap_", 1): v[1] for k, v in error.items()})
        return out

    return member
