"""copy-head-adam, copy-head-adam-linear: networks trained by Adam to the joint MAP against
the reduced MAP theory, one body for either head (copy_head.md, "Experiments")."""

from __future__ import annotations

import dataclasses
import types
from typing import ClassVar

import numpy as np

from ... import copyhead as ch
from ...copyhead import _compare as cmp, _members
from ...runs import Run, register_experiment
from ...sweep import Grid
from . import _common as cm, _figures

_OUTPUTS = "{} bootstrap_{} optimiser_error_{} bootstrap_optimiser_error_{}"  # cm.check_theory
ENERGY_EVERY = 10  # Adam steps between the recorded energies (the sweep's energy_trace)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AdamConfig(cm.NetworkConfig):
    """Adam (optax) to the joint MAP over (W, G), vmapped over P, seeds and two starts.

    Attributes:
        refine_levels, refine_width: nested grids of 2^k intervals (k <= refine_levels) on
            [P_t / refine_width, P_t refine_width] around the MAP theory's transition P_t.
        fall_width: for a continuous theory, the same nested grids on [P_f / fall_width,
            P_f fall_width] around the steepest fall P_f of the theory's test loss.
        steps, learning_rate, init_scale: Adam (cosine-decayed learning rate).
    """

    seeds: int = 4
    settings: tuple[tuple[int, int, int], ...] = ((16, 8, 4), (24, 4, 4))
    refine_levels: int = 4
    refine_width: float = 1.25
    fall_width: float = 1.5
    steps: int = 3000
    learning_rate: float = 0.03
    init_scale: float = 0.01

    RANGES: ClassVar[str] = "refine_levels >= 3; steps >= 10; learning_rate > 0; init_scale > 0"

    def validate(self) -> None:
        super().validate()
        cm.require(
            self.refine_width > 1 and self.fall_width > 1,
            f"refine_width and fall_width must be > 1, got {self.refine_width}, {self.fall_width}",
        )

    @classmethod
    def quick(cls) -> dict:
        return dict(steps=1500, seeds=3, refine_levels=3, P_values=(6.0, 64.0), settings=())


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearAdamConfig(AdamConfig):
    """:class:`AdamConfig` with linear attention and P around its onset."""

    attention: str = "linear"
    P_values: tuple[float, ...] = (4.0, 8.0, 64.0, 128.0, 256.0)

    @classmethod
    def quick(cls) -> dict:
        return {**AdamConfig.quick(), "P_values": (6.0, 96.0)}


def _theory(c: AdamConfig, run) -> types.SimpleNamespace:
    """The MAP theory and the P grid: the ``P_values``, nested grids ``refine_grid`` around
    the transition P_t and, for a continuous theory, ``fall_grid`` around its steepest
    test-loss fall (with the theory's loss there, ``fall_theory``)."""
    a = cm.reduced_theory(c, c.attention, "map")
    posterior, d = c.posterior(c.attention), a.diagram
    width, levels = c.refine_width, c.refine_levels
    a.refine_grid = np.geomspace(a.P_t / width, a.P_t * width, 2**levels + 1)
    a.loss = cmp.loss_branches(posterior, a.model, d, c.L, c.V)  # global, uniform, copy
    a.fall_grid = a.fall_theory = np.array([])
    if not a.first:
        fall = (c.fall_width, levels, c.L, c.V)
        a.fall_grid, a.fall_theory = cmp.fall_theory(posterior, a.model, d.P, a.loss[0], *fall)
    a.P_grid = np.unique(
        np.concatenate([np.asarray(c.P_values, float), a.refine_grid, a.fall_grid])
    )
    arrays = dict(zip(("test_loss", "test_loss_up", "test_loss_down"), a.loss, strict=True))
    arrays["x_global"] = d.x_global
    cm.record_theory(run, a, arrays, order_from_refinement=a.refined.as_dict())
    return a


def _run_adam(c: AdamConfig, run: Run) -> None:
    a = _theory(c, run)
    posterior = c.posterior(c.attention)
    fits = dict(
        steps=c.steps, init_scale=c.init_scale, record_every=ENERGY_EVERY, dtype=c.loop_dtype
    )
    P_max, copy_G = int(np.ceil(a.P_grid.max())), c.copy_scores(c.attention)
    member = _members.map_fits(posterior, copy_G, c.L, c.V, P_max, **fits)
    axes = {"P": a.P_grid, "start": [0.0, 1.0], "learning_rate": [c.learning_rate]}
    grid = Grid.product(axes, seeds=c.seeds, base_seed=c.seed)
    dims = {"G": cm.SCORE_DIMS, "energy_trace": ("step",)}
    coords = {"step": ENERGY_EVERY * np.arange(1, max(c.steps // ENERGY_EVERY, 1) + 1)}
    result = cm.snug_sweep(run, "adam", member, grid, c, dims=dims, coords=coords)
    run.scalar("failed_members", result.n_failed())
    P, seeds = result.params["P"], result.seeds
    keep = cmp.select_lower_energy(P, seeds, result.masked("energy")) & result.ok()
    far = np.isin(P, cmp.ladder(c.P_values, a.P_t, c.exclusion_factor)) & keep
    for key in (*c.keys(), "test_loss"):
        check = f"adam_{key}_matches_theory_away_from_transition"
        claim = f"trained networks' {key} equals the MAP theory's away from the transition"
        comparison = cm.check_theory(run, a, result, far, key, _OUTPUTS, check, claim)
        record = {k: v for k, v in comparison.items() if k != "table"}
        cm.save_record(run, f"adam.check_{key}_", record, f"adam_check_{key}_P", comparison["P"])
        run.scalar(f"adam_{key}_vs_theory", record)
    _check_refinement(run, a, result, keep)
    cm.check_hysteresis(run, "adam", result, result.masked(c.transition_key()), a, a.order)
    copy_phase = keep & (P >= 2 * a.P_t)
    if copy_phase.any():
        what, note = "the attention pattern's non-uniform variance", "networks at P >= 2 P_t"
        G, check = result.outputs["G"], "adam_coverage_of_copy_span"
        cm.check_coverage(run, check, what, posterior, G, copy_phase, seeds, note)
    keys = ("c_G", "delta") if c.attention == "softmax" else c.keys()
    _figures.network_figures(run, "adam", result, a, keys)


def _check_refinement(run, a, result, keep) -> None:
    """The transition's order from grid refinement of the trained networks against the
    theory's; the test-loss signature: its jump against the theory's drop between the same P
    (first order), or its bounded fall (continuous: :func:`_check_loss_fall`)."""
    c = a.config
    P, seeds = result.params["P"], result.seeds
    table = lambda grid, key: cmp.per_dataset(grid, P, seeds, result.masked(key), keep)
    key, levels = c.transition_key(), c.refine_levels
    refined = cmp.refinement(a.refine_grid, levels, table(a.refine_grid, key))
    run.scalar("adam_order_from_refinement", refined.as_dict())
    claim = f"trained networks: a {a.order.name}-order transition, as the theory"
    run.evidence(
        "adam_transition_order_from_refinement",
        ch.claims.transition_order(claim, a.order, refined),
        note=f"largest step of {key} between neighbouring P (median over datasets) vs "
        "spacing on nested grids around P_t; expected: the same method on the theory",
    )
    loss = table(a.refine_grid, "test_loss")
    if a.first:
        errors = table(a.refine_grid, "optimiser_error_test_loss")
        measured, expected, error = cmp.largest_drops(
            a.refine_grid, a.diagram.P, a.loss[1:], loss, errors
        )
        power = cmp.power_record((measured - expected)[:, None], np.mean(expected))
        run.scalar("adam_test_loss_jump_power", power)
        evidence = ch.claims.matches_theory(
            "the test loss drops at P* by the theory's jump",
            (measured - expected)[:, None],
            np.zeros(1),
            np.array([np.mean(expected)]),
            bound=cmp.optimiser_allowance(error),
            basis="per dataset: the largest drop between neighbouring P of the finest grid "
            "minus the theory's drop between the same P; alternative: no drop",
        )
        run.evidence(
            "adam_test_loss_jump_matches_theory",
            ch.claims.powered(evidence, power),
            note=f"measured drops {np.round(measured, 5).tolist()}, theory "
            f"{np.round(expected, 5).tolist()}",
        )
    run.evidence(
        "adam_test_loss_curve_signature",
        ch.claims.loss_jump(
            "the test loss has a sharp drop exactly where the transition is first order",
            a.first,
            cmp.refinement(a.refine_grid, levels, loss),
        ),
        note="refinement order of the test-loss curve around P_t",
    )
    if a.fall_grid.size:
        _check_loss_fall(run, a, lambda key: table(a.fall_grid, key))


def _check_loss_fall(run, a, table) -> None:
    """Continuous theories, around the theory's steepest test-loss fall (``table(key)``:
    dataset x P of ``fall_grid``): the largest loss step shrinks like the spacing as the
    theory's does (a bounded slope, no jump); and on the finest grid the bootstrap-corrected
    slope d loss / d ln P of each interval matches the theory's (plateau, then bounded fall)
    within 99% t x SE + the optimiser's Newton estimate over the interval."""
    grid, levels = a.fall_grid, a.config.refine_levels
    loss = table("test_loss")
    measured = cmp.refinement(grid, levels, loss)
    expected = cmp.refinement(grid, levels, a.fall_theory)
    run.evidence(
        "adam_test_loss_fall_order_from_refinement",
        ch.claims.transition_order(
            "the test loss falls as the theory's around its steepest fall (a bounded slope, "
            "no jump)",
            expected.order,
            measured,
        ),
        note=f"P {grid[0]:.4g}-{grid[-1]:.4g}: exponent {measured.fit.slope:.3f} (theory "
        f"{expected.fit.slope:.3f})",
    )
    slopes, opt, theory = cmp.fall_slopes(grid, table, a.fall_theory)
    orders = dict(measured_order=measured.as_dict(), theory_order=expected.as_dict())
    record = dict(slope=np.mean(slopes, axis=0), theory_slope=theory, optimiser=opt)
    run.scalar("adam_test_loss_fall", {"P": grid, **orders, **record})
    run.evidence(
        "adam_test_loss_slope_matches_theory",
        ch.claims.matches_theory(
            "d test loss / d ln P follows the theory around its steepest fall (plateau, then a "
            "bounded fall)",
            slopes,
            theory,
            np.full(theory.shape, 0.5 * float(np.max(np.abs(theory)))),
            bound=opt,
            basis="bootstrap-corrected slopes per interval of the finest grid; alternative: "
            "off by half the steepest slope; bound: the optimiser's Newton estimate",
        ),
    )


def run_adam(config: AdamConfig, run: Run) -> None:
    """Either head's experiment at its (L, V) and at each of its further ``settings``."""
    cm.for_each_setting(config, run, _run_adam)


for _name, _config, _description, _title in (
    ("copy-head-adam", AdamConfig, "softmax networks by Adam to the MAP: jump (grid "
     "refinement), hysteresis, loss drop, theory", "Softmax networks trained by Adam to the MAP"),
    ("copy-head-adam-linear", LinearAdamConfig, "linear networks by Adam to the MAP: square-root "
     "onset, no jump, no hysteresis, theory", "Linear networks trained by Adam to the MAP"),
):  # fmt: skip
    register_experiment(
        _name, _config, _description, title=_title, docs="copy_head.md#what-the-experiments-find"
    )(run_adam)
