"""copy-head-adam: networks trained by Adam to the joint MAP against the MAP theory.

For each P (a ladder away from the transition, plus nested grids refined around it), seed
(dataset) and start (small init / copy pattern): Adam on E(W, G). The run of the two starts
with the lower energy is the network's MAP; each run's remaining optimisation error is its
Newton estimate at the end point (:func:`jaxdyn.copyhead.newton_estimate`). Checked against the
reduced action with ``objective=ch.Objective.map``: order parameters and population test loss
away from the transition, the transition order from grid refinement of the trained networks,
the test-loss jump, hysteresis between the starts, and the coverage of span{U, S}."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _measure, _task
from ...runs import Run, register_experiment
from ...sweep import Grid
from . import _figures
from ._common import (
    SCORE_DIMS,
    NetworkConfig,
    for_each_setting,
    padded_statistics,
    require,
    require_positive,
    snug_sweep,
)
from ._network_checks import check_networks
from ._networks import BOOTSTRAP_KEYS, NetworkAnalysis, optimiser_error

ENERGY_EVERY = 10  # Adam steps between the recorded energies (the sweep's energy_trace)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdamConfig(NetworkConfig):
    """Adam (optax) to the joint MAP over (W, G), vmapped over P, seeds and two starts.

    Attributes:
        refine_levels, refine_width: nested grids of 2^k intervals (k <= refine_levels) on
            [P_t / refine_width, P_t refine_width] around the MAP theory's transition P_t.
        fall_width: for a continuous theory, the same nested grids on [P_f / fall_width,
            P_f fall_width] around the steepest fall P_f of the theory's test loss (the
            crossover to copying, above the onset).
        steps, learning_rate, init_scale: Adam (cosine-decayed learning rate).
        settings: the full size also runs at (L, V) = (16, 8) (L <= 16, V > L^{1/2}) and
            (24, 4) (V < L^{1/2}), 4 datasets each: a power computation from the
            per-dataset SD of quick runs there needs 3 for SE <= effect / 5
            (copy_head.md, "Power").
    """

    seeds: int = 4
    settings: tuple[tuple[int, int, int], ...] = ((16, 8, 4), (24, 4, 4))
    refine_levels: int = 4
    refine_width: float = 1.25
    fall_width: float = 1.5
    steps: int = 3000
    learning_rate: float = 0.03
    init_scale: float = 0.01

    def validate(self) -> None:
        super().validate()
        require(self.refine_levels >= 3, f"refine_levels must be >= 3, got {self.refine_levels}")
        require(self.steps >= 10, f"steps must be >= 10, got {self.steps}")
        require(
            self.refine_width > 1 and self.fall_width > 1,
            f"refine_width and fall_width must be > 1, got {self.refine_width}, {self.fall_width}",
        )
        require_positive(learning_rate=self.learning_rate, init_scale=self.init_scale)

    @classmethod
    def quick(cls) -> dict:
        return {
            "steps": 1500,
            "seeds": 3,
            "refine_levels": 3,
            "P_values": (6.0, 64.0),
            "settings": (),
        }


def run_adam(c: AdamConfig, run: Run) -> None:
    """The experiment for either head (registered as copy-head-adam and copy-head-adam-linear)
    at its (L, V) and at each of its further ``settings``."""
    for_each_setting(c, run, _run_adam)


def _run_adam(c: AdamConfig, run: Run) -> None:
    analysis = NetworkAnalysis.from_theory(c, c.reduced(c.attention, "map"), run)
    posterior = c.posterior(c.attention)
    copy_G = c.copy_scores(c.attention)
    P_max = int(np.ceil(analysis.P_grid.max()))

    posterior_low = c.lowered(posterior)

    def fit(key, stats, G0, learning_rate):
        # Adam in c.loop_dtype; the measurements and the Newton estimate of the end point's
        # distance to the exact minimum in float64, so their bound covers the precision.
        p, trace = ch.train_map(
            key,
            posterior_low,
            c.lowered(stats),
            steps=c.steps,
            learning_rate=learning_rate,
            init_scale=c.init_scale,
            G0=G0,
            record_every=ENERGY_EVERY,
        )
        p = _task.cast_floating(p, stats.N.dtype)
        out = _measure.measure(posterior, p["G"], p["W"], stats)
        out["test_loss"] = _measure.population_test_loss(posterior, p["G"], p["W"], V=c.V)
        out.update(optimiser_error(posterior, stats, p, V=c.V))
        return p, trace, out

    def member(params, key):
        k_data, k_train = jax.random.split(key)
        stats, (X, Y, w) = padded_statistics(k_data, c.L, c.V, params["P"], P_max)
        G0 = params["start"] * copy_G
        # One bootstrap resample of the same data, refitted from this fit's scores: the
        # finite-P bias of the fit against the population (reduced) theory. The two fits run
        # as the two steps of one scan, so the program holds one copy of the training loop.
        k_resample, k_refit = jax.random.split(jax.random.fold_in(key, 1))
        boot = ch.copy_statistics(X, Y, _task.bootstrap_weights(k_resample, w))

        def fit_from(G_start, data):
            k, s = data
            p, trace, out = fit(k, s, G_start, params["learning_rate"])
            return p["G"], (p["G"], trace, out)

        both = jax.tree.map(lambda a, b: jnp.stack([a, b]), stats, boot)
        _, (G, trace, outs) = jax.lax.scan(fit_from, G0, (jnp.stack([k_train, k_refit]), both))
        out = {k: v[0] for k, v in outs.items()}
        out["G"] = G[0]
        out["energy_trace"] = trace[0]
        out.update({f"bootstrap_{k}": v[1] for k, v in outs.items() if k in BOOTSTRAP_KEYS})
        return out

    grid = Grid.product(
        {"P": analysis.P_grid, "start": [0.0, 1.0], "learning_rate": [c.learning_rate]},
        seeds=c.seeds,
        base_seed=c.seed,
    )
    recorded = max(c.steps // ENERGY_EVERY, 1)  # train_map's energy trace: every ENERGY_EVERY
    result = snug_sweep(
        run,
        "adam",
        member,
        grid,
        c,
        dims={"G": SCORE_DIMS, "energy_trace": ("step",)},
        coords={"step": ENERGY_EVERY * np.arange(1, recorded + 1)},
    )
    run.scalar("failed_members", result.n_failed())
    check_networks(run, "adam", analysis, result)
    keys = ("c_G", "delta") if c.attention == "softmax" else ("c_1", "c_G")
    _figures.network_figures(
        run,
        "adam",
        result.params["P"],
        result.ok(),
        result,
        keys,
        analysis.curves(),
        result.n_failed(),
    )


@register_experiment(
    "copy-head-adam",
    AdamConfig,
    "softmax networks by Adam to the MAP: jump (grid refinement), hysteresis, loss drop, theory",
    title="Softmax networks trained by Adam to the MAP",
    docs="copy_head.md#what-the-experiments-find",
)
def run_adam_softmax(config: AdamConfig, run: Run) -> None:
    """copy-head-adam: Adam to the MAP of a softmax copy head."""
    run_adam(config, run)
