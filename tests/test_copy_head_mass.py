"""Laplace phases, free energies and mass-weighted means (jaxdyn.copyhead._mass) against exact
integration on problems small enough to integrate: a two-dimensional double well whose wells
have equal action and unequal stiffness, and the copy-head posterior at L = V = 2 (d = 4).

The expansion's errors have known orders under S -> n S: the mode misses the mean by O(1/n),
the Laplace-corrected mean by O(1/n^2), the free energy misses -ln Z by O(1/n). Each check is
an order (a ratio of errors between n and 4 n) that the mode-only prediction fails."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import copyhead as ch
from jaxdyn.copyhead import _mass


def well(v):
    """Two wells at x = +-1, y = 0 with action 0 each; y-stiffness e^x (the right well stiffer)."""
    x, y = v[0], v[1]
    return (x**2 - 1) ** 2 + 0.5 * y**2 * jnp.exp(x)


def well_observable(v):
    return jnp.stack([v[0], v[1] ** 2])


def _quadrature(n, tilt=0.0):
    """Exact -ln Z and means of (x, y^2) of each well (x > 0, x < 0) by a dense grid."""
    x = np.linspace(-2.5, 2.5, 1001)
    y = np.linspace(-4.0, 4.0, 801)
    X, Y = np.meshgrid(x, y, indexing="ij")
    S = n * ((X**2 - 1) ** 2 + 0.5 * Y**2 * np.exp(X) + tilt * X)
    out = {}
    for sign in (1, -1):
        w = np.where(sign * X > 0, np.exp(-S), 0.0)
        Z = w.sum() * (x[1] - x[0]) * (y[1] - y[0])
        out[sign] = (-np.log(Z), np.array([(w * X).sum(), (w * Y**2).sum()]) / w.sum())
    return out


@jax.jit
def _well_phases(n, tilt):
    def phase(x0):
        action = lambda v: n * (well(v) + tilt * v[0])
        # Newton from the tilt-free minimum to the tilted one.
        v = jnp.array([x0, 0.0])
        for _ in range(8):
            v = v - jnp.linalg.solve(jax.hessian(action)(v), jax.grad(action)(v))
        return ch.laplace_phase(action, v, well_observable)

    return phase(1.0), phase(-1.0)


def test_double_well_weights_and_means_against_quadrature():
    errors = {}
    for n in (20.0, 80.0):
        right, left = _well_phases(n, 0.0)
        exact = _quadrature(n)
        mix = _mass.mass_mixture([right, left])
        exact_w = 1.0 / (1.0 + np.exp(exact[1][0] - exact[-1][0]))
        errors[n] = {
            "weight": abs(float(mix.weights[0]) - exact_w),
            "mode_weight": abs(float(mix.mode_weights[0]) - exact_w),
            "mean": np.max(np.abs(np.asarray(right.mean) - exact[1][1])),
            "mode": np.max(np.abs(np.asarray(right.mode) - exact[1][1])),
            "F": abs(float(right.free_energy) - exact[1][0]),
        }
        # Equal actions, unequal stiffness: the mode's ranking says 1/2, the mass 1/(1 + e).
        assert float(mix.mode_weights[0]) == pytest.approx(0.5)
        assert float(mix.weights[0]) == pytest.approx(1.0 / (1.0 + np.e), rel=1e-6)
    lo, hi = errors[20.0], errors[80.0]
    # Orders under n -> 4 n: mean O(1/n^2) (ratio 16), free energy and weights O(1/n) (4).
    assert hi["mean"] < lo["mean"] / 10
    assert hi["F"] < lo["F"] / 3 and hi["weight"] < lo["weight"] / 3
    # Negative controls: the mode's mean has only first order (ratio about 4), and the
    # actions' weights miss the exact weight by about 0.23 at every n.
    assert hi["mode"] > lo["mode"] / 6
    assert hi["mode_weight"] > 0.2 and hi["mode_weight"] > 50 * hi["weight"]


@pytest.mark.slow
@pytest.mark.heavy
def test_mass_boundary_parts_from_mode_boundary():
    """Tilt t x: equal actions at t = 0 (the mode's boundary), equal mass at t = -1 / (2 n)
    (the stiffer right well needs a lower action by 1/2 ln(e^1 / e^-1) = 1 nat)."""
    n = 20.0
    tilts = np.linspace(-0.045, 0.045, 10)
    P = np.exp(tilts)  # a positive control parameter for phase_boundary's ln-P interpolation
    phases = [_well_phases(n, t) for t in tilts]
    S = np.array([[float(p.action) for p in pair] for pair in phases])
    F = np.array([[float(p.free_energy) for p in pair] for pair in phases])
    exact = np.array([[_quadrature(n, t)[s][0] for s in (1, -1)] for t in tilts])
    t_mode = np.log(_mass.phase_boundary(P, S[:, 0], S[:, 1]))
    t_mass = np.log(_mass.phase_boundary(P, F[:, 0], F[:, 1]))
    t_exact = np.log(_mass.phase_boundary(P, exact[:, 0], exact[:, 1]))
    assert t_mode == pytest.approx(0.0, abs=1e-3)
    assert t_mass == pytest.approx(-1.0 / (2 * n), abs=2e-3)
    # The mass boundary is the exact one to O(1/n^2); the mode's is off by 1/(2n).
    assert abs(t_mass - t_exact) < 0.1 * abs(t_mode - t_exact)
    assert np.isnan(_mass.phase_boundary(P, F[:, 0], F[:, 0] + 1.0))


def test_not_a_mode_has_no_mass():
    phase = ch.laplace_phase(well, jnp.zeros(2), well_observable)
    assert float(phase.min_eigenvalue) < 0
    assert np.isnan(float(phase.free_energy)) and np.all(np.isnan(np.asarray(phase.mean)))


@pytest.mark.slow
def test_copy_head_posterior_means_against_quadrature():
    """The copy-head posterior (softmax, L = V = 2, d = 4) tempered to exp(-n S): the
    Laplace-corrected means of (a_1, a_G) against a 4-d grid quadrature in H's eigenbasis
    (slow: about 10 CPU s, three compilations; the double well covers the expansion fast)."""
    L, V = 2, 2
    X, Y = ch.copy_task(jax.random.PRNGKey(0), 6, L, V)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ch.SoftmaxCopyHead())
    S = lambda g: posterior.action(g.reshape(L, L), stats)
    newton = jax.jit(lambda g: g - jnp.linalg.solve(jax.hessian(S)(g), jax.grad(S)(g)))
    g = jnp.zeros(L * L)
    for _ in range(12):
        g = newton(g)
    observable = lambda G: jnp.stack(ch.order_parameters(posterior.attention(G)))
    tempered = jax.jit(
        lambda n: ch.laplace_phase(lambda G: n * S(G.ravel()), g.reshape(L, L), observable)
    )
    convenience = jax.jit(lambda g: _mass.copy_head_phase(posterior, stats, g))
    evals, evecs = np.linalg.eigh(np.asarray(jax.jit(jax.hessian(S))(g)))
    z = np.linspace(-7.0, 7.0, 15)
    grid = np.stack(np.meshgrid(*[z] * 4, indexing="ij"), -1).reshape(-1, 4)
    on_grid = jax.jit(jax.vmap(lambda p: (S(p), observable(p.reshape(L, L)))))
    errors = {}
    for n in (4.0, 16.0):
        phase = tempered(n)
        points = jnp.asarray(np.asarray(g) + (grid / np.sqrt(n * evals)) @ evecs.T)
        s, o = on_grid(points)
        w = np.exp(-n * (np.asarray(s) - float(S(g))))
        o = np.asarray(o)
        exact = (w[:, None] * o).sum(0) / w.sum()
        errors[n] = (
            np.max(np.abs(np.asarray(phase.mean) - exact)),
            np.max(np.abs(np.asarray(phase.mode) - exact)),
        )
    (mean_lo, mode_lo), (mean_hi, mode_hi) = errors[4.0], errors[16.0]
    assert mean_hi < mean_lo / 10  # second order (16 expected)
    assert mean_hi < mode_hi / 20
    assert mode_hi > mode_lo / 6  # negative control: the mode is first order only (4)
    # The copy-head convenience is the same phase at n = 1.
    direct = convenience(g.reshape(L, L))
    np.testing.assert_allclose(direct.mean, tempered(1.0).mean, rtol=1e-10)


def test_laplace_mean_evidence_decides():
    """The SGLD check's decision: shifts at the Laplace prediction hold; at zero (a posterior
    whose mean is its mode: the mode-only alternative) refuted; two noisy datasets decide
    nothing."""
    laplace_mean_evidence = ch.claims.laplace_shift

    rng = np.random.default_rng(0)
    predicted = np.array([0.034, 0.02])
    noise = 0.002 * rng.standard_normal((5, 2))
    assert laplace_mean_evidence("c", predicted + noise, predicted).holds
    assert laplace_mean_evidence("c", noise, predicted).refuted
    wide = 0.05 * rng.standard_normal((2, 2))
    assert laplace_mean_evidence("c", predicted + wide, predicted).inconclusive


def test_aligned_mean_is_the_sign_aligned_gaussian_mean():
    """The odd head's prediction: E[sign(c_1 + c_G) c] of a Gaussian, against samples (at
    the symmetric mode it is not the mode's 0)."""
    from jaxdyn.copyhead._mass import aligned_mean

    rng = np.random.default_rng(0)
    cov = np.array([[4e-4, 1e-4], [1e-4, 2e-4]])
    for mean in (np.zeros(2), np.array([0.01, 0.02]), np.array([0.3, 0.2])):
        c = rng.multivariate_normal(mean, cov, size=400_000)
        sampled = np.mean(np.sign(c.sum(axis=1))[:, None] * c, axis=0)
        se = np.std(np.sign(c.sum(axis=1))[:, None] * c, axis=0) / np.sqrt(len(c))
        np.testing.assert_array_less(np.abs(aligned_mean(mean, cov) - sampled), 5 * se)
    assert aligned_mean(np.zeros(2), cov)[0] > 0.01  # sqrt(2/pi) Cov / sd, far from 0


def test_quick_size_records_the_mass_check_not_run():
    """``mass_check=False`` (quick): one not_run record per order parameter (needing
    mass_check=True at full size), no Hessian computed."""
    import types

    from jaxdyn.experiments.copy_head import sgld

    recorded = {}
    run = types.SimpleNamespace(
        evidence=lambda name, e, **kw: recorded.update({name: e}),
        not_run=lambda name, claim, **kw: recorded.update({name: kw}),
    )
    for attention, keys in (("softmax", ["c_G"]), ("linear", ["c_1", "c_G"])):
        recorded.clear()
        config = sgld.SGLDConfig(**{**sgld.SGLDConfig.quick(), "attention": attention})
        analysis = types.SimpleNamespace(config=config)  # only its config is read at quick size
        sgld._check_mass(run, analysis, None, None)
        assert sorted(recorded) == [f"posterior_mean_{k}_matches_laplace" for k in keys]
        assert all(
            kw["needs"] == {"mass_check": True} and kw["full_size"] for kw in recorded.values()
        )


@pytest.mark.slow  # one small SGLD experiment with the Laplace phases: ~40 CPU s
def test_the_mass_check_runs_in_the_experiment_and_logs_each_p(tmp_path):
    """``mass_check=true`` (the full-size path) at L = 8: both records get a decided or
    inconclusive verdict with a finite measurement, and each P's Laplace phase is logged."""
    import json

    from jaxdyn.cli import main

    out = tmp_path / "run"
    argv = ["run", "copy-head-sgld-linear", "--quick", "--processes", "1", "--out", str(out)]
    assert main([*argv, "--set", "mass_check=true", "--set", "L=8"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    checks = {c["name"]: c for c in summary["checks"]}
    for key in ("c_1", "c_G"):
        record = checks[f"posterior_mean_{key}_matches_laplace"]
        assert record["verdict"] in ("holds", "refuted", "inconclusive")
        assert np.all(np.isfinite(np.asarray(record["measured"], float)))
    assert "Laplace phase at P =" in (out / "log.txt").read_text()
