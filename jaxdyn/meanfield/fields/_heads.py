"""The attention variants of the Transformer PDE as final velocity fields (Sinkhorn in
``_sinkhorn``) (transformer_pde.md,
"The model" and "Gaussian closure"). Conventions match the paper's code:

- softmax:  ``Gamma(x) = V sum_k softmax_k(y_k^T A x) y_k``, ``A = K^T Q / sqrt(d)``;
- L2:       weights ``exp(-|Q x / sqrt(d) - K y|^2)`` (1/sqrt(d) on the query only);
- sigmoid:  ``Gamma(x) = V (1/n) sum_k sigmoid(y_k^T A x + b) y_k`` (rows not normalised);
- linear:   ``Gamma(x) = V (1/n) sum_k (y_k^T A x) y_k``;
- multi-head: ``sum_h C_h softmax-average_h``, ``A_h = K_h^T Q_h / sqrt(k)``, ``C_h = W_h^T V_h``.

Each final head declares its own ``Q, K, V, chunk_size`` fields: equinox's abstract/final
pattern keeps all of a class's fields (and its ``__init__``) in the one final class, so
:class:`AbstractBilinearHead` states them as ``AbstractVar`` and checks them once in
``__check_init__``. A base class holding the four fields would put fields in two places for
``Sigmoid`` (``bias``) and ``Sinkhorn`` (``iterations``) and move both after ``chunk_size``
in the positional order.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxdyn.attention import l2_scores, sigmoid_weights, softmax_weights

from ._base import (
    AbstractCausalField,
    AbstractDotProductHead,
    AbstractGaussianClosed,
    AbstractKernelHead,
    AbstractScaledHead,
    AbstractSoftmaxHead,
    Weight,
    as_weight,
    softmax_average,
    weight_at,
    weight_shape,
)


class Softmax(AbstractSoftmaxHead, AbstractDotProductHead, AbstractGaussianClosed):
    """Softmax self-attention, scores ``y^T A x`` with ``A = K^T Q / sqrt(d)``.

    Gaussian closure: ``Gamma(x) = V (alpha + Sigma A x)``, so ``d alpha/dt = V (I + Sigma A)
    alpha`` and ``d Sigma/dt = V Sigma A Sigma + transpose``.

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def affine_velocity(self, mean, cov, *, t=0.0):
        V = weight_at(self.V, t)
        return V @ cov @ self.A(t), V @ mean


def _small_solve(P, B):
    """``P^{-1} B`` by Gaussian elimination with partial pivoting (LAPACK's ``getrf``/``getrs``
    algorithm), unrolled in plain array operations for ``P`` up to 8 x 8: a batched LAPACK call
    costs about a microsecond per matrix on CPUs, several times the arithmetic. Larger ``P``:
    ``jnp.linalg.solve``."""
    d = P.shape[0]
    if d > 8:
        return jnp.linalg.solve(P, B)
    M = jnp.concatenate([P, B], axis=1)
    rows = jnp.arange(d)
    for j in range(d):
        pivot = jnp.argmax(jnp.where(rows >= j, jnp.abs(M[:, j]), -1.0))
        M = M[jnp.where(rows == j, pivot, jnp.where(rows == pivot, j, rows))]
        M = M - jnp.where(rows > j, M[:, j] / M[j, j], 0.0)[:, None] * M[j][None, :]
    X = [None] * d
    for i in reversed(range(d)):
        X[i] = (M[i, d:] - sum(M[i, k] * X[k] for k in range(i + 1, d))) / M[i, i]
    return jnp.stack(X)


def quadratic_key_average(A, M, V, mean, cov):
    """``(B, c)`` of the affine velocity ``Gamma(x) = B x + c = V (I + 2 Sigma M)^{-1} (alpha +
    Sigma A x)``: the softmax-weighted token average for scores ``y^T A x - y^T M y`` on tokens
    ``N(alpha, Sigma)`` (softmax attention: ``M = 0``; L2: ``2 A``, ``M = K^T K``).
    ``(I + 2 Sigma M)^{-1}`` is applied by one solve for both right-hand sides, never an
    explicit inverse (Woodbury's ``k x k`` form cancels catastrophically once Sigma is large)."""
    P = jnp.eye(cov.shape[0], dtype=cov.dtype) + 2.0 * cov @ M
    Y = _small_solve(P, jnp.concatenate([cov @ A, mean[:, None]], axis=1))
    return V @ Y[:, :-1], V @ Y[:, -1]


class L2(AbstractSoftmaxHead, AbstractScaledHead, AbstractGaussianClosed):
    """L2 self-attention: weights ``softmax_k(-|Q x / sqrt(d) - K y_k|^2)``.

    Gaussian closure with ``A = K^T Q / sqrt(d)``, ``M = K^T K``:
    ``Gamma(x) = V (I + 2 Sigma M)^{-1} (alpha + 2 Sigma A x)``, hence
    ``d Sigma/dt = 2 V Sigma (I + 2 M Sigma)^{-1} A Sigma + transpose``.

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def scores(self, x, tokens, *, t=0.0):
        Q, K = weight_at(self.Q, t), weight_at(self.K, t)
        return l2_scores(x @ Q.T / jnp.sqrt(Q.shape[1]), tokens @ K.T)

    def affine_velocity(self, mean, cov, *, t=0.0):
        K, V = weight_at(self.K, t), weight_at(self.V, t)
        return quadratic_key_average(2.0 * self.A(t), K.T @ K, V, mean, cov)


class Sigmoid(AbstractKernelHead, AbstractDotProductHead):
    """Sigmoid attention: ``Gamma(x) = V (1/n) sum_k sigmoid(y_k^T A x + bias) y_k``,
    ``A = K^T Q / sqrt(d)``; no division by the row sum. Not Gaussian-closed: particles only.

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        bias: the sigmoid's bias ``b`` (a scalar; may be traced).
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    bias: Float[Array, ""] = eqx.field(converter=jnp.asarray, default=0.0)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def kernel(self, scores):
        return sigmoid_weights(scores, bias=self.bias)


class Linear(AbstractKernelHead, AbstractDotProductHead, AbstractGaussianClosed):
    """Linear attention: ``Gamma(x) = V (1/n) sum_k (y_k^T A x) y_k``, ``A = K^T Q / sqrt(d)``.

    Gaussian closure: ``Gamma(x) = V (Sigma + alpha alpha^T) A x``, so
    ``d Sigma/dt = V (Sigma + alpha alpha^T) A Sigma + transpose``.

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def kernel(self, scores):
        return scores

    def affine_velocity(self, mean, cov, *, t=0.0):
        second_moment = cov + jnp.outer(mean, mean)
        return weight_at(self.V, t) @ second_moment @ self.A(t), jnp.zeros_like(mean)


class MultiHead(AbstractCausalField, AbstractGaussianClosed):
    """Multi-head softmax attention: ``Gamma(x) = sum_h C_h sum_k softmax_k(y_k^T A_h x) y_k``.

    ``H = heads``; ``Q_h, K_h`` are the row blocks ``h k:(h+1) k`` of ``Q, K`` (``k = rows/H``),
    ``A_h = K_h^T Q_h / sqrt(k)``; ``C_h = W_h^T V_h`` with ``V_h, W_h`` row blocks of ``V`` and
    of the output projection ``W`` (default ``I``). Gaussian closure (transformer_pde.md):
    ``d Sigma/dt = sum_h C_h Sigma A_h Sigma + transpose``.

    Attributes:
        Q: stacked query weights ``(H k, d)``, an array or a callable of ``t``.
        K: stacked key weights ``(H k, d)``.
        V: stacked value weights ``(H k_v, d)``.
        heads: number of heads ``H``.
        W: output projection with ``V``'s shape (``None``: identity, then ``V`` is ``(d, d)``).
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    heads: int = eqx.field(static=True, default=1)
    W: Weight | None = eqx.field(
        default=None, converter=lambda w: None if w is None else as_weight(w)
    )
    chunk_size: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        q, k, v = weight_shape(self.Q), weight_shape(self.K), weight_shape(self.V)
        if len(q) != 2 or q != k:
            raise ValueError(f"MultiHead: Q and K must be equal (rows, d) shapes, got {q}, {k}")
        d = q[1]
        if self.heads < 1 or q[0] % self.heads:
            raise ValueError(f"MultiHead: heads={self.heads} must divide the {q[0]} rows of Q")
        if len(v) != 2 or v[1] != d or v[0] % self.heads:
            raise ValueError(f"MultiHead: V must be (H * k_v, {d}) with heads | rows, got {v}")
        if self.W is None and v[0] != d:
            raise ValueError(f"MultiHead: with W=None (identity), V must be ({d}, {d}), got {v}")
        if self.W is not None and weight_shape(self.W) != v:
            raise ValueError(f"MultiHead: W must have V's shape {v}, got {weight_shape(self.W)}")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"MultiHead: chunk_size must be >= 1 or None, got {self.chunk_size}")

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return weight_shape(self.Q)[1]

    @classmethod
    def from_heads(cls, heads, *, chunk_size: int | None = None) -> MultiHead:
        """Heads with their own ``(Q_h, K_h, V_h)``, each a :class:`Softmax` with constant
        weights: ``Gamma(x) = sum_h V_h sum_k softmax_k(y_k^T A_h x) y_k``, ``A_h`` each head's
        own ``K_h^T Q_h / sqrt(d)``.

        Built as ``Q = vstack(sqrt(d) A_h)``, ``K = vstack(I)`` (so each head's ``A_h`` is its
        own, whatever its key size), ``V = vstack(V_h)`` and ``W = vstack(I)``, so that
        ``C_h = W_h^T V_h = V_h``.
        """
        heads = tuple(heads)
        if not heads or not all(isinstance(h, Softmax) for h in heads):
            raise TypeError("MultiHead.from_heads: heads must be a non-empty sequence of Softmax")
        if any(callable(w) for h in heads for w in (h.Q, h.K, h.V)):
            raise ValueError(
                "MultiHead.from_heads: the heads' weights must be arrays, not callables"
            )
        dims = {h.dim for h in heads}
        if len(dims) != 1:
            raise ValueError(f"MultiHead.from_heads: the heads must share d, got {sorted(dims)}")
        d = dims.pop()
        eye = jnp.eye(d)
        Q = jnp.concatenate([jnp.sqrt(d) * h.A() for h in heads])
        V = jnp.concatenate([jnp.asarray(h.V) for h in heads])
        stack = jnp.concatenate([eye] * len(heads))
        return cls(Q=Q, K=stack, V=V, heads=len(heads), W=stack, chunk_size=chunk_size)

    def head_matrices(
        self, t: Float[ArrayLike, ""] = 0.0
    ) -> tuple[Float[Array, "H d d"], Float[Array, "H d d"]]:
        """``(A_h, C_h)`` stacked over heads."""
        Q, K, V = weight_at(self.Q, t), weight_at(self.K, t), weight_at(self.V, t)
        d = Q.shape[1]
        W = jnp.eye(d, dtype=V.dtype) if self.W is None else weight_at(self.W, t)
        H = self.heads
        kq = Q.shape[0] // H
        Qh, Kh = Q.reshape(H, kq, d), K.reshape(H, kq, d)
        Vh, Wh = V.reshape(H, -1, d), W.reshape(H, -1, d)
        A = jnp.einsum("hki,hkj->hij", Kh, Qh) / jnp.sqrt(kq)
        C = jnp.einsum("hki,hkj->hij", Wh, Vh)
        return A, C

    def _sum_of_heads(self, x, tokens, positions, t):
        A, C = self.head_matrices(t)

        def one_head(A_h, C_h):
            avg = softmax_average(
                lambda q, k: q @ A_h.T @ k.T,
                x,
                tokens,
                positions=positions,
                chunk_size=self.chunk_size,
            )
            return avg @ C_h.T

        return jnp.sum(jax.vmap(one_head)(A, C), axis=0)

    def velocity(self, x, tokens, *, t=0.0):
        return self._sum_of_heads(x, tokens, None, t)

    def causal_velocity(self, x, tokens, query_positions, key_positions, *, t=0.0):
        return self._sum_of_heads(x, tokens, (query_positions, key_positions), t)

    def weights(
        self, x: Float[Array, "m d"], tokens: Float[Array, "n d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> Float[Array, "H m n"]:
        """Dense attention of each head: ``(H, m, n)``."""
        A, _ = self.head_matrices(t)
        return jax.vmap(lambda A_h: softmax_weights(x @ A_h.T @ tokens.T))(A)

    def affine_velocity(self, mean, cov, *, t=0.0):
        A, C = self.head_matrices(t)
        B = jnp.einsum("hij,jk,hkl->il", C, cov, A)
        return B, jnp.sum(C, axis=0) @ mean


class Exponential(AbstractKernelHead, AbstractDotProductHead):
    """Unnormalised softmax: ``Gamma(x) = V (1/n) sum_k exp(y_k^T A x) y_k``,
    ``A = K^T Q / sqrt(d)``: the gradient flow of the interaction energy in the twisted
    distance (see the module docstring). Not Gaussian-closed.

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def kernel(self, scores):
        return jnp.exp(scores)
