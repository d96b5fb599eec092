"""The run profile (``--profile``): where a run's time goes, from jax's monitoring events
and the sweep engine's own."""

import json

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jaxdyn._atomic import atomic_savefig  # noqa: E402
from jaxdyn.runs._profile import profiled  # noqa: E402
from jaxdyn.sweep import Grid, SweepOptions, run_sweep  # noqa: E402


def _member(params, key):
    x = jax.random.normal(key, (3,))
    return {"y": jnp.sum(jnp.tanh(params["a"] * x))}


def test_profile_counts_compilations_sweeps_host_syncs_and_plotting(tmp_path):
    jax.clear_caches()
    grid = Grid.product({"a": [0.5, 1.0, 2.0]}, seeds=4)
    with profiled(tmp_path):
        run_sweep(_member, grid, options=SweepOptions(vmap_width=4, chunk_size=4))
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        atomic_savefig(fig, tmp_path / "f.png")  # how a run writes its figures
        plt.close(fig)
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["sweeps"] == 1 and profile["compilations"] >= 1
    assert profile["host_syncs"] == 3  # three chunks of four members, one fetch each
    assert 0 < profile["device_s"] <= profile["sweep_s"] <= profile["experiment_s"]
    assert profile["compile_s"] > 0 and profile["trace_s"] > 0 and profile["plotting_s"] > 0
    parts = ("trace_s", "lower_s", "compile_s", "device_s", "plotting_s", "other_s")
    # each of the seven numbers is rounded to the millisecond
    assert sum(profile[k] for k in parts) >= profile["experiment_s"] - 7 * 0.0005 - 1e-9
    # after the block nothing more is recorded
    run_sweep(_member, grid, options=SweepOptions(vmap_width=4))
    assert json.loads((tmp_path / "profile.json").read_text()) == profile
