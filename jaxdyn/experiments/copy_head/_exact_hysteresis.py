"""copy-head-theory, part 2: hysteresis of the exact finite-data action S(G) (all L^2
scores) against the reduced theory's coexistence window and P* (copy_head.md, "What the
reconstruction gives")."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _hysteresis, _measure, _train
from ...runs import Run
from ...sweep import Grid
from ._common import check_hysteresis, padded_statistics, snug_sweep


def _descent(c, attention: str, P_max: int):
    """(P, start, learning rate, key) -> (the minimum of the exact action reached from the
    start, the statistics): the dataset of the key's first P of P_max sequences (fractional P
    weights the last one, so the action is continuous in P), the start uniform (0) or copy (1)
    lifted by small noise (G = 0 is a stationary point by symmetry); Adam in c.loop_dtype, the
    minimum returned in float64."""
    posterior_low = c.lowered(c.posterior(attention))
    copy_G = c.copy_scores(attention)

    def descend(P, start, learning_rate, key):
        k_data, k_init = jax.random.split(key)
        stats, _ = padded_statistics(k_data, c.L, c.V, P, P_max)
        G0 = start * copy_G + 1e-2 * jax.random.normal(k_init, (c.L, c.L))
        G = _train.minimise_action(
            posterior_low,
            c.lowered(stats),
            c.lowered(G0),
            steps=c.hysteresis_steps,
            learning_rate=learning_rate,
        )
        return G.astype(stats.N.dtype), stats

    return descend


def _hysteresis_grid(c, res: dict) -> np.ndarray:
    info = res["info"]
    if info["coexistence"] is not None:
        lo, hi = info["coexistence"]
        return np.geomspace(lo / c.window_margin**3, hi * c.window_margin**3, c.hysteresis_points)
    centre = info["P_star"] or float(np.sqrt(np.prod(res["window"])))
    return np.geomspace(centre / 2.0, centre * 2.0, c.hysteresis_points)


def exact_action_hysteresis(c, run: Run, attention: str, res: dict) -> dict:
    """Minimise the exact finite-data action S(G) (all L^2 scores) from uniform (G = 0) and
    from the copy pattern on ``hysteresis_seeds`` datasets, P traced (nested datasets)."""
    Ps = _hysteresis_grid(c, res)
    P_max = int(np.ceil(Ps.max()))
    posterior = c.posterior(attention)
    descend = _descent(c, attention, P_max)

    def member(params, key):
        G, stats = descend(params["P"], params["start"], params["learning_rate"], key)
        return _measure.measure(posterior, G, None, stats)

    grid = Grid.product(
        {"P": Ps, "start": [0.0, 1.0], "learning_rate": [c.hysteresis_learning_rate]},
        seeds=c.hysteresis_seeds,
        base_seed=c.seed,
    )
    result = snug_sweep(run, f"exact_hysteresis_{attention}", member, grid, c)
    key = "c_G" if attention == "softmax" else "c_1"
    values = result.outputs[key]
    info, diagram = res["info"], res["diagram"]
    order = info["transition_order"]
    hyst = check_hysteresis(
        run, f"{attention}_exact_action", result, values, order, info, diagram, c.window_margin
    )
    if order is ch.TransitionOrder.first and info["coexistence"] is not None:
        _check_switch(run, c, attention, result, info, descend)
    run.scalar(f"{attention}_exact_action_disagreement", hyst.where(np.ones_like(hyst.P, bool)))
    return {"P": Ps, "values": result.reshaped(key), "hysteresis": hyst}


def switch_evidence(ln_switch, ln_P_star: float, ln_spinodal: float, resolution: float):
    """Per-dataset ln P of the exact action's switch (a root find) against the reduced ln P*:
    Student-t over datasets plus the root find's resolution (half its final bracket in ln P);
    the alternative is the uniform spinodal ln P_hi (the switch at the end of the coexistence
    window instead of at equal action)."""
    return ch.claims.matches_theory(
        "the exact action's global switch between the two minima lies at the reduced P*",
        np.asarray(ln_switch, float)[:, None],
        np.array([ln_P_star]),
        np.array([ln_spinodal - ln_P_star]),
        bound=resolution,
        alternative=np.array([ln_spinodal]),
        basis="ln P; bound: half the root find's final bracket in ln P",
    )


def _check_switch(run, c, attention, result, info, descend) -> None:
    """Per dataset, the P where the copy-start minimum becomes the lower one: bracketed on the
    P grid, then bisected in ln P (``c.switch_bisections`` times, both starts minimised again
    at each midpoint) to a resolution finer than the finite-data offset from the reduced P*
    it looks for; against the reduced P* (:func:`switch_evidence`)."""
    P, start, seeds = result.params["P"], result.params["start"], result.seeds
    S = result.masked("action")
    Ps = np.unique(P)
    brackets, kept = [], []
    for s in np.unique(seeds):
        per_start = [
            np.array([S[(P == p) & (seeds == s) & (start == b)][0] for p in Ps]) for b in (0.0, 1.0)
        ]
        bracket = _hysteresis.switch_bracket(Ps, *per_start)
        if bracket is not None:
            brackets.append(bracket)
            kept.append(int(s))
    spacing = float(np.log(Ps[1] / Ps[0]))
    roots = np.full(len(np.unique(seeds)), np.nan)
    if kept:
        posterior = c.posterior(attention)

        def member(params, key):
            def lower_copy(ln_P):
                P = jnp.exp(ln_P)
                Gu, stats = descend(P, 0.0, params["learning_rate"], key)
                Gc, _ = descend(P, 1.0, params["learning_rate"], key)
                return posterior.action(Gc, stats) < posterior.action(Gu, stats)

            def bisect(_, bracket):
                lo, hi = bracket
                mid = 0.5 * (lo + hi)
                copy = lower_copy(mid)
                return jnp.where(copy, lo, mid), jnp.where(copy, mid, hi)

            lo, hi = jax.lax.fori_loop(
                0, c.switch_bisections, bisect, (jnp.log(params["P_lo"]), jnp.log(params["P_hi"]))
            )
            return {"ln_switch": 0.5 * (lo + hi), "half_width": 0.5 * (hi - lo)}

        b = np.asarray(brackets, float)
        grid = Grid(
            params={
                "P_lo": b[:, 0],
                "P_hi": b[:, 1],
                "learning_rate": np.full(len(kept), c.hysteresis_learning_rate),
            },
            seeds=np.asarray(kept, np.int64),
            shape=(len(kept),),
            axes=("seed",),
        )
        found = snug_sweep(run, f"exact_switch_{attention}", member, grid, c)
        where = np.searchsorted(np.unique(seeds), kept)
        roots[where] = np.exp(found.outputs["ln_switch"])
    resolution = 0.5 * spacing / 2.0**c.switch_bisections
    run.scalar(f"{attention}_exact_action_switch_per_dataset", roots.tolist())
    run.evidence(
        f"{attention}_exact_action_switch_matches_reduced_P_star",
        switch_evidence(
            np.log(roots),
            float(np.log(info["P_star"])),
            float(np.log(info["coexistence"][1])),
            resolution,
        ),
        note=f"P* {info['P_star']:.4g}, spinodal {info['coexistence'][1]:.4g}; root find to "
        f"{resolution:.2g} in ln P; a dataset without a switch on the grid is left out (fewer "
        "than two: inconclusive)",
    )
