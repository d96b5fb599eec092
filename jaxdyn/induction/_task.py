"""In-context Markov chains and their Bayes-optimal in-context predictors (induction.md, "Task").

Each sequence draws its own transition matrix, rows iid ``Dirichlet(alpha 1_k)``, and a chain
``x_0, ..., x_{T-1}`` from it with ``x_0`` uniform. Nothing about the matrix carries over
between sequences, so a predictor can only use the sequence's own context: the in-context
*unigram* predictor (the posterior mean of a categorical under the same Dirichlet prior,
``(n_j + alpha) / (t + 1 + k alpha)`` after ``t + 1`` tokens) and the in-context *bigram*
predictor, the posterior mean of the row of the current token,
``(n(x_t -> j) + alpha) / (n(x_t -> .) + k alpha)``. The bigram predictor is the exact posterior
predictive of the data-generating prior (``x_0`` is uniform and independent of the matrix), so
its expected loss is the Bayes risk of the task.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray


class InContextMarkov(eqx.Module):
    """The in-context Markov-chain task: ``states`` states, sequences of ``length`` tokens,
    transition rows iid ``Dirichlet(concentration)``.

    Attributes:
        states: the number of states ``k`` (the vocabulary), >= 2.
        length: the sequence length ``T``, >= 2.
        concentration: the Dirichlet parameter ``alpha`` > 0 of every row (1: uniform on the
            simplex).
        in_context: ``False`` draws one transition matrix per *key* of :meth:`sample` and
            uses it for every sequence of the batch: a counterfactual task whose statistics do
            not change from sequence to sequence (the in-context predictors are then not the
            best a network can do).
    """

    states: int = eqx.field(static=True)
    length: int = eqx.field(static=True)
    concentration: float = eqx.field(static=True, default=1.0)
    in_context: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if self.states < 2:
            raise ValueError(f"states must be >= 2, got {self.states}")
        if self.length < 2:
            raise ValueError(f"length must be >= 2, got {self.length}")
        if not self.concentration > 0:
            raise ValueError(f"concentration must be > 0, got {self.concentration}")

    def transition_matrices(self, key: PRNGKeyArray, batch: int) -> Float[Array, "batch k k"]:
        """``batch`` transition matrices with rows iid ``Dirichlet(alpha)`` (one matrix
        repeated when ``in_context`` is false)."""
        k = self.states
        n = batch if self.in_context else 1
        if self.concentration == 1.0:
            # Dirichlet(1, ..., 1) is exactly iid Exp(1) draws normalised by their sum (uniform
            # on the simplex), without the gamma sampler's rejection loop
            e = jax.random.exponential(key, (n, k, k))
            P = e / e.sum(-1, keepdims=True)
        else:
            P = jax.random.dirichlet(key, jnp.full((k,), self.concentration), shape=(n, k))
        return jnp.broadcast_to(P, (batch, k, k))

    @eqx.filter_jit
    def sample(self, key: PRNGKeyArray, batch: int) -> Int[Array, "batch T"]:
        """``batch`` sequences, each from its own transition matrix (``x_0`` uniform)."""
        k_P, k0, k_u = jax.random.split(key, 3)
        cdf = jnp.cumsum(self.transition_matrices(k_P, batch), axis=-1)  # (batch, k, k)
        x0 = jax.random.randint(k0, (batch,), 0, self.states)
        u = jax.random.uniform(k_u, (self.length - 1, batch, 1), dtype=cdf.dtype)

        # inverse-CDF sampling of x_{t+1} from row x_t, all sequences at once
        def step(x, u_t):
            row = jnp.take_along_axis(cdf, x[:, None, None], axis=1)[:, 0]
            nxt = jnp.minimum(jnp.sum(row < u_t, axis=-1), self.states - 1)
            return nxt, nxt

        _, rest = jax.lax.scan(step, x0, u)
        return jnp.concatenate([x0[:, None], rest.T], axis=1)

    def unigram(self, tokens: Int[Array, "*batch T"]) -> Float[Array, "*batch T k"]:
        """The in-context unigram predictor: ``p(x_{t+1} = j | x_{0..t})`` under an iid model
        with a ``Dirichlet(alpha)`` prior, ``(n_j(x_{0..t}) + alpha) / (t + 1 + k alpha)``."""
        k, a = self.states, self.concentration
        counts = jnp.cumsum(jax.nn.one_hot(tokens, k), axis=-2)
        seen = jnp.arange(1, tokens.shape[-1] + 1)[:, None]
        return (counts + a) / (seen + k * a)

    def bigram(self, tokens: Int[Array, "*batch T"]) -> Float[Array, "*batch T k"]:
        """The in-context bigram predictor (the task's Bayes posterior predictive): the
        posterior mean of row ``x_t``, ``(n(x_t -> j) + alpha) / (n(x_t -> .) + k alpha)``,
        counting the transitions among ``x_{0..t}``."""
        k, a = self.states, self.concentration
        onehot = jax.nn.one_hot(tokens, k)
        # transitions (x_{s-1} -> x_s) for s = 1..t, accumulated: counts[t, i, j]
        pairs = onehot[..., :-1, :, None] * onehot[..., 1:, None, :]
        counts = jnp.cumsum(pairs, axis=-3)
        zero = jnp.zeros_like(counts[..., :1, :, :])
        counts = jnp.concatenate([zero, counts], axis=-3)
        row = jnp.einsum("...ti,...tij->...tj", onehot, counts)
        return (row + a) / (row.sum(-1, keepdims=True) + k * a)

    def expected_loss(
        self, key: PRNGKeyArray, predictor, *, sequences: int = 4096
    ) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """Monte-Carlo estimate of a predictor's expected next-token cross-entropy (nats per
        predicted token, positions ``1..T-1``) over fresh sequences, and its standard error
        (sequences are the independent units).

        ``predictor(tokens) -> probabilities`` over the next token, e.g. ``task.bigram``.
        """
        return _expected_loss(self, key, predictor, sequences)


@eqx.filter_jit
def _expected_loss(task, key, predictor, sequences):
    tokens = task.sample(key, sequences)
    per_sequence = sequence_losses(jnp.log(predictor(tokens)), tokens)
    return per_sequence.mean(), per_sequence.std(ddof=1) / jnp.sqrt(sequences)


@eqx.filter_jit
def predictor_losses(predictor, tokens: Int[Array, "*batch T"]) -> Float[Array, "*batch"]:
    """Per-sequence loss (:func:`sequence_losses`) of ``predictor(tokens) -> probabilities``
    on ``tokens``, as one compiled program."""
    return sequence_losses(jnp.log(predictor(tokens)), tokens)


def sequence_losses(
    log_probs: Float[Array, "*batch T k"], tokens: Int[Array, "*batch T"]
) -> Float[Array, "*batch"]:
    """Mean next-token cross-entropy per sequence: ``-(1/(T-1)) sum_t log p_t(x_{t+1})``."""
    nxt = tokens[..., 1:]
    picked = jnp.take_along_axis(log_probs[..., :-1, :], nxt[..., None], axis=-1)[..., 0]
    return -picked.mean(-1)
