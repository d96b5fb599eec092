"""Segmented sweeps: results identical to uninterrupted solves, cost ~ the sum of the work."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

from jaxdyn import Status
from jaxdyn.sweep import (
    AbstractSegmentedMember,
    DiffeqProblem,
    Grid,
    SweepOptions,
    run_sweep,
)
from jaxdyn.sweep._diffeq import DiffeqMember, step_to
from jaxdyn.sweep._scheduler import SegmentedPrograms
from jaxdyn.sweep._segmented import unsegmented

THRESHOLD = 9.0  # the event: |y|^2 crosses it


def _field(t, y, A):
    return A @ jnp.tanh(y) - 0.05 * y * jnp.sum(y**2) + 0.1 * jnp.sin(3.0 * t)


def _problem(params, key):
    """A random nonlinear 3-d flow from t0 = 0 to t1 (either sign: forward or backward in
    time), saving on a grid, at t0 and (as a statistic) at the end; it stops when |y|^2 reaches
    THRESHOLD (root-found) or after max_steps."""
    t1 = params["t1"]
    return DiffeqProblem(
        terms=diffrax.ODETerm(_field),
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=t1,
        dt0=None,
        y0=jax.random.normal(key, (3,)),
        args=params["A"],
        saveat=diffrax.SaveAt(
            subs=[
                diffrax.SubSaveAt(t0=True, ts=jnp.linspace(0.0, t1, 9)),
                diffrax.SubSaveAt(t1=True, fn=lambda t, y, args: jnp.sum(y**2)),
                diffrax.SubSaveAt(t1=True),
            ]
        ),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        event=diffrax.Event(
            lambda t, y, args, **kw: jnp.sum(y**2) - THRESHOLD,
            root_finder=optx.Newton(rtol=1e-10, atol=1e-10),
        ),
        max_steps=60,
    )


def _outputs(params, problem, sol):
    (ts, ys), (t_end, norm_end), (_, y_end) = zip(sol.ts, sol.ys, strict=True)
    return {
        "ts": ts,
        "ys": ys,
        "t_end": t_end[0],
        "norm_end": norm_end[0],
        "y_end": y_end[0],
        "num_steps": sol.stats["num_steps"],
        "num_rejected": sol.stats["num_rejected_steps"],
        "status": Status.promote(sol.result),
    }


def _random_grid(n=48, seed=0):
    rng = np.random.default_rng(seed)
    t1 = rng.uniform(1.0, 4.0, n) * rng.choice([-1.0, 1.0], n)
    return Grid.zip({"A": rng.normal(size=(n, 3, 3)) * 1.5, "t1": t1})


def _raw_solve(params, key):
    """The same problem as one plain diffeqsolve (what a member function does today)."""
    p = _problem(params, key)
    sol = diffrax.diffeqsolve(
        p.terms,
        p.solver,
        p.t0,
        p.t1,
        p.dt0,
        p.y0,
        p.args,
        saveat=p.saveat,
        stepsize_controller=p.stepsize_controller,
        event=p.event,
        max_steps=p.max_steps,
        throw=False,
    )
    return _outputs(params, p, sol)


@pytest.mark.slow
@pytest.mark.heavy
def test_segmented_solves_are_bitwise_the_uninterrupted_solves():
    member = DiffeqMember(_problem, _outputs)
    grid = _random_grid()
    width = SweepOptions(vmap_width=16)
    whole = run_sweep(member, grid, options=SweepOptions(vmap_width=16, segment_steps=0))
    cut = run_sweep(member, grid, options=SweepOptions(vmap_width=16, segment_steps=7))
    # the random problems cover every way a solve ends, in both directions of time
    codes = set(whole.status.tolist())
    assert {
        Status.code(Status.successful),
        Status.code(Status.event_occurred),
        Status.code(Status.max_steps_reached),
    } <= codes, whole.status_counts()
    assert np.any(grid.params["t1"] < 0) and np.any(grid.params["t1"] > 0)
    assert whole.outputs["num_steps"].max() >= 8 * 7  # many segments
    np.testing.assert_array_equal(cut.status, whole.status)
    for key in whole.outputs:
        np.testing.assert_array_equal(cut.outputs[key], whole.outputs[key], err_msg=key)

    # ... and the uninterrupted DiffeqMember is the plain diffeqsolve of the same problem
    raw = run_sweep(_raw_solve, grid, options=width)
    np.testing.assert_array_equal(raw.status, whole.status)
    for key in ("ts", "ys", "num_steps", "num_rejected"):
        np.testing.assert_array_equal(raw.outputs[key], whole.outputs[key], err_msg=key)
    # except diffrax's final save of a member without an event, when another member of its
    # vmapped group had one: diffrax then interpolates at the end of the member's last step
    # (rejected or not); DiffeqMember returns the state it reached. Reaching t1 (an accepted
    # last step) that is round-off of the interpolant at its right end.
    event = whole.has_status(Status.event_occurred)
    np.testing.assert_array_equal(raw.outputs["y_end"][event], whole.outputs["y_end"][event])
    at_t1 = whole.ok()
    scale = np.abs(whole.outputs["y_end"][at_t1]).max()
    np.testing.assert_allclose(
        raw.outputs["y_end"][at_t1], whole.outputs["y_end"][at_t1], rtol=0, atol=1e-13 * scale
    )


class _Halving(AbstractSegmentedMember):
    """Collatz-like iteration of x -> x / 2 (or 3x + 1) until x == 1: a loop whose length varies
    wildly between members (a generic segmented member, no ODE)."""

    def init(self, params, key, max_steps):
        state = {"x": params["x"], "n": jnp.int32(0), "peak": params["x"]}
        return self.advance(params, key, state, max_steps)

    def advance(self, params, key, state, max_steps):
        limit = jnp.iinfo(jnp.int32).max if max_steps is None else max_steps

        def body(carry):
            s, k = carry
            x = jnp.where(s["x"] % 2 == 0, s["x"] // 2, 3 * s["x"] + 1)
            return {"x": x, "n": s["n"] + 1, "peak": jnp.maximum(s["peak"], x)}, k + 1

        state, _ = jax.lax.while_loop(
            lambda c: (c[0]["x"] != 1) & (c[1] < limit), body, (state, jnp.int32(0))
        )
        return state

    def done(self, state):
        return state["x"] == 1

    def finish(self, params, key, state):
        return {"n": state["n"], "peak": state["peak"]}


def _collatz_reference(x):
    n, peak = 0, x
    while x != 1:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        n, peak = n + 1, max(peak, x)
    return n, peak


def test_generic_segmented_member_matches_a_python_loop_and_costs_the_sum_of_its_work():
    # heavy-tailed loop lengths: powers of two take log2(x) steps, a few starts take 100-1100
    long = [27, 871, 77031, 837799, 63728127, 670617279, 9780657630, 97, 6171, 8400511]
    xs = np.array([2 ** (1 + i % 19) for i in range(190)] + long, dtype=np.int64)
    rng = np.random.default_rng(0)
    xs = xs[rng.permutation(xs.size)]
    grid = Grid.zip({"x": xs})
    member = _Halving()
    result = run_sweep(member, grid, options=SweepOptions(segment_steps=5, vmap_width=32))
    expected = np.array([_collatz_reference(int(x)) for x in xs])
    np.testing.assert_array_equal(result.outputs["n"], expected[:, 0])
    np.testing.assert_array_equal(result.outputs["peak"], expected[:, 1])
    plain = run_sweep(unsegmented(member), grid, options=SweepOptions(vmap_width=32))
    np.testing.assert_array_equal(plain.outputs["n"], expected[:, 0])

    # cost model: a vmapped loop runs width x (slowest member of each group) iterations;
    # segmented, lanes x segment length summed over the groups advanced. Counted, not timed.
    segment, n = 5, len(xs) + 24  # the chunk is padded to a multiple of the width
    params = {"x": np.concatenate([xs, np.full(24, xs[-1])])}
    seeds = np.zeros(n, np.int64)
    programs = SegmentedPrograms(member, 32, 8, segment, params, seeds, jax.devices()[0])
    outputs, _, segments, lane_steps = programs.run(params, seeds, len(xs))
    np.testing.assert_array_equal(outputs["n"][: len(xs)], expected[:, 0])
    steps = np.concatenate([expected[:, 0], np.full(24, expected[-1, 0])])
    plain_lanes = sum(32 * steps[i : i + 32].max() for i in range(0, n, 32))
    work = expected[:, 0].sum()
    # a member pays whole segments (< one wasted segment each), the chunk's padding pays
    # init, and each round pads one group (by less than half a wide group of 32)
    bound = work + n * segment + 16 * segment * segments
    assert lane_steps <= bound
    assert plain_lanes > 3 * lane_steps, (plain_lanes, lane_steps)


def test_step_to_lands_exactly_on_the_next_step_end():
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        tprev = (rng.uniform(-1, 1, 100_000) * 10.0 ** rng.integers(-8, 6, 100_000)).astype(dtype)
        gap = (rng.uniform(0, 1, 100_000) * 10.0 ** rng.integers(-12, 6, 100_000)).astype(dtype)
        tnext = (tprev + gap).astype(dtype)
        dt = jax.jit(step_to)(jnp.asarray(tprev), jnp.asarray(tnext))
        np.testing.assert_array_equal(np.asarray(tprev + dt), tnext)


def test_diffeq_problem_rejects_saves_that_cannot_be_continued():
    common = dict(
        terms=diffrax.ODETerm(lambda t, y, a: -y),
        solver=diffrax.Tsit5(),
        t0=0.0,
        t1=1.0,
        dt0=0.1,
        y0=jnp.ones(2),
    )
    with pytest.raises(ValueError, match="dense"):
        DiffeqProblem(**common, saveat=diffrax.SaveAt(dense=True))
    with pytest.raises(ValueError, match="steps"):
        DiffeqProblem(**common, saveat=diffrax.SaveAt(steps=True))
    with pytest.raises(ValueError, match="max_steps"):
        DiffeqProblem(**common, max_steps=0)
    member = DiffeqMember(lambda p, k: "not a problem", lambda p, pr, s: {})
    with pytest.raises(TypeError, match="DiffeqProblem"):
        run_sweep(member, Grid.product({"a": [1.0]}))
    with pytest.raises(ValueError, match="segment_steps"):
        SweepOptions(segment_steps=-1)
    with pytest.raises(ValueError, match="segment_width"):
        SweepOptions(segment_width=-8)


def test_segmented_sweep_resumes_from_its_checkpoints_identically(tmp_path):
    xs = np.array([2 ** (1 + i % 12) for i in range(40)] + [27, 871, 77031, 97], np.int64)
    grid = Grid.zip({"x": xs})
    options = SweepOptions(segment_steps=6, vmap_width=8, chunk_size=16)
    messages = []
    full = run_sweep(
        _Halving(),
        grid,
        options=options,
        checkpoint_dir=tmp_path,
        name="halving",
        log=messages.append,
    )
    chunks = sorted((tmp_path / "halving").glob("chunk_*.npz"))
    assert len(chunks) == 3
    chunks[1].unlink()  # as if killed before the second chunk finished (writes are atomic)
    messages.clear()
    resumed = run_sweep(
        _Halving(),
        grid,
        options=options,
        checkpoint_dir=tmp_path,
        name="halving",
        log=messages.append,
    )
    assert any("2 chunk(s) resumed" in m for m in messages), messages
    for key in full.outputs:
        np.testing.assert_array_equal(resumed.outputs[key], full.outputs[key])
    np.testing.assert_array_equal(resumed.status, full.status)
    expected = np.array([_collatz_reference(int(x))[0] for x in xs])
    np.testing.assert_array_equal(resumed.outputs["n"], expected)


def test_default_segmented_chunks_do_not_depend_on_the_number_of_processes(monkeypatch):
    # a member's bits may depend on which groups it was advanced in, so the default chunks
    # (which decide the groups) must be the same for any number of processes
    from jaxdyn.sweep import _chunks, _processes

    rng = np.random.default_rng(3)
    cases = [
        (int(n), int(w))
        for n, w in zip(rng.integers(1, 5000, 30), rng.choice([4, 8, 32, 64], 30), strict=True)
    ]
    one = [_chunks.segmented_chunk(0, n, w) for n, w in cases]
    for n_proc in (2, 3, 16):
        monkeypatch.setattr(_processes, "process_layout", lambda n_proc=n_proc: (n_proc, 0))
        monkeypatch.setattr(_chunks, "process_layout", lambda n_proc=n_proc: (n_proc, 0))
        assert [_chunks.segmented_chunk(0, n, w) for n, w in cases] == one
    for (n, w), chunk in zip(cases, one, strict=True):
        assert chunk % w == 0 and chunk <= max(256, w) + w and chunk * -(-n // chunk) >= n
