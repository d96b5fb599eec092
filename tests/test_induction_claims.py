"""The induction claims on curves where they are true by construction, and their negative
controls: the same decision on a counterfactual curve must not say ``holds``."""

import numpy as np
import pytest

import jaxdyn.induction as ind
from jaxdyn.evidence import Verdict

C = ind.claims
STEPS = ind.checkpoint_steps(2000, 28).astype(float)
X = np.log1p(STEPS)
LNK, UNI, BI = np.log(3), 1.04, 0.95


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _staged(x_uni=2.0, x_bi=5.0, width=0.15, final=BI):
    """ln k, then a dwell at the unigram loss, then a fall to ``final`` at ln(step) = x_bi."""
    return (
        final + (UNI - final) * _sig((x_bi - X) / width) + (LNK - UNI) * _sig((x_uni - X) / width)
    )


def _seeds(curve, n=3, noise=0.002, seed=0):
    rng = np.random.default_rng(seed)
    return curve + noise * rng.normal(size=(n, curve.size)), np.full((n, curve.size), 0.004)


def test_loss_plateau_holds_at_both_levels_of_a_staged_curve():
    loss, se = _seeds(_staged())
    for level, alts in ((UNI, (LNK, BI)), (BI, (UNI,))):
        ev = C.loss_plateau(STEPS, loss, se, level=level, level_se=0.002, alternatives=alts)
        assert ev.verdict is Verdict.holds, ev.reason


def test_loss_plateau_control_a_curve_that_passes_the_unigram_level_without_pausing():
    """Negative control: one fall from ln k to the bigram loss (no in-context unigram stage)."""
    curve = BI + (LNK - BI) * _sig((4.0 - X) / 0.3)
    loss, se = _seeds(curve)
    ev = C.loss_plateau(STEPS, loss, se, level=UNI, level_se=0.002, alternatives=(LNK, BI))
    assert ev.verdict is Verdict.refuted, ev.reason


def test_loss_plateau_control_a_curve_that_settles_above_the_level():
    """Negative control: the loss settles above the bigram loss (a model that cannot reach it)."""
    loss, se = _seeds(_staged(final=BI + 0.04))
    ev = C.loss_plateau(STEPS, loss, se, level=BI, level_se=0.002, alternatives=(UNI,))
    assert ev.verdict is Verdict.refuted, ev.reason


def test_loss_plateau_without_power_or_without_reaching_is_inconclusive():
    loss, se = _seeds(_staged(x_bi=20.0))  # the fall to the bigram level never happens
    ev = C.loss_plateau(STEPS, loss[:, :8], se[:, :8], level=BI, level_se=0.002)
    assert ev.verdict is Verdict.inconclusive
    ev = C.loss_plateau(STEPS, loss, se * 30, level=UNI, level_se=0.002, alternatives=(BI,))
    assert ev.verdict is Verdict.inconclusive


def _prev_score(x_mid):
    return 0.1 + 0.6 * _sig((X - x_mid) / 0.2)


def test_previous_token_head_first_holds_when_the_head_forms_before_the_loss_falls():
    loss, _ = _seeds(_staged(x_bi=5.0))
    prev = np.stack([_prev_score(4.6), _prev_score(4.8), _prev_score(5.0)])
    ev = C.previous_token_head_first(STEPS, prev, loss, start_level=UNI)
    assert ev.verdict is Verdict.holds, ev.reason


def test_previous_token_head_first_control_a_head_that_forms_after_the_fall():
    """Negative control: the score rises well after the loss has fallen (lagged by ln 4)."""
    loss, _ = _seeds(_staged(x_bi=5.0))
    prev = np.stack([_prev_score(5.0 + np.log(4.0))] * 3)
    ev = C.previous_token_head_first(STEPS, prev, loss, start_level=UNI)
    assert ev.verdict is Verdict.refuted, ev.reason


def test_previous_token_head_first_control_no_previous_token_head():
    loss, _ = _seeds(_staged(x_bi=5.0))
    prev = np.full((3, STEPS.size), 0.12)
    ev = C.previous_token_head_first(STEPS, prev, loss, start_level=UNI)
    assert ev.verdict is Verdict.refuted


def test_induction_head_holds_above_the_baseline_and_control_attention_that_ignores_content():
    assert C.induction_head([0.78, 0.74, 0.8, 0.76], 0.39).verdict is Verdict.holds
    # a one-layer model has no previous-token information to key on: near the baseline
    assert C.induction_head([0.36, 0.4, 0.37, 0.39], 0.39).verdict is Verdict.refuted
    with pytest.raises(ValueError, match="seeds"):
        C.induction_head([0.8], 0.39)


def _chains(curve, chains=16, offset=0.5, noise=0.05, seed=0):
    """Per-chain LLC curves as common random numbers give them: each chain its own offset
    (shared along training) and a little noise that changes with the weights."""
    rng = np.random.default_rng(seed)
    return (
        curve
        + offset * rng.normal(size=(chains, 1))
        + noise * rng.normal(size=(chains, curve.size))
    )


B1, B2 = 10, 18


def _kinked(x, first=1.5, second=-2.0):
    return 2 + 0.1 * x + first * np.maximum(x - x[B1], 0) + second * np.maximum(x - x[B2], 0)


def test_llc_trend_changes_measures_each_kink_over_the_stage_after_it():
    """Noiseless chains: the displacements are the slope changes times the stages' lengths."""
    x, steps = X[1:], STEPS[1:]
    ev = C.llc_trend_changes(steps, _chains(_kinked(x), noise=0.0), steps[[B2, B1]])
    expected = [1.5 * (x[B2] - x[B1]), -2.0 * (x[-1] - x[B2])]
    np.testing.assert_allclose(ev.measured, expected, rtol=1e-10)
    assert ev.verdict is Verdict.holds, ev.reason


@pytest.mark.parametrize("seed", range(3))
def test_llc_trend_changes_holds_for_a_broken_line_and_not_for_a_straight_one(seed):
    x, steps = X[1:], STEPS[1:]
    ev = C.llc_trend_changes(steps, _chains(_kinked(x), seed=seed), steps[[B1, B2]])
    assert ev.verdict is Verdict.holds, ev.reason
    # negative control: a steady trend with the same chains has no kink: refuted (each
    # displacement's interval is well inside +-1/2)
    ev = C.llc_trend_changes(steps, _chains(2 + 0.4 * x, seed=seed), steps[[B1, B2]])
    assert ev.verdict is Verdict.refuted, ev.reason
    # one boundary without a change is enough to refute
    ev = C.llc_trend_changes(steps, _chains(_kinked(x, first=0.0), seed=seed), steps[[B1, B2]])
    assert ev.verdict is Verdict.refuted, ev.reason


def test_llc_trend_changes_is_inconclusive_without_power_or_without_a_fit():
    x, steps = X[1:], STEPS[1:]
    # noise as large as the kinks: neither resolved nor excluded
    noisy = _chains(_kinked(x, first=0.5 / (x[B2] - x[B1])), chains=4, noise=0.5)
    assert C.llc_trend_changes(steps, noisy, steps[[B1, B2]]).verdict is Verdict.inconclusive
    # a change smaller than one parameter direction, resolved from 0, is not a change
    small = _chains(_kinked(x, first=0.2 / (x[B2] - x[B1]), second=0.0), noise=0.005)
    assert C.llc_trend_changes(steps, small, steps[[B1, B2]]).verdict is Verdict.refuted
    chains = _chains(_kinked(x))
    for bad in (
        dict(llc=chains[:1], boundaries=steps[[B1, B2]]),  # one chain: no spread
        dict(llc=chains, boundaries=[steps[B1], steps[B1] + 0.5]),  # no estimate in between
        dict(llc=chains, boundaries=[steps[0], steps[B2]]),  # one estimate up to the first
        dict(llc=chains, boundaries=[steps[B1], steps[-1]]),  # none after the last
        dict(llc=chains, boundaries=[]),
        dict(llc=chains[:, :-1], boundaries=steps[[B1, B2]]),  # shape mismatch
    ):
        ev = C.llc_trend_changes(steps, bad["llc"], bad["boundaries"])
        assert ev.verdict is Verdict.inconclusive, bad


def test_stage_boundaries_of_a_staged_curve():
    loss, se = _seeds(_staged(x_bi=5.0), n=1, noise=0.0)
    leave, settle = ind.stage_boundaries(STEPS, loss[0], se[0], unigram=UNI, unigram_se=0.0)
    z = 2.5758293035489004
    # the first checkpoint below UNI - z * se, and the first from which it stays near the end
    expected = int(np.flatnonzero(loss[0] < UNI - z * se[0])[0])
    assert leave == expected and 4.5 < X[leave] < 5.5
    near = np.abs(loss[0] - loss[0, -1]) <= z * np.sqrt(2) * se[0]
    assert settle > leave and np.all(near[settle:]) and not near[settle - 1]
    assert ind.stage_boundaries(STEPS[:6], loss[0, :6], se[0, :6], unigram=UNI, unigram_se=0.0) == (
        None,
        None,
    )
