"""Plain members that call the library's simulators are segmented by the engine itself: the
natural code (``simulate_gaussian`` in a member function) gets the straggler-free engine, with
the results of the explicit ``DiffeqMember`` and of the uninterrupted solve."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield._simulate_gaussian import gaussian_ode
from jaxdyn.meanfield.fields import Softmax
from jaxdyn.sweep import (
    DiffeqProblem,
    Grid,
    SweepCache,
    SweepOptions,
    run_sweep,
)
from jaxdyn.sweep._diffeq import DiffeqMember

D = 3


def _grid(n=24, seed=0):
    """Random heads and covariances whose solves end in very different step counts: the
    steady-state event at random tolerances, blow-up, or t1."""
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, D, D))
    return Grid.zip(
        {
            "Q": rng.normal(size=(n, D, D)),
            "K": rng.normal(size=(n, D, D)),
            # V ~ I expands (blow-up), V ~ -I contracts (steady state)
            "V": rng.choice([-1.0, 1.0], (n, 1, 1))
            * (np.eye(D) + 0.3 * rng.normal(size=(n, D, D))),
            "cov0": g @ np.swapaxes(g, 1, 2) / D + 0.1 * np.eye(D),
            "tol": 10.0 ** rng.uniform(-6, -2, n),
        }
    )


def _ode(p):
    field = Softmax(p["Q"], p["K"], p["V"])
    return gaussian_ode(field, jnp.zeros(D), p["cov0"], 30.0, steady_tol=p["tol"])


def _outputs(sol):
    return {
        "cov": sol.final_cov,
        "t": sol.t_final,
        "steps": sol.num_steps,
        "status": sol.status,
    }


def natural_member(params, key):
    """What a user writes: a simulate_gaussian call."""
    field = Softmax(params["Q"], params["K"], params["V"])
    sol = simulate_gaussian(field, jnp.zeros(D), params["cov0"], 30.0, steady_tol=params["tol"])
    return _outputs(sol)


# The engine solves simulate_gaussian's shared form (GaussianODE.shared_form: softmax padded
# from d = 3 to 5, tests/test_sweep_shared.py); the explicit member states the same solve.
explicit_member = DiffeqMember(
    problem=lambda p, key: _ode(p).shared_form().diffeq_problem(),
    outputs=lambda p, problem, sol: _outputs(_ode(p).solution(_ode(p).restrict(sol))),
)


def _assert_same(a, b):
    np.testing.assert_array_equal(a.status, b.status)
    for key in a.outputs:
        np.testing.assert_array_equal(a.outputs[key], b.outputs[key], err_msg=key)


@pytest.mark.slow  # four sweeps of an event-stopped Tsit5 solve: ~1 min of compilation
def test_simulate_gaussian_member_is_segmented_with_the_uninterrupted_results():
    grid = _grid()
    options = SweepOptions(vmap_width=8, segment_steps=16, segment_width=8)
    logged = []
    natural = run_sweep(natural_member, grid, options=options, log=logged.append)
    assert any("segments of 16 steps" in line for line in logged), logged
    steps = natural.outputs["steps"]
    assert steps.max() > 4 * steps.min() and steps.max() > 3 * 16  # many segments, unequal
    assert len(natural.status_counts()) >= 2  # solves ending in different ways
    # the same as the explicit DiffeqMember of the shared form, segmented or run to
    # completion in one call
    _assert_same(natural, run_sweep(explicit_member, grid, options=options))
    whole = SweepOptions(vmap_width=8, segment_steps=0)
    _assert_same(natural, run_sweep(explicit_member, grid, options=whole))
    # and segment_steps=0 runs the member as written (one vmapped solve of the shared form
    # per group)
    plain = run_sweep(natural_member, grid, options=whole)
    np.testing.assert_array_equal(plain.status, natural.status)
    np.testing.assert_array_equal(plain.outputs["steps"], natural.outputs["steps"])
    np.testing.assert_array_equal(plain.outputs["t"], natural.outputs["t"])


@pytest.mark.slow
def test_members_that_cannot_be_segmented_run_as_written():
    grid = _grid(n=6)

    def two_solves(params, key):  # a second DiffeqProblem.solve(): run as one program
        a = natural_member(params, key)
        b = natural_member({**params, "tol": 2 * params["tol"]}, key)
        return {"t_a": a["t"], "t_b": b["t"]}

    def solve_under_vmap(params, key):  # the solve's state cannot leave the inner vmap
        covs = jnp.stack([params["cov0"], 2.0 * params["cov0"]])
        ts = jax.vmap(lambda c: natural_member({**params, "cov0": c}, key)["t"])(covs)
        return {"ts": ts}

    for member in (two_solves, solve_under_vmap):
        logged = []
        result = run_sweep(member, grid, options=SweepOptions(vmap_width=2), log=logged.append)
        assert not any("segments of" in line for line in logged), (member.__name__, logged)
        direct = jax.vmap(member)(
            {k: jnp.asarray(v) for k, v in grid.params.items()},
            jax.random.split(jax.random.key(0), 6),
        )
        for key, value in result.outputs.items():
            np.testing.assert_allclose(value, direct[key], rtol=1e-10, err_msg=key)


def test_diffeq_problem_solve_is_diffeqsolve_outside_the_engine():
    problem = DiffeqProblem(
        terms=diffrax.ODETerm(lambda t, y, args: -args * y),
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=2.0,
        dt0=None,
        y0=jnp.array([1.0, 2.0]),
        args=1.5,
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
    )
    sol = problem.solve()
    np.testing.assert_allclose(sol.ys[-1], np.exp(-3.0) * np.array([1.0, 2.0]), rtol=1e-7)


def _decay_problem(params):
    return DiffeqProblem(
        terms=diffrax.ODETerm(lambda t, y, rate: -rate * y + jnp.sin(t)),
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=params["t1"],
        dt0=None,
        y0=jnp.array([1.0, -0.5]),
        args=params["rate"],
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 5) * params["t1"], t1=True),
        stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-12),
        max_steps=2000,
    )


@pytest.mark.slow
def test_a_plain_member_solving_a_diffeq_problem_is_segmented_identically():
    grid = Grid.zip({"rate": np.geomspace(0.1, 300.0, 12), "t1": np.linspace(1.0, 20.0, 12)})

    def member(params, key):  # stiff members take hundreds of steps, the others dozens
        sol = _decay_problem(params).solve()
        return {"ys": sol.ys, "steps": sol.stats["num_steps"]}

    explicit = DiffeqMember(
        lambda p, key: _decay_problem(p),
        lambda p, problem, sol: {"ys": sol.ys, "steps": sol.stats["num_steps"]},
    )
    options = SweepOptions(vmap_width=4, segment_steps=8, segment_width=4)
    logged = []
    routed = run_sweep(member, grid, options=options, log=logged.append)
    assert any("segments of 8 steps" in line for line in logged), logged
    assert routed.outputs["steps"].max() > 8 * 8 > routed.outputs["steps"].min()
    whole = run_sweep(explicit, grid, options=SweepOptions(vmap_width=4, segment_steps=0))
    _assert_same(routed, whole)


@pytest.mark.slow
def test_a_repeated_routed_sweep_traces_and_compiles_nothing_until_the_caches_are_cleared():
    traces = []

    def member(params, key):
        traces.append(1)
        sol = _decay_problem(params).solve()
        return {"y": sol.ys[-1], "steps": sol.stats["num_steps"]}

    options = SweepOptions(vmap_width=4, segment_steps=8, segment_width=4)
    grid = Grid.zip({"rate": np.geomspace(0.1, 300.0, 8), "t1": np.linspace(1.0, 20.0, 8)})
    first = run_sweep(member, grid, options=options)
    assert traces and first.n_compilations >= 3  # init, finish, one segment program at least
    traces.clear()
    again = run_sweep(
        member, Grid.zip({k: v[::-1] for k, v in grid.params.items()}), options=options
    )
    assert not traces and again.n_compilations == 0
    np.testing.assert_array_equal(again.outputs["y"], first.outputs["y"][::-1])
    SweepCache.default.clear()  # the next sweep traces and compiles as the first one did
    cleared = run_sweep(member, grid, options=options)
    assert traces and cleared.n_compilations == first.n_compilations
    _assert_same(cleared, first)


@pytest.mark.slow
def test_simulate_particles_member_is_segmented_with_the_uninterrupted_results():
    """A member calling ``simulate_particles`` gets segments too; at one group width the
    results are bitwise those of the uninterrupted solve (run as written, ``segment_steps=0``)."""
    from jaxdyn.meanfield import simulate_particles

    rng = np.random.default_rng(3)
    n, tokens, d = 8, 4, 2
    grid = Grid.zip(
        {
            "Q": rng.normal(size=(n, d, d)),
            "K": rng.normal(size=(n, d, d)),
            "V": rng.choice([-1.0, 1.0], (n, 1, 1)) * np.eye(d) + 0.3 * rng.normal(size=(n, d, d)),
            "x0": rng.normal(size=(n, tokens, d)),
            "norm": 10.0 ** rng.uniform(0.5, 3.0, n),
        }
    )

    def member(params, key):
        sol = simulate_particles(
            Softmax(params["Q"], params["K"], params["V"]),
            params["x0"],
            20.0,
            blowup_norm=params["norm"],
            ts=jnp.linspace(0.0, 20.0, 5),
        )
        return {"x": sol.final_x, "xs": sol.xs, "t": sol.t_final, "steps": sol.num_steps,
                "status": sol.status}  # fmt: skip

    logged = []
    options = SweepOptions(vmap_width=4, segment_steps=8, segment_width=4)
    segmented = run_sweep(member, grid, options=options, log=logged.append)
    assert any("segments of 8 steps" in line for line in logged), logged
    steps = segmented.outputs["steps"]
    assert steps.max() > 3 * 8 and steps.max() > 2 * steps.min()  # several segments, unequal
    whole = run_sweep(member, grid, options=SweepOptions(vmap_width=4, segment_steps=0))
    _assert_same(segmented, whole)
