"""Differentiate the time at which tokens cluster with respect to the inverse temperature beta.

Tokens on the sphere under softmax attention with ``A = beta I`` (the token-clustering model,
docs/transformer_pde.md) merge into one cluster. The time ``T(beta)`` at which their RMS
distance to their mean falls to ``radius`` is a user event of ``simulate_particles``; its
derivative ``dT/dbeta`` comes from one reverse-mode pass through the solver (implicit function
theorem at the event) and is checked against central finite differences at two step sizes.

    python examples/pde_clustering_time.py        (about a minute on 2 CPU cores)
"""

import diffrax
import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)


from jaxdyn.meanfield import simulate_particles, uniform_on_sphere  # noqa: E402
from jaxdyn.meanfield.fields import SphereSoftmax  # noqa: E402


def one_cluster(radius):
    """The event "the tokens have formed one cluster": ``radius^2 - mean_i |x_i - mean(x)|^2``
    crosses zero upwards."""
    return lambda t, x: radius**2 - jnp.mean(jnp.sum((x - jnp.mean(x, 0)) ** 2, axis=-1))


def clustering_time(beta, x0, radius=0.1, t1=200.0, rtol=1e-10):
    """``T(beta)``: first time the tokens' RMS distance to their mean is ``radius``."""
    sol = simulate_particles(
        SphereSoftmax(beta, x0.shape[1], bounded=False),
        x0,
        t1,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=rtol),
        events={"one_cluster": one_cluster(radius)},
    )
    return sol.t_event


def main():
    x0 = uniform_on_sphere(jax.random.key(0), 16, 3)
    T = jax.jit(lambda b: clustering_time(b, x0))
    dT = jax.jit(jax.grad(lambda b: clustering_time(b, x0)))
    for beta in (0.5, 2.0):
        grad = float(dT(beta))
        fd = {h: float((T(beta + h) - T(beta - h)) / (2 * h)) for h in (1e-3, 5e-4)}
        print(
            f"beta = {beta}: T = {float(T(beta)):.6f}, dT/dbeta = {grad:.8f} (autodiff), "
            + ", ".join(f"{v:.8f} (FD, h = {h:g})" for h, v in fd.items())
        )


if __name__ == "__main__":
    main()
