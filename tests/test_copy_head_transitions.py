"""Detectors of a transition that can fail, hysteresis bookkeeping, scaling-form comparison and
Laplace fluctuations (copy_head.md), each against a construction whose answer is known."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import (
    _bimodality,
    _fluctuations,
    _hysteresis,
    _measure,
    _phase,
    _scaling,
    _train,
    _transition,
)


def _steps_on_grids(f, lo=1.0, hi=2.0, levels=(16, 32, 64, 128), offsets=8):
    grids = _transition.refinement_grids(lo, hi, levels, offsets)
    steps = [max(_transition.largest_step(g, f(g)) for g in level) for level in grids]
    return np.log(hi / lo) / np.asarray(levels), np.asarray(steps)


@pytest.mark.parametrize("seed", range(4))
def test_refinement_names_a_jump_a_square_root_onset_and_a_smooth_change(seed):
    """On random curves of each kind (random jump size, slope, onset point), the fitted
    exponent of the largest step names the kind."""
    rng = np.random.default_rng(seed)
    J, s, Pc = rng.uniform(0.1, 2.0), rng.uniform(0.1, 3.0), rng.uniform(1.2, 1.8)
    curves = {
        ch.TransitionOrder.first: lambda P: s * np.log(P) + J * (P > Pc),
        ch.TransitionOrder.second: lambda P: s * np.sqrt(np.maximum(np.log(P / Pc), 0.0)),
        ch.TransitionOrder.crossover: lambda P: J * np.tanh(np.log(P / Pc) / 0.3),
    }
    for order, f in curves.items():
        h, steps = _steps_on_grids(f)
        result = _transition.classify_refinement(h, steps)
        assert result.order is order, (order, result.fit.slope)


@pytest.mark.slow
@pytest.mark.heavy
def test_order_from_refinement_agrees_with_the_landscape_on_softmax_L32():
    """The finest grid's largest step is the jump of a_G at P* seen through one grid cell of
    spacing h (ln P) that straddles P*: with both branches rising in P it lies between
    a_copy(P*) - a_uniform(P* e^-h) and a_copy(P* e^h) - a_uniform(P*), each branch value a
    local minimum of the reduced action (the landscape, independent of the refinement)."""
    model = ch.SoftmaxReduced(L=32, V=8)
    refined = ch.transition_order(model, 1.0, 3000.0, levels=(16, 32, 64), offsets=4, fit_levels=3)
    lo, hi = refined.window
    assert refined.order is ch.TransitionOrder.first
    assert lo < 19.55 < hi  # the window holds the reconstruction's P* (copy_head.md)
    diagram = ch.phase_diagram(model, np.geomspace(15.0, 30.0, 41))
    P_star = _phase.classify_transition(model, diagram)["P_star"]
    i = int(np.argmin(np.abs(np.log(diagram.P / P_star))))

    def a_G(branch, P):
        x = ch.local_minimum(model, jnp.asarray(P), jnp.asarray(branch[i])).x
        return float(model.order(x)["a_G"])

    h = refined.spacing[-1]
    low = a_G(diagram.x_down, P_star) - a_G(diagram.x_up, P_star * np.exp(-h))
    high = a_G(diagram.x_down, P_star * np.exp(h)) - a_G(diagram.x_up, P_star)
    assert low <= refined.largest_step[-1] <= high, (low, refined.largest_step[-1], high)


def test_bimodality_separates_two_modes_from_one_and_from_tight_clusters():
    rng = np.random.default_rng(0)
    two = np.concatenate([rng.normal(0.0, 0.01, 300), rng.normal(0.3, 0.02, 200)])
    b = _bimodality.bimodality(two, min_separation=0.1)
    assert b.bimodal and abs(b.means[1] - 0.3) < 0.01 and abs(b.weights[1] - 0.4) < 0.05
    assert not _bimodality.bimodality(rng.normal(0.0, 1.0, 500)).bimodal
    clusters = np.concatenate([rng.normal(0.0, 1e-3, 50), rng.normal(0.01, 1e-3, 50)])
    assert _bimodality.bimodality(clusters).bimodal  # two clusters 10 sigma apart ...
    # ... but not two states
    assert not _bimodality.bimodality(clusters, min_separation=0.1).bimodal


def test_pair_disagreement_and_switch_bracket():
    P = np.repeat([1.0, 2.0, 3.0], 4)
    seeds = np.tile([0, 0, 1, 1], 3)
    start = np.tile([0.0, 1.0], 6)
    value = np.array([0, 0, 0, 0, 0, 1, 0, 0.05, 1, 1, 1, 1.0])
    h = _hysteresis.pair_disagreement(P, seeds, start, value, tolerance=0.5)
    assert h.disagree_fraction.tolist() == [0.0, 0.5, 0.0]
    assert h.pairs.tolist() == [2, 2, 2]
    Ps = np.array([1.0, 2.0, 3.0, 4.0])
    uniform, copy = np.array([0.0, 0.0, 1.0, 1.0]), np.array([0.0, 0.5, 0.5, 1.0])
    assert _hysteresis.switch_bracket(Ps, uniform, copy) == (2.0, 3.0)
    assert _hysteresis.switch_bracket(Ps, np.zeros(4), np.ones(4)) is None


def test_crossover_point_interpolates_in_log_P():
    P = np.array([1.0, 10.0, 100.0, 1000.0])
    c1 = np.array([0.0, 1.0, 1.0, 1.0])
    cG = np.array([0.0, 0.0, 2.0, 3.0])  # weight * c_G - c_1 = -1 at 10, +1 at 100
    assert abs(_transition.crossover_point(P, c1, cG, 1.0, P_c=2.0) - np.sqrt(1000.0)) < 1e-9
    assert np.isnan(_transition.crossover_point(P, c1, 0 * cG, 1.0, P_c=2.0))


@pytest.mark.parametrize("seed", range(3))
def test_compare_scaling_forms_recovers_the_law_that_made_the_data(seed):
    rng = np.random.default_rng(seed)
    L, V = np.meshgrid([16.0, 32.0, 64.0, 128.0], [4.0, 8.0, 16.0], indexing="ij")
    a, b, c = rng.uniform(0.3, 1.0), rng.uniform(0.2, 0.8), rng.uniform(1.0, 10.0)
    P = a * np.log(L) ** 2 + b * V**2 * np.log(L) / L + c
    fits = _scaling.compare_scaling_forms(L, V, P * (1 + 1e-6 * rng.standard_normal(L.shape)))
    assert fits[0].name.startswith("reconstruction")
    assert np.allclose(fits[0].coefficients, (a, b, c), rtol=1e-4)
    power = 3.0 * L**1.2 * V**0.4
    assert _scaling.compare_scaling_forms(L, V, power)[0].name.startswith("power law")


@pytest.mark.slow
@pytest.mark.heavy
def test_laplace_covariance_equals_the_dense_inverse_hessian():
    L, V = 4, 3
    X, Y = ch.copy_task(jax.random.key(0), 6, L, V)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ch.LinearCopyHead(), 0.8, 1.2, 0.9)
    G = 0.3 * jax.random.normal(jax.random.key(1), (L, L))
    descend = lambda g: _train.minimise_action(posterior, stats, g, steps=2000, learning_rate=0.02)
    G = jax.jit(descend)(G)
    observable = lambda g: jnp.stack(ch.order_parameters(posterior.attention(g)))
    cov = jax.jit(lambda g: _fluctuations.laplace_covariance(posterior, stats, g, observable))(G)
    H = jax.jit(jax.hessian(lambda g: posterior.action(g.reshape(L, L), stats)))(G.ravel())
    J = jax.jit(jax.jacobian(lambda g: observable(g.reshape(L, L))))(G.ravel())
    dense = J @ jnp.linalg.inv(H) @ J.T
    assert float(jnp.max(jnp.abs(cov - dense))) < 1e-8 * float(jnp.max(jnp.abs(dense)))


def test_population_test_loss_is_the_expected_loss_on_fresh_sequences():
    """Against the mean squared error on 40000 fresh sequences: within 5 standard errors."""
    L, V = 5, 3
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    G = jax.random.normal(jax.random.key(2), (L, L))
    W = jax.random.normal(jax.random.key(3), (V, V))
    exact = float(_measure.population_test_loss(posterior, G, W, V=V))
    X, Y = ch.copy_task(jax.random.key(4), 40000, L, V)
    per_seq = jnp.sum((Y - posterior.head(G, X, W)) ** 2, axis=(1, 2))
    se = float(jnp.std(per_seq)) / np.sqrt(per_seq.size)
    assert abs(float(jnp.mean(per_seq)) - exact) < 5 * se


def test_linear_exponents_read_each_axis_of_the_table():
    """A table made of exact power laws, P_c = V^2 and crossovers L^{3/2} V^{1/2}: each
    exponent is found on its own axis, for every label of the other."""
    Ls, Vs = [16, 32, 64, 128], [4, 8, 16]
    L, V = np.meshgrid(np.asarray(Ls, float), np.asarray(Vs, float), indexing="ij")
    table = {"P_c": V**2 + 0 * L, "raw": L**1.5 * V**0.5, "normalised": 2 * L**1.5 * V**0.5}
    out = _scaling.linear_exponents(Ls, Vs, table)
    laws = {"onset_in_V": (2.0, Ls)}
    for name in ("raw", "normalised"):
        laws.update({f"crossover_{name}_in_L": (1.5, Vs), f"crossover_{name}_in_V": (0.5, Ls)})
    assert sorted(out) == sorted(f"linear_{name}_exponent" for name in laws)
    for name, (law, labels) in laws.items():
        rows = out[f"linear_{name}_exponent"]
        assert len(rows) == len(labels)
        assert all(np.isclose(row["exponent"], law) for row in rows.values()), (name, rows)
