"""The flow near the origin as the initialisation scale shrinks (focus_dilution.md, stage 1 and
"Linearisation tools"): how far the flow departs from its linearisation at ``theta = 0``
(Lemma 3.1: ``||theta(t) - e^{J t} theta(0)|| <= C eps^2 e^{2 mu1 t}``) and how little the
attention parameters move while the embedding condenses ("attention frozen to ``O(eps^3)``").

:func:`origin_scaling` solves the flow from ``theta(0) = eps z`` for several ``eps`` with one
direction ``z`` over a window ``[0, t1]`` fixed in time,
so that each measured quantity's order in ``eps`` is read off at equal times.

Orders derived here (focus_dilution.md, [derived]): ``M = W0 W1`` and ``Phi = W0 WQ WK^T W0^T``
are even in ``theta``, so ``grad L`` is odd and its Taylor series at 0 has no quadratic term:
the deviation from the linearisation is ``O(eps^3)`` at fixed ``t`` (within the lemma's
``eps^2`` bound). At ``M = 0`` every query's output is the same, so ``dL/dPhi = O(||M||) =
O(eps^2)`` and ``dWQ/dt = -W0^T (dL/dPhi) W0 WK = O(eps^5)``: over a fixed window the attention
parameters move by ``O(eps^5)`` (within the paper's ``O(eps^3)``).
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxdyn._printing import AbstractResult

from .._custom_types import ArrayLike, Float, Int
from .._status import Status
from ._flow import population_flow
from ._linearise import _jacobian_spectrum
from ._markov import MarkovChain
from ._model import OneLayerTransformer


class OriginScaling(AbstractResult):
    """Result of :func:`origin_scaling` (host arrays).

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

    eps: Float[np.ndarray, " E"]
    ts: Float[np.ndarray, " T"]
    deviation: Float[np.ndarray, "E T"]
    attention_change: Float[np.ndarray, "E T"]
    rate: float
    status: Status
    num_steps: Int[np.ndarray, " E"]


def origin_scaling(
    chain: MarkovChain,
    direction: OneLayerTransformer,
    eps: Float[ArrayLike, " E"],
    t1: float,
    *,
    num_saves: int = 2000,
    embedding_scale: float | None = None,
    rtol: float = 1e-7,
    atol: float = 1e-10,
    max_steps: int = 100_000,
    solver: diffrax.AbstractSolver | None = None,
) -> OriginScaling:
    """Flows from ``theta(0) = eps z`` (``z = direction``, e.g. ``init_transformer(key, d, m,
    m_attn, 1.0)``, the same for every ``eps``) on ``[0, t1]``, saved at ``num_saves`` equally
    spaced times, with their distance to the linearised flow ``e^{J t} theta(0)`` and the
    attention parameters' change.

    ``embedding_scale``: the scale of ``W0`` (default: ``eps``, the paper's small
    initialisation); a fixed value (e.g. 1) is the counterfactual of an embedding that is not
    small, where ``dL/dPhi`` is no longer ``O(eps^2)``.

    Each ``eps`` is one :func:`population_flow` with these settings: with those of
    :func:`analyse_flow` (its defaults), the program it compiled is reused. Their error is far
    below what is measured: the solver's local error in each component scales with that
    component's own dynamics, and the exponents read here agree to ``2e-5`` with solves at
    ``rtol = 1e-12``. Needs float64 (the deviation is a relative ``O((eps e^{mu1 t})^2)``
    correction).
    """
    if chain.pi.dtype != jnp.float64:
        raise ValueError(
            "origin_scaling needs float64 (jax_enable_x64): the deviation is a relative "
            f"O((eps e^(mu1 t))^2) correction, below float32 rounding; got {chain.pi.dtype}"
        )
    eps = np.asarray(eps, dtype=np.float64)
    if eps.ndim != 1 or eps.shape[0] < 2:
        raise ValueError(f"eps must be a vector of at least 2 scales, got shape {eps.shape}")
    if not t1 > 0 or num_saves < 2:
        raise ValueError(f"need t1 > 0 and num_saves >= 2, got {t1}, {num_saves}")
    if direction.W0.shape[0] != chain.pi.shape[0]:
        raise ValueError(
            f"direction has d = {direction.W0.shape[0]}, the chain d = {chain.pi.shape[0]}"
        )
    pi, P = chain.pi, chain.P
    # host arrays in, no eager operation between the jitted steps (each would compile)
    direction = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64), direction)
    zero = jax.tree_util.tree_map(np.zeros_like, direction)
    spectrum = _jacobian_spectrum(zero, pi, P)
    ts = np.linspace(0.0, t1, num_saves)
    w0 = np.asarray(np.nan if embedding_scale is None else embedding_scale, np.float64)
    flow = dict(rtol=rtol, atol=atol, max_steps=max_steps, solver=solver)
    # one flow per eps, all the same program (with analyse_flow's settings, its own)
    parts = []
    for e in eps:
        model0 = _scaled(direction, np.asarray(e), w0)
        sol = population_flow(model0, chain, ts, **flow)
        parts.append((*_compare(model0, sol.models, ts, spectrum), sol.status, sol.num_steps))
    deviation, change, status, steps = (
        jax.tree_util.tree_map(lambda *x: np.stack([np.asarray(v) for v in x]), *part)
        for part in zip(*parts, strict=True)
    )
    return OriginScaling(
        eps=eps,
        ts=ts,
        deviation=deviation,
        attention_change=change,
        rate=float(spectrum.eigenvalues[0]),
        status=status,
        num_steps=steps,
    )


@eqx.filter_jit
def _scaled(direction: OneLayerTransformer, e, w0) -> OneLayerTransformer:
    """``e z``, with ``W0`` at scale ``w0`` instead when ``w0`` is not ``nan``."""
    return OneLayerTransformer(
        W0=jnp.where(jnp.isnan(w0), e, w0) * direction.W0,
        W1=e * direction.W1,
        WQ=e * direction.WQ,
        WK=e * direction.WK,
    )


@eqx.filter_jit
def _compare(model0, models, ts, spectrum):
    """``||theta(t) - e^{J t} theta(0)||`` (``J`` symmetric, from its eigen-decomposition) and
    ``||(WQ, WK)(t) - (WQ, WK)(0)||`` at every save."""
    vals, vecs = spectrum.eigenvalues, spectrum.eigenvectors
    flat0 = ravel_pytree(model0)[0]
    flat = jax.vmap(lambda mm: ravel_pytree(mm)[0])(models)
    linear = (jnp.exp(ts[:, None] * vals[None, :]) * (flat0 @ vecs)[None, :]) @ vecs.T
    dq = models.WQ - model0.WQ[None]
    dk = models.WK - model0.WK[None]
    change = jnp.sqrt(jnp.sum(dq**2, axis=(1, 2)) + jnp.sum(dk**2, axis=(1, 2)))
    return jnp.linalg.norm(flat - linear, axis=1), change


def origin_orders(chain: MarkovChain, direction, eps, amplitude: float, **kwargs):
    """:func:`origin_scaling` on ``[0, t1]`` with ``max(eps) e^{mu1 t1} = amplitude`` (the
    linear regime), read at equal times: the deviation from the linearisation at ``t1``, the
    lemma's ``max_t deviation / e^{2 mu1 t}`` (``C eps^2``) and the attention parameters' change
    at ``t1``. Returns ``(eps ascending, those three (E,) arrays, the host scaling)``."""
    eps = np.sort(np.asarray(eps, float))
    pi = np.asarray(chain.pi)
    mu1 = float(np.linalg.norm(pi) * np.linalg.norm(pi - 1.0 / pi.size))  # condensation_rate
    t1 = float(np.log(amplitude / eps[-1]) / mu1)
    o = jax.tree_util.tree_map(np.asarray, origin_scaling(chain, direction, eps, t1, **kwargs))
    lemma = np.max(o.deviation[:, 1:] / np.exp(2 * float(o.rate) * o.ts[1:])[None, :], axis=1)
    return eps, o.deviation[:, -1], lemma, o.attention_change[:, -1], o


def origin_checks(run, chain: MarkovChain, direction, eps, amplitude: float, **flow) -> None:
    """Lemma 3.1 at the origin and the frozen attention as orders in ``eps`` at equal times
    (:func:`origin_orders` from ``direction``, float64): the solver status (consistency), the
    paper's bounds and the orders derived here (evidence), and the arrays, recorded on ``run``
    (anything with a run's ``consistency``, ``evidence`` and ``save_arrays``)."""
    from . import claims

    eps, dev, lemma, att, o = origin_orders(chain, direction, eps, amplitude, **flow)
    ok = Status.code(o.status) == Status.code(Status.successful)
    run.consistency(
        "origin_flows_converged",
        expected=len(eps),
        measured=int(np.sum(ok)),
        basis="solver status per eps",
        note=f"steps {o.num_steps.tolist()}",
    )
    window = f"at t = {float(o.ts[-1]):.4g} (max eps e^(mu1 t) = {amplitude:g})"
    run.evidence(
        "linearisation_bound",
        claims.linearisation_bound(eps, lemma),
        note=f"C estimates max_t dev / (eps^2 e^(2 mu1 t)) = "
        f"{np.round(lemma / eps**2, 6).tolist()} for eps = {eps.tolist()}, "
        f"t in [0, {float(o.ts[-1]):.4g}]",
    )
    run.evidence(
        "linearisation_error_order", claims.linearisation_error_order(eps, dev), note=window
    )
    run.evidence(
        "attention_frozen_at_origin",
        claims.attention_frozen_at_origin(eps, att),
        note=window + f"; changes {att.tolist()}",
    )
    run.evidence("attention_change_order", claims.attention_change_order(eps, att), note=window)
    run.save_arrays(
        origin_eps=eps,
        origin_ts=o.ts,
        origin_deviation=o.deviation,
        origin_attention_change=o.attention_change,
        dims={
            "origin_eps": ("eps",),
            "origin_deviation": ("eps", "origin_time"),
            "origin_attention_change": ("eps", "origin_time"),
        },
    )
