"""Negative controls of the claims: for each check an application records, the same claim on a
counterfactual input where it is false (a flow off the saddle, rank-one growth along another
direction, a chain of the opposite sign, an escape that ignores ``eps``, ...), so its verdict
must not be ``holds``. :data:`COUNTERFACTUALS` maps a check's name to its control."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from ..evidence import Evidence
from . import claims
from ._markov import MarkovChain
from ._model import init_transformer
from ._origin import origin_orders

_PI = np.array([0.75, 0.19, 0.05, 0.01])
_H = 0.72714  # H(_PI)
_EPS = (0.02, 0.01, 0.005, 0.0025)


def _rank_one_growth_along_another_direction():
    rng = np.random.default_rng(0)
    other, a = np.array([0.1, 0.2, 0.3, 0.4]), rng.normal(size=3)
    W0 = np.outer(other, a) + 1e-4 * rng.normal(size=(4, 3))
    W1 = np.outer(a, other - 0.25) + 1e-4 * rng.normal(size=(3, 4))
    amplitude = float(np.linalg.norm(a))
    return claims.condensation_alignment(
        W0, W1, _PI, noise=1e-3, amplitude=amplitude, nonlinearity=1e-3, rate=0.46
    )


def _focus_signature_before_condensation():
    stages = ("condensation", "focus", "dilution", "new_direction")
    times = dict(zip(stages, [15.0, 5.0, 100.0, 300.0], strict=True))
    return claims.stages_in_order(np.linspace(0.0, 400.0, 4001), times)


def _rare_queries_first():
    # each query's entropy drops at a time that decreases with pi_q
    ts, drop = np.linspace(0.0, 120.0, 241), np.array([90.0, 80.0, 70.0, 60.0])
    entropy_query = np.where(ts[:, None] >= drop[None, :], 0.5 * _H, _H)
    return claims.focus_fastest_for_frequent_queries(ts, entropy_query, _PI, _H)


def _embedding_not_small():
    # W0 initialised at scale 1 (the other blocks at eps): the linearisation at 0 and the frozen
    # attention both fail
    direction = init_transformer(jax.random.key(0), 4, 6, 6, 1.0)
    return origin_orders(MarkovChain.paper(_PI, 0.5), direction, _EPS, 0.1, embedding_scale=1.0)


def _from_origin(claim, i: int):
    orders = _embedding_not_small()  # (eps, deviation, lemma, attention change, scaling)
    return claim(orders[0], orders[i])


def _two_scales(log_eps_slope: float, offset: float, wobble) -> tuple:
    x = np.log(1 / np.array([1e-2, 1e-3, 1e-4] * 3))
    return x, log_eps_slope * x + offset + 0.01 * wobble(x), np.repeat([0.01, 0.02, 0.03], 3)


def _escape_that_ignores_the_initial_scale():
    x, y, groups = _two_scales(0.0, 5.0, lambda x: np.sin(7 * x))
    y = y + groups  # flat in log(1/eps)
    return claims.escape_time_log_eps(x, y, groups, eps=np.exp(-x), resolution=np.full(9, 0.01))


def _condensation_twice_as_slow():
    x, y, groups = _two_scales(2.0, 1.0, lambda x: np.cos(5 * x))  # half the predicted rate
    res = np.full(9, 0.01)
    return claims.condensation_escape_time(x, y, groups, eps=np.exp(-x), resolution=res)


def _escape_independent_of_delta():
    deltas, eps = np.repeat([0.005, 0.01, 0.02, 0.04], 3), np.tile([1e-2, 1e-3, 1e-4], 4)
    t = 300.0 * np.log(1 / eps) * (1 + 0.01 * np.sin(40 * deltas))
    return claims.escape_time_exponent(deltas, eps, t, 0.094 * deltas)


def _data_without_the_bigram_structure():
    # training curves whose loss differs from the proxy's by more than the effect
    rng = np.random.default_rng(2)
    real, proxy = 0.70 + 0.002 * rng.normal(size=(6, 10)), 0.72 + 0.002 * rng.normal(size=(6, 10))
    return claims.bigram_proxy_agrees("loss", real, proxy, 0.01)


def _too_few_draws_to_tell():
    rng = np.random.default_rng(3)
    real, proxy = 0.3 + 0.05 * rng.normal(size=(2, 10)), 0.3 + 0.05 * rng.normal(size=(2, 10))
    return claims.bigram_proxy_agrees("attention", real, proxy, 0.02)


def _error_that_does_not_shrink():
    rng = np.random.default_rng(1)
    scale = np.repeat([1 / 8, 1 / 16, 1 / 32], 3)
    return claims.finite_converges("loss", scale, 0.02 * np.exp(0.1 * rng.normal(size=9)))


# the checks FlowAnalysis.checks, origin_checks and proxy_checks record
ANALYSIS_CHECKS = (
    "unigram_plateau", "condensation_alignment", "first_attention_phase",
    "unstable_attention_mode", "stages_in_order", "focus_fastest_for_frequent_queries",
    "score_direction", "dilution_mode_rate", "entropy_down_up_down",
)  # fmt: skip
ORIGIN_CHECKS = (
    "linearisation_bound", "attention_frozen_at_origin", "linearisation_error_order",
    "attention_change_order",
)  # fmt: skip
PROXY_CHECKS = ("bigram_proxy_loss", "bigram_proxy_attention")
# and those of escape_checks, branch_checks and finite_checks (with Adam's plateau)
ESCAPE_CHECKS = (
    "escape_time_log_eps", "condensation_escape_time", "escape_time_exponent", "stall_at_delta_0",
)  # fmt: skip
BRANCH_CHECKS = ("transverse_rate_order", "tangential_order", "degenerate_stall_at_delta_0")
FINITE_CHECKS = ("finite_converges", "adam_escapes_unigram_plateau")

_X = np.array([0.0025, 0.005, 0.01, 0.02])
_DELTAS = np.geomspace(1e-3, 1e-2, 5)

COUNTERFACTUALS: dict[str, Callable[[], Evidence]] = {
    # a flow that never reaches the saddle: the nearest save is far from critical
    "unigram_plateau": lambda: claims.unigram_plateau(
        1.2, 0.8, float(np.log(4) * 0.52), float(np.log(4))
    ),
    "condensation_alignment": _rank_one_growth_along_another_direction,
    "first_attention_phase": lambda: claims.first_attention_phase(0.08, -1),  # opposite sign
    # a perturbed saddle with an unstable embedding mode
    "unstable_attention_mode": lambda: claims.unstable_attention_mode(
        np.array([0.08, 0.08, 0.03, 0.0, -0.5]),
        np.array([1.0, 1.0, 0.0, 0.5, 0.0]),
        0.08,
        2,
        tolerance=1e-10,
    ),
    "stages_in_order": _focus_signature_before_condensation,
    "focus_fastest_for_frequent_queries": _rare_queries_first,
    # Phi along -sign(c) pi pi^T (angle pi - 0.05) while the saddle's bound is 0.2
    "score_direction": lambda: claims.score_direction(np.pi - 0.05, 0.2),
    # attention held frozen: the mode stays at its saddle value (rate 0)
    "dilution_mode_rate": lambda: claims.dilution_mode_rate(0.0, [0.0, 0.0], 0.004, 0.0798),
    # attention frozen at uniform: the entropy stays at H(pi) through the whole horizon
    "entropy_down_up_down": lambda: claims.entropy_down_up_down(
        _H, _H, _H, _H, 1e-6, complete=True
    ),
    "linearisation_bound": lambda: _from_origin(claims.linearisation_bound, 2),
    "attention_frozen_at_origin": lambda: _from_origin(claims.attention_frozen_at_origin, 3),
    # a field with a quadratic term: the deviation is O(eps^2)
    "linearisation_error_order": lambda: claims.linearisation_error_order(
        _X, 0.7 * _X**2 * (1 + _X)
    ),
    "attention_change_order": lambda: claims.attention_change_order(_X, 0.7 * _X**3 * (1 + _X**2)),
    "escape_time_log_eps": _escape_that_ignores_the_initial_scale,
    "condensation_escape_time": _condensation_twice_as_slow,
    "escape_time_exponent": _escape_independent_of_delta,
    "stall_at_delta_0": lambda: claims.degenerate_stall(np.array([0.004, -0.004]), 0.5),
    "degenerate_stall_at_delta_0": lambda: claims.degenerate_stall(np.array([0.002, -0.002]), 0.7),
    "transverse_rate_order": lambda: claims.transverse_rate_order(
        _DELTAS, 0.3 * _DELTAS**2 * (1 + _DELTAS)
    ),
    "tangential_order": lambda: claims.tangential_order(_DELTAS, 0.3 * _DELTAS * (1 + _DELTAS)),
    "bigram_proxy_loss": _data_without_the_bigram_structure,
    "bigram_proxy_attention": _too_few_draws_to_tell,
    "finite_converges": _error_that_does_not_shrink,
    # uniform attention cannot beat H(pi): the runs end on the plateau
    "adam_escapes_unigram_plateau": lambda: claims.adam_escapes_unigram_plateau(
        [0.7271401, 0.7271405], _H
    ),
}
