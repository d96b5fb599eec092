"""``pde-causal``: masked (causal) attention with an attention sink (docs/transformer_pde.md,
"Causal attention"): the conditional structure (prefixes are closed systems, later tokens never
move earlier ones) and the influence of one earlier token on the later ones as ``n`` grows,
with and without a sink."""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn import fit_power_law
from jaxdyn.evidence import rate
from jaxdyn.meanfield import RK4, simulate_particles
from jaxdyn.meanfield._causal import causal_influence, sink_positions
from jaxdyn.meanfield.fields import Masked, Softmax
from jaxdyn.plotting import new_figure
from jaxdyn.runs import ConfigError, ExperimentConfig, Run, negative_control, register_experiment
from jaxdyn.sweep import Grid


@dataclasses.dataclass(frozen=True, kw_only=True)
class CausalConfig(ExperimentConfig):
    """Causal softmax attention, tokens ``N(0, I)`` at sorted uniform positions; with a sink,
    the first ``ceil(sink_mass n)`` tokens sit at position 0.

    The influence ``I[j, i] = |d x_j(t1) / d x_i(0)|`` is computed by forward-mode
    differentiation through the solve; ``max_{j != i} I[j, i]`` for the earliest token ``i``
    outside the sink is the effect of moving the token that sees the fewest others (without a
    sink: token 0, which sees only itself).
    """

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
        if self.d < 1 or self.systems < 1:
            raise ConfigError("d and systems must be >= 1")
        if len(self.n_values) < 3 or min(self.n_values) < 2:
            raise ConfigError(f"n_values needs >= 3 sizes >= 2, got {self.n_values}")
        if not 0.0 < self.sink_mass < 1.0:
            raise ConfigError(f"sink_mass must be in (0, 1), got {self.sink_mass}")
        if not self.t1 > 0 or self.steps < 1 or not self.weight_scale > 0:
            raise ConfigError("t1 and weight_scale must be positive, steps >= 1")
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
    d = config.d
    rng = np.random.default_rng(config.weight_seed)
    Q, K = (config.weight_scale * rng.standard_normal((d, d)) for _ in range(2))
    base = Softmax(Q, K, np.eye(d))
    masses = np.array([0.0, config.sink_mass])
    n_max = max(config.n_values)

    def member(params, key):
        # n tokens padded to n_max with inert ones after every real token (sink_positions):
        # one compiled program for every n; the padding never moves the real tokens.
        n = params["n"]
        k1, k2 = jax.random.split(key)
        positions = sink_positions(n, params["sink_mass"], k1, length=n_max)
        x0 = jax.random.normal(k2, (n_max, d))
        influence = causal_influence(Masked(base, positions), x0, config.t1, config.steps)
        real = jnp.arange(n_max) < n
        # [j, i]: token i after token j, both real
        later = (positions[None, :] > positions[:, None]) & real[None, :] & real[:, None]
        first = jnp.argmax(positions > 0.0)  # the earliest token that is not in the sink
        others = (jnp.arange(n_max) != first) & real
        return {
            "later_on_earlier": jnp.max(jnp.where(later, influence, 0.0)),
            "first_token_influence": jnp.max(jnp.where(others, influence[:, first], 0.0)),
        }

    grid = Grid.product(
        {"n": np.array(config.n_values), "sink_mass": masses},
        seeds=config.systems,
        base_seed=config.seed,
    )
    result = run.sweep("influence", member, grid)
    later_on_earlier = float(np.max(result.outputs["later_on_earlier"]))
    ns = np.array(config.n_values)
    values = result.reshaped("first_token_influence")  # (n, masses, systems)
    run.save_arrays(
        first_token_influence=values,  # the sweep's grid: n x sink mass x system
        dims={"first_token_influence": ("influence_n", "influence_sink_mass", "system")},
        coords={"influence_n": ns, "influence_sink_mass": np.asarray(masses)},
    )
    run.consistency(
        "later_tokens_never_move_earlier_ones",
        expected=0.0,
        measured=later_on_earlier,
        tolerance=0.0,
        basis="structural: masked scores give exact zeros",
        note="max over runs of |d x_j(t1) / d x_i(0)| for s_i > s_j (real tokens)",
    )
    n_points = np.repeat(ns, config.systems)
    fits = [fit_power_law(n_points, values[:, m].ravel()) for m in range(2)]
    for m, fit in enumerate(fits):
        run.scalar(f"influence_exponent_sink_mass_{masses[m]:g}", fit.slope)
    run.evidence(
        "sink_makes_single_token_influence_vanish",
        _sink_influence_evidence(n_points, values[:, 1].ravel()),
        note=f"influence of the earliest non-sink token vs n, sink mass {config.sink_mass:g}",
    )
    run.evidence(
        "without_sink_influence_stays_order_one",
        _no_sink_influence_evidence(n_points, values[:, 0].ravel()),
        note="without a sink tokens 0 and 1 form a closed pair: their influence is O(1) for all n",
    )
    _prefix_closed(config, run, base)
    fig, axes = new_figure(1, 1, width=4.6)
    for m, label in enumerate(("no sink", f"sink mass {config.sink_mass:g}")):
        axes[0, 0].loglog(ns, values[:, m].mean(axis=1), "o-", label=label)
    axes[0, 0].loglog(ns, values[0, 1].mean() * ns[0] / ns, "k--", lw=0.8, label="1/n")
    axes[0, 0].set_xlabel("tokens n")
    axes[0, 0].set_ylabel("max_j |d x_j(t1) / d x_i(0)|, i earliest non-sink")
    axes[0, 0].legend(fontsize=7)
    run.save_figure(fig, "causal_influence")


def _sink_influence_evidence(n, influence):
    # theory ~ 1 / (sink mass n): exponent -1; the alternative 0 is an influence that does not
    # vanish (no sink)
    return rate(
        "with an attention sink one token's influence on the others decays like 1/n",
        n,
        influence,
        prediction=-1.0,
        alternatives=(0.0,),
    )


def _no_sink_influence_evidence(n, influence):
    return rate(
        "without a sink the earliest token's influence does not vanish as n grows",
        n,
        influence,
        prediction=0.0,
        alternatives=(-1.0,),
    )


def _influence_series(rate, seed):
    rng = np.random.default_rng(seed)
    n = np.repeat([16.0, 32.0, 64.0], 3)
    return n, 0.5 * n**rate * np.exp(0.2 * rng.standard_normal(n.size))


@negative_control("pde-causal", "sink_makes_single_token_influence_vanish")
def _influence_that_does_not_vanish():
    return _sink_influence_evidence(*_influence_series(0.0, 0))


@negative_control("pde-causal", "without_sink_influence_stays_order_one")
def _influence_that_vanishes():
    return _no_sink_influence_evidence(*_influence_series(-1.0, 1))


def _prefix_closed(config, run, base):
    """The sink and the next ``prefix`` tokens follow the same trajectories whatever the later
    tokens are (redrawn): the prefix is a closed system (it ends after the tied sink
    positions)."""
    n = max(config.n_values)
    key = jax.random.key(config.seed + 7)
    positions = sink_positions(n, config.sink_mass, key)
    x0 = jax.random.normal(jax.random.fold_in(key, 1), (n, config.d))
    p = int(np.ceil(config.sink_mass * n)) + config.prefix
    # The same sequence with every token after the prefix redrawn, in one vmapped program.
    redrawn = x0.at[p:].set(jax.random.normal(jax.random.fold_in(key, 2), (n - p, config.d)))
    whole, other = jax.jit(
        jax.vmap(
            lambda x: (
                simulate_particles(
                    Masked(base, positions),
                    x,
                    config.t1,
                    dt0=config.t1 / config.steps,
                    solver=RK4(),
                    stepsize_controller=diffrax.ConstantStepSize(),
                    blowup_norm=None,
                ).final_x
            )
        )
    )(jnp.stack([x0, redrawn]))
    gap = float(jnp.max(jnp.abs(whole[:p] - other[:p])))
    run.consistency(
        "prefix_evolves_as_a_closed_system",
        expected=0.0,
        measured=gap,
        tolerance=1e-12,
        basis="float64 round-off (same RK4 steps)",
        note=f"first {p} of {n} tokens, the later {n - p} redrawn",
    )
