"""Every array a run writes reads back labelled (docs/howto/reading_results.md): save_arrays'
dims/coords, a sweep's output axes and renamed grid axes, categorical coordinates by name,
expected member failures, arrays saved under a sweep's prefix, and posterior draws that
ArviZ reads."""

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.runs import Run, load
from jaxdyn.sweep import Grid

jax.config.update("jax_enable_x64", True)


def test_save_arrays_dims_and_coords_read_back(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    ts = np.linspace(0.0, 1.0, 5)
    vocabulary = np.array(["the", "cat", "sat"])
    attention = np.random.default_rng(0).random((5, 3, 3))
    run.save_arrays(
        flow_attention=attention,
        flow_loss=np.exp(-ts),
        pi=np.array([0.5, 0.3, 0.2]),
        dims={"flow_attention": ("time", "query", "key"), "pi": ("token",)},
        coords={"time": ts, "query": vocabulary, "key": vocabulary, "token": vocabulary},
    )
    run.finish()
    data = load(tmp_path / "r")
    att = data.arrays["flow_attention"]
    assert att.dims == ("time", "query", "key")
    np.testing.assert_array_equal(att.values, attention)
    assert float(att.sel(query="cat", key="sat").isel(time=2)) == attention[2, 1, 2]
    np.testing.assert_array_equal(att["time"].values, ts)
    # flow_loss had no dims: its one axis has the length of exactly one coordinate, time
    assert data.arrays["flow_loss"].dims == ("time",)
    assert list(data.arrays["pi"]["token"].values) == ["the", "cat", "sat"]
    assert data.unlabelled() == []


def test_save_arrays_rejects_wrong_labels_in_one_line(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    with pytest.raises(ValueError, match=r"'a' has 2 axes \(2, 3\) but dims names 1"):
        run.save_arrays(a=np.zeros((2, 3)), dims={"a": ("time",)})
    with pytest.raises(
        ValueError, match="coordinate 'time' has 4 values along 'time', array 'b' 3"
    ):
        run.save_arrays(b=np.zeros(3), dims={"b": ("time",)}, coords={"time": np.arange(4)})


def test_an_unlabelled_axis_is_reported_not_guessed(tmp_path):
    """Negative control: two coordinates of one length do not name an axis, and load says so."""
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    run.save_arrays(m=np.zeros((3, 3)), coords={"query": np.arange(3), "key": np.arange(3)})
    run.finish()
    data = load(tmp_path / "r")
    assert data.arrays["m"].dims == ("m_0", "m_1")
    assert data.unlabelled() == ["array m: m_0", "array m: m_1"]


def _decay(params, key):
    ts = jnp.linspace(0.0, 1.0, 4)
    y = jnp.exp(-params["rate"] * ts) * (1.0 + 0.01 * jax.random.normal(key))
    status = Status.where(params["rate"] > 1.5, Status.max_steps_reached, Status.successful)
    return {"y": y, "last": y[-1], "status": status}


def test_a_sweep_reads_back_with_named_output_axes_and_expected_failures(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    ts = np.linspace(0.0, 1.0, 4)
    grid = Grid.product({"rate": np.array([0.5, 1.0, 2.0])}, seeds=2)
    run.sweep(
        "decay",
        _decay,
        grid,
        dims={"y": ("time",)},
        coords={"time": ts},
        expected=[
            (Status.max_steps_reached, "rate > 1.5 is outside the solver's budget by design")
        ],
    )
    # an array saved under the sweep's prefix is not one of its outputs (the reshape error)
    run.save_arrays(**{"decay.check_P": np.array([1.0, 2.0])})
    run.finish()
    data = load(tmp_path / "r")
    ds = data.sweeps["decay"]
    assert ds["y"].dims == ("rate", "seed", "time")
    np.testing.assert_array_equal(ds["time"].values, ts)
    assert data.arrays["decay.check_P"].dims == ("decay.check_P_0",)
    info = data.summary["sweeps"]["decay"]
    assert info["expected_failures"] == {
        "max_steps_reached": {
            "members": 2,
            "why": "rate > 1.5 is outside the solver's budget by design",
        }
    }
    assert info["unexpected_failures"] == 0
    log = (tmp_path / "r" / "log.txt").read_text()
    assert (
        "expected: 2 max_steps_reached (rate > 1.5 is outside" in log and "NOT expected" not in log
    )


def test_an_array_parameter_has_named_axes(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    covs = np.stack([np.eye(2) * s for s in (1.0, 2.0, 3.0)])

    def member(p, key):
        return {"trace": jnp.trace(p["Sigma0"]), "status": Status.successful}

    run.sweep("m", member, Grid.zip({"Sigma0": covs}), dims={"Sigma0": ("i", "j")})
    with pytest.raises(ValueError, match="array parameters"):
        run.sweep("n", member, Grid.zip({"Sigma0": covs}), dims={"nothing": ("i",)})
    run.finish()
    data = load(tmp_path / "r")
    sigma0 = data.sweeps["m"]["Sigma0"]
    assert sigma0.dims == ("member", "seed", "i", "j")
    np.testing.assert_array_equal(sigma0.values[:, 0], covs)
    assert data.unlabelled() == []


def test_unexpected_failures_say_what_to_do(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    grid = Grid.product({"rate": np.array([0.5, 2.0])}, seeds=1)
    run.sweep("decay", _decay, grid, dims={"y": ("time",)})
    log = (tmp_path / "r" / "log.txt").read_text()
    assert re.search(r"NOT expected: 1 max_steps_reached \(.*raise the solver's max_steps", log)
    assert (
        json.loads((tmp_path / "r" / "summary.json").read_text())["sweeps"]["decay"][
            "unexpected_failures"
        ]
        == 1
    )


def test_sgld_draws_read_by_arviz(tmp_path):
    """Posterior draws of SGLD chains as ArviZ's chain x draw: arviz.summary reads them."""
    az = pytest.importorskip("arviz")
    import jaxdyn.copyhead as ch

    L, V, P = 4, 3, 12
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())

    def chain(params, key):
        out = ch.sample_sgld(
            key, posterior, stats, burn_in=20, num_samples=30, thin=2, step_size=1e-3
        )
        return {"c_G": out["c_G"], "status": Status.successful}

    run = Run(tmp_path / "r", experiment="toy", echo=False)
    grid = Grid.product({"P": np.array([float(P)])}, seeds=4)
    run.sweep("sgld", chain, grid, dims={"seed": "chain", "c_G": ("draw",)})
    run.finish()
    ds = load(tmp_path / "r").sweeps["sgld"]
    assert ds["c_G"].dims == ("P", "chain", "draw")
    posterior_ds = az.convert_to_dataset(ds[["c_G"]].isel(P=0))
    assert (posterior_ds.sizes["chain"], posterior_ds.sizes["draw"]) == (4, 30)
    summary = az.summary(ds[["c_G"]].isel(P=0), kind="stats", round_to="none")
    assert summary.shape[0] == 1 and np.isfinite(summary["mean"].iloc[0])
    np.testing.assert_allclose(summary["mean"].iloc[0], float(ds["c_G"].mean()), rtol=1e-6)


def test_a_time_grid_names_the_time_axis(tmp_path):
    """`ts` saved with time series is the `time` coordinate and names their first axis of its
    length, and only that axis (a square matrix per time keeps its other axes unnamed)."""
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    ts = np.linspace(0.0, 2.0, 3)
    run.save_arrays(ts=ts, loss=np.ones(3), attention=np.zeros((3, 3, 3)), origin_ts=np.arange(4.0))
    run.save_arrays(other=np.ones(3))  # another call: no time grid there
    run.finish()
    data = load(tmp_path / "r")
    assert data.arrays["loss"].dims == ("time",)
    np.testing.assert_array_equal(data.arrays["loss"]["time"].values, ts)
    assert data.arrays["attention"].dims == ("time", "attention_1", "attention_2")
    assert data.arrays["other"].dims == ("other_0",)


def test_a_coordinate_name_holds_one_set_of_values(tmp_path):
    run = Run(tmp_path / "r", experiment="toy", echo=False)
    run.save_arrays(a=np.zeros(3), dims={"a": ("P",)}, coords={"P": np.arange(3.0)})
    run.save_arrays(b=np.zeros(3), dims={"b": ("P",)}, coords={"P": np.arange(3.0)})  # the same
    with pytest.raises(ValueError, match="coordinate 'P' is already saved with other values"):
        run.save_arrays(c=np.zeros(2), dims={"c": ("P",)}, coords={"P": np.arange(2.0)})
    # a second time grid under the name "time" is not used to label (its axes stay unnamed)
    run.save_arrays(ts=np.linspace(0, 1, 3), x=np.zeros(3))
    run.save_arrays(ts=np.linspace(0, 2, 3), y=np.zeros(3))
    run.finish()
    data = load(tmp_path / "r")
    assert data.arrays["x"].dims == ("time",) and data.arrays["y"].dims == ("y_0",)
