"""Sinkhorn attention (transformer_pde.md, "The model"): ``Gamma(x) = V int y dpi(y | x)``,
``pi`` the entropic (eps = 1) self-coupling of ``mu`` with kernel ``exp(y^T A x)``,
``A = K^T Q`` (no sqrt(d)), computed in the log domain."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxdyn.attention import chunked_sinkhorn_potential, sinkhorn_log_coupling, softmax_weights

from ._base import (
    AbstractBilinearHead,
    AbstractGaussianClosed,
    Weight,
    as_weight,
    softmax_average,
    weight_at,
)


def _sym_sqrt(S):
    """Square root of a symmetric PSD matrix by eigh (negative round-off eigenvalues clipped)."""
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    return (U * jnp.sqrt(jnp.clip(w, 0.0))) @ U.T


class Sinkhorn(AbstractBilinearHead, AbstractGaussianClosed):
    """Sinkhorn attention (eps = 1, ``A = K^T Q``, no sqrt(d)): ``Gamma(x) = V int y dpi(y|x)``.

    ``pi`` is the entropic self-coupling of ``mu`` with kernel ``exp(y^T A x)``, both marginals
    ``mu``, computed by ``iterations`` log-domain Sinkhorn iterations. Gaussian closure
    (transformer_pde.md): with ``S = Sigma^{1/2}``, ``At = S A S``,
    ``phi(At) = 2 At (I + (I + 4 At^T At)^{1/2})^{-1}``, the conditional mean of ``pi`` is
    ``alpha + S phi S^+ (x - alpha)``, so ``B = V S phi S^+`` and
    ``d Sigma/dt = V S phi S + transpose``, ``d alpha/dt = V alpha``.

    The coupling depends on the whole measure, so a causal Sinkhorn field (``Masked``) solves a
    new coupling for each visible prefix (the generic causal evaluation).

    Attributes:
        Q: query weights ``(k, d)``, an array or a callable of ``t``.
        K: key weights ``(k, d)``.
        V: value weights ``(d, d)``.
        iterations: Sinkhorn iterations.
        chunk_size: evaluate in chunks of this many queries and keys (``None``: dense).
    """

    Q: Weight = eqx.field(converter=as_weight)
    K: Weight = eqx.field(converter=as_weight)
    V: Weight = eqx.field(converter=as_weight)
    iterations: int = eqx.field(static=True, default=100)
    chunk_size: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if self.iterations < 1:
            raise ValueError(f"Sinkhorn: iterations must be >= 1, got {self.iterations}")

    def A(self, t=0.0):
        return weight_at(self.K, t).T @ weight_at(self.Q, t)

    def scores(self, x, tokens, *, t=0.0):
        return x @ self.A(t).T @ tokens.T

    def column_potential(
        self, tokens: Float[Array, "n d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> Float[Array, " n"]:
        """Potential ``g`` (up to a constant) with ``pi(y_k | x) = softmax_k(y_k^T A x + g_k)``."""
        n = tokens.shape[0]

        def score_fn(q, k):
            return self.scores(q, k, t=t)

        if self.chunk_size is not None:
            return chunked_sinkhorn_potential(
                score_fn, tokens, iterations=self.iterations, chunk_size=self.chunk_size
            )
        s = score_fn(tokens, tokens)
        log_m = jnp.full(n, -jnp.log(n), s.dtype)
        log_pi = sinkhorn_log_coupling(
            s, log_row_weights=log_m, log_col_weights=log_m, iterations=self.iterations
        )
        # log_pi = s + f_i + g_k: row 0 gives g up to the constant f_0, which a softmax ignores.
        return log_pi[0] - s[0]

    def velocity(self, x, tokens, *, t=0.0):
        avg = softmax_average(
            lambda q, k: self.scores(q, k, t=t),
            x,
            tokens,
            log_weights=self.column_potential(tokens, t=t),
            chunk_size=self.chunk_size,
        )
        return avg @ weight_at(self.V, t).T

    def weights(self, x, tokens, *, t=0.0):
        g = self.column_potential(tokens, t=t)
        return softmax_weights(self.scores(x, tokens, t=t), log_weights=g)

    def affine_velocity(self, mean, cov, *, t=0.0):
        V = weight_at(self.V, t)
        w, U = jnp.linalg.eigh(0.5 * (cov + cov.T))
        w = jnp.clip(w, 0.0)
        S = (U * jnp.sqrt(w)) @ U.T
        # S^+ drops eigenvalues at round-off level (below d eps max w), which eigh cannot resolve.
        eps = jnp.finfo(cov.dtype).eps
        safe = w > cov.shape[0] * eps * jnp.max(w)
        S_pinv = (U * jnp.where(safe, 1.0 / jnp.sqrt(jnp.where(safe, w, 1.0)), 0.0)) @ U.T
        At = S @ self.A(t) @ S
        eye = jnp.eye(cov.shape[0], dtype=cov.dtype)
        # phi = 2 At (I + (I + 4 At^T At)^{1/2})^{-1}: the matrix inverted has eigenvalues >= 2.
        phi = 2.0 * At @ jnp.linalg.inv(eye + _sym_sqrt(eye + 4.0 * At.T @ At))
        B = V @ S @ phi @ S_pinv
        return B, V @ mean - B @ mean
