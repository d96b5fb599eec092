"""The exact action for many score matrices at once, laid out for throughput on a CPU.

Same equation as :meth:`jaxdyn.copyhead.CopyHeadPosterior.action`
(benchmarks/bench_copy_head_action.py times it):

- A^T A as one fused broadcast-multiply-sum (batched 16 x 16 matmuls are slow on CPU);
- M and B as two (n, L^2) x (L^2, .) GEMMs against the statistics; only the lower triangle of
  the symmetric M is formed (it is all that the Cholesky factor reads);
- the V x V Cholesky factor and the triangular solve unrolled over V, each operation
  vectorised over the batch (n, the last axis), instead of n tiny LAPACK calls.
"""

from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, Float

from ._task import CopyStatistics

# Largest V for which the V x V Cholesky factorisation is unrolled into elementwise operations
# over the batch (O(V^3) traced ops); above it, LAPACK per matrix.
_UNROLL_MAX_V = 16


def _unrolled_cholesky_terms(M_low, B, ridge, V: int):
    """(ln det K, tr(B^T K^{-1} B)) with K = ridge I + M, M given by its lower triangle
    (rows of ``M_low`` in ``np.tril_indices`` order, batch last); Cholesky-Banachiewicz."""
    rows, cols = np.tril_indices(V)
    index = {(int(a), int(b)): k for k, (a, b) in enumerate(zip(rows, cols, strict=True))}
    C = [[None] * V for _ in range(V)]
    for j in range(V):
        s = M_low[index[(j, j)]] + ridge
        for k in range(j):
            s = s - C[j][k] ** 2
        C[j][j] = jnp.sqrt(s)
        for i in range(j + 1, V):
            s = M_low[index[(i, j)]]
            for k in range(j):
                s = s - C[i][k] * C[j][k]
            C[i][j] = s / C[j][j]
    logdet = 2.0 * sum(jnp.log(C[j][j]) for j in range(V))
    # Z = C^{-1} B by forward substitution, row by row (each row is (V, n)).
    quad, Z = 0.0, []
    for i in range(V):
        s = B[i]
        for k in range(i):
            s = s - C[i][k] * Z[k]
        Z.append(s / C[i][i])
        quad = quad + jnp.sum(Z[i] ** 2, axis=0)
    return logdet, quad


def action_batch(
    G: Float[Array, "n L L"],
    A: Float[Array, "n L L"],
    stats: CopyStatistics,
    *,
    temperature: Float[Array, ""],
    sigma_w2: Float[Array, ""],
    sigma_g2: Float[Array, ""],
) -> Float[Array, " n"]:
    """S(G) for scores G with attention matrices A = A(G) (unsupervised rows already zero)."""
    n, L = G.shape[0], G.shape[-1]
    V = stats.V
    dtype = jnp.result_type(A.dtype, stats.N.dtype)
    T = temperature.astype(dtype)
    kappa = sigma_w2.astype(dtype) / V
    ridge = T / kappa
    prior = jnp.sum(G**2, axis=(-2, -1)) / (2.0 * sigma_g2)
    ATA = jnp.sum(A[:, :, :, None] * A[:, :, None, :], axis=1).reshape(n, L * L)
    N = stats.N.reshape(L * L, V, V)
    NY = jnp.swapaxes(stats.NY, 0, 1).reshape(L * L, V * V)
    B = (A.reshape(n, L * L) @ NY).T.reshape(V, V, n)  # B[a, b] over the batch
    if V > _UNROLL_MAX_V:
        M = (ATA @ N.reshape(L * L, V * V)).reshape(n, V, V)
        C = jnp.linalg.cholesky(ridge * jnp.eye(V, dtype=dtype) + M)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(C, axis1=-2, axis2=-1)), axis=-1)
        Z = jsl.solve_triangular(C, jnp.moveaxis(B, -1, 0), lower=True)
        quad = jnp.sum(Z**2, axis=(-2, -1))
    else:
        rows, cols = np.tril_indices(V)
        M_low = (ATA @ N[:, rows, cols]).T  # (V(V+1)/2, n): M[a, b] for a >= b
        logdet, quad = _unrolled_cholesky_terms(M_low, B, ridge, V)
    # ln det(I + kappa M / T) = V ln(kappa / T) + ln det K.
    return prior + 0.5 * V * (V * jnp.log(kappa / T) + logdet) - quad / (2.0 * T)
