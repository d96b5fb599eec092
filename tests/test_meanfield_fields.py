"""The velocity-field hierarchy: user fields through every simulator and wrapper, capabilities
as types, causal masking against a brute-force loop, time switching against staged solves."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

from jaxdyn import Status
from jaxdyn.meanfield import RK4, simulate_gaussian, simulate_particles
from jaxdyn.meanfield.fields import (
    L2,
    AbstractGaussianClosed,
    AbstractVelocityField,
    Linear,
    Masked,
    MultiHead,
    SelectField,
    Sigmoid,
    Sinkhorn,
    Softmax,
    SphereProjected,
    TimeSwitch,
)
from jaxdyn.meanfield.fields._base import AbstractCausalField
from jaxdyn.meanfield.fields._wrappers import prefix_causal_velocity
from jaxdyn.sweep import Grid, SweepOptions, run_sweep


class Repulsion(AbstractVelocityField):
    """A user's field without Q, K, V: ``Gamma(x) = s mean_k (x - y_k) exp(-|x - y_k|^2)``."""

    strength: jax.Array = eqx.field(converter=jnp.asarray)

    def velocity(self, x, tokens, *, t=0.0):
        diff = x[:, None, :] - tokens[None, :, :]
        w = jnp.exp(-jnp.sum(diff**2, axis=-1, keepdims=True))
        return self.strength * jnp.mean(w * diff, axis=1)


class Drift(AbstractGaussianClosed):
    """A user's Gaussian-closed field ``Gamma(x) = M x + c`` (independent of the measure)."""

    M: jax.Array
    c: jax.Array

    def velocity(self, x, tokens, *, t=0.0):
        return x @ self.M.T + self.c

    def affine_velocity(self, mean, cov, *, t=0.0):
        return self.M, self.c


def _brute_force_masked(field, x, positions):
    """Each token's velocity from the field evaluated on exactly the tokens it sees."""
    out = []
    for i in range(x.shape[0]):
        visible = np.asarray(positions) <= float(positions[i])
        out.append(field.velocity(x[i : i + 1], x[visible])[0])
    return np.stack(out)


def test_builtin_capabilities_are_types():
    Q = K = V = jnp.eye(2)
    closed = [Softmax(Q, K, V), L2(Q, K, V), Linear(Q, K, V), Sinkhorn(Q, K, V), MultiHead(Q, K, V)]
    assert all(isinstance(f, AbstractGaussianClosed) for f in closed)
    assert not isinstance(Sigmoid(Q, K, V), AbstractGaussianClosed)
    assert not isinstance(Masked(Softmax(Q, K, V), jnp.zeros(3)), AbstractGaussianClosed)
    assert not isinstance(Sinkhorn(Q, K, V), AbstractCausalField)  # its coupling is global
    with pytest.raises(TypeError):
        AbstractVelocityField()  # abstract: velocity is not implemented


@pytest.mark.slow
@pytest.mark.heavy
def test_user_field_runs_through_simulators_masked_and_the_sweep_engine():
    n, d = 6, 2
    x0 = jax.random.normal(jax.random.key(0), (n, d))
    positions = jnp.linspace(0.0, 1.0, n)
    masked = Masked(Repulsion(0.7), positions)
    np.testing.assert_allclose(
        masked.velocity(x0, x0), _brute_force_masked(Repulsion(0.7), x0, positions), rtol=1e-12
    )

    def member(params, key):
        x = jax.random.normal(key, (n, d))
        out = simulate_particles(Masked(Repulsion(params["strength"]), positions), x, 0.5)
        spread = jnp.mean(jnp.sum((out.final_x - out.final_x.mean(0)) ** 2, -1))
        # the first token sees only itself, where the repulsion vanishes: it never moves
        return {"spread": spread, "first_moved": jnp.max(jnp.abs(out.final_x[0] - x[0]))}

    grid = Grid.product({"strength": np.array([0.0, 1.0, 3.0])}, seeds=2)
    result = run_sweep(member, grid, options=SweepOptions(progress=False))
    assert result.ok().all()
    assert np.max(result.outputs["first_moved"]) < 1e-14  # round-off of fused stages
    spread = result.reshaped("spread").mean(axis=1)
    assert spread[0] < spread[1] < spread[2]  # stronger repulsion spreads the cloud further
    # the same user field, unmasked, through the adaptive and the fixed-step simulators
    sol = simulate_particles(
        Repulsion(0.7), x0, 0.5, stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12)
    )
    fixed = simulate_particles(
        Repulsion(0.7),
        x0,
        0.5,
        dt0=0.5 / 100,
        solver=RK4(),
        stepsize_controller=diffrax.ConstantStepSize(),
        blowup_norm=None,
    )
    assert bool(sol.status == Status.successful)
    np.testing.assert_allclose(sol.final_x, fixed.final_x, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(
    "make",
    [
        lambda Q, K, V: Softmax(Q, K, V),
        lambda Q, K, V: L2(Q, K, V, chunk_size=5),
        lambda Q, K, V: Sigmoid(Q, K, V, bias=-0.4),
        lambda Q, K, V: Linear(Q, K, V, chunk_size=5),
        lambda Q, K, V: MultiHead(Q, K, V, heads=2),
    ],
    ids=["softmax", "l2-chunked", "sigmoid", "linear-chunked", "multihead"],
)
def test_direct_causal_paths_equal_the_generic_prefix_evaluation(make):
    rng = np.random.default_rng(1)
    Q, K, V = (jnp.asarray(rng.standard_normal((4, 4))) for _ in range(3))
    field = make(Q, K, V)
    x = jnp.asarray(rng.standard_normal((7, 4)))
    positions = jnp.asarray(rng.choice([0.0, 0.2, 0.5, 1.0], size=7))  # with ties

    @jax.jit
    def both(x, positions):
        direct = Masked(field, positions).velocity(x, x)
        return direct, prefix_causal_velocity(field, x, x, positions, positions)

    direct, generic = both(x, positions)
    np.testing.assert_allclose(direct, generic, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(direct, _brute_force_masked(field, x, positions), rtol=1e-10)


@pytest.mark.slow
def test_masked_sinkhorn_solves_the_coupling_of_each_visible_prefix():
    rng = np.random.default_rng(2)
    Q, K, V = (jnp.asarray(0.5 * rng.standard_normal((2, 2))) for _ in range(3))
    field = Sinkhorn(Q, K, V, iterations=100)
    x = jnp.asarray(rng.standard_normal((6, 2)))
    positions = jnp.linspace(0.1, 0.9, 6)
    got = jax.jit(lambda x: Masked(field, positions, sink=True).velocity(x, x))(x)
    sink_positions = positions.at[0].set(0.0)
    np.testing.assert_allclose(got, _brute_force_masked(field, x, sink_positions), rtol=1e-9)


def test_sphere_projection_of_a_user_field_is_tangent():
    x = jax.random.normal(jax.random.key(3), (10, 3))
    v = SphereProjected(Repulsion(1.0)).velocity(x, x)
    np.testing.assert_allclose(jnp.sum(v * x, axis=-1), 0.0, atol=1e-12)


def test_gaussian_closed_user_field_matches_the_matrix_exponential():
    rng = np.random.default_rng(4)
    M = 0.3 * rng.standard_normal((3, 3))
    c = rng.standard_normal(3)
    G = rng.standard_normal((3, 3))
    cov0 = G @ G.T + 0.1 * np.eye(3)
    mean0 = rng.standard_normal(3)
    sol = simulate_gaussian(
        Drift(jnp.asarray(M), jnp.asarray(c)), mean0, cov0, 1.0, rtol=1e-11, atol=1e-12
    )
    E = scipy.linalg.expm(M)
    exact_mean = E @ mean0 + np.linalg.solve(M, (E - np.eye(3)) @ c)
    np.testing.assert_allclose(sol.final_cov, E @ cov0 @ E.T, rtol=1e-8)
    np.testing.assert_allclose(sol.final_mean, exact_mean, rtol=1e-8)


@pytest.mark.slow
@pytest.mark.heavy
def test_gaussian_time_switch_equals_two_staged_solves():
    rng = np.random.default_rng(5)
    first = Softmax(*(0.4 * rng.standard_normal((3, 3)) for _ in range(2)), jnp.eye(3))
    second = L2(*(0.4 * rng.standard_normal((3, 3)) for _ in range(2)), -jnp.eye(3))
    switched = TimeSwitch((first, second), breaks=[0.4])
    mean0, cov0 = np.zeros(3) + 0.2, np.eye(3)
    tol = dict(rtol=1e-10, atol=1e-12)
    whole = simulate_gaussian(switched, mean0, cov0, 1.0, **tol)
    stage1 = simulate_gaussian(first, mean0, cov0, 0.4, **tol)
    stage2 = simulate_gaussian(second, stage1.final_mean, stage1.final_cov, 0.6, **tol)
    # the solver crosses the switch inside a step: error controlled by rejected steps, ~ rtol
    np.testing.assert_allclose(whole.final_cov, stage2.final_cov, rtol=1e-6)
    np.testing.assert_allclose(whole.final_mean, stage2.final_mean, rtol=1e-6, atol=1e-8)
    # a switch with a field that is not Gaussian-closed is a plain TimeSwitch: no Gaussian ODE
    mixed = TimeSwitch((first, Sigmoid(jnp.eye(3), jnp.eye(3), jnp.eye(3))), breaks=[0.4])
    assert not isinstance(mixed, AbstractGaussianClosed)
    # simulate_gaussian's TypeError, or the runtime type checker's (field: AbstractGaussianClosed)
    with pytest.raises(TypeError, match="Gaussian-?[cC]losed"):
        simulate_gaussian(mixed, mean0, cov0, 1.0)


def test_bad_wrapper_inputs_are_rejected_with_a_one_line_error():
    field = Repulsion(1.0)
    with pytest.raises(ValueError, match="positions must be in"):
        Masked(field, jnp.array([0.0, 1.5]))
    with pytest.raises(ValueError, match="len\\(breaks\\) \\+ 1"):
        TimeSwitch((field,), breaks=[0.5])
    with pytest.raises(TypeError, match="velocity fields"):
        TimeSwitch((field, jnp.eye(2)), breaks=[0.5])
    with pytest.raises(ValueError, match="x needs 3 rows"):
        Masked(field, jnp.zeros(3)).velocity(jnp.zeros((2, 2)), jnp.zeros((3, 2)))


def test_select_velocity_is_the_selected_field_for_every_index_in_one_program():
    rng = np.random.default_rng(11)
    d = 2
    Q, K, V = (jnp.asarray(rng.standard_normal((d, d))) for _ in range(3))
    positions = jnp.sort(jnp.asarray(rng.uniform(size=7)))
    fields = (
        Softmax(Q=Q, K=K, V=V),
        Sigmoid(Q=Q, K=K, V=V),
        Masked(Softmax(Q=Q, K=K, V=V), positions=positions, sink=True),
    )
    x = jnp.asarray(rng.standard_normal((7, d)))
    traces = []

    @jax.jit
    def selected(index):
        traces.append(index)
        return SelectField(fields, index).velocity(x, x)

    for i, field in enumerate(fields):
        np.testing.assert_allclose(selected(jnp.int32(i)), field.velocity(x, x), rtol=1e-12)
    assert len(traces) == 1  # one trace, one compiled program for all three fields
    with pytest.raises(TypeError, match="velocity fields"):
        SelectField((fields[0], "softmax"), 0)
