"""What the focus-and-dilution experiments share: chains from configs, a config's library
keywords, host copies, recording an analysis's checks and the origin's orders, and the negative
controls."""

from __future__ import annotations

import dataclasses
import inspect

import jax
import numpy as np

from ... import gradflow as gf
from ...gradflow._counterfactuals import (
    ANALYSIS_CHECKS,
    BRANCH_CHECKS,
    COUNTERFACTUALS,
    ESCAPE_CHECKS,
    FINITE_CHECKS,
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


def keywords(config, fn) -> dict:
    """The fields of ``config`` that are keyword-only parameters of the library function ``fn``
    (the configs name their fields after them), with their values."""
    params = inspect.signature(fn).parameters
    kw_only = {k for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    fields = [f.name for f in dataclasses.fields(config)]
    return {k: getattr(config, k) for k in fields if k in kw_only}


def to_host(tree):
    """NumPy copy of every array leaf (an analysis read on the host)."""
    return jax.tree_util.tree_map(np.asarray, tree)


def record_analysis(run: Run, a, config, label: str = "", horizon: str = "") -> dict:
    """Records :meth:`gradflow.FlowAnalysis.checks` (its flow solved with the config's ``rtol``
    and ``atol``) on ``run``; returns the rates."""
    calls, rates = a.checks(label, (config.rtol, config.atol), horizon)
    for method, args, kwargs in calls:
        getattr(run, method)(*args, **kwargs)
    return rates


def origin_evidence(run: Run, config, mc: gf.MarkovChain, a, tolerances=None) -> None:
    """Lemma 3.1 and the frozen attention at the origin (``gradflow._origin.origin_checks``)
    from the analysis's own initial direction, with its flow settings (its compiled flow is
    reused) unless ``tolerances`` are given."""
    if mc.pi.dtype != np.float64:
        return run.log("origin orders not measured: they need float64 (x64 = true)")
    rtol, atol = tolerances or (config.rtol, config.atol)
    direction = jax.tree_util.tree_map(lambda x: np.asarray(x[0]) / config.eps, a.trajectory)
    flow = dict(num_saves=config.num_saves, rtol=rtol, atol=atol, max_steps=config.max_steps)
    origin_checks(run, mc, direction, config.origin_eps, config.origin_amplitude, **flow)


_TEXT = ANALYSIS_CHECKS + ORIGIN_CHECKS + PROXY_CHECKS
CHECKS = {  # each experiment's evidence checks, whose counterfactuals are their negative controls
    "focus-dilution": ANALYSIS_CHECKS + ORIGIN_CHECKS,
    "focus-dilution-ablation": ANALYSIS_CHECKS,
    "focus-dilution-text": _TEXT,
    "focus-dilution-tinystories": _TEXT,
    "focus-dilution-delta": ESCAPE_CHECKS,
    "focus-dilution-lyapunov": BRANCH_CHECKS,
    "focus-dilution-finite": FINITE_CHECKS,
}
for _experiment, _checks in CHECKS.items():
    for _check in _checks:
        negative_control(_experiment, _check)(COUNTERFACTUALS[_check])
