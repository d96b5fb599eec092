"""Order parameters, population reduction and phase diagrams (copy_head.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _models, _order, _phase, _reduced, _task
from jaxdyn.copyhead._reduced import softmax_copy_probability, softmax_order_parameters


@pytest.mark.parametrize("cyclic", [True, False])
def test_order_parameters_recover_a_combination_of_U_and_S(cyclic):
    L = 7
    A = 0.3 * _task.uniform_matrix(L) + 0.7 * _task.shift_matrix(L, cyclic=cyclic)
    c1, cG = ch.order_parameters(A, cyclic=cyclic)
    assert abs(float(c1) - 0.3) < 1e-12 and abs(float(cG) - 0.7) < 1e-12
    assert abs(float(ch.coverage(A[None], cyclic=cyclic)) - 1.0) < 1e-12


def test_coverage_of_random_patterns_is_small():
    A = jax.random.uniform(jax.random.key(0), (50, 12, 12))
    assert float(ch.coverage(A)) < 0.1


def test_logit_gap_of_row_centred_copy_scores_ignores_the_softmax_gauge():
    L, delta = 9, 1.7
    G = delta * (_task.shift_matrix(L) - 1.0 / L) + jnp.arange(L)[:, None]  # row constants
    assert abs(float(_order.logit_gap(G)) - delta * L / (L - 1) * (L - 1) / L) < 1e-12
    p = softmax_copy_probability(delta, L)
    A = ch.SoftmaxCopyHead().weights(G)
    assert abs(float(A[3, 2]) - float(p)) < 1e-12
    a1, aG = softmax_order_parameters(delta, L)
    c1, cG = ch.order_parameters(A)
    assert abs(float(a1 - c1)) < 1e-12 and abs(float(aG - cG)) < 1e-12


@pytest.mark.parametrize("attention", [ch.LinearCopyHead(), ch.SoftmaxCopyHead()])
@pytest.mark.parametrize("cyclic", [True, False])
def test_population_action_equals_exact_action_at_expected_statistics(attention, cyclic):
    L, V, P = 6, 4, 13.0
    G = jax.random.normal(jax.random.key(1), (L, L))
    posterior = ch.CopyHeadPosterior(attention, 0.9, cyclic=cyclic)
    stats = _task.population_statistics(L, V, P, cyclic=cyclic)
    exact = posterior.action(G, stats)
    A = posterior.attention(G)
    pop = _reduced.population_action(G, A, P, V=V, temperature=0.9, cyclic=cyclic)
    assert abs(float(exact - pop)) < 1e-10


@pytest.mark.parametrize("cyclic", [True, False])
def test_population_statistics_match_sampled_data(cyclic):
    """Sampled statistics / P converge to the expectation: entries are means of P L (or P)
    Bernoulli counts with variance <= 1/4, so 5 standard errors is 5 * 0.5 / sqrt(P)."""
    L, V, P = 5, 3, 20000
    X, Y = ch.copy_task(jax.random.key(2), P, L, V, cyclic=cyclic)
    emp = ch.copy_statistics(X, Y)
    exp = _task.population_statistics(L, V, P, cyclic=cyclic)
    assert float(jnp.max(jnp.abs(emp.N - exp.N))) / P < 5 * 0.5 / np.sqrt(P)
    assert float(jnp.max(jnp.abs(emp.NY - exp.NY))) / P < 5 * 0.5 / np.sqrt(P)
    assert float(emp.yy) == float(exp.yy)


def test_reduced_actions_equal_population_action_on_their_coordinates():
    L, V, P = 10, 5, 17.0
    c = jnp.array([0.31, 0.12])
    A = c[0] * _task.uniform_matrix(L) + c[1] * _task.shift_matrix(L)
    lin = _reduced.reduced_action_linear(c, P, L=L, V=V, alpha=1.0)
    assert abs(float(lin - _reduced.population_action(L * A, A, P, V=V))) < 1e-10
    delta = 1.3
    G = delta * (_task.shift_matrix(L) - 1.0 / L)
    sm = _reduced.reduced_action_softmax(delta, P, L=L, V=V)
    A = ch.SoftmaxCopyHead().weights(G)
    assert abs(float(sm - _reduced.population_action(G, A, P, V=V))) < 1e-10


def test_temperature_only_rescales_P():
    x = jnp.array([0.2, 0.1])
    a = _reduced.reduced_action_linear(x, 30.0, L=16, V=4, temperature=0.1)
    b = _reduced.reduced_action_linear(x, 300.0, L=16, V=4, temperature=1.0)
    assert abs(float(a - b)) < 1e-9
    a = _reduced.reduced_action_softmax(2.0, 5.0, L=16, V=4, temperature=0.25)
    b = _reduced.reduced_action_softmax(2.0, 20.0, L=16, V=4, temperature=1.0)
    assert abs(float(a - b)) < 1e-9


@pytest.mark.slow
@pytest.mark.heavy
def test_softmax_transition_is_first_order_at_the_reconstructions_P_star():
    """copy_head.md: L = 32, V = 8, T = 1: P* = 19.5, coexistence 17.8-25.7."""
    model = ch.SoftmaxReduced(L=32, V=8)
    diagram = ch.phase_diagram(model, np.geomspace(15.0, 30.0, 41))
    info = _phase.classify_transition(model, diagram)
    assert info["transition_order"] is ch.TransitionOrder.first
    # within one cell of the grid (ln-spacing ln 2 / 40) plus the page's rounding (0.05)
    near = lambda measured, page: abs(measured - page) < page * (2 ** (1 / 40) - 1) + 0.05
    assert near(info["P_star"], 19.5)
    lo, hi = info["coexistence"]
    assert near(lo, 17.8) and near(hi, 25.7), (lo, hi)
    # the jump: a_G from ~0 (uniform) to a copy state, Delta ~ (0.6-0.85) ln L
    i = int(np.searchsorted(diagram.P, info["P_star"]))
    assert diagram.order_up["a_G"][i] < 0.02
    assert 0.6 * np.log(32) < diagram.x_down[i, 0] < 0.85 * np.log(32)


@pytest.mark.slow
@pytest.mark.heavy
def test_softmax_at_L8_is_continuous():
    model = ch.SoftmaxReduced(L=8, V=8)
    diagram = ch.phase_diagram(model, np.geomspace(2.0, 200.0, 41))
    assert not diagram.coexistence.any()
    order = _phase.classify_transition(model, diagram)["transition_order"]
    assert order is ch.TransitionOrder.crossover


def _softmax_minima_count(L, V, Ps):
    """Local minima of the reduced softmax action on a fine Delta grid, for each P."""
    deltas = jnp.linspace(-1.0, 3.0 * np.log(L) + 3.0, 6001)
    action = lambda p: _reduced.reduced_action_softmax(deltas, p, L=L, V=V)
    S = jax.jit(jax.vmap(action))(jnp.asarray(Ps))
    S = np.asarray(S)
    return ((S[:, 1:-1] < S[:, :-2]) & (S[:, 1:-1] < S[:, 2:])).sum(axis=1)


def test_softmax_first_order_line_ends_between_V24_and_V32_at_L16():
    """The page's "first-order for L >= 16" holds at small V only: at L = 16 two minima coexist
    (a narrow window, 57.4-57.8 sequences) at V = 24 but never at V = 32, where the transition
    is continuous (a steep crossover). Brute force, independent of Newton and bisection."""
    assert (_softmax_minima_count(16, 24, np.linspace(57.0, 58.2, 61)) >= 2).any()
    assert (_softmax_minima_count(16, 32, np.geomspace(40.0, 160.0, 241)) == 1).all()


@pytest.mark.slow
def test_softmax_classification_agrees_with_the_brute_force_at_L16():
    for V, expected in ((24, ch.TransitionOrder.first), (32, ch.TransitionOrder.crossover)):
        model = ch.SoftmaxReduced(L=16, V=V)
        _, _, info = ch.locate_transition(model, 20.0, 300.0, 40)
        assert info["transition_order"] is expected


def _onset_by_eigenvalue_scan(model):
    """Smallest P where the autodiff Hessian of the reduced action at A = 0 has a negative
    eigenvalue, located on a log grid of P (1e-3 relative) and refined by linear interpolation."""
    H = jax.jit(
        jax.vmap(
            lambda P: jnp.linalg.eigvalsh(jax.hessian(lambda x: model.action(x, P))(jnp.zeros(2)))[
                0
            ]
        )
    )
    Ps = np.geomspace(0.01, 1e5, 16001)
    lam = np.asarray(H(jnp.asarray(Ps)))
    i = int(np.flatnonzero(lam < 0)[0])
    return float(np.interp(0.0, [lam[i], lam[i - 1]], [Ps[i], Ps[i - 1]]))


@pytest.mark.parametrize(
    "alpha, objective",
    [
        (0.0, ch.Objective.marginal),
        (1.0, ch.Objective.marginal),
        (1.0, ch.Objective.map),
        (-0.5, ch.Objective.marginal),
    ],
)
def test_linear_onset_closed_form_matches_bisection_and_eigenvalue_scan(alpha, objective):
    L, V = 16, 4
    model = ch.LinearReduced(L=L, V=V, alpha=alpha, objective=objective, temperature=0.7)
    P_c = _phase.linear_onset(model)
    assert abs(_phase.instability_point(model, 1e-2, 1e5) / P_c - 1) < 1e-9
    assert abs(_onset_by_eigenvalue_scan(model) / P_c - 1) < 1e-4


@pytest.mark.slow
@pytest.mark.heavy
def test_linear_transition_is_second_order_with_square_root_rise():
    model = ch.LinearReduced(L=32, V=8, grid_points=81)
    diagram = ch.phase_diagram(model, np.geomspace(5.0, 200.0, 16))
    info = _phase.classify_transition(model, diagram)
    assert info["transition_order"] is ch.TransitionOrder.second
    P_c = info["P_star"]
    assert abs(P_c / _phase.linear_onset(model) - 1) < 1e-9
    eps = np.array([1e-3, 4e-3, 1.6e-2])
    amps = [
        float(model.order(ch.global_minimum(model, jnp.asarray(P_c * (1 + e))).x)["amplitude"])
        for e in eps
    ]
    slope = np.polyfit(np.log(eps), np.log(amps), 1)[0]
    assert abs(slope - 0.5) < 0.05
    # pools first (c_1 leaves zero), then crosses over to copying (c_G > c_1) at larger P
    o = diagram.order_global
    just_above = int(np.searchsorted(diagram.P, 1.3 * P_c))
    assert o["c_1"][just_above] > 5 * abs(o["c_G"][just_above])
    assert o["c_G"][-1] > o["c_1"][-1]


def test_reduced_model_validation():
    with pytest.raises(ValueError, match="temperature"):
        ch.SoftmaxReduced(L=16, V=4, temperature=-1.0)
    with pytest.raises(ValueError, match="L must be"):
        ch.SoftmaxReduced(L=1, V=4)
    with pytest.raises(TypeError, match="objective must be jaxdyn.copyhead.Objective"):
        ch.LinearReduced(L=16, V=4, objective="map")  # a name is not an objective
    ch.LinearReduced(L=16, V=4, alpha=-0.5)  # any real alpha is a valid model


@pytest.mark.slow
@pytest.mark.heavy
def test_minimum_error_covers_the_distance_to_the_minimum_and_is_never_zero():
    """minimum_error bounds |o(x) - o(x*)| from a displaced point (the Newton step) and keeps
    the float64 resolution of the minimum where x* = 0 exactly (linear attention below its
    onset), so a comparison with an exact zero has a non-degenerate error model; it is
    infinite where the Hessian is not positive definite (above the onset, at A = 0)."""
    model = ch.LinearReduced(L=16, V=4)
    P_c = _phase.linear_onset(model)
    order = lambda x: jnp.stack([x[0], x[1]])
    below = ch.global_minimum(model, 0.5 * P_c)
    assert below.status == ch.MinimumStatus.converged
    assert float(jnp.max(jnp.abs(below.x))) < 1e-12
    floor = _models.minimum_error(model, jnp.zeros(2), 0.5 * P_c, order)
    assert np.all(np.asarray(floor) > 0) and np.all(np.asarray(floor) < 1e-5)
    above = ch.global_minimum(model, 3.0 * P_c)
    shifted = above.x + jnp.array([2e-3, -1e-3])
    error = np.asarray(_models.minimum_error(model, shifted, 3.0 * P_c, order))
    distance = np.abs(np.asarray(shifted - above.x))
    assert np.all(error >= distance) and np.all(error <= 2.5 * np.linalg.norm(distance) + 1e-5)
    unconverged = _models.minimum_error(model, jnp.zeros(2), 3.0 * P_c, order)
    assert np.all(np.isinf(np.asarray(unconverged)))
