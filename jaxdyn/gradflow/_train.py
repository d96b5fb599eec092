"""Finite-sample training (focus_dilution.md, "Population loss": the finite-(N, s) model
trained by full-batch gradient descent or Adam on sampled sequences).

Pure ``init``/``step`` functions driven by ``lax.scan``; the learning rate is a traced array
(``optax.inject_hyperparams``), so a sweep over learning rates or seeds compiles once. Full-batch
gradient descent with step ``lr`` after ``k`` steps is compared with the population flow at time
``t = k lr``.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from jaxdyn._printing import AbstractResult

from .._custom_types import Array, ArrayLike, Float, Int, Key, PyTree, Scalar
from .._status import Status, mark_nonfinite
from ._markov import MarkovChain, _sample_sequences
from ._model import (
    Batch,
    OneLayerTransformer,
    _population_loss,
    batch_loss,
    init_transformer,
    population_attention,
    prepare_batch,
)

# full-batch gradient descent, its learning rate injected at run time (:func:`descend` sets it)
_GD = optax.inject_hyperparams(optax.sgd)(learning_rate=0.0)


class TrainState(eqx.Module):
    """Model, optimiser state and step count of one training run."""

    model: OneLayerTransformer
    opt_state: optax.OptState
    step: Int[Array, ""]


def train_init(
    model: OneLayerTransformer, optimizer: optax.GradientTransformation, lr: Float[ArrayLike, ""]
) -> TrainState:
    """Initial :class:`TrainState` with the (traced) learning rate ``lr``."""
    opt_state = optimizer.init(model)
    hyper = getattr(opt_state, "hyperparams", None)
    if hyper is None or "learning_rate" not in hyper:
        raise ValueError(
            "the optimiser must take its learning rate at run time: wrap it as "
            "optax.inject_hyperparams(optax.adam)(learning_rate=0.0)"
        )
    dtype = jnp.result_type(*jax.tree_util.tree_leaves(model))
    hyper["learning_rate"] = jnp.asarray(lr, dtype=dtype)
    return TrainState(model=model, opt_state=opt_state, step=jnp.asarray(0, jnp.int32))


def _descent_step(state: TrainState, loss_fn, optimizer) -> tuple[TrainState, Scalar]:
    loss, grads = jax.value_and_grad(loss_fn)(state.model)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.model)
    model = optax.apply_updates(state.model, updates)
    return TrainState(model=model, opt_state=opt_state, step=state.step + 1), loss


def train_step(
    state: TrainState, batch: Batch, optimizer: optax.GradientTransformation
) -> tuple[TrainState, Scalar]:
    """One full-batch step on the mean last-token cross-entropy of ``batch`` (a
    :class:`Batch` from :func:`prepare_batch`, built once outside the training loop)."""
    return _descent_step(state, lambda model: batch_loss(model, batch), optimizer)


def position_entropy(model: OneLayerTransformer, sequences: Int[ArrayLike, "n s1"]) -> Scalar:
    """Mean entropy of the last-token attention over positions, divided by ``log s``
    (1 = uniform over the ``s`` input positions)."""
    from ..attention import attention_entropy

    x = jnp.asarray(sequences)[:, :-1]
    a = jax.vmap(model.attention)(x)
    return jnp.mean(attention_entropy(a)) / jnp.log(x.shape[1])


class TrainingRun(AbstractResult):
    """Recorded training curve (leading axis = records, the first at step 0).

    Attributes:
        steps: step counts of the records.
        train_loss: the loss being descended, at each record.
        population_loss: the population loss of the model on the chain ``(pi, P)``.
        attention: its token-type attention ``w_qk`` on that chain (``population_attention``).
        position_entropy: mean last-token position-attention entropy over the training
            sequences divided by ``log s`` (``None`` without sequences).
        observed: what the ``observe`` hook returned at each record (``None`` without one).
        models: the models.
        status: a :class:`jaxdyn.Status` (``nonfinite`` if a loss or parameter is NaN).
    """

    steps: Int[Array, " R"]
    train_loss: Float[Array, " R"]
    population_loss: Float[Array, " R"]
    attention: Float[Array, "R d d"]
    position_entropy: Float[Array, " R"] | None
    observed: PyTree | None
    models: OneLayerTransformer
    status: Status


def descend(
    model: OneLayerTransformer,
    loss_fn: Callable[[OneLayerTransformer], Scalar],
    chain: MarkovChain,
    *,
    lr: Float[ArrayLike, ""],
    num_steps: int,
    record_every: int,
    optimizer: optax.GradientTransformation = _GD,
    sequences: Int[ArrayLike, "n s1"] | None = None,
    observe: Callable[[OneLayerTransformer], PyTree] | None = None,
) -> TrainingRun:
    """Full-batch descent on ``loss_fn`` from ``model`` for ``num_steps`` steps, recording every
    ``record_every`` (one ``lax.scan``; ``lr`` may be traced).

    ``loss_fn`` is e.g. ``partial(batch_loss, batch=prepare_batch(x, d))`` (sampled
    sequences, real text windows) or ``lambda m: population_loss(m, chain)`` (gradient descent
    on the population loss: the flow discretised with step ``lr``). Records are measured on the
    :class:`MarkovChain` ``chain``; ``sequences`` adds the position entropy, ``observe(model)``
    anything else.
    ``optimizer``: an optax transformation whose learning rate is injected
    (e.g. ``optax.inject_hyperparams(optax.adam)(learning_rate=0.0)``; default full-batch
    gradient descent, ``optax.sgd`` wrapped the same way).
    """
    if num_steps % record_every:
        raise ValueError(
            f"num_steps ({num_steps}) must be a multiple of record_every ({record_every})"
        )
    opt = optimizer
    state = train_init(model, opt, lr)
    pi, P = chain.pi, chain.P

    def record(st, loss):
        _, Phi = st.model.matrices()
        return (
            st.step,
            loss,
            _population_loss(st.model, pi, P),
            population_attention(Phi, pi),
            None if sequences is None else position_entropy(st.model, sequences),
            None if observe is None else observe(st.model),
            st.model,
        )

    def step(st, _):
        return _descent_step(st, loss_fn, opt)

    def block(st, _):
        # unroll=2: two steps per loop iteration halve the while-loop overhead, which is a
        # sizeable part of a step this small (same operations, same results)
        st, losses = jax.lax.scan(step, st, None, length=record_every, unroll=2)
        return st, record(st, losses[-1])

    first = record(state, loss_fn(state.model))
    state, recs = jax.lax.scan(block, state, None, length=num_steps // record_every)
    recs = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), first, recs)
    steps, tl, pl, att, pe, obs, models = recs
    return TrainingRun(
        steps=steps,
        train_loss=tl,
        population_loss=pl,
        attention=att,
        position_entropy=pe,
        observed=obs,
        models=models,
        status=mark_nonfinite(Status.successful, (tl, pl, models)),
    )


def train_finite(
    key: Key,
    chain: MarkovChain,
    *,
    n: int,
    s: int,
    m: int,
    m_attn: int,
    eps: Float[ArrayLike, ""],
    lr: Float[ArrayLike, ""],
    num_steps: int,
    record_every: int,
    optimizer: optax.GradientTransformation = _GD,
    init_key: Key | None = None,
    initial: Float[ArrayLike, " d"] | None = None,
) -> TrainingRun:
    """Sample ``n`` sequences of ``s + 1`` tokens from ``chain`` (first token ``~ initial``,
    default uniform), initialise at scale ``eps`` and train for ``num_steps`` full-batch steps,
    recording every ``record_every`` steps (:func:`descend`).

    ``init_key`` (default: derived from ``key``) fixes the initialisation separately from the
    data, so the population flow can start from the same parameters. ``eps``, ``lr`` and the
    chain may be traced; ``n``, ``s``, widths and step counts are static.
    """
    k_data, k_init = jax.random.split(key)
    if init_key is not None:
        k_init = init_key
    P = chain.P
    d = P.shape[0]
    data = _sample_sequences(k_data, P, n, s + 1, initial)
    batch = prepare_batch(data, d, P.dtype)
    model = init_transformer(k_init, d, m, m_attn, eps, dtype=P.dtype)
    return descend(
        model,
        lambda mm: batch_loss(mm, batch),
        chain,
        lr=lr,
        num_steps=num_steps,
        record_every=record_every,
        optimizer=optimizer,
        sequences=data,
    )
