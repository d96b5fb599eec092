"""Single-head attention networks of the copy task (copy_head.md, "Network").

Output f(X) = A X W with W in R^{V x V} (value and readout merged) and a positional attention
matrix A built from scores G in R^{L x L}: A = G / L^alpha (linear, ``alpha`` [open], default 1)
or A = row-softmax(G) (softmax). G is a free parameter, or factored as G = E W_Q W_K^T E^T with
positional embeddings E [open]. All weights come from ``jaxdyn.attention``.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..attention import causal_mask, linear_weights, softmax_weights

ATTENTIONS = ("linear", "softmax")


def _causal(L: int):
    pos = jnp.arange(L)
    return causal_mask(pos, pos)


class AbstractCopyHead(eqx.Module):
    """Maps positional scores G (L x L) to the attention matrix A (L x L)."""

    causal: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def weights(self, G: Float[ArrayLike, "L L"]) -> Float[Array, "L L"]:
        """Attention matrix A(G); row l is the attention of query position l."""

    def __call__(self, G, X: Float[ArrayLike, "P L V"], W: Float[ArrayLike, "V V"]):
        """Network output f(X) = A X W for every sequence (copy_head.md, "Network")."""
        return jnp.einsum("lm,pmv,vw->plw", self.weights(G), jnp.asarray(X), jnp.asarray(W))


class LinearCopyHead(AbstractCopyHead):
    """Linear attention A = G / L^alpha (alpha = 1 by default, alpha = 0 is A = G)."""

    alpha: float = 1.0
    causal: bool = False

    def __check_init__(self):
        if not isinstance(self.alpha, (int, float)):
            return  # traced alpha inside a sweep
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")

    def weights(self, G):
        G = jnp.asarray(G)
        L = G.shape[-1]
        mask = _causal(L) if self.causal else None
        return linear_weights(G, mask=mask) / jnp.asarray(L, G.dtype) ** self.alpha


class SoftmaxCopyHead(AbstractCopyHead):
    """Softmax attention A = row-softmax(G) (optionally causal)."""

    causal: bool = False

    def weights(self, G):
        G = jnp.asarray(G)
        mask = _causal(G.shape[-1]) if self.causal else None
        return softmax_weights(G, mask=mask)


def copy_head(attention: str, *, alpha: float = 1.0, causal: bool = False) -> AbstractCopyHead:
    """The head for an attention name ("linear" or "softmax")."""
    if attention == "linear":
        return LinearCopyHead(alpha=alpha, causal=causal)
    if attention == "softmax":
        return SoftmaxCopyHead(causal=causal)
    raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")


def factored_scores(
    E: Float[ArrayLike, "L d"], W_Q: Float[ArrayLike, "d k"], W_K: Float[ArrayLike, "d k"]
) -> Float[Array, "L L"]:
    """Factored positional scores G = E W_Q W_K^T E^T (copy_head.md, "Network" [open])."""
    E = jnp.asarray(E)
    return (E @ jnp.asarray(W_Q)) @ (E @ jnp.asarray(W_K)).T
