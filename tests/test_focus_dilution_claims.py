"""Every claim of ``jaxdyn.gradflow.claims`` can go either way: on an input built to satisfy it
it holds, on a counterfactual it does not (fast: NumPy inputs, no flow)."""

import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn.gradflow import _measure

PI = np.array([0.75, 0.19, 0.05, 0.01])
H = 0.72714
EPS = np.array([0.0025, 0.005, 0.01, 0.02])
STAGES = ("condensation", "focus", "dilution", "new_direction")


def _drops(times):
    ts = np.linspace(0.0, 120.0, 241)
    return ts, np.where(ts[:, None] >= np.asarray(times)[None, :], 0.5 * H, H)


def _linearised_saddle(sign):
    """The linearised saddle: W0 = gamma alpha^T + noise, the unstable attention mode growing
    like e^{0.08 t} over a fixed part, with WK = sign WQ (sign -1: Phi along -pi pi^T)."""
    rng = np.random.default_rng(0)
    ts = np.linspace(0.0, 80.0, 81)
    gamma = 2.0 * PI / np.linalg.norm(PI)
    alpha, q = np.eye(3)[0], np.array([0.6, 0.8])
    W0 = np.stack([np.outer(gamma, alpha) + 1e-4 * rng.normal(size=(4, 3)) for _ in ts])
    amp = 1e-3 * np.exp(0.08 * ts)
    rest = 1e-3 * rng.normal(size=(2, 3, 2))
    WQ = np.stack([a * np.outer(alpha, q) + rest[0] for a in amp])
    WK = np.stack([sign * a * np.outer(alpha, q) + rest[1] for a in amp])
    sd = _measure.score_angle(ts, W0, WQ, WK, PI, 0.08, np.outer(gamma, alpha), 0.0, 80.0)
    return gf.claims.score_direction(sd["angle"], sd["bound"])


def _escape(slope):
    eps = np.tile([1e-2, 1e-3, 1e-4], 3)
    groups = np.repeat([0.01, 0.02, 0.03], 3)
    x = np.log(1 / eps)
    y = slope * x + 2 * groups + 3.0 * eps  # deterministic, with its O(eps) term
    return x, y, groups, eps


CASES = {
    "unigram_plateau": (
        lambda: gf.claims.unigram_plateau(H + 1e-6, 1e-5, H, np.log(4)),
        lambda: gf.claims.unigram_plateau(1.2, 0.01, H, np.log(4)),
    ),
    "condensation_alignment": (
        lambda: gf.claims.condensation_alignment(
            np.outer(PI, [1.0, 0, 0]),
            np.outer([1.0, 0, 0], PI - 0.25),
            PI,
            noise=1e-4,
            amplitude=1.0,
            nonlinearity=1e-4,
            rate=0.46,
        ),
        lambda: gf.claims.condensation_alignment(
            np.outer([0.1, 0.2, 0.3, 0.4], [1.0, 0, 0]),
            np.outer([1.0, 0, 0], [0.1, 0.2, 0.3, 0.4]),
            PI,
            noise=1e-4,
            amplitude=1.0,
            nonlinearity=1e-4,
            rate=0.46,
        ),
    ),
    "first_attention_phase": (
        lambda: gf.claims.first_attention_phase(-0.02, -1),
        lambda: gf.claims.first_attention_phase(0.08, -1),
    ),
    "stages_in_order": (
        lambda: gf.claims.stages_in_order(
            np.linspace(0, 400, 4001), dict(zip(STAGES, [15.0, 75.0, 100.0, 300.0], strict=True))
        ),
        lambda: gf.claims.stages_in_order(
            np.linspace(0, 400, 4001), dict(zip(STAGES, [15.0, 5.0, 100.0, 300.0], strict=True))
        ),
    ),
    "focus_fastest_for_frequent_queries": (
        lambda: gf.claims.focus_fastest_for_frequent_queries(*_drops([60, 70, 80, 90]), PI, H),
        lambda: gf.claims.focus_fastest_for_frequent_queries(*_drops([90, 80, 70, 60]), PI, H),
    ),
    "entropy_down_up_down": (
        lambda: gf.claims.entropy_down_up_down(0.5, 0.9, 0.6, H, 1e-4, complete=True),
        lambda: gf.claims.entropy_down_up_down(H, H, H, H, 1e-4, complete=True),
    ),
    "unstable_attention_mode": (
        lambda: gf.claims.unstable_attention_mode(
            np.array([0.08, 0.08, 0.0, -0.5]),
            np.array([1.0, 1.0, 0.5, 0.0]),
            0.08,
            2,
            tolerance=1e-10,
        ),
        lambda: gf.claims.unstable_attention_mode(
            np.array([0.08, 0.08, 0.03, -0.5]),
            np.array([1.0, 1.0, 0.0, 0.0]),
            0.08,
            2,
            tolerance=1e-10,
        ),
    ),
    "score_direction": (lambda: _linearised_saddle(+1.0), lambda: _linearised_saddle(-1.0)),
    "dilution_mode_rate": (
        lambda: gf.claims.dilution_mode_rate(0.0800, [0.0799, 0.0801], 0.002, 0.0798),
        lambda: gf.claims.dilution_mode_rate(0.0, [0.0, 0.0], 0.004, 0.0798),
    ),
    "linearisation_bound": (
        lambda: gf.claims.linearisation_bound(EPS, 0.3 * EPS**3),
        lambda: gf.claims.linearisation_bound(EPS, 0.3 * EPS * (1 + EPS)),
    ),
    "linearisation_error_order": (
        lambda: gf.claims.linearisation_error_order(EPS, 0.7 * EPS**3 * (1 + EPS**2)),
        lambda: gf.claims.linearisation_error_order(EPS, 0.7 * EPS**2 * (1 + EPS)),
    ),
    "attention_frozen_at_origin": (
        lambda: gf.claims.attention_frozen_at_origin(EPS, 0.2 * EPS**5),
        lambda: gf.claims.attention_frozen_at_origin(EPS, 0.2 * EPS * (1 + EPS)),
    ),
    "attention_change_order": (
        lambda: gf.claims.attention_change_order(EPS, 0.7 * EPS**5 * (1 + EPS**2)),
        lambda: gf.claims.attention_change_order(EPS, 0.7 * EPS**3 * (1 + EPS**2)),
    ),
    "transverse_rate_order": (
        lambda: gf.claims.transverse_rate_order(EPS, 0.094 * EPS * (1 + EPS**2)),
        lambda: gf.claims.transverse_rate_order(EPS, 0.3 * EPS**2 * (1 + EPS)),
    ),
    "tangential_order": (
        lambda: gf.claims.tangential_order(EPS, 0.3 * EPS**2 * (1 + EPS**2)),
        lambda: gf.claims.tangential_order(EPS, 0.3 * EPS * (1 + EPS)),
    ),
    "degenerate_stall": (
        lambda: gf.claims.degenerate_stall(np.array([1e-17, -2e-17]), 0.5),
        lambda: gf.claims.degenerate_stall(np.array([0.004, -0.004]), 0.5),
    ),
    "escape_time_log_eps": (
        lambda: gf.claims.escape_time_log_eps(
            *_escape(1.0)[:3], eps=_escape(1.0)[3], resolution=np.full(9, 0.01)
        ),
        lambda: gf.claims.escape_time_log_eps(
            *_escape(0.0)[:3], eps=_escape(0.0)[3], resolution=np.full(9, 0.01)
        ),
    ),
    "condensation_escape_time": (
        lambda: gf.claims.condensation_escape_time(
            *_escape(1.0)[:3], eps=_escape(1.0)[3], resolution=np.full(9, 0.01)
        ),
        lambda: gf.claims.condensation_escape_time(
            *_escape(2.0)[:3], eps=_escape(2.0)[3], resolution=np.full(9, 0.01)
        ),
    ),
    "escape_time_exponent": (
        lambda: gf.claims.escape_time_exponent(
            np.repeat([0.002, 0.003, 0.004, 0.005], 3),
            np.tile([1e-2, 1e-3, 1e-4], 4),
            (np.log(1 / np.tile([1e-2, 1e-3, 1e-4], 4)) - 2.0)
            / (0.094 * np.repeat([0.002, 0.003, 0.004, 0.005], 3)),
            0.094 * np.repeat([0.002, 0.003, 0.004, 0.005], 3),
        ),
        lambda: gf.claims.escape_time_exponent(
            np.repeat([0.005, 0.01, 0.02, 0.04], 3),
            np.tile([1e-2, 1e-3, 1e-4], 4),
            300.0 * np.log(1 / np.tile([1e-2, 1e-3, 1e-4], 4)),
            0.094 * np.repeat([0.005, 0.01, 0.02, 0.04], 3),
        ),
    ),
    "finite_converges": (
        lambda: gf.claims.finite_converges(
            "loss",
            np.repeat([1 / 8, 1 / 16, 1 / 32], 3),
            np.repeat([1 / 8, 1 / 16, 1 / 32], 3) * np.exp(0.05 * np.sin(np.arange(9))),
        ),
        lambda: gf.claims.finite_converges(
            "loss",
            np.repeat([1 / 8, 1 / 16, 1 / 32], 3),
            0.02 * np.exp(0.1 * np.random.default_rng(1).normal(size=9)),
        ),
    ),
    "adam_escapes_unigram_plateau": (
        lambda: gf.claims.adam_escapes_unigram_plateau([0.57, 0.60], H),
        lambda: gf.claims.adam_escapes_unigram_plateau([0.7271401, 0.7271405], 0.72714),
    ),
    "bigram_proxy_agrees": (
        lambda: gf.claims.bigram_proxy_agrees(
            "loss",
            np.linspace(1.0, 0.5, 10) + 0.001 * np.random.default_rng(4).normal(size=(40, 10)),
            np.linspace(1.0, 0.5, 10) + 0.001 * np.random.default_rng(5).normal(size=(40, 10)),
            0.02,
        ),
        lambda: gf.claims.bigram_proxy_agrees(
            "loss",
            0.70 + 0.002 * np.random.default_rng(2).normal(size=(6, 10)),
            0.72 + 0.002 * np.random.default_rng(3).normal(size=(6, 10)),
            0.01,
        ),
    ),
}


def test_every_claim_has_a_case():
    assert sorted(CASES) == sorted(gf.claims.__all__)


@pytest.mark.parametrize("claim", sorted(CASES))
def test_claim_holds_on_its_law_and_not_on_its_counterfactual(claim):
    holds, counterfactual = CASES[claim]
    ev = holds()
    assert ev.holds, (claim, ev.reason, ev.measured)
    assert not counterfactual().holds, claim


def test_escape_fit_is_judged_by_its_next_order_term_not_student_t():
    """Deterministic escape times with an O(eps) term: the fit with the term as a nuisance
    regressor recovers slope 1 to rounding, its tolerance is a derived bound (no standard
    error), and dropping the term would bias the slope by more than the spacing alone."""
    x, y, groups, eps = _escape(1.0)
    ev = gf.claims.escape_time_log_eps(x, y, groups, eps=eps, resolution=np.zeros(9))
    assert ev.error_model.name == "derived_bound"
    assert abs(ev.measured - 1.0) < 1e-10
    slope_without, _, _ = _measure.pooled_slope(x, y, groups)
    assert abs(slope_without - 1.0) > 1e-3  # what a fit without the next-order term reports
