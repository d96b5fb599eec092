"""The one-layer transformer of focus_dilution.md ("Model") and its two losses.

Parameters ``W0`` (d x m), ``W1`` (m x d), ``WQ``, ``WK`` (m x m'); the analysis lives in
``M = W0 W1`` and ``Phi = W0 WQ WK^T W0^T``. The query is the last token ``x_s``:

    a_j = softmax_j(Phi[x_s, x_j]),   z = sum_j a_j M[x_j, :],   loss = -log softmax(z)[x_{s+1}]

and, for ``s, N -> infinity`` ("Population loss"),

    w_qk = pi_k exp(Phi_qk) / sum_l pi_l exp(Phi_ql),   o(q) = sum_k w_qk M[k, :]
    L = sum_q pi_q sum_y P_qy [ -o(q)_y + logsumexp(o(q)) ].

Attention weights always come from :func:`jaxdyn.attention.softmax_weights` (in
:func:`batch_loss` over the leading, token-type axis of its type-major batch: ``axis=0``).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from .._custom_types import Array, ArrayLike, Float, Int, Key, Scalar
from ..attention import softmax_weights
from ._markov import MarkovChain


class AbstractAttentionModel(eqx.Module):
    """A model whose analysis lives in the value map ``M`` and the score matrix ``Phi``."""

    @abc.abstractmethod
    def matrices(self) -> tuple[Float[Array, "d d"], Float[Array, "d d"]]:
        """``(M, Phi)``."""


class OneLayerTransformer(AbstractAttentionModel):
    """Embedding ``W0``, output ``W1``, query/key ``WQ``, ``WK``; no value matrix, residual,
    LayerNorm or positions (focus_dilution.md, "Model").

    Shapes: ``W0`` (d, m), ``W1`` (m, d), ``WQ`` and ``WK`` (m, m'); checked in
    ``__check_init__`` with a message naming the mismatch (the annotations stay shape-free so
    that this message, not a generic type error, is what a user sees)."""

    W0: Float[Array, "..."]
    W1: Float[Array, "..."]
    WQ: Float[Array, "..."]
    WK: Float[Array, "..."]

    def __check_init__(self):
        d, m = jnp.shape(self.W0)
        if jnp.shape(self.W1) != (m, d):
            raise ValueError(
                f"W1 must have shape {(m, d)} to match W0 {(d, m)}, got {jnp.shape(self.W1)}"
            )
        if jnp.ndim(self.WQ) != 2 or jnp.shape(self.WQ)[0] != m:
            raise ValueError(f"WQ must have shape (m={m}, m'), got {jnp.shape(self.WQ)}")
        if jnp.shape(self.WK) != jnp.shape(self.WQ):
            raise ValueError(
                f"WK must have the shape of WQ {jnp.shape(self.WQ)}, got {jnp.shape(self.WK)}"
            )

    @property
    def vocab_size(self) -> int:
        """``d``, the number of token types."""
        return self.W0.shape[0]

    def matrices(self) -> tuple[Float[Array, "d d"], Float[Array, "d d"]]:
        """``(M, Phi) = (W0 W1, W0 WQ WK^T W0^T)``."""
        M = self.W0 @ self.W1
        E = self.W0 @ self.WQ
        F = self.W0 @ self.WK
        return M, E @ F.T

    def _onehot(self, tokens) -> Float[Array, "s d"]:
        return jax.nn.one_hot(jnp.asarray(tokens), self.W0.shape[0], dtype=self.W0.dtype)

    def attention(self, tokens: Int[ArrayLike, " s"]) -> Float[Array, " s"]:
        """Attention ``a_j = softmax_j(Phi[x_s, x_j])`` of the last token on positions ``j``."""
        _, Phi = self.matrices()
        onehot = self._onehot(tokens)
        return softmax_weights(onehot @ (onehot[-1] @ Phi))

    def logits(self, tokens: Int[ArrayLike, " s"]) -> Float[Array, " d"]:
        """``z = sum_j a_j M[x_j, :]`` for one input sequence ``x_1..x_s``."""
        return self.logits_onehot(self._onehot(tokens))

    def logits_onehot(self, onehot: Float[ArrayLike, "s d"]) -> Float[Array, " d"]:
        """:meth:`logits` from the one-hot rows of ``x_1..x_s``.

        Computed through ``M`` and ``Phi`` (the model has no value matrix, so it depends on the
        parameters only through them): under ``vmap`` over sequences the d x d matrices are
        formed once, and the gradient is a few matmuls instead of a scatter-add into the
        embedding rows (slow on CPU)."""
        M, Phi = self.matrices()
        onehot = jnp.asarray(onehot)
        a = softmax_weights(onehot @ (onehot[-1] @ Phi))
        return (a @ onehot) @ M


def init_transformer(
    key: Key, d: int, m: int, m_attn: int, eps: float | Float[ArrayLike, ""], dtype=None
) -> OneLayerTransformer:
    """Small-scale initialisation: every entry i.i.d. ``N(0, eps^2)`` (focus_dilution.md).

    ``eps`` may be traced (a sweep over ``eps`` compiles once).
    """
    for name, v in (("d", d), ("m", m), ("m_attn", m_attn)):
        if int(v) < 1:
            raise ValueError(f"{name} must be a positive integer, got {v}")
    return _draw(key, eps, int(d), int(m), int(m_attn), dtype or jnp.result_type(float))


@eqx.filter_jit
def _draw(key, eps, d: int, m: int, m_attn: int, dtype) -> OneLayerTransformer:
    # one program for the four draws (eagerly, each would compile its own sampler)
    k0, k1, k2, k3 = jax.random.split(key, 4)
    return OneLayerTransformer(
        W0=eps * jax.random.normal(k0, (d, m), dtype),
        W1=eps * jax.random.normal(k1, (m, d), dtype),
        WQ=eps * jax.random.normal(k2, (m, m_attn), dtype),
        WK=eps * jax.random.normal(k3, (m, m_attn), dtype),
    )


def population_attention(
    Phi: Float[ArrayLike, "d d"], pi: Float[ArrayLike, " d"]
) -> Float[Array, "d d"]:
    """Token-type attention ``w_qk = pi_k exp(Phi_qk) / sum_l pi_l exp(Phi_ql)``."""
    return softmax_weights(Phi, log_weights=jnp.log(jnp.asarray(pi))[None, :])


def population_loss_from_matrices(
    M: Float[ArrayLike, "d d"],
    Phi: Float[ArrayLike, "d d"],
    pi: Float[ArrayLike, " d"],
    P: Float[ArrayLike, "d d"],
) -> Scalar:
    """``L(M, Phi) = sum_q pi_q [ logsumexp(o(q)) - sum_y P_qy o(q)_y ]``, ``O = W M``."""
    W = population_attention(Phi, pi)
    O = W @ M  # noqa: E741 (the science page's name)
    per_query = jax.nn.logsumexp(O, axis=1) - jnp.sum(jnp.asarray(P) * O, axis=1)
    return jnp.sum(jnp.asarray(pi) * per_query)


def _narrow(width: int, d: int) -> bool:
    # a product through the width-m factors costs 2 d^2 m (or 2 d m n) multiplications, one
    # through the d x d matrix d^3 (or d^2 n): the factors win when m < d / 2
    return 2 * width < d


def _values(model: OneLayerTransformer, W: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """``O = W M`` with ``M = W0 W1``, multiplied in the cheaper order for the widths."""
    if _narrow(model.W0.shape[1], model.W0.shape[0]):
        return (W @ model.W0) @ model.W1
    return W @ (model.W0 @ model.W1)


@eqx.filter_jit
def _population_loss(
    model: OneLayerTransformer, pi: Float[ArrayLike, " d"], P: Float[ArrayLike, "d d"]
) -> Scalar:
    """:func:`population_loss` on the arrays of a validated chain."""
    _, Phi = model.matrices()
    W = population_attention(Phi, pi)
    O = _values(model, W)  # noqa: E741 (the science page's name)
    per_query = jax.nn.logsumexp(O, axis=1) - jnp.sum(jnp.asarray(P) * O, axis=1)
    return jnp.sum(jnp.asarray(pi) * per_query)


def population_loss(model: OneLayerTransformer, chain: MarkovChain) -> Scalar:
    """Exact ``s, N -> infinity`` loss of ``model`` on the :class:`MarkovChain` ``chain``
    (focus_dilution.md, "Population loss"): ``L = sum_q pi_q [ logsumexp(o(q)) - sum_y P_qy
    o(q)_y ]`` with ``O = W M`` and ``W`` the token-type attention
    (:func:`population_attention`); ``W M`` is multiplied through the factors of ``M`` when
    the embedding is narrow."""
    return _population_loss(model, chain.pi, chain.P)


class Batch(eqx.Module):
    """Sequences prepared once for repeated loss evaluations (training loops reuse it at every
    step), reduced to what the loss depends on: the one-hot query token ``x_s``, the log counts
    of each token type among the inputs ``x_1..x_s`` (``-inf`` for absent types) and the
    one-hot target ``x_{s+1}``, each stored type-major as ``(d, n)``.

    The model has no positions, so ``sum_j a_j M[x_j, :]`` only sees how often each type
    occurs: with ``c_k = #{j : x_j = k}``, ``sum_{j: x_j = k} a_j = softmax_k(Phi[x_s, k] +
    log c_k)``. The loss is therefore a softmax over ``d`` types per sequence instead of over
    ``s`` positions; every product with the data is a dense matmul (no gather, whose gradient is
    a slow scatter-add on CPU), and with the sequences on the last axis the per-type reductions
    vectorise over sequences (also under ``vmap`` over seeds)."""

    query: Float[Array, "d n"]
    log_counts: Float[Array, "d n"]
    targets: Float[Array, "d n"]

    @classmethod
    def from_sequences(cls, sequences: Int[ArrayLike, "n s1"], d: int, dtype=None) -> Batch:
        """The batch of ``n`` sequences of ``s + 1`` tokens over ``d`` types (inputs
        ``x_1..x_s``, target ``x_{s+1}``)."""
        return prepare_batch(sequences, d, dtype)

    def loss(self, model: OneLayerTransformer) -> Scalar:
        """Mean last-token cross-entropy ``-log softmax(z)[x_{s+1}]`` of ``model`` over the
        batch (``z`` as in :meth:`OneLayerTransformer.logits`, from the token counts)."""
        return batch_loss(model, self)


def prepare_batch(sequences: Int[ArrayLike, "n s1"], d: int, dtype=None) -> Batch:
    """:class:`Batch` of ``n`` sequences of ``s + 1`` tokens over ``d`` types (inputs
    ``x_1..x_s``, target ``x_{s+1}``)."""
    sequences = jnp.asarray(sequences)
    dtype = dtype or jnp.result_type(float)
    inputs = jax.nn.one_hot(sequences[:, :-1], d, dtype=dtype)
    return Batch(
        query=inputs[:, -1].T,
        log_counts=jnp.log(jnp.sum(inputs, axis=1)).T,
        targets=jax.nn.one_hot(sequences[:, -1], d, dtype=dtype).T,
    )


def batch_loss(model: OneLayerTransformer, batch: Batch) -> Scalar:
    """Mean last-token cross-entropy ``-log softmax(z)[x_{s+1}]`` over a prepared batch
    (``z`` as in :meth:`OneLayerTransformer.logits`, computed from the token counts)."""
    d, m = model.W0.shape
    E, F = model.W0 @ model.WQ, model.W0 @ model.WK
    # scores Phi^T x_s with Phi = E F^T, and logits M^T w with M = W0 W1, through the
    # width-m factors when they are narrow (2 d m n multiplications instead of d^2 n)
    scores = F @ (E.T @ batch.query) if _narrow(E.shape[1], d) else (E @ F.T).T @ batch.query
    # per-type attention mass softmax_k(Phi[x_s, k] + log c_k), keys on axis 0: (d, n)
    w = softmax_weights(scores, log_weights=batch.log_counts, axis=0)
    if _narrow(m, d):
        z = model.W1.T @ (model.W0.T @ w)  # (d, n) logits
    else:
        z = (model.W0 @ model.W1).T @ w
    logp = z - jax.nn.logsumexp(z, axis=0, keepdims=True)
    return -jnp.sum(batch.targets * logp) / batch.targets.shape[1]


@eqx.filter_jit
def sequence_loss(model: OneLayerTransformer, sequences: Int[ArrayLike, "n s1"]) -> Scalar:
    """Mean last-token cross-entropy ``-log softmax(z)[x_{s+1}]`` over ``n`` sequences of
    ``s + 1`` tokens (inputs ``x_1..x_s``, target ``x_{s+1}``)."""
    return batch_loss(model, prepare_batch(sequences, model.vocab_size, model.W0.dtype))
