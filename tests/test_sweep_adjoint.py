"""Outside a sweep a simulator's solve is ``diffrax.diffeqsolve`` with the caller's adjoint:
``BacksolveAdjoint`` gives the default's gradient (and both the finite differences'), and a
vmapped solve whose batch has an event returns each member's own final state."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdyn import Status
from jaxdyn.meanfield import simulate_gaussian
from jaxdyn.meanfield.fields import Softmax

D = 2
_RNG = np.random.default_rng(7)
Q, K = _RNG.normal(size=(D, D)), _RNG.normal(size=(D, D))
V0 = -np.eye(D) + 0.3 * _RNG.normal(size=(D, D))
COV0 = np.array([[1.0, 0.3], [0.3, 0.5]])


def _final_trace(scale, *, rtol=1e-8, atol=1e-10, adjoint=None):
    sol = simulate_gaussian(
        Softmax(Q, K, scale * V0), jnp.zeros(D), COV0, 0.5,
        rtol=rtol, atol=atol, blowup_trace=None, psd_tol=None, adjoint=adjoint,
    )  # fmt: skip
    return jnp.trace(sol.final_cov) + jnp.sum(sol.covs[-1] ** 2)


def test_backsolve_adjoint_gives_the_default_gradient_and_the_finite_differences():
    scale = 0.8
    default = jax.grad(_final_trace)(scale)
    backsolve = jax.grad(lambda s: _final_trace(s, adjoint=diffrax.BacksolveAdjoint()))(scale)
    # central differences of solves at rtol 1e-12: truncation ~ h^2 |f'''| ~ 1e-8, solver
    # noise ~ 1e-12 / h ~ 1e-8 (relative to f' ~ 1)
    h = 1e-4
    tight = lambda s: _final_trace(s, rtol=1e-12, atol=1e-14)  # noqa: E731
    fd = (tight(scale + h) - tight(scale - h)) / (2 * h)
    # each gradient is within a small multiple of the solver's rtol 1e-8 of the exact one
    # (the flow over t1 = 0.5 amplifies errors by at most e^{2 |B| t1}, |B| ~ a few): 1e-5
    # relative bounds both with room, while a wrong adjoint (e.g. a sign or a missing term)
    # is off by O(1)
    np.testing.assert_allclose(backsolve, default, rtol=1e-5)
    np.testing.assert_allclose(default, fd, rtol=1e-5)
    np.testing.assert_allclose(backsolve, fd, rtol=1e-5)
    assert abs(default) > 1e-2  # a gradient that is not trivially zero


def test_backsolve_adjoint_with_an_event_is_refused_in_one_line():
    with pytest.raises(ValueError, match="BacksolveAdjoint takes no event"):
        simulate_gaussian(
            Softmax(Q, K, V0), jnp.zeros(D), COV0, 0.5, adjoint=diffrax.BacksolveAdjoint()
        )


@pytest.mark.slow
@pytest.mark.heavy  # kept out of the fast suite for its time
def test_a_vmapped_solve_with_an_event_in_its_batch_returns_each_members_own_final_state():
    """diffrax runs the event's root find for every member of a vmapped batch once one member
    has an event. A member without one must still return its own state at the time it reached
    (here after running out of steps): its final save is bitwise that of the same member in a
    batch of the same width where no member has an event (the same vectorised code)."""
    scales = jnp.array([3.0, -1.0, 30.0, 0.5])  # V = s I: s > 0 blows up, s < 0 contracts
    eye = jnp.eye(D)

    def solve(scale, max_steps):
        return simulate_gaussian(
            Softmax(eye, eye, scale * eye), jnp.zeros(D), COV0, 50.0, dt0=2.0,
            max_steps=max_steps, blowup_trace=10.0,
        )  # fmt: skip

    quiet = jnp.full_like(scales, -1.0)  # no member of this batch has an event
    for max_steps in (40, 60):  # the contracting member runs out of steps, or reaches t1
        batch = jax.vmap(lambda s, m=max_steps: solve(s, m))(scales)
        codes = Status.code(batch.status)
        assert codes[0] == Status.code(Status.blowup), codes  # an event in the batch
        no_event = (Status.code(Status.max_steps_reached), Status.code(Status.successful))
        assert codes[1] == no_event[max_steps > 40], codes
        alone = jax.vmap(lambda s, m=max_steps: solve(s, m))(quiet)
        assert set(Status.code(alone.status).tolist()) == {codes[1]}
        np.testing.assert_array_equal(batch.final_cov[1], alone.final_cov[1])
        np.testing.assert_array_equal(batch.t_final[1], alone.t_final[1])
