"""Order parameters of the copy head (copy_head.md, "Order parameters").

(c_1, c_G): least-squares projection of A on span{U, S} with U = 1 1^T / L and S the copy
pattern: solve Gram(U, S) (c_1, c_G)^T = (<U, A>, <S, A>); for cyclic S the Gram matrix is
[[1, 1], [1, L]]. For softmax the same projection of the probability matrix is called (a_1, a_G).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._task import shift_matrix, supervised_positions, uniform_matrix


def _basis(L: int, cyclic: bool):
    return uniform_matrix(L), shift_matrix(L, cyclic=cyclic)


def order_parameters(
    A: Float[ArrayLike, "*batch L L"], *, cyclic: bool = True
) -> tuple[Float[Array, "*batch"], Float[Array, "*batch"]]:
    """(c_1, c_G) (or (a_1, a_G) for softmax probabilities) of one or many attention matrices."""
    A = jnp.asarray(A)
    L = A.shape[-1]
    U, S = _basis(L, cyclic)
    gram = jnp.array([[jnp.sum(U * U), jnp.sum(U * S)], [jnp.sum(U * S), jnp.sum(S * S)]])
    rhs = jnp.stack([jnp.sum(A * U, axis=(-2, -1)), jnp.sum(A * S, axis=(-2, -1))], axis=-1)
    c = jnp.linalg.solve(gram, rhs[..., None])[..., 0]
    return c[..., 0], c[..., 1]


def project_on_copy_span(A: Float[ArrayLike, "*batch L L"], *, cyclic: bool = True):
    """The projection c_1 U + c_G S of A on span{U, S}."""
    A = jnp.asarray(A)
    U, S = _basis(A.shape[-1], cyclic)
    c1, cG = order_parameters(A, cyclic=cyclic)
    return c1[..., None, None] * U + cG[..., None, None] * S


def logit_gap(G: Float[ArrayLike, "*batch L L"], *, cyclic: bool = True) -> Float[Array, "*batch"]:
    """Delta = G_{l,l-1} - mean_{m != l-1} G_{lm}, averaged over supervised rows."""
    G = jnp.asarray(G)
    L = G.shape[-1]
    S = shift_matrix(L, cyclic=cyclic)
    rows = supervised_positions(L, cyclic=cyclic)
    on = jnp.sum(G * S, axis=-1)
    off = (jnp.sum(G, axis=-1) - on) / (L - 1)
    gap = on - off
    return jnp.sum(jnp.where(rows, gap, 0.0), axis=-1) / jnp.sum(rows)


def coverage(A: Float[ArrayLike, "n L L"], *, cyclic: bool = True) -> Float[Array, ""]:
    """Fraction of the attention patterns' non-uniform part captured by span{U, S}.

    coverage = 1 - sum_s ||A_s - Pi A_s||^2 / sum_s ||A_s - <A_s, U> U||^2 over the samples s
    (posterior samples or trained nets). Measuring against the part beyond uniform pooling
    keeps coverage from being trivially ~1 for softmax, whose rows always carry U [open].
    """
    A = jnp.asarray(A)
    if A.ndim == 2:
        A = A[None]
    U, _ = _basis(A.shape[-1], cyclic)
    resid = A - project_on_copy_span(A, cyclic=cyclic)
    beyond_uniform = A - jnp.sum(A * U, axis=(-2, -1))[:, None, None] * U
    return 1.0 - jnp.sum(resid**2) / jnp.maximum(jnp.sum(beyond_uniform**2), 1e-300)


def pooling_share(c_1: float, c_G: float, L: int | float) -> float:
    """Share of the uniform pattern in ||A||_F^2 for A = c_1 U + c_G S: <A, U>^2 / ||A||^2
    (||U|| = 1, <U, S> = 1, ||S||^2 = L)."""
    frob2 = c_1**2 + 2 * c_1 * c_G + L * c_G**2
    return float((c_1 + c_G) ** 2 / frob2) if frob2 > 0 else float("nan")
