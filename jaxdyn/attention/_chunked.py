"""Memory-linear evaluation of attention over many keys (transformer_pde.md, "The model").

The dense velocity of ``m`` queries against ``n`` keys materialises an ``m x n`` score
matrix: at ``n = 100 000`` that is 40 GB in float32. Here queries and keys are both cut into
chunks; a ``lax.scan`` over key chunks keeps a running maximum, a running normaliser and a
running weighted sum (the online log-sum-exp of flash attention), and a ``lax.map`` over query
chunks bounds the live score block to ``chunk_size x chunk_size``. Each key-chunk body is
wrapped in ``jax.checkpoint`` so reverse-mode differentiation also stays linear in ``n``.

The same tiles, without ``jax.checkpoint`` and sized to stay in cache, are the dense
evaluation of a large score matrix on CPU (:func:`dense_softmax_average`,
:func:`dense_weighted_sum`): there a pass over an ``m x n`` matrix in memory costs about as
much as its exponentials.

Keys are a PyTree whose leaves share the leading axis ``n`` (e.g. token coordinates and
positions); ``score_fn(query_chunk, key_chunk)`` returns the scores of a block. Padding keys
carry ``log_weight = -inf`` (softmax) or weight zero (sums), so they never contribute.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ._weights import bounded_softmax_average, softmax_weights

ScoreFn = Callable[[PyTree, PyTree], Float[Array, "m c"]]


def _pad_leading(tree, size: int, fill=0.0):
    def pad(a):
        extra = size - a.shape[0]
        if extra == 0:
            return a
        widths = [(0, extra)] + [(0, 0)] * (a.ndim - 1)
        return jnp.pad(a, widths, constant_values=fill)

    return jax.tree_util.tree_map(pad, tree)


def _split_chunks(tree, chunk: int):
    return jax.tree_util.tree_map(lambda a: a.reshape((-1, chunk) + a.shape[1:]), tree)


def _leading(tree) -> int:
    return jax.tree_util.tree_leaves(tree)[0].shape[0]


def _map_query_chunks(fn, queries, chunk_size: int):
    """Apply ``fn(query_chunk) -> (c, ...)`` over query chunks and concatenate the rows."""
    m = _leading(queries)
    chunk = min(chunk_size, m)
    m_pad = -(-m // chunk) * chunk
    padded = _split_chunks(_pad_leading(queries, m_pad), chunk)
    out = jax.lax.map(fn, padded)
    return jax.tree_util.tree_map(lambda a: a.reshape((m_pad,) + a.shape[2:])[:m], out)


def _balanced_chunk(size: int, largest: int) -> int:
    """The chunk length that cuts ``size`` into ``ceil(size / largest)`` nearly equal chunks:
    at most one padding row per chunk instead of up to ``largest - 1`` in all."""
    count = -(-size // min(largest, size))
    return -(-size // count)


def _prepare_keys(keys, values, log_weights, chunk_size: int):
    n = _leading(keys)
    chunk = min(chunk_size, n)
    n_pad = -(-n // chunk) * chunk
    if log_weights is None and n_pad > n:
        log_weights = jnp.zeros(n, jnp.asarray(values).dtype)
    keys_c = _split_chunks(_pad_leading(keys, n_pad), chunk)
    values_c = _split_chunks(_pad_leading(values, n_pad), chunk)
    lw_c = None
    if log_weights is not None:
        lw_c = _split_chunks(_pad_leading(log_weights, n_pad, fill=-jnp.inf), chunk)
    return keys_c, values_c, lw_c


def _tiled_softmax_average(
    score_fn,
    queries,
    keys,
    values,
    log_weights,
    query_chunk,
    key_chunk,
    *,
    remat: bool,
    bound=None,
):
    """``sum_k softmax_k(s_qk + log m_k) v_k`` over tiles of ``query_chunk x key_chunk``
    scores: a ``lax.map`` over query chunks, in each a ``lax.scan`` over key chunks keeping a
    running maximum, normaliser and weighted sum (the online log-sum-exp of flash attention).

    The shift (the running maximum) is outside differentiation: the result is exactly
    invariant under it, so the gradient is the softmax average's. With a known ``bound`` on
    the scores the shift is the bound instead (no maximum, no rescaling; see
    :func:`jaxdyn.attention.bounded_softmax_average` for when that is safe). ``remat`` wraps
    each key-chunk body in ``jax.checkpoint`` (reverse mode linear in ``n``)."""
    keys_c, values_c, lw_c = _prepare_keys(keys, values, log_weights, key_chunk)
    dtype = values.dtype

    def one_query_chunk(q):
        mq = _leading(q)

        def body(carry, chunk):
            run_max, run_norm, run_acc = carry
            k, v, lw = chunk
            logits = score_fn(q, k)
            if lw is not None:
                logits = logits + lw[None, :]
            if bound is not None:
                w = jnp.exp(logits - bound)
                return (run_max, run_norm + jnp.sum(w, axis=1), run_acc + w @ v), None
            new_max = jax.lax.stop_gradient(jnp.maximum(run_max, jnp.max(logits, axis=1)))
            # Keep the shift finite while every key seen so far is masked.
            shift = jnp.where(jnp.isfinite(new_max), new_max, 0.0)
            scale = jnp.exp(run_max - shift)
            w = jnp.exp(logits - shift[:, None])
            run_norm = run_norm * scale + jnp.sum(w, axis=1)
            run_acc = run_acc * scale[:, None] + w @ v
            return (new_max, run_norm, run_acc), None

        init = (
            jnp.full(mq, -jnp.inf, dtype),
            jnp.zeros(mq, dtype),
            jnp.zeros((mq, values.shape[-1]), dtype),
        )
        step = jax.checkpoint(body) if remat else body
        (_, norm, acc), _ = jax.lax.scan(step, init, (keys_c, values_c, lw_c))
        if bound is not None:  # as bounded_softmax_average: no guard against underflow
            return acc / norm[:, None]
        return acc / jnp.where(norm > 0, norm, 1.0)[:, None]

    return _map_query_chunks(one_query_chunk, queries, query_chunk)


DENSE_ELEMENTS = 1 << 20
"""Score matrices with at most this many entries are evaluated as one matrix."""
_ROW_BLOCK = 256
"""Queries per block when a block's whole rows of scores fit in cache."""
_ROWS_IN_CACHE = 1 << 19
"""Scores (2 MB of float32) of a block of whole rows that still stays in cache."""
_TILE = (1024, 128)
"""Queries and keys per tile (512 KB of float32 scores) when whole rows do not fit."""


def _cache_chunks(m: int, n: int) -> tuple[int, int]:
    """Queries and keys per block of a dense evaluation in cache: blocks of
    :data:`_ROW_BLOCK` queries against every key while such a block has at most
    :data:`_ROWS_IN_CACHE` scores, else tiles of about :data:`_TILE` (fewer queries take more
    keys per tile, so a loop step is never tiny). Chunks are nearly equal."""
    if _ROW_BLOCK * n <= _ROWS_IN_CACHE:
        return _balanced_chunk(m, _ROW_BLOCK), n
    query_chunk = _balanced_chunk(m, _TILE[0])
    return query_chunk, _balanced_chunk(n, max(_TILE[1], _TILE[0] * _TILE[1] // query_chunk))


def _on_cpu(cpu: Callable, other: Callable):
    """``cpu()`` where the program runs on a CPU, ``other()`` elsewhere (decided when it is
    compiled). Cache-sized blocks are a CPU's choice: on a GPU each loop step would be kernel
    launches."""
    return jax.lax.platform_dependent(cpu=cpu, default=other)


def dense_softmax_average(
    score_fn: ScoreFn,
    queries: PyTree,
    keys: PyTree,
    values: Float[Array, "n p"],
    *,
    log_weights: Float[Array, " n"] | None = None,
    bound: Float[Array, ""] | None = None,
) -> Float[Array, "m p"]:
    """``softmax(score_fn(queries, keys) + log m) @ values``, every score evaluated (no memory
    bound; :func:`online_softmax_average`, same arguments, is the memory-linear variant).
    Scores may be ``-inf`` (masked keys; a query that sees no key gets zeros).

    Up to :data:`DENSE_ELEMENTS` scores: one matrix. Beyond, on CPU, blocks whose scores,
    shift, exponentials and products stay in cache (:func:`_cache_chunks`), with an online
    log-sum-exp over the key blocks: a pass over an ``m x n`` matrix in memory costs about as
    much as its exponentials. Elsewhere, blocks of :data:`_ROW_BLOCK` queries against every
    key. Each row is shifted by its (running) maximum, or by ``bound``, a known bound on the
    scores (:func:`jaxdyn.attention.bounded_softmax_average`: no maximum pass). The numbers are
    the one matrix's up to rounding; reverse mode keeps each block's exponentials, as the one
    matrix does."""
    m, n = _leading(queries), _leading(keys)
    if m * n <= DENSE_ELEMENTS:
        if bound is not None:
            return bounded_softmax_average(score_fn(queries, keys), values, bound)
        return softmax_weights(score_fn(queries, keys), log_weights=log_weights) @ values

    def blocks(query_chunk, key_chunk):
        return _tiled_softmax_average(
            score_fn, queries, keys, values, log_weights, query_chunk, key_chunk, remat=False,
            bound=bound,
        )  # fmt: skip

    return _on_cpu(
        lambda: blocks(*_cache_chunks(m, n)), lambda: blocks(_balanced_chunk(m, _ROW_BLOCK), n)
    )


def online_softmax_average(
    score_fn: ScoreFn,
    queries: PyTree,
    keys: PyTree,
    values: Float[Array, "n p"],
    *,
    log_weights: Float[Array, " n"] | None = None,
    chunk_size: int = 1024,
) -> Float[Array, "m p"]:
    """``sum_k softmax_k(s_qk + log m_k) v_k`` for every query, in O(chunk_size^2) memory.

    Scores may be ``-inf`` (masked keys). A query whose keys are all masked gets zeros, like
    :func:`jaxdyn.attention.softmax_weights`.
    """
    return _tiled_softmax_average(
        score_fn, queries, keys, values, log_weights, chunk_size, chunk_size, remat=True
    )


def _tiled_weighted_sum(weight_fn, queries, keys, values, query_chunk, key_chunk, *, remat):
    """``sum_k w(q, k) v_k`` over tiles of ``query_chunk x key_chunk`` weights: a ``lax.map``
    over query chunks, in each a ``lax.scan`` over key chunks accumulating the products.
    Padding keys are all-zero vectors with zero values, so any weight times a zero value
    vanishes. ``remat`` wraps each key-chunk body in ``jax.checkpoint``."""
    keys_c, values_c, _ = _prepare_keys(keys, values, None, key_chunk)

    def one_query_chunk(q):
        def body(acc, chunk):
            k, v = chunk
            return acc + weight_fn(q, k) @ v, None

        init = jnp.zeros((_leading(q), values.shape[-1]), values.dtype)
        acc, _ = jax.lax.scan(jax.checkpoint(body) if remat else body, init, (keys_c, values_c))
        return acc

    return _map_query_chunks(one_query_chunk, queries, query_chunk)


def dense_weighted_sum(weight_fn: ScoreFn, queries, keys, values) -> Float[Array, "m p"]:
    """``sum_k w(q, k) v_k`` for unnormalised weights, every weight evaluated: one matrix up
    to :data:`DENSE_ELEMENTS` weights; beyond, on CPU, the blocks in cache of
    :func:`dense_softmax_average` with a running sum (elsewhere one matrix). Reverse mode
    keeps each block's weights, as the one matrix does."""
    m, n = _leading(queries), _leading(keys)

    def one_matrix():
        return weight_fn(queries, keys) @ values

    if m * n <= DENSE_ELEMENTS:
        return one_matrix()
    query_chunk, key_chunk = _cache_chunks(m, n)
    return _on_cpu(
        lambda: _tiled_weighted_sum(
            weight_fn, queries, keys, values, query_chunk, key_chunk, remat=False
        ),
        one_matrix,
    )


def online_weighted_sum(
    weight_fn: ScoreFn,
    queries: PyTree,
    keys: PyTree,
    values: Float[Array, "n p"],
    *,
    chunk_size: int = 1024,
) -> Float[Array, "m p"]:
    """``sum_k w(q, k) v_k`` for unnormalised weights (sigmoid, linear), in chunks.

    ``weight_fn`` must return zero for padding keys; padding keys are all-zero vectors and
    carry zero values, so any weight times a zero value vanishes.
    """
    return _tiled_weighted_sum(weight_fn, queries, keys, values, chunk_size, chunk_size, remat=True)


def online_logsumexp(
    score_fn: ScoreFn,
    queries: PyTree,
    keys: PyTree,
    *,
    log_weights: Float[Array, " n"] | None = None,
    chunk_size: int = 1024,
) -> Float[Array, " m"]:
    """``log sum_k exp(s_qk + log m_k)`` for every query, in chunks."""
    n = _leading(keys)
    dtype = jax.tree_util.tree_leaves(keys)[0].dtype
    dummy = jnp.zeros((n, 1), dtype)
    keys_c, _, lw_c = _prepare_keys(keys, dummy, log_weights, chunk_size)

    def one_query_chunk(q):
        @jax.checkpoint
        def body(carry, chunk):
            run_max, run_sum = carry
            k, lw = chunk
            logits = score_fn(q, k)
            if lw is not None:
                logits = logits + lw[None, :]
            new_max = jnp.maximum(run_max, jnp.max(logits, axis=1))
            shift = jnp.where(jnp.isfinite(new_max), new_max, 0.0)
            run_sum = run_sum * jnp.exp(run_max - shift) + jnp.sum(
                jnp.exp(logits - shift[:, None]), axis=1
            )
            return (new_max, run_sum), None

        mq = _leading(q)
        init = (jnp.full(mq, -jnp.inf, dtype), jnp.zeros(mq, dtype))
        (run_max, run_sum), _ = jax.lax.scan(body, init, (keys_c, lw_c))
        shift = jnp.where(jnp.isfinite(run_max), run_max, 0.0)
        return shift + jnp.log(run_sum)

    return _map_query_chunks(one_query_chunk, queries, chunk_size)


def chunked_sinkhorn_potential(
    score_fn: ScoreFn,
    tokens: PyTree,
    *,
    iterations: int,
    chunk_size: int = 1024,
) -> Float[Array, " n"]:
    """Column potential ``g`` of the entropic self-coupling of the empirical measure.

    The same symmetric log-domain iterations as :func:`jaxdyn.attention.sinkhorn_log_coupling`
    (``f <- log a - LSE_k(s + g)``, ``g <- log b - LSE_q(s + f)``, ``a = b = 1/n``), with each
    log-sum-exp evaluated chunk by chunk so the ``n x n`` kernel is never stored. The
    conditional coupling of any query ``x`` is then ``softmax_k(s(x, y_k) + g_k)``.
    """
    n = _leading(tokens)
    dtype = jax.tree_util.tree_leaves(tokens)[0].dtype
    log_a = jnp.full(n, -jnp.log(n), dtype)

    def transposed(k, q):
        return score_fn(q, k).T

    def body(_, fg):
        f, g = fg
        f = log_a - online_logsumexp(score_fn, tokens, tokens, log_weights=g, chunk_size=chunk_size)
        g = log_a - online_logsumexp(
            transposed, tokens, tokens, log_weights=f, chunk_size=chunk_size
        )
        return f, g

    zeros = jnp.zeros(n, dtype)
    _, g = jax.lax.fori_loop(0, iterations, body, (zeros, zeros))
    return g
