"""Metrics of a trajectory (focus_dilution.md, "Metrics to log").

:func:`trajectory_metrics` maps a stack of models (leading time axis) to a dict of arrays; it
is pure JAX and vmapped over time. :func:`embedding_pca` and :func:`fit_growth_rate` are
NumPy post-processing of saved arrays.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._custom_types import Array, ArrayLike, Float
from ..attention import attention_entropy
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


def model_metrics(model: OneLayerTransformer, pi, P) -> dict[str, Array]:
    """Metrics of one model on the chain ``(pi, P)``; see :func:`trajectory_metrics`."""
    pi = jnp.asarray(pi)
    d = pi.shape[0]
    M, Phi = model.matrices()
    U0, s0, V0t = jnp.linalg.svd(model.W0, full_matrices=False)
    U1, s1, V1t = jnp.linalg.svd(model.W1, full_matrices=False)
    sphi = jnp.linalg.svd(Phi, compute_uv=False)
    centred = pi - 1.0 / d
    alpha = V0t[0]
    gamma = model.W0 @ alpha
    gamma = gamma * jnp.where(gamma @ pi < 0, -1.0, 1.0)
    gnorm = jnp.linalg.norm(gamma)
    D = dilution_mode(gamma, pi)
    W = population_attention(Phi, pi)
    H = attention_entropy(W)
    top = jnp.argmax(pi)
    low = jnp.arange(d) != top
    pphi = jnp.outer(pi, pi)
    phi_norm = jnp.linalg.norm(Phi)
    return {
        "loss": population_loss_from_matrices(M, Phi, pi, P),
        "sv_W0": s0,
        "sv_W1": s1,
        "sv_Phi": sphi,
        "cos_W0_pi": _abs_cos(U0[:, 0], pi),
        "cos_W0_centred": _abs_cos(U0[:, 0], centred),
        "cos_W1_pi": _abs_cos(V1t[0], pi),
        "cos_W1_centred": _abs_cos(V1t[0], centred),
        "phi_norm": phi_norm,
        "cos_Phi_pipi": jnp.sum(Phi * pphi) / (phi_norm * jnp.linalg.norm(pphi) + 1e-300),
        "attention": W,
        "entropy_query": H,
        "entropy_top_query": H[top],
        "entropy_low_queries": jnp.sum(jnp.where(low, pi * H, 0.0))
        / jnp.sum(jnp.where(low, pi, 0.0)),
        "gamma": gamma,
        "dilution_mode": D,
        "dilution_mode_rel": D / (gnorm + 1e-300),
        "attention_mode": jnp.sqrt(
            jnp.sum((alpha @ model.WQ) ** 2) + jnp.sum((alpha @ model.WK) ** 2)
        ),
    }


@eqx.filter_jit
def trajectory_metrics(models: OneLayerTransformer, pi, P) -> dict[str, Array]:
    """Metrics over time for a stack of models (leading time axis on every leaf).

    ``loss``; singular values ``sv_W0``, ``sv_W1``, ``sv_Phi``; alignments ``cos_W0_pi``
    (top left singular vector of W0 with pi), ``cos_W1_centred`` (top right singular vector
    of W1 with ``pi - 1/d 1``) and the crossed ones; ``phi_norm`` and ``cos_Phi_pipi``
    (``cos(Phi, pi pi^T)``); the token-type attention ``attention[q, k] = w_qk`` and its
    entropies ``entropy_query[q]``, ``entropy_top_query`` (most frequent query) and
    ``entropy_low_queries`` (pi-weighted mean over the others); ``gamma = W0 alpha`` with
    ``alpha`` the top right singular vector of W0, the ``dilution_mode`` (and divided by
    ``||gamma||``), and ``attention_mode = ||(alpha^T WQ, alpha^T WK)||``, the amplitude of
    the stage-II unstable direction.
    """
    return jax.vmap(lambda m: model_metrics(m, pi, P))(models)


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


def fit_growth_rate(ts: ArrayLike, y: ArrayLike, lo: float, hi: float) -> tuple[float, int]:
    """Least-squares slope of ``log y`` against ``t`` over the first window where
    ``lo <= y <= hi`` (up to the first time ``y`` exceeds ``hi``). Returns ``(rate, n_points)``;
    ``rate`` is NaN if fewer than 3 points fall in the window."""
    ts = np.asarray(ts, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    above = np.nonzero(y > hi)[0]
    end = above[0] if above.size else len(y)
    sel = np.zeros(len(y), bool)
    sel[:end] = y[:end] >= lo
    sel &= np.isfinite(y) & (y > 0)
    n = int(sel.sum())
    if n < 3:
        return float("nan"), n
    return float(np.polyfit(ts[sel], np.log(y[sel]), 1)[0]), n


def fit_rate_between(ts: ArrayLike, y: ArrayLike, t_lo: float, t_hi: float) -> tuple[float, int]:
    """Least-squares slope of ``log y`` against ``t`` over saved times in ``[t_lo, t_hi]``."""
    ts = np.asarray(ts, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    sel = (ts >= t_lo) & (ts <= t_hi) & np.isfinite(y) & (y > 0)
    n = int(sel.sum())
    if n < 3:
        return float("nan"), n
    return float(np.polyfit(ts[sel], np.log(y[sel]), 1)[0]), n


def fitted_condensation_rate(
    ts, metrics, *, lo: float = 3.0, hi: float = 0.02
) -> tuple[float, int]:
    """Stage-I growth rate fitted on ``sigma_1(W0)(t)`` while it grows from ``lo`` times its
    initial value to ``hi`` times its maximum (the linear regime around ``theta = 0``)."""
    s = np.asarray(metrics["sv_W0"])[:, 0]
    return fit_growth_rate(ts, s, lo * s[0], hi * np.nanmax(s))


def fitted_focus_rate(
    ts, metrics, pi, *, plateau_tol: float = 1e-2, phi_max: float = 0.05
) -> tuple[float, int]:
    """Stage-II growth rate fitted on ``attention_mode(t) = ||(alpha^T WQ, alpha^T WK)||`` from
    the time the loss is within ``plateau_tol`` of ``H(pi)`` until ``||Phi||`` reaches
    ``phi_max`` (the linear regime around the unigram saddle)."""
    pi = np.asarray(pi, dtype=np.float64)
    H = float(-np.sum(pi * np.log(pi)))
    loss = np.asarray(metrics["loss"])
    phi = np.asarray(metrics["phi_norm"])
    ts = np.asarray(ts, dtype=np.float64)
    on = np.nonzero(loss <= H + plateau_tol)[0]
    if on.size == 0:
        return float("nan"), 0
    t_lo = ts[on[0]]
    above = np.nonzero((phi >= phi_max) & (ts > t_lo))[0]
    t_hi = ts[above[0]] if above.size else ts[-1]
    return fit_rate_between(ts, metrics["attention_mode"], t_lo, t_hi)
