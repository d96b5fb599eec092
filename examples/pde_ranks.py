"""Limiting ranks of the paper's rank-histogram family, softmax, V = I, d = 3
(docs/transformer_pde_ranks.md), solved accurately and checked against the exact solution.

1. Draws of the paper's family: Q ~ randn(floor(d/2), d), K = -Q (so A + A^T <= 0), V = I,
   Sigma_0 = G G^T with G ~ randn(d, d).
2. ``rank_ode`` solves each run with the published stopping rule (converged when
   |dSigma/dt|_F falls to 1e-4, diverged when tr Sigma reaches 1e3, horizon 60000 x 0.09),
   located on an adaptive solve's interpolant; ``rank_outcome`` counts the eigenvalues above 0.1.
3. For V = I the exact solution is known, Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}: the
   accurate ranks must be its ranks at the stopping times.

The published NumPy Euler loop and its histograms are the ``pde-ranks`` experiment's
(``jaxdyn run pde-ranks``).   Run:  python examples/pde_ranks.py
"""

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn.meanfield import (  # noqa: E402
    rank_ode,
    rank_outcome,
    softmax_identity_covariance,
)
from jaxdyn.meanfield.fields import Softmax  # noqa: E402

d, runs = 3, 20
rng = np.random.default_rng(0)
Q = rng.standard_normal((runs, d // 2, d))
K = -Q
G = rng.standard_normal((runs, d, d))
Sigma0 = G @ np.swapaxes(G, -1, -2)


@jax.jit
@jax.vmap
def accurate(Q, K, Sigma0):
    ode = rank_ode(
        Softmax(Q=Q, K=K, V=jnp.eye(d)), Sigma0, tol_low=1e-4, tol_high=1e3, t1=60000 * 0.09
    )
    out = rank_outcome(ode.solution(ode.solve()))
    return out["rank"], out["t_final"]


ranks, t_stop = map(np.asarray, accurate(Q, K, Sigma0))
A = np.einsum("rki,rkj->rij", K, Q) / np.sqrt(d)
exact = jax.vmap(softmax_identity_covariance)(jnp.asarray(Sigma0), jnp.asarray(A), t_stop)
exact_ranks = np.sum(np.linalg.eigvalsh(np.asarray(exact)) > 0.1, axis=-1)
print(f"accurate ranks (counts of 0..{d}): {np.bincount(ranks, minlength=d + 1).tolist()}")
print(f"accurate ranks equal the exact Sigma(t_stop)'s: {bool(np.all(ranks == exact_ranks))}")
