"""An attention-only transformer with causal masking (induction.md, "Model").

Token embedding plus a learned positional embedding make the residual stream; each layer is one
causal softmax attention head whose output is added to the stream,
``h <- h + softmax(mask(h W_Q (h W_K)^T / sqrt(d_head))) h W_V W_O``, and an unembedding reads
next-token logits off the final stream. No MLPs and no normalisation: the only way to use the
context is attention, so a previous-token head (layer 1) composed with an induction head
(layer 2) is the circuit that implements the in-context bigram predictor.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray


class AttentionOnlyTransformer(eqx.Module):
    """Causal attention-only transformer, one head per layer, parameters as stacked arrays.

    Construct with ``AttentionOnlyTransformer(key=..., states=k, length=T, width=d,
    layers=2)``; the layer axis of ``queries``, ``keys_``, ``values`` and ``outputs`` is
    ``layers``.

    Attributes:
        embedding: ``(k, d)`` token embedding.
        positional: ``(T, d)`` learned positional embedding.
        queries, keys_, values: ``(layers, d, d_head)`` projections.
        outputs: ``(layers, d_head, d)`` output projections into the residual stream.
        unembedding: ``(d, k)``.
    """

    embedding: Float[Array, "k d"]
    positional: Float[Array, "length d"]
    queries: Float[Array, "layers d h"]
    keys_: Float[Array, "layers d h"]
    values: Float[Array, "layers d h"]
    outputs: Float[Array, "layers h d"]
    unembedding: Float[Array, "d k"]

    def __init__(
        self,
        *,
        key: PRNGKeyArray,
        states: int,
        length: int,
        width: int,
        layers: int = 2,
        head_width: int | None = None,
        init_scale: float = 1.0,
        dtype=None,
    ):
        for name, v in (("states", states), ("length", length), ("width", width)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v}")
        if layers < 1:
            raise ValueError(f"layers must be >= 1, got {layers}")
        h = width if head_width is None else head_width
        if h < 1:
            raise ValueError(f"head_width must be >= 1, got {h}")
        dtype = jnp.result_type(float) if dtype is None else dtype
        ks = jax.random.split(key, 7)

        def normal(k, shape, fan_in):
            return init_scale * jax.random.normal(k, shape, dtype) / jnp.sqrt(fan_in)

        self.embedding = normal(ks[0], (states, width), 1.0)
        self.positional = normal(ks[1], (length, width), 1.0)
        self.queries = normal(ks[2], (layers, width, h), width)
        self.keys_ = normal(ks[3], (layers, width, h), width)
        self.values = normal(ks[4], (layers, width, h), width)
        self.outputs = normal(ks[5], (layers, h, width), h)
        self.unembedding = normal(ks[6], (width, states), width)

    @property
    def num_layers(self) -> int:
        return self.queries.shape[0]

    def forward(
        self, tokens: Int[Array, " T"]
    ) -> tuple[Float[Array, "T k"], Float[Array, "layers T T"]]:
        """Next-token log-probabilities at every position and each layer's attention pattern
        (row ``t``: the attention of position ``t`` over positions ``s <= t``)."""
        T = tokens.shape[0]
        if T > self.positional.shape[0]:
            raise ValueError(f"{T} tokens exceed the model's length {self.positional.shape[0]}")
        h = self.embedding[tokens] + self.positional[:T]
        causal = jnp.tril(jnp.ones((T, T), bool))
        scale = 1.0 / jnp.sqrt(self.queries.shape[-1])
        patterns = []
        for layer in range(self.num_layers):
            q = h @ self.queries[layer]
            k = h @ self.keys_[layer]
            scores = jnp.where(causal, scale * q @ k.T, -jnp.inf)
            A = jax.nn.softmax(scores, axis=-1)
            h = h + A @ (h @ self.values[layer]) @ self.outputs[layer]
            patterns.append(A)
        return jax.nn.log_softmax(h @ self.unembedding, axis=-1), jnp.stack(patterns)

    def __call__(self, tokens: Int[Array, " T"]) -> Float[Array, "T k"]:
        """Next-token log-probabilities ``(T, k)``."""
        return self.forward(tokens)[0]
