"""SweepResult as labelled arrays: to_xarray's dimensions and coordinates match the flat member
axis, on random grids of both kinds."""

import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.sweep import Grid, SweepResult


def _result(grid: Grid, rng) -> SweepResult:
    n = len(grid)
    outputs = {"x": rng.normal(size=n), "traj": rng.normal(size=(n, 4))}
    codes = rng.choice([Status.code(Status.successful), Status.code(Status.blowup)], size=n)
    return SweepResult(
        "s",
        grid.params,
        grid.seeds,
        outputs,
        codes.astype(np.int32),
        grid.shape,
        grid.axes,
        8,
        1,
        1,
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_to_xarray_labels_every_member_of_a_product_grid(seed):
    rng = np.random.default_rng(seed)
    lam = np.sort(rng.uniform(size=rng.integers(1, 4)))
    mu = np.sort(rng.uniform(size=rng.integers(2, 4)))
    grid = Grid.product({"lam": lam, "mu": mu, "pi": rng.dirichlet([1, 1], 2)}, seeds=3)
    result = _result(grid, rng)
    ds = result.to_xarray()
    assert ds["x"].dims == ("lam", "mu", "pi", "seed") and ds["traj"].dims[-1] == "traj_0"
    for m in rng.choice(len(grid), size=5):
        i, j, k, s = np.unravel_index(m, grid.shape)
        point = ds.isel(lam=i, mu=j, pi=k, seed=s)
        assert float(point["lam"]) == pytest.approx(grid.params["lam"][m])
        assert float(point["mu"]) == pytest.approx(grid.params["mu"][m])
        assert int(point["seed"]) == grid.seeds[m]
        assert float(point["x"]) == result.outputs["x"][m]
        np.testing.assert_array_equal(point["traj"].values, result.outputs["traj"][m])
        assert int(point["status"]) == result.status[m]
        name = "blowup" if result.status[m] == Status.code(Status.blowup) else "successful"
        assert point["status_name"].item() == name
    np.testing.assert_allclose(
        ds["pi"].values, grid.params["pi"].reshape(grid.shape + (2,))[0, 0, :, 0]
    )


def test_to_xarray_of_a_zip_grid_and_back_from_flat_arrays():
    rng = np.random.default_rng(3)
    grid = Grid.zip({"q": rng.normal(size=(5, 2, 2)), "lam": rng.uniform(size=5)}, seeds=2)
    result = _result(grid, rng)
    ds = result.to_xarray()
    assert ds["x"].dims == ("member", "seed") and ds["lam"].dims == ("member",)
    assert ds["q"].dims == ("member", "seed", "q_0", "q_1")
    back = SweepResult.from_arrays("s", result.arrays(), grid_shape=grid.shape, axes=grid.axes)
    for key in result.outputs:
        np.testing.assert_array_equal(back.outputs[key], result.outputs[key])
    np.testing.assert_array_equal(back.status, result.status)
    flat = SweepResult.from_arrays("s", result.arrays())  # without the grid: one member axis
    assert flat.to_xarray()["x"].dims == ("member",)


@pytest.mark.parametrize("seed", [0, 1])
def test_select_picks_a_sub_grid_that_equals_the_sub_grid_swept_alone(seed):
    """A product grid over (drift, n) x seeds, flat member order drift-major: selecting drift i's
    members with the sub-grid's shape gives the arrays of Grid.product over n x seeds alone."""
    rng = np.random.default_rng(seed)
    drifts, ns = rng.uniform(size=3), np.array([4.0, 8.0])
    grid = Grid.product({"drift": drifts, "n": ns}, seeds=2)
    result = _result(grid, rng)
    size = len(ns) * 2
    for i in range(len(drifts)):
        part = result.select(slice(i * size, (i + 1) * size), grid.shape[1:], grid.axes[1:])
        assert part.grid_shape == (2, 2) and part.axes == grid.axes[1:]
        np.testing.assert_array_equal(part.params["drift"], np.full(size, drifts[i]))
        np.testing.assert_array_equal(part.reshaped("n")[:, 0], ns)
        np.testing.assert_array_equal(
            part.outputs["traj"], result.outputs["traj"][i * size :][:size]
        )
        assert part.to_xarray()["x"].dims == ("n", "seed")
    mask = result.ok()
    ok = result.select(mask)
    assert ok.grid_shape == (int(mask.sum()),) and ok.n_failed() == 0
    with pytest.raises(ValueError, match="does not hold"):
        result.select(mask, (len(grid) + 1,))
