"""The Bayesian copy head: joint posterior over (W, G) and its exact G-marginal.

copy_head.md, "Network", "Exact action" and "Validation protocol". With the Gaussian
likelihood at temperature T and priors W_ij ~ N(0, sigma_w^2 / V), G_lm ~ N(0, sigma_g^2),
the joint posterior is p(W, G | D) ~ exp(-E(W, G)) with

    E = (1/2T) sum_mu ||Y^mu - A X^mu W||^2 + V ||W||^2 / (2 sigma_w^2) + ||G||^2 / (2 sigma_g^2),

and integrating out W (Gaussian) gives p(G | D) ~ exp(-S(G)) with, for kappa = sigma_w^2 / V,
M(A) = sum_mu X^T A^T A X and B(A) = sum_mu X^T A^T Y (V x V),

    S(G) = ||G||^2 / (2 sigma_g^2) + (V/2) ln det(I + (kappa/T) M)
           - (1/2T) tr[B^T (T/kappa I + M)^{-1} B]                      (+ const),

    const = ||Y||^2 / 2T + (V P L / 2) ln(2 pi T) + (L^2 / 2) ln(2 pi sigma_g^2).

Only V x V matrices are formed (never the PL x PL kernel); ln det and the quadratic form come
from one Cholesky factor of T/kappa I + M (no inverse).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, ArrayLike, Float

from .._validation import require_positive
from ._batched import action_batch
from ._heads import AbstractCopyHead, SoftmaxCopyHead, check_head
from ._task import CopyStatistics, copy_statistics, supervised_positions


def _positive(name: str):
    def convert(value) -> Array:
        return require_positive(name, jnp.asarray(value, dtype=jnp.result_type(float)))

    return convert


class CopyHeadPosterior(eqx.Module):
    """Posterior of a copy head with any attention: the one place its hyperparameters live.

    ``CopyHeadPosterior(head, temperature, sigma_w2, sigma_g2)`` with ``head`` an
    :class:`AbstractCopyHead` (softmax attention by default). Temperature and
    prior variances are arrays (traced in sweeps, so one compilation serves every value);
    they must be positive (checked at construction, or at run time when traced).

    Attributes:
        head: the attention map G -> A.
        temperature: likelihood temperature T.
        sigma_w2: prior variance scale of W (W_ij ~ N(0, sigma_w^2 / V)).
        sigma_g2: prior variance of each score G_lm.
        cyclic: position 1 is supervised with target x_L (``True``) or left out (copy_head.md,
            "Task" [open]).
    """

    head: AbstractCopyHead
    temperature: Float[Array, ""]
    sigma_w2: Float[Array, ""]
    sigma_g2: Float[Array, ""]
    cyclic: bool = eqx.field(static=True)

    def __init__(
        self,
        head: AbstractCopyHead | None = None,
        temperature: float | ArrayLike = 1.0,
        sigma_w2: float | ArrayLike = 1.0,
        sigma_g2: float | ArrayLike = 1.0,
        *,
        cyclic: bool = True,
    ):
        self.head = SoftmaxCopyHead() if head is None else check_head(head)
        self.temperature = _positive("temperature")(temperature)
        self.sigma_w2 = _positive("sigma_w2")(sigma_w2)
        self.sigma_g2 = _positive("sigma_g2")(sigma_g2)
        self.cyclic = bool(cyclic)

    def attention(self, G: Float[ArrayLike, "L L"]) -> Float[Array, "L L"]:
        """A(G) with the rows of unsupervised positions zeroed (position 1 when not cyclic)."""
        A = self.head.weights(jnp.asarray(G))
        rows = supervised_positions(A.shape[-1], cyclic=self.cyclic)
        return jnp.where(rows[:, None], A, 0.0)

    def prior_energy(self, G: Float[ArrayLike, "L L"]) -> Float[Array, ""]:
        """-ln p(G) + const = ||G||^2 / (2 sigma_g^2)."""
        return jnp.sum(jnp.asarray(G) ** 2) / (2.0 * self.sigma_g2)

    def action_from_moments(
        self, G: Float[ArrayLike, "L L"], M: Float[ArrayLike, "V V"], B: Float[ArrayLike, "V V"]
    ) -> Float[Array, ""]:
        """S(G) from the V x V moments M(A(G)) and B(A(G)) (module docstring)."""
        M, B = jnp.asarray(M), jnp.asarray(B)
        V = M.shape[-1]
        T = self.temperature.astype(M.dtype)
        kappa = self.sigma_w2.astype(M.dtype) / V
        K = (T / kappa) * jnp.eye(V, dtype=M.dtype) + M
        # One Cholesky factor gives both terms: ln det(I + kappa M / T) = V ln(kappa/T)
        # + ln det K, and tr(B^T K^{-1} B) = ||C^{-1} B||_F^2 with K = C C^T.
        C = jnp.linalg.cholesky(K)
        logdet = V * jnp.log(kappa / T) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(C)))
        Z = jsl.solve_triangular(C, B, lower=True)
        return self.prior_energy(G) + 0.5 * V * logdet - jnp.sum(Z**2) / (2.0 * T)

    def action(
        self, G: Float[ArrayLike, "*batch L L"], stats: CopyStatistics
    ) -> Float[Array, "*batch"]:
        """Exact action S(G) = -ln p(G | D) + const: O(L^2 V^2) per G from the statistics.

        ``G`` may carry leading batch axes (many chains, a grid of states): the batch is laid
        out for throughput on many small matrices (one Cholesky per G, unrolled for small V).
        Differentiable in G."""
        G = jnp.asarray(G)
        L = stats.L
        if G.ndim < 2 or G.shape[-2:] != (L, L):
            raise ValueError(
                f"G must have shape (..., {L}, {L}) to match the statistics, got {G.shape}"
            )
        if G.ndim == 2:
            M, B = stats.moments(self.attention(G))
            return self.action_from_moments(G, M, B)
        return _batched_action(self, G.reshape((-1, L, L)), stats).reshape(G.shape[:-2])

    def energy(
        self, W: Float[ArrayLike, "V V"], G: Float[ArrayLike, "L L"], stats: CopyStatistics
    ) -> Float[Array, ""]:
        """Joint energy E(W, G) = -ln p(W, G | D) + const (module docstring), with
        sum_mu ||Y - A X W||^2 = ||Y||^2 - 2 tr(W^T B) + tr(W^T M W) from the statistics.
        Its G-marginal is exp(-S(G)) up to a constant."""
        W = jnp.asarray(W)
        V = W.shape[0]
        return (
            self.squared_error(W, G, stats) / (2.0 * self.temperature)
            + V * jnp.sum(W**2) / (2.0 * self.sigma_w2)
            + self.prior_energy(G)
        )

    def squared_error(
        self, W: Float[ArrayLike, "V V"], G: Float[ArrayLike, "L L"], stats: CopyStatistics
    ) -> Float[Array, ""]:
        """sum_mu w_mu ||Y^mu - A X^mu W||^2 from the statistics."""
        W = jnp.asarray(W)
        M, B = stats.moments(self.attention(G))
        return stats.yy - 2.0 * jnp.sum(W * B) + jnp.sum(W * (M @ W))

    def loss(
        self, W: Float[ArrayLike, "V V"], G: Float[ArrayLike, "L L"], stats: CopyStatistics
    ) -> Float[Array, ""]:
        """Mean squared error per sequence, sum_mu ||Y^mu - A X^mu W||^2 / P."""
        return self.squared_error(W, G, stats) / jnp.maximum(stats.P, 1e-30)

    def readout(self, G: Float[ArrayLike, "L L"], stats: CopyStatistics) -> Float[Array, "V V"]:
        """Posterior mean (and mode) of W given G: W*(G) = (M + (T V / sigma_w^2) I)^{-1} B."""
        M, B = stats.moments(self.attention(G))
        V = M.shape[-1]
        ridge = self.temperature * V / self.sigma_w2
        return jnp.linalg.solve(M + ridge.astype(M.dtype) * jnp.eye(V, dtype=M.dtype), B)

    def grad(
        self, W: Float[ArrayLike, "V V"], G: Float[ArrayLike, "L L"], stats: CopyStatistics
    ) -> tuple[Float[Array, "V V"], Float[Array, "L L"]]:
        """(dE/dW, dE/dG) of :meth:`energy`, written out from the sufficient statistics.

        With Q[l, m] = sum_ab N[l, m, a, b] (W W^T)_ab and R[l, m] = sum_ab NY[m, l, a, b] W_ab,
        the data term is yy - 2 <A, R> + <A^T A, Q>, so

            dE/dA = (A Q - R) / T,     dE/dW = (M W - B) / T + V W / sigma_w^2,
            dE/dG = (dA/dG)^T dE/dA + G / sigma_g^2   (the head's vector-Jacobian product).

        Equal to ``jax.grad(energy)``; cheaper under ``vmap`` over chains (the SGLD sampler's
        gradient): the four contractions with the statistics are matrix-vector products that
        ``vmap`` turns into GEMMs, and the small products are broadcast-multiply-sums.
        """
        W, G = jnp.asarray(W), jnp.asarray(G)
        L, V = stats.L, stats.V
        A, attention_vjp = jax.vjp(self.attention, G)
        N = stats.N.reshape(L * L, V * V)
        NY = stats.NY.reshape(L * L, V * V)  # rows (m, l): no transpose of the statistics
        WWt = jnp.sum(W[:, None, :] * W[None, :, :], axis=-1)
        ATA = jnp.sum(A[:, :, None] * A[:, None, :], axis=0)
        Q = (N @ WWt.reshape(V * V)).reshape(L, L)
        R = (NY @ W.reshape(V * V)).reshape(L, L).T
        M = (ATA.reshape(L * L) @ N).reshape(V, V)
        B = (A.T.reshape(L * L) @ NY).reshape(V, V)
        T = self.temperature
        grad_A = (A @ Q - R) / T
        grad_W = (jnp.sum(M[:, :, None] * W[None, :, :], axis=1) - B) / T + V * W / self.sigma_w2
        (grad_G,) = attention_vjp(grad_A.astype(A.dtype))
        return grad_W.astype(W.dtype), (grad_G + G / self.sigma_g2).astype(G.dtype)


def action_from_data(
    G: Float[ArrayLike, "*batch L L"],
    X: Float[ArrayLike, "P L V"],
    Y: Float[ArrayLike, "P L V"],
    *,
    attention: AbstractCopyHead | None = None,
    temperature: float | ArrayLike = 1.0,
    sigma_w2: float | ArrayLike = 1.0,
    sigma_g2: float | ArrayLike = 1.0,
    cyclic: bool = True,
) -> Float[Array, "*batch"]:
    """:meth:`CopyHeadPosterior.action` from the data (X, Y) instead of its statistics: one G
    contracts the data directly, O(P L^2 V + P L V^2) (a check of the statistics' path)."""
    posterior = CopyHeadPosterior(attention, temperature, sigma_w2, sigma_g2, cyclic=cyclic)
    G, X, Y = jnp.asarray(G), jnp.asarray(X), jnp.asarray(Y)
    if X.ndim != 3 or X.shape != Y.shape:
        raise ValueError(f"X and Y must both have shape (P, L, V), got {X.shape} and {Y.shape}")
    L = X.shape[1]
    if G.ndim < 2 or G.shape[-2:] != (L, L):
        raise ValueError(f"G must have shape (..., {L}, {L}) to match X, got {G.shape}")
    if G.ndim == 2:
        # One G: contract the data directly, O(P L^2 V + P L V^2).
        AX = jnp.einsum("lm,pmv->plv", posterior.attention(G), X)
        M = jnp.einsum("plv,plw->vw", AX, AX)
        B = jnp.einsum("plv,plw->vw", AX, Y)
        return posterior.action_from_moments(G, M, B)
    return posterior.action(G, copy_statistics(X, Y))


def _batched_action(
    posterior: CopyHeadPosterior, G: Float[ArrayLike, "n L L"], stats: CopyStatistics
) -> Float[Array, " n"]:
    """S(G) for a batch of score matrices: the equation of :meth:`CopyHeadPosterior.action`,
    laid out for throughput on many small matrices (``action_batch``)."""
    G = jnp.asarray(G)
    A = jax.vmap(posterior.attention)(G)
    return action_batch(
        G,
        A,
        stats,
        temperature=posterior.temperature,
        sigma_w2=posterior.sigma_w2,
        sigma_g2=posterior.sigma_g2,
    )
