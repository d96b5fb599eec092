"""analyse_flow on chains other than the paper's: signed rates, stages in order and the attention
entropy's down-up, over seeded random chains with d = 3..6 (focus_dilution.md, "Stages")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn import Status, status_code

# float64 Hessian + eigh backward error ~ n u ||J|| ~ 1e-13; a wrong formula is off by O(1)
EIGEN_RTOL = 1e-8


def paper_family_chain(rng, d):
    """The paper's two families with a random dominant pi: lam I + (1 - lam) 1 pi^T, or a random
    reversible chain with stationary pi (its ablation)."""
    top = rng.uniform(0.6, 0.85)
    pi = np.concatenate([[top], (1 - top) * rng.dirichlet(np.full(d - 1, 2.0))])
    if rng.uniform() < 0.5:
        return np.asarray(gf.paper_transition(jnp.asarray(pi), rng.uniform(0.3, 0.8)))
    key = jax.random.key(int(rng.integers(2**31)))
    return np.asarray(gf.reversible_transition(pi, key, laziness=rng.uniform(0.0, 0.5)))


def dirichlet_chain(rng, d):
    """Any stochastic matrix whose rows favour token 0 (c of either sign)."""
    base = np.ones(d)
    base[0] = 1.5 * d
    return rng.dirichlet(base * rng.uniform(0.3, 3.0), size=d)


def analyse(P):
    # one compilation per d: analyse_flow's steps are jitted separately and cached by shape
    return jax.tree_util.tree_map(np.asarray, gf.analyse_flow(P, m=2, m_attn=2, num_saves=200))


# d = 3 in the fast suite, every d in the slow one
@pytest.mark.parametrize("d", [3] + [pytest.param(d, marks=pytest.mark.slow) for d in (4, 5, 6)])
def test_random_chains_signed_rates_and_stages_in_order(d):
    rng = np.random.default_rng(100 + d)
    family = [paper_family_chain(rng, d) for _ in range(2)]
    others = []
    while len(others) < 2:  # one chain of each sign of c among the general ones
        P = dirichlet_chain(rng, d)
        pi = gf.MarkovChain(P).pi
        s = gf.unigram_saddle(pi, 1, 1)
        c = float(gf.focus_rate(pi, P, s.gamma, s.beta))
        if abs(c) > 0.02 and np.sign(c) != (np.sign(others[0][1]) if others else 0):
            others.append((P, c))
    runs = [analyse(P) for P in family + [P for P, _ in others]]
    a = jax.tree_util.tree_map(lambda *x: np.stack(x), *runs)
    r, st = a.rates, a.stages
    assert np.all(status_code(a.status) == status_code(Status.successful))
    np.testing.assert_allclose(r.condensation_jacobian, r.condensation, rtol=EIGEN_RTOL)
    np.testing.assert_allclose(r.focus_jacobian, r.focus, rtol=EIGEN_RTOL)
    np.testing.assert_allclose(r.focus_visited, r.focus_visited_formula, rtol=EIGEN_RTOL)
    # the sign of c says where attention moves first, for every chain
    np.testing.assert_array_equal(st.departure_sign, np.sign(r.focus))
    assert set(np.sign(r.focus[2:])) == {-1.0, 1.0}
    for run in runs:
        _score_direction_and_dilution_rate(run)
    # the paper's families: four stages in order, low-query entropy down below H(pi) then up
    for i in range(2):
        assert r.focus[i] > 0
        times = [getattr(st, k).time[i] for k in gf.STAGE_NAMES]
        assert np.all(np.isfinite(times)) and np.all(np.diff(times) > 0), times
        assert st.entropy_dip[i] < st.uniform_entropy[i] < st.entropy_peak[i]
        assert a.ts[i, -1] == pytest.approx(float(a.end_time[i]))


def _score_direction_and_dilution_rate(a):
    """Phi's direction holds for either sign of c; the dilution mode grows at 2|c| (forced by
    Phi): the paper's rate |c| is not what is measured (refuted where |c| is not small) and
    2|c| lies within the same error model."""
    c = float(a.rates.focus_visited)
    saddle = a.visited_saddle.model.W0
    t_c, t_d = float(a.stages.condensation.time), float(a.stages.departure.time)
    t_s, loss, bound = gf.plateau(
        a.ts, a.metrics["loss"], a.metrics["grad_norm"], t_c, t_d, a.spectrum_saddle.eigenvalues
    )
    H, log_d = float(a.stages.uniform_entropy), float(np.log(len(a.pi)))
    assert gf.plateau_evidence(loss, bound, H, log_d).holds
    traj = (a.ts, a.trajectory.W0, a.trajectory.WQ, a.trajectory.WK, a.pi)
    sd = gf.score_direction(*traj, c, saddle, t_s, t_d, t_noise=t_c)
    assert gf.score_direction_evidence(sd["angle"], sd["bound"]).holds, sd
    flipped = gf.score_direction(*traj, -c, saddle, t_s, t_d, t_noise=t_c)
    assert gf.score_direction_evidence(flipped["angle"], flipped["bound"]).refuted, flipped
    gamma, k = a.metrics["gamma"], a.metrics["focus_rate_path"]
    dr = gf.dilution_rate(a.ts, gamma, a.pi, saddle, k, c, t_s, t_d)
    ev = gf.dilution_rate_evidence(dr["rate"], dr["half_rates"], dr["rate_error"], abs(c))
    assert not ev.holds, dr
    assert ev.refuted or abs(c) < 0.03, dr  # decided wherever |c| is not small
    assert abs(dr["rate"] - 2 * abs(c)) <= ev.error_model.value, dr


def test_chain_with_negative_c_reports_attention_moving_off_the_frequent_token():
    P = np.array([[0.4, 0.3, 0.2, 0.1], [0.9, 0.1, 0, 0], [0.9, 0, 0.1, 0], [0.9, 0, 0, 0.1]])
    a = analyse(P)
    assert float(a.rates.focus) < 0 and float(a.rates.focus_jacobian) < 0
    assert int(a.stages.departure_sign) == -1
    i = int(np.searchsorted(np.asarray(a.ts), float(a.stages.departure.time)))
    assert float(a.metrics["frequent_weight"][i]) < float(np.max(a.pi))
    assert float(a.metrics["cos_Phi_pipi"][i]) < 0  # Phi along -pi pi^T


def test_default_end_time_is_the_sum_of_the_escape_times():
    t = gf.default_end_time(1e-3, 0.5, -0.1, 0.02)
    np.testing.assert_allclose(t, 2 * np.log(1e3) * (2 + 10 + 50))
    # a rate that is not positive and finite drops out
    np.testing.assert_allclose(gf.default_end_time(1e-3, 0.5, 0.1, jnp.nan), 2 * np.log(1e3) * 12)


@pytest.mark.parametrize(
    "P, pi, message",
    [
        ([[0.5, 0.6], [0.5, 0.5]], None, "not row-stochastic"),
        ([[1.0, 0.0], [0.0, 1.0]], None, "irreducible"),
        ([[0.5, 0.5], [0.5, 0.5]], [0.7, 0.3], "not stationary"),
        ([[0.5, 0.5, 0.0]], None, "square"),
    ],
)
def test_analyse_flow_rejects_invalid_chains_before_compiling(P, pi, message):
    with pytest.raises(ValueError, match=message):
        gf.analyse_flow(np.asarray(P, float), pi=None if pi is None else np.asarray(pi, float))


def test_analyse_flow_rejects_bad_settings():
    P = gf.paper_transition(jnp.array([0.7, 0.2, 0.1]), 0.5)
    with pytest.raises(ValueError, match="eps"):
        gf.analyse_flow(P, eps=2.0)
    with pytest.raises(ValueError, match="m must be >= 2"):
        gf.analyse_flow(P, m=1)
    with pytest.raises(ValueError, match="t1"):
        gf.analyse_flow(P, t1=-5.0)
    with pytest.raises(ValueError, match="default end time needs the stall"):
        gf.analyse_flow(P, find_stall=False)
