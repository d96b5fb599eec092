"""Single-head attention networks of the copy task (copy_head.md, "Network").

Output f(X) = A X W with W in R^{V x V} (value and readout merged) and a positional attention
matrix A(G) built from scores G in R^{L x L}. Any map G -> A is a head: subclass
:class:`AbstractCopyHead` and implement ``weights``. Built in: linear attention
A = G / L^alpha (``alpha`` [open], default 1) and softmax attention A = row-softmax(G).
G is a free parameter, or factored as G = E W_Q W_K^T E^T with positional embeddings E [open].
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ..attention import causal_mask, linear_weights, softmax_weights


def _causal(L: int):
    pos = jnp.arange(L)
    return causal_mask(pos, pos)


def _as_float(x) -> Array:
    return jnp.asarray(x, dtype=jnp.result_type(float))


class AbstractCopyHead(eqx.Module):
    """A copy head: maps positional scores G (L x L) to the attention matrix A (L x L).

    Subclass it and implement :meth:`weights` (any differentiable map; row l is the attention
    of query position l). Every function of :mod:`jaxdyn.copyhead` that takes a head (the
    posterior, samplers, trainers, measurements) then works with it.
    """

    @abc.abstractmethod
    def weights(self, G: Float[Array, "L L"]) -> Float[Array, "L L"]:
        """Attention matrix A(G); row l is the attention of query position l."""

    def __call__(
        self, G: Float[ArrayLike, "L L"], X: Float[ArrayLike, "P L V"], W: Float[ArrayLike, "V V"]
    ) -> Float[Array, "P L V"]:
        """Network output f(X) = A X W for every sequence (copy_head.md, "Network")."""
        A = self.weights(jnp.asarray(G))
        return jnp.einsum("lm,pmv,vw->plw", A, jnp.asarray(X), jnp.asarray(W))


class AbstractOddCopyHead(AbstractCopyHead):
    """A head with A(-G) = -A(G) (e.g. linear attention).

    For such heads (G, W) -> (-G, -W) leaves the network output, hence the posterior, exactly
    unchanged: every state has a mirror image. Measurements report the representative whose
    attention rows sum to a non-negative total (:func:`jaxdyn.copyhead.measure`).
    """


class LinearCopyHead(AbstractOddCopyHead):
    """Linear attention A = G / L^alpha (alpha = 1 by default; alpha = 0 is A = G).

    Attributes:
        alpha: the scaling exponent (any real number; a traced array in sweeps).
        causal: zero the scores of keys after the query.
    """

    alpha: Float[Array, ""] = eqx.field(converter=_as_float, default=1.0)
    causal: bool = eqx.field(static=True, default=False)

    def weights(self, G: Float[Array, "L L"]) -> Float[Array, "L L"]:
        L = G.shape[-1]
        mask = _causal(L) if self.causal else None
        return linear_weights(G, mask=mask) / jnp.asarray(L, G.dtype) ** self.alpha.astype(G.dtype)


class SoftmaxCopyHead(AbstractCopyHead):
    """Softmax attention A = row-softmax(G) (optionally causal).

    Attributes:
        causal: each query attends only to keys at or before it.
    """

    causal: bool = eqx.field(static=True, default=False)

    def weights(self, G: Float[Array, "L L"]) -> Float[Array, "L L"]:
        mask = _causal(G.shape[-1]) if self.causal else None
        return softmax_weights(G, mask=mask)


class AbstractRowHead(AbstractCopyHead):
    """A head whose weights act on each row of logits alone, through a few row statistics
    (softmax-like heads, mixtures such as 0.8 softmax(G) + 0.2 / L, temperatures,
    sparsemax-like thresholds): implement :meth:`row_weights` once, on a row given as its
    distinct values and their multiplicities. The dense head (:meth:`weights`, every entry
    with multiplicity 1) and the closed-form reduced model
    (:class:`jaxdyn.copyhead.RowHeadReduced`, a row with one copy entry and L - 1 others,
    at any L up to 2^40 and beyond) then come from that one method.

    The reduced model needs the weights to be equivariant under permutations of a row (an
    entry's weight depends on its own value and on symmetric statistics of the row, such as
    sum_j c_j exp(v_j) or the row length sum_j c_j); the dense and the reduced forms agree
    exactly for such heads (``tests/test_copy_head_user_head.py``).
    """

    @abc.abstractmethod
    def row_weights(
        self, values: Float[Array, " k"], counts: Float[Array, " k"]
    ) -> Float[Array, " k"]:
        """The weight of each entry of value ``values[i]`` in a row made of ``counts[i]``
        entries of that value (the row length is sum(counts), a float: it may be 2^40).
        Use the counts in every row statistic (e.g. ``logsumexp(values, b=counts)``)."""

    def weights(self, G: Float[Array, "L L"]) -> Float[Array, "L L"]:
        ones = jnp.ones(G.shape[-1], G.dtype)
        return jax.vmap(lambda row: self.row_weights(row, ones))(G)


def check_head(head) -> AbstractCopyHead:
    """The head itself; a one-line TypeError for anything else (a name is not a head)."""
    if isinstance(head, AbstractCopyHead):
        return head
    raise TypeError(
        f"head must be an AbstractCopyHead (e.g. jaxdyn.copyhead.SoftmaxCopyHead()), got {head!r}"
    )


def factored_scores(
    E: Float[ArrayLike, "L d"], W_Q: Float[ArrayLike, "d k"], W_K: Float[ArrayLike, "d k"]
) -> Float[Array, "L L"]:
    """Factored positional scores G = E W_Q W_K^T E^T (copy_head.md, "Network" [open])."""
    E = jnp.asarray(E)
    return (E @ jnp.asarray(W_Q)) @ (E @ jnp.asarray(W_K)).T
