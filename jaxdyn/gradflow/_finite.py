"""Finite-(N, s) training against the population flow (focus_dilution.md, "Population loss"):
gradient descent (or Adam) on ``n`` sampled sequences of length ``s``, one compiled program for
every size, and its two population references from the same initialisation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._flow import population_flow
from ._markov import MarkovChain, sample_sequences
from ._metrics import trajectory_metrics
from ._model import Batch, init_transformer, population_loss
from ._train import descend


def prefix_batch(sequences, n, s, d: int):
    """The :class:`Batch` of the first ``n`` sequences cut to their first ``s + 1`` tokens
    (``n``, ``s`` traced; the arrays keep the padded shape), and ``n_max / n``, the factor that
    turns the padded mean into the mean over the ``n`` sequences. A prefix of a chain sampled
    from ``x_1`` is a sample of the shorter length, so one padded draw serves every size."""
    n_max, s_max = sequences.shape[0], sequences.shape[1] - 1
    dtype = jnp.result_type(float)
    inputs = jax.nn.one_hot(sequences[:, :-1], d, dtype=dtype)
    inputs = inputs * (jnp.arange(s_max) < s)[None, :, None].astype(dtype)
    used = (jnp.arange(n_max) < n).astype(dtype)
    batch = Batch(
        query=jax.nn.one_hot(sequences[:, s - 1], d, dtype=dtype).T,
        log_counts=jnp.log(jnp.sum(inputs, axis=1)).T,
        targets=(jax.nn.one_hot(sequences[:, s], d, dtype=dtype) * used[:, None]).T,
    )
    return batch, n_max / n


# the optimisers compared, learning rate injected at run time (descend sets it)
OPTIMIZERS = {
    "gd": optax.inject_hyperparams(optax.sgd)(learning_rate=0.0),
    "adam": optax.inject_hyperparams(optax.adam)(learning_rate=0.0),
}


def finite_member(
    chain: MarkovChain, n_max, s_max, *, m, m_attn, eps, num_steps, record_every, optimizer: str
):
    """``member(params, key)`` for a sweep over ``params = {"n", "s", "size", "lr"}``: the
    optimiser on ``n`` sampled sequences of length ``s`` (drawn at the largest size and cut; the
    data key folded with ``size`` so that sizes draw independently), from the initialisation
    of the key's second half (:func:`population_references` uses the same)."""

    def member(params, key):
        k_data, k_init = jax.random.split(key)
        sequences = sample_sequences(
            jax.random.fold_in(k_data, params["size"]), chain, n_max, s_max + 1
        )
        batch, scale = prefix_batch(sequences, params["n"], params["s"], chain.d)
        tr = descend(
            init_transformer(k_init, chain.d, m, m_attn, eps),
            lambda mm: scale * batch.loss(mm),
            chain,
            lr=params["lr"],
            num_steps=num_steps,
            record_every=record_every,
            optimizer=OPTIMIZERS[optimizer],
        )
        return {
            "population_loss": tr.population_loss,
            "attention": tr.attention,
            "status": tr.status,
        }

    return member


def population_references(
    chain: MarkovChain, seeds, *, m, m_attn, eps, lr, num_steps, record_every, flow: bool
) -> dict[str, np.ndarray]:
    """Per seed, from :func:`finite_member`'s initialisation: gradient descent on the population
    loss with the same step (``loss_descent``, ``attention_descent``) and, with ``flow``, the
    flow at the record times (``loss_flow``, ``attention_flow``)."""
    ts = jnp.arange(num_steps // record_every + 1) * record_every * lr

    def one(seed):
        model0 = init_transformer(
            jax.random.split(jax.random.key(seed))[1], chain.d, m, m_attn, eps
        )
        ref = descend(
            model0,
            lambda mm: population_loss(mm, chain),
            chain,
            lr=lr,
            num_steps=num_steps,
            record_every=record_every,
        )
        out = {"loss_descent": ref.population_loss, "attention_descent": ref.attention}
        if flow:
            metrics = trajectory_metrics(population_flow(model0, chain, ts).models, chain)
            out.update(loss_flow=metrics["loss"], attention_flow=metrics["attention"])
        return out

    return {k: np.asarray(v) for k, v in jax.jit(jax.vmap(one))(jnp.asarray(seeds)).items()}


def trajectory_errors(size, ok, loss, attention, refs: dict, sizes) -> list[dict]:
    """Per size ``(n, s)`` (``size``: each run's index into ``sizes``): the maxima over the
    trajectory of ``|loss - reference|`` and ``max_qk |w_qk - w*_qk|`` of the runs that finished
    (``ok``), against each reference of ``refs`` (:func:`population_references`)."""
    references = [k.split("_", 1)[1] for k in refs if k.startswith("loss_")]
    rows = []
    for i, (n, s) in enumerate(sizes):
        sel = np.asarray(size) == i
        good = np.asarray(ok)[sel]
        row = {"n": n, "s": s, "ok": int(good.sum())}
        for ref in references:
            err = np.max(np.abs(np.asarray(loss)[sel] - refs[f"loss_{ref}"]), axis=1)
            row[f"loss_error_{ref}"] = err[good]
            err = np.max(
                np.abs(np.asarray(attention)[sel] - refs[f"attention_{ref}"]), axis=(1, 2, 3)
            )
            row[f"attention_error_{ref}"] = err[good]
        rows.append(row)
    return rows


def finite_checks(run, rows: list[dict]) -> None:
    """Records on ``run`` that the errors against gradient descent on the population loss shrink
    as a power law in ``h = max(n^-1/2, 1/s)`` (``claims.finite_converges``; the loss sits on one
    target per sequence, ``n^-1/2``, and a window of ``s`` keys estimates the key distribution with
    an ``O(1/s)`` bias of the softmax), the fits, and each size's mean and standard error."""
    from .._numerics import fit_power_law
    from . import claims

    h = np.concatenate([np.full(r["ok"], max(r["n"] ** -0.5, 1.0 / r["s"])) for r in rows])
    fits = {}
    for what in ("loss", "attention"):
        err = np.concatenate([r[f"{what}_error_descent"] for r in rows])
        fits[f"{what}_error_descent"] = fit_power_law(h, err).as_dict()
        run.evidence(
            f"finite_converges[{what}]",
            claims.finite_converges(what, h, err),
            note=f"max over the trajectory of |{what} difference| between GD on samples and GD "
            "on the population loss (same step, same initialisation), power law in "
            "h = max(n^-1/2, 1/s) over (size, seed) runs",
        )
    run.scalar("error_fits", fits)
    run.scalar(
        "max_errors_mean_and_se",
        {
            f"n{r['n']}_s{r['s']}": {
                k: [float(np.mean(v)), float(np.std(v, ddof=1) / np.sqrt(len(v)))]
                for k, v in r.items()
                if k.endswith(("descent", "flow"))
            }
            for r in rows
        },
    )
