"""Plain sweeps on a CPU device with several cores run several chunks at once, in threads.

The number of threads comes from the cores this process may use (``jaxdyn._affinity``); here
it is set through the engine's ``usable_cores`` so that the tests run the threaded path on any
machine (on one core the threads take turns, which changes nothing but the time).
"""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn.meanfield import simulate_particles, uniform_on_sphere
from jaxdyn.meanfield.fields import SphereSoftmax
from jaxdyn.sweep import Grid, SweepCache, SweepOptions, _engine, run_sweep
from jaxdyn.sweep._chunks import choose_chunk
from jaxdyn.sweep._programs import runs_concurrently
from jaxdyn.sweep._scheduler import SegmentedPrograms


def _rotor(params, key):
    """A small nonlinear member: 40 steps of a damped rotation with a random start."""
    x = jax.random.normal(key, (8,))

    def step(_, x):
        return jnp.tanh(params["a"] * jnp.roll(x, 1) - 0.3 * x) + 0.1 * x

    return {"x": jax.lax.fori_loop(0, 40, step, x), "s": jnp.sum(x)}


def _with_cores(monkeypatch, n):
    monkeypatch.setattr(_engine, "usable_cores", lambda: n)


def test_chunks_at_once_give_bitwise_the_results_of_one_at_a_time(monkeypatch, tmp_path):
    grid = Grid.product({"a": np.linspace(0.5, 2.0, 12)}, seeds=8)  # 96 members
    options = SweepOptions(vmap_width=8, progress=False)
    _with_cores(monkeypatch, 1)
    one = run_sweep(_rotor, grid, options=options)
    assert one.chunk_size == 96
    _with_cores(monkeypatch, 3)
    lines = []
    many = run_sweep(_rotor, grid, options=options, log=lines.append, checkpoint_dir=tmp_path)
    assert many.chunk_size == 32  # a chunk per thread
    assert any("up to 3 chunks at once" in line for line in lines), lines
    for name in one.outputs:
        np.testing.assert_array_equal(many.outputs[name], one.outputs[name])
    np.testing.assert_array_equal(many.status, one.status)
    # every chunk was checkpointed: a second call resumes all of them and computes nothing
    lines.clear()
    again = run_sweep(_rotor, grid, options=options, log=lines.append, checkpoint_dir=tmp_path)
    assert any("3 chunk(s) resumed" in line for line in lines), lines
    np.testing.assert_array_equal(again.outputs["x"], one.outputs["x"])


def test_chunks_at_once_really_overlap(monkeypatch):
    """Two chunks are in flight at the same time: each dispatch waits at a barrier for the
    other, which times out (and fails the test) when the chunks run one after another."""
    seen = set()
    both = threading.Barrier(2, timeout=30)

    def member(params, key):
        return {"y": params["a"] * 2.0}

    grid = Grid.product({"a": np.arange(16.0)}, seeds=1)
    _with_cores(monkeypatch, 2)
    program_calls = []
    real = _engine.run_plain_chunks

    def spy(get_program, plan, grid_, chunk, checkpoints, progress, name, log=None, threads=1):
        program = get_program()
        dispatch = program.dispatch

        def waiting_dispatch(*members):
            seen.add(threading.get_ident())
            both.wait()  # both chunks must be in flight at once, or this times out
            program_calls.append(1)
            return dispatch(*members)

        program.dispatch = waiting_dispatch
        try:
            return real(get_program, plan, grid_, chunk, checkpoints, progress, name, log, threads)
        finally:
            program.dispatch = dispatch

    monkeypatch.setattr(_engine, "run_plain_chunks", spy)
    result = run_sweep(member, grid, options=SweepOptions(vmap_width=8, progress=False))
    np.testing.assert_array_equal(result.outputs["y"], np.arange(16.0) * 2.0)
    assert len(program_calls) == 2 and len(seen) == 2


def test_programs_with_lapack_kernels_run_one_chunk_at_a_time(monkeypatch):
    """jaxlib's CPU LAPACK kernels block XLA's thread pool (a deadlock when two programs run
    them at once: benchmarks/repro_xla_cpu_lapack_deadlock.py), so such programs are not
    run concurrently; plain XLA code, products included, and host callbacks are."""
    x = jnp.ones((4, 6, 6))
    plain = jax.jit(lambda x: jnp.tanh(x @ x) + 1.0).lower(x).compile()
    eigh = jax.jit(lambda x: jnp.linalg.eigvalsh(x @ x)).lower(x).compile()
    cholesky = jax.jit(lambda x: jnp.linalg.cholesky(x @ x + 6 * jnp.eye(6))).lower(x).compile()
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    callback = jax.jit(lambda x: jax.pure_callback(np.sin, shape, x)).lower(x).compile()
    both = jax.jit(lambda x: jnp.linalg.eigvalsh(jax.pure_callback(np.sin, shape, x)))
    assert runs_concurrently(plain)
    assert runs_concurrently(callback)
    assert not runs_concurrently(eigh)
    assert not runs_concurrently(cholesky)
    assert not runs_concurrently(both.lower(x).compile())

    def member(params, key):
        m = jax.random.normal(key, (5, 5))
        return {"ev": jnp.linalg.eigvalsh(m @ m.T + params["a"] * jnp.eye(5))}

    _with_cores(monkeypatch, 2)
    lines = []
    grid = Grid.product({"a": np.arange(1.0, 9.0)}, seeds=4)
    result = run_sweep(
        member, grid, options=SweepOptions(vmap_width=8, progress=False), log=lines.append
    )
    assert result.chunk_size == 16  # sized for two threads ...
    assert not any("at once" in line for line in lines), lines  # ... run one after the other
    m = np.asarray(
        jax.vmap(lambda k: jax.random.normal(k, (5, 5)))(
            jax.vmap(jax.random.key)(jnp.asarray(grid.seeds))
        )
    )
    a = grid.params["a"][:, None, None]
    expected = np.linalg.eigvalsh(m @ m.transpose(0, 2, 1) + a * np.eye(5))
    np.testing.assert_allclose(result.outputs["ev"], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_a_chunk_per_thread_within_the_per_device_cap(threads):
    assert choose_chunk(0, 1024, 1, 32, 1024, threads) == 1024 // threads
    assert choose_chunk(0, 100, 1, 32, 1024, threads) == {1: 128, 2: 64, 4: 32}[threads]
    assert choose_chunk(0, 8192, 1, 32, 1024, threads) == 1024  # the cap still holds
    assert choose_chunk(96, 1024, 1, 32, 1024, threads) == 96  # an explicit size wins


def _particles(params, key):
    """A segmented member: an adaptive solve of 8 tokens on the sphere (the engine runs
    ``simulate_particles``' solve in segments of ``segment_steps`` steps)."""
    x0 = uniform_on_sphere(key, 8, 3)
    sol = simulate_particles(SphereSoftmax(params["beta"], 3), x0, 3.0, blowup_norm=None)
    return {"x": sol.final_x, "status": sol.status}


def test_segmented_chunks_at_once_give_bitwise_the_results_of_one_at_a_time(monkeypatch):
    grid = Grid.product({"beta": np.geomspace(0.5, 8.0, 6).astype(np.float32)}, seeds=8)
    options = SweepOptions(vmap_width=8, chunk_size=16, segment_steps=8, progress=False)
    _with_cores(monkeypatch, 1)
    cache = SweepCache()
    lines_one = []
    one = run_sweep(_particles, grid, options=options, cache=cache, log=lines_one.append)
    assert any("segments of 8 steps" in line for line in lines_one), lines_one
    _with_cores(monkeypatch, 3)
    lines = []
    real_run = SegmentedPrograms.run
    both = threading.Barrier(3, timeout=60)

    def waiting_run(self, *args, **kwargs):
        both.wait()  # the three chunks must be in flight together, or this times out
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(SegmentedPrograms, "run", waiting_run)
    many = run_sweep(_particles, grid, options=options, cache=cache, log=lines.append)
    assert one.chunk_size == many.chunk_size == 16  # sized alike: the groups are the same
    assert any("up to 3 chunks at once" in line for line in lines), lines
    np.testing.assert_array_equal(many.outputs["x"], one.outputs["x"])
    np.testing.assert_array_equal(many.status, one.status)
    steps = lambda ls: [line for line in ls if "lane-steps" in line]  # noqa: E731
    assert steps(lines) == steps(lines_one)  # the same segments and device work
