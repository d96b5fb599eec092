"""The velocity-field hierarchy of the mean-field Transformer PDE (transformer_pde.md, "The model").

A velocity field maps the empirical measure ``mu = (1/n) sum_k delta_{y_k}`` of the tokens to
the velocity ``Gamma_mu(x)`` of a token at ``x``; the PDE is ``d_t mu + div(mu Gamma_mu) = 0``
and the n-particle system is ``dx_i/dt = Gamma_mu(x_i)``. The abstract classes here say what a
field can do, as types:

- :class:`AbstractVelocityField`: ``velocity(x, tokens, *, t)``, the only thing a user's field
  must implement to run through the particle simulators, the wrappers and the sweep engine;
- :class:`AbstractGaussianClosed`: fields whose velocity on a Gaussian ``N(alpha, Sigma)`` is
  affine, ``Gamma(x) = B x + c``; they implement ``affine_velocity`` and inherit the Gaussian
  ODE ``d alpha/dt = B alpha + c``, ``d Sigma/dt = B Sigma + Sigma B^T`` written once here;
- :class:`AbstractCausalField`: fields that evaluate causal (masked) attention directly;
  :class:`jaxdyn.meanfield.fields.Masked` uses it when present and a generic evaluation otherwise;
- :class:`AbstractBilinearHead`: one attention head with weights ``Q, K, V``
  (abstract variables) and scores ``s(x, y)``; :class:`AbstractSoftmaxHead` (weights
  ``softmax_k s(x, y_k)``) and :class:`AbstractKernelHead` (weights ``kernel(s(x, y_k)) / n``)
  implement its averaging, dense or chunked (memory linear in ``n``).

``Q``, ``K``, ``V`` are arrays or callables ``t -> array`` (time-dependent weights); a stack of
layers with different weights is a :class:`jaxdyn.meanfield.fields.TimeSwitch` of fields.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxdyn.attention import (
    causal_mask,
    online_softmax_average,
    online_weighted_sum,
    softmax_weights,
)
from jaxdyn.attention._chunked import dense_softmax_average, dense_weighted_sum

Weight = Float[Array, "..."] | Callable[..., Float[Array, "..."]]
ScoreFn = Callable[[Float[Array, "m d"], Float[Array, "n d"]], Float[Array, "m n"]]


def weight_at(weight: Weight, t: Float[ArrayLike, ""]) -> Float[Array, "..."]:
    """Value of a weight at time ``t`` (weights are arrays or callables of ``t``)."""
    return weight(t) if callable(weight) else weight


def weight_shape(weight: Weight) -> tuple[int, ...]:
    """Shape of a weight (of its value at ``t = 0`` for a callable, without evaluating it)."""
    if callable(weight):
        return tuple(jax.eval_shape(weight, jnp.zeros(())).shape)
    return tuple(jnp.shape(weight))


def as_weight(weight) -> Weight:
    """Converter of ``Q``, ``K``, ``V`` fields: callables are kept, everything else is an array."""
    return weight if callable(weight) else jnp.asarray(weight)


class AbstractVelocityField(eqx.Module):
    """``Gamma_mu(x)``: the velocity of a token at ``x`` under the empirical measure of ``tokens``.

    Subclass it and implement :meth:`velocity` to simulate your own attention: the particle
    simulators (:func:`jaxdyn.meanfield.simulate_particles`,
    :func:`jaxdyn.meanfield.simulate_particles` at fixed steps), the wrappers (``Masked``,
    ``TimeSwitch``, ``SphereProjected``) and ``jaxdyn.sweep.run_sweep`` need nothing else.
    """

    @abc.abstractmethod
    def velocity(
        self,
        x: Float[Array, "m d"],
        tokens: Float[Array, "n d"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
    ) -> Float[Array, "m d"]:
        """Velocity ``Gamma_mu(x)`` at each query row of ``x`` at time (depth) ``t``, ``mu`` the
        empirical measure ``(1/n) sum_k delta_{tokens_k}``."""


class AbstractGaussianClosed(AbstractVelocityField):
    """A field whose velocity on ``mu = N(alpha, Sigma)`` is affine: ``Gamma(x) = B x + c``.

    Then ``mu`` stays Gaussian (transformer_pde.md, "Gaussian closure") and
    ``d alpha/dt = B alpha + c``, ``d Sigma/dt = B Sigma + Sigma B^T``: subclasses implement
    :meth:`affine_velocity`; :meth:`gaussian_rhs` is written once, here.
    """

    @abc.abstractmethod
    def affine_velocity(
        self,
        mean: Float[Array, " d"],
        cov: Float[Array, "d d"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
    ) -> tuple[Float[Array, "d d"], Float[Array, " d"]]:
        """``(B, c)`` with ``Gamma_mu(x) = B x + c`` for ``mu = N(mean, cov)``."""

    def gaussian_rhs(
        self,
        mean: Float[ArrayLike, " d"],
        cov: Float[ArrayLike, "d d"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
    ) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
        """``(d alpha/dt, d Sigma/dt) = (B alpha + c, B Sigma + Sigma B^T)`` at ``N(mean, cov)``."""
        mean, cov = jnp.asarray(mean), jnp.asarray(cov)
        B, c = self.affine_velocity(mean, cov, t=t)
        B_cov = B @ cov
        return B @ mean + c, B_cov + B_cov.T


class AbstractCausalField(AbstractVelocityField):
    """A field that evaluates causal attention directly: each query at position ``s`` sees the
    conditional measure of the tokens at positions ``s' <= s`` (transformer_pde.md, masked).
    """

    @abc.abstractmethod
    def causal_velocity(
        self,
        x: Float[Array, "m d"],
        tokens: Float[Array, "n d"],
        query_positions: Float[Array, " m"],
        key_positions: Float[Array, " n"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
    ) -> Float[Array, "m d"]:
        """``Gamma_{mu_s}(x)`` with ``mu_s`` the empirical measure of the tokens whose position
        is at most the query's; zero for a query that sees no token."""


class AbstractBilinearHead(AbstractVelocityField):
    """One attention head: ``Gamma(x) = V sum_k w_k(x) y_k`` with weights a function of the
    scores ``s(x, y_k)`` built from ``Q, K`` (shape ``(k, d)``) and ``V`` (``(d, d)``).

    ``chunk_size`` (``None``: dense) evaluates the average over keys in chunks of that many
    queries and keys (online log-sum-exp), so memory is linear in the number of tokens.
    """

    Q: eqx.AbstractVar[Weight]
    K: eqx.AbstractVar[Weight]
    V: eqx.AbstractVar[Weight]
    chunk_size: eqx.AbstractVar[int | None]

    def __check_init__(self):
        name = type(self).__name__
        q, k, v = weight_shape(self.Q), weight_shape(self.K), weight_shape(self.V)
        if len(q) != 2:
            raise ValueError(f"{name}: Q must be a (k, d) matrix, got shape {q}")
        if q != k:
            raise ValueError(f"{name}: Q and K must have the same shape, got {q} and {k}")
        if v != (q[1], q[1]):
            raise ValueError(f"{name}: V must be ({q[1]}, {q[1]}) to match Q of shape {q}, got {v}")
        if self.chunk_size is not None and self.chunk_size < 1:
            raise ValueError(f"{name}: chunk_size must be >= 1 or None, got {self.chunk_size}")

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return weight_shape(self.Q)[1]

    @abc.abstractmethod
    def A(self, t: Float[ArrayLike, ""] = 0.0) -> Float[Array, "d d"]:
        """Interaction matrix ``A``: the bilinear part of the score is ``y^T A x``."""

    @abc.abstractmethod
    def scores(
        self, x: Float[Array, "m d"], tokens: Float[Array, "n d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> Float[Array, "m n"]:
        """Score ``s(x_i, y_k)`` of every query on every token."""

    @abc.abstractmethod
    def weights(
        self, x: Float[Array, "m d"], tokens: Float[Array, "n d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> Float[Array, "m n"]:
        """Dense attention of each query on each token: the velocity is ``V (W @ tokens)``."""


def scaled_interaction(Q: Weight, K: Weight, t: Float[ArrayLike, ""]) -> Float[Array, "d d"]:
    """``A = K^T Q / sqrt(d)`` at time ``t`` (softmax, L2, sigmoid and linear heads)."""
    Q_t, K_t = weight_at(Q, t), weight_at(K, t)
    return K_t.T @ Q_t / jnp.sqrt(Q_t.shape[1])


def softmax_average(
    score_fn: ScoreFn,
    x: Float[Array, "m d"],
    tokens: Float[Array, "n d"],
    *,
    positions: tuple[Float[Array, " m"], Float[Array, " n"]] | None = None,
    log_weights: Float[Array, " n"] | None = None,
    chunk_size: int | None = None,
) -> Float[Array, "m d"]:
    """``sum_k softmax_k(s(x, y_k) + log m_k) y_k``, over the keys at positions up to the
    query's when ``positions = (query_positions, key_positions)`` is given (masked keys get
    weight zero; a query that sees no key gets zero). Dense, or in chunks of ``chunk_size``
    (memory linear in ``n``).

    Dense is ``jaxdyn.attention._chunked.dense_softmax_average`` (one matrix, or on CPU blocks
    that stay in cache beyond 2^20 scores), chunked is ``online_softmax_average``; the mask is
    part of the scores (``-inf`` where a key is not visible), so both evaluate it blockwise.
    """
    if positions is None:
        scores, queries, keys = score_fn, x, tokens
    else:

        def scores(q, k):
            return jnp.where(causal_mask(q[1], k[1]), score_fn(q[0], k[0]), -jnp.inf)

        queries, keys = (x, positions[0]), (tokens, positions[1])
    if chunk_size is None:
        return dense_softmax_average(scores, queries, keys, tokens, log_weights=log_weights)
    return online_softmax_average(
        scores, queries, keys, tokens, log_weights=log_weights, chunk_size=chunk_size
    )


class AbstractScaledHead(AbstractBilinearHead):
    """A head whose interaction matrix is ``A = K^T Q / sqrt(d)`` (softmax, L2, sigmoid,
    linear and exponential attention); subclasses give the scores and the weights."""

    def A(self, t=0.0):
        return scaled_interaction(self.Q, self.K, t)


class AbstractDotProductHead(AbstractScaledHead):
    """A head scored by the bilinear form alone: ``s(x, y) = y^T A x``,
    ``A = K^T Q / sqrt(d)``; subclasses give the weights (softmax, or a kernel)."""

    def scores(self, x, tokens, *, t=0.0):
        return x @ self.A(t).T @ tokens.T


class AbstractSoftmaxHead(AbstractBilinearHead, AbstractCausalField):
    """A head with softmax weights ``w_k(x) = softmax_k s(x, y_k)``: subclasses give the scores.

    Causal: the softmax runs over the visible tokens only, i.e. the field of the conditional
    measure of the tokens at positions ``s' <= s``.
    """

    def velocity(self, x, tokens, *, t=0.0):
        avg = softmax_average(
            lambda q, k: self.scores(q, k, t=t), x, tokens, chunk_size=self.chunk_size
        )
        return avg @ weight_at(self.V, t).T

    def causal_velocity(self, x, tokens, query_positions, key_positions, *, t=0.0):
        avg = softmax_average(
            lambda q, k: self.scores(q, k, t=t),
            x,
            tokens,
            positions=(query_positions, key_positions),
            chunk_size=self.chunk_size,
        )
        return avg @ weight_at(self.V, t).T

    def weights(self, x, tokens, *, t=0.0):
        return softmax_weights(self.scores(x, tokens, t=t))


class AbstractKernelHead(AbstractBilinearHead, AbstractCausalField):
    """A head with unnormalised weights ``w_k(x) = kernel(s(x, y_k)) / n``: no division by the
    row sum (sigmoid and linear attention); subclasses give the scores and the kernel.

    Causal: ``n`` becomes the number of visible tokens, i.e. the field of the conditional
    measure of the tokens at positions ``s' <= s``. Dense sums are
    ``jaxdyn.attention._chunked.dense_weighted_sum`` (blocks in cache on CPU beyond 2^20
    weights).
    """

    @abc.abstractmethod
    def kernel(self, scores: Float[Array, "m n"]) -> Float[Array, "m n"]:
        """Elementwise weight of a score (before the ``1/n``)."""

    def _average(self, x, tokens, positions, t):
        """``(1/c) sum_{visible k} kernel(s(x, y_k)) y_k``, ``c`` the number of visible keys."""
        n = tokens.shape[0]

        def block_weights(q, k):
            w = self.kernel(self.scores(q[0], k[0], t=t))
            return w if positions is None else jnp.where(causal_mask(q[1], k[1]), w, 0.0)

        if positions is None:
            qpos, kpos = jnp.zeros(x.shape[0], x.dtype), jnp.zeros(n, x.dtype)
            count = jnp.full(x.shape[0], n, x.dtype)
        else:
            qpos, kpos = positions
            count = jnp.searchsorted(jnp.sort(kpos), qpos, side="right").astype(x.dtype)
        if self.chunk_size is None:
            total = dense_weighted_sum(block_weights, (x, qpos), (tokens, kpos), tokens)
        else:
            total = online_weighted_sum(
                block_weights, (x, qpos), (tokens, kpos), tokens, chunk_size=self.chunk_size
            )
        return total / jnp.maximum(count, 1.0)[:, None]

    def velocity(self, x, tokens, *, t=0.0):
        return self._average(x, tokens, None, t) @ weight_at(self.V, t).T

    def causal_velocity(self, x, tokens, query_positions, key_positions, *, t=0.0):
        avg = self._average(x, tokens, (query_positions, key_positions), t)
        return avg @ weight_at(self.V, t).T

    def weights(self, x, tokens, *, t=0.0):
        return self.kernel(self.scores(x, tokens, t=t)) / tokens.shape[0]
