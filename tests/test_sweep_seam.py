"""The one seam between the simulators and the sweep engine (``DiffeqProblem.solve``):
a member calling ``simulate_gaussian`` is traced at most 3 times in a first sweep and not at
all in a repeated one; a member the engine cannot segment is said to be so, once, with why."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield.fields import Softmax
from jaxdyn.sweep import Grid, SweepCache, SweepOptions, run_sweep

D = 3


def _grid(n=16, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(n, D, D))
    return Grid.zip(
        {
            "Q": rng.normal(size=(n, D, D)),
            "K": rng.normal(size=(n, D, D)),
            "V": rng.choice([-1.0, 1.0], (n, 1, 1))
            * (np.eye(D) + 0.3 * rng.normal(size=(n, D, D))),
            "cov0": g @ np.swapaxes(g, 1, 2) / D + 0.1 * np.eye(D),
            "tol": 10.0 ** rng.uniform(-6, -2, n),
        }
    )


def _sweep_saying_why(member, grid, cache):
    """``(result, log lines, lines saying why the member is not run in segments)``."""
    logged = []
    result = run_sweep(member, grid, cache=cache, log=logged.append)
    return result, logged, [line for line in logged if "not run in segments" in line]


def test_a_simulate_gaussian_member_is_traced_at_most_3_times_then_never():
    traces = []

    def member(params, key):
        traces.append(1)  # a Python side effect: runs once per trace of the member
        field = Softmax(params["Q"], params["K"], params["V"])
        sol = simulate_gaussian(field, jnp.zeros(D), params["cov0"], 30.0, steady_tol=params["tol"])
        return {"cov": sol.final_cov, "steps": sol.num_steps, "status": sol.status}

    cache = SweepCache()
    grid = _grid()
    logged = []
    first = run_sweep(member, grid, cache=cache, log=logged.append)
    assert any("segments of" in line for line in logged), logged  # it was segmented
    assert 1 <= len(traces) <= 3, len(traces)
    traces.clear()
    again = run_sweep(member, grid, cache=cache)
    assert not traces, len(traces)
    np.testing.assert_array_equal(again.outputs["cov"], first.outputs["cov"])
    steps = first.outputs["steps"]
    assert steps.max() > 2 * 128 > steps.min(), steps  # several segments, unequal members
    cache.clear()  # the next sweep decides again
    one = {k: v[0] for k, v in grid.params.items()}
    plan, new = cache.plan(member, one, grid.seeds[0])
    assert new and plan.reason is None and len(traces) == 2  # the search, the problem


def test_a_member_solving_inside_its_own_vmap_runs_as_written_and_says_why_once():
    def member(params, key):
        def one(scale):
            field = Softmax(params["Q"], params["K"], scale * params["V"])
            return simulate_gaussian(
                field, jnp.zeros(D), params["cov0"], 1.0, blowup_trace=None, psd_tol=None
            )

        sols = jax.vmap(one)(jnp.array([0.5, 1.0]))
        return {"cov": sols.final_cov}

    cache, grid = SweepCache(), _grid(n=4)
    result, logged, why = _sweep_saying_why(member, grid, cache)
    assert len(why) == 1 and "transformation of its own" in why[0], logged
    assert not any("segments of" in line for line in logged)
    assert not _sweep_saying_why(member, grid, cache)[2]  # said once
    p = {k: v[1] for k, v in grid.params.items()}
    np.testing.assert_allclose(result.outputs["cov"][1], member(p, None)["cov"], rtol=1e-12)


@pytest.mark.slow  # CI's slow contract tests
def test_a_member_with_two_solves_runs_as_written_with_both_solutions():
    # The search answers the first top-level solve with a placeholder; the member's plain
    # program must then be traced afresh, with both solves diffrax's own.
    traces = []

    def member(params, key):
        traces.append(1)
        field = Softmax(params["Q"], params["K"], params["V"])
        kw = dict(blowup_trace=None, psd_tol=None)
        short = simulate_gaussian(field, jnp.zeros(D), params["cov0"], 0.5, **kw)
        long = simulate_gaussian(field, jnp.zeros(D), params["cov0"], 1.0, **kw)
        return {"short": short.final_cov, "long": long.final_cov}

    cache, grid = SweepCache(), _grid(n=4)
    result, logged, why = _sweep_saying_why(member, grid, cache)
    assert len(why) == 1 and "2 times" in why[0], logged
    assert len(traces) == 3, len(traces)  # the search, the problem, the plain program
    for i in (0, 3):
        p = {k: v[i] for k, v in grid.params.items()}
        direct = member(p, None)
        for k in ("short", "long"):
            np.testing.assert_allclose(result.outputs[k][i], direct[k], rtol=1e-10)
    assert not np.allclose(result.outputs["short"], result.outputs["long"])
    traces.clear()
    run_sweep(member, grid, cache=cache)
    assert not traces  # the plain program is in jit's cache


def test_a_member_without_a_problem_solve_is_a_plain_member():
    cache = SweepCache()
    logged = []
    result = run_sweep(
        lambda p, key: {"y": 2.0 * p["x"]},
        Grid.product({"x": [1.0, 2.0]}),
        cache=cache,
        log=logged.append,
        options=SweepOptions(vmap_width=2),
    )
    np.testing.assert_array_equal(result.outputs["y"], [2.0, 4.0])
    assert not any("segment" in line for line in logged), logged
    assert len(cache.plans) == 1 and "calls no" in next(iter(cache.plans.values())).reason


def test_one_status_line_per_sweep_agrees_with_the_accepted_outcomes():
    from jaxdyn import Status

    def member(params, key):
        blew_up = params["x"] > 1.5
        return {"y": params["x"], "status": Status.where(blew_up, Status.blowup, Status.successful)}

    grid = Grid.product({"x": [1.0, 2.0, 3.0]})
    for accept, expected in (
        ([Status.blowup], "0 failed; 1 successful, 2 blowup (accepted)"),
        ([], "2 failed (2 blowup); 1 successful"),
    ):
        logged = []
        result = run_sweep(member, grid, log=logged.append, accept=accept)
        status_lines = [line for line in logged if " members in " in line]
        assert len(status_lines) == 1 and status_lines[0].endswith(expected), logged
        assert result.n_failed(accept) == int(expected[0])
