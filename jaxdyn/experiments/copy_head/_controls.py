"""Negative controls of every copy-head evidence check: the check's decision fed a synthetic
counterfactual on which its claim is false (tests/test_negative_controls.py asserts that none
of them says ``holds``)."""

from __future__ import annotations

import numpy as np

from ... import copyhead as ch
from ...copyhead import _bimodality, _transition
from ...runs import negative_control
from .scaling import CROSSOVER_L_CLAIM, CROSSOVER_V_CLAIM
from .theory import CONTINUOUS_CLAIM, FIRST_ORDER_CLAIM, ONSET_CLAIM, POOLING_FIRST_CLAIM

_rng = np.random.default_rng(0)
_h = np.log(2.0) / 2.0 ** np.arange(4)  # refinement spacings
_smooth = lambda: _transition.classify_refinement(_h, 0.3 * _h)  # steps shrink like h
_jump = lambda: _transition.classify_refinement(_h, np.full(_h.shape, 0.4) + 1e-3 * _h)
_L = 4.0 ** np.arange(2, 11)
_first = ch.TransitionOrder.first


def _hysteresis_against_the_claim():
    """Starts that agree where the claim says they disagree (and the reverse): one function
    decides both, so the control feeds each expectation its opposite."""
    inside = ch.claims.hysteresis("x", np.array([0.0, 0.5, 0.0]), expected=True)
    outside = ch.claims.hysteresis("x", np.array([0.0, 1.0, 0.0]), expected=False)
    assert inside.verdict is outside.verdict
    return inside


def _unimodal_posterior_with_hysteresis():
    """Samples from one Gaussian (a model without the transition) where chains stay apart."""
    samples = _rng.normal(size=(2, 400))
    bimodal = [_bimodality.bimodality(s, min_separation=0.5).bimodal for s in samples]
    return ch.claims.bimodal_where_hysteretic("bimodal", np.array([True, True]), np.array(bimodal))


def _off_by_the_effect(n=12, k=3):
    """Runs in the other phase: the theory displaced by the effect to detect."""
    theory, effect = np.linspace(0.1, 0.5, k), np.full(k, 0.3)
    data = theory + effect + 0.01 * _rng.normal(size=(n, k))
    return ch.claims.matches_theory("matches", data, theory, effect, bound=1e-3)


def _random_attention_is_not_covered():
    G = _rng.normal(size=(6, 4, 16, 16)) * 3.0
    A = np.exp(G) / np.exp(G).sum(-1, keepdims=True)
    return ch.claims.copy_span_coverage("coverage", [float(ch.coverage(a)) for a in A])


cl, a_ = ch.claims, np.array
_L4, _Lb = a_([4.0, 8, 16, 32, 64]), a_([16.0, 24, 32])
_CONTROLS = [  # (experiment groups, checks, counterfactual)
    ("theory adam", "softmax_first_order_where_page_predicts",
     lambda: cl.transition_order(FIRST_ORDER_CLAIM, _first, _smooth())),
    ("theory", "linear_transition_continuous",
     lambda: cl.transition_order(CONTINUOUS_CLAIM, ch.TransitionOrder.second, _jump())),
    ("adam", "adam_transition_order_from_refinement adam_test_loss_fall_order_from_refinement",
     lambda: cl.transition_order("order", _first, _smooth())),
    ("adam", "adam_test_loss_curve_signature", lambda: cl.loss_jump("jump", True, _smooth())),
    ("theory", "softmax_no_pooling_phase",  # a third minimum
     lambda: cl.minima_at_most("no pooling", a_([1, 2, 3, 2, 1]), 2, basis="x")),
    ("theory", "linear_onset_exponent",  # a linear rise
     lambda: cl.square_root_onset(ONSET_CLAIM, *(np.geomspace(1e-4, 1e-2, 8) * [[1], [0.7]]))),
    ("theory", "linear_pools_first",  # onset in the copy direction
     lambda: cl.pooling_first(POOLING_FIRST_CLAIM, 0.0, 0.1, 32)),
    ("theory", " ".join(f"{p}_exact_action_{c}" for p in ("softmax", "linear") for c in (
        "hysteresis_inside_window", "no_hysteresis_outside_window", "no_hysteresis")),
     _hysteresis_against_the_claim),
    ("adam", "adam_hysteresis_inside_window adam_no_hysteresis_outside_window adam_no_hysteresis",
     _hysteresis_against_the_claim),
    ("sgld", "sgld_hysteresis_window", lambda: cl.hysteresis_window("window", np.zeros(5))),
    ("sgld", "sgld_no_hysteresis",
     lambda: cl.hysteresis("no hysteresis", a_([0.0, 1.0, 1.0]), expected=False)),
    ("sgld", "posterior_bimodal_exactly_where_hysteresis", _unimodal_posterior_with_hysteresis),
    ("theory", "softmax_exact_action_switch_matches_reduced_P_star",  # at the spinodal
     lambda: cl.switch_at_P_star(
         np.log(25.7) + 0.01 * _rng.normal(size=6), np.log(19.5), np.log(25.7), 0.05)),
    ("adam", " ".join(f"adam_{k}_matches_theory_away_from_transition" for k in (
        "c_1", "c_G", "test_loss")) + " adam_test_loss_slope_matches_theory", _off_by_the_effect),
    ("sgld", "posterior_mode_c_1_matches_theory posterior_mode_c_G_matches_theory",
     _off_by_the_effect),
    ("adam", "adam_test_loss_jump_matches_theory",  # no drop
     lambda: cl.matches_theory(
         "jump", (1e-3 * np.abs(_rng.normal(size=10)) - 0.2)[:, None], np.zeros(1), a_([0.2]))),
    ("adam", "adam_coverage_of_copy_span", _random_attention_is_not_covered),
    ("sgld", "posterior_mode_coverage_of_copy_span", _random_attention_is_not_covered),
    ("sgld", "posterior_mean_c_1_matches_laplace posterior_mean_c_G_matches_laplace",
     lambda: cl.laplace_shift(  # the mean at the mode, against softmax's shift at L=64, P=64
         "mean = mode + shift", 0.002 * _rng.normal(size=(4, 2)), a_([0.034, 0.03]))),
    ("sgld", "precursor_variance_matches_laplace",  # fluctuations capped below Laplace's
     lambda: cl.matches_theory(
         "laplace", 0.3 + 0.02 * _rng.normal(size=(8, 2)), np.ones(2), np.full(2, 0.5))),
    ("sgld", "precursor_as_page_predicts",  # a flat variance before an onset
     lambda: cl.matches_theory(
         "rise", 0.02 * _rng.normal(size=(8, 1)), a_([1.2]), a_([1.2]), alternative=np.zeros(1))),
    # scaling laws: synthetic P*(L, V) following another law
    ("scaling", "softmax_P_star_L_ln2L_at_range",
     lambda: cl.softmax_P_star_law(_L, 0.6 * np.log(_L) + 5.0)),
    ("scaling", "softmax_P_star_L_ln2L_asymptotic",
     lambda: cl.softmax_P_star_asymptotic(_L, 0.6 * np.log(_L) + 5.0)),
    ("scaling", "linear_onset_V2 linear_onset_V2_alpha0", lambda: cl.onset_V2(_L4, 1.3 * _L4**1.5)),
    ("scaling", "linear_crossover_L_three_halves",  # linear in L
     lambda: cl.crossover_law(CROSSOVER_L_CLAIM, 8 * _L4[:4], 16 * _L4[:4], 1.5, 1.0, 1e-3)),
    ("scaling", "linear_crossover_V_half",  # linear in V
     lambda: cl.crossover_law(CROSSOVER_V_CLAIM, _L4[:4], 2 * _L4[:4], 0.5, 1.0, 1e-3)),
    ("scaling", "first_order_line_extends_beyond_V_equals_L",  # the line ends below V = L
     lambda: cl.first_order_line_above_L("V_c > L", _Lb, _Lb[:, None] * [0.5, 0.55])),
]  # fmt: skip
_GROUPS = {"theory": ("",), "scaling": ("",), "adam": ("", "-linear"), "sgld": ("", "-linear")}
# a group's experiments: copy-head-<group><suffix>
for _groups, _checks, _control in _CONTROLS:
    for _experiment in (f"copy-head-{g}{h}" for g in _groups.split() for h in _GROUPS[g]):
        for _check in _checks.split():
            negative_control(_experiment, _check)(_control)
