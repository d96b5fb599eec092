"""The local learning coefficient along training (induction.md, "LLC along training"):
devinterp's account of in-context learning reads the stages off where the LLC's trend changes.
"""

from __future__ import annotations

import inspect

import equinox as eqx
import jax
import jax.flatten_util
import numpy as np

from ..llc import estimate_llc
from ._train import next_token_loss


def flat_weights(model) -> jax.Array:
    """The model's floating-point arrays as one vector (what a sweep member returns)."""
    return jax.flatten_util.ravel_pytree(eqx.filter(model, eqx.is_inexact_array))[0]


def llc_checkpoints(steps, count: int, boundaries) -> np.ndarray:
    """``count`` checkpoint indices evenly spaced in the index (log-spaced in steps) from the
    first checkpoint at 1% of training on (earlier weights are far from any critical point of
    the loss), plus every checkpoint between the two stage boundaries ``(leave, settle)``
    (indices, ``None`` where not seen), so that the middle stage has estimates of its own."""
    steps = np.asarray(steps)
    first = int(np.searchsorted(steps, steps[-1] / 100))
    idx = np.round(np.linspace(first, steps.size - 1, count)).astype(int)
    leave, settle = boundaries
    if leave is not None:
        idx = np.concatenate([idx, np.arange(leave, steps.size if settle is None else settle + 1)])
    return np.unique(idx)


def _batch_loss(model, batch):
    return next_token_loss(model, batch[0])


def llc_along_training(template, weights, tokens, *, key, **estimate) -> np.ndarray:
    """:func:`jaxdyn.llc.estimate_llc` of :func:`next_token_loss` on ``tokens`` (n counts
    sequences) at each row of ``weights`` (:func:`flat_weights` of checkpoints of a model
    shaped like ``template``); ``estimate`` its other keywords. Returns the per-chain estimates,
    ``(rows, chains)``.

    Common random numbers: every row samples with the same ``key``, so chain ``c`` draws the
    same Langevin noise and the same minibatches at every checkpoint and its estimates along
    training change only with the weights (their differences keep little of the sampling
    noise; the chains stay independent of each other). All rows run as one compiled program
    (vmapped over the checkpoints), each exactly as a separate call with ``key`` would."""
    weights = np.asarray(weights)
    if weights.shape[0] == 0:
        default = inspect.signature(estimate_llc).parameters["num_chains"].default
        return np.zeros((0, estimate.get("num_chains", default)))
    params, static = eqx.partition(template, eqx.is_inexact_array)

    @eqx.filter_jit
    def at(params, weights, key, tokens):
        _, unravel = jax.flatten_util.ravel_pytree(params)  # traced here: no eager programs

        def one(w):
            model = eqx.combine(unravel(w), static)
            return estimate_llc(_batch_loss, model, (tokens,), key=key, **estimate).per_chain

        return eqx.filter_vmap(one)(weights)

    return np.asarray(at(params, weights, key, tokens), float)
