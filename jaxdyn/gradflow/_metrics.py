"""Metrics of a trajectory (focus_dilution.md, "Metrics to log").

:func:`trajectory_metrics` maps a stack of models (leading time axis) to a dict of arrays; it is
pure JAX and vmapped over time. :func:`embedding_pca` is NumPy post-processing of saved arrays.

Two quantities measure the stage-II attention dynamics along the whole trajectory, for any
chain. With ``alpha`` the top right singular vector of ``W0`` and ``gamma = W0 alpha``, the
gradient in ``(WQ, WK)`` is exactly ``dWQ/dt = -A WK``, ``dWK/dt = -A^T WQ`` with
``A = W0^T (dL/dPhi) W0``; when ``W0`` is rank one, ``A = (gamma^T G gamma) alpha alpha^T`` and

    k(t) = -gamma^T (dL/dPhi) gamma          (``focus_rate_path``)

is the signed instantaneous focus rate: the amplitude ``||alpha^T (WQ + sign(k) WK)|| / sqrt 2``
(``attention_amplitude``) grows like ``exp(int k dt)``, and ``Phi`` moves along
``sign(k) gamma gamma^T``. At the unigram saddle ``k`` equals the closed-form ``c``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, ArrayLike, Float
from ..attention import attention_entropy
from ._markov import MarkovChain
from ._model import OneLayerTransformer, population_attention, population_loss_from_matrices


def _abs_cos(u, v):
    return jnp.abs(u @ v) / (jnp.linalg.norm(u) * jnp.linalg.norm(v) + 1e-300)


def dilution_mode(gamma: Float[ArrayLike, " d"], pi: Float[ArrayLike, " d"]) -> Float[Array, ""]:
    """Stage-III mode ``(1 - pi_1) gamma_1 - pi_1 sum_{i != 1} gamma_i`` (token 1 = the most
    frequent one). It vanishes on ``gamma ∝ pi`` (the unigram saddle) and equals the
    science page's ``(1 - pi_1) gamma_1 - (d - 1) pi_1 gamma_{i != 1}`` when the low-frequency
    entries are equal. Positive when the frequent embedding moves away from the others."""
    gamma = jnp.asarray(gamma)
    pi = jnp.asarray(pi)
    top = jnp.argmax(pi)
    p1 = pi[top]
    g1 = gamma[top]
    return (1.0 - p1) * g1 - p1 * (jnp.sum(gamma) - g1)


def embedding_profile(
    model: OneLayerTransformer, pi
) -> tuple[Float[Array, " m"], Float[Array, " d"]]:
    """``(alpha, gamma)``: the top right singular vector of ``W0`` and ``gamma = W0 alpha``, the
    sign fixed so that ``gamma . pi > 0`` (a singular vector's sign is arbitrary)."""
    _, _, Vt = jnp.linalg.svd(model.W0, full_matrices=False)
    alpha = Vt[0]
    gamma = model.W0 @ alpha
    sign = jnp.where(gamma @ jnp.asarray(pi) < 0, -1.0, 1.0)
    return sign * alpha, sign * gamma


def instantaneous_focus_rate(model: OneLayerTransformer, pi, P) -> Float[Array, ""]:
    """Signed instantaneous focus rate ``k = -gamma^T (dL/dPhi) gamma`` (module docstring)."""
    M, Phi = model.matrices()
    G = jax.grad(population_loss_from_matrices, argnums=1)(M, Phi, pi, P)
    _, gamma = embedding_profile(model, pi)
    return -(gamma @ G @ gamma)


def model_metrics(model: OneLayerTransformer, pi, P) -> dict[str, Array]:
    """Metrics of one model on the chain ``(pi, P)``; see :func:`trajectory_metrics`. A model
    with a non-finite entry (a failed solve's later saves) gives NaN metrics."""
    finite = jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(model)])
    )
    # LAPACK's SVD rejects NaN input (and says so on stderr): measure a zero model instead
    safe = jax.tree_util.tree_map(lambda x: jnp.where(finite, x, 0.0), model)
    values = _metrics(safe, pi, P)
    return jax.tree_util.tree_map(lambda v: jnp.where(finite, v, jnp.nan), values)


def _metrics(model: OneLayerTransformer, pi, P) -> dict[str, Array]:
    pi = jnp.asarray(pi)
    d = pi.shape[0]
    M, Phi = model.matrices()
    U0, s0, _ = jnp.linalg.svd(model.W0, full_matrices=False)
    _, s1, V1t = jnp.linalg.svd(model.W1, full_matrices=False)
    sphi = jnp.linalg.svd(Phi, compute_uv=False)
    centred = pi - 1.0 / d
    alpha, gamma = embedding_profile(model, pi)
    W = population_attention(Phi, pi)
    H = attention_entropy(W)
    top = jnp.argmax(pi)
    low = jnp.arange(d) != top
    pphi = jnp.outer(pi, pi)
    phi_norm = jnp.linalg.norm(Phi)
    k = instantaneous_focus_rate(model, pi, P)
    sign = jnp.where(k < 0, -1.0, 1.0)
    return {
        "loss": population_loss_from_matrices(M, Phi, pi, P),
        "sv_W0": s0,
        "sv_W1": s1,
        "sv_Phi": sphi,
        "cos_W0_pi": _abs_cos(U0[:, 0], pi),
        "cos_W1_centred": _abs_cos(V1t[0], centred),
        "phi_norm": phi_norm,
        "cos_Phi_pipi": jnp.sum(Phi * pphi) / (phi_norm * jnp.linalg.norm(pphi) + 1e-300),
        "attention": W,
        "entropy_query": H,
        "entropy_top_query": H[top],
        "entropy_low_queries": jnp.sum(jnp.where(low, pi * H, 0.0))
        / jnp.sum(jnp.where(low, pi, 0.0)),
        "frequent_weight": pi @ W[:, top],
        "frequent_query_weight": W[top, top],
        "gamma": gamma,
        "dilution_mode_rel": dilution_mode(gamma, pi) / (jnp.linalg.norm(gamma) + 1e-300),
        "focus_rate_path": k,
        "attention_amplitude": jnp.linalg.norm(alpha @ (model.WQ + sign * model.WK))
        / jnp.sqrt(2.0),
    }


@eqx.filter_jit
def _trajectory_metrics(models: OneLayerTransformer, pi, P) -> dict[str, Array]:
    return jax.vmap(lambda m: model_metrics(m, pi, P))(models)


def trajectory_metrics(models: OneLayerTransformer, chain: MarkovChain) -> dict[str, Array]:
    """Metrics over time for a stack of models (leading time axis on every leaf) on the
    :class:`MarkovChain` ``chain``.

    ``loss``; singular values ``sv_W0``, ``sv_W1``, ``sv_Phi``; alignments ``cos_W0_pi``
    (top left singular vector of W0 with pi) and ``cos_W1_centred`` (top right singular vector
    of W1 with ``pi - 1/d 1``); ``phi_norm`` and ``cos_Phi_pipi`` (``cos(Phi, pi pi^T)``); the
    token-type attention ``attention[q, k] = w_qk`` and its entropies ``entropy_query[q]``,
    ``entropy_top_query`` (most frequent query) and ``entropy_low_queries`` (pi-weighted mean
    over the others); ``frequent_weight = sum_q pi_q w_{q,top}`` (the attention the frequent
    token receives; ``pi_top`` under uniform attention) and ``frequent_query_weight =
    w_{top,top}``; the sign-fixed profile ``gamma = W0 alpha`` and the relative dilution mode
    ``dilution_mode_rel = D / ||gamma||``; the signed instantaneous focus rate
    ``focus_rate_path`` and the ``attention_amplitude`` it drives (module docstring).
    """
    return _trajectory_metrics(models, chain.pi, chain.P)


def embedding_pca(W0_traj: Float[ArrayLike, "T d m"], n_components: int = 2) -> np.ndarray:
    """PCA trajectories of the embedding rows: project every row ``W0[i, :](t)`` onto the top
    principal axes of all rows at all times (one shared basis). Returns ``(T, d, k)``."""
    X = np.asarray(W0_traj, dtype=np.float64)
    T, d, m = X.shape
    flat = X.reshape(T * d, m)
    centred = flat - flat.mean(axis=0)
    _, _, Vt = np.linalg.svd(centred, full_matrices=False)
    k = min(n_components, Vt.shape[0])
    return (centred @ Vt[:k].T).reshape(T, d, k)
