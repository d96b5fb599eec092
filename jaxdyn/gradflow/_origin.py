"""The flow near the origin as the initialisation scale shrinks (focus_dilution.md, stage 1 and
"Linearisation tools"): how far the flow departs from its linearisation at ``theta = 0``
(Lemma 3.1: ``||theta(t) - e^{J t} theta(0)|| <= C eps^2 e^{2 mu1 t}``) and how little the
attention parameters move while the embedding condenses ("attention frozen to ``O(eps^3)``").

:func:`origin_scaling` solves the flow from ``theta(0) = eps z`` for several ``eps`` with one
direction ``z`` (one program, vmapped over ``eps``) over a window ``[0, t1]`` fixed in time,
so that each measured quantity's order in ``eps`` is read off at equal times.

Orders derived here (focus_dilution.md, [derived]): ``M = W0 W1`` and ``Phi = W0 WQ WK^T W0^T``
are even in ``theta``, so ``grad L`` is odd and its Taylor series at 0 has no quadratic term:
the deviation from the linearisation is ``O(eps^3)`` at fixed ``t`` (within the lemma's
``eps^2`` bound). At ``M = 0`` every query's output is the same, so ``dL/dPhi = O(||M||) =
O(eps^2)`` and ``dWQ/dt = -W0^T (dL/dPhi) W0 WK = O(eps^5)``: over a fixed window the attention
parameters move by ``O(eps^5)`` (within the paper's ``O(eps^3)``).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from .._custom_types import Array, ArrayLike, Float, Int, Key, Scalar
from .._status import Status
from ._flow import population_flow
from ._linearise import jacobian_spectrum
from ._markov import MarkovChain
from ._model import init_transformer


class OriginScaling(eqx.Module):
    """Result of :func:`origin_scaling`.

    Attributes:
        eps: the initialisation scales ``(E,)``.
        ts: the save times ``(T,)`` (shared by every ``eps``).
        deviation: ``||theta(t) - e^{J t} theta(0)||``, ``(E, T)`` (``J`` the flow's Jacobian
            at ``theta = 0``).
        attention_change: ``||(WQ, WK)(t) - (WQ, WK)(0)||``, ``(E, T)``.
        rate: ``mu1``, the top eigenvalue of ``J`` at 0.
        status: each flow's :class:`jaxdyn.Status` ``(E,)``.
        num_steps: each flow's solver steps ``(E,)``.
    """

    eps: Float[Array, " E"]
    ts: Float[Array, " T"]
    deviation: Float[Array, "E T"]
    attention_change: Float[Array, "E T"]
    rate: Scalar
    status: Status
    num_steps: Int[Array, " E"]


def origin_scaling(
    chain: MarkovChain,
    eps: Float[ArrayLike, " E"],
    t1: float,
    *,
    key: Key | None = None,
    m: int = 6,
    m_attn: int = 6,
    num_saves: int = 16,
    embedding_scale: float | None = None,
    rtol: float = 1e-12,
    atol: float = 1e-24,
) -> OriginScaling:
    """Flows from ``theta(0) = eps z`` (``z`` i.i.d. ``N(0, 1)`` from ``key``, the same for
    every ``eps``) on ``[0, t1]``, saved at ``num_saves`` equally spaced times, with their
    distance to the linearised flow ``e^{J t} theta(0)`` and the attention parameters' change.

    ``embedding_scale``: the scale of ``W0`` (default: ``eps``, the paper's small
    initialisation); a fixed value (e.g. 1) is the counterfactual of an embedding that is not
    small, where ``dL/dPhi`` is no longer ``O(eps^2)``. Tolerances default to near float64
    precision: the deviation is a relative ``O((eps e^{mu1 t})^2)`` correction.
    """
    if chain.pi.dtype != jnp.float64:
        raise ValueError(
            "origin_scaling needs float64 (jax_enable_x64): the deviation is a relative "
            f"O((eps e^(mu1 t))^2) correction, below float32 rounding; got {chain.pi.dtype}"
        )
    eps = jnp.asarray(eps, chain.pi.dtype)
    if eps.ndim != 1 or eps.shape[0] < 2:
        raise ValueError(f"eps must be a vector of at least 2 scales, got shape {eps.shape}")
    if not t1 > 0 or num_saves < 2:
        raise ValueError(f"need t1 > 0 and num_saves >= 2, got {t1}, {num_saves}")
    key = jax.random.key(0) if key is None else key
    scale = jnp.nan if embedding_scale is None else float(embedding_scale)
    return _origin_scaling(
        chain,
        eps,
        jnp.asarray(scale, eps.dtype),
        jnp.linspace(0.0, t1, num_saves, dtype=eps.dtype),
        key,
        m=int(m),
        m_attn=int(m_attn),
        rtol=rtol,
        atol=atol,
    )


@eqx.filter_jit
def _origin_scaling(chain, eps, embedding_scale, ts, key, *, m, m_attn, rtol, atol):
    pi, P = chain.pi, chain.P
    d = pi.shape[0]
    direction = init_transformer(key, d, m, m_attn, 1.0, dtype=eps.dtype)
    zero = jax.tree_util.tree_map(jnp.zeros_like, direction)
    spectrum = jacobian_spectrum(zero, pi, P)
    vals, vecs = spectrum.eigenvalues, spectrum.eigenvectors

    def one(e):
        w0 = jnp.where(jnp.isnan(embedding_scale), e, embedding_scale)
        model0 = eqx.tree_at(
            lambda mm: (mm.W0, mm.W1, mm.WQ, mm.WK),
            direction,
            (w0 * direction.W0, e * direction.W1, e * direction.WQ, e * direction.WK),
        )
        sol = population_flow(model0, chain, ts, rtol=rtol, atol=atol, max_steps=200_000)
        flat0 = ravel_pytree(model0)[0]
        flat = jax.vmap(lambda mm: ravel_pytree(mm)[0])(sol.models)
        # e^{J t} theta(0) from J's eigen-decomposition (J symmetric)
        linear = (jnp.exp(ts[:, None] * vals[None, :]) * (flat0 @ vecs)[None, :]) @ vecs.T
        deviation = jnp.linalg.norm(flat - linear, axis=1)
        dq = sol.models.WQ - model0.WQ[None]
        dk = sol.models.WK - model0.WK[None]
        change = jnp.sqrt(jnp.sum(dq**2, axis=(1, 2)) + jnp.sum(dk**2, axis=(1, 2)))
        return deviation, change, sol.status, sol.num_steps

    deviation, change, status, steps = jax.vmap(one)(eps)
    return OriginScaling(
        eps=eps,
        ts=ts,
        deviation=deviation,
        attention_change=change,
        rate=vals[0],
        status=status,
        num_steps=steps,
    )
