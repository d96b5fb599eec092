"""The paper's projected-Euler method and seeded inputs vs jaxdyn's adaptive solver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.experiments.pde_gaussian import RanksConfig, ranks_members
from jaxdyn.meanfield import (
    L2,
    Softmax,
    limiting_rank,
    paper_limiting_ranks,
    paper_rank_inputs,
    projected_euler,
    simulate_gaussian,
    softmax_identity_covariance,
)
from jaxdyn.meanfield._paper import paper_l2_rhs, paper_softmax_rhs


def test_seeded_inputs_are_reproducible_and_follow_the_construction():
    a = paper_rank_inputs(4, 5, attention="softmax", value="random")
    b = paper_rank_inputs(4, 5, attention="softmax", value="random")
    np.testing.assert_array_equal(a.Q, b.Q)
    np.testing.assert_array_equal(a.K, -a.Q)
    assert a.Q.shape == (5, 2, 4) and a.Sigma0.shape == (5, 4, 4)
    np.random.seed(40)
    np.testing.assert_array_equal(a.Q[0], np.random.randn(2, 4))
    np.random.seed(41)
    G = [np.random.randn(4, 4) for _ in range(2)]
    np.testing.assert_allclose(a.Sigma0[1], G[1] @ G[1].T / 4)  # default sigma0_norm="dim"
    np.random.seed(26)
    G = [np.random.randn(4, 4) for _ in range(2)]
    np.testing.assert_allclose(a.V[1], G[1].T @ G[1])  # default weights="per_run"
    assert not np.allclose(a.Q[0], a.Q[1])
    l2 = paper_rank_inputs(4, 5, attention="l2", value="random")
    assert not np.allclose(l2.V, a.V)  # seed 27 for L2
    # The page's literal Sigma_0 = G G^T, and one Q, V shared by the whole histogram.
    raw = paper_rank_inputs(4, 5, attention="softmax", value="random", sigma0_norm="none")
    np.testing.assert_allclose(raw.Sigma0, 4 * a.Sigma0)
    shared = paper_rank_inputs(4, 5, attention="softmax", value="random", weights="shared")
    np.testing.assert_array_equal(shared.Q, np.broadcast_to(a.Q[0], a.Q.shape))
    np.testing.assert_array_equal(shared.V, np.broadcast_to(a.V[0], a.V.shape))
    np.testing.assert_array_equal(shared.Sigma0, a.Sigma0)
    with pytest.raises(ValueError, match="attention"):
        paper_rank_inputs(3, 2, attention="sigmoid", value="identity")
    with pytest.raises(ValueError, match="weights"):
        paper_rank_inputs(3, 2, attention="softmax", value="identity", weights="once")
    with pytest.raises(ValueError, match="sigma0_norm"):
        paper_rank_inputs(3, 2, attention="softmax", value="identity", sigma0_norm="trace")


def test_default_construction_gives_the_pages_d3_histogram_shape():
    """d = 3, softmax, V = I: the page's "about half rank 2, half rank 1, a few rank 0".

    Exact ranks of Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1} at t = 1e4 (the decaying
    eigenvalues are O(1/t) by then), for the four constructions; only the default has both
    rank-0 runs and a near-even split of ranks 1 and 2.
    """

    def histogram(**kw):
        inp = paper_rank_inputs(3, 100, attention="softmax", value="identity", **kw)
        A = np.einsum("rki,rkj->rij", inp.K, inp.Q) / np.sqrt(3)
        S = A + np.transpose(A, (0, 2, 1))
        covs = np.linalg.solve(np.eye(3) - 1e4 * inp.Sigma0 @ S, inp.Sigma0)
        ranks = np.sum(np.linalg.eigvalsh(0.5 * (covs + np.transpose(covs, (0, 2, 1)))) > 0.1, -1)
        return np.bincount(ranks, minlength=4)

    default = histogram()
    assert default[0] >= 1 and abs(int(default[1]) - int(default[2])) <= 10 and default[3] == 0
    for kw in (
        {"sigma0_norm": "none"},
        {"weights": "shared"},
        {"weights": "shared", "sigma0_norm": "none"},
    ):
        other = histogram(**kw)
        assert other[0] == 0 or abs(int(other[1]) - int(other[2])) > 10, (kw, other)


@pytest.mark.parametrize("cls,page_rhs", [(Softmax, paper_softmax_rhs), (L2, paper_l2_rhs)])
def test_paper_numpy_rhs_equals_jaxdyn_gaussian_rhs(cls, page_rhs):
    inp = paper_rank_inputs(5, 2, attention="softmax", value="random")
    att = cls(Q=inp.Q[1], K=inp.K[1], V=inp.V[1])
    _, dcov = att.gaussian_rhs(jnp.zeros(5), jnp.asarray(inp.Sigma0[1]))
    np.testing.assert_allclose(
        dcov, page_rhs(inp.Sigma0[1], inp.Q[1], inp.K[1], inp.V[1]), rtol=1e-10
    )


def test_padding_to_the_largest_dimension_leaves_each_member_unchanged():
    """pde-ranks pads d = 3 members to D = 5: the 3 x 3 block follows the unpadded ODE exactly."""
    config = RanksConfig(dims=(3, 5), runs=2)
    params, labels = ranks_members(config)
    for m, (d, variant, value, r) in enumerate(labels):
        if d != 3:
            continue
        inp = paper_rank_inputs(3, 2, attention=variant, value=value)
        cls = Softmax if variant == "softmax" else L2
        small = cls(Q=inp.Q[r], K=inp.K[r], V=inp.V[r])
        big = cls(Q=params["Q"][m], K=params["K"][m], V=params["V"][m])
        _, dc_small = small.gaussian_rhs(jnp.zeros(3), jnp.asarray(inp.Sigma0[r]))
        _, dc_big = big.gaussian_rhs(jnp.zeros(5), jnp.asarray(params["Sigma0"][m]))
        np.testing.assert_allclose(dc_big[:3, :3], dc_small, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(dc_big[3:], 0.0)
        np.testing.assert_array_equal(dc_big[:, 3:], 0.0)


def test_projected_euler_tracks_the_closed_form():
    inp = paper_rank_inputs(3, 1, attention="softmax", value="identity")
    Q, K, V, S0 = inp.Q[0], inp.K[0], inp.V[0], inp.Sigma0[0]
    dt, steps = 1e-4, 2000
    res = projected_euler(
        lambda S: paper_softmax_rhs(S, Q, K, V), S0, dt=dt, tol_low=0.0, max_iter=steps
    )
    exact = np.asarray(softmax_identity_covariance(S0, K.T @ Q / np.sqrt(3), steps * dt))
    assert res.outcome == "max_iter"
    # Explicit Euler is first order: error O(dt) relative.
    assert np.max(np.abs(res.Sigma - exact)) < 50 * dt * np.max(np.abs(exact))


@pytest.mark.parametrize(
    "variant,tol_low,dt,norm",
    [
        # The page's unnormalised Sigma_0 = G G^T flows faster: fewer Euler steps (fast suite).
        ("softmax", 1e-2, 2e-3, "none"),
        pytest.param("l2", 1e-2, 2e-3, "dim", marks=pytest.mark.slow),
        pytest.param("softmax", 1e-3, 1e-3, "dim", marks=pytest.mark.slow),
        pytest.param("l2", 1e-3, 1e-3, "dim", marks=pytest.mark.slow),
    ],
)
def test_limiting_ranks_match_the_papers_projected_euler_run_by_run(variant, tol_low, dt, norm):
    d, runs = 3, 2
    inp = paper_rank_inputs(d, runs, attention=variant, value="identity", sigma0_norm=norm)
    euler_ranks, results = paper_limiting_ranks(inp, attention=variant, dt=dt, tol_low=tol_low)
    assert all(r.outcome == "converged" for r in results)
    cls = Softmax if variant == "softmax" else L2

    def solve(Q, K, V, S0):
        sol = simulate_gaussian(
            cls(Q=Q, K=K, V=V),
            jnp.zeros(d),
            S0,
            1e5,
            steady_tol=tol_low,
            rtol=1e-7,
            atol=1e-10,
            max_steps=20000,
        )
        return limiting_rank(sol.final_cov), sol.t_final, sol.final_cov

    ranks, t_stop, covs = jax.vmap(solve)(
        *(jnp.asarray(a) for a in (inp.Q, inp.K, inp.V, inp.Sigma0))
    )
    np.testing.assert_array_equal(np.asarray(ranks), euler_ranks)
    assert np.all(np.asarray(ranks) <= 2)
    for r in range(runs):
        # Same stopping rule: stopping times and states agree to the Euler step's accuracy.
        assert abs(float(t_stop[r]) - results[r].t) < 0.02 * results[r].t + 10 * dt
        np.testing.assert_allclose(covs[r], results[r].Sigma, atol=2e-2)
