"""Negative controls: for every evidence check, the same decision on a counterfactual input.

An experiment module registers, next to each evidence check, a function that builds the
counterfactual (a series with slope 0, a perturbed model, a flow with attention held frozen)
and returns the :class:`~jaxdyn.evidence.Evidence` of the same check function on it::

    @negative_control("focus-dilution", "escape_time_scaling")
    def _escape_time_without_instability():
        return claims.escape_time_log_eps(times_from_a_stable_flow, ...)

``tests/test_negative_controls.py`` runs every registered control and asserts that its verdict
is ``refuted`` or ``inconclusive``; ``summary.json`` records for each evidence check whether
it has a control. Check names with an index (``order[3]``) share the control of ``order``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..evidence import Evidence

_CONTROLS: dict[tuple[str, str], Callable[[], Evidence]] = {}


def _base(check: str) -> str:
    return check.split("[", 1)[0]


def negative_control(experiment: str, check: str) -> Callable:
    """Register ``fn() -> Evidence`` as the negative control of ``experiment``'s ``check``."""

    def register(fn: Callable[[], Evidence]) -> Callable[[], Evidence]:
        _CONTROLS[(experiment, _base(check))] = fn
        return fn

    return register


def negative_controls() -> dict[tuple[str, str], Callable[[], Evidence]]:
    """Every registered negative control, keyed by ``(experiment, check)``."""
    return dict(_CONTROLS)


def has_negative_control(experiment: str, check: str) -> bool:
    return (experiment, _base(check)) in _CONTROLS
