"""Adam (any optax transformation) on the in-context Markov task, with checkpoints
(induction.md, "Training").

The training loop is one compiled program: an outer ``lax.scan`` over checkpoints, an inner loop
of optimiser steps between them, fresh sequences every step. At each checkpoint the model is
evaluated on a fixed set of held-out sequences (the same for every seed, so seeds and the
Bayes predictors are compared on the same data): the per-sequence loss, each layer's
previous-token score and induction score, and the model itself (stacked along a leading
checkpoint axis, for measurements after training such as the learning coefficient).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from jaxdyn._printing import AbstractResult

from ._model import AttentionOnlyTransformer
from ._scores import induction_score, previous_token_score
from ._task import InContextMarkov, sequence_losses


class Trajectory(AbstractResult):
    """What :func:`train` measured at its checkpoints (leading axis ``checkpoint``).

    Attributes:
        steps: ``(C,)`` the optimiser steps taken at each checkpoint.
        sequence_loss: ``(C, N)`` next-token cross-entropy of each held-out sequence.
        previous_token: ``(C, layers)`` mean attention of position ``t`` on ``t - 1``.
        induction: ``(C, layers)`` mean attention on the tokens after earlier occurrences of the
            current token (:func:`induction_score`).
        induction_baseline: the induction score of uniform causal attention on the same
            held-out sequences (what attention that ignores content scores).
        models: the model at each checkpoint, arrays stacked along a leading ``C`` axis.
    """

    steps: Int[Array, " C"]
    sequence_loss: Float[Array, "C N"]
    previous_token: Float[Array, "C layers"]
    induction: Float[Array, "C layers"]
    induction_baseline: Float[Array, ""]
    models: AttentionOnlyTransformer

    @property
    def loss(self) -> Float[Array, " C"]:
        """Held-out loss at each checkpoint (mean over sequences)."""
        return self.sequence_loss.mean(-1)

    @property
    def loss_se(self) -> Float[Array, " C"]:
        """Its standard error (held-out sequences are the independent units)."""
        n = self.sequence_loss.shape[-1]
        return self.sequence_loss.std(-1, ddof=1) / jnp.sqrt(n)

    def model_at(self, index: int) -> AttentionOnlyTransformer:
        """The model at checkpoint ``index``."""
        return jax.tree.map(lambda a: a[index], self.models)


def next_token_loss(model: AttentionOnlyTransformer, tokens: Int[Array, "N T"]) -> Float[Array, ""]:
    """Mean next-token cross-entropy of ``model`` on a batch of sequences (nats per token)."""
    return sequence_losses(jax.vmap(model)(tokens), tokens).mean()


def _evaluate(model, tokens):
    log_probs, patterns = jax.vmap(model.forward)(tokens)
    per_seq = sequence_losses(log_probs, tokens)
    prev = previous_token_score(patterns).mean(0)
    ind = jax.vmap(induction_score, in_axes=(0, 0))(patterns, tokens).mean(0)
    return per_seq, prev, ind


def checkpoint_steps(steps: int, count: int) -> np.ndarray:
    """``count`` checkpoints from step 0 to ``steps``: 0, then log-spaced (distinct integers),
    so that both the early plateaus and the late convergence are resolved."""
    if steps < 1 or count < 2:
        raise ValueError(f"need steps >= 1 and count >= 2, got {steps}, {count}")
    geo = np.unique(np.round(np.geomspace(1, steps, count - 1)).astype(int))
    return np.concatenate([[0], geo])


def train(
    model: AttentionOnlyTransformer,
    task: InContextMarkov,
    optimiser: optax.GradientTransformation,
    *,
    key: PRNGKeyArray,
    checkpoints: Int[Array, " C"] | np.ndarray,
    batch_size: int,
    held_out: Int[Array, "N T"],
) -> tuple[AttentionOnlyTransformer, Trajectory]:
    """Train ``model`` on fresh batches of ``task`` with ``optimiser`` up to the last of
    ``checkpoints`` (increasing step counts, the first usually 0), measuring on ``held_out``
    at each checkpoint. Pure and jit/vmap-able (vmap over ``key`` and ``model`` for seeds).

    Returns the final model and the :class:`Trajectory`.
    """
    checkpoints = np.asarray(checkpoints)
    if checkpoints.ndim != 1 or checkpoints.size < 1 or np.any(np.diff(checkpoints) <= 0):
        raise ValueError(f"checkpoints must be increasing step counts, got {checkpoints}")
    if checkpoints[0] < 0:
        raise ValueError(f"checkpoints must be >= 0, got {checkpoints[0]}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if held_out.ndim != 2 or held_out.shape[1] != task.length:
        raise ValueError(f"held_out must be (N, {task.length}) tokens, got {held_out.shape}")
    segments = jnp.asarray(np.diff(checkpoints, prepend=0))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimiser.init(params)
    grad_fn = jax.value_and_grad(lambda p, x: next_token_loss(eqx.combine(p, static), x))

    def step(i, carry):
        p, s, k = carry
        k, k_batch = jax.random.split(k)
        _, g = grad_fn(p, task.sample(k_batch, batch_size))
        updates, s = optimiser.update(g, s, p)
        return optax.apply_updates(p, updates), s, k

    def segment(carry, n):
        carry = jax.lax.fori_loop(0, n, step, carry)
        m = eqx.combine(carry[0], static)
        per_seq, prev, ind = _evaluate(m, held_out)
        return carry, (per_seq, prev, ind, carry[0])

    (params, _, _), (per_seq, prev, ind, stacked) = jax.lax.scan(
        segment, (params, opt_state, key), segments
    )
    uniform = jnp.tril(jnp.ones((task.length, task.length)))
    uniform = uniform / uniform.sum(-1, keepdims=True)
    baseline = jax.vmap(induction_score, in_axes=(None, 0))(uniform, held_out).mean()
    trajectory = Trajectory(
        steps=jnp.asarray(checkpoints),
        sequence_loss=per_seq,
        previous_token=prev,
        induction=ind,
        induction_baseline=baseline,
        models=eqx.combine(stacked, static),
    )
    return eqx.combine(params, static), trajectory
