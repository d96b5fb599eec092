"""``pde-causal``: masked (causal) attention with an attention sink (docs/transformer_pde.md,
"Causal attention"): prefixes are closed systems, later tokens never move earlier ones, and the
influence of one earlier token on the later ones as ``n`` grows, with and without a sink."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.meanfield import _particle_measures as pm, claims
from jaxdyn.meanfield._causal import sink_positions
from jaxdyn.meanfield.fields import Masked, Softmax
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, register_experiment
from jaxdyn.sweep import Grid

from ._common import record


@dataclasses.dataclass(frozen=True, kw_only=True)
class CausalConfig(ExperimentConfig):
    """Causal softmax, tokens ``N(0, I)`` at sorted uniform positions; with a sink the first
    ``ceil(sink_mass n)`` tokens sit at position 0. The influence ``|d x_j(t1) / d x_i(0)|`` is
    forward-mode through the solve; ``i`` is the earliest token outside the sink."""

    d: int = 2
    n_values: tuple[int, ...] = (16, 32, 64, 128)
    systems: int = 3
    sink_mass: float = 0.25
    t1: float = 1.0
    steps: int = 20
    weight_scale: float = 0.5
    weight_seed: int = 0
    prefix: int = 8

    def validate(self) -> None:
        if min(self.d, self.systems, self.steps) < 1 or min(self.t1, self.weight_scale) <= 0:
            raise ConfigError("d, systems, steps must be >= 1; t1 and weight_scale positive")
        if len(self.n_values) < 3 or min(self.n_values) < 2:
            raise ConfigError(f"n_values needs >= 3 sizes >= 2, got {self.n_values}")
        if not 0.0 < self.sink_mass < 1.0:
            raise ConfigError(f"sink_mass must be in (0, 1), got {self.sink_mass}")
        if not 1 <= self.prefix < min(self.n_values):
            raise ConfigError(f"prefix must be in 1..min(n_values)-1, got {self.prefix}")

    @classmethod
    def quick(cls) -> dict:
        return {"n_values": (16, 32, 64), "systems": 2}


@register_experiment(
    "pde-causal",
    CausalConfig,
    "masked attention: conditional structure, influence of earlier tokens with and without a sink",
    title="causal attention and attention sinks",
    docs="transformer_pde.md#causal-attention-_causalpy-masked",
)
def run_pde_causal(config: CausalConfig, run: Run) -> None:
    rng = np.random.default_rng(config.weight_seed)
    Q, K = (config.weight_scale * rng.standard_normal((config.d, config.d)) for _ in range(2))
    base = Softmax(Q, K, np.eye(config.d))
    masses = np.array([0.0, config.sink_mass])
    ns = np.array(config.n_values)
    grid = Grid.product({"n": ns, "sink_mass": masses}, seeds=config.systems, base_seed=config.seed)
    member = pm.causal_member(base, config.d, max(config.n_values), config.t1, config.steps)
    result = run.sweep("influence", member, grid)
    values = result.reshaped("first_token_influence")  # (n, masses, systems)
    run.save_arrays(
        first_token_influence=values,
        dims={"first_token_influence": ("n", "sink_mass", "seed")},
        coords={"n": ns, "sink_mass": masses},
    )
    run.consistency(
        "later_tokens_never_move_earlier_ones",
        expected=0.0,
        measured=float(np.max(result.outputs["later_on_earlier"])),
        basis="structural: masked scores give exact zeros",
        note="max over runs of |d x_j(t1) / d x_i(0)| for s_i > s_j (real tokens)",
    )
    n_points = np.repeat(ns, config.systems)
    for m, mass in enumerate(masses):
        slope = fit_power_law(n_points, values[:, m].ravel()).slope
        run.scalar(f"influence_exponent_sink_mass_{mass:g}", slope)
    record(run, {
        "sink_makes_single_token_influence_vanish": (
            claims.sink_influence(n_points, values[:, 1].ravel(), sink=True),
            f"influence of the earliest non-sink token vs n, sink mass {config.sink_mass:g}"),
        "without_sink_influence_stays_order_one": (
            claims.sink_influence(n_points, values[:, 0].ravel(), sink=False),
            "without a sink tokens 0 and 1 form a closed pair: O(1) influence for all n"),
    })  # fmt: skip
    _prefix_closed(config, run, base)
    fig, axes = new_figure(1, 1, width=4.6)
    for m, label in enumerate(("no sink", f"sink mass {config.sink_mass:g}")):
        axes[0, 0].loglog(ns, values[:, m].mean(axis=1), "o-", label=label)
    axes[0, 0].loglog(ns, values[0, 1].mean() * ns[0] / ns, "k--", lw=0.8, label="1/n")
    axes[0, 0].set(xlabel="tokens n", ylabel="max_j |d x_j(t1) / d x_i(0)|, i earliest non-sink")
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "causal_influence")


def _prefix_closed(config, run, base):
    """The sink and the next ``prefix`` tokens follow the same trajectories whatever the later
    tokens are (redrawn, in one vmapped program): the prefix is a closed system."""
    n = max(config.n_values)
    key = jax.random.key(config.seed + 7)
    field = Masked(base, sink_positions(n, config.sink_mass, key))
    x0 = jax.random.normal(jax.random.fold_in(key, 1), (n, config.d))
    p = int(np.ceil(config.sink_mass * n)) + config.prefix
    redrawn = x0.at[p:].set(jax.random.normal(jax.random.fold_in(key, 2), (n - p, config.d)))
    flow = jax.vmap(lambda x: pm.rk4_flow(field, x, config.t1, config.steps).final_x)
    whole, other = jax.jit(flow)(jnp.stack([x0, redrawn]))
    run.consistency(
        "prefix_evolves_as_a_closed_system",
        expected=0.0,
        measured=float(jnp.max(jnp.abs(whole[:p] - other[:p]))),
        tolerance=1e-12,
        basis="float64 round-off (same RK4 steps)",
        note=f"first {p} of {n} tokens, the later {n - p} redrawn",
    )
