"""jaxdyn.UnrolledERK against independent computations: the order of accuracy of each tableau
measured against the exact solution of a linear ODE (a wrong coefficient fails it), the wrapped
diffrax solver step for step, jumps of the step-size controller, vmap and gradients."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxdyn
from jaxdyn import UnrolledERK
from jaxdyn.meanfield import RK4

jax.config.update("jax_enable_x64", True)

HORIZON = 4.0

# (solver, classical order of its solution)
TABLEAUS = [
    (diffrax.Heun, 2),
    (diffrax.Ralston, 2),
    (diffrax.Bosh3, 3),
    (diffrax.Dopri5, 5),
    (diffrax.Tsit5, 5),
    (diffrax.Dopri8, 8),
    (RK4, 4),  # jaxdyn's classical RK4: no error estimate (a zero error row)
]


def _linear_problem(seed, n=4):
    """``y' = A y`` on ``[0, 4]`` with a random ``A`` of spectral radius about 1 (not normal,
    not symmetric), and its exact solution ``expm(4 A) y0`` from SciPy."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, n)) / np.sqrt(n)
    y0 = rng.normal(size=n)
    return A, y0, scipy.linalg.expm(A * HORIZON) @ y0


def _fixed_step_error(solver, A, y0, exact, steps):
    term = diffrax.ODETerm(lambda t, y, args: args @ y)
    sol = diffrax.diffeqsolve(
        term, solver, 0.0, HORIZON, HORIZON / steps, jnp.asarray(y0), jnp.asarray(A),
        max_steps=steps + 1,
    )  # fmt: skip
    return float(jnp.max(jnp.abs(sol.ys[-1] - exact)) / np.max(np.abs(exact)))


def _measured_order(solver, seed=0):
    """log2 of the error ratio between the two finest step counts of 2, 4, ..., 256 whose
    relative errors are both above 1e-11 (well clear of round-off, ~1e-15)."""
    A, y0, exact = _linear_problem(seed)
    errors = [_fixed_step_error(solver, A, y0, exact, 2**k) for k in range(1, 9)]
    usable = [k for k in range(len(errors) - 1) if errors[k + 1] > 1e-11]
    k = usable[-1]
    return np.log2(errors[k] / errors[k + 1])


@pytest.mark.parametrize(("solver_cls", "order"), TABLEAUS)
def test_unrolled_tableau_converges_at_its_order(solver_cls, order):
    """Halving the step divides the error by at least 2^order: a method of order p has global
    error C h^p + O(h^(p+1)), so the measured log2 ratio is at least p less a few tenths in
    the asymptotic range (it can be higher: linear problems can converge faster)."""
    measured = _measured_order(UnrolledERK(solver_cls()))
    assert measured > order - 0.5, (solver_cls.__name__, measured)


class _PerturbedTsit5(diffrax.AbstractERK):
    """Tsit5 with one solution weight moved by 1e-3 (and another by -1e-3, so the weights still
    sum to one): a first-order method."""

    tableau = diffrax.ButcherTableau(
        c=diffrax.Tsit5.tableau.c,
        b_sol=diffrax.Tsit5.tableau.b_sol + np.array([1e-3, -1e-3, 0, 0, 0, 0, 0]),
        b_error=diffrax.Tsit5.tableau.b_error,
        a_lower=diffrax.Tsit5.tableau.a_lower,
    )
    interpolation_cls = diffrax.Tsit5.interpolation_cls

    def order(self, terms):
        return 5

    def error_order(self, terms):
        return 5


def test_order_check_fails_for_a_wrong_coefficient():
    """The counterfactual of the order test: a perturbed weight is detected."""
    measured = _measured_order(UnrolledERK(_PerturbedTsit5()))
    assert measured < 5 - 0.5, measured


@pytest.mark.parametrize(("solver_cls", "_order"), TABLEAUS)
def test_unrolled_matches_the_wrapped_solver_step_for_step(solver_cls, _order):
    """Fixed steps on a nonlinear ODE: saves and dense output equal diffrax's looped stages up
    to the rounding of the stage sums (taken in another order)."""

    def rhs(t, y, args):
        return jnp.stack([y[1], -y[0] + 0.3 * jnp.sin(t) * y[1] - 0.1 * y[0] ** 3])

    ts = jnp.linspace(0.0, 10.0, 13)
    out = []
    for solver in (solver_cls(), UnrolledERK(solver_cls())):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(rhs), solver, 0.0, 10.0, 0.01, jnp.array([1.0, 0.0]),
            saveat=diffrax.SaveAt(ts=ts, dense=True), max_steps=2000,
        )  # fmt: skip
        out.append((sol.ys, jax.vmap(sol.evaluate)(jnp.linspace(0.005, 9.99, 37))))
    for looped, unrolled in zip(out[0], out[1], strict=True):
        np.testing.assert_allclose(unrolled, looped, rtol=0, atol=1e-12)


def _jump_solve(a, solver, y0=1.0):
    def rhs(t, y, args):
        return jnp.where(t < 0.5, args * y, -(y**2))

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(rhs), solver, 0.0, 2.0, None, jnp.array([y0, 0.5 * y0]), a,
        stepsize_controller=diffrax.PIDController(
            rtol=1e-10, atol=1e-12, jump_ts=jnp.array([0.5])
        ),
        max_steps=10_000,
    )  # fmt: skip
    return jnp.sum(sol.ys[-1]), sol.stats["num_steps"]


@pytest.mark.slow
@pytest.mark.heavy  # kept out of the fast suite for its time
def test_adaptive_solve_with_a_controller_jump_matches_diffrax():
    """A discontinuous field with ``jump_ts``: after the jump the first-same-as-last stage is
    evaluated again (a stale one would be the field of the other side). Same steps, same
    values and gradients as diffrax's Tsit5; the gradient also against central differences."""
    looped, unrolled = diffrax.Tsit5(), UnrolledERK(diffrax.Tsit5())
    (v0, n0), (v1, n1) = _jump_solve(0.7, looped), _jump_solve(0.7, unrolled)
    assert int(n0) == int(n1)
    np.testing.assert_allclose(v1, v0, rtol=1e-13)
    g0 = jax.grad(lambda a: _jump_solve(a, looped)[0])(0.7)
    g1 = jax.grad(lambda a: _jump_solve(a, unrolled)[0])(0.7)
    np.testing.assert_allclose(g1, g0, rtol=1e-10)
    h = 1e-5
    fd = (_jump_solve(0.7 + h, unrolled)[0] - _jump_solve(0.7 - h, unrolled)[0]) / (2 * h)
    # central difference: truncation O(h^2) plus the solve's error (rtol 1e-10) over h
    np.testing.assert_allclose(g1, fd, rtol=1e-5)


def test_vmapped_members_equal_their_own_solves():
    """Under vmap the jump branch is taken when any member jumps; every member still gets its
    own solve."""
    solver = UnrolledERK(diffrax.Tsit5())
    a, y0 = jnp.array([0.7, 0.2, -0.3]), jnp.array([1.0, 2.0, 3.0])
    batched, steps = jax.vmap(lambda a, y: _jump_solve(a, solver, y))(a, y0)
    for i in range(3):
        single, n = _jump_solve(a[i], solver, y0[i])
        np.testing.assert_allclose(batched[i], single, rtol=1e-14)
        assert int(steps[i]) == int(n)


@pytest.mark.parametrize("solver", [diffrax.Euler(), diffrax.Kvaerno5()])
def test_only_explicit_tableaus_are_accepted(solver):
    with pytest.raises(ValueError, match="UnrolledERK"):
        UnrolledERK(solver)


def test_simulate_gaussian_defaults_to_unrolled_tsit5():
    """The Gaussian simulator's problem, with no solver given, is solved by Tsit5 unrolled; it
    and diffrax's Tsit5 reach the same final covariance within the solve's tolerance."""
    from jaxdyn.meanfield import simulate_gaussian
    from jaxdyn.meanfield._simulate_gaussian import gaussian_ode
    from jaxdyn.meanfield.fields import Softmax

    rng = np.random.default_rng(3)
    d = 3
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    V = -np.eye(d)
    cov0 = np.eye(d) + 0.1 * np.ones((d, d))
    field = Softmax(Q=Q, K=K, V=V)
    default = simulate_gaussian(field, np.zeros(d), cov0, 5.0, rtol=1e-10, atol=1e-12)
    looped = simulate_gaussian(
        field, np.zeros(d), cov0, 5.0, rtol=1e-10, atol=1e-12, solver=diffrax.Tsit5()
    )
    np.testing.assert_allclose(default.final_cov, looped.final_cov, rtol=1e-8, atol=1e-12)
    solver = gaussian_ode(field, np.zeros(d), cov0, 5.0).diffeq_problem().solver
    assert isinstance(solver, jaxdyn.UnrolledERK) and type(solver.solver) is diffrax.Tsit5


@pytest.mark.slow
@pytest.mark.heavy
def test_gradients_under_vmap_match_diffrax():
    """vmap of grad and grad of vmap, through the any-member branch: diffrax's values."""
    a = jnp.array([0.7, 0.2, -0.3])
    grads = []
    for solver in (diffrax.Tsit5(), UnrolledERK(diffrax.Tsit5())):

        def f(x, solver=solver):
            return _jump_solve(x, solver)[0]

        def total(x, f=f):
            return jnp.sum(jax.vmap(f)(x))

        grads.append((jax.vmap(jax.grad(f))(a), jax.grad(total)(a)))
    for looped, unrolled in zip(grads[0], grads[1], strict=True):
        np.testing.assert_allclose(unrolled, looped, rtol=1e-10)
