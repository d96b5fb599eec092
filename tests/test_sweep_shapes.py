"""docs/api/sweeps.md's recipe for sweeping over a dimension runs as written, and its padded
members equal unpadded solves of each dimension (same step count, same numbers to rounding)."""

import re
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

DOCS = Path(__file__).parents[1] / "docs" / "api" / "sweeps.md"


def _recipe() -> dict:
    text = DOCS.read_text()
    section = text[text.index("## Sweeping over a dimension") :]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(code, "sweeps.md recipe", "exec"), namespace)
    return namespace


def _unpadded(A, d):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, x, args: A @ x),
        diffrax.Tsit5(),
        0.0,
        1.0,
        0.1,
        jnp.ones(d),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        saveat=diffrax.SaveAt(t1=True),
    )
    return np.asarray(sol.ys[0]), int(sol.stats["num_steps"])


@pytest.mark.slow
@pytest.mark.heavy
def test_padded_members_equal_the_unpadded_solve_of_each_dimension():
    ns = _recipe()
    result, grid, D = ns["result"], ns["grid"], ns["D"]
    assert result.ok().all()
    assert result.n_compilations <= 1  # one program for every d (0: jit's cache had it)
    x1, steps = result.outputs["x1"], result.outputs["steps"]
    keys = jax.vmap(jax.random.key)(jnp.asarray(grid.seeds))  # the engine's key per seed
    for i, d in enumerate(np.asarray(grid.params["d"]).astype(int)):
        np.testing.assert_array_equal(x1[i, d:], 0.0)
        A_full = jax.random.normal(keys[i], (D, D)) / jnp.sqrt(d) - 2.0 * jnp.eye(D)
        expected, n_steps = _unpadded(A_full[:d, :d], d)
        assert int(steps[i]) == n_steps
        np.testing.assert_allclose(x1[i, :d], expected, rtol=1e-12, atol=1e-14)


def test_the_default_norm_would_not_be_exact():
    """The counterfactual: with diffrax's default RMS norm (divided by D, not d) the padded
    solve takes other steps, which is why the recipe passes its own norm."""
    D, d = 5, 2
    real = jnp.arange(D) < d
    A = jnp.where(real[:, None] & real[None, :], -3.0 * jnp.eye(D) + 0.5, 0.0)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, x, args: A @ x),
        diffrax.Tsit5(),
        0.0,
        1.0,
        0.1,
        jnp.where(real, 1.0, 0.0),
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
        saveat=diffrax.SaveAt(t1=True),
    )
    _, n_steps = _unpadded(A[:d, :d], d)
    assert int(sol.stats["num_steps"]) != n_steps
