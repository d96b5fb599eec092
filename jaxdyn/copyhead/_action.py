"""Exact Bayesian action of the copy head: W integrated out (copy_head.md, "Exact action").

With kappa = sigma_w^2 / V, M(A) = sum_mu X^T A^T A X and B(A) = sum_mu X^T A^T Y (V x V),

    S(G) = ||G||^2 / (2 sigma_g^2) + (V/2) ln det(I + (kappa/T) M)
           - (1/2T) tr[B^T (T/kappa I + M)^{-1} B]                      (+ const),

    const = ||Y||^2 / 2T + (V P L / 2) ln(2 pi T) + (L^2 / 2) ln(2 pi sigma_g^2),

so that p(G | D) ~ exp(-S(G)). Only V x V matrices are formed (never the PL x PL kernel);
ln det and the quadratic form come from one Cholesky factor of T/kappa I + M (no inverse).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._network import ATTENTIONS, copy_head
from ._task import CopyStatistics, copy_statistics, supervised_positions


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _all(x, predicate) -> bool:
    # numpy, not jnp: validation must not create tracers under make_jaxpr / jit.
    return bool(np.all(predicate(np.asarray(x))))


def validate_hyperparameters(
    *, attention: str = "softmax", temperature=1.0, sigma_w2=1.0, sigma_g2=1.0, alpha=1.0
) -> None:
    """One-line ValueErrors for an unknown attention name, non-positive T or sigma^2."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
    for name, value in (
        ("temperature", temperature),
        ("sigma_w2", sigma_w2),
        ("sigma_g2", sigma_g2),
    ):
        if _is_concrete(value) and not _all(value, lambda v: v > 0):
            raise ValueError(f"{name} must be > 0, got {value}")
    if _is_concrete(alpha) and not _all(alpha, lambda v: v >= 0):
        raise ValueError(f"alpha must be >= 0, got {alpha}")


def attention_matrix(
    G: Float[ArrayLike, "L L"],
    *,
    attention: str = "softmax",
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, "L L"]:
    """A(G) with the rows of unsupervised positions zeroed (position 1 when not ``cyclic``)."""
    A = copy_head(attention, alpha=alpha, causal=causal).weights(G)
    rows = supervised_positions(A.shape[-1], cyclic=cyclic)
    return jnp.where(rows[:, None], A, 0.0)


def action_from_moments(
    G: Float[ArrayLike, "L L"],
    M: Float[ArrayLike, "V V"],
    B: Float[ArrayLike, "V V"],
    *,
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
) -> Float[Array, ""]:
    """S(G) from the V x V moments M and B (the equation of the module docstring)."""
    G, M, B = jnp.asarray(G), jnp.asarray(M), jnp.asarray(B)
    V = M.shape[-1]
    T = jnp.asarray(temperature, M.dtype)
    kappa = jnp.asarray(sigma_w2, M.dtype) / V
    K = (T / kappa) * jnp.eye(V, dtype=M.dtype) + M
    # One Cholesky factor gives both terms: ln det(I + kappa M / T) = V ln(kappa/T) + ln det K,
    # and tr(B^T K^{-1} B) = ||C^{-1} B||_F^2 with K = C C^T (no explicit inverse).
    C = jnp.linalg.cholesky(K)
    logdet = V * jnp.log(kappa / T) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(C)))
    Z = jsl.solve_triangular(C, B, lower=True)
    prior = jnp.sum(G**2) / (2.0 * sigma_g2)
    return prior + 0.5 * V * logdet - jnp.sum(Z**2) / (2.0 * T)


def action_from_statistics(
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """S(G) from sufficient statistics: O(L^2 V^2) per evaluation, independent of P."""
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    return action_from_moments(
        G, M, B, temperature=temperature, sigma_w2=sigma_w2, sigma_g2=sigma_g2
    )


def _data_moments(A, X, Y):
    AX = jnp.einsum("lm,pmv->plv", A, X)
    return jnp.einsum("plv,plw->vw", AX, AX), jnp.einsum("plv,plw->vw", AX, Y)


def action(
    G: Float[ArrayLike, "*batch L L"],
    X: Float[ArrayLike, "P L V"],
    Y: Float[ArrayLike, "P L V"],
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, "*batch"]:
    """Exact action S(G) = -ln p(G | D) + const of the copy head, W integrated out.

    copy_head.md, "Exact action": see the module docstring for the equation. ``G`` may carry
    leading batch axes (evaluated with ``vmap``). Softmax: A = row-softmax(G); linear:
    A = G / L^alpha. Differentiable in G; float64 recommended for comparisons at 1e-8.
    """
    validate_hyperparameters(
        attention=attention,
        temperature=temperature,
        sigma_w2=sigma_w2,
        sigma_g2=sigma_g2,
        alpha=alpha,
    )
    G, X, Y = jnp.asarray(G), jnp.asarray(X), jnp.asarray(Y)
    if X.ndim != 3 or X.shape != Y.shape:
        raise ValueError(f"X and Y must both have shape (P, L, V), got {X.shape} and {Y.shape}")
    L = X.shape[1]
    if G.ndim < 2 or G.shape[-2:] != (L, L):
        raise ValueError(f"G must have shape (..., {L}, {L}) to match X, got {G.shape}")

    hyper = dict(temperature=temperature, sigma_w2=sigma_w2, sigma_g2=sigma_g2)
    if G.ndim == 2:
        # One G: contract the data directly, O(P L^2 V + P L V^2).
        A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
        M, B = _data_moments(A, X, Y)
        return action_from_moments(G, M, B, **hyper)
    # Many G: build the sufficient statistics once (O(P L^2 V^2)); each G then costs two
    # GEMM-shaped contractions, O(L^2 V^2), shared by the whole batch (see _batched_action).
    stats = copy_statistics(X, Y)
    batch = G.shape[:-2]
    flat = G.reshape((-1, L, L))
    S = _batched_action(
        flat, stats, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic, **hyper
    )
    return S.reshape(batch)


# Largest V for which the batched path unrolls the V x V Cholesky factorisation into
# elementwise operations over the batch (O(V^3) traced ops); above it, LAPACK per matrix.
_UNROLL_MAX_V = 16


def _batched_action(
    G, stats: CopyStatistics, *, attention, alpha, causal, cyclic, temperature, sigma_w2, sigma_g2
):
    """S(G) for a flat batch G (n, L, L): the same equation as :func:`action_from_moments`,
    laid out for throughput on small matrices (benchmarks/bench_copy_head_action.py):

    - A^T A as one fused broadcast-multiply-sum (batched 16 x 16 matmuls are slow on CPU);
    - M and B as two (n, L^2) x (L^2, .) GEMMs against the statistics; only the lower
      triangle of the symmetric M is formed (it is all that the Cholesky factor reads);
    - the V x V Cholesky factor and the triangular solve unrolled over V, each operation
      vectorised over the batch (n, the last axis), instead of n tiny LAPACK calls.
    """
    n, L = G.shape[0], G.shape[-1]
    V = stats.V
    A = jax.vmap(
        lambda g: attention_matrix(
            g, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic
        )
    )(G)
    # Same dtype promotion as action_from_moments on (A @ statistics).
    dtype = jnp.result_type(A.dtype, stats.N.dtype)
    T = jnp.asarray(temperature, dtype)
    kappa = jnp.asarray(sigma_w2, dtype) / V
    prior = jnp.sum(G**2, axis=(-2, -1)) / (2.0 * sigma_g2)
    ATA = jnp.sum(A[:, :, :, None] * A[:, :, None, :], axis=1).reshape(n, L * L)
    N = stats.N.reshape(L * L, V, V)
    NY = jnp.swapaxes(stats.NY, 0, 1).reshape(L * L, V * V)
    B = (A.reshape(n, L * L) @ NY).T.reshape(V, V, n)  # B[a, b] over the batch
    if V > _UNROLL_MAX_V:
        M = (ATA @ N.reshape(L * L, V * V)).reshape(n, V, V)
        K = (T / kappa) * jnp.eye(V, dtype=dtype) + M
        C = jnp.linalg.cholesky(K)
        logdet = V * jnp.log(kappa / T) + 2.0 * jnp.sum(
            jnp.log(jnp.diagonal(C, axis1=-2, axis2=-1)), axis=-1
        )
        Z = jsl.solve_triangular(C, jnp.moveaxis(B, -1, 0), lower=True)
        quad = jnp.sum(Z**2, axis=(-2, -1))
        return prior + 0.5 * V * logdet - quad / (2.0 * T)
    rows, cols = np.tril_indices(V)
    M_low = (ATA @ N[:, rows, cols]).T  # (V(V+1)/2, n): M[a, b] for a >= b
    index = {(int(a), int(b)): k for k, (a, b) in enumerate(zip(rows, cols, strict=True))}
    ridge = T / kappa
    # K = (T/kappa) I + M = C C^T, column by column (Cholesky-Banachiewicz, lower C).
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
    logdet = V * jnp.log(kappa / T) + 2.0 * sum(jnp.log(C[j][j]) for j in range(V))
    # Z = C^{-1} B by forward substitution, row by row (each row is (V, n)).
    quad = 0.0
    Z = []
    for i in range(V):
        s = B[i]
        for k in range(i):
            s = s - C[i][k] * Z[k]
        Z.append(s / C[i][i])
        quad = quad + jnp.sum(Z[i] ** 2, axis=0)
    return prior + 0.5 * V * logdet - quad / (2.0 * T)


def joint_energy(
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """Energy of the joint posterior over (W, G) (copy_head.md, "Validation protocol"):

        E = (1/2T) sum_mu ||Y - A X W||^2 + V ||W||^2 / (2 sigma_w^2) + ||G||^2 / (2 sigma_g^2),

    with sum_mu ||Y - A X W||^2 = ||Y||^2 - 2 tr(W^T B) + tr(W^T M W) from the statistics.
    Its G-marginal is exp(-S(G)) up to a constant.
    """
    W, G = jnp.asarray(W), jnp.asarray(G)
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    sq = stats.yy - 2.0 * jnp.sum(W * B) + jnp.sum(W * (M @ W))
    V = W.shape[0]
    return (
        sq / (2.0 * temperature)
        + V * jnp.sum(W**2) / (2.0 * sigma_w2)
        + jnp.sum(G**2) / (2.0 * sigma_g2)
    )


def joint_energy_gradient(
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    temperature=1.0,
    sigma_w2=1.0,
    sigma_g2=1.0,
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> tuple[Float[Array, "V V"], Float[Array, "L L"]]:
    """(dE/dW, dE/dG) of :func:`joint_energy`, written out from the sufficient statistics.

    With Q[l, m] = sum_ab N[l, m, a, b] (W W^T)_ab (symmetric) and
    R[l, m] = sum_ab NY[m, l, a, b] W_ab, the data term is
    sum_mu ||Y - A X W||^2 = yy - 2 <A, R> + <A^T A, Q>, so

        dE/dA = (A Q - R) / T,     dE/dW = (M W - B) / T + V W / sigma_w^2,
        dE/dG = (dA/dG)^T dE/dA + G / sigma_g^2      (the attention's vector-Jacobian product).

    Same numbers as ``jax.grad(joint_energy)`` (tested to 1e-12 in float64) at about half the
    cost under ``vmap`` over chains (the SGLD sampler's gradient;
    benchmarks/bench_copy_head_sgld.py): the four contractions with the statistics are
    matrix-vector products that ``vmap`` turns into GEMMs, and the small L x L and V x V
    products are broadcast-multiply-sums (batched tiny matmuls with a transposed operand are
    slow on CPU).
    """
    W, G = jnp.asarray(W), jnp.asarray(G)
    L, V = stats.L, stats.V
    A, attention_vjp = jax.vjp(
        lambda g: attention_matrix(
            g, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic
        ),
        G,
    )
    N = stats.N.reshape(L * L, V * V)
    NY = stats.NY.reshape(L * L, V * V)  # rows (m, l): no transpose of the statistics
    WWt = jnp.sum(W[:, None, :] * W[None, :, :], axis=-1)
    ATA = jnp.sum(A[:, :, None] * A[:, None, :], axis=0)
    Q = (N @ WWt.reshape(V * V)).reshape(L, L)
    R = (NY @ W.reshape(V * V)).reshape(L, L).T
    M = (ATA.reshape(L * L) @ N).reshape(V, V)
    B = (A.T.reshape(L * L) @ NY).reshape(V, V)
    grad_A = (A @ Q - R) / temperature
    grad_W = (jnp.sum(M[:, :, None] * W[None, :, :], axis=1) - B) / temperature + V * W / sigma_w2
    (grad_G,) = attention_vjp(grad_A.astype(A.dtype))
    return grad_W, grad_G + G / sigma_g2


def sequence_loss(
    W: Float[ArrayLike, "V V"],
    G: Float[ArrayLike, "L L"],
    stats: CopyStatistics,
    *,
    attention: str = "softmax",
    alpha=1.0,
    causal: bool = False,
    cyclic: bool = True,
) -> Float[Array, ""]:
    """Mean squared error per sequence, sum_mu ||Y^mu - A X^mu W||^2 / P, from the statistics."""
    W = jnp.asarray(W)
    A = attention_matrix(G, attention=attention, alpha=alpha, causal=causal, cyclic=cyclic)
    M, B = stats.moments(A)
    sq = stats.yy - 2.0 * jnp.sum(W * B) + jnp.sum(W * (M @ W))
    return sq / jnp.maximum(stats.P, 1.0)
