"""copy-head-theory: the reduced action's transitions, classified independent ways, and
hysteresis on the exact finite-data action (copy_head.md, "What the theory predicts")."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ... import copyhead as ch
from ...copyhead import _hysteresis, _measure, _phase, _train, _transition
from ...runs import Run, register_experiment
from ...sweep import Grid
from . import _common as cm, _figures


@dataclasses.dataclass(frozen=True, kw_only=True)
class TheoryConfig(cm.CopyHeadConfig):
    """Reduced-action phase diagrams of softmax and linear copy heads (P in sequences).

    Attributes:
        P_min, P_max, n_P: the P range searched and its grid.
        objective: "marginal" (posterior of G) or "map" (Adam's joint MAP).
        hysteresis_points, hysteresis_seeds: P values and datasets of the exact-action runs.
        hysteresis_steps, hysteresis_learning_rate: Adam on S(G) from each start.
        switch_bisections: bisections in ln P of each dataset's switch between the minima.
        window_margin: as :class:`NetworkConfig`'s.
    """

    P_min: float = 1.0
    P_max: float = 3000.0
    n_P: int = 80
    objective: str = "marginal"
    hysteresis_points: int = 12
    hysteresis_seeds: int = 4
    hysteresis_steps: int = 1500
    switch_bisections: int = 8
    hysteresis_learning_rate: float = 0.02
    window_margin: float = 1.1

    RANGES: ClassVar[str] = (
        "n_P >= 10; hysteresis_points >= 4; hysteresis_steps >= 10; hysteresis_seeds >= 2; "
        "window_margin >= 1; switch_bisections >= 1; P_min > 0; hysteresis_learning_rate > 0"
    )

    def validate(self) -> None:
        super().validate()
        cm.require(
            self.P_max > self.P_min, f"P_max must exceed P_min, got {self.P_max} <= {self.P_min}"
        )
        cm.require(
            self.objective in ("marginal", "map"),
            f"objective must be 'marginal' or 'map', got {self.objective!r}",
        )

    @classmethod
    def quick(cls) -> dict:
        return {"n_P": 40, "P_max": 1000.0, "hysteresis_points": 8, "hysteresis_seeds": 3}


FIRST_ORDER_CLAIM = "softmax: a first-order transition (L >= 16, V not much larger than L)"
CONTINUOUS_CLAIM = "linear attention: a continuous (second-order) onset, A -> -A symmetric"
NO_POOLING_CLAIM = (
    "softmax: no stable pooling phase between the unstructured and the copying state "
    "(at most two local minima of the reduced action at every P)"
)
POOLING_FIRST_CLAIM = (
    "linear attention pools first: at the onset the uniform pattern carries most of A "
    "(share of U in ||A||^2 >= 1/2)"
)
ONSET_CLAIM = "linear onset: amplitude ~ (P - P_c)^(1/2)"


@register_experiment(
    "copy-head-theory",
    TheoryConfig,
    "reduced-action phase diagrams; order by grid refinement, landscape and brute force; "
    "hysteresis on the exact action",
    title="The reduced theory: order, phase diagrams, exact hysteresis",
    docs="copy_head.md#what-the-experiments-find",
)
def run_theory(config: TheoryConfig, run: Run) -> None:
    """copy-head-theory: the reduced theory's transitions for softmax and linear heads, and
    hysteresis of the exact finite-data action."""
    results = {a: _analyse(config, run, a) for a in cm.ATTENTIONS}
    _check_orders(config, run, results)
    _check_linear_onset(config, run, results["linear"])
    hyst = {a: _exact_hysteresis(config, run, a, results[a]) for a in cm.ATTENTIONS}
    _figures.theory_figures(run, config, results, hyst)


def _analyse(c: TheoryConfig, run: Run, attention: str):
    a = cm.reduced_theory(c, attention, c.objective, c.P_min, c.P_max, n_P=c.n_P)
    for key, value in a.info.items():  # the order by name (summary.json)
        run.scalar(f"{attention}_{key}", value)
    run.scalar(f"{attention}_order_from_refinement", a.refined.as_dict())
    states = {k: getattr(a.diagram, k) for k in ("x_global", "x_up", "x_down", "P", "S_global")}
    cm.save_record(run, f"{attention}.", states, f"{attention}_P", a.diagram.P)
    r = a.refined
    steps = {"refinement_spacing": r.spacing, "refinement_largest_step": r.largest_step}
    cm.save_record(run, f"{attention}.", steps, f"{attention}_spacing", r.spacing)
    return a


def _check_orders(c: TheoryConfig, run: Run, results: dict) -> None:
    """Three classifications of one reduced model must agree (consistency); the page's claims
    are evidence where the page makes them and reported elsewhere."""
    for a in cm.ATTENTIONS:
        run.consistency(
            f"{a}_order_refinement_matches_landscape",
            expected=results[a].info["transition_order"].value,
            measured=results[a].refined.order.value,
            basis="one reduced model classified twice: refinement exponent of the largest step "
            "vs coexisting continuation branches / symmetric-state instability",
        )
    sm = results["softmax"]
    deltas = np.linspace(-1.0, 3.0 * np.log(c.L) + 3.0, 6000)
    coexist, window, barrier = _transition.brute_force_coexistence(
        sm.model, c.P_min, c.P_max, deltas
    )
    run.scalar("softmax_brute_force", dict(coexistence=coexist, window=window, barrier=barrier))
    run.consistency(
        "softmax_refinement_matches_brute_force",
        expected=float(coexist),
        measured=float(sm.refined.order is ch.TransitionOrder.first),
        basis="brute force: two local minima on a fine Delta grid near the jump",
    )
    run.scalar("transition_order", {a: results[a].refined.order.name for a in cm.ATTENTIONS})
    if c.L >= 16 and c.V <= c.L:
        run.evidence(
            "softmax_first_order_where_page_predicts",
            ch.claims.transition_order(FIRST_ORDER_CLAIM, ch.TransitionOrder.first, sm.refined),
        )
        lo, hi = window if window is not None else (c.P_min, c.P_max)
        Ps = np.geomspace(lo / 1.5, hi * 1.5, 200)
        counts, _ = _transition.landscape_minima(sm.model, Ps, deltas)
        basis = "strict local minima on 6000 Delta values"
        run.evidence(
            "softmax_no_pooling_phase",
            ch.claims.minima_at_most(NO_POOLING_CLAIM, counts, 2, basis=basis),
            note=f"P from {lo / 1.5:.4g} to {hi * 1.5:.4g} (200 points)",
        )
    else:
        run.report(
            "softmax_order_outside_page_regime",
            measured=sm.refined.order.value,
            claim=FIRST_ORDER_CLAIM,
            note=f"L={c.L}, V={c.V} is outside the page's regime; the order found "
            f"({sm.refined.order.name}) is recorded",
        )
    second, refined = ch.TransitionOrder.second, results["linear"].refined
    evidence = ch.claims.transition_order(CONTINUOUS_CLAIM, second, refined)
    run.evidence("linear_transition_continuous", evidence)


def _check_linear_onset(c: TheoryConfig, run: Run, lin) -> None:
    model, diagram = lin.model, lin.diagram
    P_c = _phase.linear_onset(model)
    bisected = _phase.instability_point(model, c.P_min, c.P_max)
    run.consistency(
        "linear_onset_bisection_matches_closed_form",
        expected=P_c,
        measured=float("nan") if bisected is None else bisected,
        tolerance=1e-8,
        relative=True,
        basis="bisection (60 halvings) on the autodiff Hessian at A = 0 vs the roots of its "
        "determinant (a quartic in P)",
    )
    if not np.isfinite(P_c) or not c.P_min < P_c < c.P_max:
        run.report("linear_onset_P_c", measured=P_c, note=f"no onset in [{c.P_min}, {c.P_max}]")
        return
    eps, amp = _phase.onset_amplitudes(model, P_c)
    run.evidence("linear_onset_exponent", ch.claims.square_root_onset(ONSET_CLAIM, eps, amp))
    _, plain = _phase.onset_exponent(model, P_c)
    fit = {"slope": plain.slope, "ci": [plain.ci_low, plain.ci_high]}
    run.scalar("linear_onset_exponent_plain_fit", fit)
    x = np.asarray(ch.global_minimum(model, P_c * (1 + 1e-3)).x)
    run.evidence(
        "linear_pools_first",
        ch.claims.pooling_first(POOLING_FIRST_CLAIM, float(x[0]), float(x[1]), c.L),
        note=f"global minimum at 1.001 P_c: c_1 = {x[0]:.4g}, c_G = {x[1]:.4g}",
    )
    o = diagram.order_global
    crossover = lambda w: _transition.crossover_point(diagram.P, o["c_1"], o["c_G"], w, P_c)
    run.scalar("linear_crossover_P_raw", crossover(1.0))
    run.scalar("linear_crossover_P_normalised", crossover(np.sqrt(c.L)))
    run.scalar("linear_onset_P_c", P_c)
    run.scalar("linear_onset_over_T_V_three_halves", P_c / (c.temperature * c.V**1.5))


def _exact_hysteresis(c: TheoryConfig, run: Run, attention: str, a) -> dict:
    """The exact finite-data action S(G) (all L^2 scores) minimised from uniform (G = 0) and
    from the copy pattern on ``hysteresis_seeds`` nested datasets, around the reduced
    coexistence window (or P* / 2 to 2 P*); against the reduced theory's window and P*."""
    info, m = a.info, c.window_margin**3
    window = info["coexistence"]
    lo, hi = (window[0] / m, window[1] * m) if window is not None else (a.P_t / 2, a.P_t * 2)
    Ps = np.geomspace(lo, hi, c.hysteresis_points)
    P_max = int(np.ceil(Ps.max()))
    posterior = c.posterior(attention)
    copy_G, steps = c.copy_scores(attention), c.hysteresis_steps
    descend = _train.exact_descent(
        posterior, copy_G, c.L, c.V, P_max, steps=steps, dtype=c.loop_dtype
    )

    def member(params, key):
        G, stats = descend(params["P"], params["start"], params["learning_rate"], key)
        return _measure.measure(posterior, G, None, stats)

    axes = {"P": Ps, "start": [0.0, 1.0], "learning_rate": [c.hysteresis_learning_rate]}
    grid = Grid.product(axes, seeds=c.hysteresis_seeds, base_seed=c.seed)
    result = cm.snug_sweep(run, f"exact_hysteresis_{attention}", member, grid, c)
    key, order = "c_G" if attention == "softmax" else "c_1", info["transition_order"]
    prefix = f"{attention}_exact_action"
    hyst = cm.check_hysteresis(run, prefix, result, result.outputs[key], a, order)
    if order is ch.TransitionOrder.first and window is not None:
        _check_switch(run, c, attention, result, info, posterior, descend)
    run.scalar(f"{attention}_exact_action_disagreement", hyst.where(np.ones_like(hyst.P, bool)))
    return {"P": Ps, "values": result.reshaped(key), "hysteresis": hyst}


def _check_switch(run, c, attention, result, info, posterior, descend) -> None:
    """Per dataset, the P where the copy-start minimum becomes the lower one: bracketed on the
    P grid, then a root find in ln P (:func:`jaxdyn.copyhead._train.switch_root`) to a
    resolution finer than the finite-data offset it looks for; against the reduced P*."""
    P, start, seeds = result.params["P"], result.params["start"], result.seeds
    Ps, datasets = np.unique(P), np.unique(seeds)
    b, kept = _hysteresis.switch_brackets(P, start, seeds, result.masked("action"))
    roots = np.full(len(datasets), np.nan)
    if kept:
        rate = np.full(len(kept), c.hysteresis_learning_rate)
        params = {"P_lo": b[:, 0], "P_hi": b[:, 1], "learning_rate": rate}
        grid = Grid(params, np.asarray(kept, np.int64), shape=(len(kept),), axes=("seed",))
        member = lambda p, key: _train.switch_root(
            posterior, descend, key, p["learning_rate"], p["P_lo"], p["P_hi"], c.switch_bisections
        )
        found = cm.snug_sweep(run, f"exact_switch_{attention}", member, grid, c)
        roots[np.searchsorted(datasets, kept)] = np.exp(found.outputs["ln_switch"])
    resolution = 0.5 * float(np.log(Ps[1] / Ps[0])) / 2.0**c.switch_bisections
    lines = [info["P_star"], info["coexistence"][1]]  # P* and the spinodal
    run.scalar(f"{attention}_exact_action_switch_per_dataset", roots.tolist())
    run.evidence(
        f"{attention}_exact_action_switch_matches_reduced_P_star",
        ch.claims.switch_at_P_star(np.log(roots), *np.log(lines).tolist(), resolution),
        note=f"P* {info['P_star']:.4g}, spinodal {info['coexistence'][1]:.4g}; root find to "
        f"{resolution:.2g} in ln P; datasets without a switch on the grid are left out",
    )
