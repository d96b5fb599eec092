"""The sweep engine: grids, one compilation, chunk/device independence, statuses."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.sweep import Grid, SweepOptions, run_sweep
from jaxdyn.sweep._programs import effective_vmap_width


def test_product_grid_orders_members_in_c_order_with_seed_last():
    grid = Grid.product({"a": [1.0, 2.0], "b": [10.0, 20.0, 30.0]}, seeds=2, base_seed=5)
    assert len(grid) == 12
    assert grid.shape == (2, 3, 2)
    assert grid.axes == ("a", "b", "seed")
    np.testing.assert_array_equal(grid.params["a"], np.repeat([1.0, 2.0], 6))
    np.testing.assert_array_equal(grid.params["b"][:6], [10, 10, 20, 20, 30, 30])
    np.testing.assert_array_equal(grid.seeds[:4], [5, 6, 5, 6])


def test_product_grid_accepts_array_valued_parameters():
    pis = np.array([[0.7, 0.3], [0.5, 0.5], [0.9, 0.1]])
    grid = Grid.product({"pi": pis}, seeds=1)
    assert grid.params["pi"].shape == (3, 2)
    np.testing.assert_array_equal(grid.params["pi"], pis)


def test_zip_grid_requires_equal_lengths():
    with pytest.raises(ValueError, match="equal leading lengths"):
        Grid.zip({"a": np.zeros(3), "b": np.zeros(4)})
    grid = Grid.zip({"a": np.arange(3.0), "M": np.zeros((3, 2, 2))}, seeds=2)
    assert grid.shape == (3, 2) and len(grid) == 6


def test_grid_rejects_empty_and_non_numeric_values():
    with pytest.raises(ValueError, match="no values"):
        Grid.product({"a": []})
    with pytest.raises(ValueError, match="numeric"):
        Grid.product({"a": ["x", "y"]})


def _noisy_decay(params, key):
    """Explicit Euler of dx/dt = -r x with a random start: closed form x0 (1 - r h)^n."""
    x0 = jax.random.normal(key, (3,))
    r = params["rate"]

    def step(x, _):
        x = x - 0.01 * r * x
        return x, jnp.sum(x**2)

    x, energy = jax.lax.scan(step, x0, None, length=50)
    return {"x": x, "energy": energy, "x0": x0}


def test_sweep_matches_closed_form_per_member():
    rates = np.linspace(0.1, 2.0, 7)
    result = run_sweep(_noisy_decay, Grid.product({"rate": rates}, seeds=3))
    expected = result.outputs["x0"] * (1 - 0.01 * result.params["rate"][:, None]) ** 50
    np.testing.assert_allclose(result.outputs["x"], expected, rtol=1e-10)
    assert result.reshaped("x").shape == (7, 3, 3)
    assert np.all(result.ok())


def test_sweep_over_ten_values_compiles_once():
    traces = []

    def member(params, key):
        traces.append(1)
        return _noisy_decay(params, key)

    # traced once: the search for a solve the engine could segment traces the member as the
    # plain program runs it, and the program reuses that trace
    result = run_sweep(member, Grid.product({"rate": np.linspace(0.0, 1.0, 10)}, seeds=2))
    assert len(traces) == 1
    assert result.n_compilations == 1
    # Chunks smaller than the grid reuse the same executable (last chunk padded).
    traces.clear()
    result = run_sweep(
        member,
        Grid.product({"rate": np.linspace(0.0, 1.0, 10)}, seeds=2),
        options=SweepOptions(chunk_size=3, vmap_width=2),
    )
    # (the search for a solve is remembered for the member and its shapes: one trace, for the
    # new group width)
    assert len(traces) == 1 and result.n_compilations == 1
    assert result.chunk_size == 4
    # a second sweep of the same member and shapes: jit's cache, nothing traced or compiled
    traces.clear()
    result = run_sweep(
        member,
        Grid.product({"rate": np.linspace(0.5, 1.5, 10)}, seeds=2),
        options=SweepOptions(chunk_size=3, vmap_width=2),
    )
    assert len(traces) == 0 and result.n_compilations == 0


@pytest.mark.parametrize("chunk_size", [1, 5, 64])
def test_sweep_results_independent_of_chunk_size(chunk_size):
    grid = Grid.product({"rate": np.linspace(0.1, 3.0, 13)}, seeds=3)
    reference = run_sweep(_noisy_decay, grid, options=SweepOptions(vmap_width=4))
    other = run_sweep(_noisy_decay, grid, options=SweepOptions(chunk_size=chunk_size, vmap_width=4))
    for key in reference.outputs:
        np.testing.assert_array_equal(reference.outputs[key], other.outputs[key])


def test_a_sweep_of_several_chunks_logs_each_finished_chunk_without_a_progress_bar():
    grid = Grid.product({"rate": np.linspace(0.1, 3.0, 12)}, seeds=1)
    logged = []
    options = SweepOptions(chunk_size=4, vmap_width=4, progress=False)
    run_sweep(_noisy_decay, grid, name="decay", options=options, log=logged.append)
    chunks = [line for line in logged if "chunk" in line and "done" in line]
    assert [line.split(": ")[1].split(" (")[0] for line in chunks] == [
        "chunk 1/3 done",
        "chunk 2/3 done",
        "chunk 3/3 done",
    ]
    logged.clear()  # one chunk: the plan and the end say it all
    run_sweep(
        _noisy_decay, grid, name="decay", options=SweepOptions(progress=False), log=logged.append
    )
    assert not any("chunk 1/1" in line for line in logged)


def test_a_members_status_alone_decides_and_its_nan_outputs_are_kept():
    def member(params, key):
        r = params["rate"]
        value = jnp.where(r > 1.5, jnp.nan, r)  # NaN: "not reached", which the member declares
        status = Status.where(r < 0.5, Status.blowup, Status.successful)
        return {"value": value, "status": status}

    result = run_sweep(member, Grid.product({"rate": [0.1, 1.0, 2.0]}))
    expected = [Status.blowup, Status.successful, Status.successful]
    np.testing.assert_array_equal(result.status, [Status.code(s) for s in expected])
    assert result.n_failed() == 1
    np.testing.assert_array_equal(result.ok(), [False, True, True])
    np.testing.assert_array_equal(result.ok(accept=[Status.blowup]), [True, True, True])
    assert np.isnan(result.masked("value")[0]) and result.masked("value")[1] == 1.0
    assert np.isnan(result.masked("value")[2])  # kept: the member's own NaN, not a failure
    assert result.masked("value", accept=[Status.blowup])[0] == 0.1
    assert result.status_counts() == {"blowup": 1, "successful": 2}


def test_nan_outputs_of_a_member_without_a_status_mark_it_nonfinite():
    def member(params, key):
        return {"value": jnp.where(params["rate"] > 1.5, jnp.nan, params["rate"])}

    result = run_sweep(member, Grid.product({"rate": [0.1, 2.0]}))
    np.testing.assert_array_equal(result.has_status(Status.nonfinite), [False, True])
    assert result.n_failed() == 1


def test_diffrax_results_map_into_status_without_a_where_chain():
    import diffrax

    for name in ("successful", "max_steps_reached", "dt_min_reached", "event_occurred"):
        promoted = Status.promote(getattr(diffrax.RESULTS, name))
        assert bool(promoted == getattr(Status, name))
        message = diffrax.RESULTS[getattr(diffrax.RESULTS, name)]
        assert Status.message(promoted) == (message or "finished successfully")
    assert len({Status.code(getattr(Status, n)) for n in Status._name_to_item}) == len(Status)


def test_member_status_must_be_a_status_item():
    def member(params, key):
        return {"value": params["rate"], "status": jnp.int32(0)}

    with pytest.raises(TypeError, match="jaxdyn.Status"):
        run_sweep(member, Grid.product({"rate": [1.0]}))


def test_effective_width_depends_only_on_grid_size():
    assert effective_vmap_width(32, 1) == 1
    assert effective_vmap_width(32, 5) == 8
    assert effective_vmap_width(32, 1000) == 32


def test_bad_sweep_arguments_raise_clear_errors():
    grid = Grid.product({"rate": [1.0]})
    # (under the test suite's beartype hook the annotation check reports it first)
    with pytest.raises(TypeError, match="callable|parameter 'fn'"):
        run_sweep(None, grid)
    with pytest.raises(ValueError, match="chunk_size"):
        run_sweep(_noisy_decay, grid, options=SweepOptions(chunk_size=-1))
    with pytest.raises(ValueError, match="vmap_width"):
        SweepOptions(vmap_width=0)
    with pytest.raises(ValueError, match="unknown sweep option 'width'"):
        SweepOptions().updated({"width": 4})
    with pytest.raises(ValueError, match="devices"):
        run_sweep(_noisy_decay, grid, options=SweepOptions(devices=1000))
    with pytest.raises(TypeError, match="dict"):
        run_sweep(lambda p, k: p["rate"], grid)


_EIGHT_DEVICE_SCRIPT = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_sweep_engine import _noisy_decay
    from jaxdyn.sweep import Grid, SweepOptions, run_sweep
    assert jax.device_count() == 8, jax.devices()
    grid = Grid.product({"rate": np.linspace(0.1, 3.0, 13)}, seeds=3)
    options = SweepOptions(chunk_size=int(sys.argv[3]), vmap_width=4)
    result = run_sweep(_noisy_decay, grid, options=options)
    np.savez(sys.argv[2], **result.outputs, n_devices=result.n_devices)
    """
)


def test_sweep_results_identical_on_one_and_eight_devices(tmp_path):
    grid = Grid.product({"rate": np.linspace(0.1, 3.0, 13)}, seeds=3)
    reference = run_sweep(_noisy_decay, grid, options=SweepOptions(vmap_width=4))
    out = tmp_path / "eight.npz"
    tests_dir = os.path.dirname(__file__)
    env = dict(os.environ, PYTHONPATH=tests_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(
        [sys.executable, "-c", _EIGHT_DEVICE_SCRIPT, tests_dir, str(out), "1"],
        check=True,
        env=env,
        timeout=300,
    )
    with np.load(out) as data:
        assert int(data["n_devices"]) == 8
        for key in reference.outputs:
            np.testing.assert_array_equal(reference.outputs[key], data[key])


def test_importing_jaxdyn_does_not_start_jax_so_cpu_devices_can_be_set(tmp_path):
    # use_cpu_devices must run before JAX starts its backends; importing any jaxdyn package or
    # experiment (and blackjax, imported lazily) must not start them
    code = (
        "import jaxdyn, jaxdyn.copyhead, jaxdyn.meanfield, jaxdyn.gradflow, jaxdyn.attention\n"
        "import jaxdyn.llc, jaxdyn.induction\n"
        "from jaxdyn.runs import list_experiments; list_experiments()\n"
        "from jaxdyn._compat import backends_are_initialized\n"
        "assert not backends_are_initialized()\n"
        "from jaxdyn.distributed._devices import use_cpu_devices\n"
        "assert use_cpu_devices(3) == 3\n"
        "import jax; assert jax.device_count() == 3, jax.devices()\n"
        "try:\n"
        "    use_cpu_devices(2)\n"
        "except RuntimeError as err:\n"
        "    assert 'already started with 3' in str(err)\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
    )
    drop = ("XLA_FLAGS", "JAXDYN_IMPORT")  # the package alone
    env = {k: v for k, v in os.environ.items() if k not in drop}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
