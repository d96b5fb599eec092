"""Gaussian closure of the Transformer PDE: formulas, Monte-Carlo particles, closed forms."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jaxdyn import Status
from jaxdyn.meanfield import (
    blowup_time,
    simulate_gaussian,
    softmax_identity_covariance,
)
from jaxdyn.meanfield._closed_forms import limiting_rank, low_rank_limit
from jaxdyn.meanfield.fields import (
    L2,
    AbstractGaussianClosed,
    Linear,
    Masked,
    MultiHead,
    Sigmoid,
    Sinkhorn,
    Softmax,
)

D = 3


def _problem(seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((D, D))
    K = scale * rng.standard_normal((D, D))
    V = rng.standard_normal((D, D))
    G = rng.standard_normal((D, D))
    cov = G @ G.T / D + 0.2 * np.eye(D)
    mean = 0.5 * rng.standard_normal(D)
    return Q, K, V, mean, cov


def _page_rhs(kind, Q, K, V, mean, cov, heads=1):
    """The science page's table, transcribed independently in NumPy/SciPy."""
    d = Q.shape[1]
    eye = np.eye(d)
    A = K.T @ Q / np.sqrt(d)
    if kind == "softmax":
        M = V @ cov @ A @ cov
        return V @ (eye + cov @ A) @ mean, M + M.T
    if kind == "l2":
        KK = K.T @ K
        M = 2 * V @ cov @ np.linalg.inv(eye + 2 * KK @ cov) @ A @ cov
        return V @ np.linalg.inv(eye + 2 * cov @ KK) @ (eye + 2 * cov @ A) @ mean, M + M.T
    if kind == "linear":
        P = cov + np.outer(mean, mean)
        M = V @ P @ A @ cov
        return V @ P @ A @ mean, M + M.T
    if kind == "sinkhorn":
        A = K.T @ Q
        S = scipy.linalg.sqrtm(cov).real
        At = S @ A @ S
        phi = 2 * At @ np.linalg.inv(eye + scipy.linalg.sqrtm(eye + 4 * At.T @ At).real)
        M = V @ S @ phi @ S
        return V @ mean, M + M.T
    if kind == "multihead":
        k = Q.shape[0] // heads
        dm, dc = 0, 0
        for h in range(heads):
            r = slice(h * k, (h + 1) * k)
            Ah = K[r].T @ Q[r] / np.sqrt(k)
            Ch = np.eye(d)[r].T @ V[r]
            M = Ch @ cov @ Ah @ cov
            dm, dc = dm + Ch @ (eye + cov @ Ah) @ mean, dc + M + M.T
        return dm, dc
    raise ValueError(kind)


def _module(kind, Q, K, V, chunk_size=None):
    if kind == "multihead":
        return MultiHead(Q=Q, K=K, V=V, heads=D, chunk_size=chunk_size)
    return {"softmax": Softmax, "l2": L2, "linear": Linear, "sinkhorn": Sinkhorn}[kind](
        Q=Q, K=K, V=V, chunk_size=chunk_size
    )


KINDS = ["softmax", "l2", "linear", "sinkhorn", "multihead"]


@pytest.mark.parametrize("kind", KINDS)
def test_gaussian_rhs_matches_the_science_page_formulas(kind):
    Q, K, V, mean, cov = _problem(seed=1)
    dm, dc = _module(kind, Q, K, V).gaussian_rhs(jnp.asarray(mean), jnp.asarray(cov))
    em, ec = _page_rhs(kind, Q, K, V, mean, cov, heads=D)
    np.testing.assert_allclose(dm, em, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dc, ec, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "kind,n",
    [("softmax", 8000), ("l2", 8000), ("linear", 8000), ("multihead", 8000), ("sinkhorn", 1500)],
)
def test_gaussian_rhs_matches_monte_carlo_particle_velocities(kind, n):
    """Velocities of n tokens sampled from N(alpha, Sigma) are affine, B x + c, with the
    closed B and c; the fitted (B, c) reproduce gaussian_rhs up to Monte-Carlo error."""
    Q, K, V, mean, cov = _problem(seed=2, scale=0.4)
    att = _module(kind, Q, K, V, chunk_size=None if kind == "sinkhorn" else 2048)
    x = mean + np.random.default_rng(3).standard_normal((n, D)) @ np.linalg.cholesky(cov).T
    x = jnp.asarray(x)
    v = att.velocity(x, x)
    # Least-squares fit of v = B x + c over the sample.
    X = jnp.concatenate([x, jnp.ones((n, 1))], axis=1)
    coef = jnp.linalg.lstsq(X, v)[0]
    B_fit, c_fit = coef[:D].T, coef[D]
    B, c = att.affine_velocity(jnp.asarray(mean), jnp.asarray(cov))
    tol = 6.0 / np.sqrt(n) * (np.linalg.norm(B) + 1)
    assert np.linalg.norm(B_fit - B) < tol, (B_fit, B)
    assert np.linalg.norm(c_fit - c) < tol, (c_fit, c)
    dm, dc = att.gaussian_rhs(jnp.asarray(mean), jnp.asarray(cov))
    fit_dc = B_fit @ cov + cov @ B_fit.T
    assert np.linalg.norm(fit_dc - dc) < 3 * tol * np.linalg.norm(cov)


def test_monte_carlo_check_detects_a_wrong_l2_factor():
    """The Monte-Carlo tolerance is tight enough to reject L2 without its factor 2."""
    Q, K, V, mean, cov = _problem(seed=2, scale=0.4)
    att = L2(Q=Q, K=K, V=V, chunk_size=2048)
    B, _ = att.affine_velocity(jnp.asarray(mean), jnp.asarray(cov))
    n = 8000
    x = jnp.asarray(
        mean + np.random.default_rng(3).standard_normal((n, D)) @ np.linalg.cholesky(cov).T
    )
    X = jnp.concatenate([x, jnp.ones((n, 1))], axis=1)
    B_fit = jnp.linalg.lstsq(X, att.velocity(x, x))[0][:D].T
    tol = 6.0 / np.sqrt(n) * (np.linalg.norm(B) + 1)
    assert np.linalg.norm(B_fit - 0.5 * B) > tol


def test_non_gaussian_closed_variants_refuse_gaussian_rhs():
    Q, K, V, mean, cov = _problem()
    assert not isinstance(Sigmoid(Q=Q, K=K, V=V), AbstractGaussianClosed)
    # Our TypeError, or the runtime type checker's (the annotation is AbstractGaussianClosed).
    with pytest.raises(TypeError, match="Gaussian-?[cC]losed"):
        simulate_gaussian(Sigmoid(Q=Q, K=K, V=V), mean, cov, 1.0)
    with pytest.raises(TypeError, match="Gaussian-?[cC]losed"):
        simulate_gaussian(
            Masked(base=Softmax(Q=Q, K=K, V=V), positions=jnp.zeros(4)), mean, cov, 1.0
        )


@pytest.mark.slow
@pytest.mark.heavy
def test_softmax_identity_solution_matches_closed_form_to_1e8():
    Q, K, _, mean, cov = _problem(seed=4)
    att = Softmax(Q=Q, K=K, V=jnp.eye(D))
    A = np.asarray(att.A())
    t_star = float(blowup_time(cov, A))
    T = 0.8 * min(t_star, 5.0)
    ts = jnp.linspace(0.0, T, 6)
    sol = simulate_gaussian(
        att, jnp.zeros(D), jnp.asarray(cov), T, ts=ts, rtol=1e-12, atol=1e-14, max_steps=100000
    )
    assert bool(sol.status == Status.successful)
    exact = jax.vmap(lambda t: softmax_identity_covariance(cov, A, t))(ts)
    np.testing.assert_allclose(sol.covs, exact, rtol=1e-8, atol=1e-10)


def test_solve_without_events_matches_the_closed_form_and_reports_no_event():
    # blowup_trace=None and psd_tol=None: no event at all (no root finder in the program)
    Q, K, _, mean, cov = _problem(seed=5)
    att = Softmax(Q=Q, K=K, V=jnp.eye(D))
    A = np.asarray(att.A())
    T = 0.8 * min(float(blowup_time(cov, A)), 5.0)
    sol = simulate_gaussian(
        att, jnp.zeros(D), jnp.asarray(cov), T, rtol=1e-12, atol=1e-14, max_steps=100000,
        blowup_trace=None, psd_tol=None,
    )  # fmt: skip
    assert bool(sol.status == Status.successful)
    assert float(sol.t_final) == pytest.approx(T) and not np.isfinite(float(sol.t_event))
    assert not np.isfinite(float(sol.t_blowup))
    exact = softmax_identity_covariance(cov, A, T)
    np.testing.assert_allclose(sol.final_cov, exact, rtol=1e-8, atol=1e-10)


def test_closed_form_inverse_evolves_linearly():
    _, _, _, _, cov = _problem(seed=5)
    A = np.random.default_rng(6).standard_normal((D, D))
    S = A + A.T
    for t in (0.01, 0.05):
        Sig = np.asarray(softmax_identity_covariance(cov, A, t))
        np.testing.assert_allclose(
            np.linalg.inv(Sig), np.linalg.inv(cov) - t * S, rtol=1e-9, atol=1e-9
        )


def test_softmax_blowup_time_matches_closed_form_to_1e8():
    rng = np.random.default_rng(7)
    P = rng.standard_normal((D, D))
    A = 0.3 * P @ P.T + 0.5 * (P - P.T)  # A + A^T > 0
    _, _, _, _, cov = _problem(seed=8)
    att = Softmax(Q=np.sqrt(D) * np.eye(D), K=A.T, V=np.eye(D))
    np.testing.assert_allclose(att.A(), A, atol=1e-14)
    t_star = float(blowup_time(cov, A))
    # At t*, Sigma(t)^{-1} = Sigma_0^{-1} - t* (A + A^T) becomes singular.
    lam = np.linalg.eigvalsh(np.linalg.inv(cov) - t_star * (A + A.T))
    assert abs(lam[-1]) < 1e-10 * np.abs(lam).max() or abs(lam[0]) < 1e-10 * np.abs(lam).max()
    sol = simulate_gaussian(
        att,
        jnp.zeros(D),
        jnp.asarray(cov),
        10 * t_star,
        rtol=1e-12,
        atol=1e-12,
        blowup_trace=1e6,
        max_steps=100000,
    )
    assert bool(sol.status == Status.blowup)
    assert abs(float(sol.t_blowup) - t_star) < 1e-8 * t_star
    # The event itself is where tr Sigma(t) = 1e6 exactly (root finder on the real-valued event).
    np.testing.assert_allclose(
        np.trace(softmax_identity_covariance(cov, A, sol.t_event)), 1e6, rtol=1e-5
    )
    # Sigma / tr Sigma tends to rank one.
    ev = np.linalg.eigvalsh(sol.final_cov)
    assert ev[-2] / ev[-1] < 1e-4


def test_no_blowup_when_symmetric_part_is_negative_semidefinite():
    Q = np.random.default_rng(9).standard_normal((1, D))
    _, _, _, _, cov = _problem(seed=10)
    att = Softmax(Q=Q, K=-Q, V=np.eye(D))
    assert float(blowup_time(cov, att.A())) == np.inf
    sol = simulate_gaussian(
        att, jnp.zeros(D), jnp.asarray(cov), 200.0, rtol=1e-10, atol=1e-12, max_steps=100000
    )
    assert bool(sol.status == Status.successful) and float(sol.t_event) == np.inf


def test_low_rank_limit_is_the_long_time_closed_form():
    Q = np.random.default_rng(11).standard_normal((1, D))  # ker(A + A^T) has dimension D - 1
    _, _, _, _, cov = _problem(seed=12)
    A = -Q.T @ Q / np.sqrt(D)
    limit = np.asarray(low_rank_limit(cov, A))
    late = np.asarray(softmax_identity_covariance(cov, A, 1e7))
    np.testing.assert_allclose(late, limit, atol=1e-6)
    assert int(limiting_rank(limit, 1e-9)) == D - 1
    # Negative definite A + A^T: the limit is zero; a positive eigenvalue: NaN (blow-up instead).
    np.testing.assert_allclose(low_rank_limit(cov, -np.eye(D)), 0.0, atol=1e-14)
    assert np.all(np.isnan(low_rank_limit(cov, np.eye(D))))


def test_limiting_rank_counts_eigenvalues_above_threshold():
    U = scipy.linalg.qr(np.random.default_rng(13).standard_normal((4, 4)))[0]
    cov = U @ np.diag([2.0, 0.5, 0.09, 0.0]) @ U.T
    assert int(limiting_rank(cov)) == 2
    assert int(limiting_rank(cov, threshold=0.05)) == 3


def test_steady_state_event_stops_at_the_papers_tolerance():
    Q = np.random.default_rng(14).standard_normal((1, D))
    _, _, _, _, cov = _problem(seed=15)
    att = Softmax(Q=Q, K=-Q, V=np.eye(D))
    sol = simulate_gaussian(
        att, jnp.zeros(D), jnp.asarray(cov), 1e5, steady_tol=1e-3, rtol=1e-8, atol=1e-10
    )
    assert bool(sol.status == Status.steady_state)
    _, dcov = att.gaussian_rhs(sol.final_mean, sol.final_cov)
    np.testing.assert_allclose(np.linalg.norm(dcov), 1e-3, rtol=1e-6)


@pytest.mark.slow
def test_simulate_gaussian_vmaps_over_initial_conditions():
    Q, K, V, mean, cov = _problem(seed=16, scale=0.3)
    att = Softmax(Q=Q, K=K, V=V)
    covs = jnp.stack([cov, 2 * cov, 0.5 * cov])
    batched = jax.vmap(
        lambda c: simulate_gaussian(att, jnp.asarray(mean), c, 0.5, rtol=1e-10, atol=1e-12)
    )(covs)
    for i in range(3):
        one = simulate_gaussian(att, jnp.asarray(mean), covs[i], 0.5, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(batched.final_cov[i], one.final_cov, rtol=1e-9)


@pytest.mark.slow
def test_fixed_step_solver_agrees_with_adaptive():
    Q, K, V, mean, cov = _problem(seed=17, scale=0.3)
    att = L2(Q=Q, K=K, V=V)
    a = simulate_gaussian(att, jnp.asarray(mean), jnp.asarray(cov), 1.0, rtol=1e-11, atol=1e-12)
    f = simulate_gaussian(
        att,
        jnp.asarray(mean),
        jnp.asarray(cov),
        1.0,
        stepsize_controller=diffrax.ConstantStepSize(),
        dt0=1e-3,
    )
    np.testing.assert_allclose(f.final_cov, a.final_cov, rtol=1e-8)
    with pytest.raises(ValueError, match="dt0"):
        simulate_gaussian(att, mean, cov, 1.0, stepsize_controller=diffrax.ConstantStepSize())


def test_invalid_inputs_raise_before_compiling():
    Q, K, V, mean, cov = _problem()
    att = Softmax(Q=Q, K=K, V=V)
    # A wrong shape may meet the runtime type checker (TypeError) before our ValueError.
    with pytest.raises((ValueError, TypeError), match="cov0"):
        simulate_gaussian(att, mean, cov[:2], 1.0)
    with pytest.raises(ValueError, match="t1"):
        simulate_gaussian(att, mean, cov, -1.0)
    with pytest.raises(ValueError, match="positive semi-definite"):
        simulate_gaussian(att, mean, -cov, 1.0)
    with pytest.raises(ValueError, match="symmetric"):
        simulate_gaussian(att, mean, cov + np.triu(np.ones((D, D)), 1), 1.0)


@pytest.mark.slow
def test_gradient_through_solver_matches_closed_form_derivative():
    """d tr Sigma(t) / dA and d t* / dA through the adaptive solver vs the closed forms."""
    rng = np.random.default_rng(18)
    P = rng.standard_normal((D, D))
    A0 = jnp.asarray(0.3 * P @ P.T + 0.3 * (P - P.T))
    _, _, _, _, cov = _problem(seed=19)
    cov = jnp.asarray(cov)
    T = 0.5 * float(blowup_time(cov, A0))

    def trace_solver(A):
        att = Softmax(Q=np.sqrt(D) * jnp.eye(D), K=A.T, V=jnp.eye(D))
        return jnp.trace(
            simulate_gaussian(att, jnp.zeros(D), cov, T, rtol=1e-12, atol=1e-12).final_cov
        )

    g_solver = jax.grad(trace_solver)(A0)
    g_exact = jax.grad(lambda A: jnp.trace(softmax_identity_covariance(cov, A, T)))(A0)
    np.testing.assert_allclose(g_solver, g_exact, rtol=1e-6, atol=1e-8)

    def tstar_solver(A):
        att = Softmax(Q=np.sqrt(D) * jnp.eye(D), K=A.T, V=jnp.eye(D))
        sol = simulate_gaussian(
            att, jnp.zeros(D), cov, 10.0, rtol=1e-12, atol=1e-12, blowup_trace=1e6, max_steps=100000
        )
        return sol.t_blowup

    g_t = jax.grad(tstar_solver)(A0)
    g_t_exact = jax.grad(lambda A: blowup_time(cov, A))(A0)
    np.testing.assert_allclose(g_t, g_t_exact, rtol=1e-5, atol=1e-8)


# --- d = 2 cone cases (pde-cone): derived flows for "two lines" and "either" -------------------


def _softmax_case(name):
    from jaxdyn.meanfield._paper_inputs import cone_cases

    c = cone_cases()[name]
    return Softmax(Q=c["Q"], K=c["K"], V=c["V"])


def _trace_one(u, w):
    return np.array([[(1 + u) / 2, w / 2], [w / 2, (1 - u) / 2]])


def test_rank_one_equilibria_stability_is_the_derived_sign():
    """At Sigma* = p e e^T with e^T A e = 0, the Jacobian of the softmax ODE restricted to
    the directions off the line has eigenvalues 2 p (e^T A f)(f^T V e) (twice): the criterion
    behind the "two lines" and "either" cases."""
    from jaxdyn.meanfield._cone import isotropic_line_stability

    rng = np.random.default_rng(21)
    A = np.diag([1.0, -1.0])
    for V in (np.diag([-1.0, 1.0]), np.diag([2.0, 3.0]), rng.standard_normal((2, 2))):
        att = Softmax(Q=np.eye(2), K=np.sqrt(2.0) * A, V=V)
        np.testing.assert_allclose(att.A(), A, atol=1e-14)
        for e in (np.array([1.0, 1.0]) / np.sqrt(2), np.array([1.0, -1.0]) / np.sqrt(2)):
            f = np.array([-e[1], e[0]])
            p = 0.7
            basis = np.stack([np.outer(e, e), np.outer(e, f) + np.outer(f, e), np.outer(f, f)])

            def rhs(z, e=e, f=f, p=p, att=att, basis=basis):
                cov = p * np.outer(e, e) + jnp.tensordot(z, basis, 1)
                _, dcov = att.gaussian_rhs(jnp.zeros(2), cov)
                # coordinates of dcov in the (ee, ef + fe, ff) basis
                return jnp.array([e @ dcov @ e, e @ dcov @ f, f @ dcov @ f])

            assert np.max(np.abs(rhs(jnp.zeros(3)))) < 1e-14  # an equilibrium
            J = np.asarray(jax.jacfwd(rhs)(jnp.zeros(3)))
            off_line = np.sort(np.linalg.eigvals(J[1:, 1:]).real)
            kappa = 2 * p * (e @ A @ f) * (f @ V @ e)
            np.testing.assert_allclose(off_line, [kappa, kappa], atol=1e-12)
            listed = [k for e2, k in isotropic_line_stability(A, V) if abs(e2 @ e) > 1 - 1e-12]
            np.testing.assert_allclose(2 * p * np.array(listed), [kappa], atol=1e-12)


def test_two_lines_closed_form_solves_the_softmax_ode():
    """The exact "two lines" solution (c constant, Riccati a and b) against the ODE itself:
    its time derivative (central differences) equals the softmax right-hand side."""
    from jaxdyn.meanfield._cone import two_lines_covariance

    att = _softmax_case("two_lines")
    for u, w in ((0.3, 0.5), (-0.6, -0.2), (0.4, 0.0)):
        cov0 = _trace_one(u, w)
        for t in (0.0, 0.7, 3.0):
            h = 1e-5
            deriv = (two_lines_covariance(cov0, t + h) - two_lines_covariance(cov0, t - h)) / (
                2 * h
            )
            _, dcov = att.gaussian_rhs(jnp.zeros(2), jnp.asarray(two_lines_covariance(cov0, t)))
            np.testing.assert_allclose(deriv, dcov, atol=1e-8)
        np.testing.assert_allclose(two_lines_covariance(cov0, 0.0), cov0, atol=1e-15)


@pytest.mark.slow
@pytest.mark.heavy
def test_vmapped_members_without_event_reach_t1_when_another_member_blows_up():
    # regression: the event bisection once assumed an upward crossing, and members without an
    # event stopped one step short of t1 whenever another member of the batch blew up
    att_a = Softmax(Q=np.eye(2), K=np.sqrt(2.0) * np.eye(2), V=np.eye(2))  # A = I: blows up
    att_b = Softmax(Q=np.eye(2), K=-np.sqrt(2.0) * np.eye(2), V=np.eye(2))  # A = -I: decays
    Ks = jnp.stack([att_a.K, att_b.K])

    @jax.vmap
    def solve(K):
        return simulate_gaussian(
            Softmax(Q=np.eye(2), K=K, V=np.eye(2)), jnp.zeros(2), 0.5 * jnp.eye(2), 5.0
        )

    sol = solve(Ks)
    codes = Status.code(sol.status)
    assert codes[0] == Status.code(Status.blowup) and codes[1] == Status.code(Status.successful)
    assert float(sol.t_final[1]) == 5.0


@pytest.mark.slow
def test_two_lines_and_either_cases_follow_the_derived_flows():
    """One compiled solve: "two lines" follows its exact Riccati solution and converges to the
    line of sign(c0); "either" blows up along the attracting eigenvector of V from one start
    and converges to the stable isotropic line from another."""
    from jaxdyn.meanfield._cone import (
        blowup_directions,
        isotropic_line_stability,
        two_lines_covariance,
    )
    from jaxdyn.meanfield._paper_inputs import cone_cases

    cases = cone_cases()
    starts = [("two_lines", (0.3, 0.5)), ("two_lines", (-0.6, -0.2)), ("two_lines", (0.4, 0.0))]
    starts += [("either", (0.2, 0.7)), ("either", (0.0, -0.7))]
    stack = {
        k: jnp.asarray(np.stack([cases[name][k] for name, _ in starts])) for k in ("Q", "K", "V")
    }
    covs0 = np.stack([_trace_one(*uw) for _, uw in starts])
    ts = jnp.linspace(0.0, 20.0, 5)

    @jax.jit
    @jax.vmap
    def solve(Q, K, V, cov0):
        return simulate_gaussian(
            Softmax(Q=Q, K=K, V=V),
            jnp.zeros(2),
            cov0,
            30.0,
            ts=ts,
            rtol=1e-10,
            atol=1e-12,
            blowup_trace=1e6,
        )

    sol = solve(stack["Q"], stack["K"], stack["V"], jnp.asarray(covs0))
    for m in range(3):  # two lines
        assert Status.code(sol.status)[m] == Status.code(Status.successful)
        exact = np.stack([two_lines_covariance(covs0[m], float(t)) for t in ts])
        np.testing.assert_allclose(sol.covs[m], exact, atol=1e-8)
        c = covs0[m, 0, 1]
        limit = abs(c) * np.array([[1.0, np.sign(c)], [np.sign(c), 1.0]])
        np.testing.assert_allclose(sol.final_cov[m], limit, atol=1e-4 if c else 3e-2)

    A = cases["either"]["K"].T @ cases["either"]["Q"] / np.sqrt(2)
    (e_up, k_up), (e_down, k_down) = isotropic_line_stability(A, cases["either"]["V"])
    assert k_up > 0 > k_down and e_up[0] * e_up[1] > 0 > e_down[0] * e_down[1]
    (u,) = blowup_directions(A, cases["either"]["V"])
    np.testing.assert_allclose(np.abs(u), [0.8, 0.6], atol=1e-12)
    # Start near the blow-up direction's disk point (0.28, 0.96): blows up along (4, 3).
    assert Status.code(sol.status)[3] == Status.code(Status.blowup)
    S = np.asarray(sol.final_cov[3])
    disk = np.array([S[0, 0] - S[1, 1], 2 * S[0, 1]]) / np.trace(S)
    np.testing.assert_allclose(disk, [0.28, 0.96], atol=1e-2)
    # Start near the stable line (1, -1): converges to a point of it.
    assert Status.code(sol.status)[4] == Status.code(Status.successful)
    S = np.asarray(sol.final_cov[4])
    np.testing.assert_allclose([S[0, 0], S[1, 1]], [-S[0, 1], -S[0, 1]], rtol=1e-6)
    _, dcov = Softmax(**{k: cases["either"][k] for k in ("Q", "K", "V")}).gaussian_rhs(
        jnp.zeros(2), jnp.asarray(S)
    )
    assert np.linalg.norm(dcov) < 1e-6


@pytest.mark.slow
@pytest.mark.heavy
def test_user_event_time_and_its_gradient_match_the_closed_form():
    """A user event tr Sigma = 4 tr Sigma_0 (softmax, V = I, A + A^T > 0): its time is the root
    of the closed form's trace, and d t_event / dQ (through the solver, implicit function
    theorem at the event) equals central finite differences of that closed-form root."""
    import scipy.optimize

    rng = np.random.default_rng(31)
    P = rng.standard_normal((D, D))
    Q0 = 0.4 * P @ P.T + 0.2 * np.eye(D)  # K = I: A = Q / sqrt(D), A + A^T > 0
    _, _, _, _, cov = _problem(seed=32)
    level = 4 * np.trace(cov)

    def closed_form_time(Q):
        A = Q / np.sqrt(D)
        t_star = float(blowup_time(cov, A))
        trace = lambda t: np.trace(np.asarray(softmax_identity_covariance(cov, A, t))) - level
        return scipy.optimize.brentq(trace, 0.0, t_star * (1 - 1e-9), xtol=1e-15, rtol=1e-15)

    def solver_time(Q):
        sol = simulate_gaussian(
            Softmax(Q=Q, K=jnp.eye(D), V=jnp.eye(D)),
            jnp.zeros(D),
            cov,
            100.0,
            rtol=1e-12,
            atol=1e-12,
            max_steps=100000,
            events={"trace": lambda t, m, c: jnp.trace(c) / level - 1.0},
        )
        return sol.t_event, sol

    t, sol = solver_time(jnp.asarray(Q0))
    assert bool(sol.status == Status.event_occurred) and bool(sol.events["trace"])
    np.testing.assert_allclose(float(t), closed_form_time(Q0), rtol=1e-9)
    grad = jax.grad(lambda Q: solver_time(Q)[0])(jnp.asarray(Q0))
    h = 1e-6
    fd = np.zeros((D, D))
    for i in range(D):
        for j in range(D):
            E = np.zeros((D, D))
            E[i, j] = h
            fd[i, j] = (closed_form_time(Q0 + E) - closed_form_time(Q0 - E)) / (2 * h)
    # Central differences: O(h^2) truncation plus root-finding noise xtol / h = 1e-9.
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
@pytest.mark.heavy
def test_the_first_of_several_events_stops_the_solve():
    Q = np.random.default_rng(33).standard_normal((1, D))
    _, _, _, _, cov = _problem(seed=34)
    att = Softmax(Q=Q, K=-Q, V=np.eye(D))  # A + A^T <= 0: the trace decreases
    tr0 = float(np.trace(cov))
    events = {
        "late": lambda t, m, c: 1.0 - jnp.trace(c) / (0.5 * tr0),
        "early": lambda t, m, c: 1.0 - jnp.trace(c) / (0.9 * tr0),
    }
    sol = simulate_gaussian(att, jnp.zeros(D), cov, 1e4, events=events, rtol=1e-10, atol=1e-12)
    assert bool(sol.events["early"]) and not bool(sol.events["late"])
    np.testing.assert_allclose(np.trace(sol.final_cov), 0.9 * tr0, rtol=1e-9)
    # A condition already past its event at t = 0 stops the solve there (rate < 10 at once).
    steady = simulate_gaussian(
        att, jnp.zeros(D), cov, 1e4, events=events, steady_tol=10.0, rtol=1e-10, atol=1e-12
    )
    assert bool(steady.status == Status.steady_state) and float(steady.t_event) == 0.0
    assert not any(bool(v) for v in steady.events.values())
    np.testing.assert_array_equal(steady.final_cov, cov)
    with pytest.raises(TypeError, match="events"):  # ours or the runtime type checker's
        simulate_gaussian(att, jnp.zeros(D), cov, 1.0, events={"bad": 3.0})


@jax.jit
def _jitted_affine(field, mean, cov):
    return field.affine_velocity(mean, cov)


def test_l2_affine_velocity_equals_the_direct_solve_for_random_heads():
    """L2's (I + 2 Sigma K^T K)^{-1} by unrolled Gaussian elimination with partial pivoting
    equals NumPy's LAPACK solve, for random d, k (also d > 8, the LAPACK path), K with zero rows
    (padded runs), singular and huge covariances (tr ~ 1e12, where a Woodbury form cancels)."""
    rng = np.random.default_rng(40)
    for d, k in [(2, 1), (5, 2), (6, 5), (9, 4)]:
        Q, K, V = (
            rng.standard_normal((k, d)),
            rng.standard_normal((k, d)),
            rng.standard_normal((d, d)),
        )
        if k > 1:
            K[-1] = 0.0
        G = rng.standard_normal((d, d - 1))  # rank d - 1
        for scale in (3.0, 1e12):
            cov, mean = scale * G @ G.T, rng.standard_normal(d)
            B, c = _jitted_affine(L2(Q=Q, K=K, V=V), jnp.asarray(mean), jnp.asarray(cov))
            P = np.eye(d) + 2 * cov @ K.T @ K
            want_B = 2 * V @ np.linalg.solve(P, cov @ (K.T @ Q / np.sqrt(d)))
            want_c = V @ np.linalg.solve(P, mean)
            # Both are backward stable; forward errors scale with cond(P) ~ scale.
            tol = 1e-13 * np.linalg.cond(P)
            np.testing.assert_allclose(B, want_B, atol=tol * np.abs(want_B).max())
            np.testing.assert_allclose(c, want_c, atol=tol * np.abs(want_c).max())
