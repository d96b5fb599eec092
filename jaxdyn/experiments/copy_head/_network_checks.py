"""All checks of trained networks, and those under refinement of the P grid: the transition's
order, and the shape of the test-loss curve (copy_head.md, "What the theory predicts":
softmax, a sharp loss drop at P*; linear, a continuous fall, a plateau, then a slower fall)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import copyhead as ch
from ...copyhead import _transition
from ._common import check_hysteresis, power_record, powered
from ._networks import (
    NetworkAnalysis,
    compare_away,
    optimiser_allowance,
    order_keys,
    select_lower_energy,
    transition_key,
)


def per_dataset(grid, P, seeds, values, keep) -> np.ndarray:
    """(dataset, grid point) table of ``values`` of the kept (lower-energy) runs."""
    return np.array(
        [
            [np.nanmean(values[np.isclose(P, p) & (seeds == s) & keep]) for p in grid]
            for s in np.unique(seeds)
        ]
    )


def level_steps(grid: np.ndarray, levels: int, table: np.ndarray) -> np.ndarray:
    """(dataset, level) largest step between neighbours on the nested grids of 2^k
    intervals (k = 1..levels) of ``grid`` (2^levels + 1 points)."""
    n = grid.size - 1
    return np.array(
        [
            [_transition.largest_step(grid[:: n // 2**k], v[:: n // 2**k]) for k in range(1, levels + 1)]
            for v in np.atleast_2d(table)
        ]
    )


def _spacing(grid: np.ndarray, levels: int) -> np.ndarray:
    return np.log(grid[-1] / grid[0]) / 2.0 ** np.arange(1, levels + 1)


def _largest_loss_drops(a: NetworkAnalysis, loss: np.ndarray, errors: np.ndarray):
    """Per dataset on the finest grid: the largest drop of the test loss between neighbours,
    the theory's drop between the same P (uniform branch below, copy branch above) and the
    Newton estimate of the drop's optimisation error (both ends)."""
    lp, dP = np.log(a.refine_grid), np.log(a.diagram.P)
    up, down = (np.interp(lp, dP, b) for b in a.loss_branches)
    measured, expected, error = [], [], []
    for v, e in zip(loss, errors, strict=True):
        i = int(np.nanargmax(np.abs(np.diff(v))))
        measured.append(abs(v[i + 1] - v[i]))
        expected.append(abs(up[i] - down[i + 1]))
        error.append(e[i] + e[i + 1])
    return np.asarray(measured), np.asarray(expected), np.asarray(error)


def check_refinement(run, name: str, a: NetworkAnalysis, result, keep) -> None:
    """The order of the transition from grid refinement of the trained networks against the
    same method on the theory; the test-loss jump (first order) or the bounded fall (continuous
    theories, :func:`check_loss_fall`)."""
    c = a.config
    P, seeds = result.params["P"], result.seeds
    table = lambda grid, key: per_dataset(grid, P, seeds, result.masked(key), keep)
    spacing = _spacing(a.refine_grid, c.refine_levels)
    key = transition_key(c)
    steps = level_steps(a.refine_grid, c.refine_levels, table(a.refine_grid, key))
    refined = _transition.classify_refinement(spacing, np.median(steps, axis=0))
    run.scalar(f"{name}_order_from_refinement", refined.as_dict())
    run.evidence(
        f"{name}_transition_order_from_refinement",
        ch.claims.transition_order(
            f"trained networks: a {a.expected_order.name}-order transition, as the theory",
            a.expected_order,
            refined,
        ),
        note=f"largest step of {key} between neighbouring P (median over datasets) vs "
        "spacing on nested grids around P_t; expected: the same method on the theory",
    )
    loss = table(a.refine_grid, "test_loss")
    first = a.expected_order is ch.TransitionOrder.first
    if first:
        errors = table(a.refine_grid, "optimiser_error_test_loss")
        measured, expected, error = _largest_loss_drops(a, loss, errors)
        power = power_record((measured - expected)[:, None], np.mean(expected))
        run.scalar(f"{name}_test_loss_jump_power", power)
        run.evidence(
            f"{name}_test_loss_jump_matches_theory",
            powered(
                ch.claims.matches_theory(
                    "the test loss drops at P* by the theory's jump",
                    (measured - expected)[:, None],
                    np.zeros(1),
                    np.array([np.mean(expected)]),
                    bound=optimiser_allowance(error),
                    basis="per dataset: the largest drop between neighbouring P of the finest "
                    "grid minus the theory's drop between the same P; alternative: no drop; "
                    "bound: the optimiser's Newton estimate; inconclusive unless SE <= "
                    "drop / 5",
                ),
                power,
            ),
            note=f"measured drops {np.round(measured, 5).tolist()}, theory "
            f"{np.round(expected, 5).tolist()}",
        )
    loss_refined = _transition.classify_refinement(
        spacing, np.median(level_steps(a.refine_grid, c.refine_levels, loss), axis=0)
    )
    run.evidence(
        f"{name}_test_loss_curve_signature",
        ch.claims.loss_jump(
            "the test loss has a sharp drop exactly where the transition is first order",
            first,
            loss_refined,
        ),
        note="refinement order of the test-loss curve around P_t",
    )
    if a.fall_grid.size:
        check_loss_fall(run, name, a, lambda key: table(a.fall_grid, key))


def check_loss_fall(run, name: str, a: NetworkAnalysis, table) -> None:
    """Continuous theories: the test loss around the theory's steepest fall (above the onset:
    the crossover to copying), on nested grids (``table(key)``: dataset x P of ``fall_grid``).

    Refinement: the largest loss step between neighbours against the spacing; a bounded
    slope d loss / d ln P shrinks it like the spacing (order "crossover"), a sharp drop keeps
    it finite ("first"); expected: the same method on the theory's loss at the same P.
    Shape: on the finest grid, the slope d loss / d ln P of each interval (bootstrap-corrected,
    as :func:`compare_away`) against the theory's, within 99% t x SE over datasets + the
    optimiser's Newton estimate over the interval; this covers the plateau (a small slope)
    before the bounded fall."""
    c = a.config
    spacing = _spacing(a.fall_grid, c.refine_levels)
    loss = table("test_loss")
    steps = level_steps(a.fall_grid, c.refine_levels, loss)
    theory_steps = level_steps(a.fall_grid, c.refine_levels, a.fall_theory)[0]
    measured = _transition.classify_refinement(spacing, np.median(steps, axis=0))
    expected = _transition.classify_refinement(spacing, theory_steps)
    run.evidence(
        f"{name}_test_loss_fall_order_from_refinement",
        ch.claims.transition_order(
            "the test loss falls as the theory's around its steepest fall (a bounded slope, "
            "no jump)",
            expected.order,
            measured,
        ),
        note=f"P {a.fall_grid[0]:.4g}-{a.fall_grid[-1]:.4g}: largest loss step (median over "
        f"datasets) vs spacing, exponent {measured.fit.slope:.3f} (theory "
        f"{expected.fit.slope:.3f})",
    )
    h = np.diff(np.log(a.fall_grid))
    corrected = 2.0 * loss - table("bootstrap_test_loss")
    error = 2.0 * table("optimiser_error_test_loss") + table("bootstrap_optimiser_error_test_loss")
    slopes = np.diff(corrected, axis=1) / h
    opt = np.array([optimiser_allowance(e) for e in ((error[:, :-1] + error[:, 1:]) / h).T])
    theory = np.diff(a.fall_theory) / h
    steepest = float(np.max(np.abs(theory)))
    ev = ch.claims.matches_theory(
        "d test loss / d ln P follows the theory around its steepest fall (plateau, then a "
        "bounded fall)",
        slopes,
        theory,
        np.full(theory.shape, 0.5 * steepest),
        bound=opt,
        basis="bootstrap-corrected slopes per interval of the finest grid; alternative: off "
        "by half the steepest slope; bound: the optimiser's Newton estimate",
    )
    run.scalar(
        f"{name}_test_loss_fall",
        {
            "P": a.fall_grid.tolist(),
            "measured_order": measured.as_dict(),
            "theory_order": expected.as_dict(),
            "slope": np.mean(slopes, axis=0).tolist(),
            "slope_uncorrected": np.mean(np.diff(loss, axis=1) / h, axis=0).tolist(),
            "theory_slope": theory.tolist(),
            "optimiser": opt.tolist(),
        },
    )
    run.evidence(f"{name}_test_loss_slope_matches_theory", ev)


def check_networks(run, name: str, a: NetworkAnalysis, result) -> None:
    """All network checks: theory away from the transition (bootstrap-corrected, with each
    run's Newton estimate of its optimisation error), refinement order and loss signature,
    hysteresis between starts, coverage of span{U, S} in the copy phase."""
    keep = select_lower_energy(result) & result.ok()
    for key in (*order_keys(a.config), "test_loss"):
        compare_away(run, name, a, result, keep, key)
    check_refinement(run, name, a, result, keep)
    values = result.masked(transition_key(a.config))  # against the order found by refinement
    check_hysteresis(
        run, name, result, values, a.expected_order, a.info, a.diagram, a.config.window_margin
    )
    P, seeds = result.params["P"], result.seeds
    copy_phase = keep & (P >= 2 * a.P_t)
    if copy_phase.any():
        posterior = a.config.posterior(a.config.attention)
        A = jax.vmap(posterior.attention)(jnp.asarray(result.outputs["G"]))
        per_dataset = [
            float(ch.coverage(A[copy_phase & (seeds == s)])) for s in np.unique(seeds[copy_phase])
        ]
        run.evidence(
            f"{name}_coverage_of_copy_span",
            ch.claims.copy_span_coverage(COVERAGE_CLAIM, per_dataset),
            note=f"networks at P >= 2 P_t, per dataset {np.round(per_dataset, 4).tolist()}",
        )


COVERAGE_CLAIM = (
    "span{U, S} captures the vast majority (>= 0.9) of the attention pattern's non-uniform "
    "variance in the copy phase"
)
