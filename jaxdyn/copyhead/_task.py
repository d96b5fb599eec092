"""The copy task and its sufficient statistics (copy_head.md, "Task"; "What the reconstruction
gives").

P training sequences of L i.i.d. uniform one-hot tokens over a vocabulary of V; the target at
position l is the token at l - 1. Position 1 needs a convention [open]: ``cyclic=True`` (default)
targets x_L, which makes the problem translation invariant; ``cyclic=False`` drops position 1
from the loss (its target row is zero and its supervision weight is zero).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from .._custom_types import Key


def _check_lv(L: int, V: int) -> None:
    if int(L) < 2:
        raise ValueError(f"sequence length L must be >= 2, got {L}")
    if int(V) < 1:
        raise ValueError(f"vocabulary size V must be >= 1, got {V}")


def shift_matrix(L: int, *, cyclic: bool = True) -> Float[Array, "L L"]:
    """Copy pattern S_shift: ones at (l, l - 1) (and (1, L) when ``cyclic``)."""
    S = jnp.eye(L, k=-1)
    if cyclic:
        S = S.at[0, L - 1].set(1.0)
    return S


def uniform_matrix(L: int) -> Float[Array, "L L"]:
    """Uniform pooling U = 1 1^T / L."""
    return jnp.full((L, L), 1.0 / L)


def supervised_positions(L: int, *, cyclic: bool = True) -> Bool[Array, " L"]:
    """Which query positions carry a target: all when ``cyclic``, all but the first otherwise."""
    return jnp.arange(L) >= (0 if cyclic else 1)


def copy_targets(X: Float[ArrayLike, "P L V"], *, cyclic: bool = True) -> Float[Array, "P L V"]:
    """Targets Y^mu_l = x^mu_{l-1}; the first row is x_L (cyclic) or zero (non-cyclic)."""
    X = jnp.asarray(X)
    Y = jnp.roll(X, 1, axis=-2)
    if not cyclic:
        Y = Y.at[..., 0, :].set(0.0)
    return Y


def copy_task(
    key: Key, P: int, L: int, V: int, *, cyclic: bool = True, dtype=None
) -> tuple[Float[Array, "P L V"], Float[Array, "P L V"]]:
    """Sample the copy task: X (P, L, V) i.i.d. uniform one-hot tokens and targets Y = shift(X).

    copy_head.md, "Task": the target at position l is the token at l - 1.
    """
    _check_lv(L, V)
    if int(P) < 1:
        raise ValueError(f"number of sequences P must be >= 1, got {P}")
    tokens = jax.random.randint(key, (int(P), int(L)), 0, int(V))
    X = jax.nn.one_hot(tokens, int(V), dtype=dtype or jnp.result_type(float))
    return X, copy_targets(X, cyclic=cyclic)


def cast_floating(tree, dtype):
    """``tree`` (statistics, a posterior, a head) with every floating-point array leaf cast to
    ``dtype``: a sampler run on ``cast_floating(stats, jnp.float32)`` and
    ``cast_floating(posterior, jnp.float32)`` computes in single precision."""
    return jax.tree.map(
        lambda x: (
            x.astype(dtype)
            if isinstance(x, jax.Array | jnp.ndarray) and jnp.issubdtype(x.dtype, jnp.floating)
            else x
        ),
        tree,
    )


class CopyStatistics(eqx.Module):
    """Sufficient statistics of a (weighted) copy dataset; every action costs O(L^2 V^2) from them.

    copy_head.md, "What the reconstruction gives": with sequence weights w_mu (1 for a real
    sequence, 0 for padding, so that P can be a traced value),

        N[l, m, a, b]  = sum_mu w_mu X^mu_{la} X^mu_{mb}
        NY[m, l, a, b] = sum_mu w_mu X^mu_{ma} Y^mu_{lb}
        yy             = sum_mu w_mu ||Y^mu||_F^2,       P = sum_mu w_mu.

    Then M(A) = sum_mu X^T A^T A X = sum_{l m} (A^T A)_{lm} N[l, m] and
    B(A) = sum_mu X^T A^T Y = sum_{l m} A_{lm} NY[m, l].
    """

    N: Float[Array, "L L V V"]
    NY: Float[Array, "L L V V"]
    yy: Float[Array, ""]
    P: Float[Array, ""]

    def __check_init__(self):
        if self.N.ndim != 4 or self.N.shape != self.NY.shape:
            raise ValueError(
                "N and NY must both have shape (L, L, V, V), "
                f"got {self.N.shape} and {self.NY.shape}"
            )

    @property
    def L(self) -> int:
        return self.N.shape[0]

    @property
    def V(self) -> int:
        return self.N.shape[2]

    def moments(
        self, A: Float[ArrayLike, "L L"]
    ) -> tuple[Float[Array, "V V"], Float[Array, "V V"]]:
        """(M, B) = (sum_mu X^T A^T A X, sum_mu X^T A^T Y) for an attention matrix A."""
        A = jnp.asarray(A)
        L, V = self.L, self.V
        # Flattened to vector-matrix products: under vmap over many A they become single GEMMs.
        M = ((A.T @ A).reshape(L * L) @ self.N.reshape(L * L, V * V)).reshape(V, V)
        # NY's rows are (m, l): contract with A^T rather than transpose the statistics (a
        # copy of the O(L^2 V^2) array per call inside a chain's loop).
        B = (A.T.reshape(L * L) @ self.NY.reshape(L * L, V * V)).reshape(V, V)
        return M, B


def copy_statistics(
    X: Float[ArrayLike, "P L V"],
    Y: Float[ArrayLike, "P L V"],
    weights: Float[ArrayLike, " P"] | None = None,
) -> CopyStatistics:
    """Build :class:`CopyStatistics` from data (weights mask padded sequences)."""
    X = jnp.asarray(X)
    Y = jnp.asarray(Y)
    if X.ndim != 3 or X.shape != Y.shape:
        raise ValueError(f"X and Y must both have shape (P, L, V), got {X.shape} and {Y.shape}")
    w = jnp.ones(X.shape[0], X.dtype) if weights is None else jnp.asarray(weights, X.dtype)
    if w.shape != (X.shape[0],):
        raise ValueError(f"weights must have shape ({X.shape[0]},), got {w.shape}")
    N = jnp.einsum("p,pla,pmb->lmab", w, X, X)
    NY = jnp.einsum("p,pma,plb->mlab", w, X, Y)
    yy = jnp.einsum("p,plv,plv->", w, Y, Y)
    return CopyStatistics(N=N, NY=NY, yy=yy, P=jnp.sum(w))


def bootstrap_weights(key: Key, weights: Float[ArrayLike, " n"]) -> Float[Array, " n"]:
    """Weights of a multinomial bootstrap resample of a weighted dataset: sum(w) draws with
    replacement, sequence mu drawn with probability w_mu / sum(w), the last draw weighted by
    the fractional part of sum(w) (so P stays continuous and traced). Requires sum(w) <= n.
    ``copy_statistics(X, Y, bootstrap_weights(key, w))`` are the resample's statistics: the
    mean over resamples of an estimate minus the estimate estimates its finite-P bias."""
    w = jnp.asarray(weights)
    n = w.shape[0]
    total = jnp.sum(w)
    idx = jax.random.choice(key, n, (n,), p=w / total)
    draw = jnp.clip(total - jnp.arange(n), 0.0, 1.0).astype(w.dtype)
    return jnp.zeros(n, w.dtype).at[idx].add(draw)


def population_statistics(
    L: int, V: int, P: float | ArrayLike = 1.0, *, cyclic: bool = True
) -> CopyStatistics:
    """Expected :class:`CopyStatistics` of P sequences of i.i.d. uniform tokens.

    copy_head.md, "Population reduction": E[X_la X_mb] = delta_lm delta_ab / V
    + (1 - delta_lm) / V^2, and Y_l = X_{l-1} on supervised rows (zero on row 1 when not
    ``cyclic``). With P = 1, ``CopyHeadPosterior.loss(W, G, population_statistics(L, V))``
    is the population (test) loss per sequence; with P sequences the exact action at these
    statistics is the population action.
    """
    _check_lv(L, V)
    dtype = jnp.result_type(float)
    eye_L, eye_V = jnp.eye(L, dtype=dtype), jnp.eye(V, dtype=dtype)
    pair = lambda same: same[:, :, None, None] * eye_V / V + (1.0 - same)[:, :, None, None] / V**2
    rows = supervised_positions(L, cyclic=cyclic).astype(dtype)
    # NY[m, l] = E[x_m y_l^T] = E[x_m x_{l-1}^T] on supervised rows l.
    same = jnp.roll(eye_L, 1, axis=0).T  # same[m, l] = 1 iff m = l - 1 (mod L)
    P = jnp.asarray(P, dtype)
    return CopyStatistics(
        N=P * pair(eye_L),
        NY=P * pair(same) * rows[None, :, None, None],
        yy=P * jnp.sum(rows),
        P=P,
    )


def padded_statistics(key: Key, L: int, V: int, P, P_max: int):
    """Statistics of the first P of P_max sampled sequences, and the data ``(X, Y, w)``.

    P may be traced: a fractional P weights the last sequence by its fraction, so the data
    term is continuous in P and the datasets of different P are nested."""
    X, Y = copy_task(key, P_max, L, V)
    w = jnp.clip(P - jnp.arange(P_max), 0.0, 1.0).astype(X.dtype)
    return copy_statistics(X, Y, w), (X, Y, w)
