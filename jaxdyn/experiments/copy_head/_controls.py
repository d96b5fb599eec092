"""Negative controls of every copy-head evidence check: the check's decision function fed a
synthetic counterfactual on which its claim is false (tests/test_negative_controls.py asserts
that none of them says ``holds``)."""

from __future__ import annotations

import numpy as np

from ... import copyhead as ch
from ...copyhead import _bimodality, _transition
from ...runs import negative_control
from ._exact_hysteresis import switch_evidence
from .scaling import (
    CROSSOVER_L_CLAIM,
    CROSSOVER_V_CLAIM,
    crossover_evidence,
    onset_law_evidence,
    softmax_P_star_asymptotic_evidence,
    softmax_P_star_evidence,
)
from .theory import CONTINUOUS_CLAIM, FIRST_ORDER_CLAIM, ONSET_CLAIM, POOLING_FIRST_CLAIM

THEORY, SCALING = "copy-head-theory", "copy-head-scaling"
ADAM = ("copy-head-adam", "copy-head-adam-linear")
SGLD = ("copy-head-sgld", "copy-head-sgld-linear")
_rng = np.random.default_rng(0)
_h = np.log(2.0) / 2.0 ** np.arange(4)  # refinement spacings


def _register(experiments, *checks):
    def wrap(fn):
        for e in (experiments,) if isinstance(experiments, str) else experiments:
            for check in checks:
                negative_control(e, check)(fn)
        return fn

    return wrap


def _smooth():
    """Refinement of a smooth curve: the largest step shrinks like the spacing."""
    return _transition.classify_refinement(_h, 0.3 * _h)


def _jump():
    """Refinement of a jump: the largest step stays the jump."""
    return _transition.classify_refinement(_h, np.full(_h.shape, 0.4) + 1e-3 * _h)


# -- transitions: orders, hysteresis, phases ------------------------------------------------
@_register((THEORY, *ADAM), "softmax_first_order_where_page_predicts")
def _smooth_crossover_is_not_first_order():
    return ch.claims.transition_order(FIRST_ORDER_CLAIM, ch.TransitionOrder.first, _smooth())


@_register(THEORY, "linear_transition_continuous")
def _jump_is_not_continuous():
    return ch.claims.transition_order(CONTINUOUS_CLAIM, ch.TransitionOrder.second, _jump())


@_register(
    ADAM, "adam_transition_order_from_refinement", "adam_test_loss_fall_order_from_refinement"
)
def _network_order_of_another_kind():
    return ch.claims.transition_order("network order", ch.TransitionOrder.first, _smooth())


@_register(ADAM, "adam_test_loss_curve_signature")
def _smooth_loss_has_no_jump():
    return ch.claims.loss_jump("loss jump", True, _smooth())


@_register(THEORY, "softmax_no_pooling_phase")
def _third_minimum():
    counts = np.array([1, 2, 3, 2, 1])
    return ch.claims.minima_at_most("no pooling phase", counts, 2, basis="synthetic")


@_register(THEORY, "linear_onset_exponent")
def _linear_rise_is_not_square_root():
    eps = np.geomspace(1e-4, 1e-2, 8)
    return ch.claims.square_root_onset(ONSET_CLAIM, eps, 0.7 * eps)


@_register(THEORY, "linear_pools_first")
def _copy_direction_onset():
    return ch.claims.pooling_first(POOLING_FIRST_CLAIM, 0.0, 0.1, 32)


_HYSTERESIS = [
    f"{p}_{c}"
    for p in ("softmax_exact_action", "linear_exact_action")
    for c in ("hysteresis_inside_window", "no_hysteresis_outside_window", "no_hysteresis")
]


@_register(THEORY, *_HYSTERESIS)
@_register(ADAM, "adam_hysteresis_inside_window", "adam_no_hysteresis_outside_window")
@_register(ADAM, "adam_no_hysteresis")
def _hysteresis_against_the_claim():
    """Starts that agree where the claim says they disagree (and the reverse): the one
    function decides both, so the control feeds each expectation its opposite."""
    inside = ch.claims.hysteresis("x", np.array([0.0, 0.5, 0.0]), expected=True)
    outside = ch.claims.hysteresis("x", np.array([0.0, 1.0, 0.0]), expected=False)
    assert inside.verdict is outside.verdict
    return inside


@_register(SGLD, "sgld_hysteresis_window")
def _no_window():
    return ch.claims.hysteresis_window("window", np.zeros(5))


@_register(SGLD, "sgld_no_hysteresis")
def _chains_apart():
    return ch.claims.hysteresis("no hysteresis", np.array([0.0, 1.0, 1.0]), expected=False)


@_register(SGLD, "posterior_bimodal_exactly_where_hysteresis")
def _unimodal_posterior_with_hysteresis():
    """Samples from one Gaussian (a model without the transition) where chains stay apart."""
    samples = _rng.normal(size=(2, 400))
    bimodal = [_bimodality.bimodality(s, min_separation=0.5).bimodal for s in samples]
    return ch.claims.bimodal_where_hysteretic("bimodal", np.array([True, True]), np.array(bimodal))


@_register(THEORY, "softmax_exact_action_switch_matches_reduced_P_star")
def _switch_at_the_spinodal():
    ln_spinodal = np.log(25.7)
    return switch_evidence(
        ln_spinodal + 0.01 * _rng.normal(size=6), np.log(19.5), ln_spinodal, 0.05
    )


# -- networks and posterior against the theory ---------------------------------------------
def _off_by_the_effect(n=12, k=3):
    theory = np.linspace(0.1, 0.5, k)
    effect = np.full(k, 0.3)
    data = theory + effect + 0.01 * _rng.normal(size=(n, k))
    return ch.claims.matches_theory("matches", data, theory, effect, bound=1e-3)


@_register(
    ADAM,
    "adam_c_1_matches_theory_away_from_transition",
    "adam_c_G_matches_theory_away_from_transition",
    "adam_test_loss_matches_theory_away_from_transition",
    "adam_test_loss_slope_matches_theory",
)
@_register(SGLD, "posterior_mode_c_1_matches_theory", "posterior_mode_c_G_matches_theory")
def _other_phase():
    return _off_by_the_effect()


@_register(ADAM, "adam_test_loss_jump_matches_theory")
def _no_loss_drop():
    expected = np.full(10, 0.2)
    measured = 1e-3 * np.abs(_rng.normal(size=10))
    return ch.claims.matches_theory(
        "jump", (measured - expected)[:, None], np.zeros(1), np.array([0.2])
    )


@_register(ADAM, "adam_coverage_of_copy_span")
@_register(SGLD, "posterior_mode_coverage_of_copy_span")
def _random_attention_is_not_covered():
    L = 16
    G = _rng.normal(size=(6, 4, L, L)) * 3.0
    A = np.exp(G) / np.exp(G).sum(-1, keepdims=True)
    return ch.claims.copy_span_coverage("coverage", [float(ch.coverage(a)) for a in A])


@_register(SGLD, "precursor_variance_matches_laplace")
def _capped_fluctuations():
    ratios = 0.3 + 0.02 * _rng.normal(size=(8, 2))
    return ch.claims.matches_theory("laplace", ratios, np.ones(2), np.full(2, 0.5))


@_register(SGLD, "precursor_as_page_predicts")
def _flat_variance_before_an_onset():
    rise = 0.02 * _rng.normal(size=8)
    return ch.claims.matches_theory(
        "rise", rise[:, None], np.array([1.2]), np.array([1.2]), alternative=np.zeros(1)
    )


# -- scaling laws: synthetic P*(L, V) following another law --------------------------------
_L = 4.0 ** np.arange(2, 11)


@_register(SCALING, "softmax_P_star_L_ln2L_at_range")
def _P_star_L_ln_L():
    return softmax_P_star_evidence(_L, 0.6 * np.log(_L) + 5.0)


@_register(SCALING, "softmax_P_star_L_ln2L_asymptotic")
def _P_star_L_ln_L_asymptotically():
    return softmax_P_star_asymptotic_evidence(_L, 0.6 * np.log(_L) + 5.0)


@_register(SCALING, "linear_onset_V2", "linear_onset_V2_alpha0")
def _onset_three_halves():
    V = np.array([4.0, 8.0, 16.0, 32.0, 64.0])
    return onset_law_evidence(V, 1.3 * V**1.5)


@_register(SCALING, "linear_crossover_L_three_halves")
def _crossover_linear_in_L():
    L = np.array([32.0, 64.0, 128.0, 256.0])
    return crossover_evidence(CROSSOVER_L_CLAIM, L, 2.0 * L, 1.5, 1.0, 1e-3)


@_register(SCALING, "linear_crossover_V_half")
def _crossover_linear_in_V():
    V = np.array([4.0, 8.0, 16.0, 32.0])
    return crossover_evidence(CROSSOVER_V_CLAIM, V, 2.0 * V, 0.5, 1.0, 1e-3)


@_register(SCALING, "first_order_line_extends_beyond_V_equals_L")
def _line_ends_below_V_equals_L():
    L = np.array([16.0, 24.0, 32.0])
    return ch.claims.first_order_line_above_L("V_c > L", L, np.stack([0.5 * L, 0.55 * L], -1))
