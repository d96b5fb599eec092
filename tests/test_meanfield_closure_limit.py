"""The finite-n Gaussian closure at large logits (docs/transformer_pde.md, findings): the
particles' softmax average is a convex combination of the tokens, so it can never leave their
hull, while the Gaussian closure's tilt ``alpha + Sigma A x`` grows linearly with the logits.
Once the tilt passes the sample's extreme (about ``sqrt(2 log n)`` standard deviations) the
closure no longer describes n particles, whatever n."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdyn.meanfield.fields import Softmax

jax.config.update("jax_enable_x64", True)


def _gap(n, s, seed=0, d=2):
    """Relative gap between the particles' and the closure's velocity at a query whose tilt
    ``Sigma A x`` is ``s`` standard deviations (Sigma = I, A = I, V = I), and the sample's
    extreme radius."""
    y = jax.random.normal(jax.random.key(seed), (n, d), jnp.float64)
    y = y - jnp.mean(y, 0)  # mean 0, so the closure's velocity is Sigma A x = x
    field = Softmax(Q=np.sqrt(d) * np.eye(d), K=np.eye(d), V=np.eye(d))
    x = jnp.array([[s, 0.0]])
    v = field.velocity(x, y)[0]
    gaussian = x[0]  # (alpha + Sigma A x) with alpha = 0, Sigma = I
    return float(jnp.linalg.norm(v - gaussian) / s), float(jnp.max(jnp.linalg.norm(y, axis=1)))


def test_the_closure_holds_at_small_tilt_and_fails_past_the_samples_extreme():
    n = 1024
    small, _ = _gap(n, 0.5)
    # the sampling error of a tilted mean of n = 1024 standard normals: a few percent
    assert small < 0.15
    for s in (12.0, 24.0):
        gap, radius = _gap(n, s)
        # a convex combination of the tokens has norm <= their largest norm
        assert gap >= 1.0 - radius / s - 1e-12
        assert radius < 0.5 * s  # sqrt(2 log 1024) ~ 3.7 standard deviations, plus a margin
        assert gap > 0.5


def test_more_particles_push_the_breakdown_out_only_logarithmically():
    # the sample's extreme radius grows like sqrt(2 log n): 16x more particles, under 1.5x
    radii = [_gap(n, 1.0, seed=1)[1] for n in (256, 4096)]
    assert radii[1] / radii[0] < 1.5
