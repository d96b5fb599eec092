"""copy-head-theory, part 2: hysteresis of the exact finite-data action S(G) (all L^2
scores) against the reduced theory's coexistence window and P* (copy_head.md, "What the
reconstruction gives")."""

from __future__ import annotations

import jax
import numpy as np

from ... import copyhead as ch
from ...copyhead import _hysteresis, _measure, _train
from ...runs import Run
from ...sweep import Grid
from ._common import check_hysteresis, padded_statistics, snug_sweep


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
    posterior_low = c.lowered(posterior)
    copy_G = c.copy_scores(attention)

    def member(params, key):
        k_data, k_init = jax.random.split(key)
        stats, _ = padded_statistics(k_data, c.L, c.V, params["P"], P_max)
        # Small noise lifts the uniform start off G = 0, a stationary point by symmetry.
        G0 = params["start"] * copy_G + 1e-2 * jax.random.normal(k_init, (c.L, c.L))
        # Adam in c.loop_dtype; the minimum it reaches is measured in float64.
        G = _train.minimise_action(
            posterior_low,
            c.lowered(stats),
            c.lowered(G0),
            steps=c.hysteresis_steps,
            learning_rate=params["learning_rate"],
        )
        return _measure.measure(posterior, G.astype(stats.N.dtype), None, stats)

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
        _check_switch(run, attention, result, info)
    run.scalar(f"{attention}_exact_action_disagreement", hyst.where(np.ones_like(hyst.P, bool)))
    return {"P": Ps, "values": result.reshaped(key), "hysteresis": hyst}


def switch_evidence(ln_switch, ln_P_star: float, ln_spinodal: float, spacing: float):
    """Per-dataset ln P of the exact action's switch (the middle of its bracket) against the
    reduced ln P*: Student-t over datasets plus half the grid spacing (each middle lies
    within it of its switch); the alternative is the uniform spinodal ln P_hi (the switch at
    the end of the coexistence window instead of at equal action)."""
    return ch.claims.matches_theory(
        "the exact action's global switch between the two minima lies at the reduced P*",
        np.asarray(ln_switch, float)[:, None],
        np.array([ln_P_star]),
        np.array([ln_spinodal - ln_P_star]),
        bound=0.5 * spacing,
        basis="ln P; bound: half the ln-P grid spacing of the brackets",
    )


def _check_switch(run, attention, result, info) -> None:
    """Per dataset, the P where the copy-start minimum becomes the lower one; against the
    reduced P* (:func:`switch_evidence`)."""
    P, start, seeds = result.params["P"], result.params["start"], result.seeds
    S = result.masked("action")
    Ps = np.unique(P)
    middles = []
    for s in np.unique(seeds):
        per_start = [
            np.array([S[(P == p) & (seeds == s) & (start == b)][0] for p in Ps]) for b in (0.0, 1.0)
        ]
        bracket = _hysteresis.switch_bracket(Ps, *per_start)
        middles.append(np.nan if bracket is None else float(np.sqrt(bracket[0] * bracket[1])))
    middles = np.asarray(middles)
    spacing = float(np.log(Ps[1] / Ps[0]))
    run.scalar(f"{attention}_exact_action_switch_per_dataset", middles.tolist())
    run.evidence(
        f"{attention}_exact_action_switch_matches_reduced_P_star",
        switch_evidence(
            np.log(middles),
            float(np.log(info["P_star"])),
            float(np.log(info["coexistence"][1])),
            spacing,
        ),
        note=f"P* {info['P_star']:.4g}, spinodal {info['coexistence'][1]:.4g}; a dataset "
        "without a switch is left out (fewer than two: inconclusive)",
    )
