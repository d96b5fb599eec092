"""The paper's rank histogram, softmax, V = I, d = 3 (docs/transformer_pde_ranks.md), on its
first 20 runs: the published draws and projected-Euler loop against an accurate solve.

1. ``paper_rank_inputs`` gives the published draws; ``published_rank_attempts`` runs the
   published loop (NumPy projected Euler with the published step, tolerance and stopping rule).
2. ``rank_ode`` solves the same runs accurately (adaptive Tsit5, the same stopping rule located
   on the interpolant), all at once with ``jax.vmap``.
3. For V = I the exact solution is known, Sigma(t) = (Sigma_0^{-1} - t (A + A^T))^{-1}: the
   accurate ranks must be its ranks at the stopping times, the Euler ranks need not be.

Runs in about a minute on 2 CPU cores:  python examples/pde_ranks.py
"""

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from jaxdyn.experiments.pde_gaussian import (  # noqa: E402
    paper_rank_inputs,
    published_rank_attempts,
    published_rank_settings,
    rank_histogram,
    rank_ode,
    rank_outcome,
)
from jaxdyn.meanfield import (  # noqa: E402
    Softmax,
    limiting_rank,
    softmax_identity_covariance,
)

d, runs = 3, 20
inputs = paper_rank_inputs("softmax", "identity", d, runs=runs)
settings = published_rank_settings("softmax", "identity", d)
attempts = published_rank_attempts(inputs, settings, "softmax")
r, a = attempts.run[attempts.converged], attempts.attempt[attempts.converged]
Q, K, V, Sigma0 = inputs.Q[r], inputs.K[r], inputs.V[r], inputs.Sigma0[a]


@jax.jit
@jax.vmap
def accurate(Q, K, V, Sigma0):
    ode = rank_ode(
        Softmax(Q=Q, K=K, V=V),
        Sigma0,
        tol_low=settings.tol_low,
        tol_high=settings.tol_high,
        t1=settings.max_steps * settings.dt,
    )
    out = rank_outcome(ode.solution(ode.solve()))
    return out["rank"], out["t_final"]


ranks, t_stop = map(np.asarray, accurate(Q, K, V, Sigma0))
A = np.einsum("rki,rkj->rij", K, Q) / np.sqrt(d)
exact = jax.vmap(softmax_identity_covariance)(jnp.asarray(Sigma0), jnp.asarray(A), t_stop)
exact_ranks = np.asarray(jax.vmap(limiting_rank)(exact))
euler = attempts.rank[attempts.converged]

print(f"published Euler (h = {settings.dt}) histogram: {rank_histogram(euler, d)}")
print(f"accurate solve histogram:              {rank_histogram(ranks, d)}")
print(f"runs where the two differ: {int(np.sum(euler != ranks))} of {runs}")
print(f"accurate ranks equal the exact Sigma(t_stop)'s: {bool(np.all(ranks == exact_ranks))}")
print(
    f"Euler runs whose steps were projected (a negative eigenvalue set to 1e-14): "
    f"{int(np.sum(attempts.projected[attempts.converged] > 0))}"
)
