"""The copy-head claims' decision functions say ``holds`` on inputs where the claim is true by
construction (their negative controls, tests/test_negative_controls.py, feed them inputs where
it is false)."""

import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _transition
from jaxdyn.evidence import Verdict

H = np.log(2.0) / 2.0 ** np.arange(4)


@pytest.mark.parametrize(
    "order, steps",
    [
        (ch.TransitionOrder.first, 0.4 + 0.0 * H),
        (ch.TransitionOrder.second, 0.7 * np.sqrt(H)),
        (ch.TransitionOrder.crossover, 0.3 * H),
    ],
)
def test_order_evidence_holds_for_the_order_a_curve_has(order, steps):
    rng = np.random.default_rng(0)
    steps = steps * np.exp(1e-3 * rng.normal(size=H.size))
    refined = _transition.classify_refinement(H, steps)
    assert ch.claims.transition_order("o", order, refined).verdict is Verdict.holds
    other = next(o for o in ch.TransitionOrder if o is not order)
    assert ch.claims.transition_order("o", other, refined).verdict is Verdict.refuted


@pytest.mark.parametrize("seed", range(3))
def test_theory_match_holds_with_power_and_is_inconclusive_without(seed):
    """Datasets scattered around the theory: holds when t SE + bound is below the effect,
    inconclusive with too few datasets for it (the interval holds both)."""
    rng = np.random.default_rng(seed)
    theory = rng.uniform(0, 1, size=3)
    data = theory + 0.01 * rng.normal(size=(20, 3))
    assert ch.claims.matches_theory("m", data, theory, 0.2, bound=1e-3).holds
    few = theory + 0.2 * rng.normal(size=(3, 3))
    assert ch.claims.matches_theory("m", few, theory, 0.05).inconclusive


def test_local_form_evidence_names_the_law_a_series_follows():
    L = 2.0 ** np.arange(4, 21, 2)
    law, alt = (lambda x: x * np.log(x) ** 2), (lambda x: x * np.log(x))
    assert ch.claims.scaling_law(
        "s", L, 3.0 * law(L), law, alt, relative_error=1e-6, basis=""
    ).holds
    assert ch.claims.scaling_law(
        "s", L, 3.0 * alt(L), law, alt, relative_error=1e-6, basis=""
    ).refuted
    halfway = np.sqrt(law(L) * alt(L))  # the geometric mean lies between the two forms
    assert ch.claims.scaling_law(
        "s", L, halfway, law, alt, relative_error=1e-6, basis=""
    ).inconclusive


def test_extrapolated_exponent_recovers_an_asymptotic_exponent():
    """P = a ln^2 L + b ln L: local exponent in ln ln L = 2 - b / (a ln L + b) + ..., which the
    1 / ln L extrapolation takes to 2 while the local exponent is still far below it."""
    L = 2.0 ** np.arange(8, 41, 4)
    P = 0.6 * np.log(L) ** 2 + 4.0 * np.log(L)
    m = np.diff(np.log(P)) / np.diff(np.log(np.log(L)))
    mid = np.sqrt(L[1:] * L[:-1])
    assert m[-1] < 1.9
    ev = ch.claims.asymptotic_law("a", mid, m, 2.0, 1.0)
    assert ev.holds, ev


def test_hysteresis_coverage_boundary_and_onset_evidence_hold_where_true():
    assert ch.claims.hysteresis("h", [1.0, 1.0], expected=True).holds
    assert ch.claims.hysteresis("h", [0.0, 0.0], expected=False).holds
    assert ch.claims.hysteresis("h", [], expected=False).inconclusive
    assert ch.claims.hysteresis_window("w", [0.0, 0.5, 1.0, 0.0]).holds
    assert ch.claims.hysteresis_window("w", [1.0, 0.0, 1.0]).refuted
    assert ch.claims.copy_span_coverage("c", [0.97, 0.98, 0.99, 0.985]).holds
    L = np.array([16.0, 32.0])
    assert ch.claims.first_order_line_above_L("b", L, np.stack([1.5 * L, 1.6 * L], -1)).holds
    eps = np.geomspace(1e-4, 1e-2, 8)
    assert ch.claims.square_root_onset("o", eps, 0.3 * np.sqrt(eps) * (1 + 0.5 * eps)).holds
    assert ch.claims.pooling_first("p", 1.0, 0.01, 32).holds
    assert ch.claims.pooling_share(0.0, 1.0, 32) == pytest.approx(1 / 32)


def _series(exponents, x0=4.0, ratio=2.0):
    """y with the given local exponents between successive x = x0 ratio^k."""
    x = x0 * ratio ** np.arange(len(exponents) + 1)
    y = np.exp(np.concatenate([[0.0], np.cumsum(np.asarray(exponents) * np.log(ratio))]))
    return x, y


def test_a_law_is_not_decided_from_a_drifting_exponent():
    """The crossover's V exponents at L = 512 (issue 47): -0.19 .. 0.67 through 1/2. The last
    pair alone (0.55, within a quarter gap of 1/2) would say holds; two successive pairs do not."""
    x, y = _series([-0.19, 0.06, 0.24, 0.41, 0.55, 0.67])
    power = lambda k: lambda v: v**k
    ev = ch.claims.scaling_law("V^1/2", x, y, power(0.5), power(1.0), relative_error=1e-6, basis="")
    assert ev.inconclusive and "drift" in ev.reason, ev
    x, y = _series([-0.19, 0.06, 0.24, 0.41, 0.55])
    last_only = ch.claims.scaling_form("V^1/2", 0.55, 0.5, 1.0, error=1e-6, basis="")
    assert last_only.holds  # the rule of the last pair
    ev = ch.claims.scaling_law("V^1/2", x, y, power(0.5), power(1.0), relative_error=1e-6, basis="")
    assert ev.inconclusive and "crosses the law's band" in ev.reason, ev


@pytest.mark.parametrize(
    "exponents, verdict",
    [
        ([0.2, 0.4, 0.49, 0.51], Verdict.holds),  # settled into the law's band
        ([0.7, 0.9, 0.98, 1.01], Verdict.refuted),  # settled at the alternative
        ([0.2, 0.1, 0.05, 0.02], Verdict.refuted),  # settled beyond the law, away from both
        ([0.2, 0.4, 0.49, 0.7], Verdict.inconclusive),  # left the band again
    ],
)
def test_scaling_law_needs_two_successive_pairs(exponents, verdict):
    x, y = _series(exponents)
    ev = ch.claims.scaling_law(
        "x^1/2", x, y, lambda v: v**0.5, lambda v: v**1.0, relative_error=1e-6, basis=""
    )
    assert ev.verdict is verdict, ev


def test_the_experiments_named_claims_hold_on_their_law_and_not_on_a_counterfactual():
    """The named claims of the experiments (a law, a switch, a Laplace shift, a power gate):
    each holds on data following its claim and does not on a counterfactual (the alternative
    law, a switch at the spinodal, a mean at the mode, an underpowered comparison)."""
    rng = np.random.default_rng(0)
    L = 2.0 ** np.arange(8, 41, 4)
    x = np.array([4.0, 8, 16, 32, 64, 128])
    cases = [
        (
            ch.claims.softmax_P_star_law(L, np.log(L) ** 2),
            ch.claims.softmax_P_star_law(L, np.log(L)),
        ),
        (
            ch.claims.softmax_P_star_asymptotic(L, np.log(L) ** 2),
            ch.claims.softmax_P_star_asymptotic(L, np.log(L)),
        ),
        (ch.claims.onset_V2(x, 3.0 * x**2), ch.claims.onset_V2(x, 3.0 * x**1.5)),
        (
            ch.claims.crossover_law("c", x, x**1.5, 1.5, 1.0, 1e-9),
            ch.claims.crossover_law("c", x, x, 1.5, 1.0, 1e-9),
        ),
        (
            ch.claims.switch_at_P_star(
                np.log(19.5) + 0.01 * rng.normal(size=6), np.log(19.5), np.log(25.7), 0.01
            ),
            ch.claims.switch_at_P_star(
                np.log(25.7) + 0.01 * rng.normal(size=6), np.log(19.5), np.log(25.7), 0.01
            ),
        ),
        (
            ch.claims.laplace_shift("s", 0.034 + 0.002 * rng.normal(size=(5, 1)), [0.034]),
            ch.claims.laplace_shift("s", 0.002 * rng.normal(size=(5, 1)), [0.034]),
        ),
    ]
    for truth, counterfactual in cases:
        assert truth.holds, truth
        assert not counterfactual.holds, counterfactual
    assert ch.claims.laplace_shift("s", np.zeros((5, 1)), [np.nan], basis="kink").inconclusive
    data = 0.2 + 0.01 * rng.normal(size=(4, 1))
    held = ch.claims.matches_theory("m", data, [0.2], [1.0])
    assert held.holds
    weak = {
        "sufficient": False,
        "se": [0.3],
        "datasets": 4,
        "dof": 3,
        "threshold": 0.2,
        "datasets_needed": 9,
    }
    assert ch.claims.powered(held, weak).inconclusive
    assert ch.claims.powered(held, {**weak, "sufficient": True}).holds
