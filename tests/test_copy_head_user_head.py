"""A head that is not in the package (a scaled ReLU) through the reduced theory, its minimum's
status at a kink, and a trained network against the theory (docs/extending.md, "A reduced model
of your own head")."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdyn.copyhead as ch
from jaxdyn.copyhead import _measure, _models, _task


class ScaledReLU(ch.AbstractCopyHead):
    """A = s relu(G): non-negative, not normalised, with a kink at G = 0."""

    scale: float = eqx.field(static=True, default=0.5)

    def weights(self, G):
        return self.scale * jax.nn.relu(G)


def _model(L, V, **kw):
    directions = jnp.stack([_task.uniform_matrix(L), _task.shift_matrix(L)])
    return ch.HeadReduced(
        attention_head=ScaledReLU(),
        directions=directions,
        V=V,
        **{"lo": -1.0, "hi": 3.0, "grid_points": 21, **kw},
    )


@pytest.mark.slow
@pytest.mark.heavy
def test_user_head_reduced_model_finds_a_copy_minimum_and_flags_the_kink():
    L, V, P = 6, 3, 60.0
    model = _model(L, V)
    found = ch.global_minimum(model, P)
    assert found.status == ch.MinimumStatus.converged
    x = found.x
    assert float(model.action(x, P)) < float(model.action(jnp.zeros(2), P))
    assert _models.minimum_status(model, x, P) == ch.MinimumStatus.converged
    assert float(model.order(x)["c_G"]) > 0.05
    # G = 0 sits on the ReLU kink: autodiff's gradient there is 0, but it is no minimum.
    assert float(jnp.linalg.norm(jax.grad(lambda y: model.action(y, P))(jnp.zeros(2)))) == 0.0
    assert _models.minimum_status(model, jnp.zeros(2), P) == ch.MinimumStatus.non_smooth
    # A point on a slope is "stalled".
    assert _models.minimum_status(model, x + 0.3, P) == ch.MinimumStatus.stalled


@pytest.mark.slow
@pytest.mark.heavy
def test_global_minimum_leaves_the_kink_at_the_origin():
    """On a coarse grid the best point is G = 0 exactly, the ReLU kink (autodiff gradient and
    Hessian 0, so a Newton step does not move): the minimiser probes around it, restarts from
    the lower probe and reaches the minimum nearby, reported converged (it used to return
    x = 0, action 0, silently)."""
    P = 2.5
    model = _model(24, 6, grid_points=5)
    grid = model.grid()
    grid_best = grid[jnp.argmin(jax.vmap(lambda x: model.action(x, P))(grid))]
    assert float(jnp.max(jnp.abs(grid_best))) == 0.0
    assert _models.minimum_status(model, grid_best, P) == ch.MinimumStatus.non_smooth
    found = ch.global_minimum(model, P)
    assert float(found.action) < -1e-3
    assert found.status == ch.MinimumStatus.converged
    local = ch.local_minimum(model, P, jnp.array([0.3, 0.01]))
    np.testing.assert_allclose(float(found.action), float(local.action), rtol=1e-8)


@pytest.mark.slow
def test_user_head_network_matches_its_map_theory():
    """Adam to the joint MAP of the user's head from the copy pattern, on P = 400 sequences,
    against the reduced MAP theory: c_G within 10% (finite-P fluctuations of the statistics
    are O(1 / sqrt(P L)) ~ 2%)."""
    L, V, P = 6, 3, 400
    model = _model(L, V, objective=ch.Objective.map)
    theory = float(model.order(ch.global_minimum(model, float(P)).x)["c_G"])
    X, Y = ch.copy_task(jax.random.key(0), P, L, V)
    stats = ch.copy_statistics(X, Y)
    posterior = ch.CopyHeadPosterior(ScaledReLU())
    params, _ = jax.jit(
        lambda k: ch.train_map(
            k, posterior, stats, steps=3000, learning_rate=0.02, G0=2.0 * _task.shift_matrix(L)
        )
    )(jax.random.key(1))
    measured = float(_measure.measure(posterior, params["G"], params["W"], stats)["c_G"])
    assert theory > 0.05
    assert abs(measured - theory) < 0.1 * theory, (measured, theory)


@pytest.mark.slow
def test_user_head_copy_onset_is_located_over_L():
    """The scaling measurement on the user's head: where c_G of the global minimum leaves zero,
    at three L (the value is reported, the test asserts it is located and finite)."""
    onsets = []
    for L in (6, 8, 12):
        model = _model(L, 3)
        Ps = np.geomspace(0.5, 500.0, 30)
        cG = np.array([float(model.order(ch.global_minimum(model, p).x)["c_G"]) for p in Ps])
        onsets.append(Ps[np.argmax(cG > 1e-3)] if np.any(cG > 1e-3) else np.nan)
    assert np.all(np.isfinite(onsets)), onsets
