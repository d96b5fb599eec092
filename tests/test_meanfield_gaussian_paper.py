"""The paper's rank-histogram construction: published draws bit for bit, the published
projected-Euler loop and its attempt rule (transformer_pde.md, rank histograms)."""

import dataclasses

import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.meanfield import (
    softmax_identity_covariance,
)
from jaxdyn.meanfield._paper_inputs import paper_rank_inputs, published_rank_settings
from jaxdyn.meanfield._published_euler import (
    paper_l2_rhs,
    paper_softmax_rhs,
    projected_euler,
    published_rank_attempts,
    rank_histogram,
    stacked_rank_attempts,
)

PANELS = [(a, v, d) for a in ("softmax", "l2") for v in ("identity", "random") for d in (3, 4, 5)]


def _published_draw_sequence(attention, value, d, attempts):
    """The draw order stated for the published code, written out as one stream per seed."""
    np.random.seed(40)
    q_stream = []
    for dim in (3, 4, 5):
        for _ in range(100):
            q_stream.append(np.random.randn(dim // 2, dim))
    offset = {3: 0, 4: 100, 5: 200}[d]
    Q = q_stream[offset : offset + 100]
    if value == "random":
        np.random.seed({"softmax": 26, "l2": 27}[attention])
        g_stream = []
        for dim in (3, 4, 5):
            for _ in range(100):
                g_stream.append(np.random.randn(dim, dim))
        V = [G.T @ G for G in g_stream[offset : offset + 100]]
    else:
        V = [np.eye(d)] * 100
    np.random.seed(41)
    Sigma0 = []
    for _ in range(attempts):
        S = np.random.randn(d, d)
        Sigma0.append(S @ S.T)
    return Q, V, Sigma0


@pytest.mark.parametrize("attention,value,d", PANELS)
def test_paper_rank_inputs_equal_the_published_draws_bit_for_bit(attention, value, d):
    attempts = published_rank_settings(attention, value, d).attempts
    inputs = paper_rank_inputs(attention, value, d)
    Q, V, Sigma0 = _published_draw_sequence(attention, value, d, attempts)
    assert inputs.Sigma0.shape == (attempts, d, d) and inputs.Q.shape == (100, d // 2, d)
    assert np.array_equal(inputs.Q, np.stack(Q))
    assert np.array_equal(inputs.K, -np.stack(Q))
    assert np.array_equal(inputs.V, np.stack(V))
    assert np.array_equal(inputs.Sigma0, np.stack(Sigma0))


def test_published_settings_and_the_other_constructions():
    s = published_rank_settings("softmax", "random", 4)
    assert (s.dt, s.tol_low, s.max_steps, s.attempts) == (0.06, 5e-5, 90_000, 10_000)
    assert published_rank_settings("l2", "random", 3).dt == 0.15
    assert published_rank_settings("l2", "identity", 5).dt == 0.02
    published = paper_rank_inputs("softmax", "random", 4, 7)
    # One Q per run index; the Sigma_0 stream is shared by every panel of one dimension.
    np.testing.assert_array_equal(
        published.Sigma0, paper_rank_inputs("l2", "identity", 4, 7).Sigma0
    )
    per_run = paper_rank_inputs("softmax", "random", 4, 7, runs=5, construction="per_run")
    np.random.seed(40)
    np.testing.assert_array_equal(per_run.Q[0], np.random.randn(2, 4))
    shared = paper_rank_inputs(
        "softmax", "random", 4, 7, runs=5, construction="shared", sigma0_norm="dim"
    )
    np.testing.assert_array_equal(shared.Q, np.broadcast_to(per_run.Q[0], (5, 2, 4)))
    np.testing.assert_array_equal(shared.V, np.broadcast_to(per_run.V[0], (5, 4, 4)))
    np.testing.assert_allclose(shared.Sigma0, published.Sigma0 / 4, rtol=1e-15)
    other_d = paper_rank_inputs("softmax", "identity", 7, 3, runs=2, construction="per_run")
    assert other_d.Q.shape == (2, 3, 7)
    for kwargs, match in (
        (dict(attention="sigmoid", value="identity", d=3), "attention"),
        (dict(attention="softmax", value="G", d=3), "value"),
        (dict(attention="softmax", value="identity", d=6), "published"),
        (dict(attention="softmax", value="identity", d=3, construction="once"), "construction"),
        (dict(attention="softmax", value="identity", d=3, sigma0_norm="trace"), "sigma0_norm"),
        (dict(attention="softmax", value="identity", d=3, runs=101), "runs"),
        (dict(attention="softmax", value="identity", d=3, attempts=0), "attempts"),
    ):
        with pytest.raises(ValueError, match=match):
            paper_rank_inputs(**kwargs)


def test_projected_euler_stopping_rule_and_state_before_the_final_update():
    """F(S) = -S: S_n = (1 - h)^n S_0 exactly; the run stops after the first step whose
    starting norm |S_n|_F is below tol and returns S_n (the state before that update)."""
    S0, h, tol = np.diag([2.0, 1.0]), 0.1, 0.05
    res = projected_euler(lambda S: -S, S0, dt=h, tol_low=tol)
    norms = np.linalg.norm(S0) * (1 - h) ** np.arange(200)
    n = int(np.argmax(norms < tol))
    assert res.status == Status.code(Status.steady_state) and res.converged
    assert res.steps == n + 1
    np.testing.assert_allclose(res.Sigma, (1 - h) ** n * S0, rtol=1e-12)
    # Growth F(S) = S: diverged after the first update whose trace exceeds tol_high.
    grow = projected_euler(lambda S: S, S0, dt=h, tol_low=0.0, tol_high=10.0)
    m = int(np.argmax(3.0 * (1 + h) ** np.arange(1, 200) > 10.0)) + 1
    assert grow.status == Status.code(Status.blowup) and grow.steps == m
    stuck = projected_euler(lambda S: 0 * S + 1.0, S0, dt=h, tol_low=0.0, max_steps=7)
    assert stuck.status == Status.code(Status.max_steps_reached) and stuck.steps == 7


def test_projection_replaces_negative_eigenvalues_by_the_floor():
    """One step of F(S) = -3 S with h = 1 maps S to -2 S: every eigenvalue becomes negative
    and is replaced by 1e-14 (positive ones are kept)."""
    S0 = np.array([[2.0, 0.5], [0.5, 1.0]])
    res = projected_euler(lambda S: -3.0 * S, S0, dt=1.0, tol_low=0.0, max_steps=1)
    np.testing.assert_allclose(np.linalg.eigvalsh(res.Sigma), [1e-14, 1e-14], atol=1e-15)
    mixed = projected_euler(
        lambda S: np.diag([-3.0 * S[0, 0], 0.0]),
        np.diag([1.0, 0.5]),
        dt=1.0,
        tol_low=0.0,
        max_steps=1,
    )
    np.testing.assert_allclose(np.diag(mixed.Sigma), [1e-14, 0.5], atol=1e-15)


def test_projected_euler_is_first_order_on_the_softmax_closed_form():
    inputs = paper_rank_inputs("softmax", "identity", 3, 1, runs=1)
    Q, K, V, S0 = inputs.Q[0], inputs.K[0], inputs.V[0], inputs.Sigma0[0] / 3
    A = K.T @ Q / np.sqrt(3)
    exact = np.asarray(softmax_identity_covariance(S0, A, 0.5))
    errors = []
    for h in (1e-2, 5e-3, 2.5e-3):
        res = projected_euler(
            lambda S: paper_softmax_rhs(S, Q, K, V),
            S0,
            dt=h,
            tol_low=0.0,
            max_steps=round(0.5 / h),
        )
        errors.append(np.max(np.abs(res.Sigma - exact)))
    # Observed order log2(e(h) / e(h/2)) = 1 + O(h): it rounds to 1 (not 0 or 2), and its
    # deviation from 1 shrinks as h halves (the asymptotic regime).
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert abs(orders[-1] - 1.0) < 0.5, orders
    assert abs(orders[-1] - 1.0) < abs(orders[0] - 1.0), orders


def test_published_attempt_loop_pairs_rejected_attempts_with_the_same_run():
    """softmax, V random, d = 4: run index 2 diverges on its first Sigma_0 draws and is retried
    with the next ones; the index advances only on convergence."""
    inputs = paper_rank_inputs("softmax", "random", 4)
    settings = published_rank_settings("softmax", "random", 4)
    att = published_rank_attempts(inputs, settings, "softmax", runs=3)
    assert np.array_equal(att.attempt, np.arange(len(att.attempt)))
    assert att.converged.sum() == 3 and att.converged[-1]
    expected_run = np.concatenate([[0], np.cumsum(att.converged)[:-1]])
    np.testing.assert_array_equal(att.run, expected_run)
    assert np.any(att.status == Status.code(Status.blowup))
    for i in (0, len(att.run) - 2):  # a converged and a rejected attempt, re-run on their own
        r, a = att.run[i], att.attempt[i]
        Q, K, V = inputs.Q[r], inputs.K[r], inputs.V[r]
        res = projected_euler(
            lambda S, Q=Q, K=K, V=V: paper_softmax_rhs(S, Q, K, V),
            inputs.Sigma0[a],
            dt=settings.dt,
            tol_low=settings.tol_low,
            max_steps=settings.max_steps,
        )
        assert res.status == att.status[i] and res.steps == att.steps[i]
    assert np.all(att.rank[~att.converged] == -1)


def test_rank_histogram_leaves_out_ranks_above_half_the_dimension():
    np.testing.assert_array_equal(rank_histogram(np.array([0, 1, 2, 2, 3, -1]), 3), [1, 1, 2])
    np.testing.assert_array_equal(rank_histogram(np.array([3, 4, 1]), 5), [0, 1, 0, 1])


def test_paper_l2_rhs_reduces_to_softmax_without_keys_norm():
    """The NumPy L2 right-hand side at K^T K -> 0 (K scaled by eps, Q by 1/eps) is twice the
    softmax one: (I + 2 K^T K Sigma)^{-1} -> I."""
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((2, 4)), rng.standard_normal((2, 4)), rng.standard_normal((4, 4))
    G = rng.standard_normal((4, 4))
    S = G @ G.T
    eps = 1e-5
    np.testing.assert_allclose(
        paper_l2_rhs(S, Q / eps, K * eps, V), 2 * paper_softmax_rhs(S, Q, K, V), rtol=1e-6
    )


@pytest.mark.parametrize("attention", ["softmax", "l2"])
def test_attempt_loop_rhs_has_the_bits_of_the_published_expression(attention):
    """The attempt loop computes the published right-hand side with its constants hoisted out
    of the step: along a whole projected-Euler run every state is bit for bit the one the
    published expression gives."""
    from jaxdyn.meanfield._published_euler import _RHS_OF, PAPER_RHS

    inputs = paper_rank_inputs(attention, "random", 5, 2)
    settings = published_rank_settings(attention, "random", 5)
    Q, K, V = inputs.Q[1], inputs.K[1], inputs.V[1]
    runs = [
        projected_euler(
            rhs,
            inputs.Sigma0[1],
            dt=settings.dt,
            tol_low=settings.tol_low,
            max_steps=2000,
        )
        for rhs in (lambda S: PAPER_RHS[attention](S, Q, K, V), _RHS_OF[attention](Q, K, V))
    ]
    assert runs[0].steps == runs[1].steps and runs[0].status == runs[1].status
    assert np.array_equal(runs[0].Sigma, runs[1].Sigma)


_ATTEMPT_FIELDS = ("run", "attempt", "status", "rank", "steps", "projected")


def _random_panel(attention, value, d, rng, runs, attempts, max_steps):
    """A panel of random draws (not the paper's): Q, K = -Q and V as the panel's construction
    has them, dimension d, a loose convergence tolerance and a short step limit, so that
    attempts converge, diverge and are set aside at the step limit."""
    inputs = paper_rank_inputs(attention, value, d, attempts, runs=runs, construction="per_run")
    S = rng.standard_normal((attempts, d, d))
    inputs = dataclasses.replace(inputs, Sigma0=S @ np.swapaxes(S, 1, 2))
    settings = dataclasses.replace(
        published_rank_settings(attention, value, 4),
        tol_low=1e-2,
        max_steps=max_steps,
        attempts=attempts,
    )
    return inputs, settings


@pytest.mark.parametrize("attention", ["softmax", "l2"])
@pytest.mark.parametrize("lanes", [1, 3, 64])
@pytest.mark.parametrize(
    "guesses",
    [
        {},  # the defaults: no attempt here runs long enough to be guessed not to converge
        {"stagger": 1, "suspect_after": 1},  # every guess as early as possible
        {"stagger": 4, "suspect_after": 50},
    ],
)
def test_stacked_attempts_are_the_published_loops_bit_for_bit(attention, lanes, guesses):
    """The stacked attempt loop against the published one, attempt by attempt: the same
    pairing, statuses, steps, limiting ranks and projections, on random panels of dimensions
    2 and 6 where attempts are set aside both by divergence (within a few steps) and by the
    step limit (after the attempts started beside them have run on the guess that it
    converges: those are dropped and started again), with one lane and with several, and
    with guesses made early (many of them wrong) or late."""
    rng = np.random.default_rng(7)
    for d in (2, 6):
        panels = [
            _random_panel(attention, value, d, rng, runs=4, attempts=12, max_steps=400)
            for value in ("identity", "random")
        ]
        stacked = stacked_rank_attempts(panels, attention, lanes=lanes, **guesses)
        for (inputs, settings), got in zip(panels, stacked, strict=True):
            loop = published_rank_attempts(inputs, settings, attention)
            for field in _ATTEMPT_FIELDS:
                np.testing.assert_array_equal(getattr(got, field), getattr(loop, field), field)
            assert np.isnan(got.seconds).all() and got.seconds.shape == loop.seconds.shape


def test_stacked_attempts_cover_both_kinds_of_set_aside_attempts():
    """The panels of the bit-for-bit test exercise what they claim: attempts set aside by
    divergence and by the step limit, and converged ones after them."""
    rng = np.random.default_rng(7)
    statuses = set()
    for d in (2, 6):
        for value in ("identity", "random"):
            inputs, settings = _random_panel("softmax", value, d, rng, 4, 12, 400)
            statuses |= set(published_rank_attempts(inputs, settings, "softmax").status.tolist())
    assert {Status.code(s) for s in (Status.blowup, Status.max_steps_reached)} <= statuses
    assert Status.code(Status.steady_state) in statuses


def test_stacked_attempts_equal_the_loop_on_the_published_panels():
    """The published draws and settings (three runs per panel, d = 3), both attentions."""
    for attention in ("softmax", "l2"):
        panels = [
            (
                paper_rank_inputs(attention, value, 3, runs=3),
                published_rank_settings(attention, value, 3),
            )
            for value in ("identity", "random")
        ]
        for (inputs, settings), got in zip(
            panels, stacked_rank_attempts(panels, attention, runs=3), strict=True
        ):
            loop = published_rank_attempts(inputs, settings, attention, runs=3)
            for field in _ATTEMPT_FIELDS:
                np.testing.assert_array_equal(getattr(got, field), getattr(loop, field), field)


def test_stacked_attempts_reject_panels_of_several_dimensions():
    panels = [
        (
            paper_rank_inputs("softmax", "identity", d, runs=1),
            published_rank_settings("softmax", "identity", d),
        )
        for d in (3, 4)
    ]
    with pytest.raises(ValueError, match="one dimension"):
        stacked_rank_attempts(panels, "softmax")
    with pytest.raises(ValueError, match="lanes"):
        stacked_rank_attempts(panels[:1], "softmax", lanes=0)
    with pytest.raises(ValueError, match="stagger"):
        stacked_rank_attempts(panels[:1], "softmax", stagger=10, suspect_after=5)


def _isotropic_softmax(d, sign):
    """Softmax weights with ``A = K^T Q / sqrt(d) = sign * I`` and ``V = I``: the covariance
    ODE is ``Sigma' = 2 sign Sigma^2``, solved by ``Sigma(t) = (Sigma_0^{-1} - 2 sign t)^{-1}``
    eigenvalue by eigenvalue."""
    return sign * np.sqrt(d) * np.eye(d), np.eye(d), np.eye(d)


def test_third_method_stops_where_the_closed_form_does():
    """DOP853 on ``Sigma' = -2 Sigma^2`` (eigenvalues ``1 / (1 / l0 + 2t)``): converged with the
    closed form's rank where ``|F|_F = 2 |Sigma^2|_F`` reaches ``tol_low``; on ``+2 Sigma^2``
    diverged; with a horizon before either, ``successful``."""
    from jaxdyn.meanfield._third_method import dop853_rank_outcome

    d, l0, tol_low = 3, np.array([4.0, 1.0, 0.02]), 0.05

    def solve(sign, **changes):
        options = {"tol_low": tol_low, "tol_high": 1e3, "t1": 50.0, "rtol": 1e-11}
        options |= {"atol": 1e-13, "threshold": 0.1} | changes
        return dop853_rank_outcome("softmax", *_isotropic_softmax(d, sign), np.diag(l0), **options)

    # closed form: the stop time solves 2 sqrt(sum l(t)^4) = tol_low
    ts = np.linspace(0.0, 50.0, 500_001)
    lam = 1.0 / (1.0 / l0[None, :] + 2.0 * ts[:, None])
    stop = np.argmax(2.0 * np.sqrt(np.sum(lam**4, axis=1)) <= tol_low)
    expected_rank = int(np.sum(lam[stop] > 0.1))
    assert expected_rank == 2  # the case tests a rank between 0 and d
    assert solve(-1.0) == (Status.code(Status.steady_state), expected_rank)
    # the counterfactual: a threshold above the surviving eigenvalue changes the rank
    assert solve(-1.0, threshold=lam[stop][1] * 1.01)[1] == 1
    assert solve(1.0)[0] == Status.code(Status.blowup)  # at t = 1 / (2 * 4) = 0.125
    assert solve(-1.0, t1=0.01)[0] == Status.code(Status.successful)


@pytest.mark.slow
@pytest.mark.heavy  # kept out of the fast suite for its time
def test_third_method_agrees_with_the_accurate_solve_on_published_draws():
    """Every attempt of the published d = 3 panels, both attentions (two runs per panel):
    ``pde-ranks``' third method (DOP853 on the published right-hand side, from the unpadded
    draws) and its accurate solve (diffrax Tsit5 on jaxdyn's field, padded members, one sweep)
    give the same outcome and rank, attempt by attempt."""
    from jaxdyn.meanfield._rank_runs import rank_members, stacked_published_attempts, third_method
    from jaxdyn.meanfield._ranks import rank_member
    from jaxdyn.sweep import Grid, run_sweep

    panels = stacked_published_attempts((3,), 2)
    params = rank_members((3,), panels)
    accurate = run_sweep(rank_member(), Grid.zip(params), name="third")
    status, rank = third_method((3,), panels, np.arange(len(params["panel"])))
    np.testing.assert_array_equal(status, accurate.status)
    np.testing.assert_array_equal(rank, accurate.outputs["rank"])
    assert set(np.unique(params["panel"])) == set(range(4))
