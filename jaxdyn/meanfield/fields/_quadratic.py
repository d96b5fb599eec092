"""Softmax attention with a quadratic key penalty: softmax and L2 attention as one field
(transformer_pde.md, "Gaussian closure").

Scores ``s(x, y) = y^T A x - y^T M y`` with ``M`` symmetric positive semi-definite. On tokens
``y ~ N(alpha, Sigma)`` the softmax-weighted token average is the mean of the Gaussian with
precision ``Sigma^{-1} + 2 M``:

    ``Gamma(x) = V (I + 2 Sigma M)^{-1} (alpha + Sigma A x)``,

an affine velocity, so the field is Gaussian-closed. Softmax attention is ``M = 0``; L2
attention ``softmax_k(-|Q x / sqrt(d) - K y_k|^2)`` is ``A = 2 K^T Q / sqrt(d)``, ``M = K^T K``
(the ``|Q x|^2`` term is the same for every key and cancels). With both expressed through
``A`` and ``M``, a sweep over softmax and L2 members evaluates one field per step instead of
both (:meth:`QuadraticKeySoftmax.softmax_or_l2`): this is jaxdyn's one softmax/L2 mixer;
:class:`jaxdyn.meanfield.fields.SelectField` chooses among fields of any kinds (and evaluates every
candidate under ``vmap``).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxdyn._validation import is_traced, require_psd
from jaxdyn.attention import softmax_weights

from ._base import AbstractGaussianClosed, scaled_interaction, weight_at
from ._heads import L2, Softmax, quadratic_key_average


class QuadraticKeySoftmax(AbstractGaussianClosed):
    """Softmax attention with scores ``y^T A x - y^T M y`` (module docstring).

    Attributes:
        A: interaction matrix ``(d, d)``.
        M: key penalty ``(d, d)``, symmetric positive semi-definite (checked when concrete).
        V: value matrix ``(d, d)``.
    """

    A: Float[Array, "d d"]
    M: Float[Array, "d d"]
    V: Float[Array, "d d"]

    def __init__(self, A: ArrayLike, M: ArrayLike, V: ArrayLike):
        self.A, self.M, self.V = jnp.asarray(A), jnp.asarray(M), jnp.asarray(V)

    def __check_init__(self):
        shapes = {jnp.shape(self.A), jnp.shape(self.M), jnp.shape(self.V)}
        d = jnp.shape(self.A)[0] if jnp.ndim(self.A) == 2 else None
        if len(shapes) != 1 or shapes != {(d, d)}:
            raise ValueError(
                "QuadraticKeySoftmax: A, M and V must be square matrices of one size, got "
                f"{jnp.shape(self.A)}, {jnp.shape(self.M)}, {jnp.shape(self.V)}"
            )
        if not is_traced(self.M):
            require_psd("QuadraticKeySoftmax: M", self.M)

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return jnp.shape(self.A)[0]

    @classmethod
    def from_softmax(cls, head: Softmax, t: Float[ArrayLike, ""] = 0.0) -> QuadraticKeySoftmax:
        """Softmax attention ``head`` at time ``t``: ``A = K^T Q / sqrt(d)``, ``M = 0``."""
        A = head.A(t)
        return cls(A, jnp.zeros_like(A), weight_at(head.V, t))

    @classmethod
    def from_l2(cls, head: L2, t: Float[ArrayLike, ""] = 0.0) -> QuadraticKeySoftmax:
        """L2 attention ``head`` at time ``t``: ``A = 2 K^T Q / sqrt(d)``, ``M = K^T K``."""
        K = weight_at(head.K, t)
        return cls(2.0 * head.A(t), K.T @ K, weight_at(head.V, t))

    @classmethod
    def softmax_or_l2(
        cls, Q: ArrayLike, K: ArrayLike, V: ArrayLike, l2: ArrayLike
    ) -> QuadraticKeySoftmax:
        """Softmax (``l2`` false) or L2 (``l2`` true) attention with weights ``Q, K, V``, the
        choice possibly traced (a sweep over both kinds compiles once and evaluates one field
        per step): ``A = K^T Q / sqrt(d)``, ``M = 0``, or ``A = 2 K^T Q / sqrt(d)``,
        ``M = K^T K``."""
        K = jnp.asarray(K)
        l2 = jnp.asarray(l2, bool)
        A = scaled_interaction(jnp.asarray(Q), K, 0.0)
        return cls(jnp.where(l2, 2.0 * A, A), jnp.where(l2, K.T @ K, jnp.zeros_like(A)), V)

    def scores(self, x: Float[Array, "m d"], tokens: Float[Array, "n d"]) -> Float[Array, "m n"]:
        """``s(x_i, y_k) = y_k^T A x_i - y_k^T M y_k``."""
        penalty = jnp.einsum("ki,ij,kj->k", tokens, self.M, tokens)
        return x @ self.A.T @ tokens.T - penalty[None, :]

    def velocity(self, x, tokens, *, t=0.0):
        return softmax_weights(self.scores(x, tokens)) @ tokens @ self.V.T

    def affine_velocity(self, mean, cov, *, t=0.0):
        return quadratic_key_average(self.A, self.M, self.V, mean, cov)
