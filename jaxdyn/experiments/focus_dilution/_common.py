"""What the focus-and-dilution experiments share: chains from configs, host copies, replaying
the library's checks on a run, the origin's orders, and the negative controls."""

from __future__ import annotations

import jax
import numpy as np

from ... import gradflow as gf
from ...gradflow._counterfactuals import (
    ANALYSIS_CHECKS,
    COUNTERFACTUALS,
    ORIGIN_CHECKS,
    PROXY_CHECKS,
)
from ...gradflow._origin import origin_checks
from ...runs import ConfigError, Run, negative_control
from ._configs import HEADLINE_PI


def chain(pi, lam: float, P=()) -> gf.MarkovChain:
    """The :class:`gradflow.MarkovChain` of a config: the given matrix ``P`` (``pi`` its
    stationary law, or the given ``pi`` if it is stationary), else the paper's family at ``pi``
    and ``lam``."""
    try:
        if len(P):
            pi_given = np.asarray(pi, dtype=float) if len(pi) else None
            return gf.MarkovChain(np.asarray(P, dtype=float), pi_given)
        return gf.MarkovChain.paper(np.asarray(pi or HEADLINE_PI, dtype=float), lam)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def to_host(tree):
    """NumPy copy of every array leaf (an analysis read on the host)."""
    return jax.tree_util.tree_map(np.asarray, tree)


def replay(run: Run, calls) -> None:
    """Make the library's recorded ``(method, args, kwargs)`` calls on ``run``."""
    for method, args, kwargs in calls:
        getattr(run, method)(*args, **kwargs)


def record_analysis(run: Run, a, label: str = "", tolerances=(1e-7, 1e-10), horizon="") -> dict:
    """Records :meth:`gradflow.FlowAnalysis.checks` on ``run``; returns the rates."""
    calls, rates = a.checks(label, tolerances, horizon)
    replay(run, calls)
    return rates


def origin_evidence(run: Run, config, mc: gf.MarkovChain, a, tolerances=None) -> None:
    """Lemma 3.1 and the frozen attention at the origin (``gradflow._origin.origin_checks``)
    from the analysis's own initial direction, with its flow settings (its compiled flow is
    reused) unless ``tolerances`` are given."""
    if mc.pi.dtype != np.float64:
        run.log("origin orders not measured: they need float64 (x64 = true)")
        return
    rtol, atol = tolerances or (config.rtol, config.atol)
    direction = jax.tree_util.tree_map(lambda x: np.asarray(x[0]) / config.eps, a.trajectory)
    flow = dict(num_saves=config.num_saves, rtol=rtol, atol=atol, max_steps=config.max_steps)
    origin_checks(run, mc, direction, config.origin_eps, config.origin_amplitude, **flow)


_TEXT = ANALYSIS_CHECKS + ORIGIN_CHECKS + PROXY_CHECKS
# each experiment's evidence checks, whose counterfactuals are their negative controls
CHECKS = {
    "focus-dilution": ANALYSIS_CHECKS + ORIGIN_CHECKS,
    "focus-dilution-ablation": ANALYSIS_CHECKS,
    "focus-dilution-text": _TEXT,
    "focus-dilution-tinystories": _TEXT,
    "focus-dilution-delta": (
        "escape_time_log_eps",
        "condensation_escape_time",
        "escape_time_exponent",
        "stall_at_delta_0",
    ),
    "focus-dilution-lyapunov": (
        "transverse_rate_order",
        "tangential_order",
        "degenerate_stall_at_delta_0",
    ),
    "focus-dilution-finite": ("finite_converges", "adam_escapes_unigram_plateau"),
}
for _experiment, _checks in CHECKS.items():
    for _check in _checks:
        negative_control(_experiment, _check)(COUNTERFACTUALS[_check])
