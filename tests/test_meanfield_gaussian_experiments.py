"""The Gaussian experiments end to end (pde-ranks, pde-blowup, pde-cone) and the cone helpers."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status, status_code
from jaxdyn.meanfield import (
    ConeOutcome,
    blowup_directions,
    cone_outcome,
    disk_coordinates,
    trace_one_covariances,
)
from jaxdyn.runs import ConfigError, read_summary, run_experiment


def _run(name, tmp_path, overrides=()):
    # sweep={}: the default () violates run_experiment's own annotation under the type hook.
    out = run_experiment(name, out=tmp_path / name, quick=True, overrides=dict(overrides), sweep={})
    summary = read_summary(out)
    failed = [c for c in summary["checks"] if not c["passed"]]
    assert not failed, failed
    return summary, out


@pytest.mark.slow
def test_pde_ranks_reports_and_confirms_the_published_euler_disagreements(tmp_path):
    summary, out = _run("pde-ranks", tmp_path, {"runs": 3})
    panels = summary["scalars"]["panels"]
    assert len(panels) == 12
    assert all(p["runs"] == 3 for p in panels.values())
    # The published step sizes are too large for part of the runs: some rank differs.
    assert sum(p["rank_disagreements"] for p in panels.values()) > 0
    with np.load(out / "results.npz") as z:
        assert set(np.unique(z["ranks_panel"])) == set(range(12))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pde-blowup", "pde-cone"])
def test_quick_gaussian_experiments_pass_their_checks(tmp_path, name):
    summary, _ = _run(name, tmp_path)
    assert summary["checks_total"] >= 6


@pytest.mark.parametrize(
    "name,overrides,match",
    [
        ("pde-ranks", {"dims": [3, 6]}, "dims"),
        ("pde-ranks", {"runs": 0}, "runs"),
        ("pde-ranks", {"construction": "random"}, "construction"),
        ("pde-cone", {"disk_radius": 1.0}, "disk_radius"),
        ("pde-blowup", {"l2_horizon": 0.5}, "l2_horizon"),
    ],
)
def test_invalid_configs_fail_before_running(tmp_path, name, overrides, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        run_experiment(name, out=tmp_path / "x", overrides=overrides, sweep={})


def test_cone_outcome_classifies_each_status():
    cov = jnp.diag(jnp.array([2.0, 0.5]))
    cases = [
        (Status.blowup, 1.0, "blowup"),
        (Status.successful, 1e-4, "converged"),
        # The threshold is relative above trace one: 2e-3 < 1e-3 * tr = 2.5e-3.
        (Status.successful, 2e-3, "converged"),
        (Status.successful, 3e-3, "undecided"),
        (Status.max_steps_reached, 1e-6, "failed"),
    ]
    for status, rate, name in cases:
        outcome = cone_outcome(status, cov, rate, 1e-3)
        assert status_code(outcome) == status_code(getattr(ConeOutcome, name)), (status, rate)


def test_trace_one_grid_and_disk_coordinates_invert_each_other():
    covs = trace_one_covariances(7, 0.9)
    np.testing.assert_allclose(np.trace(covs, axis1=1, axis2=2), 1.0)
    assert np.all(np.linalg.eigvalsh(covs)[:, 0] > 0)
    uw = disk_coordinates(covs)
    assert np.all(np.hypot(uw[:, 0], uw[:, 1]) < 0.9)
    rebuilt = np.stack([[(1 + uw[:, 0]) / 2, uw[:, 1] / 2], [uw[:, 1] / 2, (1 - uw[:, 0]) / 2]])
    np.testing.assert_allclose(rebuilt.transpose(2, 0, 1), covs, atol=1e-15)
    with pytest.raises(ValueError):
        trace_one_covariances(5, 1.0)


def test_blowup_directions_follow_the_rank_one_flow():
    """x' = (x^T A x) V x along an eigenvector u of V: blow-up iff (u^T A u) lam > 0, attracting
    iff nearby directions turn towards u (checked by integrating the angle ODE a little)."""
    A = np.diag([1.0, -1.0])
    V = np.array([[0.5, 2.0], [0.0, 2.0]])
    (u,) = blowup_directions(A, V)
    np.testing.assert_allclose(np.abs(u), [0.8, 0.6], atol=1e-12)
    theta_u = np.arctan2(u[1], u[0])

    def angle_rate(theta):
        e = np.array([np.cos(theta), np.sin(theta)])
        return (e @ A @ e) * (np.array([-e[1], e[0]]) @ V @ e)

    for offset in (-0.05, 0.05):
        theta = theta_u + offset
        for _ in range(2000):
            theta += 1e-3 * angle_rate(theta)
        assert abs(theta - theta_u) < abs(offset)
    # V = I fixes every direction: no attracting blow-up direction.
    assert blowup_directions(A, np.eye(2)) == []
