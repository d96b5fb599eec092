"""Measurements on one network state (W, G): order parameters, losses, actions.

copy_head.md, "Order parameters": (c_1, c_G) of A(G) (called (a_1, a_G) for softmax), the
normalised copy weight sqrt(L) c_G, the logit gap Delta, the mean copy weight
sum_l A_{l,l-1} / L, the exact action S(G), and with W the train/test loss per sequence and
the joint energy. For heads with A(-G) = -A(G) (:class:`AbstractOddCopyHead`) the state and
its mirror image are the same posterior state: the representative with row sums >= 0 is
reported.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._heads import AbstractOddCopyHead
from ._order import logit_gap, order_parameters
from ._posterior import CopyHeadPosterior
from ._task import CopyStatistics, population_statistics, shift_matrix


def measure(
    posterior: CopyHeadPosterior,
    G: Float[ArrayLike, "L L"],
    W: Float[ArrayLike, "V V"] | None,
    stats: CopyStatistics,
    test: CopyStatistics | None = None,
) -> dict[str, Float[Array, ""]]:
    """Order parameters, exact action and (with ``W``) losses and energy of one state.

    Keys: ``c_1``, ``c_G``, ``c_G_normalised``, ``delta``, ``copy_weight``, ``action``; with
    ``W``: ``loss``, ``energy``; with ``W`` and ``test``: ``test_loss``.
    """
    G = jnp.asarray(G)
    A = posterior.attention(G)
    L = A.shape[-1]
    c1, cG = order_parameters(A, cyclic=posterior.cyclic)
    sign = jnp.ones_like(c1)
    if isinstance(posterior.head, AbstractOddCopyHead):
        sign = jnp.where(c1 + cG < 0, -1.0, 1.0).astype(c1.dtype)
    out = {
        "c_1": sign * c1,
        "c_G": sign * cG,
        "c_G_normalised": jnp.sqrt(L) * sign * cG,
        "delta": sign * logit_gap(G, cyclic=posterior.cyclic),
        "copy_weight": sign * jnp.sum(A * shift_matrix(L, cyclic=posterior.cyclic)) / L,
        "action": posterior.action(G, stats),
    }
    if W is not None:
        out["loss"] = posterior.loss(W, G, stats)
        out["energy"] = posterior.energy(W, G, stats)
        if test is not None:
            out["test_loss"] = posterior.loss(W, G, test)
    return out


def population_test_loss(
    posterior: CopyHeadPosterior,
    G: Float[ArrayLike, "L L"],
    W: Float[ArrayLike, "V V"] | None = None,
    *,
    V: int,
    P: Float[ArrayLike, ""] = 1.0,
) -> Float[Array, ""]:
    """Expected loss per fresh sequence of the network (W, G) on i.i.d. uniform tokens.

    Without ``W``, W is the MAP readout given G for P sequences of expected statistics,
    (M + (T V / sigma_w^2) I)^{-1} B at ``population_statistics(L, V, P)``: the test loss the
    saddle-point (MAP) theory predicts for the scores G.
    """
    G = jnp.asarray(G)
    L = G.shape[-1]
    if W is None:
        W = posterior.readout(G, population_statistics(L, V, P, cyclic=posterior.cyclic))
    return posterior.loss(W, G, population_statistics(L, V, 1.0, cyclic=posterior.cyclic))
