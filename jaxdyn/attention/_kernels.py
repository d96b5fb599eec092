"""Mean-field attention variants as equinox Modules (transformer_pde.md, "The model").

Every variant maps a measure of tokens ``mu = (1/n) sum_i delta_{y_i}`` to the velocity field
``Gamma_mu(x)`` of the Transformer PDE ``d_t mu + div(mu Gamma_mu) = 0``. Scaling conventions
(the science page's, matching the paper's code):

- softmax:  ``Gamma(x) = V sum_i softmax_i(y_i^T A x) y_i``, ``A = K^T Q / sqrt(d)``;
- L2:       weights ``exp(-|Q x / sqrt(d) - K y|^2)`` (1/sqrt(d) on the query only);
- Sinkhorn: ``Gamma(x) = V int y dpi(y | x)``, pi the entropic (eps = 1) self-coupling of mu
  with kernel ``exp(y^T A x)``, ``A = K^T Q`` (no sqrt(d));
- sigmoid:  ``Gamma(x) = V (1/n) sum_i sigmoid(y_i^T A x + b) y_i`` (rows not normalised);
- linear:   ``Gamma(x) = V (1/n) sum_i (y_i^T A x) y_i``;
- multi-head: ``sum_h C_h softmax-average_h``, ``A_h = K_h^T Q_h / sqrt(k)``, ``C_h = W_h^T V_h``;
- masked:   a base variant whose average runs only over tokens at positions ``s' <= s``.

``Q``, ``K``, ``V`` (and ``W``) are arrays or callables ``t -> array`` (time-dependent weights,
e.g. :class:`PiecewiseConstant`). All weight computations go through the functional kernels of
``jaxdyn.attention._weights``; with ``chunk_size`` set, through the online log-sum-exp of
``jaxdyn.attention._chunked`` (memory linear in the number of tokens).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._chunked import (
    chunked_sinkhorn_potential,
    online_softmax_average,
    online_weighted_sum,
)
from ._weights import (
    causal_mask,
    l2_scores,
    linear_weights,
    sigmoid_weights,
    sinkhorn_log_coupling,
    softmax_weights,
)

Weight = Float[Array, "..."] | Callable[[Float[ArrayLike, ""]], Float[Array, "..."]]


def _at(weight, t):
    """Value of a weight at time ``t`` (weights are arrays or callables of ``t``)."""
    return weight(t) if callable(weight) else weight


def _shape(weight) -> tuple[int, ...]:
    if callable(weight):
        return tuple(jax.eval_shape(weight, jnp.zeros(())).shape)
    return tuple(jnp.shape(weight))


def _as_weight(weight):
    return weight if callable(weight) else jnp.asarray(weight)


class PiecewiseConstant(eqx.Module):
    """A weight schedule ``t -> values[i]`` for ``breaks[i-1] <= t < breaks[i]``.

    ``values`` has one more entry than ``breaks`` along its leading axis: ``values[0]`` holds
    before ``breaks[0]``, ``values[-1]`` after the last break (a discrete stack of layers
    with depth as time, transformer_pde.md "The model").
    """

    breaks: Float[Array, " b"]
    values: Float[Array, "b+1 ..."]

    def __init__(self, breaks: Float[ArrayLike, " b"], values: Float[ArrayLike, "b+1 ..."]):
        self.breaks = jnp.asarray(breaks)
        self.values = jnp.asarray(values)

    def __check_init__(self):
        if self.breaks.ndim != 1:
            raise ValueError(f"breaks must be one-dimensional, got shape {self.breaks.shape}")
        if self.values.shape[0] != self.breaks.shape[0] + 1:
            raise ValueError(
                f"values needs len(breaks) + 1 = {self.breaks.shape[0] + 1} entries along "
                f"its leading axis, got {self.values.shape[0]}"
            )

    def __call__(self, t: Float[ArrayLike, ""]) -> Float[Array, "..."]:
        return self.values[jnp.searchsorted(self.breaks, t, side="right")]


def _check_qkv(name: str, Q, K, V, *, square_v: bool = True) -> None:
    q, k, v = _shape(Q), _shape(K), _shape(V)
    if len(q) != 2:
        raise ValueError(f"{name}: Q must be a (k, d) matrix, got shape {q}")
    if q != k:
        raise ValueError(f"{name}: Q and K must have the same shape, got {q} and {k}")
    d = q[1]
    if square_v and v != (d, d):
        raise ValueError(f"{name}: V must be ({d}, {d}) to match Q of shape {q}, got {v}")


class AbstractAttention(eqx.Module):
    """Maps a measure of tokens to velocities ``Gamma_mu(x)`` at query points ``x``."""

    gaussian_closed: ClassVar[bool] = False

    @abc.abstractmethod
    def velocity(
        self,
        x: Float[Array, "m d"],
        tokens: Float[Array, "n d"],
        *,
        t: Float[ArrayLike, ""] = 0.0,
        chunk_size: int | None = None,
    ) -> Float[Array, "m d"]:
        """Velocity ``Gamma_mu(x)`` at each query row of ``x``, ``mu`` = empirical measure of
        ``tokens``. With ``chunk_size``, keys and queries are processed in chunks (memory
        linear in ``n``)."""

    def gaussian_rhs(
        self, mean: Float[Array, " d"], cov: Float[Array, "d d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> tuple[Float[Array, " d"], Float[Array, "d d"]]:
        """``(d alpha/dt, d Sigma/dt)`` for ``mu = N(alpha, Sigma)`` (Gaussian-closed variants)."""
        raise NotImplementedError(
            f"{type(self).__name__} is not Gaussian-closed (transformer_pde.md, Gaussian "
            "closure): simulate particles instead"
        )

    def affine_velocity(
        self, mean: Float[Array, " d"], cov: Float[Array, "d d"], *, t: Float[ArrayLike, ""] = 0.0
    ) -> tuple[Float[Array, "d d"], Float[Array, " d"]]:
        """``(B, c)`` with ``Gamma_mu(x) = B x + c`` for ``mu = N(mean, cov)`` (closed variants)."""
        raise NotImplementedError(f"{type(self).__name__} is not Gaussian-closed")

    @property
    def dim(self) -> int:
        """Token dimension ``d``."""
        return _shape(self.Q)[1]  # type: ignore[attr-defined]


def _rhs_from_affine(B, c, mean, cov):
    """``d alpha = B alpha + c``, ``d Sigma = B Sigma + Sigma B^T`` (Gaussian closure)."""
    BS = B @ cov
    return B @ mean + c, BS + BS.T


class _AbstractSingleHead(AbstractAttention):
    """A variant with one ``Q, K, V`` whose weights are a function of pairwise scores."""

    Q: eqx.AbstractVar[Weight]
    K: eqx.AbstractVar[Weight]
    V: eqx.AbstractVar[Weight]

    @abc.abstractmethod
    def _score_fn(self, t) -> Callable[[Array, Array], Array]:
        """``(queries (m, d), keys (c, d)) -> scores (m, c)``."""

    # "softmax": rows normalised; "sum": weights / n, unnormalised.
    _reduction: ClassVar[str] = "softmax"

    def _weights_from_scores(self, scores, mask):
        return softmax_weights(scores, mask=mask)

    def _masked_average(self, x, tokens, qpos, kpos, t, chunk_size):
        """``sum_k w(x, y_k) y_k`` restricted to keys with ``kpos <= qpos`` (if positions)."""
        score_fn = self._score_fn(t)
        n = tokens.shape[0]
        masked = qpos is not None
        if chunk_size is None:
            scores = score_fn(x, tokens)
            mask = causal_mask(qpos, kpos) if masked else None
            w = self._weights_from_scores(scores, mask)
            if self._reduction == "sum":
                w = w / n
            return w @ tokens
        queries = (x, qpos) if masked else (x, jnp.zeros(x.shape[0], x.dtype))
        keys = (tokens, kpos) if masked else (tokens, jnp.zeros(n, tokens.dtype))

        def block_mask(q, k):
            return causal_mask(q[1], k[1]) if masked else None

        if self._reduction == "softmax":

            def block_scores(q, k):
                s = score_fn(q[0], k[0])
                return s if not masked else jnp.where(block_mask(q, k), s, -jnp.inf)

            return online_softmax_average(
                block_scores, queries, keys, tokens, chunk_size=chunk_size
            )

        def block_weights(q, k):
            return self._weights_from_scores(score_fn(q[0], k[0]), block_mask(q, k)) / n

        return online_weighted_sum(block_weights, queries, keys, tokens, chunk_size=chunk_size)

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        avg = self._masked_average(x, tokens, None, None, t, chunk_size)
        return avg @ _at(self.V, t).T

    def weights(
        self, x: Float[Array, "m d"], tokens: Float[Array, "n d"], *, t=0.0
    ) -> Float[Array, "m n"]:
        """Dense attention of each query on each token (the velocity is ``V (W @ tokens)``)."""
        w = self._weights_from_scores(self._score_fn(t)(x, tokens), None)
        return w / tokens.shape[0] if self._reduction == "sum" else w


class Softmax(_AbstractSingleHead):
    """Softmax self-attention, ``A = K^T Q / sqrt(d)`` (transformer_pde.md, Table 1).

    Gaussian closure: ``Gamma(x) = V (alpha + Sigma A x)``, so
    ``d alpha/dt = V (I + Sigma A) alpha`` and ``d Sigma/dt = V Sigma A Sigma + transpose``.
    """

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    gaussian_closed: ClassVar[bool] = True

    def __check_init__(self):
        _check_qkv("Softmax", self.Q, self.K, self.V)

    def A(self, t=0.0) -> Float[Array, "d d"]:
        """Interaction matrix ``A = K^T Q / sqrt(d)``: scores are ``y^T A x``."""
        Q, K = _at(self.Q, t), _at(self.K, t)
        return K.T @ Q / jnp.sqrt(Q.shape[1])

    def _score_fn(self, t):
        Q, K = _at(self.Q, t), _at(self.K, t)
        scale = 1.0 / jnp.sqrt(Q.shape[1])
        return lambda x, y: scale * (x @ Q.T) @ (y @ K.T).T

    def affine_velocity(self, mean, cov, *, t=0.0):
        V = _at(self.V, t)
        return V @ cov @ self.A(t), V @ mean

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        return _rhs_from_affine(*self.affine_velocity(mean, cov, t=t), mean, cov)


class L2(_AbstractSingleHead):
    """L2 self-attention: weights ``exp(-|Q x / sqrt(d) - K y|^2)`` (transformer_pde.md, Table 1).

    Gaussian closure with ``A = K^T Q / sqrt(d)``, ``M = K^T K``:
    ``Gamma(x) = V (I + 2 Sigma M)^{-1} (alpha + 2 Sigma A x)``, hence
    ``d Sigma/dt = 2 V Sigma (I + 2 M Sigma)^{-1} A Sigma + transpose`` and
    ``d alpha/dt = V (I + 2 Sigma M)^{-1} (I + 2 Sigma A) alpha``.
    """

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    gaussian_closed: ClassVar[bool] = True

    def __check_init__(self):
        _check_qkv("L2", self.Q, self.K, self.V)

    def A(self, t=0.0) -> Float[Array, "d d"]:
        Q, K = _at(self.Q, t), _at(self.K, t)
        return K.T @ Q / jnp.sqrt(Q.shape[1])

    def _score_fn(self, t):
        Q, K = _at(self.Q, t), _at(self.K, t)
        scale = 1.0 / jnp.sqrt(Q.shape[1])
        return lambda x, y: l2_scores(scale * x @ Q.T, y @ K.T)

    def affine_velocity(self, mean, cov, *, t=0.0):
        K, V = _at(self.K, t), _at(self.V, t)
        d = cov.shape[0]
        # (I + 2 Sigma M)^{-1} applied by a solve, never an explicit inverse.
        P = jnp.eye(d, dtype=cov.dtype) + 2.0 * cov @ (K.T @ K)
        B = 2.0 * V @ jnp.linalg.solve(P, cov @ self.A(t))
        c = V @ jnp.linalg.solve(P, mean)
        return B, c

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        return _rhs_from_affine(*self.affine_velocity(mean, cov, t=t), mean, cov)


def _sym_sqrt(S):
    """Square root of a symmetric PSD matrix by eigh (negative round-off eigenvalues clipped)."""
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    return (U * jnp.sqrt(jnp.clip(w, 0.0))) @ U.T


class Sinkhorn(_AbstractSingleHead):
    """Sinkhorn attention (eps = 1, ``A = K^T Q``, no sqrt(d)): ``Gamma(x) = V int y dpi(y|x)``.

    ``pi`` is the entropic self-coupling of ``mu`` with kernel ``exp(y^T A x)``, both marginals
    ``mu``, computed by log-domain Sinkhorn iterations (``iterations`` of them). Gaussian closure
    (transformer_pde.md): with ``S = Sigma^{1/2}``, ``At = S A S``,
    ``phi(At) = 2 At (I + (I + 4 At^T At)^{1/2})^{-1}``:
    ``d Sigma/dt = V S phi(At) S + transpose``, ``d alpha/dt = V alpha``.
    """

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    iterations: int = eqx.field(static=True, default=100)
    gaussian_closed: ClassVar[bool] = True

    def __check_init__(self):
        _check_qkv("Sinkhorn", self.Q, self.K, self.V)
        if self.iterations < 1:
            raise ValueError(f"Sinkhorn: iterations must be >= 1, got {self.iterations}")

    def A(self, t=0.0) -> Float[Array, "d d"]:
        Q, K = _at(self.Q, t), _at(self.K, t)
        return K.T @ Q

    def _score_fn(self, t):
        Q, K = _at(self.Q, t), _at(self.K, t)
        return lambda x, y: (x @ Q.T) @ (y @ K.T).T

    def column_potential(self, tokens, *, t=0.0, chunk_size=None) -> Float[Array, " n"]:
        """Potential ``g`` (up to a constant) with ``pi(y_k | x) = softmax_k(y_k^T A x + g_k)``."""
        score_fn = self._score_fn(t)
        n = tokens.shape[0]
        if chunk_size is None:
            s = score_fn(tokens, tokens)
            log_m = jnp.full(n, -jnp.log(n), s.dtype)
            log_pi = sinkhorn_log_coupling(
                s, log_row_weights=log_m, log_col_weights=log_m, iterations=self.iterations
            )
            # log_pi = s + f_i + g_k: row 0 gives g up to the constant f_0, which a softmax ignores.
            return log_pi[0] - s[0]
        return chunked_sinkhorn_potential(
            score_fn, tokens, iterations=self.iterations, chunk_size=chunk_size
        )

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        g = self.column_potential(tokens, t=t, chunk_size=chunk_size)
        score_fn = self._score_fn(t)
        if chunk_size is None:
            avg = softmax_weights(score_fn(x, tokens), log_weights=g) @ tokens
        else:
            avg = online_softmax_average(
                score_fn, x, tokens, tokens, log_weights=g, chunk_size=chunk_size
            )
        return avg @ _at(self.V, t).T

    def weights(self, x, tokens, *, t=0.0):
        g = self.column_potential(tokens, t=t)
        return softmax_weights(self._score_fn(t)(x, tokens), log_weights=g)

    def _phi_terms(self, cov, t):
        """``(S, phi(At))`` of the Gaussian closure, ``S = Sigma^{1/2}`` by eigh."""
        S = _sym_sqrt(cov)
        At = S @ self.A(t) @ S
        eye = jnp.eye(cov.shape[0], dtype=cov.dtype)
        # phi = 2 At (I + (I + 4 At^T At)^{1/2})^{-1}: the matrix inverted has eigenvalues >= 2.
        phi = 2.0 * At @ jnp.linalg.inv(eye + _sym_sqrt(eye + 4.0 * At.T @ At))
        return S, phi

    def affine_velocity(self, mean, cov, *, t=0.0):
        V = _at(self.V, t)
        S, phi = self._phi_terms(cov, t)
        # B = V S phi S^{-1} (pseudo-inverse on a singular Sigma), c = V alpha - B alpha.
        w, U = jnp.linalg.eigh(0.5 * (cov + cov.T))
        safe = w > 1e-12 * jnp.max(jnp.abs(w))
        S_pinv = (U * jnp.where(safe, 1.0 / jnp.sqrt(jnp.where(safe, w, 1.0)), 0.0)) @ U.T
        B = V @ S @ phi @ S_pinv
        return B, V @ mean - B @ mean

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        V = _at(self.V, t)
        S, phi = self._phi_terms(cov, t)
        BS = V @ S @ phi @ S
        return V @ mean, BS + BS.T


class Sigmoid(_AbstractSingleHead):
    """Sigmoid attention: ``Gamma(x) = V (1/n) sum_i sigmoid(y_i^T A x + bias) y_i``, ``A = K^T Q /
    sqrt(d)``; no division by the row sum. Not Gaussian-closed: particles only."""

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    bias: Float[ArrayLike, ""] = 0.0
    _reduction: ClassVar[str] = "sum"

    def __check_init__(self):
        _check_qkv("Sigmoid", self.Q, self.K, self.V)

    def A(self, t=0.0):
        Q, K = _at(self.Q, t), _at(self.K, t)
        return K.T @ Q / jnp.sqrt(Q.shape[1])

    def _score_fn(self, t):
        Q, K = _at(self.Q, t), _at(self.K, t)
        scale = 1.0 / jnp.sqrt(Q.shape[1])
        return lambda x, y: scale * (x @ Q.T) @ (y @ K.T).T

    def _weights_from_scores(self, scores, mask):
        return sigmoid_weights(scores, bias=self.bias, mask=mask)


class Linear(_AbstractSingleHead):
    """Linear attention: ``Gamma(x) = V (1/n) sum_i (y_i^T A x) y_i``, ``A = K^T Q / sqrt(d)``.

    Gaussian closure: ``Gamma(x) = V (Sigma + alpha alpha^T) A x``, so
    ``d alpha/dt = V (Sigma + alpha alpha^T) A alpha``,
    ``d Sigma/dt = V (Sigma + alpha alpha^T) A Sigma + transpose``.
    """

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    gaussian_closed: ClassVar[bool] = True
    _reduction: ClassVar[str] = "sum"

    def __check_init__(self):
        _check_qkv("Linear", self.Q, self.K, self.V)

    def A(self, t=0.0):
        Q, K = _at(self.Q, t), _at(self.K, t)
        return K.T @ Q / jnp.sqrt(Q.shape[1])

    def _score_fn(self, t):
        Q, K = _at(self.Q, t), _at(self.K, t)
        scale = 1.0 / jnp.sqrt(Q.shape[1])
        return lambda x, y: scale * (x @ Q.T) @ (y @ K.T).T

    def _weights_from_scores(self, scores, mask):
        return linear_weights(scores, mask=mask)

    def affine_velocity(self, mean, cov, *, t=0.0):
        V = _at(self.V, t)
        second_moment = cov + jnp.outer(mean, mean)
        return V @ second_moment @ self.A(t), jnp.zeros_like(mean)

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        return _rhs_from_affine(*self.affine_velocity(mean, cov, t=t), mean, cov)


class MultiHead(AbstractAttention):
    """Multi-head softmax attention: ``Gamma(x) = sum_h C_h sum_i softmax_i(y_i^T A_h x) y_i``.

    ``H = heads``; ``Q_h, K_h`` are the row blocks ``h k:(h+1) k`` of ``Q, K`` (``k = rows/H``),
    ``A_h = K_h^T Q_h / sqrt(k)``; ``C_h = W_h^T V_h`` with ``V_h, W_h`` row blocks of ``V`` and
    of the output projection ``W`` (default ``I``). Gaussian closure (transformer_pde.md):
    ``d Sigma/dt = sum_h C_h Sigma A_h Sigma + transpose``, ``d alpha/dt = sum_h C_h (I +
    Sigma A_h) alpha``.
    """

    Q: Weight = eqx.field(converter=_as_weight)
    K: Weight = eqx.field(converter=_as_weight)
    V: Weight = eqx.field(converter=_as_weight)
    heads: int = eqx.field(static=True, default=1)
    W: Weight | None = eqx.field(
        default=None, converter=lambda w: None if w is None else _as_weight(w)
    )
    gaussian_closed: ClassVar[bool] = True

    def __check_init__(self):
        q, k, v = _shape(self.Q), _shape(self.K), _shape(self.V)
        if len(q) != 2 or q != k:
            raise ValueError(f"MultiHead: Q and K must be equal (rows, d) shapes, got {q}, {k}")
        d = q[1]
        if self.heads < 1 or q[0] % self.heads:
            raise ValueError(f"MultiHead: heads={self.heads} must divide the {q[0]} rows of Q")
        if len(v) != 2 or v[1] != d or v[0] % self.heads:
            raise ValueError(f"MultiHead: V must be (H * k_v, {d}) with heads | rows, got {v}")
        w = _shape(self.W) if self.W is not None else (d, d)
        if self.W is None and v[0] != d:
            raise ValueError(f"MultiHead: with W=None (identity), V must be ({d}, {d}), got {v}")
        if w != v:
            raise ValueError(f"MultiHead: W must have V's shape {v}, got {w}")

    def head_matrices(self, t=0.0) -> tuple[Float[Array, "H d d"], Float[Array, "H d d"]]:
        """``(A_h, C_h)`` stacked over heads."""
        Q, K, V = _at(self.Q, t), _at(self.K, t), _at(self.V, t)
        d = Q.shape[1]
        W = jnp.eye(d, dtype=V.dtype) if self.W is None else _at(self.W, t)
        H = self.heads
        kq = Q.shape[0] // H
        Qh, Kh = Q.reshape(H, kq, d), K.reshape(H, kq, d)
        Vh, Wh = V.reshape(H, -1, d), W.reshape(H, -1, d)
        A = jnp.einsum("hki,hkj->hij", Kh, Qh) / jnp.sqrt(kq)
        C = jnp.einsum("hki,hkj->hij", Wh, Vh)
        return A, C

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None):
        A, C = self.head_matrices(t)

        def one_head(A_h, C_h):
            def score_fn(q, y):
                return q @ A_h.T @ y.T

            if chunk_size is None:
                avg = softmax_weights(score_fn(x, tokens)) @ tokens
            else:
                avg = online_softmax_average(score_fn, x, tokens, tokens, chunk_size=chunk_size)
            return avg @ C_h.T

        return jnp.sum(jax.vmap(one_head)(A, C), axis=0)

    def weights(self, x, tokens, *, t=0.0) -> Float[Array, "H m n"]:
        A, _ = self.head_matrices(t)
        return jax.vmap(lambda A_h: softmax_weights(x @ A_h.T @ tokens.T))(A)

    def affine_velocity(self, mean, cov, *, t=0.0):
        A, C = self.head_matrices(t)
        B = jnp.einsum("hij,jk,hkl->il", C, cov, A)
        return B, jnp.sum(C, axis=0) @ mean

    def gaussian_rhs(self, mean, cov, *, t=0.0):
        return _rhs_from_affine(*self.affine_velocity(mean, cov, t=t), mean, cov)

    @property
    def dim(self) -> int:
        return _shape(self.Q)[1]


class Masked(AbstractAttention):
    """Causal attention: token ``i`` at fixed position ``s_i`` in [0, 1] averages only over tokens
    with ``s_j <= s_i`` (transformer_pde.md, "masked"). Positions never move.

    ``base`` is a Softmax, L2, Sigmoid or Linear module (normalisation as in the base: softmax
    and L2 renormalise over visible tokens, sigmoid and linear keep the 1/n mass). With
    ``sink=True`` token 0 is an attention sink: its position is set to 0, so every token sees
    it (the atom at position 0 of the paper's well-posedness result). Queries are the tokens
    themselves (``x`` must have ``n`` rows) unless ``query_positions`` is given.
    """

    base: Softmax | L2 | Sigmoid | Linear
    positions: Float[Array, " n"] = eqx.field(converter=jnp.asarray)
    sink: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.base, (Softmax, L2, Sigmoid, Linear)):
            raise ValueError(
                "Masked: base must be Softmax, L2, Sigmoid or Linear, "
                f"got {type(self.base).__name__}"
            )
        if self.positions.ndim != 1:
            raise ValueError(f"Masked: positions must be (n,), got shape {self.positions.shape}")
        try:
            p = np.asarray(self.positions)
        except jax.errors.TracerArrayConversionError:
            return  # traced positions (inside a sweep): checked by the caller's config
        if np.any((p < 0) | (p > 1)):
            raise ValueError("Masked: positions must lie in [0, 1]")

    @property
    def key_positions(self) -> Float[Array, " n"]:
        """Positions used for masking (token 0 moved to 0 when ``sink``)."""
        return self.positions.at[0].set(0.0) if self.sink else self.positions

    def velocity(self, x, tokens, *, t=0.0, chunk_size=None, query_positions=None):
        n = tokens.shape[0]
        if n != self.positions.shape[0]:
            raise ValueError(f"Masked: {n} tokens but {self.positions.shape[0]} positions")
        kpos = self.key_positions
        if query_positions is None:
            if x.shape[0] != n:
                raise ValueError(
                    f"Masked: queries default to the tokens' positions, so x needs {n} rows, "
                    f"got {x.shape[0]} (pass query_positions)"
                )
            query_positions = kpos
        avg = self.base._masked_average(
            x, tokens, jnp.asarray(query_positions), kpos, t, chunk_size
        )
        return avg @ _at(self.base.V, t).T

    @property
    def dim(self) -> int:
        return self.base.dim
