"""What the focus-and-dilution experiments share: chains from configs, host copies of an
analysis, the checks one analysis supports, and its figures."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ... import entropy, gradflow as gf
from ...gradflow._checks import EIGEN_RTOL as EIGEN_RTOL
from ...runs import ConfigError, Run, negative_control

HEADLINE_PI = (0.75, 0.19, 0.05, 0.01)


def check_lam(lam: float) -> None:
    """``P = lam I + (1 - lam) 1 pi^T`` is stochastic for ``lam`` in ``[0, 1)``."""
    if not 0.0 <= lam < 1.0:
        raise ConfigError(
            f"lam must be in [0, 1) so that P = lam I + (1 - lam) 1 pi^T mixes, got {lam}"
        )


def chain(pi, lam: float, P=()) -> gf.MarkovChain:
    """The :class:`gradflow.MarkovChain` of a config: the given matrix ``P`` (``pi`` its
    stationary law, or the given ``pi`` if it is stationary), else the paper's family at ``pi``
    and ``lam``."""
    try:
        if len(P):
            pi_given = np.asarray(pi, dtype=float) if len(pi) else None
            return gf.MarkovChain(np.asarray(P, dtype=float), pi_given)
        check_lam(lam)
        return gf.MarkovChain.paper(np.asarray(pi or HEADLINE_PI, dtype=float), lam)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def to_host(tree):
    """NumPy copy of every array leaf (an analysis read on the host)."""
    return jax.tree_util.tree_map(np.asarray, tree)


# the experiments whose runs record :func:`record_analysis`'s checks (negative controls below)
ANALYSIS_EXPERIMENTS = (
    "focus-dilution",
    "focus-dilution-ablation",
    "focus-dilution-text",
    "focus-dilution-tinystories",
)


def record_analysis(
    run: Run,
    a,
    label: str = "",
    tolerances: tuple[float, float] = (1e-7, 1e-10),
    horizon: str = "",
) -> dict:
    """Records :meth:`gradflow.FlowAnalysis.checks` on ``run``; returns the rates."""
    calls, rates = a.checks(label, tolerances, horizon)
    for method, args, kwargs in calls:
        getattr(run, method)(*args, **kwargs)
    return rates


def _register_controls(experiment: str) -> None:
    """Counterfactuals of :func:`record_analysis`'s evidence checks (cheap, synthetic)."""

    @negative_control(experiment, "unigram_plateau")
    def _plateau_off_the_saddle():
        # a flow that never reaches the saddle: the nearest save is far from critical
        return gf.claims.unigram_plateau(1.2, 0.8, float(np.log(4) * 0.52), float(np.log(4)))

    @negative_control(experiment, "condensation_alignment")
    def _rank_one_growth_along_another_direction():
        rng = np.random.default_rng(0)
        pi = np.array([0.75, 0.19, 0.05, 0.01])
        other = np.array([0.1, 0.2, 0.3, 0.4])
        a = rng.normal(size=3)
        W0 = np.outer(other, a) + 1e-4 * rng.normal(size=(4, 3))
        W1 = np.outer(a, other - 0.25) + 1e-4 * rng.normal(size=(3, 4))
        return gf.claims.condensation_alignment(
            W0,
            W1,
            pi,
            noise=1e-3,
            amplitude=float(np.linalg.norm(a)),
            nonlinearity=1e-3,
            rate=0.46,
        )

    @negative_control(experiment, "first_attention_phase")
    def _chain_of_the_opposite_sign():
        return gf.claims.first_attention_phase(0.08, -1)

    @negative_control(experiment, "unstable_attention_mode")
    def _perturbed_saddle_with_an_unstable_embedding_mode():
        ev = np.array([0.08, 0.08, 0.03, 0.0, -0.5])
        att = np.array([1.0, 1.0, 0.0, 0.5, 0.0])
        return gf.claims.unstable_attention_mode(ev, att, 0.08, 2, tolerance=1e-10)

    @negative_control(experiment, "stages_in_order")
    def _focus_signature_before_condensation():
        ts = np.linspace(0.0, 400.0, 4001)
        times = dict(zip(("condensation", "focus", "dilution", "new_direction"), [15.0, 5.0, 100.0, 300.0], strict=True))
        return gf.claims.stages_in_order(ts, times)

    @negative_control(experiment, "focus_fastest_for_frequent_queries")
    def _rare_queries_first():
        # each query's entropy drops at a time that decreases with pi_q
        pi = np.array([0.75, 0.19, 0.05, 0.01])
        ts = np.linspace(0.0, 120.0, 241)
        H = 0.72714
        drop = np.array([90.0, 80.0, 70.0, 60.0])
        entropy_query = np.where(ts[:, None] >= drop[None, :], 0.5 * H, H)
        return gf.claims.focus_fastest_for_frequent_queries(ts, entropy_query, pi, H)

    @negative_control(experiment, "score_direction")
    def _attention_growing_with_the_other_sign():
        # Phi along -sign(c) pi pi^T (angle pi - 0.05) while the linearisation's bound at the
        # saddle is 0.2 (tests/test_focus_dilution_claims.py builds the arrays of such a flow)
        return gf.claims.score_direction(np.pi - 0.05, 0.2)

    @negative_control(experiment, "dilution_mode_rate")
    def _dilution_mode_that_does_not_grow():
        # attention held frozen: the mode stays at its saddle value (rate 0)
        return gf.claims.dilution_mode_rate(0.0, [0.0, 0.0], 0.004, 0.0798)

    @negative_control(experiment, "entropy_down_up_down")
    def _attention_held_frozen():
        # attention frozen at uniform: the entropy stays at H(pi) through the whole horizon
        H = 0.72714
        return gf.claims.entropy_down_up_down(H, H, H, H, 1e-6, complete=True)


for _name in ANALYSIS_EXPERIMENTS:
    _register_controls(_name)


def entropy_of(pi) -> float:
    """``H(pi)`` as a float."""
    return float(entropy(jnp.asarray(pi)))
