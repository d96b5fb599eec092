"""Negative controls of copy-head-llc's evidence checks: the same decision on a counterfactual
(an estimate at the wrong theory's value), which must not say ``holds``
(tests/test_negative_controls.py runs them)."""

from __future__ import annotations

from types import SimpleNamespace

from ...llc import claims
from ...runs import negative_control

EXPERIMENT = "copy-head-llc"


@negative_control(EXPERIMENT, "regression_d_over_2")
def _regression_one_parameter_more():
    # an estimate from a model with d + 1 parameters, judged against d / 2 (d = 4)
    return claims.learning_coefficient(
        "regression_d_over_2",
        prediction=2.0,
        alternatives=[1.5, 2.5],
        value=2.5,
        stderr=0.03,
        num_chains=16,
        bias=0.01,
    )


@negative_control(EXPERIMENT, "regression_stationary")
def _drifting_chains():
    est = SimpleNamespace(llc=2.0, half_drift=0.6, half_drift_stderr=0.05, num_chains=16)
    return claims.stationary(est)


@negative_control(EXPERIMENT, "copy_head_symmetries")
def _gauge_ignored():
    # softmax, L = V = 3: an estimate at d / 2 = 9 judged against (d - L) / 2 = 7.5
    return claims.learning_coefficient(
        "copy_head_symmetries",
        prediction=7.5,
        alternatives=[9.0],
        value=9.0,
        stderr=0.15,
        num_chains=16,
        bias=0.05,
    )


@negative_control(EXPERIMENT, "rrr_aoyagi")
def _regular_count():
    # (M, N, H, r) = (3, 3, 3, 1): an estimate at the regular count 9 against Aoyagi's 4
    return claims.learning_coefficient(
        "rrr_aoyagi",
        prediction=4.0,
        alternatives=[9.0],
        value=9.0,
        stderr=0.1,
        num_chains=32,
        bias=0.2,
    )


@negative_control(EXPERIMENT, "rrr_generic_point")
def _aoyagi_at_a_generic_point():
    # (3, 3, 3, 1) at a generic true point: codimension 9, lambda 4.5; an estimate at Aoyagi's
    # global 4 judged against the local 4.5
    return claims.learning_coefficient(
        "rrr_generic_point",
        prediction=4.5,
        alternatives=[4.0, 9.0],
        value=4.0,
        stderr=0.03,
        num_chains=32,
        bias=0.1,
    )
