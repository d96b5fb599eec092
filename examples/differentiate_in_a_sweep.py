"""Gradients inside a sweep: every member differentiates its own solve.

``run_sweep`` itself is a host-side loop over compiled chunks, so it is not differentiated;
instead each member returns the derivatives it needs, computed with ``jax.grad`` /
``jax.jacfwd`` through its diffrax solve. Here dx/dt = -r x, x(0) = x0, and each member
returns x(t1) and d x(t1) / d r, compared with the closed form -t1 x0 exp(-r t1).

    python examples/differentiate_in_a_sweep.py
"""

import diffrax
import jax
import numpy as np

from jaxdyn import Status
from jaxdyn.sweep import Grid, run_sweep

jax.config.update("jax_enable_x64", True)


def final_state(rate, x0, t1):
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, x, r: -r * x),
        diffrax.Tsit5(),
        0.0,
        t1,
        0.01,
        x0,
        args=rate,
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        throw=False,
    )
    return sol.ys[-1], Status.promote(sol.result)


def member(params, key):
    x0 = jax.random.uniform(key, (), minval=0.5, maxval=1.5)
    (x1, status), dx1_drate = jax.value_and_grad(final_state, has_aux=True)(
        params["rate"], x0, params["t1"]
    )
    return {"x1": x1, "dx1_drate": dx1_drate, "x0": x0, "status": status}


def main():
    grid = Grid.product({"rate": np.linspace(0.1, 2.0, 8), "t1": [1.5]}, seeds=4)
    result = run_sweep(member, grid)
    r, t1, x0 = result.params["rate"], result.params["t1"], result.outputs["x0"]
    exact = -t1 * x0 * np.exp(-r * t1)
    error = np.max(np.abs(result.outputs["dx1_drate"] - exact))
    print(f"{len(grid)} members, max |dx(t1)/dr - closed form| = {error:.2e}")
    return error


if __name__ == "__main__":
    main()
