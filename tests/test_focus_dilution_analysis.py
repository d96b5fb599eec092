"""analyse_flow on chains other than the paper's: signed rates, stages in order and the attention
entropy's down-up, over seeded random chains with d = 3..8 (focus_dilution.md, "Stages")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.gradflow as gf
from jaxdyn import Status
from jaxdyn.gradflow import _end_time, _linearise, _markov, _measure, _stages
from jaxdyn.sweep import Grid, SweepOptions, run_sweep
from jaxdyn.sweep._diffeq import plan_member

# float64 Hessian + eigh backward error ~ n u ||J|| ~ 1e-13; a wrong formula is off by O(1)
EIGEN_RTOL = 1e-8


def paper_family_chain(rng, d):
    """The paper's two families with a random dominant pi: lam I + (1 - lam) 1 pi^T, or a random
    reversible chain with stationary pi (its ablation)."""
    top = rng.uniform(0.6, 0.85)
    pi = np.concatenate([[top], (1 - top) * rng.dirichlet(np.full(d - 1, 2.0))])
    if rng.uniform() < 0.5:
        return np.asarray(_markov.paper_transition(jnp.asarray(pi), rng.uniform(0.3, 0.8)))
    key = jax.random.key(int(rng.integers(2**31)))
    return np.asarray(_markov.reversible_transition(pi, key, laziness=rng.uniform(0.0, 0.5)))


def dirichlet_chain(rng, d):
    """Any stochastic matrix whose rows favour token 0 (c of either sign)."""
    base = np.ones(d)
    base[0] = 1.5 * d
    return rng.dirichlet(base * rng.uniform(0.3, 3.0), size=d)


def analyse(P, num_saves=200):
    # one compilation per d: analyse_flow's steps are jitted separately and cached by shape
    a = gf.analyse_flow(gf.MarkovChain(P), m=2, m_attn=2, num_saves=num_saves)
    return jax.tree_util.tree_map(np.asarray, a)


# d = 3 in the heavy tests (CI), every d in the slow ones
@pytest.mark.parametrize(
    "d",
    [pytest.param(3, marks=[pytest.mark.slow, pytest.mark.heavy])]
    + [pytest.param(d, marks=pytest.mark.slow) for d in (4, 5, 6, 7, 8)],
)
def test_random_chains_signed_rates_and_stages_in_order(d):
    rng = np.random.default_rng(100 + d)
    family = [paper_family_chain(rng, d) for _ in range(2)]
    others = []
    while len(others) < 2:  # one chain of each sign of c among the general ones
        P = dirichlet_chain(rng, d)
        pi = gf.MarkovChain(P).pi
        s = gf.unigram_saddle(pi, 1, 1)
        c = float(_linearise._focus_rate(pi, P, s.gamma, s.beta))
        if abs(c) > 0.02 and np.sign(c) != (np.sign(others[0][1]) if others else 0):
            others.append((P, c))
    # at d >= 6 the random chains' |c| reaches 0.27-0.3: the focus leaves the saddle within a
    # few time units, which 200 log-spaced saves over the whole horizon do not resolve
    num_saves = 200 if d < 6 else 800
    runs = [analyse(P, num_saves) for P in family + [P for P, _ in others]]
    a = jax.tree_util.tree_map(lambda *x: np.stack(x), *runs)
    r, st = a.rates, a.stages
    assert np.all(Status.code(a.status) == Status.code(Status.successful))
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
        times = [getattr(st, k).time[i] for k in _stages.STAGE_NAMES]
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
    t_s, loss, bound = _measure.plateau_loss(
        a.ts, a.metrics["loss"], a.metrics["grad_norm"], t_c, t_d, a.spectrum_saddle.eigenvalues
    )
    H, log_d = float(a.stages.uniform_entropy), float(np.log(len(a.chain.pi)))
    assert gf.claims.unigram_plateau(loss, bound, H, log_d).holds
    traj = (a.ts, a.trajectory.W0, a.trajectory.WQ, a.trajectory.WK, a.chain.pi)
    sd = _measure.score_angle(*traj, c, saddle, t_s, t_d, t_noise=t_c)
    assert gf.claims.score_direction(sd["angle"], sd["bound"]).holds, sd
    flipped = _measure.score_angle(*traj, -c, saddle, t_s, t_d, t_noise=t_c)
    assert gf.claims.score_direction(flipped["angle"], flipped["bound"]).refuted, flipped
    gamma, k = a.metrics["gamma"], a.metrics["focus_rate_path"]
    dr = _measure.dilution_mode_growth(a.ts, gamma, a.chain.pi, saddle, k, c, t_s, t_d)
    ev = gf.claims.dilution_mode_rate(dr["rate"], dr["half_rates"], dr["rate_error"], abs(c))
    assert not ev.holds, dr
    assert ev.refuted or abs(c) < 0.03, dr  # decided wherever |c| is not small
    assert abs(dr["rate"] - 2 * abs(c)) <= ev.error_model.value, dr


@pytest.mark.slow
@pytest.mark.heavy
def test_chain_with_negative_c_reports_attention_moving_off_the_frequent_token():
    P = np.array([[0.4, 0.3, 0.2, 0.1], [0.9, 0.1, 0, 0], [0.9, 0, 0.1, 0], [0.9, 0, 0, 0.1]])
    a = analyse(P)
    assert float(a.rates.focus) < 0 and float(a.rates.focus_jacobian) < 0
    assert int(a.stages.departure_sign) == -1
    i = int(np.searchsorted(np.asarray(a.ts), float(a.stages.departure.time)))
    assert float(a.metrics["frequent_weight"][i]) < float(np.max(a.chain.pi))
    assert float(a.metrics["cos_Phi_pipi"][i]) < 0  # Phi along -pi pi^T


@pytest.mark.slow
def test_labelled_arrays_name_every_axis_and_keep_the_values():
    """On a chain whose d (3) differs from m (2) and from the saves: every axis is named, the
    time coordinate is ``ts``, the values are the analysis's own; no stall when not searched."""
    P = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.7, 0.1, 0.2]])
    kw = dict(m=2, m_attn=2, num_saves=24, t1=40.0, find_stall=False)
    a = jax.tree_util.tree_map(np.asarray, gf.analyse_flow(gf.MarkovChain(P), **kw))
    arrays = a.labelled_arrays()
    assert "gamma" not in arrays and "stall_tangential" not in arrays
    assert arrays["W0"].dims == ("time", "token", "embedding") and arrays["W0"].shape == (24, 3, 2)
    assert arrays["attention"].dims == ("time", "query", "key")
    assert arrays["spectrum_origin"].dims == ("eigenvalue",)
    assert arrays["sv_Phi"].dims[0] == "time" and arrays["loss"].dims == ("time",)
    np.testing.assert_array_equal(arrays["entropy_query"].coords["time"], a.ts)
    np.testing.assert_array_equal(arrays["attention"].coords["key"], np.arange(3))
    np.testing.assert_array_equal(arrays["attention"].values, a.metrics["attention"])
    np.testing.assert_array_equal(arrays["embedding_pca"].values, a.embedding_pca())
    assert set(arrays) == {"W0", "embedding_pca", "spectrum_origin", "spectrum_saddle"} | (
        set(a.metrics) - {"gamma"}
    )


def test_default_end_time_is_the_sum_of_the_escape_times():
    t = _end_time.default_end_time(1e-3, 0.5, -0.1, 0.02)
    np.testing.assert_allclose(t, 2 * np.log(1e3) * (2 + 10 + 50))
    # a rate that is not positive and finite drops out
    t = _end_time.default_end_time(1e-3, 0.5, 0.1, jnp.nan)
    np.testing.assert_allclose(t, 2 * np.log(1e3) * 12)


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
        gf.MarkovChain(np.asarray(P, float), None if pi is None else np.asarray(pi, float))


def test_analyse_flow_rejects_bad_settings():
    P = gf.MarkovChain.paper(jnp.array([0.7, 0.2, 0.1]), 0.5)
    with pytest.raises(TypeError, match="MarkovChain"):
        gf.analyse_flow(P.P)
    with pytest.raises(ValueError, match="eps"):
        gf.analyse_flow(P, eps=2.0)
    with pytest.raises(ValueError, match="m must be >= 2"):
        gf.analyse_flow(P, m=1)
    with pytest.raises(ValueError, match="t1"):
        gf.analyse_flow(P, t1=-5.0)
    with pytest.raises(ValueError, match="default end time needs the stall"):
        gf.analyse_flow(P, find_stall=False)


# --- analyse_flow inside run_sweep: its flow is continued in segments by the engine ---------


def _sweep_grid(n=8, d=3, seed=0):
    """Random chains, end times and initial scales whose flows take 10 to 300 solver steps."""
    rng = np.random.default_rng(seed)
    return Grid.zip(
        {
            "P": np.stack([dirichlet_chain(rng, d) for _ in range(n)]),
            "t1": np.geomspace(50.0, 3000.0, n),
            "eps": np.geomspace(1e-3, 1e-2, n),
        }
    )


def _flow_member(t1_given=True):
    def member(params, key):
        a = gf.analyse_flow(
            gf.MarkovChain(params["P"]),
            key=key,
            m=3,
            m_attn=2,
            eps=params["eps"],
            t1=params["t1"] if t1_given else None,
            num_saves=40,
            find_stall=not t1_given,
        )
        t = a.stages.condensation.time
        return {
            "W0": a.trajectory.W0,
            "WQ": a.trajectory.WQ,
            "loss": a.metrics["loss"],
            "t_condensation": jnp.where(jnp.isnan(t), jnp.inf, t),
            "focus_rate": a.rates.focus_visited,
            "steps": a.num_steps,
            "status": a.status,
        }

    return member


def test_analyse_flow_with_a_given_end_time_is_segmented_in_a_sweep():
    """The engine finds the one solve it can continue (the analysed flow; the attention-free
    flow and the stall are plain solves); with the default end time (its horizon comes from
    the stall, which every segment would recompute) the member runs as written."""
    grid = _sweep_grid(n=1)
    one = {k: v[0] for k, v in grid.params.items()}
    assert plan_member(_flow_member(), one, 0).reason is None
    assert plan_member(_flow_member(t1_given=False), one, 0).reason is not None


@pytest.mark.slow  # three sweeps of analyse_flow: ~40 CPU s, mostly compilation
def test_analyse_flow_in_a_sweep_equals_the_uninterrupted_and_the_direct_analyses():
    grid = _sweep_grid()
    member = _flow_member()
    logged = []
    options = SweepOptions(vmap_width=4, segment_steps=16, segment_width=4)
    routed = run_sweep(member, grid, options=options, log=logged.append)
    assert any("segments of 16 steps" in line for line in logged), logged
    steps = routed.outputs["steps"]
    assert steps.max() > 10 * steps.min() and steps.max() > 8 * 16, steps  # many segments
    assert np.all(Status.code(routed.status) == Status.code(Status.successful))
    # run as written, one vmapped solve per group: the same steps, and states equal up to the
    # rounding of differently compiled programs (XLA fuses the vector field differently in the
    # segment program: observed 5e-14 relative, far below the solver's rtol 1e-7)
    plain = run_sweep(member, grid, options=SweepOptions(vmap_width=4, segment_steps=0))
    np.testing.assert_array_equal(plain.outputs["steps"], steps)
    np.testing.assert_array_equal(plain.status, routed.status)
    for key in ("W0", "WQ", "loss", "t_condensation", "focus_rate"):
        np.testing.assert_allclose(routed.outputs[key], plain.outputs[key], rtol=1e-10, atol=1e-15)
    # and analyse_flow called directly (eagerly: a program of width 1, whose rounding can
    # change the adaptive steps): equal within the solvers' error, each step's local error
    # (rtol 1e-7, atol 1e-10, relative to the state) carried along by the flow's linear growth
    for i in (0, len(grid) - 1):
        params = {k: jnp.asarray(v[i]) for k, v in grid.params.items()}
        direct = member(params, jax.random.key(int(grid.seeds[i])))
        n = max(int(direct["steps"]), int(steps[i]))
        assert abs(int(direct["steps"]) - int(steps[i])) <= 0.01 * n
        for key in ("W0", "loss", "t_condensation"):
            np.testing.assert_allclose(
                routed.outputs[key][i], direct[key], rtol=n * 1e-7, atol=n * 1e-10, err_msg=key
            )
