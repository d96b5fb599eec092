"""Several heads with their own (Q, K, V) (docs/transformer_pde.md, "The regime of a softmax
Gaussian").

1. Two softmax heads in d = 4, each with its own Q_h, K_h and a value V_h = c_h I, become one
   field with ``MultiHead.from_heads``.
2. ``gaussian_regime`` decides it: with every V_h = c_h I the covariance ODE is exactly
   softmax's with V = I and A = sum_h c_h A_h (``reduction`` says so), here a finite-time
   blow-up at a closed-form time, which the Gaussian solver reproduces.
3. 2048 particles follow the Gaussian ODE up to half that time; their covariance error is
   measured with the covariance-only, relative Bures-Wasserstein distance.

Run:  python examples/pde_multihead.py
"""

import diffrax
import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn.meanfield import (  # noqa: E402
    RK4,
    BuresWasserstein,
    empirical_mean_cov,
    gaussian_regime,
    simulate_gaussian,
    simulate_particles,
)
from jaxdyn.meanfield.fields import MultiHead, Softmax  # noqa: E402

d = 4
rng = np.random.default_rng(0)
heads = [
    Softmax(Q=rng.standard_normal((2, d)), K=rng.standard_normal((2, d)), V=c * np.eye(d))
    for c in (0.8, -0.5)
]
field = MultiHead.from_heads(heads)
mean0, cov0 = np.zeros(d), 0.5 * np.eye(d)

regime = gaussian_regime(field, mean0, cov0)
print(f"regime: {regime.regime}; reduction: {regime.reduction}")
print(f"blow-up time (closed form after the reduction): {regime.blowup_time_bound:.6f}")
solved = simulate_gaussian(field, mean0, cov0, 2 * regime.blowup_time_bound, rtol=1e-10, atol=1e-12)
print(f"blow-up time (Gaussian solver):                 {float(solved.t_blowup):.6f}")

t1 = 0.5 * regime.blowup_time_bound
gauss = simulate_gaussian(field, mean0, cov0, t1)
x0 = rng.standard_normal((2048, d)) @ np.linalg.cholesky(cov0).T
particles = simulate_particles(
    field,
    x0,
    t1,
    dt0=t1 / 50,
    solver=RK4(),
    stepsize_controller=diffrax.ConstantStepSize(),
    blowup_norm=None,
)
m, c = empirical_mean_cov(particles.final_x)
error = BuresWasserstein(covariance_only=True, relative=True).distance(
    m, c, gauss.final_mean, gauss.final_cov
)
print(f"relative covariance error of 2048 particles at t = {t1:.3f}: {float(error):.4f}")
