"""Power of the copy-head comparisons over datasets (SE against a fifth of the effect), the
extra (L, V) settings' record names, and the Laplace expansion's smoothness test at a kink."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _mass, _task
from jaxdyn.copyhead._compare import power_record
from jaxdyn.evidence import Verdict
from jaxdyn.experiments.copy_head._common import SettingRun

powered = ch.claims.powered


def test_power_record_against_closed_form():
    table = np.array([[0.0, 10.0], [1.0, 10.0], [2.0, 10.0], [3.0, 10.0]])
    r = power_record(table, 1.0)
    sd = np.sqrt(np.sum((np.arange(4) - 1.5) ** 2) / 3)  # 1.29099
    assert np.isclose(r["sd"][0], sd) and r["sd"][1] == 0.0
    assert np.isclose(r["se"][0], sd / 2)
    assert r["datasets"] == 4 and r["dof"] == 3 and r["threshold"] == 0.2
    assert not r["sufficient"]
    assert r["datasets_needed"] == int(np.ceil((sd / 0.2) ** 2))  # 42
    # The same spread against an effect 20 times larger: SE 0.645 <= 4.
    big = power_record(table, 20.0)
    assert big["sufficient"] and big["datasets_needed"] == 3
    # One dataset: no standard error, never sufficient.
    assert not power_record(table[:1], 20.0)["sufficient"]


def _match(values, theory=0.0, effect=1.0):
    return ch.claims.matches_theory("claim", np.asarray(values)[:, None], theory, effect)


def test_an_underpowered_holds_is_inconclusive_a_refutation_stands():
    rng = np.random.default_rng(0)
    tight = 0.001 * rng.standard_normal(4)
    ev = _match(tight, effect=1.0)
    assert ev.verdict is Verdict.holds
    # Counterfactual: the same verdict where the power record says SE > effect / 5.
    weak = power_record(np.array([[0.0], [3.0], [-3.0]]), 1.0)
    gated = powered(ev, weak)
    assert gated.verdict is Verdict.inconclusive and "datasets" in gated.reason
    assert powered(ev, power_record(tight[:, None], 1.0)).verdict is Verdict.holds
    refuted = _match(5.0 + tight, effect=1.0)
    assert refuted.verdict is Verdict.refuted
    assert powered(refuted, weak).verdict is Verdict.refuted


class _Recorder:
    def __init__(self):
        self.calls, self.experiment = [], "copy-head-adam"

    def evidence(self, name, evidence, **kw):
        self.calls.append(("evidence", name))

    def scalar(self, name, value):
        self.calls.append(("scalar", name))

    def save_arrays(self, *, dims=None, coords=None, **arrays):
        self.calls.extend(("array", k) for k in arrays)

    def report(self, name, **kw):
        self.calls.append(("report", name))

    def log(self, message):
        self.calls.append(("log", message))


def test_setting_run_indexes_every_record_and_shares_the_control():
    base = _Recorder()
    run = SettingRun(base, 16, 8)
    run.evidence("adam_c_G_matches_theory_away_from_transition", None)
    run.scalar("adam_c_G_power", {})
    run.report("onset", measured=1.0)
    run.save_arrays(x=np.zeros(1))
    run.log("through")
    assert base.calls == [
        ("evidence", "adam_c_G_matches_theory_away_from_transition[L=16,V=8]"),
        ("scalar", "adam_c_G_power[L=16,V=8]"),
        ("report", "onset[L=16,V=8]"),
        ("array", "L16_V8.x"),
        ("log", "through"),
    ]
    assert SettingRun(None, 16, 8).tag == "L=16,V=8"


def _phase(action, x):
    return ch.laplace_phase(action, jnp.asarray(x, float), lambda v: v[:1])


def test_smoothness_of_closed_form_actions():
    """Twice differentiable: a quartic well (defect falls like h^2). A Hessian jump
    (relu(x)^2) at the mode: flagged."""
    well = _phase(lambda v: (v[0] ** 2 - 1) ** 2 + v[1] ** 2 + v[0] ** 3, [1.0, 0.0])
    assert bool(well.twice_differentiable)
    ratio = float(well.gradient_defect[0] / well.gradient_defect[1])
    assert 8.0 < ratio < 20.0  # 16 to leading order
    hessian_jump = _phase(lambda v: 2 * jax.nn.relu(v[0]) ** 2 + 0.5 * v @ v, [0.0, 0.0])
    assert not bool(hessian_jump.twice_differentiable)


@pytest.mark.slow
def test_smoothness_of_more_closed_form_actions():
    """A quadratic (defect at rounding: the floor), a gradient jump (|x|) at the mode
    (flagged), a Hessian jump 10 standard deviations away (beyond the probes: smooth)."""
    quadratic = _phase(lambda v: 0.5 * v @ v, [0.0, 0.0])
    assert bool(quadratic.twice_differentiable)
    gradient_jump = _phase(lambda v: jnp.abs(v[0]) + 0.5 * v @ v, [0.0, 0.0])
    assert not bool(gradient_jump.twice_differentiable)
    # The same kink farther than the probes reach (10 standard deviations): smooth there.
    away = _phase(lambda v: 2 * jax.nn.relu(v[0] - 10.0) ** 2 + 0.5 * v @ v, [0.0, 0.0])
    assert bool(away.twice_differentiable)


class _ScaledReLU(ch.AbstractCopyHead):
    scale: float = eqx.field(static=True, default=0.5)

    def weights(self, G):
        return self.scale * jax.nn.relu(G)


@pytest.mark.slow
def test_laplace_phase_of_a_kinked_head_is_flagged_a_smooth_one_is_not():
    """The scaled-ReLU head's posterior mode at small P sits on the kink G = 0: not twice
    differentiable, so its mass is not a Laplace number; softmax at the same size is."""
    L, V, P = 4, 3, 1.0
    model = ch.HeadReduced(
        attention_head=_ScaledReLU(),
        directions=jnp.stack([_task.uniform_matrix(L), _task.shift_matrix(L)]),
        V=V,
        lo=-1.0,
        hi=3.0,
        grid_points=9,
    )
    x = ch.global_minimum(model, P).x
    relu = _mass.population_phase(ch.CopyHeadPosterior(_ScaledReLU()), model, x, P)
    assert not bool(relu.twice_differentiable)
    soft = ch.SoftmaxReduced(
        L=L, V=V, temperature=1.0, sigma_w2=1.0, sigma_g2=1.0, objective=ch.Objective.marginal
    )
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    phase = _mass.population_phase(posterior, soft, ch.global_minimum(soft, P).x, P)
    assert bool(phase.twice_differentiable)


def test_ladder_keeps_the_P_away_from_the_transition_and_its_window():
    """The comparison ladder against a direct selection, on random P sets."""
    from jaxdyn.copyhead._compare import ladder

    rng = np.random.default_rng(3)
    for _ in range(20):
        P = np.sort(np.exp(rng.uniform(0.0, 6.0, size=8)))
        P_t, factor, widening = np.exp(rng.uniform(1.0, 5.0)), 1.5, 1.21
        window = (P_t / 1.3, P_t * 1.4)
        far = [p for p in P if p > P_t * factor or p < P_t / factor]
        np.testing.assert_array_equal(ladder(P, P_t, factor), far)
        outside = [p for p in far if p < window[0] / widening or p > window[1] * widening]
        np.testing.assert_array_equal(ladder(P, P_t, factor, window, widening), outside)


def test_theory_effect_is_the_jump_between_branches_or_the_change_over_the_range():
    """Straight branches in ln P: the jump at P_t is their gap there (first order); the
    change of the global curve otherwise; test_loss reads the given loss curves."""
    import types

    from jaxdyn.copyhead._compare import theory_effect

    P = np.geomspace(1.0, 100.0, 21)
    up, down = {"c_G": 0.1 * np.log(P)}, {"c_G": 1.0 + 0.2 * np.log(P)}
    diagram = types.SimpleNamespace(P=P, order_up=up, order_down=down,
                                    order_global={"c_G": np.minimum(up["c_G"], 5.0)})  # fmt: skip
    model = ch.LinearReduced(L=8, V=4)  # keeps the name c_G
    gap = 1.0 + 0.1 * np.log(10.0)
    assert np.isclose(theory_effect(model, diagram, 10.0, True, "c_G"), gap)
    assert np.isclose(theory_effect(model, diagram, 10.0, False, "c_G"), 0.1 * np.log(100.0))
    loss = (np.linspace(3.0, 1.0, 21), np.full(21, 3.0), np.full(21, 1.5))
    assert np.isclose(theory_effect(model, diagram, 10.0, True, "test_loss", loss), 1.5)
